// JobSlots: the admission state that the restore and the store pipeline share — a fixed set of
// job slots (per-job device resources allocated at Open), the jobs that hold them, the active
// jobs in their service order, and the pipeline's bank pool.
//
//   Admit --> slot taken, job id --Activate--> active (served by its pipeline's workers)
//       (GiveBack if the job never starts)       |
//                                        Deactivate (settled: nothing in flight)
//                                                |
//                   ReturnSlot once settled AND the handle finished or was abandoned
//
// Admission never waits: a job that finds no free slot is refused (kResourceExhausted) and its
// caller falls back (recomputes) or retries after finishing another handle. Waiting instead
// could deadlock a caller that itself holds the handles whose Finish would free a slot.
//
// Fair service: workers visit active jobs round robin (ServiceOrder), starting with the job
// after the one served last, so each bank grant goes to the next job with work instead of to
// the oldest job until it is done: N jobs in flight share the banks, none can take them all.
//
// Banks: every transition of a bank goes through here (Acquire / Release / Quarantine), so both
// pipelines count, log and report it alike. When every bank is quarantined, usable_banks() is 0
// and the pipeline must fail the work that waits for a bank (it would wait forever otherwise).
//
// A job's mutable state is a JobState<T> (below): it holds a pointer to the pipeline's mutex as
// its capability, so the clang thread-safety analysis checks every access.
//
// Thread-safety: none of its own. The pipeline holds it GUARDED_BY its mutex.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "device/device.h"
#include "engine/banks.h"
#include "engine/engine_context.h"
#include "engine/stats.h"
#include "io/io_engine.h"
#include "rangekv/status.h"

namespace rangekv::engine_internal {

// Where the lifecycle of every job stands; part of each job's guarded state.
struct JobLifecycle {
  bool settled = false;      // nothing of the job is in flight any more (drained / published)
  bool handle_done = false;  // Finish() returned, or the handle was abandoned
  bool slot_returned = false;
};

// A job's mutable state T, guarded by the mutex of the pipeline that runs the job. The job
// carries a pointer to that mutex as the capability of the state; Locked(mu) REQUIRES the
// caller to hold `mu` and checks that it is the job's.
template <typename T>
class JobState {
 public:
  explicit JobState(Mutex* pipeline_mu) : mu_(pipeline_mu) {}
  T& Locked(const Mutex& held) REQUIRES(held) {
    Same(held);
    return value_;
  }
  const T& Locked(const Mutex& held) const REQUIRES(held) {
    Same(held);
    return value_;
  }

 private:
  // `held` is this state's mutex: the analysis may treat *mu_ as held from here on.
  void Same(const Mutex& held) const ASSERT_CAPABILITY(mu_) { RANGEKV_CHECK(&held == mu_); }

  Mutex* const mu_;
  T value_ GUARDED_BY(mu_);
};

// Bank memory both pipelines use: a device buffer, and pinned staging of the same size when the
// device cannot be the target of file I/O.
struct BankMemory {
  DeviceBuffer device;
  PinnedHostBuffer staging;  // empty unless context.staging
  uint8_t* io_buffer() const { return staging.empty() ? device.bytes() : staging.data(); }
};

// Allocates every bank's memory (banks.size() of them, `bytes` each) and registers the I/O
// buffers with `io` (a refusal is logged, not an error: registration only speeds I/O up).
Status AllocateBankMemory(const EngineContext& context, uint64_t bytes, IoEngine& io,
                          std::span<BankMemory* const> banks, const char* what);

// "No bank" in per-stripe / per-batch bank tables.
inline constexpr uint32_t kNoBank = UINT32_MAX;

// A job slot's slot mapping on the device (int64 per token, up to max_request_tokens) and its
// pinned upload staging; allocated once per slot.
struct SlotMapping {
  DeviceBuffer device;
  PinnedHostBuffer staging;
  // Recorded after each upload's copy; the next Upload waits for it before it rewrites the
  // staging. A slot goes back to the pool once its job settled, which a cancelled restore can do
  // before its mapping's copy ran (no scatter of it ever waited for the copy), so the next job's
  // Upload could otherwise overwrite the staging under that copy (ThreadSanitizer found it in
  // EngineFaultTest.CancelWithReadsInFlightReusesNoBankEarlyAndLeaksNothing).
  std::unique_ptr<Event> uploaded;

