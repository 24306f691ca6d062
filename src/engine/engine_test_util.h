// Test helpers for the engine's end-to-end tests (linked by tests only).
//
//   - SmallModel / SmallOptions: geometries with small stripes so the real pipeline runs with
//     real bytes in milliseconds, and pools sized for a 2-core CI machine.
//   - KvFixture: paged KV memory in the engine's device memory with a host mirror; fills token
//     rows with canonical bytes (a pure function of seed, layer, path position and token id)
//     through chosen slots, and compares them back bit for bit.
//   - StoreAll / RestoreAndVerify: drive one store / one restore through the public API.
//   - JitterEnv: an Env whose reads and writes each sleep a seeded random delay first.
//   - GateEnv: an Env whose reads block while its gate is closed (a sync point: tests hold
//     reads in flight without sleeping), counting the readers it holds.
//   - PayloadFreeEnv and CountOnlyDevice: a file seam that keeps only file headers and a device
//     whose kernels validate their arguments but move nothing. With them the whole pipeline runs
//     at the paper's full 6 GiB geometry with no payload bytes, so its work-unit counters can be
//     asserted at full size.
//
// Thread-safety: GateEnv, PayloadFreeEnv and CountOnlyDevice are thread-safe; the fixtures are
// used by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "device/device.h"
#include "rangekv/engine.h"
#include "rangekv/env.h"

namespace rangekv::engine_testing {

// L layers of H kv heads x D elements of `dtype_bytes` (s = 2 x H x D x dtype_bytes), or MLA
// with `mla_latent` elements when non-zero.
ModelSpec SmallModel(uint32_t layers, uint32_t kv_heads, uint32_t head_size,
                     uint32_t dtype_bytes = 2, uint32_t block_size = 16, uint32_t mla_latent = 0);

// Host device (or CUDA when RANGEKV_TEST_DEVICE=cuda), posix I/O, small pools: 4 read banks (3
// prefetch), 2 read workers, 4 store banks, 2 group and 2 write workers, 4 restore and 4 store
// slots, `packs` packs of capacity.
EngineOptions SmallOptions(const std::string& dir, const ModelSpec& model, uint64_t stripe_bytes,
                           uint64_t packs = 16);

std::vector<int32_t> RandomTokens(size_t n, uint64_t seed);

// `n` distinct slots out of num_blocks * block_size, in random order.
std::vector<int64_t> RandomSlots(size_t n, uint64_t num_slots, uint64_t seed);

// `n` slots filling whole blocks in order (token i at offset i % B of its block), the blocks
// distinct and in random order: the mapping vLLM produces, and the one block-opaque layouts
// (kCpuBlock) require.
std::vector<int64_t> RandomBlockSlots(size_t n, uint64_t num_blocks, uint32_t block_size,
                                      uint64_t seed);

// Canonical bytes of one token row (layer l, path position t, token id) for `seed`.
void CanonicalRow(uint64_t seed, uint32_t layer, uint64_t position, int32_t token, uint8_t* row,
                  uint64_t row_bytes);

class KvFixture {
 public:
  // Allocates `num_blocks` blocks per layer in `layout` through the engine.
  static Result<std::unique_ptr<KvFixture>> Make(Engine& engine, KvCacheLayout layout,
                                                 uint64_t num_blocks);

  const PagedKv& kv() const { return kv_; }
  uint64_t num_slots() const { return kv_.num_blocks * engine_->geometry().block_size; }
  uint64_t layer_bytes() const { return layer_bytes_; }
  KvCacheLayout layout() const { return layout_; }
  // `n` slots for a transfer: RandomBlockSlots for block-opaque layouts, else RandomSlots.
  std::vector<int64_t> Slots(size_t n, uint64_t seed) const;

  // Every byte of every layer := `value` (on the device).
  Status Poison(uint8_t value);
  // For i in [0, slots.size()): the row of path token first + i goes to slots[i], every layer.
  Status Fill(std::span<const int32_t> tokens, uint64_t first, std::span<const int64_t> slots,
              uint64_t seed);
  // Number of (layer, token) rows among `layers` that differ from the canonical bytes.
  // `layers` empty means all. Reads the device memory back first unless `sync` is false (then
  // it compares the mirror of the last Sync()).
  Result<uint64_t> Mismatches(std::span<const int32_t> tokens, uint64_t first,
                              std::span<const int64_t> slots, uint64_t seed,
                              std::span<const uint32_t> layers = {}, bool sync = true);
  // True when the row of slot `slot` in `layer` still holds `value` in every byte (nothing
  // was delivered there). Uses the mirror from the last Mismatches()/Sync().
  bool RowIs(uint32_t layer, int64_t slot, uint8_t value) const;
  Status Sync();  // device -> mirror

