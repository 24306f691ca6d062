// StoreState: the persistent half of an engine: the store directory, its pack file, the range
// directory over the pack slots, the payload digests and the persistence protocol (dirty
// marker, clean-shutdown snapshot). The transfer pipelines borrow it; the node's store service
// (src/service) holds one per store it serves. This is the only place a store is opened or
// closed (docs/design.md "Persistence and recovery"; docs/architecture.md "Persistence and
// integrity").
//
// Open(): opens `<dir>/packs.rkv` when it exists (validated against the expected geometry and
// namespace: PackFile::Open's distinct errors, e.g. kTruncated for a cut payload region; with
// on_mismatch kReplace a pack file of another namespace or geometry is removed with the rest of
// its store, the epoch file excepted) and creates it otherwise, then runs persist::OpenIndex: the
// directory is loaded from a clean, intact snapshot bound to this pack file, or starts empty with
// a logged reason (dirty marker, missing / corrupt / foreign snapshot, ...); either way the store
// epoch is raised durably, the directory's owner epoch is that epoch and its generation floor
// epoch << 32. The identity record (identity.json) is written when given and absent or
// different. Nothing is written to the pack file and no dirty marker is made here: the first
// store or invalidation does that (integrity()->BeforeFirstWrite).
//
// Ownership: Open takes the store's lock (lock.rkv, Env::LockFile) before it reads anything, so
// a second engine or store service opening the same directory fails at once with kLocked
// naming the holder's pid; Close releases it (so does the kernel when the process dies).
//
// Close(): REQUIRES every owner drained (restores, stores, write debt). Runs
// Persistence::SaveClean: fsync the pack file, write and fsync the snapshot (directory + digests)
// under a temporary name, rename it into place, fsync the directory, remove the dirty marker,
// fsync the directory. On any failure the marker stays and the next open discards the index.
//
// Service mode (options.service set): Open connects to the node's store service instead
// (service_store.h). The index, digests, journal and snapshot are the service's: index() and
// integrity() are the ServiceStore, directory() / digests() / persistence() must not be called
// (service() is non-null), and Close() says Goodbye.
//
// Thread-safety: after Open, the accessors are thread-safe (PackFile is immutable; Directory,
// DigestTable and Persistence lock). Close() REQUIRES that every owner drained.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "directory/directory.h"
#include "directory/range_index.h"
#include "directory/removal_log.h"
#include "pack/pack_file.h"
#include "pack/span_plan.h"
#include "persist/payload_digests.h"
#include "persist/persistence.h"
#include "persist/store_access.h"
#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/options.h"
#include "rangekv/remote.h"
#include "rangekv/status.h"
#include "store/integrity.h"

namespace rangekv::store {

class ServiceStore;
}  // namespace rangekv::store
namespace rangekv::remote {
struct RemoteClients;
class Publisher;
}  // namespace rangekv::remote
namespace rangekv::store {

struct StoreStateOptions {
  Env* env = nullptr;
  std::string dir;
  Geometry geometry;
  NamespaceId ns;
  uint64_t pack_count = 0;      // for a new pack file
  uint64_t capacity_bytes = 0;  // the directory's byte capacity bound
  DirectIo direct = DirectIo::kPreferred;
  DirectoryOptions directory;  // pack_slots / tokens_per_pack / pack_bytes / epochs filled in
  // persist::PersistenceOptions::digest_block_tokens (0 = default).
  uint64_t digest_block_tokens = 0;
  // Who may read the store (directory and file permission bits; store_access.h).
  persist::StorePermissions permissions;
  // The publication journal (persist/journal_writer.h); mode kNone writes none.
  persist::JournalOptions journal{.mode = persist::DurabilityMode::kNone};
  // RemovalLog capacity (EngineTuning::max_removed_ranges); 0: no log.
  uint64_t max_removed_ranges = 0;
  // Who holds the store's lock (persist/store_layout.h lock.rkv), for the message a second
  // opener gets: "pid <pid> (<holder>)".
  std::string holder = "rangekv engine";
  // Test seam (crash tests): persist::PersistenceOptions::shutdown_hook.
  std::function<Status(persist::ShutdownStep)> shutdown_hook;
  // Service mode (EngineOptions::store_service): the index lives in the node's store service
  // at this address; `dir`, `pack_count`, `directory`, `permissions` and `journal` are the
  // service's business then. `tenant` names the quota account; a call to the service polls
  // `service_spin_us` for its reply before sleeping.
  std::string service;
  std::string tenant = "default";
  uint32_t service_spin_us = 0;
  uint32_t service_timeout_ms = 60000;  // EngineTuning::store_service_timeout_ms
  bool read_gate = false;  // ask the service for its read gate (EngineTuning::read_gate)
  // The cluster tier (docs/scale-out.md; off when remote.url is empty): clients for lookups and
  // reads in every mode, and, for an embedded directory with remote.publish, a publisher that
  // uploads every pack this store publishes. Close() gives pending uploads up to
  // publish_drain_ms before it stops the publisher.
  RemoteTierOptions remote;
  uint32_t publish_drain_ms = 10000;
  // Whether the paged layout is block-opaque (embedded engines know; the service does not:
  // remote::Publisher::Options::opaque).
  std::optional<bool> block_opaque;
  // Embedded: what to do with a pack file of another namespace or geometry
  // (EngineOptions::on_store_mismatch).
  StoreMismatch on_mismatch = StoreMismatch::kFail;
  // persist/identity_record.h: written beside the pack file (embedded), or sent at Hello for
  // the service to write (service mode). Empty: none.
  std::string identity_record;
};

class StoreState {
 public:
  static constexpr std::string_view kPackFileName = persist::kPackFileName;

