// Checked mode: verifies that every field and copy of an executable stays
// inside its tile's arena and its variable's slice (see engine.h).
#include <algorithm>
#include <string>

#include "neurenix/engine.h"
#include "neurenix/error.h"

namespace neurenix {
namespace {

// Byte ranges as signed 128-bit numbers, so that no descriptor, however
// corrupt, overflows the arithmetic that checks it.
using Wide = __int128;

struct Bytes {
  Wide begin, end;
  bool inside(const Bytes& o) const { return begin >= o.begin && end <= o.end; }
};

std::string str(Wide v) {
  if (v < 0) return "-" + str(-v);
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v > 0);
  return s;
}

std::string str(const Bytes& b) { return "bytes [" + str(b.begin) + ", " + str(b.end) + ")"; }

class Checker {
 public:
  explicit Checker(const Executable& exe) : exe_(exe), g_(exe.graph()) {}

  std::string where(uint32_t tile) const {
    return "IPU " + std::to_string(g_.ipu_of_tile(tile)) + " tile " + std::to_string(tile % g_.tiles_per_ipu());
  }

  [[noreturn]] void violation(const std::string& what) const {
    fail(ErrorCode::kInternal, "checked mode: " + what);
  }

  // The slice of `var` on `tile` (all of its share there), checked to lie in
  // the tile's arena; who() names the user in messages (built only for them).
  template <typename Who>
  Bytes slice(VarId var, uint32_t tile, const Who& who) const {
    if (var >= g_.num_vars()) violation(who() + " names variable " + std::to_string(var) + ", which does not exist");
    const Variable& v = g_.var(var);
    if (tile >= exe_.arena_bytes().size()) violation(who() + " names tile " + std::to_string(tile) + ", which does not exist");
    const TileShare* s = v.share(tile);
    if (!s) violation(who() + " names '" + v.name + "' on " + where(tile) + ", which holds none of it");
    const Wide base = exe_.var_offset(var, static_cast<size_t>(s - v.tiles.data()));
    const Bytes b{base, base + static_cast<Wide>(s->count) * device_type_size(v.dtype)};
    const Bytes arena{0, static_cast<Wide>(exe_.arena_bytes()[tile])};
    if (!b.inside(arena))
      violation(who() + ": the slice of '" + v.name + "' on " + where(tile) + " is " + str(b) + " but the tile's arena is " +
                str(arena));
    return b;
  }
  // The same slice in the host block (Executable::host_offset), where the
  // host reads and writes it.
  Bytes host_slice(VarId var, uint32_t tile) const {
    const Variable& v = g_.var(var);
    const TileShare* s = v.share(tile);
    const Wide base = exe_.host_offset(var, static_cast<size_t>(s - v.tiles.data()));
    return Bytes{base, base + static_cast<Wide>(s->count) * device_type_size(v.dtype)};
  }
  // The same, checked to lie among the block's variables.
  template <typename Who>
  Bytes held_slice(VarId var, uint32_t tile, const Who& who) const {
    const Bytes h = host_slice(var, tile);
    if (!h.inside(Bytes{0, static_cast<Wide>(exe_.variables_end())}))
      violation(who() + ": '" + g_.var(var).name + "' on " + where(tile) + " is " + str(h) +
                " of the host block, past the variables' end " + str(exe_.variables_end()));
    return h;
  }
  // Where byte `at` relative to `tile`'s arena is in the block.
  Wide in_block(uint32_t tile, Wide at) const { return static_cast<Wide>(exe_.arena_offset(tile)) + at; }

