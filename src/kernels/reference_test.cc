#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/kernel_test_cases.h"

namespace rangekv::kernels {
namespace {

using testing::kPoison;
using testing::LayoutCase;

class ReferenceRoundTrip : public ::testing::TestWithParam<LayoutCase> {};

// Scatter into poisoned paged memory must write exactly the oracle's bytes (and leave every
// other byte poisoned); gather into a poisoned stripe must return the scattered rows and leave
// skipped tokens' rows poisoned.
TEST_P(ReferenceRoundTrip, ScatterThenGather) {
  const LayoutCase& c = GetParam();
  std::mt19937_64 rng(c.seed);
  const uint64_t layer_bytes = *PagedLayerBytes(c.layout, c.shape);
  const uint64_t row = testing::RowBytes(c);
  std::vector<uint8_t> paged(layer_bytes, kPoison);
  std::vector<uint8_t> stripe(c.num_tokens * row);
  testing::FillRandom(stripe, rng);
  const std::vector<int64_t> slots = testing::CaseSlotMapping(c, 10, rng);

  auto view = MakePagedKvView(c.layout, c.shape, paged.data());
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_TRUE(ValidateSlotMapping(*view, slots, SlotUse::kScatterDestination).ok());
  const ScatterArgs scatter{
      .dst = *view, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = c.num_tokens};
  ASSERT_TRUE(ValidateScatterArgs(scatter).ok());

  const std::vector<uint8_t> expected_paged =
      testing::OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe, slots);
  // Split the launch in two token ranges, as a multi-threaded host executor would.
  const uint32_t mid = c.num_tokens / 3;
  ScatterReference(scatter, 0, mid);
  ScatterReference(scatter, mid, c.num_tokens);
  ASSERT_EQ(testing::FirstDifference(paged, expected_paged), -1);

