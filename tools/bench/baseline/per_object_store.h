// PerObjectStore: a MODEL of the stock per-object KV storage path, for the benchmarks only.
//
// It is NOT LMCache. It reproduces, in C++ and on RangeKV's own device, kernels and I/O engine,
// the per-object STRUCTURE of LMCache's in-process disk/GDS backends (docs/design.md "Baselines"
// sections 1-4; the Range paper, section 2.2 and Table 2), so that a benchmark can put the
// stock work pattern beside RangeKV on the same payload, medium and memory, with only the
// per-object structure differing. Per logical object (object_naming.h) it performs:
//   restore (Get)  one key built (CacheEngineKey fields + the chunk's hash-chain value; the
//                  chain itself is computed once per call over the token prefix, as LMCache's
//                  token database does), one hash-map probe under the index lock, one
//                  object-sized payload allocation from a pool (LMCache's memory allocators
//                  sub-allocate too), one object-sized native read submitted on its own,
//                  and — after the reads, as the stock host phase begins when the last read
//                  returns — one KV transfer call that scatters the object's tokens into paged
//                  KV for every layer it holds (one device launch per layer inside the call);
//                  in layerwise shapes a layer is delivered (and timed ready) once all of its
//                  objects were read and transferred, with later layers' reads in flight;
//   store (Put)    one allocation and one KV transfer call (gather of the object's tokens and
//                  layers from paged KV, <= 8 layers per launch) per object, one stream
//                  synchronisation, then per object one key, one index probe, one write
//                  submission, and after its write returned one index record.
// What it deliberately does NOT model: Python interpreter costs (the paper measures ~67 us of
// serial host work per object in the real backend), file creation/rename per object, cuFile
// handle registration per object, and the per-put manifest rewrite. Its numbers are therefore
// a lower bound on the stock path's per-object cost.
//
// Storage layout (a simplification): ONE data file, not one
// file per object. Each stored object occupies its own region of the file, allocated by a bump
// pointer and aligned to the O_DIRECT alignment, and is read and written with exactly one
// object-sized native I/O (rounded up to the alignment, as a per-object file's blocks would
// be). One file keeps 327,680-object runs from creating 327,680 files while keeping one native
// call per object. Objects are stored token-major per layer: for each layer of the object, its
// tokens' rows of (K heads, V heads) of the object's head range, layer after layer.
//
// Device memory: object payload buffers come from a pool allocated at Open. When the device's
// memory is host-accessible (HostDevice) reads and writes go straight to and from it (like the
// GDS backend's registered GPU buffer); otherwise a pinned host staging pool of the same size
// takes the I/O and each object is copied to or from the device by its transfer call (like the
// disk backend's pinned CPU objects).
//
// Thread-safety: Put, Get and Clear must not run concurrently with each other (one benchmark
// request at a time); GetStats may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/device.h"
#include "io/io_engine.h"
#include "kernels/paged_kv.h"
#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"
#include "tools/bench/baseline/object_naming.h"

namespace rangekv::baseline {

// X(name, description). Names match EngineStats where the work is the same kind, so a
// benchmark prints both side by side (Table 2 of the paper).
#define RANGEKV_PER_OBJECT_STATS_FIELDS(X)                                                  \
  X(keys_built, "object keys constructed")                                                  \
  X(index_probes, "hash-map index probes")                                                  \
  X(records_selected, "index records selected by restores (one per object hit)")            \
  X(payload_allocations, "object-sized payload buffer allocations")                         \
  X(native_reads, "native read submissions (one per object)")                               \
  X(bytes_read, "bytes moved by native reads")                                              \
  X(h2d_copies, "staging-to-device copies (devices without host-accessible memory)")        \
  X(scatter_launches, "KV transfer calls on restore (one per object, spanning its layers)") \
  X(ready_events, "readiness events (1 per restore, or 1 per layer when layerwise)")        \
  X(gather_launches, "KV transfer calls on store (one per object, spanning its layers)")    \
  X(kernel_launches, "device scatter/gather launches inside the transfer calls")            \
  X(native_writes, "native write submissions (one per object)")                             \
  X(bytes_written, "bytes moved by native writes")                                          \
  X(index_records, "index records inserted by stores")

struct PerObjectStats {
#define RANGEKV_PER_OBJECT_DECLARE_(name, doc) uint64_t name = 0;
  RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PER_OBJECT_DECLARE_)
#undef RANGEKV_PER_OBJECT_DECLARE_

