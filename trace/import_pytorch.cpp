// PyTorch snapshot -> traces (docs/formats.md, "Importers").
//
// The caching allocator records a free twice: free_requested when the tensor dies and
// free_completed when its block may be reused (later, if record_stream gave it uses on other
// streams). The completed one is what bounds reuse, so it is the free whenever the device's
// trace has any; traces from allocators that record only free_requested use that. Addresses
// are reused after the free, so an address maps to the id live there at that moment.
//
// Recording usually starts after the model is built, so the blocks live at that moment
// (weights, gradients, optimizer state) never appear as allocations: they show up as frees of
// addresses nothing was allocated at, or as blocks still active in the dump-time `segments`
// that no trace event allocated. Each becomes an allocation at the very start of the trace, so
// that the trace's peak is the run's.
#include "trace/import_pytorch.h"

#include <array>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/error.h"
#include "trace/import_support.h"
#include "trace/iteration_finder.h"
#include "trace/safe_unpickler.h"
#include "trace/trace_io.h"

namespace stalloc {

namespace {

// The keys PyTorch writes (torch/csrc/cuda/Module.cpp, memory snapshot); any other is counted.
constexpr std::array<std::string_view, 4> kTopKeys = {"segments", "device_traces", "allocator_settings",
                                                      "external_annotations"};
constexpr std::array<std::string_view, 9> kEntryKeys = {"action", "addr", "size", "stream", "time_us", "frames",
                                                        "device_free", "compile_context", "user_metadata"};
constexpr std::array<std::string_view, 12> kSegmentKeys = {
    "device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type",
    "segment_pool_id", "is_expandable", "frames", "blocks"};
constexpr std::array<std::string_view, 6> kBlockKeys = {"address", "size", "requested_size", "state", "frames", "history"};

// What a snapshot holds that the trace has no event for: counted, named, and left out.
struct Tally {
  std::uint64_t total = 0;
  std::map<std::string, std::uint64_t> names;
  void add(const std::string& name) {
    ++total;
    ++names[name];
  }
  // "frames_x:2,foo:1", capped so that a hostile file cannot make meta huge.
  std::string list() const {
    std::string out;
    std::size_t shown = 0;
    for (const auto& [name, n] : names) {
      if (shown == 16) {
        out += ",...";
        break;
      }
      if (!out.empty()) out += ",";
      out += (name.size() > 40 ? name.substr(0, 40) + "..." : name) + ":" + std::to_string(n);
      ++shown;
    }
    return out;
  }
};

void count_unknown_keys(const PickleValue& dict, const std::string_view* known, std::size_t n_known, Tally* out) {
  for (const auto& [key, value] : dict.entries) {
    (void)value;
    if (!key->is_str()) {
      out->add("<key that is not a str>");
      continue;
    }
    bool found = false;
    for (std::size_t i = 0; i < n_known && !found; ++i) found = key->text == known[i];
    if (!found) out->add(key->text);
  }
}

template <std::size_t N>
void count_unknown_keys(const PickleValue& dict, const std::array<std::string_view, N>& known, Tally* out) {
  count_unknown_keys(dict, known.data(), N, out);
}

// One alloc or free of a device trace, its fields checked.
struct Request {
  std::size_t entry = 0;  // index in the device's trace, for messages
  bool alloc = false;
  bool has_size = false;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;  // raw
  std::int64_t time_ns = -1;
};

// A block live before recording began.
struct Seed {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;  // raw
};

class SnapshotReader {
 public:
  explicit SnapshotReader(const std::string& name) : name_(name) {}

