//! Gather. Constant indices are outer indexing (see `indexing`): a single
//! index or an arithmetic progression is one strided view, anything else
//! one view per run of indices. Indices known only at run time (embedding
//! lookups) use the device's column-split table lookup.

use crate::dtype::{DeviceType, ElemType};
use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::HostTensor;

use super::indexing::{lower_take, take_all_host, AxisIndex, FOLD_LIMIT};
use super::{host_fits, norm_axis, OpCx, Operator, Registry, TypeShape};

struct Gather;

impl Gather {
    fn axis(cx: &OpCx, rank: usize) -> Result<usize> {
        if rank == 0 {
            return Err(cx.err("cannot gather from a scalar"));
        }
        norm_axis(cx.node.attr_i("axis", 0)?, rank, cx)
    }

    /// Normalised constant indices, checked against the axis.
    fn indices(cx: &OpCx, t: &HostTensor, dim: usize) -> Result<Vec<usize>> {
        let d = cx.to_i64(dim, "the gathered axis")?;
        t.to_i64_vec()
            .into_iter()
            .map(|i| {
                // -d <= i < d, so i + d cannot overflow.
                let j = if (-d..0).contains(&i) { i + d } else { i };
                usize::try_from(j).ok().filter(|&j| j < dim).ok_or_else(|| {
                    cx.err(format!(
                        "index {i} is out of range for an axis of size {dim}"
                    ))
                })
            })
            .collect()
    }

    /// Outer-indexing form of a gather with constant indices: the indices
    /// flattened along `axis`.
    fn take_index(shape: &[usize], axis: usize, idx: &[usize]) -> Vec<AxisIndex> {
        let mut all: Vec<AxisIndex> = shape.iter().map(|&d| AxisIndex::identity(d)).collect();
        let flat: Vec<Option<usize>> = idx.iter().map(|&i| Some(i)).collect();
        all[axis] = AxisIndex::from_positions(&flat);
        all
    }
}

