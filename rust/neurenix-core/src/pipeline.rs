//! Pipeline stages: a model split over the IPUs of a replica, one compiled
//! program per IPU, and the estimate of running it.
//!
//! Each stage is lowered and compiled on its own (a program for one IPU), so
//! each IPU has its own program, its own engine and its own host thread(s)
//! when run. A value produced on one stage and read on a later one is a
//! [`Carry`]: the producing stage streams it out in the device type it was
//! made in, and the reading stages stream it in unchanged; on the device it
//! is a copy over the IPU-Links, costed by the [`Topology`].

use std::collections::{BTreeSet, HashMap};

use crate::backend::{Backend, DeviceExecutable};
use crate::compile::Placement;
use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::executable::HostStream;
use crate::ir::{Model, ValueId};
use crate::lower::{LowerCx, LowerOptions};
use crate::report::{DeviceReport, StepCost, StepKind, SystemInfo};
use crate::topology::{Topology, Transfer};

/// How micro-batches pass the stages of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// Every stage works on a different micro-batch at the same time.
    Pipelined,
    /// One micro-batch passes the stages in turn; one IPU works at a time.
    Sharded,
}

impl Execution {
    pub fn name(self) -> &'static str {
        match self {
            Execution::Pipelined => "pipelined",
            Execution::Sharded => "sharded",
        }
    }
    pub fn parse(s: &str) -> Result<Execution> {
        match s {
            "pipelined" => Ok(Execution::Pipelined),
            "sharded" => Ok(Execution::Sharded),
            _ => Err(Error::InvalidArgument(format!(
                "unknown execution '{s}'; expected 'pipelined' or 'sharded'"
            ))),
        }
    }
}

/// A value produced on one stage and read on later ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Carry {
    pub value: ValueId,
    pub name: String,
    pub from: u32,
    /// Stages that read it, in order.
    pub to: Vec<u32>,
    /// Bytes of one micro-batch's value on the device.
    pub bytes: u64,
    pub device_type: DeviceType,
}

/// Where a stage input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Model input number.
    Host(usize),
    /// Carry number.
    Carried(usize),
}

/// Where a stage output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// Model output number.
    Host(usize),
    Carried(usize),
}

/// One stage: a program for one IPU of the replica.
pub struct Stage {
    pub ipu: u32,
    /// The nodes it runs, in program order.
    pub placement: Vec<Placement>,
    pub inputs: Vec<(HostStream, Source)>,
    pub outputs: Vec<(HostStream, Sink)>,
    pub device: Box<dyn DeviceExecutable>,
    pub report: DeviceReport,
}

impl Stage {
    /// Names of the stage's streams that carry tensors between stages
    /// (`carried`) or the model's inputs and outputs (`!carried`).
    pub fn stream_names(&self, carried: bool) -> BTreeSet<&str> {
        let ins = self
            .inputs
            .iter()
            .filter(move |(_, src)| matches!(src, Source::Carried(_)) == carried)
            .map(|(h, _)| h.name.as_str());
        let outs = self
            .outputs
            .iter()
            .filter(move |(_, sink)| matches!(sink, Sink::Carried(_)) == carried)
            .map(|(h, _)| h.name.as_str());
        ins.chain(outs).collect()
    }
}

/// The stream a host-transfer step moves ("host->device x" -> "x"); None for
/// compute and exchange steps.
pub fn step_stream(step: &StepCost) -> Option<&str> {
    match step.kind {
        StepKind::HostToDevice | StepKind::DeviceToHost => Some(
            step.name
                .split_once(' ')
                .map_or(step.name.as_str(), |(_, n)| n),
        ),
        StepKind::Compute | StepKind::Exchange => None,
    }
}

/// The host streams of the whole model (micro-batch shapes).
pub struct ModelStreams {
    pub inputs: Vec<HostStream>,
    pub outputs: Vec<HostStream>,
}

