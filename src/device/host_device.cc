#include "device/host_device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/cpus.h"
#include "base/host_memory.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "base/units.h"
#include "kernels/reference.h"

namespace rangekv {
namespace {

using Clock = std::chrono::steady_clock;

// Cyclic >=, as cuStreamWaitValue32's GEQ.
bool FlagReached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

struct StreamState;

struct EventState {
  Mutex mu;
  std::shared_ptr<StreamState> stream GUARDED_BY(mu);  // null: never recorded
  uint64_t target GUARDED_BY(mu) = 0;                  // complete when stream->completed >= target
  // Timing: the generation of the latest Record and the stamp written by its marker op.
  uint64_t record_generation GUARDED_BY(mu) = 0;
  uint64_t stamp_generation GUARDED_BY(mu) = 0;
  Clock::time_point stamp GUARDED_BY(mu);
  std::atomic<uint64_t> next_generation{0};
};

class HostFlag final : public DeviceFlag {
 public:
  explicit HostFlag(const Device* device) : DeviceFlag(device) {}

  void Set(uint32_t value) override {
    MutexLock l(mu_);
    value_ = value;
    changed_.NotifyAll();
  }
  uint32_t Get() const override {
    MutexLock l(mu_);
    return value_;
  }
  // Blocks until the value reaches `target` (cyclic >=).
  void WaitFor(uint32_t target) const {
    MutexLock l(mu_);
    while (!FlagReached(value_, target)) changed_.Wait(l);
  }

