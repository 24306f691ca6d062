// Property test: the Directory against a naive reference model.
//
// The model keeps no tree. It stores, per pack slot, the full token path from position 0 to the
// pack's last held token and the position of the pack's token 0, and answers every question by
// brute force over those flat sequences (which pack holds position p of this query? which packs
// continue a path from inside this one?). A seeded random mix of operations (stores of random,
// divergent and partially present prefixes, publications, aborts, lookups with random reuse
// granularities, claims with every kind of wrong input and through serialized bytes, releases,
// cancellations, prefix and pack invalidations, evictions) runs against both; after every
// operation the answers (hit lengths, records, reservation plans, every status code) and every
// slot's state, generation and lease count must agree. Every 1,000 operations the directory's
// own invariant check runs too, and in scalar mode the number of keys is compared with the
// model's count of fully covered chunks.
//
// RANGEKV_PROPERTY_SEED and RANGEKV_PROPERTY_OPS override the seed and the operation count;
// RANGEKV_PROPERTY_DEBUG=1 prints both sides' packs when a lookup disagrees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "directory/directory.h"

namespace rangekv {
namespace {

constexpr uint64_t kT = 8;       // tokens per pack
constexpr uint32_t kSlots = 14;  // usable pack slots
constexpr uint32_t kAllSlots = 16;

struct ModelPack {
  NamespaceId ns;
  std::vector<int32_t> path;  // tokens [0, end): the path up to this pack's last held token
  uint64_t begin = 0;         // path position of pack token 0
  bool in_tree = false;       // visible, or reserved and not doomed
  uint64_t end() const { return path.size(); }
};

struct ModelSlot {
  SlotState state = SlotState::kFree;
  uint64_t generation = 0;
  uint32_t leases = 0;
  uint64_t tick = 0;  // LRU: last publication or selection
  uint64_t reservation = 0;
  ModelPack pack;
};

struct ModelTicket {
  Ticket ticket;
  std::vector<int32_t> query;
  bool claimed = false;
  std::vector<uint32_t> slot_leases;
};

struct ModelReservation {
  std::vector<uint32_t> slots;
  bool doomed = false;
};

bool StartsWith(const std::vector<int32_t>& v, std::span<const int32_t> prefix) {
  return v.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), v.begin());
}

class Model {
 public:
  Model(IndexMode mode, uint64_t chunk, uint32_t keys_per_chunk)
      : mode_(mode), chunk_(chunk), keys_per_chunk_(keys_per_chunk), slots_(kAllSlots) {}

  const std::vector<ModelSlot>& slots() const { return slots_; }

  // Pack holding position `pos` of `q` (q[0..pos] must be its path), among packs accepted.
  template <typename Accept>
  int Holder(const NamespaceId& ns, std::span<const int32_t> q, uint64_t pos, Accept accept) const {
    for (uint32_t s = 0; s < kAllSlots; ++s) {
      const ModelSlot& m = slots_[s];
      if (!m.pack.in_tree || !accept(m) || !(m.pack.ns == ns)) continue;
      // By unique coverage the walk enters a pack at its token 0.
      if (m.pack.begin != pos || m.pack.end() <= pos) continue;
      if (StartsWith(m.pack.path, q.first(pos + 1))) return static_cast<int>(s);
    }
    return -1;
  }

  struct WalkStep {
    uint32_t slot;
    uint64_t begin, end;  // positions of q held by this pack
  };
  template <typename Accept>
  uint64_t Walk(const NamespaceId& ns, std::span<const int32_t> q, Accept accept,
                std::vector<WalkStep>* steps) const {
    steps->clear();
    uint64_t m = 0;
    while (m < q.size()) {
      int s = Holder(ns, q, m, accept);
      if (s < 0) break;
      const ModelPack& p = slots_[s].pack;
      uint64_t e = m;
      while (e < p.end() && e < q.size() && p.path[e] == q[e]) ++e;
      steps->push_back({static_cast<uint32_t>(s), m, e});
      m = e;
    }
    return m;
  }

  static bool IsVisible(const ModelSlot& m) { return m.state == SlotState::kVisible; }

  // A pack has a dependent when another in-tree pack's token 0 continues from inside it.
  bool HasDependent(uint32_t s) const {
    const ModelPack& p = slots_[s].pack;
    for (uint32_t c = 0; c < kAllSlots; ++c) {
      const ModelPack& cp = slots_[c].pack;
      if (c == s || !cp.in_tree || !(cp.ns == p.ns) || cp.begin == 0) continue;
      if (cp.begin - 1 >= p.begin && cp.begin - 1 < p.end() &&
          std::equal(p.path.begin(), p.path.begin() + cp.begin, cp.path.begin())) {
        return true;
      }
    }
    return false;
  }

