// TinyStore: a small store for the persist tests (pack file + index) that writes real payload,
// records digests and restores with verification, over persist's OpenIndex; with the tiny
// geometry, namespace, payload bytes and token runs it is built from. Library
// rangekv_persist_testing; the directory-entry crash model the tests layer under it is
// testing/dir_journal_env.h.
//
// Thread-safety: a TinyStore is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "directory/directory.h"
#include "env/env.h"
#include "pack/pack_file.h"
#include "persist/persistence.h"

namespace rangekv::testing {

// A tiny geometry: L=2, s=32 bytes, W=4096, T=128 tokens, 8 KiB packs.
Geometry TinyGeometry();
NamespaceId TinyNamespace(uint64_t salt = 0);

// The expected payload byte k of path token position p (token value v) in layer l.
uint8_t PayloadByte(int32_t v, uint64_t p, uint32_t l, uint64_t k);

// One open store: pack file + OpenIndex result.
struct TinyStore {
  std::optional<PackFile> pack;
  persist::OpenedIndex index;

  // Creates (`create` = true) or opens the pack file in `dir` and runs OpenIndex.
  static Result<TinyStore> Open(Env* env, const std::string& dir, bool create,
                                const persist::PersistenceOptions& base_options = {},
                                uint32_t pack_count = 8, uint64_t salt = 0);

  // MarkDirty, Reserve, write every new pack's payload, record digests, Publish.
  Status Store(const NamespaceId& ns, std::span<const int32_t> tokens);
  // Looks up `tokens` and restores every record's bytes with digest verification and a
  // byte-for-byte comparison with PayloadByte. Returns the hit (0 on a miss).
  Result<uint64_t> Restore(const NamespaceId& ns, std::span<const int32_t> tokens);
  Status SaveClean();
};

std::vector<int32_t> Tokens(uint64_t n, int32_t first);

}  // namespace rangekv::testing
