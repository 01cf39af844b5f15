//! Graph passes: input binding, topological order, dead-node removal, shape
//! inference with constant folding, unsupported operators, and the options
//! the driver validates.

use crate::common::*;
use neurenix_core::compile::{optimize, CompileOptions};
use neurenix_core::dtype::ElemType;
use neurenix_core::error::Error;
use neurenix_core::ir::{Attr, Dim, Model, Value};
use neurenix_core::lower::precision::Precision;
use neurenix_core::ops::supported_ops;
use neurenix_core::passes::{bind_inputs, infer_and_fold, prepare, Limits, TensorSpec};
use neurenix_core::tensor::HostTensor;

fn spec(name: &str, dtype: ElemType, shape: &[usize]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

/// Asserts an InputMismatch naming `input` whose message contains every
/// string of `parts`.
#[track_caller]
fn assert_input_mismatch(r: neurenix_core::Result<()>, input: &str, parts: &[&str]) {
    match r {
        Err(Error::InputMismatch {
            input: got,
            message,
        }) => {
            assert_eq!(got, input, "error names the wrong input: {message}");
            for p in parts {
                assert!(message.contains(p), "message {message:?} lacks {p:?}");
            }
        }
        other => panic!("expected InputMismatch for '{input}', got {other:?}"),
    }
}

/// Two float32 inputs a and b with the given declared dimensions, each
/// through its own Relu.
fn two_inputs(a_dims: Vec<Dim>, b_dims: Vec<Dim>) -> Model {
    let mut b = ModelBuilder::new(13);
    b.input("a", ElemType::F32, a_dims);
    b.input("b", ElemType::F32, b_dims);
    b.node("Relu", "ra", &["a"], &["ya"]);
    b.node("Relu", "rb", &["b"], &["yb"]);
    b.output("ya");
    b.output("yb");
    b.build()
}

#[test]
fn bind_inputs_fixes_shapes_and_binds_symbolic_dims_consistently() {
    let mut m = two_inputs(vec![sym("N"), Dim::Fixed(3)], vec![sym("N"), Dim::Fixed(4)]);
    bind_inputs(
        &mut m,
        &[
            spec("a", ElemType::F32, &[5, 3]),
            spec("b", ElemType::F32, &[5, 4]),
        ],
        &Limits::default(),
    )
    .unwrap();
    let g = &m.graph;
    assert_eq!(g.shape_of(g.find("a").unwrap()), Some(vec![5, 3]));
    assert_eq!(g.shape_of(g.find("b").unwrap()), Some(vec![5, 4]));
    // Order of the specs does not matter.
    let mut m = two_inputs(vec![sym("N"), Dim::Fixed(3)], vec![sym("N"), Dim::Fixed(4)]);
    bind_inputs(
        &mut m,
        &[
            spec("b", ElemType::F32, &[2, 4]),
            spec("a", ElemType::F32, &[2, 3]),
        ],
        &Limits::default(),
    )
    .unwrap();
    // Unnamed dimensions bind independently.
    let mut m = two_inputs(vec![sym(""), Dim::Fixed(3)], vec![sym(""), Dim::Fixed(4)]);
    bind_inputs(
        &mut m,
        &[
            spec("a", ElemType::F32, &[2, 3]),
            spec("b", ElemType::F32, &[7, 4]),
        ],
        &Limits::default(),
    )
    .unwrap();
    // Inputs without a declared type or shape take what they are given.
    let mut b = ModelBuilder::new(13);
    let x = b.g.add_value(Value {
        name: "x".into(),
        dtype: None,
        shape: None,
        constant: None,
    });
    b.g.inputs.push(x);
    b.node("Relu", "r", &["x"], &["y"]);
    b.output("y");
    let mut m = b.build();
    bind_inputs(
        &mut m,
        &[spec("x", ElemType::F16, &[2, 2, 2])],
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(m.graph.value(x).dtype, Some(ElemType::F16));
    assert_eq!(m.graph.shape_of(x), Some(vec![2, 2, 2]));
}

#[test]
fn bind_inputs_symbolic_dims_that_disagree() {
    let mut m = two_inputs(vec![sym("N"), Dim::Fixed(3)], vec![sym("N"), Dim::Fixed(4)]);
    let r = bind_inputs(
        &mut m,
        &[
            spec("a", ElemType::F32, &[5, 3]),
            spec("b", ElemType::F32, &[6, 4]),
        ],
        &Limits::default(),
    );
    assert_input_mismatch(r, "b", &["'N'", "6", "5", "input 'a'", "[N, 4]"]);
    // Within one input.
    let mut b = ModelBuilder::new(13);
    b.input("sq", ElemType::F32, vec![sym("S"), sym("S")]);
    b.node("Relu", "r", &["sq"], &["y"]);
    b.output("y");
    let mut m = b.build();
    assert_input_mismatch(
        bind_inputs(
            &mut m,
            &[spec("sq", ElemType::F32, &[3, 4])],
            &Limits::default(),
        ),
        "sq",
        &["'S'", "4", "3"],
    );
    bind_inputs(
        &mut m,
        &[spec("sq", ElemType::F32, &[3, 3])],
        &Limits::default(),
    )
    .unwrap();
}

#[test]
fn bind_inputs_dtype_rank_and_fixed_dim_mismatches() {
    let mk = || {
        two_inputs(
            vec![Dim::Fixed(2), Dim::Fixed(3)],
            vec![sym("?"), Dim::Fixed(4)],
        )
    };
    let ok_b = spec("b", ElemType::F32, &[1, 4]);
    let r = bind_inputs(
        &mut mk(),
        &[spec("a", ElemType::I64, &[2, 3]), ok_b.clone()],
        &Limits::default(),
    );
    assert_input_mismatch(r, "a", &["float32", "int64"]);
    let r = bind_inputs(
        &mut mk(),
        &[spec("a", ElemType::F32, &[2, 3, 1]), ok_b.clone()],
        &Limits::default(),
    );
    assert_input_mismatch(r, "a", &["rank 3 instead of 2", "[2, 3]"]);
    let r = bind_inputs(
        &mut mk(),
        &[spec("a", ElemType::F32, &[6]), ok_b.clone()],
        &Limits::default(),
    );
    assert_input_mismatch(r, "a", &["rank 1 instead of 2"]);
    let r = bind_inputs(
        &mut mk(),
        &[spec("a", ElemType::F32, &[2, 4]), ok_b.clone()],
        &Limits::default(),
    );
    assert_input_mismatch(r, "a", &["dimension 1 is 4, not 3"]);
    let r = bind_inputs(
        &mut mk(),
        &[
            spec("a", ElemType::F32, &[2, 3]),
            spec("b", ElemType::F32, &[1, 5]),
        ],
        &Limits::default(),
    );
    assert_input_mismatch(r, "b", &["dimension 1 is 5, not 4"]);
    let r = bind_inputs(
        &mut mk(),
        &[
            spec("a", ElemType::F32, &[2, 3]),
            spec("b", ElemType::F16, &[1, 4]),
        ],
        &Limits::default(),
    );
    assert_input_mismatch(r, "b", &["float32", "float16"]);
}

#[test]
fn bind_inputs_unknown_and_missing_names() {
    let mk = || {
        two_inputs(
            vec![Dim::Fixed(2), Dim::Fixed(3)],
            vec![Dim::Fixed(2), Dim::Fixed(4)],
        )
    };
    let a = spec("a", ElemType::F32, &[2, 3]);
    let b = spec("b", ElemType::F32, &[2, 4]);
    let r = bind_inputs(
        &mut mk(),
        &[a.clone(), b.clone(), spec("z", ElemType::F32, &[1])],
        &Limits::default(),
    );
    assert_input_mismatch(r, "z", &["no input named 'z'", "a, b"]);
    let r = bind_inputs(&mut mk(), &[a.clone()], &Limits::default());
    assert_input_mismatch(r, "b", &["no value given", "'b'"]);
    let r = bind_inputs(&mut mk(), &[], &Limits::default());
    assert_input_mismatch(r, "a", &["'a'"]);
    // Through the whole driver too.
    let e = optimize(&mk(), &[b]).unwrap_err();
    assert!(
        matches!(&e, Error::InputMismatch { input, .. } if input == "a"),
        "{e:?}"
    );
}

#[test]
fn toposort_orders_shuffled_dags() {
    let mut rng = XorShift::new(77);
    for _ in 0..50 {
        // Random DAG: node i reads the input or earlier node outputs.
        let n = 2 + rng.below(12);
        let mut b = ModelBuilder::new(13);
        b.input_fixed("x", ElemType::F32, &[2]);
        b.init("c", tf32(&[2], &[1.0, 2.0]));
        let mut specs = Vec::new();
        for i in 0..n {
            let pick = |rng: &mut XorShift| -> String {
                let j = rng.below(i + 2);
                if j == i {
                    "x".into()
                } else if j == i + 1 {
                    "c".into()
                } else {
                    format!("v{j}")
                }
            };
            let (p, q) = (pick(&mut rng), pick(&mut rng));
            specs.push((format!("n{i}"), p, q, format!("v{i}")));
        }
        // Insert the nodes in a random order.
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, rng.below(i + 1));
        }
        for &i in &order {
            let (name, p, q, out) = &specs[i];
            b.node("Add", name, &[p, q], &[out]);
        }
        b.output(&format!("v{}", n - 1));
        let mut m = b.build();
        m.graph.toposort().unwrap();
        assert_eq!(m.graph.nodes.len(), n);
        let mut produced = std::collections::HashSet::new();
        for node in &m.graph.nodes {
            for v in node.inputs.iter().flatten() {
                let name = &m.graph.value(*v).name;
                assert!(
                    name == "x" || name == "c" || produced.contains(v),
                    "{} read before it is produced",
                    name
                );
            }
            produced.extend(node.outputs.iter().copied());
        }
    }
}

