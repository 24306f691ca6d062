// End-to-end tests of the transfer engine on HostDevice with real bytes: store then restore bit
// for bit for every paged layout, partial prefixes, prefetch before binding, the ablations'
// delivery paths, and every public entry point's input checks.
#include "rangekv/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "persist/identity_record.h"
#include "persist/store_layout.h"
#include "rangekv/build_info.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::Envelope;
using testing::KvFixture;
using testing::RandomSlots;
using testing::RandomTokens;
using testing::RestoreAndVerify;
using testing::SmallModel;
using testing::SmallOptions;
using testing::StoreAll;
using testing::WaitMode;

// 4 layers, 2 heads x 16 x bf16: s = 128 bytes; W = 8 KiB: T = 64 tokens per stripe.
constexpr uint64_t kW = 8192;
constexpr uint64_t kT = 64;

// Polls `pred` (a condition other threads make true) with a generous deadline.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class EngineTest : public ::testing::Test {
 protected:
  void Open(EngineOptions o) {
    auto e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void OpenDefault(ModelSpec model = SmallModel(4, 2, 16)) {
    Open(SmallOptions(dir_.path() + "/store", model, kW));
  }
  std::unique_ptr<KvFixture> Fixture(KvCacheLayout layout = KvCacheLayout::kFlashAttnNhd,
                                     uint64_t blocks = 64) {
    auto f = KvFixture::Make(*engine_, layout, blocks);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, StoreThenRestoreIsBitExact) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 20, 1);  // 4 full packs + a partial one, + 1
  auto stored = StoreAll(*engine_, *src, tokens, /*seed=*/11, /*slot_seed=*/1);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
  EXPECT_TRUE(stored->outcome.visible);
  EXPECT_EQ(stored->outcome.disposition, StoreDisposition::kStoring);
  EXPECT_EQ(stored->outcome.stored, (TokenInterval{0, tokens.size()}));
  // 5 records x 4 layers; one group of 4 layers, 5 stripes per layer = 20 stripe writes; the
  // store bank holds 2 x 4 stripes, so the group takes 3 banks (2 + 2 + 1 records).
  EXPECT_EQ(stored->work.native_writes, 20u);
  EXPECT_EQ(stored->work.gather_launches, 3u);
  EXPECT_EQ(stored->work.store_bank_acquisitions, 3u);
  EXPECT_EQ(stored->work.payload_allocations, 0u);

  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r1"), tokens, /*granularity=*/16, 11, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Never the last token; rounded down to 16: 4*64 + 16 = 272.
  EXPECT_EQ(r->lookup.hit_tokens, 4 * kT + 16);
  ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_TRUE(r->outcome.failed.empty());
  EXPECT_EQ(r->outcome.delivered_tokens, r->lookup.hit_tokens);
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ(r->outcome.work.native_reads, 5u * 4);
  EXPECT_EQ(r->outcome.work.scatter_launches, 5u * 4);
  EXPECT_EQ(r->outcome.work.ready_events, 4u);
  EXPECT_EQ(r->outcome.work.read_bank_acquisitions, 20u);
  EXPECT_EQ(r->outcome.work.payload_allocations, 0u);

  // Everything returned: banks, slots, leases.
  auto read_pool = testing::ReadPoolState(*engine_);
  EXPECT_EQ(read_pool.free_banks, 4u);
  EXPECT_EQ(read_pool.free_slots, 4u);
  auto store_pool = testing::StorePoolState(*engine_);
  EXPECT_EQ(store_pool.free_banks, 4u);
  EXPECT_EQ(store_pool.free_slots, 4u);
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
    EXPECT_EQ(s.leases, 0u);
  }
}

class EngineLayoutTest : public EngineTest, public ::testing::WithParamInterface<KvCacheLayout> {};

TEST_P(EngineLayoutTest, EveryPagedLayoutRoundTrips) {
  const bool mla = GetParam() == KvCacheLayout::kMla;
  // MLA: latent 72 x bf16 = 144-byte rows (not a power of two: partial stripes end mid-page).
  ModelSpec model = mla ? SmallModel(3, 0, 0, 2, 16, 72) : SmallModel(3, 2, 16);
  model.layout = GetParam();  // the layout is the store's (part of its namespace)
  OpenDefault(model);
  auto src = Fixture(GetParam());
  auto dst = Fixture(GetParam());
  const auto tokens = RandomTokens(150, 3);
  auto stored = StoreAll(*engine_, *src, tokens, 5, 1);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 1, 5, 9, WaitMode::kEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Block-opaque layouts hit whole blocks only.
  EXPECT_EQ(r->lookup.hit_tokens, IsBlockOpaque(GetParam()) ? 144u : 149u);
  EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, EngineLayoutTest,
                         ::testing::Values(KvCacheLayout::kFlashAttnNhd,
                                           KvCacheLayout::kFlashAttnHnd,
                                           KvCacheLayout::kFlashInferNhd,
                                           KvCacheLayout::kFlashInferHnd, KvCacheLayout::kMla,
                                           KvCacheLayout::kPackedNhd, KvCacheLayout::kPackedHnd,
                                           KvCacheLayout::kCpuBlock));

