#include "src/allocator.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <limits>

#include "common/units.h"
#include "trace/trace_io.h"
#include "src/chunk_relocation.h"
#include "src/memory_snapshot.h"
#include "vmm/driver_factory.h"

namespace stalloc {
namespace {

std::unique_ptr<vmm::Driver> make_owned_driver(const RuntimeConfig& config, int device) {
  vmm::HostDriverOptions host;
  if (config.granularity != 0) host.granularity = config.granularity;
  host.device = device;
  return vmm::make_driver(config.backend, host);
}

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

// Virtual space of a stream's packed arenas: more than any GPU holds (a reservation costs no
// memory, and one that cannot be had is halved).
constexpr std::uint64_t kSmallArenaBytes = std::uint64_t{64} << 30;
constexpr std::uint64_t kLargeArenaBytes = std::uint64_t{1} << 40;
// A stream's packed arenas, at kArenaKinds * stream + kind.
constexpr std::size_t kSmallArena = 0;
constexpr std::size_t kLargeArena = 1;
constexpr std::size_t kOnlineArena = 2;  // large requests before the first plan, online_page pages
constexpr std::size_t kArenaKinds = 3;
// Below this much memory held, small requests share the large requests' pages. Chosen from
// `stalloc sim --suite real` over 0-256 MiB: 17 of 18 workloads at least PyTorch's best at 128
// MiB, 15 at 0 (small pages apart from the start), 16 at 96, 160, 192 and 256 MiB.
constexpr std::uint64_t kSmallApartBytes = std::uint64_t{128} << 20;
// Emptied memory each packed arena keeps mapped, so that a tensor freed and made again during
// profiling or after a miss costs no VMM call: all of it. An arena short of a chunk takes one of
// its own idle pages whose GPU work is done, then another arena's (the reclaim hook), before it
// borrows or creates one, so pages kept cost no memory beside what is live. A cap of 32 MiB, as
// kept until the ninth session, unmapped and mapped the same pages again every iteration: the
// profiled iterations of llama7b-tp2pp2-r made 2.9 M VMM calls at G = 2 MiB, 152 k with every
// page kept and the other arenas' taken (utilization 99.87% -> 99.84%; docs/benchmarks.md,
// "Ninth session"). Following a plan with Dynamic slots the arenas serve the Dynamic tensors
// that do not fit their views, every iteration, the same way.
constexpr std::uint64_t kIdleBytes = std::numeric_limits<std::uint64_t>::max();
// Chunks made for a run of an arena's pages (packed_arena.h, extents): at most extent_size
// (12 MiB by default), at most 1/kExtentHeldShare of the memory held, and only while the
// runtime grows past the most it ever held. A workload served online made a cuMemCreate and a
// cuMemMap per 2 MiB it first touched (lm-fullstep: 8,655 creates in 1,651 runs), where
// PyTorch's expandable segments map 20 MiB pages. An extent's pages move only together, so
// pages emptied while others of it hold tensors stay where they are; below the high water (an
// iteration repeated) a chunk per page keeps every emptied page free to move. Chosen from
// `stalloc sim --suite default|real` over 8-32 MiB, with and without the share
// (docs/benchmarks.md, "Sixteenth session"): 20 MiB took 0.17 points off llama7b-tp4pp2vpp2's
// utilization, 12 MiB at most 0.04 off any preset; without the share, small workloads lost up
// to 1.6 points (lm-small-train-ctx200-bf16).
constexpr std::uint64_t kExtentHeldShare = 256;
constexpr std::size_t kTransitionsKept = 1024;
// An iteration that followed its plan but for at most one request in kOffPlanShare (requests no
// slot took, slots no request took: an extra tensor, a missing one) counts as the plan's and is
// not planned. Its own plan would be a near-copy of the followed one, and switching between
// the two costs more than the misses: llama7b-varlen-16's iteration 10 makes one allocation
// more than the others, and its plan's install and the switches after it cost 1k-94k VMM calls
// per iteration at G = 2 MiB, where the one missed request costs none. So does one whose
// requests and slots off the plan hold at most one byte in kOffPlanShare of the plan's pool:
// llama3-8b-64k-packed changes 330-490 small tensors (cu_seqlens-like, under 1 MiB) each
// iteration, in 656 places; planned again whenever the places were new, its iterations 3 and 6
// cost an install each (26 k maps, about 180 ms est. on an H200) to place under 1 MiB better.
constexpr std::uint64_t kOffPlanShare = 100;
// How many bytes of slots a request may step over to take a slot ahead of its size (match).
constexpr std::uint64_t kJumpBytesPerByte = 16;
// A plan that, with what is held beside its pool, would hold more than 1/kDeclineShare above the
// most the profiled iterations held is declined: the online path packed those iterations
// tighter, and following the plan would buy driver time with memory. On the small real
// workloads the tensors made while profiling (weights, optimizer state) leave holes in the
// arenas' pages that the profiled iterations' temporaries fill and a plan's pool cannot:
// lm-small-train-ctx100's plan would hold 688 MiB against 674 MiB online (2.1% more; its
// planned iteration peaked at 726 MiB, 89.7% utilization; served online, 96.6%). On the
// presets a plan holds at most 0.4% more than the profiled iterations (rounding to chunks) and
// saves their online path's steady driver calls (llama3-8b-64k-packed: 7.1% of its iteration).
constexpr std::uint64_t kDeclineShare = 100;
// Below this much held, a plan is always followed: 1% of it is under a MiB, a granule or two of
// rounding, while the online path's driver calls weigh most in the short iterations of a small
// workload.
constexpr std::uint64_t kDeclineFromBytes = 64ull << 20;

}  // namespace

Runtime::Runtime(const RuntimeConfig& config, int device)
    : Runtime(config, make_owned_driver(config, device), nullptr) {}

Runtime::Runtime(const RuntimeConfig& config, vmm::Driver& driver)
    : Runtime(config, nullptr, &driver) {}

Runtime::Runtime(const RuntimeConfig& config, std::unique_ptr<vmm::Driver> owned,
                 vmm::Driver* external)
    : config_(config),
      owned_driver_(std::move(owned)),
      driver_(external != nullptr ? *external : *owned_driver_),
      granularity_(pick_granularity(config, driver_)),
      base_capacity_(config.capacity),
      sync_(driver_),
      memory_(driver_, granularity_, config.capacity),
      pool_(memory_),
      lender_(pool_, [this](std::uint32_t head) { return split_run(head); }),
      dedicated_(driver_, memory_, sync_,
                 [this](std::uint64_t bytes) {
                   // The arenas' idle pages go, their chunks released with the cached ones.
                   give_idle_pages(bytes);
                   memory_.trim();
                 }),
      cache_(config.plan_cache_size) {
  recorder_.set_timing(true);
  log("stalloc runtime: " + format_runtime_config(config_) + " driver " +
      std::string(driver_.name()) + " granularity " + format_bytes(granularity_));
  if (config_.peer_access) grant_peer_access();
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
  log("stalloc runtime: peer access for devices [" + list.str() + "]");
}

Runtime::~Runtime() {
  std::lock_guard lock(mutex_);
  cache_.wait();
  active_ = nullptr;
  // The members unmap and release everything as they go; work the GPU still runs on this
  // memory would fault. Wait for it, as cudaFree does.
  sync_.wait_for_streams();
}

void Runtime::log(const std::string& line) const {
  if (config_.log.empty()) return;
  std::ofstream out(config_.log, std::ios::app);
  out << line << "\n";
}

std::uint16_t Runtime::thread_index() {
  const std::thread::id me = std::this_thread::get_id();
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    if (threads_[i] == me) return static_cast<std::uint16_t>(i);
  }
  threads_.push_back(me);
  return static_cast<std::uint16_t>(std::min<std::size_t>(threads_.size() - 1, UINT16_MAX));
}

