#include "store/service_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/log.h"
#include "env/posix_env.h"
#include "service_proto/unix_socket.h"
#include "store/table_integrity.h"

namespace rangekv::store {

namespace {

using service::MessageType;

// The CPU this thread runs on now, for a shared query (LookupSharedRequest::client_cpu): the
// tokens it just wrote into the query buffer are in that CPU's cache.
uint32_t CallerCpu() {
  const int cpu = ::sched_getcpu();
  return cpu >= 0 ? static_cast<uint32_t>(cpu) : service::kUnknownCpu;
}

// An Env whose OpenFile hands out the descriptor the service passed, once, for the pack path
// (so PackFile::Open validates the header exactly as for a file it opened itself).
class PassedFileEnv final : public EnvWrapper {
 public:
  PassedFileEnv(std::string path, std::unique_ptr<File> file)
      : EnvWrapper(DefaultEnv()), path_(std::move(path)), file_(std::move(file)) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    if (path == path_ && file_ != nullptr) return std::move(file_);
    return EnvWrapper::OpenFile(path, options);
  }

 private:
  std::string path_;
  std::unique_ptr<File> file_;
};

Status FileIdentity(int fd, uint64_t* dev, uint64_t* ino) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status(StatusCode::kIoError, "fstat of the pack file");
  *dev = st.st_dev;
  *ino = st.st_ino;
  return OkStatus();
}

}  // namespace

ServiceStore::ServiceStore(const ServiceStoreOptions& options) : options_(options) {}

ServiceStore::~ServiceStore() { Close(); }

Result<std::unique_ptr<ServiceStore>> ServiceStore::Connect(const ServiceStoreOptions& o) {
  std::unique_ptr<ServiceStore> s(new ServiceStore(o));
  RANGEKV_ASSIGN_OR_RETURN(s->socket_path_, service::SocketPathFromAddress(o.address));
  int fd = -1;
  {
    MutexLock l(s->call_mu_);
    RANGEKV_ASSIGN_OR_RETURN(fd, s->Handshake(&s->hello_));
  }
  const std::string name = "service:" + s->hello_.store_dir + "/packs.rkv";
  Status id = FileIdentity(fd, &s->pack_dev_, &s->pack_ino_);
  if (!id.ok()) {
    ::close(fd);
    return id;
  }
  PassedFileEnv env(name, AdoptFileDescriptor(fd, name));
  PackExpectation expect;
  expect.geometry = o.geometry;
  expect.namespace_id = o.ns;
  PackOpenOptions open;
  open.direct = s->hello_.direct ? DirectIo::kPreferred : DirectIo::kOff;
  auto pack = PackFile::Open(&env, name, expect, open);
  if (!pack.ok()) return pack.status().WithContext("pack file passed by the store service");
  s->pack_ = std::make_unique<PackFile>(std::move(pack).value());
  RANGEKV_ASSIGN_OR_RETURN(
      const persist::DigestGeometry dg,
      persist::DigestGeometry::ForGeometry(o.geometry, s->hello_.digest_block_tokens));
  const uint64_t slots = s->pack_->pack_count();
  RANGEKV_ASSIGN_OR_RETURN(s->digests_,
                           persist::DigestTable::Create(dg, static_cast<uint32_t>(slots)));
  s->generations_ = std::vector<std::atomic<uint64_t>>(slots);
  s->dropped_ = DroppedGenerations(slots);
  for (auto& g : s->generations_) g.store(GenerationView::kNoGeneration);
  Log(LogLevel::kInfo, "store service " + s->socket_path_ + ": session " +
                           std::to_string(s->hello_.session_id) + ", store " + s->hello_.store_dir +
                           " (" + std::to_string(slots) + " packs, " +
                           std::to_string(s->hello_.packs_loaded) + " loaded)");
  return s;
}

