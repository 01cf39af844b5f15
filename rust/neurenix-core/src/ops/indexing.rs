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
use crate::error::{Error, Result};
use crate::ir::Node;
use crate::lower::{row_major_strides, DevTensor, LowerCx};
use crate::tensor::{host_array, round_float, wrap_int, Data, HostTensor};

use super::checked_numel;

/// Folding that would materialise more elements than this on the host is
/// left to the device: a broadcast or tile of a constant is no cheaper as a
/// stored constant than as an exchange.
pub(crate) const FOLD_LIMIT: usize = 1 << 20;

/// A maximal arithmetic progression of source positions, or of pad values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Run {
    Seq { start: usize, step: i64, len: usize },
    Fill(usize),
}

/// Which source position each output position along one axis reads (or the
/// pad value), as runs: its size is the number of runs, not of positions,
/// so an axis of 2^40 positions costs no more than one of 4.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AxisIndex {
    runs: Vec<Run>,
    len: usize,
}

impl AxisIndex {
    /// Every position of an axis of size `n`, in order.
    pub(crate) fn identity(n: usize) -> AxisIndex {
        AxisIndex::seq(0, 1, n)
    }

    /// `len` positions from `start` by `step`.
    pub(crate) fn seq(start: usize, step: i64, len: usize) -> AxisIndex {
        let mut a = AxisIndex::default();
        a.push_seq(start, step, len);
        a
    }

    /// Explicit positions, split into runs greedily from the left.
    pub(crate) fn from_positions(idx: &[Option<usize>]) -> AxisIndex {
        let mut a = AxisIndex::default();
        for r in runs(idx) {
            match r {
                Run::Seq { start, step, len } => a.push_seq(start, step, len),
                Run::Fill(len) => a.push_fill(len),
            }
        }
        a
    }

    /// Appends `len` positions from `start` by `step`, extending the last
    /// run when they continue its progression. The caller has checked that
    /// the axis length fits (it is an output dimension).
    pub(crate) fn push_seq(&mut self, start: usize, step: i64, len: usize) {
        if len == 0 {
            return;
        }
        self.len = self.len.saturating_add(len);
        if let Some(Run::Seq {
            start: s0,
            step: st0,
            len: l0,
        }) = self.runs.last_mut()
        {
            // The step from the last run's first position to `start`, and
            // the one the last run continues with.
            let at = |i: usize| i64::try_from(i).ok();
            let gap = at(start).zip(at(*s0)).and_then(|(s, s0)| s.checked_sub(s0));
            let reach = at(*l0).and_then(|l| st0.checked_mul(l));
            if *l0 == 1 {
                // A single position takes the step that reaches `start`.
                if let Some(d) = gap.filter(|&d| len == 1 || d == step) {
                    *st0 = d;
                    *l0 = l0.saturating_add(len);
                    return;
                }
            } else if (len == 1 || step == *st0) && gap.is_some() && gap == reach {
                *l0 = l0.saturating_add(len);
                return;
            }
        }
        self.runs.push(Run::Seq { start, step, len });
    }

