// The CUDA VMM rules, checked on every backend: the host emulation, backed or unbacked, must
// behave as the CUDA driver does, so code tested on the host runs the same on a GPU. The cuda
// instance skips when no driver or device is present, and fails instead when
// STALLOC_REQUIRE_CUDA=1 (gpu_check.sh). The unbacked host holds no data: the cases that check
// data patterns skip on it, and the one that also checks the books checks only those.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/vmm/vmm_test_support.h"
#include "vmm/chunk_pool.h"
#include "vmm/chunk_source.h"
#include "vmm/expandable_range.h"
#include "vmm/fault_injecting_driver.h"
#include "vmm/mapping.h"
#include "vmm/physical_chunk.h"
#include "vmm/va_reservation.h"
#include "vmm/vmm_error.h"

namespace stalloc::vmm {
namespace {

using testing::pattern;

class DriverConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    driver_ = testing::make_test_driver(GetParam(), &why);
    if (!driver_) {
      if (testing::cuda_required()) FAIL() << "STALLOC_REQUIRE_CUDA=1 but " << why;
      GTEST_SKIP() << why;
    }
    ASSERT_EQ(driver_->granularity(&g_), Status::Success);
    ASSERT_GT(g_, 0u);
  }

  void TearDown() override {
    if (!driver_) return;
    const DriverCounters c = driver_->counters();
    EXPECT_EQ(c.live_chunks, 0u) << "a test leaked chunks";
    EXPECT_EQ(c.live_reservations, 0u) << "a test leaked reservations";
    EXPECT_EQ(c.live_mappings, 0u) << "a test leaked mappings";
  }

  // Either host flavour: the host's own codes and handles.
  bool is_host() const { return GetParam().starts_with("host"); }
  // write_bytes and read_bytes work (all but the unbacked host).
  bool holds_data() const { return GetParam() != "host-unbacked"; }

  // A refusal: any error on CUDA (its codes are not all documented), InvalidValue on the host.
  void expect_refused(Status s) const {
    EXPECT_NE(s, Status::Success);
    if (is_host()) {
      EXPECT_EQ(s, Status::InvalidValue) << status_name(s);
    }
  }

  void write(DevicePtr ptr, const std::vector<std::uint8_t>& bytes) {
    ASSERT_EQ(driver_->write_bytes(ptr, bytes.data(), bytes.size()), Status::Success);
  }

  std::vector<std::uint8_t> read(DevicePtr ptr, std::size_t size) {
    std::vector<std::uint8_t> bytes(size);
    EXPECT_EQ(driver_->read_bytes(bytes.data(), ptr, size), Status::Success);
    return bytes;
  }

  std::unique_ptr<Driver> driver_;
  std::size_t g_ = 0;
};

TEST_P(DriverConformance, DataWrittenThroughOneMappingIsReadThroughAnAlias) {
  if (!holds_data()) GTEST_SKIP() << GetParam() << " holds no data";
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 3 * g_, 0, &range), Status::Success);
  Mapping first;
  Mapping alias;
  ASSERT_EQ(Mapping::map(*driver_, range.base(), g_, 0, chunk.handle(), &first), Status::Success);
  ASSERT_EQ(Mapping::map(*driver_, range.base() + 2 * g_, g_, 0, chunk.handle(), &alias),
            Status::Success);
  ASSERT_EQ(first.set_access(Access::ReadWrite), Status::Success);
  ASSERT_EQ(alias.set_access(Access::ReadWrite), Status::Success);

  const auto one = pattern(g_, 1);
  write(first.ptr(), one);
  EXPECT_EQ(read(alias.ptr(), g_), one);
  const auto two = pattern(g_, 2);
  write(alias.ptr(), two);
  EXPECT_EQ(read(first.ptr(), g_), two);
  EXPECT_EQ(driver_->counters().live_mappings, 2u);
}

TEST_P(DriverConformance, ChunkReleasedWhileMappedKeepsItsDataUntilUnmapped) {
  if (!holds_data()) GTEST_SKIP() << GetParam() << " holds no data";
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, g_, 0, &range), Status::Success);
  Mapping mapping;
  ASSERT_EQ(Mapping::map(*driver_, range.base(), g_, 0, chunk.handle(), &mapping),
            Status::Success);
  ASSERT_EQ(mapping.set_access(Access::ReadWrite), Status::Success);
  const auto bytes = pattern(g_, 3);
  write(mapping.ptr(), bytes);
  const ChunkHandle handle = chunk.handle();
  ASSERT_EQ(chunk.reset(), Status::Success);
  EXPECT_EQ(read(mapping.ptr(), g_), bytes);
  if (is_host()) {  // on CUDA a stale handle is undefined behaviour
    EXPECT_EQ(driver_->release(handle), Status::InvalidHandle) << "a released handle is gone";
  }
}

