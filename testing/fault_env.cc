#include "testing/fault_env.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "base/check.h"
#include "base/digest.h"
#include "base/units.h"

namespace rangekv::testing {

// Per-path state shared by every File open on that path: the undo log of unsynced changes
// and a buffered handle used to capture and restore bytes (also when the files are O_DIRECT).
struct FaultInjectingEnv::PathState {
  struct Undo {
    uint64_t offset = 0;
    uint64_t size_before = 0;        // file size before the op
    std::vector<uint8_t> old_bytes;  // contents of [offset, offset + old_bytes.size()) before it
  };
  Mutex mu;
  std::unique_ptr<File> plain GUARDED_BY(mu);  // null: not tracked
  std::vector<Undo> undo GUARDED_BY(mu);
  uint64_t undo_bytes GUARDED_BY(mu) = 0;
};

namespace {

std::string Range(const std::string& path, uint64_t offset, uint64_t size) {
  return path + " [" + std::to_string(offset) + ", +" + std::to_string(size) + ")";
}

bool Overlaps(uint64_t a_off, uint64_t a_len, uint64_t b_off, uint64_t b_len) {
  if (a_len == 0 || b_len == 0) return false;
  const uint64_t a_end = a_off + std::min(a_len, UINT64_MAX - a_off);
  const uint64_t b_end = b_off + std::min(b_len, UINT64_MAX - b_off);
  return a_off < b_end && b_off < a_end;
}

// Reads exactly [offset, offset + size) through `f` (stopping early only at end of file).
Status ReadFully(File& f, uint64_t offset, uint8_t* buf, uint64_t size, uint64_t* got) {
  *got = 0;
  while (*got < size) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n, f.ReadAt(offset + *got, buf + *got, size - *got));
    if (n == 0) break;
    *got += n;
  }
  return OkStatus();
}

Status WriteFully(File& f, uint64_t offset, const uint8_t* buf, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n, f.WriteAt(offset + done, buf + done, size - done));
    if (n == 0) return Status(StatusCode::kShortTransfer, "undo write made no progress");
    done += n;
  }
  return OkStatus();
}

}  // namespace

