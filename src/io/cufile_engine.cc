#include "io/cufile_engine.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/units.h"
#include "io/io_internal.h"

namespace rangekv {
namespace {

using io_internal::BounceBlock;
using io_internal::Counters;
using io_internal::SpanQueue;
using io_internal::SpanRef;

struct RegisteredBuffer {
  uintptr_t begin;
  uintptr_t end;
};

struct FileHandle {
  const File* file;
  cufile::Handle handle;
};

class CuFileEngine final : public IoEngine {
 public:
  CuFileEngine(const IoEngineOptions& options, std::unique_ptr<cufile::Library> library,
               const cufile::Api& api, std::string mode)
      : options_(options),
        library_(std::move(library)),
        api_(api),
        mode_(std::move(mode)),
        queue_(options.max_queued_batches, options.split_bytes, &counters_) {
    workers_.reserve(options.workers);
    for (uint32_t i = 0; i < options.workers; ++i) workers_.emplace_back([this] { Run(); });
  }

  ~CuFileEngine() override {
    queue_.DrainAndStop();
    for (auto& t : workers_) t.join();
    DeregisterBuffers();
    DeregisterHandles();
    if (api_.cuFileDriverClose != nullptr) (void)api_.cuFileDriverClose();
  }

  IoEngineKind kind() const override { return IoEngineKind::kCuFile; }

  IoEngineCaps caps() const override {
    return IoEngineCaps{
        .device_memory = true,
        .async = true,
        .batch = true,
        .registered_buffers = true,
        .fixed_files = true,
        .direct_io = true,
        .files_without_fd = true,
        .max_inflight_spans = options_.workers,
        .buffers_registered = static_cast<uint32_t>(buffer_count_.load(std::memory_order_relaxed)),
        .files_registered = static_cast<uint32_t>(handle_count_.load(std::memory_order_relaxed)),
    };
  }

  IoEngineStats stats() const override { return counters_.Snapshot(); }
  uint64_t split_bytes() const override { return options_.split_bytes; }
  std::string Describe() const override { return "cufile (" + mode_ + ")"; }

  Status RegisterBuffers(std::span<const IoBuffer> buffers) override {
    return queue_.WhileIdle([&]() -> Status {
      DeregisterBuffers();
      for (const IoBuffer& b : buffers) {
        if (b.data == nullptr || b.bytes == 0) {
          DeregisterBuffers();
          return InvalidArgument("a registered buffer must be non-null and non-empty");
        }
        const cufile::Error e = api_.cuFileBufRegister(b.data, b.bytes, 0);
        if (e.err != cufile::kSuccess) {
          DeregisterBuffers();
          return ResourceExhausted("cuFileBufRegister of " + std::to_string(b.bytes) +
                                   " bytes failed: " + cufile::ErrorName(e) +
                                   " (running without registered buffers)");
        }
        const auto begin = reinterpret_cast<uintptr_t>(b.data);
        buffers_.push_back({begin, begin + b.bytes});
      }
      std::sort(
          buffers_.begin(), buffers_.end(),
          [](const RegisteredBuffer& a, const RegisteredBuffer& b) { return a.begin < b.begin; });
      buffer_count_.store(buffers_.size(), std::memory_order_relaxed);
      return OkStatus();
    });
  }

  Status RegisterFiles(std::span<File* const> files) override {
    return queue_.WhileIdle([&]() -> Status {
      DeregisterHandles();
      for (File* f : files) {
        if (f == nullptr || f->fd() < 0) continue;
        cufile::Descr d;
        d.type = cufile::kHandleTypeOpaqueFd;
        d.handle.fd = f->fd();
        cufile::Handle h = nullptr;
        const cufile::Error e = api_.cuFileHandleRegister(&h, &d);
        if (e.err != cufile::kSuccess) {
          DeregisterHandles();
          return NotSupported("cuFileHandleRegister(" + f->path() +
                              ") failed: " + cufile::ErrorName(e));
        }
        handles_.push_back({f, h});
      }
      std::sort(handles_.begin(), handles_.end(),
                [](const FileHandle& a, const FileHandle& b) { return a.file < b.file; });
      handle_count_.store(handles_.size(), std::memory_order_relaxed);
      return OkStatus();
    });
  }

