// Concurrency of the transfer engine on a jittered HostDevice (every stream operation starts
// after a seeded random delay, widening the windows in which a missing wait or an early bank
// reuse would corrupt bytes): concurrent restores of one prefix, duplicate stores joining one
// reservation, stores and restores of divergent prefixes from several threads, and many
// requests of every kind at once (with a jittered file seam, a read fault and a held prefetch).
// Every restore is verified bit for bit. Run under ThreadSanitizer by scripts/test.sh (label tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "device/host_device.h"
#include "rangekv/engine.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/fault_env.h"
#include "testing/gauged_file.h"
#include "testing/jitter_env.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::Envelope;
using testing::KvFixture;
using testing::RandomSlots;
using testing::RandomTokens;
using testing::RestoreAndVerify;
using testing::SmallModel;
using testing::SmallOptions;
using testing::StoreAll;
using testing::WaitMode;

constexpr uint64_t kW = 8192;  // 4 layers x 128-byte rows: T = 64
constexpr uint64_t kT = 64;
constexpr int kThreads = 4;

class EngineConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostDeviceOptions jitter;
    jitter.max_op_delay_us = 20;
    jitter.jitter_seed = 42;
    auto d = CreateHostDevice(jitter);
    ASSERT_TRUE(d.ok());
    device_ = std::move(d).value();
    EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW, 32);
    o.tuning.max_inflight_restores = kThreads;
    o.tuning.max_inflight_stores = kThreads;
    engine_internal::EngineInternalConfig config;
    config.device = device_.get();
    auto e = testing::OpenEngineForTesting(o, config);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      auto read = testing::ReadPoolState(*engine_);
      EXPECT_EQ(read.owned_banks, 0u);
      EXPECT_EQ(read.quarantined_banks, 0u);
      EXPECT_EQ(read.free_slots, static_cast<uint32_t>(kThreads));
      auto store = testing::StorePoolState(*engine_);
      EXPECT_EQ(store.owned_banks, 0u);
      EXPECT_EQ(store.free_slots, static_cast<uint32_t>(kThreads));
      for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
        EXPECT_EQ(s.leases, 0u);
      }
    }
    fixtures_.clear();
    engine_.reset();
  }
  KvFixture& NewFixture() {
    auto f = KvFixture::Make(*engine_, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(f.ok());
    fixtures_.push_back(std::move(f).value());
    return *fixtures_.back();
  }

  testing::TempDir dir_;
  std::unique_ptr<Device> device_;  // outlives the engine
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<KvFixture>> fixtures_;
};

TEST_F(EngineConcurrencyTest, ConcurrentRestoresOfTheSamePrefixAreAllBitExact) {
  const auto tokens = RandomTokens(5 * kT + 3, 1);
  ASSERT_TRUE(StoreAll(*engine_, NewFixture(), tokens, 5, 1)->outcome.status.ok());
  std::vector<KvFixture*> dst;
  for (int t = 0; t < kThreads; ++t) dst.push_back(&NewFixture());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) {
        const WaitMode mode = static_cast<WaitMode>((t + k) % 3);
        auto r = RestoreAndVerify(*engine_, *dst[t],
                                  Envelope("r" + std::to_string(t) + "-" + std::to_string(k)),
                                  tokens, 1, 5, 100 * t + k, mode);
        if (!r.ok() || !r->outcome.status.ok() || r->mismatches != 0 ||
            r->lookup.hit_tokens != 5 * kT + 2) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  const EngineStats s = engine_->GetStats();
  EXPECT_EQ(s.restores_finished, 12u);
  EXPECT_EQ(s.scatter_launches, 12u * 6 * 4);
  EXPECT_EQ(s.quarantines, 0u);
}

