#include "tools/bench/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <filesystem>
#include <map>
#include <memory>

#include "base/units.h"
#include "tools/bench/baseline/object_naming.h"
#include "tools/bench/baseline/per_object_store.h"
#include "tools/bench/paged_kv.h"
#include "tools/bench/progress.h"
#include "tools/bench/requests.h"
#include "tools/bench/scratch.h"
#include "tools/bench/stats.h"
#include "tools/bench/util.h"

namespace rangekv::tools {

std::string_view WorkloadName(Workload w) { return w == Workload::kRestore ? "restore" : "store"; }

namespace {

struct Point {
  baseline::SweepPoint sweep;
  baseline::ObjectNaming naming;  // of the workload's bytes (prefix, or suffix for store)
  uint64_t granularity_tokens = 1;
  uint64_t object_tokens = 1;
};

Result<baseline::SweepPoint> ParsePoint(const Geometry& g, const std::string& label,
                                        uint64_t payload_tokens) {
  baseline::ObjectShape shape = baseline::ObjectShape::kChunk;
  std::string number = label;
  auto ends_with = [&](const std::string& suffix) {
    return number.size() > suffix.size() &&
           number.compare(number.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("-LW") || ends_with("-lw")) {
    shape = baseline::ObjectShape::kChunkLayer;
    number.resize(number.size() - 3);
  } else if (ends_with("-TP") || ends_with("-tp")) {
    shape = baseline::ObjectShape::kChunkLayerSlice;
    number.resize(number.size() - 3);
  }
  const Result<uint64_t> count = ParseCount(number, "object count", 1);
  if (!count.ok()) {
    return InvalidArgument("object count '" + label +
                           "' is not N, N-LW (per-layer objects) or N-TP (rank slices), N >= 1");
  }
  const uint64_t nominal = *count;
  // A bare 327680 means the paper's TP-sliced naming.
  if (shape == baseline::ObjectShape::kChunk && nominal == 327680) {
    shape = baseline::ObjectShape::kChunkLayerSlice;
  }
  return baseline::MakeSweepPoint(g, shape, nominal, payload_tokens);
}

uint64_t Gcd(uint64_t a, uint64_t b) { return b == 0 ? a : Gcd(b, a % b); }

// The largest divisor of n that is <= limit (>= 1).
uint64_t LargestDivisorAtMost(uint64_t n, double limit) {
  uint64_t best = 1;
  for (uint64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (static_cast<double>(d) <= limit) best = std::max(best, d);
    if (static_cast<double>(n / d) <= limit) best = std::max(best, n / d);
  }
  return best;
}

struct Timing {
  double total_s = 0;
  double first_layer_s = 0;
  double cpu_s = -1;  // process CPU over total_s; < 0: not measured
};

class Sweep {
 public:
  explicit Sweep(const SweepOptions& o) : o_(o) {}

  Result<SweepReport> Run() {
    const double wall0 = NowSeconds();
    RANGEKV_RETURN_IF_ERROR(Setup());
    if (o_.run_rangekv) {
      std::vector<size_t> shared;
      for (size_t ci = 0; ci < configs_.size(); ++ci) {
        if (!NamingDependent(configs_[ci].ablations)) shared.push_back(ci);
      }
      if (o_.interleave_configs && !shared.empty()) {
        RANGEKV_RETURN_IF_ERROR(RunRangeKvShared(shared));
      }
      for (size_t ci = 0; ci < configs_.size(); ++ci) {
        if (!NamingDependent(configs_[ci].ablations)) {
          if (!o_.interleave_configs) RANGEKV_RETURN_IF_ERROR(RunRangeKvShared({ci}));
          continue;
        }
        for (size_t pi = 0; pi < points_.size(); ++pi) {
          RANGEKV_RETURN_IF_ERROR(RunRangeKvPerPoint(pi, ci));
        }
      }
    }
    if (o_.run_baseline) {
      for (size_t pi = 0; pi < points_.size(); ++pi) RANGEKV_RETURN_IF_ERROR(RunBaseline(pi));
    }
    if (default_session_.has_value()) {
      RANGEKV_RETURN_IF_ERROR(CloseSession(*default_session_));
      default_session_.reset();
    }
    // Point-major order for the table: the default, each ablation, then the per-object model.
    for (auto& [key, r] : kept_) report_.results.push_back(std::move(r));
    report_.ceiling_gib_s = Median(report_.ceiling_samples_gib_s);
    report_.best_ceiling_gib_s = Median(report_.best_ceiling_samples_gib_s);
    if (report_.best_ceiling_gib_s < report_.ceiling_gib_s) {
      // Re-measured on the whole payload the grid's pick lost to the engine configuration.
      report_.best_ceiling_gib_s = report_.ceiling_gib_s;
      report_.best_ceiling_samples_gib_s = report_.ceiling_samples_gib_s;
      report_.best_ceiling_config = report_.ceiling_config;
    }
    report_.io =
        "rangekv: " + (engine_backends_.empty() ? std::string("not run") : engine_backends_) +
        "; per-object: " +
        (baseline_backends_.empty() ? std::string("not run") : baseline_backends_);
    report_.wall_s = NowSeconds() - wall0;
    progress_.End();
    return std::move(report_);
  }

 private:
  struct Config {
    std::optional<std::string> name;
    Ablations ablations;
    Durability durability;
    bool checksum_off = false;  // the bench's own "checksum=off" arm (not an engine ablation)
  };

  void Step() { progress_.Step(); }
  void PlanSteps() {
    const uint64_t reps = o_.warmups + o_.reps;
    uint64_t n = 0;
    if (o_.run_rangekv) n += configs_.size() * points_.size() * reps;
    if (o_.run_baseline) n += points_.size() * reps * (o_.run_rangekv ? 2 : 1);
    if (o_.run_rangekv && o_.run_ceiling) {
      n += reps;
      if (o_.ceiling_grid == CeilingGrid::kFull) n += 20;
      if (o_.ceiling_grid == CeilingGrid::kShort) n += 4;
    }
    progress_.Plan(n);
  }

  Status Setup() {
    RANGEKV_ASSIGN_OR_RETURN(geometry_, DeriveGeometry(o_.model));
    if (o_.payload_tokens == 0) return InvalidArgument("payload has no tokens");
    P_ = o_.payload_tokens;
    S_ = o_.suffix_tokens != 0
             ? o_.suffix_tokens
             : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(
                                         static_cast<double>(baseline::kPaperSuffixTokens) *
                                         static_cast<double>(P_) /
                                         static_cast<double>(baseline::kPaperPrefixTokens))));
    if (o_.reps == 0) return InvalidArgument("--reps must be >= 1");
    const bool store = o_.workload == Workload::kStore;
    for (const std::string& label : o_.points) {
      RANGEKV_ASSIGN_OR_RETURN(baseline::SweepPoint sp, ParsePoint(geometry_, label, P_));
      Point p;
      p.sweep = sp;
      if (store) {
        RANGEKV_ASSIGN_OR_RETURN(p.naming, baseline::RenameRange(geometry_, sp, P_, S_));
      } else {
        p.naming = sp.naming;
      }
      const baseline::ObjectNaming& n = sp.naming;
      p.granularity_tokens =
          n.even() ? n.min_chunk_tokens() : Gcd(n.min_chunk_tokens(), n.max_chunk_tokens());
      p.object_tokens =
          LargestDivisorAtMost(P_, static_cast<double>(n.tokens) / static_cast<double>(n.chunks));
      points_.push_back(p);
    }
    configs_.push_back({std::nullopt, Ablations{}, Durability{}});
    for (size_t i = 0; i < o_.durabilities.size(); ++i) {
      Durability d;
      RANGEKV_RETURN_IF_ERROR(d.Set(o_.durabilities[i]));
      if (i == 0) {
        configs_[0].durability = d;
      } else {
        configs_.push_back({"durability=" + d.ToString(), Ablations{}, d});
      }
    }
    report_.durability = configs_[0].durability.ToString();
    report_.interleaved = o_.interleave_configs;
    for (const std::string& a : o_.ablations) {
      Config c;
      c.name = a;
      if (a == "checksum=off") {
        c.checksum_off = true;
      } else {
        RANGEKV_RETURN_IF_ERROR(c.ablations.Set(a));
      }
      configs_.push_back(c);
    }

    PlanSteps();
    DeviceOptions dopt;
    dopt.kind = o_.device;
    RANGEKV_ASSIGN_OR_RETURN(device_, MakeDevice(dopt));
    RANGEKV_ASSIGN_OR_RETURN(scratch_, ScratchDir::Make(o_.dir, "rangekv-bench-"));
    const uint64_t kv_tokens = store ? P_ + S_ : P_;
    RANGEKV_ASSIGN_OR_RETURN(kv_, PagedKvSpace::Make(*device_, geometry_, kv_tokens, o_.seed));
    prefix_ = RandomTokens(P_, o_.seed ^ 0x5eed);
    prompt_ = prefix_;
    prompt_.push_back(7);  // one more token: a hit never covers a prompt's last token

    const uint64_t row_bytes = uint64_t{geometry_.layers} * geometry_.token_bytes;
    report_.workload = o_.workload;
    report_.spread_target = o_.spread_target;
    report_.device = device_->capabilities().name;
    report_.model = o_.model.model_id +
                    (o_.model.tp_size > 1 ? " (tp " + std::to_string(o_.model.tp_size) + ", rank " +
                                                std::to_string(o_.model.tp_rank) + ")"
                                          : "");
    report_.geometry = geometry_;
    report_.prefix_tokens = P_;
    report_.payload_tokens = store ? S_ : P_;
    report_.payload_bytes = report_.payload_tokens * row_bytes;
    report_.machine = DescribeMachine(scratch_->path());
    progress_.Print("payload %s (%" PRIu64 " tokens x %u layers x %" PRIu64
                    " B), %zu points, %zu "
                    "configurations, %u+%u repetitions, dir %s (%s)",
                    FormatBytes(report_.payload_bytes).c_str(), report_.payload_tokens,
                    geometry_.layers, geometry_.token_bytes, points_.size(), configs_.size(),
                    o_.warmups, o_.reps, scratch_->path().c_str(),
                    report_.machine.file_system.c_str());
    if (!store && o_.run_ceiling && device_->capabilities().kind == DeviceKind::kCuda) {
      RANGEKV_RETURN_IF_ERROR(MeasureH2dCeiling());
    }
    return OkStatus();
  }

