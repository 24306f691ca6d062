// The public shells (include/rangekv/engine.h) over EngineCore and the pipelines.
#include "rangekv/engine.h"

#include "engine/engine_core.h"
#include "store/service_store.h"

namespace rangekv {

using engine_internal::EngineAccess;
using engine_internal::EngineCore;

// ---- Engine -------------------------------------------------------------------------------

Engine::Engine(std::shared_ptr<EngineCore> core) : core_(std::move(core)) {}

Engine::~Engine() {
  Status s = Close();
  s.IgnoreError();  // logged by the core
}

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  // The production open: nothing injected (tests inject through testing/engine_internals.h).
  RANGEKV_ASSIGN_OR_RETURN(auto core, EngineCore::Open(options, {}));
  return EngineAccess::Wrap(std::move(core));
}

const Geometry& Engine::geometry() const { return core_->geometry(); }
const NamespaceId& Engine::namespace_id() const { return core_->ns(); }
const EngineOptions& Engine::options() const { return core_->options(); }
std::string Engine::DescribeBackends() const { return core_->DescribeBackends(); }
const StoreRecovery& Engine::recovery() const { return core_->recovery(); }

Result<LookupResult> Engine::Lookup(const RequestEnvelope& envelope,
                                    std::span<const int32_t> tokens,
                                    uint64_t reuse_granularity_tokens, uint64_t local_tokens) {
  return core_->Lookup(envelope, tokens, reuse_granularity_tokens, local_tokens);
}

void Engine::ReleaseRequest(const RequestEnvelope& envelope) { core_->ReleaseRequest(envelope); }

Result<RestoreHandle> Engine::StartRestore(const RestoreRequest& request) {
  return core_->StartRestore(request);
}

Result<StoreHandle> Engine::BeginStore(const StoreRequest& request) {
  return core_->BeginStore(request);
}

Result<DeviceStreamRef> Engine::CreateStream() { return core_->CreateStream(); }

Result<DeviceStreamRef> Engine::WrapNativeStream(void* native_stream) {
  return core_->WrapNativeStream(native_stream);
}

Status Engine::SynchronizeStream(DeviceStreamRef stream) {
  RANGEKV_ASSIGN_OR_RETURN(Stream * s, core_->FindStream(stream));
  return s->Synchronize();
}

EngineStats Engine::GetStats() const { return core_->GetStats(); }
Engine::ReadShare Engine::read_share() const { return core_->read_share(); }
RemoteTierStats Engine::remote_stats() const { return core_->remote_stats(); }

std::vector<RemovedRange> Engine::DrainRemovedRanges(size_t max) {
  return core_->DrainRemovedRanges(max);
}

Status Engine::Close() { return core_->Close(); }

// ---- RestoreHandle ------------------------------------------------------------------------

RestoreHandle::RestoreHandle(std::shared_ptr<EngineCore> core,
                             std::shared_ptr<engine_internal::RestoreJob> job)
    : core_(std::move(core)), job_(std::move(job)) {}

RestoreHandle::RestoreHandle(RestoreHandle&&) noexcept = default;

RestoreHandle& RestoreHandle::operator=(RestoreHandle&& other) noexcept {
  if (this != &other) {
    if (job_ != nullptr) core_->restore().Abandon(*job_);
    core_ = std::move(other.core_);
    job_ = std::move(other.job_);
  }
  return *this;
}

RestoreHandle::~RestoreHandle() {
  if (job_ != nullptr) core_->restore().Abandon(*job_);
}

TokenInterval RestoreHandle::tokens() const { return job_ ? job_->tokens : TokenInterval{}; }

Status RestoreHandle::BindSlots(const PagedKv& kv, std::span<const int64_t> slot_mapping) {
  if (job_ == nullptr) return FailedPrecondition("empty restore handle");
  return core_->restore().Bind(*job_, kv, slot_mapping);
}

Status RestoreHandle::WaitLayer(uint32_t layer) {
  if (job_ == nullptr) return FailedPrecondition("empty restore handle");
  return core_->restore().WaitLayer(*job_, layer);
}

