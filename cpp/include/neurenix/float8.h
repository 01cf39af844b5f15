// The 8-bit float formats: ONNX's four (by TensorProto code) for Cast and
// storage, and the two the IPU21's accumulating matrix product unit takes
// (Poplar's QUARTER type: F143 and F152, which are ONNX's FLOAT8E4M3FNUZ and
// FLOAT8E5M2FNUZ). Encoding rounds to nearest, ties to even.
#pragma once

#include <cstdint>

namespace neurenix {

struct Float8Format {
  int mantissa;
  int bias;
  double max;           // largest finite value
  bool infinity;        // E5M2 only
  bool unsigned_zero;   // the FNUZ formats have no -0; 0x80 is their NaN
  int onnx_code;        // TensorProto data type
};

// By ONNX TensorProto code: 17 E4M3FN, 18 E4M3FNUZ, 19 E5M2, 20 E5M2FNUZ
// (kInvalidArgument for others).
const Float8Format& float8_format(int onnx_code);

// `x` rounded to the nearest value of `f`, ties to even (ONNX Cast). Beyond
// the largest finite value: saturate, or infinity where the format has one
// and NaN where it has not.
float round_to_float8(float x, const Float8Format& f, bool saturate);

// The code of `x` in `f` (rounded as round_to_float8 with saturation; NaN
// becomes the format's NaN), and the value of a code (exact in float).
uint8_t float8_encode(float x, const Float8Format& f);
float float8_decode(uint8_t code, const Float8Format& f);

// The power-of-two scale s of an FP8 tensor whose largest magnitude is
// `amax`: the smallest with amax / s <= f.max, between 2^-32 and 2^31; 1 when
// amax is zero, infinite or NaN. A tensor x is stored as codes of x / s and
// read as code * s (Poplar's quarter metadata holds log2(s)).
float float8_scale_for(float amax, const Float8Format& f);

}  // namespace neurenix
