//! Graph-level fusion: forwarding nodes (Identity, inference Dropout) are
//! removed with their consumers rewired, graph outputs are kept, and
//! MatMul + Add(constant) becomes Gemm exactly when that is valid.

use crate::common::*;
use neurenix_core::compile::optimize;
use neurenix_core::dtype::ElemType;
use neurenix_core::ir::{Attr, Model};
use neurenix_core::lower::precision::Precision;
use neurenix_core::passes::TensorSpec;

fn spec(name: &str, dtype: ElemType, shape: &[usize]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

fn ops(m: &Model) -> Vec<String> {
    m.graph.nodes.iter().map(|n| n.op_type.clone()).collect()
}

/// Op types, sorted (independent of the topological order chosen).
fn op_set(m: &Model) -> Vec<String> {
    let mut v = ops(m);
    v.sort();
    v
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Names of the values the node called `name` reads.
fn reads_of(m: &Model, name: &str) -> Vec<String> {
    let i = m
        .graph
        .nodes
        .iter()
        .position(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node '{name}'"));
    reads(m, i)
}

/// Names of the values node `i` reads (omitted inputs as "").
fn reads(m: &Model, i: usize) -> Vec<String> {
    m.graph.nodes[i]
        .inputs
        .iter()
        .map(|v| v.map(|v| m.graph.value(v).name.clone()).unwrap_or_default())
        .collect()
}

#[test]
fn identity_and_dropout_are_removed_and_consumers_rewired() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3]);
    b.node("Identity", "id", &["x"], &["a"]);
    b.node("Relu", "relu", &["a"], &["r1"]);
    b.node("Sigmoid", "sig", &["a"], &["r2"]);
    b.node("Dropout", "drop", &["r1"], &["d"]);
    b.node("Identity", "id2", &["d"], &["d2"]);
    b.node("Exp", "exp", &["d2"], &["y1"]);
    b.node("Add", "add", &["d", "r2"], &["y2"]);
    b.output("y1");
    b.output("y2");
    let m = b.build();
    let (opt, st) = optimize(&m, &[spec("x", ElemType::F32, &[2, 3])]).unwrap();
    assert_eq!(st.fused, 3, "{st:?}");
    assert_eq!(op_set(&opt), sorted(&["Relu", "Sigmoid", "Exp", "Add"]));
    assert_eq!(reads_of(&opt, "relu"), vec!["x"]);
    assert_eq!(reads_of(&opt, "sig"), vec!["x"]);
    assert_eq!(
        reads_of(&opt, "exp"),
        vec!["r1"],
        "a chain of forwarders collapses to its source"
    );
    assert_eq!(reads_of(&opt, "add"), vec!["r1", "r2"]);
    // Same function before and after.
    let x: Vec<f64> = vec![-1.5, -0.5, 0.0, 0.5, 1.0, 2.0];
    let (_, be) = lower(
        &m,
        &[feed("x", ElemType::F32, &[2, 3], x.clone())],
        &copts(Precision::Float32, 1),
    );
    let relu: Vec<f64> = x.iter().map(|v| v.max(0.0)).collect();
    let sig: Vec<f64> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    assert_close(
        &be.out("y1"),
        &relu.iter().map(|v| v.exp()).collect::<Vec<_>>(),
        1e-6,
        "y1",
    );
    assert_close(
        &be.out("y2"),
        &relu
            .iter()
            .zip(&sig)
            .map(|(a, b)| a + b)
            .collect::<Vec<_>>(),
        1e-6,
        "y2",
    );
}

