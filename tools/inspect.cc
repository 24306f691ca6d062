// `rangekv inspect --dir D [--json]` and `rangekv fsck --dir D [--json] [--no-payload]`:
// offline views of a store directory (src/persist/offline.h). Neither writes anything.
//
// inspect prints the pack file's identity and geometry, what its namespace was derived from
// (the identity record, identity.json, checked against the namespace), the store's state
// (epoch, dirty marker, whether the snapshot would be loaded and why not), capacity use, every
// namespace with its packs (slot, generation, leases, path token interval, parent pack) and
// every non-free slot. A directory that is not a store but holds stores one or two levels down
// (a connector's store_dir with rank-<r>/, a store service's root with <tenant>/<namespace>/)
// is shown store by store. Exit status: 0 when every pack file could be read (whatever the
// index state), 1 otherwise.
//
// fsck verifies the header, the epoch file, the dirty marker, the snapshot's checksum and
// binding, the directory's invariants, tree/slot/digest consistency and every payload digest,
// and names each bad record. Exit status: 0 clean, 1 problems found, 2 not a store (no pack
// file) or a usage error.
//
// The JSON of both commands is documented field by field in docs/inspect-fsck.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "persist/identity_record.h"
#include "persist/offline.h"
#include "persist/store_layout.h"
#include "rangekv/env.h"
#include "tools/commands.h"

