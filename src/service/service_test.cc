// Engines sharing one store service: in-process sessions, forked client processes (one of them
// SIGKILLed with a store and a restore in flight), a SIGKILLed and restarted service, and
// hostile clients on raw sockets.
#include "service/store_service.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "persist/identity_record.h"
#include "persist/store_layout.h"
#include "service/service_test_shapes.h"
#include "service_proto/unix_socket.h"
#include "testing/engine_fixture.h"
#include "testing/temp_dir.h"

namespace rangekv::service {
namespace {

using testing::ClientOptions;
using testing::ClientTokens;
using testing::Envelope;
using testing::kGranularity;
using testing::kSeed;
using testing::KvFixture;
using testing::RawHello;
using testing::RestoreAndVerify;
using testing::StoreAll;

template <typename Pred>
bool Eventually(Pred pred, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A child running service_client_driver; stdout is readable through out_fd.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;
};

Child Spawn(const std::vector<std::string>& args) {
  std::vector<std::string> all = {RANGEKV_SERVICE_DRIVER};
  all.insert(all.end(), args.begin(), args.end());
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

// Reads the child's stdout until `line` appears (or it closes / times out).
bool WaitForLine(const Child& c, const std::string& line, int seconds = 60) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
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

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartService(); }
  void TearDown() override {
    engines_.clear();
    if (service_ != nullptr) {
      EXPECT_TRUE(service_->Stop().ok());
    }
  }
  void StartService(ServiceOptions o = {}) {
    o.root = dir_.Join("svc");
    o.socket_path = socket_;
    o.restart_fence_ms = 0;
    o.orphan_grace_ms = 200;
    auto s = StoreService::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    service_ = std::move(s).value();
  }
  // The service again, with the node's read gate of `slots` (ServiceOptions::read_slots).
  void RestartWithReadGate(uint32_t slots) {
    ASSERT_TRUE(service_->Stop().ok());
    service_.reset();
    ServiceOptions o;
    o.read_slots = slots;
    StartService(o);
  }
  // A client engine that passes the read gate: read_gate is on by default (posix: io_uring's
  // reads are not gated).
  EngineOptions GatedClientOptions() const {
    EngineOptions o = ClientOptions(socket_);
    o.io_engine = IoEngineSelection::kPosix;
    return o;
  }
  Engine& Client(const std::string& tenant = "default") {
    auto e = Engine::Open(ClientOptions(socket_, tenant));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engines_.push_back(std::move(e).value());
    return *engines_.back();
  }
  std::unique_ptr<KvFixture> Fixture(Engine& engine) {
    auto f = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return std::move(f).value();
  }
  // A new client restores `tokens` (stored with kSeed) through the service, bit for bit.
  void ExpectANewClientRestores(const std::vector<int32_t>& tokens, const std::string& request) {
    Engine& b = Client();
    auto dst = Fixture(b);
    auto r = RestoreAndVerify(b, *dst, Envelope(request), tokens, kGranularity, kSeed, 2);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_GT(r->lookup.hit_tokens, 0u);
    EXPECT_EQ(r->mismatches, 0u);
  }

