#include "service/store_service.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <set>

#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "directory/ticket.h"
#include "pack/pack_layout.h"
#include "persist/identity_record.h"
#include "persist/payload_digests.h"
#include "persist/store_layout.h"
#include "rangekv/options.h"
#include "service_proto/unix_socket.h"
#include "store/store_state.h"

namespace rangekv::service {

static_assert(kMaxIdentityBytes == persist::kMaxIdentityRecordBytes);

using store::StoreState;
using store::StoreStateOptions;
using Clock = std::chrono::steady_clock;

struct StoreService::Store {
  std::string key;  // <tenant>/<namespace hex>
  std::string tenant;
  std::string dir;
  std::unique_ptr<StoreState> state;
  uint64_t capacity_bytes = 0;
  Clock::time_point fence_until;
};

struct StoreService::Session {
  uint64_t id = 0;
  int fd = -1;
  PeerCredentials peer;
  std::thread thread;
  std::atomic<bool> done{false};
  Store* store = nullptr;         // set by Hello
  uint64_t session_requests = 0;  // requests handled, for the closing log line
  std::string prefix;             // "s<id>/": prepended to every request id of this session
  // What the session holds in its store, for the reclaim.
  std::set<std::string> requests;  // prefixed request ids with an outstanding ticket
  std::set<uint64_t> claimed;      // claimed ticket ids not yet released
  std::map<uint64_t, std::vector<PackRecord>> reservations;  // in-flight stores
  bool goodbye = false;
  // Why Handle ended the session ("" while it goes on), for its closing log line.
  std::string end_reason;
  bool malformed = false;  // ended for a malformed message (ServiceStats::bad_frames)
  // Its read gate holder index (kAttachReadGate), given back at the end once its process can no
  // longer touch the gate page (at once after Goodbye; else when the process has exited, which
  // the accept loop checks while it waits: a client that reconnects does not hold a thread).
  std::optional<uint32_t> gate_holder;
  // Whether the session counts as a reader (StoreService::Readers): its connection is open and
  // it holds claimed tickets, or it claimed, released or hit within the last reader window
  // (ServiceOptions::reader_window_ms). Written by the session's thread, read by every
  // session's under mu_.
  std::atomic<uint32_t> held{0};
  std::atomic<uint64_t> reading_until_ns{0};
  std::atomic<bool> ended{false};  // its connection closed (leftovers may still be held)

  // The session reads now: a reader for `window_ms` more, and while it holds claims.
  void MarkReading(uint64_t window_ms) {
    held.store(static_cast<uint32_t>(claimed.size()), std::memory_order_relaxed);
    reading_until_ns.store(SteadyNs() + window_ms * 1000000, std::memory_order_relaxed);
  }
  // Reused from request to request, so a large lookup, claim or reservation allocates (and
  // faults in) nothing: their token arrays are the largest bodies on the hot path.
  ReceivedFrame frame;
  LookupRequest lookup;
  ClaimRequest claim;
  ReserveRequest reserve;
  // The client's query buffer (kAttachQueryBuffer), mapped read-only; unmapped when the
  // session ends.
  const uint8_t* query = nullptr;
  size_t query_bytes = 0;
  // The CPUs the session's thread may run on (its mask when it started), and the one it is
  // pinned to (FollowClientCpu; kUnknownCpu: not pinned).
  cpu_set_t allowed{};
  bool allowed_known = false;
  uint32_t cpu = kUnknownCpu;

  ~Session() { ReleaseMemory(); }
  // Gives back what the session's requests left allocated (its frame buffer, the reused
  // requests' token arrays, the query buffer's mapping): at its end, at once, not when the
  // accept loop gets to join its thread.
  void ReleaseMemory() {
    std::vector<uint8_t>().swap(frame.body);
    std::vector<int32_t>().swap(lookup.tokens);
    std::vector<int32_t>().swap(claim.tokens);
    std::vector<int32_t>().swap(reserve.tokens);
    if (query != nullptr) ::munmap(const_cast<uint8_t*>(query), query_bytes);
    query = nullptr;
    query_bytes = 0;
  }

  bool HasLeftovers() const {
    return !requests.empty() || !claimed.empty() || !reservations.empty();
  }
};

namespace {

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0) return OkStatus();
  if (errno != EEXIST) {
    return Status(StatusCode::kIoError, "mkdir " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status(StatusCode::kAlreadyExists, path + " exists and is not a directory");
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 0022) != 0) {
    return Status(StatusCode::kUnsafePermissions,
                  path + " is owned by another user or writable by group or others");
  }
  return OkStatus();
}

Status WithPrefix(const std::string& prefix, Envelope* e) {
  RANGEKV_RETURN_IF_ERROR(ValidateEnvelope(*e));
  if (e->request_id.size() + prefix.size() > kMaxRequestIdBytes) {
    return InvalidArgument("request id longer than " +
                           std::to_string(kMaxRequestIdBytes - prefix.size()) +
                           " bytes (the store service prefixes it with its session)");
  }
  e->request_id = prefix + e->request_id;
  return OkStatus();
}

}  // namespace

StoreService::StoreService(const ServiceOptions& options)
    : options_(options), env_(options.env != nullptr ? options.env : DefaultEnv()) {}

