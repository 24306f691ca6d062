#include "engine/remote_tier.h"

#include <algorithm>
#include <random>

#include "base/coding.h"
#include "base/digest.h"
#include "base/log.h"

namespace rangekv::engine_internal {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr uint32_t kCompositeMagic = 0x58564B52u;  // "RKVX"
constexpr uint32_t kCompositeVersion = 1;
constexpr size_t kMaxTickets = 4096;
constexpr size_t kMaxCachedPacks = 1024;
constexpr size_t kMaxBackground = 4096;

uint64_t TokensDigest(std::span<const int32_t> tokens) {
  return Hash64(tokens.data(), tokens.size_bytes(), 0x52656D6F74654B56ull);
}

std::string ReaderName() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  char buf[32];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return std::string("reader-") + buf;
}

}  // namespace

std::string EncodeCompositeTicket(const CompositeTicket& t) {
  coding::ByteWriter w;
  w.U32(kCompositeMagic);
  w.U32(kCompositeVersion);
  w.U64(t.local_hit);
  w.U64(t.remote_id);
  w.U64(t.remote_hit);
  w.U32(static_cast<uint32_t>(t.local.size()));
  w.Bytes(t.local.data(), t.local.size());
  const auto b = w.Take();
  return std::string(b.begin(), b.end());
}

std::optional<Result<CompositeTicket>> DecodeCompositeTicket(std::string_view bytes) {
  if (bytes.size() < 4 ||
      coding::LoadU32(reinterpret_cast<const uint8_t*>(bytes.data())) != kCompositeMagic) {
    return std::nullopt;
  }
  coding::ByteReader r(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  uint32_t magic = 0, version = 0, len = 0;
  CompositeTicket t;
  std::span<const uint8_t> local;
  if (!r.U32(&magic) || !r.U32(&version) || version != kCompositeVersion || !r.U64(&t.local_hit) ||
      !r.U64(&t.remote_id) || !r.U64(&t.remote_hit) || !r.U32(&len) || !r.View(len, &local) ||
      r.remaining() != 0) {
    return Result<CompositeTicket>(
        Status(StatusCode::kCorruptTicket, "undecodable cluster-tier ticket"));
  }
  t.local.assign(local.begin(), local.end());
  return Result<CompositeTicket>(std::move(t));
}

RemoteTier::RemoteTier(std::shared_ptr<remote::RemoteClients> clients, const Geometry& geometry,
                       uint64_t digest_block_tokens, uint64_t digest_seed, uint64_t bank_bytes)
    : clients_(std::move(clients)),
      geometry_(geometry),
      digest_block_tokens_(digest_block_tokens),
      digest_seed_(digest_seed),
      bank_bytes_(bank_bytes),
      reader_(ReaderName()) {
  {
    MutexLock l(stats_mu_);
    stats_.enabled = true;
  }
  bg_thread_ = std::thread([this] { BackgroundLoop(); });
}

RemoteTier::~RemoteTier() {
  {
    MutexLock l(bg_mu_);
    bg_stop_ = true;
    bg_cv_.NotifyAll();
  }
  bg_thread_.join();
  // Whatever tickets are left: release their leases now (best effort, bounded).
  std::vector<std::string> leased;
  {
    MutexLock l(mu_);
    for (auto& [id, t] : tickets_) leased.insert(leased.end(), t.leased.begin(), t.leased.end());
    tickets_.clear();
  }
  if (!leased.empty()) {
    (void)clients_->directory->Release(leased, reader_,
                                       SteadyClock::now() + std::chrono::milliseconds(1000));
  }
}

void RemoteTier::Background(std::function<void()> task) {
  MutexLock l(bg_mu_);
  if (bg_stop_ || bg_queue_.size() >= kMaxBackground) return;
  bg_queue_.push_back(std::move(task));
  bg_cv_.NotifyOne();
}

void RemoteTier::BackgroundLoop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock l(bg_mu_);
      bg_cv_.Wait(l, [&]() REQUIRES(bg_mu_) { return bg_stop_ || !bg_queue_.empty(); });
      if (bg_queue_.empty()) return;  // stopping, nothing left
      task = std::move(bg_queue_.front());
      bg_queue_.pop_front();
    }
    task();
  }
}

