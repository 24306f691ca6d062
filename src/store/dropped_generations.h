// DroppedGenerations: per pack slot, the generation a PayloadIntegrity dropped after it failed
// verification, so the other stripes of the same pack fail with that cause (kCorruption) rather
// than with whatever the digest table says once its entry is gone. Shared by StoreIntegrity
// (embedded store) and ServiceStore (store service client).
//
// Ordering. Mark() must run before the digest entry is dropped. A verifier that found no digests
// re-checks Contains() afterwards: a concurrent drop then is always seen (the digest table's
// mutex orders the drop after Mark), so a stripe that raced with OnCorruption still reports
// kCorruption.
//
// Thread-safety: thread-safe; the slot count is fixed at construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "rangekv/status.h"

namespace rangekv::store {

class DroppedGenerations {
 public:
  DroppedGenerations() = default;
  explicit DroppedGenerations(uint64_t slots) : generation_(slots) {}

  void Mark(uint32_t slot, uint64_t generation) {
    if (slot < generation_.size()) generation_[slot].store(generation, std::memory_order_release);
  }
  bool Contains(uint32_t slot, uint64_t generation) const {
    return slot < generation_.size() &&
           generation_[slot].load(std::memory_order_acquire) == generation;
  }
  // `status`, or Error() when (slot, generation) was dropped and that is why `status` failed
  // (its digests are gone); a mismatch (kCorruption) is kept as it is.
  Status Cause(uint32_t slot, uint64_t generation, const Status& status) const {
    if (status.ok() || status.code() == StatusCode::kCorruption || !Contains(slot, generation)) {
      return status;
    }
    return Error(slot, generation);
  }
  static Status Error(uint32_t slot, uint64_t generation) {
    return Corruption("pack slot " + std::to_string(slot) + " generation " +
                      std::to_string(generation) +
                      " failed payload verification in another layer and was dropped");
  }

 private:
  std::vector<std::atomic<uint64_t>> generation_;  // 0: none dropped
};

}  // namespace rangekv::store
