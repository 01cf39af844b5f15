//! Gradient rules of the operators a transformer encoder adds: Gather
//! (embedding lookups as a product with the one-hot of the indices, constant
//! positions as padding), LayerNormalization, Erf, Gelu, Pow by a constant
//! and Where.

use crate::dtype::ElemType;
use crate::error::Result;
use crate::ir::{Node, ValueId};

use super::autodiff::no_gradient;
use super::build::Builder;

fn norm_axis(axis: i64, rank: usize) -> usize {
    (if axis < 0 { axis + rank as i64 } else { axis }) as usize
}

/// Gather: the data's gradient. Indices known at compile time and a scalar:
/// dY padded back into place; otherwise (axis 0 of a 2-D table, the
/// embedding case) the product of the indices' one-hot (transposed) with
/// dY: every row gets the sum of the rows that read it.
pub fn gather(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    let mut out = vec![None; node.inputs.len()];
    if !want(0) {
        return Ok(out);
    }
    let data = node.input(0).expect("Gather has data");
    let idx = node.input(1).expect("Gather has indices");
    let ds = b.shape(data)?;
    let is = b.shape(idx)?;
    let axis = norm_axis(node.attr_i("axis", 0)?, ds.len());
    if let Some(c) = b.m.graph.constant(idx).cloned() {
        if is.is_empty() {
            let i = c.to_i64_vec()[0];
            let i = if i < 0 { i + ds[axis] as i64 } else { i };
            let mut kept = ds.clone();
            kept[axis] = 1;
            let d = b.reshape(dy, &kept)?;
            let r = ds.len();
            let mut pads = vec![0i64; 2 * r];
            pads[axis] = i;
            pads[r + axis] = ds[axis] as i64 - i - 1;
            out[0] = Some(b.pad(d, &pads)?);
            return Ok(out);
        }
    }
    if axis != 0 || ds.len() != 2 {
        return Err(no_gradient(
            node,
            opset,
            "runtime indices other than rows of a 2-D table",
        ));
    }
    let (v, d) = (ds[0], ds[1]);
    let m: usize = is.iter().product();
    let it = b.dtype(idx)?;
    let t = b.dtype(data)?;
    let flat = b.reshape(idx, &[1, m])?;
    // Negative indices count from the end.
    let zero = b.constant(0.0, it, &[]);
    let neg = b.node("Less", &[flat, zero], vec![], ElemType::Bool, &[1, m]);
    let vv = b.value("rows", it, &[]);
    b.m.graph.set_constant(
        vv,
        crate::tensor::HostTensor::int(
            it,
            ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), v as i64),
        ),
    );
    let wrapped = b.add(flat, vv)?;
    let flat = b.node("Where", &[neg, wrapped, flat], vec![], it, &[1, m]);
    let rows = b.value("row_ids", it, &[v, 1]);
    b.m.graph.set_constant(
        rows,
        crate::tensor::HostTensor::int(
            it,
            ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[v, 1]), |i| i[0] as i64),
        ),
    );
    // The one-hot, transposed: [V, M], row r marks the lookups of row r.
    let eq = b.node("Equal", &[rows, flat], vec![], ElemType::Bool, &[v, m]);
    let oh_t = b.cast(eq, t)?;
    let d2 = b.reshape(dy, &[m, d])?;
    out[0] = Some(b.matmul(oh_t, d2)?);
    Ok(out)
}

/// LayerNormalization (Y only): with x̂ = (x - mean) / sqrt(var + eps) over
/// the normalised axes, dX = (dx̂ - mean(dx̂) - x̂ mean(dx̂ x̂)) / sqrt(var + eps)
/// where dx̂ = dY * scale; dScale and dB are dY * x̂ and dY summed to their
/// shapes.
pub fn layer_norm(
    b: &mut Builder,
    node: &Node,
    dys: &[Option<ValueId>],
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    if dys.iter().skip(1).any(Option::is_some) {
        return Err(no_gradient(
            node,
            opset,
            "through its Mean or InvStdDev outputs",
        ));
    }
    let dy = dys[0].expect("checked by the caller");
    let x = node.input(0).expect("LayerNormalization has an input");
    let scale = node.input(1).expect("LayerNormalization has a scale");
    let xs = b.shape(x)?;
    let axis = norm_axis(node.attr_i("axis", -1)?, xs.len());
    let eps = node.attr_f("epsilon", 1e-5)? as f64;
    let axes: Vec<usize> = (axis..xs.len()).collect();
    let t = b.dtype(x)?;
    let mean = b.reduce("ReduceMean", x, &axes, true)?;
    let xc = b.sub(x, mean)?;
    let sq = b.mul(xc, xc)?;
    let var = b.reduce("ReduceMean", sq, &axes, true)?;
    let e = b.constant(eps, t, &[]);
    let ve = b.add(var, e)?;
    let sd = b.unary("Sqrt", ve)?;
    let xhat = b.div(xc, sd)?;
    let mut out = vec![None; node.inputs.len()];
    if want(0) {
        let dxh = b.mul(dy, scale)?;
        let m1 = b.reduce("ReduceMean", dxh, &axes, true)?;
        let p = b.mul(dxh, xhat)?;
        let m2 = b.reduce("ReduceMean", p, &axes, true)?;
        let t2 = b.mul(xhat, m2)?;
        let a = b.sub(dxh, m1)?;
        let a = b.sub(a, t2)?;
        out[0] = Some(b.div(a, sd)?);
    }
    if want(1) {
        let p = b.mul(dy, xhat)?;
        out[1] = Some(b.sum_to(p, &b.shape(scale)?)?);
    }
    if want(2) {
        let bias = node.input(2).expect("wanted, so present");
        out[2] = Some(b.sum_to(dy, &b.shape(bias)?)?);
    }
    Ok(out)
}

