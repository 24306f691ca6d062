// Geometry and namespace identity.
//
// A ModelSpec is what an integrator knows about the model and its parallel layout. From it
// DeriveGeometry() computes the per-rank KV shape that fixes the pack layout:
//   s = bytes per token per layer = 2 x kv_heads_per_rank x head_size x dtype_bytes
//       (MLA: latent_size x dtype_bytes; no K/V split),
//   T = tokens per stripe = floor(W / s), pack bytes = L x W; for a block-opaque layout
//       (KvCacheLayout::kCpuBlock) T is rounded down to a multiple of the block size B.
// DeriveNamespace() hashes everything that makes cached KV incompatible (model id and revision,
// semantic config, KV dtype, geometry (block size included), paged layout, tp size and rank,
// application tags). Different namespace
// = different cache; RangeKV never mixes them.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rangekv/layout.h"
#include "rangekv/status.h"

namespace rangekv {

inline constexpr uint64_t kDefaultStripeBytes = 32ull << 20;  // W, the paper's 32 MiB
inline constexpr uint64_t kIoAlignment = 4096;                // O_DIRECT / GDS alignment

struct ModelSpec {
  std::string model_id;         // e.g. "meta-llama/Llama-3.1-8B-Instruct"
  std::string revision;         // e.g. a commit hash
  std::string semantic_config;  // anything else that changes KV values (rope scaling, ...)
  std::string kv_dtype = "bf16";
  uint32_t dtype_bytes = 2;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;         // total KV heads of the model (ignored for MLA)
  uint32_t head_size = 0;        // ignored for MLA
  uint32_t mla_latent_size = 0;  // 0: not MLA; else elements per token per layer (e.g. 576)
  uint32_t block_size = 16;      // paged-KV block size in tokens
  // How the serving engine lays out paged KV (rangekv/layout.h). Part of the namespace: a
  // PagedKv handed to the engine must have this layout.
  KvCacheLayout layout = KvCacheLayout::kFlashAttnNhd;
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  std::vector<std::string> tags;  // application tags (LoRA id, tenant, ...)
};

// The per-rank KV shape. All fields are derived; construct only via DeriveGeometry().
struct Geometry {
  uint32_t layers = 0;
  uint32_t kv_heads_per_rank = 0;  // 0 for MLA
  uint32_t head_size = 0;          // 0 for MLA
  uint32_t mla_latent_size = 0;
  uint32_t dtype_bytes = 0;
  uint32_t block_size = 0;
  uint64_t token_bytes = 0;        // s
  uint64_t stripe_bytes = 0;       // W
  uint64_t tokens_per_stripe = 0;  // T
  uint64_t pack_bytes = 0;         // L x W

  bool is_mla() const { return mla_latent_size != 0; }
  // Bytes of K (or V) of one token of one layer; MLA has no split and returns token_bytes.
  uint64_t half_token_bytes() const { return is_mla() ? token_bytes : token_bytes / 2; }
  friend bool operator==(const Geometry&, const Geometry&) = default;
};

// Fails with kInvalidArgument on zero sizes, tp_rank >= tp_size, kv heads that neither divide
// nor are divided by tp_size, s > W, W not a multiple of kIoAlignment, any overflow, an MLA
// model with a non-MLA layout or the reverse, or (block-opaque layouts) W < B x s.
Result<Geometry> DeriveGeometry(const ModelSpec& spec, uint64_t stripe_bytes = kDefaultStripeBytes);

struct NamespaceId {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const NamespaceId&, const NamespaceId&) = default;
  friend auto operator<=>(const NamespaceId&, const NamespaceId&) = default;
  std::string ToHex() const;  // 32 lowercase hex digits, hi first
};

NamespaceId DeriveNamespace(const ModelSpec& spec, const Geometry& geometry);

// Named shapes used by tests, benchmarks and the demo.
ModelSpec Llama31_8BSpec();   // 32 layers, 8 KV heads x 128, bf16: s = 4096, T = 8192, 1 GiB packs
ModelSpec Llama31_70BSpec();  // 80 layers, 8 KV heads x 128, bf16
ModelSpec DeepSeekMlaSpec();  // 61 layers, MLA latent 576, bf16: s = 1152

}  // namespace rangekv