  Status Allocate(Device& device_api, uint64_t max_tokens);
  const int64_t* slots() const { return static_cast<const int64_t*>(device.data()); }
  // Waits for the previous upload's copy, copies `mapping` to the staging and enqueues its
  // upload on `stream`; work enqueued on `stream` afterwards sees it. REQUIRES: mapping.size() <=
  // max_tokens.
  Status Upload(std::span<const int64_t> mapping, Stream& stream);
};

// Pool introspection (tests, stats).
struct PoolState {
  uint32_t free_banks = 0, owned_banks = 0, quarantined_banks = 0, prefetch_banks = 0;
  uint32_t free_slots = 0, active_jobs = 0;
};

// Slot: has `uint32_t index` (its position in the slots given to Init).
// Job: has `Slot* const slot` (null for a job that holds no slot).
template <typename Slot, typename Job>
class JobSlots {
 public:
  struct Admission {
    Slot* slot = nullptr;
    uint64_t job_id = 0;
  };

  // `what` names the pipeline's jobs in messages ("restore", "store"); `limit_name` the option
  // that bounds the slots. Observer may be null.
  JobSlots(const EngineContext& context, uint32_t banks, uint32_t prefetch_banks, const char* what,
           const char* limit_name,
           const std::function<void(BankEvent, uint32_t, uint64_t)>* observer)
      : context_(context),
        what_(what),
        limit_name_(limit_name),
        observer_(observer != nullptr && *observer ? observer : nullptr),
        pool_(banks, prefetch_banks) {}

  // At Init, before any job.
  void Init(std::span<const std::unique_ptr<Slot>> slots) {
    for (auto it = slots.rbegin(); it != slots.rend(); ++it) free_.push_back(it->get());
    owner_.assign(slots.size(), nullptr);
    active_.reserve(slots.size());
    slot_count_ = static_cast<uint32_t>(slots.size());
  }

  // A free slot and a fresh job id; kFailedPrecondition once closing, kResourceExhausted (and a
  // rejected request counted) when every slot is in use.
  Result<Admission> Admit() {
    if (closing_) return FailedPrecondition("engine is closing");
    if (free_.empty()) {
      context_.counters->Add(&Counters::rejected_requests, 1);
      return ResourceExhausted("all " + std::to_string(slot_count_) + " " + what_ +
                               " job slots are in use (" + limit_name_ + ")");
    }
    Admission a{free_.back(), next_job_id_++};
    free_.pop_back();
    return a;
  }
  // The admitted job never started: its slot is free again.
  void GiveBack(Slot* slot) { free_.push_back(slot); }
  // The job (holding its admitted slot) is served from now on, after every active job.
  void Activate(std::shared_ptr<Job> job) {
    RANGEKV_CHECK(job->slot != nullptr && owner_[job->slot->index] == nullptr);
    owner_[job->slot->index] = job.get();
    active_.push_back(std::move(job));
  }
  // The job settled: no worker serves it any more.
  void Deactivate(const Job& job) {
    auto it = std::find_if(active_.begin(), active_.end(),
                           [&](const std::shared_ptr<Job>& j) { return j.get() == &job; });
    if (it == active_.end()) return;
    const size_t at = static_cast<size_t>(it - active_.begin());
    active_.erase(it);
    if (at < cursor_) --cursor_;  // the job the cursor names stays next
    if (cursor_ >= active_.size()) cursor_ = 0;
  }
  // Returns the job's slot once it settled and its handle is done (each slot once).
  void ReturnSlot(const Job& job, JobLifecycle& life) {
    if (job.slot == nullptr || !life.settled || !life.handle_done || life.slot_returned) return;
    life.slot_returned = true;
    owner_[job.slot->index] = nullptr;
    free_.push_back(job.slot);
  }

