// I/O engines: one contract for moving spans between files and host memory.
//
// Lifecycle (the same for every engine):
//   prepare  - the caller fills an IoBatch (its own object) with spans: (File*, file offset,
//              host buffer, length, read/write). Capacity is fixed at construction, so the data
//              path does not allocate.
//   submit   - IoEngine::Submit(batch) hands the batch to the engine and returns at once (it
//              blocks only while IoEngineOptions::max_queued_batches batches are already
//              outstanding: that is the engine's back-pressure).
//   complete - engine threads move the bytes and write one IoCompletion per span (status +
//              bytes moved). When the last span completes, the batch's callback (if any) runs on
//              an engine thread, then the batch becomes done().
//   poll     - batch.done() / IoEngine::Poll(batch) never block; batch.Wait() / IoEngine::Wait
//              block on a condition variable (no spinning).
//   release  - once done(), the caller reads the completions and may Clear() and refill the
//              batch, Submit it again as is (all spans rerun), or destroy it.
//
// Ownership: from Submit until done() the engine uses the batch, its IoRequests, every File
// they name and every byte of their buffers; the caller must not touch, free or reuse any of
// them (reading a buffer that is being written to a file is fine). After done() the engine
// holds no reference to any of them.
//
// Per-span checking: every completion is checked against its requested length. A short
// transfer is continued for the remainder (up to IoEngineOptions::max_short_retries short
// results per span; on O_DIRECT files the continuation restarts at the last aligned offset);
// a span that still cannot finish (end of file, device returning nothing) completes with
// kShortTransfer and the bytes it did move. EIO and other failed calls complete the span with
// kIoError, ENOSPC/EDQUOT with kNoSpace, a malformed request with kInvalidArgument. A failed
// span never affects the other spans of its batch: they run and report on their own.
//
// REQUIRES for each span (violations complete that span with kInvalidArgument, no I/O done):
//   file != nullptr; buf != nullptr unless length == 0; offset + length does not overflow.
//   For an O_DIRECT file (file->direct()): offset and buf aligned to file->direct_alignment()
//   (callers align; the pack planner rounds spans to the I/O alignment). A read's length may
//   be unaligned: the aligned body goes straight to `buf` and the last partial block through
//   an engine-owned bounce block (end-of-file inside that block is fine); an unaligned-length
//   write is rejected, because writing the last block whole would change bytes outside the
//   span. Alignments above kMaxDirectAlignmentBytes are rejected.
//   Spans of one batch, or of concurrently outstanding batches, must not write overlapping
//   file ranges or read into overlapping buffer ranges.
//
// Byte split (IoEngineOptions::split_bytes, docs/design.md 4.3): a span longer than the split
// size is issued as ceil(length / piece) concurrent sub-requests ("pieces") of `piece` bytes
// each (the last one shorter), piece = split_bytes rounded up to the file's O_DIRECT alignment,
// so every piece keeps the span's alignment. Pieces of one span run on any engine threads, in
// any order; the native call count is then payload bytes / piece size, whatever the number of
// spans or logical objects. The span still completes once, with one IoCompletion exactly as
// without the split: OK with `length` bytes when every piece succeeded; otherwise the status of
// the failed piece nearest the span's start (its message names the sub-read) and, as bytes,
// the contiguous prefix moved before that failure. Pieces after a failed piece still run (they
// are already issued); their bytes are not reported. An invalid span is never split.
//
// Files without a descriptor (fd() == -1, e.g. testing/fault_env.h) work with every engine:
// their spans go through File::ReadAt/WriteAt with the same checks (the uring engine runs them
// on a ring's thread, counted in IoEngineStats::file_path_spans), so fault-injection tests
// exercise the production completion logic.
//
// Thread-safety: IoEngine methods are thread-safe; any number of threads may Submit. An
// IoBatch is used by one thread while it is prepared and after it is done; while in flight
// only done()/Wait() may be called (from any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_annotations.h"
#include "io/read_gate.h"
#include "rangekv/env.h"
#include "rangekv/status.h"

namespace rangekv {

namespace io_internal {
class SpanQueue;
}  // namespace io_internal

enum class IoOp : uint8_t { kRead, kWrite };

// Largest O_DIRECT alignment the engines handle (bounce blocks are this big).
inline constexpr uint64_t kMaxDirectAlignmentBytes = 64 * 1024;

// One span of native I/O. For writes the engine only reads from `buf`.
struct IoRequest {
  File* file = nullptr;
  uint64_t offset = 0;
  void* buf = nullptr;
  uint64_t length = 0;
  IoOp op = IoOp::kRead;
};

// Outcome of one span, written by the engine before its batch completes.
struct IoCompletion {
  Status status;       // OK, kIoError, kNoSpace, kShortTransfer, kInvalidArgument
  uint64_t bytes = 0;  // bytes moved; == request length exactly when status is OK
};

// A caller-owned batch of spans with one completion record per span. Not copyable or movable
// (engines keep its address while it is in flight).
class IoBatch {
 public:
  explicit IoBatch(uint32_t capacity);
  // REQUIRES: not in flight.
  ~IoBatch();
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  // Appends a span. kResourceExhausted when the batch is full, kFailedPrecondition while it is
  // in flight. The request is validated when it runs, not here.
  Status Add(const IoRequest& request);
  // Removes every span (and keeps the callback). kFailedPrecondition while in flight.
  Status Clear();
  // Runs on an engine thread after the last span's completion is written and before done()
  // turns true; it may read completion()/status(). It must not block for long and must not
  // Submit to the engine that runs it. REQUIRES: not in flight.
  // For per-span notification (e.g. scatter a stripe as soon as it lands) use one-span batches,
  // one preallocated per bank: a batch costs nothing beyond its arrays.
  void SetCallback(std::function<void(IoBatch&)> on_complete);

