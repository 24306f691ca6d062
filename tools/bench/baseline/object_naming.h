// ObjectNaming: how a fixed KV payload is cut into LOGICAL cache objects, the unit the stock
// per-object path (LMCache's in-process engine, docs/design.md "Baselines") charges work to.
//
// The Range paper's fixed-payload sweep (section 5.1, Table 3) restores the same bytes named
// three ways:
//   kChunk            one object per chunk of consecutive tokens, holding every layer
//                     (LMCache's CacheEngineKey; 192 / 768 / 3,072 / 6,144 objects of 6 GiB);
//   kChunkLayer       one object per (chunk, layer) (LayerCacheEngineKey, layerwise mode:
//                     192 chunks x 32 layers = 6,144 objects);
//   kChunkLayerSlice  one object per (chunk, layer, rank slice): the paper's "128K tokens x 80
//                     layers x TP8 = 327,680 objects" naming mapped onto ONE rank's payload.
//                     A slice is a group of this rank's KV heads (K and V bytes of those heads
//                     for every token of the chunk), so the same bytes are cut into
//                     chunks x layers x slices pieces.
//
// Chunks split the named token range as evenly as possible: with `tokens` = q * chunks + r,
// the first r chunks hold q + 1 tokens and the rest q. Even splits are the paper's points; the
// uneven ones exist because 327,680 = 2^16 x 5 cannot cut 49,152 x 32 token-layers into equal
// whole-token pieces (chunks of 38 and 39 tokens there).
//
// Object order (what the per-object model iterates, like LMCache's retrieve loops): kChunk in
// chunk order; the layered shapes layer-major (every chunk of layer 0, then layer 1, ...),
// slices innermost, which is the order a layerwise retriever consumes them in.
//
// Thread-safety: plain values; the functions are pure.
#pragma once

#include <cstdint>
#include <string>

#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::baseline {

enum class ObjectShape : uint8_t {
  kChunk,
  kChunkLayer,
  kChunkLayerSlice,
};

std::string_view ObjectShapeName(ObjectShape shape);  // "chunk", "chunk-layer", "chunk-layer-slice"

// One logical object: path tokens [token_begin, token_end) of layers [layer_begin, layer_end)
// and heads [head_begin, head_end) of this rank (all heads unless sliced).
struct LogicalObject {
  uint32_t chunk = 0;
  uint32_t slice = 0;
  uint64_t token_begin = 0;
  uint64_t token_end = 0;
  uint32_t layer_begin = 0;
  uint32_t layer_end = 0;
  uint32_t head_begin = 0;
  uint32_t head_end = 0;

  uint64_t tokens() const { return token_end - token_begin; }
  uint32_t layers() const { return layer_end - layer_begin; }
  uint32_t heads() const { return head_end - head_begin; }
  friend bool operator==(const LogicalObject&, const LogicalObject&) = default;
};

struct ObjectNaming {
  ObjectShape shape = ObjectShape::kChunk;
  uint64_t first_token = 0;  // path position of the first named token
  uint64_t tokens = 0;       // tokens named
  uint32_t chunks = 0;
  uint32_t layers = 0;          // L of the geometry
  uint32_t heads = 0;           // KV heads per rank (1 for MLA: the latent is one "head")
  uint32_t slices = 1;          // head groups; 1 unless kChunkLayerSlice
  uint64_t head_row_bytes = 0;  // bytes of one head of one token (K and V of it): s / heads

  // chunks x (L for layered shapes) x slices.
  uint64_t count() const;
  // Path tokens of chunk i. REQUIRES: i < chunks.
  uint64_t ChunkBegin(uint32_t i) const;
  uint64_t ChunkEnd(uint32_t i) const { return ChunkBegin(i + 1); }
  // The largest and smallest chunk, in tokens.
  uint64_t max_chunk_tokens() const { return (tokens + chunks - 1) / chunks; }
  uint64_t min_chunk_tokens() const { return tokens / chunks; }
  bool even() const { return tokens % chunks == 0; }
  // Object number `index` in iteration order. REQUIRES: index < count().
  LogicalObject Object(uint64_t index) const;
  // Payload bytes of an object: tokens x layers x heads x head_row_bytes.
  uint64_t ObjectBytes(const LogicalObject& object) const;
  // Average payload bytes per object.
  double mean_object_bytes() const;
};

// Names path tokens [first_token, first_token + tokens) of `geometry` as `chunks` chunks of
// `shape` (with `slices` head groups for kChunkLayerSlice; must be 1 otherwise).
// kInvalidArgument when tokens or chunks is 0, chunks > tokens (sub-token chunks), slices does
// not divide the rank's heads, or the shape is sliced on an MLA geometry with slices > 1.
Result<ObjectNaming> MakeObjectNaming(const Geometry& geometry, ObjectShape shape,
                                      uint64_t first_token, uint64_t tokens, uint32_t chunks,
                                      uint32_t slices = 1);

// ---- the paper's sweep points ---------------------------------------------------------

// The paper's fixed payload: 49,152 cached tokens (6 GiB of Llama-3.1-8B KV), and its suffix.
inline constexpr uint64_t kPaperPrefixTokens = 49152;
inline constexpr uint64_t kPaperSuffixTokens = 16128;
// TP degree of the 327,680-object naming (128K tokens x 80 layers x 8 ranks).
inline constexpr uint32_t kPaperTpRanks = 8;

// One point of the sweep: the paper's nominal object count for its 6 GiB payload and the
// naming actually used for this run's payload.
struct SweepPoint {
  std::string label;  // "192", "6144-LW", "327680-TP"
  uint64_t nominal_objects = 0;
  ObjectShape shape = ObjectShape::kChunk;
  bool layerwise = false;  // delivered per layer in the stock path (layered shapes)
  bool scaled = false;     // the effective count differs from the nominal one
  ObjectNaming naming;     // effective naming of the run's payload
};

// Builds the point for `nominal_objects` of `shape` over path tokens [0, payload_tokens).
// The nominal count is kept unless an object would be smaller than one token-layer of its
// slice (fewer bytes than s, or chunks of less than one token); then the count is scaled by
// payload_tokens / kPaperPrefixTokens, which keeps the paper's object size, and rounded to a
// multiple of (layers x slices). Slices for kChunkLayerSlice: min(kPaperTpRanks, heads).
// Errors as MakeObjectNaming, and kInvalidArgument when nominal_objects is not a multiple of
// the per-chunk object count (L for layered shapes, L x slices for sliced ones).
Result<SweepPoint> MakeSweepPoint(const Geometry& geometry, ObjectShape shape,
                                  uint64_t nominal_objects, uint64_t payload_tokens);

// The same object size applied to another token range (the store workload's suffix):
// chunks = round(tokens / mean chunk tokens of `point`), at least 1 and at most `tokens`.
Result<ObjectNaming> RenameRange(const Geometry& geometry, const SweepPoint& point,
                                 uint64_t first_token, uint64_t tokens);

}  // namespace rangekv::baseline
