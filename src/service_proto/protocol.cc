#include "service_proto/protocol.h"

#include <bit>
#include <cstring>

#include "base/coding.h"

namespace rangekv::service {

namespace {

using coding::ByteReader;
using coding::ByteWriter;
using coding::PutGeometry;

// Every DirectoryStats field, in wire order (appending is a protocol version bump). clang-format
// rewraps these lists differently on every run, so they are kept as written.
// clang-format off
#define RANGEKV_STATS_U64(X)                                                                  \
  X(lookups) X(lookup_hits) X(repeated_lookups) X(tokens_compared) X(records_selected)        \
  X(keys_built) X(key_probes) X(leases_taken) X(leases_released) X(tickets_issued) X(claims)  \
  X(claim_failures) X(releases) X(cancels) X(reservations) X(joins) X(publications) X(aborts) \
  X(evictions) X(retirements) X(reclaims) X(invalidations) X(arena_bytes) X(scalar_keys)
#define RANGEKV_STATS_U32(X)                                                             \
  X(free_slots) X(reserved_slots) X(visible_slots) X(retired_slots) X(usable_slots)      \
  X(tree_nodes) X(tree_records) X(namespaces) X(outstanding_tickets) X(inflight_reservations)
// clang-format on

void Append(ByteWriter& w, std::vector<uint8_t>* out) {
  if (out->empty()) {
    *out = w.Take();  // the common case: no copy of a large body
    return;
  }
  const std::vector<uint8_t>& b = w.bytes();
  out->insert(out->end(), b.begin(), b.end());
}

void PutString(ByteWriter& w, std::string_view s) {
  w.U32(static_cast<uint32_t>(s.size()));
  w.Bytes(s.data(), s.size());
}
void PutBytes(ByteWriter& w, std::span<const uint8_t> b) {
  w.U32(static_cast<uint32_t>(b.size()));
  w.Bytes(b.data(), b.size());
}
// Token ids are little-endian u32 on the wire. A lookup carries the whole query (128K tokens:
// 512 KiB), so on little-endian hosts the array is copied in one piece: element by element it
// cost more than the directory lookup itself (bench lookup --store).
void PutTokens(ByteWriter& w, std::span<const int32_t> t) {
  w.U32(static_cast<uint32_t>(t.size()));
  if constexpr (std::endian::native == std::endian::little) {
    w.Bytes(t.data(), t.size_bytes());
  } else {
    for (int32_t x : t) w.U32(static_cast<uint32_t>(x));
  }
}
void PutEnvelope(ByteWriter& w, const Envelope& e) {
  PutString(w, e.request_id);
  w.U64(e.session);
  w.U32(e.attempt);
  w.U32(e.rank);
}
void PutRecord(ByteWriter& w, const PackRecord& r) {
  w.U32(r.pack_slot);
  w.U64(r.generation);
  w.U64(r.path_token_begin);
  w.U64(r.pack_token_offset);
  w.U64(r.tokens);
}
void PutRecords(ByteWriter& w, std::span<const PackRecord> records) {
  w.U32(static_cast<uint32_t>(records.size()));
  for (const PackRecord& r : records) PutRecord(w, r);
}

// A bounded reader: the first failure names its field and sticks.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : r_(in) {}

