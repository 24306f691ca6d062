// Publisher: uploads a store's sealed packs to the cluster tier in the background
// (docs/scale-out.md "Publication"). A pack is sealed the moment it is published locally: the
// directory never appends to a visible pack (a later store starts new packs), so each published
// pack becomes one immutable object.
//
// It is a DirectoryObserver of the store's Directory (embedded engine or store service): each
// publication queues its packs (a copy of the path, no I/O, under the directory's lock; a full
// queue drops the newest with a counter). One thread then, per pack:
//   1. computes the run's parent key (cluster_directory.h) and skips the pack when the directory
//      already holds a live run with the same tokens (a pack this node restored from the
//      cluster and wrote through, or the same prompt stored elsewhere);
//   2. copies the pack's recorded payload digests (persist DigestTable) and reads the stored
//      tokens' bytes of each layer from the pack file, verifying them against those digests (a
//      slot evicted and rewritten since fails here, and nothing is uploaded);
//   3. uploads the object: one PUT when it fits one part, else a multipart upload whose parts
//      are whole stripes of the object (so a ranged read of a stripe lies in one part), under
//      the bandwidth cap, each call retried with backoff; a failure aborts the upload (nothing
//      appears: S3 shows a multipart object only at CompleteMultipartUpload);
//   4. puts the manifest beside it, then 5. publishes the run entry (one script: entry, object
//      state, LRU, byte counters). Only step 5 makes the run visible to other nodes, and it
//      names an object and manifest already complete: a node that dies at any earlier point
//      leaves nothing visible (at most an unreferenced object: a bucket lifecycle rule on the
//      prefix
// is the backstop, docs/scale-out.md).
// After a publication over the tenant's capacity it retires least recently used unleased runs
// and deletes the objects of retired and quarantined runs whose leases ran out (whole objects
// only). It checks the directory's marker at start and every `check_interval`: when Redis lost
// its data the directory is rebuilt from the manifests in the bucket (Rebuild: O(packs)).
//
// Never on a request's path: a store is acknowledged locally as before; uploads only read the
// pack file.
//
// Thread-safety: the observer calls run under the directory's mutex (short, no I/O); the rest
// is the publisher's own thread. Stats and Flush from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "directory/directory.h"
#include "pack/pack_file.h"
#include "persist/payload_digests.h"
#include "rangekv/remote.h"
#include "remote/remote_clients.h"

namespace rangekv::remote {

struct PublisherStats {
  uint64_t queued = 0;
  uint64_t published = 0;
  uint64_t deduplicated = 0;
  uint64_t failed = 0;   // gave up after retries, or the pack changed under the upload
  uint64_t dropped = 0;  // queue full
  uint64_t bytes_uploaded = 0;
  uint64_t objects_deleted = 0;
  uint64_t rebuilds = 0;
  uint64_t rebuilt_runs = 0;
};

// Test seam: called at named points of one pack's upload (crash tests SIGKILL there).
enum class PublishPoint : uint8_t { kPartsUploaded, kObjectComplete, kManifestStored };

class Publisher final : public DirectoryObserver {
 public:
  struct Options {
    // Whether the store's paged layout is block-opaque (vLLM's CPU layout: a pack then starts
    // at the block boundary at or below its first path token, docs/pack-format.md
    // "Block-opaque stripes"). kUnknown (the store service, which is not told the layout):
    // derived from the pack's stored extent, and a pack whose extent fits both readings is not
    // published (never a wrong position).
    enum class Opaque : uint8_t { kUnknown, kNo, kYes };
    Opaque opaque = Opaque::kUnknown;
    uint32_t max_queue = 1024;
    uint32_t layer_group = 4;  // layers per manifest extent
    std::chrono::milliseconds request_timeout{60000};
    std::chrono::milliseconds check_interval{5000};
  };
  // `pack` and `digests` must outlive the publisher (StoreState owns all three). Starts its
  // thread.
  Publisher(std::shared_ptr<RemoteClients> clients, const PackFile* pack,
            persist::DigestTable* digests, Options options);
  ~Publisher() override;  // Stop()

  // DirectoryObserver.
  void OnPublished(uint64_t reservation_id, const NamespaceId& ns, std::span<const int32_t> path,
                   std::span<const PackRecord> packs) override;
  void OnRemoved(const RemovedPack&) override {}

  // Blocks until every pack queued so far was handled (published, skipped or failed), or the
  // timeout passed (false).
  bool Flush(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Stops the thread; an upload in flight is aborted (nothing of it appears), the queue dropped.
  void Stop() EXCLUDES(mu_);
  PublisherStats stats() const EXCLUDES(mu_);
  // Test seam (crash tests): `hook` is called at each PublishPoint of every upload from now on.
  void SetPointHookForTesting(std::function<void(PublishPoint)> hook) EXCLUDES(mu_);

 private:
  struct Job {
    std::shared_ptr<const std::vector<int32_t>> path;
    PackRecord pack;  // path_token_begin, tokens = stored tokens, slot, generation
  };
  void Run();
  Status PublishOne(const Job& job);
  // Reads layer `layer` of the job's pack (its stored tokens, pitch bytes) into `out` and
  // verifies the bytes against `digests` (blocks of that layer).
  Status ReadLayer(const Job& job, uint32_t layer, const PackManifest& m, uint8_t* out);
  // Runs `call` up to upload_retries + 1 times while it fails kUnavailable.
  Status Retry(const std::function<Status()>& call);
  void Throttle(uint64_t bytes);
  void CollectGarbage(uint64_t tenant_bytes);
  void CheckMarker();
  void Hook(PublishPoint p) const EXCLUDES(mu_);
  bool stopping() const EXCLUDES(mu_);

  const std::shared_ptr<RemoteClients> clients_;
  const PackFile* const pack_;
  persist::DigestTable* const digests_;
  const Options options_;
  const Geometry geometry_;
  uint8_t* buffer_ = nullptr;  // one part, 4 KiB aligned (O_DIRECT pack files)
  uint64_t buffer_bytes_ = 0;
  std::chrono::steady_clock::time_point throttle_start_;
  uint64_t throttle_bytes_ = 0;
  std::chrono::steady_clock::time_point last_check_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> queue_ GUARDED_BY(mu_);
  uint64_t done_ GUARDED_BY(mu_) = 0;   // jobs handled
  uint64_t taken_ GUARDED_BY(mu_) = 0;  // jobs queued (not dropped)
  bool stop_ GUARDED_BY(mu_) = false;
  PublisherStats stats_ GUARDED_BY(mu_);
  std::function<void(PublishPoint)> point_hook_ GUARDED_BY(mu_);
  std::thread thread_;
};

// Rebuilds the namespace's cluster directory from the manifests under its bucket prefix: lists
// the objects (one page per 1,000), reads each manifest, checks its namespace and geometry, and
// publishes its run (objects already known are left alone). O(packs) GETs and scripts. Returns
// the runs added.
Result<uint64_t> RebuildDirectory(const RemoteClients& clients, const Geometry& geometry,
                                  std::chrono::steady_clock::time_point deadline);

}  // namespace rangekv::remote
