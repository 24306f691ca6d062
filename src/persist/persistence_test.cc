#include "persist/persistence.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/coding.h"
#include "base/digest.h"
#include "base/log.h"
#include "env/posix_env.h"
#include "persist/snapshot_format.h"
#include "persist/store_layout.h"
#include "testing/dir_journal_env.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"
#include "testing/tiny_store.h"

namespace rangekv::persist {
namespace {

using ::rangekv::testing::EnvOp;
using ::rangekv::testing::FaultInjectingEnv;
using ::rangekv::testing::TempDir;
using testing::DirJournalEnv;
using testing::TinyNamespace;
using testing::TinyStore;
using testing::Tokens;

std::string ReadAll(const std::string& path) {
  Result<std::string> r = DefaultEnv()->ReadSmallFile(path, 1 << 30);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::string();
}
void WriteAll(const std::string& path, const std::string& data) {
  ASSERT_TRUE(DefaultEnv()->WriteSmallFile(path, data, true).ok());
}

// Decodes the store's snapshot, lets `edit` change it, and writes it back validly encoded.
template <typename Edit>
void EditSnapshot(const StorePaths& paths, Edit edit) {
  const std::string raw = ReadAll(paths.snapshot());
  Result<Snapshot> s =
      DecodeSnapshot(std::span(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  edit(*s);
  const std::vector<uint8_t> bytes = EncodeSnapshot(*s);
  WriteAll(paths.snapshot(), std::string(bytes.begin(), bytes.end()));
}

class PersistenceTest : public ::testing::Test {
 protected:
  PersistenceTest() : paths_(dir_.path()) {}

  // Session 1 of a store: two prefixes that share 100 tokens and diverge, saved cleanly.
  void MakeCleanStore() {
    Result<TinyStore> s = TinyStore::Open(env_, dir_.path(), /*create=*/true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->Store(ns_, b_).ok());
    ASSERT_TRUE(s->SaveClean().ok());
    first_epoch_ = s->index.persistence->store_epoch();
  }

  Result<TinyStore> Reopen(const PersistenceOptions& o = {}) {
    return TinyStore::Open(env_, dir_.path(), /*create=*/false, o);
  }

  // Expects a reopen that started empty for `reason`, logged at kWarning with its name.
  void ExpectDiscard(DiscardReason reason) {
    ScopedLogCapture log;
    Result<TinyStore> s = Reopen();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const RecoveryReport& r = s->index.report;
    EXPECT_EQ(r.outcome, RecoveryOutcome::kStartedEmpty);
    EXPECT_EQ(r.reason, reason) << DiscardReasonName(r.reason) << ": " << r.detail;
    EXPECT_TRUE(log.Contains("index discarded (" + std::string(DiscardReasonName(reason)) + ")"))
        << r.detail;
    // Nothing old is served: the prefixes miss.
    Result<uint64_t> hit = s->Restore(ns_, a_);
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(*hit, 0u);
    EXPECT_GT(r.store_epoch, first_epoch_);
    EXPECT_EQ(s->index.directory->owner_epoch(), r.store_epoch);
  }

  Env* env_ = DefaultEnv();
  TempDir dir_;
  StorePaths paths_;
  NamespaceId ns_ = TinyNamespace();
  // 300 tokens (3 packs: 128 + 128 + 44) and a branch diverging at token 100.
  std::vector<int32_t> a_ = Tokens(300, 1000);
  std::vector<int32_t> b_ = [] {
    std::vector<int32_t> t = Tokens(200, 1000);
    for (size_t i = 100; i < t.size(); ++i) t[i] = 50000 + static_cast<int32_t>(i);
    return t;
  }();
  uint64_t first_epoch_ = 0;
};

TEST_F(PersistenceTest, NewStoreStartsEmptyQuietly) {
  ScopedLogCapture log;
  Result<TinyStore> s = TinyStore::Open(env_, dir_.path(), true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->index.report.reason, DiscardReason::kNewStore);
  EXPECT_EQ(s->index.report.store_epoch, 1u);
  EXPECT_EQ(s->index.report.generation_floor, uint64_t{1} << 32);
  EXPECT_TRUE(env_->FileExists(paths_.epoch()));
  EXPECT_FALSE(env_->FileExists(paths_.dirty_marker()));  // only MarkDirty creates it
}

TEST_F(PersistenceTest, CleanReopenRestoresEveryPrefixBitExact) {
  MakeCleanStore();
  EXPECT_FALSE(env_->FileExists(paths_.dirty_marker()));
  EXPECT_FALSE(env_->FileExists(paths_.snapshot_temp()));
  Result<TinyStore> s = Reopen();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const RecoveryReport& r = s->index.report;
  EXPECT_EQ(r.outcome, RecoveryOutcome::kLoaded) << r.detail;
  EXPECT_EQ(r.reason, DiscardReason::kNone);
  EXPECT_EQ(r.packs_loaded, 4u);  // 3 for a_, 1 for b_'s tail
  EXPECT_EQ(r.store_epoch, first_epoch_ + 1);
  EXPECT_EQ(r.previous_epoch, first_epoch_);
  EXPECT_EQ(s->index.directory->owner_epoch(), r.store_epoch);
  Result<uint64_t> hit = s->Restore(ns_, a_);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(*hit, a_.size() - 1);
  hit = s->Restore(ns_, b_);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(*hit, b_.size() - 1);
  EXPECT_TRUE(s->index.directory->CheckInvariants().ok());
  // A second clean cycle keeps it all and adds more.
  ASSERT_TRUE(s->Store(ns_, Tokens(50, 7)).ok());
  ASSERT_TRUE(s->SaveClean().ok());
  s = Reopen();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->index.report.packs_loaded, 5u);
  EXPECT_EQ(*s->Restore(ns_, Tokens(50, 7)), 49u);
  EXPECT_EQ(*s->Restore(ns_, a_), a_.size() - 1);
}

TEST_F(PersistenceTest, ReadOnlySessionKeepsTheSnapshotAcrossACrash) {
  MakeCleanStore();
  {
    Result<TinyStore> s = Reopen();  // no MarkDirty, no SaveClean: "crashes"
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s->Restore(ns_, a_), a_.size() - 1);
  }
  Result<TinyStore> s = Reopen();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->index.report.outcome, RecoveryOutcome::kLoaded);
  EXPECT_EQ(s->index.report.store_epoch, first_epoch_ + 2);  // the crashed session's epoch is used
}

TEST_F(PersistenceTest, DirtyMarkerDiscardsWithLoggedReason) {
  MakeCleanStore();
  {
    Result<TinyStore> s = Reopen();
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, Tokens(40, 90000)).ok());  // marks dirty; no clean close
    EXPECT_TRUE(env_->FileExists(paths_.dirty_marker()));
  }
  ExpectDiscard(DiscardReason::kDirty);
  // Still dirty until a clean close: a second reopen discards again.
  ExpectDiscard(DiscardReason::kDirty);
}

