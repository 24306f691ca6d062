// The paper's Table 2 (and section 3.1's running example) as a test: a 49,152-token cached
// prefix of Llama-3.1-8B (6 packs, 6 GiB) restored, and its 16,128-token suffix (2016 MiB)
// stored, must cost
//   restore: 6 records selected, 192 native reads, 192 scatter launches, 32 readiness events,
//            0 payload allocations;
//   store:   64 native writes, 8 gathers, 8 store bank acquisitions;
// whether the prefix is named as 192, 768, 3,072 or 6,144 logical objects, layerwise, or as
// 327,680 objects. The counters come from the real pipeline: every lookup, claim, plan, bank
// acquisition, read submission, scatter launch, readiness record, gather and write below runs
// through the engine's code.
//
// Two configurations:
//   - FullGeometry: the real 8B geometry (W = 32 MiB, 1 GiB packs, the paper's default pools)
//     with a payload-free file seam and a device whose kernels validate and move nothing, so
//     6 GiB "move" in milliseconds and no payload memory is touched (paged KV is a PROT_NONE
//     reservation: a stray access would crash).
//   - RealBytes: the same token counts, layer count, T = 8192 and pool shapes with 16-byte
//     token rows (W = 128 KiB), moving real bytes that are verified bit for bit.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <numeric>

#include "rangekv/engine.h"
#include "testing/count_only_device.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/payload_free_env.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::Envelope;
using testing::KvFixture;

constexpr uint64_t kPrefixTokens = 49152;
constexpr uint64_t kSuffixTokens = 16128;
constexpr uint64_t kRequestTokens = kPrefixTokens + kSuffixTokens;  // 65,280

// How the cached prefix is named. The only inputs through which a naming can reach the engine
// are the reuse granularity of the lookup (where a partial hit may end) and whether the
// consumer waits layer by layer; both vary here.
struct Naming {
  const char* label;
  uint64_t objects;
  uint64_t granularity_tokens;  // chunk size; 1 where chunks are uneven (38/39 tokens)
  bool layerwise;
};
constexpr Naming kNamings[] = {
    {"192", 192, 256, false},
    {"768", 768, 64, false},
    {"3072", 3072, 16, false},
    {"6144", 6144, 8, false},
    {"6144-layerwise", 6144, 256, true},  // 192 chunks x 32 layers
    {"327680", 327680, 1, true},          // 1,280 chunks of 38/39 tokens x 32 layers x 8 slices
};

std::vector<int32_t> RequestTokens() { return testing::RandomTokens(kRequestTokens, 2024); }

// A PROT_NONE reservation standing in for paged KV that no kernel may touch.
class Reservation {
 public:
  explicit Reservation(uint64_t bytes) : bytes_(bytes) {
    p_ = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~Reservation() {
    if (p_ != MAP_FAILED) munmap(p_, bytes_);
  }
  bool ok() const { return p_ != MAP_FAILED; }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }

 private:
  uint64_t bytes_;
  void* p_;
};

void ExpectRestoreWork(const EngineStats& w, const char* label) {
  SCOPED_TRACE(label);
  EXPECT_EQ(w.records_selected, 6u);
  EXPECT_EQ(w.native_reads, 192u);
  EXPECT_EQ(w.scatter_launches, 192u);
  EXPECT_EQ(w.ready_events, 32u);
  EXPECT_EQ(w.payload_allocations, 0u);
  EXPECT_EQ(w.read_bank_acquisitions, 192u);
  EXPECT_EQ(w.leases_taken, 6u);  // one per selected pack
  EXPECT_EQ(w.failed_spans, 0u);
  EXPECT_EQ(w.quarantines, 0u);
}

void ExpectSuffixStoreWork(const EngineStats& w) {
  EXPECT_EQ(w.native_writes, 64u);
  EXPECT_EQ(w.gather_launches, 8u);
  EXPECT_EQ(w.store_bank_acquisitions, 8u);
  EXPECT_EQ(w.payload_allocations, 0u);
  EXPECT_EQ(w.stores_published, 1u);
}