TEST_P(DriverConformance, PartialUnmapIsRefused) {
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, 2 * g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 2 * g_, 0, &range), Status::Success);
  ASSERT_EQ(driver_->map(range.base(), 2 * g_, 0, chunk.handle()), Status::Success);
  expect_refused(driver_->unmap(range.base(), g_));
  expect_refused(driver_->unmap(range.base() + g_, g_));
  EXPECT_EQ(driver_->counters().live_mappings, 1u);
  EXPECT_EQ(driver_->unmap(range.base(), 2 * g_), Status::Success);
}

TEST_P(DriverConformance, UnalignedSizesAndOffsetsAreRefused) {
  ChunkHandle handle = 0;
  expect_refused(driver_->create(&handle, g_ / 2));
  expect_refused(driver_->create(&handle, g_ + g_ / 2));
  DevicePtr ptr = 0;
  expect_refused(driver_->reserve(&ptr, g_ + g_ / 2));

  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, 2 * g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 4 * g_, 0, &range), Status::Success);
  expect_refused(driver_->map(range.base(), g_ / 2, 0, chunk.handle()));
  expect_refused(driver_->map(range.base(), g_, g_ / 2, chunk.handle()));
  expect_refused(driver_->map(range.base() + g_ / 2, g_, 0, chunk.handle()));
  expect_refused(driver_->map(range.base(), 2 * g_, g_, chunk.handle()));  // past the chunk
  // An aligned offset inside the chunk: cuMemMap documents that it must be zero for now.
  expect_refused(driver_->map(range.base(), g_, g_, chunk.handle()));
  EXPECT_EQ(driver_->counters().live_mappings, 0u);
}

TEST_P(DriverConformance, MapOutsideAReservationIsRefused) {
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, 2 * g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 2 * g_, 0, &range), Status::Success);
  expect_refused(driver_->map(range.base() + g_, 2 * g_, 0, chunk.handle()));  // runs past it
  const DevicePtr gone = range.base();
  ASSERT_EQ(range.reset(), Status::Success);
  expect_refused(driver_->map(gone, g_, 0, chunk.handle()));
  EXPECT_EQ(driver_->counters().live_mappings, 0u);
}

// A handle is mapped whole: CUDA answered CUDA_ERROR_NOT_SUPPORTED for part of one (H200).
TEST_P(DriverConformance, APartOfAChunkIsNotMapped) {
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, 2 * g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 2 * g_, 0, &range), Status::Success);
  const Status s = driver_->map(range.base(), g_, 0, chunk.handle());
  EXPECT_NE(s, Status::Success);
  if (s == Status::Success) {
    EXPECT_EQ(driver_->unmap(range.base(), g_), Status::Success);
  }
  EXPECT_EQ(s, Status::NotSupported) << status_name(s);
}

TEST_P(DriverConformance, UnknownHandlesAreRefused) {
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, g_, 0, &range), Status::Success);
  if (is_host()) {  // CUDA's handles are pointers: a made-up one may crash the driver
    EXPECT_EQ(driver_->map(range.base(), g_, 0, 12345), Status::InvalidHandle);
    EXPECT_EQ(driver_->release(12345), Status::InvalidHandle);
    EXPECT_EQ(driver_->event_query(12345), Status::InvalidHandle);
  }
  EXPECT_NE(driver_->free_reservation(range.base(), 2 * g_), Status::Success);
}

// set_access_bytes adds up what each successful call covered; refused calls add nothing.
TEST_P(DriverConformance, SetAccessBytesCountsWhatSuccessfulCallsCovered) {
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, 2 * g_, &chunk), Status::Success);
  PhysicalChunk small;
  ASSERT_EQ(PhysicalChunk::create(*driver_, g_, &small), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, 5 * g_, 0, &range), Status::Success);
  Mapping a;
  Mapping b;
  ASSERT_EQ(Mapping::map(*driver_, range.base(), 2 * g_, 0, chunk.handle(), &a), Status::Success);
  ASSERT_EQ(Mapping::map(*driver_, range.base() + 2 * g_, g_, 0, small.handle(), &b),
            Status::Success);
  const DriverCounters before = driver_->counters();
  EXPECT_EQ(before.set_access_bytes, 0u);
  ASSERT_EQ(driver_->set_access(range.base(), 3 * g_, Access::ReadWrite), Status::Success);  // 3g
  ASSERT_EQ(b.set_access(Access::ReadWrite), Status::Success);                              // 1g
  ASSERT_EQ(a.set_access(Access::ReadWrite), Status::Success);                              // 2g
  expect_refused(driver_->set_access(range.base() + 3 * g_, g_, Access::ReadWrite));  // unmapped
  expect_refused(driver_->set_access(range.base(), g_ / 2, Access::ReadWrite));       // unaligned
  const DriverCounters after = driver_->counters();
  EXPECT_EQ(after.set_accesses, 3u);
  EXPECT_EQ(after.set_access_bytes, 6 * g_);
}