Result<int> ServiceStore::Handshake(service::HelloReply* reply) {
  RANGEKV_ASSIGN_OR_RETURN(const int fd, service::ConnectUnix(socket_path_));
  // A service that stops answering (or reading) fails a call after call_timeout instead of
  // blocking it for ever.
  if (Status t = service::SetIoTimeout(fd, options_.call_timeout); !t.ok()) {
    ::close(fd);
    return t;
  }
  service::HelloRequest h;
  h.geometry = options_.geometry;
  h.ns = options_.ns;
  h.tenant = options_.tenant;
  h.capacity_bytes = options_.capacity_bytes;
  h.direct = options_.direct;
  h.digest_block_tokens = options_.digest_block_tokens;
  h.pid = static_cast<uint32_t>(::getpid());
  h.identity = options_.identity_record;
  std::vector<uint8_t> body;
  service::Encode(h, &body);
  auto fail = [&](Status s) {
    ::close(fd);
    return s;
  };
  Status sent = service::SendFrame(fd, static_cast<uint16_t>(MessageType::kHello), body);
  if (!sent.ok()) {
    // A service that refuses a connection (peer credentials, too many sessions) replies at
    // accept and closes; when that close came first, the hello fails with EPIPE/ECONNRESET
    // (kUnavailable) but the refusal is still queued here: report it rather than the pipe.
    if (sent.code() == StatusCode::kUnavailable) {
      auto refusal = service::ReceiveFrame(fd);
      if (refusal.ok()) {
        if (refusal->passed_fd >= 0) ::close(refusal->passed_fd);
        Status remote;
        std::span<const uint8_t> rest;
        if (service::DecodeStatus(refusal->body, &remote, &rest).ok() && !remote.ok()) {
          return fail(remote.WithContext("store service"));
        }
      }
    }
    return fail(sent.WithContext("store service hello"));
  }
  auto frame = service::ReceiveFrame(fd, std::chrono::steady_clock::now() + options_.call_timeout);
  if (!frame.ok()) return fail(frame.status().WithContext("store service hello"));
  Status remote;
  std::span<const uint8_t> rest;
  Status decoded = service::DecodeStatus(frame->body, &remote, &rest);
  if (decoded.ok() && remote.ok()) decoded = service::Decode(rest, reply);
  if (!decoded.ok() || !remote.ok() || frame->passed_fd < 0) {
    if (frame->passed_fd >= 0) ::close(frame->passed_fd);
    if (!remote.ok()) return fail(remote.WithContext("store service"));
    if (!decoded.ok()) return fail(decoded);
    return fail(Status(StatusCode::kCorruption, "store service hello: no pack file descriptor"));
  }
  fd_ = fd;
  last_reply_ = std::chrono::steady_clock::now();
  {
    MutexLock l(mu_);
    connected_ = true;
    session_ = reply->session_id;
  }
  AttachQueryBuffer();
  AttachReadGate();
  return frame->passed_fd;
}