std::size_t Runtime::match(const InstalledPlan& plan, std::uint64_t size,
                           std::uint32_t stream) const {
  const std::vector<PlannedSlot>& slots = plan.plan().slots;
  if (cursor_ < slots.size() && slots[cursor_].stream == stream) {
    // The next slot takes the request when it is its size, or when it fits a slot whose size
    // varies (planned at the largest seen: MoE routing, sequence lengths) or that grows
    // (Dynamic).
    const PlannedSlot& next = slots[cursor_];
    if (size == next.size || next.kind == SlotKind::Dynamic ||
        (size < next.size && plan.varies(cursor_))) {
      return cursor_;
    }
  }
  // The last request missed the fixed slot at the cursor: if this one is the next slot's, the
  // last one stood for that slot with another size.
  if (missed_at_ == cursor_ && cursor_ + 1 < slots.size() && slots[cursor_ + 1].stream == stream) {
    const PlannedSlot& after = slots[cursor_ + 1];
    if (size == after.size || after.kind == SlotKind::Dynamic ||
        (size < after.size && plan.varies(cursor_ + 1))) {
      return cursor_ + 1;
    }
  }
  // Resynchronise after a request the plan does not have: a slot stepped over for it, of
  // exactly this size (first, or a slot ahead of the same size would take this request and
  // leave every slot between unused); after one the plan lacks: the first slot ahead with
  // exactly this size.
  for (std::size_t k : skipped_) {
    if (k < cursor_ && slots[k].size == size && slots[k].stream == stream && !plan.slot(k).live) {
      return k;
    }
  }
  // Not over slots of more than kJumpBytesPerByte times the request's bytes. Either error
  // strands bytes: a jump taken wrongly (the request is the cursor slot's tensor with a new
  // size) leaves the slots between behind, and the requests that come for them jump again; a
  // miss taken wrongly (those slots' requests did not come) packs only the request. Small sizes
  // recur (offsets of packed sequences, bias and norm tensors), so an equal size ahead tells
  // little: llama3-8b-64k-packed, whose 16- and 24-byte tensors trade sizes, missed 1,946 of
  // 7,357 requests in its third iteration (est. 1.1 s of driver calls) jumping over the slots of
  // 32 MiB activations, 164 without.
  const std::size_t last = std::min(slots.size(), cursor_ + config_.lookahead + 1);
  std::uint64_t stepped_over = 0;
  for (std::size_t k = cursor_ + 1; k < last; ++k) {
    stepped_over += slots[k - 1].size;
    if (stepped_over / kJumpBytesPerByte > size) break;
    if (slots[k].size == size && slots[k].stream == stream) return k;
  }
  return SIZE_MAX;
}

// Early in an iteration the plan chosen by prediction may be the wrong one (variable sequence
// lengths): take the installed plan whose slot at this position is the request, exactly, or
// else the one with the most chunks whose slot there fits it (a Dynamic slot, or a varying one
// at least as large).
void Runtime::switch_plan(std::uint64_t size, std::uint32_t stream) {
  if (allocs_in_iteration_ > config_.lookahead) return;
  const std::size_t at = allocs_in_iteration_;
  InstalledPlan* fitting = nullptr;
  for (const auto& p : cache_.installed()) {
    if (p.get() == active_ || p->last_used <= disowned_stamp_) continue;
    const auto& slots = p->plan().slots;
    if (at >= slots.size() || slots[at].stream != stream) continue;
    if (slots[at].size == size) {
      fitting = p.get();
      break;
    }
    const bool fits = slots[at].kind == SlotKind::Dynamic ||
                      (slots[at].size >= size && p->varies(at));
    if (!fits) continue;
    if (fitting == nullptr || p->plan().num_chunks > fitting->plan().num_chunks) fitting = p.get();
  }
  if (fitting == nullptr) return;
  active_ = fitting;
  active_->last_used = ++stamp_;
  active_->restart_windows();
  cursor_ = at;
  // The new plan's first `at` slots stand for the requests made so far.
  slots_taken_in_iteration_ = at;
  taken_slot_bytes_in_iteration_ = 0;
  for (std::size_t k = 0; k < at; ++k) {
    taken_slot_bytes_in_iteration_ += active_->plan().slots[k].size;
  }
  misses_in_iteration_ = 0;
  missed_bytes_in_iteration_ = 0;
}

