//! Reverse-mode automatic differentiation on the IR: for a scalar loss and
//! the values to differentiate it by, adds the nodes that compute the
//! gradients, as ordinary ONNX nodes (the way PopART builds its backward
//! graph). One gradient rule per operator ([`RULES`]); an operator on the
//! path from a trained value to the loss without one is an
//! `Error::Unsupported` naming it, its node and "no gradient".

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::{Node, ValueId};

use super::build::Builder;

/// The operators with a gradient rule.
pub const RULES: &[&str] = &[
    "Add",
    "AveragePool",
    "Cast",
    "Concat",
    "Conv",
    "Div",
    "Erf",
    "Exp",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "Identity",
    "LayerNormalization",
    "Log",
    "LogSoftmax",
    "MatMul",
    "MaxPool",
    "Mul",
    "Neg",
    "Pow",
    "ReduceMean",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Sigmoid",
    "Softmax",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

pub(super) fn no_gradient(node: &Node, opset: i64, why: &str) -> Error {
    let message = format!(
        "operator {} (node '{}') has no gradient{}: training cannot differentiate through it. \
         Operators with gradients: {}",
        node.op_type,
        node.name,
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({why})")
        },
        RULES.join(", ")
    );
    Error::Unsupported {
        op_type: node.op_type.clone(),
        node: node.name.clone(),
        domain: if node.domain.is_empty() {
            "ai.onnx".into()
        } else {
            node.domain.clone()
        },
        opset,
        supported: RULES.iter().map(|s| s.to_string()).collect(),
        message,
    }
}

/// Adds the gradient of `loss` (a scalar) by each of `wrt`, seeded with
/// `seed` (the static loss scale: every gradient is `seed` times the
/// true one). Returns the gradient value of each of `wrt` (None when the
/// loss does not depend on it).
pub fn gradients(
    b: &mut Builder,
    loss: ValueId,
    wrt: &[ValueId],
    seed: f64,
) -> Result<Vec<Option<ValueId>>> {
    let g = &b.m.graph;
    let n = g.nodes.len();
    // Values that depend on something in `wrt`.
    let mut depends = vec![false; g.values.len()];
    for &w in wrt {
        depends[w] = true;
    }
    for node in &g.nodes {
        if node.inputs.iter().flatten().any(|&v| depends[v]) {
            for &o in &node.outputs {
                depends[o] = true;
            }
        }
    }
    // Nodes the loss depends on.
    let mut needed = vec![false; g.values.len()];
    needed[loss] = true;
    let mut on_path = vec![false; n];
    for i in (0..n).rev() {
        let node = &g.nodes[i];
        if node.outputs.iter().any(|&o| needed[o]) {
            for &v in node.inputs.iter().flatten() {
                needed[v] = true;
            }
            on_path[i] = node.outputs.iter().any(|&o| depends[o]);
        }
    }
    let nodes: Vec<Node> = g.nodes.clone();

    let lt = b.dtype(loss)?;
    let ls = b.shape(loss)?;
    let mut contrib: HashMap<ValueId, Vec<ValueId>> = HashMap::new();
    let s = b.constant(seed, lt, &ls);
    contrib.insert(loss, vec![s]);
    for i in (0..n).rev() {
        if !on_path[i] {
            continue;
        }
        let node = &nodes[i];
        let mut dys = Vec::with_capacity(node.outputs.len());
        for &o in &node.outputs {
            dys.push(match contrib.remove(&o) {
                Some(parts) => Some(sum(b, parts)?),
                None => None,
            });
        }
        if dys.iter().all(Option::is_none) {
            continue;
        }
        let wants: Vec<bool> = node
            .inputs
            .iter()
            .map(|v| v.is_some_and(|v| depends[v] && b.m.graph.constant(v).is_none()))
            .collect();
        let grads = rule(b, node, &dys, &wants)?;
        for (k, gk) in grads.into_iter().enumerate() {
            if let (Some(gv), Some(Some(v))) = (gk, node.inputs.get(k)) {
                if wants[k] {
                    contrib.entry(*v).or_default().push(gv);
                }
            }
        }
    }
    wrt.iter()
        .map(|w| match contrib.remove(w) {
            Some(parts) => sum(b, parts).map(Some),
            None => Ok(None),
        })
        .collect()
}

fn sum(b: &mut Builder, parts: Vec<ValueId>) -> Result<ValueId> {
    let mut it = parts.into_iter();
    let mut acc = it.next().expect("a gradient has at least one part");
    for p in it {
        acc = b.add(acc, p)?;
    }
    Ok(acc)
}

fn input(node: &Node, k: usize) -> Result<ValueId> {
    node.input(k)
        .ok_or_else(|| Error::Internal(format!("node '{}' has no input {k}", node.name)))
}

