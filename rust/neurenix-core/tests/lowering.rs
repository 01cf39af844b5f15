//! Lowering through the `Backend` trait onto the recording, evaluating test
//! backend (tests/common): results against hand-written references in every
//! precision, fusion of element-wise chains, materialisation and constant
//! sharing, and the
//! host <-> device bindings.
//!
//! Tolerances: float32 results within 1e-6 (relative above 1, absolute
//! below). float16 element-wise results are exact against a reference that
//! rounds to half after every operation, as the precision policy specifies;
//! float16 matrix products and softmaxes, whose device accumulation order and
//! partials type are the backend's business, are allowed one half ulp per
//! rounding step (stated at each check).

use crate::common::*;
use neurenix_core::backend::{ReduceFinal, ReduceOp};
use neurenix_core::compile::{optimize, CompileOptions};
use neurenix_core::dtype::{DeviceType, ElemType};
use neurenix_core::error::Error;
use neurenix_core::expr::ExprOp;
use neurenix_core::ir::{Attr, Model};
use neurenix_core::lower::precision::Precision;
use neurenix_core::tensor::HostTensor;

const F32: Precision = Precision::Float32;
const F16: Precision = Precision::Float16;
const MIXED: Precision = Precision::Mixed;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Host tensor of a model type from f64 data (for folding comparisons).
fn host(dtype: ElemType, shape: &[usize], v: &[f64]) -> HostTensor {
    if dtype.is_float() {
        tfloat(dtype, shape, v)
    } else if dtype == ElemType::Bool {
        tbool(shape, &v.iter().map(|&x| x != 0.0).collect::<Vec<_>>())
    } else {
        tint(
            dtype,
            shape,
            &v.iter().map(|&x| x as i64).collect::<Vec<_>>(),
        )
    }
}

