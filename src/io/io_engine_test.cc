#include "io/io_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "base/units.h"
#include "testing/fault_env.h"
#include "testing/gauged_file.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::FaultInjectingEnv;
using testing::FaultKind;
using testing::FaultOp;
using testing::TempDir;

constexpr FileOptions kBuffered{.mode = OpenMode::kReadWrite, .direct = DirectIo::kOff};
constexpr FileOptions kDirect{.mode = OpenMode::kReadWrite, .direct = DirectIo::kPreferred};
constexpr uint64_t kAlign = 4096;

struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t n, uint8_t fill = 0)
      : data(static_cast<uint8_t*>(
            std::aligned_alloc(kMaxDirectAlignmentBytes, AlignUp(n, kMaxDirectAlignmentBytes)))),
        size(n) {
    std::memset(data, fill, n);
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
  uint64_t size;
};

void FillPattern(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    p[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
  }
}

// Writes `n` pattern bytes to a new file (plain PosixEnv) and returns them.
std::vector<uint8_t> MakeFile(const std::string& path, uint64_t n, uint64_t seed) {
  std::vector<uint8_t> data(n);
  FillPattern(data.data(), n, seed);
  EXPECT_TRUE(
      DefaultEnv()->WriteSmallFile(path, std::string(data.begin(), data.end()), false).ok());
  return data;
}

struct EngineParam {
  const char* name;
  IoEngineKind kind;
  UringSubmit submit;
};

class IoEngineTest : public ::testing::TestWithParam<EngineParam> {
 protected:
  void SetUp() override { engine_ = Make(IoEngineOptions{}); }

  std::unique_ptr<IoEngine> Make(IoEngineOptions options) {
    options.workers = 3;
    options.queue_depth = 4;
    options.uring_submit = GetParam().submit;
    auto e = MakeIoEngine(GetParam().kind, options);
    if (!e.ok() && e.status().code() == StatusCode::kNotSupported) {
      unavailable_ = e.status().ToString();
      return nullptr;
    }
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Submits and waits; returns the batch's status.
  Status Run(IoBatch& batch) {
    Status s = engine_->Submit(batch);
    if (!s.ok()) return s;
    engine_->Wait(batch);
    EXPECT_TRUE(engine_->Poll(batch));
    return batch.status();
  }

  TempDir dir_;
  std::unique_ptr<IoEngine> engine_;
  std::string unavailable_;
};

#define SKIP_IF_UNAVAILABLE() \
  if (engine_ == nullptr) GTEST_SKIP() << unavailable_

TEST_P(IoEngineTest, ManySpansRoundTripBitExact) {
  SKIP_IF_UNAVAILABLE();
  for (const FileOptions& options : {kBuffered, kDirect}) {
    SCOPED_TRACE(options.direct == DirectIo::kOff ? "buffered" : "direct");
    const std::string path = dir_.Join(options.direct == DirectIo::kOff ? "b" : "d");
    auto file = DefaultEnv()->CreateFile(path, options);
    ASSERT_TRUE(file.ok());
    constexpr uint32_t kSpans = 96;
    // Spans of varied aligned lengths (4 KiB .. 260 KiB) laid out back to back.
    std::vector<uint64_t> offsets, lengths;
    uint64_t total = 0;
    for (uint32_t i = 0; i < kSpans; ++i) {
      offsets.push_back(total);
      lengths.push_back(kAlign * (1 + (i * 37) % 65));
      total += lengths.back();
    }
    AlignedBuffer src(total), dst(total, 0xee);
    FillPattern(src.data, total, 11);
    IoBatch writes(kSpans), reads(kSpans);
    // Reverse order for writes, so completion order differs from file order.
    for (uint32_t i = kSpans; i-- > 0;) {
      ASSERT_TRUE(
          writes.Add({file->get(), offsets[i], src.data + offsets[i], lengths[i], IoOp::kWrite})
              .ok());
    }
    for (uint32_t i = 0; i < kSpans; ++i) {
      ASSERT_TRUE(
          reads.Add({file->get(), offsets[i], dst.data + offsets[i], lengths[i], IoOp::kRead})
              .ok());
    }
    ASSERT_TRUE(Run(writes).ok()) << writes.status().ToString();
    EXPECT_EQ(writes.bytes_moved(), total);
    ASSERT_TRUE(Run(reads).ok()) << reads.status().ToString();
    for (uint32_t i = 0; i < kSpans; ++i) EXPECT_EQ(reads.completion(i).bytes, lengths[i]);
    ASSERT_EQ(0, std::memcmp(src.data, dst.data, total));
    // Resubmitting a done batch reruns every span.
    std::memset(dst.data, 0, total);
    ASSERT_TRUE(Run(reads).ok());
    ASSERT_EQ(0, std::memcmp(src.data, dst.data, total));
  }
  const IoEngineStats st = engine_->stats();
  EXPECT_EQ(st.spans, 2u * 3 * 96);
  EXPECT_EQ(st.batches, 2u * 3);
  EXPECT_EQ(st.failed_spans, 0u);
  EXPECT_GE(st.native_ops, st.spans);
}

TEST_P(IoEngineTest, RegisteredBuffersAndFilesRoundTrip) {
  SKIP_IF_UNAVAILABLE();
  const uint64_t n = 64 * kAlign;
  auto file = DefaultEnv()->CreateFile(dir_.Join("f"), kDirect);
  ASSERT_TRUE(file.ok());
  AlignedBuffer src(n), dst(n);
  FillPattern(src.data, n, 12);
  const IoBuffer bufs[] = {{src.data, n}, {dst.data, n}};
  Status reg = engine_->RegisterBuffers(bufs);
  if (reg.code() == StatusCode::kResourceExhausted) GTEST_SKIP() << reg.ToString();
  ASSERT_TRUE(reg.ok()) << reg.ToString();
  File* files[] = {file->get()};
  ASSERT_TRUE(engine_->RegisterFiles(files).ok());
  if (engine_->caps().registered_buffers) {
    EXPECT_EQ(engine_->caps().buffers_registered, 2u);
    EXPECT_EQ(engine_->caps().files_registered, 1u);
  }
  IoBatch w(8), r(9);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(w.Add({file->get(), i * n / 8, src.data + i * n / 8, n / 8, IoOp::kWrite}).ok());
    ASSERT_TRUE(r.Add({file->get(), i * n / 8, dst.data + i * n / 8, n / 8, IoOp::kRead}).ok());
  }
  // A span only partly inside a registered buffer must not use it.
  AlignedBuffer other(n);
  ASSERT_TRUE(r.Add({file->get(), 0, other.data, n, IoOp::kRead}).ok());
  ASSERT_TRUE(Run(w).ok()) << w.status().ToString();
  ASSERT_TRUE(Run(r).ok()) << r.status().ToString();
  EXPECT_EQ(0, std::memcmp(src.data, dst.data, n));
  EXPECT_EQ(0, std::memcmp(src.data, other.data, n));
  if (engine_->caps().registered_buffers) {
    EXPECT_EQ(engine_->stats().fixed_buffer_ops, 16u);
    EXPECT_EQ(engine_->stats().fixed_file_ops, 17u);
  }
  // Unregister (empty spans) and keep working.
  ASSERT_TRUE(engine_->RegisterBuffers({}).ok());
  ASSERT_TRUE(engine_->RegisterFiles({}).ok());
  EXPECT_EQ(engine_->caps().buffers_registered, 0u);
  ASSERT_TRUE(Run(r).ok());
}