vmm::DevicePtr Runtime::serve_planned(std::uint64_t size, std::uint32_t stream,
                                      std::size_t* slot_index,
                                      std::span<const std::uint32_t>* budget) {
  *slot_index = SIZE_MAX;
  std::size_t k = active_ != nullptr ? match(*active_, size, stream) : SIZE_MAX;
  if (k == SIZE_MAX) {
    switch_plan(size, stream);
    if (active_ != nullptr) k = match(*active_, size, stream);
  }
  if (k == SIZE_MAX) {
    if (active_ != nullptr) {
      ++stats_.misses;
      ++misses_in_iteration_;
      missed_bytes_in_iteration_ += size;
      // A request larger than the largest its varying slot has seen is still that slot's
      // ordinal: step over the slot, so that the next request meets its own.
      //
      // A slot the plan saw fixed that meets another size may have changed (MoE routing) or
      // the request may be one the plan lacks (an extra tensor). Left in place after a run of
      // changed sizes, the cursor would meet every later request with this slot, and past the
      // lookahead nothing would match again (qwen-moe's third iteration: 157 of 18,549
      // requests matched). Stepped over for an extra request, the next request, the slot's
      // own, would meet the slot after its own and take it if it fits, and so on down the
      // plan. So a first miss on a fixed slot stays; a second in a row on the same slot means
      // the sizes changed, and both slots are stepped over (the next request's own slot is
      // the one after them). Slots stepped over wrongly are found again among the skipped.
      const std::vector<PlannedSlot>& slots = active_->plan().slots;
      auto step_over = [&] {
        skipped_[skipped_next_++ % skipped_.size()] = cursor_;
        ++cursor_;
      };
      if (cursor_ < slots.size() && slots[cursor_].stream == stream) {
        if (active_->varies(cursor_)) {
          if (size > slots[cursor_].size) step_over();
        } else if (slots[cursor_].kind != SlotKind::Dynamic &&
                   misses_in_iteration_ <= slots_taken_in_iteration_) {
          if (missed_at_ == cursor_) {
            step_over();
            if (cursor_ < slots.size() && slots[cursor_].stream == stream) step_over();
            missed_at_ = SIZE_MAX;
          } else {
            missed_at_ = cursor_;
          }
        }
      }
    } else {
      ++stats_.unplanned;
    }
    return 0;
  }
  if (k < cursor_) {
    std::replace(skipped_.begin(), skipped_.end(), k, SIZE_MAX);
  } else {
    if (missed_at_ == cursor_ && k > cursor_) skipped_[skipped_next_++ % skipped_.size()] = cursor_;
    cursor_ = k + 1;
  }
  missed_at_ = SIZE_MAX;
  ++slots_taken_in_iteration_;
  const PlannedSlot& planned = active_->plan().slots[k];
  taken_slot_bytes_in_iteration_ += planned.size;
  active_->advance_to(planned.start);
  SlotState& slot = active_->slot(k);
  StreamMask sync_with = 0;
  StreamSync::FreeStamp freed = StreamSync::kUnstamped;
  bool occupied = false;
  if (planned.kind == SlotKind::Dynamic && !slot.live) {
    const std::uint64_t starts = active_->dynamic_starts(k, size);
    if (starts == 0) {
      // Longer than the budget its range is mapped on: packed on that budget instead.
      ++stats_.matches;
      *budget = planned.budget_chunks;
      return 0;
    }
    // The first start whose bytes are free (another Dynamic tensor may hold the first pages
    // of an overlapping budget); else the first, if parked chunks are all that is in the way.
    for (std::uint64_t start = 0; start < starts && !occupied; ++start) {
      active_->fit_dynamic(k, size, start);
      occupied = pool_.try_occupy(slot.footprint, &sync_with, &freed);
    }
    if (!occupied) active_->fit_dynamic(k, size, 0);
  } else if (!slot.live) {
    occupied = pool_.try_occupy(slot.footprint, &sync_with, &freed);
  }
  // A chunk lent to a packed arena and parked there comes back at once when the slot wants it.
  if (!occupied) {
    conflict_pieces_.clear();
    slot.footprint.append_pieces(granularity_, &conflict_pieces_);
  }
  if (!occupied && (slot.live || !(lender_.reclaim(conflict_pieces_) &&
                                   pool_.try_occupy(slot.footprint, &sync_with, &freed)))) {
    lender_.want(conflict_pieces_);
    ++stats_.conflicts;
    return 0;
  }
  if (!active_->ensure_mapped(k, misses_in_iteration_ <= slots_taken_in_iteration_) ||
      !sync_.order_after(sync_with, stream, freed)) {
    // The chunks keep the streams the slot would have waited for.
    pool_.vacate(slot.footprint, sync_with, freed);
    ++stats_.conflicts;
    return 0;
  }
  slot.live = true;
  slot.tenant_stream = stream;
  slot.used_by = StreamSync::bit(stream);
  active_->on_occupied(k);
  ++stats_.matches;
  *slot_index = k;
  return active_->address(k);
}

void* Runtime::malloc(std::size_t size, int device, vmm::StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (device != driver_.device()) {
    ++stats_.ooms;
    stats_.last_oom = {size, memory_.reserved_bytes(), memory_.capacity(),
                       "device " + std::to_string(device) + " is not this runtime's device " +
                           std::to_string(driver_.device())};
    return nullptr;
  }
  check_not_capturing(stream, size);
  if (!deferred_frees_.empty()) take_deferred_frees();
  const std::uint32_t s = sync_.index_of(stream);
  if (config_.auto_step && !explicit_steps_) {
    const std::uint64_t dropped = detector_.dropped();
    if (detector_.boundary_before(size, s, live_allocations_)) {
      ++stats_.auto_steps;
      end_iteration();
    } else if (detector_.dropped() != dropped) {
      disown_detected_iterations("the detected period of " +
                                 std::to_string(detector_.period_dropped()) +
                                 " allocations ended: it was part of an iteration");
    }
  }
  std::size_t slot_index = SIZE_MAX;
  vmm::DevicePtr p = 0;
  PackedArena* arena = nullptr;
  std::span<const std::uint32_t> budget;
  if (active_ != nullptr || !cache_.installed().empty()) {
    p = serve_planned(size, s, &slot_index, &budget);
  } else {
    ++stats_.unplanned;
  }
  ++allocs_in_iteration_;
  if (p == 0) {
    p = serve_unplanned(size, s, budget, &arena);
    if (p == 0) return nullptr;
  }
  const std::uint64_t id = recorder_.alloc(size, s, thread_index(), p);
  if (slot_index != SIZE_MAX) {
    active_->slot(slot_index).tenant_id = id;
    active_->slot(slot_index).tenant_size = size;
    live_planned_.insert(p, {active_, static_cast<std::uint32_t>(slot_index)});
  } else {
    unplanned_.emplace(p, Unplanned{id, size, s, StreamSync::bit(s), arena});
  }
  ++live_allocations_;
  ++stats_.allocations;
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return reinterpret_cast<void*>(p);
}

