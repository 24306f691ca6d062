#include "engine/crash_workload.h"

#include <algorithm>
#include <random>

#include "testing/engine_fixture.h"

namespace rangekv::testing {

CrashWorkload CrashWorkload::Make(uint64_t seed, uint32_t sessions, uint32_t ops_per_session) {
  CrashWorkload w;
  w.seed = seed;
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  constexpr uint32_t kPool = 10;
  for (uint32_t i = 0; i < kPool; ++i) {
    const uint64_t length = uniform(10, 200);
    std::vector<int32_t> p;
    if (i > 0 && uniform(0, 1) == 1) {
      const std::vector<int32_t>& base = w.prefixes[uniform(0, i - 1)];
      const uint64_t head = uniform(1, base.size() - 1);
      p.assign(base.begin(), base.begin() + static_cast<int64_t>(head));
    }
    if (p.size() < length) {
      const std::vector<int32_t> tail = RandomTokens(length - p.size(), seed * 1000 + i);
      p.insert(p.end(), tail.begin(), tail.end());
    } else {
      p.push_back(static_cast<int32_t>(uniform(1, 1 << 30)));  // always diverge
    }
    w.prefixes.push_back(std::move(p));
  }
  for (uint32_t s = 0; s < sessions; ++s) {
    std::vector<Op> ops;
    for (uint32_t k = 0; k < ops_per_session; ++k) {
      Op op;
      op.prefix = static_cast<uint32_t>(uniform(0, kPool - 1));
      const uint64_t r = uniform(0, 9);
      op.kind = r < 4 ? OpKind::kStore : r < 5 ? OpKind::kStoreDetached : OpKind::kRestore;
      op.granularity = uniform(0, 2) == 0 ? 16 : 1;
      ops.push_back(op);
    }
    w.sessions.push_back(std::move(ops));
  }
  return w;
}

EngineOptions CrashWorkload::Options(const std::string& store_dir, uint64_t packs) const {
  EngineOptions o = SmallOptions(store_dir, SmallModel(4, 2, 16), kStripeBytes, packs);
  o.max_request_tokens = 1024;
  return o;
}

}  // namespace rangekv::testing
