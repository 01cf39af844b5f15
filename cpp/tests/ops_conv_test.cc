// ops::conv and its plans: every kernel shape, stride, dilation, padding and
// grouping against a double-precision reference, on tile counts and memory
// targets that force the planner's splits (K split with its reduction stage,
// serial passes, several row blocks sharing weights).
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "neurenix/ops/conv.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct ConvCase {
  uint64_t n = 1, c = 1, h = 5, w = 5, co = 1;
  ops::ConvOptions o;
  bool bias = false;
  uint32_t tiles = 4;
  uint64_t bytes_per_tile = 0;
  DeviceType dtype = kF32;
  bool weights_mapped = false;  // laid out before the conv (so it fetches them)
};

std::string describe(const ConvCase& k) {
  std::ostringstream os;
  os << "x[" << k.n << "," << k.c << "," << k.h << "," << k.w << "] co=" << k.co << " g=" << k.o.groups << " k=" << k.o.kh
     << "x" << k.o.kw << " s=" << k.o.sh << "x" << k.o.sw << " d=" << k.o.dh << "x" << k.o.dw << " pad=" << k.o.pad_top
     << "," << k.o.pad_left << "," << k.o.pad_bottom << "," << k.o.pad_right << " bias=" << k.bias << " tiles=" << k.tiles
     << " prop=" << k.o.memory_proportion << " " << device_type_name(k.dtype);
  return os.str();
}

uint64_t out_size(uint64_t in, uint32_t k, uint32_t s, uint32_t d, uint32_t p0, uint32_t p1) {
  return (in + p0 + p1 - (static_cast<uint64_t>(k) - 1) * d - 1) / s + 1;
}

// Reference and magnitude (sum of |terms|) of every output.
void reference(const ConvCase& k, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
               std::vector<double>* ref, std::vector<double>* mag) {
  const ops::ConvOptions& o = k.o;
  const uint64_t ho = out_size(k.h, o.kh, o.sh, o.dh, o.pad_top, o.pad_bottom);
  const uint64_t wo = out_size(k.w, o.kw, o.sw, o.dw, o.pad_left, o.pad_right);
  const uint64_t cg = k.c / o.groups, cog = k.co / o.groups;
  ref->assign(k.n * k.co * ho * wo, 0);
  mag->assign(ref->size(), 0);
  for (uint64_t n = 0; n < k.n; ++n)
    for (uint64_t co = 0; co < k.co; ++co)
      for (uint64_t r = 0; r < ho; ++r)
        for (uint64_t q = 0; q < wo; ++q) {
          double acc = k.bias ? b[co] : 0, m = std::fabs(acc);
          const uint64_t grp = co / cog;
          for (uint64_t ci = 0; ci < cg; ++ci)
            for (uint32_t a = 0; a < o.kh; ++a)
              for (uint32_t bb = 0; bb < o.kw; ++bb) {
                const int64_t hi = static_cast<int64_t>(r * o.sh + a * o.dh) - o.pad_top;
                const int64_t wi = static_cast<int64_t>(q * o.sw + bb * o.dw) - o.pad_left;
                if (hi < 0 || wi < 0 || hi >= static_cast<int64_t>(k.h) || wi >= static_cast<int64_t>(k.w)) continue;
                const double t = x[((n * k.c + grp * cg + ci) * k.h + hi) * k.w + wi] *
                                 w[((co * cg + ci) * o.kh + a) * o.kw + bb];
                acc += t;
                m += std::fabs(t);
              }
          const uint64_t i = ((n * k.co + co) * ho + r) * wo + q;
          (*ref)[i] = acc;
          (*mag)[i] = m;
        }
}

