//! The compiler driver: passes, sharding into pipeline stages, lowering and
//! the device's compile of each stage, into an [`Executable`].

use std::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::executable::{Executable, HostStream};
use crate::float8::Float8;
use crate::ir::Model;
use crate::lower::precision::Precision;
use crate::lower::{LowerCx, LowerOptions};
use crate::passes::{prepare, Limits, PassStats, TensorSpec};
use crate::pipeline::{
    compile_stages, estimate, node_cycles, stage_stream_cycles, Carry, Execution, ModelStreams,
    PipelineEstimate, Stage,
};
use crate::progress;
use crate::report::SystemInfo;
use crate::shard::{
    estimate_costs, host_stream_cycles, manual_stages, stages_from_starts, value_bytes, NodeCost,
    Sharding, SplitProblem,
};
use crate::topology::Topology;

#[derive(Debug, Clone)]
pub struct CompileOptions {
    pub precision: Precision,
    /// Fraction of each tile's memory matmul/conv plans may use for
    /// temporaries, in (0, 1].
    pub memory_proportion: f64,
    /// Matmul/conv partial sums in half precision (half operands only).
    pub enable_half_partials: bool,
    /// IPUs in all: `replication_factor` replicas of `num_ipus /
    /// replication_factor` IPUs each.
    pub num_ipus: u32,
    pub replication_factor: u32,
    /// Micro-batches one run streams through each replica.
    pub device_iterations: u32,
    pub sharding: Sharding,
    /// The float8 format of matrix-product operands under
    /// `Precision::Float8` (ignored otherwise).
    pub fp8_format: Float8,
    /// None: pipelined when a replica has several IPUs and enough device
    /// iterations to fill its pipeline, sharded otherwise (with a warning).
    pub execution: Option<Execution>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            precision: Precision::Float32,
            memory_proportion: 0.6,
            enable_half_partials: false,
            num_ipus: 1,
            replication_factor: 1,
            device_iterations: 1,
            sharding: Sharding::Auto,
            fp8_format: Float8::E4M3FNUZ,
            execution: None,
        }
    }
}

impl CompileOptions {
    pub fn validate(&self) -> Result<()> {
        if !(self.memory_proportion > 0.0 && self.memory_proportion <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "memory_proportion must be in (0, 1], got {}",
                self.memory_proportion
            )));
        }
        if self.num_ipus == 0 || !self.num_ipus.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "num_ipus must be a power of two, got {}",
                self.num_ipus
            )));
        }
        if self.replication_factor == 0 || self.num_ipus % self.replication_factor != 0 {
            return Err(Error::InvalidArgument(format!(
                "replication_factor must divide num_ipus={} (each replica gets num_ipus / replication_factor IPUs), \
                 got {}",
                self.num_ipus, self.replication_factor
            )));
        }
        if !matches!(self.fp8_format, Float8::E4M3FNUZ | Float8::E5M2FNUZ) {
            return Err(Error::InvalidArgument(format!(
                "fp8_format {:?} is not one the IPU21 multiplies (E4M3FNUZ or E5M2FNUZ)",
                self.fp8_format
            )));
        }
        if self.device_iterations == 0 {
            return Err(Error::InvalidArgument(
                "device_iterations must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// IPUs of one replica: the pipeline stages.
    pub fn ipus_per_replica(&self) -> u32 {
        self.num_ipus / self.replication_factor.max(1)
    }

    fn lower_options(&self) -> LowerOptions {
        LowerOptions {
            precision: self.precision,
            memory_proportion: self.memory_proportion,
            enable_half_partials: self.enable_half_partials,
            fp8_format: self.fp8_format,
        }
    }

    fn float_bytes(&self) -> usize {
        if self.precision == Precision::Float32 {
            4
        } else {
            2
        }
    }
}

/// Where the sharder put one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: String,
    pub op_type: String,
    pub ipu: u32,
}

/// The host's half of an executable, as lowering produced it (the device's
/// half is the backend's graph): the host streams, what the passes did, and
/// where each node runs.
#[derive(Debug, Clone)]
pub struct Lowered {
    pub inputs: Vec<HostStream>,
    pub outputs: Vec<HostStream>,
    pub passes: PassStats,
    /// Every node lowered, in program order.
    pub placement: Vec<Placement>,
}

/// What the sharder did, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardReport {
    pub execution: Execution,
    /// Plans the automatic sharder compiled before settling (0: manual).
    pub attempts: u32,
    /// Warnings about the plan (e.g. too few device iterations to pipeline).
    pub warnings: Vec<String>,
}