class FaultFile final : public File {
 public:
  FaultFile(FaultInjectingEnv* env, std::string path, std::unique_ptr<File> base,
            std::shared_ptr<FaultInjectingEnv::PathState> state)
      : env_(env), path_(std::move(path)), base_(std::move(base)), state_(std::move(state)) {}

  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    env_->Delay();
    const auto d = env_->Decide(path_, FaultOp::kRead, offset, size);
    using A = FaultInjectingEnv::Decision::Action;
    switch (d.action) {
      case A::kPass:
        return base_->ReadAt(offset, buf, size);
      case A::kShort:
        if (d.prefix_bytes == 0) return uint64_t{0};
        return base_->ReadAt(offset, buf, Prefix(d.prefix_bytes));
      default:
        return Status(StatusCode::kIoError, "injected EIO on read " + Range(path_, offset, size));
    }
  }

  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    env_->Delay();
    const auto d = env_->Decide(path_, FaultOp::kWrite, offset, size);
    using A = FaultInjectingEnv::Decision::Action;
    switch (d.action) {
      case A::kPass:
        return TrackedWrite(offset, buf, size);
      case A::kShort:
      case A::kSpaceShort: {
        const uint64_t n = Prefix(d.prefix_bytes);
        if (n == 0) {
          if (d.action == A::kSpaceShort) {
            return Status(StatusCode::kNoSpace,
                          "injected ENOSPC on write " + Range(path_, offset, size));
          }
          return uint64_t{0};
        }
        return TrackedWrite(offset, buf, n);
      }
      case A::kTorn: {
        const uint64_t n = Prefix(d.prefix_bytes);
        if (n > 0) {
          auto w = TrackedWrite(offset, buf, n);
          if (!w.ok()) return w.status();
        }
        return Status(StatusCode::kIoError, "injected torn write (" + std::to_string(n) +
                                                " bytes reached the file) " +
                                                Range(path_, offset, size));
      }
      case A::kNoSpace:
        return Status(StatusCode::kNoSpace,
                      "injected ENOSPC on write " + Range(path_, offset, size));
      case A::kFail:
        break;
    }
    return Status(StatusCode::kIoError, "injected EIO on write " + Range(path_, offset, size));
  }

  Status Sync() override {
    RANGEKV_RETURN_IF_ERROR(env_->CheckEnvOp(EnvOp::kSync, path_));
    if (state_ == nullptr) return base_->Sync();
    MutexLock lock(state_->mu);
    RANGEKV_RETURN_IF_ERROR(base_->Sync());
    ReleaseUndoLocked();
    return OkStatus();
  }

  Status Allocate(uint64_t size) override {
    RANGEKV_RETURN_IF_ERROR(env_->CheckEnvOp(EnvOp::kAllocate, path_));
    if (state_ != nullptr) {
      MutexLock lock(state_->mu);
      if (state_->plain != nullptr) {
        RANGEKV_ASSIGN_OR_RETURN(const uint64_t current, state_->plain->Size());
        if (size > current) {
          RANGEKV_RETURN_IF_ERROR(env_->ChargeAllocate(size - current));
          state_->undo.push_back({.offset = 0, .size_before = current, .old_bytes = {}});
        }
        return base_->Allocate(size);
      }
    }
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t current, base_->Size());
    if (size > current) RANGEKV_RETURN_IF_ERROR(env_->ChargeAllocate(size - current));
    return base_->Allocate(size);
  }

  Status Truncate(uint64_t size) override {
    RANGEKV_RETURN_IF_ERROR(env_->CheckEnvOp(EnvOp::kTruncate, path_));
    if (state_ == nullptr) return base_->Truncate(size);
    MutexLock lock(state_->mu);
    if (state_->plain == nullptr) return base_->Truncate(size);
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t current, state_->plain->Size());
    FaultInjectingEnv::PathState::Undo undo{
        .offset = size, .size_before = current, .old_bytes = {}};
    if (size < current) RANGEKV_RETURN_IF_ERROR(CaptureLocked(size, current - size, &undo));
    state_->undo.push_back(std::move(undo));
    return base_->Truncate(size);
  }

  Result<uint64_t> Size() override { return base_->Size(); }
  bool direct() const override { return base_->direct(); }
  uint64_t direct_alignment() const override { return base_->direct_alignment(); }
  int fd() const override { return -1; }
  const std::string& path() const override { return path_; }

 private:
  // A prefix length the wrapped file accepts (O_DIRECT needs aligned lengths).
  uint64_t Prefix(uint64_t n) const {
    return base_->direct() ? AlignDown(n, base_->direct_alignment()) : n;
  }

  Result<uint64_t> TrackedWrite(uint64_t offset, const void* buf, uint64_t size) {
    if (state_ == nullptr) return base_->WriteAt(offset, buf, size);
    MutexLock lock(state_->mu);
    if (state_->plain == nullptr) return base_->WriteAt(offset, buf, size);
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t current, state_->plain->Size());
    FaultInjectingEnv::PathState::Undo undo{
        .offset = offset, .size_before = current, .old_bytes = {}};
    if (offset < current) {
      RANGEKV_RETURN_IF_ERROR(CaptureLocked(offset, std::min(size, current - offset), &undo));
    }
    state_->undo.push_back(std::move(undo));
    return base_->WriteAt(offset, buf, size);
  }

  // Saves [offset, offset + size) of the file into `undo`, charging the env's undo budget.
  Status CaptureLocked(uint64_t offset, uint64_t size, FaultInjectingEnv::PathState::Undo* undo)
      REQUIRES(state_->mu) {
    {
      MutexLock env_lock(env_->mu_);
      if (env_->undo_bytes_ + size > env_->options_.undo_log_bytes_max) {
        ++env_->counters_.undo_overflows;
        return ResourceExhausted("fault env undo log full (" +
                                 std::to_string(env_->options_.undo_log_bytes_max) +
                                 " bytes): Sync more often or raise undo_log_bytes_max");
      }
      env_->undo_bytes_ += size;
    }
    state_->undo_bytes += size;
    undo->old_bytes.resize(size);
    uint64_t got = 0;
    RANGEKV_RETURN_IF_ERROR(ReadFully(*state_->plain, offset, undo->old_bytes.data(), size, &got));
    undo->old_bytes.resize(got);
    return OkStatus();
  }

  void ReleaseUndoLocked() REQUIRES(state_->mu) {
    {
      MutexLock env_lock(env_->mu_);
      env_->undo_bytes_ -= state_->undo_bytes;
    }
    state_->undo_bytes = 0;
    state_->undo.clear();
  }

  FaultInjectingEnv* const env_;
  const std::string path_;
  const std::unique_ptr<File> base_;
  const std::shared_ptr<FaultInjectingEnv::PathState> state_;  // null: never tracked
};