 private:
  mutable Mutex mu_;
  mutable CondVar changed_;
  uint32_t value_ GUARDED_BY(mu_) = 0;
};

// A fork-join task: `chunks` independent pieces of one stream operation. Lives on the stack of
// the stream worker that runs the operation, which waits until every piece is done before the
// task goes out of scope (so a pool thread that claimed a piece can still touch it).
struct ParallelTask {
  void (*run)(const void* ctx, uint32_t chunk) = nullptr;
  const void* ctx = nullptr;
  uint32_t chunks = 0;
  // Guarded by the pool's mutex.
  uint32_t next_chunk = 0;
  uint32_t done_chunks = 0;
  bool queued = false;
  ParallelTask* next = nullptr;  // the pool's queue (intrusive: queueing allocates nothing)
};

// The fixed worker pool HostDevice's streams split their data operations over. Threads take
// one chunk at a time from the task at the queue's head and then move that task to the tail,
// so concurrent operations of different streams are served round-robin, chunk by chunk. The
// submitting stream worker claims chunks of its own task too, so a task progresses even when
// every pool thread is busy elsewhere (no deadlock, whatever the number of streams).
class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads) {
    threads_.reserve(threads);
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkerPool() {
    {
      MutexLock l(mu_);
      stop_ = true;
      work_.NotifyAll();
    }
    for (std::thread& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  uint32_t threads() const { return static_cast<uint32_t>(threads_.size()); }

  // Runs every chunk of `task` (on the pool and the calling thread) and returns when all are
  // done.
  void Run(ParallelTask& task) EXCLUDES(mu_) {
    if (task.chunks == 0) return;
    if (task.chunks == 1 || threads_.empty()) {
      for (uint32_t c = 0; c < task.chunks; ++c) task.run(task.ctx, c);
      return;
    }
    {
      MutexLock l(mu_);
      Push(&task);
      if (task.chunks - 1 >= threads_.size()) {
        work_.NotifyAll();
      } else {
        for (uint32_t i = 0; i + 1 < task.chunks; ++i) work_.NotifyOne();
      }
    }
    for (;;) {
      uint32_t chunk;
      {
        MutexLock l(mu_);
        if (task.next_chunk == task.chunks) {
          while (task.done_chunks < task.chunks) done_.Wait(l);
          return;
        }
        chunk = task.next_chunk++;
        if (task.next_chunk == task.chunks) Unlink(&task);  // pool threads find only work left
      }
      task.run(task.ctx, chunk);
      MutexLock l(mu_);
      ++task.done_chunks;
    }
  }

 private:
  void Loop() EXCLUDES(mu_) {
    for (;;) {
      ParallelTask* task;
      uint32_t chunk;
      {
        MutexLock l(mu_);
        while (head_ == nullptr && !stop_) work_.Wait(l);
        if (head_ == nullptr) return;
        task = head_;  // a queued task always has a chunk left
        chunk = task->next_chunk++;
        // Round-robin: the task goes to the back while it has chunks left, or leaves.
        Unlink(task);
        if (task->next_chunk < task->chunks) Push(task);
      }
      task->run(task->ctx, chunk);
      MutexLock l(mu_);
      if (++task->done_chunks == task->chunks) done_.NotifyAll();
    }
  }

  void Push(ParallelTask* task) REQUIRES(mu_) {
    task->next = nullptr;
    task->queued = true;
    if (tail_ == nullptr) {
      head_ = tail_ = task;
    } else {
      tail_->next = task;
      tail_ = task;
    }
  }
  void Unlink(ParallelTask* task) REQUIRES(mu_) {
    if (!task->queued) return;
    ParallelTask* prev = nullptr;
    for (ParallelTask* t = head_; t != task; t = t->next) prev = t;
    (prev == nullptr ? head_ : prev->next) = task->next;
    if (tail_ == task) tail_ = prev;
    task->next = nullptr;
    task->queued = false;
  }

  Mutex mu_;
  CondVar work_;  // pool threads: a task was queued, or stop
  CondVar done_;  // submitters: a chunk of some task completed
  ParallelTask* head_ GUARDED_BY(mu_) = nullptr;
  ParallelTask* tail_ GUARDED_BY(mu_) = nullptr;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// How a data operation is split: chunks of about `split_bytes`, on `pool` (null: no pool).
struct Splitter {
  WorkerPool* pool = nullptr;
  uint64_t split_bytes = uint64_t{1} << 20;

  static uint32_t ChunkCount(uint64_t units, uint64_t units_per_chunk) {
    return static_cast<uint32_t>((units + units_per_chunk - 1) / units_per_chunk);
  }

  void Copy(void* dst, const void* src, uint64_t bytes) const {
    struct Ctx {
      uint8_t* dst;
      const uint8_t* src;
      uint64_t bytes, chunk;
    } ctx{static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes, ChunkBytes()};
    Run(ChunkCount(bytes, ctx.chunk), &ctx, [](const void* p, uint32_t c) {
      const Ctx& x = *static_cast<const Ctx*>(p);
      const uint64_t off = uint64_t{c} * x.chunk;
      std::memcpy(x.dst + off, x.src + off, std::min(x.chunk, x.bytes - off));
    });
  }

  void Fill(void* dst, uint8_t value, uint64_t bytes) const {
    struct Ctx {
      uint8_t* dst;
      uint8_t value;
      uint64_t bytes, chunk;
    } ctx{static_cast<uint8_t*>(dst), value, bytes, ChunkBytes()};
    Run(ChunkCount(bytes, ctx.chunk), &ctx, [](const void* p, uint32_t c) {
      const Ctx& x = *static_cast<const Ctx*>(p);
      const uint64_t off = uint64_t{c} * x.chunk;
      std::memset(x.dst + off, x.value, std::min(x.chunk, x.bytes - off));
    });
  }

  // Token ranges: a slot mapping has no duplicates (ValidateSlotMapping), so ranges of tokens
  // write disjoint bytes.
  void Scatter(const kernels::ScatterArgs& args) const {
    // The gate is read when the scatter executes: in stream order, after the digest that set it.
    if (args.skip_if_set != nullptr && *args.skip_if_set != 0) return;
    struct Ctx {
      const kernels::ScatterArgs* args;
      uint32_t tokens_per_chunk;
    } ctx{&args, TokensPerChunk(args.dst.token_bytes())};
    Run(ChunkCount(args.num_tokens, ctx.tokens_per_chunk), &ctx, [](const void* p, uint32_t c) {
      const Ctx& x = *static_cast<const Ctx*>(p);
      const uint32_t begin = c * x.tokens_per_chunk;
      kernels::ScatterReference(*x.args, begin,
                                std::min(x.args->num_tokens, begin + x.tokens_per_chunk));
    });
  }

  void Gather(const kernels::GatherArgs& args) const {
    uint64_t row_bytes = 0;
    for (uint32_t g = 0; g < args.num_layers; ++g) row_bytes += args.src[g].token_bytes();
    struct Ctx {
      const kernels::GatherArgs* args;
      uint32_t tokens_per_chunk;
    } ctx{&args, TokensPerChunk(row_bytes)};
    Run(ChunkCount(args.num_tokens, ctx.tokens_per_chunk), &ctx, [](const void* p, uint32_t c) {
      const Ctx& x = *static_cast<const Ctx*>(p);
      const uint32_t begin = c * x.tokens_per_chunk;
      kernels::GatherReference(*x.args, begin,
                               std::min(x.args->num_tokens, begin + x.tokens_per_chunk));
    });
  }

  // One chunk per digest span (about 1 MiB, the digest block). Where the CPU and the view allow
  // it (kernels::ScatterDigestReference) the span's rows are copied and digested in one pass
  // from the same registers, and the bytes outside the scatter's rows (a verify extent reaches
  // whole blocks) are digested alone; so the stripe is read from memory once and the digest's
  // arithmetic runs under the copy's memory traffic. A span that then fails has had its rows
  // written with the bytes read for it; its verdict is set in this same operation, so the stripe
  // fails before its layer can count as restored (span_digest.h, VerifiedScatterArgs).
  // Elsewhere the span is digested first and its rows copied only if it matched, while it is
  // still in this core's cache.
  void VerifiedScatter(const kernels::VerifiedScatterArgs& args) const {
    Run(args.digest.num_spans, &args, [](const void* p, uint32_t k) {
      const kernels::VerifiedScatterArgs& a = *static_cast<const kernels::VerifiedScatterArgs*>(p);
      const kernels::DigestSpan& s = a.digest.spans[k];
      const uint64_t seed = a.digest.seed;
      uint32_t begin = 0, end = 0;
      kernels::VerifiedSpanRows(a, k, &begin, &end);
      const uint64_t row = a.scatter.dst.token_bytes();
      const uint8_t* rows = a.scatter.stripe + uint64_t{begin} * row;
      const uint8_t* rows_end = a.scatter.stripe + uint64_t{end} * row;
      const uint8_t* span_end = s.data + s.bytes;
      uint64_t sum = 0;
      const bool fused =
          begin < end && kernels::ScatterDigestReference(a.scatter, begin, end, s.data, seed, &sum);
      if (fused) {
        sum += kernels::SpanDigestWordSum(s.data, static_cast<uint64_t>(rows - s.data), 0, seed);
        sum += kernels::SpanDigestWordSum(rows_end, static_cast<uint64_t>(span_end - rows_end),
                                          static_cast<uint64_t>(rows_end - s.data) / 8, seed);
      } else {
        sum = kernels::SpanDigestWordSum(s.data, s.bytes, 0, seed);
      }
      const uint64_t digest = kernels::DigestLengthTerm(s.bytes, seed) + sum;
      a.digest.digests[k] = digest;
      if (digest != a.digest.expected[k]) {
        std::atomic_ref<uint32_t>(*a.digest.mismatch).store(1, std::memory_order_relaxed);
        return;
      }
      if (!fused && begin < end) kernels::ScatterReference(a.scatter, begin, end);
    });
  }

  // Where the digest spans tile the gather's output (each span whole rows of one layer's region;
  // per layer, the spans cover its rows [0, num_tokens) exactly once), one chunk per span gathers
  // its rows and digests them from the registers that write them
  // (kernels::GatherDigestReference), so a store's bank is not read back for its digests;
  // otherwise Gather, then Digest.
  void GatherDigest(const kernels::DigestedGatherArgs& args) const {
    struct Ctx {
      const kernels::DigestedGatherArgs* args;
      uint32_t layer[kernels::kMaxDigestSpans];
      uint32_t begin[kernels::kMaxDigestSpans];
      uint32_t end[kernels::kMaxDigestSpans];
    } ctx;
    ctx.args = &args;
    if (!TileGatherOutput(args, ctx.layer, ctx.begin, ctx.end)) {
      Gather(args.gather);
      Digest(args.digest);
      return;
    }
    Run(args.digest.num_spans, &ctx, [](const void* p, uint32_t k) {
      const Ctx& x = *static_cast<const Ctx*>(p);
      const kernels::GatherArgs& g = x.args->gather;
      const kernels::DigestSpan& span = x.args->digest.spans[k];
      const uint64_t seed = x.args->digest.seed;
      uint64_t sum = 0;
      if (!kernels::GatherDigestReference(g, x.layer[k], x.begin[k], x.end[k], span.data, seed,
                                          &sum)) {
        kernels::GatherArgs one;  // the span's layer alone
        one.src[0] = g.src[x.layer[k]];
        one.num_layers = 1;
        one.slots = g.slots;
        one.num_tokens = g.num_tokens;
        one.out = g.out + uint64_t{x.layer[k]} * g.out_layer_stride_bytes;
        kernels::GatherReference(one, x.begin[k], x.end[k]);
        sum = kernels::SpanDigestWordSum(span.data, span.bytes, 0, seed);
      }
      x.args->digest.digests[k] = kernels::DigestLengthTerm(span.bytes, seed) + sum;
    });
  }

  // Every span is cut into word-aligned parts whose word sums add up (span_digest.h).
  void Digest(const kernels::DigestArgs& args) const {
    struct Ctx {
      const kernels::DigestArgs* args;
      uint64_t chunk;
      uint32_t first_chunk[kernels::kMaxDigestSpans + 1];
      std::atomic<uint64_t> sums[kernels::kMaxDigestSpans];
    } ctx;
    ctx.args = &args;
    ctx.chunk = ChunkBytes();
    uint32_t chunks = 0;
    for (uint32_t i = 0; i < args.num_spans; ++i) {
      ctx.first_chunk[i] = chunks;
      chunks += std::max<uint32_t>(1, ChunkCount(args.spans[i].bytes, ctx.chunk));
      ctx.sums[i].store(0, std::memory_order_relaxed);
    }
    ctx.first_chunk[args.num_spans] = chunks;
    Run(chunks, &ctx, [](const void* p, uint32_t c) {
      Ctx& x = *const_cast<Ctx*>(static_cast<const Ctx*>(p));
      uint32_t span = 0;
      while (x.first_chunk[span + 1] <= c) ++span;
      const kernels::DigestSpan& s = x.args->spans[span];
      const uint64_t off = uint64_t{c - x.first_chunk[span]} * x.chunk;
      if (off >= s.bytes) return;  // the one chunk of an empty span
      const uint64_t sum = kernels::SpanDigestWordSum(
          s.data + off, std::min(x.chunk, s.bytes - off), off / 8, x.args->seed);
      x.sums[span].fetch_add(sum, std::memory_order_relaxed);  // mod 2^64, in any order
    });
    for (uint32_t i = 0; i < args.num_spans; ++i) {
      args.digests[i] = kernels::DigestLengthTerm(args.spans[i].bytes, args.seed) +
                        ctx.sums[i].load(std::memory_order_relaxed);
      if (args.expected != nullptr && args.digests[i] != args.expected[i]) *args.mismatch = 1;
    }
  }

 private:
  // Span k of args.digest as rows [begin[k], end[k]) of layer layer[k] of the gather's output;
  // false unless every span is whole rows inside one layer's rows [0, num_tokens) and, layer by
  // layer, the spans cover those rows exactly once. With opaque blocks a span must also be whole
  // block groups: a group moves whole, so a span that cut one would have rows written by the
  // chunk of another span, perhaps after this one digested them.
  static bool TileGatherOutput(const kernels::DigestedGatherArgs& args, uint32_t* layer,
                               uint32_t* begin, uint32_t* end) {
    const kernels::GatherArgs& g = args.gather;
    const uint64_t row = g.src[0].token_bytes();
    const uint64_t rows_bytes = uint64_t{g.num_tokens} * row;
    const uint64_t stride = g.num_layers > 1 ? g.out_layer_stride_bytes : rows_bytes;
    uint64_t covered[kernels::kMaxGatherLayers] = {};
    for (uint32_t k = 0; k < args.digest.num_spans; ++k) {
      const kernels::DigestSpan& span = args.digest.spans[k];
      if (span.data < g.out || row == 0 || stride == 0) return false;
      const uint64_t offset = static_cast<uint64_t>(span.data - g.out);
      const uint64_t l = offset / stride, within = offset % stride;
      if (l >= g.num_layers || within % row != 0 || span.bytes % row != 0 || span.bytes == 0 ||
          within + span.bytes > rows_bytes) {
        return false;
      }
      layer[k] = static_cast<uint32_t>(l);
      begin[k] = static_cast<uint32_t>(within / row);
      end[k] = static_cast<uint32_t>((within + span.bytes) / row);
      const uint32_t group = g.src[0].opaque_blocks != 0 ? g.src[0].block_size : 1;
      if (begin[k] % group != 0 || end[k] % group != 0) return false;
      for (uint32_t j = 0; j < k; ++j) {  // no two spans of a layer overlap
        if (layer[j] == layer[k] && begin[j] < end[k] && begin[k] < end[j]) return false;
      }
      covered[l] += end[k] - begin[k];
    }
    for (uint32_t l = 0; l < g.num_layers; ++l) {
      if (covered[l] != g.num_tokens) return false;
    }
    return true;
  }

  // A multiple of 64 bytes (whole words and cache lines).
  uint64_t ChunkBytes() const { return std::max<uint64_t>(64, split_bytes / 64 * 64); }
  uint32_t TokensPerChunk(uint64_t row_bytes) const {
    const uint64_t t = split_bytes / std::max<uint64_t>(1, row_bytes);
    return static_cast<uint32_t>(std::clamp<uint64_t>(t, 1, UINT32_MAX));
  }
  void Run(uint32_t chunks, const void* ctx, void (*run)(const void*, uint32_t)) const {
    ParallelTask task;
    task.run = run;
    task.ctx = ctx;
    task.chunks = chunks;
    if (pool == nullptr) {
      for (uint32_t c = 0; c < chunks; ++c) run(ctx, c);
    } else {
      pool->Run(task);
    }
  }
};

enum class OpKind : uint8_t {
  kCopy,
  kFill,
  kHostFn,
  kWaitStream,
  kWaitFlag,
  kWriteFlag,
  kStamp,
  kScatter,
  kGather,
  kDigest,
  kVerifiedScatter,
  kGatherDigest,
};

// One queued operation; only the fields of its kind are meaningful.
struct Op {
  OpKind kind = OpKind::kCopy;
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
  uint8_t fill = 0;
  HostFn fn = nullptr;
  void* arg = nullptr;
  std::shared_ptr<StreamState> wait_stream;
  uint64_t wait_target = 0;
  HostFlag* flag = nullptr;
  uint32_t flag_value = 0;
  std::shared_ptr<EventState> event;
  uint64_t generation = 0;
  std::variant<std::monostate, kernels::ScatterArgs, kernels::GatherArgs, kernels::DigestArgs,
               kernels::VerifiedScatterArgs, kernels::DigestedGatherArgs>
      kernel;
};

// The queue and progress of one stream. Shared with events recorded on the stream and with
// waits enqueued on other streams, which may outlive the Stream object.
struct StreamState {
  explicit StreamState(uint32_t capacity) : ring(capacity) {}

  Mutex mu;
  CondVar work_available;   // the worker waits: ops queued or shutdown
  CondVar space_available;  // enqueuers wait: the ring has room
  CondVar progress;         // completion waiters: `completed` advanced
  std::vector<Op> ring GUARDED_BY(mu);
  uint32_t head GUARDED_BY(mu) = 0;
  uint32_t count GUARDED_BY(mu) = 0;
  uint64_t enqueued GUARDED_BY(mu) = 0;   // ops ever enqueued
  uint64_t completed GUARDED_BY(mu) = 0;  // ops ever completed; always a prefix of enqueued
  bool shutdown GUARDED_BY(mu) = false;

  // Blocks until `target` ops have completed.
  void WaitCompleted(uint64_t target) {
    MutexLock l(mu);
    while (completed < target) progress.Wait(l);
  }
  bool IsCompleted(uint64_t target) {
    MutexLock l(mu);
    return completed >= target;
  }
};

class HostEvent final : public Event {
 public:
  HostEvent(const Device* device, const EventOptions& options)
      : Event(device), options_(options), state_(std::make_shared<EventState>()) {}

  Result<bool> Query() override {
    auto [stream, target] = Captured();
    return stream == nullptr || stream->IsCompleted(target);
  }
  Status Synchronize() override {
    auto [stream, target] = Captured();
    if (stream != nullptr) stream->WaitCompleted(target);
    return OkStatus();
  }
  void* native_handle() const override { return nullptr; }

  const EventOptions& options() const { return options_; }
  const std::shared_ptr<EventState>& state() const { return state_; }

  std::pair<std::shared_ptr<StreamState>, uint64_t> Captured() const {
    MutexLock l(state_->mu);
    return {state_->stream, state_->target};
  }

 private:
  const EventOptions options_;
  const std::shared_ptr<EventState> state_;
};

class HostStream final : public Stream {
 public:
  HostStream(const Device* device, uint32_t capacity, const HostDeviceOptions& options,
             uint64_t index, std::shared_ptr<WorkerPool> pool)
      : Stream(device),
        pool_(std::move(pool)),
        splitter_{pool_.get(), options.split_bytes},
        state_(std::make_shared<StreamState>(capacity)),
        capacity_(capacity),
        max_delay_us_(options.max_op_delay_us),
        jitter_seed_(options.jitter_seed ^ ((index + 1) * 0x9E3779B97F4A7C15ull)) {
    worker_ = std::thread([this] { Run(); });
  }

  ~HostStream() override {
    {
      MutexLock l(state_->mu);
      state_->shutdown = true;
      state_->work_available.NotifyAll();
    }
    worker_.join();  // the worker drains the queue before it exits
  }

  Status CopyHostToDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "host-to-device copy");
  }
  Status CopyDeviceToHost(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "device-to-host copy");
  }
  Status CopyDeviceToDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "device-to-device copy");
  }

  Status Fill(void* dst, uint8_t value, uint64_t bytes) override {
    if (bytes == 0) return OkStatus();
    if (dst == nullptr) return InvalidArgument("fill of a null pointer");
    Op op;
    op.kind = OpKind::kFill;
    op.dst = dst;
    op.bytes = bytes;
    op.fill = value;
    Enqueue(std::move(op));
    return OkStatus();
  }

  Status Record(Event& event) override {
    if (event.device() != device()) return InvalidArgument("event of another device");
    auto& e = static_cast<HostEvent&>(event);
    const std::shared_ptr<EventState>& es = e.state();
    uint64_t generation = 0;
    uint64_t target = 0;
    if (e.options().timing == EventTiming::kEnabled) {
      generation = es->next_generation.fetch_add(1) + 1;
      Op op;
      op.kind = OpKind::kStamp;
      op.event = es;
      op.generation = generation;
      target = Enqueue(std::move(op));
    } else {
      MutexLock l(state_->mu);
      target = state_->enqueued;
    }
    MutexLock l(es->mu);
    es->stream = state_;
    es->target = target;
    es->record_generation = generation;
    return OkStatus();
  }

  Status WaitEvent(const Event& event) override {
    if (event.device() != device()) return InvalidArgument("event of another device");
    auto [stream, target] = static_cast<const HostEvent&>(event).Captured();
    if (stream == nullptr || stream->IsCompleted(target)) return OkStatus();
    Op op;
    op.kind = OpKind::kWaitStream;
    op.wait_stream = std::move(stream);
    op.wait_target = target;
    Enqueue(std::move(op));
    return OkStatus();
  }

  Status AddHostCallback(HostFn fn, void* arg) override {
    if (fn == nullptr) return InvalidArgument("null host callback");
    Op op;
    op.kind = OpKind::kHostFn;
    op.fn = fn;
    op.arg = arg;
    Enqueue(std::move(op));
    return OkStatus();
  }

  Status WaitFlag(const DeviceFlag& flag, uint32_t value) override {
    if (flag.device() != device()) return InvalidArgument("flag of another device");
    Op op;
    op.kind = OpKind::kWaitFlag;
    op.flag = const_cast<HostFlag*>(static_cast<const HostFlag*>(&flag));
    op.flag_value = value;
    Enqueue(std::move(op));
    return OkStatus();
  }

  Status WriteFlag(DeviceFlag& flag, uint32_t value) override {
    if (flag.device() != device()) return InvalidArgument("flag of another device");
    Op op;
    op.kind = OpKind::kWriteFlag;
    op.flag = static_cast<HostFlag*>(&flag);
    op.flag_value = value;
    Enqueue(std::move(op));
    return OkStatus();
  }

  Status Scatter(const kernels::ScatterArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateScatterArgs(args));
    if (args.num_tokens == 0) return OkStatus();
    EnqueueKernel(OpKind::kScatter, args);
    return OkStatus();
  }

  Status Gather(const kernels::GatherArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateGatherArgs(args));
    if (args.num_tokens == 0) return OkStatus();
    EnqueueKernel(OpKind::kGather, args);
    return OkStatus();
  }

  Status Digest(const kernels::DigestArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateDigestArgs(args));
    EnqueueKernel(OpKind::kDigest, args);
    return OkStatus();
  }

  Status VerifiedScatter(const kernels::VerifiedScatterArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateVerifiedScatterArgs(args));
    EnqueueKernel(OpKind::kVerifiedScatter, args);
    return OkStatus();
  }

  Status GatherDigest(const kernels::DigestedGatherArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateDigestedGatherArgs(args));
    if (args.gather.num_tokens == 0) return Digest(args.digest);
    EnqueueKernel(OpKind::kGatherDigest, args);
    return OkStatus();
  }

  Status Synchronize() override {
    uint64_t target;
    {
      MutexLock l(state_->mu);
      target = state_->enqueued;
    }
    state_->WaitCompleted(target);
    return OkStatus();
  }

  void* native_handle() const override { return nullptr; }

 private:
  Status Copy(void* dst, const void* src, uint64_t bytes, const char* what) {
    if (bytes == 0) return OkStatus();
    if (dst == nullptr || src == nullptr) {
      return InvalidArgument(std::string(what) + " with a null pointer");
    }
    const auto d = reinterpret_cast<uintptr_t>(dst);
    const auto s = reinterpret_cast<uintptr_t>(src);
    if (d < s + bytes && s < d + bytes) {
      return InvalidArgument(std::string(what) + " between overlapping ranges");
    }
    Op op;
    op.kind = OpKind::kCopy;
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    Enqueue(std::move(op));
    return OkStatus();
  }

  // A kernel launch, its arguments already validated.
  template <class Args>
  void EnqueueKernel(OpKind kind, const Args& args) {
    Op op;
    op.kind = kind;
    op.kernel = args;
    Enqueue(std::move(op));
  }

  // Appends op (blocking while the ring is full) and returns its sequence number, which is the
  // value of `completed` once it has run.
  uint64_t Enqueue(Op op) {
    MutexLock l(state_->mu);
    while (state_->count == capacity_) state_->space_available.Wait(l);
    state_->ring[(state_->head + state_->count) % capacity_] = std::move(op);
    ++state_->count;
    const uint64_t seq = ++state_->enqueued;
    state_->work_available.NotifyOne();
    return seq;
  }

  void Run() {
    std::mt19937_64 rng(jitter_seed_);
    for (;;) {
      Op op;
      {
        MutexLock l(state_->mu);
        while (state_->count == 0 && !state_->shutdown) state_->work_available.Wait(l);
        if (state_->count == 0) return;  // shut down and drained
        op = std::move(state_->ring[state_->head]);
        state_->ring[state_->head] = Op();  // drop references held by the slot
        state_->head = (state_->head + 1) % capacity_;
        --state_->count;
        state_->space_available.NotifyOne();
      }
      if (max_delay_us_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % (max_delay_us_ + 1)));
      }
      Execute(op);
      op = Op();  // release shared state before announcing completion
      MutexLock l(state_->mu);
      ++state_->completed;
      state_->progress.NotifyAll();
    }
  }

  void Execute(const Op& op) const {
    switch (op.kind) {
      case OpKind::kCopy:
        splitter_.Copy(op.dst, op.src, op.bytes);
        break;
      case OpKind::kFill:
        splitter_.Fill(op.dst, op.fill, op.bytes);
        break;
      case OpKind::kHostFn:
        op.fn(op.arg);
        break;
      case OpKind::kWaitStream:
        op.wait_stream->WaitCompleted(op.wait_target);
        break;
      case OpKind::kWaitFlag:
        op.flag->WaitFor(op.flag_value);
        break;
      case OpKind::kWriteFlag:
        op.flag->Set(op.flag_value);
        break;
      case OpKind::kStamp: {
        const Clock::time_point now = Clock::now();
        MutexLock l(op.event->mu);
        if (op.generation >= op.event->stamp_generation) {
          op.event->stamp_generation = op.generation;
          op.event->stamp = now;
        }
        break;
      }
      case OpKind::kScatter:
        splitter_.Scatter(std::get<kernels::ScatterArgs>(op.kernel));
        break;
      case OpKind::kGather:
        splitter_.Gather(std::get<kernels::GatherArgs>(op.kernel));
        break;
      case OpKind::kDigest:
        splitter_.Digest(std::get<kernels::DigestArgs>(op.kernel));
        break;
      case OpKind::kVerifiedScatter:
        splitter_.VerifiedScatter(std::get<kernels::VerifiedScatterArgs>(op.kernel));
        break;
      case OpKind::kGatherDigest:
        splitter_.GatherDigest(std::get<kernels::DigestedGatherArgs>(op.kernel));
        break;
    }
  }

  const std::shared_ptr<WorkerPool> pool_;  // the device's; null without a pool
  const Splitter splitter_;
  const std::shared_ptr<StreamState> state_;
  const uint32_t capacity_;
  const uint32_t max_delay_us_;
  const uint64_t jitter_seed_;
  std::thread worker_;
};

