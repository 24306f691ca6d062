// Failure behaviour of the transfer engine (docs/design.md "Transfer engine", "Failure behaviour";
// paper 3.5 and Table 1): a failed span fails exactly its tokens and nothing wrong is delivered; a
// failed store group (EIO, ENOSPC, a torn write) makes nothing visible and its reservation is
// reclaimed only after the accepted writes drained; a dirty marker that cannot be made durable
// fails the store before any write; a snapshot that cannot be written fails Close and leaves the
// store dirty; cancellation with reads in flight reuses no bank early and leaks nothing; an
// unproven fence quarantines its bank, and a restore or store whose banks all get quarantined
// fails instead of waiting forever; a flipped payload byte fails exactly its tokens and drops
// the pack; power loss (unsynced data and directory entries lost) at any point of a session or its
// shutdown reopens to the latest clean state or to an empty index, never to stale bytes. Reads and
// writes are held in flight with a gated file seam (a sync point), never with sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "persist/store_layout.h"
#include "rangekv/engine.h"
#include "testing/dir_journal_env.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"
#include "testing/fault_env.h"
#include "testing/gate_env.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::Envelope;
using testing::GateEnv;
using testing::KvFixture;
using testing::RandomSlots;
using testing::RandomTokens;
using testing::RestoreAndVerify;
using testing::SmallModel;
using testing::SmallOptions;
using testing::StoreAll;
using testing::WaitMode;

constexpr uint64_t kW = 8192;  // 4 layers x (2 heads x 16 x bf16 = 128 B): T = 64
constexpr uint64_t kT = 64;
constexpr uint8_t kPoison = 0xA5;

class EngineFaultTest : public ::testing::Test {
 protected:
  void Open(Env* env, engine_internal::EngineInternalConfig config = {},
            uint32_t write_workers = 2) {
    EngineOptions o = SmallOptions(dir_.path() + "/store", SmallModel(8, 2, 16), kW);
    o.env = env;
    o.tuning.write_workers = write_workers;
    auto e = testing::OpenEngineForTesting(o, config);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    pack_path_ = dir_.path() + "/store/packs.rkv";
  }
  std::unique_ptr<KvFixture> Fixture() {
    auto f = KvFixture::Make(*engine_, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(f.ok());
    return std::move(f).value();
  }
  // File offset of layer `layer` of the pack holding path token `token`.
  uint64_t StripeOffset(uint64_t token, uint32_t layer) {
    auto& dir = testing::EngineDirectory(*engine_);
    for (const StoredPack& p : dir.ListPacks(engine_->namespace_id())) {
      if (p.record.path_token_begin <= token && token < p.record.path_token_end()) {
        return testing::EngineStore(*engine_).layout().Address(p.record.pack_slot, layer, 0);
      }
    }
    ADD_FAILURE() << "no pack holds token " << token;
    return 0;
  }
  void ExpectEverythingReturned() {
    auto read = testing::ReadPoolState(*engine_);
    EXPECT_EQ(read.owned_banks, 0u);
    EXPECT_EQ(read.free_slots, 4u);
    EXPECT_EQ(read.active_jobs, 0u);
    auto store = testing::StorePoolState(*engine_);
    EXPECT_EQ(store.owned_banks, 0u);
    EXPECT_EQ(store.free_slots, 4u);
    EXPECT_EQ(store.active_jobs, 0u);
    for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
      EXPECT_EQ(s.leases, 0u);
      EXPECT_NE(s.state, SlotState::kReserved);
    }
  }

  // An env the engine uses must outlive it (Close writes the snapshot through it): owned here,
  // declared before engine_, so destroyed after it.
  template <typename E, typename... Args>
  E& MakeEnv(Args&&... args) {
    envs_.push_back(std::make_unique<E>(std::forward<Args>(args)...));
    return static_cast<E&>(*envs_.back());
  }

  testing::TempDir dir_;
  std::vector<std::unique_ptr<Env>> envs_;
  std::string pack_path_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineFaultTest, FailedSpanFailsExactlyItsTokensAndDeliversNothingWrong) {
  auto& faults = MakeEnv<rangekv::testing::FaultInjectingEnv>(DefaultEnv());
  Open(&faults);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 1);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 3, 1)->outcome.status.ok());
  // EIO on layer 2 of the pack holding tokens [64, 128).
  rangekv::testing::FaultRule rule;
  rule.path = pack_path_;
  rule.op = rangekv::testing::FaultOp::kRead;
  rule.offset = StripeOffset(kT, 2);
  rule.length = kW;
  rule.kind = rangekv::testing::FaultKind::kIoError;
  faults.AddRule(rule);

  const RequestEnvelope env = Envelope("eio");
  auto lookup = engine_->Lookup(env, tokens, 1);
  ASSERT_TRUE(lookup.ok());
  ASSERT_EQ(lookup->hit_tokens, 4 * kT);
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(dst->Poison(kPoison).ok());
  const auto slots = RandomSlots(4 * kT, dst->num_slots(), 9);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  for (uint32_t l = 0; l < 8; ++l) {
    const Status s = handle->WaitLayer(l);
    if (l == 2) {
      EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
    } else {
      EXPECT_TRUE(s.ok()) << l << ": " << s.ToString();
    }
  }
  RestoreOutcome out = handle->Finish();
  EXPECT_EQ(out.status.code(), StatusCode::kIoError);
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0], (TokenInterval{kT, 2 * kT}));
  EXPECT_EQ(out.delivered_tokens, 3 * kT);
  EXPECT_EQ(out.work.failed_spans, 1u);
  EXPECT_EQ(out.work.quarantines, 0u);

  // Every other token is bit-exact in every layer; the failed tokens' layer-2 slots were never
  // written.
  auto bad = dst->Mismatches(std::span<const int32_t>(tokens).first(kT), 0,
                             std::span<const int64_t>(slots).first(kT), 3);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  bad = dst->Mismatches(tokens, 2 * kT, std::span<const int64_t>(slots).subspan(2 * kT), 3);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  for (uint64_t i = kT; i < 2 * kT; ++i) EXPECT_TRUE(dst->RowIs(2, slots[i], kPoison)) << i;
  ExpectEverythingReturned();

  // A short read is detected too (kShortTransfer), and only its tokens fail.
  faults.ClearRules();
  rule.offset = StripeOffset(3 * kT, 5);
  rule.kind = rangekv::testing::FaultKind::kShortTransfer;
  faults.AddRule(rule);
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("short"), tokens, 1, 3, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kShortTransfer);
  ASSERT_EQ(r->outcome.failed.size(), 1u);
  EXPECT_EQ(r->outcome.failed[0], (TokenInterval{3 * kT, 4 * kT}));
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ(r->poisoned_rows, 0u);
  ExpectEverythingReturned();
}

