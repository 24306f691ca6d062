#include "service_proto/protocol.h"

#include <gtest/gtest.h>

#include <random>

#include "base/coding.h"

namespace rangekv::service {
namespace {

LookupRequest SampleLookup() {
  LookupRequest m;
  m.envelope.request_id = "req-1";
  m.envelope.session = 7;
  m.envelope.attempt = 2;
  m.envelope.rank = 1;
  m.granularity_tokens = 16;
  m.tokens = {1, -2, 3, 2147483647, -2147483647 - 1};
  return m;
}

TEST(ServiceProtocolTest, EveryBodyRoundTrips) {
  {
    std::vector<uint8_t> b;
    Encode(SampleLookup(), &b);
    LookupRequest m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.tokens, SampleLookup().tokens);
    EXPECT_EQ(m.envelope, SampleLookup().envelope);
    EXPECT_EQ(m.granularity_tokens, 16u);
  }
  {
    HelloRequest h;
    h.geometry.layers = 4;
    h.geometry.token_bytes = 128;
    h.geometry.pack_bytes = 1 << 20;
    h.ns = {1, 2};
    h.tenant = "team-a";
    h.capacity_bytes = 123;
    h.direct = false;
    h.identity = "{\"format\":1}\n";  // protocol 6
    std::vector<uint8_t> b;
    Encode(h, &b);
    HelloRequest m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.geometry, h.geometry);
    EXPECT_EQ(m.ns, h.ns);
    EXPECT_EQ(m.tenant, "team-a");
    EXPECT_FALSE(m.direct);
    EXPECT_EQ(m.identity, h.identity);
    // An identity record beyond its bound is refused whole.
    h.identity.assign(kMaxIdentityBytes + 1, 'x');
    b.clear();
    Encode(h, &b);
    EXPECT_FALSE(Decode(b, &m).ok());
  }
  {
    ReserveReply r;
    r.reservation.outcome = ReserveOutcome::kReserved;
    r.reservation.reservation_id = 9;
    r.reservation.records = {{3, 44, 0, 0, 64}, {5, 45, 64, 0, 10}};
    std::vector<uint8_t> b;
    Encode(r, &b);
    ReserveReply m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.reservation.records, r.reservation.records);
    EXPECT_EQ(m.reservation.reservation_id, 9u);
  }
  {
    // readers (protocol 4): lookup and claim replies say how many sessions read now.
    LookupReply l;
    l.ticket = {1, 2, 3};
    l.readers = 5;
    std::vector<uint8_t> b;
    Encode(l, &b);
    LookupReply lm;
    ASSERT_TRUE(Decode(b, &lm).ok());
    EXPECT_EQ(lm.ticket, l.ticket);
    EXPECT_EQ(lm.readers, 5u);
    // A protocol-3 reply (no readers field) is short: refused, not misread.
    b.resize(b.size() - 4);
    EXPECT_FALSE(Decode(b, &lm).ok());
    ClaimReply c;
    c.claim.ticket_id = 8;
    c.claim.endpoint_tokens = 70;
    c.claim.records = {{3, 44, 0, 0, 64}};
    c.readers = 3;
    b.clear();
    Encode(c, &b);
    ClaimReply cm;
    ASSERT_TRUE(Decode(b, &cm).ok());
    EXPECT_EQ(cm.claim.records, c.claim.records);
    EXPECT_EQ(cm.readers, 3u);
  }
  {
    PublishRequest p;
    p.reservation_id = 4;
    p.layers = {{3, 44, 64, 0, {1, 2, 3}}, {3, 44, 64, 1, {4, 5, 6}}};
    std::vector<uint8_t> b;
    Encode(p, &b);
    PublishRequest m;
    ASSERT_TRUE(Decode(b, &m).ok());
    ASSERT_EQ(m.layers.size(), 2u);
    EXPECT_EQ(m.layers[1].digests, (std::vector<uint64_t>{4, 5, 6}));
  }
  {
    StatsReply s;
    s.stats.lookups = 5;
    s.stats.inflight_reservations = 3;
    std::vector<uint8_t> b;
    Encode(s, &b);
    StatsReply m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.stats.lookups, 5u);
    EXPECT_EQ(m.stats.inflight_reservations, 3u);
  }
  {  // the read gate's reply; its request has no body
    AttachReadGateReply g{.holder = 7, .slots = 16};
    std::vector<uint8_t> b;
    Encode(g, &b);
    AttachReadGateReply m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.holder, 7u);
    EXPECT_EQ(m.slots, 16u);
    b.push_back(0);
    EXPECT_FALSE(Decode(b, &m).ok());  // trailing bytes
    const uint16_t type = static_cast<uint16_t>(MessageType::kAttachReadGate);
    EXPECT_TRUE(IsKnownType(type));
    EXPECT_EQ(MessageTypeName(type), "attach_read_gate");
    EXPECT_TRUE(DecodeRequestBody(type, {}).ok());
    EXPECT_FALSE(DecodeRequestBody(type, b).ok());
  }
  {  // the shared queries carry the caller's CPU
    LookupSharedRequest l;
    l.envelope = SampleLookup().envelope;
    l.granularity_tokens = 16;
    l.token_count = 1000;
    l.client_cpu = 13;
    std::vector<uint8_t> b;
    Encode(l, &b);
    LookupSharedRequest m;
    ASSERT_TRUE(Decode(b, &m).ok());
    EXPECT_EQ(m.token_count, 1000u);
    EXPECT_EQ(m.client_cpu, 13u);
    ClaimSharedRequest c;
    c.ticket = {1, 2, 3};
    c.envelope = l.envelope;
    c.endpoint_tokens = 999;
    c.token_count = 1000;
    c.client_cpu = 7;
    b.clear();
    Encode(c, &b);
    ClaimSharedRequest n;
    ASSERT_TRUE(Decode(b, &n).ok());
    EXPECT_EQ(n.ticket, c.ticket);
    EXPECT_EQ(n.client_cpu, 7u);
    EXPECT_EQ(ClaimSharedRequest{}.client_cpu, kUnknownCpu);
  }
  {
    std::vector<uint8_t> b;
    EncodeStatus(Status(StatusCode::kStaleGeneration, "gone"), &b);
    Encode(IdMessage{77}, &b);
    Status remote;
    std::span<const uint8_t> rest;
    ASSERT_TRUE(DecodeStatus(b, &remote, &rest).ok());
    EXPECT_EQ(remote.code(), StatusCode::kStaleGeneration);
    EXPECT_EQ(remote.message(), "gone");
    IdMessage id;
    ASSERT_TRUE(Decode(rest, &id).ok());
    EXPECT_EQ(id.id, 77u);
  }
}