  void U8(uint8_t* v, const char* field) { Check(r_.U8(v), field); }
  void U32(uint32_t* v, const char* field) { Check(r_.U32(v), field); }
  void U64(uint64_t* v, const char* field) { Check(r_.U64(v), field); }
  void Bool(bool* v, const char* field) {
    uint8_t b = 0;
    U8(&b, field);
    if (status_.ok() && b > 1) Fail(field, "not 0 or 1");
    *v = b == 1;
  }
  // A count of elements of `unit` bytes each, at most `cap`, that must fit in the bytes left.
  uint32_t Count(const char* field, uint32_t cap, size_t unit) {
    uint32_t n = 0;
    U32(&n, field);
    if (!status_.ok()) return 0;
    if (n > cap) {
      status_ = ResourceExhausted(std::string("service message: ") + field + " count " +
                                  std::to_string(n) + " exceeds " + std::to_string(cap));
      return 0;
    }
    if (unit != 0 && r_.remaining() / unit < n) {
      Fail(field, "count beyond the message");
      return 0;
    }
    return n;
  }
  void String(std::string* s, const char* field, uint32_t cap = kMaxStringBytes) {
    const uint32_t n = Count(field, cap, 1);
    std::span<const uint8_t> v;
    if (!status_.ok()) return;
    Check(r_.View(n, &v), field);
    if (status_.ok()) s->assign(reinterpret_cast<const char*>(v.data()), v.size());
  }
  void Bytes(std::vector<uint8_t>* b, const char* field, uint32_t cap) {
    const uint32_t n = Count(field, cap, 1);
    std::span<const uint8_t> v;
    if (!status_.ok()) return;
    Check(r_.View(n, &v), field);
    if (status_.ok()) b->assign(v.begin(), v.end());
  }
  void Tokens(std::vector<int32_t>* t, const char* field) {
    const uint32_t n = Count(field, kMaxTokensPerMessage, 4);
    if (!status_.ok()) return;
    std::span<const uint8_t> v;
    Check(r_.View(size_t{n} * 4, &v), field);
    if (!status_.ok()) return;
    t->resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      if (n != 0) std::memcpy(t->data(), v.data(), v.size());
    } else {
      for (uint32_t i = 0; i < n; ++i) {
        (*t)[i] = static_cast<int32_t>(coding::LoadU32(v.data() + 4 * size_t{i}));
      }
    }
  }
  void Envelope(rangekv::Envelope* e) {
    String(&e->request_id, "request_id", kMaxRequestIdBytes);
    U64(&e->session, "session");
    U32(&e->attempt, "attempt");
    U32(&e->rank, "rank");
  }
  void Record(PackRecord* r) {
    U32(&r->pack_slot, "record slot");
    U64(&r->generation, "record generation");
    U64(&r->path_token_begin, "record path_token_begin");
    U64(&r->pack_token_offset, "record pack_token_offset");
    U64(&r->tokens, "record tokens");
  }
  void Records(std::vector<PackRecord>* records) {
    const uint32_t n = Count("records", kMaxRecordsPerMessage, 36);
    if (!status_.ok()) return;
    records->resize(n);
    for (uint32_t i = 0; i < n && status_.ok(); ++i) Record(&(*records)[i]);
  }
  void Geometry(rangekv::Geometry* g) { Check(coding::GetGeometry(r_, g), "geometry"); }
  // OK when every field decoded and no byte is left over.
  Status Finish() {
    if (status_.ok() && r_.remaining() != 0) {
      status_ =
          Corruption("service message: " + std::to_string(r_.remaining()) + " trailing bytes");
    }
    return status_;
  }
  size_t remaining() const { return r_.remaining(); }
  bool ok() const { return status_.ok(); }
  std::span<const uint8_t> Rest(std::span<const uint8_t> all) const {
    return all.subspan(all.size() - r_.remaining());
  }

 private:
  void Check(bool ok, const char* field) {
    if (!ok && status_.ok()) Fail(field, "truncated");
  }
  void Fail(const char* field, const char* what) {
    if (status_.ok()) status_ = Corruption(std::string("service message: ") + field + " " + what);
  }
  ByteReader r_;
  Status status_;
};

}  // namespace

Status ValidateTenant(std::string_view t) {
  bool ok = !t.empty() && t.size() <= 64 && t != "." && t != "..";
  for (char c : t) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  }
  if (ok) return OkStatus();
  return InvalidArgument("tenant '" + std::string(t.substr(0, 80)) +
                         "': 1-64 characters of [A-Za-z0-9._-], not . or ..");
}

