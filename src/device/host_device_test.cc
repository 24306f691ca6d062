#include "device/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "device/device_conformance.h"

namespace rangekv {
namespace {

using testing::DeviceConformance;
using testing::DeviceParam;

// The conformance suite on HostDevice, plain and with two jitter seeds (each operation starts
// after a seeded random delay, which widens the windows a missing wait would need).
INSTANTIATE_TEST_SUITE_P(
    Host, DeviceConformance,
    ::testing::Values(
        DeviceParam{.kind = DeviceKind::kHost},
        DeviceParam{.kind = DeviceKind::kHost, .max_op_delay_us = 40, .jitter_seed = 1},
        DeviceParam{.kind = DeviceKind::kHost, .max_op_delay_us = 40, .jitter_seed = 2}),
    [](const auto& p) { return p.param.Name(); });

TEST(HostDeviceTest, RejectsBadOptions) {
  HostDeviceOptions o;
  o.stream_queue_capacity = 0;
  EXPECT_EQ(CreateHostDevice(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.poison_allocations = 256;
  EXPECT_EQ(CreateHostDevice(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(HostDeviceTest, PoisonsNewDeviceMemory) {
  HostDeviceOptions o;
  o.poison_allocations = 0xAB;
  std::unique_ptr<Device> d = std::move(CreateHostDevice(o)).value();
  DeviceBuffer b = std::move(d->AllocateDevice(10000)).value();
  for (uint64_t i = 0; i < b.size_bytes(); ++i) ASSERT_EQ(b.bytes()[i], 0xAB);
}

struct Gate {
  Mutex mu;
  CondVar cv;
  bool open GUARDED_BY(mu) = false;
  static void WaitFn(void* p) {
    auto* g = static_cast<Gate*>(p);
    MutexLock l(g->mu);
    while (!g->open) g->cv.Wait(l);
  }
  void Open() {
    MutexLock l(mu);
    open = true;
    cv.NotifyAll();
  }
};

struct Counter {
  Mutex mu;
  CondVar cv;
  int n GUARDED_BY(mu) = 0;
  static void Bump(void* p) {
    auto* c = static_cast<Counter*>(p);
    MutexLock l(c->mu);
    ++c->n;
    c->cv.NotifyAll();
  }
};

// With a queue of 4 behind a blocked worker, an enqueuer gets exactly 4 operations in and
// then blocks (it does not grow the queue or overwrite entries); it proceeds when the stream
// drains, and every operation runs once.
TEST(HostDeviceTest, StreamQueueIsBounded) {
  HostDeviceOptions o;
  o.stream_queue_capacity = 4;
  std::unique_ptr<Device> d = std::move(CreateHostDevice(o)).value();
  std::unique_ptr<Stream> s = std::move(d->CreateStream()).value();
  Gate gate;
  Counter ran;
  Counter enqueued;
  ASSERT_TRUE(s->AddHostCallback(&Gate::WaitFn, &gate).ok());
  std::thread producer([&] {
    for (int i = 0; i < 10; ++i) {
      EXPECT_TRUE(s->AddHostCallback(&Counter::Bump, &ran).ok());
      Counter::Bump(&enqueued);
    }
  });
  {
    // Once the worker holds the gate operation the queue has room for exactly 4; the 5th
    // enqueue cannot complete until the gate opens, so the count stops at 4.
    MutexLock l(enqueued.mu);
    while (enqueued.n < 4) enqueued.cv.Wait(l);
    EXPECT_EQ(enqueued.n, 4);
  }
  {
    MutexLock l(ran.mu);
    EXPECT_EQ(ran.n, 0);
  }
  gate.Open();
  producer.join();
  ASSERT_TRUE(s->Synchronize().ok());
  MutexLock l(ran.mu);
  EXPECT_EQ(ran.n, 10);
}

// Cross-device misuse between a host device and a second host device is rejected, and the
// factory keeps its promises on a machine whatever its GPU situation.
TEST(MakeDeviceTest, KindsAndAvailability) {
  Result<std::unique_ptr<Device>> host = MakeDevice(DeviceKind::kHost);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ((*host)->capabilities().kind, DeviceKind::kHost);

  Result<std::unique_ptr<Device>> cuda = MakeDevice(DeviceKind::kCuda);
  if (cuda.ok()) {
    EXPECT_EQ((*cuda)->capabilities().kind, DeviceKind::kCuda);
  } else {
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable) << cuda.status().ToString();
  }
  if (!CudaCompiledIn()) {
    EXPECT_FALSE(cuda.ok());
  }

  Result<std::unique_ptr<Device>> any = MakeDevice(DeviceKind::kAuto);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)->capabilities().kind, cuda.ok() ? DeviceKind::kCuda : DeviceKind::kHost);
}

}  // namespace
}  // namespace rangekv
