#include "src/stream_sync.h"

#include <bit>

namespace stalloc {

StreamSync::StreamSync(vmm::Driver& driver) : driver_(driver) {}

StreamSync::~StreamSync() {
  for (vmm::EventHandle e : all_events_) driver_.event_destroy(e);
}

std::uint32_t StreamSync::index_of(vmm::StreamHandle stream) {
  const auto [it, fresh] = index_.try_emplace(stream, static_cast<std::uint32_t>(handles_.size()));
  if (fresh) handles_.push_back(stream);
  return it->second;
}

vmm::EventHandle StreamSync::take_event() {
  if (!free_events_.empty()) {
    vmm::EventHandle e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  vmm::EventHandle e = 0;
  if (driver_.event_create(&e) != vmm::Status::Success) return 0;
  all_events_.push_back(e);
  return e;
}

template <typename F>
bool StreamSync::for_each_stream(StreamMask users, F&& f) {
  while (users != 0) {
    auto index = static_cast<std::uint32_t>(std::countr_zero(users));
    users &= users - 1;
    if (index < kSharedBit) {
      if (index < handles_.size() && !f(index)) return false;
      continue;
    }
    for (std::size_t i = kSharedBit; i < handles_.size(); ++i) {
      if (!f(static_cast<std::uint32_t>(i))) return false;
    }
  }
  return true;
}

bool StreamSync::order_after(StreamMask users, std::uint32_t to, FreeStamp freed) {
  // The shared bit stands for several streams, `to` among them perhaps: never skip it.
  if (to < kSharedBit) users &= ~bit(to);
  if (users == 0) return true;
  vmm::EventHandle fresh = 0;  // recorded now on streams with no mark after the free
  bool ok = for_each_stream(users, [&](std::uint32_t from) {
    if (from == to) return true;
    const Mark* mark = from < marks_.size() ? &marks_[from] : nullptr;
    if (mark != nullptr && mark->event != 0 && freed != kUnstamped && mark->stamp > freed) {
      if (driver_.stream_wait_event(handles_[to], mark->event) != vmm::Status::Success) return false;
      ++waits_;
      ++mark_waits_;
      return true;
    }
    if (fresh == 0 && (fresh = take_event()) == 0) return false;
    if (driver_.event_record(fresh, handles_[from]) != vmm::Status::Success) return false;
    if (driver_.stream_wait_event(handles_[to], fresh) != vmm::Status::Success) return false;
    ++waits_;
    return true;
  });
  // cuStreamWaitEvent captured the event's state: it may be recorded again at once.
  if (fresh != 0) free_events_.push_back(fresh);
  return ok;
}

bool StreamSync::note_free(StreamMask users) {
  ++frees_;
  if (handles_.size() < 2 || users == 0) return true;
  if (marks_.size() < handles_.size()) marks_.resize(handles_.size());
  bool ok = true;
  for_each_stream(users, [&](std::uint32_t stream) {
    Mark& mark = marks_[stream];
    if (mark.event != 0 && frees_ - mark.at_free < kFreesPerMark) return true;
    if (mark.event == 0 && (mark.event = take_event()) == 0) {
      ok = false;
      return true;
    }
    if (driver_.event_record(mark.event, handles_[stream]) != vmm::Status::Success) {
      // The event may still hold an older record: no mark rather than a stale one.
      free_events_.push_back(mark.event);
      mark.event = 0;
      ok = false;
      return true;
    }
    mark.stamp = ++marks_made_;
    mark.at_free = frees_;
    return true;
  });
  return ok;
}

bool StreamSync::record(StreamMask users, std::vector<vmm::EventHandle>* events) {
  return for_each_stream(users, [&](std::uint32_t stream) {
    vmm::EventHandle event = take_event();
    if (event == 0) return false;
    events->push_back(event);
    return driver_.event_record(event, handles_[stream]) == vmm::Status::Success;
  });
}

bool StreamSync::completed(std::vector<vmm::EventHandle>* events) {
  for (vmm::EventHandle e : *events) {
    if (driver_.event_query(e) != vmm::Status::Success) return false;
  }
  free_events_.insert(free_events_.end(), events->begin(), events->end());
  events->clear();
  return true;
}

bool StreamSync::wait_for_streams() {
  if (driver_.synchronize() == vmm::Status::Success) return true;
  std::vector<vmm::EventHandle> events;
  StreamMask all = 0;
  for (std::uint32_t i = 0; i < handles_.size(); ++i) all |= bit(i);
  const bool recorded = record(all, &events);
  bool ok = recorded;
  for (vmm::EventHandle e : events) {
    vmm::Status s = vmm::Status::NotReady;
    while (recorded && (s = driver_.event_query(e)) == vmm::Status::NotReady) {
    }
    ok = ok && s == vmm::Status::Success;
  }
  discard(&events);
  return ok;
}

void StreamSync::discard(std::vector<vmm::EventHandle>* events) {
  free_events_.insert(free_events_.end(), events->begin(), events->end());
  events->clear();
}

}  // namespace stalloc
