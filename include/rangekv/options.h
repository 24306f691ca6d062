// EngineOptions: what Engine::Open is configured with (the store, the model, backend selections,
// durability, the payload digest policy), and EngineTuning (EngineOptions::tuning): pool sizes,
// thread counts and the paper's ablation switches, which an integrator leaves at their
// defaults. Plain values; Engine::options() returns them as resolved. Thread-safety: plain values
// (Ablations::Set is not thread-safe on one object).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/remote.h"
#include "rangekv/status.h"

namespace rangekv {

enum class DeviceSelection : uint8_t {
  kAuto,  // CUDA when a usable GPU is present, else the host device
  kHost,  // HostDevice: host memory, streams are FIFO worker threads (CI, CPU-only machines)
  kCuda,  // CudaDevice; Open fails with kNotSupported when no GPU can be used
};

enum class IoEngineSelection : uint8_t {
  kAuto,   // uring when it works with this file, else posix (the reason is logged)
  kPosix,  // pread/pwrite thread pool
  kUring,  // io_uring; Open fails with kNotSupported when it cannot be used
  // cuFile (libcufile via dlopen; GDS, or cuFile's compat mode) with a CUDA device. When the
  // library, its driver or the pack file's handle registration is unavailable, or the device
  // is not CUDA, Open falls back as kAuto does and DescribeBackends() / the log say why.
  kCuFile,
};

// EngineTuning::free_reserve_packs: chosen at Open from the durability and the pack count.
inline constexpr uint32_t kFreeReserveAuto = UINT32_MAX;
inline constexpr uint64_t kFreeReserveMinPacks = 32;
// The auto rule (an engine's own store and the store service's stores alike).
inline uint32_t AutoFreeReservePacks(bool journaled, uint64_t pack_count) {
  return journaled && pack_count >= kFreeReserveMinPacks ? 1 : 0;
}

// EngineTuning::io_split_bytes values besides a byte count.
inline constexpr uint64_t kIoSplitAuto = 0;          // probe the medium at Open
inline constexpr uint64_t kIoSplitOff = UINT64_MAX;  // issue every span whole
// The default: reads are cut into pieces when the read I/O engine has more threads than there
// are read workers (each worker has one span in flight), so every thread has a piece to work
// on: kFillSplitBytes on a buffered pack file (threads copying out of the page cache),
// kFillSplitBytesDirect on O_DIRECT (requests the device serves side by side). Both are 1 MiB,
// chosen apart so each can be tuned alone (see docs/benchmarks.md, "`rangekv bench restore`"):
// smaller pieces add per-call costs, larger ones leave threads idle as a span ends. On O_DIRECT,
// writes are cut into the same pieces (a store has only a few batches' spans in flight for the
// write engine's threads); buffered writes stay whole.
inline constexpr uint64_t kIoSplitFillReads = UINT64_MAX - 1;
inline constexpr uint64_t kFillSplitBytes = 1ull << 20;
inline constexpr uint64_t kFillSplitBytesDirect = 1ull << 20;
// Auto read I/O threads (EngineTuning::read_io_threads == 0) on a buffered pack file never
// exceed this (on O_DIRECT they are kDirectReadIoThreadsPerWorker x read_workers).
inline constexpr uint32_t kDirectReadIoThreadsPerWorker = 4;
inline constexpr uint32_t kMaxAutoReadIoThreads = 16;

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

// Payload digest policy (docs/design.md "Persistence and recovery"). Every store computes a digest
// per ~1 MiB block of every stored stripe on the engine's device and keeps it with the record (and
// in the clean snapshot), under either policy. kAlways: every restore reads whole digest blocks,
// digests them on the device and compares before scattering; a mismatch drops the record, fails
// exactly its tokens (kCorruption, reported for recompute) and counts a checksum failure.
// kOff: restores skip the check (the digests stay for fsck and for later sessions).
enum class ChecksumPolicy : uint8_t { kAlways, kOff };

// What a crash may lose of the index (docs/fault-model.md "Publication journal"). The
// engine keeps a checksummed publication journal next to the snapshot; a dirty reopen replays
// it and keeps every journaled publication whose payload digests verify.
//   kEveryPublish  a store's Finish(kUntilVisible) returns only once its publication is durable
//                  (its payload and its journal record fsynced; concurrent stores share the
//                  fsyncs); a crash loses no store that returned visible
//   kPeriodic      (default) journal group commits at least every period_ms: a crash loses at
//                  most the publications of the last period_ms (plus one commit's duration)
//   kNone          no journal: a dirty reopen discards the whole index
struct Durability {
  enum class Mode : uint8_t { kNone, kPeriodic, kEveryPublish };
  Mode mode = Mode::kPeriodic;
  uint64_t period_ms = 200;  // kPeriodic only; in [1, 60000]
  // kPeriodic and kEveryPublish: a journal that has held records this long is folded into a
  // new snapshot (a checkpoint; so is one past 256 MiB, and every clean shutdown), so a dirty
  // reopen replays at most this much. 0: no time-based checkpoint. At most 86,400,000 (a day).
  // Set() leaves it alone.
  uint64_t checkpoint_interval_ms = 60000;

