// The device seam: the narrow set of operations the transfer engine needs from an accelerator
// (memory, streams, events, copies, host callbacks, flags, and launches of RangeKV's own
// kernels), with two implementations:
//   - HostDevice (host_device.h): "device memory" is host memory, every stream is a FIFO
//     worker thread, events are completion sequence numbers. Runs everywhere; CI and the
//     ThreadSanitizer build run the whole pipeline on it.
//   - CudaDevice (cuda_device.h): a real GPU through the CUDA runtime (linked statically;
//     the binary starts on machines without a GPU or driver, where creation fails with
//     kNotSupported).
// MakeDevice() is the only code that knows whether CUDA was compiled in.
//
// Semantics follow CUDA streams and events, so code tested on HostDevice behaves the same on
// a GPU:
//   - Work enqueued on one stream runs in enqueue order; streams run independently unless
//     ordered by WaitEvent / WaitFlag.
//   - Record(event) captures all work enqueued on the stream so far; the event completes when
//     that work has completed. Recording again re-captures. An event never recorded counts as
//     complete. WaitEvent captures the event's most recent Record at the time of the call.
//   - Enqueue calls return after enqueueing; their Status covers argument validation and the
//     enqueue itself. Execution errors (a CUDA fault) surface at Synchronize() or Event queries.
//   - Buffers named by an enqueued operation belong to that operation until its completion is
//     proven (an event recorded after it completed, a host callback after it ran, a stream
//     Synchronize()). Freeing or reusing them earlier is a bug HostDevice's jitter option is
//     designed to expose.
//   - Queues are bounded: an enqueue on a full stream blocks until the stream drains one
//     operation (as a CUDA launch queue does).
//
// Memory. DeviceBuffer memory is addressed by raw pointers (kernels take raw pointers and
// strides). Whether host code may dereference it is a property of the device
// (capabilities().device_memory_host_accessible: HostDevice yes, CUDA no); engine code must
// copy to pinned host memory to inspect it, so that it runs unchanged on a GPU.
//
// Thread-safety: Device, Stream, Event and DeviceFlag methods may be called from any thread.
// Several threads enqueueing on one stream are serialised in an unspecified order. RAII types
// (DeviceBuffer, PinnedHostBuffer, HostRegistration) are move-only values; one owner at a time.
//
// Lifetime: the Device must outlive every object it created. Destroying a Stream waits for
// the work enqueued on it. Destroying an Event or DeviceFlag that enqueued work still refers
// to is a bug (REQUIRES the referring work to have completed).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/paged_kv.h"
#include "kernels/span_digest.h"
#include "rangekv/status.h"

namespace rangekv {

class Device;

enum class DeviceKind : uint8_t {
  kHost,  // HostDevice
  kCuda,  // CudaDevice
  kAuto,  // CUDA when compiled in and a GPU is usable, else host (only for MakeDevice)
};

std::string_view DeviceKindName(DeviceKind kind);  // "host", "cuda", "auto"

struct DeviceCapabilities {
  DeviceKind kind = DeviceKind::kHost;
  std::string name;  // "host", "NVIDIA H200 (sm_90, device 0)"
  int ordinal = 0;
  // Whether host code may read and write DeviceBuffer memory through its pointer.
  bool device_memory_host_accessible = false;
  // Whether WaitFlag/WriteFlag run on the device without blocking a host thread (CUDA stream
  // memory operations, cuStreamWaitValue32). HostDevice emulates them on its stream workers
  // and reports true; a CUDA device without them reports false and the calls fail with
  // kUnimplemented, so the engine falls back to events.
  bool stream_memory_ops = false;
  // Whether a stream may wait on a flag before the work that writes it is enqueued. False on
  // CUDA: streams beyond CUDA_DEVICE_MAX_CONNECTIONS (8 by default) share hardware queues, and
  // a flag wait queued in front of the work that releases it, in one queue, never ends (the
  // layerwise HF run on the H200 hung this way; it ran with CUDA_DEVICE_MAX_CONNECTIONS=32).
  // The engine then makes the model stream wait on an event recorded after the layer's
  // launches. HostDevice: true (each stream has its own worker).
  bool early_flag_waits = false;
  // Whether kernels may read and write PinnedHostBuffer memory through its host pointer
  // (zero-copy over the bus on CUDA), e.g. scatter straight from a pinned read bank without a
  // host-to-device copy. HostDevice: true.
  bool kernels_access_pinned_host = false;
  uint64_t device_memory_bytes = 0;        // total device memory; 0 when unbounded (host)
  uint32_t multiprocessors = 0;            // 0 for host
  uint64_t pinned_alignment_bytes = 4096;  // alignment of PinnedHostBuffer memory
};

// ---- owned memory ---------------------------------------------------------------------

namespace device_internal {

// Which Device release path an OwnedRange uses.
enum class Release : uint8_t { kDeviceMemory, kPinnedHost, kHostRegistration };

// The move-only (owner, pointer, size) triple behind the three RAII types below: reset() hands
// the range back to its Device through the path `release` names, once. The wrappers differ only
// in their pointer type and accessors.
class OwnedRange {
 public:
  OwnedRange() = default;
  OwnedRange(Device* owner, void* data, uint64_t size_bytes, Release release)
      : owner_(owner), data_(data), size_bytes_(size_bytes), release_(release) {}
  OwnedRange(OwnedRange&& other) noexcept;
  OwnedRange& operator=(OwnedRange&& other) noexcept;
  OwnedRange(const OwnedRange&) = delete;
  OwnedRange& operator=(const OwnedRange&) = delete;
  ~OwnedRange() { reset(); }

