// Payload integrity: one 64-bit digest per (pack slot, generation, layer, digest block), so a
// restore can prove that the bytes it read are the bytes that were stored (docs/design.md
// "Persistence and recovery": "nothing wrong is ever served").
//
// Digest blocks. A pack's stripe for one layer holds tokens [0, stored_tokens) (a pack is
// written once, from token 0, by the store that reserved it; later clipping only lowers the
// record's valid tokens, never the stored bytes). It is cut into blocks of block_tokens
// consecutive tokens: block b covers pack tokens [b*D, min((b+1)*D, stored_tokens)). Its
// digest is kernels::SpanDigest over exactly those bytes (token-major, t*s inside the stripe)
// with seed kPayloadDigestSeed: the checksum kernel's function, so CudaDevice computes the same
// value on the GPU that HostDevice and fsck compute on the CPU.
//
// Why blocks of whole tokens, about 1 MiB each (DefaultBlockTokens: floor(1 MiB / s), at least
// 1, at most T; 256 tokens for s = 4096). A restore may end anywhere (a clipped hit, a
// partial tail), and a digest can only check bytes it covered in full. The rule is: a restore
// of pack tokens [a, b) reads the verify extent [floor(a/D)*D, min(ceil(b/D)*D, stored_tokens))
// instead, which stays inside the pack's stored bytes, so every block it touches is whole and
// checkable. Blocks in tokens keep that rounding in the unit records use; ~1 MiB keeps the
// extra read at most ~1 MiB per layer per record edge (<1% of a 6 GiB restore) and the table at
// W/1 MiB = 32 digests (256 bytes) per stripe, i.e. 8 KiB per 1 GiB pack. A whole-stripe
// digest would force a clipped restore to read the whole stripe; 4 KiB pages would make the
// table 256x larger and the device launch count follow pages.
//
// DigestTable holds the digests of every pack slot's current generation, preallocated at
// Create for all N slots (the data path never allocates). The store side records a pack's
// digests layer by layer as its writes complete and checks completeness before Publish; the
// restore side plans its verify extent and compares computed digests; a newer generation of a
// slot replaces the older entry, so entries of reclaimed generations need no callback. The
// table is saved in and restored from the metadata snapshot (snapshot.h).
//
// Thread-safety: DigestTable methods are thread-safe (one mutex; each call copies at most
// L x blocks_per_layer digests under it). DigestGeometry is a plain value.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "base/units.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::persist {

// Seed of every payload digest (part of the snapshot format: stored in each snapshot and
// checked at load).
inline constexpr uint64_t kPayloadDigestSeed = 0x5061796C6F616431ull;  // "Payload1"
inline constexpr uint64_t kDigestBlockTargetBytes = 1 * kMiB;
// Bound on one table's preallocated digest memory (N x L x blocks_per_layer x 8 bytes).
inline constexpr uint64_t kMaxDigestTableBytes = 1 * kGiB;

// Pack-token interval [begin, end).
struct TokenRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  friend bool operator==(const TokenRange&, const TokenRange&) = default;
};

// Block arithmetic of one store.
class DigestGeometry {
 public:
  // floor(kDigestBlockTargetBytes / s), clamped to [1, T].
  static uint64_t DefaultBlockTokens(const Geometry& geometry);
  // kInvalidArgument unless layers >= 1, token_bytes >= 1, 1 <= block_tokens <= tokens_per_pack
  // <= 2^32 and tokens_per_pack * token_bytes does not overflow.
  static Result<DigestGeometry> Make(uint32_t layers, uint64_t tokens_per_pack,
                                     uint64_t token_bytes, uint64_t block_tokens);
  // Make(L, T, s, block_tokens or DefaultBlockTokens when 0).
  static Result<DigestGeometry> ForGeometry(const Geometry& geometry, uint64_t block_tokens = 0);

  uint32_t layers() const { return layers_; }
  uint64_t tokens_per_pack() const { return tokens_per_pack_; }
  uint64_t token_bytes() const { return token_bytes_; }
  uint64_t block_tokens() const { return block_tokens_; }
  // ceil(stored_tokens / D): blocks per layer of a pack holding stored_tokens tokens.
  uint64_t BlocksFor(uint64_t stored_tokens) const {
    return (stored_tokens + block_tokens_ - 1) / block_tokens_;
  }
  uint64_t max_blocks_per_layer() const { return BlocksFor(tokens_per_pack_); }
  // Tokens of block `block` of a pack holding stored_tokens. REQUIRES block < BlocksFor(stored).
  TokenRange BlockTokens(uint64_t block, uint64_t stored_tokens) const;
  // Byte range of that block relative to the stripe's first byte (token 0 of the pack).
  uint64_t BlockOffsetBytes(uint64_t block) const { return block * block_tokens_ * token_bytes_; }
  uint64_t BlockBytes(uint64_t block, uint64_t stored_tokens) const {
    return BlockTokens(block, stored_tokens).size() * token_bytes_;
  }