  std::optional<uint32_t> Victim(int exclude) const {
    std::optional<uint32_t> best;
    for (uint32_t s = 0; s < kAllSlots; ++s) {
      const ModelSlot& m = slots_[s];
      if (m.state != SlotState::kVisible || m.leases != 0 || static_cast<int>(s) == exclude ||
          HasDependent(s)) {
        continue;
      }
      if (!best || m.tick < slots_[*best].tick) best = s;
    }
    return best;
  }

  // Removes every position at or after prefix.size()-1 on paths starting with `prefix`.
  InvalidateResult Remove(const NamespaceId& ns, std::span<const int32_t> prefix) {
    InvalidateResult result;
    const uint64_t cut = prefix.size() - 1;
    std::set<uint64_t> doom;
    for (uint32_t s = 0; s < kAllSlots; ++s) {
      ModelSlot& m = slots_[s];
      ModelPack& p = m.pack;
      if (!p.in_tree || !(p.ns == ns) || !StartsWith(p.path, prefix)) continue;
      const uint64_t new_end = std::max(p.begin, cut);
      if (m.state == SlotState::kReserved) {
        doom.insert(m.reservation);
        continue;
      }
      if (new_end == p.begin) {
        p.in_tree = false;
        result.packs_retired++;
        m.state = m.leases ? SlotState::kRetired : SlotState::kFree;
      } else {
        p.path.resize(new_end);
        result.packs_clipped++;
      }
    }
    for (uint64_t id : doom) {
      ModelReservation& r = reservations_.at(id);
      if (r.doomed) continue;
      r.doomed = true;
      result.reservations_doomed++;
      for (uint32_t s : r.slots) slots_[s].pack.in_tree = false;
    }
    return result;
  }

  Result<Reservation> Reserve(const NamespaceId& ns, const std::vector<int32_t>& q) {
    std::vector<WalkStep> all;
    const uint64_t j = Walk(
        ns, q, [](const ModelSlot&) { return true; }, &all);
    uint64_t h = 0;
    int join = -1;
    for (const WalkStep& st : all) {
      if (slots_[st.slot].state != SlotState::kVisible) {
        join = static_cast<int>(st.slot);
        break;
      }
      h = st.end;
    }
    Reservation out;
    if (j > h) {
      out.outcome = ReserveOutcome::kJoined;
      out.reservation_id = slots_[join].reservation;
      out.begin_tokens = h;
      out.end_tokens = j;
      return out;
    }
    if (h == q.size()) {
      out.begin_tokens = out.end_tokens = h;
      return out;
    }
    const uint64_t need = (q.size() - h + kT - 1) / kT;
    const int exclude = all.empty() ? -1 : static_cast<int>(all.back().slot);
    while (FreeCount() < need) {
      std::optional<uint32_t> v = Victim(exclude);
      if (!v) break;
      const ModelPack& p = slots_[*v].pack;
      std::vector<int32_t> prefix(p.path.begin(), p.path.begin() + p.begin + 1);
      Remove(p.ns, prefix);
    }
    const uint64_t packs = std::min<uint64_t>(need, FreeCount());
    if (packs == 0) return Status(StatusCode::kResourceExhausted, "model");
    const uint64_t end = std::min<uint64_t>(q.size(), h + packs * kT);
    const uint64_t id = next_reservation_++;
    ModelReservation r;
    out.outcome = ReserveOutcome::kReserved;
    out.reservation_id = id;
    out.begin_tokens = h;
    out.end_tokens = end;
    for (uint64_t pos = h; pos < end; pos += kT) {
      uint32_t s = 0;
      while (s < kSlots && slots_[s].state != SlotState::kFree) ++s;
      ModelSlot& m = slots_[s];
      m.state = SlotState::kReserved;
      m.generation++;
      m.reservation = id;
      const uint64_t len = std::min(kT, end - pos);
      m.pack = ModelPack{ns, std::vector<int32_t>(q.begin(), q.begin() + pos + len), pos, true};
      r.slots.push_back(s);
      out.records.push_back(PackRecord{s, m.generation, pos, 0, len});
    }
    reservations_[id] = r;
    return out;
  }

  Status Publish(uint64_t id) {
    auto it = reservations_.find(id);
    if (it == reservations_.end()) return NotFound("model");
    const ModelReservation r = it->second;
    reservations_.erase(it);
    for (uint32_t s : r.slots) {
      ModelSlot& m = slots_[s];
      m.reservation = 0;
      if (r.doomed) {
        m.state = SlotState::kFree;
      } else {
        m.state = SlotState::kVisible;
        m.tick = ++clock_;
      }
    }
    return r.doomed ? Status(StatusCode::kAborted, "model") : OkStatus();
  }

