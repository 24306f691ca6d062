#include "directory/scalar_index.h"

#include <algorithm>

#include "base/check.h"

namespace rangekv::directory_internal {

ScalarIndex::ScalarIndex(uint64_t chunk_tokens, uint32_t keys_per_chunk, uint32_t pack_slots)
    : chunk_tokens_(chunk_tokens), keys_per_chunk_(keys_per_chunk), slot_keys_(pack_slots) {
  RANGEKV_CHECK(chunk_tokens > 0 && keys_per_chunk > 0);
}

Digest128 ScalarIndex::ChainSeed(const NamespaceId& ns) {
  return Hash128(&ns, sizeof(ns), 0x7363616c6172ull);
}

Digest128 ScalarIndex::ChainNext(const Digest128& prev, std::span<const int32_t> chunk) {
  return Hash128(chunk.data(), chunk.size_bytes(), prev.lo ^ (prev.hi * 0x9e3779b97f4a7c15ull));
}

Digest128 ScalarIndex::LayerKey(const Digest128& chunk_key, uint32_t layer) {
  return Hash128(&chunk_key, sizeof(chunk_key), uint64_t{layer} + 1);
}

uint32_t ScalarIndex::NewEntry() {
  uint32_t i;
  if (!free_entries_.empty()) {
    i = free_entries_.back();
    free_entries_.pop_back();
  } else {
    i = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  Entry& e = entries_[i];
  e.in_use = true;
  e.serial = next_serial_++;
  e.leases = 0;
  e.pieces.clear();
  return i;
}

void ScalarIndex::Insert(const Digest128& key, uint64_t chunk_end, std::span<const Piece> pieces) {
  if (map_.contains(key)) return;
  const uint32_t i = NewEntry();
  Entry& e = entries_[i];
  e.key = key;
  e.chunk_end = chunk_end;
  e.pieces.assign(pieces.begin(), pieces.end());
  map_.emplace(key, i);
  for (const Piece& p : pieces) slot_keys_[p.slot].push_back({i, e.serial});
}

void ScalarIndex::InsertChunks(const NamespaceId& ns, std::span<const int32_t> path_tokens,
                               std::span<const Piece> pieces, uint64_t from_tokens,
                               uint64_t to_tokens, uint64_t* keys_built) {
  RANGEKV_CHECK(path_tokens.size() >= to_tokens);
  Digest128 key = ChainSeed(ns);
  std::vector<Piece> chunk_pieces;
  size_t pi = 0;  // first piece that may overlap the current chunk
  for (uint64_t begin = 0; begin + chunk_tokens_ <= to_tokens; begin += chunk_tokens_) {
    const uint64_t end = begin + chunk_tokens_;
    key = ChainNext(key, path_tokens.subspan(begin, chunk_tokens_));
    (*keys_built)++;
    if (end <= from_tokens) continue;
    chunk_pieces.clear();
    while (pi < pieces.size() && pieces[pi].path_begin + pieces[pi].tokens <= begin) ++pi;
    for (size_t j = pi; j < pieces.size() && pieces[j].path_begin < end; ++j) {
      const Piece& p = pieces[j];
      const uint64_t lo = std::max(begin, p.path_begin);
      const uint64_t hi = std::min(end, p.path_begin + p.tokens);
      chunk_pieces.push_back({p.slot, lo, p.pack_offset + (lo - p.path_begin), hi - lo});
    }
    if (keys_per_chunk_ == 1) {
      Insert(key, end, chunk_pieces);
    } else {
      for (uint32_t l = 0; l < keys_per_chunk_; ++l) {
        Insert(LayerKey(key, l), end, chunk_pieces);
        (*keys_built)++;
      }
    }
  }
}

void ScalarIndex::RemoveFrom(uint32_t slot, uint64_t keep_end) {
  std::vector<EntryRef>& refs = slot_keys_[slot];
  size_t kept = 0;
  for (const EntryRef& ref : refs) {
    Entry& e = entries_[ref.entry];
    if (!e.in_use || e.serial != ref.serial) continue;  // removed through another pack
    // Judge by this pack's own piece of the chunk: a chunk of another path may use only the
    // pack's surviving head (it branched off before keep_end) and stays fully covered.
    bool loses_tokens = false;
    for (const Piece& p : e.pieces) {
      if (p.slot == slot && p.path_begin + p.tokens > keep_end) loses_tokens = true;
    }
    if (!loses_tokens) {
      refs[kept++] = ref;
      continue;
    }
    map_.erase(e.key);
    e.in_use = false;
    e.pieces.clear();
    free_entries_.push_back(ref.entry);
  }
  refs.resize(kept);
}

uint64_t ScalarIndex::Probe(const NamespaceId& ns, std::span<const int32_t> tokens,
                            std::vector<uint32_t>* found, uint64_t* keys_built,
                            uint64_t* probes) const {
  Digest128 key = ChainSeed(ns);
  uint64_t chunks = 0;
  for (uint64_t begin = 0; begin + chunk_tokens_ <= tokens.size(); begin += chunk_tokens_) {
    key = ChainNext(key, tokens.subspan(begin, chunk_tokens_));
    (*keys_built)++;
    const size_t mark = found->size();
    for (uint32_t l = 0; l < keys_per_chunk_; ++l) {
      Digest128 k = key;
      if (keys_per_chunk_ > 1) {
        k = LayerKey(key, l);
        (*keys_built)++;
      }
      (*probes)++;
      auto it = map_.find(k);
      if (it == map_.end()) {
        found->resize(mark);
        return chunks;
      }
      found->push_back(it->second);
    }
    chunks++;
  }
  return chunks;
}

void ScalarIndex::DropLease(const EntryRef& ref) {
  Entry& e = entries_[ref.entry];
  if (e.in_use && e.serial == ref.serial && e.leases > 0) e.leases--;
}

}  // namespace rangekv::directory_internal
