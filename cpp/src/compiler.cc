#include "neurenix/compiler.h"

#include <algorithm>
#include <type_traits>
#include <map>
#include <cstring>
#include <unordered_set>

#include "neurenix/error.h"
#include "first_fit.h"
#include "fused_exchanges.h"
#include "host_layout.h"
#include "host_threads.h"
#include "receive_alias.h"
#include "shadow_temporaries.h"

namespace neurenix {
namespace {

constexpr uint64_t kWorkerStacks = 6 * 64 + 128;  // worker and supervisor stacks
constexpr uint64_t kControlPerStep = 8;
constexpr uint64_t kExchangeCodePerCopy = 8;
constexpr uint64_t kVertexStateBase = 16;
constexpr uint64_t kVertexStatePerField = 4;
constexpr size_t kLargestPerTile = 3;  // tensors a tile's memory report lists

// Greedy by size (as TensorFlow Lite's arena planner): the largest blocks
// first, each at the lowest offset free over its whole live range. Used for
// a tile that first-fit in program order leaves too full: it packs blocks of
// different sizes and lifetimes with less fragmentation. `ranges[i]` is block
// i's [first, last] step; returns the high-water mark, fills `offsets` and
// the blocks live with the one that sets the mark.
uint64_t place_by_size(const std::vector<uint64_t>& sizes, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                       std::vector<uint64_t>& offsets, std::vector<size_t>& at_peak) {
  const size_t n = sizes.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  offsets.assign(n, 0);
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // (offset, end) of overlapping placed blocks
  uint64_t hwm = 0;
  size_t top = SIZE_MAX;
  for (size_t i : order) {
    busy.clear();
    for (size_t j : placed)
      if (ranges[j].first <= ranges[i].second && ranges[i].first <= ranges[j].second)
        busy.push_back({offsets[j], offsets[j] + sizes[j]});
    std::sort(busy.begin(), busy.end());
    uint64_t at = 0;
    for (const auto& [b, e] : busy) {
      if (b >= at + sizes[i]) break;
      at = std::max(at, e);
    }
    offsets[i] = at;
    placed.push_back(i);
    if (at + sizes[i] > hwm) {
      hwm = at + sizes[i];
      top = i;
    }
  }
  at_peak.clear();
  if (top != SIZE_MAX)
    for (size_t j : placed)
      if (ranges[j].first <= ranges[top].second && ranges[top].first <= ranges[j].second) at_peak.push_back(j);
  return hwm;
}

std::string step_name(const Graph& g, const Step& s) {
  switch (s.kind) {
    case StepKind::kCompute: return g.compute_sets()[s.index].name;
    case StepKind::kExchange: return g.exchanges()[s.index].name;
    case StepKind::kHostToDevice: return "host->device " + g.inputs()[s.index].name;
    case StepKind::kDeviceToHost: return "device->host " + g.outputs()[s.index].name;
  }
  return "?";
}

}  // namespace

uint64_t Executable::cycles_per_run() const {
  uint64_t c = 0;
  for (const auto& s : step_costs_) c += s.cycles;
  return c;
}

Executable::HostCopy Executable::host_copy_of(const ByteCopy& b, uint64_t src) {
  constexpr HostCopy kPattern{kPatternCopy, 0, 0};
  const uint64_t row = static_cast<uint64_t>(b.count) * b.elem;
  if (src > HostCopy::kSrcMask || !b.contiguous_rows()) return kPattern;
  if (b.outer == 1) return row >> 32 ? kPattern : HostCopy{src, b.dst_byte, static_cast<uint32_t>(row)};
  // Rows read one after the other, written a positive step apart.
  if (b.outer == 0 || b.outer > HostCopy::kMaxOuter || b.src_outer != static_cast<int64_t>(row) || b.dst_outer <= 0 ||
      static_cast<uint64_t>(b.dst_outer) > HostCopy::kMaxDstOuter || row == 0 || row >> HostCopy::kRowBits)
    return kPattern;
  return HostCopy{src | static_cast<uint64_t>(b.dst_outer) << HostCopy::kRowsShift, b.dst_byte,
                  static_cast<uint32_t>(row) | (b.outer - 1) << HostCopy::kRowBits};
}

std::unique_ptr<Executable> compile(std::unique_ptr<Graph> gp) {
  Graph& g = *gp;
  const TargetSpec& t = g.target();
  // The lowering is over: the exchanges' copy lists keep only their copies.
  stop_prefaulting_copies();
  for (Exchange& ex : g.exchanges()) ex.copies.shrink_to_fit();
  // Outputs stream back at the end of the program (of its first segment
  // when it has two).
  std::vector<Step> program = g.program();
  const size_t out_at = g.segment_start() < 0 ? program.size() : static_cast<size_t>(g.segment_start());
  for (uint32_t i = 0; i < g.outputs().size(); ++i)
    program.insert(program.begin() + static_cast<std::ptrdiff_t>(out_at + i), Step{StepKind::kDeviceToHost, i});
  for (size_t v = 0; v < g.num_vars(); ++v) g.ensure_mapped(static_cast<VarId>(v));
  // Every vertex's field list, kept from here on (Vertex::fields), in one
  // pass: the lists lie together, not between the vertex objects.
  for (const ComputeSet& cs : g.compute_sets())
    for (const auto& v : cs.vertices) v->all_fields();

  // Liveness per variable, in program steps.
  const int64_t nsteps = static_cast<int64_t>(program.size());
  // Copies come in long runs between the same two variables: a run after
  // its first copy changes nothing here. The runs' first copies are found
  // on several host threads (exchanges hold millions of copies).
  struct NoScratch {};
  std::vector<std::vector<uint32_t>> run_starts(g.exchanges().size());
  on_host_threads<NoScratch>(static_cast<int64_t>(g.exchanges().size()), [&](int64_t x, NoScratch&) {
    const auto& copies = g.exchanges()[static_cast<size_t>(x)].copies;
    auto& starts = run_starts[static_cast<size_t>(x)];
    for (size_t i = 0; i < copies.size(); ++i)
      if (!i || copies[i].src != copies[i - 1].src || copies[i].dst != copies[i - 1].dst)
        starts.push_back(static_cast<uint32_t>(i));
  });
  std::vector<LiveRange> live(g.num_vars());
  std::unordered_set<uint32_t> staged_exchanges;
  std::vector<bool> written(g.num_vars(), false);
  std::vector<uint32_t> source_mark(g.num_vars(), 0);  // exchange index + 1 of the last exchange reading a variable
  for (int64_t s = 0; s < nsteps; ++s) {
    const Step& st = program[s];
    switch (st.kind) {
      case StepKind::kCompute:
        for (const auto& v : g.compute_sets()[st.index].vertices)
          for (Field* f : v->all_fields()) {
            if (f->count == 0) continue;  // an empty field reads and writes nothing
            live[f->var].touch(s);
            if (f->access != Access::kRead) written[f->var] = true;
            else if (!written[f->var] && g.var(f->var).kind != VarKind::kConstant)
              NX_CHECK(false, "compute set '" + g.compute_sets()[st.index].name + "' reads '" + g.var(f->var).name +
                                  "' before anything writes it");
          }
        break;
      case StepKind::kExchange: {
        // An exchange reads memory as it was before the exchange (every tile
        // sends, then every tile receives). When it reads a variable it also
        // writes, the engine stages the sources first.
        const uint32_t mark = st.index + 1;
        const auto& copies = g.exchanges()[st.index].copies;
        for (uint32_t i : run_starts[st.index]) {
          const Copy& c = copies[i];
          source_mark[c.src] = mark;
          live[c.src].touch(s);
          live[c.dst].touch(s);
          NX_CHECK(written[c.src] || g.var(c.src).kind == VarKind::kConstant,
                   "exchange '" + g.exchanges()[st.index].name + "' reads '" + g.var(c.src).name + "' before it is written");
          written[c.dst] = true;
        }
        for (uint32_t i : run_starts[st.index])
          if ((!i || copies[i].dst != copies[i - 1].dst) && source_mark[copies[i].dst] == mark) {
            staged_exchanges.insert(st.index);
            break;
          }
        break;
      }
      case StepKind::kHostToDevice: {
        VarId v = g.inputs()[st.index].tensor.var;
        live[v].touch(s);
        written[v] = true;
        break;
      }
      case StepKind::kDeviceToHost: {
        VarId v = g.outputs()[st.index].tensor.var;
        NX_CHECK(written[v] || g.var(v).kind == VarKind::kConstant || g.var(v).numel == 0,
                 "output '" + g.outputs()[st.index].name + "' is never written");
        live[v].touch(s);
        break;
      }
    }
  }
  for (size_t v = 0; v < g.num_vars(); ++v) {
    if (g.var(static_cast<VarId>(v)).kind == VarKind::kConstant) {
      live[v].first = 0;
      live[v].last = nsteps;
    }
  }

  auto exe = std::unique_ptr<Executable>(new Executable());
  const uint32_t ntiles = g.num_tiles();

  // Per-tile allocation.
  std::vector<std::vector<std::pair<VarId, size_t>>> per_tile(ntiles);  // (var, share index)
  for (size_t v = 0; v < g.num_vars(); ++v) {
    if (live[v].first < 0) continue;  // never used: takes no memory
    const Variable& var = g.var(static_cast<VarId>(v));
    for (size_t si = 0; si < var.tiles.size(); ++si) per_tile[var.tiles[si].tile].push_back({static_cast<VarId>(v), si});
  }
  exe->var_offsets_.resize(g.num_vars());
  for (size_t v = 0; v < g.num_vars(); ++v) exe->var_offsets_[v].assign(g.var(static_cast<VarId>(v)).tiles.size(), 0);
  exe->arena_bytes_.assign(ntiles, 0);
  std::vector<std::vector<std::pair<VarId, uint64_t>>> peaks(ntiles);
  // Tiles are placed independently, on several host threads.
  on_host_threads<NoScratch>(ntiles, [&](int64_t x, NoScratch&) {
    const uint32_t tile = static_cast<uint32_t>(x);
    auto& items = per_tile[tile];
    if (items.empty()) return;
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      if (live[a.first].first != live[b.first].first) return live[a.first].first < live[b.first].first;
      return g.var(a.first).tiles[a.second].count * device_type_size(g.var(a.first).dtype) >
             g.var(b.first).tiles[b.second].count * device_type_size(g.var(b.first).dtype);
    });
    FirstFit alloc;
    for (const auto& [v, si] : items) {
      const Variable& var = g.var(v);
      alloc.release_before(live[v].first);
      uint64_t size = align_up(var.tiles[si].count * device_type_size(var.dtype));
      exe->var_offsets_[v][si] = alloc.place(v, size, live[v].last);
    }
    exe->arena_bytes_[tile] = alloc.hwm;
    peaks[tile] = std::move(alloc.at_peak);
  });

  // Fixed overheads per tile.
  std::vector<TileMemory> mem(ntiles);
  for (uint32_t tile = 0; tile < ntiles; ++tile) {
    mem[tile].ipu = g.ipu_of_tile(tile);
    mem[tile].tile = tile % g.tiles_per_ipu();
    mem[tile].global_tile = tile;
    mem[tile].variables = exe->arena_bytes_[tile];
    for (const auto& [v, si] : per_tile[tile])
      if (g.var(v).kind == VarKind::kConstant)
        mem[tile].constants += align_up(g.var(v).tiles[si].count * device_type_size(g.var(v).dtype));
  }
  std::vector<std::vector<const char*>> codelets(ntiles);  // the kinds of vertex on each tile (a few)
  std::vector<int64_t> last_step_on_tile(ntiles, -1);
  auto control = [&](uint32_t tile, int64_t s) {
    if (last_step_on_tile[tile] != s) {
      last_step_on_tile[tile] = s;
      mem[tile].control_code += kControlPerStep;
    }
  };
  for (int64_t s = 0; s < nsteps; ++s) {
    const Step& st = program[s];
    if (st.kind == StepKind::kCompute) {
      for (const auto& v : g.compute_sets()[st.index].vertices) {
        mem[v->tile].vertex_state += kVertexStateBase + kVertexStatePerField * v->all_fields().size() + v->state_bytes();
        auto& kinds = codelets[v->tile];
        const char* kind = v->name();
        if (std::none_of(kinds.begin(), kinds.end(), [&](const char* k) { return std::strcmp(k, kind) == 0; })) {
          kinds.push_back(kind);
          mem[v->tile].code += v->code_bytes();
        }
        control(v->tile, s);
      }
    }
  }
  // Exchanges (millions of copies) are tallied on several host threads, each
  // tile's code and the exchange steps that touch it, and summed.
  struct CodeTallies {
    std::vector<uint64_t> code, steps;
    std::vector<int64_t> last_step;
  };
  for (const CodeTallies& ct : on_host_threads<CodeTallies>(nsteps, [&](int64_t s, CodeTallies& ct) {
         const Step& st = program[s];
         if (st.kind != StepKind::kExchange) return;
         if (ct.code.empty()) {
           ct.code.assign(ntiles, 0);
           ct.steps.assign(ntiles, 0);
           ct.last_step.assign(ntiles, -1);
         }
         auto touch = [&](uint32_t tile) {
           if (ct.last_step[tile] != s) {
             ct.last_step[tile] = s;
             ct.steps[tile] += 1;
           }
         };
         for (const Copy& c : g.exchanges()[st.index].copies) {
           ct.code[c.dst_tile] += kExchangeCodePerCopy;
           if (c.src_tile != c.dst_tile) ct.code[c.src_tile] += kExchangeCodePerCopy / 2;
           touch(c.dst_tile);
           touch(c.src_tile);
         }
       }))
    for (uint32_t tile = 0; tile < ct.code.size(); ++tile) {
      mem[tile].exchange_code += ct.code[tile];
      mem[tile].control_code += kControlPerStep * ct.steps[tile];
    }
  const uint64_t capacity = g.bytes_per_tile();
  for (uint32_t tile = 0; tile < ntiles; ++tile) {
    TileMemory& m = mem[tile];
    if (m.variables == 0 && m.vertex_state == 0 && m.exchange_code == 0) continue;
    m.control_code += kWorkerStacks;
    if (m.total() > capacity) {
      // Too full with first-fit: try placing the largest blocks first.
      const auto& items = per_tile[tile];
      std::vector<uint64_t> sizes, offsets;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      std::vector<size_t> at_peak;
      for (const auto& [v, si] : items) {
        sizes.push_back(align_up(g.var(v).tiles[si].count * device_type_size(g.var(v).dtype)));
        ranges.push_back({live[v].first, live[v].last});
      }
      const uint64_t hwm = place_by_size(sizes, ranges, offsets, at_peak);
      if (hwm < m.variables) {
        for (size_t i = 0; i < items.size(); ++i) exe->var_offsets_[items[i].first][items[i].second] = offsets[i];
        exe->arena_bytes_[tile] = hwm;
        m.variables = hwm;
        peaks[tile].clear();
        for (size_t i : at_peak) peaks[tile].push_back({items[i].first, sizes[i]});
      }
    }
    auto& peak = peaks[tile];
    std::stable_sort(peak.begin(), peak.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    auto tile_tensor = [&](size_t i) {
      const Variable& var = g.var(peak[i].first);
      return TileTensor{var.name, var.node, peak[i].second};
    };
    for (size_t i = 0; i < peak.size() && i < kLargestPerTile; ++i) m.largest.push_back(tile_tensor(i));
    if (m.total() > capacity) {
      TileOverflow o{m.ipu, m.tile, m.total(), capacity, {}};
      for (size_t i = 0; i < peak.size() && i < 5; ++i) o.largest.push_back(tile_tensor(i));
      if (m.vertex_state + m.code + m.exchange_code + m.control_code > capacity / 4)
        o.largest.push_back(TileTensor{"(vertex state, code, exchange and control code)", "",
                                       m.vertex_state + m.code + m.exchange_code + m.control_code});
      exe->overflows_.push_back(std::move(o));
    }
    exe->tile_memory_.push_back(std::move(m));
  }

  // Resolve addresses. A variable's base on a tile is looked up once per
  // run of lookups of that variable (sources and destinations each keep
  // their own table: copies alternate between source tiles of one variable).
  struct BaseTable {
    VarId var = UINT32_MAX;
    uint32_t generation = 0;
    std::vector<uint32_t> stamp;
    std::vector<uint64_t> base;
  };
  auto tile_base = [&](BaseTable& tb, VarId v, uint32_t tile) -> uint64_t {
    if (tb.stamp.empty()) {
      tb.stamp.assign(ntiles, 0);
      tb.base.assign(ntiles, 0);
    }
    if (v != tb.var) {
      tb.var = v;
      if (++tb.generation == 0) {
        std::fill(tb.stamp.begin(), tb.stamp.end(), 0);
        tb.generation = 1;
      }
    }
    if (tb.stamp[tile] != tb.generation) {
      const Variable& var = g.var(v);
      const TileShare* s = var.share(tile);
      NX_CHECK(s, "address of '" + var.name + "' on a tile that does not hold it");
      tb.base[tile] = exe->var_offsets_[v][static_cast<size_t>(s - var.tiles.data())];
      tb.stamp[tile] = tb.generation;
    }
    return tb.base[tile];
  };
  // (Compute sets on several host threads, each with its own table.)
  on_host_threads<BaseTable>(static_cast<int64_t>(g.compute_sets().size()), [&](int64_t ci, BaseTable& field_bases) {
    for (auto& v : g.compute_sets()[static_cast<size_t>(ci)].vertices)
      for (Field* f : v->all_fields()) {
        if (f->count == 0) continue;
        f->byte_offset = tile_base(field_bases, f->var, f->tile) + f->local * device_type_size(g.var(f->var).dtype);
        f->address = static_cast<int64_t>(f->byte_offset);
        f->alias_tile = UINT32_MAX;
        f->pieces.clear();
      }
  });

  // Execution schedule and static step costs. Vertices and copies are
  // grouped by tile, ascending, each tile's in program order (a stable
  // counting sort: there are millions of copies).
  struct GroupScratch {
    std::vector<uint32_t> tile_count, tile_start, touched, order;
  };
  auto group_by_tile = [&](GroupScratch& gs, size_t n, auto tile_of, auto emit) {
    auto& tile_count = gs.tile_count;
    auto& tile_start = gs.tile_start;
    auto& touched = gs.touched;
    if (tile_count.empty()) {
      tile_count.assign(ntiles, 0);
      tile_start.assign(ntiles, 0);
    }
    touched.clear();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t tile = tile_of(i);
      if (tile_count[tile]++ == 0) touched.push_back(tile);
    }
    std::sort(touched.begin(), touched.end());
    uint32_t at = 0;
    for (uint32_t tile : touched) {
      tile_start[tile] = at;
      at += tile_count[tile];
    }
    auto& order = gs.order;
    order.resize(n);
    for (size_t i = 0; i < n; ++i) order[tile_start[tile_of(i)]++] = static_cast<uint32_t>(i);
    uint32_t begin = 0;
    for (uint32_t tile : touched) {
      const uint32_t end = begin + tile_count[tile];
      emit(tile, order.data() + begin, order.data() + end);
      tile_count[tile] = 0;
      begin = end;
    }
  };
  exe->compute_schedule_.resize(g.compute_sets().size());
  size_t vertex_total = 0;
  for (const auto& cs : g.compute_sets()) vertex_total += cs.vertices.size();
  exe->scheduled_vertices_.reserve(vertex_total);  // never reallocated: the spans point into it
  GroupScratch compute_scratch;
  for (size_t ci = 0; ci < g.compute_sets().size(); ++ci) {
    const auto& vs = g.compute_sets()[ci].vertices;
    group_by_tile(
        compute_scratch, vs.size(), [&](size_t i) { return vs[i]->tile; },
        [&](uint32_t tile, const uint32_t* b, const uint32_t* e) {
          const Vertex* const* first = exe->scheduled_vertices_.data() + exe->scheduled_vertices_.size();
          for (; b != e; ++b) exe->scheduled_vertices_.push_back(vs[*b].get());
          exe->compute_schedule_[ci].push_back(
              {tile, {first, exe->scheduled_vertices_.data() + exe->scheduled_vertices_.size()}});
        });
  }
  exe->staged_.assign(g.exchanges().size(), false);
  for (uint32_t ei : staged_exchanges) exe->staged_[ei] = true;
  exe->byte_schedule_.resize(g.exchanges().size());
  exe->byte_copies_.resize(g.exchanges().size());
  exe->copy_order_.resize(g.exchanges().size());
  auto narrow = [&](auto v, const Copy& c, size_t ei) {
    using T = std::conditional_t<std::is_signed_v<decltype(v)>, int32_t, uint32_t>;
    NX_CHECK(v == static_cast<decltype(v)>(static_cast<T>(v)),
             "a copy of exchange '" + g.exchanges()[ei].name + "' to tile " + std::to_string(c.dst_tile) +
                 " spans more than 4 GiB of tile memory");
    return static_cast<T>(v);
  };
  // Exchanges are independent: their copies' addresses are resolved and
  // their byte copies built on several host threads, with the variables of
  // each byte copy for the search for receive aliases.
  std::vector<std::vector<CopyVars>> copy_vars(g.exchanges().size());
  struct ExchangeScratch {
    BaseTable src_bases, dst_bases;
    GroupScratch group;
  };
  on_host_threads<ExchangeScratch>(static_cast<int64_t>(g.exchanges().size()), [&](int64_t x, ExchangeScratch& sc) {
    const size_t ei = static_cast<size_t>(x);
    const auto& cps = g.exchanges()[ei].copies;
    auto& bc = exe->byte_copies_[ei];
    auto& order = exe->copy_order_[ei];
    bc.reserve(cps.size());
    order.reserve(cps.size());
    copy_vars[ei].reserve(cps.size());
    group_by_tile(
        sc.group, cps.size(), [&](size_t i) { return cps[i].dst_tile; },
        [&](uint32_t tile, const uint32_t* b, const uint32_t* e) {
          const uint32_t begin = static_cast<uint32_t>(bc.size());
          for (; b != e; ++b) {
            const Copy& c = cps[*b];
            const int64_t es = static_cast<int64_t>(device_type_size(g.var(c.src).dtype));
            const uint64_t src_byte = tile_base(sc.src_bases, c.src, c.src_tile) + static_cast<uint64_t>(c.src_local) * es;
            const uint64_t dst_byte = tile_base(sc.dst_bases, c.dst, c.dst_tile) + static_cast<uint64_t>(c.dst_local) * es;
            bc.push_back(Executable::ByteCopy{c.src_tile, narrow(src_byte, c, ei), narrow(dst_byte, c, ei),
                                              narrow(c.count, c, ei), narrow(c.outer, c, ei),
                                              narrow(c.src_stride * es, c, ei), narrow(c.src_outer * es, c, ei),
                                              narrow(c.dst_outer * es, c, ei), static_cast<uint32_t>(es)});
            order.push_back(*b);
            copy_vars[ei].push_back(CopyVars{c.src, c.dst});
          }
          exe->byte_schedule_[ei].push_back(Executable::TileByteCopies{tile, begin, static_cast<uint32_t>(bc.size())});
        });
  });
  // Bytes of variables live at each step (constants all along).
  std::vector<int64_t> live_delta(nsteps + 1, 0);
  for (size_t v = 0; v < g.num_vars(); ++v) {
    if (live[v].first < 0) continue;
    const Variable& var = g.var(static_cast<VarId>(v));
    uint64_t bytes = 0;
    for (const TileShare& sh : var.tiles) bytes += align_up(sh.count * device_type_size(var.dtype));
    live_delta[live[v].first] += static_cast<int64_t>(bytes);
    live_delta[std::min<int64_t>(live[v].last, nsteps - 1) + 1] -= static_cast<int64_t>(bytes);
  }
  std::vector<int64_t> live_at(nsteps, 0);
  for (int64_t s = 0, live_now = 0; s < nsteps; ++s) live_at[s] = live_now += live_delta[s];

  const double host_bytes_per_cycle = t.host_link_bytes_per_sec / t.clock_hz;
  const double link_bytes_per_cycle = t.ipu_link_bytes_per_sec * t.ipu_links / t.clock_hz;
  auto fmt_bytes = [](uint64_t b) { return std::to_string(b) + " B"; };
  // A run a tile sends (see the exchange costs below).
  struct Sent {
    uint32_t tile;
    uint64_t byte, count, outer;  // byte: the first element, as variable << 32 | tile-local index
    int64_t stride, src_outer;
    uint64_t bytes;
    bool operator==(const Sent& o) const {
      return tile == o.tile && byte == o.byte && count == o.count && stride == o.stride && outer == o.outer &&
             src_outer == o.src_outer;
    }
  };
  // Steps are costed independently, on several host threads (an exchange
  // of a big model has a million copies to tally); each thread keeps its
  // own per-tile tallies and buffers, reused from step to step.
  struct Tallies {
    std::vector<uint64_t> in, out, desc;
    std::vector<uint8_t> seen;
    std::vector<uint32_t> touched;
    std::vector<uint32_t> slots;  // the set of distinct sends
    std::vector<Sent> sent;
  };
  exe->step_costs_.resize(static_cast<size_t>(nsteps));
  auto cost_step = [&](int64_t s, Tallies& tl) {
    auto& tile_in = tl.in;
    auto& tile_out = tl.out;
    auto& tile_desc = tl.desc;
    auto& tile_seen = tl.seen;
    auto& touched = tl.touched;
    if (tile_seen.empty()) {
      tile_in.assign(ntiles, 0);
      tile_out.assign(ntiles, 0);
      tile_desc.assign(ntiles, 0);
      tile_seen.assign(ntiles, 0);
    }
    const Step& st = program[s];
    StepCost c{st.kind, st.index, step_name(g, st), 0, 0, 0, "", -1, 0, {}};
    c.live_bytes = static_cast<uint64_t>(live_at[s]);
    switch (st.kind) {
      case StepKind::kCompute: {
        // The slowest tile sets the cost: its vertices run one after another
        // (each spread over the tile's worker threads), then all tiles sync.
        const ComputeSet& cs = g.compute_sets()[st.index];
        c.node = cs.node;
        uint64_t worst = 0;
        const Executable::TileVertices* busiest = nullptr;
        for (const auto& tv : exe->compute_schedule_[st.index]) {
          uint64_t sum = 0;
          for (const Vertex* v : tv.vertices) sum += v->cycles(t);
          if (!busiest || sum > worst) {
            worst = sum;
            busiest = &tv;
          }
        }
        if (busiest) {
          c.tile = busiest->tile % g.tiles_per_ipu();
          std::map<std::string, std::pair<uint64_t, uint64_t>> by_kind;  // vertex kind -> (count, cycles)
          for (const Vertex* v : busiest->vertices) {
            auto& k = by_kind[v->name()];
            k.first += 1;
            k.second += v->cycles(t) - t.vertex_overhead_cycles;
          }
          for (const auto& [kind, k] : by_kind)
            c.terms.push_back(CostTerm{"vertex", std::to_string(k.first) + " x " + kind, k.second});
          c.terms.push_back(CostTerm{"launch", "vertex launch (" + std::to_string(busiest->vertices.size()) + " x " +
                                         std::to_string(t.vertex_overhead_cycles) + ")",
                                     busiest->vertices.size() * t.vertex_overhead_cycles});
        }
        c.terms.push_back(CostTerm{"sync", "sync", t.sync_cycles});
        c.cycles = worst + t.sync_cycles;
        c.items = cs.vertices.size();
        break;
      }
      case StepKind::kExchange: {
        const Exchange& ex = g.exchanges()[st.index];
        c.node = ex.node;
        // Per-tile tallies in flat arrays (reset through `touched` afterwards);
        // cross: bytes leaving each IPU.
        touched.clear();
        auto touch = [&](uint32_t tile) {
          if (!tile_seen[tile]) {
            tile_seen[tile] = 1;
            touched.push_back(tile);
          }
        };
        std::vector<uint64_t> cross(g.num_ipus(), 0);
        bool any_cross = false;
        // The exchange fabric multicasts: data sent once can be received by
        // any number of tiles, so a sender pays for each distinct run once.
        auto& sent = tl.sent;
        sent.clear();
        c.items = ex.copies.size();
        for (const Copy& cp : ex.copies) {
          uint64_t bytes = static_cast<uint64_t>(cp.count) * cp.outer * device_type_size(g.var(cp.src).dtype);
          c.bytes += bytes;
          touch(cp.dst_tile);
          tile_desc[cp.dst_tile] += 1;
          if (cp.src_tile == cp.dst_tile) {
            tile_in[cp.dst_tile] += bytes / 2;  // on-tile copy: memory bandwidth, not exchange
            continue;
          }
          uint32_t si = g.ipu_of_tile(cp.src_tile), di = g.ipu_of_tile(cp.dst_tile);
          if (si != di) {
            cross[si] += bytes;
            any_cross = true;
          }
          tile_in[cp.dst_tile] += bytes;
          sent.push_back(Sent{cp.src_tile, static_cast<uint64_t>(cp.src) << 32 | cp.src_local, cp.count, cp.outer,
                               cp.src_stride, cp.src_outer, bytes});
        }
        // Distinct runs through an open-addressing set of indices into `sent`.
        size_t cap = 16;
        while (cap < 2 * sent.size()) cap *= 2;
        auto& slots = tl.slots;
        slots.assign(cap, UINT32_MAX);
        for (uint32_t i = 0; i < sent.size(); ++i) {
          const Sent& r = sent[i];
          uint64_t h = static_cast<uint64_t>(r.tile) << 32 | r.byte;
          h = h * 0x9E3779B97F4A7C15ull + r.count;
          h = h * 0xC2B2AE3D27D4EB4Full + r.outer;
          h = h * 0x165667B19E3779F9ull + static_cast<uint64_t>(r.stride);
          h = h * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r.src_outer);
          h ^= h >> 32;
          h *= 0xD6E8FEB86659FD93ull;
          h ^= h >> 32;
          size_t k = static_cast<size_t>(h) & (cap - 1);
          bool seen_before = false;
          for (; slots[k] != UINT32_MAX; k = (k + 1) & (cap - 1))
            if (sent[slots[k]] == r) {
              seen_before = true;
              break;
            }
          if (seen_before) continue;
          slots[k] = i;
          touch(r.tile);
          tile_out[r.tile] += r.bytes;
          tile_desc[r.tile] += 1;
        }
        // Each tile moves its larger direction at the exchange rate and runs
        // its descriptors; the busiest tile sets the cost (the lowest such
        // tile on a tie).
        uint64_t worst = 0, worst_bytes = 0, worst_desc = 0;
        bool worst_sends = false;
        uint32_t worst_tile = UINT32_MAX;
        for (uint32_t tile : touched) {
          const uint64_t n = tile_desc[tile], bi = tile_in[tile], bo = tile_out[tile];
          tile_desc[tile] = tile_in[tile] = tile_out[tile] = 0;
          tile_seen[tile] = 0;
          const uint64_t b = std::max(bi, bo);
          const uint64_t cost = b / t.exchange_bytes_per_cycle + n * t.exchange_descriptor_cycles;
          if (worst_tile == UINT32_MAX || cost > worst || (cost == worst && tile < worst_tile)) {
            worst = cost;
            worst_bytes = b;
            worst_desc = n;
            worst_sends = bo > bi;
            worst_tile = tile;
          }
        }
        if (worst_tile != UINT32_MAX) c.tile = worst_tile % g.tiles_per_ipu();
        const uint64_t move = worst_bytes / t.exchange_bytes_per_cycle;
        const uint64_t on_chip = move + worst_desc * t.exchange_descriptor_cycles + t.sync_cycles;
        uint64_t cross_worst = 0;
        for (uint64_t b : cross) cross_worst = std::max(cross_worst, b);
        const uint64_t link = static_cast<uint64_t>(cross_worst / link_bytes_per_cycle);
        if (!any_cross || on_chip >= link) {
          c.terms.push_back(CostTerm{"exchange", std::string(worst_sends ? "send " : "receive ") + fmt_bytes(worst_bytes) + " at " +
                                         std::to_string(t.exchange_bytes_per_cycle) + " B/cycle",
                                     move});
          c.terms.push_back(CostTerm{"descriptors", std::to_string(worst_desc) + " copy descriptor(s) x " +
                                         std::to_string(t.exchange_descriptor_cycles),
                                     worst_desc * t.exchange_descriptor_cycles});
          c.terms.push_back(CostTerm{"sync", "sync", t.sync_cycles});
          c.cycles = on_chip;
        } else {
          c.terms.push_back(CostTerm{"ipu_link", fmt_bytes(cross_worst) + " over the IPU-Links", link});
          c.cycles = link;
        }
        if (any_cross) {
          c.terms.push_back(CostTerm{"sync", "cross-IPU sync", t.cross_ipu_sync_cycles});
          c.cycles += t.cross_ipu_sync_cycles;
        }
        break;
      }
      case StepKind::kHostToDevice:
      case StepKind::kDeviceToHost: {
        const Tensor& tt = st.kind == StepKind::kHostToDevice ? g.inputs()[st.index].tensor : g.outputs()[st.index].tensor;
        c.bytes = tt.numel() * device_type_size(g.var(tt.var).dtype);
        const uint64_t stream = static_cast<uint64_t>(c.bytes / host_bytes_per_cycle);
        c.terms.push_back(CostTerm{"host_latency", "host stream latency", t.host_transfer_latency_cycles});
        c.terms.push_back(CostTerm{"host_link", fmt_bytes(c.bytes) + " over " + t.host_link, stream});
        c.cycles = t.host_transfer_latency_cycles + stream;
        break;
      }
    }
    exe->step_costs_[static_cast<size_t>(s)] = std::move(c);
  };
  on_host_threads<Tallies>(nsteps, cost_step);
  exe->segment_starts_ = {0};
  if (g.segment_start() >= 0) exe->segment_starts_.push_back(out_at + g.outputs().size());
  exe->program_ = std::move(program);
  exe->graph_ = std::move(gp);

  // One host block holds every tile's arena, back to back (tile-major; laid
  // out by variable at the end: lay_out_by_variable).
  exe->arena_offsets_.assign(ntiles, 0);
  for (uint32_t tile = 0; tile < ntiles; ++tile) {
    exe->arena_offsets_[tile] = exe->block_bytes_;
    exe->block_bytes_ += exe->arena_bytes_[tile];  // a multiple of kAlign
  }
  exe->variables_end_ = exe->block_bytes_;
  exe->host_offsets_.resize(g.num_vars());
  for (size_t v = 0; v < g.num_vars(); ++v) {
    const Variable& var = g.var(static_cast<VarId>(v));
    auto& h = exe->host_offsets_[v];
    h.resize(var.tiles.size());
    for (size_t si = 0; si < var.tiles.size(); ++si)
      h[si] = exe->arena_offsets_[var.tiles[si].tile] + exe->var_offsets_[v][si];
  }
  // Receive aliases: the host skips the copies nobody needs performed.
  exe->aliased_copies_.assign(g.exchanges().size(), {});
  exe->copied_bytes_.assign(g.exchanges().size(), 0);
  if (exe->fits()) {
    const auto skip = alias_receives(*exe, copy_vars, &exe->aliased_fields_);
    copy_vars.clear();
    std::vector<uint64_t> aliased_bytes(g.exchanges().size(), 0);
    on_host_threads<NoScratch>(static_cast<int64_t>(g.exchanges().size()), [&](int64_t x, NoScratch&) {
      const size_t ei = static_cast<size_t>(x);
      auto& bc = exe->byte_copies_[ei];
      auto& order = exe->copy_order_[ei];
      auto& aliased = exe->aliased_copies_[ei];
      // (The aliased copies' indices, in ascending order without a sort:
      // marked by index, then listed.)
      std::vector<uint8_t> is_aliased(order.size(), 0);
      uint32_t n = 0;
      for (auto& tb : exe->byte_schedule_[ei]) {
        const uint32_t begin = n;
        for (uint32_t k = tb.begin; k < tb.end; ++k) {
          if (skip[ei][k]) {
            is_aliased[order[k]] = 1;
            aliased_bytes[ei] += static_cast<uint64_t>(bc[k].count) * bc[k].outer * bc[k].elem;
            continue;
          }
          bc[n] = bc[k];
          order[n++] = order[k];
        }
        tb.begin = begin;
        tb.end = n;
      }
      for (uint32_t i = 0; i < is_aliased.size(); ++i)
        if (is_aliased[i]) aliased.push_back(i);
      bc.resize(n);
      order.resize(n);
      for (const auto& b : bc) exe->copied_bytes_[ei] += static_cast<uint64_t>(b.count) * b.outer * b.elem;
      auto& sched = exe->byte_schedule_[ei];
      sched.erase(std::remove_if(sched.begin(), sched.end(), [](const auto& tb) { return tb.begin == tb.end; }), sched.end());
    });
    for (uint64_t b : aliased_bytes) exe->aliased_bytes_ += b;
    // The copies as the host runs them.
    exe->host_copies_.assign(g.exchanges().size(), {});
    on_host_threads<NoScratch>(static_cast<int64_t>(g.exchanges().size()), [&](int64_t x, NoScratch&) {
      const size_t ei = static_cast<size_t>(x);
      auto& hc = exe->host_copies_[ei];
      hc.reserve(exe->byte_copies_[ei].size());
      for (const auto& b : exe->byte_copies_[ei])
        hc.push_back(Executable::host_copy_of(b, exe->arena_offsets_[b.src_tile] + b.src_byte));
    });
  }
  fuse_exchanges(*exe);
  shadow_temporaries(*exe);
  {
    std::vector<std::pair<int64_t, int64_t>> lives(live.size());
    for (size_t v = 0; v < live.size(); ++v) lives[v] = {live[v].first, live[v].last};
    lay_out_by_variable(*exe, lives);
  }
  // The fields' pieces made again in the order a run reads them, so that
  // they lie one after another in memory (made while the old ones are still
  // held, none of whose bytes the new ones can then take).
  {
    std::vector<std::pair<Field*, Field::Pieces>> fresh;
    for (const Vertex* v : exe->scheduled_vertices_)
      for (Field* f : const_cast<Vertex*>(v)->all_fields())
        if (!f->pieces.empty()) fresh.emplace_back(f, f->pieces);
    for (auto& [f, pieces] : fresh) f->pieces = std::move(pieces);
  }
  // The codelets' own copies of their fields take what the passes set.
  for (const ComputeSet& cs : exe->graph().compute_sets())
    for (const auto& v : cs.vertices) v->refresh();
  return exe;
}

}  // namespace neurenix
