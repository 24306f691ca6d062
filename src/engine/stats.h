// Counters: the engine's work-unit counters (EngineStats, include/rangekv/engine.h) as atomics,
// bumped where the work happens (the read worker that submits a read, the pipeline that
// launches a scatter), never computed from a formula. Each job carries its own Counters too,
// so a RestoreOutcome / StoreOutcome reports that job's share; CountFor() bumps both.
//
// Thread-safety: every method is thread-safe (relaxed atomics: counters order nothing).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/clock.h"  // SteadyNs, for the phase-time counters (*_ns)
#include "rangekv/engine.h"

namespace rangekv::engine_internal {

class Counters {
 public:
#define RANGEKV_COUNTERS_DECLARE_(name, doc) std::atomic<uint64_t> name{0};
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_COUNTERS_DECLARE_)
#undef RANGEKV_COUNTERS_DECLARE_

  using Field = std::atomic<uint64_t> Counters::*;

  void Add(Field field, uint64_t n = 1) { (this->*field).fetch_add(n, std::memory_order_relaxed); }
  EngineStats Snapshot() const;
};

// Bumps `field` of the engine-wide counters and, when non-null, of a job's own.
inline void CountFor(Counters& engine, Counters* job, Counters::Field field, uint64_t n = 1) {
  engine.Add(field, n);
  if (job != nullptr) job->Add(field, n);
}

}  // namespace rangekv::engine_internal
