//! Outer indexing, the data movement behind Concat, Split, Slice, Expand,
//! Tile, Gather with constant indices and Pad: along every axis, each output
//! position reads one source position, or the pad value.
//!
//! On the host that index list is applied directly (folding); on the device
//! each maximal arithmetic run of an index list is one strided view
//! (`rearrange`, with zero strides for repeats and negative strides for
//! reversals), and a list of several runs becomes the concatenation of their
//! views and of fills. A slice (any steps), an expand, a tile or a gather of
//! regularly spaced indices is therefore a single exchange; a padded axis
//! concatenates its borders (fills, or reversed, repeated or wrapped views)
//! with its middle.
//!
//! Shape arguments (starts, pads, repeats, split sizes, target shapes) must
//! be known at compile time; shape-computing subgraphs (Shape -> Gather ->
//! Concat -> Reshape) fold completely because every op using this evaluates
//! on the host.

use ndarray::{ArrayD, Axis, Dimension, IxDyn};

use crate::dtype::DeviceType;
use crate::error::Result;
use crate::ir::Node;
use crate::lower::{row_major_strides, DevTensor, LowerCx};
use crate::tensor::{round_float, wrap_int, Data, HostTensor};

use super::numel;

/// Folding that would materialise more elements than this on the host is
/// left to the device: a broadcast or tile of a constant is no cheaper as a
/// stored constant than as an exchange.
pub(crate) const FOLD_LIMIT: usize = 1 << 20;

/// Source position along one axis for each output position; `None` reads
/// the pad value.
pub(crate) type AxisIndex = Vec<Option<usize>>;

/// Every position of an axis of size `n`, in order.
pub(crate) fn identity_index(n: usize) -> AxisIndex {
    (0..n).map(Some).collect()
}

fn is_identity(idx: &AxisIndex, n: usize) -> bool {
    idx.len() == n && idx.iter().enumerate().all(|(i, v)| *v == Some(i))
}

// ---------------------------------------------------------------------------
// Host side (folding).

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
fn take_host(t: &HostTensor, axis: usize, idx: &[Option<usize>], fill: f64) -> HostTensor {
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

/// numpy broadcasting of a host tensor to `shape`.
pub(crate) fn broadcast_host(t: &HostTensor, shape: &[usize]) -> Option<HostTensor> {
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

// ---------------------------------------------------------------------------
// Device side (lowering).

/// A strided view of a tensor's row-major elements, as `rearrange` takes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct View {
    pub(crate) offset: i64,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<i64>,
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
enum Run {
    Seq { start: usize, step: i64, len: usize },
    Fill(usize),
}

/// Splits an index list into runs, greedily from the left.
fn runs(idx: &[Option<usize>]) -> Vec<Run> {
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
pub(crate) fn view(cx: &mut LowerCx, x: &DevTensor, v: &View) -> Result<DevTensor> {
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
pub(crate) fn set_take(
    cx: &mut LowerCx,
    node: &Node,
    out: usize,
    idx: &[AxisIndex],
    fill: f64,
) -> Result<()> {
    let x = cx.tensor(node.input(0).unwrap())?;
    let y = lower_take(cx, &x, idx, fill)?;
    cx.set(node.outputs[out], y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
