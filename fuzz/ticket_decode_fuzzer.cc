// Fuzzes DecodeTicket (directory/ticket.h) and the claim path behind it.
//
// Each input is decoded three times: as given; with its trailing checksum recomputed; and with
// magic, version, flags and length field set right as well, so that the structural checks
// behind the header and the checksum are reached (random bytes almost never pass them).
// Properties checked:
// - decoding never crashes, reads out of bounds or allocates beyond the input's record count;
// - a successful decode re-encodes to exactly the input bytes (the format has one encoding);
// - a decoded ticket can be handed to Directory::Claim without harm, and a directory that never
//   issued it refuses it (it cannot be claimed into leases).
// Run: ticket_decode_fuzzer -max_total_time=30 CORPUS_DIR   (CI: scripts/test.sh)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "base/digest.h"
#include "directory/directory.h"
#include "directory/ticket.h"

namespace {

using rangekv::Directory;
using rangekv::DirectoryOptions;
using rangekv::Ticket;

Directory& SharedDirectory() {
  static Directory* d = [] {
    DirectoryOptions o;
    o.pack_slots = 8;
    o.tokens_per_pack = 16;
    o.pack_bytes = 4096;
    auto r = Directory::Create(o);
    if (!r.ok()) std::abort();
    return std::move(r).value().release();
  }();
  return *d;
}

void Seal(std::vector<uint8_t>* b) {
  const size_t body = b->size() - 8;
  const uint64_t sum = rangekv::Hash64(b->data(), body, rangekv::kTicketChecksumSeed);
  for (int i = 0; i < 8; ++i) (*b)[body + i] = static_cast<uint8_t>(sum >> (8 * i));
}

void Check(std::span<const uint8_t> bytes) {
  rangekv::Result<Ticket> t = rangekv::DecodeTicket(bytes);
  if (!t.ok()) return;
  const std::vector<uint8_t> again = rangekv::EncodeTicket(*t);
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) {
    std::abort();  // a second encoding of the same ticket
  }
  auto claim = SharedDirectory().Claim(t->ns, *t, t->envelope, {}, t->hit_tokens);
  if (claim.ok()) std::abort();  // never issued by this directory
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  Check(bytes);
  if (size < 8 || size > rangekv::kMaxTicketBytes) return 0;
  std::vector<uint8_t> sealed(data, data + size);
  Seal(&sealed);
  Check(sealed);
  if (size < 12) return 0;
  const uint32_t magic = rangekv::kTicketMagic, total = static_cast<uint32_t>(size);
  for (int i = 0; i < 4; ++i) {
    sealed[i] = static_cast<uint8_t>(magic >> (8 * i));
    sealed[8 + i] = static_cast<uint8_t>(total >> (8 * i));
  }
  sealed[4] = rangekv::kTicketVersion;
  sealed[5] = sealed[6] = sealed[7] = 0;
  Seal(&sealed);
  Check(sealed);
  return 0;
}
