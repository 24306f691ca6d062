// Directory: which tokens are reusable, and who owns their bytes (docs/design.md "Directory and
// tickets", paper 3.2).
//
// The directory maps token prefixes to pack records without building a key per logical object.
// Per namespace it keeps a compressed radix tree over int32 token ids; each tree node carries
// one pack piece, so a lookup costs the token bytes it compares plus the records it selects
// (16 for a 131,072-token prefix in 8,192-token packs), whatever the reuse granularity. It also
// owns the lifecycle of the store's N pack slots (SlotTable: free -> reserved -> visible ->
// retired -> free, generations, leases). It knows nothing about files or devices: records are
// plain values that the pack store turns into byte spans.
//
// Packs and prefixes. A pack holds up to T = tokens_per_pack consecutive tokens of one prefix
// path, from pack token 0 on. Storing a prefix stores only its uncached suffix [h, n): new packs
// cover [h, h+T), [h+T, h+2T), ...; so when a prefix diverges from a stored one inside a pack,
// the stored pack keeps serving tokens up to the divergence and the new tail starts a new pack
// whose token 0 is the divergence position. Every token position of the tree is held by exactly
// one pack; packs form a tree themselves (a pack's parent holds the position before its
// token 0).
//
// Store side. Reserve() answers what must be written: kReserved with new records (slot,
// generation, path interval; invisible until Publish()), kJoined when an in-flight store already
// covers the next tokens (nothing to write; wait with WaitForReservation() and Reserve again, or
// ignore), or kAlreadyStored. Publish() makes a reservation's packs visible atomically; Abort()
// reclaims them. When invalidation removes tokens of an in-flight reservation, the reservation
// is doomed: its packs leave the tree at once and Publish() answers kAborted.
//
// Read side. Lookup() returns a Ticket: the hit is the longest stored prefix of the query,
// never covering the query's last token, rounded down to the caller's reuse granularity; its
// records are clipped at the hit, one per pack. A registered ticket leases every pack it names
// (a leased pack is never reclaimed). Claim() verifies a ticket before delivery, Release() drops
// its leases after delivery has drained, Cancel(request_id) drops an unclaimed ticket when its
// request finishes or aborts. One outstanding ticket per request id: a repeated lookup with the
// identical query (same namespace, envelope, granularity and tokens) returns the same ticket
// again (vLLM asks again while a request waits for blocks); a different query fails with
// kTicketReplaced until the ticket is cancelled or released.
//
// Claim checks, in this order, each with its own status: undecodable bytes -> kCorruptTicket;
// owner epoch of another directory instance -> kForeignOwner; ticket id not outstanding
// (released, cancelled, never issued) -> kNotFound; bytes differing from the directory's copy
// (forged or tampered) -> kCorruptTicket; caller namespace differs -> kNamespaceMismatch;
// caller envelope differs -> kForeignOwner; already claimed -> kFailedPrecondition; endpoint >
// hit -> kEndpointBeyondTicket; tokens shorter than the hit or with another digest ->
// kTokenMismatch; any named pack retired, reused or clipped below the ticket's tokens since the
// lookup -> kStaleGeneration. A failed claim changes nothing.
//
// Invalidation and eviction. InvalidatePrefix(tokens) removes every cached position whose path
// starts with `tokens` (a later lookup of them hits at most n-1 tokens); InvalidatePack removes
// a pack and everything stored below it. Packs that lose all their tokens are retired; a pack
// that keeps a head stays visible with fewer tokens. Eviction keeps the visible packs within the
// byte capacity bound (capacity_bytes / pack_bytes slots). Policy: least recently used among
// evictable packs, where evictable = visible, unleased, and with no dependent pack (no pack,
// visible or reserved, continues a path from inside it). Evicting a pack with dependents would
// orphan them (their tokens stay unreachable while their bytes stay allocated), and since
// every lookup that reaches a dependent also touches its ancestors, taking leaves first agrees
// with recency. Packs are touched when published and when a lookup selects them. Reserve()
// evicts as many packs as it needs slots (never the pack its new tail continues), and when it
// still lacks slots it reserves the prefix of the suffix that fits (end_tokens < query) or fails
// with kResourceExhausted when no slot at all can be had.
//
// Scalar ablation (IndexMode::kScalar): the same API and the same tree, but lookups go through
// the stock per-object index (scalar_index.h): one hash-chain key per chunk (and per layer when
// layerwise), a hash-map probe and a lease per key. Its hit is the tree's hit rounded down to
// whole chunks, so it equals the tree's whenever that hit is chunk-aligned; its ticket records,
// leases (as pack zero/non-zero) and evictions are then identical. Only the work differs, and
// the counters show it.
//
// Bounds (DirectoryOptions): tree nodes, pack records, token-arena bytes, namespaces, tickets,
// reservations, query length and records per ticket; exceeding one fails with
// kResourceExhausted naming it (a ticket that would exceed max_ticket_records is clipped to
// the records that fit instead).
//
// Persistence: Serialize() captures namespaces, tree, visible packs with their generations and
// LRU order, and every slot's generation; Deserialize() rebuilds a directory from it (bounded,
// checksummed, structurally validated decoding) under a new owner epoch. Reservations and
// tickets are not captured: a snapshot is taken after owners drained.
//
// Observers. Observers (AddObserver, before concurrent use; at most kMaxObservers) hear every
// change of the published state as it happens, under the directory's mutex and in the order
// the changes take effect, each observer in the order it was added: each publication (with the
// reservation's whole path) and each visible pack that leaves the index (eviction,
// invalidation, a replay's overwrite; a pack clipped to a head is reported too, with the head
// it keeps). The publication journal is one (persist/journal_writer.h: it journals a clipped
// pack as removed, which a replay turns into a removal: it loses the head, never serves a token
// the live index dropped); the removal log behind Engine::DrainRemovedRanges is another
// (directory/removal_log.h). ReplayPublish() re-applies a journaled publication at a dirty open
// (persist/journal_replay).
//
// Thread-safety: every method is safe to call from any thread; one mutex (mu_) guards all
// state. Lookups hash and compare the query under it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/pack_record.h"
#include "base/thread_annotations.h"
#include "directory/radix_tree.h"
#include "directory/range_index.h"
#include "directory/scalar_index.h"
#include "directory/slot_table.h"
#include "directory/ticket.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

