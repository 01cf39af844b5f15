#include "planning.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>

#include "neurenix/error.h"
#include "neurenix/exchange.h"

namespace neurenix::ops {

std::vector<uint32_t> split_candidates(uint64_t d, uint64_t max_split, uint64_t grain) {
  // Small counts, powers of two (and 1.5x them), and the counts that give
  // power-of-two block sizes.
  std::set<uint64_t> raw;
  uint64_t lim = std::min(d, max_split);
  for (uint64_t s = 1; s <= std::min<uint64_t>(lim, 16); ++s) raw.insert(s);
  for (uint64_t s = 16; s <= lim; s *= 2) {
    raw.insert(s);
    if (s * 3 / 2 <= lim) raw.insert(s * 3 / 2);
  }
  for (uint64_t b = 1; b <= d; b *= 2) raw.insert(ceil_div(d, b));
  raw.insert(lim);
  std::set<uint32_t> eff;
  for (uint64_t s : raw) {
    if (s == 0 || s > lim) continue;
    uint64_t block = ceil_div(d, s);
    if (grain > 1 && d > grain) block = ceil_div(block, grain) * grain;
    eff.insert(static_cast<uint32_t>(ceil_div(d, block)));
  }
  if (eff.empty()) eff.insert(1);
  return {eff.begin(), eff.end()};
}

uint64_t amp_cycles(const TargetSpec& t, DeviceType in, uint64_t m, uint64_t n, uint64_t k) {
  const uint64_t rate = amp_flops_per_cycle(t, in);
  const uint64_t depth = amp_depth(in);
  NX_CHECK(rate > 0, "no AMP for this operand type on this target");
  // The AMP's rate does not depend on the partials type (MatMulVertex).
  const uint64_t compute = 2 * m * n * ceil_div(k, depth) * depth / rate;
  return t.vertex_overhead_cycles + compute + 8 * m;
}

namespace {

// Vertex state, exchange and control code a plan adds to each tile it uses,
// roughly as the compiler counts them: per serial pass, an exchange and a
// compute set (and with K split, another of each), a vertex per group, and
// a few exchange descriptors per operand block and partial.
uint64_t code_estimate(const SplitPlan& p, uint64_t g) {
  const uint64_t groups = ceil_div(g, p.g_split), stages = p.k_split > 1 ? 2 : 1;
  const uint64_t per_pass = 2 * stages * 8 + groups * stages * 40 + (4 + (p.k_split > 1 ? 2 * p.k_split : 0)) * 12;
  return p.serial_split * per_pass;
}

}  // namespace

SplitPlan search_splits(uint64_t g, uint64_t m, uint64_t n, uint64_t k, uint32_t tiles, uint64_t bytes_per_tile,
                        double proportion, const std::function<void(SplitPlan&)>& evaluate, uint64_t n_grain,
                        uint64_t k_grain, uint64_t occupied) {
  const double budget = proportion * static_cast<double>(bytes_per_tile);
  // Room left on every tile for what is not a variable: code, vertex state,
  // exchange and control code, stacks (about 7% of a tile in a ResNet-50;
  // relatively more on tiny tiles).
  const uint64_t usable = bytes_per_tile - std::min(bytes_per_tile / 8 + 2048, bytes_per_tile / 2);
  auto faster = [](const SplitPlan& a, const SplitPlan& b) {
    if (a.cycles != b.cycles) return a.cycles < b.cycles;
    if (a.temp_bytes != b.temp_bytes) return a.temp_bytes < b.temp_bytes;
    return a.tiles_used() < b.tiles_used();
  };
  auto smaller = [](const SplitPlan& a, const SplitPlan& b) {
    if (a.total_bytes() != b.total_bytes()) return a.total_bytes() < b.total_bytes();
    return a.cycles < b.cycles;
  };
  const auto gs = split_candidates(g, tiles), ms = split_candidates(m, tiles), ns = split_candidates(n, tiles, n_grain),
             ks = split_candidates(k, tiles, k_grain);
  std::vector<uint32_t> serials;
  for (uint64_t s = 1; s <= std::max<uint64_t>(1, n); s *= 2) {
    serials.push_back(static_cast<uint32_t>(s));
    if (s >= 64) break;
  }
  // Every plan that fits a tile on its own, and the smallest of all.
  std::vector<SplitPlan> fitting;
  SplitPlan smallest;
  bool have_smallest = false;
  for (uint32_t gi : gs)
    for (uint32_t mi : ms) {
      if (static_cast<uint64_t>(gi) * mi > tiles) break;
      for (uint32_t ni : ns) {
        if (static_cast<uint64_t>(gi) * mi * ni > tiles) break;
        for (uint32_t ki : ks) {
          if (static_cast<uint64_t>(gi) * mi * ni * ki > tiles) break;
          for (uint32_t s : serials) {
            if (static_cast<uint64_t>(s) * ni > std::max<uint64_t>(1, n)) break;
            SplitPlan plan;
            plan.g_split = gi;
            plan.m_split = mi;
            plan.n_split = ni;
            plan.k_split = ki;
            plan.serial_split = s;
            evaluate(plan);
            plan.code_bytes = code_estimate(plan, g);
            if (plan.total_bytes() <= usable) fitting.push_back(plan);
            if (!have_smallest || smaller(plan, smallest)) {
              smallest = plan;
              have_smallest = true;
            }
          }
        }
      }
    }
  NX_CHECK(have_smallest, "planner found no plan");
  auto fastest_of = [&](const auto& eligible) -> const SplitPlan* {
    const SplitPlan* best = nullptr;
    for (const SplitPlan& p : fitting)
      if (eligible(p) && (!best || faster(p, *best))) best = &p;
    return best;
  };
  // The fastest plan with the whole tile allowed; then, while its temporaries
  // miss the target, the fastest with fewer temporaries that puts no more on
  // its busiest tile, all told or kept for the whole program. So the plan a
  // proportion gives never holds more on a tile than the plan a higher one
  // gives. If the walk stops above the target, its last plan is used.
  const SplitPlan* cur = fastest_of([](const SplitPlan&) { return true; });
  if (!cur) {
    smallest.meets_memory_target = false;
    return smallest;
  }
  while (static_cast<double>(cur->temp_bytes) > budget) {
    const SplitPlan* next = fastest_of([&](const SplitPlan& p) {
      return p.temp_bytes < cur->temp_bytes && p.total_bytes() <= cur->total_bytes() && p.kept_bytes <= cur->kept_bytes;
    });
    if (!next) break;
    cur = next;
  }
  SplitPlan chosen = *cur;
  chosen.meets_memory_target = static_cast<double>(chosen.temp_bytes) <= budget;
  if (occupied + chosen.total_bytes() <= usable) return chosen;
  // With what the tiles already hold it would overflow: the fastest plan that
  // fits then and meets the target, else the smallest that fits then.
  auto fits_now = [&](const SplitPlan& p) { return occupied + p.total_bytes() <= usable; };
  if (const SplitPlan* p = fastest_of([&](const SplitPlan& q) {
        return fits_now(q) && static_cast<double>(q.temp_bytes) <= budget;
      })) {
    chosen = *p;
    chosen.meets_memory_target = true;
    return chosen;
  }
  const SplitPlan* least = nullptr;
  for (const SplitPlan& p : fitting)
    if (fits_now(p) && (!least || smaller(p, *least))) least = &p;
  chosen = least ? *least : smallest;
  chosen.meets_memory_target = false;
  return chosen;
}

uint64_t n_columns(uint64_t n, uint32_t n_split, uint32_t serial, uint32_t ni, uint64_t grain) {
  uint64_t cols = 0;
  for (uint32_t pass = 0; pass < serial; ++pass)
    cols += part_g(n, static_cast<uint64_t>(serial) * n_split, static_cast<uint64_t>(pass) * n_split + ni, grain).size();
  return cols;
}

uint64_t occupied_bytes(const Graph& g, uint32_t ipu, std::initializer_list<const Tensor*> operands) {
  uint64_t bytes = g.max_constant_bytes(ipu);
  for (const Tensor* t : operands) {
    const Variable& v = g.var(t->var);
    if (!v.mapped || v.kind == VarKind::kConstant) continue;
    uint64_t most = 0;
    for (const TileShare& s : v.tiles) most = std::max(most, s.count);
    bytes += most * device_type_size(v.dtype);
  }
  return bytes;
}

void check_memory_proportion(const std::string& op, double proportion) {
  if (!(proportion > 0 && proportion <= 1))
    fail(ErrorCode::kInvalidArgument, op + ": memory proportion must be in (0, 1], got " + std::to_string(proportion));
}

void warn_unless_meets_target(Graph& g, const std::string& op, const SplitPlan& plan, double proportion) {
  if (plan.meets_memory_target) return;
  std::ostringstream w;
  w << op << ": no plan keeps temporaries under " << proportion << " of tile memory; using the leanest plan ("
    << plan.temp_bytes << " bytes/tile)";
  g.warn(w.str());
}

SplitLayout::SplitLayout(Graph& g, uint32_t ipu, const SplitPlan& plan, uint64_t G, uint64_t M, uint64_t N, uint64_t K,
                         uint64_t grain, const KeptBytes& kept)
    : g_(g), ipu_(ipu), plan_(plan), G_(G), M_(M), N_(N), K_(K), grain_(grain), first_(0),
      position_(plan.tiles_used(), SIZE_MAX) {
  std::vector<uint64_t> window(kept ? plan.tiles_used() : 0, 0);
  for (uint32_t gi = 0; gi < plan.g_split; ++gi)
    for (uint32_t mi = 0; mi < plan.m_split; ++mi)
      for (uint32_t ni = 0; ni < plan.n_split; ++ni)
        for (uint32_t ki = 0; ki < plan.k_split; ++ki) {
          if (kept) window[index(gi, mi, ni, ki)] = kept(gi, mi, ni, ki);
          const SplitBlock b{gi, mi, ni, ki, 0, groups(gi), rows(mi), k_range(ki)};
          if (b.gr.empty() || b.mr.empty() || b.kr.empty()) continue;
          position_[index(gi, mi, ni, ki)] = blocks_.size();
          blocks_.push_back(b);
        }
  first_ = kept ? g.reserve_tiles_balanced(ipu, window) : g.reserve_tiles(ipu, plan.tiles_used());
  for (SplitBlock& b : blocks_) b.tile = tile(b.gi, b.mi, b.ni, b.ki);
}

void spread_runs(const std::vector<Range>& runs, const std::vector<uint32_t>& tiles, std::vector<TileInterval>& out) {
  uint64_t total = 0;
  for (const Range& r : runs) total += r.size();
  if (total == 0) return;
  NX_CHECK(!tiles.empty(), "spread_runs over no tiles");
  const uint64_t share = ceil_div(total, tiles.size());
  size_t ti = 0;
  uint64_t left = share;  // of tile ti's share
  for (const Range& r : runs) {
    uint64_t at = r.begin;
    while (at < r.end) {
      const uint64_t take = std::min(left, r.end - at);
      out.push_back(TileInterval{at, at + take, tiles[ti], 0});
      at += take;
      left -= take;
      if (left == 0) {
        if (ti + 1 < tiles.size()) ++ti;
        left = share;
      }
    }
  }
}

Tensor PackedBlocks::create(Graph& g, const std::string& name, DeviceType dtype, uint32_t ipu) {
  Tensor t = g.add_variable(name, dtype, {total_}, VarKind::kTemporary, ipu);
  g.set_mapping(t.var, std::move(intervals_));
  intervals_.clear();
  total_ = 0;
  return t;
}

std::vector<Field> scalar_on_tiles(Graph& g, const Tensor& scale, const std::vector<uint32_t>& tiles, uint32_t ex,
                                   const std::string& name, uint32_t ipu) {
  g.ensure_mapped(scale.var);
  const TileLocation home = g.locate(scale.var, 0);
  std::vector<uint32_t> distinct;
  for (uint32_t t : tiles)
    if (t != home.tile && std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  std::sort(distinct.begin(), distinct.end());
  PackedBlocks blocks;
  std::vector<uint64_t> at;
  for (uint32_t t : distinct) at.push_back(blocks.add(t, 1));
  Tensor copies;
  if (!distinct.empty()) {
    copies = blocks.create(g, name, DeviceType::kFloat32, ipu);
    for (size_t i = 0; i < distinct.size(); ++i) {
      View src{scale.var, 0, {1}, {1}};
      View dst{copies.var, static_cast<int64_t>(at[i]), {1}, {1}};
      copy_view(g, ex, src, dst);
    }
  }
  std::vector<Field> out;
  out.reserve(tiles.size());
  for (uint32_t t : tiles) {
    if (t == home.tile) {
      out.push_back(Field{scale.var, t, home.local, 1});
    } else {
      const size_t i = static_cast<size_t>(std::lower_bound(distinct.begin(), distinct.end(), t) - distinct.begin());
      out.push_back(Field{copies.var, t, g.locate(copies.var, at[i]).local, 1});
    }
  }
  return out;
}

void check_float8_operands(const Graph& g, const std::string& what, DeviceType in, const std::vector<Tensor>& scales,
                           uint32_t ipu) {
  if (amp_flops_per_cycle(g.target(), in) == 0)
    fail(ErrorCode::kInvalidArgument, what + ": the " + g.target().version + " has no float8 matrix unit (the ipu21 has)");
  if (scales.size() != 2) fail(ErrorCode::kInvalidArgument, what + ": float8 operands need their two scales");
  for (const Tensor& s : scales) {
    const Variable& v = g.var(s.var);
    if (v.dtype != DeviceType::kFloat32 || s.numel() != 1 || v.ipu != ipu)
      fail(ErrorCode::kInvalidArgument, what + ": a float8 scale must be a float32 scalar on IPU " + std::to_string(ipu));
  }
}

}  // namespace neurenix::ops
