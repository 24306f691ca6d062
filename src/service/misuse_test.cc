// The misuse suite (issue 42; docs/store-service.md "Misuse and hostile clients"): what a
// careless operator, a buggy integration or a hostile local client can do to a store or to the
// store service, each case asserting the clear error and that nothing was lost.
//
//   two owners      a second engine (this process or another) or a second service on one store
//                   directory fails at once with kLocked naming the holder's pid; the lock goes
//                   with a SIGKILLed holder
//   capacity        reopening with a smaller capacity keeps the packs that fit (counted); the
//                   service sizes an existing store from its pack file, not from whichever client
//                   connects first (after a clean shutdown and after a crash)
//   waits           waiting on a layer of an unbound restore fails at once; waits take deadlines
//   hostile peers   idle sessions are closed and real clients get in; a session limit answers
//                   resource_exhausted; a process's sessions are bounded; a frame must arrive
//                   within its deadline; an announced body is not allocated ahead of its bytes;
//                   a client that vanished is not "malformed"; ended sessions are reaped at once;
//                   every closed session is logged once with its reason; a peer in the
//                   service's group as a supplementary group is accepted (--group)
//   memory bound    256 idle and 16 oversized-header connections leave `rangekv serve` under the
//                   bound docs/store-service.md states, and a well-behaved client is served
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "persist/offline.h"
#include "service/service_test_shapes.h"
#include "service/store_service.h"
#include "service_proto/unix_socket.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/gate_env.h"
#include "testing/temp_dir.h"

namespace rangekv::service {
namespace {

using testing::ClientOptions;
using testing::Envelope;
using testing::kGranularity;
using testing::kSeed;
using testing::kT;
using testing::KvFixture;
using testing::kW;
using testing::RawHello;
using testing::RestoreAndVerify;
using testing::StoreAll;
using Clock = std::chrono::steady_clock;

template <typename Pred>
bool Eventually(Pred pred, int seconds = 20) {
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A child process (exec'd: no fork of this multi-threaded process runs our code) whose stdout
// is readable through out_fd.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;
};

Child Spawn(const std::vector<std::string>& args) {
  std::vector<std::string> all = args;
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(p[1]);
  return {pid, p[0]};
}

Child Driver(const std::vector<std::string>& args) {
  std::vector<std::string> all = {RANGEKV_SERVICE_DRIVER};
  all.insert(all.end(), args.begin(), args.end());
  return Spawn(all);
}

bool WaitForLine(const Child& c, const std::string& line, int seconds = 60) {
  std::string got;
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    pollfd p{c.out_fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(c.out_fd, buf, sizeof(buf));
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
    if (got.find(line) != std::string::npos) return true;
  }
  return false;
}

int WaitExit(Child& c) {
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  if (c.out_fd >= 0) ::close(c.out_fd);
  c.out_fd = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The status a refused connection is answered with (its one frame), or kUnavailable.
Status RefusalOf(int fd) {
  auto f = ReceiveFrame(fd, Clock::now() + std::chrono::seconds(10));
  if (!f.ok()) return Unavailable("no reply: " + f.status().ToString());
  if (f->passed_fd >= 0) ::close(f->passed_fd);
  Status remote;
  std::span<const uint8_t> rest;
  RANGEKV_RETURN_IF_ERROR(DecodeStatus(f->body, &remote, &rest));
  return remote;
}

// The peer closed (end of file or reset) within `seconds`; whatever it sent first (an error
// reply) is read and dropped.
bool ClosedWithin(int fd, int seconds) {
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    if (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) return true;
  }
  return false;
}

// A 12-byte request header announcing `body_bytes`, sent alone.
bool SendHeader(int fd, MessageType type, uint32_t body_bytes) {
  uint8_t h[kHeaderBytes];
  EncodeHeader({kProtocolVersion, static_cast<uint16_t>(type), body_bytes}, h);
  return ::send(fd, h, sizeof(h), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(h));
}

// One-pack prefixes (kT tokens each): prefix i of `seed`.
std::vector<int32_t> OnePack(int i, uint64_t seed = 500) {
  return testing::RandomTokens(kT, seed + static_cast<uint64_t>(i));
}

// The hit a restore of a one-pack prefix gets when it is stored: never the last token, rounded
// down to the granularity.
constexpr uint64_t kOnePackHit = (kT - 1) / kGranularity * kGranularity;

// ---- two owners ---------------------------------------------------------------------------------

EngineOptions Embedded(const std::string& dir, uint64_t packs = testing::kPacks) {
  return testing::SmallOptions(dir, testing::Model(), kW, packs);
}

TEST(MisuseTest, ASecondEngineOnOneStoreFailsAtOnceNamingTheHolder) {
  testing::TempDir dir;
  const std::string store = dir.Join("store");
  auto first = Engine::Open(Embedded(store));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto f = KvFixture::Make(**first, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  const auto tokens = OnePack(0);
  ASSERT_TRUE(StoreAll(**first, **f, tokens, kSeed, 1).ok());

  // Before the lock, this second engine opened, allocated the same slots and overwrote the
  // first one's packs; whichever closed last wrote the index.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto start = Clock::now();
    auto second = Engine::Open(Embedded(store));
    ASSERT_FALSE(second.ok()) << "a second engine opened a store another one holds";
    EXPECT_EQ(second.status().code(), StatusCode::kLocked) << second.status().ToString();
    EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())),
              std::string::npos)
        << second.status().ToString();
    EXPECT_NE(second.status().message().find("rangekv engine"), std::string::npos);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "the refusal must not wait";
  }
  // The holder is untouched: its pack still restores bit for bit.
  auto r = RestoreAndVerify(**first, **f, Envelope("still"), tokens, kGranularity, kSeed, 2);
  ASSERT_TRUE(r.ok() && r->outcome.status.ok());
  EXPECT_EQ(r->lookup.hit_tokens, kOnePackHit);
  EXPECT_EQ(r->mismatches, 0u);
  f->reset();
  ASSERT_TRUE((*first)->Close().ok());
  // Closed: the store is free again, and nothing was lost.
  auto again = Engine::Open(Embedded(store));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->recovery().packs_loaded, 1u);
}

