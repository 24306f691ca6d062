// The publication journal end to end at the persistence level (journal_writer.h, the replay in
// persistence.h "Journal replay"): a journaled store reopened dirty keeps every publication
// whose record was durable and whose payload verifies, bit for bit; torn tails, foreign,
// newer and older journals, a flipped payload byte, ENOSPC while appending and EIO on the
// journal's fsync each end as documented, and nothing unproven is ever served.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "persist/journal.h"
#include "persist/journal_format.h"
#include "persist/persistence.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"
#include "testing/tiny_store.h"

namespace rangekv::persist {
namespace {

using ::rangekv::testing::FaultInjectingEnv;
using ::rangekv::testing::FaultKind;
using ::rangekv::testing::FaultOp;
using ::rangekv::testing::FaultRule;
using ::rangekv::testing::TempDir;
using testing::TinyNamespace;
using testing::TinyStore;
using testing::Tokens;

PersistenceOptions Journaled(DurabilityMode mode = DurabilityMode::kEveryPublish) {
  PersistenceOptions o;
  o.journal.mode = mode;
  return o;
}

class JournalRecoveryTest : public ::testing::Test {
 protected:
  JournalRecoveryTest() : paths_(dir_.path()) {}

  // Opens the store (creating it on first use) with a journal.
  Result<TinyStore> Open(bool create, const PersistenceOptions& o = Journaled(),
                         Env* env = nullptr) {
    return TinyStore::Open(env != nullptr ? env : env_, dir_.path(), create, o);
  }
  // Stores a_ and b_ (4 packs) and c_ (its own root, 1 pack), each flushed (acknowledged
  // durable), then "crashes": the store is dropped without SaveClean.
  void MakeDirtyJournaledStore(Env* env = nullptr) {
    Result<TinyStore> s = Open(true, Journaled(), env);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (const auto* t : {&a_, &b_, &c_}) {
      ASSERT_TRUE(s->Store(ns_, *t).ok());
      ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
    }
    ASSERT_TRUE(env_->FileExists(paths_.dirty_marker()));
    ASSERT_TRUE(env_->FileExists(paths_.journal()));
  }
  uint64_t Hit(TinyStore& s, const std::vector<int32_t>& t) {
    Result<uint64_t> h = s.Restore(ns_, t);  // verifies every byte against PayloadByte
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : 0;
  }
  std::string ReadFile(const std::string& path) {
    Result<std::string> r = DefaultEnv()->ReadSmallFile(path, 1 << 30);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : "";
  }
  void WriteFile(const std::string& path, const std::string& data) {
    ASSERT_TRUE(DefaultEnv()->WriteSmallFile(path, data, true).ok());
  }
  // Rewrites the journal's header (re-encoded, valid checksum) with `header`.
  void RewriteHeader(const JournalHeader& header) {
    std::string j = ReadFile(paths_.journal());
    const std::vector<uint8_t> h = EncodeJournalHeader(header);
    j.replace(0, h.size(), std::string(h.begin(), h.end()));
    WriteFile(paths_.journal(), j);
  }
  JournalHeader Header() {
    const std::string j = ReadFile(paths_.journal());
    auto d = DecodeJournal(std::span(reinterpret_cast<const uint8_t*>(j.data()), j.size()));
    EXPECT_TRUE(d.ok());
    return d.ok() ? d->header : JournalHeader{};
  }

