// Persistence and integrity through the Engine API (docs/design.md "Persistence and recovery";
// paper 3.5, Table 1): a clean Close and reopen finds every published prefix again and restores it
// bit for bit; a dirty reopen, a corrupted or truncated snapshot, a snapshot of another pack file
// and a grown pack file are each detected, logged with their reason, and nothing of the old index
// is served; a truncated pack file does not open; tickets and generations never cross a session;
// payload digests are checked on restore (whole blocks, also for partial restores) unless
// checksum=off, which still records them so fsck finds a flipped byte and names the record.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/log.h"
#include "persist/offline.h"
#include "persist/store_layout.h"
#include "rangekv/engine.h"
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

// 4 layers, s = 128 bytes, W = 8 KiB: T = 64 tokens per stripe; digest blocks of 16 tokens, so
// a stripe has 4 blocks and partial restores start and end mid-block.
constexpr uint64_t kW = 8192;
constexpr uint64_t kT = 64;
constexpr uint32_t kLayers = 4;
constexpr uint64_t kBlock = 16;
constexpr uint64_t kSeed = 7;  // payload rows are a function of (seed, layer, position, token)
constexpr uint8_t kPoison = 0xA5;

std::vector<int32_t> Concat(std::span<const int32_t> a, std::span<const int32_t> b) {
  std::vector<int32_t> v(a.begin(), a.end());
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

class EnginePersistenceTest : public ::testing::Test {
 protected:
  EnginePersistenceTest()
      : a_(RandomTokens(3 * kT + 10, 1)),                           // 4 packs
        b_(Concat(std::span(a_).first(100), RandomTokens(70, 2))),  // diverges inside pack 1
        c_(RandomTokens(20, 3)) {}

  std::string StoreDir(const std::string& name = "store") const { return dir_.path() + "/" + name; }
  EngineOptions Options(const std::string& name = "store") const {
    return SmallOptions(StoreDir(name), SmallModel(kLayers, 2, 16), kW, /*packs=*/8);
  }
  EngineOptions NoJournal(const std::string& name = "store") const {
    EngineOptions o = Options(name);
    o.durability.mode = Durability::Mode::kNone;
    return o;
  }
  std::unique_ptr<Engine> Open(EngineOptions o = {}, engine_internal::EngineInternalConfig c = {}) {
    if (o.store_dir.empty()) o = Options();
    if (c.digest_block_tokens == 0) c.digest_block_tokens = kBlock;
    auto e = testing::OpenEngineForTesting(o, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static std::unique_ptr<KvFixture> Fixture(Engine& engine) {
    auto f = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }
  static void Store(Engine& engine, std::span<const int32_t> tokens, uint64_t slot_seed) {
    auto src = Fixture(engine);
    ASSERT_NE(src, nullptr);
    auto r = StoreAll(engine, *src, tokens, kSeed, slot_seed);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->outcome.status.ok()) << r->outcome.status.ToString();
    EXPECT_TRUE(r->outcome.visible || r->outcome.disposition != StoreDisposition::kStoring);
  }
  // Restores the whole hit of `tokens` (granularity g) and checks it bit for bit; returns the
  // hit (0 on a miss). Any failed token, checksum failure or wrong byte fails the test.
  static uint64_t RestoreExact(Engine& engine, std::span<const int32_t> tokens,
                               const std::string& id, uint64_t g = 1) {
    auto dst = Fixture(engine);
    if (dst == nullptr) return 0;
    auto r = RestoreAndVerify(engine, *dst, Envelope(id), tokens, g, kSeed, 11);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || r->lookup.hit_tokens == 0) return 0;
    EXPECT_TRUE(r->outcome.status.ok()) << id << ": " << r->outcome.status.ToString();
    EXPECT_TRUE(r->outcome.failed.empty()) << id;
    EXPECT_EQ(r->mismatches, 0u) << id;
    EXPECT_EQ(r->poisoned_rows, 0u) << id;
    EXPECT_EQ(r->outcome.work.checksum_failures, 0u) << id;
    EXPECT_GT(r->outcome.work.verified_spans, 0u) << id;
    return r->lookup.hit_tokens;
  }
  // Lookup only: the hit, with the ticket released again.
  static uint64_t Hit(Engine& engine, std::span<const int32_t> tokens, const std::string& id) {
    auto lookup = engine.Lookup(Envelope(id), tokens, 1);
    EXPECT_TRUE(lookup.ok()) << lookup.status().ToString();
    engine.ReleaseRequest(Envelope(id));
    return lookup.ok() ? lookup->hit_tokens : 0;
  }
  // The A/B/C prefixes stored, then a clean Close.
  void MakeCleanStore(const std::string& name = "store") {
    auto e = Open(Options(name));
    ASSERT_NE(e, nullptr);
    Store(*e, a_, 1);
    Store(*e, b_, 2);
    Store(*e, c_, 3);
    ASSERT_TRUE(e->Close().ok());
  }
  void ExpectEverythingMisses(Engine& e) {
    EXPECT_EQ(Hit(e, a_, "miss-a"), 0u);
    EXPECT_EQ(Hit(e, b_, "miss-b"), 0u);
    EXPECT_EQ(Hit(e, c_, "miss-c"), 0u);
  }
  // The store still works after a discard: a fresh store restores bit for bit.
  void ExpectServesAgain(Engine& e) {
    Store(e, c_, 9);
    EXPECT_EQ(RestoreExact(e, c_, "again"), c_.size() - 1);
  }
  static void FlipByte(const std::string& path, uint64_t offset) {
    auto f = DefaultEnv()->OpenFile(path, {});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    uint8_t b = 0;
    ASSERT_EQ(*(*f)->ReadAt(offset, &b, 1), 1u);
    b ^= 0x40;
    ASSERT_EQ(*(*f)->WriteAt(offset, &b, 1), 1u);
    ASSERT_TRUE((*f)->Sync().ok());
  }
  // File offset of path token `path_token` in layer `layer`, in the pack that holds it (the
  // caller makes sure only one stored path has a pack there).
  static uint64_t PayloadOffset(Engine& e, uint64_t path_token, uint32_t layer) {
    for (const StoredPack& p : testing::EngineDirectory(e).ListPacks(e.namespace_id())) {
      if (p.record.path_token_begin <= path_token && path_token < p.record.path_token_end()) {
        return testing::EngineStore(e).layout().Address(p.record.pack_slot, layer,
                                                        path_token - p.record.path_token_begin);
      }
    }
    ADD_FAILURE() << "no pack holds path token " << path_token;
    return 0;
  }

  testing::TempDir dir_;
  const std::vector<int32_t> a_, b_, c_;
};

TEST_F(EnginePersistenceTest, CleanCloseAndReopenFindsEveryPrefixBitExact) {
  {
    auto e = Open();
    ASSERT_NE(e, nullptr);
    EXPECT_FALSE(e->recovery().loaded);
    EXPECT_TRUE(e->recovery().created);
    EXPECT_EQ(e->recovery().reason, "new_store");
    Store(*e, a_, 1);
    Store(*e, b_, 2);
    Store(*e, c_, 3);
    EXPECT_TRUE(DefaultEnv()->FileExists(persist::StorePaths(StoreDir()).dirty_marker()));
    ASSERT_TRUE(e->Close().ok());
    EXPECT_TRUE(e->Close().ok());  // idempotent
  }
  const persist::StorePaths paths(StoreDir());
  EXPECT_TRUE(DefaultEnv()->FileExists(paths.snapshot()));
  EXPECT_FALSE(DefaultEnv()->FileExists(paths.dirty_marker()));
  EXPECT_FALSE(DefaultEnv()->FileExists(paths.snapshot_temp()));

  uint64_t epoch = 0;
  for (int session = 0; session < 2; ++session) {
    SCOPED_TRACE("session " + std::to_string(session + 2));
    ScopedLogCapture log;
    auto e = Open();
    ASSERT_NE(e, nullptr);
    const StoreRecovery& r = e->recovery();
    EXPECT_TRUE(r.loaded) << r.reason << ": " << r.detail;
    EXPECT_EQ(r.reason, "");
    EXPECT_EQ(r.packs_loaded, session == 0 ? 7u : 8u);  // A: 4, B: 2, C: 1 (+ D: 1)
    EXPECT_GT(r.store_epoch, epoch);
    epoch = r.store_epoch;
    EXPECT_TRUE(log.Contains("index loaded"));
    // Every published prefix, whole, clipped to a reuse granularity (mid-block ends), and from a
    // later start (mid-block starts).
    EXPECT_EQ(RestoreExact(*e, a_, "a"), a_.size() - 1);
    EXPECT_EQ(RestoreExact(*e, b_, "b"), b_.size() - 1);
    EXPECT_EQ(RestoreExact(*e, c_, "c"), c_.size() - 1);
    EXPECT_EQ(RestoreExact(*e, a_, "a20", 20), 200u);
    EXPECT_EQ(RestoreExact(*e, b_, "b20", 20), 160u);
    // A read-only session changes nothing on disk before Close.
    EXPECT_FALSE(DefaultEnv()->FileExists(paths.dirty_marker()));
    if (session == 0) Store(*e, RandomTokens(30, 4), 4);  // D, in the free slot
    ASSERT_TRUE(e->Close().ok());
  }
}

// Restores path tokens [begin, end) of `tokens` (a ticket clipped at `end`, the first `begin`
// tokens skipped as the serving engine's own prefix cache would) and checks them.
struct RangeResult {
  RestoreOutcome outcome;
  uint64_t mismatches = 0;
  uint64_t touched_failed_rows = 0;
};
RangeResult RestoreRange(Engine& engine, std::span<const int32_t> tokens, uint64_t begin,
                         uint64_t end, const std::string& id) {
  RangeResult out;
  auto dst = KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  EXPECT_TRUE(dst.ok());
  if (!dst.ok()) return out;
  EXPECT_TRUE((*dst)->Poison(kPoison).ok());
  auto lookup = engine.Lookup(Envelope(id), tokens, 1);
  EXPECT_TRUE(lookup.ok() && lookup->hit_tokens >= end);
  if (!lookup.ok() || lookup->hit_tokens < end) return out;
  RestoreRequest req;
  req.ticket = lookup->ticket;
  req.envelope = Envelope(id);
  req.tokens = tokens;
  req.begin_token = begin;
  req.endpoint_tokens = end;
  auto handle = engine.StartRestore(req);
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  if (!handle.ok()) return out;
  const auto slots = RandomSlots(end - begin, (*dst)->num_slots(), 5);
  EXPECT_TRUE(handle->BindSlots((*dst)->kv(), slots).ok());
  out.outcome = handle->Finish();
  std::vector<uint8_t> failed(end - begin, 0);
  for (const TokenInterval& t : out.outcome.failed) {
    for (uint64_t i = t.begin; i < t.end; ++i) failed[i - begin] = 1;
  }
  EXPECT_TRUE((*dst)->Sync().ok());
  for (uint64_t i = 0; i < end - begin; ++i) {
    if (failed[i]) {
      for (uint32_t l = 0; l < kLayers; ++l) {
        if (!(*dst)->RowIs(l, slots[i], kPoison)) {
          const std::array<uint32_t, 1> one{l};
          auto bad = (*dst)->Mismatches(tokens, begin + i, std::span(slots).subspan(i, 1), kSeed,
                                        one, /*sync=*/false);
          out.touched_failed_rows += bad.ok() ? *bad : 1;
        }
      }
      continue;
    }
    auto bad = (*dst)->Mismatches(tokens, begin + i, std::span(slots).subspan(i, 1), kSeed, {},
                                  /*sync=*/false);
    out.mismatches += bad.ok() ? *bad : 1;
  }
  return out;
}

TEST_F(EnginePersistenceTest, PartialRestoresVerifyWholeDigestBlocks) {
  MakeCleanStore();
  auto e = Open();
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->recovery().loaded);
  // Path tokens [70, 120): pack tokens [6, 56) of A's second pack, starting and ending inside
  // a 16-token digest block. The read covers blocks 0..3 whole; everything checks out.
  RangeResult ok = RestoreRange(*e, a_, 70, 120, "mid");
  EXPECT_TRUE(ok.outcome.status.ok()) << ok.outcome.status.ToString();
  EXPECT_EQ(ok.outcome.delivered_tokens, 50u);
  EXPECT_EQ(ok.mismatches, 0u);
  EXPECT_EQ(ok.outcome.work.verified_spans, kLayers);
  EXPECT_EQ(ok.outcome.work.checksum_failures, 0u);

  // A flipped byte in pack token 2 of layer 1 lies outside the requested tokens but inside the
  // first block they touch: it is read and caught, and the pack is dropped.
  FlipByte(testing::EngineStore(*e).pack_file().path(), PayloadOffset(*e, 66, 1) + 5);
  RangeResult bad = RestoreRange(*e, a_, 70, 120, "mid2");
  EXPECT_EQ(bad.outcome.status.code(), StatusCode::kCorruption) << bad.outcome.status.ToString();
  ASSERT_EQ(bad.outcome.failed.size(), 1u);
  EXPECT_EQ(bad.outcome.failed[0], (TokenInterval{70, 120}));
  EXPECT_EQ(bad.outcome.work.checksum_failures, 1u);
  EXPECT_EQ(bad.mismatches, 0u);
  EXPECT_EQ(bad.touched_failed_rows, 0u);
  // The pack is gone from the index; so is everything stored below it (B's tail, A's rest).
  EXPECT_EQ(Hit(*e, a_, "after-a"), kT);
  EXPECT_EQ(Hit(*e, c_, "after-c"), c_.size() - 1);
  // The next snapshot no longer lists it.
  ASSERT_TRUE(e->Close().ok());
  e = Open();
  ASSERT_TRUE(e->recovery().loaded);
  EXPECT_EQ(RestoreExact(*e, a_, "reloaded"), kT);
}

