#include "directory/ticket.h"

#include <bit>
#include <cstring>

#include "base/check.h"
#include "base/coding.h"
#include "base/units.h"

namespace rangekv {
namespace {

using coding::ByteReader;
using coding::ByteWriter;

Status Corrupt(std::string what) {
  return Status(StatusCode::kCorruptTicket, "ticket: " + std::move(what));
}

}  // namespace

Status ValidateEnvelope(const Envelope& envelope) {
  if (envelope.request_id.empty()) return InvalidArgument("envelope: empty request id");
  if (envelope.request_id.size() > kMaxRequestIdBytes) {
    return InvalidArgument("envelope: request id of " + std::to_string(envelope.request_id.size()) +
                           " bytes exceeds " + std::to_string(kMaxRequestIdBytes));
  }
  return OkStatus();
}

Digest128 TokenDigest(std::span<const int32_t> tokens) {
  static_assert(std::endian::native == std::endian::little, "token digests assume little-endian");
  return Hash128(tokens.data(), tokens.size_bytes(), 0x746f6b656e73ull);
}

std::vector<uint8_t> EncodeTicket(const Ticket& t) {
  RANGEKV_CHECK(t.envelope.request_id.size() <= kMaxRequestIdBytes);
  RANGEKV_CHECK(t.records.size() <= kMaxTicketRecords);
  ByteWriter w;
  w.Reserve(kTicketFixedBytes + t.envelope.request_id.size() +
            t.records.size() * kTicketRecordBytes);
  w.U32(kTicketMagic);
  w.U16(kTicketVersion);
  w.U16(0);
  w.U32(0);  // total_bytes, patched below
  w.U64(t.ticket_id);
  w.U64(t.owner_epoch);
  w.U64(t.ns.lo);
  w.U64(t.ns.hi);
  w.U16(static_cast<uint16_t>(t.envelope.request_id.size()));
  w.Bytes(t.envelope.request_id.data(), t.envelope.request_id.size());
  w.U64(t.envelope.session);
  w.U32(t.envelope.attempt);
  w.U32(t.envelope.rank);
  w.U64(t.granularity_tokens);
  w.U64(t.query_tokens);
  w.U64(t.hit_tokens);
  w.U64(t.token_digest.lo);
  w.U64(t.token_digest.hi);
  w.U32(static_cast<uint32_t>(t.records.size()));
  for (const PackRecord& r : t.records) {
    w.U32(r.pack_slot);
    w.U64(r.generation);
    w.U64(r.path_token_begin);
    w.U64(r.pack_token_offset);
    w.U64(r.tokens);
  }
  w.PatchU32(8, static_cast<uint32_t>(w.size() + 8));
  w.U64(Hash64(w.bytes().data(), w.size(), kTicketChecksumSeed));
  return w.Take();
}

Result<Ticket> DecodeTicket(std::span<const uint8_t> bytes) {
  if (bytes.size() < kTicketFixedBytes) {
    return Corrupt("truncated: " + std::to_string(bytes.size()) + " bytes");
  }
  if (bytes.size() > kMaxTicketBytes) {
    return Corrupt("oversized: " + std::to_string(bytes.size()) + " bytes");
  }
  ByteReader r(bytes);
  uint32_t magic = 0, total = 0;
  uint16_t version = 0, flags = 0;
  (void)r.U32(&magic);
  (void)r.U16(&version);
  (void)r.U16(&flags);
  (void)r.U32(&total);
  if (magic != kTicketMagic) return Corrupt("bad magic");
  if (version != kTicketVersion) {
    return Status(StatusCode::kWrongVersion, "ticket: version " + std::to_string(version) +
                                                 " (this build reads " +
                                                 std::to_string(kTicketVersion) + ")");
  }
  if (flags != 0) return Corrupt("unknown flags");
  if (total != bytes.size()) {
    return Corrupt("length field " + std::to_string(total) + " != " + std::to_string(bytes.size()) +
                   " bytes");
  }
  // The checksum covers everything before it; verify before interpreting any field further.
  const size_t body = bytes.size() - 8;
  const uint64_t stored_sum = coding::LoadU64(bytes.data() + body);
  if (Hash64(bytes.data(), body, kTicketChecksumSeed) != stored_sum) return Corrupt("checksum");

  Ticket t;
  uint16_t id_len = 0;
  bool ok = r.U64(&t.ticket_id) && r.U64(&t.owner_epoch) && r.U64(&t.ns.lo) && r.U64(&t.ns.hi) &&
            r.U16(&id_len);
  if (!ok) return Corrupt("truncated header");
  if (id_len == 0 || id_len > kMaxRequestIdBytes) {
    return Corrupt("request id length " + std::to_string(id_len));
  }
  std::span<const uint8_t> id_bytes;
  if (!r.View(id_len, &id_bytes)) return Corrupt("truncated request id");
  t.envelope.request_id.assign(reinterpret_cast<const char*>(id_bytes.data()), id_bytes.size());
  uint32_t record_count = 0;
  ok = r.U64(&t.envelope.session) && r.U32(&t.envelope.attempt) && r.U32(&t.envelope.rank) &&
       r.U64(&t.granularity_tokens) && r.U64(&t.query_tokens) && r.U64(&t.hit_tokens) &&
       r.U64(&t.token_digest.lo) && r.U64(&t.token_digest.hi) && r.U32(&record_count);
  if (!ok) return Corrupt("truncated header");
  if (record_count > kMaxTicketRecords) {
    return Corrupt("record count " + std::to_string(record_count));
  }
  // Exactly the records and the checksum must remain; check before allocating.
  if (r.remaining() != size_t{record_count} * kTicketRecordBytes + 8) {
    return Corrupt("record count " + std::to_string(record_count) + " disagrees with length");
  }
  if (t.granularity_tokens == 0) return Corrupt("zero granularity");
  if (t.hit_tokens > t.query_tokens) return Corrupt("hit beyond query");
  if (t.hit_tokens != 0 && t.hit_tokens >= t.query_tokens) {
    return Corrupt("hit covers the last query token");
  }
  if (t.ticket_id == 0 && (t.hit_tokens != 0 || record_count != 0)) {
    return Corrupt("empty ticket with a hit");
  }
  if (t.ticket_id != 0 && t.hit_tokens == 0) return Corrupt("registered ticket without a hit");
  t.records.resize(record_count);
  uint64_t next_begin = 0;
  for (PackRecord& rec : t.records) {
    (void)r.U32(&rec.pack_slot);
    (void)r.U64(&rec.generation);
    (void)r.U64(&rec.path_token_begin);
    (void)r.U64(&rec.pack_token_offset);
    (void)r.U64(&rec.tokens);
    if (rec.tokens == 0) return Corrupt("empty record");
    if (rec.generation == 0) return Corrupt("record with generation 0");
    if (rec.path_token_begin != next_begin) return Corrupt("records do not tile the hit");
    auto end = CheckedAdd(rec.path_token_begin, rec.tokens);
    if (!end || !CheckedAdd(rec.pack_token_offset, rec.tokens)) return Corrupt("record overflow");
    next_begin = *end;
  }
  if (next_begin != t.hit_tokens) return Corrupt("records do not end at the hit");
  return t;
}

std::vector<PackRecord> ClipRecords(std::span<const PackRecord> records, uint64_t endpoint_tokens) {
  std::vector<PackRecord> out;
  for (const PackRecord& r : records) {
    if (r.path_token_begin >= endpoint_tokens) break;
    PackRecord c = r;
    if (c.path_token_end() > endpoint_tokens) c.tokens = endpoint_tokens - c.path_token_begin;
    out.push_back(c);
  }
  return out;
}

}  // namespace rangekv
