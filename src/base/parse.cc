#include "base/parse.h"

#include <array>
#include <string>
#include <utility>

#include "base/units.h"

namespace rangekv {
namespace {

// The leading decimal digits of `text` as a number; `*used` digits consumed.
Result<uint64_t> Digits(std::string_view text, std::string_view what, size_t* used) {
  auto bad = [&](std::string why) {
    return InvalidArgument("'" + std::string(text) + "' is not " + std::string(what) + ": " +
                           std::move(why));
  };
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const auto times_ten = CheckedMul(v, 10);
    const auto next =
        times_ten ? CheckedAdd(*times_ten, static_cast<uint64_t>(text[i] - '0')) : std::nullopt;
    if (!next) return bad("larger than 2^64-1");
    v = *next;
    ++i;
  }
  if (i == 0) {
    if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
      return bad("no sign allowed (a whole number of 0 or more)");
    }
    return bad("it must start with a decimal digit");
  }
  *used = i;
  return v;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  size_t used = 0;
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t v, Digits(text, "a byte size", &used));
  constexpr std::array<std::pair<std::string_view, uint64_t>, 6> kUnits = {
      {{"", 1}, {"B", 1}, {"KiB", kKiB}, {"MiB", kMiB}, {"GiB", kGiB}, {"TiB", kGiB * 1024}}};
  const std::string_view unit = text.substr(used);
  for (const auto& [name, bytes] : kUnits) {
    if (unit != name) continue;
    const auto total = CheckedMul(v, bytes);
    if (!total) {
      return InvalidArgument("'" + std::string(text) + "' is larger than 2^64-1 bytes");
    }
    return *total;
  }
  return InvalidArgument("'" + std::string(text) +
                         "' is not a byte size: digits then B, KiB, MiB, GiB or TiB (\"64GiB\")");
}

Result<uint64_t> ParseCount(std::string_view text, uint64_t max) {
  size_t used = 0;
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t v, Digits(text, "a count", &used));
  if (used != text.size()) {
    return InvalidArgument("'" + std::string(text) + "' is not a count: digits only");
  }
  if (v > max) {
    return InvalidArgument("'" + std::string(text) + "' is larger than " + std::to_string(max));
  }
  return v;
}

}  // namespace rangekv