TEST_F(EnginePersistenceTest, DirtyReopenWithoutAJournalDiscardsTheIndexWithALoggedReason) {
  // durability=none: the behaviour of a store without a journal (and the paper's).
  MakeCleanStore();
  uint64_t epoch = 0;
  {
    // A session that only reads and then dies keeps the snapshot valid.
    auto e = Open(NoJournal());
    ASSERT_TRUE(e->recovery().loaded);
    EXPECT_EQ(RestoreExact(*e, a_, "ro"), a_.size() - 1);
    testing::AbandonStoreForTesting(*e);
  }
  {
    auto e = Open(NoJournal());
    ASSERT_TRUE(e->recovery().loaded) << e->recovery().reason;
    EXPECT_EQ(RestoreExact(*e, b_, "ro2"), b_.size() - 1);
    // This session writes: the marker is made durable first, then it dies.
    Store(*e, RandomTokens(40, 5), 5);
    EXPECT_TRUE(DefaultEnv()->FileExists(persist::StorePaths(StoreDir()).dirty_marker()));
    epoch = e->recovery().store_epoch;
    testing::AbandonStoreForTesting(*e);
  }
  ScopedLogCapture log;
  auto e = Open(NoJournal());
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->recovery().loaded);
  EXPECT_EQ(e->recovery().reason, "dirty");
  EXPECT_GT(e->recovery().store_epoch, epoch);
  EXPECT_TRUE(log.Contains("index discarded (dirty)"));
  ExpectEverythingMisses(*e);
  EXPECT_EQ(Hit(*e, RandomTokens(40, 5), "miss-d"), 0u);
  // Generations of the new session lie above everything issued before.
  ExpectServesAgain(*e);
  for (const SlotInfo& s : testing::EngineDirectory(*e).Slots()) {
    if (s.state == SlotState::kVisible) {
      EXPECT_GE(s.generation, e->recovery().store_epoch << 32);
    }
  }
  // A clean close of the discarding session makes the store clean again.
  ASSERT_TRUE(e->Close().ok());
  e = Open(NoJournal());
  EXPECT_TRUE(e->recovery().loaded);
  EXPECT_EQ(RestoreExact(*e, c_, "clean-again"), c_.size() - 1);
}

