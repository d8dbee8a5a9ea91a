#include "workload/generator_schedule.h"

#include <algorithm>

#include "common/error.h"

namespace stalloc {

ScheduleShape schedule_shape(std::uint64_t pp, std::uint64_t rank, std::uint64_t microbatches,
                             std::uint64_t vpp) {
  if (pp == 0 || rank >= pp || vpp == 0) {
    throw UsageError("pipeline schedule: rank " + std::to_string(rank) + " must be below pp " +
                     std::to_string(pp) + " and vpp positive");
  }
  ScheduleShape s;
  if (vpp == 1) {
    s.warmup = std::min(pp - rank - 1, microbatches);
    s.remaining = microbatches - s.warmup;
    return s;
  }
  if (microbatches % pp != 0) {
    throw UsageError("interleaved schedule: micro-batches (" + std::to_string(microbatches) +
                     ") must be a multiple of pp (" + std::to_string(pp) + ")");
  }
  const std::uint64_t total = microbatches * vpp;
  if (microbatches == pp) {
    s.warmup = total;
    s.all_warmup = true;
  } else {
    s.warmup = std::min((pp - rank - 1) * 2 + (vpp - 1) * pp, total);
  }
  s.remaining = total - s.warmup;
  return s;
}

std::uint64_t model_chunk_for(std::int64_t k, bool forward, std::uint64_t pp, std::uint64_t vpp) {
  const auto group = static_cast<std::int64_t>(pp * vpp);
  const std::int64_t in_group = ((k % group) + group) % group;
  const auto chunk = static_cast<std::uint64_t>(in_group) / pp;
  return forward ? chunk : vpp - chunk - 1;
}

std::uint64_t microbatch_for(std::uint64_t k, std::uint64_t pp, std::uint64_t vpp) {
  const std::uint64_t group = k / (pp * vpp);
  return group * pp + k % pp;
}

std::vector<PipelineStep> pipeline_schedule(std::uint64_t pp, std::uint64_t rank,
                                            std::uint64_t microbatches, std::uint64_t vpp) {
  const ScheduleShape shape = schedule_shape(pp, rank, microbatches, vpp);
  const std::uint64_t total = microbatches * vpp;
  auto step = [&](bool forward, std::uint64_t k, ScheduleStage stage) {
    PipelineStep s;
    s.forward = forward;
    s.virtual_index = k;
    s.stage = stage;
    if (vpp == 1) {
      s.microbatch = k;
    } else {
      s.model_chunk = model_chunk_for(static_cast<std::int64_t>(k), forward, pp, vpp);
      s.microbatch = microbatch_for(k, pp, vpp);
    }
    return s;
  };
  std::vector<PipelineStep> out;
  out.reserve(2 * total);
  for (std::uint64_t k = 0; k < shape.warmup; ++k) out.push_back(step(true, k, ScheduleStage::Warmup));
  for (std::uint64_t k = 0; k < shape.remaining; ++k) {
    out.push_back(step(true, k + shape.warmup, ScheduleStage::Steady));
    out.push_back(step(false, k, ScheduleStage::Steady));
  }
  for (std::uint64_t k = shape.remaining; k < total; ++k) {
    out.push_back(step(false, k, ScheduleStage::Cooldown));
  }
  return out;
}

std::string schedule_string(const std::vector<PipelineStep>& steps, std::uint64_t vpp) {
  std::string out;
  for (const PipelineStep& s : steps) {
    if (!out.empty()) out += ' ';
    out += s.forward ? 'F' : 'B';
    if (vpp > 1) out += std::to_string(s.model_chunk) + ".";
    out += std::to_string(s.microbatch);
  }
  return out;
}

}  // namespace stalloc
