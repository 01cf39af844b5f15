#include "neurenix/float8.h"

#include <array>
#include <cmath>
#include <string>

#include "neurenix/error.h"

namespace neurenix {

const Float8Format& float8_format(int onnx_code) {
  static const Float8Format e4m3fn{3, 7, 448.0, false, false, 17};
  static const Float8Format e4m3fnuz{3, 8, 240.0, false, true, 18};
  static const Float8Format e5m2{2, 15, 57344.0, true, false, 19};
  static const Float8Format e5m2fnuz{2, 16, 57344.0, false, true, 20};
  switch (onnx_code) {
    case 17: return e4m3fn;
    case 18: return e4m3fnuz;
    case 19: return e5m2;
    case 20: return e5m2fnuz;
    default: fail(ErrorCode::kInvalidArgument, "unknown float8 format code " + std::to_string(onnx_code));
  }
}

float round_to_float8(float x, const Float8Format& f, bool saturate) {
  if (x != x) return x;
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  const double beyond = saturate ? f.max : f.infinity ? static_cast<double>(INFINITY) : static_cast<double>(NAN);
  double r;
  if (std::isinf(a)) {
    r = beyond;
  } else {
    const double min_normal = std::ldexp(1.0, 1 - f.bias);
    const double step = a < min_normal ? std::ldexp(1.0, 1 - f.bias - f.mantissa) : std::ldexp(1.0, std::ilogb(a) - f.mantissa);
    r = std::nearbyint(a / step) * step;
    if (r > f.max) r = beyond;
  }
  if (r == 0.0 && f.unsigned_zero) return 0.0f;
  return static_cast<float>(neg ? -r : r);
}

namespace {

// The 256 values of a format, by code.
std::array<float, 256> decode_table(const Float8Format& f) {
  std::array<float, 256> t{};
  const int exp_bits = 7 - f.mantissa;
  const int exp_max = (1 << exp_bits) - 1;
  for (int c = 0; c < 256; ++c) {
    const bool neg = c & 0x80;
    const int e = (c >> f.mantissa) & exp_max;
    const int m = c & ((1 << f.mantissa) - 1);
    double v;
    if (f.unsigned_zero && c == 0x80) {
      v = NAN;
    } else if (f.infinity && e == exp_max) {
      v = m == 0 ? INFINITY : NAN;
    } else if (!f.infinity && !f.unsigned_zero && e == exp_max && m == (1 << f.mantissa) - 1) {
      v = NAN;  // E4M3FN: S.1111.111
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantissa);
    } else {
      v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mantissa), e - f.bias);
    }
    t[c] = static_cast<float>(neg ? -v : v);
  }
  return t;
}

const std::array<float, 256>& table_for(const Float8Format& f) {
  static const std::array<float, 256> t17 = decode_table(float8_format(17));
  static const std::array<float, 256> t18 = decode_table(float8_format(18));
  static const std::array<float, 256> t19 = decode_table(float8_format(19));
  static const std::array<float, 256> t20 = decode_table(float8_format(20));
  switch (f.onnx_code) {
    case 17: return t17;
    case 18: return t18;
    case 19: return t19;
    default: return t20;
  }
}

}  // namespace

float float8_decode(uint8_t code, const Float8Format& f) { return table_for(f)[code]; }

uint8_t float8_encode(float x, const Float8Format& f) {
  if (x != x) return f.unsigned_zero ? 0x80 : (f.infinity ? 0x7e : 0x7f);
  const float r = round_to_float8(x, f, true);
  const uint8_t sign = (std::signbit(r) && !(f.unsigned_zero && r == 0.0f)) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(r));
  if (a == 0.0) return sign;
  const double min_normal = std::ldexp(1.0, 1 - f.bias);
  uint32_t e, m;
  if (a < min_normal) {
    e = 0;
    m = static_cast<uint32_t>(std::ldexp(a, f.bias - 1 + f.mantissa));
  } else {
    const int ex = std::ilogb(a);
    e = static_cast<uint32_t>(ex + f.bias);
    m = static_cast<uint32_t>(std::ldexp(a, f.mantissa - ex)) - (1u << f.mantissa);
  }
  return static_cast<uint8_t>(sign | (e << f.mantissa) | m);
}

float float8_scale_for(float amax, const Float8Format& f) {
  if (!(amax > 0.0f) || std::isinf(amax)) return 1.0f;
  // Smallest k with amax / 2^k <= max.
  int k = std::ilogb(static_cast<double>(amax) / f.max);
  // ilogb of the rounded quotient may be one off either way; settle exactly.
  if (std::ldexp(static_cast<double>(amax), -k) > f.max) ++k;
  if (std::ldexp(static_cast<double>(amax), -(k - 1)) <= f.max) --k;
  if (k < -32) k = -32;
  if (k > 31) k = 31;
  return std::ldexp(1.0f, k);
}

}  // namespace neurenix
