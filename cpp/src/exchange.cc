#include "neurenix/exchange.h"

#include "neurenix/error.h"

namespace neurenix {

void copy_view(Graph& g, uint32_t ex, const View& src, const View& dst) {
  NX_CHECK(src.shape == dst.shape, "copy_view between views of different shapes");
  NX_CHECK(g.var(src.var).dtype == g.var(dst.var).dtype, "copy_view between different element types");
  const uint64_t n = src.numel();
  if (n == 0) return;
  const size_t rank = src.shape.size();
  std::vector<uint64_t> idx(rank, 0);
  int64_t sflat = src.offset, dflat = dst.offset;
  size_t shint = 0, dhint = 0;
  std::vector<Copy>& out = g.exchange(ex).copies;
  bool open = false;
  Copy cur{};
  for (uint64_t e = 0; e < n; ++e) {
    uint32_t st, dt;
    uint64_t sl, dl;
    g.locate(src.var, static_cast<uint64_t>(sflat), &st, &sl, &shint);
    g.locate(dst.var, static_cast<uint64_t>(dflat), &dt, &dl, &dhint);
    bool extended = false;
    if (open && st == cur.src_tile && dt == cur.dst_tile && dl == cur.dst_local + cur.count) {
      int64_t step = static_cast<int64_t>(sl) - static_cast<int64_t>(cur.src_local);
      if (cur.count == 1) {
        cur.src_stride = step;
        cur.count = 2;
        extended = true;
      } else if (step == cur.src_stride * static_cast<int64_t>(cur.count)) {
        cur.count += 1;
        extended = true;
      }
    }
    if (!extended) {
      if (open) out.push_back(cur);
      cur = Copy{src.var, st, sl, 1, dst.var, dt, dl, 1};
      open = true;
    }
    // Advance the row-major counter.
    for (size_t d = rank; d-- > 0;) {
      idx[d] += 1;
      sflat += src.strides[d];
      dflat += dst.strides[d];
      if (idx[d] < src.shape[d]) break;
      sflat -= src.strides[d] * static_cast<int64_t>(src.shape[d]);
      dflat -= dst.strides[d] * static_cast<int64_t>(dst.shape[d]);
      idx[d] = 0;
    }
  }
  if (open) out.push_back(cur);
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

Tensor gather_like(Graph& g, uint32_t ex, const View& src, DType dtype, const Tensor& like, const std::string& name) {
  NX_CHECK(src.numel() == like.numel(), "gather_like with a different element count");
  uint32_t ipu = g.var(like.var).ipu;
  Tensor tmp = g.add_variable(name, dtype, src.shape, VarKind::kTemporary, ipu);
  g.clone_mapping(tmp.var, like.var);
  copy_view(g, ex, src, View::of(tmp));
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
