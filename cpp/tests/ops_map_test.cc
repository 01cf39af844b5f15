// ops::map end to end: operands of any broadcastable shape and layout are
// brought to the result's tiles, the expression runs per tile, and the
// result equals the numpy-broadcast reference computed here.
#include <gtest/gtest.h>

#include <random>

#include "expr_util.h"
#include "neurenix/ops/map.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct Input {
  Shape shape;
  DeviceType dtype;
  std::vector<double> values;
  int layout = 0;  // 0: left to the op, 1: linear, 2: random intervals, 3: one tile
};

void lay_out(Graph& g, VarId v, int how, std::mt19937& rng) {
  const Variable& var = g.var(v);
  if (var.numel == 0 || how == 0) return;
  if (how == 1) {
    g.map_linearly(v, 1 + rng() % 3);
  } else if (how == 3) {
    g.map_to_tile(v, g.first_tile(var.ipu) + rng() % g.tiles_per_ipu());
  } else {
    std::vector<TileInterval> ivs;
    for (uint64_t pos = 0; pos < var.numel;) {
      uint64_t end = std::min(var.numel, pos + 1 + rng() % 9);
      ivs.push_back({pos, end, g.first_tile(var.ipu) + static_cast<uint32_t>(rng() % g.tiles_per_ipu()), 0});
      pos = end;
    }
    g.set_mapping(v, ivs);
  }
}

std::vector<double> run_map_op(const SystemSpec& spec, const std::vector<ExprInstr>& expr, const std::vector<Input>& inputs,
                               DeviceType out_dtype, const Shape& out_shape, std::mt19937& rng, uint32_t ipu = 0,
                               std::shared_ptr<Executable>* exe_out = nullptr) {
  auto g = std::make_unique<Graph>(spec, spec.num_ipus);
  std::vector<Tensor> ts;
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = g->add_variable("in" + std::to_string(i), inputs[i].dtype, inputs[i].shape, VarKind::kInput, ipu);
    lay_out(*g, t.var, inputs[i].layout, rng);
    g->add_input_stream("in" + std::to_string(i), t);
    ts.push_back(t);
    data.push_back(encode(inputs[i].dtype, inputs[i].values));
  }
  Tensor out = ops::map(*g, expr, ts, out_dtype, out_shape, ipu, "map");
  EXPECT_EQ(out.shape, out_shape);
  EXPECT_EQ(g->var(out.var).dtype, out_dtype);
  EXPECT_EQ(g->var(out.var).ipu, ipu);
  g->add_output_stream("out", out);
  auto outs = run_graph(std::move(g), data, 1, exe_out);
  if (outs.empty()) return {};
  return decode(out_dtype, outs[0]);
}