  static Result<std::unique_ptr<StoreState>> Open(const StoreStateOptions& options);
  ~StoreState();
  StoreState(const StoreState&) = delete;
  StoreState& operator=(const StoreState&) = delete;

  Env* env() const { return env_; }
  const std::string& dir() const { return dir_; }
  const PackFile& pack_file() const { return *pack_; }
  File* file() const { return pack_->file(); }
  const PackLayout& layout() const { return pack_->layout(); }
  const Geometry& geometry() const { return pack_->geometry(); }
  const NamespaceId& ns() const { return pack_->namespace_id(); }
  // What the engine's pipelines use: the embedded directory, or the store service.
  RangeIndex& index() const { return *index_; }
  // Embedded mode only (REQUIRES service() == nullptr).
  Directory& directory() const { return *directory_; }
  ServiceStore* service() const { return service_.get(); }
  persist::DigestTable& digests() const { return *digests_; }
  persist::Persistence& persistence() const { return *persistence_; }
  // What OpenIndex decided (loaded, or started empty and why).
  const persist::RecoveryReport& recovery() const { return recovery_; }
  // Current slot generations as the directory knows them, for the span planner.
  const GenerationView& generations() const { return *generation_view_; }
  bool created() const { return created_; }
  // The persistence layer's hooks into the pipelines (digests, dirty marker).
  PayloadIntegrity* integrity() const { return integrity_ptr_; }

  // The cluster tier's clients (null when off) and this store's publisher (null unless the
  // directory is embedded and publication is on).
  const std::shared_ptr<remote::RemoteClients>& remote() const { return remote_; }
  remote::Publisher* publisher() const { return publisher_.get(); }

  // The directory's removal log (directory/removal_log.h: Engine::DrainRemovedRanges), seeded
  // with the packs the open loaded; null when max_removed_ranges is 0.
  RemovalLog* removals() const { return removals_.get(); }

  // The session's journal writer (null under durability=none).
  persist::JournalWriter* journal() const {
    return persistence_ != nullptr ? persistence_->journal() : nullptr;
  }
  // durability=every_publish: blocks until the publication of `reservation_id` is durable; OK
  // at once without a journal. The journal's error when it failed.
  Status AwaitDurable(uint64_t reservation_id) const;

  // The clean shutdown (see the file comment). REQUIRES all owners drained. Idempotent: later
  // calls return the first call's status.
  Status Close();

  // Test seam (in-process crash simulation): Close() will persist nothing, as if the process
  // had died here; the files stay as they are now (a dirty store stays dirty).
  void AbandonForTesting() { abandoned_ = true; }

 private:
  class DirectoryGenerations final : public GenerationView {
   public:
    explicit DirectoryGenerations(const StoreState* state) : state_(state) {}
    uint64_t CurrentGeneration(uint32_t slot) const override;

   private:
    const StoreState* state_;
  };

  StoreState(Env* env, std::string dir, PackFile pack, persist::OpenedIndex index, bool created,
             std::unique_ptr<FileLock> lock);
  StoreState(Env* env, std::unique_ptr<ServiceStore> service);
  static Result<std::unique_ptr<StoreState>> OpenService(const StoreStateOptions& options);
  Status ConnectRemote(const StoreStateOptions& options);
  void StopPublisher();

  Env* env_;
  std::string dir_;
  std::unique_ptr<FileLock> lock_;  // embedded: held from Open until Close
  std::optional<PackFile> own_pack_;
  const PackFile* pack_ = nullptr;
  std::unique_ptr<ServiceStore> service_;
  RangeIndex* index_ = nullptr;
  PayloadIntegrity* integrity_ptr_ = nullptr;
  const GenerationView* generation_view_ = nullptr;
  std::unique_ptr<RemovalLog> removals_;  // declared before directory_: outlives it
  std::shared_ptr<remote::RemoteClients> remote_;
  std::unique_ptr<remote::Publisher> publisher_;  // removed from the directory's observers first
  uint32_t publish_drain_ms_ = 0;
  std::unique_ptr<Directory> directory_;
  std::unique_ptr<persist::DigestTable> digests_;
  std::unique_ptr<persist::Persistence> persistence_;
  persist::RecoveryReport recovery_;
  DirectoryGenerations generations_{this};
  bool created_;
  std::unique_ptr<PayloadIntegrity> integrity_;
  bool closed_ = false;
  bool abandoned_ = false;
  Status close_status_;
};

}  // namespace rangekv::store
