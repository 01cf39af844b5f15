// The matrix-product vertices (MatMul, SumPartials) on one tile's memory,
// against double references; half precision with the exact rounding sequence
// of the AMP replayed here.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "codelet_util.h"
#include "neurenix/codelets/matmul.h"

namespace {

using namespace neurenix;
using namespace nxtest;
using MNK = std::tuple<uint32_t, uint32_t, uint32_t>;

// Lays out A (m x k, ld lda), B (k x n, ld ldb) and C (m x n, ld ldc) and runs
// a MatMulVertex. C's padding holds a sentinel that must survive.
std::vector<double> run_matmul_vertex(const std::vector<double>& a, const std::vector<double>& b, MatMulBlock s, DeviceType in,
                                      DeviceType partials, DeviceType out, bool* padding_ok = nullptr) {
  TileMem mem;
  auto extent = [](uint32_t r, uint32_t c, uint32_t ld) { return r == 0 ? 0 : (r - 1) * ld + c; };
  Field fa = mem.field(extent(s.m, s.k, s.lda), in), fb = mem.field(extent(s.k, s.n, s.ldb), in),
        fc = mem.field(extent(s.m, s.n, s.ldc), out);
  for (uint32_t i = 0; i < s.m; ++i)
    for (uint32_t p = 0; p < s.k; ++p) mem.put(fa, in, i * s.lda + p, a[i * s.k + p]);
  for (uint32_t p = 0; p < s.k; ++p)
    for (uint32_t j = 0; j < s.n; ++j) mem.put(fb, in, p * s.ldb + j, b[p * s.n + j]);
  for (uint64_t i = 0; i < fc.count; ++i) mem.put(fc, out, i, -1000);
  MatMulVertex v(0, fa, fb, fc, s, in, partials, out);
  v.compute(mem.bytes.data());
  std::vector<double> c(s.m * s.n);
  bool pad = true;
  for (uint32_t i = 0; i < s.m; ++i)
    for (uint32_t j = 0; j < s.ldc && i * s.ldc + j < fc.count; ++j) {
      if (j < s.n) c[i * s.n + j] = mem.get(fc, out, i * s.ldc + j);
      else if (mem.get(fc, out, i * s.ldc + j) != -1000) pad = false;
    }
  if (padding_ok) *padding_ok = pad && mem.guards_intact({{fa.byte_offset, fa.count * device_type_size(in)},
                                                          {fb.byte_offset, fb.count * device_type_size(in)},
                                                          {fc.byte_offset, fc.count * device_type_size(out)}});
  return c;
}

TEST(MatMulCodelet, Float32WithLeadingDimensions) {
  std::mt19937 rng(22);
  std::normal_distribution<double> nd;
  for (auto [m, n, k] : std::vector<MNK>{{1, 1, 1}, {2, 3, 4}, {7, 5, 31}, {16, 16, 16}, {3, 1, 200},
                         {1, 9, 0}}) {
    MatMulBlock s{m, n, k, k + 2, n + 3, n + 1};
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = static_cast<float>(nd(rng));
    for (auto& v : b) v = static_cast<float>(nd(rng));
    bool pad = false;
    auto c = run_matmul_vertex(a, b, s, kF32, kF32, kF32, &pad);
    EXPECT_TRUE(pad) << "wrote outside the C block";
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (uint32_t p = 0; p < k; ++p) {
          ref += a[i * k + p] * b[p * n + j];
          mag += std::fabs(a[i * k + p] * b[p * n + j]);
        }
        ASSERT_NEAR(c[i * n + j], ref, 1e-5 * mag + 1e-30);
      }
  }
}

// Small multiples of 1/4 make every product and partial sum exact in float,
// so only the final rounding (to half on output) can change the result.
TEST(MatMulCodelet, HalfInputsFloatPartialsAreExactlyRounded) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> q(-40, 40);
  for (auto [m, n, k] : std::vector<MNK>{{3, 4, 5}, {8, 8, 64}, {2, 3, 100}, {5, 7, 17}}) {
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng);
    MatMulBlock s{m, n, k, k, n, n};
    auto c32 = run_matmul_vertex(a, b, s, kF16, kF32, kF32);
    auto c16 = run_matmul_vertex(a, b, s, kF16, kF32, kF16);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double exact = 0;
        for (uint32_t p = 0; p < k; ++p) exact += a[i * k + p] * b[p * n + j];
        ASSERT_EQ(c32[i * n + j], exact);
        ASSERT_EQ(c16[i * n + j], ref_round_half(exact));
      }
  }
}

// Half partials: chunks of 16 products summed in float (exact here), each
// chunk rounded to half and accumulated in half, rounding after every add.
double half_partials_dot(const std::vector<double>& a, const std::vector<double>& b, uint32_t i, uint32_t j, uint32_t k0,
                         uint32_t k1, uint32_t k, uint32_t n) {
  double acc = 0;
  for (uint32_t c0 = k0; c0 < k1; c0 += 16) {
    double chunk = 0;
    for (uint32_t p = c0; p < std::min(k1, c0 + 16); ++p) chunk += a[i * k + p] * b[p * n + j];
    acc = ref_round_half(acc + ref_round_half(chunk));
  }
  return acc;
}

