// The cufile engine on a CPU machine: its fallback paths (library missing, driver open failing,
// handle registration refused) and its data path through an injected function table that
// serves cuFileRead/cuFileWrite with pread/pwrite, so handles, buffer registration (base +
// offset addressing) and the driver's lifecycle are checked without a GPU.
#include "io/cufile_engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/units.h"
#include "testing/temp_dir.h"

namespace rangekv {
namespace {

using testing::TempDir;

// A fake libcufile: global state because the table holds plain function pointers.
struct Fake {
  static inline std::mutex mu;
  static inline int open_error = 0;      // cuFileDriverOpen's err
  static inline int register_error = 0;  // cuFileHandleRegister's err
  static inline int opens = 0, closes = 0;
  static inline int handles_registered = 0, handles_deregistered = 0;
  static inline std::map<const void*, size_t> buffers;  // registered base -> length
  static inline int reads = 0, writes = 0, registered_io = 0;
  static inline int fds[16];
  static inline int next_fd = 0;

  static void Reset() {
    std::lock_guard<std::mutex> l(mu);
    open_error = register_error = 0;
    opens = closes = handles_registered = handles_deregistered = 0;
    buffers.clear();
    reads = writes = registered_io = 0;
    next_fd = 0;
  }
  static cufile::Error DriverOpen() {
    std::lock_guard<std::mutex> l(mu);
    ++opens;
    return {open_error, 0};
  }
  static cufile::Error DriverClose() {
    std::lock_guard<std::mutex> l(mu);
    ++closes;
    return {0, 0};
  }
  static cufile::Error HandleRegister(cufile::Handle* fh, cufile::Descr* d) {
    std::lock_guard<std::mutex> l(mu);
    if (register_error != 0) return {register_error, 0};
    EXPECT_EQ(d->type, cufile::kHandleTypeOpaqueFd);
    EXPECT_EQ(d->fs_ops, nullptr);
    fds[next_fd] = d->handle.fd;
    *fh = &fds[next_fd++];
    ++handles_registered;
    return {0, 0};
  }
  static void HandleDeregister(cufile::Handle) {
    std::lock_guard<std::mutex> l(mu);
    ++handles_deregistered;
  }
  static cufile::Error BufRegister(const void* base, size_t length, int flags) {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(flags, 0);
    buffers[base] = length;
    return {0, 0};
  }
  static cufile::Error BufDeregister(const void* base) {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(buffers.erase(base), 1u);
    return {0, 0};
  }
  // cuFile's rule: a registered buffer is addressed by its base plus an offset.
  static void CheckAddress(const void* base, size_t size, off_t buf_offset) {
    std::lock_guard<std::mutex> l(mu);
    auto it = buffers.find(base);
    if (it != buffers.end()) {
      ++registered_io;
      EXPECT_LE(static_cast<size_t>(buf_offset) + size, it->second);
    } else {
      EXPECT_EQ(buf_offset, 0);
    }
  }
  static ssize_t Read(cufile::Handle fh, void* base, size_t size, off_t off, off_t buf_off) {
    CheckAddress(base, size, buf_off);
    {
      std::lock_guard<std::mutex> l(mu);
      ++reads;
    }
    return ::pread(*static_cast<int*>(fh), static_cast<uint8_t*>(base) + buf_off, size, off);
  }
  static ssize_t Write(cufile::Handle fh, const void* base, size_t size, off_t off, off_t buf_off) {
    CheckAddress(base, size, buf_off);
    {
      std::lock_guard<std::mutex> l(mu);
      ++writes;
    }
    return ::pwrite(*static_cast<int*>(fh), static_cast<const uint8_t*>(base) + buf_off, size, off);
  }
  static cufile::Error Props(cufile::DrvProps* p) {
    p->nvfs.major_version = 0;  // no nvidia-fs: compat mode
    p->nvfs.minor_version = 0;
    return {0, 0};
  }
  static cufile::Error Version(int* v) {
    *v = 1150;
    return {0, 0};
  }
  static cufile::Api Table() {
    cufile::Api a;
    a.cuFileDriverOpen = &DriverOpen;
    a.cuFileDriverClose = &DriverClose;
    a.cuFileHandleRegister = &HandleRegister;
    a.cuFileHandleDeregister = &HandleDeregister;
    a.cuFileBufRegister = &BufRegister;
    a.cuFileBufDeregister = &BufDeregister;
    a.cuFileRead = &Read;
    a.cuFileWrite = &Write;
    a.cuFileDriverGetProperties = &Props;
    a.cuFileGetVersion = &Version;
    return a;
  }
};

class CuFileEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { Fake::Reset(); }
  TempDir dir_;
};

TEST_F(CuFileEngineTest, MissingLibraryIsNotSupportedWithTheLoaderError) {
  auto e = MakeCuFileEngine(IoEngineOptions{}, {.library = dir_.Join("no/libcufile.so.0")});
  ASSERT_EQ(e.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(e.status().message().find("cannot load"), std::string::npos) << e.status().ToString();
  // Through the factory with the same option.
  IoEngineOptions o;
  o.cufile_library = dir_.Join("no/libcufile.so.0");
  EXPECT_EQ(MakeIoEngine(IoEngineKind::kCuFile, o).status().code(), StatusCode::kNotSupported);
}

TEST_F(CuFileEngineTest, FailingDriverOpenIsNotSupportedWithItsCuFileError) {
  Fake::open_error = 5033;
  const cufile::Api api = Fake::Table();
  auto e = MakeCuFileEngine(IoEngineOptions{}, {.api = &api});
  ASSERT_EQ(e.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(e.status().message().find("5033 (CU_FILE_NVFS_SETUP_ERROR)"), std::string::npos)
      << e.status().ToString();
  EXPECT_EQ(Fake::opens, 1);
  EXPECT_EQ(Fake::closes, 0);  // a driver that did not open is not closed
}

TEST_F(CuFileEngineTest, RefusedHandleRegistrationIsNotSupportedAndLeavesNoHandles) {
  Fake::register_error = 5027;
  const cufile::Api api = Fake::Table();
  auto e = MakeCuFileEngine(IoEngineOptions{}, {.api = &api});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto file = DefaultEnv()->CreateFile(dir_.Join("f"), FileOptions{});
  ASSERT_TRUE(file.ok());
  File* files[1] = {file->get()};
  const Status s = (*e)->RegisterFiles(files);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("5027 (CU_FILE_HANDLE_NOT_REGISTERED)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ((*e)->caps().files_registered, 0u);
  e->reset();
  EXPECT_EQ(Fake::closes, 1);
}

TEST_F(CuFileEngineTest, DataPathUsesOneHandlePerFileAndRegisteredBufferOffsets) {
  const cufile::Api api = Fake::Table();
  IoEngineOptions o;
  o.workers = 3;
  o.split_bytes = 64 * 1024;  // pieces must keep base + offset addressing
  auto e = MakeCuFileEngine(o, {.api = &api});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  IoEngine& engine = **e;
  EXPECT_EQ(engine.kind(), IoEngineKind::kCuFile);
  EXPECT_NE(engine.Describe().find("mode=compat"), std::string::npos) << engine.Describe();
  EXPECT_NE(engine.Describe().find("version 1150"), std::string::npos) << engine.Describe();
  EXPECT_TRUE(engine.caps().device_memory);

  for (const DirectIo direct : {DirectIo::kOff, DirectIo::kPreferred}) {
    SCOPED_TRACE(direct == DirectIo::kOff ? "buffered" : "direct");
    auto file = DefaultEnv()->CreateFile(dir_.Join(direct == DirectIo::kOff ? "b" : "d"),
                                         FileOptions{.direct = direct});
    ASSERT_TRUE(file.ok());
    File* files[1] = {file->get()};
    ASSERT_TRUE(engine.RegisterFiles(files).ok());
    EXPECT_EQ(engine.caps().files_registered, 1u);
    constexpr uint64_t kBytes = 1 << 20;
    uint8_t* src = static_cast<uint8_t*>(std::aligned_alloc(kMaxDirectAlignmentBytes, kBytes));
    uint8_t* dst = static_cast<uint8_t*>(std::aligned_alloc(kMaxDirectAlignmentBytes, kBytes));
    for (uint64_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
    std::memset(dst, 0xee, kBytes);
    // dst is a registered "bank"; src is not.
    const IoBuffer bank{dst, kBytes};
    ASSERT_TRUE(engine.RegisterBuffers({&bank, 1}).ok());
    EXPECT_EQ(engine.caps().buffers_registered, 1u);
    IoBatch writes(4), reads(4);
    for (uint32_t i = 0; i < 4; ++i) {
      const uint64_t off = i * (kBytes / 4);
      ASSERT_TRUE(writes.Add({file->get(), off, src + off, kBytes / 4, IoOp::kWrite}).ok());
      ASSERT_TRUE(reads.Add({file->get(), off, dst + off, kBytes / 4, IoOp::kRead}).ok());
    }
    const int reads0 = Fake::reads, writes0 = Fake::writes, reg0 = Fake::registered_io;
    ASSERT_TRUE(engine.Submit(writes).ok());
    writes.Wait();
    ASSERT_TRUE(writes.status().ok()) << writes.status().ToString();
    ASSERT_TRUE(engine.Submit(reads).ok());
    reads.Wait();
    ASSERT_TRUE(reads.status().ok()) << reads.status().ToString();
    EXPECT_EQ(0, std::memcmp(src, dst, kBytes));
    // Every byte went through cuFile, 64 KiB at a time: 16 calls per direction.
    EXPECT_EQ(Fake::writes - writes0, 16);
    EXPECT_EQ(Fake::reads - reads0, 16);
    EXPECT_EQ(Fake::registered_io - reg0, 16);  // the reads, into the registered bank
    ASSERT_TRUE(engine.RegisterBuffers({}).ok());
    EXPECT_TRUE(Fake::buffers.empty());
    std::free(src);
    std::free(dst);
  }
  EXPECT_EQ(Fake::handles_registered, 2);
  EXPECT_EQ(Fake::handles_deregistered, 1);  // replaced by the second RegisterFiles
  e->reset();
  EXPECT_EQ(Fake::handles_deregistered, 2);
  EXPECT_EQ(Fake::opens, 1);
  EXPECT_EQ(Fake::closes, 1);
}

TEST_F(CuFileEngineTest, CuFileErrorsAndEndOfFileFailTheSpan) {
  cufile::Api api = Fake::Table();
  api.cuFileRead = [](cufile::Handle, void*, size_t, off_t off, off_t) -> ssize_t {
    return off == 0 ? -5008 : 0;  // CU_FILE_IO_NOT_SUPPORTED, then end of file
  };
  auto e = MakeCuFileEngine(IoEngineOptions{}, {.api = &api});
  ASSERT_TRUE(e.ok());
  auto file = DefaultEnv()->CreateFile(dir_.Join("f"), FileOptions{});
  ASSERT_TRUE(file.ok());
  File* files[1] = {file->get()};
  ASSERT_TRUE((*e)->RegisterFiles(files).ok());
  std::vector<uint8_t> buf(8192);
  IoBatch batch(2);
  ASSERT_TRUE(batch.Add({file->get(), 0, buf.data(), 4096, IoOp::kRead}).ok());
  ASSERT_TRUE(batch.Add({file->get(), 4096, buf.data() + 4096, 4096, IoOp::kRead}).ok());
  ASSERT_TRUE((*e)->Submit(batch).ok());
  batch.Wait();
  EXPECT_EQ(batch.completion(0).status.code(), StatusCode::kIoError);
  EXPECT_NE(batch.completion(0).status.message().find("5008"), std::string::npos);
  EXPECT_EQ(batch.completion(1).status.code(), StatusCode::kShortTransfer);
  EXPECT_EQ(batch.completion(1).bytes, 0u);
}

// The real library, where one is installed (e.g. the nvidia-cufile wheel that torch brings):
// on a machine without a GPU its driver open fails, and the engine says so.
TEST_F(CuFileEngineTest, RealLibraryWithoutAGpuFallsBackWithAReason) {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("RANGEKV_TEST_CUFILE_LIBRARY")) candidates.push_back(p);
  candidates.push_back(
      "/var/cache/rangekv/vllm-0.32/lib/python3.11/site-packages/nvidia/cu13/lib/libcufile.so.0");
  std::string found;
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), R_OK) == 0) {
      found = c;
      break;
    }
  }
  if (found.empty()) GTEST_SKIP() << "no libcufile.so.0 here";
  auto e = MakeCuFileEngine(IoEngineOptions{}, {.library = found});
  if (e.ok()) GTEST_SKIP() << "cuFile opened here: " << (*e)->Describe();
  EXPECT_EQ(e.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(e.status().message().find("cuFileDriverOpen failed"), std::string::npos)
      << e.status().ToString();
}

}  // namespace
}  // namespace rangekv