  Env* env_ = DefaultEnv();
  TempDir dir_;
  StorePaths paths_;
  NamespaceId ns_ = TinyNamespace();
  std::vector<int32_t> a_ = Tokens(300, 1000);  // 3 packs
  std::vector<int32_t> b_ = [] {                // diverges at 100: 1 more pack
    std::vector<int32_t> t = Tokens(200, 1000);
    for (size_t i = 100; i < t.size(); ++i) t[i] = 50000 + static_cast<int32_t>(i);
    return t;
  }();
  std::vector<int32_t> c_ = Tokens(90, 7000);  // 1 pack
};

TEST_F(JournalRecoveryTest, DirtyReopenReplaysEveryDurablePublicationBitExact) {
  MakeDirtyJournaledStore();
  ScopedLogCapture log;
  Result<TinyStore> s = Open(false);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const RecoveryReport& r = s->index.report;
  EXPECT_EQ(r.outcome, RecoveryOutcome::kLoaded) << r.detail;
  EXPECT_TRUE(r.journal.used);
  EXPECT_EQ(r.journal.base_epoch, 0u);  // the first session started empty
  EXPECT_EQ(r.journal.tail, "clean");
  EXPECT_EQ(r.journal.publishes_kept, 5u);
  EXPECT_EQ(r.journal.dropped(), 0u);
  EXPECT_GT(r.journal.bytes_verified, 0u);
  EXPECT_EQ(r.packs_loaded, 5u);
  EXPECT_TRUE(log.Contains("journal over the empty index"));
  // The replayed index was checkpointed at once: clean, no journal left.
  EXPECT_FALSE(env_->FileExists(paths_.dirty_marker()));
  EXPECT_FALSE(env_->FileExists(paths_.journal()));
  EXPECT_EQ(Hit(*s, a_), a_.size() - 1);
  EXPECT_EQ(Hit(*s, b_), b_.size() - 1);
  EXPECT_EQ(Hit(*s, c_), c_.size() - 1);
  // A second session extends the checkpoint; its own crash is replayed over it.
  const std::vector<int32_t> d = Tokens(50, 9000);
  ASSERT_TRUE(s->Store(ns_, d).ok());
  ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  EXPECT_EQ(Header().base_epoch, r.store_epoch);
  s = Result<TinyStore>(Status(StatusCode::kCancelled, "crash"));
  Result<TinyStore> t = Open(false);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->index.report.journal.used);
  EXPECT_EQ(t->index.report.journal.publishes_kept, 1u);
  EXPECT_EQ(Hit(*t, a_), a_.size() - 1);
  EXPECT_EQ(Hit(*t, d), d.size() - 1);
}

TEST_F(JournalRecoveryTest, PowerLossKeepsTheFlushedPublicationsAndDropsUnprovenOnes) {
  FaultInjectingEnv faults(DefaultEnv());
  {
    // A long period: nothing is committed unless asked for.
    PersistenceOptions o = Journaled(DurabilityMode::kPeriodic);
    o.journal.period_ms = 60000;
    Result<TinyStore> s = Open(true, o, &faults);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());  // acknowledged durable
    ASSERT_TRUE(s->Store(ns_, c_).ok());                         // not acknowledged
    // Power loss: c_'s payload (never fsynced) is gone. (The store's destructor then still
    // commits c_'s record: a record whose payload is not there, which replay must drop.)
    ASSERT_TRUE(faults.DropUnsyncedData().ok());
  }
  Result<TinyStore> s = Open(false, Journaled(), &faults);
  ASSERT_TRUE(s.ok());
  const JournalReplayReport& j = s->index.report.journal;
  EXPECT_TRUE(j.used) << j.ignored << ": " << j.detail;
  EXPECT_EQ(j.publishes_kept, 3u);
  EXPECT_LE(j.dropped_unverified, 1u);
  EXPECT_EQ(Hit(*s, a_), a_.size() - 1);
  EXPECT_EQ(Hit(*s, c_), 0u);
}

TEST_F(JournalRecoveryTest, TornTailAtEveryCutKeepsTheIntactPrefixAndServesNothingWrong) {
  MakeDirtyJournaledStore();
  const std::string journal = ReadFile(paths_.journal());
  const std::string pack = ReadFile(paths_.pack());
  const std::string epoch = ReadFile(paths_.epoch());
  uint64_t previous_kept = 0;
  int torn = 0;
  // Cuts from just after the header to the full length: every byte of the first records (the
  // epoch record and the start of the first publish), then a stride that lands inside every
  // later record's header, payload or checksum, then the whole file.
  std::vector<size_t> cuts;
  for (size_t c = journal_format::kFileHeaderBytes; c < journal.size(); c += c < 160 ? 1 : 173) {
    cuts.push_back(c);
  }
  cuts.push_back(journal.size());
  for (const size_t cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    WriteFile(paths_.pack(), pack);
    WriteFile(paths_.epoch(), epoch);
    WriteFile(paths_.journal(), journal.substr(0, cut));
    WriteFile(paths_.dirty_marker(), "x");
    Result<TinyStore> s = Open(false, Journaled(DurabilityMode::kNone));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const JournalReplayReport& j = s->index.report.journal;
    ASSERT_TRUE(j.used) << j.ignored << ": " << j.detail;
    torn += j.tail == "torn" ? 1 : 0;
    EXPECT_EQ(j.dropped(), 0u);
    EXPECT_GE(j.publishes_kept, previous_kept);  // a longer prefix never keeps less
    previous_kept = j.publishes_kept;
    // Whatever is found is exact (Restore compares every byte); what is lost misses.
    const uint64_t ha = Hit(*s, a_), hb = Hit(*s, b_), hc = Hit(*s, c_);
    EXPECT_TRUE(ha == 0 || ha == 128 || ha == 256 || ha == a_.size() - 1) << ha;
    EXPECT_TRUE(hb == 0 || hb == 100 || hb == b_.size() - 1) << hb;
    EXPECT_TRUE(hc == 0 || hc == c_.size() - 1) << hc;
    // The SaveClean at open removed the marker and the journal: put nothing back implicitly.
    s = Result<TinyStore>(Status(StatusCode::kCancelled, "next cut"));
  }
  EXPECT_GT(torn, 0);
  EXPECT_EQ(previous_kept, 5u);
}