TEST(MisuseTest, AnotherProcessHoldingTheStoreIsNamedAndItsDeathReleasesIt) {
  testing::TempDir dir;
  const std::string store = dir.Join("store");
  Child holder = Driver({"open", store});
  ASSERT_TRUE(WaitForLine(holder, "OPEN"));
  auto second = Engine::Open(Embedded(store));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kLocked);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(holder.pid)), std::string::npos)
      << second.status().ToString();
  // inspect and fsck work beside the holder, and say who it is.
  auto offline = persist::OpenOffline(DefaultEnv(), store);
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  ASSERT_TRUE(offline->holder.has_value());
  EXPECT_NE(offline->holder->find("pid " + std::to_string(holder.pid)), std::string::npos);
  auto fsck = persist::Fsck(DefaultEnv(), store);
  ASSERT_TRUE(fsck.ok());
  EXPECT_TRUE(fsck->recovery.in_use_by.has_value());
  // Probing took nothing: the holder still holds it.
  EXPECT_EQ(Engine::Open(Embedded(store)).status().code(), StatusCode::kLocked);

  ::kill(holder.pid, SIGKILL);
  EXPECT_EQ(WaitExit(holder), 128 + SIGKILL);
  auto after = Engine::Open(Embedded(store));
  ASSERT_TRUE(after.ok()) << "the kernel releases a dead holder's lock: "
                          << after.status().ToString();
  auto offline_after = persist::OpenOffline(DefaultEnv(), store);
  ASSERT_TRUE(offline_after.ok());
  EXPECT_NE(offline_after->holder->find("pid " + std::to_string(::getpid())), std::string::npos);
}

class MisuseServiceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    engines_.clear();
    if (service_ != nullptr) {
      EXPECT_TRUE(service_->Stop().ok());
    }
  }
  void Start(ServiceOptions o = {}) {
    o.root = dir_.Join("svc");
    o.socket_path = socket_;
    o.restart_fence_ms = 0;
    o.orphan_grace_ms = 200;
    auto s = StoreService::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    service_ = std::move(s).value();
  }
  void Restart(ServiceOptions o = {}) {
    engines_.clear();
    ASSERT_TRUE(service_->Stop().ok());
    service_.reset();
    Start(o);
  }
  Engine& Client(uint64_t capacity_packs = testing::kPacks) {
    EngineOptions o = ClientOptions(socket_);
    o.capacity_bytes = capacity_packs * o.capacity_bytes / testing::kPacks;
    auto e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engines_.push_back(std::move(e).value());
    return *engines_.back();
  }
  std::string StoreDir() {
    auto g = DeriveGeometry(testing::Model(), kW);
    return dir_.Join("svc") + "/default/" + DeriveNamespace(testing::Model(), *g).ToHex();
  }

  testing::TempDir dir_;
  std::string socket_ = dir_.Join("s.sock");
  std::unique_ptr<StoreService> service_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

