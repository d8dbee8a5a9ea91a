// Records the requests the runtime serves as a planner Trace: the current iteration (what the
// background planner plans from) and the iterations kept for save_trace() and the snapshot's
// device_traces (the profiled ones, or all with record_trace:true). Addresses are kept beside
// the events for the snapshot; the trace file itself has no addresses.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/trace.h"
#include "src/runtime_config.h"
#include "vmm/driver.h"

namespace stalloc {

class Recorder {
 public:
  // Records an allocation and returns its id.
  std::uint64_t alloc(std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
                      vmm::DevicePtr address);
  void free(std::uint64_t id, std::uint64_t size, std::uint32_t stream, std::uint16_t thread,
            vmm::DevicePtr address);

  // Stamps events with host time from now on (costs a clock read per request).
  void set_timing(bool on) { timing_ = on; }
  std::uint32_t iteration() const { return iteration_; }
  std::size_t current_requests() const { return current_.size(); }

  // Compares the current iteration's sizes with those of the earlier iterations that made as
  // many allocations, ordinal by ordinal, so that iteration_trace sees what changed in this
  // iteration too. next_iteration does it as well; comparing an iteration again finds nothing
  // new (its sizes are then the last ones seen).
  void compare_sizes();
  // The current iteration as a well-formed trace, for the planner; frees of tensors allocated
  // before it are left out. Compared with the iterations that made as many allocations (the
  // current one included once compare_sizes was called): Largest plans every allocation at a varying ordinal (see varying_ordinals) at
  // the largest size that ordinal had; Dynamic marks the allocations at varying ordinals
  // dynamic (the planner makes them Dynamic slots, and the signature leaves their sizes out);
  // Auto is Largest where the sizes vary together (vary_together), else Dynamic; *chosen (if
  // given) gets the one applied.
  Trace iteration_trace(VaryingSizes policy, VaryingSizes* chosen = nullptr) const;
  // Which ordinals of finished iterations with this many allocations changed size at least
  // twice; null when no such iteration finished, or when only a warm-up told (those make
  // Dynamic slots only).
  const std::vector<bool>* varying_ordinals(std::size_t allocations) const;
  // Whether the last iteration compared (compare_sizes) had its sizes as the one it was compared
  // with (the last of its count, or a warm-up) at all but at most 1/kSettledShare of its
  // ordinals: its plan's chunks are then likely to be followed as planned. False when it was
  // compared with none. Over the presets: 0 changed in the fixed ones, 5.6% in
  // llama3-8b-64k-packed, 51% in qwen-moe (a routing), 88-89% in the varlen ones.
  bool sizes_settled() const;
  // It was compared, and more than 1/kSettledShare of its ordinals changed.
  bool sizes_changed() const;
  // Ends the current iteration, keeping its requests for the retained trace or dropping them.
  void next_iteration(bool keep);

  // The kept iterations, and the current one too when include_current.
  Trace retained_trace(int device, bool include_current) const;
  struct Addressed {
    Event event;
    vmm::DevicePtr address = 0;
  };
  // Retained requests then the current iteration's, in order.
  std::vector<Addressed> all_requests() const;

 private:
  void push(const Event& e, vmm::DevicePtr address);
  // Whether the current allocation count's varying ordinals grow and shrink together, as every
  // activation does with a sequence length, given the current iteration at its largest sizes:
  // that trace then holds no more at its peak than the largest iteration seen (within
  // 1/kTogetherSlack). MoE expert buffers vary apart (the routing moves tokens between them):
  // their largest sizes together exceed every iteration's peak.
  bool vary_together(const Trace& at_largest) const;

  static constexpr std::size_t kLargestKept = 64;
  static constexpr std::size_t kSettledShare = 16;
  static constexpr std::uint64_t kTogetherSlack = 64;
  // Allocation counts this close to the last iteration's are compared with it, aligned.
  static constexpr std::size_t kNearCounts = 4;

  std::vector<Event> current_;
  struct OrdinalSizes {
    std::vector<std::uint64_t> largest;  // the largest size seen at each ordinal
    std::vector<std::uint64_t> last;     // the sizes of the last such iteration
    std::vector<std::uint8_t> changes;   // how often the size changed (counted up to 2)
    std::vector<bool> varies;            // changed at least twice
    std::uint64_t peak = 0;              // the largest peak of such an iteration's own tensors
    // What varies is known from a warm-up only (compare_with_warm_up): no two iterations of
    // this count were compared yet, so whether the sizes vary together is not known either.
    bool from_warm_up = false;
    // Ordinals whose size changed at the last comparison (with a warm-up, or with the last
    // iteration of this count).
    static constexpr std::size_t kNotCompared = SIZE_MAX;
    std::size_t changed = kNotCompared;
    // The first iteration of its count: nothing changed yet.
    static OrdinalSizes first(const std::vector<std::uint64_t>& sizes);
  };
  // What an iteration of a few allocations more or fewer than `near`'s knows from it: near's
  // ordinals aligned to `sizes` around the one place where allocations were added or dropped
  // (the place where most sizes agree on both sides).
  static OrdinalSizes aligned_to(const OrdinalSizes& near, const std::vector<std::uint64_t>& sizes);
  // The first iteration of its count, after an iteration that made and freed up to 1/kWarmUpShare
  // more tensors (a warm-up: llama7b-varlen's iteration 0 frees 147 more than iteration 1, every
  // one before the first forward pass), is compared with that iteration's tensors freed in it,
  // so that the first plan already knows which sizes vary: made from iteration 1 with every
  // activation fixed, it was left at iteration 2's first request. Aligned around one place, a
  // size not within kWarmUpWindow ordinals of its aligned one changed; the changes count only
  // when they are at least kWarmUpChanged of the ordinals, as a new sequence length changes
  // nearly every activation (88% of llama7b-varlen's tensors, 89% of
  // llama3-8b-varlen-128k's). A routing changes about half (qwen-moe), and from a warm-up the
  // window misses some of them: planned from there, qwen-moe's iteration 2 followed a plan
  // that missed 5,339 requests (est. 311 -> 642 ms) and left it again at iteration 24, so such
  // sizes wait for the next iteration's comparison, as before (docs/decisions.md, "The first plan
  // told by the warm-up").
  static constexpr std::size_t kWarmUpShare = 8;
  static constexpr std::size_t kWarmUpWindow = 4;
  static constexpr double kWarmUpChanged = 0.75;
  static void compare_with_warm_up(OrdinalSizes& o, const std::vector<std::uint64_t>& before);
  // Where sizes (n) and near (m) align best around one place: sizes[i] stands for near[i] below
  // the split, for near[i + m - n] from the split on (from split + n - m when n > m).
  static std::size_t split_point(const std::vector<std::uint64_t>& near,
                                 const std::vector<std::uint64_t>& sizes);
  // By the allocation count of the iterations they come from.
  std::unordered_map<std::size_t, OrdinalSizes> largest_;
  // The last iteration's count, if that iteration was compared with another; null otherwise.
  const OrdinalSizes* last_compared() const;
  std::size_t last_count_ = 0;  // allocations of the last iteration compared
  bool compared_ = false;       // the current iteration, since its last request
  std::vector<std::uint64_t> last_transient_;  // its sizes of the tensors it also freed
  std::vector<vmm::DevicePtr> current_addresses_;
  std::vector<Event> retained_;
  std::vector<vmm::DevicePtr> retained_addresses_;
  std::uint32_t iteration_ = 0;
  std::uint64_t next_id_ = 0;
  bool timing_ = true;
};

}  // namespace stalloc
