//! Physical quantities with their units: memory sizes, bandwidths, compute rates and times.
//!
//! A scenario states a quantity either as a number in base units (bytes, bytes/s, FLOP/s,
//! seconds) or as a string with a unit (`"24 GiB"`, `"1008 GB/s"`, `"165 TFLOPS"`,
//! `"0.5 ms"`, `"10 Gbit/s"`). Parsed values are always finite and non-negative; a plan
//! writes them back as plain numbers in base units so other programs need no unit parser.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What a quantity measures; picks the unit table a string is read with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dimension {
    /// Bytes (`B`, `KB`, `KiB`, `MB`, `MiB`, `GB`, `GiB`, `TB`, `TiB`).
    Memory,
    /// Bytes per second (`GB/s`, `GiB/s`, `MB/s`) or bits per second (`Gbit/s`, `Gbps`).
    Bandwidth,
    /// Floating-point operations per second (`GFLOPS`, `TFLOPS`, `PFLOPS`, `TFLOP/s`).
    Compute,
    /// Seconds (`s`, `ms`, `us`, `µs`, `ns`).
    Time,
}

impl Dimension {
    /// What a field of this dimension takes, as a wrong type's message says it.
    pub(crate) fn expecting(self) -> String {
        format!("{} as a number or a string like {}", self.noun(), self.example())
    }

    fn noun(self) -> &'static str {
        match self {
            Dimension::Memory => "a memory size",
            Dimension::Bandwidth => "a bandwidth",
            Dimension::Compute => "a compute rate",
            Dimension::Time => "a time",
        }
    }

    fn example(self) -> &'static str {
        match self {
            Dimension::Memory => "`24 GiB`",
            Dimension::Bandwidth => "`1008 GB/s` or `10 Gbit/s`",
            Dimension::Compute => "`165 TFLOPS`",
            Dimension::Time => "`0.5 ms`",
        }
    }

    /// The factor that turns one `unit` into base units, or `None` if the unit is foreign.
    fn factor(self, unit: &str) -> Option<f64> {
        let decimal = |prefix: &str| -> Option<f64> {
            Some(match prefix {
                "" => 1.0,
                "k" | "K" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                "T" => 1e12,
                "P" => 1e15,
                _ => return None,
            })
        };
        let binary = |prefix: &str| -> Option<f64> {
            Some(match prefix {
                "Ki" | "ki" => 1024.0,
                "Mi" => 1024.0 * 1024.0,
                "Gi" => 1024.0 * 1024.0 * 1024.0,
                "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
                _ => return None,
            })
        };
        let prefixed = |unit: &str, suffix: &str| -> Option<f64> {
            let prefix = unit.strip_suffix(suffix)?;
            decimal(prefix).or_else(|| binary(prefix))
        };
        match self {
            Dimension::Memory => prefixed(unit, "B"),
            Dimension::Bandwidth => prefixed(unit, "B/s")
                .or_else(|| prefixed(unit, "Bps"))
                .or_else(|| prefixed(unit, "bit/s").map(|f| f / 8.0))
                .or_else(|| prefixed(unit, "b/s").map(|f| f / 8.0))
                .or_else(|| prefixed(unit, "bps").map(|f| f / 8.0)),
            Dimension::Compute => prefixed(unit, "FLOPS")
                .or_else(|| prefixed(unit, "FLOP/s"))
                .or_else(|| prefixed(unit, "flops"))
                .or_else(|| prefixed(unit, "flop/s")),
            Dimension::Time => match unit {
                "s" | "sec" => Some(1.0),
                "ms" => Some(1e-3),
                "us" | "µs" | "μs" => Some(1e-6),
                "ns" => Some(1e-9),
                _ => None,
            },
        }
    }
}

/// Why a quantity could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("`{input}` is not {noun}: {reason}; write it like {example}")]
pub struct QuantityError {
    /// The text as given.
    pub input: String,
    noun: &'static str,
    reason: &'static str,
    example: &'static str,
}

impl QuantityError {
    fn new(input: &str, dimension: Dimension, reason: &'static str) -> Self {
        QuantityError { input: input.to_owned(), noun: dimension.noun(), reason, example: dimension.example() }
    }
}