/// Lowers and compiles every stage of `model` (prepared) for the stage of
/// each node in `stage_of`, one backend per stage.
pub fn compile_stages(
    model: &Model,
    stage_of: &[u32],
    stages: u32,
    opts: &LowerOptions,
    new_backend: &mut dyn FnMut() -> Result<Box<dyn Backend>>,
) -> Result<(Vec<Stage>, Vec<Carry>, ModelStreams)> {
    let g = &model.graph;
    let producers = g.producers();
    let stage_of_value = |v: ValueId| producers.get(&v).map(|&p| stage_of[p]);
    // Carries, in order of their producer.
    let mut carry_of: HashMap<ValueId, usize> = HashMap::new();
    let mut carries: Vec<Carry> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        for &v in node.inputs.iter().flatten() {
            let Some(from) = stage_of_value(v) else {
                continue;
            };
            if from == stage_of[i] || g.constant(v).is_some() {
                continue;
            }
            let c = *carry_of.entry(v).or_insert_with(|| {
                carries.push(Carry {
                    value: v,
                    name: g.value(v).name.clone(),
                    from,
                    to: Vec::new(),
                    bytes: 0,
                    device_type: DeviceType::F32,
                });
                carries.len() - 1
            });
            if !carries[c].to.contains(&stage_of[i]) {
                carries[c].to.push(stage_of[i]);
                carries[c].to.sort_unstable();
            }
        }
    }
    let mut by_producer: Vec<usize> = (0..carries.len()).collect();
    by_producer.sort_by_key(|&c| producers[&carries[c].value]);

    let mut out = Vec::new();
    let mut model_in: Vec<Option<HostStream>> = vec![None; g.inputs.len()];
    let mut model_out: Vec<Option<HostStream>> = vec![None; g.outputs.len()];
    for s in 0..stages {
        let nodes: Vec<usize> = (0..g.nodes.len()).filter(|&i| stage_of[i] == s).collect();
        let reads = |v: ValueId| {
            nodes
                .iter()
                .any(|&i| g.nodes[i].inputs.iter().flatten().any(|&x| x == v))
        };
        // Model inputs: where they are read; stage 0 also binds those read
        // nowhere or returned as they are.
        let host_in: Vec<usize> = (0..g.inputs.len())
            .filter(|&k| {
                let v = g.inputs[k];
                reads(v)
                    || (s == 0
                        && !g
                            .nodes
                            .iter()
                            .any(|n| n.inputs.iter().flatten().any(|&x| x == v)))
                    || (s == 0 && g.outputs.contains(&v))
            })
            .collect();
        let carried_in: Vec<usize> = by_producer
            .iter()
            .copied()
            .filter(|&c| carries[c].to.contains(&s))
            .collect();
        let outs: Vec<usize> = (0..g.outputs.len())
            .filter(|&k| stage_of_value(g.outputs[k]).unwrap_or(0) == s)
            .collect();
        let carried_out: Vec<usize> = by_producer
            .iter()
            .copied()
            .filter(|&c| carries[c].from == s)
            .collect();

        let mut backend = new_backend()?;
        let zeros = vec![0u32; g.nodes.len()];
        let mut cx = LowerCx::new(backend.as_mut(), g, model.opset, opts, &zeros);
        // State (training) lives on the one stage.
        if !g.state.is_empty() {
            if stages > 1 {
                return Err(Error::InvalidArgument(format!(
                    "training runs each replica on one IPU: its weights and optimizer state cannot yet be split \
                     over {stages} pipeline stages; use num_ipus equal to replication_factor"
                )));
            }
            for st in &g.state {
                cx.bind_state(st, 0)?;
            }
        }
        let mut inputs = Vec::new();
        for &k in &host_in {
            let hs = cx.bind_input(g.inputs[k], 0)?;
            model_in[k].get_or_insert_with(|| hs.clone());
            inputs.push((hs, Source::Host(k)));
        }
        for &c in &carried_in {
            let hs = cx.bind_carried(carries[c].value, carries[c].device_type, 0)?;
            inputs.push((hs, Source::Carried(c)));
        }
        let out_values: Vec<ValueId> = outs.iter().map(|&k| g.outputs[k]).collect();
        let second: Vec<usize> = nodes
            .iter()
            .copied()
            .filter(|&i| g.nodes[i].attrs.contains_key(crate::train::SEGMENT_ATTR))
            .collect();
        let (placement, host_out) = if second.is_empty() {
            let placement = cx.lower_nodes(&nodes, s)?;
            for st in &g.state {
                cx.assign_state(st)?;
            }
            (placement, cx.finish_outputs(&out_values)?)
        } else {
            // Two segments (training with replicas): gradients, outputs and
            // the accumulators first; the update after.
            let first: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|i| !second.contains(i))
                .collect();
            let mut placement = cx.lower_nodes(&first, s)?;
            let host_out = cx.finish_outputs(&out_values)?;
            for st in g.state.iter().filter(|st| st.in_first_segment) {
                cx.assign_state(st)?;
            }
            cx.backend.begin_segment()?;
            placement.extend(cx.lower_nodes(&second, s)?);
            for st in g.state.iter().filter(|st| !st.in_first_segment) {
                cx.assign_state(st)?;
            }
            for st in g.state.iter().filter(|st| st.cleared_after_update) {
                cx.clear_state(st)?;
            }
            (placement, host_out)
        };
        crate::progress::report("allocation", u64::from(s), u64::from(stages));
        let carry_values: Vec<ValueId> = carried_out.iter().map(|&c| carries[c].value).collect();
        let sent = cx.finish_carried(&carry_values)?;
        drop(cx);
        let mut outputs = Vec::new();
        for (hs, &k) in host_out.into_iter().zip(&outs) {
            model_out[k] = Some(hs.clone());
            outputs.push((hs, Sink::Host(k)));
        }
        for (hs, &c) in sent.into_iter().zip(&carried_out) {
            carries[c].device_type = hs.device_type;
            carries[c].bytes = (hs.shape.iter().product::<usize>() * hs.device_type.size()) as u64;
            outputs.push((hs, Sink::Carried(c)));
        }
        let device = backend.compile().map_err(|e| on_stage(e, s, stages))?;
        crate::progress::report("allocation", u64::from(s) + 1, u64::from(stages));
        let report = device.report();
        out.push(Stage {
            ipu: s,
            placement,
            inputs,
            outputs,
            device,
            report,
        });
    }
    let streams = ModelStreams {
        inputs: model_in
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                s.ok_or_else(|| Error::Internal(format!("model input {k} was bound on no stage")))
            })
            .collect::<Result<_>>()?,
        outputs: model_out
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                s.ok_or_else(|| {
                    Error::Internal(format!("model output {k} was produced on no stage"))
                })
            })
            .collect::<Result<_>>()?,
    };
    Ok((out, carries, streams))
}

