//! neurenix-sys: the only crate that sees C++. It bridges the C++ Poplar core
//! and IPU simulator (`cpp/`) with the `cxx` crate and implements
//! [`neurenix_core::backend::Backend`] on top of it.
//!
//! Every fallible C++ function is declared returning `Result`, so a C++
//! exception arrives as an error (parsed by `Error::from_core`), never as an
//! abort.

use cxx::UniquePtr;
use neurenix_core::backend::{
    Backend, ConvOptions, DeviceEngine, DeviceExecutable, MatMulOptions, PoolOptions, ReduceFinal,
    ReduceOp, TensorId,
};
use neurenix_core::dtype::DeviceType;
use neurenix_core::error::{Error, Result, TileOverflow};
use neurenix_core::expr::ExprInstr;
use neurenix_core::report;

#[cxx::bridge(namespace = "neurenix::bridge")]
pub mod ffi {
    // -- Shared structs ------------------------------------------------------

    struct ExprInstrFfi {
        op: u16,
        arg: u32,
        imm: f64,
        imm2: f64,
        half: bool,
    }

    struct ConsumerFfi {
        name: String,
        bytes: u64,
    }

    struct TileOverflowFfi {
        ipu: u32,
        tile: u32,
        used: u64,
        capacity: u64,
        largest: Vec<ConsumerFfi>,
    }

    struct TileMemoryFfi {
        tile: u32,
        variables: u64,
        vertex_state: u64,
        code: u64,
        exchange_code: u64,
        control_code: u64,
    }

    struct OpRecordFfi {
        name: String,
        kind: String,
        ipu: u32,
        plan: String,
        tiles_used: u32,
        temp_bytes: u64,
        est_cycles: u64,
    }

    struct StepCostFfi {
        kind: u8,
        name: String,
        cycles: u64,
        bytes: u64,
        items: u64,
    }

    struct RunStatsFfi {
        cycles: u64,
        compute_cycles: u64,
        exchange_cycles: u64,
        host_cycles: u64,
        steps: u64,
        exchanged_bytes: u64,
        host_bytes: u64,
        wall_seconds: f64,
        compute_seconds: f64,
        exchange_seconds: f64,
        host_io_seconds: f64,
    }

    struct SystemInfoFfi {
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
        sync_cycles: u32,
        ipu_link_bytes_per_sec: f64,
        ipu_links: u32,
        host_link_bytes_per_sec: f64,
    }

    struct DeviceInfoFfi {
        id: u32,
        ipus: Vec<u32>,
    }

    // -- C++ exposed to Rust -------------------------------------------------

