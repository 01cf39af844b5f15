// Element types of tile memory: sizes, names, codes (the ones Rust's
// DeviceType uses), and reading and writing elements.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "neurenix/device_type.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

TEST(DeviceType, SizesNamesAndCodes) {
  EXPECT_EQ(device_type_size(kF32), 4u);
  EXPECT_EQ(device_type_size(kF16), 2u);
  EXPECT_EQ(device_type_size(kI32), 4u);
  EXPECT_EQ(device_type_size(kBool), 1u);
  EXPECT_STREQ(device_type_name(kF32), "float32");
  EXPECT_STREQ(device_type_name(kF16), "float16");
  EXPECT_STREQ(device_type_name(kI32), "int32");
  EXPECT_STREQ(device_type_name(kBool), "bool");
  EXPECT_STREQ(device_type_name(DeviceType::kFloat8E4M3FNUZ), "float8_e4m3fnuz");
  EXPECT_STREQ(device_type_name(DeviceType::kFloat8E5M2FNUZ), "float8_e5m2fnuz");
  EXPECT_EQ(device_type_size(DeviceType::kFloat8E4M3FNUZ), 1u);
  EXPECT_TRUE(is_float8(DeviceType::kFloat8E5M2FNUZ));
  EXPECT_FALSE(is_float(DeviceType::kFloat8E5M2FNUZ));
  for (int c = 0; c < 6; ++c) EXPECT_EQ(static_cast<int>(device_type_from_code(c)), c);
  EXPECT_NX_ERROR(kInvalidArgument, device_type_from_code(6), "6");
  EXPECT_NX_ERROR(kInvalidArgument, device_type_from_code(-1), "-1");
  EXPECT_TRUE(is_float(kF32));
  EXPECT_TRUE(is_float(kF16));
  EXPECT_FALSE(is_float(kI32));
  EXPECT_FALSE(is_float(kBool));
}

TEST(DeviceType, LoadAndStoreElementsOfEveryType) {
  uint8_t buf[16] = {0};
  store_element(buf, kF32, 1, 0.1);
  EXPECT_EQ(load_element(buf, kF32, 1), static_cast<float>(0.1));
  store_element(buf, kF16, 3, 2049);
  EXPECT_EQ(load_element(buf, kF16, 3), 2048);
  store_element(buf, kI32, 2, -3.9);
  EXPECT_EQ(load_element(buf, kI32, 2), -3);
  // Out of range and NaN: INT32_MIN, as the x86 conversion gives.
  for (double v : {2147483648.0, -2147483649.0, 1e300, -HUGE_VAL, std::nan("")}) {
    store_element(buf, kI32, 2, v);
    EXPECT_EQ(load_element(buf, kI32, 2), INT32_MIN) << v;
  }
  store_element(buf, kI32, 2, 2147483647.9);
  EXPECT_EQ(load_element(buf, kI32, 2), INT32_MAX);
  store_element(buf, kI32, 2, -2147483648.9);
  EXPECT_EQ(load_element(buf, kI32, 2), INT32_MIN);
  store_element(buf, kBool, 15, 0.25);
  EXPECT_EQ(buf[15], 1);
  EXPECT_EQ(load_element(buf, kBool, 15), 1.0);
  store_element(buf, kBool, 15, 0.0);
  EXPECT_EQ(load_element(buf, kBool, 15), 0.0);
}

TEST(DeviceType, FloatRunsWidenAndNarrow) {
  const std::vector<float> values = {0.1f, -2049.0f, 65504.0f, 1e6f, 3.0f};
  std::vector<uint8_t> f32(values.size() * 4), f16(values.size() * 2 + 2, 0xee);
  store_floats(values.data(), kF32, f32.data(), values.size());
  EXPECT_EQ(std::memcmp(f32.data(), values.data(), f32.size()), 0);
  store_floats(values.data(), kF16, f16.data(), values.size());
  EXPECT_EQ(f16[values.size() * 2], 0xee) << "wrote past the end";
  std::vector<float> back(values.size());
  load_floats(f16.data(), kF16, back.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(back[i], static_cast<float>(ref_round_half(values[i]))) << i;
    EXPECT_EQ(load_element(f16.data(), kF16, i), back[i]);
  }
  load_floats(f32.data(), kF32, back.data(), values.size());
  EXPECT_EQ(back, values);
}

}  // namespace
