// StreamSync's free marks: memory freed on one stream and reused on another makes the new
// stream wait for the old one's work up to a mark made after the free, not for everything
// enqueued there until the reuse (the false serialization of compute with communication that an
// event recorded at the reuse causes). A mark made before the free never stands for it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/stream_sync.h"
#include "vmm/host_driver.h"

namespace stalloc {
namespace {

// Forwards to a host driver and logs the event calls; event_record can be made to fail.
class LoggingDriver final : public vmm::Driver {
 public:
  struct Call {
    std::string what;  // "record" or "wait"
    vmm::EventHandle event;
    vmm::StreamHandle stream;
  };
  std::vector<Call> calls;
  bool fail_records = false;

  std::string_view name() const override { return inner_->name(); }
  int device() const override { return inner_->device(); }
  vmm::Status granularity(std::size_t* out) override { return inner_->granularity(out); }
  vmm::Status total_memory(std::size_t* out) override { return inner_->total_memory(out); }
  bool total_memory_enforced() const override { return inner_->total_memory_enforced(); }
  vmm::Status create(vmm::ChunkHandle* out, std::size_t size) override { return inner_->create(out, size); }
  vmm::Status release(vmm::ChunkHandle chunk) override { return inner_->release(chunk); }
  vmm::Status reserve(vmm::DevicePtr* out, std::size_t size, std::size_t alignment) override {
    return inner_->reserve(out, size, alignment);
  }
  vmm::Status free_reservation(vmm::DevicePtr ptr, std::size_t size) override {
    return inner_->free_reservation(ptr, size);
  }
  vmm::Status map(vmm::DevicePtr ptr, std::size_t size, std::size_t offset,
                  vmm::ChunkHandle chunk) override {
    return inner_->map(ptr, size, offset, chunk);
  }
  vmm::Status unmap(vmm::DevicePtr ptr, std::size_t size) override { return inner_->unmap(ptr, size); }
  vmm::Status set_access(vmm::DevicePtr ptr, std::size_t size, vmm::Access access) override {
    return inner_->set_access(ptr, size, access);
  }
  vmm::Status event_create(vmm::EventHandle* out) override { return inner_->event_create(out); }
  vmm::Status event_destroy(vmm::EventHandle event) override { return inner_->event_destroy(event); }
  vmm::Status event_record(vmm::EventHandle event, vmm::StreamHandle stream) override {
    if (fail_records) return vmm::Status::Unknown;
    calls.push_back({"record", event, stream});
    return inner_->event_record(event, stream);
  }
  vmm::Status event_query(vmm::EventHandle event) override { return inner_->event_query(event); }
  vmm::Status stream_wait_event(vmm::StreamHandle stream, vmm::EventHandle event) override {
    calls.push_back({"wait", event, stream});
    return inner_->stream_wait_event(stream, event);
  }
  bool host_accessible() const override { return inner_->host_accessible(); }
  vmm::DriverCounters counters() const override { return inner_->counters(); }

 private:
  std::unique_ptr<vmm::Driver> inner_ = vmm::make_host_driver();
};

constexpr vmm::StreamHandle kCompute = 0;
constexpr vmm::StreamHandle kComm = 0x20;

struct Fixture {
  LoggingDriver driver;
  StreamSync sync{driver};
  std::uint32_t compute = sync.index_of(kCompute);
  std::uint32_t comm = sync.index_of(kComm);
};

// Today's behaviour, kept where no free was marked: an event recorded on the old stream at the
// reuse, waited for by the new one.
TEST(StreamSyncFreeMarks, WithoutAMarkTheReuseRecordsAnEventThen) {
  Fixture f;
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm));
  ASSERT_EQ(f.driver.calls.size(), 2u);
  EXPECT_EQ(f.driver.calls[0].what, "record");
  EXPECT_EQ(f.driver.calls[0].stream, kCompute);
  EXPECT_EQ(f.driver.calls[1].what, "wait");
  EXPECT_EQ(f.driver.calls[1].stream, kComm);
  EXPECT_EQ(f.driver.calls[1].event, f.driver.calls[0].event);
  EXPECT_EQ(f.sync.waits_on_free_marks(), 0u);
}

// With the free marked, the reuse records nothing: the new stream waits on the event recorded
// at the free, before the compute queued after it.
TEST(StreamSyncFreeMarks, TheReuseWaitsOnTheEventRecordedAtTheFree) {
  Fixture f;
  const StreamSync::FreeStamp freed = f.sync.now();
  ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));
  ASSERT_EQ(f.driver.calls.size(), 1u);
  const LoggingDriver::Call mark = f.driver.calls[0];
  EXPECT_EQ(mark.what, "record");
  EXPECT_EQ(mark.stream, kCompute);
  f.driver.calls.clear();
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm, freed));
  ASSERT_EQ(f.driver.calls.size(), 1u);
  EXPECT_EQ(f.driver.calls[0].what, "wait");
  EXPECT_EQ(f.driver.calls[0].stream, kComm);
  EXPECT_EQ(f.driver.calls[0].event, mark.event);
  EXPECT_EQ(f.sync.waits(), 1u);
  EXPECT_EQ(f.sync.waits_on_free_marks(), 1u);
}

// Memory whose free has no stamp is never covered by a mark.
TEST(StreamSyncFreeMarks, UnstampedMemoryFallsBack) {
  Fixture f;
  ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));
  f.driver.calls.clear();
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm));
  ASSERT_EQ(f.driver.calls.size(), 2u);
  EXPECT_EQ(f.driver.calls[0].what, "record");
  EXPECT_EQ(f.sync.waits_on_free_marks(), 0u);
}

