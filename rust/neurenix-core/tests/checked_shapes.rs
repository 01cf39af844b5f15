//! Absurd shapes: dimensions, pads, repeats, counts and attributes that
//! overflow, or are far larger than any host or IPU, are the model's error,
//! named after the node, and are refused before anything that large is
//! built. Run in debug builds, where any unchecked overflow left on these
//! paths panics. (Most models here come from the fuzz catalogue,
//! benchmarks/fuzz_findings.py.) Shapes that are merely too large for an
//! IPU are the compiler's to refuse, before operators see them; what the
//! operators do with them is checked here one node at a time
//! ([`NodeCase`]). Also: data movement lowered as runs of positions gives
//! what folding gives.

use crate::common::*;
use neurenix_core::compile::{optimize, CompileOptions};
use neurenix_core::dtype::ElemType;
use neurenix_core::error::{Error, Result};
use neurenix_core::ir::{Attr, Model};
use neurenix_core::lower::precision::Precision;
use neurenix_core::passes::TensorSpec;
use neurenix_core::tensor::HostTensor;

const P62: usize = 1 << 62;

fn opts(precision: Precision) -> CompileOptions {
    copts(precision, 1)
}

/// The model after inference and folding, for `inputs`.
fn prepared(m: &Model, inputs: &[TensorSpec]) -> Result<Model> {
    optimize(m, inputs).map(|(m, _)| m)
}

/// Requires a shape error of node `node` whose message holds every needle.
#[track_caller]
fn assert_shape_err<T: std::fmt::Debug>(r: Result<T>, node: &str, needles: &[&str]) {
    match r {
        Err(Error::ShapeMismatch { node: n, message }) => {
            assert_eq!(n, node, "the error names the node: {message}");
            for needle in needles {
                assert!(message.contains(needle), "'{needle}' is not in: {message}");
            }
        }
        other => panic!("expected a shape error of node '{node}', got {other:?}"),
    }
}

/// The shape inferred for value `name`.
fn shape_of(m: &Model, name: &str) -> Vec<usize> {
    m.graph.shape_of(m.graph.find(name).unwrap()).unwrap()
}

/// True when the node called `name` was folded away.
fn folded(m: &Model, name: &str) -> bool {
    !m.graph.nodes.iter().any(|n| n.name == name)
}

fn f32_input(b: &mut ModelBuilder, name: &str, shape: &[usize]) -> TensorSpec {
    b.input_fixed(name, ElemType::F32, shape);
    spec(name, ElemType::F32, shape)
}

// ---------------------------------------------------------------------------
// Range.

fn range(start: HostTensor, limit: HostTensor, delta: HostTensor) -> Result<HostTensor> {
    try_fold(
        11,
        "Range",
        vec![],
        vec![Some(start), Some(limit), Some(delta)],
    )
}

fn si(v: i64) -> HostTensor {
    ti64(&[], &[v])
}

fn sf(v: f64) -> HostTensor {
    tf32(&[], &[v])
}

#[test]
fn range_of_a_trillion_elements_is_refused_before_it_is_built() {
    // range_1e12: an 8 TB reservation (an abort) in inference.
    assert_shape_err(
        range(si(0), si(1_000_000_000_000), si(1)),
        "n",
        &["Range", "1e12 elements", "at most"],
    );
    assert_shape_err(range(si(0), si((1 << 31) - 1), si(1)), "n", &["at most"]);
}

#[test]
fn range_counts_at_the_int64_extremes_are_exact_or_refused() {
    // range_capacity_overflow, range_from_int64_min: the count overflowed.
    for (s, l, d) in [
        (0, 1 << 62, 1),
        (i64::MIN, 8, 1),
        (i64::MIN, i64::MAX, 1),
        (i64::MAX, i64::MIN, -1),
        (i64::MIN, i64::MAX, 2),
    ] {
        assert_shape_err(range(si(s), si(l), si(d)), "n", &["counting from"]);
    }
    // Counted in integers, not doubles: no element lost at 2^63.
    let r = range(si(i64::MAX - 2), si(i64::MAX), si(1)).unwrap();
    assert_eq!(r.to_i64_vec(), vec![i64::MAX - 2, i64::MAX - 1]);
    let r = range(si(i64::MIN), si(i64::MIN + 5), si(2)).unwrap();
    assert_eq!(r.to_i64_vec(), vec![i64::MIN, i64::MIN + 2, i64::MIN + 4]);
    let r = range(si(i64::MAX), si(i64::MIN), si(i64::MIN)).unwrap();
    assert_eq!(r.to_i64_vec(), vec![i64::MAX, -1]);
    let r = range(si(i64::MIN), si(i64::MAX), si(i64::MAX)).unwrap();
    assert_eq!(r.to_i64_vec(), vec![i64::MIN, -1, i64::MAX - 1]);
    let r = range(si(5), si(5), si(-1)).unwrap();
    assert_eq!(r.numel(), 0);
}

