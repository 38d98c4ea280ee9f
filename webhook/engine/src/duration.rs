//! Go durations: `time.ParseDuration` and `time.Duration.String()`, in nanoseconds, plus the
//! whole-second view the Duration strategy uses.
//!
//! Grammar: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+` with units `ns`, `us` (`µs`, `μs`), `ms`, `s`,
//! `m`, `h`, or a bare `0`. The range is that of Go's `time.Duration` (int64 nanoseconds,
//! about ±292 years).
//!
//! Seconds: a duration converts to integer seconds only when it is a whole number of seconds;
//! anything finer ("1.5s", "300ms") is an error rather than a silent truncation, so the
//! string→integer direction stays exact.

/// Why a string is not a duration or a value does not convert.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration: expected e.g. \"90s\", \"5m\", \"1h30m\", \"1.5h\"")]
    Invalid(String),
    #[error("{0:?} has no unit: add one of ns, us, ms, s, m, h (e.g. \"30s\")")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?}: use one of ns, us, ms, s, m, h")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is out of range (about ±292 years)")]
    Overflow(String),
    #[error("duration {0:?} is not a whole number of seconds; the integer field holds seconds")]
    SubSecond(String),
    #[error("{0} seconds is out of the range of a Go duration (about ±292 years)")]
    SecondsOutOfRange(i64),
}

const NANOS_PER_SECOND: i64 = 1_000_000_000;