std::vector<double> iota_values(uint64_t n, double start, double step) {
  std::vector<double> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

// Every pair of operand shapes that broadcast to [3, 4, 5], on several tile
// counts and layouts: out = 100 * a + b identifies which elements were used.
TEST(OpsMap, BroadcastingOfEveryOperandShape) {
  std::mt19937 rng(1);
  const Shape out_shape = {3, 4, 5};
  const std::vector<Shape> shapes = {{}, {1}, {5}, {4, 1}, {1, 5}, {3, 1, 5}, {1, 4, 5}, {3, 4, 1}, {3, 4, 5}, {1, 1, 1}};
  int runs = 0;
  for (const Shape& sa : shapes)
    for (const Shape& sb : shapes) {
      const uint32_t tiles = 1 + rng() % 7;
      Input a{sa, kF32, iota_values(shape_numel(sa), 1, 1), static_cast<int>(rng() % 4)};
      Input b{sb, kF32, iota_values(shape_numel(sb), -0.5, -0.25), static_cast<int>(rng() % 4)};
      SCOPED_TRACE(testing::Message() << shape_str(sa) << " with " << shape_str(sb) << " on " << tiles << " tiles");
      auto got = run_map_op(tiny(tiles), {in(0), cf(100), op(E::kMul), in(1), op(E::kAdd)}, {a, b}, kF32,
                            out_shape, rng);
      ASSERT_EQ(got.size(), shape_numel(out_shape));
      for (uint64_t e = 0; e < got.size(); ++e) {
        auto idx = unravel(e, out_shape);
        const double want = 100 * a.values[broadcast_source(idx, sa)] + b.values[broadcast_source(idx, sb)];
        ASSERT_EQ(got[e], want) << "element " << e;
      }
      ++runs;
    }
  EXPECT_EQ(runs, 100);
}

// Number of elements the operands' exchange of the map delivers, and
// whether the graph holds a repeated operand ("map/repeated").
struct Delivered {
  uint64_t exchanged = 0;
  bool repeated = false;
};
Delivered delivered(const Executable& exe) {
  Delivered d;
  const Graph& g = exe.graph();
  for (const auto& ex : g.exchanges())
    if (ex.name == "map/operands")
      for (const Copy& c : ex.copies) d.exchanged += static_cast<uint64_t>(c.count) * c.outer;
  for (size_t v = 0; v < g.num_vars(); ++v)
    if (g.var(static_cast<VarId>(v)).name == "map/repeated") d.repeated = true;
  return d;
}

// Intervals of the result's mapping (the variable "map").
uint64_t result_intervals(const Executable& exe) {
  const Graph& g = exe.graph();
  for (size_t v = 0; v < g.num_vars(); ++v)
    if (g.var(static_cast<VarId>(v)).name == "map") return g.var(static_cast<VarId>(v)).mapping.size();
  return 0;
}

// Operands whose elements each cover a stretch of the result (a channel's
// scale over its plane) reach the result's tiles as one element per
// stretch, whatever the result's layout (random intervals split stretches
// and tiles), in float32, half, int32 and bool: the values are the
// broadcast reference's, and the exchange moves far fewer elements than
// the expanded operand has.
TEST(OpsMap, RepeatedOperandsKeptCompact) {
  std::mt19937 rng(11);
  const Shape out_shape = {2, 3, 4, 10};
  const uint64_t n = shape_numel(out_shape);
  const std::vector<Shape> shapes = {{3, 1, 1}, {1, 3, 4, 1}, {2, 3, 1, 1}, {3, 4, 1}, {2, 1, 1, 1}, {4, 1}};
  for (const Shape& sb : shapes)
    for (int layout : {1, 2, 3}) {
      const uint32_t tiles = 1 + rng() % 6;
      SCOPED_TRACE(testing::Message() << shape_str(sb) << ", layout " << layout << ", " << tiles << " tiles");
      Input a{out_shape, kF32, iota_values(n, 1, 1), layout};
      Input b{sb, kF32, iota_values(shape_numel(sb), -0.5, -0.25), static_cast<int>(rng() % 4)};
      std::shared_ptr<Executable> exe;
      auto got = run_map_op(tiny(tiles), {in(0), cf(100), op(E::kMul), in(1), op(E::kAdd)}, {a, b}, kF32, out_shape, rng,
                            0, &exe);
      ASSERT_EQ(got.size(), n);
      for (uint64_t e = 0; e < n; ++e)
        ASSERT_EQ(got[e], 100 * a.values[e] + b.values[broadcast_source(unravel(e, out_shape), sb)]) << "element " << e;
      const Delivered d = delivered(*exe);
      EXPECT_TRUE(d.repeated);
      ASSERT_EQ(exe->graph().op_plans().size(), 1u);
      EXPECT_NE(exe->graph().op_plans()[0].plan.find("operand 1 repeated over stretches of"), std::string::npos)
          << exe->graph().op_plans()[0].plan;
      // Each of b's elements covers at least 10 result elements; a random
      // layout splits stretches at most once per interval.
      EXPECT_LE(d.exchanged, n / 10 + result_intervals(*exe));
    }
  // Stretches that run across the vertex's blocks of 256 elements.
  for (uint32_t tiles : {1u, 2u}) {
    const Shape wide = {3, 300};
    Input a{wide, kF32, iota_values(900, 0, 1), 1};
    Input b{{3, 1}, kF32, {10000, 20000, 30000}, 0};
    auto got = run_map_op(tiny(tiles), {in(0), in(1), op(E::kAdd)}, {a, b}, kF32, wide, rng);
    ASSERT_EQ(got.size(), 900u);
    for (uint64_t e = 0; e < 900; ++e) ASSERT_EQ(got[e], a.values[e] + b.values[e / 300]) << tiles << " tiles, element " << e;
  }
  // Other element types: half and int32 values, a bool condition.
  const Shape sb = {1, 3, 1, 1};
  Input h{out_shape, kF16, {}, 2}, hb{sb, kF16, {0.5, -1.25, 3.0}, 0};
  for (uint64_t e = 0; e < n; ++e) h.values.push_back(ref_round_half(0.125 * static_cast<double>(e % 50)));
  auto gh = run_map_op(tiny(5), in_half({in(0), in(1), op(E::kMul)}), {h, hb}, kF16, out_shape, rng);
  for (uint64_t e = 0; e < n; ++e)
    ASSERT_EQ(gh[e], ref_round_half(h.values[e] * hb.values[(e / 40) % 3])) << e;
  Input x{out_shape, kI32, iota_values(n, -100, 1), 2}, xb{sb, kI32, {7, -9, 1000}, 0};
  Input cond{sb, kBool, {1, 0, 1}, 3};
  auto gi = run_map_op(tiny(4), {in(0), in(1), in(2), op(E::kSelect)}, {cond, x, xb}, kI32, out_shape, rng);
  for (uint64_t e = 0; e < n; ++e) {
    const uint64_t c = (e / 40) % 3;
    ASSERT_EQ(gi[e], cond.values[c] ? x.values[e] : xb.values[c]) << e;
  }
  // A result laid out across the stretches (column j of [64, 8] on tile j)
  // would hold a run per element: the operand stays an expanded copy.
  {
    auto g = std::make_unique<Graph>(tiny(8), 1);
    Tensor a = g->add_variable("a", kF32, {64, 8}, VarKind::kInput, 0);
    Tensor b = g->add_variable("b", kF32, {64, 1}, VarKind::kInput, 0);
    std::vector<TileInterval> ivs;
    for (uint64_t e = 0; e < 512; ++e) ivs.push_back({e, e + 1, static_cast<uint32_t>(e % 8), e / 8});
    g->set_mapping(a.var, ivs);
    g->map_to_tile(b.var, 0);
    g->add_input_stream("a", a);
    g->add_input_stream("b", b);
    Tensor out = ops::map(*g, {in(0), in(1), op(E::kAdd)}, {a, b}, kF32, {64, 8}, 0, "map");
    g->add_output_stream("out", out);
    const std::vector<double> av = iota_values(512, 0, 1), bv = iota_values(64, 1000, 10);
    std::shared_ptr<Executable> across;
    auto outs = run_graph(std::move(g), {encode(kF32, av), encode(kF32, bv)}, 2, &across);
    ASSERT_EQ(outs.size(), 1u);
    const auto got = decode(kF32, outs[0]);
    for (uint64_t e = 0; e < 512; ++e) ASSERT_EQ(got[e], av[e] + bv[e / 8]) << e;
    EXPECT_FALSE(delivered(*across).repeated);
  }
  // Stretches shorter than 8 elements stay expanded copies.
  std::shared_ptr<Executable> exe;
  Input s5{{2, 3, 4, 1}, kF32, iota_values(24, 0, 1), 0};
  Input full{{2, 3, 4, 5}, kF32, iota_values(120, 0, 1), 1};
  run_map_op(tiny(3), {in(0), in(1), op(E::kAdd)}, {full, s5}, kF32, {2, 3, 4, 5}, rng, 0, &exe);
  EXPECT_FALSE(delivered(*exe).repeated);
}

// An operand repeated as a cycle over the result (a bias over the rows of
// a product: result element e reads operand element e % numel) that nothing
// has placed yet lies where the result's first period does, and each tile
// of the result receives one copy per row of its block, from the tile that
// holds those columns of the first row: rows of [12, 48] in blocks of 3 x
// 16 on 12 tiles. Values are the broadcast reference's, the operand placed
// by the op or beforehand, in float32 and float16.
TEST(OpsMap, CycleOperandsPlacedWithTheResultsFirstPeriod) {
  for (const Shape& sb : {Shape{48}, Shape{1, 48}}) {
    SCOPED_TRACE(shape_str(sb));
    auto g = std::make_unique<Graph>(tiny(12), 1);
    Tensor a = g->add_variable("a", kF32, {12, 48}, VarKind::kInput, 0);
    Tensor b = g->add_variable("b", kF32, sb, VarKind::kInput, 0);
    std::vector<TileInterval> ivs;
    for (uint64_t r = 0; r < 12; ++r)
      for (uint64_t k = 0; k < 3; ++k)
        ivs.push_back({r * 48 + 16 * k, r * 48 + 16 * k + 16, static_cast<uint32_t>(r / 3 * 3 + k), 0});
    g->set_mapping(a.var, ivs);
    g->add_input_stream("a", a);
    g->add_input_stream("b", b);
    Tensor out = ops::map(*g, {in(0), in(1), op(E::kAdd)}, {a, b}, kF32, {12, 48}, 0, "map");
    g->add_output_stream("out", out);
    // b where the first row of the result lies: columns [16k, 16k + 16) on tile k.
    const Variable& bv = g->var(b.var);
    ASSERT_EQ(bv.mapping.size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) {
      EXPECT_EQ(bv.mapping[k].begin, 16u * k);
      EXPECT_EQ(bv.mapping[k].end, 16u * k + 16);
      EXPECT_EQ(bv.mapping[k].tile, k);
    }
    uint64_t copies = 0;
    for (const auto& ex : g->exchanges())
      if (ex.name == "map/operands")
        for (const Copy& c : ex.copies) {
          ++copies;
          EXPECT_EQ(c.count, 16u);
          EXPECT_EQ(c.outer, 1u);
          EXPECT_EQ(c.src_tile, c.dst_tile % 3) << "to tile " << c.dst_tile;
          EXPECT_EQ(c.src_local, 0u);
          EXPECT_EQ(c.dst_local % 16, 0u);
        }
    EXPECT_EQ(copies, 36u);  // a row of a block each
    const std::vector<double> av = iota_values(576, 0, 1), bvals = iota_values(48, 1000, 10);
    auto outs = run_graph(std::move(g), {encode(kF32, av), encode(kF32, bvals)}, 2);
    ASSERT_EQ(outs.size(), 1u);
    const auto got = decode(kF32, outs[0]);
    for (uint64_t e = 0; e < 576; ++e) ASSERT_EQ(got[e], av[e] + bvals[e % 48]) << e;
  }
  // Periods of one and of two dimensions (and one under 32 elements, which
  // stays an expanded copy), against results laid out linearly (intervals
  // of several periods), in random intervals (a period cut across tiles
  // and intervals) or on one tile, and operands laid out by the op,
  // linearly or in random intervals; float32 and float16.
  std::mt19937 rng(5);
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 4, 40}, {40}},       {{3, 4, 40}, {4, 40}},
                                                      {{3, 4, 40}, {1, 1, 40}}, {{3, 4, 40}, {1, 4, 40}},
                                                      {{3, 4, 10}, {10}}};
  for (const auto& [out_shape, sb] : cases)
    for (int layout : {0, 1, 2}) {
      const uint64_t n = shape_numel(out_shape);
      const uint32_t tiles = 2 + rng() % 6;
      const int result_layout = 1 + static_cast<int>(rng() % 3);
      SCOPED_TRACE(testing::Message() << shape_str(sb) << ", layout " << layout << ", result layout " << result_layout
                                      << ", " << tiles << " tiles");
      const uint64_t period = shape_numel(sb);
      Input a{out_shape, kF32, iota_values(n, 1, 1), result_layout};
      Input b{sb, kF32, iota_values(period, -0.5, -0.25), layout};
      auto got = run_map_op(tiny(tiles), {in(0), cf(100), op(E::kMul), in(1), op(E::kAdd)}, {a, b}, kF32, out_shape, rng);
      ASSERT_EQ(got.size(), n);
      for (uint64_t e = 0; e < n; ++e) ASSERT_EQ(got[e], 100 * a.values[e] + b.values[e % period]) << "element " << e;
      Input h{out_shape, kF16, {}, result_layout}, hb{sb, kF16, {}, layout};
      for (uint64_t e = 0; e < n; ++e) h.values.push_back(ref_round_half(0.125 * static_cast<double>(e % 50)));
      for (uint64_t e = 0; e < period; ++e) hb.values.push_back(ref_round_half(-0.375 * static_cast<double>(e)));
      auto gh = run_map_op(tiny(tiles), in_half({in(0), in(1), op(E::kMul)}), {h, hb}, kF16, out_shape, rng);
      ASSERT_EQ(gh.size(), n);
      for (uint64_t e = 0; e < n; ++e) ASSERT_EQ(gh[e], ref_round_half(h.values[e] * hb.values[e % period])) << e;
    }
}