  Status Abort(uint64_t id) {
    auto it = reservations_.find(id);
    if (it == reservations_.end()) return NotFound("model");
    for (uint32_t s : it->second.slots) {
      slots_[s].state = SlotState::kFree;
      slots_[s].pack.in_tree = false;
      slots_[s].reservation = 0;
    }
    reservations_.erase(it);
    return OkStatus();
  }

  Result<Ticket> Lookup(const NamespaceId& ns, const std::vector<int32_t>& q, const Envelope& env,
                        uint64_t g) {
    if (auto it = by_request_.find(env.request_id); it != by_request_.end()) {
      const ModelTicket& t = tickets_.at(it->second);
      if (t.ticket.ns == ns && t.ticket.envelope == env && t.ticket.granularity_tokens == g &&
          t.query == q) {
        return t.ticket;
      }
      return Status(StatusCode::kTicketReplaced, "model");
    }
    std::vector<WalkStep> steps;
    uint64_t matched = Walk(ns, q, IsVisible, &steps);
    if (mode_ == IndexMode::kScalar) matched = matched / chunk_ * chunk_;
    const uint64_t cap = q.empty() ? 0 : q.size() - 1;
    const uint64_t hit = std::min(matched, cap) / g * g;
    Ticket t;
    t.owner_epoch = 1;
    t.ns = ns;
    t.envelope = env;
    t.granularity_tokens = g;
    t.query_tokens = q.size();
    t.hit_tokens = hit;
    if (hit == 0) {
      t.token_digest = TokenDigest({});
      return t;
    }
    t.ticket_id = next_ticket_++;
    t.token_digest = TokenDigest(std::span(q).first(hit));
    for (const WalkStep& st : steps) {
      if (st.begin >= hit) break;
      t.records.push_back(PackRecord{st.slot, slots_[st.slot].generation, st.begin, 0,
                                     std::min(st.end, hit) - st.begin});
    }
    ModelTicket mt;
    mt.ticket = t;
    mt.query = q;
    if (mode_ == IndexMode::kTree) {
      for (const PackRecord& r : t.records) mt.slot_leases.push_back(r.pack_slot);
    } else {
      // One lease per key: each key of a chunk below the hit leases each pack it overlaps.
      for (uint64_t c = 0; c * chunk_ < hit; ++c) {
        const uint64_t lo = c * chunk_, hi = std::min(hit, (c + 1) * chunk_);
        for (uint32_t k = 0; k < keys_per_chunk_; ++k) {
          for (const PackRecord& r : t.records) {
            if (r.path_token_begin < hi && r.path_token_end() > lo) {
              mt.slot_leases.push_back(r.pack_slot);
            }
          }
        }
      }
    }
    for (uint32_t s : mt.slot_leases) slots_[s].leases++;
    for (const PackRecord& r : t.records) slots_[r.pack_slot].tick = ++clock_;
    by_request_[env.request_id] = t.ticket_id;
    tickets_[t.ticket_id] = mt;
    return t;
  }

  Result<ClaimedRange> Claim(const NamespaceId& ns, const Ticket& ticket, const Envelope& env,
                             std::span<const int32_t> tokens, uint64_t endpoint) {
    if (ticket.owner_epoch != 1) return Status(StatusCode::kForeignOwner, "model");
    auto it = tickets_.find(ticket.ticket_id);
    if (ticket.ticket_id == 0 || it == tickets_.end()) return NotFound("model");
    ModelTicket& mt = it->second;
    const Ticket& t = mt.ticket;
    if (!(t == ticket)) return Status(StatusCode::kCorruptTicket, "model");
    if (!(ns == t.ns)) return Status(StatusCode::kNamespaceMismatch, "model");
    if (!(env == t.envelope)) return Status(StatusCode::kForeignOwner, "model");
    if (mt.claimed) return FailedPrecondition("model");
    if (endpoint > t.hit_tokens) return Status(StatusCode::kEndpointBeyondTicket, "model");
    if (tokens.size() < t.hit_tokens ||
        !std::equal(mt.query.begin(), mt.query.begin() + t.hit_tokens, tokens.begin())) {
      return Status(StatusCode::kTokenMismatch, "model");
    }
    for (const PackRecord& r : t.records) {
      const ModelSlot& m = slots_[r.pack_slot];
      if (m.state != SlotState::kVisible || m.generation != r.generation ||
          m.pack.end() - m.pack.begin < r.pack_token_offset + r.tokens) {
        return Status(StatusCode::kStaleGeneration, "model");
      }
    }
    mt.claimed = true;
    return ClaimedRange{t.ticket_id, endpoint, ClipRecords(t.records, endpoint)};
  }

