//! Host tensors: constants of the model, values folded at compile time, and
//! the conversions between host element types and tile-memory types.
//!
//! Host evaluation keeps one numeric domain per kind (f64 for floats, i64 for
//! integers, bool) and re-rounds to the declared type after every operation,
//! so a folded float32 result is the correctly rounded float32 one.

use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use crate::dtype::{DeviceType, ElemType};
use crate::error::{Error, Result};
use crate::float8::Overflow;
use crate::host_threads::map_blocks;

#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Float(ArrayD<f64>),
    Int(ArrayD<i64>),
    Bool(ArrayD<bool>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: ElemType,
    pub data: Data,
}

/// float64 -> float32 rounded to odd: truncated toward zero, with the last
/// bit set when anything was cut off. A second rounding of the result to a
/// type with at most 22 significant bits (float16, bfloat16) is then the
/// single correctly rounded one.
fn f64_to_f32_odd(v: f64) -> f32 {
    let r = v as f32;
    if !r.is_finite() || r as f64 == v {
        return r;
    }
    let mut t = r;
    if (t as f64).abs() > v.abs() {
        t = f32::from_bits(t.to_bits() - 1);
    }
    f32::from_bits(t.to_bits() | 1)
}

/// float64 -> float16 with a single round-to-nearest-even. (`f16::from_f64`
/// may go through float32 and round twice.)
pub fn f64_to_f16(v: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(v))
}

/// float64 -> bfloat16 with a single round-to-nearest-even.
/// (`bf16::from_f64` drops the low 32 bits first, which can turn a value
/// just above a tie into the tie.)
pub fn f64_to_bf16(v: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(v))
}

/// Rounds a value to what `dtype` can hold (float8: to nearest, finite
/// values beyond the format saturating, as ONNX's Cast with `saturate=1`).
pub fn round_float(dtype: ElemType, v: f64) -> f64 {
    match dtype {
        ElemType::F32 => v as f32 as f64,
        ElemType::F16 => f64_to_f16(v).to_f64(),
        ElemType::BF16 => f64_to_bf16(v).to_f64(),
        _ => match dtype.float8() {
            Some(f) => f.round(v, Overflow::Keep),
            None => v,
        },
    }
}

