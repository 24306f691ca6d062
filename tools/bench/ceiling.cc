#include "tools/bench/ceiling.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "base/units.h"
#include "pack/pack_file.h"
#include "rangekv/env.h"
#include "tools/bench/paged_kv.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Opens `path` with O_DIRECT unless buffered (or the file system refuses it); *direct says.
Result<Fd> OpenForCeiling(const std::string& path, int flags, bool buffered, bool* direct) {
  if (!buffered) {
    const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      *direct = true;
      return Fd(fd);
    }
    if (errno != EINVAL) return ErrnoStatus(errno, "open " + path);
  }
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  *direct = false;
  return Fd(fd);
}

// The payload's stripe extents in an engine's pack file, found by content.
Result<std::vector<Extent>> LocatePayload(const std::string& pack_path, const Geometry& g,
                                          uint64_t payload_tokens, uint64_t seed) {
  PackOpenOptions po;
  po.mode = OpenMode::kReadOnly;
  RANGEKV_ASSIGN_OR_RETURN(PackFile pack,
                           PackFile::Open(DefaultEnv(), pack_path, PackExpectation::Any(), po));
  const uint64_t T = g.tokens_per_stripe;
  const uint64_t s = g.token_bytes;
  const uint64_t packs = (payload_tokens + T - 1) / T;
  std::vector<uint8_t> want(s);
  std::vector<uint8_t> got(s);
  std::vector<Extent> out;
  uint64_t buffer_offset = 0;
  for (uint64_t i = 0; i < packs; ++i) {
    PatternRows(seed, 0, i * T, 1, s, want.data());
    int64_t found = -1;
    for (uint64_t slot = 0; slot < pack.pack_count() && found < 0; ++slot) {
      RANGEKV_ASSIGN_OR_RETURN(uint64_t n,
                               pack.file()->ReadAt(pack.Address(slot, 0, 0), got.data(), s));
      if (n == s && std::memcmp(got.data(), want.data(), s) == 0) {
        found = static_cast<int64_t>(slot);
      }
    }
    if (found < 0) {
      return NotFound("ceiling: pack " + std::to_string(i) + " of the payload was not found in " +
                      pack_path);
    }
    const uint64_t tokens = std::min(T, payload_tokens - i * T);
    for (uint32_t l = 0; l < g.layers; ++l) {
      Extent e;
      e.file_offset = pack.Address(static_cast<uint64_t>(found), l, 0);
      e.bytes = AlignUp(tokens * s, kIoAlignment);
      e.buffer_offset = buffer_offset;
      e.layer = l;
      e.token_begin = i * T;
      e.tokens = tokens;
      buffer_offset += e.bytes;
      out.push_back(e);
    }
  }
  return out;
}

// Stripe extents of `tokens` tokens from `first_token` laid out as packs at the start of a file.
std::vector<Extent> SuffixExtents(const Geometry& g, uint64_t first_token, uint64_t tokens) {
  const uint64_t T = g.tokens_per_stripe;
  std::vector<Extent> out;
  uint64_t buffer_offset = 0;
  for (uint64_t base = 0, pack = 0; base < tokens; base += T, ++pack) {
    const uint64_t n = std::min(T, tokens - base);
    for (uint32_t l = 0; l < g.layers; ++l) {
      Extent e;
      e.file_offset = pack * g.pack_bytes + uint64_t{l} * g.stripe_bytes;
      e.bytes = AlignUp(n * g.token_bytes, kIoAlignment);
      e.buffer_offset = buffer_offset;
      e.layer = l;
      e.token_begin = first_token + base;
      e.tokens = n;
      buffer_offset += e.bytes;
      out.push_back(e);
    }
  }
  return out;
}

uint64_t ExtentsEnd(const std::vector<Extent>& extents) {
  uint64_t total = 0;
  for (const Extent& e : extents) total = std::max(total, e.buffer_offset + e.bytes);
  return total;
}

