//! Graph-level fusion that keeps the model a valid ONNX model: the rewritten
//! graph computes the same function with fewer nodes.

use crate::error::Result;
use crate::ir::{Model, Node, ValueId};

/// Replaces every read of `from` by `to`.
fn rewire(model: &mut Model, from: ValueId, to: ValueId) {
    for n in &mut model.graph.nodes {
        for i in n.inputs.iter_mut().flatten() {
            if *i == from {
                *i = to;
            }
        }
    }
}

/// Nodes that forward their input unchanged: Identity, inference-mode
/// Dropout, reshapes to the same shape, casts to the same type.
fn forwards_input(model: &Model, n: &Node) -> bool {
    let g = &model.graph;
    let same_shape = || match (n.input(0), n.outputs.first()) {
        (Some(x), Some(&y)) => g.shape_of(x).is_some() && g.shape_of(x) == g.shape_of(y),
        _ => false,
    };
    match n.op_type.as_str() {
        "Identity" => true,
        "Dropout" => {
            n.outputs.len() == 1
                && n.input(1).is_none()
                && n.input(2).is_none()
                && !n.attrs.contains_key(crate::train::TRAINING_ATTR)
        }
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => same_shape(),
        "Cast" => {
            same_shape()
                && n.input(0).and_then(|x| g.value(x).dtype)
                    == n.outputs.first().and_then(|&y| g.value(y).dtype)
        }
        _ => false,
    }
}

fn drop_identities(model: &mut Model) -> usize {
    let mut removed = 0;
    let mut i = 0;
    while i < model.graph.nodes.len() {
        let n = &model.graph.nodes[i];
        let forwards = forwards_input(model, n);
        if forwards && n.domain.is_empty() {
            let (x, y) = (n.input(0).unwrap(), n.outputs[0]);
            if !model.graph.outputs.contains(&y) {
                rewire(model, y, x);
                model.graph.nodes.remove(i);
                removed += 1;
                continue;
            }
        }
        i += 1;
    }
    removed
}

/// MatMul(A, W) + C with constant W [K, N] and constant C broadcastable to the
/// [M, N] result becomes Gemm(A, W, C).
fn matmul_add_to_gemm(model: &mut Model) -> usize {
    let mut fused = 0;
    loop {
        let uses = model.graph.use_counts();
        let g = &model.graph;
        let mut found = None;
        for (ai, add) in g.nodes.iter().enumerate() {
            if add.op_type != "Add" || add.inputs.len() != 2 {
                continue;
            }
            for side in 0..2 {
                let (y, c) = (add.input(side).unwrap(), add.input(1 - side).unwrap());
                let Some(mi) = g.nodes.iter().position(|n| n.outputs.first() == Some(&y)) else {
                    continue;
                };
                let mm = &g.nodes[mi];
                if mm.op_type != "MatMul" || uses[y] != 1 || g.outputs.contains(&y) {
                    continue;
                }
                let (a, w) = (mm.input(0).unwrap(), mm.input(1).unwrap());
                let (Some(sa), Some(wt), Some(ct)) = (g.shape_of(a), g.constant(w), g.constant(c))
                else {
                    continue;
                };
                let (Some(sy), Some(so)) = (g.shape_of(y), g.shape_of(add.outputs[0])) else {
                    continue;
                };
                if sa.len() != 2 || wt.shape().len() != 2 || ct.shape().len() > 2 || sy != so {
                    continue;
                }
                if !ct.dtype.is_float() || g.value(a).dtype != Some(ct.dtype) {
                    continue;
                }
                found = Some((ai, mi, a, w, c));
                break;
            }
            if found.is_some() {
                break;
            }
        }
        let Some((ai, mi, a, w, c)) = found else {
            break;
        };
        let out = model.graph.nodes[ai].outputs[0];
        let name = format!(
            "{}+{}",
            model.graph.nodes[mi].name, model.graph.nodes[ai].name
        );
        let gemm = Node {
            name,
            op_type: "Gemm".into(),
            domain: String::new(),
            inputs: vec![Some(a), Some(w), Some(c)],
            outputs: vec![out],
            attrs: Default::default(),
        };
        // Replace the MatMul in place (it comes first in topological order).
        model.graph.nodes[mi] = gemm;
        model.graph.nodes.remove(ai);
        fused += 1;
    }
    fused
}

