#include "src/runtime_stats.h"

#include <ostream>

#include "common/json.h"

namespace stalloc {

void RequestStats::add(std::uint64_t size, int sign) {
  for (RequestPool pool : {kAllRequests, size <= kSmallRequestBytes ? kSmallRequests : kLargeRequests}) {
    if (sign > 0) {
      count[pool].increase(1);
      bytes[pool].increase(size);
    } else {
      count[pool].decrease(1);
      bytes[pool].decrease(size);
    }
  }
}

void write_stats_json(const RuntimeStats& s, std::ostream& out) {
  JsonWriter j(out);
  j.begin_object();
  j.field("allocated_bytes", s.allocated_bytes).field("peak_allocated_bytes", s.peak_allocated_bytes);
  j.field("reserved_bytes", s.reserved_bytes).field("peak_reserved_bytes", s.peak_reserved_bytes);
  j.field("cached_bytes", s.cached_bytes).field("pool_bytes", s.pool_bytes);
  j.field("lent_bytes", s.lent_bytes);
  j.field("packed_bytes", s.packed_bytes);
  j.field("dedicated_bytes", s.dedicated_bytes);
  j.field("allocations", s.allocations).field("frees", s.frees);
  j.field("matches", s.matches).field("misses", s.misses).field("conflicts", s.conflicts);
  j.field("unplanned", s.unplanned).field("iterations", s.iterations);
  j.field("auto_steps", s.auto_steps).field("plan_installs", s.plan_installs);
  j.field("plan_failures", s.plan_failures).field("plans_installed", s.plans_installed);
  j.field("plans_pending", s.plans_pending).field("plans_retiring", s.plans_retiring);
  j.field("plans_declined", s.plans_declined).field("plans_deferred", s.plans_deferred);
  j.field("plans_unmapped", s.plans_unmapped);
  j.field("install_waits", s.install_waits).field("dedicated_behind_gpu", s.dedicated_behind_gpu);
  j.field("runs_split", s.runs_split).field("split_waits", s.split_waits);
  j.field("stream_waits", s.stream_waits).field("stream_waits_on_marks", s.stream_waits_on_marks);
  j.field("capture_refusals", s.capture_refusals)
      .field("capture_deferred_frees", s.capture_deferred_frees);
  j.field("invalid_frees", s.invalid_frees).field("vmm_calls", s.vmm_calls());
  j.field("live_mappings", s.driver.live_mappings).field("ooms", s.ooms);
  j.field("alloc_retries", s.alloc_retries);
  j.key("last_oom").begin_object();
  j.field("requested_bytes", s.last_oom.requested_bytes);
  j.field("reserved_bytes", s.last_oom.reserved_bytes);
  j.field("capacity_bytes", s.last_oom.capacity_bytes);
  j.field("reason", s.last_oom.reason);
  j.field("beyond_capacity", s.last_oom.beyond_capacity);
  j.field("retries", s.last_oom.retries).field("waited_seconds", s.last_oom.waited_seconds);
  j.end_object();
  j.field("last_plan_error", s.last_plan_error);
  j.field("last_plan_declined", s.last_plan_declined);
  j.end_object();
}

}  // namespace stalloc
