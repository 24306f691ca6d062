#include "engine/store_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "base/units.h"
#include "engine/paged_views.h"

namespace rangekv::engine_internal {

StorePipeline::StorePipeline(const EngineContext& context)
    : context_(context),
      layers_(context.geometry.layers),
      jobs_(context_, context.options->tuning.store_banks, 0, "store", "max_inflight_stores",
            nullptr) {}

StorePipeline::~StorePipeline() { Stop(); }

Result<std::unique_ptr<StorePipeline>> StorePipeline::Create(const EngineContext& context) {
  std::unique_ptr<StorePipeline> p(new StorePipeline(context));
  RANGEKV_RETURN_IF_ERROR(p->Init());
  return p;
}

Status StorePipeline::Init() {
  const EngineOptions& o = *context_.options;
  Device& dev = *context_.device;
  banks_.resize(o.tuning.store_banks);
  std::vector<BankMemory*> memory;
  for (Bank& b : banks_) {
    memory.push_back(&b);
    if (context_.integrity != nullptr) {
      // A batch's spans hold at most bank_bytes of tokens, and each span adds at most one
      // partial block.
      const uint64_t d = context_.integrity->block_tokens();
      if (d == 0 || d > context_.geometry.tokens_per_stripe) {
        return Internal("digest block of " + std::to_string(d) + " tokens outside [1, T]");
      }
      b.digest_capacity = o.tuning.store_bank_bytes / (d * context_.geometry.token_bytes) +
                          uint64_t{o.tuning.layer_group} * kMaxBatchRecords;
      RANGEKV_ASSIGN_OR_RETURN(b.digests, dev.AllocateDevice(b.digest_capacity * sizeof(uint64_t)));
      RANGEKV_ASSIGN_OR_RETURN(b.digests_host,
                               dev.AllocatePinnedHost(b.digest_capacity * sizeof(uint64_t)));
    }
    b.batch = std::make_unique<IoBatch>(o.tuning.layer_group * kMaxBatchRecords);
    const uint32_t index = static_cast<uint32_t>(&b - banks_.data());
    b.batch->SetCallback([this, index](IoBatch&) { OnWritesDone(index); });
  }
  RANGEKV_RETURN_IF_ERROR(
      AllocateBankMemory(context_, o.tuning.store_bank_bytes, *context_.write_io, memory, "store"));

  const uint64_t max_records = (o.max_request_tokens + context_.geometry.tokens_per_stripe - 1) /
                               context_.geometry.tokens_per_stripe;
  for (uint32_t i = 0; i < o.tuning.max_inflight_stores; ++i) {
    auto slot = std::make_unique<StoreSlot>();
    slot->index = i;
    for (uint32_t l = 0; l < layers_; ++l) {
      RANGEKV_ASSIGN_OR_RETURN(auto event, dev.CreateEvent());
      slot->produced.push_back(std::move(event));
    }
    RANGEKV_RETURN_IF_ERROR(slot->mapping.Allocate(dev, o.max_request_tokens));
    slot->spans.reserve(max_records * layers_);
    slot->views.resize(layers_);
    slots_.push_back(std::move(slot));
  }
  RANGEKV_ASSIGN_OR_RETURN(upload_stream_, dev.CreateStream());
  workers_.resize(o.tuning.group_workers);
  for (Worker& w : workers_) {
    RANGEKV_ASSIGN_OR_RETURN(w.stream, dev.CreateStream());
    RANGEKV_ASSIGN_OR_RETURN(w.done, dev.CreateEvent());
  }
  {
    MutexLock l(mu_);
    jobs_.Init(slots_);
    bank_owner_.resize(banks_.size());
  }
  for (uint32_t i = 0; i < workers_.size(); ++i) {
    workers_[i].thread = std::thread([this, i] { GroupWorker(i); });
  }
  return OkStatus();
}

// ---- begin --------------------------------------------------------------------------------

Status StorePipeline::PlanBatches(StoreJob& job, StoreSlot& slot) {
  const Geometry& g = context_.geometry;
  const uint64_t bank_bytes = context_.options->tuning.store_bank_bytes;
  const uint32_t lg = context_.options->tuning.layer_group;
  SpanPlanOptions plan_options;
  plan_options.bank_bytes = bank_bytes;
  plan_options.io_alignment_bytes = kIoAlignment;
  std::vector<Span> planned;
  planned.reserve(size_t{lg} * kMaxBatchRecords);
  slot.spans.clear();
  job.batches.clear();
  const uint32_t records = static_cast<uint32_t>(job.records.size());
  for (uint32_t group = 0; group * lg < layers_; ++group) {
    const uint32_t lb = group * lg;
    const uint32_t le = std::min(layers_, lb + lg);
    uint32_t r = 0;
    while (r < records) {
      // The largest chunk of records whose spans fit one bank (the options guarantee that one
      // record of up to T tokens always does).
      uint32_t end = r;
      uint64_t bytes = 0;
      while (end < records && end - r < kMaxBatchRecords) {
        const uint64_t rec =
            AlignUp(job.records[end].tokens * g.token_bytes, kIoAlignment) * (le - lb);
        if (bytes + rec > bank_bytes) break;
        bytes += rec;
        ++end;
      }
      if (end == r) return Internal("a record does not fit an empty store bank");
      RANGEKV_RETURN_IF_ERROR(PlanWriteSpans(
          context_.store->layout(), std::span<const PackRecord>(job.records.data() + r, end - r),
          {lb, le}, context_.store->generations(), plan_options, &planned));
      StoreBatch batch;
      batch.group = group;
      batch.layer_begin = lb;
      batch.layer_end = le;
      batch.record_begin = r;
      batch.record_end = end;
      batch.span_begin = static_cast<uint32_t>(slot.spans.size());
      slot.spans.insert(slot.spans.end(), planned.begin(), planned.end());
      batch.span_end = static_cast<uint32_t>(slot.spans.size());
      batch.bank_bytes = planned.back().bank_offset_bytes + planned.back().length_bytes;
      batch.layer_stride_bytes = batch.bank_bytes / (le - lb);
      job.batches.push_back(batch);
      r = end;
    }
  }
  return OkStatus();
}

Status StorePipeline::Configure(StoreJob& job, Reservation& reservation) {
  job.reservation_id = reservation.reservation_id;
  job.stored = {reservation.begin_tokens, reservation.end_tokens};
  job.packs.clear();
  for (const PackRecord& r : reservation.records) {
    job.packs.push_back({{r.pack_slot, r.generation}, {r.path_token_begin, r.path_token_end()}});
  }
  job.records = std::move(reservation.records);
  if (IsBlockOpaque(context_.options->model.layout)) {
    // Whole blocks only: a pack starting mid-block re-stores that block from its boundary.
    job.records = BlockAlignedRecords(job.records, context_.geometry.block_size);
  }
  Status planned = PlanBatches(job, *job.slot);
  if (!planned.ok()) {
    Status aborted = context_.store->index().Abort(job.reservation_id);
    if (!aborted.ok()) Log(LogLevel::kWarning, "aborting reservation: " + aborted.ToString());
    return planned;
  }
  std::vector<uint32_t> group_of_batch;
  group_of_batch.reserve(job.batches.size());
  for (const StoreBatch& b : job.batches) group_of_batch.push_back(b.group);
  StoreJobState& st = job.state.Locked(mu_);
  st.progress.Reset(layers_, context_.options->tuning.layer_group, group_of_batch);
  for (uint32_t l = 0; l < layers_; ++l) {
    if (st.produced[l]) st.progress.Produce(l);
  }
  st.bank_of_batch.assign(job.batches.size(), kNoBank);
  Count(&job, &Counters::stores_begun);
  return OkStatus();
}

Result<std::shared_ptr<StoreJob>> StorePipeline::Begin(std::span<const int32_t> tokens,
                                                       const PagedKv& kv,
                                                       std::span<const int64_t> slot_mapping) {
  const EngineOptions& o = *context_.options;
  if (tokens.empty() || tokens.size() > o.max_request_tokens) {
    return InvalidArgument("store of " + std::to_string(tokens.size()) +
                           " tokens: must be in [1, max_request_tokens]");
  }
  if (slot_mapping.size() != tokens.size()) {
    return InvalidArgument("slot mapping has " + std::to_string(slot_mapping.size()) +
                           " entries for " + std::to_string(tokens.size()) + " tokens");
  }
  std::vector<kernels::PagedKvView> views;
  const KvCacheLayout layout = context_.options->model.layout;
  RANGEKV_RETURN_IF_ERROR(MakeLayerViews(context_.geometry, layout, kv, &views));
  RANGEKV_RETURN_IF_ERROR(ValidateMapping(views[0], slot_mapping, kernels::SlotUse::kGatherSource));
  if (IsBlockOpaque(layout)) {
    // Only whole blocks are stored: the partial last block is clipped off (layout.h).
    const uint64_t b = context_.geometry.block_size;
    if (tokens.size() < b) {
      return InvalidArgument("store of " + std::to_string(tokens.size()) + " tokens: layout " +
                             std::string(KvCacheLayoutName(layout)) + " stores whole blocks of " +
                             std::to_string(b) + " tokens only");
    }
    tokens = tokens.first(tokens.size() - tokens.size() % b);
    slot_mapping = slot_mapping.first(tokens.size());
  }

  StoreSlot* slot = nullptr;
  uint64_t id = 0;
  {
    MutexLock l(mu_);
    RANGEKV_ASSIGN_OR_RETURN(const auto admitted, jobs_.Admit());
    slot = admitted.slot;
    id = admitted.job_id;
  }
  auto give_back = [&] {
    MutexLock l(mu_);
    jobs_.GiveBack(slot);
  };
  auto job = std::make_shared<StoreJob>(&mu_, id);
  auto reservation = context_.store->index().Reserve(context_.store->ns(), tokens);
  if (!reservation.ok()) {
    give_back();
    return reservation.status();
  }
  const bool joined = reservation->outcome == ReserveOutcome::kJoined;
  if (reservation->outcome == ReserveOutcome::kAlreadyStored ||
      (joined && reservation->end_tokens >= tokens.size())) {
    // Everything is visible, or an in-flight store writes all of what is not: no I/O here.
    give_back();
    job->disposition = joined ? StoreDisposition::kJoined : StoreDisposition::kAlreadyCached;
    job->reservation_id = reservation->reservation_id;
    MutexLock l(mu_);
    job->state.Locked(mu_).settled = true;
    Count(job.get(), joined ? &Counters::stores_joined : &Counters::stores_cached);
    return job;
  }
  job->disposition = StoreDisposition::kStoring;
  job->slot = slot;
  job->tokens.assign(tokens.begin(), tokens.end());
  std::copy(views.begin(), views.end(), slot->views.begin());
  // The whole mapping goes up (gathers index it by path position); gathers wait for its
  // upload event (SlotMapping::uploaded) on their own streams.
  Status up = slot->mapping.Upload(slot_mapping, *upload_stream_);
  if (!up.ok()) {
    // The copy may be enqueued: let the upload stream finish before the staging is reused.
    Status synced = upload_stream_->Synchronize();
    synced.IgnoreError();
    if (!joined) {
      Status aborted = context_.store->index().Abort(reservation->reservation_id);
      if (!aborted.ok()) Log(LogLevel::kWarning, "aborting reservation: " + aborted.ToString());
    }
    give_back();
    return up;
  }
  MutexLock l(mu_);
  StoreJobState& st = job->state.Locked(mu_);
  st.produced.assign(layers_, 0);
  st.produced_event.assign(layers_, 0);
  if (joined) {
    // Another store is writing the tokens before ours: wait (without blocking the caller) for it
    // to settle, then reserve the rest. Until then the job holds the source slots.
    st.deferred = true;
    st.joined_id = reservation->reservation_id;
    st.progress.Reset(layers_, o.tuning.layer_group, {});
    Count(job.get(), &Counters::stores_joined);
  } else {
    Status configured = Configure(*job, *reservation);
    if (!configured.ok()) {
      jobs_.GiveBack(slot);
      return configured;
    }
  }
  jobs_.Activate(job);
  if (st.deferred) RetryDeferred();  // the joined store may have settled meanwhile
  FailUnservable();                  // no bank left: the store fails (and settles) at once
  return job;
}

void StorePipeline::RetryDeferred() {
  RangeIndex& directory = context_.store->index();
  const auto& active = jobs_.active();
  for (size_t i = 0; i < active.size(); ++i) {
    StoreJob& job = *active[i];
    StoreJobState& st = job.state.Locked(mu_);
    if (!st.deferred || !st.first_error.ok() || directory.IsInFlight(st.joined_id)) continue;
    auto reservation = directory.Reserve(context_.store->ns(), job.tokens);
    if (!reservation.ok()) {
      Fail(job, reservation.status());
      st.deferred = false;
      FinishUnreserved(job);
      --i;  // FinishUnreserved removed it from the active jobs
      continue;
    }
    if (reservation->outcome == ReserveOutcome::kJoined &&
        reservation->end_tokens < job.tokens.size()) {
      st.joined_id = reservation->reservation_id;  // still behind another store
      continue;
    }
    st.deferred = false;
    if (reservation->outcome != ReserveOutcome::kReserved) {
      // The joined stores wrote everything: visible without our I/O.
      st.visible = reservation->outcome == ReserveOutcome::kAlreadyStored;
      FinishUnreserved(job);
      --i;
      continue;
    }
    Status configured = Configure(job, *reservation);
    if (!configured.ok()) {
      Fail(job, configured);
      FinishUnreserved(job);
      --i;
      continue;
    }
    AfterProgress(job);
  }
  work_cv_.NotifyAll();
}

void StorePipeline::FailUnservable() {
  if (jobs_.usable_banks() != 0) return;
  const Status none = DeviceFault("every store bank is quarantined (unproven device work)");
  // AfterProgress may settle jobs (and, through RetryDeferred, others): start over after each.
  for (bool again = true; again;) {
    again = false;
    for (const std::shared_ptr<StoreJob>& job : jobs_.active()) {
      if (!job->state.Locked(mu_).first_error.ok()) continue;
      const std::shared_ptr<StoreJob> keep = job;
      Fail(*keep, none);
      AfterProgress(*keep);
      again = true;
      break;
    }
  }
}

void StorePipeline::FinishUnreserved(StoreJob& job) {
  // Nothing was reserved for this job: nothing to publish or abort in the directory.
  StoreJobState& st = job.state.Locked(mu_);
  if (!st.first_error.ok()) Count(&job, &Counters::stores_aborted);
  st.extraction_signalled = true;
  Settle(job);
}

void StorePipeline::Settle(StoreJob& job) {
  StoreJobState& st = job.state.Locked(mu_);
  st.settled = true;
  jobs_.Deactivate(job);
  jobs_.ReturnSlot(job, st);
  job_cv_.NotifyAll();
}

// ---- caller-side operations ------------------------------------------------------------------

Status StorePipeline::LayerProduced(StoreJob& job, uint32_t layer, Stream* producer) {
  if (layer >= layers_) return InvalidArgument("layer " + std::to_string(layer) + " >= L");
  MutexLock l(mu_);
  StoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done) return FailedPrecondition("store already finished");
  if (job.slot == nullptr || st.settled) return OkStatus();  // nothing of ours to gather
  if (st.produced[layer]) return OkStatus();
  if (producer != nullptr) {
    // Captures the producer's work so far; the gather's stream waits on it, the host does not.
    RANGEKV_RETURN_IF_ERROR(producer->Record(*job.slot->produced[layer]));
    st.produced_event[layer] = 1;
  }
  st.produced[layer] = 1;
  st.progress.Produce(layer);
  work_cv_.NotifyAll();
  return OkStatus();
}

