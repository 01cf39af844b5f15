// Reductions, in two stages as PopLibs does them. The input is first arranged
// so the reduced axes are innermost (a copy only if they are not already);
// then every output element is a contiguous row. Stage one reduces each
// tile's piece of every row; rows that live on one tile are finished there.
// Stage two exchanges the partials of split rows to the row's tile and
// combines them.
#include "neurenix/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "neurenix/ops/map.h"
#include "neurenix/ops/rearrange.h"

namespace neurenix::ops {

Tensor reduce(Graph& g, const Tensor& x_in, const std::vector<uint32_t>& axes_in, ReduceOp op, ReduceFinal final_op,
              double scale, DeviceType out_dtype, uint32_t ipu, const std::string& name) {
  const size_t rank = x_in.shape.size();
  std::vector<uint32_t> axes = axes_in;
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  for (uint32_t a : axes)
    if (a >= rank) fail(ErrorCode::kShapeMismatch, "reduce '" + name + "': axis " + std::to_string(a) + " out of range for " +
                                                      shape_str(x_in.shape));
  Shape out_shape;
  std::vector<bool> reduced(rank, false);
  for (uint32_t a : axes) reduced[a] = true;
  for (size_t i = 0; i < rank; ++i)
    if (!reduced[i]) out_shape.push_back(x_in.shape[i]);
  const uint64_t rows = shape_numel(out_shape);
  uint64_t row_len = 1;
  for (uint32_t a : axes) row_len *= x_in.shape[a];

  if (g.var(x_in.var).ipu != ipu)
    fail(ErrorCode::kInvalidArgument, "reduce '" + name + "': input is on IPU " + std::to_string(g.var(x_in.var).ipu) +
                                          ", not " + std::to_string(ipu));
  Tensor out = g.add_variable(name, out_dtype, out_shape, VarKind::kIntermediate, ipu);
  if (rows == 0) return out;
  const bool float_in = is_float(g.var(x_in.var).dtype);
  const DeviceType partial_dtype = float_in ? DeviceType::kFloat32 : DeviceType::kInt32;
  if (row_len == 0) {
    // Empty reduction: the identity of the operation, then the final step.
    double ident = op == ReduceOp::kProd ? 1.0 : op == ReduceOp::kMax ? -INFINITY : op == ReduceOp::kMin ? INFINITY : 0.0;
    switch (final_op) {
      case ReduceFinal::kNone: break;
      case ReduceFinal::kScale: ident *= scale; break;
      case ReduceFinal::kSqrt: ident = std::sqrt(ident); break;
      case ReduceFinal::kLog: ident = std::log(ident); break;
    }
    return fill(g, out_dtype, out_shape, ident, ipu, name);
  }

  // Move reduced axes innermost if they are not already.
  Tensor x = x_in;
  g.ensure_mapped(x.var);
  bool trailing = true;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - axes.size() + i) trailing = false;
  if (!trailing) {
    std::vector<uint32_t> perm;
    for (size_t i = 0; i < rank; ++i)
      if (!reduced[i]) perm.push_back(static_cast<uint32_t>(i));
    for (uint32_t a : axes) perm.push_back(a);
    View base = View::of(x_in);
    View v;
    v.var = x_in.var;
    v.offset = 0;
    for (uint32_t p : perm) {
      v.shape.push_back(x_in.shape[p]);
      v.strides.push_back(base.strides[p]);
    }
    x = rearrange(g, v, ipu, name + "/transpose");
  }
  const DeviceType in_dtype = g.var(x.var).dtype;

  // Pieces of rows per tile.
  struct Piece {
    uint64_t row;
    uint32_t tile;
    uint64_t local;
    uint64_t len;
  };
  std::vector<Piece> pieces;
  {
    const Variable& xv = g.var(x.var);
    for (const TileInterval& iv : xv.mapping) {
      uint64_t pos = iv.begin;
      while (pos < iv.end) {
        uint64_t row = pos / row_len;
        uint64_t row_end = std::min(iv.end, (row + 1) * row_len);
        pieces.push_back(Piece{row, iv.tile, iv.local + (pos - iv.begin), row_end - pos});
        pos = row_end;
      }
    }
  }
  // pieces are in flat order, so each row's pieces are consecutive.
  std::vector<uint64_t> row_first(rows + 1, 0);
  {
    uint64_t r = 0;
    for (size_t i = 0; i < pieces.size(); ++i)
      while (r <= pieces[i].row) row_first[r++] = i;
    while (r <= rows) row_first[r++] = pieces.size();
  }
  // Output row r lives on a tile holding one of its pieces: the only one for
  // rows on one tile; for split rows, piece r mod (pieces of the row), so that
  // rows split the same way (a column-split tensor, say) spread over all their
  // tiles instead of piling onto the first.
  std::vector<uint32_t> row_tile(rows);
  {
    std::vector<TileInterval> ivs;
    for (uint64_t r = 0; r < rows; ++r) {
      const uint64_t np = row_first[r + 1] - row_first[r];
      row_tile[r] = pieces[row_first[r] + (np > 1 ? r % np : 0)].tile;
      ivs.push_back(TileInterval{r, r + 1, row_tile[r], 0});
    }
    g.set_mapping(out.var, std::move(ivs));
  }
  // Partial slots for pieces of split rows, each on its piece's tile.
  std::vector<int64_t> slot(pieces.size(), -1);
  uint64_t nslots = 0;
  for (uint64_t r = 0; r < rows; ++r)
    if (row_first[r + 1] - row_first[r] > 1)
      for (uint64_t p = row_first[r]; p < row_first[r + 1]; ++p) slot[p] = static_cast<int64_t>(nslots++);
  Tensor partial;
  if (nslots) {
    partial = g.add_variable(name + "/partials", partial_dtype, {nslots}, VarKind::kTemporary, ipu);
    std::vector<TileInterval> ivs;
    for (size_t p = 0; p < pieces.size(); ++p)
      if (slot[p] >= 0)
        ivs.push_back(TileInterval{static_cast<uint64_t>(slot[p]), static_cast<uint64_t>(slot[p]) + 1, pieces[p].tile, 0});
    g.set_mapping(partial.var, std::move(ivs));
  }

