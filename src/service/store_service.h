// StoreService: one store for a whole node (`rangekv serve`; docs/store-service.md). The
// service owns the index side of every store under its root directory: the range directory,
// slot allocation and generations, leases, payload digests, the publication journal and the
// clean-shutdown snapshot. Serving processes connect over a Unix domain socket; their engines
// (EngineOptions::store_service) send index operations (protocol.h) and do the payload I/O
// themselves, against the pack file descriptor the service passes them at Hello. Payload bytes
// never cross the socket.
//
// Stores. One store per (tenant, namespace) at <root>/<tenant>/<namespace hex>/, each a normal
// store directory (docs/pack-format.md) that `rangekv inspect` and `rangekv fsck` read as they
// read an embedded one. It is opened at the first Hello that names it (created with the
// client's geometry and the capacity it asks for, or ServiceOptions::store_capacity_bytes,
// capped by its tenant's remaining quota; an existing store keeps its pack file's capacity
// whatever the client asks) and
// closed cleanly, snapshot and all, when the service stops. Namespaces keep models, geometries,
// layouts, TP ranks and tags apart: each has its own pack file, so a descriptor passed for one
// never reaches another's bytes.
//
// Sessions. Every connection is a session (bounded by max_sessions). The service prefixes the
// request ids of its envelopes with the session id, so a client can claim, cancel or replace
// only its own tickets; it releases, publishes and aborts only ids its own session obtained.
// When a session ends without Goodbye (the client crashed, was SIGKILLed, or dropped the
// connection) its leftovers (unclaimed and claimed tickets, reservations) are reclaimed only
// once no I/O of it can still be in flight: when its process has exited (pidfd), or after
// orphan_grace_ms when the peer's pid is not visible (another pid namespace). Until then its
// slots stay reserved and its packs leased, so a slot it may still write is never handed to
// anyone else. A Goodbye means the client drained everything first (Engine::Close does).
//
// Restart fence. A store reopened by a new service may still receive late writes from clients
// of the previous one (their stores were in flight when it died). Its reservations are refused
// (kUnavailable: the store is skipped, the request goes on) for restart_fence_ms after the
// open; a client that lost its service reconnects only once its own in-flight stores drained
// (src/store/service_store.h), and payload digests catch anything later (checksum=always).
//
// Isolation. The socket is created 0600 (0660 with group_access); every connection's peer
// credentials (SO_PEERCRED) must be the service's uid, or its gid under group_access, or it is
// refused before anything is read. A malformed frame gets an error reply (when one can be
// framed) and the connection is closed; nothing of it is applied.
//
// Thread-safety: Start/Stop/Wait/stats from any thread. Internally: one accept thread, one
// thread per session; mu_ guards the session and store tables; each store's own locking
// (Directory, DigestTable, Persistence) serialises the index operations.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "persist/journal_writer.h"
#include "rangekv/env.h"
#include "rangekv/remote.h"
#include "rangekv/status.h"
#include "service_proto/protocol.h"
#include "service_proto/read_gate.h"
#include "service_proto/unix_socket.h"