std::shared_ptr<RemoteTier::Pack> RemoteTier::Find(uint32_t handle) const {
  MutexLock l(mu_);
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : it->second.lock();
}

std::shared_ptr<RemoteTier::Pack> RemoteTier::Cached(const std::string& object_id) {
  MutexLock l(mu_);
  auto it = cache_.find(object_id);
  if (it == cache_.end()) return nullptr;
  lru_.remove(object_id);
  lru_.push_back(object_id);
  return it->second;
}

std::shared_ptr<RemoteTier::Pack> RemoteTier::Insert(const std::string& object_id,
                                                     remote::PackManifest manifest) {
  MutexLock l(mu_);
  auto it = cache_.find(object_id);
  if (it != cache_.end()) return it->second;
  auto p = std::make_shared<Pack>();
  p->handle = next_handle_++;
  p->object_id = object_id;
  p->key = clients_->scope.ObjectKey(object_id);
  p->manifest = std::move(manifest);
  handles_[p->handle] = p;
  cache_[object_id] = p;
  lru_.push_back(object_id);
  while (cache_.size() > kMaxCachedPacks) {
    cache_.erase(lru_.front());
    lru_.pop_front();
  }
  // Handles of packs nobody holds any more.
  for (auto h = handles_.begin(); h != handles_.end();) {
    h = h->second.expired() ? handles_.erase(h) : std::next(h);
  }
  return p;
}

