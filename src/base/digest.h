// Content digests. XXH3 (Debian's libxxhash) is used for everything that needs a fast,
// well-distributed hash of bytes: namespace ids, token digests, span payload digests,
// snapshot and header checksums. It is not a cryptographic MAC: it protects against
// corruption and accidents, not against an adversary who can write the store's files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace rangekv {

struct Digest128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Digest128&, const Digest128&) = default;
};

uint64_t Hash64(const void* data, size_t size, uint64_t seed = 0);
Digest128 Hash128(const void* data, size_t size, uint64_t seed = 0);

// Incremental 64-bit hasher (XXH3 streaming state), for digests over discontiguous pieces.
class Hasher64 {
 public:
  explicit Hasher64(uint64_t seed = 0);
  ~Hasher64();
  Hasher64(const Hasher64&) = delete;
  Hasher64& operator=(const Hasher64&) = delete;
  void Update(const void* data, size_t size);
  void UpdateU64(uint64_t v) { Update(&v, sizeof(v)); }
  void UpdateString(std::string_view s) {
    UpdateU64(s.size());
    Update(s.data(), s.size());
  }
  uint64_t Finish() const;

 private:
  void* state_;  // XXH3_state_t*, kept opaque so xxhash.h stays out of our headers
};

}  // namespace rangekv