bool StorePipeline::Extracted(const StoreJob& job) const {
  MutexLock l(mu_);
  const StoreJobState& st = job.state.Locked(mu_);
  return job.slot == nullptr || st.settled || (!st.deferred && st.progress.extraction_done());
}

TokenInterval StorePipeline::Stored(const StoreJob& job) const {
  MutexLock l(mu_);
  return job.stored;
}

Status StorePipeline::WaitExtracted(StoreJob& job,
                                    std::optional<std::chrono::milliseconds> timeout) {
  MutexLock l(mu_);
  if (job.slot == nullptr) return OkStatus();
  const StoreJobState& st = job.state.Locked(mu_);
  auto done = [&]() REQUIRES(mu_) {
    return st.settled || (!st.deferred && st.progress.extraction_done());
  };
  if (!timeout) {
    job_cv_.Wait(l, done);
  } else if (!job_cv_.WaitFor(l, *timeout, done)) {
    return Status(StatusCode::kDeadlineExceeded,
                  "store not extracted within " + std::to_string(timeout->count()) + " ms");
  }
  return st.first_error;
}

StoreOutcome StorePipeline::Finish(StoreJob& job, StoreWait wait) {
  StoreOutcome out;
  MutexLock l(mu_);
  StoreJobState& st = job.state.Locked(mu_);
  out.disposition = job.disposition;
  out.stored = job.stored;
  out.packs = job.packs;
  if (st.handle_done) {
    out.status = FailedPrecondition("store already finished, or the engine closed");
    return out;
  }
  if (job.slot != nullptr) {
    if (std::count(st.produced.begin(), st.produced.end(), 1) != layers_) {
      Fail(job, FailedPrecondition("store finished before every layer was produced"));
    }
    AfterProgress(job);
    if (wait == StoreWait::kUntilVisible) {
      job_cv_.Wait(l, [&]() REQUIRES(mu_) { return st.settled; });
    } else {
      job_cv_.Wait(l, [&]() REQUIRES(mu_) {
        return st.settled || (!st.deferred && st.progress.extraction_done());
      });
    }
  }
  out.status = st.first_error;
  out.visible = st.visible;
  out.work = job.counters.Snapshot();
  st.handle_done = true;
  jobs_.ReturnSlot(job, st);
  return out;
}