  void Drop(uint64_t id) {
    ModelTicket& mt = tickets_.at(id);
    for (uint32_t s : mt.slot_leases) {
      ModelSlot& m = slots_[s];
      m.leases--;
      if (m.leases == 0 && m.state == SlotState::kRetired) m.state = SlotState::kFree;
    }
    by_request_.erase(mt.ticket.envelope.request_id);
    tickets_.erase(id);
  }

  Status Release(uint64_t id) {
    auto it = tickets_.find(id);
    if (it == tickets_.end()) return NotFound("model");
    if (!it->second.claimed) return FailedPrecondition("model");
    Drop(id);
    return OkStatus();
  }

  CancelOutcome Cancel(const std::string& request) {
    auto it = by_request_.find(request);
    if (it == by_request_.end()) return CancelOutcome::kNoTicket;
    if (tickets_.at(it->second).claimed) return CancelOutcome::kClaimedKept;
    Drop(it->second);
    return CancelOutcome::kCancelled;
  }

  Result<InvalidateResult> InvalidatePrefix(const NamespaceId& ns, const std::vector<int32_t>& q) {
    std::vector<WalkStep> steps;
    if (Walk(
            ns, q, [](const ModelSlot&) { return true; }, &steps) < q.size()) {
      return InvalidateResult{};
    }
    return Remove(ns, q);
  }

  Result<InvalidateResult> InvalidatePack(uint32_t slot, uint64_t gen) {
    if (slot >= kAllSlots) return InvalidArgument("model");
    const ModelSlot& m = slots_[slot];
    if (m.generation != gen) return Status(StatusCode::kStaleGeneration, "model");
    if (m.state != SlotState::kVisible) return FailedPrecondition("model");
    std::vector<int32_t> prefix(m.pack.path.begin(), m.pack.path.begin() + m.pack.begin + 1);
    return Remove(m.pack.ns, prefix);
  }

  uint32_t Evict(uint32_t max) {
    uint32_t n = 0;
    while (n < max) {
      std::optional<uint32_t> v = Victim(-1);
      if (!v) break;
      const ModelPack& p = slots_[*v].pack;
      std::vector<int32_t> prefix(p.path.begin(), p.path.begin() + p.begin + 1);
      Remove(p.ns, prefix);
      ++n;
    }
    return n;
  }

  // Distinct fully covered chunk prefixes x keys per chunk (the scalar index's expected size).
  uint64_t ExpectedScalarKeys() const {
    std::set<std::pair<std::pair<uint64_t, uint64_t>, std::vector<int32_t>>> chunks;
    for (const ModelSlot& m : slots_) {
      if (m.state != SlotState::kVisible) continue;
      for (uint64_t e = chunk_; e <= m.pack.end(); e += chunk_) {
        std::vector<int32_t> prefix(m.pack.path.begin(), m.pack.path.begin() + e);
        std::vector<WalkStep> steps;
        if (Walk(m.pack.ns, prefix, IsVisible, &steps) == e) {
          chunks.insert({{m.pack.ns.lo, m.pack.ns.hi}, prefix});
        }
      }
    }
    return chunks.size() * keys_per_chunk_;
  }

  // Every position of every namespace is held by at most one in-tree pack.
  bool CoverageIsUnique() const {
    std::set<std::pair<std::pair<uint64_t, uint64_t>, std::vector<int32_t>>> seen;
    for (const ModelSlot& m : slots_) {
      if (!m.pack.in_tree) continue;
      for (uint64_t p = m.pack.begin; p < m.pack.end(); ++p) {
        std::vector<int32_t> node(m.pack.path.begin(), m.pack.path.begin() + p + 1);
        if (!seen.insert({{m.pack.ns.lo, m.pack.ns.hi}, node}).second) return false;
      }
    }
    return true;
  }

  std::vector<uint64_t> PendingReservations() const {
    std::vector<uint64_t> out;
    for (const auto& [id, r] : reservations_) out.push_back(id);
    return out;
  }
  const std::map<uint64_t, ModelTicket>& tickets() const { return tickets_; }

 private:
  uint64_t FreeCount() const {
    uint64_t n = 0;
    for (uint32_t s = 0; s < kSlots; ++s) n += slots_[s].state == SlotState::kFree;
    return n;
  }

