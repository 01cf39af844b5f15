//! Generates `ExprOp` from the one list of element-wise expression
//! operations, `cpp/include/neurenix/expr_ops.def`, which the C++ core
//! expands into its own `ExprOpCode`: both sides get the same codes.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let def = manifest.join("../../cpp/include/neurenix/expr_ops.def");
    println!("cargo:rerun-if-changed={}", def.display());
    let text =
        std::fs::read_to_string(&def).unwrap_or_else(|e| panic!("reading {}: {e}", def.display()));
    let mut ops: Vec<(String, String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split("//").next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let inner = line
            .strip_prefix("NX_EXPR_OP(")
            .and_then(|l| l.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{}:{}: not an NX_EXPR_OP line", def.display(), n + 1));
        let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        let [name, text, arity] = parts[..] else {
            panic!(
                "{}:{}: expected (name, \"text\", arity)",
                def.display(),
                n + 1
            )
        };
        let text = text.trim_matches('"');
        ops.push((name.to_string(), text.to_string(), arity.to_string()));
    }
    let mut out = String::new();
    out.push_str("/// An element-wise expression operation; its code (`as u16`) is its\n");
    out.push_str("/// position in `cpp/include/neurenix/expr_ops.def`.\n");
    out.push_str(
        "#[repr(u16)]\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum ExprOp {\n",
    );
    for (i, (name, _, _)) in ops.iter().enumerate() {
        writeln!(out, "    {name} = {i},").unwrap();
    }
    out.push_str("}\n\nimpl ExprOp {\n");
    writeln!(
        out,
        "    /// Every operation, in code order.\n    pub const ALL: [ExprOp; {}] = [",
        ops.len()
    )
    .unwrap();
    for (name, _, _) in &ops {
        writeln!(out, "        ExprOp::{name},").unwrap();
    }
    out.push_str("    ];\n\n    /// The operation's name, as the C++ core gives it.\n");
    out.push_str("    pub fn name(self) -> &'static str {\n        match self {\n");
    for (name, text, _) in &ops {
        writeln!(out, "            ExprOp::{name} => \"{text}\",").unwrap();
    }
    out.push_str("        }\n    }\n\n    /// How many values the operation pops.\n");
    out.push_str("    pub fn arity(self) -> ExprArity {\n        match self {\n");
    for (name, _, arity) in &ops {
        writeln!(out, "            ExprOp::{name} => ExprArity::{arity},").unwrap();
    }
    out.push_str("        }\n    }\n}\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("expr_ops.rs");
    std::fs::write(dest, out).unwrap();
}
