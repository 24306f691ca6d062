#include "persist/snapshot.h"

#include <cstring>
#include <string>

#include "base/coding.h"
#include "base/digest.h"
#include "pack/pack_layout.h"
#include "persist/snapshot_format.h"

namespace rangekv::persist {
namespace {

namespace sf = snapshot_format;
using coding::ByteReader;
using coding::ByteWriter;

std::string Num(uint64_t v) { return std::to_string(v); }

void PutIdentity(ByteWriter& w, const Snapshot& s) {
  const SnapshotIdentity& id = s.identity;
  const Geometry& g = id.geometry;
  w.U64(id.store_uuid.lo);
  w.U64(id.store_uuid.hi);
  w.U64(id.namespace_id.lo);
  w.U64(id.namespace_id.hi);
  w.U32(g.layers);
  w.U32(g.dtype_bytes);
  w.U32(g.kv_heads_per_rank);
  w.U32(g.head_size);
  w.U32(g.mla_latent_size);
  w.U32(g.block_size);
  w.U64(g.token_bytes);
  w.U64(g.stripe_bytes);
  w.U64(g.tokens_per_stripe);
  w.U64(g.pack_bytes);
  w.U64(id.pack_count);
  w.U64(id.data_offset);
  w.U64(id.pack_file_bytes);
  w.U64(id.pack_creation_time_unix_ns);
  w.U64(s.store_epoch);
  w.U64(s.max_generation);
  w.U64(s.saved_time_unix_ns);
}

// A failed decode: records the defect and returns the status.
class Failer {
 public:
  explicit Failer(SnapshotDefect* defect) : defect_(defect) {}
  Status operator()(SnapshotDefect d, const std::string& what) const {
    if (defect_ != nullptr) *defect_ = d;
    StatusCode code = StatusCode::kCorruption;
    if (d == SnapshotDefect::kTruncated) code = StatusCode::kTruncated;
    if (d == SnapshotDefect::kWrongVersion) code = StatusCode::kWrongVersion;
    return Status(code, "metadata snapshot: " + what);
  }

