//! GGUF headers (versions 2 and 3): metadata, tensor infos, and the checks llama.cpp's own
//! loader (`ggml/src/gguf.cpp`) makes.
//!
//! Layout: magic `GGUF`, version (u32), tensor count (u64), metadata count (u64); then the
//! metadata (key string, value type, value — arrays nest), then per tensor its name, number
//! of dimensions (≤ 4), dimensions, GGML type and data offset. Data starts at the next
//! multiple of `general.alignment` (default 32). Tensor data is contiguous: each tensor
//! starts where the previous one ended, rounded up to the alignment.

use super::reader::{Cursor, Fault, Length, Read};
use super::{ImportError, Parse};
use crate::tensor_type::TensorType;

/// Arrays longer than this keep only their length (tokenizer vocabularies run to 10^5
/// strings and the planner needs none of them).
const KEEP_ARRAY_ITEMS: u64 = 4096;
/// Values kept in all arrays of one header together.
const KEEP_VALUES_TOTAL: u64 = 1 << 16;
/// Arrays inside arrays inside …: deeper than this is refused.
const MAX_DEPTH: usize = 8;
use crate::limits::MAX_GGUF_HEADER_BYTES;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;

/// The parsed header of one GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub alignment: u64,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<GgufTensor>,
    /// Where the tensor data starts, from the start of the file.
    pub data_offset: u64,
}

/// One tensor info.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensor {
    pub name: String,
    /// Dimensions in GGML order (`ne[0]`, the row length, first).
    pub dims: Vec<u64>,
    pub ty: TensorType,
    /// Offset of its data from `data_offset`.
    pub offset: u64,
    /// Exact bytes of its data.
    pub bytes: u64,
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An array: its item type, its length, and its items unless it was too long to keep.
    Array {
        item: u32,
        len: u64,
        items: Option<Vec<Value>>,
    },
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as integers: one for a scalar, each item for a kept array.
    pub fn as_u64s(&self) -> Option<Vec<u64>> {
        match self {
            Value::Array { items: Some(items), .. } => items.iter().map(Value::as_u64).collect(),
            scalar => scalar.as_u64().map(|v| vec![v]),
        }
    }

    /// The value as text, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Items of a kept array of booleans.
    pub fn as_bools(&self) -> Option<Vec<bool>> {
        match self {
            Value::Array { items: Some(items), .. } => items
                .iter()
                .map(|v| match v {
                    Value::Bool(b) => Some(*b),
                    other => other.as_u64().map(|n| n != 0),
                })
                .collect(),
            _ => None,
        }
    }
}

impl GgufHeader {
    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Bytes of all tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).fold(0, u64::saturating_add)
    }
}

/// Parses a GGUF header from a prefix of the file.
///
/// `file_len` is the whole file's length when known; it turns claims past the end into
/// errors rather than requests for more bytes, and lets tensor data be checked against it.
///
/// # Errors
/// A malformed header, with the byte offset and what is wrong.
pub fn parse(prefix: &[u8], file_len: Option<u64>) -> Result<Parse<GgufHeader>, ImportError> {
    let mut budget = KEEP_VALUES_TOTAL;
    match header(&mut Cursor::new(prefix, file_len), file_len, &mut budget) {
        Ok(h) => Ok(Parse::Done(h)),
        // A header past the limit is refused before anyone reads that much of the file.
        Err(Fault::Short(short)) if short.needed > MAX_GGUF_HEADER_BYTES => Err(ImportError::Malformed {
            offset: prefix.len() as u64,
            message: format!(
                "the header goes on past {} MiB; real GGUF headers (vocabulary included) are a few tens of MiB",
                MAX_GGUF_HEADER_BYTES >> 20
            ),
        }),
        Err(Fault::Short(short)) => Ok(Parse::NeedMore(short.needed)),
        Err(Fault::Bad { offset, message }) => Err(ImportError::Malformed { offset, message }),
    }
}

