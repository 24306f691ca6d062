// `rangekv bench io`: how close the I/O engines come to the medium's ceiling.
//
// Writes a file of real (pseudo-random) bytes, then reads the same bytes into the same host
// memory in one run, interleaved rep by rep so machine drift hits every method alike:
//   ceiling    - `threads` threads of plain pread of `block_bytes` requests
//   (tools/bench/ceiling.h); best-ceil  - the fastest cell of a thread x request-size grid (cells
//   over a bounded prefix of
//                the file), re-measured on the whole file, when it is not the ceiling's own;
//   posix      - the posix engine (`threads` workers), one batch of all blocks;
//   uring      - the uring engine (`threads` rings), same batch, destination registered as fixed
//                buffers and the file as a fixed file.
// Each method gets one warm-up pass, then `reps` timed passes; the median is reported. Every pass
// is verified (XXH3 of the destination against the written bytes) outside the timing.
//
// Thread-safety: RunIoBench is called by one thread (its methods start their own).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rangekv/status.h"
#include "tools/bench/ceiling.h"
#include "tools/bench/machine.h"

namespace rangekv::tools {

struct IoBenchOptions {
  uint64_t size_bytes = 2ull << 30;
  uint64_t block_bytes = 32ull << 20;
  uint32_t threads = 4;
  uint32_t queue_depth = 8;  // uring SQEs in flight per ring
  uint32_t reps = 3;
  bool direct = false;
  std::string dir;                  // parent of the scratch directory ("": $TMPDIR or /tmp)
  bool uring_submit_async = false;  // IOSQE_ASYNC
  CeilingGrid ceiling_grid = CeilingGrid::kFull;
  uint64_t grid_cell_bytes = 256ull << 20;
  uint64_t split_bytes = 0;  // the engines' byte split (0: spans whole)
  // Page-lock the destination with the GPU first (cudaHostRegister, as the engine's pinned
  // staging is): shows whether page-locked memory changes the medium's rate.
  bool cuda_register = false;
};

struct IoMethodResult {
  std::string name;  // "ceiling", "best-ceil", "posix", "uring"
  bool engine = false;
  std::vector<double> samples_gib_s;
  double median_gib_s = 0;
};

struct IoReport {
  IoBenchOptions options;
  std::vector<IoMethodResult> methods;  // the ceilings first
  double ceiling_gib_s = 0;
  double best_ceiling_gib_s = 0;
  std::string best_config;
  std::vector<GridCell> grid;
  std::string uring_buffers = "n/a";  // "registered" or why not
  std::string uring_error;            // the uring engine's failure, when it could not run
  bool direct_in_effect = false;
  MachineInfo machine;
  std::string date;  // UTC timestamp
};

Result<IoReport> RunIoBench(const IoBenchOptions& options);
void PrintIoReport(const IoReport& report, std::FILE* out);
// {"workload":"io","ceiling_gib_s":X,"results":[{"engine":"posix","gib_s":Y,"ratio":Y/X},..],
// ...context (sizes, grid, machine, date)}.
nlohmann::json IoJson(const IoReport& report);

}  // namespace rangekv::tools