/// An out-of-memory error of stage `s`'s program, told as the replica's IPU.
fn on_stage(e: Error, s: u32, stages: u32) -> Error {
    if stages <= 1 {
        return e;
    }
    match e {
        Error::OutOfMemory {
            mut tiles,
            tensor,
            message,
        } => {
            for t in &mut tiles {
                t.ipu = s;
            }
            Error::OutOfMemory {
                tiles,
                tensor,
                message: format!("pipeline stage {s} (IPU {s} of the replica): {message}"),
            }
        }
        other => other,
    }
}

/// What one stage costs per micro-batch.
#[derive(Debug, Clone, PartialEq)]
pub struct StageEstimate {
    pub ipu: u32,
    pub nodes: usize,
    /// Compute sets, exchanges and syncs of its program.
    pub compute_cycles: u64,
    /// Streaming model inputs and outputs (shared host links included).
    pub host_cycles: u64,
    /// Receiving carried tensors over the IPU-Links.
    pub copy_cycles: u64,
    /// One micro-batch's time on the stage: the sum of the above.
    pub interval_cycles: u64,
    /// Carried tensors received: (name, bytes, from IPU).
    pub carried_in: Vec<(String, u64, u32)>,
    /// The busiest tile's bytes and the IPU's total.
    pub max_tile_bytes: u64,
    pub memory_bytes: u64,
}

/// The estimate of one call: `device_iterations` micro-batches on each of
/// `replicas` replicas, at the same time.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineEstimate {
    pub execution: Execution,
    pub stages: Vec<StageEstimate>,
    pub replicas: u32,
    pub device_iterations: u32,
    /// Filling and draining the pipeline (0 when sharded).
    pub fill_cycles: u64,
    /// Steady state: cycles between two micro-batches leaving a replica.
    pub interval_cycles: u64,
    /// One call (all micro-batches of every replica).
    pub cycles_per_call: u64,
}

/// IPUs that share one host link: an IPU-M2000 or Bow-2000's gateway serves
/// its four IPUs; a C2 card's PCIe its two; a C600 card has its own.
pub fn ipus_per_host_link(system: &SystemInfo) -> u32 {
    match system.version.as_str() {
        "ipu1" => 2,
        "ipu21" => 1,
        _ => 4,
    }
}