/// Wraps an integer into `dtype`'s range (two's complement, as C casts do).
pub fn wrap_int(dtype: ElemType, v: i64) -> i64 {
    match dtype {
        ElemType::I8 => v as i8 as i64,
        ElemType::U8 => v as u8 as i64,
        ElemType::I16 => v as i16 as i64,
        ElemType::U16 => v as u16 as i64,
        ElemType::I32 => v as i32 as i64,
        ElemType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// Float to integer as ONNX Cast does it: truncation toward zero, saturating.
pub fn float_to_int(dtype: ElemType, v: f64) -> i64 {
    if v.is_nan() {
        return 0;
    }
    let t = v.trunc();
    let (lo, hi) = match dtype {
        ElemType::I8 => (i8::MIN as f64, i8::MAX as f64),
        ElemType::U8 => (0.0, u8::MAX as f64),
        ElemType::I16 => (i16::MIN as f64, i16::MAX as f64),
        ElemType::U16 => (0.0, u16::MAX as f64),
        ElemType::I32 => (i32::MIN as f64, i32::MAX as f64),
        ElemType::U32 => (0.0, u32::MAX as f64),
        ElemType::U64 => (0.0, u64::MAX as f64),
        _ => (i64::MIN as f64, i64::MAX as f64),
    };
    t.clamp(lo, hi) as i64
}

/// Elements of a tensor of `shape`, or None if the count overflows.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// True when a host array of `shape` can exist: ndarray requires the
/// product of the non-zero dimensions to fit an `isize`, also for an empty
/// array (`[0, 2^40, 2^40]` holds no element and is still refused).
pub fn host_shape_ok(shape: &[usize]) -> bool {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .is_some_and(|n| isize::try_from(n).is_ok())
}

/// The error for a shape no host array can have.
fn too_large(shape: &[usize]) -> Error {
    Error::model(format!(
        "a tensor of shape {shape:?} has more elements than the host can address"
    ))
}

/// `v` as a host array of `shape`: an error, not a panic, when the shape is
/// one no host array can have or `v` does not fill it.
pub fn host_array<T>(shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
    if !host_shape_ok(shape) {
        return Err(too_large(shape));
    }
    let n = v.len();
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| {
        Error::Internal(format!(
            "{n} values do not make a tensor of shape {shape:?}: {e}"
        ))
    })
}

impl HostTensor {
    pub fn float(dtype: ElemType, a: ArrayD<f64>) -> HostTensor {
        HostTensor {
            dtype,
            data: Data::Float(a.mapv(|v| round_float(dtype, v))),
        }
    }
    pub fn int(dtype: ElemType, a: ArrayD<i64>) -> HostTensor {
        HostTensor {
            dtype,
            data: Data::Int(a.mapv(|v| wrap_int(dtype, v))),
        }
    }
    pub fn boolean(a: ArrayD<bool>) -> HostTensor {
        HostTensor {
            dtype: ElemType::Bool,
            data: Data::Bool(a),
        }
    }
    pub fn from_i64s(shape: &[usize], v: Vec<i64>) -> HostTensor {
        HostTensor {
            dtype: ElemType::I64,
            data: Data::Int(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape")),
        }
    }
    pub fn from_f32s(shape: &[usize], v: Vec<f32>) -> HostTensor {
        let v: Vec<f64> = v.into_iter().map(f64::from).collect();
        HostTensor {
            dtype: ElemType::F32,
            data: Data::Float(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape")),
        }
    }
    /// A tensor of `dtype` filled with `value`. The caller bounds the
    /// element count (this allocates them all); a shape no host array can
    /// have is an error.
    pub fn full(dtype: ElemType, shape: &[usize], value: f64) -> Result<HostTensor> {
        if !host_shape_ok(shape) {
            return Err(too_large(shape));
        }
        Ok(if dtype.is_float() {
            HostTensor::float(dtype, ArrayD::from_elem(IxDyn(shape), value))
        } else if dtype == ElemType::Bool {
            HostTensor::boolean(ArrayD::from_elem(IxDyn(shape), value != 0.0))
        } else {
            HostTensor::int(dtype, ArrayD::from_elem(IxDyn(shape), value as i64))
        })
    }

    pub fn shape(&self) -> &[usize] {
        match &self.data {
            Data::Float(a) => a.shape(),
            Data::Int(a) => a.shape(),
            Data::Bool(a) => a.shape(),
        }
    }
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// Values as f64 in row-major order.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            // A contiguous array copies as one slice (weights are millions of values).
            Data::Float(a) => match a.as_slice() {
                Some(s) => s.to_vec(),
                None => a.iter().copied().collect(),
            },
            Data::Int(a) => a.iter().map(|&v| v as f64).collect(),
            Data::Bool(a) => a.iter().map(|&v| if v { 1.0 } else { 0.0 }).collect(),
        }
    }
    /// Values as i64 in row-major order (floats truncated).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match &self.data {
            Data::Float(a) => a.iter().map(|&v| v as i64).collect(),
            Data::Int(a) => a.iter().copied().collect(),
            Data::Bool(a) => a.iter().map(|&v| v as i64).collect(),
        }
    }
    pub fn as_float(&self) -> ArrayD<f64> {
        match &self.data {
            Data::Float(a) => a.clone(),
            Data::Int(a) => a.mapv(|v| v as f64),
            Data::Bool(a) => a.mapv(|v| if v { 1.0 } else { 0.0 }),
        }
    }
    pub fn as_int(&self) -> ArrayD<i64> {
        match &self.data {
            Data::Float(a) => a.mapv(|v| v as i64),
            Data::Int(a) => a.clone(),
            Data::Bool(a) => a.mapv(|v| v as i64),
        }
    }
    pub fn as_bool(&self) -> ArrayD<bool> {
        match &self.data {
            Data::Float(a) => a.mapv(|v| v != 0.0),
            Data::Int(a) => a.mapv(|v| v != 0),
            Data::Bool(a) => a.clone(),
        }
    }

    /// ONNX Cast semantics.
    pub fn cast(&self, to: ElemType) -> HostTensor {
        if to.is_float() {
            HostTensor::float(to, self.as_float())
        } else if to == ElemType::Bool {
            HostTensor::boolean(self.as_bool())
        } else {
            match &self.data {
                Data::Float(a) => HostTensor {
                    dtype: to,
                    data: Data::Int(a.mapv(|v| float_to_int(to, v))),
                },
                _ => HostTensor::int(to, self.as_int()),
            }
        }
    }

    pub fn reshape(&self, shape: &[usize]) -> Result<HostTensor> {
        if checked_numel(shape) != Some(self.numel()) {
            return Err(Error::Internal(format!(
                "reshape of {:?} to {:?}",
                self.shape(),
                shape
            )));
        }
        let data = match &self.data {
            Data::Float(a) => Data::Float(host_array(shape, a.iter().copied().collect())?),
            Data::Int(a) => Data::Int(host_array(shape, a.iter().copied().collect())?),
            Data::Bool(a) => Data::Bool(host_array(shape, a.iter().copied().collect())?),
        };
        Ok(HostTensor {
            dtype: self.dtype,
            data,
        })
    }

    /// Decodes little-endian raw bytes of `dtype`.
    pub fn from_bytes(dtype: ElemType, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
        let expect = checked_numel(shape).and_then(|n| n.checked_mul(dtype.size()));
        if expect != Some(bytes.len()) {
            let need = expect.map_or("more than this host can address".to_string(), |b| {
                format!("{b} bytes")
            });
            return Err(Error::InvalidArgument(format!(
                "{} bytes do not hold a {dtype} tensor of shape {shape:?} ({need})",
                bytes.len(),
            )));
        }
        if !host_shape_ok(shape) {
            return Err(too_large(shape));
        }
        macro_rules! ints {
            ($t:ty) => {{
                let v: Vec<i64> = bytes
                    .chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| <$t>::from_le_bytes(c.try_into().unwrap()) as i64)
                    .collect();
                Data::Int(host_array(shape, v)?)
            }};
        }
        let data = match dtype {
            // Floats decoded on the host's threads (weights are millions; the
            // blocks of 4096 are not needed, long runs are).
            ElemType::F32 => Data::Float(host_array(
                shape,
                map_blocks(bytes, 4096, |_| {
                    |b: &[u8; 4]| [f32::from_le_bytes(*b) as f64]
                }),
            )?),
            ElemType::F64 => Data::Float(host_array(
                shape,
                map_blocks(bytes, 4096, |_| |b: &[u8; 8]| [f64::from_le_bytes(*b)]),
            )?),
            ElemType::F16 => Data::Float(host_array(
                shape,
                map_blocks(bytes, 4096, |_| {
                    |b: &[u8; 2]| [f16::from_le_bytes(*b).to_f64()]
                }),
            )?),
            ElemType::BF16 => Data::Float(host_array(
                shape,
                map_blocks(bytes, 4096, |_| {
                    |b: &[u8; 2]| [bf16::from_le_bytes(*b).to_f64()]
                }),
            )?),
            ElemType::F8E4M3FN | ElemType::F8E4M3FNUZ | ElemType::F8E5M2 | ElemType::F8E5M2FNUZ => {
                let f = dtype.float8().expect("a float8 type");
                Data::Float(host_array(
                    shape,
                    bytes.iter().map(|&b| f.decode(b)).collect(),
                )?)
            }
            ElemType::Bool => {
                Data::Bool(host_array(shape, bytes.iter().map(|&b| b != 0).collect())?)
            }
            ElemType::I8 => ints!(i8),
            ElemType::U8 => ints!(u8),
            ElemType::I16 => ints!(i16),
            ElemType::U16 => ints!(u16),
            ElemType::I32 => ints!(i32),
            ElemType::U32 => ints!(u32),
            ElemType::I64 => ints!(i64),
            ElemType::U64 => {
                let mut v = Vec::with_capacity(bytes.len() / 8);
                for c in bytes.chunks_exact(8) {
                    let x = u64::from_le_bytes(c.try_into().unwrap());
                    v.push(i64::try_from(x).map_err(|_| {
                        Error::InvalidArgument(format!(
                            "uint64 value {x} is outside the range neurenix computes in"
                        ))
                    })?);
                }
                Data::Int(host_array(shape, v)?)
            }
        };
        Ok(HostTensor { dtype, data })
    }

    /// Encodes as little-endian raw bytes of its own dtype.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.numel() * self.dtype.size());
        match &self.data {
            Data::Float(a) => {
                for &v in a.iter() {
                    match self.dtype {
                        ElemType::F64 => out.extend_from_slice(&v.to_le_bytes()),
                        ElemType::F16 => out.extend_from_slice(&f64_to_f16(v).to_le_bytes()),
                        ElemType::BF16 => out.extend_from_slice(&f64_to_bf16(v).to_le_bytes()),
                        dt => match dt.float8() {
                            Some(f) => out.push(f.encode(v, Overflow::Keep)),
                            None => out.extend_from_slice(&(v as f32).to_le_bytes()),
                        },
                    }
                }
            }
            Data::Int(a) => {
                let size = self.dtype.size();
                for &v in a.iter() {
                    out.extend_from_slice(&v.to_le_bytes()[..size]);
                }
            }
            Data::Bool(a) => out.extend(a.iter().map(|&b| b as u8)),
        }
        out
    }

    /// The values as floats in row-major order, borrowed when they already
    /// are (weights: no copy of millions of values).
    pub fn float_values(&self) -> std::borrow::Cow<'_, [f64]> {
        match &self.data {
            Data::Float(a) => match a.as_slice() {
                Some(s) => std::borrow::Cow::Borrowed(s),
                None => std::borrow::Cow::Owned(a.iter().copied().collect()),
            },
            _ => std::borrow::Cow::Owned(self.to_f64_vec()),
        }
    }
    /// Encodes for tile memory of type `dev`; integers outside int32 are an error.
    pub fn to_device_bytes(&self, dev: DeviceType, what: &str) -> Result<Vec<u8>> {
        // Floats are encoded on the host's threads (a weight has millions;
        // any long blocks will do).
        fn encode<const N: usize>(values: &[f64], f: impl Fn(f64) -> [u8; N] + Sync) -> Vec<u8> {
            map_blocks(values, 4096, |_| |&[v]: &[f64; 1]| f(v))
        }
        Ok(match dev {
            DeviceType::F32 => encode(&self.float_values(), |v| (v as f32).to_le_bytes()),
            DeviceType::F16 => encode(&self.float_values(), |v| f64_to_f16(v).to_le_bytes()),
            DeviceType::I32 => {
                let mut out = Vec::with_capacity(self.numel() * 4);
                for v in self.as_int().iter() {
                    let x = i32::try_from(*v).map_err(|_| {
                        Error::InvalidArgument(format!(
                            "{what} holds {v}, outside the int32 range the IPU computes integers in"
                        ))
                    })?;
                    out.extend_from_slice(&x.to_le_bytes());
                }
                out
            }
            DeviceType::Bool => self.as_bool().iter().map(|&b| b as u8).collect(),
            DeviceType::F8E4M3FNUZ | DeviceType::F8E5M2FNUZ => {
                let f = dev.float8().expect("a float8 device type");
                self.as_float()
                    .iter()
                    .map(|&v| f.encode(v, crate::float8::Overflow::Saturate))
                    .collect()
            }
        })
    }
}

