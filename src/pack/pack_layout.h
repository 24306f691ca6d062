// PackLayout: where the bytes of a pack slot live. A plain value computed from a pack file's
// header (geometry, pack count, data offset).
//
// This is the ONE place that maps a pack slot to (file, byte offset). Today a store is one
// pack file, so every slot is in file 0 at data_offset + slot * pack_bytes. The design plans
// stores that place packs across several files on different drives; that change is meant to
// touch Locate() and the file list only, while the span planner and the I/O engines already
// carry a file index.
//
// Addressing inside a slot: layer l's stripe is [l*W, (l+1)*W); token t of that stripe is at
// t*s. So the byte of (slot, layer l, token t) is Locate(slot).slot_offset + l*W + t*s.
//
// Invariants (established by Make): the geometry passes ValidatePackGeometry; pack_count is
// in [1, kMaxPackCount]; data_offset is a multiple of kIoAlignment in [kHeaderPageBytes,
// kMaxDataOffset]; data_offset + pack_count * pack_bytes <= kMaxFileBytes (no overflow
// anywhere below). Hence every slot and every stripe starts on a kIoAlignment boundary.
//
// Thread-safety: immutable value; share freely.
#pragma once

#include <cstdint>

#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

// OK when `g` is self-consistent and within the format's bounds: layers in [1, kMaxLayers];
// dtype_bytes in [1, kMaxDtypeBytes]; block_size > 0; s equals 2 x kv_heads_per_rank x
// head_size x dtype_bytes (or latent x dtype_bytes for MLA, with heads and head size 0);
// 0 < s <= W; W a multiple of kIoAlignment and <= kMaxStripeBytes; T == floor(W/s) or, for a
// block-opaque paged layout, floor(W/s) rounded down to a positive multiple of block_size;
// pack_bytes == L*W. Otherwise kInvalidArgument naming the first broken rule.
Status ValidatePackGeometry(const Geometry& g);

struct PackLocation {
  uint32_t file_index = 0;   // which file of the store (always 0 today)
  uint64_t slot_offset = 0;  // byte offset of the slot's first stripe in that file
  friend bool operator==(const PackLocation&, const PackLocation&) = default;
};

class PackLayout {
 public:
  // Fails with kInvalidArgument when the invariants above do not hold.
  static Result<PackLayout> Make(const Geometry& geometry, uint64_t pack_count,
                                 uint64_t data_offset);

  const Geometry& geometry() const { return geometry_; }
  uint64_t pack_count() const { return pack_count_; }
  uint64_t data_offset() const { return data_offset_; }
  // N * L * W: payload capacity of the store.
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  // data_offset + N * L * W: the smallest valid size of file 0.
  uint64_t file_bytes() const { return data_offset_ + capacity_bytes_; }

  // Where slot `slot` lives. kOutOfRange when slot >= pack_count.
  Result<PackLocation> Locate(uint64_t slot) const;

  // Byte offset, inside file Locate(slot).file_index, of token `token_in_pack` of layer
  // `layer` of slot `slot`: slot_base + layer*W + token_in_pack*s. token_in_pack == T is
  // allowed (one past the last token) so callers can compute end offsets.
  // REQUIRES: slot < pack_count, layer < L, token_in_pack <= T (checked in debug builds; the
  // invariants above make the arithmetic overflow-free when they hold).
  uint64_t Address(uint64_t slot, uint32_t layer, uint64_t token_in_pack) const;

 private:
  PackLayout(const Geometry& geometry, uint64_t pack_count, uint64_t data_offset,
             uint64_t capacity_bytes)
      : geometry_(geometry),
        pack_count_(pack_count),
        data_offset_(data_offset),
        capacity_bytes_(capacity_bytes) {}
  // REQUIRES: slot < pack_count.
  PackLocation LocateUnchecked(uint64_t slot) const;

  Geometry geometry_;
  uint64_t pack_count_;
  uint64_t data_offset_;
  uint64_t capacity_bytes_;
};

}  // namespace rangekv
