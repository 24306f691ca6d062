// crash_driver: runs the crash test's workload (crash_workload.h) through the Engine on a store
// directory and, optionally, kills itself with SIGKILL at a chosen point (engine_crash_test.cc
// is the parent that reopens the store afterwards and checks it).
//
//   crash_driver --dir D --seed S --sessions N --ops M [--kill POINT --at K]
//                [--durability every_publish|periodic:<ms>|none] [--checkpoint-ms C]
//                [--packs P] [--acks FILE] [--pace-us U]
//
// --durability sets EngineOptions::durability (default: the engine's), --checkpoint-ms its
// checkpoint_interval_ms; --packs the store's pack count (CrashWorkload::Options); --pace-us
// sleeps that long after every operation (so a run spans many journal periods). --acks appends
// to FILE (unbuffered, so it survives the SIGKILL): "ack <prefix>" after every store that
// returned visible AND durable (StoreOutcome::durable, durability=every_publish), "vis <prefix>
// <ns>" after every store that returned visible, and "kill <ns>" just before a chosen kill point
// raises SIGKILL (ns: CLOCK_MONOTONIC, which the parent reads too). The parent expects every ack,
// and under periodic every vis older than the window before the kill, to be found again bit for
// bit.
//
// POINT names where the K-th occurrence (1-based, counted over the whole run) raises SIGKILL:
//   gather            a store batch's gather and digests are proven, none of its writes issued
//   write             right after the K-th pack-file write returned (between a batch's writes)
//   publish           every write of a store returned, just before Directory::Publish
//   published         right after a store became visible
//   step<n>           after clean-shutdown step n (persist::ShutdownStep: 0 payload synced,
//                     1 snapshot temp written, 2 temp synced, 3 renamed, 4 rename durable,
//                     5 marker removed, 6 marker removal durable)
//   snapshot_partial  in the middle of the K-th snapshot temp-file write: half of it reaches
//                     the file, then the process dies
//   io                just before the K-th mutating file-system operation of any kind (write,
//                     fsync, create, rename, delete, directory fsync, truncate, allocate)
//   none              no kill (a dry run); the driver prints how often each point occurred
// The parent may also kill the driver from outside after a delay (no --kill).
//
//   crash_driver --dir D --seed S --sessions N --ops M --flip LAYER
// runs the workload to its end (a clean store), then flips one byte (pack token 1) of layer
// LAYER of the first visible pack and prints "flipped slot=S generation=G layer=L
// path_tokens=A,B" (the path tokens of that pack's first digest block): the fsck CLI test's
// store made by the Engine.
//
// Every restore in the workload is checked bit for bit while the driver runs; a wrong byte, a
// failed token or a checksum failure exits with status 3 (the parent fails). Exit status 0:
// the workload completed (the point was not reached); 2: bad arguments or an engine error.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "base/log.h"
#include "engine/crash_workload.h"
#include "persist/offline.h"
#include "persist/store_layout.h"
#include "rangekv/env.h"
#include "testing/engine_fixture.h"
#include "testing/engine_internals.h"

