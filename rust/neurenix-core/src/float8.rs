//! The 8-bit float formats of ONNX (FLOAT8E4M3FN, FLOAT8E4M3FNUZ,
//! FLOAT8E5M2, FLOAT8E5M2FNUZ): exact decoding, and encoding with
//! round-to-nearest-even as ONNX's Cast defines it.
//!
//! The IPU computes in float32 and float16, so these are storage types:
//! every float8 value is exact in both, and decoding is exact. Encoding
//! rounds to nearest, ties to even; what happens beyond the largest finite
//! value is [`Overflow`]'s choice.

/// One of the float8 formats: exponent and mantissa widths and the
/// encodings of the special values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Float8 {
    /// 4-bit exponent (bias 7), 3-bit mantissa; no infinities, NaN is
    /// S.1111.111 (largest finite 448).
    E4M3FN,
    /// 4-bit exponent (bias 8), 3-bit mantissa; no infinities and no
    /// negative zero: 0x80 is the NaN (largest finite 240).
    E4M3FNUZ,
    /// 5-bit exponent (bias 15), 2-bit mantissa, IEEE-style infinities and
    /// NaNs (largest finite 57344).
    E5M2,
    /// 5-bit exponent (bias 16), 2-bit mantissa; no infinities and no
    /// negative zero: 0x80 is the NaN (largest finite 57344).
    E5M2FNUZ,
}

/// What an encoding does with values beyond the format's largest finite
/// value (after rounding) and with infinities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// ONNX Cast with `saturate=1` (the default): the largest finite value
    /// of the right sign, infinities included.
    Saturate,
    /// ONNX Cast with `saturate=0`: infinity where the format has one
    /// (E5M2), NaN otherwise.
    Overflow,
    /// Exact for every value the format holds (±infinity in E5M2 too);
    /// others as [`Overflow::Saturate`]. How model outputs are encoded.
    Keep,
}

impl Float8 {
    pub const ALL: [Float8; 4] = [
        Float8::E4M3FN,
        Float8::E4M3FNUZ,
        Float8::E5M2,
        Float8::E5M2FNUZ,
    ];

    fn mantissa_bits(self) -> i32 {
        match self {
            Float8::E4M3FN | Float8::E4M3FNUZ => 3,
            Float8::E5M2 | Float8::E5M2FNUZ => 2,
        }
    }
    fn bias(self) -> i32 {
        match self {
            Float8::E4M3FN => 7,
            Float8::E4M3FNUZ => 8,
            Float8::E5M2 => 15,
            Float8::E5M2FNUZ => 16,
        }
    }
    /// No negative zero, and 0x80 is the one NaN.
    fn unsigned_zero(self) -> bool {
        matches!(self, Float8::E4M3FNUZ | Float8::E5M2FNUZ)
    }
    pub fn has_infinity(self) -> bool {
        self == Float8::E5M2
    }
    /// The largest finite value.
    pub fn max(self) -> f64 {
        match self {
            Float8::E4M3FN => 448.0,
            Float8::E4M3FNUZ => 240.0,
            Float8::E5M2 | Float8::E5M2FNUZ => 57344.0,
        }
    }
    /// The power-of-two scale `s` of a tensor stored in this format whose
    /// largest magnitude is `amax`: the smallest with `amax / s <= max`,
    /// kept between 2^-32 and 2^31; 1 when `amax` is zero, infinite or NaN.
    /// The tensor is stored as the codes of `x / s` and read as `code * s`
    /// (`cpp/include/neurenix/float8.h`, the same rule).
    pub fn scale_for(self, amax: f64) -> f64 {
        if amax.is_nan() || amax <= 0.0 || amax.is_infinite() {
            return 1.0;
        }
        let mut k = (amax / self.max()).log2().floor() as i32;
        if amax / 2f64.powi(k) > self.max() {
            k += 1;
        }
        while amax / 2f64.powi(k - 1) <= self.max() {
            k -= 1;
        }
        2f64.powi(k.clamp(-32, 31))
    }
    /// The smallest positive (subnormal) value: the spacing of values
    /// below the smallest normal one.
    fn quantum(self) -> f64 {
        2f64.powi(1 - self.bias() - self.mantissa_bits())
    }
    fn nan(self, negative: bool) -> u8 {
        match self {
            Float8::E4M3FN => 0x7f | if negative { 0x80 } else { 0 },
            Float8::E5M2 => 0x7e | if negative { 0x80 } else { 0 },
            Float8::E4M3FNUZ | Float8::E5M2FNUZ => 0x80,
        }
    }

