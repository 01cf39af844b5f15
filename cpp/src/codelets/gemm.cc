// The host kernel behind the matrix-product and convolution vertices:
// single-precision C = A . B with B read where it lies, a column panel at a
// time, by a register-blocked micro-kernel (GCC vector extensions: 16-column
// panels of two 8-wide vectors with AVX2/FMA; with AVX-512, 32-column panels
// of two 16-wide vectors for wide products and 16-column panels of one for
// narrow ones, when the build host has them; with AVX-512 FP16 the
// half-partials kernels keep their running sums in half lanes). Products are
// a tile's share, small enough that B stays in the core's caches: copying B
// into packed panels first, as large-matrix libraries do, cost more than it
// saved, and LIBXSMM's generated kernels are no more than 6% faster on these
// shapes (cpp/bench/small_gemm_bench.cc). Only the simulator's speed depends
// on it: results are plain float32 dot products in K order, and half partials
// the documented roundings, bit for bit in every build.
#include "neurenix/codelets/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "neurenix/half.h"

// GCC 12 reports the AVX-512 conversion and extraction intrinsics' own
// placeholder operands as (maybe) uninitialized (a false positive in its
// headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace neurenix {
namespace {

typedef float v8 __attribute__((vector_size(32)));
#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));
#endif

#if defined(__AVX512F__)
constexpr uint32_t kMR = 8;  // 16 accumulator registers of the 32
#else
constexpr uint32_t kMR = 6;  // 12 of the 16
#endif

template <typename V>
inline V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename V>
inline void storev(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

// The first n (< the width) lanes of v stored to (or added into) p, through
// masked loads and stores where the build has them (a loop here becomes a
// call to memcpy per row of a panel's last block).
template <typename V>
inline void store_tail(float* p, V v, uint32_t n, bool accumulate) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
#if defined(__AVX512F__)
  if constexpr (VW == 16) {
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    __m512 x = reinterpret_cast<__m512&>(v);
    if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), x);
    _mm512_mask_storeu_ps(p, m, x);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (VW == 8) {
    alignas(32) static constexpr int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - n));
    __m256 x = reinterpret_cast<__m256&>(v);
    if (accumulate) x = _mm256_add_ps(_mm256_maskload_ps(p, m), x);
    _mm256_maskstore_ps(p, m, x);
    return;
  }
#endif
  float tmp[VW];
  storev(tmp, v);
  for (uint32_t j = 0; j < n; ++j) p[j] = accumulate ? p[j] + tmp[j] : tmp[j];
}

// A panel is NV vectors of V wide (NR = NV x the vector width): two vectors
// in general; one 16-wide vector for products of at most 16 columns where
// the build has AVX-512 (the same 16-column panels as two 8-wide vectors,
// in half the instructions), and one vector for a partial last panel of at
// most one vector's columns (Panels, below). Every lane is its own sum, in
// the same order, whatever the width.

// The first `lanes` (1 to the width) floats at p, then zeros; nothing past
// them is read (a masked load where the build has one): the last vector of
// a partial last panel's row, read in place.
template <typename V>
inline V load_first(const float* p, uint32_t lanes) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
#if defined(__AVX512F__)
  if constexpr (VW == 16) {
    const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1), p);
    return reinterpret_cast<const V&>(x);
  }
#endif
#if defined(__AVX2__)
  if constexpr (VW == 8) {
    alignas(32) static constexpr int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const __m256 x = _mm256_maskload_ps(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - lanes)));
    return reinterpret_cast<const V&>(x);
  }
#endif
  float t[VW] = {};
  std::memcpy(t, p, lanes * sizeof(float));
  return loadv<V>(t);
}

// The same loads when B holds binary16 values: each vector widened to float
// as it is loaded (exactly; F16C's conversion where the build has it), so a
// half operand is multiplied where it lies instead of being widened into a
// buffer first.
template <typename V>
inline V loadv(const half_bits* p) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
#if defined(__AVX512F__)
  if constexpr (VW == 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return reinterpret_cast<const V&>(x);
  }
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (VW == 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return reinterpret_cast<const V&>(x);
  }