bool Runtime::free_planned(vmm::DevicePtr p, std::uint16_t thread) {
  const LiveSlot live = live_planned_.take(p);
  if (live.plan == nullptr) return false;
  SlotState& slot = live.plan->slot(live.slot);
  pool_.vacate(slot.footprint, slot.used_by, sync_.now());
  sync_.note_free(slot.used_by);
  slot.live = false;
  live.plan->on_vacated(live.slot);
  recorder_.free(slot.tenant_id, slot.tenant_size, slot.tenant_stream, thread, p);
  stats_.allocated_bytes -= slot.tenant_size;
  return true;
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
  bool done = free_planned(p, thread);
  if (!done) {
    auto it = unplanned_.find(p);
    if (it != unplanned_.end()) {
      const Unplanned u = it->second;
      unplanned_.erase(it);
      done = u.arena != nullptr ? u.arena->free(p, u.used_by) : dedicated_.free(p, u.used_by);
      sync_.note_free(u.used_by);
      recorder_.free(u.id, u.size, u.stream, thread, p);
      stats_.allocated_bytes -= u.size;
    }
  }
  if (!done) {
    ++stats_.invalid_frees;
    return;
  }
  --live_allocations_;
  ++stats_.frees;
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

void Runtime::record_stream(void* ptr, vmm::StreamHandle stream) {
  std::lock_guard lock(mutex_);
  const auto p = reinterpret_cast<vmm::DevicePtr>(ptr);
  const StreamMask bit = StreamSync::bit(sync_.index_of(stream));
  if (const LiveSlot live = live_planned_.find(p); live.plan != nullptr) {
    live.plan->slot(live.slot).used_by |= bit;
    return;
  }
  auto it = unplanned_.find(p);
  if (it != unplanned_.end()) it->second.used_by |= bit;
}

void Runtime::empty_cache() {
  std::lock_guard lock(mutex_);
  release_idle_unplanned();
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
  memory_.set_capacity(
      static_cast<std::uint64_t>(std::floor(static_cast<double>(whole) * fraction)));
}

void Runtime::step() {
  std::lock_guard lock(mutex_);
  if (!deferred_frees_.empty()) take_deferred_frees();
  const bool first = !explicit_steps_;
  explicit_steps_ = true;
  end_iteration();
  if (first && stats_.auto_steps > 0) {
    disown_detected_iterations("step() called after " + std::to_string(stats_.auto_steps) +
                               " detected iteration boundaries");
  }
}

// What the detector took for iterations was part of one, such as a pipeline schedule's
// repeated micro-batches: the program called step() after the detector had cut iterations (the
// torch extension steps from the optimizer's hook, so detection runs only until the first
// optimizer step), or the detected period ended. Plans of those pieces would be followed into
// the program's real iterations and their conflicts paid every iteration (llama7b-tp4pp2vpp2:
// 20 k conflicts and 200 k VMM calls per steady iteration), so they are not chosen again and
// profiling starts over.
void Runtime::disown_detected_iterations(const std::string& why) {
  log("stalloc runtime: " + why + "; profiling again from the program's iterations");
  transitions_.clear();
  have_last_key_ = false;
  profile_base_ = recorder_.iteration();
  disowned_stamp_ = stamp_;
  cache_.retire_idle(nullptr);
  active_ = nullptr;
}

std::uint64_t Runtime::slots_not_taken() const {
  const std::uint64_t slots = active_->slot_count();
  return slots - std::min(slots, slots_taken_in_iteration_);
}

std::uint64_t Runtime::off_plan_requests() const {
  return misses_in_iteration_ + slots_not_taken();
}

std::uint64_t Runtime::off_plan_bytes() const {
  std::uint64_t planned = 0;
  for (const PlannedSlot& s : active_->plan().slots) planned += s.size;
  return missed_bytes_in_iteration_ +
         (planned - std::min(planned, taken_slot_bytes_in_iteration_));
}

bool Runtime::served_by_active() const {
  if (active_ == nullptr) return false;
  const std::uint64_t slots = active_->slot_count();
  if (off_plan_requests() * kOffPlanShare <= slots) return true;
  const std::uint64_t pool_bytes = active_->plan().num_chunks * granularity_;
  return slots >= kOffPlanShare && off_plan_bytes() * kOffPlanShare <= pool_bytes;
}

void Runtime::end_iteration() {
  const std::uint32_t iteration = recorder_.iteration();
  if (allocs_in_iteration_ > 0) {
    SignatureKey key;
    if (served_by_active()) {
      key = key_of(active_->plan().signature);
      if (const std::uint64_t off = off_plan_requests(); off > 0) {
        log("stalloc runtime: iteration " + std::to_string(iteration) +
            " followed its plan of " + std::to_string(active_->slot_count()) + " slots, " +
            std::to_string(off) + (off == 1 ? " request or slot" : " requests or slots") +
            " off it (" + format_bytes(off_plan_bytes()) + "): not planned");
      }
    } else {
      if (active_ != nullptr) {
        log("stalloc runtime: iteration " + std::to_string(iteration) + " left its plan of " +
            std::to_string(active_->slot_count()) + " slots: " +
            std::to_string(misses_in_iteration_) + " requests missed, " +
            std::to_string(slots_not_taken()) + " slots not taken (" +
            format_bytes(off_plan_bytes()) + ")");
      }
      recorder_.compare_sizes();
      // auto: sizes that vary together (sequence lengths) are planned at their largest, so
      // that every shorter iteration fits the plan's slots with no VMM call and only one
      // longer than any seen is planned again; sizes that vary apart (MoE) get Dynamic slots.
      VaryingSizes policy = config_.varying_sizes;
      Trace trace = recorder_.iteration_trace(config_.varying_sizes, &policy);
      trace.device = driver_.device();
      key = key_of(signature_of(trace, iteration));
      if (iteration >= profile_base_ + config_.profile_iterations && !cache_.known(key)) {
        PlanOptions options;
        options.mode = config_.mode;
        options.granularity = granularity_;
        options.windows = config_.windows;
        // A one-off tensor's slot would stand between Dynamic slots that take any size, and the
        // next iteration, which does not make it, would meet each slot one early
        // (slot_classifier.h). Plans at the largest sizes keep it: without, the plans of
        // llama7b-varlen's lengths in random order under `largest` held 1.3-2.3 points less.
        options.plan_one_offs = policy != VaryingSizes::Dynamic;
        // Serial: the planner runs beside training and must not take every core from it.
        options.dsa.parallel = false;
        cache_.start_planning(std::move(trace), iteration, options, config_.mode_auto);
        log("stalloc runtime: planning iteration " + std::to_string(iteration) +
            " in the background" +
            (config_.varying_sizes == VaryingSizes::Auto && policy == VaryingSizes::Largest
                 ? ", its varying sizes at their largest"
                 : ""));
      }
    }
    if (have_last_key_) {
      auto it = std::find_if(transitions_.begin(), transitions_.end(), [&](const Transition& t) {
        return t.from == last_key_ && t.to == key;
      });
      if (it != transitions_.end()) {
        ++it->count;
      } else {
        // Bounded: a run whose signatures never repeat starts over rather than growing.
        if (transitions_.size() >= kTransitionsKept) transitions_.clear();
        transitions_.push_back({last_key_, key, 1});
      }
    }
    last_key_ = key;
    have_last_key_ = true;
  }
  const std::uint32_t profiled_until = profile_base_ + config_.profile_iterations;
  const bool keep = config_.record_trace || iteration <= profiled_until;
  recorder_.next_iteration(keep);
  recorder_.set_timing(config_.record_trace || iteration + 1 <= profiled_until);
  ++stats_.iterations;
  cache_.release_retired();
  // No plan is followed until choose_plan: an install short of mapping room may retire any
  // idle plan, the last one followed included.
  active_ = nullptr;
  // Not one started at this boundary, however fast it was: whether it is installed here or at
  // the next one would depend on the planning thread's speed (and so would whether it is mapped
  // here, choose_plan).
  install_finished(iteration);
  choose_plan();
  // Serving from a plan without Dynamic slots, memory kept for unplanned reuse is only waste:
  // give it back. A plan with Dynamic slots packs them in the arenas every iteration.
  if (active_ != nullptr && active_->plan().dynamic_peak_bytes == 0) {
    release_idle_unplanned();
  } else {
    poll_unplanned();
  }
}

vmm::DevicePtr Runtime::serve_unplanned(std::uint64_t size, std::uint32_t stream,
                                        std::span<const std::uint32_t> budget,
                                        PackedArena** arena) {
  // Pages other arenas emptied go back first, so that this one need not create chunks.
  poll_unplanned();
  if (active_ == nullptr || lend_any_) {
    lender_.lend_any();
  } else {
    lender_.lend_done(budget, active_->chunks_done_before(cursor_),
                      static_cast<std::uint32_t>(active_->plan().num_chunks));
  }
  const std::uint64_t held = memory_.reserved_bytes();
  const std::uint64_t high_water = memory_.high_water_bytes();
  std::string why;
  // No plan followed: a large tensor gets its own chunk and range (dedicated_ranges.h).
  // Only where rounding up to whole granules wastes at most 1/64 of the tensor: a 33 MiB tensor
  // would waste 3% on its own chunk, less packed on pages with its neighbours.
  const std::uint64_t rounded = (size + granularity_ - 1) / granularity_ * granularity_;
  const bool dedicated = active_ == nullptr && config_.large_size != 0 &&
                         size >= config_.large_size && (rounded - size) * 64 <= size;
  *arena = dedicated ? nullptr : &packed_arena(stream, size);
  auto serve = [&] {
    return dedicated ? dedicated_.allocate(size, stream, &why) : (*arena)->allocate(size, stream, &why);
  };
  vmm::DevicePtr p = serve();
  if (p == 0 && release_idle_unplanned() > 0) {
    // Memory pressure: what the arenas kept mapped for reuse went back; one more try.
    p = serve();
  }
  // Then the mappings of plans no tensor lives in, the one followed included: this iteration is
  // served dynamically from here on rather than fail while memory is free.
  if (p == 0 && retire_idle_plans(nullptr)) {
    if (active_ == nullptr) lender_.lend_any();  // what it lent from named the retired plan
    p = serve();
  }
  // Then the views of installed plans that no live tensor uses (mapped again when wanted).
  if (p == 0 && shed_plan_views() > 0) p = serve();
  // What was retired or shed may wait for GPU work: a failure waits a little for it, as
  // PyTorch's allocator synchronizes before it raises.
  if (p == 0 && wait_for_unmaps()) p = serve();
  // Following the plan, this iteration needs more than the plan leaves idle (a longer
  // sequence, a larger expert buffer): from now on any idle pool chunk may be lent, at the
  // risk of conflicts with later slots, rather than grow memory beside the pool. Not for growth
  // that stays below the most ever held (it costs no memory that counts), nor for growth the
  // arenas' emptied pages still waiting on the GPU cover (they come back as it catches up): each
  // time, the rest of the iteration lent the chunks its later slots wanted (llama7b-varlen's last
  // iteration 8.6 -> 5.1% est., qwen-moe over 30 iterations under lag 3: 2,620 -> 1,060 ms;
  // docs/benchmarks.md, "Twentieth session").
  const std::uint64_t grown = memory_.reserved_bytes() - std::min(memory_.reserved_bytes(), held);
  if (grown > 0 && memory_.reserved_bytes() > high_water && emptied_unplanned_bytes() < grown) {
    lend_any_ = true;
  }
  if (p == 0) {
    ++stats_.ooms;
    stats_.last_oom = {size, memory_.reserved_bytes(), memory_.capacity(), why};
    log("stalloc runtime: out of memory for " + format_bytes(size) + ": " + why);
  }
  return p;
}

PackedArena& Runtime::packed_arena(std::uint32_t stream, std::uint64_t size) {
  const bool small_request = size <= config_.small_size;
  // Small requests get pages of their own, so that short-lived small tensors do not pin the
  // pages of large ones, only once the runtime holds kSmallApartBytes: below it, a small
  // workload's partly used small pages are a large share of all it holds (cnn-optimisation-loop
  // 92.2% -> 97.4%, docs/runtime.md).
  const bool small = small_request && memory_.reserved_bytes() >= kSmallApartBytes;
  // online_page set: before any plan is installed (nothing is lent from a pool then), large
  // requests take pages of online_page bytes, one chunk made and mapped per page, where pages
  // of the granularity make a cuMemCreate and a cuMemMap every 2 MiB of a workload served
  // online. Off by default: the partly used pages cost small workloads memory
  // (docs/runtime.md, "Pages of the online path").
  const std::uint64_t page_granules = std::max<std::uint64_t>(config_.online_page / granularity_, 1);
  const bool online = !small_request && page_granules > 1 && cache_.installed().empty();
  const std::size_t kind = small ? kSmallArena : online ? kOnlineArena : kLargeArena;
  const std::size_t index = kArenaKinds * std::size_t{stream} + kind;
  if (packed_.size() <= index) packed_.resize(index + 1);
  if (!packed_[index]) {
    packed_[index] = std::make_unique<PackedArena>(
        driver_, memory_, sync_, small ? kSmallArenaBytes : kLargeArenaBytes, stream,
        kIdleBytes, &lender_, [this](PackedArena* asking) {
          for (const auto& other : packed_) {
            if (other && other.get() != asking && other->give_idle_chunk() > 0) return true;
          }
          // No idle page anywhere: above the most ever held, a cached dedicated range goes
          // instead, so that the chunk the arena now creates does not raise the peak.
          if (memory_.reserved_bytes() + granularity_ > memory_.high_water_bytes()) {
            dedicated_.release_for(granularity_);
          }
          return false;
        },
        online ? page_granules : 1,
        ArenaExtents{std::max<std::uint64_t>(config_.extent_size / granularity_, 1),
                     kExtentHeldShare});
  }
  return *packed_[index];
}

std::uint64_t Runtime::release_idle_unplanned() {
  std::uint64_t released = dedicated_.release_cached();
  for (const auto& arena : packed_) {
    if (arena) released += arena->release_idle();
  }
  return released;
}

std::uint64_t Runtime::give_idle_pages(std::uint64_t bytes) {
  std::uint64_t given = 0;
  for (bool more = true; more && given < bytes;) {
    more = false;
    for (const auto& arena : packed_) {
      if (!arena || given >= bytes) continue;
      const std::uint64_t freed = arena->give_idle_chunk();
      given += freed;
      more = more || freed > 0;
    }
  }
  return given;
}

std::uint64_t Runtime::emptied_unplanned_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& arena : packed_) {
    if (arena) bytes += arena->emptied_bytes();
  }
  return bytes;
}

