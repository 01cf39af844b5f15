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
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
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
            msg.contains(&format!("operator set {v}")) && msg.contains("1 to 21"),
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
            Box::new(|p| p.inputs[0].elem_type = 8),
            "element type code 8",
        ),
        (
            Box::new(|p| p.initializers[0].data.pop().map(|_| ()).unwrap()),
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
