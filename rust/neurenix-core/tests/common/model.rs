//! Models built by value names, and folding of one node.

use std::collections::BTreeMap;

use neurenix_core::dtype::ElemType;
use neurenix_core::error::Result;
use neurenix_core::ir::{Attr, Dim, Graph, Model, Node, Value, ValueId};
use neurenix_core::tensor::HostTensor;

pub fn fixed(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Fixed(d)).collect()
}
pub fn sym(name: &str) -> Dim {
    Dim::Symbolic(name.to_string())
}

pub struct ModelBuilder {
    pub g: Graph,
    pub opset: i64,
}

impl ModelBuilder {
    pub fn new(opset: i64) -> ModelBuilder {
        ModelBuilder {
            g: Graph::default(),
            opset,
        }
    }
    /// A declared graph input.
    pub fn input(&mut self, name: &str, dtype: ElemType, dims: Vec<Dim>) -> ValueId {
        let id = self.g.add_value(Value {
            name: name.into(),
            dtype: Some(dtype),
            shape: Some(dims),
            constant: None,
        });
        self.g.inputs.push(id);
        id
    }
    pub fn input_fixed(&mut self, name: &str, dtype: ElemType, shape: &[usize]) -> ValueId {
        self.input(name, dtype, fixed(shape))
    }
    /// An initializer.
    pub fn init(&mut self, name: &str, t: HostTensor) -> ValueId {
        let id = self.g.value_named(name);
        self.g.set_constant(id, t);
        id
    }
    pub fn node(&mut self, op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> usize {
        self.node_a(op, name, inputs, outputs, vec![])
    }
    /// A node; an empty input name is an omitted optional input.
    pub fn node_a(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<(&str, Attr)>,
    ) -> usize {
        self.node_d(op, "", name, inputs, outputs, attrs)
    }
    pub fn node_d(
        &mut self,
        op: &str,
        domain: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<(&str, Attr)>,
    ) -> usize {
        let ins = inputs
            .iter()
            .map(|n| {
                if n.is_empty() {
                    None
                } else {
                    Some(self.g.value_named(n))
                }
            })
            .collect();
        let outs = outputs.iter().map(|n| self.g.value_named(n)).collect();
        let attrs: BTreeMap<String, Attr> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.g.nodes.push(Node {
            name: name.into(),
            op_type: op.into(),
            domain: domain.into(),
            inputs: ins,
            outputs: outs,
            attrs,
        });
        self.g.nodes.len() - 1
    }
    pub fn output(&mut self, name: &str) -> ValueId {
        let id = self.g.value_named(name);
        self.g.outputs.push(id);
        id
    }
    pub fn build(self) -> Model {
        Model {
            graph: self.g,
            opset: self.opset,
            name: "test".into(),
        }
    }
}

/// Prepares a model that has no graph inputs (everything folds) and returns
/// the prepared model.
pub fn optimize_no_inputs(m: &Model) -> Result<Model> {
    neurenix_core::compile::optimize(m, &[]).map(|(m, _)| m)
}

/// Folds one node over constant inputs (`None` = omitted optional input) and
/// returns its outputs. Panics if the node is not folded away.
pub fn try_fold_outputs(
    opset: i64,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Option<HostTensor>>,
    n_out: usize,
) -> Result<Vec<HostTensor>> {
    let mut b = ModelBuilder::new(opset);
    let mut names = Vec::new();
    for (i, t) in inputs.into_iter().enumerate() {
        match t {
            Some(t) => {
                let n = format!("in{i}");
                b.init(&n, t);
                names.push(n);
            }
            None => names.push(String::new()),
        }
    }
    let outs: Vec<String> = (0..n_out).map(|i| format!("out{i}")).collect();
    let in_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.node_a(op, "n", &in_refs, &out_refs, attrs);
    for o in &outs {
        b.output(o);
    }
    let m = optimize_no_inputs(&b.build())?;
    assert!(
        m.graph.nodes.is_empty(),
        "{op} was not folded: {} nodes remain",
        m.graph.nodes.len()
    );
    Ok(outs
        .iter()
        .map(|o| {
            m.graph
                .constant(m.graph.find(o).unwrap())
                .expect("folded output is constant")
                .clone()
        })
        .collect())
}

pub fn try_fold(
    opset: i64,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Option<HostTensor>>,
) -> Result<HostTensor> {
    try_fold_outputs(opset, op, attrs, inputs, 1).map(|mut v| v.remove(0))
}

#[track_caller]
pub fn fold(opset: i64, op: &str, attrs: Vec<(&str, Attr)>, inputs: Vec<HostTensor>) -> HostTensor {
    match try_fold(opset, op, attrs, inputs.into_iter().map(Some).collect()) {
        Ok(t) => t,
        Err(e) => panic!("folding {op} failed: {e}"),
    }
}
