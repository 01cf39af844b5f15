//! Rounding to the device's float types, and comparisons of results.

pub fn r32(x: f64) -> f64 {
    x as f32 as f64
}

/// Rounds to the nearest binary16 value, ties to even, in one step (written
/// out by hand: `half::f16::from_f64` rounds through float32 on x86 with
/// F16C, which double-rounds some float64 values).
pub fn r16(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let biased = ((x.to_bits() >> 52) & 0x7ff) as i32;
    if biased == 0 {
        return 0.0f64.copysign(x); // f64 subnormals are far below half's range
    }
    let e = (biased - 1023).max(-14);
    let ulp = 2f64.powi(e - 10);
    let r = (x / ulp).round_ties_even() * ulp;
    if r.abs() > 65504.0 {
        f64::INFINITY.copysign(x)
    } else if r == 0.0 {
        0.0f64.copysign(x)
    } else {
        r
    }
}

/// Rounds to the nearest value of a binary format with `man` stored
/// mantissa bits, smallest normal exponent `emin` and largest finite value
/// `max`, ties to even. Beyond `max`: `over` (infinity, NaN or `max`), with
/// the sign of `x` unless it is NaN. `signed_zero`: whether -0 exists.
pub fn round_format(x: f64, man: i32, emin: i32, max: f64, over: f64, signed_zero: bool) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a.is_infinite() {
        over
    } else {
        let mut e = emin;
        while e < 1100 && 2f64.powi(e + 1) <= a {
            e += 1;
        }
        let ulp = 2f64.powi(e - man);
        let r = (a / ulp).round_ties_even() * ulp;
        if r > max {
            over
        } else {
            r
        }
    };
    if r.is_nan() {
        r
    } else if r == 0.0 && !signed_zero {
        0.0
    } else {
        r.copysign(x)
    }
}

/// Rounds to the nearest bfloat16 value, ties to even.
pub fn rbf16(x: f64) -> f64 {
    let max = (2.0 - 2f64.powi(-7)) * 2f64.powi(127);
    round_format(x, 7, -126, max, f64::INFINITY, true)
}

/// Rounds to the float8 type with ONNX code `code` as ONNX's Cast does,
/// saturating or not.
pub fn rf8(x: f64, code: i32, saturate: bool) -> f64 {
    // (stored mantissa bits, smallest normal exponent, largest finite,
    // infinity, signed zero)
    let (man, emin, max, inf, signed_zero) = match code {
        17 => (3, -6, 448.0, false, true),
        18 => (3, -7, 240.0, false, false),
        19 => (2, -14, 57344.0, true, true),
        20 => (2, -15, 57344.0, false, false),
        _ => panic!("no float8 type has code {code}"),
    };
    let over = if saturate {
        max
    } else if inf {
        f64::INFINITY
    } else {
        f64::NAN
    };
    round_format(x, man, emin, max, over, signed_zero)
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn same_float(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

/// Exact equality (NaN equals NaN; 0.0 equals -0.0).
#[track_caller]
pub fn assert_exact(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same_float(*g, *w),
            "{what}: element {i}: got {g:e}, want {w:e}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// |got - want| <= tol * max(1, |want|), NaNs and infinities must match.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if same_float(*g, *w) {
            continue;
        }
        let ok = g.is_finite() && w.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(
            ok,
            "{what}: element {i}: got {g:e}, want {w:e} (tol {tol:e})\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Relative comparison: |got - want| <= rel * |want| (+ a tiny absolute slack).
#[track_caller]
pub fn assert_rel(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if same_float(*g, *w) {
            continue;
        }
        let ok = g.is_finite() && w.is_finite() && (g - w).abs() <= rel * w.abs() + 1e-300;
        assert!(
            ok,
            "{what}: element {i}: got {g:e}, want {w:e} (rel {rel:e})\n got {got:?}\nwant {want:?}"
        );
    }
}
