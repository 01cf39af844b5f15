// Convolution: planner and lowering.
//
// The problem is a grouped product: G = groups, M = output rows (image,
// output row; each row is a full output width), N = output channels per group,
// K = input channels per group (the kernel window is never split). Every tile
// of a plan computes a block (groups x rows x output channels) of partial sums
// over its block of input channels, from the input rows its output rows need
// (with the halo) received by exchange. Weights nobody has placed are laid out
// by the plan, so they do not move at run time unless several row blocks share
// them. With K split, a second stage sums the partials as for matmuls.
#include "neurenix/ops/conv.h"

#include <algorithm>
#include <sstream>

#include "neurenix/codelets/conv.h"
#include "neurenix/codelets/matmul.h"
#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "planning.h"

namespace neurenix::ops {

std::string ConvPlan::describe() const {
  std::ostringstream os;
  os << "[" << batch << "x" << in_channels << "] -> [" << batch << "x" << out_channels << "x" << out_h << "x" << out_w
     << "]";
  if (groups > 1) os << " in " << groups << " groups";
  os << ": split groups/" << g_split << " rows/" << m_split << " out-channels/" << n_split << " in-channels/" << k_split;
  if (serial_split > 1) os << ", out-channels serially in " << serial_split << " passes";
  os << ", " << tiles_used() << " tiles, " << temp_bytes << " B temporaries/tile";
  if (!meets_memory_target) os << " (above the memory target)";
  return os.str();
}

namespace {

// Output and input channels are split in multiples of 8 (the AMP's channel
// grouping for float), so neighbouring layers exchange whole channel groups.
constexpr uint64_t kGrain = 8;

struct Dims {
  uint64_t n, c, h, w, co, cg, cog, ho, wo, khw;
};

// Image segments of a block of flattened output rows (n * Ho + ho).
struct Segment {
  uint64_t n, ho_lo, ho_hi;
  uint64_t rows() const { return ho_hi - ho_lo; }
};

std::vector<Segment> segments(Range rows, uint64_t ho) {
  std::vector<Segment> out;
  uint64_t r = rows.begin;
  while (r < rows.end) {
    uint64_t n = r / ho, lo = r % ho;
    uint64_t hi = std::min(ho, lo + (rows.end - r));
    out.push_back(Segment{n, lo, hi});
    r += hi - lo;
  }
  return out;
}

// Input rows [lo, hi) that output rows [ho_lo, ho_hi) read (clipped).
std::pair<int64_t, int64_t> input_rows(const ConvOptions& o, const Dims& d, uint64_t ho_lo, uint64_t ho_hi) {
  int64_t lo = static_cast<int64_t>(ho_lo * o.sh) - o.pad_top;
  int64_t hi = static_cast<int64_t>((ho_hi - 1) * o.sh + (o.kh - 1) * o.dh) - o.pad_top + 1;
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, static_cast<int64_t>(d.h));
  if (hi < lo) hi = lo;
  return {lo, hi};
}

}  // namespace