/// One node over graph inputs in0.. producing output "y".
fn single(
    opset: i64,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    ins: &[(ElemType, Vec<usize>, Vec<f64>)],
) -> (Model, Vec<Feed>) {
    let mut b = ModelBuilder::new(opset);
    let mut feeds = Vec::new();
    let mut names = Vec::new();
    for (i, (dt, shape, data)) in ins.iter().enumerate() {
        let n = format!("in{i}");
        b.input_fixed(&n, *dt, shape);
        feeds.push(feed(&n, *dt, shape, data.clone()));
        names.push(n);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    b.node_a(op, "n", &refs, &["y"], attrs);
    b.output("y");
    (b.build(), feeds)
}

fn map_exprs(be: &TestBackend) -> Vec<Vec<ExprOp>> {
    be.calls_of(Kind::Map)
        .iter()
        .map(|c| match &c.detail {
            Detail::Map(e) => e.iter().map(|i| expr_op(i.op as u16).unwrap()).collect(),
            _ => unreachable!(),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Float32 numerics.

#[test]
fn float32_elementwise_chain_is_one_fused_map() {
    // y = Sigmoid(Relu(x) * w + b), w [3] constant, b scalar constant.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3]);
    let w = [0.5, -1.25, 2.0];
    b.init("w", tf32(&[3], &w));
    b.init("b", tf32(&[], &[0.1]));
    b.node("Relu", "relu", &["x"], &["r"]);
    b.node("Mul", "mul", &["r", "w"], &["m"]);
    b.node("Add", "add", &["m", "b"], &["a"]);
    b.node("Sigmoid", "sig", &["a"], &["y"]);
    b.output("y");
    let m = b.build();
    let mut rng = XorShift::new(1);
    let x = rng.vec32(6, -2.0, 2.0);
    let (l, be) = lower(
        &m,
        &[feed("x", ElemType::F32, &[2, 3], x.clone())],
        &copts(F32, 1),
    );
    assert_eq!(
        be.count(Kind::Map),
        1,
        "one map for the whole chain: {:?}",
        map_exprs(&be)
    );
    let want: Vec<f64> = (0..6)
        .map(|i| sigmoid(x[i].max(0.0) * w[i % 3] + r32(0.1)))
        .collect();
    assert_close(&be.out("y"), &want, 1e-6, "fused chain");
    // The map reads x and w; the scalar is an immediate, not a constant.
    let map = &be.calls_of(Kind::Map)[0];
    assert_eq!(map.args.len(), 2);
    assert_eq!(be.count(Kind::Constant), 1, "only w is a device constant");
    assert_eq!(
        map.name, "sig",
        "the fused map is named after the last node"
    );
    let ops = &map_exprs(&be)[0];
    assert_eq!(*ops.last().unwrap(), ExprOp::Sigmoid);
    assert!(
        ops.contains(&ExprOp::Relu) && ops.contains(&ExprOp::Mul) && ops.contains(&ExprOp::Add)
    );
    assert_eq!(l.placement.len(), 4);
    assert!(l.placement.iter().all(|p| p.ipu == 0));
}

/// Unary float operators with their references (no zero inputs: see
/// expr_eval.rs, erf_of_zero_returns).
fn unary_refs() -> Vec<(&'static str, Vec<(&'static str, Attr)>, fn(f64) -> f64)> {
    vec![
        ("Sigmoid", vec![], sigmoid),
        ("Tanh", vec![], f64::tanh),
        ("Exp", vec![], f64::exp),
        ("Log", vec![], f64::ln),
        ("Sqrt", vec![], f64::sqrt),
        ("Reciprocal", vec![], |x| 1.0 / x),
        ("Erf", vec![], erf_ref),
        ("Floor", vec![], f64::floor),
        ("Ceil", vec![], f64::ceil),
        ("Sin", vec![], f64::sin),
        ("Cos", vec![], f64::cos),
        ("Softplus", vec![], |x| (1.0 + x.exp()).ln()),
        ("Softsign", vec![], |x| x / (1.0 + x.abs())),
        ("Neg", vec![], |x| -x),
        ("Abs", vec![], f64::abs),
        ("Relu", vec![], |x| x.max(0.0)),
        ("Sign", vec![], |x| if x > 0.0 { 1.0 } else { -1.0 }),
        ("LeakyRelu", vec![("alpha", Attr::Float(0.25))], |x| {
            if x >= 0.0 {
                x
            } else {
                0.25 * x
            }
        }),
        ("Elu", vec![], |x| if x >= 0.0 { x } else { x.exp() - 1.0 }),
        ("Selu", vec![], |x| {
            1.0507010221481323
                * if x > 0.0 {
                    x
                } else {
                    1.6732631921768188 * (x.exp() - 1.0)
                }
        }),
        (
            "HardSigmoid",
            vec![("alpha", Attr::Float(0.25)), ("beta", Attr::Float(0.5))],
            |x| (0.25 * x + 0.5).clamp(0.0, 1.0),
        ),
        ("HardSwish", vec![], |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        ("ThresholdedRelu", vec![("alpha", Attr::Float(0.5))], |x| {
            if x > 0.5 {
                x
            } else {
                0.0
            }
        }),
        ("Gelu", vec![], |x| {
            0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
        }),
        (
            "Gelu",
            vec![("approximate", Attr::String("tanh".into()))],
            |x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
            },
        ),
    ]
}

const XS: [f64; 10] = [-3.5, -1.75, -0.75, -0.5, -0.125, 0.25, 0.5, 1.25, 2.0, 3.0];

#[test]
fn float32_unary_operators_match_references() {
    for (op, attrs, r) in unary_refs() {
        let (m, feeds) = single(
            20,
            op,
            attrs.clone(),
            &[(ElemType::F32, vec![2, 5], XS.to_vec())],
        );
        let (l, be) = lower(&m, &feeds, &copts(F32, 1));
        let want: Vec<f64> = XS.iter().map(|&x| r(x)).collect();
        assert_close(&be.out("y"), &want, 1e-6, &format!("{op} {attrs:?}"));
        assert_eq!(be.count(Kind::Map), 1, "{op}");
        assert_eq!(l.outputs[0].device_type, DeviceType::F32);
    }
}

#[test]
fn float32_binary_operators_broadcast() {
    let mut rng = XorShift::new(2);
    let (sa, sb, so) = (vec![2usize, 1, 3], vec![4usize, 1], vec![2usize, 4, 3]);
    let a = rng.vec32(numel(&sa), -2.0, 2.0);
    let b: Vec<f64> = rng.vec32(numel(&sb), 0.5, 2.0);
    type Bin = fn(f64, f64) -> f64;
    let cases: Vec<(&str, Vec<(&str, Attr)>, Bin)> = vec![
        ("Add", vec![], |x, y| x + y),
        ("Sub", vec![], |x, y| x - y),
        ("Mul", vec![], |x, y| x * y),
        ("Div", vec![], |x, y| x / y),
        ("Pow", vec![], |x, y| {
            x.abs().powf(y) * if x < 0.0 { f64::NAN } else { 1.0 }
        }),
        ("Max", vec![], f64::max),
        ("Min", vec![], f64::min),
        ("Mod", vec![("fmod", Attr::Int(1))], |x, y| x % y),
        ("PRelu", vec![], |x, y| if x < 0.0 { x * y } else { x }),
    ];
    for (op, attrs, g) in cases {
        let (sb2, so2) = if op == "PRelu" {
            (vec![3usize], sa.clone())
        } else {
            (sb.clone(), so.clone())
        };
        let b2: Vec<f64> = b.iter().cycle().take(numel(&sb2)).copied().collect();
        let (m, feeds) = single(
            13,
            op,
            attrs,
            &[
                (ElemType::F32, sa.clone(), a.clone()),
                (ElemType::F32, sb2.clone(), b2.clone()),
            ],
        );
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        let ia = broadcast_index(&sa, &so2).unwrap();
        let ib = broadcast_index(&sb2, &so2).unwrap();
        let want: Vec<f64> = (0..numel(&so2)).map(|i| g(a[ia[i]], b2[ib[i]])).collect();
        assert_eq!(be.output("y").shape, so2, "{op}");
        assert_close(&be.out("y"), &want, 1e-6, op);
    }
    // Variadic Sum/Mean with three broadcast inputs.
    let c = rng.vec32(3, -1.0, 1.0);
    for (op, div) in [("Sum", 1.0), ("Mean", 3.0)] {
        let (m, feeds) = single(
            13,
            op,
            vec![],
            &[
                (ElemType::F32, sa.clone(), a.clone()),
                (ElemType::F32, sb.clone(), b.clone()),
                (ElemType::F32, vec![3], c.clone()),
            ],
        );
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        let ia = broadcast_index(&sa, &so).unwrap();
        let ib = broadcast_index(&sb, &so).unwrap();
        let ic = broadcast_index(&[3], &so).unwrap();
        let want: Vec<f64> = (0..numel(&so))
            .map(|i| (a[ia[i]] + b[ib[i]] + c[ic[i]]) / div)
            .collect();
        assert_close(&be.out("y"), &want, 1e-6, op);
        assert_eq!(be.count(Kind::Map), 1);
    }
}

/// Every element-wise operator, lowered, agrees with its own constant
/// folding (whose values fold.rs checks against references): the device
/// path and the host path implement the same operator.
#[test]
fn lowered_elementwise_operators_agree_with_folding() {
    let xs = XS.to_vec();
    let f = |s: &[usize], v: &[f64]| (ElemType::F32, s.to_vec(), v.to_vec());
    let i = |s: &[usize], v: &[i64]| {
        (
            ElemType::I64,
            s.to_vec(),
            v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        )
    };
    let bl = |s: &[usize], v: &[bool]| {
        (
            ElemType::Bool,
            s.to_vec(),
            v.iter().map(|&x| x as i64 as f64).collect::<Vec<_>>(),
        )
    };
    let fa = f(&[2, 3], &[-2.5, -1.0, 0.0, 0.5, 1.5, 4.0]);
    let fb = f(&[3], &[1.5, -1.0, 0.0]);
    let fnan = f(
        &[6],
        &[f64::NAN, f64::INFINITY, -f64::INFINITY, 1.0, -0.0, 2.0],
    );
    let ia = i(&[2, 3], &[-7, -1, 0, 3, 8, 100]);
    let ib = i(&[3], &[2, -3, 5]);
    let ba = bl(&[4], &[true, true, false, false]);
    let bb = bl(&[4], &[true, false, true, false]);
    let mut cases: Vec<(
        i64,
        &str,
        Vec<(&str, Attr)>,
        Vec<(ElemType, Vec<usize>, Vec<f64>)>,
    )> = Vec::new();
    for (op, attrs, _) in unary_refs() {
        cases.push((20, op, attrs, vec![f(&[10], &xs)]));
    }
    cases.push((
        13,
        "Round",
        vec![],
        vec![f(&[6], &[0.5, 1.5, 2.5, -0.5, -2.5, 2.7])],
    ));
    for op in ["Neg", "Abs", "Relu", "Sign"] {
        cases.push((14, op, vec![], vec![ia.clone()]));
    }
    for op in ["IsNaN", "IsInf"] {
        cases.push((13, op, vec![], vec![fnan.clone()]));
    }
    cases.push((13, "Not", vec![], vec![ba.clone()]));
    for op in ["And", "Or", "Xor", "Equal"] {
        cases.push((13, op, vec![], vec![ba.clone(), bb.clone()]));
    }
    for op in [
        "Add",
        "Sub",
        "Mul",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
    ] {
        cases.push((13, op, vec![], vec![fa.clone(), fb.clone()]));
    }
    cases.push((
        13,
        "Div",
        vec![],
        vec![fa.clone(), f(&[3], &[1.5, -1.0, 0.25])],
    ));
    cases.push((
        13,
        "Pow",
        vec![],
        vec![f(&[3], &[0.5, 2.0, 3.0]), f(&[3], &[2.0, 0.5, -1.0])],
    ));
    cases.push((13, "Pow", vec![], vec![fa.clone(), i(&[], &[2])]));
    cases.push((
        13,
        "Mod",
        vec![("fmod", Attr::Int(1))],
        vec![fa.clone(), f(&[3], &[1.5, -1.0, 0.75])],
    ));
    for op in [
        "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Equal", "Less", "Greater",
    ] {
        cases.push((13, op, vec![], vec![ia.clone(), ib.clone()]));
    }
    cases.push((13, "Mod", vec![], vec![ia.clone(), ib.clone()]));
    cases.push((
        13,
        "Mod",
        vec![("fmod", Attr::Int(1))],
        vec![ia.clone(), ib.clone()],
    ));
    cases.push((
        13,
        "Pow",
        vec![],
        vec![i(&[3], &[2, -3, 5]), i(&[3], &[10, 3, 2])],
    ));
    cases.push((
        13,
        "PRelu",
        vec![],
        vec![fa.clone(), f(&[3], &[0.5, 0.25, 2.0])],
    ));
    let cond = bl(&[2, 1], &[true, false]);
    cases.push((
        13,
        "Where",
        vec![],
        vec![cond.clone(), fb.clone(), fa.clone()],
    ));
    cases.push((
        13,
        "Where",
        vec![],
        vec![cond.clone(), ib.clone(), ia.clone()],
    ));
    cases.push((
        6,
        "Clip",
        vec![("min", Attr::Float(-1.0)), ("max", Attr::Float(1.0))],
        vec![fa.clone()],
    ));
    cases.push((
        13,
        "Clip",
        vec![],
        vec![fa.clone(), f(&[], &[-1.0]), f(&[], &[1.0])],
    ));
    cases.push((
        13,
        "Clip",
        vec![],
        vec![ia.clone(), i(&[], &[-2]), i(&[], &[5])],
    ));
    for to in [
        ElemType::I32,
        ElemType::I64,
        ElemType::Bool,
        ElemType::F16,
        ElemType::F64,
    ] {
        cases.push((
            13,
            "Cast",
            vec![("to", Attr::Int(to.onnx_code() as i64))],
            vec![fa.clone()],
        ));
    }
    for to in [ElemType::F32, ElemType::Bool, ElemType::I32] {
        cases.push((
            13,
            "Cast",
            vec![("to", Attr::Int(to.onnx_code() as i64))],
            vec![ia.clone()],
        ));
    }
    cases.push((13, "Cast", vec![("to", Attr::Int(1))], vec![ba.clone()]));
    cases.push((15, "CastLike", vec![], vec![fa.clone(), ib.clone()]));

    // All inputs above are exact in half precision, so float16 and mixed
    // lowering only differ from the float32 folding by the half rounding of
    // each step (compared within 2^-9; comparisons and integers exactly).
    for (precision, tol) in [(F32, 1e-6), (F16, 1.0 / 512.0), (MIXED, 1.0 / 512.0)] {
        for (opset, op, attrs, ins) in &cases {
            let what = format!(
                "{op} {attrs:?} on {:?} in {precision:?}",
                ins.iter().map(|x| x.0).collect::<Vec<_>>()
            );
            let folded = try_fold(
                *opset,
                op,
                attrs.clone(),
                ins.iter().map(|(d, s, v)| Some(host(*d, s, v))).collect(),
            )
            .unwrap_or_else(|e| panic!("{what}: folding failed: {e}"));
            let (m, feeds) = single(*opset, op, attrs.clone(), ins);
            let (l, be) = try_lower(&m, &feeds, &copts(precision, 1))
                .unwrap_or_else(|e| panic!("{what}: lowering failed: {e:?}"));
            assert_eq!(l.outputs[0].dtype, folded.dtype, "{what}: output type");
            assert_eq!(be.output("y").shape, folded.shape(), "{what}: output shape");
            let got = be.out("y");
            if folded.dtype.is_float() {
                assert_close(&got, &folded.to_f64_vec(), tol, &what);
            } else {
                assert_exact(&got, &folded.to_f64_vec(), &what);
            }
        }
    }
}

#[test]
fn lowered_narrow_integer_casts_agree_with_folding() {
    let mk = |from: ElemType, to: ElemType, vals: &[f64]| {
        let mut b = ModelBuilder::new(13);
        b.input_fixed("x", from, &[vals.len()]);
        b.node_a(
            "Cast",
            "narrow",
            &["x"],
            &["n"],
            vec![("to", Attr::Int(to.onnx_code() as i64))],
        );
        b.node_a(
            "Cast",
            "widen",
            &["n"],
            &["y"],
            vec![("to", Attr::Int(from.onnx_code() as i64))],
        );
        b.output("y");
        b.build()
    };
    // int -> int keeps the low bits (ONNX), as the folder does.
    let v = [300.0, 200.0, -1.0, 70000.0];
    let (_, be) = lower(
        &mk(ElemType::I64, ElemType::U8, &v),
        &[feed("x", ElemType::I64, &[4], v.to_vec())],
        &copts(F32, 1),
    );
    assert_exact(
        &be.out("y"),
        &[44.0, 200.0, 255.0, 112.0],
        "int64 -> uint8 -> int64",
    );
    let (_, be) = lower(
        &mk(ElemType::I64, ElemType::I8, &v),
        &[feed("x", ElemType::I64, &[4], v.to_vec())],
        &copts(F32, 1),
    );
    assert_exact(
        &be.out("y"),
        &[44.0, -56.0, -1.0, 112.0],
        "int64 -> int8 -> int64",
    );
    // float -> uint8 as the folder does it (truncate, saturate).
    let f = [300.0, -1.5, 2.5, 255.9];
    let (_, be) = lower(
        &mk(ElemType::F32, ElemType::U8, &f),
        &[feed("x", ElemType::F32, &[4], f.to_vec())],
        &copts(F32, 1),
    );
    assert_exact(
        &be.out("y"),
        &[255.0, 0.0, 2.0, 255.0],
        "float32 -> uint8 -> float32",
    );
}

#[test]
fn integer_inputs_compute_in_int32_and_come_back_as_int64() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("ids", ElemType::I64, &[2, 3]);
    b.init("off", ti64(&[3], &[10, -20, 30]));
    b.init("k", ti64(&[], &[3]));
    b.node("Add", "add", &["ids", "off"], &["s"]);
    b.node("Mul", "mul", &["s", "k"], &["t"]);
    b.node("Div", "div", &["t", "k"], &["q"]);
    b.node("Mod", "mod", &["t", "off"], &["y"]);
    b.node("Greater", "gt", &["q", "off"], &["mask"]);
    b.output("y");
    b.output("mask");
    let ids = [1.0, 2.0, -3.0, 400.0, -500.0, 6.0];
    let (l, be) = lower(
        &b.build(),
        &[feed("ids", ElemType::I64, &[2, 3], ids.to_vec())],
        &copts(F16, 1),
    );
    let off = [10.0, -20.0, 30.0];
    let want_m: Vec<f64> = ids
        .iter()
        .enumerate()
        .map(|(j, &x)| {
            let t = ((x + off[j % 3]) * 3.0) as i64;
            if t / 3 > off[j % 3] as i64 {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    // Python-style modulo by hand: r = t - o * floor(t / o).
    let want_y: Vec<f64> = ids
        .iter()
        .enumerate()
        .map(|(j, &x)| {
            let t = (x + off[j % 3]) * 3.0;
            let o = off[j % 3];
            t - o * (t / o).floor()
        })
        .collect();
    assert_exact(&be.out("y"), &want_y, "int mod");
    assert_exact(&be.out("mask"), &want_m, "int compare");
    assert_eq!(
        l.inputs[0].device_type,
        DeviceType::I32,
        "int64 inputs live as int32"
    );
    assert_eq!(
        (l.outputs[0].dtype, l.outputs[0].device_type),
        (ElemType::I64, DeviceType::I32)
    );
    assert_eq!(
        (l.outputs[1].dtype, l.outputs[1].device_type),
        (ElemType::Bool, DeviceType::Bool)
    );
    assert!(
        be.calls_of(Kind::Map)
            .iter()
            .all(|c| c.dtype != DeviceType::F16),
        "no float arithmetic for ints"
    );
}

#[test]
fn int64_scalar_constants_outside_int32_are_rejected() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::I64, &[2]);
    b.init("big", ti64(&[], &[1 << 40]));
    b.node("Add", "add", &["x", "big"], &["y"]);
    b.output("y");
    let r = try_lower(
        &b.build(),
        &[feed("x", ElemType::I64, &[2], vec![1.0, 2.0])],
        &copts(F32, 1),
    );
    assert!(
        r.is_err(),
        "2^40 + x lowered to {:?}",
        r.map(|(_, be)| be.out("y"))
    );
}

#[test]
fn non_scalar_int64_constants_outside_int32_are_rejected() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::I64, &[2]);
    b.init("big", ti64(&[2], &[1, 1 << 40]));
    b.node("Add", "add", &["x", "big"], &["y"]);
    b.output("y");
    let e = try_lower(
        &b.build(),
        &[feed("x", ElemType::I64, &[2], vec![1.0, 2.0])],
        &copts(F32, 1),
    )
    .err()
    .unwrap();
    assert!(
        e.to_string().contains("big") && e.to_string().contains(&(1i64 << 40).to_string()),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// Matrix products, data movement and softmax in float32.

#[test]
fn matmul_shapes_lower_with_numpy_semantics() {
    let mut rng = XorShift::new(3);
    for (sa, sb, want_shape, expands) in [
        (vec![4usize], vec![4usize, 3], vec![3usize], 0usize),
        (vec![2, 4], vec![4], vec![2], 0),
        (vec![4], vec![4], vec![], 0),
        (vec![5, 2, 4], vec![4, 3], vec![5, 2, 3], 0),
        (vec![2, 4], vec![5, 4, 3], vec![5, 2, 3], 1),
        (vec![2, 1, 3, 4], vec![5, 4, 2], vec![2, 5, 3, 2], 2),
    ] {
        let a = rng.vec32(numel(&sa), -1.0, 1.0);
        let b = rng.vec32(numel(&sb), -1.0, 1.0);
        let (m, feeds) = single(
            13,
            "MatMul",
            vec![],
            &[
                (ElemType::F32, sa.clone(), a.clone()),
                (ElemType::F32, sb.clone(), b.clone()),
            ],
        );
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        assert_eq!(be.output("y").shape, want_shape, "{sa:?} x {sb:?}");
        assert_eq!(
            be.count(Kind::MatMul),
            1,
            "{sa:?} x {sb:?}: one batched product"
        );
        assert_eq!(
            be.count(Kind::Rearrange),
            expands,
            "{sa:?} x {sb:?}: broadcast operands are expanded"
        );
        // Reference: fold the same product on the host in f64.
        let want = fold(13, "MatMul", vec![], vec![tf64(&sa, &a), tf64(&sb, &b)]);
        assert_close(
            &be.out("y"),
            &want.to_f64_vec(),
            1e-6,
            &format!("{sa:?} x {sb:?}"),
        );
        let mm = &be.calls_of(Kind::MatMul)[0];
        assert_eq!(mm.shape.len(), 3, "matmul results are [G, M, N]");
    }
    // A hand-computed case: [2,2] x [2,2].
    let (m, feeds) = single(
        13,
        "MatMul",
        vec![],
        &[
            (ElemType::F32, vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]),
            (ElemType::F32, vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]),
        ],
    );
    let (_, be) = lower(&m, &feeds, &copts(F32, 1));
    assert_exact(&be.out("y"), &[19.0, 22.0, 43.0, 50.0], "2x2");
}

#[test]
fn gemm_lowering_transposes_and_scales() {
    let mut rng = XorShift::new(4);
    let (m, k, n) = (3, 4, 2);
    let a = rng.vec32(m * k, -1.0, 1.0);
    let w = rng.vec32(k * n, -1.0, 1.0);
    let c = rng.vec32(n, -1.0, 1.0);
    // A is an input given transposed ([K, M]); W is a constant given
    // transposed ([N, K]); alpha, beta and C [N].
    let mut b = ModelBuilder::new(13);
    b.input_fixed("At", ElemType::F32, &[k, m]);
    b.init("Wt", tf32(&[n, k], &ref_transpose2(&w, k, n)));
    b.init("C", tf32(&[n], &c));
    b.node_a(
        "Gemm",
        "gemm",
        &["At", "Wt", "C"],
        &["y"],
        vec![
            ("transA", Attr::Int(1)),
            ("transB", Attr::Int(1)),
            ("alpha", Attr::Float(0.5)),
            ("beta", Attr::Float(-2.0)),
        ],
    );
    b.output("y");
    let (_, be) = lower(
        &b.build(),
        &[feed("At", ElemType::F32, &[k, m], ref_transpose2(&a, m, k))],
        &copts(F32, 1),
    );
    let ab = ref_matmul(&a, &w, m, k, n);
    let want: Vec<f64> = (0..m * n).map(|i| 0.5 * ab[i] - 2.0 * c[i % n]).collect();
    assert_close(&be.out("y"), &want, 1e-6, "gemm");
    assert_eq!(
        be.count(Kind::Rearrange),
        1,
        "the input A is transposed on the device"
    );
    let consts: Vec<&str> = be
        .calls_of(Kind::Constant)
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        consts.contains(&"Wt^T"),
        "the constant B is transposed on the host: {consts:?}"
    );
    assert_eq!(be.count(Kind::Map), 1, "alpha, beta and C in one map");
}