/// Converts raw host data of `from` into tile-memory data of `to`, with fast
/// paths for the common cases; data already in the device's type is
/// borrowed, not copied. Integers that do not fit int32 are an error naming
/// `what`.
pub fn host_to_device<'a>(
    from: ElemType,
    bytes: &'a [u8],
    to: DeviceType,
    what: &str,
) -> Result<Cow<'a, [u8]>> {
    match (from, to) {
        (ElemType::F32, DeviceType::F32)
        | (ElemType::I32, DeviceType::I32)
        | (ElemType::Bool, DeviceType::Bool)
        | (ElemType::F16, DeviceType::F16) => return Ok(Cow::Borrowed(bytes)),
        _ => {}
    }
    host_to_device_converted(from, bytes, to, what).map(Cow::Owned)
}

fn host_to_device_converted(
    from: ElemType,
    bytes: &[u8],
    to: DeviceType,
    what: &str,
) -> Result<Vec<u8>> {
    match (from, to) {
        (ElemType::F32, DeviceType::F16) => {
            let mut out = Vec::with_capacity(bytes.len() / 2);
            for c in bytes.chunks_exact(4) {
                out.extend_from_slice(
                    &f16::from_f32(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes(),
                );
            }
            Ok(out)
        }
        (ElemType::BF16, DeviceType::F32) => {
            // Exact: a bfloat16 is the top half of a float32.
            let mut out = Vec::with_capacity(bytes.len() * 2);
            for c in bytes.chunks_exact(2) {
                out.extend_from_slice(&[0, 0, c[0], c[1]]);
            }
            Ok(out)
        }
        (ElemType::F64, DeviceType::F32) => {
            let mut out = Vec::with_capacity(bytes.len() / 2);
            for (i, c) in bytes.chunks_exact(8).enumerate() {
                let v = f64::from_le_bytes(c.try_into().unwrap());
                if v.is_finite() && v.abs() > f32::MAX as f64 {
                    return Err(Error::InputMismatch {
                        input: what.to_string(),
                        message: format!(
                            "input '{what}' element {i} is {v:e}, outside the float32 range the IPU computes float64 in"
                        ),
                    });
                }
                out.extend_from_slice(&(v as f32).to_le_bytes());
            }
            Ok(out)
        }
        (ElemType::I64, DeviceType::I32) => {
            let mut out = Vec::with_capacity(bytes.len() / 2);
            for (i, c) in bytes.chunks_exact(8).enumerate() {
                let v = i64::from_le_bytes(c.try_into().unwrap());
                let x = i32::try_from(v).map_err(|_| Error::InputMismatch {
                    input: what.to_string(),
                    message: format!(
                        "input '{what}' element {i} is {v}, outside the int32 range the IPU computes integers in"
                    ),
                })?;
                out.extend_from_slice(&x.to_le_bytes());
            }
            Ok(out)
        }
        _ => {
            let n = bytes.len() / from.size();
            let as_input = |e: Error| match e {
                Error::InvalidArgument(m) => Error::InputMismatch {
                    input: what.to_string(),
                    message: format!("input '{what}': {m}"),
                },
                other => other,
            };
            let t = HostTensor::from_bytes(from, &[n], bytes).map_err(as_input)?;
            t.to_device_bytes(to, &format!("input '{what}'"))
                .map_err(as_input)
        }
    }
}

/// Converts tile-memory data of `from` into host data of the model's declared
/// type `to` (borrowed when it is already of that type).
pub fn device_to_host(from: DeviceType, bytes: &[u8], to: ElemType) -> Result<Cow<'_, [u8]>> {
    match (from, to) {
        (DeviceType::F32, ElemType::F32)
        | (DeviceType::I32, ElemType::I32)
        | (DeviceType::Bool, ElemType::Bool)
        | (DeviceType::F16, ElemType::F16) => return Ok(Cow::Borrowed(bytes)),
        _ => {}
    }
    device_to_host_converted(from, bytes, to).map(Cow::Owned)
}

