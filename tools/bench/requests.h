// One timed store or restore through the public engine API, as every transfer benchmark issues
// them: the instants the request passed, on the steady clock (tools/bench/util.h NowSeconds,
// one clock for every process of the machine).
//
// Thread-safety: each call drives its own request; the engine is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "rangekv/engine.h"
#include "tools/bench/paged_kv.h"

namespace rangekv::tools {

// The instants one request passed. A restore: started (before Lookup), looked up, bound
// (StartRestore returned and slots bound), first and last layer ready, finished and released.
// A store: started (before BeginStore), bound = looked_up (BeginStore returned), first = last =
// end (visible). cpu_s: process CPU seconds from the start to the last layer (restores with
// measure_cpu only; -1 otherwise).
struct RequestTimeline {
  double start = 0, looked_up = 0, bound = 0, first = 0, last = 0, end = 0;
  double cpu_s = -1;
  double latency() const { return last - start; }
  RequestTimeline Minus(double t0) const {
    return {start - t0, looked_up - t0, bound - t0, first - t0, last - t0, end - t0, cpu_s};
  }
};

// Stores `tokens` from `kv` (slots [0, tokens.size()) of its slot mapping), waiting until the
// store is visible. With `expect_begin`, the store must reserve exactly tokens
// [*expect_begin, tokens.size()) (an uncached suffix after a cached prefix) or it fails.
Status TimedStore(Engine& engine, const PagedKvSpace& kv, std::span<const int32_t> tokens,
                  const std::string& id, std::optional<uint64_t> expect_begin, RequestTimeline* t);

// Restores tokens [begin, end) of `prompt` into `kv` (slots [begin, end) of its slot mapping):
// Lookup at `granularity` (the hit must reach `end`), StartRestore, BindSlots, WaitLayer for
// every layer in order, Finish and ReleaseRequest; every token must be delivered.
Status TimedRestore(Engine& engine, const PagedKvSpace& kv, std::span<const int32_t> prompt,
                    uint64_t granularity, uint64_t begin, uint64_t end, const std::string& id,
                    bool measure_cpu, RequestTimeline* t);

}  // namespace rangekv::tools