TEST_F(PersistenceTest, MissingSnapshotDiscards) {
  MakeCleanStore();
  ASSERT_TRUE(env_->DeleteFile(paths_.snapshot()).ok());
  ExpectDiscard(DiscardReason::kMissingSnapshot);
}

TEST_F(PersistenceTest, FlippedSnapshotByteIsDetected) {
  MakeCleanStore();
  std::string raw = ReadAll(paths_.snapshot());
  raw[raw.size() / 2] ^= 0x04;
  WriteAll(paths_.snapshot(), raw);
  ExpectDiscard(DiscardReason::kCorruptChecksum);
}

TEST_F(PersistenceTest, TruncatedSnapshotIsDetected) {
  MakeCleanStore();
  std::string raw = ReadAll(paths_.snapshot());
  WriteAll(paths_.snapshot(), raw.substr(0, raw.size() - 9));
  ExpectDiscard(DiscardReason::kTruncated);
  WriteAll(paths_.snapshot(), "");
  ExpectDiscard(DiscardReason::kTruncated);
}

TEST_F(PersistenceTest, GarbageSnapshotIsMalformed) {
  MakeCleanStore();
  WriteAll(paths_.snapshot(), std::string(4096, 'x'));
  ExpectDiscard(DiscardReason::kMalformed);
}

TEST_F(PersistenceTest, WrongVersionIsDetected) {
  MakeCleanStore();
  std::string raw = ReadAll(paths_.snapshot());
  raw[snapshot_format::kVersionField.offset] = 9;
  WriteAll(paths_.snapshot(), raw);
  ExpectDiscard(DiscardReason::kWrongVersion);
}

