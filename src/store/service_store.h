// ServiceStore: the engine's side of a node's store service (EngineOptions::store_service;
// the service is src/service/store_service.h, `rangekv serve`). It is the engine's RangeIndex
// (every directory operation becomes one request over the Unix domain socket, batched as the
// directory's calls already are: one per lookup, claim, reservation, publication), its
// PayloadIntegrity (digests computed by the engine are sent with the publication; digests for
// verification are fetched once per pack generation and kept in a local DigestTable) and its
// GenerationView (the generation of every record it was handed, which its lease or reservation
// keeps current). Payload I/O does not go through here: the engine reads and writes the pack
// file through the descriptor passed at Hello (pack_file()).
//
// Losing the service. A failed request (also one whose reply did not come within
// call_timeout) marks the connection lost: the call and every later one
// fail with kUnavailable (lookups miss, restores and stores fail, vLLM recomputes), reservations
// of the lost session are forgotten as their stores settle (their Publish fails, their Abort is
// local), and tickets of the lost session need no release (the service reclaims them). The next
// call reconnects (at most every reconnect_interval) only once no store of the lost session
// can still be writing (a session the service closed for idleness held nothing, so a call
// after a quiet spell finds it closed and reconnects at once, within that call): every reservation
// it obtained was published or aborted by the engine, which happens only after its accepted writes
// returned. A reconnect must find the same pack file (device and inode); a replaced store fails
// with kWrongStore until the engine reopens.
//
// Counters. Stats() reports this engine's own work (lookups, records selected, leases), as the
// embedded directory would for it; the service's global counters are its own (`rangekv serve`
// logs them).
//
// Thread-safety: all methods are thread-safe. One request is on the wire at a time (call_mu_);
// local state has its own mutex (mu_). Lock order: call_mu_ -> mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "directory/directory.h"
#include "directory/range_index.h"
#include "pack/pack_file.h"
#include "pack/span_plan.h"
#include "persist/payload_digests.h"
#include "service_proto/protocol.h"
#include "service_proto/read_gate.h"
#include "store/dropped_generations.h"
#include "store/integrity.h"

namespace rangekv::store {

struct ServiceStoreOptions {
  std::string address;  // "unix:///run/rangekv.sock" or a socket path
  std::string tenant = "default";
  Geometry geometry;
  NamespaceId ns;
  uint64_t capacity_bytes = 0;  // wanted for a new namespace store
  bool direct = true;
  uint64_t digest_block_tokens = 0;
  std::chrono::milliseconds reconnect_interval{200};
  // How long a call polls for its reply before sleeping (service::SpinUntilReadable).
  std::chrono::microseconds reply_spin{0};
  // A reply not in by then fails the call (kUnavailable) and drops the connection: a hung
  // service never blocks a caller for longer (EngineTuning::store_service_timeout_ms).
  std::chrono::milliseconds call_timeout{60000};
  // Ask every session for the service's read gate (EngineTuning::read_gate).
  bool read_gate = false;
  std::string identity_record;  // sent at Hello (service::HelloRequest::identity)
};

class ServiceStore final : public RangeIndex, public PayloadIntegrity, public GenerationView {
 public:
  // Connects, says Hello and opens the passed pack file descriptor (validated against the
  // geometry and namespace like any pack file). kUnavailable when no service listens; the
  // service's error otherwise (kUnsafePermissions for refused credentials, kGeometryMismatch,
  // kResourceExhausted for an exhausted quota).
  static Result<std::unique_ptr<ServiceStore>> Connect(const ServiceStoreOptions& options);
  ~ServiceStore() override;