  // Parses "every_publish", "periodic:<ms>" (or "periodic" for 200 ms), "none".
  // kInvalidArgument otherwise; a failed call changes nothing.
  Status Set(std::string_view value);
  // "every_publish", "periodic:200", "none".
  std::string ToString() const;
  friend bool operator==(const Durability&, const Durability&) = default;
};

// Who may read a store. kOwner: the store directory is created 0700 and its files 0600,
// whatever the umask. kGroup: 0750 and 0640 (a shared store service whose clients share a
// group). Under either, Open refuses (kUnsafePermissions, naming the path and its mode) a store
// whose directory or files are owned by another user or writable by group or others; existing
// bits are never changed.
enum class StoreAccess : uint8_t { kOwner, kGroup };

// What Open does with an existing embedded store written for another namespace or geometry
// (another model identity, KV dtype, paged layout, block size, TP rank, stripe size, ...).
// kFail: Open fails with kNamespaceMismatch / kGeometryMismatch and leaves the store as it is.
// kReplace: the store is a cache whose key no longer matches: its files are removed and a new,
// empty store is created in their place (logged at warning with both namespaces), so the old
// KV is never served and its space is reused. The epoch file stays (epochs only increase).
// The vLLM connector and rangekv.hf use kReplace (docs/integrations/vllm.md "What is in the
// key"). With store_service each namespace has a store of its own, and this does not apply.
enum class StoreMismatch : uint8_t { kFail, kReplace };

// The knobs an integrator leaves alone: pool sizes, worker and thread counts, queue depths, the
// I/O split, the store service client's polling and timeout, the read-sharing policies and the
// paper's ablations. The defaults are what the engine is measured and tested with; the bench
// tools and the tests set them. EngineOptions::tuning.
struct EngineTuning {
  // Restore side (docs/design.md "Defaults and limits"). Bank bytes 0 means W; a read bank holds
  // one stripe span.
  uint32_t read_banks = 8;
  uint64_t read_bank_bytes = 0;
  uint32_t read_workers = 4;  // restore threads, each with one stripe span in flight
  // Threads of the read I/O engine (posix: pread threads; uring: rings, one thread each; cufile:
  // threads). 0 = auto: on a buffered pack file max(read_workers, min(usable CPUs,
  // kMaxAutoReadIoThreads)), since page-cache reads are memory copies that scale with the
  // threads doing them; on O_DIRECT kDirectReadIoThreadsPerWorker x read_workers (with
  // fill_reads each span goes out as 1 MiB requests, 16 in flight at the defaults: the lowest
  // stripes' pieces go first, so the first layer's are not queued behind whole later spans).
  // options() reports the count in effect. Otherwise [1, 256].
  uint32_t read_io_threads = 0;
  uint32_t prefetch_banks = 7;  // banks lookup-time prefetch may hold; < read_banks
  // Layers read ahead of the lowest unfinished one. At least read_workers: a layer is often one
  // stripe (a pack's run of one layer), and a smaller window leaves workers idle.
  uint32_t lookahead_layers = 4;
  uint32_t max_inflight_restores = 16;  // restore job slots (prefetching jobs included)

