//! Shared helpers of the neurenix-core integration tests:
//!
//! - `XorShift`: a tiny seeded pseudo-random generator (no dependencies).
//! - `TestBackend`: a recording, evaluating implementation of
//!   `neurenix_core::backend::Backend`. Every call is executed eagerly on the
//!   host in f64 (a small reference interpreter of the backend primitives,
//!   written independently of the crate's own host evaluation) and recorded
//!   (kind, IPU, dtype, shape, details) so tests can count and inspect calls.
//!   Values are rounded to their device type when stored (float32, float16,
//!   int32, bool), and instructions flagged `half` round their float results
//!   to binary16, like the simulator's map vertex. The backend enforces the
//!   device rules the compiler must respect: operands of an operation live on
//!   the operation's IPU, operand kinds agree, shapes agree.
//! - `ModelBuilder`: builds IR models by value names.
//! - Host tensor constructors, rounding helpers and comparison asserts.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use half::f16;
use neurenix_core::backend::{Backend, MatMulOptions, ReduceFinal, ReduceOp, TensorId};
use neurenix_core::compile::{lower_model, CompileOptions, Lowered};
use neurenix_core::dtype::{DeviceType, ElemType};
use neurenix_core::error::{Error, Result};
use neurenix_core::expr::{ExprInstr, ExprOp};
use neurenix_core::ir::{Attr, Dim, Graph, Model, Node, Value, ValueId};
use neurenix_core::lower::precision::Precision;
use neurenix_core::passes::InputSpec;
use neurenix_core::tensor::HostTensor;

// ---------------------------------------------------------------------------
// Pseudo-random numbers.

pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    /// Values in [lo, hi) rounded to float32.
    pub fn vec32(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| r32(self.uniform(lo, hi))).collect()
    }
    /// Multiples of 1/8 in [-k, k]: exact in float16 and float32, and so are
    /// small sums of their products.
    pub fn eighths(&mut self, n: usize, k: i64) -> Vec<f64> {
        (0..n)
            .map(|_| (self.below((16 * k + 1) as usize) as i64 - 8 * k) as f64 / 8.0)
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Rounding and comparisons.

pub fn r32(x: f64) -> f64 {
    x as f32 as f64
}

/// Rounds to the nearest binary16 value, ties to even, in one step (written
/// out by hand: `half::f16::from_f64` rounds through float32 on x86 with
/// F16C, which double-rounds some float64 values).
pub fn r16(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let biased = ((x.to_bits() >> 52) & 0x7ff) as i32;
    if biased == 0 {
        return 0.0f64.copysign(x); // f64 subnormals are far below half's range
    }
    let e = (biased - 1023).max(-14);
    let ulp = 2f64.powi(e - 10);
    let r = (x / ulp).round_ties_even() * ulp;
    if r.abs() > 65504.0 {
        f64::INFINITY.copysign(x)
    } else if r == 0.0 {
        0.0f64.copysign(x)
    } else {
        r
    }
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn same_float(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

/// Exact equality (NaN equals NaN; 0.0 equals -0.0).
#[track_caller]
pub fn assert_exact(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same_float(*g, *w),
            "{what}: element {i}: got {g:e}, want {w:e}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// |got - want| <= tol * max(1, |want|), NaNs and infinities must match.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if same_float(*g, *w) {
            continue;
        }
        let ok = g.is_finite() && w.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(
            ok,
            "{what}: element {i}: got {g:e}, want {w:e} (tol {tol:e})\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Relative comparison: |got - want| <= rel * |want| (+ a tiny absolute slack).
#[track_caller]
pub fn assert_rel(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if same_float(*g, *w) {
            continue;
        }
        let ok = g.is_finite() && w.is_finite() && (g - w).abs() <= rel * w.abs() + 1e-300;
        assert!(
            ok,
            "{what}: element {i}: got {g:e}, want {w:e} (rel {rel:e})\n got {got:?}\nwant {want:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Host tensors.

pub fn tfloat(dtype: ElemType, shape: &[usize], v: &[f64]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::float(
        dtype,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v.to_vec()).unwrap(),
    )
}
pub fn tf32(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F32, shape, v)
}
pub fn tf16(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F16, shape, v)
}
pub fn tf64(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F64, shape, v)
}
pub fn tint(dtype: ElemType, shape: &[usize], v: &[i64]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::int(
        dtype,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v.to_vec()).unwrap(),
    )
}
pub fn ti64(shape: &[usize], v: &[i64]) -> HostTensor {
    tint(ElemType::I64, shape, v)
}
pub fn ti32(shape: &[usize], v: &[i64]) -> HostTensor {
    tint(ElemType::I32, shape, v)
}
pub fn tbool(shape: &[usize], v: &[bool]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::boolean(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v.to_vec()).unwrap())
}

