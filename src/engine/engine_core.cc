#include "engine/engine_core.h"

#include "store/service_store.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "base/cpus.h"
#include "base/log.h"
#include "base/units.h"
#include "directory/ticket.h"
#include "engine/options.h"
#include "io/split_probe.h"
#include "persist/identity_record.h"
#include "rangekv/build_info.h"
#include "rangekv/env.h"
#include "remote/publisher.h"

namespace rangekv::engine_internal {

namespace {

Envelope ToDirectoryEnvelope(const RequestEnvelope& e) {
  Envelope out;
  out.request_id = e.request_id;
  out.session = e.session_id;
  out.attempt = e.attempt;
  out.rank = e.rank;
  return out;
}

DeviceKind ToDeviceKind(DeviceSelection s) {
  switch (s) {
    case DeviceSelection::kHost:
      return DeviceKind::kHost;
    case DeviceSelection::kCuda:
      return DeviceKind::kCuda;
    case DeviceSelection::kAuto:
      return DeviceKind::kAuto;
  }
  return DeviceKind::kAuto;
}

}  // namespace

Result<std::shared_ptr<EngineCore>> EngineCore::Open(const EngineOptions& options,
                                                     const EngineInternalConfig& config) {
  std::shared_ptr<EngineCore> core(new EngineCore());
  RANGEKV_RETURN_IF_ERROR(core->Init(options, config));
  return core;
}

EngineCore::~EngineCore() {
  Status s = Close();
  if (!s.ok()) Log(LogLevel::kWarning, "closing engine: " + s.ToString());
}

Result<std::unique_ptr<IoEngine>> EngineCore::MakeIo(uint32_t workers, uint32_t max_queued_batches,
                                                     uint64_t split_bytes,
                                                     const std::string& auto_posix,
                                                     std::string* description) {
  IoEngineOptions io;
  io.workers = std::min<uint32_t>(workers, 256);
  io.max_queued_batches = std::max<uint32_t>(64, max_queued_batches);
  io.split_bytes = split_bytes;
  std::string cufile_why;
  if (options_.io_engine == IoEngineSelection::kCuFile) {
    if (device_->capabilities().kind != DeviceKind::kCuda) {
      cufile_why = "cuFile needs a CUDA device, this engine's is " + device_->capabilities().name;
    } else {
      io.cufile_library = options_.cufile_library;
      auto cufile = MakeIoEngine(IoEngineKind::kCuFile, io);
      if (cufile.ok()) {
        File* files[1] = {store_->file()};
        Status reg = (*cufile)->RegisterFiles(files);
        if (reg.ok()) {
          *description = (*cufile)->Describe();
          Log(LogLevel::kInfo, "io engine: " + *description);
          return cufile;
        }
        cufile_why = reg.message();
      } else {
        cufile_why = cufile.status().message();
      }
    }
    Log(LogLevel::kWarning, "io engine: cufile unavailable, falling back: " + cufile_why);
  }
  const std::string fallback =
      cufile_why.empty() ? std::string() : " (cufile unavailable: " + cufile_why + ")";
  if (options_.io_engine == IoEngineSelection::kAuto && !auto_posix.empty()) {
    *description = "posix (auto: " + auto_posix + ")";
    return MakeIoEngine(IoEngineKind::kPosix, io);
  }
  if (options_.io_engine != IoEngineSelection::kPosix) {
    auto uring = MakeIoEngine(IoEngineKind::kUring, io);
    if (uring.ok()) {
      *description = "uring" + fallback;
      return uring;
    }
    if (options_.io_engine == IoEngineSelection::kUring) return uring.status();
    *description = "posix (uring unavailable: " + uring.status().message() + ")" + fallback;
    Log(LogLevel::kInfo, "io engine: falling back to posix: " + uring.status().ToString());
  } else {
    *description = "posix";
  }
  return MakeIoEngine(IoEngineKind::kPosix, io);
}

std::string EngineCore::ResolveIoSplit(const ReadIoPlan& read_plan, uint64_t* write_split) {
  const uint64_t configured = options_.tuning.io_split_bytes;
  *write_split = 0;
  if (configured == kIoSplitOff) return "off";
  if (configured == kIoSplitFillReads) {
    const std::string threads =
        std::to_string(options_.tuning.read_io_threads) + " read I/O threads";
    const std::string workers = std::to_string(options_.tuning.read_workers) + " read workers";
    if (read_plan.fill_split_bytes == 0) {
      options_.tuning.io_split_bytes = kIoSplitOff;
      return "off (fill_reads: " + threads + ", " + workers + ")";
    }
    options_.tuning.io_split_bytes = read_plan.fill_split_bytes;
    // O_DIRECT writes too: a store has only a few batches' spans in flight (2 per batch with the
    // host device's groups of 2), far fewer than the write engine's threads; 1 MiB pieces took
    // the dev VM's 252 MiB store from 0.89-0.91 to 0.94-0.96 of its best write ceiling
    // (docs/benchmarks.md, 2026-12-05). Buffered writes stay whole (not measured split).
    const bool direct = store_->file()->direct();
    if (direct) *write_split = read_plan.fill_split_bytes;
    return std::to_string(read_plan.fill_split_bytes) + (direct ? " reads and writes" : " reads") +
           " (fill_reads: " + threads + " > " + workers + (direct ? ", O_DIRECT)" : ", buffered)");
  }
  if (configured != kIoSplitAuto) {
    *write_split = configured;
    return std::to_string(configured) + " (configured)";
  }
  options_.tuning.io_split_bytes = kIoSplitOff;
  if (options_.env != DefaultEnv())
    return "off (auto: a caller-supplied env has no medium to probe)";
  SplitProbeOptions po;
  po.spans = std::clamp<uint32_t>(options_.tuning.read_workers, 1, 16);
  IoEngineOptions eo;
  eo.workers = std::min<uint32_t>(options_.tuning.read_io_threads, 256);
  const std::string path = store_->dir() + "/io-probe.tmp";
  const DirectIo direct = store_->file()->direct() ? DirectIo::kPreferred : DirectIo::kOff;
  IoEngineKind kind =
      options_.io_engine == IoEngineSelection::kPosix ? IoEngineKind::kPosix : IoEngineKind::kUring;
  Result<SplitProbeResult> probe = ProbeSplit(options_.env, path, direct, kind, eo, po);
  if (!probe.ok() && kind == IoEngineKind::kUring &&
      probe.status().code() == StatusCode::kNotSupported) {
    Log(LogLevel::kInfo,
        "io split: probing with posix, uring is not usable here: " + probe.status().message());
    kind = IoEngineKind::kPosix;
    probe = ProbeSplit(options_.env, path, direct, kind, eo, po);
  }
  if (!probe.ok()) {
    Log(LogLevel::kWarning,
        "io split: probe failed, spans stay whole: " + probe.status().ToString());
    return "off (auto: probe failed: " + probe.status().message() + ")";
  }
  Log(LogLevel::kInfo,
      "io split probe (" + std::string(IoEngineKindName(kind)) + "): " + probe->summary);
  if (probe->split_bytes == 0) return "off (auto: probe " + probe->summary + ")";
  options_.tuning.io_split_bytes = probe->split_bytes;
  *write_split = probe->split_bytes;
  return std::to_string(probe->split_bytes) + " (auto: probe " + probe->summary + ")";
}

Status EngineCore::Init(const EngineOptions& in, const EngineInternalConfig& config) {
  RANGEKV_ASSIGN_OR_RETURN(geometry_, DeriveGeometry(in.model, in.stripe_bytes));
  hooks_ = config.hooks;
  // The device first: the store shape's auto values depend on its kind.
  if (config.device != nullptr) {
    device_ = config.device;
  } else {
    DeviceOptions d;
    d.kind = ToDeviceKind(in.device);
    d.ordinal = static_cast<int>(in.cuda_device_ordinal);
    RANGEKV_ASSIGN_OR_RETURN(owned_device_, MakeDevice(d));
    device_ = owned_device_.get();
  }
  const DeviceCapabilities& caps = device_->capabilities();
  RANGEKV_ASSIGN_OR_RETURN(
      options_, ResolveOptions(in, geometry_, caps.kind == DeviceKind::kHost, UsableCpus()));
  if (options_.env == nullptr) options_.env = DefaultEnv();

  store::StoreStateOptions so;
  so.env = options_.env;
  so.dir = options_.store_dir;
  so.geometry = geometry_;
  so.ns = DeriveNamespace(options_.model, geometry_);
  RANGEKV_ASSIGN_OR_RETURN(so.pack_count, PackCountForCapacity(options_.capacity_bytes, geometry_));
  so.capacity_bytes = options_.capacity_bytes;
  so.direct = options_.direct_io;
  so.directory = DirectoryOptions::ForGeometry(geometry_, static_cast<uint32_t>(so.pack_count));
  if (options_.tuning.free_reserve_packs == kFreeReserveAuto) {
    options_.tuning.free_reserve_packs =
        AutoFreeReservePacks(options_.durability.mode != Durability::Mode::kNone, so.pack_count);
  }
  so.directory.free_reserve_packs = options_.tuning.free_reserve_packs;
  so.directory.index = options_.tuning.ablations.index == Ablations::Index::kScalar
                           ? IndexMode::kScalar
                           : IndexMode::kTree;
  so.directory.scalar_chunk_tokens = options_.tuning.ablations.object_tokens;
  so.directory.scalar_objects = options_.tuning.ablations.objects == Ablations::Objects::kChunkLayer
                                    ? ScalarObjects::kChunkLayer
                                    : ScalarObjects::kChunk;
  so.directory.max_query_tokens =
      std::max<uint64_t>(so.directory.max_query_tokens, options_.max_request_tokens);
  so.directory.max_tickets =
      std::max<uint32_t>(so.directory.max_tickets, 2 * options_.tuning.max_inflight_restores);
  so.shutdown_hook = config.hooks.shutdown_hook;
  so.digest_block_tokens = config.digest_block_tokens;
  so.permissions = options_.store_access == StoreAccess::kGroup
                       ? persist::StorePermissions::Group()
                       : persist::StorePermissions::Owner();
  switch (options_.durability.mode) {
    case Durability::Mode::kNone:
      so.journal.mode = persist::DurabilityMode::kNone;
      break;
    case Durability::Mode::kPeriodic:
      so.journal.mode = persist::DurabilityMode::kPeriodic;
      break;
    case Durability::Mode::kEveryPublish:
      so.journal.mode = persist::DurabilityMode::kEveryPublish;
      break;
  }
  so.journal.period_ms = options_.durability.period_ms;
  so.journal.checkpoint_interval_ms = options_.durability.checkpoint_interval_ms;
  so.service = options_.store_service;
  so.tenant = options_.tenant;
  so.service_spin_us = options_.tuning.store_service_spin_us;
  so.service_timeout_ms = options_.tuning.store_service_timeout_ms;
  so.read_gate = options_.tuning.read_gate;
  so.max_removed_ranges = options_.tuning.max_removed_ranges;
  so.remote = options_.remote;
  so.block_opaque = IsBlockOpaque(options_.model.layout);
  if (!options_.remote.url.empty() && options_.checksum != ChecksumPolicy::kAlways) {
    return InvalidArgument(
        "the cluster tier (remote.url) needs checksum=always: every remote "
        "byte is verified against its publisher's digests");
  }
  so.on_mismatch = options_.on_store_mismatch;
  so.identity_record = persist::RenderIdentityRecord(options_.model, so.ns);
  RANGEKV_ASSIGN_OR_RETURN(store_, store::StoreState::Open(so));
  {
    const persist::RecoveryReport& r = store_->recovery();
    recovery_.loaded = r.outcome == persist::RecoveryOutcome::kLoaded;
    recovery_.created = store_->created();
    recovery_.reason = recovery_.loaded ? "" : std::string(persist::DiscardReasonName(r.reason));
    recovery_.detail = r.detail;
    recovery_.packs_loaded = r.packs_loaded;
    recovery_.packs_evicted_for_capacity = r.packs_evicted_for_capacity;
    recovery_.store_epoch = r.store_epoch;
    recovery_.journal_replayed = r.journal.used;
    recovery_.journal_ignored = r.journal.ignored;
    recovery_.journal_tail = r.journal.present ? r.journal.tail : "";
    recovery_.journal_records = r.journal.records;
    recovery_.journal_publications_kept = r.journal.publishes_kept;
    recovery_.journal_publications_dropped = r.journal.dropped();
    if (const store::ServiceStore* service = store_->service(); service != nullptr) {
      recovery_.reason = recovery_.loaded ? "" : service->hello().recovery_reason;
      recovery_.detail = "index held by the store service " + options_.store_service;
    }
  }

  const ReadIoPlan read_plan = PlanReadIo(options_, !store_->file()->direct(), UsableCpus());
  options_.tuning.read_io_threads = read_plan.threads;
  uint64_t write_split = 0;
  const std::string split_desc = ResolveIoSplit(read_plan, &write_split);
  const uint64_t read_split =
      options_.tuning.io_split_bytes == kIoSplitOff ? 0 : options_.tuning.io_split_bytes;
  std::string read_desc, write_desc;
  // Reads cut into pieces for more threads than read workers (fill_reads): auto takes a posix
  // thread per piece. Buffered, those threads copying from the page cache are the read's
  // parallelism and beat io_uring's rings (H200 tmpfs: 0.89-0.93 against 0.75-0.80 of the best
  // ceiling, docs/benchmarks.md "read concurrency"); O_DIRECT, posix pieces restored 768 MiB
  // faster than io_uring pieces in four rounds of four on the dev VM (docs/benchmarks.md,
  // 2026-12-04, third session).
  const bool fill_reads =
      read_plan.fill_split_bytes != 0 && read_split == read_plan.fill_split_bytes;
  const char* fill_why = store_->file()->direct()
                             ? "fill_reads: a thread per piece in flight, O_DIRECT"
                             : "fill_reads: threads copying from the page cache";
  RANGEKV_ASSIGN_OR_RETURN(
      read_io_, MakeIo(options_.tuning.read_io_threads, options_.tuning.read_workers, read_split,
                       fill_reads ? fill_why : "", &read_desc));
  RANGEKV_ASSIGN_OR_RETURN(
      write_io_, MakeIo(options_.tuning.write_workers, options_.tuning.store_banks, write_split, "",
                        &write_desc));
  File* files[1] = {store_->file()};
  for (IoEngine* io : {read_io_.get(), write_io_.get()}) {
    Status reg = io->RegisterFiles(files);
    if (!reg.ok()) Log(LogLevel::kInfo, "pack file not registered for I/O: " + reg.ToString());
  }
  // Whether this build has CUDA kernels at all: a host device chosen for want of them reads
  // differently from one chosen for want of a GPU.
  const BuildInfo& build = GetBuildInfo();
  backends_ = "device=" + caps.name + " cuda_kernels=" +
              (build.has_cuda_kernels() ? std::string(build.cuda_kernels) : "none") +
              " io=" + read_desc + " read_io=" + read_plan.why +
              " direct=" + (store_->file()->direct() ? "on" : "off");
  if (write_desc != read_desc) backends_ += " write_io=" + write_desc;
  backends_ += " split=" + split_desc;

  context_.options = &options_;
  context_.geometry = geometry_;
  context_.device = device_;
  context_.store = store_.get();
  context_.read_io = read_io_.get();
  context_.write_io = write_io_.get();
  context_.counters = &counters_;
  context_.integrity = config.integrity != nullptr ? config.integrity : store_->integrity();
  if (store_->remote() != nullptr && context_.integrity != nullptr) {
    remote_ = std::make_unique<RemoteTier>(
        store_->remote(), geometry_, context_.integrity->block_tokens(),
        context_.integrity->digest_seed(),
        options_.tuning.read_bank_bytes != 0 ? options_.tuning.read_bank_bytes
                                             : geometry_.stripe_bytes);
    routing_ = std::make_unique<RoutingIntegrity>(context_.integrity, remote_.get());
    context_.integrity = routing_.get();
    context_.remote = remote_.get();
  }
  context_.hooks = &hooks_;
  context_.staging = !caps.device_memory_host_accessible || config.force_staging;
  // StreamWaitLayer queues a flag wait on the model's stream before the layer's scatters are
  // launched; only where that cannot deadlock (DeviceCapabilities::early_flag_waits).
  context_.stream_memory_ops =
      caps.stream_memory_ops && caps.early_flag_waits && !config.disable_stream_memory_ops;
  RANGEKV_ASSIGN_OR_RETURN(restore_, RestorePipeline::Create(context_));
  RANGEKV_ASSIGN_OR_RETURN(stores_, StorePipeline::Create(context_));
  {
    MutexLock l(share_mu_);
    share_ = {1, options_.tuning.read_workers, options_.tuning.read_io_threads};
  }
  FollowReadGate();
  MutexLock l(mu_);
  RANGEKV_ASSIGN_OR_RETURN(copy_stream_, device_->CreateStream());
  return OkStatus();
}

// ---- scheduler side ---------------------------------------------------------------------------

Result<LookupResult> EngineCore::Lookup(const RequestEnvelope& envelope,
                                        std::span<const int32_t> tokens,
                                        uint64_t reuse_granularity_tokens, uint64_t local_tokens) {
  if (tokens.empty() || tokens.size() > options_.max_request_tokens) {
    return InvalidArgument("lookup of " + std::to_string(tokens.size()) +
                           " tokens: must be in [1, max_request_tokens]");
  }
  if (reuse_granularity_tokens == 0) return InvalidArgument("reuse granularity must be > 0");
  if (IsBlockOpaque(options_.model.layout)) {
    // Hits of whole blocks only: the granularity becomes its least common multiple with B.
    const uint64_t b = geometry_.block_size;
    reuse_granularity_tokens = reuse_granularity_tokens / std::gcd(reuse_granularity_tokens, b) * b;
  }
  {
    MutexLock l(mu_);
    if (closed_) return FailedPrecondition("engine closed");
  }
  RangeIndex& directory = store_->index();
  RANGEKV_ASSIGN_OR_RETURN(
      Ticket ticket,
      directory.Lookup(ns(), tokens, ToDirectoryEnvelope(envelope), reuse_granularity_tokens));
  ShareReads();
  FollowReadGate();
  LookupResult result;
  result.hit_tokens = ticket.hit_tokens;
  result.records_selected = ticket.records.size();
  if (remote_ != nullptr) {
    // The cluster tier, only for what the node does not hold: the largest hit a lookup may
    // give is the prompt less its last token, rounded down to the granularity.
    const uint64_t limit =
        (tokens.size() - 1) / reuse_granularity_tokens * reuse_granularity_tokens;
    if (auto ext = remote_->Lookup(envelope.request_id, tokens, ticket.hit_tokens, limit,
                                   reuse_granularity_tokens)) {
      CompositeTicket ct;
      if (!ticket.empty()) {
        const std::vector<uint8_t> local = EncodeTicket(ticket);
        ct.local.assign(local.begin(), local.end());
      }
      ct.local_hit = ticket.hit_tokens;
      ct.remote_id = ext->ticket_id;
      ct.remote_hit = ext->hit_tokens;
      result.hit_tokens = ext->hit_tokens;
      result.records_selected += ext->runs;
      result.ticket = EncodeCompositeTicket(ct);
      // No lookup-time prefetch for a hit that reaches the cluster tier: its reads start at the
      // claim (docs/scale-out.md).
      return result;
    }
  }
  if (ticket.empty()) return result;
  const std::vector<uint8_t> bytes = EncodeTicket(ticket);
  result.ticket.assign(bytes.begin(), bytes.end());

  if (options_.tuning.ablations.prefetch != Ablations::Prefetch::kLookup ||
      options_.tuning.prefetch_banks == 0) {
    return result;
  }
  // The caller's own cache holds the first local_tokens: prefetch what a claim from there would
  // restore (block-opaque layouts restore whole blocks, so a partial block is read again).
  if (IsBlockOpaque(options_.model.layout)) local_tokens -= local_tokens % geometry_.block_size;
  if (local_tokens >= ticket.hit_tokens) return result;
  MutexLock l(mu_);
  if (closed_ || prefetches_.count(envelope.request_id) != 0) return result;  // repeated lookup
  auto hold = std::make_shared<TicketHold>(&directory, ticket.ticket_id, envelope.request_id,
                                           /*claimed=*/false);
  auto job = restore_->Start(envelope.request_id, {local_tokens, ticket.hit_tokens}, ticket.records,
                             hold, /*claimed=*/false);
  if (!job.ok()) {
    // No slot (or a plan error): no prefetch, and the ticket stays for the claim.
    hold->Disarm();
    return result;
  }
  prefetches_[envelope.request_id] = {std::move(job).value(), std::move(hold)};
  result.prefetch_started = true;
  return result;
}

void EngineCore::ReleaseRequest(const RequestEnvelope& envelope) {
  std::shared_ptr<RestoreJob> job;
  {
    MutexLock l(mu_);
    auto it = prefetches_.find(envelope.request_id);
    if (it != prefetches_.end()) {
      job = std::move(it->second.job);
      prefetches_.erase(it);
    }
  }
  if (job != nullptr) {
    // The hold cancels the ticket once the prefetch's reads drained.
    restore_->Abandon(*job);
    return;
  }
  store_->index().Cancel(envelope.request_id);
  if (remote_ != nullptr) remote_->Cancel(envelope.request_id);
}

// ---- worker side ------------------------------------------------------------------------------

Result<RestoreHandle> EngineCore::StartRestore(const RestoreRequest& r) {
  if (r.endpoint_tokens <= r.begin_token) {
    return InvalidArgument("restore of [" + std::to_string(r.begin_token) + ", " +
                           std::to_string(r.endpoint_tokens) + "): nothing to restore");
  }
  if (r.endpoint_tokens > r.tokens.size()) {
    return InvalidArgument("endpoint beyond the request's tokens");
  }
  if (r.endpoint_tokens - r.begin_token > options_.max_request_tokens) {
    return InvalidArgument("restore larger than max_request_tokens");
  }
  if (IsBlockOpaque(options_.model.layout)) {
    const uint64_t b = geometry_.block_size;
    if (r.begin_token % b != 0 || r.endpoint_tokens % b != 0) {
      return InvalidArgument("restore of [" + std::to_string(r.begin_token) + ", " +
                             std::to_string(r.endpoint_tokens) + "): layout " +
                             std::string(KvCacheLayoutName(options_.model.layout)) +
                             " restores whole blocks only; both ends must be multiples of " +
                             std::to_string(b));
    }
  }
  {
    MutexLock l(mu_);
    if (closed_) return FailedPrecondition("engine closed");
  }
  RangeIndex& directory = store_->index();
  if (auto composite = DecodeCompositeTicket(r.ticket)) {
    RANGEKV_RETURN_IF_ERROR(composite->status());
    return StartCompositeRestore(r, composite->value());
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(r.ticket.data());
  RANGEKV_ASSIGN_OR_RETURN(
      ClaimedRange claim,
      directory.ClaimBytes(ns(), std::span<const uint8_t>(bytes, r.ticket.size()),
                           ToDirectoryEnvelope(r.envelope), r.tokens, r.endpoint_tokens));
  ShareReads();
  FollowReadGate();
  const TokenInterval wanted{r.begin_token, r.endpoint_tokens};

  std::shared_ptr<TicketHold> hold;
  {
    MutexLock l(mu_);
    auto it = prefetches_.find(r.envelope.request_id);
    if (it != prefetches_.end() && it->second.hold->ticket_id() == claim.ticket_id) {
      Prefetch p = std::move(it->second);
      prefetches_.erase(it);
      p.hold->MarkClaimed();
      if (p.job->tokens == wanted) {
        restore_->Adopt(*p.job);
        return RestoreHandle(shared_from_this(), std::move(p.job));
      }
      // Claimed for other tokens (clipped, or a local prefix skipped): the prefetch's reads
      // drain under the shared hold while the new job starts.
      restore_->Abandon(*p.job);
      hold = std::move(p.hold);
    }
  }
  if (hold == nullptr) {
    hold = std::make_shared<TicketHold>(&directory, claim.ticket_id, r.envelope.request_id,
                                        /*claimed=*/true);
  }
  // On failure the hold goes with the error, releasing the claimed ticket.
  RANGEKV_ASSIGN_OR_RETURN(auto job, restore_->Start(r.envelope.request_id, wanted, claim.records,
                                                     std::move(hold), /*claimed=*/true));
  return RestoreHandle(shared_from_this(), std::move(job));
}

Result<RestoreHandle> EngineCore::StartCompositeRestore(const RestoreRequest& r,
                                                        const CompositeTicket& ct) {
  if (remote_ == nullptr) {
    return Status(StatusCode::kCorruptTicket, "a cluster-tier ticket, but no cluster tier here");
  }
  const TokenInterval wanted{r.begin_token, r.endpoint_tokens};
  const std::string& request = r.envelope.request_id;
  // The remote part first (checks only; nothing to undo but its own release), then the local.
  RANGEKV_ASSIGN_OR_RETURN(
      RemoteTier::Claimed remote,
      remote_->Claim(request, ct.remote_id, r.tokens, r.begin_token, r.endpoint_tokens));
  RemoteTier* tier = remote_.get();
  auto release_remote = [tier, request, id = ct.remote_id] { tier->Release(request, id); };
  RangeIndex& directory = store_->index();
  ClaimedRange claim;
  const bool local = !ct.local.empty();
  if (local) {
    auto claimed = directory.ClaimBytes(
        ns(), std::span(reinterpret_cast<const uint8_t*>(ct.local.data()), ct.local.size()),
        ToDirectoryEnvelope(r.envelope), r.tokens, std::min(r.endpoint_tokens, ct.local_hit));
    if (!claimed.ok()) {
      release_remote();
      return claimed.status();
    }
    claim = std::move(claimed).value();
  }
  ShareReads();
  FollowReadGate();
  auto hold = std::make_shared<TicketHold>(&directory, claim.ticket_id, request, /*claimed=*/true);
  hold->SetRemote(release_remote, local);
  std::vector<Span> remote_spans;
  const uint64_t remote_from = std::max(r.begin_token, ct.local_hit);
  if (remote_from < r.endpoint_tokens) {
    RANGEKV_RETURN_IF_ERROR(
        remote_->PlanSpans(remote.records, {remote_from, r.endpoint_tokens}, geometry_.layers,
                           options_.checksum == ChecksumPolicy::kAlways, &remote_spans));
  }
  std::vector<PackRecord> local_records;
  if (r.begin_token < ct.local_hit) local_records = std::move(claim.records);
  RANGEKV_ASSIGN_OR_RETURN(
      auto job, restore_->Start(request, wanted, local_records, std::move(hold), /*claimed=*/true,
                                remote_spans));
  return RestoreHandle(shared_from_this(), std::move(job));
}

RemoteTierStats EngineCore::remote_stats() const {
  RemoteTierStats s;
  if (remote_ != nullptr) s = remote_->stats();
  if (const remote::Publisher* p = store_->publisher()) {
    const remote::PublisherStats ps = p->stats();
    s.enabled = true;
    s.packs_published = ps.published;
    s.packs_deduplicated = ps.deduplicated;
    s.publish_failures = ps.failed;
    s.bytes_uploaded = ps.bytes_uploaded;
    s.objects_deleted = ps.objects_deleted;
    s.directory_rebuilds = ps.rebuilds;
  }
  return s;
}

Result<StoreHandle> EngineCore::BeginStore(const StoreRequest& r) {
  if (r.kv == nullptr) return InvalidArgument("store request without paged KV");
  {
    MutexLock l(mu_);
    if (closed_) return FailedPrecondition("engine closed");
  }
  RANGEKV_ASSIGN_OR_RETURN(auto job, stores_->Begin(r.tokens, *r.kv, r.slot_mapping));
  return StoreHandle(shared_from_this(), std::move(job));
}

// ---- caller streams and memory ----------------------------------------------------------------

Result<DeviceStreamRef> EngineCore::CreateStream() {
  MutexLock l(mu_);
  if (closed_) return FailedPrecondition("engine closed");
  if (caller_streams_.size() >= kMaxCallerStreams) {
    return ResourceExhausted("at most " + std::to_string(kMaxCallerStreams) + " caller streams");
  }
  RANGEKV_ASSIGN_OR_RETURN(auto stream, device_->CreateStream());
  caller_streams_.push_back(std::move(stream));
  return DeviceStreamRef{caller_streams_.back().get()};
}

Result<DeviceStreamRef> EngineCore::WrapNativeStream(void* native_stream) {
  MutexLock l(mu_);
  if (closed_) return FailedPrecondition("engine closed");
  if (caller_streams_.size() >= kMaxCallerStreams) {
    return ResourceExhausted("at most " + std::to_string(kMaxCallerStreams) + " caller streams");
  }
  RANGEKV_ASSIGN_OR_RETURN(auto stream, device_->WrapNativeStream(native_stream));
  caller_streams_.push_back(std::move(stream));
  return DeviceStreamRef{caller_streams_.back().get()};
}

Result<Stream*> EngineCore::FindStream(DeviceStreamRef ref) const {
  MutexLock l(mu_);
  for (const auto& s : caller_streams_) {
    if (s.get() == ref.native) return s.get();
  }
  return InvalidArgument("stream was not created by this engine (Engine::CreateStream)");
}

Result<void*> EngineCore::AllocateDeviceMemory(uint64_t bytes) {
  MutexLock l(mu_);
  if (closed_) return FailedPrecondition("engine closed");
  if (caller_buffers_.size() >= kMaxCallerBuffers) {
    return ResourceExhausted("too many caller buffers");
  }
  RANGEKV_ASSIGN_OR_RETURN(DeviceBuffer buffer, device_->AllocateDevice(bytes));
  caller_buffers_.push_back(std::move(buffer));
  return caller_buffers_.back().data();
}

Status EngineCore::CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) {
  MutexLock l(mu_);
  if (copy_stream_ == nullptr) return FailedPrecondition("engine closed");
  RANGEKV_RETURN_IF_ERROR(copy_stream_->CopyHostToDevice(device_dst, host_src, bytes));
  return copy_stream_->Synchronize();
}

Status EngineCore::CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) {
  MutexLock l(mu_);
  if (copy_stream_ == nullptr) return FailedPrecondition("engine closed");
  RANGEKV_RETURN_IF_ERROR(copy_stream_->CopyDeviceToHost(host_dst, device_src, bytes));
  return copy_stream_->Synchronize();
}

