// Ticket: the answer to a directory lookup, and its wire format.
//
// A ticket names a reusable prefix [0, hit_tokens) of one query and the pack records that hold
// it, and binds that promise to who asked (Envelope), in which namespace, under which directory
// instance (owner_epoch), over which exact tokens (token_digest). The directory keeps the
// authoritative copy of every outstanding ticket and leases the packs it names; the bytes are
// only a handle that can cross a process boundary (the vLLM scheduler looks up, the worker
// claims). A decoded ticket is therefore never trusted: Directory::Claim compares it field by
// field with the directory's own copy.
//
// Records of a ticket are canonical: in path order, one per pack, tiling [0, hit_tokens)
// exactly (records[0].path_token_begin == 0, each begins where the previous ends, clipped at
// hit_tokens). A ticket with ticket_id == 0 is an empty answer (a miss): no records, no leases,
// nothing to claim or release.
//
// Wire format (all integers little-endian; version 1):
//   u32 magic 'RKVT' (0x54564B52)   u16 version   u16 flags (0)   u32 total_bytes
//   u64 ticket_id   u64 owner_epoch   u64 ns.lo   u64 ns.hi
//   u16 request_id_bytes (<= kMaxRequestIdBytes)   request_id bytes
//   u64 session   u32 attempt   u32 rank
//   u64 granularity_tokens   u64 query_tokens   u64 hit_tokens   u64 digest.lo   u64 digest.hi
//   u32 record_count (<= kMaxTicketRecords)
//   record_count x { u32 pack_slot  u64 generation  u64 path_token_begin  u64 pack_token_offset
//                    u64 tokens }
//   u64 checksum = Hash64(all preceding bytes, kTicketChecksumSeed)
// DecodeTicket reads at most kMaxTicketBytes, checks every length against the remaining bytes
// before using it, verifies the checksum and the structural rules above, and answers
// kCorruptTicket (or kWrongVersion for another version) for anything else.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/pack_record.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

inline constexpr uint32_t kTicketMagic = 0x54564B52;  // "RKVT" little-endian
inline constexpr uint16_t kTicketVersion = 1;
inline constexpr uint32_t kMaxRequestIdBytes = 256;
inline constexpr uint32_t kMaxTicketRecords = 1 << 16;
inline constexpr uint64_t kTicketChecksumSeed = 0x52616e67654b5654ull;
inline constexpr size_t kTicketFixedBytes = 4 + 2 + 2 + 4 + 8 * 4 + 2 + 8 + 4 + 4 + 8 * 5 + 4 + 8;
inline constexpr size_t kTicketRecordBytes = 4 + 8 * 4;
inline constexpr size_t kMaxTicketBytes =
    kTicketFixedBytes + kMaxRequestIdBytes + size_t{kMaxTicketRecords} * kTicketRecordBytes;

// Who asks: the identity a ticket is bound to. A claim must present the same envelope.
struct Envelope {
  std::string request_id;  // the serving engine's request id; 1..kMaxRequestIdBytes bytes
  uint64_t session = 0;    // scheduler session (a restarted scheduler is a new session)
  uint32_t attempt = 0;    // request attempt (a preempted and re-queued request may bump it)
  uint32_t rank = 0;       // tensor-parallel rank whose directory issued the ticket
  friend bool operator==(const Envelope&, const Envelope&) = default;
};

// kInvalidArgument when request_id is empty or longer than kMaxRequestIdBytes.
Status ValidateEnvelope(const Envelope& envelope);

struct Ticket {
  uint64_t ticket_id = 0;  // 0: empty answer (miss); otherwise unique within owner_epoch
  uint64_t owner_epoch = 0;
  NamespaceId ns;
  Envelope envelope;
  uint64_t granularity_tokens = 0;  // reuse granularity the hit was rounded to
  uint64_t query_tokens = 0;        // length of the looked-up token buffer
  uint64_t hit_tokens = 0;          // the promised endpoint; < query_tokens unless both are 0
  Digest128 token_digest;           // TokenDigest(tokens[0, hit_tokens))
  std::vector<PackRecord> records;  // canonical, see above

  bool empty() const { return ticket_id == 0; }
  friend bool operator==(const Ticket&, const Ticket&) = default;
};

// Digest of packed int32 token ids (their little-endian bytes), as used by tickets and claims.
Digest128 TokenDigest(std::span<const int32_t> tokens);

// Serializes a ticket. REQUIRES: the envelope is valid and records.size() <= kMaxTicketRecords.
std::vector<uint8_t> EncodeTicket(const Ticket& ticket);

// Parses untrusted bytes. Bounded: never reads past `bytes`, never allocates more than the
// validated record count. kCorruptTicket for malformed input, kWrongVersion for a version this
// build does not understand.
Result<Ticket> DecodeTicket(std::span<const uint8_t> bytes);

// Records of `ticket` clipped to [0, endpoint_tokens), dropping empty ones.
// REQUIRES endpoint_tokens <= ticket.hit_tokens.
std::vector<PackRecord> ClipRecords(std::span<const PackRecord> records, uint64_t endpoint_tokens);

}  // namespace rangekv
