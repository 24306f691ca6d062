// Little-endian byte codec for persist's on-disk formats: a growing writer and a bounded reader.
// Integers are encoded byte by byte so neither host endianness nor struct padding reaches the
// disk. Internal to src/persist.
//
// ByteReader never reads past its span: every Get returns false (and leaves the value
// unchanged) when fewer bytes remain, so a decoder checks each call and stops at the first
// short read.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace rangekv::persist::codec {

class ByteWriter {
 public:
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Bytes(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  // Overwrites 8 bytes at `offset` (REQUIRES offset + 8 <= size()).
  void PatchU64(size_t offset, uint64_t v) {
    for (int i = 0; i < 8; ++i) out_[offset + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  size_t size() const { return out_.size(); }
  const std::vector<uint8_t>& bytes() const { return out_; }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  void Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  [[nodiscard]] bool U32(uint32_t* v) { return Int(v, 4); }
  [[nodiscard]] bool U64(uint64_t* v) { return Int(v, 8); }
  [[nodiscard]] bool Skip(size_t n) {
    if (remaining() < n) return false;
    pos_ += n;
    return true;
  }
  // A view of the next n bytes (valid while the underlying span lives).
  [[nodiscard]] bool View(size_t n, std::span<const uint8_t>* out) {
    if (remaining() < n) return false;
    *out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  template <typename T>
  bool Int(T* v, size_t n) {
    if (remaining() < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    *v = static_cast<T>(x);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

inline uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

}  // namespace rangekv::persist::codec
