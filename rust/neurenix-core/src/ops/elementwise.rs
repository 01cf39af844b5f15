//! Element-wise operators: activations, arithmetic with numpy broadcasting,
//! comparisons, logic, `Where`, `Clip` and `Cast`.
//!
//! Each operator is defined once, as an expression builder; the same
//! expression is evaluated on the host when folding constants and fused into
//! the device's map vertices when lowering.

use crate::dtype::{refusal, DeviceType, ElemType, Refusal};
use crate::error::{Error, Result};
use crate::expr::eval::eval_host;
use crate::expr::{Expr, ExprOp};
use crate::float8::Overflow;
use crate::ir::Node;
use crate::lower::LowerCx;
use crate::tensor::{round_float, HostTensor};

use super::indexing::FOLD_LIMIT;
use super::{broadcast_shapes, host_fits, OpCx, Operator, Registry, TypeShape};

/// Which element types the operator accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    Float,
    Numeric,
    Bool,
    Any,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Out {
    Same,
    Bool,
}

type BuildFn = fn(&Node, i64, Vec<Option<Expr>>, bool) -> Result<Expr>;

#[derive(Clone, Copy)]
enum Build {
    Un(ExprOp),
    Bin(ExprOp),
    /// Variadic left fold.
    Fold(ExprOp),
    Custom(BuildFn),
}

struct Elementwise {
    ty: Ty,
    out: Out,
    build: Build,
    /// Inputs that may be of another type than input 0 (Pow's exponent,
    /// Where's condition, Clip's bounds are handled by their builders).
    min_inputs: usize,
    max_inputs: usize,
}

/// The present operands, in order (inference requires the ones an
/// operator cannot do without).
struct Operands(std::vec::IntoIter<Expr>);

impl Operands {
    fn of(args: Vec<Option<Expr>>) -> Operands {
        Operands(args.into_iter().flatten().collect::<Vec<_>>().into_iter())
    }
    fn next(&mut self) -> Result<Expr> {
        self.0
            .next()
            .ok_or_else(|| Error::Internal("an operand is missing".into()))
    }
}

fn first(args: Vec<Option<Expr>>) -> Result<Expr> {
    args.into_iter()
        .next()
        .flatten()
        .ok_or_else(|| Error::Internal("the first operand is missing".into()))
}

fn build_expr(
    ew: &Elementwise,
    node: &Node,
    opset: i64,
    args: Vec<Option<Expr>>,
    half: bool,
) -> Result<Expr> {
    Ok(match ew.build {
        Build::Un(op) => Expr::un(op, first(args)?, half),
        Build::Bin(op) => {
            let mut it = Operands::of(args);
            let a = it.next()?;
            let b = it.next()?;
            Expr::bin(op, a, b, half)
        }
        Build::Fold(op) => {
            let mut it = Operands::of(args);
            let mut acc = it.next()?;
            for b in it.0 {
                acc = Expr::bin(op, acc, b, half);
            }
            acc
        }
        Build::Custom(f) => f(node, opset, args, half)?,
    })
}

fn mean(_n: &Node, _o: i64, args: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let args: Vec<Expr> = args.into_iter().flatten().collect();
    let n = args.len();
    let mut it = Operands(args.into_iter());
    let mut acc = it.next()?;
    for b in it.0 {
        acc = Expr::bin(ExprOp::Add, acc, b, half);
    }
    Ok(if n > 1 {
        Expr::bin(ExprOp::Div, acc, Expr::constf(n as f64, half), half)
    } else {
        acc
    })
}

