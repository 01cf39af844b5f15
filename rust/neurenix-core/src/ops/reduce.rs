//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
//! ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, and
//! ArgMax/ArgMin.
//!
//! Each lowers onto the backend's two-stage reduction, whose final step
//! finishes mean (scale by 1/n), L2 (sqrt) and log-sum (log) on the tile
//! that holds the result. LogSumExp is max-shifted so large inputs do not
//! overflow. Precision-sensitive: float32 in mixed precision; integers
//! reduce in int32.
//!
//! A reduction over no axes (an empty `axes` with `noop_with_empty_axes`, or
//! a scalar input) reduces every element on its own, so it is the
//! element-wise part of the op (x², |x|, log x, ...), as onnxruntime and
//! the ONNX reference compute it.

use crate::backend::{ReduceFinal, ReduceOp};
use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::ir::Node;
use crate::lower::precision::FloatRole;
use crate::lower::{DevTensor, LowerCx};
use crate::tensor::{host_array, HostTensor};

use super::indexing::{fill_tensor, FOLD_LIMIT};
use super::layout::host_transpose;
use super::{checked_numel, host_fits, norm_axis, numel_f64, OpCx, Operator, Registry, TypeShape};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSum,
    LogSumExp,
}

impl Kind {
    /// First opset in which `axes` is an input rather than an attribute.
    fn axes_input_since(self) -> i64 {
        if self == Kind::Sum {
            13
        } else {
            18
        }
    }
}

/// What a reduction node reduces.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    /// Sorted, distinct; empty means every element is reduced on its own.
    axes: Vec<usize>,
    out_shape: Vec<usize>,
}

/// Sorted distinct axes, normalised.
fn norm_axes(cx: &OpCx, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut v: Vec<usize> = axes
        .iter()
        .map(|&a| norm_axis(a, rank, cx))
        .collect::<Result<_>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn reduced_shape(shape: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if !axes.contains(&i) {
            out.push(d);
        } else if keep {
            out.push(1);
        }
    }
    out
}

/// Rows of the reduction: the values of `t` with the reduced axes moved
/// innermost, so row r is elements [r * len, (r + 1) * len).
fn rows_of(t: &HostTensor, axes: &[usize]) -> (HostTensor, usize) {
    let rank = t.shape().len();
    let mut perm: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    perm.extend(axes);
    let len: usize = axes.iter().map(|&a| t.shape()[a]).product();
    let moved = if perm.iter().enumerate().all(|(i, &p)| i == p) {
        t.clone()
    } else {
        host_transpose(t, &perm)
    };
    (moved, len)
}

/// Maximum that propagates NaN, as the device's reduction does.
fn fmax(v: &[f64]) -> f64 {
    let mut a = f64::NEG_INFINITY;
    for &x in v {
        if x.is_nan() {
            return x;
        }
        if x > a {
            a = x;
        }
    }
    a
}

struct Reduce {
    kind: Kind,
}

impl Reduce {
    fn plan(&self, cx: &OpCx, shape: &[usize]) -> Result<Plan> {
        let rank = shape.len();
        let keep = cx.node.attr_i("keepdims", 1)? != 0;
        let (axes, noop) = if cx.opset >= self.kind.axes_input_since() {
            let axes = if cx.has_input(1) {
                match cx.const_input(1) {
                    Some(t) => Some(t.to_i64_vec()),
                    None => {
                        return Err(
                            cx.unsupported_form("axes (input 1) must be known at compile time")
                        )
                    }
                }
            } else {
                None
            };
            (axes, cx.node.attr_i("noop_with_empty_axes", 0)? != 0)
        } else {
            (cx.node.attr_ints("axes")?, false)
        };
        let axes = match axes {
            Some(a) if !a.is_empty() => norm_axes(cx, &a, rank)?,
            _ if noop => {
                return Ok(Plan {
                    axes: vec![],
                    out_shape: shape.to_vec(),
                })
            }
            _ => (0..rank).collect(),
        };
        let out_shape = reduced_shape(shape, &axes, keep);
        Ok(Plan { axes, out_shape })
    }

