// Clang thread-safety annotations (checked with -Wthread-safety under clang; no-ops elsewhere)
// and an annotated mutex, because libstdc++'s std::mutex carries no capability attributes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define RANGEKV_TSA(x) __attribute__((x))
#else
#define RANGEKV_TSA(x)
#endif

#define CAPABILITY(x) RANGEKV_TSA(capability(x))
#define SCOPED_CAPABILITY RANGEKV_TSA(scoped_lockable)
#define GUARDED_BY(x) RANGEKV_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) RANGEKV_TSA(pt_guarded_by(x))
#define REQUIRES(...) RANGEKV_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) RANGEKV_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) RANGEKV_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) RANGEKV_TSA(release_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) RANGEKV_TSA(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS RANGEKV_TSA(no_thread_safety_analysis)

namespace rangekv {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// RAII lock over Mutex, usable with CondVar.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() RELEASE() = default;
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Condition variable bound to MutexLock. Wait() REQUIRES the lock to be held.
class CondVar {
 public:
  void Wait(MutexLock& lock) { cv_.wait(lock.native()); }
  template <typename Pred>
  void Wait(MutexLock& lock, Pred pred) {
    cv_.wait(lock.native(), pred);
  }
  // Waits until `pred` holds or `timeout` passed; returns pred(). For periodic work only
  // (production timers); tests never depend on it.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    return cv_.wait_for(lock.native(), timeout, pred);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace rangekv
