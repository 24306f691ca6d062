// The `uring` engine: `workers` io_uring rings, each owned by one thread that takes spans from
// the shared queue, keeps up to `queue_depth` SQEs in flight, and reaps its own completions.
//
// Why several rings: a read served from the page cache is copied inline by the thread that
// submits it (io_uring_enter), so one ring serialises every cached memcpy (io-layer.md 4.7);
// one ring per thread gives the warm path the same parallelism as the pread pool, and O_DIRECT
// reads get queue_depth x workers requests in flight. No SQPOLL/IOPOLL (io-layer.md 4.4).
//
// Registered buffers: RegisterBuffers registers the same iovecs with every ring; an SQE whose
// span lies wholly inside one of them uses read_fixed/write_fixed. Fixed files likewise, keyed
// by File*. Registration happens while the engine is idle (no batch outstanding): the caller
// thread uses the rings only when their threads cannot (they touch a ring only with work).
//
// Spans the ring cannot do natively are served on the ring's thread through
// File::ReadAt/WriteAt with the same checks (RunSpan): Files with fd() == -1 (the
// fault-injecting env) and O_DIRECT reads whose length leaves a partial last block. This keeps
// one contract for tests and production; those spans block that ring's thread while they run
// (other rings keep going), and are counted in IoEngineStats::file_path_spans.
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/units.h"
#include "io/io_internal.h"

namespace rangekv::io_internal {
namespace {

// io_uring limits (IORING_MAX_REG_BUFFERS; one registered iovec is at most 1 GiB).
constexpr size_t kMaxRegisteredBuffers = 16384;
constexpr uint64_t kMaxRegisteredBufferBytes = 1ull << 30;
// Every ring pins the registered pages again and charges them to the process's pinned memory
// (no ring shares another's registration on Debian 12's kernel and liburing). The engine's 32
// write rings registering its 2.25 GiB of banks took 6.9 s at open and showed 64 GiB as VmPin
// (dev VM, 2026-12-04); past this product the engine runs without registered buffers, as it
// does where RLIMIT_MEMLOCK refuses them.
constexpr uint64_t kMaxPinnedAccountBytes = 4ull << 30;

struct RegisteredBuffer {
  uintptr_t begin;
  uintptr_t end;
  int index;
};

struct RegisteredFile {
  const File* file;
  int index;
};

// One ring and the thread that owns it.
class Ring {
 public:
  Ring() = default;
  ~Ring() {
    if (initialized_) io_uring_queue_exit(&ring_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Sets up the ring with the best flags this kernel accepts.
  Status Init(uint32_t depth) {
    // COOP_TASKRUN (5.19) avoids interrupting the submitter; SUBMIT_ALL (5.18) keeps going past
    // a bad SQE; CQ twice the SQ so completions never overflow. Older kernels reject unknown
    // flags with EINVAL: retry with fewer.
    const unsigned flag_sets[] = {
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CLAMP |
            IORING_SETUP_CQSIZE,
        IORING_SETUP_CLAMP | IORING_SETUP_CQSIZE,
        0,
    };
    int err = 0;
    for (unsigned flags : flag_sets) {
      io_uring_params params;
      std::memset(&params, 0, sizeof(params));
      params.flags = flags;
      params.cq_entries = 2 * depth;
      err = io_uring_queue_init_params(depth, &ring_, &params);
      if (err == 0) {
        initialized_ = true;
        setup_flags_ = flags;
        return OkStatus();
      }
      if (err != -EINVAL) break;
    }
    return NotSupported(
        std::string("io_uring_setup failed: ") + std::strerror(-err) +
        " (kernel without io_uring, kernel.io_uring_disabled, or a seccomp filter)");
  }

  io_uring* get() { return &ring_; }

 private:
  io_uring ring_;
  bool initialized_ = false;
  unsigned setup_flags_ = 0;
};

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoEngineOptions& options)
      : options_(options), queue_(options.max_queued_batches, options.split_bytes, &counters_) {}

  Status Init() {
    rings_.reserve(options_.workers);
    for (uint32_t i = 0; i < options_.workers; ++i) {
      rings_.push_back(std::make_unique<Ring>());
      RANGEKV_RETURN_IF_ERROR(rings_.back()->Init(options_.queue_depth));
    }
    threads_.reserve(rings_.size());
    for (auto& ring : rings_) {
      threads_.emplace_back([this, r = ring.get()] { RingThread(*r); });
    }
    return OkStatus();
  }

  ~UringEngine() override {
    queue_.DrainAndStop();
    for (auto& t : threads_) t.join();
    for (auto& ring : rings_) {
      if (!buffers_.empty()) io_uring_unregister_buffers(ring->get());
      if (!files_.empty()) io_uring_unregister_files(ring->get());
    }
  }