TEST_F(EnginePersistenceTest, DirtyReopenReplaysTheJournalAndFindsEveryPrefixBitExact) {
  MakeCleanStore();
  const auto d = RandomTokens(30, 41);  // one pack: the 8-pack store holds it without evicting
  {
    EngineOptions o = Options();
    ASSERT_TRUE(o.durability.Set("every_publish").ok());
    auto e = Open(o);
    ASSERT_TRUE(e->recovery().loaded);
    auto kv = KvFixture::Make(*e, KvCacheLayout::kFlashAttnNhd, 64);
    ASSERT_TRUE(kv.ok());
    auto stored = StoreAll(*e, **kv, d, kSeed, 9);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
    EXPECT_TRUE(stored->outcome.visible);
    EXPECT_TRUE(stored->outcome.durable);
    EXPECT_GT(e->GetStats().journal_commits, 0u);
    EXPECT_GT(e->GetStats().journal_durable_publications, 0u);
    kv->reset();
    testing::AbandonStoreForTesting(*e);  // dies dirty
  }
  ScopedLogCapture log;
  auto e = Open();
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->recovery().loaded) << e->recovery().detail;
  EXPECT_TRUE(e->recovery().journal_replayed);
  EXPECT_EQ(e->recovery().journal_tail, "clean");
  EXPECT_EQ(e->recovery().journal_publications_dropped, 0u);
  EXPECT_GT(e->recovery().journal_publications_kept, 0u);
  EXPECT_TRUE(log.Contains("journal over the snapshot of epoch"));
  EXPECT_EQ(RestoreExact(*e, a_, "a"), a_.size() - 1);
  EXPECT_EQ(RestoreExact(*e, d, "d"), d.size() - 1);
}

