// BankPool: accounting of a fixed set of transfer banks (read banks or store banks).
//
// A bank is a buffer allocated once at Open (the memory itself lives in the pipeline that owns
// the pool); the pool only tracks who may use it. States:
//
//   free --TryAcquire--> owned --Release--> free
//                          |
//                          +----Quarantine--> quarantined   (never handed out again)
//
// Release is the owner's claim that every use of the bank is proven complete (read banks: the
// scatter's fence succeeded; store banks: every accepted write returned). An owner that cannot
// prove it (a fence that failed, a completion that never came) quarantines the bank: the pool
// shrinks instead of risking a buffer that a device or the kernel may still write.
//
// Prefetch budget (read banks): lookup-time prefetch may own at most `prefetch_limit` banks at
// once, and never the last bank that is not quarantined, so scheduled restores always find one. A
// prefetching owner that becomes scheduled (its slots were bound) Promote()s its banks, returning
// their budget.
//
// Every acquisition bumps the bank's use number; tests use it to prove that no bank was reused
// before its previous owner released it.
//
// Thread-safety: none. The owning pipeline guards the pool with its mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rangekv::engine_internal {

enum class BankPurpose : uint8_t { kScheduled, kPrefetch };
enum class BankState : uint8_t { kFree, kOwned, kQuarantined };

class BankPool {
 public:
  // REQUIRES: banks >= 1, prefetch_limit < banks (or 0).
  BankPool(uint32_t banks, uint32_t prefetch_limit);

  uint32_t size() const { return static_cast<uint32_t>(state_.size()); }

  // A free bank, or nullopt when none is free or (kPrefetch) the prefetch budget is spent.
  std::optional<uint32_t> TryAcquire(BankPurpose purpose);
  // Whether TryAcquire(purpose) would succeed now.
  bool CanAcquire(BankPurpose purpose) const;
  // The bank's owner is no longer prefetching. REQUIRES owned.
  void Promote(uint32_t bank);
  // REQUIRES owned: every use of the bank is proven complete.
  void Release(uint32_t bank);
  // REQUIRES owned: the bank's last use could not be proven complete.
  void Quarantine(uint32_t bank);

  BankState state(uint32_t bank) const { return state_[bank]; }
  uint64_t use_number(uint32_t bank) const { return uses_[bank]; }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t owned_count() const { return owned_; }
  uint32_t quarantined_count() const { return quarantined_; }
  uint32_t prefetch_owned() const { return prefetch_owned_; }
  uint64_t acquisitions() const { return acquisitions_; }

 private:
  std::vector<BankState> state_;
  std::vector<uint8_t> prefetch_;  // owned for kPrefetch (uint8_t: vector<bool> is not a span)
  std::vector<uint64_t> uses_;
  std::vector<uint32_t> free_;  // stack of free banks; capacity fixed at construction
  uint32_t prefetch_limit_;
  uint32_t owned_ = 0;
  uint32_t quarantined_ = 0;
  uint32_t prefetch_owned_ = 0;
  uint64_t acquisitions_ = 0;
};

}  // namespace rangekv::engine_internal
