// rangekv: demo, benchmarks and store tools. See `rangekv --help`.
#include <CLI/CLI.hpp>

#include <string>

#include "rangekv/build_info.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"RangeKV: KV-cache storage engine (byte-striped packs, ticketed restores)"};
  const rangekv::BuildInfo& build = rangekv::GetBuildInfo();
  app.set_version_flag("--version",
                       "rangekv " + std::string(build.version) + " (CUDA kernels: " +
                           (build.has_cuda_kernels() ? std::string(build.cuda_kernels) + ", nvcc " +
                                                           std::string(build.cuda_compiler_version)
                                                     : std::string("none, built without CUDA")) +
                           ")");
  app.require_subcommand(1);
  rangekv::tools::AddDemoCommand(app);
  CLI::App* bench = app.add_subcommand("bench", "Named benchmark workloads");
  bench->require_subcommand(1);
  rangekv::tools::AddBenchIoCommand(*bench);
  rangekv::tools::AddBenchLookupCommand(*bench);
  rangekv::tools::AddBenchTransferCommands(*bench);
  rangekv::tools::AddBenchConcurrentCommand(*bench);
  rangekv::tools::AddBenchRemoteCommand(*bench);
  rangekv::tools::AddInspectCommands(app);
  rangekv::tools::AddServeCommand(app);
  // An interrupted benchmark or demo removes its scratch stores (tools/bench_common.h).
  bench->preparse_callback([](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  app.get_subcommand("demo")->preparse_callback(
      [](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  CLI11_PARSE(app, argc, argv);
  return 0;
}