void StorePipeline::Abandon(StoreJob& job) {
  MutexLock l(mu_);
  StoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done) return;
  if (job.slot != nullptr && !st.settled) {
    Fail(job, Cancelled("store handle dropped before Finish"));
    AfterProgress(job);
  }
  st.handle_done = true;
  jobs_.ReturnSlot(job, st);
}

// ---- progress -----------------------------------------------------------------------------

void StorePipeline::Fail(StoreJob& job, const Status& status) {
  StoreJobState& st = job.state.Locked(mu_);
  if (st.first_error.ok()) st.first_error = status;
}

void StorePipeline::AfterProgress(StoreJob& job) {
  StoreJobState& st = job.state.Locked(mu_);
  if (st.deferred) {
    // Nothing reserved yet: a failure (unproduced layers, an abandoned handle) just ends it.
    if (!st.first_error.ok()) {
      st.deferred = false;
      FinishUnreserved(job);
    }
    work_cv_.NotifyAll();
    return;
  }
  // A failed store starts no more gathers: nothing of it can become visible anyway.
  if (!st.first_error.ok()) st.progress.SkipWaiting();
  if (!st.extraction_signalled && st.progress.extraction_done()) {
    st.extraction_signalled = true;
    job_cv_.NotifyAll();
  }
  if (!st.settled && st.progress.settled()) {
    RangeIndex& directory = context_.store->index();
    if (st.progress.succeeded() && st.first_error.ok() && context_.integrity != nullptr) {
      Fail(job, context_.integrity->BeforePublish(job.reservation_id, job.records));
    }
    if (st.progress.succeeded() && st.first_error.ok()) {
      if (context_.hooks && context_.hooks->store_point) {
        context_.hooks->store_point(StorePoint::kBeforePublish, job.reservation_id);
      }
      Status published = directory.Publish(job.reservation_id);
      if (published.ok()) {
        st.visible = true;
        Count(&job, &Counters::stores_published);
        if (context_.hooks && context_.hooks->store_point) {
          context_.hooks->store_point(StorePoint::kPublished, job.reservation_id);
        }
      } else {
        Fail(job, published);
        Count(&job, &Counters::stores_aborted);
      }
    } else {
      // Every accepted write has returned: reclaiming the packs is safe now.
      if (context_.integrity != nullptr) {
        context_.integrity->OnStoreAborted(job.reservation_id, job.records);
      }
      Status aborted = directory.Abort(job.reservation_id);
      if (!aborted.ok()) Log(LogLevel::kWarning, "aborting reservation: " + aborted.ToString());
      if (st.first_error.ok()) st.first_error = Internal("store failed without a status");
      Count(&job, &Counters::stores_aborted);
    }
    Settle(job);
    // A reservation settled: stores that joined it may reserve the rest now.
    RetryDeferred();
  }
  work_cv_.NotifyAll();
}

