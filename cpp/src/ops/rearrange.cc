// Data movement: strided views materialised by exchange, concatenation, and
// copies between IPUs.
#include "neurenix/ops/rearrange.h"

#include "neurenix/error.h"
#include "neurenix/exchange.h"

namespace neurenix::ops {

Tensor rearrange(Graph& g, const View& src, uint32_t ipu, const std::string& name) {
  if (src.shape.size() != src.strides.size())
    fail(ErrorCode::kInvalidArgument, "rearrange '" + name + "': view has " + std::to_string(src.shape.size()) +
                                          " dims but " + std::to_string(src.strides.size()) + " strides");
  const Variable& sv = g.var(src.var);
  // Bounds: the view must stay inside the variable.
  if (src.numel() > 0) {
    int64_t lo = src.offset, hi = src.offset;
    for (size_t i = 0; i < src.shape.size(); ++i) {
      int64_t span = src.strides[i] * static_cast<int64_t>(src.shape[i] - 1);
      if (span < 0) lo += span;
      else hi += span;
    }
    if (lo < 0 || hi >= static_cast<int64_t>(sv.numel))
      fail(ErrorCode::kShapeMismatch, "rearrange '" + name + "': view reaches outside '" + sv.name + "'");
  }
  if (sv.ipu != ipu) fail(ErrorCode::kInvalidArgument, "rearrange '" + name + "': source is on another IPU");
  const DeviceType dtype = sv.dtype;
  g.ensure_mapped(src.var);
  Tensor out = g.add_variable(name, dtype, src.shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  g.map_linearly(out.var);
  uint32_t ex = g.add_exchange(name);
  copy_view(g, ex, src, View::of(out));
  g.execute_exchange(ex);
  g.record_plan(OpPlan{name, "rearrange", ipu, "copy of " + std::to_string(out.numel()) + " element(s)",
                       static_cast<uint32_t>(g.var(out.var).tiles.size()), 0, 0});
  return out;
}

Tensor concat(Graph& g, const std::vector<Tensor>& xs, uint32_t axis, uint32_t ipu, const std::string& name) {
  if (xs.empty()) fail(ErrorCode::kInvalidArgument, "concat '" + name + "' of no tensors");
  const Shape& s0 = xs[0].shape;
  if (axis >= s0.size()) fail(ErrorCode::kShapeMismatch, "concat '" + name + "': axis out of range");
  Shape out_shape = s0;
  out_shape[axis] = 0;
  const DeviceType dtype = g.var(xs[0].var).dtype;
  for (const Tensor& t : xs) {
    if (t.shape.size() != s0.size() || g.var(t.var).dtype != dtype)
      fail(ErrorCode::kShapeMismatch, "concat '" + name + "': operands differ in rank or type");
    for (size_t i = 0; i < s0.size(); ++i)
      if (i != axis && t.shape[i] != s0[i])
        fail(ErrorCode::kShapeMismatch, "concat '" + name + "': shapes " + shape_str(s0) + " and " + shape_str(t.shape) +
                                            " differ outside axis " + std::to_string(axis));
    if (g.var(t.var).ipu != ipu) fail(ErrorCode::kInvalidArgument, "concat '" + name + "': operand on another IPU");
    out_shape[axis] += t.shape[axis];
  }
  Tensor out = g.add_variable(name, dtype, out_shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  g.map_linearly(out.var);
  View ov = View::of(out);
  uint32_t ex = g.add_exchange(name);
  uint64_t at = 0;
  for (const Tensor& t : xs) {
    if (t.numel() > 0) {
      g.ensure_mapped(t.var);
      View dst = ov;
      dst.shape = t.shape;
      dst.offset = static_cast<int64_t>(at) * ov.strides[axis];
      copy_view(g, ex, View::of(t), dst);
    }
    at += t.shape[axis];
  }
  g.execute_exchange(ex);
  return out;
}

Tensor copy_to_ipu(Graph& g, const Tensor& x, uint32_t ipu, const std::string& name) {
  const Variable& xv = g.var(x.var);
  if (xv.ipu == ipu) return x;
  const DeviceType dtype = xv.dtype;
  g.ensure_mapped(x.var);
  Tensor out = g.add_variable(name, dtype, x.shape, VarKind::kIntermediate, ipu);
  if (out.numel() == 0) return out;
  g.clone_mapping(out.var, x.var);
  uint32_t ex = g.add_exchange(name);
  copy_view(g, ex, View::of(x), View::of(out));
  g.execute_exchange(ex);
  g.record_plan(OpPlan{name, "ipu_copy", ipu, "IPU " + std::to_string(g.var(x.var).ipu) + " -> IPU " + std::to_string(ipu),
                       static_cast<uint32_t>(g.var(out.var).tiles.size()), 0, 0});
  return out;
}

void assign(Graph& g, const Tensor& dst, const Tensor& src, const std::string& name) {
  const Variable& d = g.var(dst.var);
  const Variable& s = g.var(src.var);
  if (d.kind != VarKind::kConstant)
    fail(ErrorCode::kInvalidArgument, "assign '" + name + "': '" + d.name + "' is not state (a constant) to assign to");
  if (d.dtype != s.dtype || dst.numel() != src.numel() || d.ipu != s.ipu)
    fail(ErrorCode::kShapeMismatch, "assign '" + name + "': '" + s.name + "' (" + device_type_name(s.dtype) + ", " +
                                        std::to_string(src.numel()) + " elements, IPU " + std::to_string(s.ipu) +
                                        ") does not fit '" + d.name + "' (" + device_type_name(d.dtype) + ", " +
                                        std::to_string(dst.numel()) + " elements, IPU " + std::to_string(d.ipu) + ")");
  if (dst.numel() == 0 || dst.var == src.var) return;
  g.ensure_mapped(dst.var);
  g.ensure_mapped(src.var);
  uint32_t ex = g.add_exchange(name);
  View from = View::of(src);
  from.shape = dst.shape;
  from.strides = View::of(dst).strides;
  copy_view(g, ex, from, View::of(dst));
  g.execute_exchange(ex);
  g.record_plan(OpPlan{name, "assign", d.ipu, "'" + s.name + "' -> '" + d.name + "'",
                       static_cast<uint32_t>(g.var(dst.var).tiles.size()), 0, 0});
}

}  // namespace neurenix::ops
