// The parts of a Runtime that its reclaimer and its plan lifecycle both act on, named once so
// that the two are built from the same list. The Runtime owns every part; these are references
// to them, bound while the Runtime is being constructed (before some of the parts are).
#pragma once

#include <cstdint>

#include "src/physical_memory.h"
#include "src/plan_cache.h"
#include "src/plan_follower.h"
#include "src/plan_pool.h"
#include "src/runtime_config.h"
#include "src/runtime_log.h"
#include "src/runtime_stats.h"
#include "src/stream_sync.h"
#include "src/unplanned_server.h"
#include "vmm/driver.h"

namespace stalloc {

struct RuntimeParts {
  const RuntimeConfig& config;
  std::uint64_t granularity;
  vmm::Driver& driver;
  PhysicalMemory& memory;
  PlanPool& pool;
  StreamSync& sync;
  PlanCache& cache;
  PlanFollower& follower;
  UnplannedServer& unplanned;
  RuntimeStats& stats;
  const RuntimeLog& log;
};

}  // namespace stalloc