/// A device backend for one IPU (one stage), made fresh for each program.
pub type NewBackend<'a> = &'a mut dyn FnMut() -> Result<Box<dyn Backend>>;

/// Compiles `model` for `inputs` (one micro-batch): passes, sharding into
/// one program per IPU of a replica, and each program's compile on a backend
/// from `new_backend`.
pub fn compile(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    new_backend: NewBackend<'_>,
) -> Result<Executable> {
    compile_with(model, inputs, opts, new_backend, &mut |_| Ok(()))
}

/// Compiles a training step of `model` (docs/training.md): the model's
/// trained initializers become device state, the backward graph and the
/// optimizer's updates are added after the passes, and one run of the
/// executable is one step. `inputs` describe the model's inputs (and a
/// built-in loss's labels); the hyperparameter inputs are added here and
/// listed in the returned `TrainingInfo`.
pub fn compile_training(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    train: &crate::train::TrainOptions,
    new_backend: NewBackend<'_>,
) -> Result<(Executable, crate::train::TrainingInfo)> {
    if opts.ipus_per_replica() > 1 || opts.device_iterations > 1 {
        return Err(Error::InvalidArgument(format!(
            "training runs each replica on one IPU, one micro-batch per run, for now: got num_ipus={}, \
             replication_factor={}, device_iterations={}",
            opts.num_ipus, opts.replication_factor, opts.device_iterations
        )));
    }
    if (opts.replication_factor > 1) != train.optimizer.all_reduce {
        return Err(Error::InvalidArgument(
            "replicated training needs the optimizer's all-reduce program (Optimizer::all_reduce)"
                .into(),
        ));
    }
    let mut m = model.clone();
    let (weights, mut info) = crate::train::prepare_training(&mut m, train)?;
    let exe = compile_with(&m, inputs, opts, new_backend, &mut |m| {
        crate::train::add_training(m, train, &weights, &mut info)?;
        // Shapes of what training added (checked against the builder's).
        crate::passes::infer_and_fold(m, &Limits::default())?;
        Ok(())
    })?;
    Ok((exe, info))
}

