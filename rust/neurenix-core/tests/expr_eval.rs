//! Host evaluation of element-wise expressions (`expr::eval::eval_host`), the
//! error function, and the postfix form: every `ExprOp` against
//! hand-computed values.

use crate::common::*;
use neurenix_core::dtype::ElemType;
use neurenix_core::expr::eval::{erf, eval_host, gelu_erf, gelu_tanh};
use neurenix_core::expr::{Expr, ExprOp};
use neurenix_core::tensor::{Data, HostTensor};

use ExprOp as E;

fn id(v: f64) -> f64 {
    v
}

fn eval(e: &Expr, inputs: &[&HostTensor], shape: &[usize]) -> Data {
    eval_host(e, inputs, shape, &id).unwrap_or_else(|err| panic!("eval of {e:?} failed: {err}"))
}

fn floats(d: Data) -> Vec<f64> {
    match d {
        Data::Float(a) => a.iter().copied().collect(),
        other => panic!("expected float data, got {other:?}"),
    }
}
fn ints(d: Data) -> Vec<i64> {
    match d {
        Data::Int(a) => a.iter().copied().collect(),
        other => panic!("expected int data, got {other:?}"),
    }
}
fn bools(d: Data) -> Vec<bool> {
    match d {
        Data::Bool(a) => a.iter().copied().collect(),
        other => panic!("expected bool data, got {other:?}"),
    }
}

fn x0() -> Expr {
    Expr::input(0)
}
fn x1() -> Expr {
    Expr::input(1)
}
fn x2() -> Expr {
    Expr::input(2)
}

/// Applies a unary float op to a 1-D float64 tensor.
fn un(op: ExprOp, xs: &[f64]) -> Vec<f64> {
    let t = tf64(&[xs.len()], xs);
    floats(eval(&Expr::un(op, x0(), false), &[&t], &[xs.len()]))
}
fn par(op: ExprOp, xs: &[f64], imm: f64, imm2: f64) -> Vec<f64> {
    let t = tf64(&[xs.len()], xs);
    floats(eval(
        &Expr::param(op, x0(), imm, imm2, false),
        &[&t],
        &[xs.len()],
    ))
}
fn binf(op: ExprOp, a: &[f64], b: &[f64]) -> Vec<f64> {
    let (ta, tb) = (tf64(&[a.len()], a), tf64(&[b.len()], b));
    floats(eval(
        &Expr::bin(op, x0(), x1(), false),
        &[&ta, &tb],
        &[a.len()],
    ))
}
fn bini(op: ExprOp, a: &[i64], b: &[i64]) -> Vec<i64> {
    let (ta, tb) = (ti64(&[a.len()], a), ti64(&[b.len()], b));
    ints(eval(
        &Expr::bin(op, x0(), x1(), false),
        &[&ta, &tb],
        &[a.len()],
    ))
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

#[test]
fn the_op_table_is_complete_and_in_code_order() {
    for (i, op) in ALL_EXPR_OPS.iter().enumerate() {
        assert_eq!(*op as usize, i, "{op:?}");
    }
    assert_eq!(ALL_EXPR_OPS.len(), ExprOp::ALL.len());
    assert_eq!(E::GeluTanh.name(), "gelu_tanh");
    assert_eq!(E::HardSigmoid.name(), "hard_sigmoid");
    assert_eq!(E::Fmod.name(), "fmod");
}

#[test]
fn leaves_inputs_and_constants() {
    let t = tf64(&[3], &[1.0, 2.0, 3.0]);
    // Input broadcast along a new leading axis and along a size-1 axis.
    assert_exact(
        &floats(eval(&x0(), &[&t], &[2, 3])),
        &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0],
        "input [3] -> [2,3]",
    );
    let c = tf64(&[2, 1], &[5.0, 7.0]);
    assert_exact(
        &floats(eval(&x0(), &[&c], &[2, 3])),
        &[5.0, 5.0, 5.0, 7.0, 7.0, 7.0],
        "input [2,1] -> [2,3]",
    );
    let s = tf64(&[], &[4.0]);
    assert_exact(
        &floats(eval(&x0(), &[&s], &[2])),
        &[4.0, 4.0],
        "scalar input",
    );
    assert_exact(
        &floats(eval(&Expr::constf(2.5, false), &[], &[2, 2])),
        &[2.5; 4],
        "const_f",
    );
    assert_eq!(
        ints(eval(&Expr::consti(-7), &[], &[3])),
        vec![-7, -7, -7],
        "const_i"
    );
    // Int and bool inputs keep their kind.
    let i = ti32(&[2], &[3, -4]);
    assert_eq!(ints(eval(&x0(), &[&i], &[2])), vec![3, -4]);
    let b = tbool(&[2], &[true, false]);
    assert_eq!(bools(eval(&x0(), &[&b], &[2])), vec![true, false]);
}

