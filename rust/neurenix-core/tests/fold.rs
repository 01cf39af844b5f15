//! Constant folding (host evaluation) of operators against hand-computed
//! values: every element-wise operator registered by ops/elementwise.rs,
//! Cast, Reshape, Flatten, Squeeze/Unsqueeze, Transpose, MatMul, Gemm,
//! Constant, Shape and Size.

use crate::common::*;
use neurenix_core::compile::optimize;
use neurenix_core::dtype::ElemType;
use neurenix_core::error::Error;
use neurenix_core::ir::Attr;
use neurenix_core::ops::supported_ops;
use neurenix_core::passes::TensorSpec;
use neurenix_core::tensor::HostTensor;

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// Inputs of the unary tests: no zero (see expr_eval.rs, erf_of_zero_returns),
/// all exact in float16.
const XS: [f64; 10] = [-7.0, -3.5, -1.25, -0.5, -0.125, 0.25, 0.75, 1.5, 2.0, 4.0];

fn f(x: f64) -> f32 {
    x as f32
}

/// ONNX's float attribute defaults, as float32 values.
fn a32(v: f32) -> f64 {
    v as f64
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn phi(x: f64) -> f64 {
    0.5 * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
}

type UnaryRef = fn(f64) -> f64;

/// (operator, attributes, reference).
fn unary_cases() -> Vec<(
    &'static str,
    Vec<(&'static str, Attr)>,
    Box<dyn Fn(f64) -> f64>,
)> {
    let b = |g: UnaryRef| -> Box<dyn Fn(f64) -> f64> { Box::new(g) };
    vec![
        ("Sigmoid", vec![], b(sigmoid)),
        (
            "Tanh",
            vec![],
            b(|x| ((2.0 * x).exp() - 1.0) / ((2.0 * x).exp() + 1.0)),
        ),
        ("Exp", vec![], b(f64::exp)),
        ("Log", vec![], b(f64::ln)),
        ("Sqrt", vec![], b(f64::sqrt)),
        ("Reciprocal", vec![], b(|x| 1.0 / x)),
        ("Erf", vec![], b(erf_ref)),
        ("Floor", vec![], b(f64::floor)),
        ("Ceil", vec![], b(f64::ceil)),
        (
            "Round",
            vec![],
            b(|x| {
                let r = x.round();
                if (x - x.trunc()).abs() == 0.5 {
                    2.0 * (x / 2.0).round()
                } else {
                    r
                }
            }),
        ),
        ("Sin", vec![], b(f64::sin)),
        ("Cos", vec![], b(f64::cos)),
        ("Softplus", vec![], b(|x| (1.0 + x.exp()).ln())),
        ("Softsign", vec![], b(|x| x / (1.0 + x.abs()))),
        ("Neg", vec![], b(|x| -x)),
        ("Abs", vec![], b(f64::abs)),
        ("Relu", vec![], b(|x| if x > 0.0 { x } else { 0.0 })),
        (
            "Sign",
            vec![],
            b(|x| {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }),
        ),
        (
            "LeakyRelu",
            vec![],
            Box::new(|x| if x >= 0.0 { x } else { a32(0.01) * x }),
        ),
        (
            "LeakyRelu",
            vec![("alpha", Attr::Float(0.2))],
            Box::new(|x| if x >= 0.0 { x } else { a32(0.2) * x }),
        ),
        (
            "Elu",
            vec![],
            b(|x| if x >= 0.0 { x } else { x.exp() - 1.0 }),
        ),
        (
            "Elu",
            vec![("alpha", Attr::Float(0.5))],
            b(|x| if x >= 0.0 { x } else { 0.5 * (x.exp() - 1.0) }),
        ),
        (
            "Selu",
            vec![],
            // ONNX defaults: alpha = 1.67326319217681884765625, gamma = 1.05070102214813232421875.
            b(|x| {
                1.05070102214813232421875
                    * if x > 0.0 {
                        x
                    } else {
                        1.67326319217681884765625 * (x.exp() - 1.0)
                    }
            }),
        ),
        (
            "Selu",
            vec![("alpha", Attr::Float(2.0)), ("gamma", Attr::Float(3.0))],
            b(|x| 3.0 * if x > 0.0 { x } else { 2.0 * (x.exp() - 1.0) }),
        ),
        (
            "HardSigmoid",
            vec![],
            Box::new(|x| (a32(0.2) * x + 0.5).clamp(0.0, 1.0)),
        ),
        (
            "HardSigmoid",
            vec![("alpha", Attr::Float(0.5)), ("beta", Attr::Float(0.25))],
            b(|x| (0.5 * x + 0.25).clamp(0.0, 1.0)),
        ),
        (
            "HardSwish",
            vec![],
            b(|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        ),
        (
            "ThresholdedRelu",
            vec![],
            b(|x| if x > 1.0 { x } else { 0.0 }),
        ),
        (
            "ThresholdedRelu",
            vec![("alpha", Attr::Float(0.5))],
            b(|x| if x > 0.5 { x } else { 0.0 }),
        ),
        ("Gelu", vec![], b(|x| x * phi(x))),
        (
            "Gelu",
            vec![("approximate", Attr::String("none".into()))],
            b(|x| x * phi(x)),
        ),
        (
            "Gelu",
            vec![("approximate", Attr::String("tanh".into()))],
            b(|x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
            }),
        ),
    ]
}

#[test]
fn unary_float_operators_fold_in_float32_and_float64() {
    for (op, attrs, r) in unary_cases() {
        let want64: Vec<f64> = XS.iter().map(|&x| r(x)).collect();
        let got = fold(13, op, attrs.clone(), vec![tf64(&[XS.len()], &XS)]);
        assert_eq!(got.dtype, ElemType::F64, "{op}");
        // Absolute below 1 (Gelu's tail is a cancellation, as defined).
        assert_close(
            &got.to_f64_vec(),
            &want64,
            1e-11,
            &format!("{op} {attrs:?} float64"),
        );
        // float32: the correctly rounded result, up to one ulp for composite
        // operators rounded once per step.
        let got = fold(13, op, attrs.clone(), vec![tf32(&[XS.len()], &XS)]);
        assert_eq!(got.dtype, ElemType::F32, "{op}");
        assert_eq!(got.shape(), &[XS.len()]);
        let want32: Vec<f64> = want64.iter().map(|&v| r32(v)).collect();
        assert_close(
            &got.to_f64_vec(),
            &want32,
            2.4e-7,
            &format!("{op} {attrs:?} float32"),
        );
        for g in got.to_f64_vec().iter().filter(|g| !g.is_nan()) {
            assert_eq!(r32(*g), *g, "{op}: float32 results are float32 values");
        }
    }
}

#[test]
fn unary_float_operators_fold_in_float16() {
    for (op, attrs, r) in unary_cases() {
        let got = fold(13, op, attrs.clone(), vec![tf16(&[XS.len()], &XS)]);
        assert_eq!(got.dtype, ElemType::F16, "{op}");
        let want: Vec<f64> = XS.iter().map(|&x| r16(r(x))).collect();
        // One half ulp (2^-10 relative) for operators made of several steps.
        assert_close(
            &got.to_f64_vec(),
            &want,
            1.0 / 1024.0,
            &format!("{op} {attrs:?} float16"),
        );
        for g in got.to_f64_vec().into_iter().filter(|g| !g.is_nan()) {
            assert_eq!(r16(g), g, "{op}: float16 results are float16 values");
        }
    }
}

#[test]
fn special_values_of_unary_operators() {
    let v = |op: &str, xs: &[f64]| fold(13, op, vec![], vec![tf32(&[xs.len()], xs)]).to_f64_vec();
    assert_exact(&v("Log", &[0.0, -1.0, INF]), &[-INF, NAN, INF], "log");
    assert_exact(&v("Sqrt", &[-1.0, 0.0, INF]), &[NAN, 0.0, INF], "sqrt");
    assert_exact(
        &v("Reciprocal", &[0.0, -0.0]),
        &[INF, -INF],
        "reciprocal of signed zeros",
    );
    assert_exact(&v("Relu", &[NAN, -0.0]), &[NAN, 0.0], "relu");
    assert_exact(
        &v("Round", &[0.5, 1.5, 2.5, -0.5, -2.5, 3.5]),
        &[0.0, 2.0, 2.0, -0.0, -2.0, 4.0],
        "round to even",
    );
    assert_exact(
        &v("Exp", &[100.0, -200.0]),
        &[INF, 0.0],
        "exp overflows float32",
    );
    assert_exact(
        &v("Sigmoid", &[-200.0, 200.0]),
        &[0.0, 1.0],
        "sigmoid saturates",
    );
    assert_exact(
        &v("Softplus", &[100.0]),
        &[100.0],
        "softplus of a large value",
    );
    assert_exact(&v("Abs", &[-INF]), &[INF], "abs");
}

#[test]
fn unknown_gelu_approximation_is_an_error() {
    let r = try_fold(
        20,
        "Gelu",
        vec![("approximate", Attr::String("fast".into()))],
        vec![Some(tf32(&[1], &[1.0]))],
    );
    match r {
        Err(Error::ModelFormat(m)) => assert!(m.contains("fast"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn integer_unary_operators() {
    let x = ti32(&[5], &[-5, -1, 0, 3, i32::MIN as i64]);
    let v = |op: &str| {
        let t = fold(14, op, vec![], vec![x.clone()]);
        assert_eq!(t.dtype, ElemType::I32, "{op}");
        t.to_i64_vec()
    };
    assert_eq!(
        v("Neg"),
        vec![5, 1, 0, -3, i32::MIN as i64],
        "int32 negation wraps at MIN"
    );
    assert_eq!(v("Abs"), vec![5, 1, 0, 3, i32::MIN as i64]);
    assert_eq!(v("Relu"), vec![0, 0, 0, 3, 0]);
    assert_eq!(v("Sign"), vec![-1, -1, 0, 1, -1]);
    // Float-only operators reject integers.
    let r = try_fold(13, "Exp", vec![], vec![Some(x.clone())]);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
}

#[test]
fn classification_and_logic() {
    let x = tf32(&[4], &[NAN, INF, -INF, 1.0]);
    let nan = fold(13, "IsNaN", vec![], vec![x.clone()]);
    assert_eq!(
        (nan.dtype, nan.to_i64_vec()),
        (ElemType::Bool, vec![1, 0, 0, 0])
    );
    let inf = fold(13, "IsInf", vec![], vec![x]);
    assert_eq!(
        (inf.dtype, inf.to_i64_vec()),
        (ElemType::Bool, vec![0, 1, 1, 0])
    );
    let a = tbool(&[4], &[false, false, true, true]);
    let b = tbool(&[4], &[false, true, false, true]);
    assert_eq!(
        fold(13, "Not", vec![], vec![a.clone()]).to_i64_vec(),
        vec![1, 1, 0, 0]
    );
    assert_eq!(
        fold(13, "And", vec![], vec![a.clone(), b.clone()]).to_i64_vec(),
        vec![0, 0, 0, 1]
    );
    assert_eq!(
        fold(13, "Or", vec![], vec![a.clone(), b.clone()]).to_i64_vec(),
        vec![0, 1, 1, 1]
    );
    assert_eq!(
        fold(13, "Xor", vec![], vec![a.clone(), b.clone()]).to_i64_vec(),
        vec![0, 1, 1, 0]
    );
    // Broadcasting logic: [2, 1] with [2].
    let c = tbool(&[2, 1], &[true, false]);
    let d = tbool(&[2], &[true, false]);
    let t = fold(13, "And", vec![], vec![c, d]);
    assert_eq!(
        (t.shape().to_vec(), t.to_i64_vec()),
        (vec![2, 2], vec![1, 0, 0, 0])
    );
    assert!(
        try_fold(13, "Not", vec![], vec![Some(tf32(&[1], &[1.0]))]).is_err(),
        "Not of a float"
    );
}

/// Reference numpy-broadcast binary op over f64 data.
fn ref_binary(
    a: &[f64],
    sa: &[usize],
    b: &[f64],
    sb: &[usize],
    out: &[usize],
    g: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let ia = broadcast_index(sa, out).unwrap();
    let ib = broadcast_index(sb, out).unwrap();
    (0..numel(out)).map(|i| g(a[ia[i]], b[ib[i]])).collect()
}

#[test]
fn arithmetic_with_broadcasting() {
    let mut rng = XorShift::new(1);
    let (sa, sb, so) = ([2usize, 1, 3], [4usize, 1], [2usize, 4, 3]);
    let a = rng.eighths(numel(&sa), 4);
    let b: Vec<f64> = rng
        .eighths(numel(&sb), 4)
        .iter()
        .map(|v| if *v == 0.0 { 0.5 } else { *v })
        .collect();
    type Bin = fn(f64, f64) -> f64;
    let cases: [(&str, Bin); 4] = [
        ("Add", |x, y| x + y),
        ("Sub", |x, y| x - y),
        ("Mul", |x, y| x * y),
        ("Div", |x, y| x / y),
    ];
    for (op, g) in cases {
        let t = fold(13, op, vec![], vec![tf32(&sa, &a), tf32(&sb, &b)]);
        assert_eq!(t.shape(), &so, "{op}");
        let want: Vec<f64> = ref_binary(&a, &sa, &b, &sb, &so, g)
            .into_iter()
            .map(r32)
            .collect();
        assert_exact(&t.to_f64_vec(), &want, op);
    }
    // Pow: float exponent, and an integer exponent of another type.
    let t = fold(
        13,
        "Pow",
        vec![],
        vec![tf32(&[3], &[2.0, 9.0, -2.0]), tf32(&[3], &[10.0, 0.5, 3.0])],
    );
    assert_exact(&t.to_f64_vec(), &[1024.0, 3.0, -8.0], "pow");
    let t = fold(
        13,
        "Pow",
        vec![],
        vec![tf32(&[3], &[2.0, 1.5, -3.0]), ti64(&[], &[2])],
    );
    assert_eq!(t.dtype, ElemType::F32);
    assert_exact(
        &t.to_f64_vec(),
        &[4.0, 2.25, 9.0],
        "pow with int64 exponent",
    );
    let t = fold(
        13,
        "Pow",
        vec![],
        vec![ti64(&[3], &[2, 3, -2]), ti64(&[3], &[10, 3, 3])],
    );
    assert_eq!(t.to_i64_vec(), vec![1024, 27, -8], "integer pow");
}

#[test]
fn float_arithmetic_rounds_to_the_declared_type() {
    // 16777216 + 1 is not a float32; 0.1 + 0.2 rounds once to float32.
    let t = fold(
        13,
        "Add",
        vec![],
        vec![tf32(&[2], &[16777216.0, 0.1]), tf32(&[2], &[1.0, 0.2])],
    );
    assert_exact(
        &t.to_f64_vec(),
        &[16777216.0, r32(r32(0.1) + r32(0.2))],
        "float32 add",
    );
    // float16: 1 + 2^-11 ties to even.
    let t = fold(
        13,
        "Add",
        vec![],
        vec![
            tf16(&[2], &[1.0, 1.0]),
            tf16(&[2], &[2f64.powi(-11), 3.0 * 2f64.powi(-11)]),
        ],
    );
    assert_exact(
        &t.to_f64_vec(),
        &[1.0, 1.0 + 2f64.powi(-9)],
        "float16 add ties to even",
    );
    // float16 Sum rounds after each addition: (1 + 2^-11) + 2^-11 = 1.
    let e = 2f64.powi(-11);
    let t = fold(
        13,
        "Sum",
        vec![],
        vec![tf16(&[1], &[1.0]), tf16(&[1], &[e]), tf16(&[1], &[e])],
    );
    assert_exact(&t.to_f64_vec(), &[1.0], "float16 sum, rounded per addition");
    let t = fold(
        13,
        "Mul",
        vec![],
        vec![tf16(&[1], &[300.0]), tf16(&[1], &[300.0])],
    );
    assert_exact(&t.to_f64_vec(), &[INF], "float16 overflow");
    // float64 is not rounded.
    let t = fold(
        13,
        "Add",
        vec![],
        vec![tf64(&[1], &[0.1]), tf64(&[1], &[0.2])],
    );
    assert_exact(&t.to_f64_vec(), &[0.1 + 0.2], "float64 add");
}

#[test]
fn integer_arithmetic() {
    let t = fold(
        13,
        "Add",
        vec![],
        vec![ti32(&[2], &[i32::MAX as i64, 5]), ti32(&[2], &[1, -7])],
    );
    assert_eq!(
        (t.dtype, t.to_i64_vec()),
        (ElemType::I32, vec![i32::MIN as i64, -2]),
        "int32 add wraps"
    );
    let t = fold(
        13,
        "Mul",
        vec![],
        vec![ti32(&[1], &[65536]), ti32(&[1], &[65536])],
    );
    assert_eq!(t.to_i64_vec(), vec![0], "int32 mul wraps");
    let t = fold(
        13,
        "Div",
        vec![],
        vec![ti64(&[4], &[7, -7, 7, -7]), ti64(&[4], &[2, 2, -2, -2])],
    );
    assert_eq!(
        t.to_i64_vec(),
        vec![3, -3, -3, 3],
        "integer division truncates"
    );
    let a = ti64(&[4], &[7, -7, 7, -7]);
    let b = ti64(&[4], &[3, 3, -3, -3]);
    let t = fold(13, "Mod", vec![], vec![a.clone(), b.clone()]);
    assert_eq!(
        t.to_i64_vec(),
        vec![1, 2, -2, -1],
        "Mod takes the divisor's sign"
    );
    let t = fold(13, "Mod", vec![("fmod", Attr::Int(1))], vec![a, b]);
    assert_eq!(
        t.to_i64_vec(),
        vec![1, -1, 1, -1],
        "fmod takes the dividend's sign"
    );
    let t = fold(
        13,
        "Mod",
        vec![("fmod", Attr::Int(1))],
        vec![tf32(&[2], &[-7.5, 7.5]), tf32(&[2], &[2.0, -2.0])],
    );
    assert_exact(&t.to_f64_vec(), &[-1.5, 1.5], "float fmod");
    let t = fold(
        13,
        "Sub",
        vec![],
        vec![
            tint(ElemType::U8, &[2], &[3, 200]),
            tint(ElemType::U8, &[2], &[5, 100]),
        ],
    );
    assert_eq!(
        (t.dtype, t.to_i64_vec()),
        (ElemType::U8, vec![254, 100]),
        "uint8 sub wraps"
    );
}

#[test]
fn variadic_max_min_sum_mean() {
    let a = tf32(&[2, 3], &[1.0, 5.0, -2.0, 0.5, NAN, 3.0]);
    let b = tf32(&[3], &[2.0, 4.0, -3.0]);
    let c = tf32(&[], &[0.75]);
    let t = fold(13, "Max", vec![], vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(t.shape(), &[2, 3]);
    assert_exact(
        &t.to_f64_vec(),
        &[2.0, 5.0, 0.75, 2.0, NAN, 3.0],
        "max propagates NaN",
    );
    let t = fold(13, "Min", vec![], vec![a.clone(), b.clone(), c.clone()]);
    assert_exact(&t.to_f64_vec(), &[0.75, 0.75, -3.0, 0.5, NAN, -3.0], "min");
    let t = fold(13, "Sum", vec![], vec![a.clone(), b.clone(), c.clone()]);
    assert_exact(
        &t.to_f64_vec(),
        &[3.75, 9.75, -4.25, 3.25, NAN, 0.75],
        "sum",
    );
    let t = fold(13, "Mean", vec![], vec![a.clone(), b.clone(), c.clone()]);
    assert_exact(
        &t.to_f64_vec(),
        &[1.25, 3.25, r32(-4.25 / 3.0), r32(3.25 / 3.0), NAN, 0.25],
        "mean",
    );
    // One input: the input itself.
    for op in ["Max", "Min", "Sum", "Mean"] {
        assert_exact(
            &fold(13, op, vec![], vec![b.clone()]).to_f64_vec(),
            &[2.0, 4.0, -3.0],
            op,
        );
    }
    let t = fold(
        13,
        "Max",
        vec![],
        vec![ti64(&[2], &[1, -9]), ti64(&[2], &[0, -3])],
    );
    assert_eq!(t.to_i64_vec(), vec![1, -3], "integer max");
}

#[test]
fn comparisons() {
    let a = tf32(&[5], &[1.0, 2.0, 3.0, NAN, NAN]);
    let b = tf32(&[5], &[2.0, 2.0, 2.0, 1.0, NAN]);
    let cmp = |op: &str, a: &HostTensor, b: &HostTensor| {
        let t = fold(13, op, vec![], vec![a.clone(), b.clone()]);
        assert_eq!(t.dtype, ElemType::Bool, "{op}");
        t.to_i64_vec()
    };
    assert_eq!(cmp("Equal", &a, &b), vec![0, 1, 0, 0, 0]);
    assert_eq!(cmp("Less", &a, &b), vec![1, 0, 0, 0, 0]);
    assert_eq!(cmp("LessOrEqual", &a, &b), vec![1, 1, 0, 0, 0]);
    assert_eq!(cmp("Greater", &a, &b), vec![0, 0, 1, 0, 0]);
    assert_eq!(cmp("GreaterOrEqual", &a, &b), vec![0, 1, 1, 0, 0]);
    let (i, j) = (ti64(&[3], &[1, 2, 3]), ti64(&[], &[2]));
    assert_eq!(cmp("Equal", &i, &j), vec![0, 1, 0]);
    assert_eq!(cmp("Less", &i, &j), vec![1, 0, 0]);
    assert_eq!(cmp("GreaterOrEqual", &i, &j), vec![0, 1, 1]);
    let (p, q) = (tbool(&[2], &[true, false]), tbool(&[2], &[true, true]));
    assert_eq!(cmp("Equal", &p, &q), vec![1, 0], "equal on bools");
    // Large int64 values compare exactly (no detour through f64).
    let (x, y) = (ti64(&[1], &[(1 << 53) + 1]), ti64(&[1], &[1 << 53]));
    assert_eq!(cmp("Greater", &x, &y), vec![1]);
}

#[test]
fn where_prelu_and_clip() {
    let c = tbool(&[2, 1], &[true, false]);
    let x = tf32(&[3], &[1.0, 2.0, 3.0]);
    let y = tf32(&[], &[-1.0]);
    let t = fold(13, "Where", vec![], vec![c.clone(), x, y]);
    assert_eq!(t.shape(), &[2, 3]);
    assert_exact(&t.to_f64_vec(), &[1.0, 2.0, 3.0, -1.0, -1.0, -1.0], "where");
    let t = fold(
        13,
        "Where",
        vec![],
        vec![c, ti64(&[1], &[7]), ti64(&[2, 2], &[1, 2, 3, 4])],
    );
    assert_eq!(
        (t.dtype, t.to_i64_vec()),
        (ElemType::I64, vec![7, 7, 3, 4]),
        "where on ints"
    );
    // The condition must be bool.
    let r = try_fold(
        13,
        "Where",
        vec![],
        vec![
            Some(tf32(&[1], &[1.0])),
            Some(tf32(&[1], &[1.0])),
            Some(tf32(&[1], &[2.0])),
        ],
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");

    let x = tf32(&[2, 3], &[-2.0, 0.0, 3.0, -4.0, 5.0, -0.5]);
    let slope = tf32(&[3], &[0.5, 0.25, 2.0]);
    let t = fold(13, "PRelu", vec![], vec![x.clone(), slope]);
    assert_exact(&t.to_f64_vec(), &[-1.0, 0.0, 3.0, -2.0, 5.0, -1.0], "prelu");
    // The slope may not broadcast the input up.
    let r = try_fold(
        13,
        "PRelu",
        vec![],
        vec![
            Some(tf32(&[3], &[1.0, 2.0, 3.0])),
            Some(tf32(&[2, 3], &[0.5; 6])),
        ],
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");

    // Clip before opset 11: attributes (defaults: no bound).
    let v = [-3.0, -1.0, 0.5, 2.0, 9.0];
    let t = fold(
        6,
        "Clip",
        vec![("min", Attr::Float(-1.5)), ("max", Attr::Float(2.5))],
        vec![tf32(&[5], &v)],
    );
    assert_exact(&t.to_f64_vec(), &[-1.5, -1.0, 0.5, 2.0, 2.5], "clip-6");
    let t = fold(
        6,
        "Clip",
        vec![("max", Attr::Float(1.0))],
        vec![tf32(&[5], &v)],
    );
    assert_exact(
        &t.to_f64_vec(),
        &[-3.0, -1.0, 0.5, 1.0, 1.0],
        "clip-6 max only",
    );
    // From opset 11: optional inputs.
    let lo = tf32(&[], &[-1.5]);
    let hi = tf32(&[], &[2.5]);
    let x5 = tf32(&[5], &v);
    let t = try_fold(
        13,
        "Clip",
        vec![],
        vec![Some(x5.clone()), Some(lo.clone()), Some(hi.clone())],
    )
    .unwrap();
    assert_exact(&t.to_f64_vec(), &[-1.5, -1.0, 0.5, 2.0, 2.5], "clip-13");
    let t = try_fold(13, "Clip", vec![], vec![Some(x5.clone()), None, Some(hi)]).unwrap();
    assert_exact(
        &t.to_f64_vec(),
        &[-3.0, -1.0, 0.5, 2.0, 2.5],
        "clip-13 max only",
    );
    let t = try_fold(13, "Clip", vec![], vec![Some(x5.clone()), Some(lo)]).unwrap();
    assert_exact(
        &t.to_f64_vec(),
        &[-1.5, -1.0, 0.5, 2.0, 9.0],
        "clip-13 min only",
    );
    let t = try_fold(13, "Clip", vec![], vec![Some(x5)]).unwrap();
    assert_exact(&t.to_f64_vec(), &v, "clip-13 without bounds");
    let t = try_fold(
        13,
        "Clip",
        vec![],
        vec![
            Some(ti64(&[3], &[-9, 0, 9])),
            Some(ti64(&[], &[-2])),
            Some(ti64(&[], &[4])),
        ],
    )
    .unwrap();
    assert_eq!(t.to_i64_vec(), vec![-2, 0, 4], "integer clip");
}

/// Element-wise operators registered by ops/elementwise.rs, all covered
/// above (the casts are covered below).
const ELEMENTWISE: &[&str] = &[
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Softplus",
    "Softsign",
    "Neg",
    "Abs",
    "Relu",
    "Sign",
    "IsNaN",
    "IsInf",
    "Not",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "HardSwish",
    "ThresholdedRelu",
    "Gelu",
    "PRelu",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Where",
    "Clip",
    "Cast",
    "CastLike",
];

#[test]
fn every_elementwise_operator_is_registered_and_covered() {
    let sup = supported_ops();
    for op in ELEMENTWISE {
        assert!(sup.contains(&op.to_string()), "{op} is not registered");
    }
    let unary: Vec<&str> = unary_cases().iter().map(|c| c.0).collect();
    let others = [
        "IsNaN",
        "IsInf",
        "Not",
        "And",
        "Or",
        "Xor",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Mod",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Where",
        "PRelu",
        "Clip",
        "Cast",
        "CastLike",
    ];
    for op in ELEMENTWISE {
        assert!(
            unary.contains(op) || others.contains(op),
            "{op} has no folding test"
        );
    }
}

#[test]
fn folding_erf_of_zero_terminates() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(fold(13, "Erf", vec![], vec![tf32(&[2], &[0.0, 1.0])]).to_f64_vec());
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(2))
        .expect("folding Erf([0, 1]) did not return in 2 s");
    assert_rel(&got, &[0.0, r32(0.8427007929497149)], 1e-7, "erf");
}

// ---------------------------------------------------------------------------
// Cast.

fn cast(x: HostTensor, to: ElemType) -> HostTensor {
    let t = fold(
        13,
        "Cast",
        vec![("to", Attr::Int(to.onnx_code() as i64))],
        vec![x],
    );
    assert_eq!(t.dtype, to);
    t
}

#[test]
fn cast_float_to_int_truncates_and_saturates() {
    let x = tf32(&[7], &[-1.7, 2.5, 2.9999, 3e9, -3e9, 127.9, -128.9]);
    assert_eq!(
        cast(x.clone(), ElemType::I32).to_i64_vec(),
        vec![-1, 2, 2, i32::MAX as i64, i32::MIN as i64, 127, -128]
    );
    assert_eq!(
        cast(x.clone(), ElemType::I8).to_i64_vec(),
        vec![-1, 2, 2, 127, -128, 127, -128]
    );
    assert_eq!(
        cast(x.clone(), ElemType::U8).to_i64_vec(),
        vec![0, 2, 2, 255, 0, 127, 0]
    );
    assert_eq!(
        cast(x.clone(), ElemType::I16).to_i64_vec(),
        vec![-1, 2, 2, 32767, -32768, 127, -128]
    );
    assert_eq!(
        cast(x.clone(), ElemType::U16).to_i64_vec(),
        vec![0, 2, 2, 65535, 0, 127, 0]
    );
    assert_eq!(
        cast(x, ElemType::I64).to_i64_vec(),
        vec![-1, 2, 2, 3_000_000_000, -3_000_000_000, 127, -128]
    );
}

#[test]
fn cast_between_integers_wraps() {
    let x = ti64(&[5], &[200, 256, -1, 70000, -129]);
    assert_eq!(
        cast(x.clone(), ElemType::I8).to_i64_vec(),
        vec![-56, 0, -1, 112, 127]
    );
    assert_eq!(
        cast(x.clone(), ElemType::U8).to_i64_vec(),
        vec![200, 0, 255, 112, 127]
    );
    assert_eq!(
        cast(x.clone(), ElemType::U16).to_i64_vec(),
        vec![200, 256, 65535, 4464, 65407]
    );
    assert_eq!(
        cast(x.clone(), ElemType::I32).to_i64_vec(),
        vec![200, 256, -1, 70000, -129]
    );
    let y = ti32(&[2], &[-1, 7]);
    assert_eq!(cast(y.clone(), ElemType::I64).to_i64_vec(), vec![-1, 7]);
    assert_eq!(cast(y, ElemType::U32).to_i64_vec(), vec![4294967295, 7]);
}

#[test]
fn cast_to_and_from_bool() {
    let x = tf32(&[5], &[0.0, -0.0, 0.25, -3.0, NAN]);
    assert_eq!(cast(x, ElemType::Bool).to_i64_vec(), vec![0, 0, 1, 1, 1]);
    assert_eq!(
        cast(ti64(&[3], &[0, 5, -1]), ElemType::Bool).to_i64_vec(),
        vec![0, 1, 1]
    );
    let b = tbool(&[2], &[true, false]);
    assert_exact(
        &cast(b.clone(), ElemType::F32).to_f64_vec(),
        &[1.0, 0.0],
        "bool -> f32",
    );
    assert_exact(
        &cast(b.clone(), ElemType::F16).to_f64_vec(),
        &[1.0, 0.0],
        "bool -> f16",
    );
    assert_eq!(cast(b.clone(), ElemType::I64).to_i64_vec(), vec![1, 0]);
    assert_eq!(cast(b, ElemType::U8).to_i64_vec(), vec![1, 0]);
}

#[test]
fn cast_rounds_floats() {
    let x = tf32(
        &[6],
        &[0.1, 1.0 + 2f64.powi(-11), 65504.0, 65520.0, -1e5, 1e-8],
    );
    assert_exact(
        &cast(x, ElemType::F16).to_f64_vec(),
        &[0.0999755859375, 1.0, 65504.0, INF, -INF, 0.0],
        "float32 -> float16",
    );
    assert_exact(
        &cast(ti64(&[3], &[2049, 2051, -4097]), ElemType::F16).to_f64_vec(),
        &[2048.0, 2052.0, -4096.0],
        "int -> f16",
    );
    assert_exact(
        &cast(ti64(&[2], &[16777217, (1 << 40) + 1]), ElemType::F32).to_f64_vec(),
        &[16777216.0, (1u64 << 40) as f64],
        "int -> f32",
    );
    assert_exact(
        &cast(tf64(&[2], &[0.1, 1e300]), ElemType::F32).to_f64_vec(),
        &[r32(0.1), INF],
        "f64 -> f32",
    );
    assert_exact(
        &cast(tf16(&[1], &[0.0999755859375]), ElemType::F64).to_f64_vec(),
        &[0.0999755859375],
        "f16 -> f64",
    );
    assert_exact(
        &cast(tf32(&[1], &[0.1]), ElemType::F64).to_f64_vec(),
        &[r32(0.1)],
        "f32 -> f64 is exact",
    );
}

#[test]
fn castlike_takes_the_type_of_its_second_input() {
    let t = try_fold(
        15,
        "CastLike",
        vec![],
        vec![Some(tf32(&[2], &[1.9, -1.9])), Some(ti32(&[1], &[0]))],
    )
    .unwrap();
    assert_eq!((t.dtype, t.to_i64_vec()), (ElemType::I32, vec![1, -1]));
    let t = try_fold(
        15,
        "CastLike",
        vec![],
        vec![Some(ti64(&[1], &[3])), Some(tf16(&[], &[0.0]))],
    )
    .unwrap();
    assert_eq!(t.dtype, ElemType::F16);
    assert_exact(&t.to_f64_vec(), &[3.0], "int -> like f16");
}

// ---------------------------------------------------------------------------
// Data movement.

fn iota(shape: &[usize]) -> HostTensor {
    tf32(
        shape,
        &(0..numel(shape)).map(|i| i as f64).collect::<Vec<_>>(),
    )
}

fn reshape(
    x: HostTensor,
    target: &[i64],
    attrs: Vec<(&str, Attr)>,
) -> neurenix_core::Result<HostTensor> {
    try_fold(
        14,
        "Reshape",
        attrs,
        vec![Some(x), Some(ti64(&[target.len()], target))],
    )
}

#[test]
fn reshape_with_zero_minus_one_and_allowzero() {
    let x = iota(&[2, 3, 4]);
    let vals: Vec<f64> = (0..24).map(|i| i as f64).collect();
    for (target, want) in [
        (vec![0, -1], vec![2, 12]),
        (vec![-1], vec![24]),
        (vec![4, -1, 2], vec![4, 3, 2]),
        (vec![0, 0, -1], vec![2, 3, 4]),
        (vec![-1, 0, 1, 1], vec![8, 3, 1, 1]),
        (vec![2, 0, 4], vec![2, 3, 4]),
        (vec![6, 4], vec![6, 4]),
    ] {
        let t = reshape(x.clone(), &target, vec![]).unwrap_or_else(|e| panic!("{target:?}: {e}"));
        assert_eq!(t.shape(), want.as_slice(), "{target:?}");
        assert_exact(&t.to_f64_vec(), &vals, "reshape keeps the element order");
    }
    for bad in [
        vec![-1, -1],
        vec![5, -1],
        vec![7, 4],
        vec![-2, 12],
        vec![0, 0, 0, 0, 0],
    ] {
        let r = reshape(x.clone(), &bad, vec![]);
        assert!(
            matches!(r, Err(Error::ShapeMismatch { .. })),
            "{bad:?}: {r:?}"
        );
    }
    // allowzero: 0 is a real zero-sized dimension.
    let empty = tf32(&[0, 3], &[]);
    let t = reshape(empty.clone(), &[3, 0], vec![("allowzero", Attr::Int(1))]).unwrap();
    assert_eq!(t.shape(), &[3, 0]);
    // Without it, 0 copies dimension 1 (3): [3, 3] does not hold 0 elements.
    assert!(reshape(empty.clone(), &[3, 0], vec![]).is_err());
    let t = reshape(empty, &[0, 3], vec![]).unwrap();
    assert_eq!(t.shape(), &[0, 3], "0 copies the zero-sized dimension");
    // Before opset 5 the shape is an attribute.
    let t = try_fold(
        1,
        "Reshape",
        vec![("shape", Attr::Ints(vec![3, -1]))],
        vec![Some(iota(&[2, 3]))],
    )
    .unwrap();
    assert_eq!(t.shape(), &[3, 2]);
    // Integer and bool data reshape too.
    let t = reshape(ti64(&[2, 2], &[1, 2, 3, 4]), &[-1], vec![]).unwrap();
    assert_eq!((t.dtype, t.to_i64_vec()), (ElemType::I64, vec![1, 2, 3, 4]));
}

#[test]
fn flatten_with_negative_axes() {
    let x = iota(&[2, 3, 4]);
    for (axis, want) in [
        (None, [2, 12]),
        (Some(0), [1, 24]),
        (Some(1), [2, 12]),
        (Some(2), [6, 4]),
        (Some(3), [24, 1]),
        (Some(-1), [6, 4]),
        (Some(-2), [2, 12]),
        (Some(-3), [1, 24]),
    ] {
        let attrs = axis
            .map(|a| vec![("axis", Attr::Int(a))])
            .unwrap_or_default();
        let t = fold(13, "Flatten", attrs, vec![x.clone()]);
        assert_eq!(t.shape(), &want, "axis {axis:?}");
        assert_exact(&t.to_f64_vec(), &x.to_f64_vec(), "flatten keeps the order");
    }
    for bad in [4, -4] {
        let r = try_fold(
            13,
            "Flatten",
            vec![("axis", Attr::Int(bad))],
            vec![Some(x.clone())],
        );
        assert!(
            matches!(r, Err(Error::ShapeMismatch { .. })),
            "axis {bad}: {r:?}"
        );
    }
}

#[test]
fn squeeze_and_unsqueeze_attribute_and_input_forms() {
    let x = iota(&[1, 3, 1, 2]);
    // opset 11: attribute.
    let sq = |opset, attrs, axes: Option<&[i64]>| {
        let mut ins = vec![Some(x.clone())];
        if let Some(a) = axes {
            ins.push(Some(ti64(&[a.len()], a)));
        }
        try_fold(opset, "Squeeze", attrs, ins)
    };
    assert_eq!(
        sq(11, vec![("axes", Attr::Ints(vec![0, -2]))], None)
            .unwrap()
            .shape(),
        &[3, 2]
    );
    assert_eq!(
        sq(11, vec![("axes", Attr::Ints(vec![2]))], None)
            .unwrap()
            .shape(),
        &[1, 3, 2]
    );
    assert_eq!(
        sq(11, vec![], None).unwrap().shape(),
        &[3, 2],
        "no axes: every 1"
    );
    assert!(
        matches!(
            sq(11, vec![("axes", Attr::Ints(vec![1]))], None),
            Err(Error::ShapeMismatch { .. })
        ),
        "size 3"
    );
    assert!(
        sq(11, vec![("axes", Attr::Ints(vec![4]))], None).is_err(),
        "out of range"
    );
    // opset 13: input.
    assert_eq!(sq(13, vec![], Some(&[0, 2])).unwrap().shape(), &[3, 2]);
    assert_eq!(sq(13, vec![], Some(&[-4])).unwrap().shape(), &[3, 1, 2]);
    assert_eq!(sq(13, vec![], None).unwrap().shape(), &[3, 2]);
    let t = sq(13, vec![], Some(&[0])).unwrap();
    assert_exact(&t.to_f64_vec(), &x.to_f64_vec(), "squeeze keeps the order");

    let y = iota(&[2, 3]);
    let unsq = |opset, attrs, axes: Option<&[i64]>| {
        let mut ins = vec![Some(y.clone())];
        if let Some(a) = axes {
            ins.push(Some(ti64(&[a.len()], a)));
        }
        try_fold(opset, "Unsqueeze", attrs, ins)
    };
    assert_eq!(
        unsq(11, vec![("axes", Attr::Ints(vec![0, 3]))], None)
            .unwrap()
            .shape(),
        &[1, 2, 3, 1]
    );
    assert_eq!(
        unsq(11, vec![("axes", Attr::Ints(vec![-1]))], None)
            .unwrap()
            .shape(),
        &[2, 3, 1]
    );
    assert_eq!(
        unsq(13, vec![], Some(&[1, 0])).unwrap().shape(),
        &[1, 1, 2, 3],
        "unsorted axes"
    );
    assert_eq!(
        unsq(13, vec![], Some(&[-1, 1])).unwrap().shape(),
        &[2, 1, 3, 1]
    );
    assert!(unsq(13, vec![], Some(&[0, 0])).is_err(), "repeated axis");
    assert!(unsq(13, vec![], Some(&[5])).is_err(), "out of range");
    assert!(unsq(11, vec![], None).is_err(), "no axes");
    let t = unsq(13, vec![], Some(&[2])).unwrap();
    assert_exact(
        &t.to_f64_vec(),
        &y.to_f64_vec(),
        "unsqueeze keeps the order",
    );

    // opset 13 axes that are not constants are an unsupported form.
    let mut b = ModelBuilder::new(13);
    b.input_fixed("x", ElemType::F32, &[2, 3]);
    b.input_fixed("axes", ElemType::I64, &[1]);
    b.node("Unsqueeze", "dyn_unsq", &["x", "axes"], &["y"]);
    b.output("y");
    let specs = [
        TensorSpec {
            name: "x".into(),
            dtype: ElemType::F32,
            shape: vec![2, 3],
        },
        TensorSpec {
            name: "axes".into(),
            dtype: ElemType::I64,
            shape: vec![1],
        },
    ];
    let e = optimize(&b.build(), &specs).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { op_type, node, .. } if op_type == "Unsqueeze" && node == "dyn_unsq"),
        "{e:?}"
    );
}

/// Hand-written transpose of a row-major tensor.
fn ref_transpose(x: &[f64], shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let vals = (0..numel(&out))
        .map(|li| {
            let idx = unravel(li, &out);
            x[idx
                .iter()
                .zip(perm)
                .map(|(&i, &p)| i * strides[p])
                .sum::<usize>()]
        })
        .collect();
    (out, vals)
}

#[test]
fn transpose_default_and_explicit_perm() {
    let shape = [2, 3, 4];
    let x = iota(&shape);
    let xv = x.to_f64_vec();
    let t = fold(13, "Transpose", vec![], vec![x.clone()]);
    let (ws, wv) = ref_transpose(&xv, &shape, &[2, 1, 0]);
    assert_eq!(t.shape(), ws.as_slice(), "default reverses the axes");
    assert_exact(&t.to_f64_vec(), &wv, "default perm");
    for perm in [[0usize, 1, 2], [1, 0, 2], [2, 0, 1], [0, 2, 1], [1, 2, 0]] {
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let t = fold(
            13,
            "Transpose",
            vec![("perm", Attr::Ints(p))],
            vec![x.clone()],
        );
        let (ws, wv) = ref_transpose(&xv, &shape, &perm);
        assert_eq!(t.shape(), ws.as_slice(), "{perm:?}");
        assert_exact(&t.to_f64_vec(), &wv, &format!("perm {perm:?}"));
    }
    // Integer and bool tensors, and a 2-D matrix.
    let t = fold(
        13,
        "Transpose",
        vec![],
        vec![ti64(&[2, 3], &[1, 2, 3, 4, 5, 6])],
    );
    assert_eq!(
        (t.shape().to_vec(), t.to_i64_vec()),
        (vec![3, 2], vec![1, 4, 2, 5, 3, 6])
    );
    let t = fold(
        13,
        "Transpose",
        vec![],
        vec![tbool(&[1, 2], &[true, false])],
    );
    assert_eq!(
        (t.shape().to_vec(), t.to_i64_vec()),
        (vec![2, 1], vec![1, 0])
    );
    for bad in [vec![0, 0, 1], vec![0, 1], vec![0, 1, 3]] {
        let r = try_fold(
            13,
            "Transpose",
            vec![("perm", Attr::Ints(bad.clone()))],
            vec![Some(x.clone())],
        );
        assert!(
            matches!(r, Err(Error::ShapeMismatch { .. })),
            "{bad:?}: {r:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Matrix products.

/// numpy matmul by hand: promotions of 1-D operands and batch broadcasting.
fn ref_np_matmul(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let a2: Vec<usize> = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.to_vec()
    };
    let b2: Vec<usize> = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let rank = ab.len().max(bb.len());
    let mut batch = vec![1; rank];
    for (i, d) in batch.iter_mut().enumerate() {
        let da = if i + ab.len() >= rank {
            ab[i + ab.len() - rank]
        } else {
            1
        };
        let db = if i + bb.len() >= rank {
            bb[i + bb.len() - rank]
        } else {
            1
        };
        *d = da.max(db);
    }
    let ia = broadcast_index(ab, &batch).unwrap();
    let ib = broadcast_index(bb, &batch).unwrap();
    let mut out = Vec::new();
    for g in 0..numel(&batch) {
        let am = &a[ia[g] * m * k..(ia[g] + 1) * m * k];
        let bm = &b[ib[g] * k * n..(ib[g] + 1) * k * n];
        out.extend(ref_matmul(am, bm, m, k, n));
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (shape, out)
}

#[test]
fn matmul_promotions_and_batch_broadcasting() {
    let mut rng = XorShift::new(42);
    for (sa, sb) in [
        (vec![4], vec![4]),
        (vec![4], vec![4, 3]),
        (vec![2, 4], vec![4]),
        (vec![2, 4], vec![4, 3]),
        (vec![5, 2, 4], vec![4, 3]),
        (vec![2, 4], vec![5, 4, 3]),
        (vec![2, 1, 3, 4], vec![5, 4, 2]),
        (vec![3, 1, 2], vec![1, 2, 3]),
        (vec![4], vec![2, 4, 3]),
        (vec![2, 3, 4], vec![4]),
    ] {
        let a = rng.eighths(numel(&sa), 2);
        let b = rng.eighths(numel(&sb), 2);
        let t = fold(13, "MatMul", vec![], vec![tf32(&sa, &a), tf32(&sb, &b)]);
        let (ws, wv) = ref_np_matmul(&a, &sa, &b, &sb);
        assert_eq!(t.shape(), ws.as_slice(), "{sa:?} x {sb:?}");
        assert_exact(&t.to_f64_vec(), &wv, &format!("{sa:?} x {sb:?}"));
    }
    // Results are rounded to the operand type.
    let t = fold(
        13,
        "MatMul",
        vec![],
        vec![
            tf32(&[1, 2], &[1.0, 1.0]),
            tf32(&[2, 1], &[16777216.0, 1.0]),
        ],
    );
    assert_exact(&t.to_f64_vec(), &[16777216.0], "float32 rounding");
    let t = fold(
        13,
        "MatMul",
        vec![],
        vec![tf16(&[1, 2], &[1.0, 1.0]), tf16(&[2, 1], &[2048.0, 1.0])],
    );
    assert_eq!(t.dtype, ElemType::F16);
    assert_exact(&t.to_f64_vec(), &[2048.0], "float16 rounding");
    for (sa, sb) in [
        (vec![2, 3], vec![4, 2]),
        (vec![2, 2, 3], vec![3, 3, 2]),
        (vec![3], vec![4]),
    ] {
        let r = try_fold(13, "MatMul", vec![], vec![Some(iota(&sa)), Some(iota(&sb))]);
        assert!(
            matches!(r, Err(Error::ShapeMismatch { .. })),
            "{sa:?} x {sb:?}: {r:?}"
        );
    }
}

fn gemm_cases(transposes: &[(bool, bool)]) {
    let mut rng = XorShift::new(7);
    let (m, k, n) = (3, 4, 5);
    for &(ta, tb) in transposes {
        {
            for c_shape in [
                None,
                Some(vec![n]),
                Some(vec![m, 1]),
                Some(vec![]),
                Some(vec![m, n]),
                Some(vec![1, n]),
            ] {
                for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, 2.0), (-1.0, 0.0)] {
                    let a = rng.eighths(m * k, 2);
                    let b = rng.eighths(k * n, 2);
                    let a_t = if ta {
                        tf32(&[k, m], &ref_transpose2(&a, m, k))
                    } else {
                        tf32(&[m, k], &a)
                    };
                    let b_t = if tb {
                        tf32(&[n, k], &ref_transpose2(&b, k, n))
                    } else {
                        tf32(&[k, n], &b)
                    };
                    let mut ins = vec![Some(a_t), Some(b_t)];
                    let c = c_shape.as_ref().map(|s| rng.eighths(numel(s), 2));
                    if let (Some(s), Some(c)) = (&c_shape, &c) {
                        ins.push(Some(tf32(s, c)));
                    }
                    let attrs = vec![
                        ("transA", Attr::Int(ta as i64)),
                        ("transB", Attr::Int(tb as i64)),
                        ("alpha", Attr::Float(alpha)),
                        ("beta", Attr::Float(beta)),
                    ];
                    let what =
                        format!("transA {ta} transB {tb} C {c_shape:?} alpha {alpha} beta {beta}");
                    let t =
                        try_fold(13, "Gemm", attrs, ins).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(t.shape(), &[m, n], "{what}");
                    let ab = ref_matmul(&a, &b, m, k, n);
                    let want: Vec<f64> = (0..m * n)
                        .map(|i| {
                            let cv = match (&c_shape, &c) {
                                (Some(s), Some(c)) => c[broadcast_index(s, &[m, n]).unwrap()[i]],
                                _ => 0.0,
                            };
                            r32(alpha as f64 * ab[i] + beta as f64 * cv)
                        })
                        .collect();
                    assert_exact(&t.to_f64_vec(), &want, &what);
                }
            }
        }
    }
}

#[test]
fn gemm_with_scales_and_broadcast_c() {
    gemm_cases(&[(false, false)]);
    // C that does not broadcast to [M, N].
    let r = try_fold(
        13,
        "Gemm",
        vec![],
        vec![
            Some(iota(&[3, 4])),
            Some(iota(&[4, 5])),
            Some(iota(&[3, 5, 1])),
        ],
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let r = try_fold(
        13,
        "Gemm",
        vec![],
        vec![
            Some(iota(&[3, 4])),
            Some(iota(&[4, 5])),
            Some(iota(&[2, 5])),
        ],
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let r = try_fold(
        13,
        "Gemm",
        vec![("transA", Attr::Int(1))],
        vec![Some(iota(&[3, 4])), Some(iota(&[4, 5]))],
    );
    assert!(
        matches!(r, Err(Error::ShapeMismatch { .. })),
        "inner dimensions: {r:?}"
    );
}

#[test]
fn gemm_with_transposes_folds() {
    gemm_cases(&[(true, false)]);
    gemm_cases(&[(false, true)]);
    gemm_cases(&[(true, true)]);
}

// ---------------------------------------------------------------------------
// Constant, Shape, Size.

#[test]
fn constant_value_forms() {
    let c = |attrs: Vec<(&str, Attr)>| try_fold(13, "Constant", attrs, vec![]);
    let t = c(vec![("value", Attr::Tensor(ti32(&[2], &[3, -4])))]).unwrap();
    assert_eq!(
        (t.dtype, t.shape().to_vec(), t.to_i64_vec()),
        (ElemType::I32, vec![2], vec![3, -4])
    );
    let t = c(vec![("value_float", Attr::Float(0.1))]).unwrap();
    assert_eq!((t.dtype, t.shape().len()), (ElemType::F32, 0));
    assert_exact(&t.to_f64_vec(), &[f(0.1) as f64], "value_float");
    let t = c(vec![("value_int", Attr::Int(-9))]).unwrap();
    assert_eq!(
        (t.dtype, t.shape().len(), t.to_i64_vec()),
        (ElemType::I64, 0, vec![-9])
    );
    let t = c(vec![("value_floats", Attr::Floats(vec![1.5, -2.0, 0.1]))]).unwrap();
    assert_eq!((t.dtype, t.shape().to_vec()), (ElemType::F32, vec![3]));
    assert_exact(&t.to_f64_vec(), &[1.5, -2.0, f(0.1) as f64], "value_floats");
    let t = c(vec![("value_ints", Attr::Ints(vec![7, 8]))]).unwrap();
    assert_eq!(
        (t.dtype, t.shape().to_vec(), t.to_i64_vec()),
        (ElemType::I64, vec![2], vec![7, 8])
    );
    let e = c(vec![("value_string", Attr::String("hi".into()))]).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { op_type, .. } if op_type == "Constant"),
        "{e:?}"
    );
    let e = c(vec![("value_strings", Attr::Strings(vec!["a".into()]))]).unwrap_err();
    assert!(matches!(&e, Error::Unsupported { .. }), "{e:?}");
    let e = c(vec![]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { node, .. } if node == "n"),
        "{e:?}"
    );
}

#[test]
fn shape_with_start_and_end_and_size() {
    let x = iota(&[2, 3, 4]);
    let shape = |attrs: Vec<(&str, Attr)>| {
        let t = fold(15, "Shape", attrs, vec![x.clone()]);
        assert_eq!(t.dtype, ElemType::I64);
        assert_eq!(t.shape().len(), 1);
        t.to_i64_vec()
    };
    assert_eq!(shape(vec![]), vec![2, 3, 4]);
    assert_eq!(shape(vec![("start", Attr::Int(1))]), vec![3, 4]);
    assert_eq!(shape(vec![("end", Attr::Int(-1))]), vec![2, 3]);
    assert_eq!(
        shape(vec![("start", Attr::Int(-2)), ("end", Attr::Int(-1))]),
        vec![3]
    );
    assert_eq!(
        shape(vec![("start", Attr::Int(-10))]),
        vec![2, 3, 4],
        "start clamps to 0"
    );
    assert_eq!(
        shape(vec![("end", Attr::Int(10))]),
        vec![2, 3, 4],
        "end clamps to the rank"
    );
    assert_eq!(shape(vec![("start", Attr::Int(5))]), Vec::<i64>::new());
    assert_eq!(
        shape(vec![("start", Attr::Int(2)), ("end", Attr::Int(1))]),
        Vec::<i64>::new()
    );
    assert_eq!(
        shape(vec![("start", Attr::Int(0)), ("end", Attr::Int(0))]),
        Vec::<i64>::new()
    );
    let t = fold(13, "Size", vec![], vec![x]);
    assert_eq!(
        (t.dtype, t.shape().len(), t.to_i64_vec()),
        (ElemType::I64, 0, vec![24])
    );
    let t = fold(13, "Size", vec![], vec![tf32(&[0, 5], &[])]);
    assert_eq!(t.to_i64_vec(), vec![0]);
    let t = fold(13, "Shape", vec![], vec![tf32(&[], &[1.0])]);
    assert_eq!(t.shape(), &[0], "shape of a scalar is empty");
}
