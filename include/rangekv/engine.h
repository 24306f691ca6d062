// Engine: RangeKV's transfer engine, the C++ API that integrations (vLLM connector, HF cache
// adapter, benchmarks) drive. One Engine serves one rank: it owns one store directory (a pack
// file and the range directory over it), a fixed set of read and store banks carved from the
// device at Open, and the workers that move stripes between the pack file and paged KV memory.
//
// The rule it follows (docs/design.md "The rule", after the Range paper): every cost on the
// storage path scales with payload bytes or bounded physical batches, never with the number of
// logical cache objects.
// A restore of a prefix held in P packs of an L-layer model is P*L stripe reads, P*L scatter
// launches and L readiness events, whatever reuse granularity named the prefix. A store of a
// suffix is (stripes of the new records x L) writes, one gather and one store bank per layer
// group (and per bank-sized chunk of records).
//
// Flows (docs/architecture.md "Transfer engine" walks them through the code):
//   scheduler side   Lookup() -> hit tokens + serialized ticket (may start prefetch reads)
//                    ReleaseRequest() when a request finishes or aborts unclaimed
//   worker restore   StartRestore(ticket) -> RestoreHandle: BindSlots(), WaitLayer() /
//                    StreamWaitLayer() per layer, Finish() or Cancel()
//   worker store     BeginStore() -> StoreHandle: LayerProduced() per layer,
//                    WaitExtracted() (source slots reusable), Finish()
//
// Ownership (the paper's Table 1): a ticket's leases are released only after every read and
// every scatter fence of its delivery drained; a read bank returns to the pool only after the
// scatter that consumed it is proven complete by its event (an unproven fence quarantines the
// bank); a store bank returns after every accepted write from it returned; new records become
// visible only after every layer's writes succeeded, and a failed store's reservation is
// reclaimed only after its accepted writes drained.
//
// Thread-safety: Engine methods are thread-safe. A RestoreHandle / StoreHandle may be used from
// several threads (its methods lock), but Finish() ends it: later calls fail with
// kFailedPrecondition (and Finish() must not race WaitLayer() on the same handle). Close()
// (also run by the destructor) cancels whatever is still running, drains every owner and
// leaves surviving handles inert; a handle may outlive its Engine (it keeps the engine's
// internals alive, not its workers).
//
// Memory: every payload buffer (read banks, pinned staging, store banks) is allocated at Open;
// the data path allocates no payload memory (EngineStats::payload_allocations counts any that
// did, and stays 0). Per-request metadata (slot mappings on the device, span plans, per-layer
// events, a stream) comes from a fixed pool of max_inflight_restores / max_inflight_stores job
// slots, also allocated at Open.
//
// Headers: this one includes every public header, so `#include "rangekv/engine.h"` gives the
// whole API: options.h (EngineOptions), transfer.h (requests, outcomes, PagedKv), stats.h
// (EngineStats), env.h (the file seam), layout.h, geometry.h and status.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/layout.h"
#include "rangekv/options.h"
#include "rangekv/stats.h"
#include "rangekv/status.h"
#include "rangekv/transfer.h"

namespace rangekv {

namespace engine_internal {
class EngineAccess;
class EngineCore;
class RestoreJob;
class StoreJob;
}  // namespace engine_internal

// ---- restore ----------------------------------------------------------------------------------

class RestoreHandle {
 public:
  RestoreHandle() = default;
  RestoreHandle(RestoreHandle&&) noexcept;
  RestoreHandle& operator=(RestoreHandle&&) noexcept;
  RestoreHandle(const RestoreHandle&) = delete;
  RestoreHandle& operator=(const RestoreHandle&) = delete;
  // Cancels (without waiting) a restore that was not finished; the engine drains it, then
  // releases its leases and job slot.
  ~RestoreHandle();

  bool valid() const { return job_ != nullptr; }
  TokenInterval tokens() const;

  // Binds the destination: slot_mapping[i] is the slot of path token begin_token + i, for every
  // requested token. Immutable once bound. Scatters of stripes already read wait for this.
  // Errors: kGeometryMismatch (layer count, token size, a layout other than the store's),
  // kInvalidArgument (null layer base, zero blocks, a mapping of the wrong length, a negative
  // or repeated slot), kOutOfRange (a slot >= num_blocks x block_size), kFailedPrecondition
  // (already bound, finished or cancelled). On error nothing is bound and nothing scattered.
  Status BindSlots(const PagedKv& kv, std::span<const int64_t> slot_mapping);

