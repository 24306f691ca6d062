#include "engine/store_progress.h"

#include <algorithm>

#include "base/check.h"

namespace rangekv::engine_internal {

void StoreProgress::Reset(uint32_t layers, uint32_t layer_group,
                          const std::vector<uint32_t>& group_of_batch) {
  RANGEKV_CHECK(layers >= 1 && layer_group >= 1);
  layer_group_ = layer_group;
  const uint32_t groups = (layers + layer_group - 1) / layer_group;
  group_unproduced_.assign(groups, 0);
  for (uint32_t l = 0; l < layers; ++l) ++group_unproduced_[l / layer_group];
  produced_.assign(layers, 0);
  unproduced_ = layers;
  group_ = group_of_batch;
  for (uint32_t g : group_) RANGEKV_CHECK(g < groups);
  state_.assign(group_.size(), BatchState::kWaiting);
  writes_left_.assign(group_.size(), 0);
  write_failed_.assign(group_.size(), 0);
  std::fill(std::begin(counts_), std::end(counts_), 0);
  counts_[static_cast<int>(BatchState::kWaiting)] = batches();
}

bool StoreProgress::Produce(uint32_t layer) {
  RANGEKV_CHECK(layer < produced_.size());
  if (produced_[layer]) return false;
  produced_[layer] = 1;
  --unproduced_;
  --group_unproduced_[layer / layer_group_];
  return true;
}

std::optional<uint32_t> StoreProgress::NextEligible() const {
  for (uint32_t b = 0; b < batches(); ++b) {
    if (state_[b] == BatchState::kWaiting && group_unproduced_[group_[b]] == 0) return b;
  }
  return std::nullopt;
}

void StoreProgress::Move(uint32_t batch, BatchState from, BatchState to) {
  RANGEKV_CHECK(batch < batches() && state_[batch] == from);
  state_[batch] = to;
  --counts_[static_cast<int>(from)];
  ++counts_[static_cast<int>(to)];
}

void StoreProgress::StartGather(uint32_t batch) {
  RANGEKV_CHECK(batch < batches() && group_unproduced_[group_[batch]] == 0);
  Move(batch, BatchState::kWaiting, BatchState::kGathering);
}

void StoreProgress::Extracted(uint32_t batch, uint32_t writes) {
  RANGEKV_CHECK(writes >= 1);
  Move(batch, BatchState::kGathering, BatchState::kWriting);
  writes_left_[batch] = writes;
}

void StoreProgress::GatherFailed(uint32_t batch) {
  Move(batch, BatchState::kGathering, BatchState::kFailed);
}

bool StoreProgress::WriteReturned(uint32_t batch, bool ok) {
  RANGEKV_CHECK(batch < batches() && state_[batch] == BatchState::kWriting);
  RANGEKV_CHECK(writes_left_[batch] > 0);
  if (!ok) write_failed_[batch] = 1;
  if (--writes_left_[batch] > 0) return false;
  Move(batch, BatchState::kWriting, write_failed_[batch] ? BatchState::kFailed : BatchState::kDone);
  return true;
}

uint32_t StoreProgress::SkipWaiting() {
  uint32_t n = 0;
  for (uint32_t b = 0; b < batches(); ++b) {
    if (state_[b] == BatchState::kWaiting) {
      Move(b, BatchState::kWaiting, BatchState::kSkipped);
      ++n;
    }
  }
  return n;
}

}  // namespace rangekv::engine_internal
