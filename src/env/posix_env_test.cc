#include "env/posix_env.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::TempDir;

constexpr FileOptions kBuffered{.mode = OpenMode::kReadWrite, .direct = DirectIo::kOff};
constexpr FileOptions kDirect{.mode = OpenMode::kReadWrite, .direct = DirectIo::kPreferred};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<uint8_t, AlignedFree> AlignedAlloc(size_t n, size_t align = 4096) {
  return std::unique_ptr<uint8_t, AlignedFree>(static_cast<uint8_t*>(std::aligned_alloc(align, n)));
}

TEST(PosixEnvTest, DefaultEnvIsOneInstance) {
  ASSERT_NE(DefaultEnv(), nullptr);
  EXPECT_EQ(DefaultEnv(), DefaultEnv());
}

TEST(PosixEnvTest, CreateWriteReadRoundTrip) {
  TempDir dir;
  const std::string path = dir.Join("f");
  auto created = DefaultEnv()->CreateFile(path, kBuffered);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  File& f = **created;
  EXPECT_EQ(f.path(), path);
  EXPECT_GE(f.fd(), 0);
  EXPECT_FALSE(f.direct());
  const auto data = Pattern(100000, 7);
  auto w = f.WriteAt(12345, data.data(), data.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, data.size());
  auto size = f.Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 12345u + data.size());

  std::vector<uint8_t> back(data.size());
  auto r = f.ReadAt(12345, back.data(), back.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data.size());
  EXPECT_EQ(back, data);

  // The hole before the write reads as zeros.
  std::vector<uint8_t> hole(100, 0xff);
  r = f.ReadAt(0, hole.data(), hole.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(hole, std::vector<uint8_t>(100, 0));
}

TEST(PosixEnvTest, ReadAtEndOfFileIsShortThenZero) {
  TempDir dir;
  auto f = DefaultEnv()->CreateFile(dir.Join("f"), kBuffered);
  ASSERT_TRUE(f.ok());
  const auto data = Pattern(1000, 1);
  ASSERT_TRUE((*f)->WriteAt(0, data.data(), data.size()).ok());
  std::vector<uint8_t> buf(4096);
  auto r = (*f)->ReadAt(600, buf.data(), buf.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 400u);  // short: the caller must see it
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 600, 400));
  r = (*f)->ReadAt(1000, buf.data(), buf.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
}

TEST(PosixEnvTest, CreateExistingAndOpenMissingHaveDistinctCodes) {
  TempDir dir;
  const std::string path = dir.Join("f");
  auto missing = DefaultEnv()->OpenFile(path, kBuffered);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(DefaultEnv()->CreateFile(path, kBuffered).ok());
  auto again = DefaultEnv()->CreateFile(path, kBuffered);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find(path), std::string::npos);
  EXPECT_TRUE(DefaultEnv()->OpenFile(path, kBuffered).ok());
}

TEST(PosixEnvTest, ReadOnlyFileRejectsWrites) {
  TempDir dir;
  const std::string path = dir.Join("f");
  ASSERT_TRUE(DefaultEnv()->WriteSmallFile(path, "abc", /*sync=*/false).ok());
  auto f = DefaultEnv()->OpenFile(path, FileOptions{.mode = OpenMode::kReadOnly});
  ASSERT_TRUE(f.ok());
  const char x = 'x';
  auto w = (*f)->WriteAt(0, &x, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
}

TEST(PosixEnvTest, AllocateTruncateSize) {
  TempDir dir;
  auto f = DefaultEnv()->CreateFile(dir.Join("f"), kBuffered);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Allocate(3 * 1024 * 1024).ok());
  EXPECT_EQ(*(*f)->Size(), 3u * 1024 * 1024);
  // Allocate never shrinks.
  ASSERT_TRUE((*f)->Allocate(1024).ok());
  EXPECT_EQ(*(*f)->Size(), 3u * 1024 * 1024);
  ASSERT_TRUE((*f)->Truncate(5000).ok());
  EXPECT_EQ(*(*f)->Size(), 5000u);
  ASSERT_TRUE((*f)->Sync().ok());
}

TEST(PosixEnvTest, DirectAlignmentIsAtLeast4KiBAndPowerOfTwo) {
  TempDir dir;
  for (const FileOptions& options : {kBuffered, kDirect}) {
    auto f =
        DefaultEnv()->CreateFile(dir.Join(options.direct == DirectIo::kOff ? "b" : "d"), options);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const uint64_t a = (*f)->direct_alignment();
    EXPECT_GE(a, 4096u);
    EXPECT_EQ(a & (a - 1), 0u);
    EXPECT_EQ(ProbeDirectAlignment((*f)->fd()), a);
  }
}