TEST_F(EngineTest, OnlyTheUncachedSuffixIsStoredAndTheLongerPrefixRestores) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(5 * kT, 4);
  const std::span<const int32_t> prefix(tokens.data(), 2 * kT);
  auto first = StoreAll(*engine_, *src, prefix, 21, 1);
  ASSERT_TRUE(first.ok() && first->outcome.status.ok());
  auto second = StoreAll(*engine_, *src, tokens, 21, 2);
  ASSERT_TRUE(second.ok() && second->outcome.status.ok());
  EXPECT_EQ(second->outcome.stored, (TokenInterval{2 * kT, 5 * kT}));
  EXPECT_EQ(second->work.native_writes, 3u * 4);  // 3 new packs x 4 layers
  // Storing it again does nothing.
  auto third = StoreAll(*engine_, *src, tokens, 21, 3);
  ASSERT_TRUE(third.ok() && third->outcome.status.ok());
  EXPECT_EQ(third->outcome.disposition, StoreDisposition::kAlreadyCached);
  EXPECT_EQ(third->work.native_writes, 0u);

  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 8, 21, 4,
                            WaitMode::kStreamEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup.hit_tokens, 5 * kT - 8);
  EXPECT_EQ(r->lookup.records_selected, 5u);
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineTest, PrefetchReadsStartAtLookupAndScattersWaitForBinding) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 6);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 31, 1)->outcome.status.ok());
  const EngineStats before = engine_->GetStats();

  const RequestEnvelope env = Envelope("prefetched");
  auto lookup = engine_->Lookup(env, tokens, 64);
  ASSERT_TRUE(lookup.ok());
  ASSERT_TRUE(lookup->prefetch_started);
  ASSERT_EQ(lookup->hit_tokens, 4 * kT);
  // The prefetch fills exactly the prefetch budget (3 of 4 banks) and then waits: its stripes
  // landed, nothing was scattered, no layer was published.
  ASSERT_TRUE(Eventually([&] {
    const EngineStats s = engine_->GetStats() - before;
    return s.native_reads == 3 && s.bytes_read == 3 * kW;
  }));
  EngineStats mid = engine_->GetStats() - before;
  EXPECT_EQ(mid.prefetched_stripes, 3u);
  EXPECT_EQ(mid.scatter_launches, 0u);
  EXPECT_EQ(mid.ready_events, 0u);
  auto pool = testing::ReadPoolState(*engine_);
  EXPECT_EQ(pool.owned_banks, 3u);
  EXPECT_EQ(pool.prefetch_banks, 3u);

  // The claim adopts the prefetch; binding releases the scatters.
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ((engine_->GetStats() - before).scatter_launches, 0u);
  ASSERT_TRUE(dst->Poison(0xA5).ok());
  const auto slots = RandomSlots(lookup->hit_tokens, dst->num_slots(), 8);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  for (uint32_t l = 0; l < 4; ++l) EXPECT_TRUE(handle->WaitLayer(l).ok());
  RestoreOutcome out = handle->Finish();
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  auto bad = dst->Mismatches(tokens, 0, slots, 31);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  // No stripe was read twice: 16 reads in all, 3 of them before binding.
  const EngineStats total = engine_->GetStats() - before;
  EXPECT_EQ(total.native_reads, 16u);
  EXPECT_EQ(total.prefetched_stripes, 3u);
  EXPECT_EQ(total.scatter_launches, 16u);
  EXPECT_EQ(total.ready_events, 4u);
  EXPECT_EQ(out.work.prefetched_stripes, 3u);
}

TEST_F(EngineTest, ReleasingAnUnclaimedPrefetchDrainsAndCancelsTheTicket) {
  OpenDefault();
  auto src = Fixture();
  const auto tokens = RandomTokens(3 * kT + 1, 7);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 41, 1)->outcome.status.ok());
  const RequestEnvelope env = Envelope("abandoned");
  auto lookup = engine_->Lookup(env, tokens, 1);
  ASSERT_TRUE(lookup.ok() && lookup->prefetch_started);
  engine_->ReleaseRequest(env);
  ASSERT_TRUE(Eventually([&] {
    auto p = testing::ReadPoolState(*engine_);
    return p.active_jobs == 0 && p.free_slots == 4 && p.free_banks == 4;
  }));
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
    EXPECT_EQ(s.leases, 0u);
  }
  EXPECT_EQ(engine_->GetStats().cancelled_restores, 1u);
  // The ticket is gone: a claim fails.
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  EXPECT_EQ(engine_->StartRestore(req).status().code(), StatusCode::kNotFound);
}

TEST_F(EngineTest, ClaimOfOtherTokensThanPrefetchedStartsAFreshJobAndDrainsThePrefetch) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 17);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 121, 1)->outcome.status.ok());
  const RequestEnvelope env = Envelope("skip-local");
  auto lookup = engine_->Lookup(env, tokens, 1);
  ASSERT_TRUE(lookup.ok() && lookup->prefetch_started);
  // The serving engine already holds the first pack's tokens (its own prefix cache).
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.begin_token = kT;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(handle->tokens(), (TokenInterval{kT, 4 * kT}));
  ASSERT_TRUE(dst->Poison(0xA5).ok());
  const auto slots = RandomSlots(3 * kT, dst->num_slots(), 2);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  RestoreOutcome out = handle->Finish();
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.work.native_reads, 3u * 4);  // only the packs of [64, 256)
  auto bad = dst->Mismatches(tokens, kT, slots, 121);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  // The abandoned prefetch drains; then the shared ticket is released exactly once.
  ASSERT_TRUE(Eventually([&] { return testing::ReadPoolState(*engine_).active_jobs == 0; }));
  EXPECT_EQ(engine_->GetStats().cancelled_restores, 1u);
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
    EXPECT_EQ(s.leases, 0u);
  }
  EXPECT_EQ(testing::EngineDirectory(*engine_).Stats().outstanding_tickets, 0u);
}

TEST_F(EngineTest, APrefetchReadsOnlyPastTheCallersLocalTokensAndTheClaimAdoptsIt) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 19);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 131, 1)->outcome.status.ok());

  // The serving engine's own cache covers the whole hit: no read at all.
  EngineStats before = engine_->GetStats();
  auto covered = engine_->Lookup(Envelope("covered"), tokens, 1, /*local_tokens=*/4 * kT);
  ASSERT_TRUE(covered.ok());
  EXPECT_EQ(covered->hit_tokens, 4 * kT);  // the hit does not depend on local_tokens
  EXPECT_FALSE(covered->prefetch_started);
  engine_->ReleaseRequest(Envelope("covered"));
  EXPECT_EQ((engine_->GetStats() - before).native_reads, 0u);

  // It covers the first pack: the prefetch reads past it, and the claim from there adopts it.
  before = engine_->GetStats();
  const RequestEnvelope env = Envelope("partly-local");
  auto lookup = engine_->Lookup(env, tokens, 1, /*local_tokens=*/kT);
  ASSERT_TRUE(lookup.ok() && lookup->prefetch_started);
  // The claim must find prefetched stripes to adopt: on a loaded machine the read workers may
  // not have run yet (CI once claimed first and read every stripe after the binding).
  ASSERT_TRUE(Eventually([&] { return (engine_->GetStats() - before).prefetched_stripes > 0; }));
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.begin_token = kT;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  ASSERT_TRUE(dst->Poison(0xA5).ok());
  const auto slots = RandomSlots(3 * kT, dst->num_slots(), 3);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  RestoreOutcome out = handle->Finish();
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  auto bad = dst->Mismatches(tokens, kT, slots, 131);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  const EngineStats total = engine_->GetStats() - before;
  EXPECT_EQ(total.native_reads, 3u * 4);    // the packs of [kT, 4 kT) once each
  EXPECT_EQ(total.cancelled_restores, 0u);  // adopted, not abandoned
  EXPECT_GT(out.work.prefetched_stripes, 0u);
}

