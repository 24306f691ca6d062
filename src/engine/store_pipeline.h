// StorePipeline: the write side of the transfer engine (docs/design.md "Transfer engine"; paper 3.4
// "Stores and publication").
//
// Resources, all allocated by Create():
//   - store banks: `store_banks` device buffers of store_bank_bytes (plus pinned staging when
//     the device needs it), accounted by a BankPool, each with one preallocated IoBatch and a
//     device + pinned digest buffer for the blocks of a full bank;
//   - store job slots: `max_inflight_stores` of them (detached write debt included), each with
//     one production event per layer, a device slot-mapping buffer of max_request_tokens
//     entries with pinned upload staging and an upload event, and reserved plan vectors;
//   - `group_workers` threads, each with its own stream and completion event; one upload
//     stream for slot mappings. Writes run on the write I/O engine's `write_workers` threads.
//
// Flow of one store: BeginStore reserves the uncached suffix in the directory (a duplicate
// joins the in-flight reservation and does nothing; a fully cached prefix does nothing), plans
// its batches (layer group x a bank-sized chunk of the new records; PlanWriteSpans lays the
// spans back to back in the bank) and uploads the suffix's slot mapping. LayerProduced(l)
// records an event on the producer's stream. A group worker takes an eligible batch and a
// free bank, makes its stream wait for the group's production events and the mapping upload,
// launches one gather for the group, digests every written span's blocks in the bank on the
// device (Stream::Digest into the bank's digest buffer; under every checksum policy, see
// store/integrity.h), [D2H copy to staging], D2H of the digests, records its event and waits for
// it: extraction of that batch and its digests are proven. It makes the dirty marker durable
// (BeforeFirstWrite), records the digests (RecordSpan), then hands the batch's spans to the
// write engine as one IoBatch; the batch's completion callback counts the writes and releases
// the bank (every accepted write returned). When no batch can still run: all succeeded ->
// BeforePublish (digests complete) -> Publish (visible); any failed or never produced -> Abort
// (the reservation is reclaimed only now, after every accepted write drained).
//
// Thread-safety: all methods are thread-safe; one mutex (mu_) guards every job's state (each
// job's JobState names it as its capability), the bank pool and the slot pool (JobSlots).
// Lock order: mu_ -> Directory's mutex. The write callback takes mu_ on an I/O engine thread
// (short; it never submits I/O).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/pack_record.h"
#include "base/thread_annotations.h"
#include "device/device.h"
#include "engine/banks.h"
#include "engine/engine_context.h"
#include "engine/job_slots.h"
#include "engine/stats.h"
#include "engine/store_progress.h"
#include "io/io_engine.h"
#include "kernels/paged_kv.h"
#include "pack/span_plan.h"
#include "rangekv/engine.h"

namespace rangekv::engine_internal {

// Records per batch are bounded so each bank's IoBatch has a fixed capacity.
inline constexpr uint32_t kMaxBatchRecords = 64;

struct StoreSlot {
  uint32_t index = 0;
  std::vector<std::unique_ptr<Event>> produced;  // per layer
  SlotMapping mapping;      // int64 slot per token; gathers wait for mapping.uploaded
  std::vector<Span> spans;  // every batch's write spans, batch after batch
  std::vector<kernels::PagedKvView> views;
};

// One bank load: a layer group times a chunk of records.
struct StoreBatch {
  uint32_t group = 0;
  uint32_t layer_begin = 0, layer_end = 0;
  uint32_t span_begin = 0, span_end = 0;      // into StoreSlot::spans
  uint32_t record_begin = 0, record_end = 0;  // into StoreJob::records
  uint64_t layer_stride_bytes = 0;            // bank bytes of one layer's spans
  uint64_t bank_bytes = 0;                    // bank bytes used
};

// What of a store changes while it runs; guarded by the pipeline's mutex (StoreJob::state).
// JobLifecycle::settled means done: published or aborted (or ended without a reservation).
struct StoreJobState : JobLifecycle {
  // Deferred: Reserve answered kJoined for a store that covers only part of the remaining
  // tokens; this job reserves the rest once that store (joined_id) settled.
  bool deferred = false;
  uint64_t joined_id = 0;
  std::vector<uint8_t> produced;  // per layer, as the caller reported it
  StoreProgress progress;
  std::vector<uint32_t> bank_of_batch;
  std::vector<uint8_t> produced_event;  // per layer: an event was recorded on a producer
  Status first_error;
  bool extraction_signalled = false;
  bool visible = false;
};

// One store. `disposition`, `slot` and `tokens` are fixed by Begin before the job is handed
// out; the reservation fields are written once by Configure (under the pipeline's mutex) before
// any batch is eligible and only read afterwards, so a group worker that picked a batch reads
// them without the lock; `counters` is thread-safe; the rest is in `state`.
class StoreJob {
 public:
  StoreJob(Mutex* pipeline_mu, uint64_t job_id) : id(job_id), state(pipeline_mu) {}

  const uint64_t id;
  StoreDisposition disposition = StoreDisposition::kAlreadyCached;
  StoreSlot* slot = nullptr;    // null for joined / already-cached stores
  std::vector<int32_t> tokens;  // a copy, to reserve again after a joined store settles

  // The reservation (in Begin, or later for a deferred store).
  TokenInterval stored;
  uint64_t reservation_id = 0;
  std::vector<PackRecord> records;  // as written (block-aligned for opaque layouts)
  std::vector<PackRange> packs;     // the reservation's packs as the directory holds them
  std::vector<StoreBatch> batches;

