//! Host tensor constructors.

use ndarray::{ArrayD, IxDyn};
use neurenix_core::dtype::ElemType;
use neurenix_core::tensor::HostTensor;

use super::check::numel;

pub fn tfloat(dtype: ElemType, shape: &[usize], v: &[f64]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::float(
        dtype,
        ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap(),
    )
}
pub fn tf32(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F32, shape, v)
}
pub fn tf16(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F16, shape, v)
}
pub fn tf64(shape: &[usize], v: &[f64]) -> HostTensor {
    tfloat(ElemType::F64, shape, v)
}
pub fn tint(dtype: ElemType, shape: &[usize], v: &[i64]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::int(
        dtype,
        ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap(),
    )
}
pub fn ti64(shape: &[usize], v: &[i64]) -> HostTensor {
    tint(ElemType::I64, shape, v)
}
pub fn ti32(shape: &[usize], v: &[i64]) -> HostTensor {
    tint(ElemType::I32, shape, v)
}
pub fn tbool(shape: &[usize], v: &[bool]) -> HostTensor {
    assert_eq!(numel(shape), v.len(), "tensor data does not fill its shape");
    HostTensor::boolean(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
