// `rangekv bench concurrent`'s table and JSON (tools/bench/concurrent.h).
#include <algorithm>
#include <cstdio>

#include "tools/bench/concurrent.h"
#include "tools/bench/machine.h"
#include "tools/bench/stats.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

struct PhaseMedians {
  double start = 0, looked_up = 0, bound = 0, first = 0, last = 0, end = 0, max_end = 0;
};

PhaseMedians Phases(const ConcurrentRow& r) {
  auto median = [&](double RequestTimeline::*field) {
    std::vector<double> v;
    for (const RequestTimeline& t : r.timelines) v.push_back(t.*field);
    return Median(v);
  };
  PhaseMedians m;
  m.start = median(&RequestTimeline::start);
  m.looked_up = median(&RequestTimeline::looked_up);
  m.bound = median(&RequestTimeline::bound);
  m.first = median(&RequestTimeline::first);
  m.last = median(&RequestTimeline::last);
  m.end = median(&RequestTimeline::end);
  for (const RequestTimeline& t : r.timelines) m.max_end = std::max(m.max_end, t.end);
  return m;
}

std::string Fixed(double v, int decimals = 2) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

}  // namespace

void PrintConcurrentReport(const ConcurrentReport& rep, const ConcurrentOptions& o,
                           std::FILE* out) {
  std::fprintf(out,
               "rangekv bench concurrent: %s per round (split over N requests), %s per token, "
               "stripe %s, device %s\n",
               FormatBytes(rep.total_bytes).c_str(), FormatBytes(rep.row_bytes).c_str(),
               FormatBytes(rep.geometry.stripe_bytes).c_str(), rep.device.c_str());
  if (o.mode != "embedded" && o.read_gate > 0) {
    std::fprintf(out,
                 "service clients pass the node's read gate: %u read pieces in flight across "
                 "all of them (rangekv serve --read-slots, EngineTuning::read_gate)\n",
                 o.read_gate);
  } else if (o.mode != "embedded") {
    std::fprintf(out, "service clients' reads are not gated (--read-gate 0)\n");
  }
  std::fprintf(out, "%-9s %-12s %4s %4s %4s %10s %9s %10s %9s %9s %9s %9s %11s %11s %8s\n", "mode",
               "variant", "N", "rst", "sto", "agg GiB/s", "x ceiling", "x embedded", "p50 ms",
               "p90 ms", "p99 ms", "p99/p50", "sto p50 ms", "sto p99 ms", "verify");
  for (const ConcurrentRow& r : rep.rows) {
    const std::string vs_embedded =
        r.embedded_gib_s > 0 ? Fixed(r.aggregate_median / r.embedded_gib_s) : "-";
    const bool mixed = !r.store_latencies_s.empty();
    std::fprintf(out,
                 "%-9s %-12s %4u %4u %4u %10.2f %9.2f %10s %9.1f %9.1f %9.1f %9.2f %11s %11s %8s\n",
                 ModeName(r.mode), VariantName(r.variant), r.n, r.restores, r.stores,
                 r.aggregate_median, r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0,
                 vs_embedded.c_str(), r.p50 * 1e3, r.p90 * 1e3, r.p99 * 1e3,
                 r.p50 > 0 ? r.p99 / r.p50 : 0, mixed ? Fixed(r.store_p50 * 1e3, 1).c_str() : "-",
                 mixed ? Fixed(r.store_p99 * 1e3, 1).c_str() : "-",
                 r.verify_failures == 0 ? "ok" : "FAILED");
  }
  for (const auto& [n, config] : rep.ceiling_config) {
    std::fprintf(out,
                 "N=%u: best read ceiling %.2f GiB/s (%s); every x ceiling of this N is against "
                 "it\n",
                 n, rep.ceiling_gib_s.at(n), config.c_str());
  }
  std::fprintf(out,
               "phases, median ms from the round's start over every request (start: the request "
               "began; lookup: answered; bound: restore started, slots bound / store begun; "
               "first, last: layer ready / visible; end: finished and released):\n");
  std::fprintf(out, "%-9s %-12s %4s %8s %8s %8s %8s %8s %8s %9s\n", "mode", "variant", "N", "start",
               "lookup", "bound", "first", "last", "end", "max end");
  for (const ConcurrentRow& r : rep.rows) {
    const PhaseMedians m = Phases(r);
    std::fprintf(out, "%-9s %-12s %4u %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f\n",
                 ModeName(r.mode), VariantName(r.variant), r.n, m.start * 1e3, m.looked_up * 1e3,
                 m.bound * 1e3, m.first * 1e3, m.last * 1e3, m.end * 1e3, m.max_end * 1e3);
  }
  MachineInfo m = DescribeMachine(o.dir.empty() ? "/var/tmp" : o.dir);
  std::fprintf(out, "machine: %u cores, %.1f GiB, Linux %s, %s; %s; wall %.0f s\n", m.nproc,
               m.memory_gib, m.kernel.c_str(), m.file_system.c_str(), m.date.c_str(), rep.wall_s);
}

