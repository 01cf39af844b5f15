// Every other float of a row in one vector, for the stride-2 windows of the
// convolution and pooling vertices (internal header).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace neurenix {

#if defined(__AVX512F__)
// src[0], src[2], ..., src[2(m - 1)] in the first m lanes (1 <= m <= 16),
// zeros in the others; nothing past src[2(m - 1)] is read.
inline __m512 load_even(const float* src, uint32_t m) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const uint32_t c = 2 * m - 1;  // source floats the lanes need
  const __mmask16 lo = static_cast<__mmask16>(c >= 16 ? 0xFFFFu : (1u << c) - 1);
  const __mmask16 hi = static_cast<__mmask16>(c > 16 ? (1u << (c - 16)) - 1 : 0);
  const __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, src), even, _mm512_maskz_loadu_ps(hi, src + 16));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(m >= 16 ? 0xFFFFu : (1u << m) - 1), v);
}
#endif

}  // namespace neurenix
