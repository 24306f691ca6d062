// `rangekv demo`: the Range paper's rule, shown in well under a minute on a CPU machine.
//
// A small version of `rangekv bench restore` and `rangekv bench store` (bench_common.h): one
// rank of Llama-3.1-8B at tensor parallelism 4 (s = 1 KiB per token and layer, 32 layers), a
// 192 MiB cached prefix (6,144 tokens) and its 63 MiB suffix, named as 192, 768, 3,072 and
// 6,144 chunk objects, 6,144 per-layer objects and the (scaled) TP-sliced naming. For each
// naming it restores the prefix and stores the suffix with RangeKV and with the labelled
// per-object model of the stock path, on the host device, in a temporary directory that is
// removed afterwards. Every repetition is verified bit for bit; the exit status is non-zero
// when any verification fails.
#include <cstdio>

#include "base/log.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "rangekv demo: %s\n", what.c_str());
  throw CLI::RuntimeError(1);
}

SweepOptions DemoOptions(Workload workload) {
  SweepOptions o;
  o.workload = workload;
  o.tool = "demo";
  o.model = Llama31_8BSpec();
  o.model.tp_size = 4;  // rank 0 of 4: 2 KV heads, s = 1 KiB
  o.payload_tokens = 6144;
  o.points = {"192", "768", "3072", "6144", "6144-LW", "327680-TP"};
  o.run_ceiling = true;
  o.reps = 3;
  o.warmups = 1;
  o.device = DeviceKind::kHost;
  o.io = IoEngineKind::kPosix;
  o.progress = false;
  return o;
}

void RunDemo() {
  std::printf(
      "RangeKV demo: the same KV bytes, named as more and more logical cache objects.\n"
      "RangeKV moves them as byte stripes: its reads, scatters, writes and gathers follow the\n"
      "bytes and stay constant. The per-object baseline (a labelled C++ model of the stock\n"
      "per-object path: one key, lookup, allocation, native I/O and transfer call per object)\n"
      "grows with the object count. Host device, O_DIRECT where the file system allows it,\n"
      "median of 3 after a warm-up, every repetition verified bit for bit.\n");
  SetMinLogLevel(LogLevel::kWarning);  // no per-store info lines between the tables
  uint64_t failures = 0;
  for (Workload w : {Workload::kRestore, Workload::kStore}) {
    std::fflush(stdout);
    std::fprintf(stderr, "rangekv demo: running the %s sweep...\n",
                 std::string(WorkloadName(w)).c_str());
    Result<SweepReport> report = RunTransferSweep(DemoOptions(w));
    if (!report.ok()) Fail(report.status().ToString());
    PrintSweepTable(*report, stdout);
    PrintSweepSummary(*report, stdout);
    std::fflush(stdout);
    failures += report->verify_failures;
  }
  std::printf("\nFull-size runs: rangekv bench restore --payload 6GiB; rangekv bench store.\n");
  if (failures != 0) throw CLI::RuntimeError(2);
}

}  // namespace

void AddDemoCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Restore and store the same bytes as 192..327,680 logical objects: RangeKV vs "
      "a per-object model (small, CPU, about half a minute)");
  cmd->callback([] { RunDemo(); });
}

}  // namespace rangekv::tools
