// StoreState: the persistent half of an engine: the store directory, its pack file and the
// range directory over the pack slots. The transfer pipelines borrow it; persistence (snapshot,
// dirty marker, recovery: issue 5) hooks into Open() and Close() here and nowhere else.
//
// Open() opens `<dir>/packs.rkv` when it exists (validated against the expected geometry and
// namespace: PackFile::Open's distinct errors) and creates it otherwise, then makes an empty
// Directory over its pack slots under a fresh owner epoch. The persistence layer will replace
// "empty" with "loaded from a validated snapshot" in Open(), and add "snapshot written, marker
// removed" to Close().
//
// Thread-safety: after Open, the accessors are thread-safe (PackFile is immutable; Directory
// locks). Close() REQUIRES that every owner (restore, store) drained.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "directory/directory.h"
#include "engine/integrity.h"
#include "env/env.h"
#include "pack/pack_file.h"
#include "pack/span_plan.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::engine_internal {

struct StoreStateOptions {
  Env* env = nullptr;
  std::string dir;
  Geometry geometry;
  NamespaceId ns;
  uint64_t pack_count = 0;      // for a new pack file
  uint64_t capacity_bytes = 0;  // the directory's byte capacity bound
  DirectIo direct = DirectIo::kPreferred;
  DirectoryOptions directory;  // pack_slots / tokens_per_pack / pack_bytes are filled in
};

class StoreState {
 public:
  static constexpr const char* kPackFileName = "packs.rkv";

  static Result<std::unique_ptr<StoreState>> Open(const StoreStateOptions& options);
  ~StoreState();
  StoreState(const StoreState&) = delete;
  StoreState& operator=(const StoreState&) = delete;

  Env* env() const { return env_; }
  const std::string& dir() const { return dir_; }
  const PackFile& pack_file() const { return pack_; }
  File* file() const { return pack_.file(); }
  const PackLayout& layout() const { return pack_.layout(); }
  const Geometry& geometry() const { return pack_.geometry(); }
  const NamespaceId& ns() const { return pack_.namespace_id(); }
  Directory& directory() const { return *directory_; }
  // Current slot generations as the directory knows them, for the span planner.
  const GenerationView& generations() const { return generations_; }
  bool created() const { return created_; }
  // The persistence layer's hooks into the pipelines (digests, dirty marker); null until issue 5
  // installs them in Open(). EngineCore uses them unless a test injects its own.
  PayloadIntegrity* integrity() const { return integrity_.get(); }

  // The persistence seam (issue 5): today only releases the file. REQUIRES all owners drained.
  Status Close();

 private:
  class DirectoryGenerations final : public GenerationView {
   public:
    explicit DirectoryGenerations(const StoreState* state) : state_(state) {}
    uint64_t CurrentGeneration(uint32_t slot) const override;

   private:
    const StoreState* state_;
  };

  StoreState(Env* env, std::string dir, PackFile pack, std::unique_ptr<Directory> directory,
             bool created);

  Env* env_;
  std::string dir_;
  PackFile pack_;
  std::unique_ptr<Directory> directory_;
  DirectoryGenerations generations_{this};
  bool created_;
  std::unique_ptr<PayloadIntegrity> integrity_;
};

}  // namespace rangekv::engine_internal
