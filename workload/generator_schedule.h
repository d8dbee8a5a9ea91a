// The order in which one pipeline rank runs its forward and backward micro-batch steps, as
// Megatron-LM's forward_backward_pipelining_without_interleaving (1F1B) and
// forward_backward_pipelining_with_interleaving (vpp model chunks per rank) run them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalloc {

enum class ScheduleStage : std::uint8_t { Warmup, Steady, Cooldown };

struct PipelineStep {
  bool forward = true;
  std::uint64_t microbatch = 0;   // index within the iteration
  std::uint64_t model_chunk = 0;  // 0..vpp-1
  std::uint64_t virtual_index = 0;  // Megatron's k: position among this direction's steps
  ScheduleStage stage = ScheduleStage::Warmup;

  friend bool operator==(const PipelineStep&, const PipelineStep&) = default;
};

struct ScheduleShape {
  std::uint64_t warmup = 0;     // forward steps before the first backward
  std::uint64_t remaining = 0;  // steady-state (forward, backward) pairs
  bool all_warmup = false;      // interleaved with microbatches == pp: every forward first
};

// Warm-up/steady split. vpp == 1 is 1F1B: warmup = min(pp - rank - 1, m). vpp > 1 is the
// interleaved schedule over m*vpp virtual micro-batches: warmup = (pp - rank - 1)*2 + (vpp - 1)*pp
// (capped), or all of them when m == pp.
ScheduleShape schedule_shape(std::uint64_t pp, std::uint64_t rank, std::uint64_t microbatches,
                             std::uint64_t vpp);

// Megatron's get_model_chunk_id: which model chunk the k-th forward (or backward) step runs.
// k may be negative (Megatron asks about k - (pp - 1)); the modulo is Python's.
std::uint64_t model_chunk_for(std::int64_t k, bool forward, std::uint64_t pp, std::uint64_t vpp);
// The micro-batch the k-th step of its direction runs within its model chunk.
std::uint64_t microbatch_for(std::uint64_t k, std::uint64_t pp, std::uint64_t vpp);

// Every compute step of one iteration on `rank`, in execution order. Steady-state steps come
// as forward then backward. Throws UsageError for an impossible shape (rank >= pp, interleaved
// with m not a multiple of pp).
std::vector<PipelineStep> pipeline_schedule(std::uint64_t pp, std::uint64_t rank,
                                            std::uint64_t microbatches, std::uint64_t vpp);

// "F0 F1 B0 ..." (vpp == 1) or "F0.0 F0.1 B1.0 ..." (chunk.microbatch): for tests and messages.
std::string schedule_string(const std::vector<PipelineStep>& steps, std::uint64_t vpp);

}  // namespace stalloc