TEST(ServiceProtocolTest, HeaderRejectsMagicVersionTypeAndSize) {
  uint8_t h[kHeaderBytes];
  EncodeHeader({kProtocolVersion, static_cast<uint16_t>(MessageType::kLookup), 10}, h);
  ASSERT_TRUE(DecodeHeader(h).ok());
  uint8_t bad[kHeaderBytes];
  std::copy(h, h + kHeaderBytes, bad);
  bad[0] ^= 1;
  EXPECT_EQ(DecodeHeader(bad).status().code(), StatusCode::kCorruption);
  EncodeHeader({kProtocolVersion + 1, 2, 0}, bad);
  EXPECT_EQ(DecodeHeader(bad).status().code(), StatusCode::kWrongVersion);
  EncodeHeader({kProtocolVersion, 999, 0}, bad);
  EXPECT_EQ(DecodeHeader(bad).status().code(), StatusCode::kInvalidArgument);
  EncodeHeader({kProtocolVersion, 2, kMaxBodyBytes + 1}, bad);
  EXPECT_EQ(DecodeHeader(bad).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeHeader(std::span<const uint8_t>(h, 5)).status().code(), StatusCode::kCorruption);
}

TEST(ServiceProtocolTest, TruncatedTrailingAndOversizedBodiesFail) {
  std::vector<uint8_t> b;
  Encode(SampleLookup(), &b);
  for (size_t cut = 0; cut < b.size(); ++cut) {
    LookupRequest m;
    EXPECT_FALSE(Decode(std::span<const uint8_t>(b.data(), cut), &m).ok()) << cut;
  }
  b.push_back(0);
  LookupRequest m;
  EXPECT_EQ(Decode(b, &m).code(), StatusCode::kCorruption);  // trailing byte

  // A token count far beyond the bytes present is refused before anything is allocated.
  coding::ByteWriter w;
  w.U32(1);
  w.Bytes("x", 1);
  w.U64(0);
  w.U32(0);
  w.U32(0);
  w.U64(16);
  w.U32(kMaxTokensPerMessage + 1);
  EXPECT_EQ(Decode(w.bytes(), &m).code(), StatusCode::kResourceExhausted);
  coding::ByteWriter w2;
  w2.U32(1);
  w2.Bytes("x", 1);
  w2.U64(0);
  w2.U32(0);
  w2.U32(0);
  w2.U64(16);
  w2.U32(1000);  // 1000 tokens promised, none present
  EXPECT_EQ(Decode(w2.bytes(), &m).code(), StatusCode::kCorruption);
  // A boolean other than 0 / 1.
  InFlightReply f;
  const uint8_t two[1] = {2};
  EXPECT_FALSE(Decode(two, &f).ok());
}

TEST(ServiceProtocolTest, RandomBytesNeverCrashAnyDecoder) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> body;
  for (int i = 0; i < 20000; ++i) {
    body.resize(rng() % 96);
    for (auto& x : body) x = static_cast<uint8_t>(rng());
    for (uint16_t t = 1; t <= static_cast<uint16_t>(MessageType::kGoodbye); ++t) {
      Status s = DecodeRequestBody(t, body);
      s.IgnoreError();
    }
    Status remote;
    std::span<const uint8_t> rest;
    Status s = DecodeStatus(body, &remote, &rest);
    s.IgnoreError();
  }
}

// The split encoding the client sends (head + the token array as it lies) is byte for byte the
// whole body, and decodes to the same request; tokens are little-endian u32 on the wire.
TEST(ServiceProtocolTest, LookupHeadPlusTailIsTheWholeBody) {
  const LookupRequest m = SampleLookup();
  std::vector<uint8_t> whole, head;
  Encode(m, &whole);
  const std::span<const uint8_t> tail =
      EncodeLookupHead(m.envelope, m.granularity_tokens, m.tokens, &head);
  std::vector<uint8_t> joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, whole);
  ASSERT_GE(whole.size(), 4 * m.tokens.size());
  const uint8_t* last = whole.data() + whole.size() - 4;  // the last token, -2^31
  EXPECT_EQ(coding::LoadU32(last), 0x80000000u);
  LookupRequest back;
  ASSERT_TRUE(Decode(whole, &back).ok());
  EXPECT_EQ(back.tokens, m.tokens);
  EXPECT_EQ(back.envelope.request_id, m.envelope.request_id);
  EXPECT_EQ(back.granularity_tokens, m.granularity_tokens);
}

}  // namespace
}  // namespace rangekv::service
