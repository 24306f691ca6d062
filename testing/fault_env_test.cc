#include "testing/fault_env.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testing/temp_dir.h"

namespace rangekv::testing {
namespace {

constexpr FileOptions kBuffered{.mode = OpenMode::kReadWrite, .direct = DirectIo::kOff};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 29 + seed * 101 + (i >> 9));
  return v;
}

std::vector<uint8_t> ReadAll(Env* env, const std::string& path) {
  auto s = env->ReadSmallFile(path, 1 << 30);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  return std::vector<uint8_t>(s->begin(), s->end());
}

class FaultEnvTest : public ::testing::Test {
 protected:
  std::unique_ptr<File> Create(const std::string& name, const std::vector<uint8_t>& contents) {
    auto f = env_.CreateFile(dir_.Join(name), kBuffered);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!contents.empty()) {
      auto w = (*f)->WriteAt(0, contents.data(), contents.size());
      EXPECT_TRUE(w.ok());
      EXPECT_EQ(*w, contents.size());
    }
    return std::move(f).value();
  }

  TempDir dir_;
  FaultInjectingEnv env_{DefaultEnv()};
};

TEST_F(FaultEnvTest, PassesThroughAndHidesTheDescriptor) {
  const auto data = Pattern(20000, 1);
  auto f = Create("a", data);
  EXPECT_EQ(f->fd(), -1);  // engines must go through ReadAt/WriteAt
  EXPECT_EQ(f->path(), dir_.Join("a"));
  std::vector<uint8_t> back(data.size());
  auto r = f->ReadAt(0, back.data(), back.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data.size());
  EXPECT_EQ(back, data);
  const FaultCounters c = env_.counters();
  EXPECT_EQ(c.reads, 1u);
  EXPECT_EQ(c.writes, 1u);
  EXPECT_EQ(c.read_errors + c.write_errors + c.short_reads + c.short_writes + c.torn_writes, 0u);
}

TEST_F(FaultEnvTest, EioOnlyOnOverlappingReadsOfTheChosenPath) {
  const auto data = Pattern(16384, 2);
  auto a = Create("a", data);
  auto b = Create("b", data);
  env_.AddRule({.path = dir_.Join("a"),
                .op = FaultOp::kRead,
                .offset = 4096,
                .length = 4096,
                .kind = FaultKind::kIoError});
  std::vector<uint8_t> buf(4096);
  EXPECT_TRUE(a->ReadAt(0, buf.data(), 4096).ok());     // ends where the range starts
  EXPECT_TRUE(a->ReadAt(8192, buf.data(), 4096).ok());  // starts where it ends
  auto bad = a->ReadAt(4000, buf.data(), 200);          // overlaps by 104 bytes
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(b->ReadAt(4096, buf.data(), 4096).ok());   // other path untouched
  EXPECT_TRUE(a->WriteAt(4096, buf.data(), 4096).ok());  // writes untouched by a read rule
  EXPECT_EQ(env_.counters().read_errors, 1u);
}

TEST_F(FaultEnvTest, RuleFiresTheGivenNumberOfTimes) {
  auto a = Create("a", Pattern(4096, 3));
  env_.AddRule({.op = FaultOp::kRead, .kind = FaultKind::kIoError, .times = 2});
  std::vector<uint8_t> buf(4096);
  EXPECT_FALSE(a->ReadAt(0, buf.data(), 4096).ok());
  EXPECT_FALSE(a->ReadAt(0, buf.data(), 4096).ok());
  EXPECT_TRUE(a->ReadAt(0, buf.data(), 4096).ok());
  env_.AddRule({.op = FaultOp::kRead, .kind = FaultKind::kIoError});
  EXPECT_FALSE(a->ReadAt(0, buf.data(), 4096).ok());
  env_.ClearRules();
  EXPECT_TRUE(a->ReadAt(0, buf.data(), 4096).ok());
  EXPECT_EQ(env_.counters().read_errors, 3u);
}

