#include "tools/bench/baseline/per_object_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "base/units.h"

namespace rangekv::baseline {

PerObjectStats operator-(const PerObjectStats& a, const PerObjectStats& b) {
  PerObjectStats d;
#define RANGEKV_PER_OBJECT_SUB_(name, doc) d.name = a.name - b.name;
  RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PER_OBJECT_SUB_)
#undef RANGEKV_PER_OBJECT_SUB_
  return d;
}

std::string PerObjectStats::ToJson() const {
  std::string out = "{";
  bool first = true;
#define RANGEKV_PER_OBJECT_JSON_(name, doc) \
  if (!first) out += ",";                   \
  first = false;                            \
  out += "\"" #name "\":" + std::to_string(name);
  RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PER_OBJECT_JSON_)
#undef RANGEKV_PER_OBJECT_JSON_
  out += "}";
  return out;
}

namespace {

// LMCache's CacheEngineKey (and LayerCacheEngineKey when layer >= 0): model name, world size,
// worker id, chunk hash, dtype, layer. Strings are copied into every key, as the stock
// dataclass holds them.
struct ObjectKey {
  std::string model_name;
  uint32_t world_size = 1;
  uint32_t worker_id = 0;
  uint64_t chunk_hash = 0;
  std::string dtype;
  int32_t layer = -1;
  friend bool operator==(const ObjectKey&, const ObjectKey&) = default;
};

struct ObjectKeyHash {
  size_t operator()(const ObjectKey& k) const {
    // A hash over every field, like Python's tuple hash of the six fields.
    struct {
      uint64_t name;
      uint64_t dtype;
      uint64_t chunk_hash;
      uint32_t world_size;
      uint32_t worker_id;
      int32_t layer;
      uint32_t pad;
    } packed{Hash64(k.model_name.data(), k.model_name.size()),
             Hash64(k.dtype.data(), k.dtype.size()),
             k.chunk_hash,
             k.world_size,
             k.worker_id,
             k.layer,
             0};
    return static_cast<size_t>(Hash64(&packed, sizeof(packed)));
  }
};

struct ObjectRecord {
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
};

// First-fit allocator over [0, capacity) with coalescing free list, aligned sizes. Stands in
// for LMCache's pool sub-allocators (one allocation per object, freed after use).
class PayloadPool {
 public:
  PayloadPool(uint64_t capacity_bytes, uint64_t alignment_bytes)
      : alignment_bytes_(alignment_bytes) {
    if (capacity_bytes > 0) free_[0] = capacity_bytes;
  }

  Result<uint64_t> Allocate(uint64_t bytes) {
    const uint64_t size = AlignUp(bytes, alignment_bytes_);
    MutexLock lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const uint64_t offset = it->first;
      const uint64_t rest = it->second - size;
      free_.erase(it);
      if (rest > 0) free_[offset + size] = rest;
      return offset;
    }
    return ResourceExhausted("per-object payload pool has no free region of " +
                             std::to_string(size) + " bytes");
  }

  void Free(uint64_t offset, uint64_t bytes) {
    uint64_t size = AlignUp(bytes, alignment_bytes_);
    uint64_t start = offset;
    MutexLock lock(mu_);
    auto next = free_.lower_bound(start);
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && offset + AlignUp(bytes, alignment_bytes_) == next->first) {
      size += next->second;
      free_.erase(next);
    }
    free_[start] = size;
  }

 private:
  const uint64_t alignment_bytes_;
  Mutex mu_;
  std::map<uint64_t, uint64_t> free_ GUARDED_BY(mu_);  // offset -> bytes
};

// The view of heads [head_begin, head_begin + heads) of one layer.
kernels::PagedKvView HeadSlice(const kernels::PagedKvView& layer, uint32_t head_begin,
                               uint32_t heads) {
  kernels::PagedKvView v = layer;
  if (heads == layer.num_heads) return v;
  for (uint32_t p = 0; p < v.num_planes; ++p) {
    v.plane_base[p] += int64_t{head_begin} * layer.head_stride_bytes;
  }
  v.num_heads = heads;
  return v;
}

void MarkNow(void* arg) { static_cast<std::atomic<uint64_t>*>(arg)->store(SteadyNs()); }

}  // namespace

class PerObjectStore::Impl {
 public:
  explicit Impl(const PerObjectOptions& options) : options_(options) {}