  // ---- ceilings ----

  // The ceiling of the default configuration's rounds (restore: reads of the payload in its
  // pack file; store: writes of the suffix's extents to a file of its own), measured rep by rep
  // interleaved with them, so drift of the medium hits both alike. best_threads 0: the engine
  // configuration is the best; else the grid's best cell re-measured on the whole payload.
  struct Ceiling {
    std::unique_ptr<CeilingFile> file;
    uint32_t best_threads = 0;
    uint64_t best_request_bytes = 0;
  };

  Result<Ceiling> PrepareCeiling(const std::string& pack_path) {
    Ceiling c;
    if (o_.workload == Workload::kRestore) {
      const CeilingPayload payload{P_, o_.seed};
      RANGEKV_ASSIGN_OR_RETURN(c.file, CeilingFile::ForPayloads(*device_, pack_path, geometry_,
                                                                {&payload, 1}, o_.buffered));
    } else {
      RANGEKV_ASSIGN_OR_RETURN(
          c.file, CeilingFile::ForSuffix(*device_, scratch_->Join("ceiling.dat"), geometry_, P_, S_,
                                         o_.seed, CeilingThreads(), o_.buffered));
    }
    report_.direct = c.file->direct();
    RANGEKV_RETURN_IF_ERROR(MeasureBestCell(c));
    return c;
  }