std::optional<RemoteTier::Extension> RemoteTier::Lookup(const std::string& request_id,
                                                        std::span<const int32_t> tokens,
                                                        uint64_t local_hit, uint64_t limit,
                                                        uint64_t granularity) {
  if (local_hit >= limit || granularity == 0) return std::nullopt;
  {
    // The same query again (vLLM asks while a request waits for blocks): the same ticket, as
    // the local directory answers, with no network round trip.
    MutexLock l(mu_);
    auto it = tickets_.find(request_id);
    if (it != tickets_.end() && !it->second.claimed && it->second.local_hit == local_hit &&
        it->second.hit <= limit && it->second.hit % granularity == 0 &&
        tokens.size() >= it->second.hit &&
        TokensDigest(tokens.first(it->second.hit)) == it->second.tokens_digest) {
      return Extension{it->second.id, it->second.hit, it->second.records.size()};
    }
  }
  const remote::RemoteClients& c = *clients_;
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(c.options.lookup_timeout_ms);
  {
    MutexLock l(stats_mu_);
    ++stats_.lookups;
  }
  auto fail = [&](const Status& s) -> std::optional<Extension> {
    MutexLock l(stats_mu_);
    ++stats_.lookup_timeouts;
    Log(LogLevel::kDebug, "cluster tier lookup answered locally: " + s.ToString());
    return std::nullopt;
  };
  auto walked = c.directory->Walk(tokens, limit, geometry_.tokens_per_stripe, deadline);
  if (!walked.ok()) return fail(walked.status());
  {
    MutexLock l(stats_mu_);
    stats_.directory_round_trips += walked->round_trips;
  }
  uint64_t hit = std::min(walked->matched_tokens, limit) / granularity * granularity;
  if (hit <= local_hit) return std::nullopt;
  // The runs that hold [local_hit, hit).
  std::vector<remote::WalkRun> runs;
  for (auto& r : walked->runs) {
    if (r.match_end > local_hit && r.entry.path_begin < hit) runs.push_back(std::move(r));
  }
  std::vector<std::string> ids;
  for (const auto& r : runs) ids.push_back(r.entry.object_id);
  auto leased = c.directory->Lease(ids, reader_, deadline);
  if (!leased.ok()) return fail(leased.status());
  {
    MutexLock l(stats_mu_);
    ++stats_.directory_round_trips;
  }
  // A run no longer live ends the hit where it begins.
  size_t usable = runs.size();
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!(*leased)[i]) {
      usable = i;
      break;
    }
  }
  // Manifests: cached, or fetched in parallel.
  std::vector<std::shared_ptr<Pack>> packs(usable);
  std::vector<remote::S3Request> fetch;
  std::vector<size_t> fetch_of;
  for (size_t i = 0; i < usable; ++i) {
    packs[i] = Cached(runs[i].entry.object_id);
    if (packs[i] != nullptr) continue;
    remote::S3Request r;
    r.bucket = c.scope.bucket;
    r.key = c.scope.ManifestKey(runs[i].entry.object_id);
    r.max_body_bytes = 256ull << 20;
    fetch.push_back(std::move(r));
    fetch_of.push_back(i);
  }
  if (!fetch.empty()) {
    std::vector<remote::S3Request*> batch;
    for (auto& r : fetch) batch.push_back(&r);
    (void)c.s3->Execute(batch, deadline);  // per-request statuses below
    MutexLock l(stats_mu_);
    stats_.manifest_fetches += fetch.size();
  }
  for (size_t k = 0; k < fetch.size(); ++k) {
    const size_t i = fetch_of[k];
    if (!fetch[k].status.ok()) {
      usable = std::min(usable, i);
      continue;
    }
    auto m = remote::DecodeManifest(fetch[k].body);
    const remote::RunEntry& e = runs[i].entry;
    const bool fits = m.ok() && m->ns == c.scope.ns && m->geometry == geometry_ &&
                      m->digest_block_tokens == digest_block_tokens_ &&
                      m->digest_seed == digest_seed_ && m->path_begin == e.path_begin &&
                      m->generation == e.generation && m->tokens == e.tokens &&
                      m->stripe_pitch == e.stripe_pitch && m->object_bytes == e.object_bytes &&
                      m->stripe_pitch <= bank_bytes_;
    if (!fits) {
      Log(LogLevel::kWarning,
          "cluster tier: manifest of " + e.object_id +
              " does not fit this "
              "engine (" +
              (m.ok() ? "namespace, geometry or digests differ" : m.status().ToString()) +
              "); not used");
      usable = std::min(usable, i);
      continue;
    }
    packs[i] = Insert(e.object_id, std::move(m).value());
  }
  if (usable < runs.size())
    hit = std::min(hit, runs[usable].entry.path_begin / granularity * granularity);
  // Leases of runs not used go back at once.
  std::vector<std::string> kept, unused;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!(*leased)[i]) continue;
    (i < usable && runs[i].entry.path_begin < hit ? kept : unused).push_back(ids[i]);
  }
  if (!unused.empty()) {
    Background([this, unused] {
      (void)clients_->directory->Release(unused, reader_,
                                         SteadyClock::now() + std::chrono::milliseconds(2000));
    });
  }
  if (hit <= local_hit) {
    if (!kept.empty()) {
      Background([this, kept] {
        (void)clients_->directory->Release(kept, reader_,
                                           SteadyClock::now() + std::chrono::milliseconds(2000));
      });
    }
    return std::nullopt;
  }
  Ticket t;
  t.local_hit = local_hit;
  t.hit = hit;
  t.tokens_digest = TokensDigest(tokens.first(hit));
  t.leased = std::move(kept);
  for (size_t i = 0; i < usable; ++i) {
    const remote::RunEntry& e = runs[i].entry;
    const uint64_t a = std::max(local_hit, e.path_begin);
    const uint64_t b = std::min({hit, runs[i].match_end, e.path_begin + e.tokens.size()});
    if (a >= b) continue;
    t.records.push_back({packs[i]->handle, a, a - e.path_begin, b - a});
    t.packs.push_back(packs[i]);
  }
  Extension ext;
  ext.hit_tokens = hit;
  ext.runs = t.records.size();
  std::vector<std::string> replaced;
  {
    MutexLock l(mu_);
    if (tickets_.size() >= kMaxTickets && tickets_.count(request_id) == 0) {
      replaced = std::move(t.leased);
    } else {
      t.id = next_ticket_++;
      ext.ticket_id = t.id;
      auto it = tickets_.find(request_id);
      if (it != tickets_.end()) replaced = std::move(it->second.leased);
      tickets_[request_id] = std::move(t);
    }
  }
  if (!replaced.empty()) {
    Background([this, replaced] {
      (void)clients_->directory->Release(replaced, reader_,
                                         SteadyClock::now() + std::chrono::milliseconds(2000));
    });
  }
  if (ext.ticket_id == 0) return std::nullopt;
  MutexLock l(stats_mu_);
  ++stats_.lookup_hits;
  stats_.runs_selected += ext.runs;
  return ext;
}