/// Reads `text` as a quantity of `dimension` and returns it in base units.
///
/// # Errors
/// When the number is missing, negative, not finite, or the unit does not measure `dimension`.
///
/// # Examples
/// ```
/// use stageplan::units::{parse_quantity, Dimension};
/// assert_eq!(parse_quantity("24 GiB", Dimension::Memory).unwrap(), 24.0 * 1024.0 * 1024.0 * 1024.0);
/// assert_eq!(parse_quantity("10 Gbit/s", Dimension::Bandwidth).unwrap(), 1.25e9);
/// assert!(parse_quantity("24 GB/s", Dimension::Memory).is_err());
/// ```
pub fn parse_quantity(text: &str, dimension: Dimension) -> Result<f64, QuantityError> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E' | '_')))
        .unwrap_or(trimmed.len());
    // `e` is both an exponent and the start of no unit we know; back off if the number ends in it.
    let (mut number, mut unit) = trimmed.split_at(split);
    while number.ends_with(['e', 'E']) {
        let cut = number.len() - 1;
        (number, unit) = trimmed.split_at(cut);
    }
    let number: String = number.chars().filter(|&c| c != '_').collect();
    if number.is_empty() {
        return Err(QuantityError::new(text, dimension, "it has no number"));
    }
    let value = parse_decimal(&number).ok_or_else(|| QuantityError::new(text, dimension, "its number is malformed"))?;
    let unit = unit.trim();
    let factor = if unit.is_empty() {
        1.0
    } else {
        dimension
            .factor(unit)
            .ok_or_else(|| QuantityError::new(text, dimension, "its unit is not one this field takes"))?
    };
    check_value(value * factor, text, dimension)
}

/// Reads a decimal number as `str::parse::<f64>` does (`24`, `-0.5`, `.5`, `2.`, `+1e9`,
/// `007`; one past `f64::MAX` is infinite), but through serde_json's number reader, which
/// every build that reads a scenario has already: core's own float parser carries a 10 KB
/// table that the web page would download for this alone (10.2 KB of its gzip). Exact as
/// `str::parse` wherever the digits and the power of ten are exact in an `f64` (15
/// significant digits, 10^±22: every quantity people write); beyond, within a unit or two
/// in the last place (serde_json's best effort).
///
/// `None` when `text` is not a decimal number (words such as `inf` included).
pub fn parse_decimal(text: &str) -> Option<f64> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent),
        None => (unsigned, "0"),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let exponent_digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    if (integer.is_empty() && fraction.is_empty())
        || !all_digits(integer)
        || !all_digits(fraction)
        || exponent_digits.is_empty()
        || !all_digits(exponent_digits)
    {
        return None;
    }
    // The same number as JSON's `DIGITSeEXPONENT`, its digits without leading or trailing
    // zeros: serde_json then multiplies or divides the digits (exact in an `f64` up to 15
    // of them) once by an exact power of ten (up to 10^22), which rounds once, as
    // `str::parse` does. Zeros left in, it would round the digits first.
    let digits = format!("{integer}{fraction}");
    let digits = digits.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    if significant.is_empty() {
        return Some(if negative { -0.0 } else { 0.0 });
    }
    // Past a million either way the number is 0 or infinite whatever its digits.
    let magnitude = exponent_digits.bytes().fold(0_i64, |e, b| (e * 10 + i64::from(b - b'0')).min(1_000_000));
    let exponent = if exponent.starts_with('-') { -magnitude } else { magnitude };
    let shift = (digits.len() - significant.len()) as i64 - fraction.len() as i64;
    let sign = if negative { "-" } else { "" };
    let json = format!("{sign}{significant}e{}", exponent + shift);
    // The grammar is JSON's, so serde_json fails only past `f64::MAX`.
    Some(serde_json::from_str::<f64>(&json).unwrap_or(if negative { f64::NEG_INFINITY } else { f64::INFINITY }))
}

fn check_value(value: f64, text: &str, dimension: Dimension) -> Result<f64, QuantityError> {
    if !value.is_finite() {
        return Err(QuantityError::new(text, dimension, "it is not finite"));
    }
    if value < 0.0 {
        return Err(QuantityError::new(text, dimension, "it is negative"));
    }
    Ok(value)
}

macro_rules! quantity {
    ($(#[$doc:meta])* $name:ident, $dimension:expr, $format:path) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, Default, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            /// The quantity in base units.
            pub const fn get(self) -> f64 {
                self.0
            }

            /// A quantity from base units.
            ///
            /// # Errors
            /// When `value` is negative or not finite.
            pub fn new(value: f64) -> Result<Self, QuantityError> {
                check_value(value, &value.to_string(), $dimension).map($name)
            }

            /// Reads a number or a string with a unit.
            ///
            /// # Errors
            /// See [`parse_quantity`].
            pub fn parse(text: &str) -> Result<Self, QuantityError> {
                parse_quantity(text, $dimension).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&$format(self.0))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_f64(self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_any(QuantityVisitor($dimension)).map($name)
            }
        }
    };
}

