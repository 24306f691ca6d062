#include "directory/directory.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <thread>

namespace rangekv {
namespace {

const NamespaceId kNs{0xaa, 0xbb};
const NamespaceId kOtherNs{0xcc, 0xdd};

std::vector<int32_t> Seq(int n, int start = 1000) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// `base` up to `keep` tokens, then `extra` tokens that differ from base.
std::vector<int32_t> Diverge(const std::vector<int32_t>& base, int keep, int extra) {
  std::vector<int32_t> v(base.begin(), base.begin() + keep);
  for (int i = 0; i < extra; ++i) v.push_back(-1 - i);
  return v;
}

Envelope Env(const std::string& id, uint32_t attempt = 0) { return Envelope{id, 7, attempt, 0}; }

DirectoryOptions SmallOptions(uint32_t slots = 8, uint64_t tokens_per_pack = 8) {
  DirectoryOptions o;
  o.pack_slots = slots;
  o.tokens_per_pack = tokens_per_pack;
  o.pack_bytes = 1 << 20;
  return o;
}

std::unique_ptr<Directory> Make(const DirectoryOptions& o) {
  auto d = Directory::Create(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

// Reserves and publishes `tokens`; returns the reservation.
Reservation Store(Directory& d, const std::vector<int32_t>& tokens, const NamespaceId& ns = kNs) {
  Result<Reservation> r = d.Reserve(ns, tokens);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok() && r->outcome == ReserveOutcome::kReserved) {
    EXPECT_TRUE(d.Publish(r->reservation_id).ok());
  }
  return r.ok() ? *r : Reservation{};
}

PackRecord Rec(uint32_t slot, uint64_t gen, uint64_t begin, uint64_t tokens, uint64_t off = 0) {
  return PackRecord{slot, gen, begin, off, tokens};
}

void ExpectInvariants(const Directory& d) {
  Status s = d.CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(DirectoryTest, OptionsAreValidated) {
  DirectoryOptions o = SmallOptions();
  EXPECT_TRUE(o.Validate().ok());
  o.pack_slots = 0;
  EXPECT_EQ(Directory::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.capacity_bytes = o.pack_bytes - 1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.owner_epoch = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.max_ticket_records = kMaxTicketRecords + 1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  Result<Geometry> g = DeriveGeometry(Llama31_8BSpec());
  ASSERT_TRUE(g.ok());
  DirectoryOptions eight = DirectoryOptions::ForGeometry(*g, 16);
  EXPECT_EQ(eight.tokens_per_pack, 8192u);
  EXPECT_EQ(eight.layers, 32u);
  EXPECT_TRUE(eight.Validate().ok());
}

TEST(DirectoryTest, StoreThenLookupSelectsOneRecordPerPack) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Reservation r = Store(*d, a);
  EXPECT_EQ(r.outcome, ReserveOutcome::kReserved);
  EXPECT_EQ(r.begin_tokens, 0u);
  EXPECT_EQ(r.end_tokens, 20u);
  EXPECT_EQ(r.records,
            (std::vector<PackRecord>{Rec(0, 1, 0, 8), Rec(1, 1, 8, 8), Rec(2, 1, 16, 4)}));

  // The query extends the stored prefix: all 20 tokens hit at granularity 1 and 4.
  std::vector<int32_t> q = a;
  q.push_back(5);
  Result<Ticket> t = d->Lookup(kNs, q, Env("r1"), 4);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->hit_tokens, 20u);
  EXPECT_EQ(t->records, r.records);
  EXPECT_EQ(t->owner_epoch, 1u);
  EXPECT_EQ(t->token_digest, TokenDigest(std::span(a)));
  // The exact stored prompt: never the last token, then rounded down.
  Result<Ticket> t2 = d->Lookup(kNs, a, Env("r2"), 1);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->hit_tokens, 19u);
  EXPECT_EQ(t2->records.back(), Rec(2, 1, 16, 3));
  Result<Ticket> t3 = d->Lookup(kNs, a, Env("r3"), 16);
  ASSERT_TRUE(t3.ok());
  EXPECT_EQ(t3->hit_tokens, 16u);
  EXPECT_EQ(t3->records.size(), 2u);
  // Leases: one per pack per ticket.
  EXPECT_EQ(d->Slot(0).leases, 3u);
  EXPECT_EQ(d->Slot(2).leases, 2u);
  // Another namespace misses and gets an empty ticket that holds nothing.
  Result<Ticket> miss = d->Lookup(kOtherNs, q, Env("r4"), 1);
  ASSERT_TRUE(miss.ok());
  EXPECT_TRUE(miss->empty());
  EXPECT_EQ(miss->hit_tokens, 0u);
  EXPECT_EQ(d->Cancel("r4"), CancelOutcome::kNoTicket);
  DirectoryStats s = d->Stats();
  EXPECT_EQ(s.records_selected, 3u + 3u + 2u);
  EXPECT_EQ(s.tickets_issued, 3u);
  ExpectInvariants(*d);
}

TEST(DirectoryTest, DivergentPrefixSharesThePackUpToTheDivergence) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Store(*d, a);
  // b shares 11 tokens with a (diverging inside pack 1, which holds [8, 16)).
  const std::vector<int32_t> b = Diverge(a, 11, 12);
  Reservation rb = Store(*d, b);
  EXPECT_EQ(rb.begin_tokens, 11u);
  EXPECT_EQ(rb.records, (std::vector<PackRecord>{Rec(3, 1, 11, 8), Rec(4, 1, 19, 4)}));
  std::vector<int32_t> qb = b;
  qb.push_back(0);
  Result<Ticket> t = d->Lookup(kNs, qb, Env("b"), 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->hit_tokens, 23u);
  EXPECT_EQ(t->records, (std::vector<PackRecord>{Rec(0, 1, 0, 8), Rec(1, 1, 8, 3), Rec(3, 1, 11, 8),
                                                 Rec(4, 1, 19, 4)}));
  // a still hits fully through the split pack 1, as one record.
  std::vector<int32_t> qa = a;
  qa.push_back(0);
  Result<Ticket> ta = d->Lookup(kNs, qa, Env("a"), 1);
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ(ta->records,
            (std::vector<PackRecord>{Rec(0, 1, 0, 8), Rec(1, 1, 8, 8), Rec(2, 1, 16, 4)}));
  // A query diverging from both inside pack 3 hits up to the divergence.
  std::vector<int32_t> c = Diverge(b, 15, 3);
  Result<Ticket> tc = d->Lookup(kNs, c, Env("c"), 1);
  ASSERT_TRUE(tc.ok());
  EXPECT_EQ(tc->hit_tokens, 15u);
  EXPECT_EQ(tc->records.back(), Rec(3, 1, 11, 4));
  ExpectInvariants(*d);
}

TEST(DirectoryTest, PartiallyPresentPrefixStoresOnlyTheSuffix) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(30);
  Store(*d, std::vector<int32_t>(a.begin(), a.begin() + 10));
  Reservation r = Store(*d, a);
  EXPECT_EQ(r.begin_tokens, 10u);
  EXPECT_EQ(r.records,
            (std::vector<PackRecord>{Rec(2, 1, 10, 8), Rec(3, 1, 18, 8), Rec(4, 1, 26, 4)}));
  Reservation again = Store(*d, a);
  EXPECT_EQ(again.outcome, ReserveOutcome::kAlreadyStored);
  EXPECT_EQ(again.begin_tokens, 30u);
  Reservation shorter = Store(*d, std::vector<int32_t>(a.begin(), a.begin() + 25));
  EXPECT_EQ(shorter.outcome, ReserveOutcome::kAlreadyStored);
  ExpectInvariants(*d);
}

