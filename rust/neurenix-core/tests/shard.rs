//! The sharder: the automatic split against brute force over every legal
//! contiguous split, memory as a hard limit, tensors carried across cuts;
//! manual plans (stage starts and node -> IPU maps) resolved by name and
//! refused when they name unknown nodes or are not a legal cut.

use crate::common::*;
use neurenix_core::compile::optimize;
use neurenix_core::dtype::ElemType;
use neurenix_core::error::Error;
use neurenix_core::ir::Model;
use neurenix_core::passes::TensorSpec;
use neurenix_core::shard::{
    check_legal, estimate_costs, manual_stages, stages_from_starts, NodeCost, Sharding,
    SplitProblem,
};

/// The slowest stage of the best split into exactly `k` non-empty contiguous
/// stages under `p.capacity`, by trying every split.
fn brute_force(p: &SplitProblem<'_>, k: usize) -> Option<f64> {
    fn rec(
        p: &SplitProblem<'_>,
        n: usize,
        k: usize,
        from: usize,
        starts: &mut Vec<usize>,
        best: &mut Option<f64>,
    ) {
        if starts.len() == k - 1 {
            if let Some(b) = p.bottleneck(starts) {
                if best.is_none_or(|x| b < x) {
                    *best = Some(b);
                }
            }
            return;
        }
        for s in from..n {
            starts.push(s);
            rec(p, n, k, s + 1, starts, best);
            starts.pop();
        }
    }
    let mut best = None;
    rec(p, p.costs.len(), k, 1, &mut Vec::new(), &mut best);
    best
}

#[test]
fn the_split_is_optimal_on_random_layered_graphs_with_skips() {
    let mut rng = XorShift::new(2024);
    for _ in 0..300 {
        let n = 2 + rng.below(8);
        let costs: Vec<NodeCost> = (0..n)
            .map(|_| NodeCost {
                cycles: rng.uniform(0.0, 100.0),
                resident_bytes: rng.uniform(0.0, 50.0),
                output_bytes: rng.uniform(0.0, 20.0),
                host_cycles: if rng.below(4) == 0 { 30.0 } else { 0.0 },
            })
            .collect();
        // Each node reads its predecessor and sometimes an earlier node.
        let reads: Vec<Vec<(usize, usize, f64)>> = (0..n)
            .map(|i| {
                let mut r = Vec::new();
                if i > 0 {
                    r.push((i - 1, i - 1, costs[i - 1].output_bytes));
                }
                if i > 1 && rng.below(3) == 0 {
                    let j = rng.below(i - 1);
                    r.push((j, j, costs[j].output_bytes));
                }
                r
            })
            .collect();
        let k = 1 + rng.below(4.min(n));
        let input_reads = (0..n)
            .map(|i| {
                if i == 0 || rng.below(4) == 0 {
                    vec![(0, 40.0)]
                } else {
                    vec![]
                }
            })
            .collect();
        let p = SplitProblem {
            costs: &costs,
            reads,
            input_reads,
            capacity: rng.uniform(60.0, 300.0),
            copy_bytes_per_cycle: (0..4).map(|_| rng.uniform(0.5, 4.0)).collect(),
            copy_sync_cycles: 5.0,
        };
        let want = brute_force(&p, k);
        let got = p.best_split(k);
        match (want, got) {
            (None, None) => {}
            (Some(w), Some((starts, b))) => {
                assert!((b - w).abs() < 1e-9, "best {b} vs brute force {w}");
                assert_eq!(starts.len(), k - 1);
                assert_eq!(
                    p.bottleneck(&starts),
                    Some(b),
                    "the split achieves its figure and fits"
                );
            }
            (w, g) => panic!("brute force {w:?}, split {g:?}"),
        }
    }
}

/// A chain of `n` MatMul layers of width `w`, with a skip Add every third.
fn chain(n: usize, w: usize) -> Model {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, w]);
    let mut rng = XorShift::new(9);
    let mut cur = "x".to_string();
    for i in 0..n {
        b.init(&format!("w{i}"), tf32(&[w, w], &rng.vec(w * w, -0.1, 0.1)));
        let mm = format!("mm{i}");
        b.node(
            "MatMul",
            &format!("matmul{i}"),
            &[&cur, &format!("w{i}")],
            &[&mm],
        );
        let r = format!("r{i}");
        b.node("Tanh", &format!("tanh{i}"), &[&mm], &[&r]);
        if i % 3 == 2 {
            let s = format!("s{i}");
            b.node("Add", &format!("skip{i}"), &[&r, &cur], &[&s]);
            cur = s;
        } else {
            cur = r;
        }
    }
    b.output(&cur);
    b.build()
}

fn prepared(m: &Model, w: usize) -> Model {
    let spec = [TensorSpec {
        name: "x".into(),
        dtype: ElemType::F32,
        shape: vec![4, w],
    }];
    optimize(m, &spec).unwrap().0
}

