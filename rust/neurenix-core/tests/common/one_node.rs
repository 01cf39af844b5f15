//! One operator on its own, below the passes: its inference, its host
//! evaluation and its lowering onto a [`ShapeBackend`], for shapes the
//! compiler's passes would refuse before the operator saw them.

use std::collections::BTreeMap;

use neurenix_core::dtype::ElemType;
use neurenix_core::error::Result;
use neurenix_core::ir::{Attr, Dim, Graph, Node, Value};
use neurenix_core::lower::precision::Precision;
use neurenix_core::lower::{DevTensor, LowerCx, LowerOptions};
use neurenix_core::ops::{lookup, OpCx, TypeShape};
use neurenix_core::tensor::HostTensor;

use super::shape_backend::ShapeBackend;

/// An operand of [`NodeCase`]: a computed value of known type and shape,
/// or a constant.
pub enum Operand {
    Var(ElemType, Vec<usize>),
    Const(HostTensor),
}

/// A graph of one node called "n" over its operands "in0", "in1", ...
pub struct NodeCase {
    pub graph: Graph,
    pub node: Node,
    pub opset: i64,
}

impl NodeCase {
    pub fn new(
        opset: i64,
        op: &str,
        operands: Vec<Operand>,
        attrs: Vec<(&str, Attr)>,
        n_out: usize,
    ) -> NodeCase {
        let mut graph = Graph::default();
        let mut inputs = Vec::new();
        for (i, o) in operands.into_iter().enumerate() {
            let name = format!("in{i}");
            inputs.push(Some(match o {
                Operand::Var(dtype, shape) => graph.add_value(Value {
                    name,
                    dtype: Some(dtype),
                    shape: Some(shape.into_iter().map(Dim::Fixed).collect()),
                    constant: None,
                }),
                Operand::Const(t) => {
                    let v = graph.value_named(&name);
                    graph.set_constant(v, t);
                    v
                }
            }));
        }
        let outputs = (0..n_out)
            .map(|k| graph.value_named(&format!("out{k}")))
            .collect();
        let node = Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            inputs,
            outputs,
            attrs: attrs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect::<BTreeMap<_, _>>(),
        };
        graph.nodes.push(node.clone());
        NodeCase { graph, node, opset }
    }

    fn cx(&self) -> OpCx<'_> {
        OpCx {
            graph: &self.graph,
            node: &self.node,
            opset: self.opset,
        }
    }

    /// The operator's shape inference.
    pub fn infer(&self) -> Result<Vec<TypeShape>> {
        lookup(&self.node, self.opset)?.infer(&self.cx())
    }

    /// The operator's host evaluation over its constants (`None`: not
    /// folded).
    pub fn eval(&self) -> Option<Result<Vec<HostTensor>>> {
        let op = lookup(&self.node, self.opset).ok()?;
        let ins: Vec<Option<&HostTensor>> = self
            .node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| self.graph.constant(v)))
            .collect();
        op.eval(&self.cx(), &ins)
    }

    /// Infers, then lowers the node onto a fresh [`ShapeBackend`] (its
    /// computed operands become device inputs).
    pub fn lower(&mut self, precision: Precision) -> Result<ShapeBackend> {
        let op = lookup(&self.node, self.opset)?;
        for (o, ts) in self.node.outputs.clone().into_iter().zip(self.infer()?) {
            let v = self.graph.value_mut(o);
            v.dtype = Some(ts.dtype);
            v.shape = Some(ts.shape.into_iter().map(Dim::Fixed).collect());
        }
        let mut be = ShapeBackend::default();
        let opts = LowerOptions {
            precision,
            memory_proportion: 0.6,
            enable_half_partials: false,
            fp8_format: neurenix_core::float8::Float8::E4M3FNUZ,
        };
        let node_ipu = [0u32];
        let mut cx = LowerCx::new(&mut be, &self.graph, self.opset, &opts, &node_ipu);
        cx.begin_node(0, op.float_role());
        for v in self.node.inputs.iter().flatten().copied() {
            if self.graph.constant(v).is_some() {
                continue;
            }
            let shape = self.graph.shape_of(v).unwrap_or_default();
            let dtype = cx.device_type(self.graph.value(v).dtype.unwrap_or(ElemType::F32));
            let name = self.graph.value(v).name.clone();
            let id = cx.backend.add_input(&name, dtype, &shape, 0)?;
            cx.set(
                v,
                DevTensor {
                    id,
                    shape,
                    dtype,
                    ipu: 0,
                },
            );
        }
        op.lower(&mut cx, &self.node)?;
        drop(cx);
        Ok(be)
    }
}