#[test]
fn toposort_reports_cycles_and_values_nobody_produces() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Add", "first", &["x", "q"], &["p"]);
    b.node("Relu", "second", &["p"], &["q"]);
    b.node("Relu", "after", &["q"], &["y"]);
    b.output("y");
    let mut m = b.build();
    match m.graph.toposort() {
        Err(Error::ModelFormat(msg)) => {
            assert!(msg.contains("cycle"), "{msg}");
            assert!(msg.contains("first") && msg.contains("second"), "{msg}");
        }
        other => panic!("expected a cycle error, got {other:?}"),
    }
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Add", "adder", &["x", "ghost"], &["y"]);
    b.output("y");
    let mut m = b.build();
    match m.graph.toposort() {
        Err(Error::ModelFormat(msg)) => {
            assert!(msg.contains("'ghost'") && msg.contains("adder"), "{msg}");
        }
        other => panic!("expected a missing-producer error, got {other:?}"),
    }
    // Omitted optional inputs are fine.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Clip", "clip", &["x", "", ""], &["y"]);
    b.output("y");
    b.build().graph.toposort().unwrap();
}

#[test]
fn remove_dead_nodes_keeps_exactly_what_outputs_need() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Relu", "live1", &["x"], &["a"]);
    b.node("Exp", "dead1", &["a"], &["d1"]);
    b.node("Neg", "dead2", &["d1"], &["d2"]); // dead chain
    b.node("Dropout", "drop", &["a"], &["b", "mask"]); // live through one output
    b.node("Sigmoid", "live2", &["b"], &["y"]);
    b.node("Tanh", "dead3", &["x"], &["d3"]);
    b.output("y");
    let mut m = b.build();
    assert_eq!(m.graph.remove_dead_nodes(), 3);
    let names: Vec<&str> = m.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["live1", "drop", "live2"]);
    assert_eq!(m.graph.remove_dead_nodes(), 0, "idempotent");
}

