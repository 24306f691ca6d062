#include "persist/offline.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "persist/journal.h"
#include "persist/store_access.h"
#include "persist/store_layout.h"

namespace rangekv::persist {
namespace {

std::string Num(uint64_t v) { return std::to_string(v); }

// Offline loads are bounded by what the format allows, not by a running engine's tuning.
DirectoryOptions OfflineDirectoryOptions(const PackFile& pack) {
  DirectoryOptions o =
      DirectoryOptions::ForGeometry(pack.geometry(), static_cast<uint32_t>(pack.pack_count()));
  o.max_nodes = 1u << 24;
  o.max_records = 1u << 24;
  o.max_arena_bytes = uint64_t{1} << 30;
  o.max_namespaces = 1u << 16;
  return o;
}

class Problems {
 public:
  explicit Problems(FsckReport* report) : report_(report) {}
  void Add(std::string kind, std::string message, std::optional<BadBlock> block = std::nullopt) {
    if (report_->problems.size() >= kMaxFsckProblems) {
      ++report_->problems_omitted;
      return;
    }
    report_->problems.push_back({std::move(kind), std::move(message), std::move(block)});
  }

 private:
  FsckReport* report_;
};

std::string_view KindForReason(DiscardReason r) {
  switch (r) {
    case DiscardReason::kDirty:
      return "dirty";
    case DiscardReason::kDirectoryRejected:
      return "directory";
    case DiscardReason::kInconsistent:
      return "consistency";
    default:
      return "snapshot";
  }
}

// Reads exactly `size` bytes at `offset` (short reads continued; 0 bytes is an error).
Status ReadFully(File* file, uint64_t offset, uint8_t* buf, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n,
                             file->ReadAt(offset + done, buf + done, size - done));
    if (n == 0) {
      return Status(StatusCode::kShortTransfer,
                    "read " + Num(done) + " of " + Num(size) + " bytes at offset " + Num(offset));
    }
    done += n;
  }
  return OkStatus();
}

void CheckConsistency(const OfflineStore& store, Problems& problems) {
  const Directory& dir = *store.index.directory;
  const Status invariants = dir.CheckInvariants();
  if (!invariants.ok()) problems.Add("directory", invariants.ToString());
  const std::vector<SlotInfo> slots = dir.Slots();
  std::vector<uint32_t> listed(slots.size(), 0);
  const uint64_t tokens_per_pack = store.pack->geometry().tokens_per_stripe;
  for (const NamespaceId& ns : dir.Namespaces()) {
    for (const StoredPack& p : dir.ListPacks(ns)) {
      const PackRecord& r = p.record;
      const std::string name = "pack slot " + Num(r.pack_slot) + " generation " +
                               Num(r.generation) + " (namespace " + ns.ToHex() + ")";
      if (r.pack_slot >= slots.size()) {
        problems.Add("consistency", name + ": slot outside the pack file");
        continue;
      }
      ++listed[r.pack_slot];
      const SlotInfo& s = slots[r.pack_slot];
      if (s.state != SlotState::kVisible || s.generation != r.generation) {
        problems.Add("consistency", name + ": slot is " + std::string(SlotStateName(s.state)) +
                                        " at generation " + Num(s.generation));
      }
      if (r.tokens == 0 || r.pack_token_offset + r.tokens > tokens_per_pack) {
        problems.Add("consistency", name + ": " + Num(r.tokens) + " tokens at offset " +
                                        Num(r.pack_token_offset) + " do not fit a pack");
      }
    }
  }
  for (uint32_t s = 0; s < slots.size(); ++s) {
    if (slots[s].state == SlotState::kVisible && listed[s] != 1) {
      problems.Add("consistency", "visible pack slot " + Num(s) + " is held by " + Num(listed[s]) +
                                      " tree entries (expected 1)");
    }
  }
  // (After a replay the snapshot's packs that the journal removed are legitimately gone.)
  if (store.index.snapshot && !store.index.report.journal.used) {
    for (const PackDigests& t : store.index.snapshot->digests) {
      const bool live = t.slot < slots.size() && slots[t.slot].state == SlotState::kVisible &&
                        slots[t.slot].generation == t.generation;
      if (!live) {
        problems.Add("consistency", "digests for pack slot " + Num(t.slot) + " generation " +
                                        Num(t.generation) + ", which is not a visible pack");
      }
    }
  }
}

