// Training iterations found after the fact from a recorded allocation sequence, for traces whose
// recorder never marked them (a PyTorch memory snapshot has no step markers).
//
// Training repeats its request sequence every step. An allocation's key is (size, stream, live
// allocations at that moment), the runtime's key (src/period_detector.h): the live
// count tells a whole iteration apart from the repeated layers inside it, whose sizes repeat but
// whose live counts grow (forward) or shrink (backward). With the whole sequence at hand, the
// finder takes the smallest period p such that
//   1. the trace's last allocations repeat with period p for at least two whole periods, up to
//      the very end (a last partial iteration is fine: it is a prefix of the period);
//   2. that repeating suffix reaches the highest live count of the trace, as an iteration
//      reaches its peak (this excludes the loops of an optimizer step or of an automaton's
//      update steps, which repeat at a lower live count);
//   3. the suffix holds at least half of the allocations, so the repetition is the run, not a
//      loop inside one step.
// The run before the repeating suffix (model set-up, a first step that creates optimizer state)
// is not required to repeat: it joins iteration 0. Inside the suffix, an iteration starts at the
// allocation with the lowest live count of a period (its first occurrence in the trace's last
// p allocations): after the optimizer step, before the next forward.
//
// Condition 1 makes a forward pass whose layers repeat exactly (inference frees each layer's
// activations, so live counts repeat too) one iteration: the output head after the last layer
// breaks the repetition before the end. All of it is O(allocations): the periodic suffix of
// every p comes from one Z-function over the reversed key sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trace/trace.h"

namespace stalloc {

struct IterationSplit {
  std::uint64_t period = 0;         // allocations per iteration; 0 when no repetition was found
  std::vector<std::size_t> starts;  // event indices at which iterations 1, 2, ... start
};

// Looks at the allocations from event index `first` on (earlier events, such as blocks seeded
// as live at the start, count only towards the live count). The trace must be well formed.
IterationSplit find_iterations(const Trace& trace, std::size_t first = 0);

// Sets every event's iteration: 0 before starts[0], k from starts[k-1] on. `starts` ascending.
void assign_iterations(Trace* trace, const std::vector<std::size_t>& starts);

// The median over iterations of (first time stamp of the next iteration - first time stamp of
// this one), or the span of the trace's time stamps when it has one iteration. Events with
// time_ns -1 are skipped; false when fewer than two time stamps make the figure.
bool median_iteration_ns(const Trace& trace, std::int64_t* out);

}  // namespace stalloc
