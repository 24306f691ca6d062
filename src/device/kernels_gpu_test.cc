// GPU tests: the device conformance suite on CudaDevice (stream order, events, cross-stream
// waits, host callbacks, flags, memory) with the kernel cases at 8x the CI sizes, compared
// byte for byte with the CPU reference; plus throughput lines for the 8B geometry
// (32 MiB stripes) that scripts/gpu/run.sh collects. Every test skips with a message when no
// GPU is usable, so CI machines without one pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "device/device.h"
#include "device/device_conformance.h"
#include "kernels/kernel_test_cases.h"
#include "kernels/reference.h"

namespace rangekv {
namespace {

using testing::DeviceConformance;
using testing::DeviceParam;

INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformance,
                         ::testing::Values(DeviceParam{.kind = DeviceKind::kCuda, .case_scale = 8}),
                         [](const auto& p) { return p.param.Name(); });

template <typename T>
T Take(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) std::abort();
  return std::move(r).value();
}

class GpuThroughput : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Device>> d = MakeDevice(DeviceKind::kCuda);
    if (!d.ok()) GTEST_SKIP() << "no usable CUDA device: " << d.status().ToString();
    device_ = std::move(d).value();
    std::printf("[device] %s, %llu MiB, %u SMs, stream memory ops %s, kernels on pinned %s\n",
                device_->capabilities().name.c_str(),
                static_cast<unsigned long long>(device_->capabilities().device_memory_bytes >> 20),
                device_->capabilities().multiprocessors,
                device_->capabilities().stream_memory_ops ? "yes" : "no",
                device_->capabilities().kernels_access_pinned_host ? "yes" : "no");
    stream_ = Take(device_->CreateStream());
    EventOptions timed;
    timed.timing = EventTiming::kEnabled;
    start_ = Take(device_->CreateEvent(timed));
    stop_ = Take(device_->CreateEvent(timed));
  }

  // Median milliseconds of `reps` timed runs of `enqueue` (after 3 warm-ups).
  template <typename Fn>
  double MedianMs(int reps, Fn&& enqueue) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(enqueue().ok());
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      EXPECT_TRUE(stream_->Record(*start_).ok());
      EXPECT_TRUE(enqueue().ok());
      EXPECT_TRUE(stream_->Record(*stop_).ok());
      EXPECT_TRUE(stop_->Synchronize().ok());
      ms.push_back(Take(device_->ElapsedMs(*start_, *stop_)));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  void Report(const char* what, uint64_t bytes_moved, double ms) {
    std::printf("[throughput] %-44s %10.1f us  %8.1f GB/s\n", what, ms * 1000.0,
                static_cast<double>(bytes_moved) / (ms * 1e-3) / 1e9);
  }

  void Upload(void* dst, std::span<const uint8_t> src) {
    PinnedHostBuffer staging = Take(device_->AllocatePinnedHost(src.size()));
    std::memcpy(staging.data(), src.data(), src.size());
    ASSERT_TRUE(stream_->CopyHostToDevice(dst, staging.data(), src.size()).ok());
    ASSERT_TRUE(stream_->Synchronize().ok());
  }
  std::vector<uint8_t> Download(const void* src, uint64_t bytes) {
    PinnedHostBuffer staging = Take(device_->AllocatePinnedHost(bytes));
    EXPECT_TRUE(stream_->CopyDeviceToHost(staging.data(), src, bytes).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return {staging.data(), staging.data() + bytes};
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> start_, stop_;
};

// A vLLM-like slot mapping: the request's tokens fill blocks in order, the blocks are random.
std::vector<int64_t> BlockTableMapping(uint32_t num_blocks, uint32_t block_size,
                                       uint32_t num_tokens, std::mt19937_64& rng) {
  std::vector<int64_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int64_t> slots(num_tokens);
  for (uint32_t t = 0; t < num_tokens; ++t) {
    slots[t] = blocks[t / block_size] * block_size + t % block_size;
  }
  return slots;
}

// Llama-3.1-8B per rank: 8 KV heads x 128 x bf16 (s = 4096), W = 32 MiB (T = 8192 tokens).
TEST_F(GpuThroughput, ScatterGatherDigestAtTheEightBGeometry) {
  constexpr uint64_t kStripeBytes = 32ull << 20;
  std::mt19937_64 rng(2025);

  struct Shape {
    kernels::PagedLayout layout;
    uint32_t heads, head_size, block_size;
  };
  const Shape shapes[] = {
      {kernels::PagedLayout::kFlashAttnNhd, 8, 128, 16},
      {kernels::PagedLayout::kFlashAttnHnd, 8, 128, 16},
      {kernels::PagedLayout::kFlashInferNhd, 8, 128, 16},
      {kernels::PagedLayout::kFlashAttnNhd, 8, 128, 64},
      {kernels::PagedLayout::kMla, 1, 576, 64},
      {kernels::PagedLayout::kPackedNhd, 8, 128, 16},
      {kernels::PagedLayout::kPackedHnd, 8, 128, 16},
      {kernels::PagedLayout::kCpuBlock, 8, 128, 128},  // whole-block copies
  };
  DeviceBuffer stripe = Take(device_->AllocateDevice(kStripeBytes));
  DeviceBuffer bank = Take(device_->AllocateDevice(4 * kStripeBytes));
  std::vector<uint8_t> host_stripe(kStripeBytes);
  testing::FillRandom(host_stripe, rng);
  Upload(stripe.data(), host_stripe);
  PinnedHostBuffer pinned_stripe = Take(device_->AllocatePinnedHost(kStripeBytes));
  std::memcpy(pinned_stripe.data(), host_stripe.data(), kStripeBytes);

  for (const Shape& sh : shapes) {
    const kernels::PagedShape shape{.num_blocks = 0,
                                    .block_size = sh.block_size,
                                    .num_heads = sh.heads,
                                    .head_size = sh.head_size,
                                    .elem_bytes = 2};
    const uint64_t token_bytes =
        uint64_t{testing::NumPlanes(sh.layout)} * sh.heads * sh.head_size * 2;
    const uint32_t tokens = static_cast<uint32_t>(kStripeBytes / token_bytes);
    kernels::PagedShape layer_shape = shape;
    layer_shape.num_blocks = 4 * ((tokens + sh.block_size - 1) / sh.block_size);  // 4 stripes
    const uint64_t layer_bytes = Take(kernels::PagedLayerBytes(sh.layout, layer_shape));
    const std::string name = std::string(testing::LayoutName(sh.layout)) +
                             " B=" + std::to_string(sh.block_size) +
                             " s=" + std::to_string(token_bytes);

    const std::vector<int64_t> slots =
        BlockTableMapping(layer_shape.num_blocks, sh.block_size, tokens, rng);
    DeviceBuffer d_slots = Take(device_->AllocateDevice(slots.size() * 8));
    Upload(d_slots.data(), {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * 8});
    std::vector<DeviceBuffer> layers;
    kernels::GatherArgs g;
    for (int l = 0; l < 4; ++l) {
      layers.push_back(Take(device_->AllocateDevice(layer_bytes)));
      ASSERT_TRUE(stream_->Fill(layers.back().data(), 0xCD, layer_bytes).ok());
      g.src[l] = Take(kernels::MakePagedKvView(sh.layout, layer_shape, layers.back().data()));
    }
    const kernels::ScatterArgs scatter{.dst = g.src[0],
                                       .stripe = stripe.bytes(),
                                       .slots = static_cast<const int64_t*>(d_slots.data()),
                                       .num_tokens = tokens};
    std::printf("[access] %s: scatter %u-byte, gather %u-byte accesses\n", name.c_str(),
                kernels::ScatterAccessBytes(scatter), kernels::GatherAccessBytes(g));
    const uint64_t moved = uint64_t{tokens} * token_bytes;
    Report(("scatter 32 MiB stripe, " + name).c_str(), 2 * moved,
           MedianMs(20, [&] { return stream_->Scatter(scatter); }));

    if (device_->capabilities().kernels_access_pinned_host && &sh == &shapes[0]) {
      kernels::ScatterArgs zero_copy = scatter;
      zero_copy.stripe = pinned_stripe.data();
      Report(("scatter from pinned host (zero-copy), " + name).c_str(), moved,
             MedianMs(10, [&] { return stream_->Scatter(zero_copy); }));
    }

    // Scatter the same stripe into all four layers, then gather the group back in one launch.
    for (int l = 1; l < 4; ++l) {
      kernels::ScatterArgs a = scatter;
      a.dst = g.src[l];
      ASSERT_TRUE(stream_->Scatter(a).ok());
    }
    g.num_layers = 4;
    g.slots = scatter.slots;
    g.num_tokens = tokens;
    g.out = bank.bytes();
    g.out_layer_stride_bytes = kStripeBytes;
    Report(("gather 4-layer group (128 MiB), " + name).c_str(), 2 * 4 * moved,
           MedianMs(10, [&] { return stream_->Gather(g); }));

    // Verify: every layer region of the bank equals the stripe, and layer 0 equals the CPU
    // reference scatter.
    const std::vector<uint8_t> got_bank = Download(bank.data(), 4 * kStripeBytes);
    for (int l = 0; l < 4; ++l) {
      ASSERT_EQ(std::memcmp(got_bank.data() + l * kStripeBytes, host_stripe.data(), moved), 0)
          << name << " layer " << l;
    }
    std::vector<uint8_t> ref(layer_bytes, 0xCD);
    kernels::ScatterArgs host_scatter = scatter;
    host_scatter.dst = Take(kernels::MakePagedKvView(sh.layout, layer_shape, ref.data()));
    host_scatter.stripe = host_stripe.data();
    host_scatter.slots = slots.data();
    kernels::ScatterReference(host_scatter);
    const std::vector<uint8_t> got_layer = Download(layers[0].data(), layer_bytes);
    ASSERT_EQ(testing::FirstDifference(got_layer, ref), -1) << name;
  }

  // Digest: one 32 MiB span, and a batch of 8 (a store bank's spans).
  DeviceBuffer digests = Take(device_->AllocateDevice(kernels::kMaxDigestSpans * 8));
  kernels::DigestArgs one;
  one.spans[0] = {stripe.bytes(), kStripeBytes};
  one.num_spans = 1;
  one.digests = static_cast<uint64_t*>(digests.data());
  Report("digest 1 x 32 MiB", kStripeBytes, MedianMs(20, [&] { return stream_->Digest(one); }));
  const std::vector<uint8_t> raw = Download(digests.data(), 8);
  uint64_t got;
  std::memcpy(&got, raw.data(), 8);
  EXPECT_EQ(got, kernels::SpanDigest(host_stripe.data(), kStripeBytes, 0));
  kernels::DigestArgs eight;
  for (int i = 0; i < 8; ++i)
    eight.spans[i] = {bank.bytes() + i * (kStripeBytes / 2), kStripeBytes / 2};
  eight.num_spans = 8;
  eight.digests = one.digests;
  Report("digest 8 x 16 MiB (one launch)", 4 * kStripeBytes,
         MedianMs(20, [&] { return stream_->Digest(eight); }));

  // Ceilings in the same run: device-to-device copy and pinned host-to-device copy.
  Report("ceiling: device-to-device copy 32 MiB", 2 * kStripeBytes, MedianMs(20, [&] {
           return stream_->CopyDeviceToDevice(bank.data(), stripe.data(), kStripeBytes);
         }));
  Report("ceiling: pinned host-to-device copy 32 MiB", kStripeBytes, MedianMs(10, [&] {
           return stream_->CopyHostToDevice(bank.data(), pinned_stripe.data(), kStripeBytes);
         }));
}

TEST_F(GpuThroughput, WrappedNativeStreamWaitsOnEvents) {
  // A borrowed stream (as the model's stream would be) orders after RangeKV's event.
  std::unique_ptr<Stream> model = Take(device_->WrapNativeStream(stream_->native_handle()));
  std::unique_ptr<Stream> pipeline = Take(device_->CreateStream());
  std::unique_ptr<Event> ready = Take(device_->CreateEvent());
  DeviceBuffer x = Take(device_->AllocateDevice(1 << 20));
  ASSERT_TRUE(pipeline->Fill(x.data(), 0x5E, 1 << 20).ok());
  ASSERT_TRUE(pipeline->Record(*ready).ok());
  ASSERT_TRUE(model->WaitEvent(*ready).ok());
  const std::vector<uint8_t> got = Download(x.data(), 1 << 20);  // enqueued on the same stream
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0x5E; }));
}

}  // namespace
}  // namespace rangekv
