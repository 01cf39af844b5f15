//! Element-wise fusion. Element-wise nodes are not emitted one by one: their
//! results stay *lazy* (an expression over device tensors) and are folded
//! into the expression of the element-wise node that consumes them, as long
//! as that node is their only user on the same IPU. One fused map then
//! replaces a chain of them, as PopLibs' expression fusion does. Anything
//! else materialises them.

use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::ir::ValueId;

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
        self.slots.insert(
            v,
            Slot::Lazy(LazyMap {
                expr,
                inputs,
                shape,
                dtype,
                ipu: self.current_ipu,
                name,
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
                let ins: Vec<_> = l.inputs.iter().map(|t| t.id).collect();
                // Computed while another node lowers: it still belongs to
                // the node that produced it.
                self.backend.begin_node(&l.name);
                let id =
                    self.backend
                        .map(&l.expr.flatten(), &ins, l.dtype, &l.shape, l.ipu, &l.name);
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
