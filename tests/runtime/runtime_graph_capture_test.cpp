// CUDA graph capture begun outside PyTorch's CUDAGraph (which stalloc refuses at its hook): a
// malloc on the captured stream is refused with GraphCaptureError, a free there waits until the
// capture is over (its event records would become nodes of the graph), and the default stream,
// which CUDA cannot capture, costs no query. The host driver captures through
// vmm::host_set_capturing.
#include <gtest/gtest.h>

#include "src/trace_replayer.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

using namespace testing_support;

constexpr vmm::StreamHandle kSide = 0x3000;

TEST(RuntimeGraphCapture, AMallocOnACapturedStreamIsRefusedAndOthersAreServed) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  ASSERT_EQ(vmm::host_set_capturing(*driver, kSide, true), vmm::Status::Success);
  try {
    rt.malloc(2 * kG, 0, kSide);
    FAIL() << "a malloc on a captured stream was served";
  } catch (const GraphCaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("captured into a CUDA graph"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(rt.stats().capture_refusals, 1u);
  EXPECT_EQ(rt.stats().allocations, 0u);
  void* p = rt.malloc(2 * kG, 0, 0);
  ASSERT_NE(p, nullptr);
  rt.free(p, 2 * kG, 0, 0);
  ASSERT_EQ(vmm::host_set_capturing(*driver, kSide, false), vmm::Status::Success);
  void* q = rt.malloc(2 * kG, 0, kSide);
  ASSERT_NE(q, nullptr);
  rt.free(q, 2 * kG, 0, kSide);
  EXPECT_EQ(rt.stats().frees, 2u);
}

TEST(RuntimeGraphCapture, TheDefaultStreamMakesNoCaptureQuery) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  for (int i = 0; i < 10; ++i) {
    void* p = rt.malloc(3 * kG, 0, 0);
    ASSERT_NE(p, nullptr);
    rt.free(p, 3 * kG, 0, 0);
  }
  rt.step();
  EXPECT_EQ(driver->counters().capture_queries, 0u);
}

// A tensor freed during the capture keeps its memory (another tensor would get bytes the graph
// may still use) until a malloc or a step finds the capture over.
TEST(RuntimeGraphCapture, AFreeOnACapturedStreamWaitsForTheCaptureToEnd) {
  auto driver = host_driver();
  Runtime rt(test_config(""), *driver);
  void* p = rt.malloc(2 * kG, 0, kSide);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(vmm::host_set_capturing(*driver, kSide, true), vmm::Status::Success);
  rt.free(p, 2 * kG, 0, kSide);
  EXPECT_EQ(rt.stats().capture_deferred_frees, 1u);
  EXPECT_EQ(rt.stats().frees, 0u);
  EXPECT_EQ(rt.stats().allocated_bytes, 2 * kG);
  void* q = rt.malloc(2 * kG, 0, 0);  // the capture goes on: p stays held
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_EQ(rt.stats().frees, 0u);
  ASSERT_EQ(vmm::host_set_capturing(*driver, kSide, false), vmm::Status::Success);
  rt.step();
  EXPECT_EQ(rt.stats().frees, 1u);
  EXPECT_EQ(rt.stats().allocated_bytes, 2 * kG);
  rt.free(q, 2 * kG, 0, 0);
  EXPECT_EQ(rt.stats().allocated_bytes, 0u);
  EXPECT_EQ(rt.stats().invalid_frees, 0u);
}

// replay_trace takes the stream handle of each trace stream index from ReplayOptions::streams
// (stalloc replay makes them on a GPU): a capture of the handle given for index 1 refuses that
// index's first malloc, and without the table the index itself is the handle.
TEST(RuntimeGraphCapture, ReplayUsesTheStreamHandlesGiven) {
  ThreadedTraceBuilder b;
  const std::uint64_t a = b.alloc(2 * kG, 1);
  b.free(a);
  auto driver = host_driver();
  vmm::StreamHandle made = 0;
  ASSERT_EQ(driver->stream_create(&made), vmm::Status::Success);
  ASSERT_EQ(vmm::host_set_capturing(*driver, made, true), vmm::Status::Success);
  {
    Runtime rt(test_config(""), *driver);
    const ReplayResult plain = replay_trace(rt, b.trace(), ReplayOptions{});
    EXPECT_EQ(plain.failed_allocations, 0u);
  }
  Runtime rt(test_config(""), *driver);
  ReplayOptions options;
  options.streams = {0, made};
  EXPECT_THROW(replay_trace(rt, b.trace(), options), GraphCaptureError);
  EXPECT_EQ(driver->stream_destroy(made), vmm::Status::Success);
}

}  // namespace
}  // namespace stalloc