void Runtime::poll_unplanned() {
  for (const auto& arena : packed_) {
    if (arena) arena->poll();
  }
}

std::uint64_t Runtime::plan_mapping_room() const {
  const std::uint64_t limit = config_.max_mappings != 0 ? config_.max_mappings : driver_.mapping_limit();
  if (limit == 0) return std::numeric_limits<std::uint64_t>::max();
  // An eighth stays for what is served beside the plans (arenas, dedicated ranges), on top of
  // what they hold now and what plans installed unmapped will map.
  std::uint64_t held = driver_.counters().live_mappings + limit / 8;
  for (const auto& p : cache_.installed()) held += p->deferred_pages();
  return held < limit ? limit - held : 0;
}

InstalledPlan::MappingRoom Runtime::mapping_room() {
  return [this](std::uint64_t needed) { return make_mapping_room(needed); };
}

std::uint64_t Runtime::make_mapping_room(std::uint64_t needed) {
  const std::uint64_t room = plan_mapping_room();
  if (room >= needed) return room;
  // At a boundary the GPU may still run the last iteration's work on the retired views: the
  // install waits a little for it rather than fall back to a mode that maps more per iteration.
  if (!retire_idle_plans(active_) && !wait_for_unmaps()) return room;
  return plan_mapping_room();
}