// ---------------------------------------------------------------------------
// Models.

pub fn fixed(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Fixed(d)).collect()
}
pub fn sym(name: &str) -> Dim {
    Dim::Symbolic(name.to_string())
}

pub struct ModelBuilder {
    pub g: Graph,
    pub opset: i64,
}

impl ModelBuilder {
    pub fn new(opset: i64) -> ModelBuilder {
        ModelBuilder {
            g: Graph::default(),
            opset,
        }
    }
    /// A declared graph input.
    pub fn input(&mut self, name: &str, dtype: ElemType, dims: Vec<Dim>) -> ValueId {
        let id = self.g.add_value(Value {
            name: name.into(),
            dtype: Some(dtype),
            shape: Some(dims),
            constant: None,
        });
        self.g.inputs.push(id);
        id
    }
    pub fn input_fixed(&mut self, name: &str, dtype: ElemType, shape: &[usize]) -> ValueId {
        self.input(name, dtype, fixed(shape))
    }
    /// An initializer.
    pub fn init(&mut self, name: &str, t: HostTensor) -> ValueId {
        let id = self.g.value_named(name);
        self.g.set_constant(id, t);
        id
    }
    pub fn node(&mut self, op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> usize {
        self.node_a(op, name, inputs, outputs, vec![])
    }
    /// A node; an empty input name is an omitted optional input.
    pub fn node_a(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<(&str, Attr)>,
    ) -> usize {
        self.node_d(op, "", name, inputs, outputs, attrs)
    }
    pub fn node_d(
        &mut self,
        op: &str,
        domain: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<(&str, Attr)>,
    ) -> usize {
        let ins = inputs
            .iter()
            .map(|n| {
                if n.is_empty() {
                    None
                } else {
                    Some(self.g.value_named(n))
                }
            })
            .collect();
        let outs = outputs.iter().map(|n| self.g.value_named(n)).collect();
        let attrs: BTreeMap<String, Attr> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.g.nodes.push(Node {
            name: name.into(),
            op_type: op.into(),
            domain: domain.into(),
            inputs: ins,
            outputs: outs,
            attrs,
        });
        self.g.nodes.len() - 1
    }
    pub fn output(&mut self, name: &str) -> ValueId {
        let id = self.g.value_named(name);
        self.g.outputs.push(id);
        id
    }
    pub fn build(self) -> Model {
        Model {
            graph: self.g,
            opset: self.opset,
            name: "test".into(),
        }
    }
}

/// Prepares a model that has no graph inputs (everything folds) and returns
/// the prepared model.
pub fn optimize_no_inputs(m: &Model) -> Result<Model> {
    neurenix_core::compile::optimize(m, &[]).map(|(m, _)| m)
}

/// Folds one node over constant inputs (`None` = omitted optional input) and
/// returns its outputs. Panics if the node is not folded away.
pub fn try_fold_outputs(
    opset: i64,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Option<HostTensor>>,
    n_out: usize,
) -> Result<Vec<HostTensor>> {
    let mut b = ModelBuilder::new(opset);
    let mut names = Vec::new();
    for (i, t) in inputs.into_iter().enumerate() {
        match t {
            Some(t) => {
                let n = format!("in{i}");
                b.init(&n, t);
                names.push(n);
            }
            None => names.push(String::new()),
        }
    }
    let outs: Vec<String> = (0..n_out).map(|i| format!("out{i}")).collect();
    let in_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.node_a(op, "n", &in_refs, &out_refs, attrs);
    for o in &outs {
        b.output(o);
    }
    let m = optimize_no_inputs(&b.build())?;
    assert!(
        m.graph.nodes.is_empty(),
        "{op} was not folded: {} nodes remain",
        m.graph.nodes.len()
    );
    Ok(outs
        .iter()
        .map(|o| {
            m.graph
                .constant(m.graph.find(o).unwrap())
                .expect("folded output is constant")
                .clone()
        })
        .collect())
}

pub fn try_fold(
    opset: i64,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Option<HostTensor>>,
) -> Result<HostTensor> {
    try_fold_outputs(opset, op, attrs, inputs, 1).map(|mut v| v.remove(0))
}

#[track_caller]
pub fn fold(opset: i64, op: &str, attrs: Vec<(&str, Attr)>, inputs: Vec<HostTensor>) -> HostTensor {
    match try_fold(opset, op, attrs, inputs.into_iter().map(Some).collect()) {
        Ok(t) => t,
        Err(e) => panic!("folding {op} failed: {e}"),
    }
}

// ---------------------------------------------------------------------------
// Every expression operation, in code order.

pub const ALL_EXPR_OPS: [ExprOp; 54] = {
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
    ]
};