TEST_F(FaultEnvTest, ShortReadsStopAtTheRuleOrHalve) {
  const auto data = Pattern(16384, 4);
  auto a = Create("a", data);
  env_.AddRule({.op = FaultOp::kRead,
                .offset = 10000,
                .length = 1,
                .kind = FaultKind::kShortTransfer,
                .times = 2});
  std::vector<uint8_t> buf(16384);
  auto r = a->ReadAt(0, buf.data(), buf.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 10000u);  // exactly the bytes before the faulty range
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data(), 10000));
  r = a->ReadAt(10000, buf.data() + 10000, 6384);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3192u);  // inside the range: half
  r = a->ReadAt(13192, buf.data() + 13192, 3192);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3192u);  // rule spent: full
  EXPECT_EQ(buf, data);
  EXPECT_EQ(env_.counters().short_reads, 2u);
}

TEST_F(FaultEnvTest, ShortWriteMovesOnlyThePrefix) {
  const auto old_data = Pattern(8192, 5);
  const auto new_data = Pattern(8192, 6);
  auto a = Create("a", old_data);
  env_.AddRule(
      {.op = FaultOp::kWrite, .offset = 1000, .kind = FaultKind::kShortTransfer, .times = 1});
  auto w = a->WriteAt(0, new_data.data(), new_data.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 1000u);
  const auto now = ReadAll(&env_, dir_.Join("a"));
  ASSERT_EQ(now.size(), 8192u);
  EXPECT_EQ(0, std::memcmp(now.data(), new_data.data(), 1000));
  EXPECT_EQ(0, std::memcmp(now.data() + 1000, old_data.data() + 1000, 8192 - 1000));
  EXPECT_EQ(env_.counters().short_writes, 1u);
}

TEST_F(FaultEnvTest, TornWriteLeavesAPrefixAndFails) {
  const auto old_data = Pattern(8192, 7);
  const auto new_data = Pattern(8192, 8);
  auto a = Create("a", old_data);
  env_.AddRule({.op = FaultOp::kWrite,
                .offset = 4096,
                .length = 4096,
                .kind = FaultKind::kTornWrite,
                .times = 1});
  auto w = a->WriteAt(0, new_data.data(), new_data.size());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
  const auto now = ReadAll(&env_, dir_.Join("a"));
  ASSERT_EQ(now.size(), 8192u);
  EXPECT_EQ(0, std::memcmp(now.data(), new_data.data(), 4096));                // torn prefix landed
  EXPECT_EQ(0, std::memcmp(now.data() + 4096, old_data.data() + 4096, 4096));  // rest did not
  EXPECT_EQ(env_.counters().torn_writes, 1u);
}

TEST_F(FaultEnvTest, NoSpaceFromRuleBudgetAndAllocate) {
  auto a = Create("a", {});
  const auto data = Pattern(8192, 9);
  env_.AddRule({.op = FaultOp::kWrite, .kind = FaultKind::kNoSpace, .times = 1});
  auto w = a->WriteAt(0, data.data(), data.size());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(*a->Size(), 0u);  // nothing reached the file

  env_.SetSpaceLimit(10000);
  w = a->WriteAt(0, data.data(), data.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 8192u);
  w = a->WriteAt(8192, data.data(), data.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 10000u - 8192u);  // what fits is written and reported
  w = a->WriteAt(10000, data.data(), data.size());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(*a->Size(), 10000u);

  Status s = a->Allocate(1 << 20);
  EXPECT_EQ(s.code(), StatusCode::kNoSpace);
  EXPECT_EQ(*a->Size(), 10000u);
  env_.ClearSpaceLimit();
  EXPECT_TRUE(a->Allocate(1 << 20).ok());
  env_.FailEnvOp(EnvOp::kAllocate, StatusCode::kNoSpace);
  EXPECT_EQ(a->Allocate(2 << 20).code(), StatusCode::kNoSpace);
  EXPECT_TRUE(a->Allocate(2 << 20).ok());
  EXPECT_EQ(env_.counters().no_space, 4u);
}

