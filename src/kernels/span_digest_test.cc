#include "kernels/span_digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/digest_vectors.h"
#include "kernels/reference.h"

namespace rangekv::kernels {
namespace {

// The definition in span_digest.h, written as plainly as possible (one word at a time).
uint64_t NaiveDigest(const uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t sum = DigestLengthTerm(n, seed);
  for (uint64_t i = 0; i * 8 < n; ++i) {
    uint64_t w = 0;
    for (uint64_t b = 0; b < 8 && i * 8 + b < n; ++b) w |= uint64_t{p[i * 8 + b]} << (8 * b);
    sum += DigestWordTerm(w, i, seed);
  }
  return sum;
}

TEST(SpanDigestTest, MatchesDefinition) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (uint64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4999}) {
    for (uint64_t seed : {0ull, 42ull, ~0ull}) {
      ASSERT_EQ(SpanDigest(buf.data(), n, seed), NaiveDigest(buf.data(), n, seed))
          << "n=" << n << " seed=" << seed;
    }
  }
}

// Golden values shared with kernels_gpu_test: a change here is a format change (digests are
// persisted in snapshots), never a refactoring detail.
TEST(SpanDigestTest, GoldenVectors) {
  for (const DigestVector& v : kDigestVectors) {
    const std::vector<uint8_t> data = DigestVectorBytes(v.bytes);
    EXPECT_EQ(SpanDigest(data.data(), v.bytes, v.seed), v.digest)
        << "bytes=" << v.bytes << " seed=" << v.seed;
  }
}

// SpanDigest dispatches to a CPU-specific build of the same loop (AVX-512 where available);
// it must agree with the portable build bit for bit, on sizes around every vector boundary.
TEST(SpanDigestTest, DispatchedImplementationMatchesPortable) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> buf((1 << 20) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (uint64_t n = 0; n < 600; ++n) {
    ASSERT_EQ(SpanDigest(buf.data() + 3, n, n), SpanDigestPortableForTesting(buf.data() + 3, n, n))
        << "n=" << n;
  }
  for (uint64_t n : {uint64_t{4095}, uint64_t{4096}, uint64_t{65536 + 5}, uint64_t{1} << 20}) {
    EXPECT_EQ(SpanDigest(buf.data(), n, 11), SpanDigestPortableForTesting(buf.data(), n, 11))
        << "n=" << n;
    EXPECT_EQ(SpanDigest(buf.data(), n, 11), NaiveDigest(buf.data(), n, 11)) << "n=" << n;
  }
}

// Every CPU-specific build this machine can run (not only the one SpanDigest picks) agrees with
// the portable loop bit for bit: sizes around its 16-word blocks, odd alignments, word offsets.
TEST(SpanDigestTest, EveryVariantMatchesPortable) {
  const std::vector<std::string> variants = SpanDigestVariantsForTesting();
  if (variants.empty()) GTEST_SKIP() << "no CPU-specific digest build on this machine";
  std::mt19937_64 rng(5);
  std::vector<uint8_t> buf((1 << 16) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (const std::string& v : variants) {
    for (uint64_t n = 0; n < 300; ++n) {
      for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{12345}}) {
        ASSERT_EQ(SpanDigestWordSumVariantForTesting(v, buf.data() + 5, n, first, n + 1),
                  SpanDigestWordSumVariantForTesting("portable", buf.data() + 5, n, first, n + 1))
            << v << " n=" << n << " first=" << first;
      }
    }
    EXPECT_EQ(SpanDigestWordSumVariantForTesting(v, buf.data(), 1 << 16, 7, 3),
              SpanDigestWordSumVariantForTesting("portable", buf.data(), 1 << 16, 7, 3))
        << v;
  }
}

