// `rangekv bench io`: how close the I/O engines come to the medium's ceiling.
//
// Writes a pack-sized file of real (pseudo-random) bytes, then reads the same bytes into the
// same host memory three ways in one run, interleaved rep by rep so machine drift hits every
// method alike:
//   ceiling - N threads of plain pread on the file's descriptor, no engine;
//   posix   - the posix engine (N workers), one batch of all blocks;
//   uring   - the uring engine (N rings), same batch, destination registered as fixed buffers.
// Each method gets one warm-up pass, then --reps timed passes; the median is reported. Every
// pass is verified (XXH3 of the destination against the written bytes) outside the timing.
// With --json FILE the result is written as
//   {"workload":"io","ceiling_gib_s":X,"results":[{"engine":"posix","gib_s":Y,"ratio":Y/X},..]}
// plus context fields (machine, file system, sizes, samples).
#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/digest.h"
#include "base/host_memory.h"
#include "base/units.h"
#include "device/device.h"
#include "io/io_engine.h"
#include "rangekv/env.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

struct BenchIoConfig {
  uint64_t size_bytes = 2 * kGiB;
  uint64_t block_bytes = 32 * kMiB;
  uint32_t threads = 4;
  uint32_t queue_depth = 8;
  uint32_t reps = 3;
  bool direct = false;
  std::string dir;
  std::string json_path;
  std::string uring_submit = "inline";
  std::string ceiling_grid = "full";  // full | short | off
  uint64_t grid_cell_bytes = 256 * kMiB;
  uint64_t split_bytes = 0;  // engines' byte split (0: spans whole)
  // Register the destination with the GPU (cudaHostRegister, as the engine's pinned staging
  // is) before reading into it: shows whether page-locked memory changes the medium's rate.
  bool cuda_register = false;
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "rangekv bench io: %s\n", what.c_str());
  throw CLI::RuntimeError(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Fail(what + ": " + s.ToString());
}

