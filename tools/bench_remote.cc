// `rangekv bench remote`: the paper's fixed-payload sweep restored from the cluster tier
// (docs/scale-out.md "Measured"). One payload is published once by node A (an embedded engine
// with a store of its own) to an S3-compatible store and a Redis directory; node B (another
// engine, another store, nothing local) restores it at each point of the sweep, where a point
// only changes how the prefix is named (the reuse granularity: 256-, 64-, 16-, 8-token chunks,
// per-layer chunks). Beside it, in the same run:
//   - the ceiling: the same server's ranged-GET throughput over the same objects, a grid of
//     connections (4-32) x GET size (8 MiB, 32 MiB and the objects' multipart part), each cell
//     into one host buffer (no lookup, no verification);
//   - a per-object remote model built the peers' way: one S3 object and one Redis key per
//     logical object (chunk, or chunk x layer), a lookup of every key (pipelined in batches of
//     1,024, generous to it) and one GET per object with as many connections as the ceiling's
//     best cell, into one host buffer (no scatter, no verification: generous again).
// RangeKV's restores run with checksums on (every span verified against the manifest's
// digests) and each is checked bit for bit outside the timing. Reported per point: GETs, bytes,
// directory round trips, manifest reads, median time over --reps, and the ratio to the ceiling.
// Servers: pass their addresses (testing/remote/servers.sh starts a loopback SeaweedFS and
// redis-server; scripts/bench_remote.sh wraps it all).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "base/digest.h"
#include "commands.h"
#include "device/device.h"
#include "engine/engine_core.h"
#include "rangekv/engine.h"
#include "remote/manifest.h"
#include "remote/publisher.h"
#include "remote/remote_clients.h"
#include "tools/bench/paged_kv.h"
#include "tools/bench/scratch.h"
#include "tools/bench/stats.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct RemoteBenchConfig {
  std::string remote;  // s3://bucket/prefix
  std::string endpoint;
  std::string directory;
  std::string dir;
  uint64_t tokens = 49152;
  std::string points = "192,768,3072,6144,6144-LW,327680";
  uint32_t reps = 3;
  uint32_t connections = 32;
  uint64_t get_bytes = 0;
  uint32_t read_workers = 0;  // 0: the engine's default
  uint32_t io_threads = 2;
  bool per_object = true;
  uint64_t per_object_max = 65536;
  std::string device = "host";  // where both nodes' paged KV lives: host, cuda or auto
  std::string json;
};

struct Point {
  std::string label;
  uint64_t chunk_tokens = 0;  // logical object's tokens
  bool per_layer = false;     // objects are (chunk, layer)
  uint64_t objects = 0;
};

// Names the P-token prefix as the paper's sweep does: 192 -> 256-token chunks of the 49,152-token
// prefix, ..., "-LW": chunks per layer; 327680: (chunk, layer) objects of P*L/327680 tokens.
Result<Point> MakePoint(const std::string& label, uint64_t tokens, uint32_t layers) {
  Point p;
  p.label = label;
  const bool lw = label.ends_with("-LW");
  const uint64_t n = std::stoull(label);
  if (n == 327680) {
    p.per_layer = true;
    p.chunk_tokens = std::max<uint64_t>(1, tokens * layers / n);
  } else if (lw) {
    p.per_layer = true;
    p.chunk_tokens = std::max<uint64_t>(1, tokens * layers / n);
  } else {
    p.chunk_tokens = std::max<uint64_t>(1, tokens / n);
  }
  const uint64_t chunks = (tokens + p.chunk_tokens - 1) / p.chunk_tokens;
  p.objects = p.per_layer ? chunks * layers : chunks;
  return p;
}

[[noreturn]] void Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "rangekv bench remote: %s: %s\n", what.c_str(), s.ToString().c_str());
  throw CLI::RuntimeError(1);
}
template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.ok()) Fail(what, r.status());
  return std::move(r).value();
}
void Must(const Status& s, const std::string& what) {
  if (!s.ok()) Fail(what, s);
}

RequestEnvelope Env(const std::string& id) {
  RequestEnvelope e;
  e.request_id = id;
  e.session_id = 1;
  return e;
}

