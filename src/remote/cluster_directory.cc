#include "remote/cluster_directory.h"

#include <openssl/sha.h>

#include <algorithm>
#include <bit>

namespace rangekv::remote {
namespace {

static_assert(std::endian::native == std::endian::little,
              "path keys hash int32 tokens as little-endian bytes");

std::string Bytes(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Server-clock milliseconds inside a script.
constexpr std::string_view kNow =
    "local t = redis.call('TIME'); local now = t[1] * 1000 + math.floor(t[2] / 1000)\n";

// KEYS: run, obj, tenant lru, tenant bytes, prefix bytes, marker.
// ARGV: object id, entry, bytes, parent hex, lru member.
const std::string kPublishScript = std::string(kNow) + R"(
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], 'state', 'live', 'bytes', ARGV[3], 'parent', ARGV[4])
redis.call('ZADD', KEYS[3], now, ARGV[5])
local tb = redis.call('INCRBY', KEYS[4], ARGV[3])
local pb = redis.call('INCRBY', KEYS[5], ARGV[3])
redis.call('SET', KEYS[6], '1')
return {tb, pb}
)";

// KEYS: tenant lru, then (obj, lease) per object. ARGV: reader, ttl ms, then lru member per object.
const std::string kLeaseScript = std::string(kNow) + R"(
local out = {}
local n = (#KEYS - 1) / 2
for i = 1, n do
  local obj = KEYS[2 * i]
  local lease = KEYS[2 * i + 1]
  if redis.call('HGET', obj, 'state') == 'live' then
    redis.call('ZADD', lease, now + tonumber(ARGV[2]), ARGV[1])
    redis.call('PEXPIRE', lease, 2 * tonumber(ARGV[2]))
    redis.call('ZADD', KEYS[1], 'XX', now, ARGV[2 + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)";

// KEYS: obj, lease, run, tenant lru, tenant bytes, prefix bytes, tenant dead.
// ARGV: object id, lru member, mode ('retire' | 'quarantine').
// Returns 1 done, 0 leased, -1 unknown, -2 not live (retire only).
const std::string kRemoveScript = std::string(kNow) + R"(
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
if ARGV[3] == 'retire' then
  if state ~= 'live' then return -2 end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) > 0 then return 0 end
end
if state == 'live' then
  local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes')) or 0
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[2])
  redis.call('DECRBY', KEYS[5], bytes)
  redis.call('DECRBY', KEYS[6], bytes)
end
if ARGV[3] == 'retire' then
  redis.call('HSET', KEYS[1], 'state', 'retired')
else
  redis.call('HSET', KEYS[1], 'state', 'quarantined')
end
redis.call('SADD', KEYS[7], ARGV[2])
return 1
)";

// KEYS: lease. Returns the unexpired leases left.
const std::string kLiveLeasesScript = std::string(kNow) + R"(
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
)";

uint64_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto m = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<uint64_t>(m.first - a.begin());
}

}  // namespace

// ---- scope ------------------------------------------------------------------------------------

