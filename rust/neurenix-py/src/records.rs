//! Typed records crossing into Python: frozen classes with one attribute per
//! field of the core record they mirror (documented in `_native.pyi`).

use neurenix_core::compile::Placement as CorePlacement;
use neurenix_core::executable::HostStream as CoreHostStream;
use neurenix_core::model_parts as parts;
use neurenix_core::passes::PassStats as CorePassStats;
use neurenix_core::pipeline;
use neurenix_core::report;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// A frozen Python class with a keyword constructor, equality and a repr.
macro_rules! record {
    ($(#[$doc:meta])* $py:literal $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[pyclass(module = "neurenix._native", name = $py, frozen, get_all, eq, from_py_object)]
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $(pub $field: $ty),*
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = ($($field),*))]
            fn new($($field: $ty),*) -> Self {
                $name { $($field),* }
            }

            fn __repr__(&self) -> String {
                let fields: Vec<String> = vec![$(format!("{}={:?}", stringify!($field), self.$field)),*];
                format!("{}({})", $py, fields.join(", "))
            }
        }
    };
}

record! {
    /// The simulated system and the target constants of its chip.
    "SystemInfo" SystemInfo {
        version: String, chip: String, num_ipus: u32, tiles_per_ipu: u32, bytes_per_tile: u64,
        clock_hz: f64, fp16_flops_per_cycle: u32, fp32_flops_per_cycle: u32, fp8_flops_per_cycle: u32,
        worker_threads: u32, exchange_bytes_per_cycle: u32, exchange_descriptor_cycles: u32,
        local_read_bytes_per_cycle: u32, local_write_bytes_per_cycle: u32,
        sync_cycles: u32, cross_ipu_sync_cycles: u32, ipu_link_bytes_per_sec: f64, ipu_links: u32,
        host_link: String, host_link_bytes_per_sec: f64, host_transfer_latency_cycles: u32,
        vertex_overhead_cycles: u32, estimated_constants: Vec<String>,
    }
}

record! {
    /// A state tensor of a training program: its name, shape and device type.
    "StateSpec" StateSpec { name: String, shape: Vec<usize>, device_type: String }
}

record! {
    /// What compiling a training step added (`neurenix_core::train::TrainingInfo`).
    "TrainingInfo" TrainingInfo {
        weights: Vec<String>, optimizer_state: Vec<String>, hyperparameters: Vec<String>, loss: String,
        label_input: Option<String>, label_classes: Option<usize>, buffers: Vec<String>,
        state: Vec<StateSpec>,
    }
}

impl From<neurenix_core::train::TrainingInfo> for TrainingInfo {
    fn from(t: neurenix_core::train::TrainingInfo) -> Self {
        TrainingInfo {
            weights: t.weights,
            optimizer_state: t.optimizer_state,
            hyperparameters: t.hyperparameters,
            loss: t.loss,
            label_input: t.label_input,
            label_classes: t.label_classes,
            buffers: t.buffers,
            state: t
                .state
                .into_iter()
                .map(|(name, shape, dev)| StateSpec {
                    name,
                    shape,
                    device_type: dev.name().to_string(),
                })
                .collect(),
        }
    }
}

impl From<report::SystemInfo> for SystemInfo {
    fn from(s: report::SystemInfo) -> Self {
        SystemInfo {
            version: s.version,
            chip: s.chip,
            num_ipus: s.num_ipus,
            tiles_per_ipu: s.tiles_per_ipu,
            bytes_per_tile: s.bytes_per_tile,
            clock_hz: s.clock_hz,
            fp16_flops_per_cycle: s.fp16_flops_per_cycle,
            fp32_flops_per_cycle: s.fp32_flops_per_cycle,
            fp8_flops_per_cycle: s.fp8_flops_per_cycle,
            worker_threads: s.worker_threads,
            exchange_bytes_per_cycle: s.exchange_bytes_per_cycle,
            exchange_descriptor_cycles: s.exchange_descriptor_cycles,
            local_read_bytes_per_cycle: s.local_read_bytes_per_cycle,
            local_write_bytes_per_cycle: s.local_write_bytes_per_cycle,
            sync_cycles: s.sync_cycles,
            cross_ipu_sync_cycles: s.cross_ipu_sync_cycles,
            ipu_link_bytes_per_sec: s.ipu_link_bytes_per_sec,
            ipu_links: s.ipu_links,
            host_link: s.host_link,
            host_link_bytes_per_sec: s.host_link_bytes_per_sec,
            host_transfer_latency_cycles: s.host_transfer_latency_cycles,
            vertex_overhead_cycles: s.vertex_overhead_cycles,
            estimated_constants: s.estimated_constants,
        }
    }
}