std::string_view MessageTypeName(uint16_t type) {
  switch (static_cast<MessageType>(type & ~kReplyBit)) {
    case MessageType::kHello:
      return "hello";
    case MessageType::kLookup:
      return "lookup";
    case MessageType::kClaim:
      return "claim";
    case MessageType::kRelease:
      return "release";
    case MessageType::kCancel:
      return "cancel";
    case MessageType::kReserve:
      return "reserve";
    case MessageType::kPublish:
      return "publish";
    case MessageType::kAbort:
      return "abort";
    case MessageType::kInFlight:
      return "in_flight";
    case MessageType::kAwaitDurable:
      return "await_durable";
    case MessageType::kGetDigests:
      return "get_digests";
    case MessageType::kCorrupt:
      return "corrupt";
    case MessageType::kStats:
      return "stats";
    case MessageType::kGoodbye:
      return "goodbye";
    case MessageType::kAttachQueryBuffer:
      return "attach_query_buffer";
    case MessageType::kLookupShared:
      return "lookup_shared";
    case MessageType::kClaimShared:
      return "claim_shared";
    case MessageType::kAttachReadGate:
      return "attach_read_gate";
  }
  return "unknown";
}

bool IsKnownType(uint16_t type) {
  const uint16_t t = type & ~kReplyBit;
  return t >= static_cast<uint16_t>(MessageType::kHello) &&
         t <= static_cast<uint16_t>(MessageType::kAttachReadGate);
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  coding::StoreU32(out, kFrameMagic);
  coding::StoreU16(out + 4, h.version);
  coding::StoreU16(out + 6, h.type);
  coding::StoreU32(out + 8, h.body_bytes);
}

Result<FrameHeader> DecodeHeader(std::span<const uint8_t> b) {
  if (b.size() < kHeaderBytes) return Corruption("service frame: header truncated");
  if (coding::LoadU32(b.data()) != kFrameMagic) return Corruption("service frame: bad magic");
  FrameHeader h;
  h.version = coding::LoadU16(b.data() + 4);
  h.type = coding::LoadU16(b.data() + 6);
  h.body_bytes = coding::LoadU32(b.data() + 8);
  if (h.version != kProtocolVersion) {
    return Status(StatusCode::kWrongVersion, "service frame: protocol version " +
                                                 std::to_string(h.version) + ", this side speaks " +
                                                 std::to_string(kProtocolVersion));
  }
  if (!IsKnownType(h.type)) {
    return InvalidArgument("service frame: unknown message type " + std::to_string(h.type));
  }
  if (h.body_bytes > kMaxBodyBytes) {
    return ResourceExhausted("service frame: body of " + std::to_string(h.body_bytes) +
                             " bytes exceeds " + std::to_string(kMaxBodyBytes));
  }
  return h;
}

std::vector<uint8_t> Frame(uint16_t type, std::span<const uint8_t> body) {
  std::vector<uint8_t> out(kHeaderBytes + body.size());
  EncodeHeader({kProtocolVersion, type, static_cast<uint32_t>(body.size())}, out.data());
  if (!body.empty()) std::memcpy(out.data() + kHeaderBytes, body.data(), body.size());
  return out;
}

void EncodeStatus(const Status& s, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(s.code()));
  const std::string m = std::string(s.message()).substr(0, kMaxStringBytes);
  PutString(w, m);
  Append(w, out);
}

Status DecodeStatus(std::span<const uint8_t> body, Status* remote, std::span<const uint8_t>* rest) {
  Reader r(body);
  uint8_t code = 0;
  std::string message;
  r.U8(&code, "status code");
  r.String(&message, "status message");
  if (!r.ok()) return r.Finish();
  if (code > static_cast<uint8_t>(kLastStatusCode)) {
    return Corruption("service message: status code " + std::to_string(code));
  }
  *remote = code == 0 ? OkStatus() : Status(static_cast<StatusCode>(code), std::move(message));
  *rest = r.Rest(body);
  return OkStatus();
}

// ---- bodies -----------------------------------------------------------------------------------

