//! A tiny seeded pseudo-random generator (no dependencies).

use super::check::r32;

pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    /// Values in [lo, hi) rounded to float32.
    pub fn vec32(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| r32(self.uniform(lo, hi))).collect()
    }
    /// Multiples of 1/8 in [-k, k]: exact in float16 and float32, and so are
    /// small sums of their products.
    pub fn eighths(&mut self, n: usize, k: i64) -> Vec<f64> {
        (0..n)
            .map(|_| (self.below((16 * k + 1) as usize) as i64 - 8 * k) as f64 / 8.0)
            .collect()
    }
}