fn leaky_relu(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    Ok(Expr::param(
        ExprOp::LeakyRelu,
        first(a)?,
        n.attr_f("alpha", 0.01)? as f64,
        0.0,
        half,
    ))
}
fn elu(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    Ok(Expr::param(
        ExprOp::Elu,
        first(a)?,
        n.attr_f("alpha", 1.0)? as f64,
        0.0,
        half,
    ))
}
fn selu(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let alpha = n.attr_f("alpha", 1.673_263_2)? as f64;
    let gamma = n.attr_f("gamma", 1.050_701)? as f64;
    let e = Expr::param(ExprOp::Elu, first(a)?, alpha, 0.0, half);
    Ok(Expr::bin(ExprOp::Mul, e, Expr::constf(gamma, half), half))
}
fn hard_sigmoid(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let alpha = n.attr_f("alpha", 0.2)? as f64;
    let beta = n.attr_f("beta", 0.5)? as f64;
    Ok(Expr::param(
        ExprOp::HardSigmoid,
        first(a)?,
        alpha,
        beta,
        half,
    ))
}
fn hard_swish(_n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let x = first(a)?;
    let hs = Expr::param(ExprOp::HardSigmoid, x.clone(), 1.0 / 6.0, 0.5, half);
    Ok(Expr::bin(ExprOp::Mul, x, hs, half))
}
fn thresholded_relu(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let alpha = n.attr_f("alpha", 1.0)? as f64;
    let x = first(a)?;
    let cond = Expr::bin(ExprOp::Gt, x.clone(), Expr::constf(alpha, half), false);
    Ok(Expr::select(cond, x, Expr::constf(0.0, half), half))
}
fn gelu(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let op = match n.attr_s("approximate", "none")?.as_str() {
        "none" => ExprOp::GeluErf,
        "tanh" => ExprOp::GeluTanh,
        other => {
            return Err(Error::model(format!(
                "node '{}': Gelu approximate='{other}' is not one of 'none', 'tanh'",
                n.name
            )))
        }
    };
    Ok(Expr::un(op, first(a)?, half))
}
fn prelu(_n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let mut it = Operands::of(a);
    let x = it.next()?;
    let slope = it.next()?;
    let neg = Expr::bin(ExprOp::Lt, x.clone(), Expr::constf(0.0, half), false);
    Ok(Expr::select(
        neg,
        Expr::bin(ExprOp::Mul, x.clone(), slope, half),
        x,
        half,
    ))
}
fn modulo(n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    // (Float inputs need fmod=1 before opset 28; `Elementwise::infer` checks it.)
    let op = if n.attr_i("fmod", 0)? != 0 {
        ExprOp::Fmod
    } else {
        ExprOp::Mod
    };
    let mut it = Operands::of(a);
    Ok(Expr::bin(op, it.next()?, it.next()?, half))
}
fn where_(_n: &Node, _o: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let mut it = Operands::of(a);
    Ok(Expr::select(it.next()?, it.next()?, it.next()?, half))
}
fn clip(n: &Node, opset: i64, a: Vec<Option<Expr>>, half: bool) -> Result<Expr> {
    let mut it = a.into_iter();
    let mut x = first(vec![it.next().flatten()])?;
    if opset < 11 {
        let lo = n.attr_f("min", f32::MIN)? as f64;
        let hi = n.attr_f("max", f32::MAX)? as f64;
        return Ok(Expr::param(ExprOp::Clamp, x, lo, hi, half));
    }
    if let Some(lo) = it.next().flatten() {
        x = Expr::bin(ExprOp::Max, x, lo, half);
    }
    if let Some(hi) = it.next().flatten() {
        x = Expr::bin(ExprOp::Min, x, hi, half);
    }
    Ok(x)
}

impl Elementwise {
    /// Type every input is computed in (as a model type): the first
    /// non-condition operand's.
    fn operand_type(&self, cx: &OpCx) -> Result<ElemType> {
        if cx.node.op_type == "Where" {
            cx.in_dtype(1)
        } else {
            cx.in_dtype(0)
        }
    }

