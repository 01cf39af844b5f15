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
