//! Kubernetes `resource.Quantity`: parsing and canonical formatting with the semantics of
//! `k8s.io/apimachinery/pkg/api/resource`, in exact integer arithmetic (no floating point).
//!
//! A quantity is `<sign><digits>[.<digits>]<suffix>` where the suffix is a binary SI suffix
//! (`Ki`..`Ei`), a decimal SI suffix (`n u m "" k M G T P E`) or a decimal exponent (`e3`,
//! `E-6`). The suffix family is the quantity's [`Format`], and canonical formatting keeps it
//! ("1024Mi" prints as "1Gi", "1000M" as "1G", "1e3" stays "1e3").
//!
//! Parsing follows upstream closely, including its quirks: values are rounded up (away from
//! zero) to nano precision, values that take the arbitrary-precision path are capped at
//! 2^63-1, a binary quantity below one becomes decimal, and `"1."`, `".5"`, `"+"` are accepted.
//! The one intended difference: upstream's exponent parsing wraps silently in old releases;
//! here (as in current upstream) an exponent outside ±(2^31-1) is rejected.

use std::cmp::Ordering;
use std::fmt;

/// The suffix family a quantity was written in; canonical formatting keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `n u m "" k M G T P E`
    DecimalSI,
    /// `Ki Mi Gi Ti Pi Ei`
    BinarySI,
    /// `e<int>` / `E<int>`
    DecimalExponent,
}

/// Why a string is not a quantity, or a value does not fit an integer milli-value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity: expected <number><suffix>, e.g. \"500m\", \"2\", \"1.5Gi\", \"1e3\"")]
    Format(String),
    #[error(
        "{0:?} has an unknown suffix: use one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3"
    )]
    Suffix(String),
    #[error("quantity {0} does not fit in a 64-bit integer milli-value")]
    MilliOverflow(String),
    #[error(
        "quantity {0} is finer than a milli-unit and would be rounded; write it in whole milli-units (e.g. \"1m\")"
    )]
    SubMilli(String),
}

/// Largest value the arbitrary-precision parse path keeps (upstream `maxAllowed`): 2^63-1.
const MAX_ALLOWED: u128 = i64::MAX as u128;
/// `MAX_ALLOWED` in nano-units, as decimal digits (28 of them).
const MAX_ALLOWED_NANO_DIGITS: &[u8] = b"9223372036854775807000000000";

/// A parsed quantity: `(-1)^negative × mantissa × 10^exponent`, plus the format to print it in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exponent: i64,
    format: Format,
}

