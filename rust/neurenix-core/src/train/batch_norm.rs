//! BatchNormalization in training mode, as PopART trains it: every
//! BatchNormalization node of a training graph normalises with the batch's
//! statistics, written out in primitive operators (whose gradient rules then
//! apply), and its running mean and variance become state updated by each
//! step as ONNX's training mode defines it:
//! `running = running * momentum + batch * (1 - momentum)`, with the
//! population variance of the batch.

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Model, ValueId};

use super::build::Builder;

/// Rewrites the BatchNormalization nodes of `m` (after the passes; their
/// running statistics were made state by `prepare_training`, `weights` are
/// the trained values); returns the running statistics, now updated.
pub fn to_training_mode(m: &mut Model, weights: &[ValueId]) -> Result<Vec<ValueId>> {
    let bn: Vec<usize> = (0..m.graph.nodes.len())
        .filter(|&i| m.graph.nodes[i].op_type == "BatchNormalization")
        .collect();
    let mut buffers = Vec::new();
    // Last first: removing a node keeps the indices of earlier ones.
    for &i in bn.iter().rev() {
        let node = m.graph.nodes.remove(i);
        let x = node.input(0).expect("checked by shape inference");
        let (scale, bias, mean, var) = (
            node.input(1).expect("BatchNormalization has a scale"),
            node.input(2).expect("BatchNormalization has a bias"),
            node.input(3).expect("BatchNormalization has a mean"),
            node.input(4).expect("BatchNormalization has a variance"),
        );
        let eps = node.attr_f("epsilon", 1e-5)? as f64;
        let momentum = node.attr_f("momentum", 0.9)? as f64;
        let mut b = Builder::new(m, &format!("{}/", node.name));
        let xs = b.shape(x)?;
        if xs.len() < 2 {
            return Err(Error::InvalidArgument(format!(
                "BatchNormalization '{}' normalises a tensor of rank {}; training needs [N, C, ...]",
                node.name,
                xs.len()
            )));
        }
        let c = xs[1];
        let t = b.dtype(x)?;
        let axes: Vec<usize> = (0..xs.len()).filter(|&a| a != 1).collect();
        let mut cshape = vec![1usize; xs.len()];
        cshape[1] = c;
        let bmean = b.reduce("ReduceMean", x, &axes, true)?;
        let xc = b.sub(x, bmean)?;
        let sq = b.mul(xc, xc)?;
        let bvar = b.reduce("ReduceMean", sq, &axes, true)?;
        let e = b.constant(eps, t, &[]);
        let ve = b.add(bvar, e)?;
        let sd = b.unary("Sqrt", ve)?;
        let xhat = b.div(xc, sd)?;
        let s = b.reshape(scale, &cshape)?;
        let bb = b.reshape(bias, &cshape)?;
        let ys = b.mul(xhat, s)?;
        let y = b.add(ys, bb)?;
        // Y keeps its value id: rewire the node's first output.
        let out = node.outputs[0];
        b.m.graph.nodes.push(crate::ir::Node {
            name: format!("{}/output", node.name),
            op_type: "Identity".into(),
            domain: String::new(),
            inputs: vec![Some(y)],
            outputs: vec![out],
            attrs: Default::default(),
        });
        // Running statistics: state updated with every step (float32).
        b.master = true;
        for (stat, batch_stat) in [(mean, bmean), (var, bvar)] {
            // prepare_training made the statistics state (without update).
            let Some(k) =
                b.m.graph
                    .state
                    .iter()
                    .position(|s| s.value == stat && !weights.contains(&stat))
            else {
                return Err(Error::InvalidArgument(format!(
                    "BatchNormalization '{}': its running statistics must be initializers, and not trained",
                    node.name
                )));
            };
            let flat = b.reshape(batch_stat, &[c])?;
            let flat = b.cast(flat, ElemType::F32)?;
            let kept = b.scale(stat, momentum)?;
            let fresh = b.scale(flat, 1.0 - momentum)?;
            let update = b.add(kept, fresh)?;
            b.m.graph.state[k].update = Some(update);
            b.m.graph.state[k].in_first_segment = true;
            buffers.push(stat);
        }
    }
    Ok(buffers)
}
