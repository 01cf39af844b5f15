// Stochastic rounding to binary16: the result is always one of the two
// neighbours, chosen with the probability the distance gives (checked against
// the exact fraction with chosen random bits and statistically), exact values
// and non-finite ones are left alone, and each tile's generator depends on
// the seed, the IPU and the tile.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <thread>

#include "neurenix/half.h"
#include "neurenix/stochastic_rounding.h"

namespace {

using namespace neurenix;

float h2f(half_bits h) { return half_to_float(h); }

TEST(StochasticRounding, RepresentableAndNonFiniteValuesAreUnchanged) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 5.9604644775390625e-08f}) {
    for (uint32_t r : {0u, 1u << 31, 0xffffffffu}) EXPECT_EQ(stochastic_float_to_half(x, r), float_to_half(x)) << x;
  }
  EXPECT_EQ(stochastic_float_to_half(std::numeric_limits<float>::infinity(), 0), 0x7c00);
  EXPECT_EQ(stochastic_float_to_half(-std::numeric_limits<float>::infinity(), 0), 0xfc00);
  EXPECT_TRUE(std::isnan(h2f(stochastic_float_to_half(std::nanf(""), 0))));
}

TEST(StochasticRounding, TheRandomBitsDecideAgainstTheExactFraction) {
  // 1 + 2^-12 lies a quarter of the way from 1 to 1 + 2^-10.
  const float x = 1.0f + std::ldexp(1.0f, -12);
  const float lo = 1.0f, hi = 1.0f + std::ldexp(1.0f, -10);
  EXPECT_EQ(h2f(stochastic_float_to_half(x, 0)), hi);
  EXPECT_EQ(h2f(stochastic_float_to_half(x, (1u << 30) - 1)), hi);  // just below a quarter of 2^32
  EXPECT_EQ(h2f(stochastic_float_to_half(x, 1u << 30)), lo);
  EXPECT_EQ(h2f(stochastic_float_to_half(x, 0xffffffffu)), lo);
  // Negative values round in magnitude the same way.
  EXPECT_EQ(h2f(stochastic_float_to_half(-x, 0)), -hi);
  EXPECT_EQ(h2f(stochastic_float_to_half(-x, 0xffffffffu)), -lo);
}

TEST(StochasticRounding, SubnormalsAndTheTopOfTheRange) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest subnormal
  EXPECT_EQ(h2f(stochastic_float_to_half(tiny * 0.25f, 0)), tiny);
  EXPECT_EQ(h2f(stochastic_float_to_half(tiny * 0.25f, 0xffffffffu)), 0.0f);
  // Between 65504 and 65536 the next value up is infinity.
  EXPECT_EQ(stochastic_float_to_half(65520.0f, 0), 0x7c00);
  EXPECT_EQ(h2f(stochastic_float_to_half(65520.0f, 0xffffffffu)), 65504.0f);
  EXPECT_EQ(stochastic_float_to_half(70000.0f, 0xffffffffu), 0x7c00);
}

TEST(StochasticRounding, UnbiasedOverManyDraws) {
  RoundingRng rng(123, 0, 0);
  const float x = 1.0f / 3.0f;
  double sum = 0;
  const int n = 200000;
  std::set<half_bits> seen;
  for (int i = 0; i < n; ++i) {
    const half_bits h = stochastic_float_to_half(x, rng.next32());
    seen.insert(h);
    sum += h2f(h);
  }
  EXPECT_EQ(seen.size(), 2u);
  const double gap = std::ldexp(1.0, -12);  // spacing of binary16 in [1/4, 1/2)
  EXPECT_LT(std::fabs(sum / n - x), 0.01 * gap);
}

TEST(StochasticRounding, GeneratorsDependOnSeedIpuAndTile) {
  auto first = [](uint64_t seed, uint32_t ipu, uint32_t tile) { return RoundingRng(seed, ipu, tile).next32(); };
  EXPECT_EQ(first(1, 0, 0), first(1, 0, 0));
  EXPECT_NE(first(1, 0, 0), first(2, 0, 0));
  EXPECT_NE(first(1, 0, 0), first(1, 1, 0));
  EXPECT_NE(first(1, 0, 0), first(1, 0, 1));
}

TEST(StochasticRounding, TheBulkConversionsFollowTheActiveGenerator) {
  float x[64], y[64];
  for (int i = 0; i < 64; ++i) x[i] = y[i] = 1.0f / 3.0f;
  round_to_half_n(x, 64);
  for (float v : x) EXPECT_EQ(v, round_to_half(1.0f / 3.0f));
  RoundingRng rng(5, 0, 0);
  {
    ScopedRounding on(&rng);
    round_to_half_n(y, 64);
  }
  std::set<float> values(y, y + 64);
  EXPECT_EQ(values.size(), 2u);
  EXPECT_EQ(active_rounding_rng(), nullptr);
}

// The active generator is the innermost scope's on this thread (a scope
// without one turns rounding to nearest back on), and only this thread's:
// another thread sees none while this one has a scope open, and its own
// when it opens one.
TEST(StochasticRounding, TheActiveGeneratorIsTheInnermostScopesOnThisThread) {
  RoundingRng a(1, 0, 0), b(2, 0, 0);
  EXPECT_EQ(active_rounding_rng(), nullptr);
  {
    ScopedRounding on(&a);
    EXPECT_EQ(active_rounding_rng(), &a);
    {
      ScopedRounding off(nullptr);
      EXPECT_EQ(active_rounding_rng(), nullptr);
      {
        ScopedRounding inner(&b);
        EXPECT_EQ(active_rounding_rng(), &b);
      }
      EXPECT_EQ(active_rounding_rng(), nullptr);
    }
    EXPECT_EQ(active_rounding_rng(), &a);
    const RoundingRng* other = &a;
    const RoundingRng* other_own = nullptr;
    std::thread t([&] {
      other = active_rounding_rng();
      ScopedRounding own(&b);
      other_own = active_rounding_rng();
    });
    t.join();
    EXPECT_EQ(other, nullptr);
    EXPECT_EQ(other_own, &b);
    EXPECT_EQ(active_rounding_rng(), &a);
  }
  EXPECT_EQ(active_rounding_rng(), nullptr);
}

}  // namespace
