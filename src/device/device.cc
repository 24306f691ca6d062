// The RAII types of device.h and MakeDevice(): the one place that knows whether CUDA was
// compiled in.
#include "device/device.h"

#include <utility>

#include "base/log.h"
#include "device/host_device.h"
#if RANGEKV_HAVE_CUDA
#include "device/cuda_device.h"
#endif

namespace rangekv {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kAuto:
      return "auto";
  }
  return "unknown";
}

// ---- RAII types ----

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_bytes_(std::exchange(o.size_bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_bytes_ = std::exchange(o.size_bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() {
  if (data_ != nullptr) owner_->FreeDevice(data_, size_bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_bytes_(std::exchange(o.size_bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_bytes_ = std::exchange(o.size_bytes_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() { reset(); }

void PinnedHostBuffer::reset() {
  if (data_ != nullptr) owner_->FreePinnedHost(data_, size_bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
}

HostRegistration::HostRegistration(HostRegistration&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_bytes_(std::exchange(o.size_bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_bytes_ = std::exchange(o.size_bytes_, 0);
  }
  return *this;
}

HostRegistration::~HostRegistration() { reset(); }

void HostRegistration::reset() {
  if (data_ != nullptr) owner_->UnregisterHostMemory(data_, size_bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
}

// ---- factory ----

bool CudaCompiledIn() {
#if RANGEKV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

Result<std::unique_ptr<Device>> MakeCuda(int ordinal) {
#if RANGEKV_HAVE_CUDA
  return CreateCudaDevice(ordinal);
#else
  (void)ordinal;
  return Unavailable("CUDA device requested, but this build has no CUDA support");
#endif
}

}  // namespace

Result<std::unique_ptr<Device>> MakeDevice(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceKind::kHost:
      return CreateHostDevice(options.host);
    case DeviceKind::kCuda:
      return MakeCuda(options.ordinal);
    case DeviceKind::kAuto: {
      Result<std::unique_ptr<Device>> cuda = MakeCuda(options.ordinal);
      if (cuda.ok()) return cuda;
      Log(LogLevel::kInfo, "device: using the host device (" + cuda.status().ToString() + ")");
      return CreateHostDevice(options.host);
    }
  }
  return InvalidArgument("unknown device kind");
}

}  // namespace rangekv
