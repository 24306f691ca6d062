// PackRecord: the plain value that links the directory (which tokens) to the pack store
// (which bytes). The directory stores records without knowing about files; the span planner
// turns selected records into byte spans without knowing about token trees.
//
// A record says: tokens [path_token_begin, path_token_begin + tokens) of a prefix path live in
// pack slot `pack_slot` (while it is at generation `generation`), starting at token offset
// `pack_token_offset` inside that pack. Its bytes for layer l are at
//   pack_base(pack_slot) + l*W + (pack_token_offset + i)*s   for i in [0, tokens).
#pragma once

#include <cstdint>

namespace rangekv {

struct PackRecord {
  uint32_t pack_slot = 0;
  uint64_t generation = 0;
  uint64_t path_token_begin = 0;   // position of the record's first token in the prefix path
  uint64_t pack_token_offset = 0;  // first token's offset inside the pack (0 <= x < T)
  uint64_t tokens = 0;             // valid tokens; pack_token_offset + tokens <= T

  uint64_t path_token_end() const { return path_token_begin + tokens; }
  friend bool operator==(const PackRecord&, const PackRecord&) = default;
};

}  // namespace rangekv