TEST_F(MisuseServiceTest, AStoreTheServiceOwnsAndItsRootAreNobodyElses) {
  Start();
  Client();  // the service opens (and locks) the store at its Hello
  auto embedded = Engine::Open(Embedded(StoreDir()));
  ASSERT_FALSE(embedded.ok()) << "an embedded engine opened a store the service holds";
  EXPECT_EQ(embedded.status().code(), StatusCode::kLocked);
  EXPECT_NE(embedded.status().message().find("rangekv serve"), std::string::npos)
      << embedded.status().ToString();
  // A second service on the same root (another socket) would open the same stores.
  ServiceOptions o;
  o.root = dir_.Join("svc");
  o.socket_path = dir_.Join("other.sock");
  auto second = StoreService::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kLocked) << second.status().ToString();
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos);
}

// ---- capacity -----------------------------------------------------------------------------------

TEST(MisuseTest, ReopeningAtASmallerCapacityKeepsTheMostRecentPacksThatFit) {
  testing::TempDir dir;
  const std::string store = dir.Join("store");
  constexpr int kPrefixes = 8, kKeep = 3;
  {
    auto e = Engine::Open(Embedded(store, kPrefixes));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto f = KvFixture::Make(**e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < kPrefixes; ++i) {  // stored in order: prefix 7 is the most recent
      auto s = StoreAll(**e, **f, OnePack(i), kSeed, 10 + i);
      ASSERT_TRUE(s.ok() && s->outcome.status.ok() && s->outcome.visible);
    }
    f->reset();
    ASSERT_TRUE((*e)->Close().ok());
  }
  auto check = [&](Engine& e, int from) {
    auto f = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < kPrefixes; ++i) {
      auto r = RestoreAndVerify(e, **f, Envelope("p" + std::to_string(i)), OnePack(i), kGranularity,
                                kSeed, 20 + i);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->lookup.hit_tokens, i >= from ? kOnePackHit : 0) << "prefix " << i;
      EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
      EXPECT_EQ(r->mismatches, 0u);
    }
  };
  {
    // Before: "pack N lies beyond this store's capacity bound" discarded all eight, and the
    // empty index was saved.
    auto e = Engine::Open(Embedded(store, kKeep));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_TRUE((*e)->recovery().loaded) << (*e)->recovery().detail;
    EXPECT_EQ((*e)->recovery().packs_loaded, uint64_t{kKeep});
    EXPECT_EQ((*e)->recovery().packs_evicted_for_capacity, uint64_t{kPrefixes - kKeep});
    check(**e, kPrefixes - kKeep);
    ASSERT_TRUE((*e)->Close().ok());
  }
  {
    // The trim was made durable at that open; the larger capacity finds the three and has room.
    auto e = Engine::Open(Embedded(store, kPrefixes));
    ASSERT_TRUE(e.ok());
    EXPECT_EQ((*e)->recovery().packs_loaded, uint64_t{kKeep});
    EXPECT_EQ((*e)->recovery().packs_evicted_for_capacity, 0u);
    check(**e, kPrefixes - kKeep);
    ASSERT_TRUE((*e)->Close().ok());
  }
}

TEST_F(MisuseServiceTest, AfterACleanShutdownTheFirstClientCannotShrinkTheStore) {
  Start();
  constexpr int kPrefixes = 6;
  {
    Engine& e = Client();
    auto f = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < kPrefixes; ++i) {
      auto s = StoreAll(e, **f, OnePack(i), kSeed, 10 + i);
      ASSERT_TRUE(s.ok() && s->outcome.status.ok() && s->outcome.visible);
    }
  }
  Restart();
  // The first client after the restart asks for two packs; before, the store took that as its
  // capacity and discarded all six packs at the reopen.
  Engine& small = Client(2);
  auto f = KvFixture::Make(small, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(small.recovery().packs_loaded, uint64_t{kPrefixes});
  for (int i = 0; i < kPrefixes; ++i) {
    auto r = RestoreAndVerify(small, **f, Envelope("p" + std::to_string(i)), OnePack(i),
                              kGranularity, kSeed, 20 + i);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->lookup.hit_tokens, kOnePackHit) << "prefix " << i;
    EXPECT_EQ(r->mismatches, 0u);
  }
}

