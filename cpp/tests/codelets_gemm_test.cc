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

}  // namespace
