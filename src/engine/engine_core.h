// EngineCore: what an Engine is (include/rangekv/engine.h): the resolved options, the device,
// the store (pack file + directory), the two I/O engines, the restore and store pipelines and
// the work-unit counters, plus the scheduler-side bookkeeping of lookup-time prefetches.
// Engine, RestoreHandle and StoreHandle are thin forwarding shells over it; handles keep it
// alive (shared_ptr), so a handle outliving its Engine stays safe (inert after Close).
//
// Prefetch bookkeeping: Lookup() with prefetch=lookup starts an unclaimed restore job keyed by
// request id, sharing a TicketHold with the ticket. StartRestore() claims the ticket in the
// directory and adopts that job when it restores exactly the prefetched tokens; otherwise the
// prefetch is cancelled (its reads drain under the shared hold) and a new job starts.
// ReleaseRequest() cancels an unadopted prefetch; the ticket is cancelled in the directory
// only when the prefetch's reads drained (the hold's destructor).
//
// Thread-safety: all methods are thread-safe. mu_ guards the prefetch map, caller streams and
// caller buffers. Lock order: mu_ -> pipeline mutexes -> Directory's mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "device/device.h"
#include "engine/engine_context.h"
#include "engine/options.h"
#include "engine/remote_tier.h"
#include "engine/restore_pipeline.h"
#include "engine/stats.h"
#include "engine/store_pipeline.h"
#include "io/io_engine.h"
#include "rangekv/engine.h"
#include "service_proto/read_gate.h"
#include "store/store_state.h"

namespace rangekv::engine_internal {

// What tests can add to an engine at Open (Engine::Open passes an empty one; tests pass theirs
// through OpenEngineForTesting, testing/engine_internals.h).
struct EngineInternalConfig {
  Device* device = nullptr;  // borrowed, outlives the engine; overrides options.device
  EngineTestHooks hooks;
  // Borrowed; replaces the store's own (StoreIntegrity over the persistence layer).
  store::PayloadIntegrity* integrity = nullptr;
  // Take the paths a CUDA device without GDS takes (pinned staging, H2D / D2H copies) even on a
  // device whose memory the host can address, so CI exercises them on HostDevice.
  bool force_staging = false;
  // Take the event path of StreamWaitLayer (a device without stream memory operations).
  bool disable_stream_memory_ops = false;
  // Digest block size in tokens for a store whose index starts empty (a loaded snapshot keeps
  // its own); 0 = the default (about 1 MiB). Small blocks let small test geometries have
  // several blocks per stripe.
  uint64_t digest_block_tokens = 0;
};

class EngineCore : public std::enable_shared_from_this<EngineCore> {
 public:
  static Result<std::shared_ptr<EngineCore>> Open(const EngineOptions& options,
                                                  const EngineInternalConfig& config);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  const EngineOptions& options() const { return options_; }
  const Geometry& geometry() const { return geometry_; }
  const NamespaceId& ns() const { return store_->ns(); }
  std::string DescribeBackends() const { return backends_; }
  const StoreRecovery& recovery() const { return recovery_; }
  Device& device() const { return *device_; }
  store::StoreState& store() const { return *store_; }
  RestorePipeline& restore() const { return *restore_; }
  StorePipeline& stores() const { return *stores_; }

  Result<LookupResult> Lookup(const RequestEnvelope& envelope, std::span<const int32_t> tokens,
                              uint64_t reuse_granularity_tokens, uint64_t local_tokens)
      EXCLUDES(mu_);
  void ReleaseRequest(const RequestEnvelope& envelope) EXCLUDES(mu_);
  Result<RestoreHandle> StartRestore(const RestoreRequest& request) EXCLUDES(mu_);
  Result<StoreHandle> BeginStore(const StoreRequest& request) EXCLUDES(mu_);
  // The cluster tier's counters (Engine::remote_stats).
  RemoteTierStats remote_stats() const;

