// ops::reduce for every operation over every subset of axes, one- and
// two-stage (rows split over tiles), against a double-precision reference.
#include <gtest/gtest.h>

#include <climits>
#include <random>

#include "neurenix/ops/map.h"
#include "neurenix/ops/rearrange.h"
#include "neurenix/ops/reduce.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kSumSquare,
                         ReduceOp::kSumAbs, ReduceOp::kMaxAbs};

struct ReduceCase {
  Shape shape;
  std::vector<uint32_t> axes;
  ReduceOp op = ReduceOp::kSum;
  ReduceFinal fin = ReduceFinal::kNone;
  double scale = 1;
  DeviceType in = kF32;
  DeviceType out = kF32;
  uint32_t tiles = 4;
  int layout = 0;  // 0: left to the op, 1: linear with a large grain, 2: random intervals
  uint32_t ipu = 0;
};

struct ReduceRun {
  std::vector<double> out;
  Shape out_shape;
  std::shared_ptr<Executable> exe;
};

ReduceRun run_reduce(const ReduceCase& c, const std::vector<double>& x, std::mt19937& rng) {
  ReduceRun r;
  auto g = std::make_unique<Graph>(tiny(c.tiles, 2), 2);
  Tensor t = g->add_variable("x", c.in, c.shape, VarKind::kInput, c.ipu);
  g->add_input_stream("x", t);
  const uint64_t n = t.numel();
  if (c.layout == 1 && n) g->map_linearly(t.var, std::max<uint64_t>(1, n / c.tiles));
  if (c.layout == 2 && n) {
    std::vector<TileInterval> ivs;
    for (uint64_t pos = 0; pos < n;) {
      uint64_t end = std::min(n, pos + 1 + rng() % 13);
      ivs.push_back({pos, end, g->first_tile(c.ipu) + static_cast<uint32_t>(rng() % c.tiles), 0});
      pos = end;
    }
    g->set_mapping(t.var, ivs);
  }
  Tensor y = ops::reduce(*g, t, c.axes, c.op, c.fin, c.scale, c.out, c.ipu, "red");
  r.out_shape = y.shape;
  EXPECT_EQ(g->var(y.var).dtype, c.out);
  g->add_output_stream("y", y);
  auto outs = run_graph(std::move(g), {encode(c.in, x)}, 1, &r.exe);
  if (!outs.empty()) r.out = decode(c.out, outs[0]);
  return r;
}

struct Ref {
  std::vector<double> value, magnitude;
  std::vector<uint64_t> count;
  Shape shape;
};

Ref reference(const ReduceCase& c, const std::vector<double>& x) {
  Ref r;
  std::vector<bool> red(c.shape.size(), false);
  for (uint32_t a : c.axes) red[a] = true;
  for (size_t d = 0; d < c.shape.size(); ++d)
    if (!red[d]) r.shape.push_back(c.shape[d]);
  const uint64_t rows = shape_numel(r.shape);
  const double ident = c.op == ReduceOp::kProd ? 1 : c.op == ReduceOp::kMax ? -INFINITY : c.op == ReduceOp::kMin ? INFINITY : 0;
  r.value.assign(rows, ident);
  r.magnitude.assign(rows, 0);
  r.count.assign(rows, 0);
  for (uint64_t f = 0; f < x.size(); ++f) {
    auto idx = unravel(f, c.shape);
    uint64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      if (!red[d]) o = o * c.shape[d] + idx[d];
    const double v = x[f];
    double& acc = r.value[o];
    switch (c.op) {
      case ReduceOp::kSum: acc += v; r.magnitude[o] += std::fabs(v); break;
      case ReduceOp::kSumSquare: acc += v * v; r.magnitude[o] += v * v; break;
      case ReduceOp::kSumAbs: acc += std::fabs(v); r.magnitude[o] += std::fabs(v); break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMaxAbs: acc = std::max(acc, std::fabs(v)); break;
    }
    r.count[o]++;
  }
  return r;
}

