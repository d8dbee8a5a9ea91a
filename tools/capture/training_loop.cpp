#include "tools/capture/training_loop.h"

#include <torch/torch.h>

#include "tools/capture/gpt_model.h"

namespace stalloc::capture {

TrainingResult record_training(const CaptureOptions& options, RecordingAllocator& recorder) {
  torch::manual_seed(options.seed);
  TrainingResult result;
  recorder.start(options.timestamps);
  recorder.set_tag(RecordingTag{0, Phase::Other, -1, -1});

  GptConfig config;
  config.vocab = options.vocab;
  config.hidden = options.hidden;
  config.heads = options.heads;
  config.layers = options.layers;
  config.max_seq_len = options.max_seq_len();
  config.recompute = options.recompute;
  GptModel model(config);
  model->set_layer_observer([&recorder](std::int32_t layer) { recorder.set_layer(layer); });
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-4));

  for (std::uint32_t it = 0; it < options.iterations; ++it) {
    const std::int64_t seq = options.seq_len_of(it);
    double loss_sum = 0.0;
    for (std::int64_t mb = 0; mb < options.micro_batches; ++mb) {
      const auto microbatch = static_cast<std::int32_t>(mb);
      recorder.set_tag(RecordingTag{it, Phase::Forward, microbatch, -1});
      // One extra token per sequence: the targets are the inputs shifted by one.
      torch::Tensor tokens = torch::randint(options.vocab, {options.batch, seq + 1}, torch::kLong);
      torch::Tensor inputs = tokens.narrow(1, 0, seq);
      torch::Tensor targets = tokens.narrow(1, 1, seq);
      torch::Tensor logits = model->forward(inputs);
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(logits.reshape({-1, options.vocab}), targets.reshape({-1})) /
          static_cast<double>(options.micro_batches);
      recorder.set_tag(RecordingTag{it, Phase::Backward, microbatch, -1});
      loss.backward();
      loss_sum += loss.item<double>();
    }
    recorder.set_tag(RecordingTag{it, Phase::Optimizer, -1, -1});
    optimizer.step();
    optimizer.zero_grad();
    if (it == 0) result.first_loss = loss_sum;
    result.last_loss = loss_sum;
  }
  recorder.stop();
  result.trace = recorder.take_trace();
  return result;
}

}  // namespace stalloc::capture
