// Matrix multiplication: planner and lowering.
//
// The planner splits [G, M, K] x [G, K, N] over tiles along all four
// dimensions (G, M, N in parallel, K in parallel with a second reduction
// stage) and may split N serially, processing it in several passes that each
// need fewer temporaries. Among the plans whose temporaries fit the memory
// target it takes the one with the fewest estimated cycles.
#include "neurenix/ops/matmul.h"

#include <algorithm>
#include <sstream>

#include "neurenix/codelets/matmul.h"
#include "neurenix/error.h"
#include "neurenix/exchange.h"
#include "neurenix/ops/map.h"
#include "planning.h"

namespace neurenix::ops {
namespace {

// N and K are split in multiples of 16: the AMP's channel grouping, and long
// enough runs for exchange to move in few descriptors.
constexpr uint64_t kGrain = 16;

void evaluate(const TargetSpec& t, const MatMulProblem& p, SplitPlan& plan) {
  const uint64_t eb = device_type_size(p.in_dtype), pb = device_type_size(p.partials);
  const uint64_t gb = ceil_div(p.groups, plan.g_split), mb = ceil_div(p.m, plan.m_split);
  const uint64_t nb = grain_block(p.n, static_cast<uint64_t>(plan.serial_split) * plan.n_split, kGrain);
  const uint64_t kb = grain_block(p.k, plan.k_split, kGrain);
  const bool a_copy = plan.n_split > 1 || !p.a_unmapped;
  const bool b_copy = plan.m_split > 1 || !p.b_unmapped;
  const uint64_t a_bytes = a_copy ? gb * mb * kb * eb : 0;
  const uint64_t b_bytes = b_copy ? gb * kb * nb * eb : 0;
  uint64_t part_bytes = 0, recv_bytes = 0, rows_per = 0;
  if (plan.k_split > 1) {
    part_bytes = gb * mb * nb * pb;
    rows_per = ceil_div(mb, plan.k_split);
    recv_bytes = plan.k_split * rows_per * gb * nb * pb;
  }
  plan.temp_bytes = a_bytes + b_bytes + part_bytes + recv_bytes;
  // Operands this plan lays out itself, and the result, stay on the tiles.
  const uint64_t ob = device_type_size(p.out_dtype);
  const uint64_t n_per_tile = n_columns(p.n, plan.n_split, plan.serial_split, 0, kGrain);  // block 0 has the most
  // Operands the plan lays out are spread over the tiles that use them: A's
  // blocks over the N blocks (those with columns), B's over the M blocks.
  const uint64_t n_blocks = std::min<uint64_t>(plan.n_split, ceil_div(p.n, nb));
  const uint64_t a_block = gb * mb * kb * eb, b_block = gb * kb * n_per_tile * eb;
  plan.kept_bytes = (p.a_unmapped ? ceil_div(a_block, spread_count(a_block, n_blocks)) : 0) +
                    (p.b_unmapped ? ceil_div(b_block, spread_count(b_block, plan.m_split)) : 0);
  plan.resident_bytes = gb * ceil_div(mb, plan.k_split) * n_per_tile * ob + plan.kept_bytes;
  const uint64_t ex = t.exchange_bytes_per_cycle;
  uint64_t per_chunk = t.sync_cycles + b_bytes / ex;  // operand exchange
  per_chunk += t.sync_cycles + gb * amp_cycles(t, p.in_dtype, mb, nb, kb);
  if (plan.k_split > 1) {
    per_chunk += t.sync_cycles + (plan.k_split - 1) * rows_per * gb * nb * pb / ex;
    per_chunk += t.sync_cycles + t.vertex_overhead_cycles + plan.k_split * rows_per * gb * nb / 2;
  }
  plan.cycles = plan.serial_split * per_chunk + a_bytes / ex;
}

}  // namespace

std::string MatMulPlan::describe() const {
  std::ostringstream os;
  os << "[" << groups << "x" << m << "x" << k << "] x [" << groups << "x" << k << "x" << n << "]: split G/" << g_split
     << " M/" << m_split << " N/" << n_split << " K/" << k_split;
  if (serial_split > 1) os << ", N serially in " << serial_split << " passes";
  os << ", " << tiles_used() << " tiles, " << temp_bytes << " B temporaries/tile";
  if (!meets_memory_target) os << " (above the memory target)";
  return os.str();
}

MatMulPlan plan_matmul(const TargetSpec& target, uint32_t tiles, uint64_t bytes_per_tile, const MatMulProblem& p,
                       double proportion, uint64_t occupied) {
  MatMulPlan plan;
  static_cast<SplitPlan&>(plan) = search_splits(p.groups, p.m, p.n, p.k, tiles, bytes_per_tile, proportion,
                                                [&](SplitPlan& s) { evaluate(target, p, s); }, kGrain, kGrain, occupied);
  plan.groups = p.groups;
  plan.m = p.m;
  plan.n = p.n;
  plan.k = p.k;
  return plan;
}

namespace {

// Appends the intervals of a row-major block of a [G, R, C] variable.
void block_intervals(std::vector<TileInterval>& out, uint64_t rows_total, uint64_t cols_total, Range gr, Range rr,
                     Range cr, uint32_t tile) {
  if (gr.empty() || rr.empty() || cr.empty()) return;
  for (uint64_t g = gr.begin; g < gr.end; ++g)
    for (uint64_t r = rr.begin; r < rr.end; ++r) {
      uint64_t base = (g * rows_total + r) * cols_total;
      out.push_back(TileInterval{base + cr.begin, base + cr.end, tile, 0});
    }
}

// A per-tile operand block: either in place or in a temporary.
struct OperandBlock {
  VarId var;
  uint64_t local;  // of group 0
  uint64_t group_stride;
  uint64_t ld;
  uint64_t count;  // field extent per group
};

}  // namespace

Tensor matmul(Graph& g, const Tensor& a, const Tensor& b, const MatMulOptions& o, MatMulPlan* plan_out) {
  const std::string what = "matmul '" + o.name + "'";
  if (a.shape.size() != 3 || b.shape.size() != 3 || a.shape[0] != b.shape[0] || a.shape[2] != b.shape[1])
    fail(ErrorCode::kShapeMismatch, what + ": shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) +
                                        " are not [G, M, K] x [G, K, N]");
  const DeviceType in = g.var(a.var).dtype;
  const bool f8 = is_float8(in);
  if (g.var(b.var).dtype != in || !(is_float(in) || f8))
    fail(ErrorCode::kShapeMismatch, what + ": operands must share a float type, got " +
                                        std::string(device_type_name(in)) + " and " + device_type_name(g.var(b.var).dtype));
  if (f8) check_float8_operands(g, what, in, o.scales, o.ipu);
  check_memory_proportion(what, o.memory_proportion);
  for (const Tensor* t : {&a, &b})
    if (g.var(t->var).ipu != o.ipu)
      fail(ErrorCode::kInvalidArgument, what + ": operand '" + g.var(t->var).name + "' is on IPU " +
                                            std::to_string(g.var(t->var).ipu) + ", not " + std::to_string(o.ipu));
  const DeviceType partials = in == DeviceType::kFloat32 ? DeviceType::kFloat32 : f8 ? DeviceType::kFloat16 : o.partials;
  const uint64_t G = a.shape[0], M = a.shape[1], K = a.shape[2], N = b.shape[2];
  const uint32_t ipu = o.ipu;
  Tensor c = g.add_variable(o.name, o.out_dtype, {G, M, N}, VarKind::kIntermediate, ipu);
  if (G * M * N == 0) return c;
  if (K == 0) return fill(g, o.out_dtype, {G, M, N}, 0.0, ipu, o.name);
  MatMulProblem prob{G, M, N, K, in, partials, o.out_dtype, !g.var(a.var).mapped, !g.var(b.var).mapped};
  MatMulPlan plan = plan_matmul(g.target(), g.tiles_per_ipu(), g.bytes_per_tile(), prob, o.memory_proportion,
                                occupied_bytes(g, o.ipu, {&a, &b}));
  warn_unless_meets_target(g, what, plan, o.memory_proportion);
  if (plan_out) *plan_out = plan;

  const uint32_t ks = plan.k_split, S = plan.serial_split;
  // Operands nobody has placed yet are kept where the plan puts them: A's
  // block (g, m, k) spread over the tiles of the first N blocks that have
  // columns, B's block (g, k, n over every pass) over those of the first M
  // blocks (spread_count); every tile that uses a block gathers it whole. The window goes
  // where tiles keep least.
  const bool a_lay = !g.var(a.var).mapped, b_lay = !g.var(b.var).mapped && b.var != a.var;
  const uint64_t eb = device_type_size(in);
  auto n_cols = [&](uint32_t ni) { return n_columns(N, plan.n_split, S, ni, kGrain); };
  std::vector<uint32_t> a_holders;  // N blocks with columns
  for (uint32_t ni = 0; ni < plan.n_split; ++ni)
    if (n_cols(ni)) a_holders.push_back(ni);
  SplitLayout::KeptBytes kept;
  if (a_lay || b_lay)
    kept = [&](uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki) -> uint64_t {
      const uint64_t gr = part(G, plan.g_split, gi).size(), mr = part(M, plan.m_split, mi).size();
      const uint64_t kr = part_g(K, plan.k_split, ki, kGrain).size(), nc = n_cols(ni);
      uint64_t bytes = 0;
      if (a_lay) {
        const uint64_t block = gr * mr * kr * eb, holders = spread_count(block, a_holders.size());
        for (uint64_t h = 0; h < holders; ++h)
          if (a_holders[h] == ni) bytes += ceil_div(block, holders);
      }
      if (b_lay) {
        const uint64_t block = gr * kr * nc * eb, holders = spread_count(block, plan.m_split);
        if (mi < holders) bytes += ceil_div(block, holders);
      }
      return bytes;
    };
  const SplitLayout lay(g, ipu, plan, G, M, N, K, kGrain, kept);

  // Lay out operands nobody has placed yet, and the result, whose rows each K
  // block of a tile group reduces a share of.
  auto row_runs = [](std::vector<Range>& runs, uint64_t rows_total, uint64_t cols_total, Range gr, Range rr, Range cr) {
    if (gr.empty() || rr.empty() || cr.empty()) return;
    for (uint64_t gg = gr.begin; gg < gr.end; ++gg)
      for (uint64_t r = rr.begin; r < rr.end; ++r) {
        const uint64_t base = (gg * rows_total + r) * cols_total;
        runs.push_back(Range{base + cr.begin, base + cr.end});
      }
  };
  auto run_bytes = [&](const std::vector<Range>& runs) {
    uint64_t bytes = 0;
    for (const Range& r : runs) bytes += r.size() * eb;
    return bytes;
  };
  if (a_lay) {
    std::vector<TileInterval> ivs;
    for (uint32_t gi = 0; gi < plan.g_split; ++gi)
      for (uint32_t mi = 0; mi < plan.m_split; ++mi)
        for (uint32_t ki = 0; ki < plan.k_split; ++ki) {
          std::vector<Range> runs;
          row_runs(runs, M, K, lay.groups(gi), lay.rows(mi), lay.k_range(ki));
          std::vector<uint32_t> tiles;
          for (uint64_t h = 0; h < spread_count(run_bytes(runs), a_holders.size()); ++h)
            tiles.push_back(lay.tile(gi, mi, a_holders[h], ki));
          spread_runs(runs, tiles, ivs);
        }
    g.set_mapping(a.var, std::move(ivs));
  }
  if (b_lay) {
    std::vector<TileInterval> ivs;
    for (uint32_t gi = 0; gi < plan.g_split; ++gi)
      for (uint32_t ni = 0; ni < plan.n_split; ++ni)
        for (uint32_t ki = 0; ki < plan.k_split; ++ki) {
          std::vector<Range> runs;
          for (uint32_t pass = 0; pass < S; ++pass)
            row_runs(runs, K, N, lay.groups(gi), lay.k_range(ki), lay.n_chunk(pass, ni));
          std::vector<uint32_t> tiles;
          for (uint32_t mi = 0; mi < spread_count(run_bytes(runs), plan.m_split); ++mi)
            tiles.push_back(lay.tile(gi, mi, ni, ki));
          spread_runs(runs, tiles, ivs);
        }
    g.set_mapping(b.var, std::move(ivs));
  }
  {
    std::vector<TileInterval> ivs;
    lay.each_block([&](uint32_t gi, uint32_t mi, uint32_t ni, uint32_t ki, uint32_t pass) {
      block_intervals(ivs, M, N, lay.groups(gi), sub(lay.rows(mi), ks, ki), lay.n_chunk(pass, ni), lay.tile(gi, mi, ni, ki));
    });
    g.set_mapping(c.var, std::move(ivs));
  }

  // Finds the operand block on `tile` in place, or arranges a copy into `tmp`.
  // `pending` collects (tile, groups) needing copies; temporaries are built
  // after all tiles are known.
  struct Need {
    uint32_t tile;
    Range gr, rr, cr;
  };
  auto resolve = [&](const Tensor& t, uint64_t rows_total, uint64_t cols_total, uint32_t tile, Range gr, Range rr,
                     Range cr, OperandBlock* blk) -> bool {
    LocalBlock first_lb{};
    uint64_t gstride = 0, ld = 0;
    for (uint64_t gg = gr.begin; gg < gr.end; ++gg) {
      LocalBlock lb;
      if (!find_local_block(g, t.var, tile, (gg * rows_total + rr.begin) * cols_total + cr.begin, rr.size(), cr.size(),
                            cols_total, &lb))
        return false;
      if (gg == gr.begin) {
        first_lb = lb;
        ld = lb.ld;
      } else {
        if (lb.ld != ld) return false;
        uint64_t s = lb.local - first_lb.local;
        if (gg == gr.begin + 1) gstride = s;
        else if (s != gstride * (gg - gr.begin)) return false;
      }
    }
    blk->var = t.var;
    blk->local = first_lb.local;
    blk->group_stride = gstride;
    blk->ld = ld;
    blk->count = (rr.size() - 1) * ld + cr.size();
    return true;
  };
  // Builds one temporary holding packed copies of the needed blocks.
  auto gather = [&](const Tensor& t, uint64_t rows_total, uint64_t cols_total, const std::vector<Need>& needs,
                    uint32_t ex, const std::string& name, std::vector<OperandBlock>& out) {
    PackedBlocks blocks;
    for (const Need& nd : needs) blocks.add(nd.tile, nd.gr.size() * nd.rr.size() * nd.cr.size());
    if (needs.empty()) return;
    Tensor tmp = blocks.create(g, name, in, ipu);
    RepeatedCopies blocks_alike;  // the tiles of every block of the other operand receive the same block
    uint64_t pos = 0;
    View src, dst;
    for (const Need& nd : needs) {
      uint64_t per_group = nd.rr.size() * nd.cr.size();
      src.set(t.var, static_cast<int64_t>((nd.gr.begin * rows_total + nd.rr.begin) * cols_total + nd.cr.begin),
              {nd.gr.size(), nd.rr.size(), nd.cr.size()},
              {static_cast<int64_t>(rows_total * cols_total), static_cast<int64_t>(cols_total), 1});
      dst.set(tmp.var, static_cast<int64_t>(pos), {nd.gr.size(), nd.rr.size(), nd.cr.size()},
              {static_cast<int64_t>(per_group), static_cast<int64_t>(nd.cr.size()), 1});
      blocks_alike.copy(g, ex, src, dst);
      out.push_back(OperandBlock{tmp.var, g.locate(tmp.var, pos).local, per_group, nd.cr.size(), per_group});
      pos += nd.gr.size() * per_group;
    }
  };

  // Operand A blocks are the same for every serial pass.
  struct TileWork : SplitBlock {
    OperandBlock a;
  };
  std::vector<TileWork> work;
  uint32_t ex0 = g.add_exchange(o.name + "/fetch");
  {
    std::vector<Need> a_needs;
    std::vector<size_t> a_need_idx;
    for (const SplitBlock& blk : lay.blocks()) {
      TileWork w{blk, {}};
      if (!resolve(a, M, K, w.tile, w.gr, w.mr, w.kr, &w.a)) {
        a_needs.push_back(Need{w.tile, w.gr, w.mr, w.kr});
        a_need_idx.push_back(work.size());
      }
      work.push_back(w);
    }
    std::vector<OperandBlock> blocks;
    gather(a, M, K, a_needs, ex0, o.name + "/A", blocks);
    for (size_t i = 0; i < a_need_idx.size(); ++i) work[a_need_idx[i]].a = blocks[i];
  }
  // Float8: the scale on every tile that multiplies.
  std::vector<Field> scale_a, scale_b;
  if (f8) {
    std::vector<uint32_t> tiles;
    for (const TileWork& w : work) tiles.push_back(w.tile);
    scale_a = scalar_on_tiles(g, o.scales[0], tiles, ex0, o.name + "/scale_a", ipu);
    scale_b = scalar_on_tiles(g, o.scales[1], tiles, ex0, o.name + "/scale_b", ipu);
  }

  const DeviceType stage_out = ks > 1 ? partials : o.out_dtype;
  for (uint32_t j = 0; j < S; ++j) {
    uint32_t ex = j == 0 ? ex0 : g.add_exchange(o.name + "/fetch");
    // B blocks of this pass.
    std::vector<OperandBlock> b_blocks(work.size());
    std::vector<Need> b_needs;
    std::vector<size_t> b_need_idx;
    for (size_t wi = 0; wi < work.size(); ++wi) {
      const TileWork& w = work[wi];
      Range nr = lay.n_chunk(j, w.ni);
      if (nr.empty()) continue;
      if (!resolve(b, K, N, w.tile, w.gr, w.kr, nr, &b_blocks[wi])) {
        b_needs.push_back(Need{w.tile, w.gr, w.kr, nr});
        b_need_idx.push_back(wi);
      }
    }
    {
      std::vector<OperandBlock> blocks;
      gather(b, K, N, b_needs, ex, o.name + "/B", blocks);
      for (size_t i = 0; i < b_need_idx.size(); ++i) b_blocks[b_need_idx[i]] = blocks[i];
    }
    g.execute_exchange(ex);

    // Partials, when K is split: one packed [groups, rows, cols] block per tile.
    Tensor partial_t;
    std::vector<uint64_t> partial_base(work.size(), 0);
    if (ks > 1) {
      PackedBlocks blocks;
      for (size_t wi = 0; wi < work.size(); ++wi) {
        const TileWork& w = work[wi];
        partial_base[wi] = blocks.add(w.tile, w.gr.size() * w.mr.size() * lay.n_chunk(j, w.ni).size());
      }
      partial_t = blocks.create(g, o.name + "/partials", partials, ipu);
    }

    uint32_t cs = g.add_compute_set(o.name + "/matmul");
    for (size_t wi = 0; wi < work.size(); ++wi) {
      const TileWork& w = work[wi];
      Range nr = lay.n_chunk(j, w.ni);
      if (nr.empty()) continue;
      const OperandBlock& ab = w.a;
      const OperandBlock& bb = b_blocks[wi];
      for (uint64_t gg = w.gr.begin; gg < w.gr.end; ++gg) {
        const uint64_t go = gg - w.gr.begin;
        Field fa{ab.var, w.tile, ab.local + go * ab.group_stride, ab.count};
        Field fb{bb.var, w.tile, bb.local + go * bb.group_stride, bb.count};
        Field fc;
        uint64_t ldc;
        if (ks > 1) {
          const uint64_t local = g.locate(partial_t.var, partial_base[wi] + go * w.mr.size() * nr.size()).local;
          fc = Field{partial_t.var, w.tile, local, w.mr.size() * nr.size()};
          ldc = nr.size();
        } else {
          LocalBlock lb;
          bool ok = find_local_block(g, c.var, w.tile, (gg * M + w.mr.begin) * N + nr.begin, w.mr.size(), nr.size(), N, &lb);
          NX_CHECK(ok, "matmul result block is not on its tile");
          fc = Field{c.var, w.tile, lb.local, (w.mr.size() - 1) * lb.ld + nr.size()};
          ldc = lb.ld;
        }
        MatMulBlock blk{static_cast<uint32_t>(w.mr.size()), static_cast<uint32_t>(nr.size()),
                        static_cast<uint32_t>(w.kr.size()), static_cast<uint32_t>(ab.ld), static_cast<uint32_t>(bb.ld),
                        static_cast<uint32_t>(ldc)};
        auto v = std::make_unique<MatMulVertex>(w.tile, fa, fb, fc, blk, in, partials, stage_out);
        if (f8) v->set_scales(scale_a[wi], scale_b[wi]);
        g.add_vertex(cs, std::move(v));
      }
    }
    g.execute(cs);

    if (ks > 1) {
      // Second stage: the tiles of each (g, m, n) block each own a slice of its
      // rows; they gather that slice of every partial and sum it.
      uint32_t rex = g.add_exchange(o.name + "/reduce_exchange");
      uint32_t rcs = g.add_compute_set(o.name + "/reduce");
      struct Red {
        size_t wi;
        Range rows;  // absolute M rows
      };
      std::vector<Red> reds;
      PackedBlocks blocks;
      std::vector<uint64_t> base;
      for (size_t wi = 0; wi < work.size(); ++wi) {
        const TileWork& w = work[wi];
        Range nr = lay.n_chunk(j, w.ni);
        Range rows = sub(w.mr, ks, w.ki);
        if (nr.empty() || rows.empty()) continue;
        reds.push_back(Red{wi, rows});
        base.push_back(blocks.add(w.tile, w.gr.size() * ks * rows.size() * nr.size()));
      }
      Tensor recv = blocks.create(g, o.name + "/partials_in", partials, ipu);
      View src, dst;
      for (size_t ri = 0; ri < reds.size(); ++ri) {
        const TileWork& w = work[reds[ri].wi];
        const Range rows = reds[ri].rows;
        const Range nr = lay.n_chunk(j, w.ni);
        const uint64_t per = rows.size() * nr.size();
        uint64_t pos = base[ri];
        for (uint64_t gg = w.gr.begin; gg < w.gr.end; ++gg) {
          const uint64_t go = gg - w.gr.begin;
          const uint64_t group_base = pos;
          for (uint32_t kk = 0; kk < ks; ++kk) {
            // Every K slice is non-empty: the planner splits K at most K ways.
            const size_t src_wi = lay.position(w.gi, w.mi, w.ni, kk);
            NX_CHECK(src_wi != SIZE_MAX, "matmul K split produced an empty slice");
            dst.set(recv.var, static_cast<int64_t>(pos), {rows.size(), nr.size()}, {static_cast<int64_t>(nr.size()), 1});
            src.set(partial_t.var,
                    static_cast<int64_t>(partial_base[src_wi] + go * w.mr.size() * nr.size() +
                                         (rows.begin - w.mr.begin) * nr.size()),
                    {rows.size(), nr.size()}, {static_cast<int64_t>(nr.size()), 1});
            copy_view(g, rex, src, dst);
            pos += per;
          }
          Field fin{recv.var, w.tile, g.locate(recv.var, group_base).local, ks * per};
          LocalBlock lb;
          bool ok = find_local_block(g, c.var, w.tile, (gg * M + rows.begin) * N + nr.begin, rows.size(), nr.size(), N, &lb);
          NX_CHECK(ok, "matmul result rows are not on their reducing tile");
          Field fout{c.var, w.tile, lb.local, (rows.size() - 1) * lb.ld + nr.size()};
          g.add_vertex(rcs, std::make_unique<SumPartialsVertex>(w.tile, fin, fout, ks, static_cast<uint32_t>(rows.size()),
                                                                 static_cast<uint32_t>(nr.size()),
                                                                 static_cast<uint32_t>(lb.ld), partials, o.out_dtype));
        }
      }
      g.execute_exchange(rex);
      g.execute(rcs);
    }
  }
  g.record_plan(OpPlan{o.name, "matmul", ipu, plan.describe(), plan.tiles_used(), plan.temp_bytes, plan.cycles});
  return c;
}

}  // namespace neurenix::ops
