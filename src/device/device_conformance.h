// The device conformance suite: behaviour every Device must show (stream order, events,
// cross-stream waits, host callbacks, flags, memory, and kernels that match the CPU reference
// byte for byte). Test-only. Each test binary instantiates it for its devices:
//   device_test (CI):       HostDevice, plain and with seeded per-operation jitter;
//   kernels_gpu_test (GPU): CudaDevice, skipping every test when no GPU is usable.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "device/device.h"

namespace rangekv::testing {

struct DeviceParam {
  DeviceKind kind = DeviceKind::kHost;
  uint32_t max_op_delay_us = 0;  // HostDevice jitter
  uint64_t jitter_seed = 0;
  uint32_t case_scale = 1;  // multiplies kernel test sizes (larger on a GPU)
  // HostDevice worker pool (0: the device's defaults), so small splits put every kernel test
  // through many chunks on several threads.
  uint32_t worker_threads = 0;
  uint64_t split_bytes = 0;
  std::string Name() const;
};

// gtest prints parameters with this (instead of a byte dump).
inline void PrintTo(const DeviceParam& p, std::ostream* os) { *os << p.Name(); }

class DeviceConformance : public ::testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override;
  // A fresh device of the same parameter (for cross-device misuse tests).
  std::unique_ptr<Device> MakeAnother() const;
  std::unique_ptr<Device> device_;
};

// Creates the device of `param`; for kCuda an unavailable GPU yields null and `why`.
std::unique_ptr<Device> MakeTestDevice(const DeviceParam& param, std::string* why);

}  // namespace rangekv::testing