#[test]
fn data_movement_is_reshapes_and_rearranges() {
    // Reshape/Flatten/Squeeze/Unsqueeze are free; Transpose moves data
    // unless only size-1 axes move.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3, 4]);
    b.init("shape", ti64(&[3], &[4, 1, 6]));
    b.init("axes", ti64(&[1], &[1]));
    b.node("Reshape", "reshape", &["x", "shape"], &["r"]); // [4,1,6]
    b.node("Squeeze", "squeeze", &["r", "axes"], &["s"]); // [4,6]
    b.node("Unsqueeze", "unsqueeze", &["s", "axes"], &["u"]); // [4,1,6]
    b.node_a(
        "Transpose",
        "move_ones",
        &["u"],
        &["t1"],
        vec![("perm", Attr::Ints(vec![1, 0, 2]))],
    ); // [1,4,6]
    b.node_a(
        "Flatten",
        "flatten",
        &["t1"],
        &["f"],
        vec![("axis", Attr::Int(2))],
    ); // [4,6]
    b.node("Transpose", "transpose", &["f"], &["y"]); // [6,4]
    b.output("y");
    let x: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[2, 3, 4], x.clone())],
        &copts(F32, 1),
    );
    assert_eq!(be.count(Kind::Map), 0);
    assert_eq!(
        be.count(Kind::Rearrange),
        1,
        "only the real transpose moves data"
    );
    assert_eq!(be.output("y").shape, vec![6, 4]);
    assert_exact(&be.out("y"), &ref_transpose2(&x, 4, 6), "values");
    // A 3-D permutation by hand.
    let (m, feeds) = single(
        13,
        "Transpose",
        vec![("perm", Attr::Ints(vec![2, 0, 1]))],
        &[(ElemType::F32, vec![2, 3, 4], x.clone())],
    );
    let (_, be) = lower(&m, &feeds, &copts(F32, 1));
    assert_eq!(be.output("y").shape, vec![4, 2, 3]);
    let mut want = Vec::new();
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                want.push(x[i * 12 + j * 4 + k]);
            }
        }
    }
    assert_exact(&be.out("y"), &want, "perm [2, 0, 1]");
}

