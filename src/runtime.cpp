#include "src/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "common/units.h"
#include "src/runtime_driver.h"

namespace stalloc {
namespace {

std::uint64_t pick_granularity(const RuntimeConfig& config, vmm::Driver& driver) {
  std::size_t g = 0;
  vmm::Status s = driver.granularity(&g);
  if (s != vmm::Status::Success || g == 0) {
    throw UsageError("the " + std::string(driver.name()) + " driver has no granularity: " +
                     std::string(vmm::status_name(s)));
  }
  if (config.granularity == 0) return g;
  if (config.granularity % g != 0) {
    throw ConfigError("STALLOC_CONF: granularity " + std::to_string(config.granularity) +
                      " is not a multiple of the driver's " + std::to_string(g));
  }
  return config.granularity;
}

// The device's memory where the driver keeps to it, else 0.
std::uint64_t device_memory(vmm::Driver& driver) {
  std::size_t total = 0;
  if (!driver.total_memory_enforced()) return 0;
  return driver.total_memory(&total) == vmm::Status::Success ? total : 0;
}

}  // namespace

Runtime::Runtime(const RuntimeConfig& config, int device)
    : Runtime(config, make_runtime_driver(config, device), nullptr) {}

Runtime::Runtime(const RuntimeConfig& config, vmm::Driver& driver)
    : Runtime(config, nullptr, &driver) {}

Runtime::Runtime(const RuntimeConfig& config, std::unique_ptr<vmm::Driver> owned,
                 vmm::Driver* external)
    : config_(config),
      owned_driver_(std::move(owned)),
      driver_(external != nullptr ? *external : *owned_driver_),
      granularity_(pick_granularity(config, driver_)),
      base_capacity_(config.capacity),
      device_bytes_(device_memory(driver_)),
      log_(config.log),
      sync_(driver_),
      memory_(driver_, granularity_, config.capacity),
      pool_(memory_),
      reclaimer_(parts()),
      unplanned_(config_, granularity_, driver_, memory_, pool_, sync_, reclaimer_, device_bytes_),
      cache_(config.plan_cache_size),
      lifecycle_(parts(), reclaimer_),
      follower_(config_, granularity_, pool_, sync_, unplanned_.lender(), cache_, stats_) {
  log_("stalloc runtime: " + format_runtime_config(config_) + " driver " +
       std::string(driver_.name()) + " granularity " + format_bytes(granularity_));
  if (config_.peer_access) grant_peer_access();
}

// Called while the parts are constructed: only binds references (and copies the granularity,
// which is set by then).
RuntimeParts Runtime::parts() {
  return {config_, granularity_, driver_,    memory_, pool_, sync_,
          cache_,  follower_,    unplanned_, stats_,  log_};
}

// Before anything is mapped, so that every set_access covers the peers too.
void Runtime::grant_peer_access() {
  std::vector<int> peers;
  vmm::Status s = driver_.accessible_peers(&peers);
  if (s == vmm::Status::Success) s = driver_.set_peers(peers);
  if (s != vmm::Status::Success) {
    throw UsageError("peer_access:all: the " + std::string(driver_.name()) +
                     " driver cannot give device " + std::to_string(driver_.device()) +
                     "'s peers access (" + std::string(vmm::status_name(s)) + ")");
  }
  std::ostringstream list;
  for (std::size_t i = 0; i < peers.size(); ++i) list << (i == 0 ? "" : " ") << peers[i];
  log_("stalloc runtime: peer access for devices [" + list.str() + "]");
}

Runtime::~Runtime() {
  std::lock_guard lock(mutex_);
  cache_.wait();
  follower_.stop_following();
  // The members unmap and release everything as they go; work the GPU still runs on this
  // memory would fault. Wait for it, as cudaFree does.
  sync_.wait_for_streams();
}

std::uint16_t Runtime::thread_index() {
  const std::thread::id me = std::this_thread::get_id();
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    if (threads_[i] == me) return static_cast<std::uint16_t>(i);
  }
  threads_.push_back(me);
  return static_cast<std::uint16_t>(std::min<std::size_t>(threads_.size() - 1, UINT16_MAX));
}