enum class IndexMode : uint8_t {
  kTree = 0,    // radix tree over token bytes; one record per pack
  kScalar = 1,  // stock per-object index: a key, a probe and a lease per logical object
};
std::string_view IndexModeName(IndexMode mode);  // "tree", "scalar"

// What a logical object is in the scalar ablation.
enum class ScalarObjects : uint8_t {
  kChunk = 0,       // one object per chunk of scalar_chunk_tokens (LMCache chunk mode)
  kChunkLayer = 1,  // one object per (chunk, layer) (LMCache layerwise mode)
};

struct DirectoryOptions {
  uint32_t pack_slots = 0;       // N, the pack count of the store
  uint64_t tokens_per_pack = 0;  // T, tokens per stripe
  uint64_t pack_bytes = 0;       // L x W, for the byte capacity bound
  uint64_t capacity_bytes = 0;  // 0: pack_slots x pack_bytes; else usable slots = this / pack_bytes
  uint64_t owner_epoch = 1;     // this instance's epoch; bump it on every reopen (nonzero)
  // Every generation this instance issues (Reserve of a slot) is at least this, whatever the
  // slot's earlier generation: a store that discarded its index passes a floor above every
  // generation an earlier session could have issued, so no old (slot, generation) pair ever
  // names a new pack. 0: generations continue from the slot's own (1 for a new directory).
  // Generations loaded by Deserialize keep their values (they may lie below the floor).
  uint64_t generation_floor = 0;
  // Free slots Reserve() keeps beyond what a reservation takes, evicting least recently used
  // packs ahead of need. A slot freed by an eviction can be rewritten only once the eviction is
  // durable (the journal's write-ahead rule); with a reserve, a reservation takes a slot freed
  // by an earlier one, whose removal has had time to commit, instead of waiting for the commit
  // of the eviction it just made (observers' SlotReusable() says which slots are ready). The
  // price is this many packs of capacity. 0: evict only on demand (the default).
  uint32_t free_reserve_packs = 0;

  IndexMode index = IndexMode::kTree;
  uint64_t scalar_chunk_tokens = 256;  // LMCache's default chunk size
  ScalarObjects scalar_objects = ScalarObjects::kChunk;
  uint32_t layers = 1;  // L, keys per chunk when scalar_objects == kChunkLayer