TEST_F(FaultEnvTest, DropUnsyncedDataRevertsToLastSync) {
  const auto synced = Pattern(50000, 10);
  auto a = Create("a", synced);
  ASSERT_TRUE(a->Sync().ok());
  EXPECT_EQ(env_.UnsyncedOps(dir_.Join("a")), 0u);

  // Unsynced changes of every kind, through two handles on the same path.
  auto a2 = env_.OpenFile(dir_.Join("a"), kBuffered);
  ASSERT_TRUE(a2.ok());
  const auto junk = Pattern(30000, 11);
  ASSERT_TRUE(a->WriteAt(10000, junk.data(), 30000).ok());      // overwrite
  ASSERT_TRUE((*a2)->WriteAt(45000, junk.data(), 30000).ok());  // overwrite + extend
  ASSERT_TRUE(a->Truncate(20000).ok());                         // shrink
  ASSERT_TRUE((*a2)->Allocate(1 << 20).ok());                   // grow
  ASSERT_TRUE(a->WriteAt(5, junk.data(), 7).ok());
  EXPECT_EQ(env_.UnsyncedOps(dir_.Join("a")), 5u);

  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadAll(&env_, dir_.Join("a")), synced);
  EXPECT_EQ(env_.counters().dropped_ops, 5u);
  EXPECT_EQ(env_.UnsyncedOps(dir_.Join("a")), 0u);

  // Still usable; a synced change survives the next power loss.
  ASSERT_TRUE(a->WriteAt(0, junk.data(), 100).ok());
  ASSERT_TRUE((*a2)->Sync().ok());
  ASSERT_TRUE(a->WriteAt(200, junk.data(), 100).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  auto expect = synced;
  std::memcpy(expect.data(), junk.data(), 100);
  EXPECT_EQ(ReadAll(&env_, dir_.Join("a")), expect);
}

TEST_F(FaultEnvTest, NeverSyncedFileBecomesEmptyAndRenamesKeepTheLog) {
  auto a = Create("a", Pattern(5000, 12));
  ASSERT_TRUE(env_.RenameFile(dir_.Join("a"), dir_.Join("b")).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_TRUE(env_.FileExists(dir_.Join("b")));
  EXPECT_TRUE(ReadAll(&env_, dir_.Join("b")).empty());
}

TEST_F(FaultEnvTest, FailedSyncKeepsDataUnsynced) {
  const auto synced = Pattern(4096, 13);
  auto a = Create("a", synced);
  ASSERT_TRUE(a->Sync().ok());
  const auto junk = Pattern(4096, 14);
  ASSERT_TRUE(a->WriteAt(0, junk.data(), junk.size()).ok());
  env_.FailEnvOp(EnvOp::kSync, StatusCode::kIoError, 1, dir_.Join("a"));
  EXPECT_EQ(a->Sync().code(), StatusCode::kIoError);
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadAll(&env_, dir_.Join("a")), synced);
}