/// x [2, 3, 4]:
///   flat  = Reshape(x, Unsqueeze(Size(x), [0]))                -> [24]
///   shp   = Where(Equal(Shape(x), 3), -1, Shape(x)) = [2, -1, 4]
///   back  = Reshape(flat, shp)                                 -> [2, 3, 4]
///   tail3 = Cast(Cast(Mul(Shape(back, start=-2), [1, 1]))) = [3, 4]
/// and, when `bad_tail`, an extra Reshape(back, tail3): 24 elements into
/// [3, 4].
fn shape_chain(bad_tail: bool) -> Model {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3, 4]);
    b.init("zero", ti64(&[1], &[0]));
    b.init("three", ti64(&[], &[3]));
    b.init("minus1", ti64(&[], &[-1]));
    b.init("ones", ti64(&[2], &[1, 1]));
    b.node("Size", "size", &["x"], &["n"]);
    b.node("Unsqueeze", "unsq", &["n", "zero"], &["n1"]);
    b.node("Reshape", "flatten", &["x", "n1"], &["flat"]);
    b.node("Shape", "shape", &["x"], &["s"]);
    b.node("Equal", "eq", &["s", "three"], &["is3"]);
    b.node("Where", "where", &["is3", "minus1", "s"], &["shp"]);
    b.node("Reshape", "unflatten", &["flat", "shp"], &["back"]);
    b.node_a(
        "Shape",
        "shape_tail",
        &["back"],
        &["tail"],
        vec![("start", Attr::Int(-2))],
    );
    b.node("Mul", "mul", &["tail", "ones"], &["tail2"]);
    b.node_a(
        "Cast",
        "cast_f",
        &["tail2"],
        &["tailf"],
        vec![("to", Attr::Int(1))],
    );
    b.node_a(
        "Cast",
        "cast_i",
        &["tailf"],
        &["tail3"],
        vec![("to", Attr::Int(7))],
    );
    if bad_tail {
        b.node("Reshape", "bad_reshape", &["back", "tail3"], &["bad"]);
    }
    b.output("back");
    b.build()
}