  void* data() const { return data_; }
  uint64_t size_bytes() const { return size_bytes_; }
  void reset();

 private:
  Device* owner_ = nullptr;
  void* data_ = nullptr;
  uint64_t size_bytes_ = 0;
  Release release_ = Release::kDeviceMemory;
};

}  // namespace device_internal

// Device memory from Device::AllocateDevice(). Move-only; frees on destruction.
// REQUIRES for destruction: no enqueued work still uses the memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;

  void* data() const { return range_.data(); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(range_.data()); }
  uint64_t size_bytes() const { return range_.size_bytes(); }
  bool empty() const { return range_.data() == nullptr; }
  void reset() { range_.reset(); }

 private:
  friend class Device;
  DeviceBuffer(Device* owner, void* data, uint64_t size_bytes)
      : range_(owner, data, size_bytes, device_internal::Release::kDeviceMemory) {}
  device_internal::OwnedRange range_;
};

// Pinned (page-locked where the device has such a notion), page-aligned host memory: the
// staging memory for O_DIRECT reads and fast asynchronous host<->device copies. Its size is
// rounded up to whole pages. Move-only; unpins and unmaps on destruction.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;

  uint8_t* data() const { return static_cast<uint8_t*>(range_.data()); }
  uint64_t size_bytes() const { return range_.size_bytes(); }
  std::span<uint8_t> span() const { return {data(), size_bytes()}; }
  bool empty() const { return range_.data() == nullptr; }
  void reset() { range_.reset(); }

 private:
  friend class Device;
  PinnedHostBuffer(Device* owner, uint8_t* data, uint64_t size_bytes)
      : range_(owner, data, size_bytes, device_internal::Release::kPinnedHost) {}
  device_internal::OwnedRange range_;
};

// Host memory allocated elsewhere (an mmap, a framework tensor) registered with the device
// for fast copies, from Device::RegisterHostMemory(). Move-only; unregisters on destruction.
class HostRegistration {
 public:
  HostRegistration() = default;

  void* data() const { return range_.data(); }
  uint64_t size_bytes() const { return range_.size_bytes(); }
  bool empty() const { return range_.data() == nullptr; }
  void reset() { range_.reset(); }

 private:
  friend class Device;
  HostRegistration(Device* owner, void* data, uint64_t size_bytes)
      : range_(owner, data, size_bytes, device_internal::Release::kHostRegistration) {}
  device_internal::OwnedRange range_;
};

// ---- events, flags, streams -----------------------------------------------------------

enum class EventTiming : uint8_t { kDisabled, kEnabled };  // kEnabled allows ElapsedMs()
enum class HostWait : uint8_t {
  kBlocking,  // Event::Synchronize() sleeps (frees the CPU; default)
  kSpin,      // spins (lowest latency, burns a core while waiting)
};

struct EventOptions {
  EventTiming timing = EventTiming::kDisabled;
  HostWait host_wait = HostWait::kBlocking;
};

// A completion marker (see the semantics above). Created by Device::CreateEvent().
class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // true when the captured work has completed (or the event was never recorded), false while
  // it is pending; an error when the device failed (the captured work's completion is then
  // unproven).
  virtual Result<bool> Query() = 0;
  // Blocks the calling thread until Query() would return true; the device error otherwise.
  virtual Status Synchronize() = 0;

  const Device* device() const { return device_; }
  // cudaEvent_t on CUDA (for integrations that wait on it in their own streams); null on host.
  virtual void* native_handle() const = 0;

 protected:
  explicit Event(const Device* device) : device_(device) {}

 private:
  const Device* device_;
};

// A 32-bit value in memory that both the host and streams can read and write: the layer
// readiness primitive that lets a stream wait for work the host has not enqueued yet, without
// blocking any host thread (CUDA stream memory operations). Comparisons are cyclic, like
// cuStreamWaitValue32's GEQ: a wait for v is satisfied when (int32_t)(value - v) >= 0, so a
// monotonically increasing counter may wrap around. Created by Device::CreateFlag() with value 0.
class DeviceFlag {
 public:
  virtual ~DeviceFlag() = default;
  DeviceFlag(const DeviceFlag&) = delete;
  DeviceFlag& operator=(const DeviceFlag&) = delete;