/// The estimate of running `stages` (with `carries` between them).
pub fn estimate(
    stages: &[Stage],
    carries: &[Carry],
    execution: Execution,
    replicas: u32,
    ipus_per_replica: u32,
    device_iterations: u32,
    topology: &Topology,
) -> PipelineEstimate {
    let ipus = ipus_per_replica.max(1);
    let transfers: Vec<(usize, u32, Transfer)> = carries
        .iter()
        .enumerate()
        .flat_map(|(c, k)| {
            k.to.iter().map(move |&t| {
                (
                    c,
                    t,
                    Transfer {
                        from: k.from,
                        to: t,
                        bytes: k.bytes,
                    },
                )
            })
        })
        .collect();
    let flows: Vec<Transfer> = transfers.iter().map(|t| t.2).collect();
    // In the steady state every copy runs at once; sharded, one at a time.
    let copy_cycles: Vec<u64> = match execution {
        Execution::Pipelined => topology.cycles(&flows),
        Execution::Sharded => flows
            .iter()
            .map(|f| topology.copy_cycles(f.from, f.to, f.bytes))
            .collect(),
    };
    let host_share = stages
        .first()
        .map(|s| {
            let per_link = ipus_per_host_link(&s.report.system);
            if ipus >= per_link {
                1
            } else {
                replicas.min((per_link / ipus.max(1)).max(1)) as u64
            }
        })
        .unwrap_or(1);
    let mut est = Vec::new();
    for st in stages {
        let carried = st.stream_names(true);
        let (mut compute, mut host) = (0u64, 0u64);
        for step in &st.report.steps {
            match step.kind {
                StepKind::Compute | StepKind::Exchange => {
                    compute = compute.saturating_add(step.cycles)
                }
                StepKind::HostToDevice | StepKind::DeviceToHost => {
                    if !step_stream(step).is_some_and(|n| carried.contains(n)) {
                        // Replicas sharing a host link share its bandwidth;
                        // the fixed latency of each stream overlaps.
                        let sys = &st.report.system;
                        let per_cycle = sys.host_link_bytes_per_sec / sys.clock_hz;
                        let shared = if per_cycle > 0.0 {
                            ((host_share - 1) as f64 * step.bytes as f64 / per_cycle).ceil() as u64
                        } else {
                            0
                        };
                        host = host.saturating_add(step.cycles.saturating_add(shared));
                    }
                }
            }
        }
        let mut copy = 0;
        let mut carried_in = Vec::new();
        for ((c, to, _), &cyc) in transfers.iter().zip(&copy_cycles) {
            if *to == st.ipu {
                copy = match execution {
                    Execution::Pipelined => copy.max(cyc),
                    Execution::Sharded => copy.saturating_add(cyc),
                };
                carried_in.push((
                    carries[*c].name.clone(),
                    carries[*c].bytes,
                    carries[*c].from,
                ));
            }
        }
        est.push(StageEstimate {
            ipu: st.ipu,
            nodes: st.placement.len(),
            compute_cycles: compute,
            host_cycles: host,
            copy_cycles: copy,
            interval_cycles: compute.saturating_add(host).saturating_add(copy),
            carried_in,
            max_tile_bytes: st.report.tiles.iter().map(|t| t.total()).max().unwrap_or(0),
            memory_bytes: st.report.tiles.iter().map(|t| t.total()).sum(),
        });
    }
    let sum: u64 = est
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.interval_cycles));
    let worst = est.iter().map(|s| s.interval_cycles).max().unwrap_or(0);
    let d = u64::from(device_iterations.max(1));
    let (fill, interval, per_call) = match execution {
        Execution::Pipelined => (
            sum - worst,
            worst,
            sum.saturating_add((d - 1).saturating_mul(worst)),
        ),
        Execution::Sharded => (0, sum, d.saturating_mul(sum)),
    };
    PipelineEstimate {
        execution,
        stages: est,
        replicas,
        device_iterations,
        fill_cycles: fill,
        interval_cycles: interval,
        cycles_per_call: per_call,
    }
}

/// Cycles of the model's host streams in `stage`'s program, by stream name
/// (carried tensors excluded).
pub fn stage_stream_cycles(stage: &Stage) -> HashMap<String, f64> {
    let host = stage.stream_names(false);
    let mut out = HashMap::new();
    for step in &stage.report.steps {
        if let Some(name) = step_stream(step).filter(|n| host.contains(n)) {
            *out.entry(name.to_string()).or_insert(0.0) += step.cycles as f64;
        }
    }
    out
}

/// Cycles of each node of `stage`, from its program's step costs (a step
/// belongs to the node whose name is the longest prefix of its own, up to a
/// '/'); steps that belong to no node are spread evenly.
pub fn node_cycles(stage: &Stage) -> HashMap<String, f64> {
    let mut out: HashMap<String, f64> = stage
        .placement
        .iter()
        .map(|p| (p.node.clone(), 0.0))
        .collect();
    let mut orphan = 0.0;
    for step in &stage.report.steps {
        if !matches!(step.kind, StepKind::Compute | StepKind::Exchange) {
            continue;
        }
        let mut owner: Option<&str> = None;
        for p in &stage.placement {
            let n = p.node.as_str();
            let matches = step.name == n
                || (step.name.len() > n.len()
                    && step.name.starts_with(n)
                    && step.name.as_bytes()[n.len()] == b'/');
            if matches && owner.is_none_or(|o| o.len() < n.len()) {
                owner = Some(n);
            }
        }
        match owner {
            Some(n) => *out.get_mut(n).expect("a placed node") += step.cycles as f64,
            None => orphan += step.cycles as f64,
        }
    }
    if !out.is_empty() && orphan > 0.0 {
        let each = orphan / out.len() as f64;
        for v in out.values_mut() {
            *v += each;
        }
    }
    out
}
