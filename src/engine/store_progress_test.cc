#include "engine/store_progress.h"

#include <gtest/gtest.h>

namespace rangekv::engine_internal {
namespace {

TEST(StoreProgressTest, GroupBecomesEligibleWhenAllItsLayersAreProduced) {
  StoreProgress p;
  // 8 layers in groups of 4; group 0 has two bank-sized batches, group 1 one.
  p.Reset(8, 4, {0, 0, 1});
  EXPECT_EQ(p.groups(), 2u);
  for (uint32_t l = 4; l < 7; ++l) EXPECT_TRUE(p.Produce(l));
  EXPECT_FALSE(p.Produce(4));  // idempotent
  EXPECT_EQ(p.NextEligible(), std::nullopt);
  EXPECT_TRUE(p.Produce(7));
  EXPECT_EQ(p.NextEligible(), 2u);
  p.StartGather(2);
  EXPECT_EQ(p.NextEligible(), std::nullopt);
  for (uint32_t l = 0; l < 4; ++l) p.Produce(l);
  EXPECT_TRUE(p.all_produced());
  EXPECT_EQ(p.NextEligible(), 0u);
}

TEST(StoreProgressTest, SucceedsOnlyWhenEveryWriteOfEveryBatchReturnedOk) {
  StoreProgress p;
  p.Reset(4, 2, {0, 1});
  for (uint32_t l = 0; l < 4; ++l) p.Produce(l);
  p.StartGather(0);
  p.StartGather(1);
  EXPECT_FALSE(p.extraction_done());
  p.Extracted(0, 2);
  p.Extracted(1, 2);
  EXPECT_TRUE(p.extraction_done());
  EXPECT_FALSE(p.WriteReturned(0, true));
  EXPECT_TRUE(p.WriteReturned(0, true));
  EXPECT_EQ(p.state(0), BatchState::kDone);
  EXPECT_FALSE(p.settled());
  EXPECT_FALSE(p.WriteReturned(1, false));
  EXPECT_TRUE(p.WriteReturned(1, true));
  EXPECT_EQ(p.state(1), BatchState::kFailed);
  EXPECT_TRUE(p.settled());
  EXPECT_FALSE(p.succeeded());
}

TEST(StoreProgressTest, SkippedBatchesSettleWithoutIo) {
  StoreProgress p;
  p.Reset(4, 2, {0, 1});
  p.Produce(0);
  p.Produce(1);
  p.StartGather(0);
  p.GatherFailed(0);
  EXPECT_EQ(p.SkipWaiting(), 1u);
  EXPECT_TRUE(p.settled());
  EXPECT_FALSE(p.succeeded());
}

}  // namespace
}  // namespace rangekv::engine_internal
