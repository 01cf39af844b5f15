//! The test backend itself (tests/common): its reference interpreter of the
//! backend primitives and the device rules it enforces. The lowering tests
//! are only as good as this double, so it is checked against hand-computed
//! values here.

use crate::common::*;
use half::f16;
use neurenix_core::backend::{Backend, MatMulOptions, ReduceFinal, ReduceOp};
use neurenix_core::dtype::DeviceType;
use neurenix_core::expr::{Expr, ExprInstr, ExprOp};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn konst(be: &mut TestBackend, shape: &[usize], v: &[f32], ipu: u32) -> u32 {
    be.add_constant("c", DeviceType::F32, shape, f32_bytes(v), ipu)
        .unwrap()
}

fn mm(dt: DeviceType, ipu: u32) -> MatMulOptions {
    MatMulOptions {
        memory_proportion: 0.6,
        partials: DeviceType::F32,
        out_dtype: dt,
        ipu,
        name: "mm".into(),
        scales: None,
    }
}

fn run_map(
    be: &mut TestBackend,
    e: &Expr,
    ins: &[u32],
    dt: DeviceType,
    shape: &[usize],
) -> neurenix_core::Result<Vec<f64>> {
    let id = be.map(&e.flatten(), ins, dt, shape, 0, "m")?;
    Ok(be.tensors[id as usize].data.clone())
}

#[test]
fn inputs_constants_and_outputs() {
    let mut be = TestBackend::new().feed("x", vec![0.1, 1.0 + 2f64.powi(-11), 3.0]);
    let x = be.add_input("x", DeviceType::F16, &[3], 1).unwrap();
    assert_exact(
        &be.tensors[x as usize].data,
        &[r16(0.1), 1.0, 3.0],
        "inputs are stored in their device type",
    );
    assert_eq!(be.tensors[x as usize].ipu, 1);
    assert!(be.add_input("missing", DeviceType::F32, &[1], 0).is_err());
    assert!(
        be.add_input("x", DeviceType::F32, &[4], 0).is_err(),
        "wrong element count"
    );
    let c = konst(&mut be, &[2], &[1.5, -2.0], 0);
    assert_exact(&be.tensors[c as usize].data, &[1.5, -2.0], "f32 constant");
    let h: Vec<u8> = [0.5f64, 65504.0]
        .iter()
        .flat_map(|v| f16::from_f64(*v).to_le_bytes())
        .collect();
    let hc = be
        .add_constant("h", DeviceType::F16, &[2], h.clone(), 0)
        .unwrap();
    assert_exact(
        &be.tensors[hc as usize].data,
        &[0.5, 65504.0],
        "f16 constant",
    );
    let ic = be
        .add_constant(
            "i",
            DeviceType::I32,
            &[2],
            vec![255, 255, 255, 255, 7, 0, 0, 0],
            0,
        )
        .unwrap();
    assert_exact(&be.tensors[ic as usize].data, &[-1.0, 7.0], "i32 constant");
    let bc = be
        .add_constant("b", DeviceType::Bool, &[3], vec![0, 1, 9], 0)
        .unwrap();
    assert_exact(
        &be.tensors[bc as usize].data,
        &[0.0, 1.0, 1.0],
        "bool constant",
    );
    assert!(be
        .add_constant("bad", DeviceType::F32, &[2], vec![0; 7], 0)
        .is_err());
    be.mark_output(c, "out").unwrap();
    assert_exact(&be.out("out"), &[1.5, -2.0], "output");
    assert_eq!(be.count(Kind::Constant), 4);
    assert_eq!(be.count(Kind::Output), 1);
}

