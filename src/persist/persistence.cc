#include "persist/persistence.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/coding.h"
#include "base/digest.h"
#include "base/log.h"
#include "persist/journal.h"
#include "persist/snapshot_format.h"

namespace rangekv::persist {
namespace {

namespace sf = snapshot_format;

constexpr char kEpochMagic[8] = {'R', 'A', 'N', 'G', 'E', 'K', 'V', 'E'};
constexpr uint32_t kEpochVersion = 1;
constexpr uint64_t kEpochChecksumSeed = 0x52616E67654B5645ull;  // "RangeKVE"
constexpr uint64_t kMaxMarkerBytes = 4096;

std::string Num(uint64_t v) { return std::to_string(v); }

uint64_t NowUnixNs(const PersistenceOptions& o) {
  if (o.now_unix_ns) return o.now_unix_ns();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Writes `bytes` to a new file at `path` (replacing a leftover) and fsyncs it. Handles short
// writes; a zero-byte write is reported as kShortTransfer rather than looping.
Status WriteNewFile(Env* env, const std::string& path, const void* data, uint64_t size,
                    uint32_t permissions, const std::function<Status()>& after_write) {
  if (env->FileExists(path)) RANGEKV_RETURN_IF_ERROR(env->DeleteFile(path));
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                           env->CreateFile(path, FileOptions{.mode = OpenMode::kReadWrite,
                                                             .direct = DirectIo::kOff,
                                                             .permissions = permissions}));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n, file->WriteAt(done, p + done, size - done));
    if (n == 0) {
      return Status(StatusCode::kShortTransfer,
                    path + ": wrote " + Num(done) + " of " + Num(size) + " bytes");
    }
    done += n;
  }
  if (after_write) RANGEKV_RETURN_IF_ERROR(after_write());
  return file->Sync();
}

// Atomically replaces `path` with `data` (tmp + fsync + rename + fsync dir).
Status ReplaceFileDurably(Env* env, const std::string& dir, const std::string& tmp,
                          const std::string& path, const std::string& data, uint32_t permissions) {
  RANGEKV_RETURN_IF_ERROR(WriteNewFile(env, tmp, data.data(), data.size(), permissions, nullptr));
  RANGEKV_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  return env->SyncDir(dir);
}

DiscardReason ReasonForDefect(SnapshotDefect d) {
  switch (d) {
    case SnapshotDefect::kTruncated:
      return DiscardReason::kTruncated;
    case SnapshotDefect::kWrongVersion:
      return DiscardReason::kWrongVersion;
    case SnapshotDefect::kChecksum:
      return DiscardReason::kCorruptChecksum;
    case SnapshotDefect::kNone:
    case SnapshotDefect::kBadMagic:
    case SnapshotDefect::kTooLarge:
    case SnapshotDefect::kMalformed:
      return DiscardReason::kMalformed;
  }
  return DiscardReason::kMalformed;
}

DiscardReason ReasonForMismatch(BindingMismatch m) {
  switch (m) {
    case BindingMismatch::kStoreUuid:
      return DiscardReason::kWrongStoreUuid;
    case BindingMismatch::kGeometry:
      return DiscardReason::kWrongGeometry;
    case BindingMismatch::kNamespace:
      return DiscardReason::kWrongNamespace;
    case BindingMismatch::kPackLayout:
      return DiscardReason::kPackLayoutMismatch;
    case BindingMismatch::kPackFileBytes:
      return DiscardReason::kPackSizeMismatch;
    case BindingMismatch::kNone:
      break;
  }
  return DiscardReason::kMalformed;
}

// What the files of a store say, before anything is built from them.
struct FileState {
  bool marker_present = false;
  std::string marker_contents;
  std::optional<uint64_t> epoch_file_epoch;
  std::string epoch_file_problem;               // "" when decoded; "missing" or the decode error
  DiscardReason reason = DiscardReason::kNone;  // kNone: the snapshot is bound and intact
  std::string detail;
  std::optional<Snapshot> snapshot;  // decoded (binding may have failed)
  uint64_t snapshot_bytes = 0;
  // What the snapshot alone says (kNone: intact and bound), whatever the marker says.
  DiscardReason snapshot_reason = DiscardReason::kNone;
  std::string snapshot_detail;
};

void ReadSnapshot(Env* env, const StorePaths& paths, const PackFile& pack, uint64_t pack_file_bytes,
                  FileState* out) {
  FileState& st = *out;
  if (!env->FileExists(paths.snapshot())) {
    st.reason = DiscardReason::kMissingSnapshot;
    st.detail = "no snapshot " + paths.snapshot();
    return;
  }
  // The size is checked before anything is allocated (ReadSmallFile refuses larger files).
  Result<std::string> raw = env->ReadSmallFile(paths.snapshot(), sf::kMaxSnapshotBytes);
  if (!raw.ok()) {
    if (raw.status().code() == StatusCode::kResourceExhausted) {
      st.reason = DiscardReason::kMalformed;
    } else if (raw.status().code() == StatusCode::kNotFound) {
      st.reason = DiscardReason::kMissingSnapshot;
    } else {
      st.reason = DiscardReason::kUnreadableSnapshot;
    }
    st.detail = raw.status().ToString();
    return;
  }
  st.snapshot_bytes = raw->size();
  SnapshotDefect defect = SnapshotDefect::kNone;
  Result<Snapshot> snap = DecodeSnapshot(
      std::span(reinterpret_cast<const uint8_t*>(raw->data()), raw->size()), &defect);
  if (!snap.ok()) {
    st.reason = ReasonForDefect(defect);
    st.detail = snap.status().ToString();
    return;
  }
  st.snapshot = std::move(*snap);
  BindingMismatch mismatch = BindingMismatch::kNone;
  const Status bound = CheckSnapshotBinding(
      st.snapshot->identity, SnapshotIdentity::ForPack(pack.header(), pack_file_bytes), &mismatch);
  if (!bound.ok()) {
    st.reason = ReasonForMismatch(mismatch);
    st.detail = bound.ToString();
  }
}

