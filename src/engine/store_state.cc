#include "engine/store_state.h"

#include <chrono>

#include "base/log.h"

namespace rangekv::engine_internal {

uint64_t StoreState::DirectoryGenerations::CurrentGeneration(uint32_t slot) const {
  if (slot >= state_->directory_->options().pack_slots) return kNoGeneration;
  const SlotInfo info = state_->directory_->Slot(slot);
  // Visible and retired-but-leased slots are readable; a reserved slot is writable by its
  // reservation. A free slot has no generation anyone may use.
  return info.state == SlotState::kFree ? kNoGeneration : info.generation;
}

StoreState::StoreState(Env* env, std::string dir, PackFile pack,
                       std::unique_ptr<Directory> directory, bool created)
    : env_(env),
      dir_(std::move(dir)),
      pack_(std::move(pack)),
      directory_(std::move(directory)),
      created_(created) {}

StoreState::~StoreState() = default;

Result<std::unique_ptr<StoreState>> StoreState::Open(const StoreStateOptions& o) {
  if (o.env == nullptr) return InvalidArgument("StoreState: null env");
  RANGEKV_RETURN_IF_ERROR(o.env->CreateDir(o.dir));
  const std::string path = o.dir + "/" + kPackFileName;
  bool created = false;
  std::optional<PackFile> pack;
  if (o.env->FileExists(path)) {
    PackExpectation expect;
    expect.geometry = o.geometry;
    expect.namespace_id = o.ns;
    PackOpenOptions open;
    open.direct = o.direct;
    auto opened = PackFile::Open(o.env, path, expect, open);
    if (!opened.ok()) return opened.status().WithContext("opening " + path);
    pack.emplace(std::move(opened).value());
  } else {
    PackCreateOptions create;
    create.direct = o.direct;
    auto made = PackFile::Create(o.env, path, o.geometry, o.ns, o.pack_count, create);
    if (!made.ok()) return made.status().WithContext("creating " + path);
    pack.emplace(std::move(made).value());
    created = true;
  }

  DirectoryOptions d = o.directory;
  d.pack_slots = static_cast<uint32_t>(pack->pack_count());
  d.tokens_per_pack = o.geometry.tokens_per_stripe;
  d.pack_bytes = o.geometry.pack_bytes;
  d.capacity_bytes = std::min(o.capacity_bytes, pack->capacity_bytes());
  d.layers = o.geometry.layers;
  // Until persistence loads snapshots (issue 5), every open starts an empty directory; the
  // epoch only has to differ from earlier instances so their tickets are refused.
  d.owner_epoch =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) | 1;
  auto directory = Directory::Create(d);
  if (!directory.ok()) return directory.status().WithContext("directory");
  if (!created) {
    Log(LogLevel::kInfo, "store " + o.dir + ": opened existing pack file; index starts empty");
  }
  return std::unique_ptr<StoreState>(
      new StoreState(o.env, o.dir, std::move(*pack), std::move(directory).value(), created));
}

Status StoreState::Close() { return OkStatus(); }

}  // namespace rangekv::engine_internal
