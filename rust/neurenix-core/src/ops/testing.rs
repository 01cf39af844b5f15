//! Helpers of the operators' unit tests: one-node graphs, inferred and
//! folded.

use std::collections::BTreeMap;

use ndarray::{ArrayD, IxDyn};

use crate::dtype::ElemType;
use crate::error::Result;
use crate::ir::{Attr, Dim, Graph, Node, Value};
use crate::tensor::HostTensor;

use super::{checked_numel, lookup, OpCx};

pub fn f32s(shape: &[usize], v: &[f64]) -> HostTensor {
    HostTensor::float(
        ElemType::F32,
        ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap(),
    )
}
pub fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_i64s(shape, v.to_vec())
}
pub fn arange(shape: &[usize]) -> HostTensor {
    f32s(
        shape,
        &(0..checked_numel(shape).unwrap())
            .map(|i| i as f64)
            .collect::<Vec<_>>(),
    )
}
pub fn ints(a: &[i64]) -> Attr {
    Attr::Ints(a.to_vec())
}

/// An operand of a one-node graph: a constant, a computed value of known
/// type and shape, or an omitted optional input.
pub enum In {
    C(HostTensor),
    Var(ElemType, Vec<usize>),
    Absent,
}

/// Infers and folds one node; checks the folded values against inference.
pub fn fold(
    op: &str,
    opset: i64,
    ins: Vec<In>,
    n_out: usize,
    attrs: &[(&str, Attr)],
) -> Result<Vec<HostTensor>> {
    let mut g = Graph::default();
    let mut inputs = Vec::new();
    for (i, a) in ins.into_iter().enumerate() {
        inputs.push(match a {
            In::C(t) => {
                let id = g.value_named(&format!("in{i}"));
                g.set_constant(id, t);
                Some(id)
            }
            In::Var(dt, s) => Some(g.add_value(Value {
                name: format!("in{i}"),
                dtype: Some(dt),
                shape: Some(s.iter().map(|&d| Dim::Fixed(d)).collect()),
                constant: None,
            })),
            In::Absent => None,
        });
    }
    let outputs = (0..n_out)
        .map(|k| g.value_named(&format!("out{k}")))
        .collect();
    let node = Node {
        name: "n".into(),
        op_type: op.into(),
        domain: String::new(),
        inputs,
        outputs,
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    };
    let o = lookup(&node, opset)?;
    let cx = OpCx {
        graph: &g,
        node: &node,
        opset,
    };
    let types = o.infer(&cx)?;
    let vals: Vec<Option<&HostTensor>> = node
        .inputs
        .iter()
        .map(|v| v.and_then(|v| g.constant(v)))
        .collect();
    let out = o.eval(&cx, &vals).expect("the node folds")?;
    assert_eq!(out.len(), types.len());
    for (t, ts) in out.iter().zip(&types) {
        assert_eq!(
            (t.dtype, t.shape()),
            (ts.dtype, ts.shape.as_slice()),
            "fold disagrees with inference"
        );
    }
    Ok(out)
}

/// The one output of a node that folds.
pub fn one(op: &str, opset: i64, ins: Vec<In>, attrs: &[(&str, Attr)]) -> HostTensor {
    fold(op, opset, ins, 1, attrs).unwrap().pop().unwrap()
}
