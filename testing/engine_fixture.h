// Fixtures for the engine's end-to-end tests (library rangekv_engine_testing; linked by tests
// and test drivers only).
//
//   - SmallModel / SmallOptions: geometries with small stripes so the real pipeline runs with
//     real bytes in milliseconds, and pools sized for a 2-core CI machine.
//   - KvFixture: paged KV memory in the engine's device memory with a host mirror; fills token
//     rows with canonical bytes (a pure function of seed, layer, path position and token id)
//     through chosen slots, and compares them back bit for bit.
//   - StoreAll / RestoreAndVerify: drive one store / one restore through the public API.
//
// The file seams and the device the engine's tests inject are beside it in testing/:
// gate_env.h, jitter_env.h, payload_free_env.h, count_only_device.h.
//
// Thread-safety: the fixtures are used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rangekv/engine.h"
#include "rangekv/env.h"

namespace rangekv::testing {

// L layers of H kv heads x D elements of `dtype_bytes` (s = 2 x H x D x dtype_bytes), or MLA
// with `mla_latent` elements when non-zero.
ModelSpec SmallModel(uint32_t layers, uint32_t kv_heads, uint32_t head_size,
                     uint32_t dtype_bytes = 2, uint32_t block_size = 16, uint32_t mla_latent = 0);

// Host device (or CUDA when RANGEKV_TEST_DEVICE=cuda), posix I/O, small pools: 4 read banks (3
// prefetch), 2 read workers, 4 store banks, 2 group and 2 write workers, 4 restore and 4 store
// slots, `packs` packs of capacity.
EngineOptions SmallOptions(const std::string& dir, const ModelSpec& model, uint64_t stripe_bytes,
                           uint64_t packs = 16);

std::vector<int32_t> RandomTokens(size_t n, uint64_t seed);

// `n` distinct slots out of num_blocks * block_size, in random order.
std::vector<int64_t> RandomSlots(size_t n, uint64_t num_slots, uint64_t seed);

// `n` slots filling whole blocks in order (token i at offset i % B of its block), the blocks
// distinct and in random order: the mapping vLLM produces, and the one block-opaque layouts
// (kCpuBlock) require.
std::vector<int64_t> RandomBlockSlots(size_t n, uint64_t num_blocks, uint32_t block_size,
                                      uint64_t seed);

// Canonical bytes of one token row (layer l, path position t, token id) for `seed`.
void CanonicalRow(uint64_t seed, uint32_t layer, uint64_t position, int32_t token, uint8_t* row,
                  uint64_t row_bytes);

class KvFixture {
 public:
  // Allocates `num_blocks` blocks per layer in `layout` through the engine.
  static Result<std::unique_ptr<KvFixture>> Make(Engine& engine, KvCacheLayout layout,
                                                 uint64_t num_blocks);

  const PagedKv& kv() const { return kv_; }
  uint64_t num_slots() const { return kv_.num_blocks * engine_->geometry().block_size; }
  uint64_t layer_bytes() const { return layer_bytes_; }
  KvCacheLayout layout() const { return layout_; }
  // `n` slots for a transfer: RandomBlockSlots for block-opaque layouts, else RandomSlots.
  std::vector<int64_t> Slots(size_t n, uint64_t seed) const;

  // Every byte of every layer := `value` (on the device).
  Status Poison(uint8_t value);
  // For i in [0, slots.size()): the row of path token first + i goes to slots[i], every layer.
  Status Fill(std::span<const int32_t> tokens, uint64_t first, std::span<const int64_t> slots,
              uint64_t seed);
  // Number of (layer, token) rows among `layers` that differ from the canonical bytes.
  // `layers` empty means all. Reads the device memory back first unless `sync` is false (then
  // it compares the mirror of the last Sync()).
  Result<uint64_t> Mismatches(std::span<const int32_t> tokens, uint64_t first,
                              std::span<const int64_t> slots, uint64_t seed,
                              std::span<const uint32_t> layers = {}, bool sync = true);
  // True when the row of slot `slot` in `layer` still holds `value` in every byte (nothing
  // was delivered there). Uses the mirror from the last Mismatches()/Sync().
  bool RowIs(uint32_t layer, int64_t slot, uint8_t value) const;
  Status Sync();  // device -> mirror

 private:
  KvFixture() = default;
  Engine* engine_ = nullptr;
  PagedKv kv_;
  uint64_t layer_bytes_ = 0;
  KvCacheLayout layout_ = KvCacheLayout::kFlashAttnNhd;
  std::vector<std::vector<uint8_t>> mirror_;  // per layer
};

struct StoreResult {
  StoreOutcome outcome;
  EngineStats work;
};

// Fills a fresh region of `fixture` with the canonical rows of `tokens`, stores them (every
// layer produced, optionally on `producer`), and waits per `wait`.
Result<StoreResult> StoreAll(Engine& engine, KvFixture& fixture, std::span<const int32_t> tokens,
                             uint64_t seed, uint64_t slot_seed,
                             StoreWait wait = StoreWait::kUntilVisible,
                             DeviceStreamRef producer = {});

struct RestoreResult {
  LookupResult lookup;
  RestoreOutcome outcome;
  uint64_t mismatches = 0;  // delivered rows that differ from the stored bytes
  // Rows of failed tokens that hold neither their poison nor their own correct bytes: 0, except
  // where a digest failed on HostDevice, whose one-pass verify may leave the bytes read there.
  uint64_t poisoned_rows = 0;
  std::vector<int64_t> slots;
};

enum class WaitMode : uint8_t { kFinishOnly, kEveryLayer, kStreamEveryLayer };

// Lookup -> StartRestore -> BindSlots -> waits -> Finish, into a poisoned `fixture`, then
// verifies every delivered row bit for bit and that rows of failed tokens stayed poisoned.
Result<RestoreResult> RestoreAndVerify(Engine& engine, KvFixture& fixture,
                                       const RequestEnvelope& envelope,
                                       std::span<const int32_t> tokens, uint64_t granularity,
                                       uint64_t seed, uint64_t slot_seed,
                                       WaitMode wait = WaitMode::kFinishOnly);

RequestEnvelope Envelope(const std::string& request_id, uint32_t attempt = 0);

}  // namespace rangekv::testing