TEST(MisuseServiceCrashTest, AcknowledgedPublicationsSurviveACrashWhateverTheFirstClientAsks) {
  testing::TempDir dir;
  const std::string socket = dir.Join("s.sock");
  constexpr int kPrefixes = 9;
  Child service = Driver({"serve", dir.Join("svc"), socket, "every_publish"});
  ASSERT_TRUE(WaitForLine(service, "LISTENING"));
  {
    auto e = Engine::Open(ClientOptions(socket));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto f = KvFixture::Make(**e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < kPrefixes; ++i) {
      auto s = StoreAll(**e, **f, OnePack(i), kSeed, 10 + i);
      // every_publish: visible means durable at the service.
      ASSERT_TRUE(s.ok() && s->outcome.status.ok() && s->outcome.visible && s->outcome.durable);
    }
    ::kill(service.pid, SIGKILL);
    EXPECT_EQ(WaitExit(service), 128 + SIGKILL);
    f->reset();
    (void)(*e)->Close();
  }
  Child restarted = Driver({"serve", dir.Join("svc"), socket, "every_publish"});
  ASSERT_TRUE(WaitForLine(restarted, "LISTENING"));
  EngineOptions o = ClientOptions(socket);
  o.capacity_bytes = 2 * (o.capacity_bytes / testing::kPacks);  // two packs, asked first
  auto e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto f = KvFixture::Make(**e, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  int found = 0;
  for (int i = 0; i < kPrefixes; ++i) {
    auto r = RestoreAndVerify(**e, **f, Envelope("p" + std::to_string(i)), OnePack(i), kGranularity,
                              kSeed, 20 + i);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->mismatches, 0u);
    found += r->lookup.hit_tokens == kOnePackHit && r->outcome.status.ok() ? 1 : 0;
  }
  EXPECT_EQ(found, kPrefixes) << "acknowledged-durable publications lost at the restart";
  f->reset();
  EXPECT_TRUE((*e)->Close().ok());
  ::kill(restarted.pid, SIGTERM);
  EXPECT_EQ(WaitExit(restarted), 0);
}

// ---- waits
// ----------------------------------------------------------------------------------------

TEST(MisuseTest, WaitingOnALayerOfAnUnboundRestoreFailsAtOnce) {
  testing::TempDir dir;
  auto e = Engine::Open(Embedded(dir.Join("store")));
  ASSERT_TRUE(e.ok());
  Engine& engine = **e;
  auto f = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  const auto tokens = OnePack(0);
  ASSERT_TRUE(StoreAll(engine, **f, tokens, kSeed, 1).ok());
  auto l = engine.Lookup(Envelope("r"), tokens, kGranularity);
  ASSERT_TRUE(l.ok() && l->hit_tokens == kOnePackHit);
  RestoreRequest req;
  req.ticket = l->ticket;
  req.envelope = Envelope("r");
  req.tokens = tokens;
  req.begin_token = 0;
  req.endpoint_tokens = l->hit_tokens;
  auto h = engine.StartRestore(req);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // Before: this blocked for ever (and Python's Ctrl-C could not end it). Run it where a hang
  // is caught: cancelling the restore releases a stuck wait, so the test fails instead.
  auto waited = std::async(std::launch::async, [&] { return h->WaitLayer(0); });
  if (waited.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    h->Cancel();
    ADD_FAILURE() << "WaitLayer before BindSlots blocked";
  }
  const Status st = waited.get();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("BindSlots"), std::string::npos) << st.ToString();
  // With a deadline the wait may span a bind by another thread; none comes: it runs out.
  EXPECT_EQ(h->WaitLayer(0, std::chrono::milliseconds(50)).code(), StatusCode::kDeadlineExceeded);
  auto stream = engine.CreateStream();
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(h->StreamWaitLayer(0, *stream).code(), StatusCode::kFailedPrecondition);
  // The handle is as it was: bind it and the restore delivers, bit for bit.
  const auto slots = (*f)->Slots(l->hit_tokens, 7);
  ASSERT_TRUE((*f)->Poison(0xEE).ok());
  ASSERT_TRUE(h->BindSlots((*f)->kv(), slots).ok());
  for (uint32_t layer = 0; layer < engine.geometry().layers; ++layer) {
    EXPECT_TRUE(h->WaitLayer(layer).ok());
  }
  RestoreOutcome out = h->Finish();
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  auto mismatches = (*f)->Mismatches(tokens, 0, slots, kSeed);
  ASSERT_TRUE(mismatches.ok());
  EXPECT_EQ(*mismatches, 0u);
}

