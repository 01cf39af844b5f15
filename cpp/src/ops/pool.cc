// Pooling and run-time gathers.
#include <algorithm>
#include <sstream>

#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "neurenix/ops.h"
#include "planning.h"

namespace neurenix::ops {

Tensor pool(Graph& g, const Tensor& x, const PoolOptions& o) {
  if (x.shape.size() < 2) fail(ErrorCode::kShapeMismatch, "pool '" + o.name + "': input must have at least 2 dimensions");
  const DType dtype = g.var(x.var).dtype;
  if (!is_float(dtype)) fail(ErrorCode::kShapeMismatch, "pool '" + o.name + "': input must be float");
  const size_t r = x.shape.size();
  const uint64_t h = x.shape[r - 2], w = x.shape[r - 1];
  uint64_t planes = 1;
  for (size_t i = 0; i + 2 < r; ++i) planes *= x.shape[i];
  const uint64_t ho = o.out_h, wo = o.out_w;
  Shape out_shape(x.shape.begin(), x.shape.end() - 2);
  out_shape.push_back(ho);
  out_shape.push_back(wo);
  const uint32_t ipu = o.ipu;
  Tensor out = g.add_variable(o.name, dtype, out_shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  g.ensure_mapped(x.var);

  // Output rows (plane, row) spread evenly, whole rows per tile.
  const uint64_t rows = planes * ho;
  const uint64_t ntiles = std::min<uint64_t>(g.tiles_per_ipu(), rows);
  const uint64_t per = ceil_div(rows, ntiles);
  const uint64_t used = ceil_div(rows, per);
  const uint32_t first = g.reserve_tiles(ipu, static_cast<uint32_t>(used));
  {
    std::vector<TileInterval> ivs;
    for (uint64_t i = 0; i < used; ++i) {
      uint64_t a = i * per, b = std::min(rows, a + per);
      ivs.push_back(TileInterval{a * wo, b * wo, g.window_tile(ipu, first, static_cast<uint32_t>(i)), 0});
    }
    g.set_mapping(out.var, std::move(ivs));
  }
  // Per tile: runs of rows within one plane, or whole planes back to back.
  struct Seg {
    uint32_t tile;
    uint64_t plane0, planes, ho_lo, ho_hi;
    int64_t hi_lo, hi_hi;
    uint64_t at;  // offset in the window temporary
  };
  std::vector<Seg> segs;
  uint64_t total = 0;
  std::vector<TileInterval> ivs;
  for (uint64_t i = 0; i < used; ++i) {
    const uint32_t tile = g.window_tile(ipu, first, static_cast<uint32_t>(i));
    uint64_t a = i * per, b = std::min(rows, a + per);
    const uint64_t start = total;
    while (a < b) {
      Seg s{tile, a / ho, 1, a % ho, 0, 0, 0, total};
      if (s.ho_lo == 0 && b - a >= ho) {
        s.planes = (b - a) / ho;
        s.ho_hi = ho;
      } else {
        s.ho_hi = std::min(ho, s.ho_lo + (b - a));
      }
      int64_t lo = static_cast<int64_t>(s.ho_lo * o.sh) - o.pad_top;
      int64_t hi = static_cast<int64_t>((s.ho_hi - 1) * o.sh + (o.kh - 1) * o.dh) - o.pad_top + 1;
      s.hi_lo = std::max<int64_t>(0, lo);
      s.hi_hi = std::min<int64_t>(static_cast<int64_t>(h), hi);
      if (s.hi_hi < s.hi_lo) s.hi_hi = s.hi_lo;
      total += s.planes * static_cast<uint64_t>(s.hi_hi - s.hi_lo) * w;
      a += s.planes * (s.ho_hi - s.ho_lo);
      segs.push_back(s);
    }
    if (total > start) ivs.push_back(TileInterval{start, total, tile, 0});
  }
  Tensor win = g.add_variable(o.name + "/input_window", dtype, {total}, VarKind::kTemporary, ipu);
  g.set_mapping(win.var, std::move(ivs));
  uint32_t ex = g.add_exchange(o.name + "/fetch");
  for (const Seg& s : segs) {
    const uint64_t nrows = static_cast<uint64_t>(s.hi_hi - s.hi_lo);
    if (!nrows) continue;
    View src{x.var, static_cast<int64_t>((s.plane0 * h + static_cast<uint64_t>(s.hi_lo)) * w), {s.planes, nrows, w},
             {static_cast<int64_t>(h * w), static_cast<int64_t>(w), 1}};
    View dst{win.var, static_cast<int64_t>(s.at), {s.planes, nrows, w},
             {static_cast<int64_t>(nrows * w), static_cast<int64_t>(w), 1}};
    copy_view(g, ex, src, dst);
  }
  g.execute_exchange(ex);
  uint32_t cs = g.add_compute_set(o.name);
  for (const Seg& s : segs) {
    PoolWindow pw;
    pw.planes = static_cast<uint32_t>(s.planes);
    pw.in_w = static_cast<uint32_t>(w);
    pw.in_h = static_cast<uint32_t>(h);
    pw.hi0 = static_cast<int32_t>(s.hi_lo);
    pw.in_rows = static_cast<uint32_t>(s.hi_hi - s.hi_lo);
    pw.ho0 = static_cast<uint32_t>(s.ho_lo);
    pw.rows = static_cast<uint32_t>(s.ho_hi - s.ho_lo);
    pw.out_w = static_cast<uint32_t>(wo);
    pw.kh = o.kh;
    pw.kw = o.kw;
    pw.sh = o.sh;
    pw.sw = o.sw;
    pw.dh = o.dh;
    pw.dw = o.dw;
    pw.pad_top = static_cast<int32_t>(o.pad_top);
    pw.pad_left = static_cast<int32_t>(o.pad_left);
    pw.pad_bottom = o.pad_bottom;
    pw.pad_right = o.pad_right;
    pw.ld_out = static_cast<uint32_t>(ho * wo);
    uint32_t t;
    uint64_t out_local, win_local = 0;
    size_t hint = 0;
    g.locate(out.var, (s.plane0 * ho + s.ho_lo) * wo, &t, &out_local, &hint);
    NX_CHECK(t == s.tile, "pool output rows are not on their tile");
    if (s.planes > 1) {
      // Whole planes: consecutive in local memory.
      pw.ld_out = static_cast<uint32_t>(ho * wo);
    }
    Field fin{win.var, s.tile, 0, 0};
    if (pw.in_rows) {
      hint = 0;
      g.locate(win.var, s.at, &t, &win_local, &hint);
      fin = Field{win.var, s.tile, win_local, s.planes * static_cast<uint64_t>(pw.in_rows) * w};
    }
    Field fout{out.var, s.tile, out_local, (s.planes - 1) * pw.ld_out + static_cast<uint64_t>(pw.rows) * wo};
    g.add_vertex(cs, std::make_unique<PoolVertex>(s.tile, fin, fout, pw, o.mode, dtype));
  }
  g.execute(cs);
  std::ostringstream desc;
  desc << (o.mode == PoolMode::kMax ? "max" : "average") << " " << o.kh << "x" << o.kw << " window, stride " << o.sh << "x"
       << o.sw << ", " << rows << " output rows over " << used << " tiles";
  g.record_op(OpRecord{o.name, "pool", ipu, desc.str(), static_cast<uint32_t>(used), 0, 0});
  return out;
}

Tensor gather_rows(Graph& g, const Tensor& table, const Tensor& indices, uint32_t ipu, const std::string& name) {
  if (table.shape.size() != 2) fail(ErrorCode::kShapeMismatch, "gather '" + name + "': table must be 2-D");
  if (g.var(indices.var).dtype != DType::kInt32)
    fail(ErrorCode::kShapeMismatch, "gather '" + name + "': indices must be int32");
  const DType dtype = g.var(table.var).dtype;
  const uint64_t v = table.shape[0], d = table.shape[1], n = indices.numel();
  Tensor out = g.add_variable(name, dtype, {n, d}, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  const uint64_t ntiles = std::min<uint64_t>(g.tiles_per_ipu(), d);
  const uint64_t cols = ceil_div(d, ntiles);
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
  g.set_mapping(out.var, column_mapping(n));
  g.ensure_mapped(indices.var);
  // Every table tile receives all the indices.
  Tensor idx = g.add_variable(name + "/indices", DType::kInt32, {used * n}, VarKind::kTemporary, ipu);
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
    Field fo{out.var, tile, 0, n * c};
    g.add_vertex(cs, std::make_unique<GatherVertex>(tile, ft, fi, fo, static_cast<uint32_t>(v), static_cast<uint32_t>(c),
                                                    static_cast<uint32_t>(c), dtype));
  }
  g.execute(cs);
  g.record_op(OpRecord{name, "gather", ipu,
                       std::to_string(n) + " rows of a [" + std::to_string(v) + " x " + std::to_string(d) +
                           "] table, columns over " + std::to_string(used) + " tiles",
                       static_cast<uint32_t>(used), 0, 0});
  return out;
}

}  // namespace neurenix::ops
