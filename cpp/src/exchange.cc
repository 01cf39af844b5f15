#include "neurenix/exchange.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "neurenix/error.h"

namespace neurenix {

namespace {

// The copies of runs from one variable into another, appended to an
// exchange. Runs are merged into the copy they extend: the same row
// continued, or another row of the same shape at a constant source and
// destination step (a 2-D copy). Several copies stay open at once, as
// consecutive runs often alternate between a few source tiles (rows of an
// image spread over tiles); the least recently extended one is closed when a
// new one opens.
class CopyRuns {
 public:
  CopyRuns(Graph& g, uint32_t ex, VarId src, VarId dst)
      : src_var_(src), dst_var_(dst), sv_(g.var(src)), dv_(g.var(dst)), out_(g.exchange(ex).copies) {}
  // `count` elements from `sl` on tile `st` (`stride` apart) to consecutive
  // elements from `dl` on tile `dt`.
  void emit(uint32_t st, uint64_t sl, int64_t stride, uint32_t dt, uint64_t dl, uint64_t count) {
    // Most recently extended last.
    for (size_t i = n_open_; i-- > 0;) {
      Open& cur = slots_[order_[i]];
      if (cur.src_tile != st || cur.dst_tile != dt) continue;
      if (!extend(cur, sl, stride, dl, count)) continue;
      if (i + 1 != n_open_) std::rotate(order_ + i, order_ + i + 1, order_ + n_open_);
      return;
    }
    uint8_t slot;
    if (n_open_ == kOpen) {
      slot = order_[0];
      close(slots_[slot]);
      std::rotate(order_, order_ + 1, order_ + n_open_);
    } else {
      slot = static_cast<uint8_t>(n_open_++);
    }
    order_[n_open_ - 1] = slot;
    slots_[slot] = Open{st, dt, sl, count == 1 ? 1 : stride, dl, count, 1, 0, 0};
  }
  // Closes every open copy (appends it to the exchange).
  void close_all() {
    for (size_t i = 0; i < n_open_; ++i) close(slots_[order_[i]]);
    n_open_ = 0;
  }

 private:
  static constexpr size_t kOpen = 8;
  // The open copies live in fixed slots; `order_` lists their slots from
  // least to most recently extended, so reordering moves bytes, not copies.
  // They are kept in 64 bits and narrowed as they close.
  struct Open {
    uint32_t src_tile, dst_tile;
    uint64_t src_local;
    int64_t src_stride;
    uint64_t dst_local, count, outer;
    int64_t src_outer, dst_outer;
  };
  void close(const Open& c) {
    auto fits = [](int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; };
    const uint64_t last_src = c.src_local + std::max<int64_t>(0, c.src_stride) * (c.count - 1) +
                              std::max<int64_t>(0, c.src_outer) * (c.outer - 1);
    const uint64_t last_dst = c.dst_local + c.count - 1 + std::max<int64_t>(0, c.dst_outer) * (c.outer - 1);
    if (last_src > UINT32_MAX || last_dst > UINT32_MAX || c.count > UINT32_MAX || c.outer > UINT32_MAX ||
        !fits(c.src_stride) || !fits(c.src_outer) || !fits(c.dst_outer))
      fail(ErrorCode::kOutOfMemory, "copy from '" + sv_.name + "' on tile " + std::to_string(c.src_tile) + " to '" +
                                        dv_.name + "' on tile " + std::to_string(c.dst_tile) +
                                        " reaches beyond element 2^32 of a tile's share: no tile holds that much; "
                                        "use smaller tensors or more IPUs");
    out_.push_back(Copy{src_var_, c.src_tile, static_cast<uint32_t>(c.src_local), static_cast<int32_t>(c.src_stride),
                        dst_var_, c.dst_tile, static_cast<uint32_t>(c.dst_local), static_cast<uint32_t>(c.count),
                        static_cast<uint32_t>(c.outer), static_cast<int32_t>(c.src_outer),
                        static_cast<int32_t>(c.dst_outer)});
  }
  static bool extend(Open& cur, uint64_t sl, int64_t stride, uint64_t dl, uint64_t count) {
    if (cur.outer == 1 && dl == cur.dst_local + cur.count) {
      // Continues the row.
      const int64_t step = static_cast<int64_t>(sl) - static_cast<int64_t>(cur.src_local);
      if (cur.count == 1 && (count == 1 || step == stride)) {
        cur.src_stride = step;
        cur.count += count;
        return true;
      }
      if ((count == 1 || stride == cur.src_stride) && step == cur.src_stride * static_cast<int64_t>(cur.count)) {
        cur.count += count;
        return true;
      }
    }
    // Starts another row of the same pattern.
    const bool same_row = count == cur.count && (count == 1 || stride == cur.src_stride);
    if (!same_row) return false;
    const int64_t ds = static_cast<int64_t>(dl) - static_cast<int64_t>(cur.dst_local);
    const int64_t ss = static_cast<int64_t>(sl) - static_cast<int64_t>(cur.src_local);
    if (cur.outer == 1 && ds >= static_cast<int64_t>(cur.count)) {
      cur.outer = 2;
      cur.src_outer = ss;
      cur.dst_outer = ds;
      return true;
    }
    if (cur.outer > 1 && ds == cur.dst_outer * static_cast<int64_t>(cur.outer) &&
        ss == cur.src_outer * static_cast<int64_t>(cur.outer)) {
      cur.outer += 1;
      return true;
    }
    return false;
  }

