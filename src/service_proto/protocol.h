// The store service's wire protocol (docs/store-service.md "Protocol"): what an engine in a
// serving process and the node's store service (`rangekv serve`) say to each other over a Unix
// domain socket. Only index operations cross the socket, batched per request (one round trip
// per lookup, claim, reservation or publication, never one per record); payload bytes never do:
// the client reads and writes the shared pack file itself, through a file descriptor the
// service passes at Hello (SCM_RIGHTS).
//
// Framing. Every message is a 12-byte header then a body:
//   u32 magic "RKVS" | u16 version (kProtocolVersion) | u16 type | u32 body bytes
// little-endian, the body at most kMaxBodyBytes. A request's reply carries the same type with
// kReplyBit set and starts with a status (u8 code, u32 length, message bytes). A peer that
// sends a bad magic, an unknown version or type, an oversized or truncated body, or a body whose
// fields do not decode exactly (trailing bytes included) gets an error reply when one can be
// framed and its connection is closed; nothing it sent is applied.
//
// Every decoder here is bounded (counts checked against the bytes left and against the caps
// below before anything is allocated) and total: any byte string yields a value or an error,
// never a crash (fuzz/service_protocol_fuzzer.cc runs them).
//
// Thread-safety: stateless functions over caller-owned values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/pack_record.h"
#include "directory/directory.h"
#include "directory/ticket.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::service {

inline constexpr uint32_t kFrameMagic = 0x53564B52;  // "RKVS" little-endian
// 2: the shared query buffer (kAttachQueryBuffer, kLookupShared, kClaimShared).
// 3: a shared lookup / claim names the CPU its caller ran on (client_cpu).
// 4: lookup and claim replies say how many sessions are reading the node's stores (readers).
// 5: the node's read gate (kAttachReadGate).
// 6: Hello carries the store's identity record (persist/identity_record.h).
inline constexpr uint16_t kProtocolVersion = 6;
inline constexpr size_t kHeaderBytes = 12;
inline constexpr uint32_t kMaxBodyBytes = 32u << 20;
inline constexpr uint32_t kMaxTokensPerMessage = 4u << 20;   // int32 tokens of one query
inline constexpr uint32_t kMaxRecordsPerMessage = 1u << 16;  // pack records of one reply
inline constexpr uint32_t kMaxDigestsPerMessage = 1u << 21;  // u64 block digests
inline constexpr uint32_t kMaxStringBytes = 4096;            // tenant, messages, paths
inline constexpr uint32_t kMaxIdentityBytes = 256u << 10;    // Hello's identity record
// A session's shared query buffer: one query's int32 tokens at most.
inline constexpr uint64_t kMaxQueryBufferBytes = uint64_t{kMaxTokensPerMessage} * 4;
inline constexpr uint16_t kReplyBit = 0x8000;

enum class MessageType : uint16_t {
  kHello = 1,
  kLookup = 2,
  kClaim = 3,
  kRelease = 4,
  kCancel = 5,
  kReserve = 6,
  kPublish = 7,
  kAbort = 8,
  kInFlight = 9,
  kAwaitDurable = 10,
  kGetDigests = 11,
  kCorrupt = 12,
  kStats = 13,
  kGoodbye = 14,
  // The shared query buffer (docs/store-service.md "Query buffer"): the client passes a sealed
  // memfd once (SCM_RIGHTS); a lookup or claim then names only how many tokens it wrote at the
  // buffer's start instead of carrying them, so a 128K-token query crosses no socket.
  kAttachQueryBuffer = 15,
  kLookupShared = 16,
  kClaimShared = 17,
  // The node's read gate (read_gate.h): the reply passes the service's gate page (SCM_RIGHTS)
  // and a holder index of the session's own. kUnavailable when the service runs without one.
  kAttachReadGate = 18,
};
std::string_view MessageTypeName(uint16_t type);
bool IsKnownType(uint16_t type);

// A tenant name: 1-64 characters of [A-Za-z0-9._-], not "." or "..": it names a directory
// under the service's root, so nothing else could ever connect. kInvalidArgument otherwise.
// Checked wherever a name is given: Hello, `rangekv serve --tenant-quota`, engine options.
Status ValidateTenant(std::string_view tenant);

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t body_bytes = 0;
};
void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// kCorruption (bad magic), kWrongVersion, kInvalidArgument (unknown type), kResourceExhausted
// (body larger than kMaxBodyBytes).
Result<FrameHeader> DecodeHeader(std::span<const uint8_t> bytes);

// ---- message bodies ---------------------------------------------------------------------------

