#include "persist/offline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "persist/journal.h"
#include "persist/store_layout.h"
#include "testing/temp_dir.h"
#include "testing/tiny_store.h"

namespace rangekv::persist {
namespace {

using ::rangekv::testing::TempDir;
using testing::TinyNamespace;
using testing::TinyStore;
using testing::Tokens;

class OfflineTest : public ::testing::Test {
 protected:
  OfflineTest() : paths_(dir_.path()) {}
  void MakeStore(bool clean) {
    Result<TinyStore> s = TinyStore::Open(env_, dir_.path(), true);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Store(ns_, a_).ok());
    ASSERT_TRUE(s->Store(ns_, b_).ok());
    if (clean) {
      ASSERT_TRUE(s->SaveClean().ok());
    }
  }
  std::string Read(const std::string& path) { return *env_->ReadSmallFile(path, 1 << 20); }

  Env* env_ = DefaultEnv();
  TempDir dir_;
  StorePaths paths_;
  NamespaceId ns_ = TinyNamespace();
  std::vector<int32_t> a_ = Tokens(300, 1000);
  std::vector<int32_t> b_ = [] {
    std::vector<int32_t> t = Tokens(200, 1000);
    for (size_t i = 100; i < t.size(); ++i) t[i] = 50000 + static_cast<int32_t>(i);
    return t;
  }();
};

TEST_F(OfflineTest, CleanStoreChecksOutAndListsItsPacks) {
  MakeStore(true);
  const std::string epoch_before = Read(paths_.epoch());
  Result<FsckReport> r = Fsck(env_, dir_.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const FsckProblem& p : r->problems) ADD_FAILURE() << p.kind << ": " << p.message;
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->packs_checked, 4u);
  // 3 packs of a_ (128, 128, 44 tokens) and b_'s tail (100 tokens), 16-token blocks, 2 layers.
  EXPECT_EQ(r->blocks_checked, 2u * (8 + 8 + 3 + 7));
  EXPECT_EQ(r->bytes_read, 2u * 32 * (128 + 128 + 44 + 100));
  // Read-only: nothing changed, no epoch bump.
  EXPECT_EQ(Read(paths_.epoch()), epoch_before);
  EXPECT_FALSE(env_->FileExists(paths_.dirty_marker()));

  Result<OfflineStore> store = OpenOffline(env_, dir_.path());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->index.directory);
  const std::vector<StoredPack> packs = store->index.directory->ListPacks(ns_);
  ASSERT_EQ(packs.size(), 4u);
  EXPECT_EQ(packs[0].record.path_token_begin, 0u);
}

TEST_F(OfflineTest, FlippedPayloadByteIsFoundAndNamed) {
  MakeStore(true);
  uint32_t slot = 0;
  uint64_t generation = 0, path_begin = 0;
  {
    Result<OfflineStore> store = OpenOffline(env_, dir_.path());
    ASSERT_TRUE(store.ok());
    // b_'s tail pack: path tokens [100, 200) at pack tokens [0, 100).
    for (const StoredPack& p : store->index.directory->ListPacks(ns_)) {
      if (p.record.path_token_begin == 100) {
        slot = p.record.pack_slot;
        generation = p.record.generation;
        path_begin = p.record.path_token_begin;
      }
    }
    ASSERT_EQ(path_begin, 100u);
    auto f = env_->OpenFile(paths_.pack(), {});
    ASSERT_TRUE(f.ok());
    const uint64_t at = store->pack->Address(slot, 1, 37) + 5;  // block 2: tokens [32, 48)
    uint8_t byte = 0;
    ASSERT_EQ(*(*f)->ReadAt(at, &byte, 1), 1u);
    byte ^= 0x80;
    ASSERT_EQ(*(*f)->WriteAt(at, &byte, 1), 1u);
  }
  Result<FsckReport> r = Fsck(env_, dir_.path());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->problems.size(), 1u);
  const FsckProblem& p = r->problems[0];
  EXPECT_EQ(p.kind, "payload_digest");
  ASSERT_TRUE(p.block.has_value());
  EXPECT_EQ(p.block->slot, slot);
  EXPECT_EQ(p.block->generation, generation);
  EXPECT_EQ(p.block->layer, 1u);
  EXPECT_EQ(p.block->pack_tokens, (TokenRange{32, 48}));
  EXPECT_EQ(p.block->path_tokens, (TokenRange{132, 148}));
  EXPECT_NE(p.message.find("path tokens [132, 148)"), std::string::npos) << p.message;
  // Structure-only mode does not read payload.
  r = Fsck(env_, dir_.path(), FsckOptions{.verify_payload = false});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->bytes_read, 0u);
}