  const VarId src_var_, dst_var_;
  const Variable& sv_;
  const Variable& dv_;
  CopyList& out_;
  Open slots_[kOpen];
  uint8_t order_[kOpen];
  size_t n_open_ = 0;
};

}  // namespace

void copy_view(Graph& g, uint32_t ex, const View& src_in, const View& dst_in) {
  NX_CHECK(src_in.shape == dst_in.shape, "copy_view between views of different shapes");
  // Merge dimensions that are contiguous in both views (and drop unit ones),
  // so chunks along the innermost dimension are as long as possible; a
  // rank-0 view becomes a 1-element vector. (Held on the stack for the
  // ranks models use: a large model makes this call hundreds of thousands
  // of times.)
  constexpr size_t kStackRank = 8;
  const size_t rank_in = src_in.shape.size();
  uint64_t shape_at[kStackRank], idx_at[kStackRank];
  int64_t ss_at[kStackRank], ds_at[kStackRank];
  std::vector<uint64_t> shape_heap, idx_heap;
  std::vector<int64_t> ss_heap, ds_heap;
  uint64_t* shape = shape_at;
  uint64_t* idx = idx_at;
  int64_t* ss = ss_at;
  int64_t* ds = ds_at;
  if (rank_in > kStackRank) {
    shape = (shape_heap.resize(rank_in), shape_heap.data());
    idx = (idx_heap.resize(rank_in), idx_heap.data());
    ss = (ss_heap.resize(rank_in), ss_heap.data());
    ds = (ds_heap.resize(rank_in), ds_heap.data());
  }
  size_t rank = 0;
  for (size_t d = 0; d < rank_in; ++d) {
    const uint64_t n = src_in.shape[d];
    if (n == 1) continue;
    const int64_t s_d = src_in.strides[d], d_d = dst_in.strides[d];
    if (rank && ss[rank - 1] == static_cast<int64_t>(n) * s_d && ds[rank - 1] == static_cast<int64_t>(n) * d_d) {
      shape[rank - 1] *= n;
      ss[rank - 1] = s_d;
      ds[rank - 1] = d_d;
      continue;
    }
    shape[rank] = n;
    ss[rank] = s_d;
    ds[rank] = d_d;
    ++rank;
  }
  if (rank == 0) {
    shape[0] = 1;
    ss[0] = ds[0] = 1;
    rank = 1;
  }
  const VarId src_var = src_in.var, dst_var = dst_in.var;
  NX_CHECK(g.var(src_var).dtype == g.var(dst_var).dtype, "copy_view between different element types");
  uint64_t n = 1;
  for (size_t d = 0; d < rank; ++d) n *= shape[d];
  if (n == 0) return;
  const Variable& sv = g.var(src_var);
  const Variable& dv = g.var(dst_var);
  // The innermost dimension is walked in chunks that stay inside one source
  // and one destination interval: there, tile-local indices advance
  // linearly, so a chunk is one copy (or extends the previous one).
  const uint64_t inner = shape[rank - 1];
  const int64_t s_in = ss[rank - 1];
  const int64_t d_in = ds[rank - 1];
  const uint64_t rows = n / inner;
  std::fill(idx, idx + rank, 0);
  int64_t srow = src_in.offset, drow = dst_in.offset;
  size_t shint = 0, dhint = 0;
  CopyRuns runs(g, ex, src_var, dst_var);
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t i = 0;
    while (i < inner) {
      const int64_t sflat = srow + static_cast<int64_t>(i) * s_in;
      const int64_t dflat = drow + static_cast<int64_t>(i) * d_in;
      uint32_t st, dt;
      uint64_t sl, dl;
      g.locate(src_var, static_cast<uint64_t>(sflat), &st, &sl, &shint);
      g.locate(dst_var, static_cast<uint64_t>(dflat), &dt, &dl, &dhint);
      // Elements from here on that stay inside both intervals.
      uint64_t len = inner - i;
      const TileInterval& di = dv.mapping[dhint];
      // (Unit steps, the common case, without a division.)
      if (d_in == 1) len = std::min<uint64_t>(len, di.end - static_cast<uint64_t>(dflat));
      else if (d_in > 0) len = std::min<uint64_t>(len, (di.end - static_cast<uint64_t>(dflat) + d_in - 1) / d_in);
      else if (d_in < 0) len = std::min<uint64_t>(len, (static_cast<uint64_t>(dflat) - di.begin) / static_cast<uint64_t>(-d_in) + 1);
      const TileInterval& si = sv.mapping[shint];
      if (s_in == 1) len = std::min<uint64_t>(len, si.end - static_cast<uint64_t>(sflat));
      else if (s_in > 0) len = std::min<uint64_t>(len, (si.end - static_cast<uint64_t>(sflat) + s_in - 1) / s_in);
      else if (s_in < 0) len = std::min<uint64_t>(len, (static_cast<uint64_t>(sflat) - si.begin) / static_cast<uint64_t>(-s_in) + 1);
      if (d_in == 1) {
        runs.emit(st, sl, s_in, dt, dl, len);
      } else {
        // Not contiguous in the destination: one element per run, without
        // looking either interval up again.
        for (uint64_t k = 0; k < len; ++k)
          runs.emit(st, static_cast<uint64_t>(static_cast<int64_t>(sl) + static_cast<int64_t>(k) * s_in), s_in, dt,
               static_cast<uint64_t>(static_cast<int64_t>(dl) + static_cast<int64_t>(k) * d_in), 1);
      }
      i += len;
    }
    // Advance the row counter over the outer dimensions.
    for (size_t d = rank - 1; d-- > 0;) {
      idx[d] += 1;
      srow += ss[d];
      drow += ds[d];
      if (idx[d] < shape[d]) break;
      srow -= ss[d] * static_cast<int64_t>(shape[d]);
      drow -= ds[d] * static_cast<int64_t>(shape[d]);
      idx[d] = 0;
    }
  }
  runs.close_all();
}