Result<std::unique_ptr<StoreService>> StoreService::Start(const ServiceOptions& options) {
  if (options.root.empty()) return InvalidArgument("store service: empty root directory");
  if (options.max_sessions == 0) return InvalidArgument("store service: max_sessions is 0");
  for (const auto& [tenant, bytes] : options.quotas) {
    RANGEKV_RETURN_IF_ERROR(ValidateTenant(tenant).WithContext("store service quota"));
  }
  if (options.frame_timeout.count() <= 0) {
    return InvalidArgument("store service: frame_timeout must be positive");
  }
  std::unique_ptr<StoreService> s(new StoreService(options));
  if (options.read_slots > 0) {  // before the socket: a failure here leaves nothing to undo
    auto gate = ReadGatePage::Create(options.read_slots);
    if (!gate.ok()) return gate.status().WithContext("store service read gate");
    s->gate_ = std::move(gate).value();
  }
  RANGEKV_RETURN_IF_ERROR(MakeDir(options.root, options.group_access ? 0750 : 0700));
  s->socket_path_ =
      options.socket_path.empty() ? options.root + "/rangekv.sock" : options.socket_path;
  // One service per root: a second one (on another socket) would open the same stores. Each
  // store is locked on its own too (StoreState), which keeps embedded engines out of them.
  auto root_lock = s->env_->LockFile(
      options.root + "/serve.lock",
      "pid " + std::to_string(::getpid()) + " (rangekv serve on " + s->socket_path_ + ")",
      options.group_access ? 0640 : 0600);
  if (!root_lock.ok()) {
    return root_lock.status().WithContext("store service: root " + options.root +
                                          " is in use by another store service");
  }
  s->root_lock_ = std::move(root_lock).value();
  RANGEKV_ASSIGN_OR_RETURN(s->listen_fd_,
                           ListenUnix(s->socket_path_, options.group_access ? 0660 : 0600));
  s->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  s->reap_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd_ < 0 || s->reap_fd_ < 0) {
    const int err = errno;
    ::close(s->listen_fd_);
    if (s->stop_fd_ >= 0) ::close(s->stop_fd_);
    if (s->reap_fd_ >= 0) ::close(s->reap_fd_);
    s->listen_fd_ = s->stop_fd_ = s->reap_fd_ = -1;
    return Status(StatusCode::kIoError, std::string("eventfd: ") + std::strerror(err));
  }
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  Log(LogLevel::kInfo,
      "store service: listening on " + s->socket_path_ + ", stores under " + options.root);
  return s;
}

StoreService::~StoreService() {
  Status s = Stop();
  s.IgnoreError();
}

bool StoreService::ProcessGone(int pid, std::chrono::milliseconds wait) const {
  if (pid <= 0) return false;  // another pid namespace: ReapGateHolders' grace decides
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return errno == ESRCH;
  pollfd p = {pidfd, POLLIN, 0};
  const bool exited = ::poll(&p, 1, static_cast<int>(wait.count())) > 0;  // exited (a zombie too)
  ::close(pidfd);
  return exited;
}

void StoreService::ReapGateHolders() {
  std::vector<PendingHolder> pending;
  {
    MutexLock l(mu_);
    if (pending_holders_.empty()) return;  // the common case, every 100 ms
    pending.swap(pending_holders_);
  }
  std::vector<PendingHolder> still;
  std::vector<uint32_t> gone;
  const auto grace = std::chrono::milliseconds(options_.orphan_grace_ms);
  for (const PendingHolder& p : pending) {
    const bool over = p.pid > 0 ? ProcessGone(p.pid, std::chrono::milliseconds(0))
                                : Clock::now() - p.since >= grace;
    if (over) {
      gone.push_back(p.holder);
    } else {
      still.push_back(p);
    }
  }
  MutexLock l(mu_);
  for (uint32_t holder : gone) stats_.read_gate_marks_reclaimed += gate_->ReleaseHolder(holder);
  pending_holders_.insert(pending_holders_.end(), still.begin(), still.end());
}

