//! Element-wise expressions: trees built by the lowering, flattened to the
//! postfix form the device's map vertex executes. Operation codes mirror
//! `ExprOpCode` in `cpp/include/neurenix/codelets.h`, in the same order.
//! The same trees are evaluated on the host when folding constants
//! ([`eval`]).

pub mod eval;

use crate::dtype::DeviceType;

#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExprOp {
    Input = 0,
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
}

/// The names the C++ core gives the codes, in code order (checked against
/// the core by a test in neurenix-sys).
pub const EXPR_OP_NAMES: &[&str] = &[
    "input",
    "const_f",
    "const_i",
    "neg",
    "abs",
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "erf",
    "gelu_erf",
    "gelu_tanh",
    "floor",
    "ceil",
    "round",
    "sign",
    "sin",
    "cos",
    "not",
    "isnan",
    "isinf",
    "square",
    "softplus",
    "softsign",
    "cast_f32",
    "cast_f16",
    "cast_i32",
    "cast_bool",
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "min",
    "max",
    "mod",
    "fmod",
    "eq",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "xor",
    "select",
    "clamp",
    "leaky_relu",
    "elu",
    "hard_sigmoid",
];

/// One postfix instruction, as the device executes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExprInstr {
    pub op: u16,
    pub arg: u32,
    pub imm: f64,
    pub imm2: f64,
    /// Round this instruction's float result to half precision.
    pub half: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub op: ExprOp,
    pub args: Vec<Expr>,
    pub input: u32,
    pub imm: f64,
    pub imm2: f64,
    pub half: bool,
}

impl Expr {
    fn leaf(op: ExprOp) -> Expr {
        Expr {
            op,
            args: Vec::new(),
            input: 0,
            imm: 0.0,
            imm2: 0.0,
            half: false,
        }
    }
    pub fn input(i: usize) -> Expr {
        Expr {
            input: i as u32,
            ..Expr::leaf(ExprOp::Input)
        }
    }
    pub fn constf(v: f64, half: bool) -> Expr {
        Expr {
            imm: v,
            half,
            ..Expr::leaf(ExprOp::ConstF)
        }
    }
    pub fn consti(v: i64) -> Expr {
        Expr {
            imm: v as f64,
            ..Expr::leaf(ExprOp::ConstI)
        }
    }
    pub fn un(op: ExprOp, a: Expr, half: bool) -> Expr {
        Expr {
            op,
            args: vec![a],
            input: 0,
            imm: 0.0,
            imm2: 0.0,
            half,
        }
    }
    pub fn bin(op: ExprOp, a: Expr, b: Expr, half: bool) -> Expr {
        Expr {
            op,
            args: vec![a, b],
            input: 0,
            imm: 0.0,
            imm2: 0.0,
            half,
        }
    }
    pub fn select(c: Expr, a: Expr, b: Expr, half: bool) -> Expr {
        Expr {
            op: ExprOp::Select,
            args: vec![c, a, b],
            input: 0,
            imm: 0.0,
            imm2: 0.0,
            half,
        }
    }
    pub fn param(op: ExprOp, a: Expr, imm: f64, imm2: f64, half: bool) -> Expr {
        Expr {
            op,
            args: vec![a],
            input: 0,
            imm,
            imm2,
            half,
        }
    }

    /// Conversion of `e` to `want` (rounding to half where needed).
    pub fn cast(e: Expr, want: DeviceType) -> Expr {
        match want {
            DeviceType::F32 => Expr::un(ExprOp::CastF32, e, false),
            DeviceType::F16 => Expr::un(ExprOp::CastF16, e, true),
            DeviceType::I32 => Expr::un(ExprOp::CastI32, e, false),
            DeviceType::Bool => Expr::un(ExprOp::CastBool, e, false),
        }
    }

    /// Renumbers operand indices through `map` (when merging operand lists).
    pub fn remap_inputs(&mut self, map: &dyn Fn(u32) -> u32) {
        if self.op == ExprOp::Input {
            self.input = map(self.input);
        }
        for a in &mut self.args {
            a.remap_inputs(map);
        }
    }

    pub fn size(&self) -> usize {
        1 + self.args.iter().map(Expr::size).sum::<usize>()
    }

    pub fn flatten(&self) -> Vec<ExprInstr> {
        let mut out = Vec::with_capacity(self.size());
        self.flatten_into(&mut out);
        out
    }

    fn flatten_into(&self, out: &mut Vec<ExprInstr>) {
        for a in &self.args {
            a.flatten_into(out);
        }
        out.push(ExprInstr {
            op: self.op as u16,
            arg: self.input,
            imm: self.imm,
            imm2: self.imm2,
            half: self.half,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_every_code() {
        assert_eq!(EXPR_OP_NAMES.len(), ExprOp::HardSigmoid as usize + 1);
        assert_eq!(EXPR_OP_NAMES[ExprOp::Select as usize], "select");
        assert_eq!(EXPR_OP_NAMES[ExprOp::CastF16 as usize], "cast_f16");
    }

    #[test]
    fn flattens_postfix() {
        let e = Expr::bin(
            ExprOp::Add,
            Expr::input(0),
            Expr::un(ExprOp::Exp, Expr::input(1), false),
            false,
        );
        let ops: Vec<u16> = e.flatten().iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            vec![
                ExprOp::Input as u16,
                ExprOp::Input as u16,
                ExprOp::Exp as u16,
                ExprOp::Add as u16
            ]
        );
    }
}