  Counters counters;
  JobState<StoreJobState> state;
};

class StorePipeline {
 public:
  static Result<std::unique_ptr<StorePipeline>> Create(const EngineContext& context);
  ~StorePipeline();  // Stop()s
  StorePipeline(const StorePipeline&) = delete;
  StorePipeline& operator=(const StorePipeline&) = delete;

  Result<std::shared_ptr<StoreJob>> Begin(std::span<const int32_t> tokens, const PagedKv& kv,
                                          std::span<const int64_t> slot_mapping) EXCLUDES(mu_);
  Status LayerProduced(StoreJob& job, uint32_t layer, Stream* producer) EXCLUDES(mu_);
  bool Extracted(const StoreJob& job) const EXCLUDES(mu_);
  // The tokens the job writes (empty until a deferred job reserved them).
  TokenInterval Stored(const StoreJob& job) const EXCLUDES(mu_);
  // kDeadlineExceeded when `timeout` (none: no deadline) passes first.
  Status WaitExtracted(StoreJob& job,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt)
      EXCLUDES(mu_);
  StoreOutcome Finish(StoreJob& job, StoreWait wait) EXCLUDES(mu_);
  // The handle is gone without Finish(): the store is aborted (after its writes drain).
  void Abandon(StoreJob& job) EXCLUDES(mu_);

  // Fails every store whose layers were not all produced, makes surviving handles inert and
  // waits until every store settled (published or aborted). Write debt drains here.
  void DrainAll() EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

  PoolState pool_state() const EXCLUDES(mu_);

 private:
  struct Bank : BankMemory {
    DeviceBuffer digests;  // one u64 per digest block of the batch (with an integrity hook)
    PinnedHostBuffer digests_host;
    uint64_t digest_capacity = 0;
    std::unique_ptr<IoBatch> batch;
    bool submitted = false;  // batch was submitted at least once (Wait() is then legal)
    uint64_t submit_ns = 0;  // steady clock at the last Submit (phase timing)
  };
  struct BankOwner {
    std::shared_ptr<StoreJob> job;
    uint32_t batch = 0;
  };
  struct Worker {
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> done;
    std::thread thread;
  };

  explicit StorePipeline(const EngineContext& context);
  Status Init();
  Status PlanBatches(StoreJob& job, StoreSlot& slot);
  // Takes the reservation's records and plans the job's batches (aborting the reservation on
  // failure); replays the layers already produced.
  Status Configure(StoreJob& job, Reservation& reservation) REQUIRES(mu_);
  // Deferred jobs whose joined store settled reserve again (and start, or finish).
  void RetryDeferred() REQUIRES(mu_);
  // When every store bank is quarantined, fails every active store (kDeviceFault): no batch can
  // be gathered any more, so each settles (aborted) instead of waiting for a bank forever.
  void FailUnservable() REQUIRES(mu_);
  // Ends a job that holds no reservation.
  void FinishUnreserved(StoreJob& job) REQUIRES(mu_);
  void GroupWorker(uint32_t worker);
  // Enqueues the batch's gathers and digests on `stream` and proves them. Bit g of
  // `produced_events` is set when layer batch.layer_begin + g has a production event to wait
  // for. Returns the status.
  Status Gather(StoreJob& job, const StoreBatch& batch, uint32_t produced_events, Bank& bank,
                Worker& worker);
  // Enqueues the digests of every span of the batch (gathered into `bank`) and their copy to
  // bank.digests_host, in span order, ceil(tokens / D) per span. With `gather` (the batch's one
  // gather launch, not yet enqueued; every block in one digest launch) the two go as one
  // Stream::GatherDigest.
  Status EnqueueDigests(StoreJob& job, const StoreBatch& batch, Bank& bank, Stream& stream,
                        const kernels::GatherArgs* gather = nullptr);
  // The digest blocks of the batch's spans: ceil(tokens / D) per span.
  uint64_t DigestBlocks(const StoreJob& job, const StoreBatch& batch) const;
  // Hands the proven digests of the batch's spans to the integrity hook.
  Status RecordDigests(StoreJob& job, const StoreBatch& batch, const Bank& bank);
  void OnWritesDone(uint32_t bank);
  void AfterProgress(StoreJob& job) REQUIRES(mu_);
  void Fail(StoreJob& job, const Status& status) REQUIRES(mu_);
  // Ends the job (settled): it leaves the service order, its slot may return, waiters wake.
  void Settle(StoreJob& job) REQUIRES(mu_);
  void Count(StoreJob* job, Counters::Field field, uint64_t n = 1) {
    CountFor(*context_.counters, job == nullptr ? nullptr : &job->counters, field, n);
  }

  const EngineContext context_;
  const uint32_t layers_;
  std::vector<Bank> banks_;
  std::vector<std::unique_ptr<StoreSlot>> slots_;
  std::vector<Worker> workers_;
  std::unique_ptr<Stream> upload_stream_;

  mutable Mutex mu_;
  CondVar work_cv_;  // group workers: a batch became eligible or a bank free
  CondVar job_cv_;   // waiters: extraction finished or a store settled
  JobSlots<StoreSlot, StoreJob> jobs_ GUARDED_BY(mu_);
  std::vector<BankOwner> bank_owner_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace rangekv::engine_internal
