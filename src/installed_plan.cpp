#include "src/installed_plan.h"

#include <algorithm>
#include <unordered_map>

#include "src/pool_runs.h"

namespace stalloc {
namespace {

std::string check_plan(const ChunkPlan& plan, std::uint64_t granularity) {
  if (plan.granularity != granularity) {
    return "plan granularity " + std::to_string(plan.granularity) +
           " differs from the runtime's " + std::to_string(granularity);
  }
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    const PlannedSlot& s = plan.slots[i];
    const std::string where = "plan slot " + std::to_string(i) + ": ";
    if (i > 0 && s.ordinal <= plan.slots[i - 1].ordinal) {
      return where + "ordinal " + std::to_string(s.ordinal) + " out of order";
    }
    for (const auto* chunks : {&s.chunks, &s.budget_chunks}) {
      for (std::uint32_t c : *chunks) {
        if (c >= plan.num_chunks) return where + "chunk " + std::to_string(c) + " outside the pool";
      }
    }
    if (s.kind == SlotKind::Dynamic) {
      if (!s.chunks.empty()) return where + "a dynamic slot with planned chunks";
      continue;
    }
    if (s.offset >= granularity) return where + "offset not below the granularity";
    if (s.size == 0) return where + "size 0";
    if (s.chunks.size() != (s.offset + s.size + granularity - 1) / granularity) {
      return where + "chunk count does not cover offset + size";
    }
  }
  return {};
}

// The pieces of bytes [offset, offset + size) of a range backed by `chunks`.
void append_pieces(std::span<const std::uint32_t> chunks, std::uint64_t offset,
                   std::uint64_t size, std::uint64_t g, std::vector<ChunkPiece>* out) {
  for (std::uint64_t j = offset / g; j * g < offset + size; ++j) {
    const std::uint64_t page_lo = j * g;
    const std::uint64_t lo = std::max(offset, page_lo) - page_lo;
    const std::uint64_t hi = std::min(offset + size, page_lo + g) - page_lo;
    out->push_back({chunks[j], static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi)});
  }
}

}  // namespace

InstalledPlan::InstalledPlan(ChunkPlan plan, vmm::Driver& driver, PlanPool& pool,
                             StreamSync& sync)
    : plan_(std::move(plan)),
      driver_(driver),
      pool_(pool),
      sync_(sync),
      granularity_(plan_.granularity) {}

