#include "tools/bench/io.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "base/digest.h"
#include "base/host_memory.h"
#include "base/units.h"
#include "device/device.h"
#include "io/io_engine.h"
#include "rangekv/env.h"
#include "tools/bench/scratch.h"
#include "tools/bench/stats.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

// The engine's kind of I/O memory (base/host_memory.h: huge pages where the kernel grants
// them), touched once so no pass pays first-touch page faults.
class HostBuffer {
 public:
  static Result<std::unique_ptr<HostBuffer>> Make(uint64_t bytes) {
    RANGEKV_ASSIGN_OR_RETURN(uint8_t * p, MapIoMemory(bytes, "bench buffer"));
    std::memset(p, 0, bytes);
    return std::unique_ptr<HostBuffer>(new HostBuffer(p, bytes));
  }
  ~HostBuffer() { UnmapIoMemory(data_, bytes_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  HostBuffer(uint8_t* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  uint8_t* data_;
  uint64_t bytes_;
};

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

// One read pass: a method fills the destination with the file's bytes; seconds.
class Method {
 public:
  virtual ~Method() = default;
  virtual const std::string& name() const = 0;
  virtual bool engine() const = 0;
  virtual Result<double> Pass() = 0;
};

// A ceiling: `threads` threads of plain pread over the file's first `bytes` in `request_bytes`
// requests (ParallelIo, the ceiling of every bench command).
class CeilingMethod final : public Method {
 public:
  CeilingMethod(File& file, const HostBuffer& dst, std::string name, uint32_t threads,
                uint64_t request_bytes, uint64_t bytes)
      : file_(file),
        dst_(dst),
        name_(std::move(name)),
        threads_(threads),
        requests_(ContiguousRequests(bytes, request_bytes)) {}
  const std::string& name() const override { return name_; }
  bool engine() const override { return false; }
  Result<double> Pass() override {
    return ParallelIo(file_.fd(), requests_, dst_.data(), threads_, IoDirection::kRead);
  }

 private:
  File& file_;
  const HostBuffer& dst_;
  std::string name_;
  uint32_t threads_;
  std::vector<Extent> requests_;
};

class EngineMethod final : public Method {
 public:
  static Result<std::unique_ptr<EngineMethod>> Make(std::unique_ptr<IoEngine> engine, File& file,
                                                    const HostBuffer& dst,
                                                    const IoBenchOptions& o) {
    std::unique_ptr<EngineMethod> m(new EngineMethod(std::move(engine), o));
    for (uint64_t off = 0; off < o.size_bytes; off += o.block_bytes) {
      RANGEKV_RETURN_IF_ERROR(
          m->batch_.Add({&file, off, dst.data() + off, o.block_bytes, IoOp::kRead}));
    }
    return m;
  }
  const std::string& name() const override { return name_; }
  bool engine() const override { return true; }
  IoEngine& io_engine() { return *engine_; }
  Result<double> Pass() override {
    const double t0 = NowSeconds();
    RANGEKV_RETURN_IF_ERROR(engine_->Submit(batch_));
    engine_->Wait(batch_);
    const double seconds = NowSeconds() - t0;
    RANGEKV_RETURN_IF_ERROR(batch_.status());
    return seconds;
  }

 private:
  EngineMethod(std::unique_ptr<IoEngine> engine, const IoBenchOptions& o)
      : engine_(std::move(engine)),
        name_(engine_->name()),
        batch_(static_cast<uint32_t>(o.size_bytes / o.block_bytes)) {}
  std::unique_ptr<IoEngine> engine_;
  std::string name_;
  IoBatch batch_;
};

}  // namespace

Result<IoReport> RunIoBench(const IoBenchOptions& o) {
  if (o.block_bytes == 0 || o.size_bytes < o.block_bytes) {
    return InvalidArgument("--size must be >= --block");
  }
  if (o.size_bytes % o.block_bytes != 0) {
    return InvalidArgument("--size must be a multiple of --block");
  }
  if (o.block_bytes % 4096 != 0) return InvalidArgument("--block must be a multiple of 4096");
  if (o.threads == 0 || o.reps == 0) return InvalidArgument("--threads and --reps must be >= 1");
  IoReport rep;
  rep.options = o;

  std::string parent = o.dir;
  if (parent.empty()) {
    const char* t = std::getenv("TMPDIR");
    parent = t != nullptr && *t != '\0' ? t : "/tmp";
  }
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<ScratchDir> dir,
                           ScratchDir::Make(parent, "rangekv-bench-io-"));
  const std::string path = dir->Join("rangekv-bench-io.dat");
  const FileOptions file_options{.mode = OpenMode::kReadWrite,
                                 .direct = o.direct ? DirectIo::kPreferred : DirectIo::kOff};
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                           DefaultEnv()->CreateFile(path, file_options));
  rep.direct_in_effect = file->direct();
  rep.machine = DescribeMachine(dir->path());