  std::vector<Trace> read(const PickleValue& root) {
    const PickleValue* devices = root.find("device_traces");
    if (!devices || !devices->is_sequence()) {
      fail("snapshot", "expected a dict with a list 'device_traces' (torch.cuda.memory._dump_snapshot)");
    }
    count_unknown_keys(root, kTopKeys, &top_unknown_keys_);
    segments_ = root.find("segments");
    if (segments_ && !segments_->is_sequence()) fail("segments", "expected a list of segments");
    if (const PickleValue* settings = root.find("allocator_settings");
        settings && settings->kind == PickleValue::Kind::Dict) {
      if (const PickleValue* e = settings->find("expandable_segments"); e && e->is_int()) {
        expandable_segments_ = e->as_int() != 0 ? "true" : "false";
      }
    }
    std::vector<Trace> out;
    for (std::size_t d = 0; d < devices->items.size(); ++d) {
      Trace t = read_device(*devices->items[d], d);
      if (!t.events.empty()) out.push_back(std::move(t));
    }
    return out;
  }

 private:
  Trace read_device(const PickleValue& entries, std::size_t device) {
    std::string where = "device_traces[" + std::to_string(device) + "]";
    if (!entries.is_sequence()) fail(where, "expected a list of trace entries");
    if (device > static_cast<std::size_t>(std::numeric_limits<int>::max())) fail(where, "expected fewer devices");
    bool has_completed = false;
    for (const PickleValue* e : entries.items) {
      const PickleValue* action = e->find("action");
      if (action && action->is_str() && action->text == "free_completed") has_completed = true;
    }
    const std::string free_action = has_completed ? "free_completed" : "free_requested";

    // Parse: the requests, and a count of everything else.
    Tally unknown_actions, unknown_keys = top_unknown_keys_;
    std::map<std::string, std::uint64_t> segment_events;
    std::uint64_t snapshots = 0, ooms = 0, oom_bytes = 0;
    // The first OOM: where it came, what it asked for, what the device had left, and the
    // segments' bytes mapped or freed since recording began (signed), to place it against the
    // dump's segments.
    std::optional<std::size_t> oom_entry;
    std::uint64_t oom_request = 0, oom_device_free = 0;
    std::int64_t segment_change = 0, segment_change_at_oom = 0;
    std::int64_t segment_change_peak = 0;  // the most the segments grew above the start
    std::vector<Request> requests;
    for (std::size_t i = 0; i < entries.items.size(); ++i) {
      const PickleValue& e = *entries.items[i];
      std::string at = where + "[" + std::to_string(i) + "]";
      if (e.kind != PickleValue::Kind::Dict) fail(at, "expected a dict trace entry");
      count_unknown_keys(e, kEntryKeys, &unknown_keys);
      const PickleValue* action = e.find("action");
      if (!action || !action->is_str()) fail(at, "expected a str 'action'");
      const std::string& a = action->text;
      if (a == "alloc" || a == free_action) {
        Request r;
        r.entry = i;
        r.alloc = a == "alloc";
        r.addr = *unsigned_field(e, "addr", at, true);
        if (auto size = unsigned_field(e, "size", at, r.alloc)) {
          r.size = *size;
          r.has_size = true;
        }
        r.stream = stream_field(e, "stream", at);
        r.time_ns = time_ns(e, at);
        requests.push_back(r);
      } else if (a == "free_requested" || a == "free_completed") {
        // The free this device does not use (free_action).
      } else if (a == "segment_alloc" || a == "segment_free" || a == "segment_map" || a == "segment_unmap") {
        ++segment_events[a];
        // Informative only (the reserved bytes at an OOM): a size that is not one is skipped.
        if (const std::uint64_t size = lenient_size(e, "size"); size <= kMaxTraceBytes) {
          const auto bytes = static_cast<std::int64_t>(size);
          segment_change += a == "segment_alloc" || a == "segment_map" ? bytes : -bytes;
          segment_change_peak = std::max(segment_change_peak, segment_change);
        }
      } else if (a == "snapshot") {
        ++snapshots;
      } else if (a == "oom") {
        ++ooms;
        if (!oom_entry) {
          oom_entry = i;
          oom_request = unsigned_field(e, "size", at, false).value_or(0);
          oom_device_free = std::min(lenient_size(e, "device_free"), kMaxTraceBytes);
          segment_change_at_oom = segment_change;
        }
        if (auto size = unsigned_field(e, "size", at, false)) {
          oom_bytes = *size > std::numeric_limits<std::uint64_t>::max() - oom_bytes
                          ? std::numeric_limits<std::uint64_t>::max()
                          : oom_bytes + *size;
        }
      } else {
        unknown_actions.add(a);
      }
    }

    if (requests.empty()) return Trace{};  // no output for a device that recorded no alloc or free

    // Which blocks were live before recording began.
    std::unordered_set<std::uint64_t> live, touched;
    std::vector<Seed> seeds;
    std::uint64_t from_frees = 0;
    for (const Request& r : requests) {
      if (r.alloc) {
        live.insert(r.addr);
      } else if (!live.erase(r.addr) && !touched.count(r.addr) && r.has_size) {
        // A free of a block nothing allocated, and nothing touched before: live at the start.
        seeds.push_back(Seed{r.addr, r.size, r.stream});
        ++from_frees;
      }
      touched.insert(r.addr);
    }
    std::uint64_t from_segments = 0, inconsistent = 0;
    if (segments_) {
      for (std::size_t s = 0; s < segments_->items.size(); ++s) {
        read_segment(*segments_->items[s], s, device, live, touched, &seeds, &from_segments, &inconsistent,
                     &unknown_keys);
      }
    }

    // The trace: the seeded blocks first, then the requests in order.
    Trace trace;
    trace.device = static_cast<int>(device);
    AddressTracker tracker(&trace);
    StreamIndexer streams;
    std::uint64_t seeded_bytes = 0;
    for (const Seed& s : seeds) {
      Event ev;
      ev.size = s.size;
      ev.stream = streams.index(s.stream);
      if (!tracker.alloc(s.addr, ev)) fail(where, "two blocks live at the start at " + hex(s.addr));
      seeded_bytes += s.size;
    }
    std::uint64_t unknown_frees = 0;
    std::optional<std::size_t> oom_event;  // events written before the first OOM
    for (const Request& r : requests) {
      if (oom_entry && !oom_event && r.entry > *oom_entry) oom_event = trace.events.size();
      Event ev;
      ev.size = r.size;
      ev.stream = streams.index(r.stream);
      ev.time_ns = r.time_ns;
      if (r.alloc) {
        if (!tracker.alloc(r.addr, ev)) {
          fail(where + "[" + std::to_string(r.entry) + "]",
               "alloc at " + hex(r.addr) + " which is still live (its free is missing)");
        }
      } else if (!tracker.free(r.addr, ev)) {
        ++unknown_frees;  // touched before, or without a size: cannot be seeded
      }
    }

    const IterationSplit split = find_iterations(trace, seeds.size());
    assign_iterations(&trace, split.starts);

    auto& m = trace.meta;
    m["source"] = "pytorch";
    m["input"] = file_basename(name_);
    m["free_action"] = free_action;
    // The allocator the run used: PyTorch's caching allocator, with or without expandable segments.
    if (!expandable_segments_.empty()) m["pytorch_expandable_segments"] = expandable_segments_;
    if (unknown_frees) m["skipped_unknown_frees"] = std::to_string(unknown_frees);
    m["seeded_live_blocks"] = std::to_string(seeds.size());
    m["seeded_live_bytes"] = std::to_string(seeded_bytes);
    m["seeded_from_frees"] = std::to_string(from_frees);
    m["seeded_from_segments"] = std::to_string(from_segments);
    if (inconsistent) m["skipped_segment_blocks"] = std::to_string(inconsistent);
    m["iterations"] = std::to_string(split.starts.size() + 1);
    if (split.period) m["iteration_period"] = std::to_string(split.period);
    std::int64_t ns = 0;
    if (median_iteration_ns(trace, &ns)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(ns) / 1e9);
      m["iteration_seconds"] = buf;
    }
    for (const auto& [action, n] : segment_events) m[action + "_events"] = std::to_string(n);
    if (snapshots) m["snapshot_events"] = std::to_string(snapshots);
    // What the run's allocator reserved at most: the dump's segments less what they grew over
    // the recording, plus the most they grew (`stalloc sim`'s actual row).
    if (segments_) {
      const std::int64_t at_start = static_cast<std::int64_t>(segment_bytes(device)) - segment_change;
      if (at_start >= 0) m["recorded_peak_reserved_bytes"] = std::to_string(at_start + segment_change_peak);
    }
    if (ooms) {
      m["oom_events"] = std::to_string(ooms);
      m["oom_requested_bytes"] = std::to_string(oom_bytes);
      // The first OOM, for `stalloc fit`: the request, the device's free memory then, where it
      // came in the trace, and what the allocator held then (the dump's segments less what was
      // mapped after it), which with the free memory is the memory the allocator could have had.
      m["first_oom_requested_bytes"] = std::to_string(oom_request);
      m["first_oom_device_free_bytes"] = std::to_string(oom_device_free);
      m["first_oom_event"] = std::to_string(oom_event.value_or(trace.events.size()));
      if (segments_) {
        const std::int64_t at_dump = static_cast<std::int64_t>(segment_bytes(device));
        const std::int64_t at_oom = at_dump - (segment_change - segment_change_at_oom);
        if (at_oom >= 0) m["first_oom_reserved_bytes"] = std::to_string(at_oom);
      }
    }
    if (unknown_actions.total) {
      m["skipped_unknown_actions"] = std::to_string(unknown_actions.total);
      m["unknown_actions"] = unknown_actions.list();
    }
    if (unknown_keys.total) {
      m["skipped_unknown_keys"] = std::to_string(unknown_keys.total);
      m["unknown_keys"] = unknown_keys.list();
    }
    check_imported(trace, name_);
    return trace;
  }