TEST_F(FaultEnvTest, DropUnsyncedDataWorksOnDirectFiles) {
  auto f = env_.CreateFile(dir_.Join("d"), FileOptions{.direct = DirectIo::kPreferred});
  ASSERT_TRUE(f.ok());
  const uint64_t align = (*f)->direct_alignment();
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(align, 4 * align));
  const auto first = Pattern(4 * align, 15);
  std::memcpy(buf, first.data(), first.size());
  ASSERT_TRUE((*f)->WriteAt(0, buf, 4 * align).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  std::memset(buf, 0xab, 4 * align);
  ASSERT_TRUE((*f)->WriteAt(align, buf, 2 * align).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  auto r = (*f)->ReadAt(0, buf, 4 * align);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(0, std::memcmp(buf, first.data(), 4 * align));
  std::free(buf);
}

TEST_F(FaultEnvTest, DropUnsyncedDataNeedsTracking) {
  FaultInjectingEnv untracked(DefaultEnv(), FaultOptions{.unsynced = UnsyncedData::kIgnore});
  EXPECT_EQ(untracked.DropUnsyncedData().code(), StatusCode::kFailedPrecondition);
}

TEST_F(FaultEnvTest, UndoLogIsBounded) {
  env_.SetOptions(FaultOptions{.undo_log_bytes_max = 10000});
  auto a = Create("a", Pattern(20000, 16));  // extension: no old bytes to keep
  const auto junk = Pattern(20000, 17);
  auto w = a->WriteAt(0, junk.data(), 20000);  // would keep 20000 old bytes
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(a->Sync().ok());
  EXPECT_TRUE(a->WriteAt(0, junk.data(), 5000).ok());
  EXPECT_EQ(env_.counters().undo_overflows, 1u);
}

TEST_F(FaultEnvTest, RenameDeleteSyncDirAndOpenFailures) {
  auto a = Create("a", Pattern(100, 18));
  a.reset();
  env_.FailEnvOp(EnvOp::kRename, StatusCode::kIoError, 1);
  EXPECT_EQ(env_.RenameFile(dir_.Join("a"), dir_.Join("b")).code(), StatusCode::kIoError);
  EXPECT_TRUE(env_.FileExists(dir_.Join("a")));  // a failed rename changes nothing
  EXPECT_FALSE(env_.FileExists(dir_.Join("b")));
  EXPECT_TRUE(env_.RenameFile(dir_.Join("a"), dir_.Join("b")).ok());

  env_.FailEnvOp(EnvOp::kSyncDir, StatusCode::kIoError, 1, dir_.path());
  EXPECT_EQ(env_.SyncDir(dir_.path()).code(), StatusCode::kIoError);
  EXPECT_TRUE(env_.SyncDir(dir_.path()).ok());

  env_.FailEnvOp(EnvOp::kOpen, StatusCode::kIoError, 1);
  EXPECT_EQ(env_.OpenFile(dir_.Join("b"), kBuffered).status().code(), StatusCode::kIoError);
  env_.FailEnvOp(EnvOp::kCreate, StatusCode::kNoSpace, 1);
  EXPECT_EQ(env_.CreateFile(dir_.Join("c"), kBuffered).status().code(), StatusCode::kNoSpace);
  EXPECT_FALSE(env_.FileExists(dir_.Join("c")));
  env_.FailEnvOp(EnvOp::kDelete, StatusCode::kIoError, 1);
  EXPECT_EQ(env_.DeleteFile(dir_.Join("b")).code(), StatusCode::kIoError);
  EXPECT_TRUE(env_.FileExists(dir_.Join("b")));
  EXPECT_TRUE(env_.DeleteFile(dir_.Join("b")).ok());
  env_.FailEnvOp(EnvOp::kTruncate, StatusCode::kIoError, -1);
  auto c = Create("c", Pattern(100, 19));
  EXPECT_EQ(c->Truncate(0).code(), StatusCode::kIoError);
  EXPECT_EQ(c->Truncate(0).code(), StatusCode::kIoError);
  env_.ClearEnvOpFailures();
  EXPECT_TRUE(c->Truncate(0).ok());
  EXPECT_EQ(env_.counters().env_op_failures, 7u);
}

// Outcome of one read under random faults: -1 error, else bytes read.
std::vector<int64_t> RandomOutcomes(uint64_t seed, const std::string& path, int threads) {
  FaultInjectingEnv env(DefaultEnv(), FaultOptions{.seed = seed,
                                                   .read_error_probability = 0.2,
                                                   .short_read_probability = 0.2,
                                                   .short_transfer_align_bytes = 512});
  auto f = env.OpenFile(path, kBuffered);
  EXPECT_TRUE(f.ok());
  constexpr int kOps = 400;
  std::vector<int64_t> out(kOps);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<uint8_t> buf(8192);
      for (int i = t; i < kOps; i += threads) {
        auto r = (*f)->ReadAt(static_cast<uint64_t>(i) * 512, buf.data(), 8192);
        out[i] = r.ok() ? static_cast<int64_t>(*r) : -1;
      }
    });
  }
  for (auto& th : pool) th.join();
  const FaultCounters c = env.counters();
  EXPECT_EQ(c.reads, static_cast<uint64_t>(kOps));
  return out;
}

