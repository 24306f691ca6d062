#include "persist/payload_digests.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "kernels/span_digest.h"

namespace rangekv::persist {
namespace {

std::string Num(uint64_t v) { return std::to_string(v); }

Status Stale(uint32_t slot, uint64_t asked, uint64_t held) {
  return Status(StatusCode::kStaleGeneration,
                "digests: pack slot " + Num(slot) + " generation " + Num(asked) +
                    (held == 0 ? std::string(" has no digests (slot holds none)")
                               : " is not current (slot holds generation " + Num(held) + ")"));
}

}  // namespace

std::string DescribeBlock(uint32_t slot, uint64_t generation, uint32_t layer, TokenRange tokens) {
  return "pack slot " + Num(slot) + " generation " + Num(generation) + " layer " + Num(layer) +
         " pack tokens [" + Num(tokens.begin) + ", " + Num(tokens.end) + ")";
}

// ---- DigestGeometry ---------------------------------------------------------------------------

uint64_t DigestGeometry::DefaultBlockTokens(const Geometry& geometry) {
  if (geometry.token_bytes == 0) return 1;
  const uint64_t tokens = kDigestBlockTargetBytes / geometry.token_bytes;
  return std::clamp<uint64_t>(tokens, 1, std::max<uint64_t>(geometry.tokens_per_stripe, 1));
}

Result<DigestGeometry> DigestGeometry::Make(uint32_t layers, uint64_t tokens_per_pack,
                                            uint64_t token_bytes, uint64_t block_tokens) {
  if (layers == 0) return InvalidArgument("digest geometry: 0 layers");
  if (token_bytes == 0) return InvalidArgument("digest geometry: token_bytes is 0");
  if (tokens_per_pack == 0 || tokens_per_pack > UINT32_MAX) {
    return InvalidArgument("digest geometry: tokens_per_pack " + Num(tokens_per_pack) +
                           " outside [1, 2^32)");
  }
  if (block_tokens == 0 || block_tokens > tokens_per_pack) {
    return InvalidArgument("digest geometry: block_tokens " + Num(block_tokens) + " outside [1, " +
                           Num(tokens_per_pack) + "]");
  }
  if (!CheckedMul(tokens_per_pack, token_bytes)) {
    return InvalidArgument("digest geometry: stripe bytes overflow");
  }
  return DigestGeometry(layers, tokens_per_pack, token_bytes, block_tokens);
}

Result<DigestGeometry> DigestGeometry::ForGeometry(const Geometry& geometry,
                                                   uint64_t block_tokens) {
  return Make(geometry.layers, geometry.tokens_per_stripe, geometry.token_bytes,
              block_tokens == 0 ? DefaultBlockTokens(geometry) : block_tokens);
}

TokenRange DigestGeometry::BlockTokens(uint64_t block, uint64_t stored_tokens) const {
  RANGEKV_DCHECK(block < BlocksFor(stored_tokens));
  const uint64_t begin = block * block_tokens_;
  return {begin, std::min(begin + block_tokens_, stored_tokens)};
}

uint64_t BlockDigest(const void* data, uint64_t bytes) {
  return kernels::SpanDigest(data, bytes, kPayloadDigestSeed);
}

Status ComputeLayerDigests(const DigestGeometry& geometry, const uint8_t* stripe,
                           uint64_t stored_tokens, std::span<uint64_t> out) {
  if (stored_tokens == 0 || stored_tokens > geometry.tokens_per_pack()) {
    return InvalidArgument("digests: stored_tokens " + Num(stored_tokens) + " outside [1, " +
                           Num(geometry.tokens_per_pack()) + "]");
  }
  const uint64_t blocks = geometry.BlocksFor(stored_tokens);
  if (out.size() != blocks) {
    return InvalidArgument("digests: " + Num(out.size()) + " outputs for " + Num(blocks) +
                           " blocks");
  }
  if (stripe == nullptr) return InvalidArgument("digests: null stripe");
  for (uint64_t b = 0; b < blocks; ++b) {
    out[b] =
        BlockDigest(stripe + geometry.BlockOffsetBytes(b), geometry.BlockBytes(b, stored_tokens));
  }
  return OkStatus();
}

// ---- DigestTable ------------------------------------------------------------------------------

Result<std::unique_ptr<DigestTable>> DigestTable::Create(const DigestGeometry& geometry,
                                                         uint32_t pack_slots) {
  if (pack_slots == 0) return InvalidArgument("digest table: 0 pack slots");
  const std::optional<uint64_t> per_slot =
      CheckedMul(geometry.layers(), geometry.max_blocks_per_layer());
  const std::optional<uint64_t> words = per_slot ? CheckedMul(*per_slot, pack_slots) : std::nullopt;
  if (!words || *words > kMaxDigestTableBytes / 8) {
    return ResourceExhausted("digest table: " + Num(pack_slots) + " packs x " +
                             Num(geometry.layers()) + " layers x " +
                             Num(geometry.max_blocks_per_layer()) + " blocks exceeds " +
                             Num(kMaxDigestTableBytes) + " bytes");
  }
  return std::unique_ptr<DigestTable>(new DigestTable(geometry, pack_slots));
}

DigestTable::DigestTable(const DigestGeometry& geometry, uint32_t pack_slots)
    : geometry_(geometry), pack_slots_(pack_slots), stride_(geometry.max_blocks_per_layer()) {
  MutexLock lock(mu_);
  entries_.resize(pack_slots);
  for (Entry& e : entries_) e.layer_done.assign(geometry.layers(), 0);
  digests_.assign(uint64_t{pack_slots} * geometry.layers() * stride_, 0);
}

uint64_t* DigestTable::Row(uint32_t slot, uint32_t layer) {
  return digests_.data() + (uint64_t{slot} * geometry_.layers() + layer) * stride_;
}
const uint64_t* DigestTable::Row(uint32_t slot, uint32_t layer) const {
  return digests_.data() + (uint64_t{slot} * geometry_.layers() + layer) * stride_;
}

Status DigestTable::BeginLocked(uint32_t slot, uint64_t generation, uint64_t stored_tokens) {
  if (slot >= entries_.size()) {
    return InvalidArgument("digests: pack slot " + Num(slot) + " outside [0, " +
                           Num(entries_.size()) + ")");
  }
  if (generation == 0) return InvalidArgument("digests: generation 0");
  if (stored_tokens == 0 || stored_tokens > geometry_.tokens_per_pack()) {
    return InvalidArgument("digests: stored_tokens " + Num(stored_tokens) + " outside [1, " +
                           Num(geometry_.tokens_per_pack()) + "]");
  }
  Entry& e = entries_[slot];
  if (e.generation > generation) return Stale(slot, generation, e.generation);
  if (e.generation == generation) {
    if (e.stored_tokens != stored_tokens) {
      return FailedPrecondition("digests: pack slot " + Num(slot) + " generation " +
                                Num(generation) + " begun with " + Num(e.stored_tokens) +
                                " tokens, now " + Num(stored_tokens));
    }
    return OkStatus();
  }
  e.generation = generation;
  e.stored_tokens = stored_tokens;
  e.layers_recorded = 0;
  std::fill(e.layer_done.begin(), e.layer_done.end(), 0);
  return OkStatus();
}

Status DigestTable::Begin(uint32_t slot, uint64_t generation, uint64_t stored_tokens) {
  MutexLock lock(mu_);
  return BeginLocked(slot, generation, stored_tokens);
}

Status DigestTable::RecordLayerLocked(uint32_t slot, uint64_t generation, uint32_t layer,
                                      std::span<const uint64_t> block_digests) {
  if (slot >= entries_.size()) {
    return InvalidArgument("digests: pack slot " + Num(slot) + " out of range");
  }
  Entry& e = entries_[slot];
  if (e.generation != generation) return Stale(slot, generation, e.generation);
  if (layer >= geometry_.layers()) {
    return InvalidArgument("digests: layer " + Num(layer) + " outside [0, " +
                           Num(geometry_.layers()) + ")");
  }
  const uint64_t blocks = geometry_.BlocksFor(e.stored_tokens);
  if (block_digests.size() != blocks) {
    return InvalidArgument("digests: " + Num(block_digests.size()) + " digests for " + Num(blocks) +
                           " blocks of layer " + Num(layer));
  }
  std::copy(block_digests.begin(), block_digests.end(), Row(slot, layer));
  if (!e.layer_done[layer]) {
    e.layer_done[layer] = 1;
    ++e.layers_recorded;
  }
  return OkStatus();
}

Status DigestTable::RecordLayer(uint32_t slot, uint64_t generation, uint32_t layer,
                                std::span<const uint64_t> block_digests) {
  MutexLock lock(mu_);
  return RecordLayerLocked(slot, generation, layer, block_digests);
}

Status DigestTable::Record(uint32_t slot, uint64_t generation, uint64_t stored_tokens,
                           std::span<const uint64_t> digests) {
  MutexLock lock(mu_);
  RANGEKV_RETURN_IF_ERROR(BeginLocked(slot, generation, stored_tokens));
  const uint64_t blocks = geometry_.BlocksFor(stored_tokens);
  if (digests.size() != blocks * geometry_.layers()) {
    return InvalidArgument("digests: " + Num(digests.size()) + " digests for " +
                           Num(geometry_.layers()) + " layers x " + Num(blocks) + " blocks");
  }
  for (uint32_t l = 0; l < geometry_.layers(); ++l) {
    RANGEKV_RETURN_IF_ERROR(
        RecordLayerLocked(slot, generation, l, digests.subspan(uint64_t{l} * blocks, blocks)));
  }
  return OkStatus();
}

Status DigestTable::RecordStripeBytes(uint32_t slot, uint64_t generation, uint32_t layer,
                                      uint64_t stored_tokens, const uint8_t* stripe) {
  if (stored_tokens == 0 || stored_tokens > geometry_.tokens_per_pack()) {
    return InvalidArgument("digests: stored_tokens " + Num(stored_tokens) + " outside [1, " +
                           Num(geometry_.tokens_per_pack()) + "]");
  }
  // Bounded stack scratch in chunks: the data path allocates nothing.
  constexpr uint64_t kChunk = 64;
  uint64_t d[kChunk];
  if (stripe == nullptr) return InvalidArgument("digests: null stripe");
  if (layer >= geometry_.layers()) {
    return InvalidArgument("digests: layer " + Num(layer) + " outside [0, " +
                           Num(geometry_.layers()) + ")");
  }
  MutexLock lock(mu_);
  RANGEKV_RETURN_IF_ERROR(BeginLocked(slot, generation, stored_tokens));
  Entry& e = entries_[slot];
  const uint64_t blocks = geometry_.BlocksFor(stored_tokens);
  uint64_t* row = Row(slot, layer);
  for (uint64_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const uint64_t n = std::min(kChunk, blocks - b0);
    for (uint64_t k = 0; k < n; ++k) {
      d[k] = BlockDigest(stripe + geometry_.BlockOffsetBytes(b0 + k),
                         geometry_.BlockBytes(b0 + k, stored_tokens));
    }
    std::copy(d, d + n, row + b0);
  }
  if (!e.layer_done[layer]) {
    e.layer_done[layer] = 1;
    ++e.layers_recorded;
  }
  return OkStatus();
}

Status DigestTable::VerifyStripeBytes(uint32_t slot, uint64_t generation, uint32_t layer,
                                      uint64_t token_begin, uint64_t token_end,
                                      uint64_t buffer_stripe_offset, const uint8_t* data,
                                      uint64_t bytes) const {
  RANGEKV_ASSIGN_OR_RETURN(const VerifyPlan plan,
                           PlanVerify(slot, generation, token_begin, token_end));
  if (data == nullptr) return InvalidArgument("digests: null buffer");
  const uint64_t s = geometry_.token_bytes();
  const uint64_t buffer_end = buffer_stripe_offset + bytes;  // both < W + alignment
  constexpr uint64_t kChunk = 64;
  uint64_t computed[kChunk];
  for (uint64_t i = 0; i < plan.block_count; i += kChunk) {
    const uint64_t n = std::min(kChunk, plan.block_count - i);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t b = plan.first_block + i + k;
      const TokenRange t = geometry_.BlockTokens(b, plan.stored_tokens);
      const uint64_t lo = t.begin * s, hi = t.end * s;
      if (lo < buffer_stripe_offset || hi > buffer_end) {
        return OutOfRange("digests: read of stripe bytes [" + Num(buffer_stripe_offset) + ", " +
                          Num(buffer_end) + ") does not cover digest block " +
                          DescribeBlock(slot, generation, layer, t) +
                          "; extend the read to the verify extent");
      }
      computed[k] = BlockDigest(data + (lo - buffer_stripe_offset), hi - lo);
    }
    RANGEKV_RETURN_IF_ERROR(
        Compare(slot, generation, layer, plan.first_block + i, std::span(computed, n)));
  }
  return OkStatus();
}