TEST_F(PersistenceTest, SnapshotOfAnotherPackFileIsDetected) {
  MakeCleanStore();
  // Another store with the same geometry and namespace: its snapshot names another UUID.
  TempDir other;
  {
    Result<TinyStore> s = TinyStore::Open(env_, other.path(), true);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->SaveClean().ok());
  }
  WriteAll(paths_.snapshot(), ReadAll(StorePaths(other.path()).snapshot()));
  ExpectDiscard(DiscardReason::kWrongStoreUuid);
}

TEST_F(PersistenceTest, OtherGeometryOrNamespaceIsDetected) {
  MakeCleanStore();
  const std::string good = ReadAll(paths_.snapshot());
  EditSnapshot(paths_, [](Snapshot& s) { s.identity.geometry.block_size = 32; });
  ExpectDiscard(DiscardReason::kWrongGeometry);
  WriteAll(paths_.snapshot(), good);
  EditSnapshot(paths_, [](Snapshot& s) { s.identity.namespace_id.lo ^= 1; });
  ExpectDiscard(DiscardReason::kWrongNamespace);
  WriteAll(paths_.snapshot(), good);
  EditSnapshot(paths_, [](Snapshot& s) { s.identity.pack_creation_time_unix_ns += 1; });
  ExpectDiscard(DiscardReason::kPackLayoutMismatch);
}

TEST_F(PersistenceTest, TruncatedPackFileIsDetected) {
  MakeCleanStore();
  Result<uint64_t> size = [&]() -> Result<uint64_t> {
    RANGEKV_ASSIGN_OR_RETURN(auto f, env_->OpenFile(paths_.pack(), {}));
    return f->Size();
  }();
  ASSERT_TRUE(size.ok());
  {
    auto f = env_->OpenFile(paths_.pack(), {});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Truncate(*size - 4096).ok());
  }
  // The pack file itself no longer opens: its payload region is cut short.
  Result<TinyStore> s = Reopen();
  EXPECT_EQ(s.status().code(), StatusCode::kTruncated) << s.status().ToString();
  // Grown back (a zero tail where payload was): it opens, but the snapshot no longer binds.
  {
    auto f = env_->OpenFile(paths_.pack(), {});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Truncate(*size + 4096).ok());
  }
  ExpectDiscard(DiscardReason::kPackSizeMismatch);
}

TEST_F(PersistenceTest, CorruptDirectorySectionIsRejected) {
  MakeCleanStore();
  EditSnapshot(paths_, [](Snapshot& s) { s.directory[s.directory.size() / 2] ^= 0x40; });
  ExpectDiscard(DiscardReason::kDirectoryRejected);
}

TEST_F(PersistenceTest, VisiblePackWithoutDigestsIsInconsistent) {
  MakeCleanStore();
  EditSnapshot(paths_, [](Snapshot& s) { s.digests.pop_back(); });
  ExpectDiscard(DiscardReason::kInconsistent);
}

TEST_F(PersistenceTest, OversizedSnapshotIsRefusedBeforeAllocating) {
  MakeCleanStore();
  {
    auto f = env_->OpenFile(paths_.snapshot(), {});
    ASSERT_TRUE(f.ok());
    // Sparse: no disk space used.
    ASSERT_TRUE((*f)->Truncate(snapshot_format::kMaxSnapshotBytes + 1).ok());
  }
  ExpectDiscard(DiscardReason::kMalformed);
}

