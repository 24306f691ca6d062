// The publication journal's codec (format: persist/journal_format.h, docs/pack-format.md
// "Publication journal"). This is the decoder and encoder only: the writer that appends records
// after the payload they name is durable, group-commits them, and the replay at a dirty open are
// not built yet (see docs/fault-model.md "Publication journal (planned)").
//
// DecodeJournal never fails on a damaged tail: it returns every record up to the last intact
// one and says why it stopped (JournalTail). Only a damaged or foreign file header makes the
// whole journal unusable (a non-OK status).
//
// Thread-safety: stateless functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pack/pack_header.h"
#include "persist/journal_format.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::persist {

struct JournalHeader {
  StoreUuid store_uuid;
  uint64_t base_epoch = 0;
  friend bool operator==(const JournalHeader&, const JournalHeader&) = default;
};

struct JournalPublish {
  NamespaceId ns;
  uint32_t slot = 0;
  uint32_t layers = 0;
  uint64_t generation = 0;
  uint64_t stored_tokens = 0;
  uint32_t digest_block_tokens = 0;
  uint32_t blocks_per_layer = 0;
  std::vector<int32_t> path_tokens;  // the whole path; the pack holds its last stored_tokens
  std::vector<uint64_t> digests;     // layers x blocks_per_layer, layer-major
  friend bool operator==(const JournalPublish&, const JournalPublish&) = default;
};

struct JournalRemove {
  uint32_t slot = 0;
  uint64_t generation = 0;
  friend bool operator==(const JournalRemove&, const JournalRemove&) = default;
};

struct JournalEpoch {
  uint64_t epoch = 0;
  uint64_t generation_floor = 0;
  friend bool operator==(const JournalEpoch&, const JournalEpoch&) = default;
};

struct JournalRecord {
  journal_format::RecordType type = journal_format::kEpoch;
  uint64_t sequence = 0;
  JournalPublish publish;  // type == kPublish
  JournalRemove remove;    // type == kRemove
  JournalEpoch epoch;      // type == kEpoch
  friend bool operator==(const JournalRecord&, const JournalRecord&) = default;
};

// Why decoding stopped where it did.
enum class JournalTail : uint8_t {
  kClean,          // the bytes end exactly after the last record
  kTorn,           // a record runs past the end (a torn append)
  kChecksum,       // a record's checksum does not match
  kOutOfSequence,  // a record's sequence number is not the previous one + 1
  kMalformed,      // a record passes its checksum but its fields are impossible
};
std::string_view JournalTailName(JournalTail tail);

struct DecodedJournal {
  JournalHeader header;
  std::vector<JournalRecord> records;
  uint64_t intact_bytes = 0;  // header + every kept record
  JournalTail tail = JournalTail::kClean;
  std::string tail_detail;  // empty when kClean
};

std::vector<uint8_t> EncodeJournalHeader(const JournalHeader& header);
// One record, `sequence` included; append the result to the file.
std::vector<uint8_t> EncodeJournalRecord(const JournalRecord& record);
// kTruncated / kCorruption / kWrongVersion for an unusable file header; otherwise the records
// up to the last intact one.
Result<DecodedJournal> DecodeJournal(std::span<const uint8_t> bytes);

}  // namespace rangekv::persist
