#include "kernels/paged_kv.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/units.h"

namespace rangekv::kernels {
namespace {

using i128 = __int128;

std::string ShapeString(const PagedShape& s) {
  return "num_blocks=" + std::to_string(s.num_blocks) +
         " block_size=" + std::to_string(s.block_size) +
         " num_heads=" + std::to_string(s.num_heads) + " head_size=" + std::to_string(s.head_size) +
         " elem_bytes=" + std::to_string(s.elem_bytes);
}

struct Dim {
  i128 stride;  // bytes, possibly negative
  uint64_t extent;
};

// The dimensions of a view that can take more than one value, with the plane dimension
// expressed as the (possibly huge or negative) distance between the two plane bases.
std::vector<Dim> ViewDims(const PagedKvView& v) {
  std::vector<Dim> dims;
  if (v.num_planes == 2) {
    dims.push_back({static_cast<i128>(reinterpret_cast<uintptr_t>(v.plane_base[1])) -
                        static_cast<i128>(reinterpret_cast<uintptr_t>(v.plane_base[0])),
                    2});
  }
  if (v.num_blocks > 1) dims.push_back({v.block_stride_bytes, v.num_blocks});
  if (v.block_size > 1) dims.push_back({v.token_stride_bytes, v.block_size});
  if (v.num_heads > 1) dims.push_back({v.head_stride_bytes, v.num_heads});
  return dims;
}

i128 Abs(i128 x) { return x < 0 ? -x : x; }

// [lo, hi) of every byte the view can address. REQUIRES: a structurally valid view.
struct Range {
  i128 lo;
  i128 hi;
};
Range ViewRange(const PagedKvView& v) {
  i128 lo = static_cast<i128>(reinterpret_cast<uintptr_t>(v.plane_base[0]));
  i128 hi = lo + v.head_bytes;
  for (const Dim& d : ViewDims(v)) {
    const i128 reach = d.stride * static_cast<i128>(d.extent - 1);
    if (reach < 0) {
      lo += reach;
    } else {
      hi += reach;
    }
  }
  return {lo, hi};
}

Range BufferRange(const void* p, uint64_t bytes) {
  const i128 lo = static_cast<i128>(reinterpret_cast<uintptr_t>(p));
  return {lo, lo + static_cast<i128>(bytes)};
}

bool Overlaps(const Range& a, const Range& b) { return a.lo < b.hi && b.lo < a.hi; }

uint32_t WidestDividing(std::initializer_list<uint64_t> values, uint32_t start) {
  uint32_t w = start;
  for (uint64_t v : values) {
    while (w > 1 && v % w != 0) w /= 2;
  }
  return w;
}

uint32_t ViewAccessBytes(const PagedKvView& v, uint32_t start) {
  uint32_t w = WidestDividing({v.head_bytes, reinterpret_cast<uintptr_t>(v.plane_base[0]),
                               reinterpret_cast<uintptr_t>(v.plane_base[1])},
                              start);
  // Strides of single-valued dimensions never multiply a non-zero index.
  if (v.num_blocks > 1) w = WidestDividing({static_cast<uint64_t>(v.block_stride_bytes)}, w);
  if (v.block_size > 1) w = WidestDividing({static_cast<uint64_t>(v.token_stride_bytes)}, w);
  if (v.num_heads > 1) w = WidestDividing({static_cast<uint64_t>(v.head_stride_bytes)}, w);
  return w;
}

}  // namespace

Result<uint64_t> PagedLayerBytes(PagedLayout layout, const PagedShape& s) {
  if (s.num_blocks == 0 || s.block_size == 0 || s.num_heads == 0 || s.head_size == 0 ||
      s.elem_bytes == 0) {
    return InvalidArgument("paged shape has a zero size: " + ShapeString(s));
  }
  if (layout == PagedLayout::kMla && s.num_heads != 1) {
    return InvalidArgument("MLA paged shape must have num_heads == 1: " + ShapeString(s));
  }
  // kCpuBlock is [N, H, B, 2D]: as many bytes as two planes of [N, B, H, D].
  const uint64_t planes = layout == PagedLayout::kMla ? 1 : 2;
  std::optional<uint64_t> bytes = uint64_t{s.head_size} * s.elem_bytes;  // < 2^64
  for (uint64_t f :
       {uint64_t{s.num_heads}, uint64_t{s.block_size}, uint64_t{s.num_blocks}, planes}) {
    bytes = CheckedMul(*bytes, f);
    if (!bytes) return InvalidArgument("paged layer bytes overflow: " + ShapeString(s));
  }
  return *bytes;
}

Result<PagedKvView> MakePagedKvView(PagedLayout layout, const PagedShape& s, void* layer_base) {
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t layer_bytes, PagedLayerBytes(layout, s));
  if (layer_base == nullptr) return InvalidArgument("paged layer base is null");
  if (layer_bytes > static_cast<uint64_t>(INT64_MAX)) {
    return InvalidArgument("paged layer larger than 2^63 bytes");
  }
  const int64_t hb = int64_t{s.head_size} * s.elem_bytes;
  const int64_t bh = int64_t{s.block_size} * s.num_heads * hb;  // one plane of one block
  uint8_t* base = static_cast<uint8_t*>(layer_base);

