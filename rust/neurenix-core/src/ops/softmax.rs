//! Softmax and LogSoftmax, in the numerically stable form: a max reduction,
//! exp(x - max), a sum reduction and a division (or log-difference), as
//! PopLibs' non-linearity does it. Precision-sensitive: float32 in mixed
//! precision.

use crate::backend::{ReduceFinal, ReduceOp};
use crate::error::Result;
use crate::expr::{Expr, ExprOp};
use crate::ir::Node;
use crate::lower::precision::FloatRole;
use crate::lower::LowerCx;

use super::{norm_axis, numel_f64, OpCx, Operator, Registry, TypeShape};

struct Softmax {
    log: bool,
}

impl Softmax {
    /// (shape the softmax runs on, its axis): before opset 13 the input is
    /// coerced to 2-D at `axis`.
    fn layout(cx: &OpCx, shape: &[usize]) -> Result<(Vec<usize>, usize)> {
        if cx.opset < 13 {
            let a = norm_axis(cx.node.attr_i("axis", 1)?, shape.len(), cx)?;
            let outer = cx.numel(&shape[..a], "the dimensions before the axis")?;
            let inner = cx.numel(&shape[a..], "the dimensions from the axis")?;
            Ok((vec![outer, inner], 1))
        } else {
            let a = norm_axis(cx.node.attr_i("axis", -1)?, shape.len(), cx)?;
            Ok((shape.to_vec(), a))
        }
    }
}

impl Operator for Softmax {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = cx.in_dtype(0)?;
        if !t.is_float() {
            return Err(cx.err(format!("needs float input, got {t}")));
        }
        let s = cx.in_shape(0)?;
        if s.is_empty() {
            return Err(cx.err("needs an input of rank 1 or more"));
        }
        Softmax::layout(cx, &s)?;
        Ok(vec![TypeShape::new(t, s)])
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let v = opcx.input(0)?;
        let shape = opcx.in_shape(0)?;
        let (work, axis) = Softmax::layout(&opcx, &shape)?;
        let t = cx.float_type();
        let half = cx.half();
        let x = cx.tensor_as(v, t)?;
        let x = cx.reshape(&x, &work)?;
        let mut keep = work.clone();
        keep[axis] = 1;
        let m = cx.reduce(&x, &[axis], ReduceOp::Max, ReduceFinal::None, 1.0, t)?;
        let m = cx.reshape(&m, &keep)?;
        let shifted = Expr::bin(ExprOp::Sub, Expr::input(0), Expr::input(1), half);
        let e = cx.map_now(
            &Expr::un(ExprOp::Exp, shifted.clone(), half),
            &[x.clone(), m.clone()],
            t,
            &work,
        )?;
        let s = cx.reduce(&e, &[axis], ReduceOp::Sum, ReduceFinal::None, 1.0, t)?;
        let s = cx.reshape(&s, &keep)?;
        let (expr, ins) = if self.log {
            // (x - max) - log(sum)
            let log_s = Expr::un(ExprOp::Log, Expr::input(2), half);
            (Expr::bin(ExprOp::Sub, shifted, log_s, half), vec![x, m, s])
        } else {
            (
                Expr::bin(ExprOp::Div, Expr::input(0), Expr::input(1), half),
                vec![e, s],
            )
        };
        let out = node.outputs[0];
        if work == shape {
            cx.set_lazy(out, expr, ins, shape, t);
        } else {
            let y = cx.map_now(&expr, &ins, t, &work)?;
            let y = cx.reshape(&y, &shape)?;
            cx.set(out, y);
        }
        Ok(())
    }

    fn float_role(&self) -> FloatRole {
        FloatRole::Sensitive
    }

    fn flops(&self, cx: &OpCx) -> f64 {
        cx.in_shape(0).map(|s| 5.0 * numel_f64(&s)).unwrap_or(0.0)
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Softmax", Box::new(Softmax { log: false }));
    r.insert("LogSoftmax", Box::new(Softmax { log: true }));
}