  // Store side. Store bank bytes 0 means 2 * layer_group * W (256 MiB with groups of 4): a full
  // group of layer_group layers and two stripes per layer (a pack and its partial tail).
  uint32_t store_banks = 8;
  uint64_t store_bank_bytes = 0;
  // Store group workers (each gathers one batch at a time) and the layers a batch gathers and
  // writes together. 0 = auto, resolved at Open from the device: on CUDA the paper's 8 workers
  // and groups of 4 (a gather is an asynchronous kernel; more batches in flight keep the GPU
  // and the writes busy); on the host device min(8, usable CPUs) workers and groups of 2 (a
  // gather is CPU work already spread over the device's pool: more concurrent gathers than
  // cores only make every batch finish later, and a smaller group lets the first writes start
  // sooner). Both are clipped to the model's layers
  // (and the gather's kernels::kMaxGatherLayers). options() reports the values in effect.
  uint32_t group_workers = 0;
  uint32_t write_workers = 32;
  uint32_t layer_group = 0;
  uint32_t max_inflight_stores = 16;  // store job slots, including detached write debt

  // Pack slots kept free ahead of the stores by evicting early (DirectoryOptions::
  // free_reserve_packs): a store then reuses a slot whose eviction is already durable instead
  // of waiting for the journal to commit the eviction it just caused (the write-ahead rule; a
  // wait the size of a disk flush, long on a virtual disk with a write-back cache). Costs
  // that many packs of capacity. kFreeReserveAuto: 1 when the store journals (durability other
  // than none) and has at least kFreeReserveMinPacks packs (the pack is then at most 1/32 of
  // the capacity), else 0. Otherwise [0, 64].
  uint32_t free_reserve_packs = kFreeReserveAuto;

  // Byte split of native I/O (docs/design.md 4.3): a span longer than this is issued as
  // concurrent sub-reads / sub-writes of this many bytes (rounded up to the O_DIRECT
  // alignment), so native calls = payload bytes / split, whatever the object count.
  // kIoSplitFillReads (default): where read_io_threads exceeds read_workers (see
  // kIoSplitFillReads), reads in 1 MiB pieces (kFillSplitBytes buffered, kFillSplitBytesDirect
  // on O_DIRECT) and, on O_DIRECT, writes too; otherwise whole. Why: a restore from the page
  // cache is bound by how many threads copy out of it, and an O_DIRECT restore by how many
  // requests the device serves side by side, while the read workers keep only a few spans in
  // flight; the lowest stripes' pieces are queued first, so the first layer does not wait
  // behind whole later spans (see docs/benchmarks.md, "`rangekv bench restore`").
  // kIoSplitAuto: chosen at Open by a short probe of the store's medium (16 MiB through the
  // read engine, src/io/split_probe.h; a split must beat whole spans by 10%), logged, for reads
  // and writes; with a caller-supplied `env` (not DefaultEnv()) there is no real medium to probe
  // and spans stay whole. kIoSplitOff: never split. Otherwise [512, 1 GiB], reads and writes.
  // options() reports the read engine's split in effect (kIoSplitOff when none) and
  // DescribeBackends() how it was chosen. (A split only pays when it feeds more threads than
  // there are spans.)
  uint64_t io_split_bytes = kIoSplitFillReads;

  // How long a call to the store service (a lookup, a claim, a reservation) polls for the
  // reply before its thread sleeps. The caller waits for that reply anyway; the poll spares it
  // a wake-up, which costs most on a VM whose vCPU went idle (what it costs: see
  // docs/store-service.md, "Latency: polling for the reply"). 0: sleep at once. At most 10,000.
  uint32_t store_service_spin_us = 200;
  // How long a call to the store service waits for its reply before it fails with
  // kUnavailable and the connection counts as lost (the engine reconnects later): a hung or
  // stopped service never blocks a serving step for longer. 1 to 3,600,000.
  uint32_t store_service_timeout_ms = 60000;
  // With a store service: size this engine's reads to its share of the node. Every lookup and
  // claim reply says how many sessions are reading the node's stores now (this one included,
  // docs/store-service.md "Sharing the node's read concurrency"); with R of them the engine
  // keeps at most ceil(read_workers / R) stripe reads and ceil(read_io_threads / R) read I/O
  // pieces in flight, so N serving instances together keep about what one engine alone would.
  // An engine reading alone keeps its full counts. Ignored for an embedded store. Off by
  // default: a static share is not work-conserving (a client's reads leave gaps the others
  // could fill), so it trades the instances' aggregate for each request's first layer
  // (docs/store-service.md).
  bool share_reads = false;
  // With a store service that runs a read gate (`rangekv serve` does by default, `--read-slots
  // auto`; docs/store-service.md "A node-wide read gate"): every read I/O piece of this engine
  // first takes one of the node's N slots, shared with every other engine of the service that
  // asked, and gives it back when the read call returns. Work-conserving where share_reads is
  // not: an engine reading alone may take every slot. posix and cuFile reads are gated,
  // io_uring's are not. A service without a gate leaves the engine ungated. Ignored for an
  // embedded store. On by default: the node's reads are served first come, first served
  // instead of each instance's lowest layers competing with every other instance's, so a
  // request's first layer does not wait behind other instances' later layers (what that buys:
  // see docs/benchmarks.md, "`rangekv bench concurrent`").
  bool read_gate = true;