// Compares one result with the reference, allowing float accumulation
// error (in any order) and the final operation's own rounding.
void check(const ReduceCase& c, const Ref& ref, const std::vector<double>& got) {
  ASSERT_EQ(got.size(), ref.value.size());
  for (size_t o = 0; o < got.size(); ++o) {
    double want = ref.value[o];
    const uint64_t len = ref.count[o];
    double tol = is_float(c.in) ? 2.0 * (len + 2) * std::ldexp(1.0, -24) *
                                      (c.op == ReduceOp::kProd ? std::fabs(want) : ref.magnitude[o])
                                : 0.0;
    switch (c.fin) {
      case ReduceFinal::kNone: break;
      case ReduceFinal::kScale:
        want *= c.scale;
        tol = tol * std::fabs(c.scale) + std::fabs(want) * std::ldexp(1.0, -22);
        break;
      case ReduceFinal::kSqrt:
        tol = want > 0 ? tol / (2 * std::sqrt(want)) : std::sqrt(tol);
        want = std::sqrt(want);
        tol += std::fabs(want) * std::ldexp(1.0, -22);
        break;
      case ReduceFinal::kLog:
        tol = want > 0 ? tol / want : 0;
        want = std::log(want);
        tol += std::fabs(want) * std::ldexp(1.0, -22);
        break;
      case ReduceFinal::kFloat8Scale:
        FAIL() << "the float8 scale finaliser has its own tests (float8_test.cc)";
    }
    if (c.out == kF16) tol += std::fabs(want) * std::ldexp(1.0, -11);
    if (c.out == kI32 && is_float(c.in)) want = std::trunc(want);
    if (!is_float(c.out) && !is_float(c.in)) want = std::trunc(want);
    if (std::isinf(want) || std::isnan(want)) {
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[o])) << "output " << o;
      } else {
        ASSERT_EQ(got[o], want) << "output " << o;
      }
      continue;
    }
    ASSERT_NEAR(got[o], want, tol + 1e-37) << "output " << o << " of " << got.size() << " (" << len << " elements)";
  }
}

std::vector<double> data_for(const ReduceCase& c, uint64_t n, std::mt19937& rng) {
  std::vector<double> x(n);
  std::uniform_real_distribution<double> u(-3, 3), near1(0.6, 1.4), pos(0.1, 3);
  std::uniform_int_distribution<int> small(-5, 5);
  for (auto& v : x) {
    if (c.in == kI32) v = small(rng);
    else if (c.in == kBool) v = rng() % 2;
    else if (c.op == ReduceOp::kProd) v = near1(rng) * (rng() % 2 ? 1 : -1);
    else if (c.fin == ReduceFinal::kLog || c.fin == ReduceFinal::kSqrt) v = pos(rng);
    else v = u(rng);
    if (c.in == kF16) v = ref_round_half(v);
    if (c.in == kF32) v = static_cast<float>(v);
  }
  return x;
}

void run_and_check(const ReduceCase& c, std::mt19937& rng) {
  const auto x = data_for(c, shape_numel(c.shape), rng);
  ReduceRun r = run_reduce(c, x, rng);
  Ref ref = reference(c, x);
  ASSERT_EQ(r.out_shape, ref.shape);
  check(c, ref, r.out);
}

std::vector<std::vector<uint32_t>> subsets(uint32_t rank) {
  std::vector<std::vector<uint32_t>> out;
  for (uint32_t mask = 0; mask < (1u << rank); ++mask) {
    std::vector<uint32_t> s;
    for (uint32_t d = 0; d < rank; ++d)
      if (mask & (1u << d)) s.push_back(d);
    out.push_back(s);
  }
  return out;
}

std::string axes_str(const std::vector<uint32_t>& a) {
  std::string s = "{";
  for (uint32_t x : a) s += std::to_string(x) + ",";
  return s + "}";
}

TEST(OpsReduce, EveryOpEveryAxisSubset3D) {
  std::mt19937 rng(1);
  for (ReduceOp op : kOps)
    for (const auto& axes : subsets(3))
      for (uint32_t tiles : {1u, 3u})
        for (int layout : {0, 2}) {
          ReduceCase c{{3, 4, 5}, axes, op};
          c.tiles = tiles;
          c.layout = layout;
          SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " axes " << axes_str(axes) << " tiles " << tiles
                                          << " layout " << layout);
          run_and_check(c, rng);
        }
}

TEST(OpsReduce, EveryOpEveryAxisSubset4D) {
  std::mt19937 rng(2);
  for (ReduceOp op : kOps)
    for (const auto& axes : subsets(4)) {
      ReduceCase c{{2, 3, 2, 3}, axes, op};
      c.tiles = 4;
      c.layout = 2;
      SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " axes " << axes_str(axes));
      run_and_check(c, rng);
    }
}

// Few tiles and long rows: every row is cut across tiles, so partials are
// exchanged and combined in a second stage.
TEST(OpsReduce, RowsSplitAcrossTiles) {
  std::mt19937 rng(3);
  int two_stage = 0;
  for (ReduceOp op : kOps)
    for (auto [shape, axes, layout] : std::vector<std::tuple<Shape, std::vector<uint32_t>, int>>{
             {{2, 300}, {1}, 1}, {{3, 200}, {1}, 2}, {{100, 3}, {0}, 1}, {{5, 7, 40}, {0, 2}, 2}, {{1, 999}, {0, 1}, 1}}) {
      for (uint32_t tiles : {2u, 3u, 4u}) {
        ReduceCase c{shape, axes, op};
        c.tiles = tiles;
        c.layout = layout;
        SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " " << shape_str(shape) << " axes " << axes_str(axes)
                                        << " tiles " << tiles);
        const auto x = data_for(c, shape_numel(shape), rng);
        ReduceRun r = run_reduce(c, x, rng);
        check(c, reference(c, x), r.out);
        for (const OpPlan& rec : r.exe->graph().op_plans())
          if (rec.kind == "reduce" && rec.plan.find("2 stage(s)") != std::string::npos) ++two_stage;
      }
    }
  EXPECT_GT(two_stage, 20) << "the layouts should force two-stage reductions";
}

