//! Operators: for each supported op type, its shape inference, its host
//! evaluation (constant folding) and its lowering onto the device.
//!
//! Families live in their own modules and register themselves in
//! [`registry`]; adding an operator never touches the passes or the driver.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::OnceLock;

use crate::dtype::ElemType;
use crate::error::{Error, Result};
use crate::ir::{Graph, Node, ValueId};
use crate::lower::precision::FloatRole;
use crate::lower::LowerCx;
pub use crate::tensor::checked_numel;
use crate::tensor::{host_shape_ok, HostTensor};

/// Unwraps a step inside [`Operator::eval`], which reports errors as
/// `Some(Err(..))`.
macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        }
    };
}

pub mod concat_split;
pub mod conv;
pub mod elementwise;
pub mod expand_tile;
pub mod gather;
pub mod generators;
mod indexing;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod pad;
pub mod pool;
pub mod reduce;
pub mod slice;
pub mod softmax;
#[cfg(test)]
mod testing;

/// Type and shape of one output.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeShape {
    pub dtype: ElemType,
    pub shape: Vec<usize>,
}

impl TypeShape {
    pub fn new(dtype: ElemType, shape: Vec<usize>) -> TypeShape {
        TypeShape { dtype, shape }
    }
}

/// What an operator sees of its node and the graph around it.
pub struct OpCx<'a> {
    pub graph: &'a Graph,
    pub node: &'a Node,
    pub opset: i64,
}

impl<'a> OpCx<'a> {
    /// What the operator of `node` sees while it is lowered.
    pub fn of<'c: 'a>(cx: &LowerCx<'c>, node: &'a Node) -> OpCx<'a> {
        OpCx {
            graph: cx.graph,
            node,
            opset: cx.opset,
        }
    }
    pub fn n_inputs(&self) -> usize {
        self.node.inputs.len()
    }
    pub fn has_input(&self, i: usize) -> bool {
        self.node.input(i).is_some()
    }
    pub fn input(&self, i: usize) -> Result<ValueId> {
        self.node
            .input(i)
            .ok_or_else(|| self.err(format!("input {i} is missing")))
    }
    pub fn in_shape(&self, i: usize) -> Result<Vec<usize>> {
        let v = self.input(i)?;
        self.graph.shape_of(v).ok_or_else(|| {
            self.err(format!(
                "the shape of input '{}' is unknown",
                self.graph.value(v).name
            ))
        })
    }
    pub fn in_dtype(&self, i: usize) -> Result<ElemType> {
        let v = self.input(i)?;
        self.graph.value(v).dtype.ok_or_else(|| {
            self.err(format!(
                "the type of input '{}' is unknown",
                self.graph.value(v).name
            ))
        })
    }
    pub fn const_input(&self, i: usize) -> Option<&'a HostTensor> {
        self.node.input(i).and_then(|v| self.graph.constant(v))
    }
    /// Integer list given either as input `i` (newer opsets) or as attribute
    /// `attr` (older ones). An input that is not a compile-time constant is
    /// an error.
    pub fn ints_input_or_attr(&self, i: usize, attr: &str) -> Result<Option<Vec<i64>>> {
        if self.has_input(i) {
            return match self.const_input(i) {
                Some(t) => Ok(Some(t.to_i64_vec())),
                None => Err(self.unsupported_form(&format!(
                    "input {i} must be known at compile time (a constant or computable from shapes)"
                ))),
            };
        }
        self.node.attr_ints(attr)
    }
    /// A constant integer list from input `i`, or the error that says it
    /// must be known at compile time.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        match self.const_input(i) {
            Some(t) => Ok(t.to_i64_vec()),
            None => {
                Err(self
                    .unsupported_form(&format!("{what} (input {i}) must be known at compile time")))
            }
        }
    }
    /// `v` as dimensions (sizes, counts), which cannot be negative.
    pub fn dims(&self, v: &[i64], what: &str) -> Result<Vec<usize>> {
        v.iter()
            .map(|&d| {
                if d < 0 {
                    Err(self.err(format!("{what} {v:?} has a negative entry")))
                } else {
                    self.to_dim(d, what)
                }
            })
            .collect()
    }

    // Checked shape arithmetic. Dimensions, pads, repeats, steps and counts
    // come from the model, so every product, sum and conversion of them is
    // checked: an overflow is the model's error, named after the node, never
    // a panic or a value that silently wrapped.

    /// `v` (an attribute or constant input) as a dimension, size or count.
    pub fn to_dim(&self, v: i64, what: impl Display) -> Result<usize> {
        usize::try_from(v).map_err(|_| {
            self.err(format!(
                "{what} is {v}, which is not a valid dimension (it must be 0 or more)"
            ))
        })
    }
    /// Dimension `d` as a signed index, for ONNX's index arithmetic.
    pub fn to_i64(&self, d: usize, what: impl Display) -> Result<i64> {
        i64::try_from(d)
            .map_err(|_| self.err(format!("{what} ({d}) is beyond the int64 range of indices")))
    }
    /// `a * b`, or the error saying that `what` overflows.
    pub fn dim_mul(&self, a: usize, b: usize, what: impl Display) -> Result<usize> {
        a.checked_mul(b)
            .ok_or_else(|| self.err(format!("{what} ({a} x {b}) overflows")))
    }
    /// `a + b`, or the error saying that `what` overflows.
    pub fn dim_add(&self, a: usize, b: usize, what: impl Display) -> Result<usize> {
        a.checked_add(b)
            .ok_or_else(|| self.err(format!("{what} ({a} + {b}) overflows")))
    }
    /// The sum of `dims`, or the error saying that `what` overflows.
    pub fn dim_sum(&self, dims: &[usize], what: impl Display) -> Result<usize> {
        dims.iter()
            .try_fold(0usize, |s, &d| s.checked_add(d))
            .ok_or_else(|| self.err(format!("{what} {dims:?} overflows")))
    }
    /// Elements of a tensor of `shape` (`what` names it in the error).
    pub fn numel(&self, shape: &[usize], what: impl Display) -> Result<usize> {
        checked_numel(shape).ok_or_else(|| {
            self.err(format!(
                "{what} {shape:?} has more elements than this host can count"
            ))
        })
    }
    pub fn err(&self, msg: impl Into<String>) -> Error {
        Error::shape(
            &self.node.name,
            format!("{}: {}", self.node.op_type, msg.into()),
        )
    }
    pub fn unsupported_form(&self, detail: &str) -> Error {
        Error::unsupported(
            &self.node.op_type,
            &self.node.name,
            &self.node.domain,
            self.opset,
            detail,
            supported_ops(),
        )
    }
    /// The error for an element type neurenix does not hold, used by this
    /// node (`message` from [`crate::dtype::refusal`]).
    pub fn unsupported_type(&self, message: String) -> Error {
        Error::unsupported_type(&self.node.op_type, &self.node.name, self.opset, message)
    }
    /// Requires `n` inputs of the same type; returns it.
    pub fn same_dtype(&self, idx: &[usize]) -> Result<ElemType> {
        let d0 = self.in_dtype(idx[0])?;
        for &i in &idx[1..] {
            if self.has_input(i) && self.in_dtype(i)? != d0 {
                return Err(self.err(format!(
                    "inputs must share one type, got {} and {}",
                    d0,
                    self.in_dtype(i)?
                )));
            }
        }
        Ok(d0)
    }
}

