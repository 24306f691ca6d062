#include "directory/directory.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/coding.h"
#include "base/digest.h"
#include "base/units.h"
#include "directory/snapshot_format.h"

namespace rangekv {

using directory_internal::kNoNode;
using directory_internal::kNoSlot;
using directory_internal::Piece;
using directory_internal::RadixTree;
using directory_internal::ScalarIndex;

namespace {

uint64_t UsableSlots(const DirectoryOptions& o) {
  if (o.capacity_bytes == 0) return o.pack_slots;
  return std::min<uint64_t>(o.pack_slots, o.capacity_bytes / o.pack_bytes);
}

std::string SlotName(uint32_t slot, uint64_t generation) {
  return "pack " + std::to_string(slot) + " generation " + std::to_string(generation);
}

}  // namespace

std::string_view IndexModeName(IndexMode mode) {
  return mode == IndexMode::kTree ? "tree" : "scalar";
}

DirectoryOptions DirectoryOptions::ForGeometry(const Geometry& geometry, uint32_t pack_slots) {
  DirectoryOptions o;
  o.pack_slots = pack_slots;
  o.tokens_per_pack = geometry.tokens_per_stripe;
  o.pack_bytes = geometry.pack_bytes;
  o.layers = geometry.layers;
  return o;
}

Status DirectoryOptions::Validate() const {
  auto bad = [](const std::string& what) { return InvalidArgument("directory options: " + what); };
  if (pack_slots == 0 || pack_slots >= kNoSlot) return bad("pack_slots must be in [1, 2^32-1)");
  if (tokens_per_pack == 0 || tokens_per_pack > UINT32_MAX) {
    return bad("tokens_per_pack must be in [1, 2^32]");
  }
  if (pack_bytes == 0) return bad("pack_bytes is 0");
  if (UsableSlots(*this) == 0) return bad("capacity_bytes holds no whole pack");
  if (owner_epoch == 0) return bad("owner_epoch is 0");
  if (generation_floor >= (uint64_t{1} << 63)) return bad("generation_floor must be below 2^63");
  if (scalar_chunk_tokens == 0) return bad("scalar_chunk_tokens is 0");
  if (layers == 0) return bad("layers is 0");
  if (max_nodes < 2 || max_records == 0 || max_arena_bytes < sizeof(int32_t) ||
      max_namespaces == 0 || max_tickets == 0 || max_reservations == 0 || max_query_tokens == 0 ||
      max_ticket_records == 0) {
    return bad("every bound must be positive");
  }
  if (max_ticket_records > kMaxTicketRecords) {
    return bad("max_ticket_records above " + std::to_string(kMaxTicketRecords));
  }
  return OkStatus();
}

Result<std::unique_ptr<Directory>> Directory::Create(const DirectoryOptions& options) {
  RANGEKV_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<Directory>(new Directory(options, options.owner_epoch));
}

Directory::Directory(const DirectoryOptions& options, uint64_t owner_epoch)
    : options_(options),
      epoch_(owner_epoch),
      slots_(options.pack_slots, static_cast<uint32_t>(UsableSlots(options))),
      tree_(RadixTree::Limits{options.max_nodes, options.max_records,
                              options.max_arena_bytes / sizeof(int32_t), options.max_namespaces},
            options.pack_slots, options.tokens_per_pack),
      slot_reservation_(options.pack_slots, 0) {
  slots_.SetGenerationFloor(options.generation_floor);
  if (options.index == IndexMode::kScalar) {
    const uint32_t keys = options.scalar_objects == ScalarObjects::kChunkLayer ? options.layers : 1;
    scalar_ = std::make_unique<ScalarIndex>(options.scalar_chunk_tokens, keys, options.pack_slots);
  }
}

Directory::~Directory() = default;

// ---- helpers --------------------------------------------------------------------------------

uint64_t Directory::WalkVisible(uint32_t root, std::span<const int32_t> tokens) {
  // The predicate runs inside Walk while mu_ is held; pointers keep the analysis intraprocedural.
  const SlotTable* slots = &slots_;
  const RadixTree* tree = &tree_;
  return tree_.Walk(
      root, tokens,
      [slots, tree](uint32_t node) {
        return slots->Get(tree->node(node).slot).state == SlotState::kVisible;
      },
      &steps_, &counters_.tokens_compared);
}

void Directory::PiecesFromSteps(std::vector<Piece>* out) const {
  out->clear();
  for (const RadixTree::Step& s : steps_) {
    const RadixTree::Node& n = tree_.node(s.node);
    out->push_back({n.slot, n.depth_begin, n.pack_offset, s.matched});
  }
}

void Directory::PiecesFromPath(std::span<const uint32_t> path, std::vector<Piece>* out) const {
  out->clear();
  for (uint32_t i : path) {
    const RadixTree::Node& n = tree_.node(i);
    if (!out->empty() && out->back().slot == n.slot) {
      out->back().tokens += n.label_len;  // same pack, contiguous by the tree's invariants
    } else {
      out->push_back({n.slot, n.depth_begin, n.pack_offset, n.label_len});
    }
  }
}

std::vector<int32_t> Directory::PathTokens(std::span<const uint32_t> path) const {
  std::vector<int32_t> tokens;
  for (uint32_t i : path) {
    std::span<const int32_t> label = tree_.Label(i);
    tokens.insert(tokens.end(), label.begin(), label.end());
  }
  return tokens;
}

std::vector<PackRecord> Directory::CoalesceRecords(std::span<const Piece> pieces,
                                                   uint64_t hit) const {
  std::vector<PackRecord> out;
  for (const Piece& p : pieces) {
    if (p.path_begin >= hit) break;
    const uint64_t tokens = std::min(p.tokens, hit - p.path_begin);
    if (!out.empty()) {
      PackRecord& b = out.back();
      if (b.pack_slot == p.slot && b.path_token_end() == p.path_begin &&
          b.pack_token_offset + b.tokens == p.pack_offset) {
        b.tokens += tokens;
        continue;
      }
    }
    out.push_back(
        PackRecord{p.slot, slots_.Get(p.slot).generation, p.path_begin, p.pack_offset, tokens});
  }
  return out;
}

void Directory::ApplyRemoval(std::vector<uint32_t>* affected, InvalidateResult* result) {
  std::sort(affected->begin(), affected->end());
  affected->erase(std::unique(affected->begin(), affected->end()), affected->end());
  std::vector<uint64_t> doomed;
  for (uint32_t slot : *affected) {
    const RadixTree::Pack& pk = tree_.pack(slot);
    const SlotState state = slots_.Get(slot).state;
    if (state == SlotState::kReserved) {
      doomed.push_back(slot_reservation_[slot]);
      continue;
    }
    RANGEKV_CHECK(state == SlotState::kVisible);
    if (!observers_.empty()) {
      const RemovedPack removed{slot, slots_.Get(slot).generation, pk.ns, pk.path_begin,
                                pk.node_count == 0 ? 0 : pk.covered_tokens};
      for (DirectoryObserver* o : observers_) o->OnRemoved(removed);
    }
    if (pk.node_count == 0) {
      if (scalar_) scalar_->RemoveFrom(slot, pk.path_begin);
      result->packs_retired++;
      counters_.retirements++;
      if (slots_.Retire(slot)) counters_.reclaims++;
    } else {
      if (scalar_) scalar_->RemoveFrom(slot, pk.path_begin + pk.covered_tokens);
      result->packs_clipped++;
    }
  }
  for (uint64_t id : doomed) {
    auto it = reservations_.find(id);
    RANGEKV_CHECK(it != reservations_.end());
    InFlight& r = it->second;
    if (r.doomed) continue;
    r.doomed = true;
    result->reservations_doomed++;
    // The rest of the reservation's chain leaves the tree now; its slots stay reserved (the
    // writer still owns them) until Publish or Abort frees them. Nothing hangs below reserved
    // nodes, so this removal touches only the reservation's own packs.
    const uint32_t first = tree_.pack(r.slots[0]).first_node;
    if (first != kNoNode) {
      std::vector<uint32_t> own;
      tree_.RemoveSubtree(first, &own);
      for (uint32_t s : own) RANGEKV_CHECK(slot_reservation_[s] == id);
    }
  }
}

bool Directory::SlotReusable(uint32_t slot) {
  for (DirectoryObserver* o : observers_) {
    if (!o->SlotReusable(slot)) return false;
  }
  return true;
}

bool Directory::EvictOne(uint32_t exclude_slot) {
  const SlotTable* slots = &slots_;
  const RadixTree* tree = &tree_;
  std::optional<uint32_t> victim = slots_.FindLru([slots, tree, exclude_slot](uint32_t s) {
    return s != exclude_slot && slots->Get(s).leases == 0 && tree->pack(s).foreign_children == 0;
  });
  if (!victim) return false;
  affected_.clear();
  tree_.RemoveSubtree(tree_.pack(*victim).first_node, &affected_);
  InvalidateResult ignored;
  ApplyRemoval(&affected_, &ignored);
  counters_.evictions++;
  return true;
}

void Directory::DropTicket(Outstanding& t) {
  for (uint32_t slot : t.slot_leases) {
    if (slots_.DropLease(slot)) counters_.reclaims++;
  }
  if (scalar_) {
    for (const ScalarIndex::EntryRef& ref : t.key_leases) scalar_->DropLease(ref);
    counters_.leases_released += t.key_leases.size();
  } else {
    counters_.leases_released += t.slot_leases.size();
  }
  ticket_by_request_.erase(t.ticket.envelope.request_id);
}

void Directory::FinishReservation(uint64_t id) {
  auto it = reservations_.find(id);
  for (uint32_t slot : it->second.slots) slot_reservation_[slot] = 0;
  reservations_.erase(it);
  reservation_done_.NotifyAll();
}

// ---- store side -----------------------------------------------------------------------------

Result<Reservation> Directory::Reserve(const NamespaceId& ns, std::span<const int32_t> tokens) {
  const uint64_t n = tokens.size();
  if (n == 0) return InvalidArgument("reserve: empty prefix");
  if (n > options_.max_query_tokens) {
    return InvalidArgument("reserve: " + std::to_string(n) + " tokens exceed max_query_tokens " +
                           std::to_string(options_.max_query_tokens));
  }
  MutexLock lock(mu_);
  uint32_t root = kNoNode;
  uint64_t visible = 0;  // h: tokens held by visible packs
  uint32_t join_slot = kNoSlot;
  uint64_t matched = 0;  // j: tokens held by visible or reserved packs
  auto walk = [&]() REQUIRES(mu_) {
    root = tree_.FindRoot(ns);
    visible = matched = 0;
    join_slot = kNoSlot;
    steps_.clear();
    if (root == kNoNode) return;
    uint64_t compared = 0;
    matched = tree_.Walk(
        root, tokens, [](uint32_t) { return true; }, &steps_, &compared);
    for (const RadixTree::Step& s : steps_) {
      const uint32_t slot = tree_.node(s.node).slot;
      if (slots_.Get(slot).state != SlotState::kVisible) {
        join_slot = slot;
        break;
      }
      visible += s.matched;
    }
  };
  walk();
  if (matched > visible) {
    counters_.joins++;
    Reservation out;
    out.outcome = ReserveOutcome::kJoined;
    out.reservation_id = slot_reservation_[join_slot];
    out.begin_tokens = visible;
    out.end_tokens = matched;
    return out;
  }
  if (visible == n) {
    Reservation out;
    out.outcome = ReserveOutcome::kAlreadyStored;
    out.begin_tokens = out.end_tokens = n;
    return out;
  }
  if (reservations_.size() >= options_.max_reservations) {
    return ResourceExhausted("reserve: " + std::to_string(reservations_.size()) +
                             " stores in flight (max_reservations)");
  }
  const uint64_t T = options_.tokens_per_pack;
  const uint64_t packs_needed = (n - visible + T - 1) / T;
  auto check_capacity = [&]() REQUIRES(mu_) {
    bool split = false;
    if (!steps_.empty()) {
      const RadixTree::Step& last = steps_.back();
      split = last.matched < tree_.node(last.node).label_len;
    }
    return tree_.CheckCapacity(packs_needed + (split ? 1 : 0) + (root == kNoNode ? 1 : 0),
                               packs_needed + (split ? 1 : 0), n - visible, root == kNoNode);
  };
  RANGEKV_RETURN_IF_ERROR(check_capacity());

  // Slots: evict LRU packs as needed (and the free reserve's worth ahead of need), never the
  // pack the new tail continues.
  const uint32_t exclude = steps_.empty() ? kNoSlot : tree_.node(steps_.back().node).slot;
  bool evicted = false;
  const uint64_t free_target = packs_needed + options_.free_reserve_packs;
  while (slots_.Count(SlotState::kFree) < free_target && EvictOne(exclude)) evicted = true;
  const uint64_t packs = std::min<uint64_t>(packs_needed, slots_.Count(SlotState::kFree));
  if (packs == 0) {
    return ResourceExhausted(
        "reserve: no pack slot can be freed (" + std::to_string(slots_.usable()) +
        " usable: " + std::to_string(slots_.Count(SlotState::kReserved)) + " reserved, " +
        std::to_string(slots_.Count(SlotState::kRetired)) + " retired with leases, " +
        std::to_string(slots_.Count(SlotState::kVisible)) + " visible but leased or depended on)");
  }
  if (evicted) {
    // Evictions never touch this path's packs, but they may merge nodes or drop the root.
    walk();
    RANGEKV_CHECK(visible == matched);
    RANGEKV_RETURN_IF_ERROR(check_capacity());
  }
  const uint64_t end = std::min<uint64_t>(n, visible + packs * T);
  if (root == kNoNode) root = tree_.EnsureRoot(ns);
  uint32_t parent = root;
  if (!steps_.empty()) {
    const RadixTree::Step last = steps_.back();
    parent = last.node;
    if (last.matched < tree_.node(last.node).label_len) tree_.Split(last.node, last.matched);
  }
  const uint64_t id = next_reservation_id_++;
  InFlight flight;
  flight.ns = ns;
  flight.begin_tokens = visible;
  flight.end_tokens = end;
  Reservation out;
  out.outcome = ReserveOutcome::kReserved;
  out.reservation_id = id;
  out.begin_tokens = visible;
  out.end_tokens = end;
  // The slot table calls this while Reserve holds mu_ (the analysis cannot see through it).
  auto reusable = [this](uint32_t s) NO_THREAD_SAFETY_ANALYSIS { return SlotReusable(s); };
  for (uint64_t pos = visible; pos < end; pos += T) {
    const uint32_t slot = *slots_.ReserveLowestFreePreferring(reusable);
    const uint64_t len = std::min(T, end - pos);
    parent = tree_.Attach(parent, tokens.subspan(pos, len), slot, 0);
    slot_reservation_[slot] = id;
    flight.slots.push_back(slot);
    out.records.push_back(PackRecord{slot, slots_.Get(slot).generation, pos, 0, len});
  }
  reservations_.emplace(id, std::move(flight));
  counters_.reservations++;
  return out;
}

Status Directory::Publish(uint64_t reservation_id) {
  MutexLock lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return NotFound("publish: reservation " + std::to_string(reservation_id) + " is not in flight");
  }
  InFlight& r = it->second;
  if (r.doomed) {
    for (uint32_t slot : r.slots) slots_.ReleaseReserved(slot);
    counters_.aborts++;
    FinishReservation(reservation_id);
    return Status(StatusCode::kAborted, "publish: reservation " + std::to_string(reservation_id) +
                                            " lost tokens to an invalidation; nothing published");
  }
  for (uint32_t slot : r.slots) slots_.MakeVisible(slot);  // path order: the deepest is newest
  if (scalar_) {
    std::vector<uint32_t> path;
    tree_.PathTo(tree_.pack(r.slots.back()).first_node, &path);
    std::vector<Piece> pieces;
    PiecesFromPath(path, &pieces);
    std::vector<int32_t> tokens = PathTokens(path);
    RANGEKV_CHECK(tokens.size() == r.end_tokens);
    scalar_->InsertChunks(r.ns, tokens, pieces, r.begin_tokens, r.end_tokens,
                          &counters_.keys_built);
  }
  counters_.publications++;
  if (!observers_.empty()) {
    std::vector<uint32_t> path;
    tree_.PathTo(tree_.pack(r.slots.back()).first_node, &path);
    std::vector<int32_t> tokens = PathTokens(path);
    std::vector<PackRecord> packs;
    packs.reserve(r.slots.size());
    for (uint32_t slot : r.slots) {
      const RadixTree::Pack& pk = tree_.pack(slot);
      packs.push_back(
          PackRecord{slot, slots_.Get(slot).generation, pk.path_begin, 0, pk.covered_tokens});
    }
    RANGEKV_CHECK(!packs.empty() && tokens.size() >= packs.back().path_token_end());
    tokens.resize(packs.back().path_token_end());
    for (DirectoryObserver* o : observers_) o->OnPublished(reservation_id, r.ns, tokens, packs);
  }
  FinishReservation(reservation_id);
  return OkStatus();
}

