// Unix domain socket plumbing for the store service: a listening socket created with exact
// permission bits, connections, whole-frame send and receive (protocol.h framing) with an
// optional file descriptor passed alongside (SCM_RIGHTS), and the peer's credentials
// (SO_PEERCRED). Plain POSIX calls; no library of Debian 12 wraps these few better.
//
// Thread-safety: functions over caller-owned descriptors; a descriptor must not be read (or
// written) by two threads at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rangekv/status.h"
#include "service_proto/protocol.h"

namespace rangekv::service {

// A socket path from a store address: "unix:///run/rangekv.sock" or a plain path.
// kInvalidArgument for another scheme, an empty path or one longer than sun_path allows.
Result<std::string> SocketPathFromAddress(std::string_view address);

// Binds and listens on `path` with permission bits `mode` exactly (0600 owner only, 0660 group).
// A leftover socket file nobody listens on is replaced; a live one fails with kAlreadyExists
// (another service owns it); any other file there fails with kAlreadyExists too.
Result<int> ListenUnix(const std::string& path, uint32_t mode, int backlog = 64);
Result<int> ConnectUnix(const std::string& path);

struct PeerCredentials {
  pid_t pid = 0;  // 0 when the peer lives in another pid namespace
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCredentials> PeerOf(int fd);
// Whether the peer of `fd` is in group `gid`: as its primary group (SO_PEERCRED) or as one of
// its supplementary groups (SO_PEERGROUPS, taken at connect), as file permissions count it.
bool PeerInGroup(int fd, const PeerCredentials& peer, gid_t gid);

// A point by which a frame must have arrived; max(): none.
using Deadline = std::chrono::steady_clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

// Sets the socket's receive and send timeouts (SO_RCVTIMEO, SO_SNDTIMEO): a blocked recvmsg or
// sendmsg returns after `timeout` instead of waiting for a peer that never sends or never
// reads. ReceiveFrame then checks its deadline; SendFrame fails with kDeadlineExceeded.
Status SetIoTimeout(int fd, std::chrono::milliseconds timeout);

// Sends one frame whose body is `body` followed by `tail` (a large trailing array sent from
// where it lies, without a copy); `pass_fd` >= 0 travels with it. kUnavailable when the peer is
// gone; kDeadlineExceeded when the socket's send timeout ran out (the peer reads nothing).
Status SendFrame(int fd, uint16_t type, std::span<const uint8_t> body, int pass_fd = -1,
                 std::span<const uint8_t> tail = {});

struct ReceivedFrame {
  FrameHeader header;
  std::vector<uint8_t> body;
  int passed_fd = -1;  // owned by the receiver; -1 when none came
};
// Polls `fd` without sleeping, for at most `spin`, until it is readable, closed or in error;
// returns at once when `spin` is zero. A caller that then receives sleeps only if nothing came
// within `spin`. Why poll at all: a thread asleep in recvmsg is woken by the sender's CPU, and
// where its own CPU went idle (a VM's vCPU halts) that wake-up goes through the hypervisor and
// costs tens of microseconds, more than a whole index operation (docs/store-service.md).
void SpinUntilReadable(int fd, std::chrono::microseconds spin);

// Receives one frame. kUnavailable on end of file (the peer closed), kCorruption /
// kWrongVersion / kInvalidArgument / kResourceExhausted for a bad header (DecodeHeader),
// kTruncated for a body cut short by the peer closing, kDeadlineExceeded when the frame had not
// arrived by `deadline` (checked whenever a wait returns: on a socket with SetIoTimeout at least
// every timeout). The body buffer grows with the bytes received, never ahead of them to the
// size the header announces. At most one passed descriptor is kept; any others are closed.
Result<ReceivedFrame> ReceiveFrame(int fd, Deadline deadline = kNoDeadline);
// The same into `f`, whose body keeps its capacity from frame to frame (a session's loop).
// On error f->passed_fd is -1 (anything passed was closed).
Status ReceiveFrameInto(int fd, ReceivedFrame* f, Deadline deadline = kNoDeadline);

}  // namespace rangekv::service
