//! Element-wise expressions: trees built by the lowering, flattened to the
//! postfix form the device's map vertex executes. The operations are listed
//! once, in `cpp/include/neurenix/expr_ops.def`, from which both the C++
//! core's `ExprOpCode` and this crate's [`ExprOp`] (by the build script) are
//! made.
//! The same trees are evaluated on the host when folding constants
//! ([`eval`]).

pub mod eval;

use crate::dtype::DeviceType;

include!(concat!(env!("OUT_DIR"), "/expr_ops.rs"));

/// How many values an operation pops (leaves push one and pop none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExprArity {
    Leaf,
    Unary,
    Binary,
    Ternary,
}

impl ExprOp {
    /// The operation with code `code`, if there is one.
    pub fn from_code(code: u16) -> Option<ExprOp> {
        ExprOp::ALL.get(usize::from(code)).copied()
    }
}

/// One postfix instruction, as the device executes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExprInstr {
    pub op: ExprOp,
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
    /// A uniform draw in [low, high) per element, from the tile's random
    /// generator (on the device only).
    pub fn random_uniform(low: f64, high: f64) -> Expr {
        Expr {
            imm: low,
            imm2: high,
            ..Expr::leaf(ExprOp::RandomUniform)
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
            // A float8 result is encoded (rounded to nearest even) as stored.
            DeviceType::F32 | DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => {
                Expr::un(ExprOp::CastF32, e, false)
            }
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
            op: self.op,
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
    fn codes_names_and_arities_follow_the_list() {
        for (i, op) in ExprOp::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i);
            assert_eq!(ExprOp::from_code(i as u16), Some(*op));
        }
        assert_eq!(ExprOp::from_code(ExprOp::ALL.len() as u16), None);
        assert_eq!(ExprOp::Select.name(), "select");
        assert_eq!(ExprOp::CastF16.name(), "cast_f16");
        assert_eq!(ExprOp::ConstI.arity(), ExprArity::Leaf);
        assert_eq!(ExprOp::Clamp.arity(), ExprArity::Unary);
        assert_eq!(ExprOp::Fmod.arity(), ExprArity::Binary);
        assert_eq!(ExprOp::Select.arity(), ExprArity::Ternary);
    }

    #[test]
    fn flattens_postfix() {
        let e = Expr::bin(
            ExprOp::Add,
            Expr::input(0),
            Expr::un(ExprOp::Exp, Expr::input(1), false),
            false,
        );
        let ops: Vec<ExprOp> = e.flatten().iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            vec![ExprOp::Input, ExprOp::Input, ExprOp::Exp, ExprOp::Add]
        );
    }
}
