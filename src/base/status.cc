#include "rangekv/status.h"

#include <cerrno>
#include <cstring>

namespace rangekv {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kOutOfRange:
      return "out_of_range";
    case StatusCode::kGeometryMismatch:
      return "geometry_mismatch";
    case StatusCode::kNamespaceMismatch:
      return "namespace_mismatch";
    case StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kStaleGeneration:
      return "stale_generation";
    case StatusCode::kForeignOwner:
      return "foreign_owner";
    case StatusCode::kTokenMismatch:
      return "token_mismatch";
    case StatusCode::kEndpointBeyondTicket:
      return "endpoint_beyond_ticket";
    case StatusCode::kTicketReplaced:
      return "ticket_replaced";
    case StatusCode::kCorruptTicket:
      return "corrupt_ticket";
    case StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case StatusCode::kNoSpace:
      return "no_space";
    case StatusCode::kIoError:
      return "io_error";
    case StatusCode::kShortTransfer:
      return "short_transfer";
    case StatusCode::kWrongStore:
      return "wrong_store";
    case StatusCode::kWrongVersion:
      return "wrong_version";
    case StatusCode::kTruncated:
      return "truncated";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kUnsafePermissions:
      return "unsafe_permissions";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kLocked:
      return "locked";
    case StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case StatusCode::kNotSupported:
      return "not_supported";
    case StatusCode::kDeviceFault:
      return "device_fault";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  if (!message_.empty()) {
    m += ": ";
    m += message_;
  }
  return Status(code_, std::move(m));
}

Status ErrnoStatus(int err, std::string_view what) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return Status(err == ENOSPC || err == EDQUOT ? StatusCode::kNoSpace : StatusCode::kIoError,
                std::move(m));
}

}  // namespace rangekv