#[test]
fn range_with_float_limits_beyond_any_count_is_refused() {
    // range_float_1e30: capacity overflow.
    assert_shape_err(range(sf(0.5), sf(1e30), sf(0.5)), "n", &["at most"]);
    assert_shape_err(range(sf(0.0), sf(1.0), sf(1e-30)), "n", &["at most"]);
    // float64 limits whose difference is infinite.
    let d = |v: f64| tf64(&[], &[v]);
    assert_shape_err(range(d(-1e308), d(1e308), d(1.0)), "n", &["elements"]);
    assert_eq!(
        range(sf(1.0), sf(2.0), sf(0.25)).unwrap().to_f64_vec(),
        vec![1.0, 1.25, 1.5, 1.75]
    );
}

// ---------------------------------------------------------------------------
// Pad.

fn pad_model(x: &[usize], pads: &[i64], mode: &str) -> (Model, TensorSpec) {
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", x);
    b.init("pads", ti64(&[pads.len()], pads));
    b.node_a(
        "Pad",
        "pad",
        &["x", "pads"],
        &["y"],
        vec![("mode", Attr::String(mode.into()))],
    );
    b.output("y");
    (b.build(), s)
}

#[test]
fn pads_of_2_31_are_inferred_without_building_an_index() {
    let pad = |x: Operand, pads: &[i64], mode: &str, opset: i64| {
        NodeCase::new(
            opset,
            "Pad",
            vec![x, Operand::Const(ti64(&[pads.len()], pads))],
            vec![("mode", Attr::String(mode.into()))],
            1,
        )
    };
    let var = |s: &[usize]| Operand::Var(ElemType::F32, s.to_vec());
    // pad_2_31: 34 GB of index vectors during inference (an abort).
    let c = pad(
        var(&[2, 3, 4]),
        &[0, 1, 2, (1 << 31) - 1, 1, 2],
        "constant",
        13,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![(1 << 31) + 1, 5, 8]);
    // pad_declared_dim_2_31: the same through a declared dimension.
    let c = pad(var(&[1 << 31, 3, 4]), &[0, 1, 2, 0, 1, 2], "reflect", 13);
    assert_eq!(c.infer().unwrap()[0].shape, vec![1 << 31, 5, 8]);
    // A constant padded that far is left to the device, not folded.
    let c = pad(
        Operand::Const(tf32(&[2], &[1.0, 2.0])),
        &[0, 1 << 40],
        "wrap",
        19,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![(1 << 40) + 2]);
    assert!(c.eval().is_none());
}

#[test]
fn pads_at_the_int64_extremes_are_errors() {
    // pad_int64_max: capacity overflow.
    let (m, s) = pad_model(&[2, 3, 4], &[0, i64::MAX, 2, 0, 1, 2], "constant");
    assert_shape_err(prepared(&m, &[s]), "pad", &["Pad", "the padded shape"]);
    let (m, s) = pad_model(&[2, 3, 4], &[0, i64::MAX, 0, 0, i64::MAX, 0], "constant");
    assert_shape_err(prepared(&m, &[s]), "pad", &["axis 1", "overflows"]);
    let (m, s) = pad_model(&[2, 3, 4], &[0, i64::MIN, 0, 0, 0, 0], "edge");
    assert_shape_err(prepared(&m, &[s]), "pad", &["crop more than axis 1"]);
}

// ---------------------------------------------------------------------------
// Tile and Expand.

fn tile_model(x: &[usize], repeats: &[i64]) -> (Model, TensorSpec) {
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", x);
    b.init("repeats", ti64(&[repeats.len()], repeats));
    b.node("Tile", "t", &["x", "repeats"], &["y"]);
    b.output("y");
    (b.build(), s)
}

#[test]
fn tile_repeats_that_overflow_are_errors() {
    // tile_int64_max: the repeated size wrapped.
    let (m, s) = tile_model(&[2, 3], &[2, i64::MAX]);
    assert_shape_err(
        prepared(&m, &[s]),
        "t",
        &[
            "Tile",
            "dimension 1 x repeats (3 x 9223372036854775807) overflows",
        ],
    );
    // tile_2_32_squared: an element count that overflows.
    let (m, s) = tile_model(&[2, 3], &[1 << 32, 1 << 32]);
    assert_shape_err(
        prepared(&m, &[s]),
        "t",
        &["the output shape", "more elements"],
    );
    let (m, s) = tile_model(&[2, 3], &[1 << 62, 4]);
    assert_shape_err(prepared(&m, &[s]), "t", &["the output shape"]);
    // tile_1e12: no overflow, so the operator infers it (the size limit is
    // the compiler's).
    let c = NodeCase::new(
        13,
        "Tile",
        vec![
            Operand::Var(ElemType::F32, vec![2, 3]),
            Operand::Const(ti64(&[2], &[1_000_000_000_000, 3])),
        ],
        vec![],
        1,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![2_000_000_000_000, 9]);
}