#[test]
fn softmax_and_log_softmax_in_float32() {
    let mut rng = XorShift::new(5);
    let x = rng.vec32(24, -4.0, 4.0);
    // opset 13, last axis.
    for log in [false, true] {
        let op = if log { "LogSoftmax" } else { "Softmax" };
        let (m, feeds) = single(13, op, vec![], &[(ElemType::F32, vec![2, 3, 4], x.clone())]);
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        assert_close(&be.out("y"), &ref_softmax_rows(&x, 6, 4, log), 1e-6, op);
        let red = be.calls_of(Kind::Reduce);
        assert_eq!(red.len(), 2, "a max and a sum");
        assert!(matches!(
            red[0].detail,
            Detail::Reduce {
                op: ReduceOp::Max,
                fin: ReduceFinal::None,
                ..
            }
        ));
        assert!(matches!(
            red[1].detail,
            Detail::Reduce {
                op: ReduceOp::Sum,
                fin: ReduceFinal::None,
                ..
            }
        ));
        assert!(red.iter().all(|c| c.dtype == DeviceType::F32));
    }
    // opset 13, a middle axis: softmax over dimension 1 of [2, 3, 4].
    let (m, feeds) = single(
        13,
        "Softmax",
        vec![("axis", Attr::Int(1))],
        &[(ElemType::F32, vec![2, 3, 4], x.clone())],
    );
    let (_, be) = lower(&m, &feeds, &copts(F32, 1));
    let mut want = vec![0.0; 24];
    for i in 0..2 {
        for k in 0..4 {
            let col: Vec<f64> = (0..3).map(|j| x[i * 12 + j * 4 + k]).collect();
            let s = ref_softmax_rows(&col, 1, 3, false);
            for j in 0..3 {
                want[i * 12 + j * 4 + k] = s[j];
            }
        }
    }
    assert_close(&be.out("y"), &want, 1e-6, "softmax axis 1");
    // opset 11: the input is coerced to 2-D at the axis (default 1): one
    // softmax over the 12 trailing elements of each row.
    let (m, feeds) = single(
        11,
        "Softmax",
        vec![],
        &[(ElemType::F32, vec![2, 3, 4], x.clone())],
    );
    let (_, be) = lower(&m, &feeds, &copts(F32, 1));
    assert_close(
        &be.out("y"),
        &ref_softmax_rows(&x, 2, 12, false),
        1e-6,
        "softmax-11 axis 1",
    );
    assert_eq!(be.output("y").shape, vec![2, 3, 4]);
    let (m, feeds) = single(
        11,
        "LogSoftmax",
        vec![("axis", Attr::Int(-1))],
        &[(ElemType::F32, vec![2, 3, 4], x.clone())],
    );
    let (_, be) = lower(&m, &feeds, &copts(F32, 1));
    assert_close(
        &be.out("y"),
        &ref_softmax_rows(&x, 6, 4, true),
        1e-6,
        "logsoftmax-11 axis -1",
    );
}

