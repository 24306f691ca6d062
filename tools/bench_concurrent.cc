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
// (restore), BeginStore -> visible (store), with percentiles per kind (a mixed row prints its
// restores' and its stores' apart). Every restore is verified bit for bit outside the
// timed region. The read ceiling is the best cell of a short grid of plain-pread configurations
// (threads x request sizes over the distinct variant's stripe extents) read once before every
// round of the N, the median of those passes (BeginCeiling, CeilingPass).
//
// --mode service | both: the same rounds through a node-wide store service
// (docs/store-service.md) started in-process for each (variant, N), every request in its own
// client process (`rangekv bench concurrent-client`, spawned from this binary: each opens its own
// Engine with store_service = unix://..., so N processes share one store as N vLLM instances
// would). The prefixes are stored untimed by this process through the service; a round is timed
// from the moment every client reported ready (its paged KV filled or poisoned) to the last
// client's end (CLOCK_MONOTONIC, one clock for every process on Linux). Each client verifies its
// own restore bit for bit, untimed, and only once every client has reported its end (a client
// that verified, or filled its next round's paged KV, while others still restored would load
// the machine under their timed restores; embedded verifies after the round's threads joined).
// With --mode both, every service row also reports its
// aggregate over the embedded row of the same (variant, N) measured in the same run; with
// --interleave the two rows' rounds alternate (embedded and its clients opened side by side,
// rounds in ABBA order), so a machine whose speed drifts over the run meets both alike.
//
// Phases: every request keeps the instants it passed (Timeline: started, lookup answered,
// restore started and slots bound, first and last layer ready, finished and released; a store:
// started, begun, visible), and each row prints their medians from the round's start, so a
// service row shows where it loses time against its embedded row (a late start, the lookup's
// round trip, the reads).
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/cpus.h"
#include "base/log.h"
#include "base/units.h"
#include "engine/options.h"
#include "service/store_service.h"
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
  std::string ceiling_passes = "round";  // round: before every round; end: after the N's rounds
  uint64_t seed = 20261202;
  bool buffered = false;
  bool quiet = false;
  std::string mode = "embedded";  // embedded | service | both
  uint32_t client_read_threads = 0;  // service clients' read_io_threads (0: the engine's auto)
  uint32_t client_read_workers = 0;  // service clients' read_workers (0: the engine's default)
  uint32_t client_read_banks = 0;    // service clients' read_banks (0: the engine's default)
  uint32_t embedded_read_banks = 0;  // the embedded engine's read_banks (0: its default)
  uint32_t embedded_read_workers = 0;  // the embedded engine's read_workers (0: its default)
  uint32_t embedded_read_threads = 0;  // the embedded engine's read_io_threads (0: its auto)
  std::string variants = "distinct,same-prefix,mixed";
  bool interleave = false;                 // --mode both: the two arms' rounds in turn (RunAll)
  std::string client_share_reads = "off";  // service clients' EngineOptions::share_reads
  // The in-process service's read gate (ServiceOptions::read_slots) and every client's
  // EngineOptions::read_gate; 0: none. The default is rangekv serve's (--read-slots auto).
  uint32_t read_gate = engine_internal::NodeReadSlots(UsableCpus());
  bool pin_clients = false;  // service client i runs on the i-th of N equal shares of the CPUs
  // service clients: "processes" (one per request, the deployment's shape) or "threads" (N
  // engines in this process, each its own session): tells what separate processes cost apart
  // from what N engines cost.
  std::string clients = "processes";
};

// What a client process of the service mode is told, besides the flags above.
struct ClientFlags {
  std::string socket;
  std::string variant;
  uint32_t n = 0;
  uint32_t index = 0;
};

enum class Mode : uint8_t { kEmbedded, kService, kServiceThreads };
const char* ModeName(Mode m) {
  return m == Mode::kEmbedded ? "embedded" : m == Mode::kService ? "service" : "svc-thrd";
}

enum class Variant : uint8_t { kDistinct, kSamePrefix, kMixed };
const char* VariantName(Variant v) {
  return v == Variant::kDistinct ? "distinct" : v == Variant::kSamePrefix ? "same-prefix" : "mixed";
}

Variant ParseVariant(const std::string& v) {
  return v == "distinct" ? Variant::kDistinct : v == "same-prefix" ? Variant::kSamePrefix
                                                                   : Variant::kMixed;
}

struct RunResult {
  Mode mode = Mode::kEmbedded;
  Variant variant = Variant::kDistinct;
  uint32_t n = 0;
  uint32_t restores = 0, stores = 0;
  uint64_t request_tokens = 0;
  uint64_t bytes_per_rep = 0;
  std::vector<double> aggregate_gib_s;  // per timed repetition
  double aggregate_median = 0;
  // Per-request latency of every timed repetition, by kind: a mixed row's restores and stores
  // are two distributions (tens of ms against hundreds), so their percentiles are kept apart.
  // p50/p90/p99 are the restores' (the stores' in a row without restores).
  std::vector<double> latencies_s;
  std::vector<double> store_latencies_s;
  double p50 = 0, p90 = 0, p99 = 0;
  double store_p50 = 0, store_p99 = 0;  // a mixed row's stores
  double ceiling_gib_s = 0;             // the best read ceiling of this N (BeginCeiling)
  std::string ceiling_config;
  double embedded_gib_s = 0;  // service rows under --mode both: the embedded row's aggregate
  uint64_t verify_failures = 0;
  std::vector<struct Timeline> timelines;  // every request of every timed repetition
};

// The instants one request passed, in seconds from its round's start (the steady clock, which
// is CLOCK_MONOTONIC in every process). A store fills start, bound (BeginStore returned) and
// last (visible) = end.
struct Timeline {
  double start = 0, looked_up = 0, bound = 0, first = 0, last = 0, end = 0;
  double latency() const { return last - start; }
  Timeline Minus(double t0) const {
    return {start - t0, looked_up - t0, bound - t0, first - t0, last - t0, end - t0};
  }
};

// The shape of one (variant, N) run, the same in this process and in every client process.
struct RunPlan {
  Variant variant = Variant::kDistinct;
  uint32_t n = 0;
  uint64_t tokens = 0;  // per request (P)
  uint32_t restores = 0, stores = 0;
  uint32_t prefixes = 0;  // stored untimed first
  uint32_t rounds = 0;
  uint64_t capacity_bytes = 0;
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
    std::stringstream vs(f_.variants);
    std::vector<std::string> named;
    while (std::getline(vs, item, ',')) named.push_back(item);
    for (const std::string& v : named) {
      if (v != "distinct" && v != "same-prefix" && v != "mixed") {
        Fail("--variants: '" + v + "' is none of distinct, same-prefix, mixed");
      }
    }
    for (Variant v : {Variant::kDistinct, Variant::kSamePrefix, Variant::kMixed}) {
      if (std::find(named.begin(), named.end(), VariantName(v)) != named.end()) {
        variants_.push_back(v);
      }
    }
    if (variants_.empty()) Fail("--variants is empty");
    if (f_.interleave && f_.mode != "both") Fail("--interleave needs --mode both");
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

