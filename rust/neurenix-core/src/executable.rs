//! The executable: a model compiled for the IPUs of a replica (one program
//! per pipeline stage), which loads, runs and unloads it on every replica.
//!
//! It holds the stages' compiled programs ([`Stage`]), the tensors carried
//! between them, the host's half from lowering ([`Lowered`]: the model's
//! host streams, what the passes and the sharder did) and the estimate. A
//! run takes the host batch of one call (micro-batch x device iterations x
//! replicas), converts each micro-batch to the device types, streams the
//! micro-batches through each replica's stages (every stage on its own host
//! thread when pipelined, every replica on its own, a single one on the
//! calling thread) and converts the outputs back, concatenated in
//! micro-batch order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use crate::backend::{DeviceEngine, EngineOptions, FloatingPointBehaviour};
use crate::compile::{CompileOptions, Lowered, ShardReport};
use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::pipeline::{step_stream, Carry, Execution, PipelineEstimate, Sink, Source, Stage};
use crate::report::{DeviceReport, RunStats};
use crate::tensor::{device_to_host, host_to_device};

/// One input or output of a compiled program: the tensor as the host sees it
/// (the model's element type) and as the device holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStream {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub device_type: DeviceType,
}

impl HostStream {
    /// Bytes of the host data in the model's element type.
    pub fn host_bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

pub struct Executable {
    pub lowered: Lowered,
    pub options: CompileOptions,
    /// Host time the compile took.
    pub compile_seconds: f64,
    pub stages: Vec<Stage>,
    pub carries: Vec<Carry>,
    pub estimate: PipelineEstimate,
    pub shard: ShardReport,
    report: DeviceReport,
    /// `report_step[s][k]`: the index in `report.steps` of stage `s`'s
    /// program step `k` (None: a carried tensor's stream, not reported).
    report_step: Vec<Vec<Option<usize>>>,
    /// Loaded programs: `engines[replica][stage]`.
    engines: Vec<Vec<Box<dyn DeviceEngine>>>,
    /// How the loaded programs handle floating point.
    floating_point: FloatingPointBehaviour,
    last: Option<RunStats>,
}

/// With floating-point exceptions on, a finite float32 input that became an
/// infinity as float16 on its way to the device is an overflow, as the
/// IPU's conversion would raise it.
fn check_input_overflow(
    s: &HostStream,
    host: &[u8],
    device: &[u8],
    micro_batch: usize,
) -> Result<()> {
    if s.dtype != ElemType::F32 || s.device_type != DeviceType::F16 {
        return Ok(());
    }
    let per = s.shape.iter().product::<usize>();
    for (i, (h, d)) in host.chunks_exact(4).zip(device.chunks_exact(2)).enumerate() {
        let x = f32::from_le_bytes(h.try_into().unwrap());
        let bits = u16::from_le_bytes(d.try_into().unwrap());
        if x.is_finite() && bits & 0x7c00 == 0x7c00 {
            return Err(Error::FloatingPoint(format!(
                "floating-point exception: overflow converting input '{}' to float16: element {} of                  micro-batch {micro_batch} is {x:e}, beyond float16's largest value 65504; turn                  fp_exceptions off to let it become infinity, scale the input, or use precision='float32'",
                s.name,
                micro_batch * per + i
            )));
        }
    }
    Ok(())
}

/// One report for all stages: tiles and plans of stage `s` on IPU `s`;
/// with, for each stage, where each of its program steps is in the merged
/// steps (`Executable::report_step`).
fn merge_reports(stages: &[Stage], cycles: u64) -> (DeviceReport, Vec<Vec<Option<usize>>>) {
    let first = &stages[0].report;
    let mut r = DeviceReport {
        system: first.system.clone(),
        num_ipus: stages.len() as u32,
        tiles: Vec::new(),
        plans: Vec::new(),
        steps: Vec::new(),
        variables: Vec::new(),
        warnings: Vec::new(),
        cycles_per_run: cycles,
    };
    let mut index = Vec::with_capacity(stages.len());
    for st in stages {
        r.tiles.extend(st.report.tiles.iter().map(|t| {
            let mut t = t.clone();
            t.ipu = st.ipu;
            t
        }));
        r.plans.extend(st.report.plans.iter().map(|p| {
            let mut p = p.clone();
            p.ipu = st.ipu;
            p
        }));
        // Carried tensors' streams are IPU-Link copies on the device, costed
        // by the estimate, not host transfers.
        let carried = st.stream_names(true);
        let mut at = Vec::with_capacity(st.report.steps.len());
        for s in &st.report.steps {
            if step_stream(s).is_some_and(|n| carried.contains(n)) {
                at.push(None);
                continue;
            }
            at.push(Some(r.steps.len()));
            let mut s = s.clone();
            s.ipu = st.ipu;
            r.steps.push(s);
        }
        index.push(at);
        r.variables.extend(st.report.variables.iter().map(|v| {
            let mut v = v.clone();
            v.ipu = st.ipu;
            v
        }));
        r.warnings.extend(st.report.warnings.iter().cloned());
    }
    (r, index)
}

impl Executable {
    pub fn new(
        stages: Vec<Stage>,
        carries: Vec<Carry>,
        lowered: Lowered,
        estimate: PipelineEstimate,
        shard: ShardReport,
        options: CompileOptions,
        compile_seconds: f64,
    ) -> Executable {
        let (mut report, report_step) = merge_reports(&stages, estimate.cycles_per_call);
        report.warnings.extend(shard.warnings.iter().cloned());
        Executable {
            report,
            report_step,
            lowered,
            options,
            compile_seconds,
            stages,
            carries,
            estimate,
            shard,
            engines: Vec::new(),
            floating_point: FloatingPointBehaviour::default(),
            last: None,
        }
    }

