#include "sim/runtime_model.h"

#include <unordered_map>

#include "src/runtime.h"
#include "src/runtime_config.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

vmm::HostDriverOptions unbacked(std::uint64_t granularity, std::uint32_t gpu_lag) {
  vmm::HostDriverOptions options;
  options.granularity = granularity;
  options.backed = false;
  options.lag.queries = gpu_lag;
  return options;
}

class RuntimeModel final : public AllocatorModel {
 public:
  RuntimeModel(std::string_view name, const RuntimeConfig& config, std::uint64_t granularity,
               std::uint32_t gpu_lag)
      : name_(name),
        driver_(vmm::make_host_driver(unbacked(granularity, gpu_lag))),
        runtime_(config, *driver_) {}

  std::string_view name() const override { return name_; }

  bool allocate(const Event& e, std::uint64_t* address) override {
    void* p = runtime_.malloc(e.size, 0, static_cast<vmm::StreamHandle>(e.stream));
    if (p == nullptr) return false;
    live_.emplace(e.id, p);
    *address = reinterpret_cast<std::uint64_t>(p);
    return true;
  }

  void deallocate(const Event& e) override {
    auto it = live_.find(e.id);
    if (it == live_.end()) return;
    runtime_.free(it->second, e.size, 0, static_cast<vmm::StreamHandle>(e.stream));
    live_.erase(it);
  }

  // An iteration boundary as a training loop makes it: step(), and (as `stalloc replay` does)
  // waiting for the background planner, so that a plan is installed at the same boundary on
  // every run.
  void end_iteration(std::uint32_t) override {
    runtime_.step();
    runtime_.wait_for_planning();
  }

  std::uint64_t reserved_bytes() const override { return driver_->counters().chunk_bytes; }
  vmm::CallTally driver_calls() const override { return vmm::tally(driver_->counters()); }

 private:
  std::string name_;
  std::unique_ptr<vmm::Driver> driver_;
  Runtime runtime_;
  std::unordered_map<std::uint64_t, void*> live_;
};

}  // namespace

std::unique_ptr<AllocatorModel> make_runtime_model(std::string_view name, const std::string& conf,
                                                   const ModelOptions& options,
                                                   std::string_view forced) {
  RuntimeConfig config = parse_runtime_config(forced, parse_runtime_config(conf));
  // The trace's iterations are the boundaries, step() at each, as `stalloc replay` does; the
  // runtime's own detection runs only when asked for.
  if (conf.find("auto_step") == std::string::npos) config.auto_step = false;
  if (config.granularity == 0) config.granularity = options.granularity;
  if (config.capacity == 0) config.capacity = options.capacity;
  return std::make_unique<RuntimeModel>(name, config, options.granularity, options.gpu_lag);
}

}  // namespace stalloc