record! {
    /// A variable on a tile, with the model node that owns it.
    "TileTensor" TileTensor { name: String, node: String, bytes: u64 }
}

impl From<&report::TileTensor> for TileTensor {
    fn from(t: &report::TileTensor) -> Self {
        TileTensor {
            name: t.name.clone(),
            node: t.node.clone(),
            bytes: t.bytes,
        }
    }
}

record! {
    /// Peak memory of one tile, by category (bytes).
    "TileMemory" TileMemory {
        ipu: u32, tile: u32, variables: u64, constants: u64, vertex_state: u64, code: u64,
        exchange_code: u64, control_code: u64, total: u64, largest: Vec<TileTensor>,
    }
}

impl From<&report::TileMemory> for TileMemory {
    fn from(t: &report::TileMemory) -> Self {
        TileMemory {
            ipu: t.ipu,
            tile: t.tile,
            variables: t.variables,
            constants: t.constants,
            vertex_state: t.vertex_state,
            code: t.code,
            exchange_code: t.exchange_code,
            control_code: t.control_code,
            total: t.total(),
            largest: t.largest.iter().map(TileTensor::from).collect(),
        }
    }
}

record! {
    /// How the op library laid out one operation.
    "OpPlan" OpPlan {
        name: String, kind: String, ipu: u32, plan: String, tiles_used: u32,
        temp_bytes_per_tile: u64, estimated_cycles: u64,
    }
}

impl From<&report::OpPlan> for OpPlan {
    fn from(p: &report::OpPlan) -> Self {
        OpPlan {
            name: p.name.clone(),
            kind: p.kind.clone(),
            ipu: p.ipu,
            plan: p.plan.clone(),
            tiles_used: p.tiles_used,
            temp_bytes_per_tile: p.temp_bytes_per_tile,
            estimated_cycles: p.estimated_cycles,
        }
    }
}

record! {
    /// The estimated cost of one program step. `kind`: "compute",
    /// "exchange", "host_to_device" or "device_to_host".
    "StepCost" StepCost {
        ipu: u32, kind: String, name: String, cycles: u64, bytes: u64, items: u64, node: String,
        tile: Option<u32>, live_bytes: u64, terms: Vec<CostTerm>,
    }
}

record! {
    /// A variable of a compiled program. `kind`: "input", "constant",
    /// "intermediate" or "temporary".
    "Variable" Variable {
        ipu: u32, name: String, node: String, kind: String, device_type: String, shape: Vec<usize>,
        tiles: u32,
    }
}

impl From<&report::Variable> for Variable {
    fn from(v: &report::Variable) -> Self {
        Variable {
            ipu: v.ipu,
            name: v.name.clone(),
            node: v.node.clone(),
            kind: v.kind.clone(),
            device_type: v.device_type.name().to_string(),
            shape: v.shape.clone(),
            tiles: v.tiles,
        }
    }
}

record! {
    /// One term of a step's cost formula.
    "CostTerm" CostTerm { kind: String, name: String, cycles: u64 }
}

impl From<&report::StepCost> for StepCost {
    fn from(s: &report::StepCost) -> Self {
        StepCost {
            ipu: s.ipu,
            kind: s.kind.name().to_string(),
            name: s.name.clone(),
            cycles: s.cycles,
            bytes: s.bytes,
            items: s.items,
            node: s.node.clone(),
            tile: s.tile,
            live_bytes: s.live_bytes,
            terms: s
                .terms
                .iter()
                .map(|t| CostTerm {
                    kind: t.kind.clone(),
                    name: t.name.clone(),
                    cycles: t.cycles,
                })
                .collect(),
        }
    }
}

record! {
    /// Statistics of one run of a loaded program.
    "RunStats" RunStats {
        cycles: u64, compute_cycles: u64, exchange_cycles: u64, host_cycles: u64, steps: u64,
        exchanged_bytes: u64, copied_bytes: u64, host_bytes: u64, wall_seconds: f64, compute_seconds: f64,
        exchange_seconds: f64, host_io_seconds: f64, host_memory_bytes: u64, checked: bool,
        step_seconds: Vec<f64>, host_shadow_bytes: u64,
    }
}