#[test]
fn mlp_with_softmax_end_to_end() {
    // x [4, 8] -> Gemm(8x16) -> Relu -> MatMul(16x5) + b -> Softmax.
    let mut rng = XorShift::new(6);
    let x = rng.vec32(32, -1.0, 1.0);
    let w1 = rng.vec32(128, -0.5, 0.5);
    let b1 = rng.vec32(16, -0.1, 0.1);
    let w2 = rng.vec32(80, -0.5, 0.5);
    let b2 = rng.vec32(5, -0.1, 0.1);
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 8]);
    b.init("w1", tf32(&[8, 16], &w1));
    b.init("b1", tf32(&[16], &b1));
    b.init("w2", tf32(&[16, 5], &w2));
    b.init("b2", tf32(&[5], &b2));
    b.node("Gemm", "fc1", &["x", "w1", "b1"], &["h"]);
    b.node("Relu", "relu", &["h"], &["hr"]);
    b.node("MatMul", "fc2", &["hr", "w2"], &["o"]);
    b.node("Add", "bias2", &["o", "b2"], &["logits"]);
    b.node("Softmax", "softmax", &["logits"], &["probs"]);
    b.output("probs");
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[4, 8], x.clone())],
        &copts(F32, 1),
    );
    let h: Vec<f64> = ref_matmul(&x, &w1, 4, 8, 16)
        .iter()
        .enumerate()
        .map(|(i, v)| (v + b1[i % 16]).max(0.0))
        .collect();
    let o: Vec<f64> = ref_matmul(&h, &w2, 4, 16, 5)
        .iter()
        .enumerate()
        .map(|(i, v)| v + b2[i % 5])
        .collect();
    assert_close(
        &be.out("probs"),
        &ref_softmax_rows(&o, 4, 5, false),
        1e-6,
        "mlp",
    );
    assert_eq!(l.passes.fused, 1, "MatMul + Add became a Gemm");
    assert_eq!(be.count(Kind::MatMul), 2);
}

// ---------------------------------------------------------------------------
// Float16 and mixed precision.

#[test]
fn float16_elementwise_rounds_after_every_operation() {
    // y = Relu(x * w + b) - x / 3, every step rounded to half.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 5]);
    let mut rng = XorShift::new(7);
    let w = rng.vec32(5, -3.0, 3.0);
    b.init("w", tf32(&[5], &w));
    b.init("bias", tf32(&[], &[0.1]));
    b.init("three", tf32(&[], &[3.0]));
    b.node("Mul", "mul", &["x", "w"], &["m"]);
    b.node("Add", "add", &["m", "bias"], &["a"]);
    b.node("Relu", "relu", &["a"], &["r"]);
    b.node("Div", "div", &["x", "three"], &["d"]);
    b.node("Sub", "sub", &["r", "d"], &["y"]);
    b.output("y");
    let x = rng.vec32(20, -10.0, 10.0);
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[4, 5], x.clone())],
        &copts(F16, 1),
    );
    let want: Vec<f64> = (0..20)
        .map(|i| {
            let (xh, wh) = (r16(x[i]), r16(w[i % 5]));
            let r = r16(r16(r16(xh * wh) + r16(0.1)).max(0.0));
            r16(r - r16(xh / 3.0))
        })
        .collect();
    assert_exact(&be.out("y"), &want, "float16 chain, rounded per operation");
    // The unrounded float32 result differs: the check is not vacuous.
    let exact: Vec<f64> = (0..20)
        .map(|i| (x[i] * w[i % 5] + 0.1).max(0.0) - x[i] / 3.0)
        .collect();
    assert!(want.iter().zip(&exact).any(|(a, b)| a != b));
    assert_eq!(l.inputs[0].device_type, DeviceType::F16);
    assert_eq!(
        (l.outputs[0].dtype, l.outputs[0].device_type),
        (ElemType::F32, DeviceType::F16)
    );
    assert_eq!(be.output("y").dtype, DeviceType::F16);
    assert!(
        be.calls_of(Kind::Constant)
            .iter()
            .all(|c| c.dtype == DeviceType::F16),
        "constants in half"
    );
    assert_eq!(
        be.count(Kind::Map),
        1,
        "x is read twice but the chain is still one map"
    );
}

#[test]
fn float16_matmul_and_softmax() {
    let mut rng = XorShift::new(8);
    let x = rng.vec32(4 * 8, -1.0, 1.0);
    let w = rng.vec32(8 * 6, -1.0, 1.0);
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 8]);
    b.init("w", tf32(&[8, 6], &w));
    b.node("MatMul", "mm", &["x", "w"], &["h"]);
    b.node("Softmax", "sm", &["h"], &["y"]);
    b.output("h");
    b.output("y");
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[4, 8], x.clone())],
        &copts(F16, 1),
    );
    let xh: Vec<f64> = x.iter().map(|&v| r16(v)).collect();
    let wh: Vec<f64> = w.iter().map(|&v| r16(v)).collect();
    let h: Vec<f64> = ref_matmul(&xh, &wh, 4, 8, 6).into_iter().map(r16).collect();
    // The product: correctly rounded to half up to one half ulp (partials
    // are float32, so their rounding can move a result across a tie).
    assert_rel(&be.out("h"), &h, 1.0 / 1024.0, "float16 matmul");
    // Softmax in half: max, exp(x - max), sum, division, each rounded;
    // within four half ulps of the exact softmax of the half product.
    assert_close(
        &be.out("y"),
        &ref_softmax_rows(&h, 4, 6, false),
        4.0 / 1024.0,
        "float16 softmax",
    );
    for v in be.out("y") {
        assert_eq!(r16(v), v, "float16 outputs hold half values");
    }
    let mm = &be.calls_of(Kind::MatMul)[0];
    match &mm.detail {
        Detail::MatMul(p) => {
            assert_eq!(
                (p.out_dtype, p.partials),
                (DeviceType::F16, DeviceType::F32)
            );
            assert_eq!(p.memory_proportion, 0.6);
            assert_eq!(p.name, "mm");
        }
        _ => unreachable!(),
    }
    assert!(
        be.calls_of(Kind::Reduce)
            .iter()
            .all(|c| c.dtype == DeviceType::F16),
        "float16: softmax in half"
    );
    assert!(l.outputs.iter().all(|o| o.device_type == DeviceType::F16));
}

#[test]
fn mixed_precision_softmax_runs_in_float32() {
    let mut rng = XorShift::new(9);
    let x = rng.vec32(4 * 8, -1.0, 1.0);
    let w = rng.vec32(8 * 6, -1.0, 1.0);
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[4, 8]);
    b.init("w", tf32(&[8, 6], &w));
    b.node("MatMul", "mm", &["x", "w"], &["h"]);
    b.node("Softmax", "sm", &["h"], &["y"]);
    b.node("LogSoftmax", "lsm", &["h"], &["z"]);
    b.output("y");
    b.output("z");
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[4, 8], x.clone())],
        &copts(MIXED, 1),
    );
    // Inputs and the matmul in half ...
    assert_eq!(l.inputs[0].device_type, DeviceType::F16);
    let mm = &be.calls_of(Kind::MatMul)[0];
    assert_eq!(mm.dtype, DeviceType::F16, "matmul computes in half");
    assert!(
        be.tensors[mm.args[0] as usize].dtype == DeviceType::F16
            && be.tensors[mm.args[1] as usize].dtype == DeviceType::F16
    );
    // ... the softmax reductions in float32, on float32 operands ...
    let red = be.calls_of(Kind::Reduce);
    assert_eq!(red.len(), 4, "max and sum for each of the two softmaxes");
    for r in &red {
        assert_eq!(r.dtype, DeviceType::F32, "{}: reduction result", r.name);
        assert_eq!(
            be.tensors[r.args[0] as usize].dtype,
            DeviceType::F32,
            "{}: reduction operand",
            r.name
        );
    }
    for c in be.calls_of(Kind::Map) {
        if c.name == "sm" || c.name == "lsm" {
            assert_eq!(c.dtype, DeviceType::F32, "softmax maps in float32");
            if let Detail::Map(e) = &c.detail {
                assert!(
                    e.iter().all(|i| !i.half || i.op == ExprOp::CastF16),
                    "no half rounding inside the softmax"
                );
            }
        }
    }
    // ... and float32 outputs.
    assert!(l.outputs.iter().all(|o| o.device_type == DeviceType::F32));
    let xh: Vec<f64> = x.iter().map(|&v| r16(v)).collect();
    let wh: Vec<f64> = w.iter().map(|&v| r16(v)).collect();
    let h: Vec<f64> = ref_matmul(&xh, &wh, 4, 8, 6).into_iter().map(r16).collect();
    // The half product is within one half ulp; the softmax of it is float32.
    assert_close(
        &be.out("y"),
        &ref_softmax_rows(&h, 4, 6, false),
        2.0 / 1024.0,
        "mixed softmax",
    );
    assert_close(
        &be.out("z"),
        &ref_softmax_rows(&h, 4, 6, true),
        2.0 / 1024.0,
        "mixed log-softmax",
    );
    // With the product taken from the device, the softmax is float32-exact.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("h", ElemType::F32, &[4, 6]);
    b.node("Softmax", "sm", &["h"], &["y"]);
    b.output("y");
    let (_, be) = lower(
        &b.build(),
        &[feed("h", ElemType::F32, &[4, 6], h.clone())],
        &copts(MIXED, 1),
    );
    assert_close(
        &be.out("y"),
        &ref_softmax_rows(&h, 4, 6, false),
        1e-6,
        "mixed softmax of half inputs",
    );
}