TEST(DirectoryTest, ReservationIsInvisibleUntilPublishedAndDuplicatesJoin) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Result<Reservation> r = d->Reserve(kNs, a);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> q = a;
  q.push_back(0);
  Result<Ticket> before = d->Lookup(kNs, q, Env("x"), 1);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->hit_tokens, 0u);
  // A duplicate store joins: nothing to write, told whom to wait for.
  Result<Reservation> dup = d->Reserve(kNs, a);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->outcome, ReserveOutcome::kJoined);
  EXPECT_EQ(dup->reservation_id, r->reservation_id);
  EXPECT_EQ(dup->begin_tokens, 0u);
  EXPECT_EQ(dup->end_tokens, 20u);
  EXPECT_TRUE(dup->records.empty());
  // A longer store is told where the in-flight range ends; a divergent one inside it too.
  Result<Reservation> longer = d->Reserve(kNs, q);
  EXPECT_EQ(longer->outcome, ReserveOutcome::kJoined);
  EXPECT_EQ(longer->end_tokens, 20u);
  Result<Reservation> inside = d->Reserve(kNs, Diverge(a, 12, 4));
  EXPECT_EQ(inside->outcome, ReserveOutcome::kJoined);
  EXPECT_EQ(inside->end_tokens, 12u);
  EXPECT_TRUE(d->IsInFlight(r->reservation_id));
  std::thread waiter([&] { d->WaitForReservation(r->reservation_id); });
  ASSERT_TRUE(d->Publish(r->reservation_id).ok());
  waiter.join();
  EXPECT_FALSE(d->IsInFlight(r->reservation_id));
  EXPECT_EQ(d->Publish(r->reservation_id).code(), StatusCode::kNotFound);
  Result<Reservation> after = d->Reserve(kNs, a);
  EXPECT_EQ(after->outcome, ReserveOutcome::kAlreadyStored);
  Result<Reservation> rest = d->Reserve(kNs, q);
  EXPECT_EQ(rest->outcome, ReserveOutcome::kReserved);
  EXPECT_EQ(rest->begin_tokens, 20u);
  EXPECT_EQ(d->Stats().joins, 3u);
  ExpectInvariants(*d);
}

TEST(DirectoryTest, AbortReclaimsTheReservation) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(12);
  Store(*d, std::vector<int32_t>(a.begin(), a.begin() + 5));
  Result<Reservation> r = d->Reserve(kNs, a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(d->Slot(1).state, SlotState::kReserved);
  ASSERT_TRUE(d->Abort(r->reservation_id).ok());
  EXPECT_EQ(d->Slot(1).state, SlotState::kFree);
  EXPECT_EQ(d->Abort(r->reservation_id).code(), StatusCode::kNotFound);
  DirectoryStats s = d->Stats();
  EXPECT_EQ(s.tree_records, 1u);  // the split of pack 0 merged back
  Result<Reservation> again = d->Reserve(kNs, a);
  EXPECT_EQ(again->records, (std::vector<PackRecord>{Rec(1, 2, 5, 7)}));
  ExpectInvariants(*d);
}

class ClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = Make(SmallOptions());
    a_ = Seq(20);
    Store(*d_, a_);
    q_ = a_;
    q_.push_back(3);
    Result<Ticket> t = d_->Lookup(kNs, q_, Env("req"), 4);
    ASSERT_TRUE(t.ok());
    t_ = *t;
  }
  StatusCode ClaimCode(const Ticket& t, const Envelope& env, const NamespaceId& ns,
                       std::span<const int32_t> tokens, uint64_t endpoint) {
    return d_->Claim(ns, t, env, tokens, endpoint).status().code();
  }
  std::unique_ptr<Directory> d_;
  std::vector<int32_t> a_, q_;
  Ticket t_;
};