#[test]
fn float_unary_operations() {
    let tol = 1e-15;
    assert_exact(&un(E::Neg, &[1.5, -2.0, 0.0]), &[-1.5, 2.0, 0.0], "neg");
    assert_exact(&un(E::Abs, &[-1.5, 2.0, -0.0]), &[1.5, 2.0, 0.0], "abs");
    assert_exact(
        &un(E::Relu, &[-1.0, 0.0, 2.5, NAN]),
        &[0.0, 0.0, 2.5, NAN],
        "relu keeps NaN",
    );
    assert_close(
        &un(E::Sigmoid, &[0.0, 3f64.ln(), -3f64.ln()]),
        &[0.5, 0.75, 0.25],
        tol,
        "sigmoid",
    );
    assert_exact(
        &un(E::Sigmoid, &[-1000.0, 1000.0]),
        &[0.0, 1.0],
        "sigmoid saturates",
    );
    assert_close(
        &un(E::Tanh, &[0.5, -0.5]),
        &[0.46211715726000974, -0.46211715726000974],
        tol,
        "tanh",
    );
    assert_close(
        &un(E::Exp, &[1.0, 0.0]),
        &[std::f64::consts::E, 1.0],
        tol,
        "exp",
    );
    assert_close(
        &un(E::Log, &[std::f64::consts::E, 1.0]),
        &[1.0, 0.0],
        tol,
        "log",
    );
    assert_exact(&un(E::Log, &[0.0, -1.0]), &[-INF, NAN], "log edge cases");
    assert_close(
        &un(E::Sqrt, &[2.0, 16.0]),
        &[std::f64::consts::SQRT_2, 4.0],
        tol,
        "sqrt",
    );
    assert_exact(&un(E::Sqrt, &[-1.0]), &[NAN], "sqrt(-1)");
    assert_close(&un(E::Rsqrt, &[4.0, 0.25]), &[0.5, 2.0], tol, "rsqrt");
    assert_exact(
        &un(E::Reciprocal, &[4.0, -0.5, 0.0]),
        &[0.25, -2.0, INF],
        "reciprocal",
    );
    assert_close(
        &un(E::Erf, &[0.5, -1.0]),
        &[0.5204998778130465, -0.8427007929497149],
        1e-14,
        "erf",
    );
    // gelu_erf(x) = x Phi(x); Phi(1) = 0.8413447460685429, Phi(-1) = 0.15865525393145707.
    // (0 is left out: see `erf_of_zero_returns`.)
    assert_close(
        &un(E::GeluErf, &[1.0, -1.0]),
        &[0.8413447460685429, -0.15865525393145707],
        1e-14,
        "gelu_erf",
    );
    // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)).
    let g1 = 0.5 * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * 1.044715f64).tanh());
    assert_close(
        &un(E::GeluTanh, &[1.0, 0.0]),
        &[g1, 0.0],
        1e-15,
        "gelu_tanh",
    );
    assert_close(&[g1], &[0.8411919906082768], 1e-15, "gelu_tanh(1) literal");
    assert_exact(&un(E::Floor, &[-1.5, 1.5, 2.0]), &[-2.0, 1.0, 2.0], "floor");
    assert_exact(&un(E::Ceil, &[-1.5, 1.5, 2.0]), &[-1.0, 2.0, 2.0], "ceil");
    assert_exact(
        &un(E::Round, &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6]),
        &[0.0, 2.0, 2.0, 0.0, -2.0, -2.0, 2.0, 3.0, -3.0],
        "round half to even",
    );
    assert_exact(
        &un(E::Sign, &[-3.0, 0.0, 7.5, NAN]),
        &[-1.0, 0.0, 1.0, NAN],
        "sign",
    );
    assert_close(
        &un(E::Sin, &[std::f64::consts::FRAC_PI_6, 0.0]),
        &[0.5, 0.0],
        1e-15,
        "sin",
    );
    assert_close(
        &un(E::Cos, &[std::f64::consts::FRAC_PI_3, 0.0]),
        &[0.5, 1.0],
        1e-15,
        "cos",
    );
    assert_exact(&un(E::Square, &[-3.0, 0.5]), &[9.0, 0.25], "square");
    assert_close(
        &un(E::Softplus, &[0.0, 100.0, -100.0, 1.0]),
        &[
            std::f64::consts::LN_2,
            100.0,
            3.720075976020836e-44,
            1.3132616875182228,
        ],
        1e-15,
        "softplus",
    );
    assert_rel(
        &un(E::Softplus, &[-100.0]),
        &[3.720075976020836e-44],
        1e-14,
        "softplus underflow region",
    );
    assert_exact(
        &un(E::Softsign, &[3.0, -1.0, 0.0]),
        &[0.75, -0.5, 0.0],
        "softsign",
    );
}