TEST_F(EngineTest, DispatchModeReadsNothingBeforeTheClaim) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.ablations.prefetch = Ablations::Prefetch::kDispatch;
  Open(o);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(2 * kT + 1, 8);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 51, 1)->outcome.status.ok());
  const EngineStats before = engine_->GetStats();
  auto lookup = engine_->Lookup(Envelope("d"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_FALSE(lookup->prefetch_started);
  EXPECT_EQ((engine_->GetStats() - before).native_reads, 0u);
  engine_->ReleaseRequest(Envelope("d"));
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("d2"), tokens, 1, 51, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineTest, BarrierDeliveryAndObjectReadIssueDeliverTheSameBytes) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.ablations.delivery = Ablations::Delivery::kBarrier;
  o.tuning.ablations.read_issue = Ablations::ReadIssue::kObject;
  o.tuning.ablations.object_tokens =
      16;  // 16 x 128 B = 2 KiB objects: cut at 4 KiB pages -> 2 reads
  Open(o);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(3 * kT + 1, 9);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 61, 1)->outcome.status.ok());
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("b"), tokens, 1, 61, 2, WaitMode::kEveryLayer);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
  // 12 stripes of 8 KiB, each issued as object-sized pieces aligned to pages: 2 per stripe.
  EXPECT_EQ(r->outcome.work.native_reads, 24u);
  EXPECT_EQ(r->outcome.work.scatter_launches, 12u);
  EXPECT_EQ(r->outcome.work.ready_events, 4u);
}

