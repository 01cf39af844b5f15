//! The sharding planner: optimality of the linear partition (against brute
//! force over every contiguous split), monotone IPU assignment, and the
//! per-node loads it balances.

use crate::common::*;
use neurenix_core::compile::optimize;
use neurenix_core::dtype::ElemType;
use neurenix_core::ir::Model;
use neurenix_core::passes::TensorSpec;
use neurenix_core::shard::{assign_ipus, linear_partition, node_loads};

/// Smallest possible largest-group sum over every split of `loads` into
/// exactly `k` non-empty contiguous groups.
fn brute_force(loads: &[f64], k: usize) -> f64 {
    fn rec(loads: &[f64], k: usize) -> f64 {
        if k == 1 {
            return loads.iter().sum();
        }
        let mut best = f64::INFINITY;
        // First group = loads[..i], at least one item left per remaining group.
        for i in 1..=loads.len() - (k - 1) {
            let head: f64 = loads[..i].iter().sum();
            best = best.min(head.max(rec(&loads[i..], k - 1)));
        }
        best
    }
    rec(loads, k)
}

fn group_sums(loads: &[f64], groups: &[u32]) -> Vec<f64> {
    let n = groups.iter().copied().max().map_or(0, |m| m as usize + 1);
    let mut s = vec![0.0; n];
    for (l, g) in loads.iter().zip(groups) {
        s[*g as usize] += l;
    }
    s
}

#[track_caller]
fn check_partition(loads: &[f64], parts: usize) {
    let p = linear_partition(loads, parts);
    assert_eq!(p.len(), loads.len(), "one group per item");
    if loads.is_empty() {
        return;
    }
    let k = parts.max(1).min(loads.len());
    assert_eq!(p[0], 0, "starts at group 0: {p:?}");
    for w in p.windows(2) {
        assert!(
            w[1] == w[0] || w[1] == w[0] + 1,
            "groups are contiguous and in order: {p:?}"
        );
    }
    assert_eq!(
        *p.last().unwrap() as usize,
        k - 1,
        "uses exactly min(parts, n) groups: {p:?} for {parts} parts"
    );
    let got = group_sums(loads, &p).into_iter().fold(0.0, f64::max);
    let want = brute_force(loads, k);
    assert!(
        (got - want).abs() <= 1e-9 * want.max(1.0),
        "loads {loads:?} into {parts}: largest group {got}, optimum {want} ({p:?})"
    );
}

#[test]
fn linear_partition_is_optimal_on_small_random_cases() {
    let mut rng = XorShift::new(2024);
    for case in 0..400 {
        let n = 1 + rng.below(10);
        let parts = 1 + rng.below(5);
        let loads: Vec<f64> = (0..n)
            .map(|_| match rng.below(6) {
                0 => 0.0,                      // free nodes (reshapes)
                1 => rng.uniform(50.0, 100.0), // a heavy node
                _ => rng.uniform(0.0, 10.0),
            })
            .collect();
        let _ = case;
        check_partition(&loads, parts);
    }
}

#[test]
fn linear_partition_edge_cases() {
    assert_eq!(linear_partition(&[], 4), Vec::<u32>::new());
    assert_eq!(linear_partition(&[3.0, 1.0, 2.0], 1), vec![0, 0, 0]);
    assert_eq!(linear_partition(&[3.0, 1.0, 2.0], 0), vec![0, 0, 0]);
    assert_eq!(linear_partition(&[1.0, 2.0, 3.0], 3), vec![0, 1, 2]);
    assert_eq!(linear_partition(&[5.0], 8), vec![0]);
    check_partition(&[0.0, 0.0, 0.0, 0.0], 2);
    check_partition(&[1.0; 8], 4);
    assert_eq!(linear_partition(&[1.0; 8], 4), vec![0, 0, 1, 1, 2, 2, 3, 3]);
    // One dominant item: it gets a group of its own.
    let p = linear_partition(&[1.0, 1.0, 100.0, 1.0, 1.0], 3);
    let s = group_sums(&[1.0, 1.0, 100.0, 1.0, 1.0], &p);
    assert_eq!(s.iter().cloned().fold(0.0, f64::max), 100.0, "{p:?}");
}

/// A chain of `n` MatMul layers of width `w`, each with its own weight,
/// with a Relu after each when `relu`.
fn chain(n: usize, w: usize, relu: bool) -> Model {
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
        cur = mm;
        if relu {
            let r = format!("r{i}");
            b.node("Relu", &format!("relu{i}"), &[&cur], &[&r]);
            cur = r;
        }
    }
    b.output(&cur);
    let m = b.build();
    let spec = [TensorSpec {
        name: "x".into(),
        dtype: ElemType::F32,
        shape: vec![4, w],
    }];
    optimize(&m, &spec).unwrap().0
}

#[test]
fn assign_ipus_is_monotone_and_in_range() {
    for (n, relu) in [(1, false), (3, true), (8, false), (8, true), (13, true)] {
        let m = chain(n, 16, relu);
        for ipus in [1u32, 2, 4, 8] {
            let a = assign_ipus(&m, ipus);
            assert_eq!(a.len(), m.graph.nodes.len());
            assert!(
                a.windows(2).all(|w| w[0] <= w[1]),
                "{n} layers on {ipus} IPUs goes back: {a:?}"
            );
            assert!(a.iter().all(|&i| i < ipus), "{a:?} on {ipus} IPUs");
            if ipus == 1 {
                assert!(a.iter().all(|&i| i == 0));
            }
        }
    }
}

#[test]
fn identical_layers_are_spread_evenly() {
    let m = chain(8, 16, false);
    assert_eq!(assign_ipus(&m, 4), vec![0, 0, 1, 1, 2, 2, 3, 3]);
    assert_eq!(assign_ipus(&m, 2), vec![0, 0, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn node_loads_count_flops_weights_once_and_activations() {
    // y = (x @ W) @ W with a shared W [8, 8], x [4, 8]; then Relu.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 8]);
    b.init("W", tf32(&[8, 8], &[0.5; 64]));
    b.node("MatMul", "m1", &["x", "W"], &["a"]);
    b.node("MatMul", "m2", &["a", "W"], &["b"]);
    b.node("Relu", "r", &["b"], &["y"]);
    b.output("y");
    let spec = [TensorSpec {
        name: "x".into(),
        dtype: ElemType::F32,
        shape: vec![4, 8],
    }];
    let m = optimize(&b.build(), &spec).unwrap().0;
    let l = node_loads(&m);
    assert_eq!(l.len(), 3);
    assert_eq!(l[0].flops, 2.0 * 4.0 * 8.0 * 8.0, "matmul flops = 2 M N K");
    assert_eq!(l[1].flops, 2.0 * 4.0 * 8.0 * 8.0);
    assert_eq!(l[2].flops, 32.0, "element-wise: one per output element");
    assert_eq!(
        l[0].weight_bytes,
        64.0 * 4.0,
        "the weight is counted where first read"
    );
    assert_eq!(l[1].weight_bytes, 0.0, "and only once");
    assert_eq!(l[2].weight_bytes, 0.0);
    for x in &l {
        assert_eq!(
            x.activation_bytes,
            32.0 * 4.0,
            "activations: output elements x 4 bytes"
        );
    }
}