#endif
  float t[VW];
  for (uint32_t i = 0; i < VW; ++i) t[i] = half_to_float(p[i]);
  return loadv<V>(t);
}
template <typename V>
inline V load_first(const half_bits* p, uint32_t lanes) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
#if defined(__AVX512BW__)
  if constexpr (VW == 16) {
    const __m512i h = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << lanes) - 1), p);
    const __m512 x = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    return reinterpret_cast<const V&>(x);
  }
#endif
  float t[VW] = {};
  for (uint32_t i = 0; i < lanes; ++i) t[i] = half_to_float(p[i]);
  return loadv<V>(t);
}

// A row of B's panel (float32 or binary16 elements T): NV vectors at p,
// the last of them only its first `last` lanes when MASKED.
template <typename V, uint32_t NV, bool MASKED, typename T>
inline void load_panel_row(const T* p, uint32_t last, V& b0, V& b1) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
  if constexpr (NV == 1) {
    b0 = MASKED ? load_first<V>(p, last) : loadv<V>(p);
    b1 = V{};
  } else {
    b0 = loadv<V>(p);
    b1 = MASKED ? load_first<V>(p + VW, last) : loadv<V>(p + VW);
  }
}

// C[MR x NR] (+)= the accumulators (NV vectors per row: acc0, then acc1),
// `nr` valid columns.
template <typename V, uint32_t NV, uint32_t MR>
inline void store_block(const V* acc0, const V* acc1, float* __restrict c, uint32_t ldc, uint32_t nr, bool accumulate) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float), NR = NV * VW;
#pragma GCC unroll 16
  for (uint32_t r = 0; r < MR; ++r) {
    float* cr = c + r * static_cast<size_t>(ldc);
    if (nr == NR) {
      if (accumulate) {
        storev(cr, loadv<V>(cr) + acc0[r]);
        if constexpr (NV == 2) storev(cr + VW, loadv<V>(cr + VW) + acc1[r]);
      } else {
        storev(cr, acc0[r]);
        if constexpr (NV == 2) storev(cr + VW, acc1[r]);
      }
    } else {
      store_tail(cr, acc0[r], std::min(nr, VW), accumulate);
      if (NV == 2 && nr > VW) store_tail(cr + VW, acc1[r], nr - VW, accumulate);
    }
  }
}

// C[MR x NR] (+)= A[MR x kc] . P[kc x NR]; `nr` valid columns. A's k-th
// element of row r is a[r * lda + k * ak]; P's rows are `pld` floats apart;
// MASKED: nothing past a row's `nr` columns is read.
template <typename V, uint32_t NV, uint32_t MR, bool MASKED>
void micro(const float* __restrict a, uint32_t lda, uint32_t ak, const float* __restrict p, uint32_t pld, uint32_t kc,
           float* __restrict c, uint32_t ldc, uint32_t nr, bool accumulate) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
  const uint32_t last = nr - (NV - 1) * VW;
  V acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (uint32_t r = 0; r < MR; ++r) {
    acc0[r] = V{};
    acc1[r] = V{};
  }
  for (uint32_t kk = 0; kk < kc; ++kk) {
    V b0, b1;
    load_panel_row<V, NV, MASKED>(p + static_cast<size_t>(kk) * pld, last, b0, b1);
    for (uint32_t r = 0; r < MR; ++r) {
      const float x = a[r * static_cast<size_t>(lda) + static_cast<size_t>(kk) * ak];
      acc0[r] += b0 * x;
      if constexpr (NV == 2) acc1[r] += b1 * x;
    }
  }
  store_block<V, NV, MR>(acc0, acc1, c, ldc, nr, accumulate);
}

