// Data movement ops: rearrange (strided views materialised), concat, and
// copies between IPUs, checked element by element.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "neurenix/ops/rearrange.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

std::vector<int32_t> iota_i32(uint64_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Element e of a view: base[offset + sum(idx * stride)].
std::vector<int32_t> view_values(const View& v, const std::vector<int32_t>& base) {
  std::vector<int32_t> out(v.numel());
  for (uint64_t e = 0; e < out.size(); ++e) {
    auto idx = unravel(e, v.shape);
    int64_t f = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) f += static_cast<int64_t>(idx[d]) * v.strides[d];
    out[e] = base.at(static_cast<size_t>(f));
  }
  return out;
}

TEST(OpsRearrange, TransposeSliceBroadcast) {
  const Shape base = {4, 5, 6};
  const std::vector<View> views = {
      {0, 0, {6, 5, 4}, {1, 6, 30}},     // full transpose
      {0, 7, {3, 2, 2}, {30, 12, 3}},    // x[:3, 1::2, 1::3] ... with offset 7 = 6 + 1
      {0, 119, {4, 5, 6}, {-30, -6, -1}}, // reversed
      {0, 0, {2, 4, 5, 6}, {0, 30, 6, 1}}, // broadcast a new leading axis
      {0, 13, {5, 3}, {6, 0}},           // a column repeated
      {0, 0, {120}, {1}},                // flatten
  };
  for (uint32_t tiles : {1u, 3u, 8u})
    for (const View& vv : views) {
      auto g = std::make_unique<Graph>(tiny(tiles), 1);
      Tensor x = g->add_variable("x", kI32, base, VarKind::kInput, 0);
      g->add_input_stream("x", x);
      View v = vv;
      v.var = x.var;
      Tensor y = ops::rearrange(*g, v, 0, "re");
      EXPECT_EQ(y.shape, v.shape);
      EXPECT_EQ(g->var(y.var).kind, VarKind::kIntermediate);
      g->add_output_stream("y", y);
      auto xs = iota_i32(120, 1000);
      auto out = run_graph(std::move(g), {to_bytes(xs)});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(from_bytes<int32_t>(out[0]), view_values(v, xs)) << shape_str(v.shape) << " on " << tiles;
    }
}

TEST(OpsRearrange, HalfAndBoolElementsMoveBitExactly) {
  auto g = std::make_unique<Graph>(tiny(3), 1);
  Tensor h = g->add_variable("h", kF16, {8, 3}, VarKind::kInput, 0);
  Tensor b = g->add_variable("b", kBool, {8, 3}, VarKind::kInput, 0);
  g->add_input_stream("h", h);
  g->add_input_stream("b", b);
  Tensor ht = ops::rearrange(*g, View{h.var, 0, {3, 8}, {1, 3}}, 0, "ht");
  Tensor bt = ops::rearrange(*g, View{b.var, 0, {3, 8}, {1, 3}}, 0, "bt");
  g->add_output_stream("ht", ht);
  g->add_output_stream("bt", bt);
  std::vector<uint16_t> hs(24);
  std::vector<uint8_t> bs(24);
  for (int i = 0; i < 24; ++i) {
    hs[i] = static_cast<uint16_t>(0x7c01 + i * 1000);  // includes NaN payloads
    bs[i] = static_cast<uint8_t>(i % 3);
  }
  auto out = run_graph(std::move(g), {to_bytes(hs), bs});
  ASSERT_EQ(out.size(), 2u);
  auto ho = from_bytes<uint16_t>(out[0]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(ho[r * 8 + c], hs[c * 3 + r]);
      EXPECT_EQ(out[1][r * 8 + c], bs[c * 3 + r]);
    }
}

