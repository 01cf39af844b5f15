//! Operators that make values rather than transform them: Constant,
//! ConstantOfShape and Range, and the shape queries Shape and Size. All but
//! large ConstantOfShape results (a fill on the device) are folded at
//! compile time.

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Attr, Node};
use crate::lower::LowerCx;
use crate::tensor::{host_array, round_float, HostTensor};

use super::indexing::{broadcast_host, fill_tensor};
use super::{host_fits, OpCx, Operator, Registry, TypeShape};

/// ConstantOfShape folds only small results (the shape arithmetic it is used
/// for); a large one is a fill on the device rather than a stored constant.
const FILL_FOLD_LIMIT: usize = 1 << 12;

/// Constant: always folded.
struct Constant;

impl Constant {
    fn value(cx: &OpCx) -> Result<HostTensor> {
        let n = cx.node;
        if let Some(Attr::Tensor(t)) = n.attr("value") {
            return Ok(t.clone());
        }
        if let Some(Attr::Float(f)) = n.attr("value_float") {
            return HostTensor::full(ElemType::F32, &[], *f as f64);
        }
        if let Some(Attr::Int(i)) = n.attr("value_int") {
            return Ok(HostTensor::from_i64s(&[], vec![*i]));
        }
        if let Some(Attr::Floats(f)) = n.attr("value_floats") {
            return Ok(HostTensor::from_f32s(&[f.len()], f.clone()));
        }
        if let Some(Attr::Ints(i)) = n.attr("value_ints") {
            return Ok(HostTensor::from_i64s(&[i.len()], i.clone()));
        }
        if n.attr("sparse_value").is_some()
            || n.attr("value_string").is_some()
            || n.attr("value_strings").is_some()
        {
            return Err(cx.unsupported_form("sparse and string constants"));
        }
        Err(cx.err("has no value attribute"))
    }
}

impl Operator for Constant {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let v = Constant::value(cx)?;
        Ok(vec![TypeShape::new(v.dtype, v.shape().to_vec())])
    }
    fn eval(&self, cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        Some(Constant::value(cx).map(|v| vec![v]))
    }
    fn lower(&self, _cx: &mut LowerCx, node: &Node) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "Constant node '{}' survived folding",
            node.name
        )))
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

/// Shape and Size: known at compile time, so always folded.
struct ShapeOf {
    size: bool,
}

impl ShapeOf {
    fn value(&self, cx: &OpCx) -> Result<HostTensor> {
        let s = cx.in_shape(0)?;
        if self.size {
            let n = cx.numel(&s, "the input shape")?;
            return Ok(HostTensor::from_i64s(
                &[],
                vec![cx.to_i64(n, "the element count")?],
            ));
        }
        let rank = s.len();
        // Negative positions count from the end; both clamp to [0, rank].
        let clampi = |v: i64| -> usize {
            if v < 0 {
                rank.saturating_sub(usize::try_from(v.unsigned_abs()).unwrap_or(usize::MAX))
            } else {
                usize::try_from(v).map_or(rank, |v| v.min(rank))
            }
        };
        let start = clampi(cx.node.attr_i("start", 0)?);
        let end = match cx.node.attr("end") {
            Some(_) => clampi(cx.node.attr_i("end", 0)?),
            None => rank,
        };
        let dims: Vec<i64> = if start < end {
            s[start..end]
                .iter()
                .enumerate()
                .map(|(i, &d)| cx.to_i64(d, format_args!("dimension {}", start + i)))
                .collect::<Result<_>>()?
        } else {
            vec![]
        };
        Ok(HostTensor::from_i64s(&[dims.len()], dims))
    }
}

impl Operator for ShapeOf {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let v = self.value(cx)?;
        Ok(vec![TypeShape::new(ElemType::I64, v.shape().to_vec())])
    }
    fn eval(&self, cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        Some(self.value(cx).map(|v| vec![v]))
    }
    fn folds_without_values(&self) -> bool {
        true
    }
    fn lower(&self, _cx: &mut LowerCx, node: &Node) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "{} node '{}' survived folding",
            node.op_type, node.name
        )))
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

struct ConstantOfShape;

impl ConstantOfShape {
    /// The one-element fill value (float32 0 by default) and the shape.
    fn parts(cx: &OpCx) -> Result<(HostTensor, Vec<usize>)> {
        let value = match cx.node.attr("value") {
            None => HostTensor::full(ElemType::F32, &[], 0.0)?,
            Some(Attr::Tensor(t)) if t.numel() == 1 => t.reshape(&[])?,
            Some(other) => {
                return Err(cx.err(format!(
                    "'value' must be a one-element tensor, got {other:?}"
                )))
            }
        };
        let shape = cx.dims(&cx.const_ints(0, "shape")?, "shape")?;
        cx.numel(&shape, "shape")?;
        Ok((value, shape))
    }
}

impl Operator for ConstantOfShape {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let (v, shape) = ConstantOfShape::parts(cx)?;
        Ok(vec![TypeShape::new(v.dtype, shape)])
    }
    fn eval(&self, cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (v, shape) = tryo!(ConstantOfShape::parts(cx));
        if !host_fits(&shape, FILL_FOLD_LIMIT) {
            return None;
        }
        Some(
            broadcast_host(&v, &shape)
                .map(|t| vec![t])
                .ok_or_else(|| cx.err("broadcast failed")),
        )
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let (v, shape) = ConstantOfShape::parts(&opcx)?;
        let dt = cx.device_type(v.dtype);
        let value = v.to_f64_vec().first().copied().unwrap_or(0.0);
        let y = fill_tensor(cx, dt, &shape, value)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
}

