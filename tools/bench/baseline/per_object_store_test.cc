#include "tools/bench/baseline/per_object_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "device/host_device.h"
#include "testing/temp_dir.h"

namespace rangekv::baseline {
namespace {

constexpr uint32_t kLayers = 10;  // more than kMaxGatherLayers: a chunk object needs 2 gathers
constexpr uint32_t kHeads = 4;
constexpr uint32_t kHeadSize = 8;
constexpr uint32_t kBlockSize = 16;
constexpr uint32_t kBlocks = 16;
constexpr uint64_t kPathTokens = 100;

Geometry SmallGeometry() {
  ModelSpec spec;
  spec.model_id = "test";
  spec.layers = kLayers;
  spec.kv_heads = kHeads;
  spec.head_size = kHeadSize;
  spec.dtype_bytes = 2;
  spec.block_size = kBlockSize;
  Result<Geometry> g = DeriveGeometry(spec, 64 * 1024);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

// Paged KV of kLayers layers in one device buffer, plus a slot mapping for the path.
struct PagedKvFixture {
  DeviceBuffer memory;
  std::vector<kernels::PagedKvView> views;
  std::vector<int64_t> slots;

  PagedKvFixture(Device& device, uint32_t seed) {
    const kernels::PagedShape shape{kBlocks, kBlockSize, kHeads, kHeadSize, 2};
    const uint64_t layer_bytes =
        *kernels::PagedLayerBytes(kernels::PagedLayout::kFlashAttnNhd, shape);
    memory = device.AllocateDevice(layer_bytes * kLayers).value();
    for (uint32_t l = 0; l < kLayers; ++l) {
      views.push_back(*kernels::MakePagedKvView(kernels::PagedLayout::kFlashAttnNhd, shape,
                                                memory.bytes() + l * layer_bytes));
    }
    std::vector<int64_t> all(kBlocks * kBlockSize);
    std::iota(all.begin(), all.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kPathTokens);
  }
  void Fill(uint32_t seed) {
    std::mt19937_64 rng(seed);
    uint64_t* w = reinterpret_cast<uint64_t*>(memory.bytes());
    for (uint64_t i = 0; i < memory.size_bytes() / 8; ++i) w[i] = rng();
  }
  void Zero() { std::memset(memory.bytes(), 0, memory.size_bytes()); }
  PagedKvLayers layers() const { return {views, slots}; }
  const uint8_t* Head(uint32_t layer, uint32_t plane, uint64_t token, uint32_t head) const {
    const int64_t slot = slots[token];
    return views[layer].HeadAddress(plane, static_cast<uint32_t>(slot / kBlockSize),
                                    static_cast<uint32_t>(slot % kBlockSize), head);
  }
};

// Tokens [begin, end) of every layer hold the same bytes in both (through their own slots).
void ExpectSameKv(const PagedKvFixture& a, const PagedKvFixture& b, uint64_t begin, uint64_t end) {
  const uint32_t head_bytes = kHeadSize * 2;
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint64_t t = begin; t < end; ++t) {
      for (uint32_t p = 0; p < 2; ++p) {
        for (uint32_t h = 0; h < kHeads; ++h) {
          ASSERT_EQ(std::memcmp(a.Head(l, p, t, h), b.Head(l, p, t, h), head_bytes), 0)
              << "layer " << l << " token " << t << " plane " << p << " head " << h;
        }
      }
    }
  }
}

class PerObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    geometry_ = SmallGeometry();
    device_ = CreateHostDevice().value();
    source_ = std::make_unique<PagedKvFixture>(*device_, 1);
    target_ = std::make_unique<PagedKvFixture>(*device_, 2);
    source_->Fill(7);
    tokens_.resize(kPathTokens);
    for (uint64_t i = 0; i < kPathTokens; ++i) tokens_[i] = static_cast<int32_t>(1000 + i * 7);
    PerObjectOptions o;
    o.dir = dir_.Join("po");
    o.geometry = geometry_;
    o.device = device_.get();
    o.file_bytes = 64ull << 20;
    o.pool_bytes = 16ull << 20;
    o.max_tokens = kPathTokens;
    Result<std::unique_ptr<PerObjectStore>> store = PerObjectStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  void RoundTrip(const ObjectNaming& naming) {
    const uint64_t n = naming.count();
    PerObjectStoreReport put = store_->Put(tokens_, naming, source_->layers());
    ASSERT_TRUE(put.status.ok()) << put.status.ToString();
    EXPECT_EQ(put.objects, n);
    EXPECT_EQ(put.work.keys_built, n);
    EXPECT_EQ(put.work.payload_allocations, n);
    EXPECT_EQ(put.work.gather_launches, n);
    EXPECT_EQ(put.work.native_writes, n);
    EXPECT_EQ(put.work.index_records, n);
    const uint64_t launches_per_object =
        naming.shape == ObjectShape::kChunk
            ? (kLayers + kernels::kMaxGatherLayers - 1) / kernels::kMaxGatherLayers
            : 1;
    EXPECT_EQ(put.work.kernel_launches, n * launches_per_object);

    target_->Zero();
    PerObjectRestoreReport get = store_->Get(tokens_, naming, target_->layers());
    ASSERT_TRUE(get.status.ok()) << get.status.ToString();
    EXPECT_EQ(get.objects, n);
    EXPECT_EQ(get.work.keys_built, n);
    EXPECT_EQ(get.work.index_probes, n);
    EXPECT_EQ(get.work.records_selected, n);
    EXPECT_EQ(get.work.payload_allocations, n);
    EXPECT_EQ(get.work.native_reads, n);
    EXPECT_EQ(get.work.scatter_launches, n);
    EXPECT_EQ(get.work.kernel_launches, naming.shape == ObjectShape::kChunk ? n * kLayers : n);
    EXPECT_EQ(get.work.ready_events, naming.shape == ObjectShape::kChunk ? 1u : kLayers);
    EXPECT_EQ(get.work.bytes_read,
              PerObjectStore::FootprintBytes(naming, store_->alignment_bytes()));
    EXPECT_LE(get.first_layer_ready_ns, get.last_layer_ready_ns);
    ExpectSameKv(*source_, *target_, naming.first_token, naming.first_token + naming.tokens);
  }