  IoEngineKind kind() const override { return IoEngineKind::kUring; }

  IoEngineCaps caps() const override {
    return IoEngineCaps{
        .device_memory = false,
        .async = true,
        .batch = true,
        .registered_buffers = true,
        .fixed_files = true,
        .direct_io = true,
        .files_without_fd = true,
        .max_inflight_spans = options_.workers * options_.queue_depth,
        .buffers_registered =
            static_cast<uint32_t>(registered_buffer_count_.load(std::memory_order_relaxed)),
        .files_registered =
            static_cast<uint32_t>(registered_file_count_.load(std::memory_order_relaxed)),
    };
  }

  IoEngineStats stats() const override { return counters_.Snapshot(); }
  uint64_t split_bytes() const override { return options_.split_bytes; }

  Status RegisterBuffers(std::span<const IoBuffer> buffers) override {
    if (buffers.size() > kMaxRegisteredBuffers) {
      return InvalidArgument("at most " + std::to_string(kMaxRegisteredBuffers) +
                             " registered buffers, got " + std::to_string(buffers.size()));
    }
    std::vector<iovec> iovecs;
    iovecs.reserve(buffers.size());
    uint64_t total = 0;
    for (const IoBuffer& b : buffers) {
      if (b.data == nullptr || b.bytes == 0 || b.bytes > kMaxRegisteredBufferBytes) {
        return InvalidArgument("a registered buffer must be non-null and 1 B .. 1 GiB, got " +
                               std::to_string(b.bytes) + " bytes");
      }
      iovecs.push_back(iovec{b.data, static_cast<size_t>(b.bytes)});
      total += b.bytes;
    }
    return queue_.WhileIdle([&]() -> Status {
      UnregisterBuffersLocked();
      if (iovecs.empty()) return OkStatus();
      if (total * rings_.size() > kMaxPinnedAccountBytes) {
        return ResourceExhausted("registering " + std::to_string(total >> 20) +
                                 " MiB with each of " + std::to_string(rings_.size()) +
                                 " rings would pin every page that many times (over " +
                                 std::to_string(kMaxPinnedAccountBytes >> 30) +
                                 " GiB); running without registered buffers");
      }
      for (size_t i = 0; i < rings_.size(); ++i) {
        const int err = io_uring_register_buffers(rings_[i]->get(), iovecs.data(),
                                                  static_cast<unsigned>(iovecs.size()));
        if (err < 0) {
          for (size_t j = 0; j < i; ++j) io_uring_unregister_buffers(rings_[j]->get());
          const std::string why = std::string("io_uring_register_buffers: ") + std::strerror(-err);
          if (err == -ENOMEM) {
            return ResourceExhausted(why +
                                     " (RLIMIT_MEMLOCK too small to pin the buffers; "
                                     "running without registered buffers)");
          }
          return Status(StatusCode::kIoError, why);
        }
      }
      for (size_t i = 0; i < buffers.size(); ++i) {
        const auto begin = reinterpret_cast<uintptr_t>(buffers[i].data);
        buffers_.push_back({begin, begin + buffers[i].bytes, static_cast<int>(i)});
      }
      std::sort(
          buffers_.begin(), buffers_.end(),
          [](const RegisteredBuffer& a, const RegisteredBuffer& b) { return a.begin < b.begin; });
      registered_buffer_count_.store(buffers_.size(), std::memory_order_relaxed);
      return OkStatus();
    });
  }

  Status RegisterFiles(std::span<File* const> files) override {
    std::vector<int> fds;
    std::vector<RegisteredFile> table;
    for (File* f : files) {
      if (f == nullptr || f->fd() < 0) continue;
      table.push_back({f, static_cast<int>(fds.size())});
      fds.push_back(f->fd());
    }
    return queue_.WhileIdle([&]() -> Status {
      UnregisterFilesLocked();
      if (fds.empty()) return OkStatus();
      for (size_t i = 0; i < rings_.size(); ++i) {
        const int err = io_uring_register_files(rings_[i]->get(), fds.data(),
                                                static_cast<unsigned>(fds.size()));
        if (err < 0) {
          for (size_t j = 0; j < i; ++j) io_uring_unregister_files(rings_[j]->get());
          return Status(err == -EMFILE || err == -ENOMEM ? StatusCode::kResourceExhausted
                                                         : StatusCode::kIoError,
                        std::string("io_uring_register_files: ") + std::strerror(-err));
        }
      }
      std::sort(table.begin(), table.end(),
                [](const RegisteredFile& a, const RegisteredFile& b) { return a.file < b.file; });
      files_ = std::move(table);
      registered_file_count_.store(files_.size(), std::memory_order_relaxed);
      return OkStatus();
    });
  }

