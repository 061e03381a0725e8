use serde::Serialize;

/// One number that decided a verdict: which signal, its value, the line it was compared with,
/// and the sentence a person reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub signal: &'static str,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    pub text: String,
}

impl Evidence {
    pub fn new(signal: &'static str, value: f64, threshold: Option<f64>, text: String) -> Self {
        Evidence {
            signal,
            value: round3(value),
            threshold: threshold.map(round3),
            text,
        }
    }
}

/// Three significant decimals: enough for any reader, and stable output for tests and diffs.
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A percentage for people: one decimal under 10, none above. A width in the format pads the
/// number before its `%`.
pub fn pct(v: f64) -> impl std::fmt::Display {
    struct Pct(Fixed);
    impl std::fmt::Display for Pct {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            std::fmt::Display::fmt(&self.0, f)?;
            f.write_str("%")
        }
    }
    Pct(Fixed::new(v, if v < 10.0 { 1 } else { 0 }))
}

/// A rate in MiB/s for people, in GiB/s when large.
pub fn rate(mib_s: f64) -> String {
    if mib_s >= 1024.0 {
        format!("{} GiB/s", Fixed::new(mib_s / 1024.0, 1))
    } else {
        format!("{} MiB/s", Fixed::new(mib_s, 0))
    }
}

/// A number with a fixed count of decimals, written as `format!("{:.N}")` writes it, digit for
/// digit: rounded from the number's exact binary value, a tie to the even digit, the sign kept
/// on a negative number that rounds to zero. Evidence sentences hold several such numbers a
/// window, and the standard library's exact path (Grisu with a Dragon fallback) was a third of
/// the diagnosis's own instructions; this rounds the binary value with integers instead.
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    value: f64,
    decimals: u8,
}

impl Fixed {
    /// Most decimals the integer path takes; more go to the standard library.
    const MAX_DECIMALS: u8 = 3;

    pub fn new(value: f64, decimals: u8) -> Self {
        Fixed { value, decimals }
    }

    /// `|value| × 10^decimals` rounded half to even, exactly, where it fits in a `u64`.
    fn scaled(&self) -> Option<u64> {
        let abs = self.value.abs();
        // Below 2^53 / 10^3 the scaled integer stays under 2^63, and the value's binary
        // exponent is negative: it is `mantissa × 2^-shift`.
        if !abs.is_finite() || abs >= 9.0e12 || self.decimals > Self::MAX_DECIMALS {
            return None;
        }
        let bits = abs.to_bits();
        let biased = (bits >> 52) & 0x7ff;
        let fraction = bits & ((1 << 52) - 1);
        let (mantissa, shift) = if biased == 0 {
            (fraction, 1074)
        } else {
            (fraction | 1 << 52, 1075 - biased)
        };
        let scaled = u128::from(mantissa) * 10u128.pow(u32::from(self.decimals));
        if shift >= 127 {
            // Under 2^-64: rounds to zero.
            return Some(0);
        }
        let quotient = scaled >> shift;
        let rest = scaled & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let up = rest > half || (rest == half && quotient & 1 == 1);
        u64::try_from(quotient + u128::from(up)).ok()
    }
}

impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(scaled) = self.scaled() else {
            return write!(f, "{:.*}", usize::from(self.decimals), self.value);
        };
        // Digits from the last: at most 20 of the integer, the point and the sign.
        let mut buf = [0u8; 24];
        let mut at = buf.len();
        let mut rest = scaled;
        let mut digits = 0;
        while rest > 0 || digits <= self.decimals {
            if digits == self.decimals && digits > 0 {
                at -= 1;
                buf[at] = b'.';
            }
            at -= 1;
            buf[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            digits += 1;
        }
        if self.value.is_sign_negative() {
            at -= 1;
            buf[at] = b'-';
        }
        // Only ASCII digits, a point and a sign were written.
        f.pad(std::str::from_utf8(&buf[at..]).map_err(|_| std::fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn std_fixed(v: f64, decimals: u8) -> String {
        format!("{:.*}", usize::from(decimals), v)
    }

    #[test]
    fn fixed_writes_what_the_standard_library_writes_at_its_edges() {
        // Ties of the last decimal, numbers just off one, and the integer path's bounds…
        let near = "0 -0 0.25 0.35 2.5 3.5 -0.5 -1.5 0.05 0.15 -0.04 9.95 99.95 0.0005 0.0015 \
                    1.0005 1e-300 5e-324 -5e-324 8.999999999999e12 9e12 1e15 1e300 123456.789 \
                    0.999999 9.99995 0.3"
            .split_whitespace()
            .map(|v| v.parse::<f64>().expect("a number"));
        // …and what it leaves to the standard library.
        let far = [f64::MAX, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let edges = near.chain(far).chain([0.1 + 0.2, f64::MIN_POSITIVE]);
        for v in edges {
            for decimals in 0..=4 {
                assert_eq!(
                    Fixed::new(v, decimals).to_string(),
                    std_fixed(v, decimals),
                    "{v:e} to {decimals} decimals"
                );
            }
        }
    }

    #[test]
    fn fixed_writes_what_the_standard_library_writes_for_a_million_numbers() {
        // xorshift: the same numbers every run, spread over every exponent the integer path
        // takes, and numbers on a half of the last decimal, where rounding decides.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..1_000_000 {
            let r = next();
            let v = match i % 4 {
                0 => f64::from_bits(r >> 2),
                1 => (r % 2_000_001) as f64 / 1000.0 - 1000.0,
                2 => (r % 200_001) as f64 / 20.0,
                _ => (r >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((r % 30) as i32 - 15),
            };
            let decimals = (r % 4) as u8;
            assert_eq!(
                Fixed::new(v, decimals).to_string(),
                std_fixed(v, decimals),
                "{v:e} to {decimals} decimals"
            );
        }
    }

    #[test]
    fn fixed_pads_as_a_string_does() {
        assert_eq!(format!("[{:>6}]", Fixed::new(2.25, 1)), "[   2.2]");
        assert_eq!(format!("{}", pct(9.96)), "10.0%");
        assert_eq!(format!("{}", pct(10.5)), "10%");
        assert_eq!(rate(1536.0), "1.5 GiB/s");
        assert_eq!(rate(1023.5), "1024 MiB/s");
    }
}
