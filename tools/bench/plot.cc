// `--plot FILE.svg|png` of `rangekv bench restore|store`: median time against the object-count
// point for every arm (RangeKV default, each ablation, the per-object model), with the time the
// engine-configuration and best ceilings would take as horizontal lines.
//
// SVG is written here, directly (no dependency, so every machine that runs the bench can plot,
// and the file is plain text that diffs and renders in a browser). PNG needs a rasteriser: the
// report is written as JSON next to the target and `python3 -m rangekv.bench.plots` (matplotlib)
// draws it; without matplotlib the call fails with that reason.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/sweep.h"
#include "tools/bench/util.h"

namespace rangekv::tools {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

Status WriteSvg(const SweepReport& rep, const std::string& path) {
  std::vector<std::string> points;
  std::map<std::string, std::map<std::string, double>> arms;  // arm -> point -> median s
  std::vector<std::string> arm_order;
  for (const SweepResult& r : rep.results) {
    if (std::find(points.begin(), points.end(), r.point) == points.end()) points.push_back(r.point);
    const std::string arm = r.engine + (r.ablation ? " " + *r.ablation : std::string());
    if (arms.find(arm) == arms.end()) arm_order.push_back(arm);
    arms[arm][r.point + (r.scaled ? "" : "")] = r.median_s;
  }
  if (points.empty()) return InvalidArgument("no results to plot");
  const double gib = static_cast<double>(rep.payload_bytes) / (1024.0 * 1024 * 1024);
  std::vector<std::pair<std::string, double>> lines;
  if (rep.ceiling_gib_s > 0) {
    lines.push_back(
        {"engine-config ceiling (" + rep.ceiling_config + ")", gib / rep.ceiling_gib_s});
  }
  if (rep.reference_ceiling_gib_s() > 0 && rep.best_ceiling_config != rep.ceiling_config) {
    lines.push_back(
        {"best ceiling (" + rep.best_ceiling_config + ")", gib / rep.reference_ceiling_gib_s()});
  }
  double ymax = 0;
  for (const auto& [arm, m] : arms) {
    for (const auto& [p, v] : m) ymax = std::max(ymax, v);
  }
  for (const auto& l : lines) ymax = std::max(ymax, l.second);
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const int W = 900, H = 520, L = 70, R = 300, T = 40, B = 60;
  const double pw = W - L - R, ph = H - T - B;
  auto X = [&](size_t i) {
    return L + (points.size() == 1 ? pw / 2 : pw * static_cast<double>(i) / (points.size() - 1));
  };
  auto Y = [&](double v) { return T + ph * (1 - v / ymax); };
  const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << L << "\" y=\"22\" font-size=\"14\">rangekv bench "
      << WorkloadName(rep.workload) << ": " << Escape(FormatBytes(rep.payload_bytes)) << ", "
      << Escape(rep.device) << ", " << (rep.direct ? "O_DIRECT" : "buffered") << ", "
      << Escape(rep.machine.date) << "</text>\n";
  // Axes and grid.
  svg << "<line x1=\"" << L << "\" y1=\"" << T + ph << "\" x2=\"" << L + pw << "\" y2=\"" << T + ph
      << "\" stroke=\"black\"/>\n<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L
      << "\" y2=\"" << T + ph << "\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 5; ++k) {
    const double v = ymax * k / 5;
    char label[32];
    std::snprintf(label, sizeof(label), "%.3f", v);
    svg << "<line x1=\"" << L << "\" y1=\"" << Y(v) << "\" x2=\"" << L + pw << "\" y2=\"" << Y(v)
        << "\" stroke=\"#ddd\"/><text x=\"" << L - 8 << "\" y=\"" << Y(v) + 4
        << "\" text-anchor=\"end\">" << label << "</text>\n";
  }
  svg << "<text x=\"16\" y=\"" << T + ph / 2 << "\" transform=\"rotate(-90 16 " << T + ph / 2
      << ")\" text-anchor=\"middle\">median time, s</text>\n";
  for (size_t i = 0; i < points.size(); ++i) {
    svg << "<text x=\"" << X(i) << "\" y=\"" << T + ph + 18 << "\" text-anchor=\"middle\">"
        << Escape(points[i]) << "</text>\n";
  }
  svg << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 16
      << "\" text-anchor=\"middle\">logical objects naming the same bytes</text>\n";
  // Ceilings.
  int legend_y = T + 10;
  auto legend = [&](const std::string& text, const std::string& colour, bool dashed) {
    svg << "<line x1=\"" << L + pw + 20 << "\" y1=\"" << legend_y << "\" x2=\"" << L + pw + 45
        << "\" y2=\"" << legend_y << "\" stroke=\"" << colour << "\" stroke-width=\"2\""
        << (dashed ? " stroke-dasharray=\"6,4\"" : "") << "/><text x=\"" << L + pw + 50 << "\" y=\""
        << legend_y + 4 << "\">" << Escape(text) << "</text>\n";
    legend_y += 20;
  };
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string colour = k == 0 ? "#555" : "#000";
    svg << "<line x1=\"" << L << "\" y1=\"" << Y(lines[k].second) << "\" x2=\"" << L + pw
        << "\" y2=\"" << Y(lines[k].second) << "\" stroke=\"" << colour
        << "\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
    legend(lines[k].first, colour, true);
  }
  // Arms.
  for (size_t a = 0; a < arm_order.size(); ++a) {
    const std::string colour = colours[a % 8];
    const auto& m = arms[arm_order[a]];
    std::string poly;
    for (size_t i = 0; i < points.size(); ++i) {
      auto it = m.find(points[i]);
      if (it == m.end()) continue;
      poly += std::to_string(X(i)) + "," + std::to_string(Y(it->second)) + " ";
      svg << "<circle cx=\"" << X(i) << "\" cy=\"" << Y(it->second) << "\" r=\"3.5\" fill=\""
          << colour << "\"/>\n";
    }
    svg << "<polyline points=\"" << poly << "\" fill=\"none\" stroke=\"" << colour
        << "\" stroke-width=\"2\"/>\n";
    legend(arm_order[a], colour, false);
  }
  svg << "</svg>\n";
  std::ofstream out(path);
  out << svg.str();
  if (!out) return Status(StatusCode::kIoError, "cannot write " + path);
  return OkStatus();
}

}  // namespace

Status WriteSweepPlot(const SweepReport& report, const std::string& path) {
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".svg")) return WriteSvg(report, path);
  if (!ends(".png")) return InvalidArgument("plot file must end in .svg or .png: " + path);
  const std::string json_path = path + ".json";
  {
    std::ofstream out(json_path);
    out << SweepJson(report).dump() << "\n";
    if (!out) return Status(StatusCode::kIoError, "cannot write " + json_path);
  }
  const std::string cmd = "python3 -m rangekv.bench.plots '" + json_path + "' '" + path + "' 1>&2";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return NotSupported("PNG needs python3 with the rangekv package and matplotlib (`" + cmd +
                        "` exited " + std::to_string(WEXITSTATUS(rc)) +
                        "); use --plot FILE.svg, which needs nothing");
  }
  return OkStatus();
}

}  // namespace rangekv::tools
