//! The `cxx` bridge to the C++ core: shared enums (defined in C++; cxx
//! asserts at compile time that every variant and value written here
//! matches), shared structs, and the C++ adaptors of `cxx/bridge.h`.
//!
//! Every C++ function that can fail returns `Result`: its exception becomes
//! an `Err` (see `crate::error`), never an abort.

#![allow(non_camel_case_types)]

use cxx::{type_id, ExternType};
use neurenix_core::expr::ExprOp;

/// The C++ core's `neurenix::ExprOpCode`: the core's `ExprOp` passed as is.
/// Both enumerate `cpp/include/neurenix/expr_ops.def` in order, as
/// `uint16_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExprOpCode(pub ExprOp);

// SAFETY: `ExprOp` is `#[repr(u16)]` with the codes 0.. in the order of
// expr_ops.def, and `neurenix::ExprOpCode` is `enum class : uint16_t`
// expanded from the same file: same size, alignment and values. Values
// only travel from Rust to C++.
unsafe impl ExternType for ExprOpCode {
    type Id = type_id!("neurenix::ExprOpCode");
    type Kind = cxx::kind::Trivial;
}

#[cxx::bridge(namespace = "neurenix::bridge")]
pub mod ffi {
    // -- Shared enums (defined by the C++ core) --------------------------------

    /// Element types of tile memory.
    #[namespace = "neurenix"]
    #[repr(u8)]
    enum DeviceType {
        kFloat32 = 0,
        kFloat16 = 1,
        kInt32 = 2,
        kBool = 3,
        kFloat8E4M3FNUZ = 4,
        kFloat8E5M2FNUZ = 5,
    }

    #[namespace = "neurenix"]
    #[repr(u8)]
    enum ReduceOp {
        kSum,
        kMax,
        kMin,
        kProd,
        kSumSquare,
        kSumAbs,
        kMaxAbs,
    }

    #[namespace = "neurenix"]
    #[repr(u8)]
    enum ReduceFinal {
        kNone,
        kScale,
        kSqrt,
        kLog,
        kFloat8Scale,
    }

    #[namespace = "neurenix"]
    #[repr(u8)]
    enum PoolMode {
        kMax,
        kAverage,
        kAverageIncludePad,
    }

    #[namespace = "neurenix"]
    #[repr(u8)]
    enum StepKind {
        kCompute,
        kExchange,
        kHostToDevice,
        kDeviceToHost,
    }

    #[namespace = "neurenix"]
    #[repr(u8)]
    enum ErrorCode {
        kInvalidArgument,
        kShapeMismatch,
        kOutOfMemory,
        kDeviceUnavailable,
        kUnsupported,
        kInvalidState,
        kInternal,
        kFloatingPoint,
    }

    // -- Shared structs ----------------------------------------------------------

    /// One postfix instruction of an element-wise expression.
    struct ExprInstr {
        op: ExprOpCode,
        arg: u32,
        imm: f64,
        imm2: f64,
        half: bool,
    }

    struct MatMulOptions {
        memory_proportion: f64,
        partials: DeviceType,
        out_dtype: DeviceType,
        ipu: u32,
        name: String,
        /// Float8 operands: their scales (float32 scalars), A's then B's;
        /// empty otherwise.
        scales: Vec<u32>,
    }

    /// A 2-D window: kernel, strides, dilations and pads (top, left, bottom,
    /// right) over the two innermost dimensions.
    struct Window {
        kh: u32,
        kw: u32,
        sh: u32,
        sw: u32,
        dh: u32,
        dw: u32,
        pad_top: u32,
        pad_left: u32,
        pad_bottom: u32,
        pad_right: u32,
    }

    /// 2-D convolution (NCHW / OIHW).
    struct ConvOptions {
        groups: u32,
        window: Window,
        memory_proportion: f64,
        partials: DeviceType,
        out_dtype: DeviceType,
        ipu: u32,
        name: String,
        /// As `MatMulOptions::scales` (the input's, then the weights').
        scales: Vec<u32>,
    }

    /// Pooling over the two innermost dimensions.
    struct PoolOptions {
        mode: PoolMode,
        window: Window,
        out_h: u32,
        out_w: u32,
        ipu: u32,
        name: String,
    }

    /// A variable on a tile and the model node that owns it ("" for none).
    struct TileTensor {
        name: String,
        node: String,
        bytes: u64,
    }

    /// A tile that does not fit, with the largest consumers live at its peak.
    struct TileOverflow {
        ipu: u32,
        tile: u32,
        used: u64,
        capacity: u64,
        largest: Vec<TileTensor>,
    }

    /// Peak memory of one tile (`tile`: index within IPU `ipu`).
    struct TileMemory {
        ipu: u32,
        tile: u32,
        variables: u64,
        /// Of `variables`, the always-live constants.
        constants: u64,
        vertex_state: u64,
        code: u64,
        exchange_code: u64,
        control_code: u64,
        /// Live at the peak, largest first.
        largest: Vec<TileTensor>,
    }

