// GateEnv: an Env whose reads (or writes) of chosen files block while its gate is closed (a sync
// point: tests hold reads in flight without sleeping), counting the readers it holds.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/thread_annotations.h"
#include "rangekv/env.h"

namespace rangekv::testing {

// Wraps `base`. While closed, every ReadAt (or WriteAt, per `op`) on a file whose path ends
// with `suffix` and whose range overlaps [offset, offset + length) blocks at the gate.
class GateEnv final : public EnvWrapper {
 public:
  enum class Op : uint8_t { kRead, kWrite };
  GateEnv(Env* base, std::string suffix, Op op = Op::kRead, uint64_t offset = 0,
          uint64_t length = UINT64_MAX)
      : EnvWrapper(base), suffix_(std::move(suffix)), op_(op), offset_(offset), length_(length) {}

  void Close();
  void Open();
  // Blocks until at least `n` readers are held at the closed gate.
  void WaitHeld(uint32_t n);
  uint32_t held() const;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;

 private:
  friend class GatedFile;
  void Pass(const std::string& path, Op op, uint64_t offset, uint64_t size);
  Result<std::unique_ptr<File>> Wrap(const std::string& path, Result<std::unique_ptr<File>> f);

  std::string suffix_;
  Op op_;
  uint64_t offset_;
  uint64_t length_;
  mutable Mutex mu_;
  CondVar cv_;
  bool closed_ GUARDED_BY(mu_) = false;
  uint32_t held_ GUARDED_BY(mu_) = 0;
};

}  // namespace rangekv::testing
