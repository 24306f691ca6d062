// RemoteTier: the restore side of the cluster tier inside an engine (docs/scale-out.md
// "Lookup and restore"). It extends a local hit with runs other nodes published, and reads them
// into the engine's own read banks as stripe spans, verified against the publisher's digests.
//
// Lookup (scheduler side). Only the part of a prompt the node does not hold is asked for: when
// the local hit already reaches the largest possible hit, the cluster is not consulted. Otherwise
// the cluster directory is walked (ClusterDirectory::Walk: round trips independent of the
// object count), the selected objects are leased (one script), and their manifests fetched
// (in parallel, once per pack and node, then cached) and checked: namespace, geometry, digest
// block size, and the run's tokens. All of it within lookup_timeout_ms; past it, or on any
// error, the lookup answers with the local hit (counted as a timeout) and nothing is leased.
// The answer is a remote ticket kept here, bound to the request id and a digest of the hit's
// tokens; the engine's ticket bytes carry its id beside the local ticket (EncodeCompositeTicket).
//
// Claim (worker side). The request id, the ticket id and the tokens must match the lookup's
// (kForeignOwner, kNotFound, kTokenMismatch; an endpoint beyond the remote hit is
// kEndpointBeyondTicket). The claimed records become spans (PlanSpans): per remote run and
// layer, one span of the object's bytes (widened to whole digest blocks), at most a stripe, so a
// remote restore is (runs x layers) spans exactly as a local one. Read fetches them by ranged
// GETs: with get_bytes 0 one GET for the consecutive layers of a run inside one multipart part
// (the restore pipeline's riders), else ceil(span / get_bytes) GETs per span in parallel.
// Spans name the run by a handle in pack_slot and file_index = kRemoteFileIndex.
//
// Integrity (RemoteIntegrity): the engine's PayloadIntegrity for remote spans is answered here
// from the manifest's digests, so remote bytes go through the same device verdict as local
// ones and a block that fails is never scattered. A mismatch quarantines the object in the
// cluster directory (nobody is served it again) and drops it from the cache.
//
// Leases are released when the request's restore drained (its ticket hold), or when the
// request ends unclaimed (Cancel).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "pack/span_plan.h"
#include "rangekv/geometry.h"
#include "rangekv/remote.h"
#include "rangekv/status.h"
#include "rangekv/transfer.h"
#include "remote/manifest.h"
#include "remote/remote_clients.h"
#include "store/integrity.h"

namespace rangekv::engine_internal {

// Span::file_index of spans read from the object store.
inline constexpr uint32_t kRemoteFileIndex = 0x80000000u;

// What a composite ticket carries: the local ticket's bytes (may be empty) and the remote
// ticket's id (0: none).
struct CompositeTicket {
  std::string local;       // the local ticket's bytes ("" when the node held nothing)
  uint64_t local_hit = 0;  // the local ticket's hit
  uint64_t remote_id = 0;
  uint64_t remote_hit = 0;
};
std::string EncodeCompositeTicket(const CompositeTicket& t);
// nullopt when `bytes` is a plain local ticket (no composite magic).
std::optional<Result<CompositeTicket>> DecodeCompositeTicket(std::string_view bytes);

struct RemoteRecord {
  uint32_t handle = 0;  // the run's pack (RemoteTier's table)
  uint64_t path_token_begin = 0;
  uint64_t pack_token_offset = 0;
  uint64_t tokens = 0;
  uint64_t path_token_end() const { return path_token_begin + tokens; }
};

class RemoteTier {
 public:
  RemoteTier(std::shared_ptr<remote::RemoteClients> clients, const Geometry& geometry,
             uint64_t digest_block_tokens, uint64_t digest_seed, uint64_t bank_bytes);
  ~RemoteTier();

  struct Extension {
    uint64_t ticket_id = 0;
    uint64_t hit_tokens = 0;  // the combined hit (local + remote)
    uint64_t runs = 0;
  };
  // Extends `local_hit` for `request_id` (see the header comment); nullopt when the cluster adds
  // nothing. `limit`: the largest hit allowed (rounded, never the last token). Never fails.
  std::optional<Extension> Lookup(const std::string& request_id, std::span<const int32_t> tokens,
                                  uint64_t local_hit, uint64_t limit, uint64_t granularity);

  struct Claimed {
    std::vector<RemoteRecord> records;  // path order, covering [begin, endpoint)
  };
  Result<Claimed> Claim(const std::string& request_id, uint64_t ticket_id,
                        std::span<const int32_t> tokens, uint64_t begin, uint64_t endpoint);
  // Releases the leases of the request's remote ticket (claimed or not) and forgets it.
  void Release(const std::string& request_id, uint64_t ticket_id);
  // The request ended: its ticket is released if it was never claimed (a claimed one is
  // released by its restore's ticket hold).
  void Cancel(const std::string& request_id);

  // Spans of path tokens [begin, end) of `records`, layer-major, appended to *out (each layer
  // the same count). With `verify`, each widened to whole digest blocks.
  Status PlanSpans(std::span<const RemoteRecord> records, TokenInterval tokens, uint32_t layers,
                   bool verify, std::vector<Span>* out) const;

  // GETs and parts. With get_bytes == 0 a GET carries up to a multipart part: the spans of
  // consecutive layers of one run lie one stripe pitch apart in the object, so the restore
  // pipeline hands Read the spans one GET can carry together, each into its own read bank; an
  // S3 server stores a part as a unit, and one GET per part costs it the least per byte
  // (docs/scale-out.md "Measured"). With get_bytes > 0 each span is cut into GETs of that size.
  //
  // Spans one GET may carry, `first` leading (1 when get_bytes > 0 or first's pack is unknown).
  uint32_t SpansPerGet(const Span& first) const;
  // Whether `next` may ride the GET `first` leads, after `prev` (the group's last so far): the
  // same object and generation, ascending, at most kMaxGetGapBytes of bytes between prev and
  // next (the padding of a pitch, or stored tokens outside the restored span), and next ending
  // inside first's part.
  bool JoinsGet(const Span& first, const Span& prev, const Span& next) const;
  static constexpr uint64_t kMaxGetGapBytes = 64 << 10;
  static constexpr uint32_t kMaxSpansPerGet = 4;

