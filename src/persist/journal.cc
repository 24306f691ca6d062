#include "persist/journal.h"

#include <cstring>

#include "base/coding.h"
#include "base/digest.h"

namespace rangekv::persist {
namespace {

namespace jf = journal_format;
using coding::ByteReader;
using coding::ByteWriter;

std::string Num(uint64_t v) { return std::to_string(v); }

void PutPayload(ByteWriter& w, const JournalRecord& r) {
  switch (r.type) {
    case jf::kPublish: {
      const JournalPublish& p = r.publish;
      w.U64(p.ns.lo);
      w.U64(p.ns.hi);
      w.U32(p.slot);
      w.U32(p.layers);
      w.U64(p.generation);
      w.U64(p.path_tokens.size());
      w.U64(p.stored_tokens);
      w.U32(p.digest_block_tokens);
      w.U32(p.blocks_per_layer);
      for (int32_t t : p.path_tokens) w.U32(static_cast<uint32_t>(t));
      for (uint64_t d : p.digests) w.U64(d);
      return;
    }
    case jf::kRemove:
      w.U32(r.remove.slot);
      w.U32(0);
      w.U64(r.remove.generation);
      return;
    case jf::kEpoch:
      w.U64(r.epoch.epoch);
      w.U64(r.epoch.generation_floor);
      return;
  }
}

// Decodes one payload that passed its checksum; an empty string means OK, else what is wrong.
std::string ParsePayload(uint16_t type, std::span<const uint8_t> payload, JournalRecord* out) {
  ByteReader r(payload);
  switch (type) {
    case jf::kPublish: {
      out->type = jf::kPublish;
      JournalPublish& p = out->publish;
      uint64_t path = 0;
      if (!(r.U64(&p.ns.lo) && r.U64(&p.ns.hi) && r.U32(&p.slot) && r.U32(&p.layers) &&
            r.U64(&p.generation) && r.U64(&path) && r.U64(&p.stored_tokens) &&
            r.U32(&p.digest_block_tokens) && r.U32(&p.blocks_per_layer))) {
        return "publish record shorter than its fixed fields";
      }
      if (p.generation == 0) return "publish of generation 0";
      if (p.layers == 0) return "publish with 0 layers";
      if (path == 0 || path > jf::kMaxPathTokens) return "path of " + Num(path) + " tokens";
      if (p.stored_tokens == 0 || p.stored_tokens > path) {
        return "stored tokens " + Num(p.stored_tokens) + " of a " + Num(path) + "-token path";
      }
      if (p.digest_block_tokens == 0 ||
          p.blocks_per_layer !=
              (p.stored_tokens + p.digest_block_tokens - 1) / p.digest_block_tokens) {
        return "digest blocks disagree with the stored tokens";
      }
      const uint64_t digests = uint64_t{p.layers} * p.blocks_per_layer;
      if (r.remaining() != path * 4 + digests * 8) return "publish length disagrees with counts";
      p.path_tokens.resize(path);
      for (int32_t& t : p.path_tokens) {
        uint32_t v = 0;
        (void)r.U32(&v);
        t = static_cast<int32_t>(v);
      }
      p.digests.resize(digests);
      for (uint64_t& d : p.digests) (void)r.U64(&d);
      return "";
    }
    case jf::kRemove: {
      out->type = jf::kRemove;
      uint32_t zero = 1;
      if (payload.size() != jf::kRemoveBytes || !r.U32(&out->remove.slot) || !r.U32(&zero) ||
          !r.U64(&out->remove.generation)) {
        return "remove record of " + Num(payload.size()) + " bytes";
      }
      if (zero != 0) return "remove record reserved field not 0";
      if (out->remove.generation == 0) return "remove of generation 0";
      return "";
    }
    case jf::kEpoch: {
      out->type = jf::kEpoch;
      if (payload.size() != jf::kEpochBytes || !r.U64(&out->epoch.epoch) ||
          !r.U64(&out->epoch.generation_floor)) {
        return "epoch record of " + Num(payload.size()) + " bytes";
      }
      if (out->epoch.epoch == 0) return "epoch 0";
      return "";
    }
    default:
      return "unknown record type " + Num(type);
  }
}

}  // namespace

std::string_view JournalTailName(JournalTail tail) {
  switch (tail) {
    case JournalTail::kClean:
      return "clean";
    case JournalTail::kTorn:
      return "torn";
    case JournalTail::kChecksum:
      return "checksum";
    case JournalTail::kOutOfSequence:
      return "out_of_sequence";
    case JournalTail::kMalformed:
      return "malformed";
  }
  return "unknown";
}

std::vector<uint8_t> EncodeJournalHeader(const JournalHeader& h) {
  ByteWriter w;
  w.Bytes(jf::kMagic, sizeof(jf::kMagic));
  w.U32(jf::kJournalVersion);
  w.U32(jf::kFileHeaderBytes);
  w.U64(h.store_uuid.lo);
  w.U64(h.store_uuid.hi);
  w.U64(h.base_epoch);
  w.U64(Hash64(w.bytes().data(), w.size(), jf::kHeaderChecksumSeed));
  return w.Take();
}

std::vector<uint8_t> EncodeJournalRecord(const JournalRecord& record) {
  ByteWriter w;
  w.U32(0);  // payload_bytes, patched below
  w.U16(record.type);
  w.U16(0);
  w.U64(record.sequence);
  PutPayload(w, record);
  w.PatchU32(0, static_cast<uint32_t>(w.size() - jf::kRecordHeaderBytes));
  w.U64(Hash64(w.bytes().data(), w.size(), jf::kRecordChecksumSeed));
  return w.Take();
}

Result<DecodedJournal> DecodeJournal(std::span<const uint8_t> bytes) {
  if (bytes.size() < jf::kFileHeaderBytes) {
    return Status(StatusCode::kTruncated,
                  "journal: " + Num(bytes.size()) + " bytes, shorter than its header");
  }
  if (bytes.size() > jf::kMaxJournalBytes) {
    return Corruption("journal: " + Num(bytes.size()) + " bytes, over the bound");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p + jf::kMagicField.offset, jf::kMagic, sizeof(jf::kMagic)) != 0) {
    return Corruption("journal: bad magic");
  }
  const uint32_t version = coding::LoadU32(p + jf::kVersionField.offset);
  if (version != jf::kJournalVersion) {
    return Status(StatusCode::kWrongVersion, "journal: version " + Num(version));
  }
  if (Hash64(p, jf::kHeaderChecksumField.offset, jf::kHeaderChecksumSeed) !=
      coding::LoadU64(p + jf::kHeaderChecksumField.offset)) {
    return Corruption("journal: header checksum");
  }
  if (coding::LoadU32(p + jf::kHeaderBytesField.offset) != jf::kFileHeaderBytes) {
    return Corruption("journal: header size");
  }
  DecodedJournal out;
  out.header.store_uuid.lo = coding::LoadU64(p + jf::kStoreUuidField.offset);
  out.header.store_uuid.hi = coding::LoadU64(p + jf::kStoreUuidField.offset + 8);
  out.header.base_epoch = coding::LoadU64(p + jf::kBaseEpochField.offset);
  if (out.header.store_uuid.is_nil()) return Corruption("journal: nil store UUID");

