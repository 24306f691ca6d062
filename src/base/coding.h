// The one little-endian byte codec behind every on-disk and on-wire format of RangeKV (pack
// header, metadata snapshot, epoch file, directory snapshot, tickets, publication journal).
// Integers are encoded byte by byte, so neither host endianness nor struct padding reaches the
// bytes.
//
//   ByteWriter  appends to a growing buffer; Patch* overwrites a field written earlier (a
//               length or count known only at the end).
//   ByteReader  reads a span front to back and never past its end: every read returns false,
//               leaves its output unchanged and marks the reader failed when fewer bytes remain,
//               so a decoder checks each call (they are [[nodiscard]]) or chains them with && and
//               stops at the first short read.
//   Load* / Store*  fixed-offset access into a buffer the caller has already bounds-checked
//               (a fixed-size header page).
//   PutGeometry / GetGeometry  a Geometry's fields in one fixed order (the store service's
//               messages and the cluster tier's manifests carry it).
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "rangekv/geometry.h"

namespace rangekv::coding {

inline void StoreU16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(uint16_t{p[0]} | (uint16_t{p[1]} << 8));
}
inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
inline uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

class ByteWriter {
 public:
  ByteWriter() = default;
  void Reserve(size_t n) { out_.reserve(n); }
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Int(v, 2); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Bytes(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  // Overwrite a field written earlier (REQUIRES offset + width <= size()).
  void PatchU32(size_t offset, uint32_t v) { StoreU32(out_.data() + offset, v); }
  void PatchU64(size_t offset, uint64_t v) { StoreU64(out_.data() + offset, v); }
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
  [[nodiscard]] bool U8(uint8_t* v) { return Int(v, 1); }
  [[nodiscard]] bool U16(uint16_t* v) { return Int(v, 2); }
  [[nodiscard]] bool U32(uint32_t* v) { return Int(v, 4); }
  [[nodiscard]] bool U64(uint64_t* v) { return Int(v, 8); }
  [[nodiscard]] bool Skip(size_t n) {
    if (!Has(n)) return false;
    pos_ += n;
    return true;
  }
  // A view of the next n bytes (valid while the underlying span lives).
  [[nodiscard]] bool View(size_t n, std::span<const uint8_t>* out) {
    if (!Has(n)) return false;
    *out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }
  // False once any read came up short (sticky).
  bool ok() const { return ok_; }

 private:
  bool Has(size_t n) {
    if (remaining() >= n) return true;
    ok_ = false;
    return false;
  }
  template <typename T>
  bool Int(T* v, size_t n) {
    if (!Has(n)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    *v = static_cast<T>(x);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// 6 x u32 then 4 x u64 (56 bytes): layers, kv_heads_per_rank, head_size, mla_latent_size,
// dtype_bytes, block_size, token_bytes, stripe_bytes, tokens_per_stripe, pack_bytes. Decoding
// checks only that the bytes are there; the caller validates the values.
inline void PutGeometry(ByteWriter& w, const Geometry& g) {
  w.U32(g.layers);
  w.U32(g.kv_heads_per_rank);
  w.U32(g.head_size);
  w.U32(g.mla_latent_size);
  w.U32(g.dtype_bytes);
  w.U32(g.block_size);
  w.U64(g.token_bytes);
  w.U64(g.stripe_bytes);
  w.U64(g.tokens_per_stripe);
  w.U64(g.pack_bytes);
}
[[nodiscard]] inline bool GetGeometry(ByteReader& r, Geometry* g) {
  return r.U32(&g->layers) && r.U32(&g->kv_heads_per_rank) && r.U32(&g->head_size) &&
         r.U32(&g->mla_latent_size) && r.U32(&g->dtype_bytes) && r.U32(&g->block_size) &&
         r.U64(&g->token_bytes) && r.U64(&g->stripe_bytes) && r.U64(&g->tokens_per_stripe) &&
         r.U64(&g->pack_bytes);
}

}  // namespace rangekv::coding