    /// One micro-batch's inputs.
    pub fn inputs(&self) -> &[HostStream] {
        &self.lowered.inputs
    }
    /// One micro-batch's outputs.
    pub fn outputs(&self) -> &[HostStream] {
        &self.lowered.outputs
    }
    /// What the device says about the compiled programs, stage `s`'s
    /// tiles, plans and steps on IPU `s`; `cycles_per_run` is one call.
    pub fn report(&self) -> &DeviceReport {
        &self.report
    }

    /// Micro-batches one run takes: device iterations x replicas.
    pub fn micro_batches(&self) -> usize {
        self.options.device_iterations as usize * self.options.replication_factor as usize
    }

    /// Loads every stage's program on every replica into fresh device
    /// memory. `threads` (0: `$NEURENIX_SIM_THREADS` or the host's cores)
    /// are shared out between the programs that run at the same time; every
    /// program gets `floating_point` and its IPU (replica r's stage s runs
    /// on IPU r x stages + s of the replicas' IPUs).
    pub fn load(&mut self, threads: u32, floating_point: FloatingPointBehaviour) -> Result<()> {
        self.unload();
        let total = if threads > 0 {
            threads
        } else {
            std::env::var("NEURENIX_SIM_THREADS")
                .ok()
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|&t| t > 0)
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
                })
        };
        let replicas = self.options.replication_factor.max(1);
        let concurrent = match self.estimate.execution {
            Execution::Pipelined => replicas * self.stages.len() as u32,
            Execution::Sharded => replicas,
        };
        let each = (total / concurrent.max(1)).max(1);
        // A sharded replica's stages run one after another on its threads.
        let shares_cores = self.estimate.execution == Execution::Sharded && self.stages.len() > 1;
        let mut engines = Vec::with_capacity(replicas as usize);
        for r in 0..replicas {
            let mut replica = Vec::with_capacity(self.stages.len());
            for (s, st) in self.stages.iter().enumerate() {
                replica.push(st.device.load(&EngineOptions {
                    threads: each,
                    floating_point,
                    ipu: r * self.stages.len() as u32 + s as u32,
                    shares_cores,
                })?);
            }
            engines.push(replica);
        }
        self.engines = engines;
        self.floating_point = floating_point;
        Ok(())
    }

    /// Frees the device memory of the loaded programs, if any.
    pub fn unload(&mut self) {
        self.engines.clear();
        self.last = None;
    }

    pub fn is_loaded(&self) -> bool {
        !self.engines.is_empty()
    }

    /// Runs once, loading the programs first if needed. `inputs`: each
    /// input's little-endian bytes in its declared element type, for the
    /// whole host batch (micro-batch x device iterations x replicas, in that
    /// order of nesting: micro-batch `d * replicas + r` goes to replica `r`
    /// in iteration `d`). Returns the outputs' bytes in their declared
    /// element types, the micro-batches' outputs concatenated in order.
    pub fn run(&mut self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let streams = &self.lowered.inputs;
        if inputs.len() != streams.len() {
            return Err(Error::InputMismatch {
                input: String::new(),
                message: format!(
                    "the program takes {} input(s), got {}",
                    streams.len(),
                    inputs.len()
                ),
            });
        }
        let k = self.micro_batches();
        let (d, r) = (
            self.options.device_iterations,
            self.options.replication_factor,
        );
        // device_inputs[m][i]: micro-batch m's input i, in its device type
        // (the caller's bytes themselves when they already are).
        let mut device_inputs: Vec<Vec<Cow<[u8]>>> = vec![Vec::with_capacity(streams.len()); k];
        for (s, data) in streams.iter().zip(inputs) {
            let each = s.host_bytes();
            if data.len() != each * k {
                return Err(Error::InputMismatch {
                    input: s.name.clone(),
                    message: format!(
                        "input '{}' needs {} bytes: a micro-batch of {each} bytes ({}{:?}) x {d} device \
                         iteration(s) x {r} replica(s), got {}",
                        s.name,
                        each * k,
                        s.dtype,
                        s.shape,
                        data.len()
                    ),
                });
            }
            for (m, chunk) in device_inputs.iter_mut().enumerate() {
                let part = &data[m * each..(m + 1) * each];
                let converted = host_to_device(s.dtype, part, s.device_type, &s.name)?;
                if self.floating_point.exceptions {
                    check_input_overflow(s, part, &converted, m)?;
                }
                chunk.push(converted);
            }
        }
        if self.engines.is_empty() {
            self.load(0, self.floating_point)?;
        }
        let t0 = Instant::now();
        let (results, runs) = self.run_replicas(&device_inputs)?;
        let wall = t0.elapsed().as_secs_f64();
        let mut outs: Vec<Vec<u8>> = vec![Vec::new(); self.lowered.outputs.len()];
        for (m, mb) in results.into_iter().enumerate() {
            for (o, (s, raw)) in self.lowered.outputs.iter().zip(mb).enumerate() {
                let raw = raw.ok_or_else(|| {
                    Error::Internal(format!(
                        "micro-batch {m} produced no value for output '{}'",
                        s.name
                    ))
                })?;
                // (Bytes already in the host type are moved, not copied.)
                let converted = match device_to_host(s.device_type, &raw, s.dtype)? {
                    Cow::Owned(v) => Some(v),
                    Cow::Borrowed(_) => None,
                };
                let host = converted.unwrap_or(raw);
                if outs[o].is_empty() {
                    outs[o] = host;
                } else {
                    outs[o].extend_from_slice(&host);
                }
            }
        }
        self.last = Some(self.gather_stats(wall, &runs));
        Ok(outs)
    }

    /// Runs every replica on its own thread (a single one on this thread);
    /// returns each micro-batch's outputs in device types, and the
    /// statistics of every program run (with its replica).
    #[allow(clippy::type_complexity)]
    fn run_replicas(
        &mut self,
        device_inputs: &[Vec<Cow<[u8]>>],
    ) -> Result<(Vec<Vec<Option<Vec<u8>>>>, Vec<(usize, usize, RunStats)>)> {
        let replicas = self.engines.len();
        let iterations = self.options.device_iterations as usize;
        let n_out = self.lowered.outputs.len();
        let results: Mutex<Vec<Vec<Option<Vec<u8>>>>> =
            Mutex::new(vec![vec![None; n_out]; device_inputs.len()]);
        let runs: Mutex<Vec<(usize, usize, RunStats)>> = Mutex::new(Vec::new());
        let stages = &self.stages;
        let carries = &self.carries;
        let execution = self.estimate.execution;
        if replicas == 1 {
            // One replica runs on the calling thread (a thread started per
            // run costs its start and its thread-local scratch every time);
            // a panic is an error here too, as on a replica's own thread.
            let io = ReplicaIo {
                replica: 0,
                device_inputs,
                results: &results,
                runs: &runs,
            };
            let mbs: Vec<usize> = (0..iterations).collect();
            let engines = &mut self.engines[0];
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                run_replica(engines, stages, carries, execution, &mbs, &io)
            }))
            .unwrap_or_else(|_| Err(Error::Internal("a replica's run panicked".into())))?;
            return Ok((
                results.into_inner().unwrap_or_else(|p| p.into_inner()),
                runs.into_inner().unwrap_or_else(|p| p.into_inner()),
            ));
        }
        let errors: Vec<Result<()>> = std::thread::scope(|sc| {
            let handles: Vec<_> = self
                .engines
                .iter_mut()
                .enumerate()
                .map(|(r, engines)| {
                    let io = ReplicaIo {
                        replica: r,
                        device_inputs,
                        results: &results,
                        runs: &runs,
                    };
                    let mbs: Vec<usize> = (0..iterations).map(|d| d * replicas + r).collect();
                    sc.spawn(move || run_replica(engines, stages, carries, execution, &mbs, &io))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::Internal("a replica's thread panicked".into()))
                    })
                })
                .collect()
        });
        for e in errors {
            e?;
        }
        Ok((
            results.into_inner().unwrap_or_else(|p| p.into_inner()),
            runs.into_inner().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    fn gather_stats(&self, wall: f64, runs: &[(usize, usize, RunStats)]) -> RunStats {
        let mut s = RunStats {
            cycles: self.estimate.cycles_per_call,
            wall_seconds: wall,
            checked: true,
            ..RunStats::default()
        };
        s.step_seconds = vec![0.0; self.report.steps.len()];
        for (r, stage, x) in runs {
            add_step_seconds(&mut s.step_seconds, &self.report_step[*stage], x);
            if *r == 0 {
                s.compute_cycles += x.compute_cycles;
                s.exchange_cycles += x.exchange_cycles;
                s.host_cycles += x.host_cycles;
                s.steps += x.steps;
            }
            s.exchanged_bytes += x.exchanged_bytes;
            s.copied_bytes += x.copied_bytes;
            s.host_bytes += x.host_bytes;
            s.compute_seconds += x.compute_seconds;
            s.exchange_seconds += x.exchange_seconds;
            s.host_io_seconds += x.host_io_seconds;
            s.checked &= x.checked;
        }
        for replica in &self.engines {
            for e in replica {
                if let Some(x) = e.last_run() {
                    s.host_memory_bytes += x.host_memory_bytes;
                    s.host_shadow_bytes += x.host_shadow_bytes;
                }
            }
        }
        s
    }

    /// Statistics of the last run: the estimate of the whole call, the
    /// simulation's host time, and the programs' figures (device cycles of
    /// one replica, bytes and host time of all).
    /// One training micro-batch on every replica (a program in two segments,
    /// `Backend::begin_segment`): segment 0 (forward, backward, gradients
    /// added to the accumulators) with each replica's inputs (host bytes in
    /// the declared types, in input order); then, when `apply`, the
    /// accumulators named are summed over the replicas (the all-reduce of
    /// the IPU-Links, ring-style) and segment 1 (the update) runs on every
    /// replica. Returns each replica's outputs (declared types) and the
    /// statistics of the step: replicas run side by side, so the cycles are
    /// the slowest replica's per segment plus the all-reduce's.
    pub fn run_replicated(
        &mut self,
        inputs: &[Vec<&[u8]>],
        apply: bool,
        accumulators: &[String],
    ) -> Result<(Vec<Vec<Vec<u8>>>, RunStats)> {
        let replicas = self.options.replication_factor as usize;
        if inputs.len() != replicas {
            return Err(Error::InputMismatch {
                input: String::new(),
                message: format!(
                    "{replicas} replica(s) need their inputs, got {}",
                    inputs.len()
                ),
            });
        }
        if self.stages.len() != 1 {
            return Err(Error::Internal(
                "a replicated step runs one stage per replica".into(),
            ));
        }
        let mut device: Vec<Vec<Cow<[u8]>>> = Vec::with_capacity(replicas);
        for rin in inputs {
            if rin.len() != self.lowered.inputs.len() {
                return Err(Error::InputMismatch {
                    input: String::new(),
                    message: format!(
                        "the program takes {} input(s), got {}",
                        self.lowered.inputs.len(),
                        rin.len()
                    ),
                });
            }
            let mut one = Vec::with_capacity(rin.len());
            for (st, data) in self.lowered.inputs.iter().zip(rin) {
                if data.len() != st.host_bytes() {
                    return Err(Error::InputMismatch {
                        input: st.name.clone(),
                        message: format!(
                            "input '{}' needs {} bytes for one replica's micro-batch, got {}",
                            st.name,
                            st.host_bytes(),
                            data.len()
                        ),
                    });
                }
                let converted = host_to_device(st.dtype, data, st.device_type, &st.name)?;
                if self.floating_point.exceptions {
                    check_input_overflow(st, data, &converted, 0)?;
                }
                one.push(converted);
            }
            device.push(one);
        }
        if self.engines.is_empty() {
            self.load(0, self.floating_point)?;
        }
        let t0 = Instant::now();
        let mut total = RunStats {
            step_seconds: vec![0.0; self.report.steps.len()],
            checked: true,
            ..RunStats::default()
        };
        let mut outs = Vec::with_capacity(replicas);
        let mut seg_cycles = 0u64;
        for (r, din) in device.iter().enumerate() {
            let engine = &mut self.engines[r][0];
            let views: Vec<&[u8]> = din.iter().map(|d| d.as_ref()).collect();
            let raw = engine.run_segment(0, &views)?;
            let st = engine.last_run().unwrap_or_default();
            seg_cycles = seg_cycles.max(st.cycles);
            add_stats(&mut total, &st, &self.report_step[0]);
            // Each replica's tile memory, once (segment 1 runs in the same).
            total.host_memory_bytes += st.host_memory_bytes;
            total.host_shadow_bytes += st.host_shadow_bytes;
            let mut o = Vec::with_capacity(raw.len());
            for (s, b) in self.lowered.outputs.iter().zip(&raw) {
                o.push(device_to_host(s.device_type, b, s.dtype)?.into_owned());
            }
            outs.push(o);
        }
        let mut cycles = seg_cycles;
        if apply {
            // The all-reduce: every accumulator summed over the replicas.
            let mut bytes = 0u64;
            for name in accumulators {
                let parts: Vec<Vec<u8>> = self
                    .engines
                    .iter()
                    .map(|rep| rep[0].read_state(name))
                    .collect::<Result<_>>()?;
                let n = parts[0].len() / 4;
                let mut sum = vec![0f32; n];
                for p in &parts {
                    for (k, c) in p.chunks_exact(4).enumerate() {
                        sum[k] += f32::from_le_bytes(c.try_into().expect("4 bytes"));
                    }
                }
                let data: Vec<u8> = sum.iter().flat_map(|v| v.to_le_bytes()).collect();
                for rep in self.engines.iter_mut() {
                    rep[0].write_state(name, &data)?;
                }
                bytes += parts[0].len() as u64;
            }
            let sys = &self.report.system;
            let allreduce = if replicas > 1 {
                let per_cycle = sys.ipu_link_bytes_per_sec / sys.clock_hz;
                let moved = 2.0 * (replicas as f64 - 1.0) / replicas as f64 * bytes as f64;
                (moved / per_cycle.max(1e-9)) as u64 + 2 * u64::from(sys.cross_ipu_sync_cycles)
            } else {
                0
            };
            total.exchange_cycles += allreduce;
            // The host moves the all-reduce's bytes itself.
            total.exchanged_bytes += (2 * (replicas as u64).saturating_sub(1)) * bytes;
            total.copied_bytes += (2 * (replicas as u64).saturating_sub(1)) * bytes;
            let mut seg1 = 0u64;
            for rep in self.engines.iter_mut() {
                rep[0].run_segment(1, &[])?;
                let st = rep[0].last_run().unwrap_or_default();
                seg1 = seg1.max(st.cycles);
                add_stats(&mut total, &st, &self.report_step[0]);
            }
            cycles += allreduce + seg1;
        }
        total.cycles = cycles;
        total.wall_seconds = t0.elapsed().as_secs_f64();
        self.last = Some(total.clone());
        Ok((outs, total))
    }

    /// The bytes of state tensor `name` (a trained weight, an optimizer's
    /// moment) in its device type, as the last run left them.
    pub fn read_state(&self, name: &str) -> Result<Vec<u8>> {
        let engine = self
            .engines
            .first()
            .and_then(|r| r.first())
            .ok_or_else(|| Error::InvalidState("the executable is not loaded".into()))?;
        engine.read_state(name)
    }

    /// Overwrites state tensor `name` in every replica.
    pub fn write_state(&mut self, name: &str, data: &[u8]) -> Result<()> {
        if self.engines.is_empty() {
            return Err(Error::InvalidState("the executable is not loaded".into()));
        }
        for replica in &mut self.engines {
            for engine in replica.iter_mut() {
                engine.write_state(name, data)?;
            }
        }
        Ok(())
    }

    pub fn last_run(&self) -> Option<RunStats> {
        self.last.clone()
    }
}

type Bag = HashMap<usize, Vec<u8>>;

/// What a replica's thread reads and writes besides its engines.
struct ReplicaIo<'a> {
    replica: usize,
    /// Every micro-batch's inputs, in device types.
    device_inputs: &'a [Vec<Cow<'a, [u8]>>],
    /// Every micro-batch's outputs, filled in as stages make them.
    results: &'a Mutex<Vec<Vec<Option<Vec<u8>>>>>,
    /// The statistics of every program run.
    runs: &'a Mutex<Vec<(usize, usize, RunStats)>>,
}

