//! Storage types of weight tensors and their exact sizes.
//!
//! Quantized GGML types store weights in blocks: a fixed number of elements packed with
//! their scales into a fixed number of bytes. A tensor's size is therefore
//! `elements / block_elements × block_bytes`, exactly, when its rows are a whole number of
//! blocks. The table below is ggml's own (`ggml.c`'s `type_traits`, mirrored by the `gguf`
//! Python package's `GGML_QUANT_SIZES`); a unit test pins every entry.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! tensor_types {
    ($($variant:ident = $name:literal, ggml: $ggml:expr, block: ($elements:expr, $bytes:expr);)*) => {
        /// The storage type of a tensor: a float format, an integer format or a GGML quantization.
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum TensorType {
            $(
                #[doc = concat!("`", $name, "`: ", stringify!($bytes), " bytes per ", stringify!($elements), " elements.")]
                $variant,
            )*
        }

        impl TensorType {
            /// Every type, in table order.
            pub const ALL: &'static [TensorType] = &[$(TensorType::$variant),*];

            /// The lowercase name used in scenarios and printed output (`q4_k`, `bf16`).
            pub const fn name(self) -> &'static str {
                match self { $(TensorType::$variant => $name),* }
            }

            /// `(elements, bytes)` of one block; `(1, n)` for plain element types.
            pub const fn block(self) -> (u64, u64) {
                match self { $(TensorType::$variant => ($elements, $bytes)),* }
            }

            /// The `ggml_type` number GGUF files store, if GGML has this type.
            pub const fn ggml_id(self) -> Option<u32> {
                match self { $(TensorType::$variant => $ggml),* }
            }

            /// The type GGUF files mean by `id`.
            pub fn from_ggml_id(id: u32) -> Option<TensorType> {
                Self::ALL.iter().copied().find(|t| t.ggml_id() == Some(id))
            }
        }
    };
}

tensor_types! {
    F32 = "f32", ggml: Some(0), block: (1, 4);
    F16 = "f16", ggml: Some(1), block: (1, 2);
    Q4_0 = "q4_0", ggml: Some(2), block: (32, 18);
    Q4_1 = "q4_1", ggml: Some(3), block: (32, 20);
    Q5_0 = "q5_0", ggml: Some(6), block: (32, 22);
    Q5_1 = "q5_1", ggml: Some(7), block: (32, 24);
    Q8_0 = "q8_0", ggml: Some(8), block: (32, 34);
    Q8_1 = "q8_1", ggml: Some(9), block: (32, 40);
    Q2_K = "q2_k", ggml: Some(10), block: (256, 84);
    Q3_K = "q3_k", ggml: Some(11), block: (256, 110);
    Q4_K = "q4_k", ggml: Some(12), block: (256, 144);
    Q5_K = "q5_k", ggml: Some(13), block: (256, 176);
    Q6_K = "q6_k", ggml: Some(14), block: (256, 210);
    Q8_K = "q8_k", ggml: Some(15), block: (256, 292);
    IQ2_XXS = "iq2_xxs", ggml: Some(16), block: (256, 66);
    IQ2_XS = "iq2_xs", ggml: Some(17), block: (256, 74);
    IQ3_XXS = "iq3_xxs", ggml: Some(18), block: (256, 98);
    IQ1_S = "iq1_s", ggml: Some(19), block: (256, 50);
    IQ4_NL = "iq4_nl", ggml: Some(20), block: (32, 18);
    IQ3_S = "iq3_s", ggml: Some(21), block: (256, 110);
    IQ2_S = "iq2_s", ggml: Some(22), block: (256, 82);
    IQ4_XS = "iq4_xs", ggml: Some(23), block: (256, 136);
    I8 = "i8", ggml: Some(24), block: (1, 1);
    I16 = "i16", ggml: Some(25), block: (1, 2);
    I32 = "i32", ggml: Some(26), block: (1, 4);
    I64 = "i64", ggml: Some(27), block: (1, 8);
    F64 = "f64", ggml: Some(28), block: (1, 8);
    IQ1_M = "iq1_m", ggml: Some(29), block: (256, 56);
    BF16 = "bf16", ggml: Some(30), block: (1, 2);
    TQ1_0 = "tq1_0", ggml: Some(34), block: (256, 54);
    TQ2_0 = "tq2_0", ggml: Some(35), block: (256, 66);
    MXFP4 = "mxfp4", ggml: Some(39), block: (32, 17);
    NVFP4 = "nvfp4", ggml: Some(40), block: (64, 36);
    Q1_0 = "q1_0", ggml: Some(41), block: (128, 18);
    F8_E4M3 = "f8_e4m3", ggml: None, block: (1, 1);
    F8_E5M2 = "f8_e5m2", ggml: None, block: (1, 1);
    U8 = "u8", ggml: None, block: (1, 1);
    F8_E8M0 = "f8_e8m0", ggml: None, block: (1, 1);
    Bool = "bool", ggml: None, block: (1, 1);
    U16 = "u16", ggml: None, block: (1, 2);
    U32 = "u32", ggml: None, block: (1, 4);
    U64 = "u64", ggml: None, block: (1, 8);
    C64 = "c64", ggml: None, block: (1, 8);
    F4 = "f4", ggml: None, block: (2, 1);
    F6_E2M3 = "f6_e2m3", ggml: None, block: (4, 3);
    F6_E3M2 = "f6_e3m2", ggml: None, block: (4, 3);
}

