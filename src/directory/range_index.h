// RangeIndex: the directory operations a transfer engine performs on its store's index, and
// nothing else. Two implementations: Directory itself (embedded mode: the index lives in the
// serving process) and ServiceStore (the index lives in a node's store service, `rangekv
// serve`, reached over a Unix domain socket; src/store/service_store.h). The engine
// holds a RangeIndex& and cannot tell them apart; each method's contract is Directory's
// (directory.h), plus kUnavailable from the service implementation when its service is gone.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "base/pack_record.h"
#include "directory/ticket.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

struct Reservation;
struct ClaimedRange;
struct DirectoryStats;
enum class CancelOutcome : uint8_t;

class RangeIndex {
 public:
  virtual ~RangeIndex() = default;

  virtual Result<Reservation> Reserve(const NamespaceId& ns, std::span<const int32_t> tokens) = 0;
  virtual Status Publish(uint64_t reservation_id) = 0;
  virtual Status Abort(uint64_t reservation_id) = 0;
  virtual bool IsInFlight(uint64_t reservation_id) const = 0;

  virtual Result<Ticket> Lookup(const NamespaceId& ns, std::span<const int32_t> tokens,
                                const Envelope& envelope, uint64_t granularity_tokens) = 0;
  virtual Result<ClaimedRange> ClaimBytes(const NamespaceId& ns,
                                          std::span<const uint8_t> ticket_bytes,
                                          const Envelope& envelope, std::span<const int32_t> tokens,
                                          uint64_t endpoint_tokens) = 0;
  virtual Status Release(uint64_t ticket_id) = 0;
  virtual CancelOutcome Cancel(std::string_view request_id) = 0;

  // The index's work counters as this engine caused them (embedded: the directory's own).
  virtual DirectoryStats Stats() const = 0;
};

}  // namespace rangekv