TEST_F(EnginePersistenceTest, CorruptedOrTruncatedSnapshotIsDetectedAndNothingOldIsServed) {
  MakeCleanStore();
  const persist::StorePaths paths(StoreDir());
  auto bytes = DefaultEnv()->ReadSmallFile(paths.snapshot(), 1 << 20);
  ASSERT_TRUE(bytes.ok());
  struct Case {
    const char* reason;
    std::string contents;
  };
  std::string flipped = *bytes;
  flipped[flipped.size() / 2] ^= 0x01;
  const std::vector<Case> cases = {
      {"corrupt_checksum", flipped},
      {"truncated", bytes->substr(0, bytes->size() - 100)},
      {"malformed", std::string(bytes->size(), 'x')},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    ASSERT_TRUE(DefaultEnv()->WriteSmallFile(paths.snapshot(), c.contents, true).ok());
    ScopedLogCapture log;
    auto e = Open();
    ASSERT_NE(e, nullptr);
    EXPECT_FALSE(e->recovery().loaded);
    EXPECT_EQ(e->recovery().reason, c.reason) << e->recovery().detail;
    EXPECT_TRUE(log.Contains(std::string("index discarded (") + c.reason + ")"));
    ExpectEverythingMisses(*e);
    testing::AbandonStoreForTesting(*e);  // keep the damaged snapshot for the next case
  }
  // Deleted: missing_snapshot.
  ASSERT_TRUE(DefaultEnv()->DeleteFile(paths.snapshot()).ok());
  auto e = Open();
  EXPECT_EQ(e->recovery().reason, "missing_snapshot");
  ExpectEverythingMisses(*e);
  ExpectServesAgain(*e);
}