TEST_F(ClaimTest, EachMismatchHasItsOwnStatusAndChangesNothing) {
  Ticket other_epoch = t_;
  other_epoch.owner_epoch = 99;
  EXPECT_EQ(ClaimCode(other_epoch, Env("req"), kNs, q_, 20), StatusCode::kForeignOwner);
  Ticket unknown = t_;
  unknown.ticket_id = 12345;
  EXPECT_EQ(ClaimCode(unknown, Env("req"), kNs, q_, 20), StatusCode::kNotFound);
  Ticket forged = t_;
  forged.records[0].generation = 2;
  EXPECT_EQ(ClaimCode(forged, Env("req"), kNs, q_, 20), StatusCode::kCorruptTicket);
  forged = t_;
  forged.hit_tokens = 21;
  EXPECT_EQ(ClaimCode(forged, Env("req"), kNs, q_, 20), StatusCode::kCorruptTicket);
  EXPECT_EQ(ClaimCode(t_, Env("req"), kOtherNs, q_, 20), StatusCode::kNamespaceMismatch);
  EXPECT_EQ(ClaimCode(t_, Env("other"), kNs, q_, 20), StatusCode::kForeignOwner);
  EXPECT_EQ(ClaimCode(t_, Env("req", 1), kNs, q_, 20), StatusCode::kForeignOwner);
  Envelope other_rank = Env("req");
  other_rank.rank = 3;
  EXPECT_EQ(ClaimCode(t_, other_rank, kNs, q_, 20), StatusCode::kForeignOwner);
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, q_, 21), StatusCode::kEndpointBeyondTicket);
  std::vector<int32_t> wrong = q_;
  wrong[7] += 1;
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, wrong, 20), StatusCode::kTokenMismatch);
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, std::span(q_).first(19), 16),
            StatusCode::kTokenMismatch);
  std::vector<uint8_t> bytes = EncodeTicket(t_);
  bytes[40] ^= 1;
  EXPECT_EQ(d_->ClaimBytes(kNs, bytes, Env("req"), q_, 20).status().code(),
            StatusCode::kCorruptTicket);
  EXPECT_EQ(d_->Stats().claim_failures, 12u);
  // None of the failures consumed the ticket: the right claim still succeeds, through bytes.
  Result<ClaimedRange> ok = d_->ClaimBytes(kNs, EncodeTicket(t_), Env("req"), q_, 18);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->endpoint_tokens, 18u);
  EXPECT_EQ(ok->records,
            (std::vector<PackRecord>{Rec(0, 1, 0, 8), Rec(1, 1, 8, 8), Rec(2, 1, 16, 2)}));
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, q_, 20), StatusCode::kFailedPrecondition);
}

TEST_F(ClaimTest, RepeatedLookupNeverReplacesTheOutstandingQuery) {
  Result<Ticket> same = d_->Lookup(kNs, q_, Env("req"), 4);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, t_);
  EXPECT_EQ(d_->Slot(0).leases, 1u);  // no second lease
  std::vector<int32_t> other = q_;
  other.back() = 77;
  EXPECT_EQ(d_->Lookup(kNs, other, Env("req"), 4).status().code(), StatusCode::kTicketReplaced);
  EXPECT_EQ(d_->Lookup(kNs, q_, Env("req"), 8).status().code(), StatusCode::kTicketReplaced);
  EXPECT_EQ(d_->Lookup(kNs, q_, Env("req", 1), 4).status().code(), StatusCode::kTicketReplaced);
  EXPECT_EQ(d_->Stats().repeated_lookups, 1u);
  EXPECT_EQ(d_->Cancel("req"), CancelOutcome::kCancelled);
  EXPECT_EQ(d_->Slot(0).leases, 0u);
  Result<Ticket> fresh = d_->Lookup(kNs, other, Env("req"), 4);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->ticket_id, t_.ticket_id);
  // The cancelled ticket can no longer be claimed.
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, q_, 20), StatusCode::kNotFound);
}