  Status Submit(IoBatch& batch) override { return queue_.Submit(batch); }
  void SetConcurrencyLimit(uint32_t limit) override { queue_.SetTakeLimit(limit); }

 private:
  // One span with an SQE outstanding (user_data = slot index).
  struct Slot {
    SpanRef ref;
    IoRequest req;        // the span, or the piece of a split span
    uint64_t done = 0;    // bytes of the span finished so far
    uint64_t chunk = 0;   // bytes asked by the outstanding SQE
    uint32_t shorts = 0;  // short results so far
    int buf_index = -1;   // registered buffer, or -1
    int file_index = -1;  // registered file, or -1
    bool busy = false;
  };

  void UnregisterBuffersLocked() {
    if (buffers_.empty()) return;
    for (auto& ring : rings_) io_uring_unregister_buffers(ring->get());
    buffers_.clear();
    registered_buffer_count_.store(0, std::memory_order_relaxed);
  }

  void UnregisterFilesLocked() {
    if (files_.empty()) return;
    for (auto& ring : rings_) io_uring_unregister_files(ring->get());
    files_.clear();
    registered_file_count_.store(0, std::memory_order_relaxed);
  }

  // Tables are only written while no batch is outstanding and read by ring threads after they
  // took a span under the queue mutex, so the queue mutex orders the accesses.
  int FindBuffer(const void* buf, uint64_t length) const {
    const auto begin = reinterpret_cast<uintptr_t>(buf);
    auto it = std::upper_bound(buffers_.begin(), buffers_.end(), begin,
                               [](uintptr_t v, const RegisteredBuffer& b) { return v < b.begin; });
    if (it == buffers_.begin()) return -1;
    --it;
    return begin + length <= it->end ? it->index : -1;
  }

  int FindFile(const File* f) const {
    auto it = std::lower_bound(files_.begin(), files_.end(), f,
                               [](const RegisteredFile& a, const File* b) { return a.file < b; });
    return it != files_.end() && it->file == f ? it->index : -1;
  }

  void RingThread(Ring& ring) {
    BounceBlock bounce;
    std::vector<Slot> slots(options_.queue_depth);
    std::vector<uint32_t> free_slots;
    for (uint32_t i = options_.queue_depth; i > 0; --i) free_slots.push_back(i - 1);
    uint32_t inflight = 0;

    // Completes what the ring has finished; continuations are queued for the next Enter.
    auto reap = [&] {
      io_uring_cqe* cqe;
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(ring.get(), head, cqe) {
        ++seen;
        const auto s = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
        if (OnCqe(ring, slots[s], s, cqe->res)) {
          slots[s].busy = false;
          free_slots.push_back(s);
          --inflight;
        }
      }
      io_uring_cq_advance(ring.get(), seen);
    };

    for (;;) {
      SpanRef ref;
      // Block for work only when nothing is in flight; Take(kYes) returns false only once the
      // engine is stopping and the queue is empty.
      const auto block = inflight == 0 ? SpanQueue::Block::kYes : SpanQueue::Block::kNo;
      if (free_slots.empty() || !queue_.Take(&ref, block)) {
        if (inflight == 0) return;
        Enter(ring, 1);
        reap();
        continue;
      }
      const IoRequest r = SpanQueue::Request(ref);
      Status valid = ValidateSpan(r);
      if (!valid.ok()) {
        queue_.Complete(ref, {std::move(valid), 0});
        continue;
      }
      if (r.length == 0) {
        queue_.Complete(ref, {OkStatus(), 0});
        continue;
      }
      if (r.file->fd() < 0 || HasDirectTail(r)) {
        counters_.file_path_spans.fetch_add(1, std::memory_order_relaxed);
        queue_.Complete(ref, RunSpan(r, options_.max_short_retries, bounce, counters_));
        continue;
      }
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      slots[s] = Slot{.ref = ref,
                      .req = r,
                      .buf_index = FindBuffer(r.buf, r.length),
                      .file_index = FindFile(r.file),
                      .busy = true};
      Prepare(ring, slots[s], s);
      ++inflight;
      // Submit each span as soon as it is taken, and report what finished: a page-cache read
      // is copied inside this call, and while this thread copies, idle rings take the next
      // spans. Taking a whole queue depth before submitting would let one ring copy them all
      // serially, and hold back the completion of the first until the last was copied.
      Enter(ring, 0);
      reap();
    }
  }