  // Blocks until layer `layer` is published (all its stripes delivered or failed, and its
  // scatters complete). OK when all of the layer's spans were delivered; otherwise the
  // layer's first error (its tokens are in Finish()'s `failed`). kCancelled after Cancel().
  // kInvalidArgument for a layer >= L. kFailedPrecondition at once before BindSlots (an
  // unbound restore delivers nothing: the wait would never end) unless it was cancelled.
  Status WaitLayer(uint32_t layer);
  // The same with a deadline: kDeadlineExceeded when `timeout` passes first (nothing changed;
  // the restore goes on and the wait may be repeated). A wait with a deadline may begin before
  // BindSlots (another thread binding meanwhile). The Python binding waits in short slices of
  // this so that Ctrl-C interrupts it.
  Status WaitLayer(uint32_t layer, std::chrono::milliseconds timeout);

  // Makes `model_stream` wait for layer `layer` without the host waiting for the data. On
  // CUDA it blocks only until the layer's readiness event was recorded (its last scatter
  // launched, not completed), enqueues a wait on it and returns the layer's status as
  // WaitLayer does (also its kFailedPrecondition before BindSlots). (A wait on a device flag queued
  // before those launches could deadlock: streams beyond CUDA_DEVICE_MAX_CONNECTIONS share hardware
  // queues.) On the host device it enqueues a wait on the layer's readiness flag and returns at
  // once with OK, even before the layer's reads were issued; the flag is written after the layer's
  // last scatter (also for failed or cancelled layers, so the stream never hangs), and failures
  // surface in Finish().
  Status StreamWaitLayer(uint32_t layer, DeviceStreamRef model_stream);

  // Waits until every read and scatter of this restore drained, releases the ticket's leases and
  // the job slot, and reports what was delivered. Unbound restores are cancelled first.
  // Ends the handle.
  RestoreOutcome Finish();

  // Stops issuing reads and drops stripes read but not yet scattered; reads and scatters in
  // flight complete and their banks return only once proven. Does not wait. Finish() may still
  // be called to wait for the drain and get the outcome (status kCancelled); a handle destroyed
  // instead leaves the drain to the engine, which then releases the leases. Idempotent.
  void Cancel();

 private:
  friend class engine_internal::EngineCore;
  RestoreHandle(std::shared_ptr<engine_internal::EngineCore> core,
                std::shared_ptr<engine_internal::RestoreJob> job);
  std::shared_ptr<engine_internal::EngineCore> core_;
  std::shared_ptr<engine_internal::RestoreJob> job_;
};

// ---- store ------------------------------------------------------------------------------------

class StoreHandle {
 public:
  StoreHandle() = default;
  StoreHandle(StoreHandle&&) noexcept;
  StoreHandle& operator=(StoreHandle&&) noexcept;
  StoreHandle(const StoreHandle&) = delete;
  StoreHandle& operator=(const StoreHandle&) = delete;
  // Aborts a store that was not finished (layers not produced stay unproduced; nothing becomes
  // visible) without waiting.
  ~StoreHandle();

  bool valid() const { return job_ != nullptr; }
  StoreDisposition disposition() const;
  TokenInterval stored_tokens() const;

  // Layer `layer` of the source KV is produced. With a producer stream, the layer's gather waits
  // on an event recorded on it now (the host does not wait); without one the KV must already be
  // in memory. When all layers of a group are produced the group becomes eligible for gather.
  // Idempotent for a layer. No-op (OK) for kJoined / kAlreadyCached stores.
  // Errors: kInvalidArgument (layer >= L), kFailedPrecondition (finished).
  Status LayerProduced(uint32_t layer, DeviceStreamRef producer = {});

  // True once no gather of this store is running or can still start: the source slots may be
  // reused. Always true for kJoined / kAlreadyCached stores.
  bool extracted() const;
  // Blocks until extracted(); returns the store's first error, if any. A store still waiting for
  // layers that are never produced waits forever: produce them, or call Finish(), or wait with
  // a deadline (kDeadlineExceeded when `timeout` passes first; nothing changed).
  Status WaitExtracted();
  Status WaitExtracted(std::chrono::milliseconds timeout);

  // Waits per `wait` and reports. A store whose layers were not all produced fails with
  // kFailedPrecondition and is aborted (its reservation reclaimed after its accepted writes
  // drained). Ends the handle.
  StoreOutcome Finish(StoreWait wait = StoreWait::kUntilVisible);

