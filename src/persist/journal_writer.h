// JournalWriter: appends the publication journal (journal.rkv; format: persist/journal_format.h,
// docs/pack-format.md "Publication journal") of one open store, so that a dirty reopen keeps
// what was published instead of discarding the index (persistence.h "Open decides").
//
// What is written. The writer observes the Directory (DirectoryObserver): every publication
// becomes one `publish` record per new pack (its whole path, its payload digests from the
// DigestTable), every pack that leaves the index (eviction, invalidation) one `remove` record,
// in the order the directory applied them; a journal opens with an `epoch` record naming the
// session. Records are only queued under the directory's mutex (bounded by max_pending_bytes;
// no I/O there).
//
// Group commit. One committing thread takes every queued record at once, makes the pack file
// durable when the batch holds a publication (fsync: the payload every queued publication names
// was completely written before it was published), then appends the records and fsyncs the
// journal: at most one pair of fsyncs per batch, whatever the number of records. It commits when
// a caller waits (AwaitPublished, BeforeOverwrite), at once after a publication under
// kEveryPublish, at once after a removal (its slot is about to be reused: the commit then runs
// while the reusing store gathers, not in front of its first write), and at least every
// period_ms under kPeriodic.
//
// Write-ahead rule for reused slots. A slot that held a published pack is overwritten only after
// the removal of that pack is durable (BeforeOverwrite): a replay can then never describe bytes
// that a later store replaced, and neither can the snapshot the journal extends.
//
// Failures. A failed append or fsync (EIO, ENOSPC, a torn write) ends journaling for the session:
// the journal file is deleted and the directory fsynced, so a crash from here on discards the
// index (as under durability=none) and nothing the file no longer describes can be replayed.
// Waiters get the error (a publication is then never acknowledged durable); later waits return
// it too; stats().failures counts it. When even the deletion fails the writer stays broken and
// BeforeOverwrite keeps failing (stores that would overwrite a journaled slot fail closed).
// The journal is bounded: past max_bytes, and once checkpoint_interval_ms passed since the journal
// began (or was last checkpointed) with records in it, the writer asks for a checkpoint
// (checkpoint callback: the snapshot is rewritten and the journal restarts empty over it), so a
// dirty reopen replays at most that much. Without a callback the size bound ends journaling as
// on a failure (the interval is then not used); a failed checkpoint ends it too.
//
// Thread-safety: every method is thread-safe. Lock order: Directory's mutex -> mu_ ->
// DigestTable's mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "directory/directory.h"
#include "env/env.h"
#include "pack/pack_header.h"
#include "persist/journal.h"
#include "persist/payload_digests.h"
#include "persist/store_layout.h"
#include "rangekv/status.h"

namespace rangekv::persist {

enum class DurabilityMode : uint8_t {
  kNone,          // no journal: a dirty reopen discards the index
  kPeriodic,      // group commit at least every period_ms: a crash loses at most that window
  kEveryPublish,  // a store's Finish(kUntilVisible) returns once its publication is durable
};

struct JournalOptions {
  DurabilityMode mode = DurabilityMode::kPeriodic;
  uint64_t period_ms = 200;
  // Bound on the journal file: past it the writer asks for a checkpoint.
  uint64_t max_bytes = 256ull << 20;
  // A journal holding records this long is checkpointed; 0: only past max_bytes (and at clean
  // shutdown, which is the caller's).
  uint64_t checkpoint_interval_ms = 60000;
  // Bound on records queued in memory and not yet committed.
  uint64_t max_pending_bytes = 64ull << 20;
  uint32_t file_permissions = 0600;
};

struct JournalStats {
  uint64_t records = 0;      // records committed (durable)
  uint64_t bytes = 0;        // bytes of the current journal file
  uint64_t commits = 0;      // group commits (fsync pairs)
  uint64_t failures = 0;     // failed commits (journaling ended)
  uint64_t checkpoints = 0;  // the journal was folded into a new snapshot
  uint64_t durable_publications = 0;
  // ns callers spent blocked in AwaitPublished and BeforeOverwrite (the store path's wait on
  // the journal), summed over callers.
  uint64_t wait_ns = 0;
};

class JournalWriter final : public DirectoryObserver {
 public:
  // Folds the current index into a new durable snapshot. It must read LastQueuedLsn() at the
  // same instant as the directory state it saves (under the directory's mutex:
  // Directory::SerializeCut), and returns that lsn with the snapshot's store epoch. Called by
  // the committing thread, which commits nothing meanwhile.
  struct Cut {
    uint64_t base_epoch = 0;
    uint64_t lsn = 0;
  };
  using Checkpoint = std::function<Result<Cut>()>;