struct Range;

/// Range is always folded: its result is a constant, and one longer than
/// this is refused rather than built on the host.
const RANGE_LIMIT: usize = 1 << 24;

impl Range {
    /// The element count, checked against [`RANGE_LIMIT`].
    fn count(cx: &OpCx, n: f64, what: std::fmt::Arguments) -> Result<usize> {
        if !n.is_finite() || n > RANGE_LIMIT as f64 {
            return Err(cx.err(format!(
                "{what} makes {n:e} elements; Range is computed at compile time and may make at most {RANGE_LIMIT}"
            )));
        }
        // Finite, in [0, RANGE_LIMIT], integral: exact as an integer.
        Ok(n.max(0.0) as usize)
    }

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
            sc[i] = c.to_f64_vec().first().copied().unwrap_or(0.0);
            si[i] = c.to_i64_vec().first().copied().unwrap_or(0);
        }
        if t.is_float() {
            let (start, limit, delta) = (sc[0], sc[1], sc[2]);
            if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
                return Err(cx.err(format!("cannot count from {start} to {limit} by {delta}")));
            }
            // Range 27: float16 and bfloat16 count in `stash_type` (float32
            // by default) and round the result; earlier versions (which
            // define Range for neither) count in the type itself.
            let t_out = t;
            let t = if cx.opset >= 27 && matches!(t, ElemType::F16 | ElemType::BF16) {
                match cx.node.attr_i("stash_type", 1)? {
                    1 => ElemType::F32,
                    11 => ElemType::F64,
                    other => {
                        return Err(cx.err(format!(
                            "stash_type {other} is not one ONNX allows (1: float, 11: double)"
                        )))
                    }
                }
            } else {
                t
            };
            let n = (round_float(t, limit - start) / delta).ceil();
            let n = Range::count(
                cx,
                n,
                format_args!("counting from {start} to {limit} by {delta}"),
            )?;
            // Accumulated in the element type, as the reference loop does.
            let mut v = Vec::with_capacity(n);
            let mut x = start;
            for _ in 0..n {
                v.push(x);
                x = round_float(t, x + delta);
            }
            Ok(HostTensor::float(t_out, host_array(&[n], v)?))
        } else if t.is_int() {
            let (start, limit, delta) = (si[0], si[1], si[2]);
            if delta == 0 {
                return Err(cx.err("delta cannot be 0"));
            }
            // ceil((limit - start) / delta), exactly: in i128 nothing
            // overflows, whatever the int64 values.
            let (span, d) = (i128::from(limit) - i128::from(start), i128::from(delta));
            let n = if span == 0 || (span > 0) != (d > 0) {
                0
            } else {
                (span.abs() + d.abs() - 1) / d.abs()
            };
            let n = Range::count(
                cx,
                n as f64,
                format_args!("counting from {start} to {limit} by {delta}"),
            )?;
            // Every element lies between start and limit, so fits int64.
            let v: Vec<i64> = (0..n)
                .map(|i| {
                    i64::try_from(i128::from(start) + i as i128 * d)
                        .map_err(|_| cx.err(format!("element {i} overflows int64")))
                })
                .collect::<Result<_>>()?;
            Ok(HostTensor::int(t, host_array(&[n], v)?))
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

/// RandomUniformLike: uniform draws in [low, high) shaped like its input,
/// from the tiles' random generators (seeded from the manager's seed, the
/// IPU and the tile; the node's `seed` attribute is not used). Never folded.
struct RandomUniformLike;

impl Operator for RandomUniformLike {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let shape = cx.in_shape(0)?;
        let t = match cx.node.attr("dtype") {
            Some(Attr::Int(code)) => ElemType::from_onnx(*code as i32)
                .ok_or_else(|| cx.err(format!("unknown dtype {code}")))?,
            _ => cx.in_dtype(0)?,
        };
        if !t.is_float() {
            return Err(cx.unsupported_form(&format!("random {t} values")));
        }
        Ok(vec![TypeShape::new(t, shape)])
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let shape = opcx.in_shape(0)?;
        let t = self.infer(&opcx)?[0].dtype;
        let low = node.attr_f("low", 0.0)? as f64;
        let high = node.attr_f("high", 1.0)? as f64;
        if !(low <= high) {
            return Err(opcx.err(format!("low ({low}) must not exceed high ({high})")));
        }
        let dt = cx.device_type(t);
        let e = crate::expr::Expr::random_uniform(low, high);
        let y = cx.map_now(&e, &[], dt, &shape)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
}

pub fn register(r: &mut Registry) {
    r.insert("RandomUniformLike", Box::new(RandomUniformLike));
    r.insert("Constant", Box::new(Constant));
    r.insert("ConstantOfShape", Box::new(ConstantOfShape));
    r.insert("Range", Box::new(Range));
    r.insert("Shape", Box::new(ShapeOf { size: false }));
    r.insert("Size", Box::new(ShapeOf { size: true }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;

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
}
