#include "engine/options.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "base/units.h"
#include "directory/removal_log.h"
#include "io/io_engine.h"
#include "kernels/paged_kv.h"
#include "pack/format.h"
#include "service_proto/protocol.h"

namespace rangekv {

namespace {

Status BadAblation(std::string_view what) {
  return InvalidArgument("ablation: " + std::string(what) +
                         " (expected index=tree|scalar, read_issue=stripe|object, "
                         "delivery=layer|barrier, prefetch=lookup|dispatch, object_tokens=N, "
                         "objects=chunk|chunk_layer)");
}

}  // namespace

Status Ablations::Set(std::string_view kv) {
  const size_t eq = kv.find('=');
  if (eq == std::string_view::npos) return BadAblation("'" + std::string(kv) + "' has no '='");
  const std::string_view key = kv.substr(0, eq);
  const std::string_view value = kv.substr(eq + 1);
  // Sets `field` to the choice whose name is `value`; false when no name matches.
  auto choose = [value](auto& field, std::string_view name0, auto choice0, std::string_view name1,
                        auto choice1) {
    if (value == name0)
      field = choice0;
    else if (value == name1)
      field = choice1;
    else
      return false;
    return true;
  };
  if (key == "index") {
    if (choose(index, "tree", Index::kTree, "scalar", Index::kScalar)) return OkStatus();
  } else if (key == "read_issue") {
    if (choose(read_issue, "stripe", ReadIssue::kStripe, "object", ReadIssue::kObject)) {
      return OkStatus();
    }
  } else if (key == "delivery") {
    if (choose(delivery, "layer", Delivery::kLayer, "barrier", Delivery::kBarrier)) {
      return OkStatus();
    }
  } else if (key == "prefetch") {
    if (choose(prefetch, "lookup", Prefetch::kLookup, "dispatch", Prefetch::kDispatch)) {
      return OkStatus();
    }
  } else if (key == "objects") {
    if (choose(objects, "chunk", Objects::kChunk, "chunk_layer", Objects::kChunkLayer)) {
      return OkStatus();
    }
  } else if (key == "object_tokens") {
    uint64_t n = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec == std::errc() && ptr == value.data() + value.size() && n > 0) {
      object_tokens = n;
      return OkStatus();
    }
  } else {
    return BadAblation("unknown key '" + std::string(key) + "'");
  }
  return BadAblation("bad value '" + std::string(value) + "' for " + std::string(key));
}

std::string Ablations::ToString() const {
  std::string s;
  s += index == Index::kTree ? "index=tree" : "index=scalar";
  s += read_issue == ReadIssue::kStripe ? ",read_issue=stripe" : ",read_issue=object";
  s += delivery == Delivery::kLayer ? ",delivery=layer" : ",delivery=barrier";
  s += prefetch == Prefetch::kLookup ? ",prefetch=lookup" : ",prefetch=dispatch";
  s += ",object_tokens=" + std::to_string(object_tokens);
  s += objects == Objects::kChunk ? ",objects=chunk" : ",objects=chunk_layer";
  return s;
}

Status Durability::Set(std::string_view v) {
  auto bad = [&]() {
    return InvalidArgument("durability: '" + std::string(v) +
                           "' (want every_publish, periodic:<ms> with ms in [1, 60000], or none)");
  };
  if (v == "every_publish") {
    mode = Mode::kEveryPublish;
    return OkStatus();
  }
  if (v == "none") {
    mode = Mode::kNone;
    return OkStatus();
  }
  if (v == "periodic") {
    mode = Mode::kPeriodic;
    period_ms = 200;
    return OkStatus();
  }
  constexpr std::string_view kPrefix = "periodic:";
  if (v.substr(0, kPrefix.size()) != kPrefix) return bad();
  const std::string_view digits = v.substr(kPrefix.size());
  uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ms);
  if (ec != std::errc() || end != digits.data() + digits.size() || ms < 1 || ms > 60000) {
    return bad();
  }
  mode = Mode::kPeriodic;
  period_ms = ms;
  return OkStatus();
}

std::string Durability::ToString() const {
  switch (mode) {
    case Mode::kNone:
      return "none";
    case Mode::kPeriodic:
      return "periodic:" + std::to_string(period_ms);
    case Mode::kEveryPublish:
      return "every_publish";
  }
  return "unknown";
}