FileState ReadFiles(Env* env, const StorePaths& paths, const PackFile& pack, PackOrigin origin,
                    uint64_t pack_file_bytes) {
  FileState st;
  // Epoch file.
  Result<std::string> epoch_bytes = env->ReadSmallFile(paths.epoch(), 4096);
  if (!epoch_bytes.ok()) {
    st.epoch_file_problem = epoch_bytes.status().code() == StatusCode::kNotFound
                                ? std::string("missing")
                                : epoch_bytes.status().ToString();
  } else {
    Result<uint64_t> e = DecodeEpochFile(*epoch_bytes);
    if (e.ok()) {
      st.epoch_file_epoch = *e;
    } else {
      st.epoch_file_problem = e.status().ToString();
    }
  }
  // Dirty marker.
  st.marker_present = env->FileExists(paths.dirty_marker());
  if (st.marker_present) {
    Result<std::string> m = env->ReadSmallFile(paths.dirty_marker(), kMaxMarkerBytes);
    if (m.ok()) st.marker_contents = *m;
  }

  if (origin == PackOrigin::kCreated) {
    st.reason = DiscardReason::kNewStore;
    st.detail = "pack file created; nothing to load";
    return st;
  }
  // The snapshot is read even when the marker is present: a journal may extend it.
  ReadSnapshot(env, paths, pack, pack_file_bytes, &st);
  st.snapshot_reason = st.reason;
  st.snapshot_detail = st.detail;
  if (st.marker_present) {
    st.reason = DiscardReason::kDirty;
    st.detail = "dirty marker " + paths.dirty_marker() +
                " present: the last session did not shut down cleanly";
  }
  return st;
}

// Builds the directory and digest table from a bound snapshot. On failure returns the reason
// (directory_rejected or inconsistent) in `reason` / `detail` and null pointers.
struct Built {
  std::unique_ptr<Directory> directory;
  std::unique_ptr<DigestTable> digests;
  DiscardReason reason = DiscardReason::kNone;
  std::string detail;
};

Built BuildFromSnapshot(const Snapshot& snap, const DirectoryOptions& dir_options) {
  Built b;
  Result<std::unique_ptr<Directory>> dir = Directory::Deserialize(dir_options, snap.directory);
  if (!dir.ok()) {
    b.reason = DiscardReason::kDirectoryRejected;
    b.detail = dir.status().ToString();
    return b;
  }
  const Geometry& g = snap.identity.geometry;
  Result<DigestGeometry> dg =
      DigestGeometry::Make(g.layers, g.tokens_per_stripe, g.token_bytes, snap.digest_block_tokens);
  Result<std::unique_ptr<DigestTable>> table =
      dg.ok() ? DigestTable::Create(*dg, dir_options.pack_slots)
              : Result<std::unique_ptr<DigestTable>>(dg.status());
  auto inconsistent = [&b](std::string what) {
    b.reason = DiscardReason::kInconsistent;
    b.detail = std::move(what);
    return std::move(b);
  };
  if (!table.ok()) return inconsistent(table.status().ToString());
  // Only the digests of visible packs are imported: a table for a free slot is harmless
  // leftover, but every visible pack must be verifiable.
  const std::vector<SlotInfo> slots = (*dir)->Slots();
  uint64_t max_generation = 0;
  for (const SlotInfo& s : slots) max_generation = std::max(max_generation, s.generation);
  if (max_generation > snap.max_generation) {
    return inconsistent("directory generation " + Num(max_generation) +
                        " above the snapshot's recorded maximum " + Num(snap.max_generation));
  }
  for (const PackDigests& t : snap.digests) {
    if (t.slot >= slots.size()) continue;
    const SlotInfo& s = slots[t.slot];
    if (s.state != SlotState::kVisible || s.generation != t.generation) continue;
    const Status imported = (*table)->Import(t);
    if (!imported.ok()) return inconsistent(imported.ToString());
  }
  for (const NamespaceId& ns : (*dir)->Namespaces()) {
    for (const StoredPack& p : (*dir)->ListPacks(ns)) {
      const PackRecord& r = p.record;
      Result<PackDigests> d = (*table)->Get(r.pack_slot, r.generation);
      if (!d.ok()) {
        return inconsistent("visible pack slot " + Num(r.pack_slot) + " generation " +
                            Num(r.generation) + " has no digests");
      }
      if (r.pack_token_offset + r.tokens > d->stored_tokens) {
        return inconsistent("visible pack slot " + Num(r.pack_slot) + " holds " +
                            Num(r.pack_token_offset + r.tokens) + " tokens, digests cover " +
                            Num(d->stored_tokens));
      }
    }
  }
  b.directory = std::move(*dir);
  b.digests = std::move(*table);
  return b;
}

Result<std::unique_ptr<DigestTable>> EmptyDigests(const PackFile& pack,
                                                  const PersistenceOptions& options) {
  RANGEKV_ASSIGN_OR_RETURN(
      DigestGeometry dg, DigestGeometry::ForGeometry(pack.geometry(), options.digest_block_tokens));
  return DigestTable::Create(dg, options.directory.pack_slots);
}

Status ValidateOptions(const PackFile& pack, const PersistenceOptions& options) {
  const DirectoryOptions& d = options.directory;
  if (d.pack_slots != pack.pack_count() || d.tokens_per_pack != pack.geometry().tokens_per_stripe) {
    return InvalidArgument("persistence: directory options (" + Num(d.pack_slots) + " slots of " +
                           Num(d.tokens_per_pack) + " tokens) do not match the pack file (" +
                           Num(pack.pack_count()) + " of " +
                           Num(pack.geometry().tokens_per_stripe) + ")");
  }
  return OkStatus();
}