  // Bounds.
  uint32_t max_nodes = 1 << 20;          // tree nodes, namespace roots included
  uint32_t max_records = 1 << 20;        // pack pieces held by tree nodes
  uint64_t max_arena_bytes = 256 << 20;  // live edge-label bytes (4 per token)
  uint32_t max_namespaces = 1024;
  uint32_t max_tickets = 4096;          // outstanding tickets
  uint32_t max_reservations = 1024;     // in-flight stores
  uint64_t max_query_tokens = 1 << 22;  // tokens per Lookup/Reserve/Invalidate call
  uint32_t max_ticket_records = 4096;   // records per ticket (<= kMaxTicketRecords)

  // Options for a store of `pack_slots` packs of `geometry`.
  static DirectoryOptions ForGeometry(const Geometry& geometry, uint32_t pack_slots);
  // kInvalidArgument naming the first bad field.
  Status Validate() const;
};

enum class ReserveOutcome : uint8_t {
  kReserved = 0,       // write `records`, then Publish or Abort `reservation_id`
  kJoined = 1,         // another store is writing [begin_tokens, end_tokens): write nothing
  kAlreadyStored = 2,  // the whole prefix is visible: write nothing
};

struct Reservation {
  ReserveOutcome outcome = ReserveOutcome::kAlreadyStored;
  uint64_t reservation_id = 0;      // kReserved: this store's; kJoined: the one to wait for
  uint64_t begin_tokens = 0;        // tokens already visible (the store skips them)
  uint64_t end_tokens = 0;          // kReserved: end of the reserved suffix (< query length when
                                    // capacity ran short); kJoined: end of the joined range
  std::vector<PackRecord> records;  // kReserved: one per new pack, pack_token_offset 0, in order
};

// The verified, endpoint-clipped records a claim hands to the transfer engine.
struct ClaimedRange {
  uint64_t ticket_id = 0;
  uint64_t endpoint_tokens = 0;
  std::vector<PackRecord> records;
};

enum class CancelOutcome : uint8_t {
  kNoTicket = 0,     // the request holds no ticket
  kCancelled = 1,    // an unclaimed ticket was dropped with its leases
  kClaimedKept = 2,  // the ticket is claimed: its leases stay until Release()
};

struct InvalidateResult {
  uint32_t packs_retired = 0;        // visible packs that lost all their tokens
  uint32_t packs_clipped = 0;        // visible packs that kept a head
  uint32_t reservations_doomed = 0;  // in-flight stores that lost tokens
};

// Visible pack as listed by ListPacks (inspect tools, snapshots, tests).
struct StoredPack {
  NamespaceId ns;
  PackRecord record;                  // path interval held (pack_token_offset 0), generation
  uint32_t parent_slot = UINT32_MAX;  // pack holding the position before token 0, if any
  uint32_t leases = 0;
};

struct DirectoryStats {
  // Work counters (monotonic).
  uint64_t lookups = 0;
  uint64_t lookup_hits = 0;       // lookups that registered a ticket
  uint64_t repeated_lookups = 0;  // identical repeats answered with the outstanding ticket
  uint64_t tokens_compared = 0;   // token pairs compared by tree walks
  uint64_t records_selected = 0;  // tree: pack pieces; scalar: keys (logical objects)
  uint64_t keys_built = 0;        // scalar: keys constructed (lookups and publications)
  uint64_t key_probes = 0;        // scalar: hash-map probes
  uint64_t leases_taken = 0;      // tree: one per pack per ticket; scalar: one per key
  uint64_t leases_released = 0;
  uint64_t tickets_issued = 0;
  uint64_t claims = 0;
  uint64_t claim_failures = 0;
  uint64_t releases = 0;
  uint64_t cancels = 0;
  uint64_t reservations = 0;
  uint64_t joins = 0;
  uint64_t publications = 0;
  uint64_t aborts = 0;  // aborted and doomed reservations
  uint64_t evictions = 0;
  uint64_t retirements = 0;
  uint64_t reclaims = 0;  // retired or evicted slots returned to free
  uint64_t invalidations = 0;
  // Gauges.
  uint32_t free_slots = 0;
  uint32_t reserved_slots = 0;
  uint32_t visible_slots = 0;
  uint32_t retired_slots = 0;
  uint32_t usable_slots = 0;
  uint32_t tree_nodes = 0;
  uint32_t tree_records = 0;
  uint64_t arena_bytes = 0;  // live label bytes
  uint32_t namespaces = 0;
  uint32_t outstanding_tickets = 0;
  uint32_t inflight_reservations = 0;
  uint64_t scalar_keys = 0;
};

