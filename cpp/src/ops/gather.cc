// Run-time gathers: the table is split by columns, every table tile receives
// all indices and looks up its columns; the result is then moved to rows.
#include "neurenix/ops/gather.h"

#include <algorithm>
#include <string>

#include "neurenix/codelets/gather.h"
#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "planning.h"

namespace neurenix::ops {

Tensor gather_rows(Graph& g, const Tensor& table, const Tensor& indices, uint32_t ipu, const std::string& name) {
  if (table.shape.size() != 2) fail(ErrorCode::kShapeMismatch, "gather '" + name + "': table must be 2-D");
  if (g.var(indices.var).dtype != DeviceType::kInt32)
    fail(ErrorCode::kShapeMismatch, "gather '" + name + "': indices must be int32");
  const DeviceType dtype = g.var(table.var).dtype;
  const uint64_t v = table.shape[0], d = table.shape[1], n = indices.numel();
  Tensor out = g.add_variable(name, dtype, {n, d}, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  // Column slices of at least 16 columns where half a tile holds them (fewer,
  // down to one, for big vocabularies), and at most one slice per tile.
  const uint64_t es = device_type_size(dtype);
  const uint64_t fit = std::max<uint64_t>(1, g.bytes_per_tile() / 2 / std::max<uint64_t>(1, v * es));
  uint64_t cols = std::min<uint64_t>(std::min<uint64_t>(16, fit), d);
  cols = std::max(cols, ceil_div(d, g.tiles_per_ipu()));
  const uint64_t used = ceil_div(d, cols);
  const uint32_t first = g.reserve_tiles(ipu, static_cast<uint32_t>(used));
  auto tile_of = [&](uint64_t i) { return g.window_tile(ipu, first, static_cast<uint32_t>(i)); };
  auto column_mapping = [&](uint64_t nrows) {
    std::vector<TileInterval> ivs;
    for (uint64_t i = 0; i < used; ++i) {
      const uint64_t c0 = i * cols, c1 = std::min(d, c0 + cols);
      for (uint64_t r = 0; r < nrows; ++r) ivs.push_back(TileInterval{r * d + c0, r * d + c1, tile_of(i), 0});
    }
    return ivs;
  };
  uint32_t ex = g.add_exchange(name + "/indices");
  // The table, split by columns: laid out so if nobody placed it, else copied.
  Tensor tab = table;
  std::vector<uint64_t> table_local(used, 0);
  if (!g.var(table.var).mapped) {
    g.set_mapping(table.var, column_mapping(v));
  } else {
    bool ok = true;
    for (uint64_t i = 0; i < used && ok; ++i) {
      LocalBlock lb;
      ok = find_local_block(g, table.var, tile_of(i), i * cols, v, std::min(d, i * cols + cols) - i * cols, d, &lb) &&
           lb.ld == std::min(d, i * cols + cols) - i * cols;
      table_local[i] = ok ? lb.local : 0;
    }
    if (!ok) {
      std::fill(table_local.begin(), table_local.end(), 0);
      tab = g.add_variable(name + "/table", dtype, {v, d}, VarKind::kTemporary, ipu);
      g.set_mapping(tab.var, column_mapping(v));
      copy_view(g, ex, View::of(table), View::of(tab));
    }
  }
  // The lookup writes column slices; the result is then laid out by rows
  // (what every consumer of an embedding reads), moved once by exchange.
  Tensor slices = g.add_variable(name + "/slices", dtype, {n, d}, VarKind::kTemporary, ipu);
  g.set_mapping(slices.var, column_mapping(n));
  g.map_linearly(out.var, d);
  g.ensure_mapped(indices.var);
  // Every table tile receives all the indices.
  Tensor idx = g.add_variable(name + "/indices", DeviceType::kInt32, {used * n}, VarKind::kTemporary, ipu);
  {
    std::vector<TileInterval> ivs;
    for (uint64_t i = 0; i < used; ++i) ivs.push_back(TileInterval{i * n, (i + 1) * n, tile_of(i), 0});
    g.set_mapping(idx.var, std::move(ivs));
    for (uint64_t i = 0; i < used; ++i) {
      View src{indices.var, 0, {n}, {1}};
      View dst{idx.var, static_cast<int64_t>(i * n), {n}, {1}};
      copy_view(g, ex, src, dst);
    }
  }
  g.execute_exchange(ex);
  uint32_t cs = g.add_compute_set(name);
  for (uint64_t i = 0; i < used; ++i) {
    const uint32_t tile = tile_of(i);
    const uint64_t c = std::min(d, i * cols + cols) - i * cols;
    Field ft{tab.var, tile, table_local[i], v * c};
    Field fi{idx.var, tile, 0, n};
    Field fo{slices.var, tile, 0, n * c};
    g.add_vertex(cs, std::make_unique<GatherVertex>(tile, ft, fi, fo, static_cast<uint32_t>(v), static_cast<uint32_t>(c),
                                                    static_cast<uint32_t>(c), dtype));
  }
  g.execute(cs);
  uint32_t rex = g.add_exchange(name + "/to_rows");
  copy_view(g, rex, View::of(slices), View::of(out));
  g.execute_exchange(rex);
  g.record_plan(OpPlan{name, "gather", ipu,
                       std::to_string(n) + " rows of a [" + std::to_string(v) + " x " + std::to_string(d) +
                           "] table, columns over " + std::to_string(used) + " tiles",
                       static_cast<uint32_t>(used), 0, 0});
  return out;
}

}  // namespace neurenix::ops
