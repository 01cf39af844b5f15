// Element-wise operations: the result takes the tile mapping of an operand of
// the same size, so that operand is read in place; every other operand is
// brought to the result's tiles by exchange: scalars as one element per tile,
// broadcast operands whose elements each cover a stretch of the result (a
// channel's scale over its plane) as one element per stretch (repeated
// operands), other broadcasts as expanded copies (an operand repeated as a
// cycle of at least 32 elements over the result, a bias over its rows,
// placed where the result's first period lies when nothing has placed it
// yet, and gathered a copy per row of each tile's block: gather_cycle).
#include "neurenix/ops/map.h"

#include <algorithm>

#include "neurenix/codelets/map.h"
#include "neurenix/error.h"
#include "neurenix/exchange.h"

namespace neurenix::ops {

Tensor fill(Graph& g, DeviceType dtype, const Shape& shape, double value, uint32_t ipu, const std::string& name) {
  Tensor out = g.add_variable(name, dtype, shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  g.map_linearly(out.var);
  uint32_t cs = g.add_compute_set(name + "/fill");
  for (const TileShare& s : g.var(out.var).tiles)
    g.add_vertex(cs, std::make_unique<FillVertex>(s.tile, Field{out.var, s.tile, 0, s.count}, dtype, value));
  g.execute(cs);
  return out;
}

namespace {

bool broadcastable(const Shape& in, const Shape& out) {
  if (in.size() > out.size()) return false;
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != out[lead + i] && in[i] != 1) return false;
  return true;
}

// The operand is the result's shape up to leading ones: same flat order.
bool same_elements(const Shape& in, const Shape& out) { return shape_numel(in) == shape_numel(out) && broadcastable(in, out); }

// Result elements an operand element covers at a time, when the broadcast
// repeats each operand element over that many consecutive result elements:
// the operand's dimensions from its first to its last that is not 1 are the
// result's, so result element e reads operand element (e / inner) % numel,
// inner the product of the result's dimensions after them. 0 otherwise.
uint64_t repeat_of(const Shape& in, const Shape& out) {
  const size_t lead = out.size() - in.size();
  size_t first = out.size(), last = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) {
      first = std::min(first, lead + i);
      last = lead + i;
    }
  if (first == out.size()) return 0;
  for (size_t i = first; i <= last; ++i)
    if (in[i - lead] != out[i]) return 0;
  uint64_t inner = 1;
  for (size_t i = last + 1; i < out.size(); ++i) inner *= out[i];
  return inner;
}

// A repeated operand is kept compact when each of its elements covers at
// least this many result elements: below, the table of runs would be about
// as large as the expanded copy.
constexpr uint64_t kMinRepeat = 8;

// An operand repeated as a cycle goes with the result's first period when
// the period has at least this many elements: a shorter one (a row of a
// few elements) lies within a tile's block many times over, and one copy
// per row of the block would cost more descriptors than the 2-D copies
// copy_view makes of the expanded operand.
constexpr uint64_t kMinCycle = 32;

// The runs of a repeated operand over the result's block on one tile, in
// the block's element order: (operand element, result elements covered).
// False when the block's intervals do not tile it in order.
bool repeat_runs(const Graph& g, VarId out, const TileShare& share, uint64_t inner, uint64_t period,
                 std::vector<std::pair<uint64_t, uint32_t>>& runs) {
  const Variable& v = g.var(out);
  std::vector<const TileInterval*> ivs;
  for (uint32_t ii : share.intervals) ivs.push_back(&v.mapping[ii]);
  std::sort(ivs.begin(), ivs.end(), [](const TileInterval* a, const TileInterval* b) { return a->local < b->local; });
  runs.clear();
  uint64_t local = 0;
  for (const TileInterval* iv : ivs) {
    if (iv->local != local) return false;
    for (uint64_t e = iv->begin; e < iv->end;) {
      const uint64_t stop = std::min(iv->end, (e / inner + 1) * inner);
      const uint64_t element = (e / inner) % period;
      if (!runs.empty() && runs.back().first == element && runs.back().second + (stop - e) <= UINT32_MAX)
        runs.back().second += static_cast<uint32_t>(stop - e);
      else
        runs.push_back({element, static_cast<uint32_t>(stop - e)});
      e = stop;
    }
    local += iv->end - iv->begin;
  }
  return local == share.count;
}

// An operand repeated as a cycle over the result (a bias over the rows of a
// product), placed where nothing has placed it yet: where the result's first
// period lies, so that each tile of the result receives each run of it it
// reads from one tile (a linear layout spreads a 1,024-element bias over
// 128 tiles, 8 elements each, and a tile holding 48 columns of the result
// gathers each of its rows from 6 of them).
void place_like_first_period(Graph& g, VarId var, VarId out) {
  const uint64_t period = g.var(var).numel;
  std::vector<TileInterval> ivs;
  for (const TileInterval& iv : g.var(out).mapping) {
    if (iv.begin >= period) break;  // (in element order)
    ivs.push_back(TileInterval{iv.begin, std::min(iv.end, period), iv.tile, 0});
  }
  g.set_mapping(var, std::move(ivs));
}

// A temporary holding counts[k] elements on the k-th of `tiles`, in that
// order, each tile's from its local element 0.
Tensor per_tile_temporary(Graph& g, const std::string& name, DeviceType dtype, const std::vector<TileShare>& tiles,
                          const std::vector<uint64_t>& counts, uint32_t ipu) {
  uint64_t total = 0;
  std::vector<TileInterval> ivs;
  for (size_t k = 0; k < tiles.size(); ++k) {
    ivs.push_back(TileInterval{total, total + counts[k], tiles[k].tile, 0});
    total += counts[k];
  }
  Tensor tmp = g.add_variable(name, dtype, {total}, VarKind::kTemporary, ipu);
  g.set_mapping(tmp.var, std::move(ivs));
  return tmp;
}

// The element type conversions an expression makes, for its plan: "" or
// "; casts to float16 x2, to float32 x1" (a float8 result is one conversion,
// made as it is stored).
std::string describe_casts(const std::vector<ExprInstr>& expr, DeviceType out_dtype) {
  const std::pair<ExprOpCode, const char*> casts[] = {{ExprOpCode::kCastF16, "float16"},
                                                      {ExprOpCode::kCastF32, "float32"},
                                                      {ExprOpCode::kCastI32, "int32"},
                                                      {ExprOpCode::kCastBool, "bool"}};
  std::string out;
  for (const auto& [op, type] : casts) {
    const auto n = std::count_if(expr.begin(), expr.end(), [op = op](const ExprInstr& i) { return i.op == op; });
    if (n) out += std::string(out.empty() ? "; casts to " : ", to ") + type + " x" + std::to_string(n);
  }
  if (is_float8(out_dtype)) out += std::string(out.empty() ? "; casts to " : ", to ") + device_type_name(out_dtype) + " x1";
  return out;
}

}  // namespace