  // A dump-time segment of `device`: its active blocks that no trace event allocated, freed or
  // left live were live from before recording to the dump.
  void read_segment(const PickleValue& seg, std::size_t index, std::size_t device,
                    const std::unordered_set<std::uint64_t>& live, const std::unordered_set<std::uint64_t>& touched,
                    std::vector<Seed>* seeds, std::uint64_t* seeded, std::uint64_t* inconsistent, Tally* unknown_keys) {
    const std::string at = "segments[" + std::to_string(index) + "]";
    if (seg.kind != PickleValue::Kind::Dict) fail(at, "expected a dict segment");
    if (*unsigned_field(seg, "device", at, true) != device) return;
    count_unknown_keys(seg, kSegmentKeys, unknown_keys);
    const PickleValue* blocks = seg.find("blocks");
    if (!blocks) return;
    if (!blocks->is_sequence()) fail(at, "expected a list 'blocks'");
    const std::uint64_t stream = stream_field(seg, "stream", at);
    for (std::size_t b = 0; b < blocks->items.size(); ++b) {
      const PickleValue& block = *blocks->items[b];
      const std::string bat = at + ".blocks[" + std::to_string(b) + "]";
      if (block.kind != PickleValue::Kind::Dict) fail(bat, "expected a dict block");
      count_unknown_keys(block, kBlockKeys, unknown_keys);
      const PickleValue* state = block.find("state");
      if (!state || !state->is_str()) fail(bat, "expected a str 'state'");
      if (state->text != "active_allocated" && state->text != "active_pending_free") continue;
      const std::uint64_t addr = *unsigned_field(block, "address", bat, true);
      if (live.count(addr)) continue;  // allocated by the trace, still live at the dump
      if (touched.count(addr)) {
        ++*inconsistent;  // the trace freed it and never allocated it again: cannot say when it was
        continue;
      }
      const std::uint64_t block_size = *unsigned_field(block, "size", bat, true);
      const auto requested = unsigned_field(block, "requested_size", bat, false);
      if (requested && *requested > block_size) {
        fail(bat, "requested_size " + std::to_string(*requested) + " is larger than the block's size " +
                      std::to_string(block_size));
      }
      seeds->push_back(Seed{addr, requested.value_or(block_size), stream});
      ++*seeded;
    }
  }