TEST(OpsRearrange, RejectsViewsOutsideTheVariable) {
  Graph g(tiny(2, 2), 2);
  Tensor x = g.add_variable("x", kF32, {4, 5}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kShapeMismatch, ops::rearrange(g, View{x.var, 0, {5, 5}, {5, 1}}, 0, "big"), "'big'", "outside 'x'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::rearrange(g, View{x.var, 1, {4, 5}, {5, 1}}, 0, "shifted"), "outside");
  EXPECT_NX_ERROR(kShapeMismatch, ops::rearrange(g, View{x.var, 3, {5}, {-1}}, 0, "negative"), "outside");
  EXPECT_NX_ERROR(kShapeMismatch, ops::rearrange(g, View{x.var, -1, {1}, {1}}, 0, "before"), "outside");
  EXPECT_NX_ERROR(kInvalidArgument, ops::rearrange(g, View{x.var, 0, {4, 5}, {5}}, 0, "rank"), "'rank'", "2 dims", "1 strides");
  EXPECT_NX_ERROR(kInvalidArgument, ops::rearrange(g, View{x.var, 0, {4, 5}, {5, 1}}, 1, "elsewhere"), "another IPU");
  // The last element is in range; a stride-0 view of it too.
  EXPECT_NO_THROW(ops::rearrange(g, View{x.var, 19, {3}, {0}}, 0, "last"));
  EXPECT_NO_THROW(ops::rearrange(g, View{x.var, 19, {20}, {-1}}, 0, "reversed"));
  Tensor e = ops::rearrange(g, View{x.var, 100, {0, 3}, {1, 1}}, 0, "empty");
  EXPECT_EQ(e.numel(), 0u) << "an empty view reads nothing, wherever it points";
}

TEST(OpsConcat, EveryAxisWithMixedLayouts) {
  std::mt19937 rng(1);
  for (uint32_t axis = 0; axis < 3; ++axis)
    for (uint32_t tiles : {1u, 4u, 7u}) {
      auto g = std::make_unique<Graph>(tiny(tiles), 1);
      std::vector<Shape> shapes;
      for (uint64_t len : {2ull, 0ull, 3ull, 1ull}) {
        Shape s = {2, 3, 4};
        s[axis] = len;
        shapes.push_back(s);
      }
      std::vector<Tensor> ts;
      std::vector<std::vector<uint8_t>> inputs;
      std::vector<std::vector<int32_t>> data;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor t = g->add_variable("x" + std::to_string(i), kI32, shapes[i], VarKind::kInput, 0);
        if (i % 2 == 0 && t.numel()) g->map_linearly(t.var, 1 + rng() % 5);
        g->add_input_stream("x" + std::to_string(i), t);
        data.push_back(iota_i32(t.numel(), static_cast<int32_t>(1000 * (i + 1))));
        inputs.push_back(to_bytes(data.back()));
        ts.push_back(t);
      }
      Tensor y = ops::concat(*g, ts, axis, 0, "cat");
      Shape want_shape = {2, 3, 4};
      want_shape[axis] = 6;
      ASSERT_EQ(y.shape, want_shape);
      g->add_output_stream("y", y);
      auto out = run_graph(std::move(g), inputs);
      ASSERT_EQ(out.size(), 1u);
      auto ys = from_bytes<int32_t>(out[0]);
      // Reference: walk the output, find which operand and where.
      for (uint64_t e = 0; e < ys.size(); ++e) {
        auto idx = unravel(e, want_shape);
        uint64_t at = idx[axis];
        size_t which = 0;
        while (at >= shapes[which][axis]) at -= shapes[which++][axis];
        auto src = idx;
        src[axis] = at;
        uint64_t f = 0;
        for (size_t d = 0; d < 3; ++d) f = f * shapes[which][d] + src[d];
        ASSERT_EQ(ys[e], data[which][f]) << "axis " << axis << " element " << e;
      }
    }
}