// ---- stats and shutdown -----------------------------------------------------------------------

std::vector<RemovedRange> EngineCore::DrainRemovedRanges(size_t max) const {
  if (store_ == nullptr || store_->removals() == nullptr) return {};
  return store_->removals()->Drain(max);
}

void EngineCore::ShareReads() {
  const store::ServiceStore* service = store_->service();
  if (service == nullptr || !options_.tuning.share_reads) return;
  MutexLock l(share_mu_);
  const uint32_t readers = service->readers();  // under the lock: the newest value wins
  if (readers == share_.readers) return;
  share_.readers = readers;
  share_.read_workers = restore_->SetReadShare(readers);
  // The I/O engine's cap counts spans or pieces in flight: its threads (posix, cuFile), or its
  // rings x queue depth (io_uring). One engine alone keeps no cap beyond its own.
  const uint32_t threads = options_.tuning.read_io_threads;
  const uint32_t slots = read_io_->caps().max_inflight_spans;
  const uint32_t cap = std::max<uint32_t>((slots + readers - 1) / readers, 1);
  read_io_->SetConcurrencyLimit(readers == 1 ? 0 : cap);
  share_.read_io_threads = readers == 1 ? threads : cap;
  Log(LogLevel::kDebug, "read share: " + std::to_string(readers) +
                            " sessions reading the store service's node; this engine keeps " +
                            std::to_string(share_.read_workers) + " of " +
                            std::to_string(options_.tuning.read_workers) + " stripe reads and " +
                            std::to_string(share_.read_io_threads) + " of " +
                            std::to_string(threads) + " read I/O pieces in flight");
}