impl From<report::RunStats> for RunStats {
    fn from(s: report::RunStats) -> Self {
        RunStats {
            cycles: s.cycles,
            compute_cycles: s.compute_cycles,
            exchange_cycles: s.exchange_cycles,
            host_cycles: s.host_cycles,
            steps: s.steps,
            exchanged_bytes: s.exchanged_bytes,
            copied_bytes: s.copied_bytes,
            host_bytes: s.host_bytes,
            wall_seconds: s.wall_seconds,
            compute_seconds: s.compute_seconds,
            exchange_seconds: s.exchange_seconds,
            host_io_seconds: s.host_io_seconds,
            host_memory_bytes: s.host_memory_bytes,
            checked: s.checked,
            step_seconds: s.step_seconds,
            host_shadow_bytes: s.host_shadow_bytes,
        }
    }
}

record! {
    /// A tensor one pipeline stage receives from an earlier one.
    "CarriedTensor" CarriedTensor { name: String, bytes: u64, from_ipu: u32 }
}

record! {
    /// What one pipeline stage (one IPU of a replica) costs per micro-batch.
    "StageEstimate" StageEstimate {
        ipu: u32, nodes: usize, compute_cycles: u64, host_cycles: u64, copy_cycles: u64,
        interval_cycles: u64, carried_in: Vec<CarriedTensor>, max_tile_bytes: u64,
        memory_bytes: u64,
    }
}

impl From<&pipeline::StageEstimate> for StageEstimate {
    fn from(s: &pipeline::StageEstimate) -> Self {
        StageEstimate {
            ipu: s.ipu,
            nodes: s.nodes,
            compute_cycles: s.compute_cycles,
            host_cycles: s.host_cycles,
            copy_cycles: s.copy_cycles,
            interval_cycles: s.interval_cycles,
            carried_in: s
                .carried_in
                .iter()
                .map(|(name, bytes, from)| CarriedTensor {
                    name: name.clone(),
                    bytes: *bytes,
                    from_ipu: *from,
                })
                .collect(),
            max_tile_bytes: s.max_tile_bytes,
            memory_bytes: s.memory_bytes,
        }
    }
}

record! {
    /// The estimate of one call: its stages, filling and draining the
    /// pipeline, the steady-state interval and the whole call's cycles.
    "PipelineEstimate" PipelineEstimate {
        execution: String, stages: Vec<StageEstimate>, replicas: u32, device_iterations: u32,
        fill_cycles: u64, interval_cycles: u64, cycles_per_call: u64, attempts: u32,
    }
}

impl PipelineEstimate {
    pub fn new_from(e: &pipeline::PipelineEstimate, attempts: u32) -> Self {
        PipelineEstimate {
            execution: e.execution.name().to_string(),
            stages: e.stages.iter().map(Into::into).collect(),
            replicas: e.replicas,
            device_iterations: e.device_iterations,
            fill_cycles: e.fill_cycles,
            interval_cycles: e.interval_cycles,
            cycles_per_call: e.cycles_per_call,
            attempts,
        }
    }
}

record! {
    /// What the graph passes did.
    "PassStats" PassStats { nodes_in: usize, folded: usize, dead: usize, fused: usize, nodes_out: usize }
}

impl From<&CorePassStats> for PassStats {
    fn from(s: &CorePassStats) -> Self {
        PassStats {
            nodes_in: s.nodes_in,
            folded: s.folded,
            dead: s.dead,
            fused: s.fused,
            nodes_out: s.nodes_out,
        }
    }
}

record! {
    /// Where the sharder put one node.
    "Placement" Placement { node: String, op_type: String, ipu: u32 }
}

impl From<&CorePlacement> for Placement {
    fn from(p: &CorePlacement) -> Self {
        Placement {
            node: p.node.clone(),
            op_type: p.op_type.clone(),
            ipu: p.ipu,
        }
    }
}

record! {
    /// A tensor's name, element type (numpy's name) and concrete shape.
    "TensorSpec" TensorSpec { name: String, dtype: String, shape: Vec<usize> }
}

record! {
    /// An input or output of an executable: as the host sees it (`dtype`)
    /// and as the device holds it (`device_type`).
    "HostStream" HostStream { name: String, dtype: String, shape: Vec<usize>, device_type: String }
}

impl From<&CoreHostStream> for HostStream {
    fn from(s: &CoreHostStream) -> Self {
        HostStream {
            name: s.name.clone(),
            dtype: s.dtype.name().to_string(),
            shape: s.shape.clone(),
            device_type: s.device_type.name().to_string(),
        }
    }
}

record! {
    /// An attachable group of IPUs.
    "DeviceInfo" DeviceInfo { id: u32, ipus: Vec<u32> }
}