#[test]
fn parametrised_unary_operations() {
    assert_exact(
        &par(E::Clamp, &[-5.0, 0.0, 1.5, 5.0], -1.0, 2.0),
        &[-1.0, 0.0, 1.5, 2.0],
        "clamp",
    );
    assert_exact(
        &par(E::LeakyRelu, &[-2.0, 0.0, 3.0], 0.1, 0.0),
        &[-2.0 * 0.1, 0.0, 3.0],
        "leaky_relu",
    );
    assert_close(
        &par(E::Elu, &[-1.0, 0.0, 2.0], 2.0, 0.0),
        &[-1.2642411176571153, 0.0, 2.0],
        1e-15,
        "elu",
    );
    assert_close(
        &par(E::HardSigmoid, &[-5.0, 0.0, 1.0, 5.0], 0.2, 0.5),
        &[0.0, 0.5, 0.7, 1.0],
        1e-15,
        "hard_sigmoid",
    );
}

#[test]
fn integer_unary_operations_stay_integer() {
    let t = ti64(&[4], &[-3, 0, 5, -1]);
    let ev = |op| ints(eval(&Expr::un(op, x0(), false), &[&t], &[4]));
    assert_eq!(ev(E::Neg), vec![3, 0, -5, 1]);
    assert_eq!(ev(E::Abs), vec![3, 0, 5, 1]);
    assert_eq!(ev(E::Relu), vec![0, 0, 5, 0]);
    assert_eq!(ev(E::Sign), vec![-1, 0, 1, -1]);
    assert_eq!(ev(E::Square), vec![9, 0, 25, 1]);
}