// A visible pack that left the index, as DirectoryObserver::OnRemoved reports it.
struct RemovedPack {
  uint32_t slot = 0;
  uint64_t generation = 0;
  NamespaceId ns;
  uint64_t path_begin = 0;   // path position of the pack's token 0
  uint64_t kept_tokens = 0;  // 0: retired; else it stays visible holding
                             // [path_begin, path_begin + kept_tokens) (clipped to a head)
};

// Hears the directory's published-state changes (see the header comment). Both calls run under
// the directory's mutex: they must not call the directory, must not block on I/O, and must be
// short (they delay every lookup).
class DirectoryObserver {
 public:
  virtual ~DirectoryObserver() = default;
  // `packs` (path order, pack_token_offset 0) became visible; `path` holds the prefix tokens
  // [0, packs.back().path_token_end()).
  virtual void OnPublished(uint64_t reservation_id, const NamespaceId& ns,
                           std::span<const int32_t> path, std::span<const PackRecord> packs) = 0;
  // Visible pack (slot, generation) left the index (retired, or clipped to a head: then the
  // tokens beyond its head left, and a later removal of the head is reported again).
  virtual void OnRemoved(const RemovedPack& pack) = 0;
  // Whether free slot `slot` can be written at once: nothing this observer made durable still
  // describes the slot's previous pack (the journal: its removal is committed). Reserve()
  // prefers such slots (DirectoryOptions::free_reserve_packs). Called under the directory's
  // mutex, with the rules above.
  virtual bool SlotReusable(uint32_t /*slot*/) { return true; }
};

class Directory final : public RangeIndex {
 public:
  // kInvalidArgument for bad options.
  static Result<std::unique_ptr<Directory>> Create(const DirectoryOptions& options);
  ~Directory() override;
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  const DirectoryOptions& options() const { return options_; }
  uint64_t owner_epoch() const { return epoch_; }

  // ---- store side --------------------------------------------------------------------------
  // Plans the store of prefix `tokens` (see the header comment). Fails with kInvalidArgument
  // (empty or too long), kResourceExhausted (no slot obtainable even by eviction; node, record,
  // arena, namespace or reservation bound). A failure changes nothing except evictions already
  // made for slots.
  Result<Reservation> Reserve(const NamespaceId& ns, std::span<const int32_t> tokens) override;
  // Makes the reservation's packs visible (touching them in path order). kNotFound for an
  // unknown id; kAborted when it was doomed (its slots are freed; nothing becomes visible).
  Status Publish(uint64_t reservation_id) override;
  // Frees the reservation's slots and removes its packs from the tree. kNotFound if unknown.
  Status Abort(uint64_t reservation_id) override;
  bool IsInFlight(uint64_t reservation_id) const override;
  // Blocks until the reservation is published, aborted or unknown.
  void WaitForReservation(uint64_t reservation_id);

  // ---- read side ---------------------------------------------------------------------------
  // REQUIRES nothing; fails with kInvalidArgument (granularity 0, query too long, bad
  // envelope), kTicketReplaced (another query outstanding for the request id) or
  // kResourceExhausted (ticket table full). A miss returns an empty ticket (ticket_id 0)
  // that holds nothing and needs no cancel.
  Result<Ticket> Lookup(const NamespaceId& ns, std::span<const int32_t> tokens,
                        const Envelope& envelope, uint64_t granularity_tokens) override;
  // Verifies and claims (see the order of checks above). `tokens` must hold at least the
  // ticket's hit. On success returns the records clipped at endpoint_tokens.
  Result<ClaimedRange> Claim(const NamespaceId& ns, const Ticket& ticket, const Envelope& envelope,
                             std::span<const int32_t> tokens, uint64_t endpoint_tokens);
  Result<ClaimedRange> ClaimBytes(const NamespaceId& ns, std::span<const uint8_t> ticket_bytes,
                                  const Envelope& envelope, std::span<const int32_t> tokens,
                                  uint64_t endpoint_tokens) override;
  // Drops a claimed ticket's leases: call only when every read and scatter of its delivery has
  // drained. kNotFound for an unknown id, kFailedPrecondition for an unclaimed ticket (Cancel).
  Status Release(uint64_t ticket_id) override;
  // Drops the request's unclaimed ticket; a claimed one is kept for Release().
  CancelOutcome Cancel(std::string_view request_id) override;

