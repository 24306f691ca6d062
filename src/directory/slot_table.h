// SlotTable: the lifecycle of the N pack slots of one store, owned by the Directory.
//
// Every slot is in exactly one state:
//
//   free --Reserve--> reserved --MakeVisible--> visible --Retire--> retired --(leases==0)--> free
//                        |                                   \                 ^
//                        +------ReleaseReserved--------------- \ (unleased) ---+
//
// - reserved: a store is writing the pack; nobody may read it (not in any ticket).
// - visible: readable; lookups may select and lease it; it sits in the LRU order.
// - retired: invalidated or evicted; no new lease can be taken, existing leases keep the
//   bytes alive, and the slot returns to free only when its last lease is dropped.
// Each Reserve bumps the slot's generation, so a (slot, generation) pair names one use of the
// slot forever; a record or ticket naming an older generation is stale.
//
// Capacity: at most `usable_slots` slots (the byte capacity bound divided by the pack size) are
// in use (reserved, visible or retired) when a reservation is made: Reserve refuses when that
// many are, and otherwise takes the lowest-numbered free slot among the first `usable_slots`,
// which keeps the choice deterministic (the directory's reference model relies on it). One is
// always free then: fewer than `usable_slots` slots are in use. Any slot of the file may hold a
// pack restored at open: a capacity lowered since the packs were written is a setting, not a
// verdict on where they lie (the directory evicts down to it, Directory::EvictOverCapacity), and
// a slot beyond the first `usable_slots` is not reserved again once its pack left.
//
// Eviction order: visible slots are kept in least-recently-used order; Touch() moves a slot to
// the most recent end. FindLru() walks from the oldest end.
//
// Thread-safety: none; the Directory guards its SlotTable with its mutex.
// Every method REQUIRES its documented state; violations are programming errors (CHECK).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace rangekv {

enum class SlotState : uint8_t { kFree = 0, kReserved = 1, kVisible = 2, kRetired = 3 };

// "free", "reserved", "visible", "retired".
std::string_view SlotStateName(SlotState state);

struct SlotInfo {
  SlotState state = SlotState::kFree;
  uint64_t generation = 0;  // 0: never used; bumped by every Reserve
  uint32_t leases = 0;      // outstanding leases (tickets, or keys in the scalar ablation)
  friend bool operator==(const SlotInfo&, const SlotInfo&) = default;
};

class SlotTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // REQUIRES: 0 < usable_slots <= slots < kNone.
  SlotTable(uint32_t slots, uint32_t usable_slots);

  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t usable() const { return usable_; }
  const SlotInfo& Get(uint32_t slot) const;
  // Number of slots in `state`; for kFree, how many more may be reserved now: usable() minus the
  // slots in use (reserved, visible, retired), 0 when those are at or over it.
  uint32_t Count(SlotState state) const {
    if (state != SlotState::kFree) return counts_[static_cast<int>(state)];
    const uint32_t used = InUse();
    return used >= usable_ ? 0 : usable_ - used;
  }
  // Reserved, visible and retired slots.
  uint32_t InUse() const {
    return counts_[static_cast<int>(SlotState::kReserved)] +
           counts_[static_cast<int>(SlotState::kVisible)] +
           counts_[static_cast<int>(SlotState::kRetired)];
  }

  // Every later Reserve issues a generation of at least `floor` (see
  // DirectoryOptions::generation_floor). REQUIRES floor < 2^63.
  void SetGenerationFloor(uint64_t floor);

  // Lowest-numbered free usable slot -> reserved, generation max(generation + 1, floor).
  // nullopt when Count(kFree) is 0 (usable() slots in use).
  std::optional<uint32_t> ReserveLowestFree();
  // The same, taking the lowest-numbered free slot that `ready(slot)` accepts when there is one.
  template <typename Ready>
  std::optional<uint32_t> ReserveLowestFreePreferring(Ready ready) {
    if (Count(SlotState::kFree) == 0) return std::nullopt;
    for (size_t w = 0; w < free_bits_.size(); ++w) {
      for (uint64_t bits = free_bits_[w]; bits != 0; bits &= bits - 1) {
        const uint32_t slot = static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits));
        if (ready(slot)) return ReserveFree(slot);
      }
    }
    return ReserveLowestFree();
  }
  // reserved -> visible, appended to the LRU order as the most recent.
  void MakeVisible(uint32_t slot);
  // reserved -> free (an aborted or doomed store; nobody can hold a lease on it).
  void ReleaseReserved(uint32_t slot);
  // visible -> retired, removed from the LRU order; reclaimed to free at once when it holds no
  // lease. Returns true when it was reclaimed.
  bool Retire(uint32_t slot);
  // REQUIRES visible.
  void AddLease(uint32_t slot);
  // REQUIRES leases > 0 (visible or retired). Returns true when this reclaimed a retired slot.
  bool DropLease(uint32_t slot);
  // REQUIRES visible: marks it most recently used.
  void Touch(uint32_t slot);

  // Oldest-first walk over visible slots; returns the first slot accepted by `accept`.
  template <typename Accept>
  std::optional<uint32_t> FindLru(Accept accept) const {
    for (uint32_t s = lru_head_; s != kNone; s = next_[s]) {
      if (accept(s)) return s;
    }
    return std::nullopt;
  }
  // Visible slots, oldest first (for snapshots).
  std::vector<uint32_t> LruOrder() const;

  // Snapshot restore: a free slot becomes visible at `generation` (appended as most recent).
  // REQUIRES free and generation >= the slot's current generation.
  void RestoreVisible(uint32_t slot, uint64_t generation);
  // Snapshot restore: raises a free slot's generation so later reuse continues above it.
  void RaiseGeneration(uint32_t slot, uint64_t generation);

 private:
  // REQUIRES free: -> reserved, generation bumped (ReserveLowestFree's step).
  uint32_t ReserveFree(uint32_t slot);
  void SetState(uint32_t slot, SlotState state);
  void LruAppend(uint32_t slot);
  void LruRemove(uint32_t slot);

  std::vector<SlotInfo> slots_;
  uint32_t usable_;
  uint64_t generation_floor_ = 0;
  uint32_t counts_[4] = {0, 0, 0, 0};
  std::vector<uint64_t> free_bits_;  // bit s set: usable slot s is free
  std::vector<uint32_t> prev_, next_;
  uint32_t lru_head_ = kNone, lru_tail_ = kNone;
};

}  // namespace rangekv
