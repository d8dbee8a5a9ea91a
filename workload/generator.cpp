// generate_trace: the run's persistent allocations, then per iteration the pipeline schedule
// with its communication buffers, then the optimizer step. The two drivers below follow
// Megatron-LM's forward_backward_pipelining_without_interleaving and ..._with_interleaving
// loop by loop, including when Python drops its references: a receive buffer, a gradient or a
// deallocated output placeholder dies when its variable is rebound or its list entry popped.
#include "workload/generator.h"

#include <cstdio>
#include <deque>

#include "workload/generator_model.h"
#include "workload/generator_random.h"
#include "workload/generator_schedule.h"

namespace stalloc {
namespace {

using gen::ModelEmitter;
using gen::Scope;
using gen::ScopeGuard;
using gen::StageState;
using gen::Tensor;
using gen::TensorBuilder;

class PipelineDriver {
 public:
  PipelineDriver(const GeneratorConfig& cfg, TensorBuilder& b, ModelEmitter& model)
      : cfg_(cfg), b_(b), model_(model), microbatches_(microbatches_per_iteration(cfg)) {}

  void run_iteration() {
    if (cfg_.vpp == 1) run_1f1b();
    else run_interleaved();
    ScopeGuard guard(b_, Scope{Phase::Optimizer, -1, -1, 0});
    model_.optimizer_step();
    for (Tensor& t : reported_losses_) b_.free(t);  // the iteration's logged losses
    reported_losses_.clear();
  }

 private:
  // p2p_communication: torch.empty for each tensor to receive.
  Tensor receive(Phase phase, std::uint64_t microbatch) {
    ScopeGuard guard(b_, Scope{phase, static_cast<std::int32_t>(microbatch), -1, 0});
    return b_.alloc(model_.dims().act_local, false, cfg_.comm_stream ? 1 : 0);
  }

  StageState forward(std::uint64_t chunk, std::uint64_t microbatch, Tensor input) {
    StageState st = model_.forward_step(chunk, microbatch, input);
    if (st.reported_loss) reported_losses_.push_back(st.reported_loss);
    return st;
  }

  // deallocate_output_tensor: out.data = torch.empty((1,)) once the output has been sent.
  void deallocate_output(StageState& st) {
    ScopeGuard guard(b_, Scope{Phase::Forward, static_cast<std::int32_t>(st.microbatch), -1, 0});
    const bool loss = model_.last_stage(st.chunk);
    Tensor placeholder = b_.alloc(loss ? 4 : 2);
    b_.free(st.output);
    st.output = placeholder;
  }

  void release(Phase phase, std::uint64_t microbatch, Tensor& t) {
    ScopeGuard guard(b_, Scope{phase, static_cast<std::int32_t>(microbatch), -1, 0});
    b_.free(t);
  }