  const PackFile& pack_file() const { return *pack_; }
  const service::HelloReply& hello() const { return hello_; }
  bool connected() const EXCLUDES(mu_);
  // Says Goodbye (the engine drained everything) and closes the connection. Idempotent.
  void Close() EXCLUDES(call_mu_, mu_);
  // Sessions of the service reading now, this one included, as its last lookup or claim reply
  // said (service::LookupReply::readers; 1 before any), clamped to [1, kMaxReaders]. The engine
  // divides its read concurrency by it (EngineTuning::share_reads).
  static constexpr uint32_t kMaxReaders = 1024;
  uint32_t readers() const { return readers_.load(std::memory_order_relaxed); }
  // The read gate of the current session (ServiceStoreOptions::read_gate): null when not asked
  // for, when the service runs without one, or before a session attached one. Each session has
  // its own holder index, so every new session brings a new gate; the generation counts them,
  // and the engine hands the newest to its read I/O engine.
  std::shared_ptr<service::SharedReadGate> read_gate() const EXCLUDES(mu_);
  uint64_t read_gate_generation() const { return gate_generation_.load(std::memory_order_acquire); }
  // durability=every_publish on the service: blocks until the publication is durable there.
  Status AwaitDurable(uint64_t reservation_id) EXCLUDES(call_mu_, mu_);

  // ---- RangeIndex --------------------------------------------------------------------------
  Result<Reservation> Reserve(const NamespaceId& ns, std::span<const int32_t> tokens) override;
  Status Publish(uint64_t reservation_id) override;
  Status Abort(uint64_t reservation_id) override;
  bool IsInFlight(uint64_t reservation_id) const override;
  Result<Ticket> Lookup(const NamespaceId& ns, std::span<const int32_t> tokens,
                        const Envelope& envelope, uint64_t granularity_tokens) override;
  Result<ClaimedRange> ClaimBytes(const NamespaceId& ns, std::span<const uint8_t> ticket_bytes,
                                  const Envelope& envelope, std::span<const int32_t> tokens,
                                  uint64_t endpoint_tokens) override;
  Status Release(uint64_t ticket_id) override;
  CancelOutcome Cancel(std::string_view request_id) override;
  DirectoryStats Stats() const override;

  // ---- PayloadIntegrity --------------------------------------------------------------------
  uint64_t block_tokens() const override { return digests_->geometry().block_tokens(); }
  uint64_t digest_seed() const override { return hello_.digest_seed; }
  Status BeforeFirstWrite(uint64_t reservation_id) override;
  Status RecordSpan(uint64_t reservation_id, const Span& span,
                    std::span<const uint64_t> block_digests) override;
  Status BeforePublish(uint64_t reservation_id, std::span<const PackRecord> records) override;
  void OnStoreAborted(uint64_t reservation_id, std::span<const PackRecord> records) override;
  Result<DigestBlocks> PlanVerify(const Span& span) override;
  Status Verify(const Span& span, uint64_t first_block, std::span<const uint64_t> computed,
                bool* mismatch) override;
  Status Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) override;
  void OnCorruption(const Span& span) override;

  // ---- GenerationView ----------------------------------------------------------------------
  uint64_t CurrentGeneration(uint32_t slot) const override;

