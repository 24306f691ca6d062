// KvCacheLayout: how one layer of the serving engine's paged KV cache is laid out in memory.
//
// The layout decides how the engine's scatter and gather kernels address a token inside a
// block; it never changes the pack format (a stripe is always token-major, token t of a layer
// at offset t * s). Thread-safety: plain values.
#pragma once

#include <cstdint>

namespace rangekv {

// How one layer of the serving engine's paged KV cache is laid out in memory. B = block size
// (tokens), H = kv heads per rank, D = head size; every layer has the same layout.
enum class KvCacheLayout : uint8_t {
  kFlashAttnNhd,   // vLLM FlashAttention: [2, num_blocks, B, H, D] contiguous
  kFlashAttnHnd,   // same logical shape, physical order [2, num_blocks, H, B, D]
  kFlashInferNhd,  // FlashInfer: [num_blocks, 2, B, H, D] contiguous
  kFlashInferHnd,  // FlashInfer HND: physical [num_blocks, 2, H, B, D]
  kMla,            // [num_blocks, B, latent] contiguous (no K/V split)
};

}  // namespace rangekv
