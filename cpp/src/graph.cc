#include "neurenix/graph.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <sstream>

#include "neurenix/error.h"

namespace neurenix {

uint64_t shape_numel(const Shape& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// Where FieldRefs keep their fields: chunks of 256 KiB (aligned to their
// size, so that a field finds its chunk), filled in order and freed when
// their last field goes, so that one graph's fields lie together.
namespace {
constexpr size_t kChunkBytes = size_t{1} << 18;
struct FieldChunk {
  size_t used = 0;  // slots handed out
  size_t live = 0;  // of them not yet released
};
constexpr size_t kChunkHeader = 64;
constexpr size_t kChunkSlots = (kChunkBytes - kChunkHeader) / sizeof(Field);
FieldChunk* field_store_current = nullptr;
// (Made on first use and never destroyed: fields may be made before and
// outlive the other statics.)
std::mutex& field_store_mutex() {
  static std::mutex& m = *new std::mutex;
  return m;
}

Field* store_field(const Field& f) {
  std::lock_guard<std::mutex> lock(field_store_mutex());
  if (!field_store_current || field_store_current->used == kChunkSlots) {
    if (field_store_current && field_store_current->live == 0) std::free(field_store_current);
    field_store_current = nullptr;
    void* mem = std::aligned_alloc(kChunkBytes, kChunkBytes);
    if (!mem) throw std::bad_alloc();
    field_store_current = new (mem) FieldChunk();
  }
  FieldChunk* c = field_store_current;
  Field* slot = reinterpret_cast<Field*>(reinterpret_cast<char*>(c) + kChunkHeader) + c->used;
  new (slot) Field(f);  // (may throw: nothing counted yet)
  ++c->used;
  ++c->live;
  return slot;
}

void release_field(Field* f) {
  f->~Field();
  std::lock_guard<std::mutex> lock(field_store_mutex());
  auto* c = reinterpret_cast<FieldChunk*>(reinterpret_cast<uintptr_t>(f) & ~(uintptr_t{kChunkBytes} - 1));
  if (--c->live == 0 && c != field_store_current) std::free(c);
}
}  // namespace

FieldRef::FieldRef(const Field& f) : field_(store_field(f)) { refresh(); }

FieldRef::~FieldRef() {
  if (field_) release_field(field_);
}

const TileShare* Variable::share(uint32_t tile) const {
  // Most variables are spread over a run of consecutive tiles, or two (a
  // run that wraps past the last tile): the share then sits as far from
  // the first share, or back from the last, as its tile is from theirs,
  // found without a search.
  if (tiles.empty() || tile < tiles.front().tile || tile > tiles.back().tile) return nullptr;
  const size_t from_front = tile - tiles.front().tile, from_back = tiles.back().tile - tile;
  if (from_front < tiles.size() && tiles[from_front].tile == tile) return &tiles[from_front];
  if (from_back < tiles.size() && tiles[tiles.size() - 1 - from_back].tile == tile)
    return &tiles[tiles.size() - 1 - from_back];
  auto it = std::lower_bound(tiles.begin(), tiles.end(), tile,
                             [](const TileShare& s, uint32_t t) { return s.tile < t; });
  if (it == tiles.end() || it->tile != tile) return nullptr;
  return &*it;
}

uint64_t Variable::bytes_on(uint32_t tile) const {
  const TileShare* s = share(tile);
  return s ? s->count * device_type_size(dtype) : 0;
}

View View::of(const Tensor& t) {
  View v;
  v.var = t.var;
  v.offset = 0;
  v.shape = t.shape;
  v.strides.assign(t.shape.size(), 1);
  for (int i = static_cast<int>(t.shape.size()) - 2; i >= 0; --i)
    v.strides[i] = v.strides[i + 1] * static_cast<int64_t>(t.shape[i + 1]);
  return v;
}

Graph::Graph(SystemSpec spec, uint32_t num_ipus)
    : spec_(std::move(spec)), target_(spec_.target()), num_ipus_(num_ipus), tiles_per_ipu_(spec_.tiles()) {
  spec_.validate();
  if (num_ipus == 0 || num_ipus > spec_.num_ipus)
    fail(ErrorCode::kInvalidArgument, "a graph for " + std::to_string(num_ipus) + " IPUs cannot be built on a system of " +
                                          std::to_string(spec_.num_ipus));
  next_tile_.assign(num_ipus, 0);
  constant_bytes_.assign(num_tiles(), 0);
}

uint32_t Graph::reserve_tiles(uint32_t ipu, uint32_t count) {
  NX_CHECK(ipu < num_ipus_, "reserve_tiles on a missing IPU");
  uint32_t start = next_tile_[ipu];
  next_tile_[ipu] = static_cast<uint32_t>((static_cast<uint64_t>(start) + count) % tiles_per_ipu_);
  return start;
}

uint32_t Graph::reserve_tiles_balanced(uint32_t ipu, const std::vector<uint64_t>& kept) {
  NX_CHECK(ipu < num_ipus_, "reserve_tiles_balanced on a missing IPU");
  const uint32_t count = static_cast<uint32_t>(kept.size()), T = tiles_per_ipu_;
  NX_CHECK(count <= T, "a window larger than the IPU");
  if (std::all_of(kept.begin(), kept.end(), [](uint64_t b) { return b == 0; })) return reserve_tiles(ipu, count);
  const uint64_t* load = constant_bytes_.data() + first_tile(ipu);
  const uint32_t rotating = next_tile_[ipu];
  uint32_t best = rotating;
  uint64_t best_peak = UINT64_MAX;
  // Every start, beginning with the rotating one: a later start must be
  // strictly better to win, and gives up as soon as it cannot be.
  for (uint32_t d = 0; d < T; ++d) {
    const uint32_t s = (rotating + d) % T;
    uint64_t peak = 0;
    for (uint32_t i = 0; i < count && peak < best_peak; ++i) {
      uint32_t t = s + i;
      if (t >= T) t -= T;
      peak = std::max(peak, load[t] + kept[i]);
    }
    if (peak < best_peak) {
      best_peak = peak;
      best = s;
    }
  }
  next_tile_[ipu] = static_cast<uint32_t>((static_cast<uint64_t>(best) + count) % T);
  return best;
}

uint64_t Graph::max_constant_bytes(uint32_t ipu) const {
  const auto begin = constant_bytes_.begin() + first_tile(ipu);
  return *std::max_element(begin, begin + tiles_per_ipu_);
}

void Graph::count_constant(const Variable& v, int sign) {
  if (v.kind != VarKind::kConstant) return;
  const uint64_t es = device_type_size(v.dtype);
  for (const TileShare& s : v.tiles) {
    if (sign > 0) constant_bytes_[s.tile] += s.count * es;
    else constant_bytes_[s.tile] -= s.count * es;
  }
}

Tensor Graph::add_variable(const std::string& name, DeviceType dtype, const Shape& shape, VarKind kind, uint32_t ipu) {
  if (ipu >= num_ipus_)
    fail(ErrorCode::kInvalidArgument, "variable '" + name + "' placed on IPU " + std::to_string(ipu) + " but the graph has " +
                                          std::to_string(num_ipus_) + " IPU(s)");
  Variable v;
  v.name = name;
  v.node = node_;
  v.dtype = dtype;
  v.shape = shape;
  v.numel = shape_numel(shape);
  v.kind = kind;
  v.ipu = ipu;
  if (v.numel == 0) v.mapped = true;  // nothing to place
  vars_.push_back(std::move(v));
  return Tensor{static_cast<VarId>(vars_.size() - 1), shape};
}

Tensor Graph::add_constant(const std::string& name, DeviceType dtype, const Shape& shape, uint32_t ipu,
                           ConstantBytes data) {
  uint64_t expect = shape_numel(shape) * device_type_size(dtype);
  if (!data.owner || data.size != expect)
    fail(ErrorCode::kInvalidArgument, "constant '" + name + "' has " + std::to_string(data.owner ? data.size : 0) +
                                          " bytes of data but shape " + shape_str(shape) + " of " + device_type_name(dtype) +
                                          " needs " + std::to_string(expect));
  Tensor t = add_variable(name, dtype, shape, VarKind::kConstant, ipu);
  vars_[t.var].data = std::move(data);
  return t;
}

Tensor Graph::add_constant(const std::string& name, DeviceType dtype, const Shape& shape, uint32_t ipu,
                           std::shared_ptr<const std::vector<uint8_t>> data) {
  ConstantBytes bytes;
  if (data) bytes = ConstantBytes{data, data->data(), data->size()};
  return add_constant(name, dtype, shape, ipu, std::move(bytes));
}

void Graph::rebuild_tiles(Variable& v) {
  v.tiles.clear();
  std::vector<uint32_t> order(v.mapping.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return v.mapping[a].tile < v.mapping[b].tile; });
  for (uint32_t idx : order) {
    TileInterval& iv = v.mapping[idx];
    if (v.tiles.empty() || v.tiles.back().tile != iv.tile) v.tiles.push_back(TileShare{iv.tile, 0, {}});
    TileShare& s = v.tiles.back();
    iv.local = s.count;
    s.count += iv.end - iv.begin;
    s.intervals.push_back(idx);
  }
  v.mapped = true;
  build_interval_index(v);
}

void Graph::build_interval_index(Variable& v) {
  v.interval_index.clear();
  v.interval_shift = 0;
  const auto& m = v.mapping;
  if (m.size() < 4) return;
  uint32_t shift = 0;
  while ((v.numel >> (shift + 1)) >= m.size()) ++shift;
  const uint64_t buckets = ((v.numel - 1) >> shift) + 1;
  v.interval_index.resize(buckets);
  uint32_t i = 0;
  for (uint64_t b = 0; b < buckets; ++b) {
    const uint64_t first = b << shift;
    while (m[i].end <= first) ++i;
    v.interval_index[b] = i;
  }
  v.interval_shift = shift;
}

void Graph::set_mapping(VarId id, std::vector<TileInterval> intervals) {
  Variable& v = var(id);
  // (Most mappings come in order: checked before sorting.)
  auto by_begin = [](const TileInterval& a, const TileInterval& b) { return a.begin < b.begin; };
  if (!std::is_sorted(intervals.begin(), intervals.end(), by_begin))
    std::sort(intervals.begin(), intervals.end(), by_begin);
  // Merge adjacent intervals on the same tile, drop empty ones (in place).
  std::vector<TileInterval>& merged = intervals;
  size_t m = 0;
  for (size_t i = 0; i < intervals.size(); ++i) {
    const TileInterval iv = intervals[i];
    if (iv.end == iv.begin) continue;
    if (m && merged[m - 1].tile == iv.tile && merged[m - 1].end == iv.begin)
      merged[m - 1].end = iv.end;
    else
      merged[m++] = iv;
  }
  merged.resize(m);
  uint64_t expect = 0;
  uint32_t lo = first_tile(v.ipu), hi = lo + tiles_per_ipu_;
  for (const auto& iv : merged) {
    NX_CHECK(iv.begin == expect, "mapping of '" + v.name + "' does not cover every element exactly once");
    NX_CHECK(iv.tile >= lo && iv.tile < hi, "mapping of '" + v.name + "' uses a tile outside its IPU");
    expect = iv.end;
  }
  NX_CHECK(expect == v.numel, "mapping of '" + v.name + "' does not cover the variable");
  if (v.mapped) count_constant(v, -1);
  v.mapping = std::move(merged);
  rebuild_tiles(v);
  count_constant(v, +1);
}

void Graph::map_linearly(VarId id, uint64_t grain) {
  Variable& v = var(id);
  if (v.numel == 0) {
    v.mapped = true;
    return;
  }
  uint64_t esize = device_type_size(v.dtype);
  if (grain == 0) grain = std::max<uint64_t>(1, 32 / esize);  // at least 32 bytes a tile
  uint64_t chunks = (v.numel + grain - 1) / grain;
  uint64_t ntiles = std::min<uint64_t>(tiles_per_ipu_, chunks);
  uint64_t per_tile = ((chunks + ntiles - 1) / ntiles) * grain;
  uint64_t used = (v.numel + per_tile - 1) / per_tile;
  uint32_t start = reserve_tiles(v.ipu, static_cast<uint32_t>(used));
  std::vector<TileInterval> ivs;
  uint64_t pos = 0;
  for (uint32_t i = 0; pos < v.numel; ++i) {
    uint64_t end = std::min(v.numel, pos + per_tile);
    ivs.push_back(TileInterval{pos, end, window_tile(v.ipu, start, i), 0});
    pos = end;
  }
  set_mapping(id, std::move(ivs));
}

void Graph::map_to_tile(VarId id, uint32_t tile) {
  Variable& v = var(id);
  set_mapping(id, {TileInterval{0, v.numel, tile, 0}});
}

void Graph::clone_mapping(VarId dst, VarId src) {
  const Variable& s = var(src);
  Variable& d = var(dst);
  NX_CHECK(s.mapped, "clone_mapping from an unmapped variable");
  NX_CHECK(s.numel == d.numel, "clone_mapping between variables of different sizes");
  if (s.ipu == d.ipu) {
    if (d.mapped) count_constant(d, -1);
    d.mapping = s.mapping;
    d.tiles = s.tiles;
    d.interval_index = s.interval_index;
    d.interval_shift = s.interval_shift;
    d.mapped = true;
    count_constant(d, +1);
    return;
  }
  std::vector<TileInterval> ivs = s.mapping;
  for (auto& iv : ivs) iv.tile = iv.tile - first_tile(s.ipu) + first_tile(d.ipu);
  set_mapping(dst, std::move(ivs));
}

void Graph::ensure_mapped(VarId id) {
  if (!var(id).mapped) map_linearly(id);
}

void Graph::locate(VarId id, uint64_t flat, uint32_t* tile, uint64_t* local, size_t* hint) const {
  const Variable& v = var(id);
  const auto& m = v.mapping;
  size_t i = *hint;
  if (i >= m.size() || flat < m[i].begin || flat >= m[i].end) {
    if (i + 1 < m.size() && flat >= m[i + 1].begin && flat < m[i + 1].end) {
      i = i + 1;
    } else {
      // Search only the intervals overlapping the element's bucket.
      auto lo = m.begin(), hi = m.end();
      if (!v.interval_index.empty() && flat < v.numel) {
        const uint64_t b = flat >> v.interval_shift;
        lo = m.begin() + v.interval_index[b];
        if (b + 1 < v.interval_index.size()) hi = m.begin() + v.interval_index[b + 1] + 1;
      }
      auto it = std::upper_bound(lo, hi, flat, [](uint64_t f, const TileInterval& iv) { return f < iv.begin; });
      NX_CHECK(it != m.begin(), "element outside the mapping of '" + v.name + "'");
      i = static_cast<size_t>(it - m.begin()) - 1;
      NX_CHECK(flat < m[i].end, "element outside the mapping of '" + v.name + "'");
    }
    *hint = i;
  }
  *tile = m[i].tile;
  *local = m[i].local + (flat - m[i].begin);
}

TileLocation Graph::locate(VarId id, uint64_t flat) const {
  TileLocation at{0, 0};
  size_t hint = 0;
  locate(id, flat, &at.tile, &at.local, &hint);
  return at;
}

uint32_t Graph::add_compute_set(const std::string& name) {
  compute_sets_.push_back(ComputeSet{name, node_, {}});
  return static_cast<uint32_t>(compute_sets_.size() - 1);
}

void Graph::add_vertex(uint32_t cs, std::unique_ptr<Vertex> v) {
  thread_local std::vector<Field*> fields;
  v->list_fields_into(fields);
  for (Field* f : fields) {
    const Variable& var_ = var(f->var);
    NX_CHECK(f->tile == v->tile, std::string("vertex ") + v->name() + " names memory of another tile");
    const TileShare* s = var_.share(f->tile);
    NX_CHECK(f->count == 0 || (s && f->local + f->count <= s->count),
             std::string("vertex ") + v->name() + " field outside '" + var_.name + "' on its tile");
  }
  compute_sets_.at(cs).vertices.push_back(std::move(v));
}

uint32_t Graph::add_exchange(const std::string& name) {
  exchanges_.push_back(Exchange{name, node_, {}});
  return static_cast<uint32_t>(exchanges_.size() - 1);
}

void Graph::begin_segment() {
  NX_CHECK(segment_start_ < 0, "a program has at most two segments");
  segment_start_ = static_cast<int64_t>(program_.size());
}

void Graph::execute(uint32_t cs) {
  if (!compute_sets_.at(cs).vertices.empty()) program_.push_back(Step{StepKind::kCompute, cs});
}

void Graph::execute_exchange(uint32_t ex) {
  if (!exchanges_.at(ex).copies.empty()) program_.push_back(Step{StepKind::kExchange, ex});
}

uint32_t Graph::add_input_stream(const std::string& name, const Tensor& t) {
  NX_CHECK(var(t.var).kind == VarKind::kInput, "input stream on a non-input variable");
  inputs_.push_back(HostStream{name, t});
  uint32_t idx = static_cast<uint32_t>(inputs_.size() - 1);
  program_.insert(program_.begin() + idx, Step{StepKind::kHostToDevice, idx});
  return idx;
}

uint32_t Graph::add_output_stream(const std::string& name, const Tensor& t) {
  outputs_.push_back(HostStream{name, t});
  return static_cast<uint32_t>(outputs_.size() - 1);
}

}  // namespace neurenix
