#include "directory/ticket.h"

#include <gtest/gtest.h>

#include <random>

namespace rangekv {
namespace {

Ticket SampleTicket() {
  Ticket t;
  t.ticket_id = 42;
  t.owner_epoch = 3;
  t.ns = NamespaceId{0x1111, 0x2222};
  t.envelope = Envelope{"cmpl-abc-0", 9, 2, 1};
  t.granularity_tokens = 16;
  t.query_tokens = 20000;
  t.hit_tokens = 12000;
  t.token_digest = Digest128{5, 6};
  t.records = {PackRecord{3, 7, 0, 0, 8192}, PackRecord{5, 2, 8192, 0, 3808}};
  return t;
}

TEST(TicketTest, RoundTrips) {
  const Ticket t = SampleTicket();
  std::vector<uint8_t> bytes = EncodeTicket(t);
  EXPECT_EQ(bytes.size(),
            kTicketFixedBytes + t.envelope.request_id.size() + 2 * kTicketRecordBytes);
  Result<Ticket> back = DecodeTicket(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);
}

TEST(TicketTest, EmptyTicketRoundTrips) {
  Ticket t;
  t.owner_epoch = 1;
  t.envelope.request_id = "r";
  t.granularity_tokens = 1;
  t.query_tokens = 5;
  Result<Ticket> back = DecodeTicket(EncodeTicket(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->empty());
}

TEST(TicketTest, EveryFlippedByteIsDetected) {
  const std::vector<uint8_t> bytes = EncodeTicket(SampleTicket());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t bit : {0x01, 0x80}) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= bit;
      Result<Ticket> r = DecodeTicket(bad);
      ASSERT_FALSE(r.ok()) << "byte " << i;
      EXPECT_TRUE(r.status().code() == StatusCode::kCorruptTicket ||
                  r.status().code() == StatusCode::kWrongVersion)
          << r.status().ToString();
    }
  }
}

TEST(TicketTest, EveryTruncationIsDetected) {
  const std::vector<uint8_t> bytes = EncodeTicket(SampleTicket());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<Ticket> r = DecodeTicket(std::span(bytes).first(n));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptTicket);
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(DecodeTicket(longer).status().code(), StatusCode::kCorruptTicket);
}

// Re-checksums a mutated encoding so the structural checks behind the checksum are reached.
std::vector<uint8_t> Reseal(std::vector<uint8_t> bytes) {
  const size_t body = bytes.size() - 8;
  uint64_t sum = Hash64(bytes.data(), body, kTicketChecksumSeed);
  for (int i = 0; i < 8; ++i) bytes[body + i] = static_cast<uint8_t>(sum >> (8 * i));
  return bytes;
}

TEST(TicketTest, StructuralRulesHoldBehindAValidChecksum) {
  auto expect_corrupt = [](Ticket t, const char* what) {
    Result<Ticket> r = DecodeTicket(Reseal(EncodeTicket(t)));
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptTicket) << what;
  };
  Ticket t = SampleTicket();
  t.records[1].path_token_begin = 8000;
  expect_corrupt(t, "gap between records");
  t = SampleTicket();
  t.hit_tokens = 12001;
  expect_corrupt(t, "records do not reach the hit");
  t = SampleTicket();
  t.hit_tokens = t.query_tokens;
  expect_corrupt(t, "hit covers the last token");
  t = SampleTicket();
  t.granularity_tokens = 0;
  expect_corrupt(t, "zero granularity");
  t = SampleTicket();
  t.records[0].generation = 0;
  expect_corrupt(t, "generation 0");
  t = SampleTicket();
  t.ticket_id = 0;
  expect_corrupt(t, "empty ticket with records");
  t = SampleTicket();
  t.records[1].tokens = 0;
  t.hit_tokens = 8192;
  expect_corrupt(t, "empty record");
  // Version bump is reported as such.
  std::vector<uint8_t> v2 = EncodeTicket(SampleTicket());
  v2[4] = 2;
  EXPECT_EQ(DecodeTicket(Reseal(v2)).status().code(), StatusCode::kWrongVersion);
  // A record count that disagrees with the length is caught before any allocation.
  std::vector<uint8_t> big = EncodeTicket(SampleTicket());
  const size_t count_at = big.size() - 8 - 2 * kTicketRecordBytes - 4;
  big[count_at] = 0xff;
  big[count_at + 1] = 0xff;
  EXPECT_EQ(DecodeTicket(Reseal(big)).status().code(), StatusCode::kCorruptTicket);
}

TEST(TicketTest, RandomBytesNeverDecode) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes(rng() % 400);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_FALSE(DecodeTicket(bytes).ok());
  }
}

TEST(TicketTest, ClipRecordsCutsAtTheEndpoint) {
  const Ticket t = SampleTicket();
  EXPECT_TRUE(ClipRecords(t.records, 0).empty());
  std::vector<PackRecord> a = ClipRecords(t.records, 100);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].tokens, 100u);
  std::vector<PackRecord> b = ClipRecords(t.records, 8192);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].tokens, 8192u);
  std::vector<PackRecord> c = ClipRecords(t.records, 9000);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].tokens, 808u);
}

TEST(TicketTest, EnvelopeValidation) {
  EXPECT_FALSE(ValidateEnvelope(Envelope{}).ok());
  EXPECT_TRUE(ValidateEnvelope(Envelope{"x", 0, 0, 0}).ok());
  EXPECT_TRUE(ValidateEnvelope(Envelope{std::string(kMaxRequestIdBytes, 'a'), 0, 0, 0}).ok());
  EXPECT_EQ(ValidateEnvelope(Envelope{std::string(kMaxRequestIdBytes + 1, 'a'), 0, 0, 0}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv
