// rangekv: demo, benchmarks and store tools. See `rangekv --help`.
#include <CLI/CLI.hpp>

#include <string>

#include "base/parse.h"
#include "rangekv/build_info.h"
#include "tools/bench/scratch.h"
#include "tools/commands.h"

namespace {

// CLI11 (Debian 12's 2.1.2) reads an unsigned option with strtoull: "-3" wraps to 2^64-3, a
// leading 0 is octal and "0x10" hex. Every unsigned option of every command gets this check
// (run after the option's own transforms), so a count is plain decimal digits within uint64.
void StrictUnsignedOptions(CLI::App& app) {
  for (CLI::Option* opt : app.get_options([](CLI::Option*) { return true; })) {
    // "UINT", or "UINT:<description>" once a validator with a description was added.
    const std::string type = opt->get_type_name();
    if (type != "UINT" && type.rfind("UINT:", 0) != 0) continue;
    opt->check(CLI::Validator(
        [](std::string& value) -> std::string {
          auto n = rangekv::ParseCount(value);
          return n.ok() ? std::string() : n.status().message();
        },
        "", "plain decimal count"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    StrictUnsignedOptions(*sub);
  }
}

}  // namespace

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
  // An interrupted benchmark or demo removes its scratch stores (tools/bench/scratch.h).
  bench->preparse_callback([](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  app.get_subcommand("demo")->preparse_callback(
      [](size_t) { rangekv::tools::RemoveScratchOnSignals(); });
  StrictUnsignedOptions(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
