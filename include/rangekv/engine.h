// Engine: RangeKV's transfer engine, the C++ API that integrations (vLLM connector, HF cache
// adapter, benchmarks) drive. One Engine serves one rank: it owns one store directory (a pack
// file and the range directory over it), a fixed set of read and store banks carved from the
// device at Open, and the workers that move stripes between the pack file and paged KV memory.
//
// The rule it follows (DESIGN.md, the Range paper): every cost on the storage path scales with
// payload bytes or bounded physical batches, never with the number of logical cache objects.
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
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rangekv/geometry.h"
#include "rangekv/layout.h"
#include "rangekv/status.h"

namespace rangekv {

class Env;  // src/env/env.h: the file seam; tests pass a fault-injecting one

namespace engine_internal {
class EngineAccess;
class EngineCore;
class RestoreJob;
class StoreJob;
}  // namespace engine_internal

// ---- options ----------------------------------------------------------------------------------

enum class DeviceSelection : uint8_t {
  kAuto,  // CUDA when a usable GPU is present, else the host device
  kHost,  // HostDevice: host memory, streams are FIFO worker threads (CI, CPU-only machines)
  kCuda,  // CudaDevice; Open fails with kUnavailable when no GPU can be used
};

enum class IoEngineSelection : uint8_t {
  kAuto,   // uring when it works with this file, else posix (the reason is logged)
  kPosix,  // pread/pwrite thread pool
  kUring,  // io_uring; Open fails with kUnavailable when it cannot be used
};

enum class DirectIoPreference : uint8_t {
  kPreferred,  // O_DIRECT where the file system supports it (tmpfs does not), else buffered
  kOff,        // always buffered through the page cache
};

// The paper's ablations (section 5.4). Each switch restores one piece of the stock per-object
// path so its cost can be measured; the defaults are RangeKV.
struct Ablations {
  enum class Index : uint8_t {
    kTree,    // radix tree over token ids: work per compared token byte and selected record
    kScalar,  // stock per-chunk index: one key built, hashed, looked up and leased per object
  };
  enum class ReadIssue : uint8_t {
    kStripe,  // one native read per stripe span
    kObject,  // each stripe span issued as object-sized native reads (same bank, one scatter)
  };
  enum class Delivery : uint8_t {
    kLayer,    // layer l is published when its own stripes landed
    kBarrier,  // no layer is published before every layer landed (whole-prefix barrier)
  };
  enum class Prefetch : uint8_t {
    kLookup,    // reads of the first stripes may start at Lookup, before slots are bound
    kDispatch,  // reads start at StartRestore (claim)
  };

  // What one logical object of the stock path is (index=scalar keys, read_issue=object reads).
  enum class Objects : uint8_t {
    kChunk,       // a chunk of object_tokens tokens over all layers
    kChunkLayer,  // a chunk of one layer (LMCache's layerwise mode)
  };

  Index index = Index::kTree;
  ReadIssue read_issue = ReadIssue::kStripe;
  Delivery delivery = Delivery::kLayer;
  Prefetch prefetch = Prefetch::kLookup;
  // Size of a logical object in tokens: the stock path's chunk (256 tokens in vLLM/LMCache).
  uint64_t object_tokens = 256;
  Objects objects = Objects::kChunk;

  // Applies one "key=value" setting: index=tree|scalar, read_issue=stripe|object,
  // delivery=layer|barrier, prefetch=lookup|dispatch, object_tokens=N,
  // objects=chunk|chunk_layer. kInvalidArgument naming the key or value otherwise; a failed
  // call changes nothing.
  Status Set(std::string_view key_equals_value);
  // "index=tree,read_issue=stripe,delivery=layer,prefetch=lookup,object_tokens=256,
  // objects=chunk" (one line).
  std::string ToString() const;
  friend bool operator==(const Ablations&, const Ablations&) = default;
};

// Payload digest policy (DESIGN.md 4.6). Every store computes a digest per ~1 MiB block of
// every stored stripe on the engine's device and keeps it with the record (and in the clean
// snapshot), under either policy. kAlways: every restore reads whole digest blocks, digests
// them on the device and compares before scattering; a mismatch drops the record, fails
// exactly its tokens (kCorruption, reported for recompute) and counts a checksum failure.
// kOff: restores skip the check (the digests stay for fsck and for later sessions).
enum class ChecksumPolicy : uint8_t { kAlways, kOff };

// Who may read a store. kOwner: the store directory is created 0700 and its files 0600,
// whatever the umask. kGroup: 0750 and 0640 (a shared store service whose clients share a
// group). Under either, Open refuses (kUnsafePermissions, naming the path and its mode) a store
// whose directory or files are owned by another user or writable by group or others; existing
// bits are never changed.
enum class StoreAccess : uint8_t { kOwner, kGroup };

struct EngineOptions {
  // Directory holding the store (created if absent): the pack file `<store_dir>/packs.rkv`, the
  // metadata snapshot, dirty marker and epoch file (docs/pack-format.md). An existing pack file
  // is opened and validated against `model` (geometry and namespace); its index is loaded from
  // the last clean shutdown's snapshot when that is intact and bound to it (see recovery()).
  // One engine per store directory at a time.
  std::string store_dir;
  ModelSpec model;
  uint64_t stripe_bytes = kDefaultStripeBytes;  // W
  // Capacity bound: pack count = capacity_bytes / pack_bytes (at least one pack). Ignored when
  // opening an existing pack file, whose header fixes the pack count.
  uint64_t capacity_bytes = 16ull << 30;
  // File seam; nullptr means DefaultEnv(). Must outlive the Engine.
  Env* env = nullptr;
  DeviceSelection device = DeviceSelection::kAuto;
  uint32_t cuda_device_ordinal = 0;
  IoEngineSelection io_engine = IoEngineSelection::kAuto;
  DirectIoPreference direct_io = DirectIoPreference::kPreferred;