  Status Init() {
    const PerObjectOptions& o = options_;
    if (o.device == nullptr) return InvalidArgument("per-object store: no device");
    if (o.dir.empty()) return InvalidArgument("per-object store: no directory");
    if (o.file_bytes == 0 || o.pool_bytes == 0 || o.max_tokens == 0 || o.max_objects == 0) {
      return InvalidArgument(
          "per-object store: file_bytes, pool_bytes, max_tokens and max_objects must be > 0");
    }
    if (o.geometry.layers == 0 || o.geometry.token_bytes == 0) {
      return InvalidArgument("per-object store: empty geometry");
    }
    env_ = o.env != nullptr ? o.env : DefaultEnv();
    RANGEKV_RETURN_IF_ERROR(env_->CreateDir(o.dir));
    path_ = o.dir + "/objects.dat";
    if (env_->FileExists(path_)) RANGEKV_RETURN_IF_ERROR(env_->DeleteFile(path_));
    FileOptions fo;
    fo.mode = OpenMode::kReadWrite;
    fo.direct = o.direct;
    RANGEKV_ASSIGN_OR_RETURN(file_, env_->CreateFile(path_, fo));
    RANGEKV_RETURN_IF_ERROR(file_->Allocate(o.file_bytes));
    alignment_bytes_ = std::max<uint64_t>(file_->direct_alignment(), kIoAlignment);

    Device& dev = *o.device;
    host_accessible_ = dev.capabilities().device_memory_host_accessible;
    const uint64_t pool_bytes = AlignUp(o.pool_bytes, alignment_bytes_);
    RANGEKV_ASSIGN_OR_RETURN(pool_, dev.AllocateDevice(pool_bytes));
    if (reinterpret_cast<uintptr_t>(pool_.data()) % alignment_bytes_ != 0 && host_accessible_) {
      return Internal("per-object store: device pool is not aligned for O_DIRECT");
    }
    if (!host_accessible_) {
      RANGEKV_ASSIGN_OR_RETURN(staging_, dev.AllocatePinnedHost(pool_bytes));
    }
    pool_alloc_ = std::make_unique<PayloadPool>(pool_bytes, alignment_bytes_);
    RANGEKV_ASSIGN_OR_RETURN(slots_, dev.AllocateDevice(o.max_tokens * sizeof(int64_t)));
    RANGEKV_ASSIGN_OR_RETURN(stream_, dev.CreateStream());

    IoEngineOptions io;
    io.workers = o.io_workers;
    // The stock executor queue is unbounded; here it is bounded by one call's objects, so a
    // submission never waits for an earlier one (the stock path does not either).
    io.max_queued_batches = static_cast<uint32_t>(std::min<uint64_t>(o.max_objects, 1u << 30));
    RANGEKV_ASSIGN_OR_RETURN(io_, MakeIoEngine(o.io_engine, io));
    if (io_->caps().registered_buffers) {
      std::vector<IoBuffer> buffers;
      uint8_t* base = host_io_base();
      for (uint64_t off = 0; off < pool_bytes; off += kGiB) {
        buffers.push_back({base + off, std::min<uint64_t>(kGiB, pool_bytes - off)});
      }
      Status s = io_->RegisterBuffers(buffers);
      if (!s.ok())
        Log(LogLevel::kInfo, "per-object store: buffers not registered: " + s.ToString());
      File* files[] = {file_.get()};
      s = io_->RegisterFiles(files);
      if (!s.ok()) Log(LogLevel::kInfo, "per-object store: file not registered: " + s.ToString());
    }
    return OkStatus();
  }

  // Memory the I/O engine reads into and writes from.
  uint8_t* host_io_base() const { return host_accessible_ ? pool_.bytes() : staging_.data(); }

