#include "trace/import_artifact.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace stalloc {
namespace {

std::string error_of(const std::string& text) {
  try {
    import_stalloc_artifact(text, "art.log");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(ImportArtifact, MarkersSetIterationPhaseAndMicrobatch) {
  Trace t = import_stalloc_artifact(
      "1 0x1000 4096 0\n"
      "Iteration Index : 3\n"
      "micro-batch : F\n"
      "1 8192 100 0x7f00\n"
      "\n"
      "micro-batch : F\n"
      "0 0x1000 4096 0\n"
      "micro-batch : B\n"
      "1 4096 50 0\n"
      "0 999 1 0\n"
      "Iteration Index: 4\n"
      "0 8192 100 0x7f00\n",
      "logs/art.log");
  ASSERT_EQ(t.events.size(), 5u);
  const Event& first = t.events[0];
  EXPECT_EQ(first.kind, EventKind::Alloc);
  EXPECT_EQ(first.iteration, 0u);
  EXPECT_EQ(first.phase, Phase::Unknown);
  EXPECT_EQ(first.microbatch, -1);
  EXPECT_EQ(t.events[1].iteration, 3u);
  EXPECT_EQ(t.events[1].phase, Phase::Forward);
  EXPECT_EQ(t.events[1].microbatch, 0);
  EXPECT_EQ(t.events[1].stream, 1u);  // raw 0x7f00, first non-default stream
  EXPECT_EQ(t.events[2].kind, EventKind::Free);
  EXPECT_EQ(t.events[2].id, first.id);
  EXPECT_EQ(t.events[2].microbatch, 1);
  EXPECT_EQ(t.events[3].phase, Phase::Backward);
  EXPECT_EQ(t.events[3].microbatch, 0);
  EXPECT_EQ(t.events[3].size, 50u);
  EXPECT_EQ(t.events[4].kind, EventKind::Free);
  EXPECT_EQ(t.events[4].iteration, 4u);
  EXPECT_EQ(t.events[4].phase, Phase::Unknown);
  EXPECT_EQ(t.events[4].size, 100u);
  EXPECT_EQ(t.meta.at("source"), "stalloc-artifact");
  EXPECT_EQ(t.meta.at("input"), "art.log");
  EXPECT_EQ(t.meta.at("skipped_unknown_frees"), "1");  // the free of 999
  EXPECT_EQ(validate_trace(t), "");
}

TEST(ImportArtifact, BadLinesAreErrorsWithLineNumbers) {
  EXPECT_NE(error_of("1 0x10 8 0\nhello world\n").find("art.log:2: expected '1 PTR SIZE STREAM'"), std::string::npos);
  EXPECT_NE(error_of("2 0x10 8 0\n").find("art.log:1:"), std::string::npos);
  EXPECT_NE(error_of("1 0x10 8\n").find("art.log:1:"), std::string::npos);
  EXPECT_NE(error_of("1 0xzz 8 0\n").find("expected PTR"), std::string::npos);
  EXPECT_NE(error_of("1 16 -8 0\n").find("expected SIZE"), std::string::npos);
  EXPECT_NE(error_of("Iteration Index : x\n").find("art.log:1: expected 'Iteration Index : N'"), std::string::npos);
  EXPECT_NE(error_of("micro-batch : X\n").find("'micro-batch : F' or 'micro-batch : B'"), std::string::npos);
  EXPECT_NE(error_of("1 16 8 0\n1 0x10 8 0\n").find("art.log:2: allocation at 0x10 which is still live"),
            std::string::npos);
}

}  // namespace
}  // namespace stalloc
