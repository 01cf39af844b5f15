// The float product kernel behind the matrix-product and convolution vertices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "neurenix/codelets/gemm.h"
#include "neurenix/half.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;
using MNK = std::tuple<uint32_t, uint32_t, uint32_t>;

TEST(Gemm, MatchesDoubleReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {3, 5, 7}, {4, 4, 4}, {9, 13, 130},
                         {5, 600, 3}, {6, 520, 260}, {17, 3, 1}, {12, 40, 9}, {25, 47, 33}}) {
    const uint32_t lda = k + 3, ldb = n + 1, ldc = n + 2;
    std::vector<float> a(m * lda), b(k * ldb), c(m * ldc, 0.5f);
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    for (bool accumulate : {false, true}) {
      std::vector<float> cc = c;
      gemm_f32(a.data(), b.data(), cc.data(), m, n, k, lda, ldb, ldc, accumulate);
      for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < ldc; ++j) {
          if (j >= n) {
            ASSERT_EQ(cc[i * ldc + j], 0.5f) << "touched padding";
            continue;
          }
          double ref = accumulate ? 0.5 : 0.0, mag = std::fabs(ref);
          for (uint32_t p = 0; p < k; ++p) {
            ref += static_cast<double>(a[i * lda + p]) * b[p * ldb + j];
            mag += std::fabs(static_cast<double>(a[i * lda + p]) * b[p * ldb + j]);
          }
          ASSERT_NEAR(cc[i * ldc + j], ref, 1e-6 * mag + (k + 1) * mag * std::ldexp(1.0, -24)) << m << "x" << n << "x" << k;
        }
    }
  }
}

// B's rows through pointers, each row its own allocation of exactly n floats:
// without a readable tail nothing past a row is read (AddressSanitizer
// builds would stop on it), and the sums are those of the in-place product.
TEST(Gemm, RowsThroughPointersMatchTheReferenceAndReadOnlyTheRows) {
  std::mt19937 rng(22);
  std::normal_distribution<float> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {3, 5, 7}, {8, 49, 64}, {9, 33, 10}, {5, 100, 3}, {12, 40, 9}, {13, 14, 20}, {37, 70, 11}}) {
    const uint32_t lda = k + 1, ldc = n + 2;
    std::vector<float> a(m * lda), packed(static_cast<size_t>(k) * n);
    for (auto& v : a) v = nd(rng);
    std::vector<std::vector<float>> rows(k, std::vector<float>(n));
    std::vector<const float*> ptrs(k);
    for (uint32_t p = 0; p < k; ++p) {
      for (uint32_t j = 0; j < n; ++j) packed[p * n + j] = rows[p][j] = nd(rng);
      ptrs[p] = rows[p].data();
    }
    std::vector<float> c(m * ldc, 0.5f), in_place(m * ldc, 0.5f);
    gemm_f32_rows(a.data(), lda, ptrs.data(), c.data(), m, n, k, ldc, false);
    gemm_f32_strided(a.data(), lda, 1, packed.data(), n, in_place.data(), m, n, k, ldc, false, false);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < ldc; ++j) {
        if (j >= n) {
          ASSERT_EQ(c[i * ldc + j], 0.5f) << "touched padding";
          continue;
        }
        double ref = 0, mag = 0;
        for (uint32_t p = 0; p < k; ++p) {
          ref += static_cast<double>(a[i * lda + p]) * rows[p][j];
          mag += std::fabs(static_cast<double>(a[i * lda + p]) * rows[p][j]);
        }
        ASSERT_NEAR(c[i * ldc + j], ref, 1e-6 * mag + (k + 1) * mag * std::ldexp(1.0, -24)) << m << "x" << n << "x" << k;
        ASSERT_EQ(c[i * ldc + j], in_place[i * ldc + j]) << m << "x" << n << "x" << k << " at " << i << "," << j;
      }
  }
}

