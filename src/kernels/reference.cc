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
