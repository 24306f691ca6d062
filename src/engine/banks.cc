#include "engine/banks.h"

#include "base/check.h"

namespace rangekv::engine_internal {

BankPool::BankPool(uint32_t banks, uint32_t prefetch_limit)
    : state_(banks, BankState::kFree),
      prefetch_(banks, 0),
      uses_(banks, 0),
      prefetch_limit_(prefetch_limit) {
  RANGEKV_CHECK(banks >= 1);
  RANGEKV_CHECK(prefetch_limit == 0 || prefetch_limit < banks);
  free_.reserve(banks);
  // Highest index at the bottom so bank 0 is handed out first (deterministic tests).
  for (uint32_t b = banks; b-- > 0;) free_.push_back(b);
}

bool BankPool::CanAcquire(BankPurpose purpose) const {
  if (free_.empty()) return false;
  if (purpose != BankPurpose::kPrefetch) return true;
  // Prefetch leaves at least one usable bank to scheduled work, also after quarantines shrank
  // the pool below the configured budget.
  const uint32_t usable = size() - quarantined_;
  return prefetch_owned_ < prefetch_limit_ && prefetch_owned_ + 1 < usable;
}

std::optional<uint32_t> BankPool::TryAcquire(BankPurpose purpose) {
  if (!CanAcquire(purpose)) return std::nullopt;
  const uint32_t b = free_.back();
  free_.pop_back();
  RANGEKV_CHECK(state_[b] == BankState::kFree);
  state_[b] = BankState::kOwned;
  ++uses_[b];
  ++owned_;
  ++acquisitions_;
  if (purpose == BankPurpose::kPrefetch) {
    prefetch_[b] = 1;
    ++prefetch_owned_;
  }
  return b;
}

void BankPool::Promote(uint32_t bank) {
  RANGEKV_CHECK(bank < size() && state_[bank] == BankState::kOwned);
  if (prefetch_[bank]) {
    prefetch_[bank] = 0;
    --prefetch_owned_;
  }
}

void BankPool::Release(uint32_t bank) {
  RANGEKV_CHECK(bank < size() && state_[bank] == BankState::kOwned);
  Promote(bank);
  state_[bank] = BankState::kFree;
  --owned_;
  free_.push_back(bank);
}

void BankPool::Quarantine(uint32_t bank) {
  RANGEKV_CHECK(bank < size() && state_[bank] == BankState::kOwned);
  Promote(bank);
  state_[bank] = BankState::kQuarantined;
  --owned_;
  ++quarantined_;
}

}  // namespace rangekv::engine_internal
