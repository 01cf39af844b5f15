//! A small reference interpreter of the backend primitives' element
//! arithmetic, in f64, written independently of the crate's own host
//! evaluation: the test backend computes with it.

use neurenix_core::dtype::DeviceType;
use neurenix_core::error::{Error, Result};
use neurenix_core::expr::{ExprInstr, ExprOp};

use super::check::{numel, r16, r32, rbf16, rf8};
use super::reference::erf_ref;

/// Every expression operation, in code order.
pub const ALL_EXPR_OPS: [ExprOp; 58] = {
    use ExprOp::*;
    [
        Input,
        ConstF,
        ConstI,
        Neg,
        Abs,
        Relu,
        Sigmoid,
        Tanh,
        Exp,
        Log,
        Sqrt,
        Rsqrt,
        Reciprocal,
        Erf,
        GeluErf,
        GeluTanh,
        Floor,
        Ceil,
        Round,
        Sign,
        Sin,
        Cos,
        Not,
        IsNan,
        IsInf,
        Square,
        Softplus,
        Softsign,
        CastF32,
        CastF16,
        CastI32,
        CastBool,
        Add,
        Sub,
        Mul,
        Div,
        Pow,
        Min,
        Max,
        Mod,
        Fmod,
        Eq,
        Lt,
        Le,
        Gt,
        Ge,
        And,
        Or,
        Xor,
        Select,
        Clamp,
        LeakyRelu,
        Elu,
        HardSigmoid,
        RoundBf16,
        RoundF8,
        DivPow2,
        RandomUniform,
    ]
};

pub fn expr_op(code: u16) -> Option<ExprOp> {
    ALL_EXPR_OPS.get(code as usize).copied()
}

/// A device tensor of the test backend: values held as f64, already rounded
/// to `dtype`.
#[derive(Debug, Clone)]
pub struct DevT {
    pub dtype: DeviceType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
    pub ipu: u32,
}

/// An error of the test backend.
pub fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::Internal(format!("test backend: {}", msg.into())))
}

/// Rounds a value to what tile memory of `dt` holds.
pub fn store(dt: DeviceType, v: f64) -> f64 {
    match dt {
        DeviceType::F32 => r32(v),
        DeviceType::F16 => r16(v),
        DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => {
            panic!("the interpreter holds no float8 tensors")
        }
        DeviceType::I32 => {
            // Values reaching int32 memory must already be integers in range.
            (v as i64) as i32 as f64
        }
        DeviceType::Bool => {
            if v != 0.0 {
                1.0
            } else {
                0.0
            }
        }
    }
}

/// For each element of `out` (row-major), the row-major index of the element
/// of a tensor of shape `inp` that numpy broadcasting reads there.
pub fn broadcast_index(inp: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    if inp.len() > out.len() {
        return None;
    }
    let lead = out.len() - inp.len();
    for (i, &d) in inp.iter().enumerate() {
        if d != 1 && d != out[lead + i] {
            return None;
        }
    }
    let n = numel(out);
    let mut res = Vec::with_capacity(n);
    let mut idx = vec![0usize; out.len()];
    for _ in 0..n {
        let mut li = 0;
        for (i, &d) in inp.iter().enumerate() {
            li = li * d + if d == 1 { 0 } else { idx[lead + i] };
        }
        res.push(li);
        for ax in (0..out.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < out[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Some(res)
}

/// Multi-index of a row-major linear index.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for ax in (0..shape.len()).rev() {
        idx[ax] = i % shape[ax];
        i /= shape[ax];
    }
    idx
}

#[derive(Debug, Clone)]
enum Val {
    F(Vec<f64>),
    I(Vec<i64>),
    B(Vec<bool>),
}

impl Val {
    fn kind(&self) -> &'static str {
        match self {
            Val::F(_) => "float",
            Val::I(_) => "int",
            Val::B(_) => "bool",
        }
    }
}

