// Test and tooling entry points into the engine's internals (library rangekv_engine_testing):
// open an engine with an injected device, test hooks or an integrity hook, allocate and copy
// paged KV memory on the engine's device, inspect its pools and directory, and simulate a
// crash. Production code opens engines with Engine::Open only and never includes this header
// (it lives outside src/, on no production target's include path).
//
// This header includes src/ headers: it is the test-support API over the engine's internals.
//
// Thread-safety: as the functions they forward to.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "engine/engine_core.h"
#include "rangekv/engine.h"

namespace rangekv::testing {

// Engine::Open with internals injected (Engine::Open itself injects nothing).
inline Result<std::unique_ptr<Engine>> OpenEngineForTesting(
    const EngineOptions& options, const engine_internal::EngineInternalConfig& config) {
  RANGEKV_ASSIGN_OR_RETURN(auto core, engine_internal::EngineCore::Open(options, config));
  return engine_internal::EngineAccess::Wrap(std::move(core));
}

// Device memory for paged KV (the serving engine brings its own). Owned by the engine until
// Close(); counted apart from payload allocations.
inline Result<void*> AllocateDeviceMemory(Engine& engine, uint64_t bytes) {
  return engine_internal::EngineAccess::Core(engine).AllocateDeviceMemory(bytes);
}
// Synchronous copies between host memory and the engine's device memory.
inline Status CopyToDevice(Engine& engine, void* device_dst, const void* host_src, uint64_t bytes) {
  return engine_internal::EngineAccess::Core(engine).CopyToDevice(device_dst, host_src, bytes);
}
inline Status CopyToHost(Engine& engine, void* host_dst, const void* device_src, uint64_t bytes) {
  return engine_internal::EngineAccess::Core(engine).CopyToHost(host_dst, device_src, bytes);
}

// RestorePipeline::SetReadShare, as a store service's reply would set it (the engine's I/O cap
// aside): returns the stripe reads the engine keeps in flight at most.
inline uint32_t SetReadShareForTesting(Engine& engine, uint32_t readers) {
  return engine_internal::EngineAccess::Core(engine).restore().SetReadShare(readers);
}

inline engine_internal::PoolState ReadPoolState(const Engine& engine) {
  return engine_internal::EngineAccess::Core(engine).restore().pool_state();
}
inline engine_internal::PoolState StorePoolState(const Engine& engine) {
  return engine_internal::EngineAccess::Core(engine).stores().pool_state();
}
inline Directory& EngineDirectory(const Engine& engine) {
  return engine_internal::EngineAccess::Core(engine).store().directory();
}
inline const store::StoreState& EngineStore(const Engine& engine) {
  return engine_internal::EngineAccess::Core(engine).store();
}
// In-process crash: Close() still drains every owner, but persists nothing (no snapshot, the
// dirty marker stays if there is one), leaving the store's files as a process death here would.
inline void AbandonStoreForTesting(const Engine& engine) {
  engine_internal::EngineAccess::Core(engine).store().AbandonForTesting();
}

}  // namespace rangekv::testing