 private:
  friend class engine_internal::EngineCore;
  StoreHandle(std::shared_ptr<engine_internal::EngineCore> core,
              std::shared_ptr<engine_internal::StoreJob> job);
  std::shared_ptr<engine_internal::EngineCore> core_;
  std::shared_ptr<engine_internal::StoreJob> job_;
};

// ---- engine -----------------------------------------------------------------------------------

// What Open found in the store directory (docs/design.md "Persistence and recovery";
// docs/pack-format.md "Metadata snapshot"). The index is loaded only from the snapshot of a
// clean shutdown, with no dirty marker, intact and bound to this pack file; otherwise it starts
// empty (never rebuilt from payload) and the reason is logged at warning level.
struct StoreRecovery {
  bool loaded = false;   // the index was loaded from the snapshot
  bool created = false;  // Open created the pack file
  // "" when loaded; else why the index started empty: "new_store", "dirty",
  // "missing_snapshot", "unreadable_snapshot", "truncated", "corrupt_checksum", "malformed",
  // "wrong_version", "wrong_store_uuid", "wrong_geometry", "wrong_namespace",
  // "pack_layout_mismatch", "pack_size_mismatch", "directory_rejected", "inconsistent".
  std::string reason;
  std::string detail;         // the logged explanation
  uint64_t packs_loaded = 0;  // visible packs restored (snapshot and journal)
  // Packs found beyond this open's capacity (EngineOptions::capacity_bytes lowered since they
  // were stored), evicted least recently used first; the packs that fit stay.
  uint64_t packs_evicted_for_capacity = 0;
  uint64_t store_epoch = 0;  // this session's store epoch (raised at every open)
  // The journal at a dirty open (docs/fault-model.md "Publication journal"): whether it was
  // replayed, why it was ignored ("" or "foreign_store", "newer_than_snapshot",
  // "older_than_snapshot", "base_snapshot_unusable", "unusable", "unreadable"), its tail
  // ("clean", "torn", "checksum", "out_of_sequence", "malformed") and the publications kept
  // and dropped (never served).
  bool journal_replayed = false;
  std::string journal_ignored;
  std::string journal_tail;
  uint64_t journal_records = 0;
  uint64_t journal_publications_kept = 0;
  uint64_t journal_publications_dropped = 0;
};

class Engine {
 public:
  // Validates options (kInvalidArgument naming the field), derives the geometry, creates or
  // opens the store, allocates every bank and job slot, and starts the workers.
  // Errors: from validation, DeriveGeometry, the pack file (PackFile::Open's distinct errors),
  // the device (kNotSupported for DeviceSelection::kCuda without a GPU) and the I/O engine.
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Geometry& geometry() const;
  const NamespaceId& namespace_id() const;
  const EngineOptions& options() const;  // as resolved (bank sizes filled in)
  // "host" or "cuda", and "posix" / "uring" plus the reason for a fallback, for logs and bench;
  // "cuda_kernels=sm_80,...|none": whether this build has CUDA kernels (rangekv/build_info.h).
  std::string DescribeBackends() const;
  // What Open found: index loaded, or started empty and why.
  const StoreRecovery& recovery() const;

  // Scheduler side. Finds the longest cached prefix of `tokens`, rounded down to
  // `reuse_granularity_tokens`, never covering the last token; on a hit returns a ticket bound to
  // `envelope` that leases the selected packs. With prefetch=lookup, may start reading the first
  // stripes into at most prefetch_banks read banks before any claim.
  // `local_tokens`: how many leading tokens the caller already holds (the serving engine's own
  // prefix cache). The prefetch reads only [local_tokens, hit), the range a claim with
  // begin_token = local_tokens restores, and nothing when the hit does not reach past it: a
  // request whose prefix the serving engine holds costs no read. The hit and the ticket do not
  // depend on it.
  // Errors: kInvalidArgument (no tokens, zero granularity, more than max_request_tokens),
  // kTicketReplaced (an outstanding ticket of this request names another query), directory
  // capacity errors.
  Result<LookupResult> Lookup(const RequestEnvelope& envelope, std::span<const int32_t> tokens,
                              uint64_t reuse_granularity_tokens, uint64_t local_tokens = 0);

  // The request finished or was aborted: an unclaimed ticket is cancelled (its leases released
  // once its prefetch reads drained). Claimed restores are not affected.
  void ReleaseRequest(const RequestEnvelope& envelope);