  Status Submit(IoBatch& batch) override { return queue_.Submit(batch); }
  void SetConcurrencyLimit(uint32_t limit) override { queue_.SetTakeLimit(limit); }
  bool SetReadGate(std::shared_ptr<ReadGate> gate) override {
    gate_.Set(std::move(gate));
    return true;
  }

 private:
  void DeregisterBuffers() {
    for (const RegisteredBuffer& b : buffers_) {
      (void)api_.cuFileBufDeregister(reinterpret_cast<const void*>(b.begin));
    }
    buffers_.clear();
    buffer_count_.store(0, std::memory_order_relaxed);
  }

  void DeregisterHandles() {
    for (const FileHandle& h : handles_) api_.cuFileHandleDeregister(h.handle);
    handles_.clear();
    handle_count_.store(0, std::memory_order_relaxed);
  }

  // Tables change only while no batch is outstanding (WhileIdle); workers read them after
  // taking a span under the queue mutex, which orders the accesses.
  cufile::Handle FindHandle(const File* f) const {
    auto it = std::lower_bound(handles_.begin(), handles_.end(), f,
                               [](const FileHandle& a, const File* b) { return a.file < b; });
    return it != handles_.end() && it->file == f ? it->handle : nullptr;
  }

  // The registered buffer holding [buf, buf + length), as (base, offset); else (buf, 0).
  std::pair<void*, uint64_t> Locate(void* buf, uint64_t length) const {
    const auto p = reinterpret_cast<uintptr_t>(buf);
    auto it = std::upper_bound(buffers_.begin(), buffers_.end(), p,
                               [](uintptr_t v, const RegisteredBuffer& b) { return v < b.begin; });
    if (it != buffers_.begin()) {
      --it;
      if (p + length <= it->end) return {reinterpret_cast<void*>(it->begin), p - it->begin};
    }
    return {buf, 0};
  }

  void Run() {
    BounceBlock bounce;
    SpanRef ref;
    while (queue_.Take(&ref, SpanQueue::Block::kYes)) {
      const IoRequest r = SpanQueue::Request(ref);
      Status valid = io_internal::ValidateSpan(r);
      if (!valid.ok()) {
        queue_.Complete(ref, {std::move(valid), 0});
        continue;
      }
      cufile::Handle h = r.length == 0 ? nullptr : FindHandle(r.file);
      if (h == nullptr || io_internal::HasDirectTail(r)) {
        counters_.file_path_spans.fetch_add(1, std::memory_order_relaxed);
        queue_.Complete(ref, gate_.Pass(r.op, [&] {
          return io_internal::RunSpan(r, options_.max_short_retries, bounce, counters_);
        }));
        continue;
      }
      queue_.Complete(ref, gate_.Pass(r.op, [&] { return RunCuFile(r, h); }));
    }
  }