void StoreService::ReapSessions() {
  uint64_t n = 0;
  const ssize_t r = ::read(reap_fd_, &n, sizeof(n));  // nonblocking: clears the count
  (void)r;
  std::vector<std::unique_ptr<Session>> finished;
  {
    MutexLock l(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->done.load()) {
        finished.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& f : finished) f->thread.join();
}

std::string StoreService::RefusalLocked(const PeerCredentials& peer) const {
  uint32_t same_pid = 0, same_uid = 0;
  for (const auto& [id, session] : sessions_) {
    if (session->done.load()) continue;
    same_pid += session->peer.pid == peer.pid && peer.pid > 0 ? 1 : 0;
    same_uid += session->peer.uid == peer.uid ? 1 : 0;
  }
  const uint32_t per_uid =
      options_.max_sessions_per_uid > 0
          ? options_.max_sessions_per_uid
          : (options_.group_access ? std::max<uint32_t>(1, options_.max_sessions / 4 * 3)
                                   : options_.max_sessions);
  if (sessions_.size() >= options_.max_sessions) {
    return std::to_string(sessions_.size()) + " sessions at once, the limit (--max-sessions " +
           std::to_string(options_.max_sessions) + ")";
  }
  if (options_.max_sessions_per_pid > 0 && same_pid >= options_.max_sessions_per_pid) {
    return "pid " + std::to_string(peer.pid) + " holds " + std::to_string(same_pid) +
           " sessions, the limit per process (--max-sessions-per-pid " +
           std::to_string(options_.max_sessions_per_pid) + ")";
  }
  if (same_uid >= per_uid) {
    return "uid " + std::to_string(peer.uid) + " holds " + std::to_string(same_uid) +
           " sessions, the limit per user (--max-sessions-per-uid " + std::to_string(per_uid) + ")";
  }
  return "";
}

void StoreService::AcceptLoop() {
  for (;;) {
    pollfd p[3] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {reap_fd_, POLLIN, 0}};
    // With a read gate, look every 100 ms for gate holder indexes whose process exited (a
    // session thread may have queued one while this one slept).
    const int n = ::poll(p, 3, gate_ != nullptr ? 100 : -1);
    if (gate_ != nullptr) ReapGateHolders();
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (n == 0) continue;
    if (p[1].revents != 0) return;
    // An ended session's thread is joined at once (its memory went back when it ended).
    if (p[2].revents != 0) ReapSessions();
    if ((p[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto peer = PeerOf(fd);
    const uid_t want_uid = options_.peer_uid.value_or(::geteuid());
    const bool allowed =
        peer.ok() &&
        (peer->uid == want_uid || (options_.group_access && PeerInGroup(fd, *peer, ::getegid())));
    MutexLock l(mu_);
    std::string why;
    StatusCode code = StatusCode::kResourceExhausted;
    if (stopping_) {
      why = "stopping";
      code = StatusCode::kUnavailable;
    } else if (!allowed) {
      why = "peer credentials refused (uid " + std::to_string(peer.ok() ? peer->uid : 0) +
            (options_.group_access ? ", not in the service's group" : "") + ")";
      code = StatusCode::kUnsafePermissions;
    } else {
      why = RefusalLocked(*peer);
    }
    if (!why.empty()) {
      ++stats_.sessions_refused;
      Log(LogLevel::kWarning,
          "store service: connection" +
              (peer.ok() ? " of pid " + std::to_string(peer->pid) : std::string()) +
              " refused: " + why);
      std::vector<uint8_t> body;
      EncodeStatus(Status(code, "store service: " + why), &body);
      // A refused peer gets one small frame, without waiting on it.
      (void)SetIoTimeout(fd, std::chrono::milliseconds(100));
      Status sent = SendFrame(fd, static_cast<uint16_t>(MessageType::kHello) | kReplyBit, body);
      sent.IgnoreError();
      ::close(fd);
      continue;
    }
    // A peer that stops reading replies, or stops sending mid-frame, cannot hold its session's
    // thread for longer than this (RunSession checks the frame deadline).
    Status timed = SetIoTimeout(fd, options_.frame_timeout);
    timed.IgnoreError();
    auto session = std::make_unique<Session>();
    session->id = next_session_++;
    session->fd = fd;
    session->peer = *peer;
    session->prefix = "s" + std::to_string(session->id) + "/";
    Session* raw = session.get();
    ++stats_.sessions_accepted;
    sessions_[raw->id] = std::move(session);
    raw->thread = std::thread([this, raw] { RunSession(raw); });
  }
}

bool StoreService::Reply(Session& s, uint16_t type, const Status& status,
                         std::span<const uint8_t> payload, int pass_fd) {
  std::vector<uint8_t> body;
  body.reserve(16 + status.message().size());
  EncodeStatus(status, &body);
  return SendFrame(s.fd, type | kReplyBit, body, pass_fd, payload).ok();
}

uint32_t StoreService::CountReadersLocked() const {
  const uint64_t now = SteadyNs();
  uint32_t readers = 0;
  for (const auto& [id, session] : sessions_) {
    const Session& s = *session;
    if (s.ended.load(std::memory_order_relaxed)) continue;
    if (s.held.load(std::memory_order_relaxed) > 0 ||
        s.reading_until_ns.load(std::memory_order_relaxed) > now) {
      ++readers;
    }
  }
  return readers;
}

uint32_t StoreService::Readers() const {
  MutexLock l(mu_);
  return std::max<uint32_t>(CountReadersLocked(), 1);
}

bool StoreService::AwaitRequest(Session& s, std::string* why, bool* idle) {
  SpinUntilReadable(s.fd, options_.request_spin);
  // Before Hello a connection holds nothing and must say who it is within the frame timeout;
  // after it, a session that holds nothing may idle up to idle_timeout; one holding tickets,
  // claims or reservations waits for as long as its client takes.
  const bool hello = s.store != nullptr;
  const std::chrono::milliseconds bound =
      !hello ? options_.frame_timeout
             : (s.HasLeftovers() ? std::chrono::milliseconds(0) : options_.idle_timeout);
  for (;;) {
    pollfd p{s.fd, POLLIN, 0};
    const int n = ::poll(&p, 1, bound.count() > 0 ? static_cast<int>(bound.count()) : -1);
    if (n > 0) return true;  // readable, closed or in error: the receive says which
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    *idle = true;
    *why = hello ? "idle for " + std::to_string(bound.count()) +
                       " ms holding nothing (idle_timeout); its engine reconnects on its next call"
                 : "no hello within " + std::to_string(bound.count()) + " ms (frame_timeout)";
    return false;
  }
}

void StoreService::RunSession(Session* session) {
  Session& s = *session;
  s.allowed_known = ::sched_getaffinity(0, sizeof(s.allowed), &s.allowed) == 0;
  // Why the session ended, for the one line the service logs about it.
  std::string why;
  LogLevel level = LogLevel::kInfo;
  for (;;) {
    bool idle = false;
    if (!AwaitRequest(s, &why, &idle)) {
      MutexLock l(mu_);
      ++(idle ? stats_.sessions_closed_idle : stats_.sessions_closed_deadline);
      break;
    }
    const Status received = ReceiveFrameInto(s.fd, &s.frame, Clock::now() + options_.frame_timeout);
    if (!received.ok()) {
      const StatusCode c = received.code();
      if (c == StatusCode::kUnavailable &&
          received.message().find("closed by the peer") != std::string::npos) {
        why = s.store == nullptr ? "closed by the client before hello" : "closed by the client";
      } else if (c == StatusCode::kUnavailable || c == StatusCode::kTruncated) {
        // Killed, crashed or reset mid-frame: a client that vanished, not a malformed message.
        why = "the client vanished mid-frame (" + received.ToString() + ")";
        MutexLock l(mu_);
        ++stats_.sessions_vanished;
      } else if (c == StatusCode::kDeadlineExceeded) {
        why = "a frame did not arrive within " + std::to_string(options_.frame_timeout.count()) +
              " ms (" + received.message() + ")";
        level = LogLevel::kWarning;
        MutexLock l(mu_);
        ++stats_.sessions_closed_deadline;
      } else {
        why = "malformed frame: " + received.ToString();
        level = LogLevel::kWarning;
        {
          MutexLock l(mu_);
          ++stats_.bad_frames;
        }
        Reply(s, static_cast<uint16_t>(MessageType::kHello), received, {});
      }
      break;
    }
    // A descriptor is taken only with kAttachQueryBuffer (Handle maps it); closed either way.
    const int passed_fd = s.frame.passed_fd;
    if ((s.frame.header.type & kReplyBit) != 0) {
      if (passed_fd >= 0) ::close(passed_fd);
      why = "malformed frame: a reply type (" + std::to_string(s.frame.header.type) +
            ") sent as a request";
      level = LogLevel::kWarning;
      MutexLock l(mu_);
      ++stats_.bad_frames;
      break;
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    s.session_requests++;
    const bool keep = Handle(s, s.frame.header.type, s.frame.body);
    if (passed_fd >= 0) ::close(passed_fd);
    s.frame.passed_fd = -1;
    if (!keep) {
      why = s.end_reason.empty() ? "the reply could not be sent" : s.end_reason;
      if (s.malformed) {
        level = LogLevel::kWarning;
        MutexLock l(mu_);
        ++stats_.bad_frames;
      } else if (!s.goodbye) {
        level = LogLevel::kWarning;
      }
      break;
    }
    // Keep what a 128K-token lookup needs, not what the largest frame a client sent took (up
    // to the 32 MiB cap, times every session).
    constexpr size_t kKeepBytes = 2u << 20;
    if (s.frame.body.capacity() > kKeepBytes) std::vector<uint8_t>().swap(s.frame.body);
    for (std::vector<int32_t>* t : {&s.lookup.tokens, &s.claim.tokens, &s.reserve.tokens}) {
      if (t->capacity() > kKeepBytes / 4) std::vector<int32_t>().swap(*t);
    }
  }
  ::shutdown(s.fd, SHUT_RDWR);
  s.ReleaseMemory();
  // No longer a reader, though its leftovers may wait for its process to exit.
  s.ended.store(true, std::memory_order_relaxed);
  const bool wait_for_exit = !s.goodbye && s.HasLeftovers();
  {
    bool stopping = false;
    {
      MutexLock l(mu_);
      stopping = stopping_;
    }
    if (stopping && !s.goodbye) why = "the service is stopping";
  }
  Log(level, "store service: session " + std::to_string(s.id) + " (pid " +
                 std::to_string(s.peer.pid) + ", uid " + std::to_string(s.peer.uid) + ", " +
                 std::to_string(s.session_requests) + " requests) closed: " + why +
                 (wait_for_exit ? "; its tickets and reservations are reclaimed once its process "
                                  "has exited"
                                : ""));
  if (wait_for_exit) ReclaimAfterExit(s);
  Reclaim(s);  // a Goodbye session should hold nothing; whatever it left goes now
  if (s.gate_holder.has_value()) {
    const uint32_t holder = *s.gate_holder;
    s.gate_holder.reset();
    // After Goodbye the client drained its reads; after a crash its process is usually gone by
    // now or within moments. Otherwise the accept loop gives the index back once it is.
    const bool gone = s.goodbye || ProcessGone(s.peer.pid, std::chrono::milliseconds(50));
    MutexLock l(mu_);
    if (gone) {
      stats_.read_gate_marks_reclaimed += gate_->ReleaseHolder(holder);
    } else {
      pending_holders_.push_back({holder, s.peer.pid, Clock::now()});
    }
  }
  ::close(s.fd);
  s.done.store(true);
  const uint64_t one = 1;
  const ssize_t w = ::write(reap_fd_, &one, sizeof(one));  // the accept loop joins this thread
  (void)w;
}

void StoreService::ReclaimAfterExit(Session& s) {
  {
    MutexLock l(mu_);
    ++stats_.sessions_reclaimed;
  }
  int pidfd = -1;
  if (s.peer.pid > 0) pidfd = static_cast<int>(::syscall(SYS_pidfd_open, s.peer.pid, 0));
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.orphan_grace_ms);
  for (;;) {
    pollfd p[2] = {{stop_fd_, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int timeout_ms = 100;
    if (pidfd < 0) {
      if (s.peer.pid > 0 && ::kill(s.peer.pid, 0) != 0 && errno == ESRCH) break;
      if (s.peer.pid <= 0 && Clock::now() >= deadline) break;
    }
    const int n = ::poll(p, pidfd >= 0 ? 2 : 1, timeout_ms);
    if (n > 0 && p[0].revents != 0) break;                // stopping: reclaim now
    if (n > 0 && pidfd >= 0 && p[1].revents != 0) break;  // the process exited
  }
  if (pidfd >= 0) ::close(pidfd);
}

void StoreService::Reclaim(Session& s) {
  if (s.store == nullptr || !s.HasLeftovers()) return;
  StoreState& st = *s.store->state;
  Directory& d = st.directory();
  uint64_t tickets = 0, reservations = 0;
  for (const std::string& r : s.requests) {
    if (d.Cancel(r) == CancelOutcome::kCancelled) ++tickets;
  }
  for (uint64_t id : s.claimed) {
    if (d.Release(id).ok()) ++tickets;
  }
  for (auto& [id, records] : s.reservations) {
    if (st.integrity() != nullptr) st.integrity()->OnStoreAborted(id, records);
    if (d.Abort(id).ok()) ++reservations;
  }
  s.requests.clear();
  s.claimed.clear();
  s.reservations.clear();
  MutexLock l(mu_);
  stats_.tickets_reclaimed += tickets;
  stats_.reservations_reclaimed += reservations;
}

Status StoreService::HandleHello(Session& s, std::span<const uint8_t> body, int* pass_fd,
                                 std::vector<uint8_t>* reply) {
  HelloRequest h;
  RANGEKV_RETURN_IF_ERROR(Decode(body, &h));
  if (h.protocol != kProtocolVersion) {
    return Status(StatusCode::kWrongVersion,
                  "client speaks protocol " + std::to_string(h.protocol));
  }
  RANGEKV_RETURN_IF_ERROR(ValidateTenant(h.tenant));
  RANGEKV_RETURN_IF_ERROR(ValidatePackGeometry(h.geometry));
  const std::string key = h.tenant + "/" + h.ns.ToHex();
  Store* store = nullptr;
  {
    MutexLock l(mu_);
    if (stopping_) return Unavailable("store service stopping");
    auto it = stores_.find(key);
    if (it != stores_.end()) {
      store = it->second.get();
      if (!(store->state->geometry() == h.geometry)) {
        return Status(StatusCode::kGeometryMismatch,
                      "namespace " + key + " is stored with another geometry");
      }
    } else {
      uint64_t used = 0;
      for (const auto& [k, st] : stores_) {
        if (st->tenant == h.tenant) used += st->capacity_bytes;
      }
      auto q = options_.quotas.find(h.tenant);
      const uint64_t quota = q != options_.quotas.end() ? q->second : options_.default_quota_bytes;
      const uint64_t left = quota > used ? quota - used : 0;
      auto made = std::make_unique<Store>();
      made->key = key;
      made->tenant = h.tenant;
      const std::string tenant_dir = options_.root + "/" + h.tenant;
      made->dir = tenant_dir + "/" + h.ns.ToHex();
      // The store's capacity is the service's to decide, never the connecting client's: an
      // existing store keeps its pack file (the truth about its slots; a client that restarts
      // first with a smaller capacity_bytes must not shrink what the others stored), within
      // --store-capacity and the tenant's quota. Only a store created now is sized by the
      // client's ask (or --store-capacity), within the quota.
      const bool exists = env_->FileExists(persist::StorePaths(made->dir).pack());
      uint64_t want = left;
      if (options_.store_capacity_bytes > 0) want = std::min(want, options_.store_capacity_bytes);
      if (!exists && options_.store_capacity_bytes == 0 && h.capacity_bytes > 0) {
        want = std::min(want, h.capacity_bytes);
      }
      if (want < h.geometry.pack_bytes) {
        return ResourceExhausted("tenant " + h.tenant + ": quota of " + std::to_string(quota) +
                                 " bytes leaves no room for a pack of " +
                                 std::to_string(h.geometry.pack_bytes) + " bytes");
      }
      RANGEKV_RETURN_IF_ERROR(MakeDir(tenant_dir, options_.group_access ? 0750 : 0700));
      StoreStateOptions so;
      so.env = env_;
      so.dir = made->dir;
      so.geometry = h.geometry;
      so.ns = h.ns;
      so.pack_count = want / h.geometry.pack_bytes;  // for a new pack file
      so.capacity_bytes = so.pack_count * h.geometry.pack_bytes;
      so.direct = DirectIo::kPreferred;
      so.directory =
          DirectoryOptions::ForGeometry(h.geometry, static_cast<uint32_t>(so.pack_count));
      so.directory.max_query_tokens = kMaxTokensPerMessage;
      so.directory.max_tickets = 1u << 16;
      // As an engine's own store (EngineTuning::free_reserve_packs, auto): a reservation takes
      // a slot whose eviction is already durable, so Reserve's BeforeOverwrite does not wait.
      so.directory.free_reserve_packs = AutoFreeReservePacks(
          options_.journal.mode != persist::DurabilityMode::kNone, so.pack_count);
      so.digest_block_tokens = h.digest_block_tokens;
      so.permissions = options_.group_access ? persist::StorePermissions::Group()
                                             : persist::StorePermissions::Owner();
      so.journal = options_.journal;
      so.tenant = h.tenant;
      so.remote = options_.remote;
      so.holder = "rangekv serve";
      // The first client's identity record (the namespace hashes every field of it, so every
      // client of this namespace sends the same one).
      so.identity_record = h.identity;
      auto opened = StoreState::Open(so);
      if (!opened.ok()) return opened.status().WithContext("store service: store " + key);
      made->state = std::move(opened).value();
      made->capacity_bytes = std::min(so.capacity_bytes, made->state->pack_file().capacity_bytes());
      made->fence_until = made->state->created()
                              ? Clock::now()
                              : Clock::now() + std::chrono::milliseconds(options_.restart_fence_ms);
      const auto& rec = made->state->recovery();
      Log(LogLevel::kInfo,
          "store service: opened store " + key + " (" +
              std::to_string(made->state->pack_file().pack_count()) + " pack slots, capacity " +
              std::to_string(made->capacity_bytes) + " bytes, " + std::to_string(rec.packs_loaded) +
              " packs loaded" +
              (rec.packs_evicted_for_capacity > 0
                   ? ", " + std::to_string(rec.packs_evicted_for_capacity) +
                         " evicted to fit the capacity"
                   : std::string()) +
              (h.capacity_bytes != 0 && h.capacity_bytes != made->capacity_bytes
                   ? "; the client asked for " + std::to_string(h.capacity_bytes) + " bytes"
                   : std::string()) +
              ")");
      store = made.get();
      stores_[key] = std::move(made);
      stats_.stores_open = stores_.size();
    }
  }
  // The client's own descriptor for the pack file, opened here so the file's bits stay 0600.
  const std::string path = store->state->pack_file().path();
  bool direct = false;
  int fd = -1;
  if (h.direct) {
    fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    direct = fd >= 0;
  }
  if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Status(StatusCode::kIoError, "opening " + path + ": " + std::strerror(errno));
  }
  s.store = store;
  const auto& rec = store->state->recovery();
  HelloReply r;
  r.session_id = s.id;
  r.owner_epoch = store->state->directory().owner_epoch();
  r.pack_count = store->state->pack_file().pack_count();
  r.capacity_bytes = store->capacity_bytes;
  r.digest_block_tokens = store->state->integrity()->block_tokens();
  r.digest_seed = store->state->integrity()->digest_seed();
  r.direct = direct;
  r.loaded = rec.outcome == persist::RecoveryOutcome::kLoaded;
  r.recovery_reason = r.loaded ? "" : std::string(persist::DiscardReasonName(rec.reason));
  r.packs_loaded = rec.packs_loaded;
  r.store_dir = store->dir;
  r.every_publish = options_.journal.mode == persist::DurabilityMode::kEveryPublish;
  Encode(r, reply);
  *pass_fd = fd;
  return OkStatus();
}

bool StoreService::Handle(Session& s, uint16_t type, std::span<const uint8_t> body) {
  std::vector<uint8_t> out;
  const auto t = static_cast<MessageType>(type);
  if (t == MessageType::kHello) {
    if (s.store != nullptr) {
      const Status bad = FailedPrecondition("hello twice in one session");
      s.malformed = true;
      s.end_reason = "malformed: " + bad.ToString();
      Reply(s, type, bad, {});
      return false;
    }
    int fd = -1;
    Status st = HandleHello(s, body, &fd, &out);
    const bool sent = Reply(
        s, type, st, st.ok() ? std::span<const uint8_t>(out) : std::span<const uint8_t>(), fd);
    if (fd >= 0) ::close(fd);
    if (!st.ok()) s.end_reason = "hello refused: " + st.ToString();
    return sent && st.ok();
  }
  if (s.store == nullptr) {
    const Status bad = FailedPrecondition("the first message of a session must be hello");
    s.malformed = true;
    s.end_reason =
        "malformed: " + bad.ToString() + " (got " + std::string(MessageTypeName(type)) + ")";
    Reply(s, type, bad, {});
    return false;
  }
  // Validate the whole body before anything is applied. Lookups, claims and reservations are
  // decoded once, straight into the session's reused request, before anything is applied (a
  // second, validating decode of their token arrays cost a 512 KiB allocation and copy per
  // 128K-token request); a bad body ends the session the same way.
  auto bad_body = [&](const Status& v) {
    s.malformed = true;  // counted in bad_frames by RunSession
    s.end_reason = "malformed " + std::string(MessageTypeName(type)) + ": " + v.ToString();
    Reply(s, type, v, {});
    return false;
  };
  const bool decoded_in_place =
      t == MessageType::kLookup || t == MessageType::kClaim || t == MessageType::kReserve;
  if (!decoded_in_place) {
    if (Status v = DecodeRequestBody(type, body); !v.ok()) return bad_body(v);
  }
  StoreState& st = *s.store->state;
  Directory& d = st.directory();
  Status status;
  // A shared lookup / claim: its tokens, read where the client wrote them (its query buffer,
  // mapped read-only). The client may rewrite the buffer while the directory reads it; that
  // is safe for the service and for every other client: the lookup walk and the claim use token
  // values only in comparisons, a child lookup and digests, never as a size, an offset or an
  // index (RadixTree::Walk, TokenDigest), and the mapping cannot shrink (F_SEAL_SHRINK). Such
  // a client can only get a wrong answer for its own request, in its own namespace, whose pack
  // file it can read anyway. (Walking a copy instead cost one more 512 KiB pass per 128K-token
  // query: docs/store-service.md "Latency".)
  auto shared_tokens = [&](uint32_t count, std::vector<int32_t>* scratch,
                           std::span<const int32_t>* tokens) -> Status {
    if (s.query == nullptr) return FailedPrecondition("no query buffer attached to this session");
    if (uint64_t{count} * 4 > s.query_bytes) {
      return OutOfRange(std::to_string(count) + " tokens do not fit the " +
                        std::to_string(s.query_bytes) + "-byte query buffer");
    }
    shared_queries_.fetch_add(1, std::memory_order_relaxed);
    if constexpr (std::endian::native == std::endian::little) {
      // The mapping is page-aligned and the tokens start it: aligned int32 values.
      *tokens = {reinterpret_cast<const int32_t*>(s.query), count};
    } else {
      scratch->resize(count);
      for (uint32_t i = 0; i < count; ++i) {
        (*scratch)[i] = static_cast<int32_t>(coding::LoadU32(s.query + 4 * size_t{i}));
      }
      *tokens = *scratch;
    }
    return OkStatus();
  };
  switch (t) {
    case MessageType::kAttachQueryBuffer: {
      AttachQueryBufferRequest m;
      status = Decode(body, &m);
      if (status.ok()) status = AttachQueryBuffer(s, m.bytes);
      break;
    }
    case MessageType::kAttachReadGate: {
      AttachReadGateReply r;
      status = AttachReadGate(s, &r);
      if (!status.ok()) break;
      Encode(r, &out);
      return Reply(s, type, status, out, gate_->fd());  // the service keeps its descriptor
    }
    case MessageType::kLookupShared:
    case MessageType::kLookup: {
      LookupRequest& m = s.lookup;  // its token vector keeps its capacity
      std::span<const int32_t> tokens;
      if (t == MessageType::kLookupShared) {
        LookupSharedRequest h;
        if (Status v = Decode(body, &h); !v.ok()) return bad_body(v);
        FollowClientCpu(s, h.client_cpu);
        if (Status v = shared_tokens(h.token_count, &m.tokens, &tokens); !v.ok()) {
          return bad_body(v);
        }
        m.envelope = std::move(h.envelope);
        m.granularity_tokens = h.granularity_tokens;
      } else if (Status v = Decode(body, &m); !v.ok()) {
        return bad_body(v);
      } else {
        tokens = m.tokens;
      }
      status = WithPrefix(s.prefix, &m.envelope);
      if (!status.ok()) break;
      auto ticket = d.Lookup(st.ns(), tokens, m.envelope, m.granularity_tokens);
      if (!ticket.ok()) {
        status = ticket.status();
        break;
      }
      LookupReply r;
      if (!ticket->empty()) {
        r.ticket = EncodeTicket(*ticket);
        s.requests.insert(m.envelope.request_id);
        s.MarkReading(options_.reader_window_ms);  // a hit: its restore (or prefetch) follows
      }
      r.readers = Readers();
      Encode(r, &out);
      break;
    }
    case MessageType::kClaimShared:
    case MessageType::kClaim: {
      ClaimRequest& m = s.claim;
      std::span<const int32_t> tokens;
      if (t == MessageType::kClaimShared) {
        ClaimSharedRequest h;
        if (Status v = Decode(body, &h); !v.ok()) return bad_body(v);
        FollowClientCpu(s, h.client_cpu);
        if (Status v = shared_tokens(h.token_count, &m.tokens, &tokens); !v.ok()) {
          return bad_body(v);
        }
        m.ticket = std::move(h.ticket);
        m.envelope = std::move(h.envelope);
        m.endpoint_tokens = h.endpoint_tokens;
      } else if (Status v = Decode(body, &m); !v.ok()) {
        return bad_body(v);
      } else {
        tokens = m.tokens;
      }
      status = WithPrefix(s.prefix, &m.envelope);
      if (!status.ok()) break;
      auto claim = d.ClaimBytes(st.ns(), m.ticket, m.envelope, tokens, m.endpoint_tokens);
      if (!claim.ok()) {
        status = claim.status();
        break;
      }
      s.claimed.insert(claim->ticket_id);
      s.requests.erase(m.envelope.request_id);
      s.MarkReading(options_.reader_window_ms);
      Encode(ClaimReply{*claim, Readers()}, &out);
      break;
    }
    case MessageType::kRelease: {
      IdMessage m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      if (s.claimed.count(m.id) == 0) {
        status = NotFound("ticket " + std::to_string(m.id) + " is not claimed by this session");
        break;
      }
      status = d.Release(m.id);
      s.claimed.erase(m.id);
      s.MarkReading(options_.reader_window_ms);  // the window runs from the end of its last restore
      break;
    }
    case MessageType::kCancel: {
      CancelRequest m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      Envelope e;
      e.request_id = m.request_id;
      status = WithPrefix(s.prefix, &e);
      if (!status.ok()) break;
      CancelReply r{d.Cancel(e.request_id)};
      s.requests.erase(e.request_id);
      Encode(r, &out);
      break;
    }
    case MessageType::kReserve: {
      ReserveRequest& m = s.reserve;
      if (Status v = Decode(body, &m); !v.ok()) return bad_body(v);
      if (Clock::now() < s.store->fence_until) {
        status = Unavailable("store service: restart fence (stores resume shortly)");
        break;
      }
      auto r = d.Reserve(st.ns(), m.tokens);
      if (!r.ok()) {
        status = r.status();
        break;
      }
      if (r->outcome == ReserveOutcome::kReserved) {
        // Before the client writes a byte: the dirty marker, and the durable removal of every
        // slot's previous pack (what StoreIntegrity does per span in embedded mode).
        status = st.integrity()->BeforeFirstWrite(r->reservation_id);
        for (const PackRecord& rec : r->records) {
          if (!status.ok()) break;
          if (persist::JournalWriter* j = st.journal(); j != nullptr) {
            status = j->BeforeOverwrite(rec.pack_slot);
          }
        }
        if (!status.ok()) {
          Status aborted = d.Abort(r->reservation_id);
          aborted.IgnoreError();
          break;
        }
        s.reservations[r->reservation_id] = r->records;
      }
      Encode(ReserveReply{*r}, &out);
      break;
    }
    case MessageType::kPublish: {
      PublishRequest m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      auto it = s.reservations.find(m.reservation_id);
      if (it == s.reservations.end()) {
        status =
            NotFound("reservation " + std::to_string(m.reservation_id) + " is not this session's");
        break;
      }
      const std::vector<PackRecord> records = it->second;
      persist::DigestTable& digests = st.digests();
      for (const LayerDigests& l : m.layers) {
        bool named = false;
        for (const PackRecord& r : records) {
          named = named || (r.pack_slot == l.slot && r.generation == l.generation &&
                            r.tokens == l.stored_tokens);
        }
        if (!named) {
          status = InvalidArgument("publish: digests of slot " + std::to_string(l.slot) +
                                   " generation " + std::to_string(l.generation) +
                                   " that the reservation does not hold");
          break;
        }
        status = digests.Begin(l.slot, l.generation, l.stored_tokens);
        if (status.ok()) status = digests.RecordLayer(l.slot, l.generation, l.layer, l.digests);
        if (!status.ok()) break;
      }
      if (status.ok()) status = st.integrity()->BeforePublish(m.reservation_id, records);
      if (status.ok()) {
        status = d.Publish(m.reservation_id);
        if (!status.ok()) st.integrity()->OnStoreAborted(m.reservation_id, records);
      } else {
        st.integrity()->OnStoreAborted(m.reservation_id, records);
        Status aborted = d.Abort(m.reservation_id);
        aborted.IgnoreError();
      }
      s.reservations.erase(m.reservation_id);
      break;
    }
    case MessageType::kAbort: {
      IdMessage m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      auto it = s.reservations.find(m.id);
      if (it == s.reservations.end()) {
        status = NotFound("reservation " + std::to_string(m.id) + " is not this session's");
        break;
      }
      st.integrity()->OnStoreAborted(m.id, it->second);
      status = d.Abort(m.id);
      s.reservations.erase(it);
      break;
    }
    case MessageType::kInFlight: {
      IdMessage m;
      status = Decode(body, &m);
      if (status.ok()) Encode(InFlightReply{d.IsInFlight(m.id)}, &out);
      break;
    }
    case MessageType::kAwaitDurable: {
      IdMessage m;
      status = Decode(body, &m);
      if (status.ok()) status = st.AwaitDurable(m.id);
      break;
    }
    case MessageType::kGetDigests: {
      PackRef m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      auto p = st.digests().Get(m.slot, m.generation);
      if (!p.ok()) {
        status = p.status();
        break;
      }
      DigestsReply r;
      r.stored_tokens = p->stored_tokens;
      r.layers = p->layers;
      r.blocks_per_layer = p->blocks_per_layer;
      r.digests = std::move(p->digests);
      Encode(r, &out);
      break;
    }
    case MessageType::kCorrupt: {
      PackRef m;
      status = Decode(body, &m);
      if (!status.ok()) break;
      if (m.slot >= st.pack_file().pack_count()) {
        status = InvalidArgument("slot " + std::to_string(m.slot) + " out of range");
        break;
      }
      Span span;
      span.pack_slot = m.slot;
      span.generation = m.generation;
      st.integrity()->OnCorruption(span);
      break;
    }
    case MessageType::kStats:
      Encode(StatsReply{d.Stats()}, &out);
      break;
    case MessageType::kGoodbye:
      s.goodbye = true;
      s.end_reason = "goodbye";
      Reply(s, type, OkStatus(), {});
      return false;
    case MessageType::kHello:
      break;  // handled above
  }
  return Reply(s, type, status, out);
}

void StoreService::FollowClientCpu(Session& s, uint32_t cpu) {
  if (!options_.follow_client_cpu || cpu == kUnknownCpu || cpu == s.cpu) return;
  if (!s.allowed_known || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &s.allowed)) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  // A failure (the CPU went offline, a cpuset changed under us) only costs the cache misses.
  if (::pthread_setaffinity_np(::pthread_self(), sizeof(one), &one) != 0) return;
  s.cpu = cpu;
  client_cpu_moves_.fetch_add(1, std::memory_order_relaxed);
}

Status StoreService::AttachReadGate(Session& s, AttachReadGateReply* reply) {
  if (gate_ == nullptr) {
    return NotFound("this store service runs without a read gate (rangekv serve --read-slots)");
  }
  if (!s.gate_holder.has_value()) {
    MutexLock l(mu_);
    RANGEKV_ASSIGN_OR_RETURN(const uint32_t holder, gate_->AcquireHolder());
    s.gate_holder = holder;
    ++stats_.read_gate_sessions;
  }
  reply->holder = *s.gate_holder;
  reply->slots = gate_->slots();
  return OkStatus();
}

Status StoreService::AttachQueryBuffer(Session& s, uint64_t bytes) {
  const int fd = s.frame.passed_fd;
  if (s.query != nullptr) return FailedPrecondition("a query buffer is already attached");
  if (fd < 0) return InvalidArgument("attach_query_buffer: no descriptor came with the message");
  struct stat sb;
  if (::fstat(fd, &sb) != 0) return ErrnoStatus(errno, "attach_query_buffer: fstat");
  if (!S_ISREG(sb.st_mode) || static_cast<uint64_t>(sb.st_size) != bytes) {
    return InvalidArgument("attach_query_buffer: the descriptor is not a regular file of " +
                           std::to_string(bytes) + " bytes");
  }
  // Without the shrink seal the client could truncate the file under the mapping, and the
  // service's next read of it would die of SIGBUS.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return InvalidArgument(
        "attach_query_buffer: the buffer must be a memfd sealed against "
        "shrinking (F_SEAL_SHRINK)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, "attach_query_buffer: mmap");
  s.query = static_cast<const uint8_t*>(p);
  s.query_bytes = bytes;
  return OkStatus();
}

Status StoreService::Stop() {
  {
    MutexLock l(mu_);
    if (stopping_) {
      stopped_cv_.Wait(l, [&]() REQUIRES(mu_) { return stopped_; });
      return stop_status_;
    }
    stopping_ = true;
  }
  const uint64_t one = 1;
  if (stop_fd_ >= 0) {
    const ssize_t w = ::write(stop_fd_, &one, sizeof(one));
    (void)w;
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  std::map<uint64_t, std::unique_ptr<Session>> sessions;
  {
    MutexLock l(mu_);
    sessions.swap(sessions_);
  }
  for (auto& [id, s] : sessions) ::shutdown(s->fd, SHUT_RDWR);
  for (auto& [id, s] : sessions) s->thread.join();
  Status first;
  std::map<std::string, std::unique_ptr<Store>> stores;
  {
    MutexLock l(mu_);
    stores.swap(stores_);
  }
  for (auto& [key, store] : stores) {
    Status c = store->state->Close();
    if (!c.ok() && first.ok()) first = c.WithContext("closing store " + key);
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (reap_fd_ >= 0) ::close(reap_fd_);
  listen_fd_ = stop_fd_ = reap_fd_ = -1;
  root_lock_.reset();  // every store is closed: the root may have a new service
  Log(LogLevel::kInfo, "store service: stopped");
  MutexLock l(mu_);
  stop_status_ = first;
  stopped_ = true;
  stats_.stores_open = 0;
  stopped_cv_.NotifyAll();
  return first;
}

void StoreService::Wait() {
  MutexLock l(mu_);
  stopped_cv_.Wait(l, [&]() REQUIRES(mu_) { return stopped_; });
}

ServiceStats StoreService::stats() const {
  MutexLock l(mu_);
  ServiceStats s = stats_;
  s.sessions_active = sessions_.size();
  s.readers = CountReadersLocked();
  s.requests = requests_.load(std::memory_order_relaxed);
  s.shared_queries = shared_queries_.load(std::memory_order_relaxed);
  s.client_cpu_moves = client_cpu_moves_.load(std::memory_order_relaxed);
  if (gate_ != nullptr) {
    s.read_gate_slots = gate_->slots();
    s.read_gate_outstanding = gate_->outstanding();
    s.read_gate_holders = gate_->holders_in_use();
    s.read_gate_holders_waiting = pending_holders_.size();
  }
  return s;
}

}  // namespace rangekv::service