  // An int field where it is one and fits, else 0: for figures the import only reports.
  static std::uint64_t lenient_size(const PickleValue& e, const char* key) {
    const PickleValue* v = e.find(key);
    std::uint64_t out = 0;
    if (v == nullptr || !v->is_integer() || !v->to_uint64(&out)) return 0;
    return out;
  }

  // The bytes of the dump's segments of `device` (what the allocator held at the dump).
  std::uint64_t segment_bytes(std::size_t device) {
    std::uint64_t total = 0;
    for (std::size_t s = 0; s < segments_->items.size(); ++s) {
      const PickleValue& seg = *segments_->items[s];
      const std::string at = "segments[" + std::to_string(s) + "]";
      if (seg.kind != PickleValue::Kind::Dict || *unsigned_field(seg, "device", at, true) != device) continue;
      const std::uint64_t size = lenient_size(seg, "total_size");
      total = size > kMaxTraceBytes || total + size > kMaxTraceBytes ? kMaxTraceBytes : total + size;
    }
    return total;
  }

  // An integer field in [0, 2^64): nullopt when absent and not required.
  std::optional<std::uint64_t> unsigned_field(const PickleValue& e, const char* key, const std::string& at,
                                              bool required) {
    const PickleValue* v = e.find(key);
    if (!v) {
      if (required) fail(at, std::string("expected an int '") + key + "'");
      return std::nullopt;
    }
    if (!v->is_integer()) fail(at, std::string("expected '") + key + "' to be an int");
    std::uint64_t out = 0;
    if (!v->to_uint64(&out)) {
      fail(at, std::string("expected a non-negative '") + key + "' within uint64, got " + v->decimal());
    }
    return out;
  }