  RunPlan Plan(Variant variant, uint32_t n) const {
    RunPlan p;
    p.variant = variant;
    p.n = n;
    p.tokens = total_tokens_ / n;
    p.stores = variant == Variant::kMixed ? n - n / 2 : 0;
    p.restores = n - p.stores;
    p.prefixes = variant == Variant::kSamePrefix ? 1 : p.restores;
    p.rounds = f_.warmups + f_.reps;
    const uint64_t T = geometry_.tokens_per_stripe;
    const uint64_t packs_per_request = (p.tokens + T - 1) / T;
    p.capacity_bytes = (p.prefixes + uint64_t{p.stores} * p.rounds + 1) * packs_per_request *
                       geometry_.pack_bytes;
    return p;
  }

  // One engine's read counts from the --client-read-* or --embedded-read-* flags (0 keeps the
  // engine's own): read workers (lookahead at least as deep), read I/O threads, read banks
  // (prefetch capped one below).
  static void SizeReads(EngineOptions& eo, uint32_t workers, uint32_t threads, uint32_t banks) {
    eo.read_io_threads = threads;
    if (workers != 0) {
      eo.read_workers = workers;
      eo.lookahead_layers = std::max(eo.lookahead_layers, workers);
    }
    if (banks != 0) {
      eo.read_banks = banks;
      eo.prefetch_banks = std::min(eo.prefetch_banks, banks - 1);
    }
  }

  // Engine options of every engine of a run: embedded at `store_dir`, or a client of the
  // service at `socket`.
  EngineOptions Options(const RunPlan& p, const std::string& store_dir,
                        const std::string& socket) const {
    EngineOptions eo;
    eo.store_dir = store_dir;
    if (!socket.empty()) {
      eo.store_service = "unix://" + socket;
      eo.tenant = "bench";
      eo.share_reads = f_.client_share_reads == "on";
      eo.read_gate = f_.read_gate > 0;
      SizeReads(eo, f_.client_read_workers, f_.client_read_threads, f_.client_read_banks);
    } else {
      SizeReads(eo, f_.embedded_read_workers, f_.embedded_read_threads, f_.embedded_read_banks);
    }
    eo.model = model_;
    eo.stripe_bytes = geometry_.stripe_bytes;
    eo.capacity_bytes = p.capacity_bytes;
    eo.device = f_.device == "host"   ? DeviceSelection::kHost
                : f_.device == "cuda" ? DeviceSelection::kCuda
                                      : DeviceSelection::kAuto;
    Result<IoEngineKind> io = ParseIoEngineKind(f_.io);
    if (!io.ok()) Fail("--io: " + io.status().ToString());
    eo.io_engine =
        *io == IoEngineKind::kUring ? IoEngineSelection::kUring : IoEngineSelection::kPosix;
    eo.direct_io = f_.buffered ? DirectIoPreference::kOff : DirectIoPreference::kPreferred;
    eo.max_request_tokens = std::max<uint64_t>(eo.max_request_tokens, p.tokens + 1);
    // Every request of a round holds a job slot (plus the lookup-time prefetch it adopts).
    eo.max_inflight_restores = std::max<uint32_t>(eo.max_inflight_restores, p.n);
    eo.max_inflight_stores = std::max<uint32_t>(eo.max_inflight_stores, p.n);
    return eo;
  }

  uint64_t PrefixSeed(const RunPlan& p, uint32_t i) const {
    return f_.seed + (p.variant == Variant::kSamePrefix ? 0 : i);
  }
  std::vector<int32_t> Prompt(const RunPlan& p, uint32_t i) const {
    return Tokens(p.tokens + 1, PrefixSeed(p, i) * 7919 + 1);
  }
  std::vector<int32_t> Fresh(const RunPlan& p, uint32_t round, uint32_t i) const {
    return Tokens(p.tokens, f_.seed * 31 + round * 1000 + i);
  }

  std::unique_ptr<PagedKvSpace> Space(const RunPlan& p, uint32_t i) {
    auto space = PagedKvSpace::Make(*device_, geometry_, p.tokens + 1, f_.seed + 1000 + i);
    if (!space.ok()) Fail(space.status().ToString());
    return std::move(space).value();
  }

  // Request i of a round, untimed part first: stores fill their paged KV with a new pattern
  // and get this round's new prompt in `tokens`; restores poison theirs (their `tokens` stay
  // the prompt of their prefix).
  void PrepareRequest(const RunPlan& p, uint32_t round, uint32_t i, PagedKvSpace& kv,
                      std::vector<int32_t>* tokens) {
    if (i < p.restores) {
      Check(kv.Poison(), "poison");
    } else {
      Check(kv.Fill(f_.seed + 500 + i, 0, p.tokens), "fill");
      *tokens = Fresh(p, round, i);
    }
  }
  Status RunRequest(Engine& engine, const RunPlan& p, uint32_t round, uint32_t i,
                    PagedKvSpace& kv, const std::vector<int32_t>& tokens, Timeline* t) {
    const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
    if (i < p.restores) return Restore(engine, kv, tokens, p.tokens, id, t);
    return Store(engine, kv, tokens, id, t);
  }
  uint64_t VerifyRequest(const RunPlan& p, uint32_t i, PagedKvSpace& kv) {
    if (i >= p.restores) return 0;
    auto bad = kv.CountMismatches(PrefixSeed(p, i), 0, p.tokens);
    if (!bad.ok()) Fail(bad.status().ToString());
    return *bad;
  }

  // Untimed: stores each distinct prefix once (into kv[0, prefixes)).
  void StorePrefixes(Engine& engine, const RunPlan& p,
                     std::vector<std::unique_ptr<PagedKvSpace>>& kv) {
    for (uint32_t i = 0; i < p.prefixes; ++i) {
      Check(kv[i]->Fill(PrefixSeed(p, i), 0, p.tokens), "fill");
      const std::vector<int32_t> prompt = Prompt(p, i);
      Timeline unused;
      Check(Store(engine, *kv[i], std::span<const int32_t>(prompt).first(p.tokens),
                  "setup" + std::to_string(i), &unused),
            "setup store");
    }
  }

