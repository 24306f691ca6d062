// StoreProgress: the per-batch state machine of one store job, with no I/O and no device.
// The store pipeline drives it under its mutex; tests drive it directly.
//
// A store writes the new records of a reservation for every layer. Its work is cut into
// batches: one batch is one layer group (layer_group consecutive layers) times a chunk of the
// records that fits one store bank; for the paper's suffix (2 records, 4-layer groups, 256 MiB
// banks) that is one batch per group, 8 in all. Each batch moves
//
//   waiting --gather--> gathering --extracted--> writing --last write returned--> done
//      |                    \--gather unproven--> failed            \--any write failed--> failed
//      +--skip (the store failed or was abandoned)--> skipped
//
// A batch is eligible for gather once every layer of its group was produced. Extraction of the
// store is complete when no batch is waiting or gathering (the source slots are then free).
// The store may publish when every batch is done; it must abort (after draining) when any
// batch failed or was skipped.
//
// Thread-safety: none (guarded by the owner's mutex).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rangekv::engine_internal {

enum class BatchState : uint8_t { kWaiting, kGathering, kWriting, kDone, kFailed, kSkipped };

class StoreProgress {
 public:
  // `group_of_batch[b]` is batch b's layer group; groups are [g*layer_group, +layer_group)
  // clipped to `layers`. REQUIRES: layers >= 1, layer_group >= 1, every group index valid.
  void Reset(uint32_t layers, uint32_t layer_group, const std::vector<uint32_t>& group_of_batch);

  uint32_t batches() const { return static_cast<uint32_t>(state_.size()); }
  uint32_t groups() const { return static_cast<uint32_t>(group_unproduced_.size()); }
  BatchState state(uint32_t batch) const { return state_[batch]; }

  // Marks `layer` produced; false when it already was. REQUIRES layer < layers.
  bool Produce(uint32_t layer);
  bool produced(uint32_t layer) const { return produced_[layer] != 0; }
  bool all_produced() const { return unproduced_ == 0; }

  // The lowest waiting batch whose group is fully produced.
  std::optional<uint32_t> NextEligible() const;

  void StartGather(uint32_t batch);                 // waiting -> gathering
  void Extracted(uint32_t batch, uint32_t writes);  // gathering -> writing (writes >= 1)
  void GatherFailed(uint32_t batch);                // gathering -> failed
  // One accepted write of `batch` returned. Returns true when it was the batch's last one
  // (the batch is then done, or failed if any of its writes failed).
  bool WriteReturned(uint32_t batch, bool ok);
  // Every waiting batch -> skipped; returns how many.
  uint32_t SkipWaiting();

  uint32_t count(BatchState s) const { return counts_[static_cast<int>(s)]; }
  bool extraction_done() const {
    return count(BatchState::kWaiting) == 0 && count(BatchState::kGathering) == 0;
  }
  // No gather or write is outstanding and none can start.
  bool settled() const { return extraction_done() && count(BatchState::kWriting) == 0; }
  bool succeeded() const { return count(BatchState::kDone) == batches(); }

 private:
  void Move(uint32_t batch, BatchState from, BatchState to);

  uint32_t layer_group_ = 1;
  std::vector<BatchState> state_;
  std::vector<uint32_t> group_;
  std::vector<uint32_t> writes_left_;
  std::vector<uint8_t> write_failed_;
  std::vector<uint8_t> produced_;
  std::vector<uint32_t> group_unproduced_;
  uint32_t unproduced_ = 0;
  uint32_t counts_[6] = {};
};

}  // namespace rangekv::engine_internal
