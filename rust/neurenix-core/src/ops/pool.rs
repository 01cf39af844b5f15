//! Pooling: MaxPool, AveragePool (count_include_pad, ceil_mode, dilations),
//! GlobalAveragePool, GlobalMaxPool, and LRN (a sum over a window of
//! channels, which is an average pool along the channel axis).

use crate::backend::{PoolMode, PoolOptions, ReduceFinal, ReduceOp};
use crate::error::Result;
use crate::expr::{Expr, ExprOp};
use crate::ir::Node;
use crate::lower::precision::FloatRole;
use crate::lower::LowerCx;

use super::conv::{as_2d, Window};
use super::{numel_f64, OpCx, Operator, Registry, TypeShape};

struct Pool {
    max: bool,
}

impl Pool {
    fn window(cx: &OpCx) -> Result<Window> {
        let x = cx.in_shape(0)?;
        if x.len() < 3 {
            return Err(cx.err(format!("input {x:?} must be [N, C, ...spatial]")));
        }
        let ceil = cx.node.attr_i("ceil_mode", 0)? != 0;
        if cx.node.op_type == "AveragePool"
            && cx.opset < 19
            && cx.node.attr_ints("dilations")?.is_some()
        {
            return Err(cx.err("dilations need AveragePool from opset 19"));
        }
        Window::from_node(cx, &x[2..], None, ceil)
    }
}

impl Operator for Pool {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = cx.in_dtype(0)?;
        if !t.is_float() {
            return Err(cx.unsupported_form(&format!("{} on {t}", cx.node.op_type)));
        }
        if cx.node.outputs.len() > 1 {
            return Err(cx.unsupported_form("the Indices output of MaxPool"));
        }
        let w = Pool::window(cx)?;
        let x = cx.in_shape(0)?;
        let mut out = x[..2].to_vec();
        out.extend(&w.out);
        Ok(vec![TypeShape::new(t, out)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let win = Pool::window(&opcx)?;
        let hw = win.hw(&opcx)?;
        let out_shape = cx.shape(node.outputs[0])?;
        let ft = cx.float_type();
        let x = cx.tensor_as(opcx.input(0)?, ft)?;
        let x = cx.reshape(&x, &as_2d(&x.shape))?;
        let mode = if self.max {
            PoolMode::Max
        } else if node.attr_i("count_include_pad", 0)? != 0 {
            PoolMode::AverageIncludePad
        } else {
            PoolMode::Average
        };
        let p = PoolOptions {
            mode,
            kernel: hw.kernel,
            strides: hw.strides,
            dilations: hw.dilations,
            pads: hw.pads,
            out_hw: hw.out,
            ipu: 0,
            name: String::new(),
        };
        let y = cx.pool(&x, p)?;
        let y = cx.reshape(&y, &out_shape)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        match (Pool::window(cx), cx.in_shape(0)) {
            (Ok(w), Ok(x)) => numel_f64(&x[..2]) * numel_f64(&w.out) * numel_f64(&w.kernel),
            _ => 0.0,
        }
    }
}

struct GlobalPool {
    max: bool,
}

impl Operator for GlobalPool {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let x = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        if x.len() < 3 || !t.is_float() {
            return Err(cx.err(format!(
                "needs a float input [N, C, ...spatial], got {t} {x:?}"
            )));
        }
        let mut out = x[..2].to_vec();
        out.extend(std::iter::repeat_n(1, x.len() - 2));
        Ok(vec![TypeShape::new(t, out)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let ft = cx.float_type();
        let x = cx.tensor_as(v, ft)?;
        let axes: Vec<usize> = (2..shape.len()).collect();
        let n = opcx.numel(&shape[2..], "the pooled dimensions")?;
        let y = if self.max {
            cx.reduce(&x, &axes, ReduceOp::Max, ReduceFinal::None, 1.0, ft)?
        } else {
            cx.reduce(
                &x,
                &axes,
                ReduceOp::Sum,
                ReduceFinal::Scale,
                1.0 / n as f64,
                ft,
            )?
        };
        let out = cx.shape(node.outputs[0])?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
}

/// LRN: y = x / (bias + alpha / size * sum of x^2 over `size` neighbouring
/// channels)^beta.
struct Lrn;

impl Operator for Lrn {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let x = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        if x.len() < 3 || !t.is_float() {
            return Err(cx.err(format!("needs a float input [N, C, ...], got {t} {x:?}")));
        }
        let size = cx.node.attr_i("size", 0)?;
        if size < 1 {
            return Err(cx.err("size must be a positive odd integer"));
        }
        Ok(vec![TypeShape::new(t, x)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let size = opcx.to_dim(node.attr_i("size", 1)?, "size")?.max(1);
        let alpha = node.attr_f("alpha", 1e-4)? as f64;
        let beta = node.attr_f("beta", 0.75)? as f64;
        let bias = node.attr_f("bias", 1.0)? as f64;
        let ft = cx.float_type();
        let half = cx.half();
        let x = cx.tensor_as(v, ft)?;
        let sq = cx.map_now(
            &Expr::un(ExprOp::Square, Expr::input(0), half),
            std::slice::from_ref(&x),
            ft,
            &shape,
        )?;
        // [N, C, rest] as planes N of C x rest: pool along C with a size x 1 window.
        let rest = opcx.numel(&shape[2..], "the dimensions after the channels")?;
        let planes = cx.reshape(&sq, &[shape[0], shape[1], rest])?;
        let before = (size - 1) / 2;
        let after = size - 1 - before;
        let u = |x: usize, what: &str| {
            u32::try_from(x).map_err(|_| {
                opcx.err(format!(
                    "{what} {x} is beyond the 32-bit window sizes the IPU's planners take"
                ))
            })
        };
        let p = PoolOptions {
            mode: PoolMode::AverageIncludePad,
            kernel: [u(size, "size")?, 1],
            strides: [1, 1],
            dilations: [1, 1],
            pads: [u(before, "size")?, 0, u(after, "size")?, 0],
            out_hw: [
                u(shape[1], "the channel count")?,
                u(rest, "the plane size")?,
            ],
            ipu: 0,
            name: String::new(),
        };
        let avg = cx.pool(&planes, p)?;
        let avg = cx.reshape(&avg, &shape)?;
        // avg * size = sum of squares: y = x * (bias + alpha * avg)^-beta
        let denom = Expr::bin(
            ExprOp::Add,
            Expr::constf(bias, half),
            Expr::bin(ExprOp::Mul, Expr::constf(alpha, half), Expr::input(1), half),
            half,
        );
        let e = Expr::bin(
            ExprOp::Mul,
            Expr::input(0),
            Expr::bin(ExprOp::Pow, denom, Expr::constf(-beta, half), half),
            half,
        );
        cx.set_lazy(node.outputs[0], e, vec![x, avg], shape, ft);
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }
}

pub fn register(r: &mut Registry) {
    r.insert("MaxPool", Box::new(Pool { max: true }));
    r.insert("AveragePool", Box::new(Pool { max: false }));
    r.insert("GlobalMaxPool", Box::new(GlobalPool { max: true }));
    r.insert("GlobalAveragePool", Box::new(GlobalPool { max: false }));
    r.insert("LRN", Box::new(Lrn));
}