impl Quantity {
    /// The quantity `milli / 1000`, formatted as decimal SI (what `NewMilliQuantity(v, DecimalSI)`
    /// gives upstream).
    pub fn from_milli(milli: i64) -> Quantity {
        Quantity {
            negative: milli < 0,
            mantissa: u128::from(milli.unsigned_abs()),
            exponent: -3,
            format: Format::DecimalSI,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Parses `s` as `resource.ParseQuantity` does.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let bad = || QuantityError::Format(s.to_string());
        if s.is_empty() {
            return Err(bad());
        }
        if s == "0" {
            return Ok(Quantity::zero(Format::DecimalSI));
        }
        let parts = split(s).ok_or_else(bad)?;
        let (base, exponent, format) =
            interpret_suffix(parts.suffix).ok_or_else(|| QuantityError::Suffix(s.to_string()))?;

        if let Some(q) = fast_path(&parts, base, exponent, format) {
            return Ok(q);
        }
        Ok(slow_path(&parts, base, exponent, format))
    }

    /// The value in milli-units rounded up (away from zero), as `Quantity.MilliValue()`.
    pub fn milli_value(&self) -> Result<i64, QuantityError> {
        self.milli(false)
    }

    /// The value in milli-units, or an error when it is not a whole number of milli-units.
    pub fn exact_milli_value(&self) -> Result<i64, QuantityError> {
        self.milli(true)
    }

    fn milli(&self, exact: bool) -> Result<i64, QuantityError> {
        if self.mantissa == 0 {
            return Ok(0);
        }
        let overflow = || QuantityError::MilliOverflow(self.to_string());
        let shift = self.exponent + 3;
        let magnitude = if shift >= 0 {
            let factor =
                u32::try_from(shift).ok().and_then(|s| 10u128.checked_pow(s)).ok_or_else(overflow)?;
            self.mantissa.checked_mul(factor).ok_or_else(overflow)?
        } else {
            // A divisor beyond 10^38 leaves only the round-up of a non-zero remainder.
            let (quotient, remainder) = match u32::try_from(-shift).ok().and_then(|s| 10u128.checked_pow(s)) {
                Some(div) => (self.mantissa / div, self.mantissa % div),
                None => (0, self.mantissa),
            };
            if remainder != 0 {
                if exact {
                    return Err(QuantityError::SubMilli(self.to_string()));
                }
                quotient + 1
            } else {
                quotient
            }
        };
        let limit = if self.negative { i64::MIN.unsigned_abs() as u128 } else { i64::MAX as u128 };
        if magnitude > limit {
            return Err(overflow());
        }
        let magnitude = magnitude as i128;
        Ok((if self.negative { -magnitude } else { magnitude }) as i64)
    }

    fn zero(format: Format) -> Quantity {
        Quantity { negative: false, mantissa: 0, exponent: 0, format }
    }

    /// The exact value as an integer, if it is one and fits.
    fn as_integer(&self) -> Option<u128> {
        if self.exponent >= 0 {
            let factor = 10u128.checked_pow(u32::try_from(self.exponent).ok()?)?;
            self.mantissa.checked_mul(factor)
        } else {
            let div = 10u128.checked_pow(u32::try_from(-self.exponent).ok()?)?;
            self.mantissa.is_multiple_of(div).then_some(self.mantissa / div)
        }
    }

    /// `|self|` compared with an integer.
    fn cmp_abs(&self, other: u128) -> Ordering {
        if self.exponent >= 0 {
            match u32::try_from(self.exponent).ok().and_then(|e| 10u128.checked_pow(e)) {
                Some(f) => match self.mantissa.checked_mul(f) {
                    Some(v) => v.cmp(&other),
                    None => Ordering::Greater,
                },
                None => {
                    if self.mantissa == 0 {
                        0u128.cmp(&other)
                    } else {
                        Ordering::Greater
                    }
                }
            }
        } else {
            match u32::try_from(-self.exponent).ok().and_then(|e| 10u128.checked_pow(e)) {
                Some(div) => {
                    let whole = self.mantissa / div;
                    match whole.cmp(&other) {
                        Ordering::Equal if !self.mantissa.is_multiple_of(div) => Ordering::Greater,
                        o => o,
                    }
                }
                None => {
                    // |self| < 1 (mantissa < 10^39 and divisor > 10^38 ... handled conservatively).
                    if self.mantissa == 0 {
                        0u128.cmp(&other)
                    } else if other == 0 {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    }
                }
            }
        }
    }

    /// Canonical decimal digits and an exponent that is a multiple of three
    /// (upstream `AsCanonicalBytes`).
    fn canonical_decimal(&self) -> (u128, i64) {
        let mut m = self.mantissa;
        let mut e = self.exponent;
        while m >= 10 && m.is_multiple_of(10) {
            m /= 10;
            e += 1;
        }
        // Floor the exponent to a multiple of three; the mantissa grows by at most 100×, which
        // always fits: mantissas here are below 10^29.
        match e.rem_euclid(3) {
            1 => {
                m *= 10;
                e -= 1;
            }
            2 => {
                m *= 100;
                e -= 2;
            }
            _ => {}
        }
        (m, e)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form, as `Quantity.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return f.write_str("0");
        }
        let sign = if self.negative { "-" } else { "" };
        let mut format = self.format;
        let mut binary_value = None;
        if format == Format::BinarySI {
            // Below 1024 and non-integral values read better (and exactly) in decimal.
            if self.cmp_abs(1024) == Ordering::Less {
                format = Format::DecimalSI;
            } else {
                match self.as_integer() {
                    Some(v) => binary_value = Some(v),
                    None => format = Format::DecimalSI,
                }
            }
        }
        if let Some(mut v) = binary_value {
            let mut times = 0;
            while v >= 1024 && v % 1024 == 0 {
                v /= 1024;
                times += 1;
            }
            if let Some(suffix) = binary_suffix(times) {
                return write!(f, "{sign}{v}{suffix}");
            }
            // Past Ei there is no binary suffix: fall back to exact decimal.
            format = Format::DecimalSI;
        }
        let (m, e) = self.canonical_decimal();
        match format {
            Format::DecimalExponent => {
                if e == 0 {
                    write!(f, "{sign}{m}")
                } else {
                    write!(f, "{sign}{m}e{e}")
                }
            }
            _ => match decimal_suffix(e) {
                Some(suffix) => write!(f, "{sign}{m}{suffix}"),
                // Beyond E or below n there is no SI suffix: exponent notation keeps the value.
                None => write!(f, "{sign}{m}e{e}"),
            },
        }
    }
}

fn decimal_suffix(exponent: i64) -> Option<&'static str> {
    Some(match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

fn binary_suffix(times_1024: u32) -> Option<&'static str> {
    Some(match times_1024 {
        0 => "",
        1 => "Ki",
        2 => "Mi",
        3 => "Gi",
        4 => "Ti",
        5 => "Pi",
        6 => "Ei",
        _ => return None,
    })
}

/// The textual parts of a quantity.
struct Parts<'a> {
    positive: bool,
    /// Integer digits without leading zeros; "0" when there are none.
    num: &'a str,
    /// Fraction digits as written (may be empty).
    denom: &'a str,
    suffix: &'a str,
}

/// Splits a quantity into sign, integer digits, fraction digits and suffix, as upstream's
/// `parseQuantityString`. `None` when the text after the suffix letters is not an exponent.
fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Some(Parts { positive, num: "0", denom: "", suffix: "" });
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == num_start { "0" } else { &s[num_start..pos] };
    let mut denom = "";
    if pos < end && b[pos] == b'.' {
        pos += 1;
        let d_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d_start..pos];
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return None;
    }
    Some(Parts { positive, num, denom, suffix: &s[suffix_start..] })
}

/// `(base, exponent, format)` of a suffix: base 10 or 2.
fn interpret_suffix(suffix: &str) -> Option<(u32, i64, Format)> {
    let dec = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = dec {
        return Some((10, e, Format::DecimalSI));
    }
    let bin = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = bin {
        return Some((2, e, Format::BinarySI));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    let e: i64 = rest.parse().ok()?;
    if e.unsigned_abs() > i32::MAX as u64 {
        return None;
    }
    Some((10, e, Format::DecimalExponent))
}

/// Upstream's int64 fast path: exact, no rounding and no cap. `None` when upstream would take
/// the arbitrary-precision path.
fn fast_path(p: &Parts<'_>, base: u32, exponent: i64, format: Format) -> Option<Quantity> {
    let digits = (p.num.len() + p.denom.len()) as i64;
    let (precision, mut scale, multiplier) = if base == 10 {
        (18 - digits, exponent, 1i64)
    } else if p.denom.is_empty() {
        // 1Mi (2^20) has ~6 digits of decimal precision: exponent*3/10 is roughly that.
        (15 - p.num.len() as i64 - (exponent * 3 / 10) - 1, 0, 1i64 << exponent)
    } else {
        (-1, 0, 1)
    };
    if precision < 0 {
        return None;
    }
    scale -= p.denom.len() as i64;
    if scale < -9 {
        return None;
    }
    // At most 18 digits: always fits.
    let value: i64 = format!("{}{}", p.num, p.denom).parse().ok()?;
    let result = value.checked_mul(multiplier)?;
    Some(Quantity { negative: !p.positive && result != 0, mantissa: result as u128, exponent: scale, format })
}

/// Upstream's arbitrary-precision path: round up to nano precision, cap at 2^63-1.
fn slow_path(p: &Parts<'_>, base: u32, exponent: i64, mut format: Format) -> Quantity {
    // Decimal digits of num+denom, most significant first, leading zeros dropped.
    let mut digits: Vec<u8> =
        p.num.bytes().chain(p.denom.bytes()).map(|c| c - b'0').skip_while(|d| *d == 0).collect();
    if digits.is_empty() {
        return Quantity::zero(format);
    }
    // Nano-units: value × 10^9 = digits × 2^b × 10^k.
    let mut k = 9 - p.denom.len() as i64;
    if base == 10 {
        k += exponent;
    } else {
        mul_pow2(&mut digits, exponent as u32);
    }
    let nano: Vec<u8> = if k >= 0 {
        if digits.len() as i64 + k > MAX_ALLOWED_NANO_DIGITS.len() as i64 {
            MAX_ALLOWED_NANO_DIGITS.iter().map(|c| c - b'0').collect()
        } else {
            digits.extend(std::iter::repeat_n(0, k as usize));
            digits
        }
    } else {
        // Drop -k digits; any non-zero dropped digit rounds the magnitude up.
        let drop = usize::try_from(-k).unwrap_or(usize::MAX).min(digits.len());
        let keep = digits.len() - drop;
        let sticky = digits[keep..].iter().any(|d| *d != 0);
        digits.truncate(keep);
        if sticky {
            add_one(&mut digits);
        }
        digits
    };
    let mut nano = trim_leading_zeros(nano);
    if cmp_digits(&nano, MAX_ALLOWED_NANO_DIGITS) == Ordering::Greater {
        nano = MAX_ALLOWED_NANO_DIGITS.iter().map(|c| c - b'0').collect();
    }
    let mantissa = nano.iter().fold(0u128, |acc, d| acc * 10 + u128::from(*d));
    if format == Format::BinarySI && mantissa > 0 && mantissa < 1_000_000_000 {
        // A binary quantity below one has no binary spelling.
        format = Format::DecimalSI;
    }
    debug_assert!(mantissa <= MAX_ALLOWED * 1_000_000_000);
    Quantity { negative: !p.positive && mantissa != 0, mantissa, exponent: -9, format }
}

fn mul_pow2(digits: &mut Vec<u8>, mut bits: u32) {
    while bits > 0 {
        let step = bits.min(30);
        bits -= step;
        let factor = 1u64 << step;
        let mut carry = 0u64;
        for d in digits.iter_mut().rev() {
            let v = u64::from(*d) * factor + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        let mut head = Vec::new();
        while carry > 0 {
            head.push((carry % 10) as u8);
            carry /= 10;
        }
        head.reverse();
        head.append(digits);
        *digits = head;
    }
}

fn add_one(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == 9 {
            *d = 0;
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, 1);
}

fn trim_leading_zeros(mut digits: Vec<u8>) -> Vec<u8> {
    let first = digits.iter().position(|d| *d != 0).unwrap_or(digits.len());
    digits.drain(..first);
    digits
}

/// Compares digit values (0..=9) with ASCII digits, both without leading zeros.
fn cmp_digits(values: &[u8], ascii: &[u8]) -> Ordering {
    values.len().cmp(&ascii.len()).then_with(|| values.iter().copied().cmp(ascii.iter().map(|c| c - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(neg: bool, mantissa: u128, exponent: i64, format: Format) -> Quantity {
        Quantity { negative: neg, mantissa, exponent, format }
    }
    fn dec(m: i128, e: i64, f: Format) -> Quantity {
        q(m < 0, m.unsigned_abs(), e, f)
    }

    /// Same value (regardless of representation) and same format.
    fn same(a: &Quantity, b: &Quantity) -> bool {
        let norm = |x: &Quantity| {
            let (mut m, mut e) = (x.mantissa, x.exponent);
            while m != 0 && m % 10 == 0 {
                m /= 10;
                e += 1;
            }
            if m == 0 { (false, 0, 0) } else { (x.negative, m, e) }
        };
        norm(a) == norm(b) && a.format == b.format
    }

    use Format::{BinarySI as B, DecimalExponent as X, DecimalSI as D};

    /// The parse table of upstream's quantity tests (value and format).
    fn parse_table() -> Vec<(&'static str, Quantity)> {
        let max = q(false, MAX_ALLOWED, 0, B);
        vec![
            ("0", dec(0, 0, D)),
            ("0n", dec(0, 0, D)),
            ("0u", dec(0, 0, D)),
            ("0m", dec(0, 0, D)),
            ("0Ki", dec(0, 0, B)),
            ("0k", dec(0, 0, D)),
            ("0Mi", dec(0, 0, B)),
            ("0M", dec(0, 0, D)),
            ("0Gi", dec(0, 0, B)),
            ("0G", dec(0, 0, D)),
            ("0Ti", dec(0, 0, B)),
            ("0T", dec(0, 0, D)),
            ("1", dec(1, 0, D)),
            ("1Ki", dec(1024, 0, B)),
            ("8Ki", dec(8 * 1024, 0, B)),
            ("7Mi", dec(7 << 20, 0, B)),
            ("6Gi", dec(6 << 30, 0, B)),
            ("5Ti", dec(5 << 40, 0, B)),
            ("4Pi", dec(4 << 50, 0, B)),
            ("3Ei", dec(3 << 60, 0, B)),
            ("10Ti", dec(10 << 40, 0, B)),
            ("100Ti", dec(100 << 40, 0, B)),
            ("5n", dec(5, -9, D)),
            ("4u", dec(4, -6, D)),
            ("3m", dec(3, -3, D)),
            ("9", dec(9, 0, D)),
            ("8k", dec(8, 3, D)),
            ("50k", dec(5, 4, D)),
            ("7M", dec(7, 6, D)),
            ("6G", dec(6, 9, D)),
            ("5T", dec(5, 12, D)),
            ("40T", dec(4, 13, D)),
            ("300T", dec(3, 14, D)),
            ("2P", dec(2, 15, D)),
            ("1E", dec(1, 18, D)),
            ("1E-3", dec(1, -3, X)),
            ("1e3", dec(1, 3, X)),
            ("1E6", dec(1, 6, X)),
            ("1e9", dec(1, 9, X)),
            ("1E12", dec(1, 12, X)),
            ("1e15", dec(1, 15, X)),
            ("1E18", dec(1, 18, X)),
            ("1e14", dec(1, 14, X)),
            ("1e13", dec(1, 13, X)),
            ("100.035k", dec(100035, 0, D)),
            ("0.001", dec(1, -3, D)),
            ("0.0005k", dec(5, -1, D)),
            ("0.005", dec(5, -3, D)),
            ("0.05", dec(5, -2, D)),
            ("0.5", dec(5, -1, D)),
            ("0.00050k", dec(5, -1, D)),
            ("0.00500", dec(5, -3, D)),
            ("0.05000", dec(5, -2, D)),
            ("0.50000", dec(5, -1, D)),
            ("0.5e0", dec(5, -1, X)),
            ("0.5e-1", dec(5, -2, X)),
            ("0.5e-2", dec(5, -3, X)),
            ("10.035M", dec(10035, 3, D)),
            ("1.2e3", dec(12, 2, X)),
            ("1.3E+6", dec(13, 5, X)),
            ("1.40e9", dec(14, 8, X)),
            ("1.53E12", dec(153, 10, X)),
            ("1.6e15", dec(16, 14, X)),
            ("1.7E18", dec(17, 17, X)),
            ("9.01", dec(901, -2, D)),
            ("8.1k", dec(81, 2, D)),
            ("7.123456M", dec(7123456, 0, D)),
            ("6.987654321G", dec(6987654321, 0, D)),
            ("5.444T", dec(5444, 9, D)),
            ("40.1T", dec(401, 11, D)),
            ("300.2T", dec(3002, 11, D)),
            ("2.5P", dec(25, 14, D)),
            ("1.01E", dec(101, 16, D)),
            // Rounded up to nano precision, or capped.
            ("3.001n", dec(4, -9, D)),
            ("1.1E-9", dec(2, -9, X)),
            ("0.0000000001", dec(1, -9, D)),
            ("0.0000000005", dec(1, -9, D)),
            ("0.00000000050", dec(1, -9, D)),
            ("0.5e-9", dec(1, -9, X)),
            ("0.9n", dec(1, -9, D)),
            ("0.00000012345", dec(124, -9, D)),
            ("0.00000012354", dec(124, -9, D)),
            ("9Ei", max.clone()),
            ("9223372036854775807Ki", max),
            ("12E", dec(12, 18, D)),
            // Fractional binary values.
            ("100.035Ki", dec(10243584, -2, B)),
            ("0.5Mi", dec(512 * 1024, 0, B)),
            ("0.05Gi", dec(536870912, -1, B)),
            ("0.025Ti", dec(274877906944, -1, B)),
            // Odd spellings that are still accepted.
            ("0.000000000001Ki", dec(2, -9, D)),
            (".001", dec(1, -3, D)),
            (".0001k", dec(100, -3, D)),
            ("1.", dec(1, 0, D)),
            ("1.G", dec(1, 9, D)),
        ]
    }

    #[test]
    fn parses_upstream_table() {
        for (input, want) in parse_table() {
            let got = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert!(same(&got, &want), "{input}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn parses_upstream_table_negated_and_plus() {
        for (input, want) in parse_table() {
            let neg = Quantity::parse(&format!("-{input}")).unwrap();
            let mut want_neg = want.clone();
            want_neg.negative = want.mantissa != 0;
            assert!(same(&neg, &want_neg), "-{input}: got {neg:?}");
            let plus = Quantity::parse(&format!("+{input}")).unwrap();
            assert!(same(&plus, &want), "+{input}: got {plus:?}");
        }
    }

    #[test]
    fn rejects_invalid() {
        for input in [
            "",
            "1.1.M",
            "1+1.0M",
            "0.1mi",
            "0.1am",
            "aoeu",
            ".5i",
            "1i",
            "-3.01i",
            "-3.01e-",
            "1e4294967297",
            " 1",
            "1 ",
            "1e",
            "1K",
            "1Ki2",
            "1e2147483648",
            "1E-2147483648",
            "Non-Numeric",
            "1,5",
        ] {
            assert!(Quantity::parse(input).is_err(), "{input:?} parsed");
        }
        assert!(matches!(Quantity::parse("1K"), Err(QuantityError::Suffix(_))));
        assert!(matches!(Quantity::parse("aoeu"), Err(QuantityError::Format(_))));
        assert!(Quantity::parse("1E2147483647").is_ok());
        assert!(Quantity::parse("1E-2147483647").is_ok());
    }

    #[test]
    fn odd_but_valid_spellings() {
        for (input, canonical) in [(".", "0"), ("-.", "0"), ("+", "0"), ("-", "0"), ("000", "0"), ("-0", "0")]
        {
            assert_eq!(Quantity::parse(input).unwrap().to_string(), canonical, "{input}");
        }
    }

    #[test]
    fn formats_upstream_table() {
        let table: Vec<(Quantity, &str, &str)> = vec![
            (dec(1 << 30, 0, B), "1Gi", "1024Mi"),
            (dec(300 << 20, 0, B), "300Mi", "307200Ki"),
            (dec(6 * 1024, 0, B), "6Ki", ""),
            (dec(1001 << 30, 0, B), "1001Gi", "1025024Mi"),
            (dec(1 << 40, 0, B), "1Ti", "1024Gi"),
            (dec(5, 0, B), "5", "5000m"),
            (dec(500, -3, B), "500m", "0.5"),
            (dec(1, 9, D), "1G", "1000M"),
            (dec(1000, 6, D), "1G", "0.001T"),
            (dec(1000000, 3, D), "1G", ""),
            (dec(1000000000, 0, D), "1G", ""),
            (dec(1, -3, D), "1m", "1000u"),
            (dec(80, -3, D), "80m", ""),
            (dec(1080, -3, D), "1080m", "1.08"),
            (dec(108, -2, D), "1080m", "1080000000n"),
            (dec(10800, -4, D), "1080m", ""),
            (dec(300, 6, D), "300M", ""),
            (dec(1, 12, D), "1T", ""),
            (dec(1, 18, D), "1E", ""),
            (dec(1, 21, D), "1e21", "1000E"),
            (dec(5, 21, D), "5e21", "5000E"),
            (dec(1, 24, D), "1e24", "1000000E"),
            (dec(1, 70, B), "10e69", ""),
            (dec(2, 70, B), "20e69", ""),
            (dec(1, 72, B), "1e72", ""),
            (dec(1234567, 6, D), "1234567M", ""),
            (dec(1234567, -3, B), "1234567m", ""),
            (dec(3, 3, D), "3k", ""),
            (dec(1025, 0, B), "1025", ""),
            (dec(0, 0, D), "0", ""),
            (dec(0, 0, B), "0", ""),
            (dec(1, 9, X), "1e9", ".001e12"),
            (dec(1, -3, X), "1e-3", "0.001e0"),
            (dec(1, -9, X), "1e-9", "1000e-12"),
            (dec(80, -3, X), "80e-3", ""),
            (dec(300, 6, X), "300e6", ""),
            (dec(1, 12, X), "1e12", ""),
            (dec(1, 3, X), "1e3", ""),
            (dec(3, 3, X), "3e3", ""),
            (dec(0, 0, X), "0", "00"),
            (dec(1, -9, D), "1n", ""),
            (dec(80, -9, D), "80n", ""),
            (dec(1080, -9, D), "1080n", ""),
            (dec(108, -8, D), "1080n", ""),
            (dec(10800, -10, D), "1080n", ""),
            (dec(1, -6, D), "1u", ""),
            (dec(80, -6, D), "80u", ""),
            (dec(1080, -6, D), "1080u", ""),
        ];
        for (value, canonical, alternate) in table {
            assert_eq!(value.to_string(), canonical, "{value:?}");
            // The canonical form parses back to the same value and prints unchanged.
            let back = Quantity::parse(canonical).unwrap();
            assert_eq!(back.to_string(), canonical);
            if !alternate.is_empty() {
                assert_eq!(
                    Quantity::parse(alternate).unwrap().to_string(),
                    canonical,
                    "alternate {alternate}"
                );
            }
            if value.mantissa != 0 {
                let mut neg = value.clone();
                neg.negative = true;
                assert_eq!(neg.to_string(), format!("-{canonical}"));
            }
        }
        // Below nano (only reachable by construction): exponent notation.
        assert_eq!(dec(1, -12, D).to_string(), "1e-12");
        assert_eq!(dec(1, -10, D).to_string(), "100e-12");
        // Binary past Ei without decimal zeros prints every digit.
        assert_eq!(q(false, 1u128 << 70, 0, B).to_string(), "1180591620717411303424");
        assert_eq!(dec(2000, 0, B).to_string(), "2000");
        assert_eq!(dec(-2000, 0, B).to_string(), "-2000");
    }

    #[test]
    fn parse_then_emit() {
        for (input, out) in [
            ("1Ki", "1Ki"),
            ("1Mi", "1Mi"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000M", "1G"),
            (".001Ki", "1024m"),
            (".000001Ki", "1024u"),
            (".000000001Ki", "1024n"),
            (".000000000001Ki", "2n"),
            ("1.5", "1500m"),
            ("1.5Gi", "1536Mi"),
            ("0.5", "500m"),
            ("9Ei", "9223372036854775807"),
        ] {
            assert_eq!(Quantity::parse(input).unwrap().to_string(), out, "{input}");
            let neg = Quantity::parse(&format!("-{input}")).unwrap();
            assert_eq!(neg.to_string(), format!("-{out}"), "-{input}");
        }
    }

    #[test]
    fn milli_values() {
        for (input, milli) in [
            ("500m", 500),
            ("0.5", 500),
            ("2", 2000),
            ("1Ki", 1_024_000),
            ("1.5Gi", 1_610_612_736_000),
            ("1n", 1),
            ("-1n", -1),
            ("1001u", 2),
            ("-0.0005", -1),
            ("0", 0),
            ("9223372036854775m", 9_223_372_036_854_775),
            ("9223372036854775807m", i64::MAX),
            ("-9223372036854775808m", i64::MIN),
        ] {
            assert_eq!(Quantity::parse(input).unwrap().milli_value(), Ok(milli), "{input}");
        }
        for input in ["9223372036854775808m", "12E", "1e1000", "9Ei", "-9223372036854775809m"] {
            assert!(
                matches!(Quantity::parse(input).unwrap().milli_value(), Err(QuantityError::MilliOverflow(_))),
                "{input}"
            );
        }
        assert_eq!(Quantity::parse("1e-1000").unwrap().milli_value(), Ok(1));
        assert!(matches!(
            Quantity::parse("1n").unwrap().exact_milli_value(),
            Err(QuantityError::SubMilli(_))
        ));
        assert_eq!(Quantity::parse("1.5m").unwrap().milli_value(), Ok(2));
        assert_eq!(Quantity::parse("1.5").unwrap().exact_milli_value(), Ok(1500));
    }

    #[test]
    fn from_milli_is_canonical_decimal() {
        for (milli, s) in [
            (500, "500m"),
            (1500, "1500m"),
            (2000, "2"),
            (0, "0"),
            (-250, "-250m"),
            (1_000_000, "1k"),
            (1_073_741_824_000, "1073741824"),
            (i64::MAX, "9223372036854775807m"),
            (i64::MIN, "-9223372036854775808m"),
        ] {
            let quantity = Quantity::from_milli(milli);
            assert_eq!(quantity.to_string(), s);
            assert_eq!(Quantity::parse(s).unwrap().exact_milli_value(), Ok(milli));
        }
    }

    #[test]
    fn huge_inputs_stay_cheap_and_exact() {
        let long_fraction = format!("0.{}1", "0".repeat(100_000));
        assert_eq!(Quantity::parse(&long_fraction).unwrap().to_string(), "1n");
        let long_int = format!("{}Ki", "9".repeat(100_000));
        assert_eq!(Quantity::parse(&long_int).unwrap().to_string(), "9223372036854775807");
        let exact = format!("1.{}Ki", "0".repeat(50_000));
        assert_eq!(Quantity::parse(&exact).unwrap().to_string(), "1Ki");
        assert_eq!(Quantity::parse("1e2147483647").unwrap().to_string(), "10e2147483646");
        assert_eq!(
            Quantity::parse("123456789012345678901234567890e-2147483647").unwrap().to_string(),
            "1e-9"
        );
    }
}
