// RestoreProgress: the per-stripe state machine of one restore job, with no I/O and no device.
// The restore pipeline drives it under its mutex; tests drive it directly.
//
// A restore reads `stripes = layers x spans_per_layer` stripe spans, indexed layer-major
// (stripe i belongs to layer i / spans_per_layer, the read plan's order). Each stripe moves
//
//   pending --issue--> reading --landed--> landed --launch--> scattering --proven--> delivered
//      |                  |  \---------------launch---------------^     \--unproven--> failed
//      |                  +--failed--> failed
//      +--failed (FailPending: no usable bank left) --> failed
//      +--drop (cancel)--> dropped   <--drop-- landed / reading (read completed after cancel)
//
// "landed" is a read that completed before the slots were bound (prefetch); it keeps its bank
// until the binding arrives or the job is cancelled.
//
// Read order and lookahead: stripes are issued strictly in index order (layer order), and a
// stripe of layer l is issuable only while l <= low + lookahead_layers, where low is the lowest
// layer that still has a stripe pending or reading. Banks bound the rest.
//
// Layer readiness: layer l is settled when none of its stripes is pending, reading or landed
// (every stripe's scatter is launched, or the stripe failed or was dropped). Under kLayer
// delivery a settled layer is publishable at once; under kBarrier only when every layer is
// settled. TakePublishable() hands out each layer exactly once.
//
// Thread-safety: none (guarded by the owner's mutex).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rangekv/engine.h"

namespace rangekv::engine_internal {

enum class StripeState : uint8_t {
  kPending,
  kReading,
  kLanded,
  kScattering,
  kDelivered,
  kFailed,
  kDropped,
};

class RestoreProgress {
 public:
  RestoreProgress() = default;

  // Starts over with every stripe pending. Reuses its vectors' capacity.
  // REQUIRES: layers >= 1, spans_per_layer >= 1.
  void Reset(uint32_t layers, uint32_t spans_per_layer, uint32_t lookahead_layers,
             Ablations::Delivery delivery);

  uint32_t layers() const { return layers_; }
  uint32_t spans_per_layer() const { return per_layer_; }
  uint32_t stripes() const { return static_cast<uint32_t>(state_.size()); }
  uint32_t LayerOf(uint32_t stripe) const { return stripe / per_layer_; }
  StripeState state(uint32_t stripe) const { return state_[stripe]; }

  // The next stripe to read (the lowest pending one) when it is inside the lookahead window.
  std::optional<uint32_t> NextToRead() const;

  // Transitions; each REQUIRES the source state drawn above (CHECKed).
  void Issue(uint32_t stripe);          // pending -> reading; REQUIRES it is NextToRead()
  void Land(uint32_t stripe);           // reading -> landed
  void LaunchScatter(uint32_t stripe);  // reading | landed -> scattering
  void Prove(uint32_t stripe);          // scattering -> delivered
  void Fail(uint32_t stripe);           // reading | scattering -> failed
  void Drop(uint32_t stripe);           // pending | reading | landed -> dropped
  // Drops every pending stripe (cancellation); returns how many.
  uint32_t DropPending();
  // Fails every pending stripe (no read bank will ever be free for them); returns how many.
  uint32_t FailPending();

  // Layers that became publishable since the last call, ascending, each once.
  void TakePublishable(std::vector<uint32_t>* out);
  // No stripe of `layer` is still scattering: every one is delivered (proven), failed or
  // dropped, or has not reached its scatter (only before the layer is published).
  bool LayerProven(uint32_t layer) const;
  bool published(uint32_t layer) const { return published_[layer] != 0; }
  bool all_published() const { return published_count_ == layers_; }

  uint32_t count(StripeState s) const { return counts_[static_cast<int>(s)]; }
  // No stripe is reading or scattering: no read or fence is outstanding.
  bool quiescent() const {
    return count(StripeState::kReading) == 0 && count(StripeState::kScattering) == 0;
  }
  // Every stripe reached delivered, failed or dropped.
  bool finished() const {
    return count(StripeState::kDelivered) + count(StripeState::kFailed) +
               count(StripeState::kDropped) ==
           stripes();
  }

 private:
  void Move(uint32_t stripe, StripeState from, StripeState to);
  void Move2(uint32_t stripe, StripeState from_a, StripeState from_b, StripeState to);
  // Bookkeeping after stripe leaves the pending/reading/landed set.
  void Settle(uint32_t stripe);
  void AdvanceLow();

  uint32_t layers_ = 0;
  uint32_t per_layer_ = 0;
  uint32_t lookahead_ = 0;
  Ablations::Delivery delivery_ = Ablations::Delivery::kLayer;
  std::vector<StripeState> state_;
  std::vector<uint32_t> unread_;     // per layer: stripes pending or reading
  std::vector<uint32_t> unsettled_;  // per layer: stripes pending, reading or landed
  std::vector<uint8_t> published_;
  uint32_t settled_layers_ = 0;
  uint32_t published_count_ = 0;
  uint32_t next_pending_ = 0;  // every stripe below it left kPending
  uint32_t low_ = 0;           // lowest layer with unread stripes (layers_ when none)
  uint32_t counts_[7] = {};
};

}  // namespace rangekv::engine_internal
