// exp and erf in float32, one element or sixteen at a time (see float_math.h).
//
// Every float operation below rounds on its own: no multiply and add are
// fused except the std::fma and FMA intrinsics written out, which are where
// the reference fuses them. GCC fuses them by default when it may use FMA
// instructions (-mfma), also in intrinsics, hence the pragma.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "neurenix/float_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "neurenix/half.h"  // float_to_bits, bits_to_float

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define NEURENIX_FLOAT_MATH_AVX2 1
#endif

// GCC 12 reports the AVX-512 conversion intrinsics' own placeholder
// operands as maybe uninitialized (a false positive in its headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace neurenix {
namespace {

// Polynomial coefficients, highest degree first (Horner's order).
// |x| < 0.84375: erf(x) = x + x * P(x^2) / Q(x^2).
constexpr float kSmallP[] = {-0x1.8ead62p-16f, -0x1.7a2912p-8f, -0x1.d2a51ep-6f, -0x1.4cd7d6p-2f, 0x1.06eba8p-3f};
constexpr float kSmallQ[] = {-0x1.09c434p-18f, 0x1.15dc92p-13f, 0x1.4d022cp-8f,
                             0x1.0a54c6p-4f,   0x1.97779cp-2f,  1.0f};
// 0.84375 <= |x| < 1.25: erf(|x|) = kErx + P(s) / Q(s), s = |x| - 1.
constexpr float kErx = 0x1.b0ac16p-1f;
constexpr float kMidP[] = {-0x1.1bf38p-9f, 0x1.22a366p-5f, -0x1.c63984p-4f, 0x1.45fca8p-2f,
                           -0x1.7d241p-2f, 0x1.a8d00ap-2f, -0x1.359b8cp-9f};
constexpr float kMidQ[] = {0x1.88b546p-7f, 0x1.bedc26p-7f,  0x1.02660ep-3f, 0x1.2635cep-4f,
                           0x1.14af0ap-1f, 0x1.b3e662p-4f,  1.0f};
// 1.25 <= |x| < 6: R(s) / S(s), s = 1 / x^2, one pair below 1/0.35 and one
// above. The upper pair is one degree shorter and leads with a zero, which
// Horner's rule passes through exactly (s is finite), so both share one loop.
constexpr uint32_t kTailSplit = 0x4036db6e;  // 1/0.35
constexpr float kNearR[] = {-0x1.3a0efcp+3f, -0x1.452656p+6f, -0x1.7135cep+7f, -0x1.44cb18p+7f, -0x1.f300aep+5f,
                            -0x1.51e044p+3f, -0x1.63416ep-1f, -0x1.434126p-7f};
constexpr float kNearS[] = {-0x1.eeff2ep-5f, 0x1.a47ef8p+2f, 0x1.b28a3ep+6f, 0x1.ad0216p+8f, 0x1.42b192p+9f,
                            0x1.b290dep+8f,  0x1.1350c6p+7f, 0x1.3a6b9cp+4f, 1.0f};
constexpr float kFarR[] = {0.0f,           -0x1.e384eap+8f, -0x1.004616p+10f, -0x1.3ec882p+9f,
                           -0x1.4145d4p+7f, -0x1.1c2096p+4f, -0x1.993ba8p-1f,  -0x1.434124p-7f};
constexpr float kFarS[] = {0.0f,          -0x1.670e24p+4f, 0x1.da874ep+8f,  0x1.3f219cp+11f, 0x1.8ffb76p+11f,
                           0x1.802eb2p+10f, 0x1.45cae2p+8f,  0x1.e568b2p+4f, 1.0f};
static_assert(sizeof(kNearR) == sizeof(kFarR) && sizeof(kNearS) == sizeof(kFarS), "tail pairs share one loop");
constexpr float kEfx = 0x1.06eba8p-3f;  // 2/sqrt(pi) - 1

// Bounds on |x|'s bits.
constexpr uint32_t kTinyBits = 0x31800000;   // 2^-28: erf(x) = x + kEfx x
constexpr uint32_t kSmallBits = 0x3f580000;  // 0.84375
constexpr uint32_t kMidBits = 0x3fa00000;    // 1.25
constexpr uint32_t kTailBits = 0x40c00000;   // 6: erf rounds to +-1
constexpr uint32_t kInfBits = 0x7f800000;

// exp in double: x 32/ln2 = k + r, exp(x) = 2^(k/32) 2^(r/32), 2^(r/32) by a
// cubic and 2^(k/32) as 2^(k mod 32 / 32) from the table with k div 32 added
// to its exponent.
constexpr double kInvLn2x32 = 0x1.71547652b82fep+5;
constexpr double kRoundShift = 0x1.8p+52;  // adding it rounds to an integer
constexpr double kExpC0 = 0x1.c6af84b912394p-20, kExpC1 = 0x1.ebfce50fac4f3p-13, kExpC2 = 0x1.62e42ff0c52d6p-6;
// 2^(i/32) rounded to double.
alignas(64) constexpr double kExp2Table[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0, 0x1.172b83c7d517bp+0,
    0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0, 0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0,
    0x1.3dea64c123422p+0, 0x1.44e086061892dp+0, 0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0,
    0x1.6247eb03a5585p+0, 0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0, 0x1.ae89f995ad3adp+0,
    0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0, 0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0,
    0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

template <size_t N>
inline float horner(const float (&c)[N], float s) {
  float acc = c[0];
  for (size_t k = 1; k < N; ++k) acc = c[k] + s * acc;
  return acc;
}

// exp(x) for -104 < x < 89: no overflow, no underflow to zero, no NaN
// (exp_one takes those apart).
inline float exp_core(float x) {
  const double xd = x;
  const double shifted = std::fma(kInvLn2x32, xd, kRoundShift);
  uint64_t ki;
  std::memcpy(&ki, &shifted, 8);
  const double kd = shifted - kRoundShift;
  const double r = std::fma(kInvLn2x32, xd, -kd);
  uint64_t t;
  std::memcpy(&t, &kExp2Table[ki & 31], 8);
  t += (ki & ~uint64_t{31}) << 47;
  double scale;
  std::memcpy(&scale, &t, 8);
  const double odd = std::fma(kExpC0, r, kExpC1);
  const double r2 = r * r;
  double y = std::fma(kExpC2, r, 1.0);
  y = std::fma(odd, r2, y);
  return static_cast<float>(y * scale);
}

// erf(|x|) for 1.25 <= |x| < 6, as 1 - e / |x|; returns e.
inline float tail_e(float ax) {
  const uint32_t ia = float_to_bits(ax);
  const float s = 1.0f / (ax * ax);
  const bool near = ia < kTailSplit;
  const float r = near ? horner(kNearR, s) : horner(kFarR, s);
  const float q = near ? horner(kNearS, s) : horner(kFarS, s);
  const float z = bits_to_float(ia & 0xfffff000u);
  return exp_core(-z * z - 0.5625f) * exp_core((z - ax) * (z + ax) + r / q);
}

}  // namespace

float erf_one(float x) {
  const uint32_t hx = float_to_bits(x);
  const uint32_t ix = hx & 0x7fffffffu;
  const bool negative = hx >> 31;
  if (ix >= kInfBits) return static_cast<float>(negative ? -1 : 1) + 1.0f / x;  // +-1, NaN stays NaN
  if (ix < kSmallBits) {
    if (ix < kTinyBits) {
      // 16x keeps kEfx x out of the subnormals where it would lose bits.
      if (ix < 0x04000000u) return 0.0625f * (16.0f * x + (16.0f * kEfx) * x);
      return x + kEfx * x;
    }
    const float z = x * x;
    return x + x * (horner(kSmallP, z) / horner(kSmallQ, z));
  }
  float a;
  if (ix < kMidBits) {
    const float s = std::fabs(x) - 1.0f;
    a = kErx + horner(kMidP, s) / horner(kMidQ, s);
  } else if (ix < kTailBits) {
    const float ax = std::fabs(x);
    a = 1.0f - tail_e(ax) / ax;
  } else {
    a = 1.0f;
  }
  return negative ? -a : a;
}

// Bounds of exp's range that needs no special case.
constexpr uint32_t kExpTop88 = 0x42b;                  // the top 12 bits of 88.0f
constexpr float kExpOverflow = 0x1.62e42ep6f;          // above: +inf
constexpr float kExpUnderflow = -0x1.9fe368p6f;        // below: +0

float exp_one(float x) {
  const uint32_t top = (float_to_bits(x) >> 20) & 0x7ff;
  if (top >= kExpTop88) {
    if (float_to_bits(x) == 0xff800000u) return 0.0f;  // exp(-inf)
    if (top >= (kInfBits >> 20)) return x + x;    // +inf, NaN
    if (x > kExpOverflow) return HUGE_VALF;
    if (x < kExpUnderflow) return 0.0f;
  }
  return exp_core(x);
}

#if NEURENIX_FLOAT_MATH_AVX2
namespace {

// The vector form works on kWays vectors of eight at once: erf's tail is a
// long chain of dependent operations (two polynomials, a division, exp, a
// division), and independent chains side by side keep the units busy.
constexpr int kWays = 2;
using Vecs = __m256[kWays];

inline __m256i splat(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
// Lanes whose |x| bits are below `bound` (both at most 0x7fffffff).
inline __m256 below(__m256i ix, uint32_t bound) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(splat(bound), ix)); }

template <size_t N>
inline void horner8(const float (&c)[N], const Vecs& s, Vecs& acc) {
  for (int w = 0; w < kWays; ++w) acc[w] = _mm256_set1_ps(c[0]);
  for (size_t k = 1; k < N; ++k)
    for (int w = 0; w < kWays; ++w) acc[w] = _mm256_add_ps(_mm256_set1_ps(c[k]), _mm256_mul_ps(s[w], acc[w]));
}
// Per lane: the `a` coefficients where `use_a` is set, else the `b` ones.
template <size_t N>
inline void horner8_select(const float (&a)[N], const float (&b)[N], const Vecs& use_a, const Vecs& s, Vecs& acc) {
  for (int w = 0; w < kWays; ++w) acc[w] = _mm256_blendv_ps(_mm256_set1_ps(b[0]), _mm256_set1_ps(a[0]), use_a[w]);
  for (size_t k = 1; k < N; ++k)
    for (int w = 0; w < kWays; ++w)
      acc[w] = _mm256_add_ps(_mm256_blendv_ps(_mm256_set1_ps(b[k]), _mm256_set1_ps(a[k]), use_a[w]),
                             _mm256_mul_ps(s[w], acc[w]));
}

#if defined(__AVX512F__)
// exp_core on eight lanes in one vector of doubles, the table read by
// permutes of its four vectors instead of a gather (a gather of four is
// the slowest step of exp_core4 on hosts whose microcode guards gathers);
// the same operations, so the same bits.
inline __m256 exp_core8(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d c = _mm512_set1_pd(kInvLn2x32), shift = _mm512_set1_pd(kRoundShift);
  const __m512d shifted = _mm512_fmadd_pd(c, xd, shift);
  const __m512i ki = _mm512_castpd_si512(shifted);
  const __m512d kd = _mm512_sub_pd(shifted, shift);
  const __m512d r = _mm512_fmsub_pd(c, xd, kd);
  // Entry ki & 31: bits 0-3 pick one of sixteen in each half, bit 4 the half.
  const __m512i* t = reinterpret_cast<const __m512i*>(kExp2Table);
  const __m512i lo = _mm512_permutex2var_epi64(_mm512_load_si512(t), ki, _mm512_load_si512(t + 1));
  const __m512i hi = _mm512_permutex2var_epi64(_mm512_load_si512(t + 2), ki, _mm512_load_si512(t + 3));
  const __m512i table = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
  const __m512i low = _mm512_set1_epi64(31);
  const __m512d scale = _mm512_castsi512_pd(_mm512_add_epi64(table, _mm512_slli_epi64(_mm512_andnot_si512(low, ki), 47)));
  const __m512d odd = _mm512_fmadd_pd(_mm512_set1_pd(kExpC0), r, _mm512_set1_pd(kExpC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kExpC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(odd, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, scale));
}
#else
// exp_core on four lanes.
inline __m128 exp_core4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d c = _mm256_set1_pd(kInvLn2x32), shift = _mm256_set1_pd(kRoundShift);
  const __m256d shifted = _mm256_fmadd_pd(c, xd, shift);
  const __m256i ki = _mm256_castpd_si256(shifted);
  const __m256d kd = _mm256_sub_pd(shifted, shift);
  const __m256d r = _mm256_fmsub_pd(c, xd, kd);
  const __m256i low = _mm256_set1_epi64x(31);
  const __m256i table =
      _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2Table), _mm256_and_si256(ki, low), 8);
  const __m256d scale =
      _mm256_castsi256_pd(_mm256_add_epi64(table, _mm256_slli_epi64(_mm256_andnot_si256(low, ki), 47)));
  const __m256d odd = _mm256_fmadd_pd(_mm256_set1_pd(kExpC0), r, _mm256_set1_pd(kExpC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kExpC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(odd, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, scale));
}
inline __m256 exp_core8(__m256 x) {
  return _mm256_set_m128(exp_core4(_mm256_extractf128_ps(x, 1)), exp_core4(_mm256_castps256_ps128(x)));
}
#endif

