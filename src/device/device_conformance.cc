#include "device/device_conformance.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "kernels/digest_vectors.h"
#include "kernels/kernel_test_cases.h"
#include "kernels/reference.h"

namespace rangekv::testing {

std::string DeviceParam::Name() const {
  std::string name(DeviceKindName(kind));
  if (max_op_delay_us > 0) {
    name += "_jitter" + std::to_string(max_op_delay_us) + "us_seed" + std::to_string(jitter_seed);
  }
  if (worker_threads > 0) name += "_threads" + std::to_string(worker_threads);
  if (split_bytes > 0) name += "_split" + std::to_string(split_bytes);
  if (case_scale != 1) name += "_scale" + std::to_string(case_scale);
  return name;
}

std::unique_ptr<Device> MakeTestDevice(const DeviceParam& param, std::string* why) {
  DeviceOptions o;
  o.kind = param.kind;
  o.host.max_op_delay_us = param.max_op_delay_us;
  o.host.jitter_seed = param.jitter_seed;
  o.host.poison_allocations = 0xEE;
  if (param.worker_threads > 0) o.host.worker_threads = param.worker_threads;
  if (param.split_bytes > 0) o.host.split_bytes = param.split_bytes;
  Result<std::unique_ptr<Device>> d = MakeDevice(o);
  if (!d.ok()) {
    *why = d.status().ToString();
    return nullptr;
  }
  return std::move(d).value();
}

void DeviceConformance::SetUp() {
  std::string why;
  device_ = MakeTestDevice(GetParam(), &why);
  if (device_ == nullptr) {
    if (GetParam().kind == DeviceKind::kCuda) GTEST_SKIP() << "no usable CUDA device: " << why;
    FAIL() << why;
  }
}

std::unique_ptr<Device> DeviceConformance::MakeAnother() const {
  std::string why;
  return MakeTestDevice(GetParam(), &why);
}

namespace {

template <typename T>
T Take(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) std::abort();  // every helper result is needed to continue
  return std::move(r).value();
}

// Blocks a stream deterministically: a host callback that waits until the test opens it.
class Gate {
 public:
  static void WaitFn(void* self) { static_cast<Gate*>(self)->Wait(); }
  void Wait() {
    MutexLock l(mu_);
    while (!open_) cv_.Wait(l);
  }
  void Open() {
    MutexLock l(mu_);
    open_ = true;
    cv_.NotifyAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;
};

// Opens a gate when it goes out of scope, so a failing assertion cannot leave a stream blocked
// (its destructor would wait forever). Declare it after the streams it unblocks.
class GateOpener {
 public:
  explicit GateOpener(Gate& gate) : gate_(gate) {}
  ~GateOpener() { gate_.Open(); }