  // ---- invalidation and eviction -----------------------------------------------------------
  // kInvalidArgument for empty or too long `tokens`. A prefix not in the tree changes nothing.
  Result<InvalidateResult> InvalidatePrefix(const NamespaceId& ns, std::span<const int32_t> tokens);
  // kInvalidArgument (slot out of range), kStaleGeneration (generation is not the slot's
  // current one), kFailedPrecondition (slot not visible).
  Result<InvalidateResult> InvalidatePack(uint32_t slot, uint64_t generation);
  // Evicts up to `max_packs` evictable packs in LRU order; returns how many.
  uint32_t EvictLru(uint32_t max_packs);
  // Evicts packs in LRU order (the normal policy) while more slots are in use than the capacity
  // bound allows (options().capacity_bytes / pack_bytes); returns how many. Used at open, when
  // the loaded index holds more packs than a store reopened with a smaller capacity keeps:
  // the packs that fit stay, wherever their slots lie in the pack file.
  uint32_t EvictOverCapacity();

  // ---- observers and journal -------------------------------------------------------------------
  static constexpr size_t kMaxObservers = 4;
  // Adds an observer, called after those added before. kInvalidArgument for null or one already
  // added, kResourceExhausted beyond kMaxObservers. REQUIRES no concurrent use of the directory;
  // the observer must outlive it or be removed first.
  Status AddObserver(DirectoryObserver* observer) EXCLUDES(mu_);
  // Removes an observer (no-op for one not added). REQUIRES no concurrent use.
  void RemoveObserver(DirectoryObserver* observer) EXCLUDES(mu_);
  // Replay of a journaled publication: pack `slot` at `generation` holds path tokens
  // [path.size() - stored_tokens, path.size()) and becomes visible (most recently used). A
  // visible older generation of the slot is removed first (its bytes were overwritten).
  // REQUIRES no reservation or ticket outstanding (an open, before anything is served).
  // kAlreadyExists: the slot is visible at exactly this generation (nothing changes).
  // kStaleGeneration: the slot is at a newer generation. kNotFound: the path before the pack is
  // not fully visible (its parent was dropped). kFailedPrecondition: another visible pack
  // already holds the pack's first token (a conflict; nothing changes). kInvalidArgument /
  // kGeometryMismatch / kResourceExhausted for impossible fields, a slot beyond the capacity
  // bound, or a full tree.
  Status ReplayPublish(const NamespaceId& ns, std::span<const int32_t> path, uint32_t slot,
                       uint64_t generation, uint64_t stored_tokens) EXCLUDES(mu_);

  // ---- introspection -----------------------------------------------------------------------
  DirectoryStats Stats() const override;
  SlotInfo Slot(uint32_t slot) const;  // REQUIRES slot < pack_slots
  std::vector<SlotInfo> Slots() const;
  std::vector<NamespaceId> Namespaces() const;
  // Visible packs of `ns` in tree preorder (parents before children).
  std::vector<StoredPack> ListPacks(const NamespaceId& ns) const;
  // Recomputes all internal invariants (tree, slot table, leases, scalar keys); kInternal on a
  // violation. For tests; O(state).
  Status CheckInvariants() const;

  // ---- persistence -------------------------------------------------------------------------
  // Snapshot of the published state (see header comment). Format in directory.cc, versioned,
  // ending in an XXH3 checksum.
  std::vector<uint8_t> Serialize() const EXCLUDES(mu_);
  // Serialize(), and `at_cut` called with every slot's state at the same instant, under the
  // directory's mutex (a journal checkpoint reads its cut and the digests there; it must not
  // call the directory).
  std::vector<uint8_t> SerializeCut(
      const std::function<void(const std::vector<SlotInfo>& slots)>& at_cut) const EXCLUDES(mu_);
  // Rebuilds a directory from Serialize() output taken with the same pack_slots and
  // tokens_per_pack. Its owner epoch is max(options.owner_epoch, snapshot epoch + 1).
  // kCorruption / kWrongVersion / kTruncated / kGeometryMismatch for bad input; bounded by the
  // options' limits.
  static Result<std::unique_ptr<Directory>> Deserialize(const DirectoryOptions& options,
                                                        std::span<const uint8_t> bytes);

