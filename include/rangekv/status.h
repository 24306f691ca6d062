// Status and Result<T>: RangeKV's one error vocabulary below the Python boundary.
//
// A Status is either OK or a (code, message) pair. Codes are coarse enough to branch on and
// fine enough that every distinct failure the acceptance tests name has its own code (a stale
// generation is not a token mismatch). Messages are for people; never parse them.
//
// What a caller may do about a code, for the three that name something missing or gone:
//   kUnavailable   transient: a service this call needs (the store service, the remote tier's
//                  S3 or Redis) is unreachable, stopping or dropped the connection. A later call
//                  may succeed (the engine reconnects); the vLLM connector recomputes meanwhile.
//   kNotSupported  permanent for this process: an optional backend (io_uring, CUDA, cuFile) or
//                  tool is not usable in this build or on this host. Pick another backend
//                  (the kAuto selections do); retrying changes nothing.
//   kDeviceFault   permanent for this engine: device work could not be proven complete, its
//                  banks were quarantined, and a pipeline has none left. Reopen the engine.
// kDeadlineExceeded is transient too (nothing changed). Every other code is an answer about the
// call or the data: retrying the same call gets the same answer.
//
// Thread-safety: values; copy freely. Invariant: ok() <=> code() == StatusCode::kOk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rangekv {

enum class StatusCode : uint8_t {
  kOk = 0,
  // Caller errors.
  kInvalidArgument,     // malformed input: zero sizes, overflow, bad slot, nonsense geometry
  kOutOfRange,          // an offset/length outside a file, bank or buffer
  kGeometryMismatch,    // right shape of input, wrong geometry/dtype for this store
  kNamespaceMismatch,   // ticket or record from another namespace
  kFailedPrecondition,  // the object is not in a state that allows the call
  kAlreadyExists,
  kNotFound,
  // Tickets and claims (Directory).
  kStaleGeneration,       // a pack generation named by a ticket/record was reclaimed
  kForeignOwner,          // envelope (request/session/attempt/rank) or owner epoch differs
  kTokenMismatch,         // claimed tokens differ from the ticket's
  kEndpointBeyondTicket,  // claim asks for more tokens than the ticket promised
  kTicketReplaced,        // a second lookup tried to replace an outstanding ticket's query
  kCorruptTicket,         // undecodable or forged ticket bytes
  // Capacity.
  kResourceExhausted,  // a bounded table, arena, pool or queue is full
  kNoSpace,            // ENOSPC from the file system
  // Storage.
  kIoError,            // EIO and other failed system calls
  kShortTransfer,      // a completion moved fewer bytes than requested
  kWrongStore,         // pack file / snapshot of another store (UUID differs)
  kWrongVersion,       // on-disk format version not understood
  kTruncated,          // a file shorter than its header says
  kCorruption,         // checksum failure, impossible field values
  kUnsafePermissions,  // a store directory or file owned by another user or writable by others
  // Lifecycle.
  kCancelled,
  kAborted,
  kUnavailable,  // a service or peer is unreachable now (transient: see above)
  kUnimplemented,
  kInternal,
  // Added after kInternal so the numbers above (the store service's wire status) stay put.
  kLocked,            // the store directory is held by another engine or store service
  kDeadlineExceeded,  // a wait ran past its deadline (nothing changed; it may be retried)
  kNotSupported,      // an optional backend or tool is not usable here (permanent: see above)
  kDeviceFault,       // no usable bank left after quarantines (permanent: see above)
};
// The highest code (loops over every code end here).
inline constexpr StatusCode kLastStatusCode = StatusCode::kDeviceFault;

// Stable lower_snake name of a code ("stale_generation"), used in logs, JSON and tests.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "stale_generation: pack 3 generation 7 was reclaimed (now 8)".
  std::string ToString() const;

  // Prepends context to the message, keeping the code.
  Status WithContext(std::string_view context) const;

  // Explicitly discards a status the caller has decided not to act on.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
inline Status DeviceFault(std::string m) { return {StatusCode::kDeviceFault, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }

// Maps an errno value to a Status (ENOSPC -> kNoSpace, everything else -> kIoError) with
// `what` and strerror in the message.
Status ErrnoStatus(int err, std::string_view what);

// Either a T or a non-OK Status. Constructing from an OK Status is a programming error and
// is turned into kInternal so it can never be mistaken for success.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rangekv

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define RANGEKV_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::rangekv::Status rangekv_status_ = (expr);        \
    if (!rangekv_status_.ok()) return rangekv_status_; \
  } while (0)

#define RANGEKV_CONCAT_INNER_(a, b) a##b
#define RANGEKV_CONCAT_(a, b) RANGEKV_CONCAT_INNER_(a, b)

// `RANGEKV_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK Result or returns its
// Status from the enclosing function.
#define RANGEKV_ASSIGN_OR_RETURN(lhs, expr) \
  RANGEKV_ASSIGN_OR_RETURN_IMPL_(RANGEKV_CONCAT_(rangekv_result_, __LINE__), lhs, expr)
#define RANGEKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
