// `rangekv bench restore` and `rangekv bench store`: the Range paper's fixed-payload sweep
// (section 5.1, Table 3; docs/design.md "Baselines"). The same payload is restored (or its suffix
// stored) while the number of logical objects naming it grows: 192, 768, 3,072, 6,144 chunk
// objects, 6,144 per-layer objects (-LW) and the 327,680-object TP-sliced naming (-TP). Each
// point runs, in one process, the medium's ceiling, RangeKV with its default configuration and
// each ablation, and the labelled per-object model of the stock path (tools/bench/baseline/), with
// a warm-up and `--reps` timed repetitions each; every repetition is verified bit for bit. The
// machinery lives in tools/bench/sweep.h; this file is the command line.
//
// Defaults fit a 2-core, 24 GiB CPU machine: Llama-3.1-8B geometry (s = 4 KiB, W = 32 MiB,
// T = 8192, L = 32) with a 768 MiB prefix (6,144 tokens: every plain point splits it into whole
// tokens) on the host device, O_DIRECT in a scratch directory under /var/tmp. `--payload 6GiB`
// is the paper's full size (49,152 tokens, 6 packs).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/units.h"
#include "tools/bench/sweep.h"
#include "tools/bench/util.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

struct TransferFlags {
  std::string device = "auto";
  std::string io = "posix";
  uint32_t reps = 5;
  uint32_t warmups = 1;
  std::string payload = "768MiB";
  std::string suffix;  // store: suffix size (default: the paper's 16,128/49,152 ratio)
  std::string dir;
  std::string json_path;
  std::string objects = "192,768,3072,6144,6144-LW,327680-TP";
  std::string ablations;  // default per workload
  bool skip_baseline = false;
  bool skip_rangekv = false;
  bool skip_ceiling = false;
  bool interleave = false;
  bool buffered = false;
  bool quiet = false;
  bool verbose = false;
  uint32_t ceiling_threads = 0;
  uint32_t tp_size = 1;
  uint64_t seed = 20261130;
  uint32_t read_workers = 0;
  uint32_t read_io_threads = 0;
  uint32_t read_banks = 0;
  uint32_t lookahead_layers = 0;
  uint32_t write_workers = 0;
  uint32_t group_workers = 0;
  uint32_t layer_group = 0;
  std::string checksum = "on";
  std::string durability;
  std::string ceiling_grid = "full";
  std::string grid_cell = "256MiB";
  std::string io_split = "fill";
  bool check = false;
  std::string plot_path;
};

[[noreturn]] void Fail(Workload w, const std::string& what) {
  FailCommand("bench " + std::string(WorkloadName(w)), what);
}