  // Reads remote spans into their buffers (spans[i].length_bytes bytes into bufs[i]): one span
  // as ceil(span / get_bytes) GETs, or spans a JoinsGet chain admitted as one GET (the padding
  // between them read and dropped). *gets: GETs issued.
  Status Read(std::span<const Span* const> spans, std::span<uint8_t* const> bufs, uint64_t* gets);

  // PayloadIntegrity's restore side for remote spans.
  Result<store::DigestBlocks> PlanVerify(const Span& span);
  Status Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out);
  Status Verify(const Span& span, uint64_t first_block, std::span<const uint64_t> computed,
                bool* mismatch);
  void OnCorruption(const Span& span);

  RemoteTierStats stats() const;
  remote::RemoteClients& clients() const { return *clients_; }

 private:
  struct Pack {
    uint32_t handle = 0;
    std::string object_id;
    std::string key;
    remote::PackManifest manifest;
    std::atomic<bool> bad{false};
  };
  struct Ticket {
    uint64_t id = 0;
    uint64_t local_hit = 0;
    uint64_t hit = 0;
    uint64_t tokens_digest = 0;
    std::vector<RemoteRecord> records;
    std::vector<std::shared_ptr<Pack>> packs;  // keeps handles valid while the ticket lives
    std::vector<std::string> leased;
    bool claimed = false;
  };
  std::shared_ptr<Pack> Find(uint32_t handle) const EXCLUDES(mu_);
  // The cached pack of `object_id`, else nullptr (the caller fetches).
  std::shared_ptr<Pack> Cached(const std::string& object_id) EXCLUDES(mu_);
  std::shared_ptr<Pack> Insert(const std::string& object_id, remote::PackManifest manifest)
      EXCLUDES(mu_);
  // Runs `task` on the background thread (network calls that must not run under a caller's
  // locks: lease releases, quarantines). Dropped when the queue is full (leases expire anyway).
  void Background(std::function<void()> task) EXCLUDES(bg_mu_);
  void BackgroundLoop() EXCLUDES(bg_mu_);

  const std::shared_ptr<remote::RemoteClients> clients_;
  const Geometry geometry_;
  const uint64_t digest_block_tokens_;
  const uint64_t digest_seed_;
  const uint64_t bank_bytes_;
  const std::string reader_;  // this engine's lease holder name

  mutable Mutex mu_;
  uint32_t next_handle_ GUARDED_BY(mu_) = 1;
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  std::map<uint32_t, std::weak_ptr<Pack>> handles_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Pack>> cache_ GUARDED_BY(mu_);  // object id -> pack
  std::list<std::string> lru_ GUARDED_BY(mu_);                          // oldest first
  std::map<std::string, Ticket> tickets_ GUARDED_BY(mu_);               // by request id

  mutable Mutex stats_mu_;
  RemoteTierStats stats_ GUARDED_BY(stats_mu_);

  Mutex bg_mu_;
  CondVar bg_cv_;
  std::deque<std::function<void()>> bg_queue_ GUARDED_BY(bg_mu_);
  bool bg_stop_ GUARDED_BY(bg_mu_) = false;
  std::thread bg_thread_;
};

// The engine's PayloadIntegrity with remote spans answered by a RemoteTier and everything else
// by the store's own (store side always local).
class RoutingIntegrity final : public store::PayloadIntegrity {
 public:
  RoutingIntegrity(store::PayloadIntegrity* local, RemoteTier* remote)
      : local_(local), remote_(remote) {}
  uint64_t block_tokens() const override { return local_->block_tokens(); }
  uint64_t digest_seed() const override { return local_->digest_seed(); }
  Status BeforeFirstWrite(uint64_t id) override { return local_->BeforeFirstWrite(id); }
  Status RecordSpan(uint64_t id, const Span& span, std::span<const uint64_t> d) override {
    return local_->RecordSpan(id, span, d);
  }
  Status BeforePublish(uint64_t id, std::span<const PackRecord> r) override {
    return local_->BeforePublish(id, r);
  }
  void OnStoreAborted(uint64_t id, std::span<const PackRecord> r) override {
    local_->OnStoreAborted(id, r);
  }
  Result<store::DigestBlocks> PlanVerify(const Span& span) override {
    return span.file_index == kRemoteFileIndex ? remote_->PlanVerify(span)
                                               : local_->PlanVerify(span);
  }
  Status Verify(const Span& span, uint64_t first, std::span<const uint64_t> computed,
                bool* mismatch) override {
    return span.file_index == kRemoteFileIndex ? remote_->Verify(span, first, computed, mismatch)
                                               : local_->Verify(span, first, computed, mismatch);
  }
  Status Expected(const Span& span, uint64_t first, std::span<uint64_t> out) override {
    return span.file_index == kRemoteFileIndex ? remote_->Expected(span, first, out)
                                               : local_->Expected(span, first, out);
  }
  void OnCorruption(const Span& span) override {
    if (span.file_index == kRemoteFileIndex) {
      remote_->OnCorruption(span);
    } else {
      local_->OnCorruption(span);
    }
  }

 private:
  store::PayloadIntegrity* local_;
  RemoteTier* remote_;
};

}  // namespace rangekv::engine_internal