bool ValidTenant(std::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  return std::all_of(t.begin(), t.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Result<RemoteScope> ParseS3Url(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  if (!url.starts_with(kScheme)) {
    return InvalidArgument("remote store must be s3://bucket[/prefix], got '" + std::string(url) +
                           "'");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  RemoteScope s;
  s.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view p = rest.substr(slash + 1);
    while (!p.empty() && p.back() == '/') p.remove_suffix(1);
    s.prefix = std::string(p);
  }
  // S3 bucket names: 3-63 of [a-z0-9.-].
  const bool bucket_ok =
      s.bucket.size() >= 3 && s.bucket.size() <= 63 &&
      std::all_of(s.bucket.begin(), s.bucket.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
      });
  if (!bucket_ok) return InvalidArgument("bucket name '" + s.bucket + "' is not a valid S3 name");
  for (char c : s.prefix) {
    if (static_cast<unsigned char>(c) < 0x20 || c == ':' || c == '\\') {
      return InvalidArgument("remote prefix '" + s.prefix +
                             "' holds a control character, ':' or '\\'");
    }
  }
  if (s.prefix.find("//") != std::string::npos || s.prefix.starts_with('/')) {
    return InvalidArgument("remote prefix '" + s.prefix + "' has an empty path segment");
  }
  return s;
}

std::string RemoteScope::PacksPrefix() const {
  return (prefix.empty() ? "" : prefix + "/") + tenant + "/" + NsHex() + "/packs/";
}
std::string RemoteScope::ObjectKey(const std::string& id) const { return PacksPrefix() + id; }
std::string RemoteScope::ManifestKey(const std::string& id) const {
  return PacksPrefix() + id + ".manifest";
}
std::string RemoteScope::MemberObjectKey(const std::string& member) const {
  const size_t slash = member.find('/');
  return (prefix.empty() ? "" : prefix + "/") + tenant + "/" + member.substr(0, slash) + "/packs/" +
         member.substr(slash + 1);
}
std::string RemoteScope::PrefixKeys() const { return "rkv:" + bucket + "/" + prefix + ":"; }
std::string RemoteScope::TenantKeys() const { return PrefixKeys() + tenant + ":"; }
std::string RemoteScope::NsKeys() const { return TenantKeys() + NsHex() + ":"; }

// ---- path keys --------------------------------------------------------------------------------

PathKeys::PathKeys(const NamespaceId& ns, std::span<const int32_t> tokens) : tokens_(tokens) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  static constexpr char kTag[] = "rangekv-path-v1";
  EVP_DigestUpdate(ctx, kTag, sizeof kTag - 1);
  uint8_t n[16];
  for (int i = 0; i < 8; ++i) {
    n[i] = static_cast<uint8_t>(ns.lo >> (8 * i));
    n[8 + i] = static_cast<uint8_t>(ns.hi >> (8 * i));
  }
  EVP_DigestUpdate(ctx, n, sizeof n);
  checkpoints_.push_back({0, ctx});
}

PathKeys::~PathKeys() {
  for (Checkpoint& c : checkpoints_) EVP_MD_CTX_free(c.ctx);
}

ParentKey PathKeys::At(uint64_t p) {
  auto it = std::upper_bound(checkpoints_.begin(), checkpoints_.end(), p,
                             [](uint64_t v, const Checkpoint& c) { return v < c.position; });
  --it;  // the checkpoint at or below p (position 0 always exists)
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_MD_CTX_copy_ex(ctx, it->ctx);
  if (p > it->position) {
    EVP_DigestUpdate(ctx, tokens_.data() + it->position, (p - it->position) * sizeof(int32_t));
  }
  ParentKey key{};
  EVP_MD_CTX* fin = EVP_MD_CTX_new();
  EVP_MD_CTX_copy_ex(fin, ctx);
  unsigned int len = 0;
  EVP_DigestFinal_ex(fin, key.data(), &len);
  EVP_MD_CTX_free(fin);
  if (p > it->position) {
    checkpoints_.insert(it + 1, {p, ctx});
  } else {
    EVP_MD_CTX_free(ctx);
  }
  return key;
}

std::string KeyHex(const ParentKey& key) {
  static const char* k = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < key.size(); ++i) {
    s[2 * i] = k[key[i] >> 4];
    s[2 * i + 1] = k[key[i] & 15];
  }
  return s;
}

// ---- directory --------------------------------------------------------------------------------

ClusterDirectory::ClusterDirectory(std::shared_ptr<RedisClient> redis, RemoteScope scope,
                                   ClusterDirectoryOptions options)
    : redis_(std::move(redis)), scope_(std::move(scope)), options_(options) {}

std::string ClusterDirectory::RunKey(const ParentKey& parent) const {
  return scope_.NsKeys() + "run:" + KeyHex(parent);
}

