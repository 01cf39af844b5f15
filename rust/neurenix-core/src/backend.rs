//! The device seam: what the compiler needs from a device.
//!
//! - [`Backend`]: a device's graph library, onto which a model is lowered
//!   operation by operation, and which compiles what was built;
//! - [`DeviceExecutable`]: the compiled program, with its report;
//! - [`DeviceEngine`]: the program loaded onto the device, which runs it.
//!
//! The simulator (the C++ core, bridged by `neurenix-sys`) is one
//! implementation; a Poplar-backed one would be another. The compiler only
//! ever talks to these traits, so the core can be tested with no C++ at all.

use crate::dtype::DeviceType;
use crate::error::Result;
use crate::expr::ExprInstr;
use crate::report::{DeviceReport, RunStats};

pub type TensorId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    Prod,
    SumSquare,
    SumAbs,
    /// The largest magnitude.
    MaxAbs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceFinal {
    None,
    Scale,
    Sqrt,
    Log,
    /// The power-of-two scale of a float8 tensor whose largest magnitude
    /// is the result (`Float8::scale_for`); the reduction's `scale` argument
    /// is the ONNX code of the float8 format.
    Float8Scale,
}

/// How to plan a matmul. `memory_proportion` is Poplar's
/// `availableMemoryProportion`: the fraction of each tile's memory the
/// planner may use for temporaries. `partials` is the accumulation type.
#[derive(Debug, Clone)]
pub struct MatMulOptions {
    pub memory_proportion: f64,
    pub partials: DeviceType,
    pub out_dtype: DeviceType,
    pub ipu: u32,
    pub name: String,
    /// Float8 operands (both of one float8 type): their power-of-two
    /// scales, float32 scalars, A's and B's; the partials are then half.
    pub scales: Option<[TensorId; 2]>,
}

/// How to plan a 2-D convolution (NCHW / OIHW). Pads: top, left, bottom,
/// right; `memory_proportion` and `partials` as for [`MatMulOptions`].
#[derive(Debug, Clone)]
pub struct ConvOptions {
    pub groups: u32,
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    pub pads: [u32; 4],
    pub memory_proportion: f64,
    pub partials: DeviceType,
    pub out_dtype: DeviceType,
    pub ipu: u32,
    pub name: String,
    /// As [`MatMulOptions::scales`] (the input's and the weights'); the
    /// bias is then half.
    pub scales: Option<[TensorId; 2]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    Max,
    Average,
    AverageIncludePad,
}

/// How to pool over the two innermost dimensions. Pads: top, left, bottom,
/// right.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    pub mode: PoolMode,
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    pub pads: [u32; 4],
    pub out_hw: [u32; 2],
    pub ipu: u32,
    pub name: String,
}

fn not_implemented(what: &str) -> crate::error::Error {
    crate::error::Error::Internal(format!("this backend does not implement {what}"))
}

