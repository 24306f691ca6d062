#include "persist/journal_writer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/log.h"

namespace rangekv::persist {

namespace {

uint64_t ElapsedNs(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

namespace jf = journal_format;

std::string Num(uint64_t v) { return std::to_string(v); }

// Bytes a record takes in the file (header + payload + checksum), for the bounds.
uint64_t RecordBytes(const JournalRecord& r) {
  uint64_t payload = 0;
  switch (r.type) {
    case jf::kPublish:
      payload =
          jf::kPublishFixedBytes + r.publish.path_tokens.size() * 4 + r.publish.digests.size() * 8;
      break;
    case jf::kRemove:
      payload = jf::kRemoveBytes;
      break;
    case jf::kEpoch:
      payload = jf::kEpochBytes;
      break;
  }
  return jf::kRecordHeaderBytes + payload + jf::kRecordChecksumBytes;
}

Status WriteAll(File* file, uint64_t offset, const std::vector<uint8_t>& bytes) {
  uint64_t done = 0;
  while (done < bytes.size()) {
    RANGEKV_ASSIGN_OR_RETURN(
        const uint64_t n, file->WriteAt(offset + done, bytes.data() + done, bytes.size() - done));
    if (n == 0) {
      return Status(StatusCode::kShortTransfer,
                    file->path() + ": wrote " + Num(done) + " of " + Num(bytes.size()) + " bytes");
    }
    done += n;
  }
  return OkStatus();
}

}  // namespace

std::string DurabilityName(DurabilityMode mode, uint64_t period_ms) {
  switch (mode) {
    case DurabilityMode::kNone:
      return "none";
    case DurabilityMode::kPeriodic:
      return "periodic:" + Num(period_ms);
    case DurabilityMode::kEveryPublish:
      return "every_publish";
  }
  return "unknown";
}

JournalWriter::JournalWriter(Env* env, StorePaths paths, StoreUuid uuid, File* pack_file,
                             const DigestTable* digests, JournalOptions options)
    : env_(env),
      paths_(std::move(paths)),
      uuid_(uuid),
      pack_file_(pack_file),
      digests_(digests),
      options_(options) {}

JournalWriter::~JournalWriter() { (void)Stop(); }

void JournalWriter::set_checkpoint(Checkpoint checkpoint) {
  MutexLock l(mu_);
  checkpoint_ = std::move(checkpoint);
}

bool JournalWriter::started() const {
  MutexLock l(mu_);
  return started_;
}

Status JournalWriter::CreateFile(uint64_t base_epoch) {
  const std::string tmp = paths_.journal_temp();
  if (env_->FileExists(tmp)) RANGEKV_RETURN_IF_ERROR(env_->DeleteFile(tmp));
  RANGEKV_ASSIGN_OR_RETURN(
      std::unique_ptr<File> f,
      env_->CreateFile(tmp, FileOptions{.mode = OpenMode::kReadWrite,
                                        .direct = DirectIo::kOff,
                                        .permissions = options_.file_permissions}));
  std::vector<uint8_t> bytes = EncodeJournalHeader({uuid_, base_epoch});
  JournalRecord epoch;
  epoch.type = jf::kEpoch;
  epoch.sequence = 1;
  epoch.epoch = {epoch_, generation_floor_};
  const std::vector<uint8_t> rec = EncodeJournalRecord(epoch);
  bytes.insert(bytes.end(), rec.begin(), rec.end());
  RANGEKV_RETURN_IF_ERROR(WriteAll(f.get(), 0, bytes));
  RANGEKV_RETURN_IF_ERROR(f->Sync());
  RANGEKV_RETURN_IF_ERROR(env_->RenameFile(tmp, paths_.journal()));
  file_ = std::move(f);
  file_bytes_ = bytes.size();
  next_sequence_ = 2;
  records_in_file_ = 0;
  file_started_ = std::chrono::steady_clock::now();
  return OkStatus();
}

Status JournalWriter::Start(uint64_t base_epoch, uint64_t store_epoch, uint64_t generation_floor) {
  {
    MutexLock l(mu_);
    if (started_) return error_;
    if (stopping_) return FailedPrecondition("journal: stopped");
  }
  epoch_ = store_epoch;
  generation_floor_ = generation_floor;
  RANGEKV_RETURN_IF_ERROR(CreateFile(base_epoch).WithContext("journal " + paths_.journal()));
  MutexLock l(mu_);
  started_ = true;
  stats_.bytes = file_bytes_;
  thread_ = std::thread([this] { Run(); });
  return OkStatus();
}

void JournalWriter::Enqueue(JournalRecord record, uint64_t bytes, uint64_t reservation_id) {
  if (stopping_ || !error_.ok()) return;
  if (queued_bytes_ + bytes > options_.max_pending_bytes) {
    // The committing thread fell this far behind: end journaling rather than grow without
    // bound (the committing thread deletes the file).
    error_ = ResourceExhausted("journal: " + Num(queued_bytes_) + " bytes queued (bound " +
                               Num(options_.max_pending_bytes) + ")");
    work_cv_.NotifyAll();
    return;
  }
  const uint64_t lsn = next_lsn_++;
  if (record.type == jf::kPublish && reservation_id != 0) publish_lsn_[reservation_id] = lsn;
  if (record.type == jf::kRemove) remove_lsn_[record.remove.slot] = lsn;
  queue_.push_back({std::move(record), lsn});
  queued_bytes_ += bytes;
}

void JournalWriter::OnPublished(uint64_t reservation_id, const NamespaceId& ns,
                                std::span<const int32_t> path, std::span<const PackRecord> packs) {
  // Digests first (DigestTable's lock is below ours).
  std::vector<JournalRecord> records;
  records.reserve(packs.size());
  for (const PackRecord& p : packs) {
    Result<PackDigests> d = digests_->Get(p.pack_slot, p.generation);
    JournalRecord r;
    r.type = jf::kPublish;
    if (!d.ok()) {
      // BeforePublish checked completeness; a missing entry is a bug. Journal nothing for the
      // pack: a replay then drops it and everything below it (never serves it).
      Log(LogLevel::kWarning, "journal: publication of pack slot " + Num(p.pack_slot) +
                                  " without digests: " + d.status().ToString());
      break;
    }
    r.publish.ns = ns;
    r.publish.slot = p.pack_slot;
    r.publish.layers = d->layers;
    r.publish.generation = p.generation;
    r.publish.stored_tokens = d->stored_tokens;
    r.publish.digest_block_tokens = static_cast<uint32_t>(digests_->geometry().block_tokens());
    r.publish.blocks_per_layer = d->blocks_per_layer;
    r.publish.path_tokens.assign(path.begin(), path.begin() + p.path_token_end());
    r.publish.digests = std::move(d->digests);
    records.push_back(std::move(r));
  }
  MutexLock l(mu_);
  for (size_t i = 0; i < records.size(); ++i) {
    const uint64_t bytes = RecordBytes(records[i]);
    // The reservation is acknowledged by its last pack's record.
    Enqueue(std::move(records[i]), bytes, i + 1 == records.size() ? reservation_id : 0);
  }
  if (options_.mode == DurabilityMode::kEveryPublish) {
    urgent_ = true;
    work_cv_.NotifyAll();
  }
}

void JournalWriter::OnRemoved(const RemovedPack& pack) {
  JournalRecord r;
  r.type = jf::kRemove;
  r.remove = {pack.slot, pack.generation};
  MutexLock l(mu_);
  Enqueue(std::move(r), RecordBytes(r), 0);
  // A removed pack's slot is about to be reused (an eviction happens for a store's
  // reservation), and its first write waits for this record (BeforeOverwrite): commit now, so
  // the fsyncs overlap the store's gather instead of stalling its first write.
  urgent_ = true;
  work_cv_.NotifyAll();
}

Status JournalWriter::WaitDurable(uint64_t lsn) {
  MutexLock l(mu_);
  if (lsn <= durable_lsn_) return OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  if (abandoned_ || broken_) return error_;
  if (!started_ || stopping_)
    return error_.ok() ? FailedPrecondition("journal: not running") : error_;
  urgent_ = true;
  work_cv_.NotifyAll();
  // A failure is reported once journaling has ended (the file is gone or known broken).
  durable_cv_.Wait(l, [&]() REQUIRES(mu_) { return lsn <= durable_lsn_ || abandoned_ || broken_; });
  stats_.wait_ns += ElapsedNs(t0);
  return lsn <= durable_lsn_ ? OkStatus() : error_;
}

Status JournalWriter::AwaitPublished(uint64_t reservation_id) {
  uint64_t lsn = 0;
  {
    MutexLock l(mu_);
    auto it = publish_lsn_.find(reservation_id);
    // Not found: committed already (the entry went with its commit), or a store that joined
    // another's publication: wait for everything queued up to now, which covers both.
    lsn = it == publish_lsn_.end() ? next_lsn_ - 1 : it->second;
  }
  return WaitDurable(lsn);
}

bool JournalWriter::SlotReusable(uint32_t slot) {
  MutexLock l(mu_);
  auto it = remove_lsn_.find(slot);
  return it == remove_lsn_.end() || it->second <= durable_lsn_ || abandoned_;
}

Status JournalWriter::BeforeOverwrite(uint32_t slot) {
  MutexLock l(mu_);
  auto it = remove_lsn_.find(slot);
  const uint64_t lsn = it == remove_lsn_.end() ? 0 : it->second;
  if (broken_) return error_;
  if (abandoned_ || (error_.ok() && lsn <= durable_lsn_)) return OkStatus();
  if (!started_) return FailedPrecondition("journal: not started");
  const auto t0 = std::chrono::steady_clock::now();
  urgent_ = true;
  work_cv_.NotifyAll();
  // A failing journal is waited out until its file is gone: until then a removal it dropped
  // could still be missing from a file that a replay would read.
  durable_cv_.Wait(l, [&]() REQUIRES(mu_) {
    return abandoned_ || broken_ || (error_.ok() && lsn <= durable_lsn_);
  });
  stats_.wait_ns += ElapsedNs(t0);
  return broken_ ? error_ : OkStatus();
}

Status JournalWriter::Flush() {
  uint64_t lsn = 0;
  {
    MutexLock l(mu_);
    lsn = next_lsn_ - 1;
  }
  return WaitDurable(lsn);
}

uint64_t JournalWriter::LastQueuedLsn() const {
  MutexLock l(mu_);
  return next_lsn_ - 1;
}

Status JournalWriter::Stop() {
  {
    MutexLock l(mu_);
    if (stopping_) return error_;
    stopping_ = true;
    urgent_ = true;
    work_cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock l(mu_);
  file_.reset();
  return error_;
}

JournalStats JournalWriter::stats() const {
  MutexLock l(mu_);
  return stats_;
}

Status JournalWriter::status() const {
  MutexLock l(mu_);
  return error_;
}

Status JournalWriter::Commit(std::vector<Queued>& batch) {
  // 1. The payload every publication names is durable before the record that names it (a
  // batch of removals names no payload: the write-ahead commit before a slot's reuse pays one
  // fsync, not two).
  const bool publishes = std::any_of(batch.begin(), batch.end(),
                                     [](const Queued& q) { return q.record.type == jf::kPublish; });
  if (publishes) {
    RANGEKV_RETURN_IF_ERROR(pack_file_->Sync().WithContext("journal: fsync pack file"));
  }
  // 2. The records, back to back, then one fsync.
  std::vector<uint8_t> bytes;
  for (Queued& q : batch) {
    q.record.sequence = next_sequence_++;
    const std::vector<uint8_t> rec = EncodeJournalRecord(q.record);
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  RANGEKV_RETURN_IF_ERROR(WriteAll(file_.get(), file_bytes_, bytes).WithContext("journal: append"));
  RANGEKV_RETURN_IF_ERROR(file_->Sync().WithContext("journal: fsync"));
  file_bytes_ += bytes.size();
  return OkStatus();
}

void JournalWriter::Abandon(const Status& error) {
  file_.reset();
  Status deleted = OkStatus();
  if (env_->FileExists(paths_.journal())) deleted = env_->DeleteFile(paths_.journal());
  if (deleted.ok()) deleted = env_->SyncDir(paths_.dir);
  MutexLock l(mu_);
  if (error_.ok()) error_ = error;
  stats_.failures++;
  broken_ = !deleted.ok();
  abandoned_ = deleted.ok();
  queue_.clear();
  queued_bytes_ = 0;
  Log(LogLevel::kWarning,
      "store " + paths_.dir + ": journaling ended for this session (" + error.ToString() +
          (deleted.ok() ? "); journal deleted: a crash from here on discards the index"
                        : "); the journal could not be deleted either (" + deleted.ToString() +
                              "): stores that would overwrite a journaled pack fail"));
  durable_cv_.NotifyAll();
}

void JournalWriter::Run() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::milliseconds(std::max<uint64_t>(1, options_.period_ms));
  const auto interval = std::chrono::milliseconds(options_.checkpoint_interval_ms);
  bool abandoned = false;
  for (;;) {
    std::vector<Queued> batch;
    bool stop = false;
    bool checkpoint_due = false;
    Checkpoint checkpoint;
    Status failed;
    {
      MutexLock l(mu_);
      auto ready = [&]() REQUIRES(mu_) {
        return stopping_ || (!error_.ok() && !abandoned) || (urgent_ && !queue_.empty());
      };
      // The time-based checkpoint needs a wake-up even when nothing is queued.
      const bool timed = checkpoint_ && interval.count() > 0 && records_in_file_ > 0;
      const auto until_checkpoint =
          timed ? std::max<Clock::duration>(file_started_ + interval - Clock::now(),
                                            Clock::duration::zero())
                : Clock::duration::max();
      if (options_.mode == DurabilityMode::kPeriodic) {
        work_cv_.WaitFor(l, std::min<Clock::duration>(period, until_checkpoint), ready);
      } else if (timed) {
        work_cv_.WaitFor(l, until_checkpoint, ready);
      } else {
        work_cv_.Wait(l, ready);
      }
      if (!error_.ok()) {
        if (abandoned && stopping_) return;
        if (abandoned) continue;
        failed = error_;
      } else {
        urgent_ = false;
        stop = stopping_;
        batch.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.end()));
        queue_.clear();
        queued_bytes_ = 0;
        checkpoint = checkpoint_;
        const bool aged = checkpoint && interval.count() > 0 && records_in_file_ > 0 &&
                          Clock::now() - file_started_ >= interval;
        // At a stop the caller's clean shutdown writes the snapshot anyway.
        checkpoint_due = file_bytes_ > options_.max_bytes || (aged && !stop);
      }
    }
    if (!failed.ok()) {
      Abandon(failed);
      abandoned = true;
      continue;
    }
    if (checkpoint_due) {
      // Put the batch back in front: the checkpoint's cut decides which of it is still needed.
      {
        MutexLock l(mu_);
        for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
          queued_bytes_ += RecordBytes(it->record);
          queue_.push_front(std::move(*it));
        }
      }
      batch.clear();
      Status s = checkpoint ? OkStatus()
                            : ResourceExhausted("journal: " + Num(file_bytes_) +
                                                " bytes, over its bound, and no checkpoint");
      Result<Cut> cut = s.ok() ? checkpoint() : Result<Cut>(s);
      if (cut.ok()) {
        Status created = CreateFile(cut->base_epoch);
        MutexLock l(mu_);
        if (!created.ok()) {
          error_ = created.WithContext("journal: restart after checkpoint");
        } else {
          // Everything up to the cut is in the snapshot now.
          while (!queue_.empty() && queue_.front().lsn <= cut->lsn) {
            queued_bytes_ -= RecordBytes(queue_.front().record);
            queue_.pop_front();
          }
          durable_lsn_ = std::max(durable_lsn_, cut->lsn);
          stats_.checkpoints++;
          stats_.bytes = file_bytes_;
          urgent_ = true;
          durable_cv_.NotifyAll();
          Log(LogLevel::kInfo, "store " + paths_.dir + ": journal checkpointed into snapshot " +
                                   "of epoch " + Num(cut->base_epoch));
        }
      } else {
        MutexLock l(mu_);
        if (error_.ok()) error_ = cut.status().WithContext("journal: checkpoint");
      }
      continue;
    }
    if (!batch.empty()) {
      Status s = Commit(batch);
      if (!s.ok()) {
        Abandon(s);
        abandoned = true;
        continue;
      }
      records_in_file_ += batch.size();
      MutexLock l(mu_);
      durable_lsn_ = std::max(durable_lsn_, batch.back().lsn);
      stats_.commits++;
      stats_.records += batch.size();
      stats_.bytes = file_bytes_;
      for (const Queued& q : batch) {
        if (q.record.type == jf::kPublish) stats_.durable_publications++;
      }
      // Acknowledged entries need no lookup any more (a missing entry reads as durable).
      const uint64_t durable = durable_lsn_;
      std::erase_if(publish_lsn_, [durable](const auto& e) { return e.second <= durable; });
      std::erase_if(remove_lsn_, [durable](const auto& e) { return e.second <= durable; });
      durable_cv_.NotifyAll();
    }
    if (stop) {
      MutexLock l(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace rangekv::persist