    /// The value of `bits`, exactly.
    pub fn decode(self, bits: u8) -> f64 {
        let m = self.mantissa_bits();
        let negative = bits & 0x80 != 0;
        let exp = i32::from((bits & 0x7f) >> m);
        let man = i32::from(bits) & ((1 << m) - 1);
        if self.unsigned_zero() && bits == 0x80 {
            return f64::NAN;
        }
        let top = (1 << (7 - m)) - 1;
        match self {
            Float8::E4M3FN if exp == top && man == (1 << m) - 1 => return f64::NAN,
            Float8::E5M2 if exp == top => {
                return if man != 0 {
                    f64::NAN
                } else if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            _ => {}
        }
        let magnitude = if exp == 0 {
            f64::from(man) * self.quantum()
        } else {
            f64::from((1 << m) | man) * 2f64.powi(exp - self.bias() - m)
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// `v` rounded to nearest (ties to even) and encoded.
    pub fn encode(self, v: f64, overflow: Overflow) -> u8 {
        if v.is_nan() {
            return self.nan(v.is_sign_negative());
        }
        let negative = v.is_sign_negative();
        let sign = |bits: u8| -> u8 {
            if negative && !(self.unsigned_zero() && bits == 0) {
                bits | 0x80
            } else {
                bits
            }
        };
        let beyond = || -> u8 {
            match overflow {
                Overflow::Saturate | Overflow::Keep => sign(self.max_bits()),
                Overflow::Overflow if self.has_infinity() => sign(0x7c),
                Overflow::Overflow => self.nan(negative),
            }
        };
        let a = v.abs();
        if a.is_infinite() {
            return if overflow == Overflow::Keep && self.has_infinity() {
                sign(0x7c)
            } else {
                beyond()
            };
        }
        let m = self.mantissa_bits();
        let min_normal = 2f64.powi(1 - self.bias());
        // The spacing of values around `a`: the subnormal quantum below the
        // smallest normal value, else 2^(exponent - m). Scaling by a power
        // of two is exact, so is the rounded multiple.
        let step = if a < min_normal {
            self.quantum()
        } else {
            2f64.powi(exponent(a) - m)
        };
        let r = (a / step).round_ties_even() * step;
        if r > self.max() {
            return beyond();
        }
        if r == 0.0 {
            return sign(0);
        }
        let bits = if r < min_normal {
            (r / self.quantum()) as u8
        } else {
            let e = exponent(r);
            let man = (r / 2f64.powi(e - m)) as i32 - (1 << m);
            (((e + self.bias()) << m) | man) as u8
        };
        sign(bits)
    }

    /// `v` rounded to the format (the decoded encoding).
    pub fn round(self, v: f64, overflow: Overflow) -> f64 {
        self.decode(self.encode(v, overflow))
    }

    fn max_bits(self) -> u8 {
        match self {
            Float8::E4M3FN => 0x7e,
            Float8::E4M3FNUZ | Float8::E5M2FNUZ => 0x7f,
            Float8::E5M2 => 0x7b,
        }
    }
}

/// floor(log2(a)) of a positive finite `a`, exactly.
fn exponent(a: f64) -> i32 {
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        // Subnormal f64: far below every float8 value.
        -1075 + (64 - (bits & ((1 << 52) - 1)).leading_zeros() as i32)
    } else {
        e - 1023
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_round_trips_and_the_extremes_are_right() {
        for f in Float8::ALL {
            let mut largest: f64 = 0.0;
            for bits in 0..=255u8 {
                let v = f.decode(bits);
                if v.is_nan() {
                    assert!(f.encode(v, Overflow::Keep) == f.nan(v.is_sign_negative()));
                    continue;
                }
                assert_eq!(f.encode(v, Overflow::Keep), bits, "{f:?} {bits:#04x} = {v}");
                if v.is_finite() {
                    largest = largest.max(v);
                }
            }
            assert_eq!(largest, f.max(), "{f:?}");
            assert_eq!(f.decode(1), f.quantum(), "{f:?}: the smallest subnormal");
        }
        assert_eq!(Float8::E4M3FN.quantum(), 2f64.powi(-9));
        assert_eq!(Float8::E4M3FNUZ.quantum(), 2f64.powi(-10));
        assert_eq!(Float8::E5M2.quantum(), 2f64.powi(-16));
        assert_eq!(Float8::E5M2FNUZ.quantum(), 2f64.powi(-17));
    }

    #[test]
    fn rounding_ties_to_even_and_overflow_follow_onnx_cast() {
        let f = Float8::E4M3FN;
        // 1 + 1/16 lies halfway between 1 and 1.125: even (1).
        assert_eq!(f.round(1.0625, Overflow::Saturate), 1.0);
        assert_eq!(f.round(1.1875, Overflow::Saturate), 1.25);
        assert_eq!(f.round(1.0625 + 1e-9, Overflow::Saturate), 1.125);
        // 464 is halfway between 448 and the (NaN) 480: even, 448.
        assert_eq!(f.round(464.0, Overflow::Overflow), 448.0);
        assert!(f.round(465.0, Overflow::Overflow).is_nan());
        assert_eq!(f.round(1e9, Overflow::Saturate), 448.0);
        assert_eq!(f.round(f64::NEG_INFINITY, Overflow::Saturate), -448.0);
        assert!(f.round(f64::INFINITY, Overflow::Overflow).is_nan());
        assert_eq!(
            f.round(-0.0, Overflow::Saturate).to_bits(),
            (-0.0f64).to_bits()
        );
        // Half the smallest subnormal is a tie with zero: even (zero).
        assert_eq!(f.round(2f64.powi(-10), Overflow::Saturate), 0.0);
        assert_eq!(
            f.round(1.5 * 2f64.powi(-10), Overflow::Saturate),
            2f64.powi(-9)
        );
        let g = Float8::E5M2;
        assert_eq!(g.round(1e6, Overflow::Overflow), f64::INFINITY);
        assert_eq!(g.round(-1e6, Overflow::Saturate), -57344.0);
        assert_eq!(g.round(f64::INFINITY, Overflow::Saturate), 57344.0);
        assert_eq!(g.round(f64::INFINITY, Overflow::Keep), f64::INFINITY);
        for f in [Float8::E4M3FNUZ, Float8::E5M2FNUZ] {
            assert_eq!(
                f.encode(-0.0, Overflow::Saturate),
                0,
                "{f:?}: no negative zero"
            );
            assert_eq!(f.encode(-1e-30, Overflow::Saturate), 0, "{f:?}");
            assert_eq!(f.round(f64::INFINITY, Overflow::Saturate), f.max());
            assert!(f.round(f64::INFINITY, Overflow::Overflow).is_nan());
            assert!(f.round(1e9, Overflow::Overflow).is_nan());
        }
    }
}