fn unit_nanos(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => 1,
        // "us", "µs" (U+00B5 micro sign) and "μs" (U+03BC Greek small letter mu).
        b"us" | b"\xC2\xB5s" | b"\xCE\xBCs" => 1_000,
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        b"m" => 60_000_000_000,
        b"h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string into nanoseconds, exactly as `time.ParseDuration`.
pub fn parse_nanos(input: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let overflow = || DurationError::Overflow(input.to_string());
    let mut s = input.as_bytes();
    let mut negative = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        negative = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part: an overflow here is an error, as upstream.
        let mut whole: u64 = 0;
        let mut i = 0;
        while i < s.len() && s[i].is_ascii_digit() {
            if whole > LIMIT / 10 {
                return Err(invalid());
            }
            whole = whole * 10 + u64::from(s[i] - b'0');
            if whole > LIMIT {
                return Err(invalid());
            }
            i += 1;
        }
        let had_whole = i > 0;
        s = &s[i..];
        // Fraction: digits past what fits in 63 bits are ignored, as upstream.
        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut had_frac = false;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let mut j = 0;
            let mut overflowed = false;
            while j < s.len() && s[j].is_ascii_digit() {
                if !overflowed {
                    if frac > (LIMIT - 1) / 10 {
                        overflowed = true;
                    } else {
                        let next = frac * 10 + u64::from(s[j] - b'0');
                        if next > LIMIT {
                            overflowed = true;
                        } else {
                            frac = next;
                            scale *= 10.0;
                        }
                    }
                }
                j += 1;
            }
            had_frac = j > 0;
            s = &s[j..];
        }
        if !had_whole && !had_frac {
            return Err(invalid());
        }
        let unit_len = s.iter().position(|c| *c == b'.' || c.is_ascii_digit()).unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let per = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: String::from_utf8_lossy(unit).into_owned(),
            input: input.to_string(),
        })?;
        if whole > LIMIT / per {
            return Err(invalid());
        }
        let mut v = whole * per;
        if frac > 0 {
            // Go computes the fraction in float64 (nanosecond-accurate up to hours); doing the
            // same keeps results identical to Go's for every input.
            v += (frac as f64 * (per as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        total += v;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if negative {
        // total ≤ 2^63, so the negation always fits.
        return Ok((total as i128).wrapping_neg() as i64);
    }
    i64::try_from(total).map_err(|_| overflow())
}

/// Formats nanoseconds as Go's `Duration.String()`: "1h2m3.5s", "1.5ms", "0s".
pub fn format_nanos(nanos: i64) -> String {
    let negative = nanos < 0;
    let mut u = nanos.unsigned_abs();
    let mut out = String::new();
    if u < NANOS_PER_SECOND as u64 {
        if u == 0 {
            return "0s".to_string();
        }
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let (int, frac) = split_fraction(u, prec);
        out.push_str(&int.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (secs, frac) = split_fraction(u, 9);
        u = secs;
        let s = u % 60;
        u /= 60;
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if negative {
        out.insert(0, '-');
    }
    out
}

/// Splits `v` into `v / 10^prec` and the fraction ".ddd" without trailing zeros ("" when 0).
fn split_fraction(v: u64, prec: u32) -> (u64, String) {
    let div = 10u64.pow(prec);
    let frac = v % div;
    if frac == 0 {
        return (v / div, String::new());
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (v / div, format!(".{}", digits.trim_end_matches('0')))
}

/// Whole seconds of a Go duration string; an error when it has a sub-second part.
pub fn parse_seconds(input: &str) -> Result<i64, DurationError> {
    let nanos = parse_nanos(input)?;
    if nanos % NANOS_PER_SECOND != 0 {
        return Err(DurationError::SubSecond(input.to_string()));
    }
    Ok(nanos / NANOS_PER_SECOND)
}

/// The canonical Go spelling of a number of seconds ("5m0s" for 300).
pub fn format_seconds(seconds: i64) -> Result<String, DurationError> {
    let nanos = seconds.checked_mul(NANOS_PER_SECOND).ok_or(DurationError::SecondsOutOfRange(seconds))?;
    Ok(format_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: i64 = 1;
    const US: i64 = 1_000;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;

    /// Go's own parse table (time package tests), restated.
    #[test]
    fn parses_go_table() {
        for (input, want) in [
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600 * MS),
            ("5.s", 5 * S),
            (".5s", 500 * MS),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4 * MS),
            ("1.0040s", S + 4 * MS),
            ("100.00100s", 100 * S + MS),
            ("10ns", 10 * NS),
            ("11us", 11 * US),
            ("12µs", 12 * US),
            ("12μs", 12 * US),
            ("13ms", 13 * MS),
            ("14s", 14 * S),
            ("15m", 15 * M),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * M),
            ("10.5s4m", 4 * M + 10 * S + 500 * MS),
            ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
            ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
            ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
            ("52763797000ns", 52763797000 * NS),
            ("0.3333333333333333333h", 20 * M),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * M),
            ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
        ] {
            assert_eq!(parse_nanos(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_go_failures() {
        for input in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{0085}\u{0085}",
            "\u{FFFD}",
            "9223372036854775808ns",
            "9223372036854775.808us",
            "9223372036854ms775us808ns",
            "-9223372036854775809ns",
            "3000000h",
            "1h-2m",
            " 1s",
            "1s ",
        ] {
            assert!(parse_nanos(input).is_err(), "{input:?} parsed");
        }
        assert!(matches!(parse_nanos("3"), Err(DurationError::MissingUnit(_))));
        assert!(matches!(parse_nanos("1d"), Err(DurationError::UnknownUnit { .. })));
    }

    #[test]
    fn formats_like_go() {
        for (nanos, want) in [
            (0, "0s"),
            (NS, "1ns"),
            (1100 * NS, "1.1µs"),
            (2200 * US, "2.2ms"),
            (3300 * MS, "3.3s"),
            (4 * M + 5 * S, "4m5s"),
            (4 * M + 5001 * MS, "4m5.001s"),
            (5 * H + 6 * M + 7001 * MS, "5h6m7.001s"),
            (8 * M + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (300 * S, "5m0s"),
            (H, "1h0m0s"),
            (-90 * S, "-1m30s"),
        ] {
            assert_eq!(format_nanos(nanos), want);
            assert_eq!(parse_nanos(want), Ok(nanos), "format output must parse back: {want}");
        }
    }

    #[test]
    fn seconds_are_exact() {
        assert_eq!(parse_seconds("5m"), Ok(300));
        assert_eq!(parse_seconds("1h30m"), Ok(5400));
        assert_eq!(parse_seconds("1.5h"), Ok(5400));
        assert_eq!(parse_seconds("-90s"), Ok(-90));
        assert_eq!(parse_seconds("0"), Ok(0));
        assert_eq!(parse_seconds("1000ms"), Ok(1));
        assert!(matches!(parse_seconds("1.5s"), Err(DurationError::SubSecond(_))));
        assert!(matches!(parse_seconds("300ms"), Err(DurationError::SubSecond(_))));
        assert_eq!(format_seconds(300).as_deref(), Ok("5m0s"));
        assert_eq!(format_seconds(0).as_deref(), Ok("0s"));
        assert_eq!(format_seconds(59).as_deref(), Ok("59s"));
        assert_eq!(format_seconds(-3600).as_deref(), Ok("-1h0m0s"));
        assert_eq!(format_seconds(9_223_372_036).as_deref(), Ok("2562047h47m16s"));
        assert!(matches!(format_seconds(9_223_372_037), Err(DurationError::SecondsOutOfRange(_))));
        for secs in [0, 1, 59, 60, 61, 3599, 3600, 86_400, 1_000_000, -7] {
            assert_eq!(parse_seconds(&format_seconds(secs).unwrap()), Ok(secs));
        }
    }
}

/// A command-line duration: Go syntax (`250ms`, `5s`, `1m30s`, `2h`) or a bare number of
/// seconds, never negative. Shared by every dco binary's flags.
pub fn parse_flag(input: &str) -> Result<std::time::Duration, String> {
    let s = input.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(std::time::Duration::from_secs)
            .map_err(|_| format!("{s:?} is too large a number of seconds"));
    }
    match parse_nanos(s) {
        Ok(n) if n >= 0 => Ok(std::time::Duration::from_nanos(n.unsigned_abs())),
        Ok(_) => Err(format!("{s:?} is negative; durations here must be zero or more")),
        Err(_) => {
            Err(format!("{s:?} is not a duration; use e.g. 500ms, 5s, 1m30s, 2h or a number of seconds"))
        }
    }
}

#[cfg(test)]
mod flag_tests {
    use super::parse_flag;
    use std::time::Duration;

    #[test]
    fn flags_take_go_durations_and_bare_seconds() {
        assert_eq!(parse_flag("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_flag("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_flag("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_flag("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_flag("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_flag("-5s").unwrap_err().contains("negative"));
        assert!(parse_flag("5 parsecs").unwrap_err().contains("not a duration"));
        assert!(parse_flag("").is_err());
    }
}