  // Runs the ceiling grid once (each cell on at most grid_cell_bytes of the payload) and picks
  // the fastest cell; when it is not the engine configuration, the rounds re-measure it.
  Status MeasureBestCell(Ceiling& c) {
    const bool write = o_.workload == Workload::kStore;
    const uint64_t max_extent = c.file->max_extent_bytes();
    report_.ceiling_config = std::to_string(CeilingThreads()) + " threads x " +
                             RequestName(AlignUp(max_extent, kMiB)) + " (stripe extents)";
    report_.best_ceiling_config = report_.ceiling_config;
    report_.best_ceiling_threads = CeilingThreads();
    report_.best_ceiling_request_bytes = max_extent;
    RANGEKV_ASSIGN_OR_RETURN(
        report_.grid,
        MeasureGrid(
            o_.ceiling_grid,
            [&](uint32_t threads, uint64_t request) -> Result<GridCell> {
              RANGEKV_ASSIGN_OR_RETURN(CeilingFile::PassResult pass,
                                       c.file->Pass(threads, request, o_.grid_cell_bytes, false));
              return GridCell{threads, request, pass.bytes,
                              static_cast<double>(pass.bytes) / kGiB / pass.seconds};
            },
            [&](const GridCell& g) {
              Step();
              progress_.Print("ceiling grid %s: %2u threads x %6s requests: %.2f GiB/s (%s)",
                              write ? "pwrite" : "pread", g.threads,
                              RequestName(g.request_bytes).c_str(), g.gib_s,
                              FormatBytes(g.bytes).c_str());
            }));
    const GridCell* best = BestCell(report_.grid);
    if (best == nullptr) return OkStatus();
    report_.best_ceiling_threads = best->threads;
    report_.best_ceiling_request_bytes = best->request_bytes;
    report_.best_ceiling_config = std::to_string(best->threads) + " threads x " +
                                  RequestName(best->request_bytes) + " requests";
    if (best->threads == CeilingThreads() && best->request_bytes >= max_extent) {
      report_.best_ceiling_config = report_.ceiling_config;  // the engine configuration itself
      return OkStatus();
    }
    c.best_threads = best->threads;
    c.best_request_bytes = best->request_bytes;
    progress_.Print("best ceiling configuration: %s (re-measured on the whole payload every round)",
                    report_.best_ceiling_config.c_str());
    return OkStatus();
  }

  // One round's passes: the engine configuration (reads verified), then the best cell.
  Status CeilingOnce(Ceiling& c, uint32_t rep) {
    const bool write = o_.workload == Workload::kStore;
    const char* warm = rep < o_.warmups ? " (warm-up)" : "";
    RANGEKV_ASSIGN_OR_RETURN(CeilingFile::PassResult pass,
                             c.file->Pass(CeilingThreads(), 0, UINT64_MAX, true));
    const double gib_s = static_cast<double>(report_.payload_bytes) / kGiB / pass.seconds;
    if (rep >= o_.warmups) report_.ceiling_samples_gib_s.push_back(gib_s);
    Step();
    if (write) {
      progress_.Print("ceiling (%u threads pwrite, %s) rep %u: %.3f s, %.2f GiB/s%s",
                      CeilingThreads(), c.file->direct() ? "O_DIRECT" : "buffered", rep,
                      pass.seconds, gib_s, warm);
    } else {
      progress_.Print(
          "point all ceiling (%u threads pread, %s) rep %u: %.3f s, %.2f GiB/s, verified%s",
          CeilingThreads(), c.file->direct() ? "O_DIRECT" : "buffered", rep, pass.seconds, gib_s,
          warm);
    }
    if (c.best_threads == 0) {
      if (rep >= o_.warmups) report_.best_ceiling_samples_gib_s.push_back(gib_s);
      return OkStatus();
    }
    RANGEKV_ASSIGN_OR_RETURN(CeilingFile::PassResult best,
                             c.file->Pass(c.best_threads, c.best_request_bytes, UINT64_MAX, true));
    const double best_gib_s = static_cast<double>(report_.payload_bytes) / kGiB / best.seconds;
    if (rep >= o_.warmups) report_.best_ceiling_samples_gib_s.push_back(best_gib_s);
    progress_.Print(write ? "best ceiling (%s pwrite) rep %u: %.3f s, %.2f GiB/s%s"
                          : "best ceiling (%s) rep %u: %.3f s, %.2f GiB/s, verified%s",
                    report_.best_ceiling_config.c_str(), rep, best.seconds, best_gib_s, warm);
    return OkStatus();
  }

  // The raw-I/O ceiling's threads: --ceiling-threads, else the engine's thread count for that
  // direction (the first engine's read I/O threads, EngineTuning::read_io_threads as resolved;
  // 32 write workers by default).
  uint32_t CeilingThreads() const {
    if (o_.ceiling_threads != 0) return o_.ceiling_threads;
    if (o_.workload == Workload::kStore) return o_.write_workers != 0 ? o_.write_workers : 32;
    if (engine_read_io_threads_ != 0) return engine_read_io_threads_;
    if (o_.read_io_threads != 0) return o_.read_io_threads;
    return o_.read_workers != 0 ? o_.read_workers : 4;
  }

