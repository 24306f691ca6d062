// Concurrency of the transfer engine on a jittered HostDevice (every stream operation starts
// after a seeded random delay, widening the windows in which a missing wait or an early bank
// reuse would corrupt bytes): concurrent restores of one prefix, duplicate stores joining one
// reservation, and stores and restores of divergent prefixes from several threads. Every
// restore is verified bit for bit. Run under ThreadSanitizer by scripts/test.sh (label tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "device/host_device.h"
#include "engine/engine_test_util.h"
#include "rangekv/engine.h"
#include "testing/engine_testing.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using engine_testing::Envelope;
using engine_testing::KvFixture;
using engine_testing::RandomSlots;
using engine_testing::RandomTokens;
using engine_testing::RestoreAndVerify;
using engine_testing::SmallModel;
using engine_testing::SmallOptions;
using engine_testing::StoreAll;
using engine_testing::WaitMode;

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
    o.max_inflight_restores = kThreads;
    o.max_inflight_stores = kThreads;
    engine_internal::EngineInternalConfig config;
    config.device = device_.get();
    auto e = engine_internal::OpenEngineForTesting(o, config);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      auto read = engine_internal::ReadPoolState(*engine_);
      EXPECT_EQ(read.owned_banks, 0u);
      EXPECT_EQ(read.quarantined_banks, 0u);
      EXPECT_EQ(read.free_slots, static_cast<uint32_t>(kThreads));
      auto store = engine_internal::StorePoolState(*engine_);
      EXPECT_EQ(store.owned_banks, 0u);
      EXPECT_EQ(store.free_slots, static_cast<uint32_t>(kThreads));
      for (const SlotInfo& s : engine_internal::EngineDirectory(*engine_).Slots()) {
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

}  // namespace
}  // namespace rangekv
