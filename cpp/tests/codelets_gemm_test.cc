// The float product kernel behind the matrix-product and convolution vertices.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "neurenix/codelets/gemm.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;
using MNK = std::tuple<uint32_t, uint32_t, uint32_t>;

TEST(Gemm, MatchesDoubleReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {3, 5, 7}, {4, 4, 4}, {9, 13, 130},
                         {5, 600, 3}, {6, 520, 260}, {17, 3, 1}}) {
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
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {3, 5, 7}, {8, 49, 64}, {9, 33, 10}, {5, 100, 3}}) {
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

}  // namespace