#[test]
fn logic_and_classification() {
    let b = tbool(&[4], &[true, false, true, false]);
    let c = tbool(&[4], &[true, true, false, false]);
    assert_eq!(
        bools(eval(&Expr::un(E::Not, x0(), false), &[&b], &[4])),
        vec![false, true, false, true]
    );
    let lg = |op| bools(eval(&Expr::bin(op, x0(), x1(), false), &[&b, &c], &[4]));
    assert_eq!(lg(E::And), vec![true, false, false, false]);
    assert_eq!(lg(E::Or), vec![true, true, true, false]);
    assert_eq!(lg(E::Xor), vec![false, true, true, false]);
    let f = tf64(&[4], &[NAN, INF, -INF, 1.0]);
    assert_eq!(
        bools(eval(&Expr::un(E::IsNan, x0(), false), &[&f], &[4])),
        vec![true, false, false, false]
    );
    assert_eq!(
        bools(eval(&Expr::un(E::IsInf, x0(), false), &[&f], &[4])),
        vec![false, true, true, false]
    );
}

#[test]
fn casts() {
    let f = tf64(&[6], &[0.1, -1.7, 2.9, 3e9, -3e9, NAN]);
    let cf32 = floats(eval(&Expr::un(E::CastF32, x0(), false), &[&f], &[6]));
    assert_exact(
        &cf32[..5],
        &[
            0.1f32 as f64,
            -1.7f32 as f64,
            2.9f32 as f64,
            3e9f32 as f64,
            -3e9f32 as f64,
        ],
        "cast_f32",
    );
    let cf16 = floats(eval(&Expr::un(E::CastF16, x0(), false), &[&f], &[6]));
    // 0.1 -> 0x2E66 = 0.0999755859375; 3e9 overflows half.
    assert_exact(
        &cf16[..5],
        &[0.0999755859375, -1.7001953125, 2.900390625, INF, -INF],
        "cast_f16",
    );
    let ci = ints(eval(&Expr::un(E::CastI32, x0(), false), &[&f], &[6]));
    assert_eq!(
        &ci[..5],
        &[0, -1, 2, i32::MAX as i64, i32::MIN as i64],
        "cast_i32 truncates and saturates"
    );
    let big = ti64(&[3], &[(1i64 << 32) + 5, -1, 1 << 31]);
    assert_eq!(
        ints(eval(&Expr::un(E::CastI32, x0(), false), &[&big], &[3])),
        vec![5, -1, i32::MIN as i64],
        "cast_i32 of int wraps"
    );
    let bl = tbool(&[2], &[true, false]);
    assert_eq!(
        ints(eval(&Expr::un(E::CastI32, x0(), false), &[&bl], &[2])),
        vec![1, 0]
    );
    assert_exact(
        &floats(eval(&Expr::un(E::CastF32, x0(), false), &[&bl], &[2])),
        &[1.0, 0.0],
        "bool -> f32",
    );
    let z = tf64(&[5], &[0.0, -0.0, 2.0, NAN, -1e-30]);
    assert_eq!(
        bools(eval(&Expr::un(E::CastBool, x0(), false), &[&z], &[5])),
        vec![false, false, true, true, true],
        "cast_bool of floats"
    );
    let zi = ti64(&[3], &[0, 5, -1]);
    assert_eq!(
        bools(eval(&Expr::un(E::CastBool, x0(), false), &[&zi], &[3])),
        vec![false, true, true]
    );
}