class HostDevice final : public Device {
 public:
  explicit HostDevice(const HostDeviceOptions& options) : options_(options) {
    uint32_t threads = options.worker_threads;
    if (threads == 0) threads = std::clamp(UsableCpus(), 1u, 16u);
    // The stream worker running an operation is one of its threads: the pool adds the rest.
    if (threads > 1) pool_ = std::make_shared<WorkerPool>(threads - 1);
    caps_.kind = DeviceKind::kHost;
    caps_.name = "host";
    caps_.ordinal = 0;
    caps_.device_memory_host_accessible = true;
    caps_.stream_memory_ops = true;
    caps_.early_flag_waits = true;
    caps_.kernels_access_pinned_host = true;
    caps_.device_memory_bytes = 0;
    caps_.multiprocessors = 0;
    caps_.pinned_alignment_bytes = PageBytes();
  }

  const DeviceCapabilities& capabilities() const override { return caps_; }

  Result<DeviceBuffer> AllocateDevice(uint64_t bytes) override {
    RANGEKV_ASSIGN_OR_RETURN(uint8_t * p, MapIoMemory(bytes, "device memory"));
    if (options_.poison_allocations >= 0) {
      std::memset(p, options_.poison_allocations, bytes);
    }
    return WrapDeviceBuffer(p, bytes);
  }