// C[MR x NR] = A[MR x kc] . B with B's row kk at rows[kk] + j0 (rows
// anywhere in memory: a convolution's taps read shifted views of its input
// planes). The same accumulation, element by element, as `micro`.
template <typename V, uint32_t NV, uint32_t MR, bool MASKED>
void micro_rows(const float* __restrict a, uint32_t lda, const float* const* __restrict rows, uint32_t j0, uint32_t kc,
                float* __restrict c, uint32_t ldc, uint32_t nr) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
  const uint32_t last = nr - (NV - 1) * VW;
  V acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (uint32_t r = 0; r < MR; ++r) {
    acc0[r] = V{};
    acc1[r] = V{};
  }
  for (uint32_t kk = 0; kk < kc; ++kk) {
    V b0, b1;
    load_panel_row<V, NV, MASKED>(rows[kk] + j0, last, b0, b1);
    for (uint32_t r = 0; r < MR; ++r) {
      const float x = a[r * static_cast<size_t>(lda) + kk];
      acc0[r] += b0 * x;
      if constexpr (NV == 2) acc1[r] += b1 * x;
    }
  }
  store_block<V, NV, MR>(acc0, acc1, c, ldc, nr, false);
}

using MicroRowsFn = void (*)(const float*, uint32_t, const float* const*, uint32_t, uint32_t, float*, uint32_t, uint32_t);

// Kernels by rows per block, in tables held once in read-only data (a
// table local to the lookup was rebuilt on the stack at every call, and the
// call's load waited on that store: 4% of a ResNet-50 b1 run).
template <typename V, uint32_t NV, bool MASKED>
inline constexpr MicroRowsFn kMicroRows[9] = {nullptr,
                                              micro_rows<V, NV, 1, MASKED>,
                                              micro_rows<V, NV, 2, MASKED>,
                                              micro_rows<V, NV, 3, MASKED>,
                                              micro_rows<V, NV, 4, MASKED>,
                                              micro_rows<V, NV, 5, MASKED>,
                                              micro_rows<V, NV, 6, MASKED>,
                                              micro_rows<V, NV, 7, MASKED>,
                                              micro_rows<V, NV, 8, MASKED>};
template <typename V, uint32_t NV, bool MASKED>
inline MicroRowsFn micro_rows_for(uint32_t mr) {
  return kMicroRows<V, NV, MASKED>[mr];
}

// How n columns fall into panels of NV vectors: `full` panels at full width
// (the last of them partial when every row may be read past n, `readable`),
// then `tail` columns, read in place from column full x NR. A partial last
// panel of at most one vector's columns is the tail and runs on a
// one-vector kernel (`narrow`); a tail that is not readable past n is read
// with masked loads (`masked`).
template <typename V, uint32_t NV>
struct Panels {
  static constexpr uint32_t VW = sizeof(V) / sizeof(float), NR = NV * VW;
  uint32_t full, tail;
  bool narrow, masked;
  Panels(uint32_t n, bool readable) {
    const uint32_t rem = n % NR;
    narrow = NV == 2 && rem != 0 && rem <= VW;
    full = readable && !narrow ? (n + NR - 1) / NR : n / NR;
    tail = n - std::min(n, full * NR);
    masked = !readable;
  }
  // The tail's kernel, from `For<vectors per row, masked>(mr)`.
  template <class Fn, class For>
  Fn tail_kernel(For kernels, uint32_t mr) const {
    return narrow ? (masked ? kernels(std::integral_constant<uint32_t, 1>{}, std::true_type{}, mr)
                            : kernels(std::integral_constant<uint32_t, 1>{}, std::false_type{}, mr))
                  : (masked ? kernels(std::integral_constant<uint32_t, NV>{}, std::true_type{}, mr)
                            : kernels(std::integral_constant<uint32_t, NV>{}, std::false_type{}, mr));
  }
};