TEST_F(ClaimTest, ReleaseOnlyAfterClaimAndCancelKeepsClaimedTickets) {
  EXPECT_EQ(d_->Release(t_.ticket_id).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(d_->Claim(kNs, t_, Env("req"), q_, 20).ok());
  EXPECT_EQ(d_->Cancel("req"), CancelOutcome::kClaimedKept);
  EXPECT_EQ(d_->Slot(0).leases, 1u);
  ASSERT_TRUE(d_->Release(t_.ticket_id).ok());
  EXPECT_EQ(d_->Slot(0).leases, 0u);
  EXPECT_EQ(d_->Release(t_.ticket_id).code(), StatusCode::kNotFound);
  EXPECT_EQ(d_->Cancel("req"), CancelOutcome::kNoTicket);
  DirectoryStats s = d_->Stats();
  EXPECT_EQ(s.leases_taken, 3u);
  EXPECT_EQ(s.leases_released, 3u);
  ExpectInvariants(*d_);
}

TEST_F(ClaimTest, InvalidationRetiresLeasedPacksAndStaleTicketsFailTheirClaim) {
  // Invalidate pack 1: packs 1 and 2 (its dependent) are retired, but leased, so not reclaimed.
  Result<InvalidateResult> inv = d_->InvalidatePack(1, 1);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->packs_retired, 2u);
  EXPECT_EQ(d_->Slot(1).state, SlotState::kRetired);
  EXPECT_EQ(d_->Slot(2).state, SlotState::kRetired);
  EXPECT_EQ(d_->Slot(0).state, SlotState::kVisible);
  EXPECT_EQ(ClaimCode(t_, Env("req"), kNs, q_, 20), StatusCode::kStaleGeneration);
  EXPECT_EQ(d_->InvalidatePack(1, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(d_->InvalidatePack(1, 7).status().code(), StatusCode::kStaleGeneration);
  EXPECT_EQ(d_->InvalidatePack(99, 1).status().code(), StatusCode::kInvalidArgument);
  // A lookup now hits only pack 0; a store re-fills the tail in fresh slots.
  Result<Ticket> t2 = d_->Lookup(kNs, q_, Env("req2"), 1);
  EXPECT_EQ(t2->hit_tokens, 8u);
  Reservation r = Store(*d_, a_);
  EXPECT_EQ(r.records, (std::vector<PackRecord>{Rec(3, 1, 8, 8), Rec(4, 1, 16, 4)}));
  // Cancelling the stale ticket reclaims the retired slots; their reuse bumps the generation.
  EXPECT_EQ(d_->Cancel("req"), CancelOutcome::kCancelled);
  EXPECT_EQ(d_->Slot(1).state, SlotState::kFree);
  EXPECT_EQ(d_->Slot(2).state, SlotState::kFree);
  Reservation other = Store(*d_, Seq(3, 5000));
  EXPECT_EQ(other.records, (std::vector<PackRecord>{Rec(1, 2, 0, 3)}));
  DirectoryStats s = d_->Stats();
  EXPECT_EQ(s.retirements, 2u);
  EXPECT_EQ(s.reclaims, 2u);
  ExpectInvariants(*d_);
}

TEST(DirectoryTest, InvalidatePrefixClipsThePackHoldingItsLastToken) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Store(*d, a);
  Store(*d, Diverge(a, 13, 5));  // branch inside pack 1
  // Remove everything starting with a[0, 11): pack 1 keeps [8, 10), pack 2 and the branch go.
  Result<InvalidateResult> inv = d->InvalidatePrefix(kNs, std::span(a).first(11));
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->packs_retired, 2u);
  EXPECT_EQ(inv->packs_clipped, 1u);
  std::vector<int32_t> q = a;
  q.push_back(1);
  Result<Ticket> t = d->Lookup(kNs, q, Env("q"), 1);
  EXPECT_EQ(t->hit_tokens, 10u);
  EXPECT_EQ(t->records.back(), Rec(1, 1, 8, 2));
  // A prefix not in the tree changes nothing.
  Result<InvalidateResult> none = d->InvalidatePrefix(kNs, Seq(4, 9));
  EXPECT_EQ(none->packs_retired + none->packs_clipped, 0u);
  // Re-storing continues from the clip in a new pack.
  Reservation r = Store(*d, a);
  EXPECT_EQ(r.begin_tokens, 10u);
  EXPECT_EQ(r.records.front().path_token_begin, 10u);
  // Invalidating the first token drops the namespace.
  ASSERT_TRUE(d->Cancel("q") == CancelOutcome::kCancelled);
  ASSERT_TRUE(d->InvalidatePrefix(kNs, std::span(a).first(1)).ok());
  EXPECT_TRUE(d->Namespaces().empty());
  EXPECT_EQ(d->Stats().visible_slots, 0u);
  ExpectInvariants(*d);
}

// Records what an observer hears, tagged with its name (several share one log).
class RecordingObserver final : public DirectoryObserver {
 public:
  RecordingObserver(std::string name, std::vector<std::string>* log)
      : name_(std::move(name)), log_(log) {}
  void OnPublished(uint64_t, const NamespaceId&, std::span<const int32_t> path,
                   std::span<const PackRecord> packs) override {
    log_->push_back(name_ + " published " + std::to_string(packs.size()) + " packs, path " +
                    std::to_string(path.size()));
  }
  void OnRemoved(const RemovedPack& p) override {
    log_->push_back(name_ + " removed slot " + std::to_string(p.slot) + " gen " +
                    std::to_string(p.generation) + " at " + std::to_string(p.path_begin) +
                    " kept " + std::to_string(p.kept_tokens) + (p.ns == kNs ? "" : " other ns"));
  }

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

TEST(DirectoryTest, EveryObserverHearsEveryChangeInTheOrderAdded) {
  auto d = Make(SmallOptions(/*slots=*/3));
  std::vector<std::string> log;
  RecordingObserver first("first", &log), second("second", &log);
  ASSERT_TRUE(d->AddObserver(&first).ok());
  ASSERT_TRUE(d->AddObserver(&second).ok());
  EXPECT_EQ(d->AddObserver(&first).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->AddObserver(nullptr).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> a = Seq(20);  // packs [0, 8) [8, 16) [16, 20) in slots 0, 1, 2
  Store(*d, a);
  // A clip reports the head it keeps: pack 1 keeps [8, 10); pack 2 goes.
  ASSERT_TRUE(d->InvalidatePrefix(kNs, std::span(a).first(11)).ok());
  // Eviction retires: 16 other tokens take the freed slot 2 and evict the LRU leaf, pack 1
  // (its head).
  d->RemoveObserver(&second);
  Store(*d, Seq(16, 5000));
  EXPECT_EQ(log, (std::vector<std::string>{
                     "first published 3 packs, path 20",
                     "second published 3 packs, path 20",
                     "first removed slot 1 gen 1 at 8 kept 2",
                     "second removed slot 1 gen 1 at 8 kept 2",
                     "first removed slot 2 gen 1 at 16 kept 0",
                     "second removed slot 2 gen 1 at 16 kept 0",
                     "first removed slot 1 gen 1 at 8 kept 0",
                     "first published 2 packs, path 16",
                 }));
  ExpectInvariants(*d);
}

TEST(DirectoryTest, ObserversAreBounded) {
  auto d = Make(SmallOptions());
  std::vector<std::string> log;
  std::vector<std::unique_ptr<RecordingObserver>> obs;
  for (size_t i = 0; i <= Directory::kMaxObservers; ++i) {
    obs.push_back(std::make_unique<RecordingObserver>("o", &log));
    const Status s = d->AddObserver(obs.back().get());
    EXPECT_EQ(s.code(),
              i < Directory::kMaxObservers ? StatusCode::kOk : StatusCode::kResourceExhausted);
  }
  for (auto& o : obs) d->RemoveObserver(o.get());
}

TEST(DirectoryTest, InvalidationDoomsInFlightStores) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Store(*d, std::vector<int32_t>(a.begin(), a.begin() + 4));
  Result<Reservation> r = d->Reserve(kNs, a);
  ASSERT_TRUE(r.ok());
  Result<InvalidateResult> inv = d->InvalidatePrefix(kNs, std::span(a).first(10));
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->reservations_doomed, 1u);
  EXPECT_EQ(inv->packs_retired, 0u);
  // The doomed store's slots stay reserved for its writer until it publishes or aborts.
  EXPECT_EQ(d->Slot(1).state, SlotState::kReserved);
  ExpectInvariants(*d);
  EXPECT_EQ(d->Publish(r->reservation_id).code(), StatusCode::kAborted);
  EXPECT_EQ(d->Slot(1).state, SlotState::kFree);
  EXPECT_EQ(d->Slot(2).state, SlotState::kFree);
  std::vector<int32_t> q = a;
  q.push_back(0);
  EXPECT_EQ(d->Lookup(kNs, q, Env("x"), 1)->hit_tokens, 4u);
  ExpectInvariants(*d);
}

