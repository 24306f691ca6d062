// CUDA scatter (stripe -> paged KV) and gather (paged KV -> stripes of a layer group).
// Semantics: paged_kv.h and reference.cc; this file only makes them fast.
//
// Work split. A stripe row of one token is `units_per_token` access units of W bytes
// (W = 16 where alignment allows). Thread x of a 256-thread block always handles the same
// unit(s) r of a row, so the decode of r into (plane, head, byte-in-head) happens once per
// thread, not per byte moved; short rows (MLA, small heads) put several tokens side by side in
// one block. Each thread then walks tokens with a grid stride, loading kUnroll units before
// storing any so several memory requests are in flight per thread. Within a warp, consecutive
// threads touch consecutive W-byte pieces of one row and of one paged head vector, so both
// sides are coalesced. Slots are read once per (thread, token) from a broadcast address.
//
// Opaque blocks (kCpuBlock views): a block group is B * s contiguous bytes on both sides, so
// each CUDA block takes one group at a time (grid stride over groups), reads the group's first
// slot once, and its threads copy the group's W-byte units with a block stride: a plain
// coalesced memcpy per group.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_kernels.h"

namespace rangekv::kernels {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kUnroll = 4;
constexpr uint32_t kMaxGridX = 4096;

// Launch constants derived on the host from one view shape (shared by every layer of a
// gather, whose layers agree on token_bytes; their head counts may still differ, so the view
// is passed in too).
struct CopyPlan {
  uint32_t units_per_token = 0;
  uint32_t units_per_head = 0;
  uint32_t tokens_per_block = 1;
  FastDivU32 per_token;  // divides by units_per_token
  FastDivU32 per_head;   // divides by units_per_head
  FastDivU32 heads;      // divides by num_heads
  FastDivU32 block;      // divides by block_size
};

CopyPlan MakePlan(const PagedKvView& v, uint32_t unit_bytes) {
  CopyPlan p;
  p.units_per_token = static_cast<uint32_t>(v.token_bytes() / unit_bytes);
  p.units_per_head = v.head_bytes / unit_bytes;
  p.tokens_per_block = std::max<uint32_t>(1, kThreads / p.units_per_token);
  p.per_token = FastDivU32::Make(p.units_per_token);
  p.per_head = FastDivU32::Make(p.units_per_head);
  p.heads = FastDivU32::Make(v.num_heads);
  p.block = FastDivU32::Make(v.block_size);
  return p;
}

template <typename V>
__device__ __forceinline__ V LoadReadOnly(const uint8_t* p) {
  return __ldg(reinterpret_cast<const V*>(p));
}

// Moves one layer. kToPaged: stripe -> paged (scatter); otherwise paged -> stripe (gather).
template <typename V, bool kToPaged>
__device__ __forceinline__ void CopyLayer(const PagedKvView& v, const CopyPlan& plan,
                                          uint8_t* stripe, const int64_t* __restrict__ slots,
                                          uint32_t num_tokens) {
  const uint32_t sub = plan.per_token.Div(threadIdx.x);  // token slot within the block
  if (sub >= plan.tokens_per_block) return;
  const uint32_t first_unit = threadIdx.x - sub * plan.units_per_token;
  const uint32_t token_step = gridDim.x * plan.tokens_per_block;
  const uint32_t num_slots = v.num_slots();
  const uint64_t row_units = plan.units_per_token;

  // With tokens_per_block > 1 every thread has exactly one unit; rows wider than the block
  // give each thread units first_unit, first_unit + kThreads, ...
  for (uint32_t r = first_unit; r < plan.units_per_token; r += kThreads) {
    const uint32_t head_global = plan.per_head.Div(r);
    const uint32_t unit_in_head = r - head_global * plan.units_per_head;
    const uint32_t plane = plan.heads.Div(head_global);
    const uint32_t head = head_global - plane * v.num_heads;
    // A select, not v.plane_base[plane]: indexing the parameter struct with a run-time value
    // would copy it to local memory.
    uint8_t* const plane_base = (plane == 0 ? v.plane_base[0] : v.plane_base[1]) +
                                int64_t{head} * v.head_stride_bytes +
                                int64_t{unit_in_head} * sizeof(V);

    for (uint64_t t0 = uint64_t{blockIdx.x} * plan.tokens_per_block + sub; t0 < num_tokens;
         t0 += uint64_t{kUnroll} * token_step) {
      uint8_t* paged[kUnroll];
      uint8_t* row[kUnroll];
#pragma unroll
      for (uint32_t k = 0; k < kUnroll; ++k) {
        const uint64_t t = t0 + uint64_t{k} * token_step;
        paged[k] = nullptr;
        row[k] = nullptr;
        if (t < num_tokens) {
          const int64_t slot = slots[t];
          if (slot >= 0 && slot < int64_t{num_slots}) {
            const uint32_t s = static_cast<uint32_t>(slot);
            const uint32_t blk = plan.block.Div(s);
            const uint32_t tok = s - blk * v.block_size;
            paged[k] = plane_base + int64_t{blk} * v.block_stride_bytes +
                       int64_t{tok} * v.token_stride_bytes;
            row[k] = stripe + (t * row_units + r) * sizeof(V);
          }
        }
      }
      V vals[kUnroll];
#pragma unroll
      for (uint32_t k = 0; k < kUnroll; ++k) {
        if (paged[k] != nullptr) vals[k] = LoadReadOnly<V>(kToPaged ? row[k] : paged[k]);
      }
#pragma unroll
      for (uint32_t k = 0; k < kUnroll; ++k) {
        if (paged[k] != nullptr) *reinterpret_cast<V*>(kToPaged ? paged[k] : row[k]) = vals[k];
      }
    }
  }
}

// The scatter's gate (ScatterArgs::skip_if_set): every thread reads the same word, written by
// an earlier kernel of the stream, so all of a launch agree.
__device__ __forceinline__ bool Gated(const ScatterArgs& args) {
  return args.skip_if_set != nullptr && *args.skip_if_set != 0;
}

template <typename V>
__global__ void __launch_bounds__(kThreads) ScatterKernel(ScatterArgs args, CopyPlan plan) {
  if (Gated(args)) return;
  CopyLayer<V, true>(args.dst, plan, const_cast<uint8_t*>(args.stripe), args.slots,
                     args.num_tokens);
}

template <typename V>
__global__ void __launch_bounds__(kThreads) GatherKernel(GatherArgs args, CopyPlan plan) {
  // Layers of one gather share their shape (ValidateGatherArgs), so layer 0's plan fits all.
  const uint32_t g = blockIdx.y;
  CopyLayer<V, false>(args.src[g], plan, args.out + uint64_t{g} * args.out_layer_stride_bytes,
                      args.slots, args.num_tokens);
}

// Moves the whole block groups of one opaque layer (paged_kv.h, "Opaque blocks").
template <typename V, bool kToPaged>
__device__ __forceinline__ void CopyBlocks(const PagedKvView& v, uint8_t* stripe,
                                           const int64_t* __restrict__ slots, uint32_t num_tokens,
                                           uint32_t units_per_group) {
  const uint32_t num_groups = num_tokens / v.block_size;
  const int64_t num_slots = v.num_slots();
  for (uint32_t j = blockIdx.x; j < num_groups; j += gridDim.x) {
    const int64_t slot = slots[uint64_t{j} * v.block_size];
    if (slot < 0 || slot >= num_slots) continue;
    // One division per group (not per byte): no FastDivU32 needed.
    const uint32_t blk = static_cast<uint32_t>(slot) / v.block_size;
    uint8_t* const paged = v.plane_base[0] + int64_t{blk} * v.block_stride_bytes;
    uint8_t* const row = stripe + uint64_t{j} * units_per_group * sizeof(V);
    V* const dst = reinterpret_cast<V*>(kToPaged ? paged : row);
    const uint8_t* const src = kToPaged ? row : paged;
#pragma unroll 4
    for (uint32_t u = threadIdx.x; u < units_per_group; u += kThreads) {
      dst[u] = LoadReadOnly<V>(src + uint64_t{u} * sizeof(V));
    }
  }
}

template <typename V>
__global__ void __launch_bounds__(kThreads)
    ScatterBlocksKernel(ScatterArgs args, uint32_t units_per_group) {
  if (Gated(args)) return;
  CopyBlocks<V, true>(args.dst, const_cast<uint8_t*>(args.stripe), args.slots, args.num_tokens,
                      units_per_group);
}

template <typename V>
__global__ void __launch_bounds__(kThreads)
    GatherBlocksKernel(GatherArgs args, uint32_t units_per_group) {
  const uint32_t g = blockIdx.y;
  CopyBlocks<V, false>(args.src[g], args.out + uint64_t{g} * args.out_layer_stride_bytes,
                       args.slots, args.num_tokens, units_per_group);
}

uint32_t BlockGridX(uint32_t num_tokens, uint32_t block_size) {
  return std::clamp<uint32_t>(num_tokens / block_size, 1, kMaxGridX);
}

uint32_t UnitsPerGroup(const PagedKvView& v, uint32_t unit_bytes) {
  return static_cast<uint32_t>(uint64_t{v.block_size} * v.token_bytes() / unit_bytes);
}

uint32_t GridX(uint32_t num_tokens, uint32_t tokens_per_block) {
  const uint64_t per_block = uint64_t{tokens_per_block} * kUnroll;
  const uint64_t blocks = (num_tokens + per_block - 1) / per_block;
  return static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, kMaxGridX));
}