  Status MeasureH2dCeiling() {
    const uint64_t bytes = std::min<uint64_t>(report_.payload_bytes, 4 * kGiB);
    RANGEKV_ASSIGN_OR_RETURN(std::vector<double> samples,
                             HostToDeviceCeiling(*device_, bytes, o_.warmups, o_.reps));
    report_.h2d_ceiling_gib_s = Median(samples);
    progress_.Print("host-to-device copy ceiling: %.2f GiB/s", report_.h2d_ceiling_gib_s);
    return OkStatus();
  }

  // ---- RangeKV ----

  Result<std::unique_ptr<Engine>> OpenEngine(const std::string& dir, const Config& c,
                                             const Point& p) {
    EngineOptions eo;
    eo.store_dir = dir;
    eo.model = o_.model;
    const uint64_t T = geometry_.tokens_per_stripe;
    const uint64_t prefix_packs = (P_ + T - 1) / T;
    const uint64_t suffix_packs = (S_ + T - 1) / T;
    // Restore: the prefix (plus a spare slot). Store: the prefix, one suffix and a free reserve
    // of one pack (EngineTuning::free_reserve_packs, set explicitly: the engine's auto reserve
    // starts at 32 packs, this store stands in for such a full store with a few), so after the
    // first few stores each one evicts the oldest suffix (an LRU leaf of the prefix) and reuses
    // a freed slot whose eviction is durable: the steady state of a full store.
    uint64_t packs = prefix_packs + 1;
    if (o_.workload == Workload::kStore)
      packs = std::max<uint64_t>(4, prefix_packs + suffix_packs + 1);
    eo.capacity_bytes = packs * geometry_.pack_bytes;
    eo.device = o_.device == DeviceKind::kHost   ? DeviceSelection::kHost
                : o_.device == DeviceKind::kCuda ? DeviceSelection::kCuda
                                                 : DeviceSelection::kAuto;
    eo.io_engine = o_.io == IoEngineKind::kUring    ? IoEngineSelection::kUring
                   : o_.io == IoEngineKind::kCuFile ? IoEngineSelection::kCuFile
                                                    : IoEngineSelection::kPosix;
    eo.direct_io = o_.buffered ? DirectIo::kOff : DirectIo::kPreferred;
    eo.max_request_tokens = std::max<uint64_t>(eo.max_request_tokens, P_ + S_ + 1);
    if (o_.read_workers != 0) eo.tuning.read_workers = o_.read_workers;
    if (o_.read_io_threads != 0) eo.tuning.read_io_threads = o_.read_io_threads;
    if (o_.read_banks != 0) {
      eo.tuning.read_banks = o_.read_banks;
      eo.tuning.prefetch_banks = std::min(eo.tuning.prefetch_banks, o_.read_banks - 1);
    }
    if (o_.lookahead_layers != 0) eo.tuning.lookahead_layers = o_.lookahead_layers;
    if (o_.write_workers != 0) eo.tuning.write_workers = o_.write_workers;
    if (o_.group_workers != 0) eo.tuning.group_workers = o_.group_workers;
    if (o_.layer_group != 0) eo.tuning.layer_group = o_.layer_group;
    eo.checksum = c.checksum_off ? ChecksumPolicy::kOff : o_.checksum;
    eo.durability = c.durability;
    if (o_.workload == Workload::kStore) eo.tuning.free_reserve_packs = 1;
    // auto probes once, in the first engine of the run; later engines reuse that choice, so
    // every configuration and point runs with the same split.
    eo.tuning.io_split_bytes = resolved_split_.value_or(o_.io_split_bytes);
    eo.tuning.ablations = c.ablations;
    eo.tuning.ablations.object_tokens = p.object_tokens;
    // Layered namings key (chunk, layer) objects; the engine's scalar index has no rank-slice
    // keys, so the TP naming is keyed as (chunk, layer) at the nearest chunk size.
    eo.tuning.ablations.objects = p.sweep.shape == baseline::ObjectShape::kChunk
                                      ? Ablations::Objects::kChunk
                                      : Ablations::Objects::kChunkLayer;
    return Engine::Open(eo);
  }

  // Stores path tokens `path` (its uncached suffix) from kv_; returns seconds to visible.
  Result<double> EngineStore(Engine& engine, std::span<const int32_t> path, const std::string& id,
                             uint64_t expect_begin) {
    RequestTimeline t;
    RANGEKV_RETURN_IF_ERROR(TimedStore(engine, *kv_, path, id, expect_begin, &t));
    return t.end - t.start;
  }

  // Restores path tokens [begin, end) of `prompt` into kv_; timed from Lookup to the last layer.
  Result<Timing> EngineRestore(Engine& engine, std::span<const int32_t> prompt,
                               uint64_t granularity, uint64_t begin, uint64_t end,
                               const std::string& id) {
    RequestTimeline t;
    RANGEKV_RETURN_IF_ERROR(
        TimedRestore(engine, *kv_, prompt, granularity, begin, end, id, /*measure_cpu=*/true, &t));
    return Timing{t.last - t.start, t.first - t.start, t.cpu_s};
  }

  Status EnsurePrefixPattern() {
    if (kv_prefix_valid_) return OkStatus();
    RANGEKV_RETURN_IF_ERROR(kv_->Fill(o_.seed, 0, P_));
    kv_prefix_valid_ = true;
    return OkStatus();
  }

