// The span digest: a 64-bit, position-dependent checksum of a byte range that the CPU and the
// GPU compute bit-for-bit identically, fast enough to run on every restored or stored span.
//
// Definition (normative; the CPU reference and the CUDA kernel both follow it exactly).
// Let the span be bytes b[0..n). Split it into m = ceil(n / 8) little-endian 64-bit words
// w[0..m); the last word is zero-padded when n is not a multiple of 8. Then
//     digest(b, seed) = LengthTerm(n, seed) + sum_{i < m} WordTerm(w[i], i, seed)   (mod 2^64)
// with
//     WordTerm(w, i, seed) = Mix(w ^ Key(i, seed)),   Key(i, seed) = seed + (i + 1) * kKeyStep,
//     LengthTerm(n, seed)  = Mix(n ^ seed ^ kLengthTag) * kLengthMul,
//     Mix(x): x ^= x >> 32; x *= kMixMul; x ^= x >> 29; x *= kMixMul; x ^= x >> 32.
// Why this shape: addition mod 2^64 is associative and commutative, so a parallel reduction
// in any order gives the same digest (no float, no order-dependent combining); Mix is a
// bijection of x, so for a fixed position any change of one word changes its term and thus
// the digest; the key makes equal words at different positions contribute differently
// (swaps and shifts are detected); the length term separates spans that differ only in
// trailing zero bytes. It protects against corruption and misdirected bytes, not an adversary.
//
// Cost: one 64-bit mix per 8 bytes; memory-bound on the GPU.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/paged_kv.h"  // RANGEKV_HD

namespace rangekv::kernels {

inline constexpr uint64_t kDigestKeyStep = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kDigestMixMul = 0xD6E8FEB86659FD93ull;
inline constexpr uint64_t kDigestLengthTag = 0x5F0E1D2C3B4A6978ull;
inline constexpr uint64_t kDigestLengthMul = 0xC2B2AE3D27D4EB4Full;

RANGEKV_HD uint64_t DigestMix(uint64_t x) {
  x ^= x >> 32;
  x *= kDigestMixMul;
  x ^= x >> 29;
  x *= kDigestMixMul;
  x ^= x >> 32;
  return x;
}

RANGEKV_HD uint64_t DigestWordTerm(uint64_t word, uint64_t word_index, uint64_t seed) {
  return DigestMix(word ^ (seed + (word_index + 1) * kDigestKeyStep));
}

RANGEKV_HD uint64_t DigestLengthTerm(uint64_t span_bytes, uint64_t seed) {
  return DigestMix(span_bytes ^ seed ^ kDigestLengthTag) * kDigestLengthMul;
}

// The digest of bytes [0, bytes) at `data` (any alignment). CPU reference.
uint64_t SpanDigest(const void* data, uint64_t bytes, uint64_t seed);
// The word terms alone of the part [data, data + bytes) of a span whose word `first_word`
// begins at `data` (the length term is not included): a span of n bytes split at multiples of
// 8 bytes into parts has digest LengthTerm(n) + the sum of its parts' word sums, so a digest
// may be computed in pieces on several threads. The last part may end mid-word (zero-padded).
uint64_t SpanDigestWordSum(const void* data, uint64_t bytes, uint64_t first_word, uint64_t seed);
// The portable (non-dispatched) implementation, so tests can check that the CPU-specific
// variant SpanDigest picks gives identical results.
uint64_t SpanDigestPortableForTesting(const void* data, uint64_t bytes, uint64_t seed);
// The CPU-specific variants this machine can run ("avx512", "avx2"; fastest first, the one
// SpanDigest uses), and one variant's word sum, so each is tested, not only the chosen one.
std::vector<std::string> SpanDigestVariantsForTesting();
uint64_t SpanDigestWordSumVariantForTesting(const std::string& variant, const void* data,
                                            uint64_t bytes, uint64_t first_word, uint64_t seed);

// A digest request batch: one digest per span, written to digests[i] (8 bytes each, memory the
// executing device can write; a device buffer on CUDA). Spans may have any length and
// alignment; 16-byte-aligned spans are fastest on the GPU.
inline constexpr uint32_t kMaxDigestSpans = 32;

struct DigestSpan {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

struct DigestArgs {
  DigestSpan spans[kMaxDigestSpans];
  uint32_t num_spans = 0;
  uint64_t seed = 0;
  uint64_t* digests = nullptr;
  // The verdict on the device (both set, or neither): once the digests are computed, any
  // digests[i] != expected[i] sets *mismatch to 1. Nothing ever clears it: the caller zeroes it
  // before a stripe's first launch, and a later gated Scatter (ScatterArgs::skip_if_set) reads
  // it in stream order, so no host round trip sits between a stripe's digest and its scatter.
  const uint64_t* expected = nullptr;  // num_spans entries, readable by the executing device
  uint32_t* mismatch = nullptr;        // writable by the executing device
};

// Checks 1 <= num_spans <= kMaxDigestSpans, a non-null digests array, non-null data for every
// non-empty span, and expected / mismatch both set or both null. kInvalidArgument otherwise.
Status ValidateDigestArgs(const DigestArgs& args);

// A scatter verified by the digests of the bytes holding its rows. `digest` (expected and
// mismatch set) names consecutive spans of whole rows of `scatter.stripe` (span k ends where
// span k + 1 begins) that together cover its num_tokens rows; the first may begin before row 0
// and the last end after the last row (a verify extent reaches whole digest blocks). For every
// span: its digest goes to digest.digests[k]; if it equals digest.expected[k], the rows of the
// scatter inside the span are written as ScatterArgs would write them; otherwise
// *digest.mismatch is set to 1, and each of those rows either is left as it was or holds the
// span's bytes: HostDevice, where the CPU allows, copies and digests each row in one pass, so
// the stripe is read from memory once; Stream's default runs Digest, then Scatter gated on the
// mismatch word (all or nothing), and CUDA gates its scatter the same way. Either way the
// verdict is set before the stream's next operation runs, and the caller fails the stripe: its
// tokens are dropped before its layer can count as restored, so rows that hold a failed span's
// bytes are never used, as rows left holding another request's stale bytes would not be.
// (scatter.skip_if_set must be null: the verdict is per span.)
struct VerifiedScatterArgs {
  ScatterArgs scatter;
  DigestArgs digest;
};

// A gather, then digests of spans of what it wrote (the store's bank): `digest` (no verdict)
// runs after `gather` in stream order, so its spans may name any bytes the gather wrote. Where
// the spans tile the gather's output -- for each layer, runs of whole rows that together cover
// rows [0, num_tokens) of that layer's region exactly once -- HostDevice writes and digests each
// span's rows in one pass; otherwise, and on other streams, it is Gather then Digest.
struct DigestedGatherArgs {
  GatherArgs gather;
  DigestArgs digest;
};

// ValidateGatherArgs and ValidateDigestArgs, and no verdict (expected and mismatch null).
Status ValidateDigestedGatherArgs(const DigestedGatherArgs& args);

// ValidateScatterArgs and ValidateDigestArgs, a verdict (expected, mismatch), no skip_if_set,
// and the span layout above (whole rows, consecutive, covering every row of the scatter).
Status ValidateVerifiedScatterArgs(const VerifiedScatterArgs& args);

// Rows [begin, end) of `args.scatter` that lie inside digest span k (clipped to the scatter's
// rows; begin == end when none does). For spans that passed ValidateVerifiedScatterArgs.
void VerifiedSpanRows(const VerifiedScatterArgs& args, uint32_t k, uint32_t* begin, uint32_t* end);

}  // namespace rangekv::kernels
