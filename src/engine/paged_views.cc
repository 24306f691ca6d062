#include "engine/paged_views.h"

#include <optional>
#include <string>

namespace rangekv::engine_internal {

kernels::PagedLayout ToKernelLayout(KvCacheLayout layout) {
  switch (layout) {
    case KvCacheLayout::kFlashAttnNhd:
      return kernels::PagedLayout::kFlashAttnNhd;
    case KvCacheLayout::kFlashAttnHnd:
      return kernels::PagedLayout::kFlashAttnHnd;
    case KvCacheLayout::kFlashInferNhd:
      return kernels::PagedLayout::kFlashInferNhd;
    case KvCacheLayout::kFlashInferHnd:
      return kernels::PagedLayout::kFlashInferHnd;
    case KvCacheLayout::kMla:
      return kernels::PagedLayout::kMla;
    case KvCacheLayout::kPackedNhd:
      return kernels::PagedLayout::kPackedNhd;
    case KvCacheLayout::kPackedHnd:
      return kernels::PagedLayout::kPackedHnd;
    case KvCacheLayout::kCpuBlock:
      return kernels::PagedLayout::kCpuBlock;
  }
  return kernels::PagedLayout::kFlashAttnNhd;
}

Status MakeLayerViews(const Geometry& g, KvCacheLayout layout, const PagedKv& kv,
                      std::vector<kernels::PagedKvView>* views) {
  if (kv.layer_base.size() != g.layers) {
    return {StatusCode::kGeometryMismatch,
            "paged KV names " + std::to_string(kv.layer_base.size()) + " layers, the store has " +
                std::to_string(g.layers)};
  }
  if (kv.num_blocks == 0 || kv.num_blocks > UINT32_MAX) {
    return InvalidArgument("paged KV: num_blocks must be in [1, 2^32)");
  }
  if (kv.layout != layout) {
    return {StatusCode::kGeometryMismatch,
            "paged KV layout " + std::string(KvCacheLayoutName(kv.layout)) +
                " differs from the store's layout " + std::string(KvCacheLayoutName(layout)) +
                " (ModelSpec::layout)"};
  }
  kernels::PagedShape shape;
  shape.num_blocks = static_cast<uint32_t>(kv.num_blocks);
  shape.block_size = g.block_size;
  shape.num_heads = g.is_mla() ? 1 : g.kv_heads_per_rank;
  shape.head_size = g.is_mla() ? g.mla_latent_size : g.head_size;
  shape.elem_bytes = g.dtype_bytes;
  views->resize(g.layers);
  std::optional<kernels::PagedStrides> strides;
  if (kv.strides.has_value()) {
    if (g.is_mla() || IsBlockOpaque(kv.layout)) {
      return InvalidArgument("paged KV: explicit strides are for two-plane layouts, not " +
                             std::string(KvCacheLayoutName(kv.layout)));
    }
    strides = kernels::PagedStrides{.plane = kv.strides->plane,
                                    .block = kv.strides->block,
                                    .token = kv.strides->token,
                                    .head = kv.strides->head};
    RANGEKV_RETURN_IF_ERROR(kernels::CheckStridedLayersDisjoint(shape, *strides, kv.layer_base));
  }
  for (uint32_t l = 0; l < g.layers; ++l) {
    auto v = strides.has_value()
                 ? kernels::MakeStridedPagedKvView(shape, *strides, kv.layer_base[l])
                 : kernels::MakePagedKvView(ToKernelLayout(kv.layout), shape, kv.layer_base[l]);
    if (!v.ok()) return v.status().WithContext("paged KV layer " + std::to_string(l));
    if (v->token_bytes() != g.token_bytes) {
      return {StatusCode::kGeometryMismatch, "paged KV token bytes differ from the store's"};
    }
    (*views)[l] = *v;
  }
  return OkStatus();
}

Status ValidateMapping(const kernels::PagedKvView& view, std::span<const int64_t> slots,
                       kernels::SlotUse use) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0) {
      return InvalidArgument("slot mapping entry " + std::to_string(i) +
                             " is negative: every transferred token needs a slot");
    }
  }
  RANGEKV_RETURN_IF_ERROR(kernels::ValidateSlotMapping(view, slots, use));
  if (view.opaque_blocks != 0) {
    return kernels::ValidateBlockMapping(
        view, slots.first(slots.size() - slots.size() % view.block_size));
  }
  return OkStatus();
}

std::vector<PackRecord> BlockAlignedRecords(std::span<const PackRecord> records,
                                            uint64_t block_size) {
  std::vector<PackRecord> out;
  out.reserve(records.size());
  auto down = [&](uint64_t x) { return x - x % block_size; };
  for (const PackRecord& r : records) {
    const uint64_t begin = down(r.path_token_begin);
    const uint64_t end = down(r.path_token_end());
    if (end <= begin) continue;
    const uint64_t pack_first = down(r.path_token_begin - r.pack_token_offset);
    PackRecord a = r;
    a.path_token_begin = begin;
    a.pack_token_offset = begin - pack_first;
    a.tokens = end - begin;
    out.push_back(a);
  }
  return out;
}

}  // namespace rangekv::engine_internal