  IndexMode mode_;
  uint64_t chunk_;
  uint32_t keys_per_chunk_;
  std::vector<ModelSlot> slots_;
  std::map<uint64_t, ModelReservation> reservations_;
  std::map<uint64_t, ModelTicket> tickets_;
  std::map<std::string, uint64_t> by_request_;
  uint64_t next_reservation_ = 1, next_ticket_ = 1, clock_ = 0;
};

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

struct OpCounts {
  std::map<std::string, uint64_t> by_kind;
  uint64_t hits = 0, partial_hits = 0, stale_claims = 0, divergent_stores = 0, joins = 0,
           evictions = 0;
};

class PropertyRun {
 public:
  PropertyRun(IndexMode mode, uint64_t chunk, ScalarObjects objects, uint64_t seed)
      : mode_(mode),
        chunk_(chunk),
        keys_(objects == ScalarObjects::kChunkLayer ? 3 : 1),
        model_(mode, chunk, keys_),
        rng_(seed) {
    DirectoryOptions o;
    o.pack_slots = kAllSlots;
    o.tokens_per_pack = kT;
    o.pack_bytes = 4096;
    o.capacity_bytes = uint64_t{kSlots} * 4096;
    o.index = mode;
    o.scalar_chunk_tokens = chunk;
    o.scalar_objects = objects;
    o.layers = 3;
    o.max_tickets = 1000;
    d_ = std::move(Directory::Create(o)).value();
    for (int ns = 0; ns < 2; ++ns) {
      namespaces_.push_back(NamespaceId{static_cast<uint64_t>(ns + 1), 77});
      for (int b = 0; b < 5; ++b) {
        std::vector<int32_t> base(56);
        for (auto& x : base) x = static_cast<int32_t>(rng_() % 4);
        bases_.push_back(base);
      }
    }
  }

  uint64_t R(uint64_t n) { return rng_() % n; }

  // Queries share prefixes of a few base sequences and then diverge at a random point.
  std::vector<int32_t> Query() {
    const std::vector<int32_t>& base = bases_[R(bases_.size())];
    std::vector<int32_t> q(base.begin(), base.begin() + R(base.size() + 1));
    const uint64_t tail = R(3) == 0 ? 0 : R(20);
    for (uint64_t i = 0; i < tail; ++i)
      q.push_back(static_cast<int32_t>(R(3) == 0 ? R(4) : 10 + R(50)));
    if (q.empty()) q.push_back(static_cast<int32_t>(R(4)));
    return q;
  }
  const NamespaceId& Ns() { return namespaces_[R(R(4) == 0 ? 2 : 1)]; }

  void Check(bool ok, const std::string& what) {
    if (!ok) {
      ADD_FAILURE() << "op " << op_ << ": " << what;
      failed_ = true;
    }
  }

  template <typename T>
  void Same(const Result<T>& a, const Result<T>& b, const std::string& what) {
    Check(a.ok() == b.ok(), what + ": ok " + std::to_string(a.ok()) + " vs model " +
                                std::to_string(b.ok()) + " (" + a.status().ToString() + ")");
    if (!a.ok() && !b.ok()) {
      Check(a.status().code() == b.status().code(),
            what + ": " + a.status().ToString() + " vs model " + b.status().ToString());
    }
  }

  void CheckSlots() {
    for (uint32_t s = 0; s < kAllSlots; ++s) {
      const SlotInfo got = d_->Slot(s);
      const ModelSlot& want = model_.slots()[s];
      Check(
          got.state == want.state && got.generation == want.generation && got.leases == want.leases,
          "slot " + std::to_string(s) + ": " + std::string(SlotStateName(got.state)) + " gen " +
              std::to_string(got.generation) + " leases " + std::to_string(got.leases) +
              " vs model " + std::string(SlotStateName(want.state)) + " gen " +
              std::to_string(want.generation) + " leases " + std::to_string(want.leases));
    }
  }

  void OpReserve() {
    const NamespaceId& ns = Ns();
    const std::vector<int32_t> q = Query();
    Result<Reservation> a = d_->Reserve(ns, q);
    Result<Reservation> b = model_.Reserve(ns, q);
    Same(a, b, "reserve");
    if (!a.ok() || !b.ok()) return;
    Check(a->outcome == b->outcome && a->reservation_id == b->reservation_id &&
              a->begin_tokens == b->begin_tokens && a->end_tokens == b->end_tokens &&
              a->records == b->records,
          "reserve plan");
    if (a->outcome == ReserveOutcome::kJoined) counts_.joins++;
    if (a->outcome == ReserveOutcome::kReserved && a->begin_tokens > 0 &&
        a->begin_tokens % kT != 0) {
      counts_.divergent_stores++;
    }
    if (a->outcome == ReserveOutcome::kReserved && R(3) == 0) {
      Status pa = d_->Publish(a->reservation_id);
      Status pb = model_.Publish(a->reservation_id);
      Check(pa.code() == pb.code(), "publish now: " + pa.ToString() + " vs model " + pb.ToString());
    }
  }

