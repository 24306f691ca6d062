#include "directory/slot_table.h"

#include <gtest/gtest.h>

namespace rangekv {
namespace {

TEST(SlotTableTest, LifecycleBumpsGenerationOnEveryReuse) {
  SlotTable t(4, 4);
  EXPECT_EQ(t.Count(SlotState::kFree), 4u);
  auto s = t.ReserveLowestFree();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, 0u);
  EXPECT_EQ(t.Get(0).state, SlotState::kReserved);
  EXPECT_EQ(t.Get(0).generation, 1u);
  t.MakeVisible(0);
  EXPECT_EQ(t.Get(0).state, SlotState::kVisible);
  EXPECT_TRUE(t.Retire(0));  // unleased: reclaimed at once
  EXPECT_EQ(t.Get(0).state, SlotState::kFree);
  EXPECT_EQ(*t.ReserveLowestFree(), 0u);
  EXPECT_EQ(t.Get(0).generation, 2u);
  t.ReleaseReserved(0);
  EXPECT_EQ(*t.ReserveLowestFree(), 0u);
  EXPECT_EQ(t.Get(0).generation, 3u);
}

TEST(SlotTableTest, RetiredSlotWaitsForItsLastLease) {
  SlotTable t(2, 2);
  ASSERT_EQ(*t.ReserveLowestFree(), 0u);
  t.MakeVisible(0);
  t.AddLease(0);
  t.AddLease(0);
  EXPECT_FALSE(t.Retire(0));
  EXPECT_EQ(t.Get(0).state, SlotState::kRetired);
  EXPECT_EQ(t.Count(SlotState::kRetired), 1u);
  // A retired slot is not free: the next reservation takes slot 1.
  EXPECT_EQ(*t.ReserveLowestFree(), 1u);
  EXPECT_FALSE(t.ReserveLowestFree().has_value());
  EXPECT_FALSE(t.DropLease(0));
  EXPECT_TRUE(t.DropLease(0));
  EXPECT_EQ(t.Get(0).state, SlotState::kFree);
  EXPECT_EQ(t.Get(0).generation, 1u);  // bumped only when reused
}

TEST(SlotTableTest, CapacityBoundLimitsUsableSlots) {
  SlotTable t(8, 3);
  EXPECT_EQ(t.Count(SlotState::kFree), 3u);
  EXPECT_EQ(*t.ReserveLowestFree(), 0u);
  EXPECT_EQ(*t.ReserveLowestFree(), 1u);
  EXPECT_EQ(*t.ReserveLowestFree(), 2u);
  EXPECT_FALSE(t.ReserveLowestFree().has_value());
}

TEST(SlotTableTest, LruOrderFollowsPublicationAndTouches) {
  SlotTable t(4, 4);
  for (int i = 0; i < 4; ++i) t.MakeVisible(*t.ReserveLowestFree());
  EXPECT_EQ(t.LruOrder(), (std::vector<uint32_t>{0, 1, 2, 3}));
  t.Touch(1);
  t.Touch(0);
  EXPECT_EQ(t.LruOrder(), (std::vector<uint32_t>{2, 3, 1, 0}));
  EXPECT_EQ(*t.FindLru([](uint32_t s) { return s != 2; }), 3u);
  EXPECT_TRUE(t.Retire(3));
  EXPECT_EQ(t.LruOrder(), (std::vector<uint32_t>{2, 1, 0}));
  EXPECT_FALSE(t.FindLru([](uint32_t) { return false; }).has_value());
}

TEST(SlotTableTest, RestoreKeepsGenerationsMonotonic) {
  SlotTable t(3, 3);
  t.RaiseGeneration(0, 7);
  t.RaiseGeneration(0, 5);  // never lowers
  EXPECT_EQ(t.Get(0).generation, 7u);
  t.RestoreVisible(2, 4);
  EXPECT_EQ(t.Get(2).state, SlotState::kVisible);
  EXPECT_EQ(*t.ReserveLowestFree(), 0u);
  EXPECT_EQ(t.Get(0).generation, 8u);
  EXPECT_EQ(*t.ReserveLowestFree(), 1u);
  EXPECT_FALSE(t.ReserveLowestFree().has_value());
}

}  // namespace
}  // namespace rangekv