// The half-partials product against a reference in double: inputs of
// quarters and small integers keep every chunk's float sum exact, so the
// only roundings are the documented ones (each chunk's sum times the scale
// to half, the running sum to half after each add), and the result must be
// equal bit for bit. Rows blocks of every height, partial last panels read
// through copies or in place, K not a multiple of the depth; B's rows as
// floats and as binary16 values.
TEST(Gemm, HalfPartialsInRegistersMatchTheAmpReference) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> q(-40, 40);
  for (auto [m, n, k] :
       std::vector<MNK>{{1, 1, 1}, {5, 7, 15}, {6, 33, 16}, {13, 49, 100}, {7, 16, 70}, {12, 64, 33}, {8, 48, 40},
                        {9, 40, 48}, {17, 31, 32}, {20, 70, 17}, {25, 16, 50}})
    for (uint32_t depth : {16u, 32u})
      for (float scale : {1.0f, 0.25f, 3.0f})
        for (bool readable : {false, true}) {
          const uint32_t lda = k + 3, ldc = n + 2;
          std::vector<float> a(m * lda);
          for (auto& v : a) v = static_cast<float>(q(rng)) / 4.0f;
          // Rows padded to whole panels plus slack when read in place.
          std::vector<std::vector<float>> rows(k, std::vector<float>(n + 64, 1e30f));
          std::vector<const float*> ptrs(k);
          for (uint32_t p = 0; p < k; ++p) {
            for (uint32_t j = 0; j < n; ++j) rows[p][j] = static_cast<float>(q(rng)) + 0.5f;
            ptrs[p] = rows[p].data();
          }
          std::vector<float> c(m * ldc, 0.5f);
          gemm_half_partials_rows(a.data(), lda, ptrs.data(), c.data(), m, n, k, ldc, depth, scale, readable);
          // The same rows as binary16 values read in place: rows of exactly
          // n values unless readable (reading past them fails under ASan).
          std::vector<std::vector<half_bits>> half_rows(k);
          std::vector<const half_bits*> half_ptrs(k);
          for (uint32_t p = 0; p < k; ++p) {
            half_rows[p].assign(readable ? n + 64 : n, float_to_half(65504.0f));
            for (uint32_t j = 0; j < n; ++j) half_rows[p][j] = float_to_half(rows[p][j]);
            half_ptrs[p] = half_rows[p].data();
          }
          std::vector<float> ch(m * ldc, 0.5f);
          gemm_half_partials_rows(a.data(), lda, half_ptrs.data(), ch.data(), m, n, k, ldc, depth, scale, readable);
          for (uint32_t i = 0; i < m; ++i)
            for (uint32_t j = 0; j < ldc; ++j) {
              if (j >= n) {
                ASSERT_EQ(c[i * ldc + j], 0.5f) << "touched padding";
                ASSERT_EQ(ch[i * ldc + j], 0.5f) << "touched padding (half rows)";
                continue;
              }
              double acc = 0;
              for (uint32_t c0 = 0; c0 < k; c0 += depth) {
                double chunk = 0;
                for (uint32_t p = c0; p < std::min(k, c0 + depth); ++p)
                  chunk += static_cast<double>(a[i * lda + p]) * rows[p][j];
                acc = ref_round_half(acc + ref_round_half(chunk * scale));
              }
              ASSERT_EQ(c[i * ldc + j], acc) << m << "x" << n << "x" << k << " depth " << depth << " scale " << scale
                                             << (readable ? " in place" : " copied") << " at " << i << "," << j;
              ASSERT_EQ(ch[i * ldc + j], acc) << m << "x" << n << "x" << k << " depth " << depth << " scale " << scale
                                              << (readable ? " in place" : " copied") << " at " << i << "," << j
                                              << " (half rows)";
            }
        }
}

