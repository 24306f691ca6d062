// The cluster tier end to end, against real servers (SeaweedFS S3 and redis-server on
// 127.0.0.1, testing/remote_servers.h): engines with separate stores ("nodes") sharing one
// bucket and one Redis. Node A stores and publishes; node B restores from the object store into
// its read banks and delivers bit-exact bytes; failures fail closed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "remote/cluster_directory.h"
#include "remote/publisher.h"
#include "remote/remote_clients.h"
#include "service/store_service.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/remote_servers.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using engine_internal::EngineAccess;
using std::chrono::milliseconds;
using testing::Envelope;
using testing::KvFixture;
using testing::RandomTokens;
using testing::RestoreAndVerify;
using testing::SmallModel;
using testing::SmallOptions;
using testing::StoreAll;

constexpr uint64_t kStripe = 64 << 10;  // s = 512: T = 128 tokens per pack

testing::RemoteServers* Servers() {
  std::string skip, error;
  testing::RemoteServers* s = testing::RemoteServers::Shared(&skip, &error);
  if (!error.empty()) ADD_FAILURE() << error;
  if (s != nullptr) {
    setenv("AWS_ACCESS_KEY_ID", s->access_key().c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", s->secret_key().c_str(), 1);
    setenv("AWS_REGION", "us-east-1", 1);
  }
  return s;
}

#define REQUIRE_SERVERS()                      \
  testing::RemoteServers* servers = Servers(); \
  if (servers == nullptr) GTEST_SKIP() << "cluster tier servers are not available"

std::string TestPrefix() {
  return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
}

EngineOptions NodeOptions(testing::RemoteServers* s, const std::string& dir,
                          const ModelSpec& model = SmallModel(4, 2, 64)) {
  EngineOptions o = SmallOptions(dir, model, kStripe, 32);
  o.remote.url = "s3://" + s->bucket() + "/" + TestPrefix();
  o.remote.endpoint = s->s3_endpoint();
  o.remote.directory = s->redis_url();
  o.remote.lookup_timeout_ms = 5000;
  o.remote.part_bytes = 5 << 20;
  return o;
}

// Flips one byte, at `offset`, of the published object whose key contains `key_part` (the last
// one listed); *key: its key.
void FlipObjectByte(const remote::RemoteClients& c, const std::string& key_part, uint64_t offset,
                    std::string* key) {
  std::string next;
  auto listed = c.s3->ListObjects(c.scope.bucket, c.scope.PacksPrefix(), "", &next,
                                  remote::DeadlineIn(milliseconds(5000)));
  ASSERT_TRUE(listed.ok());
  for (const auto& o : *listed) {
    if (!o.key.ends_with(".manifest") && o.key.find(key_part) != std::string::npos) *key = o.key;
  }
  ASSERT_FALSE(key->empty());
  auto bytes =
      c.s3->GetObject(c.scope.bucket, *key, 64 << 20, remote::DeadlineIn(milliseconds(5000)));
  ASSERT_TRUE(bytes.ok());
  ASSERT_LT(offset, bytes->size());
  (*bytes)[offset] ^= 0x10;
  ASSERT_TRUE(
      c.s3->PutObject(c.scope.bucket, *key, *bytes, remote::DeadlineIn(milliseconds(5000))).ok());
}

// Node options with banks and reads enough for a GET to carry all 4 layers of a run (SmallOptions
// keeps 4 banks, 3 of them for lookup-time prefetch, and 2 read workers: the read cap a GET's
// spans count against).
EngineOptions RidingOptions(testing::RemoteServers* s, const std::string& dir) {
  EngineOptions o = NodeOptions(s, dir);
  o.tuning.read_banks = 8;
  o.tuning.prefetch_banks = 7;
  o.tuning.read_workers = 4;
  return o;
}

remote::Publisher* PublisherOf(Engine& e) { return EngineAccess::Core(e).store().publisher(); }

// Node A stores `tokens` and waits until its packs are published.
void StoreAndPublish(Engine& a, std::span<const int32_t> tokens, uint64_t seed) {
  auto fixture = KvFixture::Make(a, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE(fixture.ok()) << fixture.status().ToString();
  auto stored = StoreAll(a, **fixture, tokens, seed, 7);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
  ASSERT_NE(PublisherOf(a), nullptr);
  ASSERT_TRUE(PublisherOf(a)->Flush(milliseconds(60000)));
}

TEST(EngineRemote, NodeBRestoresWhatNodeAPublishedBitExact) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(1000, 1);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StoreAndPublish(**a, tokens, 11);
  const RemoteTierStats as = (*a)->remote_stats();
  EXPECT_EQ(as.packs_published, 8u);  // ceil(999 / 128): the store keeps the last token out
  EXPECT_EQ(as.publish_failures, 0u);

  auto b = Engine::Open(NodeOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE(fb.ok());
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 11, 3,
                            testing::WaitMode::kEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 992u);
  EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_TRUE(r->outcome.failed.empty());
  EXPECT_EQ(r->outcome.delivered_tokens, 992u);
  EXPECT_EQ(r->mismatches, 0u);
  const RemoteTierStats bs = (*b)->remote_stats();
  // GETs = spans: 8 runs x 4 layers, one GET each (get_bytes 0), no more.
  EXPECT_EQ(bs.gets, 32u);
  EXPECT_EQ(bs.manifest_fetches, 8u);
  EXPECT_EQ(bs.verified_spans, 32u);
  // One grid round trip (every run starts on the grid from 0) and one lease round trip.
  EXPECT_EQ(bs.directory_round_trips, 2u);
  // The same query again before the claim: the same ticket, no round trip.
  {
    auto l1 = (*b)->Lookup(Envelope("again"), tokens, 16);
    const uint64_t rts = (*b)->remote_stats().directory_round_trips;
    auto l2 = (*b)->Lookup(Envelope("again"), tokens, 16);
    ASSERT_TRUE(l1.ok() && l2.ok());
    EXPECT_EQ(l1->ticket, l2->ticket);
    EXPECT_EQ((*b)->remote_stats().directory_round_trips, rts);
    (*b)->ReleaseRequest(Envelope("again"));
  }
  // The manifests are cached: a second restore fetches none.
  auto r2 = RestoreAndVerify(**b, **fb, Envelope("b2"), tokens, 16, 11, 4);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->mismatches, 0u);
  EXPECT_EQ((*b)->remote_stats().manifest_fetches, 8u);

  // Another model (another namespace) never sees A's runs.
  auto c = Engine::Open(NodeOptions(servers, dir.Join("c"), SmallModel(4, 2, 64, 4)));
  ASSERT_TRUE(c.ok());
  auto lc = (*c)->Lookup(Envelope("c1"), tokens, 16);
  ASSERT_TRUE(lc.ok());
  EXPECT_EQ(lc->hit_tokens, 0u);
}

