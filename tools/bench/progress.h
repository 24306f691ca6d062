// One progress line on stderr for a long benchmark: "[<name> <elapsed>s <done>/<total> ETA
// <m>m<ss>s] <message>", the ETA from the mean step time so far. On a terminal the line is
// rewritten in place; otherwise each message is its own line.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <string>

namespace rangekv::tools {

class ProgressLine {
 public:
  // `name` heads every line; a disabled line prints nothing.
  ProgressLine(std::string name, bool enabled);
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void Plan(uint64_t steps_total) { steps_total_ = steps_total; }
  void Step() { ++steps_done_; }
  void Print(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  // Ends a line left open on a terminal.
  void End();

 private:
  const std::string name_;
  const bool enabled_;
  const bool tty_;
  const double start_s_;
  bool line_open_ = false;
  uint64_t steps_done_ = 0;
  uint64_t steps_total_ = 0;
};

}  // namespace rangekv::tools