// A digest computed in word-aligned parts (as HostDevice's worker pool does) equals the whole.
TEST(SpanDigestTest, WordSumsOfPartsAddUpToTheDigest) {
  std::mt19937_64 rng(4);
  std::vector<uint8_t> buf(10007);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (uint64_t n : {uint64_t{0}, uint64_t{5}, uint64_t{64}, uint64_t{4099}, uint64_t{10007}}) {
    for (uint64_t part : {uint64_t{8}, uint64_t{24}, uint64_t{1024}}) {
      uint64_t sum = DigestLengthTerm(n, 5);
      for (uint64_t off = 0; off < n; off += part) {
        sum += SpanDigestWordSum(buf.data() + off, std::min(part, n - off), off / 8, 5);
      }
      EXPECT_EQ(sum, SpanDigest(buf.data(), n, 5)) << "n=" << n << " part=" << part;
    }
  }
}

TEST(SpanDigestTest, IndependentOfAlignment) {
  std::mt19937_64 rng(2);
  std::vector<uint8_t> src(777);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  const uint64_t want = SpanDigest(src.data(), src.size(), 9);
  std::vector<uint8_t> shifted(src.size() + 16);
  for (size_t off = 0; off < 16; ++off) {
    std::memcpy(shifted.data() + off, src.data(), src.size());
    EXPECT_EQ(SpanDigest(shifted.data() + off, src.size(), 9), want) << "offset " << off;
  }
}

TEST(SpanDigestTest, DetectsEveryByteFlipSwapAndLengthChange) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> data(256);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint64_t base = SpanDigest(data.data(), data.size(), 0);
  for (size_t i = 0; i < data.size(); ++i) {
    for (uint8_t bit = 1; bit != 0; bit = static_cast<uint8_t>(bit << 1)) {
      data[i] ^= bit;
      ASSERT_NE(SpanDigest(data.data(), data.size(), 0), base) << "byte " << i;
      data[i] ^= bit;
    }
  }
  // Swapping two different 8-byte words (a misdirected stripe row) changes the digest.
  std::vector<uint8_t> swapped = data;
  std::memcpy(swapped.data(), data.data() + 64, 8);
  std::memcpy(swapped.data() + 64, data.data(), 8);
  ASSERT_NE(std::memcmp(swapped.data(), data.data(), 8), 0);
  EXPECT_NE(SpanDigest(swapped.data(), swapped.size(), 0), base);
  // Trailing zeros are not invisible.
  std::vector<uint8_t> zeros(64, 0);
  EXPECT_NE(SpanDigest(zeros.data(), 63, 0), SpanDigest(zeros.data(), 64, 0));
  EXPECT_NE(SpanDigest(zeros.data(), 0, 0), SpanDigest(zeros.data(), 8, 0));
  // The seed separates digests.
  EXPECT_NE(SpanDigest(data.data(), data.size(), 1), base);
}

TEST(SpanDigestTest, ReferenceBatchAndValidation) {
  std::vector<uint8_t> data(1000, 0x5A);
  uint64_t out[3] = {};
  DigestArgs a;
  a.spans[0] = {data.data(), 1000};
  a.spans[1] = {data.data() + 3, 10};
  a.spans[2] = {nullptr, 0};
  a.num_spans = 3;
  a.seed = 77;
  a.digests = out;
  ASSERT_TRUE(ValidateDigestArgs(a).ok());
  DigestReference(a);
  EXPECT_EQ(out[0], SpanDigest(data.data(), 1000, 77));
  EXPECT_EQ(out[1], SpanDigest(data.data() + 3, 10, 77));
  EXPECT_EQ(out[2], DigestLengthTerm(0, 77));

  DigestArgs bad = a;
  bad.num_spans = 0;
  EXPECT_EQ(ValidateDigestArgs(bad).code(), StatusCode::kInvalidArgument);
  bad.num_spans = kMaxDigestSpans + 1;
  EXPECT_EQ(ValidateDigestArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.digests = nullptr;
  EXPECT_EQ(ValidateDigestArgs(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.spans[1].data = nullptr;
  EXPECT_EQ(ValidateDigestArgs(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv::kernels
