// Engine::DrainRemovedRanges end to end on HostDevice: the packs a store names in its outcome
// come back, with exactly the path tokens they stopped serving, when eviction or invalidation
// takes them out of the index; clipped packs report their tail, then their head; the packs an
// open loaded from the snapshot are covered; the queue is bounded (drop-oldest, counted).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <vector>

#include "rangekv/engine.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/temp_dir.h"

namespace rangekv {

void PrintTo(const RemovedRange& r, std::ostream* os) {
  *os << "{ns " << r.ns.ToHex().substr(0, 8) << ", slot " << r.pack.slot << " gen "
      << r.pack.generation << ", [" << r.tokens.begin << ", " << r.tokens.end << ")"
      << (r.retired ? ", retired" : ", clipped") << "}";
}

namespace {

using testing::KvFixture;
using testing::RandomTokens;
using testing::SmallModel;
using testing::SmallOptions;
using testing::StoreAll;

// 4 layers, 2 heads x 16 x bf16: s = 128 bytes; W = 8 KiB: T = 64 tokens per pack.
constexpr uint64_t kW = 8192;
constexpr uint64_t kT = 64;
constexpr uint64_t kPacks = 4;

class EngineRemovedRangesTest : public ::testing::Test {
 protected:
  EngineOptions Options(uint64_t max_removed_ranges = 4096) {
    EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW, kPacks);
    o.tuning.max_removed_ranges = max_removed_ranges;
    return o;
  }
  void Open(const EngineOptions& o) {
    auto e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    auto f = KvFixture::Make(*engine_, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    kv_ = std::move(f).value();
  }
  // Stores `tokens` (visible on return) and returns the packs its outcome names.
  std::vector<PackRange> Store(const std::vector<int32_t>& tokens, uint64_t seed) {
    auto r = StoreAll(*engine_, *kv_, tokens, seed, seed + 100);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_EQ(r->outcome.disposition, StoreDisposition::kStoring);
    return r->outcome.packs;
  }
  RemovedRange Removed(const PackRange& p, TokenInterval tokens, bool retired = true) const {
    return RemovedRange{engine_->namespace_id(), p.pack, tokens, retired};
  }

  testing::TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<KvFixture> kv_;
};

TEST_F(EngineRemovedRangesTest, StoreOutcomeNamesItsPacksInPathOrder) {
  Open(Options());
  const auto a = RandomTokens(2 * kT + 10, 1);
  const auto packs = Store(a, 1);
  ASSERT_EQ(packs.size(), 3u);
  EXPECT_EQ(packs[0].tokens, (TokenInterval{0, kT}));
  EXPECT_EQ(packs[1].tokens, (TokenInterval{kT, 2 * kT}));
  EXPECT_EQ(packs[2].tokens, (TokenInterval{2 * kT, 2 * kT + 10}));
  // Distinct slots; nothing left the index yet.
  EXPECT_NE(packs[0].pack.slot, packs[1].pack.slot);
  EXPECT_NE(packs[1].pack.slot, packs[2].pack.slot);
  EXPECT_TRUE(engine_->DrainRemovedRanges(100).empty());
  // The uncached suffix only: a longer prefix names just its new pack.
  auto longer = a;
  longer.resize(3 * kT);
  const auto more = Store(longer, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].tokens, (TokenInterval{2 * kT + 10, 3 * kT}));
}

TEST_F(EngineRemovedRangesTest, EvictionDrainsExactlyTheEvictedPacksInOrder) {
  Open(Options());
  const auto a = Store(RandomTokens(3 * kT, 1), 1);  // 3 of the 4 slots
  ASSERT_EQ(a.size(), 3u);
  // Two more packs: the free slot and one eviction, the LRU pack without dependents (a's tail).
  const auto b = Store(RandomTokens(2 * kT, 2), 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(engine_->DrainRemovedRanges(100),
            (std::vector<RemovedRange>{Removed(a[2], {2 * kT, 3 * kT})}));
  EXPECT_TRUE(engine_->DrainRemovedRanges(100).empty());  // drained means gone
  // Two evictions: a's middle pack (older than b's tail), then its head (now a leaf).
  const auto c = Store(RandomTokens(2 * kT, 3), 3);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(engine_->DrainRemovedRanges(1),
            (std::vector<RemovedRange>{Removed(a[1], {kT, 2 * kT})}));
  EXPECT_EQ(engine_->DrainRemovedRanges(1), (std::vector<RemovedRange>{Removed(a[0], {0, kT})}));
  EXPECT_TRUE(engine_->DrainRemovedRanges(1).empty());
  EXPECT_EQ(engine_->GetStats().removed_events_dropped, 0u);
}

TEST_F(EngineRemovedRangesTest, InvalidationReportsTheClippedTailThenTheHead) {
  Open(Options());
  const auto tokens = RandomTokens(2 * kT, 1);
  const auto a = Store(tokens, 1);
  ASSERT_EQ(a.size(), 2u);
  Directory& dir = testing::EngineDirectory(*engine_);
  // Every path through tokens[0, 100) loses positions >= 99: a[1] keeps [kT, 99).
  const std::span<const int32_t> t(tokens);
  auto clipped = dir.InvalidatePrefix(engine_->namespace_id(), t.first(100));
  ASSERT_TRUE(clipped.ok()) << clipped.status().ToString();
  EXPECT_EQ(clipped->packs_clipped, 1u);
  EXPECT_EQ(engine_->DrainRemovedRanges(100),
            (std::vector<RemovedRange>{Removed(a[1], {99, 2 * kT}, /*retired=*/false)}));
  // Positions >= 9: a[0] keeps [0, 9), a[1] loses the head it kept.
  auto again = dir.InvalidatePrefix(engine_->namespace_id(), t.first(10));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto got = engine_->DrainRemovedRanges(100);
  std::sort(got.begin(), got.end(), [](const RemovedRange& x, const RemovedRange& y) {
    return x.tokens.begin < y.tokens.begin;
  });
  EXPECT_EQ(got, (std::vector<RemovedRange>{Removed(a[0], {9, kT}, /*retired=*/false),
                                            Removed(a[1], {kT, 99})}));
  // The head goes too: [0, 9).
  auto all = dir.InvalidatePrefix(engine_->namespace_id(), t.first(1));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(engine_->DrainRemovedRanges(100), (std::vector<RemovedRange>{Removed(a[0], {0, 9})}));
}

TEST_F(EngineRemovedRangesTest, PacksLoadedAtOpenAreReportedWithTheirOwnEnds) {
  std::vector<PackRange> a;
  {
    Open(Options());
    a = Store(RandomTokens(2 * kT + 10, 1), 1);  // the tail pack holds 10 tokens
    ASSERT_EQ(a.size(), 3u);
    ASSERT_TRUE(engine_->Close().ok());
    kv_.reset();
    engine_.reset();
  }
  Open(Options());
  ASSERT_TRUE(engine_->recovery().loaded) << engine_->recovery().reason;
  const auto b = Store(RandomTokens(2 * kT, 2), 2);  // the free slot and a's tail
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(engine_->DrainRemovedRanges(100),
            (std::vector<RemovedRange>{Removed(a[2], {2 * kT, 2 * kT + 10})}));
}

TEST_F(EngineRemovedRangesTest, AFullQueueDropsTheOldestAndCountsThem) {
  Open(Options(/*max_removed_ranges=*/2));
  const auto a = Store(RandomTokens(3 * kT, 1), 1);
  Store(RandomTokens(2 * kT, 2), 2);  // evicts a[2]
  Store(RandomTokens(2 * kT, 3), 3);  // evicts a[1], then a[0]: a[2]'s range is dropped
  EXPECT_EQ(engine_->GetStats().removed_events_dropped, 1u);
  EXPECT_EQ(engine_->DrainRemovedRanges(100),
            (std::vector<RemovedRange>{Removed(a[1], {kT, 2 * kT}), Removed(a[0], {0, kT})}));
}

TEST_F(EngineRemovedRangesTest, ZeroCapacityRecordsNothingAndTheBoundIsValidated) {
  Open(Options(/*max_removed_ranges=*/0));
  Store(RandomTokens(3 * kT, 1), 1);
  Store(RandomTokens(2 * kT, 2), 2);  // evicts one pack
  EXPECT_TRUE(engine_->DrainRemovedRanges(100).empty());
  EXPECT_EQ(engine_->GetStats().removed_events_dropped, 0u);
  kv_.reset();
  engine_.reset();
  EngineOptions o = Options(uint64_t{1} << 21);
  o.store_dir = dir_.path() + "/other";
  auto e = Engine::Open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("max_removed_ranges"), std::string::npos)
      << e.status().ToString();
}

}  // namespace
}  // namespace rangekv
