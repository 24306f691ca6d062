// The S3 and Redis clients against real servers: SeaweedFS's S3 gateway and redis-server on
// 127.0.0.1 (testing/remote_servers.h starts them for this binary and stops them at its end).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "remote/redis_client.h"
#include "remote/s3_client.h"
#include "testing/remote_servers.h"

namespace rangekv::remote {
namespace {

using std::chrono::milliseconds;

testing::RemoteServers* Servers() {
  std::string skip, error;
  testing::RemoteServers* s = testing::RemoteServers::Shared(&skip, &error);
  if (!error.empty()) ADD_FAILURE() << error;
  return s;
}

#define REQUIRE_SERVERS()                      \
  testing::RemoteServers* servers = Servers(); \
  if (servers == nullptr) GTEST_SKIP() << "cluster tier servers are not available"

std::unique_ptr<S3Client> MakeS3(testing::RemoteServers* s, uint32_t threads = 2,
                                 std::string secret = "") {
  S3Options o;
  o.endpoint = s->s3_endpoint();
  o.credentials.access_key_id = s->access_key();
  o.credentials.secret_access_key = secret.empty() ? s->secret_key() : secret;
  o.credentials.source = "test";
  o.io_threads = threads;
  auto c = S3Client::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = g();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

TEST(S3Client, PutGetRangesListDelete) {
  REQUIRE_SERVERS();
  auto s3 = MakeS3(servers);
  ASSERT_NE(s3, nullptr);
  const auto data = RandomBytes(3 << 20, 1);
  const auto dl = DeadlineIn(milliseconds(20000));
  ASSERT_TRUE(s3->PutObject(servers->bucket(), "t1/a b+c.bin", data, dl).ok());
  auto whole = s3->GetObject(servers->bucket(), "t1/a b+c.bin", 4 << 20, dl);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, data);
  // 12 ranged GETs in parallel, each into its own piece of one buffer.
  std::vector<uint8_t> out(data.size());
  std::vector<S3Request> reqs(12);
  std::vector<S3Request*> batch;
  const uint64_t piece = data.size() / reqs.size();
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].bucket = servers->bucket();
    reqs[i].key = "t1/a b+c.bin";
    reqs[i].range_offset = i * piece;
    reqs[i].range_length = piece;
    reqs[i].into = std::span(out).subspan(i * piece, piece);
    batch.push_back(&reqs[i]);
  }
  ASSERT_TRUE(s3->Execute(batch, dl).ok());
  EXPECT_EQ(out, data);
  // A range past the end, and a buffer smaller than the range, fail without overrun.
  S3Request past;
  past.bucket = servers->bucket();
  past.key = "t1/a b+c.bin";
  past.range_offset = data.size();
  past.range_length = 10;
  std::vector<uint8_t> small(10);
  past.into = small;
  EXPECT_FALSE(s3->Execute(past, dl).ok());
  S3Request too_big;
  too_big.bucket = servers->bucket();
  too_big.key = "t1/a b+c.bin";
  std::vector<uint8_t> tiny(100, 0xee);
  too_big.into = std::span(tiny).first(50);
  EXPECT_EQ(s3->Execute(too_big, dl).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(std::all_of(tiny.begin() + 50, tiny.end(), [](uint8_t b) { return b == 0xee; }));

  std::string next;
  auto listed = s3->ListObjects(servers->bucket(), "t1/", "", &next, dl);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "t1/a b+c.bin");
  EXPECT_EQ((*listed)[0].size, data.size());
  ASSERT_TRUE(s3->DeleteObject(servers->bucket(), "t1/a b+c.bin", dl).ok());
  EXPECT_EQ(s3->GetObject(servers->bucket(), "t1/a b+c.bin", 1 << 20, dl).status().code(),
            StatusCode::kNotFound);
  // Keep-alive: dozens of requests went over a handful of connections.
  const S3Stats st = s3->stats();
  EXPECT_GE(st.requests, 18u);
  EXPECT_LE(st.connections_opened, 16u);
}

