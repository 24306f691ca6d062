// The publication journal's codec: records round-trip; decoding keeps every record up to the
// last intact one and names why it stopped (torn tail at every cut, flipped byte, sequence gap,
// impossible fields); a damaged, foreign-version or truncated file header is refused.
#include "persist/journal.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/coding.h"

namespace rangekv::persist {
namespace {

namespace jf = journal_format;

JournalRecord Publish(uint64_t seq, uint32_t slot, uint64_t gen) {
  JournalRecord r;
  r.type = jf::kPublish;
  r.sequence = seq;
  JournalPublish& p = r.publish;
  p.ns = NamespaceId{0x1234, 0x5678};
  p.slot = slot;
  p.layers = 2;
  p.generation = gen;
  p.path_tokens = {5, 6, 7, 8, 9, -1, 2147483647};
  p.stored_tokens = 5;
  p.digest_block_tokens = 2;
  p.blocks_per_layer = 3;
  p.digests = {1, 2, 3, 4, 5, 6};
  return r;
}

JournalRecord Remove(uint64_t seq, uint32_t slot, uint64_t gen) {
  JournalRecord r;
  r.type = jf::kRemove;
  r.sequence = seq;
  r.remove = {slot, gen};
  return r;
}

JournalRecord Epoch(uint64_t seq, uint64_t epoch) {
  JournalRecord r;
  r.type = jf::kEpoch;
  r.sequence = seq;
  r.epoch = {epoch, epoch << 32};
  return r;
}

struct Built {
  std::vector<uint8_t> bytes;
  std::vector<size_t> ends;  // byte offset after each record
};

Built Build(const std::vector<JournalRecord>& records) {
  Built b;
  b.bytes = EncodeJournalHeader({StoreUuid{11, 22}, 3});
  for (const JournalRecord& r : records) {
    const std::vector<uint8_t> e = EncodeJournalRecord(r);
    b.bytes.insert(b.bytes.end(), e.begin(), e.end());
    b.ends.push_back(b.bytes.size());
  }
  return b;
}

std::vector<JournalRecord> Sample() {
  return {Epoch(1, 3), Publish(2, 0, (uint64_t{3} << 32) + 1),
          Publish(3, 1, (uint64_t{3} << 32) + 2), Remove(4, 0, (uint64_t{3} << 32) + 1)};
}

TEST(JournalTest, RoundTrip) {
  const std::vector<JournalRecord> records = Sample();
  const Built b = Build(records);
  auto d = DecodeJournal(b.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->header, (JournalHeader{StoreUuid{11, 22}, 3}));
  EXPECT_EQ(d->records, records);
  EXPECT_EQ(d->tail, JournalTail::kClean);
  EXPECT_EQ(d->intact_bytes, b.bytes.size());
}

TEST(JournalTest, HeaderOnlyIsAnEmptyJournal) {
  const Built b = Build({});
  auto d = DecodeJournal(b.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->records.empty());
  EXPECT_EQ(d->tail, JournalTail::kClean);
}

TEST(JournalTest, TornTailAtEveryCutKeepsTheIntactPrefix) {
  const Built b = Build(Sample());
  for (size_t cut = jf::kFileHeaderBytes; cut < b.bytes.size(); ++cut) {
    auto d = DecodeJournal(std::span(b.bytes).first(cut));
    ASSERT_TRUE(d.ok()) << cut;
    size_t whole = 0;
    while (whole < b.ends.size() && b.ends[whole] <= cut) ++whole;
    EXPECT_EQ(d->records.size(), whole) << cut;
    EXPECT_EQ(d->intact_bytes, whole == 0 ? jf::kFileHeaderBytes : b.ends[whole - 1]) << cut;
    EXPECT_EQ(d->tail, d->intact_bytes == cut ? JournalTail::kClean : JournalTail::kTorn) << cut;
  }
}

TEST(JournalTest, FlippedByteEndsTheJournalAtThatRecord) {
  const Built b = Build(Sample());
  for (size_t at = jf::kFileHeaderBytes; at < b.bytes.size(); ++at) {
    std::vector<uint8_t> bad = b.bytes;
    bad[at] ^= 0x40;
    auto d = DecodeJournal(bad);
    ASSERT_TRUE(d.ok()) << at;
    size_t before = 0;
    while (before < b.ends.size() && b.ends[before] <= at) ++before;
    EXPECT_EQ(d->records.size(), before) << at;
    EXPECT_NE(d->tail, JournalTail::kClean) << at;
    EXPECT_FALSE(d->tail_detail.empty()) << at;
  }
}

TEST(JournalTest, SequenceGapEndsTheJournal) {
  std::vector<JournalRecord> records = Sample();
  records[2].sequence = 9;
  auto d = DecodeJournal(Build(records).bytes);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->records.size(), 2u);
  EXPECT_EQ(d->tail, JournalTail::kOutOfSequence);
}

TEST(JournalTest, ImpossibleFieldsAreMalformed) {
  std::vector<JournalRecord> records = Sample();
  records[1].publish.blocks_per_layer = 2;  // 5 stored tokens in blocks of 2 need 3
  records[1].publish.digests.resize(4);
  auto d = DecodeJournal(Build(records).bytes);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->records.size(), 1u);
  EXPECT_EQ(d->tail, JournalTail::kMalformed) << d->tail_detail;
}

TEST(JournalTest, DamagedHeaderIsRefused) {
  const Built b = Build(Sample());
  EXPECT_EQ(DecodeJournal(std::span(b.bytes).first(jf::kFileHeaderBytes - 1)).status().code(),
            StatusCode::kTruncated);
  std::vector<uint8_t> bad = b.bytes;
  bad[20] ^= 1;  // store uuid
  EXPECT_EQ(DecodeJournal(bad).status().code(), StatusCode::kCorruption);
  bad = b.bytes;
  coding::StoreU32(bad.data() + jf::kVersionField.offset, 2);
  EXPECT_EQ(DecodeJournal(bad).status().code(), StatusCode::kWrongVersion);
  bad = b.bytes;
  bad[0] = 'X';
  EXPECT_EQ(DecodeJournal(bad).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace rangekv::persist