  // The medium's best read ceiling of each N, measured beside the rounds. On the distinct
  // variant's store, before its first round: a short grid of plain-pread configurations (the
  // engine's read I/O threads and 16, each with whole stripe extents, 4 MiB and 1 MiB requests;
  // --ceiling-threads fixes the threads), one pass per cell, picks the fastest cell. That cell
  // then reads the payload once right before every round of every variant and mode of the N,
  // and the N's ceiling is the median of the passes before timed rounds. Every "x ceiling" is
  // against it, as `bench restore` states its ratios against its grid's best re-measured in
  // its rounds. Why beside: the dev VM's disk changes speed over seconds (after minutes of load
  // it reads at about half the rate for a while), so a ceiling taken before all rounds or after
  // them measured another disk than the rounds met ("x ceiling" from 0.72 to 2.3 within one
  // run, docs/benchmarks.md 2026-12-05).
  //
  // --ceiling-passes end instead measures the grid and then the best cell (with the bench's
  // warm-ups and repetitions) once every variant of the N has run: on the H200 with tmpfs the
  // passes slowed the embedded rounds that followed them in the same process (22-35 GiB/s
  // against 37-43 without; the client processes' rounds did not slow), which tilts `--mode
  // both`'s comparison; use `end` for that comparison there.
  void BeginCeiling(const RunPlan& p, const std::string& pack_path, uint32_t read_threads) {
    if (p.variant != Variant::kDistinct || (ceiling_state_ && ceiling_state_->n == p.n)) return;
    std::vector<CeilingPayload> payloads;
    for (uint32_t i = 0; i < p.prefixes; ++i) payloads.push_back({p.tokens, PrefixSeed(p, i)});
    auto probe = ReadCeilingProbe::Make(*device_, pack_path, geometry_, payloads, f_.buffered);
    if (!probe.ok()) Fail("ceiling: " + probe.status().ToString());
    CeilingState st;
    st.n = p.n;
    st.probe = std::move(probe).value();
    st.read_threads = read_threads;
    ceiling_state_ = std::move(st);
    if (f_.ceiling_passes == "round") PickCeilingCell();
  }

  // The grid (one pass per cell) and its fastest cell.
  void PickCeilingCell() {
    CeilingState& st = *ceiling_state_;
    std::vector<uint32_t> threads = {f_.ceiling_threads != 0 ? f_.ceiling_threads
                                                             : st.read_threads};
    if (f_.ceiling_threads == 0 && st.read_threads != 16) threads.push_back(16);
    const uint32_t n = st.n;
    double best_gib_s = 0;
    for (uint32_t t : threads) {
      for (uint64_t request : {uint64_t{0}, 4 * kMiB, 1 * kMiB}) {
        auto c = st.probe->Measure(t, request, /*warmups=*/0, /*reps=*/1);
        if (!c.ok()) Fail("ceiling: " + c.status().ToString());
        Progress(
            "N=%u ceiling grid pread: %2u threads x %s: %.2f GiB/s", n, t,
            request == 0 ? "stripe extents" : (std::to_string(request / kMiB) + " MiB").c_str(),
            c->front());
        if (c->front() > best_gib_s) {
          best_gib_s = c->front();
          st.threads = t;
          st.request = request;
        }
      }
    }
    st.config = std::to_string(st.threads) + " threads x " +
                (st.request == 0 ? std::string("stripe extents")
                                 : std::to_string(st.request / kMiB) + " MiB requests") +
                ", best of a grid of " + std::to_string(threads.size() * 3);
    Progress("N=%u best ceiling cell: %s", n, st.config.c_str());
  }

  // One pass of the N's best ceiling cell, right before round `round` (untimed).
  void CeilingPass(uint32_t n, uint32_t round) {
    if (!ceiling_state_ || ceiling_state_->n != n || f_.ceiling_passes != "round") return;
    CeilingState& st = *ceiling_state_;
    auto c = st.probe->Measure(st.threads, st.request, /*warmups=*/0, /*reps=*/1);
    if (!c.ok()) Fail("ceiling: " + c.status().ToString());
    Progress("N=%u ceiling pass before round %u: %.2f GiB/s%s", n, round, c->front(),
             round < f_.warmups ? " (warm-up)" : "");
    if (round >= f_.warmups) st.samples.push_back(c->front());
  }

  // The distinct variant's store stays until the N's last variant has run (its pack is what
  // the ceiling passes read).
  void KeepCeilingStore(const RunPlan& p, std::unique_ptr<ScratchDir> scratch) {
    if (ceiling_state_ && ceiling_state_->n == p.n && !ceiling_state_->scratch) {
      ceiling_state_->scratch = std::move(scratch);
    }
  }

  void FinishCeiling(uint32_t n) {
    if (ceiling_state_ && ceiling_state_->n == n && f_.ceiling_passes == "end") {
      PickCeilingCell();
      CeilingState& st = *ceiling_state_;
      auto c = st.probe->Measure(st.threads, st.request, f_.warmups, f_.reps);
      if (!c.ok()) Fail("ceiling: " + c.status().ToString());
      st.samples = *c;
    }
    if (ceiling_state_ && ceiling_state_->n == n && !ceiling_state_->samples.empty()) {
      ceiling_[n] = Median(ceiling_state_->samples);
      ceiling_config_[n] = ceiling_state_->config + ", median of " +
                           std::to_string(ceiling_state_->samples.size()) + " passes";
    }
    ceiling_state_.reset();  // closes the probe, removes the kept store
    for (RunResult& r : results_) {
      if (r.n != n) continue;
      r.ceiling_gib_s = ceiling_.count(n) != 0 ? ceiling_[n] : 0;
      r.ceiling_config = ceiling_config_.count(n) != 0 ? ceiling_config_[n] : "";
    }
  }

  // One timed repetition's bookkeeping, the same for both modes.
  // `timelines` are absolute; t0 is the round's start.
  void Record(RunResult& r, uint32_t round, double t0, double wall,
              const std::vector<Timeline>& timelines) {
    const double gib_s = static_cast<double>(r.bytes_per_rep) / kGiB / wall;
    Progress("%s %s N=%u rep %u: %.3f s, %.2f GiB/s%s", ModeName(r.mode), VariantName(r.variant),
             r.n, round, wall, gib_s, round < f_.warmups ? " (warm-up)" : "");
    if (round < f_.warmups) return;
    r.aggregate_gib_s.push_back(gib_s);
    for (size_t i = 0; i < timelines.size(); ++i) {
      const Timeline& t = timelines[i];
      // Requests [0, restores) restore, the rest store (RunRequest).
      const bool store = i >= r.restores && r.restores > 0;
      (store ? r.store_latencies_s : r.latencies_s).push_back(t.latency());
      r.timelines.push_back(t.Minus(t0));
    }
  }