 private:
  struct Outstanding {
    Ticket ticket;
    Digest128 suffix_digest;  // tokens [hit, query): with ticket.token_digest, the query identity
    bool claimed = false;
    std::vector<uint32_t> slot_leases;  // one entry per pack lease (repeats in scalar mode)
    std::vector<directory_internal::ScalarIndex::EntryRef> key_leases;
  };
  struct InFlight {
    NamespaceId ns;
    std::vector<uint32_t> slots;  // path order
    uint64_t begin_tokens = 0;
    uint64_t end_tokens = 0;
    bool doomed = false;
  };

  Directory(const DirectoryOptions& options, uint64_t owner_epoch);

  // Walks with the slot-state predicate; fills steps_.
  uint64_t WalkVisible(uint32_t root, std::span<const int32_t> tokens) REQUIRES(mu_);
  // Records for [0, hit) from pieces (path order), one per pack, with current generations.
  std::vector<PackRecord> CoalesceRecords(std::span<const directory_internal::Piece> pieces,
                                          uint64_t hit) const REQUIRES(mu_);
  void PiecesFromSteps(std::vector<directory_internal::Piece>* out) const REQUIRES(mu_);
  void PiecesFromPath(std::span<const uint32_t> path,
                      std::vector<directory_internal::Piece>* out) const REQUIRES(mu_);
  // Retires / clips / dooms everything the tree reported as affected.
  void ApplyRemoval(std::vector<uint32_t>* affected, InvalidateResult* result) REQUIRES(mu_);
  // Evicts the LRU evictable pack other than `exclude_slot`; false when there is none.
  bool EvictOne(uint32_t exclude_slot) REQUIRES(mu_);
  // Every observer's SlotReusable(slot).
  bool SlotReusable(uint32_t slot) REQUIRES(mu_);
  void DropTicket(Outstanding& t) REQUIRES(mu_);
  void FinishReservation(uint64_t id) REQUIRES(mu_);
  Result<ClaimedRange> ClaimLocked(const NamespaceId& ns, const Ticket& ticket,
                                   const Envelope& envelope, std::span<const int32_t> tokens,
                                   uint64_t endpoint_tokens) REQUIRES(mu_);
  std::vector<int32_t> PathTokens(std::span<const uint32_t> path) const REQUIRES(mu_);
  std::vector<uint8_t> SerializeLocked() const REQUIRES(mu_);
  void RebuildScalarKeys() REQUIRES(mu_);
  // Reads a snapshot after its header (checksum already verified) into this empty directory.
  Status LoadSnapshotBody(std::span<const uint8_t> bytes) EXCLUDES(mu_);

  const DirectoryOptions options_;
  const uint64_t epoch_;

  mutable Mutex mu_;
  CondVar reservation_done_;
  SlotTable slots_ GUARDED_BY(mu_);
  directory_internal::RadixTree tree_ GUARDED_BY(mu_);
  std::unique_ptr<directory_internal::ScalarIndex> scalar_ GUARDED_BY(mu_);
  std::vector<uint64_t> slot_reservation_ GUARDED_BY(mu_);  // per slot: in-flight store id
  std::unordered_map<uint64_t, InFlight> reservations_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Outstanding> tickets_ GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> ticket_by_request_ GUARDED_BY(mu_);
  uint64_t next_ticket_id_ GUARDED_BY(mu_) = 1;
  uint64_t next_reservation_id_ GUARDED_BY(mu_) = 1;
  DirectoryStats counters_ GUARDED_BY(mu_);
  std::vector<DirectoryObserver*> observers_ GUARDED_BY(mu_);  // in the order added
  // Scratch reused under the lock.
  std::vector<directory_internal::RadixTree::Step> steps_ GUARDED_BY(mu_);
  std::vector<uint32_t> affected_ GUARDED_BY(mu_);
};

}  // namespace rangekv