void* Runtime::malloc(std::size_t size, int device, vmm::StreamHandle stream) {
  std::unique_lock lock(mutex_);
  if (device != driver_.device()) {
    ++stats_.ooms;
    stats_.last_oom = {size, memory_.reserved_bytes(), memory_.capacity(),
                       "device " + std::to_string(device) + " is not this runtime's device " +
                           std::to_string(driver_.device())};
    return nullptr;
  }
  check_not_capturing(stream, size);
  // Before serving: a request that waits for other threads' frees must know they exist.
  const std::uint16_t thread = thread_index();
  if (!deferred_frees_.empty()) take_deferred_frees();
  // Whatever is given back or waited for, the live tensors stay: fail at once, before matching,
  // holding no more.
  if (beyond_capacity(size)) {
    const bool capped = memory_.capacity() != 0;
    ++stats_.ooms;
    const std::string limit =
        capped ? "capacity of " + format_bytes(memory_.capacity())
        : device_bytes_ != 0 && size <= config_.policy.max_request_bytes
            ? "device's " + format_bytes(device_bytes_)
            : "largest request any device holds, " + format_bytes(config_.policy.max_request_bytes);
    stats_.last_oom = {size, memory_.reserved_bytes(), memory_.capacity(),
                       "the live tensors' " + format_bytes(stats_.allocated_bytes) +
                           " and this request exceed the " + limit,
                       true};
    log_("stalloc runtime: out of memory for " + format_bytes(size) + ": " + stats_.last_oom.reason);
    return nullptr;
  }
  const std::uint32_t s = sync_.index_of(stream);
  if (config_.auto_step && !explicit_steps_) lifecycle_.detect_boundary(size, s, live_allocations_);
  std::size_t slot = SIZE_MAX;
  std::span<const std::uint32_t> budget;
  vmm::DevicePtr p = follower_.serve(size, s, &slot, &budget);
  SubAllocator* by = nullptr;
  if (p == 0) {
    p = serve_unplanned(size, s, budget, &by, lock);
    if (p == 0) return nullptr;
  }
  const std::uint64_t id = lifecycle_.recorder().alloc(size, s, thread, p);
  if (slot != SIZE_MAX) {
    follower_.occupy(slot, p, id, size);
  } else {
    unplanned_.add(p, {id, size, s, StreamSync::bit(s), by});
  }
  ++live_allocations_;
  ++stats_.allocations;
  stats_.requests.add(size, +1);
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return reinterpret_cast<void*>(p);
}

bool Runtime::beyond_capacity(std::uint64_t size) const {
  const std::uint64_t limit = memory_.capacity() != 0 ? memory_.capacity() : device_bytes_;
  return size > config_.policy.max_request_bytes ||
         (limit != 0 && (size > limit || stats_.allocated_bytes > limit - size));
}

vmm::DevicePtr Runtime::serve_unplanned(std::uint64_t size, std::uint32_t stream,
                                        std::span<const std::uint32_t> budget,
                                        SubAllocator** by, std::unique_lock<std::mutex>& lock) {
  // Pages other arenas emptied go back first, so that this one need not create chunks.
  unplanned_.poll();
  follower_.allow_lending(unplanned_.lender(), budget);
  const std::uint64_t held = memory_.reserved_bytes();
  const std::uint64_t high_water = memory_.high_water_bytes();
  SubAllocator& serving = unplanned_.choose(size, stream, follower_.active() != nullptr,
                                            !cache_.installed().empty());
  *by = &serving;
  std::string why;
  const std::function<vmm::DevicePtr()> serve = [&] { return serving.allocate(size, stream, &why); };
  vmm::DevicePtr p = serve();
  if (p == 0) p = reclaimer_.after_failure(serve);
  const auto waited_from = std::chrono::steady_clock::now();
  const std::uint64_t retries = stats_.alloc_retries;
  // Other threads (PyTorch's autograd) may free what this request needs.
  if (p == 0 && config_.oom_wait_seconds > 0 && threads_.size() > 1) p = serve_after_frees(serve, lock);
  // Following the plan, this iteration needs more than the plan leaves idle (a longer
  // sequence, a larger expert buffer): from now on any idle pool chunk may be lent, at the
  // risk of conflicts with later slots, rather than grow memory beside the pool. Not for growth
  // that stays below the most ever held (it costs no memory that counts), nor for growth the
  // arenas' emptied pages still waiting on the GPU cover (they come back as it catches up).
  const std::uint64_t grown = memory_.reserved_bytes() - std::min(memory_.reserved_bytes(), held);
  if (grown > 0 && memory_.reserved_bytes() > high_water && unplanned_.emptied_bytes() < grown) {
    follower_.lend_any_from_now();
  }
  if (p == 0) {
    // The tries made chunks for pages they then gave back to the cache: a failure holds no more
    // than the runtime held before it.
    memory_.trim();
    ++stats_.ooms;
    stats_.last_oom = {size, memory_.reserved_bytes(), memory_.capacity(), why};
    stats_.last_oom.retries = stats_.alloc_retries - retries;
    if (stats_.last_oom.retries > 0) {
      stats_.last_oom.waited_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
    }
    log_("stalloc runtime: out of memory for " + format_bytes(size) + ": " + why);
  }
  return p;
}