/// Conv followed by an inference BatchNormalization with constant
/// statistics: the normalisation is folded into the convolution's weights and
/// bias (w' = w * a per output channel, b' = (b - mean) * a + beta).
fn fold_batchnorm_into_conv(model: &mut Model) -> usize {
    use crate::dtype::ElemType;
    use crate::host_threads::map_blocks;
    use crate::ops::norm::batchnorm_affine;
    use crate::tensor::{round_float, Data, HostTensor};
    use ndarray::{ArrayD, IxDyn};

    let mut fused = 0;
    loop {
        let uses = model.graph.use_counts();
        let g = &model.graph;
        let mut found = None;
        for (bi, bn) in g.nodes.iter().enumerate() {
            if bn.op_type != "BatchNormalization"
                || bn.outputs.len() != 1
                || bn.attr_i("training_mode", 0).unwrap_or(1) != 0
            {
                continue;
            }
            let y = bn.input(0).unwrap();
            let Some(ci) = g.nodes.iter().position(|n| n.outputs.first() == Some(&y)) else {
                continue;
            };
            let conv = &g.nodes[ci];
            if conv.op_type != "Conv" || uses[y] != 1 || g.outputs.contains(&y) {
                continue;
            }
            let stats: Vec<_> = (1..5)
                .map(|i| bn.input(i).and_then(|v| g.constant(v)))
                .collect();
            let Some(w) = conv.input(1).and_then(|v| g.constant(v)) else {
                continue;
            };
            let bias = conv.input(2).map(|v| g.constant(v));
            if stats.iter().any(Option::is_none)
                || matches!(bias, Some(None))
                || !w.dtype.is_float()
            {
                continue;
            }
            found = Some((ci, bi));
            break;
        }
        let Some((ci, bi)) = found else { break };
        let g = &model.graph;
        let bn = &g.nodes[bi];
        let conv = &g.nodes[ci];
        let eps = bn.attr_f("epsilon", 1e-5).unwrap_or(1e-5) as f64;
        let st: Vec<&HostTensor> = (1..5)
            .map(|i| g.constant(bn.input(i).unwrap()).unwrap())
            .collect();
        let (a, shift) = batchnorm_affine(st[0], st[1], st[2], st[3], eps);
        let w = g.constant(conv.input(1).unwrap()).unwrap();
        let dt = w.dtype;
        let co = w.shape()[0];
        let per = w.numel() / co.max(1);
        // Scaled and rounded to the weights' type in one pass, whole output
        // channels on each of the host's threads (weights are millions of
        // values).
        let wv: Vec<f64> = if dt == ElemType::F32 {
            map_blocks(&w.float_values(), per, |c| {
                let a = a[c];
                move |&[x]: &[f64; 1]| [(x * a) as f32 as f64]
            })
        } else {
            map_blocks(&w.float_values(), per, |c| {
                let a = a[c];
                move |&[x]: &[f64; 1]| [round_float(dt, x * a)]
            })
        };
        let old_b: Vec<f64> = match conv.input(2) {
            Some(v) => g.constant(v).unwrap().to_f64_vec(),
            None => vec![0.0; co],
        };
        let bv: Vec<f64> = (0..co).map(|c| old_b[c] * a[c] + shift[c]).collect();
        let w_new = HostTensor {
            dtype: dt,
            data: Data::Float(ArrayD::from_shape_vec(IxDyn(w.shape()), wv).unwrap()),
        };
        let b_new = HostTensor::float(dt, ArrayD::from_shape_vec(IxDyn(&[co]), bv).unwrap());
        let conv_name = conv.name.clone();
        let out = bn.outputs[0];
        let wid = model
            .graph
            .fresh_value(&format!("{conv_name}/folded_weights"));
        model.graph.set_constant(wid, w_new);
        let bid = model.graph.fresh_value(&format!("{conv_name}/folded_bias"));
        model.graph.set_constant(bid, b_new);
        let conv = &mut model.graph.nodes[ci];
        conv.inputs = vec![conv.inputs[0], Some(wid), Some(bid)];
        conv.outputs = vec![out];
        model.graph.nodes.remove(bi);
        fused += 1;
    }
    fused
}

/// Runs every fusion; returns how many nodes were rewritten away.
pub fn fuse(model: &mut Model) -> Result<usize> {
    let mut n = drop_identities(model);
    n += fold_batchnorm_into_conv(model);
    if model.opset >= 7 {
        n += matmul_add_to_gemm(model);
    }
    Ok(n)
}
