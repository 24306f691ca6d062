// A program that uses RangeKV the way an integration does: only the installed public headers
// (include/rangekv/) and rangekv::rangekv. It stores the KV of a 64-token prompt, looks the
// prompt up again and restores the hit prefix into a second paged KV cache, then checks every
// restored byte. On the host device (DeviceSelection::kHost) device memory is host memory, so
// the paged KV caches are plain aligned host buffers.
//   consumer STORE_DIR     exit 0 on a bit-exact round trip
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rangekv/engine.h"

namespace {

int Fail(const std::string& what, const rangekv::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace rangekv;
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer STORE_DIR\n");
    return 2;
  }
  constexpr uint32_t kLayers = 4, kHeads = 2, kHeadSize = 16, kDtypeBytes = 2, kBlock = 16;
  constexpr uint64_t kBlocks = 8, kTokens = 64, kGranularity = 16;
  constexpr uint64_t kRowBytes = uint64_t{kHeads} * kHeadSize * kDtypeBytes;  // one K or V row
  constexpr uint64_t kPlaneBytes = kBlocks * kBlock * kRowBytes;
  constexpr uint64_t kLayerBytes = 2 * kPlaneBytes;  // FlashAttention NHD: [2, blocks, B, H, D]

  EngineOptions o;
  o.store_dir = argv[1];
  o.model.model_id = "consumer/tiny";
  o.model.revision = "r1";
  o.model.layers = kLayers;
  o.model.kv_heads = kHeads;
  o.model.head_size = kHeadSize;
  o.model.dtype_bytes = kDtypeBytes;
  o.model.block_size = kBlock;
  o.stripe_bytes = 4096;
  o.capacity_bytes = 16 * o.stripe_bytes * kLayers;
  o.device = DeviceSelection::kHost;
  o.io_engine = IoEngineSelection::kPosix;
  o.tuning.read_banks = 4;
  o.tuning.prefetch_banks = 3;
  o.tuning.read_workers = 2;
  o.tuning.store_banks = 2;
  o.tuning.group_workers = 2;
  o.tuning.write_workers = 2;
  o.tuning.max_inflight_restores = 2;
  o.tuning.max_inflight_stores = 2;
  o.max_request_tokens = 1024;
  Result<std::unique_ptr<Engine>> opened = Engine::Open(o);
  if (!opened.ok()) return Fail("Engine::Open", opened.status());
  Engine& engine = **opened;

  // Two paged KV caches (source and destination), plain 4 KiB-aligned host memory.
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> memory;
  auto make_kv = [&](uint8_t fill) {
    PagedKv kv;
    kv.layout = KvCacheLayout::kFlashAttnNhd;
    kv.num_blocks = kBlocks;
    for (uint32_t l = 0; l < kLayers; ++l) {
      auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, kLayerBytes));
      std::memset(p, fill, kLayerBytes);
      memory.emplace_back(p);
      kv.layer_base.push_back(p);
    }
    return kv;
  };
  PagedKv src = make_kv(0);
  PagedKv dst = make_kv(0xEE);
  for (uint32_t l = 0; l < kLayers; ++l) {
    auto* p = static_cast<uint8_t*>(src.layer_base[l]);
    for (uint64_t i = 0; i < kLayerBytes; ++i) p[i] = static_cast<uint8_t>(i * 31 + l * 7 + 1);
  }

  std::vector<int32_t> tokens(kTokens);
  for (uint64_t i = 0; i < kTokens; ++i) tokens[i] = static_cast<int32_t>(1000 + i * 3);
  std::vector<int64_t> src_slots(kTokens);
  for (uint64_t i = 0; i < kTokens; ++i) src_slots[i] = static_cast<int64_t>(i);

  RequestEnvelope writer{.request_id = "store-1"};
  StoreRequest sr{.envelope = writer, .tokens = tokens, .kv = &src, .slot_mapping = src_slots};
  Result<StoreHandle> store = engine.BeginStore(sr);
  if (!store.ok()) return Fail("BeginStore", store.status());
  for (uint32_t l = 0; l < kLayers; ++l) {
    Status s = store->LayerProduced(l);
    if (!s.ok()) return Fail("LayerProduced", s);
  }
  StoreOutcome stored = store->Finish();
  if (!stored.status.ok() || !stored.visible) return Fail("store Finish", stored.status);

  RequestEnvelope reader{.request_id = "restore-1"};
  Result<LookupResult> hit = engine.Lookup(reader, tokens, kGranularity);
  if (!hit.ok()) return Fail("Lookup", hit.status());
  if (hit->hit_tokens != kTokens - kGranularity) {
    std::fprintf(stderr, "consumer: hit %llu tokens, expected %llu\n",
                 static_cast<unsigned long long>(hit->hit_tokens),
                 static_cast<unsigned long long>(kTokens - kGranularity));
    return 1;
  }
  // Restore into other slots: token i goes to slot (hit - 1 - i), reversed.
  std::vector<int64_t> dst_slots(hit->hit_tokens);
  for (uint64_t i = 0; i < hit->hit_tokens; ++i) {
    dst_slots[i] = static_cast<int64_t>(hit->hit_tokens - 1 - i);
  }
  RestoreRequest rr{.ticket = hit->ticket,
                    .envelope = reader,
                    .tokens = tokens,
                    .endpoint_tokens = hit->hit_tokens};
  Result<RestoreHandle> restore = engine.StartRestore(rr);
  if (!restore.ok()) return Fail("StartRestore", restore.status());
  if (Status s = restore->BindSlots(dst, dst_slots); !s.ok()) return Fail("BindSlots", s);
  for (uint32_t l = 0; l < kLayers; ++l) {
    if (Status s = restore->WaitLayer(l); !s.ok()) return Fail("WaitLayer", s);
  }
  RestoreOutcome restored = restore->Finish();
  if (!restored.status.ok() || restored.delivered_tokens != hit->hit_tokens) {
    return Fail("restore Finish", restored.status);
  }

  uint64_t mismatches = 0;
  for (uint32_t l = 0; l < kLayers; ++l) {
    const auto* a = static_cast<const uint8_t*>(src.layer_base[l]);
    const auto* b = static_cast<const uint8_t*>(dst.layer_base[l]);
    for (uint64_t plane = 0; plane < 2; ++plane) {
      for (uint64_t i = 0; i < hit->hit_tokens; ++i) {
        const uint64_t from = plane * kPlaneBytes + static_cast<uint64_t>(src_slots[i]) * kRowBytes;
        const uint64_t to = plane * kPlaneBytes + static_cast<uint64_t>(dst_slots[i]) * kRowBytes;
        if (std::memcmp(a + from, b + to, kRowBytes) != 0) ++mismatches;
      }
    }
  }
  if (Status s = engine.Close(); !s.ok()) return Fail("Close", s);
  if (mismatches != 0) {
    std::fprintf(stderr, "consumer: %llu restored rows differ\n",
                 static_cast<unsigned long long>(mismatches));
    return 1;
  }
  std::printf("consumer: %llu tokens x %u layers stored and restored bit-exact (%s)\n",
              static_cast<unsigned long long>(hit->hit_tokens), kLayers,
              engine.DescribeBackends().c_str());
  return 0;
}