vmm::DevicePtr Runtime::serve_after_frees(const std::function<vmm::DevicePtr()>& serve,
                                          std::unique_lock<std::mutex>& lock) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(config_.oom_wait_seconds);
  vmm::DevicePtr p = 0;
  bool retried = false;
  ++waiting_;
  while (p == 0) {
    const std::uint64_t frees = stats_.frees;
    if (!freed_.wait_until(lock, deadline, [&] { return stats_.frees != frees; })) break;
    retried = true;
    // Other threads went on meanwhile (a step may have installed or retired plans): what may be
    // lent follows the plan followed now, and the budget of the slot this request matched is
    // no longer this request's.
    follower_.allow_lending(unplanned_.lender(), {});
    p = serve();
    if (p == 0) p = reclaimer_.after_failure(serve);
  }
  --waiting_;
  if (retried) ++stats_.alloc_retries;
  return p;
}

void Runtime::free(void* ptr, std::size_t, int, vmm::StreamHandle stream) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto p = reinterpret_cast<vmm::DevicePtr>(ptr);
  if (captured(stream)) {
    deferred_frees_.push_back({p, stream});
    ++stats_.capture_deferred_frees;
    return;
  }
  free_locked(p);
}

void Runtime::free_locked(vmm::DevicePtr p) {
  const std::uint16_t thread = thread_index();
  PlanFollower::Freed planned;
  bool done = follower_.free(p, &planned);
  if (done) {
    lifecycle_.recorder().free(planned.id, planned.size, planned.stream, thread, p);
    stats_.allocated_bytes -= planned.size;
    stats_.requests.add(planned.size, -1);
  } else if (const auto block = unplanned_.free(p, &done)) {
    sync_.note_free(block->used_by);
    lifecycle_.recorder().free(block->id, block->size, block->stream, thread, p);
    stats_.allocated_bytes -= block->size;
    stats_.requests.add(block->size, -1);
  }
  if (!done) {
    ++stats_.invalid_frees;
    if (!invalid_free_logged_) {
      invalid_free_logged_ = true;
      log_("stalloc runtime: free of " + std::to_string(p) +
           ", which is not a live allocation of this runtime (a double free, an interior "
           "pointer or another allocator's): ignored; later ones are counted in invalid_frees");
    }
    return;
  }
  --live_allocations_;
  ++stats_.frees;
  if (waiting_ > 0) freed_.notify_all();
}

// The legacy default stream (0) cannot be captured, so the default-stream path (most training
// loops) makes no query.
bool Runtime::captured(vmm::StreamHandle stream) {
  bool capturing = false;
  return stream != 0 && driver_.stream_is_capturing(stream, &capturing) == vmm::Status::Success &&
         capturing;
}

void Runtime::check_not_capturing(vmm::StreamHandle stream, std::size_t size) {
  if (!captured(stream)) return;
  ++stats_.capture_refusals;
  throw GraphCaptureError(
      "stalloc: cannot allocate " + format_bytes(size) +
      " on a stream being captured into a CUDA graph (a capture begun outside PyTorch's "
      "CUDAGraph): the graph would keep this address, which stalloc gives to other tensors "
      "later. Allocate the graph's tensors before the capture begins, or run graphs with "
      "PyTorch's own allocator");
}

void Runtime::take_deferred_frees() {
  std::vector<DeferredFree> still;
  for (const DeferredFree& f : deferred_frees_) {
    if (captured(f.stream)) {
      still.push_back(f);
    } else {
      free_locked(f.ptr);
    }
  }
  deferred_frees_ = std::move(still);
}