// Looks `prompt` up on `e` at `granularity`, restores the hit into `kv` and waits for every
// layer; `seconds` runs from the lookup to the last layer. Ends the command on any error.
struct TimedRestore {
  uint64_t hit_tokens = 0;
  double seconds = 0;
};
TimedRestore LookupAndRestore(Engine& e, const std::string& id, std::span<const int32_t> prompt,
                              uint64_t granularity, PagedKvSpace& kv) {
  const double t0 = NowSeconds();
  LookupResult lr = Must(e.Lookup(Env(id), prompt, granularity), "lookup");
  RestoreRequest rq;
  rq.ticket = lr.ticket;
  rq.envelope = Env(id);
  rq.tokens = prompt;
  rq.endpoint_tokens = lr.hit_tokens;
  RestoreHandle h = Must(e.StartRestore(rq), "restore");
  Must(h.BindSlots(kv.engine_kv(), std::span<const int64_t>(kv.slots()).first(lr.hit_tokens)),
       "bind");
  for (uint32_t l = 0; l < e.geometry().layers; ++l) Must(h.WaitLayer(l), "layer");
  const double seconds = NowSeconds() - t0;
  Must(h.Finish().status, "restore");
  return {lr.hit_tokens, seconds};
}

void RunRemoteBench(const RemoteBenchConfig& c) {
  const double wall0 = NowSeconds();
  ModelSpec model;  // Llama-3.1-8B's KV, one rank of TP=8: s = 512 bytes
  model.model_id = "bench/llama-3.1-8b-tp8";
  model.layers = 32;
  model.kv_heads = 8;
  model.head_size = 128;
  model.tp_size = 8;
  model.tp_rank = 0;
  const uint64_t P = c.tokens;
  auto scratch = Must(ScratchDir::Make(c.dir, "rangekv-bench-remote-"), "scratch directory");
  const std::string run =
      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  RemoteTierOptions ro;
  ro.url = c.remote + "/run-" + run;
  ro.endpoint = c.endpoint;
  ro.directory = c.directory;
  ro.connections = c.connections;
  ro.get_bytes = c.get_bytes;
  ro.io_threads = c.io_threads;
  ro.lookup_timeout_ms = 10000;
  ro.read_timeout_ms = 60000;

  EngineOptions ea;
  ea.store_dir = scratch->Join("a");
  ea.model = model;
  const DeviceKind kind = c.device == "cuda"   ? DeviceKind::kCuda
                          : c.device == "auto" ? DeviceKind::kAuto
                                               : DeviceKind::kHost;
  ea.device = kind == DeviceKind::kCuda   ? DeviceSelection::kCuda
              : kind == DeviceKind::kAuto ? DeviceSelection::kAuto
                                          : DeviceSelection::kHost;
  ea.capacity_bytes = 4ull << 30;
  ea.max_request_tokens = std::max<uint64_t>(ea.max_request_tokens, P + 1);
  ea.remote = ro;
  auto a = Must(Engine::Open(ea), "opening node A");
  const Geometry g = a->geometry();
  const uint64_t bytes = P * g.layers * g.token_bytes;
  std::fprintf(stderr,
               "rangekv bench remote: %s prefix (%llu tokens x %u layers x %llu B), "
               "publishing from node A...\n",
               FormatBytes(bytes).c_str(), static_cast<unsigned long long>(P), g.layers,
               static_cast<unsigned long long>(g.token_bytes));
  auto device = Must(MakeDevice(kind), "device " + c.device);
  std::fprintf(stderr, "rangekv bench remote: paged KV on the %s device\n",
               std::string(DeviceKindName(device->capabilities().kind)).c_str());
  auto kv = Must(PagedKvSpace::Make(*device, g, P + 1, 7), "paged KV");
  Must(kv->Fill(11, 0, P + 1), "filling paged KV");
  std::vector<int32_t> prompt(P + 1);
  for (uint64_t i = 0; i <= P; ++i) prompt[i] = static_cast<int32_t>((i * 2654435761u) % 128000);
  {
    StoreRequest rq;
    rq.envelope = Env("store");
    rq.tokens = prompt;
    rq.kv = &kv->engine_kv();
    rq.slot_mapping = kv->slots();
    StoreHandle h = Must(a->BeginStore(rq), "store on node A");
    for (uint32_t l = 0; l < g.layers; ++l) Must(h.LayerProduced(l), "layer produced");
    Must(h.Finish(StoreWait::kUntilVisible).status, "store on node A");
  }
  remote::Publisher* pub = engine_internal::EngineAccess::Core(*a).store().publisher();
  const double pub0 = NowSeconds();
  if (pub == nullptr || !pub->Flush(std::chrono::minutes(30))) {
    Fail("publishing", Internal("node A's uploads did not finish"));
  }
  const double publish_s = NowSeconds() - pub0;
  const RemoteTierStats as = a->remote_stats();
  std::fprintf(stderr, "rangekv bench remote: published %llu packs (%s) in %.2f s\n",
               static_cast<unsigned long long>(as.packs_published),
               FormatBytes(as.bytes_uploaded).c_str(), publish_s);
  if (as.packs_published == 0) Fail("publishing", Internal("nothing was published"));

  // The objects, for the ceiling.
  auto clients = Must(remote::ConnectRemote(ro, "default", a->namespace_id()), "clients");
  std::vector<std::pair<std::string, uint64_t>> objects;
  {
    std::string token, next;
    do {
      auto listed =
          Must(clients->s3->ListObjects(clients->scope.bucket, clients->scope.PacksPrefix(), token,
                                        &next, remote::DeadlineIn(std::chrono::seconds(30))),
               "listing");
      for (const auto& o : listed) {
        if (!o.key.ends_with(".manifest")) objects.emplace_back(o.key, o.size);
      }
      token = next;
    } while (!token.empty());
  }
  uint64_t object_bytes = 0;
  for (const auto& o : objects) object_bytes += o.second;
  std::vector<uint8_t> sink(object_bytes);

  // Ranged GETs of every object's bytes, `conns` in flight, `piece` bytes each: GiB/s.
  auto ranged = [&](uint32_t conns, uint64_t piece) -> double {
    remote::S3Options so = clients->s3->options();
    so.max_connections = std::max(conns, so.io_threads);
    auto s3 = Must(remote::S3Client::Create(so), "ceiling client");
    std::vector<remote::S3Request> reqs;
    uint64_t at = 0;
    for (const auto& [key, size] : objects) {
      for (uint64_t off = 0; off < size; off += piece) {
        remote::S3Request r;
        r.bucket = clients->scope.bucket;
        r.key = key;
        r.range_offset = off;
        r.range_length = std::min(piece, size - off);
        r.into = std::span<uint8_t>(sink.data() + at + off, r.range_length);
        reqs.push_back(std::move(r));
      }
      at += size;
    }
    const double t0 = NowSeconds();
    for (size_t i = 0; i < reqs.size(); i += conns) {  // `conns` at a time
      std::vector<remote::S3Request*> batch;
      for (size_t k = i; k < std::min(reqs.size(), i + conns); ++k) batch.push_back(&reqs[k]);
      Must(s3->Execute(batch, remote::DeadlineIn(std::chrono::minutes(5))), "ceiling GET");
    }
    return static_cast<double>(object_bytes) / (1u << 30) / (NowSeconds() - t0);
  };
  struct Cell {
    uint32_t conns;
    uint64_t piece;
    double gib_s;
  };
  std::vector<Cell> grid;
  // GET sizes: 8 and 32 MiB, and one multipart part of the published objects (an S3 server
  // stores a part as a unit; node B's GETs carry a part where they can: remote_tier.h).
  std::vector<uint64_t> pieces = {8ull << 20, 32ull << 20};
  if (!objects.empty()) {
    remote::S3Request mr;
    mr.bucket = clients->scope.bucket;
    mr.key = objects.front().first + ".manifest";
    Must(clients->s3->Execute(mr, remote::DeadlineIn(std::chrono::seconds(30))), "manifest");
    const remote::PackManifest m = Must(remote::DecodeManifest(mr.body), "manifest");
    if (std::find(pieces.begin(), pieces.end(), m.part_bytes) == pieces.end()) {
      pieces.push_back(m.part_bytes);
    }
  }
  for (uint32_t conns : {4u, 8u, 16u, 32u}) {
    for (uint64_t piece : pieces) {
      ranged(conns, piece);  // warm-up
      std::vector<double> v;
      for (uint32_t r = 0; r < c.reps; ++r) v.push_back(ranged(conns, piece));
      grid.push_back({conns, piece, Median(v)});
      std::fprintf(stderr, "  ceiling %2u connections x %s GETs: %.2f GiB/s\n", conns,
                   FormatBytes(piece).c_str(), grid.back().gib_s);
    }
  }
  const Cell best = *std::max_element(
      grid.begin(), grid.end(), [](const Cell& x, const Cell& y) { return x.gib_s < y.gib_s; });

  // Node B: nothing local, reads from the cluster tier.
  EngineOptions eb = ea;
  eb.store_dir = scratch->Join("b");
  eb.remote.publish = false;
  if (c.read_workers != 0) {  // spans in flight: workers, layers ahead and banks to match
    eb.tuning.read_workers = c.read_workers;
    eb.tuning.lookahead_layers = std::max(eb.tuning.lookahead_layers, c.read_workers);
    eb.tuning.read_banks = std::max(eb.tuning.read_banks, 2 * c.read_workers);
    eb.tuning.prefetch_banks = eb.tuning.read_banks - 1;
  }
  auto b = Must(Engine::Open(eb), "opening node B");
  nlohmann::json out;
  out["payload_bytes"] = bytes;
  out["tokens"] = P;
  out["device"] = std::string(DeviceKindName(device->capabilities().kind));
  out["published_packs"] = as.packs_published;
  out["publish_s"] = publish_s;
  out["ceiling"] = {{"connections", best.conns}, {"get_bytes", best.piece}, {"gib_s", best.gib_s}};
  for (const Cell& cell : grid) {
    out["grid"].push_back(
        {{"connections", cell.conns}, {"get_bytes", cell.piece}, {"gib_s", cell.gib_s}});
  }
  std::printf("%-9s %9s %-10s %6s %9s %6s %6s %9s %9s %7s %11s %7s\n", "point", "objects", "engine",
              "GETs", "bytes", "dirRT", "mfst", "median_s", "GiB/s", "x ceil", "lookups", "verify");
  uint32_t n = 0;
  for (size_t pos = 0; pos <= c.points.size();) {
    size_t comma = c.points.find(',', pos);
    if (comma == std::string::npos) comma = c.points.size();
    const std::string label = c.points.substr(pos, comma - pos);
    pos = comma + 1;
    if (label.empty()) continue;
    const Point p = Must(MakePoint(label, P, g.layers), "point " + label);
    // RangeKV: lookup at the point's granularity, restore, every layer waited for.
    std::vector<double> times, ratios, ceilings;
    RemoteTierStats before{}, after{};
    uint64_t mismatches = 0;
    for (uint32_t r = 0; r <= c.reps; ++r) {  // r == 0: warm-up (caches the manifests)
      // The ceiling's best cell again, right before this repetition: a shared machine drifts,
      // and the ratio is taken rep by rep against what the server gave at that moment.
      const double ceiling = ranged(best.conns, best.piece);
      Must(kv->Poison(), "poison");
      before = b->remote_stats();
      const std::string id = "p" + label + "-" + std::to_string(n++);
      const TimedRestore t = LookupAndRestore(*b, id, prompt, p.chunk_tokens, *kv);
      if (t.hit_tokens != P / p.chunk_tokens * p.chunk_tokens) {
        Fail("lookup", Internal("hit " + std::to_string(t.hit_tokens) + " tokens"));
      }
      const double sec = t.seconds;
      b->ReleaseRequest(Env(id));
      after = b->remote_stats();
      mismatches += Must(kv->CountMismatches(11, 0, t.hit_tokens), "verify");  // outside timing
      if (r > 0) {
        times.push_back(sec);
        ceilings.push_back(ceiling);
        ratios.push_back(static_cast<double>(bytes) / (1u << 30) / sec / ceiling);
      }
    }
    const uint64_t gets = after.gets - before.gets;
    const uint64_t got = after.get_bytes - before.get_bytes;
    const uint64_t rts = after.directory_round_trips - before.directory_round_trips;
    const uint64_t mf = after.manifest_fetches - before.manifest_fetches;
    const double med = Median(times);
    const double gib = static_cast<double>(bytes) / (1u << 30) / med;
    const double ratio = Median(ratios);
    std::printf("%-9s %9llu %-10s %6llu %9s %6llu %6llu %9.3f %9.2f %7.2f %11s %7s\n",
                label.c_str(), static_cast<unsigned long long>(p.objects), "rangekv",
                static_cast<unsigned long long>(gets), FormatBytes(got).c_str(),
                static_cast<unsigned long long>(rts), static_cast<unsigned long long>(mf), med, gib,
                ratio, "1", mismatches == 0 ? "ok" : "FAILED");
    std::printf("%-9s  ratio to the ceiling rep by rep: %.2f-%.2f (ceiling %.2f-%.2f GiB/s)\n",
                label.c_str(), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()),
                *std::min_element(ceilings.begin(), ceilings.end()),
                *std::max_element(ceilings.begin(), ceilings.end()));
    nlohmann::json pj = {{"point", label},
                         {"objects", p.objects},
                         {"engine", "rangekv"},
                         {"gets", gets},
                         {"get_bytes", got},
                         {"directory_round_trips", rts},
                         {"manifest_reads", mf},
                         {"samples_s", times},
                         {"median_s", med},
                         {"gib_s", gib},
                         {"ceilings_gib_s", ceilings},
                         {"of_ceiling", ratio},
                         {"of_ceiling_samples", ratios},
                         {"mismatches", mismatches}};
    out["results"].push_back(pj);
    if (!c.per_object) continue;
    if (p.objects > c.per_object_max) {
      std::printf(
          "%-9s %9llu %-10s skipped: more objects than --per-object-max %llu (its setup "
          "alone is one PUT and one key per object)\n",
          label.c_str(), static_cast<unsigned long long>(p.objects), "per-object",
          static_cast<unsigned long long>(c.per_object_max));
      continue;
    }
    // The per-object model: one object and one Redis key per logical object.
    const uint64_t chunks = (P + p.chunk_tokens - 1) / p.chunk_tokens;
    const uint64_t per_obj = p.chunk_tokens * g.token_bytes * (p.per_layer ? 1 : g.layers);
    const std::string base = clients->scope.PacksPrefix() + "per-object/" + label + "/";
    std::vector<uint8_t> rows(per_obj);
    std::vector<remote::S3Request> puts;
    std::vector<std::vector<uint8_t>> bodies;
    auto flush_puts = [&] {
      std::vector<remote::S3Request*> batch;
      for (auto& r : puts) batch.push_back(&r);
      Must(clients->s3->Execute(batch, remote::DeadlineIn(std::chrono::minutes(10))), "PUT");
      puts.clear();
      bodies.clear();
    };
    std::vector<remote::RedisCommand> sets;
    const std::string keys = clients->scope.NsKeys() + "po:" + label + ":";
    for (uint64_t ch = 0; ch < chunks; ++ch) {
      const uint64_t t0 = ch * p.chunk_tokens;
      const uint64_t nt = std::min(p.chunk_tokens, P - t0);
      for (uint32_t l = 0; l < g.layers; ++l) {
        if (p.per_layer || l == 0) bodies.emplace_back(per_obj);
        uint8_t* dst = bodies.back().data() + (p.per_layer ? 0 : l * nt * g.token_bytes);
        PatternRows(11, l, t0, nt, g.token_bytes, dst);
        if (p.per_layer || l + 1 == g.layers) {
          bodies.back().resize(nt * g.token_bytes * (p.per_layer ? 1 : g.layers));
          remote::S3Request r;
          r.method = remote::S3Method::kPut;
          r.bucket = clients->scope.bucket;
          r.key = base + std::to_string(ch) + (p.per_layer ? "-" + std::to_string(l) : "");
          r.upload = bodies.back();
          sets.push_back({"SET", keys + r.key, "1"});
          puts.push_back(std::move(r));
          if (puts.size() == 256) flush_puts();
        }
      }
    }
    flush_puts();
    for (size_t i = 0; i < sets.size(); i += 1024) {
      Must(clients->redis
               ->Run(std::span(sets).subspan(i, std::min<size_t>(1024, sets.size() - i)),
                     SteadyClock::now() + std::chrono::minutes(1))
               .status(),
           "SET");
    }
    std::vector<double> po_times;
    uint64_t po_rts = 0, po_gets = 0;
    for (uint32_t r = 0; r <= c.reps; ++r) {
      const double t0 = NowSeconds();
      uint64_t lookup_rts = 0;
      std::vector<remote::RedisCommand> exists;
      for (size_t i = 0; i < sets.size(); i += 1024) {
        exists.clear();
        for (size_t k = i; k < std::min(sets.size(), i + 1024); ++k) {
          exists.push_back({"EXISTS", sets[k][1]});
        }
        auto rep = Must(clients->redis->Run(exists, SteadyClock::now() + std::chrono::minutes(1)),
                        "EXISTS");
        ++lookup_rts;
        for (const auto& x : rep) {
          if (x.integer != 1) Fail("per-object lookup", Internal("a key is missing"));
        }
      }
      std::vector<remote::S3Request> get_reqs(sets.size());
      uint64_t at = 0;
      for (size_t k = 0; k < sets.size(); ++k) {
        get_reqs[k].bucket = clients->scope.bucket;
        get_reqs[k].key = sets[k][1].substr(keys.size());
        get_reqs[k].into =
            std::span<uint8_t>(sink.data() + at, std::min<uint64_t>(per_obj, sink.size() - at));
        at += per_obj;
        if (at > sink.size()) at = 0;  // the model keeps no order; bytes are checked below
      }
      for (size_t i = 0; i < get_reqs.size(); i += best.conns) {
        std::vector<remote::S3Request*> batch;
        for (size_t k = i; k < std::min(get_reqs.size(), i + best.conns); ++k) {
          batch.push_back(&get_reqs[k]);
        }
        Must(clients->s3->Execute(batch, remote::DeadlineIn(std::chrono::minutes(10))), "GET");
      }
      const double sec = NowSeconds() - t0;
      if (r > 0) po_times.push_back(sec);
      po_rts = lookup_rts;
      po_gets = get_reqs.size();
    }
    const double po_med = Median(po_times);
    const double po_gib = static_cast<double>(bytes) / (1u << 30) / po_med;
    std::printf("%-9s %9llu %-10s %6llu %9s %6llu %6s %9.3f %9.2f %7.2f %11s %7s\n", label.c_str(),
                static_cast<unsigned long long>(p.objects), "per-object",
                static_cast<unsigned long long>(po_gets), FormatBytes(bytes).c_str(),
                static_cast<unsigned long long>(po_rts), "-", po_med, po_gib, po_gib / best.gib_s,
                std::to_string(sets.size()).c_str(), "n/a");
    std::printf("%-9s  per-object / rangekv time: %.1fx\n", label.c_str(), po_med / med);
    out["results"].push_back({{"point", label},
                              {"objects", p.objects},
                              {"engine", "per-object"},
                              {"gets", po_gets},
                              {"redis_round_trips", po_rts},
                              {"redis_keys", sets.size()},
                              {"samples_s", po_times},
                              {"median_s", po_med},
                              {"gib_s", po_gib},
                              {"slower_than_rangekv", po_med / med}});
    std::fflush(stdout);
  }
  // A local hit is not slowed by the cluster tier: node A's own store restored by an engine
  // with the tier on and by one without it, reopened alternately, rep by rep.
  b.reset();
  a.reset();
  std::vector<double> with_tier, without_tier;
  for (uint32_t r = 0; r <= c.reps; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int arm = (k + static_cast<int>(r)) % 2;  // alternate which arm goes first
      EngineOptions el = ea;
      if (arm == 1) el.remote = RemoteTierOptions{};
      auto e = Must(Engine::Open(el), "reopening node A");
      Must(kv->Poison(), "poison");
      const std::string id = "local-" + std::to_string(r) + "-" + std::to_string(arm);
      const TimedRestore t = LookupAndRestore(*e, id, prompt, 256, *kv);
      const double sec = t.seconds;
      if (e->remote_stats().lookups != 0) {
        Fail("local hit", Internal("a wholly local hit consulted the cluster tier"));
      }
      if (Must(kv->CountMismatches(11, 0, t.hit_tokens), "verify") != 0) {
        Fail("local hit", Corruption("local restore delivered wrong bytes"));
      }
      if (r > 0) (arm == 0 ? with_tier : without_tier).push_back(sec);
    }
  }
  std::printf(
      "local hit, %s: with the cluster tier %.3f s (%.3f-%.3f), without %.3f s "
      "(%.3f-%.3f), ratio %.2f\n",
      FormatBytes(bytes).c_str(), Median(with_tier),
      *std::min_element(with_tier.begin(), with_tier.end()),
      *std::max_element(with_tier.begin(), with_tier.end()), Median(without_tier),
      *std::min_element(without_tier.begin(), without_tier.end()),
      *std::max_element(without_tier.begin(), without_tier.end()),
      Median(with_tier) / Median(without_tier));
  out["local_hit"] = {{"with_tier_s", with_tier}, {"without_tier_s", without_tier}};
  std::printf("ceiling: %u connections x %s GETs, %.2f GiB/s (grid of %zu cells)\n", best.conns,
              FormatBytes(best.piece).c_str(), best.gib_s, grid.size());
  out["wall_s"] = NowSeconds() - wall0;
  if (!c.json.empty()) {
    std::FILE* f = std::fopen(c.json.c_str(), "w");
    if (f != nullptr) {
      std::fputs(out.dump(2).c_str(), f);
      std::fclose(f);
    }
  }
}

}  // namespace