    /// A variable of the program: what it holds, on how many tiles, for
    /// which model node. `kind`: "input", "constant", "intermediate",
    /// "temporary".
    struct Variable {
        name: String,
        node: String,
        kind: String,
        device_type: DeviceType,
        shape: Vec<u64>,
        tiles: u32,
    }

    /// One term of a step's cost formula.
    struct CostTerm {
        /// "vertex", "launch", "sync", "exchange", "descriptors",
        /// "ipu_link", "host_latency" or "host_link".
        kind: String,
        name: String,
        cycles: u64,
    }

    struct OpPlan {
        name: String,
        kind: String,
        ipu: u32,
        plan: String,
        tiles_used: u32,
        temp_bytes_per_tile: u64,
        estimated_cycles: u64,
    }

    struct StepCost {
        kind: StepKind,
        name: String,
        cycles: u64,
        bytes: u64,
        items: u64,
        /// The model node the step belongs to ("" for none).
        node: String,
        /// The tile that set the cost, within its IPU; -1 for none.
        tile: i64,
        live_bytes: u64,
        /// They sum to `cycles`.
        terms: Vec<CostTerm>,
    }

    /// How a loaded program runs (the C++ `EngineOptions`).
    struct EngineOptions {
        threads: u32,
        stochastic_rounding: bool,
        seed: u64,
        ipu: u32,
        fp_exceptions: bool,
        shares_cores: bool,
    }

    struct RunStats {
        cycles: u64,
        compute_cycles: u64,
        exchange_cycles: u64,
        host_cycles: u64,
        steps: u64,
        exchanged_bytes: u64,
        copied_bytes: u64,
        host_bytes: u64,
        wall_seconds: f64,
        compute_seconds: f64,
        exchange_seconds: f64,
        host_io_seconds: f64,
        /// Host seconds by program step (the C++ `RunStats::step_seconds`).
        step_seconds: Vec<f64>,
    }

    struct SystemInfo {
        version: String,
        chip: String,
        num_ipus: u32,
        tiles_per_ipu: u32,
        bytes_per_tile: u64,
        clock_hz: f64,
        fp16_flops_per_cycle: u32,
        fp32_flops_per_cycle: u32,
        fp8_flops_per_cycle: u32,
        worker_threads: u32,
        exchange_bytes_per_cycle: u32,
        exchange_descriptor_cycles: u32,
        local_read_bytes_per_cycle: u32,
        local_write_bytes_per_cycle: u32,
        sync_cycles: u32,
        cross_ipu_sync_cycles: u32,
        ipu_link_bytes_per_sec: f64,
        ipu_links: u32,
        host_link: String,
        host_link_bytes_per_sec: f64,
        host_transfer_latency_cycles: u32,
        vertex_overhead_cycles: u32,
        /// Names of the constants that are estimates, not published figures.
        estimated_constants: Vec<String>,
    }

    struct DeviceInfo {
        id: u32,
        ipus: Vec<u32>,
    }

    // -- C++ exposed to Rust ---------------------------------------------------------