TEST_F(FaultEnvTest, SeededFaultsReproduceUnderAnyInterleaving) {
  auto a = Create("a", Pattern(400 * 512 + 8192, 20));
  const auto one = RandomOutcomes(42, dir_.Join("a"), 1);
  const auto four = RandomOutcomes(42, dir_.Join("a"), 4);
  EXPECT_EQ(one, four);
  EXPECT_NE(one, RandomOutcomes(43, dir_.Join("a"), 1));
  int errors = 0;
  int shorts = 0;
  for (int64_t o : one) {
    if (o < 0) ++errors;
    if (o >= 0 && o < 8192) {
      ++shorts;
      EXPECT_EQ(o % 512, 0);
    }
  }
  // 400 draws at p = 0.2 each: fixed by the seed, and far from 0 and 400.
  EXPECT_GT(errors, 40);
  EXPECT_LT(errors, 120);
  EXPECT_GT(shorts, 40);
  EXPECT_LT(shorts, 120);
}

TEST_F(FaultEnvTest, RandomTornAndFailedWrites) {
  env_.SetOptions(
      FaultOptions{.seed = 7, .write_error_probability = 0.3, .torn_write_probability = 0.3});
  auto a = Create("a", {});
  const auto data = Pattern(4096, 21);
  int failed = 0;
  for (int i = 0; i < 100; ++i) {
    if (!a->WriteAt(static_cast<uint64_t>(i) * 4096, data.data(), 4096).ok()) ++failed;
  }
  const FaultCounters c = env_.counters();
  EXPECT_EQ(static_cast<uint64_t>(failed), c.write_errors + c.torn_writes);
  EXPECT_GT(c.write_errors, 0u);
  EXPECT_GT(c.torn_writes, 0u);
}

TEST_F(FaultEnvTest, LatencyIsAddedPerOp) {
  auto a = Create("a", Pattern(4096, 22));
  env_.SetOptions(FaultOptions{.op_latency_ns = 2'000'000});
  std::vector<uint8_t> buf(4096);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->ReadAt(0, buf.data(), 4096).ok());
  // sleep_for never returns early, so this lower bound cannot flake.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(6));
  EXPECT_EQ(env_.counters().delayed_ops, 3u);
}

TEST_F(FaultEnvTest, ConcurrentTrackedWritersAndReaders) {
  constexpr int kThreads = 4;
  constexpr uint64_t kChunk = 16384;
  auto a = Create("a", std::vector<uint8_t>(kThreads * kChunk * 8, 0));
  ASSERT_TRUE(a->Sync().ok());
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      const auto data = Pattern(kChunk, static_cast<uint8_t>(t));
      std::vector<uint8_t> back(kChunk);
      for (int i = 0; i < 8; ++i) {
        const uint64_t off = (static_cast<uint64_t>(i) * kThreads + t) * kChunk;
        EXPECT_TRUE(a->WriteAt(off, data.data(), kChunk).ok());
        auto r = a->ReadAt(off, back.data(), kChunk);
        EXPECT_TRUE(r.ok());
        EXPECT_EQ(back, data);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(env_.UnsyncedOps(dir_.Join("a")), kThreads * 8u);
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(ReadAll(&env_, dir_.Join("a")), std::vector<uint8_t>(kThreads * kChunk * 8, 0));
}

}  // namespace
}  // namespace rangekv::testing
