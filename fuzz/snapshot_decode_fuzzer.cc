// Fuzzes DecodeSnapshot (persist/snapshot.h): the metadata snapshot is read from disk at every
// open and may be truncated, torn, corrupted or foreign.
//
// Each input is decoded three ways, so that the checks behind the checksum are reached (random
// bytes almost never carry a valid XXH3):
//   1. as given;
//   2. with magic, version, preamble fields and length set right and the checksum recomputed;
//   3. as edits to a valid sample snapshot: the input is read as (u16 offset, u8 value) triples
//      written over the sample, then the checksum is recomputed.
// Properties checked:
// - decoding never crashes, reads out of bounds, or allocates beyond what the input holds;
// - success and SnapshotDefect agree (kNone exactly on success);
// - a successful decode re-encodes to exactly the decoded bytes (the format has one encoding),
//   and binds to its own identity.
// Run: snapshot_decode_fuzzer -max_total_time=30 CORPUS_DIR
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "base/digest.h"
#include "persist/snapshot.h"
#include "persist/snapshot_format.h"

namespace {

namespace sf = rangekv::snapshot_format;
using rangekv::persist::DecodeSnapshot;
using rangekv::persist::EncodeSnapshot;
using rangekv::persist::Snapshot;
using rangekv::persist::SnapshotDefect;

const std::vector<uint8_t>& Sample() {
  static const std::vector<uint8_t> bytes = [] {
    Snapshot s;
    s.identity.store_uuid = {0x1111, 0x2222};
    s.identity.namespace_id = {0x3333, 0x4444};
    rangekv::Geometry& g = s.identity.geometry;
    g.layers = 2;
    g.kv_heads_per_rank = 1;
    g.head_size = 8;
    g.dtype_bytes = 2;
    g.block_size = 16;
    g.token_bytes = 32;
    g.stripe_bytes = 4096;
    g.tokens_per_stripe = 128;
    g.pack_bytes = 8192;
    s.identity.pack_count = 4;
    s.identity.data_offset = 4096;
    s.identity.pack_file_bytes = 4096 + 4 * 8192;
    s.store_epoch = 3;
    s.max_generation = 9;
    s.directory = {1, 2, 3, 4, 5, 6, 7, 8};
    s.digest_block_tokens = 32;
    for (uint32_t slot : {0u, 2u}) {
      rangekv::persist::PackDigests d;
      d.slot = slot;
      d.generation = slot + 1;
      d.stored_tokens = slot == 0 ? 128 : 33;
      d.layers = 2;
      d.blocks_per_layer = slot == 0 ? 4 : 2;
      d.digests.assign(d.layers * d.blocks_per_layer, 0x5555 + slot);
      s.digests.push_back(d);
    }
    return EncodeSnapshot(s);
  }();
  return bytes;
}

void Seal(std::vector<uint8_t>* b) {
  if (b->size() < 8) return;
  const size_t body = b->size() - 8;
  const uint64_t sum = rangekv::Hash64(b->data(), body, sf::kChecksumSeed);
  for (int i = 0; i < 8; ++i) (*b)[body + i] = static_cast<uint8_t>(sum >> (8 * i));
}

void PutLe(std::vector<uint8_t>* b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

void Check(std::span<const uint8_t> bytes) {
  SnapshotDefect defect = SnapshotDefect::kMalformed;
  rangekv::Result<Snapshot> s = DecodeSnapshot(bytes, &defect);
  if (s.ok() != (defect == SnapshotDefect::kNone)) std::abort();
  if (!s.ok()) return;
  const std::vector<uint8_t> again = EncodeSnapshot(*s);
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) {
    std::abort();  // a second encoding of the same snapshot
  }
  if (!rangekv::persist::CheckSnapshotBinding(s->identity, s->identity).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(std::span(data, size));
  // 2. Preamble set right, checksum recomputed.
  if (size >= sf::kPreambleBytes + 8 && size <= (1u << 20)) {
    std::vector<uint8_t> b(data, data + size);
    std::memcpy(b.data(), sf::kMagic, sizeof(sf::kMagic));
    PutLe(&b, sf::kVersionField.offset, sf::kSnapshotVersion, 4);
    PutLe(&b, sf::kPreambleBytesField.offset, sf::kPreambleBytes, 4);
    PutLe(&b, sf::kTotalBytesField.offset, size, 8);
    PutLe(&b, sf::kSectionCountField.offset, sf::kSectionCount, 4);
    PutLe(&b, sf::kFlagsField.offset, 0, 4);
    Seal(&b);
    Check(b);
  }
  // 3. Edits to a valid snapshot.
  std::vector<uint8_t> b = Sample();
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const size_t at = (size_t{data[i]} | size_t{data[i + 1]} << 8) % b.size();
    b[at] = data[i + 2];
  }
  if (size % 3 == 1) b.resize(b.size() - data[size - 1] % 64);  // sometimes cut the tail
  Seal(&b);
  Check(b);
  return 0;
}
