//! Shared helpers of the neurenix-core integration tests.

mod backend;
mod check;
mod interp;
mod lowering;
mod model;
mod reference;
mod rng;
mod tensors;

pub use backend::*;
pub use check::*;
pub use interp::*;
pub use lowering::*;
pub use model::*;
pub use reference::*;
pub use rng::*;
pub use tensors::*;