void Encode(const HelloRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U32(m.protocol);
  PutGeometry(w, m.geometry);
  w.U64(m.ns.lo);
  w.U64(m.ns.hi);
  PutString(w, m.tenant);
  w.U64(m.capacity_bytes);
  w.U8(m.direct ? 1 : 0);
  w.U64(m.digest_block_tokens);
  w.U32(m.pid);
  PutString(w, m.identity);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, HelloRequest* m) {
  Reader r(body);
  r.U32(&m->protocol, "protocol");
  r.Geometry(&m->geometry);
  r.U64(&m->ns.lo, "namespace");
  r.U64(&m->ns.hi, "namespace");
  r.String(&m->tenant, "tenant", 256);
  r.U64(&m->capacity_bytes, "capacity_bytes");
  r.Bool(&m->direct, "direct");
  r.U64(&m->digest_block_tokens, "digest_block_tokens");
  r.U32(&m->pid, "pid");
  r.String(&m->identity, "identity", kMaxIdentityBytes);
  return r.Finish();
}

void Encode(const HelloReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.session_id);
  w.U64(m.owner_epoch);
  w.U64(m.pack_count);
  w.U64(m.capacity_bytes);
  w.U64(m.digest_block_tokens);
  w.U64(m.digest_seed);
  w.U8(m.direct ? 1 : 0);
  w.U8(m.loaded ? 1 : 0);
  PutString(w, m.recovery_reason);
  w.U64(m.packs_loaded);
  PutString(w, m.store_dir);
  w.U8(m.every_publish ? 1 : 0);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, HelloReply* m) {
  Reader r(body);
  r.U64(&m->session_id, "session_id");
  r.U64(&m->owner_epoch, "owner_epoch");
  r.U64(&m->pack_count, "pack_count");
  r.U64(&m->capacity_bytes, "capacity_bytes");
  r.U64(&m->digest_block_tokens, "digest_block_tokens");
  r.U64(&m->digest_seed, "digest_seed");
  r.Bool(&m->direct, "direct");
  r.Bool(&m->loaded, "loaded");
  r.String(&m->recovery_reason, "recovery_reason");
  r.U64(&m->packs_loaded, "packs_loaded");
  r.String(&m->store_dir, "store_dir");
  r.Bool(&m->every_publish, "every_publish");
  return r.Finish();
}

namespace {

// Ends a head whose last field is a token array: on little-endian hosts the array's wire bytes
// are the tokens as they lie in memory, returned as the tail; elsewhere they go to `out` too.
std::span<const uint8_t> EndWithTokens(ByteWriter& w, std::span<const int32_t> tokens,
                                       std::vector<uint8_t>* out) {
  if constexpr (std::endian::native == std::endian::little) {
    w.U32(static_cast<uint32_t>(tokens.size()));
    Append(w, out);
    return {reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes()};
  }
  PutTokens(w, tokens);
  Append(w, out);
  return {};
}

void AppendTail(std::span<const uint8_t> tail, std::vector<uint8_t>* out) {
  out->insert(out->end(), tail.begin(), tail.end());
}

}  // namespace

std::span<const uint8_t> EncodeLookupHead(const Envelope& envelope, uint64_t granularity_tokens,
                                          std::span<const int32_t> tokens,
                                          std::vector<uint8_t>* out) {
  ByteWriter w;
  w.Reserve(64 + envelope.request_id.size());
  PutEnvelope(w, envelope);
  w.U64(granularity_tokens);
  return EndWithTokens(w, tokens, out);
}
void Encode(const LookupRequest& m, std::vector<uint8_t>* out) {
  AppendTail(EncodeLookupHead(m.envelope, m.granularity_tokens, m.tokens, out), out);
}
Status Decode(std::span<const uint8_t> body, LookupRequest* m) {
  Reader r(body);
  r.Envelope(&m->envelope);
  r.U64(&m->granularity_tokens, "granularity_tokens");
  r.Tokens(&m->tokens, "tokens");
  return r.Finish();
}

void Encode(const LookupReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  // Reserving first also keeps GCC 12 from a false -Wstringop-overflow on the insert below.
  w.Reserve(8 + m.ticket.size());
  PutBytes(w, m.ticket);
  w.U32(m.readers);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, LookupReply* m) {
  Reader r(body);
  r.Bytes(&m->ticket, "ticket", static_cast<uint32_t>(kMaxTicketBytes));
  r.U32(&m->readers, "readers");
  return r.Finish();
}