// The engine's kind of I/O memory (base/host_memory.h: huge pages where the kernel grants
// them), touched once so no pass pays first-touch page faults.
class HostBuffer {
 public:
  explicit HostBuffer(uint64_t bytes) : bytes_(bytes) {
    Result<uint8_t*> p = MapIoMemory(bytes, "bench buffer");
    if (!p.ok()) Fail(p.status().ToString());
    data_ = *p;
    std::memset(data_, 0, bytes);
  }
  ~HostBuffer() { UnmapIoMemory(data_, bytes_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  uint8_t* data_;
  uint64_t bytes_;
};

// A directory made for the run (removed afterwards) or the user's --dir (only our file is).
class WorkDir {
 public:
  explicit WorkDir(const std::string& dir) {
    if (!dir.empty()) {
      path_ = dir;
      return;
    }
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/rangekv-bench-io-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Fail("mkdtemp " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
    owned_ = true;
  }
  ~WorkDir() {
    std::error_code ec;
    if (owned_) std::filesystem::remove_all(path_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

std::string FileSystemName(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794C7630:
      return "overlayfs";
    case 0x6969:
      return "nfs";
    case 0x65735546:
      return "fuse";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(fs.f_type));
      return buf;
    }
  }
}

std::string KernelRelease() {
  struct utsname u;
  return ::uname(&u) == 0 ? u.release : "unknown";
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Pseudo-random bytes (splitmix64 per 8-byte word): incompressible, cheap to make.
void FillRandom(uint8_t* p, uint64_t bytes, uint64_t seed) {
  auto* words = reinterpret_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < bytes / 8; ++i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    words[i] = z ^ (z >> 31);
  }
}

// One read pass: a method fills `dst` with the file's bytes and returns the seconds it took.
class Method {
 public:
  virtual ~Method() = default;
  virtual const char* name() const = 0;
  virtual double Pass() = 0;
};

// N threads of plain pread, each taking the next block: the most a reader can expect. The
// engine-configuration ceiling uses --threads x --block over the whole file; grid cells and the
// best ceiling use their own threads and request size (cells over a bounded prefix).
class CeilingMethod final : public Method {
 public:
  CeilingMethod(File& file, const HostBuffer& dst, std::string name, uint32_t threads,
                uint64_t block_bytes, uint64_t bytes)
      : file_(file),
        dst_(dst),
        name_(std::move(name)),
        threads_(threads),
        block_(block_bytes),
        bytes_(bytes) {}
  const char* name() const override { return name_.c_str(); }
  uint32_t threads() const { return threads_; }
  uint64_t block() const { return block_; }
  uint64_t bytes() const { return bytes_; }

  double Pass() override {
    const uint64_t blocks = (bytes_ + block_ - 1) / block_;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < threads_; ++t) {
      threads.emplace_back([&] {
        for (uint64_t b; (b = next.fetch_add(1)) < blocks;) {
          const uint64_t off = b * block_;
          const uint64_t len = std::min(block_, bytes_ - off);
          uint64_t done = 0;
          while (done < len) {
            const ssize_t n = ::pread(file_.fd(), dst_.data() + off + done, len - done,
                                      static_cast<off_t>(off + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
              failed = true;
              return;
            }
            done += static_cast<uint64_t>(n);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    const double s = Seconds(start);
    if (failed) Fail("ceiling pread failed");
    return s;
  }

 private:
  File& file_;
  const HostBuffer& dst_;
  std::string name_;
  uint32_t threads_;
  uint64_t block_;
  uint64_t bytes_;
};

class EngineMethod final : public Method {
 public:
  EngineMethod(std::unique_ptr<IoEngine> engine, File& file, const HostBuffer& dst,
               const BenchIoConfig& cfg)
      : engine_(std::move(engine)),
        name_(engine_->name()),
        batch_(static_cast<uint32_t>(cfg.size_bytes / cfg.block_bytes)) {
    for (uint64_t off = 0; off < cfg.size_bytes; off += cfg.block_bytes) {
      Check(batch_.Add({&file, off, dst.data() + off, cfg.block_bytes, IoOp::kRead}), "batch");
    }
  }
  const char* name() const override { return name_.c_str(); }
  IoEngine& engine() { return *engine_; }

  double Pass() override {
    const auto start = std::chrono::steady_clock::now();
    Check(engine_->Submit(batch_), std::string(name_) + " submit");
    engine_->Wait(batch_);
    const double s = Seconds(start);
    Check(batch_.status(), name_ + " read");
    return s;
  }

 private:
  std::unique_ptr<IoEngine> engine_;
  std::string name_;
  IoBatch batch_;
};

void RunBenchIo(const BenchIoConfig& cfg) {
  if (cfg.block_bytes == 0 || cfg.size_bytes < cfg.block_bytes) Fail("--size must be >= --block");
  if (cfg.size_bytes % cfg.block_bytes != 0) Fail("--size must be a multiple of --block");
  if (cfg.block_bytes % 4096 != 0) Fail("--block must be a multiple of 4096");
  if (cfg.threads == 0 || cfg.reps == 0) Fail("--threads and --reps must be >= 1");
  auto submit = cfg.uring_submit == "async" ? UringSubmit::kAsync : UringSubmit::kInline;

  WorkDir dir(cfg.dir);
  const std::string path = dir.path() + "/rangekv-bench-io." + std::to_string(::getpid()) + ".dat";
  const FileOptions options{.mode = OpenMode::kReadWrite,
                            .direct = cfg.direct ? DirectIo::kPreferred : DirectIo::kOff};
  auto created = DefaultEnv()->CreateFile(path, options);
  if (!created.ok()) Fail(created.status().ToString());
  std::unique_ptr<File> file = std::move(created).value();
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_file{path};

  const double gib = static_cast<double>(cfg.size_bytes) / static_cast<double>(kGiB);
  std::fprintf(stderr, "bench io: writing %.2f GiB to %s (%s, %s)\n", gib, path.c_str(),
               FileSystemName(dir.path()).c_str(), file->direct() ? "O_DIRECT" : "buffered");
  HostBuffer dst(cfg.size_bytes);
  FillRandom(dst.data(), cfg.size_bytes, 0x5EED);
  const uint64_t expected = Hash64(dst.data(), cfg.size_bytes);
  std::unique_ptr<Device> cuda;
  HostRegistration registration;
  if (cfg.cuda_register) {
    auto d = MakeDevice(DeviceKind::kCuda);
    Check(d.status(), "--cuda-register");
    cuda = std::move(d).value();
    auto r = cuda->RegisterHostMemory(dst.data(), dst.bytes());
    Check(r.status(), "--cuda-register");
    registration = std::move(r).value();
    std::fprintf(stderr, "bench io: destination registered with the GPU (cudaHostRegister)\n");
  }
  {
    // Written with the posix engine: one span per block, then made durable.
    auto writer = MakeIoEngine(IoEngineKind::kPosix, IoEngineOptions{.workers = cfg.threads});
    Check(writer.status(), "posix engine");
    IoBatch batch(static_cast<uint32_t>(cfg.size_bytes / cfg.block_bytes));
    for (uint64_t off = 0; off < cfg.size_bytes; off += cfg.block_bytes) {
      Check(batch.Add({file.get(), off, dst.data() + off, cfg.block_bytes, IoOp::kWrite}), "batch");
    }
    const auto start = std::chrono::steady_clock::now();
    Check((*writer)->Submit(batch), "write");
    batch.Wait();
    Check(batch.status(), "write");
    Check(file->Sync(), "sync");
    std::fprintf(stderr, "bench io: wrote at %.2f GiB/s (with fdatasync)\n", gib / Seconds(start));
  }

  std::vector<std::unique_ptr<Method>> methods;
  methods.push_back(std::make_unique<CeilingMethod>(*file, dst, "ceiling", cfg.threads,
                                                    cfg.block_bytes, cfg.size_bytes));
  // The best ceiling: a grid of threads x request sizes, each cell once over a bounded prefix
  // of the file; the best cell joins the interleaved passes over the whole file.
  nlohmann::json grid = nlohmann::json::array();
  std::string best_config = std::to_string(cfg.threads) + " threads x " +
                            std::to_string(cfg.block_bytes / kMiB) + " MiB (engine config)";
  if (cfg.ceiling_grid != "off") {
    std::vector<uint32_t> grid_threads = {1, 2, 4, 8, 16};
    std::vector<uint64_t> grid_blocks = {1 * kMiB, 4 * kMiB, 8 * kMiB, 32 * kMiB};
    if (cfg.ceiling_grid == "short") {
      grid_threads = {4, 16};
      grid_blocks = {1 * kMiB, 32 * kMiB};
    }
    const uint64_t cell_bytes = std::min(cfg.size_bytes, cfg.grid_cell_bytes);
    double best = 0;
    uint32_t best_t = cfg.threads;
    uint64_t best_b = cfg.block_bytes;
    for (uint32_t t : grid_threads) {
      for (uint64_t b : grid_blocks) {
        CeilingMethod cell(*file, dst, "cell", t, b, cell_bytes);
        const double gib_s = static_cast<double>(cell_bytes) / kGiB / cell.Pass();
        grid.push_back(
            {{"threads", t}, {"request_bytes", b}, {"bytes", cell_bytes}, {"gib_s", gib_s}});
        std::fprintf(stderr, "bench io: grid %2u threads x %2llu MiB: %7.2f GiB/s\n", t,
                     static_cast<unsigned long long>(b / kMiB), gib_s);
        if (gib_s > best) {
          best = gib_s;
          best_t = t;
          best_b = b;
        }
      }
    }
    if (best_t != cfg.threads || best_b != cfg.block_bytes) {
      best_config = std::to_string(best_t) + " threads x " + std::to_string(best_b / kMiB) + " MiB";
      methods.push_back(
          std::make_unique<CeilingMethod>(*file, dst, "best-ceil", best_t, best_b, cfg.size_bytes));
    }
  }
  const size_t engines_from = methods.size();
  const IoEngineOptions engine_options{.workers = cfg.threads,
                                       .queue_depth = cfg.queue_depth,
                                       .uring_submit = submit,
                                       .split_bytes = cfg.split_bytes};
  auto posix = MakeIoEngine(IoEngineKind::kPosix, engine_options);
  Check(posix.status(), "posix engine");
  methods.push_back(std::make_unique<EngineMethod>(std::move(posix).value(), *file, dst, cfg));
  std::string uring_error;
  std::string uring_buffers = "n/a";
  auto uring = MakeIoEngine(IoEngineKind::kUring, engine_options);
  if (uring.ok()) {
    auto m = std::make_unique<EngineMethod>(std::move(uring).value(), *file, dst, cfg);
    // Register the destination (in pieces of at most 1 GiB) and the file, as a restore would
    // register its banks at startup.
    std::vector<IoBuffer> pieces;
    for (uint64_t off = 0; off < cfg.size_bytes; off += kGiB) {
      pieces.push_back({dst.data() + off, std::min(kGiB, cfg.size_bytes - off)});
    }
    const Status reg = m->engine().RegisterBuffers(pieces);
    uring_buffers = reg.ok() ? "registered" : "unregistered (" + reg.ToString() + ")";
    File* files[] = {file.get()};
    const Status regf = m->engine().RegisterFiles(files);
    if (!regf.ok())
      std::fprintf(stderr, "bench io: fixed files off: %s\n", regf.ToString().c_str());
    methods.push_back(std::move(m));
  } else {
    uring_error = uring.status().ToString();
    std::fprintf(stderr, "bench io: uring engine unavailable: %s\n", uring_error.c_str());
  }

  // Warm-up, then reps; methods interleaved within each rep.
  std::vector<std::vector<double>> samples(methods.size());
  for (uint32_t rep = 0; rep <= cfg.reps; ++rep) {
    for (size_t m = 0; m < methods.size(); ++m) {
      // Poison each block's head so a method that skipped a block cannot pass verification.
      for (uint64_t off = 0; off < cfg.size_bytes; off += cfg.block_bytes) {
        std::memset(dst.data() + off, 0xA5, 64);
      }
      const double s = methods[m]->Pass();
      if (Hash64(dst.data(), cfg.size_bytes) != expected) {
        Fail(std::string(methods[m]->name()) + " read wrong bytes");
      }
      if (rep > 0) samples[m].push_back(gib / s);
      std::fprintf(stderr, "bench io: %s %-8s %7.2f GiB/s\n", rep == 0 ? "warm-up" : "rep    ",
                   methods[m]->name(), gib / s);
    }
  }

  const double ceiling = Median(samples[0]);
  const double best_ceiling = std::max(ceiling, engines_from > 1 ? Median(samples[1]) : 0.0);
  if (engines_from > 1 && Median(samples[1]) < ceiling)
    best_config += " (lost to the engine config on the whole file)";
  nlohmann::json results = nlohmann::json::array();
  std::printf("\nrangekv bench io: %.2f GiB, %llu MiB blocks, %u threads, %s, %s, %u reps%s\n",
              gib, static_cast<unsigned long long>(cfg.block_bytes / kMiB), cfg.threads,
              file->direct() ? "O_DIRECT" : "buffered", FileSystemName(dir.path()).c_str(),
              cfg.reps, cfg.cuda_register ? ", destination cudaHostRegister'ed" : "");
  std::printf("best ceiling: %s, %.2f GiB/s; engine split: %s\n", best_config.c_str(), best_ceiling,
              cfg.split_bytes == 0 ? "none" : (std::to_string(cfg.split_bytes) + " B").c_str());
  std::printf("%-10s %12s %8s %8s   %s\n", "method", "GiB/s (med)", "ratio", "/best",
              "samples GiB/s");
  for (size_t m = 0; m < methods.size(); ++m) {
    const double med = Median(samples[m]);
    std::string list;
    for (double v : samples[m]) {
      char b[16];
      std::snprintf(b, sizeof(b), "%.2f ", v);
      list += b;
    }
    std::printf("%-10s %12.2f %8.3f %8.3f   %s\n", methods[m]->name(), med, med / ceiling,
                med / best_ceiling, list.c_str());
    if (m < engines_from) continue;
    nlohmann::json r = {{"engine", methods[m]->name()},
                        {"gib_s", med},
                        {"ratio", med / ceiling},
                        {"ratio_to_best_ceiling", med / best_ceiling},
                        {"samples_gib_s", samples[m]}};
    if (std::string(methods[m]->name()) == "uring") {
      r["buffers"] = uring_buffers;
      r["submit"] = cfg.uring_submit;
    }
    results.push_back(r);
  }
  if (!uring_error.empty()) {
    results.push_back({{"engine", "uring"},
                       {"gib_s", nullptr},
                       {"ratio", nullptr},
                       {"unavailable", uring_error}});
    std::printf("%-10s %12s %8s   %s\n", "uring", "-", "-", uring_error.c_str());
  }

  if (!cfg.json_path.empty()) {
    nlohmann::json out = {
        {"workload", "io"},
        {"ceiling_gib_s", ceiling},
        {"results", results},
        {"ceiling_samples_gib_s", samples[0]},
        {"best_ceiling_gib_s", best_ceiling},
        {"best_ceiling_config", best_config},
        {"ceiling_grid", grid},
        {"split_bytes", cfg.split_bytes},
        {"size_bytes", cfg.size_bytes},
        {"block_bytes", cfg.block_bytes},
        {"threads", cfg.threads},
        {"uring_queue_depth", cfg.queue_depth},
        {"reps", cfg.reps},
        {"direct_requested", cfg.direct},
        {"cuda_registered", cfg.cuda_register},
        {"direct_in_effect", file->direct()},
        {"machine",
         {{"nproc", std::thread::hardware_concurrency()},
          {"kernel", KernelRelease()},
          {"file_system", FileSystemName(dir.path())}}},
        {"date", UtcNow()},
    };
    std::ofstream f(cfg.json_path);
    f << out.dump(2) << "\n";
    if (!f) Fail("cannot write " + cfg.json_path);
  }
}

}  // namespace

void AddBenchIoCommand(CLI::App& bench) {
  auto cfg = std::make_shared<BenchIoConfig>();
  CLI::App* cmd = bench.add_subcommand(
      "io", "File -> host memory throughput: pread ceiling vs the posix and uring engines");
  cmd->add_option("--size", cfg->size_bytes, "File size (e.g. 2GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--block", cfg->block_bytes, "Bytes per read (one span)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--threads", cfg->threads, "pread threads / posix workers / uring rings")
      ->capture_default_str();
  cmd->add_option("--queue-depth", cfg->queue_depth, "uring SQEs in flight per ring")
      ->capture_default_str();
  cmd->add_option("--reps", cfg->reps, "Timed repetitions (after one warm-up)")
      ->capture_default_str();
  cmd->add_option("--dir", cfg->dir, "Directory for the test file (default: a temp dir)");
  cmd->add_flag("--direct", cfg->direct, "Open the file with O_DIRECT where supported");
  cmd->add_option("--uring-submit", cfg->uring_submit, "inline | async (IOSQE_ASYNC)")
      ->check(CLI::IsMember({"inline", "async"}))
      ->capture_default_str();
  cmd->add_option("--json", cfg->json_path, "Write results as JSON to this file");
  cmd->add_option("--ceiling-grid", cfg->ceiling_grid,
                  "best-ceiling grid: full (threads 1-16 x 1-32 MiB), short, off")
      ->check(CLI::IsMember({"full", "short", "off"}))
      ->capture_default_str();
  cmd->add_option("--grid-cell-bytes", cfg->grid_cell_bytes, "bytes read per grid cell")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--split", cfg->split_bytes, "engines' byte split (0: spans whole)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_flag("--cuda-register", cfg->cuda_register,
                "Page-lock the destination with the GPU first (as the engine's pinned staging)");
  cmd->callback([cfg] { RunBenchIo(*cfg); });
}

}  // namespace rangekv::tools
