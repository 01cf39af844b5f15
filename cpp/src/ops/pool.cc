// Pooling: output rows spread over tiles, input rows fetched by exchange.
#include "neurenix/ops/pool.h"

#include <algorithm>
#include <sstream>

#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "planning.h"

namespace neurenix::ops {

Tensor pool(Graph& g, const Tensor& x, const PoolOptions& o) {
  if (x.shape.size() < 2) fail(ErrorCode::kShapeMismatch, "pool '" + o.name + "': input must have at least 2 dimensions");
  const DeviceType dtype = g.var(x.var).dtype;
  if (!is_float(dtype)) fail(ErrorCode::kShapeMismatch, "pool '" + o.name + "': input must be float");
  if (g.var(x.var).ipu != o.ipu) fail(ErrorCode::kInvalidArgument, "pool '" + o.name + "': input is on another IPU");
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

  // Work units are output rows (plane, row); with fewer rows than tiles, each
  // row is also split into column chunks (of at least 8 outputs).
  const uint64_t rows = planes * ho, tiles = g.tiles_per_ipu();
  const uint64_t cpr = rows >= tiles ? 1 : std::max<uint64_t>(1, std::min(ceil_div(tiles, rows), ceil_div(wo, 8)));
  const uint64_t units = rows * cpr;
  const uint64_t per = ceil_div(units, std::min(tiles, units));
  const uint64_t used = ceil_div(units, per);
  const uint32_t first = g.reserve_tiles(ipu, static_cast<uint32_t>(used));
  auto chunk = [&](uint64_t c) { return part(wo, cpr, c); };
  {
    std::vector<TileInterval> ivs;
    for (uint64_t u = 0; u < units; ++u) {
      const uint64_t row = u / cpr;
      const Range cr = chunk(u % cpr);
      if (cr.empty()) continue;
      ivs.push_back(TileInterval{row * wo + cr.begin, row * wo + cr.end, g.window_tile(ipu, first, static_cast<uint32_t>(u / per)), 0});
    }
    g.set_mapping(out.var, std::move(ivs));
  }
  // Segments: whole planes, runs of full rows of one plane, or one column chunk.
  struct Seg {
    uint32_t tile;
    uint64_t plane0, planes, ho_lo, ho_hi, wo_lo, wo_hi;
    std::vector<int32_t> in_rows;
    int64_t wi_lo, wi_hi;
    uint64_t at;  // offset in the window temporary
  };
  std::vector<Seg> segs;
  for (uint64_t i = 0; i < used; ++i) {
    const uint32_t tile = g.window_tile(ipu, first, static_cast<uint32_t>(i));
    uint64_t u = i * per;
    const uint64_t u_end = std::min(units, u + per);
    while (u < u_end) {
      Seg sg{tile, 0, 1, 0, 0, 0, wo, {}, 0, 0, 0};
      if (cpr > 1) {
        const uint64_t row = u / cpr;
        const Range cr = chunk(u % cpr);
        sg.plane0 = row / ho;
        sg.ho_lo = row % ho;
        sg.ho_hi = sg.ho_lo + 1;
        sg.wo_lo = cr.begin;
        sg.wo_hi = cr.end;
        u += 1;
        if (cr.empty()) continue;
      } else {
        sg.plane0 = u / ho;
        sg.ho_lo = u % ho;
        if (sg.ho_lo == 0 && u_end - u >= ho) {
          sg.planes = (u_end - u) / ho;
          sg.ho_hi = ho;
        } else {
          sg.ho_hi = std::min(ho, sg.ho_lo + (u_end - u));
        }
        u += sg.planes * (sg.ho_hi - sg.ho_lo);
      }
      for (uint64_t hh = sg.ho_lo; hh < sg.ho_hi; ++hh)
        for (uint32_t a = 0; a < o.kh; ++a) {
          const int64_t hi = static_cast<int64_t>(hh * o.sh + a * o.dh) - o.pad_top;
          if (hi >= 0 && hi < static_cast<int64_t>(h)) sg.in_rows.push_back(static_cast<int32_t>(hi));
        }
      std::sort(sg.in_rows.begin(), sg.in_rows.end());
      sg.in_rows.erase(std::unique(sg.in_rows.begin(), sg.in_rows.end()), sg.in_rows.end());
      sg.wi_lo = std::max<int64_t>(0, static_cast<int64_t>(sg.wo_lo * o.sw) - o.pad_left);
      sg.wi_hi = std::min<int64_t>(static_cast<int64_t>(w),
                                   static_cast<int64_t>((sg.wo_hi - 1) * o.sw + (o.kw - 1) * o.dw) - o.pad_left + 1);
      if (sg.wi_hi < sg.wi_lo) sg.wi_hi = sg.wi_lo;
      segs.push_back(std::move(sg));
    }
  }
  PackedBlocks windows;
  for (Seg& sg : segs) sg.at = windows.add(sg.tile, sg.planes * sg.in_rows.size() * static_cast<uint64_t>(sg.wi_hi - sg.wi_lo));
  Tensor win = windows.create(g, o.name + "/input_window", dtype, ipu);
  uint32_t ex = g.add_exchange(o.name + "/fetch");
  for (const Seg& sg : segs) {
    const uint64_t cols = static_cast<uint64_t>(sg.wi_hi - sg.wi_lo), nrows = sg.in_rows.size();
    if (!cols || !nrows) continue;
    // One copy per run of consecutive input rows.
    size_t i = 0;
    while (i < nrows) {
      size_t j = i + 1;
      while (j < nrows && sg.in_rows[j] == sg.in_rows[j - 1] + 1) ++j;
      View src{x.var, static_cast<int64_t>((sg.plane0 * h + static_cast<uint64_t>(sg.in_rows[i])) * w + sg.wi_lo),
               {sg.planes, j - i, cols}, {static_cast<int64_t>(h * w), static_cast<int64_t>(w), 1}};
      View dst{win.var, static_cast<int64_t>(sg.at + i * cols), {sg.planes, j - i, cols},
               {static_cast<int64_t>(nrows * cols), static_cast<int64_t>(cols), 1}};
      copy_view(g, ex, src, dst);
      i = j;
    }
  }
  g.execute_exchange(ex);
  uint32_t cs = g.add_compute_set(o.name);
  for (const Seg& sg : segs) {
    PoolWindow pw;
    pw.planes = static_cast<uint32_t>(sg.planes);
    pw.in_w = static_cast<uint32_t>(w);
    pw.in_h = static_cast<uint32_t>(h);
    pw.wi0 = static_cast<int32_t>(sg.wi_lo);
    pw.in_cols = static_cast<uint32_t>(sg.wi_hi - sg.wi_lo);
    pw.rows = sg.in_rows;
    pw.ho0 = static_cast<uint32_t>(sg.ho_lo);
    pw.out_rows = static_cast<uint32_t>(sg.ho_hi - sg.ho_lo);
    pw.wo0 = static_cast<uint32_t>(sg.wo_lo);
    pw.out_cols = static_cast<uint32_t>(sg.wo_hi - sg.wo_lo);
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
    // Locally, a tile's output rows (and whole planes) are back to back.
    pw.ld_out_row = static_cast<uint32_t>(wo);
    pw.ld_out_plane = static_cast<uint32_t>(ho * wo);
    const auto [out_tile, out_local] = g.locate(out.var, (sg.plane0 * ho + sg.ho_lo) * wo + sg.wo_lo);
    NX_CHECK(out_tile == sg.tile, "pool output rows are not on their tile");
    const uint64_t win_count = sg.planes * sg.in_rows.size() * pw.in_cols;
    Field fin{win.var, sg.tile, 0, 0};
    if (win_count) fin = Field{win.var, sg.tile, g.locate(win.var, sg.at).local, win_count};
    const uint64_t out_count =
        (sg.planes - 1) * pw.ld_out_plane + (pw.out_rows - 1) * static_cast<uint64_t>(pw.ld_out_row) + pw.out_cols;
    Field fout{out.var, sg.tile, out_local, out_count};
    g.add_vertex(cs, std::make_unique<PoolVertex>(sg.tile, fin, fout, pw, o.mode, dtype));
  }
  g.execute(cs);
  std::ostringstream desc;
  desc << (o.mode == PoolMode::kMax ? "max" : "average") << " " << o.kh << "x" << o.kw << " window, stride " << o.sh << "x"
       << o.sw << ", " << rows << " output rows";
  if (cpr > 1) desc << " in " << cpr << " column chunks";
  desc << " over " << used << " tiles";
  g.record_plan(OpPlan{o.name, "pool", ipu, desc.str(), static_cast<uint32_t>(used), 0, 0});
  return out;
}

}  // namespace neurenix::ops
