// Machinery shared by the engines (not part of the io contract; include io_engine.h instead).
//
// SpanQueue: the bounded FIFO of submitted batches that engine threads take spans from, and
// the completion path that writes IoCompletion records and finishes batches.
// RunSpan: one span run to completion through File::ReadAt/WriteAt with the contract's
// checking (validation, short-transfer continuation, O_DIRECT tail bounce, error mapping).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/thread_annotations.h"
#include "io/io_engine.h"
#include "io/read_gate.h"

namespace rangekv::io_internal {

// One file call or SQE never moves more than this (io_uring lengths are 32-bit; Linux caps a
// read/write at 2 GiB - 4 KiB). Reaching this cap is not a short transfer.
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;

// One unit of work handed to an engine thread: a whole span, or one piece of a split span.
struct SpanRef {
  IoBatch* batch = nullptr;
  uint32_t index = 0;  // span
  uint32_t piece = 0;  // piece of the span (0 for an unsplit span)
};

// Engine-wide counters, updated with relaxed atomics.
struct Counters {
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> spans{0};
  std::atomic<uint64_t> failed_spans{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> native_ops{0};
  std::atomic<uint64_t> short_retries{0};
  std::atomic<uint64_t> fixed_buffer_ops{0};
  std::atomic<uint64_t> fixed_file_ops{0};
  std::atomic<uint64_t> file_path_spans{0};
  std::atomic<uint64_t> split_spans{0};
  std::atomic<uint64_t> pieces{0};
  IoEngineStats Snapshot() const;
};

class SpanQueue {
 public:
  enum class Block : uint8_t { kYes, kNo };

  SpanQueue(uint32_t max_queued_batches, uint64_t split_bytes, Counters* counters)
      : max_queued_batches_(max_queued_batches), split_bytes_(split_bytes), counters_(counters) {}
  SpanQueue(const SpanQueue&) = delete;
  SpanQueue& operator=(const SpanQueue&) = delete;

  // IoEngine::Submit's contract.
  Status Submit(IoBatch& batch) EXCLUDES(mu_);
  // Hands out the next span or piece. With Block::kYes waits for one; returns false only once
  // Stop() was called and the queue is empty. With Block::kNo returns false when nothing is queued.
  bool Take(SpanRef* out, Block block) EXCLUDES(mu_);
  // Records the outcome of a span or piece; completes a split span with its last piece, and
  // finishes the batch when that was its last span.
  void Complete(SpanRef ref, IoCompletion completion) EXCLUDES(mu_);
  // IoEngine::SetConcurrencyLimit: at most `limit` spans or pieces taken and not completed
  // (0: no cap). Take(kYes) waits while the cap is reached; Take(kNo) returns false.
  void SetTakeLimit(uint32_t limit) EXCLUDES(mu_);
  // Waits until no batch is outstanding, then makes Take(kYes) return false when empty.
  void DrainAndStop() EXCLUDES(mu_);
  // Runs `fn` under the queue lock when no batch is outstanding (so engine threads are idle);
  // kFailedPrecondition otherwise.
  Status WhileIdle(const std::function<Status()>& fn) EXCLUDES(mu_);

  // The request a SpanRef stands for: the span, or the piece's sub-range of it.
  static IoRequest Request(SpanRef ref);
  uint64_t split_bytes() const { return split_bytes_; }

  // Pieces of `r` under a split of `split_bytes` (1 when unsplit) and their size.
  static uint32_t PieceCount(const IoRequest& r, uint64_t split_bytes, uint64_t* piece_bytes);

 private:
  void CompleteSpan(IoBatch& b, uint32_t index, IoCompletion completion);
  void Finish(IoBatch& batch);  // the last touch of `batch` by the engine

  const uint32_t max_queued_batches_;
  const uint64_t split_bytes_;
  Counters* const counters_;
  Mutex mu_;
  CondVar work_cv_;                          // takers wait for spans
  CondVar room_cv_;                          // submitters wait for room, DrainAndStop for zero
  IoBatch* head_ GUARDED_BY(mu_) = nullptr;  // batches with spans not yet handed out
  IoBatch* tail_ GUARDED_BY(mu_) = nullptr;
  uint32_t outstanding_ GUARDED_BY(mu_) = 0;  // submitted and not done
  // Spans or pieces taken and not completed: raised under mu_ by Take, lowered by Complete
  // without it (then mu_ is taken only to wake a taker when a cap is set).
  std::atomic<uint32_t> taken_{0};
  uint32_t take_limit_ GUARDED_BY(mu_) = 0;  // 0: none
  std::atomic<bool> limited_{false};         // take_limit_ != 0, read without mu_
  bool stopping_ GUARDED_BY(mu_) = false;
};

// The read gate an engine's threads pass before each read span or piece
// (IoEngine::SetReadGate). A gate replaced by another stays alive with the engine, so a thread
// still inside it leaves it safely (gates change only when a store service is reconnected).
class ReadGateSlot {
 public:
  void Set(std::shared_ptr<ReadGate> gate) EXCLUDES(mu_);
  ReadGate* get() const { return current_.load(std::memory_order_acquire); }
  // Runs `run` (a read) inside the gate when there is one; writes pass straight through.
  template <typename Run>
  IoCompletion Pass(IoOp op, Run&& run) const {
    ReadGate* gate = op == IoOp::kRead ? get() : nullptr;
    const bool entered = gate != nullptr && gate->Enter();
    IoCompletion c = run();
    if (entered) gate->Leave();
    return c;
  }

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<ReadGate>> kept_ GUARDED_BY(mu_);
  std::atomic<ReadGate*> current_{nullptr};
};

// An aligned block of kMaxDirectAlignmentBytes for O_DIRECT tails, one per engine thread.
struct BounceBlock {
  BounceBlock();
  ~BounceBlock();
  BounceBlock(const BounceBlock&) = delete;
  BounceBlock& operator=(const BounceBlock&) = delete;
  uint8_t* data;
};

// Checks the REQUIRES of io_engine.h for one span (kInvalidArgument with the reason).
Status ValidateSpan(const IoRequest& r);

// "read /path [offset, +length)" for messages.
std::string SpanName(const IoRequest& r);

// Runs one validated span through File::ReadAt/WriteAt, continuing short transfers.
IoCompletion RunSpan(const IoRequest& r, uint32_t max_short_retries, BounceBlock& bounce,
                     Counters& counters);

// True when a direct read's length leaves a partial last block (served by the bounce path).
inline bool HasDirectTail(const IoRequest& r) {
  return r.op == IoOp::kRead && r.file->direct() && r.length % r.file->direct_alignment() != 0;
}

Result<std::unique_ptr<IoEngine>> MakePosixEngine(const IoEngineOptions& options);
Result<std::unique_ptr<IoEngine>> MakeUringEngine(const IoEngineOptions& options);

}  // namespace rangekv::io_internal