    fn check_types(&self, cx: &OpCx) -> Result<ElemType> {
        let t = self.operand_type(cx)?;
        let ok = match self.ty {
            Ty::Float => t.is_float(),
            Ty::Numeric => t.is_float() || t.is_int(),
            Ty::Bool => t == ElemType::Bool,
            Ty::Any => true,
        };
        if !ok {
            return Err(cx.err(format!("does not accept {t} inputs")));
        }
        let op = cx.node.op_type.as_str();
        for i in 0..cx.n_inputs() {
            if !cx.has_input(i) {
                continue;
            }
            let ti = cx.in_dtype(i)?;
            let exempt = (op == "Pow" && i == 1) || (op == "Where" && i == 0);
            if op == "Where" && i == 0 && ti != ElemType::Bool {
                return Err(cx.err(format!("condition must be bool, got {ti}")));
            }
            if !exempt && ti != t {
                return Err(cx.err(format!("inputs must share one type, got {t} and {ti}")));
            }
        }
        Ok(t)
    }
}

/// Before opset 7, binary operators broadcast only when asked
/// (`broadcast=1`), aligning the second operand at `axis`, and PRelu's slope
/// of one value per channel applies along axis 1. Returns the second
/// operand's shape with the trailing ones that make numpy's rules give the
/// same result (`None` when nothing changes).
fn legacy_shape(node: &Node, opset: i64, a: &[usize], b: &[usize]) -> Result<Option<Vec<usize>>> {
    if opset >= 7 || b.is_empty() || b.len() >= a.len() {
        return Ok(None);
    }
    let axis = if node.op_type == "PRelu" {
        if b.len() == 1 && a.len() >= 2 && b[0] == a[1] && b[0] != 1 {
            1
        } else {
            return Ok(None);
        }
    } else if node.attr_i("broadcast", 0)? == 1 {
        let lead = i64::try_from(a.len() - b.len()).unwrap_or(i64::MAX);
        let axis = node.attr_i("axis", lead)?;
        // The second operand, aligned at `axis`, must end within the first.
        match usize::try_from(axis) {
            Ok(k) if k <= a.len() - b.len() => k,
            _ => {
                return Err(Error::model(format!(
                    "node '{}': axis {axis} does not fit operand shapes {a:?} and {b:?}",
                    node.name
                )))
            }
        }
    } else {
        return Ok(None);
    };
    let mut out = b.to_vec();
    out.extend(std::iter::repeat_n(1, a.len() - axis - b.len()));
    Ok(Some(out))
}

impl Elementwise {
    /// Input shapes with the legacy alignment applied.
    fn aligned_shapes(&self, cx: &OpCx) -> Result<Vec<Option<Vec<usize>>>> {
        let mut shapes = Vec::new();
        for i in 0..cx.node.inputs.len() {
            shapes.push(if cx.has_input(i) {
                Some(cx.in_shape(i)?)
            } else {
                None
            });
        }
        if let (Some(Some(a)), Some(Some(b))) = (shapes.first(), shapes.get(1)) {
            if let Some(nb) = legacy_shape(cx.node, cx.opset, a, b)? {
                shapes[1] = Some(nb);
            }
        }
        Ok(shapes)
    }
}

