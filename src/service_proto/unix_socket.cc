#include "service_proto/unix_socket.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace rangekv::service {

namespace {

Status Errno(int err, const std::string& what) {
  const std::string m = what + ": " + std::strerror(err);
  if (err == EPIPE || err == ECONNRESET || err == ECONNREFUSED || err == ENOENT) {
    return Unavailable(m);
  }
  return Status(StatusCode::kIoError, m);
}

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    return InvalidArgument("socket path '" + path + "': empty or longer than " +
                           std::to_string(sizeof(a.sun_path) - 1) + " bytes");
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

Status Expired(size_t got, size_t n) {
  return Status(StatusCode::kDeadlineExceeded, "service frame: " + std::to_string(got) + " of " +
                                                   std::to_string(n) +
                                                   " bytes arrived before the deadline");
}

// Reads exactly n bytes; the first recvmsg also collects a passed descriptor. A socket with a
// receive timeout (SetIoTimeout) returns from a wait with what came (or EAGAIN); past
// `deadline` that is kDeadlineExceeded, so a peer that trickles bytes holds the reader at most
// about the deadline plus one timeout.
Status ReadFull(int fd, uint8_t* p, size_t n, int* passed_fd, bool* eof_at_start,
                Deadline deadline) {
  size_t got = 0;
  while (got < n) {
    if (got > 0 && std::chrono::steady_clock::now() >= deadline) return Expired(got, n);
    iovec iov{p + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (passed_fd != nullptr) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
    // Without a descriptor to collect, wait in the kernel for all n bytes: a large body (a
    // 128K-token query is 512 KiB, queued in 32 KiB socket buffers) then costs one call.
    const ssize_t r =
        ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | (passed_fd == nullptr ? MSG_WAITALL : 0));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (std::chrono::steady_clock::now() >= deadline) return Expired(got, n);
        continue;
      }
      return Errno(errno, "recvmsg");
    }
    if (passed_fd != nullptr) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int f = -1;
          std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (*passed_fd < 0) {
            *passed_fd = f;
          } else {
            ::close(f);
          }
        }
      }
    }
    if (r == 0) {
      if (got == 0 && eof_at_start != nullptr) *eof_at_start = true;
      return Unavailable("connection closed by the peer");
    }
    got += static_cast<size_t>(r);
  }
  return OkStatus();
}

}  // namespace

Result<std::string> SocketPathFromAddress(std::string_view address) {
  std::string_view path = address;
  if (address.starts_with("unix://")) {
    path = address.substr(7);
  } else if (address.find("://") != std::string_view::npos) {
    return InvalidArgument("store address '" + std::string(address) +
                           "': only unix:///path/to/socket is supported");
  }
  RANGEKV_RETURN_IF_ERROR(Address(std::string(path)).status());
  return std::string(path);
}

Result<int> ListenUnix(const std::string& path, uint32_t mode, int backlog) {
  RANGEKV_ASSIGN_OR_RETURN(const sockaddr_un a, Address(path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status(StatusCode::kAlreadyExists,
                    "socket path " + path + " exists and is not a socket");
    }
    auto probe = ConnectUnix(path);
    if (probe.ok()) {
      ::close(*probe);
      return Status(StatusCode::kAlreadyExists, "another store service listens on " + path);
    }
    ::unlink(path.c_str());  // a leftover of a service that died
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(errno, "socket");
  // Bind under a umask that leaves no one else a window, then set the bits exactly.
  const mode_t old = ::umask(0177);
  const int b = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  const int bind_errno = errno;
  ::umask(old);
  if (b != 0) {
    ::close(fd);
    return Errno(bind_errno, "bind " + path);
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0 || ::listen(fd, backlog) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return Errno(e, "listen " + path);
  }
  return fd;
}

Result<int> ConnectUnix(const std::string& path) {
  RANGEKV_ASSIGN_OR_RETURN(const sockaddr_un a, Address(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(errno, "socket");
  // A lookup sends its whole query (512 KiB at 128K tokens): with the default send buffer
  // (~208 KiB) it crosses in three pieces, each a wake-up of the service. Best effort: the kernel
  // caps it at net.core.wmem_max.
  const int sndbuf = 2 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0) return fd;
    if (errno == EINTR) continue;
    const int e = errno;
    ::close(fd);
    return Errno(e, "connecting to the store service at " + path);
  }
}

Result<PeerCredentials> PeerOf(int fd) {
  ucred c{};
  socklen_t n = sizeof(c);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &n) != 0) return Errno(errno, "SO_PEERCRED");
  return PeerCredentials{c.pid, c.uid, c.gid};
}