  std::vector<uint8_t> back(stripe.size(), kPoison);
  GatherArgs gather;
  gather.src[0] = *view;
  gather.num_layers = 1;
  gather.slots = slots.data();
  gather.num_tokens = c.num_tokens;
  gather.out = back.data();
  ASSERT_TRUE(ValidateGatherArgs(gather).ok());
  GatherReference(gather);
  const std::vector<uint8_t> expected_stripe =
      testing::OracleGather(c, paged, std::vector<uint8_t>(stripe.size(), kPoison), slots);
  ASSERT_EQ(testing::FirstDifference(back, expected_stripe), -1);
  // And the round trip itself: every kept token's row came back, every skipped row is poison.
  for (uint32_t t = 0; t < c.num_tokens; ++t) {
    for (uint64_t b = 0; b < row; b += 7) {
      const uint8_t want = slots[t] >= 0 ? stripe[t * row + b] : kPoison;
      ASSERT_EQ(back[t * row + b], want) << "token " << t << " byte " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, ReferenceRoundTrip,
                         ::testing::ValuesIn(testing::AllLayoutCases(2024)),
                         [](const auto& p) { return p.param.Name(); });

// Launches of at least 1 MiB copy with streaming stores where a piece is 32-byte aligned
// (reference.cc): scattered into page-aligned paged memory (as a real KV cache is) and
// gathered back into a page-aligned bank, every layout must still move exactly the oracle's
// bytes, split over ranges as the host device splits a launch.
TEST(ScatterReferenceTest, LargeLaunchesIntoAlignedMemoryMatchTheOracleBothWays) {
  int large = 0;
  for (const LayoutCase& c : testing::AllLayoutCases(77, 16)) {
    const uint64_t row = testing::RowBytes(c);
    if (uint64_t{c.num_tokens} * row < (1u << 20)) continue;
    ++large;
    std::mt19937_64 rng(c.seed);
    const uint64_t layer_bytes = *PagedLayerBytes(c.layout, c.shape);
    const uint64_t mapped = (layer_bytes + 4095) / 4096 * 4096;
    std::unique_ptr<uint8_t, decltype(&std::free)> paged(
        static_cast<uint8_t*>(std::aligned_alloc(4096, mapped)), &std::free);
    ASSERT_NE(paged, nullptr);
    std::memset(paged.get(), kPoison, layer_bytes);
    std::vector<uint8_t> stripe(c.num_tokens * row);
    testing::FillRandom(stripe, rng);
    const std::vector<int64_t> slots = testing::CaseSlotMapping(c, 10, rng);
    auto view = MakePagedKvView(c.layout, c.shape, paged.get());
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    const ScatterArgs scatter{
        .dst = *view, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = c.num_tokens};
    ASSERT_TRUE(ValidateScatterArgs(scatter).ok());
    for (uint32_t begin = 0; begin < c.num_tokens; begin += 97) {
      ScatterReference(scatter, begin, std::min(c.num_tokens, begin + 97));
    }
    const std::vector<uint8_t> expected =
        testing::OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe, slots);
    const std::vector<uint8_t> scattered(paged.get(), paged.get() + layer_bytes);
    ASSERT_EQ(testing::FirstDifference(scattered, expected), -1) << c.Name();
    // And back: a gather into a page-aligned bank (streamed as well).
    std::unique_ptr<uint8_t, decltype(&std::free)> bank(
        static_cast<uint8_t*>(std::aligned_alloc(4096, (stripe.size() + 4095) / 4096 * 4096)),
        &std::free);
    ASSERT_NE(bank, nullptr);
    std::memset(bank.get(), kPoison, stripe.size());
    GatherArgs gather;
    gather.src[0] = *view;
    gather.num_layers = 1;
    gather.slots = slots.data();
    gather.num_tokens = c.num_tokens;
    gather.out = bank.get();
    ASSERT_TRUE(ValidateGatherArgs(gather).ok());
    for (uint32_t begin = 0; begin < c.num_tokens; begin += 97) {
      GatherReference(gather, begin, std::min(c.num_tokens, begin + 97));
    }
    const std::vector<uint8_t> expected_bank =
        testing::OracleGather(c, scattered, std::vector<uint8_t>(stripe.size(), kPoison), slots);
    ASSERT_EQ(testing::FirstDifference(std::vector<uint8_t>(bank.get(), bank.get() + stripe.size()),
                                       expected_bank),
              -1)
        << c.Name();
  }
  EXPECT_GE(large, 10) << "too few launches large enough to stream";
}

// The token ranges the fused tests cut a launch into, as the host device does: whole block groups
// where blocks are opaque.
uint32_t FusedRangeTokens(const LayoutCase& c) {
  return c.layout == PagedLayout::kCpuBlock ? 3 * c.shape.block_size : 97;
}

// Whether this CPU has the fused copy + digest (the AVX-512 digest variant is its condition).
bool HasFusedPath() {
  return !SpanDigestVariantsForTesting().empty() && SpanDigestVariantsForTesting()[0] == "avx512";
}

// On a CPU with it, the layout cases must have run it often, with opaque blocks at least once,
// and declined it at least once (pieces under 64 bytes).
void ExpectFusedCoverage(int fused, int opaque_fused, int declined) {
  EXPECT_GE(fused, 10);
  EXPECT_GE(opaque_fused, 1) << "no opaque-block case ran fused";
  EXPECT_GE(declined, 1) << "no case had pieces under 64 bytes";
}

// The fused scatter + digest (HostDevice's verified scatter): where it runs, it writes exactly
// the oracle's bytes and its word sums, over ranges as the host device splits a launch, add up
// to the rows' share of the digest of a span that begins two rows before the first; where it
// does not (this CPU, opaque blocks, pieces that are not whole 64-byte units), it says so and
// touches nothing. Small launches (plain stores) and large ones (streaming) are both covered.
TEST(ScatterDigestReferenceTest, CopiesLikeTheScatterAndSumsLikeTheDigest) {
  constexpr uint64_t kSeed = 0x5EED;
  int fused = 0, declined = 0, opaque_fused = 0;
  std::vector<LayoutCase> cases = testing::AllLayoutCases(31);
  for (const LayoutCase& c : testing::AllLayoutCases(32, 16)) cases.push_back(c);
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(c.Name());
    std::mt19937_64 rng(c.seed);
    const uint64_t layer_bytes = *PagedLayerBytes(c.layout, c.shape);
    const uint64_t row = testing::RowBytes(c);
    std::unique_ptr<uint8_t, decltype(&std::free)> paged(
        static_cast<uint8_t*>(std::aligned_alloc(4096, (layer_bytes + 4095) / 4096 * 4096)),
        &std::free);
    ASSERT_NE(paged, nullptr);
    std::memset(paged.get(), kPoison, layer_bytes);
    // Two lead rows before the scatter's first: the digest span starts there.
    std::vector<uint8_t> buffer((c.num_tokens + 2) * row);
    testing::FillRandom(buffer, rng);
    const std::span<const uint8_t> stripe = std::span<const uint8_t>(buffer).subspan(2 * row);
    const std::vector<int64_t> slots = testing::CaseSlotMapping(c, 10, rng);
    const ScatterArgs scatter{.dst = *MakePagedKvView(c.layout, c.shape, paged.get()),
                              .stripe = stripe.data(),
                              .slots = slots.data(),
                              .num_tokens = c.num_tokens};
    ASSERT_TRUE(ValidateScatterArgs(scatter).ok());
    uint64_t sum = 0, part = 0;
    bool ran = true;
    const uint32_t step = FusedRangeTokens(c);
    for (uint32_t begin = 0; ran && begin < c.num_tokens; begin += step) {
      ran = ScatterDigestReference(scatter, begin, std::min(c.num_tokens, begin + step),
                                   buffer.data(), kSeed, &part);
      sum += part;
      if (!ran) {
        ASSERT_EQ(begin, 0u) << "declined part of a launch";
      }
    }
    const std::vector<uint8_t> got(paged.get(), paged.get() + layer_bytes);
    if (!ran) {
      ++declined;
      EXPECT_EQ(testing::FirstDifference(got, std::vector<uint8_t>(layer_bytes, kPoison)), -1);
      continue;
    }
    ++fused;
    opaque_fused += c.layout == PagedLayout::kCpuBlock ? 1 : 0;
    EXPECT_EQ(testing::FirstDifference(
                  got, testing::OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe,
                                              slots)),
              -1);
    EXPECT_EQ(sum, SpanDigestWordSum(stripe.data(), stripe.size(), 2 * row / 8, kSeed));
  }
  if (!HasFusedPath()) {
    EXPECT_EQ(fused, 0);
    GTEST_SKIP() << "no AVX-512 here: the fused path declined all " << declined << " cases";
  }
  ExpectFusedCoverage(fused, opaque_fused, declined);
}

