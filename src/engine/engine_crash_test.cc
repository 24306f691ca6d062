// Crash test (docs/design.md "Persistence and recovery" and "Testing"; the paper's 3.5 and Table
// 1): a driver process (crash_driver.cc) runs a seeded store/restore workload through the Engine on
// a store directory and is killed with SIGKILL at chosen points: after a gather, between writes,
// before and after publication, after each step of the clean shutdown (the snapshot written,
// synced, renamed, the rename durable, the marker removed, ...), in the middle of the snapshot
// write, before the N-th mutating file operation chosen at random, and from outside after a random
// delay. After each kill this process reopens the store through the Engine and checks that every
// prefix of the workload's pool either misses or restores bytes identical to what was stored,
// with no failed token and no checksum failure (a checksum failure would mean the index
// trusted payload it does not describe).
//
// Kill points: at least 200 by default (about a minute on two cores); RANGEKV_CRASH_POINTS=N
// runs N instead (more for a soak), RANGEKV_CRASH_SEED picks another workload. The main test
// runs the engine's default durability (periodic): a dirty reopen replays the journal. A second
// test measures durability: under every_publish every store acknowledged durable before the
// kill must be found again bit for bit (survival fraction printed, 100% required). A third
// measures the periodic promise: every store that returned visible longer than the period (plus
// a commit allowance) before the kill is found again bit for bit. Store directories live in
// /dev/shm when it exists (SIGKILL keeps the page cache, so tmpfs loses nothing a disk would keep,
// and fsync costs nothing).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "engine/crash_workload.h"
#include "persist/offline.h"
#include "rangekv/engine.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/temp_dir.h"

extern char** environ;