    unsafe extern "C++" {
        include!("neurenix-sys/cxx/bridge.h");

        type GraphBuilder;
        type CompiledGraph;
        type EngineHandle;
        type DeviceManagerHandle;
        type DeviceHandle;

        /// Parses and validates an IPU model description.
        fn describe_system(spec: &str) -> Result<SystemInfoFfi>;
        fn expr_op_name(code: u16) -> String;

        fn new_graph(spec: &str, num_ipus: u32) -> Result<UniquePtr<GraphBuilder>>;
        fn add_input(
            self: Pin<&mut GraphBuilder>,
            name: &str,
            dtype: u8,
            shape: &[u64],
            ipu: u32,
        ) -> Result<u32>;
        fn add_constant(
            self: Pin<&mut GraphBuilder>,
            name: &str,
            dtype: u8,
            shape: &[u64],
            data: &[u8],
            ipu: u32,
        ) -> Result<u32>;
        fn matmul(
            self: Pin<&mut GraphBuilder>,
            a: u32,
            b: u32,
            memory_proportion: f64,
            partials: u8,
            out_dtype: u8,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn map(
            self: Pin<&mut GraphBuilder>,
            expr: &[ExprInstrFfi],
            inputs: &[u32],
            out_dtype: u8,
            shape: &[u64],
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn reduce(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            axes: &[u32],
            op: u8,
            final_op: u8,
            scale: f64,
            out_dtype: u8,
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
            dtype: u8,
            shape: &[u64],
            value: f64,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn copy_to_ipu(self: Pin<&mut GraphBuilder>, x: u32, ipu: u32, name: &str) -> Result<u32>;
        fn mark_output(self: Pin<&mut GraphBuilder>, x: u32, name: &str) -> Result<()>;
        /// params: groups, kh, kw, sh, sw, dh, dw, pad top, left, bottom, right.
        fn conv(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            w: u32,
            bias: i64,
            params: &[u32],
            memory_proportion: f64,
            partials: u8,
            out_dtype: u8,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        /// params: mode, kh, kw, sh, sw, dh, dw, pad top, left, bottom, right, out_h, out_w.
        fn pool(
            self: Pin<&mut GraphBuilder>,
            x: u32,
            params: &[u32],
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        fn gather_rows(
            self: Pin<&mut GraphBuilder>,
            table: u32,
            indices: u32,
            ipu: u32,
            name: &str,
        ) -> Result<u32>;
        /// Compiles the graph built so far; the builder is left empty.
        fn compile(self: Pin<&mut GraphBuilder>) -> Result<UniquePtr<CompiledGraph>>;

        fn fits(self: &CompiledGraph) -> bool;
        fn overflows(self: &CompiledGraph) -> Vec<TileOverflowFfi>;
        fn tile_memory(self: &CompiledGraph) -> Vec<TileMemoryFfi>;
        fn op_records(self: &CompiledGraph) -> Vec<OpRecordFfi>;
        fn step_costs(self: &CompiledGraph) -> Vec<StepCostFfi>;
        fn warnings(self: &CompiledGraph) -> Vec<String>;
        fn system(self: &CompiledGraph) -> SystemInfoFfi;
        fn num_ipus_used(self: &CompiledGraph) -> u32;
        fn cycles_per_run(self: &CompiledGraph) -> u64;

        fn load_engine(graph: &CompiledGraph, threads: u32) -> Result<UniquePtr<EngineHandle>>;
        fn write_input(self: Pin<&mut EngineHandle>, index: u32, data: &[u8]) -> Result<()>;
        fn run(self: Pin<&mut EngineHandle>) -> Result<()>;
        fn read_output(self: &EngineHandle, index: u32, out: &mut [u8]) -> Result<()>;
        fn output_bytes(self: &EngineHandle, index: u32) -> u64;
        fn last_run(self: &EngineHandle) -> RunStatsFfi;
        fn arena_bytes(self: &EngineHandle) -> u64;

        fn new_device_manager(spec: &str, lock_dir: &str)
            -> Result<UniquePtr<DeviceManagerHandle>>;
        fn devices(self: &DeviceManagerHandle) -> Vec<DeviceInfoFfi>;
        fn holder_pid(self: &DeviceManagerHandle, ipu: u32) -> i32;
        fn lock_dir(self: &DeviceManagerHandle) -> String;
        fn attach(
            self: Pin<&mut DeviceManagerHandle>,
            num_ipus: u32,
            device_id: i64,
            timeout_seconds: f64,
        ) -> Result<UniquePtr<DeviceHandle>>;
        fn last_busy_ipus(self: &DeviceManagerHandle) -> Vec<u32>;
        fn last_busy_pids(self: &DeviceManagerHandle) -> Vec<i32>;

        fn id(self: &DeviceHandle) -> u32;
        fn ipus(self: &DeviceHandle) -> Vec<u32>;
        fn attached(self: &DeviceHandle) -> bool;
        fn detach(self: Pin<&mut DeviceHandle>);
    }
}

// The C++ objects hold no thread-affine state; Rust owners serialise access.
unsafe impl Send for ffi::GraphBuilder {}
unsafe impl Send for ffi::CompiledGraph {}
unsafe impl Sync for ffi::CompiledGraph {}
unsafe impl Send for ffi::EngineHandle {}
unsafe impl Send for ffi::DeviceManagerHandle {}
unsafe impl Send for ffi::DeviceHandle {}

pub use ffi::DeviceInfoFfi as DeviceInfo;
use ffi::{
    OpRecordFfi as OpRecord, RunStatsFfi as RunStats, StepCostFfi as StepCost,
    SystemInfoFfi as SystemInfo, TileMemoryFfi as TileMemory,
};

fn core_err(e: cxx::Exception) -> Error {
    Error::from_core(e.what())
}

fn shape64(shape: &[usize]) -> Vec<u64> {
    shape.iter().map(|&d| d as u64).collect()
}

/// Validates an IPU model description ("version=ipu2,num_ipus=16,...").
pub fn describe_system(spec: &str) -> Result<report::SystemInfo> {
    ffi::describe_system(spec)
        .map(system_info)
        .map_err(core_err)
}

/// The C++ core's name for an expression opcode (for consistency checks).
pub fn expr_op_name(code: u16) -> String {
    ffi::expr_op_name(code)
}

/// The simulator's graph library, as a compiler backend.
pub struct GraphBuilder {
    builder: UniquePtr<ffi::GraphBuilder>,
    ipu_memory_bytes: u64,
}

impl GraphBuilder {
    /// A graph for `num_ipus` IPUs of the system `spec` describes.
    pub fn new(spec: &str, num_ipus: u32) -> Result<GraphBuilder> {
        let system = describe_system(spec)?;
        Ok(GraphBuilder {
            builder: ffi::new_graph(spec, num_ipus).map_err(core_err)?,
            ipu_memory_bytes: u64::from(system.tiles_per_ipu).saturating_mul(system.bytes_per_tile),
        })
    }

    fn compile_graph(mut self) -> Result<Executable> {
        let g = self.builder.pin_mut().compile().map_err(core_err)?;
        if !g.fits() {
            let tiles: Vec<TileOverflow> = g
                .overflows()
                .into_iter()
                .map(|o| TileOverflow {
                    ipu: o.ipu,
                    tile: o.tile,
                    used: o.used,
                    capacity: o.capacity,
                    largest: o.largest.into_iter().map(|c| (c.name, c.bytes)).collect(),
                })
                .collect();
            return Err(Error::out_of_memory(
                tiles,
                "The model does not fit: use more IPUs (num_ipus), a lower memory_proportion, \
                 float16 precision, or a smaller batch.",
            ));
        }
        Ok(Executable { graph: g })
    }
}

impl Backend for GraphBuilder {
    fn ipu_memory_bytes(&self) -> u64 {
        self.ipu_memory_bytes
    }
    fn compile(self: Box<Self>) -> Result<Box<dyn DeviceExecutable>> {
        Ok(Box::new(self.compile_graph()?))
    }
    fn add_input(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        ipu: u32,
    ) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .add_input(name, dtype.code(), &shape64(shape), ipu)
            .map_err(core_err)
    }
    fn add_constant(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        data: &[u8],
        ipu: u32,
    ) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .add_constant(name, dtype.code(), &shape64(shape), data, ipu)
            .map_err(core_err)
    }
    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .matmul(
                a,
                b,
                p.memory_proportion,
                p.partials.code(),
                p.out_dtype.code(),
                p.ipu,
                &p.name,
            )
            .map_err(core_err)
    }
    fn map(
        &mut self,
        expr: &[ExprInstr],
        inputs: &[TensorId],
        out_dtype: DeviceType,
        out_shape: &[usize],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let e: Vec<ffi::ExprInstrFfi> = expr
            .iter()
            .map(|i| ffi::ExprInstrFfi {
                op: i.op,
                arg: i.arg,
                imm: i.imm,
                imm2: i.imm2,
                half: i.half,
            })
            .collect();
        self.builder
            .pin_mut()
            .map(&e, inputs, out_dtype.code(), &shape64(out_shape), ipu, name)
            .map_err(core_err)
    }
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
    ) -> Result<TensorId> {
        let axes: Vec<u32> = axes.iter().map(|&a| a as u32).collect();
        self.builder
            .pin_mut()
            .reduce(
                x,
                &axes,
                op as u8,
                final_op as u8,
                scale,
                out_dtype.code(),
                ipu,
                name,
            )
            .map_err(core_err)
    }
    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .reshape(x, &shape64(shape))
            .map_err(core_err)
    }
    fn rearrange(
        &mut self,
        x: TensorId,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .rearrange(x, offset, &shape64(shape), strides, ipu, name)
            .map_err(core_err)
    }
    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .concat(xs, axis as u32, ipu, name)
            .map_err(core_err)
    }
    fn fill(
        &mut self,
        dtype: DeviceType,
        shape: &[usize],
        value: f64,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .fill(dtype.code(), &shape64(shape), value, ipu, name)
            .map_err(core_err)
    }
    fn copy_to_ipu(&mut self, x: TensorId, ipu: u32, name: &str) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .copy_to_ipu(x, ipu, name)
            .map_err(core_err)
    }
    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()> {
        self.builder
            .pin_mut()
            .mark_output(x, name)
            .map_err(core_err)
    }
    fn conv(
        &mut self,
        x: TensorId,
        w: TensorId,
        bias: Option<TensorId>,
        p: &ConvOptions,
    ) -> Result<TensorId> {
        let params = [
            p.groups,
            p.kernel[0],
            p.kernel[1],
            p.strides[0],
            p.strides[1],
            p.dilations[0],
            p.dilations[1],
            p.pads[0],
            p.pads[1],
            p.pads[2],
            p.pads[3],
        ];
        self.builder
            .pin_mut()
            .conv(
                x,
                w,
                bias.map(i64::from).unwrap_or(-1),
                &params,
                p.memory_proportion,
                p.partials.code(),
                p.out_dtype.code(),
                p.ipu,
                &p.name,
            )
            .map_err(core_err)
    }
    fn pool(&mut self, x: TensorId, p: &PoolOptions) -> Result<TensorId> {
        let params = [
            p.mode as u32,
            p.kernel[0],
            p.kernel[1],
            p.strides[0],
            p.strides[1],
            p.dilations[0],
            p.dilations[1],
            p.pads[0],
            p.pads[1],
            p.pads[2],
            p.pads[3],
            p.out_hw[0],
            p.out_hw[1],
        ];
        self.builder
            .pin_mut()
            .pool(x, &params, p.ipu, &p.name)
            .map_err(core_err)
    }
    fn gather_rows(
        &mut self,
        table: TensorId,
        indices: TensorId,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.builder
            .pin_mut()
            .gather_rows(table, indices, ipu, name)
            .map_err(core_err)
    }
}

