// RestorePipeline: the read side of the transfer engine (docs/design.md "Transfer engine").
//
// Resources, all allocated by Create():
//   - read banks: `read_banks` device buffers of read_bank_bytes (plus pinned staging of the
//     same size per bank when the device needs it), accounted by a BankPool with the prefetch
//     budget, and one fence event per bank;
//   - restore job slots: `max_inflight_restores` of them, each with a request-owned stream,
//     one readiness event (and, where the device has stream memory operations, one DeviceFlag)
//     per layer, a device slot-mapping buffer of max_request_tokens entries with its pinned
//     upload staging, and plan / view vectors reserved to their bounds;
//   - `read_workers` threads, each with one preallocated IoBatch; when restores verify payload
//     digests, per bank a pinned and a device verdict buffer of one stripe's blocks (and, on a
//     staged device, a stream and an event); one fence reaper thread.
//
// Flow of one stripe (stripe = one read span = one layer of one pack run):
//   read worker: picks, round robin over the active jobs (JobSlots::ServiceOrder), the next job
//     with a stripe inside its lookahead window and a bank it may take (unbound jobs only within
//     the prefetch budget), marks it reading, submits the
//     native read(s) to the I/O engine and waits for the completions (outside the lock);
//   verify (checksum=always), decided on the device: the read worker plans the stripe's digest
//     blocks and copies their recorded digests to the bank's pinned verdict buffer
//     (PlanVerdict, outside the lock); the launch enqueues, before the scatter, [the stripe's H2D
//     copy,] their upload, the digests with the comparison (setting the bank's mismatch word) and
//     the computed digests' copy back, on the bank's own stream joined by an event when the device
//     stages reads (several stripes are copied and verified side by side), and the scatter is
//     gated on the word, so a stripe that fails writes nothing into paged KV; else on the job's
//     stream, as verified scatters (Stream::VerifiedScatter: a digest block's rows are written
//     only if its digest matched; HostDevice digests and copies each ~1 MiB block in one pass
//     while it is in cache), then the copy back. Either way no byte that failed its digest
//     reaches paged KV; the reaper confirms on the host (ConfirmVerdict) before the stripe counts
//     as delivered, and fails it otherwise;
//   completion (under the lock): failed -> the stripe fails, its bank returns (the I/O
//     completion proves the buffer is no longer written); cancelled job -> dropped, bank
//     returns; slots not bound yet -> the stripe lands and keeps its bank; else -> launch;
//   launch: [H2D copy from staging], [the verdict], one Scatter on the job's stream,
//     Record(bank event),
//     hand (job, stripe, bank) to the reaper;
//   reaper: Synchronize(bank event) outside the lock; success -> bank released, stripe
//     delivered; failure (or the test hook) -> bank quarantined, stripe failed;
//   readiness: whenever a layer settles (kLayer) or all do (kBarrier), Record(layer event) and
//     WriteFlag(layer flag, job's flag value) on the job's stream, after the layer's scatters.
// A job is drained when every stripe is delivered, failed or dropped; then its ticket hold is
// dropped (leases released by the last job sharing the ticket), and its slot is returned once
// its handle finished or was abandoned.
//
// Thread-safety: all methods are thread-safe; one mutex (mu_) guards every job's state (each
// job's JobState names it as its capability), the bank pool and the slot pool (JobSlots).
// Lock order: mu_ -> Directory's mutex (ticket release). Device enqueues (launches, records)
// happen under mu_, so a layer's readiness is always recorded after its scatters on the job's
// stream; blocking waits (I/O, fences, events) never do.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/pack_record.h"
#include "base/thread_annotations.h"
#include "device/device.h"
#include "engine/banks.h"
#include "engine/engine_context.h"
#include "engine/job_slots.h"
#include "engine/restore_progress.h"
#include "engine/stats.h"
#include "io/io_engine.h"
#include "kernels/paged_kv.h"
#include "pack/span_plan.h"
#include "rangekv/engine.h"

namespace rangekv::engine_internal {

// Keeps a ticket's leases: the last job sharing it releases the ticket (claimed) or cancels it
// (never claimed) in the directory when it is destroyed, i.e. after every job that read from
// its packs drained.
class TicketHold {
 public:
  TicketHold(RangeIndex* directory, uint64_t ticket_id, std::string request_id, bool claimed)
      : directory_(directory),
        ticket_id_(ticket_id),
        request_id_(std::move(request_id)),
        claimed_(claimed) {}
  ~TicketHold();
  TicketHold(const TicketHold&) = delete;
  TicketHold& operator=(const TicketHold&) = delete;

