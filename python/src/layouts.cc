// The layout table: Python name -> tensor shape and the engine's KvCacheLayout. The one place
// that maps names.
#include <array>
#include <string>

#include "binding.h"

namespace rangekv::py {

namespace {

// physical = memory order (C-contiguous in that order); logical = the shape a framework shows
// for a tensor whose strides follow `physical` (vLLM's HND views). Both forms are accepted.
const std::array<LayoutInfo, 8> kLayouts = {{
    {"flash_attn_nhd", "2NBHD", "2NBHD", false, KvCacheLayout::kFlashAttnNhd},
    {"flash_attn_hnd", "2NHBD", "2NBHD", false, KvCacheLayout::kFlashAttnHnd},
    {"flashinfer_nhd", "N2BHD", "N2BHD", false, KvCacheLayout::kFlashInferNhd},
    {"flashinfer_hnd", "N2HBD", "N2BHD", false, KvCacheLayout::kFlashInferHnd},
    {"mla", "NBL", "NBL", true, KvCacheLayout::kMla},
    // vLLM 0.26+ FlashAttention / FlashInfer: logical [N, H, B, 2D], K = [..., :D].
    {"packed_nhd", "NBHP", "NHBP", false, KvCacheLayout::kPackedNhd},
    {"packed_hnd", "NHBP", "NHBP", false, KvCacheLayout::kPackedHnd},
    // vLLM CPU backend: [N, H, B, 2D], a block's interior is opaque (copied whole).
    {"cpu_block", "NHBP", "NHBP", false, KvCacheLayout::kCpuBlock},
}};

}  // namespace

const LayoutInfo& LayoutByName(std::string_view name) {
  for (const LayoutInfo& l : kLayouts) {
    if (l.name == name) return l;
  }
  Throw(StatusCode::kInvalidArgument,
        "unknown layout \"" + std::string(name) + "\"; expected one of " + LayoutNames());
}

std::string LayoutNames() {
  std::string out;
  for (const LayoutInfo& l : kLayouts) {
    if (!out.empty()) out += ", ";
    out += l.name;
  }
  return out;
}

}  // namespace rangekv::py