  void OpFinish(bool publish) {
    std::vector<uint64_t> pending = model_.PendingReservations();
    const uint64_t id = pending.empty() || R(10) == 0 ? 1 + R(1000) : pending[R(pending.size())];
    Status a = publish ? d_->Publish(id) : d_->Abort(id);
    Status b = publish ? model_.Publish(id) : model_.Abort(id);
    Check(a.code() == b.code(), std::string(publish ? "publish" : "abort") + ": " + a.ToString() +
                                    " vs model " + b.ToString());
  }

  Envelope RandomEnvelope() {
    return Envelope{"req" + std::to_string(R(8)), 5, static_cast<uint32_t>(R(4) == 0), 0};
  }

  void OpLookup() {
    const NamespaceId& ns = Ns();
    Envelope env = RandomEnvelope();
    std::vector<int32_t> q;
    uint64_t g = std::vector<uint64_t>{1, 1, 2, 3, 4, 8}[R(6)];
    if (mode_ == IndexMode::kScalar && R(2) == 0) g = chunk_ * (1 + R(2));
    auto last = last_query_.find(env.request_id);
    if (last != last_query_.end() && R(2) == 0) {
      q = last->second.query;  // repeat (maybe identical, maybe with another granularity)
      if (R(3) != 0) g = last->second.granularity;
    } else {
      q = Query();
    }
    last_query_[env.request_id] = {q, g};
    Result<Ticket> a = d_->Lookup(ns, q, env, g);
    Result<Ticket> b = model_.Lookup(ns, q, env, g);
    Same(a, b, "lookup");
    if (!a.ok() || !b.ok()) return;
    if (!(*a == *b) && std::getenv("RANGEKV_PROPERTY_DEBUG")) {
      std::string qs;
      for (int32_t x : q) qs += std::to_string(x) + ",";
      std::printf("DEBUG ns=%llu g=%llu q=%s\n", (unsigned long long)ns.lo, (unsigned long long)g,
                  qs.c_str());
      for (const StoredPack& p : d_->ListPacks(ns)) {
        std::printf("  pack slot=%u begin=%llu tokens=%llu parent=%u\n", p.record.pack_slot,
                    (unsigned long long)p.record.path_token_begin,
                    (unsigned long long)p.record.tokens, p.parent_slot);
      }
      for (uint32_t s = 0; s < kAllSlots; ++s) {
        const ModelSlot& m = model_.slots()[s];
        if (!m.pack.in_tree) continue;
        std::string ps;
        for (int32_t x : m.pack.path) ps += std::to_string(x) + ",";
        std::printf("  model slot=%u state=%d ns=%llu begin=%llu path=%s\n", s, (int)m.state,
                    (unsigned long long)m.pack.ns.lo, (unsigned long long)m.pack.begin, ps.c_str());
      }
      std::printf("  scalar keys=%llu model expects %llu\n",
                  (unsigned long long)d_->Stats().scalar_keys,
                  (unsigned long long)model_.ExpectedScalarKeys());
    }
    Check(*a == *b, "lookup ticket: hit " + std::to_string(a->hit_tokens) + " vs model " +
                        std::to_string(b->hit_tokens) + ", " + std::to_string(a->records.size()) +
                        " records vs " + std::to_string(b->records.size()));
    if (!a->empty()) {
      counts_.hits++;
      if (a->hit_tokens + 1 < q.size()) counts_.partial_hits++;
      issued_.push_back({*a, q, ns});
    }
  }

