// SplitMix64: the test support's seeded stream of well-mixed 64-bit values (random tokens,
// slots and delays that a seed reproduces). Not for anything an attacker could choose.
//
// Thread-safety: a pure function of the caller's state word.
#pragma once

#include <cstdint>

namespace rangekv::testing {

// Advances `state` and returns the next value.
inline uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace rangekv::testing