  const double gib = static_cast<double>(o.size_bytes) / static_cast<double>(kGiB);
  std::fprintf(stderr, "bench io: writing %.2f GiB to %s (%s, %s)\n", gib, path.c_str(),
               rep.machine.file_system.c_str(), file->direct() ? "O_DIRECT" : "buffered");
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<HostBuffer> dst, HostBuffer::Make(o.size_bytes));
  FillRandom(dst->data(), o.size_bytes, 0x5EED);
  const uint64_t expected = Hash64(dst->data(), o.size_bytes);
  std::unique_ptr<Device> cuda;
  HostRegistration registration;
  if (o.cuda_register) {
    RANGEKV_ASSIGN_OR_RETURN(cuda, MakeDevice(DeviceKind::kCuda));
    RANGEKV_ASSIGN_OR_RETURN(registration, cuda->RegisterHostMemory(dst->data(), dst->bytes()));
    std::fprintf(stderr, "bench io: destination registered with the GPU (cudaHostRegister)\n");
  }
  {
    // Written with the posix engine: one span per block, then made durable.
    RANGEKV_ASSIGN_OR_RETURN(
        std::unique_ptr<IoEngine> writer,
        MakeIoEngine(IoEngineKind::kPosix, IoEngineOptions{.workers = o.threads}));
    IoBatch batch(static_cast<uint32_t>(o.size_bytes / o.block_bytes));
    for (uint64_t off = 0; off < o.size_bytes; off += o.block_bytes) {
      RANGEKV_RETURN_IF_ERROR(
          batch.Add({file.get(), off, dst->data() + off, o.block_bytes, IoOp::kWrite}));
    }
    const double t0 = NowSeconds();
    RANGEKV_RETURN_IF_ERROR(writer->Submit(batch));
    batch.Wait();
    RANGEKV_RETURN_IF_ERROR(batch.status());
    RANGEKV_RETURN_IF_ERROR(file->Sync());
    std::fprintf(stderr, "bench io: wrote at %.2f GiB/s (with fdatasync)\n",
                 gib / (NowSeconds() - t0));
  }

  std::vector<std::unique_ptr<Method>> methods;
  methods.push_back(std::make_unique<CeilingMethod>(*file, *dst, "ceiling", o.threads,
                                                    o.block_bytes, o.size_bytes));
  // The best ceiling: each grid cell once over a bounded prefix of the file; the best cell
  // joins the interleaved passes over the whole file.
  rep.best_config = std::to_string(o.threads) + " threads x " +
                    std::to_string(o.block_bytes / kMiB) + " MiB (engine config)";
  const uint64_t cell_bytes = std::min(o.size_bytes, o.grid_cell_bytes);
  RANGEKV_ASSIGN_OR_RETURN(
      rep.grid,
      MeasureGrid(
          o.ceiling_grid,
          [&](uint32_t threads, uint64_t request) -> Result<GridCell> {
            CeilingMethod cell(*file, *dst, "cell", threads, request, cell_bytes);
            RANGEKV_ASSIGN_OR_RETURN(double seconds, cell.Pass());
            return GridCell{threads, request, cell_bytes,
                            static_cast<double>(cell_bytes) / kGiB / seconds};
          },
          [&](const GridCell& g) {
            std::fprintf(stderr, "bench io: grid %2u threads x %2llu MiB: %7.2f GiB/s\n", g.threads,
                         static_cast<unsigned long long>(g.request_bytes / kMiB), g.gib_s);
          }));
  const GridCell* best = BestCell(rep.grid);
  if (best != nullptr && (best->threads != o.threads || best->request_bytes != o.block_bytes)) {
    rep.best_config = std::to_string(best->threads) + " threads x " +
                      std::to_string(best->request_bytes / kMiB) + " MiB";
    methods.push_back(std::make_unique<CeilingMethod>(*file, *dst, "best-ceil", best->threads,
                                                      best->request_bytes, o.size_bytes));
  }
  const size_t engines_from = methods.size();
  const IoEngineOptions engine_options{
      .workers = o.threads,
      .queue_depth = o.queue_depth,
      .uring_submit = o.uring_submit_async ? UringSubmit::kAsync : UringSubmit::kInline,
      .split_bytes = o.split_bytes};
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> posix,
                           MakeIoEngine(IoEngineKind::kPosix, engine_options));
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<EngineMethod> posix_method,
                           EngineMethod::Make(std::move(posix), *file, *dst, o));
  methods.push_back(std::move(posix_method));
  Result<std::unique_ptr<IoEngine>> uring = MakeIoEngine(IoEngineKind::kUring, engine_options);
  if (uring.ok()) {
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<EngineMethod> m,
                             EngineMethod::Make(std::move(uring).value(), *file, *dst, o));
    // Register the destination (in pieces of at most 1 GiB) and the file, as a restore would
    // register its banks at startup.
    std::vector<IoBuffer> pieces;
    for (uint64_t off = 0; off < o.size_bytes; off += kGiB) {
      pieces.push_back({dst->data() + off, std::min(kGiB, o.size_bytes - off)});
    }
    const Status reg = m->io_engine().RegisterBuffers(pieces);
    rep.uring_buffers = reg.ok() ? "registered" : "unregistered (" + reg.ToString() + ")";
    File* files[] = {file.get()};
    const Status regf = m->io_engine().RegisterFiles(files);
    if (!regf.ok())
      std::fprintf(stderr, "bench io: fixed files off: %s\n", regf.ToString().c_str());
    methods.push_back(std::move(m));
  } else {
    rep.uring_error = uring.status().ToString();
    std::fprintf(stderr, "bench io: uring engine unavailable: %s\n", rep.uring_error.c_str());
  }

  // Warm-up, then reps; methods interleaved within each rep.
  std::vector<std::vector<double>> samples(methods.size());
  for (uint32_t r = 0; r <= o.reps; ++r) {
    for (size_t m = 0; m < methods.size(); ++m) {
      // Poison each block's head so a method that skipped a block cannot pass verification.
      for (uint64_t off = 0; off < o.size_bytes; off += o.block_bytes) {
        std::memset(dst->data() + off, 0xA5, 64);
      }
      RANGEKV_ASSIGN_OR_RETURN(double seconds, methods[m]->Pass());
      if (Hash64(dst->data(), o.size_bytes) != expected) {
        return Corruption(methods[m]->name() + " read wrong bytes");
      }
      if (r > 0) samples[m].push_back(gib / seconds);
      std::fprintf(stderr, "bench io: %s %-8s %7.2f GiB/s\n", r == 0 ? "warm-up" : "rep    ",
                   methods[m]->name().c_str(), gib / seconds);
    }
  }
  for (size_t m = 0; m < methods.size(); ++m) {
    rep.methods.push_back(
        {methods[m]->name(), methods[m]->engine(), samples[m], Median(samples[m])});
  }
  rep.ceiling_gib_s = rep.methods[0].median_gib_s;
  rep.best_ceiling_gib_s =
      std::max(rep.ceiling_gib_s, engines_from > 1 ? rep.methods[1].median_gib_s : 0.0);
  if (engines_from > 1 && rep.methods[1].median_gib_s < rep.ceiling_gib_s) {
    rep.best_config += " (lost to the engine config on the whole file)";
  }
  rep.date = UtcTimestamp();
  return rep;
}