#[test]
fn tiles_of_constants_are_folded_only_when_small() {
    let tile_of = |repeats: &[i64]| {
        let mut b = ModelBuilder::new(13);
        b.init("x", tf32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        b.init("repeats", ti64(&[2], repeats));
        b.node("Tile", "t", &["x", "repeats"], &["y"]);
        b.output("y");
        prepared(&b.build(), &[]).unwrap()
    };
    // An empty result with a 3 * 2^40 axis: built directly (it used to
    // enumerate the axis).
    let p = tile_of(&[0, 1 << 40]);
    assert!(folded(&p, "t"));
    let y = p.graph.constant(p.graph.find("y").unwrap()).unwrap();
    assert_eq!(y.shape(), &[0, 3 << 40]);
    // 3.6 million elements: left to the device.
    let p = tile_of(&[200_000, 3]);
    assert!(!folded(&p, "t"));
    let p = tile_of(&[2, 2]);
    let y = p.graph.constant(p.graph.find("y").unwrap()).unwrap();
    assert_eq!(y.shape(), &[4, 6]);
    assert_eq!(&y.to_i64_vec()[..6], &[1, 2, 3, 1, 2, 3]);
}

#[test]
fn expand_to_shapes_that_overflow_is_an_error() {
    // expand_2_40_squared: ndarray's "Shape too large" panic while lowering.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[1, 1]);
    b.init("shape", ti64(&[3], &[1 << 40, 1 << 40, 16]));
    b.node("Expand", "e", &["x", "shape"], &["y"]);
    b.output("y");
    assert_shape_err(
        prepared(&b.build(), &[s]),
        "e",
        &["Expand", "more elements"],
    );
    // expand_1e12: a constant expanded beyond the fold limit is not folded.
    let c = NodeCase::new(
        13,
        "Expand",
        vec![
            Operand::Const(tf32(&[1, 4], &[1.0, 2.0, 3.0, 4.0])),
            Operand::Const(ti64(&[3], &[1_000_000_000_000, 3, 4])),
        ],
        vec![],
        1,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![1_000_000_000_000, 3, 4]);
    assert!(c.eval().is_none());
}

// ---------------------------------------------------------------------------
// Slice, Split and Concat.

fn slice_case(x: Operand, starts: &[i64], ends: &[i64], steps: &[i64]) -> NodeCase {
    let n = starts.len();
    let v = |s: &[i64]| Operand::Const(ti64(&[n], s));
    let axes: Vec<i64> = (0..n as i64).collect();
    NodeCase::new(
        13,
        "Slice",
        vec![x, v(starts), v(ends), v(&axes), v(steps)],
        vec![],
        1,
    )
}

#[test]
fn a_slice_of_a_huge_axis_lowers_as_one_view() {
    // slice_declared_dim_2_62, slice_declared_dim_1e12: the slice's index
    // vectors were as long as the axis (capacity overflow, or an abort).
    let var = |s: &[usize]| Operand::Var(ElemType::F32, s.to_vec());
    for d in [P62, 1_000_000_000_000] {
        let c = slice_case(var(&[4, 6, d]), &[0, 1], &[4, 6], &[2, 2]);
        assert_eq!(c.infer().unwrap()[0].shape, vec![2, 3, d]);
    }
    let mut c = slice_case(var(&[4, 6, 1 << 55]), &[0, 1], &[4, 6], &[2, 2]);
    let be = c.lower(Precision::Float32).unwrap();
    let views = be.of_kind("rearrange");
    assert_eq!(views.len(), 1, "{:?}", be.built);
    assert_eq!(views[0].shape, vec![2, 3, 1 << 55]);
    assert_eq!(views[0].name, "n");
    // Offsets beyond int64 are an error, not a wrapped view.
    let mut c = slice_case(var(&[4, 6, P62]), &[0, 1], &[4, 6], &[2, 2]);
    let e = c.lower(Precision::Float32).unwrap_err();
    assert!(
        matches!(&e, Error::ModelFormat(m) if m.contains("int64")),
        "{e:?}"
    );
}

#[test]
fn model_inputs_whose_size_overflows_are_refused() {
    // declared_dim_2_62_accepted: 2 x 2^62 x 4 float32 elements wrapped to
    // 0 bytes. Whichever check sees it first, it is an error naming it.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[2, P62, 4]);
    b.node_a(
        "ReduceSum",
        "sum",
        &["x"],
        &["y"],
        vec![("keepdims", Attr::Int(0))],
    );
    b.output("y");
    let e = try_lower_shapes(&b.build(), &[s], &opts(Precision::Float32)).unwrap_err();
    assert!(e.to_string().contains("'x'"), "{e:?}");
}

#[test]
fn slices_of_empty_and_int64_sized_axes() {
    // Backwards over an empty axis: empty (it used to read position 0).
    let x = tf32(&[0], &[]);
    let y = try_fold(
        13,
        "Slice",
        vec![],
        vec![
            Some(x),
            Some(ti64(&[1], &[-1])),
            Some(ti64(&[1], &[i64::MIN])),
            None,
            Some(ti64(&[1], &[-1])),
        ],
    )
    .unwrap();
    assert_eq!(y.shape(), &[0]);
    // A constant with a 2^40 axis and no element slices without
    // enumerating the axis.
    let x = HostTensor::from_bytes(ElemType::F32, &[0, 1 << 40], &[]).unwrap();
    let y = try_fold(
        13,
        "Slice",
        vec![],
        vec![
            Some(x),
            Some(ti64(&[1], &[1])),
            Some(ti64(&[1], &[i64::MAX])),
            Some(ti64(&[1], &[1])),
            Some(ti64(&[1], &[2])),
        ],
    )
    .unwrap();
    assert_eq!(y.shape(), &[0, 1 << 39]);
    // A dimension beyond int64 indices.
    let d = (1usize << 63) + 1;
    let c = slice_case(Operand::Var(ElemType::F32, vec![d]), &[0], &[4], &[1]);
    assert_shape_err(c.infer(), "n", &["beyond the int64 range"]);
}

#[test]
fn split_sizes_that_wrap_around_are_errors() {
    // Four splits of 2^62 add up to 2^64, which wrapped to the axis' 0.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[0, 2]);
    b.init("split", ti64(&[4], &[1 << 62; 4]));
    b.node("Split", "split", &["x", "split"], &["a", "b", "c", "d"]);
    b.output("a");
    assert_shape_err(
        prepared(&b.build(), &[s]),
        "split",
        &["Split", "the sum of split", "overflows"],
    );
    // Concatenated lengths that overflow (of inputs the passes would refuse
    // as they bind: checked below them).
    let half = || Operand::Var(ElemType::F32, vec![1 << 63, 0]);
    let c = NodeCase::new(
        13,
        "Concat",
        vec![half(), half()],
        vec![("axis", Attr::Int(0))],
        1,
    );
    assert_shape_err(
        c.infer(),
        "n",
        &["Concat", "the concatenated axis 0", "overflows"],
    );
}

#[test]
fn empty_constants_joined_beyond_host_arrays_are_errors_not_bugs() {
    // Two [0, 2^62] constants hold nothing, but their concatenation along
    // the long axis is a shape no host array can have: not folded (that was
    // an internal error), and refused as the model's when it must be built.
    let empty = || Operand::Const(HostTensor::from_bytes(ElemType::F32, &[0, P62], &[]).unwrap());
    let mut c = NodeCase::new(
        13,
        "Concat",
        vec![empty(), empty()],
        vec![("axis", Attr::Int(1))],
        1,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![0, 2 * P62]);
    assert!(c.eval().is_none());
    let e = c.lower(Precision::Float32).unwrap_err();
    assert!(
        matches!(&e, Error::ModelFormat(m) if m.contains("more elements than the host")),
        "{e:?}"
    );
}

#[test]
fn a_split_of_an_empty_input_with_a_huge_axis_lowers() {
    // split_declared_dim_*: the split's index vectors were as long as the
    // axes; an empty tensor may have a 2^40 axis.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[0, 1 << 40]);
    b.init("split", ti64(&[2], &[1 << 39, 1 << 39]));
    b.node_a(
        "Split",
        "split",
        &["x", "split"],
        &["a", "b"],
        vec![("axis", Attr::Int(1))],
    );
    b.node_a(
        "Concat",
        "cat",
        &["b", "a"],
        &["y"],
        vec![("axis", Attr::Int(1))],
    );
    b.output("y");
    let (l, be) = try_lower_shapes(&b.build(), &[s], &opts(Precision::Float32)).unwrap();
    assert_eq!(l.outputs[0].shape, vec![0, 1 << 40]);
    assert_eq!(be.outputs, vec!["y".to_string()]);
    assert!(be.of_kind("rearrange").is_empty(), "{:?}", be.built);
}

// ---------------------------------------------------------------------------
// Folding that would amplify constants.

#[test]
fn gathers_and_broadcasts_of_constants_are_folded_only_when_small() {
    // A row gathered 2^16 times from a 2^16-wide table: 2^32 elements,
    // which folding used to build (32 GB).
    let c = NodeCase::new(
        13,
        "Gather",
        vec![
            Operand::Const(tf32(&[1, 1 << 16], &vec![0.5; 1 << 16])),
            Operand::Const(ti64(&[1 << 16], &vec![0; 1 << 16])),
        ],
        vec![],
        1,
    );
    assert_eq!(c.infer().unwrap()[0].shape, vec![1 << 16, 1 << 16]);
    assert!(c.eval().is_none());
    // An outer sum by broadcasting: 2^32 elements.
    let c = NodeCase::new(
        13,
        "Add",
        vec![
            Operand::Const(tf32(&[1 << 16, 1], &vec![1.0; 1 << 16])),
            Operand::Const(tf32(&[1, 1 << 16], &vec![2.0; 1 << 16])),
        ],
        vec![],
        1,
    );
    assert!(c.eval().is_none());
    // Small ones still fold.
    let mut b = ModelBuilder::new(13);
    b.init("a", tf32(&[2, 1], &[1.0, 2.0]));
    b.init("b", tf32(&[1, 3], &[10.0, 20.0, 30.0]));
    b.node("Add", "add", &["a", "b"], &["y"]);
    b.output("y");
    let p = prepared(&b.build(), &[]).unwrap();
    let y = p.graph.constant(p.graph.find("y").unwrap()).unwrap();
    assert_eq!(y.to_f64_vec(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
}

#[test]
fn constant_of_shape_beyond_the_host_is_an_error_or_a_device_fill() {
    let cos = |shape: &[i64]| {
        let mut b = ModelBuilder::new(13);
        b.init("shape", ti64(&[shape.len()], shape));
        b.node("ConstantOfShape", "c", &["shape"], &["y"]);
        b.output("y");
        prepared(&b.build(), &[])
    };
    assert_shape_err(
        cos(&[1 << 62, 4]),
        "c",
        &["ConstantOfShape", "more elements"],
    );
    assert_shape_err(cos(&[1 << 40, -2]), "c", &["negative"]);
    let c = NodeCase::new(
        13,
        "ConstantOfShape",
        vec![Operand::Const(ti64(&[1], &[1 << 24]))],
        vec![],
        1,
    );
    assert!(c.eval().is_none(), "a large fill is the device's");
}

// ---------------------------------------------------------------------------
// Shape queries and reshapes.

#[test]
fn shape_arithmetic_of_reshapes_and_queries_is_checked() {
    let one = |op: &str, x: &[usize], extra: Option<HostTensor>, attrs: Vec<(&str, Attr)>| {
        let mut b = ModelBuilder::new(13);
        let s = f32_input(&mut b, "x", x);
        let mut ins = vec!["x"];
        if let Some(t) = extra {
            b.init("arg", t);
            ins.push("arg");
        }
        b.node_a(op, "n", &ins, &["y"], attrs);
        b.output("y");
        prepared(&b.build(), &[s])
    };
    // Inputs this large never reach a node (the passes refuse them as they
    // bind), so the nodes' own checks are exercised below the passes.
    let query = |op: &str, x: Vec<usize>| {
        NodeCase::new(13, op, vec![Operand::Var(ElemType::F32, x)], vec![], 1).infer()
    };
    assert_shape_err(query("Size", vec![P62, 8]), "n", &["Size", "more elements"]);
    assert_shape_err(
        query("Shape", vec![(1 << 63) + 1]),
        "n",
        &["beyond the int64 range"],
    );
    let flatten = NodeCase::new(
        13,
        "Flatten",
        vec![Operand::Var(ElemType::F32, vec![1 << 40, 1 << 40, 0])],
        vec![("axis", Attr::Int(2))],
        1,
    );
    assert_shape_err(
        flatten.infer(),
        "n",
        &["Flatten", "the dimensions before the axis"],
    );
    assert_shape_err(
        one(
            "Reshape",
            &[0],
            Some(ti64(&[3], &[1 << 40, 1 << 40, -1])),
            vec![],
        ),
        "n",
        &["Reshape", "the target shape"],
    );
    let p = one(
        "Reshape",
        &[0, 3],
        Some(ti64(&[3], &[1 << 40, 0, 3])),
        vec![("allowzero", Attr::Int(1))],
    )
    .unwrap();
    assert_eq!(shape_of(&p, "y"), vec![1 << 40, 0, 3]);
}

#[test]
fn axes_of_scalars_are_errors() {
    // A scalar has no axis 0: these used to index its empty shape.
    let scalar_op = |op: &str, opset: i64, extra: Vec<HostTensor>, attrs: Vec<(&str, Attr)>| {
        let mut b = ModelBuilder::new(opset);
        let s = f32_input(&mut b, "x", &[]);
        let mut names = vec!["x".to_string()];
        for (i, t) in extra.into_iter().enumerate() {
            let n = format!("arg{i}");
            b.init(&n, t);
            names.push(n);
        }
        let ins: Vec<&str> = names.iter().map(String::as_str).collect();
        b.node_a(op, "n", &ins, &["y"], attrs);
        b.output("y");
        prepared(&b.build(), &[s])
    };
    let axis0 = || ti64(&[1], &[0]);
    assert_shape_err(
        scalar_op("Squeeze", 13, vec![axis0()], vec![]),
        "n",
        &["axis 0"],
    );
    assert_shape_err(
        scalar_op("ReduceSum", 13, vec![axis0()], vec![]),
        "n",
        &["axis 0"],
    );
    assert_shape_err(
        scalar_op(
            "Pad",
            18,
            vec![ti64(&[2], &[1, 1]), tf32(&[], &[0.0]), axis0()],
            vec![],
        ),
        "n",
        &["axis 0"],
    );
}

// ---------------------------------------------------------------------------
// Element-wise operators and Cast.

#[test]
fn omitted_operands_and_cast_targets_beyond_int32_are_errors() {
    // Add with its second operand omitted: a panic in the expression builder.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[2]);
    b.node("Add", "add", &["x", ""], &["y"]);
    b.output("y");
    assert_shape_err(prepared(&b.build(), &[s]), "add", &["input 1 is missing"]);
    // Clip's bounds may be omitted.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[2]);
    b.init("hi", tf32(&[], &[1.0]));
    b.node("Clip", "clip", &["x", "", "hi"], &["y"]);
    b.output("y");
    prepared(&b.build(), &[s]).unwrap();
    // to = 2^32 + 1 was read as 1 (float).
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[2]);
    b.node_a(
        "Cast",
        "cast",
        &["x"],
        &["y"],
        vec![("to", Attr::Int((1 << 32) + 1))],
    );
    b.output("y");
    let e = prepared(&b.build(), &[s]).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { node, .. } if node == "cast"),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------
// Windows, reductions and positions on the device.

#[test]
fn convolution_windows_beyond_32_bits_are_errors() {
    // conv_declared_dim_2_32_truncated: 2^32 became 0 on its way to the
    // device's planner.
    let conv = |x: &[usize]| {
        NodeCase::new(
            13,
            "Conv",
            vec![
                Operand::Var(ElemType::F32, x.to_vec()),
                Operand::Const(tf32(&[4, 3, 3, 3], &[1.0; 108])),
            ],
            vec![
                ("kernel_shape", Attr::Ints(vec![3, 3])),
                ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ],
            1,
        )
    };
    let e = conv(&[1, 3, 1 << 32, 8])
        .lower(Precision::Float32)
        .map(|_| ());
    assert_shape_err(e, "n", &["Conv", "4294967296", "32-bit"]);
    let be = conv(&[1, 3, 16, 8]).lower(Precision::Float32).unwrap();
    assert_eq!(be.of_kind("conv").len(), 1);
}

#[test]
fn window_arithmetic_that_overflows_is_an_error() {
    let pool = |x: &[usize], attrs: Vec<(&str, Attr)>| {
        let mut b = ModelBuilder::new(13);
        let s = f32_input(&mut b, "x", x);
        b.node_a("MaxPool", "pool", &["x"], &["y"], attrs);
        b.output("y");
        prepared(&b.build(), &[s])
    };
    assert_shape_err(
        pool(
            &[1, 1, 8, 8],
            vec![
                ("kernel_shape", Attr::Ints(vec![1 << 40, 2])),
                ("dilations", Attr::Ints(vec![1 << 40, 1])),
            ],
        ),
        "pool",
        &["dilated", "overflows"],
    );
    assert_shape_err(
        pool(
            &[1, 1, 8, 8],
            vec![
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![i64::MAX, 0, i64::MAX, 0])),
            ],
        ),
        "pool",
        &["padded", "overflows"],
    );
    // SAME padding of an empty spatial axis: an underflow before.
    let mut b = ModelBuilder::new(13);
    let s = f32_input(&mut b, "x", &[1, 1, 0, 4]);
    b.init("w", tf32(&[2, 1, 3, 3], &[1.0; 18]));
    b.node_a(
        "Conv",
        "conv",
        &["x", "w"],
        &["y"],
        vec![("auto_pad", Attr::String("SAME_UPPER".into()))],
    );
    b.output("y");
    let p = prepared(&b.build(), &[s]).unwrap();
    assert_eq!(shape_of(&p, "y"), vec![1, 2, 0, 4]);
}