Status RestoreHandle::WaitLayer(uint32_t layer, std::chrono::milliseconds timeout) {
  if (job_ == nullptr) return FailedPrecondition("empty restore handle");
  return core_->restore().WaitLayer(*job_, layer, timeout);
}

Status RestoreHandle::StreamWaitLayer(uint32_t layer, DeviceStreamRef model_stream) {
  if (job_ == nullptr) return FailedPrecondition("empty restore handle");
  RANGEKV_ASSIGN_OR_RETURN(Stream * stream, core_->FindStream(model_stream));
  return core_->restore().StreamWaitLayer(*job_, layer, *stream);
}

RestoreOutcome RestoreHandle::Finish() {
  if (job_ == nullptr) {
    RestoreOutcome out;
    out.status = FailedPrecondition("empty restore handle");
    return out;
  }
  RestoreOutcome out = core_->restore().Finish(*job_);
  job_.reset();
  return out;
}

void RestoreHandle::Cancel() {
  if (job_ != nullptr) core_->restore().Cancel(*job_);
}

// ---- StoreHandle --------------------------------------------------------------------------

StoreHandle::StoreHandle(std::shared_ptr<EngineCore> core,
                         std::shared_ptr<engine_internal::StoreJob> job)
    : core_(std::move(core)), job_(std::move(job)) {}

StoreHandle::StoreHandle(StoreHandle&&) noexcept = default;

StoreHandle& StoreHandle::operator=(StoreHandle&& other) noexcept {
  if (this != &other) {
    if (job_ != nullptr) core_->stores().Abandon(*job_);
    core_ = std::move(other.core_);
    job_ = std::move(other.job_);
  }
  return *this;
}

StoreHandle::~StoreHandle() {
  if (job_ != nullptr) core_->stores().Abandon(*job_);
}

StoreDisposition StoreHandle::disposition() const {
  return job_ ? job_->disposition : StoreDisposition::kAlreadyCached;
}

TokenInterval StoreHandle::stored_tokens() const {
  return job_ ? core_->stores().Stored(*job_) : TokenInterval{};
}

Status StoreHandle::LayerProduced(uint32_t layer, DeviceStreamRef producer) {
  if (job_ == nullptr) return FailedPrecondition("empty store handle");
  Stream* stream = nullptr;
  if (!producer.null()) {
    RANGEKV_ASSIGN_OR_RETURN(stream, core_->FindStream(producer));
  }
  return core_->stores().LayerProduced(*job_, layer, stream);
}

bool StoreHandle::extracted() const { return job_ == nullptr || core_->stores().Extracted(*job_); }

Status StoreHandle::WaitExtracted() {
  if (job_ == nullptr) return FailedPrecondition("empty store handle");
  return core_->stores().WaitExtracted(*job_);
}

Status StoreHandle::WaitExtracted(std::chrono::milliseconds timeout) {
  if (job_ == nullptr) return FailedPrecondition("empty store handle");
  return core_->stores().WaitExtracted(*job_, timeout);
}

StoreOutcome StoreHandle::Finish(StoreWait wait) {
  if (job_ == nullptr) {
    StoreOutcome out;
    out.status = FailedPrecondition("empty store handle");
    return out;
  }
  StoreOutcome out = core_->stores().Finish(*job_, wait);
  const store::ServiceStore* service = core_->store().service();
  const bool every_publish =
      service != nullptr ? service->hello().every_publish
                         : core_->options().durability.mode == Durability::Mode::kEveryPublish;
  if (wait == StoreWait::kUntilVisible && out.visible && every_publish) {
    // The directory has published; the acknowledgement is the journal's commit of it.
    const Status durable = core_->store().AwaitDurable(job_->reservation_id);
    out.durable = durable.ok();
    if (!durable.ok() && out.status.ok()) {
      out.status = durable.WithContext("store visible but not durable");
    }
  }
  job_.reset();
  return out;
}

}  // namespace rangekv
