// Minimal leveled logging to stderr. Recovery decisions ("dirty marker present: index
// discarded") must be visible to operators, so they are logged at kWarning.
// A test can capture lines with ScopedLogCapture.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rangekv {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void Log(LogLevel level, std::string_view message);
void SetMinLogLevel(LogLevel level);

// While alive, every logged line is also appended to lines() (thread-safe). For tests.
class ScopedLogCapture {
 public:
  ScopedLogCapture();
  ~ScopedLogCapture();
  ScopedLogCapture(const ScopedLogCapture&) = delete;
  ScopedLogCapture& operator=(const ScopedLogCapture&) = delete;
  std::vector<std::string> lines() const;
  bool Contains(std::string_view needle) const;
};

}  // namespace rangekv