TEST_F(EngineFaultTest, FailedStoreGroupMakesNothingVisibleAndReclaimsAfterWritesDrain) {
  auto& faults = MakeEnv<rangekv::testing::FaultInjectingEnv>(DefaultEnv());
  // Group 0's writes (layers 0..3 of the first pack slot) are held at a gate; group 1's write of
  // layer 5 fails with ENOSPC meanwhile.
  auto& gate = MakeEnv<GateEnv>(&faults, "packs.rkv", GateEnv::Op::kWrite, /*offset=*/2 << 20,
                                /*length=*/4 * kW);  // data starts at 2 MiB: slot 0, layers 0..3
  // Enough write workers that group 1's writes run while group 0's are held.
  Open(&gate, {}, /*write_workers=*/8);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(kT + 10, 2);  // 2 records: slots 0 and 1
  rangekv::testing::FaultRule rule;
  rule.path = pack_path_;
  rule.op = rangekv::testing::FaultOp::kWrite;
  rule.offset = testing::EngineStore(*engine_).layout().Address(0, 5, 0);
  rule.length = kW;
  rule.kind = rangekv::testing::FaultKind::kNoSpace;
  rule.times = 1;
  faults.AddRule(rule);

  const auto slots = RandomSlots(tokens.size(), src->num_slots(), 1);
  ASSERT_TRUE(src->Fill(tokens, 0, slots, 5).ok());
  gate.Close();
  StoreRequest req;
  req.envelope = Envelope("store");
  req.tokens = tokens;
  req.kv = &src->kv();
  req.slot_mapping = slots;
  auto handle = engine_->BeginStore(req);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  for (uint32_t l = 0; l < 8; ++l) ASSERT_TRUE(handle->LayerProduced(l).ok());
  gate.WaitHeld(1);  // at least one of group 0's writes is accepted and in flight
  // Wait until group 1 failed: its failure is recorded while group 0 still writes.
  while (engine_->GetStats().failed_spans == 0) std::this_thread::yield();
  // Not visible, and not reclaimed: accepted writes are still in flight into slot 0.
  auto lookup = engine_->Lookup(Envelope("peek"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 0u);
  EXPECT_EQ(testing::EngineDirectory(*engine_).Slot(0).state, SlotState::kReserved);
  gate.Open();
  StoreOutcome out = handle->Finish();
  EXPECT_EQ(out.status.code(), StatusCode::kNoSpace) << out.status.ToString();
  EXPECT_FALSE(out.visible);
  EXPECT_EQ(engine_->GetStats().stores_aborted, 1u);
  // Reclaimed now, nothing visible, nothing quarantined.
  EXPECT_EQ(testing::EngineDirectory(*engine_).Slot(0).state, SlotState::kFree);
  lookup = engine_->Lookup(Envelope("after"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 0u);
  EXPECT_EQ(testing::StorePoolState(*engine_).quarantined_banks, 0u);
  ExpectEverythingReturned();

  // The fault fired once: storing again succeeds and restores bit for bit.
  auto again = StoreAll(*engine_, *src, tokens, 5, 1);
  ASSERT_TRUE(again.ok() && again->outcome.status.ok()) << again->outcome.status.ToString();
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("r"), tokens, 1, 5, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
}

TEST_F(EngineFaultTest, CancelWithReadsInFlightReusesNoBankEarlyAndLeaksNothing) {
  auto& gate = MakeEnv<GateEnv>(DefaultEnv(), "packs.rkv", GateEnv::Op::kRead, 2 << 20);
  // Every read bank transition, checked for legality as it happens.
  struct BankLog {
    std::mutex mu;
    std::map<uint32_t, bool> owned;
    uint32_t violations = 0;
    uint32_t acquired = 0;
  };
  auto log = std::make_shared<BankLog>();
  engine_internal::EngineInternalConfig config;
  config.hooks.read_bank_observer = [log](engine_internal::BankEvent e, uint32_t bank, uint64_t) {
    std::lock_guard<std::mutex> l(log->mu);
    const bool was = log->owned[bank];
    if (e == engine_internal::BankEvent::kAcquired) {
      if (was) ++log->violations;
      log->owned[bank] = true;
      ++log->acquired;
    } else {
      if (!was) ++log->violations;
      log->owned[bank] = false;
    }
  };
  Open(&gate, config);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(4 * kT + 1, 3);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 7, 1)->outcome.status.ok());

  gate.Close();
  const RequestEnvelope env = Envelope("cancel");
  auto lookup = engine_->Lookup(env, tokens, 1);  // prefetch starts: reads are held
  ASSERT_TRUE(lookup.ok() && lookup->prefetch_started);
  gate.WaitHeld(2);  // both read workers hold a read in flight
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = env;
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(dst->Poison(kPoison).ok());
  const auto slots = RandomSlots(lookup->hit_tokens, dst->num_slots(), 5);
  ASSERT_TRUE(handle->BindSlots(dst->kv(), slots).ok());
  handle->Cancel();

  // The two banks under in-flight reads stay owned; the leases stay while reads are in flight.
  auto pool = testing::ReadPoolState(*engine_);
  EXPECT_EQ(pool.owned_banks, 2u);
  EXPECT_EQ(pool.quarantined_banks, 0u);
  uint32_t leased = 0;
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) leased += s.leases;
  EXPECT_GT(leased, 0u);

  gate.Open();
  RestoreOutcome out = handle->Finish();
  EXPECT_EQ(out.status.code(), StatusCode::kCancelled);
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0], (TokenInterval{0, 4 * kT}));
  EXPECT_EQ(out.delivered_tokens, 0u);
  EXPECT_EQ(out.work.scatter_launches, 0u);
  EXPECT_EQ(engine_->GetStats().cancelled_restores, 1u);
  // Nothing reached the destination.
  ASSERT_TRUE(dst->Sync().ok());
  for (uint32_t l = 0; l < 8; ++l) {
    for (int64_t s : slots) ASSERT_TRUE(dst->RowIs(l, s, kPoison));
  }
  ExpectEverythingReturned();
  {
    std::lock_guard<std::mutex> l(log->mu);
    EXPECT_EQ(log->violations, 0u);
    EXPECT_EQ(log->acquired, 2u);
  }

  // The engine is healthy afterwards.
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("after"), tokens, 1, 7, 6);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outcome.status.ok());
  EXPECT_EQ(r->mismatches, 0u);
  std::lock_guard<std::mutex> l(log->mu);
  EXPECT_EQ(log->violations, 0u);
}

TEST_F(EngineFaultTest, ReleasedPrefetchKeepsLeasesUntilItsReadsDrain) {
  auto& gate = MakeEnv<GateEnv>(DefaultEnv(), "packs.rkv", GateEnv::Op::kRead, 2 << 20);
  Open(&gate);
  auto src = Fixture();
  const auto tokens = RandomTokens(2 * kT + 1, 4);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 9, 1)->outcome.status.ok());
  gate.Close();
  const RequestEnvelope env = Envelope("gone");
  auto lookup = engine_->Lookup(env, tokens, 1);
  ASSERT_TRUE(lookup.ok() && lookup->prefetch_started);
  gate.WaitHeld(2);
  engine_->ReleaseRequest(env);  // the request finished unclaimed
  uint32_t leased = 0;
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) leased += s.leases;
  EXPECT_GT(leased, 0u);  // reads in flight still need the packs
  gate.Open();
  while (testing::ReadPoolState(*engine_).active_jobs != 0) std::this_thread::yield();
  ExpectEverythingReturned();
}

