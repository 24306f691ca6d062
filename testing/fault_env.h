// FaultInjectingEnv: an Env that wraps another Env and makes its Files fail on purpose, so tests
// can prove that every failure of the file seam is detected and reported (docs/design.md "Failure
// behaviour", "Testing").
//
// What it injects:
//  - Rules (AddRule): a ReadAt/WriteAt on a path whose byte range overlaps a rule's range fails
//    with the rule's kind: EIO (kIoError), a short transfer, a torn write (a prefix reaches the
//    file, then kIoError), or ENOSPC (kNoSpace). A rule fires `times` times (or forever).
//  - Seeded probabilities (FaultOptions): each ReadAt/WriteAt fails with a given probability.
//    The decision is a pure function of (seed, path, op, offset, size), so a run reproduces
//    exactly under any thread interleaving. The identical op retried gets the identical answer
//    (like a bad sector); a retry of a remainder (other offset/size) draws anew.
//  - A space budget (SetSpaceLimit): after N more bytes are written across all files, writes
//    move what still fits (a short count) and then fail with kNoSpace; Allocate fails with
//    kNoSpace when it would grow a file by more than the budget left.
//  - Env-level failures (FailEnvOp): open, create, rename, delete, sync-dir, and the file ops
//    Sync/Allocate/Truncate fail with a chosen code; a failed rename or delete changes nothing.
//  - Lost unsynced data (DropUnsyncedData): simulates power loss. Every write, Truncate and
//    Allocate since a file's last successful Sync is undone from an undo log of the bytes and
//    sizes they replaced, restoring the file to its contents at that Sync (or at first open).
//    Directory entries are not modelled: a file created and never synced becomes empty, it
//    does not vanish.
//  - Latency (FaultOptions::op_latency_ns): a fixed delay added to every ReadAt/WriteAt. For
//    pipeline tests that need I/O to be slow relative to compute; never to force interleavings.
//
// Files return fd() == -1, so I/O engines cannot bypass the seam: every byte goes through
// ReadAt/WriteAt. direct() and direct_alignment() are those of the wrapped file.
//
// Short transfer / torn write length: when the op starts before the rule's range, the prefix
// is exactly the bytes before that range; otherwise (and for random faults) it is a seeded
// fraction of the op (a rule uses half), rounded down to FaultOptions::short_transfer_align_bytes.
// A prefix of 0 is legal: for a read it looks like end of file.
//
// Thread-safety: all methods are thread-safe; Files may be used from many threads. Rule
// matching and counters are under one mutex; I/O runs outside it, except that writes to a file
// whose unsynced data is tracked are serialised per path (so the undo log stays exact).
// Bounds: the undo log holds at most FaultOptions::undo_log_bytes_max bytes per env; a write
// that would exceed it fails with kResourceExhausted (a test-setup error, counted apart).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "rangekv/env.h"
#include "rangekv/status.h"

namespace rangekv::testing {

enum class FaultOp : uint8_t { kRead, kWrite };

enum class FaultKind : uint8_t {
  kIoError,        // the op fails with kIoError; nothing is transferred
  kShortTransfer,  // the op moves only a prefix and returns its byte count (no error)
  kTornWrite,      // writes: a prefix reaches the file, then the op fails with kIoError
  kNoSpace,        // writes: the op fails with kNoSpace; nothing is transferred
};

struct FaultRule {
  std::string path;  // exact path as passed to OpenFile/CreateFile; "" = any
  FaultOp op = FaultOp::kRead;
  uint64_t offset = 0;  // the op's bytes must overlap [offset, offset + length)
  uint64_t length = UINT64_MAX;
  FaultKind kind = FaultKind::kIoError;
  int64_t times = -1;  // how many ops it still fails; -1 = every matching op
};

// Env-level operations that FailEnvOp can fail.
enum class EnvOp : uint8_t {
  kOpen,
  kCreate,
  kRename,  // matched against the source path
  kDelete,
  kSyncDir,
  kSync,      // File::Sync
  kAllocate,  // File::Allocate
  kTruncate,  // File::Truncate
};

enum class UnsyncedData : uint8_t {
  kTrack,   // keep an undo log so DropUnsyncedData can revert (costs a read per write)
  kIgnore,  // no undo log; DropUnsyncedData fails with kFailedPrecondition
};

struct FaultOptions {
  uint64_t seed = 1;
  // Per-op probabilities in [0, 1]; their sum per op kind must be <= 1.
  double read_error_probability = 0;
  double short_read_probability = 0;
  double write_error_probability = 0;
  double short_write_probability = 0;
  double torn_write_probability = 0;
  // Rounding of short/torn prefixes (use the direct alignment to mimic O_DIRECT devices).
  uint64_t short_transfer_align_bytes = 1;
  uint64_t op_latency_ns = 0;
  UnsyncedData unsynced = UnsyncedData::kTrack;
  uint64_t undo_log_bytes_max = 256ull << 20;
};

// Faults injected so far (ops that passed through untouched are counted in reads/writes too).
struct FaultCounters {
  uint64_t reads = 0;         // ReadAt calls
  uint64_t writes = 0;        // WriteAt calls
  uint64_t read_errors = 0;   // injected kIoError on reads
  uint64_t write_errors = 0;  // injected kIoError on writes (torn writes not included)
  uint64_t short_reads = 0;
  uint64_t short_writes = 0;  // includes the short write at the edge of the space budget
  uint64_t torn_writes = 0;
  uint64_t no_space = 0;         // kNoSpace from rules, the space budget, or Allocate
  uint64_t env_op_failures = 0;  // FailEnvOp firings
  uint64_t delayed_ops = 0;
  uint64_t undo_overflows = 0;  // writes refused because the undo log was full
  uint64_t dropped_ops = 0;     // writes/truncates/allocates reverted by DropUnsyncedData
  uint64_t dropped_bytes = 0;   // bytes restored by DropUnsyncedData
};

class FaultInjectingEnv final : public EnvWrapper {
 public:
  // `base` must outlive this env and every File it opened.
  explicit FaultInjectingEnv(Env* base, FaultOptions options = {});
  ~FaultInjectingEnv() override;
  FaultInjectingEnv(const FaultInjectingEnv&) = delete;
  FaultInjectingEnv& operator=(const FaultInjectingEnv&) = delete;