  testing::TempDir dir_;
  std::string socket_ = dir_.Join("s.sock");
  std::unique_ptr<StoreService> service_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

TEST_F(ServiceTest, PrefixStoredByOneEngineIsRestoredByAnotherWithEmbeddedWork) {
  Engine& a = Client();
  Engine& b = Client();
  EXPECT_NE(a.DescribeBackends().find("io="), std::string::npos);
  auto src = Fixture(a);
  auto dst = Fixture(b);
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(a, *src, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
  EXPECT_TRUE(stored->outcome.visible);
  auto r = RestoreAndVerify(b, *dst, Envelope("r"), tokens, kGranularity, kSeed, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->lookup.hit_tokens, (tokens.size() - 1) / kGranularity * kGranularity);
  EXPECT_EQ(r->mismatches, 0u);

  // The same two requests against an embedded store do exactly the same work.
  EngineOptions eo = ClientOptions(socket_);
  eo.store_service.clear();
  eo.store_dir = dir_.Join("embedded");
  auto emb = Engine::Open(eo);
  ASSERT_TRUE(emb.ok()) << emb.status().ToString();
  auto esrc = Fixture(**emb);
  auto est = StoreAll(**emb, *esrc, tokens, kSeed, 1);
  ASSERT_TRUE(est.ok());
  auto er = RestoreAndVerify(**emb, *esrc, Envelope("r"), tokens, kGranularity, kSeed, 2);
  ASSERT_TRUE(er.ok());
  EXPECT_EQ(stored->work.native_writes, est->work.native_writes);
  EXPECT_EQ(stored->work.gather_launches, est->work.gather_launches);
  EXPECT_EQ(r->outcome.work.native_reads, er->outcome.work.native_reads);
  EXPECT_EQ(r->outcome.work.scatter_launches, er->outcome.work.scatter_launches);
  EXPECT_EQ(r->outcome.work.ready_events, er->outcome.work.ready_events);
  EXPECT_EQ(r->lookup.records_selected, er->lookup.records_selected);
  EXPECT_EQ(b.GetStats().lookups, 1u);
  EXPECT_EQ(b.GetStats().leases_taken, r->lookup.records_selected);
  EXPECT_EQ((*emb)->GetStats().records_selected, b.GetStats().records_selected);
  EXPECT_TRUE((*emb)->Close().ok());
}

// Each lookup and claim reply says how many sessions read now; an engine divides its stripe
// reads and read I/O pieces in flight by it (EngineTuning::share_reads), and one reading alone
// gets its full counts back once the others' window passed.
TEST_F(ServiceTest, ReadersDivideEachClientsReadConcurrency) {
  // A window wide enough for three restores on a loaded (or sanitized) CI machine.
  constexpr uint64_t kWindowMs = 3000;
  ASSERT_TRUE(service_->Stop().ok());
  service_.reset();
  ServiceOptions so;
  so.reader_window_ms = kWindowMs;
  StartService(so);
  EngineOptions eo = ClientOptions(socket_);
  eo.tuning.read_workers = 4;
  eo.tuning.read_io_threads = 8;
  auto open = [&](bool share) {
    eo.tuning.share_reads = share;
    auto e = Engine::Open(eo);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engines_.push_back(std::move(e).value());
    return engines_.back().get();
  };
  Engine* a = open(true);
  Engine* b = open(true);
  Engine* c = open(false);
  auto src = Fixture(*a);
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(*a, *src, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  const auto restore = [&](Engine* e, const std::string& request) {
    auto dst = Fixture(*e);
    auto r = RestoreAndVerify(*e, *dst, Envelope(request), tokens, kGranularity, kSeed, 2);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_EQ(r->mismatches, 0u);
  };
  const auto expect_share = [](const Engine* e, uint32_t readers, uint32_t workers,
                               uint32_t threads) {
    const Engine::ReadShare s = e->read_share();
    EXPECT_EQ(s.readers, readers);
    EXPECT_EQ(s.read_workers, workers);
    EXPECT_EQ(s.read_io_threads, threads);
  };
  expect_share(a, 1, 4, 8);  // before any reply
  restore(a, "a1");
  expect_share(a, 1, 4, 8);  // alone
  restore(b, "b1");
  expect_share(b, 2, 2, 4);  // a read within the window
  restore(c, "c1");
  expect_share(c, 1, 4, 8);  // share_reads=false: full counts whatever the service says
  restore(a, "a2");
  expect_share(a, 3, 2, 3);  // a, b and c read within the window: ceil(4/3), ceil(8/3)
  EXPECT_EQ(service_->stats().readers, 3u);
  // A session whose connection closed is no reader, whatever its window.
  ASSERT_TRUE(c->Close().ok());
  EXPECT_TRUE(Eventually([&] { return service_->stats().readers == 2; }));
  // The window passes; a reading alone gets its full counts back.
  std::this_thread::sleep_for(std::chrono::milliseconds(kWindowMs + 200));
  EXPECT_EQ(service_->stats().readers, 0u);
  restore(a, "a3");
  expect_share(a, 1, 4, 8);
}

class ServiceProcessesTest : public ServiceTest, public ::testing::WithParamInterface<int> {};

TEST_P(ServiceProcessesTest, ClientProcessesStoreAndRestoreOverlappingPrefixes) {
  const int n = GetParam();
  std::vector<Child> stores;
  for (int c = 0; c < n; ++c) stores.push_back(Spawn({"store", socket_, std::to_string(c)}));
  for (auto& c : stores) EXPECT_EQ(WaitExit(c), 0);
  std::vector<Child> restores;
  for (int c = 0; c < n; ++c) restores.push_back(Spawn({"restore", socket_, std::to_string(n)}));
  for (auto& c : restores) EXPECT_EQ(WaitExit(c), 0);
  const ServiceStats s = service_->stats();
  EXPECT_EQ(s.bad_frames, 0u);
  EXPECT_EQ(s.sessions_accepted, static_cast<uint64_t>(2 * n));
  EXPECT_EQ(s.sessions_reclaimed, 0u);  // every client said goodbye
}

INSTANTIATE_TEST_SUITE_P(Clients, ServiceProcessesTest, ::testing::Values(2, 4));

// The node's read gate (ServiceOptions::read_slots): engines that ask pass it with every read
// and restore bit-exact; one whose service has no gate reads ungated; a session's holder index
// comes back at Goodbye.
TEST_F(ServiceTest, EnginesPassTheNodesReadGate) {
  RestartWithReadGate(2);
  const EngineOptions eo = GatedClientOptions();
  std::vector<Engine*> gated;
  for (int i = 0; i < 2; ++i) {
    auto e = Engine::Open(eo);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engines_.push_back(std::move(e).value());
    gated.push_back(engines_.back().get());
    EXPECT_EQ(gated.back()->read_share().gate_slots, 2u);
  }
  EXPECT_EQ(service_->stats().read_gate_slots, 2u);
  EXPECT_EQ(service_->stats().read_gate_holders, 2u);
  EXPECT_EQ(service_->stats().read_gate_sessions, 2u);
  auto src = Fixture(*gated[0]);
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(*gated[0], *src, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  std::vector<std::thread> restores;
  for (int i = 0; i < 2; ++i) {
    restores.emplace_back([&, i] {
      auto dst = Fixture(*gated[i]);
      auto r = RestoreAndVerify(*gated[i], *dst, Envelope("g" + std::to_string(i)), tokens,
                                kGranularity, kSeed, 2 + i);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
      EXPECT_EQ(r->mismatches, 0u);
    });
  }
  for (auto& t : restores) t.join();
  EXPECT_EQ(service_->stats().read_gate_outstanding, 0u);              // every slot given back
  for (Engine* e : gated) EXPECT_GT(e->read_share().gate_passes, 0u);  // its reads passed it
  ASSERT_TRUE(gated[1]->Close().ok());
  EXPECT_TRUE(Eventually([&] { return service_->stats().read_gate_holders == 1; }));
  EXPECT_EQ(service_->stats().read_gate_marks_reclaimed, 0u);

  // Asked of a service without a gate: the engine opens and reads ungated.
  ASSERT_TRUE(service_->Stop().ok());
  engines_.clear();
  service_.reset();
  StartService();
  auto plain = Engine::Open(eo);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->read_share().gate_slots, 0u);
  ASSERT_TRUE((*plain)->Close().ok());
}

// A client process SIGKILLed while holding gate slots: once it is gone the service gives its
// slots back to the node, and an engine that waited for them reads on.
TEST_F(ServiceTest, SigkilledClientsGateSlotsComeBack) {
  RestartWithReadGate(3);
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(a, *src, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());

  Child holder = Spawn({"gate", socket_, "3"});  // every slot of the node
  ASSERT_TRUE(WaitForLine(holder, "GATED"));
  EXPECT_EQ(service_->stats().read_gate_outstanding, 3u);
  ::kill(holder.pid, SIGKILL);
  EXPECT_EQ(WaitExit(holder), 128 + SIGKILL);
  // a (read_gate on by default) keeps its own index; the killed holder's comes back.
  ASSERT_TRUE(Eventually([&] { return service_->stats().read_gate_holders == 1; }));
  const ServiceStats s = service_->stats();
  EXPECT_EQ(s.read_gate_outstanding, 0u);
  EXPECT_EQ(s.read_gate_marks_reclaimed, 3u);
  // A gated engine reads through the node's slots again.
  auto b = Engine::Open(GatedClientOptions());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto dst = Fixture(**b);
  auto r = RestoreAndVerify(**b, *dst, Envelope("after-gate"), tokens, kGranularity, kSeed, 3);
  ASSERT_TRUE(r.ok() && r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_GT((*b)->read_share().gate_passes, 0u);
  EXPECT_EQ(service_->stats().read_gate_outstanding, 0u);
  ASSERT_TRUE((*b)->Close().ok());
}

// A client that drops its session without Goodbye but lives on (it will reconnect): the
// session's thread ends at once (no thread waits on a live process), its holder index and its
// slots wait for the process to exit.
TEST_F(ServiceTest, AHungUpGateHolderWaitsForItsProcessNotAThread) {
  RestartWithReadGate(2);
  Child holder = Spawn({"gate", socket_, "1", "hangup"});
  struct KillAtExit {
    pid_t pid;
    ~KillAtExit() { ::kill(pid, SIGKILL); }  // also when an assertion below returns early
  } kill_at_exit{holder.pid};
  ASSERT_TRUE(WaitForLine(holder, "GATED"));
  // The session ended (its thread is not waiting in a reclaim): the index waits on its own.
  ASSERT_TRUE(Eventually([&] { return service_->stats().read_gate_holders_waiting == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few reaping rounds
  ServiceStats s = service_->stats();
  EXPECT_EQ(s.read_gate_holders, 1u);  // its process lives: the index and its slot wait
  EXPECT_EQ(s.read_gate_holders_waiting, 1u);
  EXPECT_EQ(s.read_gate_outstanding, 1u);
  EXPECT_EQ(s.sessions_reclaimed, 0u);  // it held no tickets or reservations
  ::kill(holder.pid, SIGKILL);
  EXPECT_EQ(WaitExit(holder), 128 + SIGKILL);
  ASSERT_TRUE(Eventually([&] { return service_->stats().read_gate_holders == 0; }));
  s = service_->stats();
  EXPECT_EQ(s.read_gate_holders_waiting, 0u);
  EXPECT_EQ(s.read_gate_outstanding, 0u);
  EXPECT_EQ(s.read_gate_marks_reclaimed, 1u);
}

TEST_F(ServiceTest, SigkilledClientIsReclaimedAndOthersAreUnaffected) {
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(a, *src, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());

  Child holder = Spawn({"hold", socket_});
  ASSERT_TRUE(WaitForLine(holder, "HOLDING"));
  // The holder's lease pins client 0's packs and its reservation pins two slots meanwhile; the
  // other client works on.
  auto dst = Fixture(a);
  auto r = RestoreAndVerify(a, *dst, Envelope("during"), tokens, kGranularity, kSeed, 4);
  ASSERT_TRUE(r.ok() && r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);

  ::kill(holder.pid, SIGKILL);
  EXPECT_EQ(WaitExit(holder), 128 + SIGKILL);
  ASSERT_TRUE(Eventually([&] {
    const ServiceStats s = service_->stats();
    return s.reservations_reclaimed >= 1 && s.tickets_reclaimed >= 1;
  }));
  EXPECT_EQ(service_->stats().sessions_reclaimed, 1u);
  // Nothing the holder was writing became visible; its prefix stores and restores cleanly now.
  const auto held = testing::HeldTokens();
  auto miss = a.Lookup(Envelope("after"), held, kGranularity);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->hit_tokens, 0u);
  auto again = StoreAll(a, *src, held, kSeed, 9);
  ASSERT_TRUE(again.ok() && again->outcome.status.ok());
  EXPECT_EQ(again->outcome.stored, (TokenInterval{0, held.size()}));
  auto r2 = RestoreAndVerify(a, *dst, Envelope("held"), held, kGranularity, kSeed, 5);
  ASSERT_TRUE(r2.ok() && r2->outcome.status.ok());
  EXPECT_EQ(r2->mismatches, 0u);
}

TEST(ServiceRestartTest, SigkilledServiceFailsRequestsCleanlyAndRestartsFromItsJournal) {
  testing::TempDir dir;
  const std::string socket = dir.Join("s.sock");
  Child service = Spawn({"serve", dir.Join("svc"), socket, "every_publish"});
  ASSERT_TRUE(WaitForLine(service, "LISTENING"));
  auto e = Engine::Open(ClientOptions(socket));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  auto f = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(f.ok());
  const auto tokens = ClientTokens(0);
  auto stored = StoreAll(engine, **f, tokens, kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok() && stored->outcome.visible);

  ::kill(service.pid, SIGKILL);
  EXPECT_EQ(WaitExit(service), 128 + SIGKILL);
  // Requests fail cleanly (the serving engine recomputes): lookups and stores error out.
  auto lost = engine.Lookup(Envelope("lost"), tokens, kGranularity);
  EXPECT_FALSE(lost.ok());
  if (!lost.ok()) {
    EXPECT_EQ(lost.status().code(), StatusCode::kUnavailable);
  }
  auto other = ClientTokens(1);
  auto failed_store = StoreAll(engine, **f, other, kSeed, 3);
  EXPECT_TRUE(!failed_store.ok() || !failed_store->outcome.status.ok());

  Child restarted = Spawn({"serve", dir.Join("svc"), socket, "every_publish"});
  ASSERT_TRUE(WaitForLine(restarted, "LISTENING"));
  // The engine reconnects by itself; the publication survived in the journal.
  uint64_t hit = 0;
  ASSERT_TRUE(Eventually([&] {
    auto l = engine.Lookup(Envelope("probe"), tokens, kGranularity);
    if (!l.ok()) return false;
    hit = l->hit_tokens;
    engine.ReleaseRequest(Envelope("probe"));
    return true;
  }));
  EXPECT_EQ(hit, (tokens.size() - 1) / kGranularity * kGranularity);
  auto r = RestoreAndVerify(engine, **f, Envelope("back"), tokens, kGranularity, kSeed, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_TRUE(engine.Close().ok());
  ::kill(restarted.pid, SIGTERM);
  EXPECT_EQ(WaitExit(restarted), 0);
}

// ---- hostile clients ----------------------------------------------------------------------------

// The status of the next reply on `fd`, or kUnavailable when none came.
Status ReplyStatus(int fd) {
  auto f = ReceiveFrame(fd);
  if (!f.ok()) return Unavailable("no reply");
  Status remote;
  std::span<const uint8_t> rest;
  RANGEKV_RETURN_IF_ERROR(DecodeStatus(f->body, &remote, &rest));
  return remote;
}

// Sends raw bytes; returns the status of the reply, or kUnavailable when none came.
Status SendRaw(int fd, std::span<const uint8_t> bytes) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return Unavailable("send");
  }
  return ReplyStatus(fd);
}

// The service hung up: end of file, or a reset when it closed with our bytes unread.
bool Closed(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) <= 0;
}

TEST_F(ServiceTest, MalformedFramesGetAnErrorAndAClosedConnection) {
  {  // garbage
    auto fd = ConnectUnix(socket_);
    ASSERT_TRUE(fd.ok());
    const uint8_t junk[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    EXPECT_EQ(SendRaw(*fd, junk).code(), StatusCode::kCorruption);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  {  // oversized body announced
    auto fd = ConnectUnix(socket_);
    ASSERT_TRUE(fd.ok());
    uint8_t h[kHeaderBytes];
    EncodeHeader({kProtocolVersion, static_cast<uint16_t>(MessageType::kHello), kMaxBodyBytes + 1},
                 h);
    EXPECT_EQ(SendRaw(*fd, h).code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  {  // wrong version
    auto fd = ConnectUnix(socket_);
    ASSERT_TRUE(fd.ok());
    uint8_t h[kHeaderBytes];
    EncodeHeader({kProtocolVersion + 1, static_cast<uint16_t>(MessageType::kHello), 0}, h);
    EXPECT_EQ(SendRaw(*fd, h).code(), StatusCode::kWrongVersion);
    ::close(*fd);
  }
  {  // a request before hello
    auto fd = ConnectUnix(socket_);
    ASSERT_TRUE(fd.ok());
    const auto frame = Frame(static_cast<uint16_t>(MessageType::kStats), {});
    EXPECT_EQ(SendRaw(*fd, frame).code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  {  // truncated body, then the peer hangs up
    auto fd = ConnectUnix(socket_);
    ASSERT_TRUE(fd.ok());
    uint8_t h[kHeaderBytes + 4];
    EncodeHeader({kProtocolVersion, static_cast<uint16_t>(MessageType::kHello), 100}, h);
    ASSERT_EQ(::send(*fd, h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
    ::close(*fd);
  }
  {  // a well-framed lookup whose body does not decode, after a valid hello
    auto fd = RawHello(socket_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    std::vector<uint8_t> bad = {0xff, 0xff, 0xff, 0xff};
    EXPECT_EQ(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kLookup), bad)).code(),
              StatusCode::kResourceExhausted);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  EXPECT_TRUE(Eventually([&] { return service_->stats().bad_frames >= 5; }));
  // The service still serves well-behaved clients.
  Engine& a = Client();
  auto src = Fixture(a);
  auto stored = StoreAll(a, *src, ClientTokens(0), kSeed, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
}

// A memfd of `bytes`, sealed against shrinking when `sealed`.
int QueryMemfd(uint64_t bytes, bool sealed) {
  const int fd = ::memfd_create("test-query", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  if (sealed && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return -1;
  return fd;
}

// Sends one frame with `pass_fd`; the reply's status.
Status SendWithFd(int fd, MessageType type, std::span<const uint8_t> body, int pass_fd) {
  RANGEKV_RETURN_IF_ERROR(SendFrame(fd, static_cast<uint16_t>(type), body, pass_fd));
  return ReplyStatus(fd);
}

// Engines ask for the read gate by default (EngineTuning::read_gate); a service run without one
// answers kNotFound (the engine logs it as a choice, where a lost service's kUnavailable is
// warned of) and keeps the session.
TEST_F(ServiceTest, AServiceWithoutAGateAnswersNotFoundAndKeepsTheSession) {
  auto fd = RawHello(socket_);  // the fixture's service: ServiceOptions::read_slots 0
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachReadGate, {}, -1).code(), StatusCode::kNotFound);
  EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachReadGate, {}, -1).code(), StatusCode::kNotFound);
  ::close(*fd);
  EXPECT_EQ(service_->stats().read_gate_sessions, 0u);
}

TEST_F(ServiceTest, QueryBufferIsASealedMemfdAndSharedQueriesStayInsideIt) {
  constexpr uint64_t kBytes = 4096;  // 1,024 tokens
  std::vector<uint8_t> attach;
  Encode(AttachQueryBufferRequest{kBytes}, &attach);
  LookupSharedRequest lookup;
  lookup.envelope.request_id = "q";
  lookup.granularity_tokens = kGranularity;
  auto lookup_of = [&](uint32_t n) {
    lookup.token_count = n;
    std::vector<uint8_t> body;
    Encode(lookup, &body);
    return Frame(static_cast<uint16_t>(MessageType::kLookupShared), body);
  };
  {  // a shared lookup before any buffer: refused, connection closed
    auto fd = RawHello(socket_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    EXPECT_EQ(SendRaw(*fd, lookup_of(16)).code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  {
    auto fd = RawHello(socket_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    // No descriptor, an unsealed one, one of another size: refused, the session stays.
    EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, -1).code(),
              StatusCode::kInvalidArgument);
    const int unsealed = QueryMemfd(kBytes, false);
    ASSERT_GE(unsealed, 0);
    EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, unsealed).code(),
              StatusCode::kInvalidArgument);
    ::close(unsealed);
    const int small = QueryMemfd(kBytes / 2, true);
    ASSERT_GE(small, 0);
    EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, small).code(),
              StatusCode::kInvalidArgument);
    ::close(small);
    const int good = QueryMemfd(kBytes, true);
    ASSERT_GE(good, 0);
    ASSERT_TRUE(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, good).ok());
    // A second buffer for the same session is refused.
    EXPECT_EQ(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, good).code(),
              StatusCode::kFailedPrecondition);
    ::close(good);  // the service's mapping outlives the descriptor
    EXPECT_TRUE(SendRaw(*fd, lookup_of(1024)).ok());  // a miss, answered from the buffer
    // More tokens than the buffer holds: refused, connection closed.
    EXPECT_EQ(SendRaw(*fd, lookup_of(1025)).code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(Closed(*fd));
    ::close(*fd);
  }
  // A client engine attaches its buffer at hello: its lookups and claims go through it, and a
  // restore through them is bit-exact.
  const uint64_t shared_before = service_->stats().shared_queries;
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  ExpectANewClientRestores(tokens, "r");
  EXPECT_GE(service_->stats().shared_queries, shared_before + 2);  // b's lookup and claim
}

// A shared lookup or claim names the caller's CPU; the session's thread moves there (the tokens
// are in that CPU's cache) when the service may run on it, and ignores a CPU it may not use.
// Off (ServiceOptions::follow_client_cpu), nothing moves; either way the restore is bit-exact.
TEST_F(ServiceTest, ASessionFollowsItsClientsCpuForSharedQueries) {
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  ExpectANewClientRestores(tokens, "r");
  EXPECT_GE(service_->stats().client_cpu_moves, 1u);

  {  // CPUs this process may not run on, and no CPU at all: answered, nothing moves
    const uint64_t moves = service_->stats().client_cpu_moves;
    auto fd = RawHello(socket_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    std::vector<uint8_t> attach;
    Encode(AttachQueryBufferRequest{4096}, &attach);
    const int memfd = QueryMemfd(4096, true);
    ASSERT_GE(memfd, 0);
    ASSERT_TRUE(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, memfd).ok());
    ::close(memfd);
    LookupSharedRequest lookup;
    lookup.envelope.request_id = "cpu";
    lookup.granularity_tokens = kGranularity;
    lookup.token_count = 16;
    for (uint32_t cpu : {uint32_t{CPU_SETSIZE}, uint32_t{1} << 30, kUnknownCpu}) {
      lookup.client_cpu = cpu;
      std::vector<uint8_t> body;
      Encode(lookup, &body);
      EXPECT_TRUE(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kLookupShared), body)).ok())
          << cpu;
    }
    ::close(*fd);
    EXPECT_EQ(service_->stats().client_cpu_moves, moves);
  }

  engines_.clear();
  ASSERT_TRUE(service_->Stop().ok());
  ServiceOptions o;
  o.follow_client_cpu = false;
  StartService(o);
  Engine& c = Client();
  auto src2 = Fixture(c);
  ASSERT_TRUE(StoreAll(c, *src2, tokens, kSeed, 1).ok());
  ExpectANewClientRestores(tokens, "r2");
  EXPECT_EQ(service_->stats().client_cpu_moves, 0u);
}

// The service reads shared queries where the client wrote them. A client that rewrites its
// buffer while the service walks the index with it gets answers (hits, misses or errors) for
// its own requests only: the service keeps serving it and everyone else, bit for bit.
TEST_F(ServiceTest, AClientRewritingItsQueryBufferMidWalkHurtsNobody) {
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());

  const uint64_t bytes = tokens.size() * sizeof(int32_t);
  const uint64_t kBytes = (bytes + 4095) / 4096 * 4096;
  auto fd = RawHello(socket_);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const int buffer = QueryMemfd(kBytes, true);
  ASSERT_GE(buffer, 0);
  void* map = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, buffer, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* shared = static_cast<int32_t*>(map);
  std::memcpy(shared, tokens.data(), bytes);
  std::vector<uint8_t> attach;
  Encode(AttachQueryBufferRequest{kBytes}, &attach);
  ASSERT_TRUE(SendWithFd(*fd, MessageType::kAttachQueryBuffer, attach, buffer).ok());
  ::close(buffer);

  // The writer flips tokens of the stored prefix back and forth while the lookups walk it.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint64_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t at = (i * 7919) % tokens.size();
      volatile int32_t* slot = shared + at;
      *slot = (i & 1) != 0 ? tokens[at] : tokens[at] ^ 0x5a5a;
      ++i;
    }
  });
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    LookupSharedRequest lookup;
    lookup.envelope.request_id = "rewritten-" + std::to_string(i);
    lookup.granularity_tokens = kGranularity;
    lookup.token_count = static_cast<uint32_t>(tokens.size());
    std::vector<uint8_t> body;
    Encode(lookup, &body);
    const Status reply =
        SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kLookupShared), body));
    ASSERT_NE(reply.code(), StatusCode::kUnavailable) << "the service hung up at lookup " << i;
    ++answered;
  }
  stop.store(true);
  writer.join();
  EXPECT_EQ(answered, 300);
  ::munmap(map, kBytes);
  ::close(*fd);

  // Everyone else is served bit for bit.
  ExpectANewClientRestores(tokens, "after-rewrites");
}