TEST_F(EnginePersistenceTest, SnapshotOfAnotherPackFileIsDetected) {
  // Two stores of the same model: X holds A, B, C; Y holds only D (its slot 0 = X's slot 0).
  MakeCleanStore("x");
  const auto d = RandomTokens(3 * kT, 6);
  {
    auto y = Open(Options("y"));
    Store(*y, d, 6);
    ASSERT_TRUE(y->Close().ok());
  }
  auto snap = DefaultEnv()->ReadSmallFile(persist::StorePaths(StoreDir("x")).snapshot(), 1 << 20);
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(DefaultEnv()
                  ->WriteSmallFile(persist::StorePaths(StoreDir("y")).snapshot(), *snap, true)
                  .ok());
  ScopedLogCapture log;
  auto y = Open(Options("y"));
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->recovery().reason, "wrong_store_uuid") << y->recovery().detail;
  EXPECT_TRUE(log.Contains("index discarded (wrong_store_uuid)"));
  // X's records would name Y's slots (which hold D's bytes): none is served, nor is D.
  ExpectEverythingMisses(*y);
  EXPECT_EQ(Hit(*y, d, "d"), 0u);
  ExpectServesAgain(*y);
}

TEST_F(EnginePersistenceTest, TruncatedPackFileDoesNotOpenAndAGrownOneDiscards) {
  MakeCleanStore();
  const std::string pack = persist::StorePaths(StoreDir()).pack();
  uint64_t size = 0;
  {
    auto f = DefaultEnv()->OpenFile(pack, {.mode = OpenMode::kReadWrite});
    ASSERT_TRUE(f.ok());
    size = *(*f)->Size();
    ASSERT_TRUE((*f)->Truncate(size + 4096).ok());
  }
  {
    auto e = Open();
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->recovery().reason, "pack_size_mismatch") << e->recovery().detail;
    ExpectEverythingMisses(*e);
    testing::AbandonStoreForTesting(*e);
  }
  {
    auto f = DefaultEnv()->OpenFile(pack, {.mode = OpenMode::kReadWrite});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Truncate(size - kW).ok());  // the last pack's last stripe is cut
  }
  auto e = testing::OpenEngineForTesting(Options(), {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kTruncated) << e.status().ToString();
  EXPECT_NE(e.status().message().find("packs.rkv"), std::string::npos) << e.status().ToString();
}

