//! Models from plain data: naming, operator sets, checks, and the round trip
//! back to plain data.

use neurenix_core::error::Error;
use neurenix_core::ir::{Attr, Dim, Model};
use neurenix_core::model_parts::{
    AttrParts, DimParts, ModelParts, NodeParts, TensorParts, ValueParts, SUPPORTED_OPSETS,
};

fn value(name: &str, elem_type: i32, dims: Option<Vec<DimParts>>) -> ValueParts {
    ValueParts {
        name: name.into(),
        elem_type,
        dims,
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeParts {
    NodeParts {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        attrs: vec![],
    }
}

fn f32_tensor(name: &str, dims: &[u64], values: &[f32]) -> TensorParts {
    TensorParts {
        name: name.into(),
        elem_type: 1,
        dims: dims.to_vec(),
        data: values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    }
}

/// x [n, 2] -> Relu -> Add(w) -> y, with a second unnamed Relu.
fn parts() -> ModelParts {
    ModelParts {
        name: "m".into(),
        opsets: vec![("com.example".into(), 3), ("".into(), 17)],
        inputs: vec![
            value(
                "x",
                1,
                Some(vec![DimParts::Named("n".into()), DimParts::Fixed(2)]),
            ),
            // An initializer listed as an input too: it stays a constant.
            value("w", 1, Some(vec![DimParts::Fixed(2)])),
        ],
        outputs: vec![value(
            "y",
            1,
            Some(vec![DimParts::Unknown, DimParts::Fixed(2)]),
        )],
        initializers: vec![f32_tensor("w", &[2], &[1.5, -2.0])],
        nodes: vec![
            node("", "Relu", &["x"], &["r"]),
            node("Relu_1", "Relu", &["r"], &["r2"]),
            node("", "Relu", &["r2"], &["r3"]),
            NodeParts {
                attrs: vec![
                    ("alpha".into(), AttrParts::Float(0.5)),
                    ("body".into(), AttrParts::Graph),
                ],
                ..node("add", "Add", &["r3", "w"], &["y", ""])
            },
        ],
    }
}

#[test]
fn unnamed_nodes_are_named_once_and_uniquely() {
    let m = Model::from_parts(&parts()).unwrap();
    let names: Vec<&str> = m.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    // Node 2 would be "Relu_2"; node 0 "Relu_0"; "Relu_1" is taken by a named node.
    assert_eq!(names, ["Relu_0", "Relu_1", "Relu_2", "add"]);
    let p = parts();
    let mut clash = p.clone();
    clash.nodes[1].name = "Relu_2".into();
    let m = Model::from_parts(&clash).unwrap();
    let names: Vec<&str> = m.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["Relu_0", "Relu_2", "Relu_2_1", "add"]);
}

#[test]
fn declarations_constants_and_attributes_are_carried() {
    let m = Model::from_parts(&parts()).unwrap();
    assert_eq!(m.opset, 17);
    let g = &m.graph;
    assert_eq!(g.inputs.len(), 1, "w is an initializer, not an input");
    let x = g.value(g.inputs[0]);
    assert_eq!(
        x.shape,
        Some(vec![Dim::Symbolic("n".into()), Dim::Fixed(2)])
    );
    let w = g.find("w").unwrap();
    assert_eq!(g.constant(w).unwrap().to_f64_vec(), vec![1.5, -2.0]);
    let add = &g.nodes[3];
    assert_eq!(add.attr("alpha"), Some(&Attr::Float(0.5)));
    assert!(add.attr("body").is_none(), "subgraphs are not carried");
    assert_eq!(
        add.outputs.len(),
        2,
        "an omitted output gets a private value"
    );
    assert_eq!(g.value(add.outputs[1]).name, "add/unused");
}

#[test]
fn operator_sets_outside_the_supported_range_are_refused_with_the_range() {
    for v in [0, *SUPPORTED_OPSETS.end() + 1, 99] {
        let mut p = parts();
        p.opsets[1].1 = v;
        let e = Model::from_parts(&p).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Unsupported { opset, .. } if opset == v),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("operator set {v}")) && msg.contains("1 to 28"),
            "{msg}"
        );
    }
    let mut p = parts();
    p.opsets.retain(|(d, _)| !d.is_empty());
    let e = Model::from_parts(&p).unwrap_err();
    assert!(matches!(e, Error::ModelFormat(_)) && e.to_string().contains("default operator set"));
}