template <typename V>
cudaError_t LaunchScatterAs(const ScatterArgs& args, cudaStream_t stream) {
  if (args.dst.opaque_blocks != 0) {
    ScatterBlocksKernel<V>
        <<<BlockGridX(args.num_tokens, args.dst.block_size), kThreads, 0, stream>>>(
            args, UnitsPerGroup(args.dst, sizeof(V)));
    return cudaGetLastError();
  }
  const CopyPlan plan = MakePlan(args.dst, sizeof(V));
  ScatterKernel<V>
      <<<GridX(args.num_tokens, plan.tokens_per_block), kThreads, 0, stream>>>(args, plan);
  return cudaGetLastError();
}

template <typename V>
cudaError_t LaunchGatherAs(const GatherArgs& args, cudaStream_t stream) {
  if (args.src[0].opaque_blocks != 0) {
    const dim3 grid(BlockGridX(args.num_tokens, args.src[0].block_size), args.num_layers);
    GatherBlocksKernel<V>
        <<<grid, kThreads, 0, stream>>>(args, UnitsPerGroup(args.src[0], sizeof(V)));
    return cudaGetLastError();
  }
  const CopyPlan plan = MakePlan(args.src[0], sizeof(V));
  const dim3 grid(GridX(args.num_tokens, plan.tokens_per_block), args.num_layers);
  GatherKernel<V><<<grid, kThreads, 0, stream>>>(args, plan);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchScatter(const ScatterArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return cudaSuccess;
  switch (ScatterAccessBytes(args)) {
    case 16:
      return LaunchScatterAs<uint4>(args, stream);
    case 8:
      return LaunchScatterAs<uint2>(args, stream);
    case 4:
      return LaunchScatterAs<uint32_t>(args, stream);
    case 2:
      return LaunchScatterAs<uint16_t>(args, stream);
    default:
      return LaunchScatterAs<uint8_t>(args, stream);
  }
}

cudaError_t LaunchGather(const GatherArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return cudaSuccess;
  switch (GatherAccessBytes(args)) {
    case 16:
      return LaunchGatherAs<uint4>(args, stream);
    case 8:
      return LaunchGatherAs<uint2>(args, stream);
    case 4:
      return LaunchGatherAs<uint32_t>(args, stream);
    case 2:
      return LaunchGatherAs<uint16_t>(args, stream);
    default:
      return LaunchGatherAs<uint8_t>(args, stream);
  }
}

}  // namespace rangekv::kernels
