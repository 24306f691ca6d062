// `rangekv bench concurrent` and its hidden client command: the command line of
// tools/bench/concurrent.h (many requests at once, embedded or through a store service).
#include <fstream>
#include <memory>
#include <string>

#include "base/cpus.h"
#include "engine/options.h"
#include "service/store_service.h"
#include "tools/bench/concurrent.h"
#include "tools/bench/util.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

// The options' defaults, the read gate's being rangekv serve's (--read-slots auto) for this
// process's CPUs.
ConcurrentOptions DefaultOptions() {
  ConcurrentOptions o;
  o.read_gate = engine_internal::NodeReadSlots(UsableCpus());
  return o;
}

struct ConcurrentFlags {
  ConcurrentOptions o = DefaultOptions();
  std::string json_path;
};

void RunConcurrent(const ConcurrentFlags& f) {
  const ConcurrentReport report = RunConcurrentBench(f.o);
  PrintConcurrentReport(report, f.o, stdout);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << ConcurrentJson(report, f.o).dump(1) << "\n";
    if (!out) FailCommand("bench concurrent", "cannot write " + f.json_path);
  }
  if (report.verify_failures() != 0) throw CLI::RuntimeError(2);
}

// The flags a run and its client processes share.
void AddSharedFlags(CLI::App* cmd, ConcurrentOptions* f) {
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
                  "(EngineTuning::share_reads, off by default: each client takes what one "
                  "engine alone would)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--read-gate", f->read_gate,
                  "--mode service/both: the service runs a read gate of this many slots and "
                  "every client's engine passes it (rangekv serve --read-slots N, "
                  "EngineTuning::read_gate): the clients together keep at most N read pieces "
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
  AddSharedFlags(cmd, &f->o);
  cmd->add_option("--n", f->o.n_list, "comma-separated request counts")->capture_default_str();
  cmd->add_option("--mode", f->o.mode,
                  "embedded (one process) | service (each request in its own client process "
                  "through an in-process store service) | both")
      ->check(CLI::IsMember({"embedded", "service", "both"}))
      ->capture_default_str();
  cmd->add_option("--dir", f->o.dir, "parent of the scratch stores (default $TMPDIR or /var/tmp)");
  cmd->add_option("--json", f->json_path, "write the results as JSON to this file");
  cmd->add_option("--ceiling-threads", f->o.ceiling_threads,
                  "threads of the read ceiling grid (0: the engine's read I/O threads and 16)")
      ->capture_default_str();
  cmd->add_option("--ceiling-passes", f->o.ceiling_passes,
                  "when the best ceiling cell reads: round (once before every round of the N) "
                  "or end (its repetitions after the N's last round)")
      ->check(CLI::IsMember({"round", "end"}))
      ->capture_default_str();
  cmd->add_flag("--quiet", f->o.quiet, "no progress lines on stderr");
  cmd->callback([f] { RunConcurrent(*f); });

  // The client process of --mode service (not for people: spawned by the run above).
  auto cf = std::make_shared<ConcurrentOptions>(DefaultOptions());
  auto cc = std::make_shared<ConcurrentClient>();
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