// kWays vectors of eight, none NaN and none below 2^-28 in magnitude. Each
// range is evaluated only if a lane falls in it, and on lanes outside it with
// a harmless stand-in, so that no floating-point flag is raised that the
// scalar form would not raise.
inline void erf_vectors(Vecs& x) {
  const __m256 sign_mask = _mm256_castsi256_ps(splat(0x80000000u));
  const __m256 one = _mm256_set1_ps(1.0f);
  Vecs ax, small, mid, tail, a, t;
  int small_lanes = 0, mid_lanes = 0, tail_lanes = 0;
  for (int w = 0; w < kWays; ++w) {
    ax[w] = _mm256_andnot_ps(sign_mask, x[w]);
    const __m256i ix = _mm256_castps_si256(ax[w]);
    const __m256 below_mid = below(ix, kMidBits);
    small[w] = below(ix, kSmallBits);
    mid[w] = _mm256_andnot_ps(small[w], below_mid);
    tail[w] = _mm256_andnot_ps(below_mid, below(ix, kTailBits));
    small_lanes |= _mm256_movemask_ps(small[w]);
    mid_lanes |= _mm256_movemask_ps(mid[w]);
    tail_lanes |= _mm256_movemask_ps(tail[w]);
    a[w] = one;  // |x| >= 6
  }
  if (mid_lanes) {
    Vecs p, q;
    for (int w = 0; w < kWays; ++w) t[w] = _mm256_sub_ps(_mm256_blendv_ps(one, ax[w], mid[w]), one);
    horner8(kMidP, t, p);
    horner8(kMidQ, t, q);
    for (int w = 0; w < kWays; ++w)
      a[w] = _mm256_blendv_ps(a[w], _mm256_add_ps(_mm256_set1_ps(kErx), _mm256_div_ps(p[w], q[w])), mid[w]);
  }
  if (tail_lanes) {
    Vecs s, near, r, q;
    for (int w = 0; w < kWays; ++w) {
      t[w] = _mm256_blendv_ps(_mm256_set1_ps(2.0f), ax[w], tail[w]);
      s[w] = _mm256_div_ps(one, _mm256_mul_ps(t[w], t[w]));
      near[w] = below(_mm256_castps_si256(t[w]), kTailSplit);
    }
    horner8_select(kNearR, kFarR, near, s, r);
    horner8_select(kNearS, kFarS, near, s, q);
    for (int w = 0; w < kWays; ++w) {
      const __m256 z = _mm256_and_ps(t[w], _mm256_castsi256_ps(splat(0xfffff000u)));
      const __m256 e1 =
          exp_core8(_mm256_sub_ps(_mm256_mul_ps(_mm256_xor_ps(z, sign_mask), z), _mm256_set1_ps(0.5625f)));
      const __m256 e2 = exp_core8(
          _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(z, t[w]), _mm256_add_ps(z, t[w])), _mm256_div_ps(r[w], q[w])));
      a[w] = _mm256_blendv_ps(a[w], _mm256_sub_ps(one, _mm256_div_ps(_mm256_mul_ps(e1, e2), t[w])), tail[w]);
    }
  }
  for (int w = 0; w < kWays; ++w) a[w] = _mm256_or_ps(a[w], _mm256_and_ps(x[w], sign_mask));
  if (small_lanes) {
    Vecs z, p, q;
    for (int w = 0; w < kWays; ++w) {
      t[w] = _mm256_blendv_ps(_mm256_set1_ps(0.5f), x[w], small[w]);
      z[w] = _mm256_mul_ps(t[w], t[w]);
    }
    horner8(kSmallP, z, p);
    horner8(kSmallQ, z, q);
    for (int w = 0; w < kWays; ++w)
      a[w] = _mm256_blendv_ps(a[w], _mm256_add_ps(t[w], _mm256_mul_ps(t[w], _mm256_div_ps(p[w], q[w]))), small[w]);
  }
  for (int w = 0; w < kWays; ++w) x[w] = a[w];
}