  // Active jobs in their service order: a worker looking for work visits ServiceOrder(k) for
  // k in [0, active_count()) and calls Served(k) for the job it gave work to; the next visit
  // then starts after that job.
  size_t active_count() const { return active_.size(); }
  const std::shared_ptr<Job>& ServiceOrder(size_t k) const {
    return active_[(cursor_ + k) % active_.size()];
  }
  void Served(size_t k) { cursor_ = (cursor_ + k + 1) % active_.size(); }
  // Active jobs in start order (a visitor that must see every job, e.g. deferred stores).
  const std::vector<std::shared_ptr<Job>>& active() const { return active_; }
  // Per slot: the job holding it (settled or not), or null.
  std::span<Job* const> owners() const { return owner_; }
  // Stops admission (Admit answers kFailedPrecondition) and tells workers to exit when idle.
  void Close() { closing_ = true; }
  bool closing() const { return closing_; }

  // ---- banks ----
  // A bank for `purpose`, or nullopt (none free, or the prefetch budget is spent).
  std::optional<uint32_t> AcquireBank(BankPurpose purpose, Counters* job_counters,
                                      Counters::Field field) {
    const auto bank = pool_.TryAcquire(purpose);
    if (!bank) return bank;
    CountFor(*context_.counters, job_counters, field);
    Observe(BankEvent::kAcquired, *bank);
    return bank;
  }
  bool CanAcquireBank(BankPurpose purpose) const { return pool_.CanAcquire(purpose); }
  bool AnyBankFree() const { return pool_.free_count() > 0; }
  // Banks not quarantined: 0 means no bank will ever be free again.
  uint32_t usable_banks() const { return pool_.size() - pool_.quarantined_count(); }
  void PromoteBank(uint32_t bank) { pool_.Promote(bank); }
  // Every use of the bank is proven complete.
  void ReleaseBank(uint32_t bank) {
    pool_.Release(bank);
    Observe(BankEvent::kReleased, bank);
  }
  // The bank's last use could not be proven complete: it is never handed out again.
  void QuarantineBank(uint32_t bank, Counters* job_counters, const std::string& why) {
    pool_.Quarantine(bank);
    CountFor(*context_.counters, job_counters, &Counters::quarantines);
    Log(LogLevel::kWarning, std::string(what_) + " bank " + std::to_string(bank) +
                                " quarantined: " + why + " (" + std::to_string(usable_banks()) +
                                " of " + std::to_string(pool_.size()) + " banks left)");
    Observe(BankEvent::kQuarantined, bank);
  }

  PoolState state() const {
    PoolState s;
    s.free_banks = pool_.free_count();
    s.owned_banks = pool_.owned_count();
    s.quarantined_banks = pool_.quarantined_count();
    s.prefetch_banks = pool_.prefetch_owned();
    s.free_slots = static_cast<uint32_t>(free_.size());
    s.active_jobs = static_cast<uint32_t>(active_.size());
    return s;
  }

 private:
  void Observe(BankEvent event, uint32_t bank) {
    if (observer_ != nullptr) (*observer_)(event, bank, pool_.use_number(bank));
  }

  const EngineContext& context_;
  const char* const what_;
  const char* const limit_name_;
  const std::function<void(BankEvent, uint32_t, uint64_t)>* const observer_;
  BankPool pool_;
  uint32_t slot_count_ = 0;
  std::vector<Slot*> free_;
  std::vector<Job*> owner_;                   // per slot: the job holding it
  std::vector<std::shared_ptr<Job>> active_;  // in start order
  size_t cursor_ = 0;                         // index into active_ of the job ServiceOrder(0) names
  uint64_t next_job_id_ = 1;
  bool closing_ = false;
};

}  // namespace rangekv::engine_internal
