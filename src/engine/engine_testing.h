// Test and tooling entry points into the engine's internals: open an engine with an injected
// device, test hooks or an integrity hook, inspect its pools and directory, and simulate a
// crash. Production code opens engines with Engine::Open only.
//
// Thread-safety: as the functions they forward to.
#pragma once

#include <memory>

#include "engine/engine_core.h"
#include "rangekv/engine.h"

namespace rangekv::engine_internal {

// Engine::Open with internals injected (Engine::Open passes an empty config).
Result<std::unique_ptr<Engine>> OpenEngineForTesting(const EngineOptions& options,
                                                     const EngineInternalConfig& config);

inline RestorePipeline::PoolState ReadPoolState(const Engine& engine) {
  return EngineAccess::Core(engine).restore().pool_state();
}
inline StorePipeline::PoolState StorePoolState(const Engine& engine) {
  return EngineAccess::Core(engine).stores().pool_state();
}
inline Directory& EngineDirectory(const Engine& engine) {
  return EngineAccess::Core(engine).store().directory();
}
inline const StoreState& EngineStore(const Engine& engine) {
  return EngineAccess::Core(engine).store();
}
// In-process crash: Close() still drains every owner, but persists nothing (no snapshot, the
// dirty marker stays if there is one), leaving the store's files as a process death here would.
inline void AbandonStoreForTesting(const Engine& engine) {
  EngineAccess::Core(engine).store().AbandonForTesting();
}

}  // namespace rangekv::engine_internal