  void run_1f1b() {
    const bool first = model_.first_stage(0), last = model_.last_stage(0);
    const ScheduleShape shape = schedule_shape(cfg_.pp, cfg_.pipeline_rank, microbatches_, 1);
    struct InFlight {
      Tensor input;
      StageState st;
    };
    std::deque<InFlight> in_flight;
    Tensor grad_var = 0;        // output_tensor_grad
    Tensor input_grad_var = 0;  // input_tensor_grad
    std::uint64_t next_backward = 0;

    auto backward_one = [&](InFlight& f, Tensor grad) {
      Tensor dx = model_.backward_step(f.st, grad);
      release(Phase::Backward, f.st.microbatch, input_grad_var);  // rebinding input_tensor_grad
      input_grad_var = dx;
      ++next_backward;
    };

    for (std::uint64_t i = 0; i < shape.warmup; ++i) {
      Tensor input = first ? 0 : receive(Phase::Forward, i);
      InFlight f{input, forward(0, i, input)};
      deallocate_output(f.st);
      in_flight.push_back(f);
    }
    Tensor input = 0;
    if (shape.remaining > 0 && !first) input = receive(Phase::Forward, shape.warmup);
    for (std::uint64_t i = 0; i < shape.remaining; ++i) {
      const std::uint64_t mb = shape.warmup + i;
      InFlight f{input, forward(0, mb, input)};
      // send_forward_recv_backward; the previous gradient dies as its variable is rebound.
      Tensor grad = last ? 0 : receive(Phase::Backward, next_backward);
      release(Phase::Backward, next_backward, grad_var);
      grad_var = grad;
      deallocate_output(f.st);
      in_flight.push_back(f);
      InFlight b = in_flight.front();
      in_flight.pop_front();
      const std::uint64_t bmb = b.st.microbatch;
      backward_one(b, grad_var);
      if (i + 1 == shape.remaining) {
        input = 0;
        release(Phase::Backward, bmb, b.input);
      } else {
        input = first ? 0 : receive(Phase::Forward, mb + 1);  // send_backward_recv_forward
        release(Phase::Backward, bmb, b.input);
      }
      release(Phase::Backward, bmb, b.st.output);
    }
    for (std::uint64_t i = 0; i < shape.warmup; ++i) {
      InFlight b = in_flight.front();
      in_flight.pop_front();
      const std::uint64_t bmb = b.st.microbatch;
      Tensor grad = last ? 0 : receive(Phase::Backward, bmb);
      release(Phase::Backward, bmb, grad_var);
      grad_var = grad;
      backward_one(b, grad_var);
      release(Phase::Backward, bmb, b.input);
      release(Phase::Backward, bmb, b.st.output);
    }
    release(Phase::Backward, microbatches_ - 1, grad_var);
    release(Phase::Backward, microbatches_ - 1, input_grad_var);
  }

  void run_interleaved() {
    const std::uint64_t pp = cfg_.pp, vpp = cfg_.vpp, rank = cfg_.pipeline_rank;
    const ScheduleShape shape = schedule_shape(pp, rank, microbatches_, vpp);
    const std::uint64_t total = microbatches_ * vpp;
    const bool first_rank = rank == 0, last_rank = rank == pp - 1;
    std::vector<std::deque<Tensor>> inputs(vpp), grads(vpp);
    std::vector<std::deque<StageState>> outputs(vpp);
    Tensor input_grad_var = 0;
    auto chunk_of = [&](std::int64_t k, bool fwd) { return model_chunk_for(k, fwd, pp, vpp); };
    auto micro_of = [&](std::uint64_t k) { return microbatch_for(k, pp, vpp); };
    auto sk = [](std::uint64_t k) { return static_cast<std::int64_t>(k); };

    auto forward_helper = [&](std::uint64_t k) -> StageState& {
      const std::uint64_t c = chunk_of(sk(k), true);
      if (model_.first_stage(c) && inputs[c].size() == outputs[c].size()) inputs[c].push_back(0);
      outputs[c].push_back(forward(c, micro_of(k), inputs[c].back()));
      return outputs[c].back();
    };
    auto backward_helper = [&](std::uint64_t k) {
      const std::uint64_t c = chunk_of(sk(k), false);
      if (model_.last_stage(c) && grads[c].empty()) grads[c].push_back(0);
      Tensor input = inputs[c].front();
      inputs[c].pop_front();
      StageState st = outputs[c].front();
      outputs[c].pop_front();
      Tensor grad = grads[c].front();
      grads[c].pop_front();
      Tensor dx = model_.backward_step(st, grad);
      // The helper returns: its locals die, then input_tensor_grad is rebound.
      release(Phase::Backward, st.microbatch, input);
      release(Phase::Backward, st.microbatch, st.output);
      release(Phase::Backward, st.microbatch, grad);
      release(Phase::Backward, st.microbatch, input_grad_var);
      input_grad_var = dx;
    };
    auto recv_forward_for = [&](bool recv, std::uint64_t k) {
      return recv ? receive(Phase::Forward, micro_of(k)) : Tensor{0};
    };
    auto recv_backward_for = [&](bool recv, std::uint64_t k) {
      return recv ? receive(Phase::Backward, micro_of(k)) : Tensor{0};
    };

    inputs[0].push_back(first_rank ? 0 : receive(Phase::Forward, 0));
    for (std::uint64_t k = 0; k < shape.warmup; ++k) {
      StageState& st = forward_helper(k);
      const std::uint64_t next_chunk = chunk_of(sk(k) + 1, true);
      const bool recv_prev = !(first_rank && next_chunk == 0) && k + 1 != total;
      const bool send = !model_.last_stage(st.chunk);
      Tensor input = recv_forward_for(recv_prev, k + 1);
      if (k + 1 == shape.warmup && !shape.all_warmup) {
        grads[vpp - 1].push_back(recv_backward_for(!last_rank, 0));
      }
      inputs[next_chunk].push_back(input);
      if (send) deallocate_output(st);
    }
    for (std::uint64_t k = 0; k < shape.remaining; ++k) {
      const std::uint64_t fk = k + shape.warmup;
      StageState& st = forward_helper(fk);
      const bool send = !model_.last_stage(st.chunk);
      backward_helper(k);
      bool recv_prev = true, recv_next = true;
      std::uint64_t next_fwd_chunk = 0, next_bwd_chunk = 0;
      if (first_rank) {
        next_fwd_chunk = chunk_of(sk(fk) - sk(pp - 1), true);
        recv_prev = next_fwd_chunk != vpp - 1;
        next_fwd_chunk += 1;
      } else {
        next_fwd_chunk = chunk_of(sk(fk) + 1, true);
      }
      if (last_rank) {
        next_bwd_chunk = chunk_of(sk(k) - sk(pp - 1), false);
        recv_next = next_bwd_chunk != 0;
        next_bwd_chunk -= recv_next ? 1 : 0;
      } else {
        next_bwd_chunk = chunk_of(sk(k) + 1, false);
      }
      if (k + 1 == shape.remaining) recv_prev = false;
      Tensor input = recv_forward_for(recv_prev, fk + 1);
      Tensor grad = recv_backward_for(recv_next, k + 1);
      if (send) deallocate_output(st);
      if (recv_prev) inputs[next_fwd_chunk].push_back(input);
      if (recv_next) grads[next_bwd_chunk].push_back(grad);
    }
    if (shape.all_warmup) grads[vpp - 1].push_back(recv_backward_for(!last_rank, shape.remaining));
    for (std::uint64_t k = shape.remaining; k < total; ++k) {
      backward_helper(k);
      const std::uint64_t next_chunk = chunk_of(sk(k) + 1, false);
      const bool recv_next = !(last_rank && next_chunk == vpp - 1) && k + 1 != total;
      grads[next_chunk].push_back(recv_backward_for(recv_next, k + 1));
    }
    release(Phase::Backward, microbatches_ - 1, input_grad_var);
    // Entries appended for receives that did not happen are empty: nothing is left live.
    for (auto& q : inputs) {
      for (Tensor& t : q) release(Phase::Backward, microbatches_ - 1, t);
    }
    for (auto& q : grads) {
      for (Tensor& t : q) release(Phase::Backward, microbatches_ - 1, t);
    }
  }