namespace engine_internal {

namespace {

Status Bad(std::string_view field, std::string_view rule) {
  return InvalidArgument("EngineOptions." + std::string(field) + ": " + std::string(rule));
}

Status CheckCount(std::string_view field, uint64_t v, uint64_t lo, uint64_t hi) {
  if (v < lo || v > hi) {
    return Bad(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                          std::to_string(v));
  }
  return OkStatus();
}

Status CheckPool(std::string_view field, uint64_t banks, uint64_t bank_bytes) {
  const auto total = CheckedMul(banks, bank_bytes);
  if (!total || *total > kMaxBankPoolBytes) {
    return Bad(field, "pool of " + std::to_string(banks) + " x " + std::to_string(bank_bytes) +
                          " bytes exceeds " + std::to_string(kMaxBankPoolBytes >> 30) + " GiB");
  }
  return OkStatus();
}

}  // namespace

Result<uint64_t> PackCountForCapacity(uint64_t capacity_bytes, const Geometry& geometry) {
  if (geometry.pack_bytes == 0) return Bad("capacity_bytes", "geometry has zero pack bytes");
  const uint64_t packs = capacity_bytes / geometry.pack_bytes;
  if (packs < 1) {
    return Bad("capacity_bytes", std::to_string(capacity_bytes) + " is below one pack (" +
                                     std::to_string(geometry.pack_bytes) + " bytes)");
  }
  if (packs > pack_format::kMaxPackCount) {
    return Bad("capacity_bytes",
               "more than " + std::to_string(pack_format::kMaxPackCount) + " packs");
  }
  return packs;
}

Result<EngineOptions> ResolveOptions(const EngineOptions& in, const Geometry& g, bool host_device,
                                     uint32_t usable_cpus) {
  EngineOptions o = in;
  const uint64_t w = g.stripe_bytes;
  if (o.store_dir.empty() && o.store_service.empty()) {
    return Bad("store_dir", "must name a directory (or set store_service)");
  }
  if (!o.store_service.empty() && o.tuning.ablations.index != Ablations::Index::kTree) {
    return Bad("store_service", "the index ablation (index=scalar) needs an embedded store");
  }
  if (!o.store_service.empty()) {
    if (Status t = service::ValidateTenant(o.tenant); !t.ok()) return Bad("tenant", t.message());
  }
  if (o.tuning.store_service_timeout_ms == 0 || o.tuning.store_service_timeout_ms > 3600000) {
    return Bad("store_service_timeout_ms", "must be in [1, 3600000]");
  }
  if (o.tuning.store_service_spin_us > 10000) {
    return Bad("store_service_spin_us", "at most 10000 (10 ms of polling per call)");
  }
  if (o.tuning.read_bank_bytes == 0) o.tuning.read_bank_bytes = w;
  if (o.tuning.layer_group == 0) {
    o.tuning.layer_group = std::min({host_device ? kAutoLayerGroupHost : kAutoLayerGroupCuda,
                                     g.layers, kernels::kMaxGatherLayers});
  }
  if (o.tuning.group_workers == 0) {
    o.tuning.group_workers =
        host_device ? std::clamp(usable_cpus, 1u, kAutoGroupWorkersCuda) : kAutoGroupWorkersCuda;
  }
  if (o.tuning.store_bank_bytes == 0) {
    const auto b = CheckedMul(2ull * o.tuning.layer_group, w);
    if (!b) return Bad("store_bank_bytes", "2 x layer_group x W overflows");
    o.tuning.store_bank_bytes = *b;
  }

  RANGEKV_RETURN_IF_ERROR(PackCountForCapacity(o.capacity_bytes, g).status());

  RANGEKV_RETURN_IF_ERROR(CheckCount("read_banks", o.tuning.read_banks, 1, kMaxBanks));
  if (o.tuning.read_bank_bytes < w || !IsAligned(o.tuning.read_bank_bytes, kIoAlignment)) {
    return Bad("read_bank_bytes",
               "must be a multiple of 4096 and at least W (" + std::to_string(w) + ")");
  }
  RANGEKV_RETURN_IF_ERROR(CheckPool("read_banks", o.tuning.read_banks, o.tuning.read_bank_bytes));
  RANGEKV_RETURN_IF_ERROR(CheckCount("read_workers", o.tuning.read_workers, 1, kMaxWorkers));
  if (o.tuning.read_io_threads != 0) {
    RANGEKV_RETURN_IF_ERROR(CheckCount("read_io_threads", o.tuning.read_io_threads, 1, 256));
  }
  if (o.tuning.prefetch_banks >= o.tuning.read_banks) {
    return Bad("prefetch_banks", "must leave at least one read bank for scheduled restores (" +
                                     std::to_string(o.tuning.prefetch_banks) + " >= read_banks " +
                                     std::to_string(o.tuning.read_banks) + ")");
  }
  // A window past the last layer is the whole model (as the default, 4, is on a shallower one).
  o.tuning.lookahead_layers = std::min(o.tuning.lookahead_layers, g.layers);
  RANGEKV_RETURN_IF_ERROR(
      CheckCount("max_inflight_restores", o.tuning.max_inflight_restores, 1, kMaxJobSlots));

  RANGEKV_RETURN_IF_ERROR(CheckCount("layer_group", o.tuning.layer_group, 1,
                                     std::min<uint32_t>(g.layers, kernels::kMaxGatherLayers)));
  RANGEKV_RETURN_IF_ERROR(CheckCount("store_banks", o.tuning.store_banks, 1, kMaxBanks));
  const auto group_stripes = CheckedMul(o.tuning.layer_group, w);
  if (!IsAligned(o.tuning.store_bank_bytes, kIoAlignment) || !group_stripes ||
      o.tuning.store_bank_bytes < *group_stripes) {
    return Bad("store_bank_bytes",
               "must be a multiple of 4096 holding at least layer_group "
               "stripes (" +
                   std::to_string(group_stripes.value_or(0)) + " bytes)");
  }
  RANGEKV_RETURN_IF_ERROR(
      CheckPool("store_banks", o.tuning.store_banks, o.tuning.store_bank_bytes));
  RANGEKV_RETURN_IF_ERROR(CheckCount("group_workers", o.tuning.group_workers, 1, kMaxWorkers));
  RANGEKV_RETURN_IF_ERROR(CheckCount("write_workers", o.tuning.write_workers, 1, kMaxWorkers));
  RANGEKV_RETURN_IF_ERROR(
      CheckCount("max_inflight_stores", o.tuning.max_inflight_stores, 1, kMaxJobSlots));
  if (o.tuning.free_reserve_packs != kFreeReserveAuto) {
    RANGEKV_RETURN_IF_ERROR(CheckCount("free_reserve_packs", o.tuning.free_reserve_packs, 0, 64));
  }
  RANGEKV_RETURN_IF_ERROR(
      CheckCount("max_request_tokens", o.max_request_tokens, 1, kMaxRequestTokens));
  if (o.tuning.max_removed_ranges > RemovalLog::kMaxCapacity) {
    return Bad("max_removed_ranges", "must be at most " + std::to_string(RemovalLog::kMaxCapacity) +
                                         ", got " + std::to_string(o.tuning.max_removed_ranges));
  }
  if (o.tuning.ablations.object_tokens == 0) return Bad("ablations.object_tokens", "must be > 0");
  if (o.durability.mode == Durability::Mode::kPeriodic) {
    RANGEKV_RETURN_IF_ERROR(CheckCount("durability.period_ms", o.durability.period_ms, 1, 60000));
  }
  if (o.durability.checkpoint_interval_ms > 86'400'000) {
    return Bad("durability.checkpoint_interval_ms",
               "must be at most 86400000 (a day; 0 turns it off), got " +
                   std::to_string(o.durability.checkpoint_interval_ms));
  }
  if (o.tuning.io_split_bytes != kIoSplitAuto && o.tuning.io_split_bytes != kIoSplitOff &&
      o.tuning.io_split_bytes != kIoSplitFillReads &&
      (o.tuning.io_split_bytes < kMinSplitBytes || o.tuning.io_split_bytes > kMaxSplitBytes)) {
    return Bad("io_split_bytes", "must be auto (0), off, fill_reads, or in [512, 1 GiB], got " +
                                     std::to_string(o.tuning.io_split_bytes));
  }
  return o;
}

ReadIoPlan PlanReadIo(const EngineOptions& o, bool buffered, uint32_t usable_cpus) {
  ReadIoPlan plan;
  uint32_t threads = 0;
  std::string reason;
  if (o.tuning.read_io_threads != 0) {
    threads = o.tuning.read_io_threads;
    reason = "configured";
  } else if (buffered) {
    const uint32_t hw = std::max<uint32_t>(usable_cpus, 1);
    threads = std::max(o.tuning.read_workers, std::min(hw, kMaxAutoReadIoThreads));
    reason = "auto: " + std::to_string(hw) + " usable CPUs, buffered";
  } else {
    threads = kDirectReadIoThreadsPerWorker * o.tuning.read_workers;
    reason = "auto: " + std::to_string(kDirectReadIoThreadsPerWorker) + " x read_workers, O_DIRECT";
  }
  plan.threads = std::min<uint32_t>(threads, 256);
  plan.why = std::to_string(plan.threads) + " threads (" + reason + ")";
  if (o.tuning.io_split_bytes == kIoSplitFillReads && plan.threads > o.tuning.read_workers) {
    plan.fill_split_bytes = buffered ? kFillSplitBytes : kFillSplitBytesDirect;
  }
  return plan;
}

uint32_t NodeReadSlots(uint32_t usable_cpus) {
  const EngineOptions defaults;
  return std::max(PlanReadIo(defaults, /*buffered=*/true, usable_cpus).threads,
                  PlanReadIo(defaults, /*buffered=*/false, usable_cpus).threads);
}

}  // namespace engine_internal
}  // namespace rangekv