#[test]
fn malformed_parts_are_model_format_errors() {
    let cases: Vec<(Box<dyn Fn(&mut ModelParts)>, &str)> = vec![
        (
            Box::new(|p| p.inputs[0].elem_type = 99),
            "element type code 99",
        ),
        (
            Box::new(|p| {
                std::sync::Arc::make_mut(&mut p.initializers[0].data)
                    .pop()
                    .map(|_| ())
                    .unwrap()
            }),
            "initializer 'w'",
        ),
        (
            Box::new(|p| p.initializers[0].dims = vec![1 << 40, 1 << 40]),
            "initializer 'w'",
        ),
        (
            Box::new(|p| p.outputs[0].name = "nowhere".into()),
            "'nowhere' is not produced",
        ),
        (
            Box::new(|p| p.nodes[1].outputs[0] = "r".into()),
            "'r' is produced twice",
        ),
        (
            Box::new(|p| p.nodes[0].outputs[0] = "x".into()),
            "writes 'x', which is a graph input",
        ),
        (
            Box::new(|p| p.inputs.push(p.inputs[0].clone())),
            "'x' is declared twice",
        ),
        (
            Box::new(|p| {
                p.nodes[0]
                    .attrs
                    .push(("s".into(), AttrParts::Other("sparse_tensor".into())))
            }),
            "kind 'sparse_tensor'",
        ),
    ];
    for (mutate, words) in cases {
        let mut p = parts();
        mutate(&mut p);
        let e = Model::from_parts(&p).unwrap_err();
        assert!(matches!(e, Error::ModelFormat(_)), "{e:?}");
        assert!(e.to_string().contains(words), "{e} should say {words}");
    }
}

#[test]
fn element_types_neurenix_does_not_hold_are_unsupported_and_named_with_the_node() {
    // (mutation, op type and node the error names, words of the message)
    type Mutation = Box<dyn Fn(&mut ModelParts)>;
    let cases: Vec<(Mutation, &str, &str, &[&str])> = vec![
        (
            Box::new(|p| p.inputs[0].elem_type = 22),
            "Relu",
            "Relu_0",
            &[
                "input 'x' (read by node 'Relu_0', Relu) has element type INT4",
                "code 22",
            ],
        ),
        (
            Box::new(|p| {
                p.initializers[0].elem_type = 21;
                std::sync::Arc::make_mut(&mut p.initializers[0].data).clear();
            }),
            "Add",
            "add",
            &["initializer 'w' (read by node 'add', Add) has element type UINT4"],
        ),
        (
            Box::new(|p| p.outputs[0].elem_type = 23),
            "Add",
            "add",
            &["output 'y' (made by node 'add', Add) has element type FLOAT4E2M1"],
        ),
        (
            Box::new(|p| {
                p.nodes[3].attrs.push((
                    "value".into(),
                    AttrParts::Tensor(TensorParts {
                        name: String::new(),
                        elem_type: 24,
                        dims: vec![],
                        data: vec![].into(),
                    }),
                ))
            }),
            "Add",
            "add",
            &["attribute 'value' of node 'add' (Add) has element type FLOAT8E8M0"],
        ),
    ];
    for (mutate, op, node, words) in cases {
        let mut p = parts();
        mutate(&mut p);
        let e = Model::from_parts(&p).unwrap_err();
        let msg = e.to_string();
        match &e {
            Error::Unsupported {
                op_type, node: n, ..
            } => assert!(op_type == op && n == node, "{e:?}"),
            other => panic!("{other:?}"),
        }
        for w in words {
            assert!(msg.contains(w), "{msg} should say {w}");
        }
        assert!(
            msg.contains("float8_e4m3fn") && msg.contains("bfloat16"),
            "{msg}"
        );
    }
}

#[test]
fn bfloat16_and_float8_tensors_are_decoded_exactly() {
    let mut p = parts();
    // bfloat16 1.5 and -2 (0x3fc0, 0xc000); float8 e4m3fn 448 and -2^-9.
    p.initializers[0] = TensorParts {
        name: "w".into(),
        elem_type: 16,
        dims: vec![2],
        data: vec![0xc0, 0x3f, 0x00, 0xc0].into(),
    };
    p.inputs[1].elem_type = 16;
    let m = Model::from_parts(&p).unwrap();
    let w = m.graph.find("w").and_then(|v| m.graph.constant(v)).unwrap();
    assert_eq!(w.to_f64_vec(), vec![1.5, -2.0]);
    p.initializers[0] = TensorParts {
        name: "w".into(),
        elem_type: 17,
        dims: vec![2],
        data: vec![0x7e, 0x81].into(),
    };
    p.inputs[1].elem_type = 17;
    let m = Model::from_parts(&p).unwrap();
    let w = m.graph.find("w").and_then(|v| m.graph.constant(v)).unwrap();
    assert_eq!(w.to_f64_vec(), vec![448.0, -(2f64.powi(-9))]);
    assert_eq!(*m.to_parts().initializers[0].data, vec![0x7e, 0x81]);
}

#[test]
fn to_parts_inverts_from_parts() {
    let m = Model::from_parts(&parts()).unwrap();
    let back = m.to_parts();
    assert_eq!(back.initializers, vec![f32_tensor("w", &[2], &[1.5, -2.0])]);
    assert_eq!(back.inputs, vec![parts().inputs[0].clone()]);
    assert_eq!(back.outputs, parts().outputs);
    assert_eq!(back.nodes[0].name, "Relu_0");
    assert_eq!(back.nodes[3].outputs, ["y", "add/unused"]);
    let again = Model::from_parts(&back).unwrap();
    assert_eq!(again.to_parts(), back);
}