TEST(OpsReduce, RowsOverManyTilesCombineThroughGroups) {
  // A row over 64 tiles: its 64 partials combine in groups of 8, then on the
  // row's tile (three stages), with every operation.
  std::mt19937 rng(7);
  for (ReduceOp op : kOps) {
    ReduceCase c{{1, 6400}, {1}, op};
    c.tiles = 64;
    c.layout = 1;
    SCOPED_TRACE(reduce_op_name(op));
    const auto x = data_for(c, 6400, rng);
    ReduceRun r = run_reduce(c, x, rng);
    check(c, reference(c, x), r.out);
    int three = 0;
    for (const OpPlan& rec : r.exe->graph().op_plans())
      if (rec.kind == "reduce" && rec.plan.find("3 stage(s)") != std::string::npos) ++three;
    EXPECT_EQ(three, 1);
  }
}

TEST(OpsReduce, FinalOperations) {
  std::mt19937 rng(4);
  for (auto [shape, axes, layout, tiles] : std::vector<std::tuple<Shape, std::vector<uint32_t>, int, uint32_t>>{
           {{4, 6, 5}, {1}, 2, 3}, {{2, 500}, {1}, 1, 4}, {{7, 9}, {0}, 0, 2}}) {
    // mean = sum then scale by 1/n; L2 = sqrt of sum of squares; log-sum.
    const uint64_t n = [&] {
      uint64_t p = 1;
      for (uint32_t a : axes) p *= shape[a];
      return p;
    }();
    for (auto [op, fin, scale] : std::vector<std::tuple<ReduceOp, ReduceFinal, double>>{
             {ReduceOp::kSum, ReduceFinal::kScale, 1.0 / n},
             {ReduceOp::kSumSquare, ReduceFinal::kSqrt, 1},
             {ReduceOp::kSum, ReduceFinal::kLog, 1},
             {ReduceOp::kSumAbs, ReduceFinal::kScale, 2.5},
             {ReduceOp::kMax, ReduceFinal::kScale, -1}}) {
      for (DeviceType out : {kF32, kF16}) {
        ReduceCase c{shape, axes, op, fin, scale};
        c.out = out;
        c.layout = layout;
        c.tiles = tiles;
        SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " final " << static_cast<int>(fin) << " "
                                        << shape_str(shape) << " out " << device_type_name(out));
        run_and_check(c, rng);
      }
    }
  }
}

TEST(OpsReduce, HalfIntAndBoolInputs) {
  std::mt19937 rng(5);
  for (ReduceOp op : kOps) {
    for (auto [in, out] : std::vector<std::pair<DeviceType, DeviceType>>{{kF16, kF32},
                                                              {kF16, kF16},
                                                              {kI32, kI32},
                                                              {kBool, kI32}}) {
      for (auto [shape, axes, layout] : std::vector<std::tuple<Shape, std::vector<uint32_t>, int>>{
               {{4, 5, 6}, {0, 2}, 2}, {{3, 120}, {1}, 1}}) {
        ReduceCase c{shape, axes, op};
        c.in = in;
        c.out = out;
        c.tiles = 3;
        c.layout = layout;
        SCOPED_TRACE(testing::Message() << reduce_op_name(op) << " " << device_type_name(in) << "->" << device_type_name(out) << " "
                                        << shape_str(shape));
        run_and_check(c, rng);
      }
    }
  }
  // Integer sums wrap like the device's 32-bit arithmetic, across two stages too.
  ReduceCase c{{1, 64}, {1}, ReduceOp::kSum};
  c.in = kI32;
  c.out = kI32;
  c.tiles = 4;
  c.layout = 1;
  std::vector<double> x(64, 100000000.0);
  ReduceRun r = run_reduce(c, x, rng);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(6400000000ull))));
}

TEST(OpsReduce, OnAnotherIpu) {
  std::mt19937 rng(6);
  ReduceCase c{{6, 50}, {1}, ReduceOp::kSum};
  c.ipu = 1;
  c.tiles = 3;
  c.layout = 2;
  const auto x = data_for(c, 300, rng);
  ReduceRun r = run_reduce(c, x, rng);
  check(c, reference(c, x), r.out);
  const Graph& g = r.exe->graph();
  for (const Variable& v : g.vars())
    for (const TileShare& s : v.tiles) EXPECT_EQ(g.ipu_of_tile(s.tile), 1u) << v.name;
}