TEST(OpsMap, ThreeOperandsWithSelectAndMixedTypes) {
  std::mt19937 rng(2);
  const Shape out_shape = {6, 7};
  Input cond{{6, 1}, kBool, {1, 0, 1, 1, 0, 0}, 2};
  Input x{{6, 7}, kI32, iota_values(42, -20, 1), 1};
  Input y{{7}, kI32, iota_values(7, 1000, 7), 0};
  for (uint32_t tiles : {1u, 2u, 5u, 16u}) {
    auto got = run_map_op(tiny(tiles), {in(0), in(1), in(2), op(E::kSelect)}, {cond, x, y}, kI32, out_shape, rng);
    ASSERT_EQ(got.size(), 42u);
    for (uint64_t e = 0; e < 42; ++e) {
      const uint64_t r = e / 7, c = e % 7;
      ASSERT_EQ(got[e], cond.values[r] ? x.values[e] : y.values[c]) << e;
    }
  }
  // A comparison into bool, then into int.
  auto lt = run_map_op(tiny(3), {in(0), in(1), op(E::kLt)}, {x, y}, kBool, out_shape, rng);
  for (uint64_t e = 0; e < 42; ++e) ASSERT_EQ(lt[e], x.values[e] < y.values[e % 7] ? 1 : 0);
  auto li = run_map_op(tiny(3), {in(0), in(1), op(E::kLt)}, {x, y}, kI32, out_shape, rng);
  EXPECT_EQ(li, lt);
}