  uint64_t ticket_id() const { return ticket_id_; }
  void MarkClaimed() { claimed_.store(true, std::memory_order_release); }
  bool claimed() const { return claimed_.load(std::memory_order_acquire); }
  // The directory entry is someone else's business now: destruction changes nothing.
  void Disarm() { armed_.store(false, std::memory_order_release); }
  // The cluster tier: `release` runs when the hold drops (armed), after the local ticket's
  // release; `local` false when the request holds no local ticket (a hit wholly remote). Set
  // before the hold is shared.
  void SetRemote(std::function<void()> release, bool local) {
    remote_release_ = std::move(release);
    local_ = local;
  }

 private:
  RangeIndex* directory_;
  uint64_t ticket_id_;
  std::string request_id_;
  std::atomic<bool> claimed_;
  std::atomic<bool> armed_{true};
  std::function<void()> remote_release_;
  bool local_ = true;
};

// Per-job device resources, reused across jobs.
struct RestoreSlot {
  uint32_t index = 0;
  std::vector<std::unique_ptr<Event>> layer_events;
  std::vector<std::unique_ptr<DeviceFlag>> layer_flags;  // empty without stream memory ops
  uint32_t flag_value = 0;  // bumped per job; layer l is ready once its flag reaches it
  SlotMapping mapping;      // int64 slot per token
  std::vector<Span> plan;
  std::vector<kernels::PagedKvView> views;
  // Last, so it is destroyed first: destroying a stream waits for its work, which records the
  // events and writes the flags above.
  std::unique_ptr<Stream> stream;
};

// What of a restore changes while it runs; guarded by the pipeline's mutex (RestoreJob::state).
// JobLifecycle::settled means drained: every stripe is delivered, failed or dropped.
struct RestoreJobState : JobLifecycle {
  std::shared_ptr<TicketHold> hold;
  RestoreProgress progress;
  std::vector<uint32_t> bank_of;     // per stripe, while landed or scattering
  std::vector<Status> layer_status;  // per layer: first failure (OK while none)
  Status first_error;
  bool claimed = false;
  bool bound = false;
  bool cancelled = false;
  bool readiness_failed = false;  // a layer event could not be recorded: nothing is vouched for
};

// One restore (or lookup-time prefetch). The const fields and the slot's plan are fixed before
// the job is published to workers; `counters` is thread-safe; everything else is in `state`,
// under the pipeline's mutex.
class RestoreJob : public std::enable_shared_from_this<RestoreJob> {
 public:
  RestoreJob(Mutex* pipeline_mu, uint64_t job_id, std::string request, TokenInterval interval,
             RestoreSlot* job_slot)
      : id(job_id),
        request_id(std::move(request)),
        tokens(interval),
        slot(job_slot),
        state(pipeline_mu) {}

  const uint64_t id;
  const std::string request_id;
  const TokenInterval tokens;
  RestoreSlot* const slot;
  Counters counters;
  JobState<RestoreJobState> state;
};

class RestorePipeline {
 public:
  static Result<std::unique_ptr<RestorePipeline>> Create(const EngineContext& context);
  // Stop()s.
  ~RestorePipeline();
  RestorePipeline(const RestorePipeline&) = delete;
  RestorePipeline& operator=(const RestorePipeline&) = delete;

  // Plans the reads of `tokens` from `records` and starts the job (reads may begin at once).
  // `claimed` false makes it a lookup-time prefetch. kResourceExhausted when no job slot is
  // free; planning errors (kStaleGeneration, ...) as PlanReadSpans answers them.
  // `remote_spans`: spans of the cluster tier (engine/remote_tier.h), layer-major with the same
  // count per layer, placed after each layer's local spans; `records` may then cover less than
  // `tokens` (the remote spans cover the rest).
  Result<std::shared_ptr<RestoreJob>> Start(std::string request_id, TokenInterval tokens,
                                            std::span<const PackRecord> records,
                                            std::shared_ptr<TicketHold> hold, bool claimed,
                                            std::span<const Span> remote_spans = {}) EXCLUDES(mu_);
  // A prefetching job was claimed for exactly its tokens: it now belongs to a restore.
  void Adopt(RestoreJob& job) EXCLUDES(mu_);

