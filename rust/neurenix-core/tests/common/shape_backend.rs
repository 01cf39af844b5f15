//! `ShapeBackend`: a backend that only records what is built (the kind,
//! name and shape of every tensor), holding no data. Lowering onto it shows
//! what the compiler asks a device for, also for shapes no host could
//! evaluate (a 2^40-element view, a 10^12-row input).

use neurenix_core::backend::{
    Backend, ConvOptions, MatMulOptions, PoolOptions, ReduceFinal, ReduceOp, TensorId,
};
use neurenix_core::compile::{lower_model, CompileOptions, Lowered};
use neurenix_core::dtype::{DeviceType, ElemType};
use neurenix_core::error::Result;
use neurenix_core::expr::ExprInstr;
use neurenix_core::ir::Model;
use neurenix_core::passes::TensorSpec;

/// One tensor the compiler built.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub kind: &'static str,
    pub name: String,
    pub shape: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct ShapeBackend {
    pub built: Vec<Built>,
    pub outputs: Vec<String>,
}

impl ShapeBackend {
    fn add(&mut self, kind: &'static str, name: &str, shape: Vec<usize>) -> Result<TensorId> {
        self.built.push(Built {
            kind,
            name: name.into(),
            shape,
        });
        Ok((self.built.len() - 1) as TensorId)
    }
    fn shape(&self, id: TensorId) -> Vec<usize> {
        self.built[id as usize].shape.clone()
    }
    pub fn of_kind(&self, kind: &str) -> Vec<&Built> {
        self.built.iter().filter(|b| b.kind == kind).collect()
    }
}

impl Backend for ShapeBackend {
    fn add_input(
        &mut self,
        name: &str,
        _: DeviceType,
        shape: &[usize],
        _: u32,
    ) -> Result<TensorId> {
        self.add("input", name, shape.to_vec())
    }
    fn add_constant(
        &mut self,
        name: &str,
        _: DeviceType,
        shape: &[usize],
        _: Vec<u8>,
        _: u32,
    ) -> Result<TensorId> {
        self.add("constant", name, shape.to_vec())
    }
    fn matmul(&mut self, a: TensorId, b: TensorId, p: &MatMulOptions) -> Result<TensorId> {
        let (a, b) = (self.shape(a), self.shape(b));
        self.add("matmul", &p.name, vec![a[0], a[1], b[2]])
    }
    fn map(
        &mut self,
        _: &[ExprInstr],
        _: &[TensorId],
        _: DeviceType,
        out_shape: &[usize],
        _: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.add("map", name, out_shape.to_vec())
    }
    fn reduce(
        &mut self,
        x: TensorId,
        axes: &[usize],
        _: ReduceOp,
        _: ReduceFinal,
        _: f64,
        _: DeviceType,
        _: u32,
        name: &str,
    ) -> Result<TensorId> {
        let shape = self
            .shape(x)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, d)| d)
            .collect();
        self.add("reduce", name, shape)
    }
    fn reshape(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        let name = self.built[x as usize].name.clone();
        self.add("reshape", &name, shape.to_vec())
    }
    fn rearrange(
        &mut self,
        _: TensorId,
        _: i64,
        shape: &[usize],
        _: &[i64],
        _: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.add("rearrange", name, shape.to_vec())
    }
    fn concat(&mut self, xs: &[TensorId], axis: usize, _: u32, name: &str) -> Result<TensorId> {
        let mut shape = self.shape(xs[0]);
        shape[axis] = xs.iter().map(|&x| self.shape(x)[axis]).sum();
        self.add("concat", name, shape)
    }
    fn fill(
        &mut self,
        _: DeviceType,
        shape: &[usize],
        _: f64,
        _: u32,
        name: &str,
    ) -> Result<TensorId> {
        self.add("fill", name, shape.to_vec())
    }
    fn mark_output(&mut self, _: TensorId, name: &str) -> Result<()> {
        self.outputs.push(name.into());
        Ok(())
    }
    fn conv(
        &mut self,
        x: TensorId,
        w: TensorId,
        _: Option<TensorId>,
        p: &ConvOptions,
    ) -> Result<TensorId> {
        // Batch and output channels (the compiler tracks the rest).
        let (x, w) = (self.shape(x), self.shape(w));
        self.add("conv", &p.name, vec![x[0], w[0]])
    }
    fn pool(&mut self, x: TensorId, p: &PoolOptions) -> Result<TensorId> {
        let mut shape = self.shape(x);
        let r = shape.len();
        shape[r - 2] = p.out_hw[0] as usize;
        shape[r - 1] = p.out_hw[1] as usize;
        self.add("pool", &p.name, shape)
    }
    fn gather_rows(
        &mut self,
        table: TensorId,
        indices: TensorId,
        _: u32,
        name: &str,
    ) -> Result<TensorId> {
        let n = self.shape(indices).iter().product();
        let d = self.shape(table)[1];
        self.add("gather_rows", name, vec![n, d])
    }
}

/// A compile specification: one input's name, type and shape.
pub fn spec(name: &str, dtype: ElemType, shape: &[usize]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

/// Lowers `model` for `inputs` onto a fresh [`ShapeBackend`].
pub fn try_lower_shapes(
    model: &Model,
    inputs: &[TensorSpec],
    opts: &CompileOptions,
) -> Result<(Lowered, ShapeBackend)> {
    let mut be = ShapeBackend::default();
    let l = lower_model(model, inputs, opts, &mut be)?;
    Ok((l, be))
}