fn device_to_host_converted(from: DeviceType, bytes: &[u8], to: ElemType) -> Result<Vec<u8>> {
    match (from, to) {
        (DeviceType::F16, ElemType::F32) => {
            let mut out = Vec::with_capacity(bytes.len() * 2);
            for c in bytes.chunks_exact(2) {
                out.extend_from_slice(
                    &f16::from_le_bytes(c.try_into().unwrap())
                        .to_f32()
                        .to_le_bytes(),
                );
            }
            Ok(out)
        }
        (DeviceType::I32, ElemType::I64) => {
            let mut out = Vec::with_capacity(bytes.len() * 2);
            for c in bytes.chunks_exact(4) {
                out.extend_from_slice(
                    &(i32::from_le_bytes(c.try_into().unwrap()) as i64).to_le_bytes(),
                );
            }
            Ok(out)
        }
        _ => {
            let n = bytes.len() / from.size();
            let t = HostTensor::from_bytes(from.as_elem_type(), &[n], bytes)?;
            Ok(t.cast(to).to_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_bytes() {
        for dt in [
            ElemType::F32,
            ElemType::F64,
            ElemType::F16,
            ElemType::I64,
            ElemType::I32,
            ElemType::U8,
            ElemType::Bool,
            ElemType::I8,
        ] {
            let t = HostTensor::full(dt, &[2, 3], 1.0).unwrap();
            let b = t.to_bytes();
            assert_eq!(b.len(), 6 * dt.size());
            assert_eq!(HostTensor::from_bytes(dt, &[2, 3], &b).unwrap(), t);
        }
    }

    #[test]
    fn cast_follows_onnx() {
        let t = HostTensor::float(
            ElemType::F32,
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![-1.7, 2.5, 300.0]).unwrap(),
        );
        assert_eq!(t.cast(ElemType::I32).to_i64_vec(), vec![-1, 2, 300]);
        assert_eq!(t.cast(ElemType::U8).to_i64_vec(), vec![0, 2, 255]);
        assert_eq!(t.cast(ElemType::Bool).to_i64_vec(), vec![1, 1, 1]);
    }

    #[test]
    fn int64_inputs_outside_int32_are_rejected() {
        let bytes = (1i64 << 40).to_le_bytes();
        let e = host_to_device(ElemType::I64, &bytes, DeviceType::I32, "ids").unwrap_err();
        assert!(matches!(e, Error::InputMismatch { .. }));
        assert!(e.to_string().contains("ids"));
    }

    #[test]
    fn half_conversion_rounds_to_nearest_even() {
        // 1 + 2^-11 is exactly between two halves: ties to even (1.0).
        let x = 1.0f32 + 2f32.powi(-11);
        let out = host_to_device(ElemType::F32, &x.to_le_bytes(), DeviceType::F16, "x")
            .unwrap()
            .into_owned();
        assert_eq!(f16::from_le_bytes([out[0], out[1]]).to_f32(), 1.0);
    }
}
