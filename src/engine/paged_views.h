// Conversion of the public paged-KV description (include/rangekv/engine.h: PagedKv, slot
// mappings) into the kernels' views, with the checks every entry point applies before any
// transfer touches the memory.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <vector>

#include "kernels/paged_kv.h"
#include "rangekv/engine.h"
#include "rangekv/geometry.h"

namespace rangekv::engine_internal {

kernels::PagedLayout ToKernelLayout(KvCacheLayout layout);

// One view per layer of `kv`, shaped by the store's geometry (heads per rank, head size or
// MLA latent, dtype, block size). kGeometryMismatch for a wrong layer count, token size or an
// MLA / non-MLA mix-up; kInvalidArgument for null bases, zero or too many blocks.
Status MakeLayerViews(const Geometry& geometry, const PagedKv& kv,
                      std::vector<kernels::PagedKvView>* views);

// Every entry non-negative (a transferred token always has a slot) and below the view's slot
// count (kOutOfRange), and, for scatter destinations, no slot used twice (kInvalidArgument).
Status ValidateMapping(const kernels::PagedKvView& view, std::span<const int64_t> slots,
                       kernels::SlotUse use);

}  // namespace rangekv::engine_internal
