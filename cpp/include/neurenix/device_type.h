// Element types that live in tile memory (Rust's `DeviceType`, the same codes).
#pragma once

#include <cstddef>
#include <cstdint>

namespace neurenix {

// The float8 types are the IPU21's (Poplar's QUARTER formats F143 and F152,
// ONNX's FLOAT8E4M3FNUZ and FLOAT8E5M2FNUZ): codes without a scale, read and
// written here at scale 1 (saturating); matrix products apply their scale.
enum class DeviceType : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kInt32 = 2,
  kBool = 3,
  kFloat8E4M3FNUZ = 4,
  kFloat8E5M2FNUZ = 5,
};

inline size_t device_type_size(DeviceType t) {
  switch (t) {
    case DeviceType::kFloat32: return 4;
    case DeviceType::kFloat16: return 2;
    case DeviceType::kInt32: return 4;
    case DeviceType::kBool: return 1;
    case DeviceType::kFloat8E4M3FNUZ: return 1;
    case DeviceType::kFloat8E5M2FNUZ: return 1;
  }
  return 4;
}

// A number as int32, the way the x86 conversion makes it: truncated toward
// zero, and INT32_MIN for NaN and values out of range (which C++ leaves
// undefined).
inline int32_t truncate_to_int32(double v) {
  return (v > -2147483649.0 && v < 2147483648.0) ? static_cast<int32_t>(v) : INT32_MIN;
}

const char* device_type_name(DeviceType t);
DeviceType device_type_from_code(int code);  // throws kInvalidArgument for unknown codes
inline bool is_float(DeviceType t) { return t == DeviceType::kFloat32 || t == DeviceType::kFloat16; }
inline bool is_float8(DeviceType t) { return t == DeviceType::kFloat8E4M3FNUZ || t == DeviceType::kFloat8E5M2FNUZ; }
// The ONNX float8 format code of a float8 device type (18 or 20).
inline int float8_code(DeviceType t) { return t == DeviceType::kFloat8E4M3FNUZ ? 18 : 20; }

// Reads element i of an array of `type` at `base` as a double / writes one
// (float16 rounded to nearest even; int32 and bool converted as C++ does).
double load_element(const uint8_t* base, DeviceType type, uint64_t i);
void store_element(uint8_t* base, DeviceType type, uint64_t i, double v);

// Widens `n` elements of a float type (float8 included) at `p` to floats /
// narrows floats into one (float16 rounded to nearest even, float8 to nearest
// even with saturation).
void load_floats(const uint8_t* p, DeviceType type, float* dst, size_t n);
void store_floats(const float* src, DeviceType type, uint8_t* p, size_t n);

}  // namespace neurenix