TEST_F(EngineTest, CancelledHandleDropIsSafeAndEngineCloseLeavesHandlesInert) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(2 * kT + 1, 10);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 71, 1)->outcome.status.ok());
  auto lookup = engine_->Lookup(Envelope("x"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("x");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(engine_->Close().ok());
  EXPECT_EQ(
      handle->BindSlots(dst->kv(), RandomSlots(lookup->hit_tokens, dst->num_slots(), 1)).code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(handle->Finish().status.code(), StatusCode::kFailedPrecondition);
  engine_.reset();  // the handle outlives the engine: still safe
  EXPECT_FALSE(handle->valid());
}

TEST_F(EngineTest, StagingCopiesAndTheEventWaitPathDeliverTheSameBytes) {
  engine_internal::EngineInternalConfig config;
  config.force_staging = true;              // what a GPU without GDS does
  config.disable_stream_memory_ops = true;  // StreamWaitLayer through events
  ModelSpec hnd = SmallModel(4, 2, 16);
  hnd.layout = KvCacheLayout::kFlashAttnHnd;
  auto e = testing::OpenEngineForTesting(SmallOptions(dir_.path() + "/store", hnd, kW), config);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  engine_ = std::move(e).value();
  auto src = Fixture(KvCacheLayout::kFlashAttnHnd);
  auto dst = Fixture(KvCacheLayout::kFlashAttnHnd);
  const auto tokens = RandomTokens(3 * kT + 1, 15);
  auto stored = StoreAll(*engine_, *src, tokens, 101, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("staged"), tokens, 1, 101, 2,
                            WaitMode::kStreamEveryLayer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ(r->outcome.work.h2d_copies, 12u);  // one per stripe
  EXPECT_EQ(r->outcome.work.scatter_launches, 12u);
}

// A host callback that holds its stream until the test opens the gate.
struct StreamGate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;
  static void Hold(void* arg) {
    auto* g = static_cast<StreamGate*>(arg);
    std::unique_lock<std::mutex> l(g->mu);
    g->entered = true;
    g->cv.notify_all();
    g->cv.wait(l, [g] { return g->open; });
  }
};

TEST_F(EngineTest, GatherWaitsForTheProducerStreamWithoutBlockingTheHost) {
  OpenDefault();
  auto src = Fixture();
  auto truth = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(2 * kT, 16);
  const auto slots = RandomSlots(tokens.size(), src->num_slots(), 3);
  ASSERT_TRUE(truth->Fill(tokens, 0, slots, 111).ok());
  ASSERT_TRUE(src->Poison(0).ok());
  auto producer = engine_->CreateStream();
  ASSERT_TRUE(producer.ok());
  // The "model" is still computing on its stream: a callback holds it, and the KV it produces
  // (copied from `truth`) lands only after it. A gather that did not wait would read zeros.
  StreamGate gate;
  Stream* stream = static_cast<Stream*>(producer->native);
  ASSERT_TRUE(stream->AddHostCallback(&StreamGate::Hold, &gate).ok());
  for (uint32_t l = 0; l < 4; ++l) {
    ASSERT_TRUE(stream
                    ->CopyDeviceToDevice(src->kv().layer_base[l], truth->kv().layer_base[l],
                                         src->layer_bytes())
                    .ok());
  }
  {
    std::unique_lock<std::mutex> l(gate.mu);
    gate.cv.wait(l, [&] { return gate.entered; });
  }
  StoreRequest req;
  req.envelope = Envelope("produced");
  req.tokens = tokens;
  req.kv = &src->kv();
  req.slot_mapping = slots;
  auto handle = engine_->BeginStore(req);
  ASSERT_TRUE(handle.ok());
  for (uint32_t l = 0; l < 4; ++l) ASSERT_TRUE(handle->LayerProduced(l, *producer).ok());
  // A group worker took the batch and a bank, and its gather waits on the producer's event.
  ASSERT_TRUE(Eventually([&] { return testing::StorePoolState(*engine_).owned_banks == 1; }));
  EXPECT_FALSE(handle->extracted());
  EXPECT_EQ(engine_->GetStats().native_writes, 0u);
  {
    std::lock_guard<std::mutex> l(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  ASSERT_TRUE(handle->WaitExtracted().ok());
  StoreOutcome out = handle->Finish();
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_TRUE(out.visible);
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 1, 111, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

// ---- input validation ----------------------------------------------------------------------

TEST_F(EngineTest, ClaimsFailWithDistinctStatuses) {
  OpenDefault();
  auto src = Fixture();
  const auto tokens = RandomTokens(2 * kT + 1, 12);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 81, 1)->outcome.status.ok());
  auto lookup = engine_->Lookup(Envelope("c"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("c");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;

  RestoreRequest foreign = req;
  foreign.envelope = Envelope("c", /*attempt=*/1);
  EXPECT_EQ(engine_->StartRestore(foreign).status().code(), StatusCode::kForeignOwner);
  RestoreRequest beyond = req;
  beyond.endpoint_tokens = lookup->hit_tokens + 1;
  EXPECT_EQ(engine_->StartRestore(beyond).status().code(), StatusCode::kEndpointBeyondTicket);
  auto other = tokens;
  other[5] ^= 1;
  RestoreRequest mismatch = req;
  mismatch.tokens = other;
  EXPECT_EQ(engine_->StartRestore(mismatch).status().code(), StatusCode::kTokenMismatch);
  std::string forged = lookup->ticket;
  forged[forged.size() / 2] ^= 0x40;
  RestoreRequest bad = req;
  bad.ticket = forged;
  EXPECT_EQ(engine_->StartRestore(bad).status().code(), StatusCode::kCorruptTicket);
  RestoreRequest empty = req;
  empty.endpoint_tokens = 0;
  EXPECT_EQ(engine_->StartRestore(empty).status().code(), StatusCode::kInvalidArgument);
  // The genuine claim still works after all those failures.
  auto ok = engine_->StartRestore(req);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ok->Cancel();
  EXPECT_EQ(ok->Finish().status.code(), StatusCode::kCancelled);
}

TEST_F(EngineTest, BindSlotsRejectsBadMappingsAndLayouts) {
  OpenDefault();
  auto src = Fixture();
  auto dst = Fixture(KvCacheLayout::kFlashAttnNhd, 8);  // 128 slots
  const auto tokens = RandomTokens(kT + 1, 13);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 91, 1)->outcome.status.ok());
  auto lookup = engine_->Lookup(Envelope("m"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("m");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok());
  auto slots = RandomSlots(kT, dst->num_slots(), 2);
  EXPECT_EQ(handle->BindSlots(dst->kv(), std::span<const int64_t>(slots).first(kT - 1)).code(),
            StatusCode::kInvalidArgument);
  auto dup = slots;
  dup[3] = dup[4];
  EXPECT_EQ(handle->BindSlots(dst->kv(), dup).code(), StatusCode::kInvalidArgument);
  auto out_of_range = slots;
  out_of_range[0] = 128;
  EXPECT_EQ(handle->BindSlots(dst->kv(), out_of_range).code(), StatusCode::kOutOfRange);
  auto negative = slots;
  negative[0] = -1;
  EXPECT_EQ(handle->BindSlots(dst->kv(), negative).code(), StatusCode::kInvalidArgument);
  PagedKv fewer = dst->kv();
  fewer.layer_base.pop_back();
  EXPECT_EQ(handle->BindSlots(fewer, slots).code(), StatusCode::kGeometryMismatch);
  PagedKv mla = dst->kv();
  mla.layout = KvCacheLayout::kMla;
  EXPECT_EQ(handle->BindSlots(mla, slots).code(), StatusCode::kGeometryMismatch);
  // Nothing was bound by the failures: the right mapping binds once, then never again.
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  EXPECT_EQ(handle->BindSlots(dst->kv(), slots).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(handle->Finish().status.ok());
  EXPECT_EQ(handle->WaitLayer(0).code(), StatusCode::kFailedPrecondition);
}

TEST_F(EngineTest, OpenValidatesOptionsAndTheExistingStore) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.prefetch_banks = o.tuning.read_banks;
  EXPECT_EQ(Engine::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.model.kv_heads = 0;
  EXPECT_EQ(Engine::Open(o).status().code(), StatusCode::kInvalidArgument);
  {
    EngineOptions ok = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
    auto e = Engine::Open(ok);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    // The CUDA device names the GPU ("device=NVIDIA H200 (sm_90, ...)").
    const bool on_host = (*e)->DescribeBackends().find("device=host") != std::string::npos;
    EXPECT_EQ(on_host, ok.device == DeviceSelection::kHost) << (*e)->DescribeBackends();
    // Whether this build has CUDA kernels at all, said at open.
    const BuildInfo& build = GetBuildInfo();
    const std::string kernels =
        build.has_cuda_kernels() ? std::string(build.cuda_kernels) : std::string("none");
    EXPECT_NE((*e)->DescribeBackends().find(" cuda_kernels=" + kernels + " "), std::string::npos)
        << (*e)->DescribeBackends();
  }
  // Reopening with another model finds a pack file of another geometry.
  auto other = Engine::Open(SmallOptions(dir_.path() + "/store", SmallModel(4, 4, 16), kW));
  EXPECT_EQ(other.status().code(), StatusCode::kGeometryMismatch) << other.status().ToString();
  // Same geometry, another model id: another namespace.
  ModelSpec renamed = SmallModel(4, 2, 16);
  renamed.model_id = "test/other";
  auto ns = Engine::Open(SmallOptions(dir_.path() + "/store", renamed, kW));
  EXPECT_EQ(ns.status().code(), StatusCode::kNamespaceMismatch) << ns.status().ToString();
}

TEST_F(EngineTest, ByteSplitIssuesBytesOverSplitCallsAndRestoresBitExact) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.io_split_bytes = 3000;  // odd: O_DIRECT rounds each piece up to 4096
  Open(o);
  EXPECT_EQ(engine_->options().tuning.io_split_bytes, 3000u);
  EXPECT_NE(engine_->DescribeBackends().find("split=3000 (configured)"), std::string::npos)
      << engine_->DescribeBackends();
  const bool direct = engine_->DescribeBackends().find("direct=on") != std::string::npos;
  const uint64_t piece = direct ? 4096 : 3000;
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 31);
  auto stored = StoreAll(*engine_, *src, tokens, /*seed=*/41, /*slot_seed=*/3);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
  const EngineStats before = engine_->GetStats();
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, /*granularity=*/16, 41, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->mismatches, 0u);
  const EngineStats work = engine_->GetStats() - before;
  // 4 full packs x 4 layers = 16 stripe spans of kW bytes, each cut into ceil(kW / piece).
  EXPECT_EQ(work.native_reads, 16u);
  EXPECT_EQ(work.native_read_calls, 16 * ((kW + piece - 1) / piece));
}

TEST_F(EngineTest, FillReadsSplitsReadsOnlyWhenThreadsOutnumberWorkers) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.io_split_bytes = kIoSplitFillReads;
  o.direct_io = DirectIo::kOff;
  o.io_engine = IoEngineSelection::kAuto;
  o.tuning.read_io_threads = 6;  // > read_workers (2)
  Open(o);
  EXPECT_EQ(engine_->options().tuning.read_io_threads, 6u);
  EXPECT_EQ(engine_->options().tuning.io_split_bytes, kFillSplitBytes);
  const std::string b = engine_->DescribeBackends();
  EXPECT_NE(b.find("read_io=6 threads (configured)"), std::string::npos) << b;
  // Threads copying pieces from the page cache: auto takes the posix pool for reads.
  EXPECT_NE(b.find("io=posix (auto: fill_reads"), std::string::npos) << b;
  EXPECT_NE(b.find("split=1048576 reads (fill_reads: 6 read I/O threads > 2 read workers, "
                   "buffered)"),
            std::string::npos)
      << b;
  {
    auto src = Fixture();
    auto dst = Fixture();
    const auto tokens = RandomTokens(2 * kT + 9, 34);
    auto stored = StoreAll(*engine_, *src, tokens, 44, 8);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
    auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 16, 44, 9);
    ASSERT_TRUE(r.ok() && r->outcome.status.ok());
    EXPECT_EQ(r->mismatches, 0u);
  }
  engine_.reset();

  // As many threads as workers: nothing to fill, spans stay whole.
  o.store_dir = dir_.path() + "/store2";
  o.tuning.read_io_threads = 2;
  Open(o);
  EXPECT_EQ(engine_->options().tuning.io_split_bytes, kIoSplitOff);
  EXPECT_NE(engine_->DescribeBackends().find(
                "split=off (fill_reads: 2 read I/O threads, 2 read workers)"),
            std::string::npos)
      << engine_->DescribeBackends();
  // Whole spans: auto keeps its usual choice (uring where it works).
  EXPECT_EQ(engine_->DescribeBackends().find("posix (auto: fill_reads"), std::string::npos)
      << engine_->DescribeBackends();
  engine_.reset();

  // Auto threads on an O_DIRECT file (where the medium has it): four times the read workers,
  // 1 MiB pieces.
  o.store_dir = dir_.path() + "/store3";
  o.tuning.read_io_threads = 0;
  o.direct_io = DirectIo::kPreferred;
  Open(o);
  const std::string d = engine_->DescribeBackends();
  if (d.find("direct=on") != std::string::npos) {
    EXPECT_EQ(engine_->options().tuning.read_io_threads, 8u);
    EXPECT_EQ(engine_->options().tuning.io_split_bytes, kFillSplitBytesDirect);
    EXPECT_NE(d.find("split=1048576 reads and writes (fill_reads: 8 read I/O threads > 2 read "
                     "workers, "
                     "O_DIRECT)"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("io=posix (auto: fill_reads: a thread per piece in flight, O_DIRECT)"),
              std::string::npos)
        << d;
  } else {
    EXPECT_GE(engine_->options().tuning.read_io_threads, 2u) << d;
    EXPECT_NE(d.find("(auto: "), std::string::npos) << d;
  }
}

TEST_F(EngineTest, AutoSplitProbesTheMediumAndSaysWhatItChose) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.io_split_bytes = kIoSplitAuto;
  Open(o);
  const std::string b = engine_->DescribeBackends();
  EXPECT_NE(b.find("(auto: probe"), std::string::npos) << b;
  const uint64_t split = engine_->options().tuning.io_split_bytes;
  EXPECT_TRUE(split == kIoSplitOff || split == (1u << 20) || split == (512u << 10) ||
              split == (256u << 10))
      << split;
  EXPECT_FALSE(DefaultEnv()->FileExists(dir_.path() + "/store/io-probe.tmp"));
  // Whatever was chosen, the bytes round-trip.
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(2 * kT + 9, 32);
  auto stored = StoreAll(*engine_, *src, tokens, 42, 5);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 16, 42, 6);
  ASSERT_TRUE(r.ok() && r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineTest, CuFileOnTheHostDeviceFallsBackWithTheReason) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  if (o.device != DeviceSelection::kHost) GTEST_SKIP() << "the CUDA run takes the cuFile path";
  o.io_engine = IoEngineSelection::kCuFile;
  Open(o);
  const std::string b = engine_->DescribeBackends();
  EXPECT_NE(b.find("cufile unavailable: cuFile needs a CUDA device"), std::string::npos) << b;
  auto src = Fixture();
  const auto tokens = RandomTokens(kT + 3, 33);
  auto stored = StoreAll(*engine_, *src, tokens, 43, 7);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
}