  Status Poison() {
    kv_prefix_valid_ = false;
    return kv_->Poison();
  }

  static std::vector<std::pair<std::string, uint64_t>> EngineCounters(const EngineStats& w,
                                                                      Workload workload) {
    if (workload == Workload::kRestore) {
      return {{"records_selected", w.records_selected},
              {"native_reads", w.native_reads},
              {"native_read_calls", w.native_read_calls},
              {"scatter_launches", w.scatter_launches},
              {"ready_events", w.ready_events},
              {"payload_allocations", w.payload_allocations},
              {"bytes_read", w.bytes_read},
              {"read_bank_acquisitions", w.read_bank_acquisitions},
              {"prefetched_stripes", w.prefetched_stripes},
              {"leases_taken", w.leases_taken},
              {"restore_read_ns", w.restore_read_ns},
              {"restore_verify_ns", w.restore_verify_ns},
              {"restore_deliver_ns", w.restore_deliver_ns}};
    }
    return {{"native_writes", w.native_writes},
            {"native_write_calls", w.native_write_calls},
            {"gather_launches", w.gather_launches},
            {"store_bank_acquisitions", w.store_bank_acquisitions},
            {"store_gather_ns", w.store_gather_ns},
            {"store_integrity_ns", w.store_integrity_ns},
            {"store_write_ns", w.store_write_ns},
            {"journal_wait_ns", w.journal_wait_ns},
            {"payload_allocations", w.payload_allocations},
            {"bytes_written", w.bytes_written}};
  }

  static std::vector<std::pair<std::string, uint64_t>> BaselineCounters(
      const baseline::PerObjectStats& w, Workload workload) {
    if (workload == Workload::kRestore) {
      return {{"records_selected", w.records_selected},
              {"native_reads", w.native_reads},
              {"native_read_calls", w.native_reads},  // one native call per object
              {"scatter_launches", w.scatter_launches},
              {"ready_events", w.ready_events},
              {"payload_allocations", w.payload_allocations},
              {"bytes_read", w.bytes_read},
              {"keys_built", w.keys_built},
              {"index_probes", w.index_probes},
              {"kernel_launches", w.kernel_launches}};
    }
    return {{"native_writes", w.native_writes},
            {"native_write_calls", w.native_writes},  // one native call per object
            {"gather_launches", w.gather_launches},
            {"payload_allocations", w.payload_allocations},
            {"bytes_written", w.bytes_written},
            {"keys_built", w.keys_built},
            {"index_records", w.index_records},
            {"kernel_launches", w.kernel_launches}};
  }

  SweepResult NewResult(const std::string& engine, const std::optional<std::string>& ablation,
                        const Point& p) const {
    SweepResult r;
    r.engine = engine;
    r.ablation = ablation;
    r.point = p.sweep.label;
    r.nominal_objects = p.sweep.nominal_objects;
    r.objects = p.naming.count();
    r.layerwise = p.sweep.layerwise;
    r.scaled = p.sweep.scaled;
    return r;
  }

  // Keeps the result of configuration `ci` at point `pi` (ci == configs_.size(): per-object).
  void Keep(size_t pi, size_t ci, SweepResult r) {
    r.median_s = Median(r.samples_s);
    r.first_layer_median_s = Median(r.first_layer_s);
    r.cpu_median_s = Median(r.cpu_s);
    r.gib_s = r.median_s > 0 ? static_cast<double>(report_.payload_bytes) / kGiB / r.median_s : 0;
    report_.verify_failures += r.verify_failures;
    kept_[{pi, ci}] = std::move(r);
  }

  void Record(SweepResult& r, uint32_t rep, const Timing& t,
              std::vector<std::pair<std::string, uint64_t>> counters, uint64_t bad) {
    if (rep < o_.warmups) {
      r.verify_failures += bad != 0 ? 1 : 0;
      return;
    }
    r.samples_s.push_back(t.total_s);
    if (o_.workload == Workload::kRestore) r.first_layer_s.push_back(t.first_layer_s);
    if (t.cpu_s >= 0) r.cpu_s.push_back(t.cpu_s);
    for (const auto& counter : counters) {
      const std::string& name = counter.first;
      if (name.size() <= 3 || name.compare(name.size() - 3, 3, "_ns") != 0) continue;
      auto it = std::find_if(r.phases_ms.begin(), r.phases_ms.end(),
                             [&](const auto& p) { return p.first == name; });
      if (it == r.phases_ms.end()) {
        r.phases_ms.push_back({name, {}});
        it = r.phases_ms.end() - 1;
      }
      it->second.push_back(static_cast<double>(counter.second) / 1e6);
    }
    if (r.counters.empty()) {
      r.counters = std::move(counters);
    } else {
      // prefetched_stripes depends on how far lookup-time prefetch got before the claim: timing.
      for (size_t i = 0; i < counters.size() && i < r.counters.size(); ++i) {
        const std::string& name = counters[i].first;
        const bool timing = name == "prefetched_stripes" ||
                            (name.size() > 3 && name.compare(name.size() - 3, 3, "_ns") == 0);
        if (!timing && counters[i] != r.counters[i]) {
          r.counters_stable = false;
        }
      }
    }
    r.verify_failures += bad != 0 ? 1 : 0;
  }

  // Whether a configuration's engine state depends on the object naming (the scalar index keys
  // objects; object-sized read issue cuts spans at object boundaries). Other configurations
  // store the same packs and do the same work whatever the naming; only the lookup's reuse
  // granularity follows the point.
  static bool NamingDependent(const Ablations& a) {
    return a.index == Ablations::Index::kScalar || a.read_issue == Ablations::ReadIssue::kObject;
  }

