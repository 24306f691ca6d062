// CPU reference implementations of the engine's kernels. They define the semantics the CUDA
// kernels must reproduce byte for byte (kernels_gpu_test compares them), and they are what
// HostDevice runs as its "kernels".
//
// Preconditions are those of the matching Validate*Args() (paged_kv.h, span_digest.h); the
// functions do not re-validate. Negative and out-of-range slots are skipped, exactly like the
// CUDA kernels. Token ranges let a caller split one launch over several threads: ranges that
// do not overlap touch disjoint bytes as long as the slot mapping has no duplicates. For a view
// with opaque blocks, a range moves the whole block groups whose first token lies inside it
// (paged_kv.h, "Opaque blocks"), so disjoint ranges still move every group exactly once.
//
// Thread-safety: reentrant; the caller owns the memory and its synchronisation.
#pragma once

#include <cstdint>

#include "kernels/paged_kv.h"
#include "kernels/span_digest.h"

namespace rangekv::kernels {

// Scatter of tokens [token_begin, token_end) of args (see ScatterArgs).
// REQUIRES: ValidateScatterArgs(args).ok(), token_begin <= token_end <= args.num_tokens.
void ScatterReference(const ScatterArgs& args, uint32_t token_begin, uint32_t token_end);
inline void ScatterReference(const ScatterArgs& args) {
  ScatterReference(args, 0, args.num_tokens);
}

// The scatter of tokens [token_begin, token_end) of args fused with the digest of those rows'
// stripe bytes: copies exactly as ScatterReference does and sets *word_sum to the rows' share of
// the digest of a span that begins at `word_origin` (SpanDigestWordSum of the rows' bytes, their
// first word numbered from word_origin). Each 64-byte unit is digested from the registers that
// copy it, so the rows are read from memory once and the digest's arithmetic runs under the
// copy's memory traffic; rows with an invalid slot are digested, not copied. Returns false,
// having touched nothing, where this CPU or the shape cannot (no AVX-512 DQ; copy pieces --
// heads, token planes, or for opaque blocks whole block groups -- that are not whole 64-byte
// units; with opaque blocks, a range that is not whole groups; word_origin not a whole number of
// words before row token_begin): the caller digests and scatters apart then.
// REQUIRES: ValidateScatterArgs(args).ok(), token_begin <= token_end <= args.num_tokens,
// word_origin <= args.stripe + token_begin * row bytes.
bool ScatterDigestReference(const ScatterArgs& args, uint32_t token_begin, uint32_t token_end,
                            const uint8_t* word_origin, uint64_t seed, uint64_t* word_sum);

// The gather of tokens [token_begin, token_end) of layer `layer` of args fused with the digest of
// the bytes it writes: copies exactly as GatherReference does for that layer and sets *word_sum
// to those rows' share of the digest of a span of the output that begins at `word_origin` (the
// rows of invalid slots, which the gather leaves alone, are digested as they are). Returns
// false, having touched nothing, where ScatterDigestReference would.
// REQUIRES: ValidateGatherArgs(args).ok(), layer < args.num_layers, token_begin <= token_end <=
// args.num_tokens, word_origin <= the layer's row token_begin in args.out.
bool GatherDigestReference(const GatherArgs& args, uint32_t layer, uint32_t token_begin,
                           uint32_t token_end, const uint8_t* word_origin, uint64_t seed,
                           uint64_t* word_sum);

// Gather of tokens [token_begin, token_end) of every layer of args (see GatherArgs).
// REQUIRES: ValidateGatherArgs(args).ok(), token_begin <= token_end <= args.num_tokens.
void GatherReference(const GatherArgs& args, uint32_t token_begin, uint32_t token_end);
inline void GatherReference(const GatherArgs& args) { GatherReference(args, 0, args.num_tokens); }

// Writes SpanDigest(spans[i]) to digests[i] for every span.
// REQUIRES: ValidateDigestArgs(args).ok().
void DigestReference(const DigestArgs& args);

}  // namespace rangekv::kernels
