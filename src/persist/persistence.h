// Persistence and recovery of a store's index (docs/design.md "Persistence and recovery", the
// paper's 3.5 and Table 1).
//
// A store directory (store_layout.h) holds the pack file (payload), the metadata snapshot (the
// directory and payload digests as of the last clean shutdown), the dirty marker and the epoch
// file. The rule: the snapshot is trusted only when no dirty marker exists and it is intact and
// bound to this very pack file; otherwise the index is discarded and the store starts empty.
// The index is never reconstructed from payload.
//
// Lifecycle, as the engine drives it:
//
//   Open     PackFile::Open (or Create, origin kCreated), then OpenIndex(). OpenIndex decides
//            (below), bumps the store epoch durably, and returns the Directory (loaded or
//            empty, owner epoch = the new store epoch), the DigestTable and a Persistence.
//   write    Persistence::MarkDirty() before the first pack write (or invalidation) after
//            open or after a SaveClean: it creates the marker durably (write + fsync file +
//            fsync directory). Idempotent and cheap once done (an atomic flag).
//   store    per pack: DigestTable::Begin + RecordLayer (device-computed digests) or
//            RecordStripeBytes (host-readable bank) for each layer, CheckComplete before
//            Directory::Publish (payload_digests.h).
//   restore  per record: DigestTable::PlanVerify gives the whole-block read extent; after the
//            read, VerifyStripeBytes / VerifyHostBytes (host buffer) or Compare (device
//            digests); on kCorruption drop the record (Directory::InvalidatePack,
//            DigestTable::Drop) and fail its tokens closed.
//   Close    drain every owner (tickets, banks, writes), then Persistence::SaveClean(): fsync
//            the pack file, write the snapshot to snapshot.rkv.tmp, fsync it, rename it to
//            snapshot.rkv, fsync the directory, remove the marker, fsync the directory.
//
// Open decides, in this order (the first that applies wins; every discard is logged at
// kWarning with its reason name and detail, a load at kInfo):
//   origin kCreated                               -> start empty (new_store, kInfo)
//   dirty marker present, a usable journal        -> replay (below)
//   dirty marker present                          -> start empty (dirty)
//   no snapshot file                              -> start empty (missing_snapshot)
//   snapshot unreadable (I/O error)               -> start empty (unreadable_snapshot)
//   snapshot larger than kMaxSnapshotBytes        -> start empty (malformed), never allocated
//   snapshot shorter than its length field        -> start empty (truncated)
//   bad magic / impossible structure              -> start empty (malformed)
//   other format version                          -> start empty (wrong_version)
//   checksum mismatch                             -> start empty (corrupt_checksum)
//   other store uuid                              -> start empty (wrong_store_uuid)
//   other geometry                                -> start empty (wrong_geometry)
//   other namespace                               -> start empty (wrong_namespace)
//   other pack count / data offset / creation time-> start empty (pack_layout_mismatch)
//   pack file size differs from the snapshot's    -> start empty (pack_size_mismatch)
//   Directory::Deserialize refuses the directory  -> start empty (directory_rejected)
//   a visible pack without complete digests, or digests that do not fit -> (inconsistent)
//   otherwise                                     -> loaded
//
// Journal replay at a dirty open (journal_writer.h writes it; docs/fault-model.md
// "Publication journal"). The journal extends the snapshot named by its base epoch:
//   journal of another store (uuid)                -> ignored whole, start empty (dirty)
//   damaged header / unreadable                    -> ignored whole, start empty (dirty)
//   base 0                                         -> replayed over the empty index
//   base == the snapshot's epoch (snapshot intact and bound) -> replayed over the snapshot
//   base < the snapshot's epoch                    -> ignored; the snapshot is loaded alone: a
//                                                     checkpoint wrote that snapshot from
//                                                     everything the journal held, and nothing
//                                                     was written between (the next journal is
//                                                     durable before the next write)
//   base > the snapshot's epoch, or the snapshot unusable -> ignored whole, start empty: the
//                                                     base it extends is gone
// Replay keeps the intact prefix (DecodeJournal) and applies it in order: a remove drops its
// pack (and what is stored below it); a publish is kept only if it was not removed later in the
// journal, its slot is not at a newer generation, its parent path is visible, no other pack
// holds its tokens, and its payload digests verify NOW, eagerly: every layer of its stored
// tokens is read from the pack file and digested (at most verify_budget_bytes per open; beyond
// it records are dropped as over_budget). Every dropped record and the tail are counted and
// named in RecoveryReport::journal and logged. A replayed index is then checkpointed at once
// (SaveClean under the new epoch): the store is clean when OpenIndex returns.
//
// Capacity: the directory's capacity bound (DirectoryOptions::capacity_bytes) is this open's
// setting. A loaded or replayed index holding more packs than it allows keeps the most recently
// used that fit, wherever their slots lie, and evicts the others (logged with counts,
// RecoveryReport::packs_evicted_for_capacity); the trimmed index is checkpointed at once, as a
// replayed one is.
//
// Epochs: nothing old is trusted after a discard. The epoch file holds a counter that every
// read-write open raises durably before returning: new = max(epoch file + 1, snapshot's epoch
// + 1, (snapshot's max generation >> 32) + 1, 1), and when the epoch file is missing or corrupt
// on a pack file that existed before, at least the wall clock in seconds (the only witness
// left; logged). The directory's owner epoch is the store epoch (so tickets of any earlier
// session fail with kForeignOwner), and its generation floor is store_epoch << 32: every
// generation this session issues starts above it, which is above every generation an earlier
// session could have issued (fewer than 2^32 reuses of a slot per session).
//
// Thread-safety: Persistence::MarkDirty may be called from any thread, concurrently. SaveClean
// REQUIRES that no other thread uses the store (owners drained) and is not concurrent with
// MarkDirty. OpenIndex and InspectIndex are plain functions.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/thread_annotations.h"
#include "directory/directory.h"
#include "env/env.h"
#include "pack/pack_file.h"
#include "persist/journal_writer.h"
#include "persist/payload_digests.h"
#include "persist/snapshot.h"
#include "persist/store_layout.h"
#include "rangekv/status.h"

