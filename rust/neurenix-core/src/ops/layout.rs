//! Operators that change how elements are laid out: the reshapes (Reshape,
//! Flatten, Squeeze, Unsqueeze, and Identity and Dropout in inference, which
//! keep the shape), free on the device (same elements, same order), and
//! Transpose, an exchange.

use ndarray::IxDyn;

use crate::dtype::ElemType;
use crate::error::Result;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::{Data, HostTensor};

use super::{checked_numel, norm_axis, OpCx, Operator, Registry, TypeShape};

/// Host transpose with numpy's `perm`.
pub fn host_transpose(t: &HostTensor, perm: &[usize]) -> HostTensor {
    let data = match &t.data {
        Data::Float(a) => Data::Float(
            a.clone()
                .permuted_axes(IxDyn(perm))
                .as_standard_layout()
                .into_owned(),
        ),
        Data::Int(a) => Data::Int(
            a.clone()
                .permuted_axes(IxDyn(perm))
                .as_standard_layout()
                .into_owned(),
        ),
        Data::Bool(a) => Data::Bool(
            a.clone()
                .permuted_axes(IxDyn(perm))
                .as_standard_layout()
                .into_owned(),
        ),
    };
    HostTensor {
        dtype: t.dtype,
        data,
    }
}

/// Output shape of each relabelling op, from its input shape.
trait Relabel: Sync + Send {
    fn out_shape(&self, cx: &OpCx, input: &[usize]) -> Result<Vec<usize>>;
}

struct Alias<R: Relabel>(R);

