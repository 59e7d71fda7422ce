//! safetensors headers and `model.safetensors.index.json`, checked the way the reference
//! reader (the `safetensors` crate's `Metadata::validate`) checks them.
//!
//! Layout: an 8-byte little-endian header length `N` (at most 100,000,000), then `N` bytes of
//! JSON — an object mapping tensor names to `{dtype, shape, data_offsets: [begin, end]}`,
//! plus an optional `__metadata__` string map — then the data. Offsets are relative to the
//! data; sorted by offset, tensors must tile the data exactly from 0 with no hole or
//! overlap, each spanning `elements × bits / 8` bytes, and the data must end the file.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{ImportError, Parse};
use crate::tensor_type::TensorType;

/// The reference reader's bound on the header length.
pub const MAX_HEADER: u64 = 100_000_000;

/// A parsed safetensors header.
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsHeader {
    /// Bytes of the JSON header (after the 8-byte length).
    pub header_len: u64,
    pub metadata: BTreeMap<String, String>,
    /// Tensors in data order.
    pub tensors: Vec<SafeTensor>,
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq)]
pub struct SafeTensor {
    pub name: String,
    pub dtype: String,
    pub ty: TensorType,
    /// Row-major shape, as stored (the last dimension varies fastest).
    pub shape: Vec<u64>,
    /// `[begin, end)` within the data section.
    pub offsets: [u64; 2],
}

impl SafeTensor {
    /// Bytes of its data.
    pub fn bytes(&self) -> u64 {
        self.offsets[1] - self.offsets[0]
    }
}

impl SafetensorsHeader {
    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        8 + self.header_len
    }

    /// Bytes of all tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(SafeTensor::bytes).sum()
    }
}

/// The storage type of a safetensors dtype name, and its bits per element.
pub fn dtype(name: &str) -> Option<(TensorType, u64)> {
    Some(match name {
        "BOOL" => (TensorType::Bool, 8),
        "U8" => (TensorType::U8, 8),
        "I8" => (TensorType::I8, 8),
        "F8_E5M2" => (TensorType::F8_E5M2, 8),
        "F8_E4M3" => (TensorType::F8_E4M3, 8),
        "F8_E4M3FNUZ" => (TensorType::F8_E4M3, 8),
        "F8_E5M2FNUZ" => (TensorType::F8_E5M2, 8),
        "F8_E8M0" => (TensorType::F8_E8M0, 8),
        "I16" => (TensorType::I16, 16),
        "U16" => (TensorType::U16, 16),
        "F16" => (TensorType::F16, 16),
        "BF16" => (TensorType::BF16, 16),
        "I32" => (TensorType::I32, 32),
        "U32" => (TensorType::U32, 32),
        "F32" => (TensorType::F32, 32),
        "F64" => (TensorType::F64, 64),
        "I64" => (TensorType::I64, 64),
        "U64" => (TensorType::U64, 64),
        "C64" => (TensorType::C64, 64),
        "F4" => (TensorType::F4, 4),
        "F6_E2M3" => (TensorType::F6_E2M3, 6),
        "F6_E3M2" => (TensorType::F6_E3M2, 6),
        _ => return None,
    })
}