TEST_F(JournalRecoveryTest, JournalOfAnotherStoreIsIgnoredWhole) {
  MakeDirtyJournaledStore();
  JournalHeader h = Header();
  h.store_uuid.lo ^= 1;
  RewriteHeader(h);
  ScopedLogCapture log;
  Result<TinyStore> s = Open(false);
  ASSERT_TRUE(s.ok());
  const RecoveryReport& r = s->index.report;
  EXPECT_EQ(r.outcome, RecoveryOutcome::kStartedEmpty);
  EXPECT_EQ(r.reason, DiscardReason::kDirty);
  EXPECT_EQ(r.journal.ignored, "foreign_store");
  EXPECT_FALSE(r.journal.used);
  EXPECT_TRUE(log.Contains("journal ignored (foreign_store)"));
  EXPECT_EQ(Hit(*s, a_), 0u);
}

TEST_F(JournalRecoveryTest, JournalNewerThanItsSnapshotIsIgnoredAndOlderLoadsTheSnapshot) {
  // Sessions 1 and 2 clean (the snapshot of epoch 2), session 3 journaled over it, dirty.
  {
    Result<TinyStore> s = Open(true);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->SaveClean().ok());
  }
  {
    Result<TinyStore> s = Open(false);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->SaveClean().ok());
  }
  uint64_t snapshot_epoch = 0;
  {
    Result<TinyStore> s = Open(false);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->index.report.outcome, RecoveryOutcome::kLoaded);
    ASSERT_TRUE(s->Store(ns_, c_).ok());
    ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  }
  const JournalHeader h = Header();
  {
    const std::string raw = ReadFile(paths_.snapshot());
    auto snap = DecodeSnapshot(std::span(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
    ASSERT_TRUE(snap.ok());
    snapshot_epoch = snap->store_epoch;
  }
  ASSERT_EQ(h.base_epoch, snapshot_epoch);
  const std::string journal = ReadFile(paths_.journal());
  const std::string pack = ReadFile(paths_.pack());
  const std::string snapshot = ReadFile(paths_.snapshot());

  // Newer: the snapshot it extends is gone -> ignored, start empty.
  RewriteHeader({h.store_uuid, snapshot_epoch + 5});
  {
    Result<TinyStore> s = Open(false);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->index.report.journal.ignored, "newer_than_snapshot");
    EXPECT_EQ(s->index.report.outcome, RecoveryOutcome::kStartedEmpty);
    EXPECT_EQ(Hit(*s, a_), 0u);
    EXPECT_EQ(Hit(*s, c_), 0u);
  }
  // Older: a checkpoint wrote the snapshot from it -> the snapshot alone is loaded.
  WriteFile(paths_.pack(), pack);
  WriteFile(paths_.snapshot(), snapshot);
  WriteFile(paths_.journal(), journal);
  WriteFile(paths_.dirty_marker(), "x");
  RewriteHeader({h.store_uuid, snapshot_epoch - 1});
  {
    Result<TinyStore> s = Open(false);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->index.report.journal.ignored, "older_than_snapshot");
    EXPECT_EQ(s->index.report.outcome, RecoveryOutcome::kLoaded);
    EXPECT_EQ(Hit(*s, a_), a_.size() - 1);
    EXPECT_EQ(Hit(*s, c_), 0u);
  }
  // Equal (the real file): snapshot + journal.
  WriteFile(paths_.pack(), pack);
  WriteFile(paths_.snapshot(), snapshot);
  WriteFile(paths_.journal(), journal);
  WriteFile(paths_.dirty_marker(), "x");
  Result<TinyStore> s = Open(false);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->index.report.journal.used);
  EXPECT_EQ(Hit(*s, a_), a_.size() - 1);
  EXPECT_EQ(Hit(*s, c_), c_.size() - 1);
}

