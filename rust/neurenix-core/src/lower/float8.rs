//! Float8 matrix products (`precision="float8"`, the IPU21 only): MatMul,
//! Gemm and Conv multiply float8 operands on the float8 AMP, accumulating in
//! half; everything else computes as under `float16` (docs/precision.md).
//!
//! A float8 tensor is a tensor of codes (device type `F8E4M3FNUZ` or
//! `F8E5M2FNUZ`, Poplar's QUARTER formats F143 and F152) plus its *scale*, a
//! power of two `s`: the codes hold `x / s`, and the AMP reads `code * s`
//! (Poplar keeps `log2(s)` in the tensor's metadata). The scale is the
//! smallest power of two that brings the tensor's largest magnitude within
//! the format (`Float8::scale_for`):
//! - constant operands (weights) are encoded on the host at compile time
//!   and placed as float8 (one byte per element);
//! - computed operands (activations) are encoded on the device before each
//!   product: a max-magnitude reduction over the whole tensor whose last
//!   step makes the scale (`ReduceFinal::Float8Scale`), and the codes of
//!   `x / s` (`div_pow2`), rounded to nearest even and saturating.
//!
//! The product's vertices receive both scales.

use crate::backend::{ReduceFinal, ReduceOp, TensorId};
use crate::dtype::DeviceType;
use crate::error::{Error, Result};
use crate::expr::{Expr, ExprOp};
use crate::float8::Float8;
use crate::ir::ValueId;
use crate::tensor::HostTensor;

use super::precision::Precision;
use super::{DevTensor, LowerCx};

/// The scale of a float8 tensor: known on the host (constants) or computed
/// on the device (a float32 scalar tensor).
#[derive(Debug, Clone)]
pub(super) enum Float8Scale {
    Host(f64),
    Device(DevTensor),
}

/// The device type of codes of `format`.
fn device_type_of(format: Float8) -> Result<DeviceType> {
    match format {
        Float8::E4M3FNUZ => Ok(DeviceType::F8E4M3FNUZ),
        Float8::E5M2FNUZ => Ok(DeviceType::F8E5M2FNUZ),
        other => Err(Error::Internal(format!(
            "{other:?} is not a format the float8 AMP multiplies"
        ))),
    }
}

/// The ONNX TensorProto code of a format (the device's expression operations
/// name formats by it).
fn onnx_code(format: Float8) -> f64 {
    match format {
        Float8::E4M3FN => 17.0,
        Float8::E4M3FNUZ => 18.0,
        Float8::E5M2 => 19.0,
        Float8::E5M2FNUZ => 20.0,
    }
}