Result<RemoteTier::Claimed> RemoteTier::Claim(const std::string& request_id, uint64_t ticket_id,
                                              std::span<const int32_t> tokens, uint64_t begin,
                                              uint64_t endpoint) {
  MutexLock l(mu_);
  auto it = tickets_.find(request_id);
  if (it == tickets_.end() || it->second.id != ticket_id) {
    return NotFound("no cluster-tier ticket " + std::to_string(ticket_id) + " for this request");
  }
  Ticket& t = it->second;
  if (t.claimed) return FailedPrecondition("cluster-tier ticket already claimed");
  if (endpoint > t.hit) {
    return Status(
        StatusCode::kEndpointBeyondTicket,
        "restore to " + std::to_string(endpoint) + " beyond the hit " + std::to_string(t.hit));
  }
  if (tokens.size() < t.hit || TokensDigest(tokens.first(t.hit)) != t.tokens_digest) {
    return Status(StatusCode::kTokenMismatch, "tokens differ from the cluster-tier lookup's");
  }
  t.claimed = true;
  Claimed out;
  const uint64_t from = std::max(begin, t.local_hit);
  for (const RemoteRecord& r : t.records) {
    const uint64_t a = std::max(from, r.path_token_begin);
    const uint64_t b = std::min(endpoint, r.path_token_end());
    if (a >= b) continue;
    out.records.push_back({r.handle, a, r.pack_token_offset + (a - r.path_token_begin), b - a});
  }
  return out;
}

void RemoteTier::Release(const std::string& request_id, uint64_t ticket_id) {
  std::vector<std::string> leased;
  {
    MutexLock l(mu_);
    auto it = tickets_.find(request_id);
    if (it == tickets_.end() || (ticket_id != 0 && it->second.id != ticket_id)) return;
    leased = std::move(it->second.leased);
    tickets_.erase(it);
  }
  if (leased.empty()) return;
  Background([this, leased] {
    (void)clients_->directory->Release(leased, reader_,
                                       SteadyClock::now() + std::chrono::milliseconds(2000));
  });
}

void RemoteTier::Cancel(const std::string& request_id) {
  uint64_t id = 0;
  {
    MutexLock l(mu_);
    auto it = tickets_.find(request_id);
    if (it == tickets_.end() || it->second.claimed) return;
    id = it->second.id;
  }
  Release(request_id, id);
}

Status RemoteTier::PlanSpans(std::span<const RemoteRecord> records, TokenInterval tokens,
                             uint32_t layers, bool verify, std::vector<Span>* out) const {
  const uint64_t s = geometry_.token_bytes;
  std::vector<Span> per;  // one layer's spans, then repeated for each layer
  for (const RemoteRecord& r : records) {
    const uint64_t a = std::max(tokens.begin, r.path_token_begin);
    const uint64_t e = std::min(tokens.end, r.path_token_end());
    if (a >= e) continue;
    auto pack = Find(r.handle);
    if (pack == nullptr) return NotFound("cluster-tier pack handle " + std::to_string(r.handle));
    const remote::PackManifest& m = pack->manifest;
    const uint64_t pa = r.pack_token_offset + (a - r.path_token_begin);
    const uint64_t pe = pa + (e - a);
    if (pe > m.stored_tokens) return Internal("remote record beyond its pack's stored tokens");
    uint64_t ra = pa, re = pe;
    if (verify) {
      const uint64_t d = m.digest_block_tokens;
      ra = pa / d * d;
      re = std::min((pe + d - 1) / d * d, m.stored_tokens);
    }
    Span sp;
    sp.file_index = kRemoteFileIndex;
    sp.pack_slot = r.handle;
    sp.generation = m.generation;
    sp.file_offset = ra * s;  // in the layer's stripe; the layer offset is added below
    sp.length_bytes = (re - ra) * s;
    sp.path_token_begin = a;
    sp.path_token_end = e;
    sp.pack_token_begin = pa;
    sp.payload_offset_bytes = (pa - ra) * s;
    sp.payload_bytes = (e - a) * s;
    if (sp.length_bytes > bank_bytes_) return OutOfRange("remote span larger than a read bank");
    per.push_back(sp);
  }
  for (uint32_t l = 0; l < layers; ++l) {
    for (Span sp : per) {
      auto pack = Find(sp.pack_slot);
      sp.layer = l;
      sp.file_offset += pack->manifest.LayerOffset(l);
      out->push_back(sp);
    }
  }
  return OkStatus();
}