namespace rangekv::persist {

struct OpenedIndex;

enum class PackOrigin : uint8_t {
  kCreated,  // PackFile::Create just made the pack file: nothing can be loaded
  kOpened,   // an existing pack file
};

enum class RecoveryOutcome : uint8_t { kLoaded, kStartedEmpty };

enum class DiscardReason : uint8_t {
  kNone = 0,  // loaded
  kNewStore,
  kDirty,
  kMissingSnapshot,
  kUnreadableSnapshot,
  kTruncated,
  kCorruptChecksum,
  kMalformed,
  kWrongVersion,
  kWrongStoreUuid,
  kWrongGeometry,
  kWrongNamespace,
  kPackLayoutMismatch,
  kPackSizeMismatch,
  kDirectoryRejected,
  kInconsistent,
};
// "dirty", "corrupt_checksum", ... (stable; used in logs, JSON and tests).
std::string_view DiscardReasonName(DiscardReason reason);

// What a dirty open did with the journal (all zero when there was none).
struct JournalReplayReport {
  bool present = false;  // journal.rkv existed at a dirty open
  bool used = false;     // its records were replayed
  // Why the whole journal was not replayed: "" (used, or absent), "unreadable", "unusable"
  // (damaged header), "foreign_store", "older_than_snapshot", "newer_than_snapshot",
  // "base_snapshot_unusable".
  std::string ignored;
  std::string detail;
  uint64_t base_epoch = 0;
  uint64_t bytes = 0;
  uint64_t intact_bytes = 0;
  uint64_t records = 0;        // intact records
  std::string tail = "clean";  // JournalTailName
  std::string tail_detail;
  uint64_t publishes_kept = 0;           // replayed and verified
  uint64_t publishes_present = 0;        // already in the snapshot (same slot and generation)
  uint64_t publishes_removed_later = 0;  // removed by a later record (not verified)
  uint64_t removes_applied = 0;
  // Publishes dropped, by reason (never served):
  uint64_t dropped_unverified = 0;  // payload digests did not match, or the read failed
  uint64_t dropped_parent = 0;      // the path before the pack is not visible
  uint64_t dropped_conflict = 0;    // another pack holds its tokens, or the slot is newer
  uint64_t dropped_budget = 0;      // over verify_budget_bytes
  uint64_t dropped_invalid = 0;     // fields that do not fit this store
  uint64_t bytes_verified = 0;
  std::vector<std::string> drops;  // "record N (pack slot S generation G): reason", first 64
  uint64_t dropped() const {
    return dropped_unverified + dropped_parent + dropped_conflict + dropped_budget +
           dropped_invalid;
  }
};

struct RecoveryReport {
  RecoveryOutcome outcome = RecoveryOutcome::kStartedEmpty;
  DiscardReason reason = DiscardReason::kNone;
  std::string detail;             // the logged explanation
  uint64_t store_epoch = 0;       // this session's epoch (0 for a read-only inspection)
  uint64_t previous_epoch = 0;    // what the epoch file held (0: none or unreadable)
  uint64_t generation_floor = 0;  // store_epoch << 32
  uint32_t packs_loaded = 0;      // visible packs restored from the snapshot (after the trim)
  // Packs the snapshot or journal held beyond this open's capacity bound, evicted at open in
  // LRU order (Directory::EvictOverCapacity); the index was then checkpointed at once.
  uint32_t packs_evicted_for_capacity = 0;
  uint64_t snapshot_bytes = 0;    // size of the snapshot file read (0 if none)
  bool epoch_from_clock = false;  // the epoch file was missing or corrupt on an old pack file
  JournalReplayReport journal;
};

// The steps of SaveClean, in order; the shutdown hook sees each after it completed.
enum class ShutdownStep : uint8_t {
  kPayloadSynced = 0,  // pack file fsynced
  kTempWritten,        // snapshot.rkv.tmp written (not yet synced)
  kTempSynced,         // snapshot.rkv.tmp fsynced
  kRenamed,            // renamed to snapshot.rkv
  kRenameDirSynced,    // directory fsynced (the rename is durable)
  kMarkerRemoved,      // dirty.rkv deleted
  kMarkerDirSynced,    // directory fsynced (the deletion is durable): clean
};
inline constexpr int kShutdownStepCount = 7;
std::string_view ShutdownStepName(ShutdownStep step);

struct PersistenceOptions {
  // Options of the Directory to build; owner_epoch is ignored (the store epoch is used).
  DirectoryOptions directory;
  // Digest block size for a store that starts empty; 0 = DigestGeometry::DefaultBlockTokens.
  // A loaded snapshot keeps the block size it was written with.
  uint64_t digest_block_tokens = 0;
  // Test seam (crash tests): called after each step of SaveClean; a non-OK status stops the
  // sequence right there, as if the process died, and SaveClean returns it. Null in production.
  std::function<Status(ShutdownStep)> shutdown_hook;
  // Test seam: wall clock in Unix nanoseconds (snapshot timestamps, the epoch fallback).
  // Null = the system clock.
  std::function<uint64_t()> now_unix_ns;
  // Permission bits of the files the store creates (snapshot, epoch file, dirty marker,
  // journal); persist::StorePermissions (store_access.h).
  uint32_t file_permissions = 0600;
  // The session's journal (journal_writer.h). kNone: no journal is written and MarkDirty
  // deletes a journal left by an earlier session (a dirty reopen then discards). A journal
  // left by an earlier session is replayed at a dirty open whatever this setting is.
  JournalOptions journal{.mode = DurabilityMode::kNone};
  // Payload bytes a dirty open may read to verify journaled publications.
  uint64_t verify_budget_bytes = 64ull << 30;
};

// The dirty marker and the clean-shutdown sequence of one open store.
class Persistence {
 public:
  Persistence(const Persistence&) = delete;
  Persistence& operator=(const Persistence&) = delete;

