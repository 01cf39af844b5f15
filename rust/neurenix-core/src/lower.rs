//! Lowering: IR nodes onto a device [`Backend`], node by node in
//! topological order.
//!
//! Element-wise nodes are not emitted one by one: their results stay *lazy*
//! (an expression over device tensors) and are folded into the expression of
//! the element-wise node that consumes them, as long as that node is their
//! only user on the same IPU. One fused map then replaces a chain of them,
//! as PopLibs' expression fusion does. Anything else materialises them.

use std::collections::HashMap;

use crate::backend::{
    Backend, ConvOptions, MatMulOptions, PoolOptions, ReduceFinal, ReduceOp, TensorId,
};
use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::ir::{Graph, Node, NodeId, ValueId};
use crate::tensor::HostTensor;

/// Arithmetic precision of a compile (see DESIGN.md, "Options").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Float32,
    Float16,
    Mixed,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "float32" => Ok(Precision::Float32),
            "float16" => Ok(Precision::Float16),
            "mixed" => Ok(Precision::Mixed),
            _ => Err(Error::InvalidArgument(format!(
                "unknown precision '{s}'; expected 'float32', 'float16' or 'mixed'"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::Float16 => "float16",
            Precision::Mixed => "mixed",
        }
    }
}

/// How an operator's float arithmetic follows the precision policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrecisionClass {
    /// Matmuls, convolutions, activations, element-wise: half in
    /// float16 and mixed precision.
    Compute,
    /// Softmax, normalisations, reductions: float32 in mixed precision.
    Sensitive,
}

#[derive(Debug, Clone)]
pub struct LowerOptions {
    pub precision: Precision,
    pub memory_proportion: f64,
    pub enable_half_partials: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DevTensor {
    pub id: TensorId,
    pub shape: Vec<usize>,
    pub dtype: DeviceType,
    pub ipu: u32,
}

impl DevTensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

#[derive(Debug, Clone)]
struct LazyMap {
    expr: Expr,
    inputs: Vec<DevTensor>,
    shape: Vec<usize>,
    dtype: DeviceType,
    ipu: u32,
    name: String,
}

#[derive(Debug, Clone)]
enum Slot {
    Tensor(DevTensor),
    Lazy(LazyMap),
}

/// One host <-> device binding of the lowered program.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub device_dtype: DeviceType,
}

pub struct LowerCx<'a> {
    pub backend: &'a mut dyn Backend,
    pub graph: &'a Graph,
    pub opset: i64,
    pub opts: &'a LowerOptions,
    node_ipu: &'a [u32],
    current_node: NodeId,
    current_ipu: u32,
    current_float: DeviceType,
    slots: HashMap<ValueId, Slot>,
    copies: HashMap<(ValueId, u32), DevTensor>,
    consts: HashMap<(ValueId, DeviceType, u32), DevTensor>,
    derived: HashMap<(ValueId, &'static str, DeviceType, u32), DevTensor>,
    uses: Vec<usize>,
}