TEST(OpsMap, HalfPrecisionEndToEnd) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-100, 100);
  const Shape shape = {5, 37};
  Input a{shape, kF16, {}, 1}, b{{37}, kF16, {}, 0};
  for (int i = 0; i < 185; ++i) a.values.push_back(ref_round_half(u(rng)));
  for (int i = 0; i < 37; ++i) b.values.push_back(ref_round_half(u(rng)));
  auto got = run_map_op(tiny(4), in_half({in(0), in(1), op(E::kMul), in(0), op(E::kAdd)}), {a, b}, kF16, shape, rng);
  ASSERT_EQ(got.size(), 185u);
  for (uint64_t e = 0; e < 185; ++e) {
    const double want = ref_round_half(ref_round_half(a.values[e] * b.values[e % 37]) + a.values[e]);
    ASSERT_EQ(got[e], want) << e;
  }
}

TEST(OpsMap, ResultTakesTheLayoutOfAFullSizeOperand) {
  std::mt19937 rng(4);
  auto g = std::make_unique<Graph>(tiny(5), 1);
  Tensor x = g->add_variable("x", kF32, {10, 3}, VarKind::kInput, 0);
  lay_out(*g, x.var, 2, rng);
  Tensor s = g->add_variable("s", kF32, {}, VarKind::kInput, 0);
  g->map_to_tile(s.var, 4);
  g->add_input_stream("x", x);
  g->add_input_stream("s", s);
  Tensor y = ops::map(*g, {in(0), in(1), op(E::kSub)}, {s, x}, kF32, {10, 3}, 0, "sub");
  const auto& mx = g->var(x.var).mapping;
  const auto& my = g->var(y.var).mapping;
  ASSERT_EQ(mx.size(), my.size());
  for (size_t i = 0; i < mx.size(); ++i) {
    EXPECT_EQ(mx[i].begin, my[i].begin);
    EXPECT_EQ(mx[i].tile, my[i].tile);
  }
  // x is read in place: the only copies bring the scalar to the result's tiles.
  size_t copies = 0;
  for (const Exchange& ex : g->exchanges())
    for (const Copy& c : ex.copies) {
      EXPECT_EQ(c.src, s.var) << "only the scalar should move";
      ++copies;
    }
  EXPECT_LE(copies, g->var(y.var).tiles.size());
  g->add_output_stream("y", y);
  std::vector<float> xs(30);
  for (int i = 0; i < 30; ++i) xs[i] = static_cast<float>(i) * 1.5f;
  auto out = run_graph(std::move(g), {to_bytes(xs), to_bytes(std::vector<float>{7.0f})});
  ASSERT_EQ(out.size(), 1u);
  auto ys = from_bytes<float>(out[0]);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(ys[i], 7.0f - xs[i]);
}