  void field(const Vertex& vx, size_t index, const std::string& cs, size_t fi, const Field& f) const {
    if (f.count == 0) return;  // names no memory
    const auto who = [&] {
      return std::string("vertex ") + vx.name() + " #" + std::to_string(index) + " of compute set '" + cs + "' on " +
             where(vx.tile) + ", field " + std::to_string(fi);
    };
    if (f.tile != vx.tile) violation(who() + " names memory of " + where(f.tile));
    const Bytes s = slice(f.var, f.tile, who);
    const Variable& v = g_.var(f.var);
    const Wide es = device_type_size(v.dtype);
    const Wide first = f.local, end = first + f.count;
    const Bytes elems{s.begin + first * es, s.begin + end * es};
    const Bytes bytes{f.byte_offset, f.byte_offset + static_cast<Wide>(f.count) * es};
    const auto range = [&] { return "elements [" + str(first) + ", " + str(end) + ")"; };
    if (!elems.inside(s))
      violation(who() + ": " + range() + " of '" + v.name + "' are " + str(elems) + ", outside its slice on that tile, " + str(s));
    if (bytes.begin != elems.begin || !bytes.inside(s))
      violation(who() + ": '" + v.name + "' " + range() + " belong at " + str(elems) + " but the field points at " + str(bytes) +
                " (the slice is " + str(s) + ")");
    if (f.pieces.empty()) {
      aliased(who, f, 0, f.count, f.address, f.alias_tile, f.alias_var, es);
      return;
    }
    if (!f.piecewise) violation(who() + " is in pieces but its vertex does not read it so");
    for (size_t i = 0; i < f.pieces.size(); ++i) {
      const Field::Piece& p = f.pieces[i];
      const uint64_t end = i + 1 < f.pieces.size() ? f.pieces[i + 1].begin : f.count;
      if ((i == 0 && p.begin != 0) || end <= p.begin || end > f.count)
        violation(who() + ": its pieces do not cover elements [0, " + str(f.count) + ") in order");
      aliased(who, f, p.begin, end, p.address, p.tile, p.var, es);
    }
  }

  // Elements [first, end) of field `f`, read at `address`: its own bytes
  // there, or, for a receive alias from `tile`, bytes inside the sender's
  // slice of `var` there.
  template <typename Who>
  void aliased(const Who& who, const Field& f, uint64_t first, uint64_t end, int64_t address, uint32_t tile, VarId var,
               Wide es) const {
    if (tile == UINT32_MAX) {
      // Its own bytes (a shadowed field's, in its shadow region: shadows()).
      if (f.shadow) return;
      const Bytes own = held_slice(f.var, f.tile, who);
      const Wide at = own.begin + static_cast<Wide>(f.local + first) * es;
      if (in_block(f.tile, address) != at)
        violation(who() + ": its elements [" + str(first) + ", " + str(end) + ") are at " + str(at) +
                  " of the host block but the vertex reads them at " + str(in_block(f.tile, address)));
      return;
    }
    if (f.shadow) violation(who() + " is shadowed and a receive alias at once");
    if (f.access != Access::kRead) violation(who() + " writes through a receive alias");
    if (tile >= exe_.arena_bytes().size() || var >= g_.num_vars())
      violation(who() + " aliases a tile or variable that does not exist");
    slice(var, tile, who);
    Bytes sender = held_slice(var, tile, who);
    if (device_type_size(g_.var(var).dtype) != es)
      violation(who() + " aliases '" + g_.var(var).name + "', of another element size");
    const Wide at = in_block(f.tile, address);
    const Bytes read{at, at + static_cast<Wide>(end - first) * es};
    // A piece may run on into the variable's next shares where they lie
    // back to back in the block (merged pieces, host_layout.cc).
    if (read.begin >= sender.begin && read.begin < sender.end && read.end > sender.end) {
      const Variable& v = g_.var(var);
      for (size_t i = static_cast<size_t>(v.share(tile) - v.tiles.data()) + 1; i < v.tiles.size() && read.end > sender.end; ++i) {
        const Bytes next = held_slice(var, v.tiles[i].tile, who);
        if (next.begin != sender.end) break;
        sender.end = next.end;
      }
    }
    if (!read.inside(sender))
      violation(who() + " aliases " + str(read) + " of the host block but '" + g_.var(var).name + "' on " + where(tile) +
                " is " + str(sender) + " there");
  }

