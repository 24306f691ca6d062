// `rangekv bench lookup`: the command line of tools/bench/lookup.h (directory lookups, tree
// against the per-object index; with --store, engine lookups embedded against through the store
// service).
#include <cstdio>
#include <fstream>
#include <memory>

#include "tools/bench/lookup.h"
#include "tools/bench/util.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

struct LookupFlags {
  LookupBenchOptions o;
  std::string json_path;
};

void RunBenchLookup(const LookupFlags& f) {
  Result<nlohmann::json> j = RunLookupBench(f.o);
  if (!j.ok()) FailCommand("bench lookup", j.status().ToString());
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << j->dump(2) << "\n";
    if (!out) FailCommand("bench lookup", "cannot write " + f.json_path);
  }
}

}  // namespace

void AddBenchLookupCommand(CLI::App& bench) {
  auto cfg = std::make_shared<LookupFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "lookup", "Directory lookup time: range tree vs per-object index (index=scalar)");
  cmd->add_option("--prefix-tokens", cfg->o.prefix_tokens, "Cached prefix length (tokens)")
      ->capture_default_str();
  cmd->add_option("--suffix-tokens", cfg->o.suffix_tokens, "Uncached tokens after the prefix")
      ->capture_default_str();
  cmd->add_option("--granularity", cfg->o.granularities, "Reuse granularities (tokens)")
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", cfg->o.chunk_tokens, "Scalar index: tokens per logical object")
      ->capture_default_str();
  cmd->add_option("--reps", cfg->o.reps, "Timed repetitions (after --warmup)")
      ->capture_default_str();
  cmd->add_option("--warmup", cfg->o.warmup, "Untimed repetitions")->capture_default_str();
  cmd->add_option("--seed", cfg->o.seed, "Token generator seed")->capture_default_str();
  cmd->add_flag("!--no-layerwise", cfg->o.layerwise, "Skip the per-(chunk, layer) scalar index");
  cmd->add_option("--json", cfg->json_path, "Write results as JSON to this file");
  cmd->add_option("--store", cfg->o.store,
                  "service | unix://PATH: time Engine::Lookup embedded against through a store "
                  "service (started in-process, or the one at PATH) instead");
  cmd->add_option("--client-spin-us", cfg->o.client_spin_us,
                  "With --store: how long the client polls for each reply before sleeping "
                  "(EngineTuning::store_service_spin_us; default: its default)");
  cmd->add_option("--service-spin-us", cfg->o.service_spin_us,
                  "With --store service: how long the in-process service polls for a session's "
                  "next request before sleeping")
      ->capture_default_str();
  cmd->callback([cfg] { RunBenchLookup(*cfg); });
}

}  // namespace rangekv::tools