TEST(OpsMap, ChainsAndIpuPlacement) {
  std::mt19937 rng(5);
  auto g = std::make_unique<Graph>(tiny(3, 2), 2);
  Tensor x = g->add_variable("x", kF32, {50}, VarKind::kInput, 1);
  g->add_input_stream("x", x);
  Tensor r = ops::map(*g, {in(0), op(E::kRelu)}, {x}, kF32, {50}, 1, "relu");
  Tensor sq = ops::map(*g, {in(0), in(0), op(E::kMul)}, {r}, kF32, {50}, 1, "sq");
  Tensor b = ops::map(*g, {in(0), in(1), op(E::kGt)}, {sq, x}, kBool, {50}, 1, "gt");
  for (const Tensor& t : {r, sq, b})
    for (const TileShare& s : g->var(t.var).tiles) EXPECT_EQ(g->ipu_of_tile(s.tile), 1u);
  g->add_output_stream("sq", sq);
  g->add_output_stream("gt", b);
  EXPECT_EQ(g->op_plans().size(), 3u);
  EXPECT_EQ(g->op_plans()[0].kind, "map");
  std::vector<float> xs(50);
  for (int i = 0; i < 50; ++i) xs[i] = (i - 25) * 0.2f;
  auto out = run_graph(std::move(g), {to_bytes(xs)});
  ASSERT_EQ(out.size(), 2u);
  auto sqs = from_bytes<float>(out[0]);
  for (int i = 0; i < 50; ++i) {
    const float rr = xs[i] > 0 ? xs[i] : 0.0f;
    EXPECT_EQ(sqs[i], rr * rr);
    EXPECT_EQ(out[1][i], rr * rr > xs[i] ? 1 : 0);
  }
}