  const StorePaths& paths() const { return paths_; }
  uint64_t store_epoch() const { return store_epoch_; }
  uint64_t generation_floor() const { return store_epoch_ << 32; }

  // Makes the dirty marker durable: creates dirty.rkv (contents informational), fsyncs it and
  // the store directory. Call before the first write or invalidation after OpenIndex or after
  // SaveClean. Idempotent: later calls return OK at once. On failure nothing may be written
  // (the caller fails its store with this status); a later call retries.
  // With a journal (options.journal.mode != kNone) the journal is created first (durable in the
  // same directory fsync), extending the snapshot this session's index started from; without
  // one a journal file left behind is deleted first. Either way nothing on disk can describe
  // payload the session is about to write.
  Status MarkDirty() EXCLUDES(mu_);
  bool marked_dirty() const { return marked_.load(std::memory_order_acquire); }

  // The session's journal writer; null under DurabilityMode::kNone. OpenIndex attaches it to
  // the directory it returns (Directory::AddObserver).
  JournalWriter* journal() const { return journal_.get(); }
  // Installs the journal's checkpoint (folds the index into a new snapshot mid-session when the
  // journal passes its bound). REQUIRES the store's objects outlive the journal.
  void EnableCheckpoints(const PackFile& pack, const Directory& directory,
                         const DigestTable& digests);

