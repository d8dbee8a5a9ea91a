// Records the requests the runtime serves as a planner Trace: the current iteration (what the
// background planner plans from) and the iterations kept for save_trace() and the snapshot's
// device_traces (the profiled ones, or all with record_trace:true). Addresses are kept beside
// the events for the snapshot; the trace file itself has no addresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/trace.h"
#include "vmm/driver.h"

namespace stalloc {

class Recorder {
 public:
  // Records an allocation and returns its id.
  std::uint64_t alloc(std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
                      vmm::DevicePtr address);
  void free(std::uint64_t id, std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
            vmm::DevicePtr address);

  // Stamps events with host time from now on (costs a clock read per request).
  void set_timing(bool on) { timing_ = on; }
  std::uint32_t iteration() const { return iteration_; }
  std::size_t current_requests() const { return current_.size(); }

  // The current iteration as a well-formed trace; with_previous: preceded by the previous one
  // when it made as many allocations (so the planner sees which ordinals change size and makes
  // them Dynamic slots). Frees of tensors allocated before the trace's first iteration are
  // left out.
  Trace iteration_trace(bool with_previous) const;
  // Ends the current iteration, keeping its requests for the retained trace or dropping them.
  void next_iteration(bool keep);

  // The kept iterations, and the current one too when include_current.
  Trace retained_trace(int device, bool include_current) const;
  struct Addressed {
    Event event;
    vmm::DevicePtr address = 0;
  };
  // Retained requests then the current iteration's, in order.
  std::vector<Addressed> all_requests() const;

 private:
  void push(const Event& e, vmm::DevicePtr address);

  std::vector<Event> current_;
  std::vector<Event> previous_;  // the iteration before the current one
  std::vector<vmm::DevicePtr> current_addresses_;
  std::vector<Event> retained_;
  std::vector<vmm::DevicePtr> retained_addresses_;
  std::uint32_t iteration_ = 0;
  std::uint64_t next_id_ = 0;
  bool timing_ = true;
};

}  // namespace stalloc
