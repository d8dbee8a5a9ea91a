// A workload long enough to reach its steady state: the trace with its last iteration repeated.
//
// A recorded trace ends where its recording ended: a one-iteration snapshot is one training or
// inference step, a four-iteration preset ends on the iteration a plan is first followed in. A
// run repeats its step, so the simulator appends copies of the last iteration (L) before
// measuring, and extrapolates a run of N iterations from them (time_estimate.h):
//
// - An allocation L makes and frees is made and freed again in each copy, with a fresh id.
// - The blocks live at the start of a recording (an importer's seeded blocks, meta
//   "seeded_live_blocks": weights, optimizer state) are allocated once, never in a copy.
// - L's frees of blocks it did not make (carried in from the iteration before, or live at the
//   start) and L's allocations it does not free (carried out to the next one) are paired by
//   size, in order: in each copy a carried-out block is made again and the carried-in free
//   frees the previous copy's instance, as a step that frees last step's gradients and makes its
//   own. A carried-out block with no partner is freed as the next copy starts and made again
//   where L made it (a step's outputs, kept until the next step); a carried-in free with no
//   partner stays in L alone (something only the recorded step held). So each copy holds what L
//   held, and the run's lower bound is the recording's.
//
// The copies carry no time stamps: the iteration time stays the recorded one.
#pragma once

#include <cstdint>

#include "trace/trace.h"

namespace stalloc {

// Copies of the last iteration appended by default: enough to reach kSteadyIterations in all,
// and at least kSteadyExtra, so that a plan made from the recording is installed, followed and
// followed again.
inline constexpr std::uint32_t kSteadyIterations = 8;
inline constexpr std::uint32_t kSteadyExtra = 4;
std::uint32_t default_repetitions(const Trace& trace);

// `trace` with `copies` copies of its last iteration appended, numbered after it.
Trace with_repeated_last_iteration(const Trace& trace, std::uint32_t copies);

}  // namespace stalloc