std::span<const uint8_t> EncodeClaimHead(std::span<const uint8_t> ticket, const Envelope& envelope,
                                         uint64_t endpoint_tokens, std::span<const int32_t> tokens,
                                         std::vector<uint8_t>* out) {
  ByteWriter w;
  w.Reserve(ticket.size() + 64 + envelope.request_id.size());
  PutBytes(w, ticket);
  PutEnvelope(w, envelope);
  w.U64(endpoint_tokens);
  return EndWithTokens(w, tokens, out);
}
void Encode(const ClaimRequest& m, std::vector<uint8_t>* out) {
  AppendTail(EncodeClaimHead(m.ticket, m.envelope, m.endpoint_tokens, m.tokens, out), out);
}
Status Decode(std::span<const uint8_t> body, ClaimRequest* m) {
  Reader r(body);
  r.Bytes(&m->ticket, "ticket", static_cast<uint32_t>(kMaxTicketBytes));
  r.Envelope(&m->envelope);
  r.U64(&m->endpoint_tokens, "endpoint_tokens");
  r.Tokens(&m->tokens, "tokens");
  return r.Finish();
}

void Encode(const ClaimReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.claim.ticket_id);
  w.U64(m.claim.endpoint_tokens);
  PutRecords(w, m.claim.records);
  w.U32(m.readers);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, ClaimReply* m) {
  Reader r(body);
  r.U64(&m->claim.ticket_id, "ticket_id");
  r.U64(&m->claim.endpoint_tokens, "endpoint_tokens");
  r.Records(&m->claim.records);
  r.U32(&m->readers, "readers");
  return r.Finish();
}

void Encode(const IdMessage& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.id);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, IdMessage* m) {
  Reader r(body);
  r.U64(&m->id, "id");
  return r.Finish();
}

void Encode(const CancelRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  PutString(w, m.request_id);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, CancelRequest* m) {
  Reader r(body);
  r.String(&m->request_id, "request_id", kMaxRequestIdBytes);
  return r.Finish();
}

void Encode(const CancelReply& m, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(m.outcome));
}
Status Decode(std::span<const uint8_t> body, CancelReply* m) {
  Reader r(body);
  uint8_t v = 0;
  r.U8(&v, "cancel outcome");
  if (r.ok() && v > static_cast<uint8_t>(CancelOutcome::kClaimedKept)) {
    return Corruption("service message: cancel outcome " + std::to_string(v));
  }
  m->outcome = static_cast<CancelOutcome>(v);
  return r.Finish();
}

void Encode(const InFlightReply& m, std::vector<uint8_t>* out) {
  out->push_back(m.in_flight ? 1 : 0);
}
Status Decode(std::span<const uint8_t> body, InFlightReply* m) {
  Reader r(body);
  r.Bool(&m->in_flight, "in_flight");
  return r.Finish();
}

std::span<const uint8_t> EncodeReserveHead(std::span<const int32_t> tokens,
                                           std::vector<uint8_t>* out) {
  ByteWriter w;
  return EndWithTokens(w, tokens, out);
}
void Encode(const ReserveRequest& m, std::vector<uint8_t>* out) {
  AppendTail(EncodeReserveHead(m.tokens, out), out);
}
Status Decode(std::span<const uint8_t> body, ReserveRequest* m) {
  Reader r(body);
  r.Tokens(&m->tokens, "tokens");
  return r.Finish();
}

void Encode(const ReserveReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(m.reservation.outcome));
  w.U64(m.reservation.reservation_id);
  w.U64(m.reservation.begin_tokens);
  w.U64(m.reservation.end_tokens);
  PutRecords(w, m.reservation.records);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, ReserveReply* m) {
  Reader r(body);
  uint8_t outcome = 0;
  r.U8(&outcome, "reserve outcome");
  if (r.ok() && outcome > static_cast<uint8_t>(ReserveOutcome::kAlreadyStored)) {
    return Corruption("service message: reserve outcome " + std::to_string(outcome));
  }
  m->reservation.outcome = static_cast<ReserveOutcome>(outcome);
  r.U64(&m->reservation.reservation_id, "reservation_id");
  r.U64(&m->reservation.begin_tokens, "begin_tokens");
  r.U64(&m->reservation.end_tokens, "end_tokens");
  r.Records(&m->reservation.records);
  return r.Finish();
}

