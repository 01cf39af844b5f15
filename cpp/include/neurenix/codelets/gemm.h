// Float products shared by the matrix-product and convolution codelets (and
// their tests): the host kernel behind the simulated AMP.
//
// gemm_f32: C[m x n] = A . B with row-major leading dimensions; adds into C
// when `accumulate`.
// B may also be given packed: K x N in column panels of `panel` columns
// (gemm_panel(N) picks the width), element (k, j) at
// gemm_packed_index(panel, K, k, j), zero-padded to whole panels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace neurenix {

uint32_t gemm_panel(uint32_t n);
inline size_t gemm_packed_index(uint32_t panel, uint32_t k_total, uint32_t k, uint32_t j) {
  return (static_cast<size_t>(j / panel) * k_total + k) * panel + j % panel;
}
size_t gemm_packed_size(uint32_t panel, uint32_t k, uint32_t n);
void gemm_pack_b(uint32_t panel, const float* b, uint32_t ldb, uint32_t k, uint32_t n, float* packed);
// `packed_b` points at row k0 of a packed matrix of `ktot` rows (so a K range
// of it can be multiplied alone).
void gemm_f32_packed(uint32_t panel, const float* a, uint32_t lda, const float* packed_b, uint32_t ktot, float* c,
                     uint32_t m, uint32_t n, uint32_t k, uint32_t ldc, bool accumulate);
// Unpacked B read in place (rows `ldb` apart), A's k-th element of row r at
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
// order, as gemm_f32_packed computes.
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

}  // namespace neurenix