Tensor map(Graph& g, const std::vector<ExprInstr>& expr, const std::vector<Tensor>& inputs, DeviceType out_dtype,
           const Shape& out_shape, uint32_t ipu, const std::string& name) {
  std::vector<DeviceType> types;
  for (const Tensor& t : inputs) {
    if (!broadcastable(t.shape, out_shape))
      fail(ErrorCode::kShapeMismatch, "element-wise '" + name + "': operand shape " + shape_str(t.shape) +
                                          " does not broadcast to " + shape_str(out_shape));
    if (g.var(t.var).ipu != ipu)
      fail(ErrorCode::kInvalidArgument, "element-wise '" + name + "': operand '" + g.var(t.var).name + "' is on IPU " +
                                            std::to_string(g.var(t.var).ipu) + ", not " + std::to_string(ipu));
    types.push_back(g.var(t.var).dtype);
  }
  ValueKind result = check_expression(expr, types);
  const bool out_float = is_float(out_dtype) || is_float8(out_dtype);
  if ((result == ValueKind::kFloat) != out_float)
    fail(ErrorCode::kInvalidArgument, "element-wise '" + name + "': expression result does not match the output type " +
                                          device_type_name(out_dtype));

  Tensor out = g.add_variable(name, out_dtype, out_shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  // Take the mapping of the first mapped operand holding the same elements.
  for (const Tensor& t : inputs) {
    if (same_elements(t.shape, out_shape) && t.numel() > 1) {
      g.ensure_mapped(t.var);
      g.clone_mapping(out.var, t.var);
      break;
    }
  }
  if (!g.var(out.var).mapped) g.map_linearly(out.var);
  // A copy: adding temporaries below may move the variable table.
  const std::vector<TileShare> out_tiles = g.var(out.var).tiles;

  uint32_t ex = g.add_exchange(name + "/operands");
  // Per operand: the variable whose blocks line up with the result's, or a
  // scalar variable with one element on every tile of the result.
  struct Source {
    VarId var;
    bool scalar;
    bool per_tile_scalar;  // one element per tile, in `tiles` order
    std::vector<std::vector<uint32_t>> runs{};  // a repeated operand: its runs per result tile, in `tiles` order
  };
  std::vector<Source> sources;
  std::string repeated;  // for the plan
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    // Repeated as a cycle: result element e reads operand element e % numel.
    const bool cycle = t.numel() >= kMinCycle && t.numel() < out.numel() && repeat_of(t.shape, out_shape) == 1;
    if (cycle && !g.var(t.var).mapped) place_like_first_period(g, t.var, out.var);
    g.ensure_mapped(t.var);
    if (t.numel() == 1) {
      // A scalar: read in place where it lives, copy one element to other tiles.
      bool everywhere = out_tiles.size() == 1 && g.var(t.var).share(out_tiles[0].tile) != nullptr;
      if (everywhere) {
        sources.push_back({t.var, true, false});
        continue;
      }
      Tensor tmp = per_tile_temporary(g, name + "/scalar", g.var(t.var).dtype, out_tiles,
                                      std::vector<uint64_t>(out_tiles.size(), 1), ipu);
      View src{t.var, 0, {out_tiles.size()}, {0}};
      copy_view(g, ex, src, View::of(tmp));
      sources.push_back({tmp.var, true, true});
      continue;
    }
    bool in_place = same_elements(t.shape, out_shape);
    if (in_place)
      for (const TileShare& s : out_tiles)
        if (!same_layout_on_tile(g, t.var, out.var, s.tile)) {
          in_place = false;
          break;
        }
    if (in_place) {
      sources.push_back({t.var, false, false});
      continue;
    }
    const uint64_t inner = repeat_of(t.shape, out_shape);
    if (inner >= kMinRepeat) {
      // One element per run on each result tile, received in stretches of
      // consecutive operand elements.
      std::vector<std::vector<std::pair<uint64_t, uint32_t>>> tile_runs(out_tiles.size());
      std::vector<uint64_t> counts(out_tiles.size());
      bool ok = true;
      uint64_t total = 0, covered = 0;
      for (size_t k = 0; k < out_tiles.size() && ok; ++k) {
        ok = repeat_runs(g, out.var, out_tiles[k], inner, t.numel(), tile_runs[k]);
        counts[k] = tile_runs[k].size();
        total += counts[k];
        covered += out_tiles[k].count;
      }
      // Compact only where it is: a result laid out across the stretches
      // (a column per tile) would hold a run, and its 4 bytes of state, per
      // element.
      const uint64_t es = device_type_size(g.var(t.var).dtype);
      if (ok && total * (es + 4) < covered * es) {
        Tensor tmp = per_tile_temporary(g, name + "/repeated", g.var(t.var).dtype, out_tiles, counts, ipu);
        Source src{tmp.var, false, false};
        src.runs.resize(out_tiles.size());
        uint64_t at = 0;
        for (size_t k = 0; k < out_tiles.size(); ++k) {
          const auto& r = tile_runs[k];
          for (size_t i = 0; i < r.size();) {
            size_t j = i + 1;
            while (j < r.size() && r[j].first == r[j - 1].first + 1) ++j;
            copy_view(g, ex, View{t.var, static_cast<int64_t>(r[i].first), {j - i}, {1}},
                      View{tmp.var, static_cast<int64_t>(at + i), {j - i}, {1}});
            i = j;
          }
          for (const auto& run : r) src.runs[k].push_back(run.second);
          at += r.size();
        }
        sources.push_back(std::move(src));
        repeated += "; operand " + std::to_string(i) + " repeated over stretches of " + std::to_string(inner);
        continue;
      }
    }
    Tensor tmp = cycle ? gather_cycle(g, ex, t, out, name + "/operand")
                       : gather_like(g, ex, broadcast_view(t, out_shape), g.var(t.var).dtype, out, name + "/operand");
    sources.push_back({tmp.var, false, false});
  }
  g.execute_exchange(ex);

  auto shared = std::make_shared<const std::vector<ExprInstr>>(expr);
  uint32_t cs = g.add_compute_set(name);
  for (size_t k = 0; k < out_tiles.size(); ++k) {
    const TileShare& s = out_tiles[k];
    std::vector<MapVertex::Operand> ops;
    for (size_t i = 0; i < sources.size(); ++i) {
      const Source& src = sources[i];
      const Variable& sv = g.var(src.var);
      Field f;
      if (src.scalar) {
        const uint64_t local = src.per_tile_scalar ? g.locate(src.var, k).local : 0;
        f = Field{src.var, s.tile, local, 1};
      } else if (!src.runs.empty()) {
        f = Field{src.var, s.tile, 0, src.runs[k].size()};
      } else {
        f = Field{src.var, s.tile, 0, s.count};
      }
      ops.push_back(MapVertex::Operand{f, sv.dtype, src.scalar, src.runs.empty() ? std::vector<uint32_t>{} : src.runs[k]});
    }
    g.add_vertex(cs, std::make_unique<MapVertex>(s.tile, shared, std::move(ops), Field{out.var, s.tile, 0, s.count},
                                                 out_dtype));
  }
  g.execute(cs);
  g.record_plan(OpPlan{name, "map", ipu, std::to_string(expr.size()) + " instruction(s)" + describe_casts(expr, out_dtype) + repeated,
                       static_cast<uint32_t>(out_tiles.size()), 0, 0});
  return out;
}

}  // namespace neurenix::ops
