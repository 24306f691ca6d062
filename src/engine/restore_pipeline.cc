#include "engine/restore_pipeline.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "base/units.h"
#include "engine/paged_views.h"

namespace rangekv::engine_internal {

namespace {

constexpr uint32_t kNoBank = UINT32_MAX;

}  // namespace

TicketHold::~TicketHold() {
  if (!armed_.load(std::memory_order_acquire)) return;
  if (claimed()) {
    Status s = directory_->Release(ticket_id_);
    if (!s.ok()) Log(LogLevel::kWarning, "releasing ticket: " + s.ToString());
  } else {
    directory_->Cancel(request_id_);
  }
}

RestorePipeline::RestorePipeline(const EngineContext& context)
    : context_(context),
      layers_(context.geometry.layers),
      max_reads_per_stripe_(context.options->ablations.read_issue == Ablations::ReadIssue::kObject
                                ? static_cast<uint32_t>(std::min<uint64_t>(
                                      context.geometry.stripe_bytes / kIoAlignment,
                                      (context.geometry.tokens_per_stripe +
                                       context.options->ablations.object_tokens - 1) /
                                          context.options->ablations.object_tokens)) +
                                      2
                                : 1),
      verify_(context.integrity != nullptr && context.options->checksum == ChecksumPolicy::kAlways),
      pool_(context.options->read_banks, context.options->prefetch_banks) {}

RestorePipeline::~RestorePipeline() { Stop(); }

Result<std::unique_ptr<RestorePipeline>> RestorePipeline::Create(const EngineContext& context) {
  std::unique_ptr<RestorePipeline> p(new RestorePipeline(context));
  RANGEKV_RETURN_IF_ERROR(p->Init());
  return p;
}

Status RestorePipeline::Init() {
  const EngineOptions& o = *context_.options;
  Device& dev = *context_.device;
  banks_.resize(o.read_banks);
  std::vector<IoBuffer> io_buffers;
  for (Bank& b : banks_) {
    RANGEKV_ASSIGN_OR_RETURN(b.device, dev.AllocateDevice(o.read_bank_bytes));
    if (context_.staging) {
      RANGEKV_ASSIGN_OR_RETURN(b.staging, dev.AllocatePinnedHost(o.read_bank_bytes));
    }
    RANGEKV_ASSIGN_OR_RETURN(b.fence, dev.CreateEvent());
    io_buffers.push_back({b.io_buffer(), o.read_bank_bytes});
  }
  Status reg = context_.read_io->RegisterBuffers(io_buffers);
  if (!reg.ok()) Log(LogLevel::kInfo, "read banks not registered for I/O: " + reg.ToString());

  const uint64_t mapping_bytes = o.max_request_tokens * sizeof(int64_t);
  const uint64_t max_spans_per_layer =
      (o.max_request_tokens + context_.geometry.tokens_per_stripe - 1) /
          context_.geometry.tokens_per_stripe +
      2;
  for (uint32_t i = 0; i < o.max_inflight_restores; ++i) {
    auto slot = std::make_unique<RestoreSlot>();
    slot->index = i;
    RANGEKV_ASSIGN_OR_RETURN(slot->stream, dev.CreateStream());
    for (uint32_t l = 0; l < layers_; ++l) {
      RANGEKV_ASSIGN_OR_RETURN(auto event, dev.CreateEvent());
      slot->layer_events.push_back(std::move(event));
      if (context_.stream_memory_ops) {
        RANGEKV_ASSIGN_OR_RETURN(auto flag, dev.CreateFlag());
        slot->layer_flags.push_back(std::move(flag));
      }
    }
    RANGEKV_ASSIGN_OR_RETURN(slot->mapping, dev.AllocateDevice(mapping_bytes));
    RANGEKV_ASSIGN_OR_RETURN(slot->mapping_staging, dev.AllocatePinnedHost(mapping_bytes));
    slot->plan.reserve(max_spans_per_layer * layers_);
    slot->views.resize(layers_);
    slots_.push_back(std::move(slot));
  }
  for (uint32_t w = 0; w < o.read_workers; ++w) {
    batches_.push_back(std::make_unique<IoBatch>(max_reads_per_stripe_));
  }
  if (verify_) {
    // A span of one stripe overlaps at most ceil(T / D) digest blocks.
    const uint64_t d = context_.integrity->block_tokens();
    if (d == 0 || d > context_.geometry.tokens_per_stripe) {
      return Internal("digest block of " + std::to_string(d) + " tokens outside [1, T]");
    }
    const uint64_t blocks = (context_.geometry.tokens_per_stripe + d - 1) / d;
    verifiers_.resize(o.read_workers);
    for (Verifier& v : verifiers_) {
      RANGEKV_ASSIGN_OR_RETURN(v.stream, dev.CreateStream());
      RANGEKV_ASSIGN_OR_RETURN(v.digests, dev.AllocateDevice(blocks * sizeof(uint64_t)));
      RANGEKV_ASSIGN_OR_RETURN(v.host, dev.AllocatePinnedHost(blocks * sizeof(uint64_t)));
      v.capacity_blocks = blocks;
    }
  }
  {
    MutexLock l(mu_);
    for (auto it = slots_.rbegin(); it != slots_.rend(); ++it) free_slots_.push_back(it->get());
    slot_owner_.assign(slots_.size(), nullptr);
    fences_.resize(o.read_banks);
    if (verify_) verify_queue_.resize(o.read_banks);
    publish_scratch_.reserve(layers_);
  }
  for (uint32_t w = 0; w < o.read_workers; ++w) workers_.emplace_back([this, w] { ReadWorker(w); });
  for (uint32_t v = 0; v < verifiers_.size(); ++v) {
    verify_workers_.emplace_back([this, v] { VerifyWorker(v); });
  }
  reaper_ = std::thread([this] { Reaper(); });
  return OkStatus();
}

// ---- jobs ---------------------------------------------------------------------------------

Result<std::shared_ptr<RestoreJob>> RestorePipeline::Start(std::string request_id,
                                                           TokenInterval tokens,
                                                           std::span<const PackRecord> records,
                                                           std::shared_ptr<TicketHold> hold,
                                                           bool claimed) {
  RestoreSlot* slot = nullptr;
  uint64_t id = 0;
  {
    MutexLock l(mu_);
    if (stopping_) return FailedPrecondition("engine is closing");
    if (free_slots_.empty()) {
      Count(nullptr, &Counters::rejected_requests);
      return ResourceExhausted("all " + std::to_string(slots_.size()) +
                               " restore job slots are in use (max_inflight_restores)");
    }
    slot = free_slots_.back();
    free_slots_.pop_back();
    id = next_job_id_++;
  }
  // The slot is ours alone until the job is published below.
  SpanPlanOptions plan_options;
  plan_options.bank_bytes = context_.options->read_bank_bytes;
  plan_options.io_alignment_bytes = kIoAlignment;
  plan_options.max_spans = std::max<uint64_t>(slot->plan.capacity(), kDefaultMaxPlanSpans);
  // Verification checks whole digest blocks: read every block the valid tokens touch.
  if (verify_) plan_options.read_block_tokens = context_.integrity->block_tokens();
  // Opaque blocks: read each block from the pack that stored it whole (paged_views.h).
  std::vector<PackRecord> aligned;
  if (IsBlockOpaque(context_.options->model.layout)) {
    aligned = BlockAlignedRecords(records, context_.geometry.block_size);
    records = aligned;
  }
  Status planned =
      PlanReadSpans(context_.store->layout(), records, {tokens.begin, tokens.end}, {0, layers_},
                    context_.store->generations(), plan_options, &slot->plan);
  if (planned.ok() && (slot->plan.empty() || slot->plan.size() % layers_ != 0)) {
    planned = Internal("read plan of " + std::to_string(slot->plan.size()) +
                       " spans is not layer-major over " + std::to_string(layers_) + " layers");
  }
  if (!planned.ok()) {
    MutexLock l(mu_);
    free_slots_.push_back(slot);
    return planned;
  }
  auto job = std::make_shared<RestoreJob>(id, std::move(request_id), tokens);
  job->slot = slot;
  job->hold = std::move(hold);
  job->claimed = claimed;
  job->records = records.size();
  job->progress.Reset(layers_, static_cast<uint32_t>(slot->plan.size() / layers_),
                      context_.options->lookahead_layers, context_.options->ablations.delivery);
  job->bank_of.assign(job->progress.stripes(), kNoBank);
  job->layer_status.assign(layers_, OkStatus());

  MutexLock l(mu_);
  ++slot->flag_value;
  slot_owner_[slot->index] = job.get();
  active_.push_back(job);
  if (claimed) Count(job.get(), &Counters::restores_started);
  work_cv_.NotifyAll();
  return job;
}

void RestorePipeline::Adopt(RestoreJob& job) {
  MutexLock l(mu_);
  job.claimed = true;
  if (job.hold) job.hold->MarkClaimed();
  Count(&job, &Counters::restores_started);
}

Status RestorePipeline::Bind(RestoreJob& job, const PagedKv& kv,
                             std::span<const int64_t> slot_mapping) {
  if (slot_mapping.size() != job.tokens.size()) {
    return InvalidArgument("slot mapping has " + std::to_string(slot_mapping.size()) +
                           " entries for " + std::to_string(job.tokens.size()) +
                           " restored tokens");
  }
  // Views go to a local first: validation of the mapping needs one, and the job's views may
  // only change under the lock.
  std::vector<kernels::PagedKvView> views;
  RANGEKV_RETURN_IF_ERROR(
      MakeLayerViews(context_.geometry, context_.options->model.layout, kv, &views));
  RANGEKV_RETURN_IF_ERROR(
      ValidateMapping(views[0], slot_mapping, kernels::SlotUse::kScatterDestination));

  MutexLock l(mu_);
  if (job.handle_done) return FailedPrecondition("restore already finished");
  if (job.cancelled) return FailedPrecondition("restore was cancelled");
  if (job.bound) return FailedPrecondition("restore slots are already bound");
  RestoreSlot& slot = *job.slot;
  std::copy(views.begin(), views.end(), slot.views.begin());
  const uint64_t bytes = slot_mapping.size() * sizeof(int64_t);
  std::memcpy(slot.mapping_staging.data(), slot_mapping.data(), bytes);
  // Scatters follow on the same stream, so they see the mapping without a host wait.
  RANGEKV_RETURN_IF_ERROR(
      slot.stream->CopyHostToDevice(slot.mapping.data(), slot.mapping_staging.data(), bytes));
  job.bound = true;
  auto self = job.shared_from_this();
  for (uint32_t s = 0; s < job.progress.stripes(); ++s) {
    if (job.progress.state(s) == StripeState::kLanded) LaunchScatter(self, s, job.bank_of[s]);
  }
  AfterProgress(job);
  return OkStatus();
}

Status RestorePipeline::WaitLayer(RestoreJob& job, uint32_t layer) {
  if (layer >= layers_) return InvalidArgument("layer " + std::to_string(layer) + " >= L");
  Event* event = nullptr;
  {
    MutexLock l(mu_);
    if (job.handle_done) return FailedPrecondition("restore already finished");
    job_cv_.Wait(l,
                 [&]() REQUIRES(mu_) { return job.progress.published(layer) || job.handle_done; });
    if (job.handle_done) return FailedPrecondition("restore finished while waiting");
    event = job.slot->layer_events[layer].get();
  }
  Status device = event->Synchronize();
  MutexLock l(mu_);
  if (!device.ok()) return device;
  return job.layer_status[layer];
}

Status RestorePipeline::StreamWaitLayer(RestoreJob& job, uint32_t layer, Stream& stream) {
  if (layer >= layers_) return InvalidArgument("layer " + std::to_string(layer) + " >= L");
  if (context_.stream_memory_ops) {
    DeviceFlag* flag = nullptr;
    uint32_t value = 0;
    {
      MutexLock l(mu_);
      if (job.handle_done) return FailedPrecondition("restore already finished");
      flag = job.slot->layer_flags[layer].get();
      value = job.slot->flag_value;
    }
    // The flag is written on the job's stream after the layer's scatters, even for failed or
    // cancelled layers, so the wait always ends; failures are reported by Finish().
    return stream.WaitFlag(*flag, value);
  }
  Event* event = nullptr;
  {
    MutexLock l(mu_);
    if (job.handle_done) return FailedPrecondition("restore already finished");
    // An event can be waited on only once recorded: block until the layer's last scatter was
    // launched (not until it ran).
    job_cv_.Wait(l,
                 [&]() REQUIRES(mu_) { return job.progress.published(layer) || job.handle_done; });
    if (job.handle_done) return FailedPrecondition("restore finished while waiting");
    event = job.slot->layer_events[layer].get();
    RANGEKV_RETURN_IF_ERROR(stream.WaitEvent(*event));
    return job.layer_status[layer];
  }
}

RestoreOutcome RestorePipeline::Finish(RestoreJob& job) {
  RestoreOutcome out;
  out.requested = job.tokens;
  MutexLock l(mu_);
  if (job.handle_done) {
    out.status = FailedPrecondition("restore already finished, or the engine closed");
    out.failed.push_back(job.tokens);
    return out;
  }
  if (!job.bound && !job.cancelled) CancelLocked(job);
  job_cv_.Wait(l, [&]() REQUIRES(mu_) { return job.drained; });

  const RestoreSlot& slot = *job.slot;
  for (uint32_t s = 0; s < job.progress.stripes(); ++s) {
    const StripeState st = job.progress.state(s);
    if (st == StripeState::kFailed || st == StripeState::kDropped) {
      out.failed.push_back({slot.plan[s].path_token_begin, slot.plan[s].path_token_end});
    }
  }
  std::sort(out.failed.begin(), out.failed.end(),
            [](const TokenInterval& a, const TokenInterval& b) { return a.begin < b.begin; });
  size_t merged = 0;
  for (const TokenInterval& t : out.failed) {
    if (merged > 0 && t.begin <= out.failed[merged - 1].end) {
      out.failed[merged - 1].end = std::max(out.failed[merged - 1].end, t.end);
    } else {
      out.failed[merged++] = t;
    }
  }
  out.failed.resize(merged);
  if (job.readiness_failed) out.failed.assign(1, job.tokens);
  uint64_t failed_tokens = 0;
  for (const TokenInterval& t : out.failed) failed_tokens += t.size();
  out.delivered_tokens = job.tokens.size() - failed_tokens;
  out.status = job.first_error;
  out.work = job.counters.Snapshot();
  job.handle_done = true;
  MaybeReturnSlot(job);
  job_cv_.NotifyAll();
  return out;
}

void RestorePipeline::Cancel(RestoreJob& job) {
  MutexLock l(mu_);
  if (job.handle_done || job.drained) return;
  CancelLocked(job);
}

void RestorePipeline::Abandon(RestoreJob& job) {
  MutexLock l(mu_);
  if (job.handle_done) return;
  if (!job.drained) CancelLocked(job);
  job.handle_done = true;
  MaybeReturnSlot(job);
  job_cv_.NotifyAll();
}

void RestorePipeline::CancelLocked(RestoreJob& job) {
  if (job.cancelled) return;
  job.cancelled = true;
  Count(&job, &Counters::cancelled_restores);
  if (job.first_error.ok()) job.first_error = Cancelled("restore cancelled");
  job.progress.DropPending();
  for (uint32_t s = 0; s < job.progress.stripes(); ++s) {
    const StripeState st = job.progress.state(s);
    if (st == StripeState::kLanded) {
      // A landed stripe's read completed: its bank holds nothing in flight.
      job.progress.Drop(s);
      ReleaseBank(job.bank_of[s]);
      job.bank_of[s] = kNoBank;
    }
    if (job.progress.state(s) == StripeState::kDropped) {
      Status& ls = job.layer_status[job.progress.LayerOf(s)];
      if (ls.ok()) ls = Cancelled("restore cancelled before this layer was delivered");
    }
  }
  AfterProgress(job);
}

void RestorePipeline::MaybeReturnSlot(RestoreJob& job) {
  if (!job.drained || !job.handle_done || job.slot_returned) return;
  job.slot_returned = true;
  slot_owner_[job.slot->index] = nullptr;
  free_slots_.push_back(job.slot);
}

void RestorePipeline::RemoveActive(const RestoreJob& job) {
  auto it = std::find_if(active_.begin(), active_.end(),
                         [&](const std::shared_ptr<RestoreJob>& j) { return j.get() == &job; });
  if (it != active_.end()) active_.erase(it);
}

// ---- banks and progress ---------------------------------------------------------------------

void RestorePipeline::ReleaseBank(uint32_t bank) {
  pool_.Release(bank);
  if (context_.hooks && context_.hooks->read_bank_observer) {
    context_.hooks->read_bank_observer(BankEvent::kReleased, bank, pool_.use_number(bank));
  }
  work_cv_.NotifyAll();
}

void RestorePipeline::QuarantineBank(RestoreJob& job, uint32_t bank) {
  pool_.Quarantine(bank);
  Count(&job, &Counters::quarantines);
  Log(LogLevel::kWarning, "read bank " + std::to_string(bank) +
                              " quarantined: its last use could not be proven complete");
  if (context_.hooks && context_.hooks->read_bank_observer) {
    context_.hooks->read_bank_observer(BankEvent::kQuarantined, bank, pool_.use_number(bank));
  }
}

void RestorePipeline::FailStripe(RestoreJob& job, uint32_t stripe, const Status& status) {
  job.progress.Fail(stripe);
  Count(&job, &Counters::failed_spans);
  Status& ls = job.layer_status[job.progress.LayerOf(stripe)];
  if (ls.ok()) ls = status;
  if (job.first_error.ok()) job.first_error = status;
}

void RestorePipeline::AfterProgress(RestoreJob& job) {
  publish_scratch_.clear();
  job.progress.TakePublishable(&publish_scratch_);
  RestoreSlot& slot = *job.slot;
  for (uint32_t layer : publish_scratch_) {
    // Recorded on the job's stream after every scatter of the layer: waiting on it (or on the
    // flag written right after) waits for the layer's data.
    Status e = slot.stream->Record(*slot.layer_events[layer]);
    if (e.ok() && !slot.layer_flags.empty()) {
      e = slot.stream->WriteFlag(*slot.layer_flags[layer], slot.flag_value);
    }
    if (!e.ok()) {
      // Without its event the layer cannot be waited on; its tokens cannot be vouched for.
      Log(LogLevel::kError, "recording layer readiness failed: " + e.ToString());
      job.readiness_failed = true;
      Status& ls = job.layer_status[layer];
      if (ls.ok()) ls = e;
      if (job.first_error.ok()) job.first_error = e;
    }
    Count(&job, &Counters::ready_events);
  }
  if (!publish_scratch_.empty()) job_cv_.NotifyAll();
  if (!job.drained && job.progress.finished()) {
    job.drained = true;
    // Every read and scatter of this job is proven (or failed): its leases may go.
    job.hold.reset();
    RemoveActive(job);
    Count(&job, &Counters::restores_finished);
    MaybeReturnSlot(job);
    job_cv_.NotifyAll();
  }
  work_cv_.NotifyAll();
}

// ---- read workers -------------------------------------------------------------------------

bool RestorePipeline::PickRead(ReadPick* pick) {
  for (const auto& job : active_) {
    if (job->cancelled || job->drained) continue;
    const auto stripe = job->progress.NextToRead();
    if (!stripe) continue;
    const BankPurpose purpose = job->bound ? BankPurpose::kScheduled : BankPurpose::kPrefetch;
    const auto bank = pool_.TryAcquire(purpose);
    if (!bank) {
      if (pool_.free_count() == 0) return false;
      continue;  // prefetch budget spent; a bound job may still take a bank
    }
    job->progress.Issue(*stripe);
    Count(job.get(), &Counters::read_bank_acquisitions);
    if (!job->bound) Count(job.get(), &Counters::prefetched_stripes);
    if (context_.hooks && context_.hooks->read_bank_observer) {
      context_.hooks->read_bank_observer(BankEvent::kAcquired, *bank, pool_.use_number(*bank));
    }
    pick->job = job;
    pick->stripe = *stripe;
    pick->bank = *bank;
    return true;
  }
  return false;
}

Status RestorePipeline::PrepareReads(const Span& span, uint8_t* buf, IoBatch& batch) const {
  RANGEKV_RETURN_IF_ERROR(batch.Clear());
  File* file = context_.store->pack_file().file_at(span.file_index);
  if (file == nullptr) return Internal("span names an unknown file");
  if (context_.options->ablations.read_issue == Ablations::ReadIssue::kStripe) {
    return batch.Add({file, span.file_offset, buf, span.length_bytes, IoOp::kRead});
  }
  // read_issue=object: the same bytes, cut at logical object boundaries of the path (what a
  // per-object reader would issue), each piece aligned for direct I/O.
  const uint64_t ot = context_.options->ablations.object_tokens;
  const uint64_t s = context_.geometry.token_bytes;
  const uint64_t end = span.file_offset + span.length_bytes;
  uint64_t cur = span.file_offset;
  for (uint64_t b = (span.path_token_begin / ot + 1) * ot; b < span.path_token_end; b += ot) {
    const uint64_t cut =
        AlignDown(span.file_offset + span.payload_offset_bytes + (b - span.path_token_begin) * s,
                  kIoAlignment);
    if (cut <= cur || cut >= end) continue;
    RANGEKV_RETURN_IF_ERROR(
        batch.Add({file, cur, buf + (cur - span.file_offset), cut - cur, IoOp::kRead}));
    cur = cut;
  }
  return batch.Add({file, cur, buf + (cur - span.file_offset), end - cur, IoOp::kRead});
}

Status RestorePipeline::VerifyStripe(Verifier& v, RestoreJob& job, const Span& span, Bank& bank,
                                     bool* unproven, bool* mismatch) {
  *unproven = false;
  *mismatch = false;
  bank.device_loaded = false;
  PayloadIntegrity& integrity = *context_.integrity;
  RANGEKV_ASSIGN_OR_RETURN(const DigestBlocks blocks, integrity.PlanVerify(span));
  if (blocks.count == 0 || blocks.count > v.capacity_blocks) {
    return Internal("verify plan of " + std::to_string(blocks.count) + " digest blocks");
  }
  const uint64_t d = integrity.block_tokens();
  const uint64_t s = context_.geometry.token_bytes;
  // Stripe byte offset of the buffer's first byte (the read's file offset in its stripe).
  const uint64_t buffer_at = span.pack_token_begin * s - span.payload_offset_bytes;
  // Every block must lie wholly inside the read (the planner widened it); checked before any
  // work is enqueued, so a failure here leaves the bank proven.
  for (uint64_t i = 0; i < blocks.count; ++i) {
    const uint64_t b = blocks.first_block + i;
    const uint64_t lo = b * d * s;
    const uint64_t hi = std::min((b + 1) * d, blocks.stored_tokens) * s;
    if (lo < buffer_at || hi > buffer_at + span.length_bytes) {
      return OutOfRange("digest block " + std::to_string(b) + " of pack slot " +
                        std::to_string(span.pack_slot) + " is not wholly inside the read");
    }
  }
  // From here on device work is enqueued: an error leaves its end unproven.
  *unproven = true;
  Stream& stream = *v.stream;
  if (!bank.staging.empty()) {
    // The digest runs where the data will be scattered from: copy it up first (the scatter
    // then skips its own copy).
    RANGEKV_RETURN_IF_ERROR(
        stream.CopyHostToDevice(bank.device.data(), bank.staging.data(), span.length_bytes));
    Count(&job, &Counters::h2d_copies);
  }
  uint64_t* out = static_cast<uint64_t*>(v.digests.data());
  for (uint64_t i = 0; i < blocks.count; i += kernels::kMaxDigestSpans) {
    kernels::DigestArgs args;
    args.seed = integrity.digest_seed();
    args.digests = out + i;
    args.num_spans =
        static_cast<uint32_t>(std::min<uint64_t>(kernels::kMaxDigestSpans, blocks.count - i));
    for (uint32_t k = 0; k < args.num_spans; ++k) {
      const uint64_t b = blocks.first_block + i + k;
      const uint64_t lo = b * d * s;
      const uint64_t hi = std::min((b + 1) * d, blocks.stored_tokens) * s;
      args.spans[k] = {bank.device.bytes() + (lo - buffer_at), hi - lo};
    }
    RANGEKV_RETURN_IF_ERROR(stream.Digest(args));
    Count(&job, &Counters::digest_launches);
  }
  RANGEKV_RETURN_IF_ERROR(
      stream.CopyDeviceToHost(v.host.data(), out, blocks.count * sizeof(uint64_t)));
  RANGEKV_RETURN_IF_ERROR(stream.Synchronize());
  *unproven = false;
  bank.device_loaded = !bank.staging.empty();
  Count(&job, &Counters::verified_spans);
  Status compared = integrity.Verify(
      span, blocks.first_block,
      std::span<const uint64_t>(reinterpret_cast<const uint64_t*>(v.host.data()), blocks.count));
  *mismatch = compared.code() == StatusCode::kCorruption;
  return compared;
}

void RestorePipeline::ReadWorker(uint32_t worker) {
  IoBatch& batch = *batches_[worker];
  while (true) {
    ReadPick pick;
    {
      MutexLock l(mu_);
      while (!PickRead(&pick)) {
        if (stopping_) return;
        work_cv_.Wait(l);
      }
    }
    // The plan and the bank are this worker's until CompleteRead: read them without the lock.
    const Span& span = pick.job->slot->plan[pick.stripe];
    uint8_t* buf = banks_[pick.bank].io_buffer();
    Status status = PrepareReads(span, buf, batch);
    uint64_t bytes = 0;
    if (status.ok()) status = context_.read_io->Submit(batch);
    if (status.ok()) {
      Count(pick.job.get(), &Counters::native_reads, batch.size());
      batch.Wait();
      status = batch.status();
      bytes = batch.bytes_moved();
    }
    banks_[pick.bank].device_loaded = false;
    MutexLock l(mu_);
    if (status.ok() && verify_) {
      // The bank stays owned by the stripe until its verify worker completes it; the queue has
      // one entry per bank, so it never overflows.
      RANGEKV_CHECK(verify_count_ < verify_queue_.size());
      verify_queue_[(verify_head_ + verify_count_) % verify_queue_.size()] = {std::move(pick),
                                                                              bytes};
      ++verify_count_;
      verify_cv_.NotifyOne();
      continue;
    }
    CompleteRead(pick, status, bytes, /*unproven=*/false);
  }
}

void RestorePipeline::VerifyWorker(uint32_t verifier) {
  while (true) {
    VerifyEntry entry;
    {
      MutexLock l(mu_);
      while (verify_count_ == 0) {
        if (stopping_) return;
        verify_cv_.Wait(l);
      }
      entry = std::move(verify_queue_[verify_head_]);
      verify_head_ = (verify_head_ + 1) % verify_queue_.size();
      --verify_count_;
    }
    // As for the read worker: the plan and the bank are this stripe's until CompleteRead.
    const ReadPick& pick = entry.pick;
    const Span& span = pick.job->slot->plan[pick.stripe];
    bool unproven = false;
    bool mismatch = false;
    Status status = VerifyStripe(verifiers_[verifier], *pick.job, span, banks_[pick.bank],
                                 &unproven, &mismatch);
    if (mismatch) {
      Count(pick.job.get(), &Counters::checksum_failures);
      context_.integrity->OnCorruption(span);
    }
    MutexLock l(mu_);
    CompleteRead(pick, status, entry.bytes, unproven);
  }
}

void RestorePipeline::CompleteRead(const ReadPick& pick, const Status& status, uint64_t bytes,
                                   bool unproven) {
  RestoreJob& job = *pick.job;
  Count(&job, &Counters::bytes_read, bytes);
  if (!status.ok()) {
    FailStripe(job, pick.stripe, status);
    if (unproven) {
      // Verification's device work may still touch the bank: never hand it out again.
      QuarantineBank(job, pick.bank);
    } else {
      // The I/O engine returned the completion: nothing writes the bank any more.
      ReleaseBank(pick.bank);
    }
  } else if (job.cancelled) {
    job.progress.Drop(pick.stripe);
    Status& ls = job.layer_status[job.progress.LayerOf(pick.stripe)];
    if (ls.ok()) ls = Cancelled("restore cancelled before this layer was delivered");
    ReleaseBank(pick.bank);
  } else if (!job.bound) {
    job.progress.Land(pick.stripe);
    job.bank_of[pick.stripe] = pick.bank;
  } else {
    LaunchScatter(pick.job, pick.stripe, pick.bank);
  }
  AfterProgress(job);
}

void RestorePipeline::LaunchScatter(const std::shared_ptr<RestoreJob>& job_ptr, uint32_t stripe,
                                    uint32_t bank) {
  RestoreJob& job = *job_ptr;
  RestoreSlot& slot = *job.slot;
  const Span& span = slot.plan[stripe];
  const uint32_t layer = job.progress.LayerOf(stripe);
  Bank& b = banks_[bank];
  Stream& stream = *slot.stream;
  pool_.Promote(bank);

  Status e = OkStatus();
  if (!b.staging.empty() && !b.device_loaded) {
    e = stream.CopyHostToDevice(b.device.data(), b.staging.data(), span.length_bytes);
    if (e.ok()) Count(&job, &Counters::h2d_copies);
  }
  if (e.ok()) {
    kernels::ScatterArgs args;
    args.dst = slot.views[layer];
    args.stripe = b.device.bytes() + span.payload_offset_bytes;
    args.slots = static_cast<const int64_t*>(slot.mapping.data()) +
                 (span.path_token_begin - job.tokens.begin);
    args.num_tokens = static_cast<uint32_t>(span.tokens());
    e = stream.Scatter(args);
    if (e.ok()) Count(&job, &Counters::scatter_launches);
  }
  if (e.ok()) e = stream.Record(*b.fence);
  job.progress.LaunchScatter(stripe);
  job.bank_of[stripe] = bank;
  if (!e.ok()) {
    // Part of the work may be enqueued with nothing to prove its end: keep the bank out.
    FailStripe(job, stripe, e);
    QuarantineBank(job, bank);
    return;
  }
  RANGEKV_CHECK(fence_count_ < fences_.size());
  fences_[(fence_head_ + fence_count_) % fences_.size()] = {job_ptr, stripe, bank};
  ++fence_count_;
  reaper_cv_.NotifyOne();
}

void RestorePipeline::Reaper() {
  while (true) {
    FenceEntry entry;
    uint32_t layer = 0;
    {
      MutexLock l(mu_);
      while (fence_count_ == 0) {
        if (stopping_) return;
        reaper_cv_.Wait(l);
      }
      entry = std::move(fences_[fence_head_]);
      fence_head_ = (fence_head_ + 1) % fences_.size();
      --fence_count_;
      layer = entry.job->progress.LayerOf(entry.stripe);
    }
    // The bank's fence was recorded right after its scatter on the job's stream; it is not
    // re-recorded before this entry releases the bank.
    Status proven = banks_[entry.bank].fence->Synchronize();
    if (proven.ok() && context_.hooks && context_.hooks->scatter_fence_fault) {
      proven = context_.hooks->scatter_fence_fault(entry.bank, layer);
    }
    MutexLock l(mu_);
    RestoreJob& job = *entry.job;
    if (proven.ok()) {
      job.progress.Prove(entry.stripe);
      ReleaseBank(entry.bank);
    } else {
      FailStripe(job, entry.stripe, proven.WithContext("scatter completion unproven"));
      QuarantineBank(job, entry.bank);
    }
    job.bank_of[entry.stripe] = kNoBank;
    AfterProgress(job);
  }
}

// ---- shutdown and introspection -------------------------------------------------------------

void RestorePipeline::DrainAll() {
  MutexLock l(mu_);
  for (RestoreJob* owner : slot_owner_) {
    if (owner == nullptr) continue;
    if (!owner->drained) CancelLocked(*owner);
    owner->handle_done = true;  // surviving handles become inert
  }
  job_cv_.NotifyAll();
  job_cv_.Wait(l, [&]() REQUIRES(mu_) {
    return active_.empty() && fence_count_ == 0 && verify_count_ == 0;
  });
  for (RestoreJob* owner : slot_owner_) {
    if (owner != nullptr) MaybeReturnSlot(*owner);
  }
}

void RestorePipeline::Stop() {
  {
    MutexLock l(mu_);
    if (stopped_) return;
  }
  DrainAll();
  {
    MutexLock l(mu_);
    stopping_ = true;
    stopped_ = true;
    work_cv_.NotifyAll();
    reaper_cv_.NotifyAll();
    verify_cv_.NotifyAll();
  }
  for (std::thread& t : workers_) t.join();
  for (std::thread& t : verify_workers_) t.join();
  if (reaper_.joinable()) reaper_.join();
  workers_.clear();
  verify_workers_.clear();
  // Readiness records and flag writes of drained jobs may still be queued on the job streams.
  for (auto& slot : slots_) {
    if (slot->stream == nullptr) continue;
    Status s = slot->stream->Synchronize();
    if (!s.ok()) Log(LogLevel::kWarning, "restore stream at shutdown: " + s.ToString());
  }
}

RestorePipeline::PoolState RestorePipeline::pool_state() const {
  MutexLock l(mu_);
  PoolState s;
  s.free_banks = pool_.free_count();
  s.owned_banks = pool_.owned_count();
  s.quarantined_banks = pool_.quarantined_count();
  s.prefetch_banks = pool_.prefetch_owned();
  s.free_slots = static_cast<uint32_t>(free_slots_.size());
  s.active_jobs = static_cast<uint32_t>(active_.size());
  return s;
}

}  // namespace rangekv::engine_internal
