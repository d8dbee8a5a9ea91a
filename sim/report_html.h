// The simulator's report: one self-contained HTML page (inline CSS and SVG, no scripts, no
// external assets, so it opens offline and archives as one file) with the results table, the
// sweep, and per workload a plot of allocated against reserved bytes over the trace for every
// allocator, on a shared scale so the allocators compare at a glance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/simulator.h"

namespace stalloc {

struct ReportInput {
  std::string command;         // how the report was made, shown at the top
  std::uint64_t capacity = 0;  // 0 = unlimited
  double seconds = 0.0;        // wall time of the whole run
  std::vector<SimResult> results;
  std::vector<SweepResult> sweep;
};

std::string render_html_report(const ReportInput& input);

// Creates `dir` if needed and writes dir/index.html; returns its path. Throws std::runtime_error
// when it cannot write.
std::string write_html_report(const std::string& dir, const ReportInput& input);

}  // namespace stalloc