uint32_t RemoteTier::SpansPerGet(const Span& first) const {
  if (clients_->options.get_bytes != 0) return 1;
  auto pack = Find(first.pack_slot);
  if (pack == nullptr || pack->manifest.stripe_pitch == 0) return 1;
  const remote::PackManifest& m = pack->manifest;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(m.part_bytes / m.stripe_pitch, 1, kMaxSpansPerGet));
}

bool RemoteTier::JoinsGet(const Span& first, const Span& prev, const Span& next) const {
  if (next.file_index != kRemoteFileIndex || next.pack_slot != first.pack_slot ||
      next.generation != first.generation) {
    return false;
  }
  const uint64_t prev_end = prev.file_offset + prev.length_bytes;
  if (next.file_offset < prev_end || next.file_offset - prev_end > kMaxGetGapBytes) return false;
  auto pack = Find(first.pack_slot);
  if (pack == nullptr || pack->manifest.part_bytes == 0) return false;
  const uint64_t part = pack->manifest.part_bytes;
  return (next.file_offset + next.length_bytes - 1) / part == first.file_offset / part;
}

Status RemoteTier::Read(std::span<const Span* const> spans, std::span<uint8_t* const> bufs,
                        uint64_t* gets) {
  *gets = 0;
  if (spans.empty() || spans.size() != bufs.size()) return Internal("remote read of no span");
  const Span& first = *spans[0];
  auto pack = Find(first.pack_slot);
  if (pack == nullptr)
    return NotFound("cluster-tier pack handle " + std::to_string(first.pack_slot));
  if (pack->bad.load(std::memory_order_acquire)) {
    return Corruption("cluster-tier object " + pack->object_id + " failed its digests");
  }
  const remote::RemoteClients& c = *clients_;
  std::vector<remote::S3Request> reqs;
  if (spans.size() > 1) {  // one GET, each span's bytes into its own buffer
    for (size_t i = 1; i < spans.size(); ++i) {
      if (!JoinsGet(first, *spans[i - 1], *spans[i])) {
        return Internal("remote spans that cannot share a GET");
      }
    }
    remote::S3Request& r = reqs.emplace_back();
    r.range_offset = first.file_offset;
    r.range_length = spans.back()->file_offset + spans.back()->length_bytes - first.file_offset;
    for (size_t i = 0; i < spans.size(); ++i) {
      r.segments.push_back({spans[i]->file_offset - first.file_offset,
                            std::span<uint8_t>(bufs[i], spans[i]->length_bytes)});
    }
  } else {  // one span: ceil(span / get_bytes) GETs into its buffer
    const uint64_t piece = c.options.get_bytes == 0 ? first.length_bytes : c.options.get_bytes;
    const uint64_t n = (first.length_bytes + piece - 1) / piece;
    reqs.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      remote::S3Request& r = reqs[i];
      r.range_offset = first.file_offset + i * piece;
      r.range_length = std::min(piece, first.length_bytes - i * piece);
      r.into = std::span<uint8_t>(bufs[0] + i * piece, r.range_length);
    }
  }
  std::vector<remote::S3Request*> batch;
  for (remote::S3Request& r : reqs) {
    r.bucket = c.scope.bucket;
    r.key = pack->key;
    batch.push_back(&r);
  }
  *gets = reqs.size();
  // read_timeout_ms bounds one stripe's bytes: a GET carrying n stripes gets n times it.
  const Status s = c.s3->Execute(
      batch, SteadyClock::now() + std::chrono::milliseconds(c.options.read_timeout_ms) *
                                      static_cast<int64_t>(spans.size()));
  MutexLock l(stats_mu_);
  stats_.gets += reqs.size();
  for (const auto& r : reqs) {
    stats_.get_bytes += r.bytes;
    if (!r.status.ok()) ++stats_.failed_gets;
  }
  return s;
}