/// A compiled graph: reports, and the program an engine loads.
pub struct Executable {
    graph: UniquePtr<ffi::CompiledGraph>,
}

impl Executable {
    pub fn tile_memory(&self) -> Vec<TileMemory> {
        self.graph.tile_memory()
    }
    pub fn op_records(&self) -> Vec<OpRecord> {
        self.graph.op_records()
    }
    pub fn step_costs(&self) -> Vec<StepCost> {
        self.graph.step_costs()
    }
    pub fn warnings(&self) -> Vec<String> {
        self.graph.warnings()
    }
    pub fn system(&self) -> SystemInfo {
        self.graph.system()
    }
    pub fn num_ipus_used(&self) -> u32 {
        self.graph.num_ipus_used()
    }
    pub fn cycles_per_run(&self) -> u64 {
        self.graph.cycles_per_run()
    }
    /// Loads the program into fresh tile memory (`threads` = 0: default).
    pub fn load(&self, threads: u32) -> Result<Engine> {
        Ok(Engine {
            engine: ffi::load_engine(&self.graph, threads).map_err(core_err)?,
        })
    }
}

fn system_info(s: SystemInfo) -> report::SystemInfo {
    report::SystemInfo {
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
        sync_cycles: s.sync_cycles,
        ipu_link_bytes_per_sec: s.ipu_link_bytes_per_sec,
        ipu_links: s.ipu_links,
        host_link_bytes_per_sec: s.host_link_bytes_per_sec,
    }
}