Status Directory::Abort(uint64_t reservation_id) {
  MutexLock lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return NotFound("abort: reservation " + std::to_string(reservation_id) + " is not in flight");
  }
  InFlight& r = it->second;
  if (!r.doomed) {
    std::vector<uint32_t> own;
    tree_.RemoveSubtree(tree_.pack(r.slots[0]).first_node, &own);
  }
  for (uint32_t slot : r.slots) slots_.ReleaseReserved(slot);
  counters_.aborts++;
  FinishReservation(reservation_id);
  return OkStatus();
}

bool Directory::IsInFlight(uint64_t reservation_id) const {
  MutexLock lock(mu_);
  return reservations_.contains(reservation_id);
}

void Directory::WaitForReservation(uint64_t reservation_id) {
  MutexLock lock(mu_);
  while (reservations_.contains(reservation_id)) reservation_done_.Wait(lock);
}

// ---- read side ------------------------------------------------------------------------------

Result<Ticket> Directory::Lookup(const NamespaceId& ns, std::span<const int32_t> tokens,
                                 const Envelope& envelope, uint64_t granularity_tokens) {
  RANGEKV_RETURN_IF_ERROR(ValidateEnvelope(envelope));
  if (granularity_tokens == 0) return InvalidArgument("lookup: reuse granularity is 0");
  const uint64_t n = tokens.size();
  if (n > options_.max_query_tokens) {
    return InvalidArgument("lookup: " + std::to_string(n) + " tokens exceed max_query_tokens " +
                           std::to_string(options_.max_query_tokens));
  }
  MutexLock lock(mu_);
  counters_.lookups++;
  if (auto req = ticket_by_request_.find(envelope.request_id); req != ticket_by_request_.end()) {
    const Outstanding& o = tickets_.at(req->second);
    const Ticket& t = o.ticket;
    const bool identical = t.ns == ns && t.envelope == envelope &&
                           t.granularity_tokens == granularity_tokens && t.query_tokens == n &&
                           TokenDigest(tokens.first(t.hit_tokens)) == t.token_digest &&
                           TokenDigest(tokens.subspan(t.hit_tokens)) == o.suffix_digest;
    if (identical) {
      counters_.repeated_lookups++;
      return t;
    }
    return Status(StatusCode::kTicketReplaced,
                  "lookup: request '" + envelope.request_id + "' holds ticket " +
                      std::to_string(t.ticket_id) +
                      " for another query; cancel or release it before looking up again");
  }

  std::vector<Piece> pieces;
  std::vector<uint32_t> found;  // scalar: entries, keys_per_chunk per chunk
  uint64_t matched = 0;
  const uint32_t root = tree_.FindRoot(ns);
  if (root != kNoNode) {
    if (scalar_) {
      const uint64_t chunks =
          scalar_->Probe(ns, tokens, &found, &counters_.keys_built, &counters_.key_probes);
      matched = chunks * scalar_->chunk_tokens();
      for (size_t i = 0; i < found.size(); i += scalar_->keys_per_chunk()) {
        const auto& ps = scalar_->entry(found[i]).pieces;
        pieces.insert(pieces.end(), ps.begin(), ps.end());
      }
    } else {
      matched = WalkVisible(root, tokens);
      PiecesFromSteps(&pieces);
    }
  }
  const uint64_t cap = n == 0 ? 0 : n - 1;  // never promise the last prompt token
  uint64_t hit = std::min(matched, cap) / granularity_tokens * granularity_tokens;
  std::vector<PackRecord> records = CoalesceRecords(pieces, hit);
  if (records.size() > options_.max_ticket_records) {
    hit = records[options_.max_ticket_records - 1].path_token_end() / granularity_tokens *
          granularity_tokens;
    records = CoalesceRecords(pieces, hit);
  }

  Ticket t;
  t.owner_epoch = epoch_;
  t.ns = ns;
  t.envelope = envelope;
  t.granularity_tokens = granularity_tokens;
  t.query_tokens = n;
  t.hit_tokens = hit;
  if (hit == 0) {
    t.token_digest = TokenDigest({});
    return t;
  }
  if (tickets_.size() >= options_.max_tickets) {
    return ResourceExhausted("lookup: " + std::to_string(tickets_.size()) +
                             " tickets outstanding (max_tickets)");
  }
  t.ticket_id = next_ticket_id_++;
  t.token_digest = TokenDigest(tokens.first(hit));
  t.records = std::move(records);

  Outstanding o;
  o.suffix_digest = TokenDigest(tokens.subspan(hit));
  if (scalar_) {
    // One lease per key: each selected key (chunk, or chunk x layer) leases the packs holding
    // its tokens below the hit.
    const uint32_t k = scalar_->keys_per_chunk();
    const uint64_t chunks = (hit + scalar_->chunk_tokens() - 1) / scalar_->chunk_tokens();
    for (uint64_t i = 0; i < chunks * k; ++i) {
      const ScalarIndex::Entry& e = scalar_->entry(found[i]);
      scalar_->AddLease(found[i]);
      o.key_leases.push_back({found[i], e.serial});
      for (const Piece& p : e.pieces) {
        if (p.path_begin >= hit) break;
        slots_.AddLease(p.slot);
        o.slot_leases.push_back(p.slot);
      }
    }
    counters_.records_selected += o.key_leases.size();
    counters_.leases_taken += o.key_leases.size();
  } else {
    for (const PackRecord& r : t.records) {
      slots_.AddLease(r.pack_slot);
      o.slot_leases.push_back(r.pack_slot);
    }
    counters_.records_selected += t.records.size();
    counters_.leases_taken += t.records.size();
  }
  for (const PackRecord& r : t.records) slots_.Touch(r.pack_slot);
  counters_.lookup_hits++;
  counters_.tickets_issued++;
  o.ticket = t;
  ticket_by_request_.emplace(envelope.request_id, t.ticket_id);
  tickets_.emplace(t.ticket_id, std::move(o));
  return t;
}