uint32_t CountVisible(const Directory& d) {
  uint32_t n = 0;
  for (const SlotInfo& s : d.Slots()) n += s.state == SlotState::kVisible ? 1 : 0;
  return n;
}

// ---- journal replay ---------------------------------------------------------------------------

// Reads every layer of the pack's stored tokens and compares their digests with the record's.
Status VerifyPublish(File* file, const PackFile& pack, const DigestGeometry& dg,
                     const JournalPublish& p, std::vector<uint8_t>& buf,
                     std::vector<uint64_t>& computed) {
  const uint64_t bytes = p.stored_tokens * dg.token_bytes();
  buf.resize(bytes);
  computed.resize(p.blocks_per_layer);
  for (uint32_t layer = 0; layer < p.layers; ++layer) {
    const uint64_t at = pack.Address(p.slot, layer, 0);
    uint64_t done = 0;
    while (done < bytes) {
      RANGEKV_ASSIGN_OR_RETURN(const uint64_t n,
                               file->ReadAt(at + done, buf.data() + done, bytes - done));
      if (n == 0) return Status(StatusCode::kShortTransfer, "payload read past the end");
      done += n;
    }
    RANGEKV_RETURN_IF_ERROR(ComputeLayerDigests(dg, buf.data(), p.stored_tokens, computed));
    for (uint64_t b = 0; b < p.blocks_per_layer; ++b) {
      if (computed[b] != p.digests[uint64_t{layer} * p.blocks_per_layer + b]) {
        const TokenRange t = dg.BlockTokens(b, p.stored_tokens);
        return Corruption("payload digest mismatch: " +
                          DescribeBlock(p.slot, p.generation, layer, t));
      }
    }
  }
  return OkStatus();
}

struct Replayed {
  Built built;  // null directory: the journal was not used (report.journal.ignored says why)
  bool snapshot_alone = false;  // the journal was older than the snapshot: load the snapshot
};

