#include "tools/bench/concurrent_workload.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "tools/bench/util.h"

namespace rangekv::tools {

void ConcurrentProgress(const ConcurrentOptions& o, const char* fmt, ...) {
  if (o.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("bench concurrent: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

void ConcurrentFail(const std::string& what) { FailCommand("bench concurrent", what); }

void ConcurrentCheck(const Status& s, const std::string& what) {
  if (!s.ok()) ConcurrentFail(what + ": " + s.ToString());
}

const char* ModeName(ConcurrentMode m) {
  return m == ConcurrentMode::kEmbedded  ? "embedded"
         : m == ConcurrentMode::kService ? "service"
                                         : "svc-thrd";
}

const char* VariantName(Variant v) {
  return v == Variant::kDistinct ? "distinct" : v == Variant::kSamePrefix ? "same-prefix" : "mixed";
}

Variant ParseVariant(const std::string& v) {
  return v == "distinct"      ? Variant::kDistinct
         : v == "same-prefix" ? Variant::kSamePrefix
                              : Variant::kMixed;
}

ConcurrentWorkload::ConcurrentWorkload(const ConcurrentOptions& o) : o_(o) {
  model_ = Llama31_8BSpec();
  Result<uint64_t> stripe = ParseBytes(o_.stripe);
  if (!stripe.ok()) ConcurrentFail("--stripe: " + stripe.status().ToString());
  Result<Geometry> g = DeriveGeometry(model_, *stripe);
  if (!g.ok()) ConcurrentFail(g.status().ToString());
  geometry_ = *g;
  Result<uint64_t> size = ParseBytes(o_.size);
  if (!size.ok()) ConcurrentFail("--size: " + size.status().ToString());
  row_bytes_ = uint64_t{geometry_.layers} * geometry_.token_bytes;
  total_tokens_ = *size / row_bytes_;
  for (const std::string& item : SplitList(o_.n_list)) {
    Result<uint64_t> n = ParseCount(item, "--n: each N", 1, 64);
    if (!n.ok()) ConcurrentFail(n.status().message());
    ns_.push_back(static_cast<uint32_t>(*n));
  }
  if (ns_.empty()) ConcurrentFail("--n is empty");
  const std::vector<std::string> named = SplitList(o_.variants);
  for (const std::string& v : named) {
    if (v != "distinct" && v != "same-prefix" && v != "mixed") {
      ConcurrentFail("--variants: '" + v + "' is none of distinct, same-prefix, mixed");
    }
  }
  for (Variant v : {Variant::kDistinct, Variant::kSamePrefix, Variant::kMixed}) {
    if (std::find(named.begin(), named.end(), VariantName(v)) != named.end()) {
      variants_.push_back(v);
    }
  }
  if (variants_.empty()) ConcurrentFail("--variants is empty");
  if (o_.interleave && o_.mode != "both") ConcurrentFail("--interleave needs --mode both");
  if (total_tokens_ < *std::max_element(ns_.begin(), ns_.end())) {
    ConcurrentFail("--size must hold at least one token (" + FormatBytes(row_bytes_) +
                   ") per request");
  }
  DeviceOptions dopt;
  dopt.kind = o_.device == "host"   ? DeviceKind::kHost
              : o_.device == "cuda" ? DeviceKind::kCuda
                                    : DeviceKind::kAuto;
  Result<std::unique_ptr<Device>> d = MakeDevice(dopt);
  if (!d.ok()) ConcurrentFail(d.status().ToString());
  device_ = std::move(d).value();
}

RunPlan ConcurrentWorkload::Plan(Variant variant, uint32_t n) const {
  RunPlan p;
  p.variant = variant;
  p.n = n;
  p.tokens = total_tokens_ / n;
  p.stores = variant == Variant::kMixed ? n - n / 2 : 0;
  p.restores = n - p.stores;
  p.prefixes = variant == Variant::kSamePrefix ? 1 : p.restores;
  p.rounds = o_.warmups + o_.reps;
  const uint64_t T = geometry_.tokens_per_stripe;
  const uint64_t packs_per_request = (p.tokens + T - 1) / T;
  p.capacity_bytes =
      (p.prefixes + uint64_t{p.stores} * p.rounds + 1) * packs_per_request * geometry_.pack_bytes;
  return p;
}

namespace {

// One engine's read counts from the --client-read-* or --embedded-read-* flags (0 keeps the
// engine's own): read workers (lookahead at least as deep), read I/O threads, read banks
// (prefetch capped one below).
void SizeReads(EngineOptions& eo, uint32_t workers, uint32_t threads, uint32_t banks) {
  eo.tuning.read_io_threads = threads;
  if (workers != 0) {
    eo.tuning.read_workers = workers;
    eo.tuning.lookahead_layers = std::max(eo.tuning.lookahead_layers, workers);
  }
  if (banks != 0) {
    eo.tuning.read_banks = banks;
    eo.tuning.prefetch_banks = std::min(eo.tuning.prefetch_banks, banks - 1);
  }
}

}  // namespace

EngineOptions ConcurrentWorkload::Options(const RunPlan& p, const std::string& store_dir,
                                          const std::string& socket) const {
  EngineOptions eo;
  eo.store_dir = store_dir;
  if (!socket.empty()) {
    eo.store_service = "unix://" + socket;
    eo.tenant = "bench";
    eo.tuning.share_reads = o_.client_share_reads == "on";
    eo.tuning.read_gate = o_.read_gate > 0;
    SizeReads(eo, o_.client_read_workers, o_.client_read_threads, o_.client_read_banks);
  } else {
    SizeReads(eo, o_.embedded_read_workers, o_.embedded_read_threads, o_.embedded_read_banks);
  }
  eo.model = model_;
  eo.stripe_bytes = geometry_.stripe_bytes;
  eo.capacity_bytes = p.capacity_bytes;
  eo.device = o_.device == "host"   ? DeviceSelection::kHost
              : o_.device == "cuda" ? DeviceSelection::kCuda
                                    : DeviceSelection::kAuto;
  Result<IoEngineKind> io = ParseIoEngineKind(o_.io);
  if (!io.ok()) ConcurrentFail("--io: " + io.status().ToString());
  eo.io_engine =
      *io == IoEngineKind::kUring ? IoEngineSelection::kUring : IoEngineSelection::kPosix;
  eo.direct_io = o_.buffered ? DirectIo::kOff : DirectIo::kPreferred;
  eo.max_request_tokens = std::max<uint64_t>(eo.max_request_tokens, p.tokens + 1);
  // Every request of a round holds a job slot (plus the lookup-time prefetch it adopts).
  eo.tuning.max_inflight_restores = std::max<uint32_t>(eo.tuning.max_inflight_restores, p.n);
  eo.tuning.max_inflight_stores = std::max<uint32_t>(eo.tuning.max_inflight_stores, p.n);
  return eo;
}

uint64_t ConcurrentWorkload::PrefixSeed(const RunPlan& p, uint32_t i) const {
  return o_.seed + (p.variant == Variant::kSamePrefix ? 0 : i);
}

std::vector<int32_t> ConcurrentWorkload::Prompt(const RunPlan& p, uint32_t i) const {
  return RandomTokens(p.tokens + 1, PrefixSeed(p, i) * 7919 + 1);
}

std::unique_ptr<PagedKvSpace> ConcurrentWorkload::Space(const RunPlan& p, uint32_t i) const {
  auto space = PagedKvSpace::Make(*device_, geometry_, p.tokens + 1, o_.seed + 1000 + i);
  if (!space.ok()) ConcurrentFail(space.status().ToString());
  return std::move(space).value();
}

void ConcurrentWorkload::PrepareRequest(const RunPlan& p, uint32_t round, uint32_t i,
                                        PagedKvSpace& kv, std::vector<int32_t>* tokens) const {
  if (i < p.restores) {
    ConcurrentCheck(kv.Poison(), "poison");
  } else {
    ConcurrentCheck(kv.Fill(o_.seed + 500 + i, 0, p.tokens), "fill");
    *tokens = RandomTokens(p.tokens, o_.seed * 31 + round * 1000 + i);  // this round's prompt
  }
}

Status ConcurrentWorkload::RunRequest(Engine& engine, const RunPlan& p, uint32_t round, uint32_t i,
                                      PagedKvSpace& kv, const std::vector<int32_t>& tokens,
                                      RequestTimeline* t) const {
  const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
  if (i < p.restores) {
    return TimedRestore(engine, kv, tokens, /*granularity=*/1, 0, p.tokens, id,
                        /*measure_cpu=*/false, t);
  }
  return TimedStore(engine, kv, tokens, id, std::nullopt, t);
}

uint64_t ConcurrentWorkload::VerifyRequest(const RunPlan& p, uint32_t i, PagedKvSpace& kv) const {
  if (i >= p.restores) return 0;
  auto bad = kv.CountMismatches(PrefixSeed(p, i), 0, p.tokens);
  if (!bad.ok()) ConcurrentFail(bad.status().ToString());
  return *bad;
}

void ConcurrentWorkload::StorePrefixes(Engine& engine, const RunPlan& p,
                                       std::vector<std::unique_ptr<PagedKvSpace>>& kv) const {
  for (uint32_t i = 0; i < p.prefixes; ++i) {
    ConcurrentCheck(kv[i]->Fill(PrefixSeed(p, i), 0, p.tokens), "fill");
    const std::vector<int32_t> prompt = Prompt(p, i);
    RequestTimeline unused;
    ConcurrentCheck(TimedStore(engine, *kv[i], std::span<const int32_t>(prompt).first(p.tokens),
                               "setup" + std::to_string(i), std::nullopt, &unused),
                    "setup store");
  }
}

}  // namespace rangekv::tools