template <typename V, uint32_t NV>
void run_rows(const float* a, uint32_t lda, const float* const* rows, float* c, uint32_t m, uint32_t n, uint32_t k,
              uint32_t ldc, bool readable_tail) {
  constexpr uint32_t NR = NV * sizeof(V) / sizeof(float);
  const Panels<V, NV> p(n, readable_tail);
  auto kernels = [](auto nv, auto masked, uint32_t mr) { return micro_rows_for<V, decltype(nv)::value, decltype(masked)::value>(mr); };
  for (uint32_t i0 = 0; i0 < m; i0 += kMR) {
    const uint32_t mr = std::min(kMR, m - i0);
    const float* ai = a + static_cast<size_t>(i0) * lda;
    float* ci = c + static_cast<size_t>(i0) * ldc;
    for (uint32_t pj = 0; pj < p.full; ++pj)
      micro_rows_for<V, NV, false>(mr)(ai, lda, rows, pj * NR, k, ci + pj * NR, ldc, std::min(NR, n - pj * NR));
    if (p.tail)
      p.template tail_kernel<MicroRowsFn>(kernels, mr)(ai, lda, rows, p.full * NR, k, ci + p.full * NR, ldc, p.tail);
  }
}

// Every lane of x rounded to the nearest binary16 value (ties to even) and
// widened back, as round_to_half_n.
template <typename V>
inline V round_half(V x) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
#if defined(__AVX512F__)
  if constexpr (VW == 16) {
    const __m512 y = _mm512_cvtph_ps(
        _mm512_cvtps_ph(reinterpret_cast<const __m512&>(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return reinterpret_cast<const V&>(y);
  }
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (VW == 8) {
    const __m256 y = _mm256_cvtph_ps(_mm256_cvtps_ph(reinterpret_cast<const __m256&>(x), _MM_FROUND_TO_NEAREST_INT));
    return reinterpret_cast<const V&>(y);
  }
#endif
  float t[VW];
  storev(t, x);
  for (uint32_t i = 0; i < VW; ++i) t[i] = round_to_half(t[i]);
  return loadv<V>(t);
}

// A row's running sums in half (NV vectors of V lanes): add(t0, t1) rounds
// the float chunk sums to half and adds them, each sum rounded to half
// again (round_half(sum + round_half(t))). Where the build has AVX-512 FP16
// a row's sums stay in one register of 32 half lanes and are added there
// (vaddph): for two binary16 values the float sum rounded to half is the
// half sum rounded once (a float holds the exact sum of two halves whenever
// it matters), so every lane is bit for bit the same.
template <typename V, uint32_t NV, bool FP16 = false>
struct HalfRow {
  V s0{}, s1{};
  void add(V t0, V t1) {
    s0 = round_half<V>(s0 + round_half<V>(t0));
    if constexpr (NV == 2) s1 = round_half<V>(s1 + round_half<V>(t1));
  }
  // add() from sums of zero: round_half(0 + h) for h = round_half(t) is
  // h + 0 (h is already a binary16 value; adding +0 turns -0 into +0, as
  // the sum does), two conversions fewer.
  void first(V t0, V t1) {
    s0 = round_half<V>(t0) + V{};
    if constexpr (NV == 2) s1 = round_half<V>(t1) + V{};
  }
  void widen(V& o0, V& o1) const {
    o0 = s0;
    o1 = s1;
  }
};
#if defined(__AVX512FP16__)
inline constexpr bool kHalfAdd = true;
template <uint32_t NV>
struct HalfRow<v16, NV, true> {
  __m512h s = _mm512_setzero_ph();
  void add(v16 t0, v16 t1) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512i h = _mm512_zextsi256_si512(_mm512_cvtps_ph(reinterpret_cast<const __m512&>(t0), kNearest));
    if constexpr (NV == 2) h = _mm512_inserti64x4(h, _mm512_cvtps_ph(reinterpret_cast<const __m512&>(t1), kNearest), 1);
    s = _mm512_add_ph(s, _mm512_castsi512_ph(h));
  }
  void first(v16 t0, v16 t1) { add(t0, t1); }
  void widen(v16& o0, v16& o1) const {
    const __m512i h = _mm512_castph_si512(s);
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    o0 = reinterpret_cast<const v16&>(lo);
    o1 = reinterpret_cast<const v16&>(hi);
  }
};
#else
inline constexpr bool kHalfAdd = false;
#endif

// Half partials in registers: C[MR x NR] = the chunks of `depth` products
// of A[MR x k] . B (rows as micro_rows), each chunk summed in float from 0
// in order (as micro_rows sums it), times `scale` when that is not 1,
// rounded to half and added to a running sum rounded to half after each
// add (HalfRow): the arithmetic of sum_in_half_partials with
// add_rounded_to_half, without a pass over memory per chunk.
template <typename V, uint32_t NV, uint32_t MR, bool MASKED, typename B>
void micro_rows_half(const float* __restrict a, uint32_t lda, const B* const* __restrict rows, uint32_t j0, uint32_t k,
                     uint32_t depth, float scale, float* __restrict c, uint32_t ldc, uint32_t nr) {
  constexpr uint32_t VW = sizeof(V) / sizeof(float);
  using Sums = HalfRow<V, NV, kHalfAdd && VW == 16>;
  const uint32_t last = nr - (NV - 1) * VW;
  const bool scaled = scale != 1.0f;
  const V sv = V{} + scale;
  Sums acc[MR];
  for (uint32_t k0 = 0; k0 < k; k0 += depth) {
    const uint32_t k1 = std::min(k, k0 + depth);
    V t0[MR], t1[MR];
#pragma GCC unroll 16
    for (uint32_t r = 0; r < MR; ++r) {
      t0[r] = V{};
      t1[r] = V{};
    }
    for (uint32_t kk = k0; kk < k1; ++kk) {
      V b0, b1;
      load_panel_row<V, NV, MASKED>(rows[kk] + j0, last, b0, b1);
#pragma GCC unroll 16
      for (uint32_t r = 0; r < MR; ++r) {
        const float x = a[r * static_cast<size_t>(lda) + kk];
        t0[r] += b0 * x;
        if constexpr (NV == 2) t1[r] += b1 * x;
      }
    }
    if (k0 == 0) {
#pragma GCC unroll 16
      for (uint32_t r = 0; r < MR; ++r) acc[r].first(scaled ? t0[r] * sv : t0[r], scaled ? t1[r] * sv : t1[r]);
    } else {
#pragma GCC unroll 16
      for (uint32_t r = 0; r < MR; ++r) acc[r].add(scaled ? t0[r] * sv : t0[r], scaled ? t1[r] * sv : t1[r]);
    }
  }
  V out0[MR], out1[MR];
#pragma GCC unroll 16
  for (uint32_t r = 0; r < MR; ++r) acc[r].widen(out0[r], out1[r]);
  store_block<V, NV, MR>(out0, out1, c, ldc, nr, false);
}

// Rows per block. With AVX-512: 8, as the float32 kernels (16 chunk sums,
// 2 of B and A's broadcast in registers; with AVX-512 FP16 a row's running
// sums take one more register each, without it the compiler keeps the
// running sums on the stack between chunks: 16 loads and 16 stores a
// chunk of 8 rows of 2 vectors, 256 multiply-adds). Blocks of 6 rows,
// every sum in a register, with the first chunk rounded twice, ran
// 1.01-1.16x the time of this kernel on the shapes of
// cpp/bench/half_partials_bench.cc (docs/benchmarks.md).
#if defined(__AVX512F__)
constexpr uint32_t kMRHalf = 8;
#else
constexpr uint32_t kMRHalf = 3;
#endif

// (B: the element type of B's rows, float or half_bits.)
template <typename B>
using MicroRowsHalfFn = void (*)(const float*, uint32_t, const B* const*, uint32_t, uint32_t, uint32_t, float, float*,
                                 uint32_t, uint32_t);

template <typename V, uint32_t NV, bool MASKED, typename B>
inline constexpr MicroRowsHalfFn<B> kMicroRowsHalf[9] = {nullptr,
                                                         micro_rows_half<V, NV, 1, MASKED, B>,
                                                         micro_rows_half<V, NV, 2, MASKED, B>,
                                                         micro_rows_half<V, NV, 3, MASKED, B>,
                                                         micro_rows_half<V, NV, 4, MASKED, B>,
                                                         micro_rows_half<V, NV, 5, MASKED, B>,
                                                         micro_rows_half<V, NV, 6, MASKED, B>,
                                                         micro_rows_half<V, NV, 7, MASKED, B>,
                                                         micro_rows_half<V, NV, 8, MASKED, B>};
template <typename V, uint32_t NV, bool MASKED, typename B>
inline MicroRowsHalfFn<B> micro_rows_half_for(uint32_t mr) {
  return kMicroRowsHalf<V, NV, MASKED, B>[mr];
}

template <typename V, uint32_t NV, typename B>
void run_rows_half(const float* a, uint32_t lda, const B* const* rows, float* c, uint32_t m, uint32_t n, uint32_t k,
                   uint32_t ldc, uint32_t depth, float scale, bool readable_tail) {
  constexpr uint32_t NR = NV * sizeof(V) / sizeof(float);
  const Panels<V, NV> p(n, readable_tail);
  auto kernels = [](auto nv, auto masked, uint32_t mr) {
    return micro_rows_half_for<V, decltype(nv)::value, decltype(masked)::value, B>(mr);
  };
  // Blocks of rows as even as kMRHalf allows (20 rows as 7, 7, 6, not 8,
  // 8, 4): every block reads all of B's rows once, whatever its rows.
  const uint32_t blocks = (m + kMRHalf - 1) / kMRHalf;
  for (uint32_t bi = 0, i0 = 0, mr; bi < blocks; ++bi, i0 += mr) {
    mr = m / blocks + (bi < m % blocks ? 1 : 0);
    const float* ai = a + static_cast<size_t>(i0) * lda;
    float* ci = c + static_cast<size_t>(i0) * ldc;
    for (uint32_t pj = 0; pj < p.full; ++pj)
      micro_rows_half_for<V, NV, false, B>(mr)(ai, lda, rows, pj * NR, k, depth, scale, ci + pj * NR, ldc,
                                               std::min(NR, n - pj * NR));
    if (p.tail)
      p.template tail_kernel<MicroRowsHalfFn<B>>(kernels, mr)(ai, lda, rows, p.full * NR, k, depth, scale, ci + p.full * NR,
                                                           ldc, p.tail);
  }
}

using MicroFn = void (*)(const float*, uint32_t, uint32_t, const float*, uint32_t, uint32_t, float*, uint32_t, uint32_t,
                         bool);

template <typename V, uint32_t NV, bool MASKED>
inline constexpr MicroFn kMicro[9] = {nullptr,
                                      micro<V, NV, 1, MASKED>,
                                      micro<V, NV, 2, MASKED>,
                                      micro<V, NV, 3, MASKED>,
                                      micro<V, NV, 4, MASKED>,
                                      micro<V, NV, 5, MASKED>,
                                      micro<V, NV, 6, MASKED>,
                                      micro<V, NV, 7, MASKED>,
                                      micro<V, NV, 8, MASKED>};
template <typename V, uint32_t NV, bool MASKED>
inline MicroFn micro_for(uint32_t mr) {
  return kMicro<V, NV, MASKED>[mr];
}

// B (rows `ldb` apart) read in place.
template <typename V, uint32_t NV>
void run_strided(const float* a, uint32_t lda, uint32_t ak, const float* b, uint32_t ldb, float* c, uint32_t m,
                 uint32_t n, uint32_t k, uint32_t ldc, bool accumulate, bool readable_tail) {
  constexpr uint32_t NR = NV * sizeof(V) / sizeof(float);
  const Panels<V, NV> p(n, readable_tail);
  auto kernels = [](auto nv, auto masked, uint32_t mr) { return micro_for<V, decltype(nv)::value, decltype(masked)::value>(mr); };
  for (uint32_t i0 = 0; i0 < m; i0 += kMR) {
    const uint32_t mr = std::min(kMR, m - i0);
    const float* ai = a + static_cast<size_t>(i0) * lda;
    float* ci = c + static_cast<size_t>(i0) * ldc;
    for (uint32_t pj = 0; pj < p.full; ++pj)
      micro_for<V, NV, false>(mr)(ai, lda, ak, b + pj * NR, ldb, k, ci + pj * NR, ldc, std::min(NR, n - pj * NR),
                                  accumulate);
    if (p.tail)
      p.template tail_kernel<MicroFn>(kernels, mr)(ai, lda, ak, b + p.full * NR, ldb, k, ci + p.full * NR, ldc, p.tail,
                                                   accumulate);
  }
}

// The entry points' common frame: nothing for an empty C; for K = 0, C
// zeroed (unless accumulating into it); otherwise run(a vector, vectors per
// panel row as an integral constant) in the panel layout gemm_panel(n)
// picks for this build.
template <class Run>
void with_panels(float* c, uint32_t m, uint32_t n, uint32_t k, uint32_t ldc, bool accumulate, Run run) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (uint32_t i = 0; i < m; ++i) std::fill(c + static_cast<size_t>(i) * ldc, c + static_cast<size_t>(i) * ldc + n, 0.0f);
    return;
  }