#[test]
fn forwarders_that_produce_graph_outputs_are_kept() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4]);
    b.node("Relu", "relu", &["x"], &["a"]);
    b.node("Identity", "out_id", &["a"], &["y"]);
    b.node("Identity", "passthrough", &["x"], &["z"]);
    b.node("Dropout", "out_drop", &["a"], &["w"]);
    b.output("y");
    b.output("z");
    b.output("w");
    let m = b.build();
    let (opt, st) = optimize(&m, &[spec("x", ElemType::F32, &[4])]).unwrap();
    assert_eq!(st.fused, 0);
    assert_eq!(
        op_set(&opt),
        sorted(&["Relu", "Identity", "Identity", "Dropout"])
    );
    let x = vec![-1.0, 2.0, -3.0, 4.0];
    let (l, be) = lower(
        &m,
        &[feed("x", ElemType::F32, &[4], x.clone())],
        &copts(Precision::Float32, 1),
    );
    let names: Vec<&str> = l.outputs.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, vec!["y", "z", "w"]);
    assert_exact(&be.out("y"), &[0.0, 2.0, 0.0, 4.0], "y");
    assert_exact(&be.out("z"), &x, "z");
    assert_exact(&be.out("w"), &[0.0, 2.0, 0.0, 4.0], "w");
}

#[test]
fn dropout_with_a_mask_or_a_ratio_is_not_treated_as_identity() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[3]);
    b.init("ratio", tf32(&[], &[0.5]));
    b.node("Dropout", "with_mask", &["x"], &["a", "mask"]);
    b.node("Dropout", "with_ratio", &["a", "ratio"], &["c"]);
    b.node("Relu", "relu", &["c"], &["y"]);
    b.output("y");
    b.output("mask");
    let m = b.build();
    let (opt, _) = optimize(&m, &[spec("x", ElemType::F32, &[3])]).unwrap();
    assert_eq!(op_set(&opt), sorted(&["Dropout", "Dropout", "Relu"]));
    // In inference both still forward x, and the mask is all true.
    let (_, be) = lower(
        &m,
        &[feed("x", ElemType::F32, &[3], vec![-1.0, 0.5, 2.0])],
        &copts(Precision::Float32, 1),
    );
    assert_exact(&be.out("y"), &[0.0, 0.5, 2.0], "y");
    assert_exact(&be.out("mask"), &[1.0, 1.0, 1.0], "mask");
    assert_eq!(
        be.output("mask").dtype,
        neurenix_core::dtype::DeviceType::Bool
    );
    assert_eq!(be.count(Kind::Fill), 1, "the mask is a fill");
}

#[test]
fn same_shape_reshapes_and_same_type_casts_forward() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3]);
    b.init("s", ti64(&[2], &[2, 3]));
    b.init("s6", ti64(&[1], &[6]));
    b.node("Reshape", "same", &["x", "s"], &["a"]);
    b.node_a("Cast", "to_f32", &["a"], &["c"], vec![("to", Attr::Int(1))]);
    b.node("Reshape", "flat", &["c", "s6"], &["d"]);
    b.node_a(
        "Cast",
        "to_f16",
        &["d"],
        &["y"],
        vec![("to", Attr::Int(10))],
    );
    b.output("y");
    let (opt, st) = optimize(&b.build(), &[spec("x", ElemType::F32, &[2, 3])]).unwrap();
    assert_eq!(st.fused, 2, "{st:?}");
    assert_eq!(ops(&opt), vec!["Reshape", "Cast"]);
    assert_eq!(reads(&opt, 0), vec!["x", "s6"]);
}

/// y = MatMul(A, W) + C with the given shapes; `w_const`/`c_const` make W
/// and C initializers (else graph inputs); `swap` writes Add(C, y).
struct MmAdd {
    a: Vec<usize>,
    w: Vec<usize>,
    c: Vec<usize>,
    w_const: bool,
    c_const: bool,
    swap: bool,
    opset: i64,
}

