// Trace file speed, in requests (events) per second: parsing and writing, text and binary.
// The trace resembles a training run: tensors allocated and freed in nested order, sizes from a
// few KiB to hundreds of MiB, two streams, phases and layers set, host time stamps present.
#include <benchmark/benchmark.h>

#include <random>
#include <sstream>
#include <string>

#include "trace/trace_io.h"

namespace {

stalloc::Trace synthetic_trace(std::size_t events) {
  std::mt19937_64 rng(42);
  stalloc::Trace t;
  t.meta["source"] = "bench";
  std::vector<stalloc::Event> live;
  std::uint64_t next_id = 1;
  std::int64_t now = 1'000'000;
  while (t.events.size() < events) {
    now += static_cast<std::int64_t>(rng() % 5000);
    if (live.empty() || (live.size() < 200 && rng() % 2 == 0)) {
      stalloc::Event e;
      e.id = next_id++;
      e.size = (std::uint64_t{1} << (12 + rng() % 17)) + 512 * (rng() % 8);
      e.stream = static_cast<std::uint32_t>(rng() % 2);
      e.iteration = static_cast<std::uint32_t>(t.events.size() / 100000);
      e.phase = static_cast<stalloc::Phase>(1 + rng() % 3);
      e.microbatch = static_cast<std::int32_t>(rng() % 8);
      e.layer = static_cast<std::int32_t>(rng() % 80);
      e.time_ns = now;
      live.push_back(e);
      t.events.push_back(e);
    } else {
      stalloc::Event e = live.back();
      live.pop_back();
      e.kind = stalloc::EventKind::Free;
      e.time_ns = now;
      t.events.push_back(e);
    }
  }
  return t;
}

std::string serialise(const stalloc::Trace& t, stalloc::TraceFormat f) {
  std::ostringstream out;
  stalloc::write_trace(t, out, f);
  return out.str();
}

void parse(benchmark::State& state, stalloc::TraceFormat format) {
  const auto events = static_cast<std::size_t>(state.range(0));
  const std::string data = serialise(synthetic_trace(events), format);
  for (auto _ : state) {
    stalloc::Trace t = stalloc::parse_trace(data, "bench");
    benchmark::DoNotOptimize(t.events.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * events));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * data.size()));
}

void write(benchmark::State& state, stalloc::TraceFormat format) {
  const auto events = static_cast<std::size_t>(state.range(0));
  const stalloc::Trace t = synthetic_trace(events);
  for (auto _ : state) {
    std::ostringstream out;
    stalloc::write_trace(t, out, format);
    benchmark::DoNotOptimize(out.tellp());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * events));
}

void BM_ParseText(benchmark::State& state) { parse(state, stalloc::TraceFormat::Text); }
void BM_ParseBinary(benchmark::State& state) { parse(state, stalloc::TraceFormat::Binary); }
void BM_WriteText(benchmark::State& state) { write(state, stalloc::TraceFormat::Text); }
void BM_WriteBinary(benchmark::State& state) { write(state, stalloc::TraceFormat::Binary); }

}  // namespace

BENCHMARK(BM_ParseText)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseBinary)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WriteText)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WriteBinary)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
