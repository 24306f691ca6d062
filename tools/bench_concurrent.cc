// `rangekv bench concurrent`: many requests at once (docs/design.md "Many requests at once").
// For each N of --n, a fixed total payload (--size) is split into N requests started together
// from N threads, in three variants:
//   distinct     N restores, each of its own prefix (size / N);
//   same-prefix  N restores of one prefix (size / N), each into its own paged KV;
//   mixed        N/2 restores of distinct prefixes and N - N/2 stores of new prompts (size / N
//                each), restores and stores in flight together (N = 1: one store).
// Each variant runs in a fresh store (O_DIRECT in a scratch directory); its prefixes are stored
// untimed first. A repetition is timed from the common start to the last request's end;
// aggregate GiB/s = bytes moved / that time. Per-request latency: Lookup -> last layer ready
// (restore), BeginStore -> visible (store). Every restore is verified bit for bit outside the
// timed region. The read ceiling is the one `bench restore` measures (MeasureReadCeiling: the
// engine's read I/O thread count of threads of plain pread of the same stripe extents), taken on
// the distinct variant's prefixes of each N.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/units.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

struct ConcurrentFlags {
  std::string device = "auto";
  std::string io = "posix";
  std::string size = "256MiB";
  std::string n_list = "1,2,4,8,16";
  std::string stripe = "8MiB";
  std::string dir;
  std::string json_path;
  uint32_t reps = 2;
  uint32_t warmups = 1;
  uint32_t ceiling_threads = 0;
  uint64_t seed = 20261202;
  bool buffered = false;
  bool quiet = false;
};

enum class Variant : uint8_t { kDistinct, kSamePrefix, kMixed };
const char* VariantName(Variant v) {
  return v == Variant::kDistinct ? "distinct" : v == Variant::kSamePrefix ? "same-prefix" : "mixed";
}

struct RunResult {
  Variant variant = Variant::kDistinct;
  uint32_t n = 0;
  uint32_t restores = 0, stores = 0;
  uint64_t request_tokens = 0;
  uint64_t bytes_per_rep = 0;
  std::vector<double> aggregate_gib_s;  // per timed repetition
  double aggregate_median = 0;
  std::vector<double> latencies_s;  // every request of every timed repetition
  double p50 = 0, p90 = 0, p99 = 0;
  double ceiling_gib_s = 0;
  uint64_t verify_failures = 0;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "rangekv bench concurrent: %s\n", what.c_str());
  throw CLI::RuntimeError(1);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::vector<int32_t> Tokens(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 128000);
  return t;
}

RequestEnvelope Envelope(const std::string& id) {
  RequestEnvelope e;
  e.request_id = id;
  e.session_id = 1;
  return e;
}

class Bench {
 public:
  explicit Bench(const ConcurrentFlags& f) : f_(f) {}

