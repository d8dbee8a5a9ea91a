#include <gtest/gtest.h>

#include <tuple>

#include "src/runtime_config.h"
#include "tests/runtime/runtime_test_support.h"

namespace stalloc {
namespace {

TEST(RuntimeConfig, EmptyGivesDefaults) {
  RuntimeConfig c = parse_runtime_config("");
  EXPECT_EQ(c.backend, "auto");
  EXPECT_EQ(c.mode, PlanMode::Alias);
  EXPECT_TRUE(c.mode_auto);
  EXPECT_EQ(c.profile_iterations, 1u);
  EXPECT_EQ(c.small_size, 1u << 20);
  EXPECT_EQ(c.large_size, 16u << 20);
  EXPECT_EQ(c.online_page, 0u);
  EXPECT_EQ(c.extent_size, 12u << 20);
  EXPECT_EQ(c.max_mappings, 0u);
  EXPECT_EQ(c.capacity, 0u);
  EXPECT_TRUE(c.auto_step);
  EXPECT_FALSE(c.record_trace);
  EXPECT_TRUE(c.pool_runs);
}

TEST(RuntimeConfig, ParsesEveryKey) {
  RuntimeConfig c = parse_runtime_config(
      "backend:host, mode:windowed,profile_iterations:3,granularity:64KiB,small_size:4096,"
      "large_size:0,online_page:20MiB,extent_size:4MiB,capacity:24GiB,auto_step:false,plan_cache_size:2,record_trace:true,windows:16,"
      "lookahead:4,pool_runs:false,varying_sizes:dynamic,peer_access:all,log:/tmp/stalloc.log");
  EXPECT_EQ(c.backend, "host");
  EXPECT_EQ(c.mode, PlanMode::Windowed);
  EXPECT_EQ(c.profile_iterations, 3u);
  EXPECT_EQ(c.granularity, 64u * 1024);
  EXPECT_EQ(c.small_size, 4096u);
  EXPECT_EQ(c.large_size, 0u);
  EXPECT_EQ(c.online_page, 20u << 20);
  EXPECT_EQ(c.extent_size, 4u << 20);
  EXPECT_EQ(c.capacity, 24ull << 30);
  EXPECT_FALSE(c.auto_step);
  EXPECT_EQ(c.plan_cache_size, 2u);
  EXPECT_TRUE(c.record_trace);
  EXPECT_EQ(c.windows, 16u);
  EXPECT_EQ(c.lookahead, 4u);
  EXPECT_FALSE(c.pool_runs);
  EXPECT_EQ(c.varying_sizes, VaryingSizes::Dynamic);
  EXPECT_TRUE(c.peer_access);
  EXPECT_EQ(c.log, "/tmp/stalloc.log");
}

TEST(RuntimeConfig, ModesAndTheMappingLimit) {
  for (const auto& [text, mode, is_auto] :
       {std::tuple{"mode:auto", PlanMode::Alias, true}, std::tuple{"mode:alias", PlanMode::Alias, false},
        std::tuple{"mode:offset", PlanMode::Offset, false},
        std::tuple{"mode:windowed", PlanMode::Windowed, false}}) {
    const RuntimeConfig c = parse_runtime_config(text);
    EXPECT_EQ(c.mode, mode) << text;
    EXPECT_EQ(c.mode_auto, is_auto) << text;
    EXPECT_EQ(parse_runtime_config(format_runtime_config(c)).mode_auto, is_auto) << text;
  }
  EXPECT_EQ(parse_runtime_config("max_mappings:50000").max_mappings, 50000u);
}

TEST(RuntimeConfig, FormatRoundTrips) {
  RuntimeConfig c =
      parse_runtime_config("backend:host,mode:windowed,capacity:1GiB,windows:3,peer_access:all");
  RuntimeConfig again = parse_runtime_config(format_runtime_config(c));
  EXPECT_TRUE(again.peer_access);
  EXPECT_FALSE(parse_runtime_config(format_runtime_config(RuntimeConfig{})).peer_access);
  EXPECT_EQ(again.backend, "host");
  EXPECT_EQ(again.mode, PlanMode::Windowed);
  EXPECT_EQ(again.capacity, 1ull << 30);
  EXPECT_EQ(again.windows, 3u);
  EXPECT_FALSE(parse_runtime_config(format_runtime_config(parse_runtime_config("pool_runs:false"))).pool_runs);
}

TEST(RuntimeConfig, EveryVaryingSizesPolicyRoundTrips) {
  for (const auto& [text, policy] :
       {std::pair{"off", VaryingSizes::Off}, std::pair{"dynamic", VaryingSizes::Dynamic},
        std::pair{"largest", VaryingSizes::Largest}, std::pair{"auto", VaryingSizes::Auto}}) {
    SCOPED_TRACE(text);
    RuntimeConfig c = parse_runtime_config(std::string("varying_sizes:") + text);
    EXPECT_EQ(c.varying_sizes, policy);
    EXPECT_EQ(parse_runtime_config(format_runtime_config(c)).varying_sizes, policy);
  }
}

// Each bad string must name the offending key (or the item) in the message.
struct BadConf {
  const char* text;
  const char* mentions;
};

class RuntimeConfigBad : public testing::TestWithParam<BadConf> {};

TEST_P(RuntimeConfigBad, RaisesConfigErrorNamingTheKey) {
  try {
    parse_runtime_config(GetParam().text);
    FAIL() << "accepted " << GetParam().text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().mentions), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RuntimeConfigBad,
    testing::Values(BadConf{"backend:tpu", "'backend'"}, BadConf{"backend:tpu", "host, cuda or auto"},
                    BadConf{"mode:fastest", "auto, alias, offset or windowed"},
                    BadConf{"profile_iterations:-1", "'profile_iterations'"},
                    BadConf{"profile_iterations:1x", "'profile_iterations'"},
                    BadConf{"granularity:3000", "power of two"},
                    BadConf{"granularity:huge", "'granularity'"},
                    BadConf{"capacity:12QB", "'capacity'"},
                    BadConf{"auto_step:yes", "true or false"},
                    BadConf{"plan_cache_size:0", "'plan_cache_size'"},
                    BadConf{"windows:0", "'windows'"}, BadConf{"log:", "'log'"},
                    BadConf{"colour:blue", "unknown key 'colour'"},
                    BadConf{"peer_access:1,2", "none or all"},
                    BadConf{"backend", "expected key:value"},
                    BadConf{"small_size:1GiB", "'small_size'"},
                    BadConf{"varying_sizes:maybe", "'varying_sizes'"},
                    BadConf{"mode:alias,mode:offset", "key 'mode' given twice"},
                    BadConf{"capacity:1GiB, capacity:2GiB", "key 'capacity' given twice"}));

// Keys over a base replace its values; the base's other keys stay.
TEST(RuntimeConfig, KeysReplaceThoseOfTheBase) {
  const RuntimeConfig base = parse_runtime_config("backend:host,auto_step:false,windows:4");
  const RuntimeConfig c = parse_runtime_config("auto_step:true", base);
  EXPECT_EQ(c.backend, "host");
  EXPECT_TRUE(c.auto_step);
  EXPECT_EQ(c.windows, 4u);
}

// A log that cannot be written is refused when the runtime starts.
TEST(RuntimeConfig, AnUnwritableLogIsRefusedAtStart) {
  auto driver = testing_support::host_driver();
  EXPECT_THROW(Runtime(parse_runtime_config("backend:host,log:/nonexistent/dir/x.log"), *driver),
               ConfigError);
}

}  // namespace
}  // namespace stalloc