Status DigestTable::CheckComplete(uint32_t slot, uint64_t generation) const {
  MutexLock lock(mu_);
  if (slot >= entries_.size()) return InvalidArgument("digests: pack slot out of range");
  const Entry& e = entries_[slot];
  if (e.generation != generation) {
    return NotFound("digests: pack slot " + Num(slot) + " generation " + Num(generation) +
                    " was never begun");
  }
  if (e.layers_recorded == geometry_.layers()) return OkStatus();
  uint32_t missing = 0;
  while (missing < geometry_.layers() && e.layer_done[missing]) ++missing;
  return FailedPrecondition("digests: pack slot " + Num(slot) + " generation " + Num(generation) +
                            " lacks layer " + Num(missing) + " (" + Num(e.layers_recorded) +
                            " of " + Num(geometry_.layers()) + " layers recorded)");
}

void DigestTable::Drop(uint32_t slot, uint64_t generation) {
  MutexLock lock(mu_);
  if (slot >= entries_.size()) return;
  Entry& e = entries_[slot];
  if (e.generation != generation) return;
  // Keep the generation so an older Begin still counts as stale; mark it incomplete.
  e.layers_recorded = 0;
  std::fill(e.layer_done.begin(), e.layer_done.end(), 0);
}

Result<const DigestTable::Entry*> DigestTable::CompleteEntry(uint32_t slot,
                                                             uint64_t generation) const {
  if (slot >= entries_.size()) {
    return InvalidArgument("digests: pack slot " + Num(slot) + " outside [0, " +
                           Num(entries_.size()) + ")");
  }
  const Entry& e = entries_[slot];
  if (e.generation != generation) return Stale(slot, generation, e.generation);
  if (e.layers_recorded != geometry_.layers()) {
    return NotFound("digests: pack slot " + Num(slot) + " generation " + Num(generation) +
                    " has no complete digests");
  }
  return &e;
}

