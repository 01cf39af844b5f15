// IEEE binary16 arithmetic helpers.
//
// The simulated IPU stores float16 tensors as raw binary16 bits. Vertices widen
// to float, compute, and round back with round-to-nearest-even, which is what the
// chip's fp16 units do for the basic operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace neurenix {

using half_bits = uint16_t;

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Portable conversions; the hardware path below must agree with them bit for bit.
inline float half_to_float_soft(half_bits h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // Subnormal: value = man * 2^-24.
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  // NaNs come out quiet, as the F16C conversion makes them.
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline half_bits float_to_half_soft(float f) {
  uint32_t x = float_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or nan
    return (half_bits)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  }
  if (ax >= 0x477ff000u) return (half_bits)(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {
    // Result is subnormal or zero: add the magic number that aligns the mantissa
    // so that the FPU's own round-to-nearest-even does the rounding.
    float r = bits_to_float(ax) + 0.5f;
    return (half_bits)(sign | (float_to_bits(r) - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return (half_bits)(sign | (ax >> 13));
}

// binary16 -> binary32, exact.
inline float half_to_float(half_bits h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return half_to_float_soft(h);
#endif
}

// binary32 -> binary16 with round-to-nearest-even; overflow goes to infinity.
inline half_bits float_to_half(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return float_to_half_soft(f);
#endif
}

// Rounds a float to the nearest binary16 value and widens it back.
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }

// Bulk conversions, vectorised where the host has F16C. The two that round
// round stochastically instead while a tile's generator is active
// (stochastic_rounding.h).
void half_to_float_n(const half_bits* src, float* dst, size_t n);
// The same, inline where the build has AVX512BW (sixteen at a time, the
// last few under a 16-bit mask: nothing past n read or written), for short
// rows converted in a loop (a convolution window's, a few dozen values):
// a call to half_to_float_n otherwise. The same values either way.
inline void half_to_float_n_inline(const half_bits* src, float* dst, size_t n) {
#if defined(__AVX512BW__)
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((1u << (n - i)) - 1);
    const __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>(m), _mm512_cvtph_ps(h));
  }
#else
  half_to_float_n(src, dst, n);
#endif
}
void float_to_half_n(const float* src, half_bits* dst, size_t n);
// Rounds every float of x[0, n) to the nearest binary16 value, in place.
void round_to_half_n(float* x, size_t n);
// One chunk of half partials: acc[i] = half(acc[i] + half(part[i] * scale))
// (the product with `scale` only when it is not 1), in one pass. With a
// stochastic-rounding generator active, `part` is rounded whole before `acc`,
// the order in which the generator's draws are documented; `part` is
// overwritten then.
void add_rounded_to_half(float* acc, float* part, size_t n, float scale);
// acc[i] = acc[i] + src[i] rounded to the nearest binary16 value (ties to
// even), for i < n, both in half: a running sum of half partials, kept in
// half. Round to nearest only (with stochastic rounding, widen `src` and use
// round_to_half_n, which draws per element).
void add_half_n(half_bits* acc, const half_bits* src, size_t n);
// dst[i] = 0 + src[i] in half (round to nearest), for i < n: the first part
// of a running half sum without its addition. The same bits as the sum:
// -0 becomes +0 and a signalling NaN quiet; everything else is copied.
void zero_plus_half_n(half_bits* dst, const half_bits* src, size_t n);
// dst[i] = src[i] + v rounded to the nearest binary16 value (the float sum,
// then rounded), for i < n: a bias added to half sums.
void add_scalar_half_n(const half_bits* src, float v, half_bits* dst, size_t n);

}  // namespace neurenix
