// Byte-split probe: picks IoEngineOptions::split_bytes for a medium by timing a few MiB of reads
// through the engine itself (docs/design.md 4.3: some disks serve many mid-sized requests faster
// than a few stripe-sized ones).
//
// What it does: writes `probe_bytes` of a pattern to a scratch file next to the store (through
// the caller's Env, O_DIRECT when asked and supported), makes it durable, then reads it back as
// `spans` concurrent spans (the engine's usual concurrency) once per candidate split and round,
// candidates in a rotating order, through an engine of the requested kind and worker count
// configured with that split. The fastest candidate (minimum over rounds) wins, but a split
// replaces "no split" only when it is at least `min_gain` faster: a noisy probe must not move
// a medium off the configuration every ceiling was measured with. The scratch file is removed.
// Bounds: probe_bytes <= 64 MiB, rounds <= 5, at most 8 candidates; the whole probe moves
// probe_bytes x (1 + rounds x (candidates + 1)) bytes.
//
// Reads are verified against the pattern (a probe of a lying medium fails). Any failure returns
// the error; the caller then runs without a split and logs why.
//
// Thread-safety: a free function; it makes and destroys its own engines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/io_engine.h"
#include "rangekv/env.h"
#include "rangekv/status.h"

namespace rangekv {

struct SplitProbeOptions {
  uint64_t probe_bytes = 16ull << 20;
  uint32_t spans = 4;  // concurrent spans per timed read (the engine's workers)
  std::vector<uint64_t> candidates = {1ull << 20, 512ull << 10, 256ull << 10};
  uint32_t rounds = 2;
  double min_gain = 0.10;  // a split must beat "none" by this fraction
};

struct SplitProbeSample {
  uint64_t split_bytes = 0;  // 0: no split
  double seconds = 0;        // best of the rounds
};

struct SplitProbeResult {
  uint64_t split_bytes = 0;  // the choice; 0: no split
  std::vector<SplitProbeSample> samples;
  std::string summary;  // "none 12.1 ms, 1 MiB 9.8 ms, ... -> 1 MiB"
};

// The choice among measured samples (pure; the probe's rule, unit-tested without timing).
// Samples must include split_bytes == 0; the fastest wins when it beats none by min_gain.
uint64_t ChooseSplit(const std::vector<SplitProbeSample>& samples, double min_gain);

// Runs the probe with a scratch file at `scratch_path` (must not exist; removed afterwards).
Result<SplitProbeResult> ProbeSplit(Env* env, const std::string& scratch_path, DirectIo direct,
                                    IoEngineKind kind, const IoEngineOptions& engine_options,
                                    const SplitProbeOptions& options);

}  // namespace rangekv
