// `rangekv bench lookup`: what a directory lookup costs, range tree against the stock per-object
// index (`index=scalar`), at several reuse granularities.
//
// A prefix of --prefix-tokens (default 131,072) random token ids is stored in packs of the
// Llama-3.1-8B geometry (T = 8,192 tokens per stripe: 16 packs). The query is that prefix plus
// --suffix-tokens new tokens (a request with a cached prefix and an uncached tail), so every
// granularity that divides the prefix hits all of it. Three directories answer the same query:
//   tree             - the radix tree: compares token bytes, selects one record per pack;
//   scalar           - one key per 256-token chunk (hash chain), a hash-map probe and a lease
//                      per key (LMCache's chunk mode);
//   scalar layerwise - one key per (chunk, layer): 32x the keys (LMCache's layerwise mode).
// For each (index, granularity) pair one lookup is timed per repetition, pairs interleaved in a
// fresh random order every rep so machine drift and cache state hit them alike; the ticket is
// cancelled (untimed) after each. After
// --warmup untimed rounds, --reps timed ones; the median is reported. The work counters of one
// lookup (records selected, keys built, leases taken, tokens compared) come from the directory.
// Every lookup's hit and records are checked equal across the three indexes.
//
// With --json FILE (the JSON returned):
//   {"workload":"lookup","results":[{"index":"tree","granularity":256,"median_us":X,
//     "records_selected":N,...},...], ...context...}
// Acceptance: for the tree, the slowest granularity's median is within 1.25x of the fastest.
//
// --store service | unix://PATH: engine lookups, embedded against through the store service
// (RunEngineLookup below) instead of the directories alone.
//
// Thread-safety: RunLookupBench is called by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rangekv/status.h"

namespace rangekv::tools {

struct LookupBenchOptions {
  uint64_t prefix_tokens = 131072;
  uint64_t suffix_tokens = 1024;
  std::vector<uint64_t> granularities = {16, 256, 8192};
  uint64_t chunk_tokens = 256;  // the scalar index's tokens per logical object
  uint32_t reps = 301;
  uint32_t warmup = 10;
  bool layerwise = true;  // also the per-(chunk, layer) scalar index
  uint64_t seed = 1;
  std::string store;             // "": the directories alone; service | unix://PATH: engines
  int64_t client_spin_us = -1;   // EngineTuning::store_service_spin_us; -1: its default
  uint32_t service_spin_us = 0;  // ServiceOptions::request_spin of the in-process service
};

// Runs the lookups, prints the table on stdout (progress on stderr) and returns the JSON.
Result<nlohmann::json> RunLookupBench(const LookupBenchOptions& options);

}  // namespace rangekv::tools