/// A graph library for one device. Tensor handles are small integers valid
/// within one backend instance. Shapes are row-major.
pub trait Backend {
    fn add_input(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        ipu: u32,
    ) -> Result<TensorId>;
    /// A constant holding `data` (its bytes in `dtype`), which the backend
    /// keeps.
    fn add_constant(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        data: Vec<u8>,
        ipu: u32,
    ) -> Result<TensorId>;
    /// [G, M, K] x [G, K, N] -> [G, M, N].
    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId>;
    /// Element-wise expression over operands broadcast to `out_shape`.
    fn map(
        &mut self,
        expr: &[ExprInstr],
        inputs: &[TensorId],
        out_dtype: DeviceType,
        out_shape: &[usize],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    /// Reduces `axes` away (the result drops them).
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        x: TensorId,
        axes: &[usize],
        op: ReduceOp,
        final_op: ReduceFinal,
        scale: f64,
        out_dtype: DeviceType,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    /// Same elements, new shape: free.
    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId>;
    /// Materialises a strided view (element offset and strides into x's
    /// row-major elements; stride 0 broadcasts).
    fn rearrange(
        &mut self,
        x: TensorId,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId>;
    fn fill(
        &mut self,
        dtype: DeviceType,
        shape: &[usize],
        value: f64,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    /// Streams `x` back to the host as output number (call order).
    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()>;
    /// x [N, C, H, W] (*) w [Co, C/groups, kh, kw] (+ bias [Co]) -> [N, Co, Ho, Wo].
    fn conv(
        &mut self,
        _x: TensorId,
        _w: TensorId,
        _bias: Option<TensorId>,
        _p: &ConvOptions,
    ) -> Result<TensorId> {
        Err(not_implemented("conv"))
    }
    /// [..., H, W] -> [..., out_h, out_w].
    fn pool(&mut self, _x: TensorId, _p: &PoolOptions) -> Result<TensorId> {
        Err(not_implemented("pool"))
    }
    /// table [V, D], int32 indices (any shape, n elements) -> [n, D]; indices
    /// are only known at run time.
    fn gather_rows(
        &mut self,
        _table: TensorId,
        _indices: TensorId,
        _ipu: u32,
        _name: &str,
    ) -> Result<TensorId> {
        Err(not_implemented("gather_rows"))
    }
    /// Copies `src` into `dst`, a constant, at this point of the program:
    /// state the next run reads (a trained weight, an optimizer's moment).
    fn assign(&mut self, _dst: TensorId, _src: TensorId, _name: &str) -> Result<()> {
        Err(not_implemented("assign"))
    }
    /// Lays tensor `x`, which nobody has placed yet, evenly over its IPU's
    /// tiles (instead of where its first reader would put it).
    fn spread(&mut self, _x: TensorId) -> Result<()> {
        Ok(())
    }
    /// Lays tensor `x`, if nobody has placed it yet, out on the tiles like
    /// `like` (which is then placed if it was not).
    fn place_like(&mut self, _x: TensorId, _like: TensorId) -> Result<()> {
        Ok(())
    }
    /// Starts the program's second segment: what is built from now on runs
    /// only when the engine runs segment 1 (a training step's update, after
    /// its gradients were all-reduced over the replicas).
    fn begin_segment(&mut self) -> Result<()> {
        Err(not_implemented("begin_segment"))
    }
    /// What is built from now on lowers model node `node` ("" for none:
    /// model inputs, outputs and carried tensors), for reports.
    fn begin_node(&mut self, _node: &str) {}
    /// Bytes of tile memory of one IPU (the most one tensor can occupy).
    fn ipu_memory_bytes(&self) -> u64 {
        u64::MAX
    }
    /// The system the backend compiles for (None: not described).
    fn system(&self) -> Option<crate::report::SystemInfo> {
        None
    }
    /// Compiles everything built so far into a program for the device.
    /// Tiles that overflow are an `Error::OutOfMemory` naming each of them.
    fn compile(self: Box<Self>) -> Result<Box<dyn DeviceExecutable>> {
        Err(not_implemented("compile"))
    }
}

/// A compiled program.
pub trait DeviceExecutable: Send + Sync {
    /// Memory, plans, step costs and warnings of the program.
    fn report(&self) -> DeviceReport;
    /// Loads the program into fresh device memory.
    fn load(&self, options: &EngineOptions) -> Result<Box<dyn DeviceEngine>>;
}

/// The floating-point behaviour of a run (Poplar's `FloatingPointBehaviour`
/// and seed): stochastic rounding of float32 results stored as float16,
/// from per-tile generators seeded from `seed`, the IPU and the tile when
/// the program is loaded (their state carries from run to run); and
/// exceptions, which stop a run at the first
/// infinity or NaN an operation makes from finite operands
/// (`Error::FloatingPoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FloatingPointBehaviour {
    pub stochastic_rounding: bool,
    pub seed: u64,
    pub exceptions: bool,
}

/// How one program is loaded: host threads (0: the device's default), the
/// floating-point behaviour, the IPU it runs on (its replica's IPU number,
/// which seeds its generators and names it in errors), and whether other
/// programs run on the same host cores between its runs (the stages of a
/// sharded model take turns: its threads then leave the cores at the end of
/// each run instead of waiting for a next step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineOptions {
    pub threads: u32,
    pub floating_point: FloatingPointBehaviour,
    pub ipu: u32,
    pub shares_cores: bool,
}

/// A program loaded onto a device.
pub trait DeviceEngine: Send {
    /// Runs once. `inputs`: each input's bytes in its device type, in the
    /// program's input order; returns the outputs' bytes in their device
    /// types, in output order.
    fn run(&mut self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>>;
    /// Statistics of the last run (None before the first).
    fn last_run(&self) -> Option<RunStats>;
    /// Runs one segment of the program (`Backend::begin_segment`); inputs are
    /// written for segment 0, whose end streams the outputs (returned).
    fn run_segment(&mut self, segment: u32, _inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        Err(crate::error::Error::Internal(format!(
            "this device cannot run segment {segment} alone"
        )))
    }
    /// The bytes of state tensor (constant) `name`, in its device type, as
    /// the last run left them.
    fn read_state(&self, name: &str) -> Result<Vec<u8>> {
        Err(crate::error::Error::Internal(format!(
            "this device cannot read state '{name}'"
        )))
    }
    /// Overwrites state tensor (constant) `name` with `data`.
    fn write_state(&mut self, name: &str, _data: &[u8]) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "this device cannot write state '{name}'"
        )))
    }
}