    unsafe extern "C++" {
        include!("neurenix-sys/cxx/bridge.h");

        #[namespace = "neurenix"]
        type DeviceType;
        #[namespace = "neurenix"]
        type ReduceOp;
        #[namespace = "neurenix"]
        type ReduceFinal;
        #[namespace = "neurenix"]
        type PoolMode;
        #[namespace = "neurenix"]
        type StepKind;
        #[namespace = "neurenix"]
        type ErrorCode;
        #[namespace = "neurenix"]
        type ExprOpCode = crate::bridge::ExprOpCode;

        type GraphBuilder;
        type Executable;
        type Engine;
        type DeviceManager;
        type Device;

        /// The code of the last C++ exception this thread turned into an
        /// `Err` (read right after the failing call).
        fn last_error_code() -> ErrorCode;

        /// Parses and validates an IPU model description.
        fn describe_system(spec: &str) -> Result<SystemInfo>;
        /// The C++ core's name for an expression operation.
        #[allow(dead_code)] // read by the tests, which check both sides agree
        fn expr_op_name(op: ExprOpCode) -> String;

        fn new_graph(spec: &str, num_ipus: u32) -> Result<UniquePtr<GraphBuilder>>;
        fn add_input(
            self: Pin<&mut GraphBuilder>,
            name: &str,
            dtype: DeviceType,
            shape: &[u64],
            ipu: u32,
        ) -> Result<u32>;
        /// Takes `data` (a constant's encoded bytes): the graph keeps it.
        fn add_constant(
            self: Pin<&mut GraphBuilder>,
            name: &str,
            dtype: DeviceType,
            shape: &[u64],
            data: Vec<u8>,
            ipu: u32,
        ) -> Result<u32>;
        fn matmul(
            self: Pin<&mut GraphBuilder>,
            a: u32,
            b: u32,
            options: &MatMulOptions,
        ) -> Result<u32>;
        fn map(
            self: Pin<&mut GraphBuilder>,
            expr: &[ExprInstr],
            inputs: &[u32],
            out_dtype: DeviceType,
            shape: &[u64],
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        #[allow(clippy::too_many_arguments)]
        fn reduce(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            axes: &[u32],
            op: ReduceOp,
            final_op: ReduceFinal,
            scale: f64,
            out_dtype: DeviceType,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn reshape(self: Pin<&mut GraphBuilder>, x: u32, shape: &[u64]) -> Result<u32>;
        fn rearrange(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            offset: i64,
            shape: &[u64],
            strides: &[i64],
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn concat(
            self: Pin<&mut GraphBuilder>,
            xs: &[u32],
            axis: u32,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn fill(
            self: Pin<&mut GraphBuilder>,
            dtype: DeviceType,
            shape: &[u64],
            value: f64,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn mark_output(self: Pin<&mut GraphBuilder>, x: u32, name: &str) -> Result<()>;
        /// What is added from now on belongs to model node `node` ("": none).
        fn begin_node(self: Pin<&mut GraphBuilder>, node: &str);
        /// `bias`: empty, or the one bias tensor.
        fn conv(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            w: u32,
            bias: &[u32],
            options: &ConvOptions,
        ) -> Result<u32>;
        fn pool(self: Pin<&mut GraphBuilder>, x: u32, options: &PoolOptions) -> Result<u32>;
        fn gather_rows(
            self: Pin<&mut GraphBuilder>,
            table: u32,
            indices: u32,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        /// Copies `src` into the constant `dst` at this point of the program.
        fn assign(self: Pin<&mut GraphBuilder>, dst: u32, src: u32, name: &str) -> Result<()>;
        /// Lays a tensor nobody has placed yet out evenly over its IPU's tiles.
        fn spread(self: Pin<&mut GraphBuilder>, x: u32) -> Result<()>;
        /// Lays `x` out like `like`, unless it is placed already.
        fn place_like(self: Pin<&mut GraphBuilder>, x: u32, like: u32) -> Result<()>;
        /// Starts the program's second segment (at most one boundary).
        fn begin_segment(self: Pin<&mut GraphBuilder>) -> Result<()>;
        /// Compiles the graph built so far; the builder is left empty.
        fn compile(self: Pin<&mut GraphBuilder>) -> Result<UniquePtr<Executable>>;

        fn fits(self: &Executable) -> bool;
        fn overflows(self: &Executable) -> Vec<TileOverflow>;
        fn tile_memory(self: &Executable) -> Vec<TileMemory>;
        fn op_plans(self: &Executable) -> Vec<OpPlan>;
        fn step_costs(self: &Executable) -> Vec<StepCost>;
        fn variables(self: &Executable) -> Vec<Variable>;
        fn warnings(self: &Executable) -> Vec<String>;
        fn system(self: &Executable) -> SystemInfo;
        fn num_ipus(self: &Executable) -> u32;
        fn cycles_per_run(self: &Executable) -> u64;
        fn load(self: &Executable, options: &EngineOptions) -> Result<UniquePtr<Engine>>;

        fn write_input(self: Pin<&mut Engine>, index: u32, data: &[u8]) -> Result<()>;
        fn run(self: Pin<&mut Engine>) -> Result<()>;
        fn run_segment(self: Pin<&mut Engine>, segment: u32) -> Result<()>;
        fn num_outputs(self: &Engine) -> u32;
        fn output_bytes(self: &Engine, index: u32) -> Result<u64>;
        fn read_output(self: &Engine, index: u32, out: &mut [u8]) -> Result<()>;
        fn constant_bytes(self: &Engine, name: &str) -> Result<u64>;
        fn read_constant(self: &Engine, name: &str, out: &mut [u8]) -> Result<()>;
        fn write_constant(self: Pin<&mut Engine>, name: &str, data: &[u8]) -> Result<()>;
        fn last_run(self: &Engine) -> RunStats;
        fn arena_bytes(self: &Engine) -> u64;
        fn shadow_block_bytes(self: &Engine) -> u64;
        fn checked(self: &Engine) -> bool;

        fn new_device_manager(spec: &str, lock_dir: &str) -> Result<UniquePtr<DeviceManager>>;
        fn devices(self: &DeviceManager) -> Vec<DeviceInfo>;
        fn holder_pid(self: &DeviceManager, ipu: u32) -> i32;
        fn lock_dir(self: &DeviceManager) -> String;
        /// `device_id`: empty for any free group of `num_ipus`.
        fn attach(
            self: Pin<&mut DeviceManager>,
            num_ipus: u32,
            device_id: &[u32],
            timeout_seconds: f64,
        ) -> Result<UniquePtr<Device>>;
        fn last_busy_ipus(self: &DeviceManager) -> Vec<u32>;
        fn last_busy_pids(self: &DeviceManager) -> Vec<i32>;

        fn id(self: &Device) -> u32;
        fn ipus(self: &Device) -> Vec<u32>;
        fn attached(self: &Device) -> bool;
        fn detach(self: Pin<&mut Device>);
    }
}

// The C++ objects hold no thread-affine state; their Rust owners serialise
// access.
unsafe impl Send for ffi::GraphBuilder {}
unsafe impl Send for ffi::Executable {}
unsafe impl Sync for ffi::Executable {}
unsafe impl Send for ffi::Engine {}
unsafe impl Send for ffi::DeviceManager {}
unsafe impl Send for ffi::Device {}
