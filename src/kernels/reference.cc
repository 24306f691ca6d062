#include "kernels/reference.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstring>

namespace rangekv::kernels {

namespace {

// Streaming (non-temporal) copies for scatter and gather. A restore writes gigabytes of KV into
// paged memory in pieces of one head or one token plane (256 B - 4 KiB), and a store's gather
// fills its bank from such pieces. glibc's memcpy streams only copies larger than a good part
// of the last-level cache, so each of these small copies first reads every destination line
// for ownership: a third of the copy's memory traffic, for lines that are only overwritten.
// Streaming stores skip that read. Measured on the AVX2 dev VM (one thread, 256 MiB scattered
// in rows over 1 GiB): 4 KiB rows, memcpy 3.9 GiB/s, streaming 7.3 GiB/s; 256 B pieces 2.2 ->
// 4 GiB/s; whole restores and stores in docs/benchmarks.md, "Streaming scatter and gather".
// Written by hand because no library offers a streaming copy for small, aligned pieces.
// Used only for large launches (kStreamMinBytes): a small restore's KV may still be in cache
// when attention reads it.
constexpr uint64_t kStreamMinBytes = 1 << 20;

#if defined(__x86_64__)
[[gnu::target("avx2")]] void StreamCopyAvx2(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  uint64_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  for (; i + 32 <= bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
}

bool CanStream() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#else
void StreamCopyAvx2(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  std::memcpy(dst, src, bytes);
}
bool CanStream() { return false; }
#endif

// memcpy, or streaming stores where the piece allows them (32-byte aligned destination, a
// multiple of 32 bytes). The caller fences (StreamFence) before its writes may be observed.
inline void CopyPiece(uint8_t* dst, const uint8_t* src, uint64_t bytes, bool stream) {
  if (stream && (reinterpret_cast<uintptr_t>(dst) | bytes) % 32 == 0) {
    StreamCopyAvx2(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// Streaming stores are weakly ordered: make them visible before the caller signals completion.
inline void StreamFence(bool stream) {
#if defined(__x86_64__)
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

// Whether all heads of one plane of one token are one contiguous run of plane_token_bytes(),
// so a token-plane moves with one memcpy (NHD layouts and MLA).
bool HeadsContiguous(const PagedKvView& v) {
  return v.num_heads == 1 || v.head_stride_bytes == static_cast<int64_t>(v.head_bytes);
}

// Calls fn(paged_head_address, row_offset, bytes) for every contiguous piece of token
// position (block, token_in_block) of the view, in stripe-row order.
template <typename Fn>
void ForEachPiece(const PagedKvView& v, uint32_t block, uint32_t token_in_block, Fn&& fn) {
  const uint64_t plane_bytes = v.plane_token_bytes();
  for (uint32_t p = 0; p < v.num_planes; ++p) {
    if (HeadsContiguous(v)) {
      fn(v.HeadAddress(p, block, token_in_block, 0), p * plane_bytes, plane_bytes);
      continue;
    }
    for (uint32_t h = 0; h < v.num_heads; ++h) {
      fn(v.HeadAddress(p, block, token_in_block, h), p * plane_bytes + uint64_t{h} * v.head_bytes,
         uint64_t{v.head_bytes});
    }
  }
}

// Calls fn(paged_block, stripe_offset, bytes) for every block group of an opaque view whose
// first token lies in [token_begin, token_end) and whose first slot is valid.
template <typename Fn>
void ForEachBlock(const PagedKvView& v, const int64_t* slots, uint32_t token_begin,
                  uint32_t token_end, Fn&& fn) {
  const uint64_t block_bytes = uint64_t{v.block_size} * v.token_bytes();
  const int64_t num_slots = v.num_slots();
  const uint32_t first_group = (token_begin + v.block_size - 1) / v.block_size;
  for (uint64_t t = uint64_t{first_group} * v.block_size; t < token_end; t += v.block_size) {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;
    const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
    fn(v.HeadAddress(0, block, 0, 0), t * v.token_bytes(), block_bytes);
  }
}

}  // namespace

void ScatterReference(const ScatterArgs& a, uint32_t token_begin, uint32_t token_end) {
  const PagedKvView& v = a.dst;
  const uint64_t row_bytes = v.token_bytes();
  // Decided per launch (not per token range), so every range of one launch copies alike.
  const bool stream = uint64_t{a.num_tokens} * row_bytes >= kStreamMinBytes && CanStream();
  if (v.opaque_blocks != 0) {
    ForEachBlock(v, a.slots, token_begin, token_end,
                 [&](uint8_t* paged, uint64_t offset, uint64_t bytes) {
                   CopyPiece(paged, a.stripe + offset, bytes, stream);
                 });
    StreamFence(stream);
    return;
  }
  const int64_t num_slots = v.num_slots();
  for (uint32_t t = token_begin; t < token_end; ++t) {
    const int64_t slot = a.slots[t];
    if (slot < 0 || slot >= num_slots) continue;
    const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
    const uint32_t token_in_block = static_cast<uint32_t>(slot % v.block_size);
    const uint8_t* row = a.stripe + uint64_t{t} * row_bytes;
    ForEachPiece(v, block, token_in_block, [&](uint8_t* paged, uint64_t offset, uint64_t bytes) {
      CopyPiece(paged, row + offset, bytes, stream);
    });
  }
  StreamFence(stream);
}

namespace {

#if defined(__x86_64__)
#define RANGEKV_AVX512 [[gnu::target("avx512f,avx512dq,avx512vl")]]

// The span digest's word terms of eight consecutive words at once (span_digest.h's Mix on each
// 64-bit lane; _mm512_mullo_epi64 is the definition's product mod 2^64).
// (The shifts are the zero-masked form: GCC 12 warns that _mm512_srli_epi64's undefined pass-
// through vector may be used uninitialized; with an all-ones mask it is the same shift.)
RANGEKV_AVX512 inline __m512i ShiftRight(__m512i x, unsigned bits) {
  return _mm512_maskz_srli_epi64(static_cast<__mmask8>(0xFF), x, bits);
}
RANGEKV_AVX512 inline __m512i MixLanes(__m512i x, __m512i mul) {
  x = _mm512_xor_si512(x, ShiftRight(x, 32));
  x = _mm512_mullo_epi64(x, mul);
  x = _mm512_xor_si512(x, ShiftRight(x, 29));
  x = _mm512_mullo_epi64(x, mul);
  return _mm512_xor_si512(x, ShiftRight(x, 32));
}

// Copies `bytes` (a multiple of 64) from src to dst (none when dst is null; streaming stores when
// `stream` and dst is 64-byte aligned) and adds the word terms of src's words, numbered from
// `first_word`, to the lanes of acc. Written by hand: the digest is this project's own function,
// and the point is to compute it from the registers the copy loads, which no library offers.
RANGEKV_AVX512 inline __m512i CopyDigestPiece(uint8_t* dst, const uint8_t* src, uint64_t bytes,
                                              uint64_t first_word, uint64_t seed, bool stream,
                                              __m512i acc) {
  const __m512i mul = _mm512_set1_epi64(static_cast<int64_t>(kDigestMixMul));
  const __m512i step = _mm512_set1_epi64(static_cast<int64_t>(8 * kDigestKeyStep));
  // Key(i) = seed + (i + 1) * kDigestKeyStep for the words first_word .. first_word + 7.
  __m512i key =
      _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(seed + first_word * kDigestKeyStep)),
                       _mm512_mullo_epi64(_mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1),
                                          _mm512_set1_epi64(static_cast<int64_t>(kDigestKeyStep))));
  const bool nt = stream && dst != nullptr && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  for (uint64_t i = 0; i < bytes; i += 64) {
    const __m512i x = _mm512_loadu_si512(src + i);
    if (nt) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), x);
    } else if (dst != nullptr) {
      _mm512_storeu_si512(dst + i, x);
    }
    acc = _mm512_add_epi64(acc, MixLanes(_mm512_xor_si512(x, key), mul));
    key = _mm512_add_epi64(key, step);
  }
  return acc;
}

// Rows [token_begin, token_end) of `rows` (a stripe, or one layer's region of a bank) moved to
// or from the paged view and digested from the registers that move them; rows whose slot is
// invalid are digested where they are. ForEachPiece's walk, spelled out: a lambda cannot carry
// a vector into a caller that is not compiled for AVX-512.
RANGEKV_AVX512 uint64_t RowsDigestAvx512(const PagedKvView& v, const int64_t* slots, uint8_t* rows,
                                         uint32_t token_begin, uint32_t token_end,
                                         const uint8_t* word_origin, uint64_t seed, bool stream,
                                         bool into_paged) {
  const uint64_t row_bytes = v.token_bytes();
  const int64_t num_slots = v.num_slots();
  // A unit is one token's row in pieces (ForEachPiece's), or with opaque blocks one whole block
  // group (FusesRows: the range is whole groups), one piece at its block's address
  // (ForEachBlock's).
  const bool opaque = v.opaque_blocks != 0;
  const bool whole_planes = HeadsContiguous(v);
  const uint32_t unit_tokens = opaque ? v.block_size : 1;
  const uint64_t unit_bytes = unit_tokens * row_bytes;
  const uint32_t planes = opaque ? 1 : v.num_planes;
  const uint32_t heads = opaque || whole_planes ? 1 : v.num_heads;
  const uint64_t piece = opaque ? unit_bytes : whole_planes ? v.plane_token_bytes() : v.head_bytes;
  __m512i acc = _mm512_setzero_si512();
  for (uint32_t t = token_begin; t < token_end; t += unit_tokens) {
    uint8_t* unit = rows + uint64_t{t} * row_bytes;
    const uint64_t word = static_cast<uint64_t>(unit - word_origin) / 8;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) {
      acc = CopyDigestPiece(nullptr, unit, unit_bytes, word, seed, false, acc);
      continue;
    }
    const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
    const uint32_t token_in_block = opaque ? 0 : static_cast<uint32_t>(slot % v.block_size);
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t h = 0; h < heads; ++h) {
        const uint64_t offset = p * v.plane_token_bytes() + h * piece;
        uint8_t* paged = v.HeadAddress(p, block, token_in_block, h);
        acc = into_paged ? CopyDigestPiece(paged, unit + offset, piece, word + offset / 8, seed,
                                           stream, acc)
                         : CopyDigestPiece(unit + offset, paged, piece, word + offset / 8, seed,
                                           stream, acc);
      }
    }
  }
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns inside it)
  _mm512_store_si512(lanes, acc);
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