void RunTransfer(Workload workload, const TransferFlags& f) {
  SweepOptions o;
  o.workload = workload;
  o.tool = "bench";
  o.model = Llama31_8BSpec();
  o.model.tp_size = f.tp_size;
  Result<Geometry> g = DeriveGeometry(o.model);
  if (!g.ok()) Fail(workload, g.status().ToString());
  const uint64_t row_bytes = uint64_t{g->layers} * g->token_bytes;
  Result<uint64_t> payload = ParseBytes(f.payload);
  if (!payload.ok()) Fail(workload, "--payload: " + payload.status().ToString());
  if (*payload % row_bytes != 0) {
    Fail(workload, "--payload must be a whole number of tokens (" + FormatBytes(row_bytes) +
                       " each for this geometry)");
  }
  o.payload_tokens = *payload / row_bytes;
  if (!f.suffix.empty()) {
    Result<uint64_t> suffix = ParseBytes(f.suffix);
    if (!suffix.ok() || *suffix % row_bytes != 0) {
      Fail(workload, "--suffix must be a whole number of tokens");
    }
    o.suffix_tokens = *suffix / row_bytes;
  }
  o.points = SplitList(f.objects);
  if (o.points.empty()) Fail(workload, "--objects is empty");
  std::string ablations = f.ablations;
  if (ablations.empty()) {
    // Read-side switches only change restores; on the store path only the index differs.
    ablations = workload == Workload::kRestore
                    ? "index=scalar,read_issue=object,delivery=barrier,prefetch=dispatch"
                    : "index=scalar";
  }
  if (ablations != "none") o.ablations = SplitList(ablations);
  // Restore only: a store digests its spans under either policy (the checksum policy is the
  // restore's verification), so a store has no checksum-off arm to compare with.
  if (f.check && workload == Workload::kRestore && f.checksum == "on" && !f.skip_rangekv &&
      std::find(o.ablations.begin(), o.ablations.end(), "checksum=off") == o.ablations.end()) {
    o.ablations.push_back("checksum=off");  // --check needs the checksum cost
  }
  o.ceiling_grid = f.ceiling_grid == "off"     ? CeilingGrid::kOff
                   : f.ceiling_grid == "short" ? CeilingGrid::kShort
                                               : CeilingGrid::kFull;
  Result<uint64_t> cell = ParseBytes(f.grid_cell);
  if (!cell.ok() || *cell < kMiB) Fail(workload, "--grid-cell-bytes must be >= 1 MiB");
  o.grid_cell_bytes = *cell;
  if (f.io_split == "fill") {
    o.io_split_bytes = kIoSplitFillReads;
  } else if (f.io_split == "auto") {
    o.io_split_bytes = kIoSplitAuto;
  } else if (f.io_split == "off") {
    o.io_split_bytes = kIoSplitOff;
  } else {
    Result<uint64_t> split = ParseBytes(f.io_split);
    if (!split.ok()) Fail(workload, "--io-split: fill, auto, off or a size");
    o.io_split_bytes = *split;
  }
  o.run_baseline = !f.skip_baseline;
  o.run_rangekv = !f.skip_rangekv;
  o.run_ceiling = !f.skip_ceiling;
  o.interleave_configs = f.interleave;
  o.reps = f.reps;
  o.warmups = f.warmups;
  if (f.device == "host") {
    o.device = DeviceKind::kHost;
  } else if (f.device == "cuda") {
    o.device = DeviceKind::kCuda;
  } else {
    o.device = DeviceKind::kAuto;
  }
  Result<IoEngineKind> io = ParseIoEngineKind(f.io);
  if (!io.ok()) Fail(workload, "--io: " + io.status().ToString());
  o.io = *io;
  o.buffered = f.buffered;
  o.dir = f.dir;
  o.ceiling_threads = f.ceiling_threads;
  o.seed = f.seed;
  o.progress = !f.quiet;
  o.read_workers = f.read_workers;
  o.read_io_threads = f.read_io_threads;
  o.read_banks = f.read_banks;
  o.lookahead_layers = f.lookahead_layers;
  o.write_workers = f.write_workers;
  o.group_workers = f.group_workers;
  o.layer_group = f.layer_group;
  o.checksum = f.checksum == "off" ? ChecksumPolicy::kOff : ChecksumPolicy::kAlways;
  o.durabilities = SplitList(f.durability);

  // Engine and store lines at info level (store opened, snapshot saved) would interleave with
  // the progress lines; warnings and errors still show.
  if (!f.verbose) SetMinLogLevel(LogLevel::kWarning);
  Result<SweepReport> report = RunTransferSweep(o);
  if (!report.ok()) Fail(workload, report.status().ToString());
  PrintSweepTable(*report, stdout);
  {
    Durability d;
    if (!o.durabilities.empty()) (void)d.Set(o.durabilities[0]);
    std::printf("durability of the default configuration: %s\n", d.ToString().c_str());
  }
  PrintSweepSummary(*report, stdout);
  std::printf("machine: %u cores, %.1f GiB, Linux %s, %s; %s; wall %.0f s\n", report->machine.nproc,
              report->machine.memory_gib, report->machine.kernel.c_str(),
              report->machine.file_system.c_str(), report->machine.date.c_str(), report->wall_s);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << SweepJson(*report).dump(1) << "\n";
    if (!out) Fail(workload, "cannot write " + f.json_path);
  }
  if (!f.plot_path.empty()) {
    Status plotted = WriteSweepPlot(*report, f.plot_path);
    if (!plotted.ok()) Fail(workload, "--plot: " + plotted.ToString());
    std::printf("plot: %s\n", f.plot_path.c_str());
  }
  if (report->verify_failures != 0) throw CLI::RuntimeError(2);
  if (f.check) {
    const std::vector<std::string> missed = CheckTargets(*report);
    for (const std::string& m : missed) std::printf("check: MISSED %s\n", m.c_str());
    if (!missed.empty()) throw CLI::RuntimeError(3);
    std::printf("check: every target met\n");
  }
}

