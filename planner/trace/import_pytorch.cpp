// PyTorch snapshot -> traces.
//
// The caching allocator records a free twice: free_requested when the tensor dies and
// free_completed when its block may be reused (later, if record_stream gave it uses on other
// streams). The completed one is what bounds reuse, so it is the free whenever the device's
// trace has any; traces from allocators that record only free_requested use that. Addresses
// are reused after the free, so an address maps to the id live there at that moment.
#include "planner/trace/import_pytorch.h"

#include <cstdio>
#include <limits>

#include "common/error.h"
#include "planner/trace/import_support.h"
#include "planner/trace/safe_unpickler.h"

namespace stalloc {

namespace {

class SnapshotReader {
 public:
  explicit SnapshotReader(const std::string& name) : name_(name) {}

  std::vector<Trace> read(const PickleValue& root) {
    const PickleValue* devices = root.find("device_traces");
    if (!devices || !devices->is_sequence()) {
      fail("snapshot", "expected a dict with a list 'device_traces' (torch.cuda.memory._dump_snapshot)");
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

    Trace trace;
    trace.device = static_cast<int>(device);
    AddressTracker tracker(&trace);
    StreamIndexer streams;
    std::uint64_t unknown_frees = 0;
    for (std::size_t i = 0; i < entries.items.size(); ++i) {
      const PickleValue& e = *entries.items[i];
      std::string at = where + "[" + std::to_string(i) + "]";
      if (e.kind != PickleValue::Kind::Dict) fail(at, "expected a dict trace entry");
      const PickleValue* action = e.find("action");
      if (!action || !action->is_str()) fail(at, "expected a str 'action'");
      bool is_alloc = action->text == "alloc";
      if (!is_alloc && action->text != free_action) continue;
      Event ev;
      std::uint64_t addr = static_cast<std::uint64_t>(integer(e, "addr", at, true));
      std::int64_t size = integer(e, "size", at, is_alloc);
      if (size < 0) fail(at, "expected a non-negative 'size', got " + std::to_string(size));
      ev.size = static_cast<std::uint64_t>(size);
      ev.stream = streams.index(static_cast<std::uint64_t>(integer(e, "stream", at, false)));
      ev.time_ns = time_ns(e, at);
      if (is_alloc) {
        if (!tracker.alloc(addr, ev)) fail(at, "alloc at " + hex(addr) + " which is still live (its free is missing)");
      } else if (!tracker.free(addr, ev)) {
        ++unknown_frees;  // allocated before the snapshot's ring buffer starts
      }
    }
    trace.meta["source"] = "pytorch";
    trace.meta["input"] = file_basename(name_);
    trace.meta["free_action"] = free_action;
    if (unknown_frees) trace.meta["skipped_unknown_frees"] = std::to_string(unknown_frees);
    return trace;
  }

  std::int64_t integer(const PickleValue& e, const char* key, const std::string& at, bool required) {
    const PickleValue* v = e.find(key);
    if (!v) {
      if (required) fail(at, std::string("expected an int '") + key + "'");
      return 0;
    }
    if (!v->is_int()) fail(at, std::string("expected '") + key + "' to be an int");
    return v->as_int();
  }

  std::int64_t time_ns(const PickleValue& e, const std::string& at) {
    const PickleValue* v = e.find("time_us");
    if (!v || v->kind == PickleValue::Kind::None) return -1;
    constexpr std::int64_t kMaxUs = std::numeric_limits<std::int64_t>::max() / 1000;
    if (v->is_int()) {
      std::int64_t us = v->as_int();
      if (us < 0 || us > kMaxUs) fail(at, "expected 'time_us' between 0 and " + std::to_string(kMaxUs));
      return us * 1000;
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
};

}  // namespace

std::vector<Trace> import_pytorch_snapshot(std::string_view pickle_bytes, const std::string& input_name) {
  PickleDocument doc = unpickle(pickle_bytes, input_name);
  return SnapshotReader(input_name).read(doc.root());
}

}  // namespace stalloc