  testing::TempDir dir_;
  Geometry geometry_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<PagedKvFixture> source_;
  std::unique_ptr<PagedKvFixture> target_;
  std::vector<int32_t> tokens_;
  std::unique_ptr<PerObjectStore> store_;
};

TEST_F(PerObjectStoreTest, ChunkObjectsRoundTrip) {
  RoundTrip(*MakeObjectNaming(geometry_, ObjectShape::kChunk, 0, kPathTokens, 7));
}

TEST_F(PerObjectStoreTest, LayerObjectsRoundTrip) {
  RoundTrip(*MakeObjectNaming(geometry_, ObjectShape::kChunkLayer, 0, kPathTokens, 5));
}

TEST_F(PerObjectStoreTest, SlicedObjectsRoundTrip) {
  RoundTrip(*MakeObjectNaming(geometry_, ObjectShape::kChunkLayerSlice, 0, kPathTokens, 3, 2));
}

TEST_F(PerObjectStoreTest, SuffixRangeRoundTripsAndLeavesOtherTokensAlone) {
  const ObjectNaming suffix = *MakeObjectNaming(geometry_, ObjectShape::kChunk, 60, 40, 4);
  RoundTrip(suffix);
  // Tokens before the suffix were not written into the target.
  const uint8_t zeros[kHeadSize * 2] = {};
  EXPECT_EQ(std::memcmp(target_->Head(0, 0, 0, 0), zeros, sizeof(zeros)), 0);
}

TEST_F(PerObjectStoreTest, StoringTwiceSkipsIndexedObjects) {
  const ObjectNaming n = *MakeObjectNaming(geometry_, ObjectShape::kChunk, 0, kPathTokens, 5);
  ASSERT_TRUE(store_->Put(tokens_, n, source_->layers()).status.ok());
  PerObjectStoreReport again = store_->Put(tokens_, n, source_->layers());
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.objects, 0u);
  EXPECT_EQ(again.work.native_writes, 0u);
  EXPECT_EQ(again.work.index_probes, 5u);
}

TEST_F(PerObjectStoreTest, MissingObjectsFailWithoutTransfers) {
  const ObjectNaming stored = *MakeObjectNaming(geometry_, ObjectShape::kChunk, 0, kPathTokens, 5);
  ASSERT_TRUE(store_->Put(tokens_, stored, source_->layers()).status.ok());
  // Another chunking names other keys.
  const ObjectNaming other = *MakeObjectNaming(geometry_, ObjectShape::kChunk, 0, kPathTokens, 4);
  PerObjectRestoreReport get = store_->Get(tokens_, other, target_->layers());
  EXPECT_EQ(get.status.code(), StatusCode::kNotFound);
  EXPECT_EQ(get.work.native_reads, 0u);
  EXPECT_EQ(get.work.scatter_launches, 0u);
  // Other tokens name other keys too (the chain covers the prefix).
  std::vector<int32_t> changed = tokens_;
  changed[0] += 1;
  get = store_->Get(changed, stored, target_->layers());
  EXPECT_EQ(get.status.code(), StatusCode::kNotFound);
  // Clear forgets everything.
  store_->Clear();
  get = store_->Get(tokens_, stored, target_->layers());
  EXPECT_EQ(get.status.code(), StatusCode::kNotFound);
}

TEST_F(PerObjectStoreTest, RejectsBadCalls) {
  const ObjectNaming n = *MakeObjectNaming(geometry_, ObjectShape::kChunk, 0, kPathTokens, 5);
  std::vector<kernels::PagedKvView> fewer(source_->views.begin(), source_->views.end() - 1);
  PagedKvLayers bad{fewer, source_->slots};
  EXPECT_EQ(store_->Put(tokens_, n, bad).status.code(), StatusCode::kInvalidArgument);
  std::span<const int32_t> short_path(tokens_.data(), 50);
  EXPECT_EQ(store_->Put(short_path, n, source_->layers()).status.code(),
            StatusCode::kInvalidArgument);
}

TEST_F(PerObjectStoreTest, PoolTooSmallIsResourceExhausted) {
  PerObjectOptions o;
  o.dir = dir_.Join("small");
  o.geometry = geometry_;
  o.device = device_.get();
  o.file_bytes = 1ull << 20;
  o.pool_bytes = 8192;  // two objects of <= 4 KiB
  o.max_tokens = kPathTokens;
  auto small = PerObjectStore::Open(o).value();
  const ObjectNaming n = *MakeObjectNaming(geometry_, ObjectShape::kChunkLayer, 0, kPathTokens, 5);
  // Each (chunk, layer) object is 20 tokens x 128 bytes = 2.5 KiB -> 4 KiB; the pool holds 2.
  // Put frees each object after its write, but allocates all before writing (as the stock
  // store extracts everything first).
  EXPECT_EQ(small->Put(tokens_, n, source_->layers()).status.code(),
            StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace rangekv::baseline
