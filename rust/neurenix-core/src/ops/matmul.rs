//! MatMul (numpy semantics, batched with broadcasting) and Gemm.

use ndarray::IxDyn;

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::ir::Node;
use crate::lower::{DevTensor, LowerCx};
use crate::tensor::{host_array, HostTensor};

use super::{broadcast_shapes, host_fits, numel_f64, OpCx, Operator, Registry, TypeShape};

/// Host products are only folded below this many multiply-adds.
const FOLD_LIMIT: usize = 1 << 22;

/// Shapes of a numpy matmul: promoted operand shapes, batch shape, output.
struct MatMulShapes {
    batch: Vec<usize>,
    /// Elements of the batch, and rows of all its matrices.
    g: usize,
    rows: usize,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
    out: Vec<usize>,
}

fn matmul_shapes(cx: &OpCx, a: &[usize], b: &[usize]) -> Result<MatMulShapes> {
    if a.is_empty() || b.is_empty() {
        return Err(cx.err("operands must have at least one dimension"));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(cx.err(format!("inner dimensions differ: {a:?} x {b:?}")));
    }
    let a_batch = a2[..a2.len() - 2].to_vec();
    let b_batch = b2[..b2.len() - 2].to_vec();
    let batch = broadcast_shapes(&[a_batch.clone(), b_batch.clone()]).ok_or_else(|| {
        cx.err(format!(
            "batch dimensions of {a:?} and {b:?} do not broadcast"
        ))
    })?;
    let g = cx.numel(&batch, "the batch shape")?;
    let rows = cx.dim_mul(g, m, "the rows of the batch")?;
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(MatMulShapes {
        batch,
        g,
        rows,
        a_batch,
        b_batch,
        m,
        k,
        n,
        out,
    })
}

/// Multiply-adds of a product, saturating (for limits and estimates).
fn macs(s: &MatMulShapes) -> usize {
    s.batch
        .iter()
        .chain([&s.m, &s.k, &s.n])
        .fold(1usize, |n, &d| n.saturating_mul(d))
}

/// The host product; the caller bounds its size (see `FOLD_LIMIT`).
fn host_matmul(
    a: &HostTensor,
    b: &HostTensor,
    s: &MatMulShapes,
    dtype: ElemType,
) -> Result<HostTensor> {
    let bad = |e: ndarray::ShapeError| Error::Internal(format!("host matmul: {e}"));
    let g = s.g;
    let mut full_a = s.batch.clone();
    full_a.extend([s.m, s.k]);
    let mut full_b = s.batch.clone();
    full_b.extend([s.k, s.n]);
    let mut a_shape = s.a_batch.clone();
    a_shape.extend([s.m, s.k]);
    let mut b_shape = s.b_batch.clone();
    b_shape.extend([s.k, s.n]);
    let av = a
        .as_float()
        .into_shape_with_order(IxDyn(&a_shape))
        .map_err(bad)?;
    let bv = b
        .as_float()
        .into_shape_with_order(IxDyn(&b_shape))
        .map_err(bad)?;
    let no_broadcast = || Error::Internal("host matmul: operands do not broadcast".into());
    let av: Vec<f64> = av
        .broadcast(IxDyn(&full_a))
        .ok_or_else(no_broadcast)?
        .iter()
        .copied()
        .collect();
    let bv: Vec<f64> = bv
        .broadcast(IxDyn(&full_b))
        .ok_or_else(no_broadcast)?
        .iter()
        .copied()
        .collect();
    let mut out = vec![0.0; g * s.m * s.n];
    for gi in 0..g {
        for i in 0..s.m {
            for kk in 0..s.k {
                let x = av[(gi * s.m + i) * s.k + kk];
                for j in 0..s.n {
                    out[(gi * s.m + i) * s.n + j] += x * bv[(gi * s.k + kk) * s.n + j];
                }
            }
        }
    }
    Ok(HostTensor::float(dtype, host_array(&s.out, out)?))
}