namespace rangekv::service {

struct ServiceOptions {
  std::string root;         // stores live under it (created 0700, or 0750 with group_access)
  std::string socket_path;  // "" = <root>/rangekv.sock
  bool group_access = false;
  uint64_t default_quota_bytes = 16ull << 30;  // per tenant: sum of its stores' capacities
  std::map<std::string, uint64_t> quotas;      // tenant -> bytes
  // Each store's capacity. 0: a store created by a Hello takes the capacity its client asks for
  // (within the quota); an existing store (its pack file on disk) keeps its pack file's,
  // whatever a client asks. Either way within the tenant's quota.
  uint64_t store_capacity_bytes = 0;
  persist::JournalOptions journal;  // every store's durability
  uint32_t max_sessions = 256;
  // Sessions one peer process (SO_PEERCRED pid) may hold at once, and one uid (0: max_sessions,
  // or three quarters of it under group_access, where peers of several uids share the service),
  // so one buggy or hostile client cannot take every session. A refusal is kResourceExhausted.
  uint32_t max_sessions_per_pid = 64;
  uint32_t max_sessions_per_uid = 0;
  // Once a frame's first byte arrived, all of it must within this, and a reply must be taken
  // by the client within it (socket send timeout); a new connection must say Hello within it.
  // Past it the session is closed (logged).
  std::chrono::milliseconds frame_timeout{10000};
  // A session that holds nothing in its store (no ticket, claim or reservation) and sends
  // nothing for this long is closed; its engine reconnects at its next call. 0: never. A
  // session holding something is never closed for idleness (its leftovers would then wait for
  // its process to exit).
  std::chrono::milliseconds idle_timeout{300000};
  uint64_t orphan_grace_ms = 10000;
  uint64_t restart_fence_ms = 1000;
  Env* env = nullptr;  // nullptr: DefaultEnv()
  // How long a session polls for its client's next request before sleeping
  // (SpinUntilReadable): a lookup followed by its claim, or a burst of lookups, then skips the
  // wake-up of a sleeping session thread. Costs up to this much CPU after every reply.
  std::chrono::microseconds request_spin{0};
  // A session thread moves to the CPU a shared lookup or claim names (client_cpu, when this
  // process may run there) and walks the client's tokens where that CPU just wrote them: on the
  // dev VM a 128K-token lookup took 92-126 us walked from the other vCPU and 64-65 us from the
  // same one (docs/store-service.md "Latency: the walk on the client's CPU").
  bool follow_client_cpu = true;
  // How long a session counts as a reader after its last hit, claim or release (lookup and
  // claim replies' `readers`, protocol.h; docs/store-service.md "Sharing the node's read
  // concurrency").
  uint64_t reader_window_ms = 1000;
  // The node's read gate (read_gate.h; docs/store-service.md "A node-wide read gate"): the read
  // I/O pieces every session's engine together keeps in flight, for engines that ask
  // (EngineTuning::read_gate). 0: no gate (kAttachReadGate is answered kNotFound).
  uint32_t read_slots = 0;
  // The cluster tier (docs/scale-out.md): with remote.url set, every store the service opens
  // publishes its sealed packs to the bucket and the cluster directory, under the store's
  // tenant (engines connected to the service look up and read remote runs themselves).
  RemoteTierOptions remote;
  // Test seam: the uid peers must have (default: the service's effective uid).
  std::optional<uint32_t> peer_uid;
};

struct ServiceStats {
  uint64_t sessions_accepted = 0;
  uint64_t sessions_refused = 0;          // credentials, session bounds (all, per pid, per uid)
  uint64_t sessions_closed_idle = 0;      // idle_timeout, or no Hello within frame_timeout
  uint64_t sessions_closed_deadline = 0;  // a frame or reply not through within frame_timeout
  uint64_t sessions_vanished = 0;         // the client's connection broke mid-frame (killed, reset)
  uint64_t sessions_active = 0;
  uint64_t readers = 0;     // sessions reading now (Readers(), without its floor of 1)
  uint64_t bad_frames = 0;  // sessions closed for a malformed message
  uint64_t requests = 0;
  uint64_t shared_queries = 0;      // lookups and claims read from a query buffer
  uint64_t client_cpu_moves = 0;    // a session thread moved to its client's CPU
  uint64_t sessions_reclaimed = 0;  // ended without Goodbye and with leftovers
  uint64_t tickets_reclaimed = 0;
  uint64_t reservations_reclaimed = 0;
  uint64_t stores_open = 0;
  uint64_t read_gate_slots = 0;        // ServiceOptions::read_slots
  uint64_t read_gate_outstanding = 0;  // gate tickets out: reads in flight and waiting
  uint64_t read_gate_holders = 0;      // sessions holding a gate index (ended ones until reclaimed)
  uint64_t read_gate_holders_waiting = 0;  // of them, ended and waiting for their process to exit
  uint64_t read_gate_marks_reclaimed = 0;  // marks dead sessions left (their slots came back)
  uint64_t read_gate_sessions = 0;         // sessions that attached to the gate, since the start
};

class StoreService {
 public:
  // Creates the root, opens the socket and starts accepting. kAlreadyExists when another
  // service listens on the socket.
  static Result<std::unique_ptr<StoreService>> Start(const ServiceOptions& options);
  ~StoreService();  // Stop()
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  // Stops accepting, closes every session (reclaiming leftovers at once), closes every store
  // (snapshot) and removes the socket. Returns the first store's close error. Idempotent.
  Status Stop() EXCLUDES(mu_);
  // Blocks until Stop() ran (from another thread or a signal handler's thread).
  void Wait() EXCLUDES(mu_);
  ServiceStats stats() const EXCLUDES(mu_);