fn names(m: &Model, stage: &[u32], s: u32) -> Vec<String> {
    m.graph
        .nodes
        .iter()
        .zip(stage)
        .filter(|(_, &x)| x == s)
        .map(|(n, _)| n.name.clone())
        .collect()
}

#[test]
fn stage_starts_cut_where_named() {
    let m = chain(4, 8);
    let p = prepared(&m, 8);
    let st = manual_stages(&m, &p, &Sharding::StageStarts(vec!["matmul2".into()]), 2).unwrap();
    assert_eq!(names(&p, &st, 0), ["matmul0", "tanh0", "matmul1", "tanh1"]);
    assert_eq!(names(&p, &st, 1)[0], "matmul2");
    check_legal(&p.graph, &st).unwrap();
}

#[test]
fn node_ipus_inherit_from_the_node_before() {
    let m = chain(3, 8);
    let p = prepared(&m, 8);
    let plan = Sharding::NodeIpus(vec![("matmul1".into(), 1), ("matmul2".into(), 2)]);
    let st = manual_stages(&m, &p, &plan, 4).unwrap();
    assert_eq!(names(&p, &st, 0), ["matmul0", "tanh0"]);
    assert_eq!(names(&p, &st, 1), ["matmul1", "tanh1"]);
    assert_eq!(names(&p, &st, 2), ["matmul2", "tanh2", "skip2"]);
    // An IPU left empty between used ones is refused.
    let gap = Sharding::NodeIpus(vec![("matmul1".into(), 1), ("matmul2".into(), 3)]);
    match manual_stages(&m, &p, &gap, 4) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("IPU 2 would hold no node"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn manual_plans_that_are_not_legal_are_refused() {
    let m = chain(3, 8);
    let p = prepared(&m, 8);
    let err = |plan: Sharding, ipus: u32| match manual_stages(&m, &p, &plan, ipus) {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let e = err(Sharding::StageStarts(vec!["nope".into()]), 2);
    assert!(
        e.contains("unknown node name(s) 'nope'") && e.contains("'matmul0'"),
        "{e}"
    );
    let e = err(
        Sharding::StageStarts(vec!["matmul2".into(), "matmul1".into()]),
        4,
    );
    assert!(
        e.contains("not a legal cut") && e.contains("does not come after"),
        "{e}"
    );
    let e = err(Sharding::StageStarts(vec!["matmul0".into()]), 2);
    assert!(e.contains("stage 0 would be empty"), "{e}");
    let e = err(
        Sharding::StageStarts(vec!["matmul1".into(), "matmul2".into()]),
        2,
    );
    assert!(e.contains("each replica has 2 IPU(s)"), "{e}");
    // tanh0 back on IPU 0 after matmul1 went to IPU 1 reads... backwards:
    // skip2 reads s-chain values from IPU 1 while placed on IPU 0.
    let e = err(
        Sharding::NodeIpus(vec![("matmul1".into(), 1), ("skip2".into(), 0)]),
        2,
    );
    assert!(
        e.contains("not a legal cut") && e.contains("'skip2' on IPU 0"),
        "{e}"
    );
    let e = err(Sharding::NodeIpus(vec![("matmul1".into(), 5)]), 2);
    assert!(e.contains("IPUs 0..1"), "{e}");
}

#[test]
fn weights_are_counted_once_where_first_read_and_outputs_where_made() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 8]);
    b.init("W", tf32(&[8, 8], &[0.5; 64]));
    b.node("MatMul", "m1", &["x", "W"], &["a"]);
    b.node("MatMul", "m2", &["a", "W"], &["b"]);
    b.node("Relu", "r", &["b"], &["y"]);
    b.output("y");
    let m = prepared(&b.build(), 8);
    let c = estimate_costs(&m, 4, 32.0, 4, 16.0);
    assert_eq!(c[0].resident_bytes, 256.0);
    assert_eq!(c[1].resident_bytes, 0.0, "a shared weight counts once");
    // Half precision halves float bytes.
    assert_eq!(
        estimate_costs(&m, 4, 32.0, 2, 16.0)[0].resident_bytes,
        128.0
    );
    for x in &c {
        assert_eq!(x.output_bytes, 128.0);
    }
    assert!(c[2].host_cycles > 0.0 && c[0].host_cycles == 0.0 && c[1].host_cycles == 0.0);
    assert!(c[0].cycles > c[2].cycles, "a matmul costs more than a relu");
}

#[test]
fn stages_from_starts_are_contiguous() {
    assert_eq!(stages_from_starts(5, &[2, 4]), vec![0, 0, 1, 1, 2]);
    assert_eq!(stages_from_starts(3, &[]), vec![0, 0, 0]);
}