  friend PerObjectStats operator-(const PerObjectStats& a, const PerObjectStats& b);
  friend bool operator==(const PerObjectStats&, const PerObjectStats&) = default;
  std::string ToJson() const;
};

struct PerObjectOptions {
  // Directory for the data file `<dir>/objects.dat` (created; an old one is replaced).
  std::string dir;
  // Key fields (CacheEngineKey: model name, dtype).
  std::string model_name = "rangekv-per-object-model";
  std::string kv_dtype = "bf16";
  Geometry geometry;
  Device* device = nullptr;  // not owned; must outlive the store
  Env* env = nullptr;        // nullptr: DefaultEnv()
  IoEngineKind io_engine = IoEngineKind::kPosix;
  uint32_t io_workers = 4;  // LMCache's disk_io_threads default
  DirectIo direct = DirectIo::kPreferred;
  // Data file size, preallocated (stored objects are bump-allocated in it; Clear() resets).
  uint64_t file_bytes = 0;
  // Payload pool: the objects of one Put or Get must fit together (FootprintBytes).
  uint64_t pool_bytes = 0;
  // Longest token path of a call (size of the device slot-mapping buffer).
  uint64_t max_tokens = 0;
  // Most objects of one call (bounds the per-call tables and the I/O queue).
  uint64_t max_objects = 1u << 20;
};

// Paged KV for a call: one view per layer, and the slot of every path token [0, n) in host
// memory (vLLM's slot_mapping). Views and slots are not owned.
struct PagedKvLayers {
  std::span<const kernels::PagedKvView> layers;
  std::span<const int64_t> slot_mapping;
};

struct PerObjectRestoreReport {
  Status status;
  uint64_t objects = 0;
  // Nanoseconds from the start of Get to the completion of layer 0's delivery and of the
  // last layer's (equal unless the naming is layerwise).
  uint64_t first_layer_ready_ns = 0;
  uint64_t last_layer_ready_ns = 0;
  PerObjectStats work;
};

struct PerObjectStoreReport {
  Status status;
  uint64_t objects = 0;
  uint64_t elapsed_ns = 0;  // start of Put to the last index record inserted
  PerObjectStats work;
};

class PerObjectStore {
 public:
  // Creates the data file (preallocated), the payload pool(s), the slot buffer, a stream and
  // the I/O engine. Errors: kInvalidArgument (no device, zero sizes, bad geometry), and those
  // of the Env, the device allocation and MakeIoEngine (kNotSupported for uring where it
  // cannot run).
  static Result<std::unique_ptr<PerObjectStore>> Open(const PerObjectOptions& options);
  ~PerObjectStore();
  PerObjectStore(const PerObjectStore&) = delete;
  PerObjectStore& operator=(const PerObjectStore&) = delete;

  // Bytes the objects of `naming` occupy in the pool and in the file: the sum of their sizes,
  // each rounded up to `alignment_bytes`.
  static uint64_t FootprintBytes(const ObjectNaming& naming, uint64_t alignment_bytes);

  // Stores every object of `naming` from `source` (keys over `path_tokens`, which must cover
  // the named range). Objects already indexed are skipped (LMCache's contains check).
  // Errors: kInvalidArgument (layer count, short token path or mapping, too many objects),
  // kResourceExhausted (pool or file full), I/O and device errors. A failed write leaves its
  // object unindexed.
  PerObjectStoreReport Put(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
                           const PagedKvLayers& source);

  // Restores every object of `naming` into `target`. kNotFound (nothing transferred) when an
  // object is missing; other errors as Put. The target's named slots are written only on
  // success of their objects' reads.
  PerObjectRestoreReport Get(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
                             const PagedKvLayers& target);

  // Forgets every record and rewinds the file's bump pointer. REQUIRES: no Put/Get running.
  void Clear();

  PerObjectStats GetStats() const;
  bool direct_io() const;
  uint64_t alignment_bytes() const;
  // "posix, O_DIRECT, device host" for logs and reports.
  std::string Describe() const;

  class Impl;

 private:
  explicit PerObjectStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rangekv::baseline
