// The files of one store directory (one per serving rank), by name. The one place that names
// them: the engine, the persistence layer, `rangekv inspect` / `rangekv fsck` and the tests all
// go through StorePaths.
//
//   packs.rkv          the pack file (src/pack, docs/pack-format.md "Pack file"); payload
//   packs.rkv.tmp      a pack file being created; renamed to packs.rkv once its header is
//                      durable, so a crash during creation never leaves a half-made pack file
//   snapshot.rkv       the metadata snapshot (docs/pack-format.md "Metadata snapshot"); valid
//                      only while no dirty marker exists
//   snapshot.rkv.tmp   a snapshot being written; never read; replaced by rename
//   dirty.rkv          the dirty marker: its presence means "the pack file may hold writes the
//                      snapshot does not describe"; its contents are informational only
//   epoch.rkv          the store epoch: a counter bumped durably at every read-write open, so
//                      owner epochs and generation floors only increase, even across a discard
//   epoch.rkv.tmp      an epoch file being written; replaced by rename
//   journal.rkv        the publication journal (docs/pack-format.md "Publication journal"):
//                      what changed the index since the snapshot it extends, replayed at a
//                      dirty open (persist/journal_writer.h, persist/persistence.h)
//   journal.rkv.tmp    a journal being created; renamed to journal.rkv once its header is
//                      durable
//   lock.rkv           the owner's lock (Env::LockFile): the engine or store service that has
//                      the store open holds it, and its text says who ("pid 1234 (rangekv
//                      engine)"); a second opener fails with kLocked. Left in place when the
//                      store closes (deleting a lock file races the next opener)
//   identity.json      the identity record (persist/identity_record.h): readable fields of
//                      what the namespace was derived from, for `rangekv inspect`
//   identity.json.tmp  an identity record being written; replaced by rename
//
// Thread-safety: plain values.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace rangekv::persist {

inline constexpr std::string_view kPackFileName = "packs.rkv";
inline constexpr std::string_view kPackTempFileName = "packs.rkv.tmp";
inline constexpr std::string_view kSnapshotFileName = "snapshot.rkv";
inline constexpr std::string_view kSnapshotTempFileName = "snapshot.rkv.tmp";
inline constexpr std::string_view kDirtyMarkerFileName = "dirty.rkv";
inline constexpr std::string_view kEpochFileName = "epoch.rkv";
inline constexpr std::string_view kEpochTempFileName = "epoch.rkv.tmp";
inline constexpr std::string_view kJournalFileName = "journal.rkv";
inline constexpr std::string_view kJournalTempFileName = "journal.rkv.tmp";
inline constexpr std::string_view kLockFileName = "lock.rkv";
inline constexpr std::string_view kIdentityFileName = "identity.json";
inline constexpr std::string_view kIdentityTempFileName = "identity.json.tmp";

// Full paths of a store's files. `dir` is used as given (no normalisation).
struct StorePaths {
  std::string dir;

  explicit StorePaths(std::string store_dir) : dir(std::move(store_dir)) {}
  std::string pack() const { return Join(kPackFileName); }
  std::string pack_temp() const { return Join(kPackTempFileName); }
  std::string snapshot() const { return Join(kSnapshotFileName); }
  std::string snapshot_temp() const { return Join(kSnapshotTempFileName); }
  std::string dirty_marker() const { return Join(kDirtyMarkerFileName); }
  std::string epoch() const { return Join(kEpochFileName); }
  std::string epoch_temp() const { return Join(kEpochTempFileName); }
  std::string journal() const { return Join(kJournalFileName); }
  std::string journal_temp() const { return Join(kJournalTempFileName); }
  std::string lock() const { return Join(kLockFileName); }
  std::string identity() const { return Join(kIdentityFileName); }
  std::string identity_temp() const { return Join(kIdentityTempFileName); }

 private:
  std::string Join(std::string_view name) const {
    std::string out = dir;
    if (!out.empty() && out.back() != '/') out.push_back('/');
    out.append(name);
    return out;
  }
};

}  // namespace rangekv::persist