#[test]
fn float_binary_operations() {
    let a = [6.0, -7.5, 2.0, 0.0, 1.0];
    let b = [4.0, 2.0, 10.0, 0.0, -0.0];
    assert_exact(&binf(E::Add, &a, &b), &[10.0, -5.5, 12.0, 0.0, 1.0], "add");
    assert_exact(&binf(E::Sub, &a, &b), &[2.0, -9.5, -8.0, 0.0, 1.0], "sub");
    assert_exact(
        &binf(E::Mul, &a, &b),
        &[24.0, -15.0, 20.0, 0.0, -0.0],
        "mul",
    );
    assert_exact(&binf(E::Div, &a, &b), &[1.5, -3.75, 0.2, NAN, -INF], "div");
    assert_exact(
        &binf(E::Pow, &[2.0, 9.0, -2.0, 0.0], &[10.0, 0.5, 3.0, 0.0]),
        &[1024.0, 3.0, -8.0, 1.0],
        "pow",
    );
    // Python-style modulo takes the divisor's sign; fmod the dividend's.
    assert_exact(
        &binf(E::Mod, &[-7.5, 7.5, -7.5, 6.0], &[2.0, -2.0, -2.0, 3.0]),
        &[0.5, -0.5, -1.5, 0.0],
        "mod",
    );
    assert_exact(
        &binf(E::Fmod, &[-7.5, 7.5, -7.5, 6.0], &[2.0, -2.0, -2.0, 3.0]),
        &[-1.5, 1.5, -1.5, 0.0],
        "fmod",
    );
    // Min and Max propagate NaN from either side.
    assert_exact(
        &binf(E::Min, &[1.0, NAN, 3.0, -1.0], &[NAN, 2.0, 1.0, 5.0]),
        &[NAN, NAN, 1.0, -1.0],
        "min",
    );
    assert_exact(
        &binf(E::Max, &[1.0, NAN, 3.0, -1.0], &[NAN, 2.0, 1.0, 5.0]),
        &[NAN, NAN, 3.0, 5.0],
        "max",
    );
}

#[test]
fn integer_binary_operations() {
    assert_eq!(
        bini(E::Add, &[i64::MAX, 2], &[1, 3]),
        vec![i64::MIN, 5],
        "add wraps"
    );
    assert_eq!(bini(E::Sub, &[5, -5], &[7, 7]), vec![-2, -12]);
    assert_eq!(bini(E::Mul, &[6, -4], &[7, 3]), vec![42, -12]);
    // Division truncates toward zero; by zero gives 0.
    assert_eq!(
        bini(E::Div, &[7, -7, 7, -7, 5], &[2, 2, -2, -2, 0]),
        vec![3, -3, -3, 3, 0],
        "div"
    );
    assert_eq!(
        bini(E::Pow, &[2, 3, -2], &[10, 0, 3]),
        vec![1024, 1, -8],
        "pow"
    );
    assert_eq!(bini(E::Min, &[1, -5], &[0, 3]), vec![0, -5]);
    assert_eq!(bini(E::Max, &[1, -5], &[0, 3]), vec![1, 3]);
    assert_eq!(
        bini(E::Mod, &[-7, 7, -7, 7, 5], &[2, -2, -2, 2, 0]),
        vec![1, -1, -1, 1, 0],
        "python mod"
    );
    assert_eq!(
        bini(E::Fmod, &[-7, 7, -7, 7, 5], &[2, -2, -2, 2, 0]),
        vec![-1, 1, -1, 1, 0],
        "c fmod"
    );
    // Mixed int and float operands compute in float.
    let (ti, tf) = (ti64(&[2], &[3, 4]), tf64(&[2], &[0.5, 0.25]));
    assert_exact(
        &floats(eval(
            &Expr::bin(E::Mul, x0(), x1(), false),
            &[&ti, &tf],
            &[2],
        )),
        &[1.5, 1.0],
        "int * float",
    );
}