TEST_P(IoEngineTest, ReadPastEndOfFileIsShortTransferWithBytesMoved) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 10000, 13);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(2 * kAlign, 0xee);
  IoBatch batch(2);
  ASSERT_TRUE(batch.Add({file->get(), 8192, buf.data, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data + kAlign, kAlign, IoOp::kRead}).ok());
  const Status s = Run(batch);
  EXPECT_EQ(s.code(), StatusCode::kShortTransfer);
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kShortTransfer);
  EXPECT_EQ(batch.completion(0).bytes, 10000u - 8192u);
  EXPECT_EQ(0, std::memcmp(buf.data, data.data() + 8192, 10000 - 8192));
  EXPECT_TRUE(batch.completion(1).status.ok());  // the other span is unaffected
  EXPECT_EQ(0, std::memcmp(buf.data + kAlign, data.data(), kAlign));
  EXPECT_EQ(batch.failed_spans(), 1u);
  // The partial result was continued once, and the continuation hit end of file.
  EXPECT_GE(engine_->stats().short_retries, 1u);
}

TEST_P(IoEngineTest, ShortReadsAreContinuedUntilComplete) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 64 * kAlign, 14);
  FaultInjectingEnv env(DefaultEnv());
  // Three short results in span 1: up to the rule's range, then half of what is asked, twice.
  env.AddRule({.path = path,
               .op = FaultOp::kRead,
               .offset = 20 * kAlign,
               .length = 40 * kAlign,
               .kind = FaultKind::kShortTransfer,
               .times = 3});
  auto file = env.OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->fd(), -1);
  AlignedBuffer buf(64 * kAlign);
  IoBatch batch(2);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, 16 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(
      batch.Add({file->get(), 16 * kAlign, buf.data + 16 * kAlign, 48 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(Run(batch).ok()) << batch.status().ToString();
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
  EXPECT_EQ(env.counters().short_reads, 3u);
  EXPECT_EQ(engine_->stats().short_retries, 3u);
  if (GetParam().kind == IoEngineKind::kUring) {
    EXPECT_EQ(engine_->stats().file_path_spans, 2u);
  }
}

TEST_P(IoEngineTest, EndlessShortReadsStopAtTheRetryLimit) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.max_short_retries = 5});
  const std::string path = dir_.Join("f");
  MakeFile(path, 64 * kAlign, 15);
  FaultInjectingEnv env(DefaultEnv());
  env.AddRule({.path = path,
               .op = FaultOp::kRead,
               .offset = 10 * kAlign,
               .kind = FaultKind::kShortTransfer});
  auto file = env.OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(64 * kAlign);
  IoBatch batch(1);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, 64 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kShortTransfer);
  EXPECT_LT(batch.completion(0).bytes, 64 * kAlign);
  EXPECT_GE(batch.completion(0).bytes, 10 * kAlign);
  EXPECT_EQ(engine->stats().short_retries, 5u);
}

