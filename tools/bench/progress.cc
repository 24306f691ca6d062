#include "tools/bench/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "tools/bench/util.h"

namespace rangekv::tools {

ProgressLine::ProgressLine(std::string name, bool enabled)
    : name_(std::move(name)), enabled_(enabled), tty_(::isatty(2) != 0), start_s_(NowSeconds()) {}

void ProgressLine::Print(const char* fmt, ...) {
  if (!enabled_) return;
  char msg[512];
  std::va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  const double elapsed = NowSeconds() - start_s_;
  char eta[48] = "";
  if (steps_done_ > 0 && steps_total_ > 0) {
    const double left = elapsed / static_cast<double>(steps_done_) *
                        static_cast<double>(steps_total_ - std::min(steps_done_, steps_total_));
    std::snprintf(eta, sizeof(eta), " ETA %dm%02ds", static_cast<int>(left) / 60,
                  static_cast<int>(left) % 60);
  }
  const std::string head = "[" + name_ + " " + std::to_string(static_cast<int>(elapsed)) + "s " +
                           std::to_string(steps_done_) + "/" + std::to_string(steps_total_) + eta +
                           "] ";
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%.*s", head.c_str(), 150, msg);
    line_open_ = true;
  } else {
    std::fprintf(stderr, "%s%s\n", head.c_str(), msg);
  }
  std::fflush(stderr);
}

void ProgressLine::End() {
  if (line_open_) std::fputc('\n', stderr);
  line_open_ = false;
}

}  // namespace rangekv::tools