 private:
  DigestGeometry(uint32_t layers, uint64_t tokens_per_pack, uint64_t token_bytes,
                 uint64_t block_tokens)
      : layers_(layers),
        tokens_per_pack_(tokens_per_pack),
        token_bytes_(token_bytes),
        block_tokens_(block_tokens) {}
  uint32_t layers_;
  uint64_t tokens_per_pack_;
  uint64_t token_bytes_;
  uint64_t block_tokens_;
};

// The digest of one block's bytes (kernels::SpanDigest with kPayloadDigestSeed).
uint64_t BlockDigest(const void* data, uint64_t bytes);

// Digests of one layer's stripe bytes: `stripe` points at pack token 0 of that layer and holds
// at least stored_tokens * s bytes; out must have exactly BlocksFor(stored_tokens) entries.
// kInvalidArgument on a size mismatch or stored_tokens outside [1, T].
Status ComputeLayerDigests(const DigestGeometry& geometry, const uint8_t* stripe,
                           uint64_t stored_tokens, std::span<uint64_t> out);

// The digests of one pack generation, as exported to and imported from a snapshot.
struct PackDigests {
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t stored_tokens = 0;
  uint32_t layers = 0;
  uint32_t blocks_per_layer = 0;
  std::vector<uint64_t> digests;  // layers x blocks_per_layer, layer-major
  uint64_t at(uint32_t layer, uint64_t block) const {
    return digests[uint64_t{layer} * blocks_per_layer + block];
  }
  friend bool operator==(const PackDigests&, const PackDigests&) = default;
};

// What a restore of pack tokens [begin, end) of one pack must read and check.
struct VerifyPlan {
  uint64_t first_block = 0;
  uint64_t block_count = 0;
  TokenRange extent;           // whole blocks: read these pack tokens of each layer
  uint64_t stored_tokens = 0;  // the pack's digested extent
};

class DigestTable {
 public:
  // Preallocates digests for `pack_slots` slots. kInvalidArgument for 0 slots,
  // kResourceExhausted beyond kMaxDigestTableBytes.
  static Result<std::unique_ptr<DigestTable>> Create(const DigestGeometry& geometry,
                                                     uint32_t pack_slots);
  DigestTable(const DigestTable&) = delete;
  DigestTable& operator=(const DigestTable&) = delete;

  const DigestGeometry& geometry() const { return geometry_; }
  uint32_t pack_slots() const { return pack_slots_; }

  // ---- store side ---------------------------------------------------------------------------
  // Starts the entry of (slot, generation) holding stored_tokens tokens, with no layer recorded;
  // replaces whatever entry the slot had (an older generation is thereby dropped). Idempotent for
  // the same (slot, generation, stored_tokens). Errors: kInvalidArgument (slot out of range,
  // generation 0, stored_tokens outside [1, T]), kStaleGeneration (the slot already holds a
  // newer generation), kFailedPrecondition (same generation begun with other stored_tokens).
  Status Begin(uint32_t slot, uint64_t generation, uint64_t stored_tokens);
  // Records one layer's BlocksFor(stored_tokens) digests (from ComputeLayerDigests or the
  // device kernel). Recording a layer twice overwrites it. kStaleGeneration when the slot's
  // entry is not (slot, generation); kInvalidArgument for a bad layer or digest count.
  Status RecordLayer(uint32_t slot, uint64_t generation, uint32_t layer,
                     std::span<const uint64_t> block_digests);
  // Begin + RecordLayer for every layer from a layer-major array (L x blocks).
  Status Record(uint32_t slot, uint64_t generation, uint64_t stored_tokens,
                std::span<const uint64_t> digests);
  // Begin + ComputeLayerDigests + RecordLayer for one layer whose stripe bytes of pack tokens
  // [0, stored_tokens) start at `stripe` (a host-readable store bank): what a store's write
  // completion calls per (pack, layer) span on HostDevice. Errors as Begin and RecordLayer.
  Status RecordStripeBytes(uint32_t slot, uint64_t generation, uint32_t layer,
                           uint64_t stored_tokens, const uint8_t* stripe);
  // OK when every layer of (slot, generation) is recorded (call before Directory::Publish).
  // kNotFound (no entry for that generation) or kFailedPrecondition naming the first missing
  // layer.
  Status CheckComplete(uint32_t slot, uint64_t generation) const;
  // Forgets (slot, generation) (a dropped or retired pack); no-op for another generation.
  void Drop(uint32_t slot, uint64_t generation);