/// [.., M, K] x [.., K, N] on the device, with numpy's promotions.
fn lower_matmul(
    cx: &mut LowerCx,
    a: &DevTensor,
    b: &DevTensor,
    s: &MatMulShapes,
) -> Result<DevTensor> {
    let ft = cx.float_type();
    // Float8 operands (constants under precision float8) stay float8.
    let keep = |t: &DevTensor| t.dtype.float8().is_some();
    let a = if keep(a) {
        a.clone()
    } else {
        cx.cast(a.clone(), ft)?
    };
    let b = if keep(b) {
        b.clone()
    } else {
        cx.cast(b.clone(), ft)?
    };
    let b_shared = s.b_batch.iter().all(|&d| d == 1);
    let a_full = s.a_batch == s.batch;
    let g = s.g;
    let r = if b_shared && a_full {
        // One weight matrix for every batch element: fold the batch into M.
        let a3 = cx.reshape(&a, &[1, s.rows, s.k])?;
        let b3 = cx.reshape(&b, &[1, s.k, s.n])?;
        cx.matmul(&a3, &b3, ft)?
    } else {
        let mut ea = s.batch.clone();
        ea.extend([s.m, s.k]);
        let mut eb = s.batch.clone();
        eb.extend([s.k, s.n]);
        let mut a_sh = s.a_batch.clone();
        a_sh.extend([s.m, s.k]);
        let mut b_sh = s.b_batch.clone();
        b_sh.extend([s.k, s.n]);
        let a = cx.reshape(&a, &a_sh)?;
        let b = cx.reshape(&b, &b_sh)?;
        let a = cx.expand(&a, &ea)?;
        let b = cx.expand(&b, &eb)?;
        let a3 = cx.reshape(&a, &[g, s.m, s.k])?;
        let b3 = cx.reshape(&b, &[g, s.k, s.n])?;
        cx.matmul(&a3, &b3, ft)?
    };
    cx.reshape(&r, &s.out)
}

struct MatMul;

