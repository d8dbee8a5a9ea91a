#include "src/recorder.h"

#include <chrono>
#include <unordered_set>

namespace stalloc {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Recorder::push(const Event& e, vmm::DevicePtr address) {
  current_.push_back(e);
  current_addresses_.push_back(address);
  if (timing_) current_.back().time_ns = now_ns();
}

std::uint64_t Recorder::alloc(std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
                              vmm::DevicePtr address) {
  Event e;
  e.kind = EventKind::Alloc;
  e.id = next_id_++;
  e.size = size;
  e.stream = stream;
  e.iteration = iteration_;
  e.thread = thread;
  push(e, address);
  return e.id;
}

void Recorder::free(std::uint64_t id, std::uint64_t size, std::uint32_t stream,
                    std::uint16_t thread, vmm::DevicePtr address) {
  Event e;
  e.kind = EventKind::Free;
  e.id = id;
  e.size = size;
  e.stream = stream;
  e.iteration = iteration_;
  e.thread = thread;
  push(e, address);
}

Trace Recorder::iteration_trace(bool with_previous) const {
  Trace t;
  t.meta["source"] = "stalloc-runtime";
  auto allocations = [](const std::vector<Event>& events) {
    std::size_t n = 0;
    for (const Event& e : events) n += e.kind == EventKind::Alloc;
    return n;
  };
  std::vector<const Event*> events;
  if (with_previous && !previous_.empty() && allocations(previous_) == allocations(current_)) {
    for (const Event& e : previous_) events.push_back(&e);
  }
  for (const Event& e : current_) events.push_back(&e);
  std::unordered_set<std::uint64_t> allocated;
  t.events.reserve(events.size());
  for (const Event* ep : events) {
    const Event& e = *ep;
    if (e.kind == EventKind::Alloc) {
      allocated.insert(e.id);
    } else if (allocated.count(e.id) == 0) {
      continue;
    }
    t.events.push_back(e);
  }
  return t;
}

void Recorder::next_iteration(bool keep) {
  if (keep) {
    retained_.insert(retained_.end(), current_.begin(), current_.end());
    retained_addresses_.insert(retained_addresses_.end(), current_addresses_.begin(),
                               current_addresses_.end());
  }
  previous_ = std::move(current_);
  current_.clear();
  current_addresses_.clear();
  ++iteration_;
}

Trace Recorder::retained_trace(int device, bool include_current) const {
  Trace t;
  t.device = device;
  t.meta["source"] = "stalloc-runtime";
  t.events = retained_;
  if (include_current) t.events.insert(t.events.end(), current_.begin(), current_.end());
  // A free whose allocation was not kept (an iteration in between was dropped) would make the
  // trace malformed: drop it, the tensor stays live to the end, as a persistent one.
  std::unordered_set<std::uint64_t> live;
  std::vector<Event> kept;
  kept.reserve(t.events.size());
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Alloc) {
      live.insert(e.id);
    } else if (live.erase(e.id) == 0) {
      continue;
    }
    kept.push_back(e);
  }
  t.events = std::move(kept);
  return t;
}

std::vector<Recorder::Addressed> Recorder::all_requests() const {
  std::vector<Addressed> out;
  out.reserve(retained_.size() + current_.size());
  for (std::size_t i = 0; i < retained_.size(); ++i) out.push_back({retained_[i], retained_addresses_[i]});
  for (std::size_t i = 0; i < current_.size(); ++i) out.push_back({current_[i], current_addresses_[i]});
  return out;
}

}  // namespace stalloc
