#include "directory/removal_log.h"

#include <algorithm>

#include "base/check.h"

namespace rangekv {

RemovalLog::RemovalLog(uint32_t pack_slots, uint64_t tokens_per_pack, size_t capacity)
    : tokens_per_pack_(tokens_per_pack), capacity_(capacity), visible_(pack_slots) {
  RANGEKV_CHECK(capacity <= kMaxCapacity);
}

void RemovalLog::Seed(const Directory& directory) {
  if (capacity_ == 0) return;
  // The directory's lock is taken before ours (the observer calls' order), never under it.
  std::vector<StoredPack> packs;
  for (const NamespaceId& ns : directory.Namespaces()) {
    std::vector<StoredPack> more = directory.ListPacks(ns);
    packs.insert(packs.end(), more.begin(), more.end());
  }
  MutexLock l(mu_);
  for (const StoredPack& p : packs) {
    if (p.record.pack_slot >= visible_.size()) continue;
    visible_[p.record.pack_slot] = {true, p.record.generation, p.record.path_token_end()};
  }
}

void RemovalLog::OnPublished(uint64_t /*reservation_id*/, const NamespaceId& /*ns*/,
                             std::span<const int32_t> /*path*/, std::span<const PackRecord> packs) {
  if (capacity_ == 0) return;
  MutexLock l(mu_);
  for (const PackRecord& p : packs) {
    if (p.pack_slot >= visible_.size()) continue;
    visible_[p.pack_slot] = {true, p.generation, p.path_token_end()};
  }
}

void RemovalLog::OnRemoved(const RemovedPack& pack) {
  if (capacity_ == 0) return;
  MutexLock l(mu_);
  RemovedRange r;
  r.ns = pack.ns;
  r.pack = {pack.slot, pack.generation};
  r.retired = pack.kept_tokens == 0;
  r.tokens.begin = pack.path_begin + pack.kept_tokens;
  uint64_t end = pack.path_begin + tokens_per_pack_;  // unknown pack: the most it could hold
  Visible* v = pack.slot < visible_.size() ? &visible_[pack.slot] : nullptr;
  if (v != nullptr && v->known && v->generation == pack.generation) end = v->end;
  r.tokens.end = std::max(end, r.tokens.begin);
  if (v != nullptr) {
    if (r.retired) {
      *v = Visible{};
    } else {
      *v = {true, pack.generation, r.tokens.begin};
    }
  }
  if (r.tokens.size() == 0) return;  // nothing that was served left
  if (queue_.size() >= capacity_) {
    queue_.pop_front();
    dropped_++;
  }
  queue_.push_back(r);
}

std::vector<RemovedRange> RemovalLog::Drain(size_t max) {
  MutexLock l(mu_);
  const size_t n = std::min(max, queue_.size());
  std::vector<RemovedRange> out(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
  return out;
}

size_t RemovalLog::pending() const {
  MutexLock l(mu_);
  return queue_.size();
}

uint64_t RemovalLog::dropped() const {
  MutexLock l(mu_);
  return dropped_;
}

}  // namespace rangekv