Result<VerifyPlan> DigestTable::PlanVerify(uint32_t slot, uint64_t generation, uint64_t token_begin,
                                           uint64_t token_end) const {
  MutexLock lock(mu_);
  RANGEKV_ASSIGN_OR_RETURN(const Entry* e, CompleteEntry(slot, generation));
  if (token_begin >= token_end || token_end > e->stored_tokens) {
    return OutOfRange("digests: pack tokens [" + Num(token_begin) + ", " + Num(token_end) +
                      ") of pack slot " + Num(slot) + " generation " + Num(generation) +
                      " outside its " + Num(e->stored_tokens) + " stored tokens");
  }
  const uint64_t d = geometry_.block_tokens();
  VerifyPlan plan;
  plan.first_block = token_begin / d;
  const uint64_t end_block = (token_end + d - 1) / d;
  plan.block_count = end_block - plan.first_block;
  plan.extent = {plan.first_block * d, std::min(end_block * d, e->stored_tokens)};
  plan.stored_tokens = e->stored_tokens;
  return plan;
}

Result<DigestTable::BlockRun> DigestTable::RecordedRun(uint32_t slot, uint64_t generation,
                                                       uint32_t layer, uint64_t first_block,
                                                       uint64_t count) const {
  RANGEKV_ASSIGN_OR_RETURN(const Entry* e, CompleteEntry(slot, generation));
  if (layer >= geometry_.layers()) return InvalidArgument("digests: layer out of range");
  const uint64_t blocks = geometry_.BlocksFor(e->stored_tokens);
  if (first_block > blocks || count > blocks - first_block) {
    return OutOfRange("digests: blocks [" + Num(first_block) + ", " + Num(first_block + count) +
                      ") beyond the " + Num(blocks) + " blocks of pack slot " + Num(slot));
  }
  return BlockRun{Row(slot, layer) + first_block, e->stored_tokens};
}