std::unique_ptr<InstalledPlan> InstalledPlan::install(ChunkPlan plan, vmm::Driver& driver,
                                                      PlanPool& pool, StreamSync& sync,
                                                      Reclaimer& reclaimer,
                                                      std::string* why,
                                                      const PoolClaims& claims) {
  // The pool's granularity: the runtime's, which STALLOC_CONF may set to a multiple of the
  // driver's (its chunks are made that size, so mappings stay aligned).
  const std::uint64_t g = pool.granularity();
  if (std::size_t driver_g = 0; driver.granularity(&driver_g) != vmm::Status::Success ||
                                driver_g == 0 || g % driver_g != 0) {
    *why = "the pool's granularity " + std::to_string(g) +
           " is not a multiple of the driver's granularity";
    return nullptr;
  }
  if (std::string problem = check_plan(plan, g); !problem.empty()) {
    *why = problem;
    return nullptr;
  }
  std::unique_ptr<InstalledPlan> p(new InstalledPlan(std::move(plan), driver, pool, sync));
  const ChunkPlan& cp = p->plan_;
  p->slots_.resize(cp.slots.size());
  p->varies_.assign(cp.slots.size(), false);
  const std::uint64_t pages = p->lay_out_views();
  if (pool.has_runs()) p->relabel_onto_pool_runs(claims, reclaimer);
  std::vector<std::uint32_t> footprint_of(cp.slots.size(), UINT32_MAX);
  for (std::size_t i = 0; i < cp.slots.size(); ++i) {
    const PlannedSlot& s = cp.slots[i];
    if (s.chunks.empty()) continue;
    p->pieces_.clear();
    append_pieces(s.chunks, s.offset, s.size, g, &p->pieces_);
    footprint_of[i] = p->footprints_.add(p->pieces_, g);
  }
  // Views into the table, taken once it is complete (adding moves it).
  for (std::size_t i = 0; i < cp.slots.size(); ++i) {
    if (footprint_of[i] == UINT32_MAX) continue;
    p->slots_[i].footprint = p->footprints_.at(footprint_of[i]);
  }
  p->order_chunks_by_last_use();
  const std::vector<std::uint32_t> runs = pool.with_cached_chunks(p->new_pool_runs(claims));
  std::uint64_t mappings = 0;
  if (std::string split = p->count_mappings(runs, &mappings); !split.empty()) {
    *why = split;
    return nullptr;
  }
  if (cp.mode != PlanMode::Windowed) {
    if (const std::uint64_t max_mappings = reclaimer.mapping_room(mappings); mappings > max_mappings) {
      *why = "the " + std::string(plan_mode_name(cp.mode)) + " plan needs " +
             std::to_string(mappings) + " chunk mappings, " + std::to_string(max_mappings) +
             " are left within the live mappings limit";
      return nullptr;
    }
  }
  // The pool grows only for a plan that fits the mappings: the chunks of one refused here
  // stayed beside the online path (llama7b-tp4pp2vpp2 at the host's vm.max_map_count: 26 GiB
  // for nothing, 60.7% utilization).
  if (!pool.grow_to(cp.num_chunks, runs)) {
    *why = "cannot create the plan pool of " + std::to_string(cp.num_chunks) + " chunks";
    return nullptr;
  }
  p->bytes_ = pages * g;
  if (pages > 0) {
    vmm::Status st = driver.reserve(&p->base_, p->bytes_);
    if (st != vmm::Status::Success) {
      *why = "cannot reserve " + std::to_string(p->bytes_) + " bytes of address space: " +
             std::string(vmm::status_name(st));
      p->bytes_ = 0;
      return nullptr;
    }
  }
  // Alias and offset modes map no view here, but stage by stage once the plan is followed: a
  // plan installed and then never followed (its iteration's sizes all changed after, as in
  // llama7b-varlen, whose first plan is made before any activation was seen to vary) costs its
  // pool chunks only, where mapping it cost 63 k maps (est. 420 ms on an H200); one left in the
  // next iteration after a few slots maps the stages those slots reached.
  if (cp.mode != PlanMode::Windowed && pages > 0) p->lay_out_stages();
  for (std::size_t i = 0; i < p->slots_.size(); ++i) {
    if (p->slot_view_[i] != UINT32_MAX) p->slots_[i].range += p->base_;
  }
  return p;
}

void InstalledPlan::lay_out_stages() {
  const std::size_t slots = std::max<std::size_t>(slots_.size(), 1);
  for (View& v : views_) v.stage = kMappingStages;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slot_view_[i] == UINT32_MAX) continue;
    View& v = views_[slot_view_[i]];
    v.stage = std::min(v.stage, static_cast<std::uint32_t>(i * kMappingStages / slots));
  }
  // The pages move with their views: a slot keeps its page within its view.
  std::vector<std::uint64_t> moved(views_.size());
  std::vector<std::uint32_t> order(views_.size());
  for (std::uint32_t o = 0; o < views_.size(); ++o) order[o] = o;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return views_[a].stage < views_[b].stage; });
  stage_pages_.assign(kMappingStages, 0);
  std::uint64_t page = 0;
  for (std::uint32_t o : order) {
    moved[o] = page;
    page += views_[o].chunks.size();
    stage_pages_[views_[o].stage] = page;
  }
  for (std::uint32_t st = 1; st < kMappingStages; ++st) {
    stage_pages_[st] = std::max(stage_pages_[st], stage_pages_[st - 1]);
  }
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slot_view_[i] == UINT32_MAX) continue;
    const View& v = views_[slot_view_[i]];
    slots_[i].range = slots_[i].range - v.first_page * granularity_ + moved[slot_view_[i]] * granularity_;
  }
  for (std::uint32_t o = 0; o < views_.size(); ++o) views_[o].first_page = moved[o];
}