  const GeneratorConfig& cfg_;
  TensorBuilder& b_;
  ModelEmitter& model_;
  std::uint64_t microbatches_;
  std::vector<Tensor> reported_losses_;
};

}  // namespace

Trace generate_trace(const GeneratorConfig& cfg) {
  validate_config(cfg);
  Trace trace;
  trace.meta["source"] = "stalloc gen";
  trace.meta["generator"] = describe_config(cfg);
  TensorBuilder builder(&trace);
  ModelEmitter model(cfg, builder);
  PipelineDriver driver(cfg, builder, model);
  const std::vector<std::uint64_t> seqs = gen::iteration_sequence_lengths(cfg);
  std::string seq_meta;
  double flops = 0.0;
  for (std::uint64_t s : seqs) {
    if (!seq_meta.empty()) seq_meta += ',';
    seq_meta += std::to_string(s);
    flops += flops_per_iteration(cfg, s);
  }
  trace.meta["sequence_lengths"] = seq_meta;
  // The mean over iterations, in FLOPs: what the simulator turns into an iteration time.
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", seqs.empty() ? 0.0 : flops / static_cast<double>(seqs.size()));
  trace.meta["flops_per_iteration"] = buffer;
  for (std::uint32_t it = 0; it < cfg.iterations; ++it) {
    model.begin_iteration(it, seqs[it]);
    if (it == 0) model.persistent_allocations();
    driver.run_iteration();
  }
  return trace;
}

}  // namespace stalloc