#[test]
fn shape_chains_fold_into_constants() {
    let (opt, st) = optimize(&shape_chain(false), &[spec("x", ElemType::F32, &[2, 3, 4])]).unwrap();
    // Folded: size, unsq, shape, eq, where, shape_tail, mul, cast_f, cast_i.
    assert_eq!(st.folded, 9, "{st:?}");
    assert_eq!(st.nodes_in, 11);
    let names: Vec<&str> = opt.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["flatten", "unflatten"],
        "only the data movement remains"
    );
    let g = &opt.graph;
    assert_eq!(
        g.constant(g.find("n1").unwrap()).unwrap().to_i64_vec(),
        vec![24]
    );
    assert_eq!(
        g.constant(g.find("shp").unwrap()).unwrap().to_i64_vec(),
        vec![2, -1, 4]
    );
    let tail3 = g.constant(g.find("tail3").unwrap()).unwrap();
    assert_eq!(
        (tail3.dtype, tail3.to_i64_vec()),
        (ElemType::I64, vec![3, 4])
    );
    assert_eq!(g.shape_of(g.find("flat").unwrap()), Some(vec![24]));
    assert_eq!(g.shape_of(g.find("back").unwrap()), Some(vec![2, 3, 4]));
    assert_eq!(g.value(g.find("back").unwrap()).dtype, Some(ElemType::F32));
    // Inference runs before dead nodes go, so an invalid dead reshape is an
    // error naming its node.
    let e = optimize(&shape_chain(true), &[spec("x", ElemType::F32, &[2, 3, 4])]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { node, .. } if node == "bad_reshape"),
        "{e:?}"
    );
}

#[test]
fn shape_gather_concat_reshape_chain_folds() {
    // The pattern PyTorch exports for x.view(x.size(0), -1):
    //   Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0), [0]), [-1]))
    let mut b = ModelBuilder::new(13);
    b.input(
        "x",
        ElemType::F32,
        vec![sym("batch"), Dim::Fixed(3), Dim::Fixed(4)],
    );
    b.init("zero", ti64(&[], &[0]));
    b.init("axes0", ti64(&[1], &[0]));
    b.init("minus1", ti64(&[1], &[-1]));
    b.node("Shape", "shape", &["x"], &["s"]);
    b.node_a(
        "Gather",
        "gather",
        &["s", "zero"],
        &["n"],
        vec![("axis", Attr::Int(0))],
    );
    b.node("Unsqueeze", "unsqueeze", &["n", "axes0"], &["n1"]);
    b.node_a(
        "Concat",
        "concat",
        &["n1", "minus1"],
        &["target"],
        vec![("axis", Attr::Int(0))],
    );
    b.node("Reshape", "view", &["x", "target"], &["y"]);
    b.node("Relu", "relu", &["y"], &["z"]);
    b.output("z");
    let m = b.build();
    for batch in [1usize, 5] {
        let (opt, st) = optimize(&m, &[spec("x", ElemType::F32, &[batch, 3, 4])]).unwrap();
        assert_eq!(st.folded, 4, "{st:?}");
        let ops: Vec<&str> = opt.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, vec!["Reshape", "Relu"]);
        let g = &opt.graph;
        assert_eq!(
            g.constant(g.find("target").unwrap()).unwrap().to_i64_vec(),
            vec![batch as i64, -1]
        );
        assert_eq!(g.shape_of(g.find("z").unwrap()), Some(vec![batch, 12]));
    }
}

