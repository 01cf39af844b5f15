//! Dropout in a training graph drops, as PopART's training sessions do
//! whatever the node's `training_mode`: each node becomes a mask drawn on the
//! device (`RandomUniformLike` below 1 - ratio, from the tiles' random
//! generators, seeded from the manager's seed) and the kept values scaled by
//! 1 / (1 - ratio); the gradient rules of Where and Mul then carry the same
//! mask into the backward pass.

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Model, Node};

use super::build::Builder;

/// Rewrites the Dropout nodes of `m` (after the passes).
pub fn to_training_mode(m: &mut Model) -> Result<()> {
    let found: Vec<usize> = (0..m.graph.nodes.len())
        .filter(|&i| m.graph.nodes[i].op_type == "Dropout")
        .collect();
    for &i in found.iter().rev() {
        let node = m.graph.nodes.remove(i);
        if node.outputs.len() > 1
            && m.graph
                .nodes
                .iter()
                .any(|n| n.inputs.contains(&Some(node.outputs[1])))
        {
            return Err(Error::InvalidArgument(format!(
                "Dropout '{}': its mask output is read by the model; training draws its own mask",
                node.name
            )));
        }
        let ratio = if m.opset >= 12 {
            match node.input(1) {
                Some(r) => m
                    .graph
                    .constant(r)
                    .map(|c| c.to_f64_vec()[0])
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "Dropout '{}': the ratio must be a constant to train",
                            node.name
                        ))
                    })?,
                None => 0.5,
            }
        } else {
            node.attr_f("ratio", 0.5)? as f64
        };
        if !(0.0..1.0).contains(&ratio) {
            return Err(Error::InvalidArgument(format!(
                "Dropout '{}': ratio {ratio} is outside [0, 1)",
                node.name
            )));
        }
        let x = node.input(0).expect("Dropout has an input");
        let mut b = Builder::new(m, &format!("{}/", node.name));
        let t = b.dtype(x)?;
        let shape = b.shape(x)?;
        let y = if ratio == 0.0 {
            x
        } else {
            let u = b.node(
                "RandomUniformLike",
                &[x],
                vec![(
                    "dtype",
                    crate::ir::Attr::Int(ElemType::F32.onnx_code() as i64),
                )],
                ElemType::F32,
                &shape,
            );
            let keep_p = b.constant(1.0 - ratio, ElemType::F32, &[]);
            let keep = b.node("Less", &[u, keep_p], vec![], ElemType::Bool, &shape);
            let scaled = b.scale(x, 1.0 / (1.0 - ratio))?;
            let zero = b.constant(0.0, t, &[]);
            b.node("Where", &[keep, scaled, zero], vec![], t, &shape)
        };
        b.m.graph.nodes.push(Node {
            name: format!("{}/output", node.name),
            op_type: "Identity".into(),
            domain: String::new(),
            inputs: vec![Some(y)],
            outputs: vec![node.outputs[0]],
            attrs: Default::default(),
        });
    }
    Ok(())
}
