#include "tools/bench/concurrent.h"

#include <glob.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <memory>
#include <thread>

#include "base/log.h"
#include "base/units.h"
#include "tools/bench/concurrent_ceiling.h"
#include "tools/bench/concurrent_clients.h"
#include "tools/bench/scratch.h"
#include "tools/bench/stats.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

// Runs the rounds of every (N, variant) in the options' modes and keeps their rows.
class Coordinator {
 public:
  explicit Coordinator(const ConcurrentOptions& o) : o_(o), w_(o), ceiling_(w_) {}

  ConcurrentReport Run() {
    const double wall0 = NowSeconds();
    const bool embedded = o_.mode != "service", service = o_.mode != "embedded";
    for (uint32_t n : w_.ns()) {
      for (Variant v : w_.variants()) {
        const uint32_t rounds = w_.Plan(v, n).rounds;
        if (embedded && service && o_.interleave) {
          // Both arms open side by side; round i runs embedded then service (i even) or
          // service then embedded (i odd), so a machine that changes speed over a run meets
          // both arms alike.
          EmbeddedArm e = OpenEmbedded(v, n);
          ServiceArm s = OpenService(v, n);
          for (uint32_t round = 0; round < rounds; ++round) {
            if (round % 2 == 0) EmbeddedRound(e, round);
            ServiceRound(s, round);
            if (round % 2 == 1) EmbeddedRound(e, round);
          }
          report_.rows.push_back(CloseEmbedded(e));
          report_.rows.push_back(CloseService(s));
          report_.rows.back().embedded_gib_s =
              report_.rows[report_.rows.size() - 2].aggregate_median;
          continue;
        }
        double embedded_gib_s = 0;
        if (embedded) {
          EmbeddedArm e = OpenEmbedded(v, n);
          for (uint32_t round = 0; round < rounds; ++round) EmbeddedRound(e, round);
          report_.rows.push_back(CloseEmbedded(e));
          embedded_gib_s = report_.rows.back().aggregate_median;
        }
        if (service) {
          ServiceArm s = OpenService(v, n);
          for (uint32_t round = 0; round < rounds; ++round) ServiceRound(s, round);
          report_.rows.push_back(CloseService(s));
          report_.rows.back().embedded_gib_s = embedded_gib_s;
        }
      }
      FinishCeiling(n);
    }
    report_.device = w_.device().capabilities().name;
    report_.geometry = w_.geometry();
    report_.row_bytes = w_.row_bytes();
    report_.total_bytes = w_.total_tokens() * w_.row_bytes();
    report_.wall_s = NowSeconds() - wall0;
    return std::move(report_);
  }

 private:
  void FinishCeiling(uint32_t n) {
    const std::optional<ConcurrentCeiling::Measured> c = ceiling_.Finish(n);
    if (c.has_value()) {
      report_.ceiling_gib_s[n] = c->gib_s;
      report_.ceiling_config[n] = c->config;
    }
    for (ConcurrentRow& r : report_.rows) {
      if (r.n != n) continue;
      r.ceiling_gib_s = c.has_value() ? c->gib_s : 0;
      r.ceiling_config = c.has_value() ? c->config : "";
    }
  }

  ConcurrentRow Start(const RunPlan& p, ConcurrentMode mode) const {
    ConcurrentRow r;
    r.mode = mode;
    r.variant = p.variant;
    r.n = p.n;
    r.request_tokens = p.tokens;
    r.stores = p.stores;
    r.restores = p.restores;
    r.bytes_per_rep = uint64_t{p.n} * p.tokens * w_.row_bytes();
    return r;
  }

  // One timed repetition's bookkeeping, the same for both modes. `timelines` are absolute;
  // t0 is the round's start.
  void Record(ConcurrentRow& r, uint32_t round, double t0, double wall,
              const std::vector<RequestTimeline>& timelines) {
    const double gib_s = static_cast<double>(r.bytes_per_rep) / kGiB / wall;
    ConcurrentProgress(o_, "%s %s N=%u rep %u: %.3f s, %.2f GiB/s%s", ModeName(r.mode),
                       VariantName(r.variant), r.n, round, wall, gib_s,
                       round < o_.warmups ? " (warm-up)" : "");
    if (round < o_.warmups) return;
    r.aggregate_gib_s.push_back(gib_s);
    for (size_t i = 0; i < timelines.size(); ++i) {
      const RequestTimeline& t = timelines[i];
      // Requests [0, restores) restore, the rest store (ConcurrentWorkload::RunRequest).
      const bool store = i >= r.restores && r.restores > 0;
      (store ? r.store_latencies_s : r.latencies_s).push_back(t.latency());
      r.timelines.push_back(t.Minus(t0));
    }
  }

  static void Finish(ConcurrentRow& r) {
    r.aggregate_median = Median(r.aggregate_gib_s);
    r.p50 = Percentile(r.latencies_s, 0.50);
    r.p90 = Percentile(r.latencies_s, 0.90);
    r.p99 = Percentile(r.latencies_s, 0.99);
    r.store_p50 = Percentile(r.store_latencies_s, 0.50);
    r.store_p99 = Percentile(r.store_latencies_s, 0.99);
  }

