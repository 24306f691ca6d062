// The payload every transfer benchmark moves, and the paged KV memory it lands in.
//
// Payload pattern: 64-bit word i of the row of (layer, path token) is
//   base + i * 0x9E3779B97F4A7C15, base = Hash64({seed, layer, token}),
// so every row, and every word of it, is distinct: a misplaced or stale head vector fails.
//
// Thread-safety: PatternRows and ParallelFor are stateless; a PagedKvSpace is used by one
// thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "device/device.h"
#include "kernels/paged_kv.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"
#include "rangekv/transfer.h"
#include "tools/bench/baseline/per_object_store.h"

namespace rangekv::tools {

// Writes rows [token_begin, token_begin + tokens) of `layer` (token_bytes each, a multiple of
// 8) to `out`.
void PatternRows(uint64_t seed, uint32_t layer, uint64_t token_begin, uint64_t tokens,
                 uint64_t token_bytes, uint8_t* out);

// Runs fn(begin, end) over [0, n) split across up to 8 helper threads (the verification and
// fill work around the timed regions).
void ParallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& fn);

// Paged KV memory for `tokens` path tokens of every layer on a device, in vLLM's FlashAttention
// NHD layout, with a slot mapping that places the tokens in shuffled blocks (a serving engine's
// block table is arbitrary).
class PagedKvSpace {
 public:
  static Result<std::unique_ptr<PagedKvSpace>> Make(Device& device, const Geometry& geometry,
                                                    uint64_t tokens, uint64_t seed);
  ~PagedKvSpace();

  uint64_t tokens() const { return slots_.size(); }
  const std::vector<int64_t>& slots() const { return slots_; }
  const std::vector<kernels::PagedKvView>& views() const { return views_; }
  // The engine's description of the same memory.
  const PagedKv& engine_kv() const { return engine_kv_; }
  baseline::PagedKvLayers baseline_kv() const { return {views_, slots_}; }

  // Writes the pattern of `seed` for path tokens [begin, end) of every layer.
  Status Fill(uint64_t seed, uint64_t begin, uint64_t end);
  // Overwrites all of the memory with a poison byte.
  Status Poison();
  // Counts the (layer, token) rows in [begin, end) whose bytes differ from the pattern.
  Result<uint64_t> CountMismatches(uint64_t seed, uint64_t begin, uint64_t end);

 private:
  PagedKvSpace() = default;
  template <typename Fn>
  Status ForEachLayer(bool write_back, Fn&& fn);

  Device* device_ = nullptr;
  Geometry geometry_;
  kernels::PagedShape shape_;
  uint64_t layer_bytes_ = 0;
  DeviceBuffer memory_;
  PinnedHostBuffer host_image_;  // one layer, when device memory is not host-accessible
  std::unique_ptr<Stream> stream_;
  std::vector<kernels::PagedKvView> views_;
  std::vector<int64_t> slots_;
  PagedKv engine_kv_;
};

}  // namespace rangekv::tools