#[test]
fn initializer_only_subgraphs_fold() {
    // W2 = Transpose(W) * 2 + bias is computed at compile time; x @ W2 stays.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[1, 3]);
    b.init("W", tf32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    b.init("two", tf32(&[], &[2.0]));
    b.init("bias", tf32(&[2], &[0.5, -0.5]));
    b.node("Transpose", "t", &["W"], &["Wt"]);
    b.node("Mul", "scale", &["Wt", "two"], &["W2"]);
    b.node("Add", "shift", &["W2", "bias"], &["W3"]);
    b.node("MatMul", "mm", &["x", "W3"], &["y"]);
    b.output("y");
    let m = b.build();
    let mut pm = m.clone();
    pm.graph.toposort().unwrap();
    bind_inputs(
        &mut pm,
        &[spec("x", ElemType::F32, &[1, 3])],
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(infer_and_fold(&mut pm, &Limits::default()).unwrap(), 3);
    let g = &pm.graph;
    assert_eq!(g.nodes.len(), 1);
    let w3 = g.constant(g.find("W3").unwrap()).unwrap();
    assert_eq!(w3.shape(), &[3, 2]);
    // Transposed [[1,4],[2,5],[3,6]] * 2 + [0.5, -0.5].
    assert_exact(
        &w3.to_f64_vec(),
        &[2.5, 7.5, 4.5, 9.5, 6.5, 11.5],
        "folded weight",
    );
    assert_eq!(g.shape_of(g.find("y").unwrap()), Some(vec![1, 2]));
    // The driver reports the count too.
    let (_, st) = optimize(&m, &[spec("x", ElemType::F32, &[1, 3])]).unwrap();
    assert_eq!((st.nodes_in, st.folded, st.nodes_out), (4, 3, 1), "{st:?}");
}

#[test]
fn inference_errors_name_the_node() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("a", ElemType::F32, &[2, 3]);
    b.input_fixed("b", ElemType::F32, &[4]);
    b.node("Add", "bad_add", &["a", "b"], &["y"]);
    b.output("y");
    let e = optimize(
        &b.build(),
        &[
            spec("a", ElemType::F32, &[2, 3]),
            spec("b", ElemType::F32, &[4]),
        ],
    )
    .unwrap_err();
    match &e {
        Error::ShapeMismatch { node, message } => {
            assert_eq!(node, "bad_add");
            assert!(
                message.contains("bad_add") && message.contains("broadcast"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Mixed element types.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("a", ElemType::F32, &[2]);
    b.input_fixed("i", ElemType::I64, &[2]);
    b.node("Mul", "mixed", &["a", "i"], &["y"]);
    b.output("y");
    let e = optimize(
        &b.build(),
        &[
            spec("a", ElemType::F32, &[2]),
            spec("i", ElemType::I64, &[2]),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { node, .. } if node == "mixed"),
        "{e:?}"
    );
    // A declared type that disagrees with inference.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("a", ElemType::F32, &[2]);
    let y = b.g.value_named("y");
    b.g.value_mut(y).dtype = Some(ElemType::F16);
    b.node("Relu", "r", &["a"], &["y"]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("a", ElemType::F32, &[2])]).unwrap_err();
    assert!(
        matches!(&e, Error::ModelFormat(m) if m.contains("'y'") && m.contains("float16")),
        "{e:?}"
    );
}

#[test]
fn unsupported_operators_are_named_with_context() {
    // Operators far from this compiler's op set (checked, so that the test
    // says so if one of them gets implemented).
    for op in ["NonMaxSuppression", "LSTM", "RoiAlign"] {
        assert!(
            !supported_ops().contains(&op.to_string()),
            "{op} is now supported: pick another operator"
        );
    }
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[1, 3, 8, 8]);
    b.init("w", tf32(&[1], &[1.0]));
    b.node("NonMaxSuppression", "nms1", &["x", "w"], &["c1"]);
    b.node("Relu", "relu", &["c1"], &["r"]);
    b.node("NonMaxSuppression", "nms2", &["r", "w"], &["c2"]);
    b.node("RoiAlign", "roi", &["c2"], &["l"]);
    b.node("LSTM", "lstm", &["l"], &["y"]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("x", ElemType::F32, &[1, 3, 8, 8])]).unwrap_err();
    match &e {
        Error::Unsupported {
            op_type,
            node,
            domain,
            opset,
            supported,
            message,
        } => {
            assert_eq!(op_type, "NonMaxSuppression");
            assert_eq!(node, "nms1");
            assert_eq!(domain, "ai.onnx");
            assert_eq!(*opset, 13);
            assert_eq!(supported, &supported_ops());
            assert!(
                supported.contains(&"MatMul".to_string())
                    && supported.contains(&"Relu".to_string())
            );
            assert!(
                supported.windows(2).all(|w| w[0] < w[1]),
                "sorted, no duplicates"
            );
            for part in [
                "NonMaxSuppression",
                "'nms1'",
                "opset 13",
                "not supported",
                "Supported operators:",
                "Softmax",
                "MatMul",
            ] {
                assert!(message.contains(part), "{message:?} lacks {part:?}");
            }
            assert!(
                message.contains("the model also uses LSTM, RoiAlign"),
                "{message}"
            );
            assert_eq!(
                message.matches("NonMaxSuppression").count(),
                1,
                "not repeated among the others: {message}"
            );
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // The opset in the error is the model's.
    let mut b = ModelBuilder::new(9);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("LSTM", "l", &["x"], &["y"]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("x", ElemType::F32, &[2])]).unwrap_err();
    assert!(matches!(&e, Error::Unsupported { opset: 9, .. }), "{e:?}");
    assert!(e.to_string().contains("opset 9"), "{e}");
}

#[test]
fn non_default_domains_are_unsupported() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node_d("Gelu", "com.microsoft", "fast_gelu", &["x"], &["y"], vec![]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("x", ElemType::F32, &[2])]).unwrap_err();
    match &e {
        Error::Unsupported {
            op_type,
            node,
            domain,
            message,
            ..
        } => {
            assert_eq!(
                (op_type.as_str(), node.as_str(), domain.as_str()),
                ("Gelu", "fast_gelu", "com.microsoft")
            );
            assert!(message.contains("domain com.microsoft"), "{message}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // The explicit default domain is the default domain.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node_d("Relu", "ai.onnx", "r", &["x"], &["y"], vec![]);
    b.output("y");
    optimize(&b.build(), &[spec("x", ElemType::F32, &[2])]).unwrap();
}

#[test]
fn non_default_domain_error_says_why() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node_d("Gelu", "com.microsoft", "fast_gelu", &["x"], &["y"], vec![]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("x", ElemType::F32, &[2])]).unwrap_err();
    assert!(
        e.to_string().contains("only the default ONNX domain"),
        "{e}"
    );
}

#[test]
fn unsupported_operator_forms() {
    // A reshape target that is only known at run time.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3]);
    b.input_fixed("s", ElemType::I64, &[1]);
    b.node("Reshape", "dyn_reshape", &["x", "s"], &["y"]);
    b.output("y");
    let e = optimize(
        &b.build(),
        &[
            spec("x", ElemType::F32, &[2, 3]),
            spec("s", ElemType::I64, &[1]),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { op_type, node, .. } if op_type == "Reshape" && node == "dyn_reshape"),
        "{e:?}"
    );
    assert!(e.to_string().contains("compile time"), "{e}");
    // Integer matrix products.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("a", ElemType::I32, &[2, 2]);
    b.node("MatMul", "imm", &["a", "a"], &["y"]);
    b.output("y");
    let e = optimize(&b.build(), &[spec("a", ElemType::I32, &[2, 2])]).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { op_type, .. } if op_type == "MatMul"),
        "{e:?}"
    );
    // Casting to strings.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("a", ElemType::F32, &[2]);
    b.node_a(
        "Cast",
        "to_string",
        &["a"],
        &["y"],
        vec![("to", Attr::Int(8))],
    );
    b.output("y");
    let e = optimize(&b.build(), &[spec("a", ElemType::F32, &[2])]).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { op_type, node, .. } if op_type == "Cast" && node == "to_string"),
        "{e:?}"
    );
}