bool InstalledPlan::map_stages_through(std::uint32_t stage) {
  for (; mapped_stages_ <= stage && mapped_stages_ < stage_pages_.size(); ++mapped_stages_) {
    const std::uint32_t st = mapped_stages_;
    const std::uint64_t first = stage_first_page(st);
    const std::uint64_t pages = stage_pages_[st] - first;
    if (pages == 0) continue;
    bool ok = true;
    for (std::uint32_t v = 0; v < views_.size() && ok; ++v) {
      if (views_[v].stage == st) ok = map_view(v, false);
    }
    // The stage's views lie back to back, every page mapped: access is set on all of them in
    // one call, where one per view cost 22 us each (qwen-moe: 2,618 calls at install).
    ok = ok && driver_.set_access(base_ + first * granularity_, pages * granularity_,
                                  vmm::Access::ReadWrite) == vmm::Status::Success;
    if (!ok) {
      for (std::uint32_t v = 0; v < views_.size(); ++v) {
        if (views_[v].stage == st) unmap_view(v);
      }
      deferred_failed_ = true;
      return false;
    }
  }
  return true;
}

std::uint64_t InstalledPlan::lay_out_views() {
  const bool windowed = plan_.mode == PlanMode::Windowed;
  const std::uint64_t requests = std::max<std::uint64_t>(plan_.signature.requests, 1);
  const std::uint32_t windows = windowed ? std::max<std::uint32_t>(plan_.windows, 1) : 1;
  window_length_ = (requests + windows - 1) / windows;
  auto window_of = [&](std::uint64_t time) {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(time / window_length_, windows - 1));
  };
  std::vector<std::uint32_t> order;
  for (std::size_t i = 0; i < plan_.slots.size(); ++i) {
    if (!range_chunks(i).empty()) order.push_back(static_cast<std::uint32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return range_chunks(a).size() > range_chunks(b).size();
  });
  // Views by the chunks they hold: chunk -> (view, page in the view). Only the first few
  // candidates are tried; past them a slot gets a view of its own.
  constexpr std::size_t kCandidates = 256;
  std::unordered_map<std::uint32_t, std::vector<std::pair<std::uint32_t, std::uint32_t>>> holding;
  slot_view_.assign(plan_.slots.size(), UINT32_MAX);
  std::uint64_t pages = 0;
  // An offset plan lays every slot out as consecutive chunks of one pool: the pool's chunks in
  // order are the one view they all share, each chunk mapped once. Only those a slot uses: a
  // plan relocated around held chunks (chunk_relocation.h) skips them. An alias plan gives most
  // slots one run of consecutive chunks (chunk_colouring.h): they share that view too, where
  // their chunks outnumber the pool's.
  if (plan_.mode != PlanMode::Windowed && plan_.num_chunks > 0) {
    std::vector<bool> used(plan_.num_chunks, false);
    std::uint64_t used_count = 0;
    std::uint64_t in_runs = 0;
    for (std::size_t i = 0; i < plan_.slots.size(); ++i) {
      const std::vector<std::uint32_t>& chunks = range_chunks(i);
      for (std::uint32_t c : chunks) {
        used_count += used[c] ? 0 : 1;
        used[c] = true;
      }
      if (one_ascending_run(chunks)) in_runs += chunks.size();
    }
    if (plan_.mode == PlanMode::Offset || in_runs > used_count) {
      View pool;
      for (std::uint32_t c = 0; c < plan_.num_chunks; ++c) {
        if (!used[c]) continue;
        holding[c].emplace_back(0, static_cast<std::uint32_t>(pool.chunks.size()));
        pool.chunks.push_back(c);
      }
      pool.first_window = 0;
      pool.last_window = 0;
      pages = pool.chunks.size();
      views_.push_back(std::move(pool));
    }
  }
  for (std::uint32_t i : order) {
    const PlannedSlot& slot = plan_.slots[i];
    const std::vector<std::uint32_t>& chunks = range_chunks(i);
    // A slot carried into the next iteration is used in its first windows too.
    const bool carried = slot.end > requests;
    const std::uint32_t first = carried ? 0 : window_of(slot.start);
    const std::uint32_t last = carried ? windows - 1 : window_of(std::max(slot.end, slot.start + 1) - 1);
    std::uint32_t view = UINT32_MAX;
    std::uint32_t at = 0;
    const auto& candidates = holding[chunks.front()];
    for (std::size_t c = 0; c < std::min(candidates.size(), kCandidates); ++c) {
      const auto [v, page] = candidates[c];
      const View& held = views_[v];
      // Windowed: sharing must not stretch a view's windows over a gap.
      if (windowed && (first > held.last_window + 1 || held.first_window > last + 1)) continue;
      if (page + chunks.size() <= held.chunks.size() &&
          std::equal(chunks.begin(), chunks.end(), held.chunks.begin() + page)) {
        view = v;
        at = page;
        break;
      }
    }
    if (view == UINT32_MAX) {
      view = static_cast<std::uint32_t>(views_.size());
      View fresh;
      fresh.first_page = pages;
      fresh.chunks = chunks;
      views_.push_back(std::move(fresh));
      for (std::size_t j = 0; j < chunks.size(); ++j) {
        holding[chunks[j]].emplace_back(view, static_cast<std::uint32_t>(j));
      }
      pages += chunks.size();
    }
    View& v = views_[view];
    v.first_window = std::min(v.first_window, first);
    v.last_window = std::max(v.last_window, last);
    slots_[i].range = (v.first_page + at) * granularity_;
    slot_view_[i] = view;
  }
  view_live_.assign(views_.size(), 0);
  view_used_by_.assign(views_.size(), 0);
  if (windowed) {
    starting_in_window_.resize(windows);
    for (std::size_t v = 0; v < views_.size(); ++v) {
      starting_in_window_[views_[v].first_window].push_back(static_cast<std::uint32_t>(v));
    }
  }
  return pages;
}

