// CudaDevice (see cuda_device.h). Compiled only when RANGEKV_HAVE_CUDA; linked against the
// static CUDA runtime.
#include "device/cuda_device.h"

#include <cuda.h>  // driver types and flags for stream memory ops; no libcuda link dependency
#include <cuda_runtime_api.h>
#include <atomic>
#include <cstring>
#include <string>

#include "base/host_memory.h"
#include "base/log.h"
#include "base/units.h"
#include "kernels/cuda_kernels.h"

namespace rangekv {
namespace {

Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return OkStatus();
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case cudaErrorMemoryAllocation:
      code = StatusCode::kResourceExhausted;
      break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      code = StatusCode::kInvalidArgument;
      break;
    case cudaErrorHostMemoryAlreadyRegistered:
      code = StatusCode::kAlreadyExists;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      code = StatusCode::kNotSupported;
      break;
    default:
      break;
  }
  return Status(code, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

// cuStreamWaitValue32 / cuStreamWriteValue32 (the _v2 ABI, CUDA >= 11.7).
using StreamValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct StreamMemOps {
  StreamValue32Fn wait = nullptr;
  StreamValue32Fn write = nullptr;
  bool usable() const { return wait != nullptr && write != nullptr; }
};

StreamMemOps LoadStreamMemOps(std::string* why) {
  StreamMemOps ops;
  for (auto [name, slot] : {std::pair{"cuStreamWaitValue32", &ops.wait},
                            std::pair{"cuStreamWriteValue32", &ops.write}}) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || fn == nullptr || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      *why = std::string("driver entry point ") + name + " not available";
      return {};
    }
    *slot = reinterpret_cast<StreamValue32Fn>(fn);
  }
  return ops;
}

class CudaDevice;

class CudaEvent final : public Event {
 public:
  CudaEvent(const Device* device, int ordinal, cudaEvent_t event)
      : Event(device), ordinal_(ordinal), event_(event) {}
  ~CudaEvent() override {
    cudaSetDevice(ordinal_);
    const cudaError_t err = cudaEventDestroy(event_);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaEventDestroy").ToString());
  }

  Result<bool> Query() override {
    RANGEKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return CudaStatus(err, "cudaEventQuery");
  }
  Status Synchronize() override {
    RANGEKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  void* native_handle() const override { return event_; }
  cudaEvent_t event() const { return event_; }

 private:
  const int ordinal_;
  const cudaEvent_t event_;
};

// A 32-bit word of mapped pinned host memory: the host writes it directly, streams wait on
// and write it through its device alias.
class CudaFlag final : public DeviceFlag {
 public:
  CudaFlag(const Device* device, uint32_t* host, CUdeviceptr device_ptr)
      : DeviceFlag(device), host_(host), device_ptr_(device_ptr) {}
  ~CudaFlag() override {
    const cudaError_t err = cudaFreeHost(host_);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaFreeHost").ToString());
  }
  void Set(uint32_t value) override {
    // Make the host's earlier writes visible before the GPU can observe the flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    __atomic_store_n(host_, value, __ATOMIC_RELEASE);
  }
  uint32_t Get() const override { return __atomic_load_n(host_, __ATOMIC_ACQUIRE); }
  CUdeviceptr device_ptr() const { return device_ptr_; }

 private:
  uint32_t* const host_;
  const CUdeviceptr device_ptr_;
};

class CudaStream final : public Stream {
 public:
  enum class Ownership : uint8_t { kOwned, kBorrowed };

  CudaStream(const Device* device, int ordinal, cudaStream_t stream, Ownership ownership,
             const StreamMemOps& mem_ops)
      : Stream(device),
        ordinal_(ordinal),
        stream_(stream),
        ownership_(ownership),
        mem_ops_(mem_ops) {}

  ~CudaStream() override {
    if (ownership_ == Ownership::kBorrowed) return;
    cudaSetDevice(ordinal_);
    cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      Log(LogLevel::kError,
          CudaStatus(err, "cudaStreamSynchronize at stream destruction").ToString());
    }
    err = cudaStreamDestroy(stream_);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaStreamDestroy").ToString());
  }