void AddBenchRemoteCommand(CLI::App& bench) {
  auto c = std::make_shared<RemoteBenchConfig>();
  CLI::App* cmd = bench.add_subcommand(
      "remote",
      "Restore sweep from the cluster tier (S3 + Redis) against the same server's "
      "ranged-GET ceiling and a per-object remote model");
  cmd->add_option("--remote", c->remote, "s3://BUCKET[/PREFIX] (a run prefix is added)")
      ->required();
  cmd->add_option("--remote-endpoint", c->endpoint, "S3 endpoint URL")->required();
  cmd->add_option("--directory", c->directory, "redis://host:port/db")->required();
  cmd->add_option("--dir", c->dir, "Parent of the scratch stores");
  cmd->add_option("--tokens", c->tokens, "Prefix tokens (s = 512 B x 32 layers)")
      ->capture_default_str();
  cmd->add_option("--points", c->points, "Object counts")->capture_default_str();
  cmd->add_option("--reps", c->reps, "Timed repetitions (after one warm-up)")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  cmd->add_option("--connections", c->connections, "Node B's S3 connections")
      ->capture_default_str();
  cmd->add_option("--get-bytes", c->get_bytes,
                  "Node B's bytes per ranged GET (0: a multipart part's consecutive spans per GET)")
      ->capture_default_str();
  cmd->add_option("--read-workers", c->read_workers,
                  "Node B's read workers (stripe spans in flight; 0: the engine's default)")
      ->capture_default_str();
  cmd->add_option("--io-threads", c->io_threads, "Threads driving the S3 connections")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_flag("--per-object,!--no-per-object", c->per_object, "Run the per-object model")
      ->capture_default_str();
  cmd->add_option("--per-object-max", c->per_object_max,
                  "Skip the per-object model at points with more objects than this")
      ->capture_default_str();
  cmd->add_option("--device", c->device, "Where both nodes' paged KV lives")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--json", c->json, "Write results as JSON");
  cmd->callback([c] { RunRemoteBench(*c); });
}

}  // namespace rangekv::tools