namespace rangekv::tools {
namespace {

using nlohmann::json;
using persist::FsckProblem;
using persist::FsckReport;
using persist::OfflineStore;

struct Config {
  std::string dir;
  bool json = false;
  bool no_payload = false;
};

[[noreturn]] void Exit(int code) { throw CLI::RuntimeError(code); }

json GeometryJson(const Geometry& g) {
  return json{{"layers", g.layers},
              {"kv_heads_per_rank", g.kv_heads_per_rank},
              {"head_size", g.head_size},
              {"mla_latent_size", g.mla_latent_size},
              {"dtype_bytes", g.dtype_bytes},
              {"block_size", g.block_size},
              {"token_bytes", g.token_bytes},
              {"stripe_bytes", g.stripe_bytes},
              {"tokens_per_stripe", g.tokens_per_stripe},
              {"pack_bytes", g.pack_bytes}};
}

// The store's identity record (persist/identity_record.h) with `verified`: DeriveNamespace over
// its fields and the pack header's geometry gives the header's namespace. `fields` is its
// semantic_config parsed when that is a JSON object (the vLLM connector's and rangekv.hf's
// identity, python/rangekv/identity.py), else null. null when the store has no record.
json IdentityJson(const std::string& dir, const PackFile& pack) {
  const std::optional<std::string> text =
      persist::ReadIdentityRecord(DefaultEnv(), persist::StorePaths(dir));
  if (!text) return nullptr;
  json out = {{"verified", false}, {"record", nullptr}, {"fields", nullptr}, {"problem", nullptr}};
  const json record = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    out["problem"] = "identity.json is not a JSON object";
    return out;
  }
  out["record"] = record;
  try {
    ModelSpec spec;
    spec.model_id = record.at("model_id").get<std::string>();
    spec.revision = record.at("revision").get<std::string>();
    spec.semantic_config = record.at("semantic_config").get<std::string>();
    spec.kv_dtype = record.at("kv_dtype").get<std::string>();
    spec.tp_size = record.at("tp_size").get<uint32_t>();
    spec.tp_rank = record.at("tp_rank").get<uint32_t>();
    spec.tags = record.at("tags").get<std::vector<std::string>>();
    const std::string layout = record.at("layout").get<std::string>();
    bool known = false;
    for (int i = 0; i < 256 && !known; ++i) {
      const auto l = static_cast<KvCacheLayout>(i);
      if (layout != "unknown" && KvCacheLayoutName(l) == layout) {
        spec.layout = l;
        known = true;
      }
    }
    if (!known) {
      out["problem"] = "unknown layout '" + layout + "'";
    } else if (!(DeriveNamespace(spec, pack.geometry()) == pack.header().namespace_id)) {
      out["problem"] = "the fields do not derive this store's namespace (a stale or edited record)";
    } else {
      out["verified"] = true;
    }
    const json fields = json::parse(spec.semantic_config, nullptr, /*allow_exceptions=*/false);
    if (fields.is_object()) out["fields"] = fields;
  } catch (const json::exception& e) {
    out["problem"] = std::string("identity.json: ") + e.what();
  }
  return out;
}

json InspectJson(const OfflineStore& s) {
  const PackFile& pack = *s.pack;
  const PackHeader& h = pack.header();
  const Geometry& g = pack.geometry();
  const persist::InspectedIndex& index = s.index;
  const persist::RecoveryReport& r = index.report;
  json out;
  out["store_dir"] = s.dir;
  out["pack_file"] = {
      {"path", pack.path()},
      {"bytes", s.pack_file_bytes},
      {"format_version", h.format_version},
      {"store_uuid", h.store_uuid.ToHex()},
      {"namespace", h.namespace_id.ToHex()},
      {"geometry", GeometryJson(g)},
      {"pack_count", h.pack_count},
      {"data_offset", h.data_offset},
      {"capacity_bytes", pack.capacity_bytes()},
      {"creation_time_unix_ns", h.creation_time_unix_ns},
  };
  out["identity"] = IdentityJson(s.dir, pack);
  json state;
  state["dirty"] = index.dirty_marker_present;
  state["epoch"] = index.epoch_file_epoch ? json(*index.epoch_file_epoch) : json(nullptr);
  state["epoch_problem"] =
      index.epoch_file_problem.empty() ? json(nullptr) : json(index.epoch_file_problem);
  state["index"] = r.outcome != persist::RecoveryOutcome::kLoaded ? "discarded"
                   : r.journal.used                               ? "replayed"
                                                                  : "loaded";
  state["in_use_by"] = s.holder ? json(*s.holder) : json(nullptr);
  state["reason"] = std::string(persist::DiscardReasonName(r.reason));
  state["detail"] = r.detail;
  state["snapshot_bytes"] = r.snapshot_bytes;
  if (index.snapshot) {
    state["snapshot"] = {{"store_epoch", index.snapshot->store_epoch},
                         {"max_generation", index.snapshot->max_generation},
                         {"saved_time_unix_ns", index.snapshot->saved_time_unix_ns},
                         {"store_uuid", index.snapshot->identity.store_uuid.ToHex()},
                         {"digest_tables", index.snapshot->digests.size()}};
  } else {
    state["snapshot"] = nullptr;
  }
  const persist::JournalSummary& jr = s.journal;
  if (jr.present) {
    state["journal"] = {{"bytes", jr.bytes},
                        {"intact_bytes", jr.intact_bytes},
                        {"records", jr.records},
                        {"publishes", jr.publishes},
                        {"removes", jr.removes},
                        {"epochs", jr.epochs},
                        {"base_epoch", jr.base_epoch},
                        {"replay", jr.replay},
                        {"tail", jr.tail},
                        {"tail_detail", jr.tail_detail},
                        {"problem", jr.problem.empty() ? json(nullptr) : json(jr.problem)}};
  } else {
    state["journal"] = nullptr;
  }
  out["state"] = state;

  json capacity = {{"pack_slots", h.pack_count},
                   {"free", 0},
                   {"reserved", 0},
                   {"visible", 0},
                   {"retired", 0},
                   {"capacity_bytes", pack.capacity_bytes()},
                   {"used_bytes", 0},
                   {"valid_payload_bytes", 0}};
  json slots = json::array();
  json namespaces = json::array();
  if (index.directory) {
    const Directory& dir = *index.directory;
    uint64_t counts[4] = {0, 0, 0, 0};
    const std::vector<SlotInfo> infos = dir.Slots();
    for (uint32_t i = 0; i < infos.size(); ++i) {
      const SlotInfo& si = infos[i];
      ++counts[static_cast<int>(si.state)];
      if (si.state == SlotState::kFree) continue;
      slots.push_back({{"slot", i},
                       {"state", std::string(SlotStateName(si.state))},
                       {"generation", si.generation},
                       {"leases", si.leases}});
    }
    capacity["free"] = counts[0];
    capacity["reserved"] = counts[1];
    capacity["visible"] = counts[2];
    capacity["retired"] = counts[3];
    capacity["used_bytes"] = counts[2] * g.pack_bytes;
    uint64_t valid_tokens = 0;
    for (const NamespaceId& ns : dir.Namespaces()) {
      json packs = json::array();
      uint64_t tokens = 0;
      for (const StoredPack& p : dir.ListPacks(ns)) {
        const PackRecord& rec = p.record;
        tokens += rec.tokens;
        json pj = {
            {"slot", rec.pack_slot},
            {"generation", rec.generation},
            {"leases", p.leases},
            {"path_token_begin", rec.path_token_begin},
            {"path_token_end", rec.path_token_end()},
            {"pack_token_offset", rec.pack_token_offset},
            {"tokens", rec.tokens},
            {"parent_slot", p.parent_slot == UINT32_MAX ? json(nullptr) : json(p.parent_slot)}};
        Result<persist::PackDigests> d = index.digests->Get(rec.pack_slot, rec.generation);
        pj["digested_tokens"] = d.ok() ? json(d->stored_tokens) : json(nullptr);
        packs.push_back(pj);
      }
      valid_tokens += tokens;
      namespaces.push_back({{"id", ns.ToHex()},
                            {"packs", packs.size()},
                            {"cached_tokens", tokens},
                            {"records", packs}});
    }
    capacity["valid_payload_bytes"] = valid_tokens * g.token_bytes * g.layers;
    out["digests"] = {{"block_tokens", index.digests->geometry().block_tokens()},
                      {"seed", persist::kPayloadDigestSeed}};
  } else {
    out["digests"] = nullptr;
  }
  out["capacity"] = capacity;
  out["namespaces"] = namespaces;
  out["slots"] = slots;
  return out;
}

std::string Scalar(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Dotted keys and leaves of a JSON value, for a readable listing.
void Flatten(const json& v, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, child] : v.items()) {
      Flatten(child, prefix.empty() ? k : prefix + "." + k, out);
    }
  } else {
    out->emplace_back(prefix, Scalar(v));
  }
}