  // One span through cuFileRead/cuFileWrite, continuing short transfers like RunSpan.
  IoCompletion RunCuFile(const IoRequest& r, cufile::Handle h) {
    const bool read = r.op == IoOp::kRead;
    const uint64_t align = r.file->direct() ? r.file->direct_alignment() : 1;
    const auto [base, base_offset] = Locate(r.buf, r.length);
    uint64_t done = 0;
    uint32_t shorts = 0;
    auto short_status = [&](const char* why) {
      return Status(StatusCode::kShortTransfer,
                    io_internal::SpanName(r) + ": moved " + std::to_string(done) + " of " +
                        std::to_string(r.length) + " bytes (" + why + ")");
    };
    while (done < r.length) {
      const uint64_t chunk = std::min(r.length - done, io_internal::kMaxChunkBytes);
      counters_.native_ops.fetch_add(1, std::memory_order_relaxed);
      if (base != r.buf) counters_.fixed_buffer_ops.fetch_add(1, std::memory_order_relaxed);
      counters_.fixed_file_ops.fetch_add(1, std::memory_order_relaxed);
      const auto file_off = static_cast<off_t>(r.offset + done);
      const auto buf_off = static_cast<off_t>(base_offset + done);
      const ssize_t n = read ? api_.cuFileRead(h, base, chunk, file_off, buf_off)
                             : api_.cuFileWrite(h, base, chunk, file_off, buf_off);
      if (n < 0) {
        if (n == -1) return {ErrnoStatus(errno, io_internal::SpanName(r)), done};
        if (-n > cufile::kOpBaseError) {
          return {Status(StatusCode::kIoError, io_internal::SpanName(r) + ": cuFile error " +
                                                   cufile::ErrorName({static_cast<int>(-n), 0})),
                  done};
        }
        return {ErrnoStatus(static_cast<int>(-n), io_internal::SpanName(r)), done};
      }
      const auto m = static_cast<uint64_t>(n);
      if (m == 0 && read) return {short_status("end of file"), done};
      if (m > chunk)
        return {Internal(io_internal::SpanName(r) + ": cuFile moved more than asked"), done};
      done += m;
      if (m < chunk) {
        if (++shorts > options_.max_short_retries) {
          return {short_status("short transfers exceeded the retry limit"), done};
        }
        counters_.short_retries.fetch_add(1, std::memory_order_relaxed);
        done = AlignDown(done, align);
      }
    }
    return {OkStatus(), done};
  }

  const IoEngineOptions options_;
  std::unique_ptr<cufile::Library> library_;  // null when the table was injected
  const cufile::Api api_;
  const std::string mode_;
  Counters counters_;
  SpanQueue queue_;
  io_internal::ReadGateSlot gate_;
  std::vector<std::thread> workers_;
  std::vector<RegisteredBuffer> buffers_;  // sorted by begin
  std::vector<FileHandle> handles_;        // sorted by file
  std::atomic<size_t> buffer_count_{0};
  std::atomic<size_t> handle_count_{0};
};

}  // namespace

Result<std::unique_ptr<IoEngine>> MakeCuFileEngine(const IoEngineOptions& options,
                                                   const CuFileSource& source) {
  std::unique_ptr<cufile::Library> library;
  cufile::Api api;
  if (source.api != nullptr) {
    api = *source.api;
  } else {
    RANGEKV_ASSIGN_OR_RETURN(library, cufile::Library::Load(source.library));
    api = library->api();
  }
  if (api.cuFileDriverOpen == nullptr || api.cuFileHandleRegister == nullptr ||
      api.cuFileRead == nullptr || api.cuFileWrite == nullptr) {
    return NotSupported("cuFile function table incomplete");
  }
  const cufile::Error open = api.cuFileDriverOpen();
  if (open.err != cufile::kSuccess) {
    return NotSupported("cuFileDriverOpen failed: " + cufile::ErrorName(open));
  }
  std::string mode = "mode=unknown";
  if (api.cuFileDriverGetProperties != nullptr) {
    cufile::DrvProps props;
    std::memset(&props, 0, sizeof(props));
    const cufile::Error e = api.cuFileDriverGetProperties(&props);
    if (e.err == cufile::kSuccess) {
      const bool gds = props.nvfs.major_version != 0 || props.nvfs.minor_version != 0;
      mode = std::string(gds ? "mode=GDS" : "mode=compat") + ", nvfs " +
             std::to_string(props.nvfs.major_version) + "." +
             std::to_string(props.nvfs.minor_version);
    }
  }
  if (api.cuFileGetVersion != nullptr) {
    int version = 0;
    if (api.cuFileGetVersion(&version).err == cufile::kSuccess) {
      mode += ", version " + std::to_string(version);
    }
  }
  Log(LogLevel::kInfo, "cufile engine: driver open, " + mode);
  return std::unique_ptr<IoEngine>(new CuFileEngine(options, std::move(library), api, mode));
}

}  // namespace rangekv
