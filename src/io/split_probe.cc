#include "io/split_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/units.h"

namespace rangekv {
namespace {

constexpr uint64_t kMaxProbeBytes = 64ull << 20;
constexpr uint32_t kMaxRounds = 5;
constexpr size_t kMaxCandidates = 8;

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string SplitName(uint64_t bytes) {
  if (bytes == 0) return "none";
  char buf[32];
  if (bytes % (1ull << 20) == 0) {
    std::snprintf(buf, sizeof(buf), "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  } else if (bytes % 1024 == 0) {
    std::snprintf(buf, sizeof(buf), "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// Runs `spans` equal spans covering [0, bytes) of `file` through `engine`; returns seconds.
Result<double> TimeSpans(IoEngine& engine, File* file, uint8_t* buf, uint64_t bytes, uint32_t spans,
                         IoOp op) {
  IoBatch batch(spans);
  const uint64_t each = bytes / spans;
  for (uint32_t i = 0; i < spans; ++i) {
    RANGEKV_RETURN_IF_ERROR(batch.Add({file, i * each, buf + i * each, each, op}));
  }
  const double t0 = NowS();
  RANGEKV_RETURN_IF_ERROR(engine.Submit(batch));
  batch.Wait();
  const double seconds = NowS() - t0;
  RANGEKV_RETURN_IF_ERROR(batch.status());
  return seconds;
}

}  // namespace

uint64_t ChooseSplit(const std::vector<SplitProbeSample>& samples, double min_gain) {
  double none = -1;
  for (const SplitProbeSample& s : samples) {
    if (s.split_bytes == 0) none = s.seconds;
  }
  if (none <= 0) return 0;
  uint64_t best = 0;
  double best_s = none;
  for (const SplitProbeSample& s : samples) {
    if (s.split_bytes != 0 && s.seconds > 0 && s.seconds < best_s) {
      best = s.split_bytes;
      best_s = s.seconds;
    }
  }
  return best_s <= none * (1.0 - min_gain) ? best : 0;
}

Result<SplitProbeResult> ProbeSplit(Env* env, const std::string& scratch_path, DirectIo direct,
                                    IoEngineKind kind, const IoEngineOptions& engine_options,
                                    const SplitProbeOptions& options) {
  if (options.spans == 0 || options.probe_bytes == 0 || options.probe_bytes > kMaxProbeBytes ||
      options.rounds == 0 || options.rounds > kMaxRounds ||
      options.candidates.size() > kMaxCandidates) {
    return InvalidArgument(
        "split probe: probe_bytes in [1, 64 MiB], spans >= 1, rounds in "
        "[1, 5], at most 8 candidates");
  }
  const uint64_t each = AlignDown(options.probe_bytes / options.spans, kMaxDirectAlignmentBytes);
  if (each == 0) return InvalidArgument("split probe: spans smaller than 64 KiB");
  const uint64_t bytes = each * options.spans;

  std::unique_ptr<uint8_t, FreeDeleter> src(
      static_cast<uint8_t*>(std::aligned_alloc(kMaxDirectAlignmentBytes, bytes)));
  std::unique_ptr<uint8_t, FreeDeleter> dst(
      static_cast<uint8_t*>(std::aligned_alloc(kMaxDirectAlignmentBytes, bytes)));
  if (src == nullptr || dst == nullptr) return ResourceExhausted("split probe: no memory");
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(src.get() + i, &x, 8);
  }

  FileOptions fo;
  fo.mode = OpenMode::kReadWrite;
  fo.direct = direct;
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->CreateFile(scratch_path, fo));
  struct Remove {
    Env* env;
    const std::string& path;
    ~Remove() { (void)env->DeleteFile(path); }
  } remove{env, scratch_path};

  // One engine per candidate (0 first), all with the caller's kind and workers.
  std::vector<uint64_t> splits = {0};
  for (uint64_t c : options.candidates) {
    if (c != 0 && c < each) splits.push_back(c);
  }
  std::vector<std::unique_ptr<IoEngine>> engines;
  for (uint64_t split : splits) {
    IoEngineOptions eo = engine_options;
    eo.split_bytes = split;
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> e, MakeIoEngine(kind, eo));
    engines.push_back(std::move(e));
  }
  File* files[1] = {file.get()};
  for (auto& e : engines) (void)e->RegisterFiles(files);

  RANGEKV_RETURN_IF_ERROR(
      TimeSpans(*engines[0], file.get(), src.get(), bytes, options.spans, IoOp::kWrite).status());
  RANGEKV_RETURN_IF_ERROR(file->Sync());

  SplitProbeResult result;
  for (uint64_t split : splits) result.samples.push_back({split, 0});
  for (uint32_t round = 0; round < options.rounds; ++round) {
    for (size_t k = 0; k < splits.size(); ++k) {
      const size_t i = (k + round) % splits.size();
      std::memset(dst.get(), 0, bytes);
      RANGEKV_ASSIGN_OR_RETURN(double s, TimeSpans(*engines[i], file.get(), dst.get(), bytes,
                                                   options.spans, IoOp::kRead));
      if (std::memcmp(src.get(), dst.get(), bytes) != 0) {
        return Corruption("split probe: " + scratch_path + " read back different bytes");
      }
      double& best = result.samples[i].seconds;
      best = best == 0 ? s : std::min(best, s);
    }
  }
  result.split_bytes = ChooseSplit(result.samples, options.min_gain);
  for (const SplitProbeSample& s : result.samples) {
    char ms[32];
    std::snprintf(ms, sizeof(ms), " %.2f ms", s.seconds * 1e3);
    if (!result.summary.empty()) result.summary += ", ";
    result.summary += SplitName(s.split_bytes) + ms;
  }
  result.summary += " (" + std::to_string(options.spans) + " x " + SplitName(each) + ", " +
                    (file->direct() ? "O_DIRECT" : "buffered") + ") -> " +
                    SplitName(result.split_bytes);
  return result;
}

}  // namespace rangekv
