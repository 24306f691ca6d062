#include "base/log.h"

#include <atomic>
#include <cstdio>

#include "base/thread_annotations.h"

namespace rangekv {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
Mutex g_capture_mu;
int g_capture_depth GUARDED_BY(g_capture_mu) = 0;
std::vector<std::string> g_captured GUARDED_BY(g_capture_mu);

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void Log(LogLevel level, std::string_view message) {
  {
    MutexLock lock(g_capture_mu);
    if (g_capture_depth > 0) g_captured.emplace_back(message);
  }
  if (static_cast<int>(level) < g_min_level.load(std::memory_order_relaxed)) return;
  std::fprintf(stderr, "rangekv %s %.*s\n", LevelName(level), static_cast<int>(message.size()),
               message.data());
}

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }

ScopedLogCapture::ScopedLogCapture() {
  MutexLock lock(g_capture_mu);
  if (g_capture_depth++ == 0) g_captured.clear();
}

ScopedLogCapture::~ScopedLogCapture() {
  MutexLock lock(g_capture_mu);
  --g_capture_depth;
}

std::vector<std::string> ScopedLogCapture::lines() const {
  MutexLock lock(g_capture_mu);
  return g_captured;
}

bool ScopedLogCapture::Contains(std::string_view needle) const {
  for (const auto& l : lines()) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace rangekv