  Status CopyHostToDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "host-to-device copy");
  }
  Status CopyDeviceToHost(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "device-to-host copy");
  }
  Status CopyDeviceToDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, "device-to-device copy");
  }

  Status Fill(void* dst, uint8_t value, uint64_t bytes) override {
    if (bytes == 0) return OkStatus();
    if (dst == nullptr) return InvalidArgument("fill of a null pointer");
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaMemsetAsync(dst, value, bytes, stream_), "cudaMemsetAsync");
  }

  Status Record(Event& event) override {
    if (event.device() != device()) return InvalidArgument("event of another device");
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaEventRecord(static_cast<CudaEvent&>(event).event(), stream_),
                      "cudaEventRecord");
  }

  Status WaitEvent(const Event& event) override {
    if (event.device() != device()) return InvalidArgument("event of another device");
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaStreamWaitEvent(stream_, static_cast<const CudaEvent&>(event).event(), 0),
                      "cudaStreamWaitEvent");
  }

  Status AddHostCallback(HostFn fn, void* arg) override {
    if (fn == nullptr) return InvalidArgument("null host callback");
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaLaunchHostFunc(stream_, fn, arg), "cudaLaunchHostFunc");
  }

  Status WaitFlag(const DeviceFlag& flag, uint32_t value) override {
    if (flag.device() != device()) return InvalidArgument("flag of another device");
    if (!mem_ops_.usable()) return {StatusCode::kUnimplemented, "no stream memory operations"};
    RANGEKV_RETURN_IF_ERROR(Activate());
    const CUresult r = mem_ops_.wait(reinterpret_cast<CUstream>(stream_),
                                     static_cast<const CudaFlag&>(flag).device_ptr(), value,
                                     CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) return Internal("cuStreamWaitValue32 failed: " + std::to_string(r));
    return OkStatus();
  }

  Status WriteFlag(DeviceFlag& flag, uint32_t value) override {
    if (flag.device() != device()) return InvalidArgument("flag of another device");
    if (!mem_ops_.usable()) return {StatusCode::kUnimplemented, "no stream memory operations"};
    RANGEKV_RETURN_IF_ERROR(Activate());
    // Default flags: the write is preceded by a memory fence, so a stream that waits on the
    // flag sees the results of this stream's earlier work.
    const CUresult r = mem_ops_.write(reinterpret_cast<CUstream>(stream_),
                                      static_cast<CudaFlag&>(flag).device_ptr(), value,
                                      CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) return Internal("cuStreamWriteValue32 failed: " + std::to_string(r));
    return OkStatus();
  }

  Status Scatter(const kernels::ScatterArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateScatterArgs(args));
    if (args.num_tokens == 0) return OkStatus();
    RANGEKV_RETURN_IF_ERROR(Activate());
    (void)cudaGetLastError();  // so the launch check below reports this launch only
    return CudaStatus(kernels::LaunchScatter(args, stream_), "scatter launch");
  }

  Status Gather(const kernels::GatherArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateGatherArgs(args));
    if (args.num_tokens == 0) return OkStatus();
    RANGEKV_RETURN_IF_ERROR(Activate());
    (void)cudaGetLastError();
    return CudaStatus(kernels::LaunchGather(args, stream_), "gather launch");
  }

  Status Digest(const kernels::DigestArgs& args) override {
    RANGEKV_RETURN_IF_ERROR(kernels::ValidateDigestArgs(args));
    RANGEKV_RETURN_IF_ERROR(Activate());
    (void)cudaGetLastError();
    return CudaStatus(kernels::LaunchSpanDigest(args, stream_), "digest launch");
  }

  Status Synchronize() override {
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void* native_handle() const override { return stream_; }

 private:
  Status Activate() const { return CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"); }

  Status Copy(void* dst, const void* src, uint64_t bytes, const char* what) {
    if (bytes == 0) return OkStatus();
    if (dst == nullptr || src == nullptr) {
      return InvalidArgument(std::string(what) + " with a null pointer");
    }
    RANGEKV_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), what);
  }

  const int ordinal_;
  const cudaStream_t stream_;
  const Ownership ownership_;
  const StreamMemOps mem_ops_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, DeviceCapabilities caps, StreamMemOps mem_ops)
      : ordinal_(ordinal), caps_(std::move(caps)), mem_ops_(mem_ops) {}

  const DeviceCapabilities& capabilities() const override { return caps_; }

  Result<DeviceBuffer> AllocateDevice(uint64_t bytes) override {
    if (bytes == 0) return InvalidArgument("zero-byte device allocation");
    RANGEKV_RETURN_IF_ERROR(Activate());
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaStatus(err, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    }
    return WrapDeviceBuffer(p, bytes);
  }

  Result<PinnedHostBuffer> AllocatePinnedHost(uint64_t bytes) override {
    if (bytes == 0) return InvalidArgument("zero-byte pinned allocation");
    const uint64_t mapped = AlignUp(bytes, PageBytes());
    // Huge pages (base/host_memory.h), faulted in before registration. Pinned staging is where
    // O_DIRECT reads land; pages faulted in by cudaHostRegister's pinning are scattered 4 KiB
    // frames, so a 32 MiB read went out as ~1 MiB requests, and the H200 machine's virtio disk
    // read at 0.65 of its ceiling; with 2 MiB pages 0.89-0.97 (docs/benchmarks.md, "The H200's
    // virtio disk: reads cut into 1 MiB requests"). Without transparent huge pages the touch
    // alone still faults the pages in before they are pinned.
    RANGEKV_ASSIGN_OR_RETURN(uint8_t * p, MapIoMemory(bytes, "pinned host memory"));
    std::memset(p, 0, mapped);
    Status s = Activate();
    // Mapped: with unified addressing the host pointer is then usable in kernels too
    // (capabilities().kernels_access_pinned_host).
    if (s.ok()) {
      s = CudaStatus(cudaHostRegister(p, mapped, cudaHostRegisterPortable | cudaHostRegisterMapped),
                     "cudaHostRegister of " + std::to_string(mapped) + " bytes");
    }
    if (!s.ok()) {
      (void)cudaGetLastError();
      UnmapIoMemory(p, mapped);
      return s;
    }
    return WrapPinnedHost(static_cast<uint8_t*>(p), mapped);
  }

  Result<HostRegistration> RegisterHostMemory(void* data, uint64_t bytes) override {
    if (data == nullptr || bytes == 0) {
      return InvalidArgument("registration of a null or empty host range");
    }
    RANGEKV_RETURN_IF_ERROR(Activate());
    const cudaError_t err = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaStatus(err, "cudaHostRegister");
    }
    return WrapRegistration(data, bytes);
  }

  Result<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) override {
    RANGEKV_RETURN_IF_ERROR(Activate());
    int least = 0;
    int greatest = 0;
    RANGEKV_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                                       "cudaDeviceGetStreamPriorityRange"));
    const int priority = options.priority == StreamPriority::kHigh ? greatest : least;
    cudaStream_t s = nullptr;
    RANGEKV_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority), "cudaStreamCreate"));
    return std::unique_ptr<Stream>(
        new CudaStream(this, ordinal_, s, CudaStream::Ownership::kOwned, mem_ops_));
  }

  Result<std::unique_ptr<Stream>> WrapNativeStream(void* native_stream) override {
    return std::unique_ptr<Stream>(new CudaStream(this, ordinal_,
                                                  static_cast<cudaStream_t>(native_stream),
                                                  CudaStream::Ownership::kBorrowed, mem_ops_));
  }

  Result<std::unique_ptr<Event>> CreateEvent(const EventOptions& options) override {
    RANGEKV_RETURN_IF_ERROR(Activate());
    unsigned flags = cudaEventDefault;
    if (options.timing == EventTiming::kDisabled) flags |= cudaEventDisableTiming;
    if (options.host_wait == HostWait::kBlocking) flags |= cudaEventBlockingSync;
    cudaEvent_t e = nullptr;
    RANGEKV_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, flags), "cudaEventCreate"));
    return std::unique_ptr<Event>(new CudaEvent(this, ordinal_, e));
  }

  Result<std::unique_ptr<DeviceFlag>> CreateFlag() override {
    RANGEKV_RETURN_IF_ERROR(Activate());
    void* host = nullptr;
    RANGEKV_RETURN_IF_ERROR(CudaStatus(
        cudaHostAlloc(&host, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc for a flag"));
    *static_cast<volatile uint32_t*>(host) = 0;
    void* device_alias = nullptr;
    const cudaError_t err = cudaHostGetDevicePointer(&device_alias, host, 0);
    if (err != cudaSuccess) {
      cudaFreeHost(host);
      return CudaStatus(err, "cudaHostGetDevicePointer for a flag");
    }
    return std::unique_ptr<DeviceFlag>(new CudaFlag(this, static_cast<uint32_t*>(host),
                                                    reinterpret_cast<CUdeviceptr>(device_alias)));
  }

  Result<double> ElapsedMs(const Event& start, const Event& end) override {
    if (start.device() != this || end.device() != this) {
      return InvalidArgument("elapsed time between events of another device");
    }
    RANGEKV_RETURN_IF_ERROR(Activate());
    float ms = 0;
    const cudaError_t err = cudaEventElapsedTime(&ms, static_cast<const CudaEvent&>(start).event(),
                                                 static_cast<const CudaEvent&>(end).event());
    if (err == cudaErrorNotReady || err == cudaErrorInvalidResourceHandle) {
      (void)cudaGetLastError();
      return FailedPrecondition(
          "events are pending, were never recorded, or were created without timing");
    }
    RANGEKV_RETURN_IF_ERROR(CudaStatus(err, "cudaEventElapsedTime"));
    return static_cast<double>(ms);
  }

  bool IsHostAccessible(const void* p) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return true;  // unknown to CUDA: plain host memory
    }
    return attr.type != cudaMemoryTypeDevice;
  }

  Status Activate() const { return CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"); }

 private:
  void FreeDevice(void* data, uint64_t) override {
    cudaSetDevice(ordinal_);
    const cudaError_t err = cudaFree(data);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaFree").ToString());
  }
  void FreePinnedHost(uint8_t* data, uint64_t bytes) override {
    cudaSetDevice(ordinal_);
    const cudaError_t err = cudaHostUnregister(data);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaHostUnregister").ToString());
    UnmapIoMemory(data, bytes);
  }
  void UnregisterHostMemory(void* data, uint64_t) override {
    cudaSetDevice(ordinal_);
    const cudaError_t err = cudaHostUnregister(data);
    if (err != cudaSuccess) Log(LogLevel::kError, CudaStatus(err, "cudaHostUnregister").ToString());
  }

  const int ordinal_;
  const DeviceCapabilities caps_;
  const StreamMemOps mem_ops_;
};

// Runs a write-then-wait round trip through a flag on a scratch stream: the only reliable way
// to learn that stream memory operations work on this device and driver.
Status ProbeStreamMemOps(const StreamMemOps& ops) {
  void* host = nullptr;
  RANGEKV_RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&host, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
      "cudaHostAlloc"));
  *static_cast<volatile uint32_t*>(host) = 0;
  void* alias = nullptr;
  cudaStream_t s = nullptr;
  Status status = CudaStatus(cudaHostGetDevicePointer(&alias, host, 0), "cudaHostGetDevicePointer");
  if (status.ok()) {
    status = CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  if (status.ok()) {
    const CUdeviceptr d = reinterpret_cast<CUdeviceptr>(alias);
    CUresult r = ops.write(reinterpret_cast<CUstream>(s), d, 7, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r == CUDA_SUCCESS) {
      r = ops.wait(reinterpret_cast<CUstream>(s), d, 7, CU_STREAM_WAIT_VALUE_GEQ);
    }
    if (r != CUDA_SUCCESS) {
      status = NotSupported("stream memory operation failed with CUresult " + std::to_string(r));
    } else {
      status = CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (status.ok() && *static_cast<volatile uint32_t*>(host) != 7) {
        status = NotSupported("cuStreamWriteValue32 did not reach host memory");
      }
    }
  }
  if (s != nullptr) cudaStreamDestroy(s);
  cudaFreeHost(host);
  (void)cudaGetLastError();
  return status;
}

}  // namespace