fn header(c: &mut Cursor<'_>, file_len: Option<u64>, budget: &mut u64) -> Read<GgufHeader> {
    let magic = c.take(4, &"magic")?;
    if magic != b"GGUF" {
        return c.bad(0, format!("not a GGUF file: it starts with {magic:02x?}, not `GGUF`"));
    }
    let version = c.u32(&"version")?;
    match version {
        2 | 3 => {}
        1 => return c.bad(4, "GGUF version 1 is not supported; convert the model with a current llama.cpp"),
        v if matches!(v.swap_bytes(), 2 | 3) => {
            return c.bad(4, "a big-endian GGUF file; only little-endian files are supported");
        }
        v => return c.bad(4, format!("GGUF version {v} is unknown; versions 2 and 3 are supported")),
    }
    // A tensor info is at least name length + n_dims + type + offset; a metadata entry at
    // least key length + value type + one byte.
    let tensor_count = c.count(&"tensor count", 8 + 4 + 4 + 8)?;
    let kv_count = c.count(&"metadata count", 8 + 4 + 1)?;

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(c.capacity(kv_count, 13));
    // A set, so a header of many keys is checked in linear time.
    let mut keys = std::collections::HashSet::with_capacity(c.capacity(kv_count, 13));
    for _ in 0..kv_count {
        let at = c.offset();
        let key = string(c, &"metadata key")?;
        if !keys.insert(key.clone()) {
            return c.bad(at, format!("metadata key `{key}` appears twice"));
        }
        let ty = c.u32(&"value type")?;
        let value = value(c, ty, 0, budget, &key)?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => 32,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => {
            return c.bad(c.offset(), format!("`general.alignment` is {v:?}; it must be a power of two (u32)"));
        }
    };

    let mut tensors: Vec<GgufTensor> = Vec::with_capacity(c.capacity(tensor_count, 24));
    let mut names = std::collections::HashSet::new();
    for _ in 0..tensor_count {
        let at = c.offset();
        let name = string(c, &"tensor name")?;
        let n_dims = c.u32(&"dimension count")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return c.bad(at, format!("tensor `{name}` has {n_dims} dimensions; GGUF allows 1 to {MAX_DIMS}"));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&"dimension")?);
        }
        let type_id = c.u32(&"tensor type")?;
        let Some(ty) = TensorType::from_ggml_id(type_id) else {
            return c.bad(at, format!("tensor `{name}` has unknown GGML type {type_id}"));
        };
        let offset = c.u64(&"tensor offset")?;
        let elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).filter(|&n| i64::try_from(n).is_ok());
        let Some(elements) = elements else {
            return c.bad(at, format!("tensor `{name}` has dimensions {dims:?}, whose product overflows"));
        };
        let block = ty.block().0;
        if dims[0] % block != 0 {
            return c.bad(
                at,
                format!(
                    "tensor `{name}`: a row of {} elements is not a whole number of `{ty}` blocks of {block}",
                    dims[0]
                ),
            );
        }
        let Some(bytes) = ty.bytes_exact(elements) else {
            return c.bad(at, format!("tensor `{name}` is too large"));
        };
        if !names.insert(name.clone()) {
            return c.bad(at, format!("tensor `{name}` appears twice"));
        }
        tensors.push(GgufTensor { name, dims, ty, offset, bytes });
    }
    let end_of_infos = c.offset();
    let data_offset = end_of_infos.div_ceil(alignment) * alignment;

    // gguf.cpp: each tensor starts where the previous one ended, rounded up to the alignment.
    let mut expected = 0u64;
    for t in &tensors {
        if t.offset != expected {
            return c.bad(
                end_of_infos,
                format!(
                    "tensor `{}` has data offset {}, expected {expected} (tensors must be contiguous and aligned)",
                    t.name, t.offset
                ),
            );
        }
        let Some(next) = t.bytes.checked_next_multiple_of(alignment).and_then(|b| expected.checked_add(b)) else {
            return c.bad(end_of_infos, format!("tensor `{}` ends past any possible file", t.name));
        };
        expected = next;
    }
    if let Some(len) = file_len.filter(|_| !tensors.is_empty()) {
        let data_end = tensors.last().map_or(0, |t| t.offset + t.bytes);
        if data_offset.checked_add(data_end).is_none_or(|end| end > len) {
            return c.bad(
                end_of_infos,
                format!(
                    "tensor data ends at byte {}, past the end of the file ({len} bytes)",
                    data_offset.saturating_add(data_end)
                ),
            );
        }
    }
    Ok(GgufHeader { version, alignment, metadata, tensors, data_offset })
}

fn string(c: &mut Cursor<'_>, what: &dyn std::fmt::Display) -> Read<String> {
    Ok(String::from_utf8_lossy(string_bytes(c, what)?).into_owned())
}

/// A string's bytes, not copied.
fn string_bytes<'a>(c: &mut Cursor<'a>, what: &dyn std::fmt::Display) -> Read<&'a [u8]> {
    let len = c.count(&Length(what), 1)?;
    c.take(len, what)
}

/// Fixed size in bytes of a scalar value type.
fn scalar_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => return None,
    })
}

