// KvCacheLayout: how one layer of the serving engine's paged KV cache is laid out in memory.
//
// The layout decides how the engine's scatter and gather kernels address a token inside a
// block. The pack format's addressing rule never changes (a record's token t of layer l lives
// at a + l*W + t*s), but what a stripe holds between block boundaries does: for every layout
// but kCpuBlock a stripe is token-major (token t's row at offset t * s: K heads, then V heads,
// or the MLA latent); for kCpuBlock a stripe holds whole blocks, each an opaque copy of one
// layer's block of the paged memory (see below). The layout is part of the namespace
// (ModelSpec::layout), so caches of different layouts never mix.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string_view>

namespace rangekv {

// How one layer of the serving engine's paged KV cache is laid out in memory. B = block size
// (tokens), H = kv heads per rank, D = head size; every layer has the same layout.
//
// kCpuBlock (vLLM's CPU attention backend, vLLM 0.32): logically [num_blocks, H, B, 2*D], but
// the attention kernel may pack the interior of a block for the CPU's instruction set, so the
// engine treats one layer's block as B * s opaque bytes (s = 2 x H x D x dtype bytes) at
// layer_base + block * B * s and moves only whole blocks. Consequences, all enforced by the
// engine and reported as kInvalidArgument:
//   - Tokens per stripe T is floor(W / s) rounded down to a multiple of B (a block never
//     straddles two stripes); W must hold at least one block.
//   - Slot mappings stay per token (vLLM's slot_mapping), but the B tokens of each block of the
//     path must map to offsets 0..B-1, in order, of one paged block.
//   - Lookups round the hit down to whole blocks (the reuse granularity is raised to a multiple
//     of B). A restore's begin_token and endpoint_tokens must be multiples of B.
//   - A store's token count is clipped down to whole blocks (the partial last block is not
//     stored); a store of fewer than B tokens fails.
//   - A pack whose first token lies inside a block (a prefix that diverges from a stored one
//     mid-block) also stores that whole block: the block's tokens before the divergence are
//     re-gathered from the storing request's own paged block. Its stripe's token 0 is the block
//     boundary at or below its first token. A restore takes every block from the pack that holds
//     the block's last token, so a block is always delivered from one pack that has all of it.
enum class KvCacheLayout : uint8_t {
  kFlashAttnNhd,   // vLLM FlashAttention: [2, num_blocks, B, H, D] contiguous
  kFlashAttnHnd,   // same logical shape, physical order [2, num_blocks, H, B, D]
  kFlashInferNhd,  // FlashInfer: [num_blocks, 2, B, H, D] contiguous
  kFlashInferHnd,  // FlashInfer HND: physical [num_blocks, 2, H, B, D]
  kMla,            // [num_blocks, B, latent] contiguous (no K/V split)
  // vLLM >= 0.26 FlashAttention / FlashInfer: logical [num_blocks, H, B, 2*D], K = last dim
  // [:D], V = [D:]. kPackedNhd is the NHD stride order, physical [num_blocks, B, H, 2*D]
  // contiguous; kPackedHnd is the identity order, physical [num_blocks, H, B, 2*D].
  kPackedNhd,
  kPackedHnd,
  kCpuBlock,  // vLLM CPU attention backend: [num_blocks, H, B, 2*D], blocks opaque (above)
};

// "flash_attn_nhd", "flash_attn_hnd", "flashinfer_nhd", "flashinfer_hnd", "mla",
// "packed_nhd", "packed_hnd", "cpu_block"; "unknown" for a value outside the enum.
std::string_view KvCacheLayoutName(KvCacheLayout layout);

// Whether the layout's blocks are opaque units that the engine moves only whole (kCpuBlock).
inline bool IsBlockOpaque(KvCacheLayout layout) { return layout == KvCacheLayout::kCpuBlock; }

}  // namespace rangekv