  Status ValidateCall(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
                      const PagedKvLayers& kv) const {
    const Geometry& g = options_.geometry;
    if (kv.layers.size() != g.layers) {
      return InvalidArgument("per-object: " + std::to_string(kv.layers.size()) +
                             " layer views for a " + std::to_string(g.layers) + "-layer geometry");
    }
    if (naming.layers != g.layers || naming.heads * naming.head_row_bytes != g.token_bytes) {
      return InvalidArgument("per-object: naming of another geometry");
    }
    const uint64_t end = naming.first_token + naming.tokens;
    if (path_tokens.size() < end || kv.slot_mapping.size() < end) {
      return InvalidArgument("per-object: token path or slot mapping shorter than the named range");
    }
    if (end > options_.max_tokens) {
      return InvalidArgument("per-object: " + std::to_string(end) + " tokens exceed max_tokens");
    }
    if (naming.count() > options_.max_objects) {
      return InvalidArgument("per-object: " + std::to_string(naming.count()) +
                             " objects exceed max_objects");
    }
    for (const kernels::PagedKvView& v : kv.layers) {
      if (v.num_heads != naming.heads || v.token_bytes() != g.token_bytes) {
        return InvalidArgument("per-object: a layer view disagrees with the geometry");
      }
    }
    return OkStatus();
  }

  // The hash chain over the token prefix: one value per chunk of `naming`.
  std::vector<uint64_t> ChainHashes(std::span<const int32_t> path_tokens,
                                    const ObjectNaming& naming) const {
    std::vector<uint64_t> out(naming.chunks);
    uint64_t h = Hash64(options_.model_name.data(), options_.model_name.size());
    if (naming.first_token > 0) {
      h = Hash64(path_tokens.data(), naming.first_token * sizeof(int32_t), h);
    }
    for (uint32_t c = 0; c < naming.chunks; ++c) {
      const uint64_t b = naming.ChunkBegin(c);
      const uint64_t e = naming.ChunkEnd(c);
      h = Hash64(path_tokens.data() + b, (e - b) * sizeof(int32_t), h);
      out[c] = h;
    }
    return out;
  }

  ObjectKey MakeKey(const ObjectNaming& naming, const LogicalObject& o, uint64_t chunk_hash) {
    ObjectKey k;
    k.model_name = options_.model_name;
    k.world_size = naming.slices;
    k.worker_id = o.slice;
    k.chunk_hash = chunk_hash;
    k.dtype = options_.kv_dtype;
    k.layer = naming.shape == ObjectShape::kChunk ? -1 : static_cast<int32_t>(o.layer_begin);
    stats_.keys_built.fetch_add(1, std::memory_order_relaxed);
    return k;
  }

  Status CopySlots(const PagedKvLayers& kv, const ObjectNaming& naming) {
    const uint64_t n = naming.first_token + naming.tokens;
    return stream_->CopyHostToDevice(slots_.data(), kv.slot_mapping.data(), n * sizeof(int64_t));
  }

  const int64_t* device_slots() const { return static_cast<const int64_t*>(slots_.data()); }

  PerObjectStoreReport Put(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
                           const PagedKvLayers& source) {
    PerObjectStoreReport report;
    const PerObjectStats before = Snapshot();
    const uint64_t t0 = SteadyNs();
    report.status = DoPut(path_tokens, naming, source, &report.objects);
    report.elapsed_ns = SteadyNs() - t0;
    report.work = Snapshot() - before;
    return report;
  }

