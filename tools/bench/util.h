// Small helpers every benchmark command shares: sizes and counts parsed strictly, lists, the
// clock, process CPU time, random token ids and the request envelope of a bench request.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rangekv/status.h"
#include "rangekv/transfer.h"

namespace rangekv::tools {

// "768MiB", "6GiB", "1.5GiB", "512M", "4096" -> bytes (whole, >= 1). kInvalidArgument otherwise.
Result<uint64_t> ParseBytes(const std::string& text);
std::string FormatBytes(uint64_t bytes);  // "768 MiB", "6 GiB", "1.5 GiB"

// A decimal count: digits only (no sign, space, fraction or suffix), in [min, max].
// kInvalidArgument naming `what` and the text otherwise.
Result<uint64_t> ParseCount(std::string_view text, std::string_view what, uint64_t min = 0,
                            uint64_t max = UINT64_MAX);

// "a, b,,c" -> {"a", "b", "c"}: comma-separated items, spaces around each trimmed, empty ones
// dropped.
std::vector<std::string> SplitList(const std::string& text);

// Seconds on the steady clock (CLOCK_MONOTONIC: one clock for every process of the machine).
double NowSeconds();
// CPU seconds (user + system) of every thread of this process so far.
double ProcessCpuSeconds();

// n token ids in [0, 128000) from a seeded generator (the same n and seed, the same ids).
std::vector<int32_t> RandomTokens(uint64_t n, uint64_t seed);

// The envelope of a bench request: `id`, session 1.
RequestEnvelope BenchEnvelope(const std::string& id);

// Ends a bench command: "rangekv <command>: <what>" on stderr, then exit status 1 through
// CLI11 (tools/commands.h).
[[noreturn]] void FailCommand(std::string_view command, const std::string& what);

}  // namespace rangekv::tools