TEST_F(EngineFaultTest, UnprovenScatterFenceQuarantinesTheBank) {
  auto fired = std::make_shared<std::atomic<int>>(0);
  engine_internal::EngineInternalConfig config;
  config.hooks.scatter_fence_fault = [fired](uint32_t, uint32_t layer) {
    if (layer == 1 && fired->fetch_add(1) == 0) return Internal("injected device fault");
    return OkStatus();
  };
  Open(DefaultEnv(), config);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(3 * kT + 1, 5);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 11, 1)->outcome.status.ok());
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("q"), tokens, 1, 11, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kInternal) << r->outcome.status.ToString();
  ASSERT_EQ(r->outcome.failed.size(), 1u);
  EXPECT_EQ(r->outcome.failed[0].size(), kT);  // exactly one stripe's tokens
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_EQ(r->poisoned_rows, 0u);
  EXPECT_EQ(r->outcome.work.quarantines, 1u);
  auto pool = testing::ReadPoolState(*engine_);
  EXPECT_EQ(pool.quarantined_banks, 1u);
  EXPECT_EQ(pool.free_banks, 3u);
  // The engine keeps serving with the banks it can prove.
  auto again = RestoreAndVerify(*engine_, *dst, Envelope("q2"), tokens, 1, 11, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->outcome.status.ok());
  EXPECT_EQ(again->mismatches, 0u);
}

// Every fence fails: each of the 4 read banks is quarantined after its first scatter, while most
// stripes are still pending. Finish (and each per-layer wait, host or stream) must return with
// every undelivered token reported failed, not wait for a bank that will never be free; a later
// restore with no usable bank fails at once.
TEST_F(EngineFaultTest, RestoreWhoseBanksAllGetQuarantinedFinishesWithItsTokensFailed) {
  for (WaitMode mode :
       {WaitMode::kFinishOnly, WaitMode::kEveryLayer, WaitMode::kStreamEveryLayer}) {
    SCOPED_TRACE(static_cast<int>(mode));
    engine_.reset();
    engine_internal::EngineInternalConfig config;
    config.hooks.scatter_fence_fault = [](uint32_t, uint32_t) {
      return Internal("injected device fault");
    };
    Open(DefaultEnv(), config);
    auto src = Fixture();
    auto dst = Fixture();
    const auto tokens = RandomTokens(4 * kT + 1, 21);
    ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 13, 1)->outcome.status.ok());
    // 4 packs x 8 layers = 32 stripes for 4 banks.
    auto r = RestoreAndVerify(*engine_, *dst, Envelope("q"), tokens, 1, 13, 2, mode);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->outcome.status.ok());
    ASSERT_EQ(r->outcome.failed.size(), 1u);
    EXPECT_EQ(r->outcome.failed[0], (TokenInterval{0, 4 * kT}));
    EXPECT_EQ(r->outcome.delivered_tokens, 0u);
    EXPECT_EQ(r->outcome.work.quarantines, 4u);
    EXPECT_EQ(r->outcome.work.failed_spans, 32u);
    EXPECT_EQ(r->mismatches, 0u);
    EXPECT_EQ(r->poisoned_rows, 0u);
    auto pool = testing::ReadPoolState(*engine_);
    EXPECT_EQ(pool.quarantined_banks, 4u);
    EXPECT_EQ(pool.owned_banks, 0u);
    EXPECT_EQ(pool.active_jobs, 0u);
    EXPECT_EQ(pool.free_slots, 4u);

    // No bank is left: the next restore fails every token at once, and holds no lease after.
    auto again = RestoreAndVerify(*engine_, *dst, Envelope("q2"), tokens, 1, 13, 3, mode);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->outcome.status.code(), StatusCode::kDeviceFault)
        << again->outcome.status.ToString();
    ASSERT_EQ(again->outcome.failed.size(), 1u);
    EXPECT_EQ(again->outcome.failed[0], (TokenInterval{0, 4 * kT}));
    EXPECT_EQ(again->outcome.work.read_bank_acquisitions, 0u);
    EXPECT_EQ(again->poisoned_rows, 0u);
    for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
      EXPECT_EQ(s.leases, 0u);
    }
  }
}

// Every gather is unproven: each store quarantines the banks it gathered into and fails. Once no
// store bank is left, a store must fail at once (kDeviceFault) and settle, not wait in Finish
// for a bank; nothing becomes visible and no reservation is left behind.
TEST_F(EngineFaultTest, StoreWhoseBanksAllGetQuarantinedFailsInsteadOfWaiting) {
  engine_internal::EngineInternalConfig config;
  config.hooks.gather_fault = [](uint32_t) { return Internal("injected device fault"); };
  Open(DefaultEnv(), config);
  auto src = Fixture();
  uint32_t stores = 0;
  while (testing::StorePoolState(*engine_).quarantined_banks < 4) {
    ASSERT_LT(stores, 4u);  // each store quarantines at least the bank of its first gather
    auto r = StoreAll(*engine_, *src, RandomTokens(2 * kT, 40 + stores), 7, stores + 1);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->outcome.status.code(), StatusCode::kInternal) << r->outcome.status.ToString();
    EXPECT_FALSE(r->outcome.visible);
    ++stores;
  }
  auto last = StoreAll(*engine_, *src, RandomTokens(2 * kT, 99), 7, 9);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->outcome.status.code(), StatusCode::kDeviceFault)
      << last->outcome.status.ToString();
  EXPECT_FALSE(last->outcome.visible);
  EXPECT_EQ(last->outcome.work.store_bank_acquisitions, 0u);
  auto pool = testing::StorePoolState(*engine_);
  EXPECT_EQ(pool.owned_banks, 0u);
  EXPECT_EQ(pool.active_jobs, 0u);
  EXPECT_EQ(pool.free_slots, 4u);
  for (const SlotInfo& s : testing::EngineDirectory(*engine_).Slots()) {
    EXPECT_NE(s.state, SlotState::kReserved);
  }
  EXPECT_TRUE(testing::EngineDirectory(*engine_).ListPacks(engine_->namespace_id()).empty());
}

// Flips one byte of the pack file at `offset` (as bit rot or a foreign writer would).
void FlipByte(const std::string& path, uint64_t offset) {
  auto f = DefaultEnv()->OpenFile(path, {});
  ASSERT_TRUE(f.ok());
  uint8_t b = 0;
  ASSERT_EQ(*(*f)->ReadAt(offset, &b, 1), 1u);
  b ^= 0x10;
  ASSERT_EQ(*(*f)->WriteAt(offset, &b, 1), 1u);
  ASSERT_TRUE((*f)->Sync().ok());
}