Result<ClaimedRange> Directory::ClaimLocked(const NamespaceId& ns, const Ticket& ticket,
                                            const Envelope& envelope,
                                            std::span<const int32_t> tokens,
                                            uint64_t endpoint_tokens) {
  if (ticket.owner_epoch != epoch_) {
    return Status(StatusCode::kForeignOwner,
                  "claim: ticket of owner epoch " + std::to_string(ticket.owner_epoch) +
                      ", this directory is epoch " + std::to_string(epoch_));
  }
  auto it = tickets_.find(ticket.ticket_id);
  if (ticket.ticket_id == 0 || it == tickets_.end()) {
    return NotFound("claim: ticket " + std::to_string(ticket.ticket_id) +
                    " is not outstanding (released, cancelled, empty or never issued)");
  }
  Outstanding& o = it->second;
  const Ticket& t = o.ticket;
  if (!(t == ticket)) {
    return Status(StatusCode::kCorruptTicket,
                  "claim: ticket " + std::to_string(t.ticket_id) + " differs from the one issued");
  }
  if (!(ns == t.ns)) {
    return Status(StatusCode::kNamespaceMismatch,
                  "claim: ticket of namespace " + t.ns.ToHex() + ", claimed in " + ns.ToHex());
  }
  if (!(envelope == t.envelope)) {
    return Status(
        StatusCode::kForeignOwner,
        "claim: ticket issued to request '" + t.envelope.request_id + "' (session " +
            std::to_string(t.envelope.session) + ", attempt " + std::to_string(t.envelope.attempt) +
            ", rank " + std::to_string(t.envelope.rank) + "), claimed by request '" +
            envelope.request_id + "' (session " + std::to_string(envelope.session) + ", attempt " +
            std::to_string(envelope.attempt) + ", rank " + std::to_string(envelope.rank) + ")");
  }
  if (o.claimed) {
    return FailedPrecondition("claim: ticket " + std::to_string(t.ticket_id) + " already claimed");
  }
  if (endpoint_tokens > t.hit_tokens) {
    return Status(StatusCode::kEndpointBeyondTicket,
                  "claim: endpoint " + std::to_string(endpoint_tokens) + " beyond the ticket's " +
                      std::to_string(t.hit_tokens) + " tokens");
  }
  if (tokens.size() < t.hit_tokens ||
      !(TokenDigest(tokens.first(t.hit_tokens)) == t.token_digest)) {
    return Status(StatusCode::kTokenMismatch,
                  "claim: the claimed tokens differ from the ticket's first " +
                      std::to_string(t.hit_tokens) + " tokens");
  }
  for (const PackRecord& r : t.records) {
    const SlotInfo& info = slots_.Get(r.pack_slot);
    if (info.state != SlotState::kVisible || info.generation != r.generation ||
        tree_.pack(r.pack_slot).covered_tokens < r.pack_token_offset + r.tokens) {
      return Status(StatusCode::kStaleGeneration,
                    "claim: " + SlotName(r.pack_slot, r.generation) +
                        " was invalidated or evicted since the lookup (now " +
                        std::string(SlotStateName(info.state)) + ", generation " +
                        std::to_string(info.generation) + ")");
    }
  }
  o.claimed = true;
  ClaimedRange out;
  out.ticket_id = t.ticket_id;
  out.endpoint_tokens = endpoint_tokens;
  out.records = ClipRecords(t.records, endpoint_tokens);
  return out;
}