// The fused gather + digest (HostDevice's store): layer 1 of a two-layer gather into a bank whose
// regions are a page apart, over ranges as the host device splits it; where it runs, the bank
// holds exactly the oracle's rows (skipped tokens' rows untouched) and the word sums add up to
// the digest of the layer's rows counted from a span beginning at its row 0; where it does not,
// it touches nothing.
TEST(GatherDigestReferenceTest, GathersLikeTheGatherAndSumsLikeTheDigest) {
  constexpr uint64_t kSeed = 0x5EED;
  int fused = 0, declined = 0, opaque_fused = 0;
  std::vector<LayoutCase> cases = testing::AllLayoutCases(33);
  for (const LayoutCase& c : testing::AllLayoutCases(34, 16)) cases.push_back(c);
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(c.Name());
    std::mt19937_64 rng(c.seed);
    const uint64_t layer_bytes = *PagedLayerBytes(c.layout, c.shape);
    const uint64_t row = testing::RowBytes(c);
    std::vector<uint8_t> paged0(layer_bytes), paged1(layer_bytes);
    testing::FillRandom(paged0, rng);
    testing::FillRandom(paged1, rng);
    const uint64_t region = c.num_tokens * row;
    const uint64_t stride = (region + 4096) / 4096 * 4096;
    std::unique_ptr<uint8_t, decltype(&std::free)> bank(
        static_cast<uint8_t*>(std::aligned_alloc(4096, 2 * stride)), &std::free);
    ASSERT_NE(bank, nullptr);
    std::memset(bank.get(), kPoison, 2 * stride);
    const std::vector<int64_t> slots = testing::CaseSlotMapping(c, 10, rng);
    GatherArgs g;
    g.src[0] = *MakePagedKvView(c.layout, c.shape, paged0.data());
    g.src[1] = *MakePagedKvView(c.layout, c.shape, paged1.data());
    g.num_layers = 2;
    g.slots = slots.data();
    g.num_tokens = c.num_tokens;
    g.out = bank.get();
    g.out_layer_stride_bytes = stride;
    ASSERT_TRUE(ValidateGatherArgs(g).ok());
    uint8_t* layer1 = bank.get() + stride;
    uint64_t sum = 0, part = 0;
    bool ran = true;
    const uint32_t step = FusedRangeTokens(c);
    for (uint32_t begin = 0; ran && begin < c.num_tokens; begin += step) {
      ran = GatherDigestReference(g, 1, begin, std::min(c.num_tokens, begin + step), layer1, kSeed,
                                  &part);
      sum += part;
      if (!ran) {
        ASSERT_EQ(begin, 0u) << "declined part of a launch";
      }
    }
    const std::vector<uint8_t> got(bank.get(), bank.get() + 2 * stride);
    if (!ran) {
      ++declined;
      EXPECT_EQ(testing::FirstDifference(got, std::vector<uint8_t>(2 * stride, kPoison)), -1);
      continue;
    }
    ++fused;
    opaque_fused += c.layout == PagedLayout::kCpuBlock ? 1 : 0;
    std::vector<uint8_t> want(2 * stride, kPoison);
    const std::vector<uint8_t> rows =
        testing::OracleGather(c, paged1, std::vector<uint8_t>(region, kPoison), slots);
    std::copy(rows.begin(), rows.end(), want.begin() + stride);
    EXPECT_EQ(testing::FirstDifference(got, want), -1) << "layer 0 and the gaps stay poisoned";
    EXPECT_EQ(sum, SpanDigestWordSum(layer1, region, 0, kSeed));
  }
  if (!HasFusedPath()) {
    EXPECT_EQ(fused, 0);
    GTEST_SKIP() << "no AVX-512 here: the fused path declined all " << declined << " cases";
  }
  ExpectFusedCoverage(fused, opaque_fused, declined);
}

