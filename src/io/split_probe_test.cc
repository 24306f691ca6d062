#include "io/split_probe.h"

#include <gtest/gtest.h>

#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::FaultInjectingEnv;
using testing::FaultKind;
using testing::FaultOp;
using testing::TempDir;

TEST(ChooseSplitTest, KeepsNoSplitUnlessASplitIsClearlyFaster) {
  // 5% faster is within a probe's noise: stay unsplit.
  EXPECT_EQ(ChooseSplit({{0, 1.0}, {1 << 20, 0.95}}, 0.10), 0u);
  // 20% faster: the fastest split wins.
  EXPECT_EQ(ChooseSplit({{0, 1.0}, {1 << 20, 0.8}, {256 << 10, 0.7}}, 0.10), 256u << 10);
  // Slower splits never win.
  EXPECT_EQ(ChooseSplit({{0, 1.0}, {1 << 20, 1.5}}, 0.10), 0u);
  // Without a measured "none" there is nothing to compare with.
  EXPECT_EQ(ChooseSplit({{1 << 20, 0.5}}, 0.10), 0u);
  EXPECT_EQ(ChooseSplit({}, 0.10), 0u);
}

TEST(SplitProbeTest, PicksAMeasuredCandidateAndRemovesItsFile) {
  TempDir dir;
  FaultInjectingEnv env(DefaultEnv());  // counts the probe's bytes
  SplitProbeOptions o;
  o.probe_bytes = 4 << 20;
  o.spans = 2;
  o.candidates = {512 << 10, 128 << 10, 8 << 20};  // 8 MiB exceeds a span: not tried
  const std::string path = dir.Join("probe");
  auto r = ProbeSplit(&env, path, DirectIo::kPreferred, IoEngineKind::kPosix,
                      IoEngineOptions{.workers = 2}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->samples.size(), 3u);
  EXPECT_EQ(r->samples[0].split_bytes, 0u);
  for (const SplitProbeSample& s : r->samples) EXPECT_GT(s.seconds, 0);
  EXPECT_TRUE(r->split_bytes == 0 || r->split_bytes == (512u << 10) ||
              r->split_bytes == (128u << 10));
  EXPECT_NE(r->summary.find("->"), std::string::npos);
  EXPECT_FALSE(env.FileExists(path));
  // Bounded and per byte: 2 spans of 2 MiB written once, then per round read whole (2 calls),
  // as 512 KiB pieces (8) and as 128 KiB pieces (32).
  const auto c = env.counters();
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.reads, uint64_t{o.rounds} * (2 + 8 + 32));
}

TEST(SplitProbeTest, AFailingMediumIsAnErrorNotAChoice) {
  TempDir dir;
  FaultInjectingEnv env(DefaultEnv());
  const std::string path = dir.Join("probe");
  env.AddRule({.path = path, .op = FaultOp::kRead, .kind = FaultKind::kIoError});
  SplitProbeOptions o;
  o.probe_bytes = 1 << 20;
  o.spans = 1;
  auto r = ProbeSplit(&env, path, DirectIo::kOff, IoEngineKind::kPosix, IoEngineOptions{}, o);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_FALSE(env.FileExists(path));
}

TEST(SplitProbeTest, RejectsUnboundedOptions) {
  TempDir dir;
  SplitProbeOptions o;
  o.probe_bytes = 1ull << 30;
  EXPECT_EQ(ProbeSplit(DefaultEnv(), dir.Join("p"), DirectIo::kOff, IoEngineKind::kPosix,
                       IoEngineOptions{}, o)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rangekv