impl DeviceExecutable for Executable {
    fn report(&self) -> report::DeviceReport {
        let system = system_info(self.system());
        let tpi = system.tiles_per_ipu;
        report::DeviceReport {
            num_ipus: self.num_ipus_used(),
            tiles: self
                .tile_memory()
                .into_iter()
                .map(|t| report::TileMemory {
                    ipu: t.tile / tpi,
                    tile: t.tile % tpi,
                    variables: t.variables,
                    vertex_state: t.vertex_state,
                    code: t.code,
                    exchange_code: t.exchange_code,
                    control_code: t.control_code,
                })
                .collect(),
            plans: self
                .op_records()
                .into_iter()
                .map(|r| report::OpPlan {
                    name: r.name,
                    kind: r.kind,
                    ipu: r.ipu,
                    plan: r.plan,
                    tiles_used: r.tiles_used,
                    temp_bytes_per_tile: r.temp_bytes,
                    estimated_cycles: r.est_cycles,
                })
                .collect(),
            steps: self
                .step_costs()
                .into_iter()
                .map(|c| report::StepCost {
                    kind: match c.kind {
                        0 => report::StepKind::Compute,
                        1 => report::StepKind::Exchange,
                        2 => report::StepKind::HostToDevice,
                        _ => report::StepKind::DeviceToHost,
                    },
                    name: c.name,
                    cycles: c.cycles,
                    bytes: c.bytes,
                    items: c.items,
                })
                .collect(),
            warnings: self.warnings(),
            cycles_per_run: self.cycles_per_run(),
            system,
        }
    }
    fn load(&self, threads: u32) -> Result<Box<dyn DeviceEngine>> {
        Ok(Box::new(Executable::load(self, threads)?))
    }
}

