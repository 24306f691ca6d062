#include "tools/bench/ceiling.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "base/units.h"
#include "testing/temp_dir.h"

namespace rangekv::tools {
namespace {

TEST(CutExtents, PiecesKeepTheirPlacementAndStopAtTheBound) {
  const std::vector<Extent> extents = {
      {.file_offset = 0, .bytes = 3 * kMiB, .buffer_offset = 0},
      {.file_offset = 8 * kMiB, .bytes = 2 * kMiB, .buffer_offset = 3 * kMiB}};
  const std::vector<Extent> all = CutExtents(extents, kMiB, UINT64_MAX);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[3].file_offset, 8 * kMiB);
  EXPECT_EQ(all[3].buffer_offset, 3 * kMiB);
  EXPECT_EQ(SumBytes(all), 5 * kMiB);
  // At most 4 MiB: the first extent only (whole extents are taken or not).
  EXPECT_EQ(SumBytes(CutExtents(extents, kMiB, 4 * kMiB)), 3 * kMiB);
  // Always at least one extent.
  EXPECT_EQ(SumBytes(CutExtents(extents, 2 * kMiB, 1)), 3 * kMiB);
}

TEST(ContiguousRequests, CoverTheBytesOnce) {
  const std::vector<Extent> r = ContiguousRequests(10 * kMiB, 4 * kMiB);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2].file_offset, 8 * kMiB);
  EXPECT_EQ(r[2].buffer_offset, 8 * kMiB);
  EXPECT_EQ(r[2].bytes, 2 * kMiB);
  EXPECT_EQ(RequestName(kMiB), "1 MiB");
  EXPECT_EQ(RequestName(256 * kKiB), "256 KiB");
}

// ParallelIo, the ceiling every bench command measures, moves exactly the bytes asked for.
TEST(ParallelIo, WritesThenReadsEveryRequest) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/ceiling.dat";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  const uint64_t bytes = 3 * kMiB + 4096;
  std::vector<uint8_t> out(bytes), in(bytes, 0);
  for (uint64_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 131 + 7);
  const std::vector<Extent> requests = ContiguousRequests(bytes, 256 * kKiB);
  ASSERT_TRUE(ParallelIo(fd, requests, out.data(), 4, IoDirection::kWrite).ok());
  ASSERT_TRUE(ParallelIo(fd, requests, in.data(), 3, IoDirection::kRead).ok());
  EXPECT_EQ(in, out);
  // A request past the end of the file fails (a short read is an error, not a success).
  const std::vector<Extent> past = {{.file_offset = bytes, .bytes = 4096, .buffer_offset = 0}};
  EXPECT_FALSE(ParallelIo(fd, past, in.data(), 1, IoDirection::kRead).ok());
  ::close(fd);
}

TEST(MeasureGrid, EveryCellOnceAndTheFirstFastestWins) {
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  std::vector<GridCell> reported;
  Result<std::vector<GridCell>> cells = MeasureGrid(
      CeilingGrid::kShort,
      [&](uint32_t t, uint64_t r) -> Result<GridCell> {
        seen.emplace_back(t, r);
        return GridCell{t, r, r, t == 16 ? 2.0 : 1.0};
      },
      [&](const GridCell& c) { reported.push_back(c); });
  ASSERT_TRUE(cells.ok());
  EXPECT_EQ(seen, (std::vector<std::pair<uint32_t, uint64_t>>{
                      {4, kMiB}, {4, 32 * kMiB}, {16, kMiB}, {16, 32 * kMiB}}));
  EXPECT_EQ(reported.size(), 4u);
  const GridCell* best = BestCell(*cells);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->threads, 16u);
  EXPECT_EQ(best->request_bytes, kMiB);
  EXPECT_EQ(MeasureGrid(
                CeilingGrid::kFull,
                [](uint32_t t, uint64_t r) -> Result<GridCell> {
                  return GridCell{t, r, r, 1.0};
                },
                nullptr)
                ->size(),
            20u);
  EXPECT_TRUE(MeasureGrid(CeilingGrid::kOff, nullptr, nullptr)->empty());
  EXPECT_EQ(BestCell({}), nullptr);
  // A failed pass ends the grid with its status.
  EXPECT_FALSE(MeasureGrid(
                   CeilingGrid::kShort,
                   [](uint32_t, uint64_t) -> Result<GridCell> { return Internal("pass failed"); },
                   nullptr)
                   .ok());
}

}  // namespace
}  // namespace rangekv::tools