  void Setup() {
    model_ = Llama31_8BSpec();
    Result<uint64_t> stripe = ParseBytes(f_.stripe);
    if (!stripe.ok()) Fail("--stripe: " + stripe.status().ToString());
    Result<Geometry> g = DeriveGeometry(model_, *stripe);
    if (!g.ok()) Fail(g.status().ToString());
    geometry_ = *g;
    Result<uint64_t> size = ParseBytes(f_.size);
    if (!size.ok()) Fail("--size: " + size.status().ToString());
    row_bytes_ = uint64_t{geometry_.layers} * geometry_.token_bytes;
    total_tokens_ = *size / row_bytes_;
    std::stringstream ss(f_.n_list);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      const int n = std::stoi(item);
      if (n < 1 || n > 64) Fail("--n: each N must be in [1, 64]");
      ns_.push_back(static_cast<uint32_t>(n));
    }
    if (ns_.empty()) Fail("--n is empty");
    if (total_tokens_ < *std::max_element(ns_.begin(), ns_.end())) {
      Fail("--size must hold at least one token (" + FormatBytes(row_bytes_) + ") per request");
    }
    DeviceOptions dopt;
    dopt.kind = f_.device == "host"   ? DeviceKind::kHost
                : f_.device == "cuda" ? DeviceKind::kCuda
                                      : DeviceKind::kAuto;
    Result<std::unique_ptr<Device>> d = MakeDevice(dopt);
    if (!d.ok()) Fail(d.status().ToString());
    device_ = std::move(d).value();
  }

  void Progress(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (f_.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    std::fputs("bench concurrent: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
  }

  RunResult Run(Variant variant, uint32_t n) {
    RunResult r;
    r.variant = variant;
    r.n = n;
    r.request_tokens = total_tokens_ / n;
    const uint64_t P = r.request_tokens;
    r.stores = variant == Variant::kMixed ? n - n / 2 : 0;
    r.restores = n - r.stores;
    r.bytes_per_rep = uint64_t{n} * P * row_bytes_;
    const uint32_t rounds = f_.warmups + f_.reps;
    const uint64_t T = geometry_.tokens_per_stripe;
    const uint64_t packs_per_request = (P + T - 1) / T;
    const uint32_t prefixes = variant == Variant::kSamePrefix ? 1 : r.restores;

    Result<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Make(f_.dir, "rangekv-concurrent-");
    if (!scratch.ok()) Fail(scratch.status().ToString());
    EngineOptions eo;
    eo.store_dir = (*scratch)->Join("store");
    eo.model = model_;
    eo.stripe_bytes = geometry_.stripe_bytes;
    eo.capacity_bytes =
        (prefixes + uint64_t{r.stores} * rounds + 1) * packs_per_request * geometry_.pack_bytes;
    eo.device = f_.device == "host"   ? DeviceSelection::kHost
                : f_.device == "cuda" ? DeviceSelection::kCuda
                                      : DeviceSelection::kAuto;
    Result<IoEngineKind> io = ParseIoEngineKind(f_.io);
    if (!io.ok()) Fail("--io: " + io.status().ToString());
    eo.io_engine =
        *io == IoEngineKind::kUring ? IoEngineSelection::kUring : IoEngineSelection::kPosix;
    eo.direct_io = f_.buffered ? DirectIoPreference::kOff : DirectIoPreference::kPreferred;
    eo.max_request_tokens = std::max<uint64_t>(eo.max_request_tokens, P + 1);
    // Every request of a round holds a job slot (plus the lookup-time prefetch it adopts).
    eo.max_inflight_restores = std::max<uint32_t>(eo.max_inflight_restores, n);
    eo.max_inflight_stores = std::max<uint32_t>(eo.max_inflight_stores, n);
    Result<std::unique_ptr<Engine>> opened = Engine::Open(eo);
    if (!opened.ok()) Fail("open: " + opened.status().ToString());
    Engine& engine = **opened;
    // The engine's read concurrency: its read I/O engine's threads (read_io_threads as
    // resolved at Open), which is what the ceiling's pread threads stand for.
    const uint32_t read_threads = engine.options().read_io_threads;

    // One paged KV per request; restores of prefix i use the pattern seed seed + i.
    std::vector<std::unique_ptr<PagedKvSpace>> kv(n);
    for (uint32_t i = 0; i < n; ++i) {
      auto space = PagedKvSpace::Make(*device_, geometry_, P + 1, f_.seed + 1000 + i);
      if (!space.ok()) Fail(space.status().ToString());
      kv[i] = std::move(space).value();
    }
    auto prefix_seed = [&](uint32_t i) { return f_.seed + (variant == Variant::kSamePrefix ? 0 : i); };
    std::vector<std::vector<int32_t>> prompts(n);
    for (uint32_t i = 0; i < r.restores; ++i) {
      prompts[i] = Tokens(P + 1, prefix_seed(i) * 7919 + 1);
    }
    // Untimed: store each distinct prefix once.
    for (uint32_t i = 0; i < prefixes; ++i) {
      Check(kv[i]->Fill(prefix_seed(i), 0, P), "fill");
      double unused = 0;
      Check(Store(engine, *kv[i], std::span<const int32_t>(prompts[i]).first(P), "setup" +
                                                                                     std::to_string(i),
                  &unused),
            "setup store");
    }
    if (variant == Variant::kDistinct) {
      std::vector<CeilingPayload> payloads;
      for (uint32_t i = 0; i < prefixes; ++i) payloads.push_back({P, prefix_seed(i)});
      const uint32_t threads = f_.ceiling_threads != 0 ? f_.ceiling_threads : read_threads;
      auto c = MeasureReadCeiling(*device_, eo.store_dir + "/packs.rkv", geometry_, payloads,
                                  threads, f_.buffered, f_.warmups, f_.reps);
      if (!c.ok()) Fail("ceiling: " + c.status().ToString());
      ceiling_[n] = Median(*c);
      Progress("N=%u ceiling (%u threads pread): %.2f GiB/s", n, threads, ceiling_[n]);
    }
    r.ceiling_gib_s = ceiling_.count(n) != 0 ? ceiling_[n] : 0;

    for (uint32_t round = 0; round < rounds; ++round) {
      // Stores of this round write new prompts from the pattern already in their paged KV.
      std::vector<std::vector<int32_t>> fresh(n);
      for (uint32_t i = r.restores; i < n; ++i) {
        fresh[i] = Tokens(P, f_.seed * 31 + round * 1000 + i);
        Check(kv[i]->Fill(f_.seed + 500 + i, 0, P), "fill");
      }
      for (uint32_t i = 0; i < r.restores; ++i) Check(kv[i]->Poison(), "poison");
      std::vector<double> latency(n, 0);
      std::vector<Status> status(n);
      std::atomic<uint32_t> ready{0};
      std::atomic<bool> go{false};
      std::vector<std::thread> threads;
      double t0 = 0;
      for (uint32_t i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
          ready.fetch_add(1);
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
          status[i] = i < r.restores ? Restore(engine, *kv[i], prompts[i], P, id, &latency[i])
                                     : Store(engine, *kv[i], fresh[i], id, &latency[i]);
        });
      }
      while (ready.load() != n) std::this_thread::yield();
      t0 = NowSeconds();
      go.store(true, std::memory_order_release);
      for (auto& t : threads) t.join();
      const double wall = NowSeconds() - t0;
      for (uint32_t i = 0; i < n; ++i) Check(status[i], "request " + std::to_string(i));
      for (uint32_t i = 0; i < r.restores; ++i) {
        auto bad = kv[i]->CountMismatches(prefix_seed(i), 0, P);
        if (!bad.ok()) Fail(bad.status().ToString());
        r.verify_failures += *bad;
      }
      const double gib_s = static_cast<double>(r.bytes_per_rep) / kGiB / wall;
      Progress("%s N=%u rep %u: %.3f s, %.2f GiB/s%s", VariantName(variant), n, round, wall, gib_s,
               round < f_.warmups ? " (warm-up)" : "");
      if (round < f_.warmups) continue;
      r.aggregate_gib_s.push_back(gib_s);
      r.latencies_s.insert(r.latencies_s.end(), latency.begin(), latency.end());
    }
    r.aggregate_median = Median(r.aggregate_gib_s);
    r.p50 = Percentile(r.latencies_s, 0.50);
    r.p90 = Percentile(r.latencies_s, 0.90);
    r.p99 = Percentile(r.latencies_s, 0.99);
    Status closed = engine.Close();
    if (!closed.ok()) Fail("close: " + closed.ToString());
    return r;
  }

  void RunAll() {
    const double wall0 = NowSeconds();
    for (uint32_t n : ns_) {
      for (Variant v : {Variant::kDistinct, Variant::kSamePrefix, Variant::kMixed}) {
        results_.push_back(Run(v, n));
      }
    }
    wall_s_ = NowSeconds() - wall0;
  }

  void Print() const {
    std::printf("rangekv bench concurrent: %s per round (split over N requests), %s per token, "
                "stripe %s, device %s\n",
                FormatBytes(total_tokens_ * row_bytes_).c_str(), FormatBytes(row_bytes_).c_str(),
                FormatBytes(geometry_.stripe_bytes).c_str(), device_->capabilities().name.c_str());
    std::printf("%-12s %4s %4s %4s %10s %9s %9s %9s %9s %9s %8s\n", "variant", "N", "rst", "sto",
                "agg GiB/s", "x ceiling", "p50 ms", "p90 ms", "p99 ms", "p99/p50", "verify");
    for (const RunResult& r : results_) {
      std::printf("%-12s %4u %4u %4u %10.2f %9.2f %9.1f %9.1f %9.1f %9.2f %8s\n",
                  VariantName(r.variant), r.n, r.restores, r.stores, r.aggregate_median,
                  r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0, r.p50 * 1e3,
                  r.p90 * 1e3, r.p99 * 1e3, r.p50 > 0 ? r.p99 / r.p50 : 0,
                  r.verify_failures == 0 ? "ok" : "FAILED");
    }
    MachineInfo m = DescribeMachine(f_.dir.empty() ? "/var/tmp" : f_.dir);
    std::printf("machine: %u cores, %.1f GiB, Linux %s, %s; %s; wall %.0f s\n", m.nproc,
                m.memory_gib, m.kernel.c_str(), m.file_system.c_str(), m.date.c_str(), wall_s_);
  }

  nlohmann::json Json() const {
    nlohmann::json j;
    j["workload"] = "concurrent";
    j["device"] = device_->capabilities().name;
    j["io"] = f_.io;
    j["direct"] = !f_.buffered;
    j["model"] = "Llama-3.1-8B";
    j["stripe_bytes"] = geometry_.stripe_bytes;
    j["total_bytes"] = total_tokens_ * row_bytes_;
    j["reps"] = f_.reps;
    j["warmups"] = f_.warmups;
    j["machine"] = DescribeMachine(f_.dir.empty() ? "/var/tmp" : f_.dir).ToJson();
    j["wall_s"] = wall_s_;
    nlohmann::json rs = nlohmann::json::array();
    for (const RunResult& r : results_) {
      nlohmann::json x;
      x["variant"] = VariantName(r.variant);
      x["n"] = r.n;
      x["restores"] = r.restores;
      x["stores"] = r.stores;
      x["request_tokens"] = r.request_tokens;
      x["bytes_per_rep"] = r.bytes_per_rep;
      x["aggregate_gib_s"] = r.aggregate_median;
      x["aggregate_samples_gib_s"] = r.aggregate_gib_s;
      x["ceiling_gib_s"] = r.ceiling_gib_s;
      x["ratio_to_ceiling"] = r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0;
      x["latency_p50_s"] = r.p50;
      x["latency_p90_s"] = r.p90;
      x["latency_p99_s"] = r.p99;
      x["p99_over_p50"] = r.p50 > 0 ? r.p99 / r.p50 : 0;
      x["verify_failures"] = r.verify_failures;
      rs.push_back(x);
    }
    j["results"] = rs;
    return j;
  }

  uint64_t verify_failures() const {
    uint64_t v = 0;
    for (const RunResult& r : results_) v += r.verify_failures;
    return v;
  }

 private:
  static void Check(const Status& s, const std::string& what) {
    if (!s.ok()) Fail(what + ": " + s.ToString());
  }

  Status Store(Engine& engine, PagedKvSpace& kv, std::span<const int32_t> path,
               const std::string& id, double* seconds) {
    StoreRequest rq;
    rq.envelope = Envelope(id);
    rq.tokens = path;
    rq.kv = &kv.engine_kv();
    rq.slot_mapping = std::span<const int64_t>(kv.slots()).first(path.size());
    const double t0 = NowSeconds();
    RANGEKV_ASSIGN_OR_RETURN(StoreHandle h, engine.BeginStore(rq));
    for (uint32_t l = 0; l < geometry_.layers; ++l) RANGEKV_RETURN_IF_ERROR(h.LayerProduced(l));
    StoreOutcome out = h.Finish(StoreWait::kUntilVisible);
    *seconds = NowSeconds() - t0;
    RANGEKV_RETURN_IF_ERROR(out.status);
    if (!out.visible) return Internal("store " + id + " did not become visible");
    return OkStatus();
  }

  Status Restore(Engine& engine, PagedKvSpace& kv, std::span<const int32_t> prompt, uint64_t end,
                 const std::string& id, double* seconds) {
    const RequestEnvelope env = Envelope(id);
    const double t0 = NowSeconds();
    RANGEKV_ASSIGN_OR_RETURN(LookupResult lr, engine.Lookup(env, prompt, 1));
    if (lr.hit_tokens < end) {
      engine.ReleaseRequest(env);
      return Internal("lookup of " + id + " hit " + std::to_string(lr.hit_tokens) + " tokens");
    }
    RestoreRequest rq;
    rq.ticket = lr.ticket;
    rq.envelope = env;
    rq.tokens = prompt;
    rq.endpoint_tokens = end;
    RANGEKV_ASSIGN_OR_RETURN(RestoreHandle h, engine.StartRestore(rq));
    RANGEKV_RETURN_IF_ERROR(
        h.BindSlots(kv.engine_kv(), std::span<const int64_t>(kv.slots()).first(end)));
    for (uint32_t l = 0; l < geometry_.layers; ++l) RANGEKV_RETURN_IF_ERROR(h.WaitLayer(l));
    *seconds = NowSeconds() - t0;
    RestoreOutcome out = h.Finish();
    engine.ReleaseRequest(env);
    RANGEKV_RETURN_IF_ERROR(out.status);
    if (out.delivered_tokens != end) return Internal("restore " + id + " was partial");
    return OkStatus();
  }

  const ConcurrentFlags& f_;
  ModelSpec model_;
  Geometry geometry_;
  uint64_t row_bytes_ = 0;
  uint64_t total_tokens_ = 0;
  std::vector<uint32_t> ns_;
  std::unique_ptr<Device> device_;
  std::map<uint32_t, double> ceiling_;
  std::vector<RunResult> results_;
  double wall_s_ = 0;
};