  Status DoPut(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
               const PagedKvLayers& source, uint64_t* stored) {
    RANGEKV_RETURN_IF_ERROR(ValidateCall(path_tokens, naming, source));
    const std::vector<uint64_t> chain = ChainHashes(path_tokens, naming);
    RANGEKV_RETURN_IF_ERROR(CopySlots(source, naming));

    struct Pending {
      ObjectKey key;
      uint64_t bytes = 0;
      uint64_t pool_offset = 0;
      uint64_t file_offset = 0;
      std::unique_ptr<IoBatch> batch;
    };
    std::vector<Pending> pending;
    pending.reserve(naming.count());
    Status status;
    // Extraction: per object a contains check, an allocation and one multi-layer transfer.
    for (uint64_t i = 0; i < naming.count() && status.ok(); ++i) {
      const LogicalObject o = naming.Object(i);
      ObjectKey key = MakeKey(naming, o, chain[o.chunk]);
      {
        MutexLock lock(index_mu_);
        stats_.index_probes.fetch_add(1, std::memory_order_relaxed);
        if (index_.count(key) != 0) continue;
      }
      const uint64_t bytes = naming.ObjectBytes(o);
      Result<uint64_t> off = pool_alloc_->Allocate(bytes);
      if (!off.ok()) {
        status = off.status();
        break;
      }
      stats_.payload_allocations.fetch_add(1, std::memory_order_relaxed);
      pending.push_back({std::move(key), bytes, *off, 0, nullptr});
      status = LaunchGather(naming, o, source, *off, bytes);
    }
    if (Status s = stream_->Synchronize(); status.ok()) status = s;
    // Submission: per object one file region and one write on its own.
    if (status.ok()) {
      for (Pending& p : pending) {
        const uint64_t length = AlignUp(p.bytes, alignment_bytes_);
        {
          MutexLock lock(file_mu_);
          if (file_next_ + length > options_.file_bytes) {
            status = ResourceExhausted("per-object data file is full");
            break;
          }
          p.file_offset = file_next_;
          file_next_ += length;
        }
        p.batch = std::make_unique<IoBatch>(1);
        status = p.batch->Add(
            {file_.get(), p.file_offset, host_io_base() + p.pool_offset, length, IoOp::kWrite});
        if (status.ok()) status = io_->Submit(*p.batch);
        if (!status.ok()) {
          p.batch.reset();
          break;
        }
        stats_.native_writes.fetch_add(1, std::memory_order_relaxed);
      }
    }
    // Completion: per object, after its write returned, one index record.
    for (Pending& p : pending) {
      if (p.batch != nullptr) {
        p.batch->Wait();
        Status s = p.batch->status();
        stats_.bytes_written.fetch_add(p.batch->bytes_moved(), std::memory_order_relaxed);
        if (s.ok()) {
          MutexLock lock(index_mu_);
          index_.emplace(std::move(p.key), ObjectRecord{p.file_offset, p.bytes});
          stats_.index_records.fetch_add(1, std::memory_order_relaxed);
          ++*stored;
        } else if (status.ok()) {
          status = s;
        }
      }
      pool_alloc_->Free(p.pool_offset, p.bytes);
    }
    return status;
  }

  Status LaunchGather(const ObjectNaming& naming, const LogicalObject& o,
                      const PagedKvLayers& source, uint64_t pool_offset, uint64_t bytes) {
    const uint64_t layer_bytes = o.tokens() * o.heads() * naming.head_row_bytes;
    for (uint32_t l0 = o.layer_begin; l0 < o.layer_end; l0 += kernels::kMaxGatherLayers) {
      const uint32_t n = std::min(kernels::kMaxGatherLayers, o.layer_end - l0);
      kernels::GatherArgs a;
      for (uint32_t g = 0; g < n; ++g) {
        a.src[g] = HeadSlice(source.layers[l0 + g], o.head_begin, o.heads());
      }
      a.num_layers = n;
      a.slots = device_slots() + o.token_begin;
      a.num_tokens = static_cast<uint32_t>(o.tokens());
      a.out = pool_.bytes() + pool_offset + uint64_t{l0 - o.layer_begin} * layer_bytes;
      a.out_layer_stride_bytes = layer_bytes;
      RANGEKV_RETURN_IF_ERROR(stream_->Gather(a));
      stats_.kernel_launches.fetch_add(1, std::memory_order_relaxed);
    }
    stats_.gather_launches.fetch_add(1, std::memory_order_relaxed);
    if (!host_accessible_) {
      RANGEKV_RETURN_IF_ERROR(stream_->CopyDeviceToHost(staging_.data() + pool_offset,
                                                        pool_.bytes() + pool_offset, bytes));
    }
    return OkStatus();
  }

  Status LaunchScatter(const ObjectNaming& naming, const LogicalObject& o,
                       const PagedKvLayers& target, uint64_t pool_offset, uint64_t bytes) {
    if (!host_accessible_) {
      RANGEKV_RETURN_IF_ERROR(stream_->CopyHostToDevice(pool_.bytes() + pool_offset,
                                                        staging_.data() + pool_offset, bytes));
      stats_.h2d_copies.fetch_add(1, std::memory_order_relaxed);
    }
    const uint64_t layer_bytes = o.tokens() * o.heads() * naming.head_row_bytes;
    for (uint32_t l = o.layer_begin; l < o.layer_end; ++l) {
      kernels::ScatterArgs a;
      a.dst = HeadSlice(target.layers[l], o.head_begin, o.heads());
      a.stripe = pool_.bytes() + pool_offset + uint64_t{l - o.layer_begin} * layer_bytes;
      a.slots = device_slots() + o.token_begin;
      a.num_tokens = static_cast<uint32_t>(o.tokens());
      RANGEKV_RETURN_IF_ERROR(stream_->Scatter(a));
      stats_.kernel_launches.fetch_add(1, std::memory_order_relaxed);
    }
    stats_.scatter_launches.fetch_add(1, std::memory_order_relaxed);
    return OkStatus();
  }