  PagedKvView v;
  v.num_blocks = s.num_blocks;
  v.block_size = s.block_size;
  v.num_heads = s.num_heads;
  v.head_bytes = static_cast<uint32_t>(hb);
  v.elem_bytes = s.elem_bytes;
  if (uint64_t{s.head_size} * s.elem_bytes > UINT32_MAX) {
    return InvalidArgument("head vector larger than 4 GiB: " + ShapeString(s));
  }
  switch (layout) {
    case PagedLayout::kFlashAttnNhd:  // [2, N, B, H, D]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + int64_t{s.num_blocks} * bh;
      v.block_stride_bytes = bh;
      v.token_stride_bytes = int64_t{s.num_heads} * hb;
      v.head_stride_bytes = hb;
      break;
    case PagedLayout::kFlashAttnHnd:  // [2, N, H, B, D]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + int64_t{s.num_blocks} * bh;
      v.block_stride_bytes = bh;
      v.token_stride_bytes = hb;
      v.head_stride_bytes = int64_t{s.block_size} * hb;
      break;
    case PagedLayout::kFlashInferNhd:  // [N, 2, B, H, D]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + bh;
      v.block_stride_bytes = 2 * bh;
      v.token_stride_bytes = int64_t{s.num_heads} * hb;
      v.head_stride_bytes = hb;
      break;
    case PagedLayout::kFlashInferHnd:  // [N, 2, H, B, D]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + bh;
      v.block_stride_bytes = 2 * bh;
      v.token_stride_bytes = hb;
      v.head_stride_bytes = int64_t{s.block_size} * hb;
      break;
    case PagedLayout::kPackedNhd:  // [N, B, H, 2D]: K = [..., :D], V = [..., D:]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + hb;
      v.block_stride_bytes = 2 * bh;
      v.token_stride_bytes = 2 * int64_t{s.num_heads} * hb;
      v.head_stride_bytes = 2 * hb;
      break;
    case PagedLayout::kPackedHnd:  // [N, H, B, 2D]
      v.num_planes = 2;
      v.plane_base[0] = base;
      v.plane_base[1] = base + hb;
      v.block_stride_bytes = 2 * bh;
      v.token_stride_bytes = 2 * hb;
      v.head_stride_bytes = 2 * int64_t{s.block_size} * hb;
      break;
    case PagedLayout::kCpuBlock: {  // [N, H, B, 2D], each block B * s opaque bytes
      const int64_t token = 2 * int64_t{s.num_heads} * hb;  // s
      if (token > UINT32_MAX) {
        return InvalidArgument("opaque-block token row larger than 4 GiB: " + ShapeString(s));
      }
      v.num_planes = 1;
      v.plane_base[0] = base;
      v.plane_base[1] = nullptr;
      v.num_heads = 1;
      v.head_bytes = static_cast<uint32_t>(token);
      v.block_stride_bytes = 2 * bh;
      v.token_stride_bytes = token;
      v.head_stride_bytes = token;
      v.opaque_blocks = 1;
      break;
    }
    case PagedLayout::kMla:  // [N, B, latent]
      v.num_planes = 1;
      v.plane_base[0] = base;
      v.plane_base[1] = nullptr;
      v.block_stride_bytes = bh;
      v.token_stride_bytes = hb;
      v.head_stride_bytes = hb;
      break;
  }
  RANGEKV_RETURN_IF_ERROR(ValidatePagedKvView(v));
  return v;
}