void Encode(const PublishRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.reservation_id);
  w.U32(static_cast<uint32_t>(m.layers.size()));
  for (const LayerDigests& l : m.layers) {
    w.U32(l.slot);
    w.U64(l.generation);
    w.U64(l.stored_tokens);
    w.U32(l.layer);
    w.U32(static_cast<uint32_t>(l.digests.size()));
    for (uint64_t d : l.digests) w.U64(d);
  }
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, PublishRequest* m) {
  Reader r(body);
  r.U64(&m->reservation_id, "reservation_id");
  const uint32_t n = r.Count("layer digests", kMaxRecordsPerMessage, 28);
  m->layers.resize(n);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    LayerDigests& l = m->layers[i];
    r.U32(&l.slot, "digest slot");
    r.U64(&l.generation, "digest generation");
    r.U64(&l.stored_tokens, "digest stored_tokens");
    r.U32(&l.layer, "digest layer");
    const uint32_t k = r.Count("digests", kMaxDigestsPerMessage, 8);
    total += k;
    if (total > kMaxDigestsPerMessage) {
      return ResourceExhausted("service message: more than " +
                               std::to_string(kMaxDigestsPerMessage) + " digests");
    }
    l.digests.resize(k);
    for (uint32_t j = 0; j < k && r.ok(); ++j) r.U64(&l.digests[j], "digest");
  }
  return r.Finish();
}

void Encode(const PackRef& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U32(m.slot);
  w.U64(m.generation);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, PackRef* m) {
  Reader r(body);
  r.U32(&m->slot, "slot");
  r.U64(&m->generation, "generation");
  return r.Finish();
}

void Encode(const DigestsReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.stored_tokens);
  w.U32(m.layers);
  w.U64(m.blocks_per_layer);
  w.U32(static_cast<uint32_t>(m.digests.size()));
  for (uint64_t d : m.digests) w.U64(d);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, DigestsReply* m) {
  Reader r(body);
  r.U64(&m->stored_tokens, "stored_tokens");
  r.U32(&m->layers, "layers");
  r.U64(&m->blocks_per_layer, "blocks_per_layer");
  const uint32_t n = r.Count("digests", kMaxDigestsPerMessage, 8);
  m->digests.resize(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) r.U64(&m->digests[i], "digest");
  if (r.ok() && (m->blocks_per_layer == 0 ||
                 uint64_t{m->layers} * m->blocks_per_layer != m->digests.size())) {
    return Corruption("service message: digests are not layers x blocks_per_layer");
  }
  return r.Finish();
}

void Encode(const StatsReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
#define RANGEKV_PUT64(f) w.U64(m.stats.f);
#define RANGEKV_PUT32(f) w.U32(m.stats.f);
  RANGEKV_STATS_U64(RANGEKV_PUT64)
  RANGEKV_STATS_U32(RANGEKV_PUT32)
#undef RANGEKV_PUT64
#undef RANGEKV_PUT32
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, StatsReply* m) {
  Reader r(body);
#define RANGEKV_GET64(f) r.U64(&m->stats.f, #f);
#define RANGEKV_GET32(f) r.U32(&m->stats.f, #f);
  RANGEKV_STATS_U64(RANGEKV_GET64)
  RANGEKV_STATS_U32(RANGEKV_GET32)
#undef RANGEKV_GET64
#undef RANGEKV_GET32
  return r.Finish();
}

void Encode(const AttachReadGateReply& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U32(m.holder);
  w.U32(m.slots);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, AttachReadGateReply* m) {
  Reader r(body);
  r.U32(&m->holder, "holder");
  r.U32(&m->slots, "slots");
  return r.Finish();
}

