#include "engine/banks.h"

#include <gtest/gtest.h>

namespace rangekv::engine_internal {
namespace {

TEST(BankPoolTest, AcquireReleaseCountsAndUseNumbers) {
  BankPool pool(3, 0);
  EXPECT_EQ(pool.free_count(), 3u);
  auto a = pool.TryAcquire(BankPurpose::kScheduled);
  auto b = pool.TryAcquire(BankPurpose::kScheduled);
  auto c = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);  // deterministic order
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kScheduled));
  EXPECT_EQ(pool.owned_count(), 3u);
  EXPECT_EQ(pool.use_number(*b), 1u);
  pool.Release(*b);
  auto again = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *b);
  EXPECT_EQ(pool.use_number(*b), 2u);
  EXPECT_EQ(pool.acquisitions(), 4u);
}

TEST(BankPoolTest, PrefetchBudgetLeavesBanksForScheduledWork) {
  BankPool pool(4, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.CanAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_EQ(pool.prefetch_owned(), 3u);
  auto s = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(s);
  pool.Release(*s);
  // Promotion returns the budget but not the bank.
  pool.Promote(0);
  EXPECT_EQ(pool.prefetch_owned(), 2u);
  EXPECT_TRUE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kScheduled));
}

TEST(BankPoolTest, QuarantinedBankIsNeverHandedOutAgain) {
  BankPool pool(2, 0);
  auto a = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(a);
  pool.Quarantine(*a);
  EXPECT_EQ(pool.state(*a), BankState::kQuarantined);
  EXPECT_EQ(pool.quarantined_count(), 1u);
  for (int i = 0; i < 5; ++i) {
    auto b = pool.TryAcquire(BankPurpose::kScheduled);
    ASSERT_TRUE(b);
    EXPECT_NE(*b, *a);
    pool.Release(*b);
  }
}

TEST(BankPoolDeathTest, ReleasingAFreeBankAborts) {
  BankPool pool(2, 0);
  EXPECT_DEATH(pool.Release(1), "RANGEKV_CHECK");
}

}  // namespace
}  // namespace rangekv::engine_internal