 private:
  explicit ServiceStore(const ServiceStoreOptions& options);
  // Connects and says Hello; fills hello_ and returns the passed descriptor.
  Result<int> Handshake(service::HelloReply* reply) REQUIRES(call_mu_);
  // One request and its reply's payload. Reconnects first when the connection was lost and
  // the lost session's stores settled. kUnavailable when the service is unreachable.
  // The request's body is `body` then `tail` (sent without a copy).
  Status Call(service::MessageType type, std::span<const uint8_t> body,
              std::vector<uint8_t>* payload, std::span<const uint8_t> tail = {})
      EXCLUDES(call_mu_, mu_);
  // A descriptor the reply passes is closed, or handed to the caller through `received_fd`
  // when the call succeeded (-1 when none came).
  Status CallLocked(service::MessageType type, std::span<const uint8_t> body,
                    std::vector<uint8_t>* payload, std::span<const uint8_t> tail = {},
                    int pass_fd = -1, int* received_fd = nullptr) REQUIRES(call_mu_) EXCLUDES(mu_);
  void LoseConnection(const Status& why) REQUIRES(call_mu_) EXCLUDES(mu_);
  // After a quiet spell: whether the service ended the session meanwhile (it closes sessions
  // idle past its idle_timeout); if so the connection is dropped, and a session that left
  // nothing in flight reconnects at once, within this call.
  void NoticeServiceHangup() REQUIRES(call_mu_) EXCLUDES(mu_);
  // Creates the query buffer (once) and attaches it to the current session; on failure the
  // session sends tokens inline (logged once).
  void AttachQueryBuffer() REQUIRES(call_mu_) EXCLUDES(mu_);
  // Asks the current session for the service's read gate (when options_.read_gate) and makes
  // it the current one; without it (refused, or not offered) reads go ungated (logged once).
  void AttachReadGate() REQUIRES(call_mu_) EXCLUDES(mu_);
  // A lookup's or claim's call: with an attached query buffer `tokens` are written there and
  // `shared_body` (a kLookupShared / kClaimShared body) goes over the socket, else `inline_type`
  // with `body` + `tail`.
  Status CallWithTokens(service::MessageType inline_type, std::span<const uint8_t> body,
                        std::span<const uint8_t> tail, service::MessageType shared_type,
                        std::span<const uint8_t> shared_body, std::span<const int32_t> tokens,
                        std::vector<uint8_t>* payload) EXCLUDES(call_mu_, mu_);
  void Learn(std::span<const PackRecord> records) EXCLUDES(mu_);
  // Imports every digest of one pack generation from the service into digests_.
  Status FetchDigests(uint32_t slot, uint64_t generation) EXCLUDES(call_mu_, mu_);

  const ServiceStoreOptions options_;
  std::string socket_path_;
  service::HelloReply hello_;
  std::unique_ptr<PackFile> pack_;
  uint64_t pack_dev_ = 0, pack_ino_ = 0;
  std::unique_ptr<persist::DigestTable> digests_;  // verification cache
  std::vector<std::atomic<uint64_t>> generations_;
  std::atomic<uint32_t> readers_{1};
  DroppedGenerations dropped_;  // packs this client found corrupt

  mutable Mutex call_mu_;
  int fd_ GUARDED_BY(call_mu_) = -1;
  std::chrono::steady_clock::time_point next_attempt_ GUARDED_BY(call_mu_);
  std::chrono::steady_clock::time_point last_reply_ GUARDED_BY(call_mu_);
  bool closed_ GUARDED_BY(call_mu_) = false;
  // The shared query buffer (docs/store-service.md "Query buffer"): a sealed memfd mapped here
  // read-write and in the service read-only, attached again to every new session.
  int query_fd_ GUARDED_BY(call_mu_) = -1;
  uint8_t* query_ GUARDED_BY(call_mu_) = nullptr;
  bool query_attached_ GUARDED_BY(call_mu_) = false;
  bool query_warned_ GUARDED_BY(call_mu_) = false;
  bool gate_warned_ GUARDED_BY(call_mu_) = false;
  std::atomic<uint64_t> gate_generation_{0};

  mutable Mutex mu_;
  bool connected_ GUARDED_BY(mu_) = false;
  uint64_t session_ GUARDED_BY(mu_) = 0;             // hello's session id; bumps on reconnect
  std::set<uint64_t> reservations_ GUARDED_BY(mu_);  // of the current session
  std::set<uint64_t> orphans_ GUARDED_BY(mu_);       // of a lost session, not yet settled
  std::set<uint64_t> claimed_ GUARDED_BY(mu_);       // ticket ids of the current session
  std::map<uint64_t, std::vector<service::LayerDigests>> pending_ GUARDED_BY(mu_);
  DirectoryStats counters_ GUARDED_BY(mu_);
  std::shared_ptr<service::SharedReadGate> gate_ GUARDED_BY(mu_);
};

}  // namespace rangekv::store