namespace rangekv {
namespace {

using testing::CrashWorkload;

enum class Point : uint8_t {
  kNone,
  kGather,
  kWrite,
  kPublish,
  kPublished,
  kStep,
  kSnapshotPartial,
  kIo,
};

struct Counts {
  std::atomic<uint64_t> gather{0}, write{0}, publish{0}, published{0}, step{0}, snapshot_writes{0},
      io{0};
  uint64_t checkpoints = 0;  // the journal's checkpoints while sessions ran (not at Close)
};

Counts g_counts;
Point g_point = Point::kNone;
int g_step = -1;
uint64_t g_at = 0;
std::string g_durability;
uint64_t g_packs = CrashWorkload::kPacks;
int g_acks_fd = -1;
uint64_t g_checkpoint_ms = 0;  // 0: the engine's default
bool g_checkpoint_set = false;
uint64_t g_pace_us = 0;

uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One line to the acks file: a single write() (safe from any thread, and before a SIGKILL).
void AckLine(const std::string& line) {
  if (g_acks_fd < 0) return;
  if (::write(g_acks_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(2);
}

void Ack(uint32_t prefix) { AckLine("ack " + std::to_string(prefix) + "\n"); }
void Visible(uint32_t prefix) {
  AckLine("vis " + std::to_string(prefix) + " " + std::to_string(MonotonicNs()) + "\n");
}

[[noreturn]] void Die() {
  // Formatted without allocating: Die may run on any thread, at any point.
  char line[32];
  const int n = std::snprintf(line, sizeof(line), "kill %llu\n",
                              static_cast<unsigned long long>(MonotonicNs()));
  if (g_acks_fd >= 0 && n > 0) (void)::write(g_acks_fd, line, static_cast<size_t>(n));
  raise(SIGKILL);
  _exit(4);  // not reached
}

void Reached(Point p, std::atomic<uint64_t>& counter) {
  const uint64_t n = counter.fetch_add(1) + 1;
  if (p == g_point && n == g_at) Die();
}

// ---- a file seam that counts (and may die at) mutating operations -------------------------

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void Mutating() { Reached(Point::kIo, g_counts.io); }

class KillFile final : public File {
 public:
  explicit KillFile(std::unique_ptr<File> base) : base_(std::move(base)) {}
  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    return base_->ReadAt(offset, buf, size);
  }
  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    Mutating();
    if (EndsWith(path(), persist::kSnapshotTempFileName)) {
      const uint64_t n = g_counts.snapshot_writes.fetch_add(1) + 1;
      if (g_point == Point::kSnapshotPartial && n == g_at && size > 1) {
        (void)base_->WriteAt(offset, buf, size / 2);  // a torn snapshot write, then death
        Die();
      }
    }
    Result<uint64_t> r = base_->WriteAt(offset, buf, size);
    if (EndsWith(path(), persist::kPackFileName)) Reached(Point::kWrite, g_counts.write);
    return r;
  }
  Status Sync() override {
    Mutating();
    return base_->Sync();
  }
  Status Allocate(uint64_t size) override {
    Mutating();
    return base_->Allocate(size);
  }
  Status Truncate(uint64_t size) override {
    Mutating();
    return base_->Truncate(size);
  }
  Result<uint64_t> Size() override { return base_->Size(); }
  bool direct() const override { return base_->direct(); }
  uint64_t direct_alignment() const override { return base_->direct_alignment(); }
  int fd() const override { return -1; }  // every byte goes through WriteAt
  const std::string& path() const override { return base_->path(); }

 private:
  std::unique_ptr<File> base_;
};

class KillEnv final : public EnvWrapper {
 public:
  explicit KillEnv(Env* base) : EnvWrapper(base) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    RANGEKV_ASSIGN_OR_RETURN(auto f, target()->OpenFile(path, options));
    return std::unique_ptr<File>(new KillFile(std::move(f)));
  }
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override {
    Mutating();
    RANGEKV_ASSIGN_OR_RETURN(auto f, target()->CreateFile(path, options));
    return std::unique_ptr<File>(new KillFile(std::move(f)));
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    Mutating();
    return target()->RenameFile(from, to);
  }
  Status DeleteFile(const std::string& path) override {
    Mutating();
    return target()->DeleteFile(path);
  }
  Status SyncDir(const std::string& dir) override {
    Mutating();
    return target()->SyncDir(dir);
  }
};

// ---- the workload ---------------------------------------------------------------------------

[[noreturn]] void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "crash_driver: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(code);
}

