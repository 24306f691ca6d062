#include "remote/publisher.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/log.h"

namespace rangekv::remote {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr uint64_t kMinPartBytes = 5ull << 20;  // S3's smallest part (all but the last)

std::string ObjectId(const StoreUuid& uuid, uint32_t slot, uint64_t generation) {
  return uuid.ToHex() + "-" + std::to_string(slot) + "-" + std::to_string(generation);
}

}  // namespace

Publisher::Publisher(std::shared_ptr<RemoteClients> clients, const PackFile* pack,
                     persist::DigestTable* digests, Options options)
    : clients_(std::move(clients)),
      pack_(pack),
      digests_(digests),
      options_(std::move(options)),
      geometry_(pack->geometry()) {
  // One part at most: whole stripes of a full pack, at least S3's minimum.
  const uint64_t full_pitch = StripePitch(geometry_.tokens_per_stripe, geometry_.token_bytes);
  const uint64_t per_part =
      std::max<uint64_t>(1, std::max(clients_->options.part_bytes, kMinPartBytes) / full_pitch);
  buffer_bytes_ = std::min<uint64_t>(per_part + 1, geometry_.layers) * full_pitch;
  buffer_ = static_cast<uint8_t*>(std::aligned_alloc(4096, buffer_bytes_));
  throttle_start_ = SteadyClock::now();
  last_check_ = SteadyClock::now() - options_.check_interval;
  thread_ = std::thread([this] { Run(); });
}

Publisher::~Publisher() {
  Stop();
  std::free(buffer_);
}

void Publisher::OnPublished(uint64_t, const NamespaceId& ns, std::span<const int32_t> path,
                            std::span<const PackRecord> packs) {
  if (!(ns == clients_->scope.ns)) return;  // another namespace's store: not ours to publish
  auto shared = std::make_shared<const std::vector<int32_t>>(path.begin(), path.end());
  MutexLock l(mu_);
  for (const PackRecord& p : packs) {
    if (stop_ || queue_.size() >= options_.max_queue) {
      ++stats_.dropped;
      continue;
    }
    queue_.push_back({shared, p});
    ++taken_;
    ++stats_.queued;
  }
  cv_.NotifyAll();
}

bool Publisher::Flush(std::chrono::milliseconds timeout) {
  MutexLock l(mu_);
  const uint64_t target = taken_;
  return cv_.WaitFor(l, timeout, [&]() REQUIRES(mu_) { return done_ >= target || stop_; });
}

