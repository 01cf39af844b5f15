//! Shared helpers of the neurenix-core integration tests.

mod backend;
mod check;
mod interp;
mod lowering;
mod model;
mod one_node;
mod reference;
mod rng;
mod shape_backend;
mod tensors;

pub use backend::*;
pub use check::*;
pub use interp::*;
pub use lowering::*;
pub use model::*;
pub use one_node::*;
pub use reference::*;
pub use rng::*;
pub use shape_backend::*;
pub use tensors::*;