TEST_F(JournalRecoveryTest, UnverifiedPayloadIsDroppedWithEverythingBelowIt) {
  MakeDirtyJournaledStore();
  std::string pack = ReadFile(paths_.pack());
  const std::string journal = ReadFile(paths_.journal());
  uint64_t at = 0;
  {
    // Learn where slot 0 (a_'s first pack, which b_ continues from too) lies; this open
    // replays and checkpoints, so the journal and the marker are put back below.
    Result<TinyStore> probe = Open(false, Journaled(DurabilityMode::kNone));
    ASSERT_TRUE(probe.ok());
    at = probe->pack->Address(0, 1, 3);
  }
  pack[at] ^= 0x10;
  WriteFile(paths_.pack(), pack);
  WriteFile(paths_.journal(), journal);
  WriteFile(paths_.dirty_marker(), "x");
  ScopedLogCapture log;
  Result<TinyStore> s = Open(false, Journaled(DurabilityMode::kNone));
  ASSERT_TRUE(s.ok());
  const JournalReplayReport& j = s->index.report.journal;
  EXPECT_TRUE(j.used);
  EXPECT_EQ(j.dropped_unverified, 1u);
  EXPECT_EQ(j.dropped_parent, 3u);  // a_'s two later packs and b_'s tail
  EXPECT_EQ(j.publishes_kept, 1u);  // c_
  EXPECT_TRUE(log.Contains("payload digest mismatch"));
  EXPECT_EQ(Hit(*s, a_), 0u);
  EXPECT_EQ(Hit(*s, b_), 0u);
  EXPECT_EQ(Hit(*s, c_), c_.size() - 1);
}

TEST_F(JournalRecoveryTest, NoSpaceWhileAppendingEndsJournalingAndTheNextCrashDiscards) {
  FaultInjectingEnv faults(DefaultEnv());
  Result<TinyStore> s = Open(true, Journaled(), &faults);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Store(ns_, a_).ok());
  ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  // The journal file was opened under its temporary name (then renamed).
  faults.AddRule(
      FaultRule{.path = paths_.journal_temp(), .op = FaultOp::kWrite, .kind = FaultKind::kNoSpace});
  ASSERT_TRUE(s->Store(ns_, c_).ok());  // visible in memory
  const Status flushed = s->index.persistence->journal()->Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kNoSpace) << flushed.ToString();
  EXPECT_EQ(s->index.persistence->journal()->stats().failures, 1u);
  EXPECT_FALSE(env_->FileExists(paths_.journal()));  // abandoned: nothing can be replayed
  // The session keeps serving.
  EXPECT_EQ(Hit(*s, c_), c_.size() - 1);
  s = Result<TinyStore>(Status(StatusCode::kCancelled, "crash"));
  Result<TinyStore> t = Open(false);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->index.report.reason, DiscardReason::kDirty);
  EXPECT_FALSE(t->index.report.journal.present);
  EXPECT_EQ(Hit(*t, a_), 0u);
  EXPECT_EQ(Hit(*t, c_), 0u);
}

TEST_F(JournalRecoveryTest, IoErrorOnTheJournalFsyncIsNeverAcknowledged) {
  FaultInjectingEnv faults(DefaultEnv());
  Result<TinyStore> s = Open(true, Journaled(), &faults);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Store(ns_, a_).ok());
  ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  faults.FailEnvOp(::rangekv::testing::EnvOp::kSync, StatusCode::kIoError, 1,
                   paths_.journal_temp());
  ASSERT_TRUE(s->Store(ns_, c_).ok());
  const Status flushed = s->index.persistence->journal()->Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kIoError) << flushed.ToString();
  EXPECT_FALSE(s->index.persistence->journal()->status().ok());
  EXPECT_EQ(s->index.persistence->journal()->stats().failures, 1u);
  EXPECT_FALSE(env_->FileExists(paths_.journal()));
}

