// Byte-size constants and overflow-checked arithmetic for sizes read from untrusted places.
#pragma once

#include <cstdint>
#include <optional>

namespace rangekv {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Returns a*b, or nullopt on uint64 overflow.
inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

constexpr uint64_t AlignUp(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }
constexpr uint64_t AlignDown(uint64_t v, uint64_t align) { return v / align * align; }
constexpr bool IsAligned(uint64_t v, uint64_t align) { return v % align == 0; }

}  // namespace rangekv
