// binary16 conversions: the hardware (F16C) path, the portable path and the
// bulk paths must all agree with an independent reference, since tile memory
// holds float16 tensors as raw bits and every half result goes through them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "neurenix/half.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

// Every binary16 pattern decodes to the value the format defines.
TEST(Half, HalfToFloatAllPatternsMatchReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const half_bits hb = static_cast<half_bits>(h);
    const float hw = half_to_float(hb);
    const float sw = half_to_float_soft(hb);
    if (half_is_nan(hb)) {
      ASSERT_TRUE(std::isnan(hw)) << std::hex << h;
      ASSERT_TRUE(std::isnan(sw)) << std::hex << h;
      // Sign and payload survive (the quiet bit may be set on the way).
      ASSERT_EQ(float_to_bits(hw) & 0x803fe000u, float_to_bits(sw) & 0x803fe000u) << std::hex << h;
      ASSERT_EQ(float_to_bits(sw) & 0x803fe000u, ((h & 0x8000u) << 16) | ((h & 0x1ffu) << 13)) << std::hex << h;
      continue;
    }
    const double ref = ref_half_to_double(hb);
    ASSERT_EQ(float_to_bits(hw), float_to_bits(static_cast<float>(ref))) << std::hex << h;
    ASSERT_EQ(float_to_bits(sw), float_to_bits(static_cast<float>(ref))) << std::hex << h;
    ASSERT_EQ(std::signbit(hw), (h & 0x8000) != 0) << std::hex << h;
  }
}

// The header promises the hardware path agrees with the portable one bit for
// bit; signalling NaNs are the patterns where that is at risk (F16C quiets them).
TEST(Half, HalfToFloatSignallingNanBitsAgree) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const half_bits hb = static_cast<half_bits>(h);
    if (!half_is_nan(hb)) continue;
    ASSERT_EQ(float_to_bits(half_to_float(hb)), float_to_bits(half_to_float_soft(hb))) << std::hex << h;
  }
}

// Widening then narrowing is the identity on every non-NaN pattern.
TEST(Half, HalfRoundTripIsIdentity) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const half_bits hb = static_cast<half_bits>(h);
    if (half_is_nan(hb)) {
      EXPECT_TRUE(half_is_nan(float_to_half(half_to_float(hb))));
      EXPECT_TRUE(half_is_nan(float_to_half_soft(half_to_float_soft(hb))));
      continue;
    }
    ASSERT_EQ(float_to_half(half_to_float(hb)), hb) << std::hex << h;
    ASSERT_EQ(float_to_half_soft(half_to_float_soft(hb)), hb) << std::hex << h;
  }
}

void check_narrowing(float f) {
  const uint16_t ref = ref_double_to_half(static_cast<double>(f));
  const half_bits hw = float_to_half(f);
  const half_bits sw = float_to_half_soft(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(half_is_nan(hw)) << f;
    ASSERT_TRUE(half_is_nan(sw)) << f;
    ASSERT_EQ(hw & 0x8000, sw & 0x8000);
    ASSERT_EQ(hw, sw) << std::hex << float_to_bits(f);
    return;
  }
  ASSERT_EQ(hw, ref) << std::hex << "float bits " << float_to_bits(f) << " (" << f << ")";
  ASSERT_EQ(sw, ref) << std::hex << "float bits " << float_to_bits(f) << " (" << f << ")";
}

TEST(Half, FloatToHalfSpecialValues) {
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, -65504.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f,
                            65536.0f, 1e10f, -1e10f, std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                            std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                            5.9604644775390625e-8f /* 2^-24 */, 2.98023223876953125e-8f /* 2^-25: tie to 0 */,
                            4.4703483581542969e-8f /* 1.5 * 2^-25 */, 8.9406967163085938e-8f /* 1.5 * 2^-24: tie to 2 */,
                            6.103515625e-5f /* smallest normal */, 6.0975551605224609e-5f /* largest subnormal */,
                            0.1f, 0.2f, 0.3f, 1.0f / 3, 3.14159265f, 2048.0f, 2049.0f, 2051.0f, 4097.0f};
  for (float f : specials) {
    SCOPED_TRACE(f);
    check_narrowing(f);
  }
  EXPECT_EQ(float_to_half(65519.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00u);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00u);
  EXPECT_EQ(float_to_half(2.98023223876953125e-8f), 0x0000u);
  EXPECT_EQ(float_to_half(-2.98023223876953125e-8f), 0x8000u);
  EXPECT_EQ(float_to_half(8.9406967163085938e-8f), 0x0002u);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

