// PayloadIntegrity: the seam through which persistence (issue 5: span digests, the dirty marker)
// plugs into the transfer pipelines. The engine calls these hooks at the points where a span's
// bytes are known good, must be checked, or are about to change the pack file; it counts what
// they report. Computing, keeping and persisting digests, and making the dirty marker durable,
// are the implementation's business (src/persist provides it).
//
// When no hook object is installed the engine calls nothing; with EngineOptions::checksum kOff
// it skips OnStoreBatch and VerifyRead (the write-path hooks still run: the dirty marker is not
// optional).
//
// Order for one store (one reservation): BeforeFirstWrite -> per batch OnStoreBatch -> (writes)
// -> OnBatchWritten -> ... -> BeforePublish -> Directory::Publish; or OnStoreAborted instead of
// the last two when any batch failed. For one restore stripe: (read) -> VerifyRead -> scatter.
//
// Thread-safety: implementations must be thread-safe; the hooks run concurrently on read
// workers, store group workers and write-completion threads. OnBatchWritten, BeforePublish and
// OnStoreAborted run under the store pipeline's mutex (keep them short; never call the engine).
#pragma once

#include <cstdint>
#include <span>

#include "base/pack_record.h"
#include "pack/span_plan.h"
#include "rangekv/status.h"

namespace rangekv::engine_internal {

class PayloadIntegrity {
 public:
  virtual ~PayloadIntegrity() = default;

  // Before the first write of a reservation reaches the pack file (the dirty marker must be
  // durable by then). A non-OK status fails the store before any of its writes is issued.
  virtual Status BeforeFirstWrite(uint64_t reservation_id) {
    (void)reservation_id;
    return OkStatus();
  }

  // A store batch was gathered (its completion proven) and is about to be written. `bank_host`
  // holds the batch's spans at their bank_offset_bytes when the bank (or its staging copy) is
  // host-readable, else nullptr (a device-side digest then needs the device). A non-OK status
  // fails the store (nothing becomes visible).
  virtual Status OnStoreBatch(uint64_t reservation_id, std::span<const Span> spans,
                              const uint8_t* bank_host) {
    (void)reservation_id, (void)spans, (void)bank_host;
    return OkStatus();
  }

  // Every write of a batch returned; `ok` says whether all succeeded.
  virtual void OnBatchWritten(uint64_t reservation_id, std::span<const Span> spans, bool ok) {
    (void)reservation_id, (void)spans, (void)ok;
  }

  // Every batch of the reservation was written successfully; `records` are about to become
  // visible. A non-OK status aborts the store instead.
  virtual Status BeforePublish(uint64_t reservation_id, std::span<const PackRecord> records) {
    (void)reservation_id, (void)records;
    return OkStatus();
  }

  // The reservation is being aborted (after its accepted writes drained).
  virtual void OnStoreAborted(uint64_t reservation_id) { (void)reservation_id; }

  // A restore read of `span` landed in `buf_host` (the span's buffer, byte 0 = file_offset) and
  // is about to be scattered. A non-OK status (kCorruption) fails exactly this span's tokens;
  // the engine counts a checksum failure and delivers nothing from the buffer.
  virtual Status VerifyRead(const Span& span, const uint8_t* buf_host) {
    (void)span, (void)buf_host;
    return OkStatus();
  }
};

}  // namespace rangekv::engine_internal