// A layer group: three layers into consecutive regions of one bank with gaps between them;
// the gaps stay poisoned.
TEST(GatherReferenceTest, LayerGroupIntoBankRegions) {
  std::mt19937_64 rng(5);
  const PagedShape s{
      .num_blocks = 6, .block_size = 16, .num_heads = 2, .head_size = 64, .elem_bytes = 2};
  const LayoutCase c{.layout = PagedLayout::kFlashAttnHnd, .shape = s, .num_tokens = 70};
  const uint64_t layer_bytes = *PagedLayerBytes(c.layout, s);
  const uint64_t row = testing::RowBytes(c);
  const uint64_t region = c.num_tokens * row;
  const uint64_t stride = region + 4096;
  constexpr uint32_t kLayers = 3;
  std::vector<std::vector<uint8_t>> layers(kLayers, std::vector<uint8_t>(layer_bytes));
  GatherArgs g;
  for (uint32_t l = 0; l < kLayers; ++l) {
    testing::FillRandom(layers[l], rng);
    g.src[l] = *MakePagedKvView(c.layout, s, layers[l].data());
  }
  const std::vector<int64_t> slots =
      testing::RandomSlotMapping(s.num_blocks * s.block_size, c.num_tokens, 20, rng);
  std::vector<uint8_t> bank(stride * kLayers, kPoison);
  g.num_layers = kLayers;
  g.slots = slots.data();
  g.num_tokens = c.num_tokens;
  g.out = bank.data();
  g.out_layer_stride_bytes = stride;
  ASSERT_TRUE(ValidateGatherArgs(g).ok());
  GatherReference(g);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const std::vector<uint8_t> expected =
        testing::OracleGather(c, layers[l], std::vector<uint8_t>(region, kPoison), slots);
    const std::span<const uint8_t> got(bank.data() + l * stride, region);
    ASSERT_EQ(testing::FirstDifference(got, expected), -1) << "layer " << l;
    for (uint64_t b = region; b < stride; ++b) ASSERT_EQ(bank[l * stride + b], kPoison);
  }
}

// Out-of-range slots are skipped by the kernels themselves (defence in depth behind
// ValidateSlotMapping): nothing outside the view is written and the view is untouched there.
TEST(ScatterReferenceTest, SkipsOutOfRangeSlots) {
  const PagedShape s{
      .num_blocks = 2, .block_size = 16, .num_heads = 1, .head_size = 8, .elem_bytes = 2};
  const uint64_t layer_bytes = *PagedLayerBytes(PagedLayout::kFlashAttnNhd, s);
  std::vector<uint8_t> memory(layer_bytes * 3, kPoison);  // guard zones on both sides
  uint8_t* layer = memory.data() + layer_bytes;
  const PagedKvView v = *MakePagedKvView(PagedLayout::kFlashAttnNhd, s, layer);
  std::vector<uint8_t> stripe(3 * v.token_bytes(), 0x11);
  const std::vector<int64_t> slots = {32, 1000, -5};
  ScatterReference({.dst = v, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = 3});
  for (uint8_t b : memory) ASSERT_EQ(b, kPoison);
}

// vLLM backends that keep K and V as two tensors: one view with two unrelated bases.
TEST(ScatterReferenceTest, SeparateKAndVAllocations) {
  std::mt19937_64 rng(9);
  const PagedShape s{
      .num_blocks = 5, .block_size = 32, .num_heads = 4, .head_size = 16, .elem_bytes = 2};
  const LayoutCase c{.layout = PagedLayout::kFlashAttnNhd, .shape = s, .num_tokens = 100};
  const uint64_t layer_bytes = *PagedLayerBytes(c.layout, s);
  std::vector<uint8_t> joined(layer_bytes, kPoison);
  std::vector<uint8_t> k(layer_bytes / 2, kPoison), v(layer_bytes / 2, kPoison);
  PagedKvView split = *MakePagedKvView(c.layout, s, joined.data());
  split.plane_base[0] = k.data();
  split.plane_base[1] = v.data();
  ASSERT_TRUE(ValidatePagedKvView(split).ok());
  std::vector<uint8_t> stripe(c.num_tokens * testing::RowBytes(c));
  testing::FillRandom(stripe, rng);
  const auto slots = testing::RandomSlotMapping(s.num_blocks * s.block_size, c.num_tokens, 0, rng);
  ScatterReference(
      {.dst = split, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = c.num_tokens});
  const std::vector<uint8_t> expected =
      testing::OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe, slots);
  ASSERT_EQ(testing::FirstDifference(k, std::span(expected).first(layer_bytes / 2)), -1);
  ASSERT_EQ(testing::FirstDifference(v, std::span(expected).subspan(layer_bytes / 2)), -1);
}