impl LowerCx<'_> {
    /// The device type of matrix-product operands, when this compile
    /// multiplies in float8.
    pub(super) fn float8_type(&self) -> Result<Option<DeviceType>> {
        if self.opts.precision == Precision::Float8 {
            device_type_of(self.opts.fp8_format).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A matrix-product operand from value `v`: under float8 a constant is
    /// encoded on the host (after `derive`, e.g. a transpose) and placed as
    /// float8; otherwise the value in float type `ft`, with `derive` applied
    /// to constants on the host as well.
    pub fn product_operand(
        &mut self,
        v: ValueId,
        ft: DeviceType,
        derive: Option<(&'static str, &dyn Fn(&HostTensor) -> HostTensor)>,
    ) -> Result<DevTensor> {
        if let (Some(f8), Some(c)) = (self.float8_type()?, self.graph.constant(v)) {
            let key = (v, derive.map_or("", |d| d.0), f8, self.current_ipu);
            if let Some(t) = self.derived.get(&key) {
                return Ok(t.clone());
            }
            let name = format!("{}{}", self.graph.value(v).name, key.1);
            let t = match derive {
                Some((_, f)) => self.float8_constant(&f(c), &name)?,
                None => self.float8_constant(c, &name)?,
            };
            self.derived.insert(key, t.clone());
            return Ok(t);
        }
        match derive {
            Some((tag, f)) if self.graph.constant(v).is_some() => {
                self.derived_constant(v, tag, ft, f)
            }
            _ => self.tensor_as(v, ft),
        }
    }

    /// Host tensor `c` encoded as float8 codes with its scale, placed on this
    /// node's IPU.
    fn float8_constant(&mut self, c: &HostTensor, name: &str) -> Result<DevTensor> {
        let f8 = self
            .float8_type()?
            .ok_or_else(|| Error::Internal("float8_constant outside float8".into()))?;
        let format = f8.float8().expect("a float8 device type");
        let values = c.as_float();
        let amax = values
            .iter()
            .map(|&x| (x as f32).abs() as f64)
            .fold(0.0f64, |m, x| {
                if x.is_nan() || m.is_nan() {
                    f64::NAN
                } else {
                    m.max(x)
                }
            });
        let scale = format.scale_for(amax);
        let codes: Vec<u8> = values
            .iter()
            .map(|&x| format.encode((x as f32) as f64 / scale, crate::float8::Overflow::Saturate))
            .collect();
        let id = self
            .backend
            .add_constant(name, f8, c.shape(), codes, self.current_ipu)?;
        self.float8_scales.insert(id, Float8Scale::Host(scale));
        Ok(self.here(id, c.shape().to_vec(), f8))
    }

    /// `t` (float) as float8 codes, its scale computed on the device from
    /// its largest magnitude: a reduction whose last step turns the
    /// magnitude into the scale, then the codes of `t / s` (an exact
    /// division by a power of two, rounded to float8 as stored).
    fn to_float8(&mut self, t: &DevTensor, f8: DeviceType) -> Result<DevTensor> {
        let format = f8.float8().expect("a float8 device type");
        let base = self.name();
        let axes: Vec<usize> = (0..t.shape.len()).collect();
        let scale_id = self.backend.reduce(
            t.id,
            &axes,
            ReduceOp::MaxAbs,
            ReduceFinal::Float8Scale,
            onnx_code(format),
            DeviceType::F32,
            self.current_ipu,
            &format!("{base}/float8_scale"),
        )?;
        let scale = self.here(scale_id, Vec::new(), DeviceType::F32);
        let codes = self.map_named(
            &Expr::bin(ExprOp::DivPow2, Expr::input(0), Expr::input(1), false),
            &[t.clone(), scale.clone()],
            f8,
            &t.shape,
            &format!("{base}/to_float8"),
        )?;
        self.float8_scales
            .insert(codes.id, Float8Scale::Device(scale));
        Ok(codes)
    }

    /// `t` as float8 of type `f8`: itself if it already is.
    fn as_float8(&mut self, t: &DevTensor, f8: DeviceType) -> Result<(DevTensor, Float8Scale)> {
        let t = if t.dtype == f8 {
            t.clone()
        } else if t.dtype.is_float() {
            self.to_float8(t, f8)?
        } else {
            return Err(Error::Internal(format!(
                "a {} operand cannot become float8",
                t.dtype
            )));
        };
        let scale = self
            .float8_scales
            .get(&t.id)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("float8 tensor {} has no scale", t.id)))?;
        Ok((t, scale))
    }

    /// A view of float8 tensor `from` (a reshape or rearrangement) shares
    /// its scale.
    pub(super) fn share_float8_scale(&mut self, from: TensorId, to: TensorId) {
        if let Some(s) = self.float8_scales.get(&from).cloned() {
            self.float8_scales.insert(to, s);
        }
    }

    /// Both operands of a product as float8, and their scales as float32
    /// scalar tensors (a constant's placed on the device here).
    pub(super) fn float8_operands(
        &mut self,
        a: &DevTensor,
        b: &DevTensor,
        f8: DeviceType,
    ) -> Result<(DevTensor, DevTensor, [TensorId; 2])> {
        let (a8, sa) = self.as_float8(a, f8)?;
        let (b8, sb) = self.as_float8(b, f8)?;
        let base = self.name();
        let scale_tensor = |cx: &mut Self, s: Float8Scale, which: &str| -> Result<TensorId> {
            match s {
                Float8Scale::Device(t) => Ok(t.id),
                Float8Scale::Host(x) => {
                    let c = HostTensor::float(
                        crate::dtype::ElemType::F32,
                        ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), x),
                    );
                    Ok(cx
                        .host_constant(
                            &c,
                            DeviceType::F32,
                            &format!("{base}/float8_scale_{which}"),
                        )?
                        .id)
                }
            }
        };
        let ia = scale_tensor(self, sa, "a")?;
        let ib = scale_tensor(self, sb, "b")?;
        Ok((a8, b8, [ia, ib]))
    }
}