TEST_F(EngineFaultTest, FlippedPayloadByteFailsExactlyItsTokensAndDropsThePack) {
  Open(DefaultEnv());
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(3 * kT + 1, 8);
  auto stored = StoreAll(*engine_, *src, tokens, 15, 1);
  ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
  EXPECT_GT(stored->work.digest_launches, 0u);  // digests are computed at store
  // Flip one byte of layer 6 of the pack holding tokens [128, 192) on disk.
  FlipByte(pack_path_, StripeOffset(2 * kT, 6) + 1000);
  auto r = RestoreAndVerify(*engine_, *dst, Envelope("digest"), tokens, 1, 15, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kCorruption) << r->outcome.status.ToString();
  ASSERT_EQ(r->outcome.failed.size(), 1u);
  EXPECT_EQ(r->outcome.failed[0], (TokenInterval{2 * kT, 3 * kT}));
  EXPECT_EQ(r->outcome.delivered_tokens, 2 * kT);
  EXPECT_EQ(r->outcome.work.checksum_failures, 1u);
  EXPECT_GT(r->outcome.work.verified_spans, 0u);
  EXPECT_EQ(r->mismatches, 0u);
  // The failed block's rows may hold the bytes read for them (HostDevice copies and digests in
  // one pass: span_digest.h, VerifiedScatterArgs); only the row with the flipped byte differs
  // from its own bytes, and the whole stripe is reported failed.
  EXPECT_LE(r->poisoned_rows, 1u);
  ExpectEverythingReturned();

  // The pack was dropped: the next lookup ends where it began, and everything before it still
  // restores bit for bit.
  auto lookup = engine_->Lookup(Envelope("after"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 2 * kT);
  engine_->ReleaseRequest(Envelope("after"));
  auto again = RestoreAndVerify(*engine_, *dst, Envelope("again"), tokens, 1, 15, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->outcome.status.ok()) << again->outcome.status.ToString();
  EXPECT_EQ(again->lookup.hit_tokens, 2 * kT);
  EXPECT_EQ(again->mismatches, 0u);
  // Storing the prefix again rewrites the dropped tail; it restores bit for bit.
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 15, 1)->outcome.status.ok());
  auto healed = RestoreAndVerify(*engine_, *dst, Envelope("healed"), tokens, 1, 15, 4);
  ASSERT_TRUE(healed.ok());
  EXPECT_TRUE(healed->outcome.status.ok()) << healed->outcome.status.ToString();
  EXPECT_EQ(healed->lookup.hit_tokens, 3 * kT);
  EXPECT_EQ(healed->mismatches, 0u);
  EXPECT_EQ(healed->outcome.work.checksum_failures, 0u);
}

// The same flipped byte with each place the verdict is decided: on the job's stream
// (HostDevice's default), or on each bank's stream joined by an event (what a GPU with staged
// reads takes, here on HostDevice with forced staging); and each way of waiting. The layer's host
// wait reports the corruption and every other row arrives bit for bit. On bank streams the failed
// stripe's rows stay untouched (its scatter was gated off); on the job's stream HostDevice's
// verified scatter may have written the failed block's rows in the pass that digested them, so
// the row holding the flipped byte may hold it: it is reported failed, and no other row differs.
enum class VerdictPlace : uint8_t { kJobStream, kBankStreams };

class VerdictFaultTest : public EngineFaultTest,
                         public ::testing::WithParamInterface<std::tuple<VerdictPlace, WaitMode>> {
};

TEST_P(VerdictFaultTest, FlippedByteFailsOnlyItsStripeWhereverTheVerdictIsDecided) {
  const auto [place, wait] = GetParam();
  engine_internal::EngineInternalConfig config;
  config.force_staging = place == VerdictPlace::kBankStreams;
  Open(DefaultEnv(), config);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(3 * kT + 1, 9);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 16, 1)->outcome.status.ok());
  FlipByte(pack_path_, StripeOffset(kT, 3) + 77);  // layer 3 of the pack of tokens [64, 128)

  auto r = RestoreAndVerify(*engine_, *dst, Envelope("verdict"), tokens, 1, 16, 2, wait);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kCorruption) << r->outcome.status.ToString();
  ASSERT_EQ(r->outcome.failed.size(), 1u);
  EXPECT_EQ(r->outcome.failed[0], (TokenInterval{kT, 2 * kT}));
  EXPECT_EQ(r->outcome.work.checksum_failures, 1u);
  EXPECT_GT(r->outcome.work.verified_spans, 0u);
  EXPECT_EQ(r->mismatches, 0u);
  if (place == VerdictPlace::kBankStreams) {
    EXPECT_EQ(r->poisoned_rows, 0u);
    for (uint64_t i = kT; i < 2 * kT; ++i) EXPECT_TRUE(dst->RowIs(3, r->slots[i], kPoison));
  } else {
    EXPECT_LE(r->poisoned_rows, 1u);
  }
  ExpectEverythingReturned();
}

// A host wait on the layer returns the corruption itself, not only Finish: with the device
// verdict the layer's event completes before the reaper has confirmed its stripes.
TEST_F(EngineFaultTest, WaitLayerReportsADeviceVerdictsCorruption) {
  Open(DefaultEnv());
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(2 * kT + 1, 10);  // a lookup keeps the last token
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 17, 1)->outcome.status.ok());
  FlipByte(pack_path_, StripeOffset(0, 5) + 9);
  auto lookup = engine_->Lookup(Envelope("wait"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  ASSERT_EQ(lookup->hit_tokens, 2 * kT);
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope("wait");
  req.tokens = tokens;
  req.endpoint_tokens = lookup->hit_tokens;
  auto handle = engine_->StartRestore(req);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  ASSERT_TRUE(handle->BindSlots(dst->kv(), dst->Slots(2 * kT, 3)).ok());
  for (uint32_t l = 0; l < engine_->geometry().layers; ++l) {
    const Status s = handle->WaitLayer(l);
    // Layer 5 reports its corruption; the pack's later layers may fail as dropped too (read
    // after the drop), or pass (verified before it).
    if (l == 5 || !s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << l << ": " << s.ToString();
    }
  }
  const RestoreOutcome out = handle->Finish();
  EXPECT_EQ(out.status.code(), StatusCode::kCorruption);
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0], (TokenInterval{0, kT}));
  EXPECT_EQ(out.work.checksum_failures, 1u);
  ExpectEverythingReturned();
}

