// `rangekv bench io`: the command line of tools/bench/io.h (file -> host memory through the I/O
// engines against the plain-pread ceiling).
#include <cstdio>
#include <fstream>
#include <memory>

#include "tools/bench/io.h"
#include "tools/bench/util.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

struct IoFlags {
  IoBenchOptions o;
  std::string uring_submit = "inline";
  std::string ceiling_grid = "full";
  std::string json_path;
};

void RunBenchIo(const IoFlags& f) {
  IoBenchOptions o = f.o;
  o.uring_submit_async = f.uring_submit == "async";
  o.ceiling_grid = f.ceiling_grid == "off"     ? CeilingGrid::kOff
                   : f.ceiling_grid == "short" ? CeilingGrid::kShort
                                               : CeilingGrid::kFull;
  Result<IoReport> report = RunIoBench(o);
  if (!report.ok()) FailCommand("bench io", report.status().ToString());
  PrintIoReport(*report, stdout);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << IoJson(*report).dump(2) << "\n";
    if (!out) FailCommand("bench io", "cannot write " + f.json_path);
  }
}

}  // namespace

void AddBenchIoCommand(CLI::App& bench) {
  auto f = std::make_shared<IoFlags>();
  IoBenchOptions& o = f->o;
  CLI::App* cmd = bench.add_subcommand(
      "io", "File -> host memory throughput: pread ceiling vs the posix and uring engines");
  cmd->add_option("--size", o.size_bytes, "File size (e.g. 2GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--block", o.block_bytes, "Bytes per read (one span)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "pread threads / posix workers / uring rings")
      ->capture_default_str();
  cmd->add_option("--queue-depth", o.queue_depth, "uring SQEs in flight per ring")
      ->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed repetitions (after one warm-up)")->capture_default_str();
  cmd->add_option("--dir", o.dir,
                  "Parent of the run's scratch directory (default: $TMPDIR or /tmp)");
  cmd->add_flag("--direct", o.direct, "Open the file with O_DIRECT where supported");
  cmd->add_option("--uring-submit", f->uring_submit, "inline | async (IOSQE_ASYNC)")
      ->check(CLI::IsMember({"inline", "async"}))
      ->capture_default_str();
  cmd->add_option("--json", f->json_path, "Write results as JSON to this file");
  cmd->add_option("--ceiling-grid", f->ceiling_grid,
                  "best-ceiling grid: full (threads 1-16 x 1-32 MiB), short, off")
      ->check(CLI::IsMember({"full", "short", "off"}))
      ->capture_default_str();
  cmd->add_option("--grid-cell-bytes", o.grid_cell_bytes, "bytes read per grid cell")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--split", o.split_bytes, "engines' byte split (0: spans whole)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_flag("--cuda-register", o.cuda_register,
                "Page-lock the destination with the GPU first (as the engine's pinned staging)");
  cmd->callback([f] { RunBenchIo(*f); });
}

}  // namespace rangekv::tools