Result<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    Status s = CudaStatus(err, "cudaGetDeviceCount");
    return NotSupported("no usable CUDA driver or device: " + s.message());
  }
  if (ordinal < 0 || ordinal >= count) {
    return NotSupported("CUDA device " + std::to_string(ordinal) + " requested, " +
                        std::to_string(count) + " present");
  }
  RANGEKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaDeviceProp prop{};
  RANGEKV_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));

  DeviceCapabilities caps;
  caps.kind = DeviceKind::kCuda;
  caps.name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
              std::to_string(prop.minor) + ", device " + std::to_string(ordinal) + ")";
  caps.ordinal = ordinal;
  caps.device_memory_host_accessible = false;
  caps.device_memory_bytes = prop.totalGlobalMem;
  caps.multiprocessors = static_cast<uint32_t>(prop.multiProcessorCount);
  caps.pinned_alignment_bytes = PageBytes();
  int host_pointer_ok = 0;
  if (cudaDeviceGetAttribute(&host_pointer_ok, cudaDevAttrCanUseHostPointerForRegisteredMem,
                             ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    host_pointer_ok = 0;
  }
  caps.kernels_access_pinned_host = host_pointer_ok != 0 && prop.unifiedAddressing != 0;

  std::string why;
  StreamMemOps ops = LoadStreamMemOps(&why);
  if (ops.usable()) {
    Status probe = ProbeStreamMemOps(ops);
    if (!probe.ok()) {
      why = probe.ToString();
      ops = {};
    }
  }
  caps.stream_memory_ops = ops.usable();
  if (!ops.usable()) {
    Log(LogLevel::kInfo, "cuda device " + std::to_string(ordinal) +
                             ": stream memory operations unavailable (" + why + ")");
  }
  return std::unique_ptr<Device>(new CudaDevice(ordinal, std::move(caps), ops));
}

}  // namespace rangekv