/// The gradient of every input of `node` from the gradients of its outputs
/// (`dys`, None for an output the loss does not depend on), for the inputs
/// in `wants`.
fn rule(
    b: &mut Builder,
    node: &Node,
    dys: &[Option<ValueId>],
    wants: &[bool],
) -> Result<Vec<Option<ValueId>>> {
    let opset = b.opset();
    let want = |k: usize| wants.get(k).copied().unwrap_or(false);
    if node.op_type == "LayerNormalization" {
        return super::transformer_grad::layer_norm(b, node, dys, &want);
    }
    let dy = match dys.first().copied().flatten() {
        Some(d) => d,
        None => return Ok(vec![None; node.inputs.len()]),
    };
    let y = node.outputs[0];
    let x = node.input(0);
    let mut out: Vec<Option<ValueId>> = vec![None; node.inputs.len()];
    match node.op_type.as_str() {
        "Identity" => out[0] = Some(dy),
        "Add" | "Sub" => {
            for k in 0..2 {
                if want(k) {
                    let shape = b.shape(input(node, k)?)?;
                    let g = if k == 1 && node.op_type == "Sub" {
                        b.unary("Neg", dy)?
                    } else {
                        dy
                    };
                    out[k] = Some(b.sum_to(g, &shape)?);
                }
            }
        }
        "Mul" => {
            let (a, c) = (input(node, 0)?, input(node, 1)?);
            if want(0) {
                let g = b.mul(dy, c)?;
                out[0] = Some(b.sum_to(g, &b.shape(a)?)?);
            }
            if want(1) {
                let g = b.mul(dy, a)?;
                out[1] = Some(b.sum_to(g, &b.shape(c)?)?);
            }
        }
        "Div" => {
            let (a, c) = (input(node, 0)?, input(node, 1)?);
            if want(0) {
                let g = b.div(dy, c)?;
                out[0] = Some(b.sum_to(g, &b.shape(a)?)?);
            }
            if want(1) {
                // d(a / c)/dc = -y / c
                let t = b.mul(dy, y)?;
                let t = b.div(t, c)?;
                let g = b.unary("Neg", t)?;
                out[1] = Some(b.sum_to(g, &b.shape(c)?)?);
            }
        }
        "Neg" => out[0] = Some(b.unary("Neg", dy)?),
        "Relu" => {
            let x = input(node, 0)?;
            let t = b.dtype(x)?;
            let zero = b.constant(0.0, t, &[]);
            let shape = b.shape(x)?;
            let pos = b.node(
                "Greater",
                &[x, zero],
                vec![],
                crate::dtype::ElemType::Bool,
                &shape,
            );
            out[0] = Some(b.node("Where", &[pos, dy, zero], vec![], t, &shape));
        }
        "Sigmoid" => {
            // dy * y * (1 - y)
            let t = b.dtype(y)?;
            let one = b.constant(1.0, t, &[]);
            let om = b.sub(one, y)?;
            let yy = b.mul(y, om)?;
            out[0] = Some(b.mul(dy, yy)?);
        }
        "Tanh" => {
            let t = b.dtype(y)?;
            let one = b.constant(1.0, t, &[]);
            let y2 = b.mul(y, y)?;
            let om = b.sub(one, y2)?;
            out[0] = Some(b.mul(dy, om)?);
        }
        "Exp" => out[0] = Some(b.mul(dy, y)?),
        "Log" => out[0] = Some(b.div(dy, input(node, 0)?)?),
        "Sqrt" => {
            let t = b.div(dy, y)?;
            out[0] = Some(b.scale(t, 0.5)?);
        }
        "Cast" => {
            let xt = b.dtype(input(node, 0)?)?;
            if !xt.is_float() {
                return Ok(out);
            }
            out[0] = Some(b.cast(dy, xt)?);
        }
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
            let shape = b.shape(input(node, 0)?)?;
            out[0] = Some(b.reshape(dy, &shape)?);
        }
        "Transpose" => {
            let r = b.shape(input(node, 0)?)?.len();
            let perm: Vec<usize> = match node.attr_ints("perm")? {
                Some(p) => p.iter().map(|&v| v as usize).collect(),
                None => (0..r).rev().collect(),
            };
            let mut inv = vec![0usize; r];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            out[0] = Some(b.transpose(dy, &inv)?);
        }
        "MatMul" => {
            let (a, c) = (input(node, 0)?, input(node, 1)?);
            let (sa, sc) = (b.shape(a)?, b.shape(c)?);
            if sa.len() < 2 || sc.len() < 2 {
                return Err(no_gradient(node, opset, "a 1-D MatMul operand"));
            }
            if want(0) {
                let ct = b.swap_last(c)?;
                let g = b.matmul(dy, ct)?;
                out[0] = Some(b.sum_to(g, &sa)?);
            }
            if want(1) {
                let at = b.swap_last(a)?;
                let g = b.matmul(at, dy)?;
                out[1] = Some(b.sum_to(g, &sc)?);
            }
        }
        "Gemm" => {
            // y = alpha * op(a) op(c) + beta * bias
            let (a, c) = (input(node, 0)?, input(node, 1)?);
            let alpha = node.attr_f("alpha", 1.0)? as f64;
            let beta = node.attr_f("beta", 1.0)? as f64;
            let ta = node.attr_i("transA", 0)? != 0;
            let tb = node.attr_i("transB", 0)? != 0;
            let dys = b.scale(dy, alpha)?;
            if want(0) {
                // d op(a) = dy op(c)^T
                let opc = if tb { c } else { b.transpose(c, &[1, 0])? };
                let d = b.matmul(dys, opc)?;
                out[0] = Some(if ta { b.transpose(d, &[1, 0])? } else { d });
            }
            if want(1) {
                // d op(c) = op(a)^T dy
                let opat = if ta { a } else { b.transpose(a, &[1, 0])? };
                let d = b.matmul(opat, dys)?;
                out[1] = Some(if tb { b.transpose(d, &[1, 0])? } else { d });
            }
            if want(2) {
                let bias = input(node, 2)?;
                let g = b.scale(dy, beta)?;
                out[2] = Some(b.sum_to(g, &b.shape(bias)?)?);
            }
        }
        "Softmax" | "LogSoftmax" => {
            let shape = b.shape(y)?;
            let r = shape.len() as i64;
            let default = if opset >= 13 { -1 } else { 1 };
            let axis = node.attr_i("axis", default)?;
            let axis = if axis < 0 { axis + r } else { axis } as usize;
            if opset < 13 && axis != shape.len() - 1 {
                return Err(no_gradient(
                    node,
                    opset,
                    "before opset 13 only over the last axis",
                ));
            }
            if node.op_type == "Softmax" {
                // y * (dy - sum(dy * y))
                let p = b.mul(dy, y)?;
                let s = b.reduce("ReduceSum", p, &[axis], true)?;
                let d = b.sub(dy, s)?;
                out[0] = Some(b.mul(y, d)?);
            } else {
                // dy - exp(y) * sum(dy)
                let s = b.reduce("ReduceSum", dy, &[axis], true)?;
                let e = b.unary("Exp", y)?;
                let t = b.mul(e, s)?;
                out[0] = Some(b.sub(dy, t)?);
            }
        }
        "ReduceSum" | "ReduceMean" => {
            let x = x.expect("a reduction has an input");
            let xs = b.shape(x)?;
            let r = xs.len() as i64;
            let axes: Vec<i64> = match node.input(1) {
                Some(av) => {
                    b.m.graph
                        .constant(av)
                        .map(|c| c.to_i64_vec())
                        .ok_or_else(|| no_gradient(node, opset, "axes known only at run time"))?
                }
                None => node.attr_ints("axes")?.unwrap_or_default(),
            };
            let noop = node.attr_i("noop_with_empty_axes", 0)? != 0;
            let mut axes: Vec<usize> = axes
                .iter()
                .map(|&a| (if a < 0 { a + r } else { a }) as usize)
                .collect();
            if axes.is_empty() {
                if noop {
                    out[0] = Some(dy);
                    return Ok(out);
                }
                axes = (0..xs.len()).collect();
            }
            let kept: Vec<usize> = xs
                .iter()
                .enumerate()
                .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
                .collect();
            let d = b.reshape(dy, &kept)?;
            let d = if node.op_type == "ReduceMean" {
                let n: usize = axes.iter().map(|&a| xs[a]).product();
                b.scale(d, 1.0 / n as f64)?
            } else {
                d
            };
            out[0] = Some(b.expand(d, &xs)?);
        }
        "Conv" => return super::conv_grad::conv(b, node, dy, &want),
        "MaxPool" | "AveragePool" => return super::conv_grad::pool(b, node, dy, y),
        "GlobalAveragePool" => return super::conv_grad::global_average_pool(b, node, dy),
        "Concat" => return super::conv_grad::concat(b, node, dy, &want),
        "Gather" => return super::transformer_grad::gather(b, node, dy, &want),
        "Erf" | "Gelu" => return super::transformer_grad::erf_gelu(b, node, dy),
        "Pow" => return super::transformer_grad::pow(b, node, dy, &want),
        "Where" => return super::transformer_grad::where_(b, node, dy, &want),
        _ => return Err(no_gradient(node, opset, "")),
    }
    Ok(out)
}