TEST_P(IoEngineTest, EioFailsOnlyItsSpan) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  constexpr uint32_t kSpans = 16;
  const auto data = MakeFile(path, kSpans * kAlign, 16);
  FaultInjectingEnv env(DefaultEnv());
  env.AddRule({.path = path,
               .op = FaultOp::kRead,
               .offset = 5 * kAlign + 100,
               .length = 1,
               .kind = FaultKind::kIoError});
  auto file = env.OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(kSpans * kAlign, 0xee);
  IoBatch batch(kSpans);
  for (uint32_t i = 0; i < kSpans; ++i) {
    ASSERT_TRUE(
        batch.Add({file->get(), i * kAlign, buf.data + i * kAlign, kAlign, IoOp::kRead}).ok());
  }
  const Status s = Run(batch);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("span 5"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_EQ(batch.failed_spans(), 1u);
  for (uint32_t i = 0; i < kSpans; ++i) {
    if (i == 5) {
      EXPECT_EQ(batch.completion(i).status.code(), StatusCode::kIoError);
      EXPECT_EQ(batch.completion(i).bytes, 0u);
      continue;
    }
    EXPECT_TRUE(batch.completion(i).status.ok()) << i;
    EXPECT_EQ(0, std::memcmp(buf.data + i * kAlign, data.data() + i * kAlign, kAlign)) << i;
  }
  EXPECT_EQ(engine_->stats().failed_spans, 1u);
}

TEST_P(IoEngineTest, NoSpaceIsReportedPerSpan) {
  SKIP_IF_UNAVAILABLE();
  FaultInjectingEnv env(DefaultEnv());
  auto file = env.CreateFile(dir_.Join("f"), kBuffered);
  ASSERT_TRUE(file.ok());
  constexpr uint32_t kSpans = 8;
  AlignedBuffer buf(kSpans * kAlign);
  FillPattern(buf.data, buf.size, 17);
  // Room for two and a half spans: two succeed, one is written in part, the rest get nothing.
  env.SetSpaceLimit(2 * kAlign + kAlign / 2);
  IoBatch batch(kSpans);
  for (uint32_t i = 0; i < kSpans; ++i) {
    ASSERT_TRUE(
        batch.Add({file->get(), i * kAlign, buf.data + i * kAlign, kAlign, IoOp::kWrite}).ok());
  }
  EXPECT_EQ(Run(batch).code(), StatusCode::kNoSpace);
  uint32_t ok = 0, no_space = 0;
  uint64_t partial_bytes = 0;
  for (uint32_t i = 0; i < kSpans; ++i) {
    const IoCompletion& c = batch.completion(i);
    if (c.status.ok()) {
      ++ok;
      EXPECT_EQ(c.bytes, kAlign);
    } else {
      EXPECT_EQ(c.status.code(), StatusCode::kNoSpace) << c.status.ToString();
      ++no_space;
      partial_bytes += c.bytes;
    }
  }
  EXPECT_EQ(ok, 2u);
  EXPECT_EQ(no_space, kSpans - 2);
  EXPECT_EQ(partial_bytes, kAlign / 2);  // the short write was reported, then ENOSPC
}

TEST_P(IoEngineTest, TornWriteFailsTheSpan) {
  SKIP_IF_UNAVAILABLE();
  FaultInjectingEnv env(DefaultEnv());
  auto file = env.CreateFile(dir_.Join("f"), kBuffered);
  ASSERT_TRUE(file.ok());
  env.AddRule(
      {.op = FaultOp::kWrite, .offset = kAlign + 10, .length = 1, .kind = FaultKind::kTornWrite});
  AlignedBuffer buf(2 * kAlign);
  IoBatch batch(2);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, kAlign, IoOp::kWrite}).ok());
  ASSERT_TRUE(batch.Add({file->get(), kAlign, buf.data + kAlign, kAlign, IoOp::kWrite}).ok());
  EXPECT_EQ(Run(batch).code(), StatusCode::kIoError);
  EXPECT_TRUE(batch.completion(0).status.ok());
  EXPECT_EQ(batch.completion(1).status.code(), StatusCode::kIoError);
}

TEST_P(IoEngineTest, DirectReadWithUnalignedLength) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  // The file ends inside a block, like a partial stripe at the end of a pack.
  const uint64_t file_bytes = 10 * kAlign + 1234;
  const auto data = MakeFile(path, file_bytes, 18);
  auto file = DefaultEnv()->OpenFile(path, kDirect);
  ASSERT_TRUE(file.ok());
  const uint64_t align = (*file)->direct_alignment();
  AlignedBuffer a(8 * kAlign, 0xee), b(8 * kAlign, 0xee), c(8 * kAlign, 0xee);
  IoBatch batch(3);
  // Ends mid-file on an unaligned length; ends exactly at end of file; runs past end of file.
  ASSERT_TRUE(batch.Add({file->get(), 0, a.data, 3 * align + 100, IoOp::kRead}).ok());
  const uint64_t tail_off = AlignDown(file_bytes - 1, align);
  ASSERT_TRUE(batch.Add({file->get(), tail_off, b.data, file_bytes - tail_off, IoOp::kRead}).ok());
  ASSERT_TRUE(
      batch.Add({file->get(), tail_off, c.data, file_bytes - tail_off + 10, IoOp::kRead}).ok());
  ASSERT_TRUE(engine_->Submit(batch).ok());
  batch.Wait();
  ASSERT_TRUE(batch.completion(0).status.ok()) << batch.completion(0).status.ToString();
  EXPECT_EQ(0, std::memcmp(a.data, data.data(), 3 * align + 100));
  EXPECT_EQ(a.data[3 * align + 100], 0xee);  // nothing written past the span
  ASSERT_TRUE(batch.completion(1).status.ok()) << batch.completion(1).status.ToString();
  EXPECT_EQ(0, std::memcmp(b.data, data.data() + tail_off, file_bytes - tail_off));
  EXPECT_EQ(b.data[file_bytes - tail_off], 0xee);
  EXPECT_EQ(batch.completion(2).status.code(), StatusCode::kShortTransfer);
  EXPECT_EQ(batch.completion(2).bytes, file_bytes - tail_off);
  EXPECT_EQ(0, std::memcmp(c.data, data.data() + tail_off, file_bytes - tail_off));
}

