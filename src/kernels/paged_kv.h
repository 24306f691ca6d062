// Paged KV memory of one layer, described by raw pointers and byte strides, and the argument
// records of the scatter (stripe -> paged KV) and gather (paged KV -> stripes) kernels.
//
// This header is shared by the CPU reference (reference.cc), the CUDA kernels (kv_copy.cu) and
// the host code that builds and validates views. Everything a kernel reads is plain data; the
// index math is RANGEKV_HD so host and device compile the same arithmetic.
//
// Model. One layer of paged KV holds `num_blocks` blocks of `block_size` tokens. For every
// (plane, block, token-in-block, head) there is one contiguous vector of `head_bytes` bytes
// (head_size elements of elem_bytes each) at
//     plane_base[plane] + block * block_stride + token * token_stride + head * head_stride
// Plane 0 is K and plane 1 is V (num_planes == 2); MLA has one plane holding the latent
// (num_planes == 1, num_heads == 1, head_bytes == latent bytes). Strides are in bytes and may
// describe any of the supported layouts (see PagedLayout) or a framework tensor's own strides.
//
// Slots. A slot id names one token position of the paged memory:
//     slot = block_id * block_size + token_in_block,   0 <= slot < num_blocks * block_size.
// A slot mapping is one int64 per stripe token. A negative slot means "skip this token": scatter
// leaves the paged memory untouched and gather leaves the stripe row untouched. The kernels also
// skip slots >= num_slots() so that a bad mapping can never write outside the view; callers
// reject such mappings up front with ValidateSlotMapping(), which also rejects duplicates.
//
// Stripe rows. Token i of a stripe occupies token_bytes() bytes at stripe + i * token_bytes():
// plane 0's heads in head order, then plane 1's heads (K bytes then V bytes; the MLA latent
// alone). This is the stripe layout of docs/design.md for one layer.
//
// Opaque blocks (PagedKvView::opaque_blocks, made for PagedLayout::kCpuBlock). The serving
// engine may pack a block's interior in a way the engine does not model, so the view describes
// each block as B rows of token_bytes() (one plane, one "head" of head_bytes == token_bytes(),
// token stride == head_bytes: a block is B * token_bytes() contiguous bytes) and the kernels move
// whole blocks only. A launch's tokens form groups of block_size consecutive tokens (num_tokens
// must be a multiple of block_size); group j moves the B * token_bytes() bytes between
// stripe + j * B * token_bytes() and the paged block slots[j * B] / block_size. Only the group's
// first slot is read; a negative or out-of-range first slot skips the group. Callers check
// that every group maps to offsets 0..B-1 of one block with ValidateBlockMapping(), so the
// bytes moved equal those a token-by-token copy through the same view would move.
//
// Byte-exact and dtype-agnostic: kernels move bytes. elem_bytes is carried for validation and
// for callers; the CUDA kernels pick the widest access (16, 8, 4, 2 or 1 bytes) that every
// pointer, stride and head_bytes allow.
//
// Thread-safety: plain values. Pointers inside are not owned; whoever launches a kernel keeps
// the memory alive until that launch's completion is proven (an event).
#pragma once

#include <cstdint>
#include <span>

#include "rangekv/status.h"

#if defined(__CUDACC__)
#define RANGEKV_HD __host__ __device__ __forceinline__
#else
#define RANGEKV_HD inline
#endif

namespace rangekv::kernels {

// The named physical layouts of one layer's paged KV. D = head_size, H = heads per rank,
// B = block_size, N = num_blocks; each is a C-contiguous tensor of the shape given.
enum class PagedLayout : uint8_t {
  kFlashAttnNhd,   // vLLM FlashAttention: [2, N, B, H, D]
  kFlashAttnHnd,   // vLLM FlashAttention with the HND stride order: physical [2, N, H, B, D]
  kFlashInferNhd,  // FlashInfer: [N, 2, B, H, D]
  kFlashInferHnd,  // FlashInfer HND: [N, 2, H, B, D]
  kMla,            // MLA: [N, B, latent] (one plane; H = 1, D = latent size)
  kPackedNhd,      // vLLM >= 0.26 FA/FlashInfer NHD: physical [N, B, H, 2D] (K = [:D], V = [D:])
  kPackedHnd,      // vLLM >= 0.26 FA/FlashInfer HND: physical [N, H, B, 2D]
  kCpuBlock,       // vLLM CPU backend [N, H, B, 2D] with opaque blocks (see "Opaque blocks")
};

// The logical shape of one layer. For kMla, num_heads must be 1 and head_size is the latent size.
struct PagedShape {
  uint32_t num_blocks = 0;
  uint32_t block_size = 0;
  uint32_t num_heads = 0;
  uint32_t head_size = 0;  // elements per head vector
  uint32_t elem_bytes = 0;
};

// One layer of paged KV. Construct with MakePagedKvView() for the named layouts, or fill it
// from a framework tensor's strides and check it with ValidatePagedKvView().
struct PagedKvView {
  uint8_t* plane_base[2] = {nullptr, nullptr};  // [0] = K (or MLA latent), [1] = V or null
  int64_t block_stride_bytes = 0;
  int64_t token_stride_bytes = 0;  // token within a block
  int64_t head_stride_bytes = 0;
  uint32_t num_planes = 0;  // 2 = K and V, 1 = MLA latent
  uint32_t num_blocks = 0;
  uint32_t block_size = 0;
  uint32_t num_heads = 0;
  uint32_t head_bytes = 0;  // bytes of one contiguous head vector (head_size * elem_bytes)
  uint32_t elem_bytes = 0;
  uint32_t opaque_blocks = 0;  // 1: kernels move whole blocks (see "Opaque blocks")

