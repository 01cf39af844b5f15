// Benchmark of the half-partials product kernels (codelets/gemm.h) and of
// what their arithmetic costs on this host, everything hot in the caches.
//
// 1. For tile shares of the benchmark models' products: gemm_half_partials_rows
//    with B's rows as binary16 values and as floats, next to gemm_f32_rows
//    (the float32 product of the same shape), the best of seven timings of
//    20,000 calls each. Every row is exactly n values long, read through
//    masked loads at its end (as a convolution reads half rows in place;
//    its float rows, in padded phase planes, are read whole).
// 2. Where the build has AVX-512: what rounding a vector of sums to half
//    costs next to the fused multiply-adds of a product (16 FMAs an
//    iteration on 8 chains, then a rounding of some of their results, off
//    the chains), as the F16C conversion pair the kernels use and as
//    integer and add-and-subtract arithmetic giving the same bits (below
//    65,520 in magnitude), in units of one FMA's time in the loop without
//    roundings (a cycle where the core runs one 16-lane FMA a cycle).
//
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_half_partials_bench
//   build/cpp/neurenix_half_partials_bench
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "neurenix/codelets/gemm.h"
#include "product_timing.h"
#include "neurenix/half.h"

namespace {

using neurenix::half_bits;

using neurenix_bench::best_seconds;
using Shape = neurenix_bench::ProductShape;

// Float16 shares from the plans of SqueezeNet, ResNet-50 and the BERT-style
// encoder (rows x columns x depth as the kernel sees them).
const Shape kShapes[] = {
    {8, 13, 32, "SqueezeNet 1x1, 13 wide"},
    {24, 26, 103, "SqueezeNet conv10 (1x1)"},
    {8, 57, 72, "SqueezeNet 3x3, 55 wide"},
    {8, 57, 144, "SqueezeNet 3x3, 16 channels"},
    {16, 64, 288, "3x3, 32 channels"},
    {32, 169, 16, "1x1, 13 x 13"},
    {32, 64, 94, "BERT-style b8"},
};

void kernels() {
  std::printf("| shape (m x n x k) | from | half rows (us) | float rows (us) | float32 product (us) | half rows / float32 |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Shape& s : kShapes) {
    const uint32_t m = s.m, n = s.n, k = s.k;
    std::vector<float> a(static_cast<size_t>(m) * k), c(static_cast<size_t>(m) * n);
    // Rows of exactly n values (nothing read past them), the floats the
    // halves hold.
    std::vector<std::vector<float>> fr(k, std::vector<float>(n));
    std::vector<std::vector<half_bits>> hr(k, std::vector<half_bits>(n));
    std::vector<const float*> fp(k);
    std::vector<const half_bits*> hp(k);
    for (float& x : a) x = neurenix::half_to_float(neurenix::float_to_half(u(rng)));
    for (uint32_t p = 0; p < k; ++p) {
      for (uint32_t j = 0; j < n; ++j) {
        hr[p][j] = neurenix::float_to_half(u(rng));
        fr[p][j] = neurenix::half_to_float(hr[p][j]);
      }
      fp[p] = fr[p].data();
      hp[p] = hr[p].data();
    }
    constexpr int kCalls = 20000;
    const double th = best_seconds(
        [&] { neurenix::gemm_half_partials_rows(a.data(), k, hp.data(), c.data(), m, n, k, n, 16, 1.0f, false); }, kCalls);
    const double tf = best_seconds(
        [&] { neurenix::gemm_half_partials_rows(a.data(), k, fp.data(), c.data(), m, n, k, n, 16, 1.0f, false); }, kCalls);
    const double t32 =
        best_seconds([&] { neurenix::gemm_f32_rows(a.data(), k, fp.data(), c.data(), m, n, k, n, false); }, kCalls);
    std::printf("| %u x %u x %u | %s | %.2f | %.2f | %.2f | %.2f |\n", m, n, k, s.from, th * 1e6, tf * 1e6, t32 * 1e6,
                th / t32);
  }
}

#if defined(__AVX512F__)
// (GCC 12 warns about the undefined operands inside its own AVX-512
// intrinsics, _mm512_reduce_add_ps and _mm512_max_epi32.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 FMAs an iteration on 8 independent chains, then `Extra` on the chains'
// values (its results folded into other registers by an add, so that it
// adds work without lengthening the chains).
#define NX_R8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define NX_DECLARE(i)                             \
  __m512 a##i = _mm512_set1_ps(1.0f + 0.1f * i);  \
  __m512 b##i = _mm512_setzero_ps();
#define NX_FMA(i) a##i = _mm512_fmadd_ps(a##i, d, d);
#define NX_SUM(i) +_mm512_reduce_add_ps(a##i) + _mm512_reduce_add_ps(b##i)
// The conversion pair: to binary16 and back.
#define NX_PAIR(i) b##i = _mm512_add_ps(b##i, _mm512_cvtph_ps(_mm512_cvtps_ph(a##i, _MM_FROUND_TO_NEAREST_INT)));
// The same bits below 65,520 by arithmetic: x + M - M for M = 1.5 x 2^(e+13)
// (e: x's binary exponent, at least -14), the sign put back, and a check
// for the values it does not cover.
#define NX_ARITH(i)                                                                                                   \
  {                                                                                                                   \
    const __m512i bits = _mm512_castps_si512(a##i);                                                                  \
    big |= _mm512_cmpge_epu32_mask(_mm512_and_si512(bits, abs_mask), limit);                                          \
    const __m512 magic = _mm512_castsi512_ps(_mm512_max_epi32(_mm512_add_epi32(_mm512_and_si512(bits, exp_mask), bias), \
                                                              least));                                                \
    const __m512 r = _mm512_sub_ps(_mm512_add_ps(a##i, magic), magic);                                                \
    b##i = _mm512_add_ps(b##i, _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(r), bits, sign, 0xF8))); \
  }
#define NX_LOOP(name, EXTRA)                                                                                          \
  __attribute__((noinline)) float name(long n, __m512 d) {                                                            \
    NX_R8(NX_DECLARE)                                                                                                 \
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), limit = _mm512_set1_epi32(0x477FF000),                    \
                  exp_mask = _mm512_set1_epi32(0x7F800000), bias = _mm512_set1_epi32((13 << 23) | 0x400000),          \
                  least = _mm512_set1_epi32(0x3F400000), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));      \
    __mmask16 big = 0;                                                                                                \
    for (long it = 0; it < n; ++it) {                                                                                 \
      NX_R8(NX_FMA) NX_R8(NX_FMA) EXTRA                                                                               \
    }                                                                                                                 \
    (void)abs_mask, (void)limit, (void)exp_mask, (void)bias, (void)least, (void)sign;                                 \
    return (big ? 1.0f : 0.0f) NX_R8(NX_SUM);                                                                         \
  }
NX_LOOP(fma_only, )
NX_LOOP(pairs_2, NX_PAIR(0) NX_PAIR(1))
NX_LOOP(pairs_4, NX_PAIR(0) NX_PAIR(1) NX_PAIR(2) NX_PAIR(3))
NX_LOOP(pairs_8, NX_R8(NX_PAIR))
NX_LOOP(arith_2, NX_ARITH(0) NX_ARITH(1))
NX_LOOP(arith_4, NX_ARITH(0) NX_ARITH(1) NX_ARITH(2) NX_ARITH(3))

void rounding() {
  constexpr long kIterations = 10000000;
  const __m512 d = _mm512_set1_ps(0.999f);
  volatile float sink = 0;
  const double one = best_seconds([&] { sink = fma_only(kIterations, d); }, 1) / kIterations / 16;  // an FMA
  std::printf("\n| 16 FMAs an iteration, and | cycles of one FMA an iteration | over the FMAs alone |\n|---|---|---|\n");
  struct Loop {
    const char* what;
    float (*fn)(long, __m512);
  };
  const Loop loops[] = {{"nothing", fma_only},
                        {"2 conversion pairs", pairs_2},
                        {"4 conversion pairs", pairs_4},
                        {"8 conversion pairs", pairs_8},
                        {"2 roundings by arithmetic", arith_2},
                        {"4 roundings by arithmetic", arith_4}};
  for (const Loop& l : loops) {
    const double t = best_seconds([&] { sink = l.fn(kIterations, d); }, 1) / kIterations / one;
    std::printf("| %s | %.1f | %+.1f |\n", l.what, t, t - 16);
  }
  (void)sink;
}
#pragma GCC diagnostic pop
#endif

}  // namespace

int main() {
  kernels();
#if defined(__AVX512F__)
  rounding();
#endif
  return 0;
}
