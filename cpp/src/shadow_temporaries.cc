// Shadowed temporaries: which bytes a fused exchange writes that the host may
// keep in a region every tile of a range reuses (Executable::shadowed).
#include "shadow_temporaries.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "host_threads.h"

namespace neurenix {

void shadow_temporaries(Executable& exe) {
  Graph& g = exe.graph();
  const size_t nprog = exe.program_.size();
  exe.shadowed_.assign(nprog, 0);
  exe.shadow_bounds_.assign(nprog, {});
  if (!exe.fits() || exe.host_copies_.size() != g.exchanges().size()) return;
  const size_t nvars = g.num_vars();
  // Per variable: the one exchange that writes it and the one compute set
  // whose vertices touch it (kNone, kMany), and whether anything rules it
  // out: a copy reads it, a vertex writes it or reads it in pieces, through
  // a receive alias, or after every copy of its exchange (a late tile).
  constexpr int64_t kNone = -1, kMany = -2;
  std::vector<int64_t> writer(nvars, kNone), reader(nvars, kNone);
  std::vector<uint8_t> ruled_out(nvars, 0);
  auto note = [&](std::vector<int64_t>& who, VarId v, int64_t i) { who[v] = who[v] == kNone || who[v] == i ? i : kMany; };
  for (size_t e = 0; e < g.exchanges().size(); ++e)
    for (const Copy& c : g.exchanges()[e].copies) {
      ruled_out[c.src] = 1;
      note(writer, c.dst, static_cast<int64_t>(e));
    }
  for (size_t cs = 0; cs < g.compute_sets().size(); ++cs)
    for (const auto& v : g.compute_sets()[cs].vertices)
      for (const Field* f : v->fields()) {
        note(reader, f->var, static_cast<int64_t>(cs));
        if (f->access != Access::kRead || !f->pieces.empty() || f->alias_tile != UINT32_MAX ||
            f->address != static_cast<int64_t>(f->byte_offset))
          ruled_out[f->var] = 1;
      }
  for (const auto& late : exe.fused_late_)
    for (const auto& tv : late)
      for (const Vertex* v : tv.vertices)
        for (const Field* f : v->fields()) ruled_out[f->var] = 1;
  // What the host streams in or out is read or written in the arenas.
  for (const auto* streams : {&g.inputs(), &g.outputs()})
    for (const HostStream& st : *streams) ruled_out[st.tensor.var] = 1;
  // Steps that run once: a shadowed byte is written and read in one pass.
  std::vector<uint32_t> runs_e(g.exchanges().size(), 0), runs_c(g.compute_sets().size(), 0);
  for (const Step& st : exe.program_) {
    if (st.kind == StepKind::kExchange) ++runs_e[st.index];
    if (st.kind == StepKind::kCompute) ++runs_c[st.index];
  }

  // The shadowed variables, and per step and fused tile the span of the
  // tile's shadowed bytes.
  std::vector<uint8_t> shadow(nvars, 0);
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> span(nprog);  // per fused tile: [lo, hi)
  std::vector<std::pair<uint64_t, uint64_t>> on_tile(g.num_tiles(), {UINT64_MAX, 0});
  uint64_t bytes = 0;
  std::vector<VarId> step_vars;
  for (size_t s = 0; s + 1 < nprog; ++s) {
    if (exe.fused_[s].empty()) continue;
    const uint32_t e = exe.program_[s].index, cs = exe.program_[s + 1].index;
    if (runs_e[e] != 1 || runs_c[cs] != 1) continue;
    step_vars.clear();
    for (const Copy& c : g.exchanges()[e].copies) {
      const VarId v = c.dst;
      const Variable& var = g.var(v);
      if (shadow[v] || ruled_out[v] || var.kind != VarKind::kTemporary || writer[v] != e || reader[v] != cs) continue;
      shadow[v] = 1;
      step_vars.push_back(v);
      const uint64_t es = device_type_size(var.dtype);
      for (size_t i = 0; i < var.tiles.size(); ++i) {
        auto& [lo, hi] = on_tile[var.tiles[i].tile];
        lo = std::min(lo, exe.var_offset(v, i));
        hi = std::max(hi, exe.var_offset(v, i) + var.tiles[i].count * es);
      }
    }
    if (step_vars.empty()) continue;
    exe.shadowed_[s] = 1;
    for (const auto& ft : exe.fused_[s]) {
      const auto& t = on_tile[ft.tile];
      span[s].push_back(t.first < t.second ? t : std::make_pair(uint64_t{0}, uint64_t{0}));
      if (t.first < t.second) bytes = std::max(bytes, t.second - t.first);
    }
    for (VarId v : step_vars)
      for (const TileShare& sh : g.var(v).tiles) on_tile[sh.tile] = {UINT64_MAX, 0};
  }
  if (bytes == 0) {
    exe.shadowed_.assign(nprog, 0);
    return;
  }
  // One region per range, each a whole number of cache lines.
  const uint64_t before = exe.block_bytes_;
  exe.shadow_region_bytes_ = (bytes + 63) / 64 * 64;
  exe.block_bytes_ = (exe.block_bytes_ + 63) / 64 * 64;
  exe.shadow_offset_ = exe.block_bytes_;
  exe.block_bytes_ += Executable::kShadowRanges * exe.shadow_region_bytes_;
  exe.shadow_block_bytes_ = exe.block_bytes_ - before;

  // The shadowed steps are independent (each exchange and compute set runs
  // once): laid out on the host's threads.
  std::vector<size_t> steps;
  for (size_t s = 0; s + 1 < nprog; ++s)
    if (exe.shadowed_[s]) steps.push_back(s);
  struct Scratch {
    std::vector<uint32_t> perm;
    std::vector<Executable::ByteCopy> b;
    std::vector<Executable::HostCopy> h;
    std::vector<uint32_t> o;
    std::vector<uint64_t> base;  // per tile: where its byte 0 is shadowed
  };
  on_host_threads<Scratch>(static_cast<int64_t>(steps.size()), [&](int64_t si, Scratch& sc) {
    const size_t s = steps[static_cast<size_t>(si)];
    const uint32_t e = exe.program_[s].index, cs = exe.program_[s + 1].index;
    const auto& copies = g.exchanges()[e].copies;
    auto& bc = exe.byte_copies_[e];
    auto& hc = exe.host_copies_[e];
    auto& order = exe.copy_order_[e];
    auto& bounds = exe.shadow_bounds_[s];
    bounds.assign(Executable::kShadowRanges + 1, 0);
    for (const auto& ft : exe.fused_[s]) ++bounds[exe.shadow_range(ft.tile) + 1];
    for (uint32_t r = 0; r < Executable::kShadowRanges; ++r) bounds[r + 1] += bounds[r];
    sc.base.resize(g.num_tiles());
    // Each tile's shadowed copies first, both groups in their order (most
    // tiles' already are).
    for (size_t fi = 0; fi < exe.fused_[s].size(); ++fi) {
      auto& ft = exe.fused_[s][fi];
      ft.shadow_base = exe.shadow_offset(exe.shadow_range(ft.tile)) - span[s][fi].first;
      sc.base[ft.tile] = ft.shadow_base;
      auto& perm = sc.perm;
      perm.clear();
      bool in_order = true;
      for (uint32_t k = ft.begin; k < ft.end; ++k)
        if (shadow[copies[order[k]].dst]) {
          in_order &= k == ft.begin + perm.size();
          perm.push_back(k);
        }
      ft.shadow_end = ft.begin + static_cast<uint32_t>(perm.size());
      if (in_order) continue;
      for (uint32_t k = ft.begin; k < ft.end; ++k)
        if (!shadow[copies[order[k]].dst]) perm.push_back(k);
      sc.b.assign(bc.begin() + ft.begin, bc.begin() + ft.end);
      sc.h.assign(hc.begin() + ft.begin, hc.begin() + ft.end);
      sc.o.assign(order.begin() + ft.begin, order.begin() + ft.end);
      for (size_t i = 0; i < perm.size(); ++i) {
        bc[ft.begin + i] = sc.b[perm[i] - ft.begin];
        hc[ft.begin + i] = sc.h[perm[i] - ft.begin];
        order[ft.begin + i] = sc.o[perm[i] - ft.begin];
      }
    }
    for (auto& v : g.compute_sets()[cs].vertices)
      for (Field* f : v->all_fields())
        if (shadow[f->var]) {
          f->address = static_cast<int64_t>(sc.base[v->tile]) - static_cast<int64_t>(exe.arena_offset(v->tile)) +
                       static_cast<int64_t>(f->byte_offset);
          f->shadow = true;
        }
  });
}

}  // namespace neurenix
