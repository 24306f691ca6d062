// StoreIntegrity: PayloadIntegrity over the persistence layer of one open store (src/persist):
// the dirty marker (Persistence::MarkDirty), the payload digest table (DigestTable) and the
// directory (to drop a pack that failed verification).
//
//   BeforeFirstWrite   Persistence::MarkDirty (idempotent; durable before any pack write)
//   RecordSpan         JournalWriter::BeforeOverwrite(slot) (the removal of the slot's previous
//                      pack is durable before its bytes are overwritten), then
//                      DigestTable::Begin(slot, generation, span tokens) + RecordLayer
//   BeforePublish      DigestTable::CheckComplete for every new pack
//   OnStoreAborted     DigestTable::Drop for every new pack
//   PlanVerify         DigestTable::PlanVerify over the span's valid pack tokens; kCorruption
//                      for a pack already dropped by OnCorruption (other layers of a corrupt
//                      pack fail with the cause, not with "no digests")
//   Verify             DigestTable::Compare
//   OnCorruption       MarkDirty (the snapshot on disk still lists the pack; logged if it
//                      fails), Directory::InvalidatePack (the pack and everything stored below
//                      it leave the index; leased bytes stay until their readers drain) and
//                      DigestTable::Drop (later reads of the pack fail closed at PlanVerify)
//
// Thread-safety: thread-safe (DigestTable, Directory and MarkDirty are). The borrowed objects
// must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "directory/directory.h"
#include "persist/payload_digests.h"
#include "persist/persistence.h"
#include "store/dropped_generations.h"
#include "store/integrity.h"

namespace rangekv::store {

class StoreIntegrity final : public PayloadIntegrity {
 public:
  StoreIntegrity(Directory* directory, persist::DigestTable* digests,
                 persist::Persistence* persistence)
      : directory_(directory),
        digests_(digests),
        persistence_(persistence),
        dropped_(digests->pack_slots()) {}

  uint64_t block_tokens() const override { return digests_->geometry().block_tokens(); }
  uint64_t digest_seed() const override { return persist::kPayloadDigestSeed; }
  Status BeforeFirstWrite(uint64_t reservation_id) override;
  Status RecordSpan(uint64_t reservation_id, const Span& span,
                    std::span<const uint64_t> block_digests) override;
  Status BeforePublish(uint64_t reservation_id, std::span<const PackRecord> records) override;
  void OnStoreAborted(uint64_t reservation_id, std::span<const PackRecord> records) override;
  Result<DigestBlocks> PlanVerify(const Span& span) override;
  Status Verify(const Span& span, uint64_t first_block, std::span<const uint64_t> computed,
                bool* mismatch) override;
  Status Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) override;
  void OnCorruption(const Span& span) override;

 private:
  Directory* const directory_;
  persist::DigestTable* const digests_;
  persist::Persistence* const persistence_;
  DroppedGenerations dropped_;  // what OnCorruption dropped; a later generation is unaffected
};

}  // namespace rangekv::store
