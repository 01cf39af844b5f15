//! Sharding: which pipeline stage (IPU of a replica) runs each node.
//!
//! A plan is either the user's (stage starts, like PopTorch's `BeginBlock`,
//! or a node -> IPU mapping) or automatic. A plan is legal when no node reads
//! a value produced on a later stage: data only flows forward through the
//! pipeline. Every value produced on one stage and read on a later one is a
//! *carried* tensor, copied over the IPU-Links.
//!
//! The automatic plan splits the prepared graph's topological order into
//! contiguous stages (every such split is legal, branches included) by
//! dynamic programming: the slowest stage (its compute, host streams and the
//! copies it receives) is made as fast as possible while every stage's
//! memory estimate stays under its IPU's capacity. The estimates are
//! calibrated against what the compiler actually allocates and costs (see
//! `compile.rs`), so a plan is only accepted once every stage compiled and
//! fits.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::{Graph, Model};
use crate::ops::{lookup, OpCx};

/// How the nodes are spread over the IPUs of a replica.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Sharding {
    /// Chosen by the compiler: memory-feasible, fastest slowest stage.
    #[default]
    Auto,
    /// Names of the nodes at which stages 1, 2, ... begin.
    StageStarts(Vec<String>),
    /// Node name -> IPU; nodes not named take the IPU of the node before
    /// them in topological order (the first node: IPU 0).
    NodeIpus(Vec<(String, u32)>),
}

/// What one node costs, for the automatic split.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeCost {
    /// Cycles of the node's program steps on a whole IPU.
    pub cycles: f64,
    /// Bytes always live on its IPU (weights and constants it reads first).
    pub resident_bytes: f64,
    /// Bytes of the values it produces.
    pub output_bytes: f64,
    /// Streaming the model outputs it produces to the host.
    pub host_cycles: f64,
}

/// Finds the prepared node a user's name refers to: the node itself, a fused
/// node that absorbed it ("a+b"), or, for a node the passes removed, the next
/// node of the original order that survived.
struct NameIndex {
    prepared: HashMap<String, usize>,
    /// Original topological order: names, each with the prepared node it
    /// survives as (if any).
    original: Vec<(String, Option<usize>)>,
}

impl NameIndex {
    fn new(original: &Model, prepared: &Graph) -> NameIndex {
        let mut map = HashMap::new();
        for (i, n) in prepared.nodes.iter().enumerate() {
            map.insert(n.name.clone(), i);
        }
        for (i, n) in prepared.nodes.iter().enumerate() {
            if n.name.contains('+') {
                for part in n.name.split('+') {
                    map.entry(part.to_string()).or_insert(i);
                }
            }
        }
        let mut g = original.graph.clone();
        let order: Vec<String> = match g.toposort() {
            Ok(()) => g.nodes.iter().map(|n| n.name.clone()).collect(),
            Err(_) => original
                .graph
                .nodes
                .iter()
                .map(|n| n.name.clone())
                .collect(),
        };
        let original = order
            .into_iter()
            .map(|name| {
                let at = map.get(&name).copied();
                (name, at)
            })
            .collect();
        NameIndex {
            prepared: map,
            original,
        }
    }

    /// The prepared node `name` refers to; `Some(None)` for a removed node
    /// with no surviving node after it.
    fn find(&self, name: &str) -> Option<Option<usize>> {
        if let Some(&i) = self.prepared.get(name) {
            return Some(Some(i));
        }
        let pos = self.original.iter().position(|(n, _)| n == name)?;
        Some(self.original[pos..].iter().find_map(|(_, at)| *at))
    }

    fn unknown(&self, names: &[&str], what: &str) -> Error {
        let mut known: Vec<&str> = self.original.iter().map(|(n, _)| n.as_str()).collect();
        let more = known.len().saturating_sub(12);
        known.truncate(12);
        Error::InvalidArgument(format!(
            "sharding {what} unknown node name(s) {}; the model's nodes include {}{}",
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", "),
            known
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ))
    }
}

