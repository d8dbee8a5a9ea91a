// Names of plan modes and the trace signature a plan is bound to.
//
// The signature hash is 64-bit FNV-1a over, for each allocation of the iteration in order, its
// size as 8 little-endian bytes followed by its stream as 4 little-endian bytes
// (docs/formats.md, "Plan files").
#include <sstream>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"

namespace stalloc {

namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

void fnv1a(std::uint64_t* hash, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    *hash ^= (value >> (8 * i)) & 0xffu;
    *hash *= kFnvPrime;
  }
}

std::string describe(const TraceSignature& s) {
  std::ostringstream out;
  out << std::hex << s.hash << std::dec << " (" << s.allocations << " allocations, " << s.requests
      << " requests)";
  return out.str();
}

}  // namespace

std::string_view plan_mode_name(PlanMode m) {
  switch (m) {
    case PlanMode::Alias: return "alias";
    case PlanMode::Windowed: return "windowed";
    case PlanMode::Offset: return "offset";
  }
  return "alias";
}

bool parse_plan_mode(std::string_view s, PlanMode* out) {
  for (PlanMode m : {PlanMode::Alias, PlanMode::Windowed, PlanMode::Offset}) {
    if (s == plan_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string_view remainder_placement_name(RemainderPlacement r) {
  switch (r) {
    case RemainderPlacement::Auto: return "auto";
    case RemainderPlacement::Widened: return "widened";
    case RemainderPlacement::Aligned: return "aligned";
  }
  return "auto";
}

TraceSignature signature_of(const Trace& trace, std::uint32_t iteration) {
  TraceSignature s;
  s.hash = kFnvOffset;
  for (const Event& e : trace.events) {
    if (e.iteration != iteration) continue;
    ++s.requests;
    if (e.kind != EventKind::Alloc) continue;
    ++s.allocations;
    // A dynamic tensor's size is not part of the sequence: it varies from one run to the next.
    fnv1a(&s.hash, e.dynamic ? 0 : e.size, 8);
    fnv1a(&s.hash, e.stream, 4);
  }
  return s;
}

void require_plan_matches(const ChunkPlan& plan, const TraceSignature& signature) {
  if (plan.signature == signature) return;
  throw UsageError("plan was made for a trace with signature " + describe(plan.signature) +
                   ", this trace has " + describe(signature));
}

}  // namespace stalloc
