// ClusterDirectory: the cluster tier's directory in Redis / Valkey (docs/scale-out.md
// "Directory"): ONE entry per published run (a run is what one pack holds: a contiguous piece of
// one prefix path), never one per chunk, layer or TP rank.
//
// Keys. Everything lives under K = "rkv:<bucket>/<prefix>:<tenant>:<namespace hex>:" (a node
// touches only the keys of the prefixes, tenant and namespace it is configured for):
//   K run:<parent key hex>  HASH object id -> RunEntry (manifest.h): the runs whose first token
//                           follows the path whose key is <parent key>
//   K obj:<object id>       HASH state (live | retired | quarantined), bytes, parent
//   K lease:<object id>     ZSET reader -> expiry (ms, server clock); the key itself expires too
//   K marker                present once the namespace's directory holds what the bucket holds
// and per tenant T = "rkv:<bucket>/<prefix>:<tenant>:":
//   T lru    ZSET "<namespace hex>/<object id>" -> last use (ms): approximate LRU over runs
//   T bytes  the tenant's published bytes;  T dead  SET of members retired or quarantined,
//   waiting for their leases to run out before their objects are deleted
// and "rkv:<bucket>/<prefix>:bytes", the prefix's bytes over all tenants.
// The parent key of a run starting at path position p is SHA-256("rangekv-path-v1", namespace,
// tokens [0, p)) (PathKeys): a lookup computes it from the prompt, never from stored state.
// The run's own tokens are in its entry and compared token by token, so a hit names exactly the
// tokens it covers; the path before the run is identified by its 256-bit key.
//
// Lookup (Walk). A path is served by runs that start where the previous one ended. Packs are
// filled T tokens at a time from where a store began, so most runs start on the grid
// start + k*T: one pipelined round trip fetches the entries at every grid position at once, and
// a run that ends off the grid (a shorter prompt stored earlier, a divergence) costs one more
// round trip from there. Round trips per lookup are therefore 1 + the off-grid boundaries on the
// path, bounded by max_rounds, whatever the number of chunks, layers or ranks.
//
// Lifetime. A reader leases the objects of its hit (Lease: one Lua script, one round trip, which
// also refreshes their LRU time and refuses objects no longer live); leases expire by
// themselves. Retire removes a live, unleased run from the directory atomically (its lease
// check and the removal are one script) and queues its object for deletion; Quarantine removes a
// run at once whatever its leases (its bytes failed their digests). An object is deleted only
// once it is retired or quarantined and holds no unexpired lease (TakeDeletable); no lease can
// be taken on it after that, so the delete cannot race a reader.
//
// Thread-safety: all methods are thread-safe (the RedisClient is).
#pragma once

#include <openssl/evp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rangekv/geometry.h"
#include "rangekv/status.h"
#include "remote/manifest.h"
#include "remote/redis_client.h"

namespace rangekv::remote {

using SteadyDeadline = std::chrono::steady_clock::time_point;

// Where a node's published packs live: bucket, prefix, tenant, namespace.
struct RemoteScope {
  std::string bucket;
  std::string prefix;  // may be ""; no leading or trailing '/'
  std::string tenant = "default";
  NamespaceId ns;
  std::string NsHex() const { return ns.ToHex(); }
  // S3 keys: <prefix>/<tenant>/<namespace hex>/packs/<object id>[.manifest]
  std::string ObjectKey(const std::string& object_id) const;
  std::string ManifestKey(const std::string& object_id) const;
  std::string PacksPrefix() const;  // what Rebuild lists
  // The S3 key of a tenant member "<namespace hex>/<object id>" (any namespace of the tenant).
  std::string MemberObjectKey(const std::string& member) const;
  // Redis key prefixes (see the header comment).
  std::string NsKeys() const;
  std::string TenantKeys() const;
  std::string PrefixKeys() const;
};

// Parses s3://bucket[/prefix]. kInvalidArgument with the reason.
Result<RemoteScope> ParseS3Url(std::string_view url);
// Tenant names: 1-64 of [A-Za-z0-9._-].
bool ValidTenant(std::string_view tenant);

// Keys of path prefixes of one prompt (see the header comment). Positions may be asked in any
// order; each costs the tokens since the nearest position asked before it (checkpoints kept),
// so a whole walk hashes the prompt about once.
class PathKeys {
 public:
  PathKeys(const NamespaceId& ns, std::span<const int32_t> tokens);
  ~PathKeys();
  PathKeys(const PathKeys&) = delete;
  PathKeys& operator=(const PathKeys&) = delete;
  // REQUIRES p <= tokens.size().
  ParentKey At(uint64_t p);

