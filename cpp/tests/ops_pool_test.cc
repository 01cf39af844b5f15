// ops::pool: max and average windows (with and without the padding in the
// divisor, floor and ceil output sizes) against a double reference, on tile
// counts that spread whole planes, runs of rows and column chunks.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "neurenix/ops/pool.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct PoolCase {
  Shape shape;  // [..., H, W]
  ops::PoolOptions o;
  bool ceil_mode = false;
  uint32_t tiles = 4;
  DeviceType dtype = kF32;
  uint32_t nan_every = 0;  // every nan_every-th input NaN (besides x[7])
};

std::string describe(const PoolCase& k) {
  std::ostringstream os;
  os << shape_str(k.shape) << " mode=" << static_cast<int>(k.o.mode) << " k=" << k.o.kh << "x" << k.o.kw
     << " s=" << k.o.sh << "x" << k.o.sw << " d=" << k.o.dh << "x" << k.o.dw << " pad=" << k.o.pad_top << ","
     << k.o.pad_left << "," << k.o.pad_bottom << "," << k.o.pad_right << " ceil=" << k.ceil_mode << " tiles=" << k.tiles
     << " " << device_type_name(k.dtype);
  return os.str();
}

uint32_t out_size(uint64_t in, uint32_t k, uint32_t s, uint32_t d, uint32_t p0, uint32_t p1, bool ceil_mode) {
  const uint64_t span = in + p0 + p1 - (static_cast<uint64_t>(k) - 1) * d - 1;
  uint64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // As ONNX and PyTorch: the last window must start inside the input or its
  // leading padding.
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return static_cast<uint32_t>(out);
}

std::vector<double> reference(const PoolCase& k, const std::vector<double>& x) {
  const ops::PoolOptions& o = k.o;
  const size_t r = k.shape.size();
  const int64_t h = static_cast<int64_t>(k.shape[r - 2]), w = static_cast<int64_t>(k.shape[r - 1]);
  const uint64_t planes = shape_numel(k.shape) / static_cast<uint64_t>(h * w);
  std::vector<double> out;
  for (uint64_t p = 0; p < planes; ++p)
    for (uint32_t i = 0; i < o.out_h; ++i)
      for (uint32_t j = 0; j < o.out_w; ++j) {
        double acc = o.mode == PoolMode::kMax ? -INFINITY : 0;
        int real = 0, padded = 0;
        for (uint32_t a = 0; a < o.kh; ++a)
          for (uint32_t b = 0; b < o.kw; ++b) {
            const int64_t hi = static_cast<int64_t>(i * o.sh + a * o.dh) - o.pad_top;
            const int64_t wi = static_cast<int64_t>(j * o.sw + b * o.dw) - o.pad_left;
            if (hi < h + o.pad_bottom && wi < w + o.pad_right) ++padded;
            if (hi < 0 || wi < 0 || hi >= h || wi >= w) continue;
            const double v = x[(p * h + hi) * w + wi];
            ++real;
            acc = o.mode == PoolMode::kMax ? (std::isnan(v) || std::isnan(acc) ? NAN : std::max(acc, v)) : acc + v;
          }
        if (o.mode == PoolMode::kAverage) acc = real ? acc / real : 0;
        if (o.mode == PoolMode::kAverageIncludePad) acc = padded ? acc / padded : 0;
        out.push_back(acc);
      }
  return out;
}

void run_case(PoolCase k, std::mt19937& rng) {
  const size_t r = k.shape.size();
  ops::PoolOptions& o = k.o;
  o.out_h = out_size(k.shape[r - 2], o.kh, o.sh, o.dh, o.pad_top, o.pad_bottom, k.ceil_mode);
  o.out_w = out_size(k.shape[r - 1], o.kw, o.sw, o.dw, o.pad_left, o.pad_right, k.ceil_mode);
  SCOPED_TRACE(describe(k));
  std::uniform_int_distribution<int> q(-64, 64);
  std::vector<double> x(shape_numel(k.shape));
  for (auto& v : x) v = q(rng) / 8.0;
  if (x.size() > 7) x[7] = NAN;
  for (size_t i = k.nan_every; k.nan_every && i < x.size(); i += k.nan_every) x[i] = NAN;
  auto g = std::make_unique<Graph>(tiny(k.tiles), 1);
  Tensor tx = g->add_variable("x", k.dtype, k.shape, VarKind::kInput, 0);
  g->add_input_stream("x", tx);
  Tensor y = ops::pool(*g, tx, o);
  Shape want_shape(k.shape.begin(), k.shape.end() - 2);
  want_shape.push_back(o.out_h);
  want_shape.push_back(o.out_w);
  EXPECT_EQ(y.shape, want_shape);
  EXPECT_EQ(g->op_plans().back().kind, "pool");
  g->add_output_stream("y", y);
  auto out = run_graph(std::move(g), {encode(k.dtype, x)});
  if (out.empty()) return;
  const std::vector<double> got = decode(k.dtype, out[0]), ref = reference(k, x);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "output " << i;
      continue;
    }
    const double want = k.dtype == kF16 ? ref_round_half(static_cast<float>(ref[i])) : static_cast<float>(ref[i]);
    ASSERT_NEAR(got[i], want, std::fabs(want) * 1e-6) << "output " << i;
  }
}

