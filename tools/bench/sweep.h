// The Range paper's fixed-payload sweep (section 5.1, Table 3; docs/design.md "Baselines"),
// which `rangekv bench restore`, `rangekv bench store` and `rangekv demo` run.
//
// One sweep run measures, on the same payload, medium and memory:
//   ceiling     raw parallel native I/O of the same bytes (tools/bench/ceiling.h; restore: threads
//               of plain pread of the pack file's stripe extents holding the payload into one
//               preallocated host buffer; store: threads of plain pwrite of the suffix's bytes
//               into a fresh preallocated file in the same directory), the best cell of a grid of
//               such configurations, and the host-to-device copy ceiling when the device is a
//               GPU;
//   rangekv     the engine (include/rangekv/engine.h) with the default configuration and each
//               requested ablation, one Engine per (configuration, point) so ablations that
//               depend on the object size get their own directory state;
//   per-object  the labelled model of the stock per-object path (tools/bench/baseline/).
// Each is run once as a warm-up and then `reps` times; the median is reported. Every restore
// (and every store, by restoring what it wrote) is verified bit for bit against the payload
// pattern (tools/bench/paged_kv.h) outside the timed region; the destination is poisoned before
// each repetition.
//
// Thread-safety: single-threaded driver; helpers spawn their own worker threads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "io/io_engine.h"
#include "rangekv/engine.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"
#include "tools/bench/ceiling.h"
#include "tools/bench/machine.h"

