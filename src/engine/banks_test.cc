#include "engine/banks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device/host_device.h"
#include "engine/job_slots.h"

namespace rangekv::engine_internal {
namespace {

TEST(BankPoolTest, AcquireReleaseCountsAndUseNumbers) {
  BankPool pool(3, 0);
  EXPECT_EQ(pool.free_count(), 3u);
  auto a = pool.TryAcquire(BankPurpose::kScheduled);
  auto b = pool.TryAcquire(BankPurpose::kScheduled);
  auto c = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);  // deterministic order
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kScheduled));
  EXPECT_EQ(pool.owned_count(), 3u);
  EXPECT_EQ(pool.use_number(*b), 1u);
  pool.Release(*b);
  auto again = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *b);
  EXPECT_EQ(pool.use_number(*b), 2u);
  EXPECT_EQ(pool.acquisitions(), 4u);
}

TEST(BankPoolTest, PrefetchBudgetLeavesBanksForScheduledWork) {
  BankPool pool(4, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.CanAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_EQ(pool.prefetch_owned(), 3u);
  auto s = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(s);
  pool.Release(*s);
  // Promotion returns the budget but not the bank.
  pool.Promote(0);
  EXPECT_EQ(pool.prefetch_owned(), 2u);
  EXPECT_TRUE(pool.TryAcquire(BankPurpose::kPrefetch));
  EXPECT_FALSE(pool.TryAcquire(BankPurpose::kScheduled));
}

TEST(BankPoolTest, QuarantinedBankIsNeverHandedOutAgain) {
  BankPool pool(2, 0);
  auto a = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(a);
  pool.Quarantine(*a);
  EXPECT_EQ(pool.state(*a), BankState::kQuarantined);
  EXPECT_EQ(pool.quarantined_count(), 1u);
  for (int i = 0; i < 5; ++i) {
    auto b = pool.TryAcquire(BankPurpose::kScheduled);
    ASSERT_TRUE(b);
    EXPECT_NE(*b, *a);
    pool.Release(*b);
  }
}

TEST(BankPoolTest, PrefetchNeverTakesTheLastUsableBankAfterQuarantines) {
  BankPool pool(4, 3);
  const auto a = pool.TryAcquire(BankPurpose::kScheduled);
  const auto b = pool.TryAcquire(BankPurpose::kScheduled);
  ASSERT_TRUE(a && b);
  pool.Quarantine(*a);
  pool.Quarantine(*b);  // 2 usable banks left, budget 3
  ASSERT_TRUE(pool.TryAcquire(BankPurpose::kPrefetch).has_value());
  EXPECT_FALSE(pool.CanAcquire(BankPurpose::kPrefetch));  // the last usable bank is scheduled's
  EXPECT_TRUE(pool.TryAcquire(BankPurpose::kScheduled).has_value());
}

struct TestSlot {
  uint32_t index = 0;
};
struct TestJob {
  TestSlot* const slot;
};

TEST(JobSlotsTest, ServiceIsRoundRobinAcrossActiveJobs) {
  Counters counters;
  EngineContext context;
  context.counters = &counters;
  JobSlots<TestSlot, TestJob> jobs(context, 4, 0, "test", "max_test", nullptr);
  std::vector<std::unique_ptr<TestSlot>> slots;
  for (uint32_t i = 0; i < 3; ++i) slots.push_back(std::make_unique<TestSlot>(TestSlot{i}));
  jobs.Init(slots);
  std::vector<std::shared_ptr<TestJob>> started;
  for (int i = 0; i < 3; ++i) {
    auto admitted = jobs.Admit();
    ASSERT_TRUE(admitted.ok());
    started.push_back(std::make_shared<TestJob>(TestJob{admitted->slot}));
    jobs.Activate(started.back());
  }
  EXPECT_EQ(jobs.Admit().status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(counters.rejected_requests.load(), 1u);
  // Every job always has work: grants go 0, 1, 2, 0, ... instead of all to job 0.
  std::vector<TestJob*> served;
  for (int i = 0; i < 6; ++i) {
    served.push_back(jobs.ServiceOrder(0).get());
    jobs.Served(0);
  }
  EXPECT_EQ(served, (std::vector<TestJob*>{started[0].get(), started[1].get(), started[2].get(),
                                           started[0].get(), started[1].get(), started[2].get()}));
  // Job 1 has no work: it is skipped, and the next visit starts after the job served.
  EXPECT_EQ(jobs.ServiceOrder(1).get(), started[1].get());
  EXPECT_EQ(jobs.ServiceOrder(2).get(), started[2].get());
  jobs.Served(2);  // job 2 served
  EXPECT_EQ(jobs.ServiceOrder(0).get(), started[0].get());
  // A job leaving keeps the order of the others.
  jobs.Served(0);  // job 0 served: job 1 is next
  jobs.Deactivate(*started[0]);
  EXPECT_EQ(jobs.ServiceOrder(0).get(), started[1].get());
  EXPECT_EQ(jobs.ServiceOrder(1).get(), started[2].get());
  jobs.Deactivate(*started[2]);
  EXPECT_EQ(jobs.ServiceOrder(0).get(), started[1].get());
}

TEST(BankPoolDeathTest, ReleasingAFreeBankAborts) {
  BankPool pool(2, 0);
  EXPECT_DEATH(pool.Release(1), "RANGEKV_CHECK");
}

// A slot's next job may bind while the previous job's mapping copy is still queued (a restore
// cancelled before any scatter waited for it): the upload waits for that copy before it
// rewrites the staging, and the device ends up with the new mapping.
TEST(SlotMappingTest, AnUploadWaitsForThePreviousCopyBeforeRewritingTheStaging) {
  auto dev = CreateHostDevice();
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  SlotMapping m;
  ASSERT_TRUE(m.Allocate(**dev, 4).ok());
  auto stream = (*dev)->CreateStream();
  auto flag = (*dev)->CreateFlag();
  ASSERT_TRUE(stream.ok() && flag.ok());
  ASSERT_TRUE((*stream)->WaitFlag(**flag, 1).ok());  // holds everything enqueued after it
  const std::vector<int64_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  ASSERT_TRUE(m.Upload(first, **stream).ok());  // its copy waits behind the flag
  std::atomic<bool> second_done{false};
  std::thread t([&] {
    EXPECT_TRUE(m.Upload(second, **stream).ok());
    second_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(second_done.load()) << "the staging was rewritten under a queued copy";
  (*flag)->Set(1);
  t.join();
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(std::vector<int64_t>(m.slots(), m.slots() + 4), second);
}

}  // namespace
}  // namespace rangekv::engine_internal