impl TensorType {
    /// Bits per weight, including the block scales.
    pub fn bits_per_weight(self) -> f64 {
        let (elements, bytes) = self.block();
        bytes as f64 * 8.0 / elements as f64
    }

    /// Exact bytes of `elements` weights, or `None` when they are not a whole number of blocks.
    pub fn bytes_exact(self, elements: u64) -> Option<u64> {
        let (block_elements, block_bytes) = self.block();
        if !elements.is_multiple_of(block_elements) {
            return None;
        }
        (elements / block_elements).checked_mul(block_bytes)
    }

    /// Bytes of `elements` weights, rounding a partial block up to a whole one.
    pub fn bytes(self, elements: u64) -> u64 {
        let (block_elements, block_bytes) = self.block();
        elements.div_ceil(block_elements).saturating_mul(block_bytes)
    }

    /// True for block-quantized GGML types (everything that is not a plain element type).
    pub fn is_quantized(self) -> bool {
        self.block().0 > 1
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a tensor type we know.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "unknown tensor type `{0}`; use one of `f32`, `f16`, `bf16`, `fp8`, `int8`, `q8_0`, `q6_k`, `q5_k`, `q4_k`, `q4_0`, `q3_k`, `q2_k`, `iq4_xs`, …"
)]
pub struct UnknownTensorType(pub String);

/// KV-cache formats the engines offer (llama.cpp's `-ctk/-ctv`, vLLM's `fp8`).
pub const KV_FORMATS: &[TensorType] = &[
    TensorType::F32,
    TensorType::F16,
    TensorType::BF16,
    TensorType::F8_E4M3,
    TensorType::Q8_0,
    TensorType::Q5_1,
    TensorType::Q5_0,
    TensorType::Q4_1,
    TensorType::Q4_0,
    TensorType::IQ4_NL,
];

/// A name that is not one of [`KV_FORMATS`]; each surface puts its field before it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "`{0}` is not a KV-cache format; use `f16`, `bf16`, `f32`, `fp8`, `q8_0`, `q5_1`, `q5_0`, `q4_1`, `q4_0` or `iq4_nl`"
)]
pub struct UnknownKvFormat(pub String);

/// Bytes per token of a cache holding `k` K elements in `formats.0` and `v` V elements in
/// `formats.1` (llama.cpp's `-ctk` and `-ctv`): the one rule the cost model
/// (`Workload::kv_bytes`) and a model's summary price a cache by.
pub fn kv_bytes((k_format, v_format): (TensorType, TensorType), (k, v): (u64, u64)) -> u64 {
    k_format.bytes(k).saturating_add(v_format.bytes(v))
}

/// The KV-cache format called `name` (`f16`, `q8_0`, `fp8`, …): the one parser the scenario,
/// the CLI's `--kv` and the JS API share.
///
/// # Errors
/// A name that is no tensor type, or one no engine stores its KV cache in.
pub fn kv_format(name: &str) -> Result<TensorType, UnknownKvFormat> {
    name.parse().ok().filter(|t| KV_FORMATS.contains(t)).ok_or_else(|| UnknownKvFormat(name.to_owned()))
}

impl FromStr for TensorType {
    type Err = UnknownTensorType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = normalize(s);
        let alias = match key.as_str() {
            "fp32" | "float32" => Some(TensorType::F32),
            "fp16" | "float16" | "half" => Some(TensorType::F16),
            "bfloat16" => Some(TensorType::BF16),
            "fp8" | "f8" | "fp8_e4m3" | "float8_e4m3fn" => Some(TensorType::F8_E4M3),
            "fp8_e5m2" | "float8_e5m2" => Some(TensorType::F8_E5M2),
            "int8" => Some(TensorType::I8),
            _ => None,
        };
        alias
            .or_else(|| TensorType::ALL.iter().copied().find(|t| t.name() == key))
            .ok_or_else(|| UnknownTensorType(s.to_owned()))
    }
}

/// Lowercase, with `-` and spaces read as `_`: `Q4-K` → `q4_k`.
pub(crate) fn normalize(s: &str) -> String {
    s.trim().chars().map(|c| if c == '-' || c == ' ' { '_' } else { c.to_ascii_lowercase() }).collect()
}