TEST(OpsMap, Errors) {
  Graph g(tiny(2, 2), 2);
  Tensor x = g.add_variable("x", kF32, {3, 4}, VarKind::kInput, 0);
  Tensor far = g.add_variable("far", kF32, {4}, VarKind::kInput, 1);
  Tensor i = g.add_variable("i", kI32, {4}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kShapeMismatch, ops::map(g, {in(0), op(E::kNeg)}, {x}, kF32, {4, 3}, 0, "bad"), "'bad'", "[3, 4]",
                  "[4, 3]");
  EXPECT_NX_ERROR(kShapeMismatch, ops::map(g, {in(0), op(E::kNeg)}, {x}, kF32, {4}, 0, "lower"), "'lower'");
  EXPECT_NX_ERROR(kInvalidArgument, ops::map(g, {in(0), in(1), op(E::kAdd)}, {x, far}, kF32, {3, 4}, 0, "ipus"),
                  "'far'", "IPU 1");
  EXPECT_NX_ERROR(kInvalidArgument, ops::map(g, {in(0), op(E::kNeg)}, {x}, kI32, {3, 4}, 0, "type"), "'type'", "int32");
  EXPECT_NX_ERROR(kInvalidArgument, ops::map(g, {in(0), in(1), op(E::kAdd)}, {x, i}, kF32, {3, 4}, 0, "mixed"), "add");
  EXPECT_NX_ERROR(kInvalidArgument, ops::map(g, {in(0), op(E::kNeg)}, {x}, kF32, {3, 4}, 2, "noipu"));
  // Nothing to compute for an empty result.
  const size_t steps = g.program().size();
  Tensor e = ops::map(g, {cf(1)}, {}, kF32, {0, 4}, 0, "empty");
  EXPECT_EQ(e.numel(), 0u);
  EXPECT_EQ(g.program().size(), steps);
}