  Status Bind(RestoreJob& job, const PagedKv& kv, std::span<const int64_t> slot_mapping)
      EXCLUDES(mu_);
  // Without a timeout, kFailedPrecondition at once for an unbound, uncancelled job; with one,
  // kDeadlineExceeded when it passes first (the job may be bound meanwhile).
  Status WaitLayer(RestoreJob& job, uint32_t layer,
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt) EXCLUDES(mu_);
  Status StreamWaitLayer(RestoreJob& job, uint32_t layer, Stream& stream) EXCLUDES(mu_);
  RestoreOutcome Finish(RestoreJob& job) EXCLUDES(mu_);
  void Cancel(RestoreJob& job) EXCLUDES(mu_);
  // The handle is gone without Finish(): cancel, and return the slot once drained.
  void Abandon(RestoreJob& job) EXCLUDES(mu_);
  TokenInterval Tokens(const RestoreJob& job) const { return job.tokens; }

  // Reads in flight at once: at most read_workers (the default), or its share when `readers`
  // engines read the node's medium: ceil(read_workers / readers), at least 1
  // (EngineTuning::share_reads). Reads already in flight finish. Returns the new limit.
  uint32_t SetReadShare(uint32_t readers) EXCLUDES(mu_);

  // Cancels and abandons every job, then waits until all drained (no read, no fence left).
  void DrainAll() EXCLUDES(mu_);
  // DrainAll(), then stops the workers and the reaper. Idempotent.
  void Stop() EXCLUDES(mu_);

  // Introspection for tests.
  PoolState pool_state() const EXCLUDES(mu_);

 private:
  struct Bank : BankMemory {
    std::unique_ptr<Event> fence;
    // The verdict (checksum=always): the blocks of the stripe last
    // read into this bank, planned by its read worker outside the lock, and the buffers its
    // digest, comparison and gated scatter use. `verdict_host` (pinned) and `verdict_device`
    // share one layout: recorded digests (capacity u64), computed digests (capacity u64), the
    // mismatch word (u32). The recorded ones go up before the digest, the computed ones and the
    // word come back after the scatter, all before the bank's fence.
    store::DigestBlocks verdict_blocks;
    PinnedHostBuffer verdict_host;
    DeviceBuffer verdict_device;
    // On a staged device (a GPU without GDS), the stream that copies the stripe up and verifies
    // it, and the event the job's stream waits on before the gated scatter; null otherwise (all
    // of it on the job's stream).
    std::unique_ptr<Stream> verdict_stream;
    std::unique_ptr<Event> verified;
  };
  struct ReadPick {
    std::shared_ptr<RestoreJob> job;
    uint32_t stripe = 0;
    uint32_t bank = 0;
    // Cluster-tier stripes riding the same GET (RemoteTier::JoinsGet), each with its own bank
    // (RemoteTier::kMaxSpansPerGet - 1 at most; checked in restore_pipeline.cc). Each counts
    // as a stripe read in reads_in_flight_ (within read_limit_).
    static constexpr uint32_t kMaxRiders = 3;
    uint32_t riders = 0;
    std::array<uint32_t, kMaxRiders> rider_stripe{};
    std::array<uint32_t, kMaxRiders> rider_bank{};
  };
  struct FenceEntry {
    std::shared_ptr<RestoreJob> job;
    uint32_t stripe = 0;
    uint32_t bank = 0;
    uint64_t enqueued_ns = 0;  // SteadyNs() at the scatter's enqueue (restore_deliver_ns)
  };

  explicit RestorePipeline(const EngineContext& context);
  Status Init();
  void ReadWorker(uint32_t worker);
  void Reaper();

