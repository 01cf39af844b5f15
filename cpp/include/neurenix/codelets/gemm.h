// Float products shared by the matrix-product and convolution codelets (and
// their tests): the host kernel behind the simulated AMP.
//
// gemm_f32: C[m x n] = A . B with row-major leading dimensions; adds into C
// when `accumulate`. Every entry point sums each element of C from 0 over K
// in order (one fused multiply-add per product where the build contracts
// them), then adds that sum into C when accumulating.
#pragma once

#include <cstddef>
#include <cstdint>

namespace neurenix {

// The width of the column panels a product of n columns runs in (32 or 16).
uint32_t gemm_panel(uint32_t n);
// B read in place (rows `ldb` apart), A's k-th element of row r at
// a[r * lda + k * a_kstride]. With `readable_tail`, every row of B may be read
// up to a whole panel (gemm_panel(n) floats) past its n-th element (the
// values there are ignored); otherwise nothing past it is read (masked
// loads).
void gemm_f32_strided(const float* a, uint32_t lda, uint32_t a_kstride, const float* b, uint32_t ldb, float* c, uint32_t m,
                      uint32_t n, uint32_t k, uint32_t ldc, bool accumulate, bool readable_tail);
// C = A . B (not accumulated) where row kk of B is the `n` floats at
// rows[kk]. With `readable_tail`, every row may be read up to n rounded up
// to a whole panel (32 floats), the values there ignored; otherwise
// nothing past it is read. Each element of C is the same sum, in the same
// order, as gemm_f32 computes.
void gemm_f32_rows(const float* a, uint32_t lda, const float* const* rows, float* c, uint32_t m, uint32_t n, uint32_t k,
                   uint32_t ldc, bool readable_tail);
void gemm_f32(const float* a, const float* b, float* c, uint32_t m, uint32_t n, uint32_t k, uint32_t lda, uint32_t ldb,
              uint32_t ldc, bool accumulate);
// C = the half-partials product of A and B (B's rows as gemm_f32_rows): K
// in chunks of `depth`, each chunk summed in float exactly as gemm_f32_rows
// sums it, multiplied by `scale` when that is not 1, rounded to half and
// added to a running sum that is rounded to half after every add (round to
// nearest even throughout). The chunks never leave registers.
void gemm_half_partials_rows(const float* a, uint32_t lda, const float* const* rows, float* c, uint32_t m, uint32_t n,
                             uint32_t k, uint32_t ldc, uint32_t depth, float scale, bool readable_tail);
// The same with B's rows binary16 values (`n` of them at rows[kk], read
// as gemm_f32_rows reads floats), each widened to float exactly as it is
// loaded: bit for bit the product of the widened rows.
void gemm_half_partials_rows(const float* a, uint32_t lda, const uint16_t* const* rows, float* c, uint32_t m, uint32_t n,
                             uint32_t k, uint32_t ldc, uint32_t depth, float scale, bool readable_tail);

}  // namespace neurenix
