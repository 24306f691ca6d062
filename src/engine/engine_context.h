// EngineContext: what the restore and store pipelines borrow from the engine that owns them
// (all of it outlives the pipelines), and the test hooks that tests may install.
//
// Thread-safety: the pointed-to objects are thread-safe (Device, IoEngine, StoreState,
// Counters); the context itself is immutable after Open.
#pragma once

#include <cstdint>
#include <functional>

#include "device/device.h"
#include "engine/stats.h"
#include "io/io_engine.h"
#include "persist/persistence.h"
#include "rangekv/engine.h"
#include "store/integrity.h"
#include "store/store_state.h"

namespace rangekv::engine_internal {

class RemoteTier;

// What a read bank went through; reported to EngineTestHooks::read_bank_observer.
enum class BankEvent : uint8_t { kAcquired, kReleased, kQuarantined };

// Named points of a store, reported to EngineTestHooks::store_point (crash tests kill the
// process there).
enum class StorePoint : uint8_t {
  kGathered,       // a batch's gather and digests are proven; none of its writes is submitted
  kBeforePublish,  // every write of the reservation returned OK; Directory::Publish is next
  kPublished,      // the reservation's records are visible
};

// Hooks for tests (never set in production). Each runs without engine locks held unless noted.
struct EngineTestHooks {
  // Consulted by the fence reaper after a scatter's event completed: a non-OK status is treated
  // as an unproven completion (the bank is quarantined, the stripe's tokens fail).
  std::function<Status(uint32_t bank, uint32_t layer)> scatter_fence_fault;
  // Consulted by a group worker after a batch's gather was proven: a non-OK status is treated
  // as an unproven gather (the store bank is quarantined, the store fails).
  std::function<Status(uint32_t bank)> gather_fault;
  // Observes every read bank transition, with the bank's use number. Runs under the restore
  // pipeline's mutex: it must not call into the engine.
  std::function<void(BankEvent event, uint32_t bank, uint64_t use)> read_bank_observer;
  // Called at each StorePoint with the reservation id. kGathered runs on a group worker without
  // locks; kBeforePublish and kPublished run under the store pipeline's mutex (it must not call
  // into the engine).
  std::function<void(StorePoint point, uint64_t reservation_id)> store_point;
  // persist::PersistenceOptions::shutdown_hook: called after each step of the clean shutdown at
  // Close; a non-OK status stops the sequence there (as if the process died).
  std::function<Status(persist::ShutdownStep step)> shutdown_hook;
};

struct EngineContext {
  const EngineOptions* options = nullptr;  // resolved
  Geometry geometry;
  Device* device = nullptr;
  store::StoreState* store = nullptr;
  IoEngine* read_io = nullptr;
  IoEngine* write_io = nullptr;
  Counters* counters = nullptr;
  store::PayloadIntegrity* integrity = nullptr;  // null: no digests
  // The cluster tier's reader: spans with file_index kRemoteFileIndex are read through it
  // (engine/remote_tier.h). Null without a cluster tier.
  RemoteTier* remote = nullptr;
  const EngineTestHooks* hooks = nullptr;  // null: none
  // The device cannot read files into its memory directly, nor host code touch it: reads land
  // in pinned staging and are copied up, gathered banks are copied down before writing.
  bool staging = false;
  // Device-side layer waits without blocking the host (DeviceFlag / WaitFlag).
  bool stream_memory_ops = false;
};

}  // namespace rangekv::engine_internal