TEST_P(DriverConformance, EventsRecordQueryAndWait) {
  EventHandle event = 0;
  ASSERT_EQ(driver_->event_create(&event), Status::Success);
  ASSERT_EQ(driver_->event_record(event, 0), Status::Success);
  const Status q = driver_->event_query(event);
  EXPECT_TRUE(q == Status::Success || (!is_host() && q == Status::NotReady)) << status_name(q);
  EXPECT_EQ(driver_->stream_wait_event(0, event), Status::Success);
  EXPECT_EQ(driver_->event_destroy(event), Status::Success);
  const DriverCounters c = driver_->counters();
  EXPECT_EQ(c.event_creates, 1u);
  EXPECT_EQ(c.event_records, 1u);
  EXPECT_EQ(c.event_queries, 1u);
  EXPECT_EQ(c.stream_waits, 1u);
  EXPECT_EQ(c.event_destroys, 1u);
  EXPECT_EQ(c.live_events, 0u);
}

// A device synchronisation leaves no recorded event pending, and is counted.
TEST_P(DriverConformance, SynchronizeCompletesRecordedEvents) {
  EventHandle event = 0;
  ASSERT_EQ(driver_->event_create(&event), Status::Success);
  ASSERT_EQ(driver_->event_record(event, 0), Status::Success);
  ASSERT_EQ(driver_->synchronize(), Status::Success);
  EXPECT_EQ(driver_->event_query(event), Status::Success);
  EXPECT_EQ(driver_->event_destroy(event), Status::Success);
  EXPECT_EQ(driver_->counters().synchronizes, 1u);
}

// Streams made are distinct from the default stream and from each other, take events, can be
// captured only outside these tests, and are destroyed once.
TEST_P(DriverConformance, StreamsMadeTakeEventsAndAreDestroyedOnce) {
  StreamHandle a = 0;
  StreamHandle b = 0;
  ASSERT_EQ(driver_->stream_create(&a), Status::Success);
  ASSERT_EQ(driver_->stream_create(&b), Status::Success);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  bool capturing = true;
  EXPECT_EQ(driver_->stream_is_capturing(a, &capturing), Status::Success);
  EXPECT_FALSE(capturing);
  capturing = true;
  EXPECT_EQ(driver_->stream_is_capturing(0, &capturing), Status::Success);
  EXPECT_FALSE(capturing);
  EXPECT_EQ(driver_->counters().capture_queries, 2u);
  EventHandle event = 0;
  ASSERT_EQ(driver_->event_create(&event), Status::Success);
  EXPECT_EQ(driver_->event_record(event, a), Status::Success);
  EXPECT_EQ(driver_->stream_wait_event(b, event), Status::Success);
  ASSERT_EQ(driver_->synchronize(), Status::Success);
  EXPECT_EQ(driver_->event_query(event), Status::Success);
  EXPECT_EQ(driver_->event_destroy(event), Status::Success);
  EXPECT_EQ(driver_->stream_destroy(a), Status::Success);
  EXPECT_EQ(driver_->stream_destroy(b), Status::Success);
  if (is_host()) {
    EXPECT_EQ(driver_->stream_destroy(a), Status::InvalidHandle);
  }
}

// Peers must be devices that can reach this one's memory; the device itself is not a peer.
// With the ones it can, a set_access covers each of them beside the owner.
TEST_P(DriverConformance, PeersAreDevicesThatCanReachTheMemory) {
  std::vector<int> peers;
  ASSERT_EQ(driver_->accessible_peers(&peers), Status::Success);
  EXPECT_EQ(std::count(peers.begin(), peers.end(), driver_->device()), 0);
  EXPECT_EQ(driver_->set_peers({driver_->device()}), Status::InvalidDevice);
  EXPECT_EQ(driver_->set_peers({4096}), Status::InvalidDevice);
  ASSERT_EQ(driver_->set_peers(peers), Status::Success);
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(*driver_, g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(*driver_, g_, 0, &range), Status::Success);
  Mapping m;
  ASSERT_EQ(Mapping::map(*driver_, range.base(), g_, 0, chunk.handle(), &m), Status::Success);
  ASSERT_EQ(m.set_access(Access::ReadWrite), Status::Success);
  EXPECT_EQ(driver_->counters().set_access_bytes, g_ * (1 + peers.size()));
  EXPECT_EQ(driver_->set_peers({}), Status::Success);
}

