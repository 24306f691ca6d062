#include "persist/snapshot.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "base/coding.h"
#include "base/digest.h"
#include "persist/snapshot_format.h"

namespace rangekv::persist {
namespace {

namespace sf = snapshot_format;

Geometry SmallGeometry() {
  ModelSpec spec;
  spec.model_id = "test";
  spec.layers = 2;
  spec.kv_heads = 1;
  spec.head_size = 8;
  spec.dtype_bytes = 2;
  Result<Geometry> g = DeriveGeometry(spec, 4096);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;  // s = 32, T = 128, pack_bytes = 8 KiB
}

Snapshot SampleSnapshot() {
  Snapshot s;
  s.identity.store_uuid = {0x1111, 0x2222};
  s.identity.namespace_id = {0x3333, 0x4444};
  s.identity.geometry = SmallGeometry();
  s.identity.pack_count = 8;
  s.identity.data_offset = 4096;
  s.identity.pack_file_bytes = 4096 + 8 * s.identity.geometry.pack_bytes;
  s.identity.pack_creation_time_unix_ns = 123456789;
  s.store_epoch = 7;
  s.max_generation = (uint64_t{6} << 32) + 3;
  s.saved_time_unix_ns = 987654321;
  s.directory = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  s.digest_block_tokens = 32;
  for (uint32_t slot : {1u, 4u}) {
    PackDigests d;
    d.slot = slot;
    d.generation = 10 + slot;
    d.stored_tokens = slot == 1 ? 128 : 40;
    d.layers = 2;
    d.blocks_per_layer = slot == 1 ? 4 : 2;
    for (uint32_t i = 0; i < d.layers * d.blocks_per_layer; ++i) d.digests.push_back(i * 31 + slot);
    s.digests.push_back(d);
  }
  return s;
}

// Re-encodes `bytes` with a correct checksum after an edit (crafting valid-checksum input).
void Reseal(std::vector<uint8_t>* bytes) {
  const uint64_t sum = Hash64(bytes->data(), bytes->size() - 8, sf::kChecksumSeed);
  for (int i = 0; i < 8; ++i)
    (*bytes)[bytes->size() - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
}

Result<Snapshot> Decode(const std::vector<uint8_t>& b, SnapshotDefect* d) {
  return DecodeSnapshot(std::span(b.data(), b.size()), d);
}

TEST(SnapshotTest, RoundTrip) {
  const Snapshot s = SampleSnapshot();
  const std::vector<uint8_t> bytes = EncodeSnapshot(s);
  SnapshotDefect defect = SnapshotDefect::kMalformed;
  Result<Snapshot> back = Decode(bytes, &defect);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(defect, SnapshotDefect::kNone);
  EXPECT_EQ(*back, s);
  EXPECT_EQ(coding::LoadU64(bytes.data() + sf::kTotalBytesField.offset), bytes.size());
}

TEST(SnapshotTest, EmptyStoreRoundTrip) {
  Snapshot s = SampleSnapshot();
  s.digests.clear();
  s.directory.clear();
  const std::vector<uint8_t> bytes = EncodeSnapshot(s);
  EXPECT_EQ(bytes.size(), sf::kMinSnapshotBytes);
  Result<Snapshot> back = Decode(bytes, nullptr);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
}

TEST(SnapshotTest, EveryTruncationIsDetected) {
  const std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    SnapshotDefect defect = SnapshotDefect::kNone;
    Result<Snapshot> r = Decode(cut, &defect);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(defect, SnapshotDefect::kTruncated) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kTruncated) << n;
  }
}

TEST(SnapshotTest, EveryFlippedByteIsDetected) {
  const std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x10;
    SnapshotDefect defect = SnapshotDefect::kNone;
    Result<Snapshot> r = Decode(bad, &defect);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    if (i >= sf::kTotalBytesField.end()) {
      EXPECT_EQ(defect, SnapshotDefect::kChecksum) << "byte " << i;
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    }
  }
}