impl MmAdd {
    fn new(a: &[usize], w: &[usize], c: &[usize]) -> MmAdd {
        MmAdd {
            a: a.to_vec(),
            w: w.to_vec(),
            c: c.to_vec(),
            w_const: true,
            c_const: true,
            swap: false,
            opset: 13,
        }
    }
    fn data(&self) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut rng = XorShift::new(numel(&self.a) as u64 * 31 + numel(&self.c) as u64);
        (
            rng.eighths(numel(&self.a), 2),
            rng.eighths(numel(&self.w), 2),
            rng.eighths(numel(&self.c), 2),
        )
    }
    fn model(&self) -> (Model, Vec<Feed>) {
        let (av, wv, cv) = self.data();
        let mut b = ModelBuilder::new(self.opset);
        let mut feeds = vec![feed("A", ElemType::F32, &self.a, av)];
        b.input_fixed("A", ElemType::F32, &self.a);
        if self.w_const {
            b.init("W", tf32(&self.w, &wv));
        } else {
            b.input_fixed("W", ElemType::F32, &self.w);
            feeds.push(feed("W", ElemType::F32, &self.w, wv));
        }
        if self.c_const {
            b.init("C", tf32(&self.c, &cv));
        } else {
            b.input_fixed("C", ElemType::F32, &self.c);
            feeds.push(feed("C", ElemType::F32, &self.c, cv));
        }
        b.node("MatMul", "mm", &["A", "W"], &["y"]);
        if self.swap {
            b.node("Add", "add", &["C", "y"], &["z"]);
        } else {
            b.node("Add", "add", &["y", "C"], &["z"]);
        }
        b.output("z");
        (b.build(), feeds)
    }
    /// Reference for 2-D A: A W + C with C broadcast to [M, N].
    fn reference(&self) -> Vec<f64> {
        let (av, wv, cv) = self.data();
        let (m, k, n) = (self.a[0], self.a[1], self.w[1]);
        let y = ref_matmul(&av, &wv, m, k, n);
        let idx = broadcast_index(&self.c, &[m, n]).expect("C broadcasts");
        (0..m * n).map(|i| y[i] + cv[idx[i]]).collect()
    }
}

#[test]
fn matmul_add_becomes_gemm_when_valid() {
    let (m, k, n) = (3, 4, 5);
    for c in [
        vec![n],
        vec![1, n],
        vec![m, n],
        vec![],
        vec![m, 1],
        vec![1, 1],
    ] {
        for swap in [false, true] {
            let case = MmAdd {
                swap,
                ..MmAdd::new(&[m, k], &[k, n], &c)
            };
            let (model, feeds) = case.model();
            let (opt, st) = optimize(&model, &specs(&feeds)).unwrap();
            assert_eq!(ops(&opt), vec!["Gemm"], "C {c:?} swap {swap}");
            assert_eq!(st.fused, 1);
            assert_eq!(
                reads(&opt, 0),
                vec!["A", "W", "C"],
                "Gemm(A, W, C) whatever the Add order"
            );
            let gemm = &opt.graph.nodes[0];
            assert_eq!(gemm.name, "mm+add");
            assert_eq!(
                opt.graph.value(gemm.outputs[0]).name,
                "z",
                "the Add's output is kept"
            );
            assert!(gemm.attrs.is_empty(), "alpha = beta = 1, no transposes");
            let (_, be) = lower(&model, &feeds, &copts(Precision::Float32, 1));
            assert_eq!(be.count(Kind::MatMul), 1);
            assert_close(
                &be.out("z"),
                &case.reference(),
                1e-6,
                &format!("C {c:?} swap {swap}"),
            );
        }
    }
}

