// Plans an iteration as the circle it is. A tensor made in one iteration and freed in the next
// before its next instance is made (gradients made in backward, freed by the next step's
// zero_grad) lives over [a, T) and, wrapping around, [0, f): the classifier writes it [a, T + f).
// The planners place intervals on a line, and planning such a slot over the whole iteration kept
// its bytes from the forward's activations that could use them between f and a (the gradient of
// tests/planner/chunk/carried_slots_test.cpp: 20 chunks that way, 14 wrapped). Started at t0,
// the latest such f, the iteration's timeline makes every wrapped slot made at or after t0 a
// plain interval; only slots live across t0 itself wrap and are planned over the whole iteration.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/chunk/chunk_plan.h"

namespace stalloc {

// Rewrites the slots' lifetimes onto the timeline started at t0 (all within [0, requests));
// returns the original lifetimes, in slot order, for restore_lifetimes.
std::vector<std::pair<std::uint64_t, std::uint64_t>> rotate_lifetimes(std::vector<PlannedSlot>& slots,
                                                                      std::uint64_t requests);
void restore_lifetimes(std::vector<PlannedSlot>& slots,
                       const std::vector<std::pair<std::uint64_t, std::uint64_t>>& original);

}  // namespace stalloc
