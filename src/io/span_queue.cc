#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/units.h"
#include "io/io_internal.h"

namespace rangekv::io_internal {

void ReadGateSlot::Set(std::shared_ptr<ReadGate> gate) {
  MutexLock l(mu_);
  current_.store(gate.get(), std::memory_order_release);
  if (gate != nullptr) kept_.push_back(std::move(gate));
}

IoEngineStats Counters::Snapshot() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return IoEngineStats{
      .batches = get(batches),
      .spans = get(spans),
      .failed_spans = get(failed_spans),
      .bytes = get(bytes),
      .native_ops = get(native_ops),
      .short_retries = get(short_retries),
      .fixed_buffer_ops = get(fixed_buffer_ops),
      .fixed_file_ops = get(fixed_file_ops),
      .file_path_spans = get(file_path_spans),
      .split_spans = get(split_spans),
      .pieces = get(pieces),
  };
}

Status SpanQueue::Submit(IoBatch& batch) {
  IoBatch::State expected = batch.state_.load(std::memory_order_acquire);
  do {
    if (expected == IoBatch::State::kInFlight) {
      return FailedPrecondition("IoEngine::Submit of a batch that is already in flight");
    }
  } while (!batch.state_.compare_exchange_weak(expected, IoBatch::State::kInFlight,
                                               std::memory_order_acq_rel));
  {
    MutexLock lock(batch.mu_);
    for (uint32_t i = 0; i < batch.size_; ++i) {
      batch.completions_[i] = IoCompletion{};
      const uint32_t n = PieceCount(batch.requests_[i], split_bytes_, &batch.piece_bytes_[i]);
      batch.pieces_[i] = n;
      batch.pieces_left_[i].store(n, std::memory_order_relaxed);
      batch.failed_piece_[i] = IoBatch::kNoPiece;
    }
  }
  batch.dispatched_ = 0;
  batch.dispatched_piece_ = 0;
  batch.next_ = nullptr;
  batch.remaining_.store(batch.size_, std::memory_order_relaxed);
  if (batch.size_ == 0) {
    {
      MutexLock lock(mu_);
      ++outstanding_;
    }
    Finish(batch);
    return OkStatus();
  }
  MutexLock lock(mu_);
  while (outstanding_ >= max_queued_batches_) room_cv_.Wait(lock);
  ++outstanding_;
  if (tail_ == nullptr) {
    head_ = tail_ = &batch;
  } else {
    tail_->next_ = &batch;
    tail_ = &batch;
  }
  work_cv_.NotifyAll();
  return OkStatus();
}

bool SpanQueue::Take(SpanRef* out, Block block) {
  MutexLock lock(mu_);
  const auto capped = [&]() REQUIRES(mu_) {
    return take_limit_ != 0 && taken_.load(std::memory_order_relaxed) >= take_limit_;
  };
  if (block == Block::kYes) {
    while ((head_ == nullptr || capped()) && !stopping_) work_cv_.Wait(lock);
  }
  if (head_ == nullptr || (capped() && !stopping_)) return false;
  taken_.fetch_add(1, std::memory_order_relaxed);
  IoBatch* b = head_;
  *out = SpanRef{b, b->dispatched_, b->dispatched_piece_++};
  if (b->dispatched_piece_ == b->pieces_[b->dispatched_]) {
    ++b->dispatched_;
    b->dispatched_piece_ = 0;
  }
  if (b->dispatched_ == b->size_) {
    head_ = b->next_;
    if (head_ == nullptr) tail_ = nullptr;
    b->next_ = nullptr;
  }
  return true;
}

IoRequest SpanQueue::Request(SpanRef ref) {
  const IoBatch& b = *ref.batch;
  IoRequest r = b.requests_[ref.index];
  if (b.pieces_[ref.index] == 1) return r;
  const uint64_t piece = b.piece_bytes_[ref.index];
  const uint64_t begin = uint64_t{ref.piece} * piece;
  r.offset += begin;
  r.buf = static_cast<uint8_t*>(r.buf) + begin;
  r.length = std::min(piece, r.length - begin);
  return r;
}

uint32_t SpanQueue::PieceCount(const IoRequest& r, uint64_t split_bytes, uint64_t* piece_bytes) {
  *piece_bytes = r.length;
  if (split_bytes == 0 || r.length <= split_bytes || !ValidateSpan(r).ok()) return 1;
  const uint64_t piece =
      r.file->direct() ? AlignUp(split_bytes, r.file->direct_alignment()) : split_bytes;
  const uint64_t n = (r.length + piece - 1) / piece;
  if (n <= 1 || n > UINT32_MAX) return 1;
  *piece_bytes = piece;
  return static_cast<uint32_t>(n);
}

