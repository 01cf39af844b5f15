// The host block laid out by variable (Executable::host_offset).
//
// The compiler places each tile's variables in the tile's memory, and the
// host first keeps those memories whole, back to back (tile-major). A step
// walks the tiles, and each tile's share of a variable is then a few hundred
// bytes tens of kilobytes from the next tile's. Laid out by variable, the
// shares a step reads and writes on consecutive tiles are consecutive bytes,
// which the core's prefetchers follow.
#include "host_layout.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "first_fit.h"
#include "host_threads.h"
#include "neurenix/error.h"

namespace neurenix {

namespace {

constexpr uint64_t kLine = 64;

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

// Where the device bytes of variable shares are in the host block, from the
// offsets in tiles (with the last share asked for kept: copies come in long
// runs between the same two variables and tiles).
class Mover {
 public:
  explicit Mover(const Executable& exe) : exe_(exe), g_(exe.graph()) {}
  // Byte `byte` of `tile`'s memory, a byte of `var`'s share there.
  uint64_t operator()(VarId var, uint32_t tile, uint64_t byte) {
    if (var != var_ || tile != tile_) {
      const Variable& v = g_.var(var);
      const TileShare* s = v.share(tile);
      var_ = var;
      tile_ = tile;
      found_ = s != nullptr;
      if (found_) {
        const size_t i = static_cast<size_t>(s - v.tiles.data());
        delta_ = static_cast<int64_t>(exe_.host_offset(var, i)) - static_cast<int64_t>(exe_.var_offset(var, i));
      }
    }
    NX_CHECK(found_, "host layout: '" + g_.var(var).name + "' has no share on tile " + std::to_string(tile));
    return static_cast<uint64_t>(static_cast<int64_t>(byte) + delta_);
  }