nlohmann::json ConcurrentJson(const ConcurrentReport& rep, const ConcurrentOptions& o) {
  nlohmann::json j;
  j["workload"] = "concurrent";
  j["device"] = rep.device;
  j["io"] = o.io;
  j["direct"] = !o.buffered;
  j["model"] = "Llama-3.1-8B";
  j["stripe_bytes"] = rep.geometry.stripe_bytes;
  j["total_bytes"] = rep.total_bytes;
  j["reps"] = o.reps;
  j["warmups"] = o.warmups;
  j["machine"] = DescribeMachine(o.dir.empty() ? "/var/tmp" : o.dir).ToJson();
  j["wall_s"] = rep.wall_s;
  j["read_gate_slots"] = o.mode == "embedded" ? 0u : o.read_gate;
  nlohmann::json rs = nlohmann::json::array();
  for (const ConcurrentRow& r : rep.rows) {
    nlohmann::json x;
    x["mode"] = ModeName(r.mode);
    x["variant"] = VariantName(r.variant);
    x["n"] = r.n;
    x["restores"] = r.restores;
    x["stores"] = r.stores;
    x["request_tokens"] = r.request_tokens;
    x["bytes_per_rep"] = r.bytes_per_rep;
    x["aggregate_gib_s"] = r.aggregate_median;
    x["aggregate_samples_gib_s"] = r.aggregate_gib_s;
    x["ceiling_gib_s"] = r.ceiling_gib_s;
    x["ceiling_config"] = r.ceiling_config;
    x["ratio_to_ceiling"] = r.ceiling_gib_s > 0 ? r.aggregate_median / r.ceiling_gib_s : 0;
    if (r.embedded_gib_s > 0) {
      x["embedded_gib_s"] = r.embedded_gib_s;
      x["ratio_to_embedded"] = r.aggregate_median / r.embedded_gib_s;
    }
    x["latency_p50_s"] = r.p50;
    x["latency_p90_s"] = r.p90;
    x["latency_p99_s"] = r.p99;
    x["p99_over_p50"] = r.p50 > 0 ? r.p99 / r.p50 : 0;
    // p50/p90/p99 above are the restores' (the stores' in a store-only row); a mixed row's
    // stores separately.
    x["latency_kind"] = r.restores > 0 ? "restore" : "store";
    if (!r.store_latencies_s.empty()) {
      x["store_latency_p50_s"] = r.store_p50;
      x["store_latency_p99_s"] = r.store_p99;
    }
    x["verify_failures"] = r.verify_failures;
    const PhaseMedians m = Phases(r);
    x["phase_medians_s"] = {{"start", m.start},    {"lookup", m.looked_up}, {"bound", m.bound},
                            {"first", m.first},    {"last", m.last},        {"end", m.end},
                            {"max_end", m.max_end}};
    rs.push_back(x);
  }
  j["results"] = rs;
  return j;
}

}  // namespace rangekv::tools