void RunSession(const CrashWorkload& w, const std::string& dir, uint32_t session, Env* env) {
  EngineOptions o = w.Options(dir, g_packs);
  o.env = env;
  if (!g_durability.empty()) {
    const Status set = o.durability.Set(g_durability);
    if (!set.ok()) Fail(2, set.ToString());
  }
  if (g_checkpoint_set) o.durability.checkpoint_interval_ms = g_checkpoint_ms;
  engine_internal::EngineInternalConfig config;
  config.hooks.store_point = [](engine_internal::StorePoint p, uint64_t) {
    switch (p) {
      case engine_internal::StorePoint::kGathered:
        Reached(Point::kGather, g_counts.gather);
        break;
      case engine_internal::StorePoint::kBeforePublish:
        Reached(Point::kPublish, g_counts.publish);
        break;
      case engine_internal::StorePoint::kPublished:
        Reached(Point::kPublished, g_counts.published);
        break;
    }
  };
  config.hooks.shutdown_hook = [](persist::ShutdownStep step) {
    if (g_point == Point::kStep && static_cast<int>(step) == g_step) {
      Reached(Point::kStep, g_counts.step);
    }
    return OkStatus();
  };
  auto opened = testing::OpenEngineForTesting(o, config);
  if (!opened.ok()) Fail(2, "open: " + opened.status().ToString());
  Engine& engine = **opened;
  auto kv = testing::KvFixture::Make(engine, KvCacheLayout::kFlashAttnNhd, 64);
  if (!kv.ok()) Fail(2, "fixture: " + kv.status().ToString());
  uint64_t op_index = 0;
  for (const CrashWorkload::Op& op : w.sessions[session]) {
    const std::vector<int32_t>& tokens = w.prefixes[op.prefix];
    const uint64_t slot_seed = session * 1000 + op_index++;
    if (g_pace_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(g_pace_us));
    if (op.kind == CrashWorkload::OpKind::kRestore) {
      auto r = testing::RestoreAndVerify(engine, **kv,
                                         testing::Envelope("r" + std::to_string(slot_seed)), tokens,
                                         op.granularity, CrashWorkload::kPayloadSeed, slot_seed);
      if (!r.ok()) Fail(2, "restore: " + r.status().ToString());
      if (r->lookup.hit_tokens == 0) continue;
      if (!r->outcome.status.ok() || !r->outcome.failed.empty() || r->mismatches != 0 ||
          r->poisoned_rows != 0 || r->outcome.work.checksum_failures != 0) {
        Fail(3, "restore of prefix " + std::to_string(op.prefix) +
                    " delivered wrong or incomplete bytes: " + r->outcome.status.ToString() +
                    ", mismatches " + std::to_string(r->mismatches));
      }
      continue;
    }
    const StoreWait wait = op.kind == CrashWorkload::OpKind::kStoreDetached
                               ? StoreWait::kDetach
                               : StoreWait::kUntilVisible;
    auto r = testing::StoreAll(engine, **kv, tokens, CrashWorkload::kPayloadSeed, slot_seed, wait);
    if (!r.ok()) Fail(2, "store: " + r.status().ToString());
    // A store may be refused when the store is full of leased packs; anything else is a bug.
    if (!r->outcome.status.ok() && r->outcome.status.code() != StatusCode::kResourceExhausted) {
      Fail(2, "store of prefix " + std::to_string(op.prefix) + ": " + r->outcome.status.ToString());
    }
    if (r->outcome.status.ok() && r->outcome.visible) Visible(op.prefix);
    if (r->outcome.status.ok() && r->outcome.visible && r->outcome.durable) Ack(op.prefix);
  }
  kv->reset();
  g_counts.checkpoints += engine.GetStats().journal_checkpoints;
  const Status closed = engine.Close();
  if (!closed.ok()) Fail(2, "close: " + closed.ToString());
}