fn wrap32(v: i64) -> i64 {
    v as i32 as i64
}

fn py_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r == 0.0 {
        0.0f64.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

/// The float unary operations, evaluated in f64.
fn float_unary(op: ExprOp, x: f64, imm: f64, imm2: f64) -> Option<f64> {
    use ExprOp::*;
    Some(match op {
        Neg => -x,
        Abs => x.abs(),
        Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Tanh => x.tanh(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Reciprocal => 1.0 / x,
        Erf => erf_ref(x),
        GeluErf => 0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2)),
        GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => {
            let f = x.floor();
            let d = x - f;
            if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
                f + 1.0
            } else {
                f
            }
        }
        Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        Sin => x.sin(),
        Cos => x.cos(),
        Square => x * x,
        Softplus => {
            if x > 0.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        }
        Softsign => x / (1.0 + x.abs()),
        Clamp => {
            if x < imm {
                imm
            } else if x > imm2 {
                imm2
            } else {
                x
            }
        }
        LeakyRelu => {
            if x >= 0.0 {
                x
            } else {
                imm * x
            }
        }
        Elu => {
            if x >= 0.0 {
                x
            } else {
                imm * (x.exp() - 1.0)
            }
        }
        HardSigmoid => (imm * x + imm2).max(0.0).min(1.0),
        RoundBf16 => rbf16(x),
        RoundF8 => rf8(x, imm as i32, imm2 != 0.0),
        _ => return None,
    })
}