  // Replaces the probabilities, latency and seed. Tracking mode changes apply to paths opened
  // afterwards.
  void SetOptions(const FaultOptions& options);
  void AddRule(FaultRule rule);
  void ClearRules();
  // Writes fail with kNoSpace once `bytes` more bytes have been written (see header comment).
  void SetSpaceLimit(uint64_t bytes);
  void ClearSpaceLimit();
  // The next `times` (-1: all) calls of `op` on `path` ("" = any) fail with `code` (for
  // example kIoError, or kNoSpace for Allocate) and change nothing.
  void FailEnvOp(EnvOp op, StatusCode code, int64_t times = 1, std::string path = "");
  void ClearEnvOpFailures();

  // Power loss: reverts every tracked file to its contents at its last successful Sync.
  // Files stay open and usable afterwards. Fails with kFailedPrecondition when tracking is
  // off; an I/O error from the base env is returned (the revert may then be partial).
  Status DropUnsyncedData();
  // Writes/truncates/allocates on `path` since its last successful Sync (tracked mode; 0 when
  // untracked).
  uint64_t UnsyncedOps(const std::string& path);

  FaultCounters counters() const;
  void ResetCounters();

  // Env (FileExists and CreateDir pass through EnvWrapper unchanged).
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status DeleteFile(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

 private:
  friend class FaultFile;
  struct PathState;
  struct EnvOpFailure {
    EnvOp op;
    StatusCode code;
    int64_t times;
    std::string path;
  };
  // What one ReadAt/WriteAt should do.
  struct Decision {
    enum class Action : uint8_t { kPass, kFail, kShort, kTorn, kNoSpace, kSpaceShort };
    Action action = Action::kPass;
    uint64_t prefix_bytes = 0;  // for kShort, kTorn, kSpaceShort
  };

  Decision Decide(const std::string& path, FaultOp op, uint64_t offset, uint64_t size)
      EXCLUDES(mu_);
  // Returns the injected failure for `op` on `path`, or OK.
  Status CheckEnvOp(EnvOp op, const std::string& path) EXCLUDES(mu_);
  Status ChargeAllocate(uint64_t growth_bytes) EXCLUDES(mu_);
  enum class PathOpen : uint8_t { kOpened, kCreated };
  std::shared_ptr<PathState> StateFor(const std::string& path, PathOpen how) EXCLUDES(mu_);
  void Delay() EXCLUDES(mu_);

  mutable Mutex mu_;
  FaultOptions options_ GUARDED_BY(mu_);
  std::vector<FaultRule> rules_ GUARDED_BY(mu_);
  std::vector<EnvOpFailure> env_failures_ GUARDED_BY(mu_);
  bool space_limited_ GUARDED_BY(mu_) = false;
  uint64_t space_left_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t undo_bytes_ GUARDED_BY(mu_) = 0;
  FaultCounters counters_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PathState>> paths_ GUARDED_BY(mu_);
};

}  // namespace rangekv::testing