  // One timed round of N requests from N threads of this process, request i on engine_of(i):
  // prepared (untimed), started together, joined, checked and verified after the last ends.
  void TimeRound(const RunPlan& p, uint32_t round,
                 const std::function<Engine&(uint32_t)>& engine_of,
                 std::vector<std::unique_ptr<PagedKvSpace>>& kv,
                 std::vector<std::vector<int32_t>>& prompts, ConcurrentRow& r) {
    const uint32_t n = p.n;
    for (uint32_t i = 0; i < n; ++i) w_.PrepareRequest(p, round, i, *kv[i], &prompts[i]);
    ceiling_.PassBeforeRound(n, round);
    std::vector<RequestTimeline> timelines(n);
    std::vector<Status> status(n);
    std::atomic<uint32_t> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        status[i] = w_.RunRequest(engine_of(i), p, round, i, *kv[i], prompts[i], &timelines[i]);
      });
    }
    while (ready.load() != n) std::this_thread::yield();
    const double t0 = NowSeconds();
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    const double wall = NowSeconds() - t0;
    for (uint32_t i = 0; i < n; ++i) ConcurrentCheck(status[i], "request " + std::to_string(i));
    for (uint32_t i = 0; i < n; ++i) r.verify_failures += w_.VerifyRequest(p, i, *kv[i]);
    Record(r, round, t0, wall, timelines);
  }

  // The N requests' paged KV and prompts (restores: their prefix; stores get theirs per round).
  void OpenRequests(const RunPlan& p, std::vector<std::unique_ptr<PagedKvSpace>>* kv,
                    std::vector<std::vector<int32_t>>* prompts) const {
    kv->resize(p.n);
    for (uint32_t i = 0; i < p.n; ++i) (*kv)[i] = w_.Space(p, i);
    prompts->resize(p.n);
    for (uint32_t i = 0; i < p.restores; ++i) (*prompts)[i] = w_.Prompt(p, i);
  }

  // One mode's run of a (variant, N): opened (its store, its engine or the service and its
  // clients, the prefixes stored untimed), then its rounds timed one at a time, then closed.
  struct EmbeddedArm {
    RunPlan p;
    ConcurrentRow r;
    std::unique_ptr<ScratchDir> scratch;
    std::unique_ptr<Engine> engine;
    std::vector<std::unique_ptr<PagedKvSpace>> kv;  // one paged KV per request
    std::vector<std::vector<int32_t>> prompts;      // restores: their prefix; stores: per round
  };

  EmbeddedArm OpenEmbedded(Variant variant, uint32_t n) {
    EmbeddedArm a;
    a.p = w_.Plan(variant, n);
    a.r = Start(a.p, ConcurrentMode::kEmbedded);
    Result<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Make(o_.dir, "rangekv-concurrent-");
    if (!scratch.ok()) ConcurrentFail(scratch.status().ToString());
    a.scratch = std::move(*scratch);
    const EngineOptions eo = w_.Options(a.p, a.scratch->Join("store"), "");
    Result<std::unique_ptr<Engine>> opened = Engine::Open(eo);
    if (!opened.ok()) ConcurrentFail("open: " + opened.status().ToString());
    a.engine = std::move(*opened);
    OpenRequests(a.p, &a.kv, &a.prompts);
    w_.StorePrefixes(*a.engine, a.p, a.kv);
    // The engine's read concurrency: its read I/O engine's threads (read_io_threads as resolved
    // at Open), which the ceiling's grid includes.
    ceiling_.Begin(a.p, eo.store_dir + "/packs.rkv", a.engine->options().tuning.read_io_threads);
    return a;
  }

  void EmbeddedRound(EmbeddedArm& a, uint32_t round) {
    TimeRound(
        a.p, round, [&](uint32_t) -> Engine& { return *a.engine; }, a.kv, a.prompts, a.r);
  }

  ConcurrentRow CloseEmbedded(EmbeddedArm& a) {
    ConcurrentCheck(a.engine->Close(), "close");
    ceiling_.KeepStore(a.p, std::move(a.scratch));
    Finish(a.r);
    return a.r;
  }

  struct ServiceArm {
    RunPlan p;
    ConcurrentRow r;
    std::unique_ptr<ScratchDir> scratch;
    std::unique_ptr<service::StoreService> svc;
    std::string socket;
    std::vector<ClientProcess> clients;  // clients "processes"
    // clients "threads": N engines of this process, each a session of the service.
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<std::unique_ptr<PagedKvSpace>> kv;
    std::vector<std::vector<int32_t>> prompts;
  };

  ServiceArm OpenService(Variant variant, uint32_t n) {
    ServiceArm a;
    a.p = w_.Plan(variant, n);
    const bool threads = o_.clients == "threads";
    a.r = Start(a.p, threads ? ConcurrentMode::kServiceThreads : ConcurrentMode::kService);
    std::signal(SIGPIPE, SIG_IGN);  // a client that died is reported by its closed stdout
    Result<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Make(o_.dir, "rangekv-concurrent-");
    if (!scratch.ok()) ConcurrentFail(scratch.status().ToString());
    a.scratch = std::move(*scratch);
    service::ServiceOptions so;
    so.root = a.scratch->Join("service");
    so.socket_path = a.scratch->Join("rangekv.sock");
    so.default_quota_bytes = a.p.capacity_bytes;
    so.read_slots = o_.read_gate;
    a.socket = so.socket_path;
    Result<std::unique_ptr<service::StoreService>> svc = service::StoreService::Start(so);
    if (!svc.ok()) ConcurrentFail("store service: " + svc.status().ToString());
    a.svc = std::move(*svc);
    std::string pack_path;
    uint32_t read_io_threads = 0;
    {
      // Untimed, from this process: the prefixes, through the service.
      Result<std::unique_ptr<Engine>> opened = Engine::Open(w_.Options(a.p, "", a.socket));
      if (!opened.ok()) ConcurrentFail("open: " + opened.status().ToString());
      std::vector<std::unique_ptr<PagedKvSpace>> kv(a.p.prefixes);
      for (uint32_t i = 0; i < a.p.prefixes; ++i) kv[i] = w_.Space(a.p, i);
      w_.StorePrefixes(**opened, a.p, kv);
      glob_t g{};
      if (glob((so.root + "/*/*/packs.rkv").c_str(), 0, nullptr, &g) != 0 || g.gl_pathc != 1) {
        ConcurrentFail("the service's pack file was not found under " + so.root);
      }
      pack_path = g.gl_pathv[0];
      globfree(&g);
      read_io_threads = (*opened)->options().tuning.read_io_threads;
      ConcurrentCheck((*opened)->Close(), "close");
    }
    ceiling_.Begin(a.p, pack_path, read_io_threads);  // with mode service: the N's first store
    if (threads) {
      for (uint32_t i = 0; i < n; ++i) {
        Result<std::unique_ptr<Engine>> opened = Engine::Open(w_.Options(a.p, "", a.socket));
        if (!opened.ok()) ConcurrentFail("open: " + opened.status().ToString());
        a.engines.push_back(std::move(*opened));
      }
      OpenRequests(a.p, &a.kv, &a.prompts);
    } else {
      for (uint32_t i = 0; i < n; ++i) {
        a.clients.push_back(ClientProcess::Spawn(o_, a.p, i, a.socket));
      }
      for (ClientProcess& c : a.clients) c.AwaitReady();
    }
    return a;
  }

  void ServiceRound(ServiceArm& a, uint32_t round) {
    if (!a.engines.empty()) {  // timed as an embedded round times its threads
      TimeRound(
          a.p, round, [&](uint32_t i) -> Engine& { return *a.engines[i]; }, a.kv, a.prompts, a.r);
    } else {
      ProcessRound(a, round);
    }
  }

  // The client processes start up and prepare a round, and end, inside the arm's own open and
  // rounds: with interleave no client work overlaps an embedded round.
  void ProcessRound(ServiceArm& a, uint32_t round) {
    const uint32_t n = a.p.n;
    ceiling_.PassBeforeRound(n, round);
    const double t0 = NowSeconds();
    for (ClientProcess& c : a.clients) c.Go();
    double last_end = t0;
    std::vector<RequestTimeline> timelines(n);
    for (uint32_t i = 0; i < n; ++i) {
      timelines[i] = a.clients[i].AwaitDone(i);
      last_end = std::max(last_end, timelines[i].end);
    }
    for (ClientProcess& c : a.clients) c.Verify();
    for (ClientProcess& c : a.clients) a.r.verify_failures += c.AwaitVerified();
    Record(a.r, round, t0, last_end - t0, timelines);
    if (round + 1 < a.p.rounds) {
      for (ClientProcess& c : a.clients) c.AwaitReady();  // the next round's paged KV
    } else {
      ReapClients(a);
    }
  }

  static void ReapClients(ServiceArm& a) {
    for (ClientProcess& c : a.clients) c.Reap();
    a.clients.clear();
  }

  ConcurrentRow CloseService(ServiceArm& a) {
    for (auto& e : a.engines) ConcurrentCheck(e->Close(), "close");
    ReapClients(a);  // when the last round did not
    ConcurrentCheck(a.svc->Stop(), "store service stop");
    ceiling_.KeepStore(a.p, std::move(a.scratch));  // as CloseEmbedded does
    Finish(a.r);
    return a.r;
  }

  const ConcurrentOptions& o_;
  const ConcurrentWorkload w_;
  ConcurrentCeiling ceiling_;
  ConcurrentReport report_;
};

}  // namespace

uint64_t ConcurrentReport::verify_failures() const {
  uint64_t v = 0;
  for (const ConcurrentRow& r : rows) v += r.verify_failures;
  return v;
}

ConcurrentReport RunConcurrentBench(const ConcurrentOptions& options) {
  SetMinLogLevel(LogLevel::kWarning);
  Coordinator c(options);
  return c.Run();
}

}  // namespace rangekv::tools
