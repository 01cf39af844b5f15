//! Lowering: IR nodes onto a device [`Backend`], node by node in
//! topological order.
//!
//! [`LowerCx`] holds what has been lowered so far: one slot per value (a
//! device tensor, or a lazy element-wise expression waiting to be fused into
//! its consumer, see `fusion`) and the device copies of constants
//! (`constants`). What is lowered together runs on one IPU: a model split
//! over several IPUs is lowered stage by stage (`pipeline`), each stage onto
//! its own backend. The precision policy is in [`precision`]; the device
//! operations an operator emits are in `device_ops`.

mod constants;
mod device_ops;
mod float8;
mod fusion;
pub mod precision;

pub use device_ops::row_major_strides;

/// The name of the stream that carries value `value` between pipeline
/// stages (distinct from a model output of the same value).
pub fn carried_stream_name(value: &str) -> String {
    format!("{value}/carried")
}

use std::collections::HashMap;

use crate::backend::{Backend, TensorId};
use crate::compile::Placement;
use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::executable::HostStream;
use crate::ir::{Graph, Node, NodeId, ValueId};
use crate::ops::lookup;
use crate::tensor::{checked_numel, HostTensor};

use float8::Float8Scale;
use fusion::LazyMap;
use precision::{FloatRole, Precision};

#[derive(Debug, Clone)]
pub struct LowerOptions {
    pub precision: Precision,
    pub memory_proportion: f64,
    pub enable_half_partials: bool,
    /// Matrix-product operands' format under `Precision::Float8`.
    pub fp8_format: crate::float8::Float8,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DevTensor {
    pub id: TensorId,
    pub shape: Vec<usize>,
    pub dtype: DeviceType,
    pub ipu: u32,
}

impl DevTensor {
    /// Elements (saturating: a device tensor that exists has fewer than
    /// `usize::MAX`, and an overflowing count stays large).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }
}

/// What is being lowered, which names the device operations emitted: a
/// node, or (outside any node) a model input or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Site {
    Node(NodeId),
    Value(ValueId),
}

/// What a lowered value is, so far.
#[derive(Debug, Clone)]
enum Slot {
    Tensor(DevTensor),
    Lazy(LazyMap),
}

