// Concurrency of the persistence layer's thread-safe parts (run under ThreadSanitizer in CI):
// DigestTable recorded and verified from many threads, and MarkDirty raced by many writers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "persist/payload_digests.h"
#include "persist/store_layout.h"
#include "testing/temp_dir.h"
#include "testing/tiny_store.h"

namespace rangekv::persist {
namespace {

TEST(PersistConcurrencyTest, DigestTableRecordAndVerifyFromManyThreads) {
  Result<DigestGeometry> g = DigestGeometry::Make(4, 64, 16, 8);
  ASSERT_TRUE(g.ok());
  Result<std::unique_ptr<DigestTable>> t = DigestTable::Create(*g, 8);
  ASSERT_TRUE(t.ok());
  DigestTable& table = **t;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (uint32_t slot = 0; slot < 8; ++slot) {
    threads.emplace_back([&, slot] {
      std::vector<uint8_t> stripe(64 * 16);
      std::vector<uint64_t> d(8);
      for (uint64_t gen = 1; gen <= 50; ++gen) {
        for (size_t i = 0; i < stripe.size(); ++i) stripe[i] = static_cast<uint8_t>(i + gen + slot);
        if (!table.Begin(slot, gen, 64).ok()) ++failures;
        for (uint32_t l = 0; l < 4; ++l) {
          if (!ComputeLayerDigests(*g, stripe.data(), 64, d).ok()) ++failures;
          if (!table.RecordLayer(slot, gen, l, d).ok()) ++failures;
        }
        if (!table.CheckComplete(slot, gen).ok()) ++failures;
        Result<VerifyPlan> plan = table.PlanVerify(slot, gen, 10, 30);
        if (!plan.ok()) {
          ++failures;
          continue;
        }
        for (uint32_t l = 0; l < 4; ++l) {
          const Status st =
              table.VerifyHostBytes(slot, gen, l, *plan, stripe.data() + plan->extent.begin * 16,
                                    plan->extent.size() * 16);
          if (!st.ok()) ++failures;
        }
        if (!table.Get(slot, gen).ok()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(PersistConcurrencyTest, MarkDirtyRacedByManyWriters) {
  ::rangekv::testing::TempDir dir;
  Result<testing::TinyStore> s = testing::TinyStore::Open(DefaultEnv(), dir.path(), true);
  ASSERT_TRUE(s.ok());
  Persistence& p = *s->index.persistence;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (!p.MarkDirty().ok()) ++failures;
      if (!p.marked_dirty()) ++failures;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(DefaultEnv()->FileExists(StorePaths(dir.path()).dirty_marker()));
}

}  // namespace
}  // namespace rangekv::persist
