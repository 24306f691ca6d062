// EngineStats: the transfer engine's work-unit counters (Engine::GetStats(), and each
// restore's and store's share in its outcome). One X-macro list drives the struct, its JSON
// output and differences. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>

namespace rangekv {

#define RANGEKV_ENGINE_STATS_FIELDS(X)                                                          \
  X(lookups, "Lookup calls answered")                                                           \
  X(records_selected, "pack records selected by lookups")                                       \
  X(leases_taken, "pack leases taken by tickets")                                               \
  X(restores_started, "claims that started a restore")                                          \
  X(restores_finished, "restores whose owners all drained")                                     \
  X(cancelled_restores, "restores or prefetches cancelled before completing")                   \
  X(native_reads, "native read submissions to the I/O engine")                                  \
  X(bytes_read, "bytes moved by native reads")                                                  \
  X(read_bank_acquisitions, "read bank acquisitions")                                           \
  X(prefetched_stripes, "stripe reads issued before slots were bound")                          \
  X(h2d_copies, "staging-to-device copies (devices without direct I/O into device memory)")     \
  X(scatter_launches, "scatter kernel launches (one per delivered stripe)")                     \
  X(ready_events, "layer readiness events recorded")                                            \
  X(failed_spans, "read or write spans that failed")                                            \
  X(quarantines, "banks quarantined because their completion could not be proven")              \
  X(checksum_failures, "spans whose payload failed verification")                               \
  X(stores_begun, "BeginStore calls that reserved new records")                                 \
  X(stores_joined, "BeginStore calls that joined an in-flight reservation (no I/O)")            \
  X(stores_cached, "BeginStore calls whose tokens were all cached already")                     \
  X(stores_published, "stores whose records became visible")                                    \
  X(stores_aborted, "stores whose reservation was reclaimed")                                   \
  X(gather_launches, "gather kernel launches (one per layer group and bank)")                   \
  X(store_bank_acquisitions, "store bank acquisitions")                                         \
  X(native_writes, "native write submissions to the I/O engine")                                \
  X(bytes_written, "bytes moved by native writes")                                              \
  X(digest_launches, "digest kernel launches (store and restore; up to 32 blocks each)")        \
  X(verified_spans, "restore spans whose payload digests were checked before scatter")          \
  X(payload_allocations, "payload buffers allocated after Open (the data path allocates none)") \
  X(rejected_requests, "restores or stores refused because their job slots were all in use")    \
  X(journal_commits, "journal group commits (one pack fsync and one journal fsync each)")       \
  X(journal_records, "journal records made durable")                                            \
  X(journal_durable_publications, "publish records made durable (one per new pack)")            \
  X(journal_checkpoints, "journal checkpoints folded into a new snapshot mid-session")          \
  X(journal_failures, "journal appends or fsyncs that failed (journaling ended)")               \
  X(journal_wait_ns, "ns stores waited on the journal (durable publish, slot reuse)")           \
  X(native_read_calls, "read syscalls/SQEs issued by the I/O engine (engine-wide)")             \
  X(native_write_calls, "write syscalls/SQEs issued by the I/O engine (engine-wide)")           \
  X(store_gather_ns, "store: ns in gather + digest + copy-out per batch, summed over batches")  \
  X(store_integrity_ns, "store: ns recording digests and the dirty marker, summed")             \
  X(store_write_ns, "store: ns from write submit to the batch's last completion, summed")       \
  X(restore_read_ns, "restore: ns from read submit to completion, summed over stripes")         \
  X(restore_verify_ns, "restore: host ns verifying (planning, confirming device verdicts)")     \
  X(restore_deliver_ns, "restore: ns from scatter enqueue to its proven fence, summed")         \
  X(removed_events_dropped, "removed ranges dropped undrained (max_removed_ranges was full)")

struct EngineStats {
#define RANGEKV_STATS_DECLARE_(name, doc) uint64_t name = 0;
  RANGEKV_ENGINE_STATS_FIELDS(RANGEKV_STATS_DECLARE_)
#undef RANGEKV_STATS_DECLARE_

  // Field-wise a - b (a later snapshot minus an earlier one).
  friend EngineStats operator-(const EngineStats& a, const EngineStats& b);
  friend bool operator==(const EngineStats&, const EngineStats&) = default;
  // {"lookups":1,"records_selected":6,...} in declaration order.
  std::string ToJson() const;
};

}  // namespace rangekv