TEST_P(IoEngineTest, MalformedSpansFailAloneWithInvalidArgument) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  MakeFile(path, 16 * kAlign, 19);
  auto buffered = DefaultEnv()->OpenFile(path, kBuffered);
  auto direct = DefaultEnv()->OpenFile(path, kDirect);
  ASSERT_TRUE(buffered.ok() && direct.ok());
  AlignedBuffer buf(8 * kAlign);
  IoBatch batch(8);
  ASSERT_TRUE(batch.Add({nullptr, 0, buf.data, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({buffered->get(), 0, nullptr, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({buffered->get(), UINT64_MAX - 10, buf.data, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({buffered->get(), 0, buf.data, 0, IoOp::kRead}).ok());  // empty: fine
  ASSERT_TRUE(batch.Add({buffered->get(), 0, buf.data + kAlign, kAlign, IoOp::kRead}).ok());
  const bool is_direct = (*direct)->direct();
  ASSERT_TRUE(batch.Add({direct->get(), 100, buf.data + 2 * kAlign, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({direct->get(), 0, buf.data + 3 * kAlign + 8, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({direct->get(), 0, buf.data + 4 * kAlign, kAlign + 8, IoOp::kWrite}).ok());
  ASSERT_TRUE(engine_->Submit(batch).ok());
  batch.Wait();
  for (uint32_t i : {0u, 1u, 2u}) {
    EXPECT_EQ(batch.completion(i).status.code(), StatusCode::kInvalidArgument) << i;
  }
  EXPECT_TRUE(batch.completion(3).status.ok());
  EXPECT_EQ(batch.completion(3).bytes, 0u);
  EXPECT_TRUE(batch.completion(4).status.ok());
  for (uint32_t i : {5u, 6u, 7u}) {
    if (is_direct) {
      EXPECT_EQ(batch.completion(i).status.code(), StatusCode::kInvalidArgument) << i;
    } else {
      EXPECT_TRUE(batch.completion(i).status.ok()) << i;  // buffered file: no alignment rule
    }
  }
}

TEST_P(IoEngineTest, CallbackPollWaitAndResubmitWhileInFlight) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  MakeFile(path, 4 * kAlign, 20);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(4 * kAlign);
  IoBatch batch(4);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        batch.Add({file->get(), i * kAlign, buf.data + i * kAlign, kAlign, IoOp::kRead}).ok());
  }
  // The callback holds the batch in flight until the test lets it go (no sleeps).
  Mutex mu;
  CondVar cv;
  bool release = false;
  bool entered = false;
  int calls = 0;
  batch.SetCallback([&](IoBatch& b) {
    EXPECT_EQ(&b, &batch);
    EXPECT_FALSE(b.done());
    MutexLock lock(mu);
    ++calls;
    entered = true;
    cv.NotifyAll();
    cv.Wait(lock, [&] { return release; });
  });
  EXPECT_FALSE(batch.done());
  ASSERT_TRUE(engine_->Submit(batch).ok());
  {
    MutexLock lock(mu);
    cv.Wait(lock, [&] { return entered; });
  }
  EXPECT_FALSE(engine_->Poll(batch));
  EXPECT_EQ(engine_->Submit(batch).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(batch.Add({file->get(), 0, buf.data, 1, IoOp::kRead}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(batch.Clear().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->RegisterBuffers({}).code(), GetParam().kind == IoEngineKind::kUring
                                                     ? StatusCode::kFailedPrecondition
                                                     : StatusCode::kOk);
  {
    MutexLock lock(mu);
    release = true;
    cv.NotifyAll();
  }
  batch.Wait();
  EXPECT_TRUE(batch.done());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(batch.status().ok());

  // An empty batch completes inside Submit, callback included.
  IoBatch empty(1);
  int empty_calls = 0;
  empty.SetCallback([&](IoBatch&) { ++empty_calls; });
  ASSERT_TRUE(engine_->Submit(empty).ok());
  EXPECT_TRUE(empty.done());
  EXPECT_EQ(empty_calls, 1);
  IoBatch full(1);
  ASSERT_TRUE(full.Add({file->get(), 0, buf.data, 1, IoOp::kRead}).ok());
  EXPECT_EQ(full.Add({file->get(), 0, buf.data, 1, IoOp::kRead}).code(),
            StatusCode::kResourceExhausted);
}

TEST_P(IoEngineTest, ManySubmittersBeyondTheQueueBound) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.max_queued_batches = 2});
  ASSERT_NE(engine, nullptr);
  const std::string path = dir_.Join("f");
  constexpr uint64_t kBytes = 256 * kAlign;
  const auto data = MakeFile(path, kBytes, 21);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  constexpr int kThreads = 4;
  constexpr int kRounds = 12;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buf(kBytes);
      IoBatch batch(16);
      for (int round = 0; round < kRounds; ++round) {
        std::memset(buf.data, 0, kBytes);
        ASSERT_TRUE(batch.Clear().ok());
        const uint64_t span = kBytes / 16;
        for (uint64_t i = 0; i < 16; ++i) {
          const uint64_t j = (i * 7 + static_cast<uint64_t>(t + round)) % 16;
          ASSERT_TRUE(
              batch.Add({file->get(), j * span, buf.data + j * span, span, IoOp::kRead}).ok());
        }
        ASSERT_TRUE(engine->Submit(batch).ok());
        engine->Wait(batch);
        if (!batch.status().ok() || std::memcmp(buf.data, data.data(), kBytes) != 0) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(engine->stats().batches, static_cast<uint64_t>(kThreads * kRounds));
}

TEST_P(IoEngineTest, DestructionDrainsOutstandingBatches) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 64 * kAlign, 22);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(64 * kAlign);
  IoBatch batch(64);
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(
        batch.Add({file->get(), i * kAlign, buf.data + i * kAlign, kAlign, IoOp::kRead}).ok());
  }
  ASSERT_TRUE(engine_->Submit(batch).ok());
  engine_.reset();
  EXPECT_TRUE(batch.done());
  EXPECT_TRUE(batch.status().ok());
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
}

// ---- byte split -------------------------------------------------------------------------

// ceil(length / piece) for every span: the native calls a split batch must issue.
uint64_t ExpectedPieces(const std::vector<uint64_t>& lengths, uint64_t piece) {
  uint64_t n = 0;
  for (uint64_t len : lengths) n += (len + piece - 1) / piece;
  return n;
}

TEST_P(IoEngineTest, SplitSpansIssueBytesOverPieceCallsAndRoundTripBitExact) {
  SKIP_IF_UNAVAILABLE();
  // Odd split sizes: a buffered file cuts at exactly that size, an O_DIRECT one rounds the
  // piece up to its alignment so every piece stays aligned.
  for (const uint64_t split : {uint64_t{5000}, uint64_t{3 * kAlign + 1}, uint64_t{64 * 1024}}) {
    for (const FileOptions& options : {kBuffered, kDirect}) {
      SCOPED_TRACE(std::to_string(split) +
                   (options.direct == DirectIo::kOff ? " buffered" : " direct"));
      auto engine = Make(IoEngineOptions{.split_bytes = split});
      ASSERT_EQ(engine->split_bytes(), split);
      const std::string path =
          dir_.Join("s" + std::to_string(split) + (options.direct == DirectIo::kOff ? "b" : "d"));
      auto file = DefaultEnv()->CreateFile(path, options);
      ASSERT_TRUE(file.ok());
      const uint64_t piece =
          (*file)->direct() ? AlignUp(split, (*file)->direct_alignment()) : split;
      std::vector<uint64_t> offsets, lengths;
      uint64_t total = 0;
      for (uint32_t i = 0; i < 12; ++i) {
        offsets.push_back(total);
        lengths.push_back(kAlign * (1 + (i * 29) % 61));  // 4 KiB .. 244 KiB
        total += lengths.back();
      }
      AlignedBuffer src(total), dst(total, 0xee);
      FillPattern(src.data, total, 31 + split);
      IoBatch writes(12), reads(12);
      for (uint32_t i = 0; i < 12; ++i) {
        ASSERT_TRUE(
            writes.Add({file->get(), offsets[i], src.data + offsets[i], lengths[i], IoOp::kWrite})
                .ok());
        ASSERT_TRUE(
            reads.Add({file->get(), offsets[i], dst.data + offsets[i], lengths[i], IoOp::kRead})
                .ok());
      }
      const IoEngineStats s0 = engine->stats();
      ASSERT_TRUE(engine->Submit(writes).ok());
      writes.Wait();
      ASSERT_TRUE(writes.status().ok()) << writes.status().ToString();
      const IoEngineStats s1 = engine->stats();
      ASSERT_TRUE(engine->Submit(reads).ok());
      reads.Wait();
      ASSERT_TRUE(reads.status().ok()) << reads.status().ToString();
      const IoEngineStats s2 = engine->stats();
      const uint64_t want = ExpectedPieces(lengths, piece);
      EXPECT_EQ(s1.native_ops - s0.native_ops, want);
      EXPECT_EQ(s2.native_ops - s1.native_ops, want);
      uint64_t split_spans = 0;
      for (uint64_t len : lengths) split_spans += len > piece ? 1 : 0;
      EXPECT_EQ(s2.split_spans - s1.split_spans, split_spans);
      EXPECT_EQ(s2.pieces - s1.pieces, want - (lengths.size() - split_spans));
      EXPECT_EQ(s2.spans - s1.spans, lengths.size());  // one completion per span, not per piece
      for (uint32_t i = 0; i < 12; ++i) EXPECT_EQ(reads.completion(i).bytes, lengths[i]);
      EXPECT_EQ(reads.bytes_moved(), total);
      ASSERT_EQ(0, std::memcmp(src.data, dst.data, total));
    }
  }
}

TEST_P(IoEngineTest, SplitCallCountDependsOnBytesNotOnSpanCount) {
  SKIP_IF_UNAVAILABLE();
  // The same 1 MiB read as 1 span or as 64 spans costs 1 MiB / piece native calls either way.
  auto engine = Make(IoEngineOptions{.split_bytes = 16 * kAlign});
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 256 * kAlign, 32);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer a(256 * kAlign), b(256 * kAlign);
  IoBatch one(1), many(64);
  ASSERT_TRUE(one.Add({file->get(), 0, a.data, 256 * kAlign, IoOp::kRead}).ok());
  for (uint32_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(
        many.Add({file->get(), i * 4 * kAlign, b.data + i * 4 * kAlign, 4 * kAlign, IoOp::kRead})
            .ok());
  }
  // 64 spans of 4 pages are each below the piece size: one call each, no split.
  const IoEngineStats s0 = engine->stats();
  ASSERT_TRUE(engine->Submit(one).ok());
  one.Wait();
  ASSERT_TRUE(one.status().ok());
  const IoEngineStats s1 = engine->stats();
  EXPECT_EQ(s1.native_ops - s0.native_ops, 16u);
  EXPECT_EQ(0, std::memcmp(a.data, data.data(), data.size()));
  auto coarse = Make(IoEngineOptions{.split_bytes = 4 * kAlign});
  ASSERT_TRUE(coarse->Submit(many).ok());
  many.Wait();
  ASSERT_TRUE(many.status().ok());
  EXPECT_EQ(coarse->stats().native_ops, 64u);
  EXPECT_EQ(coarse->stats().split_spans, 0u);
  EXPECT_EQ(0, std::memcmp(b.data, data.data(), data.size()));
}

TEST_P(IoEngineTest, SplitDirectReadWithUnalignedLengthIsBitExact) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = 3 * kAlign + 7});
  const std::string path = dir_.Join("f");
  const uint64_t file_bytes = 20 * kAlign + 1234;
  const auto data = MakeFile(path, file_bytes, 33);
  auto file = DefaultEnv()->OpenFile(path, kDirect);
  ASSERT_TRUE(file.ok());
  AlignedBuffer a(24 * kAlign, 0xee), b(24 * kAlign, 0xee);
  IoBatch batch(2);
  // Ends mid-file on an unaligned length; ends exactly at end of file on an unaligned length.
  ASSERT_TRUE(batch.Add({file->get(), 0, a.data, 13 * kAlign + 100, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({file->get(), 0, b.data, file_bytes, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  ASSERT_TRUE(batch.status().ok()) << batch.status().ToString();
  EXPECT_EQ(0, std::memcmp(a.data, data.data(), 13 * kAlign + 100));
  EXPECT_EQ(a.data[13 * kAlign + 100], 0xee);
  EXPECT_EQ(0, std::memcmp(b.data, data.data(), file_bytes));
  EXPECT_EQ(b.data[file_bytes], 0xee);
  EXPECT_EQ(engine->stats().split_spans, 2u);
}

TEST_P(IoEngineTest, SplitReadPastEndOfFileReportsTheContiguousPrefix) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = kAlign});
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 10000, 34);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(8 * kAlign, 0xee), other(kAlign, 0xee);
  IoBatch batch(2);
  // Pieces 0 and 1 are whole, piece 2 ends at end of file, pieces 3..7 are beyond it.
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, 8 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({file->get(), 0, other.data, kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  // Exactly what the unsplit span reports: kShortTransfer with the 10,000 bytes there are.
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kShortTransfer);
  EXPECT_EQ(batch.completion(0).bytes, 10000u);
  EXPECT_NE(batch.completion(0).status.message().find("sub-read 2 of 8"), std::string::npos)
      << batch.completion(0).status.ToString();
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), 10000));
  EXPECT_TRUE(batch.completion(1).status.ok());
  EXPECT_EQ(batch.failed_spans(), 1u);
  EXPECT_EQ(engine->stats().failed_spans, 1u);  // per span, not per piece
}