Replayed ReplayJournal(Env* env, const StorePaths& paths, const PackFile& pack, const FileState& st,
                       const DirectoryOptions& dir_options, const PersistenceOptions& options,
                       JournalReplayReport* jr) {
  Replayed out;
  jr->present = true;
  auto ignore = [&](std::string why, std::string detail) {
    jr->ignored = std::move(why);
    jr->detail = std::move(detail);
    return std::move(out);
  };
  Result<std::string> raw = env->ReadSmallFile(paths.journal(), journal_format::kMaxJournalBytes);
  if (!raw.ok()) return ignore("unreadable", raw.status().ToString());
  jr->bytes = raw->size();
  Result<DecodedJournal> decoded =
      DecodeJournal(std::span(reinterpret_cast<const uint8_t*>(raw->data()), raw->size()));
  if (!decoded.ok()) return ignore("unusable", decoded.status().ToString());
  DecodedJournal& j = *decoded;
  jr->base_epoch = j.header.base_epoch;
  jr->intact_bytes = j.intact_bytes;
  jr->records = j.records.size();
  jr->tail = std::string(JournalTailName(j.tail));
  jr->tail_detail = j.tail_detail;
  if (!(j.header.store_uuid == pack.uuid())) {
    return ignore("foreign_store", "journal of store " + j.header.store_uuid.ToHex() +
                                       ", this pack file is " + pack.uuid().ToHex());
  }
  const bool snapshot_ok = st.snapshot && st.snapshot_reason == DiscardReason::kNone;
  if (j.header.base_epoch != 0) {
    if (!snapshot_ok) {
      return ignore("base_snapshot_unusable",
                    "journal extends the snapshot of epoch " + Num(j.header.base_epoch) +
                        ", which is unusable (" +
                        std::string(DiscardReasonName(st.snapshot_reason)) + ": " +
                        st.snapshot_detail + ")");
    }
    if (j.header.base_epoch > st.snapshot->store_epoch) {
      return ignore("newer_than_snapshot",
                    "journal extends the snapshot of epoch " + Num(j.header.base_epoch) +
                        ", the snapshot on disk is of epoch " + Num(st.snapshot->store_epoch));
    }
  }
  // The base the records apply to.
  if (j.header.base_epoch != 0) {
    out.built = BuildFromSnapshot(*st.snapshot, dir_options);
    if (!out.built.directory) {
      return ignore("base_snapshot_unusable",
                    std::string(DiscardReasonName(out.built.reason)) + ": " + out.built.detail);
    }
    if (j.header.base_epoch < st.snapshot->store_epoch) {
      out.snapshot_alone = true;
      return ignore("older_than_snapshot",
                    "journal extends the snapshot of epoch " + Num(j.header.base_epoch) +
                        "; the snapshot of epoch " + Num(st.snapshot->store_epoch) +
                        " was checkpointed from it and is loaded alone");
    }
  } else {
    // Over the empty index the digest block size is the journal's own (its publications name
    // it) unless this open sets one: a reader that does not know the writer's setting (fsck's
    // dry run) then verifies what the writer wrote, and so does an open with the default.
    PersistenceOptions base_options = options;
    if (base_options.digest_block_tokens == 0) {
      for (const JournalRecord& r : j.records) {
        if (r.type != journal_format::kPublish) continue;
        if (DigestGeometry::ForGeometry(pack.geometry(), r.publish.digest_block_tokens).ok()) {
          base_options.digest_block_tokens = r.publish.digest_block_tokens;
        }
        break;
      }
    }
    Result<std::unique_ptr<Directory>> d = Directory::Create(dir_options);
    Result<std::unique_ptr<DigestTable>> t = EmptyDigests(pack, base_options);
    if (!d.ok() || !t.ok()) {
      return ignore("unusable", (d.ok() ? t.status() : d.status()).ToString());
    }
    out.built.directory = std::move(*d);
    out.built.digests = std::move(*t);
  }
  Directory& dir = *out.built.directory;
  DigestTable& table = *out.built.digests;
  const DigestGeometry& dg = table.geometry();
  jr->used = true;

  // A publish followed by the removal of the same pack is net-removed: not verified, not
  // applied (and never inserted, so it cannot disturb what the base holds).
  std::map<std::pair<uint32_t, uint64_t>, size_t> last_remove;
  for (size_t i = 0; i < j.records.size(); ++i) {
    const JournalRecord& r = j.records[i];
    if (r.type == journal_format::kRemove) last_remove[{r.remove.slot, r.remove.generation}] = i;
  }
  Result<std::unique_ptr<File>> file = env->OpenFile(
      pack.path(), FileOptions{.mode = OpenMode::kReadOnly, .direct = DirectIo::kOff});
  std::vector<uint8_t> buf;
  std::vector<uint64_t> computed;
  auto drop = [&](const JournalRecord& r, uint64_t* counter, const std::string& why) {
    ++*counter;
    if (jr->drops.size() < 64) {
      jr->drops.push_back("record " + Num(r.sequence) + " (pack slot " + Num(r.publish.slot) +
                          " generation " + Num(r.publish.generation) + "): " + why);
    }
  };
  for (size_t i = 0; i < j.records.size(); ++i) {
    const JournalRecord& r = j.records[i];
    if (r.type == journal_format::kEpoch) continue;
    if (r.type == journal_format::kRemove) {
      if (r.remove.slot < dir_options.pack_slots) {
        const SlotInfo info = dir.Slot(r.remove.slot);
        if (info.state == SlotState::kVisible && info.generation == r.remove.generation) {
          Result<InvalidateResult> gone = dir.InvalidatePack(r.remove.slot, r.remove.generation);
          if (gone.ok()) {
            table.Drop(r.remove.slot, r.remove.generation);
            ++jr->removes_applied;
          }
        }
      }
      continue;
    }
    const JournalPublish& p = r.publish;
    auto later = last_remove.find({p.slot, p.generation});
    if (later != last_remove.end() && later->second > i) {
      ++jr->publishes_removed_later;
      continue;
    }
    if (p.slot >= dir_options.pack_slots || p.layers != dg.layers() ||
        p.digest_block_tokens != dg.block_tokens() || p.stored_tokens > dg.tokens_per_pack()) {
      drop(r, &jr->dropped_invalid, "does not fit this store's geometry");
      continue;
    }
    const SlotInfo info = dir.Slot(p.slot);
    if (info.state == SlotState::kVisible && info.generation == p.generation) {
      ++jr->publishes_present;
      continue;
    }
    if (info.generation > p.generation) {
      drop(r, &jr->dropped_conflict, "the slot is at a newer generation");
      continue;
    }
    const uint64_t cost = p.stored_tokens * dg.token_bytes() * p.layers;
    if (jr->bytes_verified + cost > options.verify_budget_bytes) {
      drop(r, &jr->dropped_budget, "over the verification budget");
      continue;
    }
    const Status placed =
        dir.ReplayPublish(p.ns, p.path_tokens, p.slot, p.generation, p.stored_tokens);
    if (!placed.ok()) {
      if (placed.code() == StatusCode::kNotFound) {
        drop(r, &jr->dropped_parent, placed.message());
      } else if (placed.code() == StatusCode::kFailedPrecondition ||
                 placed.code() == StatusCode::kStaleGeneration) {
        drop(r, &jr->dropped_conflict, placed.message());
      } else {
        drop(r, &jr->dropped_invalid, placed.ToString());
      }
      continue;
    }
    jr->bytes_verified += cost;
    Status verified =
        file.ok() ? VerifyPublish(file->get(), pack, dg, p, buf, computed) : file.status();
    if (verified.ok()) verified = table.Record(p.slot, p.generation, p.stored_tokens, p.digests);
    if (!verified.ok()) {
      (void)dir.InvalidatePack(p.slot, p.generation);
      table.Drop(p.slot, p.generation);
      drop(r, &jr->dropped_unverified, verified.ToString());
      continue;
    }
    ++jr->publishes_kept;
  }
  // A pack whose parent was dropped after it was placed went with it (InvalidatePack removes
  // what is stored below): forget the digests of everything no longer visible.
  const std::vector<SlotInfo> slots = dir.Slots();
  for (uint32_t s = 0; s < slots.size(); ++s) {
    if (slots[s].state != SlotState::kVisible) table.Drop(s, slots[s].generation);
  }
  return out;
}

}  // namespace

// ---- names ------------------------------------------------------------------------------------

std::string_view DiscardReasonName(DiscardReason reason) {
  switch (reason) {
    case DiscardReason::kNone:
      return "none";
    case DiscardReason::kNewStore:
      return "new_store";
    case DiscardReason::kDirty:
      return "dirty";
    case DiscardReason::kMissingSnapshot:
      return "missing_snapshot";
    case DiscardReason::kUnreadableSnapshot:
      return "unreadable_snapshot";
    case DiscardReason::kTruncated:
      return "truncated";
    case DiscardReason::kCorruptChecksum:
      return "corrupt_checksum";
    case DiscardReason::kMalformed:
      return "malformed";
    case DiscardReason::kWrongVersion:
      return "wrong_version";
    case DiscardReason::kWrongStoreUuid:
      return "wrong_store_uuid";
    case DiscardReason::kWrongGeometry:
      return "wrong_geometry";
    case DiscardReason::kWrongNamespace:
      return "wrong_namespace";
    case DiscardReason::kPackLayoutMismatch:
      return "pack_layout_mismatch";
    case DiscardReason::kPackSizeMismatch:
      return "pack_size_mismatch";
    case DiscardReason::kDirectoryRejected:
      return "directory_rejected";
    case DiscardReason::kInconsistent:
      return "inconsistent";
  }
  return "unknown";
}