// A stream that frees often is marked at one free in kFreesPerMark: memory freed after its
// latest mark falls back to an event recorded at the reuse until the next mark is made, and
// waits on that one after.
TEST(StreamSyncFreeMarks, AMarkMadeBeforeTheFreeDoesNotStandForIt) {
  Fixture f;
  ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));  // marked
  const StreamSync::FreeStamp freed = f.sync.now();
  ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));  // this memory's free: not marked
  ASSERT_EQ(f.driver.calls.size(), 1u);
  f.driver.calls.clear();
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm, freed));
  ASSERT_EQ(f.driver.calls.size(), 2u);
  EXPECT_EQ(f.driver.calls[0].what, "record");
  EXPECT_EQ(f.sync.waits_on_free_marks(), 0u);
  for (std::uint64_t i = 2; i < StreamSync::kFreesPerMark; ++i) {
    ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));
  }
  EXPECT_EQ(f.driver.calls.size(), 2u);
  ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));  // kFreesPerMark later: marked
  ASSERT_EQ(f.driver.calls.size(), 3u);
  const vmm::EventHandle mark = f.driver.calls[2].event;
  f.driver.calls.clear();
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm, freed));
  ASSERT_EQ(f.driver.calls.size(), 1u);
  EXPECT_EQ(f.driver.calls[0].event, mark);
  EXPECT_EQ(f.sync.waits_on_free_marks(), 1u);
}

// A stream that frees rarely is marked at each of its frees: the compute stream's frees in
// between age its mark.
TEST(StreamSyncFreeMarks, AStreamThatFreesRarelyIsMarkedAtEachFree) {
  Fixture f;
  int comm_marks = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t i = 0; i < StreamSync::kFreesPerMark; ++i) {
      ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.compute)));
    }
    f.driver.calls.clear();
    ASSERT_TRUE(f.sync.note_free(StreamSync::bit(f.comm)));
    for (const LoggingDriver::Call& c : f.driver.calls) comm_marks += c.stream == kComm;
  }
  EXPECT_EQ(comm_marks, 3);
}

// A single stream: no reuse changes stream, so frees cost no driver call.
TEST(StreamSyncFreeMarks, OneStreamMarksNothing) {
  LoggingDriver driver;
  StreamSync sync(driver);
  const std::uint32_t only = sync.index_of(kCompute);
  const StreamSync::FreeStamp freed = sync.now();
  ASSERT_TRUE(sync.note_free(StreamSync::bit(only)));
  EXPECT_TRUE(driver.calls.empty());
  // A second stream appears: a reuse of memory freed before falls back to a fresh event.
  const std::uint32_t comm = sync.index_of(kComm);
  ASSERT_TRUE(sync.order_after(StreamSync::bit(only), comm, freed));
  ASSERT_EQ(driver.calls.size(), 2u);
  EXPECT_EQ(driver.calls[0].what, "record");
}

// A mark that could not be recorded is dropped, never left stale: the reuse records afresh.
TEST(StreamSyncFreeMarks, AFailedMarkFallsBackToAFreshEvent) {
  Fixture f;
  const StreamSync::FreeStamp freed = f.sync.now();
  f.driver.fail_records = true;
  EXPECT_FALSE(f.sync.note_free(StreamSync::bit(f.compute)));
  f.driver.fail_records = false;
  f.driver.calls.clear();
  ASSERT_TRUE(f.sync.order_after(StreamSync::bit(f.compute), f.comm, freed));
  ASSERT_EQ(f.driver.calls.size(), 2u);
  EXPECT_EQ(f.driver.calls[0].what, "record");
  EXPECT_EQ(f.sync.waits_on_free_marks(), 0u);
}

// On the lagging host driver: the comm stream's work after the reuse depends on the compute
// stream's work before the free, not on the compute work queued after it.
TEST(StreamSyncFreeMarks, UnderLagTheNewStreamDoesNotWaitForLaterWork) {
  vmm::HostDriverOptions options;
  options.lag.queries = 5;
  auto driver = vmm::make_host_driver(options);
  StreamSync sync(*driver);
  const std::uint32_t compute = sync.index_of(kCompute);
  const std::uint32_t comm = sync.index_of(kComm);
  const StreamSync::FreeStamp freed = sync.now();
  ASSERT_TRUE(sync.note_free(StreamSync::bit(compute)));
  // Compute work queued after the free, standing for the next layers' kernels: a record that
  // completes only after many queries.
  vmm::EventHandle later = 0;
  ASSERT_EQ(driver->event_create(&later), vmm::Status::Success);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(driver->event_record(later, kCompute), vmm::Status::Success);
  ASSERT_TRUE(sync.order_after(StreamSync::bit(compute), comm, freed));
  vmm::EventHandle after_reuse = 0;
  ASSERT_EQ(driver->event_create(&after_reuse), vmm::Status::Success);
  ASSERT_EQ(driver->event_record(after_reuse, kComm), vmm::Status::Success);
  int queries = 0;
  while (driver->event_query(after_reuse) != vmm::Status::Success && queries < 100) ++queries;
  EXPECT_EQ(driver->event_query(later), vmm::Status::NotReady)
      << "the comm stream's work completed only after the compute work queued after the free";
  driver->event_destroy(later);
  driver->event_destroy(after_reuse);
}

}  // namespace
}  // namespace stalloc
