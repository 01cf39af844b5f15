//! The precision policy: which float type a value has on the device under
//! the compile's `precision` option, and which type matmul and convolution
//! partial sums accumulate in (docs/precision.md; the options themselves in
//! docs/options.md). The policy is [`float_type`] (and [`partials_type`] for
//! accumulation); model inputs and outputs and every operator (through
//! `LowerCx::float_type` and `LowerCx::device_type`) get their float types
//! from it.

use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::float8::Float8;

use super::LowerCx;

/// Arithmetic precision of a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Float32,
    Float16,
    Mixed,
    /// As `Float16`, but matrix products (MatMul, Gemm, Conv) multiply
    /// float8 operands on the IPU21's float8 AMP (`lower/float8.rs`).
    Float8,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "float32" => Ok(Precision::Float32),
            "float16" => Ok(Precision::Float16),
            "mixed" => Ok(Precision::Mixed),
            "float8" => Ok(Precision::Float8),
            _ => Err(Error::InvalidArgument(format!(
                "unknown precision '{s}'; expected 'float32', 'float16', 'mixed' or 'float8'"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::Float16 => "float16",
            Precision::Mixed => "mixed",
            Precision::Float8 => "float8",
        }
    }
}

/// The `fp8_format` option: the float8 format of matrix-product operands
/// under `float8`, "e4m3" (Poplar's F143, ONNX FLOAT8E4M3FNUZ) or "e5m2"
/// (F152, FLOAT8E5M2FNUZ).
pub fn parse_fp8_format(s: &str) -> Result<Float8> {
    match s {
        "e4m3" => Ok(Float8::E4M3FNUZ),
        "e5m2" => Ok(Float8::E5M2FNUZ),
        _ => Err(Error::InvalidArgument(format!(
            "unknown fp8_format '{s}'; expected 'e4m3' or 'e5m2'"
        ))),
    }
}

/// The option's name for a format [`parse_fp8_format`] accepts.
pub fn fp8_format_name(f: Float8) -> &'static str {
    match f {
        Float8::E5M2FNUZ | Float8::E5M2 => "e5m2",
        Float8::E4M3FNUZ | Float8::E4M3FN => "e4m3",
    }
}

/// The node attribute that puts a node in the `Master` role (training's
/// optimizer updates); no ONNX operator has an attribute of this name.
pub const MASTER_ATTR: &str = "neurenix.master";

/// What a float value is for, as far as the precision policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatRole {
    /// A model input, as the host streams it in.
    ModelInput,
    /// Computed by matmuls, convolutions, activations, element-wise
    /// operators and data movement.
    Compute,
    /// Computed by softmax, normalisations, reductions and pooling.
    Sensitive,
    /// A model output, as the host reads it back.
    ModelOutput,
    /// Training's float32 master weights and optimizer state, and their
    /// updates: float32 under every precision.
    Master,
}

/// The device float type of a value playing `role` under `precision`.
pub fn float_type(precision: Precision, role: FloatRole) -> DeviceType {
    match (precision, role) {
        (_, FloatRole::Master) => DeviceType::F32,
        (Precision::Float32, _) => DeviceType::F32,
        (Precision::Float16 | Precision::Float8, _) => DeviceType::F16,
        (Precision::Mixed, FloatRole::ModelInput | FloatRole::Compute) => DeviceType::F16,
        (Precision::Mixed, FloatRole::Sensitive | FloatRole::ModelOutput) => DeviceType::F32,
    }
}

/// The device type of a value of model type `elem` playing `role`: floats
/// follow [`float_type`], other types have one device type each.
pub fn device_type(precision: Precision, role: FloatRole, elem: ElemType) -> DeviceType {
    if elem.is_float() {
        float_type(precision, role)
    } else {
        elem.device_default()
    }
}

/// The type matmul and convolution partial sums accumulate in, for operands
/// of type `operands`: half only for half operands, and only when asked;
/// always half for float8 operands (the only partials their AMP has).
pub fn partials_type(operands: DeviceType, enable_half_partials: bool) -> DeviceType {
    if operands.float8().is_some() || (operands == DeviceType::F16 && enable_half_partials) {
        DeviceType::F16
    } else {
        DeviceType::F32
    }
}

impl LowerCx<'_> {
    /// The float type this node computes in (or, while the graph outputs are
    /// finished, the outputs' float type).
    pub fn float_type(&self) -> DeviceType {
        float_type(self.opts.precision, self.role)
    }
    /// Device type for a model type under this node's precision.
    pub fn device_type(&self, dt: ElemType) -> DeviceType {
        device_type(self.opts.precision, self.role, dt)
    }
    /// True when this node computes in half.
    pub fn half(&self) -> bool {
        self.float_type() == DeviceType::F16
    }
    /// Accumulation type of a matmul or convolution over `operands`.
    pub(super) fn partials_for(&self, operands: DeviceType) -> DeviceType {
        partials_type(operands, self.opts.enable_half_partials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_narrows_compute_and_inputs_only() {
        use FloatRole::*;
        let all = [ModelInput, Compute, Sensitive, ModelOutput];
        for role in all {
            assert_eq!(float_type(Precision::Float32, role), DeviceType::F32);
            assert_eq!(float_type(Precision::Float16, role), DeviceType::F16);
        }
        let mixed: Vec<DeviceType> = all
            .iter()
            .map(|&r| float_type(Precision::Mixed, r))
            .collect();
        assert_eq!(
            mixed,
            [
                DeviceType::F16,
                DeviceType::F16,
                DeviceType::F32,
                DeviceType::F32
            ]
        );
        assert_eq!(
            device_type(Precision::Float16, Compute, ElemType::I64),
            DeviceType::I32
        );
        assert_eq!(
            device_type(Precision::Mixed, ModelOutput, ElemType::F64),
            DeviceType::F32
        );
    }

    #[test]
    fn half_partials_only_for_half_operands() {
        assert_eq!(partials_type(DeviceType::F16, true), DeviceType::F16);
        assert_eq!(partials_type(DeviceType::F16, false), DeviceType::F32);
        assert_eq!(partials_type(DeviceType::F32, true), DeviceType::F32);
    }
}