  // A copy into a shadow region (`to_region`) writes bytes of its tile, at
  // its region's base (shadows() checks where); any other reads and writes
  // the host block.
  template <typename Who>
  void copy(const Copy& c, const Executable::ByteCopy& b, uint32_t dst_tile, bool to_region, const Who& who) const {
    if (b.src_tile != c.src_tile || dst_tile != c.dst_tile)
      violation(who() + " is resolved between other tiles (" + where(b.src_tile) + " to " + where(dst_tile) + ")");
    if (c.count == 0 || c.outer == 0) return;
    slice(c.src, c.src_tile, who);
    const Bytes src = held_slice(c.src, c.src_tile, who);
    const Bytes in_tile = slice(c.dst, c.dst_tile, who);
    const Bytes dst = to_region ? in_tile : held_slice(c.dst, c.dst_tile, who);
    const Variable& sv = g_.var(c.src);
    const Variable& dv = g_.var(c.dst);
    if (b.elem != device_type_size(sv.dtype) || b.elem != device_type_size(dv.dtype))
      violation(who() + " moves " + std::to_string(b.elem) + "-byte elements between '" + sv.name + "' and '" + dv.name + "'");
    // Affine in the row and element index: its extremes are at the corners.
    const Wide rows = static_cast<Wide>(b.outer) - 1, last = static_cast<Wide>(b.count) - 1;
    const Wide so = rows * b.src_outer, ss = last * b.src_stride, d_o = rows * b.dst_outer;
    const Wide from = in_block(b.src_tile, b.src_byte), to = to_region ? Wide{b.dst_byte} : in_block(dst_tile, b.dst_byte);
    const Bytes read{from + std::min<Wide>(0, so) + std::min<Wide>(0, ss), from + std::max<Wide>(0, so) + std::max<Wide>(0, ss) + b.elem};
    const Bytes write{to + std::min<Wide>(0, d_o), to + std::max<Wide>(0, d_o) + static_cast<Wide>(b.count) * b.elem};
    if (!read.inside(src))
      violation(who() + " reads " + str(read) + " of the host block but '" + sv.name + "' on " + where(c.src_tile) +
                " is " + str(src) + " there");
    if (!write.inside(dst))
      violation(who() + " writes " + str(write) + (to_region ? " of its tile" : " of the host block") + " but '" + dv.name +
                "' on " + where(c.dst_tile) + " is " + str(dst) + " there");
  }

  // The form the host runs must be the byte copy it stands for.
  template <typename Who>
  void host_copy(const std::vector<Executable::HostCopy>& hc, uint32_t k, const Executable::ByteCopy& b,
                 const Who& who) const {
    if (k >= hc.size()) violation(who() + " has no host copy");
    const Executable::HostCopy& h = hc[k];
    const uint64_t src = exe_.arena_offset(b.src_tile) + b.src_byte;
    const uint64_t row = static_cast<uint64_t>(b.count) * b.elem;
    // What the host does with it, read back from its form: one run, rows
    // one after the other, or the byte copy itself.
    bool same;
    if (h.src == Executable::kPatternCopy)
      same = true;
    else if (!h.rows())
      same = b.is_run() && h.src == src && h.dst_byte == b.dst_byte && h.bytes == row;
    else
      same = b.contiguous_rows() && h.rows_src() == src && h.dst_byte == b.dst_byte && h.row_bytes() == row &&
             h.outer() == b.outer && b.src_outer == static_cast<int64_t>(row) &&
             static_cast<int64_t>(h.dst_outer()) == b.dst_outer;
    // And the form the compiler gives it (a run or rows it could move are
    // not left to the slower general path).
    const Executable::HostCopy want = Executable::host_copy_of(b, src);
    if (!same || h.src != want.src || h.dst_byte != want.dst_byte || h.bytes != want.bytes)
      violation(who() + " is run by the host as another copy");
  }

  void stream(const Tensor& t, const std::string& who) const {
    if (t.var >= g_.num_vars()) violation(who + " names a variable that does not exist");
    for (const TileShare& s : g_.var(t.var).tiles) {
      slice(t.var, s.tile, [&] { return who; });
      held_slice(t.var, s.tile, [&] { return who; });
    }
  }