TEST(DirectoryTest, EvictionIsLruOverUnleasedLeafPacks) {
  DirectoryOptions o = SmallOptions(8, 8);
  o.capacity_bytes = 3 * o.pack_bytes;  // 3 usable slots
  auto d = Make(o);
  const std::vector<int32_t> a = Seq(8, 100), b = Seq(8, 200), c = Seq(8, 300);
  Store(*d, a);
  Store(*d, b);
  Store(*d, c);
  // Touch a (lookup), so b is the least recently used.
  std::vector<int32_t> qa = a;
  qa.push_back(0);
  ASSERT_TRUE(d->Lookup(kNs, qa, Env("a"), 1).ok());
  ASSERT_EQ(d->Cancel("a"), CancelOutcome::kCancelled);
  Reservation r = Store(*d, Seq(8, 400));
  EXPECT_EQ(r.records, (std::vector<PackRecord>{Rec(1, 2, 0, 8)}));  // b's slot, reused
  EXPECT_EQ(d->Stats().evictions, 1u);
  // A leased pack is never evicted: lease c (slot 2) and the new pack (slot 1); a goes next.
  std::vector<int32_t> qc = c;
  qc.push_back(0);
  ASSERT_TRUE(d->Lookup(kNs, qc, Env("c"), 1).ok());
  Store(*d, Seq(8, 500));
  EXPECT_EQ(d->Slot(0).generation, 2u);
  // Now slots hold c (leased), 400, 500. A pack with a dependent goes after the dependent:
  // extend 500 (slot 0) with a tail, then ask for one more slot.
  std::vector<int32_t> e = Seq(8, 500);
  for (int i = 0; i < 4; ++i) e.push_back(600 + i);
  Reservation re = Store(*d, e);  // evicts 400 (slot 1), the LRU leaf
  EXPECT_EQ(re.records, (std::vector<PackRecord>{Rec(1, 3, 8, 4)}));
  Reservation rf = Store(*d, Seq(5, 700));  // 500 has a dependent, c is leased: evict the tail
  EXPECT_EQ(rf.records, (std::vector<PackRecord>{Rec(1, 4, 0, 5)}));
  EXPECT_EQ(d->Stats().evictions, 4u);
  ExpectInvariants(*d);
}

// An observer whose removals become "durable" only when the test says so (the journal's
// SlotReusable in miniature).
class DurableRemovals final : public DirectoryObserver {
 public:
  void OnPublished(uint64_t, const NamespaceId&, std::span<const int32_t>,
                   std::span<const PackRecord>) override {}
  void OnRemoved(const RemovedPack& p) override { pending.insert(p.slot); }
  bool SlotReusable(uint32_t slot) override { return pending.count(slot) == 0; }
  std::set<uint32_t> pending;  // removed, not yet durable
};

// free_reserve_packs: a full store evicts one pack more than a reservation needs, and the next
// reservation takes the slot freed earlier (its removal durable by then), not the one its own
// eviction just freed; without the reserve every reservation reuses its own fresh eviction.
TEST(DirectoryTest, FreeReserveEvictsAheadAndReusesSlotsWhoseRemovalIsDurable) {
  for (uint32_t reserve : {0u, 1u}) {
    DirectoryOptions o = SmallOptions(8, 8);
    o.capacity_bytes = 4 * o.pack_bytes;  // 4 usable slots
    o.free_reserve_packs = reserve;
    auto d = Make(o);
    DurableRemovals journal;
    ASSERT_TRUE(d->AddObserver(&journal).ok());
    uint32_t waits = 0;  // reservations that got a slot whose removal was still pending
    for (int i = 0; i < 12; ++i) {
      Result<Reservation> r = d->Reserve(kNs, Seq(8, 1000 * (i + 1)));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->records.size(), 1u);
      if (journal.pending.count(r->records[0].pack_slot) != 0) ++waits;
      ASSERT_TRUE(d->Publish(r->reservation_id).ok());
      // A journal commit between two stores makes every removal queued so far durable; what a
      // reservation evicts for itself is still pending when it picks its slot.
      journal.pending.clear();
      const DirectoryStats st = d->Stats();
      if (i >= 4) {
        EXPECT_EQ(st.free_slots, reserve) << "store " << i;  // the reserve stays free
        EXPECT_EQ(st.visible_slots, 4u - reserve) << "store " << i;
      }
    }
    // Without the reserve a full store's reservation reuses the slot it just evicted.
    EXPECT_EQ(waits, reserve == 0 ? 8u : 0u) << "reserve " << reserve;
    ExpectInvariants(*d);
  }
}