Result<ClaimedRange> Directory::Claim(const NamespaceId& ns, const Ticket& ticket,
                                      const Envelope& envelope, std::span<const int32_t> tokens,
                                      uint64_t endpoint_tokens) {
  MutexLock lock(mu_);
  Result<ClaimedRange> r = ClaimLocked(ns, ticket, envelope, tokens, endpoint_tokens);
  if (r.ok()) {
    counters_.claims++;
  } else {
    counters_.claim_failures++;
  }
  return r;
}

Result<ClaimedRange> Directory::ClaimBytes(const NamespaceId& ns,
                                           std::span<const uint8_t> ticket_bytes,
                                           const Envelope& envelope,
                                           std::span<const int32_t> tokens,
                                           uint64_t endpoint_tokens) {
  Result<Ticket> ticket = DecodeTicket(ticket_bytes);
  if (!ticket.ok()) {
    MutexLock lock(mu_);
    counters_.claim_failures++;
    return ticket.status();
  }
  return Claim(ns, *ticket, envelope, tokens, endpoint_tokens);
}

Status Directory::Release(uint64_t ticket_id) {
  MutexLock lock(mu_);
  auto it = tickets_.find(ticket_id);
  if (it == tickets_.end()) {
    return NotFound("release: ticket " + std::to_string(ticket_id) + " is not outstanding");
  }
  if (!it->second.claimed) {
    return FailedPrecondition("release: ticket " + std::to_string(ticket_id) +
                              " was never claimed; cancel it instead");
  }
  DropTicket(it->second);
  tickets_.erase(it);
  counters_.releases++;
  return OkStatus();
}