fn value(c: &mut Cursor<'_>, ty: u32, depth: usize, budget: &mut u64, key: &str) -> Read<Value> {
    let at = c.offset();
    Ok(match ty {
        0 => Value::U8(c.u8(&key)?),
        1 => Value::I8(c.u8(&key)? as i8),
        2 => {
            let b = c.take(2, &key)?;
            Value::U16(u16::from_le_bytes([b[0], b[1]]))
        }
        3 => {
            let b = c.take(2, &key)?;
            Value::I16(i16::from_le_bytes([b[0], b[1]]))
        }
        4 => Value::U32(c.u32(&key)?),
        5 => Value::I32(c.u32(&key)? as i32),
        6 => Value::F32(f32::from_bits(c.u32(&key)?)),
        7 => match c.u8(&key)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => return c.bad(at, format!("`{key}` is a boolean stored as {b}; it must be 0 or 1")),
        },
        8 => Value::String(string(c, &key)?),
        9 => {
            if depth >= MAX_DEPTH {
                return c.bad(at, format!("`{key}` nests arrays deeper than {MAX_DEPTH}"));
            }
            let item = c.u32(&key)?;
            let size = match item {
                8 => 8,  // a string is at least its length
                9 => 12, // an array is at least its item type and length
                t => match scalar_size(t) {
                    Some(s) => s,
                    None => return c.bad(at, format!("`{key}` is an array of unknown value type {t}")),
                },
            };
            let len = c.count(&Length(&format_args!("array `{key}`")), size)?;
            let keep = len <= KEEP_ARRAY_ITEMS && len <= *budget;
            if !keep && scalar_size(item).is_some() {
                c.take(len * size, &key)?;
                return Ok(Value::Array { item, len, items: None });
            }
            if !keep && item == 8 {
                // A long array of strings (a vocabulary): check and skip, no copies.
                for _ in 0..len {
                    string_bytes(c, &key)?;
                }
                return Ok(Value::Array { item, len, items: None });
            }
            let mut items = keep.then(|| Vec::with_capacity(len as usize));
            if keep {
                *budget -= len;
            }
            for _ in 0..len {
                let v = value(c, item, depth + 1, budget, key)?;
                if let Some(items) = items.as_mut() {
                    items.push(v);
                }
            }
            Value::Array { item, len, items }
        }
        10 => Value::U64(c.u64(&key)?),
        11 => Value::I64(c.u64(&key)? as i64),
        12 => Value::F64(f64::from_bits(c.u64(&key)?)),
        t => return c.bad(at, format!("`{key}` has unknown value type {t}")),
    })
}

/// Writes GGUF headers by hand: hostile and hand-made files for tests, fuzz seeds and
/// benchmarks. It writes exactly what it is told, valid or not. (Feature `testing`.)
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug, Default)]
pub struct Builder {
    bytes: Vec<u8>,
}

#[cfg(any(test, feature = "testing"))]
impl Builder {
    /// Magic, version, tensor count and metadata count.
    pub fn new(version: u32, tensors: u64, kvs: u64) -> Builder {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(tensors.to_le_bytes());
        bytes.extend(kvs.to_le_bytes());
        Builder { bytes }
    }

    /// A length-prefixed string.
    pub fn string(mut self, s: &str) -> Builder {
        self.bytes.extend((s.len() as u64).to_le_bytes());
        self.bytes.extend(s.as_bytes());
        self
    }

    pub fn u8(mut self, v: u8) -> Builder {
        self.bytes.push(v);
        self
    }

    pub fn u32(mut self, v: u32) -> Builder {
        self.bytes.extend(v.to_le_bytes());
        self
    }

    pub fn u64(mut self, v: u64) -> Builder {
        self.bytes.extend(v.to_le_bytes());
        self
    }

    /// A `u32` metadata entry.
    pub fn kv_u32(self, key: &str, v: u32) -> Builder {
        self.string(key).u32(4).u32(v)
    }

    /// A string metadata entry.
    pub fn kv_str(self, key: &str, v: &str) -> Builder {
        self.string(key).u32(8).string(v)
    }

    /// An array-of-strings metadata entry.
    pub fn kv_strings<'a>(self, key: &str, values: impl ExactSizeIterator<Item = &'a str>) -> Builder {
        let mut b = self.string(key).u32(9).u32(8).u64(values.len() as u64);
        for v in values {
            b = b.string(v);
        }
        b
    }

    /// A tensor info.
    pub fn tensor(self, name: &str, dims: &[u64], ggml_type: u32, offset: u64) -> Builder {
        let mut b = self.string(name).u32(dims.len() as u32);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(ggml_type).u64(offset)
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The bytes, padded to 32 and followed by `data` zero bytes.
    pub fn padded(mut self, data: usize) -> Vec<u8> {
        while !self.bytes.len().is_multiple_of(32) {
            self.bytes.push(0);
        }
        self.bytes.extend(std::iter::repeat_n(0u8, data));
        self.bytes
    }
}
