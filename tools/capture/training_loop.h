// The training loop whose allocations stalloc-capture records: per iteration, each micro-batch's
// forward and backward (gradients accumulated), then one AdamW step. Every phase is announced to
// the recorder before it runs, so each event carries its iteration, phase, micro-batch and layer.
#pragma once

#include "trace/trace.h"
#include "tools/capture/capture_options.h"
#include "tools/capture/recording_allocator.h"

namespace stalloc::capture {

struct TrainingResult {
  Trace trace;
  double first_loss = 0.0;  // mean micro-batch loss of the first and the last iteration
  double last_loss = 0.0;
};

// Records from the model's construction (its weights and, at the first step, the optimizer
// state are the trace's persistent allocations) to the end of the last optimizer step.
TrainingResult record_training(const CaptureOptions& options, RecordingAllocator& recorder);

}  // namespace stalloc::capture
