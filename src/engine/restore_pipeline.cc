#include "engine/restore_pipeline.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "base/units.h"
#include "engine/paged_views.h"
#include "engine/remote_tier.h"

namespace rangekv::engine_internal {

TicketHold::~TicketHold() {
  if (!armed_.load(std::memory_order_acquire)) return;
  if (remote_release_) remote_release_();  // non-blocking: queued to the tier's thread
  if (!local_) return;
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
      max_reads_per_stripe_(context.options->tuning.ablations.read_issue ==
                                    Ablations::ReadIssue::kObject
                                ? static_cast<uint32_t>(std::min<uint64_t>(
                                      context.geometry.stripe_bytes / kIoAlignment,
                                      (context.geometry.tokens_per_stripe +
                                       context.options->tuning.ablations.object_tokens - 1) /
                                          context.options->tuning.ablations.object_tokens)) +
                                      2
                                : 1),
      verify_(context.integrity != nullptr && context.options->checksum == ChecksumPolicy::kAlways),
      jobs_(context_, context.options->tuning.read_banks, context.options->tuning.prefetch_banks,
            "restore", "max_inflight_restores",
            context.hooks != nullptr ? &context.hooks->read_bank_observer : nullptr) {}

RestorePipeline::~RestorePipeline() { Stop(); }

Result<std::unique_ptr<RestorePipeline>> RestorePipeline::Create(const EngineContext& context) {
  std::unique_ptr<RestorePipeline> p(new RestorePipeline(context));
  RANGEKV_RETURN_IF_ERROR(p->Init());
  return p;
}

Status RestorePipeline::Init() {
  const EngineOptions& o = *context_.options;
  Device& dev = *context_.device;
  banks_.resize(o.tuning.read_banks);
  std::vector<BankMemory*> memory;
  for (Bank& b : banks_) {
    RANGEKV_ASSIGN_OR_RETURN(b.fence, dev.CreateEvent());
    memory.push_back(&b);
  }
  RANGEKV_RETURN_IF_ERROR(
      AllocateBankMemory(context_, o.tuning.read_bank_bytes, *context_.read_io, memory, "read"));

  const uint64_t max_spans_per_layer =
      (o.max_request_tokens + context_.geometry.tokens_per_stripe - 1) /
          context_.geometry.tokens_per_stripe +
      2;
  for (uint32_t i = 0; i < o.tuning.max_inflight_restores; ++i) {
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
    RANGEKV_RETURN_IF_ERROR(slot->mapping.Allocate(dev, o.max_request_tokens));
    // Twice: a restore may hold as many cluster-tier spans as local ones (remote_tier.h).
    slot->plan.reserve(2 * max_spans_per_layer * layers_);
    slot->views.resize(layers_);
    slots_.push_back(std::move(slot));
  }
  for (uint32_t w = 0; w < o.tuning.read_workers; ++w) {
    batches_.push_back(std::make_unique<IoBatch>(max_reads_per_stripe_));
  }
  if (verify_) {
    // A span of one stripe overlaps at most ceil(T / D) digest blocks.
    const uint64_t d = context_.integrity->block_tokens();
    if (d == 0 || d > context_.geometry.tokens_per_stripe) {
      return Internal("digest block of " + std::to_string(d) + " tokens outside [1, T]");
    }
    const uint64_t blocks = (context_.geometry.tokens_per_stripe + d - 1) / d;
    verdict_capacity_ = blocks;
    const uint64_t bytes = 2 * blocks * sizeof(uint64_t) + sizeof(uint32_t);
    for (Bank& b : banks_) {
      RANGEKV_ASSIGN_OR_RETURN(b.verdict_host, dev.AllocatePinnedHost(bytes));
      RANGEKV_ASSIGN_OR_RETURN(b.verdict_device, dev.AllocateDevice(bytes));
      if (context_.staging) {
        RANGEKV_ASSIGN_OR_RETURN(b.verdict_stream, dev.CreateStream());
        RANGEKV_ASSIGN_OR_RETURN(b.verified, dev.CreateEvent());
      }
    }
  }
  {
    MutexLock l(mu_);
    jobs_.Init(slots_);
    read_limit_ = o.tuning.read_workers;
    fences_.resize(o.tuning.read_banks);
    publish_scratch_.reserve(layers_);
  }
  for (uint32_t w = 0; w < o.tuning.read_workers; ++w)
    workers_.emplace_back([this, w] { ReadWorker(w); });
  reaper_ = std::thread([this] { Reaper(); });
  return OkStatus();
}

// ---- jobs ---------------------------------------------------------------------------------

Result<std::shared_ptr<RestoreJob>> RestorePipeline::Start(
    std::string request_id, TokenInterval tokens, std::span<const PackRecord> records,
    std::shared_ptr<TicketHold> hold, bool claimed, std::span<const Span> remote_spans) {
  RestoreSlot* slot = nullptr;
  uint64_t id = 0;
  {
    MutexLock l(mu_);
    RANGEKV_ASSIGN_OR_RETURN(const auto admitted, jobs_.Admit());
    slot = admitted.slot;
    id = admitted.job_id;
  }
  // The slot is ours alone until the job is published below.
  SpanPlanOptions plan_options;
  plan_options.bank_bytes = context_.options->tuning.read_bank_bytes;
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
  // Local records cover [tokens.begin, local_end); remote spans the rest.
  uint64_t local_end = tokens.end;
  if (!remote_spans.empty()) {
    local_end = tokens.begin;
    for (const PackRecord& r : records)
      local_end = std::max(local_end, std::min(r.path_token_end(), tokens.end));
  }
  Status planned = OkStatus();
  slot->plan.clear();
  if (local_end > tokens.begin) {
    planned = PlanReadSpans(context_.store->layout(), records, {tokens.begin, local_end},
                            {0, layers_}, context_.store->generations(), plan_options, &slot->plan);
  }
  if (planned.ok() && !remote_spans.empty()) {
    if (remote_spans.size() % layers_ != 0 || slot->plan.size() % layers_ != 0) {
      planned = Internal("cluster-tier spans are not layer-major");
    } else {
      // Layer by layer: the local spans of layer l, then its remote spans.
      const size_t nl = slot->plan.size() / layers_;
      const size_t nr = remote_spans.size() / layers_;
      std::vector<Span> local(slot->plan.begin(), slot->plan.end());
      slot->plan.clear();
      for (uint32_t l = 0; l < layers_; ++l) {
        slot->plan.insert(slot->plan.end(), local.begin() + l * nl, local.begin() + (l + 1) * nl);
        slot->plan.insert(slot->plan.end(), remote_spans.begin() + l * nr,
                          remote_spans.begin() + (l + 1) * nr);
      }
    }
  }
  if (planned.ok() && (slot->plan.empty() || slot->plan.size() % layers_ != 0)) {
    planned = Internal("read plan of " + std::to_string(slot->plan.size()) +
                       " spans is not layer-major over " + std::to_string(layers_) + " layers");
  }
  if (!planned.ok()) {
    MutexLock l(mu_);
    jobs_.GiveBack(slot);
    return planned;
  }
  // Cluster-tier spans ride GETs several layers at a time where consecutive stripes of the plan
  // are consecutive layers of one run (one remote run per layer, nothing local; riders are
  // taken in plan order): the lookahead window widens to match, so a GET's riders fall inside
  // it as its lead does (each still counts as a read against read_limit_).
  uint32_t spans_per_get = 1;
  if (context_.remote != nullptr && remote_spans.size() == slot->plan.size() &&
      remote_spans.size() == layers_ && layers_ >= 2 &&
      context_.remote->JoinsGet(remote_spans[0], remote_spans[0], remote_spans[1])) {
    spans_per_get = context_.remote->SpansPerGet(remote_spans[0]);
  }
  auto job = std::make_shared<RestoreJob>(&mu_, id, std::move(request_id), tokens, slot);

  MutexLock l(mu_);
  RestoreJobState& st = job->state.Locked(mu_);
  st.hold = std::move(hold);
  st.claimed = claimed;
  st.progress.Reset(layers_, static_cast<uint32_t>(slot->plan.size() / layers_),
                    std::min(layers_, context_.options->tuning.lookahead_layers * spans_per_get),
                    context_.options->tuning.ablations.delivery);
  st.bank_of.assign(st.progress.stripes(), kNoBank);
  st.layer_status.assign(layers_, OkStatus());
  ++slot->flag_value;
  jobs_.Activate(job);
  if (claimed) Count(job.get(), &Counters::restores_started);
  FailUnservable();  // no bank left: the job settles failed at once
  work_cv_.NotifyAll();
  return job;
}

void RestorePipeline::Adopt(RestoreJob& job) {
  MutexLock l(mu_);
  RestoreJobState& st = job.state.Locked(mu_);
  st.claimed = true;
  if (st.hold) st.hold->MarkClaimed();
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
  RestoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done) return FailedPrecondition("restore already finished");
  if (st.cancelled) return FailedPrecondition("restore was cancelled");
  if (st.bound) return FailedPrecondition("restore slots are already bound");
  RestoreSlot& slot = *job.slot;
  std::copy(views.begin(), views.end(), slot.views.begin());
  // Scatters follow on the same stream, so they see the mapping without a host wait.
  RANGEKV_RETURN_IF_ERROR(slot.mapping.Upload(slot_mapping, *slot.stream));
  st.bound = true;
  auto self = job.shared_from_this();
  for (uint32_t s = 0; s < st.progress.stripes(); ++s) {
    if (st.progress.state(s) == StripeState::kLanded) LaunchScatter(self, s, st.bank_of[s]);
  }
  AfterProgress(job);
  return OkStatus();
}

namespace {

// An unbound restore delivers nothing, so a wait for one of its layers without a deadline would
// wait for ever (until another thread binds or cancels it, which the API does not require).
Status RefuseUnbound(const RestoreJobState& st, const char* what) {
  if (st.bound || st.cancelled) return OkStatus();
  return FailedPrecondition(std::string(what) +
                            " before BindSlots: an unbound restore delivers no layer (bind its "
                            "slots first, or Cancel/Finish it)");
}

}  // namespace

Status RestorePipeline::WaitLayer(RestoreJob& job, uint32_t layer,
                                  std::optional<std::chrono::milliseconds> timeout) {
  if (layer >= layers_) return InvalidArgument("layer " + std::to_string(layer) + " >= L");
  const auto deadline =
      std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  // Waits for `pred` until the deadline (for ever without one); false when it ran out.
  auto wait = [&](MutexLock& l, auto pred) {
    if (!timeout) {
      job_cv_.Wait(l, pred);
      return true;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    return job_cv_.WaitFor(l, std::max(left, decltype(left)::zero()), pred);
  };
  auto expired = [&] {
    return Status(StatusCode::kDeadlineExceeded, "layer " + std::to_string(layer) +
                                                     " not ready within " +
                                                     std::to_string(timeout->count()) + " ms");
  };
  Event* event = nullptr;
  {
    MutexLock l(mu_);
    const RestoreJobState& st = job.state.Locked(mu_);
    if (st.handle_done) return FailedPrecondition("restore already finished");
    // With a deadline the wait may span a bind by another thread; without one it must not
    // start unbound.
    if (!timeout) RANGEKV_RETURN_IF_ERROR(RefuseUnbound(st, "WaitLayer"));
    const bool ready =
        wait(l, [&]() REQUIRES(mu_) { return st.progress.published(layer) || st.handle_done; });
    if (!ready) return expired();
    if (st.handle_done) return FailedPrecondition("restore finished while waiting");
    event = job.slot->layer_events[layer].get();
  }
  // The layer's scatters were launched; its event completes with them (device work, bounded).
  Status device = event->Synchronize();
  MutexLock l(mu_);
  if (!device.ok()) return device;
  const RestoreJobState& st = job.state.Locked(mu_);
  if (verify_) {
    // The event says the layer's scatters ran, not that their verdicts were confirmed: a stripe
    // whose digest failed was gated off and fails in the reaper, so wait for it.
    const bool proven =
        wait(l, [&]() REQUIRES(mu_) { return st.progress.LayerProven(layer) || st.handle_done; });
    if (!proven) return expired();
  }
  return st.layer_status[layer];
}

Status RestorePipeline::StreamWaitLayer(RestoreJob& job, uint32_t layer, Stream& stream) {
  if (layer >= layers_) return InvalidArgument("layer " + std::to_string(layer) + " >= L");
  if (context_.stream_memory_ops) {
    DeviceFlag* flag = nullptr;
    uint32_t value = 0;
    {
      MutexLock l(mu_);
      const RestoreJobState& st = job.state.Locked(mu_);
      if (st.handle_done) return FailedPrecondition("restore already finished");
      // The flag of an unbound restore is never written: the stream would wait for ever.
      RANGEKV_RETURN_IF_ERROR(RefuseUnbound(st, "StreamWaitLayer"));
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
    const RestoreJobState& st = job.state.Locked(mu_);
    if (st.handle_done) return FailedPrecondition("restore already finished");
    RANGEKV_RETURN_IF_ERROR(RefuseUnbound(st, "StreamWaitLayer"));
    // An event can be waited on only once recorded: block until the layer's last scatter was
    // launched (not until it ran).
    job_cv_.Wait(l, [&]() REQUIRES(mu_) { return st.progress.published(layer) || st.handle_done; });
    if (st.handle_done) return FailedPrecondition("restore finished while waiting");
    event = job.slot->layer_events[layer].get();
    RANGEKV_RETURN_IF_ERROR(stream.WaitEvent(*event));
    return st.layer_status[layer];
  }
}

RestoreOutcome RestorePipeline::Finish(RestoreJob& job) {
  RestoreOutcome out;
  out.requested = job.tokens;
  MutexLock l(mu_);
  RestoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done) {
    out.status = FailedPrecondition("restore already finished, or the engine closed");
    out.failed.push_back(job.tokens);
    return out;
  }
  if (!st.bound && !st.cancelled) CancelLocked(job);
  job_cv_.Wait(l, [&]() REQUIRES(mu_) { return st.settled; });

  const RestoreSlot& slot = *job.slot;
  for (uint32_t s = 0; s < st.progress.stripes(); ++s) {
    const StripeState stripe = st.progress.state(s);
    if (stripe == StripeState::kFailed || stripe == StripeState::kDropped) {
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
  if (st.readiness_failed) out.failed.assign(1, job.tokens);
  uint64_t failed_tokens = 0;
  for (const TokenInterval& t : out.failed) failed_tokens += t.size();
  out.delivered_tokens = job.tokens.size() - failed_tokens;
  out.status = st.first_error;
  out.work = job.counters.Snapshot();
  st.handle_done = true;
  jobs_.ReturnSlot(job, st);
  job_cv_.NotifyAll();
  return out;
}

void RestorePipeline::Cancel(RestoreJob& job) {
  MutexLock l(mu_);
  const RestoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done || st.settled) return;
  CancelLocked(job);
}

void RestorePipeline::Abandon(RestoreJob& job) {
  MutexLock l(mu_);
  RestoreJobState& st = job.state.Locked(mu_);
  if (st.handle_done) return;
  if (!st.settled) CancelLocked(job);
  st.handle_done = true;
  jobs_.ReturnSlot(job, st);
  job_cv_.NotifyAll();
}

void RestorePipeline::CancelLocked(RestoreJob& job) {
  RestoreJobState& st = job.state.Locked(mu_);
  if (st.cancelled) return;
  st.cancelled = true;
  Count(&job, &Counters::cancelled_restores);
  if (st.first_error.ok()) st.first_error = Cancelled("restore cancelled");
  st.progress.DropPending();
  for (uint32_t s = 0; s < st.progress.stripes(); ++s) {
    if (st.progress.state(s) == StripeState::kLanded) {
      // A landed stripe's read completed: its bank holds nothing in flight.
      st.progress.Drop(s);
      ReleaseBank(st.bank_of[s]);
      st.bank_of[s] = kNoBank;
    }
    if (st.progress.state(s) == StripeState::kDropped) {
      Status& ls = st.layer_status[st.progress.LayerOf(s)];
      if (ls.ok()) ls = Cancelled("restore cancelled before this layer was delivered");
    }
  }
  AfterProgress(job);
}

// ---- banks and progress ---------------------------------------------------------------------

void RestorePipeline::ReleaseBank(uint32_t bank) {
  jobs_.ReleaseBank(bank);
  work_cv_.NotifyAll();
}

void RestorePipeline::QuarantineBank(RestoreJob& job, uint32_t bank) {
  jobs_.QuarantineBank(bank, &job.counters, "its last use could not be proven complete");
  FailUnservable();
}

void RestorePipeline::FailUnservable() {
  if (jobs_.usable_banks() != 0) return;
  // No bank is owned either (an owned bank is usable), so no stripe is reading, landed or
  // scattering: failing the pending ones settles every job. Backwards, because a job that
  // settles leaves the active list.
  const Status none = DeviceFault("every read bank is quarantined (unproven device work)");
  for (size_t k = jobs_.active_count(); k-- > 0;) {
    const std::shared_ptr<RestoreJob> job = jobs_.ServiceOrder(k);
    RestoreJobState& st = job->state.Locked(mu_);
    for (uint32_t s = 0; s < st.progress.stripes(); ++s) {
      if (st.progress.state(s) != StripeState::kPending) continue;
      Status& ls = st.layer_status[st.progress.LayerOf(s)];
      if (ls.ok()) ls = none;
    }
    const uint32_t failed = st.progress.FailPending();
    if (failed == 0) continue;
    Count(job.get(), &Counters::failed_spans, failed);
    if (st.first_error.ok()) st.first_error = none;
    AfterProgress(*job);
  }
}

void RestorePipeline::FailStripe(RestoreJob& job, uint32_t stripe, const Status& status) {
  RestoreJobState& st = job.state.Locked(mu_);
  st.progress.Fail(stripe);
  Count(&job, &Counters::failed_spans);
  Status& ls = st.layer_status[st.progress.LayerOf(stripe)];
  if (ls.ok()) ls = status;
  if (st.first_error.ok()) st.first_error = status;
}

void RestorePipeline::AfterProgress(RestoreJob& job) {
  RestoreJobState& st = job.state.Locked(mu_);
  publish_scratch_.clear();
  st.progress.TakePublishable(&publish_scratch_);
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
      st.readiness_failed = true;
      Status& ls = st.layer_status[layer];
      if (ls.ok()) ls = e;
      if (st.first_error.ok()) st.first_error = e;
    }
    Count(&job, &Counters::ready_events);
  }
  if (!publish_scratch_.empty()) job_cv_.NotifyAll();
  if (!st.settled && st.progress.finished()) {
    st.settled = true;
    // Every read and scatter of this job is proven (or failed): its leases may go.
    st.hold.reset();
    jobs_.Deactivate(job);
    Count(&job, &Counters::restores_finished);
    jobs_.ReturnSlot(job, st);
    job_cv_.NotifyAll();
  }
  work_cv_.NotifyAll();
}

// ---- read workers -------------------------------------------------------------------------

bool RestorePipeline::PickRead(ReadPick* pick) {
  // The engine's share of the medium, in stripe reads (riders included: AddRiders).
  if (reads_in_flight_ >= read_limit_) return false;
  for (size_t k = 0; k < jobs_.active_count(); ++k) {
    const std::shared_ptr<RestoreJob>& job = jobs_.ServiceOrder(k);
    RestoreJobState& st = job->state.Locked(mu_);
    if (st.cancelled || st.settled) continue;
    const auto stripe = st.progress.NextToRead();
    if (!stripe) continue;
    const BankPurpose purpose = st.bound ? BankPurpose::kScheduled : BankPurpose::kPrefetch;
    const auto bank = jobs_.AcquireBank(purpose, &job->counters, &Counters::read_bank_acquisitions);
    if (!bank) {
      if (!jobs_.AnyBankFree()) return false;
      continue;  // prefetch budget spent; a bound job may still take a bank
    }
    st.progress.Issue(*stripe);
    if (!st.bound) Count(job.get(), &Counters::prefetched_stripes);
    pick->job = job;
    pick->stripe = *stripe;
    pick->bank = *bank;
    pick->riders = 0;
    jobs_.Served(k);
    ++reads_in_flight_;
    AddRiders(*job, st, purpose, pick);
    return true;
  }
  return false;
}

void RestorePipeline::AddRiders(RestoreJob& job, RestoreJobState& st, BankPurpose purpose,
                                ReadPick* pick) {
  static_assert(ReadPick::kMaxRiders + 1 == RemoteTier::kMaxSpansPerGet);
  const std::vector<Span>& plan = job.slot->plan;
  const Span& first = plan[pick->stripe];
  if (first.file_index != kRemoteFileIndex || context_.remote == nullptr) return;
  const uint32_t most = std::min(context_.remote->SpansPerGet(first) - 1, ReadPick::kMaxRiders);
  const Span* prev = &first;
  // Each rider is a stripe read against read_limit_: with the default cap (read_workers) and
  // banks (twice the workers) every GET then carries the same number of spans, so a restore's
  // GET count depends on its bytes only.
  while (pick->riders < most && reads_in_flight_ < read_limit_) {
    const auto next = st.progress.NextToRead();
    if (!next || !context_.remote->JoinsGet(first, *prev, plan[*next])) return;
    const auto bank = jobs_.AcquireBank(purpose, &job.counters, &Counters::read_bank_acquisitions);
    if (!bank) return;  // the GET goes with the spans it has
    st.progress.Issue(*next);
    if (!st.bound) Count(&job, &Counters::prefetched_stripes);
    pick->rider_stripe[pick->riders] = *next;
    pick->rider_bank[pick->riders] = *bank;
    ++pick->riders;
    ++reads_in_flight_;
    prev = &plan[*next];
  }
}

Status RestorePipeline::PrepareReads(const Span& span, uint8_t* buf, IoBatch& batch) const {
  RANGEKV_RETURN_IF_ERROR(batch.Clear());
  File* file = context_.store->pack_file().file_at(span.file_index);
  if (file == nullptr) return Internal("span names an unknown file");
  if (context_.options->tuning.ablations.read_issue == Ablations::ReadIssue::kStripe) {
    return batch.Add({file, span.file_offset, buf, span.length_bytes, IoOp::kRead});
  }
  // read_issue=object: the same bytes, cut at logical object boundaries of the path (what a
  // per-object reader would issue), each piece aligned for direct I/O.
  const uint64_t ot = context_.options->tuning.ablations.object_tokens;
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

Status RestorePipeline::CheckBlocksInRead(const Span& span,
                                          const store::DigestBlocks& blocks) const {
  const uint64_t d = context_.integrity->block_tokens();
  const uint64_t s = context_.geometry.token_bytes;
  // Stripe byte offset of the buffer's first byte (the read's file offset in its stripe).
  const uint64_t buffer_at = span.pack_token_begin * s - span.payload_offset_bytes;
  for (uint64_t i = 0; i < blocks.count; ++i) {
    const uint64_t b = blocks.first_block + i;
    const uint64_t lo = b * d * s;
    const uint64_t hi = std::min((b + 1) * d, blocks.stored_tokens) * s;
    if (lo < buffer_at || hi > buffer_at + span.length_bytes) {
      return OutOfRange("digest block " + std::to_string(b) + " of pack slot " +
                        std::to_string(span.pack_slot) + " is not wholly inside the read");
    }
  }
  return OkStatus();
}

// Offsets in a bank's verdict buffers (Bank::verdict_host / verdict_device).
namespace {
uint64_t ComputedAt(uint64_t capacity) { return capacity * sizeof(uint64_t); }
uint64_t MismatchAt(uint64_t capacity) { return 2 * capacity * sizeof(uint64_t); }
}  // namespace

kernels::DigestArgs RestorePipeline::DigestGroup(const Span& span, const Bank& bank,
                                                 const store::DigestBlocks& blocks, uint64_t i,
                                                 uint64_t* digests, const uint64_t* expected,
                                                 uint32_t* mismatch) const {
  const uint64_t d = context_.integrity->block_tokens();
  const uint64_t s = context_.geometry.token_bytes;
  const uint64_t buffer_at = span.pack_token_begin * s - span.payload_offset_bytes;
  kernels::DigestArgs args;
  args.seed = context_.integrity->digest_seed();
  args.digests = digests + i;
  if (expected != nullptr) {
    args.expected = expected + i;
    args.mismatch = mismatch;
  }
  args.num_spans =
      static_cast<uint32_t>(std::min<uint64_t>(kernels::kMaxDigestSpans, blocks.count - i));
  for (uint32_t k = 0; k < args.num_spans; ++k) {
    const uint64_t b = blocks.first_block + i + k;
    const uint64_t lo = b * d * s;
    const uint64_t hi = std::min((b + 1) * d, blocks.stored_tokens) * s;
    args.spans[k] = {bank.device.bytes() + (lo - buffer_at), hi - lo};
  }
  return args;
}

Status RestorePipeline::EnqueueDigests(RestoreJob& job, Stream& stream, const Span& span,
                                       const Bank& bank, const store::DigestBlocks& blocks,
                                       uint64_t* digests, const uint64_t* expected,
                                       uint32_t* mismatch) {
  for (uint64_t i = 0; i < blocks.count; i += kernels::kMaxDigestSpans) {
    RANGEKV_RETURN_IF_ERROR(
        stream.Digest(DigestGroup(span, bank, blocks, i, digests, expected, mismatch)));
    Count(&job, &Counters::digest_launches);
  }
  return OkStatus();
}

RestorePipeline::VerdictWords RestorePipeline::VerdictOf(Bank& bank) const {
  uint8_t* dev = bank.verdict_device.bytes();
  return {reinterpret_cast<uint64_t*>(dev + ComputedAt(verdict_capacity_)),
          reinterpret_cast<const uint64_t*>(dev),
          reinterpret_cast<uint32_t*>(dev + MismatchAt(verdict_capacity_))};
}

Status RestorePipeline::EnqueueVerifiedScatters(RestoreJob& job, Stream& stream, const Span& span,
                                                Bank& bank, const kernels::ScatterArgs& scatter) {
  const store::DigestBlocks& blocks = bank.verdict_blocks;
  const VerdictWords w = VerdictOf(bank);
  const uint64_t d = context_.integrity->block_tokens();
  const uint64_t s = context_.geometry.token_bytes;
  for (uint64_t i = 0; i < blocks.count; i += kernels::kMaxDigestSpans) {
    kernels::VerifiedScatterArgs args;
    args.digest = DigestGroup(span, bank, blocks, i, w.computed, w.expected, w.mismatch);
    // The group's blocks cover pack tokens [b0 * D, end); the scatter's row r is pack token
    // span.pack_token_begin + r. Its rows inside the group go with it.
    const uint64_t b0 = blocks.first_block + i;
    const uint64_t end = std::min((b0 + args.digest.num_spans) * d, blocks.stored_tokens);
    const uint64_t first = std::max(b0 * d, span.pack_token_begin) - span.pack_token_begin;
    const uint64_t last = std::min<uint64_t>(
        std::max(end, span.pack_token_begin) - span.pack_token_begin, scatter.num_tokens);
    Count(&job, &Counters::digest_launches);
    if (first >= last) {  // no row of the scatter in these blocks: their digests still count
      RANGEKV_RETURN_IF_ERROR(stream.Digest(args.digest));
      continue;
    }
    args.scatter = scatter;
    args.scatter.stripe = scatter.stripe + first * s;
    args.scatter.slots = scatter.slots + first;
    args.scatter.num_tokens = static_cast<uint32_t>(last - first);
    RANGEKV_RETURN_IF_ERROR(stream.VerifiedScatter(args));
    Count(&job, &Counters::scatter_launches);
  }
  return OkStatus();
}

Status RestorePipeline::PlanVerdict(const Span& span, Bank& bank) {
  bank.verdict_blocks = {};
  RANGEKV_ASSIGN_OR_RETURN(const store::DigestBlocks blocks, context_.integrity->PlanVerify(span));
  if (blocks.count == 0 || blocks.count > verdict_capacity_) {
    return Internal("verify plan of " + std::to_string(blocks.count) + " digest blocks");
  }
  RANGEKV_RETURN_IF_ERROR(CheckBlocksInRead(span, blocks));
  // The bank's last use is proven (its fence, or it was never used), so nothing still copies
  // from this buffer.
  uint64_t* expected = reinterpret_cast<uint64_t*>(bank.verdict_host.data());
  RANGEKV_RETURN_IF_ERROR(context_.integrity->Expected(
      span, blocks.first_block, std::span<uint64_t>(expected, blocks.count)));
  bank.verdict_blocks = blocks;
  return OkStatus();
}

Status RestorePipeline::EnqueueVerdictInputs(Stream& stream, Bank& bank) {
  const VerdictWords w = VerdictOf(bank);
  RANGEKV_RETURN_IF_ERROR(stream.CopyHostToDevice(bank.verdict_device.data(),
                                                  bank.verdict_host.data(),
                                                  bank.verdict_blocks.count * sizeof(uint64_t)));
  return stream.Fill(w.mismatch, 0, sizeof(uint32_t));
}

Status RestorePipeline::EnqueueVerdictCopyBack(Stream& stream, Bank& bank) {
  // The computed digests and the mismatch word, for the reaper's confirmation.
  const uint64_t at = ComputedAt(verdict_capacity_);
  return stream.CopyDeviceToHost(bank.verdict_host.data() + at, bank.verdict_device.bytes() + at,
                                 MismatchAt(verdict_capacity_) + sizeof(uint32_t) - at);
}

Status RestorePipeline::ConfirmVerdict(RestoreJob& job, const Span& span, const Bank& bank) {
  const store::DigestBlocks& blocks = bank.verdict_blocks;
  const uint8_t* host = bank.verdict_host.data();
  Count(&job, &Counters::verified_spans);
  bool mismatch_found = false;
  Status compared = context_.integrity->Verify(
      span, blocks.first_block,
      std::span<const uint64_t>(
          reinterpret_cast<const uint64_t*>(host + ComputedAt(verdict_capacity_)), blocks.count),
      &mismatch_found);
  if (mismatch_found) {
    Count(&job, &Counters::checksum_failures);
    context_.integrity->OnCorruption(span);
  }
  RANGEKV_RETURN_IF_ERROR(compared);
  uint32_t mismatch = 0;
  std::memcpy(&mismatch, host + MismatchAt(verdict_capacity_), sizeof mismatch);
  if (mismatch != 0) {
    // The host found every digest equal, the device did not: its scatter was skipped. Never
    // expected; fail closed rather than count tokens that were not written.
    return Internal("device digest verdict disagrees with the host's comparison");
  }
  return OkStatus();
}

void RestorePipeline::ReadWorker(uint32_t worker) {
  IoBatch& batch = *batches_[worker];
  while (true) {
    ReadPick pick;
    {
      MutexLock l(mu_);
      while (!PickRead(&pick)) {
        if (jobs_.closing()) return;
        work_cv_.Wait(l);
      }
    }
    // The plan and the bank are this worker's until CompleteRead: read them without the lock.
    const Span& span = pick.job->slot->plan[pick.stripe];
    uint8_t* buf = banks_[pick.bank].io_buffer();
    uint64_t bytes = 0;
    const uint64_t submit_ns = SteadyNs();
    Status status = OkStatus();
    std::array<uint64_t, ReadPick::kMaxRiders> rider_bytes{};
    if (span.file_index == kRemoteFileIndex) {
      // The cluster tier: one GET for the span and its riders (consecutive layers of the
      // object's part), or ceil(span / get_bytes) GETs in parallel into the same bank.
      std::array<const Span*, ReadPick::kMaxRiders + 1> spans{&span};
      std::array<uint8_t*, ReadPick::kMaxRiders + 1> bufs{buf};
      for (uint32_t i = 0; i < pick.riders; ++i) {
        spans[i + 1] = &pick.job->slot->plan[pick.rider_stripe[i]];
        bufs[i + 1] = banks_[pick.rider_bank[i]].io_buffer();
      }
      uint64_t gets = 0;
      status = context_.remote != nullptr
                   ? context_.remote->Read(std::span(spans).first(pick.riders + 1),
                                           std::span(bufs).first(pick.riders + 1), &gets)
                   : Internal("a remote span without a cluster tier");
      Count(pick.job.get(), &Counters::native_reads, gets);
      if (status.ok()) {
        bytes = span.length_bytes;
        for (uint32_t i = 0; i < pick.riders; ++i) rider_bytes[i] = spans[i + 1]->length_bytes;
      }
      Count(pick.job.get(), &Counters::restore_read_ns, SteadyNs() - submit_ns);
    } else {
      status = PrepareReads(span, buf, batch);
      if (status.ok()) status = context_.read_io->Submit(batch);
    }
    if (status.ok() && span.file_index != kRemoteFileIndex) {
      Count(pick.job.get(), &Counters::native_reads, batch.size());
      batch.Wait();
      status = batch.status();
      bytes = batch.bytes_moved();
      Count(pick.job.get(), &Counters::restore_read_ns, SteadyNs() - submit_ns);
    }
    std::array<Status, ReadPick::kMaxRiders> rider_status;
    rider_status.fill(status);
    if (status.ok() && verify_) {
      const uint64_t plan_start_ns = SteadyNs();
      status = PlanVerdict(span, banks_[pick.bank]);
      for (uint32_t i = 0; i < pick.riders; ++i) {
        rider_status[i] =
            PlanVerdict(pick.job->slot->plan[pick.rider_stripe[i]], banks_[pick.rider_bank[i]]);
      }
      Count(pick.job.get(), &Counters::restore_verify_ns, SteadyNs() - plan_start_ns);
    }
    MutexLock l(mu_);
    reads_in_flight_ -= 1 + pick.riders;
    CompleteRead(pick, status, bytes);
    for (uint32_t i = 0; i < pick.riders; ++i) {
      ReadPick rider;
      rider.job = pick.job;
      rider.stripe = pick.rider_stripe[i];
      rider.bank = pick.rider_bank[i];
      CompleteRead(rider, rider_status[i], rider_bytes[i]);
    }
  }
}

void RestorePipeline::CompleteRead(const ReadPick& pick, const Status& status, uint64_t bytes) {
  RestoreJob& job = *pick.job;
  RestoreJobState& st = job.state.Locked(mu_);
  Count(&job, &Counters::bytes_read, bytes);
  if (!status.ok()) {
    FailStripe(job, pick.stripe, status);
    // The I/O engine returned the completion: nothing writes the bank any more.
    ReleaseBank(pick.bank);
  } else if (st.cancelled) {
    st.progress.Drop(pick.stripe);
    Status& ls = st.layer_status[st.progress.LayerOf(pick.stripe)];
    if (ls.ok()) ls = Cancelled("restore cancelled before this layer was delivered");
    ReleaseBank(pick.bank);
  } else if (!st.bound) {
    st.progress.Land(pick.stripe);
    st.bank_of[pick.stripe] = pick.bank;
  } else {
    LaunchScatter(pick.job, pick.stripe, pick.bank);
  }
  AfterProgress(job);
}

void RestorePipeline::LaunchScatter(const std::shared_ptr<RestoreJob>& job_ptr, uint32_t stripe,
                                    uint32_t bank) {
  RestoreJob& job = *job_ptr;
  RestoreJobState& st = job.state.Locked(mu_);
  RestoreSlot& slot = *job.slot;
  const Span& span = slot.plan[stripe];
  const uint32_t layer = st.progress.LayerOf(stripe);
  Bank& b = banks_[bank];
  Stream& stream = *slot.stream;
  jobs_.PromoteBank(bank);

  Status e = OkStatus();
  // With the device verdict on a staged device, the bank's own stream copies the stripe up,
  // digests, compares and copies the results back, and the job's stream waits for it on the
  // device (no host wait): stripes of one job are copied and verified side by side, and the
  // job's stream only scatters. Otherwise all of it goes on the job's stream in order.
  Stream& prep = b.verdict_stream != nullptr ? *b.verdict_stream : stream;
  // On one stream, the digests and the scatter go as verified scatters (per digest span, the
  // rows of the spans that matched: HostDevice reads each span once for both); beside a
  // verdict stream, digests there and one scatter gated on the stripe's mismatch word here.
  const bool verified_scatter = verify_ && &prep == &stream;
  if (!b.staging.empty()) {
    e = prep.CopyHostToDevice(b.device.data(), b.staging.data(), span.length_bytes);
    if (e.ok()) Count(&job, &Counters::h2d_copies);
  }
  if (e.ok() && verify_) e = EnqueueVerdictInputs(prep, b);
  if (e.ok() && verify_ && !verified_scatter) {
    const VerdictWords w = VerdictOf(b);
    e = EnqueueDigests(job, prep, span, b, b.verdict_blocks, w.computed, w.expected, w.mismatch);
    if (e.ok()) e = EnqueueVerdictCopyBack(prep, b);
  }
  if (e.ok() && &prep != &stream) {
    e = prep.Record(*b.verified);
    if (e.ok()) e = stream.WaitEvent(*b.verified);
  }
  if (e.ok()) {
    kernels::ScatterArgs args;
    args.dst = slot.views[layer];
    args.stripe = b.device.bytes() + span.payload_offset_bytes;
    args.slots = slot.mapping.slots() + (span.path_token_begin - job.tokens.begin);
    args.num_tokens = static_cast<uint32_t>(span.tokens());
    if (verified_scatter) {
      e = EnqueueVerifiedScatters(job, stream, span, b, args);
      if (e.ok()) e = EnqueueVerdictCopyBack(stream, b);
    } else {
      if (verify_) args.skip_if_set = VerdictOf(b).mismatch;
      e = stream.Scatter(args);
      if (e.ok()) Count(&job, &Counters::scatter_launches);
    }
  }
  if (e.ok()) e = stream.Record(*b.fence);
  st.progress.LaunchScatter(stripe);
  st.bank_of[stripe] = bank;
  if (!e.ok()) {
    // Part of the work may be enqueued with nothing to prove its end: keep the bank out.
    FailStripe(job, stripe, e);
    QuarantineBank(job, bank);
    return;
  }
  RANGEKV_CHECK(fence_count_ < fences_.size());
  fences_[(fence_head_ + fence_count_) % fences_.size()] = {job_ptr, stripe, bank, SteadyNs()};
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
        if (jobs_.closing()) return;
        reaper_cv_.Wait(l);
      }
      entry = std::move(fences_[fence_head_]);
      fence_head_ = (fence_head_ + 1) % fences_.size();
      --fence_count_;
      layer = entry.job->state.Locked(mu_).progress.LayerOf(entry.stripe);
    }
    // The bank's fence was recorded right after its scatter on the job's stream; it is not
    // re-recorded before this entry releases the bank.
    Status proven = banks_[entry.bank].fence->Synchronize();
    if (proven.ok() && context_.hooks && context_.hooks->scatter_fence_fault) {
      proven = context_.hooks->scatter_fence_fault(entry.bank, layer);
    }
    Status verdict = OkStatus();
    if (proven.ok() && verify_) {
      // The fence proved the copies back; the plan and the bank are this entry's until the
      // bank is released below.
      const uint64_t confirm_start_ns = SteadyNs();
      verdict = ConfirmVerdict(*entry.job, entry.job->slot->plan[entry.stripe], banks_[entry.bank]);
      Count(entry.job.get(), &Counters::restore_verify_ns, SteadyNs() - confirm_start_ns);
    }
    MutexLock l(mu_);
    RestoreJob& job = *entry.job;
    RestoreJobState& st = job.state.Locked(mu_);
    if (proven.ok() && !verdict.ok()) {
      // The scatter was gated off (or its tokens are not vouched for): the bank is proven.
      FailStripe(job, entry.stripe, verdict);
      ReleaseBank(entry.bank);
    } else if (proven.ok()) {
      Count(&job, &Counters::restore_deliver_ns, SteadyNs() - entry.enqueued_ns);
      st.progress.Prove(entry.stripe);
      ReleaseBank(entry.bank);
    } else {
      FailStripe(job, entry.stripe, proven.WithContext("scatter completion unproven"));
      QuarantineBank(job, entry.bank);
    }
    st.bank_of[entry.stripe] = kNoBank;
    // A host wait on a layer (WaitLayer) also waits for its stripes' confirmations.
    if (verify_) job_cv_.NotifyAll();
    AfterProgress(job);
  }
}