impl DeviceEngine for Engine {
    fn run(&mut self, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        Engine::run(self, inputs)
    }
    fn last_run(&self) -> Option<report::RunStats> {
        let s = Engine::last_run(self);
        (s.steps > 0).then(|| report::RunStats {
            cycles: s.cycles,
            compute_cycles: s.compute_cycles,
            exchange_cycles: s.exchange_cycles,
            host_cycles: s.host_cycles,
            steps: s.steps,
            exchanged_bytes: s.exchanged_bytes,
            host_bytes: s.host_bytes,
            wall_seconds: s.wall_seconds,
            compute_seconds: s.compute_seconds,
            exchange_seconds: s.exchange_seconds,
            host_io_seconds: s.host_io_seconds,
            host_memory_bytes: self.arena_bytes(),
        })
    }
}

/// A loaded program: tile memory, host streams, BSP execution.
pub struct Engine {
    engine: UniquePtr<ffi::EngineHandle>,
}

impl Engine {
    /// Inputs in device types, in the program's input order.
    pub fn run(&mut self, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        for (i, data) in inputs.iter().enumerate() {
            self.engine
                .pin_mut()
                .write_input(i as u32, data)
                .map_err(core_err)?;
        }
        self.engine.pin_mut().run().map_err(core_err)?;
        let mut outs = Vec::new();
        let mut i = 0u32;
        loop {
            let n = self.engine.output_bytes(i);
            if n == u64::MAX {
                break;
            }
            let mut buf = vec![0u8; n as usize];
            self.engine.read_output(i, &mut buf).map_err(core_err)?;
            outs.push(buf);
            i += 1;
        }
        Ok(outs)
    }
    pub fn last_run(&self) -> RunStats {
        self.engine.last_run()
    }
    pub fn arena_bytes(&self) -> u64 {
        self.engine.arena_bytes()
    }
}

/// Inventory and exclusive attach of simulated IPUs.
pub struct DeviceManager {
    inner: UniquePtr<ffi::DeviceManagerHandle>,
}

impl DeviceManager {
    pub fn new(spec: &str, lock_dir: &str) -> Result<DeviceManager> {
        Ok(DeviceManager {
            inner: ffi::new_device_manager(spec, lock_dir).map_err(core_err)?,
        })
    }
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.inner.devices()
    }
    pub fn holder_pid(&self, ipu: u32) -> i32 {
        self.inner.holder_pid(ipu)
    }
    pub fn lock_dir(&self) -> String {
        self.inner.lock_dir()
    }
    /// `device_id` < 0: any free group. `timeout_seconds` > 0 waits that long.
    pub fn attach(
        &mut self,
        num_ipus: u32,
        device_id: i64,
        timeout_seconds: f64,
    ) -> Result<Device> {
        match self
            .inner
            .pin_mut()
            .attach(num_ipus, device_id, timeout_seconds)
        {
            Ok(d) => Ok(Device { inner: d }),
            Err(e) => Err(match Error::from_core(e.what()) {
                Error::DeviceUnavailable { message, .. } => Error::DeviceUnavailable {
                    ipus: self.inner.last_busy_ipus(),
                    pids: self.inner.last_busy_pids(),
                    message,
                },
                other => other,
            }),
        }
    }
}

pub struct Device {
    inner: UniquePtr<ffi::DeviceHandle>,
}

impl Device {
    pub fn id(&self) -> u32 {
        self.inner.id()
    }
    pub fn ipus(&self) -> Vec<u32> {
        self.inner.ipus()
    }
    pub fn attached(&self) -> bool {
        self.inner.attached()
    }
    pub fn detach(&mut self) {
        self.inner.pin_mut().detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neurenix_core::expr::EXPR_OP_NAMES;

    #[test]
    fn expression_codes_agree_with_the_core() {
        for (code, name) in EXPR_OP_NAMES.iter().enumerate() {
            assert_eq!(expr_op_name(code as u16), *name, "code {code}");
        }
    }

    #[test]
    fn bad_system_spec_is_an_error_not_an_abort() {
        let e = describe_system("version=ipu9").err().unwrap();
        assert!(matches!(e, Error::InvalidArgument(_)));
        assert!(e.to_string().contains("ipu9"));
        let e = describe_system("tiles=4").err().unwrap();
        assert!(e.to_string().contains("'tiles'"));
    }
}
