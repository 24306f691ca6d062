// PayloadIntegrity: the seam through which persistence (payload digests, the dirty marker) plugs
// into the transfer pipelines. StoreIntegrity (store_integrity.h) implements it over the
// persistence layer (src/persist); tests may inject their own (EngineInternalConfig).
//
// Who does what. The ENGINE computes digests, on its own device (Stream::Digest: the CUDA kernel
// on a GPU, the CPU reference on HostDevice, bit-identical), so no device needs host access to
// its banks and no payload crosses to the host for checking. The hook object defines the digest
// blocks, keeps the recorded digests and compares. Digest block b of a pack covers pack tokens
// [b*D, min((b+1)*D, stored_tokens)) of one layer, D = block_tokens(); its digest is
// kernels::SpanDigest of exactly those bytes with seed digest_seed().
//
// Store (one reservation): BeforeFirstWrite (the dirty marker is durable) -> for every write
// span, once its gather and digests are proven and before its writes are submitted,
// RecordSpan(span, digests of blocks [0, ceil(span.tokens() / D))) -> (writes) -> BeforePublish
// -> Directory::Publish; or OnStoreAborted instead of the last two when anything failed. Store
// digests are recorded under every checksum policy: a published pack always has digests (the
// clean-shutdown snapshot requires them, and fsck and a later checksum=always session use them).
//
// Restore (checksum=always only): the read plan is widened to whole blocks
// (SpanPlanOptions::read_block_tokens = D); after a stripe's read completed, PlanVerify(span)
// names the blocks overlapping its valid tokens, the engine digests them in the read buffer on
// its device, and Verify() compares. Verification completes BEFORE the stripe's scatter is
// enqueued: a stripe that fails is never scattered, so no layer is ever published with its
// bytes (the model may consume a published layer at once, through the readiness flag, so a
// check after the scatter would come too late). On kCorruption the engine counts a checksum
// failure, calls OnCorruption(span) and fails exactly the span's tokens; any other Verify or
// PlanVerify error fails them too (fail closed).
//
// Thread-safety: implementations must be thread-safe; the hooks run concurrently on read
// workers, store group workers and the store pipeline's settle path. BeforePublish and
// OnStoreAborted run under the store pipeline's mutex (keep them short; never call the engine).
#pragma once

#include <cstdint>
#include <span>

#include "base/pack_record.h"
#include "pack/span_plan.h"
#include "rangekv/status.h"

namespace rangekv::store {

// The digest blocks of one restore span to verify: blocks [first_block, first_block + count) of
// a pack that stored `stored_tokens` tokens.
struct DigestBlocks {
  uint64_t first_block = 0;
  uint64_t count = 0;
  uint64_t stored_tokens = 0;
};

class PayloadIntegrity {
 public:
  virtual ~PayloadIntegrity() = default;

  // D, in [1, T]: tokens per digest block. Fixed for the life of the engine.
  virtual uint64_t block_tokens() const = 0;
  // Seed of every digest.
  virtual uint64_t digest_seed() const = 0;

  // Before the first write of a reservation reaches the pack file (the dirty marker must be
  // durable by then). A non-OK status fails the store before any of its writes is issued.
  virtual Status BeforeFirstWrite(uint64_t reservation_id) = 0;

  // The digests of a write span's blocks, computed on the device over the bytes about to be
  // written. span.pack_token_begin is 0 (a new pack is written from its token 0) and
  // block_digests has ceil(span.tokens() / D) entries. A non-OK status fails the store.
  virtual Status RecordSpan(uint64_t reservation_id, const Span& span,
                            std::span<const uint64_t> block_digests) = 0;

  // Every batch of the reservation was written successfully; `records` (one per new pack) are
  // about to become visible. A non-OK status aborts the store instead.
  virtual Status BeforePublish(uint64_t reservation_id, std::span<const PackRecord> records) = 0;

  // The reservation is being aborted (after its accepted writes drained).
  virtual void OnStoreAborted(uint64_t reservation_id, std::span<const PackRecord> records) = 0;

  // The blocks to digest for a restore span (read widened to whole blocks). An error fails the
  // span's tokens (kCorruption when its pack is already known to be corrupt: the cause, so a
  // restore's status does not depend on which layer's read finished first).
  virtual Result<DigestBlocks> PlanVerify(const Span& span) = 0;

  // Compares digests computed over blocks [first_block, first_block + computed.size()) of the
  // span's pack and layer. kCorruption names the first bad block and sets *mismatch (the only
  // case that counts as this span's checksum failure); a pack another span's mismatch dropped
  // meanwhile is kCorruption too, naming that cause, with *mismatch false.
  virtual Status Verify(const Span& span, uint64_t first_block, std::span<const uint64_t> computed,
                        bool* mismatch) = 0;

  // The recorded digests of blocks [first_block, first_block + out.size()) of the span's pack
  // and layer, for a comparison on the device (the read worker copies them up with the stripe;
  // Verify on the host still confirms every device verdict). Errors as Verify, without a
  // mismatch.
  virtual Status Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) = 0;

  // A span's digest comparison failed: its pack must never be served again (the
  // implementation drops its record and digests). Called once per such span (only those count
  // as checksum failures), without engine locks.
  virtual void OnCorruption(const Span& span) = 0;
};

}  // namespace rangekv::store