    fn check_type(&self, cx: &OpCx) -> Result<ElemType> {
        let t = cx.in_dtype(0)?;
        let ok = t.is_float()
            || t.is_int()
            || (t == ElemType::Bool && matches!(self.kind, Kind::Max | Kind::Min));
        if !ok {
            return Err(cx.err(format!("does not accept {t} inputs")));
        }
        // Opset 28 drops the integer types from the logarithmic ones.
        if cx.opset >= 28 && t.is_int() && matches!(self.kind, Kind::LogSum | Kind::LogSumExp) {
            return Err(cx.err(format!(
                "does not accept {t} inputs from opset 28 (float types only); cast the input to a float type"
            )));
        }
        Ok(t)
    }

    fn row_float(&self, v: &[f64]) -> f64 {
        let n = v.len() as f64;
        match self.kind {
            Kind::Sum => v.iter().sum(),
            Kind::Mean => v.iter().sum::<f64>() / n,
            Kind::Max => fmax(v),
            Kind::Min => -fmax(&v.iter().map(|x| -x).collect::<Vec<_>>()),
            Kind::Prod => v.iter().product(),
            Kind::SumSquare => v.iter().map(|x| x * x).sum(),
            Kind::L1 => v.iter().map(|x| x.abs()).sum(),
            Kind::L2 => v.iter().map(|x| x * x).sum::<f64>().sqrt(),
            Kind::LogSum => v.iter().sum::<f64>().ln(),
            Kind::LogSumExp => {
                let m = fmax(v);
                let m = if m.is_infinite() { 0.0 } else { m };
                v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m
            }
        }
    }

    /// Integer rows wrap like int32/int64 arithmetic; the ops with a float
    /// final step truncate their result.
    fn row_int(&self, v: &[i64]) -> i64 {
        let f = || v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        match self.kind {
            Kind::Sum => v.iter().fold(0i64, |a, &x| a.wrapping_add(x)),
            Kind::Mean => {
                if v.is_empty() {
                    0
                } else {
                    v.iter().fold(0i64, |a, &x| a.wrapping_add(x)) / v.len() as i64
                }
            }
            Kind::Max => v.iter().copied().fold(i32::MIN as i64, i64::max),
            Kind::Min => v.iter().copied().fold(i32::MAX as i64, i64::min),
            Kind::Prod => v.iter().fold(1i64, |a, &x| a.wrapping_mul(x)),
            Kind::SumSquare => v
                .iter()
                .fold(0i64, |a, &x| a.wrapping_add(x.wrapping_mul(x))),
            Kind::L1 => v
                .iter()
                .fold(0i64, |a, &x| a.wrapping_add(x.wrapping_abs())),
            Kind::L2 | Kind::LogSum | Kind::LogSumExp => {
                crate::tensor::float_to_int(ElemType::I64, self.row_float(&f()))
            }
        }
    }

    fn host(&self, x: &HostTensor, plan: &Plan) -> Result<HostTensor> {
        let (moved, len) = rows_of(x, &plan.axes);
        // Rows of the reduction: an empty set reduces to as many results as
        // the output has (bounded by the caller).
        let rows = match moved.numel().checked_div(len) {
            Some(r) => r,
            None => checked_numel(&plan.out_shape).unwrap_or(0),
        };
        let row = |r: usize| r * len..(r + 1) * len;
        let sh = &plan.out_shape;
        Ok(if x.dtype.is_float() {
            let v = moved.to_f64_vec();
            let out: Vec<f64> = (0..rows).map(|r| self.row_float(&v[row(r)])).collect();
            HostTensor::float(x.dtype, host_array(sh, out)?)
        } else {
            let v = moved.to_i64_vec();
            let out: Vec<i64> = (0..rows).map(|r| self.row_int(&v[row(r)])).collect();
            if x.dtype == ElemType::Bool {
                HostTensor::boolean(host_array(sh, out.into_iter().map(|b| b != 0).collect())?)
            } else {
                HostTensor::int(x.dtype, host_array(sh, out)?)
            }
        })
    }