#[test]
fn mixed_precision_elementwise_is_half_and_outputs_float32() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[6]);
    b.init("w", tf32(&[], &[0.3]));
    b.node("Mul", "mul", &["x", "w"], &["m"]);
    b.node("Tanh", "tanh", &["m"], &["y"]);
    b.output("y");
    let x = [0.1, -0.7, 1.3, 2.9, -5.1, 0.01];
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[6], x.to_vec())],
        &copts(MIXED, 1),
    );
    let want: Vec<f64> = x
        .iter()
        .map(|&v| r16(r16(r16(v) * r16(0.3)).tanh()))
        .collect();
    assert_close(&be.out("y"), &want, 1e-7, "half arithmetic, float32 output");
    assert_eq!(l.outputs[0].device_type, DeviceType::F32);
    assert_eq!(be.output("y").dtype, DeviceType::F32);
}

#[test]
fn mixed_precision_output_chain_is_one_map() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[6]);
    b.node("Relu", "relu", &["x"], &["m"]);
    b.node("Tanh", "tanh", &["m"], &["y"]);
    b.output("y");
    let x = vec![-1.0, 0.5, 1.0, 2.0, -3.0, 0.25];
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[6], x)],
        &copts(MIXED, 1),
    );
    assert_eq!(be.count(Kind::Map), 1, "{:?}", map_exprs(&be));
}

#[test]
fn enable_half_partials_option_reaches_the_matmul() {
    let (m, feeds) = single(
        13,
        "MatMul",
        vec![],
        &[
            (ElemType::F32, vec![2, 3], vec![1.0; 6]),
            (ElemType::F32, vec![3, 2], vec![0.5; 6]),
        ],
    );
    for (precision, enable_half_partials, want) in [
        (F32, false, DeviceType::F32),
        (F32, true, DeviceType::F32),
        (F16, false, DeviceType::F32),
        (F16, true, DeviceType::F16),
        (MIXED, true, DeviceType::F16),
    ] {
        let o = CompileOptions {
            precision,
            memory_proportion: 0.25,
            enable_half_partials,
            ..CompileOptions::default()
        };
        let (_, be) = lower(&m, &feeds, &o);
        match &be.calls_of(Kind::MatMul)[0].detail {
            Detail::MatMul(p) => {
                assert_eq!(
                    p.partials, want,
                    "{precision:?} enable_half_partials={enable_half_partials}"
                );
                assert_eq!(p.memory_proportion, 0.25);
            }
            _ => unreachable!(),
        }
        assert_exact(&be.out("y"), &[1.5; 4], "value");
    }
}

// ---------------------------------------------------------------------------
// Materialisation and constants.

#[test]
fn a_value_used_twice_is_materialised_once() {
    // t = Exp(x); y = t + t.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[3]);
    b.node("Exp", "exp", &["x"], &["t"]);
    b.node("Add", "add", &["t", "t"], &["y"]);
    b.output("y");
    let x = [0.5, -1.0, 2.0];
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[3], x.to_vec())],
        &copts(F32, 1),
    );
    assert_eq!(be.count(Kind::Map), 2, "{:?}", map_exprs(&be));
    let maps = be.calls_of(Kind::Map);
    let t_id = maps[0].result.unwrap();
    // (The map lists the tensor once; its expression reads it twice.)
    assert_eq!(
        maps[1].args,
        vec![t_id],
        "both operands are the one materialised t"
    );
    match &maps[1].detail {
        Detail::Map(e) => {
            let reads: Vec<u32> = e
                .iter()
                .filter(|i| expr_op(i.op as u16) == Some(ExprOp::Input))
                .map(|i| i.arg)
                .collect();
            assert_eq!(reads, vec![0, 0], "t + t reads its one operand twice");
        }
        _ => unreachable!(),
    }
    assert_close(
        &be.out("y"),
        &x.iter().map(|v| 2.0 * v.exp()).collect::<Vec<_>>(),
        1e-6,
        "t + t",
    );

    // t read by two consumers, and t also a graph output.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[3]);
    b.node("Exp", "exp", &["x"], &["t"]);
    b.node("Sin", "sin", &["t"], &["s"]);
    b.node("Cos", "cos", &["t"], &["c"]);
    b.node("Neg", "neg", &["s"], &["ns"]);
    b.output("ns");
    b.output("c");
    b.output("t");
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[3], x.to_vec())],
        &copts(F32, 1),
    );
    assert_eq!(
        be.count(Kind::Map),
        3,
        "t once; sin+neg fused; cos: {:?}",
        map_exprs(&be)
    );
    let maps = be.calls_of(Kind::Map);
    let t_id = maps[0].result.unwrap();
    assert!(
        maps[1..].iter().all(|m| m.args == vec![t_id]),
        "both consumers read the materialised t"
    );
    let outs: Vec<u32> = be.outputs.iter().map(|o| o.1).collect();
    assert!(outs.contains(&t_id), "the output t is the same tensor");
    assert_close(
        &be.out("ns"),
        &x.iter().map(|v| -(v.exp().sin())).collect::<Vec<_>>(),
        1e-6,
        "ns",
    );
    assert_close(
        &be.out("c"),
        &x.iter().map(|v| v.exp().cos()).collect::<Vec<_>>(),
        1e-6,
        "c",
    );
    assert_close(
        &be.out("t"),
        &x.iter().map(|v| v.exp()).collect::<Vec<_>>(),
        1e-6,
        "t",
    );

    // A lazy value read by a matmul is materialised for it, once.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 2]);
    b.node("Relu", "relu", &["x"], &["r"]);
    b.node("MatMul", "mm", &["r", "r"], &["y"]);
    b.output("y");
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[2, 2], vec![1.0, -2.0, 3.0, 4.0])],
        &copts(F32, 1),
    );
    assert_eq!(be.count(Kind::Map), 1);
    assert_exact(&be.out("y"), &[1.0, 0.0, 15.0, 16.0], "relu(x) @ relu(x)");
}

#[test]
fn constants_are_created_once_per_ipu() {
    // W is read by two matmuls and c by two adds, all on one IPU.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 4]);
    b.init("W", tf32(&[4, 4], &[0.25; 16]));
    b.init("c", tf32(&[4], &[1.0, 2.0, 3.0, 4.0]));
    b.node("MatMul", "mm1", &["x", "W"], &["a"]);
    b.node("Add", "add1", &["a", "c"], &["a1"]);
    b.node("Relu", "relu", &["a1"], &["r"]);
    b.node("MatMul", "mm2", &["r", "W"], &["b"]);
    b.node("Sub", "sub", &["b", "c"], &["y"]);
    b.output("y");
    let m = b.build();
    let x = vec![1.0; 8];
    let (_, be) = lower(&m, &[feed("x", ElemType::F32, &[2, 4], x)], &copts(F32, 1));
    let names: Vec<&str> = be
        .calls_of(Kind::Constant)
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names.iter().filter(|n| **n == "W").count(), 1, "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "c").count(), 1, "{names:?}");
    // 1 + 0.25*4 = [2, 2, 2, 2] + c -> relu -> @W: sum(c + 1) / 4 ... by hand:
    let a1: Vec<f64> = (0..4).map(|j| 1.0 + [1.0, 2.0, 3.0, 4.0][j]).collect();
    let s: f64 = a1.iter().sum::<f64>() * 0.25;
    let want: Vec<f64> = (0..8).map(|i| s - [1.0, 2.0, 3.0, 4.0][i % 4]).collect();
    assert_exact(&be.out("y"), &want, "values");
}

