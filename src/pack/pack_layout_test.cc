#include "pack/pack_layout.h"

#include <gtest/gtest.h>

#include "base/units.h"
#include "pack/format.h"

namespace rangekv {
namespace {

Geometry G(ModelSpec spec) {
  auto g = DeriveGeometry(spec);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

ModelSpec Tp8() {
  ModelSpec s = Llama31_8BSpec();
  s.tp_size = 8;
  s.tp_rank = 3;
  return s;
}

ModelSpec Fp8() {
  ModelSpec s = Llama31_8BSpec();
  s.kv_dtype = "fp8";
  s.dtype_bytes = 1;
  return s;
}

TEST(PackGeometry, AcceptsDerivedGeometries) {
  for (const ModelSpec& spec :
       {Llama31_8BSpec(), Llama31_70BSpec(), DeepSeekMlaSpec(), Tp8(), Fp8()}) {
    EXPECT_TRUE(ValidatePackGeometry(G(spec)).ok()) << spec.model_id;
  }
  EXPECT_EQ(G(Tp8()).token_bytes, 512u);
  EXPECT_EQ(G(DeepSeekMlaSpec()).token_bytes, 1152u);
}

// kCpuBlock's T is W/s rounded down to whole blocks; any other T stays invalid.
TEST(PackGeometry, AcceptsTRoundedDownToWholeBlocksOnly) {
  ModelSpec spec = Llama31_8BSpec();
  spec.kv_heads = 2;
  spec.head_size = 80;  // s = 640: W/s = 52428.8
  spec.block_size = 32;
  spec.layout = KvCacheLayout::kCpuBlock;
  const Geometry g = G(spec);
  EXPECT_EQ(g.tokens_per_stripe, 52416u);  // 52428 rounded down to a multiple of 32
  EXPECT_TRUE(ValidatePackGeometry(g).ok());
  Geometry full = g;
  full.tokens_per_stripe = 52428;  // the token-major layouts' T
  EXPECT_TRUE(ValidatePackGeometry(full).ok());
  for (uint64_t t : {52415u, 52417u, 52384u, 0u}) {
    Geometry bad = g;
    bad.tokens_per_stripe = t;
    EXPECT_EQ(ValidatePackGeometry(bad).code(), StatusCode::kInvalidArgument) << t;
  }
}

TEST(PackGeometry, RejectsInconsistentGeometry) {
  const Geometry good = G(Llama31_8BSpec());
  auto bad = [&](auto mutate) {
    Geometry g = good;
    mutate(g);
    return ValidatePackGeometry(g).code();
  };
  EXPECT_EQ(bad([](Geometry& g) { g.token_bytes = 2048; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.tokens_per_stripe += 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.pack_bytes -= 4096; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.stripe_bytes += 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.layers = pack_format::kMaxLayers + 1; }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.block_size = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.mla_latent_size = 576; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) { g.head_size = 0xffffffff; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](Geometry& g) {
              g.stripe_bytes = 2 * kGiB;
              g.tokens_per_stripe = g.stripe_bytes / g.token_bytes;
              g.pack_bytes = g.stripe_bytes * g.layers;
            }),
            StatusCode::kInvalidArgument);
}

TEST(PackLayout, MakeBoundsEverything) {
  const Geometry g = G(Llama31_8BSpec());
  EXPECT_TRUE(PackLayout::Make(g, 16, 2 * kMiB).ok());
  EXPECT_TRUE(PackLayout::Make(g, 1, 4096).ok());
  EXPECT_EQ(PackLayout::Make(g, 0, 2 * kMiB).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Make(g, pack_format::kMaxPackCount + 1, 2 * kMiB).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Make(g, 16, 4096 + 512).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Make(g, 16, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Make(g, 16, pack_format::kMaxDataOffset + 4096).status().code(),
            StatusCode::kInvalidArgument);
  // 2^20 packs of 1 GiB = 1 PiB fits under kMaxFileBytes; 2^20 packs of 80 GiB does not.
  EXPECT_TRUE(PackLayout::Make(g, pack_format::kMaxPackCount, 2 * kMiB).ok());
  Geometry huge = G(Llama31_70BSpec());
  huge.stripe_bytes = kGiB;
  huge.tokens_per_stripe = kGiB / huge.token_bytes;
  huge.pack_bytes = 80 * kGiB;
  EXPECT_EQ(PackLayout::Make(huge, pack_format::kMaxPackCount, 2 * kMiB).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PackLayout, AddressIsBasePlusLayerStripesPlusTokenBytes) {
  const Geometry g = G(Llama31_8BSpec());  // s = 4096, W = 32 MiB, T = 8192, 1 GiB packs
  auto layout = PackLayout::Make(g, 16, 2 * kMiB);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->capacity_bytes(), 16 * kGiB);
  EXPECT_EQ(layout->file_bytes(), 2 * kMiB + 16 * kGiB);
  EXPECT_EQ(layout->Address(0, 0, 0), 2 * kMiB);
  EXPECT_EQ(layout->Address(5, 0, 0), 2 * kMiB + 5 * kGiB);
  EXPECT_EQ(layout->Address(5, 3, 7), 2 * kMiB + 5 * kGiB + 3 * 32 * kMiB + 7 * 4096);
  // One past the last token of the last layer of the last slot is the file end.
  EXPECT_EQ(layout->Address(15, 31, 8192), layout->file_bytes());
  auto loc = layout->Locate(5);
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->file_index, 0u);
  EXPECT_EQ(loc->slot_offset, layout->Address(5, 0, 0));
  EXPECT_EQ(layout->Locate(16).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(layout->Locate(~uint64_t{0}).status().code(), StatusCode::kOutOfRange);
}

TEST(PackLayout, EveryStripeStartsAligned) {
  for (const ModelSpec& spec : {Llama31_8BSpec(), DeepSeekMlaSpec(), Tp8()}) {
    const Geometry g = G(spec);
    for (uint64_t data_offset : {uint64_t{4096}, 2 * kMiB}) {
      auto layout = PackLayout::Make(g, 3, data_offset);
      ASSERT_TRUE(layout.ok());
      for (uint64_t slot = 0; slot < 3; ++slot) {
        for (uint32_t l = 0; l < g.layers; ++l) {
          ASSERT_TRUE(IsAligned(layout->Address(slot, l, 0), kIoAlignment));
        }
      }
    }
  }
}

#ifndef NDEBUG
TEST(PackLayoutDeathTest, AddressChecksBoundsInDebug) {
  auto layout = PackLayout::Make(G(Llama31_8BSpec()), 2, 2 * kMiB);
  ASSERT_TRUE(layout.ok());
  EXPECT_DEATH(static_cast<void>(layout->Address(2, 0, 0)), "RANGEKV_CHECK");
  EXPECT_DEATH(static_cast<void>(layout->Address(0, 32, 0)), "RANGEKV_CHECK");
  EXPECT_DEATH(static_cast<void>(layout->Address(0, 0, 8193)), "RANGEKV_CHECK");
}
#endif

}  // namespace
}  // namespace rangekv
