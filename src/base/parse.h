// Strict parsing of the numbers people type: byte sizes ("64GiB"), counts and quotas on command
// lines and in configuration. Strict means the whole text is a plain decimal number: no sign (a
// "-5GiB" quota must not wrap to 16 EiB), no leading or trailing space, no hex or octal, no
// fraction, and no value beyond uint64 (checked before it is multiplied by its unit). Every
// refusal is kInvalidArgument with a one-line message that quotes the text.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "rangekv/status.h"

namespace rangekv {

// "0", "4096", "512B", "64KiB", "16MiB", "64GiB", "2TiB": digits, then nothing or one of the
// units B, KiB, MiB, GiB, TiB (powers of 1024, spelled exactly so).
Result<uint64_t> ParseByteSize(std::string_view text);

// A count: digits only ("0", "192"), at most `max`.
Result<uint64_t> ParseCount(std::string_view text, uint64_t max = UINT64_MAX);

}  // namespace rangekv
