//! The device operations an operator emits, on its node's IPU: thin
//! wrappers over the [`Backend`](crate::backend::Backend) that fill in the
//! IPU, the node's name and the planning options, and track shapes.

use crate::backend::{ConvOptions, MatMulOptions, PoolOptions, ReduceFinal, ReduceOp, TensorId};
use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::expr::Expr;
use crate::tensor::checked_numel;

use super::{DevTensor, LowerCx};

/// Element strides of a row-major tensor of `shape`; an error when they do
/// not fit the int64 offsets views take.
pub fn row_major_strides(shape: &[usize]) -> Result<Vec<i64>> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = i64::try_from(shape[i + 1])
            .ok()
            .and_then(|d| s[i + 1].checked_mul(d))
            .ok_or_else(|| {
                Error::model(format!(
                    "a tensor of shape {shape:?} has more elements than int64 offsets can address"
                ))
            })?;
    }
    Ok(s)
}

impl LowerCx<'_> {
    /// A handle to backend tensor `id` on this node's IPU.
    pub(super) fn here(&self, id: TensorId, shape: Vec<usize>, dtype: DeviceType) -> DevTensor {
        DevTensor {
            id,
            shape,
            dtype,
            ipu: self.current_ipu,
        }
    }

    pub fn map_now(
        &mut self,
        expr: &Expr,
        inputs: &[DevTensor],
        dtype: DeviceType,
        shape: &[usize],
    ) -> Result<DevTensor> {
        let name = self.name();
        self.map_named(expr, inputs, dtype, shape, &name)
    }

    /// `map_now` under another name than the current node's.
    pub(super) fn map_named(
        &mut self,
        expr: &Expr,
        inputs: &[DevTensor],
        dtype: DeviceType,
        shape: &[usize],
        name: &str,
    ) -> Result<DevTensor> {
        let (expr, inputs) = super::fusion::distinct_inputs(expr.clone(), inputs.to_vec());
        let ins: Vec<TensorId> = inputs.iter().map(|t| t.id).collect();
        let id = self
            .backend
            .map(&expr.flatten(), &ins, dtype, shape, self.current_ipu, name)?;
        Ok(self.here(id, shape.to_vec(), dtype))
    }

    pub fn cast(&mut self, t: DevTensor, want: DeviceType) -> Result<DevTensor> {
        if t.dtype == want {
            return Ok(t);
        }
        let shape = t.shape.clone();
        let e = Expr::cast(Expr::input(0), want);
        self.map_now(&e, &[t], want, &shape)
    }

    pub fn matmul(
        &mut self,
        a: &DevTensor,
        b: &DevTensor,
        out_dtype: DeviceType,
    ) -> Result<DevTensor> {
        if a.shape.len() != 3 || b.shape.len() != 3 {
            return Err(Error::Internal(
                "matmul operands must be [G, M, K] and [G, K, N]".into(),
            ));
        }
        let (a, b, scales) = match self.float8_type()? {
            Some(f8) => {
                let (a8, b8, s) = self.float8_operands(a, b, f8)?;
                (a8, b8, Some(s))
            }
            None => (a.clone(), b.clone(), None),
        };
        let o = MatMulOptions {
            memory_proportion: self.opts.memory_proportion,
            partials: self.partials_for(a.dtype),
            out_dtype,
            ipu: self.current_ipu,
            name: self.name(),
            scales,
        };
        let id = self.backend.matmul(a.id, b.id, &o)?;
        Ok(self.here(id, vec![a.shape[0], a.shape[1], b.shape[2]], out_dtype))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &mut self,
        x: &DevTensor,
        axes: &[usize],
        op: ReduceOp,
        final_op: ReduceFinal,
        scale: f64,
        out_dtype: DeviceType,
    ) -> Result<DevTensor> {
        let name = self.name();
        let id = self.backend.reduce(
            x.id,
            axes,
            op,
            final_op,
            scale,
            out_dtype,
            self.current_ipu,
            &name,
        )?;
        let shape: Vec<usize> = x
            .shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect();
        Ok(self.here(id, shape, out_dtype))
    }

    pub fn reshape(&mut self, x: &DevTensor, shape: &[usize]) -> Result<DevTensor> {
        if x.shape == shape {
            return Ok(x.clone());
        }
        if checked_numel(shape).is_none() || checked_numel(shape) != checked_numel(&x.shape) {
            return Err(Error::Internal(format!(
                "reshape {:?} -> {:?}",
                x.shape, shape
            )));
        }
        let id = self.backend.reshape(x.id, shape)?;
        self.share_float8_scale(x.id, id);
        Ok(DevTensor {
            id,
            shape: shape.to_vec(),
            dtype: x.dtype,
            ipu: x.ipu,
        })
    }

    /// Materialises a strided view of x.
    pub fn rearrange(
        &mut self,
        x: &DevTensor,
        offset: i64,
        shape: &[usize],
        strides: &[i64],
    ) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .rearrange(x.id, offset, shape, strides, self.current_ipu, &name)?;
        self.share_float8_scale(x.id, id);
        Ok(self.here(id, shape.to_vec(), x.dtype))
    }

    pub fn transpose(&mut self, x: &DevTensor, perm: &[usize]) -> Result<DevTensor> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let strides = row_major_strides(&x.shape)?;
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
        let st: Vec<i64> = perm.iter().map(|&p| strides[p]).collect();
        // Moving only size-1 axes keeps the element order: a free reshape.
        let kept: Vec<usize> = perm.iter().copied().filter(|&p| x.shape[p] != 1).collect();
        if kept.windows(2).all(|w| w[0] < w[1]) {
            return self.reshape(x, &shape);
        }
        self.rearrange(x, 0, &shape, &st)
    }

    /// Broadcasts x to `shape` (numpy rules), materialised.
    pub fn expand(&mut self, x: &DevTensor, shape: &[usize]) -> Result<DevTensor> {
        if x.shape == shape {
            return Ok(x.clone());
        }
        let strides = row_major_strides(&x.shape)?;
        let lead = shape
            .len()
            .checked_sub(x.shape.len())
            .ok_or_else(|| Error::Internal(format!("expand of {:?} to {shape:?}", x.shape)))?;
        let st: Vec<i64> = (0..shape.len())
            .map(|i| {
                if i < lead || x.shape[i - lead] == 1 {
                    0
                } else {
                    strides[i - lead]
                }
            })
            .collect();
        self.rearrange(x, 0, shape, &st)
    }

    pub fn concat(&mut self, xs: &[DevTensor], axis: usize) -> Result<DevTensor> {
        let ids: Vec<TensorId> = xs.iter().map(|t| t.id).collect();
        let name = self.name();
        let id = self.backend.concat(&ids, axis, self.current_ipu, &name)?;
        let mut shape = xs[0].shape.clone();
        shape[axis] = xs
            .iter()
            .try_fold(0usize, |n, t| n.checked_add(t.shape[axis]))
            .ok_or_else(|| Error::Internal(format!("concatenated length overflows: {shape:?}")))?;
        Ok(self.here(id, shape, xs[0].dtype))
    }

    /// 2-D convolution; `o.ipu`, `o.name`, partials and memory proportion are
    /// filled in here.
    pub fn conv(
        &mut self,
        x: &DevTensor,
        w: &DevTensor,
        bias: Option<&DevTensor>,
        mut o: ConvOptions,
        out_shape: &[usize],
    ) -> Result<DevTensor> {
        o.ipu = self.current_ipu;
        o.name = self.name();
        o.memory_proportion = self.opts.memory_proportion;
        let (x, w) = match self.float8_type()? {
            Some(f8) => {
                let (x8, w8, s) = self.float8_operands(x, w, f8)?;
                o.scales = Some(s);
                (x8, w8)
            }
            None => (x.clone(), w.clone()),
        };
        o.partials = self.partials_for(x.dtype);
        let id = self.backend.conv(x.id, w.id, bias.map(|b| b.id), &o)?;
        Ok(self.here(id, out_shape.to_vec(), o.out_dtype))
    }

    /// Pooling; `o.ipu` and `o.name` are filled in here.
    pub fn pool(&mut self, x: &DevTensor, mut o: PoolOptions) -> Result<DevTensor> {
        o.ipu = self.current_ipu;
        o.name = self.name();
        let id = self.backend.pool(x.id, &o)?;
        let mut shape = x.shape.clone();
        let r = shape.len();
        shape[r - 2] = o.out_hw[0] as usize;
        shape[r - 1] = o.out_hw[1] as usize;
        Ok(self.here(id, shape, x.dtype))
    }

    /// Rows of a [V, D] table picked by run-time int32 indices: [n, D].
    pub fn gather_rows(&mut self, table: &DevTensor, indices: &DevTensor) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .gather_rows(table.id, indices.id, self.current_ipu, &name)?;
        Ok(self.here(id, vec![indices.numel(), table.shape[1]], table.dtype))
    }

    pub fn fill(&mut self, dtype: DeviceType, shape: &[usize], value: f64) -> Result<DevTensor> {
        let name = self.name();
        let id = self
            .backend
            .fill(dtype, shape, value, self.current_ipu, &name)?;
        Ok(self.here(id, shape.to_vec(), dtype))
    }
}