Result<store::DigestBlocks> RemoteTier::PlanVerify(const Span& span) {
  auto pack = Find(span.pack_slot);
  if (pack == nullptr)
    return NotFound("cluster-tier pack handle " + std::to_string(span.pack_slot));
  const remote::PackManifest& m = pack->manifest;
  if (span.generation != m.generation) return Status(StatusCode::kStaleGeneration, "remote pack");
  if (pack->bad.load(std::memory_order_acquire)) {
    return Corruption("cluster-tier object " + pack->object_id + " failed its digests");
  }
  const uint64_t d = m.digest_block_tokens;
  const uint64_t first = span.pack_token_begin / d;
  const uint64_t last = (span.pack_token_begin + span.tokens() + d - 1) / d;
  return store::DigestBlocks{first, last - first, m.stored_tokens};
}

Status RemoteTier::Expected(const Span& span, uint64_t first_block, std::span<uint64_t> out) {
  auto pack = Find(span.pack_slot);
  if (pack == nullptr)
    return NotFound("cluster-tier pack handle " + std::to_string(span.pack_slot));
  const remote::PackManifest& m = pack->manifest;
  const uint64_t bpl = m.blocks_per_layer();
  if (span.layer >= m.geometry.layers || first_block + out.size() > bpl) {
    return OutOfRange("remote digest blocks beyond the manifest");
  }
  std::copy_n(m.digests.begin() + uint64_t{span.layer} * bpl + first_block, out.size(),
              out.begin());
  return OkStatus();
}

Status RemoteTier::Verify(const Span& span, uint64_t first_block,
                          std::span<const uint64_t> computed, bool* mismatch) {
  *mismatch = false;
  auto pack = Find(span.pack_slot);
  if (pack == nullptr)
    return NotFound("cluster-tier pack handle " + std::to_string(span.pack_slot));
  if (pack->bad.load(std::memory_order_acquire)) {
    return Corruption("cluster-tier object " + pack->object_id + " failed its digests");
  }
  const remote::PackManifest& m = pack->manifest;
  const uint64_t bpl = m.blocks_per_layer();
  if (span.layer >= m.geometry.layers || first_block + computed.size() > bpl) {
    return OutOfRange("remote digest blocks beyond the manifest");
  }
  {
    MutexLock l(stats_mu_);
    ++stats_.verified_spans;
  }
  for (size_t i = 0; i < computed.size(); ++i) {
    if (computed[i] != m.digests[uint64_t{span.layer} * bpl + first_block + i]) {
      *mismatch = true;
      return Corruption("cluster-tier object " + pack->object_id + " layer " +
                        std::to_string(span.layer) + " digest block " +
                        std::to_string(first_block + i) + " does not match its manifest");
    }
  }
  return OkStatus();
}

void RemoteTier::OnCorruption(const Span& span) {
  auto pack = Find(span.pack_slot);
  if (pack == nullptr || pack->bad.exchange(true)) return;
  {
    MutexLock l(mu_);
    cache_.erase(pack->object_id);
    lru_.remove(pack->object_id);
  }
  {
    MutexLock l(stats_mu_);
    ++stats_.quarantined;
  }
  Log(LogLevel::kError, "cluster tier: object " + pack->object_id +
                            " failed its digests; quarantined (never served)");
  const std::string id = pack->object_id;
  Background([this, id] {
    Status s = clients_->directory->Quarantine(id, SteadyClock::now() + std::chrono::seconds(5));
    if (!s.ok()) Log(LogLevel::kWarning, "cluster tier: quarantining " + id + ": " + s.ToString());
  });
}

RemoteTierStats RemoteTier::stats() const {
  MutexLock l(stats_mu_);
  return stats_;
}

}  // namespace rangekv::engine_internal