std::string VerdictCaseName(const ::testing::TestParamInfo<VerdictFaultTest::ParamType>& info) {
  static const char* const kPlaces[] = {"JobStream", "BankStreams"};
  static const char* const kWaits[] = {"Finish", "WaitLayer", "StreamWaitLayer"};
  return std::string(kPlaces[static_cast<int>(std::get<0>(info.param))]) +
         kWaits[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    PlacesAndWaits, VerdictFaultTest,
    ::testing::Combine(::testing::Values(VerdictPlace::kJobStream, VerdictPlace::kBankStreams),
                       ::testing::Values(WaitMode::kFinishOnly, WaitMode::kEveryLayer,
                                         WaitMode::kStreamEveryLayer)),
    VerdictCaseName);

TEST_F(EngineFaultTest, TornWriteFailsItsStoreAndTheEngineKeepsServing) {
  auto& faults = MakeEnv<rangekv::testing::FaultInjectingEnv>(DefaultEnv());
  Open(&faults);
  auto src = Fixture();
  auto dst = Fixture();
  const auto kept = RandomTokens(2 * kT + 1, 20);  // slots 0, 1, 2
  ASSERT_TRUE(StoreAll(*engine_, *src, kept, 21, 1)->outcome.status.ok());
  // The next store's pack goes to the lowest free slot, 3: half of its layer-5 write reaches
  // the file, then the write fails.
  const auto torn = RandomTokens(kT - 5, 22);
  rangekv::testing::FaultRule rule;
  rule.path = pack_path_;
  rule.op = rangekv::testing::FaultOp::kWrite;
  rule.offset = testing::EngineStore(*engine_).layout().Address(3, 5, 0);
  rule.length = kW;
  rule.kind = rangekv::testing::FaultKind::kTornWrite;
  rule.times = 1;
  faults.AddRule(rule);
  auto r = StoreAll(*engine_, *src, torn, 23, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kIoError) << r->outcome.status.ToString();
  EXPECT_FALSE(r->outcome.visible);
  EXPECT_EQ(faults.counters().torn_writes, 1u);
  EXPECT_EQ(engine_->GetStats().stores_aborted, 1u);
  auto lookup = engine_->Lookup(Envelope("torn"), torn, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, 0u);
  EXPECT_EQ(testing::EngineDirectory(*engine_).Slot(3).state, SlotState::kFree);
  // The other prefix keeps serving, bit for bit.
  auto other = RestoreAndVerify(*engine_, *dst, Envelope("kept"), kept, 1, 21, 3);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->outcome.status.ok());
  EXPECT_EQ(other->mismatches, 0u);
  // Storing again rewrites the torn stripe whole; its new digests check out.
  ASSERT_TRUE(StoreAll(*engine_, *src, torn, 23, 2)->outcome.status.ok());
  auto again = RestoreAndVerify(*engine_, *dst, Envelope("again"), torn, 1, 23, 4);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->outcome.status.ok()) << again->outcome.status.ToString();
  EXPECT_EQ(again->lookup.hit_tokens, torn.size() - 1);
  EXPECT_EQ(again->mismatches, 0u);
  EXPECT_EQ(again->outcome.work.checksum_failures, 0u);
  ExpectEverythingReturned();
}

TEST_F(EngineFaultTest, DirtyMarkerFailureFailsTheStoreBeforeAnyWrite) {
  auto& faults = MakeEnv<rangekv::testing::FaultInjectingEnv>(DefaultEnv());
  Open(&faults);
  auto src = Fixture();
  auto dst = Fixture();
  const auto tokens = RandomTokens(kT + 7, 24);
  // The marker's directory entry cannot be made durable (EIO on every directory fsync).
  faults.FailEnvOp(rangekv::testing::EnvOp::kSyncDir, StatusCode::kIoError, /*times=*/-1);
  auto r = StoreAll(*engine_, *src, tokens, 25, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kIoError) << r->outcome.status.ToString();
  EXPECT_NE(r->outcome.status.message().find("dirty marker"), std::string::npos);
  EXPECT_FALSE(r->outcome.visible);
  EXPECT_EQ(r->work.native_writes, 0u);  // nothing reached the pack file
  EXPECT_EQ(r->work.bytes_written, 0u);
  ExpectEverythingReturned();
  // Once the directory can be synced again, the next store retries the marker and succeeds.
  faults.ClearEnvOpFailures();
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 25, 1)->outcome.status.ok());
  auto restored = RestoreAndVerify(*engine_, *dst, Envelope("after"), tokens, 1, 25, 2);
  ASSERT_TRUE(restored.ok());
  EXPECT_TRUE(restored->outcome.status.ok());
  EXPECT_EQ(restored->mismatches, 0u);
}

TEST_F(EngineFaultTest, NoSpaceForTheSnapshotFailsCloseAndTheNextOpenReplaysTheJournal) {
  auto& faults = MakeEnv<rangekv::testing::FaultInjectingEnv>(DefaultEnv());
  Open(&faults);
  auto src = Fixture();
  const auto tokens = RandomTokens(kT + 7, 26);
  ASSERT_TRUE(StoreAll(*engine_, *src, tokens, 27, 1)->outcome.status.ok());
  src.reset();
  const persist::StorePaths paths(dir_.path() + "/store");
  rangekv::testing::FaultRule rule;
  rule.path = paths.snapshot_temp();
  rule.op = rangekv::testing::FaultOp::kWrite;
  rule.kind = rangekv::testing::FaultKind::kNoSpace;
  faults.AddRule(rule);
  const Status closed = engine_->Close();
  EXPECT_EQ(closed.code(), StatusCode::kNoSpace) << closed.ToString();
  EXPECT_EQ(engine_->Close().code(), StatusCode::kNoSpace);  // idempotent
  EXPECT_TRUE(DefaultEnv()->FileExists(paths.dirty_marker()));
  EXPECT_FALSE(DefaultEnv()->FileExists(paths.snapshot()));
  faults.ClearRules();
  // The marker stayed, and so did the session's journal (committed before the snapshot was
  // attempted): the next open replays it and finds the prefix (checked bit for bit by
  // RestoreAndVerify elsewhere; here the hit).
  Open(&faults);
  EXPECT_TRUE(engine_->recovery().journal_replayed) << engine_->recovery().detail;
  EXPECT_TRUE(engine_->recovery().loaded);
  auto lookup = engine_->Lookup(Envelope("kept"), tokens, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->hit_tokens, tokens.size() - 1);
  engine_->ReleaseRequest(Envelope("kept"));
}

