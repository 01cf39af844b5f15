//! Operators that select, repeat or combine elements: Concat, Split, Slice,
//! Expand, Tile, ConstantOfShape, Range, Gather (constant indices) and Pad.
//!
//! All of them are *outer indexing*: along every axis, each output position
//! reads one source position, or the pad value. On the host that index list
//! is applied directly (folding); on the device each maximal arithmetic run
//! of an index list is one strided view (`rearrange`, with zero strides for
//! repeats and negative strides for reversals), and a list of several runs
//! becomes the concatenation of their views and of fills. A slice (any
//! steps), an expand, a tile or a gather of regularly spaced indices is
//! therefore a single exchange; a padded axis concatenates its borders
//! (fills, or reversed, repeated or wrapped views) with its middle.
//!
//! Shape arguments (starts, pads, repeats, split sizes, target shapes) must
//! be known at compile time; shape-computing subgraphs (Shape -> Gather ->
//! Concat -> Reshape) fold completely because every op here evaluates on the
//! host.

use ndarray::{ArrayD, Axis, Dimension, IxDyn};

use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::ir::{Attr, Node};
use crate::lower::{row_major_strides, DevTensor, LowerCx};
use crate::tensor::{round_float, wrap_int, Data, HostTensor};

use super::{broadcast_shapes, norm_axis, OpCx, Operator, Registry, TypeShape};

/// Folding that would materialise more elements than this on the host is
/// left to the device: a broadcast or tile of a constant is no cheaper as a
/// stored constant than as an exchange.
const FOLD_LIMIT: usize = 1 << 20;

/// ConstantOfShape folds only small results (the shape arithmetic it is used
/// for); a large one is a fill on the device rather than a stored constant.
const FILL_FOLD_LIMIT: usize = 1 << 12;

/// Source position along one axis for each output position; `None` reads
/// the pad value.
pub(crate) type AxisIndex = Vec<Option<usize>>;

fn identity_index(n: usize) -> AxisIndex {
    (0..n).map(Some).collect()
}

fn is_identity(idx: &AxisIndex, n: usize) -> bool {
    idx.len() == n && idx.iter().enumerate().all(|(i, v)| *v == Some(i))
}

// ---------------------------------------------------------------------------
// Host side.

fn take_arr<T: Clone>(a: &ArrayD<T>, axis: usize, idx: &[Option<usize>], fill: T) -> ArrayD<T> {
    if idx.iter().all(Option::is_some) {
        let sel: Vec<usize> = idx.iter().map(|v| v.unwrap()).collect();
        return a.select(Axis(axis), &sel);
    }
    let mut shape = a.shape().to_vec();
    shape[axis] = idx.len();
    ArrayD::from_shape_fn(IxDyn(&shape), |ix: IxDyn| {
        let mut ix = ix;
        match idx[ix[axis]] {
            Some(i) => {
                ix[axis] = i;
                a[ix.slice()].clone()
            }
            None => fill.clone(),
        }
    })
}

/// Host outer indexing along one axis.
pub(crate) fn take_host(
    t: &HostTensor,
    axis: usize,
    idx: &[Option<usize>],
    fill: f64,
) -> HostTensor {
    let data = match &t.data {
        Data::Float(a) => Data::Float(take_arr(a, axis, idx, round_float(t.dtype, fill))),
        Data::Int(a) => Data::Int(take_arr(a, axis, idx, wrap_int(t.dtype, fill as i64))),
        Data::Bool(a) => Data::Bool(take_arr(a, axis, idx, fill != 0.0)),
    };
    HostTensor {
        dtype: t.dtype,
        data,
    }
}

/// Host outer indexing along every axis (`idx[a]` for axis `a`).
pub(crate) fn take_all_host(t: &HostTensor, idx: &[AxisIndex], fill: f64) -> HostTensor {
    let mut out = t.clone();
    for (a, ix) in idx.iter().enumerate() {
        if !is_identity(ix, out.shape()[a]) {
            out = take_host(&out, a, ix, fill);
        }
    }
    out
}

fn broadcast_host(t: &HostTensor, shape: &[usize]) -> Option<HostTensor> {
    let sh = IxDyn(shape);
    let data = match &t.data {
        Data::Float(a) => Data::Float(a.broadcast(sh)?.to_owned()),
        Data::Int(a) => Data::Int(a.broadcast(sh)?.to_owned()),
        Data::Bool(a) => Data::Bool(a.broadcast(sh)?.to_owned()),
    };
    Some(HostTensor {
        dtype: t.dtype,
        data,
    })
}