  struct EngineSession {
    std::unique_ptr<Engine> engine;
    std::string dir;
    std::string pack_path;
    std::string tag;
  };

  Result<EngineSession> OpenSession(size_t ci, size_t pi, const std::string& dir_name) {
    const Config& c = configs_[ci];
    const Point& p = points_[pi];
    EngineSession session;
    session.tag = "rangekv" + (c.name ? " " + *c.name : std::string());
    session.dir = scratch_->Join(dir_name);
    session.pack_path = session.dir + "/packs.rkv";
    RANGEKV_ASSIGN_OR_RETURN(session.engine, OpenEngine(session.dir, c, p));
    if (engine_backends_.empty()) engine_backends_ = session.engine->DescribeBackends();
    // Only a probed split is pinned for later engines: fill_reads settles per engine the same
    // way, and pinning its read split would make later engines split writes too.
    if (!resolved_split_ && o_.io_split_bytes == kIoSplitAuto) {
      resolved_split_ = session.engine->options().tuning.io_split_bytes;
    }
    if (engine_read_io_threads_ == 0) {
      engine_read_io_threads_ = session.engine->options().tuning.read_io_threads;
    }
    if (report_.engine_split.empty()) {
      // The first engine's (the one that probed, under auto).
      const std::string b = session.engine->DescribeBackends();
      const size_t at = b.find("split=");
      report_.engine_split = at == std::string::npos ? "" : b.substr(at + 6);
    }
    RANGEKV_RETURN_IF_ERROR(EnsurePrefixPattern());
    RANGEKV_ASSIGN_OR_RETURN(double setup_s, EngineStore(*session.engine, prefix_, "setup", 0));
    progress_.Print("%s [%s]: prefix of %" PRIu64 " tokens stored in %.3f s", session.tag.c_str(),
                    session.engine->DescribeBackends().c_str(), P_, setup_s);
    return session;
  }

  Status CloseSession(EngineSession& session) {
    Status closed = session.engine->Close();
    session.engine.reset();
    std::error_code ec;
    std::filesystem::remove_all(session.dir, ec);
    return closed;
  }

  // One repetition of point `pi` on `session`.
  Status RangeKvRep(EngineSession& session, size_t pi, size_t ci, uint32_t rep, SweepResult& r) {
    const Point& p = points_[pi];
    const std::string id =
        "p" + std::to_string(pi) + "c" + std::to_string(ci) + "r" + std::to_string(rep);
    Timing t;
    uint64_t bad = 0;
    EngineStats work;
    Engine& engine = *session.engine;
    if (o_.workload == Workload::kRestore) {
      RANGEKV_RETURN_IF_ERROR(Poison());
      if (o_.buffered) DropCache(session.pack_path);
      const EngineStats s0 = engine.GetStats();
      RANGEKV_ASSIGN_OR_RETURN(t, EngineRestore(engine, prompt_, p.granularity_tokens, 0, P_, id));
      work = engine.GetStats() - s0;
      RANGEKV_ASSIGN_OR_RETURN(bad, kv_->CountMismatches(o_.seed, 0, P_));
      kv_prefix_valid_ = bad == 0;
    } else {
      const uint64_t seed = o_.seed + 1000003 * (pi + 1) + 7919 * (ci + 1) + rep;
      std::vector<int32_t> path = prefix_;
      const std::vector<int32_t> suffix = RandomTokens(S_, seed);
      path.insert(path.end(), suffix.begin(), suffix.end());
      RANGEKV_RETURN_IF_ERROR(kv_->Fill(seed, P_, P_ + S_));
      const EngineStats s0 = engine.GetStats();
      RANGEKV_ASSIGN_OR_RETURN(t.total_s, EngineStore(engine, path, id, P_));
      work = engine.GetStats() - s0;
      // Verify what was written by restoring it.
      RANGEKV_RETURN_IF_ERROR(Poison());
      if (o_.buffered) DropCache(session.pack_path);
      std::vector<int32_t> prompt = path;
      prompt.push_back(7);
      RANGEKV_RETURN_IF_ERROR(EngineRestore(engine, prompt, 1, P_, P_ + S_, id + "v").status());
      RANGEKV_ASSIGN_OR_RETURN(bad, kv_->CountMismatches(seed, P_, P_ + S_));
    }
    char first[48] = "";
    if (o_.workload == Workload::kRestore) {
      std::snprintf(first, sizeof(first), " (layer 0 ready %.3f s)", t.first_layer_s);
    }
    Step();
    progress_.Print(
        "point %s %s rep %u: %.3f s%s, %s%s", p.sweep.label.c_str(), session.tag.c_str(), rep,
        t.total_s, first,
        bad == 0 ? "verified" : ("VERIFY FAILED: " + std::to_string(bad) + " rows").c_str(),
        rep < o_.warmups ? " (warm-up)" : "");
    Record(r, rep, t, EngineCounters(work, o_.workload), bad);
    return OkStatus();
  }