impl<R: Relabel> Operator for Alias<R> {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = self.0.out_shape(cx, &cx.in_shape(0)?)?;
        let mut out = vec![TypeShape::new(cx.in_dtype(0)?, s.clone())];
        if cx.node.op_type == "Dropout" && cx.node.outputs.len() > 1 {
            out.push(TypeShape::new(ElemType::Bool, s));
        }
        Ok(out)
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let shape = tryo!(self.0.out_shape(cx, x.shape()));
        let mut out = vec![x.reshape(&shape).ok()?];
        if cx.node.op_type == "Dropout" && cx.node.outputs.len() > 1 {
            // The mask is as large as the (existing) input.
            out.push(tryo!(HostTensor::full(ElemType::Bool, &shape, 1.0)));
        }
        Some(Ok(out))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let out = node.outputs[0];
        let shape = cx.shape(out)?;
        let x = cx.tensor(OpCx::of(cx, node).input(0)?)?;
        let y = cx.reshape(&x, &shape)?;
        cx.set(out, y);
        if node.outputs.len() > 1 && cx.is_used(node.outputs[1]) {
            // Dropout's mask in inference: all kept (not made when nothing
            // reads it).
            let m = cx.fill(crate::dtype::DeviceType::Bool, &shape, 1.0)?;
            cx.set(node.outputs[1], m);
        }
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

struct ReshapeShape;
impl Relabel for ReshapeShape {
    fn out_shape(&self, cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let spec = if cx.opset < 5 {
            cx.node
                .attr_ints("shape")?
                .ok_or_else(|| cx.err("missing 'shape' attribute"))?
        } else {
            cx.const_input(1).map(|t| t.to_i64_vec()).ok_or_else(|| {
                cx.unsupported_form("the target shape must be known at compile time")
            })?
        };
        let allow_zero = cx.node.attr_i("allowzero", 0)? != 0;
        let total = cx.numel(input, "the input shape")?;
        let mut out = Vec::with_capacity(spec.len());
        let mut infer = None;
        for (i, &d) in spec.iter().enumerate() {
            match d {
                -1 => {
                    if infer.is_some() {
                        return Err(cx.err("more than one -1 in the target shape"));
                    }
                    infer = Some(i);
                    out.push(1);
                }
                0 if !allow_zero => out.push(*input.get(i).ok_or_else(|| {
                    cx.err(format!("0 at position {i} copies a missing dimension"))
                })?),
                d if d < 0 => return Err(cx.err(format!("invalid dimension {d} in target shape"))),
                d => out.push(cx.to_dim(d, format_args!("dimension {i} of the target shape"))?),
            }
        }
        if let Some(i) = infer {
            // The other entries (the -1 counts as 1 so far).
            let known = cx.numel(&out, "the target shape")?;
            if known == 0 || total % known != 0 {
                return Err(cx.err(format!("cannot reshape {input:?} to {spec:?}")));
            }
            out[i] = total / known;
        }
        if checked_numel(&out) != Some(total) {
            return Err(cx.err(format!(
                "cannot reshape {input:?} ({total} elements) to {spec:?}"
            )));
        }
        Ok(out)
    }
}

struct FlattenShape;
impl Relabel for FlattenShape {
    fn out_shape(&self, cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let r = input.len() as i64;
        let axis = cx.node.attr_i("axis", 1)?;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a > r {
            return Err(cx.err(format!("axis {axis} out of range for rank {r}")));
        }
        let a = usize::try_from(a).unwrap_or(input.len());
        Ok(vec![
            cx.numel(&input[..a], "the dimensions before the axis")?,
            cx.numel(&input[a..], "the dimensions from the axis")?,
        ])
    }
}

struct SameShape;
impl Relabel for SameShape {
    fn out_shape(&self, _cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
}

struct SqueezeShape;
impl Relabel for SqueezeShape {
    fn out_shape(&self, cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let axes = if cx.opset >= 13 {
            cx.ints_input_or_attr(1, "axes")?
        } else {
            cx.node.attr_ints("axes")?
        };
        match axes {
            None => Ok(input.iter().copied().filter(|&d| d != 1).collect()),
            Some(axes) => {
                let axes: Vec<usize> = axes
                    .iter()
                    .map(|&a| norm_axis(a, input.len(), cx))
                    .collect::<Result<Vec<_>>>()?;
                for &a in &axes {
                    if input[a] != 1 {
                        return Err(cx.err(format!("cannot squeeze axis {a} of size {}", input[a])));
                    }
                }
                Ok(input
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect())
            }
        }
    }
}

struct UnsqueezeShape;
impl Relabel for UnsqueezeShape {
    fn out_shape(&self, cx: &OpCx, input: &[usize]) -> Result<Vec<usize>> {
        let axes = if cx.opset >= 13 {
            cx.ints_input_or_attr(1, "axes")?
        } else {
            cx.node.attr_ints("axes")?
        };
        let axes = axes.ok_or_else(|| cx.err("missing axes"))?;
        let rank = input.len() + axes.len();
        let mut norm: Vec<usize> = axes
            .iter()
            .map(|&a| norm_axis(a, rank, cx))
            .collect::<Result<Vec<_>>>()?;
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            return Err(cx.err("repeated axis"));
        }
        // `norm` holds axes.len() distinct positions below rank: the others
        // take the input's dimensions, in order.
        let mut it = input.iter();
        Ok((0..rank)
            .map(|i| {
                if norm.contains(&i) {
                    1
                } else {
                    it.next().copied().unwrap_or(1)
                }
            })
            .collect())
    }
}

struct Transpose;

impl Transpose {
    fn perm(cx: &OpCx, rank: usize) -> Result<Vec<usize>> {
        match cx.node.attr_ints("perm")? {
            None => Ok((0..rank).rev().collect()),
            Some(p) => {
                let p: Vec<usize> = p
                    .iter()
                    .map(|&a| norm_axis(a, rank, cx))
                    .collect::<Result<Vec<_>>>()?;
                let mut sorted = p.clone();
                sorted.sort_unstable();
                if sorted != (0..rank).collect::<Vec<_>>() {
                    return Err(cx.err(format!("perm {p:?} is not a permutation of 0..{rank}")));
                }
                Ok(p)
            }
        }
    }
}

impl Operator for Transpose {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let s = cx.in_shape(0)?;
        let p = Transpose::perm(cx, s.len())?;
        Ok(vec![TypeShape::new(
            cx.in_dtype(0)?,
            p.iter().map(|&i| s[i]).collect(),
        )])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let x = inputs[0]?;
        let p = tryo!(Transpose::perm(cx, x.shape().len()));
        Some(Ok(vec![host_transpose(x, &p)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let opcx = OpCx::of(cx, node);
        let x = cx.tensor(opcx.input(0)?)?;
        let p = Transpose::perm(&opcx, x.shape.len())?;
        let y = cx.transpose(&x, &p)?;
        cx.set(node.outputs[0], y);
        Ok(())
    }
    fn flops(&self, _cx: &OpCx) -> f64 {
        0.0
    }
}

pub fn register(r: &mut Registry) {
    r.insert("Reshape", Box::new(Alias(ReshapeShape)));
    r.insert("Flatten", Box::new(Alias(FlattenShape)));
    r.insert("Identity", Box::new(Alias(SameShape)));
    r.insert("Dropout", Box::new(Alias(SameShape)));
    r.insert("Squeeze", Box::new(Alias(SqueezeShape)));
    r.insert("Unsqueeze", Box::new(Alias(UnsqueezeShape)));
    r.insert("Transpose", Box::new(Transpose));
}
