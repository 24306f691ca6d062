// RemovalLog: the directory observer behind Engine::DrainRemovedRanges. Consumers of index
// changes (the vLLM connector's KV cache events, python/rangekv/vllm/events.py) need to know
// which tokens stop being served; the directory tells its observers only which pack left and
// the head it keeps (RemovedPack), so the log remembers each visible pack's end per slot (from
// its publication, or Seed() for the packs an open loaded) and turns every removal into a
// RemovedRange: namespace, pack, and the path tokens [kept end, former end) it no longer
// serves. A clipped pack's remembered end becomes its head's end, so a later removal of the
// head names only the head.
//
// Bounded: at most `capacity` ranges wait to be drained; beyond that the oldest is dropped and
// counted (dropped(); EngineStats::removed_events_dropped), so a consumer that stops draining
// costs bounded memory and learns that it missed removals. Capacity 0 records nothing (and
// counts nothing). Memory: one 16-byte entry per pack slot plus the queue.
//
// A removal of a pack the log never saw published (impossible when Seed ran before the
// directory was used) is reported up to the most a pack can hold (path_begin +
// tokens_per_pack): more than was served, never less.
//
// Thread-safety: thread-safe. The observer calls run under the directory's mutex and take only
// this log's mutex, briefly (lock order: Directory -> RemovalLog); Drain() never calls the
// directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "base/pack_record.h"
#include "base/thread_annotations.h"
#include "directory/directory.h"
#include "rangekv/geometry.h"
#include "rangekv/transfer.h"

namespace rangekv {

class RemovalLog final : public DirectoryObserver {
 public:
  static constexpr size_t kMaxCapacity = size_t{1} << 20;

  // REQUIRES capacity <= kMaxCapacity (callers validate it: EngineTuning::max_removed_ranges).
  RemovalLog(uint32_t pack_slots, uint64_t tokens_per_pack, size_t capacity);

  size_t capacity() const { return capacity_; }

  // Learns the visible packs of `directory` (those a snapshot or a journal replay loaded).
  // REQUIRES no concurrent use of the directory; call before adding the log as its observer.
  void Seed(const Directory& directory) EXCLUDES(mu_);

  void OnPublished(uint64_t reservation_id, const NamespaceId& ns, std::span<const int32_t> path,
                   std::span<const PackRecord> packs) override EXCLUDES(mu_);
  void OnRemoved(const RemovedPack& pack) override EXCLUDES(mu_);

  // Takes up to `max` of the oldest ranges waiting, in the order the removals happened.
  std::vector<RemovedRange> Drain(size_t max) EXCLUDES(mu_);
  size_t pending() const EXCLUDES(mu_);
  // Ranges dropped because the queue was full (monotonic).
  uint64_t dropped() const EXCLUDES(mu_);

 private:
  struct Visible {
    bool known = false;
    uint64_t generation = 0;
    uint64_t end = 0;  // path position after the pack's last visible token
  };

  const uint64_t tokens_per_pack_;
  const size_t capacity_;
  mutable Mutex mu_;
  std::vector<Visible> visible_ GUARDED_BY(mu_);  // per slot
  std::deque<RemovedRange> queue_ GUARDED_BY(mu_);
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
};

}  // namespace rangekv
