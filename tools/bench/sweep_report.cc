// The sweep's report: the table, the summary lines, the acceptance check and the JSON
// (tools/bench/sweep.h).
#include <cinttypes>
#include <map>
#include <string>

#include "tools/bench/stats.h"
#include "tools/bench/sweep.h"
#include "tools/bench/util.h"

namespace rangekv::tools {

namespace {

uint64_t Counter(const SweepResult& r, const std::string& name) {
  for (const auto& [k, v] : r.counters) {
    if (k == name) return v;
  }
  return 0;
}

}  // namespace

void PrintSweepTable(const SweepReport& rep, std::FILE* out) {
  const bool restore = rep.workload == Workload::kRestore;
  std::fprintf(
      out, "\n%s sweep: %s of %s (%" PRIu64 " tokens x %u layers x %" PRIu64 " B/token/layer%s)\n",
      std::string(WorkloadName(rep.workload)).c_str(), FormatBytes(rep.payload_bytes).c_str(),
      rep.model.c_str(), rep.payload_tokens, rep.geometry.layers, rep.geometry.token_bytes,
      restore
          ? ""
          : (", suffix after a " + std::to_string(rep.prefix_tokens) + "-token prefix").c_str());
  std::fprintf(
      out, "device %s; I/O %s; ceiling %.2f GiB/s (median of %zu)%s\n", rep.device.c_str(),
      rep.io.c_str(), rep.ceiling_gib_s, rep.ceiling_samples_gib_s.size(),
      rep.h2d_ceiling_gib_s > 0
          ? (", host-to-device " + std::to_string(rep.h2d_ceiling_gib_s).substr(0, 5) + " GiB/s")
                .c_str()
          : "");
  if (!rep.grid.empty() || rep.best_ceiling_gib_s > 0) {
    std::fprintf(out,
                 "engine-config ceiling: %s, %.2f GiB/s; best ceiling: %s, %.2f GiB/s (median "
                 "of %zu; grid of %zu cells); /best is every ratio's reference\n",
                 rep.ceiling_config.c_str(), rep.ceiling_gib_s, rep.best_ceiling_config.c_str(),
                 rep.best_ceiling_gib_s, rep.best_ceiling_samples_gib_s.size(), rep.grid.size());
  }
  if (!rep.engine_split.empty())
    std::fprintf(out, "rangekv byte split: %s\n", rep.engine_split.c_str());
  if (restore) {
    std::fprintf(out, "%-10s %8s  %-10s %-20s %9s %7s %6s %6s %9s %8s %7s %9s %8s %6s %7s\n",
                 "point", "objects", "engine", "ablation", "median s", "GiB/s", "/ceil", "/best",
                 "layer0 s", "records", "reads", "calls", "scatters", "ready", "allocs");
  } else {
    std::fprintf(out, "%-10s %8s  %-10s %-20s %9s %7s %6s %6s %8s %9s %8s %7s\n", "point",
                 "objects", "engine", "ablation", "median s", "GiB/s", "/ceil", "/best", "writes",
                 "calls", "gathers", "allocs");
  }
  std::string last_point;
  for (const SweepResult& r : rep.results) {
    if (!last_point.empty() && r.point != last_point) std::fprintf(out, "\n");
    last_point = r.point;
    const std::string objects = std::to_string(r.objects) + (r.scaled ? "*" : "");
    const double ratio = rep.ceiling_gib_s > 0 ? r.gib_s / rep.ceiling_gib_s : 0;
    const std::string abl = r.ablation ? *r.ablation : "-";
    const char* flag = r.verify_failures != 0 ? "  VERIFY FAILED"
                                              : (r.counters_stable ? "" : "  (counters varied)");
    const double best =
        rep.reference_ceiling_gib_s() > 0 ? r.gib_s / rep.reference_ceiling_gib_s() : 0;
    if (restore) {
      std::fprintf(out,
                   "%-10s %8s  %-10s %-20s %9.3f %7.2f %6.2f %6.2f %9.3f %8" PRIu64 " %7" PRIu64
                   " %9" PRIu64 " %8" PRIu64 " %6" PRIu64 " %7" PRIu64 "%s\n",
                   r.point.c_str(), objects.c_str(), r.engine.c_str(), abl.c_str(), r.median_s,
                   r.gib_s, ratio, best, r.first_layer_median_s, Counter(r, "records_selected"),
                   Counter(r, "native_reads"), Counter(r, "native_read_calls"),
                   Counter(r, "scatter_launches"), Counter(r, "ready_events"),
                   Counter(r, "payload_allocations"), flag);
    } else {
      std::fprintf(out,
                   "%-10s %8s  %-10s %-20s %9.3f %7.2f %6.2f %6.2f %8" PRIu64 " %9" PRIu64
                   " %8" PRIu64 " %7" PRIu64 "%s\n",
                   r.point.c_str(), objects.c_str(), r.engine.c_str(), abl.c_str(), r.median_s,
                   r.gib_s, ratio, best, Counter(r, "native_writes"),
                   Counter(r, "native_write_calls"), Counter(r, "gather_launches"),
                   Counter(r, "payload_allocations"), flag);
    }
  }
  bool any_scaled = false;
  for (const SweepResult& r : rep.results) any_scaled = any_scaled || r.scaled;
  if (any_scaled) {
    std::fprintf(out,
                 "* effective count: the nominal count's objects would be smaller than one "
                 "token-layer at this payload, so the count is scaled with the payload "
                 "(paper's object size kept)\n");
  }
  std::fprintf(out, "%s\n",
               restore ? "reads: spans submitted; calls: native read calls (pread/SQE; per-object: "
                         "one per object)"
                       : "writes: spans submitted; calls: native write calls (pwrite/SQE; "
                         "per-object: one per object)");
  std::fprintf(out, "%s\n",
               restore
                   ? "scatters: KV transfer calls (RangeKV: one single-layer launch per stripe; "
                     "per-object: one multi-layer call per object)"
                   : "gathers: KV transfer calls (RangeKV: one per layer group and bank; "
                     "per-object: one multi-layer call per object)");
}

std::vector<std::string> CheckTargets(const SweepReport& rep) {
  std::vector<std::string> missed;
  const bool restore = rep.workload == Workload::kRestore;
  const double target = restore ? 0.95 : 0.90;
  const double ref = rep.reference_ceiling_gib_s();
  std::map<std::string, const SweepResult*> po, off, beside;
  for (const SweepResult& r : rep.results) {
    if (r.engine == "per-object") po[r.point] = &r;
    if (r.engine == "rangekv" && r.ablation && *r.ablation == "checksum=off") off[r.point] = &r;
    if (r.engine == "rangekv" && r.ablation && *r.ablation == kBesidePerObject)
      beside[r.point] = &r;
  }
  double on_s = 0, off_s = 0;
  double lo = 0, hi = 0;  // the default's medians across the points
  size_t points = 0;
  char buf[256];
  for (const SweepResult& r : rep.results) {
    if (r.engine != "rangekv" || r.ablation) continue;
    lo = points == 0 ? r.median_s : std::min(lo, r.median_s);
    hi = std::max(hi, r.median_s);
    ++points;
    if (ref > 0 && r.gib_s / ref < target) {
      std::snprintf(buf, sizeof(buf), "%s point %s: %.3f of the best ceiling (target >= %.2f)",
                    std::string(WorkloadName(rep.workload)).c_str(), r.point.c_str(), r.gib_s / ref,
                    target);
      missed.push_back(buf);
    }
    auto p = po.find(r.point);
    auto b = beside.find(r.point);
    const SweepResult& mine = b != beside.end() ? *b->second : r;
    if (p != po.end() && p->second->median_s < mine.median_s) {
      std::snprintf(buf, sizeof(buf),
                    "%s point %s: rangekv %.3f s%s is slower than the per-object model's %.3f s",
                    std::string(WorkloadName(rep.workload)).c_str(), r.point.c_str(), mine.median_s,
                    b != beside.end() ? " (beside it)" : "", p->second->median_s);
      missed.push_back(buf);
    }
    auto o = off.find(r.point);
    if (o != off.end()) {
      on_s += r.median_s;
      off_s += o->second->median_s;
    }
  }
  if (restore && points > 1 && lo > 0 && (hi - lo) / lo > rep.spread_target) {
    std::snprintf(buf, sizeof(buf), "restore: spread %.1f%% across %zu points (target <= %.0f%%)",
                  (hi - lo) / lo * 100, points, rep.spread_target * 100);
    missed.push_back(buf);
  }
  if (off_s > 0 && on_s / off_s - 1 > 0.02) {
    std::snprintf(buf, sizeof(buf), "%s: checksum cost %.1f%% (target <= 2%%)",
                  std::string(WorkloadName(rep.workload)).c_str(), (on_s / off_s - 1) * 100);
    missed.push_back(buf);
  }
  return missed;
}

void PrintSweepSummary(const SweepReport& rep, std::FILE* out) {
  std::vector<const SweepResult*> rkv;
  std::map<std::string, const SweepResult*> po, off, beside;
  for (const SweepResult& r : rep.results) {
    if (r.engine == "rangekv" && !r.ablation) rkv.push_back(&r);
    if (r.engine == "per-object") po[r.point] = &r;
    if (r.engine == "rangekv" && r.ablation && *r.ablation == "checksum=off") off[r.point] = &r;
    if (r.engine == "rangekv" && r.ablation && *r.ablation == kBesidePerObject)
      beside[r.point] = &r;
  }
  const bool restore = rep.workload == Workload::kRestore;
  const double ref = rep.reference_ceiling_gib_s();
  if (!rkv.empty()) {
    double lo = rkv[0]->median_s;
    double hi = lo;
    double rlo = 1e9, rhi = 0, blo = 1e9, bhi = 0;
    for (const SweepResult* r : rkv) {
      lo = std::min(lo, r->median_s);
      hi = std::max(hi, r->median_s);
      const double ratio = rep.ceiling_gib_s > 0 ? r->gib_s / rep.ceiling_gib_s : 0;
      rlo = std::min(rlo, ratio);
      rhi = std::max(rhi, ratio);
      const double best = ref > 0 ? r->gib_s / ref : 0;
      blo = std::min(blo, best);
      bhi = std::max(bhi, best);
    }
    const double spread = lo > 0 ? (hi - lo) / lo : 0;
    char spread_target[64] = "";
    if (restore) {
      std::snprintf(spread_target, sizeof(spread_target), " (target <= %.0f%%)%s",
                    rep.spread_target * 100, spread <= rep.spread_target ? "" : "  ABOVE TARGET");
    }
    std::fprintf(out, "rangekv: medians %.3f-%.3f s across %zu points, spread %.1f%%%s\n", lo, hi,
                 rkv.size(), spread * 100, spread_target);
    // The same spread with the medium's drift taken out: every point runs once per repetition
    // (RunRangeKvShared), so each time is divided by its repetition's median across points and
    // each point's median of those is compared. A small value says the naming does not matter
    // and a larger plain spread came from the medium changing speed between repetitions. Shown
    // beside the spread, not checked in its place.
    const size_t reps = rkv[0]->samples_s.size();
    bool aligned = rkv.size() > 1 && reps > 1;
    for (const SweepResult* r : rkv) aligned = aligned && r->samples_s.size() == reps;
    if (aligned) {
      std::vector<double> rep_median(reps);
      for (size_t i = 0; i < reps; ++i) {
        std::vector<double> at;
        for (const SweepResult* r : rkv) at.push_back(r->samples_s[i]);
        rep_median[i] = Median(at);
      }
      double plo = 1e9, phi = 0;
      for (const SweepResult* r : rkv) {
        std::vector<double> rel;
        for (size_t i = 0; i < reps; ++i) rel.push_back(r->samples_s[i] / rep_median[i]);
        plo = std::min(plo, Median(rel));
        phi = std::max(phi, Median(rel));
      }
      std::fprintf(out,
                   "rangekv: spread within repetitions %.1f%% (each time over its repetition's "
                   "median across points)\n",
                   (phi - plo) / plo * 100);
      // Whether the points differ at all, told apart from the medium's noise: Friedman's test
      // over the same blocks (with --interleave a repetition ran every point once, side by
      // side; without it the blocks are not one moment, so no test). On a disk whose repetitions
      // vary by several percent, a spread of medians of a few percent is what identical points
      // give too (docs/benchmarks.md, 2026-12-06); a Q under the 5% critical value says the
      // measurements do not show the naming mattering.
      std::vector<std::vector<double>> samples;
      for (const SweepResult* r : rkv) samples.push_back(r->samples_s);
      const std::optional<double> q = FriedmanQ(samples);
      const std::optional<double> critical = ChiSquare95(rkv.size() - 1);
      if (rep.interleaved && q && critical) {
        std::fprintf(out,
                     "rangekv: naming effect: Friedman Q %.2f over %zu repetitions, 5%% critical "
                     "value %.2f (df %zu): %s\n",
                     *q, reps, *critical, rkv.size() - 1,
                     *q > *critical ? "the points differ" : "no difference shown");
      }
    }
    if (rep.ceiling_gib_s > 0) {
      std::fprintf(out, "rangekv / engine-config ceiling (%s): %.2f-%.2f\n",
                   rep.ceiling_config.c_str(), rlo, rhi);
      const double target = restore ? 0.95 : 0.90;
      std::fprintf(out, "rangekv / best ceiling (%s, %.2f GiB/s): %.2f-%.2f (target >= %.2f)%s\n",
                   rep.best_ceiling_config.c_str(), ref, blo, bhi, target,
                   blo >= target ? "" : "  BELOW TARGET");
    }
  }
  for (const SweepResult* r : rkv) {
    auto it = po.find(r->point);
    if (it == po.end() || r->median_s <= 0) continue;
    auto b = beside.find(r->point);
    const SweepResult* mine = b != beside.end() && b->second->median_s > 0 ? b->second : r;
    std::fprintf(out,
                 "  %-10s per-object / rangekv time: %.2fx%s%s; per-object / best ceiling %.2f\n",
                 r->point.c_str(), it->second->median_s / mine->median_s,
                 mine != r ? " (rangekv beside it)" : "",
                 it->second->median_s < mine->median_s ? "  (RANGEKV SLOWER)" : "",
                 ref > 0 ? it->second->gib_s / ref : 0);
  }
  double on_s = 0, off_s = 0, on_cpu_s = 0, off_cpu_s = 0;
  for (const SweepResult* r : rkv) {
    auto it = off.find(r->point);
    if (it == off.end()) continue;
    on_s += r->median_s;
    off_s += it->second->median_s;
    on_cpu_s += r->cpu_median_s;
    off_cpu_s += it->second->cpu_median_s;
  }
  if (off_s > 0) {
    std::fprintf(out, "checksum cost (sum of medians, on / off - 1): %.1f%% (target <= 2%%)\n",
                 (on_s / off_s - 1) * 100);
  }
  // The same arms' process CPU over each restore (every thread: I/O, workers, host device): what
  // the digests cost whatever the medium's speed at that moment.
  if (off_cpu_s > 0) {
    std::fprintf(out,
                 "checksum CPU (process CPU per restore, sum of medians): on %.3f s, off %.3f s "
                 "(%+.1f%%)\n",
                 on_cpu_s, off_cpu_s, (on_cpu_s / off_cpu_s - 1) * 100);
  }
  // The journal's cost on the store path (a store run with the durability=none configuration
  // beside the default): measured twice, as the stores' time against durability=none in the
  // same run (machine noise included), and directly, as the stores' own wait on the journal
  // (journal_wait_ns) over their time.
  std::map<std::string, const SweepResult*> unjournaled;
  for (const SweepResult& r : rep.results) {
    if (r.engine == "rangekv" && r.ablation && *r.ablation == "durability=none") {
      unjournaled[r.point] = &r;
    }
  }
  if (!restore && !unjournaled.empty() && rep.durability != "none") {
    double with_s = 0, without_s = 0, wait_ms = 0;
    for (const SweepResult* r : rkv) {
      auto it = unjournaled.find(r->point);
      if (it == unjournaled.end()) continue;
      with_s += r->median_s;
      without_s += it->second->median_s;
      for (const auto& [name, v] : r->phases_ms) {
        if (name == "journal_wait_ns") wait_ms += Median(v);
      }
    }
    if (without_s > 0) {
      // Run one after the other, the two arms meet different moments of a medium whose speed
      // drifts: on the dev VM's disk the unjournaled arm read 10% faster in one run and 20%
      // slower in the next (docs/benchmarks.md, 2026-12-05 fourth session).
      std::fprintf(out,
                   "journal cost (%s against durability=none, sum of medians, %s): %+.1f%% of "
                   "store time; the stores' own wait on the journal: %.2f%% (target <= 2%%)\n",
                   rep.durability.c_str(),
                   rep.interleaved ? "side by side"
                                   : "one after the other, the medium's drift included; "
                                     "--interleave runs them side by side",
                   (with_s / without_s - 1) * 100, with_s > 0 ? wait_ms / 1e3 / with_s * 100 : 0);
    }
  }
  for (const SweepResult* r : rkv) {
    if (r->phases_ms.empty()) continue;
    // Summed over a run's stripes (restore) or batches (store), so a phase may exceed the wall
    // time when its workers overlap: restore_read_ns / wall is the reads' mean concurrency.
    std::fprintf(out, "  %-10s phases (median ms, summed over %s):", r->point.c_str(),
                 restore ? "stripes" : "batches");
    for (const auto& [name, v] : r->phases_ms)
      std::fprintf(out, " %s %.1f", name.c_str(), Median(v));
    std::fprintf(out, " (%s wall %.1f ms)\n", restore ? "restore" : "store", r->median_s * 1e3);
  }
  if (rep.verify_failures != 0) {
    std::fprintf(out, "VERIFICATION FAILED in %" PRIu64 " repetitions\n", rep.verify_failures);
  } else {
    std::fprintf(out, "every repetition verified bit for bit\n");
  }
}

nlohmann::json SweepJson(const SweepReport& rep) {
  nlohmann::json grid = GridJson(rep.grid);
  nlohmann::json results = nlohmann::json::array();
  for (const SweepResult& r : rep.results) {
    nlohmann::json counters = nlohmann::json::object();
    for (const auto& [k, v] : r.counters) counters[k] = v;
    nlohmann::json j = {
        {"engine", r.engine},
        {"ablation", r.ablation ? nlohmann::json(*r.ablation) : nlohmann::json()},
        {"objects", r.objects},
        {"nominal_objects", r.nominal_objects},
        {"point", r.point},
        {"scaled", r.scaled},
        {"layerwise", r.layerwise},
        {"median_s", r.median_s},
        {"gib_s", r.gib_s},
        {"ratio_to_ceiling", rep.ceiling_gib_s > 0 ? r.gib_s / rep.ceiling_gib_s : 0},
        {"ratio_to_best_ceiling",
         rep.reference_ceiling_gib_s() > 0 ? r.gib_s / rep.reference_ceiling_gib_s() : 0},
        {"samples_s", r.samples_s},
        {"counters", counters},
        {"counters_stable", r.counters_stable},
        {"phases_median_ms",
         [&] {
           nlohmann::json p = nlohmann::json::object();
           for (const auto& [name, v] : r.phases_ms) p[name] = Median(v);
           return p;
         }()},
        {"verify_failures", r.verify_failures}};
    if (rep.workload == Workload::kRestore) {
      j["first_layer_median_s"] = r.first_layer_median_s;
      j["first_layer_s"] = r.first_layer_s;
      if (!r.cpu_s.empty()) {
        j["cpu_median_s"] = r.cpu_median_s;
        j["cpu_s"] = r.cpu_s;
      }
    }
    results.push_back(std::move(j));
  }
  nlohmann::json j = {{"workload", std::string(WorkloadName(rep.workload))},
                      {"device", rep.device},
                      {"io", rep.io},
                      {"direct_io", rep.direct},
                      {"model", rep.model},
                      {"token_bytes", rep.geometry.token_bytes},
                      {"layers", rep.geometry.layers},
                      {"stripe_bytes", rep.geometry.stripe_bytes},
                      {"payload_bytes", rep.payload_bytes},
                      {"payload_tokens", rep.payload_tokens},
                      {"prefix_tokens", rep.prefix_tokens},
                      {"ceiling_gib_s", rep.ceiling_gib_s},
                      {"ceiling_samples_gib_s", rep.ceiling_samples_gib_s},
                      {"ceiling_config", rep.ceiling_config},
                      {"best_ceiling_gib_s", rep.reference_ceiling_gib_s()},
                      {"best_ceiling_samples_gib_s", rep.best_ceiling_samples_gib_s},
                      {"best_ceiling_config", rep.best_ceiling_config},
                      {"best_ceiling_threads", rep.best_ceiling_threads},
                      {"best_ceiling_request_bytes", rep.best_ceiling_request_bytes},
                      {"ceiling_grid", grid},
                      {"engine_split", rep.engine_split},
                      {"durability", rep.durability},
                      {"interleaved", rep.interleaved},
                      {"results", results},
                      {"verify_failures", rep.verify_failures},
                      {"machine", rep.machine.ToJson()},
                      {"wall_s", rep.wall_s}};
  if (rep.h2d_ceiling_gib_s > 0) j["h2d_ceiling_gib_s"] = rep.h2d_ceiling_gib_s;
  return j;
}

}  // namespace rangekv::tools