  bool PickRead(ReadPick* pick) REQUIRES(mu_);
  // Adds to a picked cluster-tier stripe the next stripes that can ride its GET, while banks of
  // `purpose` are free.
  void AddRiders(RestoreJob& job, RestoreJobState& st, BankPurpose purpose, ReadPick* pick)
      REQUIRES(mu_);
  // Fills `batch` with the native reads of one stripe into `buf`.
  Status PrepareReads(const Span& span, uint8_t* buf, IoBatch& batch) const;
  // Verdict, read worker (no lock): plans the digest blocks of the stripe read into
  // `bank` and copies their recorded digests into its pinned verdict buffer.
  Status PlanVerdict(const Span& span, Bank& bank);
  // Where a bank's verdict lives in its device buffer: the computed digests, the recorded
  // (expected) ones and the mismatch word.
  struct VerdictWords {
    uint64_t* computed;
    const uint64_t* expected;
    uint32_t* mismatch;
  };
  VerdictWords VerdictOf(Bank& bank) const;
  // Verdict, under the lock: enqueues the recorded digests' upload and the cleared mismatch
  // word on `stream`, before the digests (EnqueueDigests or EnqueueVerifiedScatters).
  Status EnqueueVerdictInputs(Stream& stream, Bank& bank) REQUIRES(mu_);
  // The computed digests and the mismatch word back to the bank's pinned verdict buffer.
  Status EnqueueVerdictCopyBack(Stream& stream, Bank& bank) REQUIRES(mu_);
  // The digest launch of blocks [i, i + kMaxDigestSpans) of `blocks` of the stripe in `bank`,
  // into `digests` (device memory), compared with `expected` into `*mismatch`.
  kernels::DigestArgs DigestGroup(const Span& span, const Bank& bank,
                                  const store::DigestBlocks& blocks, uint64_t i, uint64_t* digests,
                                  const uint64_t* expected, uint32_t* mismatch) const;
  Status EnqueueDigests(RestoreJob& job, Stream& stream, const Span& span, const Bank& bank,
                        const store::DigestBlocks& blocks, uint64_t* digests,
                        const uint64_t* expected, uint32_t* mismatch);
  // The stripe's digests and `scatter` as verified scatters (kernels/span_digest.h), one per
  // digest launch, each with the scatter's rows inside its blocks.
  Status EnqueueVerifiedScatters(RestoreJob& job, Stream& stream, const Span& span, Bank& bank,
                                 const kernels::ScatterArgs& scatter) REQUIRES(mu_);
  // Verdict, fence reaper (no lock; the fence proved the copies back): the host compares
  // the computed digests itself; a mismatch is a checksum failure (OnCorruption), and a device
  // verdict that disagrees fails the stripe too (its scatter may have been skipped).
  Status ConfirmVerdict(RestoreJob& job, const Span& span, const Bank& bank);
  // Both ends of a digest block must lie in the read buffer of `span` (the planner widened it).
  Status CheckBlocksInRead(const Span& span, const store::DigestBlocks& blocks) const;
  void CompleteRead(const ReadPick& pick, const Status& status, uint64_t bytes) REQUIRES(mu_);
  void LaunchScatter(const std::shared_ptr<RestoreJob>& job, uint32_t stripe, uint32_t bank)
      REQUIRES(mu_);
  void FailStripe(RestoreJob& job, uint32_t stripe, const Status& status) REQUIRES(mu_);
  void ReleaseBank(uint32_t bank) REQUIRES(mu_);
  // Quarantines the bank; when it was the last usable one, FailUnservable().
  void QuarantineBank(RestoreJob& job, uint32_t bank) REQUIRES(mu_);
  // When every read bank is quarantined, fails every pending stripe of every active job
  // (kDeviceFault): no bank will be free for them, and Finish / per-layer waits must return.
  void FailUnservable() REQUIRES(mu_);
  // Publishes settled layers, detects the drain, wakes waiters and workers.
  void AfterProgress(RestoreJob& job) REQUIRES(mu_);
  void CancelLocked(RestoreJob& job) REQUIRES(mu_);
  void Count(RestoreJob* job, Counters::Field field, uint64_t n = 1) {
    CountFor(*context_.counters, job == nullptr ? nullptr : &job->counters, field, n);
  }

  const EngineContext context_;
  const uint32_t layers_;
  const uint32_t max_reads_per_stripe_;

  std::vector<Bank> banks_;  // fixed after Init
  std::vector<std::unique_ptr<RestoreSlot>> slots_;
  std::vector<std::unique_ptr<IoBatch>> batches_;  // one per read worker
  const bool verify_;                              // checksum=always with an integrity hook
  uint64_t verdict_capacity_ = 0;                  // digest blocks of one stripe, at most

  mutable Mutex mu_;
  CondVar work_cv_;    // read workers: a stripe or a bank may have become available
  CondVar reaper_cv_;  // reaper: a fence was queued
  CondVar job_cv_;     // waiters: a layer was published or a job drained
  JobSlots<RestoreSlot, RestoreJob> jobs_ GUARDED_BY(mu_);
  // Fences awaiting the reaper, a ring with one entry per bank at most (no allocation).
  std::vector<FenceEntry> fences_ GUARDED_BY(mu_);
  size_t fence_head_ GUARDED_BY(mu_) = 0;
  size_t fence_count_ GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> publish_scratch_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
  uint32_t read_limit_ GUARDED_BY(mu_) = 0;  // SetReadShare; read_workers until then
  uint32_t reads_in_flight_ GUARDED_BY(mu_) = 0;

  std::vector<std::thread> workers_;
  std::thread reaper_;
};

}  // namespace rangekv::engine_internal