struct HelloRequest {
  uint32_t protocol = kProtocolVersion;
  Geometry geometry;
  NamespaceId ns;
  std::string tenant = "default";  // quota account (docs/store-service.md "Isolation")
  uint64_t capacity_bytes = 0;     // wanted capacity of a new namespace store (capped by quota)
  bool direct = true;              // the client wants an O_DIRECT descriptor when possible
  uint64_t digest_block_tokens = 0;
  uint32_t pid = 0;  // informational; the service trusts SO_PEERCRED
  // The identity record the service keeps beside a namespace store (identity.json, at most
  // persist::kMaxIdentityRecordBytes); empty: none. Informational (`rangekv inspect`).
  std::string identity;
};
struct HelloReply {
  uint64_t session_id = 0;
  uint64_t owner_epoch = 0;
  uint64_t pack_count = 0;
  uint64_t capacity_bytes = 0;  // granted
  uint64_t digest_block_tokens = 0;
  uint64_t digest_seed = 0;
  bool direct = false;  // the passed descriptor has O_DIRECT
  bool loaded = false;  // the namespace store's index came from its snapshot
  std::string recovery_reason;
  uint64_t packs_loaded = 0;
  std::string store_dir;       // informational (logs)
  bool every_publish = false;  // the service's durability: a store waits for AwaitDurable
};

struct LookupRequest {
  Envelope envelope;
  uint64_t granularity_tokens = 0;
  std::vector<int32_t> tokens;
};
// readers (lookup and claim replies): how many sessions of the service are restoring now or
// were within the service's reader window (1 s by default), the caller's included once it hit
// or claimed; at least 1 (docs/store-service.md "Sharing the node's read concurrency"). The
// client's engine divides its read concurrency by it.
struct LookupReply {
  std::vector<uint8_t> ticket;  // empty on a miss
  uint32_t readers = 1;
};

struct AttachReadGateReply {  // the gate page's memfd travels with the frame
  uint32_t holder = 0;
  uint32_t slots = 0;
};

struct AttachQueryBufferRequest {  // the memfd travels with the frame
  uint64_t bytes = 0;
};
// A lookup / claim whose tokens are the first token_count int32 (little-endian) of the
// session's query buffer. client_cpu: the CPU the caller wrote them from (sched_getcpu), or
// kUnknownCpu; the service may run the walk there, where the tokens are in cache
// (docs/store-service.md "Latency: the walk on the client's CPU").
inline constexpr uint32_t kUnknownCpu = 0xFFFFFFFFu;
struct LookupSharedRequest {
  Envelope envelope;
  uint64_t granularity_tokens = 0;
  uint32_t token_count = 0;
  uint32_t client_cpu = kUnknownCpu;
};

struct ClaimRequest {
  std::vector<uint8_t> ticket;
  Envelope envelope;
  uint64_t endpoint_tokens = 0;
  std::vector<int32_t> tokens;
};
struct ClaimReply {
  ClaimedRange claim;
  uint32_t readers = 1;
};
struct ClaimSharedRequest {
  std::vector<uint8_t> ticket;
  Envelope envelope;
  uint64_t endpoint_tokens = 0;
  uint32_t token_count = 0;
  uint32_t client_cpu = kUnknownCpu;
};

struct IdMessage {  // Release (ticket id), Abort / InFlight / AwaitDurable (reservation id)
  uint64_t id = 0;
};
struct CancelRequest {
  std::string request_id;
};
struct CancelReply {
  CancelOutcome outcome = CancelOutcome::kNoTicket;
};
struct InFlightReply {
  bool in_flight = false;
};

struct ReserveRequest {
  std::vector<int32_t> tokens;
};
struct ReserveReply {
  Reservation reservation;
};

// One layer's block digests of one new pack (StoreIntegrity::RecordSpan's arguments).
struct LayerDigests {
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t stored_tokens = 0;
  uint32_t layer = 0;
  std::vector<uint64_t> digests;
};
struct PublishRequest {
  uint64_t reservation_id = 0;
  std::vector<LayerDigests> layers;
};

struct PackRef {  // GetDigests, Corrupt
  uint32_t slot = 0;
  uint64_t generation = 0;
};
struct DigestsReply {
  uint64_t stored_tokens = 0;
  uint32_t layers = 0;
  uint64_t blocks_per_layer = 0;
  std::vector<uint64_t> digests;  // layer-major: layers x blocks_per_layer
};

struct StatsReply {
  DirectoryStats stats;
};

