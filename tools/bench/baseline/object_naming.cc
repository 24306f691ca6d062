#include "tools/bench/baseline/object_naming.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"

namespace rangekv::baseline {

std::string_view ObjectShapeName(ObjectShape shape) {
  switch (shape) {
    case ObjectShape::kChunk:
      return "chunk";
    case ObjectShape::kChunkLayer:
      return "chunk-layer";
    case ObjectShape::kChunkLayerSlice:
      return "chunk-layer-slice";
  }
  return "?";
}

uint64_t ObjectNaming::count() const {
  const uint64_t per_chunk = shape == ObjectShape::kChunk ? 1 : uint64_t{layers} * slices;
  return uint64_t{chunks} * per_chunk;
}

uint64_t ObjectNaming::ChunkBegin(uint32_t i) const {
  RANGEKV_DCHECK(i <= chunks);
  const uint64_t q = tokens / chunks;
  const uint64_t r = tokens % chunks;
  return first_token + uint64_t{i} * q + std::min<uint64_t>(i, r);
}

LogicalObject ObjectNaming::Object(uint64_t index) const {
  RANGEKV_DCHECK(index < count());
  LogicalObject o;
  if (shape == ObjectShape::kChunk) {
    o.chunk = static_cast<uint32_t>(index);
    o.layer_begin = 0;
    o.layer_end = layers;
    o.slice = 0;
  } else {
    const uint64_t per_layer = uint64_t{chunks} * slices;
    const uint32_t layer = static_cast<uint32_t>(index / per_layer);
    const uint64_t in_layer = index % per_layer;
    o.chunk = static_cast<uint32_t>(in_layer / slices);
    o.slice = static_cast<uint32_t>(in_layer % slices);
    o.layer_begin = layer;
    o.layer_end = layer + 1;
  }
  o.token_begin = ChunkBegin(o.chunk);
  o.token_end = ChunkEnd(o.chunk);
  const uint32_t heads_per_slice = heads / slices;
  o.head_begin = o.slice * heads_per_slice;
  o.head_end = o.head_begin + heads_per_slice;
  return o;
}

uint64_t ObjectNaming::ObjectBytes(const LogicalObject& object) const {
  return object.tokens() * object.layers() * object.heads() * head_row_bytes;
}

double ObjectNaming::mean_object_bytes() const {
  return static_cast<double>(tokens) * layers * heads * head_row_bytes /
         static_cast<double>(count());
}

Result<ObjectNaming> MakeObjectNaming(const Geometry& geometry, ObjectShape shape,
                                      uint64_t first_token, uint64_t tokens, uint32_t chunks,
                                      uint32_t slices) {
  if (tokens == 0 || chunks == 0) {
    return InvalidArgument("object naming needs tokens > 0 and chunks > 0");
  }
  if (chunks > tokens) {
    return InvalidArgument("object naming: " + std::to_string(chunks) +
                           " chunks would be smaller than one token (" + std::to_string(tokens) +
                           " tokens)");
  }
  if (geometry.layers == 0 || geometry.token_bytes == 0) {
    return InvalidArgument("object naming: empty geometry");
  }
  const uint32_t heads = geometry.is_mla() ? 1 : geometry.kv_heads_per_rank;
  if (heads == 0) return InvalidArgument("object naming: geometry has no heads");
  if (slices == 0) return InvalidArgument("object naming: slices must be >= 1");
  if (shape != ObjectShape::kChunkLayerSlice && slices != 1) {
    return InvalidArgument("object naming: only chunk-layer-slice objects have slices");
  }
  if (heads % slices != 0) {
    return InvalidArgument("object naming: " + std::to_string(slices) +
                           " slices do not divide the rank's " + std::to_string(heads) + " heads");
  }
  if (geometry.token_bytes % heads != 0) {
    return InvalidArgument("object naming: token bytes not divisible by heads");
  }
  ObjectNaming n;
  n.shape = shape;
  n.first_token = first_token;
  n.tokens = tokens;
  n.chunks = chunks;
  n.layers = geometry.layers;
  n.heads = heads;
  n.slices = slices;
  n.head_row_bytes = geometry.token_bytes / heads;
  return n;
}

namespace {

uint64_t ObjectsPerChunk(const Geometry& g, ObjectShape shape, uint32_t slices) {
  return shape == ObjectShape::kChunk ? 1 : uint64_t{g.layers} * slices;
}

uint32_t SlicesFor(const Geometry& g, ObjectShape shape) {
  if (shape != ObjectShape::kChunkLayerSlice) return 1;
  const uint32_t heads = g.is_mla() ? 1 : g.kv_heads_per_rank;
  uint32_t slices = std::min(kPaperTpRanks, heads);
  while (slices > 1 && heads % slices != 0) --slices;
  return std::max<uint32_t>(slices, 1);
}

}  // namespace

Result<SweepPoint> MakeSweepPoint(const Geometry& geometry, ObjectShape shape,
                                  uint64_t nominal_objects, uint64_t payload_tokens) {
  if (payload_tokens == 0) return InvalidArgument("sweep point: payload has no tokens");
  const uint32_t slices = SlicesFor(geometry, shape);
  const uint64_t per_chunk = ObjectsPerChunk(geometry, shape, slices);
  if (nominal_objects == 0 || nominal_objects % per_chunk != 0) {
    return InvalidArgument("sweep point: " + std::to_string(nominal_objects) +
                           " objects is not a multiple of the " + std::to_string(per_chunk) +
                           " objects per chunk of shape " + std::string(ObjectShapeName(shape)));
  }
  SweepPoint p;
  p.nominal_objects = nominal_objects;
  p.shape = shape;
  p.layerwise = shape != ObjectShape::kChunk;
  uint64_t chunks = nominal_objects / per_chunk;
  const double payload_bytes =
      static_cast<double>(payload_tokens) * geometry.layers * geometry.token_bytes;
  const double object_bytes = payload_bytes / static_cast<double>(nominal_objects);
  if (chunks > payload_tokens || object_bytes < static_cast<double>(geometry.token_bytes)) {
    // Keep the paper's object size: scale the count with the payload.
    const double scaled = static_cast<double>(nominal_objects) *
                          static_cast<double>(payload_tokens) /
                          static_cast<double>(kPaperPrefixTokens);
    chunks = static_cast<uint64_t>(std::llround(scaled / static_cast<double>(per_chunk)));
    chunks = std::clamp<uint64_t>(chunks, 1, payload_tokens);
    p.scaled = chunks * per_chunk != nominal_objects;
  }
  RANGEKV_ASSIGN_OR_RETURN(p.naming, MakeObjectNaming(geometry, shape, 0, payload_tokens,
                                                      static_cast<uint32_t>(chunks), slices));
  p.label = std::to_string(nominal_objects);
  if (shape == ObjectShape::kChunkLayer) p.label += "-LW";
  if (shape == ObjectShape::kChunkLayerSlice) p.label += "-TP";
  return p;
}

Result<ObjectNaming> RenameRange(const Geometry& geometry, const SweepPoint& point,
                                 uint64_t first_token, uint64_t tokens) {
  if (tokens == 0) return InvalidArgument("rename: empty token range");
  const double mean_chunk_tokens =
      static_cast<double>(point.naming.tokens) / static_cast<double>(point.naming.chunks);
  uint64_t chunks =
      static_cast<uint64_t>(std::llround(static_cast<double>(tokens) / mean_chunk_tokens));
  chunks = std::clamp<uint64_t>(chunks, 1, tokens);
  return MakeObjectNaming(geometry, point.shape, first_token, tokens, static_cast<uint32_t>(chunks),
                          point.naming.slices);
}

}  // namespace rangekv::baseline
