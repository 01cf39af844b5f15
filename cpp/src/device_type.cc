#include "neurenix/device_type.h"

#include <cstring>
#include <string>

#include "neurenix/error.h"
#include "neurenix/float8.h"
#include "neurenix/half.h"
#include "neurenix/stochastic_rounding.h"

namespace neurenix {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::kFloat32: return "float32";
    case DeviceType::kFloat16: return "float16";
    case DeviceType::kInt32: return "int32";
    case DeviceType::kBool: return "bool";
    case DeviceType::kFloat8E4M3FNUZ: return "float8_e4m3fnuz";
    case DeviceType::kFloat8E5M2FNUZ: return "float8_e5m2fnuz";
  }
  return "?";
}

DeviceType device_type_from_code(int code) {
  if (code < 0 || code > 5) fail(ErrorCode::kInvalidArgument, "unknown device dtype code " + std::to_string(code));
  return static_cast<DeviceType>(code);
}

double load_element(const uint8_t* base, DeviceType dtype, uint64_t i) {
  switch (dtype) {
    case DeviceType::kFloat32: { float v; std::memcpy(&v, base + i * 4, 4); return v; }
    case DeviceType::kFloat16: { half_bits h; std::memcpy(&h, base + i * 2, 2); return half_to_float(h); }
    case DeviceType::kInt32: { int32_t v; std::memcpy(&v, base + i * 4, 4); return v; }
    case DeviceType::kBool: return base[i] ? 1.0 : 0.0;
    case DeviceType::kFloat8E4M3FNUZ:
    case DeviceType::kFloat8E5M2FNUZ: return float8_decode(base[i], float8_format(float8_code(dtype)));
  }
  return 0;
}

void store_element(uint8_t* base, DeviceType dtype, uint64_t i, double v) {
  switch (dtype) {
    case DeviceType::kFloat32: { float f = static_cast<float>(v); std::memcpy(base + i * 4, &f, 4); break; }
    case DeviceType::kFloat16: {
      const float f = static_cast<float>(v);
      RoundingRng* rng = active_rounding_rng();
      const half_bits h = rng ? stochastic_float_to_half(f, rng->next32()) : float_to_half(f);
      std::memcpy(base + i * 2, &h, 2);
      break;
    }
    case DeviceType::kInt32: { int32_t x = truncate_to_int32(v); std::memcpy(base + i * 4, &x, 4); break; }
    case DeviceType::kBool: base[i] = v != 0.0; break;
    case DeviceType::kFloat8E4M3FNUZ:
    case DeviceType::kFloat8E5M2FNUZ:
      base[i] = float8_encode(static_cast<float>(v), float8_format(float8_code(dtype)));
      break;
  }
}

void load_floats(const uint8_t* p, DeviceType type, float* dst, size_t n) {
  if (type == DeviceType::kFloat32) {
    std::memcpy(dst, p, n * 4);
  } else if (is_float8(type)) {
    const Float8Format& f = float8_format(float8_code(type));
    for (size_t i = 0; i < n; ++i) dst[i] = float8_decode(p[i], f);
  } else {
    half_to_float_n(reinterpret_cast<const half_bits*>(p), dst, n);
  }
}

void store_floats(const float* src, DeviceType type, uint8_t* p, size_t n) {
  if (type == DeviceType::kFloat32) {
    std::memcpy(p, src, n * 4);
  } else if (is_float8(type)) {
    const Float8Format& f = float8_format(float8_code(type));
    for (size_t i = 0; i < n; ++i) p[i] = float8_encode(src[i], f);
  } else {
    float_to_half_n(src, reinterpret_cast<half_bits*>(p), n);
  }
}

}  // namespace neurenix