bool Runtime::owns(void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto p = reinterpret_cast<vmm::DevicePtr>(ptr);
  return follower_.holds(p) || unplanned_.holds(p);
}

void Runtime::record_stream(void* ptr, vmm::StreamHandle stream) {
  std::lock_guard lock(mutex_);
  const auto p = reinterpret_cast<vmm::DevicePtr>(ptr);
  const StreamMask bit = StreamSync::bit(sync_.index_of(stream));
  if (!follower_.record_stream(p, bit)) unplanned_.record_stream(p, bit);
}

void Runtime::empty_cache() {
  std::lock_guard lock(mutex_);
  unplanned_.release_idle();
  memory_.trim();
}

void Runtime::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw UsageError("memory fraction must be in (0, 1], got " + std::to_string(fraction));
  }
  std::lock_guard lock(mutex_);
  // A fraction of the configured capacity, else of the device's memory (as PyTorch's
  // set_per_process_memory_fraction).
  std::uint64_t whole = base_capacity_;
  if (whole == 0) {
    std::size_t total = 0;
    const vmm::Status s = driver_.total_memory(&total);
    if (s != vmm::Status::Success) {
      throw UsageError("memory fraction: the " + std::string(driver_.name()) +
                       " driver cannot tell the device's memory (" +
                       std::string(vmm::status_name(s)) + "); set capacity in STALLOC_CONF");
    }
    whole = total;
  }
  // A cap of 0 bytes would mean no cap: a fraction too small for one byte allows nothing.
  memory_.set_capacity(std::max<std::uint64_t>(
      static_cast<std::uint64_t>(std::floor(static_cast<double>(whole) * fraction)), 1));
}

void Runtime::step() {
  std::lock_guard lock(mutex_);
  if (!deferred_frees_.empty()) take_deferred_frees();
  const bool first = !explicit_steps_;
  explicit_steps_ = true;
  lifecycle_.end_iteration();
  if (first && stats_.auto_steps > 0) {
    lifecycle_.disown_detected_iterations("step() called after " +
                                          std::to_string(stats_.auto_steps) +
                                          " detected iteration boundaries");
  }
}

void Runtime::add_plan(ChunkPlan plan) {
  std::lock_guard lock(mutex_);
  lifecycle_.add_plan(std::move(plan));
}

void Runtime::wait_for_planning() {
  std::lock_guard lock(mutex_);
  lifecycle_.wait_for_planning();
}

RuntimeStats Runtime::stats() const {
  std::lock_guard lock(mutex_);
  RuntimeStats s = stats_;
  s.reserved_bytes = memory_.reserved_bytes();
  s.peak_reserved_bytes = memory_.peak_reserved_bytes();
  s.cached_bytes = memory_.cached_bytes();
  s.pool_bytes = pool_.size() * granularity_;
  s.lent_bytes = unplanned_.lender().lent() * granularity_;
  s.packed_bytes = unplanned_.packed_live_bytes();
  s.dedicated_bytes = unplanned_.dedicated().live_bytes();
  s.dedicated_behind_gpu = unplanned_.dedicated().served_behind_gpu();
  s.plans_installed = cache_.installed().size();
  for (const auto& p : cache_.installed()) s.plans_unmapped += p->unmapped() ? 1 : 0;
  s.plans_pending = cache_.pending();
  s.plans_retiring = cache_.retiring();
  s.stream_waits = sync_.waits();
  s.stream_waits_on_marks = sync_.waits_on_free_marks();
  s.driver = driver_.counters();
  s.waiting_for_frees = waiting_;
  return s;
}

void Runtime::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  memory_.reset_peak();
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  for (auto* counters : {&stats_.requests.count, &stats_.requests.bytes}) {
    for (RequestCounter& c : *counters) c.peak = c.current;
  }
}

void Runtime::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  for (auto* counters : {&stats_.requests.count, &stats_.requests.bytes}) {
    for (RequestCounter& c : *counters) c.allocated = c.freed = 0;
  }
  stats_.ooms = 0;
  stats_.alloc_retries = 0;
}

void Runtime::set_oom_wait(double seconds) {
  std::lock_guard lock(mutex_);
  config_.oom_wait_seconds = seconds > 0 ? seconds : 0.0;
}

}  // namespace stalloc
