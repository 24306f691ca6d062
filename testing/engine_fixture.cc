#include "testing/engine_fixture.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string_view>

#include "base/check.h"
#include "engine/paged_views.h"
#include "kernels/paged_kv.h"
#include "testing/engine_internals.h"
#include "testing/split_mix.h"

namespace rangekv::testing {

namespace {

kernels::PagedShape ShapeOf(const Geometry& g, uint64_t num_blocks) {
  kernels::PagedShape shape;
  shape.num_blocks = static_cast<uint32_t>(num_blocks);
  shape.block_size = g.block_size;
  shape.num_heads = g.is_mla() ? 1 : g.kv_heads_per_rank;
  shape.head_size = g.is_mla() ? g.mla_latent_size : g.head_size;
  shape.elem_bytes = g.dtype_bytes;
  return shape;
}

// Writes (or, with `compare`, compares) one row at `slot` of a host view.
bool RowAt(const kernels::PagedKvView& v, int64_t slot, uint8_t* row, bool compare) {
  const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
  const uint32_t off = static_cast<uint32_t>(slot % v.block_size);
  for (uint32_t p = 0; p < v.num_planes; ++p) {
    for (uint32_t h = 0; h < v.num_heads; ++h) {
      uint8_t* dst = v.HeadAddress(p, block, off, h);
      uint8_t* src = row + p * v.plane_token_bytes() + uint64_t{h} * v.head_bytes;
      if (compare) {
        if (std::memcmp(dst, src, v.head_bytes) != 0) return false;
      } else {
        std::memcpy(dst, src, v.head_bytes);
      }
    }
  }
  return true;
}

}  // namespace

ModelSpec SmallModel(uint32_t layers, uint32_t kv_heads, uint32_t head_size, uint32_t dtype_bytes,
                     uint32_t block_size, uint32_t mla_latent) {
  ModelSpec m;
  m.model_id = "test/small";
  m.revision = "r1";
  m.kv_dtype = dtype_bytes == 1 ? "fp8" : "bf16";
  m.dtype_bytes = dtype_bytes;
  m.layers = layers;
  m.kv_heads = kv_heads;
  m.head_size = head_size;
  m.mla_latent_size = mla_latent;
  m.block_size = block_size;
  if (mla_latent != 0) m.layout = KvCacheLayout::kMla;
  return m;
}

EngineOptions SmallOptions(const std::string& dir, const ModelSpec& model, uint64_t stripe_bytes,
                           uint64_t packs) {
  EngineOptions o;
  o.store_dir = dir;
  o.model = model;
  o.stripe_bytes = stripe_bytes;
  o.capacity_bytes = packs * stripe_bytes * model.layers;
  // RANGEKV_TEST_DEVICE=cuda runs the same end-to-end tests on a real GPU (scripts/gpu/run.sh);
  // read once here, at the test edge, never inside the engine.
  const char* device = std::getenv("RANGEKV_TEST_DEVICE");
  o.device = device != nullptr && std::string_view(device) == "cuda" ? DeviceSelection::kCuda
                                                                     : DeviceSelection::kHost;
  o.io_engine = IoEngineSelection::kPosix;
  // Deterministic native call counts and no probe file per Open; the split tests opt in.
  o.tuning.io_split_bytes = kIoSplitOff;
  o.tuning.read_banks = 4;
  o.tuning.prefetch_banks = 3;
  o.tuning.read_workers = 2;
  o.tuning.lookahead_layers = 2;
  o.tuning.max_inflight_restores = 4;
  o.tuning.store_banks = 4;
  o.tuning.group_workers = 2;
  o.tuning.write_workers = 2;
  o.tuning.layer_group = std::min<uint32_t>(4, model.layers);
  o.tuning.max_inflight_stores = 4;
  o.max_request_tokens = 1 << 17;
  return o;
}

std::vector<int32_t> RandomTokens(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed;
  for (auto& v : t) v = static_cast<int32_t>(SplitMix(x) % 128000);
  return t;
}

std::vector<int64_t> RandomSlots(size_t n, uint64_t num_slots, uint64_t seed) {
  RANGEKV_CHECK(n <= num_slots);
  std::vector<int64_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  // Partial Fisher-Yates: the first n entries are a random distinct sample in random order.
  for (size_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<size_t> d(i, num_slots - 1);
    std::swap(all[i], all[d(rng)]);
  }
  all.resize(n);
  return all;
}

void CanonicalRow(uint64_t seed, uint32_t layer, uint64_t position, int32_t token, uint8_t* row,
                  uint64_t row_bytes) {
  uint64_t x = seed ^ (uint64_t{layer} << 48) ^ (position * 0x100000001B3ull) ^
               (static_cast<uint64_t>(static_cast<uint32_t>(token)) << 20);
  for (uint64_t i = 0; i < row_bytes; i += 8) {
    const uint64_t v = SplitMix(x);
    std::memcpy(row + i, &v, std::min<uint64_t>(8, row_bytes - i));
  }
}

std::vector<int64_t> RandomBlockSlots(size_t n, uint64_t num_blocks, uint32_t block_size,
                                      uint64_t seed) {
  const uint64_t blocks_needed = (n + block_size - 1) / block_size;
  RANGEKV_CHECK(blocks_needed <= num_blocks);
  const std::vector<int64_t> blocks = RandomSlots(blocks_needed, num_blocks, seed);
  std::vector<int64_t> slots(n);
  for (size_t i = 0; i < n; ++i) {
    slots[i] = blocks[i / block_size] * block_size + static_cast<int64_t>(i % block_size);
  }
  return slots;
}

// ---- KvFixture ----------------------------------------------------------------------------

std::vector<int64_t> KvFixture::Slots(size_t n, uint64_t seed) const {
  const uint32_t b = engine_->geometry().block_size;
  if (IsBlockOpaque(layout_)) return RandomBlockSlots(n, kv_.num_blocks, b, seed);
  return RandomSlots(n, num_slots(), seed);
}

Result<std::unique_ptr<KvFixture>> KvFixture::Make(Engine& engine, KvCacheLayout layout,
                                                   uint64_t num_blocks) {
  std::unique_ptr<KvFixture> f(new KvFixture());
  f->engine_ = &engine;
  f->layout_ = layout;
  const Geometry& g = engine.geometry();
  RANGEKV_ASSIGN_OR_RETURN(
      f->layer_bytes_,
      kernels::PagedLayerBytes(engine_internal::ToKernelLayout(layout), ShapeOf(g, num_blocks)));
  f->kv_.layout = layout;
  f->kv_.num_blocks = num_blocks;
  for (uint32_t l = 0; l < g.layers; ++l) {
    RANGEKV_ASSIGN_OR_RETURN(void* p, AllocateDeviceMemory(engine, f->layer_bytes_));
    f->kv_.layer_base.push_back(p);
    f->mirror_.emplace_back(f->layer_bytes_, 0);
  }
  return f;
}

Status KvFixture::Sync() {
  for (size_t l = 0; l < mirror_.size(); ++l) {
    RANGEKV_RETURN_IF_ERROR(
        CopyToHost(*engine_, mirror_[l].data(), kv_.layer_base[l], layer_bytes_));
  }
  return OkStatus();
}

Status KvFixture::Poison(uint8_t value) {
  for (size_t l = 0; l < mirror_.size(); ++l) {
    std::fill(mirror_[l].begin(), mirror_[l].end(), value);
    RANGEKV_RETURN_IF_ERROR(
        CopyToDevice(*engine_, kv_.layer_base[l], mirror_[l].data(), layer_bytes_));
  }
  return OkStatus();
}

Status KvFixture::Fill(std::span<const int32_t> tokens, uint64_t first,
                       std::span<const int64_t> slots, uint64_t seed) {
  RANGEKV_RETURN_IF_ERROR(Sync());
  const Geometry& g = engine_->geometry();
  std::vector<uint8_t> row(g.token_bytes);
  for (uint32_t l = 0; l < g.layers; ++l) {
    RANGEKV_ASSIGN_OR_RETURN(
        auto view, kernels::MakePagedKvView(engine_internal::ToKernelLayout(layout_),
                                            ShapeOf(g, kv_.num_blocks), mirror_[l].data()));
    for (size_t i = 0; i < slots.size(); ++i) {
      CanonicalRow(seed, l, first + i, tokens[first + i], row.data(), row.size());
      RowAt(view, slots[i], row.data(), /*compare=*/false);
    }
    RANGEKV_RETURN_IF_ERROR(
        CopyToDevice(*engine_, kv_.layer_base[l], mirror_[l].data(), layer_bytes_));
  }
  return OkStatus();
}

Result<uint64_t> KvFixture::Mismatches(std::span<const int32_t> tokens, uint64_t first,
                                       std::span<const int64_t> slots, uint64_t seed,
                                       std::span<const uint32_t> layers, bool sync) {
  if (sync) RANGEKV_RETURN_IF_ERROR(Sync());
  const Geometry& g = engine_->geometry();
  std::vector<uint32_t> all;
  if (layers.empty()) {
    all.resize(g.layers);
    std::iota(all.begin(), all.end(), 0);
    layers = all;
  }
  std::vector<uint8_t> row(g.token_bytes);
  uint64_t bad = 0;
  for (uint32_t l : layers) {
    RANGEKV_ASSIGN_OR_RETURN(
        auto view, kernels::MakePagedKvView(engine_internal::ToKernelLayout(layout_),
                                            ShapeOf(g, kv_.num_blocks), mirror_[l].data()));
    for (size_t i = 0; i < slots.size(); ++i) {
      CanonicalRow(seed, l, first + i, tokens[first + i], row.data(), row.size());
      if (!RowAt(view, slots[i], row.data(), /*compare=*/true)) ++bad;
    }
  }
  return bad;
}

bool KvFixture::RowIs(uint32_t layer, int64_t slot, uint8_t value) const {
  const Geometry& g = engine_->geometry();
  auto view =
      kernels::MakePagedKvView(engine_internal::ToKernelLayout(layout_), ShapeOf(g, kv_.num_blocks),
                               const_cast<uint8_t*>(mirror_[layer].data()));
  if (!view.ok()) return false;
  std::vector<uint8_t> row(g.token_bytes, value);
  return RowAt(*view, slot, row.data(), /*compare=*/true);
}

// ---- store and restore drivers ------------------------------------------------------------

RequestEnvelope Envelope(const std::string& request_id, uint32_t attempt) {
  RequestEnvelope e;
  e.request_id = request_id;
  e.session_id = 7;
  e.attempt = attempt;
  e.rank = 0;
  return e;
}

Result<StoreResult> StoreAll(Engine& engine, KvFixture& fixture, std::span<const int32_t> tokens,
                             uint64_t seed, uint64_t slot_seed, StoreWait wait,
                             DeviceStreamRef producer) {
  const std::vector<int64_t> slots = fixture.Slots(tokens.size(), slot_seed);
  RANGEKV_RETURN_IF_ERROR(fixture.Fill(tokens, 0, slots, seed));
  StoreRequest req;
  req.envelope = Envelope("store-" + std::to_string(slot_seed));
  req.tokens = tokens;
  req.kv = &fixture.kv();
  req.slot_mapping = slots;
  RANGEKV_ASSIGN_OR_RETURN(StoreHandle handle, engine.BeginStore(req));
  for (uint32_t l = 0; l < engine.geometry().layers; ++l) {
    RANGEKV_RETURN_IF_ERROR(handle.LayerProduced(l, producer));
  }
  StoreResult r;
  r.outcome = handle.Finish(wait);
  r.work = r.outcome.work;
  return r;
}

Result<RestoreResult> RestoreAndVerify(Engine& engine, KvFixture& fixture,
                                       const RequestEnvelope& envelope,
                                       std::span<const int32_t> tokens, uint64_t granularity,
                                       uint64_t seed, uint64_t slot_seed, WaitMode wait) {
  RestoreResult r;
  RANGEKV_ASSIGN_OR_RETURN(r.lookup, engine.Lookup(envelope, tokens, granularity));
  if (r.lookup.hit_tokens == 0) return r;
  RANGEKV_RETURN_IF_ERROR(fixture.Poison(0xA5));
  RestoreRequest req;
  req.ticket = r.lookup.ticket;
  req.envelope = envelope;
  req.tokens = tokens;
  req.endpoint_tokens = r.lookup.hit_tokens;
  RANGEKV_ASSIGN_OR_RETURN(RestoreHandle handle, engine.StartRestore(req));
  r.slots = fixture.Slots(r.lookup.hit_tokens, slot_seed);
  RANGEKV_RETURN_IF_ERROR(handle.BindSlots(fixture.kv(), r.slots));
  const uint32_t layers = engine.geometry().layers;
  if (wait == WaitMode::kEveryLayer) {
    for (uint32_t l = 0; l < layers; ++l) handle.WaitLayer(l).IgnoreError();  // see outcome
  } else if (wait == WaitMode::kStreamEveryLayer) {
    RANGEKV_ASSIGN_OR_RETURN(DeviceStreamRef stream, engine.CreateStream());
    for (uint32_t l = 0; l < layers; ++l) {
      // The event path (CUDA) returns the layer's error as WaitLayer does; the flag path (host)
      // returns OK. Either way the failed tokens are in the outcome, checked below.
      Status s = handle.StreamWaitLayer(l, stream);
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition) {
        return s;
      }
    }
    RANGEKV_RETURN_IF_ERROR(engine.SynchronizeStream(stream));
  }
  r.outcome = handle.Finish();
  // Verify: delivered tokens bit for bit, failed tokens untouched (still poisoned).
  std::vector<uint8_t> failed(r.lookup.hit_tokens, 0);
  for (const TokenInterval& t : r.outcome.failed) {
    for (uint64_t i = t.begin; i < t.end; ++i) failed[i] = 1;
  }
  RANGEKV_RETURN_IF_ERROR(fixture.Sync());
  // Compare through the fixture in runs of delivered tokens.
  uint64_t i = 0;
  while (i < r.lookup.hit_tokens) {
    uint64_t j = i;
    while (j < r.lookup.hit_tokens && failed[j] == failed[i]) ++j;
    if (!failed[i]) {
      RANGEKV_ASSIGN_OR_RETURN(
          uint64_t bad,
          fixture.Mismatches(tokens, i, std::span<const int64_t>(r.slots).subspan(i, j - i), seed,
                             {}, /*sync=*/false));
      r.mismatches += bad;
    } else {
      // A token that failed in any layer may still have received correct bytes in the layers
      // that were read; none may hold anything but its poison or its own correct bytes.
      for (uint64_t k = i; k < j; ++k) {
        for (uint32_t l = 0; l < layers; ++l) {
          if (fixture.RowIs(l, r.slots[k], 0xA5)) continue;
          const std::array<uint32_t, 1> one{l};
          RANGEKV_ASSIGN_OR_RETURN(
              uint64_t bad,
              fixture.Mismatches(tokens, k, std::span<const int64_t>(r.slots).subspan(k, 1), seed,
                                 one, /*sync=*/false));
          r.poisoned_rows += bad;
        }
      }
    }
    i = j;
  }
  return r;
}

}  // namespace rangekv::testing