TEST_F(PersistenceTest, EpochsAndTicketsNeverCrossADiscard) {
  Result<TinyStore> s1 = TinyStore::Open(env_, dir_.path(), true);
  ASSERT_TRUE(s1.ok());
  ASSERT_TRUE(s1->Store(ns_, a_).ok());
  const Envelope env{.request_id = "r1", .session = 1, .attempt = 0, .rank = 0};
  Result<Ticket> old_ticket = s1->index.directory->Lookup(ns_, a_, env, 1);
  ASSERT_TRUE(old_ticket.ok());
  ASSERT_FALSE(old_ticket->empty());
  const uint64_t epoch1 = s1->index.report.store_epoch;
  uint64_t max_gen1 = 0;
  for (const SlotInfo& si : s1->index.directory->Slots())
    max_gen1 = std::max(max_gen1, si.generation);
  s1 = Status(StatusCode::kAborted, "crash");  // the session dies dirty

  uint64_t last_epoch = epoch1;
  uint64_t last_floor = epoch1 << 32;
  for (int round = 0; round < 3; ++round) {
    Result<TinyStore> s = Reopen();
    ASSERT_TRUE(s.ok());
    const RecoveryReport& r = s->index.report;
    EXPECT_EQ(r.outcome, RecoveryOutcome::kStartedEmpty);
    EXPECT_GT(r.store_epoch, last_epoch);
    EXPECT_GT(r.generation_floor, last_floor);
    EXPECT_GT(r.generation_floor, max_gen1);
    // A ticket of the crashed session is refused before anything else is looked at.
    Result<ClaimedRange> c = s->index.directory->Claim(ns_, *old_ticket, env, a_, 10);
    EXPECT_EQ(c.status().code(), StatusCode::kForeignOwner) << c.status().ToString();
    last_epoch = r.store_epoch;
    last_floor = r.generation_floor;
    ASSERT_TRUE(s->Store(ns_, a_).ok());  // dirty again
    // Every generation the new session issued lies above the floor, so above anything old.
    uint32_t visible = 0;
    for (const SlotInfo& si : s->index.directory->Slots()) {
      if (si.state != SlotState::kVisible) continue;
      ++visible;
      EXPECT_GE(si.generation, r.generation_floor);
    }
    EXPECT_GT(visible, 0u);
  }
}

TEST_F(PersistenceTest, MissingOrCorruptEpochFileFallsBackToTheClock) {
  MakeCleanStore();
  constexpr uint64_t kNow = 1'800'000'000ull * 1'000'000'000ull;
  PersistenceOptions o;
  o.now_unix_ns = [] { return kNow; };
  ASSERT_TRUE(env_->DeleteFile(paths_.epoch()).ok());
  {
    ScopedLogCapture log;
    Result<TinyStore> s = Reopen(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->index.report.outcome, RecoveryOutcome::kLoaded);  // the snapshot is still good
    EXPECT_EQ(s->index.report.store_epoch, 1'800'000'000u);
    EXPECT_TRUE(s->index.report.epoch_from_clock);
    EXPECT_TRUE(log.Contains("epoch file missing"));
  }
  WriteAll(paths_.epoch(), "garbage");
  Result<TinyStore> s = Reopen(o);
  ASSERT_TRUE(s.ok());
  // The clock did not move, but the snapshot's epoch still forces progress.
  EXPECT_GE(s->index.report.store_epoch, 1'800'000'000u);
  Result<uint64_t> decoded = DecodeEpochFile(ReadAll(paths_.epoch()));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, s->index.report.store_epoch);
}

TEST_F(PersistenceTest, EpochFileCodecRejectsDamage) {
  const std::string good = EncodeEpochFile(42, StoreUuid{1, 2});
  ASSERT_EQ(good.size(), kEpochFileBytes);
  EXPECT_EQ(*DecodeEpochFile(good), 42u);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 1;
    EXPECT_FALSE(DecodeEpochFile(bad).ok()) << i;
  }
  EXPECT_EQ(DecodeEpochFile(good.substr(0, 20)).status().code(), StatusCode::kTruncated);
  EXPECT_FALSE(DecodeEpochFile(EncodeEpochFile(0, {})).ok());
  EXPECT_FALSE(DecodeEpochFile(EncodeEpochFile(snapshot_format::kMaxStoreEpoch + 1, {})).ok());
}

TEST_F(PersistenceTest, EpochThatCannotBeMadeDurableFailsTheOpen) {
  MakeCleanStore();
  FaultInjectingEnv fault(env_);
  fault.FailEnvOp(EnvOp::kSyncDir, StatusCode::kIoError, 1);
  Result<TinyStore> s = TinyStore::Open(&fault, dir_.path(), false);
  EXPECT_EQ(s.status().code(), StatusCode::kIoError) << s.status().ToString();
}

TEST_F(PersistenceTest, MarkDirtyFailureIsReportedAndRetried) {
  MakeCleanStore();
  FaultInjectingEnv fault(env_);
  Result<TinyStore> s = TinyStore::Open(&fault, dir_.path(), false);
  ASSERT_TRUE(s.ok());
  fault.FailEnvOp(EnvOp::kSyncDir, StatusCode::kIoError, 1);
  EXPECT_EQ(s->index.persistence->MarkDirty().code(), StatusCode::kIoError);
  EXPECT_FALSE(s->index.persistence->marked_dirty());
  EXPECT_EQ(s->Store(ns_, Tokens(10, 5)).code(), StatusCode::kOk);  // retried inside Store
  EXPECT_TRUE(s->index.persistence->marked_dirty());
  ASSERT_TRUE(s->SaveClean().ok());
  EXPECT_FALSE(s->index.persistence->marked_dirty());  // clean: the next write must mark again
  fault.FailEnvOp(EnvOp::kSync, StatusCode::kNoSpace, 1);
  EXPECT_EQ(s->index.persistence->MarkDirty().code(), StatusCode::kNoSpace);
  EXPECT_EQ(s->Store(ns_, Tokens(10, 9)).code(), StatusCode::kOk);
}