void PrintIdentityText(const json& id) {
  if (id.is_null()) {
    std::printf(
        "identity   none recorded (a store made before identity records, or by a program "
        "that gave none)\n");
    return;
  }
  if (id["record"].is_null()) {
    std::printf("identity   unreadable: %s\n", Scalar(id["problem"]).c_str());
    return;
  }
  const json& r = id["record"];
  const std::string verdict = id["verified"].get<bool>()
                                  ? "verified: the namespace is derived from these fields"
                                  : "NOT verified: " + Scalar(id["problem"]);
  std::printf("identity   %s\n", verdict.c_str());
  std::vector<std::pair<std::string, std::string>> rows;
  for (const char* k : {"model_id", "revision", "kv_dtype", "layout", "tp_size", "tp_rank"}) {
    if (r.contains(k)) rows.emplace_back(k, Scalar(r[k]));
  }
  if (r.contains("tags")) rows.emplace_back("tags", r["tags"].dump());
  if (id["fields"].is_object()) {
    for (const auto& [k, v] : id["fields"].items()) {
      if (k == "model_config" && v.is_object()) {
        rows.emplace_back(k,
                          std::to_string(v.size()) + " fields, all in the key (--json lists them)");
      } else {
        Flatten(v, k, &rows);
      }
    }
  } else if (r.contains("semantic_config")) {
    rows.emplace_back("semantic_config", Scalar(r["semantic_config"]));
  }
  for (const auto& [k, v] : rows) std::printf("  %-28s %s\n", k.c_str(), v.c_str());
}