#[test]
fn matmul_add_stays_when_gemm_would_be_invalid() {
    let base = || MmAdd::new(&[3, 4], &[4, 5], &[5]);
    let cases: Vec<(&str, MmAdd)> = vec![
        ("batched A", MmAdd::new(&[2, 3, 4], &[4, 5], &[5])),
        ("vector A", MmAdd::new(&[4], &[4, 5], &[5])),
        (
            "W not constant",
            MmAdd {
                w_const: false,
                ..base()
            },
        ),
        (
            "C not constant",
            MmAdd {
                c_const: false,
                ..base()
            },
        ),
        ("C of rank 3", MmAdd::new(&[3, 4], &[4, 5], &[1, 1, 5])),
        (
            "C broadcasts the result up",
            MmAdd::new(&[1, 4], &[4, 5], &[3, 5]),
        ),
        ("opset 6", MmAdd { opset: 6, ..base() }),
    ];
    for (what, case) in cases {
        let (model, feeds) = case.model();
        let (opt, _) = optimize(&model, &specs(&feeds)).unwrap();
        assert_eq!(ops(&opt), vec!["MatMul", "Add"], "{what}");
    }
    // The MatMul result read twice.
    let (mut model, feeds) = base().model();
    let mut b = ModelBuilder {
        g: std::mem::take(&mut model.graph),
        opset: 13,
    };
    b.node("Relu", "relu", &["y"], &["r"]);
    b.output("r");
    let (opt, _) = optimize(&b.build(), &specs(&feeds)).unwrap();
    assert_eq!(
        op_set(&opt),
        sorted(&["MatMul", "Add", "Relu"]),
        "two readers"
    );
    // The MatMul result is itself a graph output.
    let (mut model, feeds) = base().model();
    let y = model.graph.find("y").unwrap();
    model.graph.outputs.push(y);
    let (opt, _) = optimize(&model, &specs(&feeds)).unwrap();
    assert_eq!(ops(&opt), vec!["MatMul", "Add"], "graph output");
    // y + y, and Sub instead of Add.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("A", ElemType::F32, &[3, 4]);
    b.init("W", tf32(&[4, 5], &[0.5; 20]));
    b.init("C", tf32(&[5], &[1.0; 5]));
    b.node("MatMul", "mm", &["A", "W"], &["y"]);
    b.node("Add", "twice", &["y", "y"], &["z"]);
    b.node("MatMul", "mm2", &["A", "W"], &["y2"]);
    b.node("Sub", "sub", &["y2", "C"], &["z2"]);
    b.output("z");
    b.output("z2");
    let (opt, _) = optimize(&b.build(), &[spec("A", ElemType::F32, &[3, 4])]).unwrap();
    assert_eq!(op_set(&opt), sorted(&["MatMul", "Add", "MatMul", "Sub"]));
}

#[test]
fn stacked_dense_layers_all_fuse() {
    // Three Linear layers with biases and Relus between them.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 4]);
    let mut rng = XorShift::new(8);
    let mut cur = "x".to_string();
    let mut ws = Vec::new();
    for i in 0..3 {
        let (w, c) = (rng.eighths(16, 1), rng.eighths(4, 1));
        b.init(&format!("W{i}"), tf32(&[4, 4], &w));
        b.init(&format!("b{i}"), tf32(&[4], &c));
        ws.push((w, c));
        b.node(
            "MatMul",
            &format!("mm{i}"),
            &[&cur, &format!("W{i}")],
            &[&format!("m{i}")],
        );
        b.node(
            "Add",
            &format!("add{i}"),
            &[&format!("m{i}"), &format!("b{i}")],
            &[&format!("a{i}")],
        );
        b.node(
            "Relu",
            &format!("relu{i}"),
            &[&format!("a{i}")],
            &[&format!("r{i}")],
        );
        cur = format!("r{i}");
    }
    b.output(&cur);
    let m = b.build();
    let x = rng.eighths(8, 2);
    let feeds = [feed("x", ElemType::F32, &[2, 4], x.clone())];
    let (opt, st) = optimize(&m, &specs(&feeds)).unwrap();
    assert_eq!(st.fused, 3);
    assert_eq!(
        ops(&opt),
        vec!["Gemm", "Relu", "Gemm", "Relu", "Gemm", "Relu"]
    );
    let (_, be) = lower(&m, &feeds, &copts(Precision::Float32, 1));
    let mut h = x;
    for (w, c) in &ws {
        let y = ref_matmul(&h, w, 2, 4, 4);
        h = (0..8).map(|i| (y[i] + c[i % 4]).max(0.0)).collect();
    }
    assert_close(&be.out(&cur), &h, 1e-6, "three dense layers");
}