namespace {

// Whether `v` is a dense row-major block of its variable lying inside one
// interval of its mapping: then its tile and the tile-local index of its
// first element.
bool one_run(const Graph& g, const View& v, uint32_t* tile, uint64_t* local) {
  int64_t dense = 1;
  for (size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] != 1 && v.strides[d] != dense) return false;
    dense *= static_cast<int64_t>(v.shape[d]);
  }
  const Variable& var = g.var(v.var);
  const uint64_t n = v.numel();
  if (n == 0 || v.offset < 0 || static_cast<uint64_t>(v.offset) + n > var.numel) return false;
  size_t at = 0;
  g.locate(v.var, static_cast<uint64_t>(v.offset), tile, local, &at);
  return static_cast<uint64_t>(v.offset) + n <= var.mapping[at].end;
}

}  // namespace

void RepeatedCopies::copy(Graph& g, uint32_t ex, const View& src, const View& dst) {
  auto [it, fresh] = first_.try_emplace(std::make_tuple(ex, src.var, src.offset, src.shape, src.strides));
  First& first = it->second;
  uint32_t to_tile = 0;
  uint64_t to_local = 0;
  if (!fresh && first.one_run && first.dst.shape == dst.shape &&
      g.var(first.dst.var).dtype == g.var(dst.var).dtype && one_run(g, dst, &to_tile, &to_local) &&
      to_local + dst.numel() - 1 <= UINT32_MAX) {
    // Every copy of the first lands in [local, local + n) of one tile;
    // copy_view's runs and merges do not depend on where that range is, so
    // it would build these copies for `dst`.
    CopyList& out = g.exchange(ex).copies;
    for (size_t i = first.begin; i < first.end; ++i) {
      Copy c = out[i];
      c.dst = dst.var;
      c.dst_tile = to_tile;
      c.dst_local = static_cast<uint32_t>(c.dst_local - first.local + to_local);
      out.push_back(c);
    }
    repeated_ += first.end - first.begin;
    return;
  }
  const size_t begin = g.exchange(ex).copies.size();
  copy_view(g, ex, src, dst);
  if (fresh) {
    first.begin = begin;
    first.end = g.exchange(ex).copies.size();
    first.dst = dst;
    uint32_t tile = 0;
    first.one_run = one_run(g, dst, &tile, &first.local);
  }
}

View broadcast_view(const Tensor& t, const Shape& shape) {
  NX_CHECK(t.shape.size() <= shape.size(), "broadcast to a lower rank");
  View base = View::of(t);
  View v;
  v.var = t.var;
  v.offset = 0;
  v.shape = shape;
  v.strides.assign(shape.size(), 0);
  size_t lead = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    uint64_t d = t.shape[i];
    NX_CHECK(d == shape[lead + i] || d == 1, "shape " + shape_str(t.shape) + " does not broadcast to " + shape_str(shape));
    v.strides[lead + i] = (d == 1 && shape[lead + i] != 1) ? 0 : base.strides[i];
  }
  return v;
}