void InstalledPlan::order_chunks_by_last_use() {
  std::vector<std::uint32_t> last(plan_.num_chunks, 0);
  std::vector<bool> used(plan_.num_chunks, false);
  for (std::size_t i = 0; i < plan_.slots.size(); ++i) {
    const PlannedSlot& s = plan_.slots[i];
    for (const auto* chunks : {&s.chunks, &s.budget_chunks}) {
      for (std::uint32_t c : *chunks) {
        last[c] = static_cast<std::uint32_t>(i);
        used[c] = true;
      }
    }
  }
  by_last_use_.resize(plan_.num_chunks);
  for (std::uint32_t c = 0; c < plan_.num_chunks; ++c) by_last_use_[c] = c;
  // A chunk no slot uses is done from the start.
  auto key = [&](std::uint32_t c) { return used[c] ? std::uint64_t{last[c]} + 1 : 0; };
  std::stable_sort(by_last_use_.begin(), by_last_use_.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
  last_use_sorted_.resize(plan_.num_chunks);
  for (std::size_t k = 0; k < by_last_use_.size(); ++k) {
    last_use_sorted_[k] = static_cast<std::uint32_t>(key(by_last_use_[k]));
  }
}

std::span<const std::uint32_t> InstalledPlan::chunks_done_before(std::size_t cursor) const {
  // key = last slot + 1 (0: unused); done when key <= cursor.
  const auto end = std::upper_bound(last_use_sorted_.begin(), last_use_sorted_.end(),
                                    static_cast<std::uint32_t>(std::min<std::size_t>(cursor, UINT32_MAX)));
  return {by_last_use_.data(), static_cast<std::size_t>(end - last_use_sorted_.begin())};
}

std::vector<InstalledPlan::ViewInfo> InstalledPlan::views() const {
  std::vector<ViewInfo> out;
  out.reserve(views_.size());
  for (const View& v : views_) {
    out.push_back({base_ + v.first_page * granularity_, v.chunks.size(), {}});
  }
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slot_view_[i] != UINT32_MAX) out[slot_view_[i]].slots.push_back(static_cast<std::uint32_t>(i));
  }
  return out;
}

void InstalledPlan::retire() {
  StreamMask users = 0;
  for (StreamMask used_by : view_used_by_) users |= used_by;
  // A driver that refuses the event leaves nothing to wait for: the views go at once, as they
  // did before plans were retired.
  if (users != 0 && !sync_.record(users, &retire_after_)) sync_.discard(&retire_after_);
}

bool InstalledPlan::gpu_done() { return sync_.completed(&retire_after_); }

InstalledPlan::~InstalledPlan() {
  sync_.discard(&retire_after_);
  for (std::uint32_t o = 0; o < views_.size(); ++o) {
    sync_.discard(&views_[o].unmap_after);
    if (views_[o].mapped > 0) unmap_view(o);
  }
  if (bytes_ > 0) driver_.free_reservation(base_, bytes_);
}