impl Operator for Elementwise {
    fn fuses_operands(&self) -> bool {
        true
    }
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        let n = cx.node.inputs.len();
        if n < self.min_inputs || n > self.max_inputs {
            return Err(cx.err(format!(
                "takes {} to {} inputs, got {n}",
                self.min_inputs, self.max_inputs
            )));
        }
        // Only Clip's bounds may be omitted.
        let required = if cx.node.op_type == "Clip" { 1 } else { n };
        if let Some(i) = (0..required).find(|&i| !cx.has_input(i)) {
            return Err(cx.err(format!("input {i} is missing")));
        }
        let t = self.check_types(cx)?;
        let shapes: Vec<Vec<usize>> = self.aligned_shapes(cx)?.into_iter().flatten().collect();
        let shape = broadcast_shapes(&shapes)
            .ok_or_else(|| cx.err(format!("input shapes {shapes:?} do not broadcast together")))?;
        if cx.node.op_type == "PRelu" && shape != shapes[0] {
            return Err(cx.err(format!(
                "slope {:?} does not broadcast to input {:?}",
                shapes[1], shapes[0]
            )));
        }
        // Mod 28 defines fmod=0 for floats (the sign of the divisor, as
        // Python's %); earlier versions leave it to integers.
        if cx.node.op_type == "Mod"
            && t.is_float()
            && cx.opset < 28
            && cx.node.attr_i("fmod", 0)? == 0
        {
            return Err(cx.err(format!(
                "float inputs need fmod=1 at opset {} (Mod defines fmod=0 for floats from opset 28)",
                cx.opset
            )));
        }
        let dtype = if self.out == Out::Bool {
            ElemType::Bool
        } else {
            t
        };
        Ok(vec![TypeShape::new(dtype, shape)])
    }

    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let out = tryo!(self.infer(cx)).into_iter().next()?;
        // Broadcasting can make a result far larger than its operands: only
        // a bounded one is folded.
        let largest = inputs
            .iter()
            .flatten()
            .map(|t| t.numel())
            .max()
            .unwrap_or(0);
        if !host_fits(&out.shape, FOLD_LIMIT.max(largest)) {
            return None;
        }
        let aligned = tryo!(self.aligned_shapes(cx));
        // Operands as the expression sees them (legacy alignment applied).
        let mut present: Vec<HostTensor> = Vec::new();
        let mut args = Vec::new();
        for (i, x) in inputs.iter().enumerate() {
            match x {
                Some(t) => {
                    let t = match aligned.get(i).cloned().flatten() {
                        Some(sh) if sh.as_slice() != t.shape() => t.reshape(&sh).ok()?,
                        _ => (*t).clone(),
                    };
                    args.push(Some(Expr::input(present.len())));
                    present.push(t);
                }
                None => args.push(None),
            }
        }
        let present: Vec<&HostTensor> = present.iter().collect();
        let e = tryo!(build_expr(self, cx.node, cx.opset, args, false));
        let float_t = if out.dtype.is_float() {
            out.dtype
        } else {
            cx.in_dtype(0).ok()?
        };
        let round = move |v: f64| round_float(float_t, v);
        Some(eval_host(&e, &present, &out.shape, &round).map(|d| {
            let t = HostTensor {
                dtype: out.dtype,
                data: d,
            };
            vec![t.cast(out.dtype)]
        }))
    }

    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let out = node.outputs[0];
        let shape = cx.shape(out)?;
        let opcx = OpCx::of(cx, node);
        let operand_t = self.operand_type(&opcx)?;
        let compute = cx.device_type(operand_t);
        let half = compute == DeviceType::F16;
        let aligned = self.aligned_shapes(&opcx)?;
        let mut ins = Vec::new();
        let mut args = Vec::new();
        for (i, v) in node.inputs.iter().enumerate() {
            match v {
                Some(v) => {
                    let want = if node.op_type == "Where" && i == 0 {
                        DeviceType::Bool
                    } else {
                        compute
                    };
                    let sh = aligned[i].clone().unwrap_or_default();
                    if sh != cx.shape(*v)? {
                        // Legacy alignment: the operand seen with trailing ones.
                        let t = cx.tensor_as(*v, want)?;
                        let t = cx.reshape(&t, &sh)?;
                        args.push(Some(cx.operand_tensor(t, &mut ins)));
                    } else {
                        args.push(Some(cx.operand(*v, &mut ins, Some(want))?));
                    }
                }
                None => args.push(None),
            }
        }
        let e = build_expr(self, node, cx.opset, args, half)?;
        let out_dt = if self.out == Out::Bool {
            DeviceType::Bool
        } else {
            compute
        };
        cx.set_lazy(out, e, ins, shape, out_dt);
        Ok(())
    }
}

/// ONNX Cast (and CastLike): exact conversions, float to int truncating;
/// to bfloat16 and the float8 types by rounding to them (ties to even, float8
/// saturating unless `saturate=0`) and going on in the precision's float type.
struct Cast;

