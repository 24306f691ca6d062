// The node's read gate (docs/store-service.md "A node-wide read gate"): one page of shared
// memory in which every session of a store service takes a slot before each read piece its
// engine issues and gives it back after, so the node's engines together keep at most `slots`
// read pieces in flight, what one engine alone keeps. Unlike a share fixed per session
// (EngineOptions::share_reads) it is work-conserving: an engine reading alone takes every slot,
// and a slot one engine is not using goes to whichever engine asks next.
//
// The service creates the page (ReadGatePage::Create, a sealed memfd: no client can shrink it
// under the service) when it runs with ServiceOptions::read_slots > 0, and passes it with the
// reply to kAttachReadGate together with a holder index of the session's own. A client maps it
// (SharedReadGate::Attach) and hands it to its read I/O engine.
//
// Crash safety. Each holder index counts its session's marks: a thread marks before taking a
// slot and unmarks after giving it back, so the slots taken never exceed the sum of the marks.
// Once a session's process has exited the service subtracts its marks from the slots taken
// (ReleaseHolder; never below 0): a dead client's slots come back. A thread that died while
// marked but waiting costs the gate nothing but makes the node run one read over the cap until
// the service restarts. A wait is bounded (kEnterWait): past it the read goes ahead ungated.
//
// Trust. The page is writable by every session (same uid or group as the service, as the
// socket allows): a session that scribbles on it can slow other sessions' reads (as a session
// lying about reading can with share_reads), never change their bytes; the service reads only
// the marks of holders it assigned and never trusts a value beyond a saturating subtraction.
//
// Thread-safety: ReadGatePage's holder calls under the caller's lock (the service's mu_);
// SharedReadGate's Enter/Leave from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/read_gate.h"
#include "rangekv/status.h"

namespace rangekv::service {

inline constexpr uint32_t kMaxGateHolders = 256;  // ServiceOptions::max_sessions' default
inline constexpr uint32_t kMaxGateSlots = 4096;
inline constexpr std::chrono::milliseconds kEnterWait{100};

// The page's layout (little-endian host; both sides are one machine). Exposed for tests.
struct ReadGateLayout {
  static constexpr uint32_t kMagic = 0x47524B52;  // "RKRG"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t holders;
  alignas(64) std::atomic<uint32_t> taken;
  alignas(64) std::atomic<uint32_t> generation;  // futex word: bumped at every give-back
  std::atomic<uint32_t> waiters;
  alignas(64) std::atomic<uint32_t> marks[kMaxGateHolders];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The service's side: owns the page and the holder indexes.
class ReadGatePage {
 public:
  // kInvalidArgument unless 1 <= slots <= kMaxGateSlots; errno statuses from memfd/mmap.
  static Result<std::unique_ptr<ReadGatePage>> Create(uint32_t slots);
  ~ReadGatePage();
  ReadGatePage(const ReadGatePage&) = delete;
  ReadGatePage& operator=(const ReadGatePage&) = delete;

  int fd() const { return fd_; }  // pass with SCM_RIGHTS; stays owned here
  uint32_t slots() const { return layout_->slots; }
  // A free holder index with its marks at 0; kResourceExhausted when all are in use.
  Result<uint32_t> AcquireHolder();
  // Gives a holder index back. Call once its session's process can touch the page no more
  // (it exited, or said Goodbye after draining): whatever marks it left are subtracted from the
  // slots taken (saturating at 0), and returned (0 after a clean end).
  uint32_t ReleaseHolder(uint32_t holder);
  uint32_t taken() const;
  uint32_t holders_in_use() const;

 private:
  ReadGatePage(int fd, ReadGateLayout* layout) : fd_(fd), layout_(layout) {}
  int fd_;
  ReadGateLayout* layout_;
  std::vector<bool> in_use_ = std::vector<bool>(kMaxGateHolders, false);
};

// A session's side: the mapped page and its holder index.
class SharedReadGate final : public ReadGate {
 public:
  // Maps `fd` (taken over: closed here) and checks the page: kCorruption for a page that is not
  // a read gate of this version or whose size is wrong, kInvalidArgument for a holder index out
  // of range.
  static Result<std::shared_ptr<SharedReadGate>> Attach(
      int fd, uint32_t holder, std::chrono::milliseconds enter_wait = kEnterWait);
  ~SharedReadGate() override;
  SharedReadGate(const SharedReadGate&) = delete;
  SharedReadGate& operator=(const SharedReadGate&) = delete;

  bool Enter() override;
  void Leave() override;

  uint32_t slots() const { return slots_; }
  uint32_t holder() const { return holder_; }
  struct Counts {
    uint64_t entered = 0;    // passes taken
    uint64_t waited = 0;     // of them, after waiting
    uint64_t timed_out = 0;  // waits that ran out (the read went ahead ungated)
  };
  Counts counts() const;

 private:
  SharedReadGate(ReadGateLayout* layout, uint32_t holder, std::chrono::milliseconds enter_wait);
  bool TryTake();

  ReadGateLayout* const layout_;
  const uint32_t slots_;  // read once at Attach: a scribbled page cannot raise this side's cap
  const uint32_t holder_;
  const std::chrono::milliseconds enter_wait_;
  std::atomic<uint64_t> entered_{0};
  std::atomic<uint64_t> waited_{0};
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace rangekv::service
