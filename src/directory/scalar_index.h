// ScalarIndex: the `index=scalar` ablation (internal header).
//
// It restores the stock per-object index of LMCache's in-process engine
// (docs/design.md "Baselines"): the prompt is cut into chunks of `chunk_tokens`; a key
// is built per chunk by a hash chain over the token prefix (key_i = H(key_{i-1}, tokens of chunk
// i), seeded by the namespace), and in layerwise mode one more key per (chunk, layer); each key
// is probed in a hash map and every selected key takes its own lease. Only full chunks are
// keyed (LMCache's default save_unfull_chunk=false).
//
// The keys index the same physical packs as the tree: an entry lists the pack pieces holding its
// chunk. Entries exist exactly for the chunks that are fully covered by visible packs: the
// Directory inserts them when a publication completes a chunk and removes them when a chunk
// loses any token (invalidation, eviction). So for any query the scalar hit is the tree's hit
// rounded down to whole chunks, and the two agree exactly whenever the tree's hit is
// chunk-aligned (always when the reuse granularity is a multiple of chunk_tokens).
//
// Thread-safety: none (guarded by the Directory's mutex).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/digest.h"
#include "rangekv/geometry.h"

namespace rangekv::directory_internal {

// A run of path tokens inside one pack.
struct Piece {
  uint32_t slot = 0;
  uint64_t path_begin = 0;
  uint64_t pack_offset = 0;
  uint64_t tokens = 0;
};

class ScalarIndex {
 public:
  struct Entry {
    Digest128 key;
    uint64_t chunk_end = 0;  // path position after the chunk's last token
    uint64_t serial = 0;     // distinguishes reuses of the entry's storage
    uint32_t leases = 0;
    bool in_use = false;
    std::vector<Piece> pieces;  // path order, tiling the chunk
  };
  struct EntryRef {
    uint32_t entry;
    uint64_t serial;
  };

  // keys_per_chunk: 1 (one object per chunk) or L (one object per chunk and layer).
  ScalarIndex(uint64_t chunk_tokens, uint32_t keys_per_chunk, uint32_t pack_slots);

  uint64_t chunk_tokens() const { return chunk_tokens_; }
  uint32_t keys_per_chunk() const { return keys_per_chunk_; }

  // Hash chain start for a namespace, and the next link.
  static Digest128 ChainSeed(const NamespaceId& ns);
  static Digest128 ChainNext(const Digest128& prev, std::span<const int32_t> chunk);
  static Digest128 LayerKey(const Digest128& chunk_key, uint32_t layer);

  // Inserts keys for every chunk ending in (from_tokens, to_tokens] of the path whose tokens are
  // `path_tokens` (at least to_tokens long) and whose pieces are `pieces` (tiling [0, to_tokens)).
  // Keys that already exist are kept. Adds the number of keys built to *keys_built.
  void InsertChunks(const NamespaceId& ns, std::span<const int32_t> path_tokens,
                    std::span<const Piece> pieces, uint64_t from_tokens, uint64_t to_tokens,
                    uint64_t* keys_built);

  // Removes every key whose chunk holds a token of `slot` at a path position >= keep_end (the
  // pack was clipped to end at keep_end, or retired when keep_end is its first position).
  void RemoveFrom(uint32_t slot, uint64_t keep_end);

  // Probes the full chunks of `tokens` in order, stopping at the first missing key. Appends the
  // entries found (chunk-major, keys_per_chunk per chunk) to *found and returns the number of
  // whole chunks found. Adds keys built / probed to the counters.
  uint64_t Probe(const NamespaceId& ns, std::span<const int32_t> tokens,
                 std::vector<uint32_t>* found, uint64_t* keys_built, uint64_t* probes) const;

  const Entry& entry(uint32_t i) const { return entries_[i]; }
  void AddLease(uint32_t i) { entries_[i].leases++; }
  // Drops a key lease unless the entry was removed (and maybe reused) since it was taken.
  void DropLease(const EntryRef& ref);
  size_t size() const { return map_.size(); }
  template <typename F>
  void ForEachEntry(F f) const {
    for (const auto& [key, i] : map_) f(entries_[i]);
  }

 private:
  struct KeyHash {
    size_t operator()(const Digest128& d) const { return static_cast<size_t>(d.lo ^ (d.hi * 31)); }
  };
  uint32_t NewEntry();
  void Insert(const Digest128& key, uint64_t chunk_end, std::span<const Piece> pieces);

  uint64_t chunk_tokens_;
  uint32_t keys_per_chunk_;
  std::unordered_map<Digest128, uint32_t, KeyHash> map_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_entries_;
  uint64_t next_serial_ = 1;
  std::vector<std::vector<EntryRef>> slot_keys_;  // per slot: entries whose pieces use it
};

}  // namespace rangekv::directory_internal
