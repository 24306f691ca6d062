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

// Gather of tokens [token_begin, token_end) of every layer of args (see GatherArgs).
// REQUIRES: ValidateGatherArgs(args).ok(), token_begin <= token_end <= args.num_tokens.
void GatherReference(const GatherArgs& args, uint32_t token_begin, uint32_t token_end);
inline void GatherReference(const GatherArgs& args) { GatherReference(args, 0, args.num_tokens); }

// Writes SpanDigest(spans[i]) to digests[i] for every span.
// REQUIRES: ValidateDigestArgs(args).ok().
void DigestReference(const DigestArgs& args);

}  // namespace rangekv::kernels