// Restores the prefix of `tokens` as `naming` names it. Returns the engine-wide work of the
// lookup + restore (the lookup's index work is counted by the directory).
RestoreOutcome RestoreNamed(Engine& engine, const Naming& naming, std::span<const int32_t> tokens,
                            const PagedKv& kv, std::span<const int64_t> slots, EngineStats* work) {
  const EngineStats before = engine.GetStats();
  const RequestEnvelope env = Envelope(std::string("restore-") + naming.label);
  auto lookup = engine.Lookup(env, tokens, naming.granularity_tokens);
  EXPECT_TRUE(lookup.ok()) << lookup.status().ToString();
  if (!lookup.ok()) return {};
  EXPECT_EQ(lookup->hit_tokens, kPrefixTokens);
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine.StartRestore(req);
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  if (!handle.ok()) return {};
  EXPECT_TRUE(handle->BindSlots(kv, slots.first(kPrefixTokens)).ok());
  if (naming.layerwise) {
    for (uint32_t l = 0; l < engine.geometry().layers; ++l) EXPECT_TRUE(handle->WaitLayer(l).ok());
  }
  RestoreOutcome out = handle->Finish();
  *work = engine.GetStats() - before;
  return out;
}

// Stores `tokens` (all layers produced; layerwise: one notification per layer as a layerwise
// connector would send them, else after the whole forward pass).
StoreOutcome StoreTokens(Engine& engine, std::span<const int32_t> tokens, const PagedKv& kv,
                         std::span<const int64_t> slots, EngineStats* work) {
  const EngineStats before = engine.GetStats();
  StoreRequest req;
  req.envelope = Envelope("store");
  req.tokens = tokens;
  req.kv = &kv;
  req.slot_mapping = slots;
  auto handle = engine.BeginStore(req);
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  if (!handle.ok()) return {};
  for (uint32_t l = 0; l < engine.geometry().layers; ++l) {
    EXPECT_TRUE(handle->LayerProduced(l).ok());
  }
  EXPECT_TRUE(handle->WaitExtracted().ok());
  StoreOutcome out = handle->Finish(StoreWait::kUntilVisible);
  *work = engine.GetStats() - before;
  return out;
}

// ---- the full 8B geometry, payload-free ----------------------------------------------------

struct FullGeometryEngine {
  testing::PayloadFreeEnv env;
  std::unique_ptr<Device> device;
  std::unique_ptr<Engine> engine;
};

std::unique_ptr<FullGeometryEngine> OpenFullGeometry(Ablations ablations = {}) {
  auto f = std::make_unique<FullGeometryEngine>();
  auto device = testing::MakeCountOnlyDevice();
  EXPECT_TRUE(device.ok());
  f->device = std::move(device).value();
  EngineOptions o;  // the paper's defaults: 8x32 MiB read banks, 8x256 MiB store banks, ...
  o.store_dir = "/paper";
  o.model = Llama31_8BSpec();
  o.env = &f->env;
  o.io_engine = IoEngineSelection::kPosix;
  o.tuning.ablations = ablations;
  o.tuning.layer_group = 4;  // the paper's (a host device's auto group is 2)
  engine_internal::EngineInternalConfig config;
  config.device = f->device.get();
  auto e = testing::OpenEngineForTesting(o, config);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return nullptr;
  f->engine = std::move(e).value();
  return f;
}