TEST(S3Client, OneRangedGetLandsInSegmentsAndDropsTheGaps) {
  REQUIRE_SERVERS();
  auto s3 = MakeS3(servers);
  ASSERT_NE(s3, nullptr);
  const auto data = RandomBytes(1 << 20, 2);
  const auto dl = DeadlineIn(milliseconds(20000));
  ASSERT_TRUE(s3->PutObject(servers->bucket(), "t1/segments.bin", data, dl).ok());
  // Bytes [1000, 1000 + 700000) in three buffers, with gaps of 4,000 and 1 byte dropped.
  std::vector<uint8_t> a(300000, 0xee), b(200000, 0xee), c(195999, 0xee);
  S3Request r;
  r.bucket = servers->bucket();
  r.key = "t1/segments.bin";
  r.range_offset = 1000;
  r.range_length = 700000;
  r.segments = {{0, a}, {304000, b}, {504001, c}};
  ASSERT_TRUE(s3->Execute(r, dl).ok()) << r.status.ToString();
  EXPECT_EQ(r.bytes, 700000u);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), data.begin() + 1000));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), data.begin() + 305000));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), data.begin() + 505001));
  // Segments out of order, overlapping, past the range, or beside `into`: refused, nothing sent.
  const uint64_t sent = s3->stats().requests;
  for (const std::vector<S3Request::Segment>& bad : std::vector<std::vector<S3Request::Segment>>{
           {{304000, b}, {0, a}}, {{0, a}, {299999, b}}, {{600000, b}}}) {
    S3Request x = r;
    x.segments = bad;
    EXPECT_EQ(s3->Execute(x, dl).code(), StatusCode::kInvalidArgument);
  }
  S3Request both = r;
  both.into = a;
  EXPECT_EQ(s3->Execute(both, dl).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s3->stats().requests, sent);
  // The object shorter than the range: a short transfer, never a write past a segment.
  std::vector<uint8_t> tail(8192, 0xee);
  S3Request past;
  past.bucket = servers->bucket();
  past.key = "t1/segments.bin";
  past.range_offset = data.size() - 4096;
  past.range_length = 8192;
  past.segments = {{0, std::span(tail).first(4096)}, {4096, std::span(tail).subspan(4096)}};
  EXPECT_FALSE(s3->Execute(past, dl).ok());
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 4096, data.end() - 4096));
  EXPECT_TRUE(std::all_of(tail.begin() + 4096, tail.end(), [](uint8_t x) { return x == 0xee; }));
  ASSERT_TRUE(s3->DeleteObject(servers->bucket(), "t1/segments.bin", dl).ok());
}

TEST(S3Client, MultipartUploadAppearsOnlyWhenCompleted) {
  REQUIRE_SERVERS();
  auto s3 = MakeS3(servers);
  ASSERT_NE(s3, nullptr);
  const auto dl = DeadlineIn(milliseconds(30000));
  const uint64_t part = 5 << 20;
  const auto data = RandomBytes(2 * part + 12345, 2);
  auto id = s3->CreateMultipartUpload(servers->bucket(), "t2/obj", dl);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::vector<S3Request> parts(3);
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].method = S3Method::kPut;
    parts[i].bucket = servers->bucket();
    parts[i].key = "t2/obj";
    parts[i].query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", *id}};
    const uint64_t at = i * part;
    parts[i].upload = std::span<const uint8_t>(data).subspan(at, std::min(part, data.size() - at));
    batch.push_back(&parts[i]);
  }
  ASSERT_TRUE(s3->Execute(batch, dl).ok());
  // Not visible before completion.
  EXPECT_EQ(s3->GetObject(servers->bucket(), "t2/obj", 32 << 20, dl).status().code(),
            StatusCode::kNotFound);
  std::vector<std::string> etags;
  for (const auto& p : parts) etags.push_back(p.etag);
  ASSERT_TRUE(s3->CompleteMultipartUpload(servers->bucket(), "t2/obj", *id, etags, dl).ok());
  auto got = s3->GetObject(servers->bucket(), "t2/obj", 32 << 20, dl);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, data);
  // An aborted upload leaves nothing.
  auto id2 = s3->CreateMultipartUpload(servers->bucket(), "t2/aborted", dl);
  ASSERT_TRUE(id2.ok());
  S3Request p1 = parts[0];
  p1.key = "t2/aborted";
  p1.query = {{"partNumber", "1"}, {"uploadId", *id2}};
  ASSERT_TRUE(s3->Execute(p1, dl).ok());
  ASSERT_TRUE(s3->AbortMultipartUpload(servers->bucket(), "t2/aborted", *id2, dl).ok());
  EXPECT_EQ(s3->GetObject(servers->bucket(), "t2/aborted", 32 << 20, dl).status().code(),
            StatusCode::kNotFound);
}