#[test]
fn comparisons() {
    let cmpf = |op, a: &[f64], b: &[f64]| {
        let (ta, tb) = (tf64(&[a.len()], a), tf64(&[b.len()], b));
        bools(eval(
            &Expr::bin(op, x0(), x1(), false),
            &[&ta, &tb],
            &[a.len()],
        ))
    };
    let a = [1.0, 2.0, 3.0, NAN, NAN];
    let b = [2.0, 2.0, 2.0, 1.0, NAN];
    assert_eq!(cmpf(E::Eq, &a, &b), vec![false, true, false, false, false]);
    assert_eq!(cmpf(E::Lt, &a, &b), vec![true, false, false, false, false]);
    assert_eq!(cmpf(E::Le, &a, &b), vec![true, true, false, false, false]);
    assert_eq!(cmpf(E::Gt, &a, &b), vec![false, false, true, false, false]);
    assert_eq!(cmpf(E::Ge, &a, &b), vec![false, true, true, false, false]);
    let (ia, ib) = (ti64(&[3], &[1, 2, 3]), ti64(&[3], &[2, 2, 2]));
    let cmpi = |op| bools(eval(&Expr::bin(op, x0(), x1(), false), &[&ia, &ib], &[3]));
    assert_eq!(cmpi(E::Eq), vec![false, true, false]);
    assert_eq!(cmpi(E::Lt), vec![true, false, false]);
    assert_eq!(cmpi(E::Le), vec![true, true, false]);
    assert_eq!(cmpi(E::Gt), vec![false, false, true]);
    assert_eq!(cmpi(E::Ge), vec![false, true, true]);
    let (ba, bb) = (
        tbool(&[4], &[false, false, true, true]),
        tbool(&[4], &[false, true, false, true]),
    );
    let cmpb = |op| bools(eval(&Expr::bin(op, x0(), x1(), false), &[&ba, &bb], &[4]));
    assert_eq!(cmpb(E::Eq), vec![true, false, false, true]);
    assert_eq!(cmpb(E::Lt), vec![false, true, false, false]);
    assert_eq!(cmpb(E::Gt), vec![false, false, true, false]);
}

#[test]
fn select() {
    let c = tbool(&[2, 2], &[true, false, false, true]);
    let a = tf64(&[2], &[1.0, 2.0]);
    let b = tf64(&[2, 1], &[-1.0, -2.0]);
    let e = Expr::select(x0(), x1(), x2(), false);
    assert_exact(
        &floats(eval(&e, &[&c, &a, &b], &[2, 2])),
        &[1.0, -1.0, -2.0, 2.0],
        "select with broadcasting",
    );
    let ia = ti64(&[2, 2], &[1, 2, 3, 4]);
    let ib = ti64(&[], &[0]);
    assert_eq!(
        ints(eval(&e, &[&c, &ia, &ib], &[2, 2])),
        vec![1, 0, 0, 4],
        "select of ints"
    );
    let ba = tbool(&[2, 2], &[true; 4]);
    let bb = tbool(&[2, 2], &[false; 4]);
    assert_eq!(
        bools(eval(&e, &[&c, &ba, &bb], &[2, 2])),
        vec![true, false, false, true],
        "select of bools"
    );
}

#[test]
fn rounding_applies_to_every_float_intermediate() {
    let a = tf64(&[1], &[1.0]);
    let b = tf64(&[1], &[2f64.powi(-11)]);
    let sum = Expr::bin(E::Add, x0(), x1(), false);
    assert_exact(
        &floats(eval(&sum, &[&a, &b], &[1])),
        &[1.00048828125],
        "exact sum",
    );
    let h = |v: f64| r16(v);
    let got = floats(eval_host(&sum, &[&a, &b], &[1], &h).unwrap());
    assert_exact(&got, &[1.0], "half sum ties to even");
    // (a + b) - a: the intermediate rounding loses b in half precision.
    let diff = Expr::bin(E::Sub, sum.clone(), x0(), false);
    assert_exact(
        &floats(eval(&diff, &[&a, &b], &[1])),
        &[2f64.powi(-11)],
        "exact difference",
    );
    assert_exact(
        &floats(eval_host(&diff, &[&a, &b], &[1], &h).unwrap()),
        &[0.0],
        "half difference",
    );
    // Float32 rounding of a constant leaf.
    let f = |v: f64| r32(v);
    assert_exact(
        &floats(eval_host(&Expr::constf(0.1, false), &[], &[1], &f).unwrap()),
        &[0.1f32 as f64],
        "const",
    );
    // Ints are never rounded.
    let i = ti64(&[1], &[16_777_217]);
    assert_eq!(
        ints(eval_host(&x0(), &[&i], &[1], &f).unwrap()),
        vec![16_777_217]
    );
}

