#include "planner/dsa/dsa_generator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/dsa/dsa_components.h"

namespace stalloc {
namespace {

TEST(DsaGenerator, IrregularIsSeededAndWellFormed) {
  const auto a = generate_dsa_instance({DsaInstanceKind::Irregular, 20000, 4});
  const auto b = generate_dsa_instance({DsaInstanceKind::Irregular, 20000, 4});
  const auto c = generate_dsa_instance({DsaInstanceKind::Irregular, 20000, 5});
  ASSERT_EQ(a.size(), 20000u);
  ASSERT_EQ(c.size(), 20000u);
  auto same = [](const std::vector<DsaBuffer>& x, const std::vector<DsaBuffer>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& p, const auto& q) {
      return p.id == q.id && p.lower == q.lower && p.upper == q.upper && p.size == q.size;
    });
  };
  EXPECT_TRUE(same(a, b));
  EXPECT_FALSE(same(a, c));
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, i);
    EXPECT_LT(a[i].lower, a[i].upper);
    EXPECT_GT(a[i].size, 0u);
    EXPECT_EQ(a[i].alignment, 1u);
  }
}

// The shape the generator promises: mostly short lifetimes, some spanning most of the program,
// sizes from a few bytes to hundreds of MiB, and one large time component (no repeating
// iterations to cut it at), even after the persistent buffers are set aside.
TEST(DsaGenerator, IrregularHasTheCompilerShape) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const auto buffers = generate_dsa_instance({DsaInstanceKind::Irregular, 10000, seed});
    std::uint64_t horizon = 0;
    std::uint64_t smallest = UINT64_MAX;
    std::uint64_t largest = 0;
    for (const DsaBuffer& b : buffers) {
      horizon = std::max(horizon, b.upper);
      smallest = std::min(smallest, b.size);
      largest = std::max(largest, b.size);
    }
    std::size_t short_lived = 0;
    std::size_t long_lived = 0;
    for (const DsaBuffer& b : buffers) {
      if (b.upper - b.lower <= 4) ++short_lived;
      if (b.upper - b.lower > horizon / 2) ++long_lived;
    }
    EXPECT_GT(short_lived, buffers.size() / 2) << "seed " << seed;
    EXPECT_GT(long_lived, buffers.size() / 200) << "seed " << seed;
    EXPECT_LE(smallest, 256u);
    EXPECT_GE(largest, std::uint64_t{64} << 20);
    const auto persistent = dsa_detail::persistent_buffers(buffers);
    std::vector<char> is_persistent(buffers.size(), 0);
    for (std::uint32_t i : persistent) is_persistent[i] = 1;
    std::vector<DsaBuffer> rest;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (is_persistent[i] == 0) rest.push_back(buffers[i]);
    }
    std::size_t biggest = 0;
    for (const auto& component : dsa_detail::split_components(rest)) {
      biggest = std::max(biggest, component.size());
    }
    EXPECT_GT(biggest, rest.size() * 9 / 10) << "seed " << seed;
  }
}

TEST(DsaGenerator, TrainingKeepsItsIterationsAndAlignment) {
  const auto buffers = generate_dsa_instance({DsaInstanceKind::Training, 5000, 7});
  ASSERT_EQ(buffers.size(), 5000u);
  for (const DsaBuffer& b : buffers) {
    EXPECT_EQ(b.alignment, 512u);
    EXPECT_LT(b.lower, b.upper);
  }
  // The 48 weights are persistent; the rest falls apart into iterations.
  EXPECT_EQ(dsa_detail::persistent_buffers(buffers).size(), 48u);
}

TEST(DsaGenerator, KindNames) {
  EXPECT_EQ(parse_dsa_instance_kind("irregular"), DsaInstanceKind::Irregular);
  EXPECT_EQ(parse_dsa_instance_kind("training"), DsaInstanceKind::Training);
  EXPECT_FALSE(parse_dsa_instance_kind("random").has_value());
  EXPECT_EQ(dsa_instance_kind_name(DsaInstanceKind::Irregular), "irregular");
  EXPECT_TRUE(generate_dsa_instance({DsaInstanceKind::Irregular, 0, 1}).empty());
}

}  // namespace
}  // namespace stalloc
