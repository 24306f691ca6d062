#include "service_proto/read_gate.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rangekv::service {
namespace {

template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::shared_ptr<SharedReadGate> AttachDup(const ReadGatePage& page, uint32_t holder,
                                          std::chrono::milliseconds wait = kEnterWait) {
  Result<std::shared_ptr<SharedReadGate>> g =
      SharedReadGate::Attach(::fcntl(page.fd(), F_DUPFD_CLOEXEC, 0), holder, page.slots(), wait);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

TEST(ReadGate, CreateRejectsSlotCountsOutOfRange) {
  EXPECT_EQ(ReadGatePage::Create(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadGatePage::Create(kMaxGateSlots + 1).status().code(), StatusCode::kInvalidArgument);
}

// Several engines' threads (here: three sessions' gates, four threads each) never hold more
// than the node's slots at once, and every one of them gets through.
TEST(ReadGate, SessionsTogetherStayWithinTheSlots) {
  auto page = ReadGatePage::Create(3);
  ASSERT_TRUE(page.ok());
  std::vector<std::shared_ptr<SharedReadGate>> gates;
  // A bound no wait reaches on a loaded machine: every read here passes with a slot.
  for (int s = 0; s < 3; ++s) {
    gates.push_back(AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::seconds(30)));
  }
  std::atomic<int> inside{0}, most{0};
  std::atomic<uint64_t> passes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      SharedReadGate& g = *gates[t % 3];
      for (int i = 0; i < 300; ++i) {
        ASSERT_TRUE(g.Enter());
        const int now = inside.fetch_add(1) + 1;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // a read's time
        inside.fetch_sub(1);
        g.Leave();
        passes.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passes.load(), 12u * 300);
  EXPECT_LE(most.load(), 3);
  EXPECT_EQ((*page)->outstanding(), 0u);
  uint64_t waited = 0;
  for (auto& g : gates) waited += g->counts().waited;
  EXPECT_GT(waited, 0u);  // 12 threads on 3 slots: some waited
  for (auto& g : gates) EXPECT_EQ(g->counts().timed_out, 0u);
}

// One session alone may take every slot: the gate is not a share per session.
TEST(ReadGate, OneSessionAloneTakesEverySlot) {
  auto page = ReadGatePage::Create(4);
  ASSERT_TRUE(page.ok());
  auto g = AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::milliseconds(20));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(g->Enter());
  EXPECT_EQ((*page)->outstanding(), 4u);
  EXPECT_EQ(g->counts().waited, 0u);
  // The fifth waits its bound out and goes ahead anyway, holding its ticket (fail open).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(g->Enter());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(15));
  EXPECT_EQ(g->counts().timed_out, 1u);
  EXPECT_EQ((*page)->outstanding(), 5u);
  for (int i = 0; i < 5; ++i) g->Leave();
  EXPECT_EQ((*page)->outstanding(), 0u);
  EXPECT_EQ((*page)->ReleaseHolder(g->holder()), 0u);  // a clean end leaves no marks
}

// Reads go in the order they asked, across sessions: with one slot, waiters that queued in turn
// are let through in that turn.
TEST(ReadGate, WaitersGoInTheOrderTheyAsked) {
  auto page = ReadGatePage::Create(1);
  ASSERT_TRUE(page.ok());
  auto first = AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::seconds(30));
  ASSERT_TRUE(first->Enter());
  // Every gate attached before any waiter starts (the threads read the vector).
  std::vector<std::shared_ptr<SharedReadGate>> gates;
  for (int i = 0; i < 4; ++i) {
    gates.push_back(AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::seconds(30)));
  }
  std::vector<std::thread> waiters;
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      ASSERT_TRUE(gates[i]->Enter());
      {
        std::lock_guard l(mu);
        order.push_back(i);
      }
      gates[i]->Leave();
    });
    // Queued before the next one asks: tickets 1, 2, 3, 4 in turn.
    ASSERT_TRUE(Eventually([&] { return (*page)->outstanding() == 2u + i; }));
  }
  first->Leave();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*page)->outstanding(), 0u);
}

// A waiter is woken by a give-back, not by its bound.
TEST(ReadGate, AGiveBackWakesAWaiter) {
  auto page = ReadGatePage::Create(1);
  ASSERT_TRUE(page.ok());
  auto a = AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::seconds(30));
  auto b = AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::seconds(30));
  ASSERT_TRUE(a->Enter());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    got = b->Enter();
    b->Leave();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  const auto t0 = std::chrono::steady_clock::now();
  a->Leave();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// A client process SIGKILLed while holding slots: once it is gone the service gives its holder
// index back and its slots return to the node.
TEST(ReadGate, ADeadHoldersSlotsComeBack) {
  auto page = ReadGatePage::Create(4);
  ASSERT_TRUE(page.ok());
  const uint32_t holder = *(*page)->AcquireHolder();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    auto g = SharedReadGate::Attach(::dup((*page)->fd()), holder, (*page)->slots());
    if (!g.ok()) ::_exit(2);
    for (int i = 0; i < 3; ++i) (*g)->Enter();  // and never gives them back
    const char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);  // so a child that died early is an end of file here, not a hang
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_EQ((*page)->outstanding(), 3u);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  EXPECT_EQ((*page)->ReleaseHolder(holder), 3u);
  EXPECT_EQ((*page)->outstanding(), 0u);
  EXPECT_EQ((*page)->holders_in_use(), 0u);
  // The node's four slots are all there again for another session.
  auto other = AttachDup(**page, *(*page)->AcquireHolder(), std::chrono::milliseconds(10));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(other->Enter());
  for (int i = 0; i < 4; ++i) other->Leave();
}

// A client cannot shrink the page under the service, and a page that is not a gate is refused.
TEST(ReadGate, ThePageIsSealedAndChecked) {
  auto page = ReadGatePage::Create(2);
  ASSERT_TRUE(page.ok());
  EXPECT_NE(::ftruncate((*page)->fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(SharedReadGate::Attach(::dup((*page)->fd()), kMaxGateHolders, 2).status().code(),
            StatusCode::kInvalidArgument);
  // The slot count obeyed is the service's reply; a page that says otherwise is refused.
  EXPECT_EQ(SharedReadGate::Attach(::dup((*page)->fd()), 0, 3).status().code(),
            StatusCode::kCorruption);
  const int other = ::memfd_create("not-a-gate", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::ftruncate(other, 4096), 0);
  EXPECT_EQ(SharedReadGate::Attach(other, 0, 2).status().code(), StatusCode::kCorruption);
  const int small = ::memfd_create("small", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(small, 100), 0);
  EXPECT_EQ(SharedReadGate::Attach(small, 0, 2).status().code(), StatusCode::kCorruption);
}

TEST(ReadGate, HolderIndexesRunOut) {
  auto page = ReadGatePage::Create(1);
  ASSERT_TRUE(page.ok());
  for (uint32_t i = 0; i < kMaxGateHolders; ++i) ASSERT_TRUE((*page)->AcquireHolder().ok());
  EXPECT_EQ((*page)->AcquireHolder().status().code(), StatusCode::kResourceExhausted);
  (*page)->ReleaseHolder(7);
  EXPECT_EQ(*(*page)->AcquireHolder(), 7u);
}

}  // namespace
}  // namespace rangekv::service