#[test]
fn malformed_expressions_are_errors_not_panics() {
    let f = tf64(&[2], &[1.0, 2.0]);
    let b = tbool(&[2], &[true, false]);
    assert!(
        eval_host(&Expr::un(E::Not, x0(), false), &[&f], &[2], &id).is_err(),
        "not of float"
    );
    assert!(
        eval_host(&Expr::bin(E::And, x0(), x0(), false), &[&f], &[2], &id).is_err(),
        "and of floats"
    );
    assert!(
        eval_host(&Expr::select(x0(), x0(), x0(), false), &[&f], &[2], &id).is_err(),
        "float condition"
    );
    assert!(
        eval_host(&Expr::input(3), &[&f], &[2], &id).is_err(),
        "operand out of range"
    );
    let wide = tf64(&[3], &[1.0, 2.0, 3.0]);
    assert!(
        eval_host(&x0(), &[&wide], &[2], &id).is_err(),
        "shape that does not broadcast"
    );
    assert!(eval_host(&Expr::bin(E::Or, x0(), x0(), false), &[&b], &[2], &id).is_ok());
}

/// High-precision values of erf (mpmath, 40 digits, rounded to 17).
/// (0 is left out: see `erf_of_zero_returns`.)
const ERF_TABLE: &[(f64, f64)] = &[
    (1e-8, 1.1283791670955125e-8),
    (0.01, 0.011283415555849617),
    (0.1, 0.11246291601828489),
    (0.25, 0.27632639016823693),
    (0.5, 0.5204998778130465),
    (0.75, 0.7111556336535151),
    (1.0, 0.8427007929497149),
    (1.25, 0.9229001282564582),
    (1.5, 0.9661051464753107),
    (2.0, 0.9953222650189527),
    (2.4, 0.9993114861033549),
    (2.49, 0.9995707121322661),
    (2.5, 0.999593047982555),
    (2.51, 0.9996142945182757),
    (3.0, 0.9999779095030014),
    (3.5, 0.9999992569016276),
    (4.0, 0.9999999845827421),
    (5.0, 0.9999999999984626),
    (5.9, 0.9999999999999999),
    (6.0, 1.0),
];

#[test]
fn erf_matches_high_precision_values() {
    for &(x, want) in ERF_TABLE {
        let got = erf(x);
        assert!(
            (got - want).abs() <= 1e-14,
            "erf({x}) = {got:e}, want {want:e} (diff {:e})",
            got - want
        );
        let neg = erf(-x);
        assert!(
            (neg + want).abs() <= 1e-14,
            "erf(-{x}) = {neg:e}, want {:e}",
            -want
        );
    }
    // Relative accuracy near zero, where erf(x) ~ 2x/sqrt(pi).
    let got = erf(1e-8);
    assert!(
        (got / 1.1283791670955126e-8 - 1.0).abs() < 1e-14,
        "erf(1e-8) = {got:e}"
    );
    assert_eq!(erf(INF), 1.0);
    assert_eq!(erf(-INF), -1.0);
    assert_eq!(erf(30.0), 1.0);
    assert!(erf(NAN).is_nan());
    // Monotone across the branch boundaries.
    let mut x = 0.001;
    let mut prev = erf(x);
    while x < 7.0 {
        x += 0.001;
        let y = erf(x);
        assert!(y >= prev, "erf not monotone at {x}: {y} < {prev}");
        prev = y;
    }
}

/// Runs `f` on a helper thread; fails (instead of hanging) when it does not
/// return within `secs` seconds.
fn with_timeout<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not return within {secs} s"))
}

#[test]
fn erf_of_zero_returns() {
    assert_eq!(with_timeout(2, "erf(0.0)", || erf(0.0)), 0.0);
    assert_eq!(with_timeout(2, "erf(-0.0)", || erf(-0.0)), 0.0);
    assert_eq!(
        with_timeout(2, "erf(1e-310)", || erf(1e-310)),
        1e-310 * 2.0 / std::f64::consts::PI.sqrt()
    );
    assert_eq!(with_timeout(2, "gelu_erf(0.0)", || gelu_erf(0.0)), 0.0);
}