/// Parses a safetensors header from a prefix of the file.
///
/// # Errors
/// A malformed header or a tensor whose offsets break the layout rules, naming the tensor.
pub fn parse(prefix: &[u8], file_len: Option<u64>) -> Result<Parse<SafetensorsHeader>, ImportError> {
    let malformed = |offset: u64, message: String| ImportError::Malformed { offset, message };
    if prefix.len() < 8 {
        if file_len.is_some_and(|f| f < 8) {
            return Err(malformed(0, "too short for a safetensors file (under 8 bytes)".into()));
        }
        return Ok(Parse::NeedMore(8));
    }
    let header_len = u64::from_le_bytes(prefix[..8].try_into().expect("8 bytes"));
    if header_len > MAX_HEADER {
        return Err(malformed(0, format!("header length {header_len} is over the {MAX_HEADER}-byte limit")));
    }
    let end = 8 + header_len;
    if let Some(f) = file_len
        && end > f
    {
        return Err(malformed(0, format!("header length {header_len} runs past the end of the file ({f} bytes)")));
    }
    if (prefix.len() as u64) < end {
        return Ok(Parse::NeedMore(end));
    }
    let json = &prefix[8..end as usize];
    let text = std::str::from_utf8(json)
        .map_err(|e| malformed(8 + e.valid_up_to() as u64, "the header is not UTF-8".into()))?;
    if !text.starts_with('{') {
        return Err(malformed(8, "the header does not start with `{`".into()));
    }
    let raw: RawHeader = serde_json::from_str(text).map_err(|e| malformed(8, format!("header JSON: {e}")))?;

    let mut tensors = Vec::with_capacity(raw.tensors.len());
    for (name, info) in raw.tensors {
        let tensor_error = |message: String| ImportError::Tensor { name: name.clone(), message };
        let Some((ty, bits)) = dtype(&info.dtype) else {
            return Err(tensor_error(format!("unknown dtype `{}`", info.dtype)));
        };
        let [begin, end] = info.data_offsets;
        if end < begin {
            return Err(tensor_error(format!("data offsets [{begin}, {end}] end before they begin")));
        }
        let elements = info.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let bits_total = elements.and_then(|n| n.checked_mul(bits));
        let Some(bits_total) = bits_total else {
            return Err(tensor_error(format!("shape {:?} overflows", info.shape)));
        };
        if bits_total % 8 != 0 {
            return Err(tensor_error(format!(
                "shape {:?} of `{}` is not a whole number of bytes ({bits_total} bits)",
                info.shape, info.dtype
            )));
        }
        if end - begin != bits_total / 8 {
            return Err(tensor_error(format!(
                "spans {} bytes but shape {:?} of `{}` needs {}",
                end - begin,
                info.shape,
                info.dtype,
                bits_total / 8
            )));
        }
        tensors.push(SafeTensor { name, dtype: info.dtype, ty, shape: info.shape, offsets: [begin, end] });
    }
    tensors.sort_by_key(|t| (t.offsets[0], t.offsets[1]));
    let mut expected = 0u64;
    for t in &tensors {
        if t.offsets[0] != expected {
            let what = if t.offsets[0] < expected {
                "overlaps the tensor before it"
            } else {
                "leaves a hole after the tensor before it"
            };
            return Err(ImportError::Tensor {
                name: t.name.clone(),
                message: format!(
                    "data offsets [{}, {}] {what} (expected to start at {expected})",
                    t.offsets[0], t.offsets[1]
                ),
            });
        }
        expected = t.offsets[1];
    }
    if let Some(f) = file_len
        && end + expected != f
    {
        return Err(malformed(
            end,
            format!("the tensors' data ends at byte {} but the file has {f} bytes", end + expected),
        ));
    }
    Ok(Parse::Done(SafetensorsHeader { header_len, metadata: raw.metadata, tensors }))
}

/// The header JSON, refusing duplicate tensor names (a plain map would keep the last).
struct RawHeader {
    metadata: BTreeMap<String, String>,
    tensors: Vec<(String, RawTensor)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of tensors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
                let mut metadata = None;
                let mut tensors: Vec<(String, RawTensor)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!("`{key}` appears twice")));
                    }
                    if key == "__metadata__" {
                        metadata = Some(map.next_value::<BTreeMap<String, String>>()?);
                    } else {
                        let tensor: RawTensor = map.next_value()?;
                        tensors.push((key, tensor));
                    }
                }
                Ok(RawHeader { metadata: metadata.unwrap_or_default(), tensors })
            }
        }
        deserializer.deserialize_map(HeaderVisitor)
    }
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsIndex {
    /// `metadata.total_size`, when stated: bytes of all tensor data.
    pub total_size: Option<u64>,
    /// Tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
}

impl SafetensorsIndex {
    /// The shard files, each once, in name order.
    pub fn shards(&self) -> Vec<&str> {
        let mut shards: Vec<&str> = self.weight_map.values().map(String::as_str).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }
}

/// Reads an index file.
///
/// # Errors
/// Not JSON, no `weight_map`, or a shard name that is a path rather than a file name.
pub fn parse_index(text: &str) -> Result<SafetensorsIndex, ImportError> {
    #[derive(Deserialize)]
    struct Raw {
        #[serde(default)]
        metadata: Option<RawMeta>,
        weight_map: BTreeMap<String, String>,
    }
    #[derive(Deserialize)]
    struct RawMeta {
        total_size: Option<serde_json::Number>,
    }
    let raw: Raw = serde_json::from_str(text)
        .map_err(|e| ImportError::Malformed { offset: 0, message: format!("index JSON: {e}") })?;
    for shard in raw.weight_map.values() {
        if shard.contains('/') || shard.contains('\\') || shard == ".." || shard.is_empty() {
            return Err(ImportError::Malformed {
                offset: 0,
                message: format!("shard `{shard}` is not a plain file name"),
            });
        }
    }
    let total_size =
        raw.metadata.and_then(|m| m.total_size).and_then(|n| n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)));
    Ok(SafetensorsIndex { total_size, weight_map: raw.weight_map })
}
