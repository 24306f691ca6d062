// The node's read gate (docs/store-service.md "A node-wide read gate"): one page of shared
// memory through which every session of a store service passes each read piece its engine
// issues, so the node's engines together keep at most `slots` read pieces in flight, what one
// engine alone keeps. Unlike a share fixed per session (EngineTuning::share_reads) it is
// work-conserving: an engine reading alone gets every slot, and a slot one engine is not using
// goes to whichever read asks next.
//
// First come, first served. A read takes a ticket (a counter in the page) and may go once its
// ticket is within `slots` of the passes given back (`done`): reads go in the order they
// asked, across processes, so no read waits behind later ones (a gate that let any woken
// thread race for a freed slot starved some reads past its wait bound on the dev VM). A waiting
// read sleeps on one of kWaitWords shared futex words, the one its ticket indexes; a give-back
// wakes the word of the ticket it admitted. A wait is bounded (kEnterWait): past it the read
// goes ahead anyway, keeping its ticket (it still gives its pass back), so the gate can slow
// reads, never stop them, and the count stays exact.
//
// The service creates the page (ReadGatePage::Create, a sealed memfd: no client can shrink it
// under the service) when it runs with ServiceOptions::read_slots > 0, and passes it with the
// reply to kAttachReadGate together with a holder index of the session's own. A client maps it
// (SharedReadGate::Attach) and hands it to its read I/O engine.
//
// Crash safety. Each holder index counts its session's marks: a thread marks before it takes a
// ticket and unmarks after it gave the pass back, so a session's outstanding tickets never
// exceed its marks. Once a session's process has exited the service adds the marks it left to
// `done` (ReleaseHolder): the slots of a dead client's reads come back. Tickets it left waiting
// are counted given back early, so the node may run a read or two over the cap until the queue
// passes them; it never runs under it.
//
// Trust. The page is writable by every session (same uid or group as the service, as the socket
// allows): a session that scribbles on it can slow other sessions' reads (each waits at most
// kEnterWait), as a session lying about reading can with share_reads, never change their bytes.
// The slot count a client obeys comes from the service's reply, not from the page.
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
inline constexpr uint32_t kWaitWords = 64;
inline constexpr std::chrono::milliseconds kEnterWait{100};

// The page's layout (both sides are one machine). Counters wrap; they are compared by signed
// difference. Exposed for tests.
struct ReadGateLayout {
  static constexpr uint32_t kMagic = 0x47524B52;  // "RKRG"
  static constexpr uint32_t kVersion = 2;
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t holders;
  alignas(64) std::atomic<uint32_t> next_ticket;        // tickets handed out
  alignas(64) std::atomic<uint32_t> done;               // passes given back, and reclaimed marks
  alignas(64) std::atomic<uint32_t> sleepers;           // threads in a futex wait (or about to be)
  alignas(64) std::atomic<uint32_t> words[kWaitWords];  // futex words, bumped at each admission
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
  uint32_t slots() const { return slots_; }
  // A free holder index with its marks at 0; kResourceExhausted when all are in use.
  Result<uint32_t> AcquireHolder();
  // Gives a holder index back. Call once its session's process can touch the page no more (it
  // exited, or said Goodbye after draining): the marks it left are counted as given back and
  // returned (0 after a clean end).
  uint32_t ReleaseHolder(uint32_t holder);
  // Tickets taken and not given back: reads in flight and reads waiting.
  uint32_t outstanding() const;
  uint32_t holders_in_use() const;

 private:
  ReadGatePage(int fd, ReadGateLayout* layout, uint32_t slots)
      : fd_(fd), layout_(layout), slots_(slots) {}
  int fd_;
  ReadGateLayout* layout_;
  const uint32_t slots_;
  std::vector<bool> in_use_ = std::vector<bool>(kMaxGateHolders, false);
};

// A session's side: the mapped page and its holder index.
class SharedReadGate final : public ReadGate {
 public:
  // Maps `fd` (taken over: closed here) and checks the page against what the service replied:
  // kCorruption for a page that is not a read gate of this version, of the wrong size or with
  // another slot count; kInvalidArgument for a holder index or slot count out of range.
  static Result<std::shared_ptr<SharedReadGate>> Attach(
      int fd, uint32_t holder, uint32_t slots, std::chrono::milliseconds enter_wait = kEnterWait);
  ~SharedReadGate() override;
  SharedReadGate(const SharedReadGate&) = delete;
  SharedReadGate& operator=(const SharedReadGate&) = delete;

  // Always true: a read whose wait ran out goes ahead holding its ticket (counted in
  // counts().timed_out) and gives its pass back like any other.
  bool Enter() override;
  void Leave() override;

  uint32_t slots() const { return slots_; }
  uint32_t holder() const { return holder_; }
  struct Counts {
    uint64_t entered = 0;    // passes taken
    uint64_t waited = 0;     // of them, after waiting
    uint64_t timed_out = 0;  // of them, when the wait ran out (the read went ahead anyway)
  };
  Counts counts() const;

 private:
  SharedReadGate(ReadGateLayout* layout, uint32_t holder, uint32_t slots,
                 std::chrono::milliseconds enter_wait)
      : layout_(layout), slots_(slots), holder_(holder), enter_wait_(enter_wait) {}
  bool Admitted(uint32_t ticket) const;

  ReadGateLayout* const layout_;
  const uint32_t slots_;
  const uint32_t holder_;
  const std::chrono::milliseconds enter_wait_;
  std::atomic<uint64_t> entered_{0};
  std::atomic<uint64_t> waited_{0};
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace rangekv::service
