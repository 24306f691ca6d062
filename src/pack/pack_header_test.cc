#include "pack/pack_header.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "base/digest.h"
#include "pack/pack_layout.h"

namespace rangekv {
namespace {

using pack_format::kHeaderPageBytes;
using Page = std::array<uint8_t, kHeaderPageBytes>;

PackHeader SampleHeader() {
  PackHeader h;
  h.store_uuid = StoreUuid{0x1122334455667788ull, 0x99aabbccddeeff00ull};
  h.geometry = *DeriveGeometry(Llama31_8BSpec());
  h.namespace_id = DeriveNamespace(Llama31_8BSpec(), h.geometry);
  h.pack_count = 16;
  h.creation_time_unix_ns = 1'700'000'000'123'456'789ull;
  return h;
}

Page Encode(const PackHeader& h) {
  Page p{};
  EncodePackHeader(h, p);
  return p;
}

uint64_t LoadLe64(const Page& p, uint32_t offset) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[offset + i];
  return v;
}

Result<PackHeader> Decode(const Page& p, size_t size = kHeaderPageBytes) {
  return DecodePackHeader(std::span<const uint8_t>(p.data(), size));
}

TEST(PackHeader, RoundTrip) {
  const PackHeader h = SampleHeader();
  auto d = Decode(Encode(h));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, h);
  // A longer buffer (e.g. a read of more than one page) decodes the same.
  std::vector<uint8_t> longer(2 * kHeaderPageBytes, 0xee);
  Page p = Encode(h);
  std::memcpy(longer.data(), p.data(), p.size());
  auto d2 = DecodePackHeader(longer);
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(*d2, h);
}

// The byte positions are the documented format (docs/pack-format.md): pin a few of them so a
// change to the code without a change to the document fails here.
TEST(PackHeader, GoldenOffsetsAreLittleEndian) {
  const PackHeader h = SampleHeader();
  const Page p = Encode(h);
  EXPECT_EQ(std::memcmp(p.data(), "RANGEKVP", 8), 0);
  EXPECT_EQ(p[8], 1);  // version 1, little-endian u32
  EXPECT_EQ(p[9] | p[10] | p[11], 0);
  EXPECT_EQ(p[12], 0x00);  // header bytes 4096 = 0x1000
  EXPECT_EQ(p[13], 0x10);
  EXPECT_EQ(LoadLe64(p, 16), h.store_uuid.lo);
  EXPECT_EQ(LoadLe64(p, 24), h.store_uuid.hi);
  EXPECT_EQ(p[32], 32);                     // layers
  EXPECT_EQ(LoadLe64(p, 56), 4096u);        // s
  EXPECT_EQ(LoadLe64(p, 64), 32ull << 20);  // W
  EXPECT_EQ(LoadLe64(p, 72), 8192u);        // T
  EXPECT_EQ(LoadLe64(p, 80), 1ull << 30);   // pack bytes
  EXPECT_EQ(LoadLe64(p, 88), h.namespace_id.lo);
  EXPECT_EQ(LoadLe64(p, 104), 16u);         // N
  EXPECT_EQ(LoadLe64(p, 112), 2ull << 20);  // data offset
  EXPECT_EQ(LoadLe64(p, 120), h.creation_time_unix_ns);
  EXPECT_EQ(LoadLe64(p, 128), Hash64(p.data(), 128, 0));  // checksum over [0, 128)
  for (size_t i = 136; i < kHeaderPageBytes; ++i) ASSERT_EQ(p[i], 0) << i;
}

TEST(PackHeader, NotAPackFile) {
  Page p = Encode(SampleHeader());
  p[3] ^= 0x20;
  EXPECT_EQ(Decode(p).status().code(), StatusCode::kInvalidArgument);
  // Too short to even hold the magic; an empty file.
  Page good = Encode(SampleHeader());
  EXPECT_EQ(Decode(good, 7).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(good, 0).status().code(), StatusCode::kInvalidArgument);
  Page zeros{};
  EXPECT_EQ(Decode(zeros).status().code(), StatusCode::kInvalidArgument);
}

TEST(PackHeader, WrongVersionIsCheckedBeforeTheChecksum) {
  PackHeader h = SampleHeader();
  h.format_version = 2;
  EXPECT_EQ(Decode(Encode(h)).status().code(), StatusCode::kWrongVersion);
  // A future version may lay its checksum out differently: still "wrong version".
  Page p = Encode(SampleHeader());
  p[8] = 7;
  EXPECT_EQ(Decode(p).status().code(), StatusCode::kWrongVersion);
}

TEST(PackHeader, ShortPageIsTruncated) {
  const Page p = Encode(SampleHeader());
  EXPECT_EQ(Decode(p, 200).status().code(), StatusCode::kTruncated);
  EXPECT_EQ(Decode(p, kHeaderPageBytes - 1).status().code(), StatusCode::kTruncated);
  EXPECT_EQ(Decode(p, 10).status().code(), StatusCode::kTruncated);
}

