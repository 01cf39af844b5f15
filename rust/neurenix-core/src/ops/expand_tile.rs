//! Expand and Tile: elements repeated, by numpy broadcasting or whole
//! copies. On the device each is one strided view with zero strides.

use crate::error::{Error, Result};
use crate::ir::Node;
use crate::lower::{row_major_strides, LowerCx};
use crate::tensor::HostTensor;

use super::indexing::{
    broadcast_host, empty_like, fill_tensor, take_all_host, view, AxisIndex, View, FOLD_LIMIT,
};
use super::{broadcast_shapes, checked_numel, host_fits, OpCx, Operator, Registry, TypeShape};

/// Input 0 of `node`, which inference has checked is there.
fn input0(node: &Node) -> Result<usize> {
    node.input(0)
        .ok_or_else(|| Error::Internal(format!("node '{}' has no input 0", node.name)))
}

struct Expand;

impl Expand {
    fn out_shape(cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let spec = cx.const_ints(1, "shape")?;
        let spec = cx.dims(&spec, "shape")?;
        let out = broadcast_shapes(&[input.to_vec(), spec.clone()]).ok_or_else(|| {
            cx.err(format!(
                "input {input:?} does not broadcast with shape {spec:?}"
            ))
        })?;
        cx.numel(&out, "the output shape")?;
        Ok(out)
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
        if !host_fits(&shape, FOLD_LIMIT) {
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
        let x = cx.tensor(input0(node)?)?;
        let y = if checked_numel(&shape) == Some(0) {
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
    /// Every dimension times its repeat count.
    fn out_shape(cx: &OpCx, shape: &[usize], repeats: &[usize]) -> Result<Vec<usize>> {
        let out = shape
            .iter()
            .zip(repeats)
            .enumerate()
            .map(|(i, (&d, &k))| cx.dim_mul(d, k, format_args!("dimension {i} x repeats")))
            .collect::<Result<Vec<_>>>()?;
        cx.numel(&out, "the output shape")?;
        Ok(out)
    }

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
            Tile::out_shape(cx, &s, &r)?,
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let r = tryo!(Tile::repeats(cx, x.shape().len()));
        let out = tryo!(Tile::out_shape(cx, x.shape(), &r));
        if !host_fits(&out, FOLD_LIMIT) {
            return None;
        }
        if checked_numel(&out) == Some(0) {
            return Some(empty_like(x, &out).map(|y| vec![y]));
        }
        // Each axis is its positions once per repeat: the result is not
        // empty, so no repeat count exceeds its (bounded) element count.
        let idx: Vec<AxisIndex> = x
            .shape()
            .iter()
            .zip(&r)
            .map(|(&d, &k)| {
                let mut a = AxisIndex::default();
                for _ in 0..k {
                    a.push_seq(0, 1, d);
                }
                a
            })
            .collect();
        Some(take_all_host(x, &idx, 0.0).map(|y| vec![y]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let x = cx.tensor(input0(node)?)?;
        let out = cx.shape(node.outputs[0])?;
        let opcx = OpCx::of(cx, node);
        let r = Tile::repeats(&opcx, x.shape.len())?;
        if checked_numel(&out) == Some(0) {
            let y = fill_tensor(cx, x.dtype, &out, 0.0)?;
            cx.set(node.outputs[0], y);
            return Ok(());
        }
        // One view: every repeated axis d becomes (repeat, d) with a zero
        // stride on the repeat, then a free reshape merges the pairs.
        let st = row_major_strides(&x.shape)?;
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
