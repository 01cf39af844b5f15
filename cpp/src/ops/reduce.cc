// Reductions, in two stages as PopLibs does them. The input is first arranged
// so the reduced axes are innermost (a copy only if they are not already);
// then every output element is a contiguous row. Stage one reduces each
// tile's pieces of every row into one partial per tile; rows that live on one
// tile are finished there. The partials of split rows are then exchanged to
// the row's tile and combined, through an intermediate level of groups when a
// row is spread over more than 32 tiles.
#include "neurenix/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "neurenix/error.h"
#include "neurenix/float8.h"
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
      case ReduceFinal::kFloat8Scale: ident = float8_scale_for(static_cast<float>(ident), float8_format(static_cast<int>(scale))); break;
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
  // Partial slots of split rows: one per (row, tile holding a piece of it),
  // on that tile; a row's slots are consecutive.
  std::vector<int64_t> slot(pieces.size(), -1);
  std::vector<uint64_t> row_s0(rows, 0), row_n(rows, 0);
  std::vector<uint32_t> slot_tile;
  for (uint64_t r = 0; r < rows; ++r) {
    if (row_first[r + 1] - row_first[r] <= 1) continue;
    row_s0[r] = slot_tile.size();
    std::vector<std::pair<uint32_t, uint64_t>> seen;  // tile -> slot
    for (uint64_t p = row_first[r]; p < row_first[r + 1]; ++p) {
      auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == pieces[p].tile; });
      if (it == seen.end()) {
        seen.push_back({pieces[p].tile, slot_tile.size()});
        slot_tile.push_back(pieces[p].tile);
        it = seen.end() - 1;
      }
      slot[p] = static_cast<int64_t>(it->second);
    }
    row_n[r] = seen.size();
  }
  const uint64_t nslots = slot_tile.size();
  auto slots_on_tiles = [&](const std::string& what, const std::vector<uint32_t>& tiles) {
    Tensor t = g.add_variable(what, partial_dtype, {tiles.size()}, VarKind::kTemporary, ipu);
    std::vector<TileInterval> ivs;
    for (uint64_t i = 0; i < tiles.size(); ++i) ivs.push_back(TileInterval{i, i + 1, tiles[i], 0});
    g.set_mapping(t.var, std::move(ivs));
    return t;
  };
  Tensor partial;
  if (nslots) partial = slots_on_tiles(name + "/partials", slot_tile);

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
      // A tile's pieces of one row are combined into the row's slot.
      std::stable_sort(part.begin(), part.end(),
                       [](const ReduceSegment& a, const ReduceSegment& b) { return a.out_offset < b.out_offset; });
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

  // Gathers groups of partials (each `len` consecutive slots of `from` from
  // `s0`) onto one tile each and combines every group into one element of
  // `into` (`final` and `scale` applied), in one exchange and compute set.
  struct Group {
    uint64_t s0, len;
    uint32_t tile;
    uint64_t into_flat;
  };
  auto combine_groups = [&](const Tensor& from, const std::vector<Group>& groups, const Tensor& into,
                            DeviceType into_dtype, ReduceFinal fin_op, double fin_scale, const std::string& level,
                            const std::string& gathered_name) {
    uint32_t ex = g.add_exchange(name + "/" + level + "_exchange");
    uint64_t total = 0;
    for (const Group& gr : groups) total += gr.len;
    Tensor gathered = g.add_variable(name + "/" + gathered_name, partial_dtype, {total}, VarKind::kTemporary, ipu);
    std::vector<TileInterval> ivs;
    std::vector<uint64_t> at;
    uint64_t pos = 0;
    for (const Group& gr : groups) {
      ivs.push_back(TileInterval{pos, pos + gr.len, gr.tile, 0});
      at.push_back(pos);
      pos += gr.len;
    }
    g.set_mapping(gathered.var, std::move(ivs));
    for (size_t k = 0; k < groups.size(); ++k) {
      View src{from.var, static_cast<int64_t>(groups[k].s0), {groups[k].len}, {1}};
      View dst{gathered.var, static_cast<int64_t>(at[k]), {groups[k].len}, {1}};
      copy_view(g, ex, src, dst);
    }
    g.execute_exchange(ex);
    uint32_t cs = g.add_compute_set(name + "/" + level);
    std::vector<std::pair<uint32_t, ReduceSegment>> segs;
    for (size_t k = 0; k < groups.size(); ++k) {
      const TileLocation out_at = g.locate(into.var, groups[k].into_flat);
      NX_CHECK(out_at.tile == groups[k].tile, "reduce: a combined partial is not on its group's tile");
      segs.push_back({out_at.tile, ReduceSegment{g.locate(gathered.var, at[k]).local, groups[k].len, 1, out_at.local}});
    }
    std::stable_sort(segs.begin(), segs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t i = 0;
    while (i < segs.size()) {
      uint32_t tile = segs[i].first;
      std::vector<ReduceSegment> group;
      for (; i < segs.size() && segs[i].first == tile; ++i) group.push_back(segs[i].second);
      Field fin{gathered.var, tile, 0, g.var(gathered.var).share(tile)->count};
      Field fout{into.var, tile, 0, g.var(into.var).share(tile)->count};
      g.add_vertex(cs, std::make_unique<ReduceVertex>(tile, fin, partial_dtype, fout, into_dtype, op, true, fin_op,
                                                      fin_scale, std::move(group)));
    }
    g.execute(cs);
  };

  uint32_t levels = 0;
  if (nslots) {
    // Rows split over many tiles first combine their partials in groups of
    // about sqrt(n) (one tile gathering a thousand partials would take
    // longer than the tree's extra step).
    constexpr uint64_t kFanIn = 32;
    bool wide = false;
    for (uint64_t r = 0; r < rows; ++r) wide = wide || row_n[r] > kFanIn;
    if (wide) {
      std::vector<Group> groups;
      std::vector<uint32_t> next_tiles;
      std::vector<uint64_t> next_s0(rows, 0), next_n(rows, 0);
      for (uint64_t r = 0; r < rows; ++r) {
        if (row_n[r] == 0) continue;
        const uint64_t size = row_n[r] > kFanIn ? static_cast<uint64_t>(std::ceil(std::sqrt(static_cast<double>(row_n[r]))))
                                                : row_n[r];
        next_s0[r] = next_tiles.size();
        for (uint64_t k = 0; k < row_n[r]; k += size) {
          const uint64_t len = std::min(size, row_n[r] - k);
          const uint32_t tile = slot_tile[row_s0[r] + k];
          groups.push_back(Group{row_s0[r] + k, len, tile, next_tiles.size()});
          next_tiles.push_back(tile);
        }
        next_n[r] = next_tiles.size() - next_s0[r];
      }
      Tensor next = slots_on_tiles(name + "/group_partials", next_tiles);
      combine_groups(partial, groups, next, partial_dtype, ReduceFinal::kNone, 1.0, "combine_groups",
                     "group_partials_in");
      partial = next;
      row_s0 = next_s0;
      row_n = next_n;
      ++levels;
    }
    // Last stage: each split row's partials on the row's tile.
    std::vector<Group> groups;
    for (uint64_t r = 0; r < rows; ++r)
      if (row_n[r]) groups.push_back(Group{row_s0[r], row_n[r], row_tile[r], r});
    combine_groups(partial, groups, out, out_dtype, final_op, scale, "combine", "partials_in");
    ++levels;
  }
  g.record_plan(OpPlan{name, "reduce",
                       ipu, std::string(reduce_op_name(op)) + " of " + std::to_string(rows) + " row(s) of " +
                                std::to_string(row_len) + ", " + std::to_string(1 + levels) + " stage(s)",
                       static_cast<uint32_t>(g.var(out.var).tiles.size()), 0, 0});
  return out;
}

}  // namespace neurenix::ops