/// Runs micro-batches `mbs` through one replica's stages.
fn run_replica(
    engines: &mut [Box<dyn DeviceEngine>],
    stages: &[Stage],
    carries: &[Carry],
    execution: Execution,
    mbs: &[usize],
    io: &ReplicaIo<'_>,
) -> Result<()> {
    // Stage `s` (`st`) runs micro-batch `m`.
    let step = |engine: &mut Box<dyn DeviceEngine>,
                s: usize,
                st: &Stage,
                m: usize,
                bag: &mut Bag|
     -> Result<()> {
        let mut ins: Vec<&[u8]> = Vec::with_capacity(st.inputs.len());
        for (hs, src) in &st.inputs {
            ins.push(match *src {
                Source::Host(i) => io.device_inputs[m][i].as_ref(),
                Source::Carried(c) => bag.get(&c).map(Vec::as_slice).ok_or_else(|| {
                    Error::Internal(format!("carried tensor '{}' did not arrive", hs.name))
                })?,
            });
        }
        let outs = engine.run(&ins)?;
        if let Some(stats) = engine.last_run() {
            io.runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((io.replica, s, stats));
        }
        for ((_, sink), bytes) in st.outputs.iter().zip(outs) {
            match *sink {
                Sink::Host(o) => {
                    let mut r = io.results.lock().unwrap_or_else(|p| p.into_inner());
                    r[m][o] = Some(bytes);
                }
                Sink::Carried(c) => {
                    bag.insert(c, bytes);
                }
            }
        }
        // Forward only what later stages still read.
        bag.retain(|&c, _| carries[c].to.iter().any(|&t| t > st.ipu));
        Ok(())
    };
    if execution == Execution::Sharded || stages.len() == 1 {
        for &m in mbs {
            let mut bag = Bag::new();
            for (s, (engine, st)) in engines.iter_mut().zip(stages).enumerate() {
                step(engine, s, st, m, &mut bag)?;
            }
        }
        return Ok(());
    }
    // Pipelined: one thread per stage, micro-batches handed on in order.
    let n = stages.len();
    let mut senders = Vec::new();
    let mut receivers = vec![None];
    for _ in 1..n {
        // Bounded: a stage runs at most one micro-batch ahead of the next,
        // so memory does not grow with the device iterations.
        let (tx, rx) = mpsc::sync_channel::<Bag>(1);
        senders.push(Some(tx));
        receivers.push(Some(rx));
    }
    senders.push(None);
    let step = &step;
    let outcomes: Vec<Result<()>> = std::thread::scope(|sc| {
        let handles: Vec<_> = engines
            .iter_mut()
            .zip(stages)
            .zip(senders.into_iter().zip(receivers))
            .enumerate()
            .map(|(s, ((engine, st), (tx, rx)))| {
                sc.spawn(move || -> Result<()> {
                    for &m in mbs {
                        let mut bag = match &rx {
                            None => Bag::new(),
                            Some(rx) => match rx.recv() {
                                Ok(b) => b,
                                // An earlier stage failed; its error is reported.
                                Err(_) => return Ok(()),
                            },
                        };
                        step(engine, s, st, m, &mut bag)?;
                        if let Some(tx) = &tx {
                            if tx.send(bag).is_err() {
                                return Ok(());
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Internal("a pipeline stage's thread panicked".into()))
                })
            })
            .collect()
    });
    for o in outcomes {
        o?;
    }
    Ok(())
}

/// Adds a program run's host time by program step to `total` (by the
/// executable's report steps, `at` mapping one to the other).
fn add_step_seconds(total: &mut [f64], at: &[Option<usize>], run: &RunStats) {
    for (t, i) in run.step_seconds.iter().zip(at) {
        if let Some(i) = *i {
            total[i] += t;
        }
    }
}

/// Adds a program run's statistics to `total`, its host time by step through
/// `at` (`add_step_seconds`); cycles are combined by the caller, and host
/// memory counted once per replica by the caller.
fn add_stats(total: &mut RunStats, st: &RunStats, at: &[Option<usize>]) {
    add_step_seconds(&mut total.step_seconds, at, st);
    total.compute_cycles += st.compute_cycles;
    total.exchange_cycles += st.exchange_cycles;
    total.host_cycles += st.host_cycles;
    total.steps += st.steps;
    total.exchanged_bytes += st.exchanged_bytes;
    total.copied_bytes += st.copied_bytes;
    total.host_bytes += st.host_bytes;
    total.compute_seconds += st.compute_seconds;
    total.exchange_seconds += st.exchange_seconds;
    total.host_io_seconds += st.host_io_seconds;
    total.checked &= st.checked;
}