TEST_F(OfflineTest, DirtyStoreIsAProblem) {
  MakeStore(false);
  Result<FsckReport> r = Fsck(env_, dir_.path());
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  bool dirty = false;
  for (const FsckProblem& p : r->problems) dirty |= p.kind == "dirty";
  EXPECT_TRUE(dirty);
  EXPECT_TRUE(env_->FileExists(paths_.dirty_marker()));  // left alone
}

TEST_F(OfflineTest, DamagedMetadataIsReported) {
  MakeStore(true);
  std::string snap = Read(paths_.snapshot());
  snap[100] ^= 1;
  ASSERT_TRUE(env_->WriteSmallFile(paths_.snapshot(), snap, true).ok());
  ASSERT_TRUE(env_->WriteSmallFile(paths_.epoch(), "junk", true).ok());
  Result<FsckReport> r = Fsck(env_, dir_.path());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->problems.size(), 2u);
  EXPECT_EQ(r->problems[0].kind, "epoch_file");
  EXPECT_EQ(r->problems[1].kind, "snapshot");
  EXPECT_NE(r->problems[1].message.find("corrupt_checksum"), std::string::npos);
}

TEST_F(OfflineTest, BadPackHeaderIsAProblemAndNoPackFileIsAnError) {
  EXPECT_EQ(Fsck(env_, dir_.path()).status().code(), StatusCode::kNotFound);
  MakeStore(true);
  auto f = env_->OpenFile(paths_.pack(), {});
  ASSERT_TRUE(f.ok());
  const uint8_t junk = 0xEE;
  ASSERT_EQ(*(*f)->WriteAt(40, &junk, 1), 1u);
  Result<FsckReport> r = Fsck(env_, dir_.path());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_EQ(r->problems[0].kind, "pack_header");
}

// The journal, when present, is shown and verified: a clean one passes; a torn tail, a journal
// of another store and one newer than the store epoch are each a `journal` problem.
TEST_F(OfflineTest, JournalIsShownAndVerified) {
  MakeStore(true);
  Result<OfflineStore> store = OpenOffline(env_, dir_.path());
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(store->journal.present);
  const StoreUuid uuid = store->pack->uuid();
  const uint64_t epoch = *store->index.epoch_file_epoch;
  auto write = [&](StoreUuid u, uint64_t base_epoch, size_t cut_tail) {
    std::vector<uint8_t> bytes = EncodeJournalHeader({u, base_epoch});
    JournalRecord r;
    r.type = journal_format::kEpoch;
    r.sequence = 1;
    r.epoch = {epoch, epoch << 32};
    const std::vector<uint8_t> rec = EncodeJournalRecord(r);
    bytes.insert(bytes.end(), rec.begin(), rec.end());
    bytes.insert(bytes.end(), rec.begin(), rec.end() - static_cast<std::ptrdiff_t>(cut_tail));
    ASSERT_TRUE(
        env_->WriteSmallFile(paths_.journal(), std::string(bytes.begin(), bytes.end()), false)
            .ok());
  };
  auto journal_problems = [&] {
    Result<FsckReport> r = Fsck(env_, dir_.path(), FsckOptions{.verify_payload = false});
    EXPECT_TRUE(r.ok());
    std::vector<std::string> out;
    for (const FsckProblem& p : r->problems) {
      if (p.kind == "journal") out.push_back(p.message);
    }
    return out;
  };
  write(uuid, epoch, /*cut_tail=*/40);  // the whole second record, so none of it
  store = OpenOffline(env_, dir_.path());
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(store->journal.present);
  EXPECT_EQ(store->journal.records, 1u);
  EXPECT_EQ(store->journal.tail, "clean");
  EXPECT_TRUE(journal_problems().empty());

  write(uuid, epoch, /*cut_tail=*/3);  // a torn second record
  std::vector<std::string> p = journal_problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("torn"), std::string::npos) << p[0];

  write(StoreUuid{1, 2}, epoch, 40);
  p = journal_problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("another store"), std::string::npos) << p[0];

  write(uuid, epoch + 1, 40);
  p = journal_problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("newer"), std::string::npos) << p[0];
}

}  // namespace
}  // namespace rangekv::persist