#[test]
fn transposed_gemm_weights_are_shared_too() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 4]);
    b.init("W", tf32(&[4, 4], &[0.5; 16]));
    b.node_a(
        "Gemm",
        "g1",
        &["x", "W"],
        &["a"],
        vec![("transB", Attr::Int(1))],
    );
    b.node_a(
        "Gemm",
        "g2",
        &["a", "W"],
        &["y"],
        vec![("transB", Attr::Int(1))],
    );
    b.output("y");
    let (_, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[2, 4], vec![1.0; 8])],
        &copts(F32, 1),
    );
    assert_exact(&be.out("y"), &[4.0; 8], "values");
    assert_eq!(
        be.count(Kind::Constant),
        1,
        "{:?}",
        be.calls_of(Kind::Constant)
            .iter()
            .map(|c| &c.name)
            .collect::<Vec<_>>()
    );
}

#[test]
fn fully_folded_models_and_pass_through_outputs() {
    // The output is a constant computed at compile time.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2]);
    b.init("a", tf32(&[2], &[1.5, 2.0]));
    b.init("b", tf32(&[2], &[0.25, -1.0]));
    b.node("Mul", "mul", &["a", "b"], &["c"]);
    b.node("Relu", "relu", &["x"], &["y"]);
    b.output("c");
    b.output("y");
    b.output("x");
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[2], vec![-1.0, 1.0])],
        &copts(F32, 1),
    );
    assert_exact(&be.out("c"), &[0.375, -2.0], "folded output");
    assert_exact(&be.out("y"), &[0.0, 1.0], "relu");
    assert_exact(&be.out("x"), &[-1.0, 1.0], "an input as an output");
    assert_eq!(l.passes.folded, 1);
    let names: Vec<&str> = l.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, vec!["c", "y", "x"]);
    let streamed: Vec<&str> = be.outputs.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(
        streamed,
        vec!["c", "y", "x"],
        "outputs are streamed in graph order"
    );
}

// ---------------------------------------------------------------------------
// Bindings.

/// A chain of `n` dense layers (MatMul + Relu) of width `w` with distinct
/// weights; returns the model, the weights and the input.
fn layers(n: usize, w: usize, seed: u64) -> (Model, Vec<Vec<f64>>, Vec<f64>) {
    let mut rng = XorShift::new(seed);
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, w]);
    let mut ws = Vec::new();
    let mut cur = "x".to_string();
    for i in 0..n {
        let wv = rng.vec32(w * w, -0.4, 0.4);
        b.init(&format!("w{i}"), tf32(&[w, w], &wv));
        ws.push(wv);
        b.node(
            "MatMul",
            &format!("mm{i}"),
            &[&cur, &format!("w{i}")],
            &[&format!("m{i}")],
        );
        b.node(
            "Relu",
            &format!("relu{i}"),
            &[&format!("m{i}")],
            &[&format!("r{i}")],
        );
        cur = format!("r{i}");
    }
    b.output(&cur);
    (b.build(), ws, rng.vec32(2 * w, -1.0, 1.0))
}

#[test]
fn bindings_name_inputs_and_outputs_with_their_types() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("f", ElemType::F32, &[2]);
    b.input_fixed("d", ElemType::F64, &[2]);
    b.input_fixed("i", ElemType::I64, &[2]);
    b.input_fixed("m", ElemType::Bool, &[2]);
    b.input_fixed("u", ElemType::U8, &[2]);
    b.node_a("Cast", "cd", &["d"], &["df"], vec![("to", Attr::Int(1))]);
    b.node("Add", "add", &["f", "df"], &["sum"]);
    b.node("Not", "not", &["m"], &["nm"]);
    b.node("Neg", "neg", &["i"], &["ni"]);
    b.node("Add", "addu", &["u", "u"], &["uu"]);
    b.output("sum");
    b.output("nm");
    b.output("ni");
    b.output("d");
    b.output("uu");
    let m = b.build();
    let feeds = [
        feed("f", ElemType::F32, &[2], vec![1.5, -2.0]),
        feed("d", ElemType::F64, &[2], vec![0.25, 4.0]),
        feed("i", ElemType::I64, &[2], vec![7.0, -9.0]),
        feed("m", ElemType::Bool, &[2], vec![1.0, 0.0]),
        feed("u", ElemType::U8, &[2], vec![100.0, 3.0]),
    ];
    for (precision, float_dev, out_float_dev) in [
        (F32, DeviceType::F32, DeviceType::F32),
        (F16, DeviceType::F16, DeviceType::F16),
        (MIXED, DeviceType::F16, DeviceType::F32),
    ] {
        let (l, be) = lower(&m, &feeds, &copts(precision, 1));
        let ins: Vec<(&str, ElemType, DeviceType, Vec<usize>)> = l
            .inputs
            .iter()
            .map(|b| (b.name.as_str(), b.dtype, b.device_type, b.shape.clone()))
            .collect();
        assert_eq!(
            ins,
            vec![
                ("f", ElemType::F32, float_dev, vec![2]),
                ("d", ElemType::F64, float_dev, vec![2]),
                ("i", ElemType::I64, DeviceType::I32, vec![2]),
                ("m", ElemType::Bool, DeviceType::Bool, vec![2]),
                ("u", ElemType::U8, DeviceType::I32, vec![2]),
            ],
            "{precision:?}"
        );
        let outs: Vec<(&str, ElemType, DeviceType)> = l
            .outputs
            .iter()
            .map(|b| (b.name.as_str(), b.dtype, b.device_type))
            .collect();
        assert_eq!(
            outs,
            vec![
                ("sum", ElemType::F32, out_float_dev),
                ("nm", ElemType::Bool, DeviceType::Bool),
                ("ni", ElemType::I64, DeviceType::I32),
                ("d", ElemType::F64, out_float_dev),
                ("uu", ElemType::U8, DeviceType::I32),
            ],
            "{precision:?}"
        );
        // The backend saw the same types.
        for (bind, call) in l.inputs.iter().zip(be.calls_of(Kind::Input)) {
            assert_eq!(
                (call.name.as_str(), call.dtype),
                (bind.name.as_str(), bind.device_type)
            );
        }
        for (bind, call) in l.outputs.iter().zip(be.calls_of(Kind::Output)) {
            assert_eq!(
                (call.name.as_str(), call.dtype),
                (bind.name.as_str(), bind.device_type)
            );
        }
        assert_exact(&be.out("sum"), &[1.75, 2.0], "sum");
        assert_exact(&be.out("nm"), &[0.0, 1.0], "not");
        assert_exact(&be.out("ni"), &[-7.0, 9.0], "neg");
        assert_exact(&be.out("d"), &[0.25, 4.0], "pass-through");
        // uint8 arithmetic on the device is int32: 200 stays 200 here and
        // wraps only on the way back to the host (uint8 binding).
        assert_exact(&be.out("uu"), &[200.0, 6.0], "u + u");
    }
}

#[test]
fn lowering_reports_placement_in_program_order() {
    let (m, _, x) = layers(3, 4, 14);
    let (l, _) = lower(&m, &[feed("x", ElemType::F32, &[2, 4], x)], &copts(F32, 1));
    let names: Vec<(&str, &str)> = l
        .placement
        .iter()
        .map(|p| (p.node.as_str(), p.op_type.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("mm0", "MatMul"),
            ("relu0", "Relu"),
            ("mm1", "MatMul"),
            ("relu1", "Relu"),
            ("mm2", "MatMul"),
            ("relu2", "Relu")
        ]
    );
    assert_eq!(l.passes.nodes_out, 6);
}