TEST(OpsMap, ConstantOnlyExpressionFillsTheShape) {
  std::mt19937 rng(6);
  auto got = run_map_op(tiny(3), {cf(2.5), cf(4), op(E::kMul)}, {}, kF32, {4, 9}, rng);
  EXPECT_EQ(got, std::vector<double>(36, 10.0));
}

TEST(OpsFill, EveryTypeOnEveryTile) {
  for (auto [dt, value, want] : std::vector<std::tuple<DeviceType, double, double>>{
           {kF32, -1.75, -1.75}, {kF16, 0.1, ref_round_half(0.1)}, {kI32, 42, 42},
           {kBool, 1, 1}}) {
    auto g = std::make_unique<Graph>(tiny(4), 1);
    Tensor t = ops::fill(*g, dt, {7, 11}, value, 0, "fill");
    EXPECT_GE(g->var(t.var).tiles.size(), 2u) << "77 elements spread over several tiles";
    g->add_output_stream("t", t);
    auto out = run_graph(std::move(g), {});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(decode(dt, out[0]), std::vector<double>(77, want)) << device_type_name(dt);
  }
  Graph g(tiny(2), 1);
  Tensor e = ops::fill(g, kF32, {0}, 1, 0, "empty");
  EXPECT_EQ(e.numel(), 0u);
  EXPECT_TRUE(g.program().empty());
}

}  // namespace

namespace {

TEST(OpsMap, ScalarResultsAndRankZeroOperands) {
  std::mt19937 rng(7);
  for (uint32_t tiles : {1u, 4u}) {
    Input a{{}, kF32, {2.5}, 0}, b{{1}, kF32, {-4}, 3}, c{{1, 1}, kF32, {0.5}, 1};
    // Only rank-0 operands broadcast to a rank-0 result (numpy: [1] with [] gives [1]).
    Input d{{}, kF32, {-4}, 3};
    auto s = run_map_op(tiny(tiles), {in(0), in(1), op(E::kMul), cf(0.5), op(E::kAdd)}, {a, d}, kF32, {}, rng);
    EXPECT_EQ(s, std::vector<double>{-9.5});
    auto r1 = run_map_op(tiny(tiles), {in(0), in(1), op(E::kMul)}, {a, b}, kF32, {1}, rng);
    EXPECT_EQ(r1, std::vector<double>{-10});
    auto v = run_map_op(tiny(tiles), {in(0), in(1), op(E::kMul), in(2), op(E::kAdd)}, {a, b, c}, kF32, {1, 1, 3},
                        rng);
    EXPECT_EQ(v, std::vector<double>(3, -9.5));
  }
}

}  // namespace