// The read share (EngineTuning::share_reads; set by a store service's replies) caps the
// stripe reads in flight at ceil(read_workers / readers); restores stay bit exact under any cap.
TEST(EngineReadShareTest, ReadShareCapsStripeReadsInFlight) {
  testing::TempDir dir;
  testing::ReadGauge gauge;
  gauge.delay = std::chrono::microseconds(2000);
  testing::GaugingEnv env(DefaultEnv(), "packs.rkv", &gauge);
  EngineOptions o = SmallOptions(dir.path() + "/store", SmallModel(4, 2, 16), kW, 32);
  o.env = &env;
  o.tuning.read_workers = 4;
  o.tuning.read_banks = 8;
  o.tuning.prefetch_banks = 0;
  o.tuning.read_io_threads = 4;
  o.io_engine = IoEngineSelection::kPosix;
  o.tuning.io_split_bytes = kIoSplitOff;  // one native read per stripe read
  auto e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Engine& engine = **e;
  auto src = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  ASSERT_TRUE(src.ok());
  const auto tokens = RandomTokens(8 * kT + 1, 77);
  ASSERT_TRUE(StoreAll(engine, **src, tokens, 3, 1)->outcome.status.ok());
  int request = 0;
  const auto restore = [&] {
    gauge.Reset();
    auto dst = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(dst.ok());
    auto r =
        RestoreAndVerify(engine, **dst, Envelope("r" + std::to_string(++request)), tokens, 1, 3, 2);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_EQ(r->mismatches, 0u);
  };
  restore();  // full share: 4 workers over 32 stripe reads of 2 ms overlap
  EXPECT_GE(gauge.max.load(), 2u);
  EXPECT_EQ(testing::SetReadShareForTesting(engine, 4), 1u);
  restore();
  EXPECT_EQ(gauge.max.load(), 1u);
  EXPECT_EQ(testing::SetReadShareForTesting(engine, 3), 2u);
  restore();
  EXPECT_LE(gauge.max.load(), 2u);
  EXPECT_EQ(testing::SetReadShareForTesting(engine, 1), 4u);
  restore();
  EXPECT_GE(gauge.max.load(), 2u);
  EXPECT_TRUE(engine.Close().ok());
}

