#include "testing/jitter_env.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "testing/split_mix.h"

namespace rangekv::testing {

class JitterFile final : public FileWrapper {  // fd() -1: every op must pass the delay
 public:
  JitterFile(JitterEnv* env, std::unique_ptr<File> base)
      : FileWrapper(std::move(base)), env_(env) {}
  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    env_->Delay();
    return base().ReadAt(offset, buf, size);
  }
  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    env_->Delay();
    return base().WriteAt(offset, buf, size);
  }

 private:
  JitterEnv* env_;
};

void JitterEnv::Delay() {
  if (max_delay_us_ == 0) return;
  uint64_t x = seed_ ^ (ops_.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull);
  std::this_thread::sleep_for(std::chrono::microseconds(SplitMix(x) % (max_delay_us_ + 1)));
}

Result<std::unique_ptr<File>> JitterEnv::OpenFile(const std::string& path,
                                                  const FileOptions& options) {
  RANGEKV_ASSIGN_OR_RETURN(auto f, EnvWrapper::OpenFile(path, options));
  return std::unique_ptr<File>(new JitterFile(this, std::move(f)));
}

Result<std::unique_ptr<File>> JitterEnv::CreateFile(const std::string& path,
                                                    const FileOptions& options) {
  RANGEKV_ASSIGN_OR_RETURN(auto f, EnvWrapper::CreateFile(path, options));
  return std::unique_ptr<File>(new JitterFile(this, std::move(f)));
}

}  // namespace rangekv::testing
