#include "pack/pack_file.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <vector>

#include "base/digest.h"
#include "base/units.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using pack_format::kHeaderPageBytes;
using testing::TempDir;

// A small geometry so test files stay a few MiB: 2 layers, s = 512, W = 64 KiB, T = 128.
ModelSpec SmallSpec() {
  ModelSpec s;
  s.model_id = "test/small";
  s.layers = 2;
  s.kv_heads = 1;
  s.head_size = 128;
  return s;
}
Geometry SmallGeometry() { return *DeriveGeometry(SmallSpec(), 64 * kKiB); }
NamespaceId SmallNamespace() { return DeriveNamespace(SmallSpec(), SmallGeometry()); }

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<uint8_t> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

void Poke(const std::string& path, uint64_t offset, const void* data, size_t size) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  ASSERT_TRUE(f.good());
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(f.good());
}

// Rewrites the header of `path` with `h`, with a valid checksum.
void RewriteHeader(const std::string& path, const PackHeader& h) {
  std::array<uint8_t, kHeaderPageBytes> page{};
  EncodePackHeader(h, page);
  Poke(path, 0, page.data(), page.size());
}

class PackFileTest : public ::testing::Test {
 protected:
  std::string Make(const std::string& name, uint64_t packs = 3) {
    const std::string path = dir_.Join(name);
    auto pf = PackFile::Create(env_, path, SmallGeometry(), SmallNamespace(), packs);
    EXPECT_TRUE(pf.ok()) << pf.status().ToString();
    return path;
  }

  Env* env_ = DefaultEnv();
  TempDir dir_;
};

TEST_F(PackFileTest, CreateThenOpenRoundTrip) {
  const std::string path = dir_.Join("rank0.pack");
  const Geometry g = SmallGeometry();
  auto created = PackFile::Create(env_, path, g, SmallNamespace(), 3);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE(created->uuid().is_nil());
  EXPECT_EQ(created->pack_count(), 3u);
  EXPECT_EQ(created->capacity_bytes(), 3 * g.pack_bytes);
  EXPECT_EQ(created->data_offset(), pack_format::kDefaultDataOffset);
  EXPECT_GT(created->creation_time_unix_ns(), 1'600'000'000ull * 1'000'000'000ull);
  ASSERT_NE(created->file(), nullptr);
  EXPECT_EQ(created->file_at(0), created->file());
  EXPECT_EQ(created->file_at(1), nullptr);

  // Preallocated to its final size; the on-disk header decodes to what Create reported.
  const std::vector<uint8_t> bytes = ReadAll(path);
  EXPECT_EQ(bytes.size(), pack_format::kDefaultDataOffset + 3 * g.pack_bytes);
  auto on_disk = DecodePackHeader(bytes);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(*on_disk, created->header());

  // Slot bytes are addressable through the file: write a token of the last slot, read it back.
  const uint64_t at = created->Address(2, 1, g.tokens_per_stripe - 1);
  std::vector<uint8_t> token(g.token_bytes, 0xab);
  auto wrote = created->file()->WriteAt(at, token.data(), token.size());
  ASSERT_TRUE(wrote.ok());
  ASSERT_EQ(*wrote, token.size());
  EXPECT_EQ(at + g.token_bytes, created->layout().file_bytes());  // T*s == W here

  const StoreUuid uuid = created->uuid();
  const PackHeader header = created->header();
  created = Status(StatusCode::kCancelled, "close");  // close the file

  auto any = PackFile::Open(env_, path, PackExpectation::Any());
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->header(), header);
  EXPECT_EQ(any->geometry(), g);
  EXPECT_EQ(any->namespace_id(), SmallNamespace());
  std::vector<uint8_t> back(g.token_bytes);
  auto read = any->file()->ReadAt(at, back.data(), back.size());
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(back, token);

  PackExpectation exact{uuid, g, SmallNamespace()};
  auto full = PackFile::Open(env_, path, exact, PackOpenOptions{OpenMode::kReadOnly});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->uuid(), uuid);
}

TEST_F(PackFileTest, EachCreateGetsItsOwnUuidUnlessFixed) {
  auto a = PackFile::Create(env_, dir_.Join("a"), SmallGeometry(), SmallNamespace(), 1);
  auto b = PackFile::Create(env_, dir_.Join("b"), SmallGeometry(), SmallNamespace(), 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->uuid(), b->uuid());
  PackCreateOptions fixed;
  fixed.store_uuid = StoreUuid{1, 2};
  fixed.data_offset = 4096;
  auto c = PackFile::Create(env_, dir_.Join("c"), SmallGeometry(), SmallNamespace(), 1, fixed);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->uuid(), (StoreUuid{1, 2}));
  EXPECT_EQ(c->Address(0, 0, 0), 4096u);
  EXPECT_EQ(ReadAll(dir_.Join("c")).size(), 4096 + SmallGeometry().pack_bytes);
}

TEST_F(PackFileTest, DirectIoPreferredWorksWhereverItLands) {
  PackCreateOptions create;
  create.direct = DirectIo::kPreferred;
  const std::string path = dir_.Join("direct.pack");
  auto pf = PackFile::Create(env_, path, SmallGeometry(), SmallNamespace(), 2, create);
  ASSERT_TRUE(pf.ok()) << pf.status().ToString();
  pf = Status(StatusCode::kCancelled, "close");
  auto opened = PackFile::Open(env_, path, PackExpectation::Any(),
                               PackOpenOptions{OpenMode::kReadWrite, DirectIo::kPreferred});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->pack_count(), 2u);
}

TEST_F(PackFileTest, CreateRefusesAnExistingPathAndLeavesItAlone) {
  const std::string path = Make("p");
  const std::vector<uint8_t> before = ReadAll(path);
  auto again = PackFile::Create(env_, path, SmallGeometry(), SmallNamespace(), 5);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadAll(path), before);
}