Tensor conv(Graph& g, const Tensor& x, const Tensor& w, const Tensor* bias, const ConvOptions& o, ConvPlan* plan_out) {
  const std::string what = "conv '" + o.name + "'";
  if (x.shape.size() != 4 || w.shape.size() != 4)
    fail(ErrorCode::kShapeMismatch, what + ": input " + shape_str(x.shape) + " and weights " +
                                        shape_str(w.shape) + " must both be 4-D (NCHW, OIHW)");
  const DeviceType in = g.var(x.var).dtype;
  const bool f8 = is_float8(in);
  if (!(is_float(in) || f8) || g.var(w.var).dtype != in)
    fail(ErrorCode::kShapeMismatch, what + ": input and weights must share a float type");
  if (f8) check_float8_operands(g, what, in, o.scales, o.ipu);
  // The bias is added to the partials: half with float8 operands.
  const DeviceType bias_dtype = f8 ? DeviceType::kFloat16 : in;
  if (o.groups == 0 || x.shape[1] % o.groups || w.shape[0] % o.groups || w.shape[1] * o.groups != x.shape[1])
    fail(ErrorCode::kShapeMismatch, what + ": " + std::to_string(o.groups) + " groups do not fit input " +
                                        shape_str(x.shape) + " and weights " + shape_str(w.shape));
  if (w.shape[2] != o.kh || w.shape[3] != o.kw)
    fail(ErrorCode::kShapeMismatch, what + ": kernel shape disagrees with the weights");
  if (!o.sh || !o.sw || !o.dh || !o.dw) fail(ErrorCode::kInvalidArgument, what + ": zero stride or dilation");
  check_memory_proportion(what, o.memory_proportion);
  Dims d;
  d.n = x.shape[0];
  d.c = x.shape[1];
  d.h = x.shape[2];
  d.w = x.shape[3];
  d.co = w.shape[0];
  d.cg = w.shape[1];
  d.cog = d.co / o.groups;
  d.khw = static_cast<uint64_t>(o.kh) * o.kw;
  const int64_t eff_h = static_cast<int64_t>(d.h) + o.pad_top + o.pad_bottom - static_cast<int64_t>((o.kh - 1) * o.dh) - 1;
  const int64_t eff_w = static_cast<int64_t>(d.w) + o.pad_left + o.pad_right - static_cast<int64_t>((o.kw - 1) * o.dw) - 1;
  if (eff_h < 0 || eff_w < 0)
    fail(ErrorCode::kShapeMismatch, what + ": the (dilated) kernel is larger than the padded input");
  d.ho = static_cast<uint64_t>(eff_h) / o.sh + 1;
  d.wo = static_cast<uint64_t>(eff_w) / o.sw + 1;
  if (bias && (bias->numel() != d.co || g.var(bias->var).dtype != bias_dtype))
    fail(ErrorCode::kShapeMismatch, what + ": bias must hold one " + device_type_name(bias_dtype) +
                                        " value per output channel");
  for (const Tensor* t : {&x, &w})
    if (g.var(t->var).ipu != o.ipu)
      fail(ErrorCode::kInvalidArgument, what + ": operand '" + g.var(t->var).name + "' is on IPU " +
                                            std::to_string(g.var(t->var).ipu) + ", not " + std::to_string(o.ipu));
  const DeviceType partials = f8 ? DeviceType::kFloat16 : in == DeviceType::kFloat32 ? DeviceType::kFloat32 : o.partials;
  const uint32_t ipu = o.ipu;
  Tensor c = g.add_variable(o.name, o.out_dtype, {d.n, d.co, d.ho, d.wo}, VarKind::kIntermediate, ipu);
  if (c.numel() == 0) return c;

  const uint64_t G = o.groups, M = d.n * d.ho, N = d.cog, K = d.cg;
  const bool w_unmapped = !g.var(w.var).mapped;
  const uint64_t eb = device_type_size(in), pb = device_type_size(partials), ob = device_type_size(o.out_dtype);
  const TargetSpec& t = g.target();
  auto evaluate = [&](SplitPlan& p) {
    const uint64_t gb = ceil_div(G, p.g_split), mb = ceil_div(M, p.m_split);
    const uint64_t nb = grain_block(N, static_cast<uint64_t>(p.serial_split) * p.n_split, kGrain);
    const uint64_t kb = grain_block(K, p.k_split, kGrain);
    // Input rows a block of mb output rows reads (with halo; whole images when
    // the block spans several).
    uint64_t rows_in;
    if (mb >= d.ho) rows_in = ceil_div(mb, d.ho) * d.h;
    else rows_in = std::min<uint64_t>(d.h, (mb - 1) * o.sh + (o.kh - 1) * o.dh + 1);
    const uint64_t in_bytes = gb * kb * rows_in * d.w * eb;
    const bool w_copy = p.m_split > 1 || !w_unmapped;
    const uint64_t w_bytes = w_copy ? gb * nb * kb * d.khw * eb : 0;
    uint64_t part = 0, recv = 0, ch_per = 0;
    if (p.k_split > 1) {
      part = gb * nb * mb * d.wo * pb;
      ch_per = ceil_div(nb, p.k_split);
      recv = p.k_split * gb * ch_per * mb * d.wo * pb;
    }
    p.temp_bytes = in_bytes + w_bytes + part + recv + (bias ? nb * eb : 0);
    const uint64_t n_tile = n_columns(N, p.n_split, p.serial_split, 0, kGrain);  // block 0 has the most
    // Weights the plan lays out are spread over the row blocks that use them.
    const uint64_t w_block = gb * kb * n_tile * d.khw * eb;
    p.kept_bytes = w_unmapped ? ceil_div(w_block, spread_count(w_block, p.m_split)) : 0;
    p.resident_bytes = gb * mb * ceil_div(n_tile, p.k_split) * d.wo * ob + p.kept_bytes;
    const uint64_t ex = t.exchange_bytes_per_cycle;
    uint64_t per = t.sync_cycles + w_bytes / ex;
    per += t.sync_cycles + gb * (amp_cycles(t, in, nb, mb * d.wo, kb * d.khw) + 4 * mb * nb * o.kh);
    if (p.k_split > 1) {
      per += t.sync_cycles + (p.k_split - 1) * ch_per * gb * mb * d.wo * pb / ex;
      per += t.sync_cycles + t.vertex_overhead_cycles + p.k_split * ch_per * gb * mb * d.wo / 2;
    }
    p.cycles = p.serial_split * per + in_bytes / ex;
  };
  ConvPlan plan;
  static_cast<SplitPlan&>(plan) =
      search_splits(G, M, N, K, g.tiles_per_ipu(), g.bytes_per_tile(), o.memory_proportion, evaluate, kGrain,
                    kGrain, occupied_bytes(g, ipu, {&x, &w}));
  plan.batch = d.n;
  plan.in_channels = d.c;
  plan.out_channels = d.co;
  plan.groups = G;
  plan.out_h = d.ho;
  plan.out_w = d.wo;
  plan.kernel = d.khw;
  warn_unless_meets_target(g, what, plan, o.memory_proportion);
  if (plan_out) *plan_out = plan;

  const uint32_t ks = plan.k_split, S = plan.serial_split;
  // Weights the plan lays out: block (groups, out channels of every pass, in
  // channels) spread over the tiles (g, m, n, k) of the first row blocks m
  // (spread_count), and gathered whole by every tile that uses it. Kept on those tiles for
  // the whole program, so the window goes where tiles keep least.
  auto weight_runs = [&](const auto& lay_, uint32_t gi, uint32_t ni, uint32_t ki) {
    std::vector<Range> runs;
    const Range gr = lay_.groups(gi), kr = lay_.k_range(ki);
    if (gr.empty() || kr.empty()) return runs;
    for (uint32_t pass = 0; pass < plan.serial_split; ++pass) {
      const Range cr = lay_.n_chunk(pass, ni);
      for (uint64_t gg = gr.begin; gg < gr.end; ++gg)
        for (uint64_t co = cr.begin; co < cr.end; ++co) {
          const uint64_t base = ((gg * d.cog + co) * d.cg) * d.khw;
          runs.push_back(Range{base + kr.begin * d.khw, base + kr.end * d.khw});
        }
    }
    return runs;
  };
  SplitLayout::KeptBytes kept;
  if (w_unmapped)
    kept = [&](uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki) -> uint64_t {
      const Range gr = part(G, plan.g_split, gi), kr = part_g(K, plan.k_split, ki, kGrain);
      if (part(M, plan.m_split, mi).empty()) return 0;
      const uint64_t cols = n_columns(N, plan.n_split, plan.serial_split, ni, kGrain);
      const uint64_t bytes = gr.size() * cols * kr.size() * d.khw * eb, holders = spread_count(bytes, plan.m_split);
      return mi < holders ? ceil_div(bytes, holders) : 0;
    };
  const SplitLayout lay(g, ipu, plan, G, M, N, K, kGrain, kept);
  if (w_unmapped) {
    std::vector<TileInterval> ivs;
    for (uint32_t gi = 0; gi < plan.g_split; ++gi)
      for (uint32_t ni = 0; ni < plan.n_split; ++ni)
        for (uint32_t ki = 0; ki < plan.k_split; ++ki) {
          const std::vector<Range> runs = weight_runs(lay, gi, ni, ki);
          uint64_t bytes = 0;
          for (const Range& r : runs) bytes += r.size() * eb;
          std::vector<uint32_t> tiles;
          for (uint32_t mi = 0; mi < spread_count(bytes, plan.m_split); ++mi) tiles.push_back(lay.tile(gi, mi, ni, ki));
          spread_runs(runs, tiles, ivs);
        }
    g.set_mapping(w.var, std::move(ivs));
  }
  // Result: the output channels of a block split among the K tiles of the
  // block (each reduces its channels), so every tile holds whole rows of whole
  // channels and the next layer reads long contiguous runs.
  {
    std::vector<TileInterval> ivs;
    lay.each_block([&](uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki, uint32_t pass) {
      const Range gr = lay.groups(gi), cr = sub(lay.n_chunk(pass, ni), ks, ki), rr = lay.rows(mi);
      if (gr.empty() || cr.empty() || rr.empty()) return;
      for (const Segment& sgm : segments(rr, d.ho))
        for (uint64_t gg = gr.begin; gg < gr.end; ++gg)
          for (uint64_t co = cr.begin; co < cr.end; ++co) {
            const uint64_t base = ((sgm.n * d.co + gg * d.cog + co) * d.ho) * d.wo;
            ivs.push_back(TileInterval{base + sgm.ho_lo * d.wo, base + sgm.ho_hi * d.wo, lay.tile(gi, mi, ni, ki), 0});
          }
    });
    g.set_mapping(c.var, std::move(ivs));
  }
  g.ensure_mapped(x.var);
  if (bias) g.ensure_mapped(bias->var);

  // One work item per block of the split, in the layout's order.
  struct Work : SplitBlock {
    std::vector<Segment> segs;
    uint64_t win_base = 0;                // element offset of this tile's windows in the window temporary
    std::vector<uint64_t> seg_win;        // per (group, segment): offset within the tile's windows
    std::vector<std::pair<int64_t, int64_t>> seg_rows;  // per segment: input rows held
  };
  std::vector<Work> work;
  for (const SplitBlock& blk : lay.blocks()) {
    Work wk{blk, segments(blk.mr, d.ho), 0, {}, {}};
    for (const Segment& sg : wk.segs) wk.seg_rows.push_back(input_rows(o, d, sg.ho_lo, sg.ho_hi));
    work.push_back(std::move(wk));
  }

  // Input windows, received once and kept for every pass.
  uint32_t ex0 = g.add_exchange(o.name + "/fetch");
  Tensor win;
  {
    PackedBlocks blocks;
    for (Work& wk : work) {
      uint64_t pos = 0;
      for (uint64_t gg = wk.gr.begin; gg < wk.gr.end; ++gg)
        for (size_t si = 0; si < wk.segs.size(); ++si) {
          wk.seg_win.push_back(pos);
          pos += wk.kr.size() * static_cast<uint64_t>(wk.seg_rows[si].second - wk.seg_rows[si].first) * d.w;
        }
      wk.win_base = blocks.add(wk.tile, pos);
    }
    win = blocks.create(g, o.name + "/input_window", in, ipu);
    RepeatedCopies windows;  // the tiles of every output-channel block read the same windows
    View src, dst;
    for (const Work& wk : work) {
      size_t idx = 0;
      for (uint64_t gg = wk.gr.begin; gg < wk.gr.end; ++gg)
        for (size_t si = 0; si < wk.segs.size(); ++si, ++idx) {
          const auto [lo, hi] = wk.seg_rows[si];
          if (hi <= lo) continue;
          const Segment& sg = wk.segs[si];
          src.set(x.var,
                  static_cast<int64_t>(((sg.n * d.c + gg * d.cg + wk.kr.begin) * d.h + static_cast<uint64_t>(lo)) * d.w),
                  {wk.kr.size(), static_cast<uint64_t>(hi - lo), d.w},
                  {static_cast<int64_t>(d.h * d.w), static_cast<int64_t>(d.w), 1});
          dst.set(win.var, static_cast<int64_t>(wk.win_base + wk.seg_win[idx]),
                  {wk.kr.size(), static_cast<uint64_t>(hi - lo), d.w},
                  {static_cast<int64_t>(static_cast<uint64_t>(hi - lo) * d.w), static_cast<int64_t>(d.w), 1});
          windows.copy(g, ex0, src, dst);
        }
    }
  }

  // Float8: the scale on every tile that convolves.
  std::vector<Field> scale_x, scale_w;
  if (f8) {
    std::vector<uint32_t> tiles;
    for (const Work& wk : work) tiles.push_back(wk.tile);
    scale_x = scalar_on_tiles(g, o.scales[0], tiles, ex0, o.name + "/scale_x", ipu);
    scale_w = scalar_on_tiles(g, o.scales[1], tiles, ex0, o.name + "/scale_w", ipu);
  }

  for (uint32_t j = 0; j < S; ++j) {
    uint32_t ex = j == 0 ? ex0 : g.add_exchange(o.name + "/fetch");
    // Weight blocks of this pass: in place, or gathered into a temporary.
    std::vector<std::vector<std::pair<VarId, LocalBlock>>> wblk(work.size());
    struct WNeed {
      size_t wi;
      uint64_t gg;
    };
    std::vector<WNeed> wneeds;
    for (size_t wi = 0; wi < work.size(); ++wi) {
      const Work& wk = work[wi];
      Range cr = lay.n_chunk(j, wk.ni);
      if (cr.empty()) continue;
      for (uint64_t gg = wk.gr.begin; gg < wk.gr.end; ++gg) {
        LocalBlock lb;
        uint64_t flat = ((gg * d.cog + cr.begin) * d.cg + wk.kr.begin) * d.khw;
        if (find_local_block(g, w.var, wk.tile, flat, cr.size(), wk.kr.size() * d.khw, d.cg * d.khw, &lb)) {
          wblk[wi].push_back({w.var, lb});
        } else {
          wblk[wi].push_back({UINT32_MAX, LocalBlock{0, 0}});
          wneeds.push_back(WNeed{wi, gg});
        }
      }
    }
    if (!wneeds.empty()) {
      PackedBlocks blocks;
      std::vector<uint64_t> at;
      for (const WNeed& wn : wneeds)
        at.push_back(blocks.add(work[wn.wi].tile, lay.n_chunk(j, work[wn.wi].ni).size() * work[wn.wi].kr.size() * d.khw));
      Tensor wt = blocks.create(g, o.name + "/weights", in, ipu);
      View src, dst;
      for (size_t i = 0; i < wneeds.size(); ++i) {
        const Work& wk = work[wneeds[i].wi];
        Range cr = lay.n_chunk(j, wk.ni);
        const uint64_t cols = wk.kr.size() * d.khw;
        src.set(w.var, static_cast<int64_t>(((wneeds[i].gg * d.cog + cr.begin) * d.cg + wk.kr.begin) * d.khw),
                {cr.size(), cols}, {static_cast<int64_t>(d.cg * d.khw), 1});
        dst.set(wt.var, static_cast<int64_t>(at[i]), {cr.size(), cols}, {static_cast<int64_t>(cols), 1});
        copy_view(g, ex, src, dst);
        auto& slot = wblk[wneeds[i].wi][wneeds[i].gg - wk.gr.begin];
        slot.first = wt.var;
        slot.second = LocalBlock{g.locate(wt.var, at[i]).local, cols};
      }
    }
    // Bias blocks for the tiles that finish outputs.
    std::vector<std::pair<VarId, uint64_t>> bias_at(work.size(), {UINT32_MAX, 0});
    if (bias) {
      PackedBlocks blocks;
      for (size_t wi = 0; wi < work.size(); ++wi) {
        Range cr = lay.n_chunk(j, work[wi].ni);
        if (cr.empty()) continue;
        bias_at[wi].second = blocks.add(work[wi].tile, work[wi].gr.size() * cr.size());
      }
      Tensor bt = blocks.create(g, o.name + "/bias", bias_dtype, ipu);
      View src, dst;
      for (size_t wi = 0; wi < work.size(); ++wi) {
        Range cr = lay.n_chunk(j, work[wi].ni);
        if (cr.empty()) continue;
        bias_at[wi].first = bt.var;
        for (uint64_t gg = work[wi].gr.begin; gg < work[wi].gr.end; ++gg) {
          src.set(bias->var, static_cast<int64_t>(gg * d.cog + cr.begin), {cr.size()}, {1});
          dst.set(bt.var, static_cast<int64_t>(bias_at[wi].second + (gg - work[wi].gr.begin) * cr.size()), {cr.size()}, {1});
          copy_view(g, ex, src, dst);
        }
        bias_at[wi].second = g.locate(bt.var, bias_at[wi].second).local;
      }
    }
    g.execute_exchange(ex);

    // Partials when K is split: per tile [group][segment][co][rows * Wo].
    Tensor partial_t;
    std::vector<uint64_t> part_base(work.size(), 0);
    if (ks > 1) {
      PackedBlocks blocks;
      for (size_t wi = 0; wi < work.size(); ++wi)
        part_base[wi] =
            blocks.add(work[wi].tile, work[wi].gr.size() * work[wi].mr.size() * lay.n_chunk(j, work[wi].ni).size() * d.wo);
      partial_t = blocks.create(g, o.name + "/partials", partials, ipu);
    }

    uint32_t cs = g.add_compute_set(o.name + "/conv");
    for (size_t wi = 0; wi < work.size(); ++wi) {
      const Work& wk = work[wi];
      Range cr = lay.n_chunk(j, wk.ni);
      if (cr.empty()) continue;
      uint64_t part_pos = part_base[wi];
      size_t widx = 0;
      for (uint64_t gg = wk.gr.begin; gg < wk.gr.end; ++gg) {
        const auto& [wvar, wlb] = wblk[wi][gg - wk.gr.begin];
        for (size_t si = 0; si < wk.segs.size(); ++si, ++widx) {
          const Segment& sg = wk.segs[si];
          const auto [lo, hi] = wk.seg_rows[si];
          ConvWindow s;
          s.cin = static_cast<uint32_t>(wk.kr.size());
          s.cout = static_cast<uint32_t>(cr.size());
          s.in_w = static_cast<uint32_t>(d.w);
          s.in_h = static_cast<uint32_t>(d.h);
          s.hi0 = static_cast<int32_t>(lo);
          s.in_rows = static_cast<uint32_t>(hi - lo);
          s.ho0 = static_cast<uint32_t>(sg.ho_lo);
          s.rows = static_cast<uint32_t>(sg.rows());
          s.out_w = static_cast<uint32_t>(d.wo);
          s.kh = o.kh;
          s.kw = o.kw;
          s.sh = o.sh;
          s.sw = o.sw;
          s.dh = o.dh;
          s.dw = o.dw;
          s.pad_top = static_cast<int32_t>(o.pad_top);
          s.pad_left = static_cast<int32_t>(o.pad_left);
          s.ldw = static_cast<uint32_t>(wlb.ld);
          // A window of only padding rows is empty: the field is then unused.
          Field fin{win.var, wk.tile, 0, 0};
          if (s.in_rows)
            fin = Field{win.var, wk.tile, g.locate(win.var, wk.win_base).local + wk.seg_win[widx],
                        s.cin * static_cast<uint64_t>(s.in_rows) * s.in_w};
          Field fw{wvar, wk.tile, wlb.local, (cr.size() - 1) * wlb.ld + wk.kr.size() * d.khw};
          Field fout;
          DeviceType out_t;
          if (ks > 1) {
            s.ld_out = static_cast<uint32_t>(sg.rows() * d.wo);
            fout = Field{partial_t.var, wk.tile, g.locate(partial_t.var, part_pos).local, cr.size() * sg.rows() * d.wo};
            part_pos += cr.size() * sg.rows() * d.wo;
            out_t = partials;
          } else {
            const uint64_t flat = ((sg.n * d.co + gg * d.cog + cr.begin) * d.ho + sg.ho_lo) * d.wo;
            const auto [ot, ol] = g.locate(c.var, flat);
            NX_CHECK(ot == wk.tile, "conv output rows are not on their tile");
            uint64_t ld = sg.rows() * d.wo;
            if (cr.size() > 1) ld = g.locate(c.var, flat + d.ho * d.wo).local - ol;
            s.ld_out = static_cast<uint32_t>(ld);
            fout = Field{c.var, wk.tile, ol, (cr.size() - 1) * ld + sg.rows() * d.wo};
            out_t = o.out_dtype;
          }
          auto v = std::make_unique<ConvVertex>(wk.tile, fin, fw, fout, s, in, partials, out_t);
          if (bias && ks == 1) {
            v->set_bias(Field{bias_at[wi].first, wk.tile, bias_at[wi].second + (gg - wk.gr.begin) * cr.size(), cr.size()},
                        bias_dtype);
          }
          if (f8) v->set_scales(scale_x[wi], scale_w[wi]);
          g.add_vertex(cs, std::move(v));
        }
      }
    }
    g.execute(cs);

    if (ks > 1) {
      // Second stage: each K tile of a block sums its share of the output
      // channels over the block's rows.
      uint32_t rex = g.add_exchange(o.name + "/reduce_exchange");
      uint32_t rcs = g.add_compute_set(o.name + "/reduce");
      struct Red {
        size_t wi;
        uint64_t gg;
        size_t seg;
        uint64_t at;
      };
      std::vector<Red> reds;
      PackedBlocks blocks;
      for (size_t wi = 0; wi < work.size(); ++wi) {
        const Work& wk = work[wi];
        const Range cr = lay.n_chunk(j, wk.ni), mine = sub(cr, ks, wk.ki);
        if (mine.empty()) continue;
        uint64_t at = blocks.total();
        for (uint64_t gg = wk.gr.begin; gg < wk.gr.end; ++gg)
          for (size_t si = 0; si < wk.segs.size(); ++si) {
            reds.push_back(Red{wi, gg, si, at});
            at += ks * mine.size() * wk.segs[si].rows() * d.wo;
          }
        blocks.add(wk.tile, at - blocks.total());
      }
      Tensor recv = blocks.create(g, o.name + "/partials_in", partials, ipu);
      View src, dst;
      for (const Red& r : reds) {
        const Work& wk = work[r.wi];
        const Range cr = lay.n_chunk(j, wk.ni), mine = sub(cr, ks, wk.ki);
        const Segment& sg = wk.segs[r.seg];
        const uint64_t cols = sg.rows() * d.wo;
        for (uint32_t kk = 0; kk < ks; ++kk) {
          const size_t src_wi = lay.position(wk.gi, wk.mi, wk.ni, kk);
          NX_CHECK(src_wi != SIZE_MAX, "conv K split produced an empty slice");
          // Offset of (group, segment) in the source tile's partials; the K
          // tiles of a block share its groups, rows and segments.
          uint64_t off = part_base[src_wi];
          for (uint64_t g2 = wk.gr.begin; g2 < r.gg; ++g2)
            for (const Segment& s2 : wk.segs) off += cr.size() * s2.rows() * d.wo;
          for (size_t s2 = 0; s2 < r.seg; ++s2) off += cr.size() * wk.segs[s2].rows() * d.wo;
          off += (mine.begin - cr.begin) * cols;
          src.set(partial_t.var, static_cast<int64_t>(off), {mine.size(), cols}, {static_cast<int64_t>(cols), 1});
          dst.set(recv.var, static_cast<int64_t>(r.at + kk * mine.size() * cols), {mine.size(), cols},
                  {static_cast<int64_t>(cols), 1});
          copy_view(g, rex, src, dst);
        }
        const uint64_t flat = ((sg.n * d.co + r.gg * d.cog + mine.begin) * d.ho + sg.ho_lo) * d.wo;
        const auto [ot, ol] = g.locate(c.var, flat);
        NX_CHECK(ot == wk.tile, "conv output channels are not on their reducing tile");
        uint64_t ld = cols;
        if (mine.size() > 1) ld = g.locate(c.var, flat + d.ho * d.wo).local - ol;
        Field fin{recv.var, wk.tile, g.locate(recv.var, r.at).local, ks * mine.size() * cols};
        Field fout{c.var, wk.tile, ol, (mine.size() - 1) * ld + cols};
        auto v = std::make_unique<SumPartialsVertex>(wk.tile, fin, fout, ks, static_cast<uint32_t>(mine.size()),
                                                     static_cast<uint32_t>(cols), static_cast<uint32_t>(ld), partials,
                                                     o.out_dtype);
        if (bias)
          v->set_bias(Field{bias_at[r.wi].first, wk.tile,
                            bias_at[r.wi].second + (r.gg - wk.gr.begin) * cr.size() + (mine.begin - cr.begin), mine.size()},
                      bias_dtype);
        g.add_vertex(rcs, std::move(v));
      }
      g.execute_exchange(rex);
      g.execute(rcs);
    }
  }
  g.record_plan(OpPlan{o.name, "conv", ipu, plan.describe(), plan.tiles_used(), plan.temp_bytes, plan.cycles});
  return c;
}

}  // namespace neurenix::ops
