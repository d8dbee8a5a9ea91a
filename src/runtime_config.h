// STALLOC_CONF: the runtime allocator's settings, as one "key:value,key:value" string (the same
// shape as PYTORCH_CUDA_ALLOC_CONF). Every key is documented in docs/runtime.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "planner/chunk/chunk_plan.h"
#include "src/runtime_policy.h"

namespace stalloc {

// A bad STALLOC_CONF: names the key and what it accepts.
class ConfigError : public UsageError {
 public:
  using UsageError::UsageError;
};

// How the plan treats an ordinal whose size changes between iterations of the same structure
// (MoE routing, variable sequence lengths).
enum class VaryingSizes : std::uint8_t {
  Off,      // plan the sizes of the planned iteration only; a larger request later is a miss
  Dynamic,  // such ordinals become Dynamic slots, packed on pool chunks idle at the time
  Largest,  // such ordinals are planned at the largest size seen; smaller requests fit in them
  Auto,     // Largest where the sizes vary together (Recorder::iteration_trace), else Dynamic
};

struct RuntimeConfig {
  std::string backend = "auto";            // host | cuda | auto
  // auto | alias | offset | windowed. auto: alias, or the offset plan of the same iteration
  // where it needs no more chunks (each chunk mapped once instead of once per view).
  PlanMode mode = PlanMode::Alias;
  bool mode_auto = true;
  std::uint32_t profile_iterations = 1;    // iterations after warm-up before the first plan
  std::uint64_t granularity = 0;           // 0: the driver's granularity
  std::uint64_t small_size = 1 << 20;      // unplanned requests up to this go to the small packed arena
  // Unplanned requests of at least this many bytes get a dedicated range (one chunk of their
  // size) while no plan is followed; 0: never. 16 MiB rather than 32: one create and one map
  // where pages of 2 MiB took eight or more, at no loss above 0.04 points on the presets and
  // real snapshots (docs/decisions.md, "Dedicated ranges (large_size 16 MiB)").
  std::uint64_t large_size = std::uint64_t{16} << 20;
  // Page size of the packed arena that serves requests above small_size before the first plan
  // is installed (profiling, workloads never planned), rounded down to a multiple of the
  // granularity; 0 (or up to twice the granularity) keeps pages of the granularity.
  std::uint64_t online_page = 0;
  // The largest chunk a packed arena makes for a run of fresh pages an allocation needs, while
  // memory grows past its high water (packed_arena.h, extents; at most 1/256 of the memory
  // held); 0 (or up to the granularity): a chunk per page. 12 MiB: docs/runtime.md, "Extents".
  std::uint64_t extent_size = std::uint64_t{12} << 20;
  std::uint64_t capacity = 0;              // bytes of physical memory; 0: unlimited
  std::uint64_t max_mappings = 0;          // live chunk mappings allowed; 0: the driver's limit
  bool auto_step = true;                   // detect iteration boundaries when step() is never called
  std::uint32_t plan_cache_size = 8;       // installed plans kept (one per iteration signature)
  bool record_trace = false;               // keep every iteration's requests, not only the profiled
  std::uint32_t windows = 8;               // windowed mode: mapping windows per iteration
  std::uint32_t lookahead = 16;            // slots the matcher looks ahead on a mismatch
  bool pool_runs = true;                   // plan pool chunks held together share a handle
  VaryingSizes varying_sizes = VaryingSizes::Dynamic;
  // Also give every device that can reach this one's memory access to its mappings (cuMem
  // mappings are not covered by cudaDeviceEnablePeerAccess): for kernels of other GPUs of the
  // process reading stalloc's memory. Off: the owning device only, one access descriptor.
  bool peer_access = false;
  std::string log;                         // file for install/plan/OOM events; empty: none
  // How long a request that the failure path could not serve waits for other threads to free
  // memory (PyTorch's autograd threads), served again after each free; 0: not at all. Not a
  // STALLOC_CONF key: the PyTorch extension sets it (stalloc.set_oom_wait).
  double oom_wait_seconds = 0;
  // Thresholds of the serving paths (not a STALLOC_CONF key: the simulator and tests set it).
  RuntimePolicy policy;
};

// Parses a STALLOC_CONF string over `base` (the defaults unless given): its keys replace base's.
// An empty string gives base. Throws ConfigError for an unknown key, a bad value or a key given
// twice.
RuntimeConfig parse_runtime_config(std::string_view text, RuntimeConfig base = {});

// The configuration back in STALLOC_CONF form (every key), for logs and reports.
std::string format_runtime_config(const RuntimeConfig& config);

}  // namespace stalloc
