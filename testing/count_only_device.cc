#include "testing/count_only_device.h"

#include <cstdint>
#include <memory>
#include <utility>

#include "base/check.h"
#include "device/host_device.h"
#include "kernels/paged_kv.h"

namespace rangekv::testing {

namespace {

class CountOnlyStream final : public Stream {
 public:
  CountOnlyStream(const Device* outer, std::unique_ptr<Stream> inner)
      : Stream(outer), inner_(std::move(inner)) {}
  Status CopyHostToDevice(void* d, const void* s, uint64_t n) override {
    return inner_->CopyHostToDevice(d, s, n);
  }
  Status CopyDeviceToHost(void* d, const void* s, uint64_t n) override {
    return inner_->CopyDeviceToHost(d, s, n);
  }
  Status CopyDeviceToDevice(void* d, const void* s, uint64_t n) override {
    return inner_->CopyDeviceToDevice(d, s, n);
  }
  Status Fill(void* d, uint8_t v, uint64_t n) override { return inner_->Fill(d, v, n); }
  Status Record(Event& e) override { return inner_->Record(e); }
  Status WaitEvent(const Event& e) override { return inner_->WaitEvent(e); }
  Status AddHostCallback(HostFn fn, void* arg) override { return inner_->AddHostCallback(fn, arg); }
  Status WaitFlag(const DeviceFlag& f, uint32_t v) override { return inner_->WaitFlag(f, v); }
  Status WriteFlag(DeviceFlag& f, uint32_t v) override { return inner_->WriteFlag(f, v); }
  // The kernels: validated exactly as the real ones, then nothing moves.
  Status Scatter(const kernels::ScatterArgs& args) override {
    return kernels::ValidateScatterArgs(args);
  }
  Status Gather(const kernels::GatherArgs& args) override {
    return kernels::ValidateGatherArgs(args);
  }
  // Digests of bytes nobody moved would be noise: every digest is 0 (written in stream order),
  // so stores record zeros and restores compare zeros.
  Status Digest(const kernels::DigestArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateDigestArgs(args));
    return inner_->Fill(args.digests, 0, uint64_t{args.num_spans} * sizeof(uint64_t));
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  void* native_handle() const override { return inner_->native_handle(); }

 private:
  std::unique_ptr<Stream> inner_;
};

class CountOnlyDevice final : public Device {
 public:
  explicit CountOnlyDevice(std::unique_ptr<Device> inner)
      : inner_(std::move(inner)), caps_(inner_->capabilities()) {
    caps_.name = "host (count only: kernels move nothing)";
  }
  const DeviceCapabilities& capabilities() const override { return caps_; }
  Result<DeviceBuffer> AllocateDevice(uint64_t bytes) override {
    return inner_->AllocateDevice(bytes);
  }
  Result<PinnedHostBuffer> AllocatePinnedHost(uint64_t bytes) override {
    return inner_->AllocatePinnedHost(bytes);
  }
  Result<HostRegistration> RegisterHostMemory(void* data, uint64_t bytes) override {
    return inner_->RegisterHostMemory(data, bytes);
  }
  Result<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) override {
    RANGEKV_ASSIGN_OR_RETURN(auto inner, inner_->CreateStream(options));
    return std::unique_ptr<Stream>(new CountOnlyStream(this, std::move(inner)));
  }
  Result<std::unique_ptr<Stream>> WrapNativeStream(void* native_stream) override {
    RANGEKV_ASSIGN_OR_RETURN(auto inner, inner_->WrapNativeStream(native_stream));
    return std::unique_ptr<Stream>(new CountOnlyStream(this, std::move(inner)));
  }
  Result<std::unique_ptr<Event>> CreateEvent(const EventOptions& options) override {
    return inner_->CreateEvent(options);
  }
  Result<std::unique_ptr<DeviceFlag>> CreateFlag() override { return inner_->CreateFlag(); }
  Result<double> ElapsedMs(const Event& a, const Event& b) override {
    return inner_->ElapsedMs(a, b);
  }
  bool IsHostAccessible(const void* p) const override { return inner_->IsHostAccessible(p); }

 private:
  // Every buffer belongs to the inner device, which frees it.
  void FreeDevice(void*, uint64_t) override { RANGEKV_CHECK(false); }
  void FreePinnedHost(uint8_t*, uint64_t) override { RANGEKV_CHECK(false); }
  void UnregisterHostMemory(void*, uint64_t) override { RANGEKV_CHECK(false); }

  std::unique_ptr<Device> inner_;
  DeviceCapabilities caps_;
};

}  // namespace

Result<std::unique_ptr<Device>> MakeCountOnlyDevice() {
  RANGEKV_ASSIGN_OR_RETURN(auto inner, CreateHostDevice());
  return std::unique_ptr<Device>(new CountOnlyDevice(std::move(inner)));
}

}  // namespace rangekv::testing