fn concat_host(ts: &[&HostTensor], axis: usize) -> Result<HostTensor> {
    let bad = |e: ndarray::ShapeError| Error::Internal(format!("host concat: {e}"));
    let ax = Axis(axis);
    let dtype = ts[0].dtype;
    let data = match &ts[0].data {
        Data::Float(_) => {
            let arrs: Vec<ArrayD<f64>> = ts.iter().map(|t| t.as_float()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Float(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
        Data::Int(_) => {
            let arrs: Vec<ArrayD<i64>> = ts.iter().map(|t| t.as_int()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Int(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
        Data::Bool(_) => {
            let arrs: Vec<ArrayD<bool>> = ts.iter().map(|t| t.as_bool()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Bool(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
    };
    Ok(HostTensor { dtype, data })
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Unwraps an evaluation step inside `eval`, which reports errors as
/// `Some(Err(..))`.
macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        }
    };
}

// ---------------------------------------------------------------------------
// Device side.

/// A strided view of a tensor's row-major elements, as `rearrange` takes it.
#[derive(Debug, Clone, PartialEq)]
struct View {
    offset: i64,
    shape: Vec<usize>,
    strides: Vec<i64>,
}

impl View {
    fn whole(shape: &[usize]) -> View {
        View {
            offset: 0,
            shape: shape.to_vec(),
            strides: row_major_strides(shape),
        }
    }
}

/// A maximal arithmetic progression of source positions, or of pad values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Run {
    Seq { start: usize, step: i64, len: usize },
    Fill(usize),
}

/// Splits an index list into runs, greedily from the left.
pub(crate) fn runs(idx: &[Option<usize>]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < idx.len() {
        match idx[p] {
            None => {
                let mut q = p;
                while q < idx.len() && idx[q].is_none() {
                    q += 1;
                }
                out.push(Run::Fill(q - p));
                p = q;
            }
            Some(s) => {
                let mut q = p + 1;
                let mut step = 0i64;
                if let Some(Some(n)) = idx.get(q) {
                    step = *n as i64 - s as i64;
                    q += 1;
                    while q < idx.len()
                        && idx[q].map(|v| v as i64) == Some(s as i64 + step * (q - p) as i64)
                    {
                        q += 1;
                    }
                }
                out.push(Run::Seq {
                    start: s,
                    step,
                    len: q - p,
                });
                p = q;
            }
        }
    }
    out
}

/// A tensor of one value. An empty one is an (empty) constant: the device
/// compiler insists that every streamed-out variable is written, which an
/// empty fill never is.
pub(crate) fn fill_tensor(
    cx: &mut LowerCx,
    dt: DeviceType,
    shape: &[usize],
    value: f64,
) -> Result<DevTensor> {
    if numel(shape) == 0 {
        let name = format!("{}/empty", cx.node().name);
        return cx.host_constant(&HostTensor::full(dt.as_elem_type(), shape, 0.0), dt, &name);
    }
    cx.fill(dt, shape, value)
}

/// `x` seen through `v`: free when the view is `x` itself.
fn view(cx: &mut LowerCx, x: &DevTensor, v: &View) -> Result<DevTensor> {
    let st = row_major_strides(&x.shape);
    let same = v.offset == 0
        && v.shape == x.shape
        && v.shape
            .iter()
            .zip(v.strides.iter().zip(&st))
            .all(|(&d, (a, b))| d == 1 || a == b);
    if same {
        return Ok(x.clone());
    }
    cx.rearrange(x, v.offset, &v.shape, &v.strides)
}

/// The runs of one axis, each a view of `x` through `base` restricted along
/// `axis` (or a fill), concatenated.
fn concat_runs(
    cx: &mut LowerCx,
    x: &DevTensor,
    base: &View,
    axis: usize,
    rs: &[Run],
    fill: f64,
) -> Result<DevTensor> {
    let src_stride = row_major_strides(&x.shape)[axis];
    let mut parts = Vec::with_capacity(rs.len());
    for r in rs {
        let mut v = base.clone();
        match *r {
            Run::Seq { start, step, len } => {
                v.offset += start as i64 * src_stride;
                v.shape[axis] = len;
                v.strides[axis] = step * src_stride;
                parts.push(view(cx, x, &v)?);
            }
            Run::Fill(len) => {
                v.shape[axis] = len;
                parts.push(fill_tensor(cx, x.dtype, &v.shape, fill)?);
            }
        }
    }
    if parts.len() == 1 {
        return Ok(parts.pop().unwrap());
    }
    cx.concat(&parts, axis)
}

/// Device outer indexing along every axis. Axes whose index list is one run
/// are folded into a single strided view; each axis with several runs then
/// costs a concatenation.
pub(crate) fn lower_take(
    cx: &mut LowerCx,
    x: &DevTensor,
    idx: &[AxisIndex],
    fill: f64,
) -> Result<DevTensor> {
    let out_shape: Vec<usize> = idx.iter().map(Vec::len).collect();
    let rs: Vec<Vec<Run>> = idx.iter().map(|i| runs(i)).collect();
    if numel(&out_shape) == 0 || rs.iter().any(|r| matches!(r.as_slice(), [Run::Fill(_)])) {
        return fill_tensor(cx, x.dtype, &out_shape, fill);
    }
    let st = row_major_strides(&x.shape);
    let mut base = View::whole(&x.shape);
    let mut multi = Vec::new();
    for (a, r) in rs.iter().enumerate() {
        match r.as_slice() {
            [Run::Seq { start, step, len }] => {
                base.offset += *start as i64 * st[a];
                base.shape[a] = *len;
                base.strides[a] = step * st[a];
            }
            _ => multi.push(a),
        }
    }
    let Some((&first, rest)) = multi.split_first() else {
        return view(cx, x, &base);
    };
    let mut y = concat_runs(cx, x, &base, first, &rs[first], fill)?;
    for &a in rest {
        let whole = View::whole(&y.shape);
        y = concat_runs(cx, &y, &whole, a, &rs[a], fill)?;
    }
    Ok(y)
}

/// The output's device tensor for an op whose result is `x` indexed along
/// every axis.
fn set_take(cx: &mut LowerCx, node: &Node, out: usize, idx: &[AxisIndex], fill: f64) -> Result<()> {
    let x = cx.tensor(node.input(0).unwrap())?;
    let y = lower_take(cx, &x, idx, fill)?;
    cx.set(node.outputs[out], y);
    Ok(())
}

/// A constant integer list from input `i`, or the error that says it must be
/// known at compile time.
fn const_ints(cx: &OpCx, i: usize, what: &str) -> Result<Vec<i64>> {
    match cx.const_input(i) {
        Some(t) => Ok(t.to_i64_vec()),
        None => {
            Err(cx.unsupported_form(&format!("{what} (input {i}) must be known at compile time")))
        }
    }
}

fn dims_from(cx: &OpCx, v: &[i64], what: &str) -> Result<Vec<usize>> {
    v.iter()
        .map(|&d| {
            if d < 0 {
                Err(cx.err(format!("{what} {v:?} has a negative entry")))
            } else {
                Ok(d as usize)
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Concat.

struct Concat;

impl Concat {
    fn axis(cx: &OpCx, rank: usize) -> Result<usize> {
        let a = match cx.node.attr("axis") {
            Some(_) => cx.node.attr_i("axis", 0)?,
            // Concat-1 defaulted to axis 1; later versions require it.
            None if cx.opset < 4 => 1,
            None => return Err(cx.err("missing 'axis' attribute")),
        };
        if rank == 0 {
            return Err(cx.err("cannot concatenate scalars"));
        }
        norm_axis(a, rank, cx)
    }
}

impl Operator for Concat {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let n = cx.n_inputs();
        if n == 0 {
            return Err(cx.err("needs at least one input"));
        }
        let all: Vec<usize> = (0..n).collect();
        let t = cx.same_dtype(&all)?;
        let s0 = cx.in_shape(0)?;
        let axis = Concat::axis(cx, s0.len())?;
        let mut out = s0.clone();
        out[axis] = 0;
        for i in 0..n {
            let s = cx.in_shape(i)?;
            let ok = s.len() == s0.len()
                && s.iter()
                    .zip(&s0)
                    .enumerate()
                    .all(|(k, (a, b))| k == axis || a == b);
            if !ok {
                return Err(cx.err(format!(
                    "input shapes {s0:?} and {s:?} differ outside axis {axis}"
                )));
            }
            out[axis] += s[axis];
        }
        Ok(vec![TypeShape::new(t, out)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let ts: Vec<&HostTensor> = inputs.iter().copied().collect::<Option<Vec<_>>>()?;
        let axis = tryo!(Concat::axis(cx, ts[0].shape().len()));
        Some(concat_host(&ts, axis).map(|t| vec![t]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let axis = Concat::axis(&opcx, cx.shape(node.input(0).unwrap())?.len())?;
        let ins: Vec<usize> = node.inputs.iter().flatten().copied().collect();
        // Computed operands keep their device type when they agree; constants
        // (and disagreeing operands) take the node's type.
        let mut dev = None;
        let mut same = true;
        for &v in &ins {
            if cx.constant(v).is_none() {
                let t = cx.tensor(v)?;
                match dev {
                    None => dev = Some(t.dtype),
                    Some(d) if d != t.dtype => same = false,
                    _ => {}
                }
            }
        }
        let model_t = cx.dtype(ins[0])?;
        let want = match (dev, same) {
            (Some(d), true) => d,
            _ => cx.device_type(model_t),
        };
        let mut parts = Vec::with_capacity(ins.len());
        for &v in &ins {
            let t = cx.tensor_as(v, want)?;
            if t.numel() > 0 || ins.len() == 1 {
                parts.push(t);
            }
        }
        let out_shape = cx.shape(node.outputs[0])?;
        let y = match parts.len() {
            0 => fill_tensor(cx, want, &out_shape, 0.0)?,
            1 => parts.pop().unwrap(),
            _ => cx.concat(&parts, axis)?,
        };
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Split.

struct Split;

impl Split {
    /// (axis, size of each output along it).
    fn sizes(cx: &OpCx, shape: &[usize]) -> Result<(usize, Vec<usize>)> {
        if shape.is_empty() {
            return Err(cx.err("cannot split a scalar"));
        }
        let axis = norm_axis(cx.node.attr_i("axis", 0)?, shape.len(), cx)?;
        let dim = shape[axis];
        let n_out = cx.node.outputs.len();
        let split = if cx.opset >= 13 {
            if cx.has_input(1) {
                Some(const_ints(cx, 1, "split")?)
            } else {
                None
            }
        } else {
            cx.node.attr_ints("split")?
        };
        let num_outputs = if cx.opset >= 18 {
            cx.node
                .attr("num_outputs")
                .map(|_| cx.node.attr_i("num_outputs", 0))
        } else {
            None
        };
        if let Some(s) = split {
            if num_outputs.is_some() {
                return Err(cx.err(
                    "takes either the 'split' input or the 'num_outputs' attribute, not both",
                ));
            }
            if s.len() != n_out {
                return Err(cx.err(format!(
                    "split {s:?} has {} entries for {n_out} outputs",
                    s.len()
                )));
            }
            let sizes = dims_from(cx, &s, "split")?;
            if sizes.iter().sum::<usize>() != dim {
                return Err(cx.err(format!(
                    "split {s:?} does not add up to dimension {axis} of {shape:?}"
                )));
            }
            return Ok((axis, sizes));
        }
        if let Some(k) = num_outputs {
            let k = k?;
            if k < 1 || k as usize != n_out {
                return Err(cx.err(format!(
                    "num_outputs is {k} but the node has {n_out} outputs"
                )));
            }
            let k = k as usize;
            // Equal chunks of ceil(dim / k); the last one takes the rest.
            let chunk = dim.div_ceil(k);
            let used = chunk * (k - 1);
            if used > dim {
                return Err(cx.err(format!(
                    "dimension {axis} of {shape:?} cannot be split into {k} chunks of {chunk} (the last would be negative)"
                )));
            }
            let mut sizes = vec![chunk; k - 1];
            sizes.push(dim - used);
            return Ok((axis, sizes));
        }
        if n_out == 0 || dim % n_out != 0 {
            return Err(cx.err(format!(
                "dimension {axis} of {shape:?} does not split evenly into {n_out} outputs"
            )));
        }
        Ok((axis, vec![dim / n_out; n_out]))
    }

    fn indices(shape: &[usize], axis: usize, sizes: &[usize]) -> Vec<Vec<AxisIndex>> {
        let mut at = 0;
        sizes
            .iter()
            .map(|&len| {
                let mut idx: Vec<AxisIndex> = shape.iter().map(|&d| identity_index(d)).collect();
                idx[axis] = (at..at + len).map(Some).collect();
                at += len;
                idx
            })
            .collect()
    }
}

impl Operator for Split {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let shape = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        let (axis, sizes) = Split::sizes(cx, &shape)?;
        Ok(sizes
            .into_iter()
            .map(|n| {
                let mut s = shape.clone();
                s[axis] = n;
                TypeShape::new(t, s)
            })
            .collect())
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let (axis, sizes) = tryo!(Split::sizes(cx, x.shape()));
        Some(Ok(Split::indices(x.shape(), axis, &sizes)
            .iter()
            .map(|idx| take_all_host(x, idx, 0.0))
            .collect()))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.input(0).unwrap())?;
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let (axis, sizes) = Split::sizes(&opcx, &shape)?;
        for (k, idx) in Split::indices(&shape, axis, &sizes).iter().enumerate() {
            set_take(cx, node, k, idx, 0.0)?;
        }
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Slice.

/// One axis of a slice, after ONNX's clamping.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AxisSlice {
    start: i64,
    step: i64,
    len: usize,
}

/// ONNX Slice on one axis of size `dim` (opset 10+ semantics, which are
/// opset 1's with a step): negative positions count from the end, then
/// positions are clamped to the axis ([0, dim] forwards, [-1, dim - 1]
/// backwards, so a backward slice can run to the first element).
///
/// An end of INT_MAX (int32's or int64's) means "to the end in the step's
/// direction", as onnxruntime and exporters read it, also backwards.
fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> AxisSlice {
    let d = dim as i64;
    let s = if start < 0 {
        start.saturating_add(d)
    } else {
        start
    };
    let e = if end == i64::MAX || end == i32::MAX as i64 {
        if step < 0 {
            -1
        } else {
            d
        }
    } else if end < 0 {
        end.saturating_add(d)
    } else {
        end
    };
    let (s, e) = if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
    };
    let len = if step > 0 {
        if e > s {
            (e - s + step - 1) / step
        } else {
            0
        }
    } else if s > e {
        (s - e + (-step) - 1) / (-step)
    } else {
        0
    };
    AxisSlice {
        start: s,
        step,
        len: len as usize,
    }
}

struct Slice;

impl Slice {
    fn axes(cx: &OpCx, shape: &[usize]) -> Result<Vec<AxisSlice>> {
        let (starts, ends, axes, steps) = if cx.opset < 10 {
            let starts = cx
                .node
                .attr_ints("starts")?
                .ok_or_else(|| cx.err("missing 'starts' attribute"))?;
            let ends = cx
                .node
                .attr_ints("ends")?
                .ok_or_else(|| cx.err("missing 'ends' attribute"))?;
            (starts, ends, cx.node.attr_ints("axes")?, None)
        } else {
            let starts = const_ints(cx, 1, "starts")?;
            let ends = const_ints(cx, 2, "ends")?;
            let axes = if cx.has_input(3) {
                Some(const_ints(cx, 3, "axes")?)
            } else {
                None
            };
            let steps = if cx.has_input(4) {
                Some(const_ints(cx, 4, "steps")?)
            } else {
                None
            };
            (starts, ends, axes, steps)
        };
        let n = starts.len();
        if ends.len() != n {
            return Err(cx.err(format!(
                "starts {starts:?} and ends {ends:?} differ in length"
            )));
        }
        let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if axes.len() != n || steps.len() != n {
            return Err(cx.err(format!(
                "starts, ends, axes and steps differ in length: {n}, {n}, {}, {}",
                axes.len(),
                steps.len()
            )));
        }
        let rank = shape.len();
        let mut out: Vec<Option<AxisSlice>> = vec![None; rank];
        for k in 0..n {
            if rank == 0 {
                return Err(cx.err("cannot slice a scalar"));
            }
            let a = norm_axis(axes[k], rank, cx)?;
            if out[a].is_some() {
                return Err(cx.err(format!("axis {a} is sliced twice")));
            }
            if steps[k] == 0 {
                return Err(cx.err("steps cannot be 0"));
            }
            out[a] = Some(slice_axis(shape[a], starts[k], ends[k], steps[k]));
        }
        Ok(out
            .into_iter()
            .zip(shape)
            .map(|(s, &d)| {
                s.unwrap_or(AxisSlice {
                    start: 0,
                    step: 1,
                    len: d,
                })
            })
            .collect())
    }

    fn indices(sl: &[AxisSlice]) -> Vec<AxisIndex> {
        sl.iter()
            .map(|s| {
                (0..s.len)
                    .map(|i| Some((s.start + i as i64 * s.step) as usize))
                    .collect()
            })
            .collect()
    }
}

impl Operator for Slice {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let sl = Slice::axes(cx, &cx.in_shape(0)?)?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            sl.iter().map(|s| s.len).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let sl = tryo!(Slice::axes(cx, x.shape()));
        Some(Ok(vec![take_all_host(x, &Slice::indices(&sl), 0.0)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.input(0).unwrap())?;
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let sl = Slice::axes(&opcx, &shape)?;
        // Every axis is one arithmetic run, so this is one rearrange.
        set_take(cx, node, 0, &Slice::indices(&sl), 0.0)
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Expand and Tile.

struct Expand;

impl Expand {
    fn out_shape(cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let spec = const_ints(cx, 1, "shape")?;
        let spec = dims_from(cx, &spec, "shape")?;
        broadcast_shapes(&[input.to_vec(), spec.clone()]).ok_or_else(|| {
            cx.err(format!(
                "input {input:?} does not broadcast with shape {spec:?}"
            ))
        })
    }
}

impl Operator for Expand {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            Expand::out_shape(cx, &cx.in_shape(0)?)?,
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let shape = tryo!(Expand::out_shape(cx, x.shape()));
        if numel(&shape) > FOLD_LIMIT {
            return None;
        }
        Some(
            broadcast_host(x, &shape)
                .map(|t| vec![t])
                .ok_or_else(|| cx.err("broadcast failed")),
        )
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.outputs[0])?;
        let x = cx.tensor(node.input(0).unwrap())?;
        let y = if numel(&shape) == 0 {
            fill_tensor(cx, x.dtype, &shape, 0.0)?
        } else {
            cx.expand(&x, &shape)?
        };
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

struct Tile;

impl Tile {
    fn repeats(cx: &OpCx, rank: usize) -> Result<Vec<usize>> {
        let r = const_ints(cx, 1, "repeats")?;
        if r.len() != rank {
            return Err(cx.err(format!(
                "repeats {r:?} has {} entries for an input of rank {rank}",
                r.len()
            )));
        }
        dims_from(cx, &r, "repeats")
    }
}

impl Operator for Tile {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let r = Tile::repeats(cx, s.len())?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            s.iter().zip(&r).map(|(a, b)| a * b).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let r = tryo!(Tile::repeats(cx, x.shape().len()));
        let idx: Vec<AxisIndex> = x
            .shape()
            .iter()
            .zip(&r)
            .map(|(&d, &k)| (0..d * k).map(|i| Some(i % d.max(1))).collect())
            .collect();
        if numel(&idx.iter().map(Vec::len).collect::<Vec<_>>()) > FOLD_LIMIT {
            return None;
        }
        Some(Ok(vec![take_all_host(x, &idx, 0.0)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let x = cx.tensor(node.input(0).unwrap())?;
        let out = cx.shape(node.outputs[0])?;
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let r = Tile::repeats(&opcx, x.shape.len())?;
        if numel(&out) == 0 {
            let y = fill_tensor(cx, x.dtype, &out, 0.0)?;
            cx.set(node.outputs[0], y);
            return Ok(());
        }
        // One view: every repeated axis d becomes (repeat, d) with a zero
        // stride on the repeat, then a free reshape merges the pairs.
        let st = row_major_strides(&x.shape);
        let mut shape = Vec::new();
        let mut strides = Vec::new();
        for a in 0..x.shape.len() {
            if r[a] != 1 {
                shape.push(r[a]);
                strides.push(0);
            }
            shape.push(x.shape[a]);
            strides.push(st[a]);
        }
        let v = View {
            offset: 0,
            shape,
            strides,
        };
        let y = view(cx, &x, &v)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// ConstantOfShape and Range: values made from shapes.

struct ConstantOfShape;

impl ConstantOfShape {
    /// The one-element fill value (float32 0 by default) and the shape.
    fn parts(cx: &OpCx) -> Result<(HostTensor, Vec<usize>)> {
        let value = match cx.node.attr("value") {
            None => HostTensor::full(ElemType::F32, &[], 0.0),
            Some(Attr::Tensor(t)) if t.numel() == 1 => t.reshape(&[])?,
            Some(other) => {
                return Err(cx.err(format!(
                    "'value' must be a one-element tensor, got {other:?}"
                )))
            }
        };
        let shape = const_ints(cx, 0, "shape")?;
        Ok((value, dims_from(cx, &shape, "shape")?))
    }
}

impl Operator for ConstantOfShape {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let (v, shape) = ConstantOfShape::parts(cx)?;
        Ok(vec![TypeShape::new(v.dtype, shape)])
    }
    fn eval(&self, cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (v, shape) = tryo!(ConstantOfShape::parts(cx));
        if numel(&shape) > FILL_FOLD_LIMIT {
            return None;
        }
        Some(
            broadcast_host(&v, &shape)
                .map(|t| vec![t])
                .ok_or_else(|| cx.err("broadcast failed")),
        )
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let (v, shape) = ConstantOfShape::parts(&opcx)?;
        let dt = cx.device_type(v.dtype);
        let y = fill_tensor(cx, dt, &shape, v.to_f64_vec()[0])?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
}

struct Range;

impl Range {
    fn value(cx: &OpCx) -> Result<HostTensor> {
        let t = cx.same_dtype(&[0, 1, 2])?;
        let mut sc = [0.0f64; 3];
        let mut si = [0i64; 3];
        for i in 0..3 {
            let c = cx.const_input(i).ok_or_else(|| {
                cx.unsupported_form(
                    "start, limit and delta must be known at compile time (Range is always folded)",
                )
            })?;
            if c.numel() != 1 {
                return Err(cx.err(format!(
                    "input {i} must be a scalar, got shape {:?}",
                    c.shape()
                )));
            }
            sc[i] = c.to_f64_vec()[0];
            si[i] = c.to_i64_vec()[0];
        }
        if t.is_float() {
            let (start, limit, delta) = (sc[0], sc[1], sc[2]);
            if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
                return Err(cx.err(format!("cannot count from {start} to {limit} by {delta}")));
            }
            let n = (round_float(t, limit - start) / delta).ceil().max(0.0) as usize;
            // Accumulated in the element type, as the reference loop does.
            let mut v = Vec::with_capacity(n);
            let mut x = start;
            for _ in 0..n {
                v.push(x);
                x = round_float(t, x + delta);
            }
            Ok(HostTensor::float(
                t,
                ArrayD::from_shape_vec(IxDyn(&[n]), v).unwrap(),
            ))
        } else if t.is_int() {
            let (start, limit, delta) = (si[0], si[1], si[2]);
            if delta == 0 {
                return Err(cx.err("delta cannot be 0"));
            }
            let n = ((limit as f64 - start as f64) / delta as f64)
                .ceil()
                .max(0.0) as usize;
            let v: Vec<i64> = (0..n as i64).map(|i| start + i * delta).collect();
            Ok(HostTensor::int(
                t,
                ArrayD::from_shape_vec(IxDyn(&[n]), v).unwrap(),
            ))
        } else {
            Err(cx.err(format!("does not accept {t} inputs")))
        }
    }
}

impl Operator for Range {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let v = Range::value(cx)?;
        Ok(vec![TypeShape::new(v.dtype, v.shape().to_vec())])
    }
    fn eval(&self, cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        Some(Range::value(cx).map(|v| vec![v]))
    }
    fn lower(&self, _cx: &mut LowerCx, node: &Node) -> Result<()> {
        Err(Error::Internal(format!(
            "Range node '{}' survived folding",
            node.name
        )))
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Gather.

struct Gather;

impl Gather {
    fn axis(cx: &OpCx, rank: usize) -> Result<usize> {
        if rank == 0 {
            return Err(cx.err("cannot gather from a scalar"));
        }
        norm_axis(cx.node.attr_i("axis", 0)?, rank, cx)
    }

    /// Normalised constant indices, checked against the axis.
    fn indices(cx: &OpCx, t: &HostTensor, dim: usize) -> Result<Vec<usize>> {
        t.to_i64_vec()
            .into_iter()
            .map(|i| {
                let j = if i < 0 { i + dim as i64 } else { i };
                if j < 0 || j >= dim as i64 {
                    Err(cx.err(format!(
                        "index {i} is out of range for an axis of size {dim}"
                    )))
                } else {
                    Ok(j as usize)
                }
            })
            .collect()
    }

    /// Outer-indexing form of a gather with constant indices: the indices
    /// flattened along `axis`.
    fn take_index(shape: &[usize], axis: usize, idx: &[usize]) -> Vec<AxisIndex> {
        let mut all: Vec<AxisIndex> = shape.iter().map(|&d| identity_index(d)).collect();
        all[axis] = idx.iter().map(|&i| Some(i)).collect();
        all
    }
}

impl Operator for Gather {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let it = cx.in_dtype(1)?;
        if !matches!(it, ElemType::I32 | ElemType::I64) {
            return Err(cx.err(format!("indices must be int32 or int64, got {it}")));
        }
        let axis = Gather::axis(cx, s.len())?;
        let is = cx.in_shape(1)?;
        if let Some(c) = cx.const_input(1) {
            Gather::indices(cx, c, s[axis])?;
        }
        let mut out = s[..axis].to_vec();
        out.extend(&is);
        out.extend(&s[axis + 1..]);
        Ok(vec![TypeShape::new(cx.in_dtype(0)?, out)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (x, ind) = (inputs[0]?, inputs[1]?);
        let s = x.shape().to_vec();
        let axis = tryo!(Gather::axis(cx, s.len()));
        let idx = tryo!(Gather::indices(cx, ind, s[axis]));
        let mut out = s[..axis].to_vec();
        out.extend(ind.shape());
        out.extend(&s[axis + 1..]);
        let y = take_all_host(x, &Gather::take_index(&s, axis, &idx), 0.0);
        Some(y.reshape(&out).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let Some(ind) = opcx.const_input(1) else {
            // Indices known only at run time: the device's table lookup.
            let rank = cx.shape(node.input(0).unwrap())?.len();
            let axis = Gather::axis(&opcx, rank)?;
            return super::gather::lower_dynamic(cx, node, axis);
        };
        let s = cx.shape(node.input(0).unwrap())?;
        let axis = Gather::axis(&opcx, s.len())?;
        let idx = Gather::indices(&opcx, ind, s[axis])?;
        let out = cx.shape(node.outputs[0])?;
        let x = cx.tensor(node.input(0).unwrap())?;
        // A single index or an arithmetic progression is one rearrange;
        // anything else concatenates one view per run of indices.
        let y = lower_take(cx, &x, &Gather::take_index(&s, axis, &idx), 0.0)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Pad.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

struct Pad;

struct PadSpec {
    /// (before, after) per axis; negative values crop.
    pads: Vec<(i64, i64)>,
    mode: PadMode,
    value: f64,
}

impl Pad {
    fn spec(cx: &OpCx, rank: usize) -> Result<PadSpec> {
        let mode = match cx.node.attr_s("mode", "constant")?.as_str() {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" if cx.opset >= 19 => PadMode::Wrap,
            other => {
                return Err(cx.err(format!(
                    "mode '{other}' is not one of 'constant', 'reflect', 'edge'{} at opset {}",
                    if cx.opset >= 19 { ", 'wrap'" } else { "" },
                    cx.opset
                )))
            }
        };
        let (flat, value, axes) = if cx.opset < 11 {
            let p = match cx.node.attr_ints("pads")? {
                Some(p) => p,
                None => cx
                    .node
                    .attr_ints("paddings")?
                    .ok_or_else(|| cx.err("missing 'pads' attribute"))?,
            };
            (p, cx.node.attr_f("value", 0.0)? as f64, None)
        } else {
            let p = const_ints(cx, 1, "pads")?;
            let value = if cx.has_input(2) {
                let c = cx.const_input(2).ok_or_else(|| {
                    cx.unsupported_form("constant_value (input 2) must be known at compile time")
                })?;
                c.to_f64_vec().first().copied().unwrap_or(0.0)
            } else {
                0.0
            };
            let axes = if cx.opset >= 18 && cx.has_input(3) {
                Some(const_ints(cx, 3, "axes")?)
            } else {
                None
            };
            (p, value, axes)
        };
        let axes: Vec<usize> = match axes {
            Some(a) => a
                .iter()
                .map(|&x| norm_axis(x, rank, cx))
                .collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        if flat.len() != 2 * axes.len() {
            return Err(cx.err(format!(
                "pads {flat:?} should have {} entries (two per padded axis)",
                2 * axes.len()
            )));
        }
        let mut pads = vec![(0i64, 0i64); rank];
        let mut seen = vec![false; rank];
        for (k, &a) in axes.iter().enumerate() {
            if std::mem::replace(&mut seen[a], true) {
                return Err(cx.err(format!("axis {a} is padded twice")));
            }
            pads[a] = (flat[k], flat[k + axes.len()]);
        }
        Ok(PadSpec { pads, mode, value })
    }

    /// Per axis, which input position each output position reads. Negative
    /// pads crop first; the border modes then extend what remains, as
    /// onnxruntime does (reflect and wrap repeat as often as needed).
    fn indices(cx: &OpCx, shape: &[usize], spec: &PadSpec) -> Result<Vec<AxisIndex>> {
        let mut out = Vec::with_capacity(shape.len());
        for (a, (&n, &(pb, pe))) in shape.iter().zip(&spec.pads).enumerate() {
            let lo = (-pb).max(0);
            let hi = n as i64 - (-pe).max(0);
            if hi < lo {
                return Err(cx.err(format!(
                    "pads ({pb}, {pe}) crop more than axis {a} of size {n} has"
                )));
            }
            let m = hi - lo;
            let (before, after) = (pb.max(0), pe.max(0));
            if m == 0 && (before > 0 || after > 0) && spec.mode != PadMode::Constant {
                return Err(cx.err(format!(
                    "cannot extend the empty axis {a} in {:?} mode",
                    spec.mode
                )));
            }
            let idx: AxisIndex = (-before..m + after)
                .map(|j| {
                    let k = if (0..m).contains(&j) {
                        j
                    } else {
                        match spec.mode {
                            PadMode::Constant => return None,
                            PadMode::Edge => j.clamp(0, m - 1),
                            PadMode::Wrap => j.rem_euclid(m),
                            PadMode::Reflect if m == 1 => 0,
                            PadMode::Reflect => {
                                let p = 2 * (m - 1);
                                let r = j.rem_euclid(p);
                                if r < m {
                                    r
                                } else {
                                    p - r
                                }
                            }
                        }
                    };
                    Some((lo + k) as usize)
                })
                .collect();
            out.push(idx);
        }
        Ok(out)
    }
}

impl Operator for Pad {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let spec = Pad::spec(cx, s.len())?;
        let idx = Pad::indices(cx, &s, &spec)?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            idx.iter().map(Vec::len).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let spec = tryo!(Pad::spec(cx, x.shape().len()));
        let idx = tryo!(Pad::indices(cx, x.shape(), &spec));
        if numel(&idx.iter().map(Vec::len).collect::<Vec<_>>()) > FOLD_LIMIT {
            return None;
        }
        Some(Ok(vec![take_all_host(x, &idx, spec.value)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.input(0).unwrap())?;
        let opcx = OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        };
        let spec = Pad::spec(&opcx, shape.len())?;
        let idx = Pad::indices(&opcx, &shape, &spec)?;
        set_take(cx, node, 0, &idx, spec.value)
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Concat", Box::new(Concat));
    r.insert("Split", Box::new(Split));
    r.insert("Slice", Box::new(Slice));
    r.insert("Expand", Box::new(Expand));
    r.insert("Tile", Box::new(Tile));
    r.insert("ConstantOfShape", Box::new(ConstantOfShape));
    r.insert("Range", Box::new(Range));
    r.insert("Gather", Box::new(Gather));
    r.insert("Pad", Box::new(Pad));
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ir::{Dim, Graph, Model, Value};
    use crate::ops::lookup;

    pub(crate) fn f32s(shape: &[usize], v: &[f64]) -> HostTensor {
        HostTensor::float(
            ElemType::F32,
            ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap(),
        )
    }
    pub(crate) fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
        HostTensor::from_i64s(shape, v.to_vec())
    }
    fn arange(shape: &[usize]) -> HostTensor {
        f32s(
            shape,
            &(0..numel(shape)).map(|i| i as f64).collect::<Vec<_>>(),
        )
    }
    pub(crate) fn ints(a: &[i64]) -> Attr {
        Attr::Ints(a.to_vec())
    }

    /// An operand of a one-node graph: a constant, a computed value of known
    /// type and shape, or an omitted optional input.
    pub(crate) enum In {
        C(HostTensor),
        Var(ElemType, Vec<usize>),
        Absent,
    }

    /// Infers and folds one node; checks the folded values against inference.
    pub(crate) fn fold(
        op: &str,
        opset: i64,
        ins: Vec<In>,
        n_out: usize,
        attrs: &[(&str, Attr)],
    ) -> Result<Vec<HostTensor>> {
        let mut g = Graph::default();
        let mut inputs = Vec::new();
        for (i, a) in ins.into_iter().enumerate() {
            inputs.push(match a {
                In::C(t) => {
                    let id = g.value_named(&format!("in{i}"));
                    g.set_constant(id, t);
                    Some(id)
                }
                In::Var(dt, s) => Some(g.add_value(Value {
                    name: format!("in{i}"),
                    dtype: Some(dt),
                    shape: Some(s.iter().map(|&d| Dim::Fixed(d)).collect()),
                    constant: None,
                })),
                In::Absent => None,
            });
        }
        let outputs = (0..n_out)
            .map(|k| g.value_named(&format!("out{k}")))
            .collect();
        let node = Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            inputs,
            outputs,
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        };
        let o = lookup(&node, opset)?;
        let cx = OpCx {
            graph: &g,
            node: &node,
            opset,
        };
        let types = o.infer(&cx)?;
        let vals: Vec<Option<&HostTensor>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.constant(v)))
            .collect();
        let out = o.eval(&cx, &vals).expect("the node folds")?;
        assert_eq!(out.len(), types.len());
        for (t, ts) in out.iter().zip(&types) {
            assert_eq!(
                (t.dtype, t.shape()),
                (ts.dtype, ts.shape.as_slice()),
                "fold disagrees with inference"
            );
        }
        Ok(out)
    }

    fn one(op: &str, opset: i64, ins: Vec<In>, attrs: &[(&str, Attr)]) -> HostTensor {
        fold(op, opset, ins, 1, attrs).unwrap().pop().unwrap()
    }

    #[test]
    fn index_runs() {
        let s = |v: &[usize]| v.iter().map(|&i| Some(i)).collect::<Vec<_>>();
        assert_eq!(
            runs(&s(&[0, 1, 2, 3])),
            vec![Run::Seq {
                start: 0,
                step: 1,
                len: 4
            }]
        );
        assert_eq!(
            runs(&s(&[5])),
            vec![Run::Seq {
                start: 5,
                step: 0,
                len: 1
            }]
        );
        assert_eq!(
            runs(&s(&[3, 3, 3])),
            vec![Run::Seq {
                start: 3,
                step: 0,
                len: 3
            }]
        );
        assert_eq!(
            runs(&s(&[2, 1, 0, 1, 2])),
            vec![
                Run::Seq {
                    start: 2,
                    step: -1,
                    len: 3
                },
                Run::Seq {
                    start: 1,
                    step: 1,
                    len: 2
                }
            ]
        );
        assert_eq!(
            runs(&[None, None, Some(0), Some(2), None]),
            vec![
                Run::Fill(2),
                Run::Seq {
                    start: 0,
                    step: 2,
                    len: 2
                },
                Run::Fill(1)
            ]
        );
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn slice_clamps_and_steps() {
        let x = arange(&[10]);
        let sl = |starts: &[i64], ends: &[i64], steps: &[i64]| {
            one(
                "Slice",
                13,
                vec![
                    In::C(x.clone()),
                    In::C(i64s(&[1], starts)),
                    In::C(i64s(&[1], ends)),
                    In::Absent,
                    In::C(i64s(&[1], steps)),
                ],
                &[],
            )
            .to_i64_vec()
        };
        assert_eq!(sl(&[-3], &[i64::MAX], &[1]), vec![7, 8, 9]);
        assert_eq!(
            sl(&[-1], &[i64::MIN], &[-1]),
            (0..10).rev().collect::<Vec<_>>()
        );
        assert_eq!(sl(&[8], &[1], &[-2]), vec![8, 6, 4, 2]);
        assert_eq!(sl(&[20], &[-20], &[-3]), vec![9, 6, 3, 0]);
        assert_eq!(sl(&[5], &[2], &[1]), Vec::<i64>::new());
        assert_eq!(sl(&[2], &[i64::MAX], &[-1]), vec![2, 1, 0]);
        assert_eq!(sl(&[2], &[1000], &[-1]), Vec::<i64>::new());
        assert_eq!(sl(&[1], &[9], &[3]), vec![1, 4, 7]);
        // Opset 9: attributes, on a chosen axis.
        let y = one(
            "Slice",
            9,
            vec![In::C(arange(&[3, 4]))],
            &[
                ("starts", ints(&[1])),
                ("ends", ints(&[100])),
                ("axes", ints(&[-1])),
            ],
        );
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_i64_vec(), vec![1, 2, 3, 5, 6, 7, 9, 10, 11]);
        let e = fold(
            "Slice",
            13,
            vec![
                In::C(x.clone()),
                In::C(i64s(&[1], &[0])),
                In::C(i64s(&[1], &[3])),
                In::Absent,
                In::C(i64s(&[1], &[0])),
            ],
            1,
            &[],
        );
        assert!(e.is_err());
    }

    #[test]
    fn slice_needs_constant_bounds() {
        let e = fold(
            "Slice",
            13,
            vec![
                In::C(arange(&[4])),
                In::Var(ElemType::I64, vec![1]),
                In::C(i64s(&[1], &[3])),
            ],
            1,
            &[],
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }

    #[test]
    fn concat_and_split() {
        let a = arange(&[2, 2]);
        let b = f32s(&[2, 1], &[9.0, 8.0]);
        let y = one(
            "Concat",
            13,
            vec![In::C(a.clone()), In::C(b)],
            &[("axis", Attr::Int(-1))],
        );
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_i64_vec(), vec![0, 1, 9, 2, 3, 8]);
        let s = one(
            "Concat",
            13,
            vec![In::C(i64s(&[2], &[1, 2])), In::C(i64s(&[1], &[-1]))],
            &[("axis", Attr::Int(0))],
        );
        assert_eq!((s.dtype, s.to_i64_vec()), (ElemType::I64, vec![1, 2, -1]));
        assert!(fold(
            "Concat",
            13,
            vec![In::C(a.clone()), In::C(arange(&[3, 1]))],
            1,
            &[("axis", Attr::Int(1))]
        )
        .is_err());

        let x = arange(&[5, 2]);
        let parts = |r: Vec<HostTensor>| r.iter().map(|t| t.shape()[0]).collect::<Vec<_>>();
        let r = fold(
            "Split",
            11,
            vec![In::C(x.clone())],
            2,
            &[("split", ints(&[1, 4]))],
        )
        .unwrap();
        assert_eq!(parts(r.clone()), vec![1, 4]);
        assert_eq!(r[1].to_i64_vec(), (2..10).collect::<Vec<_>>());
        let r = fold(
            "Split",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[3], &[2, 0, 3]))],
            3,
            &[],
        )
        .unwrap();
        assert_eq!(parts(r), vec![2, 0, 3]);
        let r = fold(
            "Split",
            18,
            vec![In::C(x.clone())],
            3,
            &[("num_outputs", Attr::Int(3))],
        )
        .unwrap();
        assert_eq!(parts(r.clone()), vec![2, 2, 1]);
        assert_eq!(r[2].to_i64_vec(), vec![8, 9]);
        let r = fold(
            "Split",
            18,
            vec![In::C(x.clone())],
            2,
            &[("axis", Attr::Int(-1)), ("num_outputs", Attr::Int(2))],
        )
        .unwrap();
        assert_eq!(r[0].to_i64_vec(), vec![0, 2, 4, 6, 8]);
        // Uneven without num_outputs, and chunks that run out.
        assert!(fold("Split", 13, vec![In::C(x.clone())], 2, &[]).is_err());
        assert!(fold(
            "Split",
            18,
            vec![In::C(arange(&[5]))],
            4,
            &[("num_outputs", Attr::Int(4))]
        )
        .is_err());
    }

    #[test]
    fn expand_and_tile() {
        let x = f32s(&[3, 1], &[1.0, 2.0, 3.0]);
        let y = one(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[3], &[2, 1, 4]))],
            &[],
        );
        assert_eq!(y.shape(), &[2, 3, 4]);
        assert_eq!(&y.to_i64_vec()[..8], &[1, 1, 1, 1, 2, 2, 2, 2]);
        // Bidirectional: the shape may be smaller than the input.
        let y = one(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[5]))],
            &[],
        );
        assert_eq!(y.shape(), &[3, 5]);
        assert!(fold(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[2], &[2, 1]))],
            1,
            &[]
        )
        .is_err());

        let t = one(
            "Tile",
            13,
            vec![
                In::C(f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
                In::C(i64s(&[2], &[2, 3])),
            ],
            &[],
        );
        assert_eq!(t.shape(), &[4, 6]);
        assert_eq!(&t.to_i64_vec()[..12], &[1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4]);
        assert_eq!(&t.to_i64_vec()[12..18], &[1, 2, 1, 2, 1, 2]);
        assert!(fold("Tile", 13, vec![In::C(x), In::C(i64s(&[1], &[2]))], 1, &[]).is_err());
    }

    #[test]
    fn constant_of_shape_and_range() {
        let z = one("ConstantOfShape", 9, vec![In::C(i64s(&[2], &[2, 3]))], &[]);
        assert_eq!(
            (z.dtype, z.shape(), z.to_f64_vec()),
            (ElemType::F32, &[2usize, 3][..], vec![0.0; 6])
        );
        let v = one(
            "ConstantOfShape",
            20,
            vec![In::C(i64s(&[1], &[3]))],
            &[("value", Attr::Tensor(i64s(&[1], &[7])))],
        );
        assert_eq!((v.dtype, v.to_i64_vec()), (ElemType::I64, vec![7, 7, 7]));
        let s = one(
            "ConstantOfShape",
            9,
            vec![In::C(i64s(&[0], &[]))],
            &[("value", Attr::Tensor(f32s(&[1], &[2.5])))],
        );
        assert_eq!((s.shape(), s.to_f64_vec()), (&[][..], vec![2.5]));

        let sc = |v: f64| In::C(f32s(&[], &[v]));
        let r = one("Range", 11, vec![sc(0.0), sc(1.0), sc(0.25)], &[]);
        assert_eq!(r.to_f64_vec(), vec![0.0, 0.25, 0.5, 0.75]);
        let r = one("Range", 11, vec![sc(1.0), sc(0.0), sc(0.3)], &[]);
        assert_eq!(r.numel(), 0);
        let si = |v: i64| In::C(i64s(&[], &[v]));
        let r = one("Range", 11, vec![si(10), si(4), si(-3)], &[]);
        assert_eq!((r.dtype, r.to_i64_vec()), (ElemType::I64, vec![10, 7]));
        assert!(fold("Range", 11, vec![si(0), si(3), si(0)], 1, &[]).is_err());
        let e = fold(
            "Range",
            11,
            vec![si(0), In::Var(ElemType::I64, vec![]), si(1)],
            1,
            &[],
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }

    #[test]
    fn gather_with_constant_indices() {
        let x = arange(&[3, 4]);
        let y = one(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[2, 2], &[0, -1, 3, 3]))],
            &[("axis", Attr::Int(1))],
        );
        assert_eq!(y.shape(), &[3, 2, 2]);
        assert_eq!(&y.to_i64_vec()[..4], &[0, 3, 3, 3]);
        let y = one(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[], &[-2]))],
            &[],
        );
        assert_eq!(
            (y.shape(), y.to_i64_vec()),
            (&[4usize][..], vec![4, 5, 6, 7])
        );
        assert!(fold(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[3]))],
            1,
            &[]
        )
        .is_err());
        // Shape -> Gather, as shape-computing subgraphs do.
        let y = one(
            "Gather",
            13,
            vec![In::C(i64s(&[4], &[8, 3, 32, 32])), In::C(i64s(&[], &[0]))],
            &[],
        );
        assert_eq!(
            (y.dtype, y.shape(), y.to_i64_vec()),
            (ElemType::I64, &[][..], vec![8])
        );
    }

    #[test]
    fn gather_with_dynamic_indices_is_typed_but_not_folded() {
        let mut gr = Graph::default();
        let x = gr.value_named("x");
        gr.set_constant(x, arange(&[3, 4]));
        let i = gr.add_value(Value {
            name: "i".into(),
            dtype: Some(ElemType::I64),
            shape: Some(vec![Dim::Fixed(5)]),
            constant: None,
        });
        let o = gr.value_named("o");
        let node = Node {
            name: "g".into(),
            op_type: "Gather".into(),
            domain: String::new(),
            inputs: vec![Some(x), Some(i)],
            outputs: vec![o],
            attrs: Default::default(),
        };
        let cx = OpCx {
            graph: &gr,
            node: &node,
            opset: 13,
        };
        let op = lookup(&node, 13).unwrap();
        assert_eq!(
            op.infer(&cx).unwrap(),
            vec![TypeShape::new(ElemType::F32, vec![5, 4])]
        );
        assert!(op.eval(&cx, &[gr.constant(x), None]).is_none());
    }

    #[test]
    fn pad_modes() {
        let x = arange(&[3]);
        let pad = |mode: &str, p: [i64; 2], opset: i64| {
            fold(
                "Pad",
                opset,
                vec![In::C(x.clone()), In::C(i64s(&[2], &p))],
                1,
                &[("mode", Attr::String(mode.into()))],
            )
            .map(|r| r[0].to_i64_vec())
        };
        assert_eq!(pad("constant", [1, 2], 13).unwrap(), vec![0, 0, 1, 2, 0, 0]);
        assert_eq!(
            pad("reflect", [2, 2], 13).unwrap(),
            vec![2, 1, 0, 1, 2, 1, 0]
        );
        assert_eq!(
            pad("reflect", [3, 5], 13).unwrap(),
            vec![1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1]
        );
        assert_eq!(pad("edge", [-1, 4], 13).unwrap(), vec![1, 2, 2, 2, 2, 2]);
        assert_eq!(pad("edge", [3, 0], 13).unwrap(), vec![0, 0, 0, 0, 1, 2]);
        assert_eq!(
            pad("wrap", [7, 0], 19).unwrap(),
            vec![2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
        );
        assert_eq!(pad("wrap", [-1, 4], 19).unwrap(), vec![1, 2, 1, 2, 1, 2]);
        assert!(pad("wrap", [1, 1], 18).is_err());
        assert!(pad("constant", [-2, -2], 13).is_err());

        // Opset 11 constant_value, opset 18 axes, opset 2 attributes.
        let x2 = arange(&[2, 2]);
        let y = one(
            "Pad",
            11,
            vec![
                In::C(x2.clone()),
                In::C(i64s(&[4], &[0, 1, 1, 0])),
                In::C(f32s(&[], &[-1.0])),
            ],
            &[],
        );
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_i64_vec(), vec![-1, 0, 1, -1, 2, 3, -1, -1, -1]);
        let y = one(
            "Pad",
            18,
            vec![
                In::C(x2.clone()),
                In::C(i64s(&[2], &[1, 0])),
                In::Absent,
                In::C(i64s(&[1], &[-1])),
            ],
            &[("mode", Attr::String("edge".into()))],
        );
        assert_eq!(y.to_i64_vec(), vec![0, 0, 1, 2, 2, 3]);
        let y = one(
            "Pad",
            10,
            vec![In::C(x2)],
            &[("pads", ints(&[1, 0, 0, 0])), ("value", Attr::Float(7.0))],
        );
        assert_eq!(y.to_i64_vec(), vec![7, 7, 0, 1, 2, 3]);
    }

    /// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds down to the
    /// Reshape, which then has a constant target shape.
    #[test]
    fn shape_subgraph_folds_completely() {
        let mut g = Graph::default();
        let x = g.add_value(Value {
            name: "x".into(),
            dtype: Some(ElemType::F32),
            shape: Some(vec![Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)]),
            constant: None,
        });
        g.inputs.push(x);
        let k = |g: &mut Graph, name: &str, t: HostTensor| {
            let id = g.value_named(name);
            g.set_constant(id, t);
            id
        };
        let zero = k(&mut g, "zero", i64s(&[], &[0]));
        let ax = k(&mut g, "ax", i64s(&[1], &[0]));
        let minus1 = k(&mut g, "m1", i64s(&[1], &[-1]));
        let v = |g: &mut Graph, n: &str| g.value_named(n);
        let (s, b, bu, tgt, y) = (
            v(&mut g, "s"),
            v(&mut g, "b"),
            v(&mut g, "bu"),
            v(&mut g, "t"),
            v(&mut g, "y"),
        );
        let mk = |name: &str, op: &str, ins: Vec<usize>, out: usize, attrs: &[(&str, Attr)]| Node {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            inputs: ins.into_iter().map(Some).collect(),
            outputs: vec![out],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        g.nodes = vec![
            mk("shape", "Shape", vec![x], s, &[]),
            mk("gather", "Gather", vec![s, zero], b, &[]),
            mk("unsq", "Unsqueeze", vec![b, ax], bu, &[]),
            mk(
                "concat",
                "Concat",
                vec![bu, minus1],
                tgt,
                &[("axis", Attr::Int(0))],
            ),
            mk("reshape", "Reshape", vec![x, tgt], y, &[]),
        ];
        g.outputs.push(y);
        let mut m = Model {
            graph: g,
            opset: 13,
            name: "m".into(),
        };
        let folded = crate::passes::infer_and_fold(&mut m).unwrap();
        assert_eq!(folded, 4);
        assert_eq!(m.graph.nodes.len(), 1);
        assert_eq!(m.graph.nodes[0].op_type, "Reshape");
        assert_eq!(m.graph.shape_of(y), Some(vec![2, 12]));
        assert_eq!(m.graph.constant(tgt).unwrap().to_i64_vec(), vec![2, -1]);
    }
}