#if defined(__AVX512F__)
  if (gemm_panel(n) == 32) run(v16{}, std::integral_constant<uint32_t, 2>{});
  else run(v16{}, std::integral_constant<uint32_t, 1>{});
#else
  run(v8{}, std::integral_constant<uint32_t, 2>{});
#endif
}

}  // namespace

uint32_t gemm_panel(uint32_t n) {
#if defined(__AVX512F__)
  return n > 16 ? 32 : 16;
#else
  (void)n;
  return 16;
#endif
}

void gemm_f32_strided(const float* a, uint32_t lda, uint32_t a_kstride, const float* b, uint32_t ldb, float* c, uint32_t m,
                      uint32_t n, uint32_t k, uint32_t ldc, bool accumulate, bool readable_tail) {
  with_panels(c, m, n, k, ldc, accumulate, [&](auto v, auto nv) {
    run_strided<decltype(v), decltype(nv)::value>(a, lda, a_kstride, b, ldb, c, m, n, k, ldc, accumulate, readable_tail);
  });
}

void gemm_f32_rows(const float* a, uint32_t lda, const float* const* rows, float* c, uint32_t m, uint32_t n, uint32_t k,
                   uint32_t ldc, bool readable_tail) {
  with_panels(c, m, n, k, ldc, false, [&](auto v, auto nv) {
    run_rows<decltype(v), decltype(nv)::value>(a, lda, rows, c, m, n, k, ldc, readable_tail);
  });
}