TEST(Table2FullGeometryTest, CountsAreTheSameForEveryNaming) {
  const auto tokens = RequestTokens();
  std::vector<int64_t> slots(kRequestTokens);
  std::iota(slots.begin(), slots.end(), 0);
  for (const Naming& naming : kNamings) {
    SCOPED_TRACE(naming.label);
    auto f = OpenFullGeometry();
    ASSERT_NE(f, nullptr);
    Engine& engine = *f->engine;
    const Geometry& g = engine.geometry();
    ASSERT_EQ(g.token_bytes, 4096u);
    ASSERT_EQ(g.tokens_per_stripe, 8192u);
    ASSERT_EQ(g.pack_bytes, 1ull << 30);

    // Paged KV for 65,280 tokens: 4,080 blocks of 16 per layer, reserved but never mapped.
    const uint64_t blocks = kRequestTokens / g.block_size;
    const uint64_t layer_bytes = blocks * g.block_size * g.token_bytes;
    Reservation memory(layer_bytes * g.layers);
    ASSERT_TRUE(memory.ok());
    PagedKv kv;
    kv.num_blocks = blocks;
    for (uint32_t l = 0; l < g.layers; ++l)
      kv.layer_base.push_back(memory.data() + l * layer_bytes);

    EngineStats work;
    StoreOutcome prefix =
        StoreTokens(engine, std::span<const int32_t>(tokens).first(kPrefixTokens), kv,
                    std::span<const int64_t>(slots).first(kPrefixTokens), &work);
    ASSERT_TRUE(prefix.status.ok()) << prefix.status.ToString();
    ASSERT_EQ(prefix.stored, (TokenInterval{0, kPrefixTokens}));

    RestoreOutcome restored = RestoreNamed(engine, naming, tokens, kv, slots, &work);
    ASSERT_TRUE(restored.status.ok()) << restored.status.ToString();
    EXPECT_TRUE(restored.failed.empty());
    ExpectRestoreWork(work, naming.label);
    EXPECT_EQ(work.bytes_read, 6ull << 30);

    StoreOutcome suffix = StoreTokens(engine, tokens, kv, slots, &work);
    ASSERT_TRUE(suffix.status.ok()) << suffix.status.ToString();
    EXPECT_TRUE(suffix.visible);
    EXPECT_EQ(suffix.stored, (TokenInterval{kPrefixTokens, kRequestTokens}));
    ExpectSuffixStoreWork(work);
    EXPECT_EQ(work.bytes_written, 2016ull << 20);
    ASSERT_TRUE(engine.Close().ok());
  }
}

// The ablations restore the per-object work the tree and the stripes remove.
TEST(Table2FullGeometryTest, AblationsBringBackPerObjectWork) {
  const auto tokens = RequestTokens();
  std::vector<int64_t> slots(kRequestTokens);
  std::iota(slots.begin(), slots.end(), 0);
  struct Case {
    const char* setting;
    const char* objects;
    uint64_t records_selected, native_reads, scatter_launches;
  };
  const Case cases[] = {
      {"index=scalar", "objects=chunk", 192, 192, 192},
      {"index=scalar", "objects=chunk_layer", 6144, 192, 192},
      {"read_issue=object", "objects=chunk", 6, 6144, 192},
      {"delivery=barrier", "objects=chunk", 6, 192, 192},
      {"prefetch=dispatch", "objects=chunk", 6, 192, 192},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.setting);
    Ablations a;
    ASSERT_TRUE(a.Set(c.setting).ok());
    ASSERT_TRUE(a.Set(c.objects).ok());
    auto f = OpenFullGeometry(a);
    ASSERT_NE(f, nullptr);
    Engine& engine = *f->engine;
    const Geometry& g = engine.geometry();
    const uint64_t blocks = kRequestTokens / g.block_size;
    const uint64_t layer_bytes = blocks * g.block_size * g.token_bytes;
    Reservation memory(layer_bytes * g.layers);
    ASSERT_TRUE(memory.ok());
    PagedKv kv;
    kv.num_blocks = blocks;
    for (uint32_t l = 0; l < g.layers; ++l)
      kv.layer_base.push_back(memory.data() + l * layer_bytes);
    EngineStats work;
    ASSERT_TRUE(StoreTokens(engine, std::span<const int32_t>(tokens).first(kPrefixTokens), kv,
                            std::span<const int64_t>(slots).first(kPrefixTokens), &work)
                    .status.ok());
    RestoreOutcome restored = RestoreNamed(engine, kNamings[0], tokens, kv, slots, &work);
    ASSERT_TRUE(restored.status.ok()) << restored.status.ToString();
    EXPECT_EQ(work.records_selected, c.records_selected);
    EXPECT_EQ(work.native_reads, c.native_reads);
    EXPECT_EQ(work.scatter_launches, c.scatter_launches);
    EXPECT_EQ(work.ready_events, 32u);
    EXPECT_EQ(work.payload_allocations, 0u);
  }
}