/// The stage of every node of `prepared` under a manual plan, for replicas
/// of `ipus` IPUs. `original` is the model as given (its node names are the
/// ones a user writes).
pub fn manual_stages(
    original: &Model,
    prepared: &Model,
    plan: &Sharding,
    ipus: u32,
) -> Result<Vec<u32>> {
    let g = &prepared.graph;
    let n = g.nodes.len();
    let index = NameIndex::new(original, g);
    let stage = match plan {
        Sharding::Auto => {
            return Err(Error::Internal(
                "manual_stages called for automatic sharding".into(),
            ))
        }
        Sharding::StageStarts(starts) => {
            if starts.len() as u64 + 1 > ipus as u64 {
                return Err(Error::InvalidArgument(format!(
                    "sharding begins {} stage(s) after the first ({} in all), but each replica has {ipus} IPU(s); \
                     name at most {} node(s), or use more IPUs per replica",
                    starts.len(),
                    starts.len() + 1,
                    ipus.saturating_sub(1)
                )));
            }
            let missing: Vec<&str> = starts
                .iter()
                .filter(|s| index.find(s).is_none())
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(index.unknown(&missing, "begins a stage at"));
            }
            let mut stage = vec![0u32; n];
            let mut prev: Option<(usize, &str)> = None;
            for (k, name) in starts.iter().enumerate() {
                let at = index.find(name).flatten().unwrap_or(n);
                let s = k as u32 + 1;
                match prev {
                    Some((p, pname)) if at <= p => {
                        return Err(Error::InvalidArgument(format!(
                            "sharding is not a legal cut: stage {s} begins at '{name}', which does not come after \
                             '{pname}' where stage {} begins (stages follow the model's topological order)",
                            s - 1
                        )))
                    }
                    None if at == 0 => {
                        return Err(Error::InvalidArgument(format!(
                            "sharding is not a legal cut: stage 1 begins at '{name}', the first node, so stage 0 \
                             would be empty"
                        )))
                    }
                    _ => {}
                }
                if at >= n {
                    return Err(Error::InvalidArgument(format!(
                        "sharding is not a legal cut: stage {s} begins at '{name}', after the last node that \
                         runs on the device, so it would be empty"
                    )));
                }
                for x in stage.iter_mut().skip(at) {
                    *x = s;
                }
                prev = Some((at, name));
            }
            stage
        }
        Sharding::NodeIpus(map) => {
            let missing: Vec<&str> = map
                .iter()
                .filter(|(s, _)| index.find(s).is_none())
                .map(|(s, _)| s.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(index.unknown(&missing, "maps"));
            }
            let mut given: Vec<Option<u32>> = vec![None; n];
            for (name, ipu) in map {
                if *ipu >= ipus {
                    return Err(Error::InvalidArgument(format!(
                        "sharding maps node '{name}' to IPU {ipu}, but each replica has IPUs 0..{}",
                        ipus - 1
                    )));
                }
                if let Some(i) = index.find(name).flatten() {
                    // A fused node takes the latest IPU of the nodes it absorbed.
                    given[i] = Some(given[i].map_or(*ipu, |g| g.max(*ipu)));
                }
            }
            let mut stage = vec![0u32; n];
            let mut cur = 0;
            for i in 0..n {
                if let Some(s) = given[i] {
                    cur = s;
                }
                stage[i] = cur;
            }
            let used = stage.iter().copied().max().map_or(0, |x| x + 1);
            if let Some(empty) = (0..used).find(|s| !stage.contains(s)) {
                return Err(Error::InvalidArgument(format!(
                    "sharding is not a legal plan: IPU {empty} would hold no node while IPU {} holds some; map \
                     nodes to IPUs 0, 1, ... in order with none left empty",
                    used - 1
                )));
            }
            stage
        }
    };
    check_legal(g, &stage)?;
    Ok(stage)
}

