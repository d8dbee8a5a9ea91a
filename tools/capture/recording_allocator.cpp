#include "tools/capture/recording_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <utility>

namespace stalloc::capture {

namespace {

RecordingAllocator* g_installed = nullptr;

// Higher than any priority libtorch registers its own CPU allocators with.
constexpr std::uint8_t kInstallPriority = 100;

std::atomic<std::uint32_t> g_next_thread{0};

// Small thread index in order of first use; start() claims 0 for the training thread.
std::uint16_t thread_index() {
  thread_local const std::uint32_t index = g_next_thread.fetch_add(1);
  if (index > std::numeric_limits<std::uint16_t>::max()) {
    throw std::runtime_error("stalloc-capture: more than 65536 threads allocated");
  }
  return static_cast<std::uint16_t>(index);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RecordingAllocator::RecordingAllocator(c10::Allocator* inner)
    : inner_(inner), inner_deleter_(inner->raw_deleter()) {
  if (inner_deleter_ == nullptr) {
    throw std::runtime_error("stalloc-capture: the default CPU allocator has no raw deleter");
  }
}

RecordingAllocator& RecordingAllocator::install() {
  if (g_installed == nullptr) {
    // Lives as long as the process: tensors freed during static destruction still reach it.
    g_installed = new RecordingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(g_installed, kInstallPriority);
  }
  return *g_installed;
}

c10::DataPtr RecordingAllocator::allocate(std::size_t bytes) const {
  c10::DataPtr inner = inner_->allocate(bytes);
  void* ptr = inner.get();
  if (ptr == nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recording_) ++counts_.zero_byte_allocs;
    return inner;
  }
  if (inner.get_context() != ptr) {
    throw std::runtime_error("stalloc-capture: the default CPU allocator's context is not its pointer");
  }
  inner.release_context();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recording_) {
      const std::uint64_t id = next_id_++;
      live_[ptr] = LiveBlock{id, bytes};
      trace_.events.push_back(make_event(EventKind::Alloc, id, bytes));
    }
  }
  return c10::DataPtr(ptr, ptr, &RecordingAllocator::release, inner.device());
}

c10::DeleterFnPtr RecordingAllocator::raw_deleter() const { return &RecordingAllocator::release; }

void RecordingAllocator::release(void* ptr) {
  // raw_deallocate of a zero-byte raw_allocate: nothing was allocated, nothing to record.
  if (ptr == nullptr) return;
  g_installed->record_free(ptr);
  g_installed->inner_deleter_(ptr);
}

void RecordingAllocator::record_free(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) return;
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    ++counts_.ignored_frees;
    return;
  }
  trace_.events.push_back(make_event(EventKind::Free, it->second.id, it->second.size));
  live_.erase(it);
}

Event RecordingAllocator::make_event(EventKind kind, std::uint64_t id, std::uint64_t size) const {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.iteration = tag_.iteration;
  e.phase = tag_.phase;
  e.microbatch = tag_.microbatch;
  e.layer = tag_.layer;
  e.thread = thread_index();
  if (timestamps_) e.time_ns = now_ns() - start_ns_;
  return e;
}

void RecordingAllocator::start(bool timestamps) {
  std::lock_guard<std::mutex> lock(mutex_);
  thread_index();
  recording_ = true;
  timestamps_ = timestamps;
  start_ns_ = now_ns();
}

void RecordingAllocator::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = false;
}

void RecordingAllocator::set_tag(const RecordingTag& tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  tag_ = tag;
}

void RecordingAllocator::set_layer(std::int32_t layer) {
  std::lock_guard<std::mutex> lock(mutex_);
  tag_.layer = layer;
}

RecordingTag RecordingAllocator::tag() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tag_;
}

Trace RecordingAllocator::take_trace() {
  std::lock_guard<std::mutex> lock(mutex_);
  Trace out = std::move(trace_);
  trace_ = Trace{};
  live_.clear();
  return out;
}

RecordingCounts RecordingAllocator::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  RecordingCounts c = counts_;
  c.threads = g_next_thread.load();
  return c;
}

}  // namespace stalloc::capture