TEST_F(EngineTest, SplitOptionIsValidated) {
  EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(4, 2, 16), kW);
  o.tuning.io_split_bytes = 100;
  EXPECT_EQ(Engine::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.tuning.io_split_bytes = (1ull << 30) + 1;
  EXPECT_EQ(Engine::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, StoreRejectsBadInputAndUnproducedLayersAbort) {
  OpenDefault();
  auto src = Fixture();
  const auto tokens = RandomTokens(kT + 5, 14);
  auto slots = RandomSlots(tokens.size(), src->num_slots(), 1);
  StoreRequest req;
  req.envelope = Envelope("s");
  req.tokens = tokens;
  req.kv = &src->kv();
  req.slot_mapping = std::span<const int64_t>(slots).first(3);
  EXPECT_EQ(engine_->BeginStore(req).status().code(), StatusCode::kInvalidArgument);
  req.kv = nullptr;
  req.slot_mapping = slots;
  EXPECT_EQ(engine_->BeginStore(req).status().code(), StatusCode::kInvalidArgument);
  req.kv = &src->kv();
  auto neg = slots;
  neg[2] = -5;
  req.slot_mapping = neg;
  EXPECT_EQ(engine_->BeginStore(req).status().code(), StatusCode::kInvalidArgument);

  req.slot_mapping = slots;
  auto handle = engine_->BeginStore(req);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(handle->LayerProduced(0).ok());
  EXPECT_EQ(handle->LayerProduced(9).code(), StatusCode::kInvalidArgument);
  StoreOutcome out = handle->Finish();
  EXPECT_EQ(out.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(out.visible);
  EXPECT_EQ(out.work.native_writes, 0u);
  // Nothing visible; the reservation was reclaimed.
  auto lookup = engine_->Lookup(Envelope("after"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 0u);
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
    EXPECT_EQ(s.state, SlotState::kFree);
  }
}

// ---- the paged layouts vLLM 0.32 hands over ---------------------------------------------------

// Packed layouts (vLLM >= 0.26 GPU) and the CPU backend's opaque blocks, at every block size:
// s = 128 bytes (3 layers, 2 heads x 16 x bf16), W = 4 blocks, so T = 4B and packs end on
// block boundaries.
struct LayoutBlock {
  KvCacheLayout layout;
  uint32_t block_size;
};

class EngineBlockLayoutTest : public EngineTest, public ::testing::WithParamInterface<LayoutBlock> {
 protected:
  uint32_t B() const { return GetParam().block_size; }
  bool opaque() const { return IsBlockOpaque(GetParam().layout); }
  void OpenLayout() {
    ModelSpec m = SmallModel(3, 2, 16, 2, B());
    m.layout = GetParam().layout;
    Open(SmallOptions(dir_.path() + "/store", m, uint64_t{4} * B() * 128));
    ASSERT_EQ(engine_->geometry().tokens_per_stripe, 4u * B());
  }
  // Store `tokens` from `src` (canonical rows of `seed`); expects the stored interval.
  void Store(KvFixture& src, const std::vector<int32_t>& tokens, uint64_t slot_seed,
             TokenInterval want) {
    auto stored = StoreAll(*engine_, src, tokens, kSeed, slot_seed);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    ASSERT_TRUE(stored->outcome.status.ok()) << stored->outcome.status.ToString();
    EXPECT_TRUE(stored->outcome.visible);
    EXPECT_EQ(stored->outcome.stored, want);
  }
  // Lookup with granularity B, then restore [begin, end) (end 0: the whole hit) into a
  // poisoned `dst` and count rows that differ from the canonical bytes.
  uint64_t Restore(KvFixture& dst, const std::string& id, const std::vector<int32_t>& tokens,
                   uint64_t want_hit, uint64_t begin = 0, uint64_t end = 0) {
    auto lookup = engine_->Lookup(Envelope(id), tokens, B());
    EXPECT_TRUE(lookup.ok()) << lookup.status().ToString();
    if (!lookup.ok()) return UINT64_MAX;
    EXPECT_EQ(lookup->hit_tokens, want_hit);
    if (end == 0) end = lookup->hit_tokens;
    EXPECT_TRUE(dst.Poison(0xA5).ok());
    RestoreRequest req;
    req.ticket = lookup->ticket;
    req.envelope = Envelope(id);
    req.tokens = tokens;
    req.begin_token = begin;
    req.endpoint_tokens = end;
    auto handle = engine_->StartRestore(req);
    EXPECT_TRUE(handle.ok()) << handle.status().ToString();
    if (!handle.ok()) return UINT64_MAX;
    const std::vector<int64_t> slots = dst.Slots(end - begin, 77);
    const Status bound = handle->BindSlots(dst.kv(), slots);
    EXPECT_TRUE(bound.ok()) << bound.ToString();
    RestoreOutcome out = handle->Finish();
    EXPECT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_EQ(out.delivered_tokens, end - begin);
    auto bad = dst.Mismatches(tokens, begin, slots, kSeed);
    EXPECT_TRUE(bad.ok());
    return bad.ok() ? *bad : UINT64_MAX;
  }
  // `prefix` tokens of `base`, then fresh random tokens up to `n`.
  static std::vector<int32_t> Diverge(const std::vector<int32_t>& base, size_t prefix, size_t n,
                                      uint64_t seed) {
    std::vector<int32_t> t(base.begin(), base.begin() + prefix);
    const auto tail = RandomTokens(n - prefix, seed);
    for (int32_t v : tail) t.push_back(v == base[t.size()] ? v + 1 : v);
    return t;
  }
  static constexpr uint64_t kSeed = 23;
};

TEST_P(EngineBlockLayoutTest, FullPartialAndDivergentPrefixesRoundTripBitExact) {
  OpenLayout();
  const uint64_t b = B();
  auto src = Fixture(GetParam().layout, 48);
  auto dst = Fixture(GetParam().layout, 48);
  // P1: 3 full packs + 2 blocks + half a block (a block-opaque store clips the half block).
  const auto p1 = RandomTokens(14 * b + b / 2, 1);
  Store(*src, p1, 1, {0, opaque() ? 14 * b : p1.size()});
  EXPECT_EQ(Restore(*dst, "full", p1, 14 * b), 0u);
  // Partial: skip one block, stop after 9, across two pack boundaries (4B and 8B).
  EXPECT_EQ(Restore(*dst, "part", p1, 14 * b, b, 9 * b), 0u);

  // P2 diverges from P1 mid-block inside P1's second pack: its first new pack starts at h.
  const uint64_t h = 5 * b + b / 2 + 1;
  const auto p2 = Diverge(p1, h, 12 * b + 3, 2);
  Store(*src, p2, 2, {h, opaque() ? 12 * b : p2.size()});
  // Block 5 straddles P1's pack and P2's: for opaque blocks it comes whole from P2's pack.
  EXPECT_EQ(Restore(*dst, "p2", p2, 12 * b), 0u);
  EXPECT_EQ(Restore(*dst, "p2-mid", p2, 12 * b, 4 * b, 7 * b), 0u);
  EXPECT_EQ(Restore(*dst, "p1-again", p1, 14 * b), 0u);

  // P3 diverges from P2 two tokens later, in the same block: the ticket's middle record (P2's
  // pack, 2 tokens) holds no whole block of its own.
  const auto p3 = Diverge(p2, h + 2, 10 * b + 1, 3);
  Store(*src, p3, 3, {h + 2, opaque() ? 10 * b : p3.size()});
  EXPECT_EQ(Restore(*dst, "p3", p3, 10 * b), 0u);
  EXPECT_EQ(Restore(*dst, "p2-again", p2, 12 * b), 0u);
  EXPECT_TRUE(testing::EngineDirectory(*engine_).CheckInvariants().ok());
}

TEST_P(EngineBlockLayoutTest, AnotherLayoutIsRejectedByBindSlotsAndBeginStore) {
  OpenLayout();
  const KvCacheLayout other = GetParam().layout == KvCacheLayout::kPackedNhd
                                  ? KvCacheLayout::kPackedHnd
                                  : KvCacheLayout::kPackedNhd;
  auto src = Fixture(GetParam().layout, 16);
  auto wrong = Fixture(other, 16);
  const auto tokens = RandomTokens(4 * B() + 1, 5);
  Store(*src, tokens, 1, {0, opaque() ? 4 * B() : tokens.size()});

  StoreRequest sreq;
  sreq.envelope = Envelope("w");
  sreq.tokens = tokens;
  sreq.kv = &wrong->kv();
  const auto slots = wrong->Slots(tokens.size(), 3);
  sreq.slot_mapping = slots;
  auto store = engine_->BeginStore(sreq);
  ASSERT_EQ(store.status().code(), StatusCode::kGeometryMismatch) << store.status().ToString();
  EXPECT_NE(store.status().message().find(std::string(KvCacheLayoutName(other))),
            std::string::npos);
  EXPECT_NE(store.status().message().find(std::string(KvCacheLayoutName(GetParam().layout))),
            std::string::npos);

  auto lookup = engine_->Lookup(Envelope("w"), tokens, B());
  ASSERT_TRUE(lookup.ok());
  ASSERT_EQ(lookup->hit_tokens, 4 * B());
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("w");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok());
  const auto rslots = wrong->Slots(4 * B(), 4);
  const Status bound = handle->BindSlots(wrong->kv(), rslots);
  EXPECT_EQ(bound.code(), StatusCode::kGeometryMismatch) << bound.ToString();
  EXPECT_NE(bound.message().find(std::string(KvCacheLayoutName(other))), std::string::npos);
  // Nothing was bound: the right layout still binds and restores.
  ASSERT_TRUE(handle->BindSlots(src->kv(), src->Slots(4 * B(), 5)).ok());
  EXPECT_TRUE(handle->Finish().status.ok());
}

std::vector<LayoutBlock> BlockLayoutCases() {
  std::vector<LayoutBlock> v;
  for (KvCacheLayout l :
       {KvCacheLayout::kPackedNhd, KvCacheLayout::kPackedHnd, KvCacheLayout::kCpuBlock}) {
    for (uint32_t b : {16u, 32u, 64u, 128u, 256u}) v.push_back({l, b});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Vllm032, EngineBlockLayoutTest, ::testing::ValuesIn(BlockLayoutCases()),
                         [](const auto& p) {
                           std::string name(KvCacheLayoutName(p.param.layout));
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name + "_B" + std::to_string(p.param.block_size);
                         });

// kCpuBlock: whole blocks or an error, and no change on error.
TEST_F(EngineTest, CpuBlockLayoutChecksAlignmentAndBlockMappings) {
  ModelSpec m = SmallModel(3, 3, 16, 2, 32);
  m.layout = KvCacheLayout::kCpuBlock;
  // s = 192, W = 8 KiB: floor(W/s) = 42 tokens, rounded down to one block of 32 per stripe.
  const EngineOptions options = SmallOptions(dir_.path() + "/store", m, 8192);
  Open(options);
  ASSERT_EQ(engine_->geometry().tokens_per_stripe, 32u);
  auto src = Fixture(KvCacheLayout::kCpuBlock, 32);
  auto dst = Fixture(KvCacheLayout::kCpuBlock, 32);
  const auto tokens = RandomTokens(7 * 32 + 5, 9);

  StoreRequest sreq;
  sreq.envelope = Envelope("s");
  sreq.kv = &src->kv();
  const auto per_token = RandomSlots(tokens.size(), src->num_slots(), 1);
  sreq.tokens = tokens;
  sreq.slot_mapping = per_token;
  auto bad_store = engine_->BeginStore(sreq);
  EXPECT_EQ(bad_store.status().code(), StatusCode::kInvalidArgument) << "not whole blocks";
  const auto few = RandomTokens(31, 9);
  const auto few_slots = src->Slots(31, 2);
  sreq.tokens = few;
  sreq.slot_mapping = few_slots;
  EXPECT_EQ(engine_->BeginStore(sreq).status().code(), StatusCode::kInvalidArgument)
      << "less than one block";
  // A per-token-random trailing partial block is never moved, so it is not checked.
  auto slots = src->Slots(tokens.size(), 3);
  for (size_t i = 7 * 32; i < tokens.size(); ++i) slots[i] = slots[i - 7 * 32 + 1];
  std::swap(slots[7 * 32], slots[7 * 32 + 4]);
  ASSERT_TRUE(src->Fill(tokens, 0, std::span<const int64_t>(slots).first(7 * 32), 51).ok());
  sreq.tokens = tokens;
  sreq.slot_mapping = slots;
  auto store = engine_->BeginStore(sreq);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(store->stored_tokens(), (TokenInterval{0, 7 * 32}));
  for (uint32_t l = 0; l < 3; ++l) ASSERT_TRUE(store->LayerProduced(l).ok());
  ASSERT_TRUE(store->Finish().status.ok());

  // Granularity 1 is raised to whole blocks; a store of whole blocks never hits its last one.
  auto lookup = engine_->Lookup(Envelope("r"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 7u * 32);
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("r");
  req.tokens = tokens;
  req.endpoint_tokens = 7 * 32 - 1;
  EXPECT_EQ(engine_->StartRestore(req).status().code(), StatusCode::kInvalidArgument);
  req.endpoint_tokens = 7 * 32;
  req.begin_token = 5;
  EXPECT_EQ(engine_->StartRestore(req).status().code(), StatusCode::kInvalidArgument);
  req.begin_token = 32;
  auto handle = engine_->StartRestore(req);  // the failed attempts changed nothing
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  const auto per_token_dst = RandomSlots(6 * 32, dst->num_slots(), 4);
  EXPECT_EQ(handle->BindSlots(dst->kv(), per_token_dst).code(), StatusCode::kInvalidArgument);
  auto shifted = dst->Slots(6 * 32, 5);
  for (int64_t& x : shifted) ++x;  // every block starts at offset 1
  EXPECT_EQ(handle->BindSlots(dst->kv(), shifted).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(dst->Poison(0xA5).ok());
  const auto good = dst->Slots(6 * 32, 6);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), good).ok());
  RestoreOutcome out = handle->Finish();
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  auto bad = dst->Mismatches(tokens, 32, good, 51);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);

  // The pack header's rounded T validates on reopen, and the index comes back.
  src.reset();
  dst.reset();
  ASSERT_TRUE(engine_->Close().ok());
  engine_.reset();
  Open(options);
  auto again = engine_->Lookup(Envelope("again"), tokens, 32);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->hit_tokens, 7u * 32);
}

