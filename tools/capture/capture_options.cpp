#include "tools/capture/capture_options.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>

#include "common/error.h"
#include "common/units.h"

namespace stalloc::capture {

const char* const kCaptureUsage =
    "usage: stalloc-capture --output FILE [options]\n"
    "\n"
    "Trains a small decoder-only transformer with libtorch on the CPU (random weights, random\n"
    "tokens) and writes every CPU allocation and free it makes as a stalloc trace.\n"
    "\n"
    "  --output FILE         trace to write (.trace text, .traceb binary)\n"
    "  --layers N            transformer blocks (4)\n"
    "  --hidden N            hidden size (256)\n"
    "  --heads N             attention heads, must divide hidden (4)\n"
    "  --vocab N             vocabulary size (1024)\n"
    "  --seq-len N           sequence length of every iteration (128)\n"
    "  --seq-lens A,B,...    sequence length per iteration, cycling through the list\n"
    "  --batch N             sequences per micro-batch (4)\n"
    "  --micro-batches N     micro-batches per iteration, gradients accumulated (2)\n"
    "  --iterations N        training iterations (4)\n"
    "  --recompute           recompute each block's activations in backward\n"
    "  --seed N              seed of weights and tokens (1)\n"
    "  --timestamps          record host time stamps (the trace then differs between runs)\n";

namespace {

std::int64_t positive(std::string_view name, std::string_view text) {
  const std::optional<std::uint64_t> v = parse_u64(text);
  if (!v || *v == 0 || *v > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    throw UsageError(std::string(name) + ": expected a positive integer, got '" + std::string(text) + "'");
  }
  return static_cast<std::int64_t>(*v);
}

std::vector<std::int64_t> positive_list(std::string_view name, std::string_view text) {
  std::vector<std::int64_t> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    out.push_back(positive(name, text.substr(begin, comma - begin)));
    begin = comma + 1;
  }
  return out;
}

}  // namespace

std::int64_t CaptureOptions::max_seq_len() const {
  return *std::max_element(seq_lens.begin(), seq_lens.end());
}

std::string CaptureOptions::describe() const {
  std::ostringstream out;
  out << "layers=" << layers << " hidden=" << hidden << " heads=" << heads << " vocab=" << vocab
      << " seq_lens=";
  for (std::size_t i = 0; i < seq_lens.size(); ++i) out << (i ? "," : "") << seq_lens[i];
  out << " batch=" << batch << " micro_batches=" << micro_batches << " iterations=" << iterations
      << " recompute=" << (recompute ? 1 : 0) << " seed=" << seed;
  return out.str();
}

CaptureOptions parse_capture_options(const std::vector<std::string>& args) {
  CaptureOptions o;
  bool seq_len_given = false;
  bool seq_lens_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& name = args[i];
    if (name == "--recompute") {
      o.recompute = true;
      continue;
    }
    if (name == "--timestamps") {
      o.timestamps = true;
      continue;
    }
    if (name.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + name + "'");
    if (i + 1 >= args.size()) throw UsageError(name + ": missing value");
    const std::string& value = args[++i];
    if (name == "--output") {
      o.output = value;
    } else if (name == "--layers") {
      o.layers = positive(name, value);
    } else if (name == "--hidden") {
      o.hidden = positive(name, value);
    } else if (name == "--heads") {
      o.heads = positive(name, value);
    } else if (name == "--vocab") {
      o.vocab = positive(name, value);
    } else if (name == "--seq-len") {
      o.seq_lens = {positive(name, value)};
      seq_len_given = true;
    } else if (name == "--seq-lens") {
      o.seq_lens = positive_list(name, value);
      seq_lens_given = true;
    } else if (name == "--batch") {
      o.batch = positive(name, value);
    } else if (name == "--micro-batches") {
      o.micro_batches = positive(name, value);
    } else if (name == "--iterations") {
      o.iterations = static_cast<std::uint32_t>(positive(name, value));
    } else if (name == "--seed") {
      const std::optional<std::uint64_t> seed = parse_u64(value);
      if (!seed) throw UsageError("--seed: expected an unsigned integer, got '" + value + "'");
      o.seed = *seed;
    } else {
      throw UsageError("unknown option '" + name + "'");
    }
  }
  if (o.output.empty()) throw UsageError("--output FILE is required");
  if (seq_len_given && seq_lens_given) throw UsageError("give --seq-len or --seq-lens, not both");
  if (o.hidden % o.heads != 0) {
    throw UsageError("--hidden (" + std::to_string(o.hidden) + ") must be a multiple of --heads (" +
                     std::to_string(o.heads) + ")");
  }
  return o;
}

}  // namespace stalloc::capture