Tensor gather_like(Graph& g, uint32_t ex, const View& src, DeviceType dtype, const Tensor& like, const std::string& name) {
  NX_CHECK(src.numel() == like.numel(), "gather_like with a different element count");
  uint32_t ipu = g.var(like.var).ipu;
  Tensor tmp = g.add_variable(name, dtype, src.shape, VarKind::kTemporary, ipu);
  g.clone_mapping(tmp.var, like.var);
  copy_view(g, ex, src, View::of(tmp));
  return tmp;
}

Tensor gather_cycle(Graph& g, uint32_t ex, const Tensor& t, const Tensor& like, const std::string& name) {
  const uint64_t period = t.numel();
  {
    // t's shape, past its leading ones, is like's last dimensions.
    size_t lead = 0;
    while (lead < t.shape.size() && t.shape[lead] == 1) ++lead;
    const size_t n = t.shape.size() - lead;
    NX_CHECK(period > 0 && n <= like.shape.size() &&
                 std::equal(t.shape.begin() + static_cast<std::ptrdiff_t>(lead), t.shape.end(), like.shape.end() - static_cast<std::ptrdiff_t>(n)),
             "gather_cycle of an operand that is not a cycle over the result");
  }
  g.ensure_mapped(t.var);
  g.ensure_mapped(like.var);
  Tensor tmp = g.add_variable(name, g.var(t.var).dtype, like.shape, VarKind::kTemporary, g.var(like.var).ipu);
  g.clone_mapping(tmp.var, like.var);
  const Variable& dv = g.var(tmp.var);
  const Variable& sv = g.var(t.var);
  // (CopyRuns for the copies' bounds checks: each piece is closed at once.)
  CopyRuns runs(g, ex, t.var, tmp.var);
  std::vector<const TileInterval*> ivs;
  size_t hint = 0;
  for (const TileShare& share : dv.tiles) {
    // Each piece (a run of `t` within one of its tiles, landing in one row
    // of the tile's block) is a copy of its own: every tile holding those
    // columns receives the same run, which the exchange multicasts, where a
    // 2-D copy per tile would give the sender a pattern to send per height
    // of block.
    ivs.clear();
    for (uint32_t ii : share.intervals) ivs.push_back(&dv.mapping[ii]);
    std::sort(ivs.begin(), ivs.end(), [](const TileInterval* a, const TileInterval* b) { return a->local < b->local; });
    for (const TileInterval* iv : ivs)
      for (uint64_t e = iv->begin; e < iv->end;) {
        const uint64_t from = e % period;
        uint32_t st;
        uint64_t sl;
        g.locate(t.var, from, &st, &sl, &hint);
        const uint64_t len = std::min(iv->end - e, sv.mapping[hint].end - from);
        runs.emit(st, sl, 1, share.tile, iv->local + (e - iv->begin), len);
        runs.close_all();
        e += len;
      }
  }
  return tmp;
}

bool same_layout_on_tile(const Graph& g, VarId a, VarId b, uint32_t tile) {
  if (a == b) return true;
  const Variable& va = g.var(a);
  const Variable& vb = g.var(b);
  const TileShare* sa = va.share(tile);
  const TileShare* sb = vb.share(tile);
  if (!sa || !sb || sa->count != sb->count || sa->intervals.size() != sb->intervals.size()) return false;
  for (size_t i = 0; i < sa->intervals.size(); ++i) {
    const TileInterval& ia = va.mapping[sa->intervals[i]];
    const TileInterval& ib = vb.mapping[sb->intervals[i]];
    if (ia.begin != ib.begin || ia.end != ib.end) return false;
  }
  return true;
}

bool find_local_block(const Graph& g, VarId var, uint32_t tile, uint64_t flat_start, uint64_t rows, uint64_t cols,
                      uint64_t row_stride, LocalBlock* out) {
  if (rows == 0 || cols == 0) return false;
  const Variable& v = g.var(var);
  if (!v.mapped) return false;
  size_t hint = 0;
  uint64_t first = 0, ld = cols;
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t flat = flat_start + r * row_stride;
    uint32_t t;
    uint64_t local;
    g.locate(var, flat, &t, &local, &hint);
    const TileInterval& iv = v.mapping[hint];
    if (t != tile || flat + cols > iv.end) return false;
    if (r == 0) {
      first = local;
    } else if (r == 1) {
      if (local < first + cols) return false;
      ld = local - first;
    } else if (local != first + r * ld) {
      return false;
    }
  }
  out->local = first;
  out->ld = ld;
  return true;
}

}  // namespace neurenix