// ---- group workers and writes ---------------------------------------------------------------

Status StorePipeline::Gather(StoreJob& job, const StoreBatch& batch, uint32_t produced_events,
                             Bank& bank, Worker& worker) {
  StoreSlot& slot = *job.slot;
  Stream& stream = *worker.stream;
  for (uint32_t l = batch.layer_begin; l < batch.layer_end; ++l) {
    // The production event of layer l was recorded before the batch became eligible; it is
    // not recorded again while the job lives.
    if (produced_events & (1u << (l - batch.layer_begin))) {
      RANGEKV_RETURN_IF_ERROR(stream.WaitEvent(*slot.produced[l]));
    }
  }
  RANGEKV_RETURN_IF_ERROR(stream.WaitEvent(*slot.mapping.uploaded));

  const uint64_t s = context_.geometry.token_bytes;
  const int64_t* mapping = slot.mapping.slots();
  kernels::GatherArgs args;
  args.num_layers = batch.layer_end - batch.layer_begin;
  for (uint32_t g = 0; g < args.num_layers; ++g) args.src[g] = slot.views[batch.layer_begin + g];
  args.out_layer_stride_bytes = batch.layer_stride_bytes;
  // Rows of consecutive records are contiguous in the bank unless a record's valid bytes end
  // mid-page (its span carries padding): then each record is its own launch.
  bool contiguous = true;
  for (uint32_t r = batch.record_begin; r + 1 < batch.record_end; ++r) {
    if (job.records[r].tokens * s % kIoAlignment != 0) contiguous = false;
  }
  // With one gather launch whose digest blocks fit one digest launch, the two go as one
  // Stream::GatherDigest (HostDevice then digests the rows as it writes them; the launches
  // counted are the same two).
  const bool fuse = contiguous && context_.integrity != nullptr &&
                    DigestBlocks(job, batch) <= kernels::kMaxDigestSpans;
  const Span* layer0 = slot.spans.data() + batch.span_begin;  // first layer's spans, in order
  uint32_t launches = 0;
  for (uint32_t r = batch.record_begin; r < batch.record_end;) {
    uint32_t end = contiguous ? batch.record_end : r + 1;
    uint64_t tokens = 0;
    for (uint32_t k = r; k < end; ++k) tokens += job.records[k].tokens;
    args.slots = mapping + job.records[r].path_token_begin;
    args.num_tokens = static_cast<uint32_t>(tokens);
    args.out = bank.device.bytes() + layer0[r - batch.record_begin].bank_offset_bytes;
    if (!fuse) RANGEKV_RETURN_IF_ERROR(stream.Gather(args));
    ++launches;
    r = end;
  }
  Count(&job, &Counters::gather_launches, launches);
  if (context_.integrity != nullptr)
    RANGEKV_RETURN_IF_ERROR(EnqueueDigests(job, batch, bank, stream, fuse ? &args : nullptr));
  if (!bank.staging.empty()) {
    RANGEKV_RETURN_IF_ERROR(
        stream.CopyDeviceToHost(bank.staging.data(), bank.device.data(), batch.bank_bytes));
  }
  RANGEKV_RETURN_IF_ERROR(stream.Record(*worker.done));
  return worker.done->Synchronize();
}

