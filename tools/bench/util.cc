#include "tools/bench/util.h"

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "base/parse.h"
#include "base/units.h"

namespace rangekv::tools {

Result<uint64_t> ParseBytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return InvalidArgument("not a size: '" + text + "'");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    mult = kKiB;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mult = kMiB;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mult = kGiB;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    mult = kGiB * 1024;
  } else {
    return InvalidArgument("unknown size unit in '" + text + "' (use B, KiB, MiB, GiB)");
  }
  const double bytes = value * static_cast<double>(mult);
  if (!(bytes >= 1) || bytes > 1e15 || bytes != std::floor(bytes)) {
    return InvalidArgument("size out of range or not whole bytes: '" + text + "'");
  }
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= kGiB) {
    const double g = static_cast<double>(bytes) / kGiB;
    std::snprintf(buf, sizeof(buf), g == std::floor(g) ? "%.0f GiB" : "%.2f GiB", g);
  } else if (bytes >= kMiB) {
    const double m = static_cast<double>(bytes) / kMiB;
    std::snprintf(buf, sizeof(buf), m == std::floor(m) ? "%.0f MiB" : "%.1f MiB", m);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", bytes);
  }
  return buf;
}

Result<uint64_t> ParseCount(std::string_view text, std::string_view what, uint64_t min,
                            uint64_t max) {
  // The digits-only rule (no sign, space, prefix or overflow) is base/parse.h's, which the CLI's
  // unsigned options and the service's settings use too.
  Result<uint64_t> value = rangekv::ParseCount(text);
  if (!value.ok()) {
    return InvalidArgument(std::string(what) + ": '" + std::string(text) +
                           "' is not a whole number");
  }
  if (*value < min || *value > max) {
    return InvalidArgument(std::string(what) + ": " + std::string(text) + " is outside [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return *value;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuSeconds() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

std::vector<int32_t> RandomTokens(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 128000);
  return t;
}

RequestEnvelope BenchEnvelope(const std::string& id) {
  RequestEnvelope e;
  e.request_id = id;
  e.session_id = 1;
  return e;
}

void FailCommand(std::string_view command, const std::string& what) {
  std::fprintf(stderr, "rangekv %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               what.c_str());
  throw CLI::RuntimeError(1);
}

}  // namespace rangekv::tools