  // Naming-independent configurations (`cis`, one unless --interleave): one engine each for
  // every point, repetitions round-robin over the configurations and the points (rotating both
  // starts), with the ceiling interleaved once per round when the default configuration is among
  // them, so drift of the shared machine hits every point and configuration alike.
  Status RunRangeKvShared(const std::vector<size_t>& cis) {
    std::vector<EngineSession> sessions;
    for (size_t ci : cis) {
      RANGEKV_ASSIGN_OR_RETURN(EngineSession session,
                               OpenSession(ci, 0, "rkv-shared-" + std::to_string(ci)));
      sessions.push_back(std::move(session));
    }
    std::optional<Ceiling> ceiling;
    if (o_.run_ceiling && cis.front() == 0) {
      RANGEKV_ASSIGN_OR_RETURN(ceiling, PrepareCeiling(sessions.front().pack_path));
    }
    const size_t n = points_.size(), m = cis.size();
    std::vector<std::vector<SweepResult>> results(m);
    for (size_t j = 0; j < m; ++j) {
      for (const Point& p : points_) {
        results[j].push_back(NewResult("rangekv", configs_[cis[j]].name, p));
      }
    }
    // The default and the checksum=off arm run side by side, point by point (which goes first
    // alternates): the dev VM's disk changes speed over seconds (after a few minutes of load it
    // reads at half the rate, then recovers), so arms run a few seconds apart met different
    // disks (checksum costs of -8% to +9% in interleaved runs of one build, 2026-12-05). The
    // store's durability=none arm is paired the same way (the journal's cost).
    size_t paired = m;  // index in cis of the checksum=off or durability=none arm, m: none
    for (size_t j = 1; j < m && cis[0] == 0 && paired == m; ++j) {
      const Config& c = configs_[cis[j]];
      const bool unjournaled = c.durability.mode == Durability::Mode::kNone &&
                               configs_[0].durability.mode != Durability::Mode::kNone;
      if (c.checksum_off || unjournaled) paired = j;
    }
    for (uint32_t rep = 0; rep < o_.warmups + o_.reps; ++rep) {
      if (ceiling.has_value()) RANGEKV_RETURN_IF_ERROR(CeilingOnce(*ceiling, rep));
      if (paired < m) {
        for (size_t k = 0; k < n; ++k) {
          const size_t pi = (rep + k) % n;
          for (size_t j : PairedDefaultFirst(rep, k, n) ? std::array{size_t{0}, paired}
                                                        : std::array{paired, size_t{0}}) {
            RANGEKV_RETURN_IF_ERROR(RangeKvRep(sessions[j], pi, cis[j], rep, results[j][pi]));
          }
        }
      }
      for (size_t i = 0; i < m; ++i) {
        const size_t j = (rep + i) % m;
        if (paired < m && (j == 0 || j == paired)) continue;
        for (size_t k = 0; k < n; ++k) {
          const size_t pi = (rep + k) % n;
          RANGEKV_RETURN_IF_ERROR(RangeKvRep(sessions[j], pi, cis[j], rep, results[j][pi]));
        }
      }
    }
    ceiling.reset();  // a write ceiling's file goes with it
    for (size_t j = 0; j < m; ++j) {
      if (cis[j] == 0 && o_.run_baseline) {
        default_session_ = std::move(sessions[j]);  // RunBaseline's "beside" repetitions
      } else {
        RANGEKV_RETURN_IF_ERROR(CloseSession(sessions[j]));
      }
      for (size_t pi = 0; pi < n; ++pi) Keep(pi, cis[j], std::move(results[j][pi]));
    }
    return OkStatus();
  }

  // A naming-dependent configuration: its own engine per point.
  Status RunRangeKvPerPoint(size_t pi, size_t ci) {
    RANGEKV_ASSIGN_OR_RETURN(
        EngineSession session,
        OpenSession(ci, pi, "rkv-" + std::to_string(pi) + "-" + std::to_string(ci)));
    SweepResult r = NewResult("rangekv", configs_[ci].name, points_[pi]);
    for (uint32_t rep = 0; rep < o_.warmups + o_.reps; ++rep) {
      RANGEKV_RETURN_IF_ERROR(RangeKvRep(session, pi, ci, rep, r));
    }
    RANGEKV_RETURN_IF_ERROR(CloseSession(session));
    Keep(pi, ci, std::move(r));
    return OkStatus();
  }

  // ---- per-object baseline ----