  // Worker side: claims the ticket (checking envelope, generations, exact tokens and endpoint:
  // kForeignOwner, kStaleGeneration, kTokenMismatch, kEndpointBeyondTicket, kCorruptTicket,
  // kNamespaceMismatch) and starts (or adopts the prefetching) restore job.
  // kResourceExhausted when all restore job slots are in use.
  Result<RestoreHandle> StartRestore(const RestoreRequest& request);

  // Reserves the uncached suffix of request.tokens and returns the handle that drives its store.
  // kResourceExhausted when all store job slots are in use (write debt included) or the store
  // is full of leased / reserved packs; kInvalidArgument for bad slots / mappings.
  Result<StoreHandle> BeginStore(const StoreRequest& request);

  // A stream on the engine's device for the caller's model work (tests, the HF adapter). The
  // engine owns it until Close(). kResourceExhausted beyond a small fixed number (64) of
  // streams (created and wrapped together).
  Result<DeviceStreamRef> CreateStream();
  // Names a stream the caller owns (CUDA: a cudaStream_t, e.g. torch's current stream) so
  // StreamWaitLayer / LayerProduced can use it; the engine never destroys the native stream,
  // and synchronises it only in Close() (it may hold waits on the engine's readiness flags).
  // kUnimplemented on the host device (it has no native streams: use CreateStream). Wrap each
  // native stream once and keep the ref.
  Result<DeviceStreamRef> WrapNativeStream(void* native_stream);
  // Blocks until all work enqueued on `stream` completed.
  Status SynchronizeStream(DeviceStreamRef stream);

  EngineStats GetStats() const;
  // The read concurrency in effect (EngineTuning::share_reads): the readers the store service
  // last reported (1 for an embedded store or before any reply), the stripe reads this engine
  // keeps in flight at most, and its read I/O engine's cap: read_io_threads while reading alone,
  // else 1 / readers of the spans or pieces that engine can have in flight (posix: its threads;
  // io_uring: rings x queue depth).
  // With EngineTuning::read_gate: the node's read slots this engine's reads pass (0: none), the
  // reads that took one, and how many waited for one or, the wait running out, went ahead
  // without one.
  struct ReadShare {
    uint32_t readers = 1;
    uint32_t read_workers = 0;
    uint32_t read_io_threads = 0;
    uint32_t gate_slots = 0;
    uint64_t gate_passes = 0;
    uint64_t gate_waited = 0;
    uint64_t gate_timed_out = 0;
  };
  ReadShare read_share() const;

  // The cluster tier's counters (EngineOptions::remote; docs/scale-out.md): lookups that asked
  // the cluster directory and their round trips, ranged GETs and bytes, verified spans,
  // quarantines, and, for a store that publishes, uploads. enabled = false without a tier.
  RemoteTierStats remote_stats() const;

  // Index changes: takes up to `max` of the oldest ranges of tokens that stopped being served
  // since the last call (a visible pack evicted, invalidated or clipped), in the order they
  // happened; each names the pack a StoreOutcome named (StoreOutcome::packs) and the path tokens
  // it no longer serves. Packs loaded at Open are covered too. The engine keeps at most
  // options().tuning.max_removed_ranges of them: beyond that the oldest are dropped and counted in
  // EngineStats::removed_events_dropped, so a consumer learns it missed some (0: none kept).
  // Cheap: the removals are recorded under the index's lock as they happen; draining takes only
  // the queue's.
  std::vector<RemovedRange> DrainRemovedRanges(size_t max);

  // Cancels prefetches and restores, aborts stores whose layers will never be produced, waits
  // for every read, scatter, gather and accepted write to drain (detached write debt included:
  // those stores still publish), releases all leases, stops the workers and synchronises the
  // caller streams. Then the clean shutdown: the pack file is made durable, the metadata
  // snapshot (directory + payload digests) is written to a temporary file, made durable and
  // renamed into place, and only then the dirty marker is removed. Returns that sequence's
  // error, if any (the marker then stays: the next Open discards the index and starts empty).
  // Idempotent (later calls return the first call's status).
  Status Close();

 private:
  friend class engine_internal::EngineAccess;
  explicit Engine(std::shared_ptr<engine_internal::EngineCore> core);
  std::shared_ptr<engine_internal::EngineCore> core_;
};

}  // namespace rangekv