bool PeerInGroup(int fd, const PeerCredentials& peer, gid_t gid) {
  if (peer.gid == gid) return true;
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t n = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &n) == 0) {
      groups.resize(n / sizeof(gid_t));
      return std::find(groups.begin(), groups.end(), gid) != groups.end();
    }
    if (errno != ERANGE) return false;
    groups.resize(n / sizeof(gid_t) + 1);  // n says how much it needs
  }
  return false;
}

Status SendFrame(int fd, uint16_t type, std::span<const uint8_t> body, int pass_fd,
                 std::span<const uint8_t> tail) {
  uint8_t header[kHeaderBytes];
  EncodeHeader({kProtocolVersion, type, static_cast<uint32_t>(body.size() + tail.size())}, header);
  const std::span<const uint8_t> parts[3] = {{header, kHeaderBytes}, body, tail};
  size_t done = 0;  // bytes of parts already sent, in order
  bool fd_sent = pass_fd < 0;
  for (;;) {
    // The vector of what is left, past what went already.
    iovec v[3];
    int count = 0;
    size_t skip = done;
    for (const auto& part : parts) {
      if (skip >= part.size()) {
        skip -= part.size();
        continue;
      }
      v[count++] = {const_cast<uint8_t*>(part.data()) + skip, part.size() - skip};
      skip = 0;
    }
    if (count == 0) return OkStatus();
    msghdr msg{};
    msg.msg_iov = v;
    msg.msg_iovlen = static_cast<size_t>(count);
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (!fd_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // A send timeout (SetIoTimeout) ran out: the peer reads nothing.
        return Status(StatusCode::kDeadlineExceeded,
                      "sendmsg: the peer took nothing within the socket's send timeout");
      }
      return Errno(errno, "sendmsg");
    }
    fd_sent = true;
    done += static_cast<size_t>(w);
  }
}

void SpinUntilReadable(int fd, std::chrono::microseconds spin) {
  if (spin.count() <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + spin;
  do {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return;  // readable, hung up, in error, or poll itself failed
    // A thread that waits for this one's peer on this CPU (an oversubscribed machine) runs
    // first: polling must never delay the reply it polls for.
    sched_yield();
  } while (std::chrono::steady_clock::now() < deadline);
}

Status SetIoTimeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return Errno(errno, "socket timeouts");
  }
  return OkStatus();
}

Status ReceiveFrameInto(int fd, ReceivedFrame* f, Deadline deadline) {
  f->passed_fd = -1;
  uint8_t header[kHeaderBytes];
  bool eof = false;
  Status s = ReadFull(fd, header, kHeaderBytes, &f->passed_fd, &eof, deadline);
  auto fail = [f](Status why) {
    if (f->passed_fd >= 0) ::close(f->passed_fd);
    f->passed_fd = -1;
    return why;
  };
  if (!s.ok()) {
    if (!eof && s.code() == StatusCode::kUnavailable) {
      return fail(Status(StatusCode::kTruncated, "service frame: header cut short"));
    }
    return fail(s);
  }
  auto h = DecodeHeader(header);
  if (!h.ok()) return fail(h.status());
  f->header = *h;
  // The buffer grows with the bytes that actually arrived, never to what the header announces:
  // a peer that announces 32 MiB and sends nothing costs kFirstBodyChunk, not 32 MiB. A body
  // that fits what earlier frames left allocated is read in one call.
  const size_t n = f->header.body_bytes;
  constexpr size_t kFirstBodyChunk = 64u << 10;
  size_t have = 0;
  f->body.clear();  // keeps the capacity of earlier frames
  while (have < n) {
    const size_t next = n <= std::max(f->body.capacity(), kFirstBodyChunk)
                            ? n
                            : std::min(n, std::max(have * 2, kFirstBodyChunk));
    f->body.resize(next);
    s = ReadFull(fd, f->body.data() + have, next - have, nullptr, nullptr, deadline);
    if (!s.ok()) {
      if (s.code() == StatusCode::kUnavailable) {
        return fail(Status(StatusCode::kTruncated, "service frame: body cut short"));
      }
      return fail(s);
    }
    have = next;
  }
  return OkStatus();
}

Result<ReceivedFrame> ReceiveFrame(int fd, Deadline deadline) {
  ReceivedFrame f;
  RANGEKV_RETURN_IF_ERROR(ReceiveFrameInto(fd, &f, deadline));
  return f;
}

}  // namespace rangekv::service