  uint32_t size() const { return size_; }
  uint32_t capacity() const { return static_cast<uint32_t>(requests_.size()); }
  const IoRequest& request(uint32_t i) const { return requests_[i]; }
  // REQUIRES: done() or inside the callback; i < size().
  const IoCompletion& completion(uint32_t i) const { return completions_[i]; }

  // True once submitted and every span has completed (and the callback returned). False for a
  // batch that was never submitted.
  bool done() const { return state_.load(std::memory_order_acquire) == State::kDone; }
  // Blocks until done(). REQUIRES: the batch was submitted.
  void Wait();

  // REQUIRES (this and the next two): done() or inside the callback. OK when every span
  // succeeded; otherwise the first failed span's status with its index, path and range.
  Status status() const;
  // Number of spans whose status is not OK.
  uint32_t failed_spans() const;
  // Sum of completion bytes.
  uint64_t bytes_moved() const;

 private:
  friend class io_internal::SpanQueue;
  enum class State : uint8_t { kIdle, kInFlight, kDone };
  static constexpr uint32_t kNoPiece = UINT32_MAX;

  std::vector<IoRequest> requests_;        // capacity() entries, first size() used
  std::vector<IoCompletion> completions_;  // same
  uint32_t size_ = 0;
  // Byte split bookkeeping, per span (capacity() entries; written by Submit, then by engine
  // threads): piece count and size, pieces not yet completed, and the first failed piece.
  std::vector<uint32_t> pieces_;
  std::vector<uint64_t> piece_bytes_;
  std::unique_ptr<std::atomic<uint32_t>[]> pieces_left_;
  std::vector<uint32_t> failed_piece_ GUARDED_BY(mu_);  // kNoPiece when none failed
  std::function<void(IoBatch&)> on_complete_;
  std::atomic<State> state_{State::kIdle};
  std::atomic<uint32_t> remaining_{0};  // spans not yet completed while in flight
  // Engine queue linkage, guarded by the engine's queue mutex while in flight.
  IoBatch* next_ = nullptr;
  uint32_t dispatched_ = 0;        // spans whose every piece was handed out
  uint32_t dispatched_piece_ = 0;  // pieces of span dispatched_ handed out
  Mutex mu_;
  CondVar cv_;
};

// Host memory that an engine may pre-register for I/O (io_uring fixed buffers).
struct IoBuffer {
  void* data = nullptr;
  uint64_t bytes = 0;
};

// What an engine can do; the engine above branches on these, never on #ifdefs.
struct IoEngineCaps {
  bool device_memory = false;       // spans may target device memory directly (cuFile)
  bool async = true;                // Submit returns before the I/O completes
  bool batch = true;                // one Submit carries many spans
  bool registered_buffers = false;  // RegisterBuffers has an effect (io_uring fixed buffers)
  bool fixed_files = false;         // RegisterFiles has an effect (io_uring fixed files)
  bool direct_io = true;            // O_DIRECT files are read/written without a bounce copy
  bool files_without_fd = true;     // Files with fd() == -1 (fault injection) are supported
  uint32_t max_inflight_spans = 0;  // spans executing at once, engine-wide
  uint32_t buffers_registered = 0;  // buffers registered now
  uint32_t files_registered = 0;    // files registered now
};

// Work-unit counters (cumulative since the engine was made).
struct IoEngineStats {
  uint64_t batches = 0;  // batches completed
  uint64_t spans = 0;    // spans completed (ok or not)
  uint64_t failed_spans = 0;
  uint64_t bytes = 0;             // bytes moved
  uint64_t native_ops = 0;        // system calls / SQEs issued for span data
  uint64_t short_retries = 0;     // continuations after a short result
  uint64_t fixed_buffer_ops = 0;  // uring: SQEs that used a registered buffer
  uint64_t fixed_file_ops = 0;    // uring: SQEs that used a registered file
  uint64_t file_path_spans = 0;   // uring: spans served through File::ReadAt/WriteAt
  uint64_t split_spans = 0;       // spans issued as several pieces (byte split)
  uint64_t pieces = 0;            // pieces of split spans completed
};

enum class IoEngineKind : uint8_t {
  kPosix,   // pread/pwrite thread pool
  kUring,   // io_uring rings, one per thread
  kCuFile,  // cuFile (GPUDirect Storage or its compat mode) via dlopen, see cufile_engine.h
};
std::string_view IoEngineKindName(IoEngineKind kind);  // "posix", "uring", "cufile"
Result<IoEngineKind> ParseIoEngineKind(std::string_view name);

enum class UringSubmit : uint8_t {
  // SQEs are issued as is. Reads served from the page cache are copied inside the submitting
  // thread's io_uring_enter, so cached throughput comes from having several rings.
  kInline,
  // IOSQE_ASYNC on every SQE: the kernel's io-wq workers do the work (more threads, more
  // context switches; can help one ring on page-cache hits).
  kAsync,
};

struct IoEngineOptions {
  uint32_t workers = 4;              // posix: threads; uring: rings, one thread each. [1, 256]
  uint32_t queue_depth = 8;          // uring: SQEs in flight per ring. [1, 4096]
  uint32_t max_queued_batches = 64;  // Submit blocks while this many are outstanding. >= 1
  uint32_t max_short_retries = 8;    // per span, see header comment. [0, 1000]
  UringSubmit uring_submit = UringSubmit::kInline;
  // Byte split (see the header comment): 0 = spans are issued whole; otherwise spans longer
  // than this are cut into pieces of this size (rounded up to O_DIRECT alignment per file).
  // 0 or [kMinSplitBytes, kMaxSplitBytes].
  uint64_t split_bytes = 0;
  // cufile: the library to dlopen ("" = libcufile.so.0 through the dynamic loader).
  std::string cufile_library;
};

inline constexpr uint64_t kMinSplitBytes = 512;
inline constexpr uint64_t kMaxSplitBytes = 1ull << 30;

class IoEngine {
 public:
  // Waits until every submitted batch is done, then stops the engine's threads.
  virtual ~IoEngine() = default;

