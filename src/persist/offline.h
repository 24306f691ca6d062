// Offline access to a store directory for `rangekv inspect` and `rangekv fsck` (and tests).
// Nothing here writes: the pack file is opened read-only, the epoch is not bumped, the dirty
// marker is left alone, the store's lock is not taken (only asked about: Env::LockHolder).
// They work beside a running engine or store service too, and say so (OfflineStore::holder):
// such a store is dirty while it runs and its payload may be ahead of the snapshot.
//
// After a crash the question is what the next open keeps: a dirty store with a journal gets a
// dry run of the open's replay (persistence.h InspectIndex), so the index checked (and whose
// payload is verified) is the one that open would start with, journaled packs included, and
// every publication the replay would drop is a `journal` problem naming why.
//
// OpenOffline opens the pack file with no expectation (its header says what it is) and loads the
// index exactly as OpenIndex would decide, but read-only (InspectIndex).
//
// Fsck checks, in order, and reports every problem it finds (bounded by kMaxFsckProblems):
//   pack_header     the pack file opens and its header validates (else nothing more is checked)
//   epoch_file      the epoch file exists and decodes
//   permissions     the store directory or a store file is owned by another user than the
//                   directory's owner, or writable by group or others: the engine (run by the
//                   owner) refuses to open it (store_access.h, the same check)
//   dirty           a dirty marker exists and no usable journal: the index would be discarded
//                   at the next open (with a usable journal: the dry run above)
//   snapshot        the snapshot exists, decodes and binds to this pack file (reason names why)
//   directory       the directory section deserializes and passes Directory::CheckInvariants
//   consistency     every visible slot holds exactly one listed pack of its generation, every
//                   listed pack is visible, has complete digests covering its tokens; no digests
//                   for a slot that is not visible
//   journal         the journal (when present) decodes, belongs to this pack file, is not newer
//                   than the epoch file, and ends on an intact record (a dropped tail is named);
//                   every publication the next open's replay would drop (payload digests that do
//                   not match, a parent that is gone, ...)
//   payload_read    a stripe extent could not be read in full (EIO, short read)
//   payload_digest  a digest block's bytes differ from its recorded digest: names namespace,
//                   slot, generation, layer, the block's pack tokens and the path tokens of the
//                   record it belongs to
// Payload verification reads every visible pack's stored extent of every layer once (bytes
// proportional to the stored payload; one stripe-sized buffer).
//
// Thread-safety: plain functions; the returned values are not shared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "env/env.h"
#include "pack/pack_file.h"
#include "persist/persistence.h"

namespace rangekv::persist {

// What a store's publication journal holds (journal.rkv; absent in stores written so far).
struct JournalSummary {
  bool present = false;
  std::string problem;  // unusable header, another store's, newer than the epoch file
  uint64_t bytes = 0;
  uint64_t intact_bytes = 0;
  uint64_t records = 0;
  uint64_t publishes = 0;  // of the intact records: publish, remove, epoch
  uint64_t removes = 0;
  uint64_t epochs = 0;
  uint64_t base_epoch = 0;  // the snapshot epoch it extends (its last checkpoint; 0: empty)
  // What a dirty open would do with it (persistence.h "Journal replay"): "replay",
  // "ignored: <reason>", or "" for a clean store (a clean open ignores the journal).
  std::string replay;
  std::string tail = "clean";  // JournalTailName
  std::string tail_detail;
};

struct OfflineStore {
  std::string dir;
  std::optional<PackFile> pack;  // set on success
  uint64_t pack_file_bytes = 0;
  InspectedIndex index;
  JournalSummary journal;
  // The engine or store service holding the store's lock now ("pid 1234 (rangekv engine)"),
  // nullopt when none does: then the files are all there is.
  std::optional<std::string> holder;
};

// kNotFound when `dir` has no pack file; the pack file's Open errors otherwise (kCorruption,
// kTruncated, kWrongVersion, kInvalidArgument "not a pack file"). Snapshot problems are not
// errors: they are in index.report.
Result<OfflineStore> OpenOffline(Env* env, const std::string& dir);

// One digest block that failed, located both in the pack and in the prefix path.
struct BadBlock {
  NamespaceId ns;
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint32_t layer = 0;
  TokenRange pack_tokens;
  TokenRange path_tokens;  // the part of the record's path interval the block covers
};

struct FsckProblem {
  std::string kind;     // pack_header, permissions, epoch_file, dirty, snapshot, directory,
                        // consistency, journal, payload_read, payload_digest
  std::string message;  // for people
  std::optional<BadBlock> block;  // payload_read / payload_digest
};

inline constexpr size_t kMaxFsckProblems = 10000;

// What the next open will do with the store, as far as the files decide it.
struct FsckRecovery {
  bool opens = false;  // the pack file opens and the permissions pass
  std::string index;   // "loaded" (snapshot), "replayed" (journal), "discarded"
  std::string detail;  // the explanation the open would log
  uint64_t packs = 0;  // packs the index would hold
  bool journal_replayed = false;
  uint64_t publications_kept = 0;
  uint64_t publications_dropped = 0;
  std::optional<std::string> in_use_by;  // OfflineStore::holder
};

struct FsckReport {
  std::string dir;
  FsckRecovery recovery;
  std::vector<FsckProblem> problems;  // at most kMaxFsckProblems
  uint64_t problems_omitted = 0;      // beyond the bound
  uint64_t packs_checked = 0;         // visible packs whose payload was verified
  uint64_t blocks_checked = 0;        // digest blocks compared (all layers)
  uint64_t bytes_read = 0;            // payload bytes read
  bool ok() const { return problems.empty() && problems_omitted == 0; }
};

struct FsckOptions {
  bool verify_payload = true;  // false: structure only (no payload reads)
};

// Runs every check above. Fails only when `dir` has no pack file at all (kNotFound); every other
// finding is a problem in the report.
Result<FsckReport> Fsck(Env* env, const std::string& dir, const FsckOptions& options = {});

}  // namespace rangekv::persist