  // `pack_file` and `digests` are borrowed and must outlive the writer.
  JournalWriter(Env* env, StorePaths paths, StoreUuid uuid, File* pack_file,
                const DigestTable* digests, JournalOptions options);
  ~JournalWriter() override;  // Stop()
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  const JournalOptions& options() const { return options_; }
  void set_checkpoint(Checkpoint checkpoint) EXCLUDES(mu_);

  // Creates the journal (journal.rkv.tmp written and fsynced, then renamed to journal.rkv; the
  // directory fsync that makes the rename durable is the caller's: MarkDirty's) extending the
  // snapshot of `base_epoch` (0: the empty index), writes the epoch record and starts the
  // committing thread. Records queued before are committed after it. Idempotent once started.
  Status Start(uint64_t base_epoch, uint64_t store_epoch, uint64_t generation_floor) EXCLUDES(mu_);
  bool started() const EXCLUDES(mu_);

  void OnPublished(uint64_t reservation_id, const NamespaceId& ns, std::span<const int32_t> path,
                   std::span<const PackRecord> packs) override EXCLUDES(mu_);
  // A clipped pack is journaled as removed (see directory.h "Observers").
  void OnRemoved(const RemovedPack& pack) override EXCLUDES(mu_);
  // True unless the slot's last removal is queued but not yet durable (BeforeOverwrite would
  // wait for it).
  bool SlotReusable(uint32_t slot) override EXCLUDES(mu_);

  // Blocks until the publication of `reservation_id` is durable (OK), or returns the journal's
  // error. For a reservation it has no entry for (committed already, or a store that joined
  // another's) it waits for everything queued so far.
  Status AwaitPublished(uint64_t reservation_id) EXCLUDES(mu_);
  // Blocks until the last removal of a pack in `slot` is durable (call before overwriting the
  // slot). The error of a broken journal otherwise.
  Status BeforeOverwrite(uint32_t slot) EXCLUDES(mu_);
  // Commits everything queued and waits for it.
  Status Flush() EXCLUDES(mu_);
  // Commits what is queued, stops the thread; later records are dropped. Returns the journal's
  // status.
  Status Stop() EXCLUDES(mu_);

  // The lsn of the last record queued (for a checkpoint's cut).
  uint64_t LastQueuedLsn() const EXCLUDES(mu_);
  JournalStats stats() const EXCLUDES(mu_);
  // The first error (OK while journaling works).
  Status status() const EXCLUDES(mu_);

 private:
  struct Queued {
    JournalRecord record;  // sequence assigned at commit
    uint64_t lsn = 0;
  };

  void Run() EXCLUDES(mu_);
  // Commits `batch`: pack fsync, append, journal fsync. Runs without mu_.
  Status Commit(std::vector<Queued>& batch);
  Status CreateFile(uint64_t base_epoch);
  // Ends journaling after `error`: deletes the file and fsyncs the directory.
  void Abandon(const Status& error) EXCLUDES(mu_);
  void Enqueue(JournalRecord record, uint64_t bytes, uint64_t reservation_id) REQUIRES(mu_);
  Status WaitDurable(uint64_t lsn) EXCLUDES(mu_);

  Env* const env_;
  const StorePaths paths_;
  const StoreUuid uuid_;
  File* const pack_file_;
  const DigestTable* const digests_;
  const JournalOptions options_;

  // Owned by the committing thread (and Start before the thread exists).
  std::unique_ptr<File> file_;
  uint64_t file_bytes_ = 0;
  uint64_t next_sequence_ = 1;
  // Records committed to the current file after its epoch record, and when the file began.
  uint64_t records_in_file_ = 0;
  std::chrono::steady_clock::time_point file_started_;
  uint64_t epoch_ = 0;
  uint64_t generation_floor_ = 0;

  mutable Mutex mu_;
  CondVar work_cv_;     // the committing thread: records queued, a waiter, stop
  CondVar durable_cv_;  // waiters: a commit finished
  Checkpoint checkpoint_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool urgent_ GUARDED_BY(mu_) = false;
  bool abandoned_ GUARDED_BY(mu_) = false;  // failed and the file is deleted
  bool broken_ GUARDED_BY(mu_) = false;     // failed and the file could not be deleted
  Status error_ GUARDED_BY(mu_);
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t next_lsn_ GUARDED_BY(mu_) = 1;
  uint64_t durable_lsn_ GUARDED_BY(mu_) = 0;  // every lsn <= this is durable
  std::unordered_map<uint64_t, uint64_t> publish_lsn_ GUARDED_BY(mu_);  // reservation -> lsn
  std::unordered_map<uint32_t, uint64_t> remove_lsn_ GUARDED_BY(mu_);   // slot -> lsn
  JournalStats stats_ GUARDED_BY(mu_);
  std::thread thread_;
};

// "none", "periodic:<ms>", "every_publish".
std::string DurabilityName(DurabilityMode mode, uint64_t period_ms);

}  // namespace rangekv::persist
