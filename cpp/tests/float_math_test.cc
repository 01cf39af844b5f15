// exp and erf in float32 (float_math.h): the vector forms agree with the
// scalar forms on every lane, all stay within an ulp of the function in
// double, and all reproduce the C library they stand in for (GNU libc 2.36's
// expf and erff).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "neurenix/float_math.h"
#include "neurenix/half.h"  // float_to_bits, bits_to_float

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace {

using neurenix::erf_block;
using neurenix::erf_one;
using neurenix::exp_block;
using neurenix::exp_one;
using neurenix::bits_to_float;
using neurenix::float_to_bits;

// Every `stride`-th float32 bit pattern (both signs, NaNs and infinities
// included), plus each range's bounds and their neighbours.
std::vector<float> sample(uint32_t stride) {
  std::vector<float> out;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += stride) out.push_back(bits_to_float(static_cast<uint32_t>(b)));
  for (uint32_t edge : {0x00000000u, 0x00000001u, 0x00800000u, 0x04000000u, 0x31800000u, 0x3f580000u, 0x3fa00000u,
                        0x4036db6eu, 0x40c00000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u})
    for (uint32_t d : {0u, 1u, 2u})
      for (uint32_t sign : {0u, 0x80000000u}) {
        out.push_back(bits_to_float(sign | (edge + d)));
        if (edge >= d) out.push_back(bits_to_float(sign | (edge - d)));
      }
  return out;
}

// GNU libc 2.36 on an x86-64 host with FMA: the C library whose expf and
// erff the functions reproduce (its expf without FMA rounds some results
// differently).
bool reference_libc() {
#if defined(__x86_64__) && defined(__GLIBC__)
  __builtin_cpu_init();
  return std::string(gnu_get_libc_version()) == "2.36" && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void expect_same(float got, float want, float x) {
  if (std::isnan(want)) {
    ASSERT_TRUE(std::isnan(got)) << std::hexfloat << x;
  } else {
    ASSERT_EQ(float_to_bits(got), float_to_bits(want)) << std::hexfloat << "x " << x << " got " << got << " want " << want;
  }
}

using Block = void (*)(float*, size_t);
using One = float (*)(float);

// The block form gives the scalar form's bits on every lane, in blocks of
// uneven lengths, in order and shuffled so that a vector mixes every range.
void expect_block_matches_one(Block block, One one, unsigned seed) {
  std::vector<float> xs = sample(251);
  for (int shuffled = 0; shuffled < 2; ++shuffled) {
    if (shuffled) std::shuffle(xs.begin(), xs.end(), std::mt19937(seed));
    std::vector<float> ys = xs;
    for (size_t at = 0, len = 1; at < ys.size(); at += len, len = len % 301 + 7)
      block(ys.data() + at, std::min(len, ys.size() - at));
    for (size_t i = 0; i < xs.size(); ++i) expect_same(ys[i], one(xs[i]), xs[i]);
  }
}

// The float32 ulp at a double result (subnormal spacing below the normals).
double ulp_at(double want) { return std::ldexp(1.0, std::max(std::ilogb(static_cast<float>(want)), -126) - 23); }

// Recorded (x, f(x)) pairs through both forms, a NaN giving a NaN.
template <size_t N>
void expect_recorded(Block block, One one, const float (&cases)[N][2]) {
  std::vector<float> xs;
  for (const auto& c : cases) {
    expect_same(one(c[0]), c[1], c[0]);
    for (int k = 0; k < 16; ++k) xs.push_back(c[0]);
  }
  xs.push_back(NAN);
  block(xs.data(), xs.size());
  for (size_t i = 0; i + 1 < xs.size(); ++i) expect_same(xs[i], cases[i / 16][1], cases[i / 16][0]);
  EXPECT_TRUE(std::isnan(xs.back()));
}

// On the C library it reproduces, the same bits as its function `ref`.
void expect_matches_the_c_library(Block block, One ref) {
  if (!reference_libc()) GTEST_SKIP() << "the C library is not GNU libc 2.36 on an x86-64 host with FMA";
  std::vector<float> xs = sample(1021);
  std::vector<float> ys = xs;
  block(ys.data(), ys.size());
  for (size_t i = 0; i < xs.size(); ++i) expect_same(ys[i], ref(xs[i]), xs[i]);
}

TEST(FloatMathErf, BlockMatchesOneByOne) { expect_block_matches_one(erf_block, erf_one, 5); }

// Within one ulp of the error function evaluated in double.
TEST(FloatMathErf, WithinAnUlpOfDoubleErf) {
  for (float x : sample(4093)) {
    if (!std::isfinite(x)) continue;
    const double want = std::erf(static_cast<double>(x));
    const float got = erf_one(x);
    ASSERT_LE(std::fabs(got - want), ulp_at(want)) << std::hexfloat << x;
  }
}

// What GNU libc 2.36's erff returns (recorded there), through both forms.
TEST(FloatMathErf, RecordedValues) {
  const float cases[][2] = {
      {0x1p-30f, 0x1.20dd74p-30f},          {0x1.79ca1p-67f, 0x1.aa4a22p-67f},   {0x1.16c2p-133f, 0x1.3a8bp-133f},
      {0x1.99999ap-4f, 0x1.cca5eap-4f},     {0x1p-1f, 0x1.0a7ef6p-1f},            {-0x1.99999ap-1f, -0x1.7bf4a8p-1f},
      {0x1.ac6212p-1f, 0x1.86ce1p-1f},      {0x1.bp-1f, 0x1.88d1cep-1f},          {0x1p+0f, 0x1.af767ap-1f},
      {-0x1.333334p+0f, -0x1.d214acp-1f},   {0x1.4p+0f, 0x1.d8865ep-1f},          {0x1.8p+0f, 0x1.eea556p-1f},
      {-0x1p+1f, -0x1.fd9ae2p-1f},          {0x1.6db22ep+1f, 0x1.fff902p-1f},     {0x1.6e147ap+1f, 0x1.fff922p-1f},
      {0x1.cp+1f, 0x1.ffffe8p-1f},          {-0x1.1p+2f, -0x1p+0f},               {0x1.7fffd6p+2f, 0x1p+0f},
      {0x1.8p+2f, 0x1p+0f},
  };
  expect_recorded(erf_block, erf_one, cases);
}

TEST(FloatMathErf, SpecialValues) {
  float v[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 6.0f, -100.0f, 3e38f};
  const float want[] = {0.0f, -0.0f, 1.0f, -1.0f, NAN, 1.0f, -1.0f, 1.0f};
  for (size_t i = 0; i < 8; ++i) expect_same(erf_one(v[i]), want[i], v[i]);
  std::vector<float> block;
  for (int k = 0; k < 4; ++k) block.insert(block.end(), v, v + 8);
  erf_block(block.data(), block.size());
  for (size_t i = 0; i < block.size(); ++i) expect_same(block[i], want[i % 8], v[i % 8]);
}

// erf is odd, and the forms keep it so to the bit.
TEST(FloatMathErf, OddToTheBit) {
  std::vector<float> xs = sample(65521), neg;
  for (float x : xs) neg.push_back(-x);
  erf_block(xs.data(), xs.size());
  erf_block(neg.data(), neg.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(xs[i])) continue;
    ASSERT_EQ(float_to_bits(neg[i]), float_to_bits(xs[i]) ^ 0x80000000u) << i;
  }
}

