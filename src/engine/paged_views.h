// Conversion of the public paged-KV description (include/rangekv/engine.h: PagedKv, slot
// mappings) into the kernels' views, with the checks every entry point applies before any
// transfer touches the memory.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <vector>

#include "base/pack_record.h"
#include "kernels/paged_kv.h"
#include "rangekv/engine.h"
#include "rangekv/geometry.h"

namespace rangekv::engine_internal {

kernels::PagedLayout ToKernelLayout(KvCacheLayout layout);

// One view per layer of `kv`, shaped by the store's geometry (heads per rank, head size or
// MLA latent, dtype, block size). kGeometryMismatch for a wrong layer count or token size, or
// a kv.layout other than the store's `layout` (the message names both); kInvalidArgument for
// null bases, zero or too many blocks.
Status MakeLayerViews(const Geometry& geometry, KvCacheLayout layout, const PagedKv& kv,
                      std::vector<kernels::PagedKvView>* views);

// Every entry non-negative (a transferred token always has a slot) and below the view's slot
// count (kOutOfRange), and, for scatter destinations, no slot used twice (kInvalidArgument).
// For a view with opaque blocks also every whole block of the mapping (entries [jB, jB+B))
// maps to offsets 0..B-1 of one paged block (kInvalidArgument); a trailing partial block (a
// store's, which is never moved) is not checked for that.
Status ValidateMapping(const kernels::PagedKvView& view, std::span<const int64_t> slots,
                       kernels::SlotUse use);

// Records re-based for a block-opaque layout with blocks of `block_size` tokens (rangekv/layout.h,
// kCpuBlock): each record's path interval [a, b) becomes [floor(a/B)*B, floor(b/B)*B), so a
// block comes from the record holding its last token, and pack token 0 names the path position
// floor(q/B)*B, q = the path position of the pack's first token (a - pack_token_offset). Records
// left empty are dropped. Store and restore re-base the same way, so the bytes a restore reads
// are the ones the store wrote. Whole-block intervals and T % B == 0 keep every re-based record
// inside its stripe.
std::vector<PackRecord> BlockAlignedRecords(std::span<const PackRecord> records,
                                            uint64_t block_size);

}  // namespace rangekv::engine_internal
