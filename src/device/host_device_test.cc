#include "device/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "base/host_memory.h"
#include "base/thread_annotations.h"
#include "base/units.h"
#include "device/device_conformance.h"
#include "kernels/span_digest.h"
#include "rangekv/build_info.h"

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
        DeviceParam{.kind = DeviceKind::kHost, .max_op_delay_us = 40, .jitter_seed = 2},
        // The worker pool: every kernel and copy split into many chunks over 4 threads, and
        // with no pool at all.
        DeviceParam{.kind = DeviceKind::kHost, .worker_threads = 4, .split_bytes = 200},
        DeviceParam{.kind = DeviceKind::kHost,
                    .max_op_delay_us = 40,
                    .jitter_seed = 3,
                    .worker_threads = 3,
                    .split_bytes = 4096},
        DeviceParam{.kind = DeviceKind::kHost, .worker_threads = 1},
        // The sizes the suite runs at on a GPU (kernels_gpu_test.cc), so a case that only a
        // GPU run would size wrongly fails here first.
        DeviceParam{.kind = DeviceKind::kHost, .case_scale = 8}),
    [](const auto& p) { return p.param.Name(); });

TEST(HostDeviceTest, RejectsBadOptions) {
  HostDeviceOptions o;
  o.stream_queue_capacity = 0;
  EXPECT_EQ(CreateHostDevice(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.poison_allocations = 256;
  EXPECT_EQ(CreateHostDevice(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.split_bytes = 0;
  EXPECT_EQ(CreateHostDevice(o).status().code(), StatusCode::kInvalidArgument);
}

// Many streams share the pool at once: each stream's split copies and digests still complete in
// its own FIFO order and produce exactly the bytes and digests of an unsplit run.
TEST(HostDeviceTest, WorkerPoolServesManyStreamsInOrder) {
  HostDeviceOptions o;
  o.worker_threads = 3;
  o.split_bytes = 1000;
  Result<std::unique_ptr<Device>> device = CreateHostDevice(o);
  ASSERT_TRUE(device.ok());
  constexpr int kStreams = 6;
  constexpr uint64_t kBytes = 300'007;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int s = 0; s < kStreams; ++s) {
    threads.emplace_back([&, s] {
      Result<std::unique_ptr<Stream>> stream = (*device)->CreateStream();
      Result<DeviceBuffer> a = (*device)->AllocateDevice(kBytes);
      Result<DeviceBuffer> b = (*device)->AllocateDevice(kBytes);
      Result<DeviceBuffer> digests = (*device)->AllocateDevice(2 * sizeof(uint64_t));
      if (!stream.ok() || !a.ok() || !b.ok() || !digests.ok()) {
        ++failures;
        return;
      }
      for (int round = 0; round < 5; ++round) {
        const uint8_t v = static_cast<uint8_t>(s * 16 + round);
        // fill a, copy a -> b, overwrite b's tail, digest both: each step needs the previous.
        bool ok =
            (*stream)->Fill(a->data(), v, kBytes).ok() &&
            (*stream)->CopyDeviceToDevice(b->data(), a->data(), kBytes).ok() &&
            (*stream)
                ->Fill(b->bytes() + kBytes / 2, static_cast<uint8_t>(v + 1), kBytes - kBytes / 2)
                .ok();
        kernels::DigestArgs d;
        d.num_spans = 2;
        d.spans[0] = {a->bytes(), kBytes};
        d.spans[1] = {b->bytes(), kBytes};
        d.seed = static_cast<uint64_t>(round);
        d.digests = static_cast<uint64_t*>(digests->data());
        ok = ok && (*stream)->Digest(d).ok() && (*stream)->Synchronize().ok();
        std::vector<uint8_t> want_a(kBytes, v), want_b(kBytes, v);
        std::memset(want_b.data() + kBytes / 2, v + 1, kBytes - kBytes / 2);
        const uint64_t* got = static_cast<const uint64_t*>(digests->data());
        if (!ok || std::memcmp(a->data(), want_a.data(), kBytes) != 0 ||
            std::memcmp(b->data(), want_b.data(), kBytes) != 0 ||
            got[0] != kernels::SpanDigest(want_a.data(), kBytes, d.seed) ||
            got[1] != kernels::SpanDigest(want_b.data(), kBytes, d.seed)) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(HostDeviceTest, PoisonsNewDeviceMemory) {
  HostDeviceOptions o;
  o.poison_allocations = 0xAB;
  std::unique_ptr<Device> d = std::move(CreateHostDevice(o)).value();
  DeviceBuffer b = std::move(d->AllocateDevice(10000)).value();
  for (uint64_t i = 0; i < b.size_bytes(); ++i) ASSERT_EQ(b.bytes()[i], 0xAB);
}

// Banks and staging are I/O memory (base/host_memory.h): large buffers start on a huge page,
// so every whole 2 MiB of them can be one.
TEST(HostDeviceTest, LargeBuffersAreIoMemory) {
  std::unique_ptr<Device> d = std::move(CreateHostDevice({})).value();
  DeviceBuffer b = std::move(d->AllocateDevice(8 * kMiB + 1)).value();
  PinnedHostBuffer h = std::move(d->AllocatePinnedHost(4 * kMiB)).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data()) % kHugePageBytes, 0u);
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
    EXPECT_EQ(cuda.status().code(), StatusCode::kNotSupported) << cuda.status().ToString();
  }
  if (!CudaCompiledIn()) {
    EXPECT_FALSE(cuda.ok());
    // The refusal names the fix (a reinstall with nvcc), not just the lack.
    EXPECT_NE(cuda.status().message().find("no CUDA kernels"), std::string::npos)
        << cuda.status().ToString();
    EXPECT_NE(cuda.status().message().find("nvcc"), std::string::npos);
  }

  Result<std::unique_ptr<Device>> any = MakeDevice(DeviceKind::kAuto);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)->capabilities().kind, cuda.ok() ? DeviceKind::kCuda : DeviceKind::kHost);
}

// BuildInfo says what CudaCompiledIn says, and names the GPU targets when there are kernels.
TEST(BuildInfoTest, NamesTheCudaKernelsOfThisBuild) {
  const BuildInfo& b = GetBuildInfo();
  EXPECT_EQ(b.has_cuda_kernels(), CudaCompiledIn());
  EXPECT_FALSE(b.version.empty());
  if (b.has_cuda_kernels()) {
    EXPECT_TRUE(b.cuda_kernels.find("sm_") != std::string_view::npos ||
                b.cuda_kernels.find("compute_") != std::string_view::npos)
        << b.cuda_kernels;
    EXPECT_FALSE(b.cuda_compiler_version.empty());
  } else {
    EXPECT_TRUE(b.cuda_compiler_version.empty());
  }
}

}  // namespace
}  // namespace rangekv
