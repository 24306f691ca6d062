// service_client_driver: one process of service_test's multi-process cases. Modes:
//   serve ROOT SOCKET DURABILITY       a StoreService until SIGTERM (then a clean Stop)
//   store SOCKET CLIENT                stores client CLIENT's prefix (shared head + own tail)
//   restore SOCKET CLIENTS             restores every client's prefix, bit for bit
//   hold SOCKET                        starts a store (one layer produced) and a restore
//                                      (claimed, unfinished), prints HOLDING, sleeps forever
//   open DIR                           opens an embedded engine on DIR, prints OPEN, sleeps
//   gate SOCKET N [hangup]             attaches the service's read gate on a raw session, takes
//                                      N of its slots (then, with hangup, closes the session
//                                      without Goodbye), prints GATED, sleeps forever
// Exit 0 on success; otherwise prints why. Prefix data: canonical rows of seed 11, so any
// process can verify what any other stored.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "service/service_test_shapes.h"
#include "service/store_service.h"
#include "service_proto/read_gate.h"
#include "testing/engine_fixture.h"

using namespace rangekv;
using namespace rangekv::testing;

namespace {

int Fail(const std::string& why) {
  std::fprintf(stderr, "driver: %s\n", why.c_str());
  return 1;
}

std::unique_ptr<Engine> OpenClient(const std::string& socket) {
  EngineOptions o = testing::ClientOptions(socket);
  auto e = Engine::Open(o);
  if (!e.ok()) {
    std::fprintf(stderr, "driver: open: %s\n", e.status().ToString().c_str());
    return nullptr;
  }
  return std::move(e).value();
}

int Serve(const std::string& root, const std::string& socket, const std::string& durability) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  service::ServiceOptions o;
  o.root = root;
  o.socket_path = socket;
  o.restart_fence_ms = 0;
  o.journal.mode = durability == "every_publish" ? persist::DurabilityMode::kEveryPublish
                                                 : persist::DurabilityMode::kPeriodic;
  auto s = service::StoreService::Start(o);
  if (!s.ok()) return Fail("serve: " + s.status().ToString());
  std::printf("LISTENING\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  Status stopped = (*s)->Stop();
  return stopped.ok() ? 0 : Fail("stop: " + stopped.ToString());
}

int Store(const std::string& socket, int client) {
  auto engine = OpenClient(socket);
  if (engine == nullptr) return 1;
  auto fixture = KvFixture::Make(*engine, KvCacheLayout::kFlashAttnNhd, 64);
  if (!fixture.ok()) return Fail(fixture.status().ToString());
  const auto tokens = testing::ClientTokens(client);
  auto stored = StoreAll(*engine, **fixture, tokens, testing::kSeed, 100 + client);
  if (!stored.ok()) return Fail(stored.status().ToString());
  if (!stored->outcome.status.ok()) return Fail(stored->outcome.status.ToString());
  std::printf("stored client=%d disposition=%d writes=%llu\n", client,
              static_cast<int>(stored->outcome.disposition),
              static_cast<unsigned long long>(stored->work.native_writes));
  Status closed = engine->Close();
  return closed.ok() ? 0 : Fail(closed.ToString());
}

int Restore(const std::string& socket, int clients) {
  auto engine = OpenClient(socket);
  if (engine == nullptr) return 1;
  auto fixture = KvFixture::Make(*engine, KvCacheLayout::kFlashAttnNhd, 64);
  if (!fixture.ok()) return Fail(fixture.status().ToString());
  for (int c = 0; c < clients; ++c) {
    const auto tokens = testing::ClientTokens(c);
    auto r = RestoreAndVerify(*engine, **fixture, testing::Envelope("restore-" + std::to_string(c)),
                              tokens, testing::kGranularity, testing::kSeed, 7 + c);
    if (!r.ok()) return Fail(r.status().ToString());
    const uint64_t want = (tokens.size() - 1) / testing::kGranularity * testing::kGranularity;
    if (r->lookup.hit_tokens != want) {
      return Fail("client " + std::to_string(c) + ": hit " + std::to_string(r->lookup.hit_tokens) +
                  ", want " + std::to_string(want));
    }
    if (!r->outcome.status.ok()) return Fail(r->outcome.status.ToString());
    if (r->mismatches != 0) return Fail("mismatching rows: " + std::to_string(r->mismatches));
    std::printf("restored client=%d tokens=%llu reads=%llu\n", c,
                static_cast<unsigned long long>(r->outcome.delivered_tokens),
                static_cast<unsigned long long>(r->outcome.work.native_reads));
  }
  Status closed = engine->Close();
  return closed.ok() ? 0 : Fail(closed.ToString());
}

int Hold(const std::string& socket) {
  auto engine = OpenClient(socket);
  if (engine == nullptr) return 1;
  auto fixture = KvFixture::Make(*engine, KvCacheLayout::kFlashAttnNhd, 64);
  if (!fixture.ok()) return Fail(fixture.status().ToString());
  // A restore of client 0's prefix, claimed and bound, never finished.
  const auto tokens = testing::ClientTokens(0);
  auto lookup = engine->Lookup(testing::Envelope("held-restore"), tokens, testing::kGranularity);
  if (!lookup.ok() || lookup->hit_tokens == 0) return Fail("hold: no hit");
  RestoreRequest rr;
  rr.ticket = lookup->ticket;
  rr.envelope = testing::Envelope("held-restore");
  rr.tokens = tokens;
  rr.endpoint_tokens = lookup->hit_tokens;
  auto restore = engine->StartRestore(rr);
  if (!restore.ok()) return Fail("hold: " + restore.status().ToString());
  // A store of a new prefix with only layer 0 produced: reserved, never published.
  const auto held = testing::HeldTokens();
  const auto slots = (*fixture)->Slots(held.size(), 3);
  Status filled = (*fixture)->Fill(held, 0, slots, testing::kSeed);
  if (!filled.ok()) return Fail(filled.ToString());
  StoreRequest sr;
  sr.envelope = testing::Envelope("held-store");
  sr.tokens = held;
  sr.kv = &(*fixture)->kv();
  sr.slot_mapping = slots;
  auto store = engine->BeginStore(sr);
  if (!store.ok()) return Fail("hold: " + store.status().ToString());
  Status produced = store->LayerProduced(0);
  if (!produced.ok()) return Fail(produced.ToString());
  std::printf("HOLDING\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

int Gate(const std::string& socket, int slots, bool hangup) {
  auto fd = testing::RawHello(socket);
  if (!fd.ok()) return Fail("gate: " + fd.status().ToString());
  Status sent =
      service::SendFrame(*fd, static_cast<uint16_t>(service::MessageType::kAttachReadGate), {});
  if (!sent.ok()) return Fail("gate: " + sent.ToString());
  auto frame = service::ReceiveFrame(*fd);
  if (!frame.ok()) return Fail("gate: " + frame.status().ToString());
  Status remote;
  std::span<const uint8_t> rest;
  service::AttachReadGateReply reply;
  Status decoded = service::DecodeStatus(frame->body, &remote, &rest);
  if (decoded.ok() && remote.ok()) decoded = service::Decode(rest, &reply);
  if (!decoded.ok() || !remote.ok() || frame->passed_fd < 0) return Fail("gate: refused");
  auto gate = service::SharedReadGate::Attach(frame->passed_fd, reply.holder, reply.slots);
  if (!gate.ok()) return Fail("gate: " + gate.status().ToString());
  for (int i = 0; i < slots; ++i) {
    if (!(*gate)->Enter()) return Fail("gate: no slot");
  }
  if (hangup) ::close(*fd);  // the process lives on, its session is gone
  std::printf("GATED\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

// Holds an embedded engine open on DIR (misuse_test: a second opener must fail, naming this
// process; after SIGKILL the kernel releases the store's lock).
int Open(const std::string& dir) {
  EngineOptions o = testing::SmallOptions(dir, testing::Model(), testing::kW, testing::kPacks);
  auto e = Engine::Open(o);
  if (!e.ok()) return Fail("open: " + e.status().ToString());
  std::printf("OPEN\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

int main(int argc, char** argv) {
  if (argc < 3) return Fail("usage: see the file comment");
  const std::string mode = argv[1];
  if (mode == "serve" && argc == 5) return Serve(argv[2], argv[3], argv[4]);
  if (mode == "store" && argc == 4) return Store(argv[2], std::atoi(argv[3]));
  if (mode == "restore" && argc == 4) return Restore(argv[2], std::atoi(argv[3]));
  if (mode == "hold" && argc == 3) return Hold(argv[2]);
  if (mode == "open" && argc == 3) return Open(argv[2]);
  if (mode == "gate" && (argc == 4 || argc == 5)) {
    return Gate(argv[2], std::atoi(argv[3]), argc == 5 && std::string(argv[4]) == "hangup");
  }
  return Fail("bad arguments for mode " + mode);
}