  // The clean-shutdown sequence (see the file comment). REQUIRES: every owner drained (no
  // reservation in flight, no ticket outstanding, no write pending) and the pack file's writes
  // completed. `pack`, `directory` and `digests` are the store's. Errors: kFailedPrecondition
  // when a visible pack has no complete digests (the engine failed to record them; the snapshot
  // would be rejected at open), else the failing step's I/O status. On any error the marker
  // stays (or the hook stopped before its removal), so the next open discards: never a
  // snapshot that the payload does not match. On success the store is clean and marked_dirty()
  // is false; a later write needs MarkDirty() again.
  // With a journal: its queued records are committed first and it is stopped (journaling ends
  // with the session); journal.rkv is deleted after the marker (a clean store needs none).
  Status SaveClean(const PackFile& pack, const Directory& directory, const DigestTable& digests)
      EXCLUDES(mu_);

 private:
  friend Result<OpenedIndex> OpenIndex(Env*, const std::string&, const PackFile&, PackOrigin,
                                       const PersistenceOptions&);
  Persistence(Env* env, StorePaths paths, uint64_t store_epoch, StoreUuid uuid,
              PersistenceOptions options, uint64_t base_epoch, File* pack_file,
              const DigestTable* digests);
  Status Step(ShutdownStep step) const;
  // The snapshot half of SaveClean (steps 0-4), shared with the checkpoints.
  Status WriteSnapshot(const PackFile& pack, const Directory& directory, const DigestTable& digests,
                       bool hooks, uint64_t* cut_lsn);

  Env* const env_;
  const StorePaths paths_;
  const uint64_t store_epoch_;
  const StoreUuid store_uuid_;
  const PersistenceOptions options_;
  // Epoch of the snapshot the session's index started from (0: it started empty); a journal
  // created by MarkDirty extends it.
  Mutex mu_;
  uint64_t base_epoch_ GUARDED_BY(mu_) = 0;
  std::unique_ptr<JournalWriter> journal_;
  std::atomic<bool> marked_{false};
};

// What OpenIndex hands the engine.
struct OpenedIndex {
  std::unique_ptr<Directory> directory;  // loaded or empty; owner epoch = store epoch
  std::unique_ptr<DigestTable> digests;  // the loaded packs' digests, or empty
  std::unique_ptr<Persistence> persistence;
  RecoveryReport report;
};

// Recovery at a read-write open of the store in `store_dir` whose pack file `pack` was just
// opened (validated against the caller's geometry and namespace) or created. Decides load or
// start empty (see the file comment; never fails for a bad snapshot), then writes the new store
// epoch durably. Errors: kInvalidArgument for bad options; the epoch file's I/O error (the
// store cannot guarantee fresh epochs, so it must not open); kResourceExhausted when the epoch
// space is spent. Reading or writing the dirty marker is not part of Open: MarkDirty is.
//
// Generations: the Directory is built with DirectoryOptions::generation_floor =
// report.generation_floor (store_epoch << 32), so every generation this session issues, loaded
// or started empty, lies above every generation an earlier session could have issued.
Result<OpenedIndex> OpenIndex(Env* env, const std::string& store_dir, const PackFile& pack,
                              PackOrigin origin, const PersistenceOptions& options);

// Read-only look at a store for offline tools (inspect, fsck): the same decision as OpenIndex
// but nothing is written (no epoch bump) and the returned persistence is null. The snapshot, if
// it decoded, is returned too (even when its binding failed), for reporting. A dirty store with
// a journal gets a dry run of the replay the next open would do (report.journal says what it
// keeps and drops, payload digests of the kept publications verified as the open verifies
// them); the directory returned is then the one that open would start with (outcome kLoaded,
// reason kNone). Only a capacity lowered at that open could still evict from it.
struct InspectedIndex {
  std::unique_ptr<Directory> directory;  // null unless outcome == kLoaded
  std::unique_ptr<DigestTable> digests;  // null unless outcome == kLoaded
  std::optional<Snapshot> snapshot;
  RecoveryReport report;
  bool dirty_marker_present = false;
  std::string dirty_marker_contents;  // informational, at most 4 KiB
  std::optional<uint64_t> epoch_file_epoch;
  std::string epoch_file_problem;  // "" when the epoch file decoded
};
Result<InspectedIndex> InspectIndex(Env* env, const std::string& store_dir, const PackFile& pack,
                                    const PersistenceOptions& options);

// The epoch file codec (48 bytes: magic "RANGEKVE", u32 version 1, u32 0, store uuid lo/hi,
// u64 epoch, u64 XXH3-64 of the preceding 40 bytes). Exposed for tests and tools.
inline constexpr uint64_t kEpochFileBytes = 48;
std::string EncodeEpochFile(uint64_t epoch, const StoreUuid& uuid);
// kTruncated / kCorruption / kWrongVersion; epochs outside [1, kMaxStoreEpoch] are corrupt.
Result<uint64_t> DecodeEpochFile(std::string_view bytes);

}  // namespace rangekv::persist
