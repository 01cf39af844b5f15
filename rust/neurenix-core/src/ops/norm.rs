//! Normalisations: BatchNormalization (inference), LayerNormalization,
//! InstanceNormalization. Precision-sensitive: float32 in mixed precision.
//!
//! BatchNormalization with constant statistics becomes one per-channel affine
//! map (and is folded into a preceding Conv by the fusion pass); the others
//! are two reductions (mean, then mean of squared deviations) around maps.

use crate::backend::{ReduceFinal, ReduceOp};
use crate::dtype::ElemType;
use crate::error::Result;
use crate::expr::{Expr, ExprOp};
use crate::ir::Node;
use crate::lower::precision::FloatRole;
use crate::lower::{DevTensor, LowerCx};
use crate::tensor::{host_array, HostTensor};

use super::{norm_axis, OpCx, Operator, Registry, TypeShape};

/// Per-channel (scale, shift) of an inference BatchNormalization whose
/// statistics are constants: y = x * a + b.
pub fn batchnorm_affine(
    scale: &HostTensor,
    bias: &HostTensor,
    mean: &HostTensor,
    var: &HostTensor,
    eps: f64,
) -> (Vec<f64>, Vec<f64>) {
    let (s, b, m, v) = (
        scale.to_f64_vec(),
        bias.to_f64_vec(),
        mean.to_f64_vec(),
        var.to_f64_vec(),
    );
    let a: Vec<f64> = s
        .iter()
        .zip(&v)
        .map(|(s, v)| s / (v + eps).sqrt())
        .collect();
    let sh: Vec<f64> = b
        .iter()
        .zip(&m)
        .zip(&a)
        .map(|((b, m), a)| b - m * a)
        .collect();
    (a, sh)
}

struct BatchNorm;

impl Operator for BatchNorm {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let x = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        if !t.is_float() || x.len() < 2 {
            return Err(cx.err(format!("needs a float input [N, C, ...], got {t} {x:?}")));
        }
        if cx.node.attr_i("training_mode", 0)? != 0 || cx.node.outputs.len() > 1 {
            return Err(cx.unsupported_form("training mode (running statistics outputs)"));
        }
        if cx.opset < 9 && cx.node.attr_i("spatial", 1)? == 0 {
            return Err(cx.unsupported_form("spatial=0"));
        }
        for i in 1..5 {
            let s = cx.in_shape(i)?;
            if s != [x[1]] {
                return Err(cx.err(format!("input {i} has shape {s:?}, expected [{}]", x[1])));
            }
        }
        Ok(vec![TypeShape::new(t, x)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let ft = cx.float_type();
        let half = cx.half();
        let eps = node.attr_f("epsilon", 1e-5)? as f64;
        let mut bshape = vec![1usize; shape.len()];
        bshape[1] = shape[1];
        let stats: Vec<usize> = (1..5).map(|i| opcx.input(i)).collect::<Result<_>>()?;
        let consts: Vec<Option<&HostTensor>> = stats.iter().map(|&s| cx.constant(s)).collect();
        let mut ins = Vec::new();
        let xe = cx.operand(v, &mut ins, Some(ft))?;
        let e = if let [Some(s), Some(b), Some(m), Some(var)] = consts[..] {
            let (a, sh) = batchnorm_affine(s, b, m, var, eps);
            let ah = HostTensor::float(ElemType::F32, host_array(&bshape, a)?);
            let bh = HostTensor::float(ElemType::F32, host_array(&bshape, sh)?);
            let name = node.name.clone();
            let at = cx.host_constant(&ah, ft, &format!("{name}/scale"))?;
            let bt = cx.host_constant(&bh, ft, &format!("{name}/shift"))?;
            let ae = cx.operand_tensor(at, &mut ins);
            let be = cx.operand_tensor(bt, &mut ins);
            Expr::bin(ExprOp::Add, Expr::bin(ExprOp::Mul, xe, ae, half), be, half)
        } else {
            // Statistics computed at run time: (x - mean) / sqrt(var + eps) * scale + bias.
            let mut p = Vec::new();
            for &st in &stats {
                let t = cx.tensor_as(st, ft)?;
                let t = cx.reshape(&t, &bshape)?;
                p.push(cx.operand_tensor(t, &mut ins));
            }
            let (s, b, m, var) = (p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone());
            let inv = Expr::un(
                ExprOp::Rsqrt,
                Expr::bin(ExprOp::Add, var, Expr::constf(eps, half), half),
                half,
            );
            let norm = Expr::bin(ExprOp::Mul, Expr::bin(ExprOp::Sub, xe, m, half), inv, half);
            Expr::bin(ExprOp::Add, Expr::bin(ExprOp::Mul, norm, s, half), b, half)
        };
        cx.set_lazy(node.outputs[0], e, ins, shape, ft);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }
}

/// Statistics for normalising `x` over `axes`: the mean and 1/sqrt(var + eps)
/// (both with the reduced axes kept as 1) and the deviations x - mean.
struct Moments {
    mean: DevTensor,
    dev: DevTensor,
    inv_std: DevTensor,
}

fn normalize(
    cx: &mut LowerCx,
    opcx: &OpCx,
    x: &DevTensor,
    axes: &[usize],
    eps: f64,
) -> Result<Moments> {
    let ft = cx.float_type();
    let half = cx.half();
    let reduced: Vec<usize> = axes.iter().map(|&a| x.shape[a]).collect();
    let n = opcx.numel(&reduced, "the normalised dimensions")?;
    let mut keep = x.shape.clone();
    for &a in axes {
        keep[a] = 1;
    }
    let mean = cx.reduce(
        x,
        axes,
        ReduceOp::Sum,
        ReduceFinal::Scale,
        1.0 / n as f64,
        ft,
    )?;
    let mean = cx.reshape(&mean, &keep)?;
    let d = cx.map_now(
        &Expr::bin(ExprOp::Sub, Expr::input(0), Expr::input(1), half),
        &[x.clone(), mean.clone()],
        ft,
        &x.shape,
    )?;
    let var = cx.reduce(
        &d,
        axes,
        ReduceOp::SumSquare,
        ReduceFinal::Scale,
        1.0 / n as f64,
        ft,
    )?;
    let var = cx.reshape(&var, &keep)?;
    let inv = cx.map_now(
        &Expr::un(
            ExprOp::Rsqrt,
            Expr::bin(ExprOp::Add, Expr::input(0), Expr::constf(eps, half), half),
            half,
        ),
        &[var],
        ft,
        &keep,
    )?;
    Ok(Moments {
        mean,
        dev: d,
        inv_std: inv,
    })
}

struct LayerNorm;

impl LayerNorm {
    fn axis(cx: &OpCx) -> Result<usize> {
        let r = cx.in_shape(0)?.len();
        norm_axis(cx.node.attr_i("axis", -1)?, r, cx)
    }
}

impl Operator for LayerNorm {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let x = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        if !t.is_float() {
            return Err(cx.err(format!("needs a float input, got {t}")));
        }
        let axis = LayerNorm::axis(cx)?;
        let norm_shape = &x[axis..];
        for i in [1, 2] {
            if cx.has_input(i) {
                let s = cx.in_shape(i)?;
                if super::broadcast_shapes(&[s.clone(), norm_shape.to_vec()]).as_deref()
                    != Some(norm_shape)
                {
                    return Err(cx.err(format!(
                        "input {i} of shape {s:?} does not broadcast to {norm_shape:?}"
                    )));
                }
            }
        }
        let mut out = vec![TypeShape::new(t, x.clone())];
        let mut stat = x[..axis].to_vec();
        stat.extend(std::iter::repeat_n(1, x.len() - axis));
        let stash = if cx.node.attr_i("stash_type", 1)? == 1 {
            ElemType::F32
        } else {
            t
        };
        for _ in 1..cx.node.outputs.len() {
            out.push(TypeShape::new(stash, stat.clone()));
        }
        Ok(out)
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let axis = LayerNorm::axis(&opcx)?;
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let ft = cx.float_type();
        let half = cx.half();
        let eps = node.attr_f("epsilon", 1e-5)? as f64;
        let x = cx.tensor_as(v, ft)?;
        let axes: Vec<usize> = (axis..shape.len()).collect();
        let m = normalize(cx, &opcx, &x, &axes, eps)?;
        if node.outputs.len() > 1 {
            cx.set(node.outputs[1], m.mean.clone());
        }
        if node.outputs.len() > 2 {
            cx.set(node.outputs[2], m.inv_std.clone());
        }
        let mut ins = vec![m.dev, m.inv_std];
        let mut e = Expr::bin(ExprOp::Mul, Expr::input(0), Expr::input(1), half);
        if let Some(s) = node.input(1) {
            let se = cx.operand(s, &mut ins, Some(ft))?;
            e = Expr::bin(ExprOp::Mul, e, se, half);
        }
        if let Some(b) = node.input(2) {
            let be = cx.operand(b, &mut ins, Some(ft))?;
            e = Expr::bin(ExprOp::Add, e, be, half);
        }
        cx.set_lazy(node.outputs[0], e, ins, shape, ft);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }
}

