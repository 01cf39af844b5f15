//! Element-wise fusion. Element-wise nodes are not emitted one by one: their
//! results stay *lazy* (an expression over device tensors) and are folded
//! into the expression of the element-wise node that consumes them, as long
//! as that node is their only user on the same IPU. One fused map then
//! replaces a chain of them, as PopLibs' expression fusion does. A cheap
//! one (one addition, subtraction or multiplication of operands: a bias
//! added to a product) that several element-wise nodes read, and nothing
//! else, is folded into each of them, computed again in each, instead of
//! stored and read back (the exact GELU reads its input twice). Anything
//! else materialises them.

use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::ir::{Graph, ValueId};
use crate::ops::registry;

use super::{DevTensor, LowerCx, Slot};

/// A value not yet computed: `expr` over `inputs`, on `ipu`.
#[derive(Debug, Clone)]
pub(super) struct LazyMap {
    expr: Expr,
    inputs: Vec<DevTensor>,
    shape: Vec<usize>,
    dtype: DeviceType,
    pub(super) ipu: u32,
    name: String,
    /// Reads of it not yet lowered (its uses), for one folded into several
    /// readers.
    readers_left: usize,
}

/// By value: whether every node reading it is element-wise with a result
/// of its shape (no broadcast would make a copy of it compute more), in the
/// program segment of the node that makes it (a copy computed after a
/// segment's state updates would read updated operands), and their chains
/// of element-wise nodes (each result read once, by the next) all end in
/// the same node: the readers then fold into one expression, so the value
/// is computed twice in one map and never kept for later (a training step's
/// forward activation, read again by its backward pass, is stored once
/// instead). No graph output or state update is such a value
/// (`LowerCx::only_elementwise_readers`).
pub(super) fn only_elementwise_readers(graph: &Graph) -> Vec<bool> {
    let nv = graph.values.len();
    let segment = |n: &crate::ir::Node| n.attrs.contains_key(crate::train::SEGMENT_ATTR);
    let fuses = |n: &crate::ir::Node| {
        registry()
            .get(n.op_type.as_str())
            .is_some_and(|op| op.fuses_operands())
            && (n.domain.is_empty() || n.domain == "ai.onnx")
            && n.outputs.len() == 1
            && graph.shape_of(n.outputs[0]).is_some()
    };
    let uses = graph.use_counts();
    let mut made_by = vec![None; nv];
    let mut read_by: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for (i, n) in graph.nodes.iter().enumerate() {
        for &o in &n.outputs {
            made_by[o] = Some(i);
        }
        for &v in n.inputs.iter().flatten() {
            read_by[v].push(i);
        }
    }
    // Where a node's chain ends: its result's one reader, element-wise of
    // the same shape, and so on.
    let chain_end = |mut i: usize| {
        for _ in 0..graph.nodes.len() {
            let o = graph.nodes[i].outputs[0];
            let next = match read_by[o].as_slice() {
                [r] if uses[o] == 1 => *r,
                _ => break,
            };
            let nn = &graph.nodes[next];
            if !fuses(nn) || graph.shape_of(nn.outputs[0]) != graph.shape_of(o) {
                break;
            }
            i = next;
        }
        i
    };
    let mut ok = vec![false; nv];
    for v in 0..nv {
        let readers = &read_by[v];
        let Some(maker) = made_by[v] else { continue };
        if readers.len() < 2
            || !readers.iter().all(|&r| {
                let n = &graph.nodes[r];
                fuses(n)
                    && graph.shape_of(n.outputs[0]) == graph.shape_of(v)
                    && segment(n) == segment(&graph.nodes[maker])
            })
        {
            continue;
        }
        let end = chain_end(readers[0]);
        ok[v] = readers.iter().all(|&r| chain_end(r) == end);
    }
    for &o in &graph.outputs {
        ok[o] = false;
    }
    for st in &graph.state {
        if let Some(u) = st.update {
            ok[u] = false;
        }
    }
    ok
}

/// Cheap enough to compute again in each reader: one addition, subtraction
/// or multiplication of operands and constants, whose stored value equals
/// the computed one (float32, or float16 rounded by the operation itself).
fn cheap(l: &LazyMap) -> bool {
    let leaf = |e: &Expr| matches!(e.op, ExprOp::Input | ExprOp::ConstF) && e.args.is_empty();
    matches!(l.expr.op, ExprOp::Add | ExprOp::Sub | ExprOp::Mul)
        && l.expr.args.iter().all(leaf)
        && (l.dtype == DeviceType::F32 || (l.dtype == DeviceType::F16 && l.expr.half))
}

/// `expr` over `inputs` with each device tensor once (a value folded into
/// several places of one expression brings its operands each time).
pub(super) fn distinct_inputs(mut expr: Expr, inputs: Vec<DevTensor>) -> (Expr, Vec<DevTensor>) {
    let mut kept: Vec<DevTensor> = Vec::with_capacity(inputs.len());
    let mut to = Vec::with_capacity(inputs.len());
    for t in inputs {
        match kept.iter().position(|k| k.id == t.id) {
            Some(i) => to.push(i as u32),
            None => {
                to.push(kept.len() as u32);
                kept.push(t);
            }
        }
    }
    if kept.len() < to.len() {
        expr.remap_inputs(&|i| to[i as usize]);
    }
    (expr, kept)
}