/// Evaluates a postfix expression over operand tensors broadcast to `shape`.
pub fn eval_postfix(
    expr: &[ExprInstr],
    operands: &[&DevT],
    shape: &[usize],
) -> Result<(Vec<f64>, &'static str)> {
    use ExprOp::*;
    let n = numel(shape);
    let mut stack: Vec<Val> = Vec::new();
    for (pc, ins) in expr.iter().enumerate() {
        let Some(op) = expr_op(ins.op as u16) else {
            return fail(format!("unknown expression code {:?}", ins.op));
        };
        let rh = |v: f64| if ins.half { r16(v) } else { v };
        let arity = match op {
            Input | ConstF | ConstI | RandomUniform => 0,
            Add | Sub | Mul | Div | DivPow2 | Pow | Min | Max | Mod | Fmod | Eq | Lt | Le | Gt
            | Ge | And | Or | Xor => 2,
            Select => 3,
            _ => 1,
        };
        if stack.len() < arity {
            return fail(format!("stack underflow at instruction {pc} ({op:?})"));
        }
        let mut args: Vec<Val> = stack.split_off(stack.len() - arity);
        let res = match op {
            Input => {
                let Some(t) = operands.get(ins.arg as usize) else {
                    return fail(format!(
                        "operand {} out of range ({} operands)",
                        ins.arg,
                        operands.len()
                    ));
                };
                let Some(map) = broadcast_index(&t.shape, shape) else {
                    return fail(format!(
                        "operand shape {:?} does not broadcast to {:?}",
                        t.shape, shape
                    ));
                };
                match t.dtype {
                    DeviceType::F32
                    | DeviceType::F16
                    | DeviceType::F8E4M3FNUZ
                    | DeviceType::F8E5M2FNUZ => Val::F(map.iter().map(|&i| t.data[i]).collect()),
                    DeviceType::I32 => Val::I(map.iter().map(|&i| t.data[i] as i64).collect()),
                    DeviceType::Bool => Val::B(map.iter().map(|&i| t.data[i] != 0.0).collect()),
                }
            }
            ConstF => Val::F(vec![rh(r32(ins.imm)); n]),
            RandomUniform if ins.imm == ins.imm2 => Val::F(vec![r32(ins.imm); n]),
            RandomUniform => return fail("the interpreter draws no random numbers"),
            ConstI => Val::I(vec![wrap32(ins.imm as i64); n]),
            CastF32 | CastF16 => {
                let v: Vec<f64> = match args.pop().unwrap() {
                    Val::F(v) => v,
                    Val::I(v) => v.into_iter().map(|x| x as f64).collect(),
                    Val::B(v) => v.into_iter().map(|x| x as i64 as f64).collect(),
                };
                let half = op == CastF16 || ins.half;
                Val::F(
                    v.into_iter()
                        .map(|x| if half { r16(x) } else { r32(x) })
                        .collect(),
                )
            }
            CastI32 => match args.pop().unwrap() {
                Val::F(v) => Val::I(
                    v.into_iter()
                        .map(|x| {
                            if x.is_nan() {
                                i32::MIN as i64
                            } else if x >= 2147483647.0 {
                                i32::MAX as i64
                            } else if x <= -2147483648.0 {
                                i32::MIN as i64
                            } else {
                                x.trunc() as i64
                            }
                        })
                        .collect(),
                ),
                Val::I(v) => Val::I(v),
                Val::B(v) => Val::I(v.into_iter().map(|x| x as i64).collect()),
            },
            CastBool => match args.pop().unwrap() {
                Val::F(v) => Val::B(v.into_iter().map(|x| x != 0.0).collect()),
                Val::I(v) => Val::B(v.into_iter().map(|x| x != 0).collect()),
                Val::B(v) => Val::B(v),
            },
            Not => match args.pop().unwrap() {
                Val::B(v) => Val::B(v.into_iter().map(|x| !x).collect()),
                other => return fail(format!("not of a {} operand", other.kind())),
            },
            IsNan | IsInf => match args.pop().unwrap() {
                Val::F(v) => Val::B(
                    v.into_iter()
                        .map(|x| {
                            if op == IsNan {
                                x.is_nan()
                            } else {
                                x.is_infinite()
                            }
                        })
                        .collect(),
                ),
                other => return fail(format!("{op:?} of a {} operand", other.kind())),
            },
            Neg | Abs | Relu | Sign | Square if matches!(args[0], Val::I(_)) => {
                let Val::I(v) = args.pop().unwrap() else {
                    unreachable!()
                };
                Val::I(
                    v.into_iter()
                        .map(|x| {
                            wrap32(match op {
                                Neg => -x,
                                Abs => x.abs(),
                                Relu => x.max(0),
                                Sign => x.signum(),
                                _ => x * x,
                            })
                        })
                        .collect(),
                )
            }
            Add | Sub | Mul | Div | DivPow2 | Pow | Min | Max | Mod | Fmod => {
                match (args.remove(0), args.remove(0)) {
                    (Val::F(a), Val::F(b)) => Val::F(
                        a.iter()
                            .zip(&b)
                            .map(|(&x, &y)| {
                                rh(match op {
                                    Add => x + y,
                                    Sub => x - y,
                                    Mul => x * y,
                                    Div | DivPow2 => x / y,
                                    Pow => x.powf(y),
                                    Min => {
                                        if y < x || y.is_nan() {
                                            y
                                        } else {
                                            x
                                        }
                                    }
                                    Max => {
                                        if y > x || y.is_nan() {
                                            y
                                        } else {
                                            x
                                        }
                                    }
                                    Mod => py_mod(x, y),
                                    _ => x % y,
                                })
                            })
                            .collect(),
                    ),
                    (Val::I(a), Val::I(b)) => Val::I(
                        a.iter()
                            .zip(&b)
                            .map(|(&x, &y)| {
                                wrap32(match op {
                                    Add => x + y,
                                    Sub => x - y,
                                    Mul => x * y,
                                    Div | DivPow2 => {
                                        if y == 0 {
                                            0
                                        } else {
                                            x / y
                                        }
                                    }
                                    Pow => (x as f64).powf(y as f64) as i64,
                                    Min => x.min(y),
                                    Max => x.max(y),
                                    Mod => {
                                        if y == 0 || y == -1 {
                                            0
                                        } else {
                                            let r = x % y;
                                            if r != 0 && ((r < 0) != (y < 0)) {
                                                r + y
                                            } else {
                                                r
                                            }
                                        }
                                    }
                                    _ => {
                                        if y == 0 || y == -1 {
                                            0
                                        } else {
                                            x % y
                                        }
                                    }
                                })
                            })
                            .collect(),
                    ),
                    (a, b) => {
                        return fail(format!("{op:?} of {} and {} operands", a.kind(), b.kind()))
                    }
                }
            }
            Eq | Lt | Le | Gt | Ge => {
                let cmp = |o: Option<std::cmp::Ordering>| -> bool {
                    use std::cmp::Ordering::*;
                    match (op, o) {
                        (_, None) => false,
                        (Eq, Some(o)) => o == Equal,
                        (Lt, Some(o)) => o == Less,
                        (Le, Some(o)) => o != Greater,
                        (Gt, Some(o)) => o == Greater,
                        (_, Some(o)) => o != Less,
                    }
                };
                match (args.remove(0), args.remove(0)) {
                    (Val::F(a), Val::F(b)) => Val::B(
                        a.iter()
                            .zip(&b)
                            .map(|(x, y)| cmp(x.partial_cmp(y)))
                            .collect(),
                    ),
                    (Val::I(a), Val::I(b)) => Val::B(
                        a.iter()
                            .zip(&b)
                            .map(|(x, y)| cmp(x.partial_cmp(y)))
                            .collect(),
                    ),
                    (Val::B(a), Val::B(b)) => Val::B(
                        a.iter()
                            .zip(&b)
                            .map(|(x, y)| cmp(x.partial_cmp(y)))
                            .collect(),
                    ),
                    (a, b) => {
                        return fail(format!("{op:?} of {} and {} operands", a.kind(), b.kind()))
                    }
                }
            }
            And | Or | Xor => match (args.remove(0), args.remove(0)) {
                (Val::B(a), Val::B(b)) => Val::B(
                    a.iter()
                        .zip(&b)
                        .map(|(&x, &y)| match op {
                            And => x && y,
                            Or => x || y,
                            _ => x != y,
                        })
                        .collect(),
                ),
                (a, b) => return fail(format!("{op:?} of {} and {} operands", a.kind(), b.kind())),
            },
            Select => {
                let (c, a, b) = (args.remove(0), args.remove(0), args.remove(0));
                let Val::B(c) = c else {
                    return fail(format!("select condition is {}", c.kind()));
                };
                match (a, b) {
                    (Val::F(a), Val::F(b)) => {
                        Val::F((0..n).map(|i| rh(if c[i] { a[i] } else { b[i] })).collect())
                    }
                    (Val::I(a), Val::I(b)) => {
                        Val::I((0..n).map(|i| if c[i] { a[i] } else { b[i] }).collect())
                    }
                    (Val::B(a), Val::B(b)) => {
                        Val::B((0..n).map(|i| if c[i] { a[i] } else { b[i] }).collect())
                    }
                    (a, b) => {
                        return fail(format!("select of {} and {} operands", a.kind(), b.kind()))
                    }
                }
            }
            _ => match args.pop().unwrap() {
                Val::F(v) => Val::F(
                    v.into_iter()
                        .map(|x| rh(float_unary(op, x, ins.imm, ins.imm2).unwrap()))
                        .collect(),
                ),
                other => return fail(format!("{op:?} of a {} operand", other.kind())),
            },
        };
        stack.push(res);
    }
    if stack.len() != 1 {
        return fail(format!("expression leaves {} values", stack.len()));
    }
    Ok(match stack.pop().unwrap() {
        Val::F(v) => (v, "float"),
        Val::I(v) => (v.into_iter().map(|x| x as f64).collect(), "int"),
        Val::B(v) => (
            v.into_iter().map(|x| if x { 1.0 } else { 0.0 }).collect(),
            "bool",
        ),
    })
}
