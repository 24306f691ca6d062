#include "rangekv/geometry.h"

#include <gtest/gtest.h>

namespace rangekv {
namespace {

TEST(GeometryTest, Llama8B) {
  auto g = DeriveGeometry(Llama31_8BSpec());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->token_bytes, 4096u);
  EXPECT_EQ(g->tokens_per_stripe, 8192u);
  EXPECT_EQ(g->pack_bytes, 1ull << 30);
  EXPECT_EQ(g->kv_heads_per_rank, 8u);
  EXPECT_EQ(g->half_token_bytes(), 2048u);
}

TEST(GeometryTest, Llama70BEightyLayers) {
  auto g = DeriveGeometry(Llama31_70BSpec());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->layers, 80u);
  EXPECT_EQ(g->token_bytes, 4096u);
  EXPECT_EQ(g->pack_bytes, 80ull * 32 * 1024 * 1024);
}

TEST(GeometryTest, TensorParallelSlices) {
  for (uint32_t tp : {2u, 4u, 8u}) {
    ModelSpec spec = Llama31_70BSpec();
    spec.tp_size = tp;
    spec.tp_rank = tp - 1;
    auto g = DeriveGeometry(spec);
    ASSERT_TRUE(g.ok()) << tp;
    EXPECT_EQ(g->kv_heads_per_rank, 8u / tp);
    EXPECT_EQ(g->token_bytes, 4096u / tp);
    EXPECT_EQ(g->tokens_per_stripe, (32ull << 20) / (4096u / tp));
  }
}

TEST(GeometryTest, ReplicatedHeadsWhenTpExceedsKvHeads) {
  ModelSpec spec = Llama31_8BSpec();
  spec.tp_size = 16;
  auto g = DeriveGeometry(spec);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kv_heads_per_rank, 1u);
  EXPECT_EQ(g->token_bytes, 512u);
}

TEST(GeometryTest, Mla) {
  auto g = DeriveGeometry(DeepSeekMlaSpec());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->is_mla());
  EXPECT_EQ(g->token_bytes, 1152u);
  EXPECT_EQ(g->tokens_per_stripe, (32ull << 20) / 1152);
  EXPECT_EQ(g->half_token_bytes(), 1152u);
}

TEST(GeometryTest, Fp8Kv) {
  ModelSpec spec = Llama31_8BSpec();
  spec.kv_dtype = "fp8_e4m3";
  spec.dtype_bytes = 1;
  auto g = DeriveGeometry(spec);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->token_bytes, 2048u);
  EXPECT_EQ(g->tokens_per_stripe, 16384u);
}

TEST(GeometryTest, RejectsNonsense) {
  auto expect_invalid = [](ModelSpec spec, uint64_t w = kDefaultStripeBytes) {
    auto g = DeriveGeometry(spec, w);
    EXPECT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
  };
  ModelSpec base = Llama31_8BSpec();
  ModelSpec s = base;
  s.layers = 0;
  expect_invalid(s);
  s = base;
  s.kv_heads = 0;
  expect_invalid(s);
  s = base;
  s.head_size = 0;
  expect_invalid(s);
  s = base;
  s.dtype_bytes = 0;
  expect_invalid(s);
  s = base;
  s.block_size = 0;
  expect_invalid(s);
  s = base;
  s.tp_size = 3;  // 8 heads over 3 ranks
  expect_invalid(s);
  s = base;
  s.tp_rank = 1;  // tp_size 1
  expect_invalid(s);
  expect_invalid(base, 4096 * 3 + 1);  // unaligned W
  s = base;
  s.head_size = 1u << 31;  // overflow of 2 x heads x head x dtype
  s.kv_heads = 1u << 31;
  expect_invalid(s);
}

TEST(GeometryTest, TokenBytesLargerThanStripeRejected) {
  ModelSpec s = Llama31_8BSpec();
  s.head_size = 4096;  // s = 2*8*4096*2 = 128 KiB > 64 KiB
  auto g = DeriveGeometry(s, 64 * 1024);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("exceed"), std::string::npos);
}

TEST(GeometryTest, BlockOpaqueLayoutRoundsTToWholeBlocks) {
  ModelSpec s = Llama31_8BSpec();
  s.kv_heads = 2;
  s.head_size = 80;  // s = 640 bytes, W/s = 52428.8
  EXPECT_EQ(DeriveGeometry(s)->tokens_per_stripe, 52428u);
  s.layout = KvCacheLayout::kPackedHnd;  // token-major: T unchanged
  EXPECT_EQ(DeriveGeometry(s)->tokens_per_stripe, 52428u);
  s.layout = KvCacheLayout::kCpuBlock;
  for (uint32_t b : {16u, 32u, 64u, 128u, 256u}) {
    s.block_size = b;
    auto g = DeriveGeometry(s);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->tokens_per_stripe % b, 0u) << b;
    EXPECT_EQ(g->tokens_per_stripe, 52428u / b * b) << b;
  }
  // A stripe must hold one whole block: 4 KiB of 640-byte tokens is 6 tokens < 16.
  s.block_size = 16;
  auto small = DeriveGeometry(s, 4096);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("cannot hold one block"), std::string::npos);
}

TEST(GeometryTest, LayoutMustAgreeWithMla) {
  ModelSpec mla = DeepSeekMlaSpec();
  EXPECT_EQ(mla.layout, KvCacheLayout::kMla);
  EXPECT_TRUE(DeriveGeometry(mla).ok());
  mla.layout = KvCacheLayout::kFlashAttnNhd;
  EXPECT_EQ(DeriveGeometry(mla).status().code(), StatusCode::kInvalidArgument);
  ModelSpec dense = Llama31_8BSpec();
  dense.layout = KvCacheLayout::kMla;
  EXPECT_EQ(DeriveGeometry(dense).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCacheLayoutName(KvCacheLayout::kCpuBlock), "cpu_block");
  EXPECT_EQ(KvCacheLayoutName(KvCacheLayout::kPackedNhd), "packed_nhd");
}

TEST(NamespaceTest, EveryIdentityFieldChangesTheNamespace) {
  ModelSpec base = Llama31_8BSpec();
  auto ns = [](const ModelSpec& s) { return DeriveNamespace(s, *DeriveGeometry(s)); };
  NamespaceId b = ns(base);
  EXPECT_EQ(b, ns(base));
  std::vector<ModelSpec> variants(11, base);
  variants[0].model_id += "x";
  variants[1].revision = "abc";
  variants[2].semantic_config = "rope=2";
  variants[3].kv_dtype = "fp16";
  variants[4].tp_size = 2;
  variants[5].tp_size = 2;
  variants[5].tp_rank = 1;
  variants[6].tags = {"lora:a"};
  variants[7].block_size = 32;
  variants[8].layout = KvCacheLayout::kFlashAttnHnd;
  variants[9].layout = KvCacheLayout::kPackedNhd;
  variants[10].layout = KvCacheLayout::kCpuBlock;  // same geometry here: T = 8192 already
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(ns(variants[i]), b) << i;
  }
  EXPECT_NE(ns(variants[4]), ns(variants[5]));
  EXPECT_NE(ns(variants[8]), ns(variants[9]));
  EXPECT_NE(ns(variants[9]), ns(variants[10]));
  EXPECT_EQ(*DeriveGeometry(variants[10]), *DeriveGeometry(base));
  EXPECT_EQ(b.ToHex().size(), 32u);
}

}  // namespace
}  // namespace rangekv