TEST(EngineRemote, LocalHitExtendedByRemoteRunsAndLocalOnlyNeverAsks) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(700, 2);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 21);
  // B holds the first 300 tokens itself (same bytes: the same canonical rows), not published.
  EngineOptions ob = NodeOptions(servers, dir.Join("b"));
  ob.remote.publish = false;
  auto b = Engine::Open(ob);
  ASSERT_TRUE(b.ok());
  {
    auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
    ASSERT_TRUE(fb.ok());
    auto stored = StoreAll(**b, **fb, std::span(tokens).first(301), 21, 9);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  }
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 21, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 688u);
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_TRUE(r->outcome.failed.empty());
  // Remote spans: only runs past the local 300 tokens (runs [256,384) .. [640,699): 4 runs).
  EXPECT_EQ((*b)->remote_stats().gets, 4u * 4u);
  // A prompt B holds wholly locally does not consult the cluster.
  const uint64_t asked = (*b)->remote_stats().lookups;
  auto local = (*b)->Lookup(Envelope("b2"), std::span(tokens).first(290), 16);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->hit_tokens, 288u);
  EXPECT_EQ((*b)->remote_stats().lookups, asked);
  (*b)->ReleaseRequest(Envelope("b2"));
}

TEST(EngineRemote, TamperedObjectIsNeverDeliveredAndQuarantined) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(300, 3);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 31);
  // Flip one byte of the second pack's object in the bucket.
  auto clients =
      remote::ConnectRemote(NodeOptions(servers, "").remote, "default", (*a)->namespace_id());
  ASSERT_TRUE(clients.ok());
  const auto& c = **clients;
  std::string victim;  // layer 0, token 0 of pack 1 (path tokens 128..255)
  ASSERT_NO_FATAL_FAILURE(FlipObjectByte(c, "-1-", 100, &victim));

  auto b = Engine::Open(NodeOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok());
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 31, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 288u);
  // The tampered run's tokens failed; every delivered row is exact.
  ASSERT_FALSE(r->outcome.failed.empty());
  EXPECT_EQ(r->outcome.failed.front().begin, 128u);
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_GE((*b)->remote_stats().quarantined, 1u);
  // The directory no longer serves it: the next lookup stops before it.
  const std::string id = victim.substr(victim.rfind('/') + 1);
  for (int i = 0; i < 50; ++i) {
    auto st = c.directory->ObjectState(id, remote::DeadlineIn(milliseconds(2000)));
    if (st.ok() && *st == "quarantined") break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(*c.directory->ObjectState(id, remote::DeadlineIn(milliseconds(2000))), "quarantined");
  auto again = (*b)->Lookup(Envelope("b2"), tokens, 16);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->hit_tokens, 128u);
  (*b)->ReleaseRequest(Envelope("b2"));
}