  // Host write with release semantics: work that waits for it sees every host write before it.
  virtual void Set(uint32_t value) = 0;
  // Host read with acquire semantics.
  virtual uint32_t Get() const = 0;

  const Device* device() const { return device_; }

 protected:
  explicit DeviceFlag(const Device* device) : device_(device) {}

 private:
  const Device* device_;
};

// A host function run by a stream after all work enqueued before it completed and before any
// work enqueued after it starts. It runs on a device-owned thread and must not enqueue work on
// any stream or synchronise with the device (CUDA forbids it; HostDevice would deadlock); it
// may signal host threads. Plain function + argument: enqueueing allocates nothing.
using HostFn = void (*)(void* arg);

enum class StreamPriority : uint8_t { kNormal, kHigh };

struct StreamOptions {
  StreamPriority priority = StreamPriority::kNormal;
};

// An in-order queue of device work. Created by Device::CreateStream(); destroying it waits
// for its enqueued work. Every enqueue fails with kInvalidArgument when given an object of
// another device, null pointers with a non-zero size, or arguments the kernels' Validate*Args
// reject; it does not run the operation in that case.
class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Asynchronous byte copies. Host memory should be pinned (PinnedHostBuffer or registered)
  // for the copy to be asynchronous on CUDA.
  virtual Status CopyHostToDevice(void* device_dst, const void* host_src, uint64_t bytes) = 0;
  virtual Status CopyDeviceToHost(void* host_dst, const void* device_src, uint64_t bytes) = 0;
  virtual Status CopyDeviceToDevice(void* device_dst, const void* device_src, uint64_t bytes) = 0;
  // Sets `bytes` bytes of device memory to `value`.
  virtual Status Fill(void* device_dst, uint8_t value, uint64_t bytes) = 0;

  // Captures the work enqueued so far in `event` (see semantics above).
  virtual Status Record(Event& event) = 0;
  // Work enqueued after this waits for the event's captured work. The host does not block.
  virtual Status WaitEvent(const Event& event) = 0;
  // Runs fn(arg) in stream order (see HostFn).
  virtual Status AddHostCallback(HostFn fn, void* arg) = 0;

  // Work enqueued after this waits until flag's value reaches `value` (cyclic >=).
  // kUnimplemented when !capabilities().stream_memory_ops.
  virtual Status WaitFlag(const DeviceFlag& flag, uint32_t value) = 0;
  // Writes `value` to the flag once prior work completed (with a memory fence, so a waiter
  // sees that work's results). kUnimplemented when !capabilities().stream_memory_ops.
  virtual Status WriteFlag(DeviceFlag& flag, uint32_t value) = 0;

  // The engine's kernels (semantics: kernels/paged_kv.h, kernels/span_digest.h). Arguments
  // are copied at enqueue; the memory they point to must be device memory of this device (or
  // host memory on HostDevice) and stay valid until completion. Slot values are not checked
  // here: validate a mapping once with kernels::ValidateSlotMapping() when it is bound.
  virtual Status Scatter(const kernels::ScatterArgs& args) = 0;
  virtual Status Gather(const kernels::GatherArgs& args) = 0;
  // Writes one digest per span to args.digests (device memory).
  virtual Status Digest(const kernels::DigestArgs& args) = 0;
  // Writes the scatter's rows of each digest span whose digest matched and sets the mismatch word
  // for any other (kernels/span_digest.h). This default enqueues Digest, then Scatter gated on
  // the mismatch word, so one failed span writes no row of the call; HostDevice copies and
  // digests each span's rows in one pass instead.
  virtual Status VerifiedScatter(const kernels::VerifiedScatterArgs& args);
  // Gather, then Digest of spans of what it wrote (kernels/span_digest.h). This default enqueues
  // the two; HostDevice writes and digests each span's rows in one pass where the spans tile the
  // gather's output.
  virtual Status GatherDigest(const kernels::DigestedGatherArgs& args);

  // Blocks until all work enqueued so far has completed; the device error otherwise.
  virtual Status Synchronize() = 0;

  const Device* device() const { return device_; }
  // cudaStream_t on CUDA; null on host.
  virtual void* native_handle() const = 0;

 protected:
  explicit Stream(const Device* device) : device_(device) {}

 private:
  const Device* device_;
};