// Exact midpoints between neighbouring halves round to the even one, across
// the subnormal, normal and overflow ranges and for both signs.
TEST(Half, FloatToHalfTiesToEven) {
  int ties = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double lo = ref_half_to_double(static_cast<uint16_t>(h));
      const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_half_to_double(static_cast<uint16_t>(h + 1));
      const double mid = (lo + hi) / 2;
      const float f = static_cast<float>(sign ? -mid : mid);
      ASSERT_EQ(static_cast<double>(f), sign ? -mid : mid) << "midpoint not exact in float";
      const uint16_t even = static_cast<uint16_t>((h & 1) ? h + 1 : h);
      ASSERT_EQ(float_to_half(f), sign | even) << std::hex << h;
      ASSERT_EQ(float_to_half_soft(f), sign | even) << std::hex << h;
      // Just off the midpoint, rounding goes to the nearer neighbour.
      const float above = std::nextafter(static_cast<float>(mid), INFINITY);
      const float below = std::nextafter(static_cast<float>(mid), 0.0f);
      ASSERT_EQ(float_to_half(sign ? -above : above), sign | (h + 1)) << std::hex << h;
      ASSERT_EQ(float_to_half(sign ? -below : below), sign | h) << std::hex << h;
      ASSERT_EQ(float_to_half_soft(sign ? -above : above), sign | (h + 1)) << std::hex << h;
      ASSERT_EQ(float_to_half_soft(sign ? -below : below), sign | h) << std::hex << h;
      ++ties;
    }
  }
  EXPECT_EQ(ties, 2 * 0x7c00);
}

TEST(Half, FloatToHalfRandomBitPatterns) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 400000; ++i) check_narrowing(bits_to_float(bits(rng)));
  // Concentrate on the exponents where binary16 lives (including where it
  // underflows and overflows).
  std::uniform_int_distribution<uint32_t> exp(90, 145), man(0, (1u << 23) - 1), sgn(0, 1);
  for (int i = 0; i < 400000; ++i) check_narrowing(bits_to_float((sgn(rng) << 31) | (exp(rng) << 23) | man(rng)));
  // Every float in one full binade of normals and one of subnormals.
  for (uint32_t m = 0; m < (1u << 23); m += 7) {
    check_narrowing(bits_to_float((127u << 23) | m));
    check_narrowing(bits_to_float((103u << 23) | m));
  }
}

TEST(Half, BulkConversionsMatchScalar) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<uint32_t> hbits(0, 65535);
  // Lengths around the vector width, with unaligned starts.
  for (size_t n = 0; n <= 41; ++n) {
    for (size_t off = 0; off < 3; ++off) {
      std::vector<float> f(n + off);
      for (size_t i = 0; i < f.size(); ++i)
        f[i] = (i % 2) ? bits_to_float(bits(rng)) : static_cast<float>(static_cast<int32_t>(bits(rng))) * 1e-5f;
      if (n > 3) f[off + 1] = std::numeric_limits<float>::quiet_NaN();
      if (n > 4) f[off + 2] = 65520.0f;
      std::vector<half_bits> h(n + off + 1, 0xdead);
      float_to_half_n(f.data() + off, h.data() + off, n);
      for (size_t i = 0; i < off; ++i) ASSERT_EQ(h[i], 0xdead) << "wrote before the start";
      ASSERT_EQ(h[off + n], 0xdead) << "wrote past the end";
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[off + i], float_to_half(f[off + i])) << n << " " << i;

      std::vector<half_bits> hs(n + off);
      for (auto& x : hs) x = static_cast<half_bits>(hbits(rng));
      std::vector<float> back(n + off + 1, -7.0f);
      half_to_float_n(hs.data() + off, back.data() + off, n);
      for (size_t i = 0; i < off; ++i) ASSERT_EQ(back[i], -7.0f) << "wrote before the start";
      ASSERT_EQ(back[off + n], -7.0f) << "wrote past the end";
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(float_to_bits(back[off + i]), float_to_bits(half_to_float(hs[off + i]))) << n << " " << i;
    }
  }
}