// Body encoders append to `out`; decoders consume the whole body or fail with kCorruption
// naming the field (kResourceExhausted for a count over its cap).
void Encode(const HelloRequest& m, std::vector<uint8_t>* out);
void Encode(const HelloReply& m, std::vector<uint8_t>* out);
void Encode(const LookupRequest& m, std::vector<uint8_t>* out);
// Encode(LookupRequest) from a borrowed token span, split (a lookup's query is the largest body
// on the hot path; this skips every copy of it): appends everything before the token array to
// `out` and returns the array's wire bytes (a view of `tokens`), to be sent right after it; on
// big-endian hosts the whole body goes to `out` and the view is empty.
std::span<const uint8_t> EncodeLookupHead(const Envelope& envelope, uint64_t granularity_tokens,
                                          std::span<const int32_t> tokens,
                                          std::vector<uint8_t>* out);
// The same split for the other bodies that end with a query's tokens.
std::span<const uint8_t> EncodeClaimHead(std::span<const uint8_t> ticket, const Envelope& envelope,
                                         uint64_t endpoint_tokens, std::span<const int32_t> tokens,
                                         std::vector<uint8_t>* out);
std::span<const uint8_t> EncodeReserveHead(std::span<const int32_t> tokens,
                                           std::vector<uint8_t>* out);
void Encode(const LookupReply& m, std::vector<uint8_t>* out);
void Encode(const ClaimRequest& m, std::vector<uint8_t>* out);
void Encode(const ClaimReply& m, std::vector<uint8_t>* out);
void Encode(const IdMessage& m, std::vector<uint8_t>* out);
void Encode(const CancelRequest& m, std::vector<uint8_t>* out);
void Encode(const CancelReply& m, std::vector<uint8_t>* out);
void Encode(const InFlightReply& m, std::vector<uint8_t>* out);
void Encode(const ReserveRequest& m, std::vector<uint8_t>* out);
void Encode(const ReserveReply& m, std::vector<uint8_t>* out);
void Encode(const PublishRequest& m, std::vector<uint8_t>* out);
void Encode(const PackRef& m, std::vector<uint8_t>* out);
void Encode(const DigestsReply& m, std::vector<uint8_t>* out);
void Encode(const StatsReply& m, std::vector<uint8_t>* out);
void Encode(const AttachQueryBufferRequest& m, std::vector<uint8_t>* out);
void Encode(const AttachReadGateReply& m, std::vector<uint8_t>* out);
void Encode(const LookupSharedRequest& m, std::vector<uint8_t>* out);
void Encode(const ClaimSharedRequest& m, std::vector<uint8_t>* out);

Status Decode(std::span<const uint8_t> body, HelloRequest* m);
Status Decode(std::span<const uint8_t> body, HelloReply* m);
Status Decode(std::span<const uint8_t> body, LookupRequest* m);
Status Decode(std::span<const uint8_t> body, LookupReply* m);
Status Decode(std::span<const uint8_t> body, ClaimRequest* m);
Status Decode(std::span<const uint8_t> body, ClaimReply* m);
Status Decode(std::span<const uint8_t> body, IdMessage* m);
Status Decode(std::span<const uint8_t> body, CancelRequest* m);
Status Decode(std::span<const uint8_t> body, CancelReply* m);
Status Decode(std::span<const uint8_t> body, InFlightReply* m);
Status Decode(std::span<const uint8_t> body, ReserveRequest* m);
Status Decode(std::span<const uint8_t> body, ReserveReply* m);
Status Decode(std::span<const uint8_t> body, PublishRequest* m);
Status Decode(std::span<const uint8_t> body, PackRef* m);
Status Decode(std::span<const uint8_t> body, DigestsReply* m);
Status Decode(std::span<const uint8_t> body, StatsReply* m);
// kResourceExhausted for bytes over kMaxQueryBufferBytes or a token count over
// kMaxTokensPerMessage; kCorruption for zero or unaligned bytes.
Status Decode(std::span<const uint8_t> body, AttachQueryBufferRequest* m);
Status Decode(std::span<const uint8_t> body, AttachReadGateReply* m);
Status Decode(std::span<const uint8_t> body, LookupSharedRequest* m);
Status Decode(std::span<const uint8_t> body, ClaimSharedRequest* m);

// A reply body starts with the status of the request.
void EncodeStatus(const Status& s, std::vector<uint8_t>* out);
// Splits a reply body into the remote status and the rest. kCorruption for an undecodable one.
Status DecodeStatus(std::span<const uint8_t> body, Status* remote, std::span<const uint8_t>* rest);

// A complete frame (header + body) of `type`.
std::vector<uint8_t> Frame(uint16_t type, std::span<const uint8_t> body);

// Decodes one request frame's body by type, for the fuzzer and the service's validation path:
// OK when `body` is a well-formed body of request `type`.
Status DecodeRequestBody(uint16_t type, std::span<const uint8_t> body);

}  // namespace rangekv::service