void SpanQueue::SetTakeLimit(uint32_t limit) {
  MutexLock lock(mu_);
  take_limit_ = limit;
  limited_.store(limit != 0, std::memory_order_seq_cst);
  work_cv_.NotifyAll();  // a raised cap frees waiting takers
}

void SpanQueue::Complete(SpanRef ref, IoCompletion completion) {
  // seq_cst with SetTakeLimit's store: either this sees the cap turned on, or the taker that
  // checks under mu_ after it sees this decrement (store buffering, on weakly ordered CPUs).
  taken_.fetch_sub(1, std::memory_order_seq_cst);
  if (limited_.load(std::memory_order_seq_cst)) {
    // A taker waiting on the cap checked taken_ under mu_: taking mu_ here orders this wake-up
    // after its check, so it is not lost.
    MutexLock lock(mu_);
    work_cv_.NotifyOne();
  }
  IoBatch& b = *ref.batch;
  const uint32_t i = ref.index;
  if (b.pieces_[i] == 1) {
    CompleteSpan(b, i, std::move(completion));
    return;
  }
  counters_->pieces.fetch_add(1, std::memory_order_relaxed);
  if (!completion.status.ok()) {
    MutexLock lock(b.mu_);
    if (ref.piece < b.failed_piece_[i]) {
      b.failed_piece_[i] = ref.piece;
      const IoRequest& whole = b.requests_[i];
      b.completions_[i] = {
          completion.status.WithContext("sub-read " + std::to_string(ref.piece) + " of " +
                                        std::to_string(b.pieces_[i]) + " of " + SpanName(whole)),
          uint64_t{ref.piece} * b.piece_bytes_[i] + completion.bytes};
    }
  }
  // acq_rel: the last piece's thread sees the other pieces' failure records.
  if (b.pieces_left_[i].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  counters_->split_spans.fetch_add(1, std::memory_order_relaxed);
  IoCompletion whole;
  {
    MutexLock lock(b.mu_);
    if (b.failed_piece_[i] == IoBatch::kNoPiece) {
      whole = {OkStatus(), b.requests_[i].length};
    } else {
      whole = std::move(b.completions_[i]);
    }
  }
  CompleteSpan(b, i, std::move(whole));
}

void SpanQueue::CompleteSpan(IoBatch& b, uint32_t index, IoCompletion completion) {
  counters_->spans.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(completion.bytes, std::memory_order_relaxed);
  if (!completion.status.ok()) counters_->failed_spans.fetch_add(1, std::memory_order_relaxed);
  b.completions_[index] = std::move(completion);
  // acq_rel: the thread that finishes the batch sees every other span's completion record.
  if (b.remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(b);
}

void SpanQueue::Finish(IoBatch& batch) {
  counters_->batches.fetch_add(1, std::memory_order_relaxed);
  if (batch.on_complete_) batch.on_complete_(batch);
  {
    // Before done() turns true, so a caller that saw its batch done finds the engine idle
    // (RegisterBuffers right after Wait must not fail). The calling thread is an engine thread
    // (or the submitter, for an empty batch), so the engine outlives this function.
    MutexLock lock(mu_);
    --outstanding_;
    room_cv_.NotifyAll();
  }
  MutexLock lock(batch.mu_);
  batch.state_.store(IoBatch::State::kDone, std::memory_order_release);
  batch.cv_.NotifyAll();
  // The owner may destroy the batch as soon as this lock is released: no touch after it.
}

void SpanQueue::DrainAndStop() {
  MutexLock lock(mu_);
  while (outstanding_ > 0) room_cv_.Wait(lock);
  stopping_ = true;
  work_cv_.NotifyAll();
}

Status SpanQueue::WhileIdle(const std::function<Status()>& fn) {
  MutexLock lock(mu_);
  if (outstanding_ > 0) {
    return FailedPrecondition("registration while " + std::to_string(outstanding_) +
                              " batches are outstanding; register at startup");
  }
  return fn();
}

BounceBlock::BounceBlock()
    : data(static_cast<uint8_t*>(
          std::aligned_alloc(kMaxDirectAlignmentBytes, kMaxDirectAlignmentBytes))) {
  RANGEKV_CHECK(data != nullptr);
}

BounceBlock::~BounceBlock() { std::free(data); }

std::string SpanName(const IoRequest& r) {
  std::string s = r.op == IoOp::kRead ? "read " : "write ";
  s += r.file != nullptr ? r.file->path() : std::string("<null file>");
  s += " [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) + ")";
  return s;
}

Status ValidateSpan(const IoRequest& r) {
  if (r.file == nullptr) return InvalidArgument("span has no file");
  if (r.buf == nullptr && r.length > 0) return InvalidArgument(SpanName(r) + ": null buffer");
  if (!CheckedAdd(r.offset, r.length).has_value()) {
    return InvalidArgument(SpanName(r) + ": offset + length overflows");
  }
  if (r.file->direct()) {
    const uint64_t align = r.file->direct_alignment();
    if (align > kMaxDirectAlignmentBytes) {
      return InvalidArgument(SpanName(r) + ": O_DIRECT alignment " + std::to_string(align) +
                             " exceeds the supported " + std::to_string(kMaxDirectAlignmentBytes));
    }
    if (!IsAligned(r.offset, align) || !IsAligned(reinterpret_cast<uintptr_t>(r.buf), align)) {
      return InvalidArgument(SpanName(r) + ": O_DIRECT offset and buffer must be aligned to " +
                             std::to_string(align));
    }
    if (r.op == IoOp::kWrite && !IsAligned(r.length, align)) {
      return InvalidArgument(SpanName(r) + ": O_DIRECT write length must be a multiple of " +
                             std::to_string(align));
    }
  }
  return OkStatus();
}

namespace {

Status ShortStatus(const IoRequest& r, uint64_t done, std::string_view why) {
  return Status(StatusCode::kShortTransfer, SpanName(r) + ": moved " + std::to_string(done) +
                                                " of " + std::to_string(r.length) + " bytes (" +
                                                std::string(why) + ")");
}

}  // namespace

IoCompletion RunSpan(const IoRequest& r, uint32_t max_short_retries, BounceBlock& bounce,
                     Counters& counters) {
  const bool read = r.op == IoOp::kRead;
  const bool direct = r.file->direct();
  const uint64_t align = direct ? r.file->direct_alignment() : 1;
  const uint64_t body = HasDirectTail(r) ? AlignDown(r.length, align) : r.length;
  auto* buf = static_cast<uint8_t*>(r.buf);
  uint64_t done = 0;
  uint32_t shorts = 0;
  while (done < body) {
    const uint64_t chunk = std::min(body - done, kMaxChunkBytes);
    counters.native_ops.fetch_add(1, std::memory_order_relaxed);
    Result<uint64_t> n = read ? r.file->ReadAt(r.offset + done, buf + done, chunk)
                              : r.file->WriteAt(r.offset + done, buf + done, chunk);
    if (!n.ok()) return {n.status().WithContext(SpanName(r)), done};
    if (*n == 0 && read) return {ShortStatus(r, done, "end of file"), done};
    if (*n > chunk) return {Internal(SpanName(r) + ": file moved more bytes than asked"), done};
    done += *n;
    if (*n < chunk) {
      if (++shorts > max_short_retries) {
        return {ShortStatus(r, done, "short transfers exceeded the retry limit"), done};
      }
      counters.short_retries.fetch_add(1, std::memory_order_relaxed);
      // O_DIRECT continuations must start aligned: redo the partial block (same bytes).
      done = AlignDown(done, align);
    }
  }
  if (body == r.length) return {OkStatus(), done};

  // O_DIRECT read with a partial last block: read the whole block into the bounce buffer.
  const uint64_t tail = r.length - body;
  uint64_t got = 0;
  while (got < tail) {
    counters.native_ops.fetch_add(1, std::memory_order_relaxed);
    Result<uint64_t> n = r.file->ReadAt(r.offset + body, bounce.data, align);
    if (!n.ok()) return {n.status().WithContext(SpanName(r)), done};
    got = *n;
    if (got >= tail) break;
    if (got == 0 || ++shorts > max_short_retries) {
      std::memcpy(buf + body, bounce.data, got);
      return {ShortStatus(r, done + got,
                          got == 0 ? "end of file"
                                   : "short transfers exceeded "
                                     "the retry limit"),
              done + got};
    }
    counters.short_retries.fetch_add(1, std::memory_order_relaxed);
  }
  std::memcpy(buf + body, bounce.data, tail);
  return {OkStatus(), r.length};
}

}  // namespace rangekv::io_internal
