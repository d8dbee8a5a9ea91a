// `stalloc vmm-demo`: walks through the VMM layer on a chosen backend, step by step, so a user
// can see on their own machine (GPU or not) what the allocator relies on: chunks, reservations,
// one chunk mapped at two addresses, an expandable range, and a clean teardown.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "tools/stalloc/command.h"
#include "vmm/chunk_pool.h"
#include "vmm/chunk_source.h"
#include "vmm/driver_factory.h"
#include "vmm/expandable_range.h"
#include "vmm/mapping.h"
#include "vmm/physical_chunk.h"
#include "vmm/va_reservation.h"
#include "vmm/vmm_error.h"

namespace stalloc::cli {
namespace {

using vmm::Status;

void check(Status s, const std::string& what) {
  if (s != Status::Success) throw vmm::VmmError(what, s);
}

void print_counters(const vmm::Driver& driver) {
  const vmm::DriverCounters c = driver.counters();
  std::cout << "  counters: creates=" << c.creates << " releases=" << c.releases
            << " reserves=" << c.reserves << " frees=" << c.frees << " maps=" << c.maps
            << " unmaps=" << c.unmaps << " set_accesses=" << c.set_accesses << "\n"
            << "            live_chunks=" << c.live_chunks
            << " live_reservations=" << c.live_reservations
            << " live_mappings=" << c.live_mappings
            << " chunk_bytes=" << format_bytes(c.chunk_bytes)
            << " peak_chunk_bytes=" << format_bytes(c.peak_chunk_bytes) << "\n";
}

std::vector<std::uint8_t> demo_pattern(std::size_t size) {
  std::vector<std::uint8_t> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);
  return bytes;
}

void run_demo(vmm::Driver& driver) {
  std::size_t g = 0;
  check(driver.granularity(&g), "granularity");
  std::cout << "backend " << driver.name() << ", device " << driver.device() << ", granularity "
            << format_bytes(g) << "\n";
  {
    std::cout << "1. create a pool of 4 chunks\n";
    vmm::ChunkPool pool(driver, 4);
    print_counters(driver);

    std::cout << "2. reserve two ranges of 2 chunks each\n";
    vmm::VaReservation first_range;
    vmm::VaReservation second_range;
    check(vmm::VaReservation::reserve(driver, 2 * g, 0, &first_range), "reserve");
    check(vmm::VaReservation::reserve(driver, 2 * g, 0, &second_range), "reserve");
    print_counters(driver);

    std::cout << "3. map chunk 0 at both ranges and grant access\n";
    const auto chunk = pool.acquire();
    if (!chunk) throw UsageError("the pool gave no chunk");
    vmm::Mapping here;
    vmm::Mapping there;
    check(vmm::Mapping::map(driver, first_range.base(), g, 0, pool.handle(*chunk), &here), "map");
    check(vmm::Mapping::map(driver, second_range.base(), g, 0, pool.handle(*chunk), &there),
          "map");
    check(here.set_access(vmm::Access::ReadWrite), "set_access");
    check(there.set_access(vmm::Access::ReadWrite), "set_access");
    print_counters(driver);

    std::cout << "4. write " << format_bytes(g) << " through one address, read through the other\n";
    const auto written = demo_pattern(g);
    std::vector<std::uint8_t> read(g);
    check(driver.write_bytes(here.ptr(), written.data(), g), "write");
    check(driver.read_bytes(read.data(), there.ptr(), g), "read");
    if (read != written) throw vmm::VmmError("the alias shows other data", Status::Unknown);
    std::cout << "  the alias shows the same bytes\n";

    std::cout << "5. grow an expandable range by 2 chunks from the pool, then 1 fresh chunk\n";
    vmm::PoolChunkSource from_pool(pool);
    vmm::FreshChunkSource fresh(driver);
    vmm::ExpandableRange expandable(driver, 16 * g);
    check(expandable.grow(2 * g, from_pool), "grow");
    check(expandable.grow(g, fresh), "grow");
    std::cout << "  mapped " << format_bytes(expandable.mapped_bytes()) << " of "
              << format_bytes(expandable.reserved_bytes()) << "; pool in use " << pool.in_use()
              << " of " << pool.created() << "\n";
    print_counters(driver);

    std::cout << "6. shrink it by 2 chunks\n";
    check(expandable.shrink(2 * g), "shrink");
    std::cout << "  mapped " << format_bytes(expandable.mapped_bytes()) << "; pool in use "
              << pool.in_use() << ", peak " << pool.peak_in_use() << "\n";
    print_counters(driver);

    std::cout << "7. clean up\n";
    check(here.reset(), "unmap");
    check(there.reset(), "unmap");
    pool.release(*chunk);
  }
  print_counters(driver);
  const vmm::DriverCounters c = driver.counters();
  if (c.live_chunks != 0 || c.live_reservations != 0 || c.live_mappings != 0) {
    throw vmm::VmmError("something was left behind", Status::Unknown);
  }
  std::cout << "nothing left: 0 chunks, 0 reservations, 0 mappings\n";
}

int vmm_demo(const std::vector<std::string>& raw) {
  Args args(raw);
  std::string backend = "auto";
  args.option("--backend", &backend);
  vmm::HostDriverOptions host;
  std::string granularity;
  if (args.option("--granularity", &granularity)) {
    const auto bytes = parse_bytes(granularity);
    if (!bytes || *bytes == 0) {
      throw UsageError("--granularity: expected a byte size such as 2MiB or 65536, got '" +
                       granularity + "'");
    }
    host.granularity = static_cast<std::size_t>(*bytes);
  }
  if (!args.positionals().empty()) throw UsageError("unexpected argument " + args.positionals()[0]);
  if (backend != "host" && backend != "cuda" && backend != "auto") {
    throw UsageError("--backend: expected host, cuda or auto, got '" + backend + "'");
  }
  std::unique_ptr<vmm::Driver> driver;
  try {
    driver = vmm::make_driver(backend, host);
  } catch (const vmm::DriverUnavailable& e) {
    std::cerr << "stalloc vmm-demo: " << e.what() << "\n";
    return 1;
  }
  run_demo(*driver);
  return 0;
}

STALLOC_COMMAND(Command{
    "vmm-demo", "show the VMM layer at work: chunks, aliases, an expandable range",
    "usage: stalloc vmm-demo [--backend host|cuda|auto] [--granularity BYTES]\n\n"
    "Creates a pool of chunks, reserves ranges, maps one chunk at two addresses, writes through\n"
    "one and reads through the other, grows and shrinks an expandable range, prints the driver\n"
    "counters after each step, and checks that nothing is left at the end.\n\n"
    "  --backend        host (Linux emulation), cuda, or auto (cuda when available; default)\n"
    "  --granularity    chunk size of the host backend (default 2MiB); the cuda backend uses the\n"
    "                   device's",
    vmm_demo});

}  // namespace
}  // namespace stalloc::cli