TEST(EngineRemote, OneRunRidesOneGetPerPartBitExact) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  // 128 tokens: one pack, one run; its 4 layers lie one stripe pitch apart in the object,
  // inside one 5 MiB part.
  const auto tokens = RandomTokens(128, 12);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StoreAndPublish(**a, tokens, 13);
  ASSERT_EQ((*a)->remote_stats().packs_published, 1u);
  auto b = Engine::Open(RidingOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok());
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE(fb.ok());
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 13, 3,
                            testing::WaitMode::kEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 112u);
  EXPECT_TRUE(r->outcome.failed.empty());
  EXPECT_EQ(r->outcome.delivered_tokens, 112u);
  EXPECT_EQ(r->mismatches, 0u);
  // One GET carried the 4 layers, each into its own bank, each verified on its own.
  EXPECT_EQ((*b)->remote_stats().gets, 1u);
  EXPECT_EQ((*b)->remote_stats().verified_spans, 4u);
  EXPECT_EQ((*b)->remote_stats().get_bytes, 4u * 128 * 512);
  // Again on the same engine: the first restore gave back every bank and its read.
  auto r2 = RestoreAndVerify(**b, **fb, Envelope("b2"), tokens, 16, 13, 5,
                             testing::WaitMode::kEveryLayer);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(r2->outcome.failed.empty());
  EXPECT_EQ(r2->mismatches, 0u);
  EXPECT_EQ((*b)->remote_stats().gets, 2u);

  // get_bytes set: every span is cut into GETs of that size and none rides another's.
  EngineOptions oc = RidingOptions(servers, dir.Join("c"));
  oc.remote.get_bytes = 64 << 10;
  auto c = Engine::Open(oc);
  ASSERT_TRUE(c.ok());
  auto fc = KvFixture::Make(**c, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE(fc.ok());
  auto rc = RestoreAndVerify(**c, **fc, Envelope("c1"), tokens, 16, 13, 4);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_EQ(rc->mismatches, 0u);
  EXPECT_TRUE(rc->outcome.failed.empty());
  EXPECT_EQ((*c)->remote_stats().gets, 4u);
}

TEST(EngineRemote, ARidingGetDropsThePitchPaddingBetweenLayers) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  // 101 tokens: one pack; a layer's 51,712 bytes sit in a 53,248-byte pitch (rounded to 4,096),
  // so one GET reads 1,536 bytes of padding between layers and drops them.
  const auto tokens = RandomTokens(101, 14);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 15);
  auto b = Engine::Open(RidingOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok());
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE(fb.ok());
  auto r =
      RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 4, 15, 3, testing::WaitMode::kEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 100u);
  EXPECT_TRUE(r->outcome.failed.empty());
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ((*b)->remote_stats().gets, 1u);
  EXPECT_EQ((*b)->remote_stats().get_bytes, 3u * 53248 + 51712);
}

TEST(EngineRemote, TamperedLayerInARidingGetIsNeverDelivered) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(128, 16);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 17);
  auto clients =
      remote::ConnectRemote(NodeOptions(servers, "").remote, "default", (*a)->namespace_id());
  ASSERT_TRUE(clients.ok());
  const auto& c = **clients;
  std::string victim;  // layer 2 of the 4 one GET carries
  ASSERT_NO_FATAL_FAILURE(FlipObjectByte(c, "", 2 * 65536 + 777, &victim));

  auto b = Engine::Open(RidingOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok());
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 17, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 112u);
  ASSERT_FALSE(r->outcome.failed.empty());  // the run's tokens fail: layer 2 cannot be served
  EXPECT_EQ(r->outcome.delivered_tokens, 0u);
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ((*b)->remote_stats().gets, 1u);
  // The GET itself succeeded: exactly one span, layer 2, failed its digests.
  EXPECT_EQ((*b)->remote_stats().failed_gets, 0u);
  EXPECT_EQ((*b)->GetStats().checksum_failures, 1u);
  EXPECT_GE((*b)->remote_stats().quarantined, 1u);
}