TEST_F(EnginePersistenceTest, TicketsOfAnEarlierSessionAreForeign) {
  std::string ticket;
  {
    auto e = Open();
    Store(*e, a_, 1);
    auto lookup = e->Lookup(Envelope("t"), a_, 1);
    ASSERT_TRUE(lookup.ok() && lookup->hit_tokens > 0);
    ticket = lookup->ticket;
    ASSERT_TRUE(e->Close().ok());
  }
  auto e = Open();
  ASSERT_TRUE(e->recovery().loaded);
  RestoreRequest req;
  req.ticket = ticket;
  req.envelope = Envelope("t");
  req.tokens = a_;
  req.endpoint_tokens = a_.size() - 1;
  EXPECT_EQ(e->StartRestore(req).status().code(), StatusCode::kForeignOwner);
  EXPECT_EQ(RestoreExact(*e, a_, "fresh"), a_.size() - 1);
}

TEST_F(EnginePersistenceTest, ChecksumOffSkipsVerificationButStillRecordsDigests) {
  EngineOptions o = Options();
  o.checksum = ChecksumPolicy::kOff;
  uint64_t flipped_at = 0;
  {
    auto e = Open(o);
    auto src = Fixture(*e);
    auto stored = StoreAll(*e, *src, a_, kSeed, 1);
    ASSERT_TRUE(stored.ok() && stored->outcome.status.ok());
    EXPECT_GT(stored->work.digest_launches, 0u);
    flipped_at = PayloadOffset(*e, kT + 3, 2);
    FlipByte(testing::EngineStore(*e).pack_file().path(), flipped_at);
    // Off means off: nothing is verified, and the flipped byte is delivered as it is.
    auto dst = Fixture(*e);
    auto r = RestoreAndVerify(*e, *dst, Envelope("off"), a_, 1, kSeed, 2);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->outcome.status.ok());
    EXPECT_EQ(r->outcome.work.verified_spans, 0u);
    EXPECT_EQ(r->outcome.work.digest_launches, 0u);
    EXPECT_EQ(r->outcome.work.checksum_failures, 0u);
    EXPECT_EQ(r->mismatches, 1u);  // one (layer, token) row
    // The digests were recorded: the clean snapshot (which requires them) is written.
    ASSERT_TRUE(e->Close().ok());
  }
  // fsck finds the byte offline and names the record.
  auto report = persist::Fsck(DefaultEnv(), StoreDir());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(report->ok());
  ASSERT_EQ(report->problems.size(), 1u);
  const persist::FsckProblem& p = report->problems[0];
  EXPECT_EQ(p.kind, "payload_digest") << p.message;
  ASSERT_TRUE(p.block.has_value());
  EXPECT_EQ(p.block->layer, 2u);
  EXPECT_LE(p.block->path_tokens.begin, kT + 3);
  EXPECT_GT(p.block->path_tokens.end, kT + 3);
  EXPECT_EQ(p.block->path_tokens.size(), kBlock);
  EXPECT_NE(p.message.find("layer 2"), std::string::npos) << p.message;

  // A later session with checksum=always catches it.
  auto e = Open();
  ASSERT_TRUE(e->recovery().loaded);
  auto dst = Fixture(*e);
  auto r = RestoreAndVerify(*e, *dst, Envelope("always"), a_, 1, kSeed, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome.status.code(), StatusCode::kCorruption);
  EXPECT_EQ(r->outcome.work.checksum_failures, 1u);
  ASSERT_EQ(r->outcome.failed.size(), 1u);
  EXPECT_EQ(r->outcome.failed[0], (TokenInterval{kT, 2 * kT}));
  EXPECT_EQ(r->mismatches, 0u);
  EXPECT_LE(r->poisoned_rows, 1u);  // the flipped byte's row (HostDevice's one-pass verify)
}