    /// The reduction of an empty set, as the host computes it.
    fn empty_value(&self, dt: DeviceType) -> f64 {
        let float = dt.is_float();
        match self.kind {
            Kind::Sum | Kind::SumSquare | Kind::L1 | Kind::L2 => 0.0,
            Kind::Mean => {
                if float {
                    f64::NAN
                } else {
                    0.0
                }
            }
            Kind::Prod => 1.0,
            Kind::Max if dt == DeviceType::Bool => 0.0,
            Kind::Min if dt == DeviceType::Bool => 1.0,
            Kind::Max => {
                if float {
                    f64::NEG_INFINITY
                } else {
                    i32::MIN as f64
                }
            }
            Kind::Min => {
                if float {
                    f64::INFINITY
                } else {
                    i32::MAX as f64
                }
            }
            Kind::LogSum | Kind::LogSumExp => {
                if float {
                    f64::NEG_INFINITY
                } else {
                    i32::MIN as f64
                }
            }
        }
    }

    /// Reduction over no axes: the element-wise part of the op.
    fn lower_elementwise(
        &self,
        cx: &mut LowerCx,
        node: &Node,
        t: DeviceType,
        shape: Vec<usize>,
    ) -> Result<()> {
        let half = t == DeviceType::F16;
        let mut ins = Vec::new();
        let v = OpCx::of(cx, node).input(0)?;
        let x = cx.operand(v, &mut ins, Some(t))?;
        let e = match (self.kind, t) {
            (Kind::SumSquare, _) => Expr::bin(ExprOp::Mul, x.clone(), x, half),
            (Kind::L1 | Kind::L2, _) => Expr::un(ExprOp::Abs, x, half),
            (Kind::LogSum, DeviceType::I32) => Expr::cast(
                Expr::un(ExprOp::Log, Expr::cast(x, DeviceType::F32), false),
                DeviceType::I32,
            ),
            (Kind::LogSum, _) => Expr::un(ExprOp::Log, x, half),
            _ => x,
        };
        cx.set_lazy(node.outputs[0], e, ins, shape, t);
        Ok(())
    }

    /// The reduction in device type `t` (float or int32), with the reduced
    /// axes dropped.
    fn lower_reduce(
        &self,
        cx: &mut LowerCx,
        x: &DevTensor,
        axes: &[usize],
        t: DeviceType,
        n: usize,
    ) -> Result<DevTensor> {
        let half = t == DeviceType::F16;
        Ok(match self.kind {
            Kind::Sum => cx.reduce(x, axes, ReduceOp::Sum, ReduceFinal::None, 1.0, t)?,
            Kind::Mean if t == DeviceType::I32 => {
                // Scaling by 1/n would not truncate like integer division.
                let s = cx.reduce(x, axes, ReduceOp::Sum, ReduceFinal::None, 1.0, t)?;
                let shape = s.shape.clone();
                let n = i32::try_from(n).map_err(|_| {
                    Error::model(format!(
                        "an integer mean over {n} elements is beyond the int32 range the IPU counts in"
                    ))
                })?;
                let e = Expr::bin(
                    ExprOp::Div,
                    Expr::input(0),
                    Expr::consti(i64::from(n)),
                    false,
                );
                cx.map_now(&e, &[s], t, &shape)?
            }
            Kind::Mean => cx.reduce(
                x,
                axes,
                ReduceOp::Sum,
                ReduceFinal::Scale,
                1.0 / n as f64,
                t,
            )?,
            Kind::Max => cx.reduce(x, axes, ReduceOp::Max, ReduceFinal::None, 1.0, t)?,
            Kind::Min => cx.reduce(x, axes, ReduceOp::Min, ReduceFinal::None, 1.0, t)?,
            Kind::Prod => cx.reduce(x, axes, ReduceOp::Prod, ReduceFinal::None, 1.0, t)?,
            Kind::SumSquare => {
                cx.reduce(x, axes, ReduceOp::SumSquare, ReduceFinal::None, 1.0, t)?
            }
            Kind::L1 => cx.reduce(x, axes, ReduceOp::SumAbs, ReduceFinal::None, 1.0, t)?,
            Kind::L2 => cx.reduce(x, axes, ReduceOp::SumSquare, ReduceFinal::Sqrt, 1.0, t)?,
            Kind::LogSum => cx.reduce(x, axes, ReduceOp::Sum, ReduceFinal::Log, 1.0, t)?,
            Kind::LogSumExp => {
                // log(sum(exp(x - m))) + m with m the row maximum, taken as 0
                // when infinite so all -inf rows give -inf, not NaN.
                let m = cx.reduce(x, axes, ReduceOp::Max, ReduceFinal::None, 1.0, t)?;
                let mut keep = x.shape.clone();
                for &a in axes {
                    keep[a] = 1;
                }
                let mk = cx.reshape(&m, &keep)?;
                let safe = |e: Expr| {
                    Expr::select(
                        Expr::un(ExprOp::IsInf, e.clone(), false),
                        Expr::constf(0.0, half),
                        e,
                        half,
                    )
                };
                let shifted = Expr::bin(ExprOp::Sub, Expr::input(0), safe(Expr::input(1)), half);
                let ex = cx.map_now(
                    &Expr::un(ExprOp::Exp, shifted, half),
                    &[x.clone(), mk],
                    t,
                    &x.shape,
                )?;
                let s = cx.reduce(&ex, axes, ReduceOp::Sum, ReduceFinal::Log, 1.0, t)?;
                let shape = s.shape.clone();
                let e = Expr::bin(ExprOp::Add, Expr::input(0), safe(Expr::input(1)), half);
                cx.map_now(&e, &[s, m], t, &shape)?
            }
        })
    }
}