Result<WalkResult> ClusterDirectory::Walk(std::span<const int32_t> tokens, uint64_t limit,
                                          uint64_t tokens_per_pack, SteadyDeadline deadline) const {
  WalkResult out;
  limit = std::min<uint64_t>(limit, tokens.size());
  if (limit == 0 || tokens_per_pack == 0) return out;
  PathKeys keys(scope_.ns, tokens);
  uint64_t pos = 0;
  std::vector<uint64_t> grid;
  std::vector<RedisCommand> batch;
  while (pos < limit && out.round_trips < options_.max_rounds &&
         out.runs.size() < options_.max_runs) {
    grid.clear();
    batch.clear();
    for (uint64_t c = pos; c < limit && grid.size() + out.runs.size() < options_.max_runs;
         c += tokens_per_pack) {
      grid.push_back(c);
      batch.push_back({"HGETALL", RunKey(keys.At(c))});
    }
    RANGEKV_ASSIGN_OR_RETURN(std::vector<RedisReply> replies, redis_->Run(batch, deadline));
    ++out.round_trips;
    bool stop = true;
    size_t g = 0;
    while (g < grid.size() && grid[g] == pos) {
      const RedisReply& r = replies[g];
      if (r.error()) return Unavailable("cluster directory: " + r.str);
      // Pick the run that matches the prompt furthest from `pos`.
      WalkRun chosen;
      uint64_t best_match = 0;
      for (size_t i = 1; i < r.elements.size(); i += 2) {
        const std::string& v = r.elements[i].str;
        auto e = DecodeRunEntry(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
        if (!e.ok() || e->path_begin != pos) continue;  // damaged or foreign: not served
        const uint64_t m = CommonPrefix(
            e->tokens, tokens.subspan(pos, std::min<uint64_t>(limit - pos, e->tokens.size())));
        if (m > best_match) {
          best_match = m;
          chosen.entry = std::move(e).value();
          chosen.match_end = pos + m;
        }
      }
      if (best_match == 0) break;
      const bool whole = best_match == chosen.entry.tokens.size();
      out.runs.push_back(std::move(chosen));
      pos += best_match;
      if (!whole || pos >= limit) break;
      // The next run's entries: in this round if pos is on its grid, else another round.
      ++g;
      while (g < grid.size() && grid[g] < pos) ++g;
      if (g == grid.size() || grid[g] != pos) {
        stop = false;
        break;
      }
    }
    if (stop) break;
  }
  out.matched_tokens = pos;
  return out;
}

Result<bool> ClusterDirectory::HasRun(const ParentKey& parent, std::span<const int32_t> tokens,
                                      SteadyDeadline deadline) const {
  RANGEKV_ASSIGN_OR_RETURN(RedisReply r, redis_->RunOne({"HGETALL", RunKey(parent)}, deadline));
  if (r.error()) return Unavailable("cluster directory: " + r.str);
  for (size_t i = 1; i < r.elements.size(); i += 2) {
    const std::string& v = r.elements[i].str;
    auto e = DecodeRunEntry(std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
    if (e.ok() && std::equal(e->tokens.begin(), e->tokens.end(), tokens.begin(), tokens.end())) {
      return true;
    }
  }
  return false;
}

Result<ClusterDirectory::Published> ClusterDirectory::Publish(const ParentKey& parent,
                                                              const RunEntry& entry,
                                                              SteadyDeadline deadline) const {
  const std::string ns = scope_.NsKeys();
  const std::string t = scope_.TenantKeys();
  RANGEKV_ASSIGN_OR_RETURN(
      RedisReply r,
      redis_->RunOne({"EVAL", kPublishScript, "6", RunKey(parent), ns + "obj:" + entry.object_id,
                      t + "lru", t + "bytes", scope_.PrefixKeys() + "bytes", ns + "marker",
                      entry.object_id, Bytes(EncodeRunEntry(entry)),
                      std::to_string(entry.object_bytes), KeyHex(parent), Member(entry.object_id)},
                     deadline));
  if (r.error()) return Unavailable("cluster directory publish: " + r.str);
  if (r.type == RedisReply::Type::kInteger) {
    return Status(StatusCode::kAlreadyExists, "object " + entry.object_id + " is known already");
  }
  if (r.elements.size() != 2) return Internal("cluster directory publish: unexpected reply");
  return Published{static_cast<uint64_t>(std::max<int64_t>(0, r.elements[0].integer)),
                   static_cast<uint64_t>(std::max<int64_t>(0, r.elements[1].integer))};
}

Result<std::vector<bool>> ClusterDirectory::Lease(std::span<const std::string> object_ids,
                                                  const std::string& reader,
                                                  SteadyDeadline deadline) const {
  std::vector<bool> out;
  if (object_ids.empty()) return out;
  const std::string ns = scope_.NsKeys();
  RedisCommand cmd{"EVAL", kLeaseScript, std::to_string(1 + 2 * object_ids.size()),
                   scope_.TenantKeys() + "lru"};
  for (const std::string& id : object_ids) {
    cmd.push_back(ns + "obj:" + id);
    cmd.push_back(ns + "lease:" + id);
  }
  cmd.push_back(reader);
  cmd.push_back(std::to_string(options_.lease_ms));
  for (const std::string& id : object_ids) cmd.push_back(Member(id));
  RANGEKV_ASSIGN_OR_RETURN(RedisReply r, redis_->RunOne(cmd, deadline));
  if (r.error()) return Unavailable("cluster directory lease: " + r.str);
  if (r.elements.size() != object_ids.size()) return Internal("lease: unexpected reply");
  for (const RedisReply& e : r.elements) out.push_back(e.integer == 1);
  return out;
}

Status ClusterDirectory::Release(std::span<const std::string> object_ids, const std::string& reader,
                                 SteadyDeadline deadline) const {
  std::vector<RedisCommand> batch;
  for (const std::string& id : object_ids) {
    batch.push_back({"ZREM", scope_.NsKeys() + "lease:" + id, reader});
  }
  return redis_->Run(batch, deadline).status();
}

namespace {
Status RemoveResult(const RedisReply& r, const std::string& id) {
  if (r.error()) return Unavailable("cluster directory: " + r.str);
  switch (r.integer) {
    case 1:
      return OkStatus();
    case 0:
      return FailedPrecondition("object " + id + " is leased");
    case -2:
      return NotFound("object " + id + " is not live");
    default:
      return NotFound("object " + id + " is unknown");
  }
}
}  // namespace

// Retire and Quarantine run one script (kRemoveScript); `mode` says which: "retire" only takes a
// live, unleased run, "quarantine" takes it whatever its leases.
Status ClusterDirectory::Remove(const std::string& id, const char* mode,
                                SteadyDeadline deadline) const {
  const std::string ns = scope_.NsKeys();
  const std::string t = scope_.TenantKeys();
  RANGEKV_ASSIGN_OR_RETURN(RedisReply parent,
                           redis_->RunOne({"HGET", ns + "obj:" + id, "parent"}, deadline));
  RANGEKV_ASSIGN_OR_RETURN(
      RedisReply r,
      redis_->RunOne({"EVAL", kRemoveScript, "7", ns + "obj:" + id, ns + "lease:" + id,
                      ns + "run:" + parent.str, t + "lru", t + "bytes",
                      scope_.PrefixKeys() + "bytes", t + "dead", id, Member(id), mode},
                     deadline));
  return RemoveResult(r, id);
}

Status ClusterDirectory::Retire(const std::string& id, SteadyDeadline deadline) const {
  return Remove(id, "retire", deadline);
}

Status ClusterDirectory::Quarantine(const std::string& id, SteadyDeadline deadline) const {
  return Remove(id, "quarantine", deadline);
}

Result<uint64_t> ClusterDirectory::RetireForCapacity(uint64_t tenant_bytes,
                                                     SteadyDeadline deadline) const {
  if (tenant_bytes == 0) return uint64_t{0};
  const std::string t = scope_.TenantKeys();
  uint64_t retired = 0;
  int64_t offset = 0;
  for (int round = 0; round < 64; ++round) {
    RANGEKV_ASSIGN_OR_RETURN(RedisReply bytes, redis_->RunOne({"GET", t + "bytes"}, deadline));
    const uint64_t now_bytes = bytes.nil() ? 0 : std::strtoull(bytes.str.c_str(), nullptr, 10);
    if (now_bytes <= tenant_bytes) break;
    RANGEKV_ASSIGN_OR_RETURN(
        RedisReply oldest,
        redis_->RunOne({"ZRANGE", t + "lru", std::to_string(offset), std::to_string(offset + 15)},
                       deadline));
    if (oldest.elements.empty()) break;
    for (const RedisReply& m : oldest.elements) {
      const size_t slash = m.str.find('/');
      if (slash == std::string::npos) continue;
      // The member may belong to another namespace of the tenant: its own keys.
      const std::string ns_keys = t + m.str.substr(0, slash) + ":";
      const std::string id = m.str.substr(slash + 1);
      RANGEKV_ASSIGN_OR_RETURN(RedisReply parent,
                               redis_->RunOne({"HGET", ns_keys + "obj:" + id, "parent"}, deadline));
      RANGEKV_ASSIGN_OR_RETURN(
          RedisReply r, redis_->RunOne({"EVAL", kRemoveScript, "7", ns_keys + "obj:" + id,
                                        ns_keys + "lease:" + id, ns_keys + "run:" + parent.str,
                                        t + "lru", t + "bytes", scope_.PrefixKeys() + "bytes",
                                        t + "dead", id, m.str, "retire"},
                                       deadline));
      if (r.integer == 1) {
        ++retired;
      } else {
        ++offset;  // leased (or gone): skip it this pass
      }
    }
  }
  return retired;
}

Result<std::vector<std::string>> ClusterDirectory::Deletable(SteadyDeadline deadline) const {
  const std::string t = scope_.TenantKeys();
  RANGEKV_ASSIGN_OR_RETURN(RedisReply dead, redis_->RunOne({"SMEMBERS", t + "dead"}, deadline));
  std::vector<std::string> out;
  for (const RedisReply& m : dead.elements) {
    const size_t slash = m.str.find('/');
    if (slash == std::string::npos) continue;
    const std::string lease = t + m.str.substr(0, slash) + ":lease:" + m.str.substr(slash + 1);
    RANGEKV_ASSIGN_OR_RETURN(RedisReply live,
                             redis_->RunOne({"EVAL", kLiveLeasesScript, "1", lease}, deadline));
    if (!live.error() && live.integer == 0) out.push_back(m.str);
  }
  return out;
}

Status ClusterDirectory::Forget(const std::string& member, SteadyDeadline deadline) const {
  const std::string t = scope_.TenantKeys();
  const size_t slash = member.find('/');
  if (slash == std::string::npos) return InvalidArgument("member without namespace: " + member);
  const std::string ns_keys = t + member.substr(0, slash) + ":";
  const std::string id = member.substr(slash + 1);
  std::vector<RedisCommand> batch = {{"DEL", ns_keys + "obj:" + id, ns_keys + "lease:" + id},
                                     {"SREM", t + "dead", member}};
  return redis_->Run(batch, deadline).status();
}

Result<bool> ClusterDirectory::HasMarker(SteadyDeadline deadline) const {
  RANGEKV_ASSIGN_OR_RETURN(RedisReply r,
                           redis_->RunOne({"EXISTS", scope_.NsKeys() + "marker"}, deadline));
  return r.integer == 1;
}

Status ClusterDirectory::SetMarker(SteadyDeadline deadline) const {
  return redis_->RunOne({"SET", scope_.NsKeys() + "marker", "1"}, deadline).status();
}

Result<std::string> ClusterDirectory::ObjectState(const std::string& id,
                                                  SteadyDeadline deadline) const {
  RANGEKV_ASSIGN_OR_RETURN(
      RedisReply r, redis_->RunOne({"HGET", scope_.NsKeys() + "obj:" + id, "state"}, deadline));
  return r.nil() ? std::string() : r.str;
}

}  // namespace rangekv::remote