TEST(OpsReduce, EmptyAndDegenerateAxes) {
  std::mt19937 rng(7);
  // Reducing an axis of length zero gives the operation's identity.
  for (auto [op, want] : std::vector<std::pair<ReduceOp, double>>{{ReduceOp::kSum, 0}, {ReduceOp::kProd, 1},
                                                                  {ReduceOp::kMax, -INFINITY}, {ReduceOp::kMin, INFINITY},
                                                                  {ReduceOp::kSumSquare, 0}, {ReduceOp::kSumAbs, 0}}) {
    ReduceCase c{{3, 0, 2}, {1}, op};
    ReduceRun r = run_reduce(c, {}, rng);
    EXPECT_EQ(r.out_shape, (Shape{3, 2}));
    EXPECT_EQ(r.out, std::vector<double>(6, want)) << reduce_op_name(op);
  }
  {
    ReduceCase c{{3, 0}, {1}, ReduceOp::kSum, ReduceFinal::kLog};
    EXPECT_EQ(run_reduce(c, {}, rng).out, std::vector<double>(3, -INFINITY)) << "log of an empty sum";
  }
  // No axes: each element is its own row.
  for (ReduceOp op : kOps) {
    ReduceCase c{{4, 5}, {}, op};
    c.tiles = 3;
    run_and_check(c, rng);
  }
  // Duplicate axes count once; the order of axes does not matter.
  {
    ReduceCase c{{3, 4, 5}, {2, 0, 2}, ReduceOp::kSum};
    const auto x = data_for(c, 60, rng);
    ReduceRun r = run_reduce(c, x, rng);
    ReduceCase cref = c;
    cref.axes = {0, 2};
    EXPECT_EQ(r.out_shape, (Shape{4}));
    check(cref, reference(cref, x), r.out);
  }
  // Nothing left to reduce into: an empty result.
  {
    Graph g(tiny(2), 1);
    Tensor t = g.add_variable("x", kF32, {0, 3}, VarKind::kInput, 0);
    Tensor y = ops::reduce(g, t, {1}, ReduceOp::kSum, ReduceFinal::kNone, 1, kF32, 0, "red");
    EXPECT_EQ(y.shape, (Shape{0}));
    EXPECT_TRUE(g.program().empty());
  }
  // Reducing everything of a scalar-like tensor.
  {
    ReduceCase c{{1, 1}, {0, 1}, ReduceOp::kMax};
    ReduceRun r = run_reduce(c, {2.5}, rng);
    EXPECT_EQ(r.out_shape, Shape{});
    EXPECT_EQ(r.out, std::vector<double>{2.5});
  }
}

// The identity of an empty reduction should go through the final operation
// like any other result: log(prod of nothing) = log(1) = 0, sqrt(max of
// nothing) = sqrt(-inf) = NaN, scale(prod of nothing) = scale.
TEST(OpsReduce, EmptyReductionAppliesTheFinalOperation) {
  std::mt19937 rng(8);
  {
    ReduceCase c{{2, 0}, {1}, ReduceOp::kProd, ReduceFinal::kLog};
    EXPECT_EQ(run_reduce(c, {}, rng).out, std::vector<double>(2, 0.0));
  }
  {
    ReduceCase c{{2, 0}, {1}, ReduceOp::kProd, ReduceFinal::kScale, 3.0};
    EXPECT_EQ(run_reduce(c, {}, rng).out, std::vector<double>(2, 3.0));
  }
  {
    ReduceCase c{{2, 0}, {1}, ReduceOp::kMin, ReduceFinal::kLog};
    EXPECT_EQ(run_reduce(c, {}, rng).out, std::vector<double>(2, INFINITY));
  }
}

// Asking for the result on another IPU than the input's is a caller error,
// reported as such (ops::map and ops::rearrange say kInvalidArgument), not an
// internal invariant failure.
TEST(OpsReduce, InputOnAnotherIpuIsACallerError) {
  Graph g(tiny(2, 2), 2);
  Tensor t = g.add_variable("x", kF32, {3, 4}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kInvalidArgument, ops::reduce(g, t, {1}, ReduceOp::kSum, ReduceFinal::kNone, 1, kF32, 1, "red"),
                  "'red'");
}

TEST(OpsReduce, Errors) {
  Graph g(tiny(2), 1);
  Tensor t = g.add_variable("x", kF32, {3, 4}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kShapeMismatch, ops::reduce(g, t, {2}, ReduceOp::kSum, ReduceFinal::kNone, 1, kF32, 0, "red"),
                  "'red'", "axis 2", "[3, 4]");
}

}  // namespace
