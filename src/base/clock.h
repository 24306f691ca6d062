// SteadyNs: the steady clock in nanoseconds, for durations measured inside one process (the
// engine's phase-time counters, the store service's reading windows). Not wall time: its epoch
// is unspecified, so a value means nothing in another process or after a restart.
//
// Thread-safety: a pure function of the clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace rangekv {

inline uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace rangekv