void VerifyPayload(const OfflineStore& store, Problems& problems, FsckReport* report) {
  const Directory& dir = *store.index.directory;
  const DigestTable& digests = *store.index.digests;
  const DigestGeometry& dg = digests.geometry();
  const PackFile& pack = *store.pack;
  const uint64_t s = pack.geometry().token_bytes;
  std::vector<uint8_t> buf(pack.geometry().tokens_per_stripe * s);
  for (const NamespaceId& ns : dir.Namespaces()) {
    for (const StoredPack& p : dir.ListPacks(ns)) {
      const PackRecord& r = p.record;
      Result<PackDigests> d = digests.Get(r.pack_slot, r.generation);
      if (!d.ok()) continue;  // reported by the consistency checks
      ++report->packs_checked;
      for (uint32_t l = 0; l < pack.geometry().layers; ++l) {
        const uint64_t bytes = d->stored_tokens * s;
        const Status read =
            ReadFully(pack.file(), pack.Address(r.pack_slot, l, 0), buf.data(), bytes);
        BadBlock where{ns, r.pack_slot,           r.generation,
                       l,  {0, d->stored_tokens}, {r.path_token_begin, r.path_token_end()}};
        if (!read.ok()) {
          problems.Add("payload_read",
                       DescribeBlock(r.pack_slot, r.generation, l, where.pack_tokens) + ": " +
                           read.ToString(),
                       where);
          continue;
        }
        report->bytes_read += bytes;
        for (uint64_t b = 0; b < d->blocks_per_layer; ++b) {
          ++report->blocks_checked;
          const TokenRange t = dg.BlockTokens(b, d->stored_tokens);
          if (BlockDigest(buf.data() + t.begin * s, t.size() * s) == d->at(l, b)) continue;
          // Where the block lies in the record's path interval.
          const uint64_t lo = std::max(t.begin, r.pack_token_offset);
          const uint64_t hi = std::min(t.end, r.pack_token_offset + r.tokens);
          where.pack_tokens = t;
          where.path_tokens = lo < hi ? TokenRange{r.path_token_begin + lo - r.pack_token_offset,
                                                   r.path_token_begin + hi - r.pack_token_offset}
                                      : TokenRange{r.path_token_end(), r.path_token_end()};
          problems.Add("payload_digest",
                       "payload digest mismatch: namespace " + ns.ToHex() + " " +
                           DescribeBlock(r.pack_slot, r.generation, l, t) + " = path tokens [" +
                           Num(where.path_tokens.begin) + ", " + Num(where.path_tokens.end) +
                           ") of the record holding path tokens [" + Num(r.path_token_begin) +
                           ", " + Num(r.path_token_end()) + ")",
                       where);
        }
      }
    }
  }
}

}  // namespace