std::uint64_t Runtime::shed_plan_views() {
  const std::uint64_t limit =
      config_.max_mappings != 0 ? config_.max_mappings : driver_.mapping_limit();
  // A sixteenth of the limit at a time, so that the next pages need not shed again at once.
  const std::uint64_t wanted = std::max<std::uint64_t>(limit / 16, 1);
  std::uint64_t freed = 0;
  for (const auto& plan : cache_.installed()) {
    if (freed >= wanted) break;
    freed += plan->shed_idle_views(wanted - freed);
  }
  if (freed > 0) {
    log("stalloc runtime: " + std::to_string(freed) + " chunk mappings of plan views shed");
  }
  return freed;
}

bool Runtime::unmap_completed(std::uint64_t before) {
  cache_.release_retired();
  for (const auto& plan : cache_.installed()) plan->unmap_completed();
  poll_unplanned();
  return driver_.counters().live_mappings < before;
}

bool Runtime::unmaps_pending() const {
  return cache_.retiring() > 0 ||
         std::any_of(cache_.installed().begin(), cache_.installed().end(),
                     [](const auto& plan) { return plan->unmaps_pending(); }) ||
         std::any_of(packed_.begin(), packed_.end(),
                     [](const auto& arena) { return arena && arena->unmaps_pending(); });
}

// As PyTorch's allocator before it raises out of memory: one wait for the device, which then
// has run every kernel that could still use what waits to be unmapped.
bool Runtime::wait_for_unmaps() {
  const std::uint64_t before = driver_.counters().live_mappings;
  if (unmap_completed(before)) return true;
  if (!unmaps_pending() || driver_.synchronize() != vmm::Status::Success) return false;
  return unmap_completed(before);
}

bool Runtime::retire_idle_plans(const InstalledPlan* keep) {
  const std::uint64_t before = driver_.counters().live_mappings;
  cache_.retire_idle(keep);
  if (active_ != nullptr && !cache_.holds(active_)) active_ = nullptr;
  cache_.release_retired();
  const std::uint64_t after = driver_.counters().live_mappings;
  if (after < before) {
    log("stalloc runtime: idle plans retired for " + std::to_string(before - after) +
        " chunk mappings");
  }
  return after < before;
}

std::vector<bool> Runtime::chunks_held_by_disowned() const {
  std::vector<bool> held;
  if (disowned_stamp_ == 0) return held;
  std::vector<ChunkPiece> pieces;
  for (const auto& plan : cache_.installed()) {
    if (plan->last_used > disowned_stamp_ || plan->idle()) continue;
    for (std::size_t k = 0; k < plan->slot_count(); ++k) {
      const SlotState& slot = plan->slot(k);
      if (!slot.live) continue;
      pieces.clear();
      slot.footprint.append_pieces(granularity_, &pieces);
      for (const ChunkPiece& piece : pieces) {
        if (held.size() <= piece.chunk) held.resize(piece.chunk + 1, false);
        held[piece.chunk] = true;
      }
    }
  }
  return held;
}

std::vector<bool> Runtime::splittable_runs(const std::vector<bool>& held) const {
  std::vector<bool> splittable(pool_.size(), false);
  for (std::uint32_t head = 0; head < pool_.size(); head += pool_.run_length(head)) {
    const std::uint32_t length = pool_.run_length(head);
    bool free = length > 1 && pool_.run_idle(head);
    for (std::uint32_t k = 0; free && k < length; ++k) free = !(head + k < held.size() && held[head + k]);
    splittable[head] = free;
  }
  return splittable;
}

bool Runtime::split_run(std::uint32_t head) {
  const std::uint32_t length = pool_.run_length(head);
  if (length < 2) return true;
  // Asked again in the same iteration (the lender visits every idle chunk), a refusal for the
  // GPU's work, a retiring plan or the mappings limit stands: asking costs event calls.
  const std::uint64_t stamp = stats_.iterations + 1;
  if (head < split_refused_.size() && split_refused_[head] == stamp) return false;
  auto refuse = [&] {
    if (split_refused_.size() < pool_.size()) split_refused_.resize(pool_.size(), 0);
    split_refused_[head] = stamp;
    return false;
  };
  // Tenants come and go (asked again, it may be free): no refusal kept for them.
  if (!pool_.run_idle(head)) return false;
  if (cache_.retiring_maps(head)) return refuse();
  // Its former tenants' kernels may still run on it: its mappings go only once they are done.
  // Lent a chunk at a time, as the runs' chunks were, the arenas would be ordered after them on
  // their streams; a run must be unmapped, so while the GPU runs behind the host waits for the
  // device, once in an iteration, as PyTorch's allocator does before it frees cached blocks
  // (llama7b-tp2pp2-r at 4,096 tokens then 2,048, lag 3: without it no run could be split,
  // the next plan grew the pool past them, 97.20 -> 91.66%).
  if (const StreamMask users = pool_.run_users(head); users != 0) {
    std::vector<vmm::EventHandle> done;
    const bool ok = sync_.record(users, &done) && sync_.completed(&done);
    sync_.discard(&done);
    if (!ok) {
      if (split_wait_iteration_ == stamp || driver_.synchronize() != vmm::Status::Success) {
        return refuse();
      }
      split_wait_iteration_ = stamp;
      ++stats_.split_waits;
      pool_.forget_users();
    }
  }
  std::vector<std::pair<InstalledPlan*, std::vector<InstalledPlan::RunPlace>>> at;
  std::uint64_t places = 0;
  for (const auto& plan : cache_.installed()) {
    std::vector<InstalledPlan::RunPlace> p = plan->run_places(head);
    places += p.size();
    if (!p.empty()) at.emplace_back(plan.get(), std::move(p));
  }
  // Each place maps the run's chunks one by one then: within the live mappings limit.
  const std::uint64_t limit =
      config_.max_mappings != 0 ? config_.max_mappings : driver_.mapping_limit();
  if (limit != 0 && driver_.counters().live_mappings + places * (length - 1) > limit) {
    return refuse();
  }
  for (auto& [plan, p] : at) plan->unmap_run(p);
  const bool split = pool_.split_run(head);
  for (auto& [plan, p] : at) plan->map_run_again(head, length, p);
  if (!split) return refuse();
  ++stats_.runs_split;
  return true;
}