impl LowerCx<'_> {
    /// Records `v` as an element-wise expression over `inputs`, to be fused
    /// into its consumer or materialised when needed.
    pub fn set_lazy(
        &mut self,
        v: ValueId,
        expr: Expr,
        inputs: Vec<DevTensor>,
        shape: Vec<usize>,
        dtype: DeviceType,
    ) {
        let name = self.name();
        let readers_left = self.uses[v];
        self.slots.insert(
            v,
            Slot::Lazy(LazyMap {
                expr,
                inputs,
                shape,
                dtype,
                ipu: self.current_ipu,
                name,
                readers_left,
            }),
        );
    }

    /// True when `v` is lazy and can be fused into an expression on this
    /// node's IPU: nothing else reads it.
    pub(super) fn fusable(&self, v: ValueId) -> bool {
        matches!(self.slots.get(&v), Some(Slot::Lazy(l)) if self.uses[v] == 1 && l.ipu == self.current_ipu)
    }

    /// The name of the node whose expression `v` is, when `v` is fusable.
    pub(super) fn fusable_name(&self, v: ValueId) -> Option<String> {
        match self.slots.get(&v) {
            Some(Slot::Lazy(l)) if self.fusable(v) => Some(l.name.clone()),
            _ => None,
        }
    }

    /// The value as a device tensor where it was produced: a lazy value is
    /// computed now, once.
    pub(super) fn materialize(&mut self, v: ValueId) -> Result<DevTensor> {
        match self.slots.get(&v) {
            Some(Slot::Tensor(t)) => Ok(t.clone()),
            Some(Slot::Lazy(l)) => {
                let l = l.clone();
                let (expr, inputs) = distinct_inputs(l.expr, l.inputs);
                let ins: Vec<_> = inputs.iter().map(|t| t.id).collect();
                // Computed while another node lowers: it still belongs to
                // the node that produced it.
                self.backend.begin_node(&l.name);
                let id = self
                    .backend
                    .map(&expr.flatten(), &ins, l.dtype, &l.shape, l.ipu, &l.name);
                let current = self.node().map_or("", |n| n.name.as_str());
                self.backend.begin_node(current);
                let id = id?;
                let t = DevTensor {
                    id,
                    shape: l.shape,
                    dtype: l.dtype,
                    ipu: l.ipu,
                };
                self.slots.insert(v, Slot::Tensor(t.clone()));
                Ok(t)
            }
            None => Err(Error::Internal(format!(
                "value '{}' is used before it is lowered",
                self.graph.value(v).name
            ))),
        }
    }

    /// The value as an operand of an element-wise expression under
    /// construction: the producer's expression itself when it can be fused,
    /// else a reference to a device tensor appended to `inputs`. `want`
    /// converts the result (an exact cast instruction).
    pub fn operand(
        &mut self,
        v: ValueId,
        inputs: &mut Vec<DevTensor>,
        want: Option<DeviceType>,
    ) -> Result<Expr> {
        let (mut e, dt) = self.operand_raw(v, inputs)?;
        if let Some(w) = want {
            if w != dt {
                e = Expr::cast(e, w);
            }
        }
        Ok(e)
    }

    fn operand_raw(
        &mut self,
        v: ValueId,
        inputs: &mut Vec<DevTensor>,
    ) -> Result<(Expr, DeviceType)> {
        if let Some(c) = self.graph.constant(v) {
            if c.numel() == 1 {
                // Scalars become immediates.
                let dt = self.device_type(c.dtype);
                let x = c.to_f64_vec()[0];
                let e = match dt {
                    DeviceType::F32
                    | DeviceType::F16
                    | DeviceType::F8E4M3FNUZ
                    | DeviceType::F8E5M2FNUZ => Expr::constf(x, dt == DeviceType::F16),
                    DeviceType::I32 => {
                        let i = c.to_i64_vec()[0];
                        if i32::try_from(i).is_err() {
                            return Err(Error::InvalidArgument(format!(
                                "constant '{}' holds {i}, outside the int32 range the IPU computes integers in",
                                self.graph.value(v).name
                            )));
                        }
                        Expr::consti(i)
                    }
                    DeviceType::Bool => Expr::un(ExprOp::CastBool, Expr::consti(x as i64), false),
                };
                return Ok((e, dt));
            }
        }
        if self.only_elementwise_readers[v] && self.uses[v] > 1 {
            if let Some(Slot::Lazy(l)) = self.slots.get_mut(&v) {
                if l.ipu == self.current_ipu && cheap(l) {
                    // Computed again here; the last reader takes it away.
                    debug_assert!(
                        l.readers_left > 0,
                        "more reads of a lazy value than its uses"
                    );
                    l.readers_left = l.readers_left.saturating_sub(1);
                    let base = inputs.len() as u32;
                    let mut e = l.expr.clone();
                    e.remap_inputs(&|i| i + base);
                    inputs.extend(l.inputs.iter().cloned());
                    let dt = l.dtype;
                    if l.readers_left == 0 {
                        self.slots.remove(&v);
                    }
                    return Ok((e, dt));
                }
            }
        }
        if self.fusable(v) {
            if let Some(Slot::Lazy(l)) = self.slots.remove(&v) {
                // The value is consumed here: it left its slot, so nobody
                // materialises it.
                let base = inputs.len() as u32;
                let mut e = l.expr;
                e.remap_inputs(&|i| i + base);
                inputs.extend(l.inputs);
                return Ok((e, l.dtype));
            }
        }
        let t = self.tensor(v)?;
        let dt = t.dtype;
        inputs.push(t);
        Ok((Expr::input(inputs.len() - 1), dt))
    }

    /// An operand from an already-lowered device tensor.
    pub fn operand_tensor(&mut self, t: DevTensor, inputs: &mut Vec<DevTensor>) -> Expr {
        inputs.push(t);
        Expr::input(inputs.len() - 1)
    }
}
