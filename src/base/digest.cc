#include "base/digest.h"

#include <xxhash.h>

#include "base/check.h"

namespace rangekv {

uint64_t Hash64(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
}

Digest128 Hash128(const void* data, size_t size, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Digest128{h.low64, h.high64};
}

Hasher64::Hasher64(uint64_t seed) : state_(XXH3_createState()) {
  RANGEKV_CHECK(state_ != nullptr);
  XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed);
}

Hasher64::~Hasher64() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher64::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Hasher64::Finish() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }

}  // namespace rangekv