  Status RunBaseline(size_t pi) {
    const Point& p = points_[pi];
    const std::string dir = scratch_->Join("po-" + std::to_string(pi));
    baseline::PerObjectOptions po;
    po.dir = dir;
    po.model_name = o_.model.model_id;
    po.kv_dtype = o_.model.kv_dtype;
    po.geometry = geometry_;
    po.device = device_.get();
    // The stock path's disk backends use POSIX reads; a cufile run keeps the model on posix.
    po.io_engine = o_.io == IoEngineKind::kCuFile ? IoEngineKind::kPosix : o_.io;
    po.io_workers = 4;
    po.direct = o_.buffered ? DirectIo::kOff : DirectIo::kPreferred;
    const uint64_t footprint = baseline::PerObjectStore::FootprintBytes(p.naming, 64 * kKiB);
    po.pool_bytes = footprint;
    po.file_bytes = footprint;
    po.max_tokens = P_ + S_ + 1;
    po.max_objects = std::max<uint64_t>(p.naming.count(), 1);
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<baseline::PerObjectStore> store,
                             baseline::PerObjectStore::Open(po));
    const bool restore = o_.workload == Workload::kRestore;
    SweepResult r = NewResult("per-object", std::nullopt, p);
    const std::string data_path = dir + "/objects.dat";
    // RangeKV's default configuration again, rep by rep beside the model's: the "never slower"
    // comparison then sees the same medium at the same moment. (Run after all of RangeKV's
    // repetitions, the model met a disk that had drifted: on the dev VM it read at 2.3 GiB/s
    // where RangeKV's repetitions had met 1.4, docs/benchmarks.md 2026-12-05.) The engine is
    // the one the default configuration's rows were measured on (its pack file), kept open for
    // this rather than one opened, and its prefix stored, per point.
    EngineSession own;
    EngineSession* beside = nullptr;
    SweepResult beside_r = NewResult("rangekv", std::string(kBesidePerObject), p);
    if (default_session_.has_value()) {
      beside = &*default_session_;
    } else if (o_.run_rangekv) {
      RANGEKV_ASSIGN_OR_RETURN(own, OpenSession(0, pi, "rkv-beside-" + std::to_string(pi)));
      beside = &own;
    }
    const std::string default_tag = beside != nullptr ? beside->tag : std::string();
    if (beside != nullptr) beside->tag = std::string("rangekv ") + kBesidePerObject;
    if (restore) {
      RANGEKV_RETURN_IF_ERROR(EnsurePrefixPattern());
      baseline::PerObjectStoreReport put = store->Put(prefix_, p.naming, kv_->baseline_kv());
      RANGEKV_RETURN_IF_ERROR(put.status);
      progress_.Print("point %s per-object [%s]: %" PRIu64 " objects stored in %.3f s",
                      p.sweep.label.c_str(), store->Describe().c_str(), put.objects,
                      static_cast<double>(put.elapsed_ns) / 1e9);
    }
    for (uint32_t rep = 0; rep < o_.warmups + o_.reps; ++rep) {
      if (beside) RANGEKV_RETURN_IF_ERROR(RangeKvRep(*beside, pi, 0, rep, beside_r));
      Timing t;
      uint64_t bad = 0;
      baseline::PerObjectStats work;
      if (restore) {
        RANGEKV_RETURN_IF_ERROR(Poison());
        if (o_.buffered) DropCache(data_path);
        baseline::PerObjectRestoreReport get = store->Get(prefix_, p.naming, kv_->baseline_kv());
        RANGEKV_RETURN_IF_ERROR(get.status);
        t.total_s = static_cast<double>(get.last_layer_ready_ns) / 1e9;
        t.first_layer_s = static_cast<double>(get.first_layer_ready_ns) / 1e9;
        work = get.work;
        RANGEKV_ASSIGN_OR_RETURN(bad, kv_->CountMismatches(o_.seed, 0, P_));
        kv_prefix_valid_ = bad == 0;
      } else {
        const uint64_t seed = o_.seed + 1000003 * (pi + 1) + 31 * rep + 5;
        std::vector<int32_t> path = prefix_;
        const std::vector<int32_t> suffix = RandomTokens(S_, seed);
        path.insert(path.end(), suffix.begin(), suffix.end());
        RANGEKV_RETURN_IF_ERROR(kv_->Fill(seed, P_, P_ + S_));
        baseline::PerObjectStoreReport put = store->Put(path, p.naming, kv_->baseline_kv());
        RANGEKV_RETURN_IF_ERROR(put.status);
        t.total_s = static_cast<double>(put.elapsed_ns) / 1e9;
        work = put.work;
        RANGEKV_RETURN_IF_ERROR(Poison());
        if (o_.buffered) DropCache(data_path);
        baseline::PerObjectRestoreReport get = store->Get(path, p.naming, kv_->baseline_kv());
        RANGEKV_RETURN_IF_ERROR(get.status);
        RANGEKV_ASSIGN_OR_RETURN(bad, kv_->CountMismatches(seed, P_, P_ + S_));
        store->Clear();
      }
      Step();
      progress_.Print(
          "point %s per-object rep %u: %.3f s, %s%s", p.sweep.label.c_str(), rep, t.total_s,
          bad == 0 ? "verified" : ("VERIFY FAILED: " + std::to_string(bad) + " rows").c_str(),
          rep < o_.warmups ? " (warm-up)" : "");
      Record(r, rep, t, BaselineCounters(work, o_.workload), bad);
    }
    report_.direct = report_.direct && store->direct_io();
    baseline_backends_ = store->Describe();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    Keep(pi, configs_.size(), std::move(r));
    if (beside != nullptr) {
      beside->tag = default_tag;
      if (beside == &own) RANGEKV_RETURN_IF_ERROR(CloseSession(own));
      Keep(pi, configs_.size() + 1, std::move(beside_r));
    }
    return OkStatus();
  }

  const SweepOptions o_;
  Geometry geometry_;
  uint64_t P_ = 0;
  uint64_t S_ = 0;
  std::vector<Point> points_;
  std::vector<Config> configs_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<ScratchDir> scratch_;
  std::unique_ptr<PagedKvSpace> kv_;
  bool kv_prefix_valid_ = false;
  std::vector<int32_t> prefix_;
  std::vector<int32_t> prompt_;
  SweepReport report_;
  std::map<std::pair<size_t, size_t>, SweepResult> kept_;  // (point, config) -> result
  // The default configuration's engine, kept from RunRangeKvShared for RunBaseline.
  std::optional<EngineSession> default_session_;
  // One overall progress line on stderr: steps done of the planned total (ceiling passes, grid
  // cells, timed and warm-up repetitions).
  ProgressLine progress_{o_.tool + " " + std::string(WorkloadName(o_.workload)), o_.progress};
  std::string engine_backends_;
  std::string baseline_backends_;
  std::optional<uint64_t> resolved_split_;  // the first engine's io_split_bytes, as resolved
  uint32_t engine_read_io_threads_ = 0;     // the first engine's read_io_threads, as resolved
};

}  // namespace

Result<SweepReport> RunTransferSweep(const SweepOptions& options) {
  Sweep sweep(options);
  return sweep.Run();
}

}  // namespace rangekv::tools
