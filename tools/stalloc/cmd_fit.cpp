// `stalloc fit`: would this run have fitted on the card? From a PyTorch memory snapshot (or a
// trace), at the memory the allocator could have had (the recorded out-of-memory's reserved and
// free bytes, or --capacity), each allocator's replay: fits or not, its peak, its headroom, and
// the smallest capacity it survives (the bisection of `stalloc stress`). A recorded OOM's request
// is replayed where it came, so that "fits" means that request would have been served too.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "sim/allocator_model.h"
#include "sim/pressure_test.h"
#include "sim/run_extension.h"
#include "sim/simulator.h"
#include "tools/stalloc/command.h"
#include "trace/import_pytorch.h"
#include "trace/trace_io.h"

namespace stalloc::cli {
namespace {

constexpr const char* kUsage =
    "usage: stalloc fit SNAPSHOT|TRACE [--device N] [--capacity BYTES] [--allocators LIST] [--json]\n\n"
    "Would the recorded run have fitted? For each allocator: whether it runs the workload within\n"
    "the capacity, its peak reserved, the headroom left, and the smallest capacity it survives;\n"
    "then which to use, with the line that enables it.\n"
    "  SNAPSHOT          torch.cuda.memory._dump_snapshot output (a pickle), or a stalloc trace\n"
    "  --device N        the snapshot's device (default: the one that recorded an out-of-memory,\n"
    "                    else the first traced)\n"
    "  --capacity BYTES  the memory the allocator may have (e.g. 78GiB). Default: from the\n"
    "                    snapshot's first recorded out-of-memory, the allocator's reserved bytes\n"
    "                    then plus the device's free bytes then; a snapshot with no out-of-memory\n"
    "                    needs it (a card's memory less about 1 GiB for the CUDA context)\n"
    "  --allocators LIST comma-separated models (default pytorch,pytorch-expandable,stalloc)\n"
    "  --json            machine-readable output\n"
    "A recorded out-of-memory's request is replayed where it came (allocated, then freed), and the\n"
    "last iteration is repeated until the run is steady, as `stalloc sim` does. Exit status: 0\n"
    "when an allocator fits, 4 when none does, 2 for a bad input.";

std::uint64_t meta_u64(const Trace& t, const std::string& key) {
  auto it = t.meta.find(key);
  return it == t.meta.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

bool has_meta(const Trace& t, const std::string& key) { return t.meta.count(key) != 0; }

// The recorded OOM's request, allocated and freed at once where the OOM came.
Trace with_oom_request(const Trace& recorded) {
  Trace t = recorded;
  if (!has_meta(t, "first_oom_requested_bytes")) return t;
  const std::uint64_t size = meta_u64(t, "first_oom_requested_bytes");
  if (size == 0) return t;
  std::uint64_t id = 0;
  for (const Event& e : t.events) id = std::max(id, e.id);
  const std::size_t at = std::min<std::size_t>(meta_u64(t, "first_oom_event"), t.events.size());
  Event alloc;
  alloc.kind = EventKind::Alloc;
  alloc.id = id + 1;
  alloc.size = size;
  alloc.iteration = at < t.events.size() ? t.events[at].iteration
                    : t.events.empty()   ? 0
                                         : t.events.back().iteration;
  Event free = alloc;
  free.kind = EventKind::Free;
  t.events.insert(t.events.begin() + static_cast<std::ptrdiff_t>(at), {alloc, free});
  return t;
}

struct Row {
  std::string allocator;
  SimResult run;
  PressureResult smallest;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = text.find(',', from);
    const std::string item = text.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

int fit(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string text;
  std::uint64_t capacity = 0;
  if (args.option("--capacity", &text)) {
    const auto c = parse_bytes(text);
    if (!c || *c == 0) throw UsageError("--capacity: expected a byte count above 0 such as 78GiB, got '" + text + "'");
    capacity = *c;
  }
  int device = -1;
  if (args.option("--device", &text)) {
    const auto d = parse_u64(text);
    if (!d || *d > 4096) throw UsageError("--device: expected a device index, got '" + text + "'");
    device = static_cast<int>(*d);
  }
  std::vector<std::string> allocators = {"pytorch", "pytorch-expandable", "stalloc"};
  if (args.option("--allocators", &text)) {
    allocators = split_list(text);
    const auto known = allocator_model_names();
    if (allocators.empty()) throw UsageError("--allocators: expected a comma-separated list of models");
    for (const auto& a : allocators) {
      if (std::find(known.begin(), known.end(), a) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw UsageError("--allocators: unknown model '" + a + "' (known: " + list + ")");
      }
    }
  }
  const bool json = args.flag("--json");
  const std::vector<std::string> pos = args.positionals();
  if (pos.size() != 1) throw UsageError("expected one SNAPSHOT or TRACE\n" + std::string(kUsage));
  const std::string& path = pos[0];

  Trace recorded;
  const std::string bytes = read_file_bytes(path);
  if (looks_like_pickle(std::string_view(bytes).substr(0, 2))) {
    std::vector<Trace> devices = import_pytorch_snapshot(bytes, path);
    if (devices.empty()) throw UsageError(path + ": the snapshot traced no allocation on any device");
    const Trace* chosen = nullptr;
    for (const Trace& t : devices) {
      if (device >= 0 ? t.device == device : has_meta(t, "first_oom_requested_bytes")) chosen = &t;
      if (chosen) break;
    }
    if (chosen == nullptr && device >= 0) {
      std::string traced;
      for (const Trace& t : devices) traced += (traced.empty() ? "" : ", ") + std::to_string(t.device);
      throw UsageError(path + ": device " + std::to_string(device) + " has no alloc/free events (traced: " + traced + ")");
    }
    recorded = chosen ? *chosen : devices.front();
  } else {
    recorded = read_trace(path);
  }
  if (std::string problem = validate_trace(recorded); !problem.empty()) {
    throw UsageError(path + ": malformed trace: " + problem);
  }

  const bool oom_recorded = has_meta(recorded, "first_oom_requested_bytes");
  const std::uint64_t oom_reserved = meta_u64(recorded, "first_oom_reserved_bytes");
  const std::uint64_t oom_free = meta_u64(recorded, "first_oom_device_free_bytes");
  std::string capacity_source = "--capacity";
  if (capacity == 0) {
    if (!oom_recorded || !has_meta(recorded, "first_oom_reserved_bytes")) {
      throw UsageError(path + ": the snapshot recorded no out-of-memory, so the memory the allocator "
                       "could have is not known: give --capacity BYTES (a card's memory less about "
                       "1 GiB for the CUDA context and libraries, e.g. --capacity 78GiB on an 80 GB card)");
    }
    capacity = oom_reserved + oom_free;
    capacity_source = "the recorded out-of-memory: " + format_bytes(oom_reserved) + " reserved + " +
                      format_bytes(oom_free) + " free on the device";
  }
  // A run repeats its step: the last iteration repeated until steady, as `stalloc sim` does, so
  // that what a plan installed after the first iterations holds is counted too.
  const Trace stepped = with_oom_request(recorded);
  const Trace workload = with_repeated_last_iteration(stepped, default_repetitions(stepped));
  const std::uint64_t lower_bound = lower_bound_bytes(workload);
  const std::uint64_t granularity = std::uint64_t{2} << 20;

  std::vector<Row> rows;
  for (const std::string& a : allocators) {
    ModelOptions options;
    options.capacity = capacity;
    Row row;
    row.allocator = a;
    row.run = simulate(workload, "fit", a, options, 1);
    row.smallest = find_min_capacity(a, lower_bound, granularity, model_capacity_probe(workload, a, ModelOptions{}));
    rows.push_back(std::move(row));
  }

  // What the run itself used, and whether its model ran out where the run did.
  std::string recorded_allocator;
  if (auto it = recorded.meta.find("pytorch_expandable_segments"); it != recorded.meta.end()) {
    recorded_allocator = it->second == "true" ? "pytorch-expandable" : "pytorch";
  }
  const Row* recorded_row = nullptr;
  for (const Row& r : rows) {
    if (r.allocator == recorded_allocator) recorded_row = &r;
  }
  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (!r.run.oom && (best == nullptr || r.run.peak_reserved_bytes < best->run.peak_reserved_bytes)) best = &r;
  }

  if (json) {
    JsonWriter j(std::cout);
    j.begin_object().field("input", path).field("device", static_cast<std::int64_t>(recorded.device));
    j.field("capacity_bytes", capacity).field("capacity_source", capacity_source);
    j.field("lower_bound_bytes", lower_bound).field("oom_recorded", oom_recorded);
    if (oom_recorded) {
      j.field("oom_requested_bytes", meta_u64(recorded, "first_oom_requested_bytes"));
      j.field("oom_reserved_bytes", oom_reserved).field("oom_device_free_bytes", oom_free);
    }
    j.field("recorded_allocator", recorded_allocator);
    j.key("results").begin_array();
    for (const Row& r : rows) {
      j.begin_object().field("allocator", r.allocator).field("fits", !r.run.oom);
      j.field("peak_reserved_bytes", r.run.peak_reserved_bytes);
      j.field("headroom_bytes", r.run.oom ? 0 : capacity - std::min(capacity, r.run.peak_reserved_bytes));
      j.key("oom_event");
      if (r.run.oom) {
        j.value(r.run.oom_event);
      } else {
        j.null();
      }
      j.field("min_capacity_bytes", r.smallest.found ? r.smallest.min_capacity_bytes : 0);
      j.end_object();
    }
    j.end_array();
    j.field("use", best ? best->allocator : std::string());
    j.end_object();
    std::cout << "\n";
    return best ? 0 : 4;
  }

  std::printf("workload     %s, device %d: %zu events recorded, %zu replayed (the last iteration "
              "repeated to a steady run%s)\n",
              path.c_str(), recorded.device, recorded.events.size(), workload.events.size(),
              oom_recorded ? "; the recorded out-of-memory's request where it came" : "");
  std::printf("capacity     %s (%s)\n", format_bytes(capacity).c_str(), capacity_source.c_str());
  std::printf("lower bound  %s: the most bytes live at once%s\n\n", format_bytes(lower_bound).c_str(),
              oom_recorded ? ", the request included" : "");
  std::printf("%-20s %-22s %14s %12s %18s\n", "allocator", "fits", "peak reserved", "headroom", "smallest capacity");
  for (const Row& r : rows) {
    const std::string fits = r.run.oom ? "no (at event " + std::to_string(r.run.oom_event) + ")" : "yes";
    const std::string headroom =
        r.run.oom ? "-" : format_bytes(capacity - std::min(capacity, r.run.peak_reserved_bytes));
    std::printf("%-20s %-22s %14s %12s %18s\n", r.allocator.c_str(), fits.c_str(),
                format_bytes(r.run.peak_reserved_bytes).c_str(), headroom.c_str(),
                r.smallest.found ? format_bytes(r.smallest.min_capacity_bytes).c_str() : "none found");
  }
  std::printf("\n");
  if (oom_recorded && recorded_row != nullptr) {
    if (recorded_row->run.oom) {
      std::printf("recorded     the run (%s) ran out of memory asking for %s; its model runs out too "
                  "at this capacity: reproduced\n",
                  recorded_allocator.c_str(),
                  format_bytes(meta_u64(recorded, "first_oom_requested_bytes")).c_str());
    } else {
      std::printf("recorded     the run (%s) ran out of memory asking for %s, but its model fits, "
                  "%s below the capacity at its peak: not reproduced. The run held memory the model "
                  "does not see (the CUDA context, other libraries' buffers, another process) or "
                  "the model packs tighter than the real allocator did\n",
                  recorded_allocator.c_str(),
                  format_bytes(meta_u64(recorded, "first_oom_requested_bytes")).c_str(),
                  format_bytes(capacity - std::min(capacity, recorded_row->run.peak_reserved_bytes)).c_str());
    }
  }
  if (best == nullptr) {
    std::printf("verdict      nothing fits: the live tensors need %s at once, %s more than %s; "
                "stalloc would need %s\n",
                format_bytes(lower_bound).c_str(),
                format_bytes(lower_bound > capacity ? lower_bound - capacity : 0).c_str(),
                format_bytes(capacity).c_str(),
                [&] {
                  for (const Row& r : rows) {
                    if (r.allocator == "stalloc" && r.smallest.found) return format_bytes(r.smallest.min_capacity_bytes);
                  }
                  return std::string("?");
                }().c_str());
    return 4;
  }
  std::printf("verdict      %s fits with %s of headroom\n", best->allocator.c_str(),
              format_bytes(capacity - std::min(capacity, best->run.peak_reserved_bytes)).c_str());
  if (best->allocator == "stalloc") {
    std::printf("use          import stalloc; stalloc.enable()   # before the first CUDA tensor; "
                "stalloc.step() after each optimizer step\n");
  } else if (best->allocator == "pytorch-expandable") {
    std::printf("use          PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n");
  }
  return 0;
}

}  // namespace

STALLOC_COMMAND(Command{"fit", "would a recorded run fit on the card: each allocator against the capacity",
                        kUsage, fit});

}  // namespace stalloc::cli
