// Fuzzes Directory::Deserialize (the directory snapshot format, directory/directory.cc).
//
// Each input is tried as given and with its header (magic, version, length, geometry) and
// checksum set right, so the
// structural validation behind them is reached. A snapshot that decodes must give a directory
// whose invariants hold, that serves lookups, and whose own snapshot decodes again.
// Run: directory_snapshot_fuzzer -max_total_time=30 CORPUS_DIR   (CI: scripts/test.sh)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "base/digest.h"
#include "directory/directory.h"

namespace {

constexpr uint64_t kSnapshotSeed = 0x52616e67654b5644ull;  // directory.cc

rangekv::DirectoryOptions Options() {
  rangekv::DirectoryOptions o;
  o.pack_slots = 8;
  o.tokens_per_pack = 16;
  o.pack_bytes = 4096;
  o.max_nodes = 256;
  o.max_records = 256;
  o.max_arena_bytes = 1 << 16;
  o.max_namespaces = 4;
  return o;
}

void Check(std::span<const uint8_t> bytes) {
  auto d = rangekv::Directory::Deserialize(Options(), bytes);
  if (!d.ok()) return;
  if (!(*d)->CheckInvariants().ok()) std::abort();
  for (const rangekv::NamespaceId& ns : (*d)->Namespaces()) {
    for (const rangekv::StoredPack& p : (*d)->ListPacks(ns)) {
      if (p.record.tokens == 0 || p.record.generation == 0) std::abort();
    }
  }
  // Every decode issues a fresh owner epoch (snapshot epoch + 1), so a snapshot written at the
  // last representable epoch cannot be reopened: that one refusal is the correct answer.
  if ((*d)->owner_epoch() == UINT64_MAX) return;
  auto again = rangekv::Directory::Deserialize(Options(), (*d)->Serialize());
  if (!again.ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(std::span<const uint8_t>(data, size));
  if (size < 24 || size > (1 << 20)) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  const uint32_t magic = 0x44564B52;
  for (int i = 0; i < 4; ++i) fixed[i] = static_cast<uint8_t>(magic >> (8 * i));
  fixed[4] = 1;
  fixed[5] = fixed[6] = fixed[7] = 0;
  for (int i = 0; i < 8; ++i) fixed[8 + i] = static_cast<uint8_t>(uint64_t{size} >> (8 * i));
  if (size >= 44) {  // pack_slots (u32 at 24) and tokens_per_pack (u64 at 28) of Options()
    const rangekv::DirectoryOptions o = Options();
    for (int i = 0; i < 4; ++i) fixed[24 + i] = static_cast<uint8_t>(o.pack_slots >> (8 * i));
    for (int i = 0; i < 8; ++i) fixed[28 + i] = static_cast<uint8_t>(o.tokens_per_pack >> (8 * i));
  }
  const uint64_t sum = rangekv::Hash64(fixed.data(), size - 8, kSnapshotSeed);
  for (int i = 0; i < 8; ++i) fixed[size - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  Check(fixed);
  return 0;
}