FaultInjectingEnv::FaultInjectingEnv(Env* base, FaultOptions options)
    : EnvWrapper(base), options_(options) {
  RANGEKV_CHECK(base != nullptr);
}

FaultInjectingEnv::~FaultInjectingEnv() = default;

void FaultInjectingEnv::SetOptions(const FaultOptions& options) {
  MutexLock lock(mu_);
  options_ = options;
}

void FaultInjectingEnv::AddRule(FaultRule rule) {
  // Torn writes and ENOSPC are write faults; a read rule of that kind is a test bug.
  RANGEKV_CHECK(rule.op == FaultOp::kWrite ||
                (rule.kind != FaultKind::kTornWrite && rule.kind != FaultKind::kNoSpace));
  MutexLock lock(mu_);
  rules_.push_back(std::move(rule));
}

void FaultInjectingEnv::ClearRules() {
  MutexLock lock(mu_);
  rules_.clear();
}

void FaultInjectingEnv::SetSpaceLimit(uint64_t bytes) {
  MutexLock lock(mu_);
  space_limited_ = true;
  space_left_bytes_ = bytes;
}

void FaultInjectingEnv::ClearSpaceLimit() {
  MutexLock lock(mu_);
  space_limited_ = false;
}

void FaultInjectingEnv::FailEnvOp(EnvOp op, StatusCode code, int64_t times, std::string path) {
  RANGEKV_CHECK(code != StatusCode::kOk);
  MutexLock lock(mu_);
  env_failures_.push_back({op, code, times, std::move(path)});
}

void FaultInjectingEnv::ClearEnvOpFailures() {
  MutexLock lock(mu_);
  env_failures_.clear();
}

FaultCounters FaultInjectingEnv::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

void FaultInjectingEnv::ResetCounters() {
  MutexLock lock(mu_);
  counters_ = FaultCounters{};
}