CancelOutcome Directory::Cancel(std::string_view request_id) {
  MutexLock lock(mu_);
  auto req = ticket_by_request_.find(std::string(request_id));
  if (req == ticket_by_request_.end()) return CancelOutcome::kNoTicket;
  auto it = tickets_.find(req->second);
  if (it->second.claimed) return CancelOutcome::kClaimedKept;
  DropTicket(it->second);
  tickets_.erase(it);
  counters_.cancels++;
  return CancelOutcome::kCancelled;
}

// ---- invalidation and eviction --------------------------------------------------------------

Result<InvalidateResult> Directory::InvalidatePrefix(const NamespaceId& ns,
                                                     std::span<const int32_t> tokens) {
  const uint64_t n = tokens.size();
  if (n == 0) return InvalidArgument("invalidate: empty prefix");
  if (n > options_.max_query_tokens) {
    return InvalidArgument("invalidate: " + std::to_string(n) + " tokens exceed max_query_tokens");
  }
  MutexLock lock(mu_);
  counters_.invalidations++;
  InvalidateResult result;
  const uint32_t root = tree_.FindRoot(ns);
  if (root == kNoNode) return result;
  uint64_t compared = 0;
  const uint64_t matched = tree_.Walk(
      root, tokens, [](uint32_t) { return true; }, &steps_, &compared);
  if (matched < n) return result;
  // Position n-1 is the last matched token of the last node entered.
  const RadixTree::Step last = steps_.back();
  affected_.clear();
  if (last.matched == 1) {
    tree_.RemoveSubtree(last.node, &affected_);
  } else {
    tree_.Truncate(last.node, last.matched - 1, &affected_);
  }
  ApplyRemoval(&affected_, &result);
  return result;
}

Result<InvalidateResult> Directory::InvalidatePack(uint32_t slot, uint64_t generation) {
  if (slot >= options_.pack_slots) {
    return InvalidArgument("invalidate: pack slot " + std::to_string(slot) + " out of range");
  }
  MutexLock lock(mu_);
  const SlotInfo& info = slots_.Get(slot);
  if (info.generation != generation) {
    return Status(StatusCode::kStaleGeneration, "invalidate: " + SlotName(slot, generation) +
                                                    " is stale (now generation " +
                                                    std::to_string(info.generation) + ")");
  }
  if (info.state != SlotState::kVisible) {
    return FailedPrecondition("invalidate: " + SlotName(slot, generation) + " is " +
                              std::string(SlotStateName(info.state)));
  }
  counters_.invalidations++;
  InvalidateResult result;
  affected_.clear();
  tree_.RemoveSubtree(tree_.pack(slot).first_node, &affected_);
  ApplyRemoval(&affected_, &result);
  return result;
}

uint32_t Directory::EvictOverCapacity() {
  MutexLock lock(mu_);
  uint32_t n = 0;
  while (slots_.InUse() > slots_.usable() && EvictOne(kNoSlot)) ++n;
  return n;
}

uint32_t Directory::EvictLru(uint32_t max_packs) {
  MutexLock lock(mu_);
  uint32_t n = 0;
  while (n < max_packs && EvictOne(kNoSlot)) ++n;
  return n;
}

// ---- journal ---------------------------------------------------------------------------------

Status Directory::AddObserver(DirectoryObserver* observer) {
  if (observer == nullptr) return InvalidArgument("add observer: null");
  MutexLock lock(mu_);
  if (std::find(observers_.begin(), observers_.end(), observer) != observers_.end()) {
    return InvalidArgument("add observer: already added");
  }
  if (observers_.size() >= kMaxObservers) {
    return ResourceExhausted("add observer: " + std::to_string(kMaxObservers) +
                             " observers already");
  }
  observers_.push_back(observer);
  return OkStatus();
}

void Directory::RemoveObserver(DirectoryObserver* observer) {
  MutexLock lock(mu_);
  std::erase(observers_, observer);
}

