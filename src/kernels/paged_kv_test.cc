#include "kernels/paged_kv.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/kernel_test_cases.h"

namespace rangekv::kernels {
namespace {

TEST(FastDivU32Test, ExactForSmallDivisorsAndEdgeNumerators) {
  std::mt19937_64 rng(7);
  for (uint32_t d = 1; d <= 600; ++d) {
    const FastDivU32 f = FastDivU32::Make(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 2 * d, UINT32_MAX, UINT32_MAX - 1,
                       UINT32_MAX - d, UINT32_MAX / d * d, UINT32_MAX / d * d - 1}) {
      ASSERT_EQ(f.Div(n), n / d) << "n=" << n << " d=" << d;
      ASSERT_EQ(f.Mod(n), n % d) << "n=" << n << " d=" << d;
    }
    for (int i = 0; i < 200; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng());
      ASSERT_EQ(f.Div(n), n / d) << "n=" << n << " d=" << d;
    }
  }
}

TEST(FastDivU32Test, ExactForLargeDivisors) {
  std::mt19937_64 rng(11);
  for (int k = 0; k < 2000; ++k) {
    uint32_t d = static_cast<uint32_t>(rng()) >> (rng() % 32);
    if (d == 0) d = 1;
    const FastDivU32 f = FastDivU32::Make(d);
    for (int i = 0; i < 50; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng());
      ASSERT_EQ(f.Div(n), n / d) << "n=" << n << " d=" << d;
    }
    ASSERT_EQ(f.Div(UINT32_MAX), UINT32_MAX / d);
  }
}

// The view builders must agree with the tensor-shape oracle for every (plane, block, token,
// head) of every layout.
TEST(PagedKvViewTest, BuildersMatchTensorShapes) {
  std::vector<uint8_t> memory(1 << 20);
  for (const testing::LayoutCase& c : testing::AllLayoutCases(3)) {
    SCOPED_TRACE(c.Name());
    auto bytes = PagedLayerBytes(c.layout, c.shape);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    std::vector<uint8_t> layer(*bytes);
    auto view = MakePagedKvView(c.layout, c.shape, layer.data());
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->token_bytes(), testing::RowBytes(c));
    EXPECT_EQ(view->num_slots(), c.shape.num_blocks * c.shape.block_size);
    if (c.layout == PagedLayout::kCpuBlock) {
      // One opaque row per token: the block is B contiguous rows at block * B * s.
      EXPECT_EQ(view->opaque_blocks, 1u);
      EXPECT_EQ(view->num_planes, 1u);
      EXPECT_EQ(view->num_heads, 1u);
      for (uint32_t b = 0; b < c.shape.num_blocks; ++b) {
        for (uint32_t t = 0; t < c.shape.block_size; t += 5) {
          ASSERT_EQ(view->HeadAddress(0, b, t, 0) - layer.data(),
                    static_cast<int64_t>(testing::OracleOffset(c.layout, c.shape, 0, b, t, 0, 0)));
        }
      }
      continue;
    }
    EXPECT_EQ(view->opaque_blocks, 0u);
    EXPECT_EQ(view->num_planes, testing::NumPlanes(c.layout));
    for (uint32_t p = 0; p < view->num_planes; ++p) {
      for (uint32_t b = 0; b < c.shape.num_blocks; b += 3) {
        for (uint32_t t = 0; t < c.shape.block_size; t += 5) {
          for (uint32_t h = 0; h < c.shape.num_heads; ++h) {
            ASSERT_EQ(
                view->HeadAddress(p, b, t, h) - layer.data(),
                static_cast<int64_t>(testing::OracleOffset(c.layout, c.shape, p, b, t, h, 0)));
          }
        }
      }
    }
  }
}

TEST(PagedKvViewTest, LayerBytes) {
  const PagedShape s{
      .num_blocks = 10, .block_size = 16, .num_heads = 8, .head_size = 128, .elem_bytes = 2};
  EXPECT_EQ(*PagedLayerBytes(PagedLayout::kFlashAttnNhd, s), 2ull * 10 * 16 * 8 * 128 * 2);
  EXPECT_EQ(*PagedLayerBytes(PagedLayout::kFlashInferHnd, s), 2ull * 10 * 16 * 8 * 128 * 2);
  const PagedShape mla{
      .num_blocks = 10, .block_size = 64, .num_heads = 1, .head_size = 576, .elem_bytes = 2};
  EXPECT_EQ(*PagedLayerBytes(PagedLayout::kMla, mla), 10ull * 64 * 576 * 2);
}