namespace rangekv {
namespace {

using testing::CrashWorkload;

constexpr uint32_t kSessions = 4;
constexpr uint32_t kOps = 10;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct DriverRun {
  bool killed = false;  // ended by SIGKILL
  int exit_code = -1;   // when it exited
  std::string out;      // stdout (dry runs print their counts)
  std::string err;
  double seconds = 0;
  uint64_t kill_ns = 0;  // outside kills: CLOCK_MONOTONIC just before the SIGKILL was sent
};

uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Runs the driver on `dir` with `extra` arguments. With `kill_after_us` > 0 this process sends
// SIGKILL after that many microseconds (a random point from outside).
DriverRun RunDriver(const std::string& dir, uint64_t seed, const std::vector<std::string>& extra,
                    uint64_t kill_after_us = 0) {
  std::vector<std::string> args = {RANGEKV_CRASH_DRIVER,
                                   "--dir",
                                   dir,
                                   "--seed",
                                   std::to_string(seed),
                                   "--sessions",
                                   std::to_string(kSessions),
                                   "--ops",
                                   std::to_string(kOps)};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = dir + ".out", err_path = dir + ".err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  DriverRun run;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
  if (rc != 0) return run;
  if (kill_after_us > 0) {
    // The delay picks a random instant of the driver's run; nothing here depends on it.
    std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
    run.kill_ns = MonotonicNs();
    kill(pid, SIGKILL);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  run.out = slurp(out_path);
  run.err = slurp(err_path);
  return run;
}

// "counts gather=3 write=40 ..." -> {gather: 3, write: 40, ...}
std::map<std::string, uint64_t> ParseCounts(const std::string& out) {
  std::map<std::string, uint64_t> counts;
  std::istringstream in(out);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) continue;
    counts[word.substr(0, eq)] = std::strtoull(word.c_str() + eq + 1, nullptr, 10);
  }
  return counts;
}

// The fewest file-system operations and the shortest wall time over a test's dry runs: its
// commits and checkpoints are timed, so both vary from run to run.
struct DryRange {
  uint64_t fewest_io = 0;
  double shortest_s = 0;
};

// Two more dry runs (arguments from `args_for(dir)`) after the first, folded into `range`;
// each must complete and report more than `min_io` operations.
void MoreDryRuns(const std::string& root, uint64_t seed,
                 const std::function<std::vector<std::string>(const std::string&)>& args_for,
                 uint64_t min_io, DryRange* range) {
  for (int again = 0; again < 2; ++again) {
    const std::string dir = root + "/dry" + std::to_string(again + 2);
    DriverRun d = RunDriver(dir, seed, args_for(dir));
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const uint64_t io = ParseCounts(d.out)["io"];
    ASSERT_GT(io, min_io) << d.out;
    range->fewest_io = std::min(range->fewest_io, io);
    range->shortest_s = std::min(range->shortest_s, d.seconds);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

struct Recovered {
  bool opened = false;
  bool loaded = false;
  bool replayed = false;      // the journal was replayed
  uint64_t hits = 0;          // prefixes with a non-empty hit
  std::vector<uint64_t> hit;  // per prefix: tokens found and restored bit for bit
};

// Reopens `dir` through the Engine and checks every prefix of the pool: a miss, or a hit whose
// every token is delivered bit for bit.
Recovered CheckStore(const CrashWorkload& w, const std::string& dir, const std::string& what,
                     uint64_t packs = CrashWorkload::kPacks) {
  Recovered r;
  r.hit.assign(w.prefixes.size(), 0);
  auto opened = testing::OpenEngineForTesting(w.Options(dir, packs), {});
  EXPECT_TRUE(opened.ok()) << what << ": reopen failed: " << opened.status().ToString();
  if (!opened.ok()) return r;
  r.opened = true;
  Engine& engine = **opened;
  r.loaded = engine.recovery().loaded;
  r.replayed = engine.recovery().journal_replayed;
  auto kv = testing::KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  EXPECT_TRUE(kv.ok());
  if (!kv.ok()) return r;
  for (size_t p = 0; p < w.prefixes.size(); ++p) {
    auto res =
        testing::RestoreAndVerify(engine, **kv, testing::Envelope("check" + std::to_string(p)),
                                  w.prefixes[p], 1, CrashWorkload::kPayloadSeed, p);
    EXPECT_TRUE(res.ok()) << what << ": " << res.status().ToString();
    if (!res.ok() || res->lookup.hit_tokens == 0) continue;
    ++r.hits;
    const bool exact = res->outcome.status.ok() && res->outcome.failed.empty() &&
                       res->outcome.work.checksum_failures == 0 && res->mismatches == 0 &&
                       res->poisoned_rows == 0;
    if (exact) r.hit[p] = res->lookup.hit_tokens;
    EXPECT_TRUE(res->outcome.status.ok())
        << what << ", prefix " << p << ": " << res->outcome.status.ToString();
    EXPECT_TRUE(res->outcome.failed.empty()) << what << ", prefix " << p;
    EXPECT_EQ(res->outcome.work.checksum_failures, 0u) << what << ", prefix " << p;
    EXPECT_EQ(res->mismatches, 0u) << what << ", prefix " << p;
    EXPECT_EQ(res->poisoned_rows, 0u) << what << ", prefix " << p;
  }
  kv->reset();
  EXPECT_TRUE(engine.Close().ok()) << what;
  return r;
}

// A driver's arguments: `extra` (the kill point), then `common`, then --acks FILE.
std::vector<std::string> WithAcks(std::vector<std::string> extra,
                                  const std::vector<std::string>& common, const std::string& acks) {
  extra.insert(extra.end(), common.begin(), common.end());
  extra.push_back("--acks");
  extra.push_back(acks);
  return extra;
}

struct KillPoint {
  std::vector<std::string> args;  // --kill X --at K, or empty for an outside kill
  uint64_t kill_after_us = 0;
  std::string label;
};

TEST(EngineCrashTest, EveryKillPointRecoversToMissesOrExactBytes) {
  const uint64_t points_wanted = EnvOr("RANGEKV_CRASH_POINTS", 200);
  const uint64_t seed = EnvOr("RANGEKV_CRASH_SEED", 1);
  SetMinLogLevel(LogLevel::kError);  // discards are expected here, by the hundred
  const CrashWorkload w = CrashWorkload::Make(seed, kSessions, kOps);
  const std::string parent = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "";
  testing::TempDir root(parent);

  // A dry run counts how often each point occurs in this workload (it is deterministic in its
  // counts) and how long a run takes.
  DriverRun dry = RunDriver(root.path() + "/dry", seed, {"--kill", "none"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  std::map<std::string, uint64_t> counts = ParseCounts(dry.out);
  ASSERT_GT(counts["gather"], 0u) << dry.out;
  ASSERT_GT(counts["write"], 0u) << dry.out;
  ASSERT_GT(counts["publish"], 0u) << dry.out;
  ASSERT_GT(counts["io"], 0u) << dry.out;
  ASSERT_EQ(counts["sessions"], kSessions);
  Recovered clean = CheckStore(w, root.path() + "/dry", "dry run");
  EXPECT_TRUE(clean.loaded);
  EXPECT_GT(clean.hits, 0u);

  // The chosen points: each named point at evenly spread occurrences, then random ones.
  std::vector<KillPoint> plan;
  auto spread = [&](const std::string& name, uint64_t occurrences, uint64_t want) {
    want = std::min(want, occurrences);
    for (uint64_t i = 0; i < want; ++i) {
      const uint64_t k = 1 + i * occurrences / want;
      plan.push_back(
          {{"--kill", name, "--at", std::to_string(k)}, 0, name + "#" + std::to_string(k)});
    }
  };
  const uint64_t share = std::max<uint64_t>(points_wanted / 10, 1);
  spread("gather", counts["gather"], share);
  spread("write", counts["write"], 2 * share);
  spread("publish", counts["publish"], share);
  spread("published", counts["published"], share / 2 + 1);
  for (int step = 0; step < 7; ++step) {
    spread("step" + std::to_string(step), kSessions, kSessions);
  }
  spread("snapshot_partial", counts["snapshot_writes"], kSessions);
  // Every mutating operation of the first open (pack file creation, epoch file), then random
  // ones over the whole run.
  for (uint64_t k = 1; k <= std::min<uint64_t>(16, counts["io"]); ++k) {
    plan.push_back({{"--kill", "io", "--at", std::to_string(k)}, 0, "io#" + std::to_string(k)});
  }
  // The journal's commits are not a fixed count: a removal is committed as soon as it is queued,
  // and whether the next waiter's commit finds it done depends on timing, so a run's mutating
  // operations vary by a commit or two (3 operations each: pack fsync, append, journal fsync).
  // Random points are drawn below the fewest of three dry runs, less that slack, so each is
  // reached in every run; the last operations (the shutdown's) have named points above.
  // Outside kills likewise land inside the shortest dry run's wall time, less a tenth.
  DryRange range{counts["io"], dry.seconds};
  ASSERT_NO_FATAL_FAILURE(MoreDryRuns(
      root.path(), seed,
      [](const std::string&) {
        return std::vector<std::string>{"--kill", "none"};
      },
      12, &range));
  const uint64_t io_slack = std::max<uint64_t>(6, range.fewest_io / 10);
  const uint64_t random_io =
      range.fewest_io > 2 * io_slack ? range.fewest_io - io_slack : range.fewest_io;
  std::mt19937_64 rng(seed * 7919);
  const uint64_t dry_us = static_cast<uint64_t>(range.shortest_s * 0.9 * 1e6);
  const uint64_t outside = std::max<uint64_t>(points_wanted / 20, 1);
  while (plan.size() + outside < points_wanted) {
    const uint64_t k = std::uniform_int_distribution<uint64_t>(1, random_io)(rng);
    plan.push_back({{"--kill", "io", "--at", std::to_string(k)}, 0, "io#" + std::to_string(k)});
  }
  for (uint64_t i = 0; i < outside; ++i) {
    const uint64_t us =
        std::uniform_int_distribution<uint64_t>(1000, std::max<uint64_t>(2000, dry_us))(rng);
    plan.push_back({{}, us, "outside@" + std::to_string(us) + "us"});
  }

  uint64_t killed = 0, completed = 0, loaded = 0, discarded = 0, hits = 0, replayed = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const KillPoint& kp = plan[i];
    const std::string dir = root.path() + "/k" + std::to_string(i);
    DriverRun run = RunDriver(dir, seed, kp.args, kp.kill_after_us);
    // A driver that saw wrong bytes while it ran, or failed otherwise, fails the test.
    ASSERT_TRUE(run.killed || run.exit_code == 0)
        << kp.label << ": driver exit " << run.exit_code << ": " << run.err;
    if (run.killed) {
      ++killed;
    } else {
      ++completed;
      EXPECT_TRUE(kp.args.empty()) << kp.label << ": the driver never reached its kill point";
    }
    if (!std::filesystem::exists(dir)) continue;  // killed before it made the directory
    const Recovered r = CheckStore(w, dir, kp.label);
    if (!r.opened) break;
    r.loaded ? ++loaded : ++discarded;
    replayed += r.replayed ? 1 : 0;
    hits += r.hits;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "crash test (durability=%s): %zu points, %llu killed, %llu completed, %llu reopened "
      "loaded (%llu by journal replay), %llu discarded, %llu prefixes found again\n",
      w.Options("x").durability.ToString().c_str(), plan.size(),
      static_cast<unsigned long long>(killed), static_cast<unsigned long long>(completed),
      static_cast<unsigned long long>(loaded), static_cast<unsigned long long>(replayed),
      static_cast<unsigned long long>(discarded), static_cast<unsigned long long>(hits));
  EXPECT_GE(killed, std::min<uint64_t>(points_wanted, 200) * 9 / 10);
  EXPECT_GE(plan.size(), points_wanted);
  // Under the default durability (periodic) a kill while dirty replays the journal; a kill
  // before anything was created starts empty.
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(replayed, 0u);
  EXPECT_GT(hits, 0u);
}

// Durability measured (docs/fault-model.md "Publication journal"): the same kill points under
// durability=every_publish, in a store that holds the whole pool (nothing is ever evicted, so
// nothing acknowledged may legitimately leave the index). The driver logs every store that
// returned visible and durable; after each kill every such prefix must be found whole and
// restored bit for bit. Prints the survival fraction (acknowledged-durable restored /
// acknowledged-durable) and requires 100%. Half the main test's points
// (RANGEKV_CRASH_POINTS / 2).
TEST(EngineCrashTest, EveryAcknowledgedPublicationSurvivesEveryKillPoint) {
  const uint64_t points_wanted = std::max<uint64_t>(EnvOr("RANGEKV_CRASH_POINTS", 200) / 2, 10);
  const uint64_t seed = EnvOr("RANGEKV_CRASH_SEED", 1) + 100;
  constexpr uint64_t kAllPacks = 48;
  SetMinLogLevel(LogLevel::kError);
  const CrashWorkload w = CrashWorkload::Make(seed, kSessions, kOps);
  const std::string parent = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "";
  testing::TempDir root(parent);
  const std::vector<std::string> common = {"--durability", "every_publish", "--packs",
                                           std::to_string(kAllPacks)};
  auto with = [&](std::vector<std::string> extra, const std::string& acks) {
    return WithAcks(std::move(extra), common, acks);
  };
  DriverRun dry =
      RunDriver(root.path() + "/dry", seed, with({"--kill", "none"}, root.path() + "/dry.acks"));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  std::map<std::string, uint64_t> counts = ParseCounts(dry.out);
  ASSERT_GT(counts["io"], 0u);
  ASSERT_GT(counts["published"], 0u);

  std::vector<KillPoint> plan;
  auto spread = [&](const std::string& name, uint64_t occurrences, uint64_t want) {
    want = std::min(want, occurrences);
    for (uint64_t i = 0; i < want; ++i) {
      const uint64_t k = 1 + i * occurrences / want;
      plan.push_back(
          {{"--kill", name, "--at", std::to_string(k)}, 0, name + "#" + std::to_string(k)});
    }
  };
  const uint64_t share = std::max<uint64_t>(points_wanted / 10, 1);
  spread("write", counts["write"], share);
  spread("publish", counts["publish"], share);
  spread("published", counts["published"], 2 * share);
  for (int step = 0; step < 7; ++step) spread("step" + std::to_string(step), kSessions, 1);
  std::mt19937_64 rng(seed * 7919);
  while (plan.size() < points_wanted) {
    const uint64_t k = std::uniform_int_distribution<uint64_t>(1, counts["io"])(rng);
    plan.push_back({{"--kill", "io", "--at", std::to_string(k)}, 0, "io#" + std::to_string(k)});
  }

  uint64_t acknowledged = 0, restored = 0, killed = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const KillPoint& kp = plan[i];
    const std::string dir = root.path() + "/k" + std::to_string(i);
    const std::string acks = dir + ".acks";
    DriverRun run = RunDriver(dir, seed, with(kp.args, acks));
    ASSERT_TRUE(run.killed || run.exit_code == 0)
        << kp.label << ": driver exit " << run.exit_code << ": " << run.err;
    killed += run.killed ? 1 : 0;
    std::vector<uint8_t> acked(w.prefixes.size(), 0);
    {
      std::ifstream in(acks);
      std::string line;
      while (std::getline(in, line)) {  // "ack P", "vis P NS", "kill NS"
        std::istringstream words(line);
        std::string word;
        uint64_t p = 0;
        if (words >> word >> p && word == "ack" && p < acked.size()) acked[p] = 1;
      }
    }
    if (!std::filesystem::exists(dir)) continue;
    const Recovered r = CheckStore(w, dir, kp.label, kAllPacks);
    if (!r.opened) break;
    for (size_t p = 0; p < acked.size(); ++p) {
      if (!acked[p]) continue;
      ++acknowledged;
      const bool whole = r.hit[p] == w.prefixes[p].size() - 1;
      restored += whole ? 1 : 0;
      EXPECT_TRUE(whole) << kp.label << ": prefix " << p << " was acknowledged durable, found "
                         << r.hit[p] << " of " << w.prefixes[p].size() - 1 << " tokens";
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (::testing::Test::HasFailure()) break;
  }
  const double fraction = acknowledged == 0 ? 1.0 : double(restored) / double(acknowledged);
  std::printf(
      "durability test (every_publish): %zu points, %llu killed, survival %llu / %llu "
      "acknowledged-durable publications restored bit for bit (%.1f%%)\n",
      plan.size(), static_cast<unsigned long long>(killed),
      static_cast<unsigned long long>(restored), static_cast<unsigned long long>(acknowledged),
      100.0 * fraction);
  EXPECT_GT(acknowledged, 0u);
  EXPECT_EQ(restored, acknowledged);
  EXPECT_GE(killed, plan.size() * 9 / 10);
}

// The operator's question after a crash, asked of `rangekv fsck` (persist::Fsck): will the store
// open, which packs will it keep, which journaled publications will it drop? After each kill
// fsck's dry run is taken first, then the store is opened through the Engine, and the two must
// agree: the index's fate (loaded, replayed or discarded), the packs kept, slot by slot and
// generation by generation, and the journal's publications kept and dropped. At every other
// point one byte of a pack that only the journal names is flipped before fsck runs, so the
// replay has something to drop (fsck once missed such a byte: it verified only the snapshot's
// packs).
TEST(EngineCrashTest, FsckAfterAKillPredictsWhatTheNextOpenKeeps) {
  const uint64_t seed = EnvOr("RANGEKV_CRASH_SEED", 1) + 300;
  constexpr uint64_t kAllPacks = 48;
  SetMinLogLevel(LogLevel::kError);
  const CrashWorkload w = CrashWorkload::Make(seed, kSessions, kOps);
  const std::string parent = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "";
  testing::TempDir root(parent);
  const std::vector<std::string> common = {"--durability", "every_publish", "--packs",
                                           std::to_string(kAllPacks)};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  DriverRun dry = RunDriver(root.path() + "/dry", seed, with({"--kill", "none"}));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  std::map<std::string, uint64_t> counts = ParseCounts(dry.out);
  ASSERT_GT(counts["published"], 4u);
  std::vector<KillPoint> plan;
  for (uint64_t k : {counts["published"] / 4, counts["published"] / 2, counts["published"] * 3 / 4,
                     counts["published"]}) {
    plan.push_back({{"--kill", "published", "--at", std::to_string(std::max<uint64_t>(k, 1))},
                    0,
                    "published#" + std::to_string(k)});
  }
  for (uint64_t k : {counts["publish"] / 3, counts["publish"] * 2 / 3}) {
    plan.push_back({{"--kill", "publish", "--at", std::to_string(std::max<uint64_t>(k, 1))},
                    0,
                    "publish#" + std::to_string(k)});
  }
  for (uint64_t k : {counts["io"] / 5, counts["io"] / 2, counts["io"] * 4 / 5}) {
    plan.push_back({{"--kill", "io", "--at", std::to_string(std::max<uint64_t>(k, 1))},
                    0,
                    "io#" + std::to_string(k)});
  }
  plan.push_back({{"--kill", "step1", "--at", "2"}, 0, "step1#2"});

  using PackSet = std::set<std::pair<uint32_t, uint64_t>>;
  auto visible = [](const Directory& d) {
    PackSet out;
    const std::vector<SlotInfo> slots = d.Slots();
    for (uint32_t s = 0; s < slots.size(); ++s) {
      if (slots[s].state == SlotState::kVisible) out.insert({s, slots[s].generation});
    }
    return out;
  };
  uint64_t replays = 0, drops = 0, flipped = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const KillPoint& kp = plan[i];
    const std::string dir = root.path() + "/k" + std::to_string(i);
    DriverRun run = RunDriver(dir, seed, with(kp.args));
    ASSERT_TRUE(run.killed || run.exit_code == 0) << kp.label << ": " << run.err;
    if (!std::filesystem::exists(dir + "/packs.rkv")) continue;
    if (i % 2 == 1) {
      // Flip one byte of a pack that only the journal names (the snapshot does not).
      auto before = persist::OpenOffline(DefaultEnv(), dir);
      ASSERT_TRUE(before.ok()) << before.status().ToString();
      if (before->index.directory && before->index.report.journal.used) {
        PackSet in_snapshot;
        if (before->index.snapshot) {
          for (const auto& t : before->index.snapshot->digests) {
            in_snapshot.insert({t.slot, t.generation});
          }
        }
        for (const auto& [slot, gen] : visible(*before->index.directory)) {
          if (in_snapshot.count({slot, gen}) != 0) continue;
          const uint64_t at = before->pack->Address(slot, 0, 0);
          std::fstream f(dir + "/packs.rkv", std::ios::in | std::ios::out | std::ios::binary);
          f.seekg(static_cast<std::streamoff>(at));
          char c = 0;
          f.read(&c, 1);
          c = static_cast<char>(c ^ 0x5A);
          f.seekp(static_cast<std::streamoff>(at));
          f.write(&c, 1);
          ++flipped;
          break;
        }
      }
    }
    // fsck first (it writes nothing), then the open it predicts.
    auto fsck = persist::Fsck(DefaultEnv(), dir);
    ASSERT_TRUE(fsck.ok()) << kp.label << ": " << fsck.status().ToString();
    const persist::FsckRecovery& predicted = fsck->recovery;
    auto offline = persist::OpenOffline(DefaultEnv(), dir);
    ASSERT_TRUE(offline.ok());
    const PackSet predicted_packs =
        offline->index.directory ? visible(*offline->index.directory) : PackSet{};
    EXPECT_TRUE(predicted.opens) << kp.label;
    EXPECT_FALSE(predicted.in_use_by.has_value()) << kp.label << ": the driver was killed";

    auto opened = testing::OpenEngineForTesting(w.Options(dir, kAllPacks), {});
    ASSERT_TRUE(opened.ok()) << kp.label << ": " << opened.status().ToString();
    Engine& engine = **opened;
    const StoreRecovery& got = engine.recovery();
    EXPECT_EQ(predicted.index != "discarded", got.loaded) << kp.label << ": " << predicted.detail;
    EXPECT_EQ(predicted.journal_replayed, got.journal_replayed) << kp.label;
    EXPECT_EQ(predicted.packs, got.packs_loaded) << kp.label << ": " << predicted.detail;
    EXPECT_EQ(predicted.publications_kept, got.journal_publications_kept) << kp.label;
    EXPECT_EQ(predicted.publications_dropped, got.journal_publications_dropped) << kp.label;
    EXPECT_EQ(predicted_packs, visible(testing::EngineDirectory(engine)))
        << kp.label << ": fsck predicted other packs than the open kept";
    if (predicted.publications_dropped > 0) {
      // Each drop is named as a problem of kind `journal`.
      uint64_t named = 0;
      for (const persist::FsckProblem& p : fsck->problems) {
        named += p.kind == "journal" && p.message.find("the next open drops") != std::string::npos;
      }
      EXPECT_EQ(named, predicted.publications_dropped) << kp.label;
    }
    replays += got.journal_replayed ? 1 : 0;
    drops += got.journal_publications_dropped;
    EXPECT_TRUE(engine.Close().ok());
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "fsck prediction test: %zu kill points, %llu journal replays, %llu bytes flipped, "
      "%llu publications dropped, every prediction matched by the open\n",
      plan.size(), static_cast<unsigned long long>(replays),
      static_cast<unsigned long long>(flipped), static_cast<unsigned long long>(drops));
  EXPECT_GT(replays, 0u);
  EXPECT_GT(drops, 0u);
}

// The periodic promise measured (docs/fault-model.md "Publication journal"): under
// durability=periodic:<P> a crash loses at most the publications of the last P ms plus one
// commit. The driver paces its operations (a run spans many periods), checkpoints by time every
// 100 ms (so kills also land in time-based checkpoints), and logs when each store returned
// visible (CLOCK_MONOTONIC) and when it killed itself; outside kills are timed here. After each
// kill every prefix whose store returned visible more than the window before the kill must be
// restored whole, bit for bit; younger ones may be missing, never wrong. The window allowed is P
// plus kCommitAllowanceMs for the commit and the scheduling of a loaded 2-core machine; the test
// prints how old the oldest lost publication was. A quarter of the main test's points.
TEST(EngineCrashTest, PublicationsOlderThanThePeriodSurviveEveryKillPoint) {
  const uint64_t points_wanted = std::max<uint64_t>(EnvOr("RANGEKV_CRASH_POINTS", 200) / 4, 10);
  const uint64_t seed = EnvOr("RANGEKV_CRASH_SEED", 1) + 200;
  constexpr uint64_t kAllPacks = 48;
  constexpr uint64_t kPeriodMs = 20;
  constexpr uint64_t kCommitAllowanceMs = 200;
  constexpr uint64_t kWindowNs = (kPeriodMs + kCommitAllowanceMs) * 1'000'000;
  SetMinLogLevel(LogLevel::kError);
  const CrashWorkload w = CrashWorkload::Make(seed, kSessions, kOps);
  const std::string parent = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "";
  testing::TempDir root(parent);
  const std::vector<std::string> common = {
      "--durability",    "periodic:" + std::to_string(kPeriodMs),
      "--checkpoint-ms", "100",
      "--pace-us",       "15000",
      "--packs",         std::to_string(kAllPacks)};
  auto with = [&](std::vector<std::string> extra, const std::string& acks) {
    return WithAcks(std::move(extra), common, acks);
  };
  DriverRun dry =
      RunDriver(root.path() + "/dry", seed, with({"--kill", "none"}, root.path() + "/dry.acks"));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  std::map<std::string, uint64_t> counts = ParseCounts(dry.out);
  ASSERT_GT(counts["io"], 0u);
  ASSERT_GT(counts["published"], 0u);
  ASSERT_GT(counts["checkpoints"], 0u) << "no time-based checkpoint during the run: " << dry.out;

  // Commits and checkpoints are timed, so a run's file-system operations and its wall time
  // vary from run to run: random points are drawn below the fewest operations and inside the
  // shortest wall time of three dry runs (less a tenth), so that nearly every point is reached.
  DryRange range{counts["io"], dry.seconds};
  ASSERT_NO_FATAL_FAILURE(MoreDryRuns(
      root.path(), seed,
      [&](const std::string& dir) {
        return with({"--kill", "none"}, dir + ".acks");
      },
      0, &range));
  const uint64_t random_io = std::max<uint64_t>(range.fewest_io - range.fewest_io / 10, 1);

  // Half the points from outside at random instants, a fifth right after a store became
  // visible, the rest before random file-system operations.
  std::vector<KillPoint> plan;
  std::mt19937_64 rng(seed * 7919);
  const uint64_t dry_us = static_cast<uint64_t>(range.shortest_s * 0.9 * 1e6);
  const uint64_t published = std::min<uint64_t>(points_wanted / 5, counts["published"]);
  for (uint64_t i = 0; i < published; ++i) {
    const uint64_t k = 1 + i * counts["published"] / published;
    plan.push_back(
        {{"--kill", "published", "--at", std::to_string(k)}, 0, "published#" + std::to_string(k)});
  }
  while (plan.size() < points_wanted / 2) {
    const uint64_t k = std::uniform_int_distribution<uint64_t>(1, random_io)(rng);
    plan.push_back({{"--kill", "io", "--at", std::to_string(k)}, 0, "io#" + std::to_string(k)});
  }
  while (plan.size() < points_wanted) {
    const uint64_t us =
        std::uniform_int_distribution<uint64_t>(1000, std::max<uint64_t>(2000, dry_us))(rng);
    plan.push_back({{}, us, "outside@" + std::to_string(us) + "us"});
  }

  uint64_t old_enough = 0, old_restored = 0, young = 0, young_restored = 0, killed = 0;
  uint64_t oldest_lost_ms = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const KillPoint& kp = plan[i];
    const std::string dir = root.path() + "/k" + std::to_string(i);
    const std::string acks = dir + ".acks";
    DriverRun run = RunDriver(dir, seed, with(kp.args, acks), kp.kill_after_us);
    ASSERT_TRUE(run.killed || run.exit_code == 0)
        << kp.label << ": driver exit " << run.exit_code << ": " << run.err;
    killed += run.killed ? 1 : 0;
    // The newest time each prefix returned visible, and the kill's time (a run that completed
    // closed cleanly: everything it published must be there).
    std::vector<uint64_t> visible_ns(w.prefixes.size(), 0);
    uint64_t kill_ns = run.killed ? run.kill_ns : UINT64_MAX;
    {
      std::ifstream in(acks);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string word;
        uint64_t a = 0, b = 0;
        words >> word >> a;
        if (word == "vis" && words >> b && a < visible_ns.size()) {
          visible_ns[a] = std::max(visible_ns[a], b);
        } else if (word == "kill") {
          kill_ns = a;
        }
      }
    }
    if (run.killed) {
      ASSERT_NE(kill_ns, 0u) << kp.label << ": no kill time";
    }
    if (!std::filesystem::exists(dir)) continue;
    const Recovered r = CheckStore(w, dir, kp.label, kAllPacks);
    if (!r.opened) break;
    for (size_t p = 0; p < visible_ns.size(); ++p) {
      if (visible_ns[p] == 0) continue;
      const bool whole = r.hit[p] == w.prefixes[p].size() - 1;
      // The promise is about its first visible return; the newest one is no earlier, so
      // "older than the window" judged by it is conservative.
      if (kill_ns == UINT64_MAX || visible_ns[p] + kWindowNs <= kill_ns) {
        ++old_enough;
        old_restored += whole ? 1 : 0;
        EXPECT_TRUE(whole) << kp.label << ": prefix " << p << " returned visible "
                           << (kill_ns - visible_ns[p]) / 1'000'000 << " ms before the kill, found "
                           << r.hit[p] << " of " << w.prefixes[p].size() - 1 << " tokens";
      } else {
        ++young;
        young_restored += whole ? 1 : 0;
      }
      if (!whole && kill_ns != UINT64_MAX && kill_ns > visible_ns[p]) {
        oldest_lost_ms = std::max(oldest_lost_ms, (kill_ns - visible_ns[p]) / 1'000'000);
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "durability test (periodic:%llu, checkpoint every 100 ms, %llu in the dry run): %zu "
      "points, %llu killed; "
      "publications older than %llu ms at the kill: %llu / %llu restored bit for bit; younger: "
      "%llu / %llu; oldest lost: %llu ms before its kill\n",
      static_cast<unsigned long long>(kPeriodMs),
      static_cast<unsigned long long>(counts["checkpoints"]), plan.size(),
      static_cast<unsigned long long>(killed),
      static_cast<unsigned long long>(kPeriodMs + kCommitAllowanceMs),
      static_cast<unsigned long long>(old_restored), static_cast<unsigned long long>(old_enough),
      static_cast<unsigned long long>(young_restored), static_cast<unsigned long long>(young),
      static_cast<unsigned long long>(oldest_lost_ms));
  EXPECT_GT(old_enough, 0u);
  EXPECT_GT(young, 0u);  // the kills landed inside windows too, or the test proves little
  EXPECT_EQ(old_restored, old_enough);
  // A run faster than every dry run can still finish before an outside kill arrives.
  EXPECT_GE(killed, plan.size() * 8 / 10);
}

}  // namespace
}  // namespace rangekv