void RunConcurrent(const ConcurrentFlags& f) {
  SetMinLogLevel(LogLevel::kWarning);
  Bench b(f);
  b.Setup();
  b.RunAll();
  b.Print();
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << b.Json().dump(1) << "\n";
    if (!out) Fail("cannot write " + f.json_path);
  }
  if (b.verify_failures() != 0) throw CLI::RuntimeError(2);
}

}  // namespace

void AddBenchConcurrentCommand(CLI::App& bench) {
  auto f = std::make_shared<ConcurrentFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "concurrent",
      "N concurrent restores (distinct prefixes, one shared prefix) and a mixed restore + store "
      "load: aggregate GiB/s against the read ceiling, per-request latency percentiles");
  cmd->add_option("--device", f->device, "host | cuda | auto")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--io", f->io, "I/O engine: posix | uring")
      ->check(CLI::IsMember({"posix", "uring"}))
      ->capture_default_str();
  cmd->add_option("--size", f->size, "total payload of one round, split into N requests")
      ->capture_default_str();
  cmd->add_option("--n", f->n_list, "comma-separated request counts")->capture_default_str();
  cmd->add_option("--stripe", f->stripe, "stripe size W of the store (pack = 32 x W)")
      ->capture_default_str();
  cmd->add_option("--dir", f->dir, "parent of the scratch stores (default $TMPDIR or /var/tmp)");
  cmd->add_option("--json", f->json_path, "write the results as JSON to this file");
  cmd->add_option("--reps", f->reps, "timed rounds per (variant, N)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--warmups", f->warmups, "untimed rounds first")
      ->check(CLI::Range(0u, 100u))
      ->capture_default_str();
  cmd->add_option("--ceiling-threads", f->ceiling_threads,
                  "threads of the read ceiling (0: the engine's read I/O threads)")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "payload and token seed")->capture_default_str();
  cmd->add_flag("--buffered", f->buffered, "buffered I/O instead of O_DIRECT");
  cmd->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  cmd->callback([f] { RunConcurrent(*f); });
}

}  // namespace rangekv::tools