#[test]
fn erf_of_tiny_but_normal_arguments_returns() {
    // Just above the range where the stop test underflows.
    let x = 1e-300;
    let got = with_timeout(2, "erf(1e-300)", move || erf(x));
    assert!((got / (x * 2.0 / std::f64::consts::PI.sqrt()) - 1.0).abs() < 1e-15);
}

#[test]
fn erf_agrees_with_an_independent_quadrature() {
    let mut rng = XorShift::new(17);
    for _ in 0..200 {
        let x = rng.uniform(-6.5, 6.5);
        let (got, want) = (erf(x), erf_ref(x));
        assert!(
            (got - want).abs() <= 1e-11,
            "erf({x}) = {got}, quadrature {want}"
        );
    }
}

#[test]
fn gelu_functions() {
    // gelu_erf(x) = x * Phi(x) with Phi(2) = 0.9772498680518208.
    assert!((gelu_erf(2.0) - 2.0 * 0.9772498680518208).abs() < 1e-15);
    assert!((gelu_erf(-2.0) + 2.0 * (1.0 - 0.9772498680518208)).abs() < 1e-15);
    let t = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    };
    for x in [-3.0, -0.5, 0.0, 0.7, 2.0, 10.0] {
        assert!((gelu_tanh(x) - t(x)).abs() < 1e-15, "gelu_tanh({x})");
    }
}

#[test]
fn postfix_form_and_operand_remapping() {
    // (in0 + exp(in1)) * 2  ->  in0 in1 exp add const mul
    let mut e = Expr::bin(
        E::Mul,
        Expr::bin(E::Add, x0(), Expr::un(E::Exp, x1(), true), false),
        Expr::constf(2.0, false),
        true,
    );
    assert_eq!(e.size(), 6);
    let flat = e.flatten();
    let ops: Vec<u16> = flat.iter().map(|i| i.op as u16).collect();
    assert_eq!(
        ops,
        vec![
            E::Input as u16,
            E::Input as u16,
            E::Exp as u16,
            E::Add as u16,
            E::ConstF as u16,
            E::Mul as u16
        ]
    );
    assert_eq!((flat[0].arg, flat[1].arg), (0, 1));
    assert!(
        flat[2].half && !flat[3].half && flat[5].half,
        "half flags travel with their instruction"
    );
    assert_eq!(flat[4].imm, 2.0);
    e.remap_inputs(&|i| i + 3);
    let flat = e.flatten();
    assert_eq!((flat[0].arg, flat[1].arg), (3, 4));
    // The postfix program evaluates like the tree (checked with the test
    // backend's interpreter).
    let a = DevT {
        dtype: neurenix_core::dtype::DeviceType::F32,
        shape: vec![2],
        data: vec![1.0, 2.0],
        ipu: 0,
    };
    let b = DevT {
        dtype: neurenix_core::dtype::DeviceType::F32,
        shape: vec![2],
        data: vec![0.0, 1.0],
        ipu: 0,
    };
    let tree = Expr::bin(
        E::Mul,
        Expr::bin(E::Add, x0(), Expr::un(E::Exp, x1(), false), false),
        Expr::constf(2.0, false),
        false,
    );
    let (v, kind) = eval_postfix(&tree.flatten(), &[&a, &b], &[2]).unwrap();
    assert_eq!(kind, "float");
    assert_close(
        &v,
        &[4.0, 2.0 * (2.0 + std::f64::consts::E)],
        1e-7,
        "postfix evaluation",
    );
    let host = floats(eval(
        &tree,
        &[&tf64(&[2], &[1.0, 2.0]), &tf64(&[2], &[0.0, 1.0])],
        &[2],
    ));
    assert_close(&host, &v, 1e-7, "tree evaluation");
    let _ = ElemType::F32;
}