void FaultInjectingEnv::Delay() {
  uint64_t ns;
  {
    MutexLock lock(mu_);
    ns = options_.op_latency_ns;
    if (ns > 0) ++counters_.delayed_ops;
  }
  if (ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

FaultInjectingEnv::Decision FaultInjectingEnv::Decide(const std::string& path, FaultOp op,
                                                      uint64_t offset, uint64_t size) {
  using A = Decision::Action;
  MutexLock lock(mu_);
  const bool read = op == FaultOp::kRead;
  ++(read ? counters_.reads : counters_.writes);
  const uint64_t align = std::max<uint64_t>(1, options_.short_transfer_align_bytes);
  Decision d;

  for (FaultRule& rule : rules_) {
    if (rule.times == 0 || rule.op != op) continue;
    if (!rule.path.empty() && rule.path != path) continue;
    if (!Overlaps(offset, size, rule.offset, rule.length)) continue;
    if (rule.times > 0) --rule.times;
    const uint64_t prefix =
        offset < rule.offset ? rule.offset - offset : AlignDown(size / 2, align);
    switch (rule.kind) {
      case FaultKind::kIoError:
        ++(read ? counters_.read_errors : counters_.write_errors);
        return {A::kFail, 0};
      case FaultKind::kShortTransfer:
        ++(read ? counters_.short_reads : counters_.short_writes);
        return {A::kShort, prefix};
      case FaultKind::kTornWrite:
        ++counters_.torn_writes;
        return {A::kTorn, prefix};
      case FaultKind::kNoSpace:
        ++counters_.no_space;
        return {A::kNoSpace, 0};
    }
  }

  // Seeded draw: a pure function of (seed, path, op, offset, size).
  Hasher64 h(options_.seed);
  h.UpdateString(path);
  h.UpdateU64(static_cast<uint64_t>(op));
  h.UpdateU64(offset);
  h.UpdateU64(size);
  const uint64_t bits = h.Finish();
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  const uint64_t random_prefix =
      size == 0 ? 0 : AlignDown(Hash64(&bits, sizeof(bits), options_.seed) % size, align);
  double edge = read ? options_.read_error_probability : options_.write_error_probability;
  if (u < edge) {
    ++(read ? counters_.read_errors : counters_.write_errors);
    return {A::kFail, 0};
  }
  edge += read ? options_.short_read_probability : options_.short_write_probability;
  if (u < edge) {
    ++(read ? counters_.short_reads : counters_.short_writes);
    return {A::kShort, random_prefix};
  }
  if (!read) {
    edge += options_.torn_write_probability;
    if (u < edge) {
      ++counters_.torn_writes;
      return {A::kTorn, random_prefix};
    }
  }

  if (!read && space_limited_ && size > 0) {
    if (space_left_bytes_ == 0) {
      ++counters_.no_space;
      return {A::kNoSpace, 0};
    }
    if (size > space_left_bytes_) {
      // Like a real full disk: what fits is written and reported, the next write fails.
      d = {A::kSpaceShort, space_left_bytes_};
      ++counters_.short_writes;
      space_left_bytes_ = 0;
      return d;
    }
    space_left_bytes_ -= size;
  }
  return d;
}

Status FaultInjectingEnv::ChargeAllocate(uint64_t growth_bytes) {
  MutexLock lock(mu_);
  if (!space_limited_) return OkStatus();
  if (growth_bytes > space_left_bytes_) {
    ++counters_.no_space;
    return Status(StatusCode::kNoSpace,
                  "injected ENOSPC on allocate of " + std::to_string(growth_bytes) + " more bytes");
  }
  return OkStatus();
}

Status FaultInjectingEnv::CheckEnvOp(EnvOp op, const std::string& path) {
  MutexLock lock(mu_);
  for (EnvOpFailure& f : env_failures_) {
    if (f.op != op || f.times == 0) continue;
    if (!f.path.empty() && f.path != path) continue;
    if (f.times > 0) --f.times;
    ++counters_.env_op_failures;
    if (f.code == StatusCode::kNoSpace) ++counters_.no_space;
    return Status(f.code, "injected failure of env op " + std::to_string(static_cast<int>(op)) +
                              " on " + path);
  }
  return OkStatus();
}

std::shared_ptr<FaultInjectingEnv::PathState> FaultInjectingEnv::StateFor(const std::string& path,
                                                                          PathOpen how) {
  bool track;
  {
    MutexLock lock(mu_);
    track = options_.unsynced == UnsyncedData::kTrack;
    if (how == PathOpen::kOpened) {  // an OpenFile: reuse what earlier opens of this path built
      auto it = paths_.find(path);
      if (it != paths_.end()) return it->second;
    }
  }
  auto state = std::make_shared<PathState>();
  if (track) {
    // A buffered read-write handle, so undo capture works on O_DIRECT and read-only files.
    auto plain = target()->OpenFile(
        path, FileOptions{.mode = OpenMode::kReadWrite, .direct = DirectIo::kOff});
    if (plain.ok()) {
      MutexLock lock(state->mu);
      state->plain = std::move(plain).value();
    }
  }
  MutexLock lock(mu_);
  auto [it, inserted] = paths_.try_emplace(path, state);
  // A new file replaces the state of a deleted file of the same name; an open joins a racing
  // open's state.
  if (!inserted && how == PathOpen::kCreated) it->second = state;
  return it->second;
}

Result<std::unique_ptr<File>> FaultInjectingEnv::OpenFile(const std::string& path,
                                                          const FileOptions& options) {
  RANGEKV_RETURN_IF_ERROR(CheckEnvOp(EnvOp::kOpen, path));
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> base, target()->OpenFile(path, options));
  auto state = StateFor(path, PathOpen::kOpened);
  return std::unique_ptr<File>(new FaultFile(this, path, std::move(base), std::move(state)));
}

Result<std::unique_ptr<File>> FaultInjectingEnv::CreateFile(const std::string& path,
                                                            const FileOptions& options) {
  RANGEKV_RETURN_IF_ERROR(CheckEnvOp(EnvOp::kCreate, path));
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> base, target()->CreateFile(path, options));
  auto state = StateFor(path, PathOpen::kCreated);
  return std::unique_ptr<File>(new FaultFile(this, path, std::move(base), std::move(state)));
}