  // Submits queued SQEs and waits for `wait_nr` completions. Transient failures leave the SQEs
  // queued for the next call.
  static void Enter(Ring& ring, unsigned wait_nr) {
    const int r =
        wait_nr == 0 ? io_uring_submit(ring.get()) : io_uring_submit_and_wait(ring.get(), wait_nr);
    if (r >= 0 || r == -EINTR || r == -EAGAIN || r == -EBUSY) return;
    // Nothing else is possible on a ring used as this one is; anything else means the ring is
    // broken while the kernel may still own our buffers: stop rather than reuse them.
    std::fprintf(stderr, "rangekv: io_uring_enter: %s\n", std::strerror(-r));
    std::abort();
  }

  // Queues an SQE for the slot's next chunk.
  void Prepare(Ring& ring, Slot& slot, uint32_t index) {
    const IoRequest& r = slot.req;
    slot.chunk = std::min(r.length - slot.done, kMaxChunkBytes);
    io_uring_sqe* sqe = io_uring_get_sqe(ring.get());
    RANGEKV_CHECK(sqe != nullptr);  // at most queue_depth SQEs exist at once
    const int fd = slot.file_index >= 0 ? slot.file_index : r.file->fd();
    auto* ptr = static_cast<uint8_t*>(r.buf) + slot.done;
    const auto len = static_cast<unsigned>(slot.chunk);
    const uint64_t off = r.offset + slot.done;
    if (r.op == IoOp::kRead) {
      if (slot.buf_index >= 0) {
        io_uring_prep_read_fixed(sqe, fd, ptr, len, off, slot.buf_index);
      } else {
        io_uring_prep_read(sqe, fd, ptr, len, off);
      }
    } else {
      if (slot.buf_index >= 0) {
        io_uring_prep_write_fixed(sqe, fd, ptr, len, off, slot.buf_index);
      } else {
        io_uring_prep_write(sqe, fd, ptr, len, off);
      }
    }
    unsigned flags = 0;
    if (slot.file_index >= 0) {
      flags |= IOSQE_FIXED_FILE;
      counters_.fixed_file_ops.fetch_add(1, std::memory_order_relaxed);
    }
    if (slot.buf_index >= 0) counters_.fixed_buffer_ops.fetch_add(1, std::memory_order_relaxed);
    if (options_.uring_submit == UringSubmit::kAsync) flags |= IOSQE_ASYNC;
    io_uring_sqe_set_flags(sqe, flags);
    io_uring_sqe_set_data64(sqe, index);
    counters_.native_ops.fetch_add(1, std::memory_order_relaxed);
  }

  // Handles one CQE; returns true when the span completed (the slot is free again).
  bool OnCqe(Ring& ring, Slot& slot, uint32_t index, int res) {
    const IoRequest& r = slot.req;
    auto finish = [&](Status status) {
      queue_.Complete(slot.ref, {std::move(status), slot.done});
      return true;
    };
    auto short_status = [&](std::string_view why) {
      return Status(StatusCode::kShortTransfer,
                    SpanName(r) + ": moved " + std::to_string(slot.done) + " of " +
                        std::to_string(r.length) + " bytes (" + std::string(why) + ")");
    };
    if (res < 0) {
      if (res != -EINTR && res != -EAGAIN) return finish(ErrnoStatus(-res, SpanName(r)));
      if (++slot.shorts > options_.max_short_retries) {
        return finish(ErrnoStatus(-res, SpanName(r) + " (retry limit)"));
      }
      counters_.short_retries.fetch_add(1, std::memory_order_relaxed);
      Prepare(ring, slot, index);
      return false;
    }
    const auto n = static_cast<uint64_t>(res);
    if (n == 0 && r.op == IoOp::kRead) return finish(short_status("end of file"));
    if (n > slot.chunk) return finish(Internal(SpanName(r) + ": kernel moved more than asked"));
    slot.done += n;
    if (slot.done == r.length) return finish(OkStatus());
    if (n < slot.chunk) {
      if (++slot.shorts > options_.max_short_retries) {
        return finish(short_status("short transfers exceeded the retry limit"));
      }
      counters_.short_retries.fetch_add(1, std::memory_order_relaxed);
      // O_DIRECT continuations must start aligned: redo the partial block (same bytes).
      if (r.file->direct()) slot.done = AlignDown(slot.done, r.file->direct_alignment());
    }
    Prepare(ring, slot, index);
    return false;
  }

  const IoEngineOptions options_;
  Counters counters_;
  SpanQueue queue_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<std::thread> threads_;
  std::vector<RegisteredBuffer> buffers_;  // sorted by begin; see FindBuffer
  std::vector<RegisteredFile> files_;      // sorted by file
  std::atomic<size_t> registered_buffer_count_{0};
  std::atomic<size_t> registered_file_count_{0};
};

}  // namespace

Result<std::unique_ptr<IoEngine>> MakeUringEngine(const IoEngineOptions& options) {
  auto engine = std::make_unique<UringEngine>(options);
  RANGEKV_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace rangekv::io_internal