  // A stream handle: an int64 (PyTorch writes int64(stream)), taken as its bits; 0 when absent.
  std::uint64_t stream_field(const PickleValue& e, const char* key, const std::string& at) {
    const PickleValue* v = e.find(key);
    if (!v) return 0;
    if (!v->is_int()) fail(at, std::string("expected '") + key + "' to be an int within int64, got " + v->decimal());
    return static_cast<std::uint64_t>(v->as_int());
  }

  std::int64_t time_ns(const PickleValue& e, const std::string& at) {
    const PickleValue* v = e.find("time_us");
    if (!v || v->kind == PickleValue::Kind::None) return -1;
    constexpr std::int64_t kMaxUs = std::numeric_limits<std::int64_t>::max() / 1000;
    if (v->is_integer()) {
      if (!v->is_int() || v->as_int() < 0 || v->as_int() > kMaxUs) {
        fail(at, "expected 'time_us' between 0 and " + std::to_string(kMaxUs) + ", got " + v->decimal());
      }
      return v->as_int() * 1000;
    }
    if (v->kind == PickleValue::Kind::Float) {
      if (!(v->real >= 0 && v->real <= static_cast<double>(kMaxUs))) fail(at, "expected 'time_us' >= 0");
      return static_cast<std::int64_t>(v->real * 1000.0);
    }
    fail(at, "expected 'time_us' to be a number");
  }

  static std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ParseError(name_, 0, where + ": " + what);
  }

  const std::string& name_;
  const PickleValue* segments_ = nullptr;
  std::string expandable_segments_;  // "true" / "false" from allocator_settings, else unknown
  Tally top_unknown_keys_;
};

}  // namespace

std::vector<Trace> import_pytorch_snapshot(std::string_view pickle_bytes, const std::string& input_name) {
  // A stalloc trace given where a snapshot is expected: say so rather than fail on its first byte.
  if (pickle_bytes.substr(0, kTextTraceHeader.size()) == kTextTraceHeader ||
      pickle_bytes.substr(0, kBinaryTraceMagic.size()) == kBinaryTraceMagic) {
    throw ParseError(input_name, 1,
                     "this is a stalloc trace, not a PyTorch memory snapshot: stalloc inspect, plan, "
                     "sim, replay and fit read it as it is");
  }
  PickleDocument doc = unpickle(pickle_bytes, input_name);
  return SnapshotReader(input_name).read(doc.root());
}

bool looks_like_pickle(std::string_view head) {
  return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 &&
         head[1] >= 2 && head[1] <= 5;
}

}  // namespace stalloc