Status FaultInjectingEnv::RenameFile(const std::string& from, const std::string& to) {
  RANGEKV_RETURN_IF_ERROR(CheckEnvOp(EnvOp::kRename, from));
  RANGEKV_RETURN_IF_ERROR(target()->RenameFile(from, to));
  MutexLock lock(mu_);
  auto it = paths_.find(from);
  if (it != paths_.end()) {
    paths_[to] = std::move(it->second);
    paths_.erase(from);
  } else {
    paths_.erase(to);  // the replaced file's state no longer names a path
  }
  return OkStatus();
}

Status FaultInjectingEnv::DeleteFile(const std::string& path) {
  RANGEKV_RETURN_IF_ERROR(CheckEnvOp(EnvOp::kDelete, path));
  RANGEKV_RETURN_IF_ERROR(target()->DeleteFile(path));
  MutexLock lock(mu_);
  paths_.erase(path);
  return OkStatus();
}

Status FaultInjectingEnv::SyncDir(const std::string& dir) {
  RANGEKV_RETURN_IF_ERROR(CheckEnvOp(EnvOp::kSyncDir, dir));
  return target()->SyncDir(dir);
}

Status FaultInjectingEnv::DropUnsyncedData() {
  std::vector<std::shared_ptr<PathState>> states;
  {
    MutexLock lock(mu_);
    if (options_.unsynced != UnsyncedData::kTrack) {
      return FailedPrecondition("DropUnsyncedData needs FaultOptions::unsynced = kTrack");
    }
    for (auto& [path, state] : paths_) states.push_back(state);
  }
  uint64_t ops = 0;
  uint64_t bytes = 0;
  Status result;
  for (auto& state : states) {
    MutexLock lock(state->mu);
    if (state->plain == nullptr) continue;
    // Newest first: each step restores the file to exactly its state before that op.
    for (auto it = state->undo.rbegin(); it != state->undo.rend() && result.ok(); ++it) {
      result = state->plain->Truncate(it->size_before);
      if (result.ok()) {
        result = WriteFully(*state->plain, it->offset, it->old_bytes.data(), it->old_bytes.size());
      }
      ++ops;
      bytes += it->old_bytes.size();
    }
    {
      MutexLock env_lock(mu_);
      undo_bytes_ -= state->undo_bytes;
    }
    state->undo_bytes = 0;
    state->undo.clear();
    if (!result.ok()) break;
  }
  MutexLock lock(mu_);
  counters_.dropped_ops += ops;
  counters_.dropped_bytes += bytes;
  return result;
}

uint64_t FaultInjectingEnv::UnsyncedOps(const std::string& path) {
  std::shared_ptr<PathState> state;
  {
    MutexLock lock(mu_);
    auto it = paths_.find(path);
    if (it == paths_.end()) return 0;
    state = it->second;
  }
  MutexLock lock(state->mu);
  return state->undo.size();
}

}  // namespace rangekv::testing