// ---- the same shapes with real bytes -----------------------------------------------------

TEST(Table2RealBytesTest, SameCountsAndEveryRestoreBitExact) {
  testing::TempDir dir;
  // 32 layers, 1 head x 4 x bf16: s = 16 bytes; W = 128 KiB keeps T = 8192 tokens per stripe.
  EngineOptions o;
  o.store_dir = dir.path() + "/store";
  o.model = testing::SmallModel(32, 1, 4);
  o.stripe_bytes = 128 * 1024;
  o.capacity_bytes = 12 * 32 * o.stripe_bytes;  // 12 packs (48 MiB)
  o.device = DeviceSelection::kHost;
  o.io_engine = IoEngineSelection::kPosix;
  // The paper's pool shapes (bank bytes follow W), with fewer threads for a 2-core CI box.
  o.tuning.layer_group = 4;
  o.tuning.group_workers = 4;
  o.tuning.write_workers = 4;
  o.tuning.max_inflight_restores = 2;
  o.tuning.max_inflight_stores = 2;
  o.max_request_tokens = kRequestTokens;
  auto opened = Engine::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& engine = **opened;
  ASSERT_EQ(engine.geometry().tokens_per_stripe, 8192u);

  const auto tokens = RequestTokens();
  const uint64_t blocks = kRequestTokens / engine.geometry().block_size;
  auto src = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, blocks);
  auto dst = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, blocks);
  ASSERT_TRUE(src.ok() && dst.ok());
  constexpr uint64_t kSeed = 77;
  const auto src_slots = testing::RandomSlots(kRequestTokens, (*src)->num_slots(), 1);
  ASSERT_TRUE((*src)->Fill(tokens, 0, src_slots, kSeed).ok());

  EngineStats work;
  StoreOutcome prefix =
      StoreTokens(engine, std::span<const int32_t>(tokens).first(kPrefixTokens), (*src)->kv(),
                  std::span<const int64_t>(src_slots).first(kPrefixTokens), &work);
  ASSERT_TRUE(prefix.status.ok()) << prefix.status.ToString();

  for (const Naming& naming : kNamings) {
    SCOPED_TRACE(naming.label);
    ASSERT_TRUE((*dst)->Poison(0x5A).ok());
    const auto slots = testing::RandomSlots(kRequestTokens, (*dst)->num_slots(), naming.objects);
    RestoreOutcome restored = RestoreNamed(engine, naming, tokens, (*dst)->kv(), slots, &work);
    ASSERT_TRUE(restored.status.ok()) << restored.status.ToString();
    ExpectRestoreWork(work, naming.label);
    EXPECT_EQ(work.bytes_read, 192u * o.stripe_bytes);
    auto bad =
        (*dst)->Mismatches(tokens, 0, std::span<const int64_t>(slots).first(kPrefixTokens), kSeed);
    ASSERT_TRUE(bad.ok());
    EXPECT_EQ(*bad, 0u);
  }

  StoreOutcome suffix = StoreTokens(engine, tokens, (*src)->kv(), src_slots, &work);
  ASSERT_TRUE(suffix.status.ok()) << suffix.status.ToString();
  EXPECT_EQ(suffix.stored, (TokenInterval{kPrefixTokens, kRequestTokens}));
  ExpectSuffixStoreWork(work);
  EXPECT_EQ(work.bytes_written, 32u * (8192 + 7936) * 16);

  // The stored suffix restores bit for bit too (hit: all but the last token, rounded to 16).
  auto all = testing::RestoreAndVerify(engine, **dst, Envelope("everything"), tokens, 16, kSeed, 5);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->lookup.hit_tokens, kRequestTokens - 16);
  EXPECT_EQ(all->lookup.records_selected, 8u);
  EXPECT_TRUE(all->outcome.status.ok());
  EXPECT_EQ(all->mismatches, 0u);
}

}  // namespace
}  // namespace rangekv
