//! Sharding: splits a model over several IPUs as contiguous pipeline stages of
//! its topological order, balancing per-IPU load.
//!
//! Each node's load mixes its share of the model's memory (weights it reads,
//! activations it writes) and of its compute (flops), so a stage is neither
//! the one holding all the weights nor the one doing all the work. The split
//! minimises the largest stage (linear partition, dynamic programming).

use crate::ir::Model;
use crate::ops::{lookup, OpCx};

/// Per-node estimates the planner balances.
#[derive(Debug, Clone, Default)]
pub struct NodeLoad {
    pub flops: f64,
    pub weight_bytes: f64,
    pub activation_bytes: f64,
}

pub fn node_loads(model: &Model) -> Vec<NodeLoad> {
    let g = &model.graph;
    let mut seen_weight = vec![false; g.values.len()];
    g.nodes
        .iter()
        .map(|n| {
            let cx = OpCx {
                graph: g,
                node: n,
                opset: model.opset,
            };
            let flops = lookup(n, model.opset)
                .map(|op| op.flops(&cx))
                .unwrap_or(0.0);
            let mut weight = 0.0;
            for &v in n.inputs.iter().flatten() {
                if let Some(c) = g.constant(v) {
                    if !seen_weight[v] {
                        seen_weight[v] = true;
                        weight += (c.numel() * 4) as f64;
                    }
                }
            }
            let act: f64 = n
                .outputs
                .iter()
                .filter_map(|&o| g.shape_of(o))
                .map(|s| (s.iter().product::<usize>() * 4) as f64)
                .sum();
            NodeLoad {
                flops,
                weight_bytes: weight,
                activation_bytes: act,
            }
        })
        .collect()
}

/// Splits `loads` into `parts` contiguous groups minimising the largest
/// group's sum; returns the group of each item.
pub fn linear_partition(loads: &[f64], parts: usize) -> Vec<u32> {
    let n = loads.len();
    if n == 0 || parts <= 1 {
        return vec![0; n];
    }
    let k = parts.min(n);
    let mut prefix = vec![0.0; n + 1];
    for i in 0..n {
        prefix[i + 1] = prefix[i] + loads[i];
    }
    // best[j][i]: minimal max-load splitting the first i items into j groups.
    let inf = f64::INFINITY;
    let mut best = vec![vec![inf; n + 1]; k + 1];
    let mut cut = vec![vec![0usize; n + 1]; k + 1];
    best[0][0] = 0.0;
    for j in 1..=k {
        for i in j..=n {
            for p in (j - 1)..i {
                let cand = best[j - 1][p].max(prefix[i] - prefix[p]);
                if cand < best[j][i] {
                    best[j][i] = cand;
                    cut[j][i] = p;
                }
            }
        }
    }
    let mut out = vec![0u32; n];
    let mut i = n;
    for j in (1..=k).rev() {
        let p = cut[j][i];
        for item in out.iter_mut().take(i).skip(p) {
            *item = (j - 1) as u32;
        }
        i = p;
    }
    out
}

/// The IPU of every node.
pub fn assign_ipus(model: &Model, num_ipus: u32) -> Vec<u32> {
    if num_ipus <= 1 {
        return vec![0; model.graph.nodes.len()];
    }
    let loads = node_loads(model);
    let tot_f: f64 = loads.iter().map(|l| l.flops).sum::<f64>().max(1.0);
    let tot_m: f64 = loads
        .iter()
        .map(|l| l.weight_bytes + l.activation_bytes)
        .sum::<f64>()
        .max(1.0);
    let score: Vec<f64> = loads
        .iter()
        .map(|l| 0.5 * l.flops / tot_f + 0.5 * (l.weight_bytes + l.activation_bytes) / tot_m)
        .collect();
    linear_partition(&score, num_ipus as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_balances_and_is_contiguous() {
        let loads = [1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0];
        let p = linear_partition(&loads, 3);
        assert!(p.windows(2).all(|w| w[0] <= w[1]));
        let mut sums = [0.0; 3];
        for (l, g) in loads.iter().zip(&p) {
            sums[*g as usize] += l;
        }
        assert_eq!(sums.iter().cloned().fold(0.0, f64::max), 4.0);
        assert_eq!(*p.last().unwrap(), 2);
    }

    #[test]
    fn more_parts_than_items() {
        assert_eq!(linear_partition(&[1.0, 2.0], 4), vec![0, 1]);
    }
}