 private:
  Gate& gate_;
};

// Records callback order.
struct CallLog {
  Mutex mu;
  std::vector<int> seen GUARDED_BY(mu);
};
struct CallArg {
  CallLog* log;
  int index;
};
void NoteCall(void* p) {
  auto* a = static_cast<CallArg*>(p);
  MutexLock l(a->log->mu);
  a->log->seen.push_back(a->index);
}

// Host <-> device helpers through pinned staging, so they work on any device.
void Upload(Device& d, Stream& s, void* dst, std::span<const uint8_t> src) {
  if (src.empty()) return;
  PinnedHostBuffer staging = Take(d.AllocatePinnedHost(src.size()));
  std::memcpy(staging.data(), src.data(), src.size());
  ASSERT_TRUE(s.CopyHostToDevice(dst, staging.data(), src.size()).ok());
  ASSERT_TRUE(s.Synchronize().ok());
}

std::vector<uint8_t> Download(Device& d, Stream& s, const void* src, uint64_t bytes) {
  PinnedHostBuffer staging = Take(d.AllocatePinnedHost(bytes));
  EXPECT_TRUE(s.CopyDeviceToHost(staging.data(), src, bytes).ok());
  EXPECT_TRUE(s.Synchronize().ok());
  return std::vector<uint8_t>(staging.data(), staging.data() + bytes);
}

bool AllBytes(std::span<const uint8_t> bytes, uint8_t value) {
  for (uint8_t b : bytes) {
    if (b != value) return false;
  }
  return true;
}

TEST_P(DeviceConformance, CapabilitiesDescribeTheDevice) {
  const DeviceCapabilities& caps = device_->capabilities();
  EXPECT_EQ(caps.kind, GetParam().kind);
  EXPECT_FALSE(caps.name.empty());
  EXPECT_GT(caps.pinned_alignment_bytes, 0u);
  DeviceBuffer buffer = Take(device_->AllocateDevice(4096));
  PinnedHostBuffer pinned = Take(device_->AllocatePinnedHost(4096));
  EXPECT_EQ(device_->IsHostAccessible(buffer.data()), caps.device_memory_host_accessible);
  EXPECT_TRUE(device_->IsHostAccessible(pinned.data()));
  if (caps.kind == DeviceKind::kHost) {
    EXPECT_TRUE(caps.device_memory_host_accessible);
  } else {
    EXPECT_FALSE(caps.device_memory_host_accessible);
    EXPECT_GT(caps.device_memory_bytes, 0u);
    EXPECT_GT(caps.multiprocessors, 0u);
  }
}

TEST_P(DeviceConformance, MemoryIsAlignedAndOwnedOnce) {
  EXPECT_EQ(device_->AllocateDevice(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->AllocatePinnedHost(0).status().code(), StatusCode::kInvalidArgument);

  DeviceBuffer a = Take(device_->AllocateDevice(1000));
  EXPECT_EQ(a.size_bytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
  DeviceBuffer b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_FALSE(b.empty());
  b.reset();
  EXPECT_TRUE(b.empty());

  const uint64_t align = device_->capabilities().pinned_alignment_bytes;
  PinnedHostBuffer p = Take(device_->AllocatePinnedHost(1));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data()) % align, 0u);
  EXPECT_GE(p.size_bytes(), 1u);
  EXPECT_EQ(p.size_bytes() % align, 0u);
  std::memset(p.data(), 0x5C, p.size_bytes());  // all of it is usable
  PinnedHostBuffer q = Take(device_->AllocatePinnedHost(3 * align + 5));
  EXPECT_EQ(q.size_bytes(), 4 * align);
  q = std::move(p);
  EXPECT_EQ(q.data()[0], 0x5C);

  EXPECT_EQ(device_->RegisterHostMemory(nullptr, 10).status().code(), StatusCode::kInvalidArgument);
  // Page-aligned memory of its own, so no other allocation shares its pages.
  constexpr size_t kHostBytes = 1 << 16;
  void* host = std::aligned_alloc(kHostBytes, kHostBytes);
  ASSERT_NE(host, nullptr);
  HostRegistration r = Take(device_->RegisterHostMemory(host, kHostBytes));
  EXPECT_EQ(r.data(), host);
  HostRegistration moved = std::move(r);
  EXPECT_TRUE(r.empty());  // NOLINT(bugprone-use-after-move)
  moved.reset();
  EXPECT_TRUE(moved.empty());
  std::free(host);
}

TEST_P(DeviceConformance, CopiesRunInStreamOrder) {
  constexpr uint64_t kBytes = 1 << 20;
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  DeviceBuffer d1 = Take(device_->AllocateDevice(kBytes));
  DeviceBuffer d2 = Take(device_->AllocateDevice(kBytes));
  PinnedHostBuffer src = Take(device_->AllocatePinnedHost(kBytes));
  PinnedHostBuffer out2 = Take(device_->AllocatePinnedHost(kBytes));
  PinnedHostBuffer out1 = Take(device_->AllocatePinnedHost(kBytes));
  std::mt19937_64 rng(1);
  FillRandom(src.span(), rng);

  // Each step depends on the previous one having finished, and the Fill would destroy the
  // data if it overtook the device-to-device copy.
  ASSERT_TRUE(s->CopyHostToDevice(d1.data(), src.data(), kBytes).ok());
  ASSERT_TRUE(s->CopyDeviceToDevice(d2.data(), d1.data(), kBytes).ok());
  ASSERT_TRUE(s->Fill(d1.data(), 0, kBytes).ok());
  ASSERT_TRUE(s->CopyDeviceToHost(out2.data(), d2.data(), kBytes).ok());
  ASSERT_TRUE(s->CopyDeviceToHost(out1.data(), d1.data(), kBytes).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(std::memcmp(out2.data(), src.data(), kBytes), 0);
  EXPECT_TRUE(AllBytes({out1.data(), kBytes}, 0));

  // Zero-byte operations are accepted no-ops; null pointers with bytes are not.
  EXPECT_TRUE(s->CopyHostToDevice(nullptr, nullptr, 0).ok());
  EXPECT_EQ(s->CopyHostToDevice(nullptr, src.data(), 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->CopyDeviceToHost(out1.data(), nullptr, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Fill(nullptr, 1, 8).code(), StatusCode::kInvalidArgument);
}

struct PinnedCheck {
  const uint8_t* data;
  uint64_t bytes;
  uint8_t want;
  std::atomic<int> result{-1};  // 1: callback saw the finished copy, 0: it did not
};
void CheckPinned(void* p) {
  auto* c = static_cast<PinnedCheck*>(p);
  c->result = AllBytes({c->data, c->bytes}, c->want) ? 1 : 0;
}

TEST_P(DeviceConformance, HostCallbacksRunInOrderAfterPrecedingWork) {
  constexpr uint64_t kBytes = 256 << 10;
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  DeviceBuffer d = Take(device_->AllocateDevice(kBytes));
  PinnedHostBuffer out = Take(device_->AllocatePinnedHost(kBytes));
  std::memset(out.data(), 0, kBytes);
  PinnedCheck check{out.data(), kBytes, 0x22};
  ASSERT_TRUE(s->Fill(d.data(), 0x22, kBytes).ok());
  ASSERT_TRUE(s->CopyDeviceToHost(out.data(), d.data(), kBytes).ok());
  ASSERT_TRUE(s->AddHostCallback(&CheckPinned, &check).ok());

  CallLog log;
  std::vector<CallArg> args;
  for (int i = 0; i < 64; ++i) args.push_back({&log, i});
  for (CallArg& a : args) ASSERT_TRUE(s->AddHostCallback(&NoteCall, &a).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(check.result.load(), 1);
  MutexLock l(log.mu);
  ASSERT_EQ(log.seen.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(log.seen[i], i);
  EXPECT_EQ(s->AddHostCallback(nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_P(DeviceConformance, EventsCaptureRecordedWork) {
  std::unique_ptr<Event> e = Take(device_->CreateEvent());
  EXPECT_TRUE(Take(e->Query())) << "an event never recorded is complete";
  EXPECT_TRUE(e->Synchronize().ok());

  Gate gate;
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  GateOpener opener(gate);
  DeviceBuffer d = Take(device_->AllocateDevice(4096));
  ASSERT_TRUE(s->AddHostCallback(&Gate::WaitFn, &gate).ok());
  ASSERT_TRUE(s->Fill(d.data(), 0x7A, 4096).ok());
  ASSERT_TRUE(s->Record(*e).ok());
  EXPECT_FALSE(Take(e->Query())) << "the stream is held at the gate";
  gate.Open();
  ASSERT_TRUE(e->Synchronize().ok());
  EXPECT_TRUE(Take(e->Query()));
  EXPECT_TRUE(AllBytes(Download(*device_, *s, d.data(), 4096), 0x7A));

  // Recording again re-captures: the event is pending again until the new work finishes.
  Gate gate2;
  GateOpener opener2(gate2);
  ASSERT_TRUE(s->AddHostCallback(&Gate::WaitFn, &gate2).ok());
  ASSERT_TRUE(s->Record(*e).ok());
  EXPECT_FALSE(Take(e->Query()));
  gate2.Open();
  ASSERT_TRUE(e->Synchronize().ok());
  EXPECT_TRUE(Take(e->Query()));
}

TEST_P(DeviceConformance, CrossStreamWaitOrdersWorkWithoutBlockingTheHost) {
  constexpr uint64_t kBytes = 64 << 10;
  Gate gate1, gate2;
  std::unique_ptr<Stream> producer = Take(device_->CreateStream());
  std::unique_ptr<Stream> consumer = Take(device_->CreateStream());
  GateOpener open1(gate1), open2(gate2);
  std::unique_ptr<Event> produced = Take(device_->CreateEvent());
  std::unique_ptr<Event> consumed = Take(device_->CreateEvent());
  DeviceBuffer x = Take(device_->AllocateDevice(kBytes));
  PinnedHostBuffer out = Take(device_->AllocatePinnedHost(kBytes));

  ASSERT_TRUE(producer->AddHostCallback(&Gate::WaitFn, &gate1).ok());
  ASSERT_TRUE(producer->Fill(x.data(), 1, kBytes).ok());
  ASSERT_TRUE(producer->Record(*produced).ok());
  // Every call below returns at once although the consumer cannot run yet.
  ASSERT_TRUE(consumer->WaitEvent(*produced).ok());
  ASSERT_TRUE(consumer->CopyDeviceToHost(out.data(), x.data(), kBytes).ok());
  ASSERT_TRUE(consumer->Record(*consumed).ok());
  // Re-recording `produced` after the wait was enqueued must not extend the wait.
  ASSERT_TRUE(producer->AddHostCallback(&Gate::WaitFn, &gate2).ok());
  ASSERT_TRUE(producer->Record(*produced).ok());

  EXPECT_FALSE(Take(consumed->Query()));
  gate1.Open();
  ASSERT_TRUE(consumed->Synchronize().ok()) << "consumer waited for the second record";
  EXPECT_TRUE(AllBytes({out.data(), kBytes}, 1));
  EXPECT_FALSE(Take(produced->Query()));
  gate2.Open();
  ASSERT_TRUE(producer->Synchronize().ok());

  // A stream waiting on its own event does not deadlock.
  ASSERT_TRUE(producer->Record(*produced).ok());
  ASSERT_TRUE(producer->WaitEvent(*produced).ok());
  ASSERT_TRUE(producer->Synchronize().ok());
}

TEST_P(DeviceConformance, FlagLetsAStreamWaitForWorkNotYetEnqueued) {
  if (!device_->capabilities().stream_memory_ops) {
    GTEST_SKIP() << "device has no stream memory operations";
  }
  constexpr uint64_t kBytes = 64 << 10;
  std::unique_ptr<DeviceFlag> ready = Take(device_->CreateFlag());
  EXPECT_EQ(ready->Get(), 0u);
  std::unique_ptr<Stream> model = Take(device_->CreateStream());
  std::unique_ptr<Stream> pipeline = Take(device_->CreateStream());
  std::unique_ptr<Event> done = Take(device_->CreateEvent());
  DeviceBuffer x = Take(device_->AllocateDevice(kBytes));
  PinnedHostBuffer out = Take(device_->AllocatePinnedHost(kBytes));

  // The model side reaches "layer 0" first: it enqueues its wait before any restore work.
  ASSERT_TRUE(model->WaitFlag(*ready, 1).ok());
  ASSERT_TRUE(model->CopyDeviceToHost(out.data(), x.data(), kBytes).ok());
  ASSERT_TRUE(model->Record(*done).ok());
  EXPECT_FALSE(Take(done->Query()));
  // The pipeline later produces the layer and publishes it in stream order.
  ASSERT_TRUE(pipeline->Fill(x.data(), 0x33, kBytes).ok());
  ASSERT_TRUE(pipeline->WriteFlag(*ready, 1).ok());
  ASSERT_TRUE(done->Synchronize().ok());
  EXPECT_TRUE(AllBytes({out.data(), kBytes}, 0x33));
  ASSERT_TRUE(pipeline->Synchronize().ok());
  EXPECT_EQ(ready->Get(), 1u);

  // Host-side publication, with a counter that wraps around (cyclic comparison).
  std::unique_ptr<DeviceFlag> counter = Take(device_->CreateFlag());
  counter->Set(0xFFFFFFF0u);
  ASSERT_TRUE(model->WaitFlag(*counter, 0xFFFFFFF0u).ok());  // reached: equal
  ASSERT_TRUE(model->Synchronize().ok());
  ASSERT_TRUE(model->WaitFlag(*counter, 0x10u).ok());  // 0x10 comes after 0xFFFFFFF0
  ASSERT_TRUE(model->Record(*done).ok());
  EXPECT_FALSE(Take(done->Query()));
  counter->Set(0x10u);
  ASSERT_TRUE(done->Synchronize().ok());
  ASSERT_TRUE(model->WaitFlag(*counter, 0xFFFFFFF8u).ok());  // already passed
  ASSERT_TRUE(model->Synchronize().ok());
}

struct DoneFlag {
  std::atomic<bool> done{false};
};
void MarkDone(void* p) { static_cast<DoneFlag*>(p)->done = true; }

TEST_P(DeviceConformance, DestroyingAStreamWaitsForItsWork) {
  constexpr uint64_t kBytes = 1 << 20;
  DeviceBuffer d = Take(device_->AllocateDevice(kBytes));
  PinnedHostBuffer out = Take(device_->AllocatePinnedHost(kBytes));
  DoneFlag flag;
  {
    std::unique_ptr<Stream> s = Take(device_->CreateStream());
    ASSERT_TRUE(s->Fill(d.data(), 0x44, kBytes).ok());
    ASSERT_TRUE(s->CopyDeviceToHost(out.data(), d.data(), kBytes).ok());
    ASSERT_TRUE(s->AddHostCallback(&MarkDone, &flag).ok());
  }
  EXPECT_TRUE(flag.done.load());
  EXPECT_TRUE(AllBytes({out.data(), kBytes}, 0x44));
}

TEST_P(DeviceConformance, ElapsedTimeBetweenTimingEvents) {
  EventOptions timed;
  timed.timing = EventTiming::kEnabled;
  std::unique_ptr<Event> start = Take(device_->CreateEvent(timed));
  std::unique_ptr<Event> end = Take(device_->CreateEvent(timed));
  std::unique_ptr<Event> plain = Take(device_->CreateEvent());
  EXPECT_EQ(device_->ElapsedMs(*start, *end).status().code(), StatusCode::kFailedPrecondition)
      << "never recorded";
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  DeviceBuffer d = Take(device_->AllocateDevice(8 << 20));
  ASSERT_TRUE(s->Record(*start).ok());
  ASSERT_TRUE(s->Fill(d.data(), 1, 8 << 20).ok());
  ASSERT_TRUE(s->Record(*end).ok());
  ASSERT_TRUE(s->Record(*plain).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  Result<double> ms = device_->ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 0.0);
  EXPECT_FALSE(device_->ElapsedMs(*start, *plain).ok()) << "plain events carry no time";
}

TEST_P(DeviceConformance, RejectsObjectsOfAnotherDevice) {
  std::unique_ptr<Device> other = MakeAnother();
  ASSERT_NE(other, nullptr);
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::unique_ptr<Event> foreign_event = Take(other->CreateEvent());
  std::unique_ptr<DeviceFlag> foreign_flag = Take(other->CreateFlag());
  EXPECT_EQ(s->Record(*foreign_event).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->WaitEvent(*foreign_event).code(), StatusCode::kInvalidArgument);
  if (device_->capabilities().stream_memory_ops) {
    EXPECT_EQ(s->WaitFlag(*foreign_flag, 1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s->WriteFlag(*foreign_flag, 1).code(), StatusCode::kInvalidArgument);
  }
  std::unique_ptr<Event> mine = Take(device_->CreateEvent());
  EXPECT_EQ(device_->ElapsedMs(*mine, *foreign_event).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(DeviceConformance, KernelLaunchesValidateTheirArguments) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  DeviceBuffer d = Take(device_->AllocateDevice(1 << 16));
  kernels::ScatterArgs scatter;
  scatter.num_tokens = 1;
  scatter.stripe = d.bytes();
  scatter.slots = reinterpret_cast<const int64_t*>(d.bytes() + 4096);
  EXPECT_EQ(s->Scatter(scatter).code(), StatusCode::kInvalidArgument) << "empty view";
  kernels::GatherArgs gather;
  EXPECT_EQ(s->Gather(gather).code(), StatusCode::kInvalidArgument) << "no layers";
  kernels::DigestArgs digest;
  EXPECT_EQ(s->Digest(digest).code(), StatusCode::kInvalidArgument) << "no spans";
  ASSERT_TRUE(s->Synchronize().ok());
}

// The core promise: on every layout x block size x element size, the device's scatter writes
// exactly the reference's bytes into poisoned paged memory, and its gather reproduces the
// reference's stripe (skipped tokens keep the poison).
TEST_P(DeviceConformance, ScatterAndGatherMatchTheReference) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  for (const LayoutCase& c : AllLayoutCases(GetParam().case_scale * 7919, GetParam().case_scale)) {
    SCOPED_TRACE(c.Name());
    std::mt19937_64 rng(c.seed);
    const uint64_t layer_bytes = Take(kernels::PagedLayerBytes(c.layout, c.shape));
    const uint64_t stripe_bytes = c.num_tokens * RowBytes(c);
    std::vector<uint8_t> stripe(stripe_bytes);
    FillRandom(stripe, rng);
    const std::vector<int64_t> slots = CaseSlotMapping(c, 10, rng);

    DeviceBuffer d_paged = Take(device_->AllocateDevice(layer_bytes));
    DeviceBuffer d_stripe = Take(device_->AllocateDevice(stripe_bytes));
    DeviceBuffer d_back = Take(device_->AllocateDevice(stripe_bytes));
    DeviceBuffer d_slots = Take(device_->AllocateDevice(slots.size() * sizeof(int64_t)));
    ASSERT_TRUE(s->Fill(d_paged.data(), kPoison, layer_bytes).ok());
    ASSERT_TRUE(s->Fill(d_back.data(), kPoison, stripe_bytes).ok());
    Upload(*device_, *s, d_stripe.data(), stripe);
    Upload(*device_, *s, d_slots.data(),
           {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * sizeof(int64_t)});

    const kernels::PagedKvView view =
        Take(kernels::MakePagedKvView(c.layout, c.shape, d_paged.data()));
    const kernels::ScatterArgs scatter{.dst = view,
                                       .stripe = d_stripe.bytes(),
                                       .slots = reinterpret_cast<const int64_t*>(d_slots.data()),
                                       .num_tokens = c.num_tokens};
    ASSERT_TRUE(s->Scatter(scatter).ok());
    kernels::GatherArgs gather;
    gather.src[0] = view;
    gather.num_layers = 1;
    gather.slots = scatter.slots;
    gather.num_tokens = c.num_tokens;
    gather.out = d_back.bytes();
    ASSERT_TRUE(s->Gather(gather).ok());

    // The CPU reference on host copies, and the oracle, must agree with the device.
    std::vector<uint8_t> ref_paged(layer_bytes, kPoison);
    kernels::ScatterArgs host_scatter = scatter;
    host_scatter.dst = Take(kernels::MakePagedKvView(c.layout, c.shape, ref_paged.data()));
    host_scatter.stripe = stripe.data();
    host_scatter.slots = slots.data();
    kernels::ScatterReference(host_scatter);
    const std::vector<uint8_t> oracle_paged =
        OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe, slots);
    ASSERT_EQ(FirstDifference(ref_paged, oracle_paged), -1);

    const std::vector<uint8_t> got_paged = Download(*device_, *s, d_paged.data(), layer_bytes);
    ASSERT_EQ(FirstDifference(got_paged, ref_paged), -1) << "scatter";
    const std::vector<uint8_t> got_back = Download(*device_, *s, d_back.data(), stripe_bytes);
    const std::vector<uint8_t> oracle_back =
        OracleGather(c, oracle_paged, std::vector<uint8_t>(stripe_bytes, kPoison), slots);
    ASSERT_EQ(FirstDifference(got_back, oracle_back), -1) << "gather";
  }
}

// Zero-copy: where advertised, a scatter reads its stripe straight from pinned host memory
// (a pinned read bank) and a digest reads pinned memory too.
TEST_P(DeviceConformance, KernelsReadPinnedHostMemoryWhenAdvertised) {
  if (!device_->capabilities().kernels_access_pinned_host) {
    GTEST_SKIP() << "device kernels cannot access pinned host memory";
  }
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::mt19937_64 rng(31);
  const kernels::PagedShape shape{
      .num_blocks = 40, .block_size = 16, .num_heads = 8, .head_size = 128, .elem_bytes = 2};
  const LayoutCase c{
      .layout = kernels::PagedLayout::kFlashAttnHnd, .shape = shape, .num_tokens = 500};
  const uint64_t layer_bytes = Take(kernels::PagedLayerBytes(c.layout, shape));
  const uint64_t stripe_bytes = c.num_tokens * RowBytes(c);
  PinnedHostBuffer stripe = Take(device_->AllocatePinnedHost(stripe_bytes));
  FillRandom({stripe.data(), stripe_bytes}, rng);
  const std::vector<int64_t> slots =
      RandomSlotMapping(shape.num_blocks * shape.block_size, c.num_tokens, 5, rng);
  DeviceBuffer d_slots = Take(device_->AllocateDevice(slots.size() * sizeof(int64_t)));
  Upload(*device_, *s, d_slots.data(),
         {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * sizeof(int64_t)});
  DeviceBuffer paged = Take(device_->AllocateDevice(layer_bytes));
  ASSERT_TRUE(s->Fill(paged.data(), kPoison, layer_bytes).ok());
  ASSERT_TRUE(s->Scatter({.dst = Take(kernels::MakePagedKvView(c.layout, c.shape, paged.data())),
                          .stripe = stripe.data(),
                          .slots = static_cast<const int64_t*>(d_slots.data()),
                          .num_tokens = c.num_tokens})
                  .ok());
  DeviceBuffer digest = Take(device_->AllocateDevice(8));
  kernels::DigestArgs a;
  a.spans[0] = {stripe.data(), stripe_bytes};
  a.num_spans = 1;
  a.digests = static_cast<uint64_t*>(digest.data());
  ASSERT_TRUE(s->Digest(a).ok());
  const std::vector<uint8_t> got = Download(*device_, *s, paged.data(), layer_bytes);
  const std::vector<uint8_t> want = OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison),
                                                  {stripe.data(), stripe_bytes}, slots);
  ASSERT_EQ(FirstDifference(got, want), -1);
  const std::vector<uint8_t> raw = Download(*device_, *s, digest.data(), 8);
  uint64_t d;
  std::memcpy(&d, raw.data(), 8);
  EXPECT_EQ(d, kernels::SpanDigest(stripe.data(), stripe_bytes, 0));
}

// A store layer group: several layers gathered in one launch into bank regions with gaps.
TEST_P(DeviceConformance, GatherOfALayerGroupMatchesTheReference) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::mt19937_64 rng(77);
  const kernels::PagedShape shape{.num_blocks = 24 * GetParam().case_scale,
                                  .block_size = 16,
                                  .num_heads = 4,
                                  .head_size = 128,
                                  .elem_bytes = 2};
  for (kernels::PagedLayout layout :
       {kernels::PagedLayout::kFlashAttnNhd, kernels::PagedLayout::kFlashInferHnd,
        kernels::PagedLayout::kPackedHnd, kernels::PagedLayout::kCpuBlock}) {
    // 3/4 of the slots; num_blocks is a multiple of 4, so a whole number of blocks (kCpuBlock).
    const LayoutCase c{.layout = layout, .shape = shape, .num_tokens = shape.num_blocks * 12};
    SCOPED_TRACE(c.Name());
    const uint64_t layer_bytes = Take(kernels::PagedLayerBytes(layout, shape));
    const uint64_t region = c.num_tokens * RowBytes(c);
    const uint64_t stride = region + 8192;
    constexpr uint32_t kLayers = 4;
    const std::vector<int64_t> slots = CaseSlotMapping(c, 15, rng);
    DeviceBuffer d_slots = Take(device_->AllocateDevice(slots.size() * sizeof(int64_t)));
    Upload(*device_, *s, d_slots.data(),
           {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * sizeof(int64_t)});
    DeviceBuffer bank = Take(device_->AllocateDevice(stride * kLayers));
    ASSERT_TRUE(s->Fill(bank.data(), kPoison, stride * kLayers).ok());
    std::vector<std::vector<uint8_t>> layers;
    std::vector<DeviceBuffer> d_layers;
    kernels::GatherArgs g;
    for (uint32_t l = 0; l < kLayers; ++l) {
      layers.emplace_back(layer_bytes);
      FillRandom(layers.back(), rng);
      d_layers.push_back(Take(device_->AllocateDevice(layer_bytes)));
      Upload(*device_, *s, d_layers.back().data(), layers.back());
      g.src[l] = Take(kernels::MakePagedKvView(layout, shape, d_layers.back().data()));
    }
    g.num_layers = kLayers;
    g.slots = reinterpret_cast<const int64_t*>(d_slots.data());
    g.num_tokens = c.num_tokens;
    g.out = bank.bytes();
    g.out_layer_stride_bytes = stride;
    ASSERT_TRUE(s->Gather(g).ok());
    const std::vector<uint8_t> got = Download(*device_, *s, bank.data(), stride * kLayers);
    for (uint32_t l = 0; l < kLayers; ++l) {
      const std::vector<uint8_t> want =
          OracleGather(c, layers[l], std::vector<uint8_t>(region, kPoison), slots);
      ASSERT_EQ(FirstDifference(std::span<const uint8_t>(got.data() + l * stride, region), want),
                -1)
          << "layer " << l;
      ASSERT_TRUE(AllBytes({got.data() + l * stride + region, stride - region}, kPoison))
          << "gap after layer " << l;
    }
  }
}

// vLLM's cross-layer KV cache (vLLM 0.25.1 FlashAttention/FlashInfer with
// include_num_layers_dimension): one allocation whose blocks hold every layer, physical
// [N, L, 2, B, H, D] (NHD) or [N, H, L, 2, B, D] (HND), each layer handed over as a strided view.
// Scatter into every layer, then gather each back: the bytes land where the 6-D tensor's own
// index arithmetic puts them, no layer touches another's, and the gathers read what was written.
TEST_P(DeviceConformance, CrossLayerStridedViewsMatchTheSixDimensionalOracle) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::mt19937_64 rng(4242);
  for (const bool hnd : {false, true}) {
    for (const uint32_t elem : {2u, 1u}) {
      const uint32_t N = 6 * GetParam().case_scale, L = 3, B = 16, H = 2, D = 40;
      SCOPED_TRACE(std::string(hnd ? "HND" : "NHD") + " elem " + std::to_string(elem));
      const kernels::PagedShape shape{
          .num_blocks = N, .block_size = B, .num_heads = H, .head_size = D, .elem_bytes = elem};
      const int64_t e = elem;
      kernels::PagedStrides st;
      int64_t layer_step = 0;
      if (!hnd) {
        st = {.plane = B * H * D * e,
              .block = L * 2 * B * H * D * e,
              .token = H * D * e,
              .head = D * e};
        layer_step = 2 * B * H * D * e;
      } else {
        st = {.plane = B * D * e,
              .block = H * L * 2 * B * D * e,
              .token = D * e,
              .head = L * 2 * B * D * e};
        layer_step = 2 * B * D * e;
      }
      auto oracle = [&](uint32_t n, uint32_t l, uint32_t p, uint32_t t, uint32_t h) -> uint64_t {
        const uint64_t idx = hnd ? ((((uint64_t{n} * H + h) * L + l) * 2 + p) * B + t)
                                 : ((((uint64_t{n} * L + l) * 2 + p) * B + t) * H + h);
        return idx * D * e;
      };
      const uint64_t total = uint64_t{N} * L * 2 * B * H * D * e;
      const uint64_t row = 2ull * H * D * e;
      const uint32_t tokens = N * B * 3 / 4;
      DeviceBuffer d_all = Take(device_->AllocateDevice(total));
      ASSERT_TRUE(s->Fill(d_all.data(), kPoison, total).ok());
      std::vector<void*> bases;
      for (uint32_t l = 0; l < L; ++l) bases.push_back(d_all.bytes() + l * layer_step);
      ASSERT_TRUE(kernels::CheckStridedLayersDisjoint(shape, st, bases).ok());

      std::vector<uint8_t> want(total, kPoison);
      std::vector<std::vector<uint8_t>> stripes;
      std::vector<std::vector<int64_t>> maps;
      std::vector<DeviceBuffer> keep;
      for (uint32_t l = 0; l < L; ++l) {
        stripes.emplace_back(tokens * row);
        FillRandom(stripes.back(), rng);
        maps.push_back(RandomSlotMapping(N * B, tokens, 10, rng));
        keep.push_back(Take(device_->AllocateDevice(stripes.back().size())));
        Upload(*device_, *s, keep.back().data(), stripes.back());
        keep.push_back(Take(device_->AllocateDevice(tokens * sizeof(int64_t))));
        Upload(*device_, *s, keep.back().data(),
               {reinterpret_cast<const uint8_t*>(maps.back().data()), tokens * sizeof(int64_t)});
        const kernels::ScatterArgs a{
            .dst = Take(kernels::MakeStridedPagedKvView(shape, st, bases[l])),
            .stripe = keep[2 * l].bytes(),
            .slots = reinterpret_cast<const int64_t*>(keep[2 * l + 1].data()),
            .num_tokens = tokens};
        ASSERT_TRUE(s->Scatter(a).ok());
        for (uint32_t i = 0; i < tokens; ++i) {
          const int64_t slot = maps.back()[i];
          if (slot < 0) continue;
          const uint32_t n = static_cast<uint32_t>(slot / B), t = static_cast<uint32_t>(slot % B);
          for (uint32_t p = 0; p < 2; ++p) {
            for (uint32_t h = 0; h < H; ++h) {
              std::memcpy(want.data() + oracle(n, l, p, t, h),
                          stripes.back().data() + i * row + (p * H + h) * D * e, D * e);
            }
          }
        }
      }
      const std::vector<uint8_t> got = Download(*device_, *s, d_all.data(), total);
      ASSERT_EQ(FirstDifference(got, want), -1) << "scatter";

      for (uint32_t l = 0; l < L; ++l) {
        DeviceBuffer back = Take(device_->AllocateDevice(tokens * row));
        ASSERT_TRUE(s->Fill(back.data(), kPoison, tokens * row).ok());
        kernels::GatherArgs g;
        g.src[0] = Take(kernels::MakeStridedPagedKvView(shape, st, bases[l]));
        g.num_layers = 1;
        g.slots = reinterpret_cast<const int64_t*>(keep[2 * l + 1].data());
        g.num_tokens = tokens;
        g.out = back.bytes();
        ASSERT_TRUE(s->Gather(g).ok());
        std::vector<uint8_t> expect = stripes[l];
        for (uint32_t i = 0; i < tokens; ++i) {
          if (maps[l][i] < 0) std::memset(expect.data() + i * row, kPoison, row);
        }
        ASSERT_EQ(FirstDifference(Download(*device_, *s, back.data(), tokens * row), expect), -1)
            << "gather of layer " << l;
      }
    }
  }
}

TEST_P(DeviceConformance, DigestMatchesTheReference) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::mt19937_64 rng(99);
  const uint64_t big = (3ull << 20) * GetParam().case_scale + 5;
  const uint64_t buffer_bytes = big + 64;
  std::vector<uint8_t> host(buffer_bytes);
  FillRandom(host, rng);
  DeviceBuffer data = Take(device_->AllocateDevice(buffer_bytes));
  Upload(*device_, *s, data.data(), host);
  DeviceBuffer digests = Take(device_->AllocateDevice(kernels::kMaxDigestSpans * 8));

  kernels::DigestArgs a;
  a.seed = 0xABCDEF;
  a.digests = reinterpret_cast<uint64_t*>(digests.data());
  const uint64_t lengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 4096, 4099, 65536 + 24, big};
  for (uint64_t offset : {0, 3, 8}) {
    for (uint64_t len : lengths) {
      if (offset + len > buffer_bytes || a.num_spans == kernels::kMaxDigestSpans) continue;
      a.spans[a.num_spans++] = {data.bytes() + offset, len};
    }
  }
  ASSERT_TRUE(s->Digest(a).ok());
  std::vector<uint8_t> raw = Download(*device_, *s, digests.data(), a.num_spans * 8);
  for (uint32_t i = 0; i < a.num_spans; ++i) {
    uint64_t got;
    std::memcpy(&got, raw.data() + i * 8, 8);
    const uint64_t offset = static_cast<uint64_t>(a.spans[i].data - data.bytes());
    EXPECT_EQ(got, kernels::SpanDigest(host.data() + offset, a.spans[i].bytes, a.seed))
        << "span " << i << " offset " << offset << " bytes " << a.spans[i].bytes;
  }

  // The golden vectors, on the device.
  for (const kernels::DigestVector& v : kernels::kDigestVectors) {
    const std::vector<uint8_t> bytes = kernels::DigestVectorBytes(v.bytes);
    DeviceBuffer d = Take(device_->AllocateDevice(std::max<uint64_t>(v.bytes, 1)));
    Upload(*device_, *s, d.data(), bytes);
    kernels::DigestArgs one;
    one.spans[0] = {d.bytes(), v.bytes};
    one.num_spans = 1;
    one.seed = v.seed;
    one.digests = a.digests;
    ASSERT_TRUE(s->Digest(one).ok());
    std::vector<uint8_t> r = Download(*device_, *s, digests.data(), 8);
    uint64_t got;
    std::memcpy(&got, r.data(), 8);
    EXPECT_EQ(got, v.digest) << "golden bytes=" << v.bytes << " seed=" << v.seed;
  }
}

// The two verdict tests' case: a random stripe of one FlashAttention-layout layer, its slot
// mapping and the paged layer, on the device.
struct VerdictCase {
  VerdictCase(Device& device, Stream& s, uint32_t case_scale, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const kernels::PagedShape shape{.num_blocks = 16 * case_scale,
                                    .block_size = 16,
                                    .num_heads = 4,
                                    .head_size = 64,
                                    .elem_bytes = 2};
    c = {.layout = kernels::PagedLayout::kFlashAttnNhd,
         .shape = shape,
         .num_tokens = shape.num_blocks * 12};
    layer_bytes = Take(kernels::PagedLayerBytes(c.layout, shape));
    row = RowBytes(c);
    stripe.resize(c.num_tokens * row);
    FillRandom(stripe, rng);
    d_stripe = Take(device.AllocateDevice(stripe.size()));
    Upload(device, s, d_stripe.data(), stripe);
    slots = CaseSlotMapping(c, 0, rng);
    d_slots = Take(device.AllocateDevice(slots.size() * sizeof(int64_t)));
    Upload(device, s, d_slots.data(),
           {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * sizeof(int64_t)});
    paged = Take(device.AllocateDevice(layer_bytes));
  }
  LayoutCase c;
  uint64_t layer_bytes = 0, row = 0;
  std::vector<uint8_t> stripe;
  std::vector<int64_t> slots;
  DeviceBuffer d_stripe, d_slots, paged;
};

// The restore path's device-side verdict: the digest compares with the expected digests and
// sets the mismatch word; the scatter gated on that word writes everything when the digests
// match and nothing when one block differs, with no host wait between them.
TEST_P(DeviceConformance, DigestVerdictGatesTheScatter) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  VerdictCase v(*device_, *s, GetParam().case_scale, 123);
  const LayoutCase& c = v.c;
  const uint64_t layer_bytes = v.layer_bytes, row = v.row, stripe_bytes = v.stripe.size();
  const std::vector<uint8_t>& stripe = v.stripe;
  const std::vector<int64_t>& slots = v.slots;
  DeviceBuffer &d_stripe = v.d_stripe, &d_slots = v.d_slots, &paged = v.paged;

  // Three digest blocks over the stripe (the last one short), as the restore path cuts them.
  constexpr uint32_t kBlocks = 3;
  const uint64_t block_bytes = (c.num_tokens / kBlocks + 1) * row;
  std::vector<uint64_t> expected(kBlocks);
  kernels::DigestArgs a;
  a.seed = 0x5EED;
  for (uint32_t i = 0; i < kBlocks; ++i) {
    const uint64_t lo = i * block_bytes, hi = std::min(stripe_bytes, lo + block_bytes);
    a.spans[a.num_spans++] = {d_stripe.bytes() + lo, hi - lo};
    expected[i] = kernels::SpanDigest(stripe.data() + lo, hi - lo, a.seed);
  }
  DeviceBuffer digests = Take(device_->AllocateDevice(kBlocks * sizeof(uint64_t)));
  DeviceBuffer d_expected = Take(device_->AllocateDevice(kBlocks * sizeof(uint64_t)));
  DeviceBuffer mismatch = Take(device_->AllocateDevice(sizeof(uint32_t)));
  a.digests = static_cast<uint64_t*>(digests.data());
  a.expected = static_cast<const uint64_t*>(d_expected.data());
  a.mismatch = static_cast<uint32_t*>(mismatch.data());
  const kernels::ScatterArgs scatter{
      .dst = Take(kernels::MakePagedKvView(c.layout, c.shape, paged.data())),
      .stripe = d_stripe.bytes(),
      .slots = static_cast<const int64_t*>(d_slots.data()),
      .num_tokens = c.num_tokens,
      .skip_if_set = a.mismatch};

  for (const bool corrupt : {false, true}) {
    SCOPED_TRACE(corrupt ? "one digest differs" : "digests match");
    std::vector<uint64_t> want_digests = expected;
    if (corrupt) want_digests[1] ^= 1;
    Upload(*device_, *s, d_expected.data(),
           {reinterpret_cast<const uint8_t*>(want_digests.data()), kBlocks * sizeof(uint64_t)});
    ASSERT_TRUE(s->Fill(paged.data(), kPoison, layer_bytes).ok());
    ASSERT_TRUE(s->Fill(mismatch.data(), 0, sizeof(uint32_t)).ok());
    ASSERT_TRUE(s->Digest(a).ok());
    ASSERT_TRUE(s->Scatter(scatter).ok());
    const std::vector<uint8_t> verdict = Download(*device_, *s, mismatch.data(), sizeof(uint32_t));
    uint32_t bad = 0;
    std::memcpy(&bad, verdict.data(), sizeof bad);
    EXPECT_EQ(bad, corrupt ? 1u : 0u);
    const std::vector<uint8_t> got = Download(*device_, *s, paged.data(), layer_bytes);
    if (corrupt) {
      EXPECT_TRUE(AllBytes(got, kPoison)) << "a gated scatter wrote";
    } else {
      const std::vector<uint8_t> want =
          OracleScatter(c, std::vector<uint8_t>(layer_bytes, kPoison), stripe, slots);
      EXPECT_EQ(FirstDifference(got, want), -1);
    }
  }
  kernels::DigestArgs half = a;
  half.mismatch = nullptr;
  EXPECT_EQ(s->Digest(half).code(), StatusCode::kInvalidArgument) << "expected without mismatch";
}

// A verified scatter writes the rows of the digest spans that matched and flags any span that did
// not; its spans may reach past the scatter's first and last row (the verify extent of a clipped
// restore). A failed span's rows hold, byte for byte, either what was there or the stripe's
// bytes, and nothing else is touched: HostDevice copies and digests in one pass where the CPU
// allows; Stream's default (Digest, then a gated Scatter) writes no row at all when any span
// differs. Both write every computed digest.
TEST_P(DeviceConformance, VerifiedScatterWritesMatchingSpansAndFlagsTheOthers) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  VerdictCase v(*device_, *s, GetParam().case_scale, 321);
  const LayoutCase& c = v.c;
  const uint64_t layer_bytes = v.layer_bytes, row = v.row, stripe_bytes = v.stripe.size();
  const std::vector<uint8_t>& stripe = v.stripe;
  const std::vector<int64_t>& slots = v.slots;
  DeviceBuffer &d_stripe = v.d_stripe, &d_slots = v.d_slots, &paged = v.paged;

  // The scatter covers rows [first, last) of the buffer; three digest spans cover all of it.
  const uint32_t first = 3, last = c.num_tokens - 2;
  constexpr uint32_t kSpans = 3;
  const uint32_t span_rows = c.num_tokens / kSpans + 1;
  std::vector<uint64_t> expected(kSpans);
  kernels::VerifiedScatterArgs a;
  a.digest.seed = 0x5EED;
  for (uint32_t i = 0; i < kSpans; ++i) {
    const uint64_t lo = uint64_t{i} * span_rows * row;
    const uint64_t hi = std::min(stripe_bytes, lo + span_rows * row);
    a.digest.spans[a.digest.num_spans++] = {d_stripe.bytes() + lo, hi - lo};
    expected[i] = kernels::SpanDigest(stripe.data() + lo, hi - lo, a.digest.seed);
  }
  DeviceBuffer digests = Take(device_->AllocateDevice(kSpans * sizeof(uint64_t)));
  DeviceBuffer d_expected = Take(device_->AllocateDevice(kSpans * sizeof(uint64_t)));
  DeviceBuffer mismatch = Take(device_->AllocateDevice(sizeof(uint32_t)));
  a.digest.digests = static_cast<uint64_t*>(digests.data());
  a.digest.expected = static_cast<const uint64_t*>(d_expected.data());
  a.digest.mismatch = static_cast<uint32_t*>(mismatch.data());
  a.scatter = {.dst = Take(kernels::MakePagedKvView(c.layout, c.shape, paged.data())),
               .stripe = d_stripe.bytes() + first * row,
               .slots = static_cast<const int64_t*>(d_slots.data()) + first,
               .num_tokens = last - first};
  ASSERT_TRUE(kernels::ValidateVerifiedScatterArgs(a).ok());

  // The oracle: rows [lo, hi) of the buffer scattered into `paged`.
  auto scatter_rows = [&](std::vector<uint8_t> into, uint32_t lo, uint32_t hi) {
    if (lo >= hi) return into;
    LayoutCase part = c;
    part.num_tokens = hi - lo;
    return OracleScatter(part, std::move(into),
                         std::span<const uint8_t>(stripe).subspan(lo * row, (hi - lo) * row),
                         std::span<const int64_t>(slots).subspan(lo, hi - lo));
  };
  const std::vector<uint8_t> poison(layer_bytes, kPoison);
  for (const int corrupt : {-1, 0, 1, 2}) {
    SCOPED_TRACE(corrupt < 0 ? "digests match" : "span " + std::to_string(corrupt) + " differs");
    std::vector<uint64_t> want_digests = expected;
    if (corrupt >= 0) want_digests[corrupt] ^= 1;
    Upload(*device_, *s, d_expected.data(),
           {reinterpret_cast<const uint8_t*>(want_digests.data()), kSpans * sizeof(uint64_t)});
    ASSERT_TRUE(s->Fill(paged.data(), kPoison, layer_bytes).ok());
    ASSERT_TRUE(s->Fill(mismatch.data(), 0, sizeof(uint32_t)).ok());
    ASSERT_TRUE(s->VerifiedScatter(a).ok());
    const std::vector<uint8_t> verdict = Download(*device_, *s, mismatch.data(), sizeof(uint32_t));
    uint32_t bad = 0;
    std::memcpy(&bad, verdict.data(), sizeof bad);
    EXPECT_EQ(bad, corrupt >= 0 ? 1u : 0u);
    const std::vector<uint8_t> computed =
        Download(*device_, *s, digests.data(), kSpans * sizeof(uint64_t));
    EXPECT_EQ(std::memcmp(computed.data(), expected.data(), computed.size()), 0);
    // The rows of every matching span, clipped to the scatter's.
    std::vector<uint8_t> matching = poison;
    for (uint32_t i = 0; i < kSpans; ++i) {
      if (static_cast<int>(i) == corrupt) continue;
      matching = scatter_rows(std::move(matching), std::max(first, i * span_rows),
                              std::min(last, (i + 1) * span_rows));
    }
    const std::vector<uint8_t> got = Download(*device_, *s, paged.data(), layer_bytes);
    if (corrupt < 0) {
      EXPECT_EQ(FirstDifference(got, matching), -1);
    } else if (GetParam().kind != DeviceKind::kHost) {
      EXPECT_TRUE(AllBytes(got, kPoison)) << "the default (gated) form wrote";
    } else {
      // Each byte is the matching spans' oracle, or, where the failed span's rows land, either
      // that (untouched) or the stripe's byte (written). The two oracles agree everywhere else,
      // so this holds every other byte to its one right value.
      const std::vector<uint8_t> all = scatter_rows(poison, first, last);
      for (uint64_t i = 0; i < layer_bytes; ++i) {
        if (got[i] != matching[i] && got[i] != all[i]) {
          ADD_FAILURE() << "paged byte " << i << " is neither left as it was nor the stripe's";
          break;
        }
      }
    }
  }
  kernels::VerifiedScatterArgs shifted = a;
  shifted.digest.spans[1].data += row;  // a gap between spans 0 and 1
  EXPECT_EQ(s->VerifiedScatter(shifted).code(), StatusCode::kInvalidArgument);
  kernels::VerifiedScatterArgs short_spans = a;
  short_spans.digest.num_spans = 1;  // rows of the scatter left uncovered
  EXPECT_EQ(s->VerifiedScatter(short_spans).code(), StatusCode::kInvalidArgument);
  kernels::VerifiedScatterArgs no_verdict = a;
  no_verdict.digest.expected = nullptr;
  no_verdict.digest.mismatch = nullptr;
  EXPECT_EQ(s->VerifiedScatter(no_verdict).code(), StatusCode::kInvalidArgument);
}

// A digested gather writes what Gather writes and the digests of what it wrote, whether its
// spans tile the output (HostDevice then gathers and digests in one pass) or not (Gather, then
// Digest): two layers into a bank whose regions are a gap apart, cut into blocks of 65 and of 64
// rows per layer, then with one span reaching into the gap; in the case's layout and with opaque
// blocks, where 65-row blocks cut block groups (a group moves whole, so HostDevice must not
// split them between its chunks). A verdict is refused.
TEST_P(DeviceConformance, GatherDigestWritesTheGatherAndDigestsWhatItWrote) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  VerdictCase v(*device_, *s, GetParam().case_scale, 555);
  const uint64_t layer_bytes = v.layer_bytes, row = v.row;
  std::mt19937_64 rng(556);
  std::vector<uint8_t> kv0(layer_bytes), kv1(layer_bytes);
  FillRandom(kv0, rng);
  FillRandom(kv1, rng);
  DeviceBuffer paged1 = Take(device_->AllocateDevice(layer_bytes));
  Upload(*device_, *s, v.paged.data(), kv0);
  Upload(*device_, *s, paged1.data(), kv1);
  const uint64_t region = uint64_t{v.c.num_tokens} * row;
  const uint64_t stride = region + 4096;
  DeviceBuffer bank = Take(device_->AllocateDevice(2 * stride));
  DeviceBuffer digests = Take(device_->AllocateDevice(kernels::kMaxDigestSpans * 8));
  DeviceBuffer d_slots = Take(device_->AllocateDevice(v.slots.size() * sizeof(int64_t)));
  DeviceBuffer mismatch = Take(device_->AllocateDevice(sizeof(uint32_t)));
  for (const kernels::PagedLayout layout : {v.c.layout, kernels::PagedLayout::kCpuBlock}) {
    LayoutCase c = v.c;
    c.layout = layout;
    ASSERT_EQ(Take(kernels::PagedLayerBytes(layout, c.shape)), layer_bytes);
    const std::vector<int64_t> slots = CaseSlotMapping(c, 0, rng);
    Upload(*device_, *s, d_slots.data(),
           {reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * sizeof(int64_t)});
    std::vector<uint8_t> want(2 * stride, kPoison);
    for (uint32_t l = 0; l < 2; ++l) {
      const std::vector<uint8_t> rows =
          OracleGather(c, l == 0 ? kv0 : kv1, std::vector<uint8_t>(region, kPoison), slots);
      std::copy(rows.begin(), rows.end(), want.begin() + l * stride);
    }
    // Blocks of a multiple of 64 rows and of one row more, at most 15 per layer (the scaled
    // CUDA case has more tokens than 15 x 64; a call digests at most kMaxDigestSpans spans).
    const uint32_t per_block = (c.num_tokens + 14) / 15;
    const uint32_t aligned_rows = std::max<uint32_t>(64, (per_block + 63) / 64 * 64);
    for (const uint32_t block_rows : {aligned_rows + 1, aligned_rows}) {
      kernels::DigestedGatherArgs a;
      a.gather.src[0] = Take(kernels::MakePagedKvView(layout, c.shape, v.paged.data()));
      a.gather.src[1] = Take(kernels::MakePagedKvView(layout, c.shape, paged1.data()));
      a.gather.num_layers = 2;
      a.gather.slots = static_cast<const int64_t*>(d_slots.data());
      a.gather.num_tokens = c.num_tokens;
      a.gather.out = bank.bytes();
      a.gather.out_layer_stride_bytes = stride;
      a.digest.seed = 0x5EED;
      a.digest.digests = static_cast<uint64_t*>(digests.data());
      for (uint32_t l = 0; l < 2; ++l) {
        for (uint32_t r = 0; r < c.num_tokens; r += block_rows) {
          const uint32_t n = std::min(block_rows, c.num_tokens - r);
          ASSERT_LT(a.digest.num_spans, kernels::kMaxDigestSpans);
          a.digest.spans[a.digest.num_spans++] = {bank.bytes() + l * stride + r * row, n * row};
        }
      }
      kernels::DigestedGatherArgs untiled = a;  // the last span reaches 64 bytes into the gap
      untiled.digest.spans[untiled.digest.num_spans - 1].bytes += 64;
      for (const kernels::DigestedGatherArgs* args : {&a, &untiled}) {
        SCOPED_TRACE(std::string(LayoutName(layout)) + ", blocks of " + std::to_string(block_rows) +
                     " rows" + (args == &a ? "" : ", a span reaching into the gap"));
        ASSERT_TRUE(s->Fill(bank.data(), kPoison, 2 * stride).ok());
        ASSERT_TRUE(s->GatherDigest(*args).ok());
        const std::vector<uint8_t> got = Download(*device_, *s, bank.data(), 2 * stride);
        EXPECT_EQ(FirstDifference(got, want), -1);
        const std::vector<uint8_t> computed =
            Download(*device_, *s, digests.data(), args->digest.num_spans * 8);
        for (uint32_t k = 0; k < args->digest.num_spans; ++k) {
          const uint64_t at = static_cast<uint64_t>(args->digest.spans[k].data - bank.bytes());
          uint64_t d = 0;
          std::memcpy(&d, computed.data() + 8 * k, 8);
          EXPECT_EQ(d, kernels::SpanDigest(want.data() + at, args->digest.spans[k].bytes, 0x5EED))
              << "span " << k;
        }
      }
      kernels::DigestedGatherArgs verdict = a;
      verdict.digest.expected = a.digest.digests;
      verdict.digest.mismatch = static_cast<uint32_t*>(mismatch.data());
      EXPECT_EQ(s->GatherDigest(verdict).code(), StatusCode::kInvalidArgument);
    }
  }
}

// Three streams in a ring hand one buffer around 48 times, each hop ordered only by events
// that are re-recorded every round. A missing or wrongly captured wait shows up as a wrong
// round number in the copies (more likely under HostDevice jitter).
TEST_P(DeviceConformance, EventRingAcrossStreams) {
  constexpr uint32_t kRounds = 48;
  constexpr uint64_t kChunk = 4096;
  std::unique_ptr<Stream> writer = Take(device_->CreateStream());
  std::unique_ptr<Stream> copier1 = Take(device_->CreateStream());
  std::unique_ptr<Stream> copier2 = Take(device_->CreateStream());
  std::unique_ptr<Event> written = Take(device_->CreateEvent());
  std::unique_ptr<Event> copied1 = Take(device_->CreateEvent());
  std::unique_ptr<Event> copied2 = Take(device_->CreateEvent());
  DeviceBuffer x = Take(device_->AllocateDevice(kChunk));
  DeviceBuffer y1 = Take(device_->AllocateDevice(kChunk * kRounds));
  DeviceBuffer y2 = Take(device_->AllocateDevice(kChunk * kRounds));
  for (uint32_t r = 0; r < kRounds; ++r) {
    ASSERT_TRUE(writer->WaitEvent(*copied2).ok());  // the last reader of round r - 1
    ASSERT_TRUE(writer->Fill(x.data(), static_cast<uint8_t>(r + 1), kChunk).ok());
    ASSERT_TRUE(writer->Record(*written).ok());
    ASSERT_TRUE(copier1->WaitEvent(*written).ok());
    ASSERT_TRUE(copier1->CopyDeviceToDevice(y1.bytes() + r * kChunk, x.data(), kChunk).ok());
    ASSERT_TRUE(copier1->Record(*copied1).ok());
    ASSERT_TRUE(copier2->WaitEvent(*copied1).ok());
    ASSERT_TRUE(copier2->CopyDeviceToDevice(y2.bytes() + r * kChunk, x.data(), kChunk).ok());
    ASSERT_TRUE(copier2->Record(*copied2).ok());
  }
  ASSERT_TRUE(copier2->Synchronize().ok());
  const std::vector<uint8_t> got1 = Download(*device_, *copier2, y1.data(), kChunk * kRounds);
  const std::vector<uint8_t> got2 = Download(*device_, *copier2, y2.data(), kChunk * kRounds);
  for (uint32_t r = 0; r < kRounds; ++r) {
    ASSERT_TRUE(AllBytes({got1.data() + r * kChunk, kChunk}, static_cast<uint8_t>(r + 1)))
        << "copier 1 round " << r;
    ASSERT_TRUE(AllBytes({got2.data() + r * kChunk, kChunk}, static_cast<uint8_t>(r + 1)))
        << "copier 2 round " << r;
  }
}

struct Counter {
  std::atomic<uint64_t> n{0};
};
void Increment(void* p) { static_cast<Counter*>(p)->n.fetch_add(1); }

// Several host threads enqueue on one stream at once (a thread-safety check for TSan).
TEST_P(DeviceConformance, ConcurrentEnqueuersOnOneStream) {
  std::unique_ptr<Stream> s = Take(device_->CreateStream());
  std::unique_ptr<Event> e = Take(device_->CreateEvent());
  Counter counter;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_TRUE(s->AddHostCallback(&Increment, &counter).ok());
        if (i % 50 == 0) {
          EXPECT_TRUE(s->Record(*e).ok());
          EXPECT_TRUE(e->Query().ok());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(counter.n.load(), uint64_t{kThreads} * kPerThread);
}

}  // namespace
}  // namespace rangekv::testing