// A journal that fails under durability=every_publish (ENOSPC while appending, EIO on its
// fsync), end to end through the Engine: the store caught by the failure returns visible but not
// durable, with the error, and no later store is acknowledged durable; the engine keeps serving
// every store bit for bit; the journal file is gone (a crash from here on discards the index
// rather than replay a journal that no longer describes the store) and a power loss before the
// snapshot then reopens to misses or exact bytes; a clean shutdown keeps everything.
// An engine over `dir` with the small test geometry, `packs` packs and `durability`; null (and a
// test failure) when it does not open.
std::unique_ptr<Engine> OpenSmall(Env* env, const std::string& dir, uint64_t packs,
                                  std::string_view durability,
                                  engine_internal::EngineTestHooks hooks = {}) {
  EngineOptions o = SmallOptions(dir, SmallModel(8, 2, 16), kW, packs);
  o.env = env;
  EXPECT_TRUE(o.durability.Set(durability).ok());
  engine_internal::EngineInternalConfig config;
  config.hooks = std::move(hooks);
  auto e = testing::OpenEngineForTesting(o, config);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Restores `tokens` (stored with payload `seed`) into a fresh paged KV and checks every byte:
// the tokens restored, 0 on a miss or on anything wrong (which also fails the test).
uint64_t RestoreExact(Engine& e, std::span<const int32_t> tokens, uint64_t seed) {
  auto kv = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
  EXPECT_TRUE(kv.ok());
  if (!kv.ok()) return 0;
  auto r = RestoreAndVerify(e, **kv, Envelope("r"), tokens, 1, seed, 5);
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return 0;
  EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
  EXPECT_EQ(r->outcome.work.checksum_failures, 0u);
  EXPECT_EQ(r->mismatches, 0u);
  return r->mismatches == 0 && r->outcome.status.ok() ? r->lookup.hit_tokens : 0;
}

struct JournalFault {
  const char* name;
  StatusCode code;
};

class EngineJournalFaultTest : public ::testing::TestWithParam<JournalFault> {};

TEST_P(EngineJournalFaultTest, NeverAcknowledgedDurableAndNothingWrongServed) {
  for (const bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "power loss before the snapshot" : "clean shutdown");
    testing::TempDir root;
    const std::string dir = root.path() + "/store";
    const persist::StorePaths paths(dir);
    const auto a = RandomTokens(kT + 9, 40);
    const auto b = RandomTokens(kT + 9, 41);
    const auto c = RandomTokens(kT + 9, 42);
    rangekv::testing::FaultInjectingEnv faults(DefaultEnv());
    auto open = [&](Env* env, engine_internal::EngineTestHooks hooks = {}) {
      return OpenSmall(env, dir, 8, "every_publish", std::move(hooks));
    };
    auto restore = [](Engine& e, std::span<const int32_t> tokens) {
      return RestoreExact(e, tokens, 43);
    };
    {
      engine_internal::EngineTestHooks hooks;
      if (crash) {
        hooks.shutdown_hook = [](persist::ShutdownStep at) {
          return at == persist::ShutdownStep::kPayloadSynced
                     ? Status(StatusCode::kAborted, "power loss")
                     : OkStatus();
        };
      }
      auto e = open(&faults, hooks);
      ASSERT_NE(e, nullptr);
      auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
      ASSERT_TRUE(kv.ok());
      auto stored_a = StoreAll(*e, **kv, a, 43, 1);
      ASSERT_TRUE(stored_a.ok());
      EXPECT_TRUE(stored_a->outcome.status.ok());
      EXPECT_TRUE(stored_a->outcome.durable);
      if (GetParam().code == StatusCode::kNoSpace) {
        rangekv::testing::FaultRule rule;
        rule.path = paths.journal_temp();  // the journal's File keeps the name it was created as
        rule.op = rangekv::testing::FaultOp::kWrite;
        rule.kind = rangekv::testing::FaultKind::kNoSpace;
        faults.AddRule(rule);
      } else {
        faults.FailEnvOp(rangekv::testing::EnvOp::kSync, GetParam().code, 1, paths.journal_temp());
      }
      auto stored_b = StoreAll(*e, **kv, b, 43, 2);
      ASSERT_TRUE(stored_b.ok());
      EXPECT_TRUE(stored_b->outcome.visible);
      EXPECT_FALSE(stored_b->outcome.durable);
      EXPECT_EQ(stored_b->outcome.status.code(), GetParam().code)
          << stored_b->outcome.status.ToString();
      faults.ClearRules();
      faults.ClearEnvOpFailures();
      // Journaling ended for the session: nothing later is acknowledged durable either.
      auto stored_c = StoreAll(*e, **kv, c, 43, 3);
      ASSERT_TRUE(stored_c.ok());
      EXPECT_TRUE(stored_c->outcome.visible);
      EXPECT_FALSE(stored_c->outcome.durable);
      EXPECT_FALSE(stored_c->outcome.status.ok());
      EXPECT_EQ(e->GetStats().journal_failures, 1u);
      EXPECT_FALSE(DefaultEnv()->FileExists(paths.journal()));
      kv->reset();
      // Still served, bit for bit, while the engine runs.
      EXPECT_EQ(restore(*e, a), a.size() - 1);
      EXPECT_EQ(restore(*e, b), b.size() - 1);
      EXPECT_EQ(restore(*e, c), c.size() - 1);
      const Status closed = e->Close();
      EXPECT_EQ(closed.ok(), !crash) << closed.ToString();
    }
    if (crash) {
      ASSERT_TRUE(faults.DropUnsyncedData().ok());
    }
    auto e = open(DefaultEnv());
    ASSERT_NE(e, nullptr);
    const uint64_t hit_a = restore(*e, a), hit_b = restore(*e, b), hit_c = restore(*e, c);
    if (crash) {
      // Dirty, no journal: the index is discarded (misses), never replayed from a stale file.
      EXPECT_FALSE(e->recovery().loaded) << e->recovery().detail;
      EXPECT_EQ(hit_a + hit_b + hit_c, 0u);
    } else {
      EXPECT_TRUE(e->recovery().loaded) << e->recovery().reason << ": " << e->recovery().detail;
      EXPECT_EQ(hit_a, a.size() - 1);
      EXPECT_EQ(hit_b, b.size() - 1);
      EXPECT_EQ(hit_c, c.size() - 1);
    }
    EXPECT_TRUE(e->Close().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(EnospcAndEio, EngineJournalFaultTest,
                         ::testing::Values(JournalFault{"NoSpaceWhileAppending",
                                                        StatusCode::kNoSpace},
                                           JournalFault{"IoErrorOnFsync", StatusCode::kIoError}),
                         [](const auto& p) { return std::string(p.param.name); });

// Power loss (FaultInjectingEnv::DropUnsyncedData for file contents, DirJournalEnv::Crash for
// every surviving subset of unsynced directory entries) in a second session: before it writes,
// after its writes, and after each step of its clean shutdown. Session 1 stores A (3 packs) and
// closes cleanly; session 2 restores A, then stores B (3 packs) into a 4-pack store, which
// evicts A's two tail packs and overwrites their slots. The reopen must load the latest clean
// state (A's head + B, or all of A before session 2 wrote) or start empty; a stale snapshot
// over the new payload would show as checksum failures, which fail the test.
TEST(EnginePowerLossTest, ReopenLoadsTheLatestCleanStateOrDiscards) {
  // Points: kBeforeWrite, -1 = after session 2's writes, then the shutdown steps 0..6.
  constexpr int kBeforeWrite = -2;
  const auto a = RandomTokens(2 * kT + 10, 30);
  const auto b = RandomTokens(2 * kT + 10, 31);
  testing::TempDir root;
  int cases = 0, loaded_old = 0, loaded_new = 0, discarded = 0;
  auto open = [](Env* env, const std::string& dir, engine_internal::EngineTestHooks hooks = {}) {
    EngineOptions o = SmallOptions(dir, SmallModel(8, 2, 16), kW, /*packs=*/4);
    o.env = env;
    o.durability.mode = Durability::Mode::kNone;  // the store without a journal
    engine_internal::EngineInternalConfig config;
    config.hooks = std::move(hooks);
    auto e = testing::OpenEngineForTesting(o, config);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  };
  // The hit of `tokens`, restored and checked bit for bit (no failed token, no checksum
  // failure).
  auto restore = [](Engine& e, std::span<const int32_t> tokens, uint64_t seed) -> uint64_t {
    auto kv = KvFixture::Make(e, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(kv.ok());
    auto r = RestoreAndVerify(e, **kv, Envelope("r"), tokens, 1, seed, 5);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return 0;
    EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_EQ(r->outcome.work.checksum_failures, 0u);
    EXPECT_EQ(r->mismatches, 0u);
    return r->lookup.hit_tokens;
  };
  for (int point = kBeforeWrite; point < persist::kShutdownStepCount; ++point) {
    for (uint64_t mask = 0;; ++mask) {
      SCOPED_TRACE("power loss at point " + std::to_string(point) + ", surviving entries mask " +
                   std::to_string(mask));
      const std::string dir = root.path() + "/" + std::to_string(cases++);
      rangekv::testing::FaultInjectingEnv faults(DefaultEnv());
      testing::DirJournalEnv journal(&faults);
      {
        auto e = open(&journal, dir);
        ASSERT_NE(e, nullptr);
        auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
        ASSERT_TRUE(StoreAll(*e, **kv, a, 32, 1)->outcome.status.ok());
        ASSERT_TRUE(e->Close().ok());
      }
      size_t pending = 0;
      {
        engine_internal::EngineTestHooks hooks;
        if (point >= 0) {
          const auto stop = static_cast<persist::ShutdownStep>(point);
          hooks.shutdown_hook = [stop](persist::ShutdownStep at) {
            return at == stop ? Status(StatusCode::kAborted, "power loss") : OkStatus();
          };
        }
        auto e = open(&journal, dir, hooks);
        ASSERT_NE(e, nullptr);
        ASSERT_TRUE(e->recovery().loaded);
        EXPECT_EQ(restore(*e, a, 32), a.size() - 1);
        if (point != kBeforeWrite) {
          auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
          auto stored = StoreAll(*e, **kv, b, 32, 2);
          ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
          ASSERT_TRUE(stored->outcome.visible);
        }
        if (point < 0) {
          testing::AbandonStoreForTesting(*e);
          EXPECT_TRUE(e->Close().ok());
        } else {
          EXPECT_EQ(e->Close().code(), StatusCode::kAborted);
        }
      }
      pending = journal.Pending().size();
      ASSERT_TRUE(faults.DropUnsyncedData().ok());
      ASSERT_TRUE(journal.Crash(mask).ok());

      auto e = open(DefaultEnv(), dir);
      ASSERT_NE(e, nullptr);
      if (e->recovery().loaded) {
        const uint64_t hit_a = restore(*e, a, 32);
        const uint64_t hit_b = restore(*e, b, 32);
        if (hit_b == 0) {
          // The state before session 2 wrote anything.
          ++loaded_old;
          EXPECT_EQ(hit_a, a.size() - 1);
          EXPECT_EQ(point, kBeforeWrite);
        } else {
          // The complete new state: B whole, A's head (its tail was evicted for B).
          ++loaded_new;
          EXPECT_EQ(hit_b, b.size() - 1);
          EXPECT_EQ(hit_a, kT);
          EXPECT_GE(point, static_cast<int>(persist::ShutdownStep::kMarkerRemoved));
        }
      } else {
        ++discarded;
        EXPECT_EQ(e->recovery().reason, "dirty");
        EXPECT_EQ(restore(*e, a, 32), 0u);
        EXPECT_EQ(restore(*e, b, 32), 0u);
        EXPECT_NE(point, kBeforeWrite);
        EXPECT_LT(point, static_cast<int>(persist::ShutdownStep::kMarkerDirSynced));
      }
      if (mask + 1 >= (uint64_t{1} << pending)) break;
    }
  }
  EXPECT_GT(loaded_old, 0);
  EXPECT_GT(loaded_new, 0);
  EXPECT_GT(discarded, 0);
}

// The same power losses under durability=every_publish: session 2's store of B returned visible
// AND durable, so after any power loss from then on (dropped unsynced data, any subset of
// unsynced directory entries) the reopen must find B whole and bit exact, and A's head (its
// tail was evicted for B, and that removal was durable before B overwrote the slots). Before
// session 2 wrote, A whole. Survival fraction printed; 100% required.
TEST(EnginePowerLossTest, AcknowledgedDurablePublicationSurvivesEveryPowerLoss) {
  constexpr int kBeforeWrite = -2;
  const auto a = RandomTokens(2 * kT + 10, 30);
  const auto b = RandomTokens(2 * kT + 10, 31);
  testing::TempDir root;
  int cases = 0, acknowledged = 0, survived = 0;
  auto open = [](Env* env, const std::string& dir, engine_internal::EngineTestHooks hooks = {}) {
    return OpenSmall(env, dir, 4, "every_publish", std::move(hooks));
  };
  auto restore = [](Engine& e, std::span<const int32_t> tokens, uint64_t seed) {
    return RestoreExact(e, tokens, seed);
  };
  for (int point = kBeforeWrite; point < persist::kShutdownStepCount; ++point) {
    for (uint64_t mask = 0;; ++mask) {
      SCOPED_TRACE("power loss at point " + std::to_string(point) + ", surviving entries mask " +
                   std::to_string(mask));
      const std::string dir = root.path() + "/" + std::to_string(cases++);
      rangekv::testing::FaultInjectingEnv faults(DefaultEnv());
      testing::DirJournalEnv journal(&faults);
      {
        auto e = open(&journal, dir);
        ASSERT_NE(e, nullptr);
        auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
        ASSERT_TRUE(StoreAll(*e, **kv, a, 32, 1)->outcome.durable);
        ASSERT_TRUE(e->Close().ok());
      }
      bool acked = false;
      {
        engine_internal::EngineTestHooks hooks;
        if (point >= 0) {
          const auto stop = static_cast<persist::ShutdownStep>(point);
          hooks.shutdown_hook = [stop](persist::ShutdownStep at) {
            return at == stop ? Status(StatusCode::kAborted, "power loss") : OkStatus();
          };
        }
        auto e = open(&journal, dir, hooks);
        ASSERT_NE(e, nullptr);
        ASSERT_TRUE(e->recovery().loaded);
        if (point != kBeforeWrite) {
          auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
          auto stored = StoreAll(*e, **kv, b, 32, 2);
          ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
          ASSERT_TRUE(stored->outcome.visible);
          acked = stored->outcome.durable;
          EXPECT_TRUE(acked);
        }
        if (point < 0) {
          testing::AbandonStoreForTesting(*e);
          EXPECT_TRUE(e->Close().ok());
        } else {
          EXPECT_EQ(e->Close().code(), StatusCode::kAborted);
        }
      }
      const size_t pending = journal.Pending().size();
      ASSERT_TRUE(faults.DropUnsyncedData().ok());
      ASSERT_TRUE(journal.Crash(mask).ok());

      auto e = open(DefaultEnv(), dir);
      ASSERT_NE(e, nullptr);
      const uint64_t hit_a = restore(*e, a, 32);
      const uint64_t hit_b = restore(*e, b, 32);
      if (acked) {
        ++acknowledged;
        EXPECT_TRUE(e->recovery().loaded) << e->recovery().reason << ": " << e->recovery().detail;
        EXPECT_EQ(hit_b, b.size() - 1) << e->recovery().detail;
        EXPECT_EQ(hit_a, kT);
        survived += hit_b == b.size() - 1 ? 1 : 0;
      } else {
        EXPECT_EQ(point, kBeforeWrite);
        EXPECT_EQ(hit_a, a.size() - 1);
        EXPECT_EQ(hit_b, 0u);
      }
      if (mask + 1 >= (uint64_t{1} << pending)) break;
    }
  }
  std::printf(
      "power-loss durability (every_publish): %d cases, survival %d / %d "
      "acknowledged-durable publications restored bit for bit\n",
      cases, survived, acknowledged);
  EXPECT_GT(acknowledged, 0);
  EXPECT_EQ(survived, acknowledged);
}

// The periodic promise under power loss (durability=periodic:20): a store that nobody waited
// on becomes durable by the journal's own periodic commit (journal_durable_publications counts
// it; the time it took is printed), and a power loss after that (dropped unsynced data, every
// subset of unsynced directory entries) keeps it whole and bit exact, with a younger store
// (power lost right after it returned) missing or exact, never wrong. The case count shows how
// many directory-entry subsets were left to try (the store's creation is synced before it writes).
TEST(EnginePowerLossTest, PublicationOlderThanThePeriodSurvivesEveryPowerLoss) {
  const auto a = RandomTokens(2 * kT + 10, 50);
  const auto b = RandomTokens(2 * kT + 10, 51);
  testing::TempDir root;
  int cases = 0, survived = 0;
  double slowest_ms = 0;
  for (uint64_t mask = 0;; ++mask) {
    SCOPED_TRACE("surviving entries mask " + std::to_string(mask));
    const std::string dir = root.path() + "/" + std::to_string(cases++);
    rangekv::testing::FaultInjectingEnv faults(DefaultEnv());
    testing::DirJournalEnv journal(&faults);
    {
      auto e = OpenSmall(&journal, dir, 8, "periodic:20");
      ASSERT_NE(e, nullptr);
      auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
      ASSERT_TRUE(kv.ok());
      const uint64_t before = e->GetStats().journal_durable_publications;
      auto stored = StoreAll(*e, **kv, a, 52, 1);
      ASSERT_TRUE(stored.ok() && stored->outcome.status.ok() && stored->outcome.visible);
      EXPECT_FALSE(stored->outcome.durable);  // periodic: never acknowledged per store
      const auto t0 = std::chrono::steady_clock::now();
      const auto deadline = t0 + std::chrono::seconds(20);
      while (e->GetStats().journal_durable_publications < before + 3 &&  // a: 3 packs
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_GE(e->GetStats().journal_durable_publications, before + 3);
      slowest_ms = std::max(
          slowest_ms,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      auto younger = StoreAll(*e, **kv, b, 52, 2);
      ASSERT_TRUE(younger.ok() && younger->outcome.status.ok());
      kv->reset();
      testing::AbandonStoreForTesting(*e);  // no clean shutdown: the power goes
      EXPECT_TRUE(e->Close().ok());
    }
    const size_t pending = journal.Pending().size();
    ASSERT_TRUE(faults.DropUnsyncedData().ok());
    ASSERT_TRUE(journal.Crash(mask).ok());
    {
      EngineOptions o = SmallOptions(dir, SmallModel(8, 2, 16), kW, /*packs=*/8);
      auto e = testing::OpenEngineForTesting(o, {});
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto kv = KvFixture::Make(**e, KvCacheLayout::kFlashAttnNhd, 64);
      ASSERT_TRUE(kv.ok());
      EXPECT_TRUE((*e)->recovery().loaded)
          << (*e)->recovery().reason << ": " << (*e)->recovery().detail;
      auto ra = RestoreAndVerify(**e, **kv, Envelope("a"), a, 1, 52, 5);
      ASSERT_TRUE(ra.ok());
      EXPECT_EQ(ra->lookup.hit_tokens, a.size() - 1);
      EXPECT_TRUE(ra->outcome.status.ok()) << ra->outcome.status.ToString();
      EXPECT_EQ(ra->mismatches, 0u);
      EXPECT_EQ(ra->outcome.work.checksum_failures, 0u);
      survived += ra->lookup.hit_tokens == a.size() - 1 && ra->mismatches == 0 ? 1 : 0;
      auto rb = RestoreAndVerify(**e, **kv, Envelope("b"), b, 1, 52, 6);
      ASSERT_TRUE(rb.ok());
      EXPECT_TRUE(rb->outcome.status.ok()) << rb->outcome.status.ToString();
      EXPECT_EQ(rb->mismatches, 0u);
      EXPECT_EQ(rb->outcome.work.checksum_failures, 0u);
      kv->reset();
      EXPECT_TRUE((*e)->Close().ok());
    }
    if (mask + 1 >= (uint64_t{1} << pending)) break;
  }
  std::printf(
      "power-loss durability (periodic:20): %d cases, survival %d / %d publications made "
      "durable by the periodic commit (the slowest took %.1f ms)\n",
      cases, survived, cases, slowest_ms);
  EXPECT_EQ(survived, cases);
}

TEST_F(EngineFaultTest, DetachedWriteDebtDrainsAtCloseAndDroppedStoreHandlesAbort) {
  auto& gate = MakeEnv<GateEnv>(DefaultEnv(), "packs.rkv", GateEnv::Op::kWrite, 2 << 20);
  Open(&gate);
  auto src = Fixture();
  const auto tokens = RandomTokens(2 * kT, 6);
  const auto slots = RandomSlots(tokens.size(), src->num_slots(), 1);
  ASSERT_TRUE(src->Fill(tokens, 0, slots, 13).ok());
  gate.Close();
  StoreRequest req;
  req.envelope = Envelope("debt");
  req.tokens = tokens;
  req.kv = &src->kv();
  req.slot_mapping = slots;
  auto handle = engine_->BeginStore(req);
  ASSERT_TRUE(handle.ok());
  for (uint32_t l = 0; l < 8; ++l) ASSERT_TRUE(handle->LayerProduced(l).ok());
  // Detach returns once extraction is done, with writes still held at the gate.
  StoreOutcome out = handle->Finish(StoreWait::kDetach);
  EXPECT_TRUE(out.status.ok());
  EXPECT_FALSE(out.visible);
  gate.WaitHeld(1);
  EXPECT_EQ(engine_->GetStats().stores_published, 0u);

  // A dropped handle aborts its store.
  {
    const auto other = RandomTokens(kT, 7);
    StoreRequest r2 = req;
    r2.tokens = other;
    r2.slot_mapping = std::span<const int64_t>(slots).first(kT);
    auto dropped = engine_->BeginStore(r2);
    ASSERT_TRUE(dropped.ok());
  }
  gate.Open();
  ASSERT_TRUE(engine_->Close().ok());  // drains the debt
  const EngineStats s = engine_->GetStats();
  EXPECT_EQ(s.stores_published, 1u);
  EXPECT_EQ(s.stores_aborted, 1u);
}

}  // namespace
}  // namespace rangekv