// ---- shutdown and introspection -------------------------------------------------------------

void RestorePipeline::DrainAll() {
  MutexLock l(mu_);
  for (RestoreJob* owner : jobs_.owners()) {
    if (owner == nullptr) continue;
    RestoreJobState& st = owner->state.Locked(mu_);
    if (!st.settled) CancelLocked(*owner);
    st.handle_done = true;  // surviving handles become inert
  }
  job_cv_.NotifyAll();
  job_cv_.Wait(l, [&]() REQUIRES(mu_) { return jobs_.active().empty() && fence_count_ == 0; });
  for (RestoreJob* owner : jobs_.owners()) {
    if (owner != nullptr) jobs_.ReturnSlot(*owner, owner->state.Locked(mu_));
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
    jobs_.Close();
    stopped_ = true;
    work_cv_.NotifyAll();
    reaper_cv_.NotifyAll();
  }
  for (std::thread& t : workers_) t.join();
  if (reaper_.joinable()) reaper_.join();
  workers_.clear();
  // Readiness records and flag writes of drained jobs may still be queued on the job streams.
  for (auto& slot : slots_) {
    if (slot->stream == nullptr) continue;
    Status s = slot->stream->Synchronize();
    if (!s.ok()) Log(LogLevel::kWarning, "restore stream at shutdown: " + s.ToString());
  }
}

uint32_t RestorePipeline::SetReadShare(uint32_t readers) {
  const uint32_t workers = context_.options->tuning.read_workers;
  const uint32_t r = std::max<uint32_t>(readers, 1);
  MutexLock l(mu_);
  read_limit_ = std::max<uint32_t>((workers + r - 1) / r, 1);
  work_cv_.NotifyAll();  // a raised limit frees waiting workers
  return read_limit_;
}

PoolState RestorePipeline::pool_state() const {
  MutexLock l(mu_);
  return jobs_.state();
}

}  // namespace rangekv::engine_internal