// The layout is part of the namespace: a store written in one layout never serves another.
TEST_F(EngineTest, AnotherLayoutIsAnotherNamespace) {
  ModelSpec nhd = SmallModel(4, 2, 16);
  {
    EngineOptions o = SmallOptions(dir_.path() + "/store", nhd, kW);
    auto e = Engine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_TRUE((*e)->Close().ok());
  }
  for (KvCacheLayout l : {KvCacheLayout::kPackedNhd, KvCacheLayout::kPackedHnd,
                          KvCacheLayout::kFlashAttnHnd, KvCacheLayout::kCpuBlock}) {
    ModelSpec m = nhd;
    m.layout = l;
    auto e = Engine::Open(SmallOptions(dir_.path() + "/store", m, kW));
    EXPECT_EQ(e.status().code(), StatusCode::kNamespaceMismatch)
        << KvCacheLayoutName(l) << ": " << e.status().ToString();
  }
}

// StoreMismatch::kReplace: a store of another namespace (another model identity, here another
// semantic config) or geometry is a cache whose key changed: the engine replaces it with an
// empty store instead of failing, serves none of the old KV, and keeps the epoch increasing.
TEST_F(EngineTest, AStoreOfAnotherIdentityIsReplacedNotServed) {
  const std::string store_dir = dir_.path() + "/store";
  const auto tokens = RandomTokens(3 * kT, 7);
  ModelSpec first = SmallModel(4, 2, 16);
  first.semantic_config = R"({"weights":"a"})";
  EngineOptions o = SmallOptions(store_dir, first, kW);
  o.on_store_mismatch = StoreMismatch::kReplace;
  uint64_t epoch = 0;
  {
    Open(o);
    auto src = Fixture();
    auto stored = StoreAll(*engine_, *src, tokens, 3, 1);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
    epoch = engine_->recovery().store_epoch;
    src.reset();
    ASSERT_TRUE(engine_->Close().ok());
    engine_.reset();
  }
  // kFail (the default) refuses and leaves the store as it is.
  ModelSpec second = first;
  second.semantic_config = R"({"weights":"b"})";
  EngineOptions strict = SmallOptions(store_dir, second, kW);
  EXPECT_EQ(Engine::Open(strict).status().code(), StatusCode::kNamespaceMismatch);
  // kReplace: a new, empty store; the lookup of the stored tokens misses.
  EngineOptions replacing = strict;
  replacing.on_store_mismatch = StoreMismatch::kReplace;
  Open(replacing);
  EXPECT_TRUE(engine_->recovery().created);
  EXPECT_GT(engine_->recovery().store_epoch, epoch);
  auto miss = engine_->Lookup(Envelope("after"), tokens, 16);
  ASSERT_TRUE(miss.ok()) << miss.status().ToString();
  EXPECT_EQ(miss->hit_tokens, 0u);
  ASSERT_TRUE(engine_->Close().ok());
  engine_.reset();
  // Another geometry (more KV heads) is replaced the same way.
  EngineOptions wider = SmallOptions(store_dir, SmallModel(4, 4, 16), kW);
  EXPECT_EQ(Engine::Open(wider).status().code(), StatusCode::kGeometryMismatch);
  wider.on_store_mismatch = StoreMismatch::kReplace;
  Open(wider);
  EXPECT_TRUE(engine_->recovery().created);
  ASSERT_TRUE(engine_->Close().ok());
  engine_.reset();
  // The same identity again keeps its store (and what it holds).
  Open(wider);
  EXPECT_FALSE(engine_->recovery().created);
}

// The identity record (persist/identity_record.h) is written beside the pack file: the fields
// the namespace was derived from, with that namespace.
TEST_F(EngineTest, TheStoreKeepsItsIdentityRecord) {
  ModelSpec m = SmallModel(4, 2, 16);
  m.model_id = "org/model \"quoted\"";
  m.semantic_config = R"({"rope":{"rope_theta":10000}})";
  m.tags = {"lora:a"};
  Open(SmallOptions(dir_.path() + "/store", m, kW));
  const persist::StorePaths paths(dir_.path() + "/store");
  auto text = DefaultEnv()->ReadSmallFile(paths.identity(), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, persist::RenderIdentityRecord(m, engine_->namespace_id()));
  EXPECT_NE(text->find(engine_->namespace_id().ToHex()), std::string::npos);
  EXPECT_NE(text->find(R"("model_id":"org/model \"quoted\"")"), std::string::npos) << *text;
}

}  // namespace
}  // namespace rangekv
