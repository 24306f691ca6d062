#include "tools/bench/stats.h"

#include <gtest/gtest.h>

namespace rangekv::tools {
namespace {

TEST(Median, MiddleValueOrMeanOfTheTwoMiddleOnes) {
  EXPECT_DOUBLE_EQ(Median({}), 0);
  EXPECT_DOUBLE_EQ(Median({3}), 3);
  EXPECT_DOUBLE_EQ(Median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
}

TEST(Percentile, NearestRank) {
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
  const std::vector<double> v = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.1), 1);   // ceil(1.0) = rank 1
  EXPECT_DOUBLE_EQ(Percentile(v, 0.11), 2);  // ceil(1.1) = rank 2
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 5);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 9);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 10);
  EXPECT_DOUBLE_EQ(Percentile(v, 1), 10);
  // 301 samples (bench lookup's default): p10, p50 and p90 are ranks 31, 151 and 271.
  std::vector<double> w(301);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i);
  EXPECT_DOUBLE_EQ(Percentile(w, 0.1), 30);
  EXPECT_DOUBLE_EQ(Percentile(w, 0.5), Median(w));
  EXPECT_DOUBLE_EQ(Percentile(w, 0.9), 270);
}

TEST(FriedmanQ, ZeroWhenEveryBlockTies) {
  EXPECT_DOUBLE_EQ(*FriedmanQ({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}), 0);
}

TEST(FriedmanQ, MaximalWhenEveryBlockRanksAlike) {
  // Treatment j is always the j-th fastest, whatever the block's level: Q = n (k - 1).
  const std::vector<std::vector<double>> s = {
      {1.0, 2.0, 0.5, 9.0}, {1.1, 2.2, 0.6, 9.5}, {1.2, 2.4, 0.7, 9.9}};
  EXPECT_DOUBLE_EQ(*FriedmanQ(s), 4.0 * 2);
}

TEST(FriedmanQ, BlockLevelsCancel) {
  // The same within-block order at wildly different block levels gives the same Q as at one.
  const std::vector<std::vector<double>> flat = {{1, 1, 1}, {2, 2, 2}};
  const std::vector<std::vector<double>> drift = {{1, 10, 100}, {2, 20, 200}};
  EXPECT_DOUBLE_EQ(*FriedmanQ(flat), *FriedmanQ(drift));
}

TEST(FriedmanQ, KnownValue) {
  // k = 3, n = 4. Blocks' ranks: (1,2,3) (1,3,2) (2,1,3) (1,2,3): R = (5, 8, 11),
  // Q = 12 / (4*3*4) * (25 + 64 + 121) - 3*4*4 = 52.5 - 48 = 4.5.
  const std::vector<std::vector<double>> s = {{1, 1, 5, 1}, {2, 3, 4, 2}, {3, 2, 6, 3}};
  EXPECT_DOUBLE_EQ(*FriedmanQ(s), 4.5);
}

TEST(FriedmanQ, TiesShareTheirAverageRank) {
  // One block (2, 2, 1): ranks (2.5, 2.5, 1); the other (1, 2, 3). R = (3.5, 4.5, 4):
  // Q = 12 / (2*3*4) * (12.25 + 20.25 + 16) - 3*2*4 = 24.25 - 24 = 0.25.
  EXPECT_DOUBLE_EQ(*FriedmanQ({{2, 1}, {2, 2}, {1, 3}}), 0.25);
}

TEST(FriedmanQ, RejectsShapesThatDoNotQualify) {
  EXPECT_FALSE(FriedmanQ({}).has_value());
  EXPECT_FALSE(FriedmanQ({{1, 2}}).has_value());
  EXPECT_FALSE(FriedmanQ({{}, {}}).has_value());
  EXPECT_FALSE(FriedmanQ({{1, 2}, {1}}).has_value());
}

TEST(ChiSquare95, TableBounds) {
  EXPECT_DOUBLE_EQ(*ChiSquare95(1), 3.841);
  EXPECT_DOUBLE_EQ(*ChiSquare95(5), 11.070);
  EXPECT_DOUBLE_EQ(*ChiSquare95(15), 24.996);
  EXPECT_FALSE(ChiSquare95(0).has_value());
  EXPECT_FALSE(ChiSquare95(16).has_value());
}

// The schedule of tools/bench/sweep.cc's RunRangeKvShared: in repetition rep the k-th pair
// runs point (rep + k) % n, default and paired arm in the order PairedDefaultFirst says. Over 2n
// repetitions each point's default run must take each of the 2n positions of a repetition once,
// so a slot the disk favours cannot look like a naming effect.
TEST(PairedDefaultFirst, EveryPointsDefaultRunTakesEveryPositionOnce) {
  for (size_t n = 1; n <= 7; ++n) {
    std::vector<std::vector<int>> seen(n, std::vector<int>(2 * n, 0));
    for (uint32_t rep = 0; rep < 2 * n; ++rep) {
      for (size_t k = 0; k < n; ++k) {
        const size_t pi = (rep + k) % n;
        ++seen[pi][2 * k + (PairedDefaultFirst(rep, k, n) ? 0 : 1)];
      }
    }
    for (size_t pi = 0; pi < n; ++pi) {
      for (size_t pos = 0; pos < 2 * n; ++pos) {
        EXPECT_EQ(seen[pi][pos], 1) << n << " points, point " << pi << ", position " << pos;
      }
    }
  }
}

}  // namespace
}  // namespace rangekv::tools