Result<PagedKvView> MakeStridedPagedKvView(const PagedShape& s, const PagedStrides& st,
                                           void* layer_base) {
  // The dense size check of a named layout bounds the sizes the same way.
  RANGEKV_RETURN_IF_ERROR(PagedLayerBytes(PagedLayout::kFlashInferNhd, s).status());
  if (layer_base == nullptr) return InvalidArgument("paged layer base is null");
  if (st.plane < 0 || st.block < 0 || st.token < 0 || st.head < 0) {
    return InvalidArgument("explicit paged KV strides must not be negative");
  }
  if (uint64_t{s.head_size} * s.elem_bytes > UINT32_MAX) {
    return InvalidArgument("head vector larger than 4 GiB: " + ShapeString(s));
  }
  uint8_t* base = static_cast<uint8_t*>(layer_base);
  PagedKvView v;
  v.num_planes = 2;
  v.plane_base[0] = base;
  v.plane_base[1] = base + st.plane;
  v.block_stride_bytes = st.block;
  v.token_stride_bytes = st.token;
  v.head_stride_bytes = st.head;
  v.num_blocks = s.num_blocks;
  v.block_size = s.block_size;
  v.num_heads = s.num_heads;
  v.head_bytes = static_cast<uint32_t>(uint64_t{s.head_size} * s.elem_bytes);
  v.elem_bytes = s.elem_bytes;
  RANGEKV_RETURN_IF_ERROR(ValidatePagedKvView(v));
  return v;
}

Status CheckStridedLayersDisjoint(const PagedShape& s, const PagedStrides& st,
                                  std::span<void* const> layer_bases) {
  if (layer_bases.empty()) return OkStatus();
  // Separate allocations (each layer's address range apart from the others') never share a
  // byte; only layers whose ranges meet need the finer check below.
  std::vector<Range> ranges;
  for (void* b : layer_bases) {
    RANGEKV_ASSIGN_OR_RETURN(const PagedKvView v, MakeStridedPagedKvView(s, st, b));
    ranges.push_back(ViewRange(v));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.lo < b.lo; });
  bool apart = true;
  for (size_t i = 1; i < ranges.size(); ++i) apart = apart && ranges[i - 1].hi <= ranges[i].lo;
  if (apart) return OkStatus();
  const i128 head_bytes = i128{s.head_size} * s.elem_bytes;
  i128 lowest = static_cast<i128>(reinterpret_cast<uintptr_t>(layer_bases[0]));
  for (void* b : layer_bases) {
    lowest = std::min(lowest, static_cast<i128>(reinterpret_cast<uintptr_t>(b)));
  }
  struct Interval {
    i128 lo;
    size_t layer;
  };
  std::vector<Interval> all;
  all.reserve(layer_bases.size() * 2 * s.block_size * s.num_heads);
  for (size_t l = 0; l < layer_bases.size(); ++l) {
    const i128 base = static_cast<i128>(reinterpret_cast<uintptr_t>(layer_bases[l])) - lowest;
    for (uint32_t p = 0; p < 2; ++p) {
      for (uint32_t t = 0; t < s.block_size; ++t) {
        for (uint32_t h = 0; h < s.num_heads; ++h) {
          const i128 lo = base + i128{p} * st.plane + i128{t} * st.token + i128{h} * st.head;
          if (s.num_blocks > 1 && lo + head_bytes > st.block) {
            return InvalidArgument(
                "paged KV layers overlap in memory and layer " + std::to_string(l) +
                " reaches past one block stride of the lowest layer: layers with explicit "
                "strides must lie apart or interleave inside each block (a cross-layer "
                "allocation)");
          }
          all.push_back({lo, l});
        }
      }
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Interval& a, const Interval& b) { return a.lo < b.lo; });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].lo < all[i - 1].lo + head_bytes) {
      return InvalidArgument("paged KV layers " + std::to_string(all[i - 1].layer) + " and " +
                             std::to_string(all[i].layer) +
                             " share bytes: a restore needs one distinct position per layer");
    }
  }
  return OkStatus();
}

