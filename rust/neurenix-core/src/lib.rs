//! neurenix-core: the model IR, graph passes, the sharding planner and the
//! lowering of models onto an IPU graph library behind the [`backend::Backend`]
//! trait. Pure Rust: no Python, no C++.

pub mod backend;
pub mod compile;
pub mod dtype;
pub mod error;
pub mod executable;
pub mod expr;
pub mod float8;
pub mod host_threads;
pub mod ir;
pub mod lower;
pub mod model_parts;
pub mod ops;
pub mod passes;
pub mod pipeline;
pub mod progress;
pub mod report;
pub mod shard;
pub mod tensor;
pub mod topology;
pub mod train;

pub use compile::{compile, CompileOptions};
pub use error::{Error, Result};
pub use executable::Executable;