// Capacity is a setting, not a verdict on the data: a snapshot written with 8 usable slots loads
// into a directory allowed 3 (it once failed, "pack N lies beyond this store's capacity bound",
// and the whole index was discarded), and EvictOverCapacity keeps the 3 most recently used,
// wherever they lie. New reservations take usable slots only.
TEST(DirectoryTest, ASnapshotLoadsUnderASmallerCapacityAndKeepsTheMostRecentPacks) {
  DirectoryOptions o = SmallOptions(8, 8);
  auto d = Make(o);
  for (int i = 0; i < 8; ++i) Store(*d, Seq(8, 1000 * (i + 1)));    // one pack each, slots 0..7
  ASSERT_TRUE(d->Lookup(kNs, Seq(8, 1000), Env("touch"), 1).ok());  // prefix 0: most recent
  d->Cancel("touch");
  const std::vector<uint8_t> snap = d->Serialize();
  DirectoryOptions small = o;
  small.capacity_bytes = 3 * o.pack_bytes;
  Result<std::unique_ptr<Directory>> r = Directory::Deserialize(small, snap);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Directory& e = **r;
  EXPECT_EQ(e.ListPacks(kNs).size(), 8u);
  EXPECT_EQ(e.EvictOverCapacity(), 5u);
  EXPECT_EQ(e.EvictOverCapacity(), 0u);
  ExpectInvariants(e);
  std::set<uint32_t> kept;
  for (const StoredPack& p : e.ListPacks(kNs)) kept.insert(p.record.pack_slot);
  EXPECT_EQ(kept, (std::set<uint32_t>{0, 6, 7}));  // the most recently used three
  EXPECT_EQ(e.Stats().free_slots, 0u);
  // Full: a new store evicts the least recently used (slot 6) and takes a usable slot.
  Reservation fresh = Store(e, Seq(8, 90000));
  ASSERT_EQ(fresh.records.size(), 1u);
  EXPECT_LT(fresh.records[0].pack_slot, 3u);
  ExpectInvariants(e);
  EXPECT_EQ(e.ListPacks(kNs).size(), 3u);
}