  // Restore side (DESIGN.md 5). Bank bytes 0 means W; a read bank holds one stripe span.
  uint32_t read_banks = 8;
  uint64_t read_bank_bytes = 0;
  uint32_t read_workers = 4;
  uint32_t prefetch_banks = 7;  // banks lookup-time prefetch may hold; < read_banks
  uint32_t lookahead_layers = 2;
  uint32_t max_inflight_restores = 16;  // restore job slots (prefetching jobs included)

  // Store side. Store bank bytes 0 means 2 * layer_group * W (256 MiB at the defaults): a full
  // group of layer_group layers and two stripes per layer (a pack and its partial tail).
  uint32_t store_banks = 8;
  uint64_t store_bank_bytes = 0;
  uint32_t group_workers = 8;
  uint32_t write_workers = 32;
  uint32_t layer_group = 4;
  uint32_t max_inflight_stores = 16;  // store job slots, including detached write debt

  // Largest token count of one lookup, restore or store (sizes the per-job slot-mapping
  // buffers allocated at Open).
  uint64_t max_request_tokens = 262144;

  Ablations ablations;
  ChecksumPolicy checksum = ChecksumPolicy::kAlways;
  StoreAccess store_access = StoreAccess::kOwner;
};

// ---- identity and paged KV --------------------------------------------------------------------

// Who a request is. Tickets are bound to it; a claim with another envelope fails kForeignOwner.
struct RequestEnvelope {
  std::string request_id;  // the serving engine's request id: 1..256 bytes
  uint64_t session_id = 0;
  uint32_t attempt = 0;
  uint32_t rank = 0;
  friend bool operator==(const RequestEnvelope&, const RequestEnvelope&) = default;
};

// Path tokens [begin, end).
struct TokenInterval {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  friend bool operator==(const TokenInterval&, const TokenInterval&) = default;
};

// The destination (restore) or source (store) of a transfer: one device buffer per layer.
// Built by the caller from its framework tensors; the engine never sees framework types.
//   layer_base[l]   address of layer l's tensor in the engine's device memory space (for the
//                   host device: host memory; for CUDA: a device pointer). Each must stay
//                   valid and untouched by the caller in the slots it handed over until the
//                   transfer says so (restore: layer ready / Finish; store: extraction done).
//   num_blocks      blocks per layer tensor
// A slot is block * block_size + offset-in-block, exactly vLLM's slot_mapping convention.
struct PagedKv {
  KvCacheLayout layout = KvCacheLayout::kFlashAttnNhd;
  uint64_t num_blocks = 0;
  std::vector<void*> layer_base;  // size == geometry().layers
};

// A stream of the engine's device, as a caller names it: a ref returned by
// Engine::CreateStream() or Engine::WrapNativeStream() (never a raw cudaStream_t). A null ref
// means "no stream" (LayerProduced: the KV is already in memory).
struct DeviceStreamRef {
  void* native = nullptr;
  bool null() const { return native == nullptr; }
};

// ---- work-unit counters -----------------------------------------------------------------------

// X(name, description). One list drives the struct, JSON output and differences.
#define RANGEKV_ENGINE_STATS_FIELDS(X)                                                          \
  X(lookups, "Lookup calls answered")                                                           \
  X(records_selected, "pack records selected by lookups")                                       \
  X(leases_taken, "pack leases taken by tickets")                                               \
  X(restores_started, "claims that started a restore")                                          \
  X(restores_finished, "restores whose owners all drained")                                     \
  X(cancelled_restores, "restores or prefetches cancelled before completing")                   \
  X(native_reads, "native read submissions to the I/O engine")                                  \
  X(bytes_read, "bytes moved by native reads")                                                  \
  X(read_bank_acquisitions, "read bank acquisitions")                                           \
  X(prefetched_stripes, "stripe reads issued before slots were bound")                          \
  X(h2d_copies, "staging-to-device copies (devices without direct I/O into device memory)")     \
  X(scatter_launches, "scatter kernel launches (one per delivered stripe)")                     \
  X(ready_events, "layer readiness events recorded")                                            \
  X(failed_spans, "read or write spans that failed")                                            \
  X(quarantines, "banks quarantined because their completion could not be proven")              \
  X(checksum_failures, "spans whose payload failed verification")                               \
  X(stores_begun, "BeginStore calls that reserved new records")                                 \
  X(stores_joined, "BeginStore calls that joined an in-flight reservation (no I/O)")            \
  X(stores_cached, "BeginStore calls whose tokens were all cached already")                     \
  X(stores_published, "stores whose records became visible")                                    \
  X(stores_aborted, "stores whose reservation was reclaimed")                                   \
  X(gather_launches, "gather kernel launches (one per layer group and bank)")                   \
  X(store_bank_acquisitions, "store bank acquisitions")                                         \
  X(native_writes, "native write submissions to the I/O engine")                                \
  X(bytes_written, "bytes moved by native writes")                                              \
  X(digest_launches, "digest kernel launches (store and restore; up to 32 blocks each)")        \
  X(verified_spans, "restore spans whose payload digests were checked before scatter")          \
  X(payload_allocations, "payload buffers allocated after Open (the data path allocates none)") \
  X(rejected_requests, "restores or stores refused because their job slots were all in use")

struct EngineStats {
#define RANGEKV_STATS_DECLARE_(name, doc) uint64_t name = 0;
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_STATS_DECLARE_)
#undef RANGEKV_STATS_DECLARE_