 private:
  SnapshotDefect* defect_;
};

// Reads a section header and checks its tag and flags; `body` gets the body's bytes.
Status ReadSection(ByteReader& r, uint32_t tag, const char* name, const Failer& fail,
                   std::span<const uint8_t>* body) {
  uint32_t got_tag = 0, flags = 0;
  uint64_t body_bytes = 0;
  if (!(r.U32(&got_tag) && r.U32(&flags) && r.U64(&body_bytes))) {
    return fail(SnapshotDefect::kMalformed, std::string(name) + " section header cut short");
  }
  if (got_tag != tag) {
    return fail(SnapshotDefect::kMalformed, std::string("expected the ") + name + " section");
  }
  if (flags != 0) return fail(SnapshotDefect::kMalformed, std::string(name) + " section flags");
  // The trailing checksum is not part of any section.
  if (body_bytes > r.remaining() || r.remaining() - body_bytes < sf::kChecksumBytes) {
    return fail(SnapshotDefect::kMalformed,
                std::string(name) + " section length " + Num(body_bytes) + " exceeds the file");
  }
  if (!r.View(static_cast<size_t>(body_bytes), body)) {
    return fail(SnapshotDefect::kMalformed, std::string(name) + " section");
  }
  return OkStatus();
}

Status DecodeIdentity(std::span<const uint8_t> body, const Failer& fail, Snapshot* s) {
  if (body.size() != sf::kIdentityBodyBytes) {
    return fail(SnapshotDefect::kMalformed, "identity section of " + Num(body.size()) + " bytes");
  }
  ByteReader r(body);
  SnapshotIdentity& id = s->identity;
  Geometry& g = id.geometry;
  const bool ok = r.U64(&id.store_uuid.lo) && r.U64(&id.store_uuid.hi) &&
                  r.U64(&id.namespace_id.lo) && r.U64(&id.namespace_id.hi) && r.U32(&g.layers) &&
                  r.U32(&g.dtype_bytes) && r.U32(&g.kv_heads_per_rank) && r.U32(&g.head_size) &&
                  r.U32(&g.mla_latent_size) && r.U32(&g.block_size) && r.U64(&g.token_bytes) &&
                  r.U64(&g.stripe_bytes) && r.U64(&g.tokens_per_stripe) && r.U64(&g.pack_bytes) &&
                  r.U64(&id.pack_count) && r.U64(&id.data_offset) && r.U64(&id.pack_file_bytes) &&
                  r.U64(&id.pack_creation_time_unix_ns) && r.U64(&s->store_epoch) &&
                  r.U64(&s->max_generation) && r.U64(&s->saved_time_unix_ns);
  if (!ok) return fail(SnapshotDefect::kMalformed, "identity section cut short");
  if (id.store_uuid.is_nil()) return fail(SnapshotDefect::kMalformed, "nil store uuid");
  // The same checks the pack header gets: a snapshot can only describe a valid pack file.
  const Status geometry_ok = ValidatePackGeometry(g);
  if (!geometry_ok.ok()) {
    return fail(SnapshotDefect::kMalformed, "geometry: " + geometry_ok.message());
  }
  const Result<PackLayout> layout = PackLayout::Make(g, id.pack_count, id.data_offset);
  if (!layout.ok()) return fail(SnapshotDefect::kMalformed, layout.status().message());
  if (id.pack_file_bytes < layout->file_bytes() ||
      id.pack_file_bytes > pack_format::kMaxFileBytes) {
    return fail(SnapshotDefect::kMalformed,
                "pack file size " + Num(id.pack_file_bytes) + " outside its layout");
  }
  if (s->store_epoch == 0 || s->store_epoch > sf::kMaxStoreEpoch) {
    return fail(SnapshotDefect::kMalformed, "store epoch " + Num(s->store_epoch));
  }
  return OkStatus();
}

Status DecodeDigests(std::span<const uint8_t> body, const Failer& fail, Snapshot* s) {
  ByteReader r(body);
  const Geometry& g = s->identity.geometry;
  uint32_t block_tokens = 0, table_count = 0;
  if (!(r.U32(&block_tokens) && r.U32(&table_count) && r.U64(&s->digest_seed))) {
    return fail(SnapshotDefect::kMalformed, "digest section cut short");
  }
  s->digest_block_tokens = block_tokens;
  if (block_tokens == 0 || block_tokens > g.tokens_per_stripe) {
    return fail(SnapshotDefect::kMalformed, "digest block of " + Num(block_tokens) + " tokens");
  }
  if (s->digest_seed != kPayloadDigestSeed) {
    return fail(SnapshotDefect::kMalformed, "unknown payload digest seed");
  }
  if (table_count > s->identity.pack_count ||
      table_count > r.remaining() / sf::kDigestTableHeaderBytes) {
    return fail(SnapshotDefect::kMalformed, "digest table count " + Num(table_count));
  }
  s->digests.resize(table_count);
  uint64_t next_slot = 0;
  for (PackDigests& t : s->digests) {
    uint32_t reserved = 0;
    if (!(r.U32(&t.slot) && r.U32(&t.layers) && r.U64(&t.generation) && r.U64(&t.stored_tokens) &&
          r.U32(&t.blocks_per_layer) && r.U32(&reserved))) {
      return fail(SnapshotDefect::kMalformed, "digest table header cut short");
    }
    if (t.slot < next_slot || t.slot >= s->identity.pack_count) {
      return fail(SnapshotDefect::kMalformed,
                  "digest table of pack slot " + Num(t.slot) + " out of order or range");
    }
    next_slot = uint64_t{t.slot} + 1;
    if (t.layers != g.layers || t.generation == 0 || reserved != 0 || t.stored_tokens == 0 ||
        t.stored_tokens > g.tokens_per_stripe ||
        t.blocks_per_layer != (t.stored_tokens + block_tokens - 1) / block_tokens) {
      return fail(SnapshotDefect::kMalformed,
                  "digest table of pack slot " + Num(t.slot) + " has impossible sizes");
    }
    // layers <= kMaxLayers and blocks <= 2^32: the product cannot overflow.
    const uint64_t words = uint64_t{t.layers} * t.blocks_per_layer;
    if (words > r.remaining() / 8) {
      return fail(SnapshotDefect::kMalformed,
                  "digest table of pack slot " + Num(t.slot) + " cut short");
    }
    t.digests.resize(words);
    for (uint64_t& d : t.digests) (void)r.U64(&d);
  }
  if (r.remaining() != 0) return fail(SnapshotDefect::kMalformed, "trailing digest bytes");
  return OkStatus();
}

}  // namespace

SnapshotIdentity SnapshotIdentity::ForPack(const PackHeader& header, uint64_t file_bytes) {
  SnapshotIdentity id;
  id.store_uuid = header.store_uuid;
  id.namespace_id = header.namespace_id;
  id.geometry = header.geometry;
  id.pack_count = header.pack_count;
  id.data_offset = header.data_offset;
  id.pack_file_bytes = file_bytes;
  id.pack_creation_time_unix_ns = header.creation_time_unix_ns;
  return id;
}

std::string_view SnapshotDefectName(SnapshotDefect defect) {
  switch (defect) {
    case SnapshotDefect::kNone:
      return "none";
    case SnapshotDefect::kTruncated:
      return "truncated";
    case SnapshotDefect::kBadMagic:
      return "bad_magic";
    case SnapshotDefect::kWrongVersion:
      return "wrong_version";
    case SnapshotDefect::kTooLarge:
      return "too_large";
    case SnapshotDefect::kChecksum:
      return "checksum";
    case SnapshotDefect::kMalformed:
      return "malformed";
  }
  return "unknown";
}

std::string_view BindingMismatchName(BindingMismatch mismatch) {
  switch (mismatch) {
    case BindingMismatch::kNone:
      return "none";
    case BindingMismatch::kStoreUuid:
      return "store_uuid";
    case BindingMismatch::kGeometry:
      return "geometry";
    case BindingMismatch::kNamespace:
      return "namespace";
    case BindingMismatch::kPackLayout:
      return "pack_layout";
    case BindingMismatch::kPackFileBytes:
      return "pack_file_bytes";
  }
  return "unknown";
}

std::vector<uint8_t> EncodeSnapshot(const Snapshot& s) {
  ByteWriter w;
  w.Bytes(sf::kMagic, sizeof(sf::kMagic));
  w.U32(sf::kSnapshotVersion);
  w.U32(sf::kPreambleBytes);
  w.U64(0);  // total_bytes, patched below
  w.U32(sf::kSectionCount);
  w.U32(0);  // flags

  w.U32(sf::kTagIdentity);
  w.U32(0);
  w.U64(sf::kIdentityBodyBytes);
  PutIdentity(w, s);

  w.U32(sf::kTagDirectory);
  w.U32(0);
  w.U64(s.directory.size());
  w.Bytes(s.directory.data(), s.directory.size());

  uint64_t digest_body = sf::kDigestsFixedBytes;
  for (const PackDigests& t : s.digests) {
    digest_body += sf::kDigestTableHeaderBytes + 8 * t.digests.size();
  }
  w.U32(sf::kTagDigests);
  w.U32(0);
  w.U64(digest_body);
  w.U32(static_cast<uint32_t>(s.digest_block_tokens));
  w.U32(static_cast<uint32_t>(s.digests.size()));
  w.U64(s.digest_seed);
  for (const PackDigests& t : s.digests) {
    w.U32(t.slot);
    w.U32(t.layers);
    w.U64(t.generation);
    w.U64(t.stored_tokens);
    w.U32(t.blocks_per_layer);
    w.U32(0);
    for (uint64_t d : t.digests) w.U64(d);
  }

  const uint64_t total = w.size() + sf::kChecksumBytes;
  w.PatchU64(sf::kTotalBytesField.offset, total);
  w.U64(Hash64(w.bytes().data(), w.size(), sf::kChecksumSeed));
  return w.Take();
}

Result<Snapshot> DecodeSnapshot(std::span<const uint8_t> bytes, SnapshotDefect* defect) {
  if (defect != nullptr) *defect = SnapshotDefect::kNone;
  const Failer fail(defect);
  if (bytes.size() < sf::kMagicField.size) {
    return fail(SnapshotDefect::kTruncated, Num(bytes.size()) + " bytes");
  }
  if (std::memcmp(bytes.data(), sf::kMagic, sizeof(sf::kMagic)) != 0) {
    return fail(SnapshotDefect::kBadMagic, "not a RangeKV snapshot (bad magic)");
  }
  if (bytes.size() < sf::kVersionField.end()) {
    return fail(SnapshotDefect::kTruncated, Num(bytes.size()) + " bytes");
  }
  const uint32_t version = coding::LoadU32(bytes.data() + sf::kVersionField.offset);
  if (version != sf::kSnapshotVersion) {
    return fail(
        SnapshotDefect::kWrongVersion,
        "format version " + Num(version) + ", this build reads " + Num(sf::kSnapshotVersion));
  }
  if (bytes.size() < sf::kMinSnapshotBytes) {
    return fail(SnapshotDefect::kTruncated, Num(bytes.size()) + " bytes, less than the " +
                                                Num(sf::kMinSnapshotBytes) + " of an empty one");
  }
  const uint64_t total = coding::LoadU64(bytes.data() + sf::kTotalBytesField.offset);
  if (total > sf::kMaxSnapshotBytes) {
    return fail(SnapshotDefect::kTooLarge,
                "length field " + Num(total) + " above the bound " + Num(sf::kMaxSnapshotBytes));
  }
  if (total > bytes.size()) {
    return fail(SnapshotDefect::kTruncated, Num(bytes.size()) + " of " + Num(total) + " bytes");
  }
  if (total < bytes.size() || total < sf::kMinSnapshotBytes) {
    return fail(SnapshotDefect::kChecksum,
                "length field " + Num(total) + " != file size " + Num(bytes.size()));
  }
  const uint64_t stored_sum = coding::LoadU64(bytes.data() + total - sf::kChecksumBytes);
  if (Hash64(bytes.data(), total - sf::kChecksumBytes, sf::kChecksumSeed) != stored_sum) {
    return fail(SnapshotDefect::kChecksum, "checksum mismatch");
  }

  ByteReader r(bytes.first(total));
  uint32_t preamble_bytes = 0, section_count = 0, flags = 0;
  uint64_t ignored = 0;
  (void)(r.Skip(sf::kVersionField.end()) && r.U32(&preamble_bytes) && r.U64(&ignored) &&
         r.U32(&section_count) && r.U32(&flags));
  if (preamble_bytes != sf::kPreambleBytes || section_count != sf::kSectionCount || flags != 0) {
    return fail(SnapshotDefect::kMalformed, "preamble fields");
  }
  Snapshot s;
  std::span<const uint8_t> body;
  RANGEKV_RETURN_IF_ERROR(ReadSection(r, sf::kTagIdentity, "identity", fail, &body));
  RANGEKV_RETURN_IF_ERROR(DecodeIdentity(body, fail, &s));
  RANGEKV_RETURN_IF_ERROR(ReadSection(r, sf::kTagDirectory, "directory", fail, &body));
  s.directory.assign(body.begin(), body.end());
  RANGEKV_RETURN_IF_ERROR(ReadSection(r, sf::kTagDigests, "digests", fail, &body));
  RANGEKV_RETURN_IF_ERROR(DecodeDigests(body, fail, &s));
  if (r.remaining() != sf::kChecksumBytes) {
    return fail(SnapshotDefect::kMalformed, "bytes between the last section and the checksum");
  }
  return s;
}

Status CheckSnapshotBinding(const SnapshotIdentity& snap, const SnapshotIdentity& actual,
                            BindingMismatch* mismatch) {
  auto fail = [mismatch](BindingMismatch m, StatusCode code, const std::string& what) {
    if (mismatch != nullptr) *mismatch = m;
    return Status(code, "metadata snapshot describes another pack file: " + what);
  };
  if (mismatch != nullptr) *mismatch = BindingMismatch::kNone;
  if (!(snap.store_uuid == actual.store_uuid)) {
    return fail(
        BindingMismatch::kStoreUuid, StatusCode::kWrongStore,
        "store uuid " + snap.store_uuid.ToHex() + ", pack file has " + actual.store_uuid.ToHex());
  }
  if (!(snap.geometry == actual.geometry)) {
    const Geometry& a = snap.geometry;
    const Geometry& b = actual.geometry;
    return fail(BindingMismatch::kGeometry, StatusCode::kGeometryMismatch,
                "geometry L=" + Num(a.layers) + " s=" + Num(a.token_bytes) +
                    " W=" + Num(a.stripe_bytes) + ", pack file has L=" + Num(b.layers) +
                    " s=" + Num(b.token_bytes) + " W=" + Num(b.stripe_bytes));
  }
  if (!(snap.namespace_id == actual.namespace_id)) {
    return fail(BindingMismatch::kNamespace, StatusCode::kNamespaceMismatch,
                "namespace " + snap.namespace_id.ToHex() + ", pack file has " +
                    actual.namespace_id.ToHex());
  }
  if (snap.pack_count != actual.pack_count || snap.data_offset != actual.data_offset ||
      snap.pack_creation_time_unix_ns != actual.pack_creation_time_unix_ns) {
    return fail(BindingMismatch::kPackLayout, StatusCode::kWrongStore,
                "pack count " + Num(snap.pack_count) + " / data offset " + Num(snap.data_offset) +
                    " / created " + Num(snap.pack_creation_time_unix_ns) + ", pack file has " +
                    Num(actual.pack_count) + " / " + Num(actual.data_offset) + " / " +
                    Num(actual.pack_creation_time_unix_ns));
  }
  if (snap.pack_file_bytes != actual.pack_file_bytes) {
    return fail(
        BindingMismatch::kPackFileBytes, StatusCode::kTruncated,
        "pack file of " + Num(snap.pack_file_bytes) + " bytes, now " + Num(actual.pack_file_bytes));
  }
  return OkStatus();
}

}  // namespace rangekv::persist