TEST_F(PersistenceTest, SaveWithoutDigestsFailsAndLeavesTheStoreDirty) {
  Result<TinyStore> s = TinyStore::Open(env_, dir_.path(), true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Store(ns_, a_).ok());
  const SlotInfo slot0 = s->index.directory->Slot(0);
  s->index.digests->Drop(0, slot0.generation);
  const Status st = s->SaveClean();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_TRUE(env_->FileExists(paths_.dirty_marker()));
  first_epoch_ = s->index.report.store_epoch;
  ExpectDiscard(DiscardReason::kDirty);
}

TEST_F(PersistenceTest, SaveCleanIOErrorsKeepTheMarker) {
  for (EnvOp op : {EnvOp::kCreate, EnvOp::kSync, EnvOp::kRename, EnvOp::kSyncDir}) {
    TempDir d;
    FaultInjectingEnv fault(env_);
    Result<TinyStore> s = TinyStore::Open(&fault, d.path(), true);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    fault.FailEnvOp(op, StatusCode::kIoError, 1);
    EXPECT_EQ(s->SaveClean().code(), StatusCode::kIoError) << static_cast<int>(op);
    EXPECT_TRUE(env_->FileExists(StorePaths(d.path()).dirty_marker()));
  }
  // ENOSPC while writing the snapshot.
  TempDir d;
  FaultInjectingEnv fault(env_);
  Result<TinyStore> s = TinyStore::Open(&fault, d.path(), true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Store(ns_, a_).ok());
  fault.SetSpaceLimit(100);
  EXPECT_EQ(s->SaveClean().code(), StatusCode::kNoSpace);
  EXPECT_TRUE(env_->FileExists(StorePaths(d.path()).dirty_marker()));
}

TEST_F(PersistenceTest, FlippedPayloadByteFailsVerificationNamingTheRecord) {
  MakeCleanStore();
  Result<TinyStore> s = Reopen();
  ASSERT_TRUE(s.ok());
  // Token 5 of a_'s first pack, layer 1.
  const std::vector<StoredPack> packs = s->index.directory->ListPacks(ns_);
  ASSERT_FALSE(packs.empty());
  const PackRecord first = packs[0].record;
  ASSERT_EQ(first.path_token_begin, 0u);
  const uint64_t at = s->pack->Address(first.pack_slot, 1, 5) + 3;
  uint8_t byte = 0;
  ASSERT_EQ(*s->pack->file()->ReadAt(at, &byte, 1), 1u);
  byte ^= 0x20;
  ASSERT_EQ(*s->pack->file()->WriteAt(at, &byte, 1), 1u);
  Result<uint64_t> hit = s->Restore(ns_, a_);
  EXPECT_EQ(hit.status().code(), StatusCode::kCorruption);
  EXPECT_NE(hit.status().message().find("pack slot " + std::to_string(first.pack_slot) +
                                        " generation " + std::to_string(first.generation) +
                                        " layer 1 pack tokens [0, 16)"),
            std::string::npos)
      << hit.status().ToString();
}

// ---- power loss ---------------------------------------------------------------------------------