/// Erf: 2 / sqrt(pi) exp(-x^2); Gelu (exact): Φ(x) + x φ(x).
pub fn erf_gelu(b: &mut Builder, node: &Node, dy: ValueId) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    let x = node.input(0).expect("an input");
    let t = b.dtype(x)?;
    let x2 = b.mul(x, x)?;
    let d = if node.op_type == "Erf" {
        let n = b.unary("Neg", x2)?;
        let e = b.unary("Exp", n)?;
        b.scale(e, 2.0 / std::f64::consts::PI.sqrt())?
    } else {
        if node.attr_s("approximate", "none")? != "none" {
            return Err(no_gradient(node, opset, "approximate='tanh'"));
        }
        let r2 = b.constant(std::f64::consts::SQRT_2, t, &[]);
        let z = b.div(x, r2)?;
        let erf = b.unary("Erf", z)?;
        let one = b.constant(1.0, t, &[]);
        let cdf = b.add(erf, one)?;
        let cdf = b.scale(cdf, 0.5)?;
        let h = b.scale(x2, -0.5)?;
        let e = b.unary("Exp", h)?;
        let pdf = b.scale(e, 1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
        let xp = b.mul(x, pdf)?;
        b.add(cdf, xp)?
    };
    Ok(vec![Some(b.mul(dy, d)?)])
}

/// Pow by a constant scalar exponent c: c x^(c - 1).
pub fn pow(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    if want(1) {
        return Err(no_gradient(node, opset, "by the exponent"));
    }
    let x = node.input(0).expect("an input");
    let e = node.input(1).expect("an exponent");
    let c = match b.m.graph.constant(e) {
        Some(c) if c.numel() == 1 => c.to_f64_vec()[0],
        _ => {
            return Err(no_gradient(
                node,
                opset,
                "by an exponent that is not a constant scalar",
            ))
        }
    };
    let t = b.dtype(x)?;
    let d = if c == 0.0 {
        // x^0 = 1 everywhere (0^0 included): no gradient.
        let z = b.constant(0.0, t, &[]);
        let g = b.mul(dy, z)?;
        return Ok(vec![Some(b.sum_to(g, &b.shape(x)?)?), None]);
    } else if c == 2.0 {
        b.scale(x, 2.0)?
    } else if c == 1.0 {
        b.constant(1.0, t, &[])
    } else {
        let cm1 = b.constant(c - 1.0, t, &[]);
        let p = b.node("Pow", &[x, cm1], vec![], t, &b.shape(x)?);
        b.scale(p, c)?
    };
    let g = b.mul(dy, d)?;
    Ok(vec![Some(b.sum_to(g, &b.shape(x)?)?), None])
}

/// Where(c, a, b): dY where c holds to a, elsewhere to b.
pub fn where_(
    b: &mut Builder,
    node: &Node,
    dy: ValueId,
    want: &dyn Fn(usize) -> bool,
) -> Result<Vec<Option<ValueId>>> {
    let c = node.input(0).expect("a condition");
    let t = b.dtype(dy)?;
    let s = b.shape(dy)?;
    let zero = b.constant(0.0, t, &[]);
    let mut out = vec![None; 3];
    if want(1) {
        let a = node.input(1).expect("a");
        let g = b.node("Where", &[c, dy, zero], vec![], t, &s);
        out[1] = Some(b.sum_to(g, &b.shape(a)?)?);
    }
    if want(2) {
        let e = node.input(2).expect("b");
        let g = b.node("Where", &[c, zero, dy], vec![], t, &s);
        out[2] = Some(b.sum_to(g, &b.shape(e)?)?);
    }
    Ok(out)
}