TEST_P(IoEngineTest, SplitEioInOnePieceFailsOnlyItsSpan) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = 2 * kAlign});
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 32 * kAlign, 35);
  FaultInjectingEnv env(DefaultEnv());
  env.AddRule({.path = path,
               .op = FaultOp::kRead,
               .offset = 5 * kAlign + 100,
               .length = 1,
               .kind = FaultKind::kIoError});
  auto file = env.OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(32 * kAlign, 0xee);
  IoBatch batch(2);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, 16 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(
      batch.Add({file->get(), 16 * kAlign, buf.data + 16 * kAlign, 16 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  const Status s = batch.status();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("span 0"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kIoError);
  EXPECT_EQ(batch.completion(0).bytes, 4 * kAlign);  // pieces 0 and 1, before the failed one
  EXPECT_TRUE(batch.completion(1).status.ok());
  EXPECT_EQ(0, std::memcmp(buf.data + 16 * kAlign, data.data() + 16 * kAlign, 16 * kAlign));
  EXPECT_EQ(batch.failed_spans(), 1u);
}

TEST_P(IoEngineTest, SplitShortReadsInOnePieceAreContinued) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = 8 * kAlign});
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 64 * kAlign, 36);
  FaultInjectingEnv env(DefaultEnv());
  env.AddRule({.path = path,
               .op = FaultOp::kRead,
               .offset = 20 * kAlign,
               .length = 4 * kAlign,
               .kind = FaultKind::kShortTransfer,
               .times = 2});
  auto file = env.OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  AlignedBuffer buf(64 * kAlign);
  IoBatch batch(1);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data, 64 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  ASSERT_TRUE(batch.status().ok()) << batch.status().ToString();
  EXPECT_EQ(batch.completion(0).bytes, 64 * kAlign);
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
  EXPECT_EQ(env.counters().short_reads, 2u);
  EXPECT_EQ(engine->stats().short_retries, 2u);
  EXPECT_EQ(engine->stats().pieces, 8u);
}