// Flips pack token 1's first byte in `layer` of the first visible pack (see the file comment).
int FlipOneByte(const std::string& dir, uint32_t layer) {
  auto store = persist::OpenOffline(DefaultEnv(), dir);
  if (!store.ok()) Fail(2, "offline open: " + store.status().ToString());
  if (store->index.directory == nullptr || store->index.digests == nullptr) {
    Fail(2, "the store's index did not load");
  }
  const Directory& directory = *store->index.directory;
  for (const NamespaceId& ns : directory.Namespaces()) {
    for (const StoredPack& p : directory.ListPacks(ns)) {
      const uint64_t at = store->pack->Address(p.record.pack_slot, layer, 1);
      auto f = DefaultEnv()->OpenFile(store->pack->path(), {});
      if (!f.ok()) Fail(2, f.status().ToString());
      uint8_t byte = 0;
      if (!(*f)->ReadAt(at, &byte, 1).ok()) Fail(2, "read");
      byte ^= 0x20;
      if (!(*f)->WriteAt(at, &byte, 1).ok() || !(*f)->Sync().ok()) Fail(2, "write");
      const uint64_t block = store->index.digests->geometry().block_tokens();
      const uint64_t end = std::min(p.record.tokens, block);
      std::printf("flipped slot=%u generation=%llu layer=%u path_tokens=%llu,%llu\n",
                  p.record.pack_slot, static_cast<unsigned long long>(p.record.generation), layer,
                  static_cast<unsigned long long>(p.record.path_token_begin),
                  static_cast<unsigned long long>(p.record.path_token_begin + end));
      return 0;
    }
  }
  Fail(2, "no visible pack to flip");
}

Point ParsePoint(const std::string& s) {
  if (s == "none") return Point::kNone;
  if (s == "gather") return Point::kGather;
  if (s == "write") return Point::kWrite;
  if (s == "publish") return Point::kPublish;
  if (s == "published") return Point::kPublished;
  if (s == "snapshot_partial") return Point::kSnapshotPartial;
  if (s == "io") return Point::kIo;
  if (s.rfind("step", 0) == 0 && s.size() == 5 && s[4] >= '0' &&
      s[4] < '0' + persist::kShutdownStepCount) {
    g_step = s[4] - '0';
    return Point::kStep;
  }
  Fail(2, "unknown kill point " + s);
}

int Main(int argc, char** argv) {
  std::string dir;
  uint64_t seed = 1;
  uint32_t sessions = 3, ops = 8;
  int flip_layer = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dir") {
      dir = value;
    } else if (key == "--seed") {
      seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--sessions") {
      sessions = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (key == "--ops") {
      ops = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (key == "--kill") {
      g_point = ParsePoint(value);
    } else if (key == "--at") {
      g_at = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--durability") {
      g_durability = value;
    } else if (key == "--checkpoint-ms") {
      g_checkpoint_ms = std::strtoull(value.c_str(), nullptr, 10);
      g_checkpoint_set = true;
    } else if (key == "--pace-us") {
      g_pace_us = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--packs") {
      g_packs = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--acks") {
      g_acks_fd = ::open(value.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (g_acks_fd < 0) Fail(2, "cannot open " + value);
    } else if (key == "--flip") {
      flip_layer = std::atoi(value.c_str());
    } else {
      Fail(2, "unknown argument " + key);
    }
  }
  if (dir.empty()) Fail(2, "--dir is required");
  SetMinLogLevel(LogLevel::kWarning);
  const CrashWorkload w = CrashWorkload::Make(seed, sessions, ops);
  KillEnv env(DefaultEnv());
  for (uint32_t s = 0; s < sessions; ++s) RunSession(w, dir, s, &env);
  std::printf(
      "counts gather=%llu write=%llu publish=%llu published=%llu snapshot_writes=%llu "
      "io=%llu checkpoints=%llu sessions=%u\n",
      static_cast<unsigned long long>(g_counts.gather.load()),
      static_cast<unsigned long long>(g_counts.write.load()),
      static_cast<unsigned long long>(g_counts.publish.load()),
      static_cast<unsigned long long>(g_counts.published.load()),
      static_cast<unsigned long long>(g_counts.snapshot_writes.load()),
      static_cast<unsigned long long>(g_counts.io.load()),
      static_cast<unsigned long long>(g_counts.checkpoints), sessions);
  if (flip_layer >= 0) return FlipOneByte(dir, static_cast<uint32_t>(flip_layer));
  return 0;
}

}  // namespace
}  // namespace rangekv

int main(int argc, char** argv) { return rangekv::Main(argc, argv); }
