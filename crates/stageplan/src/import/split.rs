//! Split GGUF sets, by llama.cpp's rule (`src/llama-model-loader.cpp`, `src/llama.cpp`).
//!
//! llama.cpp reads `split.count` from the header of the file it is given, as a u16: absent,
//! 0 or 1, the file is a whole model, whatever its name. More, and the file is part
//! `split.no + 1` of a set whose parts it finds by name: `llama_split_prefix` takes the name
//! apart by the suffix `-%05d-of-%05d.gguf` (refusing one without it: "invalid split file
//! name"), `llama_split_path` writes each part's name from the prefix, and each part's own
//! `split.no` must be its place. `llama-gguf-split` writes every part so, and a set of one
//! part as `NAME-00001-of-00001.gguf` with `split.count` 1.
//!
//! The reader takes the same rule and is as strict where a file could be misread: a name
//! that says "part N of M" (in any digits) on a file whose header says otherwise is refused,
//! rather than read as a whole model that is only a part, or as a set it does not belong
//! to. Any part of a set may be offered (llama.cpp wants the first).

use super::ImportError;
use super::gguf::{GgufHeader, Value};

use crate::limits::MAX_SPLIT_PARTS;

/// `name-00002-of-00005.gguf` → `("name", 2, 5)`: llama.cpp's split-file naming, exactly as
/// `gguf-split` writes it (`-%05d-of-%05d.gguf`, so at most 99,999 parts). Any other name
/// (`m-1-of-1.gguf`) names no set.
pub fn split_name(file_name: &str) -> Option<(&str, u32, u32)> {
    let (prefix, number, count) = named_part(file_name)?;
    let five_digits = |s: &str| s.len() == 5;
    if !five_digits(number) || !five_digits(count) {
        return None;
    }
    let (number, count): (u32, u32) = (number.parse().ok()?, count.parse().ok()?);
    (number >= 1 && number <= count).then_some((prefix, number, count))
}

/// The file name of part `number` (1-based) of a split set.
pub fn split_part_name(prefix: &str, number: u32, count: u32) -> String {
    format!("{prefix}-{number:05}-of-{count:05}.gguf")
}

/// A name that reads as a part of a set in any digits (`m-1-of-3.gguf`): the prefix and
/// the two numbers as written.
fn named_part(file_name: &str) -> Option<(&str, &str, &str)> {
    let stem = file_name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, number) = rest.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(number) && digits(count) && !prefix.is_empty()).then_some((prefix, number, count))
}

/// Digits without their leading zeros (`00003` → `3`).
fn unpadded(digits: &str) -> &str {
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() { "0" } else { trimmed }
}

/// What a file is, by llama.cpp's rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placed<'a> {
    /// A whole model.
    Whole,
    /// Part `number` (1-based) of a set of `count`, whose parts are named from `prefix`.
    Part { prefix: &'a str, number: u32, count: u32 },
}

/// Where the file `file_name` with `header` stands: a whole model or a part of a set.
///
/// # Errors
/// A `split.count` or `split.no` that is not a u16 in range, or a name that does not agree
/// with them: each says what llama.cpp expects.
pub fn placed<'a>(file_name: &'a str, header: &GgufHeader) -> Result<Placed<'a>, ImportError> {
    let count = split_count(header)?;
    if count <= 1 {
        return match named_part(file_name) {
            Some((_, number, of)) if of.parse::<u64>().ok() != Some(1) => Err(ImportError::Model(format!(
                "its name makes it part {} of {}, but its header {} says it is a whole model; give the parts as `llama-gguf-split` wrote them (each has `split.count`), or name a whole model without `-{number}-of-{of}`",
                unpadded(number),
                unpadded(of),
                match header.get("split.count") {
                    Some(_) => format!("(`split.count` {count})"),
                    None => "(no `split.count`)".to_owned(),
                },
            ))),
            _ => Ok(Placed::Whole),
        };
    }
    let number = split_no(header, count)? + 1;
    match split_name(file_name) {
        Some((prefix, named, of)) if (named, of) == (number, count) => Ok(Placed::Part { prefix, number, count }),
        _ => {
            let stem = file_name.strip_suffix(".gguf").unwrap_or(file_name);
            let prefix = named_part(file_name).map_or(stem, |(p, _, _)| p);
            Err(ImportError::Model(format!(
                "its header (`split.count` {count}, `split.no` {}) makes it part {number} of {count}, and llama.cpp finds a set's parts by name: name it `{}`, and every part as `llama-gguf-split` wrote them",
                number - 1,
                split_part_name(prefix, number, count)
            )))
        }
    }
}

/// `split.count`: 0 when absent.
///
/// # Errors
/// A value that is not an integer from 0 to [`MAX_SPLIT_PARTS`].
pub fn split_count(header: &GgufHeader) -> Result<u32, ImportError> {
    let Some(value) = header.get("split.count") else { return Ok(0) };
    u16_value(value).map(u32::from).ok_or_else(|| {
        ImportError::Model(format!(
            "`split.count` is {}; llama.cpp reads a split set's part count as a u16 (at most {MAX_SPLIT_PARTS}): give the set as `llama-gguf-split` wrote it, or remove the key from a whole model",
            shown(value)
        ))
    })
}

/// `split.no` of a part of a set of `count` (0-based).
///
/// # Errors
/// Absent, or not an integer below `count`.
pub fn split_no(header: &GgufHeader, count: u32) -> Result<u32, ImportError> {
    let value = header.get("split.no").ok_or_else(|| {
        ImportError::Model(format!(
            "`split.no` is missing, and `split.count` makes the file a part of a set of {count}; give the parts as `llama-gguf-split` wrote them"
        ))
    })?;
    match u16_value(value).map(u32::from) {
        Some(number) if number < count => Ok(number),
        _ => Err(ImportError::Model(format!(
            "`split.no` is {}; the parts of a set of {count} are numbered 0 to {}: give the parts as `llama-gguf-split` wrote them",
            shown(value),
            count - 1
        ))),
    }
}

/// An integer of any width that fits a u16.
fn u16_value(value: &Value) -> Option<u16> {
    let wide: i128 = match *value {
        Value::U8(v) => v.into(),
        Value::I8(v) => v.into(),
        Value::U16(v) => v.into(),
        Value::I16(v) => v.into(),
        Value::U32(v) => v.into(),
        Value::I32(v) => v.into(),
        Value::U64(v) => v.into(),
        Value::I64(v) => v.into(),
        _ => return None,
    };
    u16::try_from(wide).ok()
}

/// A value for a message: an integer as itself, anything else by its kind (a string from
/// the header is not repeated).
fn shown(value: &Value) -> String {
    match *value {
        Value::U8(v) => v.to_string(),
        Value::I8(v) => v.to_string(),
        Value::U16(v) => v.to_string(),
        Value::I16(v) => v.to_string(),
        Value::U32(v) => v.to_string(),
        Value::I32(v) => v.to_string(),
        Value::U64(v) => v.to_string(),
        Value::I64(v) => v.to_string(),
        Value::F32(_) | Value::F64(_) => "a float".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::String(_) => "a string".into(),
        Value::Array { .. } => "an array".into(),
    }
}
