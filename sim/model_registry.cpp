// The allocator models by name: the simulator, the CLI and the conformance suite enumerate them
// here, so a new model is one line.
#include <functional>
#include <utility>

#include "common/error.h"
#include "sim/allocator_model.h"
#include "sim/gmlake_model.h"
#include "sim/pytorch_alloc_conf.h"
#include "sim/pytorch_caching_model.h"
#include "sim/runtime_model.h"
#include "sim/stalloc_model.h"

namespace stalloc {

namespace {

using Factory = std::function<std::unique_ptr<AllocatorModel>(const Trace&, const ModelOptions&)>;

const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> all = {
      {"pytorch",
       [](const Trace&, const ModelOptions& o) {
         return std::make_unique<PytorchCachingModel>("pytorch", parse_pytorch_alloc_conf(o.pytorch_conf), o.capacity);
       }},
      {"pytorch-expandable",
       [](const Trace&, const ModelOptions& o) {
         PytorchAllocConf conf = parse_pytorch_alloc_conf(o.pytorch_conf);
         conf.expandable_segments = true;
         return std::make_unique<PytorchCachingModel>("pytorch-expandable", conf, o.capacity);
       }},
      {"gmlake",
       [](const Trace&, const ModelOptions& o) {
         PytorchAllocConf conf = parse_pytorch_alloc_conf(o.pytorch_conf);
         conf.expandable_segments = false;
         return std::make_unique<GmlakeModel>(conf, o.capacity, o.granularity, o.stitch_threshold);
       }},
      {"stalloc-paper", [](const Trace& t, const ModelOptions& o) { return make_stalloc_paper_model(t, o); }},
      {"stalloc", [](const Trace&, const ModelOptions& o) { return make_runtime_model("stalloc", o.stalloc_conf, o); }},
      {"stalloc-windowed",
       [](const Trace&, const ModelOptions& o) {
         return make_runtime_model("stalloc-windowed", o.stalloc_conf, o, "mode:windowed");
       }},
  };
  return all;
}

}  // namespace

std::unique_ptr<AllocatorModel> make_allocator_model(std::string_view name, const Trace& trace,
                                                     const ModelOptions& options) {
  for (const auto& [known, factory] : factories()) {
    if (known == name) return factory(trace, options);
  }
  std::string list;
  for (const auto& [known, factory] : factories()) list += (list.empty() ? "" : ", ") + known;
  throw UsageError("unknown allocator model '" + std::string(name) + "' (known: " + list + ")");
}

std::vector<std::string> allocator_model_names() {
  std::vector<std::string> names;
  for (const auto& [known, factory] : factories()) names.push_back(known);
  return names;
}

}  // namespace stalloc