  // ---- restore side -------------------------------------------------------------------------
  // The verify extent of a restore of pack tokens [token_begin, token_end) (see the file
  // comment). kNotFound when the slot holds no complete entry (or another generation:
  // kStaleGeneration); kOutOfRange when the range is empty or ends beyond stored_tokens.
  Result<VerifyPlan> PlanVerify(uint32_t slot, uint64_t generation, uint64_t token_begin,
                                uint64_t token_end) const;
  // Compares digests computed over blocks [first_block, first_block + computed.size()) of
  // `layer` with the recorded ones. kCorruption naming slot, generation, layer and the pack
  // tokens of the first mismatching block; kNotFound / kStaleGeneration / kOutOfRange as above.
  Status Compare(uint32_t slot, uint64_t generation, uint32_t layer, uint64_t first_block,
                 std::span<const uint64_t> computed) const;
  // Copies the recorded digests of blocks [first_block, first_block + out.size()) of `layer`
  // into `out` (for a comparison on the device). Errors as Compare, without kCorruption.
  Status Recorded(uint32_t slot, uint64_t generation, uint32_t layer, uint64_t first_block,
                  std::span<uint64_t> out) const;
  // Host verification: `data` holds the bytes of pack tokens plan.extent of `layer` (exactly
  // plan.extent.size() * s bytes); digests every block and compares. Errors as Compare, plus
  // kInvalidArgument when `bytes` is not the extent's size.
  Status VerifyHostBytes(uint32_t slot, uint64_t generation, uint32_t layer, const VerifyPlan& plan,
                         const uint8_t* data, uint64_t bytes) const;

  // Verification of a read buffer as the engine has it: `data` holds `bytes` bytes of layer
  // `layer`'s stripe starting at stripe byte `buffer_stripe_offset` (file_offset minus the
  // stripe's first byte; any I/O alignment). Verifies every digest block that overlaps pack
  // tokens [token_begin, token_end). Each such block must lie wholly inside the buffer:
  // kOutOfRange naming the block otherwise (the read must be extended to PlanVerify's extent).
  // kCorruption naming the first bad block; kNotFound / kStaleGeneration as PlanVerify.
  Status VerifyStripeBytes(uint32_t slot, uint64_t generation, uint32_t layer, uint64_t token_begin,
                           uint64_t token_end, uint64_t buffer_stripe_offset, const uint8_t* data,
                           uint64_t bytes) const;

  // ---- snapshot -----------------------------------------------------------------------------
  // A copy of the complete entry of (slot, generation). Errors as PlanVerify.
  Result<PackDigests> Get(uint32_t slot, uint64_t generation) const;
  // Installs a decoded entry (replacing the slot's). kInvalidArgument when it does not fit this
  // table's geometry (layers, block count for its stored_tokens, slot range).
  Status Import(const PackDigests& pack);

 private:
  struct Entry {
    uint64_t generation = 0;  // 0: empty
    uint64_t stored_tokens = 0;
    uint32_t layers_recorded = 0;
    std::vector<uint8_t> layer_done;  // L flags, sized at Create
  };
  DigestTable(const DigestGeometry& geometry, uint32_t pack_slots);
  // Digest storage of `slot`: L x max_blocks_per_layer, layer-major with that stride.
  uint64_t* Row(uint32_t slot, uint32_t layer) REQUIRES(mu_);
  const uint64_t* Row(uint32_t slot, uint32_t layer) const REQUIRES(mu_);
  // The slot's entry when it is (slot, generation) and complete; else the error.
  Result<const Entry*> CompleteEntry(uint32_t slot, uint64_t generation) const REQUIRES(mu_);
  // Blocks [first_block, first_block + count) of `layer` of a complete (slot, generation):
  // their recorded digests and the pack's stored_tokens. Errors as Compare's, without
  // kCorruption.
  struct BlockRun {
    const uint64_t* digests;
    uint64_t stored_tokens;
  };
  Result<BlockRun> RecordedRun(uint32_t slot, uint64_t generation, uint32_t layer,
                               uint64_t first_block, uint64_t count) const REQUIRES(mu_);
  Status BeginLocked(uint32_t slot, uint64_t generation, uint64_t stored_tokens) REQUIRES(mu_);
  Status RecordLayerLocked(uint32_t slot, uint64_t generation, uint32_t layer,
                           std::span<const uint64_t> block_digests) REQUIRES(mu_);

  const DigestGeometry geometry_;
  const uint32_t pack_slots_;
  const uint64_t stride_;  // max_blocks_per_layer
  mutable Mutex mu_;
  std::vector<Entry> entries_ GUARDED_BY(mu_);
  std::vector<uint64_t> digests_ GUARDED_BY(mu_);
};

// "pack slot 3 generation 7 layer 5 pack tokens [256, 512)": how errors name a block.
std::string DescribeBlock(uint32_t slot, uint64_t generation, uint32_t layer, TokenRange tokens);

}  // namespace rangekv::persist