namespace {

JournalSummary SummarizeJournal(Env* env, const StorePaths& paths, const PackFile& pack,
                                const std::optional<uint64_t>& epoch) {
  JournalSummary j;
  if (!env->FileExists(paths.journal())) return j;
  j.present = true;
  Result<std::string> bytes = env->ReadSmallFile(paths.journal(), journal_format::kMaxJournalBytes);
  if (!bytes.ok()) {
    j.problem = bytes.status().ToString();
    return j;
  }
  j.bytes = bytes->size();
  auto decoded =
      DecodeJournal(std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  if (!decoded.ok()) {
    j.problem = decoded.status().ToString();
    return j;
  }
  j.intact_bytes = decoded->intact_bytes;
  j.records = decoded->records.size();
  for (const JournalRecord& r : decoded->records) {
    j.publishes += r.type == journal_format::kPublish ? 1 : 0;
    j.removes += r.type == journal_format::kRemove ? 1 : 0;
    j.epochs += r.type == journal_format::kEpoch ? 1 : 0;
  }
  j.base_epoch = decoded->header.base_epoch;
  j.tail = std::string(JournalTailName(decoded->tail));
  j.tail_detail = decoded->tail_detail;
  if (!(decoded->header.store_uuid == pack.uuid())) {
    j.problem = "journal of another store (uuid " + decoded->header.store_uuid.ToHex() + ")";
  } else if (epoch && decoded->header.base_epoch > *epoch) {
    j.problem = "journal base epoch " + std::to_string(decoded->header.base_epoch) +
                " is newer than the store epoch " + std::to_string(*epoch);
  }
  return j;
}

}  // namespace

Result<OfflineStore> OpenOffline(Env* env, const std::string& dir) {
  const StorePaths paths(dir);
  if (!env->FileExists(paths.pack())) {
    return NotFound("no pack file " + paths.pack() + ": not a RangeKV store directory");
  }
  OfflineStore out;
  out.dir = dir;
  PackOpenOptions po;
  po.mode = OpenMode::kReadOnly;
  RANGEKV_ASSIGN_OR_RETURN(PackFile pack,
                           PackFile::Open(env, paths.pack(), PackExpectation::Any(), po));
  out.pack.emplace(std::move(pack));
  RANGEKV_ASSIGN_OR_RETURN(out.pack_file_bytes, out.pack->file()->Size());
  PersistenceOptions options;
  options.directory = OfflineDirectoryOptions(*out.pack);
  RANGEKV_ASSIGN_OR_RETURN(out.index, InspectIndex(env, dir, *out.pack, options));
  out.journal = SummarizeJournal(env, paths, *out.pack, out.index.epoch_file_epoch);
  Result<std::optional<std::string>> holder = env->LockHolder(paths.lock());
  if (holder.ok()) out.holder = *holder;
  JournalSummary& j = out.journal;
  if (j.present && out.index.dirty_marker_present) {
    // The rule of a dirty open (persistence.h), from the snapshot as decoded.
    const std::optional<Snapshot>& snap = out.index.snapshot;
    if (!j.problem.empty()) {
      j.replay = "ignored: " + j.problem;
    } else if (j.base_epoch == 0) {
      j.replay = "replay over the empty index";
    } else if (!snap) {
      j.replay = "ignored: base_snapshot_unusable";
    } else if (j.base_epoch > snap->store_epoch) {
      j.replay = "ignored: newer_than_snapshot";
    } else if (j.base_epoch < snap->store_epoch) {
      j.replay = "ignored: older_than_snapshot (the snapshot loads alone)";
    } else {
      j.replay = "replay over the snapshot of epoch " + std::to_string(j.base_epoch);
    }
  }
  return out;
}

Result<FsckReport> Fsck(Env* env, const std::string& dir, const FsckOptions& options) {
  FsckReport report;
  report.dir = dir;
  Problems problems(&report);
  const StorePaths paths(dir);
  if (!env->FileExists(paths.pack())) {
    return NotFound("no pack file " + paths.pack() + ": not a RangeKV store directory");
  }
  Result<OfflineStore> store = OpenOffline(env, dir);
  if (!store.ok()) {
    problems.Add("pack_header", store.status().ToString());
    return report;
  }
  FsckRecovery& rec = report.recovery;
  rec.in_use_by = store->holder;
  // The engine's own check, as the store's owner (whoever runs fsck, root included) would meet
  // it at open: files of another user, or writable by group or others, are refused.
  Result<PathInfo> owner = env->Stat(dir);
  const Status access =
      owner.ok() ? CheckStoreAccess(env, paths, owner->owner_uid) : owner.status();
  if (!access.ok()) {
    problems.Add("permissions", "an engine refuses to open this store (" + access.ToString() + ")");
  }
  const InspectedIndex& index = store->index;
  const RecoveryReport& rr = index.report;
  rec.opens = access.ok();
  rec.journal_replayed = rr.journal.used && rr.outcome == RecoveryOutcome::kLoaded;
  rec.index = rr.outcome != RecoveryOutcome::kLoaded ? "discarded"
              : rec.journal_replayed                 ? "replayed"
                                                     : "loaded";
  rec.detail = rr.detail;
  rec.packs = rr.outcome == RecoveryOutcome::kLoaded ? rr.packs_loaded : 0;
  rec.publications_kept = rr.journal.publishes_kept;
  rec.publications_dropped = rr.journal.dropped();
  if (!index.epoch_file_problem.empty()) {
    problems.Add("epoch_file", "epoch file " + paths.epoch() + ": " + index.epoch_file_problem);
  }
  const RecoveryReport& r = index.report;
  if (r.reason != DiscardReason::kNone) {
    problems.Add(std::string(KindForReason(r.reason)),
                 std::string(DiscardReasonName(r.reason)) + ": " + r.detail);
  }
  const JournalSummary& j = store->journal;
  if (!j.problem.empty()) problems.Add("journal", paths.journal() + ": " + j.problem);
  if (j.present && j.problem.empty() && j.tail != "clean") {
    problems.Add("journal", paths.journal() + ": " + std::to_string(j.bytes - j.intact_bytes) +
                                " bytes after record " + std::to_string(j.records) +
                                " would be dropped (" + j.tail + "): " + j.tail_detail);
  }
  if (j.present && j.problem.empty() && j.replay.rfind("ignored: ", 0) == 0 &&
      j.replay.find("older_than_snapshot") == std::string::npos) {
    problems.Add("journal",
                 paths.journal() + ": a dirty open would ignore it (" + j.replay.substr(9) + ")");
  }
  // What the replay would lose: each publication it drops is a pack the store had published
  // (and, under every_publish, acknowledged as durable) that the next open will not serve.
  for (const std::string& d : rr.journal.drops) {
    problems.Add("journal", "the next open drops " + d);
  }
  if (rr.journal.dropped() > rr.journal.drops.size()) {
    problems.Add("journal", "the next open drops " +
                                std::to_string(rr.journal.dropped() - rr.journal.drops.size()) +
                                " more publications (not listed)");
  }
  if (!index.directory) return report;
  CheckConsistency(*store, problems);
  if (options.verify_payload) VerifyPayload(*store, problems, &report);
  return report;
}

}  // namespace rangekv::persist
