// The runtime's thresholds, as data: every number the serving paths decide by, with the reason
// for its value. RuntimeConfig carries one (STALLOC_CONF does not set it); the simulator and the
// tests may change it. What was measured for each value is in docs/decisions.md.
#pragma once

#include <cstdint>
#include <limits>

namespace stalloc {

struct RuntimePolicy {
  // Virtual space of a stream's small and large packed arenas: more than any GPU holds (a
  // reservation costs no memory; one that cannot be had is halved).
  std::uint64_t small_arena_bytes = std::uint64_t{64} << 30;
  std::uint64_t large_arena_bytes = std::uint64_t{1} << 40;
  // ... or this many times the memory the runtime may hold, where that is less (at least 1 GiB):
  // the arena's live blocks never exceed the memory, and the room beyond it is for its holes.
  std::uint64_t arena_limit_share = 4;
  // Below this much memory held, small requests share the large requests' pages: a small
  // workload's partly used small pages would be a large share of all it holds.
  std::uint64_t small_apart_bytes = std::uint64_t{128} << 20;
  // Emptied memory each packed arena keeps mapped: all of it. An arena short of a chunk takes
  // its own or another arena's idle page before it borrows or creates one, so kept pages cost
  // no memory beside what is live, and a tensor freed and made again costs no VMM call.
  std::uint64_t arena_idle_bytes = std::numeric_limits<std::uint64_t>::max();
  // An extent (a chunk for a run of an arena's fresh pages) is at most 1/extent_held_share of
  // the memory held: on small workloads larger extents strand pages that other tensors could use.
  std::uint64_t extent_held_share = 256;
  // Signature transitions remembered for predicting the next iteration; a run whose signatures
  // never repeat starts over rather than grow.
  std::uint64_t transitions_kept = 1024;
  // An iteration with at most one request or slot in off_plan_share off its plan (or, over plans
  // of at least off_plan_share slots, at most one byte in off_plan_share of the pool) counts as
  // the plan's and is not planned: its own plan would be a near-copy, and switching between the
  // two costs more driver time than the misses.
  std::uint64_t off_plan_share = 100;
  // A request may step over at most this many bytes of slots per byte it asks for to take a
  // slot ahead of its size: small sizes recur, and a wrong jump strands the slots between.
  std::uint64_t jump_bytes_per_byte = 16;
  // A plan that, with what is held beside its pool, would hold more than 1/decline_share above
  // the most the profiled iterations held is declined: the online path packed them tighter.
  std::uint64_t decline_share = 100;
  // Below this much held a plan is always followed: 1% of it is a granule or two of rounding,
  // while driver calls weigh most in a small workload's short iterations.
  std::uint64_t decline_from_bytes = std::uint64_t{64} << 20;
  // A large unplanned tensor gets a dedicated range only where rounding it up to whole granules
  // wastes at most 1/dedicated_waste_share of it; else it is packed with its neighbours.
  std::uint64_t dedicated_waste_share = 64;
  // 1/unplanned_mapping_share of the live mappings limit stays for what is served beside the
  // plans (arenas, dedicated ranges): a plan is installed only within the rest.
  std::uint64_t unplanned_mapping_share = 8;
  // A request above this fails at once: no device holds it (GPUs address 47 to 49 bits), and
  // rounding a size near 2^64 up to pages would wrap.
  std::uint64_t max_request_bytes = std::uint64_t{1} << 48;
  // Under pressure, idle plan views are shed 1/shed_mapping_share of the limit at a time, so that
  // the next pages need not shed again at once.
  std::uint64_t shed_mapping_share = 16;
};

}  // namespace stalloc