Status ValidatePagedKvView(const PagedKvView& v) {
  if (v.num_planes != 1 && v.num_planes != 2) {
    return InvalidArgument("paged view num_planes must be 1 or 2, got " +
                           std::to_string(v.num_planes));
  }
  if (v.plane_base[0] == nullptr) return InvalidArgument("paged view plane 0 base is null");
  if (v.num_planes == 2 && v.plane_base[1] == nullptr) {
    return InvalidArgument("paged view has 2 planes but the V base is null");
  }
  if (v.num_planes == 1 && v.plane_base[1] != nullptr) {
    return InvalidArgument("paged view has 1 plane but a non-null V base");
  }
  if (v.num_blocks == 0 || v.block_size == 0 || v.num_heads == 0 || v.head_bytes == 0 ||
      v.elem_bytes == 0) {
    return InvalidArgument("paged view has a zero size");
  }
  if (v.opaque_blocks > 1) return InvalidArgument("paged view opaque_blocks must be 0 or 1");
  if (v.opaque_blocks == 1 && (v.num_planes != 1 || v.num_heads != 1 ||
                               v.token_stride_bytes != static_cast<int64_t>(v.head_bytes))) {
    return InvalidArgument(
        "paged view with opaque blocks must have one plane, one head and token stride == "
        "head_bytes (a block is one contiguous run of block_size rows)");
  }
  if (v.head_bytes % v.elem_bytes != 0) {
    return InvalidArgument("paged view head_bytes " + std::to_string(v.head_bytes) +
                           " is not a multiple of elem_bytes " + std::to_string(v.elem_bytes));
  }
  if (uint64_t{v.num_blocks} * v.block_size > UINT32_MAX) {
    return InvalidArgument("paged view has 2^32 or more slots");
  }
  // Injectivity: with the varying dimensions sorted by |stride|, each stride must clear the
  // whole extent of the dimensions below it (the innermost must clear one head vector). Then the
  // highest differing index of two positions moves the address further than all lower indices
  // together can, so distinct positions never share a byte.
  std::vector<Dim> dims = ViewDims(v);
  std::sort(dims.begin(), dims.end(),
            [](const Dim& a, const Dim& b) { return Abs(a.stride) < Abs(b.stride); });
  i128 reach = v.head_bytes;  // bytes covered by the dimensions below the current one
  for (const Dim& d : dims) {
    if (Abs(d.stride) < reach) {
      return InvalidArgument("paged view strides overlap: a stride of " +
                             std::to_string(static_cast<int64_t>(d.stride)) +
                             " bytes is smaller than the " +
                             std::to_string(static_cast<uint64_t>(reach)) +
                             " bytes spanned by the dimensions inside it");
    }
    reach = Abs(d.stride) * static_cast<i128>(d.extent);
  }
  const Range r = ViewRange(v);
  if (r.lo < 0 || r.hi > (static_cast<i128>(1) << 64)) {
    return InvalidArgument("paged view address range wraps around the address space");
  }
  return OkStatus();
}

Status ValidateSlotMapping(const PagedKvView& view, std::span<const int64_t> slots, SlotUse use) {
  std::vector<int64_t> used;
  used.reserve(slots.size());
  const int64_t limit = view.num_slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0) continue;
    if (s >= limit) {
      return {StatusCode::kOutOfRange, "slot " + std::to_string(s) + " of token " +
                                           std::to_string(i) + " is beyond the view's " +
                                           std::to_string(limit) + " slots"};
    }
    used.push_back(s);
  }
  if (use == SlotUse::kScatterDestination) {
    std::sort(used.begin(), used.end());
    auto dup = std::adjacent_find(used.begin(), used.end());
    if (dup != used.end()) {
      return InvalidArgument("slot " + std::to_string(*dup) +
                             " is the destination of more than one token");
    }
  }
  return OkStatus();
}

Status ValidateBlockMapping(const PagedKvView& view, std::span<const int64_t> slots) {
  const uint64_t b = view.block_size;
  if (b == 0) return InvalidArgument("block mapping: block size is 0");
  if (slots.size() % b != 0) {
    return InvalidArgument("slot mapping of " + std::to_string(slots.size()) +
                           " tokens is not a whole number of " + std::to_string(b) +
                           "-token blocks (blocks of this layout move only whole)");
  }
  for (size_t j = 0; j < slots.size(); j += b) {
    const int64_t first = slots[j];
    bool ok = first >= 0 && static_cast<uint64_t>(first) % b == 0;
    for (uint64_t k = 1; ok && k < b; ++k) ok = slots[j + k] == first + static_cast<int64_t>(k);
    if (!ok) {
      return InvalidArgument("slot mapping tokens [" + std::to_string(j) + ", " +
                             std::to_string(j + b) + ") do not map to offsets 0.." +
                             std::to_string(b - 1) + " of one block (first slot " +
                             std::to_string(first) + "); this layout moves whole blocks only");
    }
  }
  return OkStatus();
}

