// From recorded iterations to installed plans, and which plan the next iteration follows.
//
// Iterations 0 .. profile_iterations-1 are served unplanned and recorded; from then on, every
// iteration whose request signature has no plan (and that did not follow the active plan but
// for one request in a hundred, RuntimePolicy::off_plan_share) is planned in the background
// (planner/chunk/chunk_plan.h), and the plan is installed at the next boundary unless it would
// hold more than the online path did (declined) or its sizes just changed (deferred). An alias
// plan over the mapping room is planned again as offset, then windowed. The next iteration is
// predicted to follow the most frequent successor of the last signature, so that a one-off
// iteration is not taken for a new pattern.
//
// Chunk creation, mapping and planning happen here, at iteration boundaries or on the planning
// thread, never on the planned path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/chunk/chunk_plan.h"
#include "src/period_detector.h"
#include "src/recorder.h"
#include "src/runtime_parts.h"
#include "src/runtime_reclaimer.h"

namespace stalloc {

class PlanLifecycle {
 public:
  PlanLifecycle(const RuntimeParts& parts, RuntimeReclaimer& reclaimer);

  Recorder& recorder() { return recorder_; }
  const Recorder& recorder() const { return recorder_; }

  // Before a request while the program calls no step(): ends the iteration where the period
  // detector finds a boundary, or disowns the detected iterations when the period ended.
  void detect_boundary(std::uint64_t size, std::uint32_t stream, std::uint64_t live_allocations);
  // Ends the current iteration: plans it if it is new, installs what finished planning, and
  // starts the next one on the plan predicted for it.
  void end_iteration();
  // What the detector took for iterations was part of one: their plans are not chosen again
  // and profiling starts over from the program's own iterations.
  void disown_detected_iterations(const std::string& why);
  // Installs a plan made elsewhere (stalloc plan); throws UsageError when it cannot be.
  void add_plan(ChunkPlan plan);
  // Waits for background planning and installs what it produced.
  void wait_for_planning();
  // The current iteration's requests are kept in the trace (profiled, or record_trace).
  bool current_kept() const;

 private:
  // Installs the plans finished in the background from iterations before `made_before`.
  void install_finished(std::uint32_t made_before = UINT32_MAX);
  // Whether a finished plan would make the runtime hold more than the online path did (*why).
  bool declines(const ChunkPlan& plan, std::string* why) const;
  // Before the pool grows to `chunks` for a plan about to be installed, one host wait for the
  // device where that would take the runtime past the most it ever held while emptied pages and
  // cached ranges still wait for the GPU (their chunks are not yet the pool's to take).
  void wait_before_pool_growth(std::uint64_t chunks);
  // Pool chunks that live tensors of disowned plans hold (empty when there are none).
  std::vector<bool> chunks_held_by_disowned() const;
  // Chooses the plan the next iteration follows and starts it.
  void choose_plan();
  void note_transition(const SignatureKey& key);

  const RuntimeParts parts_;
  RuntimeReclaimer& reclaimer_;
  Recorder recorder_;
  PeriodDetector detector_;
  // Iterations before this one were cut by the period detector and then disowned by the
  // program's own step(): profiling starts again here.
  std::uint32_t profile_base_ = 0;
  bool have_last_key_ = false;
  SignatureKey last_key_;
  // How often each signature followed another.
  struct Transition {
    SignatureKey from;
    SignatureKey to;
    std::uint64_t count = 0;
  };
  std::vector<Transition> transitions_;
};

}  // namespace stalloc
