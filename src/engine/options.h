// Option resolution and validation for Engine::Open.
//
// ResolveOptions fills the size defaults that depend on the geometry (read bank = W, store bank
// = 2 x layer_group x W) and checks every field against its explicit bound, answering
// kInvalidArgument with the field's name and the rule it broke. Nothing is allocated here;
// Open allocates exactly what the resolved options say.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "rangekv/engine.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::engine_internal {

// Upper bounds on the pools (far above the defaults; they stop a typo from allocating the
// machine).
inline constexpr uint32_t kMaxBanks = 1024;
inline constexpr uint64_t kMaxBankPoolBytes = 512ull << 30;
inline constexpr uint32_t kMaxWorkers = 512;
inline constexpr uint32_t kMaxJobSlots = 4096;
inline constexpr uint64_t kMaxRequestTokens = 1ull << 28;

// The store shape's auto values (EngineTuning::group_workers / layer_group = 0).
inline constexpr uint32_t kAutoGroupWorkersCuda = 8;  // also the host device's upper bound
inline constexpr uint32_t kAutoLayerGroupCuda = 4;
inline constexpr uint32_t kAutoLayerGroupHost = 2;

// REQUIRES: `geometry` was derived from options.model and options.stripe_bytes. `host_device`:
// the engine runs on the host device (not CUDA), in a process that may run on `usable_cpus`
// (UsableCpus(); 0: unknown, taken as 1); they pick the store shape's auto values.
Result<EngineOptions> ResolveOptions(const EngineOptions& options, const Geometry& geometry,
                                     bool host_device = false, uint32_t usable_cpus = 0);

// The read side's I/O concurrency (EngineTuning::read_io_threads, io_split_bytes under
// kIoSplitFillReads) for a resolved `options` whose pack file is buffered or not, in a process
// that may run on `usable_cpus` (UsableCpus(); 0: unknown, taken as 1). Pure: Open calls it
// once the pack file is open.
struct ReadIoPlan {
  uint32_t threads = 0;
  uint64_t fill_split_bytes = 0;  // kIoSplitFillReads only: the read split (0: whole spans)
  std::string why;                // "16 threads (auto: 16 usable CPUs, buffered)"
};
ReadIoPlan PlanReadIo(const EngineOptions& options, bool buffered, uint32_t usable_cpus);

// The read I/O pieces one engine with default options keeps in flight at most on a node of
// `usable_cpus` CPUs, buffered or O_DIRECT (the larger of the two plans): `rangekv serve
// --read-slots auto`, so a node's gated engines together keep what one engine alone would.
uint32_t NodeReadSlots(uint32_t usable_cpus);

// capacity_bytes / pack_bytes; kInvalidArgument when below one pack or above the format's
// pack count bound.
Result<uint64_t> PackCountForCapacity(uint64_t capacity_bytes, const Geometry& geometry);

}  // namespace rangekv::engine_internal
