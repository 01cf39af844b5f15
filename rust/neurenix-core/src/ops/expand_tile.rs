//! Expand and Tile: elements repeated, by numpy broadcasting or whole
//! copies. On the device each is one strided view with zero strides.

use crate::error::Result;
use crate::ir::Node;
use crate::lower::{row_major_strides, LowerCx};
use crate::tensor::HostTensor;

use super::indexing::{
    broadcast_host, fill_tensor, take_all_host, view, AxisIndex, View, FOLD_LIMIT,
};
use super::{broadcast_shapes, numel, OpCx, Operator, Registry, TypeShape};

struct Expand;

impl Expand {
    fn out_shape(cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let spec = cx.const_ints(1, "shape")?;
        let spec = cx.dims(&spec, "shape")?;
        broadcast_shapes(&[input.to_vec(), spec.clone()]).ok_or_else(|| {
            cx.err(format!(
                "input {input:?} does not broadcast with shape {spec:?}"
            ))
        })
    }
}

impl Operator for Expand {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            Expand::out_shape(cx, &cx.in_shape(0)?)?,
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let shape = tryo!(Expand::out_shape(cx, x.shape()));
        if numel(&shape) > FOLD_LIMIT {
            return None;
        }
        Some(
            broadcast_host(x, &shape)
                .map(|t| vec![t])
                .ok_or_else(|| cx.err("broadcast failed")),
        )
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let shape = cx.shape(node.outputs[0])?;
        let x = cx.tensor(node.input(0).unwrap())?;
        let y = if numel(&shape) == 0 {
            fill_tensor(cx, x.dtype, &shape, 0.0)?
        } else {
            cx.expand(&x, &shape)?
        };
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

struct Tile;

impl Tile {
    fn repeats(cx: &OpCx, rank: usize) -> Result<Vec<usize>> {
        let r = cx.const_ints(1, "repeats")?;
        if r.len() != rank {
            return Err(cx.err(format!(
                "repeats {r:?} has {} entries for an input of rank {rank}",
                r.len()
            )));
        }
        cx.dims(&r, "repeats")
    }
}

impl Operator for Tile {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let r = Tile::repeats(cx, s.len())?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            s.iter().zip(&r).map(|(a, b)| a * b).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let r = tryo!(Tile::repeats(cx, x.shape().len()));
        let idx: Vec<AxisIndex> = x
            .shape()
            .iter()
            .zip(&r)
            .map(|(&d, &k)| (0..d * k).map(|i| Some(i % d.max(1))).collect())
            .collect();
        if numel(&idx.iter().map(Vec::len).collect::<Vec<_>>()) > FOLD_LIMIT {
            return None;
        }
        Some(Ok(vec![take_all_host(x, &idx, 0.0)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let x = cx.tensor(node.input(0).unwrap())?;
        let out = cx.shape(node.outputs[0])?;
        let opcx = OpCx::of(cx, node);
        let r = Tile::repeats(&opcx, x.shape.len())?;
        if numel(&out) == 0 {
            let y = fill_tensor(cx, x.dtype, &out, 0.0)?;
            cx.set(node.outputs[0], y);
            return Ok(());
        }
        // One view: every repeated axis d becomes (repeat, d) with a zero
        // stride on the repeat, then a free reshape merges the pairs.
        let st = row_major_strides(&x.shape);
        let mut shape = Vec::new();
        let mut strides = Vec::new();
        for a in 0..x.shape.len() {
            if r[a] != 1 {
                shape.push(r[a]);
                strides.push(0);
            }
            shape.push(x.shape[a]);
            strides.push(st[a]);
        }
        let v = View {
            offset: 0,
            shape,
            strides,
        };
        let y = view(cx, &x, &v)?;
        let y = cx.reshape(&y, &out)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Expand", Box::new(Expand));
    r.insert("Tile", Box::new(Tile));
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::*;

    #[test]
    fn expand_and_tile() {
        let x = f32s(&[3, 1], &[1.0, 2.0, 3.0]);
        let y = one(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[3], &[2, 1, 4]))],
            &[],
        );
        assert_eq!(y.shape(), &[2, 3, 4]);
        assert_eq!(&y.to_i64_vec()[..8], &[1, 1, 1, 1, 2, 2, 2, 2]);
        // Bidirectional: the shape may be smaller than the input.
        let y = one(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[1], &[5]))],
            &[],
        );
        assert_eq!(y.shape(), &[3, 5]);
        assert!(fold(
            "Expand",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[2], &[2, 1]))],
            1,
            &[]
        )
        .is_err());

        let t = one(
            "Tile",
            13,
            vec![
                In::C(f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
                In::C(i64s(&[2], &[2, 3])),
            ],
            &[],
        );
        assert_eq!(t.shape(), &[4, 6]);
        assert_eq!(&t.to_i64_vec()[..12], &[1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4]);
        assert_eq!(&t.to_i64_vec()[12..18], &[1, 2, 1, 2, 1, 2]);
        assert!(fold("Tile", 13, vec![In::C(x), In::C(i64s(&[1], &[2]))], 1, &[]).is_err());
    }
}