bool CanScatterDigest() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512vl");
  return avx512;
}
#endif

}  // namespace

namespace {

// Whether the fused walk can move rows [token_begin, token_end) of this view, the first `lead`
// bytes after word_origin: whole 64-byte units per piece, and for opaque blocks a range of whole
// block groups (a group moves whole, so a range that cut one would move rows outside it).
bool FusesRows(const PagedKvView& v, uint32_t token_begin, uint32_t token_end, uint64_t lead) {
#if defined(__x86_64__)
  if (!CanScatterDigest() || lead % 8 != 0) return false;
  if (v.opaque_blocks != 0) {
    return uint64_t{v.block_size} * v.token_bytes() % 64 == 0 && token_begin % v.block_size == 0 &&
           token_end % v.block_size == 0;
  }
  const uint64_t piece = HeadsContiguous(v) ? v.plane_token_bytes() : v.head_bytes;
  return piece % 64 == 0;
#else
  (void)v, (void)token_begin, (void)token_end, (void)lead;
  return false;
#endif
}

}  // namespace

bool ScatterDigestReference(const ScatterArgs& a, uint32_t token_begin, uint32_t token_end,
                            const uint8_t* word_origin, uint64_t seed, uint64_t* word_sum) {
  const uint64_t row = a.dst.token_bytes();
  if (!FusesRows(a.dst, token_begin, token_end,
                 static_cast<uint64_t>(a.stripe + uint64_t{token_begin} * row - word_origin))) {
    return false;
  }
#if defined(__x86_64__)
  // As ScatterReference decides it: per launch, so every range of one launch copies alike.
  const bool stream = uint64_t{a.num_tokens} * row >= kStreamMinBytes;
  *word_sum = RowsDigestAvx512(a.dst, a.slots, const_cast<uint8_t*>(a.stripe), token_begin,
                               token_end, word_origin, seed, stream, /*into_paged=*/true);
  StreamFence(stream);
#endif
  return true;
}