TEST_F(PackFileTest, CreateRejectsBadInputWithoutLeavingAFile) {
  Geometry bad = SmallGeometry();
  bad.tokens_per_stripe += 1;
  EXPECT_EQ(PackFile::Create(env_, dir_.Join("x"), bad, SmallNamespace(), 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PackFile::Create(env_, dir_.Join("x"), SmallGeometry(), SmallNamespace(), 0).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(PackFile::Create(env_, dir_.Join("x"), SmallGeometry(), SmallNamespace(),
                             pack_format::kMaxPackCount + 1)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  PackCreateOptions odd;
  odd.data_offset = 6000;
  EXPECT_EQ(PackFile::Create(env_, dir_.Join("x"), SmallGeometry(), SmallNamespace(), 1, odd)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(env_->FileExists(dir_.Join("x")));
}

TEST_F(PackFileTest, CreateInAMissingDirectoryFails) {
  auto pf =
      PackFile::Create(env_, dir_.Join("no/such/dir/p"), SmallGeometry(), SmallNamespace(), 1);
  EXPECT_FALSE(pf.ok());
}

// Every way a file can be unusable yields its own code, and a failed open never changes a byte.
TEST_F(PackFileTest, EachOpenFailureIsDistinctAndLeavesTheFileUntouched) {
  const Geometry g = SmallGeometry();
  struct Case {
    const char* name;
    StatusCode want;
    std::function<void(const std::string&, const PackHeader&)> damage;  // may be empty
    PackExpectation expect;
  };
  Geometry other_geometry = *DeriveGeometry(SmallSpec(), 128 * kKiB);
  ModelSpec other_spec = SmallSpec();
  other_spec.revision = "other";
  const NamespaceId other_ns = DeriveNamespace(other_spec, g);

  std::vector<Case> cases = {
      {"not a pack file",
       StatusCode::kInvalidArgument,
       [](const std::string& p, const PackHeader&) { Poke(p, 0, "NOTAPACK", 8); },
       {}},
      {"wrong version",
       StatusCode::kWrongVersion,
       [](const std::string& p, const PackHeader& h) {
         PackHeader v = h;
         v.format_version = 2;
         RewriteHeader(p, v);
       },
       {}},
      {"checksum",
       StatusCode::kCorruption,
       [](const std::string& p, const PackHeader&) {
         // Inverted, not overwritten: a constant would match the creation time's byte 1 run
         // in 256 and leave the header intact.
         const uint8_t flipped = static_cast<uint8_t>(~ReadAll(p)[121]);
         Poke(p, 121, &flipped, 1);  // inside the creation time
       },
       {}},
      {"absurd pack count",
       StatusCode::kCorruption,
       [](const std::string& p, const PackHeader& h) {
         PackHeader v = h;
         v.pack_count = uint64_t{1} << 60;
         RewriteHeader(p, v);
       },
       {}},
      {"truncated payload",
       StatusCode::kTruncated,
       [g](const std::string& p, const PackHeader&) {
         std::filesystem::resize_file(p, pack_format::kDefaultDataOffset + 3 * g.pack_bytes - 1);
       },
       {}},
      {"truncated header",
       StatusCode::kTruncated,
       [](const std::string& p, const PackHeader&) { std::filesystem::resize_file(p, 100); },
       {}},
      {"another store", StatusCode::kWrongStore, {}, {StoreUuid{7, 7}, std::nullopt, {}}},
      {"other geometry", StatusCode::kGeometryMismatch, {}, {{}, other_geometry, {}}},
      {"other namespace", StatusCode::kNamespaceMismatch, {}, {{}, std::nullopt, other_ns}},
  };

  std::set<StatusCode> seen;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir_.Join("case-" + std::to_string(&c - cases.data()));
    PackHeader header;
    {
      auto pf = PackFile::Create(env_, path, g, SmallNamespace(), 3);
      ASSERT_TRUE(pf.ok()) << pf.status().ToString();
      header = pf->header();
    }
    if (c.damage) c.damage(path, header);
    const std::vector<uint8_t> before = ReadAll(path);
    for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
      auto opened = PackFile::Open(env_, path, c.expect, PackOpenOptions{mode});
      EXPECT_EQ(opened.status().code(), c.want) << opened.status().ToString();
      EXPECT_FALSE(opened.status().message().empty());
    }
    EXPECT_EQ(ReadAll(path), before) << "a failed open modified the file";
    if (c.want != StatusCode::kTruncated) seen.insert(c.want);
  }
  // Two truncation cases share kTruncated; every other failure has its own code, except that
  // the two corruption cases (checksum, impossible fields) share kCorruption.
  EXPECT_EQ(seen.size(), 6u);
}

TEST_F(PackFileTest, OpenMissingFileIsNotFound) {
  EXPECT_EQ(PackFile::Open(env_, dir_.Join("absent"), PackExpectation::Any()).status().code(),
            StatusCode::kNotFound);
}

TEST_F(PackFileTest, EmptyFileIsNotAPackFile) {
  const std::string path = dir_.Join("empty");
  { std::ofstream touch(path); }
  EXPECT_EQ(PackFile::Open(env_, path, PackExpectation::Any()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadAll(path).empty());
}

TEST_F(PackFileTest, LongerFileIsAccepted) {
  const std::string path = Make("long", 2);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) + 8192);
  auto pf = PackFile::Open(env_, path, PackExpectation::Any());
  ASSERT_TRUE(pf.ok()) << pf.status().ToString();
  EXPECT_EQ(pf->pack_count(), 2u);
}

}  // namespace
}  // namespace rangekv