void gemm_half_partials_rows(const float* a, uint32_t lda, const float* const* rows, float* c, uint32_t m, uint32_t n,
                             uint32_t k, uint32_t ldc, uint32_t depth, float scale, bool readable_tail) {
  with_panels(c, m, n, k, ldc, false, [&](auto v, auto nv) {
    run_rows_half<decltype(v), decltype(nv)::value, float>(a, lda, rows, c, m, n, k, ldc, depth, scale, readable_tail);
  });
}

void gemm_half_partials_rows(const float* a, uint32_t lda, const half_bits* const* rows, float* c, uint32_t m, uint32_t n,
                             uint32_t k, uint32_t ldc, uint32_t depth, float scale, bool readable_tail) {
  with_panels(c, m, n, k, ldc, false, [&](auto v, auto nv) {
    run_rows_half<decltype(v), decltype(nv)::value, half_bits>(a, lda, rows, c, m, n, k, ldc, depth, scale,
                                                               readable_tail);
  });
}

void gemm_f32(const float* a, const float* b, float* c, uint32_t m, uint32_t n, uint32_t k, uint32_t lda, uint32_t ldb,
              uint32_t ldc, bool accumulate) {
  // B read in place, whatever the shape: packing it into panels first cost
  // more than it saved on products of a tile's size (cpp/bench/small_gemm_bench.cc).
  gemm_f32_strided(a, lda, 1, b, ldb, c, m, n, k, ldc, accumulate, false);
}

}  // namespace neurenix