  RANGEKV_HD uint32_t num_slots() const { return num_blocks * block_size; }
  // Bytes of one token of one plane (the K half, or the MLA latent).
  RANGEKV_HD uint64_t plane_token_bytes() const { return uint64_t{num_heads} * head_bytes; }
  // Bytes of one stripe row (docs/design.md's s for one rank).
  RANGEKV_HD uint64_t token_bytes() const { return num_planes * plane_token_bytes(); }
  // Address of the head vector (plane, block, token_in_block, head).
  RANGEKV_HD uint8_t* HeadAddress(uint32_t plane, uint32_t block, uint32_t token_in_block,
                                  uint32_t head) const {
    return plane_base[plane] + int64_t{block} * block_stride_bytes +
           int64_t{token_in_block} * token_stride_bytes + int64_t{head} * head_stride_bytes;
  }
};

// Scatter one stripe into one layer: for each token i with a valid slot, copies stripe row i
// into the paged position of slots[i].
struct ScatterArgs {
  PagedKvView dst;
  const uint8_t* stripe = nullptr;  // num_tokens rows of dst.token_bytes()
  const int64_t* slots = nullptr;   // num_tokens slot ids, readable by the executing device
  uint32_t num_tokens = 0;
  // Gate: when set and *skip_if_set != 0 when the scatter executes (stream order), it writes
  // nothing. The restore path points it at the stripe's digest verdict (DigestArgs::mismatch).
  const uint32_t* skip_if_set = nullptr;
};

// The most layers one gather launch handles (a store layer group is 4 by default).
inline constexpr uint32_t kMaxGatherLayers = 8;

// Gather a layer group: for layer g < num_layers and token i with a valid slot, copies the paged
// position slots[i] of src[g] into row i of the region out + g * out_layer_stride_bytes.
// All layers share one slot mapping and one shape (num_planes, num_heads, head_bytes,
// block_size); their bases, strides and num_blocks may differ.
struct GatherArgs {
  PagedKvView src[kMaxGatherLayers];
  uint32_t num_layers = 0;
  const int64_t* slots = nullptr;  // num_tokens slot ids, readable by the executing device
  uint32_t num_tokens = 0;
  uint8_t* out = nullptr;
  uint64_t out_layer_stride_bytes = 0;  // >= num_tokens * token_bytes()
};

// One launch moves at most this many bytes per layer, so that device index math stays in 32
// bits (units of >= 1 byte). A 32 MiB stripe is far below it.
inline constexpr uint64_t kMaxLaunchBytesPerLayer = (uint64_t{1} << 32) - 1;

// Unsigned 32-bit division by a run-time constant through a multiply and a shift (the
// round-up method: l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1,
// n / d = (umulhi(n, m) + n) >> l, exact for every 32-bit n). Kernels divide by block sizes and
// head counts that are not always powers of two; a hardware division costs ~20 instructions.
struct FastDivU32 {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;

  // REQUIRES: d >= 1.
  static FastDivU32 Make(uint32_t d) {
    FastDivU32 f;
    f.divisor = d;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    f.shift = l;
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
    return f;
  }
  RANGEKV_HD uint32_t Div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{hi} + n) >> shift);
  }
  RANGEKV_HD uint32_t Mod(uint32_t n) const { return n - Div(n) * divisor; }
};

// ---- host-side construction and validation ----------------------------------------------

// Bytes of one layer's tensor in `layout` (K and V together where the layout has both).
// Fails with kInvalidArgument on zero sizes, MLA with num_heads != 1, or overflow.
Result<uint64_t> PagedLayerBytes(PagedLayout layout, const PagedShape& shape);