// exp_one on eight lanes: the core on lanes in range (zero on the others,
// which raises no flag), then the special cases blended in.
inline __m256 exp8(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(kExpOverflow), _CMP_GT_OQ);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpUnderflow), _CMP_LT_OQ);
  const __m256 special = _mm256_or_ps(nan, _mm256_or_ps(over, under));
  __m256 y = exp_core8(_mm256_andnot_ps(special, x));
  if (_mm256_movemask_ps(special)) {
    y = _mm256_blendv_ps(y, _mm256_set1_ps(HUGE_VALF), over);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);
  }
  return y;
}

}  // namespace
#endif

void erf_block(float* x, size_t n) {
  size_t j = 0;
#if NEURENIX_FLOAT_MATH_AVX2
  constexpr size_t kStep = 8 * kWays;
  // kStep elements at p, in vectors unless one is a NaN or tiny in
  // magnitude (zeros among them): then one by one.
  auto step = [](float* p) {
    __m256i one_by_one = _mm256_setzero_si256();
    Vecs v;
    for (int w = 0; w < kWays; ++w) {
      v[w] = _mm256_loadu_ps(p + 8 * w);
      const __m256i ix = _mm256_and_si256(_mm256_castps_si256(v[w]), splat(0x7fffffffu));
      one_by_one = _mm256_or_si256(one_by_one, _mm256_or_si256(_mm256_cmpgt_epi32(splat(kTinyBits), ix),
                                                                _mm256_cmpgt_epi32(ix, splat(kInfBits))));
    }
    if (_mm256_movemask_epi8(one_by_one)) {
      for (size_t k = 0; k < kStep; ++k) p[k] = erf_one(p[k]);
      return;
    }
    erf_vectors(v);
    for (int w = 0; w < kWays; ++w) _mm256_storeu_ps(p + 8 * w, v[w]);
  };
  for (; j + kStep <= n; j += kStep) step(x + j);
  if (j < n) {
    // The last few as one more step, the lanes past the end holding
    // copies of the last element (no range, and no flag, it would not
    // bring anyway).
    alignas(32) float tail[kStep];
    for (size_t k = 0; k < kStep; ++k) tail[k] = x[j + k < n ? j + k : n - 1];
    step(tail);
    for (size_t k = 0; j + k < n; ++k) x[j + k] = tail[k];
    return;
  }
#endif
  for (; j < n; ++j) x[j] = erf_one(x[j]);
}

void exp_block(float* x, size_t n) {
  size_t j = 0;
#if NEURENIX_FLOAT_MATH_AVX2
  for (; j + 16 <= n; j += 16) {
    const __m256 a = exp8(_mm256_loadu_ps(x + j)), b = exp8(_mm256_loadu_ps(x + j + 8));
    _mm256_storeu_ps(x + j, a);
    _mm256_storeu_ps(x + j + 8, b);
  }
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, exp8(_mm256_loadu_ps(x + j)));
  if (j < n) {
    // The last few in one more vector, the lanes past the end holding
    // copies of the last element.
    alignas(32) float tail[8];
    for (size_t k = 0; k < 8; ++k) tail[k] = x[j + k < n ? j + k : n - 1];
    _mm256_store_ps(tail, exp8(_mm256_load_ps(tail)));
    for (size_t k = 0; j + k < n; ++k) x[j + k] = tail[k];
    return;
  }
#endif
  for (; j < n; ++j) x[j] = exp_one(x[j]);
}

}  // namespace neurenix