// Runs the case with random data and compares with the reference.
ops::ConvPlan run_case(const ConvCase& k, std::mt19937& rng) {
  SCOPED_TRACE(describe(k));
  std::uniform_int_distribution<int> q(-8, 8);
  // Small multiples of 1/8: exact in half, and sums of few of them are exact.
  auto values = [&](uint64_t count) {
    std::vector<double> v(count);
    for (auto& e : v) e = q(rng) / 8.0;
    return v;
  };
  const ops::ConvOptions& o = k.o;
  const std::vector<double> x = values(k.n * k.c * k.h * k.w), w = values(k.co * (k.c / o.groups) * o.kh * o.kw),
                            b = values(k.co);
  auto g = std::make_unique<Graph>(tiny(k.tiles, 1, k.bytes_per_tile), 1);
  Tensor tx = g->add_variable("x", k.dtype, {k.n, k.c, k.h, k.w}, VarKind::kInput, 0);
  g->add_input_stream("x", tx);
  Tensor tw = g->add_constant("w", k.dtype, {k.co, k.c / o.groups, o.kh, o.kw}, 0,
                              std::make_shared<const std::vector<uint8_t>>(encode(k.dtype, w)));
  if (k.weights_mapped) g->map_linearly(tw.var);
  Tensor tb = g->add_constant("b", k.dtype, {k.co}, 0, std::make_shared<const std::vector<uint8_t>>(encode(k.dtype, b)));
  ops::ConvPlan plan;
  Tensor y = ops::conv(*g, tx, tw, k.bias ? &tb : nullptr, o, &plan);
  EXPECT_LE(plan.tiles_used(), k.tiles);
  EXPECT_EQ(g->op_plans().back().kind, "conv");
  EXPECT_EQ(g->op_plans().back().estimated_cycles, plan.cycles);
  g->add_output_stream("y", y);
  auto out = run_graph(std::move(g), {encode(k.dtype, x)});
  if (out.empty()) return plan;
  const std::vector<double> got = decode(o.out_dtype, out[0]);
  std::vector<double> ref, mag;
  reference(k, x, w, b, &ref, &mag);
  EXPECT_EQ(y.shape, (Shape{k.n, k.co, ref.size() / (k.n * k.co) / y.shape[3], y.shape[3]}));
  EXPECT_EQ(got.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && i < ref.size() && bad < 5; ++i) {
    const double tol = o.out_dtype == kF16 ? std::ldexp(std::fabs(ref[i]), -10) + 1e-7 : 1e-6 * mag[i] + 1e-12;
    if (std::fabs(got[i] - ref[i]) > tol) {
      ++bad;
      ADD_FAILURE() << "output " << i << ": got " << got[i] << ", want " << ref[i];
    }
  }
  return plan;
}

ConvCase with(uint64_t n, uint64_t c, uint64_t h, uint64_t w, uint64_t co, uint32_t kh, uint32_t kw) {
  ConvCase k;
  k.n = n;
  k.c = c;
  k.h = h;
  k.w = w;
  k.co = co;
  k.o.kh = kh;
  k.o.kw = kw;
  return k;
}

TEST(OpsConv, KernelsStridesDilationsAndPadding) {
  std::mt19937 rng(1);
  for (uint32_t kh : {1u, 2u, 3u})
    for (uint32_t s : {1u, 2u})
      for (uint32_t d : {1u, 2u})
        for (uint32_t pad : {0u, 1u}) {
          ConvCase k = with(2, 3, 7, 6, 4, kh, kh == 2 ? 3 : kh);
          k.o.sh = s;
          k.o.sw = 3 - s;
          k.o.dh = d;
          k.o.dw = 1;
          k.o.pad_top = k.o.pad_left = pad;
          k.o.pad_bottom = pad;
          k.o.pad_right = pad + 1;
          k.bias = (kh + s + d + pad) % 2 == 0;
          run_case(k, rng);
        }
}

