// Fuzzes DecodeJournal (persist/journal.h), the publication journal's decoder.
//
// Each input is decoded as given, and again behind a valid file header with every record's
// checksum recomputed in place (so the record field checks behind the checksums are reached).
// Properties checked:
// - decoding never crashes, reads out of bounds or allocates beyond the input;
// - intact_bytes never exceeds the input, and re-encoding the kept records behind the same
//   header gives exactly the first intact_bytes bytes (one encoding per record);
// - a clean tail means every byte was consumed.
// Run: journal_decode_fuzzer -max_total_time=30 CORPUS_DIR   (CI: scripts/test.sh)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "base/coding.h"
#include "base/digest.h"
#include "persist/journal.h"

namespace {

namespace jf = rangekv::journal_format;
using rangekv::persist::DecodeJournal;
using rangekv::persist::EncodeJournalHeader;
using rangekv::persist::EncodeJournalRecord;
using rangekv::persist::JournalTail;

void Check(std::span<const uint8_t> bytes) {
  auto d = DecodeJournal(bytes);
  if (!d.ok()) return;
  if (d->intact_bytes > bytes.size()) std::abort();
  if (d->tail == JournalTail::kClean && d->intact_bytes != bytes.size()) std::abort();
  std::vector<uint8_t> again = EncodeJournalHeader(d->header);
  for (const auto& r : d->records) {
    const std::vector<uint8_t> e = EncodeJournalRecord(r);
    again.insert(again.end(), e.begin(), e.end());
  }
  if (again.size() != d->intact_bytes ||
      std::memcmp(again.data(), bytes.data(), again.size()) != 0) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(std::span(data, size));
  // Behind a valid header, with record checksums fixed up front to back.
  std::vector<uint8_t> fixed = EncodeJournalHeader({rangekv::StoreUuid{1, 2}, 1});
  fixed.insert(fixed.end(), data, data + size);
  size_t at = jf::kFileHeaderBytes;
  uint64_t seq = 1;
  while (fixed.size() - at >= jf::kRecordHeaderBytes) {
    uint32_t payload = rangekv::coding::LoadU32(fixed.data() + at) % (1u << 16);
    if (fixed.size() - at - jf::kRecordHeaderBytes < payload + uint64_t{jf::kRecordChecksumBytes}) {
      break;
    }
    rangekv::coding::StoreU32(fixed.data() + at, payload);
    if (seq % 4 != 0) rangekv::coding::StoreU64(fixed.data() + at + 8, seq);
    const size_t body = jf::kRecordHeaderBytes + payload;
    rangekv::coding::StoreU64(fixed.data() + at + body,
                              rangekv::Hash64(fixed.data() + at, body, jf::kRecordChecksumSeed));
    at += body + jf::kRecordChecksumBytes;
    ++seq;
  }
  Check(fixed);
  return 0;
}