 private:
  std::span<const int32_t> tokens_;
  struct Checkpoint {
    uint64_t position;
    EVP_MD_CTX* ctx;
  };
  std::vector<Checkpoint> checkpoints_;  // sorted by position
};
std::string KeyHex(const ParentKey& key);

struct ClusterDirectoryOptions {
  uint32_t lease_ms = 60000;  // reader leases (TTL)
  uint32_t max_rounds = 8;    // round trips of one walk
  uint32_t max_runs = 1024;   // runs one walk may select
};

// One run a walk selected: the entry and the path tokens of it the prompt matched.
struct WalkRun {
  RunEntry entry;
  uint64_t match_end = 0;  // path position the match reached inside this run
};

struct WalkResult {
  uint64_t matched_tokens = 0;  // path [0, matched_tokens) is covered by `runs`
  std::vector<WalkRun> runs;
  uint32_t round_trips = 0;
};

class ClusterDirectory {
 public:
  ClusterDirectory(std::shared_ptr<RedisClient> redis, RemoteScope scope,
                   ClusterDirectoryOptions options);

  const RemoteScope& scope() const { return scope_; }
  RedisClient& redis() const { return *redis_; }

  // Walks the runs on the path of tokens [0, limit) (limit <= tokens.size()). tokens_per_pack
  // is T (the grid step). kUnavailable on Redis errors or the deadline.
  Result<WalkResult> Walk(std::span<const int32_t> tokens, uint64_t limit, uint64_t tokens_per_pack,
                          SteadyDeadline deadline) const;

  // Whether a live run with exactly these tokens already follows `parent` (a publisher skips
  // uploading a duplicate: the node restored it from there, or another node stored the same).
  Result<bool> HasRun(const ParentKey& parent, std::span<const int32_t> tokens,
                      SteadyDeadline deadline) const;

  // Makes a run visible (entry, object state, LRU, byte counters, marker: one script). Returns
  // the tenant's and the prefix's published bytes after it; kAlreadyExists when the object is
  // known already (nothing changes).
  struct Published {
    uint64_t tenant_bytes = 0;
    uint64_t prefix_bytes = 0;
  };
  Result<Published> Publish(const ParentKey& parent, const RunEntry& entry,
                            SteadyDeadline deadline) const;

  // Leases `object_ids` for `reader` (lease_ms) and refreshes their LRU time. Per object: true
  // when leased, false when it is no longer live (retired, quarantined, gone).
  Result<std::vector<bool>> Lease(std::span<const std::string> object_ids,
                                  const std::string& reader, SteadyDeadline deadline) const;
  Status Release(std::span<const std::string> object_ids, const std::string& reader,
                 SteadyDeadline deadline) const;

  // Removes a live run that no reader leases (one script). kFailedPrecondition when leased,
  // kNotFound when not live.
  Status Retire(const std::string& object_id, SteadyDeadline deadline) const;
  // Removes a run at once, whatever its leases: its bytes failed their digests.
  Status Quarantine(const std::string& object_id, SteadyDeadline deadline) const;
  // Retires least recently used runs of the tenant until its bytes are within `tenant_bytes`
  // (0: no bound); leased runs are skipped. Returns how many it retired.
  Result<uint64_t> RetireForCapacity(uint64_t tenant_bytes, SteadyDeadline deadline) const;
  // Members ("<namespace hex>/<object id>") of the tenant that are retired or quarantined and
  // hold no unexpired lease: their objects (RemoteScope::MemberObjectKey) may be deleted now.
  // Forget() them once deleted.
  Result<std::vector<std::string>> Deletable(SteadyDeadline deadline) const;
  Status Forget(const std::string& member, SteadyDeadline deadline) const;

  // Whether the namespace's marker is present (absent: Redis lost its data, or nothing was
  // published yet; Rebuild from the manifests).
  Result<bool> HasMarker(SteadyDeadline deadline) const;
  Status SetMarker(SteadyDeadline deadline) const;
  // The state of one object ("" when unknown), for tests and inspection.
  Result<std::string> ObjectState(const std::string& object_id, SteadyDeadline deadline) const;

 private:
  Status Remove(const std::string& object_id, const char* mode, SteadyDeadline deadline) const;
  std::string RunKey(const ParentKey& parent) const;
  std::string Member(const std::string& object_id) const {
    return scope_.NsHex() + "/" + object_id;
  }

  std::shared_ptr<RedisClient> redis_;
  RemoteScope scope_;
  ClusterDirectoryOptions options_;
};

}  // namespace rangekv::remote
