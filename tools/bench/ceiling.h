// Ceilings: what plain parallel I/O of the same bytes reaches on the same medium, the reference
// every benchmark states its numbers against (docs/design.md "Baselines"). One implementation
// for every command: N threads each taking the next request of a list of extents, one synchronous
// pread or pwrite loop per request (threads are the queue depth), into or out of one buffer;
// a grid of thread counts x request sizes whose fastest cell is a command's best ceiling; and
// the host-to-device copy ceiling on a GPU.
//
// Thread-safety: the functions are stateless (ParallelIo starts its own threads); a CeilingFile
// is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::tools {

// One contiguous extent of a payload in a file and where it lands in (or comes from) the
// ceiling's buffer. `layer`, `token_begin` and `tokens` name its pattern rows
// (tools/bench/paged_kv.h) for verification; a request cut from an extent has tokens 0.
struct Extent {
  uint64_t file_offset = 0;
  uint64_t bytes = 0;  // aligned length of the native transfer
  uint64_t buffer_offset = 0;
  uint32_t layer = 0;
  uint64_t token_begin = 0;
  uint64_t tokens = 0;
};

enum class IoDirection : uint8_t { kRead, kWrite };

// `threads` threads, each taking the next request, one pread (or pwrite) loop per request, on
// `fd`. Returns the seconds from the first thread's start to the last one's end; the first
// failed call's errno as a Status.
Result<double> ParallelIo(int fd, std::span<const Extent> requests, uint8_t* buffer,
                          uint32_t threads, IoDirection direction);

// The first extents holding at most `max_bytes` (at least one), each cut into requests of at
// most `request_bytes` (a multiple of the I/O alignment), the same buffer placement.
std::vector<Extent> CutExtents(const std::vector<Extent>& extents, uint64_t request_bytes,
                               uint64_t max_bytes);
// Bytes [0, bytes) of a file as requests of `request_bytes`, buffer offset = file offset.
std::vector<Extent> ContiguousRequests(uint64_t bytes, uint64_t request_bytes);
uint64_t SumBytes(std::span<const Extent> extents);
// "1 MiB", "512 KiB".
std::string RequestName(uint64_t bytes);

// The grid a best ceiling is picked from. kFull: threads 1, 2, 4, 8, 16 x requests 1, 4, 8,
// 32 MiB; kShort: threads 4, 16 x requests 1, 32 MiB; kOff: no cells.
enum class CeilingGrid : uint8_t { kFull, kShort, kOff };

struct GridCell {
  uint32_t threads = 0;
  uint64_t request_bytes = 0;
  uint64_t bytes = 0;  // moved by the cell
  double gib_s = 0;
};

// One pass of `pass(threads, request_bytes)` per cell, threads the outer loop, each reported to
// `on_cell` as it ends. `pass` returns the cell with its bytes and rate filled in.
Result<std::vector<GridCell>> MeasureGrid(
    CeilingGrid grid, const std::function<Result<GridCell>(uint32_t, uint64_t)>& pass,
    const std::function<void(const GridCell&)>& on_cell);
// The same over explicit rows and columns.
Result<std::vector<GridCell>> MeasureGrid(
    const std::vector<uint32_t>& threads, const std::vector<uint64_t>& request_bytes,
    const std::function<Result<GridCell>(uint32_t, uint64_t)>& pass,
    const std::function<void(const GridCell&)>& on_cell);
// The fastest cell (the first of equals); nullptr for none.
const GridCell* BestCell(const std::vector<GridCell>& cells);

// The cells as a JSON array of {threads, request_bytes, bytes, gib_s}, as every bench reports
// its grid.
nlohmann::json GridJson(const std::vector<GridCell>& cells);

// One payload in an engine's pack file: `tokens` path tokens from 0 with the pattern of `seed`.
struct CeilingPayload {
  uint64_t tokens = 0;
  uint64_t seed = 0;
};

// The payload of a ceiling in one file, the buffer it is read into or written from (allocated
// as the device's pinned host memory and touched once, so no pass pays first-touch faults), and
// passes of ParallelIo over it. O_DIRECT unless `buffered` or the file system refuses it; a
// buffered read pass drops the file's page cache first.
class CeilingFile {
 public:
  // Reads: payloads an engine stored in the pack file at `pack_path`, found by content (pack i
  // of a prefix is the slot whose layer-0 stripe starts with the pattern of token i * T).
  static Result<std::unique_ptr<CeilingFile>> ForPayloads(Device& device,
                                                          const std::string& pack_path,
                                                          const Geometry& g,
                                                          std::span<const CeilingPayload> payloads,
                                                          bool buffered);
  // Writes: `tokens` tokens from `first_token` with the pattern of `seed` laid out as packs at
  // the start of a new preallocated file `path`, with the pack file's addressing (pack p, layer
  // l at p*L*W + l*W), so the ceiling writes the same extents at the same alignment as the
  // engine's stores. A first pass of `threads` threads writes them untimed (the timed passes
  // rewrite written blocks, as stores reuse evicted slots) and is read back and verified. The
  // file is removed with this object.
  static Result<std::unique_ptr<CeilingFile>> ForSuffix(Device& device, const std::string& path,
                                                        const Geometry& g, uint64_t first_token,
                                                        uint64_t tokens, uint64_t seed,
                                                        uint32_t threads, bool buffered);
  ~CeilingFile();

  bool direct() const;
  // The payload's own bytes (tokens x token bytes x layers, over every payload).
  uint64_t payload_bytes() const;
  // The largest extent (a stripe's run of the payload).
  uint64_t max_extent_bytes() const;

  struct PassResult {
    double seconds = 0;
    uint64_t bytes = 0;  // the requests' bytes
  };
  // One pass: `threads` threads over the extents cut into requests of `request_bytes` (0: whole
  // extents), at most `max_bytes` of them (a grid cell; UINT64_MAX: all). A read pass with
  // `verify` compares every row with the pattern afterwards (kCorruption on a mismatch) and
  // clears the buffer.
  Result<PassResult> Pass(uint32_t threads, uint64_t request_bytes, uint64_t max_bytes,
                          bool verify);
  // GiB/s of the whole payload in each of `reps` verified passes after `warmups`.
  Result<std::vector<double>> Measure(uint32_t threads, uint64_t request_bytes, uint32_t warmups,
                                      uint32_t reps);

 private:
  struct State;
  CeilingFile();
  std::unique_ptr<State> state_;
};

// Drops the page cache of the file at `path` (after an fdatasync): a buffered pass or
// repetition then reads from the medium, not from memory.
void DropCache(const std::string& path);

// The host-to-device copy ceiling: `bytes` of pinned host memory copied to device memory in
// 32 MiB pieces on one stream, GiB/s of each of `reps` passes after `warmups`.
Result<std::vector<double>> HostToDeviceCeiling(Device& device, uint64_t bytes, uint32_t warmups,
                                                uint32_t reps);

}  // namespace rangekv::tools
