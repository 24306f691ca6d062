#include "engine/restore_progress.h"

#include <algorithm>

#include "base/check.h"

namespace rangekv::engine_internal {

void RestoreProgress::Reset(uint32_t layers, uint32_t spans_per_layer, uint32_t lookahead_layers,
                            Ablations::Delivery delivery) {
  RANGEKV_CHECK(layers >= 1 && spans_per_layer >= 1);
  layers_ = layers;
  per_layer_ = spans_per_layer;
  lookahead_ = lookahead_layers;
  delivery_ = delivery;
  state_.assign(size_t{layers} * spans_per_layer, StripeState::kPending);
  unread_.assign(layers, spans_per_layer);
  unsettled_.assign(layers, spans_per_layer);
  published_.assign(layers, 0);
  settled_layers_ = 0;
  published_count_ = 0;
  next_pending_ = 0;
  low_ = 0;
  std::fill(std::begin(counts_), std::end(counts_), 0);
  counts_[static_cast<int>(StripeState::kPending)] = stripes();
}

std::optional<uint32_t> RestoreProgress::NextToRead() const {
  uint32_t s = next_pending_;
  // Stripes below next_pending_ left kPending; above it only Drop can have moved one.
  while (s < stripes() && state_[s] != StripeState::kPending) ++s;
  if (s >= stripes()) return std::nullopt;
  if (LayerOf(s) > low_ + lookahead_) return std::nullopt;
  return s;
}

void RestoreProgress::Move(uint32_t stripe, StripeState from, StripeState to) {
  RANGEKV_CHECK(stripe < stripes() && state_[stripe] == from);
  state_[stripe] = to;
  --counts_[static_cast<int>(from)];
  ++counts_[static_cast<int>(to)];
}

void RestoreProgress::Move2(uint32_t stripe, StripeState from_a, StripeState from_b,
                            StripeState to) {
  RANGEKV_CHECK(stripe < stripes());
  Move(stripe, state_[stripe] == from_a ? from_a : from_b, to);
}

void RestoreProgress::AdvanceLow() {
  while (low_ < layers_ && unread_[low_] == 0) ++low_;
}

void RestoreProgress::Settle(uint32_t stripe) {
  const uint32_t layer = LayerOf(stripe);
  RANGEKV_CHECK(unsettled_[layer] > 0);
  if (--unsettled_[layer] == 0) ++settled_layers_;
}

void RestoreProgress::Issue(uint32_t stripe) {
  RANGEKV_CHECK(NextToRead() == stripe);
  Move(stripe, StripeState::kPending, StripeState::kReading);
  next_pending_ = stripe + 1;
}

void RestoreProgress::Land(uint32_t stripe) {
  Move(stripe, StripeState::kReading, StripeState::kLanded);
  --unread_[LayerOf(stripe)];
  AdvanceLow();
}

void RestoreProgress::LaunchScatter(uint32_t stripe) {
  const bool was_reading = state_[stripe] == StripeState::kReading;
  Move2(stripe, StripeState::kReading, StripeState::kLanded, StripeState::kScattering);
  if (was_reading) {
    --unread_[LayerOf(stripe)];
    AdvanceLow();
  }
  Settle(stripe);
}

void RestoreProgress::Prove(uint32_t stripe) {
  Move(stripe, StripeState::kScattering, StripeState::kDelivered);
}

void RestoreProgress::Fail(uint32_t stripe) {
  const bool was_reading = state_[stripe] == StripeState::kReading;
  Move2(stripe, StripeState::kReading, StripeState::kScattering, StripeState::kFailed);
  if (was_reading) {
    --unread_[LayerOf(stripe)];
    AdvanceLow();
    Settle(stripe);
  }
}

void RestoreProgress::Drop(uint32_t stripe) {
  RANGEKV_CHECK(stripe < stripes());
  const StripeState from = state_[stripe];
  RANGEKV_CHECK(from == StripeState::kPending || from == StripeState::kReading ||
                from == StripeState::kLanded);
  Move(stripe, from, StripeState::kDropped);
  if (from != StripeState::kLanded) {
    --unread_[LayerOf(stripe)];
    AdvanceLow();
  }
  Settle(stripe);
}

uint32_t RestoreProgress::DropPending() {
  uint32_t n = 0;
  for (uint32_t s = next_pending_; s < stripes(); ++s) {
    if (state_[s] == StripeState::kPending) {
      Drop(s);
      ++n;
    }
  }
  next_pending_ = stripes();
  return n;
}

uint32_t RestoreProgress::FailPending() {
  uint32_t n = 0;
  for (uint32_t s = next_pending_; s < stripes(); ++s) {
    if (state_[s] != StripeState::kPending) continue;
    Move(s, StripeState::kPending, StripeState::kFailed);
    --unread_[LayerOf(s)];
    Settle(s);
    ++n;
  }
  AdvanceLow();
  next_pending_ = stripes();
  return n;
}

void RestoreProgress::TakePublishable(std::vector<uint32_t>* out) {
  if (delivery_ == Ablations::Delivery::kBarrier && settled_layers_ < layers_) return;
  for (uint32_t l = 0; l < layers_; ++l) {
    if (published_[l] == 0 && unsettled_[l] == 0) {
      published_[l] = 1;
      ++published_count_;
      out->push_back(l);
    }
  }
}

bool RestoreProgress::LayerProven(uint32_t layer) const {
  const uint32_t first = layer * per_layer_;
  for (uint32_t s = first; s < first + per_layer_; ++s) {
    if (state_[s] == StripeState::kScattering) return false;
  }
  return true;
}

}  // namespace rangekv::engine_internal