TEST(EngineRemote, LeaseHeldRefusesGcAndCapacityRetiresLeastRecentlyUsed) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, RandomTokens(300, 4), 41);  // 3 runs
  auto clients =
      remote::ConnectRemote(NodeOptions(servers, "").remote, "default", (*a)->namespace_id());
  ASSERT_TRUE(clients.ok());
  const remote::ClusterDirectory& d = *(*clients)->directory;
  const auto dl = [] { return std::chrono::steady_clock::now() + milliseconds(5000); };
  std::string next;
  auto listed =
      (*clients)->s3->ListObjects((*clients)->scope.bucket, (*clients)->scope.PacksPrefix(), "",
                                  &next, remote::DeadlineIn(milliseconds(5000)));
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> ids;
  for (const auto& o : *listed) {
    if (!o.key.ends_with(".manifest")) ids.push_back(o.key.substr(o.key.rfind('/') + 1));
  }
  ASSERT_EQ(ids.size(), 3u);
  auto leased = d.Lease(std::span(ids).first(1), "reader-x", dl());
  ASSERT_TRUE(leased.ok());
  EXPECT_TRUE((*leased)[0]);
  EXPECT_EQ(d.Retire(ids[0], dl()).code(), StatusCode::kFailedPrecondition);  // leased
  // Capacity 1 byte: every unleased run is retired, the leased one stays.
  auto retired = d.RetireForCapacity(1, dl());
  ASSERT_TRUE(retired.ok());
  EXPECT_EQ(*retired, 2u);
  EXPECT_EQ(*d.ObjectState(ids[0], dl()), "live");
  // Deletable: the two retired, not the leased one; a retired object can no longer be leased.
  auto deletable = d.Deletable(dl());
  ASSERT_TRUE(deletable.ok());
  EXPECT_EQ(deletable->size(), 2u);
  auto refused = d.Lease(std::span(ids).subspan(1, 1), "reader-y", dl());
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE((*refused)[0]);
  ASSERT_TRUE(d.Release(std::span(ids).first(1), "reader-x", dl()).ok());
  EXPECT_TRUE(d.Retire(ids[0], dl()).ok());
}

TEST(EngineRemote, RedisFlushedIsRebuiltFromTheManifests) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(400, 5);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 51);
  auto clients =
      remote::ConnectRemote(NodeOptions(servers, "").remote, "default", (*a)->namespace_id());
  ASSERT_TRUE(clients.ok());
  ASSERT_TRUE(
      (*clients)
          ->redis->RunOne({"FLUSHDB"}, std::chrono::steady_clock::now() + milliseconds(5000))
          .ok());
  auto b = Engine::Open(NodeOptions(servers, dir.Join("b")));
  ASSERT_TRUE(b.ok());
  auto miss = (*b)->Lookup(Envelope("b0"), tokens, 16);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->hit_tokens, 0u);
  auto rebuilt = remote::RebuildDirectory(**clients, (*a)->geometry(),
                                          std::chrono::steady_clock::now() + milliseconds(20000));
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
  EXPECT_EQ(*rebuilt, 4u);  // one manifest read and one run published per pack: O(packs)
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 51, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lookup.hit_tokens, 384u);
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_TRUE(r->outcome.failed.empty());
}

