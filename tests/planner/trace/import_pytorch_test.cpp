#include "planner/trace/import_pytorch.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

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

Event ev(EventKind kind, std::uint64_t id, std::uint64_t size, std::uint32_t stream, std::int64_t time_ns) {
  Event e;
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.stream = stream;
  e.time_ns = time_ns;
  return e;
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

}  // namespace
}  // namespace stalloc
