// An allocator model replays a trace's requests and accounts for the memory an allocator policy
// would reserve. The simulator drives every model the same way, and one conformance suite
// (tests/sim/allocator_model_conformance_test.cpp) runs against all of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trace/trace.h"
#include "vmm/driver_cost.h"

namespace stalloc {

struct ModelOptions {
  std::uint64_t capacity = 0;        // device memory; 0 = unlimited
  std::uint64_t granularity = 2ull << 20;
  std::string pytorch_conf;          // PYTORCH_CUDA_ALLOC_CONF-style string for the pytorch models
  std::uint64_t stitch_threshold = 512ull << 20;  // gmlake: smallest request it stitches
  std::string stalloc_conf;          // STALLOC_CONF for the runtime's rows ("stalloc", ...)
  // The runtime's rows: its events complete only after this many queries, as on a GPU running
  // behind the host (vmm/host_driver.h, HostLag); 0: at once. The PyTorch models reuse memory
  // in stream order and wait for nothing, so lag changes nothing there.
  std::uint32_t gpu_lag = 0;
};

class AllocatorModel {
 public:
  virtual ~AllocatorModel() = default;
  virtual std::string_view name() const = 0;

  // Serves an Alloc event. Returns false when the policy runs out of memory under the capacity
  // (after whatever retry the policy does). *address is where the tensor lives in the model's
  // address space: no two live allocations overlap there.
  virtual bool allocate(const Event& e, std::uint64_t* address) = 0;
  // Serves a Free event of an allocation this model served.
  virtual void deallocate(const Event& e) = 0;

  // The trace's iteration `iteration` is over (the simulator calls it before the first event of
  // the next one, and after the last event). Policies that plan per iteration act here.
  virtual void end_iteration(std::uint32_t /*iteration*/) {}

  // Device memory the policy holds now (segments, chunks, pools).
  virtual std::uint64_t reserved_bytes() const = 0;
  // Driver calls made so far, per kind (cudaMalloc / cudaFree / device synchronisations for the
  // caching allocators, VMM and event calls for the others), costed alike by vmm::CostTable.
  virtual vmm::CallTally driver_calls() const = 0;
};

// Creates a model by name ("pytorch", "pytorch-expandable", "gmlake", "stalloc-paper",
// "stalloc", "stalloc-windowed"). Models that plan receive the whole trace up front.
// Throws UsageError for an unknown name, listing the known ones.
std::unique_ptr<AllocatorModel> make_allocator_model(std::string_view name, const Trace& trace,
                                                     const ModelOptions& options);
std::vector<std::string> allocator_model_names();

}  // namespace stalloc
