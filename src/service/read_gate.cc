#include "service/read_gate.h"

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

// taken -= n, never below 0 (the page is shared with clients, so no value is trusted).
void SubtractSaturating(std::atomic<uint32_t>& a, uint32_t n) {
  uint32_t v = a.load();
  while (!a.compare_exchange_weak(v, v > n ? v - n : 0)) {
  }
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
  return std::unique_ptr<ReadGatePage>(new ReadGatePage(fd, layout));
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
    SubtractSaturating(layout_->taken, left);
    layout_->generation.fetch_add(1);
    FutexWake(layout_->generation, INT32_MAX);
  }
  return left;
}

uint32_t ReadGatePage::taken() const { return layout_->taken.load(); }

uint32_t ReadGatePage::holders_in_use() const {
  uint32_t n = 0;
  for (bool b : in_use_) n += b ? 1 : 0;
  return n;
}

// ---- a session's side --------------------------------------------------------------------------

Result<std::shared_ptr<SharedReadGate>> SharedReadGate::Attach(
    int fd, uint32_t holder, std::chrono::milliseconds enter_wait) {
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
  } else if (layout->slots < 1 || layout->slots > kMaxGateSlots ||
             layout->holders != kMaxGateHolders) {
    bad = Corruption("read gate page with " + std::to_string(layout->slots) + " slots and " +
                     std::to_string(layout->holders) + " holders");
  } else if (holder >= kMaxGateHolders) {
    bad = InvalidArgument("read gate holder " + std::to_string(holder) + " out of range");
  }
  if (!bad.ok()) {
    ::munmap(p, kPageBytes);
    return bad;
  }
  return std::shared_ptr<SharedReadGate>(new SharedReadGate(layout, holder, enter_wait));
}

SharedReadGate::SharedReadGate(ReadGateLayout* layout, uint32_t holder,
                               std::chrono::milliseconds enter_wait)
    : layout_(layout), slots_(layout->slots), holder_(holder), enter_wait_(enter_wait) {}

SharedReadGate::~SharedReadGate() { ::munmap(layout_, kPageBytes); }

bool SharedReadGate::TryTake() {
  uint32_t t = layout_->taken.load();
  while (t < slots_) {
    if (layout_->taken.compare_exchange_weak(t, t + 1)) return true;
  }
  return false;
}

bool SharedReadGate::Enter() {
  std::atomic<uint32_t>& mark = layout_->marks[holder_];
  // Marked before the slot is taken (and unmarked after it is given back): the service, when
  // this process is gone, subtracts the marks and so never leaves a slot taken by nobody.
  mark.fetch_add(1);
  if (TryTake()) {
    entered_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + enter_wait_;
  for (;;) {
    // Counted as a waiter before the generation is read: a give-back after this load bumps it
    // (the futex then returns at once), one before it freed the slot TryTake sees next.
    layout_->waiters.fetch_add(1);
    const uint32_t generation = layout_->generation.load();
    if (TryTake()) {
      SubtractSaturating(layout_->waiters, 1);
      entered_.fetch_add(1, std::memory_order_relaxed);
      waited_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      SubtractSaturating(layout_->waiters, 1);
      SubtractSaturating(mark, 1);
      timed_out_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    FutexWait(layout_->generation, generation, deadline - now);
    SubtractSaturating(layout_->waiters, 1);
  }
}

void SharedReadGate::Leave() {
  SubtractSaturating(layout_->taken, 1);
  SubtractSaturating(layout_->marks[holder_], 1);
  layout_->generation.fetch_add(1);
  if (layout_->waiters.load() > 0) FutexWake(layout_->generation, 1);
}

SharedReadGate::Counts SharedReadGate::counts() const {
  return Counts{.entered = entered_.load(std::memory_order_relaxed),
                .waited = waited_.load(std::memory_order_relaxed),
                .timed_out = timed_out_.load(std::memory_order_relaxed)};
}

}  // namespace rangekv::service
