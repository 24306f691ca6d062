// The cluster tier's options and counters (docs/scale-out.md): a node publishes its sealed
// packs to an S3-compatible object store, one Redis / Valkey entry per published run, and
// restores other nodes' runs by ranged GETs into its read banks. Off unless `url` is set.
#pragma once

#include <cstdint>
#include <string>

namespace rangekv {

struct RemoteTierOptions {
  // s3://bucket[/prefix]; "" = no cluster tier. Objects go under
  // <prefix>/<tenant>/<namespace hex>/packs/.
  std::string url;
  // The S3 endpoint: "" = AWS S3 (https://<bucket>.s3.<region>.amazonaws.com); otherwise
  // http(s)://host[:port] of SeaweedFS, MinIO, Ceph RGW (path-style requests).
  std::string endpoint;
  // The cluster directory: redis://[[user]:password@]host:port[/db] (Redis or Valkey). Required
  // with `url`.
  std::string directory;
  // Region for SigV4 ("" = AWS_REGION, AWS_DEFAULT_REGION, the config file, else us-east-1).
  // Credentials always come from the standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
  // AWS_SESSION_TOKEN, ~/.aws/credentials, ~/.aws/config; AWS_PROFILE).
  std::string region;
  // A CA bundle for https endpoints with a private CA ("" = the system's).
  std::string ca_file;
  // The tenant prefix objects and keys go under (1-64 of [A-Za-z0-9._-]); the engine's tenant
  // when left empty.
  std::string tenant;

  // Restore side. Bound on a lookup's cluster walk (round trips, lease, manifests); past it the
  // lookup answers with what the node holds (a miss for the rest, never a stall).
  uint32_t lookup_timeout_ms = 250;
  // Bound on one stripe's ranged GETs (a GET carrying n stripes: n times it); past it the
  // stripes fail closed (their tokens are recomputed).
  uint32_t read_timeout_ms = 10000;
  // Bytes per ranged GET. 0: one GET carries the consecutive layers of a run that share a
  // multipart part of its object (up to 4 stripe spans, each landing in its own read bank), or
  // one span. Otherwise a stripe span is fetched as ceil(span / get_bytes) GETs in parallel.
  // [0] or [64 KiB, 1 GiB].
  uint64_t get_bytes = 0;
  // Sockets to the object store in all, and threads driving them.
  uint32_t connections = 32;
  uint32_t io_threads = 2;
  // Reader leases in the directory (ms): a run a restore reads cannot be deleted before it ends.
  uint32_t lease_ms = 60000;

  // Publication side (the embedded engine, or the node's store service, uploads).
  bool publish = true;
  // Upload bandwidth cap in bytes per second (0 = none) and multipart part size (rounded to
  // whole stripes of the object, at least 5 MiB as S3 requires).
  uint64_t upload_bytes_per_s = 0;
  uint64_t part_bytes = 32ull << 20;
  uint32_t upload_retries = 5;
  // The tenant's bytes in the bucket prefix; past it the least recently used unleased runs are
  // retired and their objects deleted (0 = no bound).
  uint64_t capacity_bytes = 0;
};

// Counters of an engine's cluster tier (Engine::remote_stats()).
struct RemoteTierStats {
  bool enabled = false;
  uint64_t lookups = 0;          // lookups that consulted the cluster directory
  uint64_t lookup_hits = 0;      // of them, lookups whose hit grew by remote runs
  uint64_t lookup_timeouts = 0;  // walks that ran out of time or failed (answered locally)
  uint64_t directory_round_trips = 0;
  uint64_t runs_selected = 0;
  uint64_t manifest_fetches = 0;  // manifests read from the bucket (cached after)
  uint64_t gets = 0;              // ranged GETs of payload
  uint64_t get_bytes = 0;
  uint64_t failed_gets = 0;
  uint64_t verified_spans = 0;
  uint64_t quarantined = 0;  // objects whose bytes failed their digests
  uint64_t packs_published = 0;
  uint64_t packs_deduplicated = 0;  // not uploaded: the same run was published already
  uint64_t publish_failures = 0;
  uint64_t bytes_uploaded = 0;
  uint64_t objects_deleted = 0;  // by capacity or after quarantine
  uint64_t directory_rebuilds = 0;
};

}  // namespace rangekv
