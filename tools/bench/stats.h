// The statistics the bench summaries print: medians and percentiles of samples, Friedman's rank
// test for a difference between interleaved treatments, and the order of paired arms.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace rangekv::tools {

// The median: the middle value, or the mean of the two middle ones. 0 for no samples.
double Median(std::vector<double> values);

// The nearest-rank q-quantile, 0 <= q <= 1: the smallest sample with at least q of the samples
// at or below it (q = 0: the smallest). 0 for no samples.
double Percentile(std::vector<double> values, double q);

// Friedman's rank statistic Q for k treatments measured in n blocks: samples[j][i] is
// treatment j's value in block i (every row the same length n >= 1, k >= 2). In a bench sweep
// run with --interleave the treatments are the namings and the blocks the repetitions, each of
// which ran every naming once, so the medium's speed in that repetition cancels: within each
// block the values are ranked 1..k (ties get their average rank), R_j is treatment j's rank sum,
// and Q = 12 / (n k (k+1)) * sum R_j^2 - 3 n (k+1). With no treatment effect Q follows a
// chi-square distribution with k-1 degrees of freedom; it is 0 when every block ties and n (k-1)
// when every block ranks the treatments in the same order. No tie correction (times are
// continuous). nullopt when the shape does not qualify.
std::optional<double> FriedmanQ(const std::vector<std::vector<double>>& samples);

// The chi-square distribution's 95th percentile for `df` degrees of freedom, 1 <= df <= 15
// (the points one sweep runs); nullopt otherwise. Q above it: the treatments differ at the 5%
// level.
std::optional<double> ChiSquare95(size_t df);

// A sweep run with --interleave and a paired arm (checksum=off for restores, durability=none
// for stores) runs the pair side by side at every point, k-th in repetition `rep` of a round over
// `points` points (the point at k rotates with rep). True: the default configuration goes first
// of the pair there. The order alternates with k and flips every `points` repetitions, so over
// 2 x points repetitions each point's default (and paired) run takes every position of a
// repetition once. (The order used to follow (rep + k) % 2, which for an even point count is the
// point's own parity: even points' default ran first of its pair in every repetition, and a
// disk that favours one slot of a pair showed as a naming effect.)
bool PairedDefaultFirst(uint32_t rep, size_t k, size_t points);

}  // namespace rangekv::tools