TEST_F(JournalRecoveryTest, CheckpointPastTheBoundFoldsTheJournalIntoTheSnapshot) {
  PersistenceOptions o = Journaled();
  o.journal.max_bytes = 512;  // every commit past the first crosses it
  Result<TinyStore> s = Open(true, o);
  ASSERT_TRUE(s.ok());
  s->index.persistence->EnableCheckpoints(*s->pack, *s->index.directory, *s->index.digests);
  for (const auto* t : {&a_, &b_, &c_}) {
    ASSERT_TRUE(s->Store(ns_, *t).ok());
    ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  }
  // One more commit so the last bound crossing is acted on.
  const std::vector<int32_t> d = Tokens(40, 12000);
  ASSERT_TRUE(s->Store(ns_, d).ok());
  ASSERT_TRUE(s->index.persistence->journal()->Flush().ok());
  EXPECT_GT(s->index.persistence->journal()->stats().checkpoints, 0u);
  EXPECT_EQ(Header().base_epoch, s->index.report.store_epoch);
  s = Result<TinyStore>(Status(StatusCode::kCancelled, "crash"));
  Result<TinyStore> t = Open(false);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->index.report.journal.used) << t->index.report.journal.ignored;
  EXPECT_EQ(Hit(*t, a_), a_.size() - 1);
  EXPECT_EQ(Hit(*t, b_), b_.size() - 1);
  EXPECT_EQ(Hit(*t, c_), c_.size() - 1);
  EXPECT_EQ(Hit(*t, d), d.size() - 1);
}

// The time-based bound (JournalOptions::checkpoint_interval_ms): a journal that holds records
// past the interval is folded into a new snapshot without any store waiting on it, an empty one
// is left alone, and what was published before and after the checkpoint survives a crash.
TEST_F(JournalRecoveryTest, CheckpointAfterTheIntervalFoldsTheJournalIntoTheSnapshot) {
  PersistenceOptions o = Journaled();
  o.journal.checkpoint_interval_ms = 50;
  Result<TinyStore> s = Open(true, o);
  ASSERT_TRUE(s.ok());
  JournalWriter* journal = s->index.persistence->journal();
  s->index.persistence->EnableCheckpoints(*s->pack, *s->index.directory, *s->index.digests);
  // Only the epoch record: nothing to fold, however long it waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(journal->stats().checkpoints, 0u);
  ASSERT_TRUE(s->Store(ns_, a_).ok());
  ASSERT_TRUE(journal->Flush().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (journal->stats().checkpoints == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(journal->stats().checkpoints, 1u);
  EXPECT_EQ(Header().base_epoch, s->index.report.store_epoch);
  // The new journal holds the epoch record only until the next publication.
  ASSERT_TRUE(s->Store(ns_, c_).ok());
  ASSERT_TRUE(journal->Flush().ok());
  s = Result<TinyStore>(Status(StatusCode::kCancelled, "crash"));
  Result<TinyStore> t = Open(false);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->index.report.journal.used) << t->index.report.journal.ignored;
  EXPECT_EQ(Hit(*t, a_), a_.size() - 1);  // from the checkpoint's snapshot
  EXPECT_EQ(Hit(*t, c_), c_.size() - 1);  // from the journal after it
}

// A removal is committed at once, whatever the period (JournalWriter "Group commit"): the slot
// it frees is about to be reused, and the reusing store's first write waits for the removal to
// be durable, so the commit must start at the eviction rather than at that write. Here the
// period is a minute and nothing waits; the commit still comes.
TEST_F(JournalRecoveryTest, ARemovalIsCommittedAtOnceWithoutAWaiter) {
  PersistenceOptions o = Journaled(DurabilityMode::kPeriodic);
  o.journal.period_ms = 60000;
  Result<TinyStore> s = TinyStore::Open(env_, dir_.path(), true, o, /*pack_count=*/4);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JournalWriter* journal = s->index.persistence->journal();
  ASSERT_TRUE(s->Store(ns_, a_).ok());  // 3 of the 4 slots
  ASSERT_TRUE(journal->Flush().ok());
  const uint64_t commits = journal->stats().commits;
  const std::vector<int32_t> d = Tokens(200, 20000);  // 2 packs: evicts one of a_'s
  ASSERT_TRUE(s->Store(ns_, d).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (journal->stats().commits == commits && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(journal->stats().commits, commits) << "the removal waited for the period";
}

}  // namespace
}  // namespace rangekv::persist