TEST_P(DriverConformance, ChunkPoolCountersAreExact) {
  {
    ChunkPool pool(*driver_, 4);
    EXPECT_EQ(pool.created(), 4u);
    EXPECT_EQ(pool.chunk_size(), g_);
    EXPECT_EQ(driver_->counters().live_chunks, 4u);
    EXPECT_EQ(pool.acquire(), 0u);
    EXPECT_EQ(pool.acquire(), 1u);
    EXPECT_EQ(pool.acquire(), 2u);
    EXPECT_EQ(pool.in_use(), 3u);
    pool.release(1);
    EXPECT_EQ(pool.in_use(), 2u);
    EXPECT_EQ(pool.peak_in_use(), 3u);
    EXPECT_EQ(pool.acquire(), 1u);
    EXPECT_EQ(pool.acquire(), 3u);
    EXPECT_EQ(pool.acquire(), std::nullopt);
    EXPECT_EQ(pool.in_use(), 4u);
    EXPECT_EQ(pool.peak_in_use(), 4u);
    pool.release(2);
    EXPECT_THROW(pool.release(2), UsageError);
    EXPECT_THROW(pool.release(9), UsageError);
    EXPECT_THROW(pool.handle(4), UsageError);
    EXPECT_NE(pool.handle(0), pool.handle(1));
    EXPECT_EQ(pool.in_use(), 3u);
    EXPECT_EQ(pool.peak_in_use(), 4u);
    EXPECT_EQ(driver_->counters().creates, 4u);
  }
  EXPECT_EQ(driver_->counters().releases, 4u);
}

TEST_P(DriverConformance, ExpandableRangeKeepsDataAcrossGrowAndShrink) {
  ChunkPool pool(*driver_, 2);
  PoolChunkSource from_pool(pool);
  FreshChunkSource fresh(*driver_);
  ExpandableRange range(*driver_, 8 * g_);
  EXPECT_EQ(range.reserved_bytes(), 8 * g_);

  ASSERT_EQ(range.grow(2 * g_, fresh), Status::Success);
  const auto front = pattern(2 * g_, 4);
  if (holds_data()) write(range.base(), front);
  ASSERT_EQ(range.grow(2 * g_, from_pool), Status::Success);
  EXPECT_EQ(pool.in_use(), 2u);
  EXPECT_EQ(range.mapped_bytes(), 4 * g_);
  EXPECT_EQ(range.chunk_count(), 4u);
  const auto back = pattern(2 * g_, 5);
  if (holds_data()) {
    EXPECT_EQ(read(range.base(), 2 * g_), front);
    write(range.base() + 2 * g_, back);
  }

  EXPECT_EQ(range.grow(g_, from_pool), Status::OutOfMemory) << "the pool is empty";
  EXPECT_EQ(range.mapped_bytes(), 4 * g_);
  EXPECT_EQ(range.grow(5 * g_, fresh), Status::OutOfMemory) << "past the reservation";
  EXPECT_EQ(range.grow(g_ / 2, fresh), Status::InvalidValue);
  EXPECT_EQ(range.shrink(g_ / 2), Status::InvalidValue);
  EXPECT_EQ(range.shrink(5 * g_), Status::InvalidValue);

  ASSERT_EQ(range.shrink(g_), Status::Success);
  EXPECT_EQ(pool.in_use(), 1u);
  EXPECT_EQ(range.mapped_bytes(), 3 * g_);
  if (holds_data()) {
    EXPECT_EQ(read(range.base(), 2 * g_), front);
    const std::vector<std::uint8_t> kept(back.begin(),
                                         back.begin() + static_cast<std::ptrdiff_t>(g_));
    EXPECT_EQ(read(range.base() + 2 * g_, g_), kept);
  }

  ASSERT_EQ(range.shrink(3 * g_), Status::Success);
  EXPECT_EQ(range.mapped_bytes(), 0u);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(driver_->counters().live_chunks, 2u) << "only the pool's chunks remain";
  ASSERT_EQ(range.grow(g_, fresh), Status::Success);
  EXPECT_EQ(driver_->counters().live_mappings, 1u);
}