TEST(MisuseTest, BlockingWaitsTakeADeadline) {
  testing::TempDir dir;
  testing::GateEnv gate(DefaultEnv(), "packs.rkv");
  EngineOptions o = Embedded(dir.Join("store"));
  o.env = &gate;
  auto e = Engine::Open(o);
  ASSERT_TRUE(e.ok());
  Engine& engine = **e;
  auto f = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  const auto tokens = OnePack(0);
  ASSERT_TRUE(StoreAll(engine, **f, tokens, kSeed, 1).ok());
  gate.Close();  // reads wait at the gate
  auto l = engine.Lookup(Envelope("r"), tokens, kGranularity);
  ASSERT_TRUE(l.ok() && l->hit_tokens == kOnePackHit);
  RestoreRequest req;
  req.ticket = l->ticket;
  req.envelope = Envelope("r");
  req.tokens = tokens;
  req.endpoint_tokens = l->hit_tokens;
  auto h = engine.StartRestore(req);
  ASSERT_TRUE(h.ok());
  const auto slots = (*f)->Slots(l->hit_tokens, 7);
  ASSERT_TRUE(h->BindSlots((*f)->kv(), slots).ok());
  const auto start = Clock::now();
  const Status late = h->WaitLayer(0, std::chrono::milliseconds(100));
  EXPECT_EQ(late.code(), StatusCode::kDeadlineExceeded) << late.ToString();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(100));
  gate.Open();
  EXPECT_TRUE(h->WaitLayer(0, std::chrono::seconds(30)).ok()) << "the wait may be repeated";
  EXPECT_TRUE(h->Finish().status.ok());

  // A store whose layers are never produced: WaitExtracted would wait for ever without one.
  const auto other = OnePack(1);
  StoreRequest sr;
  sr.envelope = Envelope("s");
  sr.tokens = other;
  sr.kv = &(*f)->kv();
  const auto store_slots = (*f)->Slots(other.size(), 9);
  sr.slot_mapping = store_slots;
  auto s = engine.BeginStore(sr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->WaitExtracted(std::chrono::milliseconds(50)).code(), StatusCode::kDeadlineExceeded);
  StoreOutcome so = s->Finish();
  EXPECT_EQ(so.status.code(), StatusCode::kFailedPrecondition);  // unproduced layers: aborted
}

// ---- hostile and careless peers
// ------------------------------------------------------------------

TEST_F(MisuseServiceTest, IdleSessionsAreClosedSoRealClientsGetIn) {
  ServiceOptions o;
  o.max_sessions = 4;
  o.max_sessions_per_pid = 0;
  o.idle_timeout = std::chrono::milliseconds(300);
  o.frame_timeout = std::chrono::milliseconds(300);
  Start(o);
  ScopedLogCapture log;
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    auto fd = RawHello(socket_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    idle.push_back(*fd);
  }
  auto silent = ConnectUnix(socket_);  // never says hello
  ASSERT_TRUE(silent.ok());
  idle.push_back(*silent);
  // Every session is taken. Before: for good, and the refusal read unsafe_permissions.
  auto refused = Engine::Open(ClientOptions(socket_));
  if (!refused.ok()) {
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted)
        << refused.status().ToString();
  }
  for (int fd : idle) EXPECT_TRUE(ClosedWithin(fd, 10)) << "an idle session was kept";
  for (int fd : idle) ::close(fd);
  std::unique_ptr<Engine> real;
  ASSERT_TRUE(Eventually([&] {
    auto e = Engine::Open(ClientOptions(socket_));
    if (e.ok()) real = std::move(e).value();
    return real != nullptr;
  }));
  auto f = KvFixture::Make(*real, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(StoreAll(*real, **f, OnePack(0), kSeed, 1).ok());
  const ServiceStats st = service_->stats();
  EXPECT_GE(st.sessions_closed_idle, 4u);
  EXPECT_EQ(st.bad_frames, 0u);
  EXPECT_TRUE(log.Contains("no hello within 300 ms"));
  EXPECT_TRUE(log.Contains("holding nothing"));
  f->reset();
  EXPECT_TRUE(real->Close().ok());
}

