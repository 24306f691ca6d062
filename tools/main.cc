// rangekv: demo, benchmarks and store tools. See `rangekv --help`.
#include <CLI/CLI.hpp>

#include "tools/bench/scratch.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"RangeKV: KV-cache storage engine (byte-striped packs, ticketed restores)"};
  app.require_subcommand(1);
  rangekv::tools::AddDemoCommand(app);
  CLI::App* bench = app.add_subcommand("bench", "Named benchmark workloads");
  bench->require_subcommand(1);
  rangekv::tools::AddBenchIoCommand(*bench);
  rangekv::tools::AddBenchLookupCommand(*bench);
  rangekv::tools::AddBenchTransferCommands(*bench);
  rangekv::tools::AddBenchConcurrentCommand(*bench);
  rangekv::tools::AddInspectCommands(app);
  rangekv::tools::AddServeCommand(app);
  // An interrupted benchmark or demo removes its scratch stores (tools/bench/scratch.h).
  bench->preparse_callback([](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  app.get_subcommand("demo")->preparse_callback(
      [](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  CLI11_PARSE(app, argc, argv);
  return 0;
}