TEST(S3Client, WrongSecretIsRefusedAndNeverLogged) {
  REQUIRE_SERVERS();
  auto s3 = MakeS3(servers, 1, "not-the-secret");
  ASSERT_NE(s3, nullptr);
  const Status s =
      s3->PutObject(servers->bucket(), "t3/x", RandomBytes(10, 3), DeadlineIn(milliseconds(5000)));
  EXPECT_EQ(s.code(), StatusCode::kUnsafePermissions) << s.ToString();
  EXPECT_EQ(s.ToString().find("not-the-secret"), std::string::npos);
  EXPECT_EQ(s.ToString().find(servers->secret_key()), std::string::npos);
}

TEST(S3Client, DeadlinesAndRefusedConnectionsFailClosed) {
  REQUIRE_SERVERS();
  S3Options o;
  o.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  o.credentials.access_key_id = "k";
  o.credentials.secret_access_key = "s";
  auto s3 = S3Client::Create(o);
  ASSERT_TRUE(s3.ok());
  std::vector<uint8_t> buf(16);
  S3Request r;
  r.bucket = "b";
  r.key = "k";
  r.range_length = 16;
  r.into = buf;
  EXPECT_EQ((*s3)->Execute(r, DeadlineIn(milliseconds(2000))).code(), StatusCode::kUnavailable);
  // A deadline already passed: nothing is sent.
  auto real = MakeS3(servers);
  EXPECT_EQ(real->Execute(r, Clock::now() - milliseconds(1)).code(), StatusCode::kUnavailable);
  // Bad options.
  o.endpoint = "ftp://x";
  EXPECT_EQ(S3Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.endpoint = "http://user:pw@host";
  EXPECT_EQ(S3Client::Create(o).status().code(), StatusCode::kInvalidArgument);
}

std::unique_ptr<RedisClient> MakeRedis(testing::RemoteServers* s) {
  auto a = ParseRedisUrl(s->redis_url());
  EXPECT_TRUE(a.ok());
  RedisOptions o;
  o.address = *a;
  auto c = RedisClient::Create(o);
  EXPECT_TRUE(c.ok());
  return std::move(c).value();
}

TEST(RedisClient, PipelinesABatchInOneRoundTrip) {
  REQUIRE_SERVERS();
  auto r = MakeRedis(servers);
  const auto dl = std::chrono::steady_clock::now() + milliseconds(5000);
  std::vector<RedisCommand> batch;
  for (int i = 0; i < 100; ++i) {
    batch.push_back({"SET", "t:k" + std::to_string(i), std::string("v\0x", 3) + std::to_string(i)});
  }
  batch.push_back({"GET", "t:k7"});
  batch.push_back({"GET", "t:missing"});
  batch.push_back({"INCRBY", "t:n", "5"});
  batch.push_back({"NOSUCHCOMMAND"});
  batch.push_back({"HSET", "t:h", "f1", "a", "f2", "b"});
  batch.push_back({"HGETALL", "t:h"});
  const RedisStats before = r->stats();
  auto replies = r->Run(batch, dl);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  ASSERT_EQ(replies->size(), batch.size());
  EXPECT_EQ((*replies)[100].str, std::string("v\0x7", 4));
  EXPECT_TRUE((*replies)[101].nil());
  EXPECT_EQ((*replies)[102].integer, 5);
  EXPECT_TRUE((*replies)[103].error());
  EXPECT_EQ((*replies)[105].elements.size(), 4u);
  EXPECT_EQ(r->stats().round_trips - before.round_trips, 1u);
}

TEST(RedisClient, ConcurrentCallersShareABoundedPool) {
  REQUIRE_SERVERS();
  auto r = MakeRedis(servers);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto rep = r->RunOne({"INCR", "t:c" + std::to_string(t)},
                             std::chrono::steady_clock::now() + milliseconds(5000));
        if (rep.ok() && rep->integer == i + 1) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 16 * 50);
  EXPECT_LE(r->stats().connects, 8u);
}

TEST(RedisClient, DeadServerIsUnavailable) {
  RedisOptions o;
  o.address.host = "127.0.0.1";
  o.address.port = 1;
  auto r = RedisClient::Create(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(
      (*r)->RunOne({"PING"}, std::chrono::steady_clock::now() + milliseconds(1000)).status().code(),
      StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rangekv::remote