 private:
  const Executable& exe_;
  const Graph& g_;
  VarId var_ = 0;
  uint32_t tile_ = UINT32_MAX;
  bool found_ = false;
  int64_t delta_ = 0;
};

}  // namespace

void lay_out_by_variable(Executable& exe, const std::vector<std::pair<int64_t, int64_t>>& live) {
  Graph& g = exe.graph();
  const size_t nvars = g.num_vars();
  const auto& program = exe.program_;
  if (!exe.fits() || exe.host_copies_.size() != g.exchanges().size()) return;

  // Lives on the host: the device's, and
  //  - into the step after a fused exchange for what it reads and writes
  //    (its tiles each run their copies, then their vertices of that step:
  //    a tile's vertices may run before another tile's copies);
  //  - to the last vertex that reads a variable through a receive alias (the
  //    alias search checked that nothing writes those bytes on the device
  //    meanwhile; here nothing else may take them).
  // Shadowed variables live in the shadow regions only.
  std::vector<LiveRange> life(live.size());
  for (size_t v = 0; v < live.size(); ++v) life[v] = LiveRange{live[v].first, live[v].second};
  std::vector<uint8_t> shadowed(nvars, 0);
  for (size_t s = 0; s + 1 < program.size(); ++s) {
    if (program[s].kind != StepKind::kExchange || (exe.fused_[s].empty() && exe.fused_late_[s].empty())) continue;
    const auto& copies = g.exchanges()[program[s].index].copies;
    for (size_t i = 0; i < copies.size(); ++i)
      if (!i || copies[i].src != copies[i - 1].src || copies[i].dst != copies[i - 1].dst) {
        life[copies[i].src].touch(static_cast<int64_t>(s + 1));
        life[copies[i].dst].touch(static_cast<int64_t>(s + 1));
      }
  }
  for (size_t s = 0; s < program.size(); ++s) {
    if (program[s].kind != StepKind::kCompute) continue;
    for (const auto& v : g.compute_sets()[program[s].index].vertices)
      for (const Field* f : v->fields()) {
        if (f->shadow) shadowed[f->var] = 1;
        if (f->pieces.empty() && f->alias_tile != UINT32_MAX) life[f->alias_var].touch(static_cast<int64_t>(s));
        for (const Field::Piece& p : f->pieces)
          if (p.tile != UINT32_MAX) life[p.var].touch(static_cast<int64_t>(s));
      }
  }

  // The shadowed copies, and the shadowed variables some other copy writes
  // (to a tile whose vertices do not read them): those keep their bytes.
  std::vector<std::vector<uint8_t>> to_region(g.exchanges().size());
  for (size_t s = 0; s < program.size(); ++s) {
    if (!exe.shadowed(s)) continue;
    const uint32_t e = program[s].index;
    auto& mark = to_region[e];
    mark.assign(exe.byte_copies_[e].size(), 0);
    for (const auto& ft : exe.fused_[s]) std::fill(mark.begin() + ft.begin, mark.begin() + ft.shadow_end, 1);
    for (size_t k = 0; k < mark.size(); ++k)
      if (!mark[k]) shadowed[g.exchanges()[e].copies[exe.copy_order_[e][k]].dst] = 0;
  }

  // The variables first-fit in the block by their first step (the larger
  // first among those that start together), each its shares in tile order,
  // back to back (no gap between shares: a vertex reading several senders'
  // shares reads one run), the variable on an 8-byte boundary.
  std::vector<VarId> order;
  std::vector<uint64_t> bytes(nvars, 0);
  for (size_t v = 0; v < nvars; ++v) {
    if (life[v].first < 0 || shadowed[v]) continue;
    const Variable& var = g.var(static_cast<VarId>(v));
    for (const TileShare& sh : var.tiles) bytes[v] += sh.count * device_type_size(var.dtype);
    bytes[v] = align_up(bytes[v]);
    order.push_back(static_cast<VarId>(v));
  }
  std::stable_sort(order.begin(), order.end(), [&](VarId a, VarId b) {
    return life[a].first != life[b].first ? life[a].first < life[b].first : bytes[a] > bytes[b];
  });
  FirstFit fit;
  std::vector<uint64_t> base(nvars, 0);
  for (VarId v : order) {
    fit.release_before(life[v].first);
    base[v] = fit.place(v, bytes[v], life[v].last);
  }
  const uint64_t variables_end = round_up(fit.hwm, kLine);
  // The shadow regions follow, far enough into the block that each fused
  // tile's base (its region's offset less its first shadowed byte in the
  // tile) is an offset in it.
  const uint64_t regions = exe.shadow_block_bytes_ ? Executable::kShadowRanges * exe.shadow_region_bytes_ : 0;
  uint64_t regions_at = variables_end;
  for (size_t s = 0; s < program.size(); ++s)
    if (exe.shadowed(s))
      for (const auto& ft : exe.fused_[s]) {
        const uint32_t r = exe.shadow_range(ft.tile);
        const uint64_t first = exe.shadow_offset(r) - ft.shadow_base, in_regions = r * exe.shadow_region_bytes_;
        if (first > in_regions) regions_at = std::max(regions_at, round_up(first - in_regions, kLine));
      }
  // Copies hold 32-bit offsets; and the host keeps tile memory within 1.2
  // times (and 4 KiB) the bytes the tiles' allocators placed (the
  // tile-major block).
  if (regions_at + regions > UINT32_MAX || variables_end * 5 > exe.variables_end_ * 6 + 5 * 4096) return;

  std::vector<std::vector<uint64_t>> host(nvars);
  for (size_t v = 0; v < nvars; ++v) {
    const Variable& var = g.var(static_cast<VarId>(v));
    auto& h = host[v];
    h.resize(var.tiles.size());
    uint64_t at = base[v];
    for (size_t i = 0; i < var.tiles.size(); ++i) {
      if (bytes[v] == 0) {
        h[i] = exe.var_offset(static_cast<VarId>(v), i);  // no bytes in the block (see compiler.h)
        continue;
      }
      h[i] = at;
      at += var.tiles[i].count * device_type_size(var.dtype);
    }
  }
  const std::vector<uint64_t> old_arena = exe.arena_offsets_;
  exe.host_offsets_ = std::move(host);
  const int64_t shift = static_cast<int64_t>(regions_at) - static_cast<int64_t>(exe.shadow_offset_);

  struct NoScratch {};
  // Fields: their own bytes, their senders' (receive aliases: their offset
  // from the tile's arena back to the sender's bytes) or their region's.
  on_host_threads<NoScratch>(static_cast<int64_t>(g.compute_sets().size()), [&](int64_t ci, NoScratch&) {
    Mover to_host(exe);
    for (auto& vx : g.compute_sets()[static_cast<size_t>(ci)].vertices)
      for (Field* f : vx->all_fields()) {
        if (f->count == 0) continue;  // names no memory
        const int64_t arena = static_cast<int64_t>(old_arena[f->tile]);
        if (f->shadow) {
          f->address += arena + shift;
        } else if (!f->pieces.empty()) {
          std::vector<Field::Piece> pieces;
          pieces.reserve(f->pieces.size());
          const int64_t es = static_cast<int64_t>(device_type_size(g.var(f->var).dtype));
          for (Field::Piece p : f->pieces) {
            if (p.tile == UINT32_MAX) {
              p.address = static_cast<int64_t>(to_host(f->var, f->tile, static_cast<uint64_t>(p.address)));
            } else {
              const int64_t src = p.address + arena - static_cast<int64_t>(old_arena[p.tile]);
              p.address = static_cast<int64_t>(to_host(p.var, p.tile, static_cast<uint64_t>(src)));
            }
            // Pieces of one variable whose senders' shares now lie back to
            // back are one run of the block: read as one piece (a window
            // whose channels straddle its senders' tiles is then read a
            // channel at a time in place; engine_check.cc accepts a piece
            // that runs on into the next shares).
            if (!pieces.empty()) {
              const Field::Piece& q = pieces.back();
              if (q.tile != UINT32_MAX && p.tile != UINT32_MAX && q.var == p.var &&
                  q.address + static_cast<int64_t>(p.begin - q.begin) * es == p.address)
                continue;
            }
            pieces.push_back(p);
          }
          f->pieces = pieces;
        } else if (f->alias_tile != UINT32_MAX) {
          const int64_t src = f->address + arena - static_cast<int64_t>(old_arena[f->alias_tile]);
          f->address = static_cast<int64_t>(to_host(f->alias_var, f->alias_tile, static_cast<uint64_t>(src)));
        } else {
          f->address = static_cast<int64_t>(to_host(f->var, f->tile, static_cast<uint64_t>(f->address)));
        }
      }
  });

  // Copies: sources in the block; destinations too, except the shadowed
  // copies' (their tile's region base plus the byte in the tile).
  for (size_t s = 0; s < program.size(); ++s)
    if (exe.shadowed(s))
      for (auto& ft : exe.fused_[s]) ft.shadow_base = static_cast<uint64_t>(static_cast<int64_t>(ft.shadow_base) + shift);
  on_host_threads<NoScratch>(static_cast<int64_t>(g.exchanges().size()), [&](int64_t x, NoScratch&) {
    const size_t e = static_cast<size_t>(x);
    const auto& copies = g.exchanges()[e].copies;
    const auto& order_e = exe.copy_order_[e];
    auto& bc = exe.byte_copies_[e];
    auto& hc = exe.host_copies_[e];
    const auto& mark = to_region[e];
    Mover src_host(exe), dst_host(exe);
    for (const auto& tb : exe.byte_schedule_[e])
      for (uint32_t k = tb.begin; k < tb.end; ++k) {
        const Copy& c = copies[order_e[k]];
        Executable::ByteCopy& b = bc[k];
        if (b.count && b.outer) {
          b.src_byte = static_cast<uint32_t>(src_host(c.src, b.src_tile, b.src_byte));
          if (mark.empty() || !mark[k]) b.dst_byte = static_cast<uint32_t>(dst_host(c.dst, tb.dst_tile, b.dst_byte));
        }
        hc[k] = Executable::host_copy_of(b, b.src_byte);
      }
  });

  std::fill(exe.arena_offsets_.begin(), exe.arena_offsets_.end(), 0);
  exe.variables_end_ = variables_end;
  exe.shadow_offset_ = regions_at;
  exe.block_bytes_ = regions ? regions_at + regions : variables_end;
  exe.shadow_block_bytes_ = regions;
  exe.by_variable_ = true;
}

}  // namespace neurenix
