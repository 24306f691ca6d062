#include "store/store_integrity.h"

#include <string>

#include "base/log.h"
#include "store/table_integrity.h"

namespace rangekv::store {

Status StoreIntegrity::BeforeFirstWrite(uint64_t) { return persistence_->MarkDirty(); }

Status StoreIntegrity::RecordSpan(uint64_t, const Span& span,
                                  std::span<const uint64_t> block_digests) {
  if (span.pack_token_begin != 0) {
    return Internal("digests: write span of pack slot " + std::to_string(span.pack_slot) +
                    " starts at pack token " + std::to_string(span.pack_token_begin) + ", not 0");
  }
  if (persist::JournalWriter* j = persistence_->journal(); j != nullptr) {
    // The slot's previous pack may be described by the journal or the snapshot: its removal is
    // durable before any of its bytes is overwritten.
    RANGEKV_RETURN_IF_ERROR(j->BeforeOverwrite(span.pack_slot));
  }
  RANGEKV_RETURN_IF_ERROR(digests_->Begin(span.pack_slot, span.generation, span.tokens()));
  return digests_->RecordLayer(span.pack_slot, span.generation, span.layer, block_digests);
}

Status StoreIntegrity::BeforePublish(uint64_t, std::span<const PackRecord> records) {
  for (const PackRecord& r : records) {
    RANGEKV_RETURN_IF_ERROR(digests_->CheckComplete(r.pack_slot, r.generation));
  }
  return OkStatus();
}

void StoreIntegrity::OnStoreAborted(uint64_t, std::span<const PackRecord> records) {
  for (const PackRecord& r : records) digests_->Drop(r.pack_slot, r.generation);
}

Result<DigestBlocks> StoreIntegrity::PlanVerify(const Span& span) {
  if (dropped_.Contains(span.pack_slot, span.generation)) {
    return DroppedGenerations::Error(span.pack_slot, span.generation);
  }
  // OnCorruption of another stripe may drop the digests after the check above.
  return TableBlocks(dropped_, span,
                     digests_->PlanVerify(span.pack_slot, span.generation, span.pack_token_begin,
                                          span.pack_token_begin + span.tokens()));
}

Status StoreIntegrity::Verify(const Span& span, uint64_t first_block,
                              std::span<const uint64_t> computed, bool* mismatch) {
  return TableVerify(*digests_, dropped_, span, first_block, computed, mismatch);
}

Status StoreIntegrity::Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) {
  return TableExpected(*digests_, dropped_, span, first_block, out);
}

void StoreIntegrity::OnCorruption(const Span& span) {
  dropped_.Mark(span.pack_slot, span.generation);  // before the digests go (see PlanVerify)
  // The snapshot on disk may still list the pack; mark the store dirty so a crash from here on
  // does not reload it (a clean shutdown writes a snapshot without it). In-memory removal does
  // not depend on the marker: it happens either way.
  const Status marked = persistence_->MarkDirty();
  if (!marked.ok()) {
    Log(LogLevel::kWarning, "dropping a corrupt pack: dirty marker: " + marked.ToString());
  }
  Result<InvalidateResult> dropped = directory_->InvalidatePack(span.pack_slot, span.generation);
  if (!dropped.ok() && dropped.status().code() != StatusCode::kStaleGeneration &&
      dropped.status().code() != StatusCode::kFailedPrecondition) {
    Log(LogLevel::kWarning, "dropping a corrupt pack: " + dropped.status().ToString());
  }
  digests_->Drop(span.pack_slot, span.generation);
  Log(LogLevel::kWarning, "pack slot " + std::to_string(span.pack_slot) + " generation " +
                              std::to_string(span.generation) +
                              " failed payload verification and was dropped from the index");
}

}  // namespace rangekv::store