  Result<PinnedHostBuffer> AllocatePinnedHost(uint64_t bytes) override {
    RANGEKV_ASSIGN_OR_RETURN(uint8_t * p, MapIoMemory(bytes, "pinned host memory"));
    return WrapPinnedHost(p, AlignUp(bytes, PageBytes()));
  }

  Result<HostRegistration> RegisterHostMemory(void* data, uint64_t bytes) override {
    if (data == nullptr || bytes == 0) {
      return InvalidArgument("registration of a null or empty host range");
    }
    return WrapRegistration(data, bytes);
  }

  Result<std::unique_ptr<Stream>> CreateStream(const StreamOptions&) override {
    const uint64_t index = next_stream_index_.fetch_add(1);
    return std::unique_ptr<Stream>(
        new HostStream(this, options_.stream_queue_capacity, options_, index, pool_));
  }

  Result<std::unique_ptr<Stream>> WrapNativeStream(void*) override {
    return Status(StatusCode::kUnimplemented, "the host device has no native streams");
  }

  Result<std::unique_ptr<Event>> CreateEvent(const EventOptions& options) override {
    return std::unique_ptr<Event>(new HostEvent(this, options));
  }

  Result<std::unique_ptr<DeviceFlag>> CreateFlag() override {
    return std::unique_ptr<DeviceFlag>(new HostFlag(this));
  }

