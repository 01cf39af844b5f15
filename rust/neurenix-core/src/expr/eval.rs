//! Host evaluation of expressions, for constant folding. Floats are computed
//! in f64 and rounded once at the end to the declared type by the caller,
//! which gives the correctly rounded float32 result for the basic operations.

use ndarray::{ArrayD, IxDyn, Zip};

use super::{Expr, ExprOp};
use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::float8::Overflow;
use crate::tensor::{f64_to_bf16, f64_to_f16, float_to_int, Data, HostTensor};

fn bcast<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> Result<ArrayD<T>> {
    a.broadcast(IxDyn(shape))
        .map(|v| v.to_owned())
        .ok_or_else(|| Error::Internal(format!("cannot broadcast {:?} to {:?}", a.shape(), shape)))
}

pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

pub fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// Error function (Abramowitz-Stegun 7.1.26 is too coarse for float32; this
/// is the series/continued-fraction pair, accurate to ~1e-15).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    let r = if ax < 2.5 {
        // Maclaurin series.
        let mut sum = ax;
        let mut term = ax;
        let x2 = ax * ax;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if ax < 6.0 {
        // erfc continued fraction (Lentz).
        let tiny = 1e-300;
        let mut f = ax;
        let mut c = ax;
        let mut d = 0.0;
        for i in 1..200 {
            let an = i as f64 / 2.0;
            d = ax + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = ax + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt())
    } else {
        1.0
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Python's %: the sign of the divisor, a zero result included (ONNX Mod 28).
fn py_mod_f(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r == 0.0 {
        0f64.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

fn unary_f(op: ExprOp, x: f64, imm: f64, imm2: f64) -> f64 {
    match op {
        ExprOp::Neg => -x,
        ExprOp::Abs => x.abs(),
        ExprOp::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        ExprOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        ExprOp::Tanh => x.tanh(),
        ExprOp::Exp => x.exp(),
        ExprOp::Log => x.ln(),
        ExprOp::Sqrt => x.sqrt(),
        ExprOp::Rsqrt => 1.0 / x.sqrt(),
        ExprOp::Reciprocal => 1.0 / x,
        ExprOp::Erf => erf(x),
        ExprOp::GeluErf => gelu_erf(x),
        ExprOp::GeluTanh => gelu_tanh(x),
        ExprOp::Floor => x.floor(),
        ExprOp::Ceil => x.ceil(),
        ExprOp::Round => x.round_ties_even(),
        ExprOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        ExprOp::Sin => x.sin(),
        ExprOp::Cos => x.cos(),
        ExprOp::Square => x * x,
        ExprOp::Softplus => {
            if x > 0.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        }
        ExprOp::Softsign => x / (1.0 + x.abs()),
        ExprOp::Clamp => x.max(imm).min(imm2),
        ExprOp::LeakyRelu => {
            if x >= 0.0 {
                x
            } else {
                imm * x
            }
        }
        ExprOp::Elu => {
            if x >= 0.0 {
                x
            } else {
                imm * (x.exp() - 1.0)
            }
        }
        ExprOp::HardSigmoid => (imm * x + imm2).clamp(0.0, 1.0),
        ExprOp::RoundBf16 => f64_to_bf16(x).to_f64(),
        ExprOp::RoundF8 => match ElemType::from_onnx(imm as i32).and_then(ElemType::float8) {
            Some(f) => {
                let overflow = if imm2 != 0.0 {
                    Overflow::Saturate
                } else {
                    Overflow::Overflow
                };
                f.round(x, overflow)
            }
            None => f64::NAN,
        },
        _ => f64::NAN,
    }
}

fn int_div(a: i64, b: i64) -> i64 {
    if b == 0 {
        0
    } else {
        a.wrapping_div(b)
    }
}

/// Evaluates `e` over host inputs broadcast to `shape`. `round` rounds float
/// intermediates (the declared float type of the node).
pub fn eval_host(
    e: &Expr,
    inputs: &[&HostTensor],
    shape: &[usize],
    round: &dyn Fn(f64) -> f64,
) -> Result<Data> {
    use ExprOp::*;
    let to_f = |d: Data| -> ArrayD<f64> {
        match d {
            Data::Float(a) => a,
            Data::Int(a) => a.mapv(|v| v as f64),
            Data::Bool(a) => a.mapv(|v| v as i64 as f64),
        }
    };
    let args: Vec<Data> = e
        .args
        .iter()
        .map(|a| eval_host(a, inputs, shape, round))
        .collect::<Result<Vec<_>>>()?;
    let out = match e.op {
        Input => {
            let t = inputs
                .get(e.input as usize)
                .ok_or_else(|| Error::Internal("expression input out of range".into()))?;
            match &t.data {
                Data::Float(a) => Data::Float(bcast(a, shape)?),
                Data::Int(a) => Data::Int(bcast(a, shape)?),
                Data::Bool(a) => Data::Bool(bcast(a, shape)?),
            }
        }
        ConstF => Data::Float(ArrayD::from_elem(IxDyn(shape), e.imm)),
        // Random draws happen on the device; an empty range is its low end.
        RandomUniform if e.imm == e.imm2 => Data::Float(ArrayD::from_elem(IxDyn(shape), e.imm)),
        RandomUniform => {
            return Err(Error::Internal(
                "random numbers are drawn on the device, not folded on the host".into(),
            ))
        }
        ConstI => Data::Int(ArrayD::from_elem(IxDyn(shape), e.imm as i64)),
        CastF32 | CastF16 => {
            let a = to_f(args.into_iter().next().unwrap());
            let f: fn(f64) -> f64 = if e.op == CastF16 {
                |v| f64_to_f16(v).to_f64()
            } else {
                |v| v as f32 as f64
            };
            Data::Float(a.mapv(f))
        }
        CastI32 => match args.into_iter().next().unwrap() {
            Data::Float(a) => Data::Int(a.mapv(|v| float_to_int(ElemType::I32, v))),
            Data::Int(a) => Data::Int(a.mapv(|v| v as i32 as i64)),
            Data::Bool(a) => Data::Int(a.mapv(|v| v as i64)),
        },
        CastBool => match args.into_iter().next().unwrap() {
            Data::Float(a) => Data::Bool(a.mapv(|v| v != 0.0)),
            Data::Int(a) => Data::Bool(a.mapv(|v| v != 0)),
            Data::Bool(a) => Data::Bool(a),
        },
        Not => match args.into_iter().next().unwrap() {
            Data::Bool(a) => Data::Bool(a.mapv(|v| !v)),
            _ => return Err(Error::Internal("not of a non-bool".into())),
        },
        IsNan => Data::Bool(to_f(args.into_iter().next().unwrap()).mapv(f64::is_nan)),
        IsInf => Data::Bool(to_f(args.into_iter().next().unwrap()).mapv(f64::is_infinite)),
        Neg | Abs | Relu | Sigmoid | Tanh | Exp | Log | Sqrt | Rsqrt | Reciprocal | Erf
        | GeluErf | GeluTanh | Floor | Ceil | Round | Sign | Sin | Cos | Square | Softplus
        | Softsign | Clamp | LeakyRelu | Elu | HardSigmoid | RoundBf16 | RoundF8 => {
            match args.into_iter().next().unwrap() {
                Data::Int(a) => Data::Int(a.mapv(|v| match e.op {
                    Neg => v.wrapping_neg(),
                    Abs => v.wrapping_abs(),
                    Relu => v.max(0),
                    Sign => v.signum(),
                    Square => v.wrapping_mul(v),
                    _ => unary_f(e.op, v as f64, e.imm, e.imm2) as i64,
                })),
                d => Data::Float(to_f(d).mapv(|v| unary_f(e.op, v, e.imm, e.imm2))),
            }
        }
        Add | Sub | Mul | Div | DivPow2 | Pow | Min | Max | Mod | Fmod => {
            let mut it = args.into_iter();
            let (a, b) = (it.next().unwrap(), it.next().unwrap());
            match (a, b) {
                (Data::Int(a), Data::Int(b)) => {
                    Data::Int(Zip::from(&a).and(&b).map_collect(|&x, &y| match e.op {
                        Add => x.wrapping_add(y),
                        Sub => x.wrapping_sub(y),
                        Mul => x.wrapping_mul(y),
                        Div | DivPow2 => int_div(x, y),
                        Pow => (x as f64).powf(y as f64) as i64,
                        Min => x.min(y),
                        Max => x.max(y),
                        Mod => {
                            if y == 0 {
                                0
                            } else {
                                let r = x.wrapping_rem(y);
                                if r != 0 && ((r < 0) != (y < 0)) {
                                    r + y
                                } else {
                                    r
                                }
                            }
                        }
                        _ => {
                            if y == 0 {
                                0
                            } else {
                                x.wrapping_rem(y)
                            }
                        }
                    }))
                }
                (a, b) => {
                    let (a, b) = (to_f(a), to_f(b));
                    Data::Float(Zip::from(&a).and(&b).map_collect(|&x, &y| match e.op {
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
                        Mod => py_mod_f(x, y),
                        _ => x % y,
                    }))
                }
            }
        }
        Eq | Lt | Le | Gt | Ge => {
            let mut it = args.into_iter();
            let (a, b) = (it.next().unwrap(), it.next().unwrap());
            let cmp = |o: std::cmp::Ordering| -> bool {
                use std::cmp::Ordering::*;
                match e.op {
                    Eq => o == Equal,
                    Lt => o == Less,
                    Le => o != Greater,
                    Gt => o == Greater,
                    _ => o != Less,
                }
            };
            match (a, b) {
                (Data::Int(a), Data::Int(b)) => {
                    Data::Bool(Zip::from(&a).and(&b).map_collect(|x, y| cmp(x.cmp(y))))
                }
                (Data::Bool(a), Data::Bool(b)) => {
                    Data::Bool(Zip::from(&a).and(&b).map_collect(|x, y| cmp(x.cmp(y))))
                }
                (a, b) => {
                    let (a, b) = (to_f(a), to_f(b));
                    Data::Bool(
                        Zip::from(&a)
                            .and(&b)
                            .map_collect(|x, y| x.partial_cmp(y).map(cmp).unwrap_or(false)),
                    )
                }
            }
        }
        And | Or | Xor => {
            let mut it = args.into_iter();
            match (it.next().unwrap(), it.next().unwrap()) {
                (Data::Bool(a), Data::Bool(b)) => {
                    Data::Bool(Zip::from(&a).and(&b).map_collect(|&x, &y| match e.op {
                        And => x && y,
                        Or => x || y,
                        _ => x != y,
                    }))
                }
                _ => return Err(Error::Internal("logical op on non-bool".into())),
            }
        }
        Select => {
            let mut it = args.into_iter();
            let c = match it.next().unwrap() {
                Data::Bool(c) => c,
                _ => return Err(Error::Internal("select condition is not bool".into())),
            };
            match (it.next().unwrap(), it.next().unwrap()) {
                (Data::Int(a), Data::Int(b)) => Data::Int(
                    Zip::from(&c)
                        .and(&a)
                        .and(&b)
                        .map_collect(|&c, &x, &y| if c { x } else { y }),
                ),
                (Data::Bool(a), Data::Bool(b)) => Data::Bool(
                    Zip::from(&c)
                        .and(&a)
                        .and(&b)
                        .map_collect(|&c, &x, &y| if c { x } else { y }),
                ),
                (a, b) => {
                    let (a, b) = (to_f(a), to_f(b));
                    Data::Float(
                        Zip::from(&c)
                            .and(&a)
                            .and(&b)
                            .map_collect(|&c, &x, &y| if c { x } else { y }),
                    )
                }
            }
        }
    };
    Ok(match out {
        Data::Float(a) => Data::Float(a.mapv(round)),
        other => other,
    })
}