void PrintInspectText(const json& j) {
  const json& pf = j["pack_file"];
  const json& g = pf["geometry"];
  const json& st = j["state"];
  const json& cap = j["capacity"];
  std::printf("store      %s\n", j["store_dir"].get<std::string>().c_str());
  if (!st["in_use_by"].is_null()) {
    std::printf("in use     by %s: its index and payload may be ahead of what the files show\n",
                st["in_use_by"].get<std::string>().c_str());
  }
  std::printf("pack file  %s (%llu bytes, format %u, uuid %s)\n",
              pf["path"].get<std::string>().c_str(), pf["bytes"].get<unsigned long long>(),
              pf["format_version"].get<unsigned>(), pf["store_uuid"].get<std::string>().c_str());
  std::printf(
      "geometry   L=%u s=%llu B W=%llu B T=%llu tokens, pack %llu B, namespace %s\n",
      g["layers"].get<unsigned>(), g["token_bytes"].get<unsigned long long>(),
      g["stripe_bytes"].get<unsigned long long>(), g["tokens_per_stripe"].get<unsigned long long>(),
      g["pack_bytes"].get<unsigned long long>(), pf["namespace"].get<std::string>().c_str());
  PrintIdentityText(j["identity"]);
  std::printf("epoch      %s%s\n",
              st["epoch"].is_null() ? "-" : std::to_string(st["epoch"].get<uint64_t>()).c_str(),
              st["epoch_problem"].is_null()
                  ? ""
                  : (" (epoch file: " + st["epoch_problem"].get<std::string>() + ")").c_str());
  std::printf("dirty      %s\n", st["dirty"].get<bool>()
                                     ? "yes (the journal is replayed, or the index discarded)"
                                     : "no");
  if (st["journal"].is_null()) {
    std::printf("journal    none\n");
  } else {
    const json& jj = st["journal"];
    std::printf(
        "journal    %llu records (%llu publish, %llu remove, %llu epoch), %llu bytes "
        "(%llu intact), last checkpoint epoch %llu, tail %s%s\n",
        jj["records"].get<unsigned long long>(), jj["publishes"].get<unsigned long long>(),
        jj["removes"].get<unsigned long long>(), jj["epochs"].get<unsigned long long>(),
        jj["bytes"].get<unsigned long long>(), jj["intact_bytes"].get<unsigned long long>(),
        jj["base_epoch"].get<unsigned long long>(), jj["tail"].get<std::string>().c_str(),
        jj["problem"].is_null() ? "" : (" (" + jj["problem"].get<std::string>() + ")").c_str());
    if (!jj["replay"].get<std::string>().empty()) {
      std::printf("           a dirty open would: %s\n", jj["replay"].get<std::string>().c_str());
    }
  }
  std::printf("index      %s (%s): %s\n", st["index"].get<std::string>().c_str(),
              st["reason"].get<std::string>().c_str(), st["detail"].get<std::string>().c_str());
  const uint64_t capacity = cap["capacity_bytes"].get<uint64_t>();
  const uint64_t used = cap["used_bytes"].get<uint64_t>();
  std::printf(
      "capacity   %llu slots: %llu visible, %llu free, %llu reserved, %llu retired; "
      "%llu of %llu bytes used (%.1f%%), %llu bytes of valid payload\n",
      cap["pack_slots"].get<unsigned long long>(), cap["visible"].get<unsigned long long>(),
      cap["free"].get<unsigned long long>(), cap["reserved"].get<unsigned long long>(),
      cap["retired"].get<unsigned long long>(), static_cast<unsigned long long>(used),
      static_cast<unsigned long long>(capacity),
      capacity == 0 ? 0.0 : 100.0 * static_cast<double>(used) / static_cast<double>(capacity),
      cap["valid_payload_bytes"].get<unsigned long long>());
  if (!j["digests"].is_null()) {
    std::printf("digests    one per %llu-token block per layer\n",
                j["digests"]["block_tokens"].get<unsigned long long>());
  }
  for (const json& ns : j["namespaces"]) {
    std::printf("namespace  %s: %llu packs, %llu tokens\n", ns["id"].get<std::string>().c_str(),
                ns["packs"].get<unsigned long long>(),
                ns["cached_tokens"].get<unsigned long long>());
    for (const json& p : ns["records"]) {
      std::printf("  slot %-6llu gen %-12llu leases %-3u path tokens [%llu, %llu) parent %s\n",
                  p["slot"].get<unsigned long long>(), p["generation"].get<unsigned long long>(),
                  p["leases"].get<unsigned>(), p["path_token_begin"].get<unsigned long long>(),
                  p["path_token_end"].get<unsigned long long>(),
                  p["parent_slot"].is_null()
                      ? "-"
                      : std::to_string(p["parent_slot"].get<uint64_t>()).c_str());
    }
  }
}