// Stride-2 windows of many widths: their phase planes are gathered 16 at a
// time with a masked last step (widths around and past one and two vectors).
// Stride-2 windows split into their column phases, one phase (1x1) or both
// from one read of each row (wider kernels, every padding from none to 3),
// rows of one to several vector blocks, in float products by tap (8
// channels) and through row pointers (3 channels).
TEST(OpsConv, StrideTwoWindowsOfManyWidths) {
  std::mt19937 rng(7);
  for (uint32_t w : {2u, 17u, 31u, 32u, 33u, 34u, 35u, 47u, 64u, 65u, 66u, 70u}) {
    for (auto [kw, pad] : std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}, {3, 1}, {3, 0}, {5, 2}, {7, 3}}) {
      if (kw > w + 2 * pad) continue;
      for (uint32_t cin : {8u, 3u}) {
        if (cin == 3 && kw == 1) continue;
        ConvCase k = with(1, cin, 3, w, 3, kw, kw);
        k.o.sh = k.o.sw = 2;
        k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = pad;
        run_case(k, rng);
      }
    }
  }
}

TEST(OpsConv, GroupsAndDepthwise) {
  std::mt19937 rng(2);
  for (uint32_t groups : {2u, 3u, 6u}) {
    ConvCase k = with(1, 6, 5, 5, 6, 3, 3);
    k.o.groups = groups;
    k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = 1;
    k.bias = true;
    k.tiles = 8;
    run_case(k, rng);
  }
}

TEST(OpsConv, ManyChannelsSplitOverTilesAndPasses) {
  std::mt19937 rng(3);
  // Enough input channels for the phase-decomposed product and for K splits;
  // small tiles force K splits, serial passes and fetched weights.
  for (uint64_t bytes : {0ull, 24576ull, 12288ull})
    for (bool mapped : {false, true}) {
      ConvCase k = with(2, 24, 6, 6, 20, 3, 3);
      k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = 1;
      k.o.sh = bytes ? 1 : 2;
      k.bias = true;
      k.tiles = 16;
      k.bytes_per_tile = bytes;
      k.weights_mapped = mapped;
      k.o.memory_proportion = bytes ? 0.05 : 0.6;
      const ops::ConvPlan plan = run_case(k, rng);
      EXPECT_GE(plan.tiles_used(), 1u);
    }
  // The 1x1 stride-1 product written straight into the output.
  ConvCase k = with(1, 16, 4, 5, 8, 1, 1);
  run_case(k, rng);
  k.bias = true;
  run_case(k, rng);
}

TEST(OpsConv, KSplitAndSerialPassesAreExercised) {
  std::mt19937 rng(4);
  bool k_split = false, serial = false;
  for (bool mapped : {false, true})
    for (double prop : {0.6, 0.2, 0.05, 0.01}) {
      ConvCase k = with(1, 32, 4, 4, mapped ? 64 : 32, 3, 3);
      k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = 1;
      k.tiles = mapped ? 4 : 16;
      k.bytes_per_tile = mapped ? 65536 : 16384;
      k.weights_mapped = mapped;
      k.o.memory_proportion = prop;
      k.bias = true;
      const ops::ConvPlan plan = run_case(k, rng);
      k_split = k_split || plan.k_split > 1;
      serial = serial || plan.serial_split > 1;
    }
  EXPECT_TRUE(k_split) << "no case split the input channels";
  EXPECT_TRUE(serial) << "no case ran output channels in serial passes";
}

TEST(OpsConv, HalfPrecision) {
  std::mt19937 rng(5);
  for (DeviceType partials : {kF32, kF16}) {
    ConvCase k = with(1, 8, 5, 5, 8, 3, 3);
    k.dtype = kF16;
    k.o.partials = partials;
    k.o.out_dtype = kF16;
    k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = 1;
    k.bias = true;
    run_case(k, rng);
  }
}