/// Refuses a plan in which a node reads a value produced on a later stage.
pub fn check_legal(g: &Graph, stage: &[u32]) -> Result<()> {
    let producers = g.producers();
    for (i, node) in g.nodes.iter().enumerate() {
        for &v in node.inputs.iter().flatten() {
            if let Some(&p) = producers.get(&v) {
                if stage[p] > stage[i] {
                    return Err(Error::InvalidArgument(format!(
                        "sharding is not a legal cut: node '{}' on IPU {} reads '{}' from node '{}' on IPU {}; \
                         data can only flow to the same or a later IPU of the pipeline",
                        node.name,
                        stage[i],
                        g.value(v).name,
                        g.nodes[p].name,
                        stage[p]
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Fixed cost of a host stream before anything is compiled (the
/// simulator's figure; replaced by the compiled programs' own).
const HOST_STREAM_CYCLES: f64 = 2000.0;

/// Cycles of streaming `bytes` between the host and an IPU, before
/// anything is compiled.
pub fn host_stream_cycles(bytes: f64, host_bytes_per_cycle: f64) -> f64 {
    HOST_STREAM_CYCLES + bytes / host_bytes_per_cycle.max(1e-9)
}

/// Bytes of value `v` on the device: floats at `float_bytes` (the
/// precision's), other types at their size.
pub fn value_bytes(g: &Graph, v: usize, float_bytes: usize) -> f64 {
    let bytes = match g.value(v).dtype {
        Some(t) if t.is_float() => float_bytes,
        Some(t) => t.size(),
        None => 4,
    };
    g.shape_of(v)
        .map_or(0.0, |s| s.iter().product::<usize>() as f64 * bytes as f64)
}

/// First estimates of what each node costs, before anything is compiled:
/// flops at the chip's rate over all `tiles`, outputs exchanged at 4 bytes
/// per tile per cycle, constants at their device size.
pub fn estimate_costs(
    model: &Model,
    tiles: u32,
    flops_per_cycle: f64,
    float_bytes: usize,
    host_bytes_per_cycle: f64,
) -> Vec<NodeCost> {
    let g = &model.graph;
    let mut seen = vec![false; g.values.len()];
    let stream = |bytes: f64| host_stream_cycles(bytes, host_bytes_per_cycle);
    let tiles = tiles.max(1) as f64;
    let size = |v: usize| value_bytes(g, v, float_bytes);
    g.nodes
        .iter()
        .map(|n| {
            let cx = OpCx {
                graph: g,
                node: n,
                opset: model.opset,
            };
            let flops = lookup(n, model.opset).map_or(0.0, |op| op.flops(&cx));
            let mut resident = 0.0;
            for &v in n.inputs.iter().flatten() {
                if g.constant(v).is_some() && !seen[v] {
                    seen[v] = true;
                    resident += size(v);
                }
            }
            let out: f64 = n.outputs.iter().map(|&o| size(o)).sum();
            let mut host = 0.0;
            for &o in &n.outputs {
                if g.outputs.contains(&o) {
                    host += stream(size(o));
                }
            }
            NodeCost {
                cycles: flops / (tiles * flops_per_cycle * 0.5) + out / (tiles * 4.0) + 300.0,
                resident_bytes: resident,
                output_bytes: out,
                host_cycles: host,
            }
        })
        .collect()
}

/// The automatic split's problem: node costs in topological order, which
/// node reads which (values produced by other nodes, with their bytes), and
/// the rates of what a stage pays besides its nodes.
pub struct SplitProblem<'a> {
    pub costs: &'a [NodeCost],
    /// Per node: (producer node, bytes) of each distinct value it reads
    /// from another node.
    pub reads: Vec<Vec<(usize, usize, f64)>>,
    /// Per node: (model input, cycles to stream it in) of each model input
    /// it reads. Every stage that reads an input streams it.
    pub input_reads: Vec<Vec<(usize, f64)>>,
    /// Bytes a stage may hold (its IPU's capacity, divided by the observed
    /// imbalance between the busiest tile and the average).
    pub capacity: f64,
    /// Bytes per cycle of the copies stage `j` receives from stage `j - 1`
    /// (entry `j`; the last entry serves later stages).
    pub copy_bytes_per_cycle: Vec<f64>,
    /// Fixed cost of receiving carried tensors (the sync between IPUs).
    pub copy_sync_cycles: f64,
}

/// One stage of a split: nodes `begin..end`, its estimated time and memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageCost {
    /// Compute and host streams.
    pub cycles: f64,
    pub bytes: f64,
    /// Carried tensors received.
    pub carried_bytes: f64,
    /// Bytes over the link into the stage: every value made before it and
    /// read by it or by any later stage (copies to later stages are routed
    /// through the same chain of links).
    pub link_bytes: f64,
}

impl<'a> SplitProblem<'a> {
    /// `reads` built from the graph: for every node, the values it reads
    /// that another node produces, as (producer, value, bytes on the device).
    pub fn reads_of(g: &Graph, float_bytes: usize) -> Vec<Vec<(usize, usize, f64)>> {
        let producers = g.producers();
        g.nodes
            .iter()
            .map(|n| {
                let mut seen = HashSet::new();
                n.inputs
                    .iter()
                    .flatten()
                    .filter_map(|&v| {
                        let p = *producers.get(&v)?;
                        seen.insert(v)
                            .then(|| (p, v, value_bytes(g, v, float_bytes)))
                    })
                    .collect()
            })
            .collect()
    }

    /// `input_reads` built from the graph, with `cycles(v)` the cost of
    /// streaming model input `v`.
    pub fn input_reads_of(g: &Graph, cycles: &dyn Fn(usize) -> f64) -> Vec<Vec<(usize, f64)>> {
        g.nodes
            .iter()
            .map(|n| {
                let mut seen = HashSet::new();
                n.inputs
                    .iter()
                    .flatten()
                    .filter(|&&v| g.inputs.contains(&v) && seen.insert(v))
                    .map(|&v| (v, cycles(v)))
                    .collect()
            })
            .collect()
    }

    /// Costs of every range `p..i` of nodes as one stage: row `p`, entry
    /// `i - p - 1`.
    fn range_costs(&self) -> Vec<Vec<StageCost>> {
        let n = self.costs.len();
        let crossing = self.crossing_bytes();
        (0..n)
            .map(|p| {
                let mut row = Vec::with_capacity(n - p);
                let mut carried: HashSet<usize> = HashSet::new();
                let mut streamed: HashSet<usize> = HashSet::new();
                let mut carried_bytes = 0.0;
                let (mut cycles, mut resident, mut peak_out) = (0.0, 0.0, 0.0f64);
                for i in p..n {
                    let c = &self.costs[i];
                    cycles += c.cycles + c.host_cycles;
                    resident += c.resident_bytes;
                    peak_out = peak_out.max(c.output_bytes);
                    for &(v, c) in self.input_reads.get(i).map_or(&[][..], |r| &r[..]) {
                        if streamed.insert(v) {
                            cycles += c;
                        }
                    }
                    for &(src, v, bytes) in &self.reads[i] {
                        if src < p && carried.insert(v) {
                            carried_bytes += bytes;
                        }
                    }
                    row.push(StageCost {
                        cycles,
                        bytes: resident + peak_out + carried_bytes,
                        carried_bytes,
                        link_bytes: crossing[p],
                    });
                }
                row
            })
            .collect()
    }

    /// Per node `p`: the bytes of the distinct values made before `p` and
    /// read at or after it (what crosses a cut in front of `p`).
    fn crossing_bytes(&self) -> Vec<f64> {
        let n = self.costs.len();
        // Each value: its producer, its last reader and its bytes.
        // (Ordered, so that the sums below add up the same way every time.)
        let mut values: std::collections::BTreeMap<usize, (usize, usize, f64)> =
            std::collections::BTreeMap::new();
        for (i, reads) in self.reads.iter().enumerate() {
            for &(src, v, bytes) in reads {
                let e = values.entry(v).or_insert((src, i, bytes));
                e.1 = e.1.max(i);
            }
        }
        // A value crosses the cuts in front of nodes src+1 ..= last reader.
        let mut delta = vec![0.0; n + 2];
        for &(src, last, bytes) in values.values() {
            if last > src {
                delta[src + 1] += bytes;
                delta[last + 1] -= bytes;
            }
        }
        let mut out = Vec::with_capacity(n);
        let mut now = 0.0;
        for d in delta.iter().take(n) {
            now += d;
            out.push(now);
        }
        out
    }

    /// Cycles of range cost `c` as stage `j`: with the copies over its
    /// incoming link (its own carried tensors and those passing through).
    fn stage_cycles(&self, c: &StageCost, j: usize) -> f64 {
        let link = c.link_bytes.max(c.carried_bytes);
        if link <= 0.0 || j == 0 {
            return c.cycles;
        }
        let bw = self
            .copy_bytes_per_cycle
            .get(j)
            .or(self.copy_bytes_per_cycle.last())
            .copied()
            .unwrap_or(1.0)
            .max(1e-9);
        c.cycles + link / bw + self.copy_sync_cycles
    }

    /// The split into exactly `stages` non-empty contiguous stages that
    /// minimises the slowest stage with every stage under `capacity`:
    /// the first node of each stage after the first, and the slowest
    /// stage's cycles. None if no such split exists.
    pub fn best_split(&self, stages: usize) -> Option<(Vec<usize>, f64)> {
        let n = self.costs.len();
        if stages == 0 || n < stages {
            return None;
        }
        let rc = self.range_costs();
        let cost = |p: usize, i: usize| rc[p][i - p - 1];
        let inf = f64::INFINITY;
        // best[j][i]: slowest stage of the best split of nodes 0..i into j
        // stages; ties broken by the smaller sum.
        let mut best = vec![vec![(inf, inf); n + 1]; stages + 1];
        let mut cut = vec![vec![0usize; n + 1]; stages + 1];
        best[0][0] = (0.0, 0.0);
        for j in 1..=stages {
            for i in j..=n {
                for p in (j - 1)..i {
                    let (prev, prev_sum) = best[j - 1][p];
                    if prev == inf {
                        continue;
                    }
                    let c = cost(p, i);
                    if c.bytes > self.capacity {
                        continue;
                    }
                    let cyc = self.stage_cycles(&c, j - 1);
                    let cand = (prev.max(cyc), prev_sum + cyc);
                    if cand.0 < best[j][i].0 || (cand.0 == best[j][i].0 && cand.1 < best[j][i].1) {
                        best[j][i] = cand;
                        cut[j][i] = p;
                    }
                }
            }
        }
        if best[stages][n].0 == inf {
            return None;
        }
        let mut starts = Vec::new();
        let mut i = n;
        for j in (1..=stages).rev() {
            let p = cut[j][i];
            if j > 1 {
                starts.push(p);
            }
            i = p;
        }
        starts.reverse();
        Some((starts, best[stages][n].0))
    }

    /// The costs of each stage of a split (stage starts as `best_split`
    /// returns them; the copies not included), or None if a stage is empty
    /// or the starts are out of range.
    pub fn stage_costs(&self, starts: &[usize]) -> Option<Vec<StageCost>> {
        let n = self.costs.len();
        let mut bounds = vec![0];
        bounds.extend_from_slice(starts);
        bounds.push(n);
        if bounds.windows(2).any(|w| w[1] <= w[0] || w[1] > n) {
            return None;
        }
        let rc = self.range_costs();
        Some(
            bounds
                .windows(2)
                .map(|w| rc[w[0]][w[1] - w[0] - 1])
                .collect(),
        )
    }

    /// The slowest stage of a given split (stage starts as `best_split`
    /// returns them), or None if a stage is empty or over capacity.
    pub fn bottleneck(&self, starts: &[usize]) -> Option<f64> {
        let costs = self.stage_costs(starts)?;
        let mut worst: f64 = 0.0;
        for (j, c) in costs.iter().enumerate() {
            if c.bytes > self.capacity {
                return None;
            }
            worst = worst.max(self.stage_cycles(c, j));
        }
        Some(worst)
    }
}

/// Stage of every node from stage starts.
pub fn stages_from_starts(n: usize, starts: &[usize]) -> Vec<u32> {
    let mut stage = vec![0u32; n];
    for (k, &s) in starts.iter().enumerate() {
        for x in stage.iter_mut().skip(s) {
            *x = k as u32 + 1;
        }
    }
    stage
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(cycles: &[f64], bytes: &[f64], capacity: f64) -> (Vec<NodeCost>, f64) {
        let costs = cycles
            .iter()
            .zip(bytes)
            .map(|(&c, &b)| NodeCost {
                cycles: c,
                resident_bytes: b,
                output_bytes: 0.0,
                host_cycles: 0.0,
            })
            .collect();
        (costs, capacity)
    }

    fn chain_reads(n: usize, bytes: f64) -> Vec<Vec<(usize, usize, f64)>> {
        (0..n)
            .map(|i| {
                if i == 0 {
                    vec![]
                } else {
                    vec![(i - 1, i - 1, bytes)]
                }
            })
            .collect()
    }

    #[test]
    fn balances_the_slowest_stage() {
        let (costs, cap) = problem(
            &[1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0],
            &[0.0; 9],
            1e9,
        );
        let p = SplitProblem {
            costs: &costs,
            reads: chain_reads(9, 0.0),
            input_reads: Vec::new(),
            capacity: cap,
            copy_bytes_per_cycle: vec![1.0],
            copy_sync_cycles: 0.0,
        };
        let (starts, worst) = p.best_split(3).unwrap();
        assert_eq!(worst, 4.0);
        assert_eq!(starts.len(), 2);
        assert_eq!(p.bottleneck(&starts), Some(4.0));
    }

    #[test]
    fn memory_moves_the_cut() {
        // Balanced by time would be [0,1 | 2,3]; node 1's weights do not fit
        // beside node 0's.
        let (costs, cap) = problem(&[1.0, 1.0, 1.0, 1.0], &[6.0, 6.0, 1.0, 1.0], 10.0);
        let p = SplitProblem {
            costs: &costs,
            reads: chain_reads(4, 0.0),
            input_reads: Vec::new(),
            capacity: cap,
            copy_bytes_per_cycle: vec![1.0],
            copy_sync_cycles: 0.0,
        };
        let (starts, worst) = p.best_split(2).unwrap();
        assert_eq!(starts, vec![1]);
        assert_eq!(worst, 3.0);
        // Nothing fits one IPU, and 3 stages cannot hold 12 bytes' pair.
        assert!(p.best_split(1).is_none());
    }

    /// `n` nodes of one cycle each, nothing resident.
    fn unit_costs(n: usize) -> Vec<NodeCost> {
        vec![
            NodeCost {
                cycles: 1.0,
                ..Default::default()
            };
            n
        ]
    }

    /// A problem without a memory limit, host streams or sync costs, with
    /// copies at `bytes_per_cycle`.
    fn unbounded<'a>(
        costs: &'a [NodeCost],
        reads: Vec<Vec<(usize, usize, f64)>>,
        bytes_per_cycle: f64,
    ) -> SplitProblem<'a> {
        SplitProblem {
            costs,
            reads,
            input_reads: Vec::new(),
            capacity: 1e9,
            copy_bytes_per_cycle: vec![bytes_per_cycle],
            copy_sync_cycles: 0.0,
        }
    }

    #[test]
    fn tensors_carried_past_a_stage_load_its_incoming_link() {
        // Node 0's value is read by node 3 only; nodes 1 and 2 pass small
        // values along. Cut as [0 | 1 | 2, 3]: the 100 bytes for node 3
        // cross both cuts, so stage 1 (node 1) waits for them on its link
        // too, although it does not read them.
        let costs = unit_costs(4);
        let reads = vec![
            vec![],
            vec![(0, 1, 1.0)],
            vec![(1, 2, 1.0)],
            vec![(2, 3, 1.0), (0, 0, 100.0)],
        ];
        let p = unbounded(&costs, reads, 1.0);
        assert_eq!(p.crossing_bytes(), vec![0.0, 101.0, 101.0, 101.0]);
        let stages = p.stage_costs(&[1, 2]).unwrap();
        assert_eq!(stages[1].carried_bytes, 1.0);
        assert_eq!(stages[1].link_bytes, 101.0);
        // Stage 1: its node's cycle and 101 bytes at 1 byte per cycle.
        assert_eq!(p.stage_cycles(&stages[1], 1), 102.0);
        // Cutting after node 2 instead keeps the 100 bytes on one link.
        assert_eq!(p.bottleneck(&[1, 2]), Some(103.0));
        assert_eq!(p.bottleneck(&[3]), Some(102.0));
    }

    #[test]
    fn carried_tensors_are_charged_to_the_receiver() {
        // A skip from node 0 to node 3 crosses any cut after node 0.
        let costs = unit_costs(4);
        let reads = vec![
            vec![],
            vec![(0, 0, 10.0)],
            vec![(1, 1, 10.0)],
            vec![(2, 2, 10.0), (0, 0, 10.0)],
        ];
        let p = unbounded(&costs, reads, 10.0);
        // Cut before node 2: stage 1 receives values 1 and 0 (20 bytes).
        assert_eq!(p.bottleneck(&[2]), Some(2.0 + 2.0));
        // Cut before node 3: receives 2 and 0.
        assert_eq!(p.bottleneck(&[3]), Some(3.0));
    }
}