TEST_F(ServiceTest, IdsOfOtherSessionsAreRefusedAndTheConnectionStays) {
  auto fd = RawHello(socket_);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  std::vector<uint8_t> body;
  Encode(IdMessage{12345}, &body);
  EXPECT_EQ(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kRelease), body)).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kAbort), body)).code(),
            StatusCode::kNotFound);
  PublishRequest p;
  p.reservation_id = 1;
  body.clear();
  Encode(p, &body);
  EXPECT_EQ(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kPublish), body)).code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(SendRaw(*fd, Frame(static_cast<uint16_t>(MessageType::kStats), {})).ok());
  ::close(*fd);
}

// A session that holds a claim and then loses its connection (here: a malformed frame) keeps
// its leases until its process exits (this one does not), but stops counting as a reader at
// once: it can read nothing more, and would shrink every other engine's share for as long as
// its process lives.
TEST_F(ServiceTest, AClosedSessionHoldingClaimsIsNoReader) {
  Engine& a = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  auto fd = RawHello(socket_);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const auto call = [&](MessageType type, const std::vector<uint8_t>& body,
                        std::vector<uint8_t>* payload) -> Status {
    RANGEKV_RETURN_IF_ERROR(SendFrame(*fd, static_cast<uint16_t>(type), body));
    RANGEKV_ASSIGN_OR_RETURN(ReceivedFrame f, ReceiveFrame(*fd));
    Status remote;
    std::span<const uint8_t> rest;
    RANGEKV_RETURN_IF_ERROR(DecodeStatus(f.body, &remote, &rest));
    payload->assign(rest.begin(), rest.end());
    return remote;
  };
  LookupRequest lookup;
  lookup.envelope.request_id = "raw";
  lookup.granularity_tokens = kGranularity;
  lookup.tokens = tokens;
  std::vector<uint8_t> body, payload;
  Encode(lookup, &body);
  ASSERT_TRUE(call(MessageType::kLookup, body, &payload).ok());
  LookupReply hit;
  ASSERT_TRUE(Decode(payload, &hit).ok());
  ASSERT_FALSE(hit.ticket.empty());
  ClaimRequest claim;
  claim.ticket = hit.ticket;
  claim.envelope = lookup.envelope;
  claim.endpoint_tokens = (tokens.size() - 1) / kGranularity * kGranularity;
  claim.tokens = tokens;
  body.clear();
  Encode(claim, &body);
  const Status claimed = call(MessageType::kClaim, body, &payload);
  ASSERT_TRUE(claimed.ok()) << claimed.ToString();
  ClaimReply held;
  ASSERT_TRUE(Decode(payload, &held).ok());
  EXPECT_EQ(held.readers, 1u);
  EXPECT_EQ(service_->stats().readers, 1u);
  const uint8_t junk[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(SendRaw(*fd, junk).code(), StatusCode::kCorruption);
  EXPECT_TRUE(Closed(*fd));
  ::close(*fd);
  // Well inside the reader window (1 s): only the closed connection can have ended it.
  EXPECT_TRUE(Eventually([&] { return service_->stats().readers == 0; }, 1));
  // Its leftovers wait for this process to exit (or for Stop at the end of the test).
  EXPECT_TRUE(Eventually([&] { return service_->stats().sessions_reclaimed == 1; }, 5));
}

TEST_F(ServiceTest, TicketsOfAnotherClientCannotBeClaimed) {
  Engine& a = Client();
  Engine& b = Client();
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  auto lookup = a.Lookup(Envelope("victim"), tokens, kGranularity);
  ASSERT_TRUE(lookup.ok());
  ASSERT_GT(lookup->hit_tokens, 0u);
  RestoreRequest rr;
  rr.ticket = lookup->ticket;
  rr.envelope = Envelope("victim");  // even the same request id: another session's ticket
  rr.tokens = tokens;
  rr.endpoint_tokens = lookup->hit_tokens;
  auto stolen = b.StartRestore(rr);
  ASSERT_FALSE(stolen.ok());
  EXPECT_EQ(stolen.status().code(), StatusCode::kForeignOwner) << stolen.status().ToString();
  std::string forged = lookup->ticket;
  forged[forged.size() / 2] ^= 0x40;
  rr.ticket = forged;
  auto tampered = a.StartRestore(rr);
  ASSERT_FALSE(tampered.ok());
  EXPECT_EQ(tampered.status().code(), StatusCode::kCorruptTicket) << tampered.status().ToString();
  // The owner's claim still works.
  rr.ticket = lookup->ticket;
  auto mine = a.StartRestore(rr);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  mine->Cancel();
  (void)mine->Finish();
}

TEST_F(ServiceTest, TenantsAreKeptApartAndQuotasBound) {
  Engine& a = Client("team-a");
  Engine& b = Client("team-b");
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  auto other = b.Lookup(Envelope("x"), tokens, kGranularity);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->hit_tokens, 0u);
  auto bad = Engine::Open(ClientOptions(socket_, "../escape"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);

  engines_.clear();
  ASSERT_TRUE(service_->Stop().ok());
  ServiceOptions o;
  o.quotas["tiny"] = 1;
  StartService(o);
  auto tiny = Engine::Open(ClientOptions(socket_, "tiny"));
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), StatusCode::kResourceExhausted) << tiny.status().ToString();
}