  Result<DeviceStreamRef> CreateStream() EXCLUDES(mu_);
  Result<DeviceStreamRef> WrapNativeStream(void* native_stream) EXCLUDES(mu_);
  // The engine-owned stream `ref` names; kInvalidArgument for anything else.
  Result<Stream*> FindStream(DeviceStreamRef ref) const EXCLUDES(mu_);
  // Device memory for paged KV in tests and tools (the serving engine brings its own), owned
  // until Close() and counted apart from payload allocations; synchronous copies to and from
  // it. Reached through testing/engine_internals.h, not through the public Engine.
  Result<void*> AllocateDeviceMemory(uint64_t bytes) EXCLUDES(mu_);
  Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) EXCLUDES(mu_);
  Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) EXCLUDES(mu_);

  // Engine::DrainRemovedRanges.
  std::vector<RemovedRange> DrainRemovedRanges(size_t max) const;
  EngineStats GetStats() const;
  Engine::ReadShare read_share() const EXCLUDES(share_mu_);
  Status Close() EXCLUDES(mu_);

 private:
  struct Prefetch {
    std::shared_ptr<RestoreJob> job;
    std::shared_ptr<TicketHold> hold;
  };
  static constexpr size_t kMaxCallerStreams = 64;
  static constexpr size_t kMaxCallerBuffers = 4096;

  EngineCore() = default;
  Status Init(const EngineOptions& options, const EngineInternalConfig& config);
  // `split_bytes`: IoEngineOptions::split_bytes (0: whole spans). `auto_posix`: why kAuto
  // should take the posix pool here rather than uring (empty: uring when it works).
  Result<std::unique_ptr<IoEngine>> MakeIo(uint32_t workers, uint32_t max_queued_batches,
                                           uint64_t split_bytes, const std::string& auto_posix,
                                           std::string* description);
  // Settles options_.io_split_bytes to the read engine's split (probing the medium for
  // kIoSplitAuto, following `read_plan` for kIoSplitFillReads) and *write_split to the write
  // engine's (0: none); returns how, for DescribeBackends(). REQUIRES: options_.read_io_threads
  // resolved.
  std::string ResolveIoSplit(const ReadIoPlan& read_plan, uint64_t* write_split);
  // After a lookup or claim through a store service: divides the read concurrency by the
  // readers its reply reported, when that changed (EngineTuning::share_reads).
  void ShareReads() EXCLUDES(share_mu_);
  // Hands the store service's read gate to the read I/O engine when the service store has a
  // new one (a new session) (EngineTuning::read_gate).
  void FollowReadGate() EXCLUDES(share_mu_);

  // A restore whose ticket reaches the cluster tier (remote_tier.h): remote claim, local claim
  // of the local part, one job over both.
  Result<RestoreHandle> StartCompositeRestore(const RestoreRequest& request,
                                              const CompositeTicket& ticket) EXCLUDES(mu_);

  EngineOptions options_;
  Geometry geometry_;
  std::string backends_;
  StoreRecovery recovery_;
  EngineTestHooks hooks_;
  Counters counters_;
  std::unique_ptr<Device> owned_device_;
  Device* device_ = nullptr;
  std::unique_ptr<store::StoreState> store_;
  std::unique_ptr<IoEngine> read_io_;
  std::unique_ptr<IoEngine> write_io_;
  EngineContext context_;
  // The cluster tier (null when off): declared before the pipelines, destroyed after them.
  std::unique_ptr<RemoteTier> remote_;
  std::unique_ptr<RoutingIntegrity> routing_;
  std::unique_ptr<RestorePipeline> restore_;
  std::unique_ptr<StorePipeline> stores_;

  mutable Mutex share_mu_;  // taken before the restore pipeline's lock, never with mu_
  Engine::ReadShare share_ GUARDED_BY(share_mu_);
  uint64_t gate_generation_ GUARDED_BY(share_mu_) = 0;
  std::shared_ptr<service::SharedReadGate> gate_ GUARDED_BY(share_mu_);
  bool gate_ignored_logged_ GUARDED_BY(share_mu_) = false;

  mutable Mutex mu_;
  bool closed_ GUARDED_BY(mu_) = false;
  // Serialises Close() calls: the second waits for the first and returns its status.
  Mutex close_mu_;  // taken before mu_
  bool close_done_ GUARDED_BY(close_mu_) = false;
  Status close_status_ GUARDED_BY(close_mu_);
  std::map<std::string, Prefetch> prefetches_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Stream>> caller_streams_ GUARDED_BY(mu_);
  std::vector<DeviceBuffer> caller_buffers_ GUARDED_BY(mu_);
  std::unique_ptr<Stream> copy_stream_ GUARDED_BY(mu_);  // caller copies, serialised by mu_
};

// Access to an Engine's internals: Engine::Open wraps a core with it, and the test-support
// library (testing/engine_internals.h) reaches a core through it.
class EngineAccess {
 public:
  static EngineCore& Core(const Engine& engine) { return *engine.core_; }
  static std::unique_ptr<Engine> Wrap(std::shared_ptr<EngineCore> core);
};

}  // namespace rangekv::engine_internal