// -- the plain-data form of a model ------------------------------------------

/// Python's None, as a value of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoneValue;

impl<'py> FromPyObject<'_, 'py> for NoneValue {
    type Error = PyErr;
    fn extract(ob: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        if ob.is_none() {
            Ok(NoneValue)
        } else {
            Err(pyo3::exceptions::PyTypeError::new_err("expected None"))
        }
    }
}

impl<'py> IntoPyObject<'py> for NoneValue {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = std::convert::Infallible;
    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(py.None().into_bound(py))
    }
}

/// A declared dimension: an int, a name, or None (unknown).
#[derive(Debug, Clone, PartialEq, FromPyObject, IntoPyObject)]
pub enum Dim {
    Fixed(u64),
    Named(String),
    Unknown(NoneValue),
}

impl From<&Dim> for parts::DimParts {
    fn from(d: &Dim) -> Self {
        match d {
            Dim::Fixed(n) => parts::DimParts::Fixed(*n),
            Dim::Named(s) => parts::DimParts::Named(s.clone()),
            Dim::Unknown(_) => parts::DimParts::Unknown,
        }
    }
}

impl From<&parts::DimParts> for Dim {
    fn from(d: &parts::DimParts) -> Self {
        match d {
            parts::DimParts::Fixed(n) => Dim::Fixed(*n),
            parts::DimParts::Named(s) => Dim::Named(s.clone()),
            parts::DimParts::Unknown => Dim::Unknown(NoneValue),
        }
    }
}

record! {
    /// A graph input or output as declared: ONNX element type code (0: not
    /// given) and dims (None: no shape declared).
    "ValueParts" ValueParts { name: String, elem_type: i32, dims: Option<Vec<Dim>> }
}

impl From<&ValueParts> for parts::ValueParts {
    fn from(v: &ValueParts) -> Self {
        parts::ValueParts {
            name: v.name.clone(),
            elem_type: v.elem_type,
            dims: v
                .dims
                .as_ref()
                .map(|ds| ds.iter().map(Into::into).collect()),
        }
    }
}

impl From<&parts::ValueParts> for ValueParts {
    fn from(v: &parts::ValueParts) -> Self {
        ValueParts {
            name: v.name.clone(),
            elem_type: v.elem_type,
            dims: v
                .dims
                .as_ref()
                .map(|ds| ds.iter().map(Into::into).collect()),
        }
    }
}

/// Raw bytes, taken from and given to Python as `bytes` (one copy, not a
/// list of ints).
#[derive(Clone, PartialEq)]
pub struct Bytes(pub Arc<Vec<u8>>);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

impl<'py> FromPyObject<'_, 'py> for Bytes {
    type Error = PyErr;
    fn extract(ob: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        Ok(Bytes(Arc::new(ob.cast::<PyBytes>()?.as_bytes().to_vec())))
    }
}

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;
    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

record! {
    /// A tensor: ONNX element type code, dims and little-endian bytes.
    "TensorParts" TensorParts { name: String, elem_type: i32, dims: Vec<u64>, data: Bytes }
}

impl From<TensorParts> for parts::TensorParts {
    fn from(t: TensorParts) -> Self {
        parts::TensorParts {
            name: t.name,
            elem_type: t.elem_type,
            dims: t.dims,
            data: t.data.0,
        }
    }
}

impl From<&parts::TensorParts> for TensorParts {
    fn from(t: &parts::TensorParts) -> Self {
        TensorParts {
            name: t.name.clone(),
            elem_type: t.elem_type,
            dims: t.dims.clone(),
            data: Bytes(t.data.clone()),
        }
    }
}

/// An attribute value, by kind.
#[derive(Debug, Clone, PartialEq, FromPyObject, IntoPyObject)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(TensorParts),
    None(NoneValue),
}

record! {
    /// A node attribute: `kind` is one of "i", "f", "s", "ints", "floats",
    /// "strings", "t" (a TensorParts), "g" (a subgraph, value None) or
    /// another kind's name (value None).
    "AttrParts" AttrParts { name: String, kind: String, value: AttrValue }
}