impl Operator for Reduce {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = self.check_type(cx)?;
        let plan = self.plan(cx, &cx.in_shape(0)?)?;
        Ok(vec![TypeShape::new(t, plan.out_shape)])
    }

    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        if let Err(e) = self.check_type(cx) {
            return Some(Err(e));
        }
        let plan = tryo!(self.plan(cx, x.shape()));
        // Reducing nothing makes as many results as the output holds.
        if x.numel() == 0 && !host_fits(&plan.out_shape, FOLD_LIMIT) {
            return None;
        }
        Some(self.host(x, &plan).map(|y| vec![y]))
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let plan = self.plan(&opcx, &shape)?;
        let dtype = opcx.in_dtype(0)?;
        let t = cx.device_type(dtype);
        if plan.axes.is_empty() {
            return self.lower_elementwise(cx, node, t, shape);
        }
        let out = node.outputs[0];
        let reduced: Vec<usize> = plan.axes.iter().map(|&a| shape[a]).collect();
        let n = opcx.numel(&reduced, "the reduced dimensions")?;
        if opcx.numel(&shape, "the input shape")? == 0 {
            let y = fill_tensor(cx, t, &plan.out_shape, self.empty_value(t))?;
            cx.set(out, y);
            return Ok(());
        }
        // Integer L2 and log-sums take their float result, truncated.
        let float_detour =
            t == DeviceType::I32 && matches!(self.kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp);
        let work = if float_detour { DeviceType::F32 } else { t };
        let x = cx.tensor_as(v, work)?;
        let r = self.lower_reduce(cx, &x, &plan.axes, work, n)?;
        let r = cx.cast(r, t)?;
        let y = cx.reshape(&r, &plan.out_shape)?;
        cx.set(out, y);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        let per = if self.kind == Kind::LogSumExp {
            4.0
        } else {
            1.0
        };
        cx.in_shape(0).map(|s| per * numel_f64(&s)).unwrap_or(0.0)
    }
}

// ---------------------------------------------------------------------------
// ArgMax / ArgMin.

struct ArgReduce {
    max: bool,
}

impl ArgReduce {
    /// (axis, keepdims, select_last_index).
    fn params(cx: &OpCx, shape: &[usize]) -> Result<(usize, bool, bool)> {
        if shape.is_empty() {
            return Err(cx.err("needs an input of rank 1 or more"));
        }
        let axis = norm_axis(cx.node.attr_i("axis", 0)?, shape.len(), cx)?;
        if shape[axis] == 0 {
            return Err(cx.err(format!(
                "axis {axis} of {shape:?} is empty: there is no extremum"
            )));
        }
        let keep = cx.node.attr_i("keepdims", 1)? != 0;
        let last = cx.opset >= 12 && cx.node.attr_i("select_last_index", 0)? != 0;
        Ok((axis, keep, last))
    }

    /// numpy's choice: the first NaN if there is one, else the first (or
    /// last) extremum.
    fn row(&self, v: &[f64], last: bool) -> i64 {
        let order: Vec<usize> = if last {
            (0..v.len()).rev().collect()
        } else {
            (0..v.len()).collect()
        };
        if let Some(&i) = order.iter().find(|&&i| v[i].is_nan()) {
            return i as i64;
        }
        let mut best = order[0];
        for &i in &order[1..] {
            let better = if self.max {
                v[i] > v[best]
            } else {
                v[i] < v[best]
            };
            if better {
                best = i;
            }
        }
        best as i64
    }
}