impl Operator for Gather {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let it = cx.in_dtype(1)?;
        if !matches!(it, ElemType::I32 | ElemType::I64) {
            return Err(cx.err(format!("indices must be int32 or int64, got {it}")));
        }
        let axis = Gather::axis(cx, s.len())?;
        let is = cx.in_shape(1)?;
        if let Some(c) = cx.const_input(1) {
            Gather::indices(cx, c, s[axis])?;
        }
        let mut out = s[..axis].to_vec();
        out.extend(&is);
        out.extend(&s[axis + 1..]);
        Ok(vec![TypeShape::new(cx.in_dtype(0)?, out)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let (x, ind) = (inputs[0]?, inputs[1]?);
        let s = x.shape().to_vec();
        let axis = tryo!(Gather::axis(cx, s.len()));
        let mut out = s[..axis].to_vec();
        out.extend(ind.shape());
        out.extend(&s[axis + 1..]);
        // Repeated indices make a result larger than both inputs: only a
        // bounded one is folded.
        let bound = FOLD_LIMIT.max(x.numel());
        if !host_fits(&out, bound) {
            return None;
        }
        let idx = tryo!(Gather::indices(cx, ind, s[axis]));
        let y = tryo!(take_all_host(x, &Gather::take_index(&s, axis, &idx), 0.0));
        Some(y.reshape(&out).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let s = opcx.in_shape(0)?;
        let axis = Gather::axis(&opcx, s.len())?;
        let Some(ind) = opcx.const_input(1) else {
            // Indices known only at run time: the device's table lookup.
            return lower_dynamic(cx, &opcx, axis);
        };
        let idx = Gather::indices(&opcx, ind, s[axis])?;
        let out = cx.shape(node.outputs[0])?;
        let x = cx.tensor(opcx.input(0)?)?;
        // A single index or an arithmetic progression is one rearrange;
        // anything else concatenates one view per run of indices.
        let y = lower_take(cx, &x, &Gather::take_index(&s, axis, &idx), 0.0)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

/// Lowers `Gather(data, indices, axis)` with run-time indices: data is viewed
/// as a [V, rest] table (after moving `axis` first when it is not), every
/// index picks a row, and the rows are put back in ONNX's output order.
fn lower_dynamic(cx: &mut LowerCx, opcx: &OpCx, axis: usize) -> Result<()> {
    let node = opcx.node;
    let (vd, vi) = (opcx.input(0)?, opcx.input(1)?);
    let s = opcx.in_shape(0)?;
    let out = cx.shape(node.outputs[0])?;
    let before = opcx.numel(&s[..axis], "the dimensions before the axis")?;
    let after = opcx.numel(&s[axis + 1..], "the dimensions after the axis")?;
    let rows = opcx.dim_mul(before, after, "a table row")?;
    let v = s[axis];
    let data = cx.tensor(vd)?;
    // [before, V, after] -> [V, before * after]
    let table = if before == 1 {
        cx.reshape(&data, &[v, after])?
    } else {
        let d3 = cx.reshape(&data, &[before, v, after])?;
        let t = cx.transpose(&d3, &[1, 0, 2])?;
        cx.reshape(&t, &[v, rows])?
    };
    let idx = cx.tensor_as(vi, DeviceType::I32)?;
    let n = idx.numel();
    let idx = cx.reshape(&idx, &[n])?;
    let rows = cx.gather_rows(&table, &idx)?;
    // [n, before * after] -> [before, n, after]
    let y = if before == 1 {
        rows
    } else {
        let r3 = cx.reshape(&rows, &[n, before, after])?;
        cx.transpose(&r3, &[1, 0, 2])?
    };
    let y = cx.reshape(&y, &out)?;
    cx.set(node.outputs[0], y);
    Ok(())
}

pub fn register(r: &mut Registry) {
    r.insert("Gather", Box::new(Gather));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Dim, Graph, Value};
    use crate::ops::lookup;
    use crate::ops::testing::*;

    #[test]
    fn gather_with_constant_indices() {
        let x = arange(&[3, 4]);
        let y = one(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[2, 2], &[0, -1, 3, 3]))],
            &[("axis", Attr::Int(1))],
        );
        assert_eq!(y.shape(), &[3, 2, 2]);
        assert_eq!(&y.to_i64_vec()[..4], &[0, 3, 3, 3]);
        let y = one(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[], &[-2]))],
            &[],
        );
        assert_eq!(
            (y.shape(), y.to_i64_vec()),
            (&[4usize][..], vec![4, 5, 6, 7])
        );
        assert!(fold(
            "Gather",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[3]))],
            1,
            &[]
        )
        .is_err());
        // Shape -> Gather, as shape-computing subgraphs do.
        let y = one(
            "Gather",
            13,
            vec![In::C(i64s(&[4], &[8, 3, 32, 32])), In::C(i64s(&[], &[0]))],
            &[],
        );
        assert_eq!(
            (y.dtype, y.shape(), y.to_i64_vec()),
            (ElemType::I64, &[][..], vec![8])
        );
    }

    #[test]
    fn gather_with_dynamic_indices_is_typed_but_not_folded() {
        let mut gr = Graph::default();
        let x = gr.value_named("x");
        gr.set_constant(x, arange(&[3, 4]));
        let i = gr.add_value(Value {
            name: "i".into(),
            dtype: Some(ElemType::I64),
            shape: Some(vec![Dim::Fixed(5)]),
            constant: None,
        });
        let o = gr.value_named("o");
        let node = Node {
            name: "g".into(),
            op_type: "Gather".into(),
            domain: String::new(),
            inputs: vec![Some(x), Some(i)],
            outputs: vec![o],
            attrs: Default::default(),
        };
        let cx = OpCx {
            graph: &gr,
            node: &node,
            opset: 13,
        };
        let op = lookup(&node, 13).unwrap();
        assert_eq!(
            op.infer(&cx).unwrap(),
            vec![TypeShape::new(ElemType::F32, vec![5, 4])]
        );
        assert!(op.eval(&cx, &[gr.constant(x), None]).is_none());
    }
}