    /// Appends `len` pad values.
    pub(crate) fn push_fill(&mut self, len: usize) {
        if len == 0 {
            return;
        }
        self.len = self.len.saturating_add(len);
        if let Some(Run::Fill(l0)) = self.runs.last_mut() {
            *l0 = l0.saturating_add(len);
            return;
        }
        self.runs.push(Run::Fill(len));
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn is_identity(&self, n: usize) -> bool {
        self.len == n
            && match self.runs.as_slice() {
                [] => true,
                [Run::Seq { start: 0, step, .. }] => *step == 1 || n == 1,
                _ => false,
            }
    }

    /// The positions one by one, for the host. Only called for outputs the
    /// caller has bounded (they are materialised on the host anyway).
    fn positions(&self) -> Result<Vec<Option<usize>>> {
        let mut out = Vec::with_capacity(self.len);
        for r in &self.runs {
            match *r {
                Run::Fill(len) => out.extend(std::iter::repeat_n(None, len)),
                Run::Seq { start, step, len } => {
                    let mut p = start;
                    for i in 0..len {
                        if i > 0 {
                            p = isize::try_from(step)
                                .ok()
                                .and_then(|st| p.checked_add_signed(st))
                                .ok_or_else(|| {
                                    Error::Internal(format!("run {r:?} leaves the axis"))
                                })?;
                        }
                        out.push(Some(p));
                    }
                }
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// Host side (folding).

fn take_arr<T: Clone>(
    a: &ArrayD<T>,
    axis: usize,
    idx: &[Option<usize>],
    fill: T,
) -> Result<ArrayD<T>> {
    let n = a.shape()[axis];
    if let Some(bad) = idx.iter().flatten().find(|&&i| i >= n) {
        return Err(Error::Internal(format!(
            "host indexing reads position {bad} of an axis of size {n}"
        )));
    }
    if idx.iter().all(Option::is_some) {
        let sel: Vec<usize> = idx.iter().flatten().copied().collect();
        return Ok(a.select(Axis(axis), &sel));
    }
    let mut shape = a.shape().to_vec();
    shape[axis] = idx.len();
    Ok(ArrayD::from_shape_fn(IxDyn(&shape), |ix: IxDyn| {
        let mut ix = ix;
        match idx[ix[axis]] {
            Some(i) => {
                ix[axis] = i;
                a[ix.slice()].clone()
            }
            None => fill.clone(),
        }
    }))
}

/// Host outer indexing along one axis.
fn take_host(t: &HostTensor, axis: usize, idx: &[Option<usize>], fill: f64) -> Result<HostTensor> {
    let data = match &t.data {
        Data::Float(a) => Data::Float(take_arr(a, axis, idx, round_float(t.dtype, fill))?),
        Data::Int(a) => Data::Int(take_arr(a, axis, idx, wrap_int(t.dtype, fill as i64))?),
        Data::Bool(a) => Data::Bool(take_arr(a, axis, idx, fill != 0.0)?),
    };
    Ok(HostTensor {
        dtype: t.dtype,
        data,
    })
}

/// Host outer indexing along every axis (`idx[a]` for axis `a`). An empty
/// result is built directly, whatever its dimensions; otherwise every axis
/// is at most as long as the result has elements, which the caller bounds.
pub(crate) fn take_all_host(t: &HostTensor, idx: &[AxisIndex], fill: f64) -> Result<HostTensor> {
    let shape: Vec<usize> = idx.iter().map(AxisIndex::len).collect();
    match checked_numel(&shape) {
        Some(0) => return empty_like(t, &shape),
        Some(_) => {}
        None => {
            return Err(Error::Internal(format!(
                "host indexing to shape {shape:?}, which overflows"
            )))
        }
    }
    let mut out = t.clone();
    for (a, ix) in idx.iter().enumerate() {
        if !ix.is_identity(out.shape()[a]) {
            out = take_host(&out, a, &ix.positions()?, fill)?;
        }
    }
    Ok(out)
}

/// An empty host tensor of `t`'s type and kind, of `shape`.
pub(crate) fn empty_like(t: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    let data = match &t.data {
        Data::Float(_) => Data::Float(host_array(shape, vec![])?),
        Data::Int(_) => Data::Int(host_array(shape, vec![])?),
        Data::Bool(_) => Data::Bool(host_array(shape, vec![])?),
    };
    Ok(HostTensor {
        dtype: t.dtype,
        data,
    })
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
    fn whole(shape: &[usize]) -> Result<View> {
        Ok(View {
            offset: 0,
            shape: shape.to_vec(),
            strides: row_major_strides(shape)?,
        })
    }

    /// Restricts axis `a` to `len` positions from `start` by `step`, where
    /// the source axis has element stride `src_stride`.
    fn restrict(
        &mut self,
        a: usize,
        start: usize,
        step: i64,
        len: usize,
        src_stride: i64,
    ) -> Result<()> {
        let overflow = || Error::Internal(format!("a view offset or stride of {self:?} overflows"));
        let off = i64::try_from(start)
            .ok()
            .and_then(|s| s.checked_mul(src_stride))
            .and_then(|o| o.checked_add(self.offset))
            .ok_or_else(overflow)?;
        // One position has no step (a slice may step by i64::MAX past it);
        // more positions stay inside the source axis, so their stride does
        // not overflow.
        let stride = if len <= 1 {
            0
        } else {
            step.checked_mul(src_stride).ok_or_else(overflow)?
        };
        self.offset = off;
        self.shape[a] = len;
        self.strides[a] = stride;
        Ok(())
    }
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
                let at = |i: usize| i64::try_from(i).ok();
                if let Some(Some(n)) = idx.get(q) {
                    step = at(*n).zip(at(s)).map_or(0, |(n, s)| n.wrapping_sub(s));
                    q += 1;
                    while q < idx.len() {
                        let want = at(q - p)
                            .and_then(|k| step.checked_mul(k))
                            .and_then(|d| at(s)?.checked_add(d));
                        if idx[q].and_then(at) != want || want.is_none() {
                            break;
                        }
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
    match checked_numel(shape) {
        Some(0) => {
            let name = format!("{}/empty", cx.name());
            let empty = HostTensor::full(dt.as_elem_type(), shape, 0.0)?;
            cx.host_constant(&empty, dt, &name)
        }
        Some(_) => cx.fill(dt, shape, value),
        None => Err(Error::model(format!(
            "'{}': a fill of shape {shape:?} has more elements than this host can count",
            cx.name()
        ))),
    }
}

/// `x` seen through `v`: free when the view is `x` itself.
pub(crate) fn view(cx: &mut LowerCx, x: &DevTensor, v: &View) -> Result<DevTensor> {
    let st = row_major_strides(&x.shape)?;
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
    let src_stride = row_major_strides(&x.shape)?[axis];
    let mut parts = Vec::with_capacity(rs.len());
    for r in rs {
        let mut v = base.clone();
        match *r {
            Run::Seq { start, step, len } => {
                v.restrict(axis, start, step, len, src_stride)?;
                parts.push(view(cx, x, &v)?);
            }
            Run::Fill(len) => {
                v.shape[axis] = len;
                parts.push(fill_tensor(cx, x.dtype, &v.shape, fill)?);
            }
        }
    }
    match parts.len() {
        1 => Ok(parts.remove(0)),
        _ => cx.concat(&parts, axis),
    }
}

/// Device outer indexing along every axis. Axes whose index is one run are
/// folded into a single strided view; each axis with several runs then
/// costs a concatenation.
pub(crate) fn lower_take(
    cx: &mut LowerCx,
    x: &DevTensor,
    idx: &[AxisIndex],
    fill: f64,
) -> Result<DevTensor> {
    let out_shape: Vec<usize> = idx.iter().map(AxisIndex::len).collect();
    let empty = checked_numel(&out_shape) == Some(0);
    if empty
        || idx
            .iter()
            .any(|i| matches!(i.runs.as_slice(), [Run::Fill(_)]))
    {
        return fill_tensor(cx, x.dtype, &out_shape, fill);
    }
    let st = row_major_strides(&x.shape)?;
    let mut base = View::whole(&x.shape)?;
    let mut multi = Vec::new();
    for (a, i) in idx.iter().enumerate() {
        match i.runs.as_slice() {
            [Run::Seq { start, step, len }] => base.restrict(a, *start, *step, *len, st[a])?,
            _ => multi.push(a),
        }
    }
    let Some((&first, rest)) = multi.split_first() else {
        return view(cx, x, &base);
    };
    let mut y = concat_runs(cx, x, &base, first, &idx[first].runs, fill)?;
    for &a in rest {
        let whole = View::whole(&y.shape)?;
        y = concat_runs(cx, &y, &whole, a, &idx[a].runs, fill)?;
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
    let v = node
        .input(0)
        .ok_or_else(|| Error::Internal(format!("node '{}' has no input 0", node.name)))?;
    let x = cx.tensor(v)?;
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

    #[test]
    fn axis_indices_hold_their_positions_as_few_runs() {
        // Any list of positions (and pad values) survives the round trip
        // through runs, built at once or run by run.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..500 {
            let len = next(12) as usize;
            let idx: Vec<Option<usize>> = (0..len)
                .map(|_| match next(5) {
                    0 => None,
                    _ => Some(next(4) as usize),
                })
                .collect();
            let a = AxisIndex::from_positions(&idx);
            assert_eq!(a.len(), idx.len());
            assert_eq!(a.positions().unwrap(), idx, "{a:?}");
            let mut b = AxisIndex::default();
            for r in runs(&idx) {
                match r {
                    Run::Seq { start, step, len } => b.push_seq(start, step, len),
                    Run::Fill(len) => b.push_fill(len),
                }
            }
            assert_eq!(b.positions().unwrap(), idx);
        }
        // Continuing progressions merge: one run for a whole axis.
        let mut a = AxisIndex::default();
        a.push_seq(0, 1, 3);
        a.push_seq(3, 1, 4);
        a.push_seq(7, 5, 1);
        assert_eq!(
            a.runs,
            vec![Run::Seq {
                start: 0,
                step: 1,
                len: 8
            }]
        );
        let mut a = AxisIndex::seq(4, 0, 1);
        a.push_seq(2, -2, 2);
        assert_eq!(
            a.runs,
            vec![Run::Seq {
                start: 4,
                step: -2,
                len: 3
            }]
        );
        assert!(AxisIndex::identity(1 << 40).is_identity(1 << 40));
        assert_eq!(AxisIndex::identity(1 << 40).runs.len(), 1);
    }
}