  // Field-wise a - b (a later snapshot minus an earlier one).
  friend EngineStats operator-(const EngineStats& a, const EngineStats& b);
  friend bool operator==(const EngineStats&, const EngineStats&) = default;
  // {"lookups":1,"records_selected":6,...} in declaration order.
  std::string ToJson() const;
};

// ---- restore ----------------------------------------------------------------------------------

struct LookupResult {
  uint64_t hit_tokens = 0;  // reusable prefix, rounded down to the reuse granularity
  std::string ticket;       // serialized ticket; empty when hit_tokens == 0
  uint64_t records_selected = 0;
  bool prefetch_started = false;  // a prefetching restore job now waits for the claim
};

struct RestoreRequest {
  std::string_view ticket;  // bytes from LookupResult::ticket (may have crossed processes)
  RequestEnvelope envelope;
  std::span<const int32_t> tokens;  // the request's prompt tokens (at least endpoint of them)
  // Restore path tokens [begin_token, endpoint_tokens): begin_token > 0 skips tokens the
  // serving engine already holds (its own prefix cache); endpoint_tokens <= the ticket's hit.
  uint64_t begin_token = 0;
  uint64_t endpoint_tokens = 0;
};

struct RestoreOutcome {
  // OK when every requested token was delivered; otherwise the first error seen (kIoError,
  // kShortTransfer, kCorruption, kCancelled, ...), and `failed` names the tokens to recompute.
  Status status;
  TokenInterval requested;
  // Sorted, disjoint, merged: every token for which at least one layer was not delivered.
  // Their destination slots hold nothing the caller may use.
  std::vector<TokenInterval> failed;
  uint64_t delivered_tokens = 0;  // requested.size() minus the tokens in `failed`
  EngineStats work;               // this restore's share of the counters
};

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
  // Errors: kGeometryMismatch (layer count, token size, MLA vs non-MLA layout),
  // kInvalidArgument (null layer base, zero blocks, a mapping of the wrong length, a negative
  // or repeated slot), kOutOfRange (a slot >= num_blocks x block_size), kFailedPrecondition
  // (already bound, finished or cancelled). On error nothing is bound and nothing scattered.
  Status BindSlots(const PagedKv& kv, std::span<const int64_t> slot_mapping);

  // Blocks until layer `layer` is published (all its stripes delivered or failed, and its
  // scatters complete). OK when all of the layer's spans were delivered; otherwise the
  // layer's first error (its tokens are in Finish()'s `failed`). kCancelled after Cancel().
  // kInvalidArgument for a layer >= L.
  Status WaitLayer(uint32_t layer);

  // Makes `model_stream` wait for layer `layer` without the host waiting for the data. Where
  // the device has stream memory operations (CUDA cuStreamWaitValue32, HostDevice) it enqueues
  // a wait on the layer's readiness flag and returns at once with OK, even before the layer's
  // reads were issued; the flag is written after the layer's last scatter (also for failed or
  // cancelled layers, so the stream never hangs), and failures surface in Finish()'s outcome.
  // Otherwise it blocks only until the layer's readiness event was recorded (its last scatter
  // launched, not completed), enqueues a wait on it and returns the layer's status as
  // WaitLayer does.
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

