// CUDA span digest (definition: span_digest.h). Grid: x = blocks per span, y = span. Each
// thread sums the word terms of a grid-strided share of its span's words, the block reduces
// with warp shuffles, and one atomicAdd per block folds the block's sum into the span's digest
// (zeroed first). Integer addition mod 2^64 is order-free, so the result does not depend on
// the schedule and equals the CPU reference bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_kernels.h"

namespace rangekv::kernels {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kUnroll = 4;
constexpr uint32_t kMaxBlocksTotal = 4096;
constexpr uint64_t kPairsPerThreadTarget = 8;  // 16-byte loads per thread before more blocks

// Little-endian word from `n` (<= 8) bytes at any alignment, zero-padded.
__device__ __forceinline__ uint64_t LoadWordBytes(const uint8_t* p, uint32_t n) {
  uint64_t w = 0;
  for (uint32_t i = 0; i < n; ++i) w |= uint64_t{p[i]} << (8 * i);
  return w;
}

__device__ __forceinline__ uint64_t SumPairs(const uint4* p, uint64_t pairs, uint64_t seed,
                                             uint64_t first, uint64_t stride) {
  uint64_t sum = 0;
  uint64_t j = first;
  for (; j + (kUnroll - 1) * stride < pairs; j += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (uint32_t k = 0; k < kUnroll; ++k) v[k] = __ldg(p + j + k * stride);
#pragma unroll
    for (uint32_t k = 0; k < kUnroll; ++k) {
      const uint64_t i = 2 * (j + k * stride);
      sum += DigestWordTerm(uint64_t{v[k].x} | (uint64_t{v[k].y} << 32), i, seed);
      sum += DigestWordTerm(uint64_t{v[k].z} | (uint64_t{v[k].w} << 32), i + 1, seed);
    }
  }
  for (; j < pairs; j += stride) {
    const uint4 v = __ldg(p + j);
    sum += DigestWordTerm(uint64_t{v.x} | (uint64_t{v.y} << 32), 2 * j, seed);
    sum += DigestWordTerm(uint64_t{v.z} | (uint64_t{v.w} << 32), 2 * j + 1, seed);
  }
  return sum;
}

__global__ void __launch_bounds__(kThreads) DigestKernel(DigestArgs args) {
  const DigestSpan span = args.spans[blockIdx.y];
  const uint64_t seed = args.seed;
  const uint64_t words = span.bytes / 8;  // full words
  const uint64_t first = uint64_t{blockIdx.x} * kThreads + threadIdx.x;
  const uint64_t stride = uint64_t{gridDim.x} * kThreads;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(span.data);

  uint64_t sum = 0;
  if (addr % 16 == 0) {
    sum = SumPairs(reinterpret_cast<const uint4*>(span.data), words / 2, seed, first, stride);
    if (words % 2 == 1 && first == 0) {
      sum += DigestWordTerm(
          __ldg(reinterpret_cast<const unsigned long long*>(span.data) + (words - 1)), words - 1,
          seed);
    }
  } else if (addr % 8 == 0) {
    const unsigned long long* p = reinterpret_cast<const unsigned long long*>(span.data);
    for (uint64_t j = first; j < words; j += stride) sum += DigestWordTerm(__ldg(p + j), j, seed);
  } else {
    for (uint64_t j = first; j < words; j += stride) {
      sum += DigestWordTerm(LoadWordBytes(span.data + 8 * j, 8), j, seed);
    }
  }
  if (first == 0) {
    sum += DigestLengthTerm(span.bytes, seed);
    const uint32_t tail = static_cast<uint32_t>(span.bytes % 8);
    if (tail != 0) sum += DigestWordTerm(LoadWordBytes(span.data + 8 * words, tail), words, seed);
  }

  // Block reduction: shuffle within warps, then the first warp folds the warp sums.
  for (uint32_t offset = 16; offset > 0; offset >>= 1) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  }
  __shared__ uint64_t warp_sums[kWarps];
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < kWarps ? warp_sums[lane] : 0;
    for (uint32_t offset = 16; offset > 0; offset >>= 1) {
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(args.digests + blockIdx.y),
                static_cast<unsigned long long>(sum));
    }
  }
}

// The verdict (DigestArgs::expected / mismatch): one warp compares the finished digests.
__global__ void CompareDigestsKernel(const uint64_t* digests, const uint64_t* expected, uint32_t n,
                                     uint32_t* mismatch) {
  bool bad = false;
  for (uint32_t i = threadIdx.x; i < n; i += 32) bad |= digests[i] != expected[i];
  if (__any_sync(0xffffffffu, bad) && threadIdx.x == 0) *mismatch = 1;
}

}  // namespace

cudaError_t LaunchSpanDigest(const DigestArgs& args, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(args.digests, 0, sizeof(uint64_t) * args.num_spans, stream);
  if (err != cudaSuccess) return err;
  uint64_t max_bytes = 0;
  for (uint32_t i = 0; i < args.num_spans; ++i)
    max_bytes = std::max(max_bytes, args.spans[i].bytes);
  const uint64_t per_block = uint64_t{kThreads} * kPairsPerThreadTarget * 16;
  const uint64_t wanted = (max_bytes + per_block - 1) / per_block;
  const uint64_t cap = std::max<uint64_t>(1, kMaxBlocksTotal / args.num_spans);
  const uint32_t blocks_per_span = static_cast<uint32_t>(std::clamp<uint64_t>(wanted, 1, cap));
  DigestKernel<<<dim3(blocks_per_span, args.num_spans), kThreads, 0, stream>>>(args);
  err = cudaGetLastError();
  if (err != cudaSuccess || args.expected == nullptr) return err;
  CompareDigestsKernel<<<1, 32, 0, stream>>>(args.digests, args.expected, args.num_spans,
                                             args.mismatch);
  return cudaGetLastError();
}

}  // namespace rangekv::kernels