uint64_t StorePipeline::DigestBlocks(const StoreJob& job, const StoreBatch& batch) const {
  const uint64_t d = context_.integrity->block_tokens();
  uint64_t blocks = 0;
  for (uint32_t i = batch.span_begin; i < batch.span_end; ++i) {
    blocks += (job.slot->spans[i].tokens() + d - 1) / d;
  }
  return blocks;
}

Status StorePipeline::EnqueueDigests(StoreJob& job, const StoreBatch& batch, Bank& bank,
                                     Stream& stream, const kernels::GatherArgs* gather) {
  const uint64_t d = context_.integrity->block_tokens();
  const uint64_t s = context_.geometry.token_bytes;
  uint64_t* out = static_cast<uint64_t*>(bank.digests.data());
  kernels::DigestArgs args;
  args.seed = context_.integrity->digest_seed();
  uint64_t next = 0;  // digest index of args.spans[0]
  auto launch = [&]() -> Status {
    if (args.num_spans == 0) return OkStatus();
    args.digests = out + next;
    if (gather != nullptr) {
      RANGEKV_RETURN_IF_ERROR(stream.GatherDigest({.gather = *gather, .digest = args}));
    } else {
      RANGEKV_RETURN_IF_ERROR(stream.Digest(args));
    }
    Count(&job, &Counters::digest_launches);
    next += args.num_spans;
    args.num_spans = 0;
    return OkStatus();
  };
  uint64_t total = 0;
  for (uint32_t i = batch.span_begin; i < batch.span_end; ++i) {
    const Span& sp = job.slot->spans[i];
    // Digest blocks of a pack start at its token 0, as does every write span of a new pack.
    for (uint64_t t = 0; t < sp.tokens(); t += d) {
      if (total == bank.digest_capacity) return Internal("store batch has too many digest blocks");
      const uint64_t n = std::min(d, sp.tokens() - t);
      args.spans[args.num_spans++] = {bank.device.bytes() + sp.bank_offset_bytes + t * s, n * s};
      ++total;
      if (args.num_spans == kernels::kMaxDigestSpans) RANGEKV_RETURN_IF_ERROR(launch());
    }
  }
  RANGEKV_RETURN_IF_ERROR(launch());
  return stream.CopyDeviceToHost(bank.digests_host.data(), out, total * sizeof(uint64_t));
}