// Power loss at every step of the clean-shutdown sequence (and before it), with every subset of
// the directory-entry operations not yet made durable surviving. The reopen must either load the
// complete new state or discard; loading the previous clean snapshot would describe payload that
// session 2 overwrote (it reuses session 1's slots).
TEST_F(PersistenceTest, PowerLossAtEveryShutdownStepLoadsNewStateOrDiscards) {
  const std::vector<int32_t> c = Tokens(200, 70000);
  int loaded = 0, discarded = 0, cases = 0;
  for (int step = -1; step < kShutdownStepCount; ++step) {
    for (uint64_t mask = 0;; ++mask) {
      SCOPED_TRACE("crash after step " +
                   (step < 0 ? std::string("none (before SaveClean)")
                             : std::string(ShutdownStepName(static_cast<ShutdownStep>(step)))) +
                   ", surviving entry ops mask " + std::to_string(mask));
      TempDir d;
      FaultInjectingEnv fault(env_);
      DirJournalEnv journal(&fault);
      {
        // Session 1: a clean store holding a_.
        Result<TinyStore> s = TinyStore::Open(&journal, d.path(), true);
        ASSERT_TRUE(s.ok());
        ASSERT_TRUE(s->Store(ns_, a_).ok());
        ASSERT_TRUE(s->SaveClean().ok());
      }
      size_t pending = 0;
      {
        // Session 2: invalidates a_, stores b_ and c into a_'s old slots, shuts down and loses
        // power right after `step`.
        PersistenceOptions o;
        if (step >= 0) {
          const auto stop = static_cast<ShutdownStep>(step);
          o.shutdown_hook = [stop](ShutdownStep at) {
            return at == stop ? Status(StatusCode::kAborted, "power loss") : OkStatus();
          };
        }
        Result<TinyStore> s = TinyStore::Open(&journal, d.path(), false, o);
        ASSERT_TRUE(s.ok());
        ASSERT_EQ(s->index.report.outcome, RecoveryOutcome::kLoaded);
        ASSERT_TRUE(s->index.persistence->MarkDirty().ok());
        ASSERT_TRUE(s->index.directory->InvalidatePrefix(ns_, std::span(a_).first(1)).ok());
        ASSERT_TRUE(s->Store(ns_, b_).ok());
        ASSERT_TRUE(s->Store(ns_, c).ok());
        if (step >= 0) {
          EXPECT_EQ(s->SaveClean().code(), StatusCode::kAborted);
        }
        pending = journal.Pending().size();
        ASSERT_TRUE(fault.DropUnsyncedData().ok());
        ASSERT_TRUE(journal.Crash(mask).ok());
      }
      Result<TinyStore> r = TinyStore::Open(&journal, d.path(), false);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ++cases;
      if (r->index.report.outcome == RecoveryOutcome::kLoaded) {
        ++loaded;
        // The complete new state: b_ and c whole, a_ only through b_'s shared 100 tokens.
        Result<uint64_t> hit = r->Restore(ns_, b_);
        ASSERT_TRUE(hit.ok()) << hit.status().ToString();
        EXPECT_EQ(*hit, b_.size() - 1);
        hit = r->Restore(ns_, c);
        ASSERT_TRUE(hit.ok()) << hit.status().ToString();
        EXPECT_EQ(*hit, c.size() - 1);
        hit = r->Restore(ns_, a_);
        ASSERT_TRUE(hit.ok()) << hit.status().ToString();
        EXPECT_EQ(*hit, 100u);
        EXPECT_GE(step, static_cast<int>(ShutdownStep::kMarkerRemoved));
      } else {
        ++discarded;
        EXPECT_EQ(r->index.report.reason, DiscardReason::kDirty);
        EXPECT_EQ(*r->Restore(ns_, a_), 0u);
        EXPECT_LT(step, static_cast<int>(ShutdownStep::kMarkerDirSynced));
      }
      if (mask + 1 >= (uint64_t{1} << pending)) break;
    }
  }
  // Every step ran, and both outcomes occurred.
  EXPECT_GE(cases, kShutdownStepCount + 1);
  EXPECT_GT(loaded, 0);
  EXPECT_GT(discarded, 0);
}

// Power loss in the middle of a session's writes (the marker was made durable first): the
// reopen discards, whatever subset of unsynced entry operations survived.
TEST_F(PersistenceTest, PowerLossDuringWritesDiscards) {
  FaultInjectingEnv fault(env_);
  DirJournalEnv journal(&fault);
  {
    Result<TinyStore> s = TinyStore::Open(&journal, dir_.path(), true);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->SaveClean().ok());
  }
  {
    Result<TinyStore> s = TinyStore::Open(&journal, dir_.path(), false);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, b_).ok());
    EXPECT_EQ(journal.pending(), 0u);  // MarkDirty synced the directory
    ASSERT_TRUE(fault.DropUnsyncedData().ok());
    ASSERT_TRUE(journal.Crash(0).ok());
  }
  Result<TinyStore> r = TinyStore::Open(&journal, dir_.path(), false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index.report.reason, DiscardReason::kDirty);
}

}  // namespace
}  // namespace rangekv::persist