#[test]
fn prepare_reports_outputs_nobody_produces_and_counts_its_work() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Relu", "r", &["x"], &["y"]);
    b.output("y");
    b.output("nowhere");
    let e = optimize(&b.build(), &[spec("x", ElemType::F32, &[2])]).unwrap_err();
    assert!(
        matches!(&e, Error::ModelFormat(m) if m.contains("'nowhere'")),
        "{e:?}"
    );

    // in: Identity, Relu, dead Exp, folded Constant, MatMul+Add -> Gemm.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 2]);
    b.init("W", tf32(&[2, 2], &[1.0, 0.0, 0.0, 1.0]));
    b.node_a(
        "Constant",
        "bias",
        &[],
        &["c"],
        vec![("value", Attr::Tensor(tf32(&[2], &[1.0, 2.0])))],
    );
    b.node("Identity", "id", &["x"], &["xi"]);
    b.node("Exp", "unused", &["xi"], &["e"]);
    b.node("MatMul", "mm", &["xi", "W"], &["m"]);
    b.node("Add", "add", &["m", "c"], &["a"]);
    b.node("Relu", "relu", &["a"], &["y"]);
    b.output("y");
    let mut m = b.build();
    let st = prepare(
        &mut m,
        &[spec("x", ElemType::F32, &[2, 2])],
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(st.nodes_in, 6);
    assert_eq!(st.folded, 1, "{st:?}");
    assert_eq!(st.dead, 1, "{st:?}");
    assert_eq!(st.fused, 2, "identity removed and MatMul+Add fused: {st:?}");
    assert_eq!(st.nodes_out, 2, "{st:?}");
    let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, vec!["Gemm", "Relu"]);
}

