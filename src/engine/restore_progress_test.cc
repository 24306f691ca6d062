#include "engine/restore_progress.h"

#include <gtest/gtest.h>

namespace rangekv::engine_internal {
namespace {

using Delivery = Ablations::Delivery;

std::vector<uint32_t> Take(RestoreProgress& p) {
  std::vector<uint32_t> out;
  p.TakePublishable(&out);
  return out;
}

TEST(RestoreProgressTest, ReadsInLayerOrderWithinTheLookahead) {
  RestoreProgress p;
  p.Reset(/*layers=*/4, /*spans_per_layer=*/2, /*lookahead=*/1, Delivery::kLayer);
  // Window: layers 0..1 while layer 0 has unread stripes.
  for (uint32_t s = 0; s < 4; ++s) {
    ASSERT_EQ(p.NextToRead(), s);
    p.Issue(s);
  }
  EXPECT_EQ(p.NextToRead(), std::nullopt);  // stripe 4 is layer 2 > 0 + 1
  p.LaunchScatter(1);
  EXPECT_EQ(p.NextToRead(), std::nullopt);  // stripe 0 still reading
  p.LaunchScatter(0);
  EXPECT_EQ(p.NextToRead(), 4u);  // low is layer 1 now
  EXPECT_EQ(Take(p), std::vector<uint32_t>({0}));
  EXPECT_EQ(Take(p), std::vector<uint32_t>());  // each layer once
}

TEST(RestoreProgressTest, LandedStripesHoldTheLayerUntilScattered) {
  RestoreProgress p;
  p.Reset(2, 1, 2, Delivery::kLayer);
  p.Issue(0);
  p.Issue(1);
  p.Land(0);
  p.Land(1);
  EXPECT_TRUE(Take(p).empty());  // landed is not settled: slots are not bound yet
  EXPECT_TRUE(p.quiescent());
  p.LaunchScatter(1);
  EXPECT_EQ(Take(p), std::vector<uint32_t>({1}));  // layers publish independently
  EXPECT_FALSE(p.quiescent());
  p.Prove(1);
  p.LaunchScatter(0);
  p.Prove(0);
  EXPECT_EQ(Take(p), std::vector<uint32_t>({0}));
  EXPECT_TRUE(p.finished());
  EXPECT_TRUE(p.all_published());
}

TEST(RestoreProgressTest, BarrierPublishesNothingUntilEveryLayerSettled) {
  RestoreProgress p;
  p.Reset(3, 1, 3, Delivery::kBarrier);
  for (uint32_t s = 0; s < 3; ++s) p.Issue(s);
  p.LaunchScatter(0);
  p.LaunchScatter(1);
  EXPECT_TRUE(Take(p).empty());
  p.Fail(2);
  EXPECT_EQ(Take(p), std::vector<uint32_t>({0, 1, 2}));
}

TEST(RestoreProgressTest, FailuresAndUnprovenFencesSettleTheirLayer) {
  RestoreProgress p;
  p.Reset(1, 2, 0, Delivery::kLayer);
  p.Issue(0);
  p.Issue(1);
  p.Fail(0);  // the read failed
  p.LaunchScatter(1);
  p.Fail(1);  // the scatter's fence was not proven
  EXPECT_EQ(Take(p), std::vector<uint32_t>({0}));
  EXPECT_EQ(p.count(StripeState::kFailed), 2u);
  EXPECT_TRUE(p.finished());
}

TEST(RestoreProgressTest, CancelDropsPendingAndLandedButWaitsForReads) {
  RestoreProgress p;
  p.Reset(4, 2, 4, Delivery::kLayer);
  p.Issue(0);
  p.Issue(1);
  p.Issue(2);
  p.Land(0);
  EXPECT_EQ(p.DropPending(), 5u);
  EXPECT_EQ(p.NextToRead(), std::nullopt);
  p.Drop(0);                    // landed: its bank goes back
  EXPECT_FALSE(p.quiescent());  // 1 and 2 are still reading: their banks are still owned
  p.Drop(1);
  p.Drop(2);
  EXPECT_TRUE(p.quiescent());
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(Take(p).size(), 4u);
}

TEST(RestoreProgressTest, FailPendingSettlesEveryLayerItTouches) {
  RestoreProgress p;
  p.Reset(3, 2, 0, Delivery::kLayer);
  p.Issue(0);
  p.Issue(1);
  EXPECT_EQ(p.FailPending(), 4u);  // stripes 2..5: layers 1 and 2, beyond the window too
  EXPECT_EQ(p.NextToRead(), std::nullopt);
  EXPECT_EQ(p.count(StripeState::kFailed), 4u);
  EXPECT_EQ(Take(p), (std::vector<uint32_t>{1, 2}));  // layer 0 still reads
  p.LaunchScatter(0);
  p.Fail(1);
  EXPECT_EQ(Take(p), (std::vector<uint32_t>{0}));
  p.Prove(0);
  EXPECT_TRUE(p.finished());
}

TEST(RestoreProgressDeathTest, IllegalTransitionAborts) {
  RestoreProgress p;
  p.Reset(1, 1, 0, Delivery::kLayer);
  EXPECT_DEATH(p.Prove(0), "RANGEKV_CHECK");
}

}  // namespace
}  // namespace rangekv::engine_internal