void Runtime::install_finished(std::uint32_t made_before) {
  std::vector<PlanCache::Finished> finished = cache_.take_finished(made_before);
  if (finished.empty()) return;
  // The dedicated ranges' cache goes back first: no plan serves from it.
  dedicated_.release_cached();
  bool installed = false;
  bool declined = false;
  for (PlanCache::Finished& f : finished) {
    // Planned from a piece of an iteration the program has since disowned.
    if (f.iteration < profile_base_) continue;
    if (!f.plan) {
      ++stats_.plan_failures;
      stats_.last_plan_error = f.error;
      cache_.mark_failed(f.key);
      log("stalloc runtime: planning failed: " + f.error);
      continue;
    }
    // Sizes that changed at many ordinals, none yet seen to change twice (a routing that is
    // about to change again): a plan of fixed slots would be left within its first iteration,
    // its pool made and its first views mapped for nothing (qwen-moe: est. 287 and 312 ms, its
    // two costliest iterations). Not installed; the next comparison makes the ordinals that
    // change again Dynamic slots, and a plan of the same signature is made again if it recurs.
    if (config_.varying_sizes == VaryingSizes::Dynamic && f.plan->dynamic_peak_bytes == 0 &&
        recorder_.sizes_changed()) {
      ++stats_.plans_deferred;
      log("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
          " not installed: its sizes changed at the last comparison");
      continue;
    }
    if (std::string why; declines(*f.plan, &why)) {
      ++stats_.plans_declined;
      declined = true;
      cache_.mark_failed(f.key);
      log("stalloc runtime: plan of iteration " + std::to_string(f.iteration) +
          " declined: " + why);
      continue;
    }
    std::string why;
    const PlanMode tried = f.plan->mode;
    PoolClaims claims;
    claims.runs = config_.pool_runs && recorder_.sizes_settled();
    if (std::vector<bool> held = chunks_held_by_disowned(); pool_.has_runs()) {
      // The installer renumbers the plan onto the pool's runs (run_relabelling.h).
      claims.splittable = splittable_runs(held);
      claims.held = std::move(held);
      claims.split = [this](std::uint32_t head) { return split_run(head); };
    } else if (!held.empty()) {
      const std::uint64_t skipped = relocate_around(*f.plan, held);
      log("stalloc runtime: the plan skips " + std::to_string(skipped) +
          " pool chunks held by tensors of disowned plans");
    }
    wait_before_pool_growth(f.plan->num_chunks);
    auto plan = InstalledPlan::install(std::move(*f.plan), driver_, pool_, sync_, mapping_room(),
                                       &why, claims);
    if (!plan && tried != PlanMode::Windowed) {
      // Alias mode maps every slot at once, which may exceed the live mappings the driver
      // allows: an offset plan maps each chunk once, windowed mode only what a window uses.
      // Plan again the first way, then the second.
      const PlanMode next = tried == PlanMode::Alias ? PlanMode::Offset : PlanMode::Windowed;
      log("stalloc runtime: " + std::string(plan_mode_name(tried)) + " plan not installed (" +
          why + "), planning " + std::string(plan_mode_name(next)));
      f.options.mode = next;
      cache_.start_planning(std::move(f.trace), f.iteration, f.options);
      ++stats_.plan_failures;
      stats_.last_plan_error = why;
      continue;
    }
    if (!plan) {
      ++stats_.plan_failures;
      stats_.last_plan_error = why;
      cache_.mark_failed(f.key);
      log("stalloc runtime: plan not installed: " + why);
      continue;
    }
    log("stalloc runtime: plan installed: " + std::to_string(plan->slot_count()) + " slots, " +
        std::to_string(plan->plan().num_chunks) + " chunks");
    cache_.insert(std::move(plan), ++stamp_, active_);
    ++stats_.plan_installs;
    installed = true;
  }
  // The pool took what it needed from the cache; the rest was the profiling iterations' and
  // would only sit beside the pool.
  if (installed) memory_.trim();
  // A declined plan leaves the iterations to the online path for good: its idle pages go back,
  // as at every install before, and its next pages are packed afresh (kept, lm-small-train-ctx100
  // held 0.28 points more).
  if (declined && !installed) release_idle_unplanned();
}

void Runtime::wait_before_pool_growth(std::uint64_t chunks) {
  const std::uint64_t growth = chunks > pool_.size() ? (chunks - pool_.size()) * granularity_ : 0;
  // The arenas' idle pages as far as the pool grows beyond the chunks PhysicalMemory has cached,
  // so that it takes theirs rather than create its own beside them. The other idle pages stay:
  // they serve what a plan with Dynamic slots leaves to the arenas (tensors longer than their
  // views), where all given back, the next iteration made them again (llama7b-varlen: 2,626
  // creates in its first iteration after the install, docs/benchmarks.md). After a plan
  // without Dynamic slots they go at the boundary (end_iteration). Pages the GPU still runs on
  // cannot be given yet: then all of them are retired, as before, and the growth may wait.
  if (const std::uint64_t cached = memory_.cached_bytes();
      growth > cached && give_idle_pages(growth - cached) < growth - cached) {
    release_idle_unplanned();
  }
  if (growth == 0 || memory_.reserved_bytes() + growth <= memory_.high_water_bytes()) return;
  if (!unmaps_pending() && dedicated_.cached_bytes() == 0) return;
  ++stats_.install_waits;
  wait_for_unmaps();
  release_idle_unplanned();
}

bool Runtime::declines(const ChunkPlan& plan, std::string* why) const {
  // What stays beside the pool while the plan is followed: the pages and ranges that hold
  // tensors made before it (weights, optimizer state). Not the emptied ones: given back at the
  // install, or, while the GPU may still use them (events pending), soon after.
  std::uint64_t beside = dedicated_.live_range_bytes();
  for (const auto& arena : packed_) {
    if (arena) beside += arena->occupied_own_pages() * arena->page_bytes();
  }
  const std::uint64_t pool_bytes = pool_.size() * granularity_;
  const std::uint64_t would = std::max(pool_bytes, plan.num_chunks * granularity_) + beside;
  const std::uint64_t online = memory_.high_water_bytes();
  if (online < kDeclineFromBytes || would * kDeclineShare <= online * (kDeclineShare + 1)) {
    return false;
  }
  *why = "with the " + format_bytes(beside) + " held beside it the runtime would hold " +
         format_bytes(would) + ", more than 1/" + std::to_string(kDeclineShare) +
         " above the " + format_bytes(online) +
         " the profiled iterations held at most: served online";
  return true;
}