// kCpuBlock: a block group moves whole; with a block-consistent mapping the bytes are exactly
// those a token-by-token copy through the same rows moves, and each group's destination is
// named by its first slot alone (a group whose first slot is skipped moves nothing).
TEST(OpaqueBlockReferenceTest, WholeBlocksFollowTheFirstSlot) {
  std::mt19937_64 rng(41);
  const PagedShape s{
      .num_blocks = 6, .block_size = 32, .num_heads = 2, .head_size = 64, .elem_bytes = 2};
  const uint64_t layer_bytes = *PagedLayerBytes(PagedLayout::kCpuBlock, s);
  EXPECT_EQ(layer_bytes, 6ull * 2 * 32 * 2 * 64 * 2);  // [N, H, B, 2D]
  std::vector<uint8_t> paged(layer_bytes, kPoison);
  const PagedKvView v = *MakePagedKvView(PagedLayout::kCpuBlock, s, paged.data());
  const uint64_t block_bytes = 32 * v.token_bytes();
  ASSERT_EQ(v.token_bytes(), 2u * 2 * 64 * 2);
  std::vector<uint8_t> stripe(3 * block_bytes);
  testing::FillRandom(stripe, rng);
  // Group 0 -> block 4, group 1 skipped, group 2 -> block 1 (only its first slot is read).
  std::vector<int64_t> slots(96, -1);
  for (int k = 0; k < 32; ++k) slots[k] = 4 * 32 + k;
  slots[64] = 1 * 32;
  ScatterArgs a{.dst = v, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = 96};
  ASSERT_TRUE(ValidateScatterArgs(a).ok());
  // Split mid-group, as a multi-threaded executor may: each group still moves exactly once.
  ScatterReference(a, 0, 40);
  ScatterReference(a, 40, 96);
  for (uint64_t b = 0; b < 6; ++b) {
    const uint8_t* got = paged.data() + b * block_bytes;
    if (b == 4 || b == 1) {
      const uint8_t* want = stripe.data() + (b == 4 ? 0 : 2) * block_bytes;
      ASSERT_EQ(std::memcmp(got, want, block_bytes), 0) << "block " << b;
    } else {
      for (uint64_t i = 0; i < block_bytes; ++i) ASSERT_EQ(got[i], kPoison) << "block " << b;
    }
  }
  std::vector<uint8_t> back(stripe.size(), kPoison);
  GatherArgs g;
  g.src[0] = v;
  g.num_layers = 1;
  g.slots = slots.data();
  g.num_tokens = 96;
  g.out = back.data();
  ASSERT_TRUE(ValidateGatherArgs(g).ok());
  GatherReference(g, 0, 33);
  GatherReference(g, 33, 96);
  ASSERT_EQ(std::memcmp(back.data(), stripe.data(), block_bytes), 0);
  for (uint64_t i = block_bytes; i < 2 * block_bytes; ++i) ASSERT_EQ(back[i], kPoison);
  ASSERT_EQ(
      std::memcmp(back.data() + 2 * block_bytes, stripe.data() + 2 * block_bytes, block_bytes), 0);

  // Equivalence with a token-by-token copy through a non-opaque view of the same rows.
  PagedKvView rows = v;
  rows.opaque_blocks = 0;
  std::vector<int64_t> consistent = testing::RandomBlockSlotMapping(6, 32, 96, 0, rng);
  std::vector<uint8_t> by_block(layer_bytes, kPoison), by_token(layer_bytes, kPoison);
  a.slots = consistent.data();
  a.dst = *MakePagedKvView(PagedLayout::kCpuBlock, s, by_block.data());
  ScatterReference(a);
  rows.plane_base[0] = by_token.data();
  a.dst = rows;
  ScatterReference(a);
  ASSERT_EQ(testing::FirstDifference(by_block, by_token), -1);
}

}  // namespace
}  // namespace rangekv::kernels