void EngineCore::FollowReadGate() {
  const store::ServiceStore* service = store_->service();
  if (service == nullptr || !options_.tuning.read_gate) return;
  MutexLock l(share_mu_);
  const uint64_t generation = service->read_gate_generation();
  if (generation == gate_generation_) return;  // the common case: one load, no change
  gate_generation_ = generation;
  gate_ = service->read_gate();  // a new session's gate, or null without one
  const bool gated = read_io_->SetReadGate(gate_);
  share_.gate_slots = gated && gate_ != nullptr ? gate_->slots() : 0;
  if (gate_ != nullptr && !gated && !gate_ignored_logged_) {
    gate_ignored_logged_ = true;  // once per engine, not once per session; io_uring was chosen
    Log(LogLevel::kInfo, "read gate: the " + std::string(read_io_->name()) +
                             " engine does not gate its reads (posix and cuFile do)");
  }
}

Engine::ReadShare EngineCore::read_share() const {
  MutexLock l(share_mu_);
  Engine::ReadShare r = share_;
  if (gate_ != nullptr && r.gate_slots != 0) {
    const service::SharedReadGate::Counts c = gate_->counts();
    r.gate_passes = c.entered;
    r.gate_waited = c.waited;
    r.gate_timed_out = c.timed_out;
  }
  return r;
}