Status Directory::ReplayPublish(const NamespaceId& ns, std::span<const int32_t> path, uint32_t slot,
                                uint64_t generation, uint64_t stored_tokens) {
  const uint64_t T = options_.tokens_per_pack;
  const uint64_t n = path.size();
  if (slot >= options_.pack_slots || generation == 0 || stored_tokens == 0 || stored_tokens > T ||
      stored_tokens > n || n > options_.max_query_tokens) {
    return InvalidArgument("replay: impossible publication of " + SlotName(slot, generation));
  }
  const uint64_t begin = n - stored_tokens;
  MutexLock lock(mu_);
  if (!reservations_.empty() || !tickets_.empty()) {
    return FailedPrecondition("replay: the directory is in use");
  }
  const SlotInfo info = slots_.Get(slot);
  if (info.generation > generation) {
    return Status(StatusCode::kStaleGeneration, "replay: " + SlotName(slot, generation) +
                                                    " is stale (now generation " +
                                                    std::to_string(info.generation) + ")");
  }
  if (info.state == SlotState::kVisible && info.generation == generation) {
    return Status(StatusCode::kAlreadyExists,
                  "replay: " + SlotName(slot, generation) + " is visible already");
  }
  RANGEKV_CHECK(info.state == SlotState::kVisible || info.state == SlotState::kFree);
  if (info.state == SlotState::kVisible) {
    // The slot was reused: the older pack's bytes are gone, and so is everything below it.
    affected_.clear();
    tree_.RemoveSubtree(tree_.pack(slot).first_node, &affected_);
    InvalidateResult ignored;
    ApplyRemoval(&affected_, &ignored);
  }
  uint32_t root = tree_.FindRoot(ns);
  uint64_t matched = 0;
  steps_.clear();
  if (root != kNoNode) {
    uint64_t compared = 0;
    matched = tree_.Walk(
        root, path, [](uint32_t) { return true; }, &steps_, &compared);
  }
  if (matched < begin) {
    return NotFound("replay: " + SlotName(slot, generation) + " continues a path of " +
                    std::to_string(begin) + " tokens of which only " + std::to_string(matched) +
                    " are visible");
  }
  if (matched > begin) {
    return FailedPrecondition("replay: the first token of " + SlotName(slot, generation) +
                              " is held by another visible pack");
  }
  bool split = false;
  if (!steps_.empty()) {
    const RadixTree::Step& last = steps_.back();
    split = last.matched < tree_.node(last.node).label_len;
  }
  RANGEKV_RETURN_IF_ERROR(tree_.CheckCapacity(1 + (split ? 1 : 0) + (root == kNoNode ? 1 : 0),
                                              1 + (split ? 1 : 0), stored_tokens, root == kNoNode));
  if (root == kNoNode) root = tree_.EnsureRoot(ns);
  uint32_t parent = root;
  if (!steps_.empty()) {
    const RadixTree::Step last = steps_.back();
    parent = last.node;
    if (last.matched < tree_.node(last.node).label_len) tree_.Split(last.node, last.matched);
  }
  const uint32_t node = tree_.Attach(parent, path.subspan(begin, stored_tokens), slot, 0);
  slots_.RestoreVisible(slot, generation);
  if (scalar_) {
    std::vector<uint32_t> nodes;
    tree_.PathTo(node, &nodes);
    std::vector<Piece> pieces;
    PiecesFromPath(nodes, &pieces);
    scalar_->InsertChunks(ns, path, pieces, begin, n, &counters_.keys_built);
  }
  return OkStatus();
}

// ---- introspection --------------------------------------------------------------------------

DirectoryStats Directory::Stats() const {
  MutexLock lock(mu_);
  DirectoryStats s = counters_;
  s.free_slots = slots_.Count(SlotState::kFree);
  s.reserved_slots = slots_.Count(SlotState::kReserved);
  s.visible_slots = slots_.Count(SlotState::kVisible);
  s.retired_slots = slots_.Count(SlotState::kRetired);
  s.usable_slots = slots_.usable();
  s.tree_nodes = tree_.nodes_in_use();
  s.tree_records = tree_.records();
  s.arena_bytes = tree_.live_tokens() * sizeof(int32_t);
  s.namespaces = static_cast<uint32_t>(tree_.roots().size());
  s.outstanding_tickets = static_cast<uint32_t>(tickets_.size());
  s.inflight_reservations = static_cast<uint32_t>(reservations_.size());
  s.scalar_keys = scalar_ ? scalar_->size() : 0;
  return s;
}

SlotInfo Directory::Slot(uint32_t slot) const {
  MutexLock lock(mu_);
  return slots_.Get(slot);
}

std::vector<SlotInfo> Directory::Slots() const {
  MutexLock lock(mu_);
  std::vector<SlotInfo> out;
  for (uint32_t s = 0; s < slots_.size(); ++s) out.push_back(slots_.Get(s));
  return out;
}

std::vector<NamespaceId> Directory::Namespaces() const {
  MutexLock lock(mu_);
  std::vector<NamespaceId> out;
  for (const auto& [ns, root] : tree_.roots()) out.push_back(ns);
  return out;
}

std::vector<StoredPack> Directory::ListPacks(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  std::vector<StoredPack> out;
  const uint32_t root = tree_.FindRoot(ns);
  if (root == kNoNode) return out;
  std::vector<uint32_t> stack{root};
  while (!stack.empty()) {
    const uint32_t y = stack.back();
    stack.pop_back();
    const RadixTree::Node& n = tree_.node(y);
    for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) stack.push_back(*it);
    if (n.slot == kNoSlot || tree_.pack(n.slot).first_node != y) continue;
    const SlotInfo& info = slots_.Get(n.slot);
    if (info.state != SlotState::kVisible) continue;
    StoredPack p;
    p.ns = ns;
    p.record =
        PackRecord{n.slot, info.generation, n.depth_begin, 0, tree_.pack(n.slot).covered_tokens};
    p.parent_slot = tree_.node(n.parent).slot == kNoSlot ? UINT32_MAX : tree_.node(n.parent).slot;
    p.leases = info.leases;
    out.push_back(p);
  }
  return out;
}