Status DigestTable::Compare(uint32_t slot, uint64_t generation, uint32_t layer,
                            uint64_t first_block, std::span<const uint64_t> computed) const {
  MutexLock lock(mu_);
  RANGEKV_ASSIGN_OR_RETURN(const BlockRun run,
                           RecordedRun(slot, generation, layer, first_block, computed.size()));
  for (uint64_t i = 0; i < computed.size(); ++i) {
    if (run.digests[i] != computed[i]) {
      return Corruption("payload digest mismatch: " +
                        DescribeBlock(slot, generation, layer,
                                      geometry_.BlockTokens(first_block + i, run.stored_tokens)));
    }
  }
  return OkStatus();
}

Status DigestTable::Recorded(uint32_t slot, uint64_t generation, uint32_t layer,
                             uint64_t first_block, std::span<uint64_t> out) const {
  MutexLock lock(mu_);
  RANGEKV_ASSIGN_OR_RETURN(const BlockRun run,
                           RecordedRun(slot, generation, layer, first_block, out.size()));
  std::copy(run.digests, run.digests + out.size(), out.begin());
  return OkStatus();
}

Status DigestTable::VerifyHostBytes(uint32_t slot, uint64_t generation, uint32_t layer,
                                    const VerifyPlan& plan, const uint8_t* data,
                                    uint64_t bytes) const {
  const uint64_t s = geometry_.token_bytes();
  const uint64_t d = geometry_.block_tokens();
  if (plan.block_count == 0 || plan.extent.begin != plan.first_block * d ||
      plan.extent.end <= plan.extent.begin || plan.stored_tokens < plan.extent.end) {
    return InvalidArgument("digests: malformed verify plan");
  }
  if (data == nullptr || bytes != plan.extent.size() * s) {
    return InvalidArgument("digests: " + Num(bytes) + " bytes for a verify extent of " +
                           Num(plan.extent.size() * s));
  }
  // Digest block by block; Compare checks stored_tokens against the live entry, so a plan
  // from another generation cannot pass.
  constexpr uint64_t kChunk = 64;
  uint64_t computed[kChunk];
  for (uint64_t i = 0; i < plan.block_count; i += kChunk) {
    const uint64_t n = std::min(kChunk, plan.block_count - i);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t b = plan.first_block + i + k;
      const TokenRange t = geometry_.BlockTokens(b, plan.stored_tokens);
      computed[k] = BlockDigest(data + (t.begin - plan.extent.begin) * s, t.size() * s);
    }
    RANGEKV_RETURN_IF_ERROR(
        Compare(slot, generation, layer, plan.first_block + i, std::span(computed, n)));
  }
  // The plan's stored_tokens must be the entry's, or the last block's length was wrong.
  MutexLock lock(mu_);
  RANGEKV_ASSIGN_OR_RETURN(const Entry* e, CompleteEntry(slot, generation));
  if (e->stored_tokens != plan.stored_tokens) {
    return InvalidArgument("digests: verify plan of another extent");
  }
  return OkStatus();
}