// One fixed sequence of RAII operations touching every kind of failable call. Returns the first
// failure (thrown or returned), Success when all went through.
Status run_sequence(Driver& driver, std::size_t g) {
  try {
    VaReservation range;
    if (Status s = VaReservation::reserve(driver, 4 * g, 0, &range); s != Status::Success) {
      return s;
    }
    ChunkPool pool(driver, 3);
    PhysicalChunk chunk;
    if (Status s = PhysicalChunk::create(driver, g, &chunk); s != Status::Success) return s;
    Mapping first;
    Mapping alias;
    if (Status s = Mapping::map(driver, range.base(), g, 0, chunk.handle(), &first);
        s != Status::Success) {
      return s;
    }
    if (Status s = Mapping::map(driver, range.base() + g, g, 0, chunk.handle(), &alias);
        s != Status::Success) {
      return s;
    }
    if (Status s = driver.set_access(range.base(), 2 * g, Access::ReadWrite);
        s != Status::Success) {
      return s;
    }
    PoolChunkSource from_pool(pool);
    FreshChunkSource fresh(driver);
    ExpandableRange expandable(driver, 8 * g);
    if (Status s = expandable.grow(2 * g, from_pool); s != Status::Success) return s;
    if (Status s = expandable.grow(2 * g, fresh); s != Status::Success) return s;
    if (Status s = expandable.shrink(g); s != Status::Success) return s;
    return expandable.grow(g, from_pool);
  } catch (const VmmError& e) {
    return e.status();
  }
}

TEST_P(DriverConformance, FailingAnyCallOfASequenceLeaksNothing) {
  FaultInjectingDriver counting(*driver_);
  ASSERT_EQ(run_sequence(counting, g_), Status::Success);
  const std::uint64_t n = counting.calls(CallMask::All);
  EXPECT_EQ(counting.calls(CallMask::Reserve), 2u);
  EXPECT_EQ(counting.calls(CallMask::Create), 6u);
  EXPECT_EQ(counting.calls(CallMask::Map), 7u);
  EXPECT_EQ(counting.calls(CallMask::SetAccess), 4u);
  ASSERT_EQ(n, 19u);
  for (std::uint64_t k = 1; k <= n; ++k) {
    FaultInjectingDriver faulty(*driver_);
    faulty.fail_nth(k, CallMask::All);
    EXPECT_EQ(run_sequence(faulty, g_), Status::OutOfMemory) << "k=" << k;
    EXPECT_EQ(faulty.injected(), 1u) << "k=" << k;
    const DriverCounters c = driver_->counters();
    ASSERT_EQ(c.live_chunks, 0u) << "k=" << k;
    ASSERT_EQ(c.live_reservations, 0u) << "k=" << k;
    ASSERT_EQ(c.live_mappings, 0u) << "k=" << k;
  }
}

TEST_P(DriverConformance, FaultInjectionCountsOnlyTheMaskedKinds) {
  FaultInjectingDriver faulty(*driver_);
  faulty.fail_nth(2, CallMask::Map, Status::InvalidValue);
  PhysicalChunk chunk;
  ASSERT_EQ(PhysicalChunk::create(faulty, g_, &chunk), Status::Success);
  VaReservation range;
  ASSERT_EQ(VaReservation::reserve(faulty, 2 * g_, 0, &range), Status::Success);
  Mapping first;
  Mapping second;
  ASSERT_EQ(Mapping::map(faulty, range.base(), g_, 0, chunk.handle(), &first), Status::Success);
  EXPECT_EQ(Mapping::map(faulty, range.base() + g_, g_, 0, chunk.handle(), &second),
            Status::InvalidValue);
  EXPECT_FALSE(second);
  EXPECT_EQ(Mapping::map(faulty, range.base() + g_, g_, 0, chunk.handle(), &second),
            Status::Success);
  EXPECT_EQ(faulty.calls(CallMask::Map), 3u);
  EXPECT_EQ(faulty.calls(CallMask::Create | CallMask::Reserve), 2u);
  EXPECT_EQ(faulty.injected(), 1u);
  EXPECT_EQ(driver_->counters().maps, 2u);
}

// gtest names allow letters, digits and underscores only.
std::string backend_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Backends, DriverConformance,
                         ::testing::Values("host", "host-unbacked", "cuda"),
                         backend_name);

}  // namespace
}  // namespace stalloc::vmm
