#include "persist/payload_digests.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/span_digest.h"

namespace rangekv::persist {
namespace {

// L=3 layers, T=100 tokens per pack, s=24 bytes per token, blocks of 16 tokens.
DigestGeometry SmallGeometry() {
  Result<DigestGeometry> g = DigestGeometry::Make(3, 100, 24, 16);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

std::vector<uint8_t> Stripe(uint64_t tokens, uint64_t token_bytes, uint8_t salt) {
  std::vector<uint8_t> v(tokens * token_bytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + salt);
  return v;
}

TEST(DigestGeometryTest, DefaultBlockIsAboutOneMebibyteOfWholeTokens) {
  Geometry g;
  g.layers = 32;
  g.token_bytes = 4096;
  g.tokens_per_stripe = 8192;
  EXPECT_EQ(DigestGeometry::DefaultBlockTokens(g), 256u);
  g.token_bytes = 1152;  // MLA
  g.tokens_per_stripe = 29127;
  EXPECT_EQ(DigestGeometry::DefaultBlockTokens(g), 910u);
  g.token_bytes = 4096;
  g.tokens_per_stripe = 100;  // tiny stripes: one block per stripe
  EXPECT_EQ(DigestGeometry::DefaultBlockTokens(g), 100u);
  g.token_bytes = 4 * kMiB;  // huge tokens: one token per block
  EXPECT_EQ(DigestGeometry::DefaultBlockTokens(g), 1u);
}

TEST(DigestGeometryTest, RejectsNonsense) {
  EXPECT_FALSE(DigestGeometry::Make(0, 100, 24, 16).ok());
  EXPECT_FALSE(DigestGeometry::Make(3, 0, 24, 16).ok());
  EXPECT_FALSE(DigestGeometry::Make(3, 100, 0, 16).ok());
  EXPECT_FALSE(DigestGeometry::Make(3, 100, 24, 0).ok());
  EXPECT_FALSE(DigestGeometry::Make(3, 100, 24, 101).ok());
  EXPECT_FALSE(DigestGeometry::Make(3, 100, UINT64_MAX / 2, 16).ok());
}

TEST(DigestGeometryTest, BlocksTileTheStoredExtent) {
  const DigestGeometry g = SmallGeometry();
  EXPECT_EQ(g.BlocksFor(100), 7u);
  EXPECT_EQ(g.BlocksFor(16), 1u);
  EXPECT_EQ(g.BlocksFor(17), 2u);
  EXPECT_EQ(g.BlockTokens(6, 100), (TokenRange{96, 100}));
  EXPECT_EQ(g.BlockTokens(1, 20), (TokenRange{16, 20}));
  EXPECT_EQ(g.BlockOffsetBytes(2), 2u * 16 * 24);
  EXPECT_EQ(g.BlockBytes(1, 20), 4u * 24);
}

TEST(PayloadDigestTest, BlockDigestIsTheChecksumKernelsFunction) {
  const std::vector<uint8_t> bytes = Stripe(10, 24, 3);
  EXPECT_EQ(BlockDigest(bytes.data(), bytes.size()),
            kernels::SpanDigest(bytes.data(), bytes.size(), kPayloadDigestSeed));
}

TEST(PayloadDigestTest, ComputeLayerDigestsChecksSizes) {
  const DigestGeometry g = SmallGeometry();
  const std::vector<uint8_t> s = Stripe(40, 24, 1);
  std::vector<uint64_t> out(3);
  ASSERT_TRUE(ComputeLayerDigests(g, s.data(), 40, out).ok());
  EXPECT_EQ(out[2], BlockDigest(s.data() + 32 * 24, 8 * 24));
  std::vector<uint64_t> wrong(2);
  EXPECT_EQ(ComputeLayerDigests(g, s.data(), 40, wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeLayerDigests(g, s.data(), 0, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeLayerDigests(g, s.data(), 101, out).code(), StatusCode::kInvalidArgument);
}

class DigestTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<DigestTable>> t = DigestTable::Create(SmallGeometry(), 4);
    ASSERT_TRUE(t.ok());
    table_ = std::move(*t);
  }
  // Records a pack of `stored` tokens at (slot, generation); returns the layers' stripes.
  std::vector<std::vector<uint8_t>> StorePack(uint32_t slot, uint64_t generation, uint64_t stored) {
    const DigestGeometry& g = table_->geometry();
    std::vector<std::vector<uint8_t>> stripes;
    EXPECT_TRUE(table_->Begin(slot, generation, stored).ok());
    for (uint32_t l = 0; l < g.layers(); ++l) {
      stripes.push_back(Stripe(stored, g.token_bytes(), static_cast<uint8_t>(slot * 16 + l)));
      std::vector<uint64_t> d(g.BlocksFor(stored));
      EXPECT_TRUE(ComputeLayerDigests(g, stripes.back().data(), stored, d).ok());
      EXPECT_TRUE(table_->RecordLayer(slot, generation, l, d).ok());
    }
    return stripes;
  }
  // Verifies a restore of pack tokens [a, b) of `layer` from `stripe` (the layer's bytes).
  Status VerifyRange(uint32_t slot, uint64_t generation, uint32_t layer,
                     const std::vector<uint8_t>& stripe, uint64_t a, uint64_t b) {
    RANGEKV_ASSIGN_OR_RETURN(VerifyPlan plan, table_->PlanVerify(slot, generation, a, b));
    const uint64_t s = table_->geometry().token_bytes();
    return table_->VerifyHostBytes(slot, generation, layer, plan,
                                   stripe.data() + plan.extent.begin * s, plan.extent.size() * s);
  }
  std::unique_ptr<DigestTable> table_;
};

TEST_F(DigestTableTest, CreateBoundsMemory) {
  Result<DigestGeometry> g = DigestGeometry::Make(4096, 1u << 30, 1, 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(DigestTable::Create(*g, 1024).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DigestTable::Create(SmallGeometry(), 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DigestTableTest, RecordedPackVerifiesWholeAndPartialRanges) {
  const auto stripes = StorePack(1, 5, 90);
  ASSERT_TRUE(table_->CheckComplete(1, 5).ok());
  EXPECT_TRUE(VerifyRange(1, 5, 0, stripes[0], 0, 90).ok());
  // A restore ending mid-block reads up to the block end (clipped at the stored extent).
  Result<VerifyPlan> plan = table_->PlanVerify(1, 5, 20, 35);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->first_block, 1u);
  EXPECT_EQ(plan->block_count, 2u);
  EXPECT_EQ(plan->extent, (TokenRange{16, 48}));
  plan = table_->PlanVerify(1, 5, 85, 90);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->extent, (TokenRange{80, 90}));
  for (uint32_t l = 0; l < 3; ++l) {
    EXPECT_TRUE(VerifyRange(1, 5, l, stripes[l], 20, 35).ok());
    EXPECT_TRUE(VerifyRange(1, 5, l, stripes[l], 89, 90).ok());
    EXPECT_TRUE(VerifyRange(1, 5, l, stripes[l], 0, 1).ok());
  }
}

TEST_F(DigestTableTest, FlippedByteIsDetectedAndNamed) {
  auto stripes = StorePack(2, 9, 100);
  stripes[1][50 * 24 + 3] ^= 0x01;  // token 50 of layer 1 (block 3: tokens [48, 64))
  const Status st = VerifyRange(2, 9, 1, stripes[1], 40, 60);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("pack slot 2 generation 9 layer 1 pack tokens [48, 64)"),
            std::string::npos)
      << st.message();
  // Other layers and other blocks of the same layer still verify.
  EXPECT_TRUE(VerifyRange(2, 9, 0, stripes[0], 40, 60).ok());
  EXPECT_TRUE(VerifyRange(2, 9, 1, stripes[1], 0, 48).ok());
  // Bytes of another layer (misdirected read) do not pass for this one.
  EXPECT_EQ(VerifyRange(2, 9, 2, stripes[0], 0, 16).code(), StatusCode::kCorruption);
}

TEST_F(DigestTableTest, CompareTakesDeviceComputedDigests) {
  const auto stripes = StorePack(0, 1, 64);
  const DigestGeometry& g = table_->geometry();
  std::vector<uint64_t> d(4);
  ASSERT_TRUE(ComputeLayerDigests(g, stripes[2].data(), 64, d).ok());
  EXPECT_TRUE(table_->Compare(0, 1, 2, 1, std::span(d).subspan(1, 2)).ok());
  EXPECT_EQ(table_->Compare(0, 1, 2, 0, std::span(d).subspan(1, 2)).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(table_->Compare(0, 1, 2, 3, d).code(), StatusCode::kOutOfRange);
}

TEST_F(DigestTableTest, StripeBufferHelpersMatchTheBlockApi) {
  const DigestGeometry& g = table_->geometry();
  const std::vector<uint8_t> stripe = Stripe(70, g.token_bytes(), 9);
  for (uint32_t l = 0; l < g.layers(); ++l) {
    ASSERT_TRUE(table_->RecordStripeBytes(1, 3, l, 70, stripe.data()).ok());
  }
  ASSERT_TRUE(table_->CheckComplete(1, 3).ok());
  std::vector<uint64_t> expect(5);
  ASSERT_TRUE(ComputeLayerDigests(g, stripe.data(), 70, expect).ok());
  EXPECT_EQ(table_->Get(1, 3)->digests[5], expect[0]);  // layer 1, block 0
  // A read of the whole stored extent covers blocks 1..3 of tokens [20, 50) whole.
  const uint64_t s = g.token_bytes();
  EXPECT_TRUE(table_->VerifyStripeBytes(1, 3, 2, 20, 50, 0, stripe.data(), 70 * s).ok());
  // A buffer starting inside block 1 cannot verify it.
  const Status partial =
      table_->VerifyStripeBytes(1, 3, 2, 20, 50, 17 * s, stripe.data() + 17 * s, 53 * s);
  EXPECT_EQ(partial.code(), StatusCode::kOutOfRange) << partial.ToString();
  // Exactly the verify extent works; a flipped byte inside it is corruption.
  std::vector<uint8_t> copy(stripe.begin() + 16 * s, stripe.begin() + 64 * s);
  EXPECT_TRUE(table_->VerifyStripeBytes(1, 3, 0, 20, 50, 16 * s, copy.data(), copy.size()).ok());
  copy[40 * s - 16 * s] ^= 1;  // token 40: block 2
  const Status bad = table_->VerifyStripeBytes(1, 3, 0, 20, 50, 16 * s, copy.data(), copy.size());
  EXPECT_EQ(bad.code(), StatusCode::kCorruption);
  EXPECT_NE(bad.message().find("layer 0 pack tokens [32, 48)"), std::string::npos);
  EXPECT_EQ(table_->RecordStripeBytes(1, 2, 0, 70, stripe.data()).code(),
            StatusCode::kStaleGeneration);
}

TEST_F(DigestTableTest, GenerationsGuardEveryLookup) {
  StorePack(3, 4, 30);
  EXPECT_EQ(table_->PlanVerify(3, 3, 0, 10).status().code(), StatusCode::kStaleGeneration);
  EXPECT_EQ(table_->PlanVerify(3, 5, 0, 10).status().code(), StatusCode::kStaleGeneration);
  EXPECT_EQ(table_->PlanVerify(3, 4, 0, 31).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(table_->PlanVerify(3, 4, 10, 10).status().code(), StatusCode::kOutOfRange);
  // An older generation cannot be begun over a newer one; a newer one replaces it.
  EXPECT_EQ(table_->Begin(3, 3, 30).code(), StatusCode::kStaleGeneration);
  ASSERT_TRUE(table_->Begin(3, 6, 20).ok());
  EXPECT_EQ(table_->PlanVerify(3, 4, 0, 10).status().code(), StatusCode::kStaleGeneration);
  EXPECT_EQ(table_->RecordLayer(3, 4, 0, std::vector<uint64_t>(2)).code(),
            StatusCode::kStaleGeneration);
}

TEST_F(DigestTableTest, IncompletePacksAreNotVerifiable) {
  ASSERT_TRUE(table_->Begin(1, 2, 40).ok());
  ASSERT_TRUE(table_->RecordLayer(1, 2, 0, std::vector<uint64_t>(3, 7)).ok());
  const Status st = table_->CheckComplete(1, 2);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("lacks layer 1"), std::string::npos) << st.message();
  EXPECT_EQ(table_->PlanVerify(1, 2, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->RecordLayer(1, 2, 1, std::vector<uint64_t>(2)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->RecordLayer(1, 2, 3, std::vector<uint64_t>(3)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Begin(1, 2, 41).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_->Begin(1, 2, 40).ok());  // idempotent
}

TEST_F(DigestTableTest, DropForgetsOnlyThatGeneration) {
  StorePack(0, 3, 16);
  table_->Drop(0, 2);
  EXPECT_TRUE(table_->CheckComplete(0, 3).ok());
  table_->Drop(0, 3);
  EXPECT_EQ(table_->PlanVerify(0, 3, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table_->Begin(0, 2, 16).code(), StatusCode::kStaleGeneration);
}

TEST_F(DigestTableTest, ExportImportRoundTrip) {
  StorePack(2, 11, 77);
  Result<PackDigests> d = table_->Get(2, 11);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->blocks_per_layer, 5u);
  EXPECT_EQ(d->digests.size(), 15u);
  Result<std::unique_ptr<DigestTable>> other = DigestTable::Create(SmallGeometry(), 4);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Import(*d).ok());
  Result<PackDigests> back = (*other)->Get(2, 11);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *d);
  PackDigests bad = *d;
  bad.blocks_per_layer = 4;
  EXPECT_EQ((*other)->Import(bad).code(), StatusCode::kInvalidArgument);
  bad = *d;
  bad.layers = 2;
  EXPECT_EQ((*other)->Import(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv::persist