pub fn expr_op(code: u16) -> Option<ExprOp> {
    ALL_EXPR_OPS.get(code as usize).copied()
}

/// erf by composite Simpson integration of 2/sqrt(pi) exp(-t^2) (error below
/// 1e-11): slow, simple and independent of the crate's series.
pub fn erf_ref(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs().min(7.0);
    let n = 4000;
    let h = ax / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(ax);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    let r = s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt();
    if x < 0.0 {
        -r
    } else {
        r
    }
}

// ---------------------------------------------------------------------------
// The test backend.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Input,
    Constant,
    MatMul,
    Map,
    Reduce,
    Reshape,
    Rearrange,
    Concat,
    Fill,
    Copy,
    Output,
}

#[derive(Debug, Clone)]
pub enum Detail {
    None,
    Map(Vec<ExprInstr>),
    Reduce {
        axes: Vec<usize>,
        op: ReduceOp,
        fin: ReduceFinal,
        scale: f64,
    },
    MatMul(MatMulOptions),
    Rearrange {
        offset: i64,
        strides: Vec<i64>,
    },
    Concat {
        axis: usize,
    },
    Fill {
        value: f64,
    },
    Copy {
        from: u32,
    },
    Bytes(Vec<u8>),
}

/// One recorded backend call.
#[derive(Debug, Clone)]
pub struct Call {
    pub kind: Kind,
    pub ipu: u32,
    /// Device type of the result (for outputs: of the streamed tensor).
    pub dtype: DeviceType,
    pub shape: Vec<usize>,
    pub name: String,
    pub args: Vec<TensorId>,
    pub result: Option<TensorId>,
    pub detail: Detail,
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

#[derive(Default)]
pub struct TestBackend {
    pub tensors: Vec<DevT>,
    pub calls: Vec<Call>,
    /// Host data of the inputs, by name (in the model's element type).
    pub feeds: HashMap<String, Vec<f64>>,
    /// Streamed outputs in call order.
    pub outputs: Vec<(String, TensorId)>,
}

fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::Internal(format!("test backend: {}", msg.into())))
}

