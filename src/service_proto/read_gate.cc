#include "service_proto/read_gate.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <new>
#include <string>

namespace rangekv::service {
namespace {

constexpr size_t kPageBytes = 4096;
static_assert(sizeof(ReadGateLayout) <= kPageBytes);

// A shared (not FUTEX_PRIVATE) futex: the word lives in a page several processes map. No
// library wraps this; std::atomic::wait may use private futexes, which do not wake across
// processes.
uint32_t* Word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds left) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  // EAGAIN (the word moved), ETIMEDOUT and EINTR all send the caller back to look again.
  ::syscall(SYS_futex, Word(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>& word, int count) {
  ::syscall(SYS_futex, Word(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

// a -= 1, never below 0 (the page is shared with clients, so no value in it is trusted).
void DecrementToZero(std::atomic<uint32_t>& a) {
  uint32_t v = a.load();
  while (v > 0 && !a.compare_exchange_weak(v, v - 1)) {
  }
}

// Ticket `t` may go: fewer than `slots` tickets before it are still out. Signed difference, so
// the counters may wrap.
bool Within(uint32_t ticket, uint32_t done, uint32_t slots) {
  return static_cast<int32_t>(ticket - done) < static_cast<int32_t>(slots);
}

}  // namespace

// ---- the service's side ------------------------------------------------------------------------

Result<std::unique_ptr<ReadGatePage>> ReadGatePage::Create(uint32_t slots) {
  if (slots < 1 || slots > kMaxGateSlots) {
    return InvalidArgument("read gate slots " + std::to_string(slots) + " not in [1, " +
                           std::to_string(kMaxGateSlots) + "]");
  }
  const int fd = ::memfd_create("rangekv-read-gate", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoStatus(errno, "memfd_create (read gate)");
  if (::ftruncate(fd, kPageBytes) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "ftruncate (read gate)");
  }
  // Sealed before any client sees it: no session can shrink the page under the service (a
  // SIGBUS here) or grow it.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "seal (read gate)");
  }
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "mmap (read gate)");
  }
  auto* layout = new (p) ReadGateLayout{};
  layout->magic = ReadGateLayout::kMagic;
  layout->version = ReadGateLayout::kVersion;
  layout->slots = slots;
  layout->holders = kMaxGateHolders;
  return std::unique_ptr<ReadGatePage>(new ReadGatePage(fd, layout, slots));
}

ReadGatePage::~ReadGatePage() {
  ::munmap(layout_, kPageBytes);
  ::close(fd_);
}

Result<uint32_t> ReadGatePage::AcquireHolder() {
  for (uint32_t i = 0; i < kMaxGateHolders; ++i) {
    if (in_use_[i]) continue;
    in_use_[i] = true;
    layout_->marks[i].store(0);
    return i;
  }
  return ResourceExhausted("every read gate holder index is in use");
}

uint32_t ReadGatePage::ReleaseHolder(uint32_t holder) {
  if (holder >= kMaxGateHolders || !in_use_[holder]) return 0;
  in_use_[holder] = false;
  const uint32_t left = layout_->marks[holder].exchange(0);
  if (left > 0) {
    // Its tickets count as given back; the reads they admit may be anywhere in the queue, so
    // every word is bumped and woken (a rare event: a client died).
    layout_->done.fetch_add(left);
    for (std::atomic<uint32_t>& w : layout_->words) {
      w.fetch_add(1);
      FutexWake(w, INT32_MAX);
    }
  }
  return left;
}

uint32_t ReadGatePage::outstanding() const {
  const auto n = static_cast<int32_t>(layout_->next_ticket.load() - layout_->done.load());
  return n > 0 ? static_cast<uint32_t>(n) : 0;
}

uint32_t ReadGatePage::holders_in_use() const {
  uint32_t n = 0;
  for (bool b : in_use_) n += b ? 1 : 0;
  return n;
}

// ---- a session's side --------------------------------------------------------------------------

Result<std::shared_ptr<SharedReadGate>> SharedReadGate::Attach(
    int fd, uint32_t holder, uint32_t slots, std::chrono::milliseconds enter_wait) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fstat (read gate)");
  }
  if (st.st_size != static_cast<off_t>(kPageBytes)) {
    ::close(fd);
    return Corruption("read gate page of " + std::to_string(st.st_size) + " bytes, not " +
                      std::to_string(kPageBytes));
  }
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the page
  if (p == MAP_FAILED) return ErrnoStatus(err, "mmap (read gate)");
  auto* layout = static_cast<ReadGateLayout*>(p);
  Status bad;
  if (layout->magic != ReadGateLayout::kMagic || layout->version != ReadGateLayout::kVersion) {
    bad = Corruption("not a read gate page of version " + std::to_string(ReadGateLayout::kVersion));
  } else if (holder >= kMaxGateHolders || slots < 1 || slots > kMaxGateSlots) {
    bad = InvalidArgument("read gate holder " + std::to_string(holder) + " with " +
                          std::to_string(slots) + " slots: out of range");
  } else if (layout->slots != slots || layout->holders != kMaxGateHolders) {
    bad = Corruption("read gate page with " + std::to_string(layout->slots) + " slots and " +
                     std::to_string(layout->holders) + " holders, not " + std::to_string(slots) +
                     " and " + std::to_string(kMaxGateHolders));
  }
  if (!bad.ok()) {
    ::munmap(p, kPageBytes);
    return bad;
  }
  return std::shared_ptr<SharedReadGate>(new SharedReadGate(layout, holder, slots, enter_wait));
}