  RunResult Start(const RunPlan& p, Mode mode) const {
    RunResult r;
    r.mode = mode;
    r.variant = p.variant;
    r.n = p.n;
    r.request_tokens = p.tokens;
    r.stores = p.stores;
    r.restores = p.restores;
    r.bytes_per_rep = uint64_t{p.n} * p.tokens * row_bytes_;
    return r;
  }

  void Finish(RunResult& r) {
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
                 std::vector<std::vector<int32_t>>& prompts, RunResult& r) {
    const uint32_t n = p.n;
    for (uint32_t i = 0; i < n; ++i) PrepareRequest(p, round, i, *kv[i], &prompts[i]);
    CeilingPass(n, round);
    std::vector<Timeline> timelines(n);
    std::vector<Status> status(n);
    std::atomic<uint32_t> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        status[i] = RunRequest(engine_of(i), p, round, i, *kv[i], prompts[i], &timelines[i]);
      });
    }
    while (ready.load() != n) std::this_thread::yield();
    const double t0 = NowSeconds();
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    const double wall = NowSeconds() - t0;
    for (uint32_t i = 0; i < n; ++i) Check(status[i], "request " + std::to_string(i));
    for (uint32_t i = 0; i < n; ++i) r.verify_failures += VerifyRequest(p, i, *kv[i]);
    Record(r, round, t0, wall, timelines);
  }

  // The N requests' paged KV (restores of prefix i use the pattern seed PrefixSeed(i)) and
  // prompts (restores: their prefix; stores get theirs per round).
  void OpenRequests(const RunPlan& p, std::vector<std::unique_ptr<PagedKvSpace>>* kv,
                    std::vector<std::vector<int32_t>>* prompts) {
    kv->resize(p.n);
    for (uint32_t i = 0; i < p.n; ++i) (*kv)[i] = Space(p, i);
    prompts->resize(p.n);
    for (uint32_t i = 0; i < p.restores; ++i) (*prompts)[i] = Prompt(p, i);
  }

  // One mode's run of a (variant, N): opened (its store, its engine or the service and its
  // clients, the prefixes stored untimed), then its rounds timed one at a time, then closed.
  // RunAll times an arm's rounds in a row, or (--interleave) the embedded and the service arm
  // of the same (variant, N) round by round in turn.
  struct EmbeddedArm {
    RunPlan p;
    RunResult r;
    std::unique_ptr<ScratchDir> scratch;
    std::unique_ptr<Engine> engine;
    std::vector<std::unique_ptr<PagedKvSpace>> kv;  // one paged KV per request
    std::vector<std::vector<int32_t>> prompts;      // restores: their prefix; stores: per round
  };

  EmbeddedArm OpenEmbedded(Variant variant, uint32_t n) {
    EmbeddedArm a;
    a.p = Plan(variant, n);
    a.r = Start(a.p, Mode::kEmbedded);
    Result<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Make(f_.dir, "rangekv-concurrent-");
    if (!scratch.ok()) Fail(scratch.status().ToString());
    a.scratch = std::move(*scratch);
    const EngineOptions eo = Options(a.p, a.scratch->Join("store"), "");
    Result<std::unique_ptr<Engine>> opened = Engine::Open(eo);
    if (!opened.ok()) Fail("open: " + opened.status().ToString());
    a.engine = std::move(*opened);
    OpenRequests(a.p, &a.kv, &a.prompts);
    StorePrefixes(*a.engine, a.p, a.kv);
    // The engine's read concurrency: its read I/O engine's threads (read_io_threads as resolved
    // at Open), which the ceiling's grid includes.
    BeginCeiling(a.p, eo.store_dir + "/packs.rkv", a.engine->options().read_io_threads);
    return a;
  }

  void EmbeddedRound(EmbeddedArm& a, uint32_t round) {
    TimeRound(
        a.p, round, [&](uint32_t) -> Engine& { return *a.engine; }, a.kv, a.prompts, a.r);
  }

  RunResult CloseEmbedded(EmbeddedArm& a) {
    Status closed = a.engine->Close();
    if (!closed.ok()) Fail("close: " + closed.ToString());
    KeepCeilingStore(a.p, std::move(a.scratch));
    Finish(a.r);
    return a.r;
  }

  // A client process of the service mode (see the file comment). Per round it prepares its
  // paged KV and writes "ready", reads "go" on stdin, runs its request and writes "done <ok>
  // <start> <looked_up> <bound> <first> <last> <end> <message>" (the Timeline's instants,
  // absolute seconds); then it reads "verify" (sent once every client's done line is in) and
  // writes "verified <mismatches>".
  static void Line(const char* fmt, ...) __attribute__((format(printf, 1, 2))) {
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
    std::fflush(stdout);
  }
  void RunClient(const ClientFlags& c) {
    const RunPlan p = Plan(ParseVariant(c.variant), c.n);
    if (c.index >= p.n) Fail("--index outside [0, n)");
    Result<std::unique_ptr<Engine>> opened = Engine::Open(Options(p, "", c.socket));
    if (!opened.ok()) Fail("open: " + opened.status().ToString());
    Engine& engine = **opened;
    std::unique_ptr<PagedKvSpace> kv = Space(p, c.index);
    std::vector<int32_t> prompt =
        c.index < p.restores ? Prompt(p, c.index) : std::vector<int32_t>{};
    char line[64];
    for (uint32_t round = 0; round < p.rounds; ++round) {
      PrepareRequest(p, round, c.index, *kv, &prompt);
      Line("ready\n");
      if (std::fgets(line, sizeof line, stdin) == nullptr) Fail("stdin closed");
      Timeline t;
      const Status s = RunRequest(engine, p, round, c.index, *kv, prompt, &t);
      std::string why = s.ToString();
      std::replace(why.begin(), why.end(), '\n', ' ');
      Line("done %d %.9f %.9f %.9f %.9f %.9f %.9f %s\n", s.ok() ? 1 : 0, t.start, t.looked_up,
           t.bound, t.first, t.last, t.end, why.c_str());
      // The round's timed part ends with the last client: verify only when told.
      if (std::fgets(line, sizeof line, stdin) == nullptr) Fail("stdin closed");
      const uint64_t bad = s.ok() ? VerifyRequest(p, c.index, *kv) : 0;
      Line("verified %llu\n", static_cast<unsigned long long>(bad));
    }
    const Engine::ReadShare share = engine.read_share();
    std::fprintf(stderr,
                 "bench client %u of %u: read share at the end: %u readers, %u stripe reads and "
                 "%u read I/O pieces in flight at most",
                 c.index, p.n, share.readers, share.read_workers, share.read_io_threads);
    if (share.gate_slots > 0) {
      std::fprintf(stderr,
                   "; the node's read gate of %u slots: %" PRIu64 " reads waited, %" PRIu64
                   " waits ran out",
                   share.gate_slots, share.gate_waited, share.gate_timed_out);
    }
    std::fprintf(stderr, "\n");
    Status closed = engine.Close();
    if (!closed.ok()) Fail("close: " + closed.ToString());
  }

  struct Client {
    pid_t pid = -1;
    FILE* to = nullptr;    // its stdin
    FILE* from = nullptr;  // its stdout
  };
  Client Spawn(const RunPlan& p, uint32_t index, const std::string& socket) const {
    // Flag and value pairs, a pair a line.
    // clang-format off
    std::vector<std::string> args = {"rangekv", "bench", "concurrent-client",
                                     "--socket", socket,
                                     "--variant", VariantName(p.variant),
                                     "--n", std::to_string(p.n),
                                     "--index", std::to_string(index),
                                     "--device", f_.device,
                                     "--io", f_.io,
                                     "--size", f_.size,
                                     "--stripe", f_.stripe,
                                     "--reps", std::to_string(f_.reps),
                                     "--warmups", std::to_string(f_.warmups),
                                     "--seed", std::to_string(f_.seed),
                                     "--client-read-threads",
                                     std::to_string(f_.client_read_threads),
                                     "--client-read-workers",
                                     std::to_string(f_.client_read_workers),
                                     "--client-read-banks",
                                     std::to_string(f_.client_read_banks),
                                     "--client-share-reads", f_.client_share_reads,
                                     "--read-gate", std::to_string(f_.read_gate)};
    // clang-format on
    if (f_.buffered) args.push_back("--buffered");
    if (f_.pin_clients) args.push_back("--pin-clients");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) Fail("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    Client c;
    const int rc = posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) Fail("spawning a client process failed: " + std::string(std::strerror(rc)));
    c.to = fdopen(in[1], "w");
    c.from = fdopen(out[0], "r");
    return c;
  }
  static std::string ReadLine(Client& c) {
    char buf[1024];
    if (std::fgets(buf, sizeof buf, c.from) == nullptr) {
      Fail("client process " + std::to_string(c.pid) + " ended early (its stderr says why)");
    }
    return buf;
  }

  struct ServiceArm {
    RunPlan p;
    RunResult r;
    std::unique_ptr<ScratchDir> scratch;
    std::unique_ptr<service::StoreService> svc;
    std::string socket;
    std::vector<Client> clients;  // --clients processes
    // --clients threads: N engines of this process, each a session of the service.
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<std::unique_ptr<PagedKvSpace>> kv;
    std::vector<std::vector<int32_t>> prompts;
  };

  ServiceArm OpenService(Variant variant, uint32_t n) {
    ServiceArm a;
    a.p = Plan(variant, n);
    const bool threads = f_.clients == "threads";
    a.r = Start(a.p, threads ? Mode::kServiceThreads : Mode::kService);
    std::signal(SIGPIPE, SIG_IGN);  // a client that died is reported by its closed stdout
    Result<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Make(f_.dir, "rangekv-concurrent-");
    if (!scratch.ok()) Fail(scratch.status().ToString());
    a.scratch = std::move(*scratch);
    service::ServiceOptions so;
    so.root = a.scratch->Join("service");
    so.socket_path = a.scratch->Join("rangekv.sock");
    so.default_quota_bytes = a.p.capacity_bytes;
    so.read_slots = f_.read_gate;
    a.socket = so.socket_path;
    Result<std::unique_ptr<service::StoreService>> svc = service::StoreService::Start(so);
    if (!svc.ok()) Fail("store service: " + svc.status().ToString());
    a.svc = std::move(*svc);
    std::string pack_path;
    uint32_t read_io_threads = 0;
    {
      // Untimed, from this process: the prefixes, through the service.
      Result<std::unique_ptr<Engine>> opened = Engine::Open(Options(a.p, "", a.socket));
      if (!opened.ok()) Fail("open: " + opened.status().ToString());
      std::vector<std::unique_ptr<PagedKvSpace>> kv(a.p.prefixes);
      for (uint32_t i = 0; i < a.p.prefixes; ++i) kv[i] = Space(a.p, i);
      StorePrefixes(**opened, a.p, kv);
      glob_t g{};
      if (glob((so.root + "/*/*/packs.rkv").c_str(), 0, nullptr, &g) != 0 || g.gl_pathc != 1) {
        Fail("the service's pack file was not found under " + so.root);
      }
      pack_path = g.gl_pathv[0];
      globfree(&g);
      read_io_threads = (*opened)->options().read_io_threads;
      Status closed = (*opened)->Close();
      if (!closed.ok()) Fail("close: " + closed.ToString());
    }
    BeginCeiling(a.p, pack_path, read_io_threads);  // with --mode service: the N's first store
    if (threads) {
      for (uint32_t i = 0; i < n; ++i) {
        Result<std::unique_ptr<Engine>> opened = Engine::Open(Options(a.p, "", a.socket));
        if (!opened.ok()) Fail("open: " + opened.status().ToString());
        a.engines.push_back(std::move(*opened));
      }
      OpenRequests(a.p, &a.kv, &a.prompts);
    } else {
      for (uint32_t i = 0; i < n; ++i) a.clients.push_back(Spawn(a.p, i, a.socket));
      AwaitReady(a);
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

  // The clients start up and prepare a round (AwaitReady), and end (ReapClients), inside the
  // arm's own open and rounds: with --interleave no client work overlaps an embedded round.
  void AwaitReady(ServiceArm& a) {
    for (Client& c : a.clients) {
      if (ReadLine(c) != "ready\n") Fail("client protocol: expected ready");
    }
  }
  void ReapClients(ServiceArm& a) {
    for (Client& c : a.clients) {
      std::fclose(c.to);
      std::fclose(c.from);
      int wstatus = 0;
      if (waitpid(c.pid, &wstatus, 0) != c.pid || !WIFEXITED(wstatus) ||
          WEXITSTATUS(wstatus) != 0) {
        Fail("a client process failed at its end");
      }
    }
    a.clients.clear();
  }

  void ProcessRound(ServiceArm& a, uint32_t round) {
    const uint32_t n = a.p.n;
    CeilingPass(n, round);
    const double t0 = NowSeconds();
    for (Client& c : a.clients) {
      std::fputs("go\n", c.to);
      std::fflush(c.to);
    }
    double last_end = t0;
    std::vector<Timeline> timelines(n);
    for (uint32_t i = 0; i < n; ++i) {
      const std::string line = ReadLine(a.clients[i]);
      int ok = 0;
      int consumed = 0;
      Timeline& t = timelines[i];
      if (std::sscanf(line.c_str(), "done %d %lf %lf %lf %lf %lf %lf %n", &ok, &t.start,
                      &t.looked_up, &t.bound, &t.first, &t.last, &t.end, &consumed) != 7) {
        Fail("client protocol: " + line);
      }
      if (ok != 1) Fail("request " + std::to_string(i) + ": " + line.substr(consumed));
      last_end = std::max(last_end, t.end);
    }
    for (Client& c : a.clients) {
      std::fputs("verify\n", c.to);
      std::fflush(c.to);
    }
    for (Client& c : a.clients) {
      unsigned long long bad = 0;
      if (std::sscanf(ReadLine(c).c_str(), "verified %llu", &bad) != 1) {
        Fail("client protocol: expected verified");
      }
      a.r.verify_failures += bad;
    }
    Record(a.r, round, t0, last_end - t0, timelines);
    if (round + 1 < a.p.rounds) {
      AwaitReady(a);  // the next round's paged KV, prepared now
    } else {
      ReapClients(a);
    }
  }

  RunResult CloseService(ServiceArm& a) {
    for (auto& e : a.engines) {
      Status closed = e->Close();
      if (!closed.ok()) Fail("close: " + closed.ToString());
    }
    ReapClients(a);  // when the last round did not
    Status stopped = a.svc->Stop();
    if (!stopped.ok()) Fail("store service stop: " + stopped.ToString());
    KeepCeilingStore(a.p, std::move(a.scratch));  // as CloseEmbedded does
    Finish(a.r);
    return a.r;
  }

  void RunAll() {
    const double wall0 = NowSeconds();
    const bool embedded = f_.mode != "service", service = f_.mode != "embedded";
    for (uint32_t n : ns_) {
      for (Variant v : variants_) {
        const uint32_t rounds = Plan(v, n).rounds;
        if (embedded && service && f_.interleave) {
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
          results_.push_back(CloseEmbedded(e));
          results_.push_back(CloseService(s));
          results_.back().embedded_gib_s = results_[results_.size() - 2].aggregate_median;
          continue;
        }
        double embedded_gib_s = 0;
        if (embedded) {
          EmbeddedArm e = OpenEmbedded(v, n);
          for (uint32_t round = 0; round < rounds; ++round) EmbeddedRound(e, round);
          results_.push_back(CloseEmbedded(e));
          embedded_gib_s = results_.back().aggregate_median;
        }
        if (service) {
          ServiceArm s = OpenService(v, n);
          for (uint32_t round = 0; round < rounds; ++round) ServiceRound(s, round);
          results_.push_back(CloseService(s));
          results_.back().embedded_gib_s = embedded_gib_s;
        }
      }
      FinishCeiling(n);
    }
    wall_s_ = NowSeconds() - wall0;
  }

  void Print() const {
    std::printf("rangekv bench concurrent: %s per round (split over N requests), %s per token, "
                "stripe %s, device %s\n",
                FormatBytes(total_tokens_ * row_bytes_).c_str(), FormatBytes(row_bytes_).c_str(),
                FormatBytes(geometry_.stripe_bytes).c_str(), device_->capabilities().name.c_str());
    if (f_.mode != "embedded" && f_.read_gate > 0) {
      std::printf(
          "service clients pass the node's read gate: %u read pieces in flight across "
          "all of them (rangekv serve --read-slots, EngineOptions::read_gate)\n",
          f_.read_gate);
    } else if (f_.mode != "embedded") {
      std::printf("service clients' reads are not gated (--read-gate 0)\n");
    }
    std::printf("%-9s %-12s %4s %4s %4s %10s %9s %10s %9s %9s %9s %9s %11s %11s %8s\n", "mode",
                "variant", "N", "rst", "sto", "agg GiB/s", "x ceiling", "x embedded", "p50 ms",
                "p90 ms", "p99 ms", "p99/p50", "sto p50 ms", "sto p99 ms", "verify");
    for (const RunResult& r : results_) {
      const std::string vs_embedded =
          r.embedded_gib_s > 0 ? Fixed(r.aggregate_median / r.embedded_gib_s) : "-";
      const bool mixed = !r.store_latencies_s.empty();
      std::printf("%-9s %-12s %4u %4u %4u %10.2f %9.2f %10s %9.1f %9.1f %9.1f %9.2f %11s %11s %8s\n",
                  ModeName(r.mode), VariantName(r.variant), r.n, r.restores, r.stores,
                  r.aggregate_median,
                  r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0,
                  vs_embedded.c_str(), r.p50 * 1e3,
                  r.p90 * 1e3, r.p99 * 1e3, r.p50 > 0 ? r.p99 / r.p50 : 0,
                  mixed ? Fixed(r.store_p50 * 1e3, 1).c_str() : "-",
                  mixed ? Fixed(r.store_p99 * 1e3, 1).c_str() : "-",
                  r.verify_failures == 0 ? "ok" : "FAILED");
    }
    for (const auto& [n, config] : ceiling_config_) {
      std::printf(
          "N=%u: best read ceiling %.2f GiB/s (%s); every x ceiling of this N is against "
          "it\n",
          n, ceiling_.at(n), config.c_str());
    }
    std::printf("phases, median ms from the round's start over every request (start: the request "
                "began; lookup: answered; bound: restore started, slots bound / store begun; "
                "first, last: layer ready / visible; end: finished and released):\n");
    std::printf("%-9s %-12s %4s %8s %8s %8s %8s %8s %8s %9s\n", "mode", "variant", "N", "start",
                "lookup", "bound", "first", "last", "end", "max end");
    for (const RunResult& r : results_) {
      const PhaseMedians m = Phases(r);
      std::printf("%-9s %-12s %4u %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f\n", ModeName(r.mode),
                  VariantName(r.variant), r.n, m.start * 1e3, m.looked_up * 1e3, m.bound * 1e3,
                  m.first * 1e3, m.last * 1e3, m.end * 1e3, m.max_end * 1e3);
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
    j["read_gate_slots"] = f_.mode == "embedded" ? 0u : f_.read_gate;
    nlohmann::json rs = nlohmann::json::array();
    for (const RunResult& r : results_) {
      nlohmann::json x;
      x["mode"] = ModeName(r.mode);
      x["variant"] = VariantName(r.variant);
      x["n"] = r.n;
      x["restores"] = r.restores;
      x["stores"] = r.stores;
      x["request_tokens"] = r.request_tokens;
      x["bytes_per_rep"] = r.bytes_per_rep;
      x["aggregate_gib_s"] = r.aggregate_median;
      x["aggregate_samples_gib_s"] = r.aggregate_gib_s;
      x["ceiling_gib_s"] = r.ceiling_gib_s;
      x["ceiling_config"] = r.ceiling_config;
      x["ratio_to_ceiling"] = r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0;
      if (r.embedded_gib_s > 0) {
        x["embedded_gib_s"] = r.embedded_gib_s;
        x["ratio_to_embedded"] = r.aggregate_median / r.embedded_gib_s;
      }
      x["latency_p50_s"] = r.p50;
      x["latency_p90_s"] = r.p90;
      x["latency_p99_s"] = r.p99;
      x["p99_over_p50"] = r.p50 > 0 ? r.p99 / r.p50 : 0;
      // p50/p90/p99 above are the restores' (the stores' in a store-only row); a mixed row's
      // stores separately.
      x["latency_kind"] = r.restores > 0 ? "restore" : "store";
      if (!r.store_latencies_s.empty()) {
        x["store_latency_p50_s"] = r.store_p50;
        x["store_latency_p99_s"] = r.store_p99;
      }
      x["verify_failures"] = r.verify_failures;
      const PhaseMedians m = Phases(r);
      x["phase_medians_s"] = {{"start", m.start},   {"lookup", m.looked_up}, {"bound", m.bound},
                              {"first", m.first},   {"last", m.last},        {"end", m.end},
                              {"max_end", m.max_end}};
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
               const std::string& id, Timeline* t) {
    StoreRequest rq;
    rq.envelope = Envelope(id);
    rq.tokens = path;
    rq.kv = &kv.engine_kv();
    rq.slot_mapping = std::span<const int64_t>(kv.slots()).first(path.size());
    t->start = NowSeconds();
    RANGEKV_ASSIGN_OR_RETURN(StoreHandle h, engine.BeginStore(rq));
    t->looked_up = t->bound = NowSeconds();
    for (uint32_t l = 0; l < geometry_.layers; ++l) RANGEKV_RETURN_IF_ERROR(h.LayerProduced(l));
    StoreOutcome out = h.Finish(StoreWait::kUntilVisible);
    t->first = t->last = t->end = NowSeconds();
    RANGEKV_RETURN_IF_ERROR(out.status);
    if (!out.visible) return Internal("store " + id + " did not become visible");
    return OkStatus();
  }

  Status Restore(Engine& engine, PagedKvSpace& kv, std::span<const int32_t> prompt, uint64_t end,
                 const std::string& id, Timeline* t) {
    const RequestEnvelope env = Envelope(id);
    t->start = NowSeconds();
    RANGEKV_ASSIGN_OR_RETURN(LookupResult lr, engine.Lookup(env, prompt, 1));
    t->looked_up = NowSeconds();
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
    t->bound = NowSeconds();
    for (uint32_t l = 0; l < geometry_.layers; ++l) {
      RANGEKV_RETURN_IF_ERROR(h.WaitLayer(l));
      if (l == 0) t->first = NowSeconds();
    }
    t->last = NowSeconds();
    RestoreOutcome out = h.Finish();
    engine.ReleaseRequest(env);
    t->end = NowSeconds();
    RANGEKV_RETURN_IF_ERROR(out.status);
    if (out.delivered_tokens != end) return Internal("restore " + id + " was partial");
    return OkStatus();
  }

  struct PhaseMedians {
    double start = 0, looked_up = 0, bound = 0, first = 0, last = 0, end = 0, max_end = 0;
  };
  static PhaseMedians Phases(const RunResult& r) {
    auto median = [&](double Timeline::*field) {
      std::vector<double> v;
      for (const Timeline& t : r.timelines) v.push_back(t.*field);
      return Median(v);
    };
    PhaseMedians m;
    m.start = median(&Timeline::start);
    m.looked_up = median(&Timeline::looked_up);
    m.bound = median(&Timeline::bound);
    m.first = median(&Timeline::first);
    m.last = median(&Timeline::last);
    m.end = median(&Timeline::end);
    for (const Timeline& t : r.timelines) m.max_end = std::max(m.max_end, t.end);
    return m;
  }

  static std::string Fixed(double v, int decimals = 2) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
  }

  const ConcurrentFlags& f_;
  ModelSpec model_;
  Geometry geometry_;
  uint64_t row_bytes_ = 0;
  uint64_t total_tokens_ = 0;
  std::vector<uint32_t> ns_;
  std::vector<Variant> variants_;  // --variants, in the order distinct, same-prefix, mixed
  std::unique_ptr<Device> device_;
  struct CeilingState {  // the N whose rounds run now (BeginCeiling .. FinishCeiling)
    std::unique_ptr<ScratchDir> scratch;  // the distinct variant's store, while passes read it
    uint32_t n = 0;
    std::unique_ptr<ReadCeilingProbe> probe;
    uint32_t read_threads = 0;  // the engine's read I/O threads, a grid row
    uint32_t threads = 0;
    uint64_t request = 0;  // 0: whole stripe extents
    std::string config;
    std::vector<double> samples;  // passes before timed rounds, GiB/s
  };
  std::optional<CeilingState> ceiling_state_;
  std::map<uint32_t, double> ceiling_;
  std::map<uint32_t, std::string> ceiling_config_;
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

// Pins this process (still one thread: its later threads inherit the mask) to the index-th of
// n equal shares of the CPUs it may use, as a node's serving instances are often pinned.
void PinToShare(uint32_t index, uint32_t n) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) Fail("sched_getaffinity failed");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  const size_t count = cpus.size();
  size_t lo = index * count / n, hi = (index + 1) * count / n;
  if (hi <= lo) lo = index % count, hi = lo + 1;  // fewer CPUs than clients
  cpu_set_t share;
  CPU_ZERO(&share);
  for (size_t i = lo; i < hi; ++i) CPU_SET(cpus[i], &share);
  if (sched_setaffinity(0, sizeof share, &share) != 0) Fail("sched_setaffinity failed");
}

void RunConcurrentClient(const ConcurrentFlags& f, const ClientFlags& c) {
  if (f.pin_clients) PinToShare(c.index, c.n);
  SetMinLogLevel(LogLevel::kWarning);
  Bench b(f);
  b.Setup();
  b.RunClient(c);
}

// The flags a run and its client processes share.
void AddSharedFlags(CLI::App* cmd, ConcurrentFlags* f) {
  cmd->add_option("--device", f->device, "host | cuda | auto")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--io", f->io, "I/O engine: posix | uring")
      ->check(CLI::IsMember({"posix", "uring"}))
      ->capture_default_str();
  cmd->add_option("--size", f->size, "total payload of one round, split into N requests")
      ->capture_default_str();
  cmd->add_option("--stripe", f->stripe, "stripe size W of the store (pack = 32 x W)")
      ->capture_default_str();
  cmd->add_option("--reps", f->reps, "timed rounds per (variant, N)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--warmups", f->warmups, "untimed rounds first")
      ->check(CLI::Range(0u, 100u))
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "payload and token seed")->capture_default_str();
  cmd->add_flag("--buffered", f->buffered, "buffered I/O instead of O_DIRECT");
  cmd->add_option("--client-read-workers", f->client_read_workers,
                  "--mode service: read workers of each client's engine (0: the engine's "
                  "default; one process alone on the node has 4 spans in flight, N clients "
                  "N times that)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  cmd->add_option("--client-read-threads", f->client_read_threads,
                  "--mode service: read I/O threads of each client's engine (0: its auto "
                  "value, as one process alone on the node would take)")
      ->capture_default_str();
  cmd->add_option("--client-read-banks", f->client_read_banks,
                  "--mode service: read banks of each client's engine (0: the engine's default; "
                  "its prefetch banks are capped one below)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  cmd->add_option("--client-share-reads", f->client_share_reads,
                  "--mode service: each client's engine keeps its reads to its share of the "
                  "node, read workers and read I/O threads divided by the sessions reading now "
                  "(EngineOptions::share_reads, off by default: each client takes what one "
                  "engine alone would)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--read-gate", f->read_gate,
                  "--mode service/both: the service runs a read gate of this many slots and "
                  "every client's engine passes it (rangekv serve --read-slots N, "
                  "EngineOptions::read_gate): the clients together keep at most N read pieces "
                  "in flight, taken as they come; auto: rangekv serve's default, " +
                      std::to_string(f->read_gate) + " here (0: no gate)")
      ->transform(ReadSlotsAuto())
      ->check(CLI::Range(0u, service::kMaxGateSlots))
      ->default_str("auto");
  cmd->add_option("--embedded-read-banks", f->embedded_read_banks,
                  "--mode embedded/both: read banks of the one embedded engine (0: its default; "
                  "N clients' banks add up to N times one engine's)")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  cmd->add_option("--embedded-read-workers", f->embedded_read_workers,
                  "--mode embedded/both: read workers of the one embedded engine (0: its "
                  "default; N clients keep N times one engine's spans in flight)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  cmd->add_option("--embedded-read-threads", f->embedded_read_threads,
                  "--mode embedded/both: read I/O threads of the one embedded engine (0: its "
                  "auto value)")
      ->capture_default_str();
  cmd->add_option("--variants", f->variants,
                  "comma-separated subset of distinct, same-prefix, mixed (the read ceiling is "
                  "measured on the distinct variant's store: without it, none)")
      ->capture_default_str();
  cmd->add_flag("--interleave", f->interleave,
                "--mode both: open the embedded engine and the service's clients side by side "
                "and time their rounds in turn (ABBA), so both meet the machine alike");
  cmd->add_option("--clients", f->clients,
                  "--mode service: each request's engine in a client process of its own "
                  "(processes, a node's serving instances) or in a thread of this process "
                  "(threads, N engines in one process, each its own session; rows say svc-thrd; "
                  "--pin-clients does not apply)")
      ->check(CLI::IsMember({"processes", "threads"}))
      ->capture_default_str();
  cmd->add_flag("--pin-clients", f->pin_clients,
                "--mode service: pin client i of N to the i-th of N equal shares of the CPUs (its "
                "engine sizes its threads to that share)");
}

}  // namespace

