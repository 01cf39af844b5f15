// Benchmark of the float32 product kernel (codelets/gemm.h) on the shapes of
// one tile's share of a product, against LIBXSMM's generated kernels for the
// same shapes, everything hot in the caches: what a small-matrix library
// would buy the simulator. For each shape: gemm_f32 (B read in place),
// gemm_f32_rows (B through row pointers, as the convolutions read it) and
// LIBXSMM (its JIT kernel for C = A . B, dispatched once), the best of seven
// timings of 20,000 calls, and how many elements of C differ in their bits
// between LIBXSMM and gemm_f32.
//
// Built only when LIBXSMM is installed (Debian: libxsmm-dev):
//   cmake -S cpp -B build/cpp && cmake --build build/cpp --target neurenix_small_gemm_bench
//   build/cpp/neurenix_small_gemm_bench
#include <libxsmm.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "neurenix/codelets/gemm.h"
#include "product_timing.h"

namespace {

using neurenix_bench::best_seconds;
using Shape = neurenix_bench::ProductShape;

// Per-tile shares from the plans of the benchmark models (float32 unless
// said), then a few larger products to show where the kernels part.
const Shape kShapes[] = {
    {16, 47, 32, "BERT-style b1 FFN in"},
    {16, 32, 47, "BERT-style b1 FFN out"},
    {12, 16, 32, "BERT-style b1 attention"},
    {94, 16, 32, "BERT-style b8 Q/K/V"},
    {74, 32, 79, "BERT-style b8 FFN out"},
    {64, 47, 64, "BERT-style b8 FFN in"},
    {32, 64, 94, "BERT-style b8 float16"},
    {24, 26, 103, "SqueezeNet conv10 (1x1)"},
    {16, 56, 64, "1x1 conv, 56 columns"},
    {16, 56, 576, "3x3 conv as im2col"},
    {32, 28, 288, "3x3 conv as im2col"},
    {64, 49, 288, "3x3 conv as im2col"},
    {128, 128, 128, "larger"},
    {256, 256, 256, "larger"},
};

}  // namespace

int main() {
  using namespace neurenix;
  libxsmm_init();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::printf("%-38s %-18s %-18s %-18s %7s %s\n", "m x n x k, from", "gemm_f32", "gemm_f32_rows", "LIBXSMM",
              "ours/x", "bits differing");
  for (const Shape& s : kShapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
    std::vector<float> ours(static_cast<size_t>(s.m) * s.n), by_rows(ours.size()), theirs(ours.size());
    for (float& x : a) x = uniform(rng);
    for (float& x : b) x = uniform(rng);
    std::vector<const float*> rows(s.k);
    for (uint32_t kk = 0; kk < s.k; ++kk) rows[kk] = b.data() + static_cast<size_t>(kk) * s.n;
    // LIBXSMM is column-major: row-major C = A . B is column-major
    // C^T = B^T . A^T, so B goes first with the dimensions swapped.
    const libxsmm_blasint m = s.n, n = s.m, k = s.k, lda = s.n, ldb = s.k, ldc = s.n;
    const float alpha = 1.0f, beta = 0.0f;
    const int flags = LIBXSMM_GEMM_FLAGS('N', 'N'), prefetch = LIBXSMM_PREFETCH_NONE;
    const libxsmm_smmfunction kernel = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
    if (kernel == nullptr) {
      std::printf("%4u x %3u x %3u: LIBXSMM has no kernel for this shape\n", s.m, s.n, s.k);
      continue;
    }
    const double t_ours = best_seconds([&] { gemm_f32(a.data(), b.data(), ours.data(), s.m, s.n, s.k, s.k, s.n, s.n, false); });
    const double t_rows =
        best_seconds([&] { gemm_f32_rows(a.data(), s.k, rows.data(), by_rows.data(), s.m, s.n, s.k, s.n, false); });
    const double t_xsmm = best_seconds([&] { kernel(b.data(), a.data(), theirs.data()); });
    size_t differ = 0;
    for (size_t i = 0; i < ours.size(); ++i) differ += std::memcmp(&ours[i], &theirs[i], sizeof(float)) != 0;
    const double flops = 2.0 * s.m * s.n * s.k;
    auto cell = [&](double t) {
      static char buf[4][32];
      static int at = 0;
      char* out = buf[at++ % 4];
      std::snprintf(out, 32, "%6.0f ns %5.1f GF", t * 1e9, flops / t * 1e-9);
      return out;
    };
    std::printf("%3u x %3u x %3u %-23s %-18s %-18s %-18s %7.2f %zu/%zu\n", s.m, s.n, s.k, s.from, cell(t_ours),
                cell(t_rows), cell(t_xsmm), t_ours / t_xsmm, differ, ours.size());
  }
  libxsmm_finalize();
  return 0;
}