TEST_F(MisuseServiceTest, AnEngineIdlePastTheTimeoutReconnectsWithinItsNextCall) {
  ServiceOptions o;
  o.idle_timeout = std::chrono::milliseconds(200);
  Start(o);
  Engine& e = Client();
  auto f = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  const auto tokens = OnePack(0);
  ASSERT_TRUE(StoreAll(e, **f, tokens, kSeed, 1).ok());
  ASSERT_TRUE(Eventually([&] { return service_->stats().sessions_closed_idle == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the client's quiet spell
  // The session was closed for idleness; the next call notices and reconnects at once.
  auto r = RestoreAndVerify(e, **f, Envelope("after"), tokens, kGranularity, kSeed, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, kOnePackHit);
  EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(MisuseServiceTest, SessionLimitsAnswerResourceExhaustedPerServiceAndPerProcess) {
  ServiceOptions o;
  o.max_sessions = 3;
  o.max_sessions_per_pid = 2;
  o.max_sessions_per_uid = 3;
  Start(o);
  auto a = RawHello(socket_);
  auto b = RawHello(socket_);
  ASSERT_TRUE(a.ok() && b.ok());
  // A third session of this process: over its per-process bound.
  auto c = ConnectUnix(socket_);
  ASSERT_TRUE(c.ok());
  const Status per_pid = RefusalOf(*c);
  EXPECT_EQ(per_pid.code(), StatusCode::kResourceExhausted) << per_pid.ToString();
  EXPECT_NE(per_pid.message().find("pid " + std::to_string(::getpid())), std::string::npos);
  ::close(*c);
  ::close(*a);
  ::close(*b);
  ServiceOptions one;
  one.max_sessions = 1;
  one.max_sessions_per_pid = 0;
  Restart(one);
  auto d = RawHello(socket_);
  ASSERT_TRUE(d.ok());
  auto over = ConnectUnix(socket_);
  ASSERT_TRUE(over.ok());
  const Status all = RefusalOf(*over);
  EXPECT_EQ(all.code(), StatusCode::kResourceExhausted) << all.ToString();
  EXPECT_NE(all.message().find("--max-sessions"), std::string::npos) << all.ToString();
  ::close(*over);
  ::close(*d);
  EXPECT_GE(service_->stats().sessions_refused, 1u);
}

TEST_F(MisuseServiceTest, AFrameMustArriveWithinItsDeadlineAndItsBodyIsNotAllocatedAhead) {
  ServiceOptions o;
  o.frame_timeout = std::chrono::milliseconds(300);
  Start(o);
  ScopedLogCapture log;
  auto fd = RawHello(socket_);
  ASSERT_TRUE(fd.ok());
  // 32 MiB announced, none sent: before, the service allocated the 32 MiB at once and waited
  // for the body for ever.
  ASSERT_TRUE(SendHeader(*fd, MessageType::kReserve, kMaxBodyBytes));
  EXPECT_TRUE(ClosedWithin(*fd, 10)) << "a frame that never arrives must end its session";
  ::close(*fd);
  // Trickled: a byte at a time, each well within the socket timeout, the frame past its
  // deadline.
  auto slow = RawHello(socket_);
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(SendHeader(*slow, MessageType::kReserve, 4096));
  bool closed = false;
  const auto start = Clock::now();
  while (!closed && Clock::now() - start < std::chrono::seconds(10)) {
    const char c = 0;
    closed = ::send(*slow, &c, 1, MSG_NOSIGNAL) != 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pollfd p{*slow, POLLIN, 0};
    closed = closed || ::poll(&p, 1, 0) > 0;
  }
  EXPECT_TRUE(closed) << "a trickled frame must end its session at its deadline";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  ::close(*slow);
  ASSERT_TRUE(Eventually([&] { return service_->stats().sessions_closed_deadline == 2; }));
  EXPECT_EQ(service_->stats().bad_frames, 0u);
  EXPECT_TRUE(log.Contains("did not arrive within 300 ms"));
}

TEST_F(MisuseServiceTest, AClientThatVanishedMidFrameIsNotMalformed) {
  Start();
  auto fd = RawHello(socket_);
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(SendHeader(*fd, MessageType::kReserve, 1000));
  const char part[10] = {};
  ASSERT_EQ(::send(*fd, part, sizeof(part), MSG_NOSIGNAL), 10);
  ::close(*fd);  // as a killed client's socket closes
  ASSERT_TRUE(Eventually([&] { return service_->stats().sessions_vanished == 1; }));
  EXPECT_EQ(service_->stats().bad_frames, 0u) << "a vanished client was counted as malformed";
  // Garbage still is malformed.
  auto g = ConnectUnix(socket_);
  ASSERT_TRUE(g.ok());
  const uint8_t junk[12] = {'n', 'o', 't', ' ', 'a', ' ', 'f', 'r', 'a', 'm', 'e', '!'};
  ASSERT_EQ(::send(*g, junk, sizeof(junk), MSG_NOSIGNAL), 12);
  EXPECT_TRUE(ClosedWithin(*g, 10));
  ::close(*g);
  ASSERT_TRUE(Eventually([&] { return service_->stats().bad_frames == 1; }));
}

TEST_F(MisuseServiceTest, EndedSessionsAreReapedAtOnceAndEachIsLoggedWithItsReason) {
  ServiceOptions o;
  o.frame_timeout = std::chrono::milliseconds(300);
  Start(o);
  ScopedLogCapture log;
  {
    Engine& e = Client();  // a well-behaved session: goodbye at close
    auto f = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(StoreAll(e, **f, OnePack(0), kSeed, 1).ok());
    f->reset();
    ASSERT_TRUE(e.Close().ok());
  }
  auto quiet = RawHello(socket_);  // closes without goodbye
  ASSERT_TRUE(quiet.ok());
  ::close(*quiet);
  auto early = ConnectUnix(socket_);  // closes before hello
  ASSERT_TRUE(early.ok());
  ::close(*early);
  auto bad = RawHello(socket_);  // a request body that does not decode
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE(SendHeader(*bad, MessageType::kRelease, 3));
  ASSERT_EQ(::send(*bad, "abc", 3, MSG_NOSIGNAL), 3);
  EXPECT_TRUE(ClosedWithin(*bad, 10));
  ::close(*bad);
  auto wrong = ConnectUnix(socket_);  // a request before hello
  ASSERT_TRUE(wrong.ok());
  ASSERT_TRUE(SendHeader(*wrong, MessageType::kStats, 0));
  EXPECT_TRUE(ClosedWithin(*wrong, 10));
  ::close(*wrong);
  // No new connection comes; before, ended sessions stayed (and counted) until one did.
  ASSERT_TRUE(Eventually([&] { return service_->stats().sessions_active == 0; }))
      << service_->stats().sessions_active << " ended sessions not reaped";
  // One line per session, with its reason.
  std::map<std::string, int> closed;
  for (const std::string& line : log.lines()) {
    const size_t at = line.find("store service: session ");
    if (at == std::string::npos || line.find(") closed: ") == std::string::npos) continue;
    const size_t id_end = line.find(' ', at + 23);
    closed[line.substr(at + 23, id_end - at - 23)]++;
  }
  EXPECT_EQ(closed.size(), 5u);
  for (const auto& [id, n] : closed) EXPECT_EQ(n, 1) << "session " << id;
  EXPECT_TRUE(log.Contains("closed: goodbye"));
  EXPECT_TRUE(log.Contains("closed: closed by the client"));
  EXPECT_TRUE(log.Contains("closed: closed by the client before hello"));
  EXPECT_TRUE(log.Contains("closed: malformed release"));
  EXPECT_TRUE(log.Contains("closed: malformed: failed_precondition: the first message"));
}

TEST_F(MisuseServiceTest, APeerWithTheServicesGroupAsASupplementaryGroupIsAccepted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a peer of another uid";
  // The socket must be reachable for another uid: a traversable directory.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  ServiceOptions o;
  o.group_access = true;
  Start(o);
  const gid_t group = ::getegid();
  auto try_as = [&](std::vector<gid_t> groups, gid_t primary) -> std::string {
    // A child of another uid whose only tie to the service is `groups`: it connects, sends a
    // Hello and writes what came back ("ok" or the status) to a pipe. (fork without exec: the
    // child only makes system calls and _exits.)
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::string out = "ok";
      if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(primary) != 0 ||
          ::setuid(65534) != 0) {
        out = std::string("setuid: ") + std::strerror(errno);
      } else if (auto fd = RawHello(socket_); !fd.ok()) {
        out = fd.status().ToString();
      }
      const ssize_t w = ::write(p[1], out.data(), out.size());
      ::_exit(w < 0 ? 1 : 0);
    }
    ::close(p[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(p[0], buf, sizeof(buf))) > 0;) got.append(buf, size_t(n));
    ::close(p[0]);
    ::waitpid(pid, nullptr, 0);
    return got;
  };
  // Before: only the primary group counted, while the files' group bits let such a user read
  // the store directly.
  EXPECT_EQ(try_as({group}, 65534), "ok") << "supplementary group member refused";
  EXPECT_EQ(try_as({}, group), "ok") << "primary group member refused";
  // A stranger is kept out (by the socket's 0660 bits before the credentials check).
  EXPECT_NE(try_as({}, 65534), "ok") << "a stranger was accepted";
}

// ---- memory bound
// --------------------------------------------------------------------------------

uint64_t RssBytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// docs/store-service.md "Misuse and hostile clients" states this bound. `rangekv serve` itself,
// in its own process, measured by its resident set.
constexpr uint64_t kHostileRssBoundBytes = 64ull << 20;

TEST(MisuseServeMemoryTest, IdleAndOversizedConnectionsStayUnderTheStatedBound) {
  testing::TempDir dir;
  const std::string socket = dir.Join("s.sock");
  Child serve = Spawn({RANGEKV_CLI, "serve", "--dir", dir.Join("svc"), "--socket", socket,
                       "--max-sessions", "400", "--max-sessions-per-pid", "0", "--frame-timeout-ms",
                       "30000", "--read-slots", "0"});
  ASSERT_TRUE(Eventually([&] {
    struct stat st {};
    return ::stat(socket.c_str(), &st) == 0;
  }));
  // A well-behaved client opens the store and works; then the baseline.
  auto e = Engine::Open(ClientOptions(socket));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto f = KvFixture::Make(**e, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(StoreAll(**e, **f, OnePack(0), kSeed, 1).ok());
  const uint64_t base = RssBytes(serve.pid);
  ASSERT_GT(base, 0u);

  std::vector<int> fds;
  for (int i = 0; i < 256; ++i) {  // idle sessions (after hello)
    auto fd = RawHello(socket);
    ASSERT_TRUE(fd.ok()) << i << ": " << fd.status().ToString();
    fds.push_back(*fd);
  }
  for (int i = 0; i < 16; ++i) {  // 12 bytes each, announcing the largest body
    auto fd = RawHello(socket);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(SendHeader(*fd, MessageType::kReserve, kMaxBodyBytes));
    fds.push_back(*fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // every header read
  const uint64_t hostile = RssBytes(serve.pid);
  // The well-behaved client is served meanwhile.
  auto r = RestoreAndVerify(**e, **f, Envelope("served"), OnePack(0), kGranularity, kSeed, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, kOnePackHit);
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
  std::printf(
      "rangekv serve RSS: %.1f MiB with one client, %.1f MiB with 256 idle and 16 "
      "oversized-header connections more (+%.1f MiB; bound +%.0f MiB)\n",
      base / 1048576.0, hostile / 1048576.0, (hostile - base) / 1048576.0,
      kHostileRssBoundBytes / 1048576.0);
  EXPECT_LT(hostile, base + kHostileRssBoundBytes);
  for (int fd : fds) ::close(fd);
  f->reset();
  EXPECT_TRUE((*e)->Close().ok());
  ::kill(serve.pid, SIGTERM);
  EXPECT_EQ(WaitExit(serve), 0);
}

}  // namespace
}  // namespace rangekv::service
