#include "neurenix/half.h"

#include "neurenix/stochastic_rounding.h"

// GCC 12 reports the AVX-512 conversion intrinsics' own placeholder
// operands as maybe uninitialized (a false positive in its headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace neurenix {

void half_to_float_n(const half_bits* src, float* dst, size_t n) {
#if defined(__AVX512BW__)
  half_to_float_n_inline(src, dst, n);
#else
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
#endif
}

void float_to_half_n(const float* src, half_bits* dst, size_t n) {
  if (RoundingRng* rng = active_rounding_rng()) {
    for (size_t i = 0; i < n; ++i) dst[i] = stochastic_float_to_half(src[i], rng->next32());
    return;
  }
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m256 f = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void round_to_half_n(float* x, size_t n) {
  if (RoundingRng* rng = active_rounding_rng()) {
    for (size_t i = 0; i < n; ++i) x[i] = half_to_float(stochastic_float_to_half(x[i], rng->next32()));
    return;
  }
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) x[i] = round_to_half(x[i]);
}

void add_rounded_to_half(float* acc, float* part, size_t n, float scale) {
  if (active_rounding_rng()) {
    if (scale != 1.0f)
      for (size_t i = 0; i < n; ++i) part[i] *= scale;
    round_to_half_n(part, n);
    for (size_t i = 0; i < n; ++i) acc[i] += part[i];
    round_to_half_n(acc, n);
    return;
  }
  size_t i = 0;
  const bool scaled = scale != 1.0f;
#if defined(__AVX512F__)
  {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 sv = _mm512_set1_ps(scale);
    for (; i + 16 <= n; i += 16) {
      __m512 t = _mm512_loadu_ps(part + i);
      if (scaled) t = _mm512_mul_ps(t, sv);
      t = _mm512_cvtph_ps(_mm512_cvtps_ph(t, kRound));
      const __m512 a = _mm512_add_ps(_mm512_loadu_ps(acc + i), t);
      _mm512_storeu_ps(acc + i, _mm512_cvtph_ps(_mm512_cvtps_ph(a, kRound)));
    }
  }
#endif
#if defined(__F16C__) && defined(__AVX__)
  const __m256 sv = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_loadu_ps(part + i);
    if (scaled) t = _mm256_mul_ps(t, sv);
    t = _mm256_cvtph_ps(_mm256_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT));
    const __m256 a = _mm256_add_ps(_mm256_loadu_ps(acc + i), t);
    _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)));
  }
#endif
  for (; i < n; ++i) {
    const float t = round_to_half(scale != 1.0f ? part[i] * scale : part[i]);
    acc[i] = round_to_half(acc[i] + t);
  }
}

void add_half_n(half_bits* acc, const half_bits* src, size_t n) {
  size_t i = 0;
#if defined(__AVX512FP16__)
  // vaddph: for two binary16 values the float sum rounded to half is the
  // correctly rounded half sum (the half-partials kernels rely on the same,
  // codelets/gemm.cc), so 32 lanes at a time, the tail under a mask.
  for (; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n - i)) - 1;
    const __m512h a = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, acc + i));
    const __m512h b = _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_epi16(acc + i, m, _mm512_castph_si512(_mm512_add_ph(a, b)));
  }
#elif defined(__AVX512F__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i))),
                                   _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + i), _mm512_cvtps_ph(a, kRound));
  }
#endif
#if defined(__F16C__) && defined(__AVX__) && !defined(__AVX512FP16__)
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i))),
                                   _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) acc[i] = float_to_half(half_to_float(acc[i]) + half_to_float(src[i]));
}

void zero_plus_half_n(half_bits* dst, const half_bits* src, size_t n) {
  // (A loop the compiler vectorises: two compares and selects per element.)
  for (size_t i = 0; i < n; ++i) {
    const half_bits h = src[i];
    const bool nan = (h & 0x7fffu) > 0x7c00u;
    dst[i] = h == 0x8000u ? half_bits{0} : nan ? static_cast<half_bits>(h | 0x0200u) : h;
  }
}

void add_scalar_half_n(const half_bits* src, float v, half_bits* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  const __m512 v16 = _mm512_set1_ps(v);
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))), v16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
#if defined(__F16C__) && defined(__AVX__)
  const __m256 v8 = _mm256_set1_ps(v);
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))), v8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_half(half_to_float(src[i]) + v);
}

}  // namespace neurenix