void AddWorkload(CLI::App& bench, Workload workload, const char* help) {
  auto flags = std::make_shared<TransferFlags>();
  CLI::App* cmd = bench.add_subcommand(std::string(WorkloadName(workload)), help);
  cmd->add_option("--device", flags->device, "host | cuda | auto")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--io", flags->io,
                  "I/O engine for RangeKV and the baseline: posix | uring | cufile (RangeKV "
                  "only, CUDA device; falls back with the reason)")
      ->check(CLI::IsMember({"posix", "uring", "cufile"}))
      ->capture_default_str();
  cmd->add_option("--reps", flags->reps, "timed repetitions per configuration (median)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--warmups", flags->warmups, "untimed repetitions first")
      ->check(CLI::Range(0u, 100u))
      ->capture_default_str();
  cmd->add_option("--payload", flags->payload,
                  "cached prefix size (768MiB = 6,144 tokens; 6GiB = the paper's 49,152)")
      ->capture_default_str();
  if (workload == Workload::kStore) {
    cmd->add_option("--suffix", flags->suffix,
                    "stored suffix size (default: payload x 16,128 / 49,152 as in the paper)");
  }
  cmd->add_option("--dir", flags->dir,
                  "parent directory of the scratch store (default $TMPDIR or /var/tmp)");
  cmd->add_option("--json", flags->json_path, "write the results as JSON to this file");
  cmd->add_option("--objects", flags->objects,
                  "object counts: N (chunks), N-LW (chunk x layer), N-TP (chunk x layer x rank "
                  "slice); 327680 means 327680-TP")
      ->capture_default_str();
  cmd->add_option("--ablations", flags->ablations,
                  "engine ablations beside the default, comma-separated key=value, or 'none' "
                  "(default: restore all four, store index=scalar)");
  cmd->add_flag("--skip-baseline", flags->skip_baseline, "do not run the per-object model");
  cmd->add_flag("--skip-rangekv", flags->skip_rangekv, "do not run the engine");
  cmd->add_flag("--skip-ceiling", flags->skip_ceiling, "do not measure the ceiling");
  cmd->add_flag("--interleave", flags->interleave,
                "run the configurations that share one engine rep by rep side by side (their "
                "engines open together) rather than one after the other");
  cmd->add_flag("--buffered", flags->buffered,
                "buffered I/O instead of O_DIRECT (page cache dropped before each repetition)");
  cmd->add_flag("--quiet", flags->quiet, "no progress lines on stderr");
  cmd->add_flag("--verbose", flags->verbose, "engine log lines at info level too");
  cmd->add_option("--ceiling-threads", flags->ceiling_threads,
                  "threads of the raw-I/O ceiling (0: the engine's read I/O threads / 32 write "
                  "workers)")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  cmd->add_option("--tp", flags->tp_size,
                  "tensor-parallel degree of the Llama-3.1-8B geometry (rank 0 is measured)")
      ->check(CLI::IsMember({1u, 2u, 4u, 8u}))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "payload and token seed")->capture_default_str();
  cmd->add_option("--read-workers", flags->read_workers, "engine read workers (0: default 4)");
  cmd->add_option(
         "--read-io-threads", flags->read_io_threads,
         "threads of the engine's read I/O engine (0: auto, the hardware threads up to 16 on a "
         "buffered pack file, 4 per read worker on O_DIRECT)")
      ->check(CLI::Range(0u, 256u));
  cmd->add_option("--read-banks", flags->read_banks, "engine read banks (0: default 8)");
  cmd->add_option("--lookahead", flags->lookahead_layers, "engine lookahead layers (0: default 4)");
  cmd->add_option("--write-workers", flags->write_workers, "engine write workers (0: default 32)");
  cmd->add_option(
      "--group-workers", flags->group_workers,
      "engine store group workers (0: auto, 8 on CUDA, min(8, usable CPUs) on the host device)");
  cmd->add_option("--layer-group", flags->layer_group,
                  "engine store layer group (0: auto, 4 on CUDA, 2 on the host device)");
  cmd->add_option("--checksum", flags->checksum, "engine span digests: on (default) | off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--durability", flags->durability,
                  "engine durability, comma-separated: the first for the default "
                  "configuration, each further one as an extra configuration "
                  "(every_publish | periodic:<ms> | none; default: the engine's, periodic:200)");
  cmd->add_option("--ceiling-grid", flags->ceiling_grid,
                  "best-ceiling grid: full (threads 1-16 x requests 1-32 MiB), short (4,16 x 1, "
                  "32 MiB), off")
      ->check(CLI::IsMember({"full", "short", "off"}))
      ->capture_default_str();
  cmd->add_option("--grid-cell-bytes", flags->grid_cell, "payload bytes per grid cell (bound)")
      ->capture_default_str();
  cmd->add_option("--io-split", flags->io_split,
                  "engine byte split: fill (the engine's default: when the read I/O threads "
                  "outnumber the read workers, 1 MiB pieces, and on O_DIRECT writes too), "
                  "auto (probe at open), off, or a size (e.g. 1MiB)")
      ->capture_default_str();
  cmd->add_flag("--check", flags->check,
                "exit 3 when a target is missed (>= 0.95 (restore) / 0.90 (store) of the best "
                "ceiling, no slower than per-object, restore checksum cost <= 2% and spread "
                "across the points <= 2%; a restore --check adds the checksum=off arm)");
  cmd->add_option("--plot", flags->plot_path,
                  "draw time against object count per arm, ceilings as lines (.svg written "
                  "directly; .png through python3 + matplotlib)");
  cmd->callback([workload, flags] { RunTransfer(workload, *flags); });
}

}  // namespace

void AddBenchTransferCommands(CLI::App& bench) {
  AddWorkload(bench, Workload::kRestore,
              "Fixed-payload restore sweep over logical object counts: ceiling, RangeKV, "
              "ablations, per-object baseline");
  AddWorkload(bench, Workload::kStore,
              "Fixed-payload suffix store sweep over logical object counts: ceiling, RangeKV, "
              "index ablation, per-object baseline");
}

}  // namespace rangekv::tools