std::string_view ShutdownStepName(ShutdownStep step) {
  switch (step) {
    case ShutdownStep::kPayloadSynced:
      return "payload_synced";
    case ShutdownStep::kTempWritten:
      return "temp_written";
    case ShutdownStep::kTempSynced:
      return "temp_synced";
    case ShutdownStep::kRenamed:
      return "renamed";
    case ShutdownStep::kRenameDirSynced:
      return "rename_dir_synced";
    case ShutdownStep::kMarkerRemoved:
      return "marker_removed";
    case ShutdownStep::kMarkerDirSynced:
      return "marker_dir_synced";
  }
  return "unknown";
}

// ---- epoch file -------------------------------------------------------------------------------

std::string EncodeEpochFile(uint64_t epoch, const StoreUuid& uuid) {
  coding::ByteWriter w;
  w.Bytes(kEpochMagic, sizeof(kEpochMagic));
  w.U32(kEpochVersion);
  w.U32(0);
  w.U64(uuid.lo);
  w.U64(uuid.hi);
  w.U64(epoch);
  w.U64(Hash64(w.bytes().data(), w.size(), kEpochChecksumSeed));
  const std::vector<uint8_t>& b = w.bytes();
  return std::string(b.begin(), b.end());
}

Result<uint64_t> DecodeEpochFile(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 12) {
    return Status(StatusCode::kTruncated, "epoch file: " + Num(bytes.size()) + " bytes");
  }
  if (std::memcmp(p, kEpochMagic, sizeof(kEpochMagic)) != 0) {
    return Corruption("epoch file: bad magic");
  }
  const uint32_t version = coding::LoadU32(p + 8);
  if (version != kEpochVersion) {
    return Status(StatusCode::kWrongVersion, "epoch file: version " + Num(version));
  }
  if (bytes.size() != kEpochFileBytes) {
    return Status(bytes.size() < kEpochFileBytes ? StatusCode::kTruncated : StatusCode::kCorruption,
                  "epoch file: " + Num(bytes.size()) + " bytes, expected " + Num(kEpochFileBytes));
  }
  if (Hash64(p, kEpochFileBytes - 8, kEpochChecksumSeed) != coding::LoadU64(p + 40)) {
    return Corruption("epoch file: checksum mismatch");
  }
  const uint64_t epoch = coding::LoadU64(p + 32);
  if (coding::LoadU32(p + 12) != 0 || epoch == 0 || epoch > sf::kMaxStoreEpoch) {
    return Corruption("epoch file: impossible epoch " + Num(epoch));
  }
  return epoch;
}

// ---- Persistence ------------------------------------------------------------------------------

Persistence::Persistence(Env* env, StorePaths paths, uint64_t store_epoch, StoreUuid uuid,
                         PersistenceOptions options, uint64_t base_epoch, File* pack_file,
                         const DigestTable* digests)
    : env_(env),
      paths_(std::move(paths)),
      store_epoch_(store_epoch),
      store_uuid_(uuid),
      options_(std::move(options)),
      base_epoch_(base_epoch) {
  if (options_.journal.mode != DurabilityMode::kNone) {
    JournalOptions j = options_.journal;
    j.file_permissions = options_.file_permissions;
    journal_ = std::make_unique<JournalWriter>(env_, paths_, store_uuid_, pack_file, digests, j);
  }
}

Status Persistence::MarkDirty() {
  if (marked_.load(std::memory_order_acquire)) return OkStatus();
  MutexLock lock(mu_);
  if (marked_.load(std::memory_order_relaxed)) return OkStatus();
  if (journal_ != nullptr) {
    // The journal exists before the marker: a dirty store always has the journal of its session.
    RANGEKV_RETURN_IF_ERROR(journal_->Start(base_epoch_, store_epoch_, generation_floor()));
  } else if (env_->FileExists(paths_.journal())) {
    // An earlier session's journal must not be replayed over what this session writes.
    RANGEKV_RETURN_IF_ERROR(env_->DeleteFile(paths_.journal()).WithContext("stale journal"));
  }
  const std::string contents = "rangekv dirty marker\nstore_uuid " + store_uuid_.ToHex() +
                               "\nstore_epoch " + Num(store_epoch_) + "\n";
  // WriteSmallFile creates (or truncates) the file, writes it and fsyncs it; the directory
  // entry needs its own fsync (which also makes the journal's rename or deletion durable).
  RANGEKV_RETURN_IF_ERROR(env_->WriteSmallFile(paths_.dirty_marker(), contents, /*sync=*/true)
                              .WithContext("dirty marker"));
  if (options_.file_permissions != FileOptions{}.permissions) {
    RANGEKV_RETURN_IF_ERROR(env_->SetPermissions(paths_.dirty_marker(), options_.file_permissions)
                                .WithContext("dirty marker"));
  }
  RANGEKV_RETURN_IF_ERROR(env_->SyncDir(paths_.dir).WithContext("dirty marker"));
  marked_.store(true, std::memory_order_release);
  return OkStatus();
}

Status Persistence::Step(ShutdownStep step) const {
  if (!options_.shutdown_hook) return OkStatus();
  return options_.shutdown_hook(step);
}

void Persistence::EnableCheckpoints(const PackFile& pack, const Directory& directory,
                                    const DigestTable& digests) {
  if (journal_ == nullptr) return;
  journal_->set_checkpoint([this, &pack, &directory, &digests]() -> Result<JournalWriter::Cut> {
    uint64_t lsn = 0;
    RANGEKV_RETURN_IF_ERROR(WriteSnapshot(pack, directory, digests, /*hooks=*/false, &lsn));
    return JournalWriter::Cut{store_epoch_, lsn};
  });
}