TEST(OpsConcat, Errors) {
  Graph g(tiny(2, 2), 2);
  Tensor a = g.add_variable("a", kF32, {2, 3}, VarKind::kInput, 0);
  Tensor b = g.add_variable("b", kF32, {2, 4}, VarKind::kInput, 0);
  Tensor c = g.add_variable("c", kI32, {2, 3}, VarKind::kInput, 0);
  Tensor d = g.add_variable("d", kF32, {2, 3, 1}, VarKind::kInput, 0);
  Tensor far = g.add_variable("far", kF32, {2, 3}, VarKind::kInput, 1);
  EXPECT_NX_ERROR(kInvalidArgument, ops::concat(g, {}, 0, 0, "none"), "'none'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::concat(g, {a, b}, 0, 0, "cat0"), "[2, 3]", "[2, 4]", "axis 0");
  EXPECT_NO_THROW(ops::concat(g, {a, b}, 1, 0, "cat1"));
  EXPECT_NX_ERROR(kShapeMismatch, ops::concat(g, {a, c}, 0, 0, "types"), "'types'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::concat(g, {a, d}, 0, 0, "ranks"), "'ranks'");
  EXPECT_NX_ERROR(kShapeMismatch, ops::concat(g, {a}, 2, 0, "axis"), "axis");
  EXPECT_NX_ERROR(kInvalidArgument, ops::concat(g, {a, far}, 0, 0, "ipus"), "another IPU");
}

TEST(OpsCopyToIpu, MovesDataAndCostsALinkTransfer) {
  std::mt19937 rng(2);
  auto g = std::make_unique<Graph>(tiny(3, 2), 2);
  Tensor x = g->add_variable("x", kF32, {5, 7}, VarKind::kInput, 0);
  std::vector<TileInterval> ivs;
  for (uint64_t pos = 0; pos < 35;) {
    uint64_t end = std::min<uint64_t>(35, pos + 1 + rng() % 6);
    ivs.push_back({pos, end, static_cast<uint32_t>(rng() % 3), 0});
    pos = end;
  }
  g->set_mapping(x.var, ivs);
  g->add_input_stream("x", x);
  Tensor y = ops::copy_to_ipu(*g, x, 1, "to1");
  EXPECT_EQ(g->var(y.var).ipu, 1u);
  // Same layout, one IPU over.
  const auto& mx = g->var(x.var).mapping;
  const auto& my = g->var(y.var).mapping;
  ASSERT_EQ(mx.size(), my.size());
  for (size_t i = 0; i < mx.size(); ++i) EXPECT_EQ(my[i].tile, mx[i].tile + 3);
  Tensor same = ops::copy_to_ipu(*g, y, 1, "noop");
  EXPECT_EQ(same.var, y.var) << "a tensor already there is not copied";
  Tensor back = ops::copy_to_ipu(*g, y, 0, "to0");
  g->add_output_stream("y", y);
  g->add_output_stream("back", back);
  std::vector<float> xs(35);
  for (int i = 0; i < 35; ++i) xs[i] = static_cast<float>(i) * 0.5f - 3;
  std::shared_ptr<Executable> exe;
  auto out = run_graph(std::move(g), {to_bytes(xs)}, 2, &exe);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(from_bytes<float>(out[0]), xs);
  EXPECT_EQ(from_bytes<float>(out[1]), xs);
  // Crossing IPUs pays the cross-IPU sync on top of the transfer.
  const TargetSpec& t = target_for("ipu2");
  int crossings = 0;
  for (const StepCost& c : exe->step_costs())
    if (c.kind == StepKind::kExchange) {
      EXPECT_GE(c.cycles, t.cross_ipu_sync_cycles);
      EXPECT_EQ(c.bytes, 35u * 4);
      ++crossings;
    }
  EXPECT_EQ(crossings, 2);
  // Records of both copies.
  int records = 0;
  for (const OpPlan& r : exe->graph().op_plans())
    if (r.kind == "ipu_copy") ++records;
  EXPECT_EQ(records, 2);
}

}  // namespace