// Rows of every extent in `buffer` that differ from the pattern of `seed`.
uint64_t CountExtentMismatches(const std::vector<Extent>& extents, const uint8_t* buffer,
                               uint64_t seed, uint64_t token_bytes) {
  std::atomic<uint64_t> bad{0};
  ParallelFor(extents.size(), [&](uint64_t lo, uint64_t hi) {
    std::vector<uint8_t> row(token_bytes);
    for (uint64_t k = lo; k < hi; ++k) {
      const Extent& e = extents[k];
      for (uint64_t t = 0; t < e.tokens; ++t) {
        PatternRows(seed, e.layer, e.token_begin + t, 1, token_bytes, row.data());
        if (std::memcmp(buffer + e.buffer_offset + t * token_bytes, row.data(), token_bytes) != 0) {
          bad.fetch_add(1);
        }
      }
    }
  });
  return bad.load();
}

}  // namespace

void DropCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

Result<double> ParallelIo(int fd, std::span<const Extent> requests, uint8_t* buffer,
                          uint32_t threads, IoDirection direction) {
  const bool write = direction == IoDirection::kWrite;
  std::atomic<size_t> next{0};
  std::atomic<int> error{0};
  const double t0 = NowSeconds();
  std::vector<std::thread> pool;
  for (uint32_t i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      for (size_t k = next.fetch_add(1); k < requests.size() && error.load() == 0;
           k = next.fetch_add(1)) {
        const Extent& e = requests[k];
        uint64_t done = 0;
        while (done < e.bytes) {
          const ssize_t n = write ? ::pwrite(fd, buffer + e.buffer_offset + done, e.bytes - done,
                                             static_cast<off_t>(e.file_offset + done))
                                  : ::pread(fd, buffer + e.buffer_offset + done, e.bytes - done,
                                            static_cast<off_t>(e.file_offset + done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            error.store(n < 0 ? errno : EIO);
            break;
          }
          done += static_cast<uint64_t>(n);
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = NowSeconds() - t0;
  if (error.load() != 0)
    return ErrnoStatus(error.load(), write ? "ceiling pwrite" : "ceiling pread");
  return seconds;
}

std::vector<Extent> CutExtents(const std::vector<Extent>& extents, uint64_t request_bytes,
                               uint64_t max_bytes) {
  std::vector<Extent> out;
  uint64_t total = 0;
  for (const Extent& e : extents) {
    if (!out.empty() && total + e.bytes > max_bytes) break;
    total += e.bytes;
    for (uint64_t off = 0; off < e.bytes; off += request_bytes) {
      Extent piece = e;
      piece.file_offset = e.file_offset + off;
      piece.buffer_offset = e.buffer_offset + off;
      piece.bytes = std::min(request_bytes, e.bytes - off);
      piece.tokens = 0;  // pieces are not verified row by row
      out.push_back(piece);
    }
  }
  return out;
}

std::vector<Extent> ContiguousRequests(uint64_t bytes, uint64_t request_bytes) {
  std::vector<Extent> out;
  for (uint64_t off = 0; off < bytes; off += request_bytes) {
    Extent e;
    e.file_offset = off;
    e.buffer_offset = off;
    e.bytes = std::min(request_bytes, bytes - off);
    out.push_back(e);
  }
  return out;
}

uint64_t SumBytes(std::span<const Extent> extents) {
  uint64_t n = 0;
  for (const Extent& e : extents) n += e.bytes;
  return n;
}

std::string RequestName(uint64_t bytes) {
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + " MiB"
                       : std::to_string(bytes / kKiB) + " KiB";
}

Result<std::vector<GridCell>> MeasureGrid(
    const std::vector<uint32_t>& threads, const std::vector<uint64_t>& request_bytes,
    const std::function<Result<GridCell>(uint32_t, uint64_t)>& pass,
    const std::function<void(const GridCell&)>& on_cell) {
  std::vector<GridCell> cells;
  for (uint32_t t : threads) {
    for (uint64_t r : request_bytes) {
      RANGEKV_ASSIGN_OR_RETURN(GridCell cell, pass(t, r));
      cells.push_back(cell);
      if (on_cell) on_cell(cell);
    }
  }
  return cells;
}

Result<std::vector<GridCell>> MeasureGrid(
    CeilingGrid grid, const std::function<Result<GridCell>(uint32_t, uint64_t)>& pass,
    const std::function<void(const GridCell&)>& on_cell) {
  switch (grid) {
    case CeilingGrid::kFull:
      return MeasureGrid({1, 2, 4, 8, 16}, {1 * kMiB, 4 * kMiB, 8 * kMiB, 32 * kMiB}, pass,
                         on_cell);
    case CeilingGrid::kShort:
      return MeasureGrid({4, 16}, {1 * kMiB, 32 * kMiB}, pass, on_cell);
    case CeilingGrid::kOff:
      break;
  }
  return std::vector<GridCell>{};
}

const GridCell* BestCell(const std::vector<GridCell>& cells) {
  const GridCell* best = nullptr;
  for (const GridCell& c : cells) {
    if (best == nullptr || c.gib_s > best->gib_s) best = &c;
  }
  return best;
}

nlohmann::json GridJson(const std::vector<GridCell>& cells) {
  nlohmann::json grid = nlohmann::json::array();
  for (const GridCell& g : cells) {
    grid.push_back({{"threads", g.threads},
                    {"request_bytes", g.request_bytes},
                    {"bytes", g.bytes},
                    {"gib_s", g.gib_s}});
  }
  return grid;
}

struct CeilingFile::State {
  std::string path;
  Geometry geometry;
  IoDirection direction = IoDirection::kRead;
  // The payloads' extents (buffer offsets one after the other), and per payload its own
  // extents and pattern seed, for verification.
  std::vector<Extent> extents;
  std::vector<std::pair<std::vector<Extent>, uint64_t>> groups;
  uint64_t bytes = 0;
  PinnedHostBuffer buffer;
  Fd fd;
  bool direct = false;
};

CeilingFile::CeilingFile() : state_(std::make_unique<State>()) {}

CeilingFile::~CeilingFile() {
  if (state_->direction == IoDirection::kWrite && !state_->path.empty()) {
    state_->fd = Fd();
    ::unlink(state_->path.c_str());
  }
}

Result<std::unique_ptr<CeilingFile>> CeilingFile::ForPayloads(
    Device& device, const std::string& pack_path, const Geometry& g,
    std::span<const CeilingPayload> payloads, bool buffered) {
  std::unique_ptr<CeilingFile> file(new CeilingFile());
  State& c = *file->state_;
  c.path = pack_path;
  c.geometry = g;
  for (const CeilingPayload& p : payloads) {
    RANGEKV_ASSIGN_OR_RETURN(std::vector<Extent> e, LocatePayload(pack_path, g, p.tokens, p.seed));
    const uint64_t base = c.extents.empty() ? 0 : ExtentsEnd(c.extents);
    for (Extent& x : e) {
      x.buffer_offset += base;
      c.extents.push_back(x);
    }
    c.groups.emplace_back(std::move(e), p.seed);
    c.bytes += p.tokens * g.token_bytes * g.layers;
  }
  RANGEKV_ASSIGN_OR_RETURN(c.buffer, device.AllocatePinnedHost(ExtentsEnd(c.extents)));
  std::memset(c.buffer.data(), 0, c.buffer.size_bytes());  // no first-touch faults timed
  RANGEKV_ASSIGN_OR_RETURN(c.fd, OpenForCeiling(pack_path, O_RDONLY, buffered, &c.direct));
  return file;
}

Result<std::unique_ptr<CeilingFile>> CeilingFile::ForSuffix(Device& device, const std::string& path,
                                                            const Geometry& g, uint64_t first_token,
                                                            uint64_t tokens, uint64_t seed,
                                                            uint32_t threads, bool buffered) {
  std::unique_ptr<CeilingFile> file(new CeilingFile());
  State& c = *file->state_;
  c.geometry = g;
  c.direction = IoDirection::kWrite;
  c.extents = SuffixExtents(g, first_token, tokens);
  c.groups.emplace_back(c.extents, seed);
  c.bytes = tokens * g.token_bytes * g.layers;
  RANGEKV_ASSIGN_OR_RETURN(c.buffer, device.AllocatePinnedHost(ExtentsEnd(c.extents)));
  for (const Extent& e : c.extents) {
    PatternRows(seed, e.layer, e.token_begin, e.tokens, g.token_bytes,
                c.buffer.data() + e.buffer_offset);
  }
  RANGEKV_ASSIGN_OR_RETURN(c.fd, OpenForCeiling(path, O_RDWR | O_CREAT, buffered, &c.direct));
  c.path = path;  // from here on the destructor removes it
  const uint64_t file_bytes = c.extents.back().file_offset + c.extents.back().bytes;
  if (::posix_fallocate(c.fd.get(), 0, static_cast<off_t>(file_bytes)) != 0 &&
      ::ftruncate(c.fd.get(), static_cast<off_t>(file_bytes)) != 0) {
    return ErrnoStatus(errno, "ftruncate " + path);
  }
  RANGEKV_RETURN_IF_ERROR(
      ParallelIo(c.fd.get(), c.extents, c.buffer.data(), threads, IoDirection::kWrite).status());
  // Read back once: the ceiling writes what it claims.
  RANGEKV_ASSIGN_OR_RETURN(PinnedHostBuffer check,
                           device.AllocatePinnedHost(ExtentsEnd(c.extents)));
  RANGEKV_RETURN_IF_ERROR(
      ParallelIo(c.fd.get(), c.extents, check.data(), threads, IoDirection::kRead).status());
  if (CountExtentMismatches(c.extents, check.data(), seed, g.token_bytes) != 0) {
    return Corruption("write ceiling: the file does not hold what was written");
  }
  return file;
}

bool CeilingFile::direct() const { return state_->direct; }
uint64_t CeilingFile::payload_bytes() const { return state_->bytes; }
uint64_t CeilingFile::max_extent_bytes() const {
  uint64_t m = 0;
  for (const Extent& e : state_->extents) m = std::max(m, e.bytes);
  return m;
}

Result<CeilingFile::PassResult> CeilingFile::Pass(uint32_t threads, uint64_t request_bytes,
                                                  uint64_t max_bytes, bool verify) {
  State& c = *state_;
  const bool read = c.direction == IoDirection::kRead;
  const std::vector<Extent> requests =
      request_bytes == 0 && max_bytes == UINT64_MAX
          ? c.extents
          : CutExtents(c.extents, request_bytes == 0 ? UINT64_MAX : request_bytes, max_bytes);
  if (read && !c.direct) DropCache(c.path);
  RANGEKV_ASSIGN_OR_RETURN(double seconds,
                           ParallelIo(c.fd.get(), requests, c.buffer.data(), threads, c.direction));
  if (read && verify) {
    uint64_t bad = 0;
    for (const auto& [extents, seed] : c.groups) {
      bad += CountExtentMismatches(extents, c.buffer.data(), seed, c.geometry.token_bytes);
    }
    if (bad != 0) return Corruption("ceiling read " + std::to_string(bad) + " wrong rows");
    std::memset(c.buffer.data(), 0, c.buffer.size_bytes());
  }
  return PassResult{seconds, SumBytes(requests)};
}

Result<std::vector<double>> CeilingFile::Measure(uint32_t threads, uint64_t request_bytes,
                                                 uint32_t warmups, uint32_t reps) {
  std::vector<double> out;
  for (uint32_t rep = 0; rep < warmups + reps; ++rep) {
    RANGEKV_ASSIGN_OR_RETURN(PassResult pass, Pass(threads, request_bytes, UINT64_MAX, true));
    if (rep >= warmups) out.push_back(static_cast<double>(payload_bytes()) / kGiB / pass.seconds);
  }
  return out;
}

Result<std::vector<double>> HostToDeviceCeiling(Device& device, uint64_t bytes, uint32_t warmups,
                                                uint32_t reps) {
  RANGEKV_ASSIGN_OR_RETURN(PinnedHostBuffer src, device.AllocatePinnedHost(bytes));
  std::memset(src.data(), 1, bytes);
  RANGEKV_ASSIGN_OR_RETURN(DeviceBuffer dst, device.AllocateDevice(bytes));
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device.CreateStream());
  std::vector<double> samples;
  for (uint32_t r = 0; r < warmups + reps; ++r) {
    const double t0 = NowSeconds();
    for (uint64_t off = 0; off < bytes; off += 32 * kMiB) {
      RANGEKV_RETURN_IF_ERROR(stream->CopyHostToDevice(dst.bytes() + off, src.data() + off,
                                                       std::min<uint64_t>(32 * kMiB, bytes - off)));
    }
    RANGEKV_RETURN_IF_ERROR(stream->Synchronize());
    const double gib_s = static_cast<double>(bytes) / kGiB / (NowSeconds() - t0);
    if (r >= warmups) samples.push_back(gib_s);
  }
  return samples;
}

}  // namespace rangekv::tools