struct StoreRequest {
  RequestEnvelope envelope;
  std::span<const int32_t> tokens;  // the full token path; only the uncached suffix is stored
  const PagedKv* kv = nullptr;      // source of the KV
  // slot_mapping[i] is the slot holding path token i, for every token in `tokens`.
  std::span<const int64_t> slot_mapping;
};

enum class StoreDisposition : uint8_t {
  kStoring,        // new records reserved; this handle drives their writes. Also when an
                   // in-flight store covers only a prefix of the rest: this store then waits for
                   // it (the caller does not block) and reserves and writes the remainder
  kJoined,         // an in-flight store of the same tokens owns them; this one does no I/O
  kAlreadyCached,  // every token is already visible; nothing to do
};

enum class StoreWait : uint8_t {
  kUntilVisible,  // Finish blocks until the records are visible or the store failed
  kDetach,        // Finish returns once extraction is done; writes continue as bounded debt
};

struct StoreOutcome {
  // OK: visible (or joined / already cached). Otherwise the first error (kNoSpace, kIoError,
  // kCancelled when layers were never produced, ...): nothing of this store became visible.
  // Under kDetach: OK means "extracted, writes continue"; GetStats() reports the end.
  Status status;
  StoreDisposition disposition = StoreDisposition::kAlreadyCached;
  TokenInterval stored;  // the suffix this store reserved and wrote (empty unless kStoring)
  bool visible = false;
  EngineStats work;
};

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
  // layers that are never produced waits forever: produce them, or call Finish().
  Status WaitExtracted();

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

// What Open found in the store directory (DESIGN.md 4.6; docs/pack-format.md "Metadata
// snapshot"). The index is loaded only from the snapshot of a clean shutdown, with no dirty
// marker, intact and bound to this pack file; otherwise it starts empty (never rebuilt from
// payload) and the reason is logged at warning level.
struct StoreRecovery {
  bool loaded = false;   // the index was loaded from the snapshot
  bool created = false;  // Open created the pack file
  // "" when loaded; else why the index started empty: "new_store", "dirty",
  // "missing_snapshot", "unreadable_snapshot", "truncated", "corrupt_checksum", "malformed",
  // "wrong_version", "wrong_store_uuid", "wrong_geometry", "wrong_namespace",
  // "pack_layout_mismatch", "pack_size_mismatch", "directory_rejected", "inconsistent".
  std::string reason;
  std::string detail;         // the logged explanation
  uint64_t packs_loaded = 0;  // visible packs restored from the snapshot
  uint64_t store_epoch = 0;   // this session's store epoch (raised at every open)
};

class Engine {
 public:
  // Validates options (kInvalidArgument naming the field), derives the geometry, creates or
  // opens the store, allocates every bank and job slot, and starts the workers.
  // Errors: from validation, DeriveGeometry, the pack file (PackFile::Open's distinct errors),
  // the device (kUnavailable for DeviceSelection::kCuda without a GPU) and the I/O engine.
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Geometry& geometry() const;
  const NamespaceId& namespace_id() const;
  const EngineOptions& options() const;  // as resolved (bank sizes filled in)
  // "host" or "cuda", and "posix" / "uring" plus the reason for a fallback, for logs and bench.
  std::string DescribeBackends() const;
  // What Open found: index loaded, or started empty and why.
  const StoreRecovery& recovery() const;

  // Scheduler side. Finds the longest cached prefix of `tokens`, rounded down to
  // `reuse_granularity_tokens`, never covering the last token; on a hit returns a ticket bound to
  // `envelope` that leases the selected packs. With prefetch=lookup, may start reading the first
  // stripes into at most prefetch_banks read banks before any claim.
  // Errors: kInvalidArgument (no tokens, zero granularity, more than max_request_tokens),
  // kTicketReplaced (an outstanding ticket of this request names another query), directory
  // capacity errors.
  Result<LookupResult> Lookup(const RequestEnvelope& envelope, std::span<const int32_t> tokens,
                              uint64_t reuse_granularity_tokens);

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

  // Device memory for paged KV in tests and tools (the serving engine brings its own). Owned by
  // the engine until Close(); counted apart from payload allocations.
  Result<void*> AllocateDeviceMemory(uint64_t bytes);
  // Copies between host memory and device memory (synchronous; tests and tools).
  Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes);
  Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes);

  EngineStats GetStats() const;

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
