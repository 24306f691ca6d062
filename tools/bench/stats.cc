#include "tools/bench/stats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace rangekv::tools {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::optional<double> FriedmanQ(const std::vector<std::vector<double>>& samples) {
  const size_t k = samples.size();
  if (k < 2) return std::nullopt;
  const size_t n = samples[0].size();
  if (n == 0) return std::nullopt;
  for (const std::vector<double>& row : samples) {
    if (row.size() != n) return std::nullopt;
  }
  std::vector<double> rank_sum(k, 0);
  std::vector<size_t> order(k);
  for (size_t i = 0; i < n; ++i) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return samples[a][i] < samples[b][i]; });
    // Runs of equal values share the average of the ranks they span (1-based).
    for (size_t lo = 0; lo < k;) {
      size_t hi = lo + 1;
      while (hi < k && samples[order[hi]][i] == samples[order[lo]][i]) ++hi;
      const double rank = (static_cast<double>(lo + 1) + static_cast<double>(hi)) / 2;
      for (size_t t = lo; t < hi; ++t) rank_sum[order[t]] += rank;
      lo = hi;
    }
  }
  double sum_sq = 0;
  for (double r : rank_sum) sum_sq += r * r;
  const double nd = static_cast<double>(n);
  const double kd = static_cast<double>(k);
  return 12.0 / (nd * kd * (kd + 1)) * sum_sq - 3.0 * nd * (kd + 1);
}

std::optional<double> ChiSquare95(size_t df) {
  // The standard table's values (upper 5% points), to the three decimals tables give.
  static constexpr std::array<double, 15> kTable = {3.841,  5.991,  7.815,  9.488,  11.070,
                                                    12.592, 14.067, 15.507, 16.919, 18.307,
                                                    19.675, 21.026, 22.362, 23.685, 24.996};
  if (df < 1 || df > kTable.size()) return std::nullopt;
  return kTable[df - 1];
}

bool PairedDefaultFirst(uint32_t rep, size_t k, size_t points) {
  const size_t n = points == 0 ? 1 : points;
  return (rep / n + k) % 2 == 0;
}

}  // namespace rangekv::tools
