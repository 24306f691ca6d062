// The crash test's workload (engine_crash_test.cc drives crash_driver.cc): a deterministic,
// seed-derived sequence of engine sessions over one store directory, each a list of stores and
// verified restores of prefixes from a fixed pool, so that the parent that killed the driver can
// recompute, for any prefix of the pool, exactly the bytes that were stored.
//
// The pool: prefixes of 10..200 tokens, about half of them sharing a random-length head with an
// earlier prefix (divergent paths share packs up to the divergence). Payload row of path
// position p, token v, layer l = testing::CanonicalRow(kPayloadSeed, l, p, v): a pure
// function of the path, so shared heads have identical bytes whichever prefix stored them. The
// store holds 6 packs of 64 tokens, fewer than the pool needs, so stores evict and overwrite
// slots that an older snapshot still lists (a stale snapshot would serve wrong bytes).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rangekv/engine.h"

namespace rangekv::testing {

struct CrashWorkload {
  static constexpr uint64_t kPayloadSeed = 0x43726173684B5631ull;
  static constexpr uint64_t kStripeBytes = 8192;  // s = 128 B (4 layers x 2 heads x 16 x bf16)
  static constexpr uint64_t kPacks = 6;           // T = 64 tokens per pack

  enum class OpKind : uint8_t {
    kStore,          // store the prefix, wait until visible
    kStoreDetached,  // store it, return after extraction (writes continue as write debt)
    kRestore,        // look it up, restore the hit, check every byte
  };
  struct Op {
    OpKind kind = OpKind::kStore;
    uint32_t prefix = 0;
    uint64_t granularity = 1;  // reuse granularity of a restore's lookup
  };

  uint64_t seed = 0;
  std::vector<std::vector<int32_t>> prefixes;
  std::vector<std::vector<Op>> sessions;

  static CrashWorkload Make(uint64_t seed, uint32_t sessions, uint32_t ops_per_session);
  // Small pools, host device, posix I/O: a session opens in milliseconds. `packs` sizes the
  // store (kPacks evicts; 48 holds the whole pool, so nothing is ever evicted).
  EngineOptions Options(const std::string& store_dir, uint64_t packs = kPacks) const;
};

}  // namespace rangekv::testing