Status Persistence::WriteSnapshot(const PackFile& pack, const Directory& directory,
                                  const DigestTable& digests, bool hooks, uint64_t* cut_lsn) {
  auto ctx = [](std::string_view what) { return std::string("snapshot: ") + std::string(what); };
  auto step = [&](ShutdownStep s) { return hooks ? Step(s) : OkStatus(); };
  // 1. Build the snapshot: the directory and the digests of its visible packs at one instant
  // (and, for a checkpoint, the journal position that instant corresponds to).
  Snapshot snap;
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t file_bytes, pack.file()->Size());
  snap.identity = SnapshotIdentity::ForPack(pack.header(), file_bytes);
  snap.store_epoch = store_epoch_;
  snap.saved_time_unix_ns = NowUnixNs(options_);
  snap.digest_block_tokens = digests.geometry().block_tokens();
  Status missing = OkStatus();
  snap.directory = directory.SerializeCut([&](const std::vector<SlotInfo>& slots) {
    if (cut_lsn != nullptr && journal_ != nullptr) *cut_lsn = journal_->LastQueuedLsn();
    for (uint32_t s = 0; s < slots.size(); ++s) {
      snap.max_generation = std::max(snap.max_generation, slots[s].generation);
      if (slots[s].state != SlotState::kVisible) continue;
      Result<PackDigests> d = digests.Get(s, slots[s].generation);
      if (!d.ok()) {
        if (missing.ok()) {
          missing = FailedPrecondition(ctx("visible pack slot " + Num(s) + " generation " +
                                           Num(slots[s].generation) +
                                           " has no complete digests: " + d.status().message()));
        }
        continue;
      }
      snap.digests.push_back(std::move(*d));
    }
  });
  RANGEKV_RETURN_IF_ERROR(missing);
  // 0. Payload durable before anything claims it is described (after the cut: every pack
  // visible at the cut was completely written before it was published).
  RANGEKV_RETURN_IF_ERROR(pack.file()->Sync().WithContext(ctx("fsync pack file")));
  RANGEKV_RETURN_IF_ERROR(step(ShutdownStep::kPayloadSynced));
  const std::vector<uint8_t> bytes = EncodeSnapshot(snap);

  // 2. Temporary file, written and made durable.
  RANGEKV_RETURN_IF_ERROR(WriteNewFile(env_, paths_.snapshot_temp(), bytes.data(), bytes.size(),
                                       options_.file_permissions,
                                       [&] { return step(ShutdownStep::kTempWritten); })
                              .WithContext(ctx("write snapshot")));
  RANGEKV_RETURN_IF_ERROR(step(ShutdownStep::kTempSynced));
  // 3. Rename into place, durably.
  RANGEKV_RETURN_IF_ERROR(env_->RenameFile(paths_.snapshot_temp(), paths_.snapshot())
                              .WithContext(ctx("rename snapshot")));
  RANGEKV_RETURN_IF_ERROR(step(ShutdownStep::kRenamed));
  RANGEKV_RETURN_IF_ERROR(env_->SyncDir(paths_.dir).WithContext(ctx("fsync store directory")));
  RANGEKV_RETURN_IF_ERROR(step(ShutdownStep::kRenameDirSynced));
  Log(LogLevel::kInfo, "store " + paths_.dir + ": snapshot saved (" + Num(bytes.size()) +
                           " bytes, " + Num(snap.digests.size()) + " packs, epoch " +
                           Num(store_epoch_) + ")");
  return OkStatus();
}

Status Persistence::SaveClean(const PackFile& pack, const Directory& directory,
                              const DigestTable& digests) {
  if (journal_ != nullptr && journal_->started()) {
    // The session's journaling ends here; what it still held is in the snapshot below.
    const Status flushed = journal_->Stop();
    if (!flushed.ok()) {
      Log(LogLevel::kWarning,
          "store " + paths_.dir + ": journal at shutdown: " + flushed.ToString());
    }
  }
  MutexLock lock(mu_);
  auto ctx = [](std::string_view what) {
    return std::string("clean shutdown: ") + std::string(what);
  };
  RANGEKV_RETURN_IF_ERROR(WriteSnapshot(pack, directory, digests, /*hooks=*/true, nullptr));
  // 4. Only now the marker may go: the snapshot it protects is durable.
  if (env_->FileExists(paths_.dirty_marker())) {
    const Status removed = env_->DeleteFile(paths_.dirty_marker());
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      return removed.WithContext(ctx("remove dirty marker"));
    }
  }
  RANGEKV_RETURN_IF_ERROR(Step(ShutdownStep::kMarkerRemoved));
  RANGEKV_RETURN_IF_ERROR(env_->SyncDir(paths_.dir).WithContext(ctx("fsync store directory")));
  marked_.store(false, std::memory_order_release);
  // The snapshot is the new base: a later journal of this session extends it.
  base_epoch_ = store_epoch_;
  RANGEKV_RETURN_IF_ERROR(Step(ShutdownStep::kMarkerDirSynced));
  // A clean store needs no journal (a clean open ignores it; the next MarkDirty replaces it).
  if (env_->FileExists(paths_.journal())) {
    const Status gone = env_->DeleteFile(paths_.journal());
    if (!gone.ok()) Log(LogLevel::kInfo, "store " + paths_.dir + ": " + gone.ToString());
  }
  Log(LogLevel::kInfo, "store " + paths_.dir + ": clean (epoch " + Num(store_epoch_) + ")");
  return OkStatus();
}

// ---- open ----------------------------------------------------------------------------------