  // Stage one.
  uint32_t cs1 = g.add_compute_set(name + "/reduce");
  {
    // Group pieces by tile.
    std::vector<size_t> order(pieces.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].tile < pieces[b].tile; });
    size_t i = 0;
    while (i < order.size()) {
      uint32_t tile = pieces[order[i]].tile;
      std::vector<ReduceSegment> fin, part;
      for (; i < order.size() && pieces[order[i]].tile == tile; ++i) {
        const Piece& pc = pieces[order[i]];
        if (slot[order[i]] < 0) {
          fin.push_back(ReduceSegment{pc.local, pc.len, 1, g.locate(out.var, pc.row).local});
        } else {
          const uint64_t local = g.locate(partial.var, static_cast<uint64_t>(slot[order[i]])).local;
          part.push_back(ReduceSegment{pc.local, pc.len, 1, local});
        }
      }
      const uint64_t in_count = g.var(x.var).share(tile)->count;
      Field fin_in{x.var, tile, 0, in_count};
      if (!fin.empty()) {
        Field fout{out.var, tile, 0, g.var(out.var).share(tile)->count};
        g.add_vertex(cs1, std::make_unique<ReduceVertex>(tile, fin_in, in_dtype, fout, out_dtype, op, false, final_op,
                                                         scale, std::move(fin)));
      }
      if (!part.empty()) {
        Field fout{partial.var, tile, 0, g.var(partial.var).share(tile)->count};
        g.add_vertex(cs1, std::make_unique<ReduceVertex>(tile, fin_in, in_dtype, fout, partial_dtype, op, false,
                                                         ReduceFinal::kNone, 1.0, std::move(part)));
      }
    }
  }
  g.execute(cs1);

  if (nslots) {
    // Stage two: gather each split row's partials on the row's tile.
    uint32_t ex = g.add_exchange(name + "/combine_exchange");
    Tensor gathered = g.add_variable(name + "/partials_in", partial_dtype, {nslots}, VarKind::kTemporary, ipu);
    std::vector<TileInterval> ivs;
    std::vector<uint64_t> split_rows;
    for (uint64_t r = 0; r < rows; ++r) {
      uint64_t n = row_first[r + 1] - row_first[r];
      if (n <= 1) continue;
      uint64_t s0 = static_cast<uint64_t>(slot[row_first[r]]);
      ivs.push_back(TileInterval{s0, s0 + n, row_tile[r], 0});
      split_rows.push_back(r);
    }
    g.set_mapping(gathered.var, std::move(ivs));
    copy_view(g, ex, View::of(partial), View::of(gathered));
    g.execute_exchange(ex);
    uint32_t cs2 = g.add_compute_set(name + "/combine");
    std::vector<std::pair<uint32_t, ReduceSegment>> segs;
    for (uint64_t r : split_rows) {
      uint64_t n = row_first[r + 1] - row_first[r];
      uint64_t s0 = static_cast<uint64_t>(slot[row_first[r]]);
      const uint64_t in_local = g.locate(gathered.var, s0).local;
      const TileLocation out_at = g.locate(out.var, r);
      segs.push_back({out_at.tile, ReduceSegment{in_local, n, 1, out_at.local}});
    }
    std::stable_sort(segs.begin(), segs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t i = 0;
    while (i < segs.size()) {
      uint32_t tile = segs[i].first;
      std::vector<ReduceSegment> group;
      for (; i < segs.size() && segs[i].first == tile; ++i) group.push_back(segs[i].second);
      Field fin{gathered.var, tile, 0, g.var(gathered.var).share(tile)->count};
      Field fout{out.var, tile, 0, g.var(out.var).share(tile)->count};
      g.add_vertex(cs2, std::make_unique<ReduceVertex>(tile, fin, partial_dtype, fout, out_dtype, op, true, final_op, scale,
                                                       std::move(group)));
    }
    g.execute(cs2);
  }
  g.record_plan(OpPlan{name, "reduce",
                       ipu, std::string(reduce_op_name(op)) + " of " + std::to_string(rows) + " row(s) of " +
                                std::to_string(row_len) + (nslots ? ", two stages" : ", one stage"),
                       static_cast<uint32_t>(g.var(out.var).tiles.size()), 0, 0});
  return out;
}

}  // namespace neurenix::ops