struct InstanceNorm;

impl Operator for InstanceNorm {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let x = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        if !t.is_float() || x.len() < 3 {
            return Err(cx.err(format!(
                "needs a float input [N, C, ...spatial], got {t} {x:?}"
            )));
        }
        for i in [1, 2] {
            if cx.in_shape(i)? != [x[1]] {
                return Err(cx.err(format!("input {i} must be [{}]", x[1])));
            }
        }
        Ok(vec![TypeShape::new(t, x)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let ft = cx.float_type();
        let half = cx.half();
        let eps = node.attr_f("epsilon", 1e-5)? as f64;
        let x = cx.tensor_as(v, ft)?;
        let axes: Vec<usize> = (2..shape.len()).collect();
        let m = normalize(cx, &opcx, &x, &axes, eps)?;
        let mut cshape = vec![1usize; shape.len()];
        cshape[1] = shape[1];
        let s = cx.tensor_as(opcx.input(1)?, ft)?;
        let s = cx.reshape(&s, &cshape)?;
        let b = cx.tensor_as(opcx.input(2)?, ft)?;
        let b = cx.reshape(&b, &cshape)?;
        let e = Expr::bin(
            ExprOp::Add,
            Expr::bin(
                ExprOp::Mul,
                Expr::bin(ExprOp::Mul, Expr::input(0), Expr::input(1), half),
                Expr::input(2),
                half,
            ),
            Expr::input(3),
            half,
        );
        cx.set_lazy(node.outputs[0], e, vec![m.dev, m.inv_std, s, b], shape, ft);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }
}

pub fn register(r: &mut Registry) {
    r.insert("BatchNormalization", Box::new(BatchNorm));
    r.insert("LayerNormalization", Box::new(LayerNorm));
    r.insert("InstanceNormalization", Box::new(InstanceNorm));
}