TEST(PagedKvViewTest, RejectsBadShapes) {
  uint8_t dummy[64];
  PagedShape s{.num_blocks = 4, .block_size = 16, .num_heads = 2, .head_size = 8, .elem_bytes = 2};
  EXPECT_EQ(MakePagedKvView(PagedLayout::kFlashAttnNhd, s, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  PagedShape zero = s;
  zero.block_size = 0;
  EXPECT_EQ(MakePagedKvView(PagedLayout::kFlashAttnNhd, zero, dummy).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePagedKvView(PagedLayout::kMla, s, dummy).status().code(),
            StatusCode::kInvalidArgument)
      << "MLA with 2 heads";
  PagedShape huge = s;
  huge.num_blocks = UINT32_MAX;
  huge.head_size = UINT32_MAX;
  EXPECT_EQ(PagedLayerBytes(PagedLayout::kFlashAttnNhd, huge).status().code(),
            StatusCode::kInvalidArgument);
}

PagedKvView SmallNhdView(uint8_t* base) {
  const PagedShape s{
      .num_blocks = 4, .block_size = 16, .num_heads = 2, .head_size = 8, .elem_bytes = 2};
  return *MakePagedKvView(PagedLayout::kFlashAttnNhd, s, base);
}

TEST(PagedKvViewTest, ValidateRejectsOverlapsAndNulls) {
  std::vector<uint8_t> layer(1 << 16);
  const PagedKvView good = SmallNhdView(layer.data());
  EXPECT_TRUE(ValidatePagedKvView(good).ok());

  PagedKvView v = good;
  v.token_stride_bytes = v.head_bytes;  // tokens land on the second head
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.plane_base[1] = v.plane_base[0] + v.block_stride_bytes;  // V inside K's blocks
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.head_stride_bytes = v.head_bytes - 2;  // heads overlap by one element
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.plane_base[1] = nullptr;
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.num_planes = 1;  // one plane with a V base
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.head_bytes = 15;  // not a multiple of elem_bytes
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);

  v = good;
  v.num_blocks = 1u << 30;  // 2^34 slots
  EXPECT_EQ(ValidatePagedKvView(v).code(), StatusCode::kInvalidArgument);
}

TEST(PagedKvViewTest, ValidateAcceptsSeparateKAndVTensorsAndNegativeStrides) {
  std::vector<uint8_t> k(1 << 14), vbuf(1 << 14);
  PagedKvView v = SmallNhdView(k.data());
  v.plane_base[1] = vbuf.data();  // V in its own allocation, before or after K
  EXPECT_TRUE(ValidatePagedKvView(v).ok());

  // Blocks laid out backwards from the end of the allocation.
  PagedKvView rev = SmallNhdView(k.data());
  rev.num_planes = 1;
  rev.plane_base[1] = nullptr;
  rev.plane_base[0] = k.data() + 3 * rev.block_stride_bytes;
  rev.block_stride_bytes = -rev.block_stride_bytes;
  EXPECT_TRUE(ValidatePagedKvView(rev).ok());
}

TEST(SlotMappingTest, RangeAndDuplicates) {
  std::vector<uint8_t> layer(1 << 16);
  const PagedKvView v = SmallNhdView(layer.data());  // 64 slots
  const std::vector<int64_t> ok = {0, 63, -1, 5, -7};
  EXPECT_TRUE(ValidateSlotMapping(v, ok, SlotUse::kScatterDestination).ok());
  const std::vector<int64_t> beyond = {0, 64};
  EXPECT_EQ(ValidateSlotMapping(v, beyond, SlotUse::kScatterDestination).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateSlotMapping(v, beyond, SlotUse::kGatherSource).code(), StatusCode::kOutOfRange);
  const std::vector<int64_t> dup = {3, -1, 9, 3};
  EXPECT_EQ(ValidateSlotMapping(v, dup, SlotUse::kScatterDestination).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSlotMapping(v, dup, SlotUse::kGatherSource).ok());
  const std::vector<int64_t> skips = {-1, -1};
  EXPECT_TRUE(ValidateSlotMapping(v, skips, SlotUse::kScatterDestination).ok());
}

TEST(LaunchArgsTest, ScatterValidation) {
  std::vector<uint8_t> layer(1 << 16);
  std::vector<uint8_t> stripe(64 * 64);
  std::vector<int64_t> slots(64, -1);
  ScatterArgs a{.dst = SmallNhdView(layer.data()),
                .stripe = stripe.data(),
                .slots = slots.data(),
                .num_tokens = 64};
  EXPECT_TRUE(ValidateScatterArgs(a).ok());

  ScatterArgs empty = a;
  empty.num_tokens = 0;
  empty.stripe = nullptr;
  empty.slots = nullptr;
  EXPECT_TRUE(ValidateScatterArgs(empty).ok()) << "an empty scatter needs no buffers";

  ScatterArgs bad = a;
  bad.stripe = nullptr;
  EXPECT_EQ(ValidateScatterArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.slots = nullptr;
  EXPECT_EQ(ValidateScatterArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.stripe = layer.data() + 100;  // the stripe inside the paged layer
  EXPECT_EQ(ValidateScatterArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.dst.plane_base[0] = nullptr;
  EXPECT_EQ(ValidateScatterArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.num_tokens = UINT32_MAX;  // 2^32 tokens x 64 bytes
  EXPECT_EQ(ValidateScatterArgs(bad).code(), StatusCode::kInvalidArgument);
}

TEST(LaunchArgsTest, GatherValidation) {
  std::vector<uint8_t> l0(1 << 16), l1(1 << 16), mla(1 << 16);
  std::vector<uint8_t> out(4 * 64 * 64);
  std::vector<int64_t> slots(64, 0);
  GatherArgs a;
  a.src[0] = SmallNhdView(l0.data());
  a.src[1] = SmallNhdView(l1.data());
  a.num_layers = 2;
  a.slots = slots.data();
  a.num_tokens = 64;
  a.out = out.data();
  a.out_layer_stride_bytes = 64 * 64;
  EXPECT_TRUE(ValidateGatherArgs(a).ok());

  GatherArgs bad = a;
  bad.num_layers = 0;
  EXPECT_EQ(ValidateGatherArgs(bad).code(), StatusCode::kInvalidArgument);
  bad.num_layers = kMaxGatherLayers + 1;
  EXPECT_EQ(ValidateGatherArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.out_layer_stride_bytes = 64 * 64 - 1;  // layers' output regions overlap
  EXPECT_EQ(ValidateGatherArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.out = l1.data();  // output inside layer 1's paged memory
  EXPECT_EQ(ValidateGatherArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  const PagedShape other{
      .num_blocks = 4, .block_size = 16, .num_heads = 1, .head_size = 32, .elem_bytes = 1};
  bad.src[1] = *MakePagedKvView(PagedLayout::kMla, other, mla.data());  // same bytes, new shape
  ASSERT_EQ(bad.src[1].token_bytes(), a.src[0].token_bytes() / 2);
  EXPECT_EQ(ValidateGatherArgs(bad).code(), StatusCode::kInvalidArgument);
}

TEST(LaunchArgsTest, AccessWidthFollowsAlignment) {
  alignas(64) static uint8_t layer[1 << 16];
  alignas(64) static uint8_t stripe[1 << 12];
  std::vector<int64_t> slots(4, 0);
  ScatterArgs a{
      .dst = SmallNhdView(layer), .stripe = stripe, .slots = slots.data(), .num_tokens = 4};
  EXPECT_EQ(ScatterAccessBytes(a), 16u);  // head_bytes 16, all aligned
  a.stripe = stripe + 2;
  EXPECT_EQ(ScatterAccessBytes(a), 2u);
  a.stripe = stripe + 8;
  EXPECT_EQ(ScatterAccessBytes(a), 8u);
  a.stripe = stripe;
  const PagedShape odd{
      .num_blocks = 4, .block_size = 16, .num_heads = 3, .head_size = 7, .elem_bytes = 1};
  a.dst = *MakePagedKvView(PagedLayout::kFlashAttnNhd, odd, layer);
  EXPECT_EQ(ScatterAccessBytes(a), 1u);

  GatherArgs g;
  g.src[0] = SmallNhdView(layer);
  g.num_layers = 2;
  g.src[1] = g.src[0];
  g.out = stripe;
  g.out_layer_stride_bytes = 64 * 4 + 4;  // a layer stride that is only 4-aligned
  EXPECT_EQ(GatherAccessBytes(g), 4u);
}

TEST(OpaqueBlockTest, BlockMappingAndLaunchChecks) {
  const PagedShape s{
      .num_blocks = 4, .block_size = 16, .num_heads = 2, .head_size = 8, .elem_bytes = 2};
  std::vector<uint8_t> layer(*PagedLayerBytes(PagedLayout::kCpuBlock, s));
  const PagedKvView v = *MakePagedKvView(PagedLayout::kCpuBlock, s, layer.data());
  std::vector<int64_t> slots(32);
  for (int k = 0; k < 16; ++k) {
    slots[k] = 3 * 16 + k;
    slots[16 + k] = 0 * 16 + k;
  }
  EXPECT_TRUE(ValidateBlockMapping(v, slots).ok());
  EXPECT_EQ(ValidateBlockMapping(v, std::span(slots).first(20)).code(),
            StatusCode::kInvalidArgument)
      << "not whole blocks";
  auto bad = slots;
  bad[16] = 1;  // group 1 starts mid-block
  EXPECT_EQ(ValidateBlockMapping(v, bad).code(), StatusCode::kInvalidArgument);
  bad = slots;
  std::swap(bad[3], bad[4]);  // out of order inside a block
  EXPECT_EQ(ValidateBlockMapping(v, bad).code(), StatusCode::kInvalidArgument);
  bad = slots;
  bad[20] = 2 * 16 + 4;  // a token of group 1 in another block
  EXPECT_EQ(ValidateBlockMapping(v, bad).code(), StatusCode::kInvalidArgument);
  bad = slots;
  bad[0] = -1;
  EXPECT_EQ(ValidateBlockMapping(v, bad).code(), StatusCode::kInvalidArgument);

  std::vector<uint8_t> stripe(32 * v.token_bytes());
  ScatterArgs a{.dst = v, .stripe = stripe.data(), .slots = slots.data(), .num_tokens = 32};
  EXPECT_TRUE(ValidateScatterArgs(a).ok());
  a.num_tokens = 24;
  EXPECT_EQ(ValidateScatterArgs(a).code(), StatusCode::kInvalidArgument);
  GatherArgs g;
  g.src[0] = v;
  g.src[1] = v;
  g.num_layers = 2;
  g.slots = slots.data();
  g.num_tokens = 32;
  g.out = stripe.data();
  g.out_layer_stride_bytes = 16 * v.token_bytes();
  g.num_tokens = 16;
  EXPECT_TRUE(ValidateGatherArgs(g).ok());
  g.num_tokens = 8;
  EXPECT_EQ(ValidateGatherArgs(g).code(), StatusCode::kInvalidArgument);
  g.num_tokens = 16;
  g.src[1].opaque_blocks = 0;
  EXPECT_EQ(ValidateGatherArgs(g).code(), StatusCode::kInvalidArgument) << "mixed opacity";

  PagedKvView two_planes = *MakePagedKvView(PagedLayout::kFlashAttnNhd, s, layer.data());
  two_planes.opaque_blocks = 1;
  EXPECT_EQ(ValidatePagedKvView(two_planes).code(), StatusCode::kInvalidArgument);
}

// The packed layouts keep K and V in one vector per (block, token, head): V is D elements after K.
TEST(PackedLayoutTest, KAndVShareTheLastDimension) {
  const PagedShape s{
      .num_blocks = 3, .block_size = 16, .num_heads = 4, .head_size = 8, .elem_bytes = 2};
  std::vector<uint8_t> layer(*PagedLayerBytes(PagedLayout::kPackedNhd, s));
  for (PagedLayout l : {PagedLayout::kPackedNhd, PagedLayout::kPackedHnd}) {
    const PagedKvView v = *MakePagedKvView(l, s, layer.data());
    EXPECT_EQ(v.HeadAddress(1, 2, 5, 3) - v.HeadAddress(0, 2, 5, 3), 16);
    EXPECT_EQ(v.block_stride_bytes, 16 * 4 * 32);
  }
  EXPECT_EQ(MakePagedKvView(PagedLayout::kPackedNhd, s, layer.data())->token_stride_bytes, 4 * 32);
  EXPECT_EQ(MakePagedKvView(PagedLayout::kPackedHnd, s, layer.data())->head_stride_bytes, 16 * 32);
}

// Explicit strides (vLLM's cross-layer KV cache): accepted where the layers interleave inside each
// block without sharing a byte, refused where two layers would write one byte.
TEST(StridedViewTest, CrossLayerViewsAreDisjointAndAliasesAreRefused) {
  const PagedShape shape{
      .num_blocks = 4, .block_size = 16, .num_heads = 2, .head_size = 8, .elem_bytes = 2};
  constexpr int64_t kHead = 16, kLayers = 3, kLayerStep = 2 * 16 * 2 * kHead;
  const PagedStrides nhd{
      .plane = 16 * 2 * kHead, .block = kLayers * kLayerStep, .token = 2 * kHead, .head = kHead};
  std::vector<uint8_t> mem(4 * kLayers * kLayerStep);
  std::vector<void*> bases;
  for (int64_t l = 0; l < kLayers; ++l) bases.push_back(mem.data() + l * kLayerStep);
  EXPECT_TRUE(CheckStridedLayersDisjoint(shape, nhd, bases).ok());
  auto v = MakeStridedPagedKvView(shape, nhd, bases[1]);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->HeadAddress(1, 2, 3, 1),
            mem.data() + kLayerStep + nhd.plane + 2 * nhd.block + 3 * nhd.token + nhd.head);
  EXPECT_EQ(v->token_bytes(), 2u * 2 * kHead);

  // Two layers at one base, or closer than one layer's footprint: refused.
  std::vector<void*> same = {bases[0], bases[0], bases[2]};
  EXPECT_EQ(CheckStridedLayersDisjoint(shape, nhd, same).code(), StatusCode::kInvalidArgument);
  std::vector<void*> close = {bases[0], mem.data() + kLayerStep / 2, bases[2]};
  EXPECT_EQ(CheckStridedLayersDisjoint(shape, nhd, close).code(), StatusCode::kInvalidArgument);
  // A layer reaching into the next block stride of the lowest: refused.
  std::vector<void*> past = {bases[0], bases[1], mem.data() + kLayers * kLayerStep};
  EXPECT_EQ(CheckStridedLayersDisjoint(shape, nhd, past).code(), StatusCode::kInvalidArgument);
  // Separate allocations (each layer's range apart): accepted however the layers are placed.
  const PagedStrides sparse{.plane = 16 * 2 * kHead,
                            .block = 2 * kLayerStep,
                            .token = 2 * kHead,
                            .head = kHead};  // every other block of a larger allocation
  std::vector<uint8_t> big_a(8 * kLayerStep), big_b(8 * kLayerStep);
  std::vector<void*> sliced = {big_a.data(), big_b.data()};
  EXPECT_TRUE(CheckStridedLayersDisjoint(shape, sparse, sliced).ok());
  EXPECT_EQ(
      CheckStridedLayersDisjoint(shape, sparse, std::vector<void*>{big_a.data(), big_a.data()})
          .code(),
      StatusCode::kInvalidArgument);
  // A view whose own positions alias (block stride smaller than a block), a negative stride, a
  // null base.
  PagedStrides tight = nhd;
  tight.block = kLayerStep / 2;
  EXPECT_EQ(MakeStridedPagedKvView(shape, tight, bases[0]).status().code(),
            StatusCode::kInvalidArgument);
  PagedStrides negative = nhd;
  negative.head = -kHead;
  EXPECT_EQ(MakeStridedPagedKvView(shape, negative, bases[0]).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeStridedPagedKvView(shape, nhd, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv::kernels
