//! Slice: every axis one arithmetic run of positions (any step, also
//! backwards), so one strided view on the device.

use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::indexing::{set_take, take_all_host, AxisIndex};
use super::{norm_axis, OpCx, Operator, Registry, TypeShape};

/// One axis of a slice, after ONNX's clamping.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AxisSlice {
    start: usize,
    step: i64,
    len: usize,
}

/// ONNX Slice on one axis of size `d` (opset 10+ semantics, which are
/// opset 1's with a step): negative positions count from the end, then
/// positions are clamped to the axis ([0, d] forwards, [-1, d - 1]
/// backwards, so a backward slice can run to the first element).
///
/// An end of INT_MAX (int32's or int64's) means "to the end in the step's
/// direction", as onnxruntime and exporters read it, also backwards.
fn slice_axis(d: i64, start: i64, end: i64, step: i64) -> AxisSlice {
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
    // Both ends are within [-1, d], so their distance is too; an empty axis
    // has no position to start from, whichever the direction.
    let span = if step > 0 { e - s } else { s - e };
    let len = if d == 0 || span <= 0 {
        0
    } else {
        (span.unsigned_abs() - 1) / step.unsigned_abs() + 1
    };
    AxisSlice {
        start: usize::try_from(s).unwrap_or(0),
        step,
        len: usize::try_from(len).unwrap_or(0),
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
            let starts = cx.const_ints(1, "starts")?;
            let ends = cx.const_ints(2, "ends")?;
            let axes = if cx.has_input(3) {
                Some(cx.const_ints(3, "axes")?)
            } else {
                None
            };
            let steps = if cx.has_input(4) {
                Some(cx.const_ints(4, "steps")?)
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
            let d = cx.to_i64(shape[a], format_args!("dimension {a}"))?;
            out[a] = Some(slice_axis(d, starts[k], ends[k], steps[k]));
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
            .map(|s| AxisIndex::seq(s.start, s.step, s.len))
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
        Some(take_all_host(x, &Slice::indices(&sl), 0.0).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let shape = opcx.in_shape(0)?;
        let sl = Slice::axes(&opcx, &shape)?;
        // Every axis is one arithmetic run, so this is one rearrange.
        set_take(cx, node, 0, &Slice::indices(&sl), 0.0)
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Slice", Box::new(Slice));
}

#[cfg(test)]
mod tests {
    use crate::dtype::ElemType;
    use crate::error::Error;
    use crate::ops::testing::*;

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
}