  virtual IoEngineKind kind() const = 0;
  std::string_view name() const { return IoEngineKindName(kind()); }
  virtual IoEngineCaps caps() const = 0;
  virtual IoEngineStats stats() const = 0;
  // The byte split in effect (IoEngineOptions::split_bytes; 0 = none).
  virtual uint64_t split_bytes() const = 0;
  // One line for logs and DescribeBackends: the name, plus what is in effect (cufile: mode
  // GDS or compat, library version).
  virtual std::string Describe() const { return std::string(name()); }

  // Registers host buffers for the life of the engine (or until the next call, which replaces
  // them; an empty span unregisters). Spans lying wholly inside a registered buffer then skip
  // per-I/O page pinning. Call at startup: REQUIRES no batch outstanding (else
  // kFailedPrecondition). At most 16384 buffers of at most 1 GiB each (kInvalidArgument).
  // On failure (e.g. ENOMEM from RLIMIT_MEMLOCK: kResourceExhausted) nothing stays
  // registered and the engine keeps working without registered buffers. Engines without the
  // capability accept the call and do nothing. REQUIRES: the buffers stay allocated until
  // unregistered or the engine is destroyed.
  virtual Status RegisterBuffers(std::span<const IoBuffer> buffers) = 0;
  // Registers the descriptors of `files` (those with fd() >= 0) as fixed files; same rules as
  // RegisterBuffers. REQUIRES: the files stay open until unregistered or the engine is
  // destroyed (a closed fd's number can be reused by another file).
  virtual Status RegisterFiles(std::span<File* const> files) = 0;

  // Starts the batch (see the header comment). kFailedPrecondition if the batch is already in
  // flight; otherwise OK, and every outcome arrives in the completion records. An empty batch
  // completes before Submit returns (its callback runs on the calling thread).
  virtual Status Submit(IoBatch& batch) = 0;

  // Caps the spans or pieces in flight at once at `limit` (0: no cap beyond the engine's own
  // threads or queue depth), from the next one handed out; those already in flight finish. The
  // engine's threads stay; the ones over the cap wait. Used to give a node's medium a fair
  // share when several engines read it (EngineTuning::share_reads). Thread-safe.
  virtual void SetConcurrencyLimit(uint32_t limit) = 0;
  // Makes every read span or piece from now on pass `gate` (null: none): a cap on reads in
  // flight shared with other engines, a node's store service's read gate
  // (src/service_proto/read_gate.h). The posix and cuFile engines' threads pass it around each
  // read call; io_uring's submissions are not gated (its reads stay within its rings x queue
  // depth). Returns whether this engine gates. Thread-safe; reads in flight finish as they began.
  virtual bool SetReadGate(std::shared_ptr<ReadGate> gate) {
    (void)gate;
    return false;
  }
  bool Poll(const IoBatch& batch) const { return batch.done(); }
  void Wait(IoBatch& batch) { batch.Wait(); }
};

// Makes an engine. kInvalidArgument for options out of range; for kUring, kNotSupported with
// the reason when io_uring cannot be used here (built without liburing, kernel without
// io_uring, io_uring_disabled sysctl, seccomp), so the caller can fall back to kPosix and log
// why.
Result<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind, const IoEngineOptions& options);

}  // namespace rangekv