// A publisher SIGKILLed at each point of an upload leaves nothing another node can see: a
// lookup misses. (After the last point the object and its manifest are complete: a directory
// rebuild may then publish the run, which is correct; the reader here does not rebuild.)
TEST(EngineRemote, NodeKilledMidUploadLeavesNothingVisible) {
  REQUIRE_SERVERS();
  const remote::PublishPoint points[] = {remote::PublishPoint::kPartsUploaded,
                                         remote::PublishPoint::kObjectComplete,
                                         remote::PublishPoint::kManifestStored};
  for (int k = 0; k < 3; ++k) {
    ::rangekv::testing::TempDir dir;
    const auto tokens = RandomTokens(200, 60 + k);
    EngineOptions oa = NodeOptions(servers, dir.Join("a"));
    oa.remote.url += "-" + std::to_string(k);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto a = Engine::Open(oa);
      if (!a.ok()) _exit(3);
      PublisherOf(**a)->SetPointHookForTesting([&](remote::PublishPoint p) {
        if (p == points[k]) raise(SIGKILL);
      });
      auto fixture = KvFixture::Make(**a, KvCacheLayout::kFlashAttnNhd, 256);
      if (!fixture.ok()) _exit(4);
      auto stored = StoreAll(**a, **fixture, tokens, 61, 7);
      if (!stored.ok()) _exit(5);
      PublisherOf(**a)->Flush(milliseconds(60000));
      _exit(6);  // not reached: the hook kills the process during the first upload
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "point " << k;
    EngineOptions ob = NodeOptions(servers, dir.Join("b"));
    ob.remote.url = oa.remote.url;
    ob.remote.publish = false;
    auto b = Engine::Open(ob);
    ASSERT_TRUE(b.ok());
    auto l = (*b)->Lookup(Envelope("b"), tokens, 16);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->hit_tokens, 0u) << "point " << k;
    (*b)->ReleaseRequest(Envelope("b"));
  }
}

// `rangekv serve --remote`: the node's store service publishes what its clients store; a node
// elsewhere (an embedded engine here) restores it; the service's client reads remote runs too.
TEST(EngineRemote, StoreServicePublishesWhatItsClientsStore) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  service::ServiceOptions so;
  so.root = dir.Join("svc");
  so.socket_path = dir.Join("s.sock");
  so.restart_fence_ms = 0;
  so.remote = NodeOptions(servers, "").remote;
  auto svc = service::StoreService::Start(so);
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  const auto tokens = RandomTokens(500, 8);
  EngineOptions oa = NodeOptions(servers, "");
  oa.store_service = "unix://" + so.socket_path;
  {
    auto a = Engine::Open(oa);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto fa = KvFixture::Make(**a, KvCacheLayout::kFlashAttnNhd, 256);
    auto stored = StoreAll(**a, **fa, tokens, 81, 7);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
    EXPECT_EQ(PublisherOf(**a), nullptr);  // the client does not publish; the service does
  }
  EngineOptions ob = NodeOptions(servers, dir.Join("b"));
  ob.remote.publish = false;
  auto b = Engine::Open(ob);
  ASSERT_TRUE(b.ok());
  // The service uploads in the background: wait (bounded) until the whole prefix is visible.
  uint64_t hit = 0;
  for (int i = 0; i < 600 && hit < 496; ++i) {
    auto l = (*b)->Lookup(Envelope("probe" + std::to_string(i)), tokens, 16);
    ASSERT_TRUE(l.ok());
    hit = l->hit_tokens;
    (*b)->ReleaseRequest(Envelope("probe" + std::to_string(i)));
    if (hit < 496) std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_EQ(hit, 496u);
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  auto r = RestoreAndVerify(**b, **fb, Envelope("b1"), tokens, 16, 81, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_TRUE(r->outcome.failed.empty());
  // Another client of the service: the service's store holds the prefix, so its hit is local
  // and the cluster is not asked.
  {
    auto c = Engine::Open(oa);
    ASSERT_TRUE(c.ok());
    auto fc = KvFixture::Make(**c, KvCacheLayout::kFlashAttnNhd, 256);
    auto rc = RestoreAndVerify(**c, **fc, Envelope("c1"), tokens, 16, 81, 6);
    ASSERT_TRUE(rc.ok());
    EXPECT_EQ(rc->lookup.hit_tokens, 496u);
    EXPECT_EQ(rc->mismatches, 0u);
    EXPECT_EQ((*c)->remote_stats().lookups, 0u);  // wholly local: the cluster was not asked
  }
  EXPECT_TRUE((*svc)->Stop().ok());
}

// Property: random stores, evictions (small local capacity), cluster retirements (small cluster
// capacity) and restores across two publishing nodes never deliver a wrong byte; a restore's
// tokens are either exact or reported failed.
TEST(EngineRemote, RandomStoresEvictionsAndRestoresAcrossTwoNodesNeverDeliverAWrongByte) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  std::mt19937_64 rng(20261206);
  // Prompts share prefixes: a few roots, each extended at random points.
  std::vector<std::vector<int32_t>> prompts;
  for (int root = 0; root < 3; ++root) {
    const auto base = RandomTokens(400, 100 + root);
    for (int k = 0; k < 4; ++k) {
      std::vector<int32_t> p(base.begin(), base.begin() + 64 + rng() % 300);
      const auto tail = RandomTokens(40 + rng() % 200, 1000 + root * 10 + k);
      p.insert(p.end(), tail.begin(), tail.end());
      prompts.push_back(std::move(p));
    }
  }
  auto options = [&](const std::string& name) {
    EngineOptions o = NodeOptions(servers, dir.Join(name));
    o.capacity_bytes = 6 * o.stripe_bytes * o.model.layers;  // 6 packs: evictions happen
    o.remote.capacity_bytes = 40 * 128 * 512 * 4;            // about 40 full packs in the bucket
    return o;
  };
  // Rows depend on (seed, layer, position, token): one seed for every store, so any node's
  // bytes for a path are the same bytes.
  constexpr uint64_t kSeed = 99;
  std::unique_ptr<Engine> nodes[2];
  for (int n = 0; n < 2; ++n) {
    auto e = Engine::Open(options(n == 0 ? "a" : "b"));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    nodes[n] = std::move(e).value();
  }
  uint64_t restored = 0, remote_gets = 0;
  for (int step = 0; step < 40; ++step) {
    Engine& e = *nodes[rng() % 2];
    const auto& p = prompts[rng() % prompts.size()];
    auto fixture = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(fixture.ok());
    if (rng() % 2 == 0) {
      auto stored = StoreAll(e, **fixture, p, kSeed, step);
      ASSERT_TRUE(stored.ok()) << stored.status().ToString();
      if (PublisherOf(e) != nullptr) {
        ASSERT_TRUE(PublisherOf(e)->Flush(milliseconds(60000)));
      }
    } else {
      auto r =
          RestoreAndVerify(e, **fixture, Envelope("r" + std::to_string(step)), p, 16, kSeed, step);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->mismatches, 0u) << "step " << step;
      restored += r->outcome.delivered_tokens;
    }
  }
  for (auto& n : nodes) remote_gets += n->remote_stats().gets;
  EXPECT_GT(restored, 0u);
  EXPECT_GT(remote_gets, 0u);  // some restores crossed nodes
}