Status ValidateScatterArgs(const ScatterArgs& a) {
  RANGEKV_RETURN_IF_ERROR(ValidatePagedKvView(a.dst));
  if (a.dst.opaque_blocks != 0 && a.num_tokens % a.dst.block_size != 0) {
    return InvalidArgument("scatter of " + std::to_string(a.num_tokens) +
                           " tokens into opaque blocks of " + std::to_string(a.dst.block_size) +
                           " tokens: not a whole number of blocks");
  }
  if (a.num_tokens == 0) return OkStatus();
  if (a.stripe == nullptr) return InvalidArgument("scatter stripe is null");
  if (a.slots == nullptr) return InvalidArgument("scatter slot mapping is null");
  const uint64_t bytes = uint64_t{a.num_tokens} * a.dst.token_bytes();
  if (bytes > kMaxLaunchBytesPerLayer) {
    return InvalidArgument("scatter of " + std::to_string(bytes) +
                           " bytes exceeds the per-launch limit");
  }
  const Range view = ViewRange(a.dst);
  if (Overlaps(view, BufferRange(a.stripe, bytes))) {
    return InvalidArgument("scatter stripe overlaps the paged KV it is scattered into");
  }
  if (Overlaps(view, BufferRange(a.slots, uint64_t{a.num_tokens} * sizeof(int64_t)))) {
    return InvalidArgument("scatter slot mapping overlaps the paged KV it addresses");
  }
  return OkStatus();
}

Status ValidateGatherArgs(const GatherArgs& a) {
  if (a.num_layers == 0 || a.num_layers > kMaxGatherLayers) {
    return InvalidArgument("gather num_layers must be in [1, " + std::to_string(kMaxGatherLayers) +
                           "], got " + std::to_string(a.num_layers));
  }
  for (uint32_t g = 0; g < a.num_layers; ++g) {
    Status s = ValidatePagedKvView(a.src[g]);
    if (!s.ok()) return s.WithContext("gather layer " + std::to_string(g));
    const PagedKvView& v = a.src[g];
    const PagedKvView& v0 = a.src[0];
    if (v.num_planes != v0.num_planes || v.num_heads != v0.num_heads ||
        v.head_bytes != v0.head_bytes || v.block_size != v0.block_size ||
        v.opaque_blocks != v0.opaque_blocks) {
      return InvalidArgument("gather layer " + std::to_string(g) +
                             " has another shape (planes, heads, head bytes, block size or "
                             "opaque blocks) than layer 0");
    }
  }
  if (a.src[0].opaque_blocks != 0 && a.num_tokens % a.src[0].block_size != 0) {
    return InvalidArgument("gather of " + std::to_string(a.num_tokens) +
                           " tokens from opaque blocks of " + std::to_string(a.src[0].block_size) +
                           " tokens: not a whole number of blocks");
  }
  if (a.num_tokens == 0) return OkStatus();
  if (a.slots == nullptr) return InvalidArgument("gather slot mapping is null");
  if (a.out == nullptr) return InvalidArgument("gather output is null");
  const uint64_t layer_bytes = uint64_t{a.num_tokens} * a.src[0].token_bytes();
  if (layer_bytes > kMaxLaunchBytesPerLayer) {
    return InvalidArgument("gather of " + std::to_string(layer_bytes) +
                           " bytes per layer exceeds the per-launch limit");
  }
  if (a.num_layers > 1 && a.out_layer_stride_bytes < layer_bytes) {
    return InvalidArgument("gather output layer stride " +
                           std::to_string(a.out_layer_stride_bytes) +
                           " is smaller than a layer's " + std::to_string(layer_bytes) + " bytes");
  }
  const i128 out_bytes =
      static_cast<i128>(a.out_layer_stride_bytes) * (a.num_layers - 1) + layer_bytes;
  const Range out = BufferRange(a.out, 0);
  const Range out_range{out.lo, out.lo + out_bytes};
  if (out_range.hi > (static_cast<i128>(1) << 64)) {
    return InvalidArgument("gather output range wraps around the address space");
  }
  const Range slots = BufferRange(a.slots, uint64_t{a.num_tokens} * sizeof(int64_t));
  if (Overlaps(out_range, slots)) {
    return InvalidArgument("gather output overlaps its slot mapping");
  }
  for (uint32_t g = 0; g < a.num_layers; ++g) {
    if (Overlaps(ViewRange(a.src[g]), out_range)) {
      return InvalidArgument("gather output overlaps the paged KV of layer " + std::to_string(g));
    }
  }
  return OkStatus();
}

uint32_t ScatterAccessBytes(const ScatterArgs& a) {
  return WidestDividing({reinterpret_cast<uintptr_t>(a.stripe)}, ViewAccessBytes(a.dst, 16));
}

uint32_t GatherAccessBytes(const GatherArgs& a) {
  uint32_t w = WidestDividing({reinterpret_cast<uintptr_t>(a.out)}, 16);
  if (a.num_layers > 1) w = WidestDividing({a.out_layer_stride_bytes}, w);
  for (uint32_t g = 0; g < a.num_layers && g < kMaxGatherLayers; ++g) {
    w = ViewAccessBytes(a.src[g], w);
  }
  return w;
}

}  // namespace rangekv::kernels