impl Operator for ArgReduce {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = cx.in_dtype(0)?;
        if !(t.is_float() || t.is_int()) {
            return Err(cx.err(format!("does not accept {t} inputs")));
        }
        let s = cx.in_shape(0)?;
        let (axis, keep, _) = ArgReduce::params(cx, &s)?;
        Ok(vec![TypeShape::new(
            ElemType::I64,
            reduced_shape(&s, &[axis], keep),
        )])
    }

    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let (axis, keep, last) = tryo!(ArgReduce::params(cx, x.shape()));
        let (moved, len) = rows_of(x, &[axis]);
        // int64 values beyond 2^53 compare approximately; fine for an index.
        let v = moved.to_f64_vec();
        let out: Vec<i64> = v.chunks(len).map(|r| self.row(r, last)).collect();
        Some(Ok(vec![HostTensor::from_i64s(
            &reduced_shape(x.shape(), &[axis], keep),
            out,
        )]))
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let (axis, keep, last) = ArgReduce::params(&opcx, &shape)?;
        // Positions are int32 on the device (and a constant on the host
        // first): refused before anything that large is built.
        let n = shape[axis];
        let n32 = i32::try_from(n).map_err(|_| {
            opcx.err(format!(
                "axis {axis} has {n} positions, beyond the int32 range the IPU computes indices in"
            ))
        })?;
        let t = cx.device_type(opcx.in_dtype(0)?);
        let x = cx.tensor_as(v, t)?;
        // The extremum, broadcast back; the positions that hold it (or a
        // NaN, which wins as in numpy); the smallest (largest) of those
        // positions, with n (-1) standing for the others.
        let op = if self.max {
            ReduceOp::Max
        } else {
            ReduceOp::Min
        };
        let m = cx.reduce(&x, &[axis], op, ReduceFinal::None, 1.0, t)?;
        let mut keep_shape = shape.clone();
        keep_shape[axis] = 1;
        let m = cx.reshape(&m, &keep_shape)?;
        let mut iota_shape = vec![n];
        iota_shape.extend(vec![1; shape.len() - axis - 1]);
        let iota = HostTensor::from_i64s(&iota_shape, (0..i64::from(n32)).collect());
        let name = format!("{}/positions", node.name);
        let iota = cx.host_constant(&iota, DeviceType::I32, &name)?;
        let mut hit = Expr::bin(ExprOp::Eq, Expr::input(0), Expr::input(1), false);
        if t.is_float() {
            hit = Expr::bin(
                ExprOp::Or,
                hit,
                Expr::un(ExprOp::IsNan, Expr::input(0), false),
                false,
            );
        }
        let other = if last { -1 } else { i64::from(n32) };
        let pos = Expr::select(hit, Expr::input(2), Expr::consti(other), false);
        let p = cx.map_now(&pos, &[x, m, iota], DeviceType::I32, &shape)?;
        let pick = if last { ReduceOp::Max } else { ReduceOp::Min };
        let r = cx.reduce(&p, &[axis], pick, ReduceFinal::None, 1.0, DeviceType::I32)?;
        let y = cx.reshape(&r, &reduced_shape(&shape, &[axis], keep))?;
        cx.set(node.outputs[0], y);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        cx.in_shape(0).map(|s| 3.0 * numel_f64(&s)).unwrap_or(0.0)
    }
}

