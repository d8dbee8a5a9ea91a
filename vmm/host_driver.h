// The host backend: CUDA's virtual memory management emulated on the CPU, so the allocator runs,
// and is tested, on machines without a GPU. See docs/vmm.md for the rules it enforces.
//
// Two flavours, one set of books:
// - backed (the default): chunks, reservations and mappings are real Linux memory mappings, so
//   pointers can be written and read and tests check data patterns.
// - unbacked (backed = false): "counts and checks but holds no memory". The same books and the
//   same refusals with the same codes, but no syscall at all: reservations get addresses from a
//   fake range that is never reused, nothing is host-accessible. This is what the simulator runs
//   the real runtime on, for millions of calls: every call is O(log n) in the live objects.
//
// Either flavour can lag (HostDriverOptions::lag), so that the paths where GPU work is still
// pending get exercised on a CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vmm/driver.h"

namespace stalloc::vmm {

// How long recorded events stay pending. Off (queries = 0): every recorded event is complete at
// once, as on a synchronous device. On (queries = N > 0):
// - Each event_record draws a count c: N when seed is 0, else uniformly from [0, N] with a
//   deterministic PRNG seeded with seed (one draw per record, in call order, so a run is
//   reproducible). Re-recording an event starts it over with a new count.
// - event_query of an incomplete record answers NotReady and counts as one query of that record
//   and of every incomplete record it depends on (see below). A record is complete once it has
//   been counted c times and every record it depends on is complete; the query after that
//   answers Success. With seed 0 a record is never held up by those it depends on (they are
//   counted whenever it is), so an event answers NotReady exactly N times, then Success, unless
//   queries of later records that depend on it counted it meanwhile (then fewer times).
// - A record depends on the records made before it on the same stream, and on the records that
//   stream_wait_event made its stream wait for before it: completion follows CUDA's stream order,
//   never showing a state a GPU could not be in (a later record complete, an earlier one not).
// - stream_wait_event does not block, query or complete anything; it only orders the records made
//   later on the waiting stream. Waiting for a complete or never-recorded event orders nothing.
// - An event never recorded answers Success, as on CUDA.
// - A stream holds at most kMaxPendingRecords incomplete records: one more completes its oldest
//   and every record made before that (a full launch queue makes CUDA's host wait too).
struct HostLag {
  static constexpr std::size_t kMaxPendingRecords = std::size_t{1} << 16;
  std::uint32_t queries = 0;  // N; 0: no lag
  std::uint64_t seed = 0;     // 0: every record takes N; else each draws from [0, N]
};

struct HostDriverOptions {
  // Chunk, reservation and mapping granularity: a power of two and a multiple of the page size.
  std::size_t granularity = 2 << 20;
  // Most live mappings. 0: when backed, as many as the kernel's memory areas allow
  // (vm.max_map_count, less the areas the process already has and a margin of 1024); unbacked,
  // unlimited (no kernel area is used).
  std::size_t max_mappings = 0;
  // Most physical bytes created at once; 0: unlimited. Past it create() returns OutOfMemory.
  std::size_t max_bytes = 0;
  int device = 0;
  // Devices the emulated process sees (at least device + 1): each can be given access to every
  // other's memory (Driver::accessible_peers, set_peers).
  int devices = 1;
  // false: keep the books and refuse what CUDA refuses, but hold no memory and make no syscall.
  // Reservations lie in a fake range from kUnbackedBase, never reused; host_accessible() is
  // false (write_bytes and read_bytes return NotSupported); total_memory is max_bytes, or
  // kUnbackedTotalMemory when that is 0.
  bool backed = true;
  HostLag lag;

  static constexpr std::uintptr_t kUnbackedBase = 0x7e0000000000;
  static constexpr std::size_t kUnbackedTotalMemory = std::size_t{1} << 40;
};

// Throws DriverUnavailable for options it cannot honour (granularity not a power of two, or not
// a multiple of the page size).
std::unique_ptr<Driver> make_host_driver(const HostDriverOptions& options = {});

// Begins (true) or ends (false) a CUDA graph capture of `stream` on a host driver, as
// cudaStreamBeginCapture / cudaStreamEndCapture would: from then on Driver::stream_is_capturing
// answers so, and tests see what a capture begun outside PyTorch does. InvalidValue for stream 0
// (CUDA refuses to capture the legacy default stream) and NotSupported for a driver that is not
// a host driver.
Status host_set_capturing(Driver& driver, StreamHandle stream, bool capturing);

}  // namespace stalloc::vmm