/// `compile`, with `after_passes` applied to the model once the passes have
/// run (shapes known).
fn compile_with(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    new_backend: NewBackend<'_>,
    after_passes: &mut dyn FnMut(&mut Model) -> Result<()>,
) -> Result<Executable> {
    let t0 = Instant::now();
    opts.validate()?;
    let probe = new_backend()?;
    let system = probe.system();
    let limits = Limits {
        tensor_bytes: probe.ipu_memory_bytes(),
        float_bytes: opts.float_bytes() as u64,
        ..Limits::default()
    };
    drop(probe);
    if let Some(sys) = &system {
        if opts.precision == Precision::Float8 && sys.fp8_flops_per_cycle == 0 {
            return Err(Error::InvalidArgument(format!(
                "precision='float8' needs IPUs with a float8 matrix unit: only the ipu21 (C600) has one, \
                 and this system's IPUs are {} ({}). Use precision='float16' here, or a system of version='ipu21'",
                sys.version, sys.chip
            )));
        }
    }
    let mut m = model.clone();
    progress::report("passes", 0, 1);
    let passes = prepare(&mut m, inputs, &limits)?;
    after_passes(&mut m)?;
    progress::report("passes", 1, 1);
    let ipus = opts.ipus_per_replica();
    if let Some(sys) = &system {
        if opts.num_ipus > sys.num_ipus {
            return Err(Error::InvalidArgument(format!(
                "num_ipus={} but the system has only {} IPU(s)",
                opts.num_ipus, sys.num_ipus
            )));
        }
    }
    let mut warnings = Vec::new();
    // The stages: every IPU of the replica (automatic), or the plan's.
    let manual = match &opts.sharding {
        Sharding::Auto => None,
        plan => Some(manual_stages(model, &m, plan, ipus)?),
    };
    let stages = match &manual {
        None => ipus.min(m.graph.nodes.len().max(1) as u32),
        Some(stage_of) => stage_of.iter().copied().max().map_or(1, |x| x + 1),
    };
    if manual.is_some() && stages < ipus {
        warnings.push(format!(
            "the sharding plan uses {stages} of the replica's {ipus} IPUs; the others stay idle"
        ));
    }
    let execution = match opts.execution {
        Some(e) => e,
        None if stages > 1 && opts.device_iterations < stages => {
            warnings.push(format!(
                "running sharded, one IPU at a time: pipelining {stages} stages needs device_iterations >= {stages} \
                 (got {}); set device_iterations={stages} or more to pipeline",
                opts.device_iterations
            ));
            Execution::Sharded
        }
        None => Execution::Pipelined,
    };
    if execution == Execution::Pipelined && stages > 1 && opts.device_iterations < stages {
        return Err(Error::InvalidArgument(format!(
            "pipelined execution over {stages} stages needs device_iterations >= {stages} to fill the pipeline, got \
             {}; raise device_iterations or use execution='sharded'",
            opts.device_iterations
        )));
    }
    let sync = system
        .as_ref()
        .map_or(800, |s| u64::from(s.cross_ipu_sync_cycles));
    let topology = system
        .as_ref()
        .map(|s| Topology::new(s, ipus, sync))
        .unwrap_or_else(|| Topology::new(&default_system(), ipus, sync));
    let (built, carries, streams, attempts) = match manual {
        None if stages > 1 => auto_shard(
            &m,
            opts,
            stages,
            execution,
            system.as_ref(),
            &topology,
            new_backend,
        )?,
        plan => {
            let stage_of = plan.unwrap_or_else(|| vec![0; m.graph.nodes.len()]);
            match compile_stages(&m, &stage_of, stages, &opts.lower_options(), new_backend) {
                Ok((s, c, io)) => (s, c, io, 0),
                Err(e @ Error::OutOfMemory { .. }) => {
                    let sys = system.clone().unwrap_or_else(default_system);
                    let worst = oom_ratio(&e);
                    let advice = fit_advice(&m, opts, &sys, &topology, stages, 1.25 * worst);
                    return Err(with_advice(e, &advice));
                }
                Err(e) => return Err(e),
            }
        }
    };
    let est = estimate(
        &built,
        &carries,
        execution,
        opts.replication_factor,
        ipus,
        opts.device_iterations,
        &topology,
    );
    let placement = built.iter().flat_map(|s| s.placement.clone()).collect();
    let lowered = Lowered {
        inputs: streams.inputs,
        outputs: streams.outputs,
        passes,
        placement,
    };
    let shard = ShardReport {
        execution,
        attempts,
        warnings,
    };
    Ok(Executable::new(
        built,
        carries,
        lowered,
        est,
        shard,
        opts.clone(),
        t0.elapsed().as_secs_f64(),
    ))
}

type Built = (Vec<Stage>, Vec<Carry>, ModelStreams, u32);

