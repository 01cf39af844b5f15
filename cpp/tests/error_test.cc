// The error spine: codes, their names (which Rust parses back) and messages.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "neurenix/error.h"
#include "test_util.h"

namespace {

using namespace neurenix;

TEST(ErrorSpine, CodesAndMessages) {
  const std::pair<ErrorCode, const char*> names[] = {
      {ErrorCode::kInvalidArgument, "invalid_argument"}, {ErrorCode::kShapeMismatch, "shape_mismatch"},
      {ErrorCode::kOutOfMemory, "out_of_memory"},         {ErrorCode::kDeviceUnavailable, "device_unavailable"},
      {ErrorCode::kUnsupported, "unsupported"},           {ErrorCode::kInvalidState, "invalid_state"},
      {ErrorCode::kInternal, "internal"}};
  for (const auto& [code, name] : names) {
    EXPECT_STREQ(error_code_name(code), name);
    Error e(code, "what went wrong");
    EXPECT_EQ(e.code(), code);
    EXPECT_EQ(e.message(), "what went wrong");
    EXPECT_EQ(std::string(e.what()), std::string("[") + name + "] what went wrong");
  }
  try {
    NX_CHECK(1 + 1 == 3, "arithmetic");
    FAIL() << "NX_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(e.message().find("arithmetic"), std::string::npos);
    EXPECT_NE(e.message().find("error_test.cc"), std::string::npos);
  }
}

}  // namespace