bool GatherDigestReference(const GatherArgs& a, uint32_t layer, uint32_t token_begin,
                           uint32_t token_end, const uint8_t* word_origin, uint64_t seed,
                           uint64_t* word_sum) {
  const PagedKvView& v = a.src[layer];
  uint8_t* rows = a.out + uint64_t{layer} * a.out_layer_stride_bytes;
  const uint64_t row = v.token_bytes();
  if (!FusesRows(v, token_begin, token_end,
                 static_cast<uint64_t>(rows + uint64_t{token_begin} * row - word_origin))) {
    return false;
  }
#if defined(__x86_64__)
  // As GatherReference decides it: on the whole launch's bytes.
  const bool stream = uint64_t{a.num_tokens} * row * a.num_layers >= kStreamMinBytes;
  *word_sum = RowsDigestAvx512(v, a.slots, rows, token_begin, token_end, word_origin, seed, stream,
                               /*into_paged=*/false);
  StreamFence(stream);
#endif
  return true;
}

void GatherReference(const GatherArgs& a, uint32_t token_begin, uint32_t token_end) {
  uint64_t launch_bytes = 0;
  for (uint32_t g = 0; g < a.num_layers; ++g) launch_bytes += a.src[g].token_bytes();
  launch_bytes *= a.num_tokens;
  const bool stream = launch_bytes >= kStreamMinBytes && CanStream();
  for (uint32_t g = 0; g < a.num_layers; ++g) {
    const PagedKvView& v = a.src[g];
    const uint64_t row_bytes = v.token_bytes();
    const int64_t num_slots = v.num_slots();
    uint8_t* layer_out = a.out + uint64_t{g} * a.out_layer_stride_bytes;
    if (v.opaque_blocks != 0) {
      ForEachBlock(v, a.slots, token_begin, token_end,
                   [&](const uint8_t* paged, uint64_t offset, uint64_t bytes) {
                     CopyPiece(layer_out + offset, paged, bytes, stream);
                   });
      continue;
    }
    for (uint32_t t = token_begin; t < token_end; ++t) {
      const int64_t slot = a.slots[t];
      if (slot < 0 || slot >= num_slots) continue;
      const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
      const uint32_t token_in_block = static_cast<uint32_t>(slot % v.block_size);
      uint8_t* row = layer_out + uint64_t{t} * row_bytes;
      ForEachPiece(v, block, token_in_block,
                   [&](const uint8_t* paged, uint64_t offset, uint64_t bytes) {
                     CopyPiece(row + offset, paged, bytes, stream);
                   });
    }
  }
  StreamFence(stream);
}

void DigestReference(const DigestArgs& a) {
  for (uint32_t i = 0; i < a.num_spans; ++i) {
    a.digests[i] = SpanDigest(a.spans[i].data, a.spans[i].bytes, a.seed);
  }
}

}  // namespace rangekv::kernels
