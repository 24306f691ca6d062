// JitterEnv: an Env whose reads and writes each sleep a seeded random delay first.
//
// Thread-safety: thread-safe (the op counter is atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rangekv/env.h"

namespace rangekv::testing {

// Wraps `base`: every ReadAt / WriteAt first sleeps a seeded pseudo-random 0..max_delay_us
// (a function of the seed and the op's sequence number). Not a sync point: it widens the windows
// in which concurrent requests interleave, so a stress test meets many orders; tests that use it
// assert outcomes, never timing.
class JitterEnv final : public EnvWrapper {
 public:
  JitterEnv(Env* base, uint64_t seed, uint32_t max_delay_us)
      : EnvWrapper(base), seed_(seed), max_delay_us_(max_delay_us) {}

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  void Delay();

 private:
  const uint64_t seed_;
  const uint32_t max_delay_us_;
  std::atomic<uint64_t> ops_{0};
};

}  // namespace rangekv::testing
