// Receive aliases (compiler.h, Executable::aliased_copies): which received
// bytes vertices can read where they came from, so the host skips the copy.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "host_threads.h"
#include "receive_alias.h"

namespace neurenix {

namespace {

// How many program steps from an exchange to the vertex reading what it
// delivered are searched for writes to the sender's bytes: readers further
// away keep their copy (the search would cost more than it saves).
constexpr int64_t kMaxDistance = 8;

// A received run: byte copy `byte_copy` of `exchange`, writing bytes
// [begin, end) of the receiver's memory (for a 2-D pattern, the range its
// rows span; tile offsets fit 32 bits, the compile checks). Small: there is
// one per copy, millions in a large model; the rest is read from the byte
// copy.
struct Run {
  uint32_t exchange;
  uint32_t byte_copy;
  uint32_t begin;
  uint32_t end;
};

struct Bytes {
  uint64_t begin, end;
};

bool overlap(const Bytes& a, uint64_t begin, uint64_t end) { return a.begin < end && begin < a.end; }

}  // namespace

std::vector<std::vector<uint8_t>> alias_receives(Executable& exe, const std::vector<std::vector<CopyVars>>& vars,
                                                 uint64_t* aliased_fields) {
  Graph& g = exe.graph();
  const auto& program = exe.program();
  const size_t nvars = g.num_vars();
  const auto& byte_copies = exe.byte_copies();
  std::vector<std::vector<uint8_t>> skip(byte_copies.size());
  for (size_t e = 0; e < byte_copies.size(); ++e) skip[e].assign(byte_copies[e].size(), 0);
  *aliased_fields = 0;

  // Program position of each compute set and exchange: -1 never runs, -2
  // runs more than once.
  std::vector<int64_t> cs_at(g.compute_sets().size(), -1), ex_at(g.exchanges().size(), -1);
  for (size_t s = 0; s < program.size(); ++s) {
    int64_t* at = program[s].kind == StepKind::kCompute    ? &cs_at[program[s].index]
                  : program[s].kind == StepKind::kExchange ? &ex_at[program[s].index]
                                                           : nullptr;
    if (at) *at = *at == -1 ? static_cast<int64_t>(s) : -2;
  }
  auto segment_of = [&](int64_t s) {
    size_t k = 0;
    while (k + 1 < exe.num_segments() && static_cast<int64_t>(exe.segment_begin(k + 1)) <= s) ++k;
    return k;
  };

  // Receivers that can alias: variables that only exchanges write and only
  // vertices read (no constants, streams or copy sources).
  std::vector<uint8_t> ok(nvars, 1);
  for (size_t v = 0; v < nvars; ++v) {
    const VarKind k = g.var(static_cast<VarId>(v)).kind;
    if (k == VarKind::kConstant || k == VarKind::kInput) ok[v] = 0;
  }
  for (const HostStream& s : g.inputs()) ok[s.tensor.var] = 0;
  for (const HostStream& s : g.outputs()) ok[s.tensor.var] = 0;
  for (const auto& ev : vars)
    for (const CopyVars& c : ev) ok[c.src] = 0;
  for (const ComputeSet& cs : g.compute_sets())
    for (const auto& v : cs.vertices)
      for (const Field* f : v->fields())
        if (f->access != Access::kRead && f->count) ok[f->var] = 0;

  // The runs each share of those variables receives (a share: a variable's
  // elements on one tile), grouped by share (counting sort) and ordered by
  // local index. Shares are numbered variable x tile when that table is
  // not much larger than the copies, else as the variables' shares (found
  // by binary search).
  struct NoScratch {};
  std::vector<uint64_t> share_base(nvars + 1, 0);
  uint64_t copies = 0;
  for (const auto& bc : byte_copies) copies += bc.size();
  const uint64_t ntiles = g.num_tiles();
  const uint64_t nok = static_cast<uint64_t>(std::count(ok.begin(), ok.end(), 1));
  const bool dense = nok * ntiles <= 4 * copies + (1u << 20);
  {
    uint64_t at = 0;
    for (size_t v = 0; v < nvars; ++v) {
      share_base[v] = at;
      if (ok[v]) at += dense ? ntiles : g.var(static_cast<VarId>(v)).tiles.size();
    }
    share_base[nvars] = at;
  }
  auto share_of = [&](VarId v, uint32_t tile) -> uint64_t {
    if (dense) return share_base[v] + tile;
    const Variable& var = g.var(v);
    return share_base[v] + static_cast<uint64_t>(var.share(tile) - var.tiles.data());
  };
  // Receives, by exchange and receiving tile, for exchanges [e0, e1).
  auto for_each_receive = [&](uint32_t e0, uint32_t e1, auto visit) {
    for (uint32_t e = e0; e < e1; ++e)
      for (const auto& tb : exe.byte_schedule()[e])
        for (uint32_t k = tb.begin; k < tb.end; ++k) {
          const Executable::ByteCopy& b = byte_copies[e][k];
          if (ok[vars[e][k].dst] && b.count && b.outer) visit(e, k, tb.dst_tile, b);
        }
  };
  // Counted and placed on several host threads, each over its own range of
  // exchanges (split by copies) with its own count per share, so that every
  // share's runs stay in exchange order, as one thread would place them.
  // (As many ranges as there are host threads, at most 8, while the counts
  // take no more memory than the runs.)
  const uint64_t nshares = share_base[nvars];
  const size_t parts = static_cast<size_t>(
      std::clamp<uint64_t>(host_thread_count(), 1, std::max<uint64_t>(1, 4 * copies / std::max<uint64_t>(nshares, 1))));
  std::vector<uint32_t> part_begin(parts + 1, static_cast<uint32_t>(byte_copies.size()));
  {
    uint64_t seen = 0;
    size_t p = 0;
    part_begin[0] = 0;
    for (uint32_t e = 0; e < byte_copies.size() && p + 1 < parts; ++e) {
      seen += byte_copies[e].size();
      while (p + 1 < parts && seen * parts >= copies * (p + 1)) part_begin[++p] = e + 1;
    }
  }
  std::vector<std::vector<uint32_t>> cursor(parts);
  on_host_threads<NoScratch>(static_cast<int64_t>(parts), [&](int64_t p, NoScratch&) {
    auto& count = cursor[static_cast<size_t>(p)];
    count.assign(nshares, 0);
    for_each_receive(part_begin[p], part_begin[p + 1], [&](uint32_t e, uint32_t k, uint32_t tile, const Executable::ByteCopy&) {
      ++count[share_of(vars[e][k].dst, tile)];
      skip[e][k] = 1;  // until a reader needs it
    });
  });
  // Each share's runs start at run_start; each range's, after the earlier
  // ranges' (the counts become cursors).
  std::vector<uint32_t> run_start(nshares + 1, 0);
  {
    uint32_t at = 0;
    for (uint64_t sh = 0; sh < nshares; ++sh) {
      run_start[sh] = at;
      for (auto& c : cursor) {
        const uint32_t n = c[sh];
        c[sh] = at;
        at += n;
      }
    }
    run_start[nshares] = at;
  }
  // Left uninitialized (`new Run[n]`): the runs are written in scattered
  // order, each once. (Huge pages for this array made later compiles in a
  // process faster but the first slower: docs/benchmarks.md.)
  const std::unique_ptr<Run[]> runs_block(new Run[run_start.back()]);
  Run* const runs = runs_block.get();
  on_host_threads<NoScratch>(static_cast<int64_t>(parts), [&](int64_t p, NoScratch&) {
    auto& fill = cursor[static_cast<size_t>(p)];
    for_each_receive(part_begin[p], part_begin[p + 1], [&](uint32_t e, uint32_t k, uint32_t tile, const Executable::ByteCopy& b) {
      const int64_t last_row = static_cast<int64_t>(b.outer - 1) * b.dst_outer;
      runs[fill[share_of(vars[e][k].dst, tile)]++] =
          Run{e, k, static_cast<uint32_t>(b.dst_byte + std::min<int64_t>(0, last_row)),
              static_cast<uint32_t>(b.dst_byte + std::max<int64_t>(0, last_row) + static_cast<int64_t>(b.count) * b.elem)};
    });
  });
  cursor.clear();
  // What a run reads: one sender's bytes at a fixed displacement from the
  // receiver's (in the host block), if it reads and writes them
  // contiguously.
  struct Source {
    int64_t delta;
    uint32_t tile;
    uint32_t exchange;
    bool contiguous;
    bool same(const Source& o) const {
      return contiguous && o.contiguous && delta == o.delta && tile == o.tile && exchange == o.exchange;
    }
  };
  auto source = [&](const Run& r, uint32_t receiver) {
    const Executable::ByteCopy& b = byte_copies[r.exchange][r.byte_copy];
    const uint64_t row = static_cast<uint64_t>(b.count) * b.elem;
    const bool rows_follow =
        b.outer == 1 || (b.src_outer == static_cast<int64_t>(row) && b.dst_outer == static_cast<int64_t>(row));
    return Source{static_cast<int64_t>(exe.arena_offset(b.src_tile) + b.src_byte) -
                      static_cast<int64_t>(exe.arena_offset(receiver) + b.dst_byte),
                  b.src_tile, r.exchange,
                  ex_at[r.exchange] >= 0 && rows_follow && b.contiguous_rows()};
  };
  auto src_var = [&](const Run& r) { return vars[r.exchange][r.byte_copy].src; };
  // (Shares sorted on several host threads, in chunks of many shares.)
  constexpr size_t kSharesPerChunk = 4096;
  on_host_threads<NoScratch>(static_cast<int64_t>((nshares + kSharesPerChunk - 1) / kSharesPerChunk),
                             [&](int64_t chunk, NoScratch&) {
                               const size_t lo = static_cast<size_t>(chunk) * kSharesPerChunk;
                               const size_t hi = std::min<size_t>(nshares, lo + kSharesPerChunk);
                               for (size_t s = lo; s < hi; ++s)
                                 if (run_start[s + 1] - run_start[s] > 1)
                                   std::sort(runs + run_start[s], runs + run_start[s + 1],
                                             [](const Run& a, const Run& b) { return a.begin < b.begin; });
                             });

  // Whether anything writes bytes [begin, end) of `tile` in program steps
  // [first, last] (`first` being the exchange that sent them). An
  // exchange's writes are merged ranges per receiving tile, built when
  // first asked for.
  using WriteCache = std::unordered_map<uint64_t, std::vector<Bytes>>;
  auto exchange_written = [&](WriteCache& exchange_writes, uint32_t e, uint32_t tile) -> const std::vector<Bytes>& {
    auto [it, fresh] = exchange_writes.try_emplace(static_cast<uint64_t>(e) << 32 | tile);
    if (!fresh) return it->second;
    const auto& sched = exe.byte_schedule()[e];
    auto tb = std::lower_bound(sched.begin(), sched.end(), tile,
                               [](const Executable::TileByteCopies& x, uint32_t t) { return x.dst_tile < t; });
    std::vector<Bytes>& w = it->second;
    if (tb == sched.end() || tb->dst_tile != tile) return w;
    for (uint32_t k = tb->begin; k < tb->end; ++k) {
      const Executable::ByteCopy& b = byte_copies[e][k];
      if (!b.count || !b.outer) continue;  // writes nothing
      const int64_t last_row = static_cast<int64_t>(b.outer - 1) * b.dst_outer;
      w.push_back(Bytes{b.dst_byte + static_cast<uint64_t>(std::min<int64_t>(0, last_row)),
                        b.dst_byte + static_cast<uint64_t>(std::max<int64_t>(0, last_row)) +
                            static_cast<uint64_t>(b.count) * b.elem});
    }
    std::sort(w.begin(), w.end(), [](const Bytes& a, const Bytes& b) { return a.begin < b.begin; });
    size_t n = 0;
    for (const Bytes& r : w) {
      if (n && r.begin <= w[n - 1].end) w[n - 1].end = std::max(w[n - 1].end, r.end);
      else w[n++] = r;
    }
    w.resize(n);
    return w;
  };
  auto written = [&](WriteCache& cache, uint32_t tile, uint64_t begin, uint64_t end, int64_t first, int64_t last) {
    for (int64_t s = first; s <= last; ++s) {
      const Step& st = program[static_cast<size_t>(s)];
      switch (st.kind) {
        case StepKind::kCompute: {
          const auto& sched = exe.compute_schedule()[st.index];
          auto tv = std::lower_bound(sched.begin(), sched.end(), tile,
                                     [](const Executable::TileVertices& x, uint32_t t) { return x.tile < t; });
          if (tv == sched.end() || tv->tile != tile) break;
          for (const Vertex* v : tv->vertices)
            for (const Field* f : v->fields())
              if (f->access != Access::kRead && f->count &&
                  overlap(Bytes{f->byte_offset, f->byte_offset + f->count * device_type_size(g.var(f->var).dtype)}, begin, end))
                return true;
          break;
        }
        case StepKind::kExchange: {
          // The sending exchange reads the sender's variable, so nothing it
          // writes shares those bytes (both are live then) unless it writes
          // that variable itself: a staged exchange.
          if (s == first) {
            if (exe.staged(st.index)) return true;
            break;
          }
          const auto& w = exchange_written(cache, st.index, tile);
          auto r = std::upper_bound(w.begin(), w.end(), begin, [](uint64_t b, const Bytes& x) { return b < x.end; });
          if (r != w.end() && r->begin < end) return true;
          break;
        }
        case StepKind::kHostToDevice: {
          const VarId v = g.inputs()[st.index].tensor.var;
          const Variable& var = g.var(v);
          const TileShare* sh = var.share(tile);
          if (!sh) break;
          const uint64_t at = exe.var_offset(v, static_cast<size_t>(sh - var.tiles.data()));
          if (overlap(Bytes{at, at + sh->count * device_type_size(var.dtype)}, begin, end)) return true;
          break;
        }
        case StepKind::kDeviceToHost:
          break;
      }
    }
    return false;
  };

  // Each vertex field reading such a variable aliases the runs it covers, or
  // marks them needed. The runs a field covers fall into stretches received
  // from one sender at one displacement; a field aliases one stretch that
  // covers it whole, or, when its codelet reads it piecewise, any of them.
  struct Stretch {
    uint64_t begin, end;  // bytes of the receiver's memory
    const Run *first, *last;  // its runs
    Source from;
  };
  // Compute sets are visited on several host threads, each with its own
  // cache of exchange writes; the runs found needed are marked afterwards.
  struct FieldScratch {
    std::vector<Stretch> stretches;
    WriteCache writes;
    std::vector<const Run*> needed;
    uint64_t aliased_fields = 0;
  };
  auto visit_compute_set = [&](int64_t ci, FieldScratch& sc) {
    auto& stretches = sc.stretches;
    if (cs_at[ci] == -1) return;  // never runs: reads nothing
    for (auto& vx : g.compute_sets()[ci].vertices)
      for (Field* f : vx->all_fields()) {
        if (f->access != Access::kRead || !f->count || !ok[f->var]) continue;
        const uint64_t s = share_of(f->var, f->tile);
        Run* last = runs + run_start[s + 1];
        const uint64_t es = device_type_size(g.var(f->var).dtype);
        const uint64_t begin = f->byte_offset, end = begin + f->count * es;
        // Shares hold few runs: scan from the first.
        Run* r = runs + run_start[s];
        while (r != last && r->end <= begin) ++r;
        stretches.clear();
        bool disjoint = true;
        for (Run* q = r; q != last; ++q) {
          const Bytes w{q->begin, q->end};
          if (w.begin >= end) break;
          if (w.end <= begin) continue;
          const Source from = source(*q, f->tile);
          if (!stretches.empty()) {
            Stretch& b = stretches.back();
            if (from.same(b.from) && w.begin <= b.end && src_var(*q) == src_var(*b.first)) {
              b.end = std::max(b.end, w.end);
              b.last = q + 1;
              continue;
            }
            if (w.begin < b.end) disjoint = false;  // bytes received twice
          }
          stretches.push_back(Stretch{std::max(w.begin, begin), w.end, q, q + 1, from});
        }
        const bool one = stretches.size() == 1 && stretches[0].begin == begin && stretches[0].end >= end;
        const int64_t pc = cs_at[ci];
        auto aliasable = [&](const Stretch& st) {
          const Source& h = st.from;
          const int64_t pe = ex_at[h.exchange];
          if (!h.contiguous || pc < 0 || pe < 0 || pe >= pc || pc - pe > kMaxDistance || segment_of(pe) != segment_of(pc))
            return false;
          const uint64_t hi = std::min(st.end, end);
          const int64_t src = static_cast<int64_t>(exe.arena_offset(f->tile) + st.begin) + h.delta -
                              static_cast<int64_t>(exe.arena_offset(h.tile));
          return src >= 0 &&
                 !written(sc.writes, h.tile, static_cast<uint64_t>(src), static_cast<uint64_t>(src) + (hi - st.begin), pe, pc);
        };
        auto needed = [&](const Stretch& st) {
          for (const Run* q = st.first; q != st.last; ++q) sc.needed.push_back(q);
        };
        if (!disjoint || (!one && !f->piecewise)) {
          for (const Stretch& st : stretches) needed(st);
          continue;
        }
        if (one) {
          if (aliasable(stretches[0])) {
            f->address = static_cast<int64_t>(f->byte_offset) + stretches[0].from.delta;
            f->alias_tile = stretches[0].from.tile;
            f->alias_var = src_var(*stretches[0].first);
            ++sc.aliased_fields;
          } else {
            needed(stretches[0]);
          }
          continue;
        }
        // In pieces: aliased stretches at their senders, the rest (and any
        // bytes nothing receives) in the field's own bytes.
        std::vector<Field::Piece> pieces;
        auto own = [&](uint64_t from) {
          if (pieces.empty() || pieces.back().tile != UINT32_MAX)
            pieces.push_back(Field::Piece{(from - begin) / es, static_cast<int64_t>(from), UINT32_MAX, 0});
        };
        uint64_t at = begin;
        bool any = false;
        for (const Stretch& st : stretches) {
          if (st.begin > at) own(at);
          if (aliasable(st)) {
            pieces.push_back(Field::Piece{(st.begin - begin) / es, static_cast<int64_t>(st.begin) + st.from.delta,
                                          st.from.tile, src_var(*st.first)});
            any = true;
          } else {
            needed(st);
            own(st.begin);
          }
          at = std::min(st.end, end);
        }
        if (at < end) own(at);
        if (any) {
          f->pieces = std::move(pieces);
          ++sc.aliased_fields;
        }
      }
  };
  const auto scratches =
      on_host_threads<FieldScratch>(static_cast<int64_t>(g.compute_sets().size()), visit_compute_set);
  for (const auto& sc : scratches) {
    for (const Run* q : sc.needed) skip[q->exchange][q->byte_copy] = 0;
    *aliased_fields += sc.aliased_fields;
  }
  return skip;
}

}  // namespace neurenix