TEST_P(IoEngineTest, SplitNeverCutsAnInvalidSpan) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = kAlign});
  const std::string path = dir_.Join("f");
  MakeFile(path, 16 * kAlign, 37);
  auto file = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(file.ok());
  IoBatch batch(1);
  ASSERT_TRUE(batch.Add({file->get(), 0, nullptr, 8 * kAlign, IoOp::kRead}).ok());
  ASSERT_TRUE(engine->Submit(batch).ok());
  batch.Wait();
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->stats().pieces, 0u);
  EXPECT_EQ(engine->stats().native_ops, 0u);
}

TEST_P(IoEngineTest, ConcurrencyLimitCapsSpansAndPiecesInFlight) {
  SKIP_IF_UNAVAILABLE();
  // Three threads; split pieces count against the cap like whole spans.
  auto engine = Make(IoEngineOptions{.split_bytes = 2 * kAlign});
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 48 * kAlign, 41);
  auto base = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(base.ok());
  testing::ReadGauge gauge;
  testing::GaugedFile file(std::move(base).value(), &gauge);
  const auto read_all = [&] {
    AlignedBuffer buf(48 * kAlign);
    IoBatch batch(6);
    for (uint64_t i = 0; i < 6; ++i) {
      EXPECT_TRUE(
          batch.Add({&file, i * 8 * kAlign, buf.data + i * 8 * kAlign, 8 * kAlign, IoOp::kRead})
              .ok());
    }
    EXPECT_TRUE(engine->Submit(batch).ok());
    batch.Wait();
    EXPECT_TRUE(batch.status().ok()) << batch.status().ToString();
    EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
  };
  engine->SetConcurrencyLimit(1);
  read_all();
  EXPECT_EQ(gauge.max.load(), 1u);
  engine->SetConcurrencyLimit(2);
  gauge.Reset();
  read_all();
  EXPECT_LE(gauge.max.load(), 2u);
  // No cap: the engine's three threads overlap 3 ms reads of 24 pieces.
  engine->SetConcurrencyLimit(0);
  gauge.Reset();
  read_all();
  EXPECT_GE(gauge.max.load(), 2u);
  EXPECT_LE(gauge.max.load(), 3u);
}