#[test]
fn matmul_is_batched_and_checks_its_operands() {
    let mut be = TestBackend::new();
    // G = 2: [[1,2],[3,4]] x [[1,0],[0,1]] and [[1,1],[1,1]] x [[2,0],[0,3]].
    let a = konst(
        &mut be,
        &[2, 2, 2],
        &[1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0],
        0,
    );
    let b = konst(
        &mut be,
        &[2, 2, 2],
        &[1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 3.0],
        0,
    );
    let y = be.matmul(a, b, &mm(DeviceType::F32, 0)).unwrap();
    assert_eq!(be.tensors[y as usize].shape, vec![2, 2, 2]);
    assert_exact(
        &be.tensors[y as usize].data,
        &[1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 2.0, 3.0],
        "batched matmul",
    );
    // [1, 2, 3] x [1, 3, 1].
    let p = konst(&mut be, &[1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0);
    let q = konst(&mut be, &[1, 3, 1], &[1.0, 1.0, 1.0], 0);
    let y = be.matmul(p, q, &mm(DeviceType::F16, 0)).unwrap();
    assert_exact(&be.tensors[y as usize].data, &[6.0, 15.0], "row sums");
    assert_eq!(be.tensors[y as usize].dtype, DeviceType::F16);
    assert!(
        be.matmul(p, p, &mm(DeviceType::F32, 0)).is_err(),
        "inner dimensions differ"
    );
    assert!(
        be.matmul(a, b, &mm(DeviceType::F32, 1)).is_err(),
        "operands on another IPU"
    );
    let other = konst(&mut be, &[2, 2, 2], &[0.0; 8], 1);
    assert!(
        be.matmul(a, other, &mm(DeviceType::F32, 0)).is_err(),
        "mixed IPUs"
    );
}

#[test]
fn map_broadcasts_rounds_and_type_checks() {
    let mut be = TestBackend::new();
    let a = konst(&mut be, &[2, 1], &[1.0, 2.0], 0);
    let b = konst(&mut be, &[3], &[10.0, 20.0, 30.0], 0);
    let e = Expr::bin(ExprOp::Add, Expr::input(0), Expr::input(1), false);
    assert_exact(
        &run_map(&mut be, &e, &[a, b], DeviceType::F32, &[2, 3]).unwrap(),
        &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0],
        "broadcast add",
    );
    // Half flags round each flagged instruction; half outputs round at the end.
    let one = konst(&mut be, &[1], &[1.0], 0);
    let tiny = konst(&mut be, &[1], &[2f32.powi(-11)], 0);
    let sum_h = Expr::bin(ExprOp::Add, Expr::input(0), Expr::input(1), true);
    let diff = Expr::bin(ExprOp::Sub, sum_h, Expr::input(0), false);
    assert_exact(
        &run_map(&mut be, &diff, &[one, tiny], DeviceType::F32, &[1]).unwrap(),
        &[0.0],
        "half-rounded intermediate",
    );
    let sum = Expr::bin(ExprOp::Add, Expr::input(0), Expr::input(1), false);
    assert_exact(
        &run_map(&mut be, &sum, &[one, tiny], DeviceType::F16, &[1]).unwrap(),
        &[1.0],
        "half output",
    );
    assert_exact(
        &run_map(&mut be, &sum, &[one, tiny], DeviceType::F32, &[1]).unwrap(),
        &[1.00048828125],
        "f32 output",
    );
    // Comparisons give bools; casts convert kinds.
    let lt = Expr::bin(ExprOp::Lt, Expr::input(0), Expr::constf(1.5, false), false);
    assert_exact(
        &run_map(&mut be, &lt, &[a], DeviceType::Bool, &[2, 1]).unwrap(),
        &[1.0, 0.0],
        "lt",
    );
    let ci = Expr::un(ExprOp::CastI32, Expr::constf(-2.7, false), false);
    assert_exact(
        &run_map(&mut be, &ci, &[], DeviceType::I32, &[2]).unwrap(),
        &[-2.0, -2.0],
        "cast_i32",
    );
    let sel = Expr::select(lt.clone(), Expr::input(0), Expr::constf(-1.0, false), false);
    assert_exact(
        &run_map(&mut be, &sel, &[a], DeviceType::F32, &[2, 1]).unwrap(),
        &[1.0, -1.0],
        "select",
    );
    // Integer semantics: division by zero is 0, python modulo.
    let i = be
        .add_constant(
            "i",
            DeviceType::I32,
            &[3],
            vec![7, 0, 0, 0, 249, 255, 255, 255, 5, 0, 0, 0],
            0,
        )
        .unwrap();
    let z = be
        .add_constant(
            "z",
            DeviceType::I32,
            &[3],
            vec![2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
            0,
        )
        .unwrap();
    let div = Expr::bin(ExprOp::Div, Expr::input(0), Expr::input(1), false);
    assert_exact(
        &run_map(&mut be, &div, &[i, z], DeviceType::I32, &[3]).unwrap(),
        &[3.0, -3.0, 0.0],
        "int div",
    );
    let md = Expr::bin(ExprOp::Mod, Expr::input(0), Expr::input(1), false);
    assert_exact(
        &run_map(&mut be, &md, &[i, z], DeviceType::I32, &[3]).unwrap(),
        &[1.0, 1.0, 0.0],
        "int mod",
    );
    // Type errors the device would reject.
    assert!(
        run_map(&mut be, &lt, &[a], DeviceType::F32, &[2, 1]).is_err(),
        "bool result into a float tensor"
    );
    assert!(
        run_map(&mut be, &e, &[a, i], DeviceType::F32, &[2, 3]).is_err(),
        "float + int"
    );
    assert!(
        run_map(
            &mut be,
            &Expr::un(ExprOp::Exp, Expr::input(0), false),
            &[i],
            DeviceType::F32,
            &[3]
        )
        .is_err(),
        "exp of int"
    );
    assert!(run_map(
        &mut be,
        &Expr::un(ExprOp::Not, Expr::input(0), false),
        &[a],
        DeviceType::Bool,
        &[2, 1]
    )
    .is_err());
    assert!(
        run_map(&mut be, &e, &[a, b], DeviceType::F32, &[3, 3]).is_err(),
        "does not broadcast"
    );
    assert!(
        run_map(&mut be, &Expr::input(2), &[a], DeviceType::F32, &[2, 1]).is_err(),
        "operand out of range"
    );
    let bad = [ExprInstr {
        op: ExprOp::Add,
        arg: 0,
        imm: 0.0,
        imm2: 0.0,
        half: false,
    }];
    assert!(
        be.map(&bad, &[], DeviceType::F32, &[1], 0, "bad").is_err(),
        "stack underflow"
    );
    let far = konst(&mut be, &[1], &[1.0], 2);
    assert!(
        run_map(&mut be, &Expr::input(0), &[far], DeviceType::F32, &[1]).is_err(),
        "operand on another IPU"
    );
}

#[test]
fn every_expression_operation_is_interpreted() {
    // One representative evaluation per operation code.
    use ExprOp::*;
    let mut be = TestBackend::new();
    let x = konst(&mut be, &[1], &[0.5], 0);
    let n = konst(&mut be, &[1], &[-2.0], 0);
    let t = be
        .add_constant("t", DeviceType::Bool, &[1], vec![1], 0)
        .unwrap();
    let k = be
        .add_constant("k", DeviceType::I32, &[1], vec![7, 0, 0, 0], 0)
        .unwrap();
    let xi = || Expr::input(0);
    let ni = || Expr::input(1);
    let ti = || Expr::input(2);
    let ki = || Expr::input(3);
    let ins = [x, n, t, k];
    let erf_half = 0.5204998778130465;
    let cases: Vec<(ExprOp, Expr, DeviceType, f64)> = vec![
        (Input, xi(), DeviceType::F32, 0.5),
        (ConstF, Expr::constf(0.25, false), DeviceType::F32, 0.25),
        (ConstI, Expr::consti(-3), DeviceType::I32, -3.0),
        (Neg, Expr::un(Neg, xi(), false), DeviceType::F32, -0.5),
        (Abs, Expr::un(Abs, ni(), false), DeviceType::F32, 2.0),
        (Relu, Expr::un(Relu, ni(), false), DeviceType::F32, 0.0),
        (
            Sigmoid,
            Expr::un(Sigmoid, xi(), false),
            DeviceType::F32,
            1.0 / (1.0 + (-0.5f64).exp()),
        ),
        (
            Tanh,
            Expr::un(Tanh, xi(), false),
            DeviceType::F32,
            0.5f64.tanh(),
        ),
        (
            Exp,
            Expr::un(Exp, xi(), false),
            DeviceType::F32,
            0.5f64.exp(),
        ),
        (
            Log,
            Expr::un(Log, xi(), false),
            DeviceType::F32,
            0.5f64.ln(),
        ),
        (
            Sqrt,
            Expr::un(Sqrt, xi(), false),
            DeviceType::F32,
            0.5f64.sqrt(),
        ),
        (
            Rsqrt,
            Expr::un(Rsqrt, xi(), false),
            DeviceType::F32,
            2f64.sqrt(),
        ),
        (
            Reciprocal,
            Expr::un(Reciprocal, ni(), false),
            DeviceType::F32,
            -0.5,
        ),
        (Erf, Expr::un(Erf, xi(), false), DeviceType::F32, erf_half),
        (
            GeluErf,
            Expr::un(GeluErf, ni(), false),
            DeviceType::F32,
            -2.0 * (1.0 - 0.9772498680518208),
        ),
        (
            GeluTanh,
            Expr::un(GeluTanh, xi(), false),
            DeviceType::F32,
            0.5 * 0.5 * (1.0 + (0.7978845608028654f64 * (0.5 + 0.044715 * 0.125)).tanh()),
        ),
        (Floor, Expr::un(Floor, xi(), false), DeviceType::F32, 0.0),
        (Ceil, Expr::un(Ceil, xi(), false), DeviceType::F32, 1.0),
        (Round, Expr::un(Round, xi(), false), DeviceType::F32, 0.0),
        (Sign, Expr::un(Sign, ni(), false), DeviceType::F32, -1.0),
        (
            Sin,
            Expr::un(Sin, xi(), false),
            DeviceType::F32,
            0.5f64.sin(),
        ),
        (
            Cos,
            Expr::un(Cos, xi(), false),
            DeviceType::F32,
            0.5f64.cos(),
        ),
        (Not, Expr::un(Not, ti(), false), DeviceType::Bool, 0.0),
        (IsNan, Expr::un(IsNan, xi(), false), DeviceType::Bool, 0.0),
        (
            IsInf,
            Expr::un(
                IsInf,
                Expr::un(Reciprocal, Expr::constf(0.0, false), false),
                false,
            ),
            DeviceType::Bool,
            1.0,
        ),
        (Square, Expr::un(Square, ni(), false), DeviceType::F32, 4.0),
        (
            Softplus,
            Expr::un(Softplus, xi(), false),
            DeviceType::F32,
            (1.0 + 0.5f64.exp()).ln(),
        ),
        (
            Softsign,
            Expr::un(Softsign, ni(), false),
            DeviceType::F32,
            -2.0 / 3.0,
        ),
        (
            CastF32,
            Expr::un(CastF32, ki(), false),
            DeviceType::F32,
            7.0,
        ),
        (
            CastF16,
            Expr::un(CastF16, Expr::constf(0.1, false), false),
            DeviceType::F32,
            0.0999755859375,
        ),
        (
            CastI32,
            Expr::un(CastI32, ni(), false),
            DeviceType::I32,
            -2.0,
        ),
        (
            CastBool,
            Expr::un(CastBool, ki(), false),
            DeviceType::Bool,
            1.0,
        ),
        (
            Add,
            Expr::bin(Add, xi(), ni(), false),
            DeviceType::F32,
            -1.5,
        ),
        (Sub, Expr::bin(Sub, xi(), ni(), false), DeviceType::F32, 2.5),
        (
            Mul,
            Expr::bin(Mul, xi(), ni(), false),
            DeviceType::F32,
            -1.0,
        ),
        (
            Div,
            Expr::bin(Div, xi(), ni(), false),
            DeviceType::F32,
            -0.25,
        ),
        (
            Pow,
            Expr::bin(Pow, ni(), Expr::constf(3.0, false), false),
            DeviceType::F32,
            -8.0,
        ),
        (
            Min,
            Expr::bin(Min, xi(), ni(), false),
            DeviceType::F32,
            -2.0,
        ),
        (Max, Expr::bin(Max, xi(), ni(), false), DeviceType::F32, 0.5),
        (
            Mod,
            Expr::bin(Mod, xi(), ni(), false),
            DeviceType::F32,
            -1.5,
        ),
        (
            Fmod,
            Expr::bin(Fmod, xi(), ni(), false),
            DeviceType::F32,
            0.5,
        ),
        (Eq, Expr::bin(Eq, xi(), xi(), false), DeviceType::Bool, 1.0),
        (Lt, Expr::bin(Lt, xi(), ni(), false), DeviceType::Bool, 0.0),
        (Le, Expr::bin(Le, ni(), xi(), false), DeviceType::Bool, 1.0),
        (Gt, Expr::bin(Gt, xi(), ni(), false), DeviceType::Bool, 1.0),
        (Ge, Expr::bin(Ge, xi(), xi(), false), DeviceType::Bool, 1.0),
        (
            And,
            Expr::bin(And, ti(), Expr::un(Not, ti(), false), false),
            DeviceType::Bool,
            0.0,
        ),
        (
            Or,
            Expr::bin(Or, ti(), Expr::un(Not, ti(), false), false),
            DeviceType::Bool,
            1.0,
        ),
        (
            Xor,
            Expr::bin(Xor, ti(), ti(), false),
            DeviceType::Bool,
            0.0,
        ),
        (
            Select,
            Expr::select(ti(), xi(), ni(), false),
            DeviceType::F32,
            0.5,
        ),
        (
            Clamp,
            Expr::param(Clamp, ni(), -1.0, 1.0, false),
            DeviceType::F32,
            -1.0,
        ),
        (
            LeakyRelu,
            Expr::param(LeakyRelu, ni(), 0.5, 0.0, false),
            DeviceType::F32,
            -1.0,
        ),
        (
            Elu,
            Expr::param(Elu, ni(), 2.0, 0.0, false),
            DeviceType::F32,
            2.0 * ((-2.0f64).exp() - 1.0),
        ),
        (
            HardSigmoid,
            Expr::param(HardSigmoid, xi(), 0.5, 0.25, false),
            DeviceType::F32,
            0.5,
        ),
        (
            RoundBf16,
            Expr::un(
                RoundBf16,
                Expr::constf(1.0 + 3.0 * 2f64.powi(-9), false),
                false,
            ),
            DeviceType::F32,
            1.0 + 2f64.powi(-7),
        ),
        (
            RoundF8,
            Expr::param(RoundF8, Expr::constf(1000.0, false), 17.0, 1.0, false),
            DeviceType::F32,
            448.0,
        ),
        (
            RandomUniform,
            // An empty range: its low end.
            Expr::random_uniform(0.25, 0.25),
            DeviceType::F32,
            0.25,
        ),
        (
            DivPow2,
            Expr::bin(
                DivPow2,
                Expr::constf(3.0, false),
                Expr::constf(0.25, false),
                false,
            ),
            DeviceType::F32,
            12.0,
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for (op, e, dt, want) in cases {
        let got =
            run_map(&mut be, &e, &ins, dt, &[1]).unwrap_or_else(|err| panic!("{op:?}: {err}"));
        assert_close(&got, &[store(dt, want)], 1e-7, &format!("{op:?}"));
        seen.insert(op as u16);
    }
    assert_eq!(
        seen.len(),
        ALL_EXPR_OPS.len(),
        "every operation code has a case"
    );
}

#[test]
fn reduce_reshape_rearrange_concat_fill() {
    let mut be = TestBackend::new();
    let x = konst(&mut be, &[2, 3], &[1.0, -2.0, 3.0, 4.0, 5.0, -6.0], 0);
    let red = |be: &mut TestBackend, axes: &[usize], op, fin, scale| {
        let id = be
            .reduce(x, axes, op, fin, scale, DeviceType::F32, 0, "r")
            .unwrap();
        (
            be.tensors[id as usize].shape.clone(),
            be.tensors[id as usize].data.clone(),
        )
    };
    assert_eq!(
        red(&mut be, &[1], ReduceOp::Sum, ReduceFinal::None, 1.0),
        (vec![2], vec![2.0, 3.0])
    );
    assert_eq!(
        red(&mut be, &[0], ReduceOp::Max, ReduceFinal::None, 1.0),
        (vec![3], vec![4.0, 5.0, 3.0])
    );
    assert_eq!(
        red(&mut be, &[0, 1], ReduceOp::Min, ReduceFinal::None, 1.0),
        (vec![], vec![-6.0])
    );
    assert_eq!(
        red(&mut be, &[1], ReduceOp::Prod, ReduceFinal::None, 1.0),
        (vec![2], vec![-6.0, -120.0])
    );
    assert_eq!(
        red(&mut be, &[1], ReduceOp::SumSquare, ReduceFinal::Sqrt, 1.0).1,
        vec![r32(14f64.sqrt()), r32(77f64.sqrt())]
    );
    assert_eq!(
        red(&mut be, &[1], ReduceOp::SumAbs, ReduceFinal::Scale, 0.5).1,
        vec![3.0, 7.5]
    );
    assert_exact(
        &red(&mut be, &[0], ReduceOp::Sum, ReduceFinal::Log, 1.0).1,
        &[r32(5f64.ln()), r32(3f64.ln()), f64::NAN],
        "log",
    );
    assert!(be
        .reduce(
            x,
            &[2],
            ReduceOp::Sum,
            ReduceFinal::None,
            1.0,
            DeviceType::F32,
            0,
            "r"
        )
        .is_err());
    assert!(
        be.reduce(
            x,
            &[0],
            ReduceOp::Sum,
            ReduceFinal::None,
            1.0,
            DeviceType::F32,
            1,
            "r"
        )
        .is_err(),
        "wrong IPU"
    );

    let r = be.reshape(x, &[3, 2]).unwrap();
    assert_eq!(be.tensors[r as usize].shape, vec![3, 2]);
    assert!(be.reshape(x, &[4]).is_err());
    // Transpose as a strided view, and a broadcast with stride 0.
    let t = be.rearrange(x, 0, &[3, 2], &[1, 3], 0, "t").unwrap();
    assert_exact(
        &be.tensors[t as usize].data,
        &[1.0, 4.0, -2.0, 5.0, 3.0, -6.0],
        "transpose view",
    );
    let row = be.rearrange(x, 3, &[2, 3], &[0, 1], 0, "row").unwrap();
    assert_exact(
        &be.tensors[row as usize].data,
        &[4.0, 5.0, -6.0, 4.0, 5.0, -6.0],
        "offset + broadcast",
    );
    assert!(
        be.rearrange(x, 4, &[3], &[1], 0, "oob").is_err(),
        "reads past the end"
    );
    let y = konst(&mut be, &[2, 1], &[7.0, 8.0], 0);
    let c = be.concat(&[x, y], 1, 0, "cat").unwrap();
    assert_eq!(be.tensors[c as usize].shape, vec![2, 4]);
    assert_exact(
        &be.tensors[c as usize].data,
        &[1.0, -2.0, 3.0, 7.0, 4.0, 5.0, -6.0, 8.0],
        "concat axis 1",
    );
    let c0 = be.concat(&[x, x], 0, 0, "cat0").unwrap();
    assert_eq!(be.tensors[c0 as usize].shape, vec![4, 3]);
    assert!(
        be.concat(&[x, y], 0, 0, "bad").is_err(),
        "shapes disagree off the axis"
    );
    let f = be.fill(DeviceType::F16, &[2], 0.1, 1, "f").unwrap();
    assert_exact(&be.tensors[f as usize].data, &[r16(0.1); 2], "fill rounds");
    let moved = be
        .fill(DeviceType::F32, &[2, 3], 1.0, 3, "on_ipu3")
        .unwrap();
    assert_eq!(be.tensors[moved as usize].ipu, 3);
    assert!(be.reshape(moved, &[6]).is_ok());
    assert!(be
        .reduce(
            moved,
            &[0],
            ReduceOp::Sum,
            ReduceFinal::None,
            1.0,
            DeviceType::F32,
            3,
            "r"
        )
        .is_ok());
    let last = be.calls.last().unwrap();
    assert_eq!((last.kind, last.ipu), (Kind::Reduce, 3));
}
