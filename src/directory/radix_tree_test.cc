#include "directory/radix_tree.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace rangekv::directory_internal {
namespace {

const NamespaceId kNs{1, 2};

RadixTree::Limits BigLimits() { return {1000, 1000, 100000, 8}; }

std::vector<int32_t> Iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

uint64_t WalkAll(const RadixTree& t, uint32_t root, const std::vector<int32_t>& q,
                 std::vector<RadixTree::Step>* steps) {
  uint64_t compared = 0;
  return t.Walk(
      root, q, [](uint32_t) { return true; }, steps, &compared);
}

TEST(CommonPrefixTest, FindsTheFirstDifferenceInAnyBlock) {
  std::vector<int32_t> a = Iota(300), b = a;
  EXPECT_EQ(CommonPrefix(a.data(), b.data(), 300), 300u);
  for (int d : {0, 1, 63, 64, 65, 200, 299}) {
    b = a;
    b[d] = -1;
    EXPECT_EQ(CommonPrefix(a.data(), b.data(), 300), static_cast<uint64_t>(d));
  }
}

TEST(RadixTreeTest, SplitAttachAndWalk) {
  RadixTree t(BigLimits(), 4, 8);
  const uint32_t root = t.EnsureRoot(kNs);
  std::vector<int32_t> a = Iota(8);
  const uint32_t n0 = t.Attach(root, a, 0, 0);
  std::vector<RadixTree::Step> steps;
  EXPECT_EQ(WalkAll(t, root, a, &steps), 8u);
  ASSERT_EQ(steps.size(), 1u);
  // Diverge at position 5: split pack 0 there, new pack 1 at its token 0.
  std::vector<int32_t> b = a;
  b[5] = 100;
  EXPECT_EQ(WalkAll(t, root, b, &steps), 5u);
  const uint32_t lower = t.Split(n0, 5);
  const uint32_t n1 = t.Attach(n0, std::span(b).subspan(5), 1, 0);
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants().ToString();
  EXPECT_EQ(t.node(lower).pack_offset, 5u);
  EXPECT_EQ(t.node(n1).depth_begin, 5u);
  EXPECT_EQ(t.pack(0).node_count, 2u);
  EXPECT_EQ(t.pack(0).foreign_children, 1u);
  EXPECT_EQ(WalkAll(t, root, b, &steps), 8u);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(t.node(steps[1].node).slot, 1u);
  // Removing the branch merges pack 0 back into one node.
  std::vector<uint32_t> affected;
  t.RemoveSubtree(n1, &affected);
  EXPECT_EQ(affected, std::vector<uint32_t>{1});
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants().ToString();
  EXPECT_EQ(t.pack(0).node_count, 1u);
  EXPECT_EQ(t.pack(0).foreign_children, 0u);
  EXPECT_EQ(t.pack(1).first_node, kNoNode);
  EXPECT_EQ(t.records(), 1u);
}

TEST(RadixTreeTest, TruncateClipsAPackAndDropsItsChildren) {
  RadixTree t(BigLimits(), 4, 8);
  const uint32_t root = t.EnsureRoot(kNs);
  std::vector<int32_t> a = Iota(16);
  const uint32_t n0 = t.Attach(root, std::span(a).first(8), 0, 0);
  t.Attach(n0, std::span(a).subspan(8), 1, 0);
  std::vector<uint32_t> affected;
  t.Truncate(n0, 3, &affected);
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants().ToString();
  EXPECT_EQ(t.pack(0).covered_tokens, 3u);
  EXPECT_EQ(t.pack(1).node_count, 0u);
  std::vector<RadixTree::Step> steps;
  EXPECT_EQ(WalkAll(t, root, a, &steps), 3u);
  // Removing the last pack drops the namespace root.
  t.RemoveSubtree(n0, &affected);
  EXPECT_EQ(t.FindRoot(kNs), kNoNode);
  EXPECT_EQ(t.nodes_in_use(), 0u);
  EXPECT_EQ(t.live_tokens(), 0u);
}

TEST(RadixTreeTest, CapacityBoundsAreNamed) {
  RadixTree t({3, 2, 10, 1}, 4, 8);
  EXPECT_TRUE(t.CheckCapacity(1, 0, 0, true).ok());
  const uint32_t root = t.EnsureRoot(kNs);
  EXPECT_EQ(t.CheckCapacity(0, 0, 0, true).code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.CheckCapacity(0, 0, 0, true).message().find("namespace"), std::string::npos);
  EXPECT_NE(t.CheckCapacity(3, 0, 0, false).message().find("node"), std::string::npos);
  EXPECT_NE(t.CheckCapacity(1, 3, 0, false).message().find("record"), std::string::npos);
  EXPECT_NE(t.CheckCapacity(1, 1, 11, false).message().find("arena"), std::string::npos);
  std::vector<int32_t> a = Iota(8);
  t.Attach(root, a, 0, 0);
  EXPECT_FALSE(t.CheckCapacity(1, 1, 3, false).ok());
  EXPECT_TRUE(t.CheckCapacity(1, 1, 2, false).ok());
}

// Random inserts and removals keep every invariant, and the arena stays bounded by compaction.
TEST(RadixTreeTest, RandomChurnKeepsInvariantsAndBoundsTheArena) {
  constexpr uint64_t kT = 6;
  RadixTree t({100000, 100000, 1 << 20, 4}, 64, kT);
  std::mt19937_64 rng(11);
  std::vector<bool> used(64, false);
  for (int round = 0; round < 3000; ++round) {
    const NamespaceId ns{rng() % 2, 0};
    std::vector<int32_t> q(1 + rng() % 30);
    for (auto& x : q) x = static_cast<int32_t>(rng() % 3);
    const int free_slots = static_cast<int>(std::count(used.begin(), used.end(), false));
    if (rng() % 3 != 0 && free_slots >= 6) {
      if (t.FindRoot(ns) == kNoNode) t.EnsureRoot(ns);
      const uint32_t root = t.FindRoot(ns);
      std::vector<RadixTree::Step> steps;
      uint64_t h = WalkAll(t, root, q, &steps);
      if (h == q.size()) continue;
      uint32_t parent = root;
      if (!steps.empty()) {
        parent = steps.back().node;
        if (steps.back().matched < t.node(parent).label_len) t.Split(parent, steps.back().matched);
      }
      for (uint64_t pos = h; pos < q.size(); pos += kT) {
        uint32_t slot =
            static_cast<uint32_t>(std::find(used.begin(), used.end(), false) - used.begin());
        used[slot] = true;
        const uint64_t len = std::min<uint64_t>(kT, q.size() - pos);
        parent = t.Attach(parent, std::span(q).subspan(pos, len), slot, 0);
      }
      ASSERT_LE(t.arena_tokens(), 2 * t.live_tokens() + 1024);
    } else {
      const uint32_t root = t.FindRoot(ns);
      if (root == kNoNode) continue;
      std::vector<RadixTree::Step> steps;
      const uint64_t m = WalkAll(t, root, q, &steps);
      if (m == 0) continue;
      std::vector<uint32_t> affected;
      if (steps.back().matched == 1) {
        t.RemoveSubtree(steps.back().node, &affected);
      } else {
        t.Truncate(steps.back().node, steps.back().matched - 1, &affected);
      }
      for (uint32_t s : affected) {
        if (t.pack(s).node_count == 0) used[s] = false;
      }
    }
    ASSERT_TRUE(t.CheckInvariants().ok()) << round << ": " << t.CheckInvariants().ToString();
  }
}

}  // namespace
}  // namespace rangekv::directory_internal
