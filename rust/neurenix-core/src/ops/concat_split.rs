//! Concat and Split: tensors joined, or cut, along one axis.
//!
//! Split is outer indexing (one run per output, see `indexing`); Concat is
//! the backend's concatenation.

use ndarray::{ArrayD, Axis};

use crate::error::{Error, Result};
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::{Data, HostTensor};

use super::indexing::{fill_tensor, set_take, take_all_host, AxisIndex};
use super::{host_fits, norm_axis, OpCx, Operator, Registry, TypeShape};

/// Host concatenation along `axis` of tensors of one kind.
fn concat_host(ts: &[&HostTensor], axis: usize) -> Result<HostTensor> {
    let bad = |e: ndarray::ShapeError| Error::Internal(format!("host concat: {e}"));
    let ax = Axis(axis);
    let dtype = ts[0].dtype;
    let data = match &ts[0].data {
        Data::Float(_) => {
            let arrs: Vec<ArrayD<f64>> = ts.iter().map(|t| t.as_float()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Float(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
        Data::Int(_) => {
            let arrs: Vec<ArrayD<i64>> = ts.iter().map(|t| t.as_int()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Int(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
        Data::Bool(_) => {
            let arrs: Vec<ArrayD<bool>> = ts.iter().map(|t| t.as_bool()).collect();
            let views: Vec<_> = arrs.iter().map(|a| a.view()).collect();
            Data::Bool(ndarray::concatenate(ax, &views).map_err(bad)?)
        }
    };
    Ok(HostTensor { dtype, data })
}

struct Concat;

impl Concat {
    fn axis(cx: &OpCx, rank: usize) -> Result<usize> {
        let a = match cx.node.attr("axis") {
            Some(_) => cx.node.attr_i("axis", 0)?,
            // Concat-1 defaulted to axis 1; later versions require it.
            None if cx.opset < 4 => 1,
            None => return Err(cx.err("missing 'axis' attribute")),
        };
        if rank == 0 {
            return Err(cx.err("cannot concatenate scalars"));
        }
        norm_axis(a, rank, cx)
    }
}

impl Operator for Concat {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let n = cx.n_inputs();
        if n == 0 {
            return Err(cx.err("needs at least one input"));
        }
        let all: Vec<usize> = (0..n).collect();
        let t = cx.same_dtype(&all)?;
        let s0 = cx.in_shape(0)?;
        let axis = Concat::axis(cx, s0.len())?;
        let mut out = s0.clone();
        out[axis] = 0;
        for i in 0..n {
            let s = cx.in_shape(i)?;
            let ok = s.len() == s0.len()
                && s.iter()
                    .zip(&s0)
                    .enumerate()
                    .all(|(k, (a, b))| k == axis || a == b);
            if !ok {
                return Err(cx.err(format!(
                    "input shapes {s0:?} and {s:?} differ outside axis {axis}"
                )));
            }
            out[axis] = cx.dim_add(
                out[axis],
                s[axis],
                format_args!("the concatenated axis {axis}"),
            )?;
        }
        Ok(vec![TypeShape::new(t, out)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let ts: Vec<&HostTensor> = inputs.iter().copied().collect::<Option<Vec<_>>>()?;
        let axis = tryo!(Concat::axis(cx, ts.first()?.shape().len()));
        // Empty inputs with long axes can make a shape no host array has.
        let out = tryo!(self.infer(cx)).into_iter().next()?.shape;
        if !host_fits(&out, usize::MAX) {
            return None;
        }
        Some(concat_host(&ts, axis).map(|t| vec![t]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let axis = Concat::axis(&opcx, opcx.in_shape(0)?.len())?;
        let ins: Vec<usize> = node.inputs.iter().flatten().copied().collect();
        // Computed operands keep their device type when they agree; constants
        // (and disagreeing operands) take the node's type.
        let mut dev = None;
        let mut same = true;
        for &v in &ins {
            if cx.constant(v).is_none() {
                let t = cx.tensor(v)?;
                match dev {
                    None => dev = Some(t.dtype),
                    Some(d) if d != t.dtype => same = false,
                    _ => {}
                }
            }
        }
        let model_t = opcx.in_dtype(0)?;
        let want = match (dev, same) {
            (Some(d), true) => d,
            _ => cx.device_type(model_t),
        };
        let mut parts = Vec::with_capacity(ins.len());
        for &v in &ins {
            let t = cx.tensor_as(v, want)?;
            if t.numel() > 0 || ins.len() == 1 {
                parts.push(t);
            }
        }
        let out_shape = cx.shape(node.outputs[0])?;
        let y = match parts.len() {
            0 => fill_tensor(cx, want, &out_shape, 0.0)?,
            1 => parts.remove(0),
            _ => cx.concat(&parts, axis)?,
        };
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

struct Split;

impl Split {
    /// (axis, size of each output along it).
    fn sizes(cx: &OpCx, shape: &[usize]) -> Result<(usize, Vec<usize>)> {
        if shape.is_empty() {
            return Err(cx.err("cannot split a scalar"));
        }
        let axis = norm_axis(cx.node.attr_i("axis", 0)?, shape.len(), cx)?;
        let dim = shape[axis];
        let n_out = cx.node.outputs.len();
        let split = if cx.opset >= 13 {
            if cx.has_input(1) {
                Some(cx.const_ints(1, "split")?)
            } else {
                None
            }
        } else {
            cx.node.attr_ints("split")?
        };
        let num_outputs = if cx.opset >= 18 {
            cx.node
                .attr("num_outputs")
                .map(|_| cx.node.attr_i("num_outputs", 0))
        } else {
            None
        };
        if let Some(s) = split {
            if num_outputs.is_some() {
                return Err(cx.err(
                    "takes either the 'split' input or the 'num_outputs' attribute, not both",
                ));
            }
            if s.len() != n_out {
                return Err(cx.err(format!(
                    "split {s:?} has {} entries for {n_out} outputs",
                    s.len()
                )));
            }
            let sizes = cx.dims(&s, "split")?;
            if cx.dim_sum(&sizes, "the sum of split")? != dim {
                return Err(cx.err(format!(
                    "split {s:?} does not add up to dimension {axis} of {shape:?}"
                )));
            }
            return Ok((axis, sizes));
        }
        if let Some(k) = num_outputs {
            let k = k?;
            if k < 1 || usize::try_from(k) != Ok(n_out) {
                return Err(cx.err(format!(
                    "num_outputs is {k} but the node has {n_out} outputs"
                )));
            }
            let k = n_out;
            // Equal chunks of ceil(dim / k); the last one takes the rest.
            let chunk = dim.div_ceil(k);
            let used = chunk.saturating_mul(k - 1);
            if used > dim {
                return Err(cx.err(format!(
                    "dimension {axis} of {shape:?} cannot be split into {k} chunks of {chunk} (the last would be negative)"
                )));
            }
            let mut sizes = vec![chunk; k - 1];
            sizes.push(dim - used);
            return Ok((axis, sizes));
        }
        if n_out == 0 || dim % n_out != 0 {
            return Err(cx.err(format!(
                "dimension {axis} of {shape:?} does not split evenly into {n_out} outputs"
            )));
        }
        Ok((axis, vec![dim / n_out; n_out]))
    }

    /// Per output, its index into the input; `sizes` add up to the axis.
    fn indices(shape: &[usize], axis: usize, sizes: &[usize]) -> Vec<Vec<AxisIndex>> {
        let mut at = 0usize;
        sizes
            .iter()
            .map(|&len| {
                let mut idx: Vec<AxisIndex> =
                    shape.iter().map(|&d| AxisIndex::identity(d)).collect();
                idx[axis] = AxisIndex::seq(at, 1, len);
                at = at.saturating_add(len);
                idx
            })
            .collect()
    }
}

impl Operator for Split {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let shape = cx.in_shape(0)?;
        let t = cx.in_dtype(0)?;
        let (axis, sizes) = Split::sizes(cx, &shape)?;
        Ok(sizes
            .into_iter()
            .map(|n| {
                let mut s = shape.clone();
                s[axis] = n;
                TypeShape::new(t, s)
            })
            .collect())
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let (axis, sizes) = tryo!(Split::sizes(cx, x.shape()));
        Some(
            Split::indices(x.shape(), axis, &sizes)
                .iter()
                .map(|idx| take_all_host(x, idx, 0.0))
                .collect(),
        )
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let shape = opcx.in_shape(0)?;
        let (axis, sizes) = Split::sizes(&opcx, &shape)?;
        for (k, idx) in Split::indices(&shape, axis, &sizes).iter().enumerate() {
            set_take(cx, node, k, idx, 0.0)?;
        }
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Concat", Box::new(Concat));
    r.insert("Split", Box::new(Split));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ElemType;
    use crate::ir::Attr;
    use crate::ops::testing::*;

    #[test]
    fn concat_and_split() {
        let a = arange(&[2, 2]);
        let b = f32s(&[2, 1], &[9.0, 8.0]);
        let y = one(
            "Concat",
            13,
            vec![In::C(a.clone()), In::C(b)],
            &[("axis", Attr::Int(-1))],
        );
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_i64_vec(), vec![0, 1, 9, 2, 3, 8]);
        let s = one(
            "Concat",
            13,
            vec![In::C(i64s(&[2], &[1, 2])), In::C(i64s(&[1], &[-1]))],
            &[("axis", Attr::Int(0))],
        );
        assert_eq!((s.dtype, s.to_i64_vec()), (ElemType::I64, vec![1, 2, -1]));
        assert!(fold(
            "Concat",
            13,
            vec![In::C(a.clone()), In::C(arange(&[3, 1]))],
            1,
            &[("axis", Attr::Int(1))]
        )
        .is_err());

        let x = arange(&[5, 2]);
        let parts = |r: Vec<HostTensor>| r.iter().map(|t| t.shape()[0]).collect::<Vec<_>>();
        let r = fold(
            "Split",
            11,
            vec![In::C(x.clone())],
            2,
            &[("split", ints(&[1, 4]))],
        )
        .unwrap();
        assert_eq!(parts(r.clone()), vec![1, 4]);
        assert_eq!(r[1].to_i64_vec(), (2..10).collect::<Vec<_>>());
        let r = fold(
            "Split",
            13,
            vec![In::C(x.clone()), In::C(i64s(&[3], &[2, 0, 3]))],
            3,
            &[],
        )
        .unwrap();
        assert_eq!(parts(r), vec![2, 0, 3]);
        let r = fold(
            "Split",
            18,
            vec![In::C(x.clone())],
            3,
            &[("num_outputs", Attr::Int(3))],
        )
        .unwrap();
        assert_eq!(parts(r.clone()), vec![2, 2, 1]);
        assert_eq!(r[2].to_i64_vec(), vec![8, 9]);
        let r = fold(
            "Split",
            18,
            vec![In::C(x.clone())],
            2,
            &[("axis", Attr::Int(-1)), ("num_outputs", Attr::Int(2))],
        )
        .unwrap();
        assert_eq!(r[0].to_i64_vec(), vec![0, 2, 4, 6, 8]);
        // Uneven without num_outputs, and chunks that run out.
        assert!(fold("Split", 13, vec![In::C(x.clone())], 2, &[]).is_err());
        assert!(fold(
            "Split",
            18,
            vec![In::C(arange(&[5]))],
            4,
            &[("num_outputs", Attr::Int(4))]
        )
        .is_err());
    }
}
