//! The device seam: what the compiler needs from a device's graph library.
//!
//! The simulator (the C++ core, bridged by `neurenix-sys`) is one
//! implementation; a Poplar-backed one would be another. The compiler only
//! ever talks to a `Backend`, so the core can be tested with no C++ at all.

use crate::dtype::DeviceType;
use crate::error::Result;
use crate::expr::ExprInstr;

pub type TensorId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Max = 1,
    Min = 2,
    Prod = 3,
    SumSquare = 4,
    SumAbs = 5,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceFinal {
    None = 0,
    Scale = 1,
    Sqrt = 2,
    Log = 3,
}

#[derive(Debug, Clone)]
pub struct MatMulParams {
    pub available_memory_proportion: f64,
    pub partials: DeviceType,
    pub out_dtype: DeviceType,
    pub ipu: u32,
    pub name: String,
}

/// A graph library for one device. Tensor handles are small integers valid
/// within one backend instance. Shapes are row-major.
pub trait Backend {
    fn add_input(&mut self, name: &str, dtype: DeviceType, shape: &[usize], ipu: u32) -> Result<TensorId>;
    fn add_constant(&mut self, name: &str, dtype: DeviceType, shape: &[usize], data: &[u8], ipu: u32)
        -> Result<TensorId>;
    /// [G, M, K] x [G, K, N] -> [G, M, N].
    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulParams) -> Result<TensorId>;
    /// Element-wise expression over operands broadcast to `out_shape`.
    fn map(
        &mut self,
        expr: &[ExprInstr],
        inputs: &[TensorId],
        out_dtype: DeviceType,
        out_shape: &[usize],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    /// Reduces `axes` away (the result drops them).
    #[allow(clippy::too_many_arguments)]
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
    ) -> Result<TensorId>;
    /// Same elements, new shape: free.
    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId>;
    /// Materialises a strided view (element offset and strides into x's
    /// row-major elements; stride 0 broadcasts).
    fn rearrange(
        &mut self,
        x: TensorId,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
        ipu: u32,
        name: &str,
    ) -> Result<TensorId>;
    fn concat(&mut self, xs: &[TensorId], axis: usize, ipu: u32, name: &str) -> Result<TensorId>;
    fn fill(&mut self, dtype: DeviceType, shape: &[usize], value: f64, ipu: u32, name: &str) -> Result<TensorId>;
    fn copy_to_ipu(&mut self, x: TensorId, ipu: u32, name: &str) -> Result<TensorId>;
    /// Streams `x` back to the host as output number (call order).
    fn mark_output(&mut self, x: TensorId, name: &str) -> Result<()>;
}