pub struct LowerCx<'a> {
    pub backend: &'a mut dyn Backend,
    pub graph: &'a Graph,
    pub opset: i64,
    pub opts: &'a LowerOptions,
    node_ipu: &'a [u32],
    /// `None` before anything is lowered.
    site: Option<Site>,
    current_ipu: u32,
    /// The precision role of what is being lowered: the current node's
    /// operator's, or the model's inputs' and outputs'.
    role: FloatRole,
    slots: HashMap<ValueId, Slot>,
    consts: HashMap<(ValueId, DeviceType, u32), DevTensor>,
    derived: HashMap<(ValueId, &'static str, DeviceType, u32), DevTensor>,
    /// The scale of every float8 tensor (Poplar's quarter metadata), by
    /// backend tensor (`float8`).
    float8_scales: HashMap<TensorId, Float8Scale>,
    uses: Vec<usize>,
    /// By value: every node that reads it is element-wise
    /// (`Operator::fuses_operands`) with a result of its shape, and no graph
    /// output or state update is it (`fusion.rs`: may be computed again in
    /// each reader).
    only_elementwise_readers: Vec<bool>,
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
        let only_elementwise_readers = fusion::only_elementwise_readers(graph);
        LowerCx {
            backend,
            graph,
            opset,
            opts,
            node_ipu,
            site: None,
            current_ipu: 0,
            role: FloatRole::Compute,
            slots: HashMap::new(),
            consts: HashMap::new(),
            derived: HashMap::new(),
            float8_scales: HashMap::new(),
            uses,
            only_elementwise_readers,
        }
    }

    /// Streams graph input `v` in on `ipu`, in the device type the precision
    /// policy gives model inputs (float32 for an input only training's
    /// optimizer reads: a hyperparameter).
    pub(crate) fn bind_input(&mut self, v: ValueId, ipu: u32) -> Result<HostStream> {
        let mut readers = self
            .graph
            .nodes
            .iter()
            .filter(|n| n.inputs.contains(&Some(v)))
            .peekable();
        let master = readers.peek().is_some()
            && readers.all(|n| n.attrs.contains_key(precision::MASTER_ATTR));
        self.role = if master {
            FloatRole::Master
        } else {
            FloatRole::ModelInput
        };
        self.site = Some(Site::Value(v));
        let dtype = self.dtype(v)?;
        let dev = self.device_type(dtype);
        let name = self.graph.value(v).name.clone();
        self.bind_stream(v, dev, ipu, name)
    }

    /// Places state tensor `s` on `ipu`, initialised with its initial value
    /// when the program is loaded: float state in float32 (master weights),
    /// other types as the policy stores them. Named after its value, which
    /// is how the host reads and writes it.
    pub(crate) fn bind_state(&mut self, s: &crate::ir::State, ipu: u32) -> Result<()> {
        self.role = FloatRole::Master;
        self.site = Some(Site::Value(s.value));
        self.current_ipu = ipu;
        let name = self.graph.value(s.value).name.clone();
        // float16 optimizer state stays float16; other floats are float32.
        let dev = if s.init.dtype == ElemType::F16 {
            DeviceType::F16
        } else {
            self.device_type(s.init.dtype)
        };
        let t = self.host_constant(&s.init, dev, &name)?;
        self.slots.insert(s.value, Slot::Tensor(t));
        Ok(())
    }

    /// Writes the update of state tensor `s` back into it, at the end of
    /// the program.
    pub(crate) fn assign_state(&mut self, s: &crate::ir::State) -> Result<()> {
        let Some(u) = s.update else {
            return Ok(());
        };
        self.role = FloatRole::Master;
        self.site = Some(Site::Value(s.value));
        let dst = match self.slots.get(&s.value) {
            Some(Slot::Tensor(t)) => t.clone(),
            _ => {
                return Err(Error::Internal(format!(
                    "state '{}' was never placed",
                    self.graph.value(s.value).name
                )))
            }
        };
        self.current_ipu = dst.ipu;
        let src = self.tensor_as(u, dst.dtype)?;
        let src = self.reshape(&src, &dst.shape)?;
        let name = format!("{}/assign", self.graph.value(s.value).name);
        self.backend.assign(dst.id, src.id, &name)
    }

    /// Sets state tensor `s` to zeros (an accumulator, once the update has
    /// read it).
    pub(crate) fn clear_state(&mut self, s: &crate::ir::State) -> Result<()> {
        let dst = match self.slots.get(&s.value) {
            Some(Slot::Tensor(t)) => t.clone(),
            _ => {
                return Err(Error::Internal(format!(
                    "state '{}' was never placed",
                    self.graph.value(s.value).name
                )))
            }
        };
        let name = format!("{}/clear", self.graph.value(s.value).name);
        let zeros = self
            .backend
            .fill(dst.dtype, &dst.shape, 0.0, dst.ipu, &name)?;
        self.backend.assign(dst.id, zeros, &name)
    }

    /// Receives carried tensor `v` (produced by an earlier pipeline stage)
    /// on `ipu`, in the device type its producer gave it.
    pub(crate) fn bind_carried(
        &mut self,
        v: ValueId,
        dev: DeviceType,
        ipu: u32,
    ) -> Result<HostStream> {
        self.role = FloatRole::Compute;
        self.site = Some(Site::Value(v));
        let name = carried_stream_name(&self.graph.value(v).name);
        self.bind_stream(v, dev, ipu, name)
    }

    fn bind_stream(
        &mut self,
        v: ValueId,
        dev: DeviceType,
        ipu: u32,
        name: String,
    ) -> Result<HostStream> {
        let dtype = self.dtype(v)?;
        let shape = self.shape(v)?;
        if checked_numel(&shape)
            .and_then(|n| n.checked_mul(dev.size()))
            .is_none()
        {
            return Err(Error::model(format!(
                "model input '{name}' of shape {shape:?} has more bytes than this host can count"
            )));
        }
        let id = self.backend.add_input(&name, dev, &shape, ipu)?;
        self.slots.insert(
            v,
            Slot::Tensor(DevTensor {
                id,
                shape: shape.clone(),
                dtype: dev,
                ipu,
            }),
        );
        Ok(HostStream {
            name,
            dtype,
            shape,
            device_type: dev,
        })
    }

    /// Starts lowering node `idx` of the graph, whose operator plays `role`
    /// for the precision policy.
    pub fn begin_node(&mut self, idx: NodeId, role: FloatRole) {
        self.site = Some(Site::Node(idx));
        self.current_ipu = self.node_ipu.get(idx).copied().unwrap_or(0);
        self.role = role;
    }

    /// Lowers `nodes` (in program order) onto the stage on IPU `ipu` of
    /// its replica; returns where each went.
    pub fn lower_nodes(&mut self, nodes: &[NodeId], ipu: u32) -> Result<Vec<Placement>> {
        let graph = self.graph;
        let mut placement = Vec::with_capacity(nodes.len());
        let total = nodes.len() as u64;
        for (done, &i) in nodes.iter().enumerate() {
            crate::progress::report("lowering", done as u64, total);
            let node = &graph.nodes[i];
            let op = lookup(node, self.opset)?;
            let role = if node.attrs.contains_key(precision::MASTER_ATTR) {
                // The optimizer's state sits with its weight, placed by now.
                for st in &graph.state {
                    let Some(like) = st.layout_like else { continue };
                    if !node.inputs.contains(&Some(st.value)) {
                        continue;
                    }
                    if let (Some(Slot::Tensor(x)), Some(Slot::Tensor(w))) =
                        (self.slots.get(&st.value), self.slots.get(&like))
                    {
                        let (x, w) = (x.id, w.id);
                        self.backend.place_like(x, w)?;
                    }
                }
                FloatRole::Master
            } else {
                op.float_role()
            };
            self.begin_node(i, role);
            self.backend.begin_node(&node.name);
            op.lower(self, node)?;
            for &o in &node.outputs {
                if !self.is_set(o) && graph.constant(o).is_none() && self.is_used(o) {
                    return Err(Error::Internal(format!(
                        "lowering node '{}' left output {o} unset",
                        node.name
                    )));
                }
            }
            placement.push(Placement {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                ipu,
            });
        }
        self.backend.begin_node("");
        crate::progress::report("lowering", total, total);
        Ok(placement)
    }

    pub fn ipu(&self) -> u32 {
        self.current_ipu
    }
    /// The node being lowered; `None` while model inputs and outputs are.
    pub fn node(&self) -> Option<&'a Node> {
        match self.site {
            Some(Site::Node(i)) => self.graph.nodes.get(i),
            _ => None,
        }
    }
    /// What device operations are named after: the node being lowered, or
    /// the model input or output being bound or finished.
    pub fn name(&self) -> String {
        match self.site {
            Some(Site::Node(i)) => self
                .graph
                .nodes
                .get(i)
                .map_or_else(String::new, |n| n.name.clone()),
            Some(Site::Value(v)) => self.graph.value(v).name.clone(),
            None => String::new(),
        }
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

    pub fn set(&mut self, v: ValueId, t: DevTensor) {
        self.slots.insert(v, Slot::Tensor(t));
    }

    /// True if a node, a graph output or a state update reads `v`: an output
    /// nobody reads need not be computed (Dropout's mask in inference).
    pub fn is_used(&self, v: ValueId) -> bool {
        self.uses[v] > 0
    }

    pub fn is_set(&self, v: ValueId) -> bool {
        self.slots.contains_key(&v)
    }

    /// The value as a device tensor on this node's IPU.
    pub fn tensor(&mut self, v: ValueId) -> Result<DevTensor> {
        if let Some(c) = self.graph.constant(v) {
            let dt = self.device_type(c.dtype);
            return self.constant_tensor(v, dt);
        }
        self.materialize(v)
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

    /// Sends carried tensors `values` on to later pipeline stages, as they
    /// are (materialised, in the device type they were produced in).
    pub(crate) fn finish_carried(&mut self, values: &[ValueId]) -> Result<Vec<HostStream>> {
        self.role = FloatRole::Compute;
        let mut out = Vec::new();
        for &v in values {
            self.site = Some(Site::Value(v));
            let t = self.tensor(v)?;
            let name = carried_stream_name(&self.graph.value(v).name);
            self.backend.mark_output(t.id, &name)?;
            out.push(HostStream {
                name,
                dtype: self.dtype(v)?,
                shape: t.shape.clone(),
                device_type: t.dtype,
            });
        }
        Ok(out)
    }

    /// Lowers graph outputs `values`: materialised on the IPU that produced
    /// them, in the device type the precision policy gives model outputs.
    pub(crate) fn finish_outputs(&mut self, values: &[ValueId]) -> Result<Vec<HostStream>> {
        self.role = FloatRole::ModelOutput;
        let graph = self.graph;
        let mut out = Vec::new();
        for &v in values {
            self.site = Some(Site::Value(v));
            let dtype = self.dtype(v)?;
            let shape = self.shape(v)?;
            match self.slots.get(&v) {
                Some(Slot::Lazy(l)) => self.current_ipu = l.ipu,
                Some(Slot::Tensor(t)) => self.current_ipu = t.ipu,
                None => {}
            }
            let want = self.device_type(dtype);
            let t = if let Some(name) = self.fusable_name(v) {
                // Fuse the conversion into the value's own expression, which
                // keeps the name of the node that made it.
                let mut ins = Vec::new();
                let e = self.operand(v, &mut ins, Some(want))?;
                self.backend.begin_node(&name);
                let t = self.map_named(&e, &ins, want, &shape, &name);
                self.backend.begin_node("");
                t?
            } else {
                self.tensor_as(v, want)?
            };
            let name = graph.value(v).name.clone();
            self.backend.mark_output(t.id, &name)?;
            out.push(HostStream {
                name,
                dtype,
                shape,
                device_type: want,
            });
        }
        Ok(out)
    }
}