TEST_F(EngineConcurrencyTest, DuplicateStoreJoinsTheReservationAndDoesNoIo) {
  KvFixture& src = NewFixture();
  const auto tokens = RandomTokens(2 * kT + 7, 2);
  const auto slots = RandomSlots(tokens.size(), src.num_slots(), 3);
  ASSERT_TRUE(src.Fill(tokens, 0, slots, 9).ok());
  StoreRequest req;
  req.envelope = Envelope("a");
  req.tokens = tokens;
  req.kv = &src.kv();
  req.slot_mapping = slots;
  auto first = engine_->BeginStore(req);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->disposition(), StoreDisposition::kStoring);
  req.envelope = Envelope("b");
  auto second = engine_->BeginStore(req);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->disposition(), StoreDisposition::kJoined);
  EXPECT_TRUE(second->extracted());  // it holds none of the source slots
  EXPECT_TRUE(second->LayerProduced(0).ok());
  StoreOutcome joined = second->Finish();
  EXPECT_TRUE(joined.status.ok());
  EXPECT_EQ(joined.work.native_writes, 0u);
  EXPECT_EQ(joined.work.gather_launches, 0u);
  for (uint32_t l = 0; l < 4; ++l) ASSERT_TRUE(first->LayerProduced(l).ok());
  StoreOutcome stored = first->Finish();
  ASSERT_TRUE(stored.status.ok());
  EXPECT_TRUE(stored.visible);
  const EngineStats s = engine_->GetStats();
  EXPECT_EQ(s.stores_joined, 1u);
  EXPECT_EQ(s.native_writes, 3u * 4);
  auto r = RestoreAndVerify(*engine_, NewFixture(), Envelope("r"), tokens, 1, 9, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineConcurrencyTest, ConcurrentDuplicateStoresWriteOnce) {
  const auto tokens = RandomTokens(3 * kT + 1, 3);
  std::vector<KvFixture*> src;
  for (int t = 0; t < kThreads; ++t) src.push_back(&NewFixture());
  std::atomic<int> storing{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto r = StoreAll(*engine_, *src[t], tokens, 17, t + 1);
      if (!r.ok() || !r->outcome.status.ok()) {
        ++failed;
      } else if (r->outcome.disposition == StoreDisposition::kStoring) {
        ++storing;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(storing.load(), 1);
  EXPECT_EQ(engine_->GetStats().native_writes, 4u * 4);  // one store's 4 packs x 4 layers
  auto r = RestoreAndVerify(*engine_, NewFixture(), Envelope("r"), tokens, 1, 17, 9);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lookup.hit_tokens, 3 * kT);
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineConcurrencyTest, DivergentPrefixesStoredAndRestoredFromManyThreads) {
  // Every thread's prompt shares a 1.5-pack head, then diverges; tails end mid-pack.
  const auto head = RandomTokens(kT + kT / 2, 4);
  std::vector<std::vector<int32_t>> prompts;
  for (int t = 0; t < kThreads; ++t) {
    auto p = head;
    const auto tail = RandomTokens(kT + 10 * t + 5, 50 + t);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  std::vector<KvFixture*> src, dst;
  for (int t = 0; t < kThreads; ++t) {
    src.push_back(&NewFixture());
    dst.push_back(&NewFixture());
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // The shared head has the same canonical bytes in every prompt (same seed, positions and
      // token ids), so whichever thread stores it first, every restore must match.
      auto stored = StoreAll(*engine_, *src[t], prompts[t], 23, 10 + t);
      if (!stored.ok() || !stored->outcome.status.ok()) ++bad;
      for (int k = 0; k < 2; ++k) {
        auto r = RestoreAndVerify(*engine_, *dst[t],
                                  Envelope("d" + std::to_string(t) + "-" + std::to_string(k)),
                                  prompts[t], 1, 23, 20 + t + k, static_cast<WaitMode>(k));
        if (!r.ok() || !r->outcome.status.ok() || r->mismatches != 0 ||
            r->lookup.hit_tokens != prompts[t].size() - 1) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// "Many requests at once": restores of one shared prefix and of distinct prefixes, stores of new
// prompts, a restore whose pack has a bad stripe, and a lookup-time prefetch that is never
// claimed (it keeps its landed banks until every other request finished), all in flight
// together on a jittered device and a jittered file seam. No request may wait forever (a
// starved or deadlocked admission hangs the test); every delivered row is bit-exact; the
// injected read error fails exactly its own request's tokens of that pack.
class EngineManyRequestsTest : public ::testing::Test {
 protected:
  static constexpr int kShared = 2, kOwn = 2, kStorers = 2, kRounds = 3;
  static constexpr int kSlots = 2 * (kShared + kOwn + kStorers + 2);

  void SetUp() override {
    HostDeviceOptions jitter;
    jitter.max_op_delay_us = 20;
    jitter.jitter_seed = 7;
    auto d = CreateHostDevice(jitter);
    ASSERT_TRUE(d.ok());
    device_ = std::move(d).value();
    jitter_env_ = std::make_unique<testing::JitterEnv>(DefaultEnv(), 11, 200);
    faults_ = std::make_unique<rangekv::testing::FaultInjectingEnv>(jitter_env_.get());
    EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW, 64);
    o.env = faults_.get();
    o.tuning.max_inflight_restores = kSlots;
    o.tuning.max_inflight_stores = kSlots;
    engine_internal::EngineInternalConfig config;
    config.device = device_.get();
    auto e = testing::OpenEngineForTesting(o, config);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override {
    if (engine_ == nullptr) return;
    auto read = testing::ReadPoolState(*engine_);
    EXPECT_EQ(read.owned_banks, 0u);
    EXPECT_EQ(read.quarantined_banks, 0u);
    EXPECT_EQ(read.active_jobs, 0u);
    EXPECT_EQ(read.free_slots, static_cast<uint32_t>(kSlots));
    auto store = testing::StorePoolState(*engine_);
    EXPECT_EQ(store.owned_banks, 0u);
    EXPECT_EQ(store.active_jobs, 0u);
    EXPECT_EQ(store.free_slots, static_cast<uint32_t>(kSlots));
    for (const SlotInfo& slot : testing::EngineDirectory(*engine_).Slots()) {
      EXPECT_EQ(slot.leases, 0u);
      EXPECT_NE(slot.state, SlotState::kReserved);
    }
    fixtures_.clear();
    engine_.reset();
  }
  KvFixture& NewFixture() {
    auto f = KvFixture::Make(*engine_, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(f.ok());
    fixtures_.push_back(std::move(f).value());
    return *fixtures_.back();
  }
  // File offset of layer `layer` of the pack holding path token `token`. REQUIRES: the store
  // holds one prompt only.
  uint64_t StripeOffset(uint64_t token, uint32_t layer) {
    auto& dir = testing::EngineDirectory(*engine_);
    for (const StoredPack& p : dir.ListPacks(engine_->namespace_id())) {
      if (p.record.path_token_begin <= token && token < p.record.path_token_end()) {
        return testing::EngineStore(*engine_).layout().Address(p.record.pack_slot, layer, 0);
      }
    }
    ADD_FAILURE() << "no pack holds token " << token;
    return 0;
  }

  testing::TempDir dir_;
  std::unique_ptr<Device> device_;  // outlives the engine
  std::unique_ptr<testing::JitterEnv> jitter_env_;
  std::unique_ptr<rangekv::testing::FaultInjectingEnv> faults_;
  std::unique_ptr<Engine> engine_;
  uint64_t rule_offset_ = 0;
  std::vector<std::unique_ptr<KvFixture>> fixtures_;
};

TEST_F(EngineManyRequestsTest, ConcurrentRestoresAndStoresAreBitExactFairAndIsolated) {
  constexpr uint64_t kSeed = 31;
  const auto shared = RandomTokens(3 * kT + 7, 100);
  std::vector<std::vector<int32_t>> own;
  for (int i = 0; i < kOwn; ++i) own.push_back(RandomTokens(2 * kT + 9 * i + 3, 200 + i));
  const auto faulty = RandomTokens(3 * kT + 1, 300);
  const auto held = RandomTokens(4 * kT + 1, 400);  // prefetched, never claimed
  auto& setup = NewFixture();
  for (const std::vector<int32_t>* p : std::initializer_list<const std::vector<int32_t>*>{
           &faulty, &shared, &own[0], &own[1], &held}) {
    auto r = StoreAll(*engine_, setup, *p, kSeed, p->size());
    ASSERT_TRUE(r.ok() && r->outcome.status.ok());
    // EIO on layer 1 of the faulty prompt's second pack: only its tokens [kT, 2kT) may fail.
    if (p == &faulty) rule_offset_ = StripeOffset(kT, 1);
  }
  rangekv::testing::FaultRule rule;
  rule.path = dir_.path() + "/store/packs.rkv";
  rule.op = rangekv::testing::FaultOp::kRead;
  rule.offset = rule_offset_;
  rule.length = kW;
  faults_->AddRule(rule);

  std::vector<std::vector<int32_t>> fresh;  // stored while everything else runs
  for (int i = 0; i < kStorers * kRounds; ++i)
    fresh.push_back(RandomTokens(2 * kT + 5 * i, 500 + i));

  // The prefetch holds landed banks (up to the prefetch budget) until the others are done.
  const RequestEnvelope held_env = Envelope("held");
  auto held_lookup = engine_->Lookup(held_env, held, 1);
  ASSERT_TRUE(held_lookup.ok());
  ASSERT_EQ(held_lookup->hit_tokens, 4 * kT);

  std::atomic<int> bad{0};
  std::vector<std::string> errors(kShared + kOwn + kStorers + 1);
  auto check = [&](int who, bool ok, const std::string& what) {
    if (ok) return;
    ++bad;
    errors[who] += what + "; ";
  };
  std::vector<std::thread> threads;
  int who = 0;
  for (int i = 0; i < kShared; ++i, ++who) {
    KvFixture* dst = &NewFixture();
    threads.emplace_back([&, dst, who, i] {
      for (int k = 0; k < kRounds; ++k) {
        auto r =
            RestoreAndVerify(*engine_, *dst, Envelope("s" + std::to_string(i * 10 + k)), shared, 1,
                             kSeed, 1000 + who * 10 + k, static_cast<WaitMode>((i + k) % 3));
        check(who,
              r.ok() && r->outcome.status.ok() && r->mismatches == 0 &&
                  r->lookup.hit_tokens == shared.size() - 1,
              "shared " + (r.ok() ? r->outcome.status.ToString() : r.status().ToString()));
      }
    });
  }
  for (int i = 0; i < kOwn; ++i, ++who) {
    KvFixture* dst = &NewFixture();
    threads.emplace_back([&, dst, who, i] {
      for (int k = 0; k < kRounds; ++k) {
        auto r =
            RestoreAndVerify(*engine_, *dst, Envelope("o" + std::to_string(i * 10 + k)), own[i], 1,
                             kSeed, 2000 + who * 10 + k, static_cast<WaitMode>(k % 3));
        check(who,
              r.ok() && r->outcome.status.ok() && r->mismatches == 0 &&
                  r->lookup.hit_tokens == own[i].size() - 1,
              "own " + (r.ok() ? r->outcome.status.ToString() : r.status().ToString()));
      }
    });
  }
  for (int i = 0; i < kStorers; ++i, ++who) {
    KvFixture* src = &NewFixture();
    KvFixture* dst = &NewFixture();
    threads.emplace_back([&, src, dst, who, i] {
      for (int k = 0; k < kRounds; ++k) {
        const auto& p = fresh[i * kRounds + k];
        auto stored = StoreAll(*engine_, *src, p, kSeed, 3000 + who * 10 + k,
                               k % 2 == 0 ? StoreWait::kUntilVisible : StoreWait::kDetach);
        check(who, stored.ok() && stored->outcome.status.ok(), "store");
        if (k % 2 != 0) continue;  // detached: visible later, restored by nobody
        auto r = RestoreAndVerify(*engine_, *dst, Envelope("n" + std::to_string(i * 10 + k)), p, 1,
                                  kSeed, 4000 + who * 10 + k);
        check(who,
              r.ok() && r->outcome.status.ok() && r->mismatches == 0 &&
                  r->lookup.hit_tokens == p.size() - 1,
              "stored then restored");
      }
    });
  }
  {
    KvFixture* dst = &NewFixture();
    const int me = who++;
    threads.emplace_back([&, dst, me] {
      for (int k = 0; k < kRounds; ++k) {
        auto r = RestoreAndVerify(*engine_, *dst, Envelope("f" + std::to_string(k)), faulty, 1,
                                  kSeed, 5000 + k, static_cast<WaitMode>(k % 3));
        check(me,
              r.ok() && r->outcome.status.code() == StatusCode::kIoError &&
                  r->outcome.failed.size() == 1 &&
                  r->outcome.failed[0] == TokenInterval{kT, 2 * kT} && r->mismatches == 0 &&
                  r->poisoned_rows == 0,
              "faulty " + (r.ok() ? r->outcome.status.ToString() : r.status().ToString()));
      }
    });
  }
  for (auto& th : threads) th.join();
  engine_->ReleaseRequest(held_env);
  for (const std::string& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_EQ(bad.load(), 0);
  // Drain the detached stores' write debt before TearDown checks the pools.
  while (testing::StorePoolState(*engine_).active_jobs != 0 ||
         testing::ReadPoolState(*engine_).active_jobs != 0) {
    std::this_thread::yield();
  }
}

}  // namespace
}  // namespace rangekv