Result<PackDigests> DigestTable::Get(uint32_t slot, uint64_t generation) const {
  MutexLock lock(mu_);
  RANGEKV_ASSIGN_OR_RETURN(const Entry* e, CompleteEntry(slot, generation));
  PackDigests out;
  out.slot = slot;
  out.generation = generation;
  out.stored_tokens = e->stored_tokens;
  out.layers = geometry_.layers();
  out.blocks_per_layer = static_cast<uint32_t>(geometry_.BlocksFor(e->stored_tokens));
  out.digests.reserve(uint64_t{out.layers} * out.blocks_per_layer);
  for (uint32_t l = 0; l < out.layers; ++l) {
    const uint64_t* row = Row(slot, l);
    out.digests.insert(out.digests.end(), row, row + out.blocks_per_layer);
  }
  return out;
}

Status DigestTable::Import(const PackDigests& pack) {
  if (pack.layers != geometry_.layers()) {
    return InvalidArgument("digests: pack slot " + Num(pack.slot) + " has " + Num(pack.layers) +
                           " layers, store has " + Num(geometry_.layers()));
  }
  if (pack.stored_tokens == 0 || pack.stored_tokens > geometry_.tokens_per_pack() ||
      pack.blocks_per_layer != geometry_.BlocksFor(pack.stored_tokens) ||
      pack.digests.size() != uint64_t{pack.layers} * pack.blocks_per_layer) {
    return InvalidArgument("digests: pack slot " + Num(pack.slot) +
                           " block count does not match its stored tokens");
  }
  return Record(pack.slot, pack.generation, pack.stored_tokens, pack.digests);
}

}  // namespace rangekv::persist
