#include "testing/gate_env.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace rangekv::testing {

class GatedFile final : public FileWrapper {  // fd() -1: every read must pass the gate
 public:
  GatedFile(GateEnv* env, std::unique_ptr<File> base) : FileWrapper(std::move(base)), env_(env) {}
  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    env_->Pass(path(), GateEnv::Op::kRead, offset, size);
    return base().ReadAt(offset, buf, size);
  }
  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    env_->Pass(path(), GateEnv::Op::kWrite, offset, size);
    return base().WriteAt(offset, buf, size);
  }

 private:
  GateEnv* env_;
};

void GateEnv::Close() {
  MutexLock l(mu_);
  closed_ = true;
}

void GateEnv::Open() {
  MutexLock l(mu_);
  closed_ = false;
  cv_.NotifyAll();
}

void GateEnv::WaitHeld(uint32_t n) {
  MutexLock l(mu_);
  cv_.Wait(l, [&]() REQUIRES(mu_) { return held_ >= n; });
}

uint32_t GateEnv::held() const {
  MutexLock l(mu_);
  return held_;
}

void GateEnv::Pass(const std::string& path, Op op, uint64_t offset, uint64_t size) {
  if (op != op_ || path.size() < suffix_.size() ||
      path.compare(path.size() - suffix_.size(), suffix_.size(), suffix_) != 0) {
    return;
  }
  const uint64_t end = length_ > UINT64_MAX - offset_ ? UINT64_MAX : offset_ + length_;
  if (offset + size <= offset_ || offset >= end) return;
  MutexLock l(mu_);
  if (!closed_) return;
  ++held_;
  cv_.NotifyAll();
  cv_.Wait(l, [&]() REQUIRES(mu_) { return !closed_; });
  --held_;
}

Result<std::unique_ptr<File>> GateEnv::Wrap(const std::string& path,
                                            Result<std::unique_ptr<File>> f) {
  (void)path;
  if (!f.ok()) return f.status();
  return std::unique_ptr<File>(new GatedFile(this, std::move(f).value()));
}

Result<std::unique_ptr<File>> GateEnv::OpenFile(const std::string& path,
                                                const FileOptions& options) {
  return Wrap(path, target()->OpenFile(path, options));
}

Result<std::unique_ptr<File>> GateEnv::CreateFile(const std::string& path,
                                                  const FileOptions& options) {
  return Wrap(path, target()->CreateFile(path, options));
}

}  // namespace rangekv::testing