  PerObjectRestoreReport Get(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
                             const PagedKvLayers& target) {
    PerObjectRestoreReport report;
    const PerObjectStats before = Snapshot();
    const uint64_t t0 = SteadyNs();
    std::vector<std::atomic<uint64_t>> marks(naming.layers);
    report.status = DoGet(path_tokens, naming, target, marks, &report.objects);
    if (report.status.ok()) {
      const uint64_t first = marks[0].load();
      uint64_t last = first;
      for (const auto& m : marks) last = std::max(last, m.load());
      report.first_layer_ready_ns = first - t0;
      report.last_layer_ready_ns = last - t0;
    }
    report.work = Snapshot() - before;
    return report;
  }

  Status DoGet(std::span<const int32_t> path_tokens, const ObjectNaming& naming,
               const PagedKvLayers& target, std::vector<std::atomic<uint64_t>>& marks,
               uint64_t* restored) {
    RANGEKV_RETURN_IF_ERROR(ValidateCall(path_tokens, naming, target));
    const std::vector<uint64_t> chain = ChainHashes(path_tokens, naming);

    struct Pending {
      LogicalObject object;
      ObjectRecord record;
      uint64_t pool_offset = 0;
      std::unique_ptr<IoBatch> batch;
    };
    const uint64_t count = naming.count();
    std::vector<Pending> pending;
    pending.reserve(count);
    Status status;
    // Per object: key, probe, allocation.
    for (uint64_t i = 0; i < count; ++i) {
      const LogicalObject o = naming.Object(i);
      const ObjectKey key = MakeKey(naming, o, chain[o.chunk]);
      ObjectRecord record;
      {
        MutexLock lock(index_mu_);
        stats_.index_probes.fetch_add(1, std::memory_order_relaxed);
        auto it = index_.find(key);
        if (it == index_.end()) {
          status = NotFound("per-object: object " + std::to_string(i) + " (chunk " +
                            std::to_string(o.chunk) + ", layer " + std::to_string(o.layer_begin) +
                            ") is not stored");
          break;
        }
        record = it->second;
      }
      stats_.records_selected.fetch_add(1, std::memory_order_relaxed);
      Result<uint64_t> off = pool_alloc_->Allocate(record.bytes);
      if (!off.ok()) {
        status = off.status();
        break;
      }
      stats_.payload_allocations.fetch_add(1, std::memory_order_relaxed);
      pending.push_back({o, record, *off, nullptr});
    }
    // Per object: one object-sized read, each submitted on its own.
    if (status.ok()) {
      for (Pending& p : pending) {
        p.batch = std::make_unique<IoBatch>(1);
        status = p.batch->Add({file_.get(), p.record.file_offset, host_io_base() + p.pool_offset,
                               AlignUp(p.record.bytes, alignment_bytes_), IoOp::kRead});
        if (status.ok()) status = io_->Submit(*p.batch);
        if (!status.ok()) {
          p.batch.reset();
          break;
        }
        stats_.native_reads.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (status.ok()) status = CopySlots(target, naming);
    // Delivery: plain objects after the last read returned; layerwise objects per layer.
    const bool layerwise = naming.shape != ObjectShape::kChunk;
    const uint64_t per_layer = layerwise ? count / naming.layers : count;
    for (uint64_t begin = 0; begin < pending.size(); begin += per_layer) {
      const uint64_t end = std::min<uint64_t>(begin + per_layer, pending.size());
      for (uint64_t i = begin; i < end; ++i) {
        Pending& p = pending[i];
        if (p.batch == nullptr) continue;
        p.batch->Wait();
        stats_.bytes_read.fetch_add(p.batch->bytes_moved(), std::memory_order_relaxed);
        if (Status s = p.batch->status(); !s.ok() && status.ok()) status = s;
      }
      if (!status.ok()) continue;  // drain the remaining reads, deliver nothing more
      for (uint64_t i = begin; i < end && status.ok(); ++i) {
        Pending& p = pending[i];
        status = LaunchScatter(naming, p.object, target, p.pool_offset, p.record.bytes);
        if (status.ok()) ++*restored;
      }
      if (!status.ok()) continue;
      if (layerwise) {
        const uint32_t layer = pending[begin].object.layer_begin;
        status = stream_->AddHostCallback(&MarkNow, &marks[layer]);
      } else {
        for (auto& m : marks) status = stream_->AddHostCallback(&MarkNow, &m);
      }
      stats_.ready_events.fetch_add(1, std::memory_order_relaxed);
    }
    if (Status s = stream_->Synchronize(); status.ok()) status = s;
    for (Pending& p : pending) {
      if (p.batch != nullptr && !p.batch->done()) p.batch->Wait();
      pool_alloc_->Free(p.pool_offset, p.record.bytes);
    }
    return status;
  }

  void Clear() {
    MutexLock lock(index_mu_);
    index_.clear();
    MutexLock file_lock(file_mu_);
    file_next_ = 0;
  }

  PerObjectStats Snapshot() const {
    PerObjectStats s;
#define RANGEKV_PER_OBJECT_LOAD_(name, doc) s.name = stats_.name.load(std::memory_order_relaxed);
    RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PER_OBJECT_LOAD_)
#undef RANGEKV_PER_OBJECT_LOAD_
    return s;
  }

  bool direct_io() const { return file_->direct(); }
  uint64_t alignment_bytes() const { return alignment_bytes_; }

  std::string Describe() const {
    return std::string(io_->name()) + " x" + std::to_string(options_.io_workers) + ", " +
           (file_->direct() ? "O_DIRECT" : "buffered") + ", device " +
           std::string(DeviceKindName(options_.device->capabilities().kind)) +
           (host_accessible_ ? "" : " (pinned staging)");
  }

 private:
  struct AtomicStats {
#define RANGEKV_PER_OBJECT_ATOMIC_(name, doc) std::atomic<uint64_t> name{0};
    RANGEKV_PER_OBJECT_STATS_FIELDS(RANGEKV_PER_OBJECT_ATOMIC_)
#undef RANGEKV_PER_OBJECT_ATOMIC_
  };

  const PerObjectOptions options_;
  Env* env_ = nullptr;
  std::string path_;
  std::unique_ptr<File> file_;
  uint64_t alignment_bytes_ = kIoAlignment;
  bool host_accessible_ = false;
  DeviceBuffer pool_;
  PinnedHostBuffer staging_;
  DeviceBuffer slots_;
  std::unique_ptr<PayloadPool> pool_alloc_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<IoEngine> io_;

  Mutex index_mu_;
  std::unordered_map<ObjectKey, ObjectRecord, ObjectKeyHash> index_ GUARDED_BY(index_mu_);
  Mutex file_mu_;
  uint64_t file_next_ GUARDED_BY(file_mu_) = 0;
  AtomicStats stats_;
};

PerObjectStore::PerObjectStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PerObjectStore::~PerObjectStore() = default;

Result<std::unique_ptr<PerObjectStore>> PerObjectStore::Open(const PerObjectOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  RANGEKV_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<PerObjectStore>(new PerObjectStore(std::move(impl)));
}

uint64_t PerObjectStore::FootprintBytes(const ObjectNaming& naming, uint64_t alignment_bytes) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < naming.count(); ++i) {
    total += AlignUp(naming.ObjectBytes(naming.Object(i)), alignment_bytes);
  }
  return total;
}

PerObjectStoreReport PerObjectStore::Put(std::span<const int32_t> path_tokens,
                                         const ObjectNaming& naming, const PagedKvLayers& source) {
  return impl_->Put(path_tokens, naming, source);
}

PerObjectRestoreReport PerObjectStore::Get(std::span<const int32_t> path_tokens,
                                           const ObjectNaming& naming,
                                           const PagedKvLayers& target) {
  return impl_->Get(path_tokens, naming, target);
}

void PerObjectStore::Clear() { impl_->Clear(); }
PerObjectStats PerObjectStore::GetStats() const { return impl_->Snapshot(); }
bool PerObjectStore::direct_io() const { return impl_->direct_io(); }
uint64_t PerObjectStore::alignment_bytes() const { return impl_->alignment_bytes(); }
std::string PerObjectStore::Describe() const { return impl_->Describe(); }

}  // namespace rangekv::baseline