  void OpClaim() {
    if (issued_.empty()) return;
    const Issued& it = issued_[R(issued_.size())];
    Ticket t = it.ticket;
    NamespaceId ns = it.ns;
    Envelope env = t.envelope;
    std::vector<int32_t> tokens = it.query;
    uint64_t endpoint = t.hit_tokens - R(std::min<uint64_t>(t.hit_tokens, 4) + 1);
    bool corrupt_bytes = false;
    switch (R(12)) {
      case 0:
        ns = namespaces_[ns == namespaces_[0] ? 1 : 0];
        break;
      case 1:
        env.attempt++;
        break;
      case 2:
        endpoint = t.hit_tokens + 1 + R(3);
        break;
      case 3:
        tokens[R(t.hit_tokens)] ^= 1;
        break;
      case 4:
        tokens.resize(R(t.hit_tokens));
        break;
      case 5:
        t.owner_epoch = 2;
        break;
      case 6:
        t.records[R(t.records.size())].generation++;
        break;
      case 7:
        corrupt_bytes = true;
        break;
      default:
        break;
    }
    Result<ClaimedRange> a = Status(StatusCode::kInternal, "unset");
    if (corrupt_bytes || R(2) == 0) {
      std::vector<uint8_t> bytes = EncodeTicket(t);
      if (corrupt_bytes) bytes[R(bytes.size())] ^= static_cast<uint8_t>(1 + R(255));
      a = d_->ClaimBytes(ns, bytes, env, tokens, endpoint);
      Result<Ticket> decoded = DecodeTicket(bytes);
      if (!decoded.ok()) {
        Check(!a.ok() && a.status().code() == decoded.status().code(), "claim of bad bytes");
        return;
      }
      t = *decoded;
    } else {
      a = d_->Claim(ns, t, env, tokens, endpoint);
    }
    Result<ClaimedRange> b = model_.Claim(ns, t, env, tokens, endpoint);
    Same(a, b, "claim");
    if (a.ok() && b.ok()) {
      Check(a->records == b->records && a->endpoint_tokens == b->endpoint_tokens, "claim range");
    }
    if (!a.ok() && a.status().code() == StatusCode::kStaleGeneration) counts_.stale_claims++;
  }

  void OpRelease() {
    uint64_t id = 1 + R(200);
    if (!model_.tickets().empty() && R(4) != 0) {
      auto it = model_.tickets().begin();
      std::advance(it, R(model_.tickets().size()));
      id = it->first;
    }
    Status a = d_->Release(id);
    Status b = model_.Release(id);
    Check(a.code() == b.code(), "release: " + a.ToString() + " vs model " + b.ToString());
  }

  void OpCancel() {
    const std::string req = "req" + std::to_string(R(8));
    Check(d_->Cancel(req) == model_.Cancel(req), "cancel");
  }

  void OpInvalidatePrefix() {
    const NamespaceId& ns = Ns();
    std::vector<int32_t> q = Query();
    q.resize(1 + R(q.size()));
    Result<InvalidateResult> a = d_->InvalidatePrefix(ns, q);
    Result<InvalidateResult> b = model_.InvalidatePrefix(ns, q);
    Same(a, b, "invalidate prefix");
    if (a.ok() && b.ok()) {
      Check(a->packs_retired == b->packs_retired && a->packs_clipped == b->packs_clipped &&
                a->reservations_doomed == b->reservations_doomed,
            "invalidate prefix result");
    }
  }

  void OpInvalidatePack() {
    const uint32_t slot = static_cast<uint32_t>(R(kAllSlots + 1));
    uint64_t gen = slot < kAllSlots ? model_.slots()[slot].generation : 1;
    if (R(5) == 0) gen += 1 + R(2);
    Result<InvalidateResult> a = d_->InvalidatePack(slot, gen);
    Result<InvalidateResult> b = model_.InvalidatePack(slot, gen);
    Same(a, b, "invalidate pack");
    if (a.ok() && b.ok()) {
      Check(a->packs_retired == b->packs_retired && a->packs_clipped == b->packs_clipped &&
                a->reservations_doomed == b->reservations_doomed,
            "invalidate pack result");
    }
  }

  void OpEvict() {
    const uint32_t n = static_cast<uint32_t>(1 + R(2));
    const uint32_t a = d_->EvictLru(n);
    Check(a == model_.Evict(n), "evict count");
  }

  void Run(uint64_t ops) {
    for (op_ = 0; op_ < ops && !failed_; ++op_) {
      const uint64_t k = R(100);
      std::string kind;
      if (k < 22) {
        kind = "reserve", OpReserve();
      } else if (k < 34) {
        kind = "publish", OpFinish(true);
      } else if (k < 37) {
        kind = "abort", OpFinish(false);
      } else if (k < 62) {
        kind = "lookup", OpLookup();
      } else if (k < 74) {
        kind = "claim", OpClaim();
      } else if (k < 81) {
        kind = "release", OpRelease();
      } else if (k < 90) {
        kind = "cancel", OpCancel();
      } else if (k < 94) {
        kind = "invalidate_prefix", OpInvalidatePrefix();
      } else if (k < 97) {
        kind = "invalidate_pack", OpInvalidatePack();
      } else {
        kind = "evict", OpEvict();
      }
      counts_.by_kind[kind]++;
      CheckSlots();
      if (issued_.size() > 64) issued_.erase(issued_.begin(), issued_.begin() + 32);
      if (op_ % 1000 == 999) {
        Status inv = d_->CheckInvariants();
        Check(inv.ok(), inv.ToString());
        Check(model_.CoverageIsUnique(), "model coverage not unique");
        if (mode_ == IndexMode::kScalar) {
          Check(d_->Stats().scalar_keys == model_.ExpectedScalarKeys(),
                "scalar keys " + std::to_string(d_->Stats().scalar_keys) + " vs model " +
                    std::to_string(model_.ExpectedScalarKeys()));
        }
      }
    }
  }

