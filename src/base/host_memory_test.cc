#include "base/host_memory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/units.h"

namespace rangekv {
namespace {

TEST(MapIoMemoryTest, LargeMappingsStartOnAHugePageAndAreZeroedAndWritable) {
  const uint64_t bytes = 16 * kMiB + 5;
  Result<uint8_t*> p = MapIoMemory(bytes, "test memory");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kHugePageBytes, 0u);
  for (uint64_t i = 0; i < bytes; i += 4096) ASSERT_EQ((*p)[i], 0) << i;
  std::memset(*p, 0x5a, bytes);
  EXPECT_EQ((*p)[bytes - 1], 0x5a);
  UnmapIoMemory(*p, bytes);
}

TEST(MapIoMemoryTest, SmallMappingsArePageAligned) {
  Result<uint8_t*> p = MapIoMemory(4097, "test memory");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % PageBytes(), 0u);
  (*p)[8191] = 1;  // the whole second page is mapped
  UnmapIoMemory(*p, 4097);
}

TEST(MapIoMemoryTest, ZeroBytesIsAnError) {
  EXPECT_EQ(MapIoMemory(0, "test memory").status().code(), StatusCode::kInvalidArgument);
}

// The reason for the helper: where the kernel may back advised memory with huge pages, touched
// I/O memory is (some of it at least; compaction may fail for a few) backed by them, so an
// O_DIRECT request's memory is one or two 2 MiB pages instead of hundreds of 4 KiB frames.
TEST(MapIoMemoryTest, TouchedMemoryIsBackedByHugePagesWhereTheKernelAllowsIt) {
  if (!TransparentHugePagesAdvisable()) {
    GTEST_SKIP() << "transparent huge pages are off on this kernel "
                    "(/sys/kernel/mm/transparent_hugepage/enabled)";
  }
  const uint64_t bytes = 16 * kMiB;
  Result<uint8_t*> p = MapIoMemory(bytes, "test memory");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::memset(*p, 1, bytes);
  EXPECT_GT(HugePageBytesOfMapping(*p), 0u);
  UnmapIoMemory(*p, bytes);
}

}  // namespace
}  // namespace rangekv
