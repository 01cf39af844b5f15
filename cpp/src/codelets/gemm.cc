// The host kernel behind the matrix-product and convolution vertices:
// single-precision C = A . B with B packed into 16-column panels and a 6x16
// register-blocked micro-kernel (GCC vector extensions; AVX2/FMA when the build
// host has them). Only the simulator's speed depends on it: results are plain
// float32 dot products.
#include <algorithm>
#include <cstring>
#include <vector>

#include "neurenix/codelets.h"

namespace neurenix {
namespace {

typedef float v8 __attribute__((vector_size(32)));

constexpr uint32_t kMR = 6;
constexpr uint32_t kNR = 16;
constexpr uint32_t kKC = 256;

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof(v)); }

// C[MR x 16] (+)= A[MR x kc] . P[kc x 16]; `nr` valid columns.
template <uint32_t MR>
void micro(const float* __restrict a, uint32_t lda, const float* __restrict p, uint32_t kc, float* __restrict c,
           uint32_t ldc, uint32_t nr, bool accumulate) {
  v8 acc0[MR], acc1[MR];
  for (uint32_t r = 0; r < MR; ++r) {
    acc0[r] = v8{};
    acc1[r] = v8{};
  }
  for (uint32_t kk = 0; kk < kc; ++kk) {
    const v8 b0 = load8(p + kk * kNR), b1 = load8(p + kk * kNR + 8);
    for (uint32_t r = 0; r < MR; ++r) {
      const float x = a[r * static_cast<size_t>(lda) + kk];
      acc0[r] += b0 * x;
      acc1[r] += b1 * x;
    }
  }
  for (uint32_t r = 0; r < MR; ++r) {
    float* cr = c + r * static_cast<size_t>(ldc);
    if (nr == kNR) {
      if (accumulate) {
        store8(cr, load8(cr) + acc0[r]);
        store8(cr + 8, load8(cr + 8) + acc1[r]);
      } else {
        store8(cr, acc0[r]);
        store8(cr + 8, acc1[r]);
      }
    } else {
      float tmp[kNR];
      store8(tmp, acc0[r]);
      store8(tmp + 8, acc1[r]);
      for (uint32_t j = 0; j < nr; ++j) cr[j] = accumulate ? cr[j] + tmp[j] : tmp[j];
    }
  }
}

using MicroFn = void (*)(const float*, uint32_t, const float*, uint32_t, float*, uint32_t, uint32_t, bool);
constexpr MicroFn kMicro[kMR + 1] = {nullptr, micro<1>, micro<2>, micro<3>, micro<4>, micro<5>, micro<6>};

}  // namespace

void gemm_f32(const float* a, const float* b, float* c, uint32_t m, uint32_t n, uint32_t k, uint32_t lda, uint32_t ldb,
              uint32_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (uint32_t i = 0; i < m; ++i) std::fill(c + static_cast<size_t>(i) * ldc, c + static_cast<size_t>(i) * ldc + n, 0.0f);
    return;
  }
  const uint32_t panels = (n + kNR - 1) / kNR;
  thread_local std::vector<float> pack;
  for (uint32_t k0 = 0; k0 < k; k0 += kKC) {
    const uint32_t kc = std::min(kKC, k - k0);
    pack.resize(static_cast<size_t>(panels) * kc * kNR);
    // Pack B[k0:k0+kc, :] into zero-padded 16-column panels.
    for (uint32_t pj = 0; pj < panels; ++pj) {
      const uint32_t j0 = pj * kNR, nr = std::min(kNR, n - j0);
      float* dst = pack.data() + static_cast<size_t>(pj) * kc * kNR;
      for (uint32_t kk = 0; kk < kc; ++kk) {
        const float* src = b + static_cast<size_t>(k0 + kk) * ldb + j0;
        float* d = dst + kk * kNR;
        if (nr == kNR) {
          std::memcpy(d, src, kNR * sizeof(float));
        } else {
          std::memcpy(d, src, nr * sizeof(float));
          std::fill(d + nr, d + kNR, 0.0f);
        }
      }
    }
    const bool acc = accumulate || k0 > 0;
    for (uint32_t i0 = 0; i0 < m; i0 += kMR) {
      const uint32_t mr = std::min(kMR, m - i0);
      const float* ai = a + static_cast<size_t>(i0) * lda + k0;
      for (uint32_t pj = 0; pj < panels; ++pj) {
        const uint32_t j0 = pj * kNR;
        kMicro[mr](ai, lda, pack.data() + static_cast<size_t>(pj) * kc * kNR, kc, c + static_cast<size_t>(i0) * ldc + j0,
                   ldc, std::min(kNR, n - j0), acc);
      }
    }
  }
}

}  // namespace neurenix