// 1x1 windows in half: a stride-1 unpadded window is its own phase plane,
// read where it was converted (rows of every width, panels with and
// without a tail, more channels than one half-partials chunk); stride 2 and
// padding build planes.
TEST(OpsConv, HalfPrecisionOneByOneWindows) {
  std::mt19937 rng(6);
  for (DeviceType partials : {kF32, kF16})
    for (uint64_t w : {1, 7, 16, 17, 37})
      for (uint32_t stride : {1, 2})
        for (uint32_t pad : {0, 1}) {
          ConvCase k = with(1, 20, 3, w, 9, 1, 1);
          k.dtype = kF16;
          k.o.partials = partials;
          k.o.out_dtype = kF16;
          k.o.sh = k.o.sw = stride;
          k.o.pad_top = k.o.pad_left = k.o.pad_bottom = k.o.pad_right = pad;
          k.bias = w % 2 == 1;
          k.tiles = 3;
          run_case(k, rng);
        }
}

TEST(OpsConv, Errors) {
  Graph g(tiny(4), 1);
  Tensor x = g.add_variable("x", kF32, {1, 4, 5, 5}, VarKind::kInput, 0);
  Tensor w = g.add_variable("w", kF32, {2, 4, 3, 3}, VarKind::kInput, 0);
  Tensor wi = g.add_variable("wi", kI32, {2, 4, 3, 3}, VarKind::kInput, 0);
  ops::ConvOptions o;
  o.kh = o.kw = 3;
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, Tensor{x.var, {4, 5, 5}}, w, nullptr, o), "4-D");
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, x, wi, nullptr, o), "float");
  ops::ConvOptions bad_groups = o;
  bad_groups.groups = 3;
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, x, w, nullptr, bad_groups), "3 groups");
  ops::ConvOptions bad_kernel = o;
  bad_kernel.kh = 2;
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, x, w, nullptr, bad_kernel), "kernel");
  ops::ConvOptions zero_stride = o;
  zero_stride.sh = 0;
  EXPECT_NX_ERROR(kInvalidArgument, ops::conv(g, x, w, nullptr, zero_stride), "stride");
  ops::ConvOptions too_dilated = o;
  too_dilated.dh = 3;
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, x, w, nullptr, too_dilated), "larger than the padded input");
  ops::ConvOptions bad_proportion = o;
  bad_proportion.memory_proportion = 0;
  EXPECT_NX_ERROR(kInvalidArgument, ops::conv(g, x, w, nullptr, bad_proportion), "memory proportion");
  Tensor b = g.add_variable("b", kF32, {3}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kShapeMismatch, ops::conv(g, x, w, &b, o), "bias");
  ops::ConvOptions other_ipu = o;
  other_ipu.ipu = 1;
  Graph g2(tiny(4, 2), 2);
  Tensor x2 = g2.add_variable("x", kF32, {1, 4, 5, 5}, VarKind::kInput, 0);
  Tensor w2 = g2.add_variable("w", kF32, {2, 4, 3, 3}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kInvalidArgument, ops::conv(g2, x2, w2, nullptr, other_ipu), "IPU 0");
}

TEST(OpsConv, UnreachableMemoryTargetWarnsAndStillRuns) {
  std::mt19937 rng(6);
  ConvCase k = with(1, 16, 6, 6, 16, 3, 3);
  k.tiles = 2;
  k.bytes_per_tile = 32768;
  k.o.memory_proportion = 0.001;
  k.o.name = "tight";
  ops::ConvPlan plan = run_case(k, rng);
  EXPECT_FALSE(plan.meets_memory_target);
  Graph g(tiny(2, 1, 32768), 1);
  Tensor x = g.add_variable("x", kF32, {1, 16, 6, 6}, VarKind::kInput, 0);
  Tensor w = g.add_variable("w", kF32, {16, 16, 3, 3}, VarKind::kInput, 0);
  ops::conv(g, x, w, nullptr, k.o);
  ASSERT_EQ(g.warnings().size(), 1u);
  EXPECT_NE(g.warnings()[0].find("conv 'tight': no plan keeps temporaries under 0.001"), std::string::npos)
      << g.warnings()[0];
}

}  // namespace