  Result<double> ElapsedMs(const Event& start, const Event& end) override {
    if (start.device() != this || end.device() != this) {
      return InvalidArgument("elapsed time between events of another device");
    }
    RANGEKV_ASSIGN_OR_RETURN(Clock::time_point a, Stamp(static_cast<const HostEvent&>(start)));
    RANGEKV_ASSIGN_OR_RETURN(Clock::time_point b, Stamp(static_cast<const HostEvent&>(end)));
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  bool IsHostAccessible(const void*) const override { return true; }

 private:
  static Result<Clock::time_point> Stamp(const HostEvent& e) {
    if (e.options().timing != EventTiming::kEnabled) {
      return FailedPrecondition("event was created without timing");
    }
    auto [stream, target] = e.Captured();
    if (stream == nullptr) return FailedPrecondition("event was never recorded");
    if (!stream->IsCompleted(target)) return FailedPrecondition("event has not completed");
    MutexLock l(e.state()->mu);
    if (e.state()->stamp_generation != e.state()->record_generation) {
      return FailedPrecondition("event was re-recorded and has not completed");
    }
    return e.state()->stamp;
  }

  void FreeDevice(void* data, uint64_t bytes) override { UnmapIoMemory(data, bytes); }
  void FreePinnedHost(uint8_t* data, uint64_t bytes) override { UnmapIoMemory(data, bytes); }
  void UnregisterHostMemory(void*, uint64_t) override {}

  const HostDeviceOptions options_;
  std::shared_ptr<WorkerPool> pool_;  // shared with the streams, which may outlive the device
  DeviceCapabilities caps_;
  std::atomic<uint64_t> next_stream_index_{0};
};

}  // namespace

Result<std::unique_ptr<Device>> CreateHostDevice(const HostDeviceOptions& options) {
  if (options.stream_queue_capacity == 0) {
    return InvalidArgument("HostDevice stream_queue_capacity must be > 0");
  }
  if (options.poison_allocations < -1 || options.poison_allocations > 255) {
    return InvalidArgument("HostDevice poison_allocations must be -1 or a byte value");
  }
  if (options.split_bytes == 0) return InvalidArgument("HostDevice split_bytes must be > 0");
  return std::unique_ptr<Device>(new HostDevice(options));
}

}  // namespace rangekv