void Runtime::choose_plan() {
  active_ = nullptr;
  if (have_last_key_) {
    std::uint64_t best = 0;
    for (const Transition& t : transitions_) {
      if (t.from != last_key_ || t.count <= best) continue;
      if (InstalledPlan* plan = cache_.find(t.to)) {
        active_ = plan;
        best = t.count;
      }
    }
    if (active_ == nullptr) active_ = cache_.find(last_key_);
  }
  if (active_ == nullptr) active_ = cache_.most_recent();
  if (active_ != nullptr && active_->last_used <= disowned_stamp_) active_ = nullptr;
  if (active_ != nullptr) {
    // A plan installed unmapped has its first stage of views mapped at this boundary when the
    // iteration that just ended had its signature (the next will likely follow it too), else at
    // its first match; the later stages as the iteration reaches them (plan_installer.h).
    if (active_->deferred() && have_last_key_ && key_of(active_->plan().signature) == last_key_) {
      active_->map_first_stage();
    }
    if (config_.varying_sizes == VaryingSizes::Largest ||
        config_.varying_sizes == VaryingSizes::Auto) {
      const std::vector<bool>* varying =
          recorder_.varying_ordinals(active_->plan().signature.allocations);
      if (varying != nullptr) active_->set_varying(*varying);
    }
    active_->last_used = ++stamp_;
    active_->restart_windows();
  }
  cursor_ = 0;
  missed_at_ = SIZE_MAX;
  skipped_.fill(SIZE_MAX);
  allocs_in_iteration_ = 0;
  misses_in_iteration_ = 0;
  slots_taken_in_iteration_ = 0;
  missed_bytes_in_iteration_ = 0;
  taken_slot_bytes_in_iteration_ = 0;
  lend_any_ = false;
}

void Runtime::add_plan(ChunkPlan plan) {
  std::lock_guard lock(mutex_);
  std::string why;
  auto installed = InstalledPlan::install(std::move(plan), driver_, pool_, sync_, mapping_room(),
                                          &why);
  if (!installed) throw UsageError("cannot install the plan: " + why);
  // A plan the caller gives (a saved one) is meant to be followed: mapped now.
  if (installed->deferred() && !installed->map_deferred()) {
    throw UsageError("cannot install the plan: mapping its " +
                     std::to_string(installed->view_count()) +
                     " views failed (live mappings limit?)");
  }
  cache_.insert(std::move(installed), ++stamp_, active_);
  ++stats_.plan_installs;
  memory_.trim();
  if (active_ == nullptr && allocs_in_iteration_ == 0) choose_plan();
}

void Runtime::wait_for_planning() {
  std::lock_guard lock(mutex_);
  // Between iterations no plan is followed until choose_plan (end_iteration).
  if (allocs_in_iteration_ == 0) active_ = nullptr;
  // A plan that cannot be mapped is planned again another way: wait for that one too.
  while (cache_.pending() > 0) {
    cache_.wait();
    install_finished();
  }
  if (allocs_in_iteration_ == 0) choose_plan();
}

RuntimeStats Runtime::stats() const {
  std::lock_guard lock(mutex_);
  RuntimeStats s = stats_;
  s.reserved_bytes = memory_.reserved_bytes();
  s.peak_reserved_bytes = memory_.peak_reserved_bytes();
  s.cached_bytes = memory_.cached_bytes();
  s.pool_bytes = pool_.size() * granularity_;
  s.lent_bytes = lender_.lent() * granularity_;
  for (const auto& arena : packed_) {
    if (arena) s.packed_bytes += arena->live_bytes();
  }
  s.dedicated_bytes = dedicated_.live_bytes();
  s.dedicated_behind_gpu = dedicated_.served_behind_gpu();
  s.plans_installed = cache_.installed().size();
  for (const auto& p : cache_.installed()) s.plans_unmapped += p->unmapped() ? 1 : 0;
  s.plans_pending = cache_.pending();
  s.plans_retiring = cache_.retiring();
  s.stream_waits = sync_.waits();
  s.stream_waits_on_marks = sync_.waits_on_free_marks();
  s.driver = driver_.counters();
  return s;
}

void Runtime::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  memory_.reset_peak();
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void Runtime::save_trace(const std::string& path) const {
  std::lock_guard lock(mutex_);
  const bool current_kept = config_.record_trace ||
                            recorder_.iteration() <= profile_base_ + config_.profile_iterations;
  write_trace(recorder_.retained_trace(driver_.device(), current_kept), path);
}

std::string Runtime::snapshot_pickle() const {
  std::lock_guard lock(mutex_);
  std::vector<SnapshotSegment> segments;
  // A plan's views share the pool's chunks: listing every view would count a chunk once per
  // view it appears in (100k views at G = 2 MiB). Only views holding live tensors are listed;
  // idle pool chunks appear in no segment (stats() has the pool's size).
  for (const auto& plan : cache_.installed()) {
    for (const InstalledPlan::ViewInfo& view : plan->views()) {
      const bool live = std::any_of(view.slots.begin(), view.slots.end(),
                                    [&](std::uint32_t k) { return plan->slot(k).live; });
      if (!live) continue;
      SnapshotSegment seg;
      seg.address = view.base;
      seg.total_size = view.pages * granularity_;
      const std::uint32_t stream = plan->plan().slots[view.slots.front()].stream;
      seg.stream = stream < sync_.streams() ? sync_.handle_of(stream) : 0;
      for (std::uint32_t k : view.slots) {
        const SlotState& slot = plan->slot(k);
        if (!slot.live) continue;
        // A Dynamic slot's tensor takes as much of its view as it asked for.
        const PlannedSlot& planned = plan->plan().slots[k];
        const std::uint64_t bytes =
            planned.kind == SlotKind::Dynamic ? slot.tenant_size : planned.size;
        seg.blocks.push_back({plan->address(k), bytes, slot.tenant_size, true});
      }
      segments.push_back(std::move(seg));
    }
  }
  for (std::size_t index = 0; index < packed_.size(); ++index) {
    if (!packed_[index]) continue;
    const auto stream = static_cast<std::uint32_t>(index / kArenaKinds);
    for (const PackedArena::Run& run : packed_[index]->runs()) {
      SnapshotSegment seg;
      seg.address = run.base;
      seg.total_size = run.bytes;
      seg.stream = stream < sync_.streams() ? sync_.handle_of(stream) : 0;
      seg.small = index % kArenaKinds == kSmallArena;
      for (const PackedArena::Block& b : run.blocks) {
        seg.blocks.push_back({b.address, b.bytes, b.size, true});
      }
      segments.push_back(std::move(seg));
    }
  }
  std::vector<SnapshotAction> actions;
  for (const auto& r : recorder_.all_requests()) {
    actions.push_back({r.event.kind == EventKind::Alloc, r.address, r.event.size,
                       static_cast<std::uint64_t>(r.event.stream < sync_.streams()
                                                      ? sync_.handle_of(r.event.stream)
                                                      : 0),
                       r.event.time_ns < 0 ? 0 : r.event.time_ns / 1000});
  }
  return memory_snapshot_pickle(driver_.device(), segments, actions);
}

void Runtime::save_snapshot(const std::string& path) const {
  const std::string bytes = snapshot_pickle();
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UsageError("cannot write " + path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace stalloc
