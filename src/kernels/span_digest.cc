#include "kernels/span_digest.h"

#include <bit>
#include <cstring>
#include <string>

namespace rangekv::kernels {

static_assert(std::endian::native == std::endian::little,
              "the span digest is defined over little-endian words");

namespace {

// The definition's loop, inlined into each target-specific entry point below. Four independent
// accumulators keep the multiply chains of consecutive words overlapped; addition mod 2^64
// makes the split invisible in the result.
// Returns the sum of the word terms of [p, p + bytes), the words numbered from `first_word`
// (the length term is the caller's).
[[gnu::always_inline]] inline uint64_t DigestBody(const uint8_t* p, uint64_t bytes,
                                                  uint64_t first_word, uint64_t seed) {
  const uint64_t full_words = bytes / 8;
  uint64_t acc[4] = {0, 0, 0, 0};
  uint64_t i = 0;
  for (; i + 4 <= full_words; i += 4) {
    for (uint64_t k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + (i + k) * 8, 8);
      acc[k] += DigestWordTerm(w, first_word + i + k, seed);
    }
  }
  for (; i < full_words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    acc[0] += DigestWordTerm(w, first_word + i, seed);
  }
  if (bytes % 8 != 0) {
    uint64_t w = 0;
    std::memcpy(&w, p + full_words * 8, bytes % 8);
    acc[0] += DigestWordTerm(w, first_word + full_words, seed);
  }
  return acc[0] + acc[1] + acc[2] + acc[3];
}

uint64_t DigestPortable(const uint8_t* p, uint64_t bytes, uint64_t first_word, uint64_t seed) {
  return DigestBody(p, bytes, first_word, seed);
}

#if defined(__x86_64__)
// The same loop compiled for AVX-512 (64-bit vector multiplies): measured 11.6 GB/s portable
// vs 34 GB/s here on the dev VM's EPYC. HostDevice verifies every restored byte with this on
// the CPU, so it is on the restore path; the result is bit-identical (same definition).
[[gnu::target("avx512f,avx512dq,avx512vl")]] uint64_t DigestAvx512(const uint8_t* p, uint64_t bytes,
                                                                   uint64_t first_word,
                                                                   uint64_t seed) {
  return DigestBody(p, bytes, first_word, seed);
}

using DigestFn = uint64_t (*)(const uint8_t*, uint64_t, uint64_t, uint64_t);

DigestFn PickDigest() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return DigestAvx512;
  }
  return DigestPortable;
}
#endif

}  // namespace

uint64_t SpanDigestWordSum(const void* data, uint64_t bytes, uint64_t first_word, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const DigestFn fn = PickDigest();  // chosen once per process
  return fn(p, bytes, first_word, seed);
#else
  return DigestPortable(p, bytes, first_word, seed);
#endif
}

uint64_t SpanDigest(const void* data, uint64_t bytes, uint64_t seed) {
  return DigestLengthTerm(bytes, seed) + SpanDigestWordSum(data, bytes, 0, seed);
}

uint64_t SpanDigestPortableForTesting(const void* data, uint64_t bytes, uint64_t seed) {
  return DigestLengthTerm(bytes, seed) +
         DigestPortable(static_cast<const uint8_t*>(data), bytes, 0, seed);
}

Status ValidateDigestArgs(const DigestArgs& a) {
  if (a.num_spans == 0 || a.num_spans > kMaxDigestSpans) {
    return InvalidArgument("digest num_spans must be in [1, " + std::to_string(kMaxDigestSpans) +
                           "], got " + std::to_string(a.num_spans));
  }
  if (a.digests == nullptr) return InvalidArgument("digest output is null");
  for (uint32_t i = 0; i < a.num_spans; ++i) {
    if (a.spans[i].bytes != 0 && a.spans[i].data == nullptr) {
      return InvalidArgument("digest span " + std::to_string(i) + " has null data");
    }
  }
  return OkStatus();
}

}  // namespace rangekv::kernels
