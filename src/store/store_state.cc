#include "store/store_state.h"

#include <unistd.h>

#include "base/log.h"
#include "persist/identity_record.h"
#include "persist/store_layout.h"
#include "remote/publisher.h"
#include "remote/remote_clients.h"
#include "store/service_store.h"
#include "store/store_integrity.h"

namespace rangekv::store {
namespace {

// Every file of a store except its epoch (so epochs keep increasing across the replacement).
Status RemoveStoreFiles(Env* env, const persist::StorePaths& paths) {
  for (const std::string& f : {paths.pack(), paths.pack_temp(), paths.snapshot(),
                               paths.snapshot_temp(), paths.dirty_marker(), paths.journal(),
                               paths.journal_temp(), paths.identity(), paths.identity_temp()}) {
    if (env->FileExists(f)) RANGEKV_RETURN_IF_ERROR(env->DeleteFile(f));
  }
  return env->SyncDir(paths.dir);
}

}  // namespace

uint64_t StoreState::DirectoryGenerations::CurrentGeneration(uint32_t slot) const {
  if (slot >= state_->directory_->options().pack_slots) return kNoGeneration;
  const SlotInfo info = state_->directory_->Slot(slot);
  // Visible and retired-but-leased slots are readable; a reserved slot is writable by its
  // reservation. A free slot has no generation anyone may use.
  return info.state == SlotState::kFree ? kNoGeneration : info.generation;
}

StoreState::StoreState(Env* env, std::string dir, PackFile pack, persist::OpenedIndex index,
                       bool created, std::unique_ptr<FileLock> lock)
    : env_(env),
      dir_(std::move(dir)),
      lock_(std::move(lock)),
      own_pack_(std::move(pack)),
      pack_(&*own_pack_),
      directory_(std::move(index.directory)),
      digests_(std::move(index.digests)),
      persistence_(std::move(index.persistence)),
      recovery_(std::move(index.report)),
      created_(created),
      integrity_(
          std::make_unique<StoreIntegrity>(directory_.get(), digests_.get(), persistence_.get())) {
  index_ = directory_.get();
  integrity_ptr_ = integrity_.get();
  generation_view_ = &generations_;
}

StoreState::StoreState(Env* env, std::unique_ptr<ServiceStore> service)
    : env_(env),
      dir_(service->hello().store_dir),
      pack_(&service->pack_file()),
      service_(std::move(service)),
      created_(false) {
  index_ = service_.get();
  integrity_ptr_ = service_.get();
  generation_view_ = service_.get();
  recovery_.outcome = service_->hello().loaded ? persist::RecoveryOutcome::kLoaded
                                               : persist::RecoveryOutcome::kStartedEmpty;
  recovery_.packs_loaded = service_->hello().packs_loaded;
  recovery_.store_epoch = service_->hello().owner_epoch;
}

StoreState::~StoreState() {
  StopPublisher();
  if (removals_ != nullptr && directory_ != nullptr) directory_->RemoveObserver(removals_.get());
}

void StoreState::StopPublisher() {
  if (publisher_ == nullptr) return;
  if (!publisher_->Flush(std::chrono::milliseconds(publish_drain_ms_))) {
    Log(LogLevel::kWarning, "cluster tier: closing with uploads still pending; they are dropped");
  }
  publisher_->Stop();
  if (directory_ != nullptr) directory_->RemoveObserver(publisher_.get());
  publisher_.reset();
}

Status StoreState::ConnectRemote(const StoreStateOptions& o) {
  if (o.remote.url.empty()) return OkStatus();
  RANGEKV_ASSIGN_OR_RETURN(remote_, remote::ConnectRemote(o.remote, o.tenant, ns()));
  if (directory_ == nullptr || !o.remote.publish) return OkStatus();
  publish_drain_ms_ = o.publish_drain_ms;
  remote::Publisher::Options po;
  using Opaque = remote::Publisher::Options::Opaque;
  po.opaque = !o.block_opaque ? Opaque::kUnknown : *o.block_opaque ? Opaque::kYes : Opaque::kNo;
  publisher_ = std::make_unique<remote::Publisher>(remote_, pack_, digests_.get(), po);
  return directory_->AddObserver(publisher_.get());
}

Result<std::unique_ptr<StoreState>> StoreState::OpenService(const StoreStateOptions& o) {
  ServiceStoreOptions so;
  so.address = o.service;
  so.tenant = o.tenant;
  so.geometry = o.geometry;
  so.ns = o.ns;
  so.capacity_bytes = o.capacity_bytes;
  so.direct = o.direct == DirectIo::kPreferred;
  so.digest_block_tokens = o.digest_block_tokens;
  so.reply_spin = std::chrono::microseconds(o.service_spin_us);
  so.call_timeout = std::chrono::milliseconds(o.service_timeout_ms);
  so.read_gate = o.read_gate;
  so.identity_record = o.identity_record;
  RANGEKV_ASSIGN_OR_RETURN(auto service, ServiceStore::Connect(so));
  std::unique_ptr<StoreState> state(new StoreState(o.env, std::move(service)));
  RANGEKV_RETURN_IF_ERROR(state->ConnectRemote(o));
  return state;
}

Result<std::unique_ptr<StoreState>> StoreState::Open(const StoreStateOptions& o) {
  if (o.env == nullptr) return InvalidArgument("StoreState: null env");
  if (!o.service.empty()) return OpenService(o);
  const persist::StorePaths paths(o.dir);
  // Creates the directory owner-only (or group-readable) and refuses a store another user owns
  // or could have written (kUnsafePermissions).
  RANGEKV_RETURN_IF_ERROR(
      persist::PrepareStoreDir(o.env, paths, o.permissions, persist::EffectiveUid()));
  // One owner at a time: two engines (or an engine and a store service) on one directory would
  // hand out the same slots and overwrite each other's packs and index.
  auto lock =
      o.env->LockFile(paths.lock(), "pid " + std::to_string(::getpid()) + " (" + o.holder + ")",
                      o.permissions.file);
  if (!lock.ok()) {
    if (lock.status().code() != StatusCode::kLocked) {
      return lock.status().WithContext("store " + o.dir);
    }
    return Status(StatusCode::kLocked,
                  "store " + o.dir + " is in use: " + lock.status().message() +
                      "; one engine or store service per store directory at a time (processes "
                      "share a store through `rangekv serve`)");
  }
  const std::string path = paths.pack();
  bool created = false;
  std::optional<PackFile> pack;
  if (o.env->FileExists(path)) {
    PackExpectation expect;
    expect.geometry = o.geometry;
    expect.namespace_id = o.ns;
    PackOpenOptions open;
    open.direct = o.direct;
    auto opened = PackFile::Open(o.env, path, expect, open);
    const StatusCode code = opened.status().code();
    if (opened.ok()) {
      pack.emplace(std::move(opened).value());
    } else if (o.on_mismatch == StoreMismatch::kReplace &&
               (code == StatusCode::kNamespaceMismatch || code == StatusCode::kGeometryMismatch)) {
      Log(LogLevel::kWarning, "store " + o.dir +
                                  " was written for another namespace or geometry (" +
                                  opened.status().ToString() +
                                  "); replacing it with an empty store "
                                  "for namespace " +
                                  o.ns.ToHex() + ": its KV is never served here");
      RANGEKV_RETURN_IF_ERROR(RemoveStoreFiles(o.env, paths).WithContext("replacing " + o.dir));
    } else {
      return opened.status().WithContext("opening " + path);
    }
  }
  if (!pack.has_value()) {
    // Created under a temporary name and renamed into place once its header is durable: a
    // crash during creation leaves no half-made pack file (which would never open again), at
    // worst a temporary file that the next creation replaces.
    const std::string temp = paths.pack_temp();
    if (o.env->FileExists(temp)) {
      RANGEKV_RETURN_IF_ERROR(o.env->DeleteFile(temp).WithContext("removing " + temp));
    }
    StoreUuid uuid;
    {
      PackCreateOptions create;
      create.direct = o.direct;
      create.permissions = o.permissions.file;
      auto made = PackFile::Create(o.env, temp, o.geometry, o.ns, o.pack_count, create);
      if (!made.ok()) return made.status().WithContext("creating " + path);
      uuid = made->uuid();
    }  // closed here; reopened under its final name below
    RANGEKV_RETURN_IF_ERROR(o.env->RenameFile(temp, path).WithContext("creating " + path));
    RANGEKV_RETURN_IF_ERROR(o.env->SyncDir(o.dir).WithContext("creating " + path));
    PackExpectation expect;
    expect.store_uuid = uuid;
    expect.geometry = o.geometry;
    expect.namespace_id = o.ns;
    PackOpenOptions open;
    open.direct = o.direct;
    auto opened = PackFile::Open(o.env, path, expect, open);
    if (!opened.ok()) return opened.status().WithContext("opening " + path);
    pack.emplace(std::move(opened).value());
    created = true;
  }

  persist::PersistenceOptions p;
  DirectoryOptions& d = p.directory;
  d = o.directory;
  d.pack_slots = static_cast<uint32_t>(pack->pack_count());
  d.tokens_per_pack = o.geometry.tokens_per_stripe;
  d.pack_bytes = o.geometry.pack_bytes;
  d.capacity_bytes = std::min(o.capacity_bytes, pack->capacity_bytes());
  d.layers = o.geometry.layers;
  // owner_epoch and generation_floor come from the store epoch (OpenIndex).
  p.shutdown_hook = o.shutdown_hook;
  p.digest_block_tokens = o.digest_block_tokens;
  p.file_permissions = o.permissions.file;
  p.journal = o.journal;
  auto index =
      persist::OpenIndex(o.env, o.dir, *pack,
                         created ? persist::PackOrigin::kCreated : persist::PackOrigin::kOpened, p);
  if (!index.ok()) return index.status().WithContext("store " + o.dir);
  if (!o.identity_record.empty()) {
    // Informational (persist/identity_record.h): a failure costs only `rangekv inspect`'s
    // listing of the identity.
    const Status written =
        persist::WriteIdentityRecord(o.env, paths, o.identity_record, o.permissions.file);
    if (!written.ok()) {
      Log(LogLevel::kWarning,
          "store " + o.dir + ": identity record not written: " + written.ToString());
    }
  }
  std::unique_ptr<StoreState> state(new StoreState(
      o.env, o.dir, std::move(*pack), std::move(index).value(), created, std::move(lock).value()));
  state->persistence_->EnableCheckpoints(*state->pack_, *state->directory_, *state->digests_);
  if (o.max_removed_ranges > 0) {
    Directory& dir = *state->directory_;
    state->removals_ = std::make_unique<RemovalLog>(
        dir.options().pack_slots, dir.options().tokens_per_pack, o.max_removed_ranges);
    state->removals_->Seed(dir);
    RANGEKV_RETURN_IF_ERROR(dir.AddObserver(state->removals_.get()));
  }
  RANGEKV_RETURN_IF_ERROR(state->ConnectRemote(o));
  return state;
}

Status StoreState::AwaitDurable(uint64_t reservation_id) const {
  if (service_ != nullptr) return service_->AwaitDurable(reservation_id);
  persist::JournalWriter* j = persistence_->journal();
  return j == nullptr ? OkStatus() : j->AwaitPublished(reservation_id);
}

Status StoreState::Close() {
  if (closed_) return close_status_;
  closed_ = true;
  if (abandoned_) {
    if (publisher_ != nullptr) publisher_->Stop();  // a crash: nothing more is uploaded
    lock_.reset();                                  // as the kernel would for a process that died
    close_status_ = OkStatus();
    return close_status_;
  }
  StopPublisher();
  if (service_ != nullptr) {
    service_->Close();  // Goodbye: the engine drained every owner
    close_status_ = OkStatus();
    return close_status_;
  }
  close_status_ = persistence_->SaveClean(*pack_, *directory_, *digests_);
  lock_.reset();  // nothing of this session writes to the store any more
  if (!close_status_.ok()) {
    Log(LogLevel::kWarning, "store " + dir_ +
                                ": clean shutdown failed (the next open discards "
                                "the index): " +
                                close_status_.ToString());
  }
  return close_status_;
}

}  // namespace rangekv::store
