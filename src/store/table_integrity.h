// The restore side of PayloadIntegrity over a local digest table: a verify plan's blocks, the
// host comparison and the recorded digests, each reporting a generation that another stripe's
// OnCorruption dropped as the cause. Shared by StoreIntegrity (embedded store) and ServiceStore
// (store service client), which differ only in where the table's digests come from and in what
// a drop tells others.
#pragma once

#include <cstdint>
#include <span>

#include "persist/payload_digests.h"
#include "store/dropped_generations.h"
#include "store/integrity.h"

namespace rangekv::store {

// `plan`'s blocks, or why there are none: a generation dropped since the caller's check (its
// digests are gone; see DroppedGenerations' ordering), else the plan's own error.
inline Result<DigestBlocks> TableBlocks(const DroppedGenerations& dropped, const Span& span,
                                        const Result<persist::VerifyPlan>& plan) {
  if (!plan.ok()) {
    if (dropped.Contains(span.pack_slot, span.generation)) {
      return DroppedGenerations::Error(span.pack_slot, span.generation);
    }
    return plan.status();
  }
  return DigestBlocks{plan->first_block, plan->block_count, plan->stored_tokens};
}

// PayloadIntegrity::Verify against `digests`.
inline Status TableVerify(const persist::DigestTable& digests, const DroppedGenerations& dropped,
                          const Span& span, uint64_t first_block,
                          std::span<const uint64_t> computed, bool* mismatch) {
  const Status compared =
      digests.Compare(span.pack_slot, span.generation, span.layer, first_block, computed);
  *mismatch = compared.code() == StatusCode::kCorruption;
  return dropped.Cause(span.pack_slot, span.generation, compared);
}

// PayloadIntegrity::Expected from `digests`.
inline Status TableExpected(const persist::DigestTable& digests, const DroppedGenerations& dropped,
                            const Span& span, uint64_t first_block, std::span<uint64_t> out) {
  return dropped.Cause(
      span.pack_slot, span.generation,
      digests.Recorded(span.pack_slot, span.generation, span.layer, first_block, out));
}

}  // namespace rangekv::store