// Each namespace store keeps the identity record its client sent at Hello (identity.json beside
// its pack file, for `rangekv inspect`); a client whose identity differs (another semantic
// config, e.g. rewritten weights) gets a store of its own, where the other's prefix misses.
TEST_F(ServiceTest, AnotherIdentityIsAnotherStoreWithItsOwnRecord) {
  EngineOptions oa = ClientOptions(socket_);
  oa.model.semantic_config = R"({"weights":"a"})";
  EngineOptions ob = oa;
  ob.model.semantic_config = R"({"weights":"b"})";
  for (const EngineOptions& o : {oa, ob}) {
    auto e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engines_.push_back(std::move(e).value());
  }
  Engine& a = *engines_[0];
  Engine& b = *engines_[1];
  ASSERT_FALSE(a.namespace_id() == b.namespace_id());
  auto src = Fixture(a);
  const auto tokens = ClientTokens(0);
  ASSERT_TRUE(StoreAll(a, *src, tokens, kSeed, 1).ok());
  auto other = b.Lookup(Envelope("other"), tokens, kGranularity);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->hit_tokens, 0u);
  for (const auto& [engine, model] : {std::pair{&a, oa.model}, std::pair{&b, ob.model}}) {
    const persist::StorePaths paths(dir_.Join("svc") + "/default/" +
                                    engine->namespace_id().ToHex());
    EXPECT_EQ(persist::ReadIdentityRecord(DefaultEnv(), paths),
              persist::RenderIdentityRecord(model, engine->namespace_id()));
  }
}

TEST_F(ServiceTest, PeersWithAnotherUidAreRefused) {
  ASSERT_TRUE(service_->Stop().ok());
  ServiceOptions o;
  o.peer_uid = ::geteuid() + 1;
  StartService(o);
  auto e = Engine::Open(ClientOptions(socket_));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnsafePermissions) << e.status().ToString();
  EXPECT_EQ(service_->stats().sessions_refused, 1u);
}

TEST_F(ServiceTest, SocketIsOwnerOnlyAndASecondServiceIsRefused) {
  struct stat st {};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ServiceOptions o;
  o.root = dir_.Join("svc2");
  o.socket_path = socket_;
  auto second = StoreService::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace rangekv::service