namespace rangekv::tools {

enum class Workload : uint8_t { kRestore, kStore };

struct SweepOptions {
  Workload workload = Workload::kRestore;
  // Restore: the largest spread of the default configuration's medians across the points that
  // --check accepts (the acceptance's 2%; `rangekv demo`, a smaller payload, states 5%).
  double spread_target = 0.02;
  std::string tool = "rangekv bench";  // prefix of progress lines
  ModelSpec model;
  uint64_t payload_tokens = 0;  // the cached prefix
  uint64_t suffix_tokens = 0;   // the stored suffix (store workload); 0: paper ratio
  // Point labels: "192", "768", "3072", "6144", "6144-LW", "327680-TP" (count, -LW for
  // per-layer objects, -TP for (chunk, layer, rank-slice) objects).
  std::vector<std::string> points;
  // Engine ablations to run beside the default, as "key=value" (Ablations::Set syntax).
  std::vector<std::string> ablations;
  bool run_rangekv = true;
  bool run_baseline = true;
  bool run_ceiling = true;
  // Configurations that share one engine across the points run side by side, repetition by
  // repetition (their engines open at once), instead of one after the other: machine drift then
  // hits every configuration alike (a comparison of a few percent, e.g. the journal's cost).
  bool interleave_configs = false;
  uint32_t reps = 3;
  uint32_t warmups = 1;
  DeviceKind device = DeviceKind::kAuto;
  IoEngineKind io = IoEngineKind::kPosix;
  bool buffered = false;  // page-cache I/O (dropped before each repetition) instead of O_DIRECT
  std::string dir;        // parent of the scratch directory
  uint32_t ceiling_threads = 0;  // 0: the engine's read I/O threads or write (32) workers
  CeilingGrid ceiling_grid = CeilingGrid::kFull;
  uint64_t grid_cell_bytes = 256ull << 20;
  // Engine byte split (EngineTuning::io_split_bytes): kIoSplitAuto probes once (the first
  // engine) and later engines reuse its choice; kIoSplitFillReads settles per engine.
  uint64_t io_split_bytes = kIoSplitFillReads;
  uint64_t seed = 20261130;
  bool progress = true;
  // Engine tuning (0: the engine's default), for finding where time goes.
  uint32_t read_workers = 0;
  uint32_t read_io_threads = 0;
  uint32_t read_banks = 0;
  uint32_t lookahead_layers = 0;
  uint32_t write_workers = 0;
  uint32_t group_workers = 0;
  uint32_t layer_group = 0;
  ChecksumPolicy checksum = ChecksumPolicy::kAlways;  // the engine's span digests
  // EngineOptions::durability values (Durability::Set syntax): the first is the default
  // configuration's, each further one runs as an extra configuration named "durability=X"
  // (beside the ablations), so the journal's cost is measured against another setting in one
  // run. Empty: the engine's default.
  std::vector<std::string> durabilities;
};

// The ablation name of RangeKV's default configuration measured again rep by rep beside the
// per-object model (Sweep::RunBaseline): the "never slower" comparison uses it, so both see the
// same medium at the same moment.
inline constexpr const char* kBesidePerObject = "beside per-object";

struct SweepResult {
  std::string engine;                   // "rangekv" | "per-object"
  std::optional<std::string> ablation;  // null for the default configuration
  std::string point;                    // label
  uint64_t nominal_objects = 0;
  uint64_t objects = 0;  // effective objects of the workload's bytes
  bool layerwise = false;
  bool scaled = false;
  std::vector<double> samples_s;
  std::vector<double> first_layer_s;  // restore only
  // Process CPU seconds (every thread) over each timed repetition; RangeKV restores only.
  std::vector<double> cpu_s;
  double median_s = 0;
  double first_layer_median_s = 0;
  double cpu_median_s = 0;
  double gib_s = 0;
  // Work counters of one timed repetition (identical across repetitions; checked).
  std::vector<std::pair<std::string, uint64_t>> counters;
  bool counters_stable = true;
  uint64_t verify_failures = 0;
  // Phase timings (counters named *_ns) of every timed repetition, milliseconds.
  std::vector<std::pair<std::string, std::vector<double>>> phases_ms;
};

struct SweepReport {
  Workload workload = Workload::kRestore;
  // The restore's spread across namings that --check holds it to (SweepOptions::spread_target).
  double spread_target = 0.02;
  std::string device;  // capabilities().name
  std::string io;      // "posix x4, O_DIRECT"
  bool direct = true;
  std::string model;
  Geometry geometry;
  uint64_t payload_bytes = 0;  // bytes each repetition moves (prefix or suffix)
  uint64_t payload_tokens = 0;
  uint64_t prefix_tokens = 0;
  double ceiling_gib_s = 0;  // engine-configuration ceiling (threads = engine workers)
  std::vector<double> ceiling_samples_gib_s;
  std::string ceiling_config;  // "4 threads x stripe extents"
  // The best ceiling: the grid's best cell re-measured on the whole payload, interleaved with
  // the repetitions like the engine-configuration ceiling (or that one, when it is faster).
  std::vector<GridCell> grid;
  double best_ceiling_gib_s = 0;
  std::vector<double> best_ceiling_samples_gib_s;
  std::string best_ceiling_config;  // "8 threads x 1 MiB requests"
  uint32_t best_ceiling_threads = 0;
  uint64_t best_ceiling_request_bytes = 0;
  std::string durability;        // the default configuration's ("periodic:200")
  bool interleaved = false;      // --interleave: the shared configurations ran side by side
  std::string engine_split;      // the engine's byte split as DescribeBackends reports it
  double h2d_ceiling_gib_s = 0;  // 0 when the device is the host
  std::vector<SweepResult> results;
  uint64_t verify_failures = 0;
  MachineInfo machine;
  double wall_s = 0;
  // The ratio every RangeKV number is stated against: the best ceiling when measured, else the
  // engine-configuration one.
  double reference_ceiling_gib_s() const {
    return best_ceiling_gib_s > 0 ? best_ceiling_gib_s : ceiling_gib_s;
  }
};

// Runs the sweep. Errors (setup failures, engine errors) abort the run; verification failures
// do not (they are counted in the report).
Result<SweepReport> RunTransferSweep(const SweepOptions& options);

// The table on stdout.
void PrintSweepTable(const SweepReport& report, std::FILE* out);
// Per-engine summary lines: the RangeKV spread across points, ratios to the ceiling and the
// per-object baseline.
void PrintSweepSummary(const SweepReport& report, std::FILE* out);
// The acceptance targets (`--check`): every default RangeKV point at >= 0.95 (restore) / 0.90
// (store) of the best ceiling and no slower than the per-object model at that point, and the
// checksum cost (default vs the checksum=off arm, sums of medians) <= 2% when that arm ran.
// Returns one line per missed target.
std::vector<std::string> CheckTargets(const SweepReport& report);
// {"workload":"restore","device":...,"payload_bytes":...,"ceiling_gib_s":X,"results":[...]}.
nlohmann::json SweepJson(const SweepReport& report);

std::string_view WorkloadName(Workload w);  // "restore", "store"

// Draws median time per point for every arm, ceilings as lines (tools/bench/plot.cc): .svg
// written directly, .png through `python3 -m rangekv.bench.plots` (matplotlib).
Status WriteSweepPlot(const SweepReport& report, const std::string& path);

}  // namespace rangekv::tools