// The running sums in half at their edges, where AVX-512 FP16 builds add
// them in half lanes: chunk sums scaled into half's subnormal range (and
// rounded there), past its largest value (infinities, and NaN where
// infinities of both signs meet), and across the blocks of rows (1 to 25
// rows). Each lane must equal the AMP reference bit for bit (any NaN for a
// NaN).
TEST(Gemm, HalfPartialsAtTheEdgesOfHalf) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> q(-40, 40);
  for (uint32_t m : {1u, 3u, 8u, 11u, 25u})
    for (uint32_t n : {16u, 45u})
      for (float scale : {0x1p-27f, 0x1p-20f, 0x1p6f, 0x1p10f}) {
        const uint32_t k = 70, lda = k, ldc = n;
        std::vector<float> a(m * lda);
        for (auto& v : a) v = static_cast<float>(q(rng)) / 4.0f;
        std::vector<std::vector<float>> rows(k, std::vector<float>(n + 64, 0.0f));
        std::vector<const float*> ptrs(k);
        for (uint32_t p = 0; p < k; ++p) {
          for (uint32_t j = 0; j < n; ++j) rows[p][j] = static_cast<float>(q(rng)) + 0.5f;
          ptrs[p] = rows[p].data();
        }
        std::vector<float> c(m * ldc);
        gemm_half_partials_rows(a.data(), lda, ptrs.data(), c.data(), m, n, k, ldc, 16, scale, false);
        uint64_t special = 0;
        for (uint32_t i = 0; i < m; ++i)
          for (uint32_t j = 0; j < n; ++j) {
            double acc = 0;
            for (uint32_t c0 = 0; c0 < k; c0 += 16) {
              double chunk = 0;
              for (uint32_t p = c0; p < std::min(k, c0 + 16); ++p) chunk += static_cast<double>(a[i * lda + p]) * rows[p][j];
              acc = ref_round_half(acc + ref_round_half(chunk * scale));
            }
            const float got = c[i * ldc + j];
            special += !std::isfinite(acc) || (acc != 0 && std::fabs(acc) < 0x1p-14);
            if (std::isnan(acc)) {
              ASSERT_TRUE(std::isnan(got)) << m << "x" << n << " scale " << scale << " at " << i << "," << j;
            } else {
              ASSERT_EQ(got, acc) << m << "x" << n << " scale " << scale << " at " << i << "," << j;
              // Zeros with their sign: a chunk rounded to -0 added to
              // sums of +0 gives +0.
              ASSERT_EQ(std::signbit(got), std::signbit(acc))
                  << m << "x" << n << " scale " << scale << " at " << i << "," << j << ": " << got;
            }
          }
        if (scale == 0x1p-27f || scale == 0x1p10f) {
          EXPECT_GT(special, 0u) << "scale " << scale << " reaches no edge";
        }
      }
}

// Chunks whose scaled sums round to -0 in half: the running sums start at
// +0 and +0 + -0 is +0, so every result is +0, whatever the number of
// chunks, for B's rows as floats and as binary16 values.
TEST(Gemm, HalfPartialsOfChunksRoundedToMinusZeroArePlusZero) {
  for (uint32_t m : {1u, 8u, 11u, 20u})
    for (uint32_t n : {16u, 45u})
      for (uint32_t k : {10u, 16u, 40u}) {
        // Each chunk sums at most 16 products of -1 x 1, scaled by 2^-30:
        // at most 2^-26 in magnitude, under half of half's least subnormal.
        const std::vector<float> a(m * k, -1.0f);
        const std::vector<float> row(n, 1.0f);
        const std::vector<half_bits> half_row(n, float_to_half(1.0f));
        const std::vector<const float*> ptrs(k, row.data());
        const std::vector<const half_bits*> half_ptrs(k, half_row.data());
        std::vector<float> c(m * n, 1.0f), ch(m * n, 1.0f);
        gemm_half_partials_rows(a.data(), k, ptrs.data(), c.data(), m, n, k, n, 16, 0x1p-30f, false);
        gemm_half_partials_rows(a.data(), k, half_ptrs.data(), ch.data(), m, n, k, n, 16, 0x1p-30f, false);
        for (uint32_t e = 0; e < m * n; ++e) {
          ASSERT_TRUE(c[e] == 0 && !std::signbit(c[e])) << m << "x" << n << "x" << k << " at " << e << ": " << c[e];
          ASSERT_TRUE(ch[e] == 0 && !std::signbit(ch[e])) << m << "x" << n << "x" << k << " at " << e << ": " << ch[e]
                                                           << " (half rows)";
        }
      }
}

