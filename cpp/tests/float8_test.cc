#include "neurenix/float8.h"

#include <gtest/gtest.h>

#include <cmath>

#include "neurenix/device_type.h"

namespace neurenix {
namespace {

TEST(Float8, DecodesTheIpuFormatsAsOnnxFnuz) {
  const Float8Format& e4 = float8_format(18);  // Poplar F143
  EXPECT_TRUE(std::isnan(float8_decode(0x80, e4)));
  EXPECT_EQ(float8_decode(0x7f, e4), 240.0f);
  EXPECT_EQ(float8_decode(0x01, e4), std::ldexp(1.0f, -10));
  EXPECT_EQ(float8_decode(0xff, e4), -240.0f);
  const Float8Format& e5 = float8_format(20);  // Poplar F152
  EXPECT_TRUE(std::isnan(float8_decode(0x80, e5)));
  EXPECT_EQ(float8_decode(0x7f, e5), 57344.0f);
  EXPECT_EQ(float8_decode(0x01, e5), std::ldexp(1.0f, -17));
}

TEST(Float8, EncodingIsExactForEveryValueAndRoundsMidpointsToEven) {
  for (int code : {17, 18, 19, 20}) {
    const Float8Format& f = float8_format(code);
    SCOPED_TRACE(code);
    for (int c = 0; c < 256; ++c) {
      const float v = float8_decode(static_cast<uint8_t>(c), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      if (v == 0.0f && c != 0 && !f.unsigned_zero) {
        EXPECT_EQ(float8_encode(v, f), 0x80);  // -0
        continue;
      }
      EXPECT_EQ(float8_encode(v, f), c) << v;
    }
  }
  const Float8Format& e4 = float8_format(18);
  // 1 + 1/16 lies between 1 (even mantissa) and 1 + 1/8: to 1.
  EXPECT_EQ(float8_decode(float8_encode(1.0625f, e4), e4), 1.0f);
  // 1 + 3/16 lies between 1 + 1/8 (odd) and 1 + 2/8 (even): to 1.25.
  EXPECT_EQ(float8_decode(float8_encode(1.1875f, e4), e4), 1.25f);
  // Beyond the largest value: saturate.
  EXPECT_EQ(float8_decode(float8_encode(1e6f, e4), e4), 240.0f);
  EXPECT_EQ(float8_decode(float8_encode(-INFINITY, e4), e4), -240.0f);
  EXPECT_EQ(float8_encode(NAN, e4), 0x80);
}

TEST(Float8, ScaleIsTheSmallestPowerOfTwoThatFitsTheLargestMagnitude) {
  const Float8Format& e4 = float8_format(18);
  EXPECT_EQ(float8_scale_for(240.0f, e4), 1.0f);
  EXPECT_EQ(float8_scale_for(241.0f, e4), 2.0f);
  EXPECT_EQ(float8_scale_for(1.0f, e4), std::ldexp(1.0f, -7));  // 1 / 2^-7 = 128 <= 240 < 256
  EXPECT_EQ(float8_scale_for(0.0f, e4), 1.0f);
  EXPECT_EQ(float8_scale_for(INFINITY, e4), 1.0f);
  EXPECT_EQ(float8_scale_for(NAN, e4), 1.0f);
  EXPECT_EQ(float8_scale_for(1e30f, e4), std::ldexp(1.0f, 31));
  EXPECT_EQ(float8_scale_for(1e-30f, e4), std::ldexp(1.0f, -32));
  const Float8Format& e5 = float8_format(20);
  EXPECT_EQ(float8_scale_for(57344.0f, e5), 1.0f);
  EXPECT_EQ(float8_scale_for(1.0f, e5), std::ldexp(1.0f, -15));
  for (float amax : {0.3f, 7.0f, 239.9f, 480.0f, 1234.5f}) {
    const float s = float8_scale_for(amax, e4);
    EXPECT_LE(amax / s, 240.0f);
    EXPECT_GT(amax / (s / 2), 240.0f);
  }
}

TEST(Float8, DeviceTypesStoreCodesOfOneByte) {
  uint8_t mem[4] = {};
  EXPECT_EQ(device_type_size(DeviceType::kFloat8E4M3FNUZ), 1u);
  store_element(mem, DeviceType::kFloat8E4M3FNUZ, 1, 1.0);
  EXPECT_EQ(load_element(mem, DeviceType::kFloat8E4M3FNUZ, 1), 1.0);
  const float src[2] = {3.0f, -1000.0f};
  store_floats(src, DeviceType::kFloat8E5M2FNUZ, mem, 2);
  float back[2];
  load_floats(mem, DeviceType::kFloat8E5M2FNUZ, back, 2);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[1], -1024.0f);  // E5M2: 1000 rounds to 1024
}

}  // namespace
}  // namespace neurenix