// Last in the binary: kills the S3 server. A restore then fails closed within its bound, every
// delivered row exact, and the lookup answers locally within its time bound.
TEST(EngineRemote, ZzS3KilledMidRestoreFailsClosedWithinTheBound) {
  REQUIRE_SERVERS();
  ::rangekv::testing::TempDir dir;
  const auto tokens = RandomTokens(600, 7);
  auto a = Engine::Open(NodeOptions(servers, dir.Join("a")));
  ASSERT_TRUE(a.ok());
  StoreAndPublish(**a, tokens, 71);
  EngineOptions ob = NodeOptions(servers, dir.Join("b"));
  ob.remote.read_timeout_ms = 2000;
  auto b = Engine::Open(ob);
  ASSERT_TRUE(b.ok());
  auto lookup = (*b)->Lookup(Envelope("b1"), tokens, 16);
  ASSERT_TRUE(lookup.ok());
  ASSERT_EQ(lookup->hit_tokens, 592u);
  servers->KillS3();
  auto fb = KvFixture::Make(**b, KvCacheLayout::kFlashAttnNhd, 256);
  ASSERT_TRUE((*fb)->Poison(0xA5).ok());
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("b1");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  const auto start = std::chrono::steady_clock::now();
  auto h = (*b)->StartRestore(req);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const auto slots = (*fb)->Slots(lookup->hit_tokens, 3);
  ASSERT_TRUE(h->BindSlots((*fb)->kv(), slots).ok());
  RestoreOutcome out = h->Finish();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(out.status.ok());
  EXPECT_EQ(out.delivered_tokens, 0u);
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].begin, 0u);
  EXPECT_EQ(out.failed[0].end, 592u);
  EXPECT_LT(took, std::chrono::seconds(20));  // stripes x read bound, far below
  // Rows stayed poisoned (nothing delivered).
  ASSERT_TRUE((*fb)->Sync().ok());
  EXPECT_TRUE((*fb)->RowIs(0, slots[0], 0xA5));
  // A new lookup answers within its bound (the directory still answers; manifests are cached,
  // so it even hits; a restore of it would fail closed again).
  const auto t0 = std::chrono::steady_clock::now();
  auto l2 = (*b)->Lookup(Envelope("b2"), tokens, 16);
  ASSERT_TRUE(l2.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(ob.remote.lookup_timeout_ms + 1000));
  (*b)->ReleaseRequest(Envelope("b2"));
}

}  // namespace
}  // namespace rangekv