  void run() const {
    for (size_t ci = 0; ci < g_.compute_sets().size(); ++ci) {
      const ComputeSet& cs = g_.compute_sets()[ci];
      for (size_t vi = 0; vi < cs.vertices.size(); ++vi) {
        // (compile() lists every vertex's fields.)
        Vertex& vx = *cs.vertices[vi];
        const auto who = [&] { return std::string("vertex ") + vx.name() + " #" + std::to_string(vi) + " of compute set '" + cs.name + "'"; };
        if (vx.tile >= exe_.arena_bytes().size())
          violation(who() + " runs on tile " + std::to_string(vx.tile) + ", which does not exist");
        const std::vector<Field*>& fields = vx.all_fields();
        for (size_t fi = 0; fi < fields.size(); ++fi) field(vx, vi, cs.name, fi, *fields[fi]);
        // What is checked is what the codelet reads (its FieldRefs).
        if (!vx.refreshed())
          violation(who() + " has a field changed after the program was compiled: its codelet would not see the change");
      }
    }
    // The copies into shadow regions (per exchange).
    std::vector<std::vector<uint8_t>> to_region(g_.exchanges().size());
    for (size_t s = 0; s < exe_.program().size(); ++s) {
      if (!exe_.shadowed(s) || exe_.program()[s].kind != StepKind::kExchange) continue;
      auto& mark = to_region[exe_.program()[s].index];
      mark.resize(exe_.byte_copies()[exe_.program()[s].index].size(), 0);
      for (const auto& ft : exe_.fused(s))
        for (uint32_t k = ft.begin; k < ft.shadow_end && k < mark.size(); ++k) mark[k] = 1;
    }
    for (size_t ei = 0; ei < g_.exchanges().size(); ++ei) {
      const auto ex = [&] { return "exchange '" + g_.exchanges()[ei].name + "'"; };
      const auto& graph_copies = g_.exchanges()[ei].copies;
      const auto& order = exe_.copy_order()[ei];
      const auto& bytes = exe_.byte_schedule()[ei];
      const auto& copies = exe_.byte_copies()[ei];
      const auto& aliased = exe_.aliased_copies()[ei];
      if (order.size() != copies.size() || copies.size() + aliased.size() != graph_copies.size())
        violation(ex() + " is resolved to " + std::to_string(copies.size()) + " byte copies and " +
                  std::to_string(aliased.size()) + " receive aliases for its " + std::to_string(graph_copies.size()) +
                  " copies");
      std::vector<bool> resolved(graph_copies.size(), false);
      for (uint32_t k : aliased) {
        if (k >= graph_copies.size() || resolved[k]) violation(ex() + ": receive alias " + std::to_string(k) + " is no copy of its own");
        resolved[k] = true;
      }
      for (const auto& tb : bytes) {
        if (tb.end < tb.begin || tb.end > copies.size())
          violation(ex() + ": the resolved copies to " + where(tb.dst_tile) + " are not its copies");
        for (uint32_t k = tb.begin; k < tb.end; ++k) {
          if (order[k] >= graph_copies.size() || resolved[order[k]])
            violation(ex() + ": byte copy " + std::to_string(k) + " resolves no copy of its own");
          resolved[order[k]] = true;
          const Copy& c = graph_copies[order[k]];
          const auto who = [&] {
            return "copy " + std::to_string(order[k]) + " of " + ex() + " from " + where(c.src_tile) + " to " +
                   where(c.dst_tile);
          };
          copy(c, copies[k], tb.dst_tile, !to_region[ei].empty() && to_region[ei][k], who);
          if (exe_.fits()) host_copy(exe_.host_copies()[ei], k, copies[k], who);
        }
      }
    }
    shadows();
    for (const HostStream& s : g_.inputs()) stream(s.tensor, "input stream '" + s.name + "'");
    for (const HostStream& s : g_.outputs()) stream(s.tensor, "output stream '" + s.name + "'");
    for (size_t v = 0; v < g_.num_vars(); ++v)
      if (g_.var(static_cast<VarId>(v)).kind == VarKind::kConstant && g_.var(static_cast<VarId>(v)).data.owner)
        stream(Tensor{static_cast<VarId>(v), g_.var(static_cast<VarId>(v)).shape},
               "constant '" + g_.var(static_cast<VarId>(v)).name + "'");
  }