TEST_F(EnginePersistenceTest, FsckOfACleanEngineStoreFindsNothingThenNamesAFlippedByte) {
  MakeCleanStore();
  auto clean = persist::Fsck(DefaultEnv(), StoreDir());
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok()) << (clean->problems.empty() ? "" : clean->problems[0].message);
  EXPECT_EQ(clean->packs_checked, 7u);
  // B's first own pack begins at its divergence from A, path token 100 (A's third pack holds
  // path positions [128, 192) of another path): flip its pack token 50 in layer 3.
  constexpr uint64_t kPackBegin = 100;
  uint64_t at = 0;
  {
    auto e = Open();
    bool found = false;
    for (const StoredPack& p : testing::EngineDirectory(*e).ListPacks(e->namespace_id())) {
      if (p.record.path_token_begin != kPackBegin) continue;
      at = testing::EngineStore(*e).layout().Address(p.record.pack_slot, 3, 50);
      found = true;
    }
    ASSERT_TRUE(found);
    testing::AbandonStoreForTesting(*e);  // read-only: the snapshot stays valid
  }
  FlipByte(persist::StorePaths(StoreDir()).pack(), at);
  auto report = persist::Fsck(DefaultEnv(), StoreDir());
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  const persist::FsckProblem& p = report->problems[0];
  EXPECT_EQ(p.kind, "payload_digest");
  ASSERT_TRUE(p.block.has_value());
  EXPECT_EQ(p.block->layer, 3u);
  // Block 3 of that pack (pack tokens [48, 64)), in path tokens.
  EXPECT_EQ(p.block->pack_tokens, (persist::TokenRange{48, 64})) << p.message;
  EXPECT_EQ(p.block->path_tokens, (persist::TokenRange{kPackBegin + 48, kPackBegin + 64}));
}

}  // namespace
}  // namespace rangekv
