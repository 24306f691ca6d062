// HostDevice: the device seam implemented on the host, so the whole transfer pipeline runs and
// is tested (under ThreadSanitizer too) on machines without a GPU.
//
//   - Device memory and pinned memory are page-aligned anonymous mappings; host code can touch
//     them (capabilities().device_memory_host_accessible), but engine code should not rely on
//     that: it must run unchanged on CudaDevice.
//   - Each Stream is one worker thread executing a bounded FIFO ring of operations in order.
//     Stream state counts operations enqueued and completed; the completed count only grows.
//   - An Event records (stream, number of operations enqueued so far); it is complete when the
//     stream's completed count reaches that number. Host waits block on the stream's condition
//     variable. WaitEvent enqueues an operation that blocks the waiting stream's worker until
//     the other stream's count is reached (no host thread blocks).
//   - A DeviceFlag is a mutex-guarded 32-bit value with a condition variable; WaitFlag blocks
//     the stream's worker, WriteFlag sets it in stream order.
//   - Kernels are the CPU references (kernels/reference.h). Data operations (copies, fills,
//     scatters, gathers, digests) are split into chunks of about HostDeviceOptions::split_bytes
//     (whole tokens; whole words for digests, whose parts add up, span_digest.h) that the
//     stream's worker runs together with a fixed pool of worker_threads - 1 threads created
//     with the device and shared by all its streams (round-robin over the operations in
//     flight, chunk by chunk). An operation completes when all its chunks did, so each stream
//     stays FIFO; the stream's worker always takes chunks of its own operation, so progress
//     never depends on a free pool thread.
//   - Host callbacks run on the stream's worker, in order.
// With HostDeviceOptions::max_op_delay_us > 0 every operation starts after a seeded random
// delay, which widens the windows in which a missing wait or an early buffer reuse corrupts
// data, so tests that pass under jitter and TSan have their ordering right.
//
// Thread-safety: as for every Device (device.h). Enqueueing allocates nothing: operations,
// kernel arguments included, are held by value in the ring allocated at stream creation.
#pragma once

#include <memory>

#include "device/device.h"

namespace rangekv {

// A HostDevice. Fails only with kInvalidArgument (stream_queue_capacity == 0, poison value
// outside [-1, 255], split_bytes == 0).
Result<std::unique_ptr<Device>> CreateHostDevice(const HostDeviceOptions& options = {});

}  // namespace rangekv
