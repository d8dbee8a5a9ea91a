#include "trace/import_pytorch.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "common/error.h"
#include "trace/trace_io.h"

namespace stalloc {
namespace {

// Generated once with CPython 3.11, pickle protocol 4, from a snapshot-shaped dict:
//   {'segments': [], 'device_traces': [dev0, [], dev2]} where (addr A = 0x7f0000000000,
//   B = A + 0x400; stream 140000 is a side stream; every entry also has 'frames' or not)
//   dev0: segment_alloc A; alloc A 512 s0 t10; alloc B 1024 s140000 t11; free_requested A t12;
//         free_completed A t13; alloc A 256 s140000 t14; snapshot t15; free_requested B t16;
//         oom t17; free_completed B t18
//   dev2: alloc 4096 100 s7 t1; alloc 8192 200 s0 t2; free_requested 4096 t3
const std::string kSnapshot = std::string("\200\004\225\016\003\000\000\000\000\000\000}\224(\214\010segments\224]\224\214\015device_"
    "traces\224]\224(]\224(}\224(\214\006action\224\214\015segment_alloc\224\214\004addr\224"
    "\212\006\000\000\000\000\000\177\214\004size\224J\000\000 \000\214\006stream\224K\000\214"
    "\007time_us\224K\011u}\224(h\007\214\005alloc\224h\011\212\006\000\000\000\000\000\177h"
    "\012M\000\002h\013K\000h\014K\012\214\006frames\224]\224}\224(\214\010filename\224\214\010"
    "model.py\224\214\004line\224K\014\214\004name\224\214\007forward\224uau}\224(h\007h\016h"
    "\011\212\006\000\004\000\000\000\177h\012M\000\004h\013J\340\042\002\000h\014K\013h\017]"
    "\224}\224(h\022h\023h\024K\014h\025h\026uau}\224(h\007\214\016free_requested\224h\011\212"
    "\006\000\000\000\000\000\177h\012M\000\002h\013K\000h\014K\014h\017]\224}\224(h\022h\023h"
    "\024K\014h\025h\026uau}\224(h\007\214\016free_completed\224h\011\212\006\000\000\000\000"
    "\000\177h\012M\000\002h\013K\000h\014K\015h\017]\224}\224(h\022h\023h\024K\014h\025h\026ua"
    "u}\224(h\007h\016h\011\212\006\000\000\000\000\000\177h\012M\000\001h\013J\340\042\002\000"
    "h\014K\016h\017]\224}\224(h\022h\023h\024K\014h\025h\026uau}\224(h\007\214\010snapshot\224"
    "h\011K\000h\012K\000h\013K\000h\014K\017u}\224(h\007h\033h\011\212\006\000\004\000\000\000"
    "\177h\012M\000\004h\013J\340\042\002\000h\014K\020h\017]\224}\224(h\022h\023h\024K\014h"
    "\025h\026uau}\224(h\007\214\003oom\224h\011K\000h\012M\000\020h\013K\000h\014K\021u}\224(h"
    "\007h\037h\011\212\006\000\004\000\000\000\177h\012M\000\004h\013J\340\042\002\000h\014K"
    "\022h\017]\224}\224(h\022h\023h\024K\014h\025h\026uaue]\224]\224(}\224(h\007h\016h\011M"
    "\000\020h\012Kdh\013K\007h\014K\001h\017]\224}\224(h\022h\023h\024K\014h\025h\026uau}\224("
    "h\007h\016h\011M\000 h\012K\310h\013K\000h\014K\002h\017]\224}\224(h\022h\023h\024K\014h"
    "\025h\026uau}\224(h\007h\033h\011M\000\020h\012Kdh\013K\007h\014K\003h\017]\224}\224(h\022"
    "h\023h\024K\014h\025h\026uaueeu.", 793);
const std::string kDoubleAlloc = std::string("\200\004\225R\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224(}\224("
    "\214\006action\224\214\005alloc\224\214\004addr\224K\001\214\004size\224K\001u}\224(h\005h"
    "\006h\007K\001h\010K\002ueas.", 93);
const std::string kNegativeSize = std::string("\200\004\225d\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224(}\224("
    "\214\006action\224\214\016free_completed\224\214\004addr\224K@\214\004size\224K\010u}\224("
    "h\005\214\005alloc\224h\007K\001h\010J\373\377\377\377ueas.", 111);

// The hand-made snapshots below were written by CPython 3's pickle (protocol 4) from these
// dicts (A = 0x7f0000000000):
//   kBigIntFrames: device_traces [[alloc A 512 t1 with frames [{line: 2**64-1}],
//                   free_completed A 512 t2 with frames [{line: -2**70}]]]
//   kBigAddr:      device_traces [[alloc addr 2**64 size 8]]
//   kBigTime:      device_traces [[alloc addr 16 size 8 time_us 2**64-1]]
//   kBigUnused:    device_traces [[segment_map addr 2**64+5 size 2**65, alloc addr 2**63 size 8]]
//   kSeeded:       see the test LiveAtStartBlocksAreSeeded.
// frames with line numbers 2**64-1 and -2**70 (unused fields)
const std::string kBigIntFrames = std::string("\200\004\225\004\001\000\000\000\000\000\000}\224(\214\010segments\224]\224\214\015device_traces"
    "\224]\224]\224(}\224(\214\006action\224\214\005alloc\224\214\004addr\224\212\006\000\000\000\000"
    "\000\177\214\004size\224M\000\002\214\006stream\224K\000\214\007time_us\224K\001\214\006frames"
    "\224]\224}\224(\214\010filename\224\214\010<frozen>\224\214\004line\224\212\011\377\377\377\377"
    "\377\377\377\377\000\214\004name\224\214\001f\224uau}\224(h\007\214\016free_completed\224h\011"
    "\212\006\000\000\000\000\000\177h\012M\000\002h\013K\000h\014K\002h\015]\224}\224(h\020\214\004x"
    ".py\224h\022\212\011\000\000\000\000\000\000\000\000\300h\023\214\001g\224uaueau.", 271);

// alloc at addr 2**64
const std::string kBigAddr = std::string("\200\004\225U\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224}\224(\214\006a"
    "ction\224\214\005alloc\224\214\004addr\224\212\011\000\000\000\000\000\000\000\000\001\214\004si"
    "ze\224K\010\214\006stream\224K\000uaas.", 96);

// time_us 2**64-1
const std::string kBigTime = std::string("\200\004\225a\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224}\224(\214\006a"
    "ction\224\214\005alloc\224\214\004addr\224K\020\214\004size\224K\010\214\006stream\224K\000\214"
    "\007time_us\224\212\011\377\377\377\377\377\377\377\377\000uaas.", 108);

// segment_map with addr 2**64+5 and size 2**65 (not used), alloc at 2**63 (fits uint64)
const std::string kBigUnused = std::string("\200\004\225\210\000\000\000\000\000\000\000}\224\214\015device_traces\224]\224]\224(}\224(\214"
    "\006action\224\214\013segment_map\224\214\004addr\224\212\011\005\000\000\000\000\000\000\000"
    "\001\214\004size\224\212\011\000\000\000\000\000\000\000\000\002\214\006stream\224K\000u}\224(h"
    "\005\214\005alloc\224h\007\212\011\000\000\000\000\000\000\000\200\000h\010K\010h\011K\000ueas.", 147);

// seeding
const std::string kSeeded = std::string("\200\004\225\003\003\000\000\000\000\000\000}\224(\214\010segments\224]\224(}\224(\214\006device"
    "\224K\000\214\007address\224M\000\020\214\012total_size\224M\000 \214\006stream\224K\000\214\014"
    "segment_type\224\214\005small\224\214\006blocks\224]\224(}\224(h\005M\000\020\214\004size\224M"
    "\000\004\214\016requested_size\224M\350\003\214\005state\224\214\020active_allocated\224u}\224(h"
    "\005M\000\024h\015M\000\002h\016M\364\001h\017h\020u}\224(h\005M\000\026h\015M\000\010h\016K\000"
    "h\017\214\010inactive\224u}\224(h\005M\000 h\015M\000\020h\017\214\023active_pending_free\224ueu"
    "}\224(h\004K\000h\005M\000\060h\006M\000\020h\007K\000h\012]\224}\224(h\005M\000\060h\015M\000"
    "\014h\016M\270\013h\017h\020uau}\224(h\004K\001h\005M\000\220h\006M\000\020h\007K\000h\012]\224}"
    "\224(h\005M\000\220h\015M\000\020h\016M\000\020h\017h\020uaue\214\015device_traces\224]\224(]"
    "\224(}\224(\214\006action\224\214\005alloc\224\214\004addr\224M\000\024h\015M\364\001h\007K\000"
    "\214\007time_us\224K\012u}\224(h h!h\"M\000\060h\015M\270\013h\007K\000h#K\013\214\006colour\224"
    "\214\003red\224u}\224(h \214\016free_requested\224h\"M\000Ph\015M \003h\007Kch#K\014u}\224(h "
    "\214\016free_completed\224h\"M\000Ph\015M \003h\007Kch#K\015u}\224(h h*h\"M\000\060h\015M\270"
    "\013h\007K\000h#K\016u}\224(h h!h\"M\000Ph\015M\274\002h\007Kch#K\017u}\224(h \214\003oom\224"
    "\214\013device_free\224K{h\015\212\006\000\000\000\000\000\001h\007K\000h#K\020u}\224(h \214\013"
    "segment_map\224h\"M\000\200h\015J\000\000 \000h\007K\000h#K\021u}\224(h \214\007mystery\224h\"K"
    "\000h\015K\000h#K\022u}\224(h h*h\"M\000ph\007K\000h#K\023ue]\224e\214\011extra_top\224K\001u.", 782);


Event ev(EventKind kind, std::uint64_t id, std::uint64_t size, std::uint32_t stream, std::int64_t time_ns) {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.stream = stream;
  e.time_ns = time_ns;
  return e;
}

std::string real_snapshot(const std::string& name) {
  return std::string(STALLOC_SOURCE_DIR) + "/tests/data/snapshots/" + name + ".pickle";
}

std::vector<Trace> import_real(const std::string& name) {
  const std::string path = real_snapshot(name);
  return import_pytorch_snapshot(read_file_bytes(path), path);
}

std::uint64_t allocations_in(const Trace& t, std::uint32_t iteration) {
  std::uint64_t n = 0;
  for (const Event& e : t.events) n += e.kind == EventKind::Alloc && e.iteration == iteration;
  return n;
}

std::string error_of(const std::string& bytes) {
  try {
    import_pytorch_snapshot(bytes, "dir/snap.pickle");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(ImportPytorch, OneTracePerDeviceWithEvents) {
  std::vector<Trace> traces = import_pytorch_snapshot(kSnapshot, "dir/snap.pickle");
  ASSERT_EQ(traces.size(), 2u);
  const Trace& d0 = traces[0];
  EXPECT_EQ(d0.device, 0);
  // free_completed is the free (its free_requested twins are ignored), the address is reused
  // by a new id, the side stream becomes index 1, segment/snapshot/oom entries are dropped.
  std::vector<Event> want0 = {ev(EventKind::Alloc, 1, 512, 0, 10000), ev(EventKind::Alloc, 2, 1024, 1, 11000),
                              ev(EventKind::Free, 1, 512, 0, 13000), ev(EventKind::Alloc, 3, 256, 1, 14000),
                              ev(EventKind::Free, 2, 1024, 1, 18000)};
  EXPECT_EQ(d0.events, want0);
  EXPECT_EQ(d0.meta.at("source"), "pytorch");
  EXPECT_EQ(d0.meta.at("input"), "snap.pickle");
  EXPECT_EQ(d0.meta.at("free_action"), "free_completed");
  EXPECT_EQ(lower_bound_bytes(d0), 1536u);
  EXPECT_EQ(validate_trace(d0), "");

  const Trace& d2 = traces[1];
  EXPECT_EQ(d2.device, 2);
  // No free_completed on this device: free_requested is the free.
  std::vector<Event> want2 = {ev(EventKind::Alloc, 1, 100, 1, 1000), ev(EventKind::Alloc, 2, 200, 0, 2000),
                              ev(EventKind::Free, 1, 100, 1, 3000)};
  EXPECT_EQ(d2.events, want2);
  EXPECT_EQ(d2.meta.at("free_action"), "free_requested");
}

TEST(ImportPytorch, ErrorsNameTheEntry) {
  EXPECT_NE(error_of(kDoubleAlloc).find("device_traces[0][1]: alloc at 0x1 which is still live"), std::string::npos)
      << error_of(kDoubleAlloc);
  EXPECT_NE(error_of(kNegativeSize).find("device_traces[0][1]: expected a non-negative 'size'"), std::string::npos)
      << error_of(kNegativeSize);
  EXPECT_NE(error_of("\x80\x04}\x8c\x08segments]s.").find("expected a dict with a list 'device_traces'"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02]ccollections\nOrderedDict\n").find("refusing to load untrusted pickle"),
            std::string::npos);
}

// A dump-time block whose requested_size (2048) exceeds its size (1024): the caching allocator
// never makes one, so the file is refused, naming the block.
const std::string kRequestedAboveBlock = std::string(
    "\200\004\225\371\000\000\000\000\000\000\000}\224(\214\010segments\224]\224}\224(\214"
    "\006device\224K\000\214\007address\224M\000\020\214\012total_size\224M\000 \214\006strea"
    "m\224K\000\214\014segment_type\224\214\005small\224\214\006blocks\224]\224}\224(h\005M"
    "\000\020\214\004size\224M\000\004\214\016requested_size\224M\000\010\214\005state\224"
    "\214\020active_allocated\224uaua\214\015device_traces\224]\224]\224}\224(\214\006action"
    "\224\214\005alloc\224\214\004addr\224M\000 h\015M\000\002h\007K\000\214\007time_us\224K"
    "\001uaau.", 260);

TEST(ImportPytorch, ARequestedSizeAboveItsBlockIsRefused) {
  const std::string e = error_of(kRequestedAboveBlock);
  EXPECT_NE(e.find("segments[0].blocks[0]: requested_size 2048 is larger than the block's size 1024"),
            std::string::npos)
      << e;
}

// Python ints are unbounded: a field the import does not use may hold any of them, and one it
// uses is refused with the file, the entry and what was expected.
TEST(ImportPytorch, AnyIntegerWhereUnusedRangeCheckedWhereUsed) {
  std::vector<Trace> traces = import_pytorch_snapshot(kBigIntFrames, "big.pickle");
  ASSERT_EQ(traces.size(), 1u);
  std::vector<Event> want = {ev(EventKind::Alloc, 1, 512, 0, 1000), ev(EventKind::Free, 1, 512, 0, 2000)};
  EXPECT_EQ(traces[0].events, want);

  traces = import_pytorch_snapshot(kBigUnused, "big.pickle");
  ASSERT_EQ(traces.size(), 1u);
  ASSERT_EQ(traces[0].events.size(), 1u);
  EXPECT_EQ(traces[0].events[0].size, 8u);
  EXPECT_EQ(traces[0].meta.at("segment_map_events"), "1");

  std::string e = error_of(kBigAddr);
  EXPECT_NE(e.find("dir/snap.pickle: device_traces[0][0]: expected a non-negative 'addr' within uint64, got "
                   "18446744073709551616"),
            std::string::npos)
      << e;
  e = error_of(kBigTime);
  EXPECT_NE(e.find("dir/snap.pickle: device_traces[0][0]: expected 'time_us' between 0 and 9223372036854775, got "
                   "18446744073709551615"),
            std::string::npos)
      << e;
}

// Hand-computed: the free of 0x5000 (800 B, never allocated in the trace) and the dump-time
// active blocks 0x1000 (requested 1000 B) and 0x2000 (pending free, no requested_size: its
// size, 4096 B) were live before recording began; 0x1400 is allocated by the trace and still
// live at the dump, and 0x3000's active block contradicts the trace, which freed it. So the
// trace starts with three allocations of 800 + 1000 + 4096 = 5896 B, then 500 and 3000 bring
// the peak to 9396 B (3500 B without the seeds).
TEST(ImportPytorch, LiveAtStartBlocksAreSeeded) {
  std::vector<Trace> traces = import_pytorch_snapshot(kSeeded, "seeded.pickle");
  ASSERT_EQ(traces.size(), 1u);  // device 1 has a segment but no events
  const Trace& t = traces[0];
  std::vector<Event> want = {ev(EventKind::Alloc, 1, 800, 1, -1),     ev(EventKind::Alloc, 2, 1000, 0, -1),
                             ev(EventKind::Alloc, 3, 4096, 0, -1),    ev(EventKind::Alloc, 4, 500, 0, 10000),
                             ev(EventKind::Alloc, 5, 3000, 0, 11000), ev(EventKind::Free, 1, 800, 1, 13000),
                             ev(EventKind::Free, 5, 3000, 0, 14000),  ev(EventKind::Alloc, 6, 700, 1, 15000)};
  EXPECT_EQ(t.events, want);
  EXPECT_EQ(validate_trace(t), "");
  EXPECT_EQ(lower_bound_bytes(t), 9396u);
  const std::map<std::string, std::string> meta_want = {
      {"source", "pytorch"},
      {"input", "seeded.pickle"},
      {"free_action", "free_completed"},
      {"seeded_live_blocks", "3"},
      {"seeded_live_bytes", "5896"},
      {"seeded_from_frees", "1"},
      {"seeded_from_segments", "2"},
      {"skipped_segment_blocks", "1"},
      {"skipped_unknown_frees", "1"},  // the free of 0x7000 has no size to seed it with
      {"iterations", "1"},
      {"iteration_seconds", "0.000005"},  // one iteration: the span of its events, 10 to 15 us
      {"oom_events", "1"},
      {"oom_requested_bytes", "1099511627776"},
      // The first OOM, for `stalloc fit`: its request, the device's free bytes then and where it
      // came among the events (no reserved bytes: the segments mapped after it exceed the dump's).
      {"first_oom_requested_bytes", "1099511627776"},
      {"first_oom_device_free_bytes", "123"},
      {"first_oom_event", "8"},
      {"segment_map_events", "1"},
      {"skipped_unknown_actions", "1"},
      {"unknown_actions", "mystery:1"},
      {"skipped_unknown_keys", "2"},
      {"unknown_keys", "colour:1,extra_top:1"},
  };
  EXPECT_EQ(t.meta, meta_want);
}

// The README's figures for the 13 real snapshots (tests/data/snapshots/README.md): each
// imports, and its peak of live bytes is the run's recorded peak allocated.
struct RealSnapshot {
  const char* name;
  std::size_t traces;
  double peak_mib;  // README "peak alloc" (device 0 where several)
  std::uint32_t iterations;
};

const RealSnapshot kReal[] = {
    {"cnn-optimisation-loop", 1, 103, 10},
    {"lm-small-train-ctx100", 1, 651, 3},
    {"lm-small-train-ctx200-bf16", 1, 932, 3},
    {"lm-small-forward-ctx150", 1, 598, 3},
    {"lm-medium-train-ctx512", 1, 11851, 1},
    {"lm-medium-inference-ctx256", 1, 1711, 1},
    {"nca-inference-a", 1, 5429, 1},
    {"nca-inference-b", 1, 17641, 1},
    {"embedder-train-expandable-3gpu", 3, 8065, 1},
    {"lm-2.7b-train-ctx128", 1, 65016, 1},
    {"lm-xl-forward-ctx128", 1, 12771, 1},
    {"llm-1.3b-finetune", 1, 5604, 1},
    {"lm-fullstep", 1, 21770, 1},
};

TEST(ImportPytorch, EveryRealSnapshotImportsWithItsPeak) {
  for (const RealSnapshot& r : kReal) {
    SCOPED_TRACE(r.name);
    std::vector<Trace> traces;
    ASSERT_NO_THROW(traces = import_real(r.name));
    ASSERT_EQ(traces.size(), r.traces);
    const Trace& t = traces[0];
    EXPECT_EQ(t.device, 0);
    EXPECT_EQ(validate_trace(t), "");
    const double peak_mib = static_cast<double>(lower_bound_bytes(t)) / (1 << 20);
    EXPECT_NEAR(peak_mib, r.peak_mib, 0.5);  // the README rounds to MiB
    EXPECT_EQ(t.meta.at("iterations"), std::to_string(r.iterations));
    EXPECT_EQ(t.events.back().iteration, r.iterations - 1);
    // Seeded blocks come first, in iteration 0, without time stamps.
    const std::size_t seeded = std::stoul(t.meta.at("seeded_live_blocks"));
    std::uint64_t seeded_bytes = 0;
    for (std::size_t i = 0; i < seeded; ++i) {
      EXPECT_EQ(t.events[i].kind, EventKind::Alloc);
      EXPECT_EQ(t.events[i].iteration, 0u);
      EXPECT_EQ(t.events[i].time_ns, -1);
      seeded_bytes += t.events[i].size;
    }
    EXPECT_EQ(t.meta.at("seeded_live_bytes"), std::to_string(seeded_bytes));
    EXPECT_EQ(t.meta.count("skipped_unknown_frees"), 0u);
    EXPECT_EQ(t.meta.count("skipped_unknown_actions"), 0u);
    EXPECT_EQ(t.meta.count("skipped_unknown_keys"), 0u);
    // Only llm-1.3b-finetune was recorded without time stamps.
    EXPECT_EQ(t.meta.count("iteration_seconds"), std::string(r.name) == "llm-1.3b-finetune" ? 0u : 1u);
  }
}

// Numbers read off the snapshots: cnn-optimisation-loop calls torch.cuda.memory._snapshot()
// once per step (its 9 "snapshot" entries), right before the allocation at which each of
// iterations 1..9 starts; every step after the first makes 193 allocations. The first step
// makes 5 more (198), after the 31 blocks live at the start.
TEST(ImportPytorch, IterationsOfARepeatedTrainingLoop) {
  const Trace t = import_real("cnn-optimisation-loop")[0];
  EXPECT_EQ(t.meta.at("iteration_period"), "193");
  EXPECT_EQ(t.meta.at("snapshot_events"), "9");
  EXPECT_EQ(t.meta.at("seeded_live_blocks"), "31");
  EXPECT_EQ(allocations_in(t, 0), 31u + 198u);
  for (std::uint32_t k = 1; k < 10; ++k) {
    EXPECT_EQ(allocations_in(t, k), 193u) << k;
  }
  // Each iteration starts with the same request: the 4 MiB input batch.
  std::uint32_t iteration = 0;
  for (const Event& e : t.events) {
    ASSERT_GE(e.iteration, iteration);
    if (e.iteration != iteration) {
      EXPECT_EQ(e.kind, EventKind::Alloc);
      EXPECT_EQ(e.size, 4194304u);
      iteration = e.iteration;
    }
  }
  EXPECT_EQ(iteration, 9u);
  // The median step takes 27 ms; the first one 1.5 s.
  EXPECT_EQ(t.meta.at("iteration_seconds"), "0.027256");
}

// lm-small-train-ctx100 builds its model while recording (121 allocations, no block live at
// the start), then runs three steps of 1244 allocations each; each starts with the 2048000 B
// embedding output after the previous step's logits are freed.
TEST(ImportPytorch, IterationsOfThreeTransformerSteps) {
  const Trace t = import_real("lm-small-train-ctx100")[0];
  EXPECT_EQ(t.meta.at("iteration_period"), "1244");
  EXPECT_EQ(t.meta.at("seeded_live_blocks"), "0");
  EXPECT_EQ(allocations_in(t, 0), 121u + 1244u);
  EXPECT_EQ(allocations_in(t, 1), 1244u);
  EXPECT_EQ(allocations_in(t, 2), 1244u);
  for (std::size_t i = 1; i < t.events.size(); ++i) {
    if (t.events[i].iteration != t.events[i - 1].iteration) {
      EXPECT_EQ(t.events[i].kind, EventKind::Alloc);
      EXPECT_EQ(t.events[i].size, 2048000u);
    }
  }
}

// One forward pass of 24 identical layers is one iteration, though its layers repeat exactly:
// the logits after the last layer end the repetition before the trace does.
TEST(ImportPytorch, RepeatedLayersOfOneForwardAreOneIteration) {
  const Trace t = import_real("lm-medium-inference-ctx256")[0];
  EXPECT_EQ(t.meta.at("iterations"), "1");
  EXPECT_EQ(t.meta.count("iteration_period"), 0u);
  EXPECT_EQ(t.events.back().size, 40960000u);
}

// Three devices, expandable segments, and an out-of-memory on device 1.
TEST(ImportPytorch, SeveralDevicesExpandableSegmentsAndOom) {
  const std::vector<Trace> traces = import_real("embedder-train-expandable-3gpu");
  ASSERT_EQ(traces.size(), 3u);
  const char* maps[] = {"175", "40", "78"};
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(traces[d].device, d);
    EXPECT_EQ(traces[d].meta.at("segment_map_events"), maps[d]);
  }
  EXPECT_EQ(traces[1].meta.at("segment_unmap_events"), "6");
  EXPECT_EQ(traces[1].meta.at("oom_events"), "1");
  EXPECT_EQ(traces[1].meta.at("oom_requested_bytes"), "5308694528");
  EXPECT_EQ(traces[0].meta.count("oom_events"), 0u);
}

// import -> write (text and binary) -> read back: the same trace, meta and iterations included.
TEST(ImportPytorch, ImportedTraceRoundTrips) {
  const Trace t = import_real("lm-2.7b-train-ctx128")[0];
  ASSERT_GT(t.events.size(), 10000u);
  for (const char* ext : {".trace", ".traceb"}) {
    const std::string path = std::string(STALLOC_BINARY_DIR) + "/import_pytorch_round_trip" + ext;
    write_trace(t, path);
    const Trace back = read_trace(path);
    std::remove(path.c_str());
    EXPECT_EQ(back, t) << ext;
  }
}

}  // namespace
}  // namespace stalloc