Status StorePipeline::RecordDigests(StoreJob& job, const StoreBatch& batch, const Bank& bank) {
  const uint64_t d = context_.integrity->block_tokens();
  const uint64_t* digests = reinterpret_cast<const uint64_t*>(bank.digests_host.data());
  uint64_t at = 0;
  for (uint32_t i = batch.span_begin; i < batch.span_end; ++i) {
    const Span& sp = job.slot->spans[i];
    const uint64_t blocks = (sp.tokens() + d - 1) / d;
    RANGEKV_RETURN_IF_ERROR(context_.integrity->RecordSpan(
        job.reservation_id, sp, std::span<const uint64_t>(digests + at, blocks)));
    at += blocks;
  }
  return OkStatus();
}

void StorePipeline::GroupWorker(uint32_t index) {
  Worker& worker = workers_[index];
  while (true) {
    std::shared_ptr<StoreJob> job;
    uint32_t b = 0;
    uint32_t bank = 0;
    uint32_t produced_events = 0;
    {
      MutexLock l(mu_);
      while (true) {
        if (jobs_.closing()) return;
        bool found = false;
        bool any_deferred = false;
        for (size_t k = 0; k < jobs_.active_count() && !found; ++k) {
          const std::shared_ptr<StoreJob>& j = jobs_.ServiceOrder(k);
          StoreJobState& st = j->state.Locked(mu_);
          any_deferred = any_deferred || st.deferred;
          if (st.deferred || !st.first_error.ok()) continue;
          const auto eligible = st.progress.NextEligible();
          if (!eligible) continue;
          const auto got = jobs_.AcquireBank(BankPurpose::kScheduled, &j->counters,
                                             &Counters::store_bank_acquisitions);
          if (!got) break;
          job = j;
          b = *eligible;
          bank = *got;
          st.progress.StartGather(b);
          st.bank_of_batch[b] = bank;
          bank_owner_[bank] = {job, b};
          const StoreBatch& batch = job->batches[b];
          for (uint32_t layer = batch.layer_begin; layer < batch.layer_end; ++layer) {
            if (st.produced_event[layer]) produced_events |= 1u << (layer - batch.layer_begin);
          }
          jobs_.Served(k);
          found = true;
        }
        if (found) break;
        if (any_deferred && index == 0 && context_.store->service() != nullptr) {
          // A deferred store joined a reservation of another process (the store service's
          // client): nothing in this engine announces when that one settles, so worker 0
          // polls it every 2 ms while a store waits.
          work_cv_.WaitFor(l, std::chrono::milliseconds(2), [] { return false; });
          RetryDeferred();
          continue;
        }
        work_cv_.Wait(l);
      }
    }
    Bank& bk = banks_[bank];
    // The bank's previous batch may still be finishing its callback; wait for done().
    if (bk.submitted) bk.batch->Wait();
    const StoreBatch& batch = job->batches[b];
    const uint64_t gather_start_ns = SteadyNs();
    Status status = Gather(*job, batch, produced_events, bk, worker);
    if (status.ok() && context_.hooks && context_.hooks->gather_fault) {
      status = context_.hooks->gather_fault(bank);
    }
    const bool gather_proven = status.ok();
    const uint64_t gathered_ns = SteadyNs();
    Count(job.get(), &Counters::store_gather_ns, gathered_ns - gather_start_ns);
    const std::span<const Span> spans(job->slot->spans.data() + batch.span_begin,
                                      batch.span_end - batch.span_begin);
    if (status.ok() && context_.hooks && context_.hooks->store_point) {
      context_.hooks->store_point(StorePoint::kGathered, job->reservation_id);
    }
    if (status.ok() && context_.integrity != nullptr) {
      // The marker is durable before this batch's first write can reach the pack file.
      status = context_.integrity->BeforeFirstWrite(job->reservation_id);
      if (status.ok()) status = RecordDigests(*job, batch, bk);
      Count(job.get(), &Counters::store_integrity_ns, SteadyNs() - gathered_ns);
    }
    if (status.ok()) {
      Status cleared = bk.batch->Clear();
      for (const Span& sp : spans) {
        if (!cleared.ok()) break;
        cleared =
            bk.batch->Add({context_.store->pack_file().file_at(sp.file_index), sp.file_offset,
                           bk.io_buffer() + sp.bank_offset_bytes, sp.length_bytes, IoOp::kWrite});
      }
      status = cleared;
    }
    {
      MutexLock l(mu_);
      StoreJobState& st = job->state.Locked(mu_);
      if (!status.ok()) {
        st.progress.GatherFailed(b);
        Fail(*job, status);
        bank_owner_[bank] = {};
        if (gather_proven) {
          jobs_.ReleaseBank(bank);
        } else {
          // The gather (or its copy) may still run into the bank: never reuse it.
          jobs_.QuarantineBank(bank, &job->counters,
                               "gather completion unproven: " + status.ToString());
        }
        AfterProgress(*job);
        FailUnservable();
        continue;
      }
      st.progress.Extracted(b, static_cast<uint32_t>(spans.size()));
      AfterProgress(*job);
    }
    Count(job.get(), &Counters::native_writes, spans.size());
    bk.submitted = true;
    bk.submit_ns = SteadyNs();
    Status submitted = context_.write_io->Submit(*bk.batch);
    if (!submitted.ok()) {
      // Nothing was accepted: every span of the batch failed, and the bank is free.
      MutexLock l(mu_);
      Fail(*job, submitted);
      StoreJobState& st = job->state.Locked(mu_);
      for (size_t i = 0; i < spans.size(); ++i) st.progress.WriteReturned(b, false);
      bk.submitted = false;
      bank_owner_[bank] = {};
      jobs_.ReleaseBank(bank);
      AfterProgress(*job);
    }
  }
}

