// Seeded offset problems for tests and benchmarks (and `stalloc plan --dsa-generate`).
//
// - Irregular: a compiler's memory plan for a whole program, in the style of the buffer
//   assignment of an ML compiler: several phases one after the other (layer stacks with
//   residual connections, forward/backward passes that keep activations until their backward
//   step, free-form dataflow), each op making outputs and temporaries. Most buffers are short
//   temporaries of one to a few steps; some live to a later op of the phase (skip connections,
//   activations); weights and phase results live across phases, some for the whole program.
//   Sizes are skewed: a few bytes (scalars, shapes) to hundreds of MiB, most around a per-phase
//   model width. No iteration repeats, so the time structure that splits training traces into
//   small independent parts is missing: one large component.
// - Training: a training run in miniature (the instances of the earlier benchmark): per
//   iteration, activations kept from the forward pass to the backward pass, short temporaries,
//   gradients until the optimizer step; 48 weights live for the whole run; 512-byte alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc {

enum class DsaInstanceKind { Irregular, Training };

struct DsaGeneratorOptions {
  DsaInstanceKind kind = DsaInstanceKind::Irregular;
  std::size_t buffers = 10000;
  std::uint64_t seed = 1;
};

// Exactly options.buffers buffers, ids 0..n-1, every one with size > 0 and lower < upper.
// The same options give the same instance on every platform (own PRNG and arithmetic only).
std::vector<DsaBuffer> generate_dsa_instance(const DsaGeneratorOptions& options);

std::optional<DsaInstanceKind> parse_dsa_instance_kind(std::string_view name);
std::string dsa_instance_kind_name(DsaInstanceKind kind);

}  // namespace stalloc