 private:
  KvFixture() = default;
  Engine* engine_ = nullptr;
  PagedKv kv_;
  uint64_t layer_bytes_ = 0;
  KvCacheLayout layout_ = KvCacheLayout::kFlashAttnNhd;
  std::vector<std::vector<uint8_t>> mirror_;  // per layer
};

struct StoreResult {
  StoreOutcome outcome;
  EngineStats work;
};

// Fills a fresh region of `fixture` with the canonical rows of `tokens`, stores them (every
// layer produced, optionally on `producer`), and waits per `wait`.
Result<StoreResult> StoreAll(Engine& engine, KvFixture& fixture, std::span<const int32_t> tokens,
                             uint64_t seed, uint64_t slot_seed,
                             StoreWait wait = StoreWait::kUntilVisible,
                             DeviceStreamRef producer = {});

struct RestoreResult {
  LookupResult lookup;
  RestoreOutcome outcome;
  uint64_t mismatches = 0;  // delivered rows that differ from the stored bytes
  // Rows of failed tokens that hold neither their poison nor their own correct bytes: 0, except
  // where a digest failed on HostDevice, whose one-pass verify may leave the bytes read there.
  uint64_t poisoned_rows = 0;
  std::vector<int64_t> slots;
};

enum class WaitMode : uint8_t { kFinishOnly, kEveryLayer, kStreamEveryLayer };

// Lookup -> StartRestore -> BindSlots -> waits -> Finish, into a poisoned `fixture`, then
// verifies every delivered row bit for bit and that rows of failed tokens stayed poisoned.
Result<RestoreResult> RestoreAndVerify(Engine& engine, KvFixture& fixture,
                                       const RequestEnvelope& envelope,
                                       std::span<const int32_t> tokens, uint64_t granularity,
                                       uint64_t seed, uint64_t slot_seed,
                                       WaitMode wait = WaitMode::kFinishOnly);

RequestEnvelope Envelope(const std::string& request_id, uint32_t attempt = 0);

// ---- file seams and devices ---------------------------------------------------------------

// Wraps `base`. While closed, every ReadAt (or WriteAt, per `op`) on a file whose path ends
// with `suffix` and whose range overlaps [offset, offset + length) blocks at the gate.
class GateEnv final : public EnvWrapper {
 public:
  enum class Op : uint8_t { kRead, kWrite };
  GateEnv(Env* base, std::string suffix, Op op = Op::kRead, uint64_t offset = 0,
          uint64_t length = UINT64_MAX)
      : EnvWrapper(base), suffix_(std::move(suffix)), op_(op), offset_(offset), length_(length) {}

  void Close();
  void Open();
  // Blocks until at least `n` readers are held at the closed gate.
  void WaitHeld(uint32_t n);
  uint32_t held() const;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;

 private:
  friend class GatedFile;
  void Pass(const std::string& path, Op op, uint64_t offset, uint64_t size);
  Result<std::unique_ptr<File>> Wrap(const std::string& path, Result<std::unique_ptr<File>> f);

  std::string suffix_;
  Op op_;
  uint64_t offset_;
  uint64_t length_;
  mutable Mutex mu_;
  CondVar cv_;
  bool closed_ GUARDED_BY(mu_) = false;
  uint32_t held_ GUARDED_BY(mu_) = 0;
};

// Wraps `base`: every ReadAt / WriteAt first sleeps a seeded pseudo-random 0..max_delay_us
// (a function of the seed and the op's sequence number). Not a sync point: it widens the windows
// in which concurrent requests interleave, so a stress test meets many orders; tests that use it
// assert outcomes, never timing.
class JitterEnv final : public EnvWrapper {
 public:
  JitterEnv(Env* base, uint64_t seed, uint32_t max_delay_us)
      : EnvWrapper(base), seed_(seed), max_delay_us_(max_delay_us) {}

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  void Delay();

 private:
  const uint64_t seed_;
  const uint32_t max_delay_us_;
  std::atomic<uint64_t> ops_{0};
};

// An in-memory Env that keeps the first kKeptBytes of each file (headers) and drops payload:
// writes beyond succeed and store nothing, reads beyond succeed and leave the buffer untouched.
class PayloadFreeEnv final : public Env {
 public:
  static constexpr uint64_t kKeptBytes = 64 * 1024;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status DeleteFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Status CreateDir(const std::string&) override { return OkStatus(); }
  Status SyncDir(const std::string&) override { return OkStatus(); }
  // In memory: the store directory and its files always read as this user's, owner-only.
  Result<PathInfo> Stat(const std::string& path) override;
  Status SetPermissions(const std::string&, uint32_t) override { return OkStatus(); }
  // In memory too: a lock is a name in a set while its FileLock lives.
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, const std::string& holder,
                                             uint32_t permissions) override;
  Result<std::optional<std::string>> LockHolder(const std::string& path) override;

  struct FileState {
    Mutex mu;
    uint64_t size GUARDED_BY(mu) = 0;
    std::vector<uint8_t> head GUARDED_BY(mu);
  };

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<FileState>> files_ GUARDED_BY(mu_);
  std::shared_ptr<std::map<std::string, std::string>> locks_ =
      std::make_shared<std::map<std::string, std::string>>();  // path -> holder, under mu_
};

// A device that is `inner` (a HostDevice) except that Scatter and Gather validate their
// arguments and move nothing, and Digest validates its arguments and writes 0 for every span.
// Banks and paged KV are never touched by a kernel.
Result<std::unique_ptr<Device>> MakeCountOnlyDevice();

}  // namespace rangekv::engine_testing