/// In TypeScript, a tensor type is one of its names (`"q4_k"`), as it serializes.
#[cfg(feature = "typescript")]
impl ts_rs::TS for TensorType {
    type WithoutGenerics = Self;
    type OptionInnerType = Self;

    fn name(_: &ts_rs::Config) -> String {
        "TensorType".to_owned()
    }

    fn inline(_: &ts_rs::Config) -> String {
        TensorType::ALL.iter().map(|t| format!("\"{}\"", t.name())).collect::<Vec<_>>().join(" | ")
    }

    fn decl(cfg: &ts_rs::Config) -> String {
        format!("type TensorType = {};", Self::inline(cfg))
    }

    fn decl_concrete(cfg: &ts_rs::Config) -> String {
        Self::decl(cfg)
    }
}

impl Serialize for TensorType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TensorType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_formats_parse_and_the_message_names_each() {
        let message = kv_format("q3_k").unwrap_err().to_string();
        for &ty in KV_FORMATS {
            let name = if ty == TensorType::F8_E4M3 { "fp8" } else { ty.name() };
            assert!(message.contains(&format!("`{name}`")), "{message} lacks {name}");
            assert_eq!(kv_format(name), Ok(ty));
        }
        assert!(kv_format("q4_k").is_err(), "a weight type, not a KV format");
    }

    /// `gguf` 0.19.0 (`gguf.constants.GGML_QUANT_SIZES`), printed with
    /// `python3 -c "from gguf.constants import *; print(GGML_QUANT_SIZES)"`.
    const GGUF_PY: &[(&str, u32, u64, u64)] = &[
        ("F32", 0, 1, 4),
        ("F16", 1, 1, 2),
        ("Q4_0", 2, 32, 18),
        ("Q4_1", 3, 32, 20),
        ("Q5_0", 6, 32, 22),
        ("Q5_1", 7, 32, 24),
        ("Q8_0", 8, 32, 34),
        ("Q8_1", 9, 32, 40),
        ("Q2_K", 10, 256, 84),
        ("Q3_K", 11, 256, 110),
        ("Q4_K", 12, 256, 144),
        ("Q5_K", 13, 256, 176),
        ("Q6_K", 14, 256, 210),
        ("Q8_K", 15, 256, 292),
        ("IQ2_XXS", 16, 256, 66),
        ("IQ2_XS", 17, 256, 74),
        ("IQ3_XXS", 18, 256, 98),
        ("IQ1_S", 19, 256, 50),
        ("IQ4_NL", 20, 32, 18),
        ("IQ3_S", 21, 256, 110),
        ("IQ2_S", 22, 256, 82),
        ("IQ4_XS", 23, 256, 136),
        ("I8", 24, 1, 1),
        ("I16", 25, 1, 2),
        ("I32", 26, 1, 4),
        ("I64", 27, 1, 8),
        ("F64", 28, 1, 8),
        ("IQ1_M", 29, 256, 56),
        ("BF16", 30, 1, 2),
        ("TQ1_0", 34, 256, 54),
        ("TQ2_0", 35, 256, 66),
        ("MXFP4", 39, 32, 17),
        ("NVFP4", 40, 64, 36),
        ("Q1_0", 41, 128, 18),
    ];

    #[test]
    fn block_sizes_match_the_reference_table() {
        for &(name, id, elements, bytes) in GGUF_PY {
            let ty: TensorType = name.parse().unwrap();
            assert_eq!(ty.ggml_id(), Some(id), "{name}");
            assert_eq!(ty.block(), (elements, bytes), "{name}");
            assert_eq!(TensorType::from_ggml_id(id), Some(ty));
        }
        let ggml_types = TensorType::ALL.iter().filter(|t| t.ggml_id().is_some()).count();
        assert_eq!(ggml_types, GGUF_PY.len());
    }

    #[test]
    fn sizes_are_exact_for_whole_blocks() {
        assert_eq!(TensorType::Q4_K.bytes_exact(4096 * 4096), Some(4096 * 4096 / 256 * 144));
        assert_eq!(TensorType::Q4_K.bytes_exact(100), None);
        assert_eq!(TensorType::Q4_K.bytes(100), 144);
        assert_eq!(TensorType::Q8_0.bits_per_weight(), 8.5);
        assert_eq!(TensorType::Q4_K.bits_per_weight(), 4.5);
    }

    #[test]
    fn reads_common_spellings() {
        assert_eq!("Q4_K".parse::<TensorType>().unwrap(), TensorType::Q4_K);
        assert_eq!("iq4-xs".parse::<TensorType>().unwrap(), TensorType::IQ4_XS);
        assert_eq!("fp8".parse::<TensorType>().unwrap(), TensorType::F8_E4M3);
        assert_eq!("int8".parse::<TensorType>().unwrap(), TensorType::I8);
        assert_eq!("bfloat16".parse::<TensorType>().unwrap(), TensorType::BF16);
        assert!("q9_k".parse::<TensorType>().is_err());
    }
}
