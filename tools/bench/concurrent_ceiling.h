// `rangekv bench concurrent`'s read ceiling (tools/bench/concurrent.h): the medium's best read
// ceiling of each N, measured beside the rounds. On the distinct variant's store, before its
// first round: a short grid of plain-pread configurations (the engine's read I/O threads and 16,
// each with whole stripe extents, 4 MiB and 1 MiB requests; `ceiling_threads` fixes the
// threads), one pass per cell, picks the fastest cell (tools/bench/ceiling.h). That cell then
// reads the payload once right before every round of every variant and mode of the N, and the
// N's ceiling is the median of the passes before timed rounds. Every "x ceiling" is against it,
// as `bench restore` states its ratios against its grid's best re-measured in its rounds. Why
// beside: the dev VM's disk changes speed over seconds (after minutes of load it reads at about
// half the rate for a while), so a ceiling taken before all rounds or after them measured
// another disk than the rounds met.
//
// ceiling_passes "end" instead measures the grid and then the best cell (with the bench's
// warm-ups and repetitions) once every variant of the N has run: on the H200 with tmpfs the
// passes slowed the embedded rounds that followed them in the same process (the client
// processes' rounds did not slow), which tilts mode both's comparison; use "end" for that
// comparison there.
//
// Thread-safety: the coordinator's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/ceiling.h"
#include "tools/bench/concurrent_workload.h"
#include "tools/bench/scratch.h"

namespace rangekv::tools {

class ConcurrentCeiling {
 public:
  explicit ConcurrentCeiling(const ConcurrentWorkload& w) : w_(w) {}

  // After the distinct variant's prefixes of plan `p` were stored in `pack_path` (by an engine
  // with `read_threads` read I/O threads): locates them and, for passes before every round,
  // picks the grid's best cell. Other variants, or a second call for the same N, do nothing.
  void Begin(const RunPlan& p, const std::string& pack_path, uint32_t read_threads);
  // One pass of the N's best cell, right before round `round` (untimed).
  void PassBeforeRound(uint32_t n, uint32_t round);
  // The distinct variant's store stays until the N's last variant has run (its pack is what
  // the passes read).
  void KeepStore(const RunPlan& p, std::unique_ptr<ScratchDir> scratch);
  struct Measured {
    double gib_s = 0;
    std::string config;
  };
  // The N's ceiling (with "end": the grid and its best cell measured now), the kept store
  // removed. nullopt when none was measured (no distinct variant).
  std::optional<Measured> Finish(uint32_t n);

 private:
  void PickCell();

  const ConcurrentWorkload& w_;
  struct State {                          // the N whose rounds run now (Begin .. Finish)
    std::unique_ptr<ScratchDir> scratch;  // the distinct variant's store, while passes read it
    uint32_t n = 0;
    std::unique_ptr<CeilingFile> file;
    uint32_t read_threads = 0;  // the engine's read I/O threads, a grid row
    uint32_t threads = 0;
    uint64_t request = 0;  // 0: whole stripe extents
    std::string config;
    std::vector<double> samples;  // passes before timed rounds, GiB/s
  };
  std::optional<State> state_;
};

}  // namespace rangekv::tools