  // Shadowed steps (Executable::shadowed). The regions lie past the arenas
  // in the block; a step's tiles are grouped by range as shadow_range says;
  // the copies a tile runs into its region write inside it, and no copy of
  // the same variable to the same tile writes the arena; the fields that
  // read a shadowed variable are shadowed, belong to vertices that run right
  // after their tile's copies (not a late tile's), and are read where the
  // copies put them; nothing else reads or writes a shadowed variable (no
  // other step's field, copy or host stream).
  void shadows() const {
    if (exe_.shadow_block_bytes() != 0) {
      const Wide arenas = static_cast<Wide>(exe_.variables_end());
      const Wide regions_end = static_cast<Wide>(exe_.shadow_offset(Executable::kShadowRanges - 1)) +
                               static_cast<Wide>(exe_.shadow_region_bytes());
      if (static_cast<Wide>(exe_.shadow_offset(0)) < arenas || regions_end > static_cast<Wide>(exe_.block_bytes()))
        violation("the shadow regions [" + str(exe_.shadow_offset(0)) + ", " + str(regions_end) +
                  ") are not between the variables' end " + str(arenas) + " and the block's " + str(exe_.block_bytes()));
    }
    std::vector<uint8_t> shadowed_var(g_.num_vars(), 0), shadow_cs(g_.compute_sets().size(), 0);
    std::vector<uint8_t> shadow_ex(g_.exchanges().size(), 0);
    for (size_t s = 0; s < exe_.program().size(); ++s) {
      if (!exe_.shadowed(s)) continue;
      const Step& ex = exe_.program()[s];
      if (ex.kind != StepKind::kExchange || s + 1 >= exe_.program().size() ||
          exe_.program()[s + 1].kind != StepKind::kCompute)
        violation("program step " + std::to_string(s) + " is shadowed but not an exchange before a compute step");
      const uint32_t cs = exe_.program()[s + 1].index;
      const std::string ename = "exchange '" + g_.exchanges()[ex.index].name + "'";
      shadow_cs[cs] = 1;
      shadow_ex[ex.index] = 1;
      const auto& fused = exe_.fused(s);
      const auto& bounds = exe_.shadow_bounds(s);
      if (bounds.size() != Executable::kShadowRanges + 1 || bounds.front() != 0 || bounds.back() != fused.size())
        violation(ename + ": its tiles are not grouped by shadow range");
      for (uint32_t r = 0; r < Executable::kShadowRanges; ++r) {
        if (bounds[r + 1] < bounds[r]) violation(ename + ": its tiles are not grouped by shadow range");
        for (uint32_t i = bounds[r]; i < bounds[r + 1]; ++i)
          if (exe_.shadow_range(fused[i].tile) != r)
            violation(ename + ": " + where(fused[i].tile) + " is run with shadow range " + std::to_string(r));
      }
      const auto& graph_copies = g_.exchanges()[ex.index].copies;
      const auto& order = exe_.copy_order()[ex.index];
      const auto& copies = exe_.byte_copies()[ex.index];
      // Per fused tile: where its byte 0 is shadowed, and the variables
      // written to its region and to its arena.
      std::vector<Wide> base(g_.num_tiles(), -1);
      std::vector<std::vector<VarId>> to_region(g_.num_tiles()), to_arena(g_.num_tiles());
      std::vector<const Vertex*> early;  // vertices run right after their tile's copies
      // A tile's bytes [lo, lo + shadow_region_bytes) may be shadowed.
      const auto region = [&](uint32_t tile) {
        const Wide lo = static_cast<Wide>(exe_.shadow_offset(exe_.shadow_range(tile))) - base[tile];
        return Bytes{lo, lo + static_cast<Wide>(exe_.shadow_region_bytes())};
      };
      for (const auto& ft : fused) {
        if (ft.shadow_end < ft.begin || ft.shadow_end > ft.end || ft.tile >= g_.num_tiles())
          violation(ename + ": the shadowed copies to " + where(ft.tile) + " are not its copies");
        base[ft.tile] = static_cast<Wide>(ft.shadow_base);
        early.insert(early.end(), ft.vertices.begin(), ft.vertices.end());
        if (ft.shadow_end > ft.begin && region(ft.tile).begin < 0)
          violation(ename + " shadows " + where(ft.tile) + " before its region");
        for (uint32_t k = ft.begin; k < ft.end; ++k) {
          const VarId dst = graph_copies[order[k]].dst;
          if (k >= ft.shadow_end) {
            to_arena[ft.tile].push_back(dst);
            continue;
          }
          const Executable::ByteCopy& b = copies[k];
          const Wide d_o = (static_cast<Wide>(b.outer) - 1) * b.dst_outer;
          const Bytes write{b.dst_byte + std::min<Wide>(0, d_o),
                            b.dst_byte + std::max<Wide>(0, d_o) + static_cast<Wide>(b.count) * b.elem};
          if (!write.inside(region(ft.tile)))
            violation("copy " + std::to_string(order[k]) + " of " + ename + " writes " + str(write) + " of " +
                      where(ft.tile) + " but its shadow region holds " + str(region(ft.tile)));
          to_region[ft.tile].push_back(dst);
          shadowed_var[dst] = 1;
        }
      }
      for (uint32_t t = 0; t < g_.num_tiles(); ++t)
        for (VarId v : to_arena[t])
          if (std::find(to_region[t].begin(), to_region[t].end(), v) != to_region[t].end())
            violation(ename + " writes '" + g_.var(v).name + "' on " + where(t) + " both to its shadow region and its arena");
      std::sort(early.begin(), early.end());
      for (const auto& v : g_.compute_sets()[cs].vertices)
        for (const Field* f : v->fields()) {
          if (!f->count) continue;
          const auto who = [&] {
            return std::string("vertex ") + v->name() + " of compute set '" + g_.compute_sets()[cs].name + "' on " +
                   where(v->tile) + " reading '" + g_.var(f->var).name + "'";
          };
          const auto& written = to_region[v->tile];
          if ((std::find(written.begin(), written.end(), f->var) != written.end()) != f->shadow)
            violation(who() + (f->shadow ? " reads a shadow region nothing copies to" : " reads its arena, though it is shadowed"));
          if (!f->shadow) continue;
          if (!std::binary_search(early.begin(), early.end(), v.get()))
            violation(who() + " reads a shadow region after its tile's turn (a late tile)");
          const Wide es = device_type_size(g_.var(f->var).dtype);
          const Bytes bytes{f->byte_offset, f->byte_offset + static_cast<Wide>(f->count) * es};
          if (base[v->tile] < 0 || f->address != base[v->tile] - static_cast<Wide>(exe_.arena_offset(v->tile)) +
                                                       static_cast<Wide>(f->byte_offset))
            violation(who() + " reads it at " + std::to_string(f->address) + ", not where its copies put it");
          if (!bytes.inside(region(v->tile)))
            violation(who() + ": " + str(bytes) + " are outside its shadow region " + str(region(v->tile)));
        }
    }
    for (size_t ci = 0; ci < g_.compute_sets().size(); ++ci)
      for (const auto& v : g_.compute_sets()[ci].vertices)
        for (const Field* f : v->fields())
          if ((f->shadow && !shadow_cs[ci]) || (shadowed_var[f->var] && !shadow_cs[ci]))
            violation(std::string("vertex ") + v->name() + " of compute set '" + g_.compute_sets()[ci].name + "' reads " +
                      (f->shadow ? "a shadow region" : "the shadowed '" + g_.var(f->var).name + "'") +
                      " outside a shadowed step");
    for (size_t ei = 0; ei < g_.exchanges().size(); ++ei)
      for (const Copy& c : g_.exchanges()[ei].copies)
        if (shadowed_var[c.src] || (shadowed_var[c.dst] && !shadow_ex[ei]))
          violation("exchange '" + g_.exchanges()[ei].name + "' copies the shadowed '" +
                    g_.var(shadowed_var[c.src] ? c.src : c.dst).name + "' outside its shadowed step");
    for (const auto* streams : {&g_.inputs(), &g_.outputs()})
      for (const HostStream& st : *streams)
        if (st.tensor.var < g_.num_vars() && shadowed_var[st.tensor.var])
          violation("host stream '" + st.name + "' streams the shadowed '" + g_.var(st.tensor.var).name + "'");
  }

 private:
  const Executable& exe_;
  const Graph& g_;
};

}  // namespace

void verify_memory_bounds(const Executable& exe) { Checker(exe).run(); }

}  // namespace neurenix
