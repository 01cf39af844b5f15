// ops::gather_rows: run-time row lookups (negative indices count from the end,
// out-of-range ones give zeros), with tables laid out by the gather or by
// someone else, on every element type.
#include <gtest/gtest.h>

#include <random>

#include "neurenix/ops/gather.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct GatherCase {
  uint64_t rows, cols;
  std::vector<int32_t> indices;
  uint32_t tiles = 4;
  uint64_t bytes_per_tile = 0;
  DeviceType dtype = kF32;
  bool table_mapped = false;
  bool table_constant = false;
};

void run_case(const GatherCase& k, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << k.rows << "x" << k.cols << " table, " << k.indices.size() << " indices, "
                                  << k.tiles << " tiles, " << device_type_name(k.dtype) << (k.table_mapped ? ", mapped" : "")
                                  << (k.table_constant ? ", constant" : ""));
  std::uniform_int_distribution<int> q(-100, 100);
  std::vector<double> table(k.rows * k.cols);
  for (auto& v : table) v = k.dtype == kBool ? (q(rng) > 0) : is_float(k.dtype) ? q(rng) / 4.0 : q(rng);
  auto g = std::make_unique<Graph>(tiny(k.tiles, 1, k.bytes_per_tile), 1);
  std::vector<std::vector<uint8_t>> inputs;
  Tensor t;
  if (k.table_constant) {
    t = g->add_constant("table", k.dtype, {k.rows, k.cols}, 0, std::make_shared<const std::vector<uint8_t>>(encode(k.dtype, table)));
  } else {
    t = g->add_variable("table", k.dtype, {k.rows, k.cols}, VarKind::kInput, 0);
    g->add_input_stream("table", t);
    inputs.push_back(encode(k.dtype, table));
  }
  if (k.table_mapped) g->map_linearly(t.var, 3);
  Tensor idx = g->add_variable("idx", kI32, {k.indices.size()}, VarKind::kInput, 0);
  g->add_input_stream("idx", idx);
  inputs.push_back(to_bytes(k.indices));
  Tensor out = ops::gather_rows(*g, t, idx, 0, "gather");
  EXPECT_EQ(out.shape, (Shape{k.indices.size(), k.cols}));
  if (!k.indices.empty()) {
    EXPECT_EQ(g->op_plans().back().kind, "gather");
  }
  g->add_output_stream("out", out);
  auto outs = run_graph(std::move(g), inputs);
  if (outs.empty()) return;
  const std::vector<double> got = decode(k.dtype, outs[0]);
  ASSERT_EQ(got.size(), k.indices.size() * k.cols);
  for (size_t i = 0; i < k.indices.size(); ++i) {
    int64_t r = k.indices[i];
    if (r < 0) r += static_cast<int64_t>(k.rows);
    const bool valid = r >= 0 && r < static_cast<int64_t>(k.rows);
    for (uint64_t c = 0; c < k.cols; ++c)
      ASSERT_EQ(got[i * k.cols + c], valid ? table[static_cast<uint64_t>(r) * k.cols + c] : 0.0) << i << "," << c;
  }
}

TEST(OpsGather, RowsOfEveryTypeAndLayout) {
  std::mt19937 rng(1);
  for (DeviceType dt : {kF32, kF16, kI32, kBool})
    for (bool mapped : {false, true})
      for (bool constant : {false, true}) {
        GatherCase k{7, 37, {0, 6, 3, 3, -1, -7, 7, -8, 1000, 2}};
        k.dtype = dt;
        k.table_mapped = mapped;
        k.table_constant = constant;
        run_case(k, rng);
      }
}

TEST(OpsGather, ColumnSlicesOverManyTilesAndFewColumns) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int32_t> any(-60, 60);
  for (uint64_t cols : {1ull, 5ull, 16ull, 17ull, 200ull})
    for (uint32_t tiles : {1u, 3u, 16u}) {
      GatherCase k{50, cols, {}};
      for (int i = 0; i < 23; ++i) k.indices.push_back(any(rng));
      k.tiles = tiles;
      run_case(k, rng);
    }
  // A table too big to copy whole onto each column tile: fewer columns each.
  GatherCase big{2000, 8, {0, 1999, -2000, 5}};
  big.tiles = 8;
  big.bytes_per_tile = 65536;
  run_case(big, rng);
}

TEST(OpsGather, EmptyAndErrors) {
  std::mt19937 rng(3);
  run_case(GatherCase{5, 3, {}}, rng);
  Graph g(tiny(4), 1);
  Tensor t = g.add_variable("t", kF32, {4, 3}, VarKind::kInput, 0);
  Tensor t3 = g.add_variable("t3", kF32, {4, 3, 2}, VarKind::kInput, 0);
  Tensor fi = g.add_variable("fi", kF32, {2}, VarKind::kInput, 0);
  Tensor ii = g.add_variable("ii", kI32, {2}, VarKind::kInput, 0);
  EXPECT_NX_ERROR(kShapeMismatch, ops::gather_rows(g, t3, ii, 0, "g"), "2-D");
  EXPECT_NX_ERROR(kShapeMismatch, ops::gather_rows(g, t, fi, 0, "g"), "int32");
}

}  // namespace