void AddBenchConcurrentCommand(CLI::App& bench) {
  auto f = std::make_shared<ConcurrentFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "concurrent",
      "N concurrent restores (distinct prefixes, one shared prefix) and a mixed restore + store "
      "load: aggregate GiB/s against the read ceiling, per-request latency percentiles; "
      "embedded or through a store service");
  AddSharedFlags(cmd, f.get());
  cmd->add_option("--n", f->n_list, "comma-separated request counts")->capture_default_str();
  cmd->add_option("--mode", f->mode,
                  "embedded (one process) | service (each request in its own client process "
                  "through an in-process store service) | both")
      ->check(CLI::IsMember({"embedded", "service", "both"}))
      ->capture_default_str();
  cmd->add_option("--dir", f->dir, "parent of the scratch stores (default $TMPDIR or /var/tmp)");
  cmd->add_option("--json", f->json_path, "write the results as JSON to this file");
  cmd->add_option("--ceiling-threads", f->ceiling_threads,
                  "threads of the read ceiling grid (0: the engine's read I/O threads and 16)")
      ->capture_default_str();
  cmd->add_option("--ceiling-passes", f->ceiling_passes,
                  "when the best ceiling cell reads: round (once before every round of the N) "
                  "or end (its repetitions after the N's last round)")
      ->check(CLI::IsMember({"round", "end"}))
      ->capture_default_str();
  cmd->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  cmd->callback([f] { RunConcurrent(*f); });

  // The client process of --mode service (not for people: spawned by the run above).
  auto cf = std::make_shared<ConcurrentFlags>();
  auto cc = std::make_shared<ClientFlags>();
  CLI::App* client = bench.add_subcommand("concurrent-client", "");  // hidden: no description
  client->group("");
  AddSharedFlags(client, cf.get());
  client->add_option("--socket", cc->socket)->required();
  client->add_option("--variant", cc->variant)
      ->check(CLI::IsMember({"distinct", "same-prefix", "mixed"}))
      ->required();
  client->add_option("--n", cc->n)->required();
  client->add_option("--index", cc->index)->required();
  client->callback([cf, cc] {
    cf->n_list = std::to_string(cc->n);
    RunConcurrentClient(*cf, *cc);
  });
}

}  // namespace rangekv::tools