const std::vector<std::uint32_t>& InstalledPlan::views_of(std::uint32_t chunk) {
  if (views_of_chunk_.empty()) {
    views_of_chunk_.resize(plan_.num_chunks);
    for (std::uint32_t o = 0; o < views_.size(); ++o) {
      for (std::uint32_t c : views_[o].chunks) {
        std::vector<std::uint32_t>& of = views_of_chunk_[c];
        if (of.empty() || of.back() != o) of.push_back(o);
      }
    }
  }
  static const std::vector<std::uint32_t> kNone;
  return chunk < views_of_chunk_.size() ? views_of_chunk_[chunk] : kNone;
}

bool InstalledPlan::maps(std::uint32_t chunk) {
  const std::vector<std::uint32_t>& of = views_of(chunk);
  return std::any_of(of.begin(), of.end(), [&](std::uint32_t o) { return views_[o].mapped > 0; });
}

bool InstalledPlan::map_view(std::uint32_t view, bool set_access) {
  View& v = views_[view];
  const vmm::DevicePtr base = base_ + v.first_page * granularity_;
  // The pool's runs as they are now: a later plan may have split one (PlanPool::split_run).
  while (v.mapped < v.chunks.size()) {
    const std::uint32_t head = v.chunks[v.mapped];
    const std::uint32_t length = pool_.run_length(pool_.run_head(head));
    // Never part of a run: it would map other bytes than the plan names.
    const bool whole = pool_.run_head(head) == head && holds_run(v.chunks, v.mapped, head, length);
    if (!whole || driver_.map(base + v.mapped * granularity_, length * granularity_, 0,
                    pool_.handle(head)) != vmm::Status::Success) {
      break;
    }
    v.runs.push_back(length);
    v.mapped += length;
    ++live_mappings_;
  }
  if (v.mapped == v.chunks.size() &&
      (!set_access || driver_.set_access(base, v.chunks.size() * granularity_,
                                         vmm::Access::ReadWrite) == vmm::Status::Success)) {
    return true;
  }
  unmap_view(view);
  return false;
}

void InstalledPlan::unmap_view(std::uint32_t view) {
  View& v = views_[view];
  const vmm::DevicePtr base = base_ + v.first_page * granularity_;
  std::size_t page = 0;
  for (std::uint32_t entry : v.runs) {
    const std::uint32_t length = entry & ~kHole;
    if ((entry & kHole) == 0) {
      driver_.unmap(base + page * granularity_, length * granularity_);
      --live_mappings_;
    }
    page += length;
  }
  v.runs.clear();
  v.mapped = 0;
  view_used_by_[view] = 0;
}

std::uint64_t InstalledPlan::dynamic_starts(std::size_t index, std::uint64_t size) const {
  // Its own budget only: a view it shares may go on past it, onto chunks the plan does not
  // leave idle over its lifetime.
  const std::uint64_t pages = range_chunks(index).size();
  const std::uint64_t needed = (plan_.slots[index].offset + size + granularity_ - 1) / granularity_;
  if (slot_view_[index] == UINT32_MAX || size == 0 || needed > pages) return 0;
  return pages - needed + 1;
}

void InstalledPlan::fit_dynamic(std::size_t index, std::uint64_t size, std::uint64_t start) {
  SlotState& slot = slots_[index];
  slot.shift = start * granularity_;
  pieces_.clear();
  append_pieces(range_chunks(index), plan_.slots[index].offset + slot.shift, size, granularity_,
                &pieces_);
  FootprintTable& table = dynamic_footprints_[index];
  table.clear();
  slot.footprint = table.at(table.add(pieces_, granularity_));
}

void InstalledPlan::set_varying(const std::vector<bool>& by_ordinal) {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const std::uint64_t ordinal = plan_.slots[i].ordinal;
    varies_[i] = ordinal < by_ordinal.size() && by_ordinal[ordinal];
  }
}

void InstalledPlan::on_occupied(std::size_t index) {
  ++view_live_[slot_view_[index]];
  ++live_slots_;
}

void InstalledPlan::on_vacated(std::size_t index) {
  const std::uint32_t view = slot_view_[index];
  --view_live_[view];
  --live_slots_;
  view_used_by_[view] |= slots_[index].used_by;
}