Result<OpenedIndex> OpenIndex(Env* env, const std::string& store_dir, const PackFile& pack,
                              PackOrigin origin, const PersistenceOptions& options) {
  RANGEKV_RETURN_IF_ERROR(ValidateOptions(pack, options));
  const StorePaths paths(store_dir);
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t pack_file_bytes, pack.file()->Size());
  FileState st = ReadFiles(env, paths, pack, origin, pack_file_bytes);

  // The new epoch: above everything any earlier session could have used.
  uint64_t epoch = 1;
  bool from_clock = false;
  if (st.epoch_file_epoch) epoch = std::max(epoch, *st.epoch_file_epoch + 1);
  if (st.snapshot) {
    // Even a snapshot of another binding is a witness of epochs used in this directory.
    epoch = std::max(epoch, st.snapshot->store_epoch + 1);
    epoch = std::max(epoch, (st.snapshot->max_generation >> 32) + 1);
  }
  if (!st.epoch_file_epoch && origin == PackOrigin::kOpened) {
    const uint64_t seconds = NowUnixNs(options) / 1000000000ull;
    if (seconds > epoch) {
      epoch = seconds;
      from_clock = true;
    }
    Log(LogLevel::kWarning, "store " + store_dir + ": epoch file " + st.epoch_file_problem +
                                "; new store epoch " + Num(epoch) +
                                " (at least the wall clock in seconds)");
  }

  OpenedIndex out;
  RecoveryReport& report = out.report;
  report.previous_epoch = st.epoch_file_epoch.value_or(0);
  report.snapshot_bytes = st.snapshot_bytes;
  report.epoch_from_clock = from_clock;
  report.reason = st.reason;
  report.detail = st.detail;

  DirectoryOptions dir_options = options.directory;
  if (epoch > sf::kMaxStoreEpoch) {
    return ResourceExhausted("store " + store_dir + ": store epoch space exhausted (" + Num(epoch) +
                             "); delete the store to start over");
  }
  dir_options.owner_epoch = epoch;
  // Every generation this session issues lies above everything an earlier session could have
  // issued (fewer than 2^32 reuses of a slot per session), whether the index loads or not.
  dir_options.generation_floor = epoch << 32;
  bool replayed = false;
  uint64_t base_epoch = 0;
  if (st.reason == DiscardReason::kNone) {
    Built b = BuildFromSnapshot(*st.snapshot, dir_options);
    if (b.directory) {
      // Deserialize may raise the owner epoch above ours (an older epoch in its own header
      // would not, by construction); keep the two equal.
      epoch = std::max(epoch, b.directory->owner_epoch());
      out.directory = std::move(b.directory);
      out.digests = std::move(b.digests);
      base_epoch = st.snapshot->store_epoch;
    } else {
      report.reason = b.reason;
      report.detail = b.detail;
    }
  } else if (st.reason == DiscardReason::kDirty && env->FileExists(paths.journal())) {
    JournalReplayReport& jr = report.journal;
    Replayed r = ReplayJournal(env, paths, pack, st, dir_options, options, &jr);
    if (r.built.directory) {
      epoch = std::max(epoch, r.built.directory->owner_epoch());
      out.directory = std::move(r.built.directory);
      out.digests = std::move(r.built.digests);
      report.reason = DiscardReason::kNone;
      replayed = true;
      if (r.snapshot_alone) {
        report.detail = jr.detail;
      } else {
        report.detail = "journal over " +
                        (jr.base_epoch == 0 ? std::string("the empty index")
                                            : "the snapshot of epoch " + Num(jr.base_epoch)) +
                        ": " + Num(jr.records) + " records (tail " + jr.tail +
                        (jr.tail_detail.empty() ? "" : ": " + jr.tail_detail) + "), " +
                        Num(jr.publishes_kept) + " publications kept, " + Num(jr.dropped()) +
                        " dropped, " + Num(jr.removes_applied) + " removals, " +
                        Num(jr.bytes_verified) + " payload bytes verified";
      }
      Log(jr.dropped() > 0 || jr.tail != "clean" ? LogLevel::kWarning : LogLevel::kInfo,
          "store " + store_dir + ": dirty; " + report.detail);
      for (const std::string& d : jr.drops) {
        Log(LogLevel::kWarning, "store " + store_dir + ": journal: dropped " + d);
      }
    } else {
      report.detail += "; journal ignored (" + jr.ignored + "): " + jr.detail;
      Log(LogLevel::kWarning,
          "store " + store_dir + ": journal ignored (" + jr.ignored + "): " + jr.detail);
    }
  }
  if (!out.directory) {
    RANGEKV_ASSIGN_OR_RETURN(out.directory, Directory::Create(dir_options));
    RANGEKV_ASSIGN_OR_RETURN(out.digests, EmptyDigests(pack, options));
  }

  // Durable before anything of this session can be handed out.
  RANGEKV_RETURN_IF_ERROR(ReplaceFileDurably(env, paths.dir, paths.epoch_temp(), paths.epoch(),
                                             EncodeEpochFile(epoch, pack.uuid()),
                                             options.file_permissions)
                              .WithContext("store " + store_dir + ": epoch file"));

  // Capacity is a setting, not a verdict on the data: a store reopened with a smaller capacity
  // keeps the packs that fit (most recently used first, the normal eviction order) wherever
  // their slots lie, and evicts the rest.
  uint32_t trimmed = 0;
  if (report.reason == DiscardReason::kNone) {
    const uint32_t before = CountVisible(*out.directory);
    trimmed = out.directory->EvictOverCapacity();
    if (trimmed > 0) {
      const std::vector<SlotInfo> slots = out.directory->Slots();
      for (uint32_t s = 0; s < slots.size(); ++s) {
        if (slots[s].state != SlotState::kVisible) out.digests->Drop(s, slots[s].generation);
      }
      report.packs_evicted_for_capacity = trimmed;
      Log(LogLevel::kWarning,
          "store " + store_dir + ": capacity of " + Num(out.directory->options().capacity_bytes) +
              " bytes holds " + Num(before - trimmed) + " of the " + Num(before) +
              " packs found; evicted " + Num(trimmed) + " (least recently used first)");
    }
  }

  report.store_epoch = epoch;
  report.generation_floor = epoch << 32;
  if (report.reason == DiscardReason::kNone) {
    report.outcome = RecoveryOutcome::kLoaded;
    report.packs_loaded = CountVisible(*out.directory);
    if (!replayed) {
      report.detail = "loaded " + Num(report.packs_loaded) + " packs from " + paths.snapshot();
    }
    Log(LogLevel::kInfo, "store " + store_dir + ": index loaded: " + Num(report.packs_loaded) +
                             " packs, store epoch " + Num(epoch));
  } else {
    report.outcome = RecoveryOutcome::kStartedEmpty;
    if (report.reason == DiscardReason::kNewStore) {
      Log(LogLevel::kInfo,
          "store " + store_dir + ": new store, starting empty at store epoch " + Num(epoch));
    } else {
      Log(LogLevel::kWarning, "store " + store_dir + ": index discarded (" +
                                  std::string(DiscardReasonName(report.reason)) + "): " +
                                  report.detail + "; starting empty at store epoch " + Num(epoch));
    }
  }
  out.persistence = std::unique_ptr<Persistence>(new Persistence(
      env, paths, epoch, pack.uuid(), options, base_epoch, pack.file(), out.digests.get()));
  if (replayed || trimmed > 0) {
    // The replayed (or trimmed) index becomes the snapshot of this epoch at once: the store is
    // clean, and this session's journal (if any) extends that snapshot. A trim must be durable
    // before a store reuses a slot it freed: otherwise a crash would bring the old snapshot
    // back, naming a pack whose bytes were overwritten.
    RANGEKV_RETURN_IF_ERROR(
        out.persistence->SaveClean(pack, *out.directory, *out.digests)
            .WithContext("store " + store_dir + ": checkpoint after " +
                         (replayed ? "journal replay" : "eviction to capacity")));
  }
  if (out.persistence->journal() != nullptr) {
    RANGEKV_RETURN_IF_ERROR(out.directory->AddObserver(out.persistence->journal()));
  }
  return out;
}

