// The trace model: one device's ordered allocation requests over several training iterations.
//
// Time in stalloc is the request index: event i happens at time i. A tensor allocated by event
// a and freed by event f lives over [a, f); one never freed lives to the end (persistent). All
// planners, models and the runtime share this model; importers and the generator produce it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace stalloc {

enum class EventKind : std::uint8_t { Alloc, Free };

// Which part of a training iteration a request belongs to.
enum class Phase : std::uint8_t { Unknown, Forward, Backward, Optimizer, Other };

std::string_view phase_name(Phase p);  // "unknown", "fwd", "bwd", "opt", "other"
bool parse_phase(std::string_view s, Phase* out);

struct Event {
  EventKind kind = EventKind::Alloc;
  std::uint64_t id = 0;         // allocation id, unique within the trace; a Free names it
  std::uint64_t size = 0;       // requested bytes; a Free repeats its allocation's size
  std::uint32_t stream = 0;     // stream index, 0 = the default stream
  std::uint32_t iteration = 0;  // training iteration the request belongs to
  std::int64_t time_ns = -1;    // host time stamp, -1 when unknown
  Phase phase = Phase::Unknown;
  std::int32_t microbatch = -1;  // -1 when not tied to a micro-batch
  std::int32_t layer = -1;       // -1 when not tied to a layer
  std::uint16_t thread = 0;      // issuing host thread (PyTorch runs backward on its own)
  bool dynamic = false;          // hint: this tensor's size varies between iterations

  friend bool operator==(const Event&, const Event&) = default;
};

struct Trace {
  int device = 0;
  std::vector<Event> events;
  std::map<std::string, std::string> meta;  // provenance: source, generator config, ...

  friend bool operator==(const Trace&, const Trace&) = default;
};

// One allocation's life, derived from a trace.
struct Lifetime {
  std::uint64_t id = 0;
  std::uint64_t size = 0;
  std::uint64_t start = 0;  // index of the Alloc event
  std::uint64_t end = 0;    // index of the Free event, or events.size() when never freed
  bool persistent = false;  // never freed
  std::uint32_t stream = 0;
  std::uint32_t iteration = 0;
  Phase phase = Phase::Unknown;
  std::int32_t microbatch = -1;
  std::int32_t layer = -1;
  std::uint16_t thread = 0;
  bool dynamic = false;
};

// No allocation of a trace may be larger: no device holds it (GPUs address 47 to 49 bits).
inline constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{1} << 48;

// Lifetimes in order of allocation. Throws UsageError on a trace that is not well formed (an id
// allocated twice while live, a free of an id that is not live, a free whose size or stream is
// not its allocation's, an allocation above kMaxTraceBytes, time stamps that go back);
// validate_trace says so without throwing.
std::vector<Lifetime> compute_lifetimes(const Trace& trace);

// Empty when the trace is well formed, otherwise the first problem, naming the event index.
std::string validate_trace(const Trace& trace);

// max over time of the bytes live: no allocator can hold less at its peak.
std::uint64_t lower_bound_bytes(const Trace& trace);

}  // namespace stalloc
