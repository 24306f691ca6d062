// GaugedFile: a File whose reads take a while and count how many run at once, for tests of
// concurrency caps (IoEngine::SetConcurrencyLimit, the restore pipeline's read share). It has no
// descriptor (fd() == -1), so io_uring runs its reads on its threads through ReadAt too.
// GaugingEnv opens every file of one name as a GaugedFile sharing one gauge.
//
// Thread-safety: ReadAt from any number of threads; the gauge is atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "rangekv/env.h"

namespace rangekv::testing {

struct ReadGauge {
  std::atomic<uint32_t> running{0};
  std::atomic<uint32_t> max{0};
  std::chrono::microseconds delay{3000};
  void Reset() { max.store(0); }
};

class GaugedFile final : public FileWrapper {
 public:
  GaugedFile(std::unique_ptr<File> base, ReadGauge* gauge)
      : FileWrapper(std::move(base)), gauge_(gauge) {}
  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    const uint32_t now = gauge_->running.fetch_add(1) + 1;
    uint32_t seen = gauge_->max.load();
    while (now > seen && !gauge_->max.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(gauge_->delay);
    auto r = base().ReadAt(offset, buf, size);
    gauge_->running.fetch_sub(1);
    return r;
  }

 private:
  ReadGauge* gauge_;
};

class GaugingEnv final : public EnvWrapper {
 public:
  // Files whose path ends with `suffix` are gauged by `gauge`.
  GaugingEnv(Env* target, std::string suffix, ReadGauge* gauge)
      : EnvWrapper(target), suffix_(std::move(suffix)), gauge_(gauge) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    return Wrap(path, EnvWrapper::OpenFile(path, options));
  }
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override {
    return Wrap(path, EnvWrapper::CreateFile(path, options));
  }

 private:
  Result<std::unique_ptr<File>> Wrap(const std::string& path,
                                     Result<std::unique_ptr<File>> file) const {
    if (!file.ok() || !path.ends_with(suffix_)) return file;
    return std::unique_ptr<File>(new GaugedFile(std::move(file).value(), gauge_));
  }
  std::string suffix_;
  ReadGauge* gauge_;
};

}  // namespace rangekv::testing