void Publisher::Stop() {
  {
    MutexLock l(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    stats_.dropped += queue_.size();
    done_ += queue_.size();
    queue_.clear();
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

PublisherStats Publisher::stats() const {
  MutexLock l(mu_);
  return stats_;
}

void Publisher::SetPointHookForTesting(std::function<void(PublishPoint)> hook) {
  MutexLock l(mu_);
  point_hook_ = std::move(hook);
}

void Publisher::Hook(PublishPoint p) const {
  std::function<void(PublishPoint)> hook;
  {
    MutexLock l(mu_);
    hook = point_hook_;
  }
  if (hook) hook(p);
}

bool Publisher::stopping() const {
  MutexLock l(mu_);
  return stop_;
}

void Publisher::Run() {
  while (true) {
    Job job;
    {
      MutexLock l(mu_);
      cv_.WaitFor(l, options_.check_interval,
                  [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (stop_) return;
      if (!queue_.empty()) {
        job = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (SteadyClock::now() - last_check_ >= options_.check_interval) CheckMarker();
    if (job.path == nullptr) continue;
    Status s = PublishOne(job);
    MutexLock l(mu_);
    if (s.ok()) {
      ++stats_.published;
    } else if (s.code() == StatusCode::kAlreadyExists) {
      ++stats_.deduplicated;
    } else {
      ++stats_.failed;
      Log(LogLevel::kWarning, "cluster tier: publishing pack slot " +
                                  std::to_string(job.pack.pack_slot) + " failed: " + s.ToString());
    }
    ++done_;
    cv_.NotifyAll();
  }
}

Status Publisher::Retry(const std::function<Status()>& call) {
  Status s;
  auto backoff = std::chrono::milliseconds(50);
  for (uint32_t attempt = 0; attempt <= clients_->options.upload_retries; ++attempt) {
    if (stopping()) return Cancelled("publisher stopped");
    s = call();
    if (s.ok() || s.code() != StatusCode::kUnavailable) return s;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  return s;
}

void Publisher::Throttle(uint64_t bytes) {
  const uint64_t cap = clients_->options.upload_bytes_per_s;
  if (cap == 0) return;
  throttle_bytes_ += bytes;
  const auto earliest =
      throttle_start_ + std::chrono::nanoseconds(throttle_bytes_ * 1000000000ull / cap);
  const auto now = SteadyClock::now();
  if (earliest > now) {
    std::this_thread::sleep_for(earliest - now);
  } else if (now - earliest > std::chrono::seconds(1)) {
    // Idle for a while: no credit beyond a second's worth.
    throttle_start_ = now - std::chrono::seconds(1);
    throttle_bytes_ = cap;
  }
}

Status Publisher::ReadLayer(const Job& job, uint32_t layer, const PackManifest& m, uint8_t* out) {
  RANGEKV_ASSIGN_OR_RETURN(const PackLocation loc, pack_->Locate(job.pack.pack_slot));
  File* file = pack_->file_at(loc.file_index);
  if (file == nullptr) return Internal("pack file index " + std::to_string(loc.file_index));
  const uint64_t at = loc.slot_offset + uint64_t{layer} * geometry_.stripe_bytes;
  uint64_t done = 0;
  while (done < m.stripe_pitch) {
    RANGEKV_ASSIGN_OR_RETURN(uint64_t n,
                             file->ReadAt(at + done, out + done, m.stripe_pitch - done));
    if (n == 0) return Status(StatusCode::kShortTransfer, "pack file ended inside a stripe");
    done += n;
  }
  const uint64_t valid = m.stored_tokens * geometry_.token_bytes;
  std::memset(out + valid, 0, m.stripe_pitch - valid);  // the pitch's padding is zeros
  std::vector<uint64_t> computed(m.blocks_per_layer());
  RANGEKV_RETURN_IF_ERROR(
      persist::ComputeLayerDigests(digests_->geometry(), out, m.stored_tokens, computed));
  const uint64_t* recorded = m.digests.data() + uint64_t{layer} * m.blocks_per_layer();
  if (!std::equal(computed.begin(), computed.end(), recorded)) {
    return Status(StatusCode::kStaleGeneration, "pack slot " + std::to_string(job.pack.pack_slot) +
                                                    " layer " + std::to_string(layer) +
                                                    " no longer holds the published bytes");
  }
  return OkStatus();
}

Status Publisher::PublishOne(const Job& job) {
  const RemoteClients& c = *clients_;
  const auto deadline = [&] { return SteadyClock::now() + options_.request_timeout; };
  const PackRecord& p = job.pack;

  // The pack's stored extent: its record's tokens, or, for a block-opaque layout, re-based to
  // block boundaries (pack token 0 = the block boundary at or below the record's first token).
  RANGEKV_ASSIGN_OR_RETURN(const persist::VerifyPlan extent,
                           digests_->PlanVerify(p.pack_slot, p.generation, 0, 1));
  const uint64_t stored = extent.stored_tokens;
  const uint64_t B = geometry_.block_size;
  const uint64_t a = p.path_token_begin, b = p.path_token_end();
  const bool plain_fits = stored == p.tokens;
  const bool opaque_fits = B > 0 && stored == b / B * B - a / B * B;
  bool opaque = false;
  switch (options_.opaque) {
    case Options::Opaque::kNo:
      opaque = false;
      break;
    case Options::Opaque::kYes:
      opaque = true;
      break;
    case Options::Opaque::kUnknown:
      if (plain_fits && opaque_fits && a % B != 0) {
        return FailedPrecondition("pack slot " + std::to_string(p.pack_slot) +
                                  ": its position is ambiguous without the layout; not published");
      }
      opaque = !plain_fits;
      break;
  }
  if (opaque ? !opaque_fits : !plain_fits) {
    return Internal("pack slot " + std::to_string(p.pack_slot) + " stores " +
                    std::to_string(stored) + " tokens, its record " + std::to_string(p.tokens));
  }
  const uint64_t begin = opaque ? a / B * B : a;
  const std::span<const int32_t> run(job.path->data() + begin, stored);

  PackManifest m;
  m.ns = c.scope.ns;
  m.geometry = geometry_;
  m.store_uuid_lo = pack_->uuid().lo;
  m.store_uuid_hi = pack_->uuid().hi;
  m.slot = p.pack_slot;
  m.generation = p.generation;
  m.path_begin = begin;
  m.stored_tokens = stored;
  {
    PathKeys keys(c.scope.ns, *job.path);
    m.parent_key = keys.At(begin);
  }
  RANGEKV_ASSIGN_OR_RETURN(const bool known, c.directory->HasRun(m.parent_key, run, deadline()));
  if (known) return Status(StatusCode::kAlreadyExists, "run already published");

  m.digest_block_tokens = static_cast<uint32_t>(digests_->geometry().block_tokens());
  m.digest_seed = persist::kPayloadDigestSeed;
  LayOutObject(&m, options_.layer_group);
  m.tokens.assign(run.begin(), run.end());
  m.digests.resize(m.blocks_per_layer() * geometry_.layers);
  for (uint32_t l = 0; l < geometry_.layers; ++l) {
    RANGEKV_RETURN_IF_ERROR(digests_->Recorded(
        p.pack_slot, p.generation, l, 0,
        std::span<uint64_t>(m.digests.data() + uint64_t{l} * m.blocks_per_layer(),
                            m.blocks_per_layer())));
  }
  const uint64_t layers_per_part = std::max<uint64_t>(
      1, std::min<uint64_t>(buffer_bytes_ / m.stripe_pitch,
                            (std::max(c.options.part_bytes, kMinPartBytes) + m.stripe_pitch - 1) /
                                m.stripe_pitch));
  m.part_bytes = layers_per_part * m.stripe_pitch;
  m.created_unix_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  const std::string id = ObjectId(pack_->uuid(), p.pack_slot, p.generation);
  const std::string key = c.scope.ObjectKey(id);

  // The object: one PUT, or a multipart upload of whole-stripe parts.
  const uint32_t L = geometry_.layers;
  const uint64_t parts = (L + layers_per_part - 1) / layers_per_part;
  if (parts == 1) {
    for (uint32_t l = 0; l < L; ++l) {
      RANGEKV_RETURN_IF_ERROR(ReadLayer(job, l, m, buffer_ + uint64_t{l} * m.stripe_pitch));
    }
    Throttle(m.object_bytes);
    RANGEKV_RETURN_IF_ERROR(Retry([&] {
      return c.s3->PutObject(c.scope.bucket, key, std::span<const uint8_t>(buffer_, m.object_bytes),
                             deadline());
    }));
    Hook(PublishPoint::kPartsUploaded);
  } else {
    std::string upload_id;
    RANGEKV_RETURN_IF_ERROR(Retry([&]() -> Status {
      auto r = c.s3->CreateMultipartUpload(c.scope.bucket, key, deadline());
      if (!r.ok()) return r.status();
      upload_id = *r;
      return OkStatus();
    }));
    std::vector<std::string> etags;
    Status s = OkStatus();
    for (uint64_t part = 0; part < parts && s.ok(); ++part) {
      const uint32_t first = static_cast<uint32_t>(part * layers_per_part);
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(layers_per_part, L - first));
      for (uint32_t k = 0; k < n && s.ok(); ++k) {
        s = ReadLayer(job, first + k, m, buffer_ + uint64_t{k} * m.stripe_pitch);
      }
      if (!s.ok()) break;
      Throttle(uint64_t{n} * m.stripe_pitch);
      S3Request r;
      r.method = S3Method::kPut;
      r.bucket = c.scope.bucket;
      r.key = key;
      r.query = {{"partNumber", std::to_string(part + 1)}, {"uploadId", upload_id}};
      r.upload = std::span<const uint8_t>(buffer_, uint64_t{n} * m.stripe_pitch);
      s = Retry([&] { return c.s3->Execute(r, deadline()); });
      if (s.ok()) etags.push_back(r.etag);
    }
    if (s.ok()) Hook(PublishPoint::kPartsUploaded);
    if (s.ok()) {
      s = Retry([&] {
        return c.s3->CompleteMultipartUpload(c.scope.bucket, key, upload_id, etags, deadline());
      });
    }
    if (!s.ok()) {
      Status aborted = c.s3->AbortMultipartUpload(c.scope.bucket, key, upload_id, deadline());
      if (!aborted.ok()) {
        Log(LogLevel::kWarning, "cluster tier: aborting an upload: " + aborted.ToString());
      }
      return s;
    }
  }
  Hook(PublishPoint::kObjectComplete);
  const std::vector<uint8_t> manifest = EncodeManifest(m);
  RANGEKV_RETURN_IF_ERROR(Retry([&] {
    return c.s3->PutObject(c.scope.bucket, c.scope.ManifestKey(id), manifest, deadline());
  }));
  Hook(PublishPoint::kManifestStored);
  RunEntry e;
  e.object_id = id;
  e.path_begin = m.path_begin;
  e.object_bytes = m.object_bytes;
  e.stripe_pitch = m.stripe_pitch;
  e.generation = m.generation;
  e.tokens = m.tokens;
  ClusterDirectory::Published published;
  RANGEKV_RETURN_IF_ERROR(Retry([&]() -> Status {
    auto r = c.directory->Publish(m.parent_key, e, deadline());
    if (!r.ok()) return r.status();
    published = *r;
    return OkStatus();
  }));
  {
    MutexLock l(mu_);
    stats_.bytes_uploaded += m.object_bytes + manifest.size();
  }
  if (c.options.capacity_bytes != 0 && published.tenant_bytes > c.options.capacity_bytes) {
    CollectGarbage(c.options.capacity_bytes);
  }
  return OkStatus();
}

void Publisher::CollectGarbage(uint64_t tenant_bytes) {
  const RemoteClients& c = *clients_;
  const auto deadline = SteadyClock::now() + options_.request_timeout;
  auto retired = c.directory->RetireForCapacity(tenant_bytes, deadline);
  if (!retired.ok()) {
    Log(LogLevel::kWarning, "cluster tier: capacity pass: " + retired.status().ToString());
    return;
  }
  auto deletable = c.directory->Deletable(deadline);
  if (!deletable.ok()) return;
  for (const std::string& member : *deletable) {
    const std::string key = c.scope.MemberObjectKey(member);
    if (!c.s3->DeleteObject(c.scope.bucket, key, deadline).ok()) continue;
    if (!c.s3->DeleteObject(c.scope.bucket, key + ".manifest", deadline).ok()) continue;
    if (c.directory->Forget(member, deadline).ok()) {
      MutexLock l(mu_);
      ++stats_.objects_deleted;
    }
  }
}

void Publisher::CheckMarker() {
  last_check_ = SteadyClock::now();
  const auto deadline = SteadyClock::now() + options_.request_timeout;
  auto marker = clients_->directory->HasMarker(deadline);
  if (!marker.ok() || *marker) {
    // Collect what quarantines and earlier passes left, too.
    if (marker.ok()) CollectGarbage(clients_->options.capacity_bytes);
    return;
  }
  auto rebuilt = RebuildDirectory(*clients_, geometry_, deadline);
  if (!rebuilt.ok()) {
    Log(LogLevel::kWarning,
        "cluster tier: rebuilding the directory: " + rebuilt.status().ToString());
    return;
  }
  MutexLock l(mu_);
  ++stats_.rebuilds;
  stats_.rebuilt_runs += *rebuilt;
}

Result<uint64_t> RebuildDirectory(const RemoteClients& c, const Geometry& geometry,
                                  SteadyClock::time_point deadline) {
  uint64_t added = 0;
  std::string token, next;
  do {
    RANGEKV_ASSIGN_OR_RETURN(auto listed, c.s3->ListObjects(c.scope.bucket, c.scope.PacksPrefix(),
                                                            token, &next, deadline));
    for (const auto& o : listed) {
      if (!o.key.ends_with(".manifest")) continue;
      auto bytes = c.s3->GetObject(c.scope.bucket, o.key, 256ull << 20, deadline);
      if (!bytes.ok()) continue;
      auto m = DecodeManifest(*bytes);
      if (!m.ok() || !(m->ns == c.scope.ns) || !(m->geometry == geometry)) {
        Log(LogLevel::kWarning,
            "cluster tier rebuild: skipping " + o.key + ": " +
                (m.ok() ? "another namespace or geometry" : m.status().ToString()));
        continue;
      }
      RunEntry e;
      e.object_id = o.key.substr(c.scope.PacksPrefix().size(),
                                 o.key.size() - c.scope.PacksPrefix().size() - 9);
      e.path_begin = m->path_begin;
      e.object_bytes = m->object_bytes;
      e.stripe_pitch = m->stripe_pitch;
      e.generation = m->generation;
      e.tokens = m->tokens;
      auto r = c.directory->Publish(m->parent_key, e, deadline);
      if (r.ok()) ++added;
    }
    token = next;
  } while (!token.empty());
  RANGEKV_RETURN_IF_ERROR(c.directory->SetMarker(deadline));
  Log(added > 0 ? LogLevel::kWarning : LogLevel::kInfo,
      "cluster tier: directory rebuilt from the bucket's manifests (" + std::to_string(added) +
          " runs)");
  return added;
}

}  // namespace rangekv::remote