pub trait Operator: Sync + Send {
    fn infer(&self, cx: &OpCx) -> Result<Vec<TypeShape>>;
    /// Host evaluation, for constant folding. `None` when this op is not
    /// folded (too costly on the host, or not implemented there).
    fn eval(&self, _cx: &OpCx, _inputs: &[Option<&HostTensor>]) -> Option<Result<Vec<HostTensor>>> {
        None
    }
    fn lower(&self, cx: &mut LowerCx, node: &Node) -> Result<()>;
    /// True for element-wise operators: they build their result as an
    /// expression over their operands (`LowerCx::operand`), so a cheap
    /// element-wise producer that several of them read can be computed
    /// again in each instead of stored (`lower/fusion.rs`).
    fn fuses_operands(&self) -> bool {
        false
    }
    /// True for operators whose result depends only on input shapes (Shape,
    /// Size): folded even when their inputs are not constants.
    fn folds_without_values(&self) -> bool {
        false
    }
    /// How the precision policy treats this operator's float arithmetic:
    /// `Compute` or `Sensitive`.
    fn float_role(&self) -> FloatRole {
        FloatRole::Compute
    }
    /// Floating-point operations, for the sharding planner's balance.
    fn flops(&self, cx: &OpCx) -> f64 {
        cx.node
            .outputs
            .iter()
            .filter_map(|&o| cx.graph.shape_of(o))
            .map(|s| numel_f64(&s))
            .sum()
    }
}

pub type Registry = BTreeMap<&'static str, Box<dyn Operator>>;

pub fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let mut r = Registry::new();
        concat_split::register(&mut r);
        conv::register(&mut r);
        elementwise::register(&mut r);
        expand_tile::register(&mut r);
        gather::register(&mut r);
        generators::register(&mut r);
        layout::register(&mut r);
        matmul::register(&mut r);
        norm::register(&mut r);
        pad::register(&mut r);
        pool::register(&mut r);
        reduce::register(&mut r);
        slice::register(&mut r);
        softmax::register(&mut r);
        r
    })
}

/// Names of every supported operator, sorted.
pub fn supported_ops() -> Vec<String> {
    registry().keys().map(|k| k.to_string()).collect()
}

/// The operator for a node, or the error that names it.
pub fn lookup(node: &Node, opset: i64) -> Result<&'static dyn Operator> {
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return Err(Error::unsupported(
            &node.op_type,
            &node.name,
            &node.domain,
            opset,
            "only the default ONNX domain is implemented",
            supported_ops(),
        ));
    }
    registry()
        .get(node.op_type.as_str())
        .map(|b| b.as_ref())
        .ok_or_else(|| {
            Error::unsupported(
                &node.op_type,
                &node.name,
                &node.domain,
                opset,
                "",
                supported_ops(),
            )
        })
}

/// numpy broadcasting of several shapes.
pub fn broadcast_shapes(shapes: &[Vec<usize>]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let lead = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[lead + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// Number of elements of a tensor of `shape`, as a float: for estimates
/// (flops, weights), which must not overflow.
pub fn numel_f64(shape: &[usize]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

/// True when host folding may build a tensor of `shape`: at most `limit`
/// elements, and a shape the host's arrays can have at all.
pub(crate) fn host_fits(shape: &[usize], limit: usize) -> bool {
    checked_numel(shape).is_some_and(|n| n <= limit) && host_shape_ok(shape)
}

/// Normalises a possibly negative axis against `rank` (a scalar has none).
pub fn norm_axis(axis: i64, rank: usize, cx: &OpCx) -> Result<usize> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    // `axis < 0 <= r`: the sum cannot overflow.
    let a = if axis < 0 { axis + r } else { axis };
    match usize::try_from(a) {
        Ok(a) if a < rank => Ok(a),
        _ => Err(cx.err(format!("axis {axis} is out of range for rank {rank}"))),
    }
}