TEST(MatMulCodelet, HalfPartialsEmulateTheAmp) {
  std::mt19937 rng(24);
  std::uniform_int_distribution<int> q(-60, 60);
  int differs = 0;
  // (B's rows `ldb` apart, read in place: full 16- and 32-column panels,
  // partial ones, and rows that end at the end of their field.)
  for (auto [m, n, k] : std::vector<MNK>{{2, 3, 15}, {3, 3, 16}, {4, 5, 17}, {2, 2, 100}, {6, 4, 64},
                         {1, 1, 1}, {12, 16, 32}, {9, 32, 20}, {7, 37, 18}}) {
    std::vector<double> a(m * k), b(k * n);
    for (auto& v : a) v = q(rng) / 4.0;
    for (auto& v : b) v = q(rng) + 0.5;
    MatMulBlock s{m, n, k, k, n + (n % 3), n + 2};
    bool pad = false;
    auto c = run_matmul_vertex(a, b, s, kF16, kF16, kF16, &pad);
    auto cf32 = run_matmul_vertex(a, b, s, kF16, kF16, kF32);
    EXPECT_TRUE(pad);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        const double want = half_partials_dot(a, b, i, j, 0, k, k, n);
        ASSERT_EQ(c[i * n + j], want) << m << "x" << n << "x" << k << " at " << i << "," << j;
        ASSERT_EQ(cf32[i * n + j], want) << "half partials are half values whatever the output type";
        double exact = 0;
        for (uint32_t p = 0; p < k; ++p) exact += a[i * k + p] * b[p * n + j];
        if (want != ref_round_half(exact)) ++differs;
      }
  }
  EXPECT_GT(differs, 0) << "the inputs should make half partials observable";
}

TEST(MatMulCodelet, ConstructorChecks) {
  TileMem mem;
  Field a = mem.field(6, kF32), b = mem.field(6, kF32), c = mem.field(4, kF32);
  EXPECT_NO_THROW(MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, kF32, kF32, kF32));
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, kF32, kF16, kF32),
                  "half partials");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 2}, kI32, kF32, kF32),
                  "non-float");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 4, 2, 2}, kF32, kF32, kF32),
                  "A block");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 3, 2}, kF32, kF32, kF32),
                  "B block");
  EXPECT_NX_ERROR(kInternal,
                  MatMulVertex(0, a, b, c, MatMulBlock{2, 2, 3, 3, 2, 3}, kF32, kF32, kF32),
                  "C block");
}

TEST(MatMulCodelet, CyclesGrowWithWorkAndFavourHalf) {
  const TargetSpec& t = target_for("ipu2");
  TileMem mem;
  auto cyc = [&](uint32_t m, uint32_t n, uint32_t k, DeviceType in, DeviceType partials) {
    Field a = mem.field(m * k, in), b = mem.field(k * n, in), c = mem.field(m * n, kF32);
    return MatMulVertex(0, a, b, c, MatMulBlock{m, n, k, k, n, n}, in, partials, kF32).cycles(t);
  };
  const uint64_t base = cyc(16, 16, 16, kF32, kF32);
  EXPECT_GT(cyc(32, 16, 16, kF32, kF32), base);
  EXPECT_GT(cyc(16, 32, 16, kF32, kF32), base);
  EXPECT_GT(cyc(16, 16, 64, kF32, kF32), base);
  EXPECT_LT(cyc(16, 16, 16, kF16, kF32), base);
  EXPECT_LE(cyc(64, 64, 64, kF16, kF16), cyc(64, 64, 64, kF16, kF32));
  // At scale the cost approaches flops / rate: 2*128^3 / 32 per cycle.
  const double big = static_cast<double>(cyc(128, 128, 128, kF32, kF32));
  EXPECT_GT(big, 2.0 * 128 * 128 * 128 / 32);
  EXPECT_LT(big, 1.2 * 2.0 * 128 * 128 * 128 / 32);
}

