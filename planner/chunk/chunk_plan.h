// The physical-chunk plan of one training iteration (design brief, section 4).
//
// Every planned allocation (a slot) owns a virtual range. The range is backed by physical chunks
// of the granularity G, named by their index in a pool of num_chunks chunks created once when the
// plan is installed. A slot's bytes are [offset, offset + size) of its range, so its range spans
// ceil((offset + size) / G) chunks and chunks[j] backs bytes [j*G, (j+1)*G) of the range. Two
// slots may name the same chunk only if their lifetimes do not overlap or the byte ranges they
// use inside that chunk do not overlap; validate_plan (plan_validator.h) checks exactly that.
//
// Time is the request index relative to the iteration's first request. A slot still live at the
// end of the iteration (freed in the next one) wraps around the iteration's end
// (slot_classifier.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "planner/dsa/dsa.h"
#include "trace/trace.h"

namespace stalloc {

enum class PlanMode : std::uint8_t {
  Alias,     // every slot's range mapped to its chunks once, at install: zero VMM calls per iteration
  Windowed,  // ranges mapped only around their use, bounding live mappings
  Offset,    // the paper's plan: one contiguous pool laid out by offsets
};

std::string_view plan_mode_name(PlanMode m);  // "alias", "windowed", "offset"
bool parse_plan_mode(std::string_view s, PlanMode* out);

// Identifies the request sequence a plan was made for: a plan is never applied to another.
struct TraceSignature {
  std::uint64_t hash = 0;         // over (size, stream) of the iteration's allocations, in order
                                  // (a dynamic one's size left out)
  std::uint64_t allocations = 0;  // allocations in the iteration
  std::uint64_t requests = 0;     // allocations and frees in the iteration
  friend bool operator==(const TraceSignature&, const TraceSignature&) = default;
};

// Signature of one iteration of a trace.
TraceSignature signature_of(const Trace& trace, std::uint32_t iteration);

// Where a static slot's tail (size mod G) goes in the shared arena, so that the slot's private
// chunks can be spliced in at a chunk boundary inside the tail's arena interval
// (docs/planner.md, "Physical-chunk planner").
enum class RemainderPlacement : std::uint8_t {
  Auto,     // plan both ways, keep the plan with fewer chunks
  Widened,  // the tail takes one chunk more (r + G bytes) and the slot one private chunk less
  Aligned,  // the tail starts on a chunk boundary
};

std::string_view remainder_placement_name(RemainderPlacement r);  // "auto", "widened", "aligned"

enum class SlotKind : std::uint8_t {
  Static,   // same size every iteration: planned chunks
  Small,    // below the small threshold: packed into shared chunks
  Dynamic,  // size varies: served from an expandable range on budget chunks
};

struct PlannedSlot {
  std::uint64_t ordinal = 0;  // index among the iteration's allocations
  std::uint64_t size = 0;
  std::uint32_t stream = 0;
  std::uint64_t start = 0;  // lifetime [start, end) in requests relative to the iteration start
  std::uint64_t end = 0;
  SlotKind kind = SlotKind::Static;
  std::uint64_t offset = 0;            // the tensor starts at range base + offset (offset < G)
  std::vector<std::uint32_t> chunks;   // pool chunks backing the range, in address order
  // Dynamic slots: chunks the plan leaves idle over this slot's whole lifetime, which its
  // expandable range may grow onto.
  std::vector<std::uint32_t> budget_chunks;
};

struct ChunkPlan {
  static constexpr int kFormatVersion = 1;
  PlanMode mode = PlanMode::Alias;
  std::uint64_t granularity = 0;
  TraceSignature signature;
  std::uint32_t iteration = 0;       // the trace iteration it was planned from
  std::uint64_t num_chunks = 0;      // the pool: peak reserved = num_chunks * granularity
  std::uint32_t windows = 1;         // windowed mode: mapping windows per iteration
  std::vector<PlannedSlot> slots;    // by ordinal

  // Derived figures, filled by the planner and recomputed by the validator.
  std::uint64_t lower_bound_bytes = 0;     // peak live bytes of the non-dynamic slots
  std::uint64_t mappings = 0;              // chunk mappings live at once (alias: all of them)
  std::uint64_t vmm_ops_per_iteration = 0; // map + unmap + set-access calls per steady iteration
  std::uint64_t dynamic_peak_bytes = 0;    // peak live bytes of Dynamic slots (not in num_chunks)
  RemainderPlacement remainder = RemainderPlacement::Widened;  // how tails were placed
};

// lower_bound_bytes / (num_chunks * granularity); 1 for an empty plan.
double plan_utilization(const ChunkPlan& plan);

// Chunks c, c + 1, c + 2, ... in that order: a range the runtime sees through the pool's own
// view of its chunks in address order, mapping nothing more for it.
bool one_ascending_run(std::span<const std::uint32_t> chunks);

struct PlanOptions {
  PlanMode mode = PlanMode::Alias;
  std::uint64_t granularity = 2ull << 20;
  std::uint64_t small_threshold = 0;  // 0: G, i.e. anything smaller than a chunk is small
  std::uint32_t windows = 8;
  std::uint64_t alignment = 512;  // tensor start alignment inside the arena (a power of two)
  // Widened measured best, or within one chunk, on the presets (docs/planner.md); Auto plans
  // twice and keeps the better.
  RemainderPlacement remainder = RemainderPlacement::Widened;
  // A tensor carried out of the planned iteration with no free of the iteration before to stand
  // for it (a buffer remade at each new longest length, state made lazily): planned over the
  // whole iteration, or left out (slot_classifier.h). The runtime leaves them out of plans with
  // Dynamic slots for the sizes that vary.
  bool plan_one_offs = true;
  // The most chunks the iteration's views may span in all (size / G + 1 a tensor), so that the
  // planner's memory stays bounded (about 100 bytes a chunk): 2^24 is 32 TiB of views at 2 MiB.
  std::uint64_t max_view_chunks = 1ull << 24;
  // Portfolio only: the arena is cut into chunks and recoloured, and the search after the
  // portfolio found no plan with fewer chunks on any preset while costing up to 1.3 s of CPU.
  DsaOptions dsa{.time_limit_seconds = 0.0, .seed = 1, .parallel = true};
};

// Plans one iteration of a trace. Throws UsageError when the iteration does not exist or the
// trace is malformed.
ChunkPlan plan_iteration(const Trace& trace, std::uint32_t iteration, const PlanOptions& options);

// Plan files (docs/formats.md). read_plan raises ParseError with file and line.
void write_plan(const ChunkPlan& plan, std::ostream& out);
void write_plan(const ChunkPlan& plan, const std::string& path);
ChunkPlan read_plan(std::istream& in, const std::string& name_for_errors);
ChunkPlan read_plan(const std::string& path);

// Throws UsageError with a clear message when the plan was made for another request sequence.
void require_plan_matches(const ChunkPlan& plan, const TraceSignature& signature);

}  // namespace stalloc
