#include "planning.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>

#include "neurenix/error.h"

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

uint64_t amp_cycles(const TargetSpec& t, DeviceType in, DeviceType partials, uint64_t m, uint64_t n, uint64_t k) {
  const bool half = in == DeviceType::kFloat16;
  const uint64_t rate = half ? t.fp16_flops_per_cycle : t.fp32_flops_per_cycle;
  const uint64_t depth = half ? 16 : 8;  // input channels the AMP consumes per pass
  uint64_t compute = 2 * m * n * ceil_div(k, depth) * depth / rate;
  // Half partials halve the accumulator traffic: modelled as a 10% saving.
  if (partials == DeviceType::kFloat16) compute = compute * 9 / 10;
  return t.vertex_overhead_cycles + compute + 8 * m;
}

SplitPlan search_splits(uint64_t g, uint64_t m, uint64_t n, uint64_t k, uint32_t tiles, uint64_t bytes_per_tile,
                        double proportion, const std::function<void(SplitPlan&)>& evaluate, uint64_t n_grain,
                        uint64_t k_grain) {
  const double budget = proportion * static_cast<double>(bytes_per_tile);
  SplitPlan best, fallback, smallest;
  bool have_best = false, have_fallback = false, have_smallest = false;
  auto faster = [](const SplitPlan& a, const SplitPlan& b) {
    if (a.cycles != b.cycles) return a.cycles < b.cycles;
    if (a.temp_bytes != b.temp_bytes) return a.temp_bytes < b.temp_bytes;
    return a.tiles_used() < b.tiles_used();
  };
  auto leaner = [](const SplitPlan& a, const SplitPlan& b) {
    if (a.temp_bytes != b.temp_bytes) return a.temp_bytes < b.temp_bytes;
    return a.cycles < b.cycles;
  };
  const auto gs = split_candidates(g, tiles), ms = split_candidates(m, tiles), ns = split_candidates(n, tiles, n_grain),
             ks = split_candidates(k, tiles, k_grain);
  std::vector<uint32_t> serials;
  for (uint64_t s = 1; s <= std::max<uint64_t>(1, n); s *= 2) {
    serials.push_back(static_cast<uint32_t>(s));
    if (s >= 64) break;
  }
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
            const uint64_t total = plan.temp_bytes + plan.resident_bytes;
            const bool fits = total <= bytes_per_tile;
            if (fits && static_cast<double>(plan.temp_bytes) <= budget && (!have_best || faster(plan, best))) {
              best = plan;
              have_best = true;
            }
            if (fits && (!have_fallback || leaner(plan, fallback))) {
              fallback = plan;
              have_fallback = true;
            }
            if (!have_smallest || total < smallest.temp_bytes + smallest.resident_bytes ||
                (total == smallest.temp_bytes + smallest.resident_bytes && plan.cycles < smallest.cycles)) {
              smallest = plan;
              have_smallest = true;
            }
          }
        }
      }
    }
  NX_CHECK(have_smallest, "planner found no plan");
  if (have_best) return best;
  SplitPlan chosen = have_fallback ? fallback : smallest;
  chosen.meets_memory_target = false;
  return chosen;
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
                         uint64_t grain)
    : g_(g), ipu_(ipu), plan_(plan), G_(G), M_(M), N_(N), K_(K), grain_(grain),
      first_(g.reserve_tiles(ipu, plan.tiles_used())), position_(plan.tiles_used(), SIZE_MAX) {
  for (uint32_t gi = 0; gi < plan.g_split; ++gi)
    for (uint32_t mi = 0; mi < plan.m_split; ++mi)
      for (uint32_t ni = 0; ni < plan.n_split; ++ni)
        for (uint32_t ki = 0; ki < plan.k_split; ++ki) {
          const SplitBlock b{gi, mi, ni, ki, tile(gi, mi, ni, ki), groups(gi), rows(mi), k_range(ki)};
          if (b.gr.empty() || b.mr.empty() || b.kr.empty()) continue;
          position_[index(gi, mi, ni, ki)] = blocks_.size();
          blocks_.push_back(b);
        }
}

Tensor PackedBlocks::create(Graph& g, const std::string& name, DeviceType dtype, uint32_t ipu) {
  Tensor t = g.add_variable(name, dtype, {total_}, VarKind::kTemporary, ipu);
  g.set_mapping(t.var, std::move(intervals_));
  intervals_.clear();
  total_ = 0;
  return t;
}

}  // namespace neurenix::ops