  const OpCounts& counts() {
    counts_.evictions = d_->Stats().evictions;
    return counts_;
  }
  Directory& directory() { return *d_; }

 private:
  struct Issued {
    Ticket ticket;
    std::vector<int32_t> query;
    NamespaceId ns;
  };
  struct LastQuery {
    std::vector<int32_t> query;
    uint64_t granularity;
  };
  IndexMode mode_;
  uint64_t chunk_;
  uint32_t keys_;
  Model model_;
  std::mt19937_64 rng_;
  std::unique_ptr<Directory> d_;
  std::vector<NamespaceId> namespaces_;
  std::vector<std::vector<int32_t>> bases_;
  std::vector<Issued> issued_;
  std::map<std::string, LastQuery> last_query_;
  OpCounts counts_;
  uint64_t op_ = 0;
  bool failed_ = false;
};

void Report(const char* name, PropertyRun& run) {
  const OpCounts& c = run.counts();
  std::string kinds;
  for (const auto& [k, n] : c.by_kind) kinds += k + "=" + std::to_string(n) + " ";
  std::printf(
      "%s: %s| hits=%llu partial=%llu divergent_stores=%llu joins=%llu stale_claims=%llu "
      "evictions=%llu\n",
      name, kinds.c_str(), static_cast<unsigned long long>(c.hits),
      static_cast<unsigned long long>(c.partial_hits),
      static_cast<unsigned long long>(c.divergent_stores), static_cast<unsigned long long>(c.joins),
      static_cast<unsigned long long>(c.stale_claims),
      static_cast<unsigned long long>(c.evictions));
}

void ExpectCoverage(const OpCounts& c) {
  // The mix must actually reach the interesting cases, or the agreement means little.
  EXPECT_GT(c.partial_hits, 100u);
  EXPECT_GT(c.divergent_stores, 100u);
  EXPECT_GT(c.joins, 10u);
  EXPECT_GT(c.stale_claims, 10u);
  EXPECT_GT(c.evictions, 100u);
}

TEST(DirectoryPropertyTest, TreeAgreesWithTheReferenceModel) {
  const uint64_t seed = EnvOr("RANGEKV_PROPERTY_SEED", 20261130);
  PropertyRun run(IndexMode::kTree, 4, ScalarObjects::kChunk, seed);
  run.Run(EnvOr("RANGEKV_PROPERTY_OPS", 100000));
  Report("tree", run);
  ExpectCoverage(run.counts());
  EXPECT_TRUE(run.directory().CheckInvariants().ok());
}

TEST(DirectoryPropertyTest, ScalarAblationAgreesWithTheReferenceModel) {
  const uint64_t seed = EnvOr("RANGEKV_PROPERTY_SEED", 20261130) + 1;
  PropertyRun run(IndexMode::kScalar, 4, ScalarObjects::kChunk, seed);
  run.Run(EnvOr("RANGEKV_PROPERTY_OPS", 100000) / 2);
  Report("scalar", run);
  ExpectCoverage(run.counts());
}

TEST(DirectoryPropertyTest, LayerwiseScalarAblationAgreesWithTheReferenceModel) {
  const uint64_t seed = EnvOr("RANGEKV_PROPERTY_SEED", 20261130) + 2;
  PropertyRun run(IndexMode::kScalar, 3, ScalarObjects::kChunkLayer, seed);
  run.Run(EnvOr("RANGEKV_PROPERTY_OPS", 100000) / 4);
  Report("scalar-layerwise", run);
}

// A snapshot taken in the middle of a random run restores the same published state.
TEST(DirectoryPropertyTest, SnapshotOfARandomStateRestoresTheSameAnswers) {
  PropertyRun run(IndexMode::kTree, 4, ScalarObjects::kChunk, 99);
  run.Run(5000);
  Directory& d = run.directory();
  Result<std::unique_ptr<Directory>> copy = Directory::Deserialize(d.options(), d.Serialize());
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_TRUE((*copy)->CheckInvariants().ok());
  for (const NamespaceId& ns : d.Namespaces()) {
    std::vector<StoredPack> a = d.ListPacks(ns), b = (*copy)->ListPacks(ns);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].record, b[i].record);
      EXPECT_EQ(a[i].parent_slot, b[i].parent_slot);
    }
  }
}

}  // namespace
}  // namespace rangekv