pub fn register(r: &mut Registry) {
    for (name, kind) in [
        ("ReduceSum", Kind::Sum),
        ("ReduceMean", Kind::Mean),
        ("ReduceMax", Kind::Max),
        ("ReduceMin", Kind::Min),
        ("ReduceProd", Kind::Prod),
        ("ReduceSumSquare", Kind::SumSquare),
        ("ReduceL1", Kind::L1),
        ("ReduceL2", Kind::L2),
        ("ReduceLogSum", Kind::LogSum),
        ("ReduceLogSumExp", Kind::LogSumExp),
    ] {
        r.insert(name, Box::new(Reduce { kind }));
    }
    r.insert("ArgMax", Box::new(ArgReduce { max: true }));
    r.insert("ArgMin", Box::new(ArgReduce { max: false }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attr;
    use crate::ops::testing::{f32s, fold, i64s, ints, one, In};

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0) || (g.is_nan() && w.is_nan()),
                "{got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn every_kind_over_the_last_axis() {
        let x = || In::C(f32s(&[2, 3], &[1.0, -2.0, 3.0, 0.5, 4.0, 2.0]));
        let keep0 = [("axes", ints(&[-1])), ("keepdims", Attr::Int(0))];
        let cases: [(&str, [f64; 2]); 10] = [
            ("ReduceSum", [2.0, 6.5]),
            ("ReduceMean", [2.0 / 3.0, 6.5 / 3.0]),
            ("ReduceMax", [3.0, 4.0]),
            ("ReduceMin", [-2.0, 0.5]),
            ("ReduceProd", [-6.0, 4.0]),
            ("ReduceSumSquare", [14.0, 20.25]),
            ("ReduceL1", [6.0, 6.5]),
            ("ReduceL2", [14f64.sqrt(), 4.5]),
            ("ReduceLogSum", [2f64.ln(), 6.5f64.ln()]),
            (
                "ReduceLogSumExp",
                [
                    (1f64.exp() + (-2f64).exp() + 3f64.exp()).ln(),
                    (0.5f64.exp() + 4f64.exp() + 2f64.exp()).ln(),
                ],
            ),
        ];
        for (op, want) in cases {
            let y = one(op, 12, vec![x()], &keep0);
            assert_eq!(y.shape(), &[2], "{op}");
            let want: Vec<f64> = want.iter().map(|&v| v as f32 as f64).collect();
            close(&y.to_f64_vec(), &want);
        }
    }

    #[test]
    fn axes_forms_by_opset() {
        let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        // ReduceSum: attribute before 13, input from 13; others until 18.
        let a = one(
            "ReduceSum",
            11,
            vec![In::C(x.clone())],
            &[("axes", ints(&[0]))],
        );
        assert_eq!(
            (a.shape(), a.to_f64_vec()),
            (&[1usize, 2][..], vec![4.0, 6.0])
        );
        let b = one(
            "ReduceSum",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[0]))],
            &[("keepdims", Attr::Int(0))],
        );
        assert_eq!(b.to_f64_vec(), vec![4.0, 6.0]);
        let c = one(
            "ReduceMean",
            17,
            vec![In::C(x.clone())],
            &[("axes", ints(&[1]))],
        );
        assert_eq!(
            (c.shape(), c.to_f64_vec()),
            (&[2usize, 1][..], vec![1.5, 3.5])
        );
        let d = one(
            "ReduceMean",
            18,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[1]))],
            &[],
        );
        assert_eq!(d.to_f64_vec(), vec![1.5, 3.5]);
        // No axes: everything, to a [1, 1] or a scalar.
        let e = one("ReduceMax", 18, vec![In::C(x.clone())], &[]);
        assert_eq!((e.shape(), e.to_f64_vec()), (&[1usize, 1][..], vec![4.0]));
        let f = one(
            "ReduceProd",
            13,
            vec![In::C(x.clone())],
            &[("keepdims", Attr::Int(0))],
        );
        assert_eq!((f.shape(), f.to_f64_vec()), (&[][..], vec![24.0]));
        // Computed axes are not supported.
        let g = fold(
            "ReduceSum",
            13,
            vec![In::C(x.clone()), In::Var(ElemType::I64, vec![1])],
            1,
            &[],
        )
        .unwrap_err();
        assert!(matches!(g, crate::error::Error::Unsupported { .. }));
    }

    #[test]
    fn empty_axes_with_noop_is_elementwise() {
        let x = || In::C(f32s(&[3], &[-2.0, 1.0, 4.0]));
        let empty = || In::C(i64s(&[0], &[]));
        let noop = [("noop_with_empty_axes", Attr::Int(1))];
        assert_eq!(
            one("ReduceSum", 13, vec![x(), empty()], &noop).to_f64_vec(),
            vec![-2.0, 1.0, 4.0]
        );
        assert_eq!(
            one("ReduceSumSquare", 18, vec![x(), empty()], &noop).to_f64_vec(),
            vec![4.0, 1.0, 16.0]
        );
        assert_eq!(
            one("ReduceL2", 18, vec![x()], &noop).to_f64_vec(),
            vec![2.0, 1.0, 4.0]
        );
        assert_eq!(
            one("ReduceLogSumExp", 18, vec![x()], &noop).to_f64_vec(),
            vec![-2.0, 1.0, 4.0]
        );
        let l = one("ReduceLogSum", 18, vec![x()], &noop).to_f64_vec();
        assert!(l[0].is_nan() && l[1] == 0.0);
        // Without noop, empty axes reduce everything.
        assert_eq!(
            one("ReduceSum", 13, vec![x(), empty()], &[]).to_f64_vec(),
            vec![3.0]
        );
    }

    #[test]
    fn log_sum_exp_is_stable() {
        let y = one(
            "ReduceLogSumExp",
            18,
            vec![In::C(f32s(
                &[2, 2],
                &[1000.0, 1000.0, -1e30, f64::NEG_INFINITY],
            ))],
            &[("keepdims", Attr::Int(0))],
        );
        let v = y.to_f64_vec();
        assert!(v[0].is_finite());
        close(&v, &[(1000.0 + 2.0f64.ln()) as f32 as f64]);
        let z = one(
            "ReduceLogSumExp",
            13,
            vec![In::C(f32s(
                &[1, 2],
                &[f64::NEG_INFINITY, f64::NEG_INFINITY],
            ))],
            &[("axes", ints(&[1]))],
        );
        assert_eq!(z.to_f64_vec(), vec![f64::NEG_INFINITY]);
    }

    #[test]
    fn integers_and_empty_sets() {
        let x = In::C(i64s(&[2, 2], &[1, 2, -3, 4]));
        let m = one("ReduceMean", 13, vec![x], &[("axes", ints(&[1]))]);
        assert_eq!((m.dtype, m.to_i64_vec()), (ElemType::I64, vec![1, 0]));
        let s = one(
            "ReduceSumSquare",
            13,
            vec![In::C(i64s(&[3], &[1, -2, 3]))],
            &[],
        );
        assert_eq!(s.to_i64_vec(), vec![14]);
        let e = || In::C(f32s(&[2, 0], &[]));
        assert_eq!(
            one("ReduceSum", 11, vec![e()], &[("axes", ints(&[1]))]).to_f64_vec(),
            vec![0.0, 0.0]
        );
        assert_eq!(
            one("ReduceMax", 13, vec![e()], &[("axes", ints(&[1]))]).to_f64_vec(),
            vec![f64::NEG_INFINITY; 2]
        );
        assert_eq!(
            one("ReduceProd", 13, vec![e()], &[("axes", ints(&[1]))]).to_f64_vec(),
            vec![1.0; 2]
        );
        assert!(one("ReduceMean", 13, vec![e()], &[("axes", ints(&[1]))]).to_f64_vec()[0].is_nan());
    }

    #[test]
    fn arg_max_and_min() {
        let x = || In::C(f32s(&[2, 3], &[1.0, 5.0, 5.0, 2.0, -1.0, -1.0]));
        let a = one("ArgMax", 13, vec![x()], &[("axis", Attr::Int(1))]);
        assert_eq!(
            (a.dtype, a.shape(), a.to_i64_vec()),
            (ElemType::I64, &[2usize, 1][..], vec![1, 0])
        );
        let a = one(
            "ArgMax",
            13,
            vec![x()],
            &[("axis", Attr::Int(-1)), ("select_last_index", Attr::Int(1))],
        );
        assert_eq!(a.to_i64_vec(), vec![2, 0]);
        let a = one(
            "ArgMin",
            13,
            vec![x()],
            &[
                ("axis", Attr::Int(1)),
                ("keepdims", Attr::Int(0)),
                ("select_last_index", Attr::Int(1)),
            ],
        );
        assert_eq!((a.shape(), a.to_i64_vec()), (&[2usize][..], vec![0, 2]));
        let a = one("ArgMin", 13, vec![x()], &[("keepdims", Attr::Int(0))]);
        assert_eq!(a.to_i64_vec(), vec![0, 1, 1]);
        let n = one(
            "ArgMax",
            13,
            vec![In::C(f32s(&[3], &[1.0, f64::NAN, 9.0]))],
            &[],
        );
        assert_eq!(n.to_i64_vec(), vec![1]);
    }
}
