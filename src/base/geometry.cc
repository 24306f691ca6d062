#include "rangekv/geometry.h"

#include <cstdio>

#include "base/digest.h"
#include "base/units.h"

namespace rangekv {

Result<Geometry> DeriveGeometry(const ModelSpec& spec, uint64_t stripe_bytes) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (spec.layers == 0) return bad("geometry: layers must be > 0");
  if (spec.dtype_bytes == 0) return bad("geometry: dtype_bytes must be > 0");
  if (spec.block_size == 0) return bad("geometry: block_size must be > 0");
  if (spec.tp_size == 0) return bad("geometry: tp_size must be > 0");
  if (spec.tp_rank >= spec.tp_size) {
    return bad("geometry: tp_rank " + std::to_string(spec.tp_rank) + " >= tp_size " +
               std::to_string(spec.tp_size));
  }
  if (stripe_bytes == 0 || !IsAligned(stripe_bytes, kIoAlignment)) {
    return bad("geometry: stripe bytes must be a positive multiple of " +
               std::to_string(kIoAlignment));
  }

  Geometry g;
  g.layers = spec.layers;
  g.dtype_bytes = spec.dtype_bytes;
  g.block_size = spec.block_size;
  g.stripe_bytes = stripe_bytes;
  std::optional<uint64_t> s;
  if (spec.mla_latent_size != 0) {
    // MLA's latent is replicated on every TP rank: each rank stores the whole latent.
    g.mla_latent_size = spec.mla_latent_size;
    s = CheckedMul(spec.mla_latent_size, spec.dtype_bytes);
  } else {
    if (spec.kv_heads == 0) return bad("geometry: kv_heads must be > 0");
    if (spec.head_size == 0) return bad("geometry: head_size must be > 0");
    if (spec.kv_heads % spec.tp_size == 0) {
      g.kv_heads_per_rank = spec.kv_heads / spec.tp_size;
    } else if (spec.tp_size % spec.kv_heads == 0) {
      // More ranks than KV heads: each head is replicated on tp_size / kv_heads ranks, so
      // each rank holds one head (vLLM's behaviour).
      g.kv_heads_per_rank = 1;
    } else {
      return bad("geometry: " + std::to_string(spec.kv_heads) +
                 " kv heads cannot be split over tp_size " + std::to_string(spec.tp_size));
    }
    g.head_size = spec.head_size;
    auto per_head = CheckedMul(spec.head_size, spec.dtype_bytes);
    auto k_bytes = per_head ? CheckedMul(*per_head, g.kv_heads_per_rank) : std::nullopt;
    s = k_bytes ? CheckedMul(*k_bytes, 2) : std::nullopt;
  }
  if (!s) return bad("geometry: bytes per token overflow");
  g.token_bytes = *s;
  if (g.token_bytes > stripe_bytes) {
    return bad("geometry: bytes per token per layer " + std::to_string(g.token_bytes) +
               " exceed stripe bytes " + std::to_string(stripe_bytes));
  }
  if ((spec.layout == KvCacheLayout::kMla) != g.is_mla()) {
    return bad(std::string("geometry: layout ") + std::string(KvCacheLayoutName(spec.layout)) +
               (g.is_mla() ? " is not MLA but the model is" : " is MLA but the model is not"));
  }
  g.tokens_per_stripe = stripe_bytes / g.token_bytes;
  if (IsBlockOpaque(spec.layout)) {
    // Opaque blocks never straddle two stripes: T is a whole number of blocks.
    g.tokens_per_stripe -= g.tokens_per_stripe % spec.block_size;
    if (g.tokens_per_stripe == 0) {
      return bad("geometry: a stripe of " + std::to_string(stripe_bytes) +
                 " bytes cannot hold one block of " + std::to_string(spec.block_size) +
                 " tokens x " + std::to_string(g.token_bytes) + " bytes (layout " +
                 std::string(KvCacheLayoutName(spec.layout)) + ")");
    }
  }
  auto pack = CheckedMul(stripe_bytes, spec.layers);
  if (!pack) return bad("geometry: pack bytes overflow");
  g.pack_bytes = *pack;
  return g;
}

std::string_view KvCacheLayoutName(KvCacheLayout layout) {
  switch (layout) {
    case KvCacheLayout::kFlashAttnNhd:
      return "flash_attn_nhd";
    case KvCacheLayout::kFlashAttnHnd:
      return "flash_attn_hnd";
    case KvCacheLayout::kFlashInferNhd:
      return "flashinfer_nhd";
    case KvCacheLayout::kFlashInferHnd:
      return "flashinfer_hnd";
    case KvCacheLayout::kMla:
      return "mla";
    case KvCacheLayout::kPackedNhd:
      return "packed_nhd";
    case KvCacheLayout::kPackedHnd:
      return "packed_hnd";
    case KvCacheLayout::kCpuBlock:
      return "cpu_block";
  }
  return "unknown";
}

std::string NamespaceId::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

NamespaceId DeriveNamespace(const ModelSpec& spec, const Geometry& g) {
  // Field-tagged, length-prefixed encoding so no two distinct specs serialize alike.
  Hasher64 lo(0x52414e47454b5631ull);  // "RANGEKV1"
  Hasher64 hi(0x6e616d6573706163ull);  // "namespac"
  auto both = [&](auto&& fn) {
    fn(lo);
    fn(hi);
  };
  both([&](Hasher64& h) {
    h.UpdateString("model_id");
    h.UpdateString(spec.model_id);
    h.UpdateString("revision");
    h.UpdateString(spec.revision);
    h.UpdateString("semantic_config");
    h.UpdateString(spec.semantic_config);
    h.UpdateString("kv_dtype");
    h.UpdateString(spec.kv_dtype);
    for (uint64_t v :
         {uint64_t{g.layers}, uint64_t{g.kv_heads_per_rank}, uint64_t{g.head_size},
          uint64_t{g.mla_latent_size}, uint64_t{g.dtype_bytes}, uint64_t{g.block_size},
          g.token_bytes, g.stripe_bytes, uint64_t{spec.tp_size}, uint64_t{spec.tp_rank}}) {
      h.UpdateU64(v);
    }
    h.UpdateString("layout");
    h.UpdateU64(static_cast<uint64_t>(spec.layout));
    h.UpdateU64(spec.tags.size());
    for (const auto& t : spec.tags) h.UpdateString(t);
  });
  return NamespaceId{lo.Finish(), hi.Finish()};
}

ModelSpec Llama31_8BSpec() {
  ModelSpec s;
  s.model_id = "meta-llama/Llama-3.1-8B-Instruct";
  s.revision = "main";
  s.layers = 32;
  s.kv_heads = 8;
  s.head_size = 128;
  return s;
}

ModelSpec Llama31_70BSpec() {
  ModelSpec s = Llama31_8BSpec();
  s.model_id = "meta-llama/Llama-3.1-70B-Instruct";
  s.layers = 80;
  return s;
}

ModelSpec DeepSeekMlaSpec() {
  ModelSpec s;
  s.model_id = "deepseek-ai/DeepSeek-V3";
  s.revision = "main";
  s.layers = 61;
  s.mla_latent_size = 576;
  s.block_size = 64;
  s.layout = KvCacheLayout::kMla;
  return s;
}

}  // namespace rangekv