Status Directory::CheckInvariants() const {
  MutexLock lock(mu_);
  RANGEKV_RETURN_IF_ERROR(tree_.CheckInvariants());
  auto fail = [](const std::string& what) { return Internal("directory invariant: " + what); };
  std::vector<uint32_t> leases(slots_.size(), 0);
  for (const auto& [id, o] : tickets_) {
    for (uint32_t s : o.slot_leases) leases[s]++;
    auto req = ticket_by_request_.find(o.ticket.envelope.request_id);
    if (req == ticket_by_request_.end() || req->second != id) return fail("request map");
  }
  if (ticket_by_request_.size() != tickets_.size()) return fail("request map size");
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const SlotInfo& info = slots_.Get(s);
    const RadixTree::Pack& pk = tree_.pack(s);
    const std::string name = "slot " + std::to_string(s) + ": ";
    if (info.leases != leases[s]) return fail(name + "lease count");
    switch (info.state) {
      case SlotState::kFree:
      case SlotState::kRetired:
        if (pk.node_count != 0) return fail(name + "free/retired slot in the tree");
        if (slot_reservation_[s] != 0) return fail(name + "stale reservation");
        if (info.state == SlotState::kRetired && info.leases == 0) {
          return fail(name + "retired without leases");
        }
        break;
      case SlotState::kVisible:
        if (pk.node_count == 0) return fail(name + "visible slot not in the tree");
        if (slot_reservation_[s] != 0) return fail(name + "visible slot in a reservation");
        break;
      case SlotState::kReserved: {
        auto it = reservations_.find(slot_reservation_[s]);
        if (it == reservations_.end()) return fail(name + "reserved slot without reservation");
        if (!it->second.doomed && pk.node_count == 0) return fail(name + "reserved not in tree");
        if (it->second.doomed && pk.node_count != 0) return fail(name + "doomed still in tree");
        if (info.leases != 0) return fail(name + "leased reservation");
        break;
      }
    }
  }
  if (scalar_) {
    Status st;
    scalar_->ForEachEntry([&](const ScalarIndex::Entry& e) NO_THREAD_SAFETY_ANALYSIS {
      for (const Piece& p : e.pieces) {
        const RadixTree::Pack& pk = tree_.pack(p.slot);
        if (slots_.Get(p.slot).state != SlotState::kVisible || p.path_begin < pk.path_begin ||
            p.path_begin + p.tokens > pk.path_begin + pk.covered_tokens) {
          st = fail("scalar key names tokens its pack no longer holds");
        }
      }
    });
    RANGEKV_RETURN_IF_ERROR(st);
  }
  return OkStatus();
}

// ---- persistence ----------------------------------------------------------------------------
//
// Format: src/directory/snapshot_format.h (mirrored by docs/pack-format.md "Directory section").

namespace df = directory_format;

std::vector<uint8_t> Directory::Serialize() const {
  MutexLock lock(mu_);
  return SerializeLocked();
}

std::vector<uint8_t> Directory::SerializeCut(
    const std::function<void(const std::vector<SlotInfo>& slots)>& at_cut) const {
  MutexLock lock(mu_);
  std::vector<SlotInfo> slots(slots_.size());
  for (uint32_t s = 0; s < slots_.size(); ++s) slots[s] = slots_.Get(s);
  at_cut(slots);
  return SerializeLocked();
}

std::vector<uint8_t> Directory::SerializeLocked() const {
  coding::ByteWriter w;
  w.U32(df::kMagic);
  w.U16(df::kVersion);
  w.U16(0);  // flags
  w.U64(0);  // total_bytes, patched below
  w.U64(epoch_);
  w.U32(slots_.size());
  w.U64(options_.tokens_per_pack);
  for (uint32_t s = 0; s < slots_.size(); ++s) w.U64(slots_.Get(s).generation);
  const std::vector<uint32_t> lru = slots_.LruOrder();
  w.U32(static_cast<uint32_t>(lru.size()));
  for (uint32_t s : lru) w.U32(s);
  w.U32(static_cast<uint32_t>(tree_.roots().size()));
  std::vector<uint32_t> local(tree_.nodes_in_use() * 2 + 16, 0);  // node -> 1-based index
  for (const auto& [ns, root] : tree_.roots()) {
    w.U64(ns.lo);
    w.U64(ns.hi);
    const size_t count_at = w.size();
    w.U32(0);
    uint32_t count = 0;
    std::vector<uint32_t> stack{root};
    while (!stack.empty()) {
      const uint32_t y = stack.back();
      stack.pop_back();
      const RadixTree::Node& n = tree_.node(y);
      if (n.slot != kNoSlot) {
        if (slots_.Get(n.slot).state != SlotState::kVisible) continue;  // in-flight store
        if (y >= local.size()) local.resize(y + 1, 0);
        local[y] = ++count;
        w.U32(tree_.node(n.parent).slot == kNoSlot ? 0 : local[n.parent]);
        w.U32(n.slot);
        w.U64(n.pack_offset);
        w.U32(n.label_len);
        for (int32_t tok : tree_.Label(y)) w.U32(static_cast<uint32_t>(tok));
      }
      for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) stack.push_back(*it);
    }
    w.PatchU32(count_at, count);
  }
  w.PatchU64(df::kTotalBytesField.offset, w.size() + df::kChecksumBytes);
  w.U64(Hash64(w.bytes().data(), w.size(), df::kChecksumSeed));
  return w.Take();
}

void Directory::RebuildScalarKeys() {
  if (!scalar_) return;
  std::vector<uint32_t> path;
  std::vector<Piece> pieces;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_.Get(s).state != SlotState::kVisible) continue;
    // The pack's deepest node: follow its same-pack children from its first node.
    uint32_t y = tree_.pack(s).first_node;
    for (bool more = true; more;) {
      more = false;
      for (uint32_t c : tree_.node(y).children) {
        if (tree_.node(c).slot == s) {
          y = c;
          more = true;
          break;
        }
      }
    }
    tree_.PathTo(y, &path);
    PiecesFromPath(path, &pieces);
    std::vector<int32_t> tokens = PathTokens(path);
    scalar_->InsertChunks(tree_.node(y).ns, tokens, pieces, 0, tokens.size(),
                          &counters_.keys_built);
  }
}