TEST(SnapshotTest, WrongMagicAndVersion) {
  std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  SnapshotDefect defect;
  std::vector<uint8_t> bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(Decode(bad, &defect).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(defect, SnapshotDefect::kBadMagic);
  bad = bytes;
  bad[sf::kVersionField.offset] = 2;
  Reseal(&bad);
  EXPECT_EQ(Decode(bad, &defect).status().code(), StatusCode::kWrongVersion);
  EXPECT_EQ(defect, SnapshotDefect::kWrongVersion);
}

TEST(SnapshotTest, AbsurdLengthFieldIsRejectedBeforeUse) {
  std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  for (int i = 0; i < 8; ++i) bytes[sf::kTotalBytesField.offset + i] = 0xff;
  SnapshotDefect defect;
  EXPECT_FALSE(Decode(bytes, &defect).ok());
  EXPECT_EQ(defect, SnapshotDefect::kTooLarge);
}

TEST(SnapshotTest, TrailingBytesAreNotIgnored) {
  std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  bytes.push_back(0);
  SnapshotDefect defect;
  EXPECT_FALSE(Decode(bytes, &defect).ok());
  EXPECT_EQ(defect, SnapshotDefect::kChecksum);
}

// Structural checks behind a valid checksum.
TEST(SnapshotTest, ImpossibleFieldsBehindValidChecksumAreMalformed) {
  auto expect_malformed = [](Snapshot s, const char* what) {
    const std::vector<uint8_t> bytes = EncodeSnapshot(s);
    SnapshotDefect defect;
    Result<Snapshot> r = Decode(bytes, &defect);
    EXPECT_FALSE(r.ok()) << what;
    EXPECT_EQ(defect, SnapshotDefect::kMalformed) << what;
  };
  Snapshot s = SampleSnapshot();
  s.identity.store_uuid = {};
  expect_malformed(s, "nil uuid");
  s = SampleSnapshot();
  s.identity.geometry.tokens_per_stripe = 99;
  expect_malformed(s, "inconsistent geometry");
  s = SampleSnapshot();
  s.identity.pack_count = 0;
  expect_malformed(s, "no packs");
  s = SampleSnapshot();
  s.identity.pack_file_bytes = 100;
  expect_malformed(s, "pack file smaller than its layout");
  s = SampleSnapshot();
  s.store_epoch = 0;
  expect_malformed(s, "epoch 0");
  s = SampleSnapshot();
  s.store_epoch = sf::kMaxStoreEpoch + 1;
  expect_malformed(s, "epoch too large");
  s = SampleSnapshot();
  s.digest_block_tokens = 0;
  expect_malformed(s, "block of 0 tokens");
  s = SampleSnapshot();
  s.digest_block_tokens = 129;
  expect_malformed(s, "block beyond T");
  s = SampleSnapshot();
  s.digest_seed = 1;
  expect_malformed(s, "other seed");
  s = SampleSnapshot();
  std::swap(s.digests[0], s.digests[1]);
  expect_malformed(s, "slots out of order");
  s = SampleSnapshot();
  s.digests[1].slot = 8;
  expect_malformed(s, "slot beyond pack count");
  s = SampleSnapshot();
  s.digests[0].stored_tokens = 129;
  expect_malformed(s, "stored tokens beyond T");
  s = SampleSnapshot();
  s.digests[0].blocks_per_layer = 3;
  s.digests[0].digests.resize(6);
  expect_malformed(s, "block count disagrees with stored tokens");
  s = SampleSnapshot();
  s.digests[0].layers = 3;
  s.digests[0].digests.resize(12);
  expect_malformed(s, "layer count");
  s = SampleSnapshot();
  s.digests[0].generation = 0;
  expect_malformed(s, "generation 0");
}

TEST(SnapshotTest, HugeTableCountDoesNotAllocate) {
  std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  // table_count sits 4 bytes into the digest body.
  const size_t digest_body = sf::kPreambleBytes + sf::kSectionHeaderBytes + sf::kIdentityBodyBytes +
                             sf::kSectionHeaderBytes + 9 + sf::kSectionHeaderBytes;
  for (int i = 0; i < 4; ++i) bytes[digest_body + 4 + i] = 0xff;
  Reseal(&bytes);
  SnapshotDefect defect;
  EXPECT_FALSE(Decode(bytes, &defect).ok());
  EXPECT_EQ(defect, SnapshotDefect::kMalformed);
}

TEST(SnapshotTest, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> bytes = EncodeSnapshot(SampleSnapshot());
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> b = bytes;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 2) b.resize(rng() % (b.size() + 1));
    if (rng() % 2 && b.size() >= 8) Reseal(&b);  // also reach the structural checks
    SnapshotDefect defect;
    Result<Snapshot> r = Decode(b, &defect);
    EXPECT_EQ(r.ok(), defect == SnapshotDefect::kNone);
  }
}

TEST(SnapshotBindingTest, EachMismatchHasItsOwnCode) {
  const SnapshotIdentity id = SampleSnapshot().identity;
  BindingMismatch m = BindingMismatch::kStoreUuid;
  EXPECT_TRUE(CheckSnapshotBinding(id, id, &m).ok());
  EXPECT_EQ(m, BindingMismatch::kNone);

  SnapshotIdentity other = id;
  other.store_uuid.lo ^= 1;
  EXPECT_EQ(CheckSnapshotBinding(id, other, &m).code(), StatusCode::kWrongStore);
  EXPECT_EQ(m, BindingMismatch::kStoreUuid);
  other = id;
  other.geometry.block_size = 32;
  EXPECT_EQ(CheckSnapshotBinding(id, other, &m).code(), StatusCode::kGeometryMismatch);
  EXPECT_EQ(m, BindingMismatch::kGeometry);
  other = id;
  other.namespace_id.hi ^= 1;
  EXPECT_EQ(CheckSnapshotBinding(id, other, &m).code(), StatusCode::kNamespaceMismatch);
  EXPECT_EQ(m, BindingMismatch::kNamespace);
  other = id;
  other.pack_creation_time_unix_ns += 1;
  EXPECT_EQ(CheckSnapshotBinding(id, other, &m).code(), StatusCode::kWrongStore);
  EXPECT_EQ(m, BindingMismatch::kPackLayout);
  other = id;
  other.pack_file_bytes -= 4096;
  EXPECT_EQ(CheckSnapshotBinding(id, other, &m).code(), StatusCode::kTruncated);
  EXPECT_EQ(m, BindingMismatch::kPackFileBytes);
}

}  // namespace
}  // namespace rangekv::persist