TEST(PackHeader, EveryCoveredByteIsProtectedByTheChecksum) {
  const Page good = Encode(SampleHeader());
  // Past magic and version (which have their own errors), every bit flip is corruption.
  for (uint32_t i = 12; i < 136; ++i) {
    Page p = good;
    p[i] ^= 0x01;
    EXPECT_EQ(Decode(p).status().code(), StatusCode::kCorruption) << "byte " << i;
  }
  // The reserved tail is not interpreted.
  Page p = good;
  p[4000] = 0x5a;
  EXPECT_TRUE(Decode(p).ok());
}

// Fields with a valid checksum but impossible values are corruption too, and nothing is sized
// from them.
TEST(PackHeader, ImpossibleFieldsAreCorruption) {
  auto expect_corrupt = [](PackHeader h, const char* what) {
    auto d = Decode(Encode(h));
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << what << ": " << d.status().ToString();
  };
  PackHeader h = SampleHeader();
  h.pack_count = 0;
  expect_corrupt(h, "zero packs");
  h.pack_count = pack_format::kMaxPackCount + 1;
  expect_corrupt(h, "absurd pack count");
  h.pack_count = ~uint64_t{0};
  expect_corrupt(h, "u64 max pack count");
  h = SampleHeader();
  h.pack_count = pack_format::kMaxPackCount;  // within the count bound but 1 PiB of packs
  h.geometry = *DeriveGeometry(Llama31_70BSpec());
  h.geometry.stripe_bytes = 1ull << 30;
  h.geometry.tokens_per_stripe = (1ull << 30) / 4096;
  h.geometry.pack_bytes = 80ull << 30;
  expect_corrupt(h, "file size beyond kMaxFileBytes");
  h = SampleHeader();
  h.data_offset = 4096 + 512;
  expect_corrupt(h, "misaligned data offset");
  h.data_offset = 0;
  expect_corrupt(h, "data offset inside the header");
  h.data_offset = ~uint64_t{0} - 4095;
  expect_corrupt(h, "data offset overflow");
  h = SampleHeader();
  h.geometry.tokens_per_stripe = 8191;
  expect_corrupt(h, "T != W/s");
  h = SampleHeader();
  h.geometry.pack_bytes *= 2;
  expect_corrupt(h, "pack bytes != L*W");
  h = SampleHeader();
  h.geometry.token_bytes = 0;
  expect_corrupt(h, "s = 0");
  h = SampleHeader();
  h.geometry.layers = 0;
  expect_corrupt(h, "L = 0");
  h = SampleHeader();
  h.geometry.stripe_bytes = 4096 * 3 + 1;
  expect_corrupt(h, "unaligned W");
  h = SampleHeader();
  h.store_uuid = StoreUuid{};
  expect_corrupt(h, "nil uuid");
  h = SampleHeader();
  h.header_bytes = 8192;
  expect_corrupt(h, "header size");
}

// Seeded mutation loop over the parser: it must never crash or read out of bounds (ASan
// build), and whatever it accepts must make a valid layout.
TEST(PackHeader, MutatedHeadersNeverCrash) {
  std::mt19937_64 rng(20240611);
  const Page good = Encode(SampleHeader());
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Page p = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) p[rng() % 136] = static_cast<uint8_t>(rng());
    p[8] = 1;  // keep the version so the deeper checks run
    std::memcpy(p.data(), "RANGEKVP", 8);
    if (rng() % 2 == 0) {
      // Re-seal so field validation, not the checksum, has to catch it.
      const uint64_t sum = Hash64(p.data(), 128, 0);
      for (int i = 0; i < 8; ++i) p[128 + i] = static_cast<uint8_t>(sum >> (8 * i));
    }
    const size_t size = (rng() % 16 == 0) ? rng() % kHeaderPageBytes : kHeaderPageBytes;
    auto d = Decode(p, size);
    if (d.ok()) {
      ++accepted;
      ASSERT_TRUE(PackLayout::Make(d->geometry, d->pack_count, d->data_offset).ok());
    }
  }
  // Some mutations only touch the time, the namespace or the UUID and stay valid.
  EXPECT_GT(accepted, 0);
}

TEST(StoreUuid, GenerateIsRandomVersion4) {
  const StoreUuid a = StoreUuid::Generate();
  const StoreUuid b = StoreUuid::Generate();
  EXPECT_FALSE(a.is_nil());
  EXPECT_NE(a, b);
  const std::string hex = a.ToHex();
  ASSERT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex[12], '4');                                          // version nibble
  EXPECT_NE(std::string("89ab").find(hex[16]), std::string::npos);  // variant 10xx
}

}  // namespace
}  // namespace rangekv