impl<'a> LowerCx<'a> {
    pub fn new(
        backend: &'a mut dyn Backend,
        graph: &'a Graph,
        opset: i64,
        opts: &'a LowerOptions,
        node_ipu: &'a [u32],
    ) -> LowerCx<'a> {
        let uses = graph.use_counts();
        LowerCx {
            backend,
            graph,
            opset,
            opts,
            node_ipu,
            current_node: 0,
            current_ipu: 0,
            current_float: DeviceType::F32,
            slots: HashMap::new(),
            copies: HashMap::new(),
            consts: HashMap::new(),
            derived: HashMap::new(),
            uses,
        }
    }

    /// Float type of the model's inputs on the device.
    pub fn input_float(&self) -> DeviceType {
        match self.opts.precision {
            Precision::Float32 => DeviceType::F32,
            _ => DeviceType::F16,
        }
    }

    pub fn float_for(&self, class: PrecisionClass) -> DeviceType {
        match (self.opts.precision, class) {
            (Precision::Float32, _) => DeviceType::F32,
            (Precision::Float16, _) => DeviceType::F16,
            (Precision::Mixed, PrecisionClass::Compute) => DeviceType::F16,
            (Precision::Mixed, PrecisionClass::Sensitive) => DeviceType::F32,
        }
    }

    pub(crate) fn bind_input(&mut self, v: ValueId, dt: DeviceType, ipu: u32) -> Result<()> {
        let shape = self.shape(v)?;
        let name = self.graph.value(v).name.clone();
        let id = self.backend.add_input(&name, dt, &shape, ipu)?;
        self.slots.insert(
            v,
            Slot::Tensor(DevTensor {
                id,
                shape,
                dtype: dt,
                ipu,
            }),
        );
        Ok(())
    }

    pub(crate) fn begin_node(&mut self, idx: NodeId, class: PrecisionClass) {
        self.current_node = idx;
        self.current_ipu = self.node_ipu[idx];
        self.current_float = self.float_for(class);
    }

    pub fn ipu(&self) -> u32 {
        self.current_ipu
    }
    /// The float type this node computes in.
    pub fn float_type(&self) -> DeviceType {
        self.current_float
    }
    /// Device type for a model type under this node's precision.
    pub fn device_type(&self, dt: ElemType) -> DeviceType {
        if dt.is_float() {
            self.current_float
        } else {
            dt.device_default()
        }
    }
    pub fn half(&self) -> bool {
        self.current_float == DeviceType::F16
    }
    pub fn node(&self) -> &'a Node {
        &self.graph.nodes[self.current_node]
    }
    fn name(&self) -> String {
        self.node().name.clone()
    }

    pub fn shape(&self, v: ValueId) -> Result<Vec<usize>> {
        self.graph.shape_of(v).ok_or_else(|| {
            Error::Internal(format!(
                "value '{}' has no inferred shape",
                self.graph.value(v).name
            ))
        })
    }
    pub fn dtype(&self, v: ValueId) -> Result<ElemType> {
        self.graph.value(v).dtype.ok_or_else(|| {
            Error::Internal(format!(
                "value '{}' has no inferred type",
                self.graph.value(v).name
            ))
        })
    }
    pub fn constant(&self, v: ValueId) -> Option<&'a HostTensor> {
        self.graph.constant(v)
    }

    // -- producing values ---------------------------------------------------

    pub fn set(&mut self, v: ValueId, t: DevTensor) {
        self.slots.insert(v, Slot::Tensor(t));
    }

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

    pub fn is_set(&self, v: ValueId) -> bool {
        self.slots.contains_key(&v)
    }

    // -- consuming values ---------------------------------------------------

    /// The value as a device tensor on this node's IPU.
    pub fn tensor(&mut self, v: ValueId) -> Result<DevTensor> {
        if let Some(c) = self.graph.constant(v) {
            let dt = self.device_type(c.dtype);
            return self.constant_tensor(v, dt);
        }
        let home = self.materialize(v)?;
        if home.ipu == self.current_ipu {
            return Ok(home);
        }
        if let Some(t) = self.copies.get(&(v, self.current_ipu)) {
            return Ok(t.clone());
        }
        let name = format!("{}/to_ipu{}", self.graph.value(v).name, self.current_ipu);
        let id = self.backend.copy_to_ipu(home.id, self.current_ipu, &name)?;
        let t = DevTensor {
            id,
            shape: home.shape.clone(),
            dtype: home.dtype,
            ipu: self.current_ipu,
        };
        self.copies.insert((v, self.current_ipu), t.clone());
        Ok(t)
    }

    /// The value as a device tensor of type `want` (cast on the device, or on
    /// the host for constants).
    pub fn tensor_as(&mut self, v: ValueId, want: DeviceType) -> Result<DevTensor> {
        if self.graph.constant(v).is_some() {
            return self.constant_tensor(v, want);
        }
        let t = self.tensor(v)?;
        self.cast(t, want)
    }

    /// A device tensor holding a host constant (created once per IPU and type).
    fn constant_tensor(&mut self, v: ValueId, dt: DeviceType) -> Result<DevTensor> {
        let key = (v, dt, self.current_ipu);
        if let Some(t) = self.consts.get(&key) {
            return Ok(t.clone());
        }
        let c = self.graph.constant(v).expect("constant");
        let name = self.graph.value(v).name.clone();
        let t = self.host_constant(c, dt, &name)?;
        self.consts.insert(key, t.clone());
        Ok(t)
    }

    /// A constant computed on the host from constant `v` by `f` (a transposed
    /// weight, say), created once per IPU and type like `v` itself.
    pub fn derived_constant(
        &mut self,
        v: ValueId,
        tag: &'static str,
        dt: DeviceType,
        f: &dyn Fn(&HostTensor) -> HostTensor,
    ) -> Result<DevTensor> {
        let key = (v, tag, dt, self.current_ipu);
        if let Some(t) = self.derived.get(&key) {
            return Ok(t.clone());
        }
        let c = self
            .graph
            .constant(v)
            .ok_or_else(|| Error::Internal("derived_constant of a non-constant".into()))?;
        let name = format!("{}{tag}", self.graph.value(v).name);
        let t = self.host_constant(&f(c), dt, &name)?;
        self.derived.insert(key, t.clone());
        Ok(t)
    }

    /// Places a host tensor on this node's IPU as a constant of type `dt`.
    pub fn host_constant(
        &mut self,
        c: &HostTensor,
        dt: DeviceType,
        name: &str,
    ) -> Result<DevTensor> {
        let bytes = c.to_device_bytes(dt, &format!("constant '{name}'"))?;
        let id = self
            .backend
            .add_constant(name, dt, c.shape(), &bytes, self.current_ipu)?;
        Ok(DevTensor {
            id,
            shape: c.shape().to_vec(),
            dtype: dt,
            ipu: self.current_ipu,
        })
    }

    fn materialize(&mut self, v: ValueId) -> Result<DevTensor> {
        match self.slots.get(&v) {
            Some(Slot::Tensor(t)) => Ok(t.clone()),
            Some(Slot::Lazy(l)) => {
                let l = l.clone();
                let ins: Vec<TensorId> = l.inputs.iter().map(|t| t.id).collect();
                let id =
                    self.backend
                        .map(&l.expr.flatten(), &ins, l.dtype, &l.shape, l.ipu, &l.name)?;
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
                e = cast_expr(e, w);
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
                    DeviceType::F32 | DeviceType::F16 => Expr::constf(x, dt == DeviceType::F16),
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
        if let Some(Slot::Lazy(l)) = self.slots.get(&v) {
            if self.uses[v] == 1 && l.ipu == self.current_ipu {
                let l = l.clone();
                let base = inputs.len() as u32;
                let mut e = l.expr;
                e.remap_inputs(&|i| i + base);
                inputs.extend(l.inputs);
                // The value is consumed here: drop it so nobody materialises it.
                self.slots.remove(&v);
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

    // -- device operations, on this node's IPU ---------------------------------

    pub fn map_now(
        &mut self,
        expr: &Expr,
        inputs: &[DevTensor],
        dtype: DeviceType,
        shape: &[usize],
    ) -> Result<DevTensor> {
        let ins: Vec<TensorId> = inputs.iter().map(|t| t.id).collect();
        let name = self.name();
        let id = self
            .backend
            .map(&expr.flatten(), &ins, dtype, shape, self.current_ipu, &name)?;
        Ok(DevTensor {
            id,
            shape: shape.to_vec(),
            dtype,
            ipu: self.current_ipu,
        })
    }

    pub fn cast(&mut self, t: DevTensor, want: DeviceType) -> Result<DevTensor> {
        if t.dtype == want {
            return Ok(t);
        }
        let shape = t.shape.clone();
        let e = cast_expr(Expr::input(0), want);
        self.map_now(&e, &[t], want, &shape)
    }

    pub fn matmul(
        &mut self,
        a: &DevTensor,
        b: &DevTensor,
        out_dtype: DeviceType,
    ) -> Result<DevTensor> {
        if a.shape.len() != 3 || b.shape.len() != 3 {
            return Err(Error::Internal(
                "matmul operands must be [G, M, K] and [G, K, N]".into(),
            ));
        }
        let partials = if a.dtype == DeviceType::F16 && self.opts.enable_half_partials {
            DeviceType::F16
        } else {
            DeviceType::F32
        };
        let p = MatMulOptions {
            memory_proportion: self.opts.memory_proportion,
            partials,
            out_dtype,
            ipu: self.current_ipu,
            name: self.name(),
        };
        let id = self.backend.matmul(a.id, b.id, &p)?;
        Ok(DevTensor {
            id,
            shape: vec![a.shape[0], a.shape[1], b.shape[2]],
            dtype: out_dtype,
            ipu: self.current_ipu,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &mut self,
        x: &DevTensor,
        axes: &[usize],
        op: ReduceOp,
        final_op: ReduceFinal,
        scale: f64,
        out_dtype: DeviceType,
    ) -> Result<DevTensor> {
        let name = self.name();
        let id = self.backend.reduce(
            x.id,
            axes,
            op,
            final_op,
            scale,
            out_dtype,
            self.current_ipu,
            &name,
        )?;
        let shape: Vec<usize> = x
            .shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect();
        Ok(DevTensor {
            id,
            shape,
            dtype: out_dtype,
            ipu: self.current_ipu,
        })
    }

    pub fn reshape(&mut self, x: &DevTensor, shape: &[usize]) -> Result<DevTensor> {
        if x.shape == shape {
            return Ok(x.clone());
        }
        let n: usize = shape.iter().product();
        if n != x.numel() {
            return Err(Error::Internal(format!(
                "reshape {:?} -> {:?}",
                x.shape, shape
            )));
        }
        let id = self.backend.reshape(x.id, shape)?;
        Ok(DevTensor {
            id,
            shape: shape.to_vec(),
            dtype: x.dtype,
            ipu: x.ipu,
        })
    }

    /// Materialises a strided view of x.
    pub fn rearrange(
        &mut self,
        x: &DevTensor,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
    ) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .rearrange(x.id, offset, shape, strides, self.current_ipu, &name)?;
        Ok(DevTensor {
            id,
            shape: shape.to_vec(),
            dtype: x.dtype,
            ipu: self.current_ipu,
        })
    }

    pub fn transpose(&mut self, x: &DevTensor, perm: &[usize]) -> Result<DevTensor> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let strides = row_major_strides(&x.shape);
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
        let st: Vec<i64> = perm.iter().map(|&p| strides[p]).collect();
        // Moving only size-1 axes keeps the element order: a free reshape.
        let kept: Vec<usize> = perm.iter().copied().filter(|&p| x.shape[p] != 1).collect();
        if kept.windows(2).all(|w| w[0] < w[1]) {
            return self.reshape(x, &shape);
        }
        self.rearrange(x, 0, &shape, &st)
    }

    /// Broadcasts x to `shape` (numpy rules), materialised.
    pub fn expand(&mut self, x: &DevTensor, shape: &[usize]) -> Result<DevTensor> {
        if x.shape == shape {
            return Ok(x.clone());
        }
        let strides = row_major_strides(&x.shape);
        let lead = shape.len() - x.shape.len();
        let st: Vec<i64> = (0..shape.len())
            .map(|i| {
                if i < lead || x.shape[i - lead] == 1 {
                    0
                } else {
                    strides[i - lead]
                }
            })
            .collect();
        self.rearrange(x, 0, shape, &st)
    }

    pub fn concat(&mut self, xs: &[DevTensor], axis: usize) -> Result<DevTensor> {
        let ids: Vec<TensorId> = xs.iter().map(|t| t.id).collect();
        let name = self.name();
        let id = self.backend.concat(&ids, axis, self.current_ipu, &name)?;
        let mut shape = xs[0].shape.clone();
        shape[axis] = xs.iter().map(|t| t.shape[axis]).sum();
        Ok(DevTensor {
            id,
            shape,
            dtype: xs[0].dtype,
            ipu: self.current_ipu,
        })
    }

    /// 2-D convolution; `p.ipu`, `p.name`, partials and memory proportion are
    /// filled in here.
    pub fn conv(
        &mut self,
        x: &DevTensor,
        w: &DevTensor,
        bias: Option<&DevTensor>,
        mut p: ConvOptions,
        out_shape: &[usize],
    ) -> Result<DevTensor> {
        p.ipu = self.current_ipu;
        p.name = self.name();
        p.memory_proportion = self.opts.memory_proportion;
        p.partials = if x.dtype == DeviceType::F16 && self.opts.enable_half_partials {
            DeviceType::F16
        } else {
            DeviceType::F32
        };
        let id = self.backend.conv(x.id, w.id, bias.map(|b| b.id), &p)?;
        Ok(DevTensor {
            id,
            shape: out_shape.to_vec(),
            dtype: p.out_dtype,
            ipu: self.current_ipu,
        })
    }

    pub fn pool(&mut self, x: &DevTensor, mut p: PoolOptions) -> Result<DevTensor> {
        p.ipu = self.current_ipu;
        p.name = self.name();
        let id = self.backend.pool(x.id, &p)?;
        let mut shape = x.shape.clone();
        let r = shape.len();
        shape[r - 2] = p.out_hw[0] as usize;
        shape[r - 1] = p.out_hw[1] as usize;
        Ok(DevTensor {
            id,
            shape,
            dtype: x.dtype,
            ipu: self.current_ipu,
        })
    }

    /// Rows of a [V, D] table picked by run-time int32 indices: [n, D].
    pub fn gather_rows(&mut self, table: &DevTensor, indices: &DevTensor) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .gather_rows(table.id, indices.id, self.current_ipu, &name)?;
        Ok(DevTensor {
            id,
            shape: vec![indices.numel(), table.shape[1]],
            dtype: table.dtype,
            ipu: self.current_ipu,
        })
    }

    pub fn fill(&mut self, dtype: DeviceType, shape: &[usize], value: f64) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .fill(dtype, shape, value, self.current_ipu, &name)?;
        Ok(DevTensor {
            id,
            shape: shape.to_vec(),
            dtype,
            ipu: self.current_ipu,
        })
    }

    /// Lowers graph outputs: materialised, in the device type the host expects.
    pub(crate) fn finish_outputs(&mut self) -> Result<Vec<Binding>> {
        let mut out = Vec::new();
        let outputs = self.graph.outputs.clone();
        for v in outputs {
            let dtype = self.dtype(v)?;
            let shape = self.shape(v)?;
            // Outputs stay on the IPU that produced them.
            if let Some(Slot::Lazy(l)) = self.slots.get(&v) {
                self.current_ipu = l.ipu;
            } else if let Some(Slot::Tensor(t)) = self.slots.get(&v) {
                self.current_ipu = t.ipu;
            }
            self.current_float = self.float_for(PrecisionClass::Compute);
            let want = if dtype.is_float() {
                match self.opts.precision {
                    Precision::Float16 => DeviceType::F16,
                    _ => DeviceType::F32,
                }
            } else {
                dtype.device_default()
            };
            let lazy_here = matches!(self.slots.get(&v), Some(Slot::Lazy(l)) if self.uses[v] == 1 && l.ipu == self.current_ipu);
            let t = if lazy_here {
                // Fuse the conversion into the value's own expression.
                let mut ins = Vec::new();
                let e = self.operand(v, &mut ins, Some(want))?;
                self.map_now(&e, &ins, want, &shape)?
            } else {
                self.tensor_as(v, want)?
            };
            let name = self.graph.value(v).name.clone();
            self.backend.mark_output(t.id, &name)?;
            out.push(Binding {
                name,
                dtype,
                shape,
                device_dtype: want,
            });
        }
        Ok(out)
    }
}

/// Cast instruction to `want` (rounding to half where needed).
pub fn cast_expr(e: Expr, want: DeviceType) -> Expr {
    match want {
        DeviceType::F32 => Expr::un(ExprOp::CastF32, e, false),
        DeviceType::F16 => Expr::un(ExprOp::CastF16, e, true),
        DeviceType::I32 => Expr::un(ExprOp::CastI32, e, false),
        DeviceType::Bool => Expr::un(ExprOp::CastBool, e, false),
    }
}

pub fn row_major_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as i64;
    }
    s
}
