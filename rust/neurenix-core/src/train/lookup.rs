//! Embedding lookups that train: a Gather of a trained 2-D table by indices
//! known only at run time becomes the product of the indices' one-hot with
//! the table. The lookup then reads the table where a matrix product lays
//! it out, and its gradient (the one-hot, transposed, times the output's)
//! arrives in whole rows, so the table's optimizer update is not split into
//! the column slices the inference lookup uses (`cpp/src/ops/gather.cc`).

use crate::dtype::ElemType;
use crate::error::Result;
use crate::ir::{Model, Node, ValueId};

use super::build::Builder;

/// Rewrites the Gathers of trained tables in `m` (after the passes).
pub fn to_products(m: &mut Model, weights: &[ValueId]) -> Result<()> {
    let found: Vec<usize> = (0..m.graph.nodes.len())
        .filter(|&i| {
            let n = &m.graph.nodes[i];
            n.op_type == "Gather"
                && n.input(0).is_some_and(|t| weights.contains(&t))
                && n.input(1).is_some_and(|ix| m.graph.constant(ix).is_none())
                && n.attr_i("axis", 0).map_or(false, |a| a == 0)
                && n.input(0)
                    .and_then(|t| m.graph.shape_of(t))
                    .is_some_and(|s| s.len() == 2)
        })
        .collect();
    for &i in found.iter().rev() {
        let node = m.graph.nodes.remove(i);
        let table = node.input(0).expect("checked");
        let idx = node.input(1).expect("checked");
        let mut b = Builder::new(m, &format!("{}/", node.name));
        let ts = b.shape(table)?;
        let (v, d) = (ts[0], ts[1]);
        let is = b.shape(idx)?;
        let it = b.dtype(idx)?;
        let t = b.dtype(table)?;
        let count: usize = is.iter().product();
        let flat = b.reshape(idx, &[count, 1])?;
        // Negative indices count from the end.
        let zero = b.constant(0.0, it, &[]);
        let neg = b.node("Less", &[flat, zero], vec![], ElemType::Bool, &[count, 1]);
        let rows_v = b.value("rows", it, &[]);
        b.m.graph.set_constant(
            rows_v,
            crate::tensor::HostTensor::int(
                it,
                ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), v as i64),
            ),
        );
        let wrapped = b.add(flat, rows_v)?;
        let flat = b.node("Where", &[neg, wrapped, flat], vec![], it, &[count, 1]);
        let ids = b.value("row_ids", it, &[1, v]);
        b.m.graph.set_constant(
            ids,
            crate::tensor::HostTensor::int(
                it,
                ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[1, v]), |i| i[1] as i64),
            ),
        );
        let eq = b.node("Equal", &[flat, ids], vec![], ElemType::Bool, &[count, v]);
        let onehot = b.cast(eq, t)?;
        let y = b.matmul(onehot, table)?;
        let mut out_shape = is.clone();
        out_shape.push(d);
        let y = b.reshape(y, &out_shape)?;
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