// A running sum kept in half: each add rounded to half, against the exact
// sum (in double) rounded by the reference: lengths around and past the
// vector widths (the masked tail), every special the sums meet (signed
// zeros, subnormals, overflow to infinity, infinities of both signs, NaN).
TEST(Half, AddHalfMatchesTheRoundedExactSum) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> hbits(0, 65535);
  const half_bits special[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3c00};
  for (size_t n = 0; n <= 70; ++n) {
    std::vector<half_bits> acc(n + 1, 0x1234), src(n);
    std::vector<half_bits> a0(n);
    for (size_t i = 0; i < n; ++i) {
      acc[i] = static_cast<half_bits>(hbits(rng));
      src[i] = static_cast<half_bits>(hbits(rng));
      if (i % 5 == 1) acc[i] = special[hbits(rng) % 12], src[i] = special[hbits(rng) % 12];
      if (i % 9 == 4) acc[i] = 0x7bff, src[i] = 0x7bff;  // 65504 + 65504 overflows to infinity
      a0[i] = acc[i];
    }
    add_half_n(acc.data(), src.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double exact = ref_half_to_double(a0[i]) + ref_half_to_double(src[i]);
      if (std::isnan(exact)) {
        ASSERT_TRUE(std::isnan(half_to_float(acc[i]))) << n << " " << i;
      } else {
        ASSERT_EQ(acc[i], ref_double_to_half(exact)) << n << " " << i << ": " << a0[i] << " + " << src[i];
      }
    }
    ASSERT_EQ(acc[n], 0x1234) << "wrote past the end";
  }
}

// The first part of a running half sum copied instead of added to zero:
// for every one of the 65,536 patterns, the bits add_half_n gives when it
// adds it to +0, and the sum 0 + x in double rounded by the reference (a
// NaN: the same sign and payload, made quiet).
TEST(Half, ZeroPlusHalfIsTheSumsBits) {
  std::vector<half_bits> all(65536), zeros(65536, 0), got(65536 + 1, 0x1234);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<half_bits>(h);
  add_half_n(zeros.data(), all.data(), all.size());
  zero_plus_half_n(got.data(), all.data(), all.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(got[h], zeros[h]) << "pattern " << h;
    const double x = ref_half_to_double(static_cast<half_bits>(h));
    if (std::isnan(x)) {
      ASSERT_EQ(got[h], h | 0x0200u) << "pattern " << h;
    } else {
      ASSERT_EQ(got[h], ref_double_to_half(0.0 + x)) << "pattern " << h;
    }
  }
  ASSERT_EQ(got[65536], 0x1234) << "wrote past the end";
  EXPECT_EQ(got[0x8000], 0) << "-0 + 0 is +0";
}

// A bias added to half sums: the float sum rounded to half, against the
// sum in double rounded to float (the float sum exactly), then to half by
// the reference; lengths around and past the vector widths.
TEST(Half, AddScalarHalfMatchesTheRoundedFloatSum) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> hbits(0, 65535);
  std::uniform_real_distribution<float> value(-70000.0f, 70000.0f);
  for (size_t n = 0; n <= 70; ++n) {
    std::vector<half_bits> src(n), dst(n + 1, 0x1234);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<half_bits>(hbits(rng));
    const float v = n % 3 == 0 ? std::ldexp(value(rng), -12) : value(rng);
    add_scalar_half_n(src.data(), v, dst.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double sum = static_cast<float>(ref_half_to_double(src[i]) + static_cast<double>(v));
      if (std::isnan(sum)) {
        ASSERT_TRUE(std::isnan(half_to_float(dst[i]))) << n << " " << i;
      } else {
        ASSERT_EQ(dst[i], ref_double_to_half(sum)) << n << " " << i << ": " << src[i] << " + " << v;
      }
    }
    ASSERT_EQ(dst[n], 0x1234) << "wrote past the end";
  }
}

TEST(Half, RoundToHalf) {
  EXPECT_EQ(round_to_half(0.1f), static_cast<float>(ref_round_half(0.1f)));
  EXPECT_EQ(round_to_half(2049.0f), 2048.0f);
  EXPECT_EQ(round_to_half(2051.0f), 2052.0f);
  EXPECT_EQ(round_to_half(1e6f), INFINITY);
  EXPECT_EQ(round_to_half(-1e6f), -INFINITY);
  EXPECT_TRUE(std::isnan(round_to_half(NAN)));
  // In bulk, in place: lengths around the vector width.
  std::mt19937 rng(8);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t n = 0; n <= 19; ++n) {
    std::vector<float> x(n + 1, -7.0f);
    for (size_t i = 0; i < n; ++i) x[i] = bits_to_float(bits(rng));
    std::vector<float> want(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    round_to_half_n(x.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(float_to_bits(x[i]), float_to_bits(round_to_half(want[i]))) << n << " " << i;
    ASSERT_EQ(x[n], -7.0f) << "wrote past the end";
  }
}

}  // namespace