  ByteReader r(bytes.subspan(jf::kFileHeaderBytes));
  uint64_t expected_sequence = 1;
  out.intact_bytes = jf::kFileHeaderBytes;
  auto stop = [&out](JournalTail tail, std::string detail) {
    out.tail = tail;
    out.tail_detail = std::move(detail);
  };
  while (r.remaining() > 0) {
    const size_t at = r.position();
    const std::string where =
        "record " + Num(expected_sequence) + " at byte " + Num(jf::kFileHeaderBytes + at);
    uint32_t payload_bytes = 0;
    uint16_t type = 0, flags = 0;
    uint64_t sequence = 0;
    if (!(r.U32(&payload_bytes) && r.U16(&type) && r.U16(&flags) && r.U64(&sequence))) {
      stop(JournalTail::kTorn, where + ": header runs past the end");
      break;
    }
    if (payload_bytes > jf::kMaxRecordPayloadBytes) {
      // A length beyond the bound is either a torn length field or garbage: the checksum
      // cannot be found, so the tail is dropped as corrupt.
      stop(JournalTail::kChecksum, where + ": payload length " + Num(payload_bytes));
      break;
    }
    std::span<const uint8_t> payload;
    uint64_t stored_sum = 0;
    if (!(r.View(payload_bytes, &payload) && r.U64(&stored_sum))) {
      stop(JournalTail::kTorn, where + ": runs past the end");
      break;
    }
    const size_t record_bytes = jf::kRecordHeaderBytes + payload_bytes;
    if (Hash64(bytes.data() + jf::kFileHeaderBytes + at, record_bytes, jf::kRecordChecksumSeed) !=
        stored_sum) {
      stop(JournalTail::kChecksum, where + ": checksum");
      break;
    }
    if (sequence != expected_sequence) {
      stop(JournalTail::kOutOfSequence, where + ": sequence " + Num(sequence));
      break;
    }
    JournalRecord rec;
    rec.sequence = sequence;
    std::string bad = flags != 0 ? "unknown flags" : ParsePayload(type, payload, &rec);
    if (!bad.empty()) {
      stop(JournalTail::kMalformed, where + ": " + bad);
      break;
    }
    out.records.push_back(std::move(rec));
    ++expected_sequence;
    out.intact_bytes = jf::kFileHeaderBytes + r.position();
  }
  return out;
}

}  // namespace rangekv::persist