// Each element of C, through every entry point and panel layout (one or two
// vectors per panel row, a partial last panel of at most one vector's
// columns on a one-vector kernel, read in place or copied; more rows of A
// than a block holds; no K at all; a K deeper than 256): the products of
// its row and column added from 0 in K order, then added to C when
// accumulating. Compared bit for bit with that sum made one element at a
// time, each product added through one fused multiply-add where the build
// contracts the kernels' products (optimised AVX2 and AVX-512 builds),
// else rounded first (sanitizer builds); every path must agree with the
// same one, so a kernel that orders or rounds a lane differently from the
// others fails.
TEST(Gemm, EveryPanelLayoutSumsEachElementInKOrder) {
  std::mt19937 rng(24);
  std::normal_distribution<float> nd;
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  int fused = -1;  // which reference this build's kernels follow, once seen
  for (uint32_t n : {1u, 5u, 8u, 9u, 15u, 16u, 17u, 24u, 31u, 32u, 33u, 40u, 47u, 48u, 49u, 63u, 64u, 65u, 80u, 81u})
    for (uint32_t m : {1u, 7u, 9u, 12u, 13u, 20u, 25u})
      for (uint32_t k : {0u, 1u, 3u, 19u, 300u}) {
        const uint32_t lda = k + 1, ldb = n + 3, ldc = n + 2;
        // B's rows may be read up to a whole panel past n: slack after the last.
        std::vector<float> a(m * lda), b(static_cast<size_t>(k) * ldb + 64), c0(m * ldc);
        for (auto& v : a) v = nd(rng);
        for (auto& v : b) v = nd(rng);
        for (auto& v : c0) v = nd(rng);
        std::vector<float> sum[2] = {std::vector<float>(m * n), std::vector<float>(m * n)};
        for (uint32_t i = 0; i < m; ++i)
          for (uint32_t j = 0; j < n; ++j) {
            float with_fma = 0.0f, rounded = 0.0f;
            for (uint32_t p = 0; p < k; ++p) {
              with_fma = std::fma(a[i * lda + p], b[p * ldb + j], with_fma);
              volatile float product = a[i * lda + p] * b[p * ldb + j];
              rounded = rounded + product;
            }
            sum[0][i * n + j] = rounded;
            sum[1][i * n + j] = with_fma;
          }
        std::vector<const float*> rows(k);
        for (uint32_t p = 0; p < k; ++p) rows[p] = b.data() + static_cast<size_t>(p) * ldb;
        auto check = [&](const std::vector<float>& c, bool accumulate, const char* how) {
          for (uint32_t i = 0; i < m; ++i)
            for (uint32_t j = 0; j < ldc; ++j) {
              auto want = [&](int f) {
                if (j >= n) return c0[i * ldc + j];  // padding: untouched
                const float s = sum[f][i * n + j];
                return accumulate ? c0[i * ldc + j] + s : s;
              };
              if (fused < 0 && j < n && bits(want(0)) != bits(want(1)))
                fused = bits(c[i * ldc + j]) == bits(want(1)) ? 1 : 0;
              ASSERT_EQ(bits(c[i * ldc + j]), bits(want(fused < 0 ? 1 : fused)))
                  << how << " " << m << "x" << n << "x" << k << (accumulate ? " accumulated" : "") << " at " << i << ","
                  << j;
            }
        };
        for (bool accumulate : {false, true}) {
          std::vector<float> c = c0;
          gemm_f32(a.data(), b.data(), c.data(), m, n, k, lda, ldb, ldc, accumulate);
          check(c, accumulate, "gemm_f32");
          for (bool readable : {false, true}) {
            c = c0;
            gemm_f32_strided(a.data(), lda, 1, b.data(), ldb, c.data(), m, n, k, ldc, accumulate, readable);
            check(c, accumulate, readable ? "strided, in place" : "strided, copied");
          }
        }
        for (bool readable : {false, true}) {
          std::vector<float> c = c0;
          gemm_f32_rows(a.data(), lda, rows.data(), c.data(), m, n, k, ldc, readable);
          check(c, false, readable ? "rows, in place" : "rows, copied");
        }
      }
  EXPECT_GE(fused, 0) << "no element told the two references apart";
}

}  // namespace