// O_DIRECT where the file system has it; on one without it the open still succeeds, buffered.
// tmpfs (Linux 6.6+) accepts O_DIRECT but enforces no alignment; block file systems do.
bool EnforcesDirectAlignment(const std::string& dir_path) {
  struct statfs fs;
  return ::statfs(dir_path.c_str(), &fs) == 0 && fs.f_type != TMPFS_MAGIC;
}

void DirectRoundTrip(const std::string& dir_path) {
  auto f = DefaultEnv()->CreateFile(dir_path + "/direct", kDirect);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const uint64_t align = (*f)->direct_alignment();
  const size_t n = 64 * align;
  auto src = AlignedAlloc(n, align);
  auto dst = AlignedAlloc(n, align);
  const auto data = Pattern(n, 3);
  std::memcpy(src.get(), data.data(), n);
  auto w = (*f)->WriteAt(align, src.get(), n);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, n);
  auto r = (*f)->ReadAt(align, dst.get(), n);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, n);
  EXPECT_EQ(0, std::memcmp(dst.get(), data.data(), n));
  if ((*f)->direct() && EnforcesDirectAlignment(dir_path)) {
    // The kernel enforces alignment on a direct file: a misaligned buffer is an error, not a
    // silent buffered fallback.
    auto bad = (*f)->ReadAt(align, dst.get() + 1, align);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kIoError);
  }
  // A reopen with the same options gets the same mode.
  auto again = DefaultEnv()->OpenFile(dir_path + "/direct", kDirect);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->direct(), (*f)->direct());
}

TEST(PosixEnvTest, DirectIoOnDefaultTempDir) {
  TempDir dir;
  DirectRoundTrip(dir.path());
}

TEST(PosixEnvTest, DirectIoOnTmpfsOpensEitherWay) {
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no /dev/shm";
  TempDir dir("/dev/shm");
  DirectRoundTrip(dir.path());
}

TEST(PosixEnvTest, RenameDeleteExistsDirs) {
  TempDir dir;
  Env* env = DefaultEnv();
  const std::string a = dir.Join("a");
  const std::string b = dir.Join("b");
  ASSERT_TRUE(env->WriteSmallFile(a, "payload", /*sync=*/true).ok());
  EXPECT_TRUE(env->FileExists(a));
  ASSERT_TRUE(env->RenameFile(a, b).ok());
  EXPECT_FALSE(env->FileExists(a));
  EXPECT_TRUE(env->FileExists(b));
  EXPECT_EQ(env->RenameFile(a, b).code(), StatusCode::kNotFound);
  ASSERT_TRUE(env->SyncDir(dir.path()).ok());
  ASSERT_TRUE(env->DeleteFile(b).ok());
  EXPECT_EQ(env->DeleteFile(b).code(), StatusCode::kNotFound);

  const std::string sub = dir.Join("sub");
  ASSERT_TRUE(env->CreateDir(sub).ok());
  ASSERT_TRUE(env->CreateDir(sub).ok());  // existing directory is fine
  ASSERT_TRUE(env->WriteSmallFile(dir.Join("plain"), "", false).ok());
  EXPECT_FALSE(env->CreateDir(dir.Join("plain")).ok());  // a file is in the way
  EXPECT_EQ(env->SyncDir(dir.Join("nope")).code(), StatusCode::kNotFound);
}

TEST(PosixEnvTest, SmallFiles) {
  TempDir dir;
  Env* env = DefaultEnv();
  const std::string path = dir.Join("small");
  ASSERT_TRUE(env->WriteSmallFile(path, "hello world", /*sync=*/true).ok());
  auto read = env->ReadSmallFile(path, 1024);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "hello world");
  // Replacing with shorter contents leaves no tail of the old ones.
  ASSERT_TRUE(env->WriteSmallFile(path, "bye", /*sync=*/false).ok());
  EXPECT_EQ(*env->ReadSmallFile(path, 1024), "bye");
  auto too_big = env->ReadSmallFile(path, 2);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(env->ReadSmallFile(dir.Join("missing"), 10).status().code(), StatusCode::kNotFound);
  std::string big(3 * 1024 * 1024 + 17, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(env->WriteSmallFile(path, big, false).ok());
  EXPECT_EQ(*env->ReadSmallFile(path, big.size()), big);
}

}  // namespace
}  // namespace rangekv