/// Rounds a value to what tile memory of `dt` holds.
pub fn store(dt: DeviceType, v: f64) -> f64 {
    match dt {
        DeviceType::F32 => r32(v),
        DeviceType::F16 => r16(v),
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
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
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
        let Some(op) = expr_op(ins.op) else {
            return fail(format!("unknown expression code {}", ins.op));
        };
        let rh = |v: f64| if ins.half { r16(v) } else { v };
        let arity = match op {
            Input | ConstF | ConstI => 0,
            Add | Sub | Mul | Div | Pow | Min | Max | Mod | Fmod | Eq | Lt | Le | Gt | Ge | And
            | Or | Xor => 2,
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
                    DeviceType::F32 | DeviceType::F16 => {
                        Val::F(map.iter().map(|&i| t.data[i]).collect())
                    }
                    DeviceType::I32 => Val::I(map.iter().map(|&i| t.data[i] as i64).collect()),
                    DeviceType::Bool => Val::B(map.iter().map(|&i| t.data[i] != 0.0).collect()),
                }
            }
            ConstF => Val::F(vec![rh(r32(ins.imm)); n]),
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
            Add | Sub | Mul | Div | Pow | Min | Max | Mod | Fmod => {
                match (args.remove(0), args.remove(0)) {
                    (Val::F(a), Val::F(b)) => Val::F(
                        a.iter()
                            .zip(&b)
                            .map(|(&x, &y)| {
                                rh(match op {
                                    Add => x + y,
                                    Sub => x - y,
                                    Mul => x * y,
                                    Div => x / y,
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
                                    Div => {
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

fn kind_of(dt: DeviceType) -> &'static str {
    match dt {
        DeviceType::F32 | DeviceType::F16 => "float",
        DeviceType::I32 => "int",
        DeviceType::Bool => "bool",
    }
}

/// Decodes device bytes independently of the crate.
pub fn decode(dt: DeviceType, bytes: &[u8]) -> Vec<f64> {
    match dt {
        DeviceType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DeviceType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DeviceType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DeviceType::Bool => bytes
            .iter()
            .map(|&b| if b != 0 { 1.0 } else { 0.0 })
            .collect(),
    }
}

impl TestBackend {
    pub fn new() -> TestBackend {
        TestBackend::default()
    }
    pub fn feed(mut self, name: &str, data: Vec<f64>) -> TestBackend {
        self.feeds.insert(name.into(), data);
        self
    }

    fn get(&self, id: TensorId) -> Result<&DevT> {
        match self.tensors.get(id as usize) {
            Some(t) => Ok(t),
            None => fail(format!("unknown tensor {id}")),
        }
    }
    fn on_ipu(&self, id: TensorId, ipu: u32, what: &str) -> Result<&DevT> {
        let t = self.get(id)?;
        if t.ipu != ipu {
            return fail(format!(
                "{what}: operand {id} lives on IPU {} but the operation runs on IPU {ipu}",
                t.ipu
            ));
        }
        Ok(t)
    }
    fn push(
        &mut self,
        t: DevT,
        kind: Kind,
        name: &str,
        args: Vec<TensorId>,
        detail: Detail,
    ) -> TensorId {
        let id = self.tensors.len() as TensorId;
        self.calls.push(Call {
            kind,
            ipu: t.ipu,
            dtype: t.dtype,
            shape: t.shape.clone(),
            name: name.into(),
            args,
            result: Some(id),
            detail,
        });
        self.tensors.push(t);
        id
    }

    // -- queries used by the tests --------------------------------------------

    pub fn count(&self, kind: Kind) -> usize {
        self.calls.iter().filter(|c| c.kind == kind).count()
    }
    pub fn calls_of(&self, kind: Kind) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.kind == kind).collect()
    }
    pub fn output(&self, name: &str) -> &DevT {
        let (_, id) = self
            .outputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no output named '{name}' (outputs: {:?})", self.outputs));
        &self.tensors[*id as usize]
    }
    pub fn out(&self, name: &str) -> Vec<f64> {
        self.output(name).data.clone()
    }
    /// The IPU each tensor produced by a call of `kind` lives on.
    pub fn ipus_of(&self, kind: Kind) -> Vec<u32> {
        self.calls_of(kind).iter().map(|c| c.ipu).collect()
    }
}

impl Backend for TestBackend {
    fn add_input(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        ipu: u32,
    ) -> Result<TensorId> {
        let Some(data) = self.feeds.get(name) else {
            return fail(format!("no data fed for input '{name}'"));
        };
        if data.len() != numel(shape) {
            return fail(format!(
                "input '{name}' fed {} values for shape {shape:?}",
                data.len()
            ));
        }
        let data = data.iter().map(|&v| store(dtype, v)).collect();
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Input,
            name,
            vec![],
            Detail::None,
        ))
    }

    fn add_constant(
        &mut self,
        name: &str,
        dtype: DeviceType,
        shape: &[usize],
        data: &[u8],
        ipu: u32,
    ) -> Result<TensorId> {
        if data.len() != numel(shape) * dtype.size() {
            return fail(format!(
                "constant '{name}': {} bytes for {dtype} {shape:?}",
                data.len()
            ));
        }
        let vals = decode(dtype, data);
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data: vals,
                ipu,
            },
            Kind::Constant,
            name,
            vec![],
            Detail::Bytes(data.to_vec()),
        ))
    }

    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId> {
        let ta = self.on_ipu(a, p.ipu, &p.name)?.clone();
        let tb = self.on_ipu(b, p.ipu, &p.name)?.clone();
        if ta.shape.len() != 3 || tb.shape.len() != 3 {
            return fail(format!("matmul of {:?} and {:?}", ta.shape, tb.shape));
        }
        let (g, m, k) = (ta.shape[0], ta.shape[1], ta.shape[2]);
        let (g2, k2, n) = (tb.shape[0], tb.shape[1], tb.shape[2]);
        if g != g2 || k != k2 {
            return fail(format!("matmul of {:?} and {:?}", ta.shape, tb.shape));
        }
        if ta.dtype != tb.dtype
            || !ta.dtype.is_float()
            || !p.out_dtype.is_float()
            || !p.partials.is_float()
        {
            return fail(format!(
                "matmul of {} and {} into {}",
                ta.dtype, tb.dtype, p.out_dtype
            ));
        }
        if !(p.memory_proportion > 0.0 && p.memory_proportion <= 1.0) {
            return fail(format!("memory proportion {}", p.memory_proportion));
        }
        let mut out = vec![0.0; g * m * n];
        for gi in 0..g {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for kk in 0..k {
                        s += ta.data[(gi * m + i) * k + kk] * tb.data[(gi * k + kk) * n + j];
                    }
                    out[(gi * m + i) * n + j] = store(p.out_dtype, store(p.partials, s));
                }
            }
        }
        Ok(self.push(
            DevT {
                dtype: p.out_dtype,
                shape: vec![g, m, n],
                data: out,
                ipu: p.ipu,
            },
            Kind::MatMul,
            &p.name.clone(),
            vec![a, b],
            Detail::MatMul(p.clone()),
        ))
    }

    fn map(
        &mut self,
        expr: &[ExprInstr],
        inputs: &[TensorId],
        out_dtype: DeviceType,
        out_shape: &[usize],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let ops: Vec<DevT> = inputs
            .iter()
            .map(|&i| self.on_ipu(i, ipu, name).cloned())
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&DevT> = ops.iter().collect();
        let (vals, kind) = eval_postfix(expr, &refs, out_shape)?;
        if kind != kind_of(out_dtype) {
            return fail(format!(
                "map '{name}' computes a {kind} result but its output is {out_dtype}"
            ));
        }
        let data = vals.into_iter().map(|v| store(out_dtype, v)).collect();
        Ok(self.push(
            DevT {
                dtype: out_dtype,
                shape: out_shape.to_vec(),
                data,
                ipu,
            },
            Kind::Map,
            name,
            inputs.to_vec(),
            Detail::Map(expr.to_vec()),
        ))
    }

    fn reduce(
        &mut self,
        x: TensorId,
        axes: &[usize],
        op: ReduceOp,
        final_op: ReduceFinal,
        scale: f64,
        out_dtype: DeviceType,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let t = self.on_ipu(x, ipu, name)?.clone();
        let rank = t.shape.len();
        if axes.iter().any(|&a| a >= rank) || (1..axes.len()).any(|i| axes[..i].contains(&axes[i]))
        {
            return fail(format!("reduce axes {axes:?} of rank {rank}"));
        }
        let out_shape: Vec<usize> = t
            .shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect();
        let mut groups: Vec<Vec<f64>> = vec![Vec::new(); numel(&out_shape)];
        for (li, &v) in t.data.iter().enumerate() {
            let idx = unravel(li, &t.shape);
            let mut o = 0;
            for (ax, &d) in t.shape.iter().enumerate() {
                if !axes.contains(&ax) {
                    o = o * d + idx[ax];
                }
            }
            groups[o].push(v);
        }
        let data = groups
            .into_iter()
            .map(|g| {
                let r = match op {
                    ReduceOp::Sum => g.iter().sum::<f64>(),
                    ReduceOp::Max => g.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOp::Min => g.iter().cloned().fold(f64::INFINITY, f64::min),
                    ReduceOp::Prod => g.iter().product::<f64>(),
                    ReduceOp::SumSquare => g.iter().map(|v| v * v).sum::<f64>(),
                    ReduceOp::SumAbs => g.iter().map(|v| v.abs()).sum::<f64>(),
                };
                let r = match final_op {
                    ReduceFinal::None => r,
                    ReduceFinal::Scale => r * scale,
                    ReduceFinal::Sqrt => r.sqrt(),
                    ReduceFinal::Log => r.ln(),
                };
                store(out_dtype, r)
            })
            .collect();
        Ok(self.push(
            DevT {
                dtype: out_dtype,
                shape: out_shape,
                data,
                ipu,
            },
            Kind::Reduce,
            name,
            vec![x],
            Detail::Reduce {
                axes: axes.to_vec(),
                op,
                fin: final_op,
                scale,
            },
        ))
    }

    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        let t = self.get(x)?.clone();
        if numel(shape) != numel(&t.shape) {
            return fail(format!("reshape {:?} -> {shape:?}", t.shape));
        }
        Ok(self.push(
            DevT {
                shape: shape.to_vec(),
                ..t
            },
            Kind::Reshape,
            "",
            vec![x],
            Detail::None,
        ))
    }

    fn rearrange(
        &mut self,
        x: TensorId,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let t = self.on_ipu(x, ipu, name)?.clone();
        if strides.len() != shape.len() {
            return fail(format!(
                "rearrange with {} strides for shape {shape:?}",
                strides.len()
            ));
        }
        let mut data = Vec::with_capacity(numel(shape));
        for li in 0..numel(shape) {
            let idx = unravel(li, shape);
            let src: i64 = offset
                + idx
                    .iter()
                    .zip(strides)
                    .map(|(&i, &s)| i as i64 * s)
                    .sum::<i64>();
            if src < 0 || src as usize >= t.data.len() {
                return fail(format!(
                    "rearrange reads element {src} of a {}-element tensor",
                    t.data.len()
                ));
            }
            data.push(t.data[src as usize]);
        }
        Ok(self.push(
            DevT {
                dtype: t.dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Rearrange,
            name,
            vec![x],
            Detail::Rearrange {
                offset,
                strides: strides.to_vec(),
            },
        ))
    }

    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId> {
        let ts: Vec<DevT> = xs
            .iter()
            .map(|&i| self.on_ipu(i, ipu, name).cloned())
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = ts.first() else {
            return fail("concat of nothing");
        };
        let rank = first.shape.len();
        if axis >= rank {
            return fail(format!("concat axis {axis} of rank {rank}"));
        }
        for t in &ts {
            let same_rest = t.shape.len() == rank
                && (0..rank).all(|i| i == axis || t.shape[i] == first.shape[i]);
            if !same_rest || t.dtype != first.dtype {
                return fail(format!(
                    "concat of {} {:?} and {} {:?}",
                    first.dtype, first.shape, t.dtype, t.shape
                ));
            }
        }
        let mut shape = first.shape.clone();
        shape[axis] = ts.iter().map(|t| t.shape[axis]).sum();
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let mut data = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            for t in &ts {
                let blk = t.shape[axis] * inner;
                data.extend_from_slice(&t.data[o * blk..(o + 1) * blk]);
            }
        }
        let dtype = first.dtype;
        Ok(self.push(
            DevT {
                dtype,
                shape,
                data,
                ipu,
            },
            Kind::Concat,
            name,
            xs.to_vec(),
            Detail::Concat { axis },
        ))
    }

    fn fill(
        &mut self,
        dtype: DeviceType,
        shape: &[usize],
        value: f64,
        ipu: u32,
        name: &str,
    ) -> Result<TensorId> {
        let data = vec![store(dtype, value); numel(shape)];
        Ok(self.push(
            DevT {
                dtype,
                shape: shape.to_vec(),
                data,
                ipu,
            },
            Kind::Fill,
            name,
            vec![],
            Detail::Fill { value },
        ))
    }

    fn copy_to_ipu(&mut self, x: TensorId, ipu: u32, name: &str) -> Result<TensorId> {
        let t = self.get(x)?.clone();
        let from = t.ipu;
        Ok(self.push(
            DevT { ipu, ..t },
            Kind::Copy,
            name,
            vec![x],
            Detail::Copy { from },
        ))
    }

    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()> {
        let t = self.get(x)?.clone();
        self.outputs.push((name.to_string(), x));
        self.calls.push(Call {
            kind: Kind::Output,
            ipu: t.ipu,
            dtype: t.dtype,
            shape: t.shape,
            name: name.into(),
            args: vec![x],
            result: None,
            detail: Detail::None,
        });
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Lowering helpers.

pub struct Feed {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn feed(name: &str, dtype: ElemType, shape: &[usize], data: Vec<f64>) -> Feed {
    assert_eq!(
        numel(shape),
        data.len(),
        "feed '{name}' does not fill its shape"
    );
    Feed {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

pub fn copts(precision: Precision, num_ipus: u32) -> CompileOptions {
    CompileOptions {
        precision,
        memory_proportion: 0.6,
        enable_half_partials: false,
        num_ipus,
    }
}

pub fn specs(feeds: &[Feed]) -> Vec<InputSpec> {
    feeds
        .iter()
        .map(|f| InputSpec {
            name: f.name.clone(),
            dtype: f.dtype,
            shape: f.shape.clone(),
        })
        .collect()
}

/// Lowers `model` for `feeds` onto a fresh test backend, which executes it.
pub fn try_lower(
    model: &Model,
    feeds: &[Feed],
    opts: &CompileOptions,
) -> Result<(Lowered, TestBackend)> {
    let mut be = TestBackend::new();
    for f in feeds {
        be.feeds.insert(f.name.clone(), f.data.clone());
    }
    let l = lower_model(model, &specs(feeds), opts, &mut be)?;
    Ok((l, be))
}

#[track_caller]
pub fn lower(model: &Model, feeds: &[Feed], opts: &CompileOptions) -> (Lowered, TestBackend) {
    match try_lower(model, feeds, opts) {
        Ok(r) => r,
        Err(e) => panic!("lowering failed: {e:?}"),
    }
}

// ---------------------------------------------------------------------------
// Hand-written references.

/// Row-major [m, k] x [k, n].
pub fn ref_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                s += a[i * k + kk] * b[kk * n + j];
            }
            out[i * n + j] = s;
        }
    }
    out
}

/// Softmax over the last axis of a row-major [rows, cols] array.
pub fn ref_softmax_rows(x: &[f64], rows: usize, cols: usize, log: bool) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            out[r * cols + c] = if log {
                (row[c] - m) - s.ln()
            } else {
                (row[c] - m).exp() / s
            };
        }
    }
    out
}

/// Row-major transpose of an [r, c] matrix.
pub fn ref_transpose2(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = x[i * c + j];
        }
    }
    out
}

/// Error kind name, for assertion messages.
pub fn kind_name(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::ShapeMismatch { .. } => "ShapeMismatch",
        Error::OutOfMemory { .. } => "OutOfMemory",
        Error::DeviceUnavailable { .. } => "DeviceUnavailable",
        Error::Unsupported { .. } => "Unsupported",
        Error::ModelFormat(_) => "ModelFormat",
        Error::InputMismatch { .. } => "InputMismatch",
        Error::InvalidState(_) => "InvalidState",
        Error::Internal(_) => "Internal",
    }
}
