// `rangekv bench concurrent`: many requests at once (docs/design.md "Many requests at once").
// For each N of `n_list`, a fixed total payload (`size`) is split into N requests started
// together from N threads, in three variants:
//   distinct     N restores, each of its own prefix (size / N);
//   same-prefix  N restores of one prefix (size / N), each into its own paged KV;
//   mixed        N/2 restores of distinct prefixes and N - N/2 stores of new prompts (size / N
//                each), restores and stores in flight together (N = 1: one store).
// Each variant runs in a fresh store (O_DIRECT in a scratch directory); its prefixes are stored
// untimed first. A repetition is timed from the common start to the last request's end;
// aggregate GiB/s = bytes moved / that time. Per-request latency: Lookup -> last layer ready
// (restore), BeginStore -> visible (store), with percentiles per kind (a mixed row prints its
// restores' and its stores' apart). Every restore is verified bit for bit outside the
// timed region. The read ceiling is the best cell of a short grid of plain-pread configurations
// (threads x request sizes over the distinct variant's stripe extents) read once before every
// round of the N, the median of those passes (tools/bench/concurrent_ceiling.h).
//
// Mode service | both: the same rounds through a node-wide store service
// (docs/store-service.md) started in-process for each (variant, N), every request in its own
// client process (`rangekv bench concurrent-client`, spawned from this binary: each opens its own
// Engine with store_service = unix://..., so N processes share one store as N vLLM instances
// would). The prefixes are stored untimed by this process through the service; a round is timed
// from the moment every client reported ready (its paged KV filled or poisoned) to the last
// client's end (CLOCK_MONOTONIC, one clock for every process on Linux). Each client verifies its
// own restore bit for bit, untimed, and only once every client has reported its end (a client
// that verified, or filled its next round's paged KV, while others still restored would load
// the machine under their timed restores; embedded verifies after the round's threads joined).
// With mode both, every service row also reports its aggregate over the embedded row of the
// same (variant, N) measured in the same run; with `interleave` the two rows' rounds alternate
// (embedded and its clients opened side by side, rounds in ABBA order), so a machine whose speed
// drifts over the run meets both alike.
//
// Phases: every request keeps the instants it passed (RequestTimeline: started, lookup
// answered, restore started and slots bound, first and last layer ready, finished and released;
// a store: started, begun, visible), and each row prints their medians from the round's start,
// so a service row shows where it loses time against its embedded row (a late start, the
// lookup's round trip, the reads).
//
// Errors end the command (FailCommand, tools/bench/util.h): a failed request, a client process
// that died or broke the protocol, bad options.
//
// Thread-safety: one coordinator thread (it starts the requests' threads and processes).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/concurrent_workload.h"

namespace rangekv::tools {

// What a client process of the service mode is told, besides the options.
struct ConcurrentClient {
  std::string socket;
  std::string variant;
  uint32_t n = 0;
  uint32_t index = 0;
};

struct ConcurrentReport {
  std::string device;
  Geometry geometry;
  uint64_t row_bytes = 0;    // one token of every layer
  uint64_t total_bytes = 0;  // one round
  std::vector<ConcurrentRow> rows;
  std::map<uint32_t, double> ceiling_gib_s;  // per N
  std::map<uint32_t, std::string> ceiling_config;
  double wall_s = 0;
  uint64_t verify_failures() const;
};

// Runs every (N, variant) in every mode the options ask for.
ConcurrentReport RunConcurrentBench(const ConcurrentOptions& options);
// A client process of the service mode: its engine and paged KV, then the line protocol with
// the coordinator on stdin/stdout (concurrent.cc says which lines).
void RunConcurrentClient(const ConcurrentOptions& options, const ConcurrentClient& client);

void PrintConcurrentReport(const ConcurrentReport& report, const ConcurrentOptions& options,
                           std::FILE* out);
nlohmann::json ConcurrentJson(const ConcurrentReport& report, const ConcurrentOptions& options);

}  // namespace rangekv::tools
