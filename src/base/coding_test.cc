// base/coding.h: little-endian bytes whatever the host, patches, and a reader that never reads
// past its span (a short read fails, leaves the value unchanged and sticks).
#include "base/coding.h"

#include <gtest/gtest.h>

#include <vector>

namespace rangekv::coding {
namespace {

TEST(CodingTest, WriterIsLittleEndianAndPatches) {
  ByteWriter w;
  w.U8(0x01);
  w.U16(0x0302);
  w.U32(0x07060504);
  w.U64(0x0f0e0d0c0b0a0908ull);
  w.PatchU32(1, 0xaabbccdd);
  const std::vector<uint8_t> want = {0x01, 0xdd, 0xcc, 0xbb, 0xaa, 0x06, 0x07, 0x08,
                                     0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
  EXPECT_EQ(w.bytes(), want);
  EXPECT_EQ(LoadU64(w.bytes().data() + 7), 0x0f0e0d0c0b0a0908ull);
  EXPECT_EQ(LoadU16(w.bytes().data() + 1), 0xccddu);
}

TEST(CodingTest, ReaderStopsAtTheEnd) {
  const std::vector<uint8_t> bytes = {1, 0, 0, 0, 2, 0};
  ByteReader r(bytes);
  uint32_t a = 0;
  uint32_t b = 99;
  ASSERT_TRUE(r.U32(&a));
  EXPECT_EQ(a, 1u);
  EXPECT_FALSE(r.U32(&b));
  EXPECT_EQ(b, 99u);  // unchanged
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.remaining(), 2u);
  uint16_t c = 0;
  ASSERT_TRUE(r.U16(&c));
  EXPECT_EQ(c, 2u);
  std::span<const uint8_t> v;
  EXPECT_FALSE(r.View(1, &v));
  EXPECT_FALSE(r.Skip(1));
}

TEST(CodingTest, GeometryRoundTripsInFiftySixBytes) {
  Geometry g;
  g.layers = 32;
  g.kv_heads_per_rank = 1;
  g.head_size = 128;
  g.mla_latent_size = 0;
  g.dtype_bytes = 2;
  g.block_size = 16;
  g.token_bytes = 512;
  g.stripe_bytes = 64ull << 20;
  g.tokens_per_stripe = 131072;
  g.pack_bytes = 2ull << 30;
  ByteWriter w;
  PutGeometry(w, g);
  ASSERT_EQ(w.size(), 56u);
  EXPECT_EQ(LoadU32(w.bytes().data()), 32u);                // layers first
  EXPECT_EQ(LoadU64(w.bytes().data() + 48), g.pack_bytes);  // pack_bytes last
  Geometry back;
  ByteReader r(w.bytes());
  ASSERT_TRUE(GetGeometry(r, &back));
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(back.layers, g.layers);
  EXPECT_EQ(back.head_size, g.head_size);
  EXPECT_EQ(back.token_bytes, g.token_bytes);
  EXPECT_EQ(back.stripe_bytes, g.stripe_bytes);
  EXPECT_EQ(back.tokens_per_stripe, g.tokens_per_stripe);
  EXPECT_EQ(back.pack_bytes, g.pack_bytes);
  // One byte short: false, and the reader says so.
  ByteReader shorter(std::span(w.bytes()).first(55));
  EXPECT_FALSE(GetGeometry(shorter, &back));
  EXPECT_FALSE(shorter.ok());
}

}  // namespace
}  // namespace rangekv::coding
