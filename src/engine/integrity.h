// PayloadIntegrity: the seam through which span digests (DESIGN.md 4.6, issue 5) plug into the
// transfer pipelines. The engine calls the hook at the two points where a span's bytes are
// known good or must be checked, and counts what it reports; computing, keeping and persisting
// digests is the implementation's business (the persistence layer provides it).
//
// When EngineOptions::checksum is kOff, or no hook is installed, the engine calls nothing.
//
// Thread-safety: implementations must be thread-safe; the hooks run concurrently on read
// workers and store group workers, never under an engine lock.
#pragma once

#include <cstdint>
#include <span>

#include "pack/span_plan.h"
#include "rangekv/status.h"

namespace rangekv::engine_internal {

class PayloadIntegrity {
 public:
  virtual ~PayloadIntegrity() = default;

  // A store batch was gathered (its completion proven) and is about to be written.
  // `bank_host` holds the batch's spans at their bank_offset_bytes when the bank (or its
  // staging copy) is host-readable, else nullptr (a device-side digest then needs the device).
  // A non-OK status fails the store (nothing becomes visible).
  virtual Status OnStoreBatch(uint64_t reservation_id, std::span<const Span> spans,
                              const uint8_t* bank_host) = 0;

  // A restore read of `span` landed in `buf_host` (the span's buffer, byte 0 = file_offset) and
  // is about to be scattered. A non-OK status (kCorruption) fails exactly this span's tokens;
  // the engine counts a checksum failure and delivers nothing from the buffer.
  virtual Status VerifyRead(const Span& span, const uint8_t* buf_host) = 0;
};

}  // namespace rangekv::engine_internal