TEST(OpsPool, EveryModeWindowAndPadding) {
  std::mt19937 rng(1);
  for (PoolMode mode : {PoolMode::kMax, PoolMode::kAverage, PoolMode::kAverageIncludePad})
    for (uint32_t kh : {1u, 2u, 3u})
      for (uint32_t s : {1u, 2u})
        for (uint32_t pad : {0u, 1u})
          for (bool ceil_mode : {false, true}) {
            if (pad >= kh) continue;  // a window must see some input
            PoolCase k;
            k.shape = {2, 3, 7, 8};
            k.o.mode = mode;
            k.o.kh = kh;
            k.o.kw = kh == 1 ? 2 : kh;
            k.o.sh = k.o.sw = s;
            k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = pad;
            k.ceil_mode = ceil_mode;
            run_case(k, rng);
          }
}

TEST(OpsPool, DilationAsymmetricPadsAndHalf) {
  std::mt19937 rng(2);
  PoolCase k;
  k.shape = {1, 2, 9, 9};
  k.o.kh = k.o.kw = 3;
  k.o.dh = 2;
  k.o.dw = 3;
  k.o.pad_top = 2;
  k.o.pad_right = 1;
  for (DeviceType dt : {kF32, kF16})
    for (PoolMode mode : {PoolMode::kMax, PoolMode::kAverageIncludePad}) {
      k.dtype = dt;
      k.o.mode = mode;
      run_case(k, rng);
    }
}

TEST(OpsPool, WorkSpreadsOverTilesEveryWay) {
  std::mt19937 rng(3);
  PoolCase k;
  k.o.kh = k.o.kw = 2;
  k.o.sh = k.o.sw = 2;
  // Many planes (whole planes per tile), a few rows (runs of rows), one long
  // row (column chunks), and a rank-2 input.
  for (const Shape& shape : {Shape{6, 5, 4, 4}, Shape{1, 1, 12, 6}, Shape{1, 1, 2, 128}, Shape{6, 10}})
    for (uint32_t tiles : {1u, 3u, 16u}) {
      k.shape = shape;
      k.tiles = tiles;
      run_case(k, rng);
    }
}

// Rows of many columns with a column stride of 2 or 1 (the windows' cells
// deinterleaved sixteen columns at a time where the host has AVX-512, up
// to four groups of sixteen at once): whole and partial vectors, one to
// more than four groups, NaNs in every lane position, padding at both
// ends, on one tile and spread.
TEST(OpsPool, StrideTwoAcrossLongRows) {
  std::mt19937 rng(4);
  for (PoolMode mode : {PoolMode::kMax, PoolMode::kAverage, PoolMode::kAverageIncludePad})
    for (uint32_t width : {33u, 77u, 96u, 161u, 258u})
      for (uint32_t stride : {2u, 1u})
      for (uint32_t tiles : {1u, 3u}) {
        PoolCase k;
        k.shape = {1, 2, 5, width};
        k.o.mode = mode;
        k.o.kh = k.o.kw = 3;
        k.o.sh = 2;
        k.o.sw = stride;
        k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = 1;
        k.tiles = tiles;
        k.nan_every = 29;
        run_case(k, rng);
      }
}

TEST(OpsPool, Errors) {
  Graph g(tiny(4, 2), 2);
  Tensor v = g.add_variable("v", kF32, {5}, VarKind::kInput, 0);
  Tensor i = g.add_variable("i", kI32, {2, 4, 4}, VarKind::kInput, 0);
  Tensor x = g.add_variable("x", kF32, {2, 4, 4}, VarKind::kInput, 0);
  ops::PoolOptions o;
  o.out_h = o.out_w = 4;
  EXPECT_NX_ERROR(kShapeMismatch, ops::pool(g, v, o), "2 dimensions");
  EXPECT_NX_ERROR(kShapeMismatch, ops::pool(g, i, o), "float");
  o.ipu = 1;
  EXPECT_NX_ERROR(kInvalidArgument, ops::pool(g, x, o), "another IPU");
}

}  // namespace
