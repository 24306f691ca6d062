// PackManifest and RunEntry: what the cluster tier writes about a published pack
// (docs/scale-out.md "Formats").
//
// A published pack is one immutable object in the bucket: for each layer l, the stored tokens'
// bytes of the pack's stripe, token-major as in the pack file, at object offset
// l * stripe_pitch, where stripe_pitch = stored_tokens * s rounded up to 4096. Its MANIFEST,
// stored beside it (`<object>.manifest`), says everything a reader on another node needs and
// nothing it must trust without checking: the namespace and geometry (a mismatch is a miss),
// the path position and tokens of the run, the key of the run's parent path in the cluster
// directory, the extent table (per layer group: layers, object offset, bytes), the payload
// digests of every digest block of every layer (the pack file's own, docs/pack-format.md
// "DIGESTS"), the multipart part size, and the publishing store and generation. It ends in an
// XXH3-64 checksum of every byte before it.
//
// A RUN ENTRY is the cluster directory's value for one published run (one per pack, never per
// chunk, layer or rank): the object id, path position, the run's tokens (compared on lookup, so
// a hit is exact, never a hash match of the run itself) and the object's size and pitch.
//
// Decoding is bounded and total: every count is checked against the bytes that remain and
// against format.h's bounds before anything is allocated; any inconsistency is kCorruption (or
// kWrongVersion for another version), never a crash (fuzz/remote_manifest_fuzzer.cc).
//
// Thread-safety: plain values.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::remote {

using ParentKey = std::array<uint8_t, 32>;

struct ManifestExtent {
  uint32_t first_layer = 0;
  uint32_t layers = 0;
  uint64_t offset = 0;  // object byte offset of first_layer's stripe
  uint64_t bytes = 0;   // layers * stripe_pitch
  friend bool operator==(const ManifestExtent&, const ManifestExtent&) = default;
};

struct PackManifest {
  NamespaceId ns;
  Geometry geometry;  // pack_bytes included
  uint64_t store_uuid_lo = 0;
  uint64_t store_uuid_hi = 0;
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t path_begin = 0;     // path position of pack token 0
  uint64_t stored_tokens = 0;  // tokens [path_begin, path_begin + stored_tokens)
  ParentKey parent_key{};      // cluster directory key of path [0, path_begin)
  uint32_t digest_block_tokens = 0;
  uint64_t digest_seed = 0;
  uint64_t stripe_pitch = 0;
  uint64_t object_bytes = 0;
  uint64_t part_bytes = 0;
  std::vector<ManifestExtent> extents;
  std::vector<int32_t> tokens;    // stored_tokens
  std::vector<uint64_t> digests;  // layers x blocks_per_layer, layer-major
  uint64_t created_unix_ns = 0;

  uint64_t blocks_per_layer() const {
    return digest_block_tokens == 0
               ? 0
               : (stored_tokens + digest_block_tokens - 1) / digest_block_tokens;
  }
  // Object offset of layer l's stripe (REQUIRES l < layers; extents validated).
  uint64_t LayerOffset(uint32_t layer) const;
  friend bool operator==(const PackManifest&, const PackManifest&) = default;
};

// stored_tokens * s rounded up to 4096.
uint64_t StripePitch(uint64_t stored_tokens, uint64_t token_bytes);
// Fills stripe_pitch, object_bytes and the extents (one per `layer_group` layers) from the
// geometry and stored_tokens.
void LayOutObject(PackManifest* m, uint32_t layer_group);

std::vector<uint8_t> EncodeManifest(const PackManifest& m);
// kWrongVersion, kCorruption (checksum, bounds, inconsistent fields).
Result<PackManifest> DecodeManifest(std::span<const uint8_t> bytes);

struct RunEntry {
  std::string object_id;  // "<store uuid hex>-<slot>-<generation>"
  uint64_t path_begin = 0;
  uint64_t object_bytes = 0;
  uint64_t stripe_pitch = 0;
  uint64_t generation = 0;
  std::vector<int32_t> tokens;
  friend bool operator==(const RunEntry&, const RunEntry&) = default;
};

std::vector<uint8_t> EncodeRunEntry(const RunEntry& e);
Result<RunEntry> DecodeRunEntry(std::span<const uint8_t> bytes);

}  // namespace rangekv::remote