EngineStats EngineCore::GetStats() const {
  EngineStats s = counters_.Snapshot();
  if (store_ != nullptr) {
    // Index work happens in the directory; its own counters are the source.
    const DirectoryStats d = store_->index().Stats();
    s.lookups = d.lookups;
    s.records_selected = d.records_selected;
    s.leases_taken = d.leases_taken;
    if (const persist::JournalWriter* j = store_->journal(); j != nullptr) {
      const persist::JournalStats js = j->stats();
      s.journal_commits = js.commits;
      s.journal_records = js.records;
      s.journal_durable_publications = js.durable_publications;
      s.journal_checkpoints = js.checkpoints;
      s.journal_failures = js.failures;
      s.journal_wait_ns = js.wait_ns;
    }
    if (const RemovalLog* r = store_->removals(); r != nullptr) {
      s.removed_events_dropped = r->dropped();
    }
  }
  if (read_io_ != nullptr) s.native_read_calls = read_io_->stats().native_ops;
  if (write_io_ != nullptr) s.native_write_calls = write_io_->stats().native_ops;
  return s;
}

Status EngineCore::Close() {
  MutexLock close(close_mu_);
  if (close_done_) return close_status_;
  close_done_ = true;
  std::map<std::string, Prefetch> prefetches;
  {
    MutexLock l(mu_);
    closed_ = true;
    prefetches.swap(prefetches_);
  }
  if (restore_ != nullptr) {
    for (auto& [id, p] : prefetches) restore_->Abandon(*p.job);
    prefetches.clear();
    restore_->Stop();
  }
  if (stores_ != nullptr) stores_->Stop();
  // The banks die with the pipelines, before the I/O engines: unregister them now.
  for (IoEngine* io : {read_io_.get(), write_io_.get()}) {
    if (io != nullptr) (void)io->RegisterBuffers({});
  }
  {
    MutexLock l(mu_);
    for (auto& s : caller_streams_) {
      Status st = s->Synchronize();
      if (!st.ok()) Log(LogLevel::kWarning, "caller stream: " + st.ToString());
    }
  }
  // Every owner drained: the clean shutdown may describe the store now.
  close_status_ = store_ != nullptr ? store_->Close() : OkStatus();
  return close_status_;
}

std::unique_ptr<Engine> EngineAccess::Wrap(std::shared_ptr<EngineCore> core) {
  return std::unique_ptr<Engine>(new Engine(std::move(core)));
}

}  // namespace rangekv::engine_internal
