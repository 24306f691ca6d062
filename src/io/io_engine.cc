#include "io/io_engine.h"

#include <string>
#include <utility>

#include "base/check.h"
#include "io/cufile_engine.h"
#include "io/io_internal.h"

namespace rangekv {

IoBatch::IoBatch(uint32_t capacity)
    : requests_(capacity),
      completions_(capacity),
      pieces_(capacity, 1),
      piece_bytes_(capacity, 0),
      pieces_left_(new std::atomic<uint32_t>[capacity]),
      failed_piece_(capacity, 0) {}

IoBatch::~IoBatch() { RANGEKV_CHECK(state_.load(std::memory_order_acquire) != State::kInFlight); }

Status IoBatch::Add(const IoRequest& request) {
  if (state_.load(std::memory_order_acquire) == State::kInFlight) {
    return FailedPrecondition("IoBatch::Add while the batch is in flight");
  }
  if (size_ == requests_.size()) {
    return ResourceExhausted("IoBatch full (" + std::to_string(requests_.size()) + " spans)");
  }
  requests_[size_++] = request;
  return OkStatus();
}

Status IoBatch::Clear() {
  if (state_.load(std::memory_order_acquire) == State::kInFlight) {
    return FailedPrecondition("IoBatch::Clear while the batch is in flight");
  }
  size_ = 0;
  state_.store(State::kIdle, std::memory_order_release);
  return OkStatus();
}

void IoBatch::SetCallback(std::function<void(IoBatch&)> on_complete) {
  RANGEKV_CHECK(state_.load(std::memory_order_acquire) != State::kInFlight);
  on_complete_ = std::move(on_complete);
}

void IoBatch::Wait() {
  MutexLock lock(mu_);
  cv_.Wait(lock, [this] { return state_.load(std::memory_order_acquire) == State::kDone; });
}

Status IoBatch::status() const {
  for (uint32_t i = 0; i < size_; ++i) {
    if (!completions_[i].status.ok()) {
      return completions_[i].status.WithContext("span " + std::to_string(i) + " of " +
                                                std::to_string(size_));
    }
  }
  return OkStatus();
}

uint32_t IoBatch::failed_spans() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < size_; ++i) n += completions_[i].status.ok() ? 0 : 1;
  return n;
}

uint64_t IoBatch::bytes_moved() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < size_; ++i) n += completions_[i].bytes;
  return n;
}

std::string_view IoEngineKindName(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::kPosix:
      return "posix";
    case IoEngineKind::kUring:
      return "uring";
    case IoEngineKind::kCuFile:
      return "cufile";
  }
  return "unknown";
}

Result<IoEngineKind> ParseIoEngineKind(std::string_view name) {
  if (name == "posix") return IoEngineKind::kPosix;
  if (name == "uring") return IoEngineKind::kUring;
  if (name == "cufile") return IoEngineKind::kCuFile;
  return InvalidArgument("unknown I/O engine '" + std::string(name) + "' (posix, uring, cufile)");
}

Result<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind, const IoEngineOptions& options) {
  if (options.workers < 1 || options.workers > 256) {
    return InvalidArgument("IoEngineOptions::workers must be in [1, 256], got " +
                           std::to_string(options.workers));
  }
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return InvalidArgument("IoEngineOptions::queue_depth must be in [1, 4096], got " +
                           std::to_string(options.queue_depth));
  }
  if (options.max_queued_batches < 1) {
    return InvalidArgument("IoEngineOptions::max_queued_batches must be >= 1");
  }
  if (options.split_bytes != 0 &&
      (options.split_bytes < kMinSplitBytes || options.split_bytes > kMaxSplitBytes)) {
    return InvalidArgument("IoEngineOptions::split_bytes must be 0 or in [512, 1 GiB], got " +
                           std::to_string(options.split_bytes));
  }
  if (options.max_short_retries > 1000) {
    return InvalidArgument("IoEngineOptions::max_short_retries must be <= 1000, got " +
                           std::to_string(options.max_short_retries));
  }
  switch (kind) {
    case IoEngineKind::kPosix:
      return io_internal::MakePosixEngine(options);
    case IoEngineKind::kUring:
      return io_internal::MakeUringEngine(options);
    case IoEngineKind::kCuFile:
      return MakeCuFileEngine(options, CuFileSource{.library = options.cufile_library});
  }
  return InvalidArgument("unknown IoEngineKind");
}

}  // namespace rangekv