json FsckJson(const FsckReport& r) {
  json problems = json::array();
  for (const FsckProblem& p : r.problems) {
    json pj = {{"kind", p.kind}, {"message", p.message}};
    if (p.block) {
      const persist::BadBlock& b = *p.block;
      pj["namespace"] = b.ns.ToHex();
      pj["slot"] = b.slot;
      pj["generation"] = b.generation;
      pj["layer"] = b.layer;
      pj["pack_tokens"] = {b.pack_tokens.begin, b.pack_tokens.end};
      pj["path_tokens"] = {b.path_tokens.begin, b.path_tokens.end};
    }
    problems.push_back(pj);
  }
  const persist::FsckRecovery& rec = r.recovery;
  json recovery = {{"opens", rec.opens},
                   {"index", rec.index},
                   {"detail", rec.detail},
                   {"packs", rec.packs},
                   {"journal_replayed", rec.journal_replayed},
                   {"publications_kept", rec.publications_kept},
                   {"publications_dropped", rec.publications_dropped},
                   {"in_use_by", rec.in_use_by ? json(*rec.in_use_by) : json(nullptr)}};
  return json{{"store_dir", r.dir},
              {"ok", r.ok()},
              {"recovery", recovery},
              {"packs_checked", r.packs_checked},
              {"blocks_checked", r.blocks_checked},
              {"bytes_read", r.bytes_read},
              {"problems", problems},
              {"problems_omitted", r.problems_omitted}};
}