impl Cast {
    fn target(cx: &OpCx) -> Result<ElemType> {
        if cx.node.op_type == "CastLike" {
            return cx.in_dtype(1);
        }
        let to = cx.node.attr_i("to", -1)?;
        let what = format!("node '{}' ({}) casts to", cx.node.name, cx.node.op_type);
        match i32::try_from(to)
            .ok()
            .and_then(|code| refusal(code, &what).map(|r| (code, r)))
        {
            None if i32::try_from(to).is_ok() => {
                Ok(ElemType::from_onnx(to as i32).expect("a held type"))
            }
            Some((_, Refusal::Unsupported(m))) => Err(cx.unsupported_type(m)),
            _ => Err(cx.unsupported_form(&format!(
                "cast to element type {to}, which ONNX does not define"
            ))),
        }
    }
    /// How a cast to a float8 type treats values beyond it (`saturate`,
    /// from opset 19; 1 by default).
    fn overflow(cx: &OpCx) -> Result<Overflow> {
        Ok(if cx.node.attr_i("saturate", 1)? != 0 {
            Overflow::Saturate
        } else {
            Overflow::Overflow
        })
    }
}

impl Operator for Cast {
    fn fuses_operands(&self) -> bool {
        true
    }
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>> {
        Ok(vec![TypeShape::new(Cast::target(cx)?, cx.in_shape(0)?)])
    }
    fn eval(&self, cx: &OpCx, inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        let to = tryo!(Cast::target(cx));
        let x = inputs[0]?;
        if let Some(f) = to.float8() {
            let overflow = tryo!(Cast::overflow(cx));
            let v = x.as_float().mapv(|v| f.round(v, overflow));
            return Some(Ok(vec![HostTensor::float(to, v)]));
        }
        Some(Ok(vec![x.cast(to)]))
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()> {
        let out = node.outputs[0];
        let to = cx.dtype(out)?;
        let opcx = OpCx::of(cx, node);
        let x = opcx.input(0)?;
        let overflow = Cast::overflow(&opcx)?;
        let from = cx.dtype(x)?;
        let dev = cx.device_type(to);
        let mut ins = Vec::new();
        let mut e = cx.operand(x, &mut ins, None)?;
        // A cast to half rounds even when the policy keeps floats in float32.
        if to == ElemType::F16 && dev != DeviceType::F16 {
            e = Expr::cast(e, DeviceType::F16);
        }
        // The storage types have no device type of their own: the value is
        // rounded to them in float32 and goes on in the precision's type.
        if to.is_storage_only() {
            let f = Expr::cast(e, DeviceType::F32);
            e = if to.float8().is_some() {
                let saturate = if overflow == Overflow::Saturate {
                    1.0
                } else {
                    0.0
                };
                Expr::param(
                    ExprOp::RoundF8,
                    f,
                    f64::from(to.onnx_code()),
                    saturate,
                    false,
                )
            } else {
                Expr::un(ExprOp::RoundBf16, f, false)
            };
        }
        // Integer types narrower than int32 live in int32 on the device: floats
        // saturate into their range, integers wrap (two's complement).
        let narrow = match to {
            ElemType::I8 => Some((-128.0, 127.0)),
            ElemType::U8 => Some((0.0, 255.0)),
            ElemType::I16 => Some((-32768.0, 32767.0)),
            ElemType::U16 => Some((0.0, 65535.0)),
            _ => None,
        };
        if let Some((lo, hi)) = narrow {
            if from.is_float() {
                e = Expr::cast(e, DeviceType::F32);
                e = Expr::param(ExprOp::Clamp, e, lo, hi, false);
                e = Expr::cast(e, DeviceType::I32);
            } else {
                let span = hi - lo + 1.0;
                e = Expr::cast(e, DeviceType::I32);
                let shifted = Expr::bin(ExprOp::Sub, e, Expr::consti(lo as i64), false);
                let wrapped = Expr::bin(ExprOp::Mod, shifted, Expr::consti(span as i64), false);
                e = Expr::bin(ExprOp::Add, wrapped, Expr::consti(lo as i64), false);
            }
        }
        let e = Expr::cast(e, dev);
        let shape = cx.shape(out)?;
        cx.set_lazy(out, e, ins, shape, dev);
        Ok(())
    }
}

pub fn register(r: &mut Registry) {
    use ExprOp as E;
    let mut add = |name: &'static str, ty: Ty, out: Out, build: Build, min: usize, max: usize| {
        r.insert(
            name,
            Box::new(Elementwise {
                ty,
                out,
                build,
                min_inputs: min,
                max_inputs: max,
            }),
        );
    };
    for (name, op) in [
        ("Sigmoid", E::Sigmoid),
        ("Tanh", E::Tanh),
        ("Exp", E::Exp),
        ("Log", E::Log),
        ("Sqrt", E::Sqrt),
        ("Reciprocal", E::Reciprocal),
        ("Erf", E::Erf),
        ("Floor", E::Floor),
        ("Ceil", E::Ceil),
        ("Round", E::Round),
        ("Sin", E::Sin),
        ("Cos", E::Cos),
        ("Softplus", E::Softplus),
        ("Softsign", E::Softsign),
    ] {
        add(name, Ty::Float, Out::Same, Build::Un(op), 1, 1);
    }
    for (name, op) in [
        ("Neg", E::Neg),
        ("Abs", E::Abs),
        ("Relu", E::Relu),
        ("Sign", E::Sign),
    ] {
        add(name, Ty::Numeric, Out::Same, Build::Un(op), 1, 1);
    }
    add("IsNaN", Ty::Float, Out::Bool, Build::Un(E::IsNan), 1, 1);
    add("IsInf", Ty::Float, Out::Bool, Build::Un(E::IsInf), 1, 1);
    add("Not", Ty::Bool, Out::Bool, Build::Un(E::Not), 1, 1);
    for (name, b) in [
        ("LeakyRelu", leaky_relu as BuildFn),
        ("Elu", elu),
        ("Selu", selu),
        ("HardSigmoid", hard_sigmoid),
        ("HardSwish", hard_swish),
        ("ThresholdedRelu", thresholded_relu),
        ("Gelu", gelu),
    ] {
        add(name, Ty::Float, Out::Same, Build::Custom(b), 1, 1);
    }
    add("PRelu", Ty::Numeric, Out::Same, Build::Custom(prelu), 2, 2);
    for (name, op) in [
        ("Add", E::Add),
        ("Sub", E::Sub),
        ("Mul", E::Mul),
        ("Div", E::Div),
        ("Pow", E::Pow),
    ] {
        add(name, Ty::Numeric, Out::Same, Build::Bin(op), 2, 2);
    }
    add("Mod", Ty::Numeric, Out::Same, Build::Custom(modulo), 2, 2);
    for (name, op) in [("Max", E::Max), ("Min", E::Min), ("Sum", E::Add)] {
        add(name, Ty::Numeric, Out::Same, Build::Fold(op), 1, usize::MAX);
    }
    add(
        "Mean",
        Ty::Float,
        Out::Same,
        Build::Custom(mean),
        1,
        usize::MAX,
    );
    for (name, op) in [
        ("Equal", E::Eq),
        ("Less", E::Lt),
        ("LessOrEqual", E::Le),
        ("Greater", E::Gt),
        ("GreaterOrEqual", E::Ge),
    ] {
        add(name, Ty::Any, Out::Bool, Build::Bin(op), 2, 2);
    }
    for (name, op) in [("And", E::And), ("Or", E::Or), ("Xor", E::Xor)] {
        add(name, Ty::Bool, Out::Bool, Build::Bin(op), 2, 2);
    }
    add("Where", Ty::Any, Out::Same, Build::Custom(where_), 3, 3);
    add("Clip", Ty::Numeric, Out::Same, Build::Custom(clip), 1, 3);
    r.insert("Cast", Box::new(Cast));
    r.insert("CastLike", Box::new(Cast));
}