TEST_P(IoEngineTest, RaisingTheLimitMidBatchFreesWaitingThreads) {
  SKIP_IF_UNAVAILABLE();
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 64 * kAlign, 43);
  auto base = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(base.ok());
  testing::ReadGauge gauge;
  testing::GaugedFile file(std::move(base).value(), &gauge);
  AlignedBuffer buf(64 * kAlign);
  IoBatch batch(16);
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(
        batch.Add({&file, i * 4 * kAlign, buf.data + i * 4 * kAlign, 4 * kAlign, IoOp::kRead})
            .ok());
  }
  engine_->SetConcurrencyLimit(1);
  ASSERT_TRUE(engine_->Submit(batch).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  engine_->SetConcurrencyLimit(0);
  batch.Wait();
  ASSERT_TRUE(batch.status().ok()) << batch.status().ToString();
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
  EXPECT_GE(gauge.max.load(), 2u);  // the other threads joined once the cap was lifted
}

// A gate of one pass, shared as a node's store service shares its read gate: counts what
// passed, holds reads to one in flight, and lets writes by.
class OnePassGate final : public ReadGate {
 public:
  bool Enter() override {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return !held_; });
    held_ = true;
    ++entered;
    return true;
  }
  void Leave() override {
    {
      std::lock_guard l(mu_);
      held_ = false;
    }
    cv_.notify_one();
  }
  std::atomic<uint64_t> entered{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

TEST_P(IoEngineTest, AReadGateCapsReadsAndLetsWritesBy) {
  SKIP_IF_UNAVAILABLE();
  auto engine = Make(IoEngineOptions{.split_bytes = 2 * kAlign});
  auto gate = std::make_shared<OnePassGate>();
  const bool gates = engine->SetReadGate(gate);
  EXPECT_EQ(gates, engine->kind() != IoEngineKind::kUring);  // io_uring is not gated
  const std::string path = dir_.Join("f");
  const auto data = MakeFile(path, 48 * kAlign, 47);
  auto base = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_TRUE(base.ok());
  testing::ReadGauge gauge;
  testing::GaugedFile file(std::move(base).value(), &gauge);
  AlignedBuffer buf(48 * kAlign);
  IoBatch reads(6);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        reads.Add({&file, i * 8 * kAlign, buf.data + i * 8 * kAlign, 8 * kAlign, IoOp::kRead})
            .ok());
  }
  ASSERT_TRUE(engine->Submit(reads).ok());
  reads.Wait();
  ASSERT_TRUE(reads.status().ok()) << reads.status().ToString();
  EXPECT_EQ(0, std::memcmp(buf.data, data.data(), data.size()));
  if (gates) {
    EXPECT_EQ(gate->entered.load(), 24u);  // every piece passed the gate
    EXPECT_EQ(gauge.max.load(), 1u);
  }
  const uint64_t after_reads = gate->entered.load();
  IoBatch writes(1);
  ASSERT_TRUE(writes.Add({&file, 0, buf.data, 8 * kAlign, IoOp::kWrite}).ok());
  ASSERT_TRUE(engine->Submit(writes).ok());
  writes.Wait();
  ASSERT_TRUE(writes.status().ok()) << writes.status().ToString();
  EXPECT_EQ(gate->entered.load(), after_reads);
  // No gate again: the threads overlap reads.
  engine->SetReadGate(nullptr);
  gauge.Reset();
  IoBatch again(6);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        again.Add({&file, i * 8 * kAlign, buf.data + i * 8 * kAlign, 8 * kAlign, IoOp::kRead})
            .ok());
  }
  ASSERT_TRUE(engine->Submit(again).ok());
  again.Wait();
  ASSERT_TRUE(again.status().ok());
  EXPECT_GE(gauge.max.load(), 2u);
  EXPECT_EQ(gate->entered.load(), after_reads);
}