// Partials read where their senders hold them, in pieces cut anywhere (a
// piece may hold the end of one part and the start of the next, or lie
// inside one part): every element is still ((0 + p0) + p1) + ..., in part
// order, exactly (float32), or rounded to half after every add (float16).
TEST(SumPartialsCodelet, PartialsInPiecesAddInPartOrder) {
  std::mt19937 rng(31);
  std::normal_distribution<double> val(0.0, 100.0);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t parts = 1 + rng() % 9, rows = 1 + rng() % 3, cols = 1 + rng() % 40;
    const uint32_t ld = rng() % 2 ? cols : cols + 1 + rng() % 3;
    const DeviceType pd = rng() % 2 ? kF32 : kF16;
    const uint64_t n = static_cast<uint64_t>(rows) * cols, total = parts * n;
    std::vector<double> v(total);
    for (double& x : v) x = pd == kF16 ? ref_round_half(val(rng)) : static_cast<float>(val(rng));
    // Cuts at random elements; each piece's elements stored at a place of
    // its own, in shuffled order.
    std::vector<uint64_t> cuts = {0};
    for (uint64_t e = 1; e < total; ++e)
      if (rng() % 5 == 0) cuts.push_back(e);
    TileMem mem;
    Field in = mem.field(total, pd), out = mem.field((rows - 1) * ld + cols, kF32);
    std::vector<size_t> order(cuts.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Field::Piece> pieces(cuts.size());
    for (size_t k : order) {
      const uint64_t b = cuts[k], e = k + 1 < cuts.size() ? cuts[k + 1] : total;
      Field at = mem.field(e - b, pd);
      for (uint64_t i = b; i < e; ++i) mem.put(at, pd, i - b, v[i]);
      pieces[k] = Field::Piece{b, static_cast<int64_t>(at.byte_offset), 1, 0};
    }
    for (uint64_t i = 0; i < in.count; ++i) mem.put(in, pd, i, 1e6);  // its own bytes: never read
    SumPartialsVertex sp(0, in, out, parts, rows, cols, ld, pd, kF32);
    sp.all_fields()[0]->pieces = pieces;
    sp.refresh();
    sp.compute(mem.bytes.data());
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t c = 0; c < cols; ++c) {
        float f = 0.0f;
        double h = 0;
        for (uint32_t p = 0; p < parts; ++p) {
          const double x = v[p * n + r * cols + c];
          f = f + static_cast<float>(x);
          h = ref_round_half(h + x);
        }
        ASSERT_EQ(mem.get(out, kF32, r * ld + c), pd == kF32 ? static_cast<double>(f) : h)
            << "trial " << trial << ", row " << r << ", column " << c;
      }
  }
}

TEST(SumPartialsCodelet, FloatAndHalf) {
  std::mt19937 rng(25);
  std::uniform_int_distribution<int> q(-3000, 3000);
  // Output rows apart (ld > cols) and one after another (a float32 output
  // is then the running sum itself).
  for (auto [parts, rows, cols] : std::vector<MNK>{{1, 2, 3}, {3, 4, 5}, {7, 1, 9}, {2, 3, 1}, {4, 2, 37}, {5, 1, 64}})
    for (uint32_t ld : {cols + 2, cols})
    for (DeviceType pd : {kF32, kF16}) {
      for (DeviceType od : {kF32, kF16}) {
        TileMem mem;
        Field in = mem.field(parts * rows * cols, pd), out = mem.field((rows - 1) * ld + cols, od);
        std::vector<double> v(parts * rows * cols);
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = pd == kF16 ? ref_round_half(q(rng) * 0.75) : static_cast<float>(q(rng) * 0.3);
          mem.put(in, pd, i, v[i]);
        }
        for (uint64_t i = 0; i < out.count; ++i) mem.put(out, od, i, -1);
        SumPartialsVertex sp(0, in, out, parts, rows, cols, ld, pd, od);
        // Every other shape with a bias per row (added to the sum, then
        // rounded once to the output's type).
        const bool with_bias = (parts + cols) % 2 == 1;
        std::vector<double> bias(rows);
        if (with_bias) {
          Field b = mem.field(rows, kF32);
          for (uint32_t r = 0; r < rows; ++r) mem.put(b, kF32, r, bias[r] = q(rng) * 0.125);
          sp.set_bias(b, kF32);
        }
        sp.compute(mem.bytes.data());
        for (uint32_t r = 0; r < rows; ++r)
          for (uint32_t c = 0; c < ld && r * ld + c < out.count; ++c) {
            const double got = mem.get(out, od, r * ld + c);
            if (c >= cols) {
              ASSERT_EQ(got, -1) << "padding overwritten";
              continue;
            }
            double want = 0;
            if (pd == kF16) {
              for (uint32_t p = 0; p < parts; ++p) want = ref_round_half(want + v[(p * rows + r) * cols + c]);
              if (with_bias) want = ref_round_half(want + bias[r]);
              ASSERT_EQ(got, want);
            } else {
              double mag = std::fabs(bias[r]);
              want = bias[r];
              for (uint32_t p = 0; p < parts; ++p) {
                want += v[(p * rows + r) * cols + c];
                mag += std::fabs(v[(p * rows + r) * cols + c]);
              }
              if (od == kF16) {
                ASSERT_LE(std::fabs(got - ref_round_half(want)), std::fabs(want) * std::ldexp(1.0, -10));
              } else {
                ASSERT_NEAR(got, want, parts * mag * std::ldexp(1.0, -24));
              }
            }
          }
      }
    }
  TileMem mem;
  Field in = mem.field(10, kF32), out = mem.field(4, kF32);
  EXPECT_NX_ERROR(kInternal, SumPartialsVertex(0, in, out, 2, 2, 2, 2, kF32, kF32), "size mismatch");
  Field in8 = mem.field(8, kF32);
  EXPECT_NX_ERROR(kInternal, SumPartialsVertex(0, in8, out, 2, 2, 2, 3, kF32, kF32), "exceeds");
}

}  // namespace