  // Removed ranges (Engine::DrainRemovedRanges) kept until drained: beyond this the oldest is
  // dropped and counted (EngineStats::removed_events_dropped). 0: none are recorded. At most
  // 1,048,576.
  uint64_t max_removed_ranges = 4096;

  Ablations ablations;
};

// What Engine::Open is configured with. The top level holds what an integrator sets (where the
// store lives, the model, capacity, device and I/O backend, durability, checksums, access, the
// store service and the cluster tier); `tuning` holds the rest.
struct EngineOptions {
  // Directory holding the store (created if absent): the pack file `<store_dir>/packs.rkv`, the
  // metadata snapshot, dirty marker and epoch file (docs/pack-format.md). An existing pack file
  // is opened and validated against `model` (geometry and namespace); its index is loaded from
  // the last clean shutdown's snapshot when that is intact and bound to it (see recovery()).
  // One engine per store directory at a time: Open takes the directory's lock (lock.rkv) and a
  // second opener, in this process or another, fails with kLocked naming the holder's pid.
  // Ignored (may be empty) with store_service.
  std::string store_dir;
  // The node's store service (`rangekv serve`; docs/store-service.md): "" keeps the store
  // embedded in this process (store_dir); "unix:///run/rangekv.sock" (or a socket path) makes
  // the service own the index, its journal and snapshot while this engine reads and writes the
  // shared pack file itself. The service's durability applies then, not `durability`; the
  // index ablation must be tree. capacity_bytes is what a new namespace store asks for (the
  // service caps it by the tenant's quota and its --store-capacity; an existing store keeps
  // its pack file's capacity whatever a client asks).
  std::string store_service;
  // Quota account at the store service (1-64 of [A-Za-z0-9._-]).
  std::string tenant = "default";

  ModelSpec model;
  uint64_t stripe_bytes = kDefaultStripeBytes;  // W
  // Capacity bound. A new pack file gets capacity_bytes / pack_bytes pack slots (at least one);
  // an existing one keeps its slots (its header fixes them), and at most capacity_bytes of them
  // hold packs: reopened with a smaller capacity, the store keeps the most recently used packs
  // that fit, wherever they lie in the file, and evicts the rest
  // (StoreRecovery::packs_evicted_for_capacity); a larger one is capped at the file's slots.
  uint64_t capacity_bytes = 16ull << 30;

  // File seam (rangekv/env.h); nullptr means DefaultEnv(). Must outlive the Engine.
  Env* env = nullptr;
  DeviceSelection device = DeviceSelection::kAuto;
  uint32_t cuda_device_ordinal = 0;
  IoEngineSelection io_engine = IoEngineSelection::kAuto;
  // How the pack file opens (rangekv/env.h): O_DIRECT where the file system supports it, or
  // always buffered.
  DirectIo direct_io = DirectIo::kPreferred;
  // kCuFile: the library to dlopen ("" = libcufile.so.0 through the dynamic loader).
  std::string cufile_library;

  // Largest token count of one lookup, restore or store (sizes the per-job slot-mapping
  // buffers allocated at Open).
  uint64_t max_request_tokens = 262144;

  ChecksumPolicy checksum = ChecksumPolicy::kAlways;
  StoreAccess store_access = StoreAccess::kOwner;
  StoreMismatch on_store_mismatch = StoreMismatch::kFail;
  Durability durability;

  // The cluster tier (include/rangekv/remote.h, docs/scale-out.md): off unless remote.url is
  // set. Needs checksum = kAlways (every remote byte is verified against its publisher's
  // digests). An embedded store publishes its packs itself; with store_service the node's
  // service publishes and this engine only looks up and reads.
  RemoteTierOptions remote;

  EngineTuning tuning;
};

}  // namespace rangekv