/// Chooses stages automatically: a split from the estimated node costs,
/// compiled; the costs are then replaced by what the compiler reported (each
/// node's cycles, each stage's busiest tile against its estimate) and the
/// split chosen again, until it no longer changes. A plan is only accepted
/// once every stage compiled and fits.
fn auto_shard(
    m: &Model,
    opts: &CompileOptions,
    stages: u32,
    execution: Execution,
    system: Option<&SystemInfo>,
    topology: &Topology,
    new_backend: NewBackend<'_>,
) -> Result<Built> {
    let sys = system.cloned().unwrap_or_else(default_system);
    let g = &m.graph;
    let n = g.nodes.len();
    let host_rate = sys.host_link_bytes_per_sec / sys.clock_hz;
    let mut costs = first_costs(m, opts, &sys);
    // The node that streams each model output out (its producer).
    let mut stream_node: std::collections::HashMap<String, usize> = Default::default();
    let producers = g.producers();
    for &v in &g.outputs {
        if let Some(&p) = producers.get(&v) {
            stream_node.insert(g.value(v).name.clone(), p);
        }
    }
    let reads = SplitProblem::reads_of(g, opts.float_bytes());
    let fb = opts.float_bytes();
    let mut input_cycles: std::collections::HashMap<usize, f64> = g
        .inputs
        .iter()
        .map(|&v| (v, host_stream_cycles(value_bytes(g, v, fb), host_rate)))
        .collect();
    let capacity = sys.tiles_per_ipu as f64 * sys.bytes_per_tile as f64;
    // How much more the busiest tile holds than an even spread would.
    let mut imbalance: f64 = 1.25;
    // Stage j receives from stage j - 1 over the links between their IPUs.
    let stage_bw: Vec<f64> = (0..stages)
        .map(|j| {
            let links = if j == 0 {
                1
            } else {
                topology.links_between(j - 1, j).max(1)
            };
            links as f64 * topology.link_bytes_per_cycle
        })
        .collect();
    let mut tried: Vec<Vec<usize>> = Vec::new();
    let mut best: Option<(u64, Built)> = None;
    let mut attempts = 0;
    let mut last_oom: Option<Error> = None;
    const MAX_ATTEMPTS: u64 = 6;
    for attempt in 0..MAX_ATTEMPTS {
        progress::report("planning", attempt, MAX_ATTEMPTS);
        let problem = SplitProblem {
            costs: &costs,
            reads: reads.clone(),
            input_reads: SplitProblem::input_reads_of(g, &|v| input_cycles[&v]),
            capacity: capacity / imbalance,
            copy_bytes_per_cycle: stage_bw.clone(),
            copy_sync_cycles: topology.sync_cycles as f64,
        };
        let Some((starts, _)) = problem.best_split(stages as usize) else {
            break;
        };
        let estimated: Vec<f64> = problem
            .stage_costs(&starts)
            .unwrap_or_default()
            .iter()
            .map(|c| c.bytes)
            .collect();
        if tried.contains(&starts) {
            break;
        }
        tried.push(starts.clone());
        attempts += 1;
        let stage_of = stages_from_starts(n, &starts);
        match compile_stages(m, &stage_of, stages, &opts.lower_options(), new_backend) {
            Ok((built, carries, io)) => {
                // Judged as it will run: pipelined, by the slowest stage;
                // sharded, by the stages in turn.
                let est = estimate(&built, &carries, execution, 1, stages, stages, topology);
                // Calibrate: measured cycles per node, observed imbalance.
                let mut measured = std::collections::HashMap::new();
                let mut streams = std::collections::HashMap::new();
                for st in &built {
                    measured.extend(node_cycles(st));
                    for (name, c) in stage_stream_cycles(st) {
                        let e: &mut f64 = streams.entry(name).or_insert(0.0);
                        *e = e.max(c);
                    }
                }
                for (i, node) in g.nodes.iter().enumerate() {
                    if let Some(&c) = measured.get(&node.name) {
                        costs[i].cycles = c;
                    }
                    costs[i].host_cycles = 0.0;
                }
                for (name, c) in streams {
                    if let Some(&i) = stream_node.get(&name) {
                        costs[i].host_cycles += c;
                    } else if let Some(&v) = g.inputs.iter().find(|&&v| g.value(v).name == name) {
                        input_cycles.insert(v, c);
                    }
                }
                let rc = SplitProblem {
                    costs: &costs,
                    reads: reads.clone(),
                    input_reads: Vec::new(),
                    capacity: f64::INFINITY,
                    copy_bytes_per_cycle: stage_bw.clone(),
                    copy_sync_cycles: 0.0,
                };
                imbalance =
                    imbalance.max(observed_imbalance(&rc, &starts, &est, sys.tiles_per_ipu));
                let bottleneck = est.interval_cycles;
                if best.as_ref().is_none_or(|(b, _)| bottleneck < *b) {
                    best = Some((bottleneck, (built, carries, io, attempts)));
                }
            }
            Err(e @ Error::OutOfMemory { .. }) => {
                // Allow for more imbalance, at least enough that the split
                // just tried no longer passes for the stages that overflowed.
                imbalance *= oom_ratio(&e) * 1.05;
                if let Error::OutOfMemory { tiles, .. } = &e {
                    for t in tiles {
                        if let Some(&b) = estimated.get(t.ipu as usize) {
                            if b > 0.0 {
                                imbalance = imbalance.max(capacity / b * 1.01);
                            }
                        }
                    }
                }
                last_oom = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some((_, mut b)) = best {
        b.3 = attempts;
        return Ok(b);
    }
    // Nothing fitted: say how many IPUs would, if any.
    let advice = fit_advice(m, opts, &sys, topology, stages, imbalance);
    Err(with_advice(
        last_oom.unwrap_or(Error::OutOfMemory {
            tiles: Vec::new(),
            tensor: None,
            message: String::new(),
        }),
        &format!("No split of the model over {stages} IPUs fits. {advice}"),
    ))
}

/// What would make a model that does not fit on `stages` IPUs per replica
/// fit: the smallest number of IPUs per replica the estimate (calibrated by
/// `imbalance`, how much more the busiest tile holds than an even spread)
/// says would hold it, half precision, a smaller batch.
fn fit_advice(
    m: &Model,
    opts: &CompileOptions,
    sys: &SystemInfo,
    topology: &Topology,
    stages: u32,
    imbalance: f64,
) -> String {
    let g = &m.graph;
    let n = g.nodes.len();
    let costs = first_costs(m, opts, sys);
    let capacity = sys.tiles_per_ipu as f64 * sys.bytes_per_tile as f64;
    let fits_on = |k: usize| {
        SplitProblem {
            costs: &costs,
            reads: SplitProblem::reads_of(g, opts.float_bytes()),
            input_reads: Vec::new(),
            capacity: capacity / imbalance,
            copy_bytes_per_cycle: vec![topology.link_bytes_per_cycle],
            copy_sync_cycles: 0.0,
        }
        .best_split(k)
        .is_some()
    };
    let system_ipus = sys.num_ipus.max(1) as usize;
    let per_replica_max = system_ipus / opts.replication_factor.max(1) as usize;
    let more = (1..=per_replica_max)
        .filter(|k| k.is_power_of_two() && *k > stages as usize && *k <= n)
        .find(|&k| fits_on(k));
    let mut advice = match more {
        Some(k) => format!(
            "An estimated {k} IPUs per replica would hold it: num_ipus={}{}.",
            k as u32 * opts.replication_factor.max(1),
            if opts.replication_factor > 1 {
                format!(" with replication_factor={}", opts.replication_factor)
            } else {
                String::new()
            }
        ),
        None if per_replica_max > stages as usize => format!(
            "By the estimate, not even {per_replica_max} IPUs per replica (all of this system's{}) would hold it.",
            if opts.replication_factor > 1 { ", shared by the replicas" } else { "" }
        ),
        None => format!(
            "This system has no more IPUs to give each replica ({system_ipus} in all)."
        ),
    };
    if opts.precision == Precision::Float32 {
        advice.push_str(
            " float16 or mixed precision halves the bytes of weights and activations; a smaller batch needs \
             less memory for activations.",
        );
    } else {
        advice.push_str(" A smaller batch needs less memory for activations.");
    }
    advice
}

/// `e` (an out-of-memory error) with `advice` after its tile details.
fn with_advice(e: Error, advice: &str) -> Error {
    match e {
        Error::OutOfMemory {
            tiles,
            tensor,
            message,
        } => Error::OutOfMemory {
            tiles,
            tensor,
            message: if message.is_empty() {
                advice.to_string()
            } else {
                format!("{}\n{advice}", message.trim_end())
            },
        },
        other => other,
    }
}

/// What each node of `m` costs before anything is compiled, on `sys` at
/// the precision of `opts`.
fn first_costs(m: &Model, opts: &CompileOptions, sys: &SystemInfo) -> Vec<NodeCost> {
    let rate = match opts.precision {
        Precision::Float32 => sys.fp32_flops_per_cycle,
        Precision::Float8 => sys.fp8_flops_per_cycle.max(sys.fp16_flops_per_cycle),
        _ => sys.fp16_flops_per_cycle,
    } as f64;
    let host_rate = sys.host_link_bytes_per_sec / sys.clock_hz;
    estimate_costs(
        m,
        sys.tiles_per_ipu,
        rate.max(1.0),
        opts.float_bytes(),
        host_rate,
    )
}

/// How far over capacity the fullest tile of an out-of-memory error is (1
/// if it names no tile).
fn oom_ratio(e: &Error) -> f64 {
    match e {
        Error::OutOfMemory { tiles, .. } => tiles
            .iter()
            .map(|t| t.used as f64 / t.capacity.max(1) as f64)
            .fold(1.0, f64::max),
        _ => 1.0,
    }
}

/// The busiest tile of each stage against an even spread of the stage's
/// estimated bytes: the factor the split's capacity must allow for.
fn observed_imbalance(
    rc: &SplitProblem<'_>,
    starts: &[usize],
    est: &PipelineEstimate,
    tiles: u32,
) -> f64 {
    let n = rc.costs.len();
    let mut bounds = vec![0];
    bounds.extend_from_slice(starts);
    bounds.push(n);
    let mut worst: f64 = 1.0;
    for (w, st) in bounds.windows(2).zip(&est.stages) {
        let bytes: f64 = rc.costs[w[0]..w[1]]
            .iter()
            .map(|c| c.resident_bytes)
            .sum::<f64>()
            + rc.costs[w[0]..w[1]]
                .iter()
                .map(|c| c.output_bytes)
                .fold(0.0, f64::max);
        if bytes > 0.0 {
            worst = worst.max(st.max_tile_bytes as f64 * tiles as f64 / bytes);
        }
    }
    worst
}

/// Figures of a full `ipu2` system, for backends that do not describe theirs.
pub fn default_system() -> SystemInfo {
    SystemInfo {
        version: "ipu2".into(),
        chip: String::new(),
        num_ipus: 16,
        tiles_per_ipu: 1472,
        bytes_per_tile: 638976,
        clock_hz: 1.33e9,
        fp16_flops_per_cycle: 128,
        fp32_flops_per_cycle: 32,
        fp8_flops_per_cycle: 0,
        worker_threads: 6,
        exchange_bytes_per_cycle: 4,
        exchange_descriptor_cycles: 2,
        local_read_bytes_per_cycle: 16,
        local_write_bytes_per_cycle: 8,
        sync_cycles: 90,
        cross_ipu_sync_cycles: 800,
        ipu_link_bytes_per_sec: 32e9,
        ipu_links: 10,
        host_link: String::new(),
        host_link_bytes_per_sec: 25e9,
        host_transfer_latency_cycles: 2000,
        vertex_overhead_cycles: 60,
        estimated_constants: Vec::new(),
    }
}

/// Prepares `model` for `inputs` and lowers it whole onto `backend` (one
/// IPU): the single-stage path, used to inspect lowering.
pub fn lower_model(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
    backend: &mut dyn Backend,
) -> Result<Lowered> {
    opts.validate()?;
    let mut m = model.clone();
    let limits = Limits {
        tensor_bytes: backend.ipu_memory_bytes(),
        float_bytes: opts.float_bytes() as u64,
        ..Limits::default()
    };
    let passes = prepare(&mut m, inputs, &limits)?;
    let lopts = opts.lower_options();
    let g = &m.graph;
    let zeros = vec![0u32; g.nodes.len()];
    let mut cx = LowerCx::new(backend, g, m.opset, &lopts, &zeros);
    let mut in_bind = Vec::new();
    for &v in &g.inputs {
        in_bind.push(cx.bind_input(v, 0)?);
    }
    let all: Vec<usize> = (0..g.nodes.len()).collect();
    let placement = cx.lower_nodes(&all, 0)?;
    let outputs = cx.finish_outputs(&g.outputs)?;
    Ok(Lowered {
        inputs: in_bind,
        outputs,
        passes,
        placement,
    })
}

/// Graph-level optimisation only: the prepared model (folded, fused, pruned),
/// specialised to `inputs`.
pub fn optimize(model: &Model, inputs: &[TensorSpec]) -> Result<(Model, PassStats)> {
    let mut m = model.clone();
    let stats = prepare(&mut m, inputs, &Limits::default())?;
    Ok((m, stats))
}