// ---- the device -----------------------------------------------------------------------

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceCapabilities& capabilities() const = 0;

  // `bytes` (> 0) of device memory, at least 256-byte aligned. kResourceExhausted when the
  // device is out of memory, kInvalidArgument for 0. May synchronise the device on CUDA
  // (allocate at startup, not on the data path).
  virtual Result<DeviceBuffer> AllocateDevice(uint64_t bytes) = 0;
  // `bytes` (> 0, rounded up to whole pages) of page-aligned pinned host memory.
  virtual Result<PinnedHostBuffer> AllocatePinnedHost(uint64_t bytes) = 0;
  // Registers existing host memory [data, data + bytes) for fast copies. kInvalidArgument for
  // null or empty ranges; the device's error otherwise (e.g. already registered).
  virtual Result<HostRegistration> RegisterHostMemory(void* data, uint64_t bytes) = 0;

  virtual Result<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options = {}) = 0;
  // A Stream over a stream the caller owns (a cudaStream_t on CUDA, e.g. the model's current
  // stream; null is the legacy default stream), so it can WaitEvent/WaitFlag on RangeKV's
  // layer readiness. Destroying the wrapper neither synchronises nor destroys the native
  // stream. kUnimplemented on HostDevice, which has no native streams.
  virtual Result<std::unique_ptr<Stream>> WrapNativeStream(void* native_stream) = 0;
  virtual Result<std::unique_ptr<Event>> CreateEvent(const EventOptions& options = {}) = 0;
  virtual Result<std::unique_ptr<DeviceFlag>> CreateFlag() = 0;

  // Milliseconds between two completed, timing-enabled events (end minus start).
  // kFailedPrecondition when either is pending, never recorded, or not timing-enabled.
  virtual Result<double> ElapsedMs(const Event& start, const Event& end) = 0;

  // Whether host code may dereference `p`: always on HostDevice; on CUDA, true for host
  // memory (pinned or not) and false for device memory.
  virtual bool IsHostAccessible(const void* p) const = 0;

 protected:
  Device() = default;
  // Constructors for the RAII types, for implementations.
  DeviceBuffer WrapDeviceBuffer(void* data, uint64_t bytes) { return {this, data, bytes}; }
  PinnedHostBuffer WrapPinnedHost(uint8_t* data, uint64_t bytes) { return {this, data, bytes}; }
  HostRegistration WrapRegistration(void* data, uint64_t bytes) { return {this, data, bytes}; }

 private:
  friend class device_internal::OwnedRange;
  // Release paths of the RAII types; never fail visibly (errors are logged).
  virtual void FreeDevice(void* data, uint64_t bytes) = 0;
  virtual void FreePinnedHost(uint8_t* data, uint64_t bytes) = 0;
  virtual void UnregisterHostMemory(void* data, uint64_t bytes) = 0;
};

// ---- factory --------------------------------------------------------------------------

// Options of HostDevice (see host_device.h for what each does).
struct HostDeviceOptions {
  // Operations a stream queue holds before enqueue blocks.
  uint32_t stream_queue_capacity = 256;
  // When max_op_delay_us > 0, every stream worker sleeps a pseudo-random [0, max] us before
  // each operation, drawn from a per-stream generator seeded from jitter_seed and the stream's
  // creation index: shakes out missing waits (reuse before completion) reproducibly per seed.
  uint32_t max_op_delay_us = 0;
  uint64_t jitter_seed = 0;
  // Fill new device allocations with this byte (memory from a GPU is not zeroed either);
  // unset = leave as the allocator returns it.
  int poison_allocations = -1;  // -1 or 0..255
  // Copies, fills, scatters, gathers and digests are split into chunks of about split_bytes
  // (whole tokens for scatters and gathers, whole 8-byte words for digests) that run on a fixed
  // pool of worker_threads threads created with the device and shared by all its streams; the
  // stream's own worker takes part, and the operation completes when its last chunk did, so
  // streams keep their FIFO order. worker_threads: 0 = one per hardware thread (at most 16);
  // 1 = no pool (each stream runs its operations alone). split_bytes must be > 0.
  uint32_t worker_threads = 0;
  uint64_t split_bytes = uint64_t{1} << 20;
};

struct DeviceOptions {
  DeviceKind kind = DeviceKind::kAuto;
  int ordinal = 0;  // CUDA device ordinal
  HostDeviceOptions host;
};

// kHost: a HostDevice. kCuda: a CudaDevice, or kNotSupported when CUDA was not compiled in or
// no usable GPU/driver is present (the message says which). kAuto: CUDA if that succeeds, else
// a HostDevice (the reason is logged at info level).
Result<std::unique_ptr<Device>> MakeDevice(const DeviceOptions& options);
inline Result<std::unique_ptr<Device>> MakeDevice(DeviceKind kind, int ordinal = 0) {
  DeviceOptions o;
  o.kind = kind;
  o.ordinal = ordinal;
  return MakeDevice(o);
}

// Whether this build contains the CUDA device (it may still be unavailable at run time).
bool CudaCompiledIn();

}  // namespace rangekv