void StorePipeline::OnWritesDone(uint32_t bank) {
  Bank& bk = banks_[bank];
  MutexLock l(mu_);
  BankOwner owner = std::move(bank_owner_[bank]);
  bank_owner_[bank] = {};
  StoreJob& job = *owner.job;
  Count(&job, &Counters::store_write_ns, SteadyNs() - bk.submit_ns);
  for (uint32_t i = 0; i < bk.batch->size(); ++i) {
    const IoCompletion& c = bk.batch->completion(i);
    Count(&job, &Counters::bytes_written, c.bytes);
    if (!c.status.ok()) {
      Count(&job, &Counters::failed_spans);
      Fail(job, c.status);
    }
    job.state.Locked(mu_).progress.WriteReturned(owner.batch, c.status.ok());
  }
  // Every accepted write of the batch returned: the bank may be gathered into again. (Its
  // IoBatch turns done() right after this callback; the next user Wait()s for that.)
  jobs_.ReleaseBank(bank);
  AfterProgress(job);
}

// ---- shutdown -----------------------------------------------------------------------------

void StorePipeline::DrainAll() {
  MutexLock l(mu_);
  for (StoreJob* owner : jobs_.owners()) {
    if (owner == nullptr) continue;
    StoreJobState& st = owner->state.Locked(mu_);
    if (!st.settled && std::count(st.produced.begin(), st.produced.end(), 1) != layers_) {
      Fail(*owner, Cancelled("engine closed before every layer was produced"));
      AfterProgress(*owner);
    }
    st.handle_done = true;
  }
  job_cv_.NotifyAll();
  job_cv_.Wait(l, [&]() REQUIRES(mu_) { return jobs_.active().empty(); });
  for (StoreJob* owner : jobs_.owners()) {
    if (owner != nullptr) jobs_.ReturnSlot(*owner, owner->state.Locked(mu_));
  }
}

void StorePipeline::Stop() {
  {
    MutexLock l(mu_);
    if (stopped_) return;
  }
  DrainAll();
  {
    MutexLock l(mu_);
    jobs_.Close();
    stopped_ = true;
    work_cv_.NotifyAll();
  }
  for (Worker& w : workers_) {
    if (w.thread.joinable()) w.thread.join();
  }
  // Callbacks of the last batches may still be returning: wait for done() before the batches
  // are destroyed.
  for (Bank& b : banks_) {
    if (b.submitted) b.batch->Wait();
  }
}

PoolState StorePipeline::pool_state() const {
  MutexLock l(mu_);
  return jobs_.state();
}

}  // namespace rangekv::engine_internal