#[test]
fn arg_max_over_more_positions_than_int32_is_refused_before_they_are_built() {
    // argmax_declared_dim_1e12: the positions constant (8 TB) was built on
    // the host while lowering.
    let arg_max = |x: &[usize]| {
        NodeCase::new(
            13,
            "ArgMax",
            vec![Operand::Var(ElemType::F32, x.to_vec())],
            vec![("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
            1,
        )
    };
    let e = arg_max(&[2, 1_000_000_000_000])
        .lower(Precision::Float32)
        .map(|_| ());
    assert_shape_err(e, "n", &["ArgMax", "1000000000000 positions", "int32"]);
    let be = arg_max(&[2, 1000]).lower(Precision::Float32).unwrap();
    let positions = be.of_kind("constant");
    assert_eq!(positions[0].shape, vec![1000]);
}

#[test]
fn huge_reductions_and_matmuls_lower_with_checked_counts() {
    // reduce_declared_dim_2_31, matmul_declared_dim_1e12: the operators'
    // own arithmetic is exact (what fits an IPU is for the compiler's size
    // limit and the device to say).
    let mut c = NodeCase::new(
        13,
        "ReduceMean",
        vec![Operand::Var(ElemType::F32, vec![(1 << 31) - 1, 5])],
        vec![("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(0))],
        1,
    );
    let be = c.lower(Precision::Float32).unwrap();
    assert_eq!(be.of_kind("reduce")[0].shape, vec![(1 << 31) - 1]);
    let mut c = NodeCase::new(
        13,
        "MatMul",
        vec![
            Operand::Var(ElemType::F32, vec![1_000_000_000_000, 8]),
            Operand::Const(tf32(&[8, 4], &[1.0; 32])),
        ],
        vec![],
        1,
    );
    let be = c.lower(Precision::Float32).unwrap();
    assert_eq!(be.of_kind("matmul")[0].shape, vec![1, 1_000_000_000_000, 4]);
    // A batch whose rows overflow.
    let c = NodeCase::new(
        13,
        "MatMul",
        vec![
            Operand::Var(ElemType::F32, vec![1 << 40, 1 << 40, 0, 8]),
            Operand::Const(tf32(&[8, 4], &[1.0; 32])),
        ],
        vec![],
        1,
    );
    assert_shape_err(c.infer(), "n", &["MatMul", "the batch shape"]);
}

// ---------------------------------------------------------------------------
// Lowering outside any node.

#[test]
fn an_output_that_is_an_input_is_cast_under_its_own_name() {
    // graph_output_is_graph_input: with mixed precision the float16 input is
    // cast back to float32 for the output, once no node is left to name the
    // cast after (index out of bounds).
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4]);
    b.init("w", tf32(&[4], &[1.0; 4]));
    b.node("Add", "add", &["x", "w"], &["unused"]);
    b.output("x");
    let xs = vec![1.0, 1.0 / 3.0, -2.5, 70000.0];
    let (l, be) = try_lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[4], xs.clone())],
        &opts(Precision::Mixed),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(l.placement.is_empty(), "the Add is dead");
    let want: Vec<f64> = xs.iter().map(|&v| r16(v)).collect();
    assert_exact(&be.out("x"), &want, "the input through float16");
    let maps = be.calls_of(Kind::Map);
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].name, "x", "the cast is named after the output");
}