quantity!(
    /// A memory size in bytes.
    Bytes, Dimension::Memory, format_bytes
);
quantity!(
    /// A bandwidth in bytes per second.
    Bandwidth, Dimension::Bandwidth, format_bandwidth
);
quantity!(
    /// A compute rate in floating-point operations per second.
    Compute, Dimension::Compute, format_compute
);
quantity!(
    /// A duration in seconds.
    Seconds, Dimension::Time, format_seconds
);

struct QuantityVisitor(Dimension);

impl Visitor<'_> for QuantityVisitor {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.expecting())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        parse_quantity(v, self.0).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        check_value(v, &v.to_string(), self.0).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        self.visit_f64(v as f64)
    }
}

/// `25769803776` → `24.0 GiB`.
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{value:.0} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// `1.008e12` → `1008 GB/s`.
pub fn format_bandwidth(bytes_per_s: f64) -> String {
    decimal(bytes_per_s, &["B/s", "kB/s", "MB/s", "GB/s", "TB/s"])
}

/// `1.652e14` → `165 TFLOPS`.
pub fn format_compute(flops: f64) -> String {
    decimal(flops, &["FLOPS", "kFLOPS", "MFLOPS", "GFLOPS", "TFLOPS", "PFLOPS"])
}

/// A count of operations: `2.4e12` → `2.4 TFLOP`.
pub fn format_flops(flops: f64) -> String {
    let units = ["FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"];
    let mut value = flops;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

/// `0.0005` → `0.50 ms`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.2} s")
    } else if seconds >= 1e-3 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{:.1} µs", seconds * 1e6)
    }
}

fn decimal(value: f64, units: &[&str]) -> String {
    let mut value = value;
    let mut unit = 0;
    while value.abs() >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    let digits = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.digits$} {}", units[unit])
}

