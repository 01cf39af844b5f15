//! `Executable` and `Engine`: a compiled program and the program loaded on
//! simulated tiles, as the core's [`DeviceExecutable`] and [`DeviceEngine`].

use cxx::UniquePtr;
use neurenix_core::backend::{DeviceEngine, DeviceExecutable, EngineOptions};
use neurenix_core::error::Result;
use neurenix_core::report;

use crate::bridge::ffi;
use crate::error::from_cxx;

pub(crate) fn system_info(s: ffi::SystemInfo) -> report::SystemInfo {
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

fn tile_tensor(t: ffi::TileTensor) -> report::TileTensor {
    report::TileTensor {
        name: t.name,
        node: t.node,
        bytes: t.bytes,
    }
}

fn step_kind(k: ffi::StepKind) -> report::StepKind {
    match k {
        ffi::StepKind::kCompute => report::StepKind::Compute,
        ffi::StepKind::kExchange => report::StepKind::Exchange,
        ffi::StepKind::kHostToDevice => report::StepKind::HostToDevice,
        _ => report::StepKind::DeviceToHost,
    }
}

/// A compiled program: its report, and what an engine loads.
pub struct Executable {
    inner: UniquePtr<ffi::Executable>,
}

impl Executable {
    pub(crate) fn new(inner: UniquePtr<ffi::Executable>) -> Executable {
        Executable { inner }
    }
}

impl DeviceExecutable for Executable {
    fn report(&self) -> report::DeviceReport {
        let x = &self.inner;
        report::DeviceReport {
            system: system_info(x.system()),
            num_ipus: x.num_ipus(),
            tiles: x
                .tile_memory()
                .into_iter()
                .map(|t| report::TileMemory {
                    ipu: t.ipu,
                    tile: t.tile,
                    variables: t.variables,
                    constants: t.constants,
                    vertex_state: t.vertex_state,
                    code: t.code,
                    exchange_code: t.exchange_code,
                    control_code: t.control_code,
                    largest: t.largest.into_iter().map(tile_tensor).collect(),
                })
                .collect(),
            plans: x
                .op_plans()
                .into_iter()
                .map(|p| report::OpPlan {
                    name: p.name,
                    kind: p.kind,
                    ipu: p.ipu,
                    plan: p.plan,
                    tiles_used: p.tiles_used,
                    temp_bytes_per_tile: p.temp_bytes_per_tile,
                    estimated_cycles: p.estimated_cycles,
                })
                .collect(),
            steps: x
                .step_costs()
                .into_iter()
                .map(|c| report::StepCost {
                    ipu: 0,
                    kind: step_kind(c.kind),
                    name: c.name,
                    cycles: c.cycles,
                    bytes: c.bytes,
                    items: c.items,
                    node: c.node,
                    tile: u32::try_from(c.tile).ok(),
                    live_bytes: c.live_bytes,
                    terms: c
                        .terms
                        .into_iter()
                        .map(|t| report::CostTerm {
                            kind: t.kind,
                            name: t.name,
                            cycles: t.cycles,
                        })
                        .collect(),
                })
                .collect(),
            variables: x
                .variables()
                .into_iter()
                .map(|v| report::Variable {
                    ipu: 0,
                    name: v.name,
                    node: v.node,
                    kind: v.kind,
                    device_type: crate::graph::from_device_type(v.device_type),
                    shape: v.shape.iter().map(|&d| d as usize).collect(),
                    tiles: v.tiles,
                })
                .collect(),
            warnings: x.warnings(),
            cycles_per_run: x.cycles_per_run(),
        }
    }

    fn load(&self, options: &EngineOptions) -> Result<Box<dyn DeviceEngine>> {
        let options = ffi::EngineOptions {
            threads: options.threads,
            stochastic_rounding: options.floating_point.stochastic_rounding,
            seed: options.floating_point.seed,
            ipu: options.ipu,
            fp_exceptions: options.floating_point.exceptions,
            shares_cores: options.shares_cores,
        };
        Ok(Box::new(Engine {
            inner: self.inner.load(&options).map_err(from_cxx)?,
        }))
    }
}

/// A program loaded on simulated tiles: tile memory, host streams, BSP
/// execution.
pub struct Engine {
    inner: UniquePtr<ffi::Engine>,
}

impl DeviceEngine for Engine {
    fn run(&mut self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        for (i, data) in inputs.iter().enumerate() {
            self.inner
                .pin_mut()
                .write_input(i as u32, data)
                .map_err(from_cxx)?;
        }
        self.inner.pin_mut().run().map_err(from_cxx)?;
        (0..self.inner.num_outputs())
            .map(|i| {
                let n = self.inner.output_bytes(i).map_err(from_cxx)?;
                let mut buf = vec![0u8; n as usize];
                self.inner.read_output(i, &mut buf).map_err(from_cxx)?;
                Ok(buf)
            })
            .collect()
    }

    fn run_segment(&mut self, segment: u32, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        if segment == 0 {
            for (i, data) in inputs.iter().enumerate() {
                self.inner
                    .pin_mut()
                    .write_input(i as u32, data)
                    .map_err(from_cxx)?;
            }
        }
        self.inner
            .pin_mut()
            .run_segment(segment)
            .map_err(from_cxx)?;
        (0..self.inner.num_outputs())
            .map(|i| {
                let n = self.inner.output_bytes(i).map_err(from_cxx)?;
                let mut buf = vec![0u8; n as usize];
                self.inner.read_output(i, &mut buf).map_err(from_cxx)?;
                Ok(buf)
            })
            .collect()
    }

    fn read_state(&self, name: &str) -> Result<Vec<u8>> {
        let n = self.inner.constant_bytes(name).map_err(from_cxx)?;
        let mut buf = vec![0u8; n as usize];
        self.inner.read_constant(name, &mut buf).map_err(from_cxx)?;
        Ok(buf)
    }

    fn write_state(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.inner
            .pin_mut()
            .write_constant(name, data)
            .map_err(from_cxx)
    }

    fn last_run(&self) -> Option<report::RunStats> {
        let s = self.inner.last_run();
        (s.steps > 0).then(|| report::RunStats {
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
            host_memory_bytes: self.inner.arena_bytes(),
            host_shadow_bytes: self.inner.shadow_block_bytes(),
            checked: self.inner.checked(),
            step_seconds: s.step_seconds,
        })
    }
}