#[test]
fn lowering_errors_surface_as_errors() {
    // Inputs that do not match, through the whole driver.
    let (m, _, x) = layers(1, 4, 15);
    let e = try_lower(
        &m,
        &[feed("x", ElemType::F32, &[2, 5], vec![0.0; 10])],
        &copts(F32, 1),
    )
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::InputMismatch { input, .. } if input == "x"),
        "{e:?}"
    );
    // A backend failure is passed through untouched.
    let e = try_lower(&m, &[], &copts(F32, 1)).err().unwrap();
    assert!(matches!(&e, Error::InputMismatch { .. }), "{e:?}");
    let mut be = TestBackend::new(); // no data fed: the backend refuses add_input
    let specs = specs(&[feed("x", ElemType::F32, &[2, 4], x)]);
    let e = neurenix_core::compile::lower_model(&m, &specs, &copts(F32, 1), &mut be).unwrap_err();
    assert!(
        matches!(&e, Error::Internal(msg) if msg.contains("no data fed")),
        "{e:?}"
    );
    // optimize() does not need a backend at all.
    assert!(optimize(&m, &specs).is_ok());
}

// ---------------------------------------------------------------------------
// More shapes of the same rules.

#[test]
fn random_transposes_lower_like_the_host_transpose() {
    let mut rng = XorShift::new(16);
    for _ in 0..60 {
        let rank = 1 + rng.below(4);
        let shape: Vec<usize> = (0..rank)
            .map(|_| {
                if rng.below(3) == 0 {
                    1
                } else {
                    2 + rng.below(3)
                }
            })
            .collect();
        let mut perm: Vec<usize> = (0..rank).collect();
        for i in (1..rank).rev() {
            perm.swap(i, rng.below(i + 1));
        }
        let x: Vec<f64> = (0..numel(&shape)).map(|i| i as f64).collect();
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let (m, feeds) = single(
            13,
            "Transpose",
            vec![("perm", Attr::Ints(p))],
            &[(ElemType::F32, shape.clone(), x.clone())],
        );
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        // Reference by hand: out[idx] = x[sum idx[i] * stride[perm[i]]].
        let mut strides = vec![1usize; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        let out: Vec<usize> = perm.iter().map(|&q| shape[q]).collect();
        let want: Vec<f64> = (0..numel(&out))
            .map(|li| {
                let idx = unravel(li, &out);
                x[idx
                    .iter()
                    .zip(&perm)
                    .map(|(&i, &q)| i * strides[q])
                    .sum::<usize>()]
            })
            .collect();
        assert_eq!(be.output("y").shape, out, "{shape:?} {perm:?}");
        assert_exact(&be.out("y"), &want, &format!("{shape:?} perm {perm:?}"));
        // Data only moves when the order of the elements changes.
        let moves = want.windows(2).any(|w| w[0] > w[1]);
        assert_eq!(
            be.count(Kind::Rearrange),
            moves as usize,
            "{shape:?} perm {perm:?}"
        );
    }
}

#[test]
fn random_elementwise_graphs_lower_like_they_fold() {
    // Random DAGs of unary and binary float operators over two inputs; the
    // lowered result (fused maps) must equal the folded one, with no more
    // maps than nodes, and a pure chain is a single map.
    let unary = [
        "Neg", "Abs", "Relu", "Tanh", "Sigmoid", "Softsign", "Sin", "Floor",
    ];
    let binary = ["Add", "Sub", "Mul", "Max", "Min"];
    let mut rng = XorShift::new(17);
    for case in 0..40 {
        let chain = case % 4 == 0;
        let n = 2 + rng.below(10);
        let mut b = ModelBuilder::new(13);
        b.input_fixed("a", ElemType::F32, &[2, 3]);
        b.input_fixed("b", ElemType::F32, &[3]);
        let mut vals = vec!["a".to_string(), "b".to_string()];
        for i in 0..n {
            let out = format!("v{i}");
            let pick = |rng: &mut XorShift, vals: &Vec<String>| -> String {
                if chain {
                    vals.last().unwrap().clone()
                } else {
                    vals[rng.below(vals.len())].clone()
                }
            };
            let op = if chain || rng.below(2) == 0 { "u" } else { "b" };
            if op == "u" {
                let u = unary[rng.below(unary.len())];
                let src = pick(&mut rng, &vals);
                b.node(u, &format!("n{i}"), &[&src], &[&out]);
            } else {
                let bo = binary[rng.below(binary.len())];
                let (p, q) = (pick(&mut rng, &vals), pick(&mut rng, &vals));
                b.node(bo, &format!("n{i}"), &[&p, &q], &[&out]);
            }
            vals.push(out);
        }
        let last = vals.last().unwrap().clone();
        b.output(&last);
        // Sometimes also an intermediate value.
        if !chain && n > 3 {
            b.output(&format!("v{}", rng.below(n - 1)));
        }
        let m = b.build();
        let av = rng.vec32(6, -2.0, 2.0);
        let bv = rng.vec32(3, -2.0, 2.0);
        let feeds = [
            feed("a", ElemType::F32, &[2, 3], av.clone()),
            feed("b", ElemType::F32, &[3], bv.clone()),
        ];
        let (l, be) = lower(&m, &feeds, &copts(F32, 1));
        // Fold the same graph with the inputs as initializers.
        let mut fm = m.clone();
        fm.graph.inputs.clear();
        let ai = fm.graph.find("a").unwrap();
        fm.graph.set_constant(ai, tf32(&[2, 3], &av));
        let bi = fm.graph.find("b").unwrap();
        fm.graph.set_constant(bi, tf32(&[3], &bv));
        let folded = optimize_no_inputs(&fm).unwrap();
        for o in &l.outputs {
            let want = folded
                .graph
                .constant(folded.graph.find(&o.name).unwrap())
                .unwrap()
                .to_f64_vec();
            assert_close(
                &be.out(&o.name),
                &want,
                1e-5,
                &format!("case {case}: {}", o.name),
            );
        }
        let nodes = l.placement.len();
        assert!(
            be.count(Kind::Map) <= nodes,
            "case {case}: {} maps for {nodes} nodes",
            be.count(Kind::Map)
        );
        if chain {
            assert_eq!(
                be.count(Kind::Map),
                1,
                "case {case}: a chain of {nodes} is one map"
            );
        }
    }
}

#[test]
fn cast_to_half_rounds_even_in_float32_precision() {
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[3]);
    b.node_a(
        "Cast",
        "to_half",
        &["x"],
        &["h"],
        vec![("to", Attr::Int(10))],
    );
    b.node_a("Cast", "back", &["h"], &["y"], vec![("to", Attr::Int(1))]);
    b.output("y");
    b.output("h");
    let x = [0.1, 1.0 + 2f64.powi(-11), 70000.0];
    let (l, be) = lower(
        &b.build(),
        &[feed("x", ElemType::F32, &[3], x.to_vec())],
        &copts(F32, 1),
    );
    assert_exact(
        &be.out("y"),
        &[r16(0.1), 1.0, f64::INFINITY],
        "rounded through half",
    );
    assert_exact(&be.out("h"), &[r16(0.1), 1.0, f64::INFINITY], "half output");
    assert_eq!(
        (l.outputs[1].dtype, l.outputs[1].device_type),
        (ElemType::F16, DeviceType::F32)
    );
}

#[test]
fn softmax_before_opset_13_coerces_at_any_axis() {
    let mut rng = XorShift::new(18);
    let x = rng.vec32(24, -3.0, 3.0);
    for (axis, rows, cols) in [(0i64, 1usize, 24usize), (2, 6, 4), (-2, 2, 12), (-3, 1, 24)] {
        let (m, feeds) = single(
            11,
            "Softmax",
            vec![("axis", Attr::Int(axis))],
            &[(ElemType::F32, vec![2, 3, 4], x.clone())],
        );
        let (_, be) = lower(&m, &feeds, &copts(F32, 1));
        assert_close(
            &be.out("y"),
            &ref_softmax_rows(&x, rows, cols, false),
            1e-6,
            &format!("axis {axis}"),
        );
    }
}