// Store directories (holding a pack file) one or two levels below `dir`, sorted: a connector's
// <store_dir>/rank-<r>, a store service's <root>/<tenant>/<namespace>.
std::vector<std::string> StoresBelow(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  auto is_store = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p / std::string(persist::kPackFileName), ec);
  };
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code dir_ec;
    if (!e.is_directory(dir_ec)) continue;
    if (is_store(e.path())) {
      out.push_back(e.path().string());
      continue;
    }
    std::error_code inner_ec;
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), inner_ec)) {
      std::error_code f_ec;
      if (f.is_directory(f_ec) && is_store(f.path())) out.push_back(f.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RunInspect(const Config& cfg) {
  std::vector<std::string> dirs = {cfg.dir};
  const bool many = !DefaultEnv()->FileExists(persist::StorePaths(cfg.dir).pack()) &&
                    !(dirs = StoresBelow(cfg.dir)).empty();
  if (!many) dirs = {cfg.dir};
  json stores = json::array();
  bool failed = false;
  for (const std::string& dir : dirs) {
    Result<OfflineStore> store = persist::OpenOffline(DefaultEnv(), dir);
    if (!store.ok()) {
      std::fprintf(stderr, "rangekv inspect: %s%s\n", many ? (dir + ": ").c_str() : "",
                   store.status().ToString().c_str());
      failed = true;
      continue;
    }
    json j = InspectJson(*store);
    if (cfg.json) {
      stores.push_back(std::move(j));
    } else {
      if (&dir != &dirs.front()) std::printf("\n");
      PrintInspectText(j);
      stores.push_back(nullptr);
    }
  }
  if (cfg.json && !stores.empty()) {
    const json out = many ? json{{"store_dir", cfg.dir}, {"stores", stores}} : stores[0];
    std::printf("%s\n", out.dump(2).c_str());
  }
  std::fflush(stdout);
  if (failed) Exit(1);
}

void RunFsck(const Config& cfg) {
  Result<FsckReport> report =
      persist::Fsck(DefaultEnv(), cfg.dir, persist::FsckOptions{.verify_payload = !cfg.no_payload});
  if (!report.ok()) {
    std::fprintf(stderr, "rangekv fsck: %s\n", report.status().ToString().c_str());
    Exit(2);
  }
  if (cfg.json) {
    std::printf("%s\n", FsckJson(*report).dump(2).c_str());
  } else {
    for (const FsckProblem& p : report->problems) {
      std::printf("%-15s %s\n", p.kind.c_str(), p.message.c_str());
    }
    if (report->problems_omitted > 0) {
      std::printf("... and %llu more problems\n",
                  static_cast<unsigned long long>(report->problems_omitted));
    }
    const persist::FsckRecovery& rec = report->recovery;
    if (rec.in_use_by) {
      std::printf(
          "in use          by %s: a running store is dirty and its payload may be ahead "
          "of its snapshot; what follows is what the files say now\n",
          rec.in_use_by->c_str());
    }
    if (!rec.index.empty()) {
      std::printf("next open       %s; index %s: %s\n",
                  rec.opens ? "opens" : "is refused (permissions)", rec.index.c_str(),
                  rec.detail.c_str());
    }
    std::printf(
        "%s: %s; %llu packs, %llu digest blocks, %llu payload bytes verified\n", cfg.dir.c_str(),
        report->ok()
            ? "clean"
            : (std::to_string(report->problems.size() + report->problems_omitted) + " problem(s)")
                  .c_str(),
        static_cast<unsigned long long>(report->packs_checked),
        static_cast<unsigned long long>(report->blocks_checked),
        static_cast<unsigned long long>(report->bytes_read));
  }
  std::fflush(stdout);
  if (!report->ok()) Exit(1);
}

}  // namespace

void AddInspectCommands(CLI::App& app) {
  auto inspect_cfg = std::make_shared<Config>();
  CLI::App* inspect =
      app.add_subcommand("inspect", "Show a store: identity, state, capacity, namespaces, packs");
  inspect
      ->add_option("--dir", inspect_cfg->dir,
                   "Store directory (holds packs.rkv), or a directory of stores one or two "
                   "levels down (a connector's store_dir, a store service's root)")
      ->required();
  inspect->add_flag("--json", inspect_cfg->json, "JSON on stdout (docs/inspect-fsck.md)");
  inspect->callback([inspect_cfg] { RunInspect(*inspect_cfg); });

  auto fsck_cfg = std::make_shared<Config>();
  CLI::App* fsck = app.add_subcommand(
      "fsck", "Verify a store offline: structure and every payload digest (exit 1 on problems)");
  fsck->add_option("--dir", fsck_cfg->dir, "Store directory (holds packs.rkv)")->required();
  fsck->add_flag("--json", fsck_cfg->json, "JSON on stdout (docs/inspect-fsck.md)");
  fsck->add_flag("--no-payload", fsck_cfg->no_payload, "Check structure only; read no payload");
  fsck->callback([fsck_cfg] { RunFsck(*fsck_cfg); });
}

}  // namespace rangekv::tools
