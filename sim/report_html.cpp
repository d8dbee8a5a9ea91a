#include "sim/report_html.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/units.h"

namespace stalloc {

namespace {

constexpr int kPlotWidth = 420;
constexpr int kPlotHeight = 190;
constexpr int kLeft = 52;  // room for the byte axis labels
constexpr int kRight = 8;
constexpr int kTop = 8;
constexpr int kBottom = 22;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent(double v) { return fixed(v * 100.0, 1) + "%"; }

// A table cell: estimated driver seconds and their share of the iteration (red above 1%).
std::string time_cell(double seconds, double share, double iteration_seconds) {
  if (iteration_seconds <= 0.0) return "<td>" + fixed(seconds * 1e3, 1) + " ms</td>";
  return std::string("<td class=\"") + (share > 0.01 ? "bad" : "good") + "\">" + fixed(seconds * 1e3, 1) +
         " ms (" + percent(share) + ")</td>";
}

// The same for a whole run: seconds, and the share with two decimals (red above the 0.1% target).
std::string run_cell(const SimResult::TimeEstimate& t) {
  if (t.iteration_seconds <= 0.0) return "<td>" + fixed(t.allocator_seconds_run, 2) + " s</td>";
  return std::string("<td class=\"") + (t.overhead_run > 0.001 ? "bad" : "good") + "\">" +
         fixed(t.allocator_seconds_run, 2) + " s (" + fixed(t.overhead_run * 100.0, 2) + "%)</td>";
}

// Per workload, one row of bars per allocator: the estimated driver time of each iteration, on a
// scale shared by the workload's allocators, with the iteration time as a reference.
std::string driver_time_section(const std::vector<SimResult>& results) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const SimResult*>> by_workload;
  for (const SimResult& r : results) {
    if (r.recorded) continue;  // its calls were not recorded
    if (!by_workload.count(r.workload)) order.push_back(r.workload);
    by_workload[r.workload].push_back(&r);
  }
  std::ostringstream html;
  html << "<h2>Estimated driver time per iteration</h2>\n<p class=\"meta\">One bar per iteration, "
          "first to last; the scale is shared by a workload's allocators and printed at its right.</p>\n";
  for (const std::string& w : order) {
    double top = 0.0;
    for (const SimResult* r : by_workload[w]) {
      for (double s : r->time.allocator_seconds) top = std::max(top, s);
    }
    if (top <= 0.0) top = 1e-6;
    const SimResult& any = *by_workload[w].front();
    html << "<h3>" << escape(w) << "</h3><p class=\"meta\">scale " << fixed(top * 1e3, 1) << " ms"
         << (any.time.iteration_seconds > 0.0 ? " &middot; iteration " + fixed(any.time.iteration_seconds, 3) + " s (" +
                                                    escape(any.time.iteration_source) + ")"
                                              : std::string(" &middot; iteration time unknown"))
         << "</p>\n<table>";
    for (const SimResult* r : by_workload[w]) {
      const auto& bars = r->time.allocator_seconds;
      const int width = 360;
      const double bar = bars.empty() ? 0.0 : static_cast<double>(width) / static_cast<double>(bars.size());
      html << "<tr><td class=\"l\">" << escape(r->allocator) << "</td><td class=\"l\"><svg class=\"plot\" width=\""
           << width << "\" height=\"24\">";
      for (std::size_t i = 0; i < bars.size(); ++i) {
        const double h = std::max(bars[i] > 0.0 ? 1.0 : 0.0, 22.0 * bars[i] / top);
        html << "<rect class=\"allocated\" x=\"" << fixed(static_cast<double>(i) * bar, 1) << "\" y=\""
             << fixed(23.0 - h, 1) << "\" width=\"" << fixed(std::max(1.0, bar - 1.0), 1) << "\" height=\""
             << fixed(h, 1) << "\"/>";
      }
      html << "</svg></td></tr>\n";
    }
    html << "</table>\n";
  }
  return html.str();
}

// Allocated as a filled area, reserved as a line above it, both against the event index.
// y runs from y_min (not always 0: persistent state can dwarf what changes) to y_max.
std::string plot(const SimResult& r, std::uint64_t y_min, std::uint64_t y_max, std::uint64_t x_max,
                 std::uint64_t capacity) {
  const double w = kPlotWidth - kLeft - kRight;
  const double h = kPlotHeight - kTop - kBottom;
  auto x = [&](std::uint64_t event) {
    return kLeft + w * static_cast<double>(event) / static_cast<double>(std::max<std::uint64_t>(1, x_max));
  };
  auto y = [&](std::uint64_t bytes) {
    const double span = static_cast<double>(std::max<std::uint64_t>(1, y_max - y_min));
    const double v = static_cast<double>(std::max(bytes, y_min) - y_min);
    return kTop + h - h * std::min(1.0, v / span);
  };
  std::ostringstream svg;
  svg << "<svg class=\"plot\" viewBox=\"0 0 " << kPlotWidth << ' ' << kPlotHeight << "\" width=\"" << kPlotWidth
      << "\" height=\"" << kPlotHeight << "\" role=\"img\" aria-label=\"" << escape(r.allocator)
      << " allocated and reserved bytes over the trace\">";
  for (int i = 0; i <= 4; ++i) {
    const std::uint64_t bytes = y_min + (y_max - y_min) / 4 * static_cast<std::uint64_t>(i);
    const double yy = y(bytes);
    svg << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kPlotWidth - kRight << "\" y1=\"" << fixed(yy, 1)
        << "\" y2=\"" << fixed(yy, 1) << "\"/>";
    svg << "<text class=\"tick\" x=\"" << kLeft - 4 << "\" y=\"" << fixed(yy + 3, 1) << "\" text-anchor=\"end\">"
        << escape(format_bytes(bytes)) << "</text>";
  }
  svg << "<text class=\"tick\" x=\"" << kLeft << "\" y=\"" << kPlotHeight - 6 << "\">event 0</text>";
  svg << "<text class=\"tick\" x=\"" << kPlotWidth - kRight << "\" y=\"" << kPlotHeight - 6
      << "\" text-anchor=\"end\">" << x_max << "</text>";
  if (!r.timeline.empty()) {
    std::ostringstream area, line;
    area << "M" << fixed(x(0), 1) << ',' << fixed(y(y_min), 1);
    for (std::size_t i = 0; i < r.timeline.size(); ++i) {
      const TimelinePoint& p = r.timeline[i];
      area << " L" << fixed(x(p.event), 1) << ',' << fixed(y(p.allocated), 1);
      line << (i == 0 ? "M" : " L") << fixed(x(p.event), 1) << ',' << fixed(y(p.reserved), 1);
    }
    area << " L" << fixed(x(r.timeline.back().event), 1) << ',' << fixed(y(y_min), 1) << " Z";
    svg << "<path class=\"allocated\" d=\"" << area.str() << "\"/>";
    svg << "<path class=\"reserved\" d=\"" << line.str() << "\"/>";
  }
  if (capacity > 0 && capacity <= y_max && capacity >= y_min) {
    svg << "<line class=\"capacity\" x1=\"" << kLeft << "\" x2=\"" << kPlotWidth - kRight << "\" y1=\""
        << fixed(y(capacity), 1) << "\" y2=\"" << fixed(y(capacity), 1) << "\"/>";
  }
  if (r.oom) {
    const double xx = x(r.oom_event);
    svg << "<line class=\"oom\" x1=\"" << fixed(xx, 1) << "\" x2=\"" << fixed(xx, 1) << "\" y1=\"" << kTop
        << "\" y2=\"" << kTop + h << "\"/><text class=\"oomlabel\" x=\"" << fixed(xx - 3, 1) << "\" y=\"" << kTop + 12
        << "\" text-anchor=\"end\">OOM</text>";
  }
  svg << "</svg>";
  return svg.str();
}

const char* kStyle = R"(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.meta{color:#5a6475;margin:0 0 16px}code{background:#f2f4f8;padding:1px 4px;border-radius:3px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:4px 10px;border-bottom:1px solid #e6e9ef;text-align:right;white-space:nowrap}
th{background:#f5f7fa;font-weight:600}td.l,th.l{text-align:left}
tr.first td{border-top:2px solid #c9d0db}
.bad{color:#b3261e;font-weight:600}.good{color:#1e7b34}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #dde2ea;border-radius:6px;padding:8px 10px;width:420px}
.card h3{font-size:14px;margin:0 0 2px}.card p{margin:0 0 4px;color:#5a6475;font-size:12px}
.plot .grid{stroke:#eceff4;stroke-width:1}.plot .tick{font-size:10px;fill:#6b7483}
.plot .allocated{fill:#9cc3ee;stroke:#3b7dc4;stroke-width:1}
.plot .reserved{fill:none;stroke:#d9480f;stroke-width:1.6}
.plot .capacity{stroke:#333;stroke-dasharray:4 3;stroke-width:1}
.plot .oom{stroke:#b3261e;stroke-width:1.5}.plot .oomlabel{font-size:10px;fill:#b3261e}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px;border-radius:2px}
)";

}  // namespace

std::string render_html_report(const ReportInput& in) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stalloc sim report</title><style>"
       << kStyle << "</style></head><body>\n";
  html << "<h1>stalloc simulator report</h1>\n<p class=\"meta\">";
  if (!in.command.empty()) html << "<code>" << escape(in.command) << "</code><br>";
  html << "capacity " << (in.capacity ? escape(format_bytes(in.capacity)) : std::string("unlimited"))
       << " &middot; " << in.results.size() << " runs &middot; " << fixed(in.seconds, 1) << " s. "
       << "Utilization = peak allocated / peak reserved; waste = peak reserved - peak allocated.</p>\n";

  html << "<h2>Results</h2>\n<table><thead><tr><th class=\"l\">workload</th><th class=\"l\">allocator</th>"
          "<th>peak allocated</th><th>peak reserved</th><th>utilization</th><th>waste</th><th>OOM</th>"
          "<th>calls, costliest warm-up iteration</th><th>calls/iter (steady)</th><th>est. driver time, warm-up</th>"
          "<th>est. driver time, steady</th><th>est. driver time, run</th><th>sim time</th></tr></thead><tbody>\n";
  std::string last_workload;
  for (const SimResult& r : in.results) {
    const bool first = r.workload != last_workload;
    last_workload = r.workload;
    html << "<tr" << (first ? " class=\"first\"" : "") << "><td class=\"l\">" << escape(r.workload)
         << "</td><td class=\"l\">" << escape(r.allocator) << "</td><td>" << escape(format_bytes(r.peak_allocated_bytes))
         << "</td><td>" << escape(format_bytes(r.peak_reserved_bytes)) << "</td><td class=\""
         << (r.utilization < 0.9 ? "bad" : "good") << "\">" << percent(r.utilization) << "</td><td>"
         << escape(format_bytes(r.waste_bytes)) << "</td>";
    if (r.recorded) {  // the recorded run's own allocator: no calls or times recorded
      html << "<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>\n";
      continue;
    }
    html << "<td" << (r.oom ? " class=\"bad\">at event " + std::to_string(r.oom_event) : std::string(">") + (in.capacity ? "no" : "-"))
         << "</td><td>" << r.time.first_calls.total() << "</td><td>" << fixed(r.driver_calls_per_iteration, 0)
         << "</td>" << time_cell(r.time.allocator_seconds_first, r.time.overhead_first, r.time.iteration_seconds)
         << time_cell(r.time.allocator_seconds_steady, r.time.overhead_steady, r.time.iteration_seconds)
         << run_cell(r.time) << "<td>"
         << fixed(r.milliseconds, 0) << " ms</td></tr>\n";
  }
  html << "</tbody></table>\n<p class=\"meta\">est. = estimated from the cost table of "
          "docs/driver_costs.md (GPU "
       << escape(in.results.empty() ? std::string() : in.results.front().time.gpu)
       << "), no GPU measured; the share is of the iteration's time (time stamps of a real trace, or "
          "FLOPs at 40% MFU); the run is "
       << (in.results.empty() ? 0 : in.results.front().time.run_iterations)
       << " iterations: the simulated ones (the last recorded iteration repeated to reach the steady "
          "state), then the steady one for the rest, its share of the run's time.</p>\n";
  html << driver_time_section(in.results);

  if (!in.sweep.empty()) {
    html << "<h2>Sweep: largest configuration without OOM under " << escape(format_bytes(in.capacity))
         << "</h2>\n<table><thead><tr><th class=\"l\">workload</th><th class=\"l\">allocator</th><th>parameter</th>"
            "<th>largest</th><th>peak reserved there</th><th>runs</th></tr></thead><tbody>\n";
    for (const SweepResult& s : in.sweep) {
      html << "<tr><td class=\"l\">" << escape(s.workload) << "</td><td class=\"l\">" << escape(s.allocator)
           << "</td><td>" << sweep_parameter_name(s.parameter) << "</td><td" << (s.largest ? ">" : " class=\"bad\">")
           << (s.largest ? std::to_string(s.largest) : std::string("none fits")) << "</td><td>"
           << escape(format_bytes(s.peak_reserved_bytes)) << "</td><td>" << s.runs << "</td></tr>\n";
    }
    html << "</tbody></table>\n";
  }

  // One section per workload, in the order of the results; a shared scale inside it.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const SimResult*>> by_workload;
  for (const SimResult& r : in.results) {
    if (r.recorded) continue;  // no timeline: only its peaks were recorded
    if (!by_workload.count(r.workload)) order.push_back(r.workload);
    by_workload[r.workload].push_back(&r);
  }
  html << "<h2>Allocated vs reserved over time</h2>\n<p class=\"legend\"><span><i class=\"sw\" "
          "style=\"background:#9cc3ee;border:1px solid #3b7dc4\"></i>allocated</span><span><i class=\"sw\" "
          "style=\"background:#d9480f;height:3px;vertical-align:3px\"></i>reserved</span>"
       << (in.capacity ? "<span>dashed: the capacity, where it is in range</span>" : "") << "</p>\n";
  for (const std::string& w : order) {
    // Shared scale: up to the highest reserved (and the capacity when it is close), down to
    // near the lowest allocated of the steady state when that is well above 0.
    std::uint64_t y_max = 1, x_max = 1, low = ~0ull;
    for (const SimResult* r : by_workload[w]) {
      y_max = std::max(y_max, r->peak_reserved_bytes);
      for (std::size_t i = 0; i < r->timeline.size(); ++i) {
        x_max = std::max(x_max, r->timeline[i].event);
        if (i >= r->timeline.size() / 4) low = std::min(low, r->timeline[i].allocated);
      }
    }
    if (in.capacity > 0 && in.capacity < y_max + y_max / 2) y_max = std::max(y_max, in.capacity);
    y_max += y_max / 20;
    const std::uint64_t y_min = (low != ~0ull && low > y_max / 3) ? low / 10 * 9 : 0;
    html << "<h3>" << escape(w) << "</h3>\n<div class=\"cards\">\n";
    for (const SimResult* r : by_workload[w]) {
      html << "<div class=\"card\"><h3>" << escape(r->allocator) << "</h3><p>utilization " << percent(r->utilization)
           << " &middot; reserved " << escape(format_bytes(r->peak_reserved_bytes)) << " &middot; waste "
           << escape(format_bytes(r->waste_bytes)) << (r->oom ? " &middot; <span class=\"bad\">OOM</span>" : "")
           << (y_min ? " &middot; y axis from " + escape(format_bytes(y_min)) : std::string()) << "</p>"
           << plot(*r, y_min, y_max, x_max, in.capacity) << "</div>\n";
    }
    html << "</div>\n";
  }
  html << "</body></html>\n";
  return html.str();
}

std::string write_html_report(const std::string& dir, const ReportInput& input) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create report directory " + dir + ": " + ec.message());
  const std::string path = (std::filesystem::path(dir) / "index.html").string();
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << render_html_report(input);
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace stalloc
