// The `posix` engine: a fixed pool of threads, each taking one span at a time from the shared
// queue and running it with pread/pwrite through File::ReadAt/WriteAt. Spans in flight are
// bounded by the worker count; page-cache hits are copied by as many threads as there are
// workers (the warm path wants several threads, see io-layer.md 4.7).
#include <memory>
#include <thread>
#include <vector>

#include "io/io_internal.h"

namespace rangekv::io_internal {
namespace {

class PosixEngine final : public IoEngine {
 public:
  explicit PosixEngine(const IoEngineOptions& options)
      : options_(options), queue_(options.max_queued_batches, options.split_bytes, &counters_) {
    workers_.reserve(options.workers);
    for (uint32_t i = 0; i < options.workers; ++i) workers_.emplace_back([this] { Run(); });
  }

  ~PosixEngine() override {
    queue_.DrainAndStop();
    for (auto& t : workers_) t.join();
  }

  IoEngineKind kind() const override { return IoEngineKind::kPosix; }

  IoEngineCaps caps() const override {
    return IoEngineCaps{
        .device_memory = false,
        .async = true,
        .batch = true,
        .registered_buffers = false,
        .fixed_files = false,
        .direct_io = true,
        .files_without_fd = true,
        .max_inflight_spans = options_.workers,
    };
  }

  IoEngineStats stats() const override { return counters_.Snapshot(); }
  uint64_t split_bytes() const override { return options_.split_bytes; }

  // pread/pwrite have nothing to pre-register; accepted so callers need no special case.
  Status RegisterBuffers(std::span<const IoBuffer>) override { return OkStatus(); }
  Status RegisterFiles(std::span<File* const>) override { return OkStatus(); }

  Status Submit(IoBatch& batch) override { return queue_.Submit(batch); }
  void SetConcurrencyLimit(uint32_t limit) override { queue_.SetTakeLimit(limit); }
  bool SetReadGate(std::shared_ptr<ReadGate> gate) override {
    gate_.Set(std::move(gate));
    return true;
  }

 private:
  void Run() {
    BounceBlock bounce;
    SpanRef ref;
    while (queue_.Take(&ref, SpanQueue::Block::kYes)) {
      const IoRequest r = SpanQueue::Request(ref);
      Status valid = ValidateSpan(r);
      if (!valid.ok()) {
        queue_.Complete(ref, {std::move(valid), 0});
        continue;
      }
      queue_.Complete(ref, gate_.Pass(r.op, [&] {
        return RunSpan(r, options_.max_short_retries, bounce, counters_);
      }));
    }
  }

  const IoEngineOptions options_;
  Counters counters_;
  SpanQueue queue_;
  ReadGateSlot gate_;
  std::vector<std::thread> workers_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> MakePosixEngine(const IoEngineOptions& options) {
  return std::unique_ptr<IoEngine>(new PosixEngine(options));
}

}  // namespace rangekv::io_internal