#[test]
fn compile_options_are_validated() {
    let base = copts(Precision::Float32, 1);
    base.validate().unwrap();
    for mp in [0.0, -0.5, 1.0001, f64::NAN, f64::INFINITY] {
        let o = CompileOptions {
            memory_proportion: mp,
            ..base.clone()
        };
        let e = o.validate().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("memory_proportion")),
            "{mp}: {e:?}"
        );
    }
    CompileOptions {
        memory_proportion: 1.0,
        ..base.clone()
    }
    .validate()
    .unwrap();
    CompileOptions {
        memory_proportion: 1e-6,
        ..base.clone()
    }
    .validate()
    .unwrap();
    for n in [0u32, 3, 5, 6, 12] {
        let e = CompileOptions {
            num_ipus: n,
            ..base.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("num_ipus")),
            "{n}: {e:?}"
        );
    }
    for n in [1u32, 2, 4, 8, 16, 64] {
        CompileOptions {
            num_ipus: n,
            ..base.clone()
        }
        .validate()
        .unwrap();
    }
    // lower_model validates before touching the backend.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Relu", "r", &["x"], &["y"]);
    b.output("y");
    let m = b.build();
    let bad = CompileOptions {
        num_ipus: 3,
        ..base
    };
    let r = try_lower(&m, &[feed("x", ElemType::F32, &[2], vec![1.0, -1.0])], &bad);
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

#[test]
fn precision_names_parse() {
    assert_eq!(Precision::parse("float32").unwrap(), Precision::Float32);
    assert_eq!(Precision::parse("float16").unwrap(), Precision::Float16);
    for alias in ["fp32", "fp16", "half"] {
        assert!(Precision::parse(alias).is_err(), "{alias}");
    }
    assert_eq!(Precision::parse("mixed").unwrap(), Precision::Mixed);
    let e = Precision::parse("bfloat16").unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("bfloat16") && m.contains("mixed"))
    );
    for p in [Precision::Float32, Precision::Float16, Precision::Mixed] {
        assert_eq!(Precision::parse(p.name()).unwrap(), p);
    }
}

/// An IPU of 1,000 bytes, computing floats in `float_bytes`.
fn small_ipu(float_bytes: u64) -> Limits {
    Limits {
        tensor_bytes: 1000,
        float_bytes,
        ..Limits::default()
    }
}