INSTANTIATE_TEST_SUITE_P(
    Engines, IoEngineTest,
    ::testing::Values(EngineParam{"posix", IoEngineKind::kPosix, UringSubmit::kInline},
                      EngineParam{"uring", IoEngineKind::kUring, UringSubmit::kInline},
                      EngineParam{"uring_async", IoEngineKind::kUring, UringSubmit::kAsync}),
    [](const ::testing::TestParamInfo<EngineParam>& param_info) { return param_info.param.name; });

TEST(IoEngineFactoryTest, RejectsBadOptionsAndParsesNames) {
  for (IoEngineKind kind : {IoEngineKind::kPosix, IoEngineKind::kUring}) {
    EXPECT_EQ(MakeIoEngine(kind, IoEngineOptions{.workers = 0}).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(MakeIoEngine(kind, IoEngineOptions{.queue_depth = 0}).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(MakeIoEngine(kind, IoEngineOptions{.max_queued_batches = 0}).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(MakeIoEngine(kind, IoEngineOptions{.split_bytes = 511}).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(MakeIoEngine(kind, IoEngineOptions{.split_bytes = (1ull << 30) + 1}).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(*ParseIoEngineKind(IoEngineKindName(kind)), kind);
  }
  EXPECT_EQ(*ParseIoEngineKind("cufile"), IoEngineKind::kCuFile);
  EXPECT_EQ(ParseIoEngineKind("gds").status().code(), StatusCode::kInvalidArgument);
  auto posix = MakeIoEngine(IoEngineKind::kPosix, IoEngineOptions{});
  ASSERT_TRUE(posix.ok());
  EXPECT_EQ((*posix)->name(), "posix");
  EXPECT_EQ((*posix)->caps().max_inflight_spans, 4u);
  EXPECT_FALSE((*posix)->caps().registered_buffers);
}

TEST(IoEngineFactoryTest, UringIsUsableOrNotSupportedWithAReason) {
  auto uring = MakeIoEngine(IoEngineKind::kUring, IoEngineOptions{});
  if (!uring.ok()) {
    EXPECT_EQ(uring.status().code(), StatusCode::kNotSupported);
    EXPECT_FALSE(uring.status().message().empty());
    return;
  }
  EXPECT_EQ((*uring)->name(), "uring");
  EXPECT_TRUE((*uring)->caps().registered_buffers);
  EXPECT_EQ((*uring)->caps().max_inflight_spans, 4u * 8u);
  IoBuffer too_big{reinterpret_cast<void*>(4096), (1ull << 30) + 1};
  EXPECT_EQ((*uring)->RegisterBuffers({&too_big, 1}).code(), StatusCode::kInvalidArgument);
  // Each of the 4 rings would pin 2 GiB again: refused before anything is pinned (the addresses
  // are never touched), and the engine runs without registered buffers.
  const IoBuffer two_gib[] = {{reinterpret_cast<void*>(1ull << 40), 1ull << 30},
                              {reinterpret_cast<void*>((1ull << 40) + (1ull << 30)), 1ull << 30}};
  const Status refused = (*uring)->RegisterBuffers(two_gib);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("without registered buffers"), std::string::npos);
  EXPECT_EQ((*uring)->caps().buffers_registered, 0u);
}

}  // namespace
}  // namespace rangekv