void PrintIoReport(const IoReport& rep, std::FILE* out) {
  const IoBenchOptions& o = rep.options;
  const double gib = static_cast<double>(o.size_bytes) / static_cast<double>(kGiB);
  std::fprintf(out,
               "\nrangekv bench io: %.2f GiB, %llu MiB blocks, %u threads, %s, %s, %u reps%s\n",
               gib, static_cast<unsigned long long>(o.block_bytes / kMiB), o.threads,
               rep.direct_in_effect ? "O_DIRECT" : "buffered", rep.machine.file_system.c_str(),
               o.reps, o.cuda_register ? ", destination cudaHostRegister'ed" : "");
  std::fprintf(out, "best ceiling: %s, %.2f GiB/s; engine split: %s\n", rep.best_config.c_str(),
               rep.best_ceiling_gib_s,
               o.split_bytes == 0 ? "none" : (std::to_string(o.split_bytes) + " B").c_str());
  std::fprintf(out, "%-10s %12s %8s %8s   %s\n", "method", "GiB/s (med)", "ratio", "/best",
               "samples GiB/s");
  for (const IoMethodResult& m : rep.methods) {
    std::string list;
    for (double v : m.samples_gib_s) {
      char b[16];
      std::snprintf(b, sizeof(b), "%.2f ", v);
      list += b;
    }
    std::fprintf(out, "%-10s %12.2f %8.3f %8.3f   %s\n", m.name.c_str(), m.median_gib_s,
                 m.median_gib_s / rep.ceiling_gib_s, m.median_gib_s / rep.best_ceiling_gib_s,
                 list.c_str());
  }
  if (!rep.uring_error.empty()) {
    std::fprintf(out, "%-10s %12s %8s   %s\n", "uring", "-", "-", rep.uring_error.c_str());
  }
}