void Encode(const AttachQueryBufferRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.U64(m.bytes);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, AttachQueryBufferRequest* m) {
  Reader r(body);
  r.U64(&m->bytes, "bytes");
  RANGEKV_RETURN_IF_ERROR(r.Finish());
  if (m->bytes > kMaxQueryBufferBytes) {
    return ResourceExhausted("service message: query buffer of " + std::to_string(m->bytes) +
                             " bytes (at most " + std::to_string(kMaxQueryBufferBytes) + ")");
  }
  if (m->bytes == 0 || m->bytes % 4 != 0) {
    return Corruption("service message: query buffer of " + std::to_string(m->bytes) + " bytes");
  }
  return OkStatus();
}

namespace {
Status CheckTokenCount(uint32_t n) {
  if (n > kMaxTokensPerMessage) {
    return ResourceExhausted("service message: token_count " + std::to_string(n) + " (at most " +
                             std::to_string(kMaxTokensPerMessage) + ")");
  }
  return OkStatus();
}
}  // namespace

void Encode(const LookupSharedRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.Reserve(64 + m.envelope.request_id.size());
  PutEnvelope(w, m.envelope);
  w.U64(m.granularity_tokens);
  w.U32(m.token_count);
  w.U32(m.client_cpu);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, LookupSharedRequest* m) {
  Reader r(body);
  r.Envelope(&m->envelope);
  r.U64(&m->granularity_tokens, "granularity_tokens");
  r.U32(&m->token_count, "token_count");
  r.U32(&m->client_cpu, "client_cpu");
  RANGEKV_RETURN_IF_ERROR(r.Finish());
  return CheckTokenCount(m->token_count);
}

void Encode(const ClaimSharedRequest& m, std::vector<uint8_t>* out) {
  ByteWriter w;
  w.Reserve(m.ticket.size() + 64 + m.envelope.request_id.size());
  PutBytes(w, m.ticket);
  PutEnvelope(w, m.envelope);
  w.U64(m.endpoint_tokens);
  w.U32(m.token_count);
  w.U32(m.client_cpu);
  Append(w, out);
}
Status Decode(std::span<const uint8_t> body, ClaimSharedRequest* m) {
  Reader r(body);
  r.Bytes(&m->ticket, "ticket", static_cast<uint32_t>(kMaxTicketBytes));
  r.Envelope(&m->envelope);
  r.U64(&m->endpoint_tokens, "endpoint_tokens");
  r.U32(&m->token_count, "token_count");
  r.U32(&m->client_cpu, "client_cpu");
  RANGEKV_RETURN_IF_ERROR(r.Finish());
  return CheckTokenCount(m->token_count);
}

Status DecodeRequestBody(uint16_t type, std::span<const uint8_t> body) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kHello: {
      HelloRequest m;
      return Decode(body, &m);
    }
    case MessageType::kLookup: {
      LookupRequest m;
      return Decode(body, &m);
    }
    case MessageType::kClaim: {
      ClaimRequest m;
      return Decode(body, &m);
    }
    case MessageType::kRelease:
    case MessageType::kAbort:
    case MessageType::kInFlight:
    case MessageType::kAwaitDurable: {
      IdMessage m;
      return Decode(body, &m);
    }
    case MessageType::kCancel: {
      CancelRequest m;
      return Decode(body, &m);
    }
    case MessageType::kReserve: {
      ReserveRequest m;
      return Decode(body, &m);
    }
    case MessageType::kPublish: {
      PublishRequest m;
      return Decode(body, &m);
    }
    case MessageType::kGetDigests:
    case MessageType::kCorrupt: {
      PackRef m;
      return Decode(body, &m);
    }
    case MessageType::kStats:
    case MessageType::kGoodbye:
    case MessageType::kAttachReadGate:
      return body.empty() ? OkStatus() : Corruption("service message: unexpected body");
    case MessageType::kAttachQueryBuffer: {
      AttachQueryBufferRequest m;
      return Decode(body, &m);
    }
    case MessageType::kLookupShared: {
      LookupSharedRequest m;
      return Decode(body, &m);
    }
    case MessageType::kClaimShared: {
      ClaimSharedRequest m;
      return Decode(body, &m);
    }
  }
  return InvalidArgument("service frame: unknown message type " + std::to_string(type));
}

}  // namespace rangekv::service