#[test]
fn output_casts_are_named_after_their_value_or_their_node() {
    // A value computed by a node keeps that node's name when the output
    // cast fuses into it; one that is read twice is cast on its own, under
    // the output's name.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.node("Relu", "relu", &["x"], &["r"]);
    b.node("Neg", "neg", &["r"], &["n"]);
    b.output("r");
    b.output("n");
    let (_, be) = try_lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[2], vec![-1.0, 2.0])],
        &opts(Precision::Mixed),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = be
        .calls_of(Kind::Map)
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(names.contains(&"neg"), "{names:?}");
    assert!(names.contains(&"r"), "{names:?}");
    assert_exact(&be.out("n"), &[0.0, -2.0], "neg");
}

// ---------------------------------------------------------------------------
// Data movement lowered as runs of positions agrees with folding.

/// Lowers one data-movement node over input `x` (the constant arguments
/// given) and folds the same node over `x` as a constant; both must agree.
#[track_caller]
fn lowers_like_it_folds(
    opset: i64,
    op: &str,
    x: &[usize],
    args: &[HostTensor],
    attrs: Vec<(&str, Attr)>,
) {
    let data: Vec<f64> = (0..numel(x)).map(|i| i as f64).collect();
    let mut names = vec!["x".to_string()];
    let mut b = ModelBuilder::new(opset);
    b.input_fixed("x", ElemType::F32, x);
    for (i, t) in args.iter().enumerate() {
        let n = format!("arg{i}");
        b.init(&n, t.clone());
        names.push(n);
    }
    let ins: Vec<&str> = names.iter().map(String::as_str).collect();
    b.node_a(op, "n", &ins, &["y"], attrs.clone());
    b.output("y");
    let what = format!("{op} of {x:?} by {args:?} {attrs:?}");
    let (_, be) = try_lower(
        &b.build(),
        &[feed("x", ElemType::F32, x, data.clone())],
        &opts(Precision::Float32),
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut inputs = vec![Some(tf32(x, &data))];
    inputs.extend(args.iter().cloned().map(Some));
    let want = try_fold(opset, op, attrs, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(be.output("y").shape, want.shape(), "{what}");
    assert_exact(&be.out("y"), &want.to_f64_vec(), &what);
}

#[test]
fn pads_in_every_mode_lower_like_they_fold() {
    let mode = |m: &str| vec![("mode", Attr::String(m.into()))];
    for m in ["constant", "edge", "reflect", "wrap"] {
        for (x, pads) in [
            (vec![5], vec![0, 0]),
            (vec![5], vec![3, 9]),
            (vec![5], vec![12, 1]),
            (vec![5], vec![-2, 7]),
            (vec![5], vec![4, -4]),
            (vec![1], vec![3, 2]),
            (vec![2], vec![5, 6]),
            (vec![3, 4], vec![2, 5, 3, 1]),
            (vec![3, 4], vec![-1, 0, 7, -2]),
        ] {
            lowers_like_it_folds(19, "Pad", &x, &[ti64(&[pads.len()], &pads)], mode(m));
        }
    }
    // Reflection values against the definition, on a longer axis.
    let y = try_fold(
        13,
        "Pad",
        mode("reflect"),
        vec![
            Some(tf32(&[4], &[0.0, 1.0, 2.0, 3.0])),
            Some(ti64(&[2], &[7, 8])),
        ],
    )
    .unwrap();
    let want: Vec<f64> = (-7i64..12)
        .map(|j| {
            let r = j.rem_euclid(6);
            (if r < 4 { r } else { 6 - r }) as f64
        })
        .collect();
    assert_exact(&y.to_f64_vec(), &want, "reflect");
}

#[test]
fn slices_splits_gathers_and_tiles_lower_like_they_fold() {
    let v = |s: &[i64]| ti64(&[s.len()], s);
    for (starts, ends, steps) in [
        (vec![0, 1], vec![4, 6], vec![2, 2]),
        (vec![-1, -1], vec![i64::MIN, i64::MIN], vec![-1, -2]),
        (vec![3, 0], vec![0, 6], vec![-1, 5]),
        (vec![1, 2], vec![1, 100], vec![1, 1]),
    ] {
        lowers_like_it_folds(
            13,
            "Slice",
            &[4, 6],
            &[v(&starts), v(&ends), v(&[0, 1]), v(&steps)],
            vec![],
        );
    }
    lowers_like_it_folds(
        13,
        "Gather",
        &[4, 6],
        &[ti64(&[2, 3], &[5, 4, 3, 0, 0, -1])],
        vec![("axis", Attr::Int(1))],
    );
    lowers_like_it_folds(
        13,
        "Gather",
        &[4, 6],
        &[ti64(&[7], &[0, 1, 2, 3, 3, 1, 2])],
        vec![],
    );
    lowers_like_it_folds(13, "Tile", &[2, 3], &[v(&[3, 2])], vec![]);
    lowers_like_it_folds(13, "Tile", &[2, 3], &[v(&[1, 0])], vec![]);
    lowers_like_it_folds(13, "Expand", &[3, 1], &[v(&[2, 3, 4])], vec![]);
}

#[test]
fn a_slice_stepping_past_its_axis_takes_one_position() {
    // Steps of 2^62 or i64::MAX on an axis of 4: only the start is taken,
    // and its (meaningless) stride must not overflow the view.
    for step in [1i64 << 62, i64::MAX] {
        let mut b = ModelBuilder::new(13);
        b.input_fixed("x", ElemType::F32, &[4, 6]);
        b.init("starts", ti64(&[2], &[1, 0]));
        b.init("ends", ti64(&[2], &[4, 6]));
        b.init("axes", ti64(&[2], &[0, 1]));
        b.init("steps", ti64(&[2], &[step, 2]));
        b.node(
            "Slice",
            "s",
            &["x", "starts", "ends", "axes", "steps"],
            &["y"],
        );
        b.output("y");
        let x: Vec<f64> = (0..24).map(f64::from).collect();
        let (_, be) = lower(
            &b.build(),
            &[feed("x", ElemType::F32, &[4, 6], x)],
            &copts(Precision::Float32, 1),
        );
        assert_eq!(be.output("y").shape, vec![1, 3]);
        assert_eq!(
            be.out("y"),
            vec![6.0, 8.0, 10.0],
            "row 1, every other column"
        );
    }
}