TEST(DirectoryTest, ReserveTakesWhatFitsAndFailsWhenNothingCanBeFreed) {
  DirectoryOptions o = SmallOptions(4, 8);
  auto d = Make(o);
  const std::vector<int32_t> a = Seq(40);
  Result<Reservation> r = d->Reserve(kNs, a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->end_tokens, 32u);  // 4 packs of 8 fit, not 5
  EXPECT_EQ(r->records.size(), 4u);
  // Everything is reserved: nothing can be evicted.
  Result<Reservation> r2 = d->Reserve(kNs, Seq(4, 9000));
  EXPECT_EQ(r2.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(d->Publish(r->reservation_id).ok());
  // The continuation of the prefix may not evict the pack it continues, and the others have
  // dependents: nothing can be freed for it.
  Result<Reservation> r3 = d->Reserve(kNs, a);
  EXPECT_EQ(r3.status().code(), StatusCode::kResourceExhausted);
  Result<Reservation> r4 = d->Reserve(kNs, Seq(4, 9000));
  ASSERT_TRUE(r4.ok());  // evicts the deepest pack of a
  EXPECT_EQ(r4->records, (std::vector<PackRecord>{Rec(3, 2, 0, 4)}));
  ExpectInvariants(*d);
}

TEST(DirectoryTest, BoundsFailWithClearStatus) {
  DirectoryOptions o = SmallOptions(64, 8);
  o.max_tickets = 1;
  o.max_namespaces = 1;
  o.max_reservations = 1;
  o.max_query_tokens = 100;
  auto d = Make(o);
  Store(*d, Seq(20));
  std::vector<int32_t> q = Seq(21);
  ASSERT_TRUE(d->Lookup(kNs, q, Env("one"), 1).ok());
  Result<Ticket> two = d->Lookup(kNs, q, Env("two"), 1);
  EXPECT_EQ(two.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(two.status().message().find("max_tickets"), std::string::npos);
  EXPECT_EQ(d->Reserve(kOtherNs, Seq(3)).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(d->Reserve(kNs, Seq(3, 50)).ok());
  EXPECT_EQ(d->Reserve(kNs, Seq(3, 60)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(d->Lookup(kNs, Seq(101), Env("x"), 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->Lookup(kNs, q, Env("x"), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->Lookup(kNs, q, Envelope{}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->Reserve(kNs, {}).status().code(), StatusCode::kInvalidArgument);

  DirectoryOptions small = SmallOptions(64, 8);
  small.max_arena_bytes = 4 * 10;
  auto d2 = Make(small);
  Result<Reservation> big = d2->Reserve(kNs, Seq(11));
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("arena"), std::string::npos);
  small = SmallOptions(64, 8);
  small.max_records = 2;
  auto d3 = Make(small);
  Result<Reservation> many = d3->Reserve(kNs, Seq(17));
  EXPECT_EQ(many.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(many.status().message().find("record"), std::string::npos);
  EXPECT_EQ(d3->Stats().reserved_slots, 0u);  // a failed reserve takes nothing
}

TEST(DirectoryTest, TicketRecordBoundClipsTheHit) {
  DirectoryOptions o = SmallOptions(64, 4);
  o.max_ticket_records = 3;
  auto d = Make(o);
  Store(*d, Seq(30));
  Result<Ticket> t = d->Lookup(kNs, Seq(31), Env("x"), 2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->hit_tokens, 12u);
  EXPECT_EQ(t->records.size(), 3u);
}

TEST(DirectoryTest, ListPacksEnumeratesVisiblePacksParentsFirst) {
  auto d = Make(SmallOptions());
  const std::vector<int32_t> a = Seq(20);
  Store(*d, a);
  Store(*d, Diverge(a, 10, 3));
  ASSERT_TRUE(d->Reserve(kNs, Diverge(a, 4, 2)).ok());  // in flight: not listed
  std::vector<StoredPack> packs = d->ListPacks(kNs);
  ASSERT_EQ(packs.size(), 4u);
  EXPECT_EQ(packs[0].record, Rec(0, 1, 0, 8));
  EXPECT_EQ(packs[0].parent_slot, UINT32_MAX);
  EXPECT_EQ(packs[1].record.pack_slot, 1u);
  EXPECT_EQ(packs[1].parent_slot, 0u);
  for (const StoredPack& p : packs) EXPECT_EQ(p.ns, kNs);
  EXPECT_TRUE(d->ListPacks(kOtherNs).empty());
}

// The paper's running example (8B geometry): 49,152 cached tokens of a 65,280-token request
// select 6 records; a 131,072-token prefix selects 16 at every reuse granularity.
TEST(DirectoryTest, PaperGeometrySelectsOneRecordPerPack) {
  Result<Geometry> g = DeriveGeometry(Llama31_8BSpec());
  ASSERT_TRUE(g.ok());
  auto d = Make(DirectoryOptions::ForGeometry(*g, 64));
  std::vector<int32_t> prompt(65280);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>(i * 2654435761u % 128000);
  Reservation r = Store(*d, std::vector<int32_t>(prompt.begin(), prompt.begin() + 49152));
  EXPECT_EQ(r.records.size(), 6u);
  Result<Ticket> t = d->Lookup(kNs, prompt, Env("paper"), 256);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->hit_tokens, 49152u);
  EXPECT_EQ(t->records.size(), 6u);
  EXPECT_EQ(d->Stats().records_selected, 6u);
  EXPECT_EQ(d->Stats().leases_taken, 6u);

  auto d2 = Make(DirectoryOptions::ForGeometry(*g, 16));
  std::vector<int32_t> big(131072 + 512);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(i * 40503u % 128000);
  EXPECT_EQ(Store(*d2, std::vector<int32_t>(big.begin(), big.begin() + 131072)).records.size(),
            16u);
  for (uint64_t gran : {16u, 256u, 8192u}) {
    Result<Ticket> tt = d2->Lookup(kNs, big, Env("g" + std::to_string(gran)), gran);
    ASSERT_TRUE(tt.ok());
    EXPECT_EQ(tt->hit_tokens, 131072u);
    EXPECT_EQ(tt->records.size(), 16u);
  }
}

TEST(DirectoryTest, ScalarModeMatchesTheTreeAndDoesPerObjectWork) {
  for (ScalarObjects objects : {ScalarObjects::kChunk, ScalarObjects::kChunkLayer}) {
    DirectoryOptions o = SmallOptions(16, 8);
    auto tree = Make(o);
    o.index = IndexMode::kScalar;
    o.scalar_chunk_tokens = 4;
    o.scalar_objects = objects;
    o.layers = 3;
    auto scalar = Make(o);
    const uint32_t k = objects == ScalarObjects::kChunk ? 1 : 3;
    const std::vector<int32_t> a = Seq(30);
    for (Directory* d : {tree.get(), scalar.get()}) {
      Store(*d, a);
      Store(*d, Diverge(a, 13, 9));
    }
    EXPECT_EQ(scalar->Stats().scalar_keys, (7u + 2u) * k);  // 7 chunks of a, 2 ending in (13, 22]
    for (const auto& q : {Diverge(a, 30, 1), Diverge(a, 13, 10), Diverge(a, 17, 2)}) {
      for (uint64_t gran : {4u, 8u}) {
        std::string id = "q" + std::to_string(q.size()) + "_" + std::to_string(gran);
        Result<Ticket> tt = tree->Lookup(kNs, q, Env(id), gran);
        Result<Ticket> ts = scalar->Lookup(kNs, q, Env(id), gran);
        ASSERT_TRUE(tt.ok() && ts.ok());
        EXPECT_EQ(tt->hit_tokens, ts->hit_tokens) << id;
        EXPECT_EQ(tt->records, ts->records) << id;
        EXPECT_EQ(tree->Cancel(id), scalar->Cancel(id));
      }
    }
    // Work: for a 30-token hit at granularity 4 (28 tokens), the tree selects 4 records and
    // leases 4 packs; the scalar index builds, probes and leases a key per chunk (x layers).
    DirectoryStats before = scalar->Stats();
    DirectoryStats tb = tree->Stats();
    Result<Ticket> ts = scalar->Lookup(kNs, Diverge(a, 30, 1), Env("w"), 4);
    Result<Ticket> tt = tree->Lookup(kNs, Diverge(a, 30, 1), Env("w"), 4);
    EXPECT_EQ(ts->records, tt->records);
    DirectoryStats after = scalar->Stats();
    EXPECT_EQ(tree->Stats().records_selected - tb.records_selected, 4u);
    EXPECT_EQ(after.records_selected - before.records_selected, 7u * k);
    EXPECT_EQ(after.leases_taken - before.leases_taken, 7u * k);
    EXPECT_EQ(after.key_probes - before.key_probes, 7u * k);
    // Invalidation removes the keys of every chunk that lost a token.
    scalar->Cancel("w");
    tree->Cancel("w");
    ASSERT_TRUE(scalar->InvalidatePrefix(kNs, std::span(a).first(18)).ok());
    ASSERT_TRUE(tree->InvalidatePrefix(kNs, std::span(a).first(18)).ok());
    Result<Ticket> s2 = scalar->Lookup(kNs, Diverge(a, 30, 1), Env("w2"), 4);
    Result<Ticket> t2 = tree->Lookup(kNs, Diverge(a, 30, 1), Env("w2"), 4);
    EXPECT_EQ(s2->hit_tokens, 16u);
    EXPECT_EQ(s2->records, t2->records);
    ExpectInvariants(*scalar);
  }
}

TEST(DirectoryTest, SnapshotRoundTripsUnderANewEpoch) {
  for (IndexMode mode : {IndexMode::kTree, IndexMode::kScalar}) {
    DirectoryOptions o = SmallOptions(16, 8);
    o.index = mode;
    o.scalar_chunk_tokens = 4;
    auto d = Make(o);
    const std::vector<int32_t> a = Seq(30);
    Store(*d, a);
    Store(*d, Diverge(a, 13, 9));
    Store(*d, Seq(5, 9000), kOtherNs);
    ASSERT_TRUE(d->InvalidatePrefix(kNs, std::span(a).first(26)).ok());
    ASSERT_TRUE(d->Reserve(kNs, Diverge(a, 3, 4)).ok());  // in flight: not captured
    Result<Ticket> old = d->Lookup(kNs, Diverge(a, 30, 1), Env("old"), 1);
    ASSERT_TRUE(old.ok());
    const std::vector<uint8_t> snap = d->Serialize();

    Result<std::unique_ptr<Directory>> r = Directory::Deserialize(o, snap);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Directory& e = **r;
    ExpectInvariants(e);
    EXPECT_EQ(e.owner_epoch(), 2u);
    EXPECT_EQ(e.ListPacks(kNs).size(), d->ListPacks(kNs).size());
    EXPECT_EQ(e.ListPacks(kOtherNs).size(), 1u);
    for (uint32_t s = 0; s < 16; ++s) {
      EXPECT_EQ(e.Slot(s).generation, d->Slot(s).generation);
      EXPECT_EQ(e.Slot(s).state == SlotState::kVisible, d->Slot(s).state == SlotState::kVisible);
    }
    for (const auto& q : {Diverge(a, 30, 1), Diverge(a, 13, 10), Seq(6, 9000)}) {
      const NamespaceId& ns = q[0] == 9000 ? kOtherNs : kNs;
      Result<Ticket> x = e.Lookup(ns, q, Env("n"), 4);
      ASSERT_TRUE(x.ok());
      d->Cancel("n");
      Result<Ticket> y = d->Lookup(ns, q, Env("n"), 4);
      EXPECT_EQ(x->records, y->records);
      EXPECT_EQ(x->hit_tokens, y->hit_tokens);
      e.Cancel("n");
      d->Cancel("n");
    }
    // Tickets of the old instance are foreign to the new one.
    EXPECT_EQ(e.Claim(kNs, *old, Env("old"), Diverge(a, 30, 1), 1).status().code(),
              StatusCode::kForeignOwner);
    // Reuse continues above the captured generations.
    Reservation fresh = Store(e, Seq(3, 7000));
    EXPECT_GT(fresh.records[0].generation, d->Slot(fresh.records[0].pack_slot).generation);
    // Damage is detected.
    std::vector<uint8_t> bad = snap;
    bad[bad.size() / 2] ^= 4;
    EXPECT_EQ(Directory::Deserialize(o, bad).status().code(), StatusCode::kCorruption);
    EXPECT_EQ(Directory::Deserialize(o, std::span(snap).first(snap.size() - 1)).status().code(),
              StatusCode::kTruncated);
    EXPECT_EQ(Directory::Deserialize(o, std::span(snap).first(10)).status().code(),
              StatusCode::kTruncated);
    DirectoryOptions other = o;
    other.tokens_per_pack = 16;
    EXPECT_EQ(Directory::Deserialize(other, snap).status().code(), StatusCode::kGeometryMismatch);
  }
}

TEST(DirectoryTest, GenerationFloorAppliesToEveryNewGeneration) {
  DirectoryOptions o = SmallOptions(4, 8);
  o.generation_floor = uint64_t{1} << 63;
  EXPECT_EQ(Directory::Create(o).status().code(), StatusCode::kInvalidArgument);

  // A directory that starts empty issues nothing below the floor, and above it counts on.
  const uint64_t floor = uint64_t{7} << 32;
  o.generation_floor = floor;
  auto d = Make(o);
  Reservation a = Store(*d, Seq(20));  // 3 packs: slots 0, 1, 2
  ASSERT_EQ(a.records.size(), 3u);
  for (const PackRecord& r : a.records) EXPECT_EQ(r.generation, floor);
  ASSERT_TRUE(d->InvalidatePrefix(kNs, Seq(1)).ok());  // retires all three
  Reservation b = Store(*d, Seq(5, 5000));
  ASSERT_EQ(b.records.size(), 1u);
  EXPECT_EQ(b.records[0].pack_slot, 0u);
  EXPECT_EQ(b.records[0].generation, floor + 1);
  ExpectInvariants(*d);

  // A loaded directory keeps the captured generations (below a new floor) for its visible
  // packs, and every reuse starts at the new floor.
  const std::vector<uint8_t> snap = d->Serialize();
  DirectoryOptions next = o;
  next.generation_floor = uint64_t{9} << 32;
  auto r = Directory::Deserialize(next, snap);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Directory& e = **r;
  EXPECT_EQ(e.Slot(0).generation, floor + 1);
  EXPECT_EQ(e.Slot(0).state, SlotState::kVisible);
  Result<Ticket> hit = e.Lookup(kNs, Seq(6, 5000), Env("t"), 1);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_tokens, 5u);
  e.Cancel("t");
  Reservation c = Store(e, Seq(5, 6000));
  ASSERT_EQ(c.records.size(), 1u);
  EXPECT_EQ(c.records[0].pack_slot, 1u);
  EXPECT_EQ(c.records[0].generation, next.generation_floor);
  ExpectInvariants(e);
}

}  // namespace
}  // namespace rangekv