 private:
  struct Store;
  struct Session;

  explicit StoreService(const ServiceOptions& options);
  void AcceptLoop();
  // Joins the threads of sessions that ended (each wakes the accept loop through reap_fd_).
  void ReapSessions() EXCLUDES(mu_);
  // Why a connection from `peer` may not become a session now ("" when it may).
  std::string RefusalLocked(const PeerCredentials& peer) const REQUIRES(mu_);
  void RunSession(Session* session);
  // Waits for the session's next request to start arriving: false when the session is to end
  // (peer closed, idle past the bound; *why says so).
  bool AwaitRequest(Session& s, std::string* why, bool* idle);
  // Handles one request; false ends the session (Goodbye, or a reply could not be sent).
  bool Handle(Session& s, uint16_t type, std::span<const uint8_t> body);
  // Maps the memfd passed with a kAttachQueryBuffer frame (s.frame.passed_fd) read-only.
  Status AttachQueryBuffer(Session& s, uint64_t bytes);
  // Gives the session a holder index of the read gate (once; the same one again after).
  Status AttachReadGate(Session& s, AttachReadGateReply* reply) EXCLUDES(mu_);
  // Pins the session's thread to `cpu` (ServiceOptions::follow_client_cpu) when it is not there
  // yet and this process may run on it; otherwise changes nothing.
  void FollowClientCpu(Session& s, uint32_t cpu);
  Status HandleHello(Session& s, std::span<const uint8_t> body, int* pass_fd,
                     std::vector<uint8_t>* reply) EXCLUDES(mu_);
  // Whether process `pid` has exited, waiting up to `wait` (false for pid <= 0).
  bool ProcessGone(int pid, std::chrono::milliseconds wait) const;
  void ReapGateHolders() EXCLUDES(mu_);
  // Waits until the session's process can have no I/O in flight, then reclaims its leftovers.
  void ReclaimAfterExit(Session& s);
  void Reclaim(Session& s);
  bool Reply(Session& s, uint16_t type, const Status& status, std::span<const uint8_t> payload,
             int pass_fd = -1);
  // Sessions reading now (protocol.h LookupReply::readers): sessions whose connection is open
  // and that hold claimed tickets or read within reader_window_ms; at least 1. O(sessions),
  // under mu_.
  uint32_t Readers() const EXCLUDES(mu_);
  uint32_t CountReadersLocked() const REQUIRES(mu_);

  const ServiceOptions options_;
  Env* env_;
  std::unique_ptr<FileLock> root_lock_;  // <root>/serve.lock, held until destruction
  std::string socket_path_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: readable once Stop() began
  int reap_fd_ = -1;  // eventfd: a session ended (its thread waits to be joined)
  std::thread accept_thread_;

  mutable Mutex mu_;
  CondVar stopped_cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  Status stop_status_ GUARDED_BY(mu_);
  uint64_t next_session_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Store>> stores_ GUARDED_BY(mu_);
  // The node's read gate (ServiceOptions::read_slots > 0); its holder indexes under mu_.
  std::unique_ptr<ReadGatePage> gate_;
  // Holder indexes of sessions that ended without Goodbye while their process lived on, given
  // back once it exited (ReapGateHolders, from the accept loop); pid <= 0 (not visible): after
  // orphan_grace_ms.
  struct PendingHolder {
    uint32_t holder;
    int pid;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<PendingHolder> pending_holders_ GUARDED_BY(mu_);
  ServiceStats stats_ GUARDED_BY(mu_);
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> shared_queries_{0};
  std::atomic<uint64_t> client_cpu_moves_{0};
};

}  // namespace rangekv::service