Result<InspectedIndex> InspectIndex(Env* env, const std::string& store_dir, const PackFile& pack,
                                    const PersistenceOptions& options) {
  RANGEKV_RETURN_IF_ERROR(ValidateOptions(pack, options));
  const StorePaths paths(store_dir);
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t pack_file_bytes, pack.file()->Size());
  FileState st = ReadFiles(env, paths, pack, PackOrigin::kOpened, pack_file_bytes);
  InspectedIndex out;
  out.dirty_marker_present = st.marker_present;
  out.dirty_marker_contents = st.marker_contents;
  out.epoch_file_epoch = st.epoch_file_epoch;
  out.epoch_file_problem = st.epoch_file_problem;
  RecoveryReport& report = out.report;
  report.previous_epoch = st.epoch_file_epoch.value_or(0);
  report.snapshot_bytes = st.snapshot_bytes;
  report.reason = st.reason;
  report.detail = st.detail;
  // A dirty store's snapshot is still worth showing (it is what the last clean close wrote).
  if (st.marker_present && !st.snapshot && env->FileExists(paths.snapshot())) {
    Result<std::string> raw = env->ReadSmallFile(paths.snapshot(), sf::kMaxSnapshotBytes);
    if (raw.ok()) {
      Result<Snapshot> snap =
          DecodeSnapshot(std::span(reinterpret_cast<const uint8_t*>(raw->data()), raw->size()));
      if (snap.ok()) st.snapshot = std::move(*snap);
      report.snapshot_bytes = raw->size();
    }
  }
  if (st.reason == DiscardReason::kNone) {
    DirectoryOptions dir_options = options.directory;
    dir_options.owner_epoch = std::max<uint64_t>(1, st.snapshot->store_epoch);
    Built b = BuildFromSnapshot(*st.snapshot, dir_options);
    if (b.directory) {
      out.directory = std::move(b.directory);
      out.digests = std::move(b.digests);
      report.outcome = RecoveryOutcome::kLoaded;
      report.packs_loaded = CountVisible(*out.directory);
      report.detail = "snapshot of " + Num(report.packs_loaded) + " packs saved by store epoch " +
                      Num(st.snapshot->store_epoch) + " would be loaded";
    } else {
      report.reason = b.reason;
      report.detail = b.detail;
    }
  } else if (st.reason == DiscardReason::kDirty && env->FileExists(paths.journal())) {
    // A dry run of the replay the next open will do (ReplayJournal reads, never writes): which
    // publications it keeps (their payload digests verified now, as the open would) and which
    // it drops, and the index it would start from.
    DirectoryOptions dir_options = options.directory;
    dir_options.owner_epoch = std::max<uint64_t>(
        {uint64_t{1}, st.epoch_file_epoch.value_or(0), st.snapshot ? st.snapshot->store_epoch : 0});
    JournalReplayReport& jr = report.journal;
    Replayed r = ReplayJournal(env, paths, pack, st, dir_options, options, &jr);
    if (r.built.directory) {
      out.directory = std::move(r.built.directory);
      out.digests = std::move(r.built.digests);
      report.outcome = RecoveryOutcome::kLoaded;
      report.reason = DiscardReason::kNone;
      report.packs_loaded = CountVisible(*out.directory);
      report.detail =
          r.snapshot_alone
              ? jr.detail
              : "dirty; the next open replays the journal over " +
                    (jr.base_epoch == 0 ? std::string("the empty index")
                                        : "the snapshot of epoch " + Num(jr.base_epoch)) +
                    ": " + Num(jr.records) + " records (tail " + jr.tail + "), " +
                    Num(jr.publishes_kept) + " publications kept, " + Num(jr.dropped()) +
                    " dropped, " + Num(jr.removes_applied) + " removals; " +
                    Num(report.packs_loaded) + " packs would be loaded";
    } else {
      report.detail += "; the next open ignores the journal (" + jr.ignored + "): " + jr.detail;
    }
  }
  out.snapshot = std::move(st.snapshot);
  return out;
}

}  // namespace rangekv::persist