// No invalid operation, division by zero or overflow flag for any non-NaN
// input: lanes outside a range are evaluated on a stand-in, not on their value
// (fp_exceptions names a division by zero from the flag).
TEST(FloatMathErf, RaisesNoFlagOnNumbers) {
  std::vector<float> xs;
  for (float x : sample(257))
    if (!std::isnan(x)) xs.push_back(x);
  std::shuffle(xs.begin(), xs.end(), std::mt19937(11));
  std::feclearexcept(FE_ALL_EXCEPT);
  erf_block(xs.data(), xs.size());
  EXPECT_EQ(std::fetestexcept(FE_INVALID | FE_DIVBYZERO | FE_OVERFLOW), 0);
}

TEST(FloatMathErf, MatchesTheCLibraryItReproduces) { expect_matches_the_c_library(erf_block, erff); }


// exp: the same properties.
TEST(FloatMathExp, BlockMatchesOneByOne) { expect_block_matches_one(exp_block, exp_one, 7); }

// Rounded once from a result within 2^-33 relative: at most half an ulp and
// a little, subnormal results included.
TEST(FloatMathExp, WithinHalfAnUlpOfDoubleExp) {
  for (float x : sample(4093)) {
    if (!std::isfinite(x)) continue;
    const double want = std::exp(static_cast<double>(x));
    const float got = exp_one(x);
    if (want > 0x1.fffffep127) {
      ASSERT_EQ(got, INFINITY) << std::hexfloat << x;
      continue;
    }
    ASSERT_LE(std::fabs(got - want), 0.51 * ulp_at(want)) << std::hexfloat << x;
  }
}

TEST(FloatMathExp, RecordedValues) {
  const float cases[][2] = {
      {0x0p+0f, 0x1p+0f},           {0x1p+0f, 0x1.5bf0a8p+1f},          {-0x1p+0f, 0x1.78b564p-2f},
      {0x1p-1f, 0x1.a61298p+0f},    {0x1.4p+3f, 0x1.5829dcp+14f},       {-0x1.4p+3f, 0x1.7cd79cp-15f},
      {0x1.62p+6f, 0x1.99b988p+127f}, {0x1.62e148p+6f, 0x1.fe8c9p+127f}, {-0x1.5ep+6f, 0x1.b2cafp-127f},
      {-0x1.9p+6f, 0x1.bp-145f},    {-0x1.9ep+6f, 0x1p-149f},           {-0x1.9f999ap+6f, 0x1p-149f},
      {0x1p-30f, 0x1p+0f},          {0x1.921fap+1f, 0x1.72400ap+4f},    {-0x1.0624dep-10f, 0x1.ff7cfep-1f},
      {100.0f, INFINITY},           {-104.0f, 0.0f},                    {-INFINITY, 0.0f},
      {INFINITY, INFINITY},         {-0.0f, 1.0f},
  };
  expect_recorded(exp_block, exp_one, cases);
}

// Overflow and underflow may raise their flags, as the C library's does; no
// number raises invalid or division by zero.
TEST(FloatMathExp, RaisesNoInvalidOrDivisionFlag) {
  std::vector<float> xs;
  for (float x : sample(257))
    if (!std::isnan(x)) xs.push_back(x);
  std::shuffle(xs.begin(), xs.end(), std::mt19937(13));
  std::feclearexcept(FE_ALL_EXCEPT);
  exp_block(xs.data(), xs.size());
  EXPECT_EQ(std::fetestexcept(FE_INVALID | FE_DIVBYZERO), 0);
}

TEST(FloatMathExp, MatchesTheCLibraryItReproduces) { expect_matches_the_c_library(exp_block, expf); }

}  // namespace
