#include "tools/bench/baseline/object_naming.h"

#include <gtest/gtest.h>

#include <set>

namespace rangekv::baseline {
namespace {

Geometry Llama8B() {
  Result<Geometry> g = DeriveGeometry(Llama31_8BSpec());
  EXPECT_TRUE(g.ok());
  return *g;
}

TEST(ObjectNamingTest, PaperPointsAtFullPayloadKeepTheirCounts) {
  const Geometry g = Llama8B();
  struct Case {
    ObjectShape shape;
    uint64_t nominal;
    uint32_t chunks;
    uint64_t chunk_tokens;
  } cases[] = {
      {ObjectShape::kChunk, 192, 192, 256},       {ObjectShape::kChunk, 768, 768, 64},
      {ObjectShape::kChunk, 3072, 3072, 16},      {ObjectShape::kChunk, 6144, 6144, 8},
      {ObjectShape::kChunkLayer, 6144, 192, 256},
  };
  for (const Case& c : cases) {
    Result<SweepPoint> p = MakeSweepPoint(g, c.shape, c.nominal, kPaperPrefixTokens);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_FALSE(p->scaled);
    EXPECT_EQ(p->naming.count(), c.nominal);
    EXPECT_EQ(p->naming.chunks, c.chunks);
    EXPECT_TRUE(p->naming.even());
    EXPECT_EQ(p->naming.max_chunk_tokens(), c.chunk_tokens);
  }
}

TEST(ObjectNamingTest, TensorParallelNamingCutsTheRankIntoHeadSlices) {
  const Geometry g = Llama8B();
  Result<SweepPoint> p =
      MakeSweepPoint(g, ObjectShape::kChunkLayerSlice, 327680, kPaperPrefixTokens);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->scaled);
  EXPECT_EQ(p->naming.count(), 327680u);
  EXPECT_EQ(p->naming.slices, 8u);
  EXPECT_EQ(p->naming.chunks, 1280u);
  EXPECT_EQ(p->naming.min_chunk_tokens(), 38u);
  EXPECT_EQ(p->naming.max_chunk_tokens(), 39u);
  EXPECT_EQ(p->label, "327680-TP");
  // Every byte of the payload belongs to exactly one object.
  uint64_t total = 0;
  for (uint64_t i = 0; i < p->naming.count(); ++i)
    total += p->naming.ObjectBytes(p->naming.Object(i));
  EXPECT_EQ(total, kPaperPrefixTokens * g.layers * g.token_bytes);
}

TEST(ObjectNamingTest, SmallPayloadScalesObjectsSmallerThanATokenLayer) {
  const Geometry g = Llama8B();
  // 768 MiB: 6,144 tokens. Plain 6,144 objects are one token each: kept.
  Result<SweepPoint> plain = MakeSweepPoint(g, ObjectShape::kChunk, 6144, 6144);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->scaled);
  EXPECT_EQ(plain->naming.count(), 6144u);
  // 327,680 pieces of 768 MiB would be 2.4 KiB < s: scaled by 6144/49152 to 40,960.
  Result<SweepPoint> tp = MakeSweepPoint(g, ObjectShape::kChunkLayerSlice, 327680, 6144);
  ASSERT_TRUE(tp.ok());
  EXPECT_TRUE(tp->scaled);
  EXPECT_EQ(tp->nominal_objects, 327680u);
  EXPECT_EQ(tp->naming.count(), 40960u);
  EXPECT_GE(tp->naming.mean_object_bytes(), static_cast<double>(g.token_bytes));
  // 2,048 tokens cannot hold 6,144 whole-token chunks: scaled to 256.
  Result<SweepPoint> tiny = MakeSweepPoint(g, ObjectShape::kChunk, 6144, 2048);
  ASSERT_TRUE(tiny.ok());
  EXPECT_TRUE(tiny->scaled);
  EXPECT_EQ(tiny->naming.count(), 256u);
}

TEST(ObjectNamingTest, ObjectsTileTheRangeInLayerMajorOrder) {
  const Geometry g = Llama8B();
  Result<ObjectNaming> n = MakeObjectNaming(g, ObjectShape::kChunkLayerSlice, 100, 10, 3, 2);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->count(), 3u * 32 * 2);
  EXPECT_EQ(n->ChunkBegin(0), 100u);
  EXPECT_EQ(n->ChunkEnd(0), 104u);  // 10 = 4 + 3 + 3
  EXPECT_EQ(n->ChunkEnd(1), 107u);
  EXPECT_EQ(n->ChunkEnd(2), 110u);
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
  uint32_t last_layer = 0;
  for (uint64_t i = 0; i < n->count(); ++i) {
    const LogicalObject o = n->Object(i);
    EXPECT_GE(o.layer_begin, last_layer);
    last_layer = o.layer_begin;
    EXPECT_EQ(o.layers(), 1u);
    EXPECT_EQ(o.heads(), 4u);
    EXPECT_TRUE(seen.insert({o.chunk, o.layer_begin, o.slice}).second);
  }
  EXPECT_EQ(seen.size(), n->count());
}

TEST(ObjectNamingTest, SuffixKeepsTheObjectSize) {
  const Geometry g = Llama8B();
  Result<SweepPoint> p192 = MakeSweepPoint(g, ObjectShape::kChunk, 192, kPaperPrefixTokens);
  Result<SweepPoint> p6144 = MakeSweepPoint(g, ObjectShape::kChunk, 6144, kPaperPrefixTokens);
  Result<SweepPoint> lw = MakeSweepPoint(g, ObjectShape::kChunkLayer, 6144, kPaperPrefixTokens);
  ASSERT_TRUE(p192.ok() && p6144.ok() && lw.ok());
  // Table 2: the 16,128-token suffix is 63 objects at 192 and 2,016 at 6,144.
  Result<ObjectNaming> s = RenameRange(g, *p192, kPaperPrefixTokens, kPaperSuffixTokens);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->count(), 63u);
  EXPECT_EQ(s->first_token, kPaperPrefixTokens);
  s = RenameRange(g, *p6144, kPaperPrefixTokens, kPaperSuffixTokens);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->count(), 2016u);
  s = RenameRange(g, *lw, kPaperPrefixTokens, kPaperSuffixTokens);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->count(), 63u * 32);
}

TEST(ObjectNamingTest, RejectsImpossibleNamings) {
  const Geometry g = Llama8B();
  EXPECT_FALSE(MakeObjectNaming(g, ObjectShape::kChunk, 0, 0, 1).ok());
  EXPECT_FALSE(MakeObjectNaming(g, ObjectShape::kChunk, 0, 4, 5).ok());
  EXPECT_FALSE(MakeObjectNaming(g, ObjectShape::kChunk, 0, 4, 2, 2).ok());
  EXPECT_FALSE(MakeObjectNaming(g, ObjectShape::kChunkLayerSlice, 0, 4, 2, 3).ok());
  EXPECT_FALSE(MakeSweepPoint(g, ObjectShape::kChunkLayer, 100, 49152).ok());
}

}  // namespace
}  // namespace rangekv::baseline
