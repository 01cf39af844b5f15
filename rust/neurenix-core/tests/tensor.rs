//! Host tensors and the host <-> device conversions: every element type pair
//! the compiler uses (float32/float16/float64 <-> float32/float16 tile
//! memory, int64/int32/uint8 <-> int32, bool <-> bool), the int32 range
//! check on the way in, raw byte round trips, ONNX Cast semantics, and
//! shapes no host array can have.

use crate::common::*;
use std::borrow::Cow;

use half::f16;
use neurenix_core::dtype::{DeviceType, ElemType};
use neurenix_core::error::Error;
use neurenix_core::tensor::{
    device_to_host, float_to_int, host_to_device, round_float, wrap_int, HostTensor,
};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f16_bytes(v: &[f64]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| f16::from_f64(*x).to_le_bytes())
        .collect()
}
fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn read_f32(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
        .collect()
}
fn read_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn read_f16(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(2)
        .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f64())
        .collect()
}
fn read_i32(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
        .collect()
}
fn read_i64(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Values exercising float16 rounding: exact, ties (to even), overflow,
/// subnormals, signed zero, infinities.
fn half_cases() -> Vec<(f64, f64)> {
    let t = 2f64.powi(-24); // smallest subnormal half
    vec![
        (1.0, 1.0),
        (-2.5, -2.5),
        (1.0 + 2f64.powi(-11), 1.0), // tie -> even (1.0)
        (1.0 + 3.0 * 2f64.powi(-11), 1.0 + 2.0 * 2f64.powi(-10)), // tie -> even (up)
        (1.0 + 2f64.powi(-11) + 2f64.powi(-20), 1.0 + 2f64.powi(-10)), // above the tie
        (65504.0, 65504.0),
        (65519.0, 65504.0),
        (65520.0, f64::INFINITY), // the tie at the top rounds to infinity
        (-1e6, f64::NEG_INFINITY),
        (t, t),
        (t / 2.0, 0.0),     // tie -> even (zero)
        (t * 1.5, 2.0 * t), // tie -> even (2t)
        (t * 0.75, t),
        (-0.0, -0.0),
        (f64::INFINITY, f64::INFINITY),
        (0.1, 0.0999755859375),
    ]
}

#[test]
fn float32_to_device_float32_and_float16() {
    let cases = half_cases();
    let xs: Vec<f32> = cases.iter().map(|c| c.0 as f32).collect();
    let b = host_to_device(ElemType::F32, &f32_bytes(&xs), DeviceType::F32, "x")
        .unwrap()
        .into_owned();
    assert_exact(
        &read_f32(&b),
        &xs.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        "f32 -> f32",
    );
    let b = host_to_device(ElemType::F32, &f32_bytes(&xs), DeviceType::F16, "x")
        .unwrap()
        .into_owned();
    assert_eq!(b.len(), 2 * xs.len());
    // Every case value is exactly representable in float32, so the expected
    // half values apply unchanged.
    let want: Vec<f64> = cases.iter().map(|c| c.1).collect();
    assert_exact(&read_f16(&b), &want, "f32 -> f16");
    // NaN stays NaN.
    let b = host_to_device(ElemType::F32, &f32_bytes(&[f32::NAN]), DeviceType::F16, "x")
        .unwrap()
        .into_owned();
    assert!(read_f16(&b)[0].is_nan());
    // Signed zero keeps its sign.
    let b = host_to_device(ElemType::F32, &f32_bytes(&[-0.0]), DeviceType::F16, "x")
        .unwrap()
        .into_owned();
    assert!(read_f16(&b)[0].is_sign_negative());
}

#[test]
fn float16_and_float64_to_device() {
    let vals = [0.5, -3.25, 65504.0, 2f64.powi(-24), 0.0999755859375];
    let hb = f16_bytes(&vals);
    let b = host_to_device(ElemType::F16, &hb, DeviceType::F16, "h").unwrap();
    assert!(
        matches!(b, Cow::Borrowed(_)),
        "f16 -> f16 is the bytes themselves"
    );
    assert_eq!(b, hb);
    let b = host_to_device(ElemType::F16, &f16_bytes(&vals), DeviceType::F32, "h")
        .unwrap()
        .into_owned();
    assert_exact(&read_f32(&b), &vals, "f16 -> f32 is exact");
    // float64 -> float32 rounds to nearest; infinities stay infinite.
    let d = [0.1, 1.0 + 2f64.powi(-30), f64::INFINITY, -1e-50, 16777217.0];
    let b = host_to_device(ElemType::F64, &f64_bytes(&d), DeviceType::F32, "d")
        .unwrap()
        .into_owned();
    assert_exact(
        &read_f32(&b),
        &[0.1f32 as f64, 1.0, f64::INFINITY, -0.0, 16777216.0],
        "f64 -> f32",
    );
    // A finite float64 beyond float32's range is refused, naming the input.
    let e = host_to_device(
        ElemType::F64,
        &f64_bytes(&[1.0, 1e39]),
        DeviceType::F32,
        "d",
    )
    .unwrap_err();
    assert!(matches!(e, Error::InputMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("'d' element 1"), "{e}");
    let b = host_to_device(
        ElemType::F64,
        &f64_bytes(&[0.1, -2.5, 1e6]),
        DeviceType::F16,
        "d",
    )
    .unwrap()
    .into_owned();
    assert_exact(
        &read_f16(&b),
        &[0.0999755859375, -2.5, f64::INFINITY],
        "f64 -> f16",
    );
}

#[test]
fn float64_to_float16_rounds_once() {
    // 1 + 2^-11 + 2^-40 is just above the half tie between 1 and 1 + 2^-10;
    // rounding it to float32 first lands exactly on the tie, which then
    // rounds to even (1.0).
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    let want = 1.0 + 2f64.powi(-10);
    assert_eq!(r16(x), want, "reference rounding");
    let b = host_to_device(ElemType::F64, &f64_bytes(&[x]), DeviceType::F16, "d")
        .unwrap()
        .into_owned();
    assert_exact(&read_f16(&b), &[want], "host_to_device f64 -> f16");
    assert_exact(
        &tf64(&[1], &[x]).cast(ElemType::F16).to_f64_vec(),
        &[want],
        "Cast f64 -> f16",
    );
    assert_eq!(round_float(ElemType::F16, x), want, "round_float");
}

#[test]
fn the_reference_half_rounding_agrees_with_half_on_float32_values() {
    // On float32 inputs `half` is correctly rounded; our hand-written r16
    // must agree everywhere (checks the test helper itself).
    let mut rng = XorShift::new(5);
    for _ in 0..20000 {
        let bits = rng.next_u64() as u32;
        let x = f32::from_bits(bits);
        if x.is_nan() {
            continue;
        }
        let want = f16::from_f32(x).to_f64();
        let got = r16(x as f64);
        assert!(
            got == want && got.is_sign_negative() == want.is_sign_negative(),
            "r16({x:e}) = {got:e}, half says {want:e}"
        );
    }
    for (x, want) in half_cases() {
        assert_exact(&[r16(x)], &[want], &format!("r16({x:e})"));
    }
}

#[test]
fn integers_to_device_int32() {
    let v = [0i64, 1, -1, i32::MAX as i64, i32::MIN as i64, 123456789];
    let b = host_to_device(ElemType::I64, &i64_bytes(&v), DeviceType::I32, "ids")
        .unwrap()
        .into_owned();
    assert_eq!(read_i32(&b), v.to_vec(), "i64 -> i32");
    let w = [7i32, -8, i32::MAX, i32::MIN];
    let wb = i32_bytes(&w);
    let b = host_to_device(ElemType::I32, &wb, DeviceType::I32, "w").unwrap();
    assert!(
        matches!(b, Cow::Borrowed(_)),
        "i32 -> i32 is the bytes themselves"
    );
    assert_eq!(b, wb);
    let u = [0u8, 1, 127, 128, 255];
    let b = host_to_device(ElemType::U8, &u, DeviceType::I32, "u")
        .unwrap()
        .into_owned();
    assert_eq!(
        read_i32(&b),
        vec![0, 1, 127, 128, 255],
        "u8 -> i32 zero-extends"
    );
    let s: Vec<u8> = [-128i8, -1, 0, 127].iter().map(|&x| x as u8).collect();
    let b = host_to_device(ElemType::I8, &s, DeviceType::I32, "s")
        .unwrap()
        .into_owned();
    assert_eq!(
        read_i32(&b),
        vec![-128, -1, 0, 127],
        "i8 -> i32 sign-extends"
    );
    let bl = [1u8, 0, 1];
    assert_eq!(
        host_to_device(ElemType::Bool, &bl, DeviceType::Bool, "m")
            .unwrap()
            .into_owned(),
        bl.to_vec(),
        "bool -> bool"
    );
    // Nonzero bytes are true.
    let b = host_to_device(ElemType::U8, &[0, 2, 255], DeviceType::Bool, "m")
        .unwrap()
        .into_owned();
    assert_eq!(b, vec![0, 1, 1]);
}

#[test]
fn int64_outside_int32_is_an_input_mismatch_naming_the_input() {
    for bad in [1i64 << 31, -(1i64 << 31) - 1, 1 << 40, i64::MAX, i64::MIN] {
        let e = host_to_device(
            ElemType::I64,
            &i64_bytes(&[0, 5, bad]),
            DeviceType::I32,
            "token_ids",
        )
        .unwrap_err();
        match &e {
            Error::InputMismatch { input, message } => {
                assert_eq!(input, "token_ids");
                assert!(message.contains("token_ids"), "{message}");
                assert!(
                    message.contains(&bad.to_string()),
                    "message names the value: {message}"
                );
                assert!(
                    message.contains("element 2"),
                    "message names the element: {message}"
                );
            }
            other => panic!("expected InputMismatch, got {other:?}"),
        }
    }
    // uint32 above int32::MAX takes the general path and is rejected too.
    let b: Vec<u8> = [3_000_000_000u32]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let e = host_to_device(ElemType::U32, &b, DeviceType::I32, "big").unwrap_err();
    assert!(
        matches!(&e, Error::InputMismatch { input, .. } if input == "big"),
        "{e:?}"
    );
    assert!(e.to_string().contains("big"));
}

#[test]
fn uint64_above_int64_max_is_rejected() {
    let b = u64::MAX.to_le_bytes();
    let r = host_to_device(ElemType::U64, &b, DeviceType::I32, "u");
    assert!(matches!(r, Err(Error::InputMismatch { .. })), "got {r:?}");
}

#[test]
fn device_to_host_floats() {
    let v = [0.5f32, -3.25, 1e-8, 3.4e38, 0.1];
    let raw = f32_bytes(&v);
    let same = device_to_host(DeviceType::F32, &raw, ElemType::F32).unwrap();
    assert!(
        matches!(same, Cow::Borrowed(_)),
        "f32 -> f32 is the bytes themselves"
    );
    assert_eq!(same, raw);
    let w = device_to_host(DeviceType::F32, &raw, ElemType::F64)
        .unwrap()
        .into_owned();
    assert_exact(
        &read_f64(&w),
        &v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        "f32 -> f64 exact",
    );
    let h = device_to_host(DeviceType::F32, &raw, ElemType::F16)
        .unwrap()
        .into_owned();
    assert_exact(
        &read_f16(&h),
        &[0.5, -3.25, 0.0, f64::INFINITY, 0.0999755859375],
        "f32 -> f16 rounds (1e-8 underflows, 3.4e38 overflows)",
    );
    let hv = [0.5, -3.25, 65504.0, 2f64.powi(-24)];
    let hraw = f16_bytes(&hv);
    let same = device_to_host(DeviceType::F16, &hraw, ElemType::F16).unwrap();
    assert!(
        matches!(same, Cow::Borrowed(_)),
        "f16 -> f16 is the bytes themselves"
    );
    assert_eq!(same, hraw);
    assert_exact(
        &read_f32(
            &device_to_host(DeviceType::F16, &hraw, ElemType::F32)
                .unwrap()
                .into_owned(),
        ),
        &hv,
        "f16 -> f32",
    );
    assert_exact(
        &read_f64(
            &device_to_host(DeviceType::F16, &hraw, ElemType::F64)
                .unwrap()
                .into_owned(),
        ),
        &hv,
        "f16 -> f64",
    );
}

#[test]
fn device_to_host_integers_and_bools() {
    let v = [0i32, -1, i32::MAX, i32::MIN, 300];
    let raw = i32_bytes(&v);
    assert_eq!(
        device_to_host(DeviceType::I32, &raw, ElemType::I32)
            .unwrap()
            .into_owned(),
        raw
    );
    assert_eq!(
        read_i64(
            &device_to_host(DeviceType::I32, &raw, ElemType::I64)
                .unwrap()
                .into_owned()
        ),
        vec![0, -1, i32::MAX as i64, i32::MIN as i64, 300],
        "i32 -> i64 sign-extends"
    );
    // Narrowing keeps the low bits (ONNX integer casts).
    assert_eq!(
        device_to_host(DeviceType::I32, &raw, ElemType::U8)
            .unwrap()
            .into_owned(),
        vec![0, 255, 255, 0, 44],
        "i32 -> u8"
    );
    let b = [1u8, 0, 1];
    assert_eq!(
        device_to_host(DeviceType::Bool, &b, ElemType::Bool)
            .unwrap()
            .into_owned(),
        b.to_vec()
    );
}

#[test]
fn host_to_device_then_back_round_trips_exact_values() {
    let mut rng = XorShift::new(3);
    // Float32 values survive f32 tile memory; half-exact values survive f16.
    let xs: Vec<f32> = (0..64).map(|_| rng.uniform(-1e6, 1e6) as f32).collect();
    let b = host_to_device(ElemType::F32, &f32_bytes(&xs), DeviceType::F32, "x")
        .unwrap()
        .into_owned();
    assert_eq!(
        device_to_host(DeviceType::F32, &b, ElemType::F32)
            .unwrap()
            .into_owned(),
        f32_bytes(&xs)
    );
    let hs: Vec<f32> = rng.eighths(64, 100).iter().map(|&v| v as f32).collect();
    let b = host_to_device(ElemType::F32, &f32_bytes(&hs), DeviceType::F16, "x")
        .unwrap()
        .into_owned();
    assert_eq!(
        device_to_host(DeviceType::F16, &b, ElemType::F32)
            .unwrap()
            .into_owned(),
        f32_bytes(&hs)
    );
    let is: Vec<i64> = (0..64).map(|_| rng.next_u64() as i32 as i64).collect();
    let b = host_to_device(ElemType::I64, &i64_bytes(&is), DeviceType::I32, "i")
        .unwrap()
        .into_owned();
    assert_eq!(
        device_to_host(DeviceType::I32, &b, ElemType::I64)
            .unwrap()
            .into_owned(),
        i64_bytes(&is)
    );
}

#[test]
fn from_bytes_to_bytes_round_trips_every_dtype() {
    let mut rng = XorShift::new(11);
    let all = [
        ElemType::F32,
        ElemType::U8,
        ElemType::I8,
        ElemType::U16,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::Bool,
        ElemType::F16,
        ElemType::F64,
        ElemType::U32,
        ElemType::U64,
        ElemType::BF16,
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
    ];
    for dt in all {
        for shape in [vec![], vec![0], vec![7], vec![2, 3, 4]] {
            let n = numel(&shape);
            // Random bit patterns, avoiding NaNs (whose payloads need not
            // survive) and non-canonical bools.
            let mut bytes = Vec::with_capacity(n * dt.size());
            while bytes.len() < n * dt.size() {
                let mut chunk: Vec<u8> = (0..dt.size()).map(|_| rng.next_u64() as u8).collect();
                let is_nan = match dt {
                    ElemType::F32 => f32::from_le_bytes(chunk[..4].try_into().unwrap()).is_nan(),
                    ElemType::F64 => f64::from_le_bytes(chunk[..8].try_into().unwrap()).is_nan(),
                    ElemType::F16 => f16::from_le_bytes(chunk[..2].try_into().unwrap()).is_nan(),
                    ElemType::BF16 => {
                        half::bf16::from_le_bytes(chunk[..2].try_into().unwrap()).is_nan()
                    }
                    _ => dt.float8().is_some_and(|f| f.decode(chunk[0]).is_nan()),
                };
                if is_nan {
                    continue;
                }
                if dt == ElemType::Bool {
                    chunk[0] &= 1;
                }
                if dt == ElemType::U64 {
                    // uint64 values beyond int64 are rejected (see
                    // uint64_above_int64_max_is_rejected), not round-tripped.
                    chunk[7] &= 0x7f;
                }
                bytes.extend(chunk);
            }
            let t = HostTensor::from_bytes(dt, &shape, &bytes)
                .unwrap_or_else(|e| panic!("{dt} {shape:?}: {e}"));
            assert_eq!(t.dtype, dt);
            assert_eq!(t.shape(), shape.as_slice());
            assert_eq!(t.to_bytes(), bytes, "{dt} {shape:?} round trip");
        }
    }
}

/// The storage types: bfloat16 and float8 go in exactly (to float32, and
/// float8 to float16 too) and come back rounded to nearest, ties to even,
/// with a single rounding from float64.
#[test]
fn storage_types_to_device_and_back() {
    // bfloat16 1.5, -2^-133 (subnormal), 3.3895e38 (largest), -inf.
    let bf = [0x3fc0u16, 0x8001, 0x7f7f, 0xff80];
    let bytes: Vec<u8> = bf.iter().flat_map(|b| b.to_le_bytes()).collect();
    let want = [
        1.5,
        -(2f64.powi(-133)),
        3.3895313892515355e38,
        f64::NEG_INFINITY,
    ];
    let dev = host_to_device(ElemType::BF16, &bytes, DeviceType::F32, "x")
        .unwrap()
        .into_owned();
    assert_exact(&read_f32(&dev), &want, "bfloat16 -> float32");
    assert_eq!(
        device_to_host(DeviceType::F32, &dev, ElemType::BF16)
            .unwrap()
            .into_owned(),
        bytes
    );
    // float32 -> bfloat16: ties to even, and just above a tie rounds up.
    let x = [
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        1.0 + 2f32.powi(-8) + 2f32.powi(-23),
    ];
    let out = device_to_host(DeviceType::F32, &f32_bytes(&x), ElemType::BF16)
        .unwrap()
        .into_owned();
    assert_eq!(out, [0x80, 0x3f, 0x82, 0x3f, 0x81, 0x3f]);
    // A float64 value just above a bfloat16 tie (by less than a float32
    // step): one rounding, up.
    assert_eq!(
        round_float(ElemType::BF16, 1.0 + 2f64.powi(-8) + 2f64.powi(-40)),
        1.0 + 2f64.powi(-7)
    );
    // Every float8 value to float16 and back.
    for dt in [
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
    ] {
        let f = dt.float8().unwrap();
        let every: Vec<u8> = (0..=255u8).filter(|&b| !f.decode(b).is_nan()).collect();
        let want: Vec<f64> = every.iter().map(|&b| f.decode(b)).collect();
        for dev_t in [DeviceType::F32, DeviceType::F16] {
            let dev = host_to_device(dt, &every, dev_t, "x").unwrap().into_owned();
            let got = if dev_t == DeviceType::F32 {
                read_f32(&dev)
            } else {
                read_f16(&dev)
            };
            assert_exact(&got, &want, &format!("{dt} -> {dev_t}"));
            assert_eq!(
                device_to_host(dev_t, &dev, dt).unwrap().into_owned(),
                every,
                "{dt} back"
            );
        }
    }
    // Outputs beyond a float8 type saturate; e5m2 keeps its infinities.
    let big = f32_bytes(&[1e6, -f32::INFINITY]);
    assert_eq!(
        device_to_host(DeviceType::F32, &big, ElemType::F8E4M3FN)
            .unwrap()
            .into_owned(),
        [0x7e, 0xfe]
    );
    assert_eq!(
        device_to_host(DeviceType::F32, &big, ElemType::F8E5M2)
            .unwrap()
            .into_owned(),
        [0x7b, 0xfc]
    );
}

#[test]
fn from_bytes_decodes_values() {
    let t =
        HostTensor::from_bytes(ElemType::I16, &[3], &[0xff, 0xff, 0x00, 0x80, 0x01, 0x00]).unwrap();
    assert_eq!(t.to_i64_vec(), vec![-1, -32768, 1]);
    let t = HostTensor::from_bytes(ElemType::U16, &[2], &[0xff, 0xff, 0x00, 0x80]).unwrap();
    assert_eq!(t.to_i64_vec(), vec![65535, 32768]);
    let t = HostTensor::from_bytes(ElemType::U32, &[1], &0xffff_ffffu32.to_le_bytes()).unwrap();
    assert_eq!(t.to_i64_vec(), vec![4294967295]);
    let t = HostTensor::from_bytes(ElemType::Bool, &[3], &[0, 1, 7]).unwrap();
    assert_eq!(t.to_i64_vec(), vec![0, 1, 1]);
    let t = HostTensor::from_bytes(ElemType::BF16, &[1], &[0x80, 0x3f]).unwrap();
    assert_eq!(t.to_f64_vec(), vec![1.0]);
    let t = HostTensor::from_bytes(ElemType::F16, &[1], &[0x00, 0x3c]).unwrap();
    assert_eq!(t.to_f64_vec(), vec![1.0]);
}

#[test]
fn from_bytes_with_the_wrong_length_is_invalid_argument() {
    for (dt, shape, len) in [
        (ElemType::F32, vec![2, 2], 15usize),
        (ElemType::I64, vec![1], 4),
        (ElemType::Bool, vec![3], 4),
    ] {
        let e = HostTensor::from_bytes(dt, &shape, &vec![0u8; len]).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{dt}: {e:?}");
    }
}

#[test]
fn constructors_round_to_their_type() {
    let t = tf32(&[3], &[0.1, 16777217.0, 1e39]);
    assert_exact(
        &t.to_f64_vec(),
        &[0.1f32 as f64, 16777216.0, f64::INFINITY],
        "float32",
    );
    let t = tf16(&[2], &[0.1, 70000.0]);
    assert_exact(
        &t.to_f64_vec(),
        &[0.0999755859375, f64::INFINITY],
        "float16",
    );
    let t = tint(ElemType::I8, &[3], &[200, -129, 5]);
    assert_eq!(t.to_i64_vec(), vec![-56, 127, 5], "int8 wraps");
    let t = tint(ElemType::U8, &[2], &[256, -1]);
    assert_eq!(t.to_i64_vec(), vec![0, 255], "uint8 wraps");
    let t = HostTensor::full(ElemType::Bool, &[2], 3.0).unwrap();
    assert_eq!(t.to_i64_vec(), vec![1, 1]);
    let t = HostTensor::full(ElemType::I32, &[1], -2.7).unwrap();
    assert_eq!(t.to_i64_vec(), vec![-2]);
}

#[test]
fn rounding_helpers() {
    assert_eq!(round_float(ElemType::F32, 0.1), 0.1f32 as f64);
    assert_eq!(round_float(ElemType::F16, 1.0 + 2f64.powi(-11)), 1.0);
    assert_eq!(
        round_float(ElemType::BF16, 1.0 + 2f64.powi(-8)),
        1.0,
        "bf16 tie to even"
    );
    assert_eq!(
        round_float(ElemType::BF16, 1.0 + 3.0 * 2f64.powi(-8)),
        1.0 + 2f64.powi(-6)
    );
    assert_eq!(round_float(ElemType::F64, 0.1), 0.1);
    assert_eq!(wrap_int(ElemType::I8, 200), -56);
    assert_eq!(wrap_int(ElemType::U16, -1), 65535);
    assert_eq!(wrap_int(ElemType::I32, 1 << 31), i32::MIN as i64);
    assert_eq!(wrap_int(ElemType::U32, -1), u32::MAX as i64);
    assert_eq!(wrap_int(ElemType::I64, i64::MIN), i64::MIN);
    assert_eq!(float_to_int(ElemType::I32, -1.9), -1);
    assert_eq!(float_to_int(ElemType::I32, 1e12), i32::MAX as i64);
    assert_eq!(float_to_int(ElemType::I8, -1000.0), -128);
    assert_eq!(float_to_int(ElemType::U8, -3.5), 0);
    assert_eq!(float_to_int(ElemType::U16, 1e9), 65535);
    assert_eq!(float_to_int(ElemType::I64, f64::NAN), 0);
    assert_eq!(float_to_int(ElemType::I64, -1e300), i64::MIN);
}

#[test]
fn cast_follows_onnx_rules() {
    // float -> int truncates toward zero and saturates.
    let f = tf32(&[6], &[-1.7, 2.5, 300.0, -300.0, 1e10, -0.5]);
    assert_eq!(
        f.cast(ElemType::I32).to_i64_vec(),
        vec![-1, 2, 300, -300, i32::MAX as i64, 0]
    );
    assert_eq!(
        f.cast(ElemType::U8).to_i64_vec(),
        vec![0, 2, 255, 0, 255, 0]
    );
    assert_eq!(
        f.cast(ElemType::I8).to_i64_vec(),
        vec![-1, 2, 127, -128, 127, 0]
    );
    assert_eq!(
        f.cast(ElemType::I64).to_i64_vec(),
        vec![-1, 2, 300, -300, 10_000_000_000, 0]
    );
    // int -> narrower int keeps the low bits.
    let i = ti64(&[4], &[200, 256, -1, 70000]);
    assert_eq!(i.cast(ElemType::I8).to_i64_vec(), vec![-56, 0, -1, 112]);
    assert_eq!(i.cast(ElemType::U8).to_i64_vec(), vec![200, 0, 255, 112]);
    assert_eq!(i.cast(ElemType::I16).to_i64_vec(), vec![200, 256, -1, 4464]);
    // to and from bool.
    let z = tf32(&[4], &[0.0, -0.0, 0.5, f64::NAN]);
    assert_eq!(z.cast(ElemType::Bool).to_i64_vec(), vec![0, 0, 1, 1]);
    let b = tbool(&[2], &[true, false]);
    assert_exact(
        &b.cast(ElemType::F32).to_f64_vec(),
        &[1.0, 0.0],
        "bool -> f32",
    );
    assert_eq!(b.cast(ElemType::I64).to_i64_vec(), vec![1, 0]);
    assert_eq!(
        ti64(&[3], &[0, 2, -1]).cast(ElemType::Bool).to_i64_vec(),
        vec![0, 1, 1]
    );
    // float16 rounding, and int -> float rounding.
    let h = tf64(&[3], &[0.1, 1.0 + 2f64.powi(-11), 1e5]).cast(ElemType::F16);
    assert_eq!(h.dtype, ElemType::F16);
    assert_exact(
        &h.to_f64_vec(),
        &[0.0999755859375, 1.0, f64::INFINITY],
        "to float16",
    );
    assert_exact(
        &ti64(&[1], &[16777217]).cast(ElemType::F32).to_f64_vec(),
        &[16777216.0],
        "i64 -> f32",
    );
}

#[test]
fn reshape_keeps_row_major_order() {
    let t = ti64(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let r = t.reshape(&[3, 2]).unwrap();
    assert_eq!(r.shape(), &[3, 2]);
    assert_eq!(r.to_i64_vec(), vec![1, 2, 3, 4, 5, 6]);
    assert!(t.reshape(&[4]).is_err());
}

#[test]
fn to_device_bytes_range_check_names_the_value() {
    let t = ti64(&[2], &[1, 1 << 33]);
    let e = t
        .to_device_bytes(DeviceType::I32, "constant 'w'")
        .unwrap_err();
    assert!(
        e.to_string().contains("constant 'w'") && e.to_string().contains(&(1i64 << 33).to_string()),
        "{e}"
    );
    let ok = ti64(&[2], &[1, -7])
        .to_device_bytes(DeviceType::I32, "c")
        .unwrap();
    assert_eq!(read_i32(&ok), vec![1, -7]);
    let f = tf32(&[2], &[1.5, 0.1])
        .to_device_bytes(DeviceType::F16, "c")
        .unwrap();
    assert_exact(&read_f16(&f), &[1.5, 0.0999755859375], "to f16 bytes");
    let b = tf32(&[2], &[0.0, 2.0])
        .to_device_bytes(DeviceType::Bool, "c")
        .unwrap();
    assert_eq!(b, vec![0, 1]);
}

#[test]
fn shapes_no_host_array_can_have_are_errors() {
    // ndarray refuses a shape whose non-zero dimensions multiply beyond
    // isize, even an empty one; these used to panic ("Shape too large", or
    // an unwrap of its error).
    let huge = [0, 1 << 40, 1 << 40];
    assert!(HostTensor::full(ElemType::F32, &huge, 0.0).is_err());
    let e = HostTensor::from_bytes(ElemType::F32, &[0, 1 << 62, 4], &[]).unwrap_err();
    assert!(e.to_string().contains("more elements than the host"), "{e}");
    let empty = HostTensor::from_bytes(ElemType::I64, &[0], &[]).unwrap();
    assert!(empty.reshape(&huge).is_err());
    assert!(empty.reshape(&[1 << 40, 1 << 40, 1 << 40, 0]).is_err());
    // Large but possible empty shapes are fine.
    let e = HostTensor::full(ElemType::Bool, &[0, 1 << 62], 1.0).unwrap();
    assert_eq!(e.shape(), &[0, 1 << 62]);
    assert_eq!(empty.reshape(&[1 << 40, 0]).unwrap().shape(), &[1 << 40, 0]);
}
