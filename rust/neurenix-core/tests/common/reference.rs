//! Hand-written references, simple and independent of the crate.

/// erf by composite Simpson integration of 2/sqrt(pi) exp(-t^2) (error below
/// 1e-11): slow, simple and independent of the crate's series.
pub fn erf_ref(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs().min(7.0);
    let n = 4000;
    let h = ax / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(ax);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    let r = s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt();
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Row-major [m, k] x [k, n].
pub fn ref_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                s += a[i * k + kk] * b[kk * n + j];
            }
            out[i * n + j] = s;
        }
    }
    out
}

/// Softmax over the last axis of a row-major [rows, cols] array.
pub fn ref_softmax_rows(x: &[f64], rows: usize, cols: usize, log: bool) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            out[r * cols + c] = if log {
                (row[c] - m) - s.ln()
            } else {
                (row[c] - m).exp() / s
            };
        }
    }
    out
}

/// Row-major transpose of an [r, c] matrix.
pub fn ref_transpose2(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = x[i * c + j];
        }
    }
    out
}
