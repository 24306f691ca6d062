// Lookups, claims, releases, cancellations, stores, publications, invalidations and evictions
// from several threads at once (run under ThreadSanitizer in CI: label "tsan"). Each thread runs
// seeded operations; no sleeps, no timing. The store and churn threads run a fixed number; the
// request threads run at least that many and until both store threads are done, and every
// fourth request publishes its own query first (as a serving engine stores a prompt it
// computed). Without both, claims depended on scheduling: the directory's operations are
// sub-microsecond, so on two cores each thread runs thousands in one burst, and a churn burst
// could empty the 24 slots just before a request thread ran all its lookups (0-18 claims in a
// few runs of a hundred with a CPU hog beside it). Afterwards every lease must have been
// returned, every retired slot reclaimed, and the directory's invariants must hold.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <random>
#include <thread>

#include "directory/directory.h"

namespace rangekv {
namespace {

constexpr uint64_t kT = 8;
constexpr int kOpsPerThread = 10000;

std::vector<std::vector<int32_t>> Bases(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> bases(6, std::vector<int32_t>(64));
  for (auto& b : bases) {
    for (auto& x : b) x = static_cast<int32_t>(rng() % 3);
  }
  return bases;
}

std::vector<int32_t> Query(std::mt19937_64& rng, const std::vector<std::vector<int32_t>>& bases) {
  const auto& base = bases[rng() % bases.size()];
  std::vector<int32_t> q(base.begin(), base.begin() + 1 + rng() % base.size());
  const uint64_t tail = rng() % 12;
  for (uint64_t i = 0; i < tail; ++i) q.push_back(static_cast<int32_t>(rng() % 5));
  return q;
}

void RunMix(IndexMode mode) {
  DirectoryOptions o;
  o.pack_slots = 24;
  o.tokens_per_pack = kT;
  o.pack_bytes = 4096;
  o.index = mode;
  o.scalar_chunk_tokens = 4;
  auto d = std::move(Directory::Create(o)).value();
  const NamespaceId ns{3, 4};
  const auto bases = Bases(5);
  std::atomic<uint64_t> claims_ok{0}, stale{0}, unexpected{0};
  constexpr int kRequestThreads = 3;
  constexpr int kStoreThreads = 2;
  std::atomic<int> stores_running{kStoreThreads};
  std::latch start(kStoreThreads + kRequestThreads + 1);

  auto store = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    start.arrive_and_wait();
    for (int i = 0; i < kOpsPerThread; ++i) {
      const std::vector<int32_t> q = Query(rng, bases);
      Result<Reservation> r = d->Reserve(ns, q);
      if (!r.ok()) {
        if (r.status().code() != StatusCode::kResourceExhausted) unexpected++;
        continue;
      }
      if (r->outcome == ReserveOutcome::kJoined && rng() % 2 == 0) {
        d->WaitForReservation(r->reservation_id);
      } else if (r->outcome == ReserveOutcome::kReserved) {
        Status s = rng() % 10 == 0 ? d->Abort(r->reservation_id) : d->Publish(r->reservation_id);
        if (!s.ok() && s.code() != StatusCode::kAborted) unexpected++;
      }
    }
    stores_running--;
  };
  auto request = [&](int thread) {
    std::mt19937_64 rng(100 + thread);
    start.arrive_and_wait();
    for (int i = 0; i < kOpsPerThread || stores_running.load() > 0; ++i) {
      const std::vector<int32_t> q = Query(rng, bases);
      const Envelope env{"t" + std::to_string(thread) + "-" + std::to_string(i % 5), 1, 0, 0};
      const uint64_t g = 1 + rng() % 4;
      if (rng() % 4 == 0) {
        Result<Reservation> r = d->Reserve(ns, q);
        if (r.ok() && r->outcome == ReserveOutcome::kReserved) {
          Status s = d->Publish(r->reservation_id);
          if (!s.ok() && s.code() != StatusCode::kAborted) unexpected++;
        } else if (!r.ok() && r.status().code() != StatusCode::kResourceExhausted) {
          unexpected++;
        }
      }
      Result<Ticket> t = d->Lookup(ns, q, env, g);
      if (!t.ok()) {
        // Another query of this request id is outstanding (its claim was kept).
        if (t.status().code() != StatusCode::kTicketReplaced) unexpected++;
        d->Cancel(env.request_id);
        continue;
      }
      if (t->empty()) continue;
      if (rng() % 4 == 0) {
        if (d->Cancel(env.request_id) != CancelOutcome::kCancelled) unexpected++;
        continue;
      }
      Result<Ticket> again = d->Lookup(ns, q, env, g);
      if (!again.ok() || !(*again == *t)) unexpected++;
      Result<ClaimedRange> c = d->ClaimBytes(ns, EncodeTicket(*t), env, q, t->hit_tokens);
      if (!c.ok()) {
        if (c.status().code() == StatusCode::kStaleGeneration) {
          stale++;
        } else {
          unexpected++;
        }
        if (d->Cancel(env.request_id) != CancelOutcome::kCancelled) unexpected++;
        continue;
      }
      claims_ok++;
      uint64_t next = 0;
      for (const PackRecord& r : c->records) {
        if (r.path_token_begin != next || d->Slot(r.pack_slot).leases == 0) unexpected++;
        next = r.path_token_end();
      }
      if (next != t->hit_tokens) unexpected++;
      if (!d->Release(t->ticket_id).ok()) unexpected++;
    }
  };
  auto churn = [&] {
    std::mt19937_64 rng(77);
    start.arrive_and_wait();
    for (int i = 0; i < kOpsPerThread; ++i) {
      switch (rng() % 4) {
        case 0: {
          std::vector<int32_t> q = Query(rng, bases);
          q.resize(1 + rng() % q.size());
          if (!d->InvalidatePrefix(ns, q).ok()) unexpected++;
          break;
        }
        case 1: {
          std::vector<StoredPack> packs = d->ListPacks(ns);
          if (packs.empty()) break;
          const PackRecord& r = packs[rng() % packs.size()].record;
          Result<InvalidateResult> inv = d->InvalidatePack(r.pack_slot, r.generation);
          // The pack may have changed since it was listed.
          if (!inv.ok() && inv.status().code() != StatusCode::kStaleGeneration &&
              inv.status().code() != StatusCode::kFailedPrecondition) {
            unexpected++;
          }
          break;
        }
        case 2:
          d->EvictLru(1 + rng() % 2);
          break;
        default:
          if (!d->CheckInvariants().ok()) unexpected++;
          (void)d->Stats();
          break;
      }
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kStoreThreads; ++t) threads.emplace_back(store, t + 1);
  for (int t = 0; t < kRequestThreads; ++t) threads.emplace_back(request, t);
  threads.emplace_back(churn);
  for (auto& t : threads) t.join();

  EXPECT_EQ(unexpected.load(), 0u);
  EXPECT_GT(claims_ok.load(), 100u);
  // Drop what is left: kept claims were released above, so only unclaimed tickets remain.
  for (int t = 0; t < kRequestThreads; ++t) {
    for (int i = 0; i < 5; ++i) d->Cancel("t" + std::to_string(t) + "-" + std::to_string(i));
  }
  DirectoryStats s = d->Stats();
  EXPECT_EQ(s.outstanding_tickets, 0u);
  EXPECT_EQ(s.inflight_reservations, 0u);
  EXPECT_EQ(s.retired_slots, 0u);
  EXPECT_EQ(s.leases_taken, s.leases_released);
  for (const SlotInfo& info : d->Slots()) EXPECT_EQ(info.leases, 0u);
  Status inv = d->CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();
  std::printf(
      "%s: claims=%llu stale=%llu lookups=%llu evictions=%llu retirements=%llu\n",
      std::string(IndexModeName(mode)).c_str(), static_cast<unsigned long long>(claims_ok.load()),
      static_cast<unsigned long long>(stale.load()), static_cast<unsigned long long>(s.lookups),
      static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.retirements));
}

TEST(DirectoryConcurrencyTest, TreeModeMixedThreads) { RunMix(IndexMode::kTree); }
TEST(DirectoryConcurrencyTest, ScalarModeMixedThreads) { RunMix(IndexMode::kScalar); }

}  // namespace
}  // namespace rangekv