SharedReadGate::~SharedReadGate() { ::munmap(layout_, kPageBytes); }

bool SharedReadGate::Admitted(uint32_t ticket) const {
  return Within(ticket, layout_->done.load(), slots_);
}

bool SharedReadGate::Enter() {
  // Marked before the ticket is taken (and unmarked after the pass is given back): when this
  // process is gone the service counts its marks as given back and so never strands a slot.
  layout_->marks[holder_].fetch_add(1);
  const uint32_t ticket = layout_->next_ticket.fetch_add(1);
  entered_.fetch_add(1, std::memory_order_relaxed);
  if (Admitted(ticket)) return true;
  waited_.fetch_add(1, std::memory_order_relaxed);
  std::atomic<uint32_t>& word = layout_->words[ticket % kWaitWords];
  const auto deadline = std::chrono::steady_clock::now() + enter_wait_;
  // Counted as a sleeper before the word is read, and the word read before `done`: a
  // give-back that admits this ticket after that read bumps the word first and sees the
  // sleeper (the futex then returns at once); one before it is seen in `done`.
  layout_->sleepers.fetch_add(1);
  bool timed_out = false;
  for (;;) {
    const uint32_t seen = word.load();
    if (Admitted(ticket)) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      timed_out = true;  // goes ahead holding its ticket: Leave() gives it back as any other
      break;
    }
    FutexWait(word, seen, deadline - now);
  }
  DecrementToZero(layout_->sleepers);
  if (timed_out) timed_out_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SharedReadGate::Leave() {
  const uint32_t done = layout_->done.fetch_add(1) + 1;
  DecrementToZero(layout_->marks[holder_]);
  // The ticket this give-back admitted: done + slots - 1. Wake its word (every sleeper on it
  // looks again; others sharing the word go back to sleep).
  std::atomic<uint32_t>& word = layout_->words[(done + slots_ - 1) % kWaitWords];
  word.fetch_add(1);
  if (layout_->sleepers.load() > 0) FutexWake(word, INT32_MAX);  // no syscall when none sleeps
}

SharedReadGate::Counts SharedReadGate::counts() const {
  return Counts{.entered = entered_.load(std::memory_order_relaxed),
                .waited = waited_.load(std::memory_order_relaxed),
                .timed_out = timed_out_.load(std::memory_order_relaxed)};
}

}  // namespace rangekv::service
