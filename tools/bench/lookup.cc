#include "tools/bench/lookup.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "directory/directory.h"
#include "rangekv/engine.h"
#include "service/store_service.h"
#include "tools/bench/machine.h"
#include "tools/bench/paged_kv.h"
#include "tools/bench/requests.h"
#include "tools/bench/scratch.h"
#include "tools/bench/stats.h"

namespace rangekv::tools {
namespace {

// A check of the bench itself failed (its directories or engines disagree, a lookup missed).
Status Failure(const std::string& what) { return Internal(what); }

struct IndexUnderTest {
  std::string name;  // "tree", "scalar"
  bool layerwise = false;
  std::unique_ptr<Directory> directory;
};

struct Cell {
  size_t index = 0;
  uint64_t granularity = 0;
  std::vector<double> samples_us;
  DirectoryStats work;  // counter deltas of one lookup
  Ticket ticket;
};

DirectoryStats Delta(const DirectoryStats& a, const DirectoryStats& b) {
  DirectoryStats d;
  d.records_selected = b.records_selected - a.records_selected;
  d.keys_built = b.keys_built - a.keys_built;
  d.key_probes = b.key_probes - a.key_probes;
  d.leases_taken = b.leases_taken - a.leases_taken;
  d.tokens_compared = b.tokens_compared - a.tokens_compared;
  return d;
}

Result<nlohmann::json> DirectoryLookups(const LookupBenchOptions& cfg) {
  Result<Geometry> geometry = DeriveGeometry(Llama31_8BSpec());
  if (!geometry.ok()) return geometry.status();
  const uint64_t T = geometry->tokens_per_stripe;
  const uint32_t packs = static_cast<uint32_t>((cfg.prefix_tokens + T - 1) / T);
  std::mt19937_64 rng(cfg.seed);
  std::vector<int32_t> query(cfg.prefix_tokens + cfg.suffix_tokens);
  for (auto& t : query) t = static_cast<int32_t>(rng() % 128256);  // Llama-3 vocabulary
  const std::span<const int32_t> prefix(query.data(), cfg.prefix_tokens);
  const NamespaceId ns = DeriveNamespace(Llama31_8BSpec(), *geometry);

  std::vector<IndexUnderTest> indexes;
  auto add = [&](const std::string& name, IndexMode mode, bool layerwise) -> Status {
    DirectoryOptions o = DirectoryOptions::ForGeometry(*geometry, packs);
    o.index = mode;
    o.scalar_chunk_tokens = cfg.chunk_tokens;
    o.scalar_objects = layerwise ? ScalarObjects::kChunkLayer : ScalarObjects::kChunk;
    o.max_query_tokens = std::max<uint64_t>(o.max_query_tokens, query.size());
    Result<std::unique_ptr<Directory>> d = Directory::Create(o);
    if (!d.ok()) return d.status();
    Result<Reservation> r = (*d)->Reserve(ns, prefix);
    if (!r.ok()) return Failure("reserve: " + r.status().ToString());
    if (r->outcome != ReserveOutcome::kReserved || r->end_tokens != prefix.size()) {
      return Failure("the prefix did not fit the directory");
    }
    Status p = (*d)->Publish(r->reservation_id);
    if (!p.ok()) return Failure("publish: " + p.ToString());
    indexes.push_back({name, layerwise, std::move(d).value()});
    return OkStatus();
  };
  RANGEKV_RETURN_IF_ERROR(add("tree", IndexMode::kTree, false));
  RANGEKV_RETURN_IF_ERROR(add("scalar", IndexMode::kScalar, false));
  if (cfg.layerwise) RANGEKV_RETURN_IF_ERROR(add("scalar", IndexMode::kScalar, true));

  std::vector<Cell> cells;
  for (size_t i = 0; i < indexes.size(); ++i) {
    for (uint64_t g : cfg.granularities) cells.push_back({i, g, {}, {}, {}});
  }
  const Envelope envelope{"bench-lookup", 1, 0, 0};
  std::vector<size_t> order(cells.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (uint32_t rep = 0; rep < cfg.warmup + cfg.reps; ++rep) {
    if (rep > 0 && rep % 50 == 0) {
      std::fprintf(stderr, "\r  rep %u/%u", rep, cfg.warmup + cfg.reps);
    }
    // A fresh order every rep: no cell always runs first after another index's lookup.
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t ci : order) {
      Cell& c = cells[ci];
      Directory& d = *indexes[c.index].directory;
      const DirectoryStats before = d.Stats();
      const auto t0 = std::chrono::steady_clock::now();
      Result<Ticket> t = d.Lookup(ns, query, envelope, c.granularity);
      const auto t1 = std::chrono::steady_clock::now();
      if (!t.ok()) return Failure("lookup: " + t.status().ToString());
      if (d.Cancel(envelope.request_id) != CancelOutcome::kCancelled) return Failure("cancel");
      if (rep < cfg.warmup) continue;
      c.samples_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (c.samples_us.size() == 1) {
        c.work = Delta(before, d.Stats());
        c.ticket = *t;
      }
    }
  }
  std::fprintf(stderr, "\r%40s\r", "");

  // Same hit, same records, whatever the index: only the work differs.
  for (const Cell& c : cells) {
    for (const Cell& o : cells) {
      if (c.granularity != o.granularity) continue;
      if (c.ticket.hit_tokens != o.ticket.hit_tokens || c.ticket.records != o.ticket.records) {
        return Failure("indexes disagree at granularity " + std::to_string(c.granularity));
      }
    }
  }

  std::printf(
      "rangekv bench lookup: %llu-token prefix + %llu-token suffix, 8B geometry "
      "(T=%llu, %u packs), %u reps (median)\n",
      static_cast<unsigned long long>(cfg.prefix_tokens),
      static_cast<unsigned long long>(cfg.suffix_tokens), static_cast<unsigned long long>(T), packs,
      cfg.reps);
  std::printf("%-17s %11s %10s %9s %9s %9s %11s %11s %9s\n", "index", "granularity", "median_us",
              "p10_us", "p90_us", "hit", "records_sel", "keys_built", "leases");
  nlohmann::json results = nlohmann::json::array();
  double tree_min = 1e300, tree_max = 0;
  for (const Cell& c : cells) {
    const IndexUnderTest& ix = indexes[c.index];
    const double median = Median(c.samples_us);
    const std::string label = ix.name + (ix.layerwise ? " layerwise" : "");
    std::printf("%-17s %11llu %10.1f %9.1f %9.1f %9llu %11llu %11llu %9llu\n", label.c_str(),
                static_cast<unsigned long long>(c.granularity), median,
                Percentile(c.samples_us, 0.1), Percentile(c.samples_us, 0.9),
                static_cast<unsigned long long>(c.ticket.hit_tokens),
                static_cast<unsigned long long>(c.work.records_selected),
                static_cast<unsigned long long>(c.work.keys_built),
                static_cast<unsigned long long>(c.work.leases_taken));
    if (ix.name == "tree") {
      tree_min = std::min(tree_min, median);
      tree_max = std::max(tree_max, median);
    }
    results.push_back({{"index", ix.name},
                       {"layerwise", ix.layerwise},
                       {"granularity", c.granularity},
                       {"median_us", median},
                       {"p10_us", Percentile(c.samples_us, 0.1)},
                       {"p90_us", Percentile(c.samples_us, 0.9)},
                       {"records_selected", c.work.records_selected},
                       {"ticket_records", c.ticket.records.size()},
                       {"hit_tokens", c.ticket.hit_tokens},
                       {"keys_built", c.work.keys_built},
                       {"key_probes", c.work.key_probes},
                       {"leases_taken", c.work.leases_taken},
                       {"tokens_compared", c.work.tokens_compared}});
  }
  const double spread = tree_max / tree_min;
  std::printf("tree: slowest/fastest granularity = %.3f (acceptance: <= 1.25) %s\n", spread,
              spread <= 1.25 ? "ok" : "EXCEEDED");

  return nlohmann::json{{"workload", "lookup"},
                        {"results", results},
                        {"prefix_tokens", cfg.prefix_tokens},
                        {"query_tokens", query.size()},
                        {"tokens_per_pack", T},
                        {"packs", packs},
                        {"chunk_tokens", cfg.chunk_tokens},
                        {"layers", geometry->layers},
                        {"reps", cfg.reps},
                        {"warmup", cfg.warmup},
                        {"tree_granularity_spread", spread},
                        {"machine", DescribeMachine(".").ToJson()},
                        {"date", UtcTimestamp()}};
}

// ---- --store: engine lookups, embedded against the store service ---------------------------
//
// What a lookup costs a serving process end to end: Engine::Lookup on an embedded engine against
// the same call on an engine whose index lives in a store service (one round trip: the query's
// tokens out, the ticket back). Both engines hold the same prefix in the same pack structure as
// the directory section above (T tokens per stripe, one record per pack); payload rows are made
// tiny (a 32-layer model of one 8-wide KV head: 32 B per token and layer) so the stores fit any
// machine; a lookup's work does not depend on payload bytes. prefetch=dispatch on both, so a
// lookup starts no reads. --store service starts a service in-process (in a scratch directory);
// --store unix://PATH uses one already running (`rangekv serve`), tenant "bench-lookup".
// Acceptance: the service's median within 2x of the embedded median at every granularity.
Result<nlohmann::json> EngineLookups(const LookupBenchOptions& cfg) {
  Result<Geometry> g8 = DeriveGeometry(Llama31_8BSpec());
  if (!g8.ok()) return g8.status();
  ModelSpec tiny;
  tiny.model_id = "rangekv/bench-lookup-tiny";
  tiny.layers = g8->layers;
  tiny.kv_heads = 1;
  tiny.head_size = 8;
  Result<Geometry> probe = DeriveGeometry(tiny, 4096);
  if (!probe.ok()) return probe.status();
  Result<Geometry> geometry = DeriveGeometry(tiny, g8->tokens_per_stripe * probe->token_bytes);
  if (!geometry.ok()) return geometry.status();
  const uint64_t T = geometry->tokens_per_stripe;
  const uint32_t packs = static_cast<uint32_t>((cfg.prefix_tokens + T - 1) / T);
  std::mt19937_64 rng(cfg.seed);
  std::vector<int32_t> query(cfg.prefix_tokens + cfg.suffix_tokens);
  for (auto& t : query) t = static_cast<int32_t>(rng() % 128256);
  const std::span<const int32_t> prefix(query.data(), cfg.prefix_tokens);

  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<ScratchDir> scratch,
                           ScratchDir::Make("", "rangekv-lookup-"));
  std::unique_ptr<service::StoreService> service;
  std::string socket;
  if (cfg.store == "service") {
    service::ServiceOptions so;
    so.root = scratch->Join("service");
    so.socket_path = scratch->Join("rangekv.sock");
    so.request_spin = std::chrono::microseconds(cfg.service_spin_us);
    Result<std::unique_ptr<service::StoreService>> s = service::StoreService::Start(so);
    if (!s.ok()) return Unavailable("store service: " + s.status().ToString());
    service = std::move(s).value();
    socket = so.socket_path;
  } else if (cfg.store.rfind("unix://", 0) == 0) {
    socket = cfg.store.substr(7);
  } else {
    return InvalidArgument("--store must be service or unix://PATH");
  }
  auto open = [&](bool through_service) -> Result<std::unique_ptr<Engine>> {
    EngineOptions eo;
    eo.model = tiny;
    eo.stripe_bytes = geometry->stripe_bytes;
    eo.capacity_bytes = uint64_t{packs + 1} * geometry->pack_bytes;
    eo.device = DeviceSelection::kHost;
    eo.max_request_tokens = std::max<uint64_t>(eo.max_request_tokens, query.size());
    eo.tuning.ablations.prefetch = Ablations::Prefetch::kDispatch;
    if (through_service) {
      eo.store_service = "unix://" + socket;
      eo.tenant = "bench-lookup";
      if (cfg.client_spin_us >= 0) {
        eo.tuning.store_service_spin_us = static_cast<uint32_t>(cfg.client_spin_us);
      }
    } else {
      eo.store_dir = scratch->Join("embedded");
    }
    return Engine::Open(eo);
  };
  std::unique_ptr<Engine> engines[2];
  RANGEKV_ASSIGN_OR_RETURN(engines[0], open(false));
  RANGEKV_ASSIGN_OR_RETURN(engines[1], open(true));
  const char* names[2] = {"embedded", "service"};
  {
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, MakeDevice(DeviceKind::kHost));
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvSpace> kv,
                             PagedKvSpace::Make(*device, *geometry, cfg.prefix_tokens, cfg.seed));
    RANGEKV_RETURN_IF_ERROR(kv->Fill(cfg.seed, 0, cfg.prefix_tokens));
    for (auto& e : engines) {
      RequestTimeline unused;
      RANGEKV_RETURN_IF_ERROR(
          TimedStore(*e, *kv, prefix, "bench-lookup-store", std::nullopt, &unused));
    }
  }

  struct EngineCell {
    int engine = 0;
    uint64_t granularity = 0;
    std::vector<double> samples_us;
    uint64_t hit = 0, records = 0;
  };
  std::vector<EngineCell> cells;
  for (uint64_t gr : cfg.granularities) {
    for (int e = 0; e < 2; ++e) cells.push_back({e, gr, {}, 0, 0});
  }
  std::vector<size_t> order(cells.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  RequestEnvelope env;
  env.request_id = "bench-lookup";
  env.session_id = 1;
  // Where the service's time goes, measured in the same rounds: a 16-token query that misses
  // (its time through the service less embedded is the round trip), and a plain copy of the
  // query's bytes into a buffer of this process (what the client's copy into the shared query
  // buffer costs). Both are timed beside the cells, in their shuffled order.
  std::vector<int32_t> miss(16);
  for (auto& t : miss) t = static_cast<int32_t>(128256 + rng() % 1000);  // outside the vocabulary
  std::vector<int32_t> copy_target(query.size());
  std::vector<double> miss_us[2], copy_us;
  for (size_t i = 0; i < 3; ++i) order.push_back(cells.size() + i);
  for (uint32_t rep = 0; rep < cfg.warmup + cfg.reps; ++rep) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t ci : order) {
      if (ci >= cells.size()) {
        const size_t k = ci - cells.size();
        const auto t0 = std::chrono::steady_clock::now();
        if (k < 2) {
          Result<LookupResult> r = engines[k]->Lookup(env, miss, 16);
          if (!r.ok() || r->hit_tokens != 0) return Failure("the missing lookup did not miss");
        } else {
          std::memcpy(copy_target.data(), query.data(), query.size() * sizeof(int32_t));
          asm volatile("" : : "r"(copy_target.data()) : "memory");  // the copy is not elided
        }
        const auto t1 = std::chrono::steady_clock::now();
        if (rep >= cfg.warmup) {
          (k < 2 ? miss_us[k] : copy_us)
              .push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        continue;
      }
      EngineCell& c = cells[ci];
      Engine& e = *engines[c.engine];
      const auto t0 = std::chrono::steady_clock::now();
      Result<LookupResult> r = e.Lookup(env, query, c.granularity);
      const auto t1 = std::chrono::steady_clock::now();
      if (!r.ok())
        return Failure(std::string(names[c.engine]) + " lookup: " + r.status().ToString());
      e.ReleaseRequest(env);
      if (r->hit_tokens != cfg.prefix_tokens / c.granularity * c.granularity) {
        return Failure(std::string(names[c.engine]) + " lookup hit " +
                       std::to_string(r->hit_tokens) + " tokens");
      }
      c.hit = r->hit_tokens;
      c.records = r->records_selected;
      if (rep >= cfg.warmup) {
        c.samples_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    }
  }
  for (auto& e : engines) RANGEKV_RETURN_IF_ERROR(e->Close());
  if (service != nullptr) RANGEKV_RETURN_IF_ERROR(service->Stop());

  std::printf(
      "rangekv bench lookup --store %s: Engine::Lookup of a %llu-token prefix + %llu-token "
      "suffix (T=%llu, %u packs), %u reps (median); polling for replies %u us, for requests %u "
      "us\n",
      cfg.store.c_str(), static_cast<unsigned long long>(cfg.prefix_tokens),
      static_cast<unsigned long long>(cfg.suffix_tokens), static_cast<unsigned long long>(T), packs,
      cfg.reps, engines[1]->options().tuning.store_service_spin_us, cfg.service_spin_us);
  std::printf("%-9s %11s %10s %9s %9s %9s %8s %11s\n", "engine", "granularity", "median_us",
              "p10_us", "p90_us", "hit", "records", "x embedded");
  nlohmann::json results = nlohmann::json::array();
  double worst = 0;
  for (size_t i = 0; i < cells.size(); i += 2) {
    const double base = Median(cells[i].samples_us);
    for (size_t k = i; k < i + 2; ++k) {
      const EngineCell& c = cells[k];
      const double median = Median(c.samples_us);
      const double ratio = median / base;
      if (c.engine == 1) worst = std::max(worst, ratio);
      std::printf("%-9s %11llu %10.1f %9.1f %9.1f %9llu %8llu %11.2f\n", names[c.engine],
                  static_cast<unsigned long long>(c.granularity), median,
                  Percentile(c.samples_us, 0.1), Percentile(c.samples_us, 0.9),
                  static_cast<unsigned long long>(c.hit),
                  static_cast<unsigned long long>(c.records), ratio);
      results.push_back({{"engine", names[c.engine]},
                         {"granularity", c.granularity},
                         {"median_us", median},
                         {"p10_us", Percentile(c.samples_us, 0.1)},
                         {"p90_us", Percentile(c.samples_us, 0.9)},
                         {"hit_tokens", c.hit},
                         {"records_selected", c.records},
                         {"ratio_to_embedded", ratio}});
    }
  }
  std::printf("service/embedded: worst median ratio = %.2f (acceptance: <= 2) %s\n", worst,
              worst <= 2.0 ? "ok" : "EXCEEDED");
  const double round_trip = Median(miss_us[1]) - Median(miss_us[0]);
  const double copy = Median(copy_us);
  std::printf(
      "where the service's time goes (medians): a 16-token miss %.1f us through the service, "
      "%.1f embedded (round trip %.1f us); copying the %zu-byte query %.1f us\n",
      Median(miss_us[1]), Median(miss_us[0]), round_trip, query.size() * sizeof(int32_t), copy);
  return nlohmann::json{{"workload", "lookup-service"},
                        {"store", cfg.store},
                        {"results", results},
                        {"prefix_tokens", cfg.prefix_tokens},
                        {"query_tokens", query.size()},
                        {"tokens_per_pack", T},
                        {"packs", packs},
                        {"reps", cfg.reps},
                        {"warmup", cfg.warmup},
                        {"worst_ratio_to_embedded", worst},
                        {"miss_service_us", Median(miss_us[1])},
                        {"miss_embedded_us", Median(miss_us[0])},
                        {"query_copy_us", copy},
                        {"client_spin_us", engines[1]->options().tuning.store_service_spin_us},
                        {"service_spin_us", cfg.service_spin_us},
                        {"machine", DescribeMachine(".").ToJson()},
                        {"date", UtcTimestamp()}};
}

}  // namespace

Result<nlohmann::json> RunLookupBench(const LookupBenchOptions& options) {
  if (options.prefix_tokens == 0 || options.reps == 0) {
    return InvalidArgument("--prefix-tokens and --reps must be > 0");
  }
  for (uint64_t g : options.granularities) {
    if (g == 0) return InvalidArgument("granularity 0");
  }
  return options.store.empty() ? DirectoryLookups(options) : EngineLookups(options);
}

}  // namespace rangekv::tools