#[test]
fn inputs_larger_than_an_ipu_are_out_of_memory_before_anything_runs() {
    let mk = || two_inputs(vec![sym("N")], vec![sym("N")]);
    // 250 float32 = 1,000 bytes fit; 251 do not, but fit in half precision.
    prepare(
        &mut mk(),
        &[
            spec("a", ElemType::F32, &[250]),
            spec("b", ElemType::F32, &[250]),
        ],
        &small_ipu(4),
    )
    .unwrap();
    let e = prepare(
        &mut mk(),
        &[
            spec("a", ElemType::F32, &[251]),
            spec("b", ElemType::F32, &[251]),
        ],
        &small_ipu(4),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, Error::OutOfMemory { tiles, .. } if tiles.is_empty()),
        "{e:?}"
    );
    assert!(
        msg.contains("input 'a'") && msg.contains("1,004 bytes") && msg.contains("1,000 bytes"),
        "{msg}"
    );
    prepare(
        &mut mk(),
        &[
            spec("a", ElemType::F32, &[251]),
            spec("b", ElemType::F32, &[251]),
        ],
        &small_ipu(2),
    )
    .unwrap();
    // A shape whose element count overflows is malformed, whatever the device.
    let huge = [1usize << 40, 1 << 40];
    let mut m = ModelBuilder::new(13);
    m.input_fixed("x", ElemType::F32, &huge);
    m.node("Relu", "r", &["x"], &["y"]);
    m.output("y");
    let e = prepare(
        &mut m.build(),
        &[spec("x", ElemType::F32, &huge)],
        &Limits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::ModelFormat(_))
            && e.to_string()
                .contains("more elements than a host array can address"),
        "{e}"
    );
}

#[test]
fn node_outputs_larger_than_an_ipu_are_named_with_their_node() {
    // Expand a [2] input to [1000, 2]: 8,000 bytes of float32.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.init("shape", HostTensor::from_i64s(&[2], vec![1000, 2]));
    b.node("Expand", "big", &["x", "shape"], &["y"]);
    b.output("y");
    let m = b.build();
    let e = prepare(
        &mut m.clone(),
        &[spec("x", ElemType::F32, &[2])],
        &small_ipu(4),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{msg}");
    assert!(
        msg.contains("tensor 'y' (output 0 of node 'big', Expand)") && msg.contains("8,000 bytes"),
        "{msg}"
    );
    prepare(
        &mut m.clone(),
        &[spec("x", ElemType::F32, &[2])],
        &Limits::default(),
    )
    .unwrap();
}

#[test]
fn folding_stops_at_the_host_budget() {
    // A constant [4] expanded to [64, 4]: folded within budget, left to the
    // device beyond it.
    let build = || {
        let mut b = ModelBuilder::new(13);
        b.input_fixed("x", ElemType::F32, &[64, 4]);
        b.init("c", HostTensor::from_f32s(&[4], vec![1.0, 2.0, 3.0, 4.0]));
        b.init("shape", HostTensor::from_i64s(&[2], vec![64, 4]));
        b.node("Expand", "e", &["c", "shape"], &["ce"]);
        b.node("Add", "add", &["x", "ce"], &["y"]);
        b.output("y");
        b.build()
    };
    let mut m = build();
    assert_eq!(infer_and_fold(&mut m, &Limits::default()).unwrap(), 1);
    let tight = Limits {
        host_eval_elements: 255,
        ..Limits::default()
    };
    let mut m = build();
    bind_inputs(&mut m, &[spec("x", ElemType::F32, &[64, 4])], &tight).unwrap();
    assert_eq!(infer_and_fold(&mut m, &tight).unwrap(), 0);
    assert_eq!(
        m.graph.shape_of(m.graph.find("ce").unwrap()),
        Some(vec![64, 4])
    );
}

#[test]
fn empty_tensors_with_dimensions_no_host_array_can_have_are_refused() {
    // [0, 2^63 - 1] holds no element, but numpy and ndarray cannot make it.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[0, 4]);
    b.init("shape", HostTensor::from_i64s(&[2], vec![0, i64::MAX]));
    b.node_a(
        "Reshape",
        "r",
        &["x", "shape"],
        &["y"],
        vec![("allowzero", Attr::Int(1))],
    );
    b.output("y");
    let e = prepare(
        &mut b.build(),
        &[spec("x", ElemType::F32, &[0, 4])],
        &Limits::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ModelFormat(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("tensor 'y' (output 0 of node 'r', Reshape)"),
        "{e}"
    );
    // Empty tensors of ordinary shapes are fine.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[0, 4]);
    b.node("Relu", "r", &["x"], &["y"]);
    b.output("y");
    prepare(
        &mut b.build(),
        &[spec("x", ElemType::F32, &[0, 4])],
        &Limits::default(),
    )
    .unwrap();
}