void ServiceStore::AttachQueryBuffer() {
  query_attached_ = false;
  if constexpr (std::endian::native != std::endian::little) return;  // tokens go inline
  constexpr uint64_t kBytes = service::kMaxQueryBufferBytes;
  Status s = OkStatus();
  if (query_fd_ < 0) {
    // Pages are allocated as a query first touches them (a 128K-token query: 512 KiB). Sealed
    // against shrinking and growing, so the service may map it without risking SIGBUS.
    const int fd = ::memfd_create("rangekv-query", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void* p = MAP_FAILED;
    if (fd < 0) {
      s = ErrnoStatus(errno, "memfd_create");
    } else if (::ftruncate(fd, static_cast<off_t>(kBytes)) != 0) {
      s = ErrnoStatus(errno, "ftruncate of the query buffer");
    } else if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      s = ErrnoStatus(errno, "sealing the query buffer");
    } else if ((p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
               MAP_FAILED) {
      s = ErrnoStatus(errno, "mmap of the query buffer");
    }
    if (s.ok()) {
      query_fd_ = fd;
      query_ = static_cast<uint8_t*>(p);
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
  if (s.ok()) {
    std::vector<uint8_t> body, out;
    service::Encode(service::AttachQueryBufferRequest{kBytes}, &body);
    s = CallLocked(MessageType::kAttachQueryBuffer, body, &out, {}, query_fd_);
  }
  query_attached_ = s.ok();
  if (!s.ok() && !query_warned_) {
    query_warned_ = true;
    Log(LogLevel::kWarning, "store service " + socket_path_ + ": no shared query buffer (" +
                                s.ToString() + "); queries travel over the socket");
  }
}

void ServiceStore::AttachReadGate() {
  if (!options_.read_gate) return;
  std::vector<uint8_t> out;
  int fd = -1;
  Status s = CallLocked(MessageType::kAttachReadGate, {}, &out, {}, -1, &fd);
  service::AttachReadGateReply reply;
  if (s.ok()) s = service::Decode(out, &reply);
  if (s.ok() && fd < 0) s = Status(StatusCode::kCorruption, "no read gate page passed");
  std::shared_ptr<service::SharedReadGate> gate;
  if (s.ok()) {
    // Takes fd; the slot count obeyed is the service's reply, checked against the page.
    auto attached = service::SharedReadGate::Attach(fd, reply.holder, reply.slots);
    fd = -1;
    if (attached.ok()) {
      gate = std::move(attached).value();
    } else {
      s = attached.status();
    }
  }
  if (fd >= 0) ::close(fd);
  {
    MutexLock l(mu_);
    gate_ = gate;
  }
  gate_generation_.fetch_add(1, std::memory_order_acq_rel);
  if (gate != nullptr) {
    Log(LogLevel::kDebug, "store service " + socket_path_ + ": read gate of " +
                              std::to_string(gate->slots()) + " slots, holder " +
                              std::to_string(gate->holder()));
  } else if (!gate_warned_) {
    gate_warned_ = true;
    // A service run with --read-slots 0 answers kNotFound: a choice, not a fault (a lost or
    // unreachable service is kUnavailable, and warned of).
    Log(s.code() == StatusCode::kNotFound ? LogLevel::kInfo : LogLevel::kWarning,
        "store service " + socket_path_ + ": no read gate (" + s.ToString() +
            "); this engine's reads go ungated");
  }
}

std::shared_ptr<service::SharedReadGate> ServiceStore::read_gate() const {
  MutexLock l(mu_);
  return gate_;
}

Status ServiceStore::CallWithTokens(MessageType inline_type, std::span<const uint8_t> body,
                                    std::span<const uint8_t> tail, MessageType shared_type,
                                    std::span<const uint8_t> shared_body,
                                    std::span<const int32_t> tokens,
                                    std::vector<uint8_t>* payload) {
  MutexLock c(call_mu_);
  if (fd_ >= 0 && query_attached_ && tokens.size_bytes() <= service::kMaxQueryBufferBytes) {
    // One request is on the wire at a time (call_mu_), so the buffer is this call's until the
    // reply. (A reconnect inside CallLocked attaches the same buffer to the new session.)
    if (!tokens.empty()) std::memcpy(query_, tokens.data(), tokens.size_bytes());
    return CallLocked(shared_type, shared_body, payload);
  }
  return CallLocked(inline_type, body, payload, tail);
}

bool ServiceStore::connected() const {
  MutexLock l(mu_);
  return connected_;
}

void ServiceStore::LoseConnection(const Status& why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  query_attached_ = false;  // the next session attaches it again
  next_attempt_ = std::chrono::steady_clock::now() + options_.reconnect_interval;
  MutexLock l(mu_);
  if (!connected_) return;
  connected_ = false;
  orphans_.insert(reservations_.begin(), reservations_.end());
  reservations_.clear();
  claimed_.clear();
  pending_.clear();
  Log(LogLevel::kWarning, "store service " + socket_path_ + ": connection lost (" + why.ToString() +
                              "); requests fail until it is back");
}

void ServiceStore::NoticeServiceHangup() {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;  // nothing came: the session is alive
  // Between requests the service sends nothing; readable means it closed the session.
  bool held = false;
  {
    MutexLock l(mu_);
    held = !reservations_.empty() || !claimed_.empty();
  }
  LoseConnection(Unavailable("the service ended the session (idle, or stopping)"));
  if (!held) next_attempt_ = std::chrono::steady_clock::now();  // nothing was in flight
}

Status ServiceStore::CallLocked(MessageType type, std::span<const uint8_t> body,
                                std::vector<uint8_t>* payload, std::span<const uint8_t> tail,
                                int pass_fd, int* received_fd) {
  if (received_fd != nullptr) *received_fd = -1;
  if (closed_) return FailedPrecondition("store service connection closed");
  // Only after a quiet spell (the service closes sessions idle for minutes): back-to-back
  // calls pay no poll.
  if (fd_ >= 0 && std::chrono::steady_clock::now() - last_reply_ > std::chrono::seconds(1)) {
    NoticeServiceHangup();
  }
  if (fd_ < 0) {
    {
      MutexLock l(mu_);
      if (!orphans_.empty()) {
        return Unavailable("store service lost; " + std::to_string(orphans_.size()) +
                           " stores of the lost session still settling");
      }
    }
    if (std::chrono::steady_clock::now() < next_attempt_) {
      return Unavailable("store service " + socket_path_ + " unreachable");
    }
    service::HelloReply reply;
    auto fd = Handshake(&reply);
    if (!fd.ok()) {
      next_attempt_ = std::chrono::steady_clock::now() + options_.reconnect_interval;
      return Unavailable("store service " + socket_path_ + ": " + fd.status().ToString());
    }
    uint64_t dev = 0, ino = 0;
    Status id = FileIdentity(*fd, &dev, &ino);
    ::close(*fd);  // the engine keeps the descriptor of its first session
    if (!id.ok() || dev != pack_dev_ || ino != pack_ino_ || reply.pack_count != hello_.pack_count) {
      LoseConnection(Status(StatusCode::kWrongStore, "pack file replaced"));
      closed_ = true;
      return Status(StatusCode::kWrongStore,
                    "store service " + socket_path_ +
                        ": the store's pack file was replaced; reopen the engine");
    }
    Log(LogLevel::kInfo, "store service " + socket_path_ + ": reconnected, session " +
                             std::to_string(reply.session_id));
  }
  Status sent = service::SendFrame(fd_, static_cast<uint16_t>(type), body, pass_fd, tail);
  if (!sent.ok()) {
    LoseConnection(sent);
    return Unavailable("store service: " + sent.ToString());
  }
  service::SpinUntilReadable(fd_, options_.reply_spin);
  auto frame = service::ReceiveFrame(fd_, std::chrono::steady_clock::now() + options_.call_timeout);
  if (!frame.ok()) {
    LoseConnection(frame.status());
    return Unavailable("store service: " + frame.status().ToString());
  }
  last_reply_ = std::chrono::steady_clock::now();
  // A passed descriptor is the caller's only when it asked for one and the call succeeded.
  int passed = frame->passed_fd;
  struct CloseUnlessTaken {
    int* fd;
    ~CloseUnlessTaken() {
      if (*fd >= 0) ::close(*fd);
    }
  } close_passed{&passed};
  if (frame->header.type != (static_cast<uint16_t>(type) | service::kReplyBit)) {
    const Status bad(StatusCode::kCorruption, "store service replied to another request");
    LoseConnection(bad);
    return bad;
  }
  Status remote;
  std::span<const uint8_t> rest;
  Status decoded = service::DecodeStatus(frame->body, &remote, &rest);
  if (!decoded.ok()) {
    LoseConnection(decoded);
    return decoded;
  }
  if (!remote.ok()) return remote;
  payload->assign(rest.begin(), rest.end());
  if (received_fd != nullptr) std::swap(*received_fd, passed);
  return OkStatus();
}

Status ServiceStore::Call(MessageType type, std::span<const uint8_t> body,
                          std::vector<uint8_t>* payload, std::span<const uint8_t> tail) {
  MutexLock l(call_mu_);
  return CallLocked(type, body, payload, tail);
}

void ServiceStore::Close() {
  MutexLock c(call_mu_);
  if (closed_) return;
  if (fd_ >= 0) {
    std::vector<uint8_t> none;
    Status s = CallLocked(MessageType::kGoodbye, {}, &none);
    s.IgnoreError();
  }
  closed_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (query_ != nullptr) ::munmap(query_, service::kMaxQueryBufferBytes);
  if (query_fd_ >= 0) ::close(query_fd_);
  query_ = nullptr;
  query_fd_ = -1;
  query_attached_ = false;
  MutexLock l(mu_);
  connected_ = false;
}

void ServiceStore::Learn(std::span<const PackRecord> records) {
  for (const PackRecord& r : records) {
    if (r.pack_slot < generations_.size()) {
      generations_[r.pack_slot].store(r.generation, std::memory_order_release);
    }
  }
}

uint64_t ServiceStore::CurrentGeneration(uint32_t slot) const {
  if (slot >= generations_.size()) return kNoGeneration;
  return generations_[slot].load(std::memory_order_acquire);
}

// ---- store side ---------------------------------------------------------------------------------

Result<Reservation> ServiceStore::Reserve(const NamespaceId& ns, std::span<const int32_t> tokens) {
  if (!(ns == options_.ns)) return Status(StatusCode::kNamespaceMismatch, "reserve: namespace");
  std::vector<uint8_t> body, out;
  const std::span<const uint8_t> tail = service::EncodeReserveHead(tokens, &body);
  MutexLock c(call_mu_);
  RANGEKV_RETURN_IF_ERROR(CallLocked(MessageType::kReserve, body, &out, tail));
  service::ReserveReply r;
  RANGEKV_RETURN_IF_ERROR(service::Decode(out, &r));
  Learn(r.reservation.records);
  MutexLock l(mu_);
  ++counters_.reservations;
  if (r.reservation.outcome == ReserveOutcome::kReserved) {
    reservations_.insert(r.reservation.reservation_id);
  }
  return std::move(r.reservation);
}

Status ServiceStore::Publish(uint64_t reservation_id) {
  service::PublishRequest m;
  m.reservation_id = reservation_id;
  MutexLock c(call_mu_);
  {
    MutexLock l(mu_);
    if (orphans_.erase(reservation_id) != 0) {
      pending_.erase(reservation_id);
      return Unavailable("store service lost before the publication");
    }
    if (reservations_.count(reservation_id) == 0) {
      return NotFound("reservation " + std::to_string(reservation_id));
    }
    auto it = pending_.find(reservation_id);
    if (it != pending_.end()) {
      m.layers = std::move(it->second);
      pending_.erase(it);
    }
  }
  std::vector<uint8_t> body, out;
  service::Encode(m, &body);
  Status s = CallLocked(MessageType::kPublish, body, &out);
  MutexLock l(mu_);
  reservations_.erase(reservation_id);
  orphans_.erase(reservation_id);  // lost during this very call
  if (s.ok()) ++counters_.publications;
  return s;
}

Status ServiceStore::Abort(uint64_t reservation_id) {
  MutexLock c(call_mu_);
  {
    MutexLock l(mu_);
    pending_.erase(reservation_id);
    if (orphans_.erase(reservation_id) != 0) return OkStatus();  // the service reclaims it
    if (reservations_.count(reservation_id) == 0) {
      return NotFound("reservation " + std::to_string(reservation_id));
    }
  }
  std::vector<uint8_t> body, out;
  service::Encode(service::IdMessage{reservation_id}, &body);
  Status s = CallLocked(MessageType::kAbort, body, &out);
  bool reclaimed = false;
  {
    MutexLock l(mu_);
    reservations_.erase(reservation_id);
    orphans_.erase(reservation_id);
    ++counters_.aborts;
    reclaimed = s.code() == StatusCode::kUnavailable && !connected_;
  }
  if (!reclaimed) return s;
  // The connection was lost during this call (LoseConnection warned of it): the service
  // reclaims every reservation of a lost session, so the abort stands all the same.
  Log(LogLevel::kInfo,
      "store service " + socket_path_ + ": abort of reservation " + std::to_string(reservation_id) +
          " left to the service's reclaim of the lost session (" + s.ToString() + ")");
  return OkStatus();
}

bool ServiceStore::IsInFlight(uint64_t reservation_id) const {
  std::vector<uint8_t> body, out;
  service::Encode(service::IdMessage{reservation_id}, &body);
  auto* self = const_cast<ServiceStore*>(this);
  if (!self->Call(MessageType::kInFlight, body, &out).ok()) return false;
  service::InFlightReply r;
  return service::Decode(out, &r).ok() && r.in_flight;
}

Status ServiceStore::AwaitDurable(uint64_t reservation_id) {
  std::vector<uint8_t> body, out;
  service::Encode(service::IdMessage{reservation_id}, &body);
  return Call(MessageType::kAwaitDurable, body, &out);
}

// ---- read side ----------------------------------------------------------------------------------

Result<Ticket> ServiceStore::Lookup(const NamespaceId& ns, std::span<const int32_t> tokens,
                                    const Envelope& envelope, uint64_t granularity_tokens) {
  if (!(ns == options_.ns)) return Status(StatusCode::kNamespaceMismatch, "lookup: namespace");
  // The query's tokens go from where they lie (the frame's tail), not through a copy.
  std::vector<uint8_t> body, out;
  const std::span<const uint8_t> tail =
      service::EncodeLookupHead(envelope, granularity_tokens, tokens, &body);
  std::vector<uint8_t> shared;
  service::Encode(service::LookupSharedRequest{envelope, granularity_tokens,
                                               static_cast<uint32_t>(tokens.size()), CallerCpu()},
                  &shared);
  RANGEKV_RETURN_IF_ERROR(CallWithTokens(MessageType::kLookup, body, tail,
                                         MessageType::kLookupShared, shared, tokens, &out));
  service::LookupReply r;
  RANGEKV_RETURN_IF_ERROR(service::Decode(out, &r));
  readers_.store(std::clamp<uint32_t>(r.readers, 1, kMaxReaders), std::memory_order_relaxed);
  Ticket ticket;
  if (!r.ticket.empty()) {
    RANGEKV_ASSIGN_OR_RETURN(ticket, DecodeTicket(r.ticket));
    Learn(ticket.records);
  }
  MutexLock l(mu_);
  ++counters_.lookups;
  if (!ticket.empty()) {
    ++counters_.lookup_hits;
    ++counters_.tickets_issued;
    counters_.records_selected += ticket.records.size();
    counters_.leases_taken += ticket.records.size();
  }
  return ticket;
}

Result<ClaimedRange> ServiceStore::ClaimBytes(const NamespaceId& ns,
                                              std::span<const uint8_t> ticket_bytes,
                                              const Envelope& envelope,
                                              std::span<const int32_t> tokens,
                                              uint64_t endpoint_tokens) {
  if (!(ns == options_.ns)) {
    return Status(StatusCode::kNamespaceMismatch, "claim: namespace of another store");
  }
  std::vector<uint8_t> body, out;
  const std::span<const uint8_t> tail =
      service::EncodeClaimHead(ticket_bytes, envelope, endpoint_tokens, tokens, &body);
  std::vector<uint8_t> shared;
  service::Encode(
      service::ClaimSharedRequest{std::vector<uint8_t>(ticket_bytes.begin(), ticket_bytes.end()),
                                  envelope, endpoint_tokens, static_cast<uint32_t>(tokens.size()),
                                  CallerCpu()},
      &shared);
  Status s = CallWithTokens(MessageType::kClaim, body, tail, MessageType::kClaimShared, shared,
                            tokens, &out);
  MutexLock l(mu_);
  ++counters_.claims;
  if (!s.ok()) {
    ++counters_.claim_failures;
    return s;
  }
  service::ClaimReply r;
  RANGEKV_RETURN_IF_ERROR(service::Decode(out, &r));
  readers_.store(std::clamp<uint32_t>(r.readers, 1, kMaxReaders), std::memory_order_relaxed);
  claimed_.insert(r.claim.ticket_id);
  for (const PackRecord& rec : r.claim.records) {
    if (rec.pack_slot < generations_.size()) {
      generations_[rec.pack_slot].store(rec.generation, std::memory_order_release);
    }
  }
  return std::move(r.claim);
}

Status ServiceStore::Release(uint64_t ticket_id) {
  {
    MutexLock l(mu_);
    // A ticket of a lost session: the service reclaims its leases.
    if (claimed_.erase(ticket_id) == 0) return OkStatus();
    ++counters_.releases;
  }
  std::vector<uint8_t> body, out;
  service::Encode(service::IdMessage{ticket_id}, &body);
  Status s = Call(MessageType::kRelease, body, &out);
  if (s.code() != StatusCode::kUnavailable) return s;
  {
    MutexLock l(mu_);
    if (connected_) return s;  // the service itself answered kUnavailable: the lease stays
  }
  // The connection was lost during this call (LoseConnection warned of it): the service
  // reclaims every lease of a lost session, so the release stands all the same.
  Log(LogLevel::kInfo,
      "store service " + socket_path_ + ": release of ticket " + std::to_string(ticket_id) +
          " left to the service's reclaim of the lost session (" + s.ToString() + ")");
  return OkStatus();
}

CancelOutcome ServiceStore::Cancel(std::string_view request_id) {
  service::CancelRequest m;
  m.request_id = std::string(request_id);
  std::vector<uint8_t> body, out;
  service::Encode(m, &body);
  if (!Call(MessageType::kCancel, body, &out).ok()) return CancelOutcome::kNoTicket;
  service::CancelReply r;
  if (!service::Decode(out, &r).ok()) return CancelOutcome::kNoTicket;
  MutexLock l(mu_);
  if (r.outcome == CancelOutcome::kCancelled) ++counters_.cancels;
  return r.outcome;
}

DirectoryStats ServiceStore::Stats() const {
  MutexLock l(mu_);
  return counters_;
}

// ---- integrity ----------------------------------------------------------------------------------

Status ServiceStore::BeforeFirstWrite(uint64_t) {
  return OkStatus();
}  // the service did, at Reserve

Status ServiceStore::RecordSpan(uint64_t reservation_id, const Span& span,
                                std::span<const uint64_t> block_digests) {
  if (span.pack_token_begin != 0) {
    return Internal("digests: write span of pack slot " + std::to_string(span.pack_slot) +
                    " starts at pack token " + std::to_string(span.pack_token_begin) + ", not 0");
  }
  service::LayerDigests d;
  d.slot = span.pack_slot;
  d.generation = span.generation;
  d.stored_tokens = span.tokens();
  d.layer = span.layer;
  d.digests.assign(block_digests.begin(), block_digests.end());
  MutexLock l(mu_);
  pending_[reservation_id].push_back(std::move(d));
  return OkStatus();
}

Status ServiceStore::BeforePublish(uint64_t, std::span<const PackRecord>) {
  return OkStatus();  // the service checks completeness before it publishes
}

void ServiceStore::OnStoreAborted(uint64_t reservation_id, std::span<const PackRecord>) {
  MutexLock l(mu_);
  pending_.erase(reservation_id);
}

Status ServiceStore::FetchDigests(uint32_t slot, uint64_t generation) {
  std::vector<uint8_t> body, out;
  service::Encode(service::PackRef{slot, generation}, &body);
  RANGEKV_RETURN_IF_ERROR(Call(MessageType::kGetDigests, body, &out));
  service::DigestsReply r;
  RANGEKV_RETURN_IF_ERROR(service::Decode(out, &r));
  persist::PackDigests p;
  p.slot = slot;
  p.generation = generation;
  p.stored_tokens = r.stored_tokens;
  p.layers = r.layers;
  p.blocks_per_layer = static_cast<uint32_t>(r.blocks_per_layer);
  p.digests = std::move(r.digests);
  return digests_->Import(p);
}

Result<DigestBlocks> ServiceStore::PlanVerify(const Span& span) {
  if (dropped_.Contains(span.pack_slot, span.generation)) {
    return DroppedGenerations::Error(span.pack_slot, span.generation);
  }
  const uint64_t begin = span.pack_token_begin, end = span.pack_token_begin + span.tokens();
  auto plan = digests_->PlanVerify(span.pack_slot, span.generation, begin, end);
  if (!plan.ok() &&
      (plan.status().code() == StatusCode::kNotFound ||
       plan.status().code() == StatusCode::kStaleGeneration) &&
      !dropped_.Contains(span.pack_slot, span.generation)) {
    // First restore of this pack generation here: one request for all its digests.
    const Status fetched = FetchDigests(span.pack_slot, span.generation);
    plan = fetched.ok() ? digests_->PlanVerify(span.pack_slot, span.generation, begin, end)
                        : Result<persist::VerifyPlan>(fetched);
  }
  // Another stripe's OnCorruption may have dropped the pack meanwhile.
  return TableBlocks(dropped_, span, plan);
}

Status ServiceStore::Verify(const Span& span, uint64_t first_block,
                            std::span<const uint64_t> computed, bool* mismatch) {
  return TableVerify(*digests_, dropped_, span, first_block, computed, mismatch);
}

Status ServiceStore::Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) {
  return TableExpected(*digests_, dropped_, span, first_block, out);
}

void ServiceStore::OnCorruption(const Span& span) {
  dropped_.Mark(span.pack_slot, span.generation);  // before the digests go (see PlanVerify)
  digests_->Drop(span.pack_slot, span.generation);
  std::vector<uint8_t> body, out;
  service::Encode(service::PackRef{span.pack_slot, span.generation}, &body);
  Status s = Call(MessageType::kCorrupt, body, &out);
  if (!s.ok())
    Log(LogLevel::kWarning, "reporting a corrupt pack to the store service: " + s.ToString());
  Log(LogLevel::kWarning, "pack slot " + std::to_string(span.pack_slot) + " generation " +
                              std::to_string(span.generation) +
                              " failed payload verification and was dropped from the index");
}

}  // namespace rangekv::store
