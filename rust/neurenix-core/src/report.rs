//! What a device reports: the system it compiles for, where a compiled
//! program's memory goes, what the op library decided, the estimated cost of
//! every program step, and the statistics of a run.
//!
//! These are plain records, filled by a device implementation (the simulator
//! in `neurenix-sys`) and read by the Python reports.

/// The simulated (or real) system a program is compiled for, with the
/// target constants the cost model uses.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemInfo {
    /// "ipu1", "ipu2", "bow", "ipu21".
    pub version: String,
    pub chip: String,
    pub num_ipus: u32,
    pub tiles_per_ipu: u32,
    pub bytes_per_tile: u64,
    pub clock_hz: f64,
    pub fp16_flops_per_cycle: u32,
    pub fp32_flops_per_cycle: u32,
    /// Per tile, AMP with float8 inputs (0: the chip has no float8 AMP).
    pub fp8_flops_per_cycle: u32,
    pub worker_threads: u32,
    pub exchange_bytes_per_cycle: u32,
    pub exchange_descriptor_cycles: u32,
    pub local_read_bytes_per_cycle: u32,
    pub local_write_bytes_per_cycle: u32,
    pub sync_cycles: u32,
    pub cross_ipu_sync_cycles: u32,
    /// One IPU-Link, each direction.
    pub ipu_link_bytes_per_sec: f64,
    pub ipu_links: u32,
    /// What connects the host, e.g. "PCIe Gen4 x16".
    pub host_link: String,
    /// Each direction.
    pub host_link_bytes_per_sec: f64,
    pub host_transfer_latency_cycles: u32,
    pub vertex_overhead_cycles: u32,
    /// Names of the constants that are estimates rather than published or
    /// measured figures.
    pub estimated_constants: Vec<String>,
}

/// A variable on a tile, with the model node that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileTensor {
    pub name: String,
    /// "" for model inputs and other tensors no node made.
    pub node: String,
    pub bytes: u64,
}

/// Memory of one tile at its peak, by category (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileMemory {
    pub ipu: u32,
    /// Tile index within its IPU.
    pub tile: u32,
    /// High-water mark of the variables (weights, activations, temporaries).
    pub variables: u64,
    /// Of `variables`, the always-live ones: weights and other constants.
    pub constants: u64,
    pub vertex_state: u64,
    pub code: u64,
    pub exchange_code: u64,
    pub control_code: u64,
    /// The largest variables live at the tile's peak, largest first.
    pub largest: Vec<TileTensor>,
}

impl TileMemory {
    pub fn total(&self) -> u64 {
        self.variables + self.vertex_state + self.code + self.exchange_code + self.control_code
    }
}

/// What the op library decided for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpPlan {
    /// The model node the operation lowers.
    pub name: String,
    /// "matmul", "conv", "map", "reduce", ...
    pub kind: String,
    pub ipu: u32,
    /// The planner's decision, human readable.
    pub plan: String,
    pub tiles_used: u32,
    /// Planner temporaries on the busiest tile.
    pub temp_bytes_per_tile: u64,
    pub estimated_cycles: u64,
}

/// The kinds of program step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// A compute set: every tile runs its vertices.
    Compute,
    /// Tiles copy data to other tiles (or IPUs).
    Exchange,
    /// An input streamed from the host.
    HostToDevice,
    /// An output streamed to the host.
    DeviceToHost,
}

impl StepKind {
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Compute => "compute",
            StepKind::Exchange => "exchange",
            StepKind::HostToDevice => "host_to_device",
            StepKind::DeviceToHost => "device_to_host",
        }
    }
}

/// A variable of a compiled program: a tensor in tile memory, in the device
/// type the precision policy gave it, and the model node that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The IPU of the replica whose program holds it.
    pub ipu: u32,
    pub name: String,
    /// "" for model inputs and tensors no node made.
    pub node: String,
    /// "input", "constant", "intermediate" or "temporary".
    pub kind: String,
    pub device_type: crate::dtype::DeviceType,
    pub shape: Vec<usize>,
    /// Tiles it is spread over.
    pub tiles: u32,
}

/// One term of a step's cost formula (docs/cost-model.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostTerm {
    /// What the term counts: "vertex" (a kind of vertex's work), "launch",
    /// "sync", "exchange" (bytes moved), "descriptors", "ipu_link",
    /// "host_latency", "host_link".
    pub kind: String,
    pub name: String,
    pub cycles: u64,
}

/// The estimated cost of one program step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCost {
    /// The IPU of the replica whose program the step belongs to.
    pub ipu: u32,
    pub kind: StepKind,
    pub name: String,
    pub cycles: u64,
    /// Bytes exchanged or streamed (0 for compute).
    pub bytes: u64,
    /// Vertices of a compute step, copy descriptors of an exchange.
    pub items: u64,
    /// The model node the step belongs to ("" for host streams).
    pub node: String,
    /// The tile (within the step's IPU) that set the cost.
    pub tile: Option<u32>,
    /// Bytes of variables live on the step's IPU during the step.
    pub live_bytes: u64,
    /// The terms of the cost formula; they sum to `cycles`.
    pub terms: Vec<CostTerm>,
}

/// Statistics of one run of a loaded program.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunStats {
    pub cycles: u64,
    pub compute_cycles: u64,
    pub exchange_cycles: u64,
    pub host_cycles: u64,
    pub steps: u64,
    pub exchanged_bytes: u64,
    /// Of `exchanged_bytes`, what the simulator copied between tile memories
    /// (the rest its vertices read where it was sent from: receive aliases).
    pub copied_bytes: u64,
    pub host_bytes: u64,
    /// Host time the simulation took ...
    pub wall_seconds: f64,
    /// ... of which in compute steps, in exchanges, and streaming.
    pub compute_seconds: f64,
    pub exchange_seconds: f64,
    pub host_io_seconds: f64,
    /// Host memory the loaded program's tile memory occupies ...
    pub host_memory_bytes: u64,
    /// ... of which the shadow regions that hold shadowed temporaries (bytes
    /// the device keeps in tile memory and the host, between a tile's
    /// copies and its vertices, in a region its range of tiles reuses).
    pub host_shadow_bytes: u64,
    /// The program's memory bounds were verified when it was loaded (the
    /// simulator's checked mode).
    pub checked: bool,
    /// Host time by step: a program's run (`DeviceEngine::last_run`) by its
    /// program steps, an executable's run by the steps of its report
    /// (`DeviceReport::steps`), summed over micro-batches and replicas. A
    /// fused exchange's time is its compute step's (its own entry is 0).
    pub step_seconds: Vec<f64>,
}

/// Everything a device says about a compiled program.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceReport {
    pub system: SystemInfo,
    /// IPUs the program spans.
    pub num_ipus: u32,
    /// Tiles that hold anything.
    pub tiles: Vec<TileMemory>,
    pub plans: Vec<OpPlan>,
    /// One entry per step of the program as run.
    pub steps: Vec<StepCost>,
    /// Every variable of the program.
    pub variables: Vec<Variable>,
    pub warnings: Vec<String>,
    pub cycles_per_run: u64,
}
