#include "remote/manifest.h"

#include "base/coding.h"
#include "base/digest.h"
#include "remote/manifest_format.h"

namespace rangekv::remote {
namespace {

using coding::ByteReader;
using coding::ByteWriter;

constexpr uint64_t kAlign = 4096;

Status Bad(const std::string& what) { return Corruption("pack manifest: " + what); }

}  // namespace

uint64_t StripePitch(uint64_t stored_tokens, uint64_t token_bytes) {
  return (stored_tokens * token_bytes + kAlign - 1) / kAlign * kAlign;
}

void LayOutObject(PackManifest* m, uint32_t layer_group) {
  m->stripe_pitch = StripePitch(m->stored_tokens, m->geometry.token_bytes);
  m->object_bytes = m->stripe_pitch * m->geometry.layers;
  m->extents.clear();
  const uint32_t g = layer_group == 0 ? 1 : layer_group;
  for (uint32_t l = 0; l < m->geometry.layers; l += g) {
    const uint32_t n = std::min(g, m->geometry.layers - l);
    m->extents.push_back({l, n, l * m->stripe_pitch, n * m->stripe_pitch});
  }
}

uint64_t PackManifest::LayerOffset(uint32_t layer) const {
  for (const ManifestExtent& e : extents) {
    if (layer >= e.first_layer && layer < e.first_layer + e.layers) {
      return e.offset + (layer - e.first_layer) * stripe_pitch;
    }
  }
  return object_bytes;  // unreachable for a validated manifest
}

std::vector<uint8_t> EncodeManifest(const PackManifest& m) {
  ByteWriter w;
  w.Reserve(256 + m.tokens.size() * 4 + m.digests.size() * 8 + m.extents.size() * 24);
  w.U64(format::kManifestMagic);
  w.U32(format::kManifestVersion);
  w.U32(format::kManifestHeaderBytes);
  w.U64(m.ns.lo);
  w.U64(m.ns.hi);
  coding::PutGeometry(w, m.geometry);
  w.U64(m.store_uuid_lo);
  w.U64(m.store_uuid_hi);
  w.U32(m.slot);
  w.U32(0);
  w.U64(m.generation);
  w.U64(m.path_begin);
  w.U64(m.stored_tokens);
  w.Bytes(m.parent_key.data(), m.parent_key.size());
  w.U32(m.digest_block_tokens);
  w.U32(static_cast<uint32_t>(m.blocks_per_layer()));
  w.U64(m.digest_seed);
  w.U64(m.stripe_pitch);
  w.U64(m.object_bytes);
  w.U64(m.part_bytes);
  w.U64(m.created_unix_ns);
  w.U32(static_cast<uint32_t>(m.extents.size()));
  for (const ManifestExtent& e : m.extents) {
    w.U32(e.first_layer);
    w.U32(e.layers);
    w.U64(e.offset);
    w.U64(e.bytes);
  }
  for (int32_t t : m.tokens) w.U32(static_cast<uint32_t>(t));
  for (uint64_t d : m.digests) w.U64(d);
  const uint64_t sum = Hash64(w.bytes().data(), w.size(), format::kManifestChecksumSeed);
  w.U64(sum);
  return w.Take();
}

Result<PackManifest> DecodeManifest(std::span<const uint8_t> bytes) {
  if (bytes.size() > format::kMaxManifestBytes) return Bad("larger than the bound");
  ByteReader r(bytes);
  uint64_t magic = 0;
  uint32_t version = 0, header = 0;
  if (!r.U64(&magic) || magic != format::kManifestMagic) return Bad("not a manifest (magic)");
  if (!r.U32(&version)) return Bad("truncated");
  if (version != format::kManifestVersion) {
    return Status(StatusCode::kWrongVersion,
                  "pack manifest version " + std::to_string(version) + " (this reader: 1)");
  }
  if (!r.U32(&header) || header != format::kManifestHeaderBytes) return Bad("header size");
  if (bytes.size() < 8 + format::kManifestHeaderBytes) return Bad("truncated");
  const uint64_t stored_sum = coding::LoadU64(bytes.data() + bytes.size() - 8);
  if (Hash64(bytes.data(), bytes.size() - 8, format::kManifestChecksumSeed) != stored_sum) {
    return Bad("checksum mismatch");
  }
  ByteReader body(bytes.first(bytes.size() - 8));
  if (!body.Skip(format::kManifestHeaderBytes)) return Bad("truncated");
  PackManifest m;
  Geometry& g = m.geometry;
  uint32_t pad = 0, blocks = 0, extents = 0;
  std::span<const uint8_t> parent;
  bool ok = body.U64(&m.ns.lo) && body.U64(&m.ns.hi) && coding::GetGeometry(body, &g) &&
            body.U64(&m.store_uuid_lo) && body.U64(&m.store_uuid_hi) && body.U32(&m.slot) &&
            body.U32(&pad) && body.U64(&m.generation) && body.U64(&m.path_begin) &&
            body.U64(&m.stored_tokens) && body.View(format::kParentKeyBytes, &parent) &&
            body.U32(&m.digest_block_tokens) && body.U32(&blocks) && body.U64(&m.digest_seed) &&
            body.U64(&m.stripe_pitch) && body.U64(&m.object_bytes) && body.U64(&m.part_bytes) &&
            body.U64(&m.created_unix_ns) && body.U32(&extents);
  if (!ok) return Bad("truncated");
  std::copy(parent.begin(), parent.end(), m.parent_key.begin());
  if (pad != 0) return Bad("reserved field is not zero");
  if (g.layers == 0 || g.layers > format::kMaxLayers) return Bad("layer count");
  if (g.token_bytes == 0 || g.stripe_bytes == 0 || g.token_bytes > g.stripe_bytes ||
      g.tokens_per_stripe == 0 || g.tokens_per_stripe > g.stripe_bytes / g.token_bytes ||
      g.stripe_bytes > (1ull << 30) || g.pack_bytes != uint64_t{g.layers} * g.stripe_bytes) {
    return Bad("geometry");
  }
  if (m.stored_tokens == 0 || m.stored_tokens > g.tokens_per_stripe ||
      m.stored_tokens > format::kMaxStoredTokens) {
    return Bad("stored token count");
  }
  if (m.path_begin > (1ull << 40)) return Bad("path position");
  if (m.generation == 0) return Bad("generation 0");
  if (m.digest_block_tokens == 0 || m.digest_block_tokens > g.tokens_per_stripe ||
      blocks != m.blocks_per_layer()) {
    return Bad("digest blocks");
  }
  if (m.stripe_pitch != StripePitch(m.stored_tokens, g.token_bytes) ||
      m.object_bytes != m.stripe_pitch * g.layers) {
    return Bad("object layout");
  }
  if (extents == 0 || extents > format::kMaxExtents || extents > g.layers) return Bad("extents");
  if (body.remaining() < uint64_t{extents} * 24) return Bad("truncated extents");
  uint32_t next_layer = 0;
  for (uint32_t i = 0; i < extents; ++i) {
    ManifestExtent e;
    if (!body.U32(&e.first_layer) || !body.U32(&e.layers) || !body.U64(&e.offset) ||
        !body.U64(&e.bytes)) {
      return Bad("truncated extents");
    }
    if (e.first_layer != next_layer || e.layers == 0 || e.layers > g.layers - next_layer ||
        e.offset != uint64_t{e.first_layer} * m.stripe_pitch ||
        e.bytes != uint64_t{e.layers} * m.stripe_pitch) {
      return Bad("extent " + std::to_string(i) + " does not tile the object");
    }
    next_layer += e.layers;
    m.extents.push_back(e);
  }
  if (next_layer != g.layers) return Bad("extents do not cover every layer");
  const uint64_t digests = uint64_t{blocks} * g.layers;
  if (digests > format::kMaxDigests) return Bad("digest count");
  if (body.remaining() != m.stored_tokens * 4 + digests * 8) return Bad("body size");
  if (m.part_bytes == 0 || m.part_bytes % m.stripe_pitch != 0) return Bad("part size");
  m.tokens.resize(m.stored_tokens);
  for (int32_t& t : m.tokens) {
    uint32_t v = 0;
    if (!body.U32(&v)) return Bad("truncated tokens");
    t = static_cast<int32_t>(v);
  }
  m.digests.resize(digests);
  for (uint64_t& d : m.digests) {
    if (!body.U64(&d)) return Bad("truncated digests");
  }
  return m;
}

std::vector<uint8_t> EncodeRunEntry(const RunEntry& e) {
  ByteWriter w;
  w.Reserve(64 + e.object_id.size() + e.tokens.size() * 4);
  w.U32(format::kRunMagic);
  w.U16(format::kRunVersion);
  w.U16(0);
  w.U32(static_cast<uint32_t>(e.object_id.size()));
  w.Bytes(e.object_id.data(), e.object_id.size());
  w.U64(e.path_begin);
  w.U64(e.object_bytes);
  w.U64(e.stripe_pitch);
  w.U64(e.generation);
  w.U64(e.tokens.size());
  for (int32_t t : e.tokens) w.U32(static_cast<uint32_t>(t));
  w.U64(Hash64(w.bytes().data(), w.size(), format::kRunChecksumSeed));
  return w.Take();
}

Result<RunEntry> DecodeRunEntry(std::span<const uint8_t> bytes) {
  auto bad = [](const std::string& w) { return Corruption("run entry: " + w); };
  if (bytes.size() < 16) return bad("truncated");
  if (Hash64(bytes.data(), bytes.size() - 8, format::kRunChecksumSeed) !=
      coding::LoadU64(bytes.data() + bytes.size() - 8)) {
    return bad("checksum mismatch");
  }
  ByteReader r(bytes.first(bytes.size() - 8));
  uint32_t magic = 0, id_len = 0;
  uint16_t version = 0, flags = 0;
  if (!r.U32(&magic) || magic != format::kRunMagic) return bad("magic");
  if (!r.U16(&version) || version != format::kRunVersion) {
    return Status(StatusCode::kWrongVersion, "run entry version " + std::to_string(version));
  }
  if (!r.U16(&flags) || flags != 0) return bad("flags");
  if (!r.U32(&id_len) || id_len == 0 || id_len > format::kMaxObjectIdBytes) return bad("object id");
  std::span<const uint8_t> id;
  if (!r.View(id_len, &id)) return bad("truncated");
  RunEntry e;
  e.object_id.assign(id.begin(), id.end());
  for (char c : e.object_id) {
    const bool okc = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-';
    if (!okc) return bad("object id characters");
  }
  uint64_t n = 0;
  if (!r.U64(&e.path_begin) || !r.U64(&e.object_bytes) || !r.U64(&e.stripe_pitch) ||
      !r.U64(&e.generation) || !r.U64(&n)) {
    return bad("truncated");
  }
  if (n == 0 || n > format::kMaxStoredTokens || r.remaining() != n * 4) return bad("token count");
  if (e.stripe_pitch == 0 || e.stripe_pitch % kAlign != 0 || e.object_bytes == 0 ||
      e.object_bytes % e.stripe_pitch != 0 || e.generation == 0) {
    return bad("object layout");
  }
  e.tokens.resize(n);
  for (int32_t& t : e.tokens) {
    uint32_t v = 0;
    if (!r.U32(&v)) return bad("truncated tokens");
    t = static_cast<int32_t>(v);
  }
  return e;
}

}  // namespace rangekv::remote