/// A number to three significant figures: `41.237` → `41.2`, `1234.6` → `1235`.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return format!("{x}");
    }
    // Out of any figure's range (a hostile input, quoted back): three digits still, not
    // three hundred.
    if !(1e-6..1e12).contains(&x.abs()) {
        return format!("{x:.2e}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

/// Thousands separated by commas: `109601` → `109,601`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_figures_stay_short_whatever_the_number() {
        assert_eq!(sig3(41.237), "41.2");
        assert_eq!(sig3(1234.6), "1235");
        assert_eq!(sig3(0.012_34), "0.0123");
        assert_eq!(sig3(1e300), "1.00e300");
        assert_eq!(sig3(-2.5e-300), "-2.50e-300");
        assert_eq!(sig3(0.0), "0");
    }

    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

    #[test]
    fn parses_each_dimension() {
        let cases: &[(&str, Dimension, f64)] = &[
            ("24 GiB", Dimension::Memory, 24.0 * GIB),
            ("24GiB", Dimension::Memory, 24.0 * GIB),
            ("1.5 GB", Dimension::Memory, 1.5e9),
            ("512 MiB", Dimension::Memory, 512.0 * 1024.0 * 1024.0),
            ("1024", Dimension::Memory, 1024.0),
            ("1_000 B", Dimension::Memory, 1000.0),
            ("1008 GB/s", Dimension::Bandwidth, 1.008e12),
            ("10 Gbit/s", Dimension::Bandwidth, 1.25e9),
            ("1 Gbps", Dimension::Bandwidth, 1.25e8),
            ("400 GiB/s", Dimension::Bandwidth, 400.0 * GIB),
            ("165 TFLOPS", Dimension::Compute, 1.65e14),
            ("27 TFLOP/s", Dimension::Compute, 2.7e13),
            ("0.5 ms", Dimension::Time, 5e-4),
            ("20 us", Dimension::Time, 2e-5),
            ("2 s", Dimension::Time, 2.0),
            ("1e3 GB", Dimension::Memory, 1e12),
        ];
        for &(text, dimension, expected) in cases {
            let got = parse_quantity(text, dimension).unwrap();
            assert!((got - expected).abs() <= expected * 1e-12, "{text}: {got} != {expected}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        let cases: &[(&str, Dimension, &str)] = &[
            ("24 GB/s", Dimension::Memory, "its unit is not one this field takes"),
            ("-3 GiB", Dimension::Memory, "it is negative"),
            ("GiB", Dimension::Memory, "it has no number"),
            ("", Dimension::Memory, "it has no number"),
            ("1e999 B", Dimension::Memory, "it is not finite"),
            ("1.2.3 GB", Dimension::Memory, "its number is malformed"),
            ("5 parsecs", Dimension::Time, "its unit is not one this field takes"),
            ("NaN", Dimension::Compute, "it has no number"),
            ("inf", Dimension::Compute, "it has no number"),
        ];
        for &(text, dimension, reason) in cases {
            let err = parse_quantity(text, dimension).unwrap_err();
            assert_eq!(err.reason, reason, "{text}");
            assert!(err.to_string().contains("write it like"), "{err}");
        }
    }

    /// Significant digits and the power of ten they need, when both are exact in an `f64`.
    fn exactly_representable(text: &str) -> bool {
        let unsigned = text.trim_start_matches(['+', '-']);
        let (mantissa, exponent) = unsigned.split_once(['e', 'E']).unwrap_or((unsigned, "0"));
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = format!("{integer}{fraction}");
        let significant = digits.trim_start_matches('0').trim_end_matches('0');
        let trailing = digits.trim_start_matches('0').len() - significant.len();
        let power = exponent.parse::<i64>().unwrap() - fraction.len() as i64 + trailing as i64;
        significant.len() <= 15 && (-22..=22).contains(&power)
    }

    proptest::proptest! {
        /// `parse_decimal` reads what `str::parse::<f64>` reads, to the bit where both the
        /// digits and the power of ten are exact, and refuses what it refuses.
        #[test]
        fn decimals_read_as_rust_reads_them(
            text in "[+-]?[0-9]{0,18}(\\.[0-9]{0,18})?([eE][+-]?[0-9]{1,3})?",
            junk in "[0-9.eE+-]{0,8}",
        ) {
            let ours = parse_decimal(&text);
            let rust = text.parse::<f64>().ok();
            proptest::prop_assert_eq!(ours.is_some(), rust.is_some(), "{}", text);
            if let (Some(ours), Some(rust)) = (ours, rust) {
                if exactly_representable(&text) {
                    proptest::prop_assert_eq!(ours.to_bits(), rust.to_bits(), "{}", text);
                } else if rust.is_infinite() || rust.abs() < 1e-300 {
                    proptest::prop_assert!(ours == rust || (ours - rust).abs() < 1e-300, "{} {} {}", text, ours, rust);
                } else {
                    proptest::prop_assert!((ours - rust).abs() <= rust.abs() * 4.0 * f64::EPSILON, "{} {} {}", text, ours, rust);
                }
            }
            proptest::prop_assert_eq!(parse_decimal(&junk).is_some(), junk.parse::<f64>().is_ok(), "{}", junk);
        }
    }

    #[test]
    fn decimals_as_people_write_them() {
        for (text, value) in
            [("24", 24.0), (".5", 0.5), ("2.", 2.0), ("+1e9", 1e9), ("007", 7.0), ("-0.25", -0.25), ("1E-3", 1e-3)]
        {
            assert_eq!(parse_decimal(text), Some(value), "{text}");
        }
        assert_eq!(parse_decimal("1e400"), Some(f64::INFINITY));
        assert_eq!(parse_decimal("-1e400"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_decimal("1e-400"), Some(0.0));
        for text in ["", ".", "-", "e5", "1e", "1e+", "1.2.3", "--1", "+-1", "inf", "NaN", "1 ", "0x10"] {
            assert_eq!(parse_decimal(text), None, "{text}");
        }
    }

    #[test]
    fn deserializes_numbers_and_strings_and_refuses_negative_numbers() {
        let bytes: Bytes = serde_json::from_str("\"2 KiB\"").unwrap();
        assert_eq!(bytes.get(), 2048.0);
        let bytes: Bytes = serde_json::from_str("4096").unwrap();
        assert_eq!(bytes.get(), 4096.0);
        let err = serde_json::from_str::<Bytes>("-1").unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
        let err = serde_json::from_str::<Seconds>("true").unwrap_err();
        assert!(err.to_string().contains("a time as a number"), "{err}");
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_bytes(24.0 * GIB), "24.0 GiB");
        assert_eq!(format_bytes(12.0), "12 B");
        assert_eq!(format_bandwidth(1.008e12), "1.01 TB/s");
        assert_eq!(format_bandwidth(4e11), "400 GB/s");
        assert_eq!(format_compute(1.652e14), "165 TFLOPS");
        assert_eq!(format_seconds(5e-4), "500.0 µs");
        assert_eq!(format_seconds(0.0241), "24.10 ms");
    }
}