nlohmann::json IoJson(const IoReport& rep) {
  const IoBenchOptions& o = rep.options;
  nlohmann::json results = nlohmann::json::array();
  for (const IoMethodResult& m : rep.methods) {
    if (!m.engine) continue;
    nlohmann::json r = {{"engine", m.name},
                        {"gib_s", m.median_gib_s},
                        {"ratio", m.median_gib_s / rep.ceiling_gib_s},
                        {"ratio_to_best_ceiling", m.median_gib_s / rep.best_ceiling_gib_s},
                        {"samples_gib_s", m.samples_gib_s}};
    if (m.name == "uring") {
      r["buffers"] = rep.uring_buffers;
      r["submit"] = o.uring_submit_async ? "async" : "inline";
    }
    results.push_back(r);
  }
  if (!rep.uring_error.empty()) {
    results.push_back({{"engine", "uring"},
                       {"gib_s", nullptr},
                       {"ratio", nullptr},
                       {"unavailable", rep.uring_error}});
  }
  nlohmann::json grid = GridJson(rep.grid);
  return {{"workload", "io"},
          {"ceiling_gib_s", rep.ceiling_gib_s},
          {"results", results},
          {"ceiling_samples_gib_s", rep.methods[0].samples_gib_s},
          {"best_ceiling_gib_s", rep.best_ceiling_gib_s},
          {"best_ceiling_config", rep.best_config},
          {"ceiling_grid", grid},
          {"split_bytes", o.split_bytes},
          {"size_bytes", o.size_bytes},
          {"block_bytes", o.block_bytes},
          {"threads", o.threads},
          {"uring_queue_depth", o.queue_depth},
          {"reps", o.reps},
          {"direct_requested", o.direct},
          {"cuda_registered", o.cuda_register},
          {"direct_in_effect", rep.direct_in_effect},
          {"machine", rep.machine.ToJson()},
          {"date", rep.date}};
}

}  // namespace rangekv::tools