// A view of a C-contiguous tensor of `layout` starting at `layer_base` (PagedLayerBytes() long).
// Fails like PagedLayerBytes(), or with kInvalidArgument on a null base or a view that
// ValidatePagedKvView() rejects.
Result<PagedKvView> MakePagedKvView(PagedLayout layout, const PagedShape& shape, void* layer_base);

// Byte strides of a two-plane layer that is not dense in a named layout's order: the K head
// vector (block, token, head) at base + block*block + token*token + head*head (strides
// in bytes), the V one at the same + plane; head vectors contiguous. vLLM's cross-layer KV cache
// hands every layer as such a view into one allocation whose blocks hold all layers.
struct PagedStrides {  // bytes
  int64_t plane = 0;
  int64_t block = 0;
  int64_t token = 0;
  int64_t head = 0;
};

// A two-plane view with explicit strides. Fails with kInvalidArgument on zero sizes, a null
// base, a negative stride, or a view ValidatePagedKvView() rejects (two positions sharing an
// address).
Result<PagedKvView> MakeStridedPagedKvView(const PagedShape& shape, const PagedStrides& strides,
                                           void* layer_base);

// Checks that views of several layers that share `strides` never share a byte, whatever their
// slots: either their address ranges lie apart (separate allocations), or every layer's head
// vectors of one block, relative to the lowest base, lie inside one block stride and no two of
// them overlap (so block b of every layer stays inside the b-th block stride of the lowest
// base: a cross-layer allocation). Views that interleave in any other way, or a view that is
// itself invalid, are refused with kInvalidArgument. Cost: O(L log L), plus
// O(L*2*B*H log(L*2*B*H)) when the ranges meet.
Status CheckStridedLayersDisjoint(const PagedShape& shape, const PagedStrides& strides,
                                  std::span<void* const> layer_bases);

// Checks a view: num_planes in {1, 2}, non-null bases (plane 1 null iff num_planes == 1),
// opaque_blocks in {0, 1} (1 only with one plane, one head and token stride == head_bytes),
// non-zero sizes, head_bytes a multiple of elem_bytes, num_slots() < 2^32, a head vector's
// bytes fit one head stride, and the addressing is injective: no two (plane, block, token,
// head, byte) positions share an address (checked with the nested-stride criterion, which
// every supported layout satisfies). Returns kInvalidArgument naming the first violation.
Status ValidatePagedKvView(const PagedKvView& view);

// Whether slots are written (scatter) or read (gather): duplicates are an error only when
// written, because two tokens racing for one slot have no defined result.
enum class SlotUse : uint8_t { kScatterDestination, kGatherSource };

// Checks a host copy of a slot mapping against a view: every non-negative slot is below
// view.num_slots() (kOutOfRange otherwise) and, for kScatterDestination, no slot appears
// twice (kInvalidArgument). Negative slots are allowed (skipped tokens). Cost: O(n log n) in
// the mapping's length; call it once when a mapping is bound, not per launch.
Status ValidateSlotMapping(const PagedKvView& view, std::span<const int64_t> slots, SlotUse use);

// For a view with opaque blocks: `slots` covers whole blocks (size a multiple of block_size)
// and each group of block_size consecutive entries is b*B, b*B+1, ..., b*B+B-1 for one block b
// (kInvalidArgument naming the first group that is not). Range and duplicate checks are
// ValidateSlotMapping()'s. O(n).
Status ValidateBlockMapping(const PagedKvView& view, std::span<const int64_t> slots);

// Checks launch arguments: a valid view, non-null stripe/slots/out when num_tokens > 0, at most
// kMaxLaunchBytesPerLayer bytes per layer, gather layers agreeing on their shape, 1 <=
// num_layers <= kMaxGatherLayers, output regions that do not overlap each other, and a stripe
// or output that does not overlap the address range spanned by any paged view; for opaque
// views, num_tokens a multiple of block_size and (gather) every layer opaque alike.
// O(num_layers); the slot values themselves are not read (see ValidateSlotMapping()).
Status ValidateScatterArgs(const ScatterArgs& args);
Status ValidateGatherArgs(const GatherArgs& args);

// The access width in bytes (16, 8, 4, 2 or 1) the CUDA kernels use for these arguments: the
// widest that divides every plane base, stride, head_bytes and the stripe/out pointer (and the
// output layer stride). Aligned layouts with head_bytes % 16 == 0 get 16-byte accesses.
uint32_t ScatterAccessBytes(const ScatterArgs& args);
uint32_t GatherAccessBytes(const GatherArgs& args);

}  // namespace rangekv::kernels
