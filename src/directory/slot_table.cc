#include "directory/slot_table.h"

#include <algorithm>

#include "base/check.h"

namespace rangekv {

std::string_view SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "free";
    case SlotState::kReserved:
      return "reserved";
    case SlotState::kVisible:
      return "visible";
    case SlotState::kRetired:
      return "retired";
  }
  return "unknown";
}

SlotTable::SlotTable(uint32_t slots, uint32_t usable_slots)
    : slots_(slots),
      usable_(usable_slots),
      free_bits_((slots + 63) / 64, 0),
      prev_(slots, kNone),
      next_(slots, kNone) {
  RANGEKV_CHECK(usable_slots > 0 && usable_slots <= slots && slots < kNone);
  for (uint32_t s = 0; s < usable_; ++s) free_bits_[s / 64] |= uint64_t{1} << (s % 64);
  counts_[static_cast<int>(SlotState::kFree)] = slots;
}

const SlotInfo& SlotTable::Get(uint32_t slot) const {
  RANGEKV_CHECK(slot < slots_.size());
  return slots_[slot];
}

void SlotTable::SetState(uint32_t slot, SlotState state) {
  SlotInfo& info = slots_[slot];
  counts_[static_cast<int>(info.state)]--;
  counts_[static_cast<int>(state)]++;
  info.state = state;
  // A slot beyond the usable ones (a pack restored at open under a lowered capacity) is not
  // handed out again once free.
  if (state == SlotState::kFree && slot < usable_) {
    free_bits_[slot / 64] |= uint64_t{1} << (slot % 64);
  }
}

void SlotTable::SetGenerationFloor(uint64_t floor) {
  RANGEKV_CHECK(floor < (uint64_t{1} << 63));
  generation_floor_ = floor;
}

std::optional<uint32_t> SlotTable::ReserveLowestFree() {
  if (Count(SlotState::kFree) == 0) return std::nullopt;  // (else a usable slot is free)
  for (size_t w = 0; w < free_bits_.size(); ++w) {
    if (free_bits_[w] == 0) continue;
    return ReserveFree(static_cast<uint32_t>(w * 64 + __builtin_ctzll(free_bits_[w])));
  }
  return std::nullopt;
}

uint32_t SlotTable::ReserveFree(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kFree);
  free_bits_[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  SetState(slot, SlotState::kReserved);
  slots_[slot].generation = std::max(slots_[slot].generation + 1, generation_floor_);
  return slot;
}

void SlotTable::MakeVisible(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kReserved);
  SetState(slot, SlotState::kVisible);
  LruAppend(slot);
}

void SlotTable::ReleaseReserved(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kReserved && slots_[slot].leases == 0);
  SetState(slot, SlotState::kFree);
}

bool SlotTable::Retire(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kVisible);
  LruRemove(slot);
  if (slots_[slot].leases == 0) {
    SetState(slot, SlotState::kFree);
    return true;
  }
  SetState(slot, SlotState::kRetired);
  return false;
}

void SlotTable::AddLease(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kVisible);
  RANGEKV_CHECK(slots_[slot].leases < UINT32_MAX);
  slots_[slot].leases++;
}

bool SlotTable::DropLease(uint32_t slot) {
  SlotInfo& info = slots_[slot];
  RANGEKV_CHECK(slot < slots_.size() && info.leases > 0);
  info.leases--;
  if (info.leases == 0 && info.state == SlotState::kRetired) {
    SetState(slot, SlotState::kFree);
    return true;
  }
  return false;
}

void SlotTable::Touch(uint32_t slot) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kVisible);
  if (lru_tail_ == slot) return;
  LruRemove(slot);
  LruAppend(slot);
}

std::vector<uint32_t> SlotTable::LruOrder() const {
  std::vector<uint32_t> out;
  for (uint32_t s = lru_head_; s != kNone; s = next_[s]) out.push_back(s);
  return out;
}

void SlotTable::RestoreVisible(uint32_t slot, uint64_t generation) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kFree);
  RANGEKV_CHECK(generation >= slots_[slot].generation);
  free_bits_[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  SetState(slot, SlotState::kVisible);
  slots_[slot].generation = generation;
  LruAppend(slot);
}

void SlotTable::RaiseGeneration(uint32_t slot, uint64_t generation) {
  RANGEKV_CHECK(Get(slot).state == SlotState::kFree);
  if (generation > slots_[slot].generation) slots_[slot].generation = generation;
}

void SlotTable::LruAppend(uint32_t slot) {
  prev_[slot] = lru_tail_;
  next_[slot] = kNone;
  if (lru_tail_ != kNone) {
    next_[lru_tail_] = slot;
  } else {
    lru_head_ = slot;
  }
  lru_tail_ = slot;
}

void SlotTable::LruRemove(uint32_t slot) {
  if (prev_[slot] != kNone) {
    next_[prev_[slot]] = next_[slot];
  } else {
    lru_head_ = next_[slot];
  }
  if (next_[slot] != kNone) {
    prev_[next_[slot]] = prev_[slot];
  } else {
    lru_tail_ = prev_[slot];
  }
  prev_[slot] = next_[slot] = kNone;
}

}  // namespace rangekv