bool InstalledPlan::ensure_mapped(std::size_t index, bool followed) {
  const bool windowed = plan_.mode == PlanMode::Windowed;
  const std::uint32_t o = slot_view_[index];
  if (o == UINT32_MAX) return true;  // nothing to map
  View& v = views_[o];
  if (!windowed && v.stage >= mapped_stages_ && deferred()) {
    // One try per iteration: a driver short of mappings would refuse every slot's try alike.
    if (deferred_failed_ || (!followed && mapped_stages_ > 0)) return false;
    if (!map_stages_through(v.stage)) return false;
  }
  if (!windowed && !shed_) return true;  // mapped with its stage
  cancel_unmap(o);
  if (v.mapped == v.chunks.size()) return true;
  if (!map_view(o)) return false;
  if (windowed) mapped_views_.push_back(o);
  return true;
}

std::uint64_t InstalledPlan::shed_idle_views(std::uint64_t wanted) {
  const std::uint64_t before = live_mappings_;
  unmap_completed();
  // Windowed: its windows unmap what they do not need.
  if (plan_.mode == PlanMode::Windowed) return before - live_mappings_;
  for (std::uint32_t o = 0; o < views_.size() && before - live_mappings_ < wanted; ++o) {
    const View& v = views_[o];
    if (v.mapped == 0 || view_live_[o] > 0 || !v.unmap_after.empty()) continue;
    shed_view(o);
  }
  return before - live_mappings_;
}


void InstalledPlan::shed_view(std::uint32_t view) {
  View& v = views_[view];
  shed_ = true;
  retire_view(view);
  // Its events may be done already (the GPU idle): then it goes now and counts.
  if (!v.unmap_after.empty() && sync_.completed(&v.unmap_after)) {
    retiring_.pop_back();
    unmap_view(view);
  }
}

void InstalledPlan::cancel_unmap(std::uint32_t view) {
  View& v = views_[view];
  if (v.unmap_after.empty()) return;
  sync_.discard(&v.unmap_after);
  retiring_.erase(std::find(retiring_.begin(), retiring_.end(), view));
}

void InstalledPlan::restart_windows() {
  deferred_failed_ = false;
  if (plan_.mode != PlanMode::Windowed) return;
  window_ = 0;
  enter_window(0);
}

void InstalledPlan::advance_to(std::uint64_t time) {
  if (plan_.mode != PlanMode::Windowed) return;
  const auto w = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(time / window_length_, starting_in_window_.size() - 1));
  while (window_ < w) enter_window(++window_);
}

void InstalledPlan::enter_window(std::uint32_t window) {
  // Map eagerly: a failure here is not fatal, ensure_mapped retries when a slot is handed out.
  for (std::uint32_t o : starting_in_window_[window]) {
    cancel_unmap(o);
    if (views_[o].mapped == 0 && map_view(o)) mapped_views_.push_back(o);
  }
  // Retire what this window no longer needs: an event on each stream that used the view says
  // when the GPU is done with it; a view nobody used since it was mapped can go at once.
  std::size_t kept = 0;
  for (std::uint32_t o : mapped_views_) {
    View& v = views_[o];
    const bool needed = view_live_[o] > 0 || (v.first_window <= window && window <= v.last_window);
    if (!needed && v.unmap_after.empty()) {
      retire_view(o);
      if (v.mapped == 0) continue;
    }
    mapped_views_[kept++] = o;
  }
  mapped_views_.resize(kept);
  unmap_completed();
}

void InstalledPlan::retire_view(std::uint32_t view) {
  View& v = views_[view];
  if (view_used_by_[view] == 0) {
    unmap_view(view);
  } else if (sync_.record(view_used_by_[view], &v.unmap_after)) {
    retiring_.push_back(view);
  } else {
    sync_.discard(&v.unmap_after);  // no event, no proof the GPU is done: it stays mapped
  }
}

std::uint64_t InstalledPlan::unmap_completed() {
  const std::uint64_t before = live_mappings_;
  std::size_t waiting = 0;
  for (std::uint32_t o : retiring_) {
    if (sync_.completed(&views_[o].unmap_after)) {
      unmap_view(o);
      if (plan_.mode == PlanMode::Windowed) {
        mapped_views_.erase(std::find(mapped_views_.begin(), mapped_views_.end(), o));
      }
    } else {
      retiring_[waiting++] = o;
    }
  }
  retiring_.resize(waiting);
  return before - live_mappings_;
}

}  // namespace stalloc
