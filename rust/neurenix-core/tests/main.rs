//! The neurenix-core integration tests, as one test binary: each file here is
//! a module, and the shared helpers in `common` compile once, so the
//! compiler reports exactly the helpers no test uses (and the suite links
//! once instead of once per file). `Cargo.toml` turns off the per-file
//! binaries (`autotests = false`).

mod common;

mod backend_double;
mod checked_shapes;
mod executable;
mod expr_eval;
mod fold;
mod fuse;
mod lowering;
mod model_parts;
mod passes;
mod shard;
mod tensor;