fn attr_to_core(a: &AttrParts) -> Result<parts::AttrParts, String> {
    use AttrValue as V;
    Ok(match (a.kind.as_str(), &a.value) {
        ("i", V::Int(i)) => parts::AttrParts::Int(*i),
        ("f", V::Float(f)) => parts::AttrParts::Float(*f),
        ("f", V::Int(i)) => parts::AttrParts::Float(*i as f32),
        ("s", V::String(s)) => parts::AttrParts::String(s.clone()),
        ("ints", V::Ints(v)) => parts::AttrParts::Ints(v.clone()),
        ("floats", V::Floats(v)) => parts::AttrParts::Floats(v.clone()),
        ("floats", V::Ints(v)) => parts::AttrParts::Floats(v.iter().map(|&i| i as f32).collect()),
        ("strings", V::Strings(v)) => parts::AttrParts::Strings(v.clone()),
        ("t", V::Tensor(t)) => parts::AttrParts::Tensor(t.clone().into()),
        ("strings", V::Ints(v)) if v.is_empty() => parts::AttrParts::Strings(vec![]),
        ("g", _) => parts::AttrParts::Graph,
        (k @ ("i" | "f" | "s" | "ints" | "floats" | "strings" | "t"), v) => {
            return Err(format!("attribute '{}' of kind '{k}' holds {v:?}", a.name))
        }
        (other, _) => parts::AttrParts::Other(other.to_string()),
    })
}

fn attr_from_core(name: &str, a: &parts::AttrParts) -> AttrParts {
    use AttrValue as V;
    let (kind, value) = match a {
        parts::AttrParts::Int(i) => ("i", V::Int(*i)),
        parts::AttrParts::Float(f) => ("f", V::Float(*f)),
        parts::AttrParts::String(s) => ("s", V::String(s.clone())),
        parts::AttrParts::Ints(v) => ("ints", V::Ints(v.clone())),
        parts::AttrParts::Floats(v) => ("floats", V::Floats(v.clone())),
        parts::AttrParts::Strings(v) => ("strings", V::Strings(v.clone())),
        parts::AttrParts::Tensor(t) => ("t", V::Tensor(t.into())),
        parts::AttrParts::Graph => ("g", V::None(NoneValue)),
        parts::AttrParts::Other(k) => (k.as_str(), V::None(NoneValue)),
    };
    AttrParts {
        name: name.to_string(),
        kind: kind.to_string(),
        value,
    }
}

record! {
    /// A node: an empty name is named by the core (`{op_type}_{index}`);
    /// an empty input or output name is an omitted optional one.
    "NodeParts" NodeParts {
        name: String, op_type: String, domain: String, inputs: Vec<String>, outputs: Vec<String>,
        attrs: Vec<AttrParts>,
    }
}

record! {
    /// A whole model as plain data. `opsets`: (domain, version) pairs.
    "ModelParts" ModelParts {
        name: String, opsets: Vec<(String, i64)>, inputs: Vec<ValueParts>,
        outputs: Vec<ValueParts>, initializers: Vec<TensorParts>, nodes: Vec<NodeParts>,
    }
}

impl ModelParts {
    /// The core's parts; tensor data moves, it is not copied.
    pub fn into_core(self) -> Result<parts::ModelParts, String> {
        let nodes = self
            .nodes
            .iter()
            .map(|n| {
                Ok(parts::NodeParts {
                    name: n.name.clone(),
                    op_type: n.op_type.clone(),
                    domain: n.domain.clone(),
                    inputs: n.inputs.clone(),
                    outputs: n.outputs.clone(),
                    attrs: n
                        .attrs
                        .iter()
                        .map(|a| Ok((a.name.clone(), attr_to_core(a)?)))
                        .collect::<Result<_, String>>()?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(parts::ModelParts {
            name: self.name.clone(),
            opsets: self.opsets.clone(),
            inputs: self.inputs.iter().map(Into::into).collect(),
            outputs: self.outputs.iter().map(Into::into).collect(),
            initializers: self.initializers.into_iter().map(Into::into).collect(),
            nodes,
        })
    }
}

impl From<&parts::ModelParts> for ModelParts {
    fn from(p: &parts::ModelParts) -> Self {
        ModelParts {
            name: p.name.clone(),
            opsets: p.opsets.clone(),
            inputs: p.inputs.iter().map(Into::into).collect(),
            outputs: p.outputs.iter().map(Into::into).collect(),
            initializers: p.initializers.iter().map(Into::into).collect(),
            nodes: p
                .nodes
                .iter()
                .map(|n| NodeParts {
                    name: n.name.clone(),
                    op_type: n.op_type.clone(),
                    domain: n.domain.clone(),
                    inputs: n.inputs.clone(),
                    outputs: n.outputs.clone(),
                    attrs: n.attrs.iter().map(|(k, a)| attr_from_core(k, a)).collect(),
                })
                .collect(),
        }
    }
}