Status Directory::LoadSnapshotBody(std::span<const uint8_t> bytes) {
  auto corrupt = [](const std::string& what) { return Corruption("directory snapshot: " + what); };
  MutexLock lock(mu_);
  SlotTable& slots = slots_;
  RadixTree& tree = tree_;
  coding::ByteReader r(bytes);
  const uint32_t pack_slots = options_.pack_slots;
  const uint64_t tokens_per_pack = options_.tokens_per_pack;
  if (r.remaining() < size_t{pack_slots} * df::kGenerationBytes + df::kChecksumBytes) {
    return corrupt("truncated generations");
  }
  std::vector<uint64_t> gens(pack_slots);
  for (uint32_t s = 0; s < pack_slots; ++s) {
    (void)r.U64(&gens[s]);
    slots.RaiseGeneration(s, gens[s]);
  }
  uint32_t visible_count = 0;
  if (!r.U32(&visible_count) || visible_count > pack_slots ||
      r.remaining() < size_t{visible_count} * df::kSlotIdBytes + df::kChecksumBytes) {
    return corrupt("visible pack list");
  }
  std::vector<uint32_t> lru(visible_count);
  std::vector<uint8_t> listed(pack_slots, 0);
  for (uint32_t& s : lru) {
    (void)r.U32(&s);
    if (s >= pack_slots || listed[s]) return corrupt("visible pack list names a bad slot");
    if (gens[s] == 0) return corrupt("visible pack with generation 0");
    listed[s] = 1;
  }
  uint32_t ns_count = 0;
  if (!r.U32(&ns_count) || ns_count > options_.max_namespaces) return corrupt("namespace count");
  std::vector<uint32_t> local;  // 1-based local index -> tree node
  std::vector<int32_t> label;
  bool first_ns = true;
  NamespaceId prev_ns;
  for (uint32_t k = 0; k < ns_count; ++k) {
    NamespaceId ns;
    uint32_t node_count = 0;
    if (!(r.U64(&ns.lo) && r.U64(&ns.hi) && r.U32(&node_count))) return corrupt("namespace");
    if (!first_ns && !(prev_ns < ns)) return corrupt("namespaces out of order");
    first_ns = false;
    prev_ns = ns;
    if (node_count == 0 || node_count > r.remaining() / df::kNodeFixedBytes) {
      return corrupt("node count");
    }
    RANGEKV_RETURN_IF_ERROR(tree.CheckCapacity(1, 0, 0, true));
    const uint32_t root = tree.EnsureRoot(ns);
    local.assign(1, root);
    for (uint32_t i = 0; i < node_count; ++i) {
      uint32_t parent_index = 0, slot = 0, len = 0;
      uint64_t pack_offset = 0;
      if (!(r.U32(&parent_index) && r.U32(&slot) && r.U64(&pack_offset) && r.U32(&len))) {
        return corrupt("truncated node");
      }
      if (parent_index >= local.size()) return corrupt("node before its parent");
      if (slot >= pack_slots || !listed[slot]) return corrupt("node of a pack not listed visible");
      if (len == 0 || len > tokens_per_pack || pack_offset > tokens_per_pack - len) {
        return corrupt("node label outside its pack");
      }
      if (r.remaining() < size_t{len} * df::kTokenBytes + df::kChecksumBytes) {
        return corrupt("truncated label");
      }
      label.resize(len);
      for (int32_t& tok : label) {
        uint32_t v = 0;
        (void)r.U32(&v);
        tok = static_cast<int32_t>(v);
      }
      const uint32_t parent = local[parent_index];
      const RadixTree::Node& pn = tree.node(parent);
      if (pn.slot == slot) {
        if (pack_offset != pn.pack_offset + pn.label_len) return corrupt("pack discontinuity");
        for (uint32_t c : pn.children) {
          if (tree.node(c).slot == slot) return corrupt("pack branches");
        }
      } else if (pack_offset != 0 || tree.pack(slot).node_count != 0) {
        return corrupt("pack entered twice or not at token 0");
      }
      if (tree.FindChild(parent, label[0]) != kNoNode) return corrupt("duplicate child");
      RANGEKV_RETURN_IF_ERROR(tree.CheckCapacity(1, 1, len, false));
      local.push_back(tree.Attach(parent, label, slot, pack_offset));
    }
  }
  if (r.remaining() != df::kChecksumBytes) return corrupt("trailing bytes");
  for (uint32_t s : lru) {
    if (tree.pack(s).node_count == 0) return corrupt("visible pack without tokens");
    slots.RestoreVisible(s, gens[s]);
  }
  tree.MergeAll();
  RebuildScalarKeys();
  RANGEKV_CHECK(tree.CheckInvariants().ok());
  return OkStatus();
}

Result<std::unique_ptr<Directory>> Directory::Deserialize(const DirectoryOptions& options,
                                                          std::span<const uint8_t> bytes) {
  RANGEKV_RETURN_IF_ERROR(options.Validate());
  auto corrupt = [](const std::string& what) { return Corruption("directory snapshot: " + what); };
  if (bytes.size() < df::kHeaderBytes + df::kChecksumBytes) {
    return Status(StatusCode::kTruncated,
                  "directory snapshot: " + std::to_string(bytes.size()) + " bytes");
  }
  coding::ByteReader r(bytes);
  uint32_t magic = 0, pack_slots = 0;
  uint16_t version = 0, flags = 0;
  uint64_t total = 0, epoch = 0, tokens_per_pack = 0;
  (void)(r.U32(&magic) && r.U16(&version) && r.U16(&flags) && r.U64(&total) && r.U64(&epoch) &&
         r.U32(&pack_slots) && r.U64(&tokens_per_pack));
  if (magic != df::kMagic) return corrupt("bad magic");
  if (version != df::kVersion) {
    return Status(StatusCode::kWrongVersion,
                  "directory snapshot: version " + std::to_string(version));
  }
  if (total != bytes.size()) {
    return Status(total > bytes.size() ? StatusCode::kTruncated : StatusCode::kCorruption,
                  "directory snapshot: length field " + std::to_string(total) +
                      " != " + std::to_string(bytes.size()) + " bytes");
  }
  const size_t body = bytes.size() - df::kChecksumBytes;
  if (Hash64(bytes.data(), body, df::kChecksumSeed) != coding::LoadU64(bytes.data() + body)) {
    return corrupt("checksum");
  }
  if (flags != 0) return corrupt("unknown flags");
  if (pack_slots != options.pack_slots || tokens_per_pack != options.tokens_per_pack) {
    return Status(StatusCode::kGeometryMismatch,
                  "directory snapshot: " + std::to_string(pack_slots) + " packs of " +
                      std::to_string(tokens_per_pack) + " tokens, store has " +
                      std::to_string(options.pack_slots) + " of " +
                      std::to_string(options.tokens_per_pack));
  }
  if (epoch == UINT64_MAX) return corrupt("owner epoch");
  std::unique_ptr<Directory> d(new Directory(options, std::max(options.owner_epoch, epoch + 1)));
  RANGEKV_RETURN_IF_ERROR(d->LoadSnapshotBody(bytes.subspan(df::kHeaderBytes)));
  return d;
}

}  // namespace rangekv
