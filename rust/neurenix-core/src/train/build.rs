//! Adding ONNX nodes to a model's graph, in the forms of the model's
//! operator set (ReduceSum takes its axes as an attribute before opset 13
//! and as an input from it, ...). The gradient rules and the optimizers
//! build on it; the nodes are ordinary ONNX nodes, lowered like any other.

use std::collections::BTreeMap;

use ndarray::{ArrayD, IxDyn};

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Attr, Dim, Model, Node, ValueId};
use crate::lower::precision::MASTER_ATTR;
use crate::tensor::HostTensor;

pub struct Builder<'a> {
    pub m: &'a mut Model,
    /// Prefix of the names of everything added ("grad/", "optimizer/").
    prefix: String,
    /// Nodes added from now on compute in float32 whatever the precision
    /// (the optimizer's updates of master weights).
    pub master: bool,
    /// Nodes added from now on belong to the program's second segment (the
    /// update, after the replicas' gradients are all-reduced).
    pub second_segment: bool,
}

impl<'a> Builder<'a> {
    pub fn new(m: &'a mut Model, prefix: &str) -> Builder<'a> {
        Builder {
            m,
            prefix: prefix.to_string(),
            master: false,
            second_segment: false,
        }
    }

    pub fn opset(&self) -> i64 {
        self.m.opset
    }

    /// The shape of a value whose shape inference has run (or that was made
    /// with one here).
    pub fn shape(&self, v: ValueId) -> Result<Vec<usize>> {
        self.m.graph.shape_of(v).ok_or_else(|| {
            Error::Internal(format!(
                "value '{}' has no known shape",
                self.m.graph.value(v).name
            ))
        })
    }

    pub fn dtype(&self, v: ValueId) -> Result<ElemType> {
        self.m.graph.value(v).dtype.ok_or_else(|| {
            Error::Internal(format!(
                "value '{}' has no known type",
                self.m.graph.value(v).name
            ))
        })
    }

    /// A fresh value named after `base`, typed and shaped.
    pub fn value(&mut self, base: &str, dtype: ElemType, shape: &[usize]) -> ValueId {
        let v = self.m.graph.fresh_value(&format!("{}{base}", self.prefix));
        let val = self.m.graph.value_mut(v);
        val.dtype = Some(dtype);
        val.shape = Some(shape.iter().map(|&d| Dim::Fixed(d)).collect());
        v
    }

    /// Adds a node of `op` with one output (of `dtype` and `shape`, which
    /// shape inference checks later).
    pub fn node(
        &mut self,
        op: &str,
        inputs: &[ValueId],
        attrs: Vec<(&str, Attr)>,
        dtype: ElemType,
        shape: &[usize],
    ) -> ValueId {
        let out = self.value(&op.to_lowercase(), dtype, shape);
        let mut a: BTreeMap<String, Attr> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        if self.master {
            a.insert(MASTER_ATTR.to_string(), Attr::Int(1));
        }
        if self.second_segment {
            a.insert(super::SEGMENT_ATTR.to_string(), Attr::Int(1));
        }
        let name = self.m.graph.value(out).name.clone();
        self.m.graph.nodes.push(Node {
            name,
            op_type: op.to_string(),
            domain: String::new(),
            inputs: inputs.iter().map(|&v| Some(v)).collect(),
            outputs: vec![out],
            attrs: a,
        });
        out
    }

    /// A float constant of type `dtype` (all `shape` filled with `x`).
    pub fn constant(&mut self, x: f64, dtype: ElemType, shape: &[usize]) -> ValueId {
        let v = self.value("const", dtype, shape);
        self.m.graph.set_constant(
            v,
            HostTensor::float(dtype, ArrayD::from_elem(IxDyn(shape), x)),
        );
        v
    }

    pub fn ints(&mut self, xs: &[i64]) -> ValueId {
        let v = self.value("ints", ElemType::I64, &[xs.len()]);
        self.m
            .graph
            .set_constant(v, HostTensor::from_i64s(&[xs.len()], xs.to_vec()));
        v
    }

    fn like(&self, v: ValueId) -> Result<(ElemType, Vec<usize>)> {
        Ok((self.dtype(v)?, self.shape(v)?))
    }

    /// Element-wise binary operation, numpy broadcasting.
    pub fn binary(&mut self, op: &str, a: ValueId, b: ValueId) -> Result<ValueId> {
        let (t, sa) = self.like(a)?;
        let sb = self.shape(b)?;
        let shape = crate::ops::broadcast_shapes(&[sa.clone(), sb.clone()]).ok_or_else(|| {
            Error::Internal(format!("{op} of {sa:?} and {sb:?} does not broadcast"))
        })?;
        Ok(self.node(op, &[a, b], vec![], t, &shape))
    }
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.binary("Add", a, b)
    }
    pub fn sub(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.binary("Sub", a, b)
    }
    pub fn mul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.binary("Mul", a, b)
    }
    pub fn div(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.binary("Div", a, b)
    }
    /// `a * x` for a number `x`.
    pub fn scale(&mut self, a: ValueId, x: f64) -> Result<ValueId> {
        if x == 1.0 {
            return Ok(a);
        }
        let t = self.dtype(a)?;
        let c = self.constant(x, t, &[]);
        self.mul(a, c)
    }
    pub fn unary(&mut self, op: &str, a: ValueId) -> Result<ValueId> {
        let (t, s) = self.like(a)?;
        Ok(self.node(op, &[a], vec![], t, &s))
    }

    pub fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if s == shape {
            return Ok(x);
        }
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let sv = self.ints(&dims);
        Ok(self.node("Reshape", &[x, sv], vec![], t, shape))
    }

    pub fn transpose(&mut self, x: ValueId, perm: &[usize]) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        let shape: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        Ok(self.node("Transpose", &[x], vec![("perm", Attr::Ints(p))], t, &shape))
    }

    /// Swaps the last two axes.
    pub fn swap_last(&mut self, x: ValueId) -> Result<ValueId> {
        let r = self.shape(x)?.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(x, &perm)
    }

    pub fn matmul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        let (t, sa) = self.like(a)?;
        let sb = self.shape(b)?;
        let (ra, rb) = (sa.len(), sb.len());
        let batch = crate::ops::broadcast_shapes(&[sa[..ra - 2].to_vec(), sb[..rb - 2].to_vec()])
            .ok_or_else(|| Error::Internal(format!("MatMul of {sa:?} and {sb:?}")))?;
        let mut shape = batch;
        shape.extend([sa[ra - 2], sb[rb - 1]]);
        Ok(self.node("MatMul", &[a, b], vec![], t, &shape))
    }

    /// Sums `x` over `axes`, keeping them as ones when `keepdims`.
    pub fn reduce(
        &mut self,
        op: &str,
        x: ValueId,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if axes.is_empty() {
            return Ok(x);
        }
        let shape: Vec<usize> = s
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| {
                if axes.contains(&i) {
                    keepdims.then_some(1)
                } else {
                    Some(d)
                }
            })
            .collect();
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let kd = ("keepdims", Attr::Int(keepdims as i64));
        // Axes as an input: ReduceSum from opset 13, the others from 18.
        let axes_input = if op == "ReduceSum" {
            self.opset() >= 13
        } else {
            self.opset() >= 18
        };
        Ok(if axes_input {
            let av = self.ints(&ax);
            self.node(op, &[x, av], vec![kd], t, &shape)
        } else {
            self.node(op, &[x], vec![kd, ("axes", Attr::Ints(ax))], t, &shape)
        })
    }

    /// `g` (of a broadcast result's shape) summed down to `shape`, as the
    /// gradient of an operand numpy broadcast to it.
    pub fn sum_to(&mut self, g: ValueId, shape: &[usize]) -> Result<ValueId> {
        let gs = self.shape(g)?;
        if gs == shape {
            return Ok(g);
        }
        let lead = gs.len() - shape.len();
        let axes: Vec<usize> = (0..gs.len())
            .filter(|&i| i < lead || (shape[i - lead] == 1 && gs[i] != 1))
            .collect();
        let r = self.reduce("ReduceSum", g, &axes, true)?;
        self.reshape(r, shape)
    }

    /// `x` broadcast to `shape`.
    pub fn expand(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if s == shape {
            return Ok(x);
        }
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let sv = self.ints(&dims);
        Ok(self.node("Expand", &[x, sv], vec![], t, shape))
    }

    pub fn cast(&mut self, x: ValueId, to: ElemType) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if t == to {
            return Ok(x);
        }
        Ok(self.node(
            "Cast",
            &[x],
            vec![("to", Attr::Int(to.onnx_code() as i64))],
            to,
            &s,
        ))
    }

    /// Slices `x` (ONNX Slice semantics: negative steps run backwards).
    pub fn slice(
        &mut self,
        x: ValueId,
        starts: &[i64],
        ends: &[i64],
        axes: &[usize],
        steps: &[i64],
    ) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        let mut shape = s.clone();
        for k in 0..axes.len() {
            let d = s[axes[k]] as i64;
            let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
            let norm = |v: i64| if v < 0 { v + d } else { v };
            let n = if steps[k] > 0 {
                let (b, e) = (clamp(norm(starts[k]), 0, d), clamp(norm(ends[k]), 0, d));
                ((e - b).max(0) + steps[k] - 1) / steps[k]
            } else {
                let (b, e) = (
                    clamp(norm(starts[k]), -1, d - 1),
                    clamp(norm(ends[k]), -1, d - 1),
                );
                ((b - e).max(0) + (-steps[k]) - 1) / (-steps[k])
            };
            shape[axes[k]] = n as usize;
        }
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        if self.opset() >= 10 {
            let sv = self.ints(starts);
            let ev = self.ints(ends);
            let av = self.ints(&ax);
            let st = self.ints(steps);
            Ok(self.node("Slice", &[x, sv, ev, av, st], vec![], t, &shape))
        } else {
            if steps.iter().any(|&v| v != 1) {
                return Err(Error::Internal("Slice with steps needs opset 10".into()));
            }
            Ok(self.node(
                "Slice",
                &[x],
                vec![
                    ("starts", Attr::Ints(starts.to_vec())),
                    ("ends", Attr::Ints(ends.to_vec())),
                    ("axes", Attr::Ints(ax)),
                ],
                t,
                &shape,
            ))
        }
    }

    /// Pads (or, with negative pads, crops) `x` with zeros: `pads` as ONNX
    /// orders them (all begins, then all ends).
    pub fn pad(&mut self, x: ValueId, pads: &[i64]) -> Result<ValueId> {
        self.pad_with(x, pads, 0.0)
    }

    /// [`Builder::pad`] with `value` in the new elements.
    pub fn pad_with(&mut self, x: ValueId, pads: &[i64], value: f64) -> Result<ValueId> {
        let (t, s) = self.like(x)?;
        if pads.iter().all(|&p| p == 0) {
            return Ok(x);
        }
        let r = s.len();
        let shape: Vec<usize> = (0..r)
            .map(|i| (s[i] as i64 + pads[i] + pads[r + i]) as usize)
            .collect();
        if self.opset() >= 11 {
            let pv = self.ints(pads);
            if value == 0.0 {
                Ok(self.node("Pad", &[x, pv], vec![], t, &shape))
            } else {
                let cv = self.constant(value, t, &[]);
                Ok(self.node("Pad", &[x, pv, cv], vec![], t, &shape))
            }
        } else {
            Ok(self.node(
                "Pad",
                &[x],
                vec![
                    ("pads", Attr::Ints(pads.to_vec())),
                    ("value", Attr::Float(value as f32)),
                ],
                t,
                &shape,
            ))
        }
    }

    /// Concatenates along `axis`.
    pub fn concat(&mut self, xs: &[ValueId], axis: usize) -> Result<ValueId> {
        if xs.len() == 1 {
            return Ok(xs[0]);
        }
        let (t, mut shape) = self.like(xs[0])?;
        shape[axis] = 0;
        for &x in xs {
            shape[axis] += self.shape(x)?[axis];
        }
        Ok(self.node(
            "Concat",
            xs,
            vec![("axis", Attr::Int(axis as i64))],
            t,
            &shape,
        ))
    }

    /// A 2-D convolution (NCHW, OIHW), no bias.
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &mut self,
        x: ValueId,
        w: ValueId,
        strides: [usize; 2],
        dilations: [usize; 2],
        pads: [usize; 4],
        groups: usize,
    ) -> Result<ValueId> {
        let (t, xs) = self.like(x)?;
        let ws = self.shape(w)?;
        let out = |i: usize| {
            let eff = (ws[2 + i] - 1) * dilations[i] + 1;
            (xs[2 + i] + pads[i] + pads[2 + i] - eff) / strides[i] + 1
        };
        let shape = vec![xs[0], ws[0], out(0), out(1)];
        let to = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
        Ok(self.node(
            "Conv",
            &[x, w],
            vec![
                ("strides", to(&strides)),
                ("dilations", to(&dilations)),
                ("pads", to(&pads)),
                ("group", Attr::Int(groups as i64)),
                ("kernel_shape", to(&ws[2..])),
            ],
            t,
            &shape,
        ))
    }
}