impl Operator for MatMul {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = cx.same_dtype(&[0, 1])?;
        if !t.is_float() {
            return Err(cx.unsupported_form(&format!(
                "MatMul on {t}: only float matrix products run on the IPU"
            )));
        }
        let s = matmul_shapes(cx, &cx.in_shape(0)?, &cx.in_shape(1)?)?;
        Ok(vec![TypeShape::new(t, s.out)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (a, b) = (inputs[0]?, inputs[1]?);
        let s = tryo!(matmul_shapes(cx, a.shape(), b.shape()));
        if macs(&s) > FOLD_LIMIT || !host_fits(&s.out, FOLD_LIMIT) {
            return None;
        }
        Some(host_matmul(a, b, &s, a.dtype).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let (va, vb) = (opcx.input(0)?, opcx.input(1)?);
        let s = matmul_shapes(&opcx, &opcx.in_shape(0)?, &opcx.in_shape(1)?)?;
        let ft = cx.float_type();
        let a = cx.product_operand(va, ft, None)?;
        let b = cx.product_operand(vb, ft, None)?;
        let r = lower_matmul(cx, &a, &b, &s)?;
        cx.set(node.outputs[0], r);
        Ok(())
    }
    fn flops(&self, cx: &OpCx) -> f64 {
        match (cx.in_shape(0), cx.in_shape(1)) {
            (Ok(a), Ok(b)) => match matmul_shapes(cx, &a, &b) {
                Ok(s) => 2.0 * numel_f64(&s.batch) * numel_f64(&[s.m, s.n, s.k]),
                Err(_) => 0.0,
            },
            _ => 0.0,
        }
    }
}

struct Gemm;

impl Gemm {
    fn dims(cx: &OpCx) -> Result<(usize, usize, usize)> {
        let a = cx.in_shape(0)?;
        let b = cx.in_shape(1)?;
        if a.len() != 2 || b.len() != 2 {
            return Err(cx.err(format!("A and B must be matrices, got {a:?} and {b:?}")));
        }
        let ta = cx.node.attr_i("transA", 0)? != 0;
        let tb = cx.node.attr_i("transB", 0)? != 0;
        let (m, k) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
        let (k2, n) = if tb { (b[1], b[0]) } else { (b[0], b[1]) };
        if k != k2 {
            return Err(cx.err(format!(
                "inner dimensions differ: A {a:?} (transA={ta}) and B {b:?} (transB={tb})"
            )));
        }
        Ok((m, k, n))
    }
}

/// The transpose of a 2-D constant, in blocks (a classifier's weights have
/// millions of values; element by element, every read misses the cache).
/// The values are unchanged, so they need no rounding again.
fn transpose2(t: &HostTensor) -> HostTensor {
    const B: usize = 32;
    assert_eq!(t.shape().len(), 2, "transpose2 of a tensor that is not 2-D");
    let (rows, cols) = (t.shape()[0], t.shape()[1]);
    let s = t.float_values(); // borrowed: no copy of the weights
    let mut out = vec![0.0f64; rows * cols];
    for i0 in (0..rows).step_by(B) {
        for j0 in (0..cols).step_by(B) {
            for i in i0..(i0 + B).min(rows) {
                for j in j0..(j0 + B).min(cols) {
                    out[j * rows + i] = s[i * cols + j];
                }
            }
        }
    }
    let tr =
        ndarray::ArrayD::from_shape_vec(IxDyn(&[cols, rows]), out).expect("the transposed shape");
    HostTensor {
        dtype: t.dtype,
        data: crate::tensor::Data::Float(tr),
    }
}

impl Operator for Gemm {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let t = cx.same_dtype(&[0, 1, 2])?;
        if !t.is_float() {
            return Err(cx.unsupported_form(&format!(
                "Gemm on {t}: only float matrix products run on the IPU"
            )));
        }
        let (m, _, n) = Gemm::dims(cx)?;
        if cx.has_input(2) {
            let c = cx.in_shape(2)?;
            if broadcast_shapes(&[c.clone(), vec![m, n]]) != Some(vec![m, n]) {
                return Err(cx.err(format!("C {c:?} does not broadcast to [{m}, {n}]")));
            }
        }
        Ok(vec![TypeShape::new(t, vec![m, n])])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (m, k, n) = Gemm::dims(cx).ok()?;
        if [m, n, k].iter().fold(1usize, |p, &d| p.saturating_mul(d)) > FOLD_LIMIT {
            return None;
        }
        let mut a = inputs[0]?.clone();
        let mut b = inputs[1]?.clone();
        let c = if cx.has_input(2) {
            Some(inputs[2]?)
        } else {
            None
        };
        if cx.node.attr_i("transA", 0).ok()? != 0 {
            a = transpose2(&a);
        }
        if cx.node.attr_i("transB", 0).ok()? != 0 {
            b = transpose2(&b);
        }
        let s = MatMulShapes {
            batch: vec![],
            g: 1,
            rows: m,
            a_batch: vec![],
            b_batch: vec![],
            m,
            k,
            n,
            out: vec![m, n],
        };
        let dt = a.dtype;
        let ab = tryo!(host_matmul(&a, &b, &s, ElemType::F64)).as_float();
        let alpha = cx.node.attr_f("alpha", 1.0).ok()? as f64;
        let beta = cx.node.attr_f("beta", 1.0).ok()? as f64;
        let mut y = ab.mapv(|v| crate::tensor::round_float(dt, v) * alpha);
        if let Some(c) = c {
            let cv = c.as_float();
            let cb = cv.broadcast(IxDyn(&[m, n]))?;
            y = y + cb.mapv(|v| v * beta);
        }
        Some(Ok(vec![HostTensor::float(dt, y)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let (m, k, n) = Gemm::dims(&opcx)?;
        let ta = node.attr_i("transA", 0)? != 0;
        let tb = node.attr_i("transB", 0)? != 0;
        let ft = cx.float_type();
        // Transposed constants are transposed on the host: a weight's layout
        // is free.
        let operand = |cx: &mut LowerCx, v, trans: bool| -> Result<DevTensor> {
            if cx.constant(v).is_some() {
                let derive: Option<(&'static str, &dyn Fn(&HostTensor) -> HostTensor)> = if trans {
                    Some(("^T", &transpose2))
                } else {
                    None
                };
                return cx.product_operand(v, ft, derive);
            }
            let t = cx.tensor_as(v, ft)?;
            if trans {
                cx.transpose(&t, &[1, 0])
            } else {
                Ok(t)
            }
        };
        let a = operand(cx, opcx.input(0)?, ta)?;
        let b = operand(cx, opcx.input(1)?, tb)?;
        let a3 = cx.reshape(&a, &[1, m, k])?;
        let b3 = cx.reshape(&b, &[1, k, n])?;
        let y = cx.matmul(&a3, &b3, ft)?;
        let y = cx.reshape(&y, &[m, n])?;
        let alpha = node.attr_f("alpha", 1.0)? as f64;
        let beta = node.attr_f("beta", 1.0)? as f64;
        let half = cx.half();
        let mut ins = Vec::new();
        let mut e = cx.operand_tensor(y, &mut ins);
        if alpha != 1.0 {
            e = Expr::bin(ExprOp::Mul, e, Expr::constf(alpha, half), half);
        }
        if let Some(c) = node.input(2) {
            let mut ce = cx.operand(c, &mut ins, Some(ft))?;
            if beta != 1.0 {
                ce = Expr::bin(ExprOp::Mul, ce, Expr::constf(beta, half), half);
            }
            e = Expr::bin(ExprOp::Add, e, ce, half);
        }
        if ins.len() == 1 && e == Expr::input(0) {
            cx.set(node.outputs[0], ins.remove(0));
        } else {
            cx.set_lazy(node.outputs[0], e, ins, vec![m, n], ft);
        }
        Ok(())
    }
    fn flops(&self, cx: &OpCx) -> f64 {
        Gemm::dims(cx)
            .map(|(m, k, n)| 2.0 * numel_f64(&[m, k, n]))
            .unwrap_or(0.0)
    }
}

pub fn register(r: &mut Registry) {
    r.insert("MatMul", Box::new(MatMul));
    r.insert("Gemm", Box::new(Gemm));
}
