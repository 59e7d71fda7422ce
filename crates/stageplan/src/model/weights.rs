//! Weight formats: which storage type each tensor gets.
//!
//! Three families, each matching how real checkpoints are made:
//! - **Float checkpoints** (`f32`, `f16`, `bf16`): every tensor in that type, as a Hugging Face
//!   safetensors checkpoint stores it and vLLM loads it.
//! - **Linear-layer quantization** (`fp8`, `int8`): the 2-D weights of attention and MLP
//!   blocks in one byte per weight; embeddings, LM head, router and norms stay `bf16`, as in
//!   FP8/INT8 checkpoints for vLLM (per-tensor scales are a few bytes and are left out).
//! - **llama.cpp file types** (`q4_k_m`, `q8_0`, `iq4_xs`, …): the type `llama-quantize`
//!   gives each tensor. We follow `llama_tensor_get_type` in `src/llama-quant.cpp`
//!   (ggml-org/llama.cpp, 2026): a default type per file type; `output.weight` (or a tied
//!   `token_embd.weight`) in `q6_k`; `attn_v` and `ffn_down` raised to `q6_k` on the layers
//!   `use_more_bits` picks (the first and last eighth, and every third layer between) for
//!   `_M` mixes; the 70B and 8-expert special cases; tensors with fewer than two dimensions,
//!   norms and MoE routers kept in `f32`; and the row-size fallback (`q4_k` → `q5_0`,
//!   `q5_k` → `q5_1`, `q6_k` → `q8_0`, …, then `f16`) when a row is not a whole number of
//!   blocks. Where a rule depends on an importance matrix we assume one was used, as it is
//!   for most published quantizations. Falcon's own rules are not modelled. `mxfp4_moe`
//!   (gpt-oss's own format, `mxfp4` for short): routed experts in MXFP4, every other
//!   matrix in `q8_0`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Place, Tensor, TensorShape, Transformer};
use crate::error::{ModelError, closest};
use crate::tensor_type::{TensorType, normalize};

/// How a model's weights are stored.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// Every tensor in one float type.
    Float(TensorType),
    /// Attention and MLP matrices in a one-byte type, the rest in `bf16`.
    Linear(TensorType),
    /// A llama.cpp file type.
    Gguf(FileType),
}

impl Default for WeightFormat {
    /// `bf16`: what nearly every Hugging Face checkpoint ships in.
    fn default() -> Self {
        WeightFormat::Float(TensorType::BF16)
    }
}

macro_rules! file_types {
    ($($variant:ident = $name:literal => $default:ident,)*) => {
        /// A llama.cpp file type (`LLAMA_FTYPE_MOSTLY_*`).
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum FileType { $($variant),* }

        impl FileType {
            /// Every file type, in our table order.
            pub const ALL: &'static [FileType] = &[$(FileType::$variant),*];

            /// The name `llama-quantize` uses, lowercase.
            pub const fn name(self) -> &'static str {
                match self { $(FileType::$variant => $name),* }
            }

            /// The type most tensors get (`llama_ftype_get_default_type`).
            pub const fn default_type(self) -> TensorType {
                match self { $(FileType::$variant => TensorType::$default),* }
            }
        }
    };
}

file_types! {
    Q8_0 = "q8_0" => Q8_0,
    Q6_K = "q6_k" => Q6_K,
    Q5_K_M = "q5_k_m" => Q5_K,
    Q5_K_S = "q5_k_s" => Q5_K,
    Q5_1 = "q5_1" => Q5_1,
    Q5_0 = "q5_0" => Q5_0,
    Q4_K_M = "q4_k_m" => Q4_K,
    Q4_K_S = "q4_k_s" => Q4_K,
    Q4_1 = "q4_1" => Q4_1,
    Q4_0 = "q4_0" => Q4_0,
    IQ4_NL = "iq4_nl" => IQ4_NL,
    IQ4_XS = "iq4_xs" => IQ4_XS,
    MXFP4_MOE = "mxfp4_moe" => MXFP4,
    Q3_K_L = "q3_k_l" => Q3_K,
    Q3_K_M = "q3_k_m" => Q3_K,
    Q3_K_S = "q3_k_s" => Q3_K,
    IQ3_M = "iq3_m" => IQ3_S,
    IQ3_S = "iq3_s" => IQ3_S,
    IQ3_XS = "iq3_xs" => IQ3_S,
    IQ3_XXS = "iq3_xxs" => IQ3_XXS,
    Q2_K = "q2_k" => Q2_K,
    Q2_K_S = "q2_k_s" => Q2_K,
    IQ2_M = "iq2_m" => IQ2_S,
    IQ2_S = "iq2_s" => IQ2_XS,
    IQ2_XS = "iq2_xs" => IQ2_XS,
    IQ2_XXS = "iq2_xxs" => IQ2_XXS,
    IQ1_M = "iq1_m" => IQ1_M,
    IQ1_S = "iq1_s" => IQ1_S,
    TQ2_0 = "tq2_0" => TQ2_0,
    TQ1_0 = "tq1_0" => TQ1_0,
}

impl WeightFormat {
    /// Every named format, largest first: what `stageplan presets` lists and what the
    /// "smaller weight format" fix walks through.
    pub fn all() -> Vec<WeightFormat> {
        let mut all = vec![
            WeightFormat::Float(TensorType::F32),
            WeightFormat::Float(TensorType::BF16),
            WeightFormat::Float(TensorType::F16),
            WeightFormat::Linear(TensorType::F8_E4M3),
            WeightFormat::Linear(TensorType::I8),
        ];
        all.extend(FileType::ALL.iter().map(|&f| WeightFormat::Gguf(f)));
        all
    }

    /// Nominal bits per weight of the bulk of the model (its default type).
    pub fn nominal_bits(self) -> f64 {
        match self {
            WeightFormat::Float(t) | WeightFormat::Linear(t) => t.bits_per_weight(),
            WeightFormat::Gguf(f) => f.default_type().bits_per_weight(),
        }
    }

    /// Gives every tensor its storage type and exact size.
    pub(crate) fn assign(self, arch: &Transformer, shapes: Vec<TensorShape>) -> Vec<Tensor> {
        let mut types: Vec<TensorType> = match self {
            WeightFormat::Float(t) => vec![t; shapes.len()],
            WeightFormat::Linear(t) => shapes.iter().map(|s| if is_linear(s) { t } else { TensorType::BF16 }).collect(),
            WeightFormat::Gguf(ftype) => llama_quantize_types(ftype, arch, &shapes),
        };
        shapes
            .into_iter()
            .zip(types.drain(..))
            .map(|(s, ty)| {
                let elements: u64 = s.shape.iter().product();
                Tensor::new(s.name, s.shape, ty, ty.bytes(elements), s.place, s.expert)
            })
            .collect()
    }
}

/// Attention and MLP matrices inside a block (not norms, biases or the router).
fn is_linear(s: &TensorShape) -> bool {
    matches!(s.place, Place::Layer(_))
        && s.shape.iter().filter(|&&d| d > 1).count() >= 2
        && s.name.ends_with("weight")
        && !s.name.contains("_norm")
        && !s.name.contains("ffn_gate_inp")
}

/// `use_more_bits` from llama.cpp: the first and last eighth of the layers, and every third
/// layer between them.
fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type `llama-quantize` gives each tensor, visiting them in its order (layer, then name).
fn llama_quantize_types(ftype: FileType, arch: &Transformer, shapes: &[TensorShape]) -> Vec<TensorType> {
    use FileType as F;
    use TensorType as T;

    let layer_of = |s: &TensorShape| match s.place {
        Place::Layer(i) => i64::from(i),
        _ => -1,
    };
    let mut order: Vec<usize> = (0..shapes.len()).collect();
    order.sort_by(|&a, &b| layer_of(&shapes[a]).cmp(&layer_of(&shapes[b])).then(shapes[a].name.cmp(&shapes[b].name)));

    let n_layer = arch.num_layers as i64;
    let n_expert = arch.moe.as_ref().map_or(0, |m| m.experts);
    let n_gqa = arch.num_heads / arch.num_kv_heads.max(1);
    let tied = !shapes.iter().any(|s| s.name == "output.weight");
    let is_70b = arch.family.llama_like() && n_layer == 80 && arch.num_heads != arch.num_kv_heads;
    let n_attention_wv = shapes.iter().filter(|s| s.name.contains("attn_v.weight")).count() as i64;
    let iq_low = matches!(ftype, F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M);
    let default = ftype.default_type();

    let mut i_attention_wv = 0i64;
    let mut i_ffn_down = 0i64;
    let mut types = vec![T::F32; shapes.len()];
    for &index in &order {
        let s = &shapes[index];
        let name = s.name.as_str();
        let dims = s.shape.iter().rposition(|&d| d > 1).map_or(1, |p| p + 1);
        let quantizable = dims >= 2
            && name.ends_with("weight")
            && !name.contains("_norm.weight")
            && !name.contains("ffn_gate_inp.weight");
        if !quantizable {
            continue; // stays f32, as convert_hf_to_gguf writes it
        }
        let layer = layer_of(s);
        let mut ty = default;
        if ftype == F::MXFP4_MOE {
            // gpt-oss's own format: routed experts (3-D tensors) in MXFP4, every other
            // matrix, the output and the embedding included, in Q8_0.
            ty = if s.expert { T::MXFP4 } else { T::Q8_0 };
        } else if name == "output.weight" || (tied && name == "token_embd.weight") {
            if !s.shape[0].is_multiple_of(default.block().0) {
                ty = T::Q8_0;
            } else if matches!(ftype, F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M) {
                ty = T::Q5_K;
            } else if ty != T::Q8_0 {
                ty = T::Q6_K;
            }
        } else if name == "token_embd.weight" {
            ty = match ftype {
                F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M => T::Q2_K,
                F::IQ2_S | F::IQ2_M | F::IQ3_XXS => T::IQ3_S,
                F::TQ1_0 | F::TQ2_0 => T::Q4_K,
                _ => default,
            };
        } else if iq_low {
            let low = if matches!(ftype, F::IQ2_S | F::IQ2_M) { T::IQ3_S } else { T::Q2_K };
            if name.contains("attn_v.weight") {
                ty = if n_gqa >= 4 || n_expert >= 4 { T::Q4_K } else { low };
                i_attention_wv += 1;
            } else if n_expert == 8 && name.contains("attn_k.weight") {
                ty = T::Q4_K;
            } else if name.contains("ffn_down") {
                if i_ffn_down < n_layer / 8 {
                    ty = low;
                }
                i_ffn_down += 1;
            } else if name.contains("attn_output.weight") {
                if n_expert == 8 {
                    ty = T::Q5_K;
                } else if matches!(ftype, F::IQ1_S | F::IQ1_M) {
                    ty = T::IQ2_XXS;
                } else if matches!(ftype, F::IQ2_S | F::IQ2_M) {
                    ty = T::IQ3_S;
                }
            }
        } else if name.contains("attn_v.weight") {
            let v = i_attention_wv;
            ty = match ftype {
                F::Q2_K => {
                    if n_gqa >= 4 {
                        T::Q4_K
                    } else {
                        T::Q3_K
                    }
                }
                F::Q2_K_S if n_gqa >= 4 => T::Q4_K,
                F::IQ3_XXS => {
                    if n_gqa >= 4 {
                        T::Q4_K
                    } else {
                        T::IQ3_XXS
                    }
                }
                F::IQ3_XS | F::IQ3_S if n_gqa >= 4 => T::Q4_K,
                F::IQ3_M => T::Q4_K,
                F::Q3_K_M => {
                    if v < 2 {
                        T::Q5_K
                    } else {
                        T::Q4_K
                    }
                }
                F::Q3_K_L => T::Q5_K,
                F::IQ4_NL | F::IQ4_XS if n_gqa >= 4 => T::Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(v, n_attention_wv) => T::Q6_K,
                F::Q4_K_S if v < 4 => T::Q5_K,
                _ => default,
            };
            if is_70b && matches!(ty, T::Q3_K | T::Q4_K) {
                ty = T::Q5_K;
            }
            if n_expert == 8 {
                ty = T::Q8_0;
            }
            i_attention_wv += 1;
        } else if name.contains("attn_k.weight") {
            ty = match ftype {
                _ if n_expert == 8 => T::Q8_0,
                F::IQ3_XS => T::IQ3_XXS,
                F::IQ3_XXS => T::IQ2_S,
                _ => default,
            };
        } else if name.contains("attn_q.weight") {
            ty = match ftype {
                F::IQ3_XS => T::IQ3_XXS,
                F::IQ3_XXS => T::IQ2_S,
                _ => default,
            };
        } else if name.contains("ffn_down") {
            // Dense models count ffn_down tensors; MoE models read the layer from the name.
            // Our lists hold one ffn_down per dense layer, so both give the layer number.
            let i = if n_expert > 1 { layer } else { i_ffn_down };
            let n = n_layer;
            ty = match ftype {
                F::Q2_K => T::Q3_K,
                F::Q2_K_S if i < n / 8 => T::Q4_K,
                F::Q3_K_M if i < n / 16 => T::Q5_K,
                F::Q3_K_M => T::Q4_K,
                F::IQ3_M if i < n / 8 || (n_expert == 8 && use_more_bits(i, n)) => T::Q4_K,
                F::Q3_K_L => T::Q5_K,
                F::Q4_K_M if use_more_bits(i, n) => T::Q6_K,
                F::Q5_K_M if use_more_bits(i, n) => T::Q6_K,
                F::Q4_K_S if i < n / 8 => T::Q5_K,
                F::Q4_0 if i < n / 8 => T::Q4_1,
                F::Q5_0 if i < n / 8 => T::Q5_1,
                _ => default,
            };
            i_ffn_down += 1;
        } else if name.contains("attn_output.weight") {
            ty = if n_expert == 8 {
                match ftype {
                    F::Q2_K
                    | F::IQ3_XS
                    | F::IQ3_XXS
                    | F::Q3_K_S
                    | F::Q3_K_M
                    | F::IQ4_NL
                    | F::Q4_K_S
                    | F::Q4_K_M
                    | F::IQ3_S
                    | F::IQ3_M
                    | F::IQ4_XS => T::Q5_K,
                    _ => default,
                }
            } else {
                match ftype {
                    F::Q2_K => T::Q3_K,
                    F::IQ3_XXS => T::IQ3_S,
                    F::Q3_K_M | F::IQ3_M => T::Q4_K,
                    F::Q3_K_L => T::Q5_K,
                    _ => default,
                }
            };
        } else if (name.contains("ffn_gate") || name.contains("ffn_up")) && ftype == F::IQ3_XS {
            let i = layer;
            if i >= n_layer / 8 && i < 7 * n_layer / 8 {
                ty = T::IQ3_XXS;
            }
        }
        types[index] = row_size_fallback(ty, s.shape[0]);
    }
    types
}

/// llama.cpp's `tensor_type_fallback`: a type whose block does not divide the row length
/// falls back to a 32-wide type, and to `f16` if even that does not divide it.
fn row_size_fallback(ty: TensorType, row: u64) -> TensorType {
    use TensorType as T;
    if row.is_multiple_of(ty.block().0) {
        return ty;
    }
    let fallback = match ty {
        T::IQ1_S | T::IQ1_M | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ3_XXS | T::IQ3_S | T::IQ4_XS => T::IQ4_NL,
        T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        _ => T::F16,
    };
    if row.is_multiple_of(fallback.block().0) { fallback } else { T::F16 }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightFormat::Float(t) => f.write_str(t.name()),
            WeightFormat::Linear(TensorType::F8_E4M3) => f.write_str("fp8"),
            WeightFormat::Linear(TensorType::I8) => f.write_str("int8"),
            WeightFormat::Linear(t) => f.write_str(t.name()),
            WeightFormat::Gguf(ftype) => f.write_str(ftype.name()),
        }
    }
}

impl FromStr for WeightFormat {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = normalize(s);
        // `llama-quantize` reads `Q4_K` as `Q4_K_M`, and so on.
        let key = match key.as_str() {
            "q3_k" => "q3_k_m",
            "q4_k" => "q4_k_m",
            "q5_k" => "q5_k_m",
            // What gpt-oss's own checkpoints and GGUFs are called.
            "mxfp4" => "mxfp4_moe",
            "fp32" | "float32" => "f32",
            "fp16" | "float16" => "f16",
            "bfloat16" => "bf16",
            "f8" | "fp8_e4m3" | "float8_e4m3fn" => "fp8",
            "i8" => "int8",
            other => other,
        };
        if let Some(found) = WeightFormat::all().into_iter().find(|w| w.to_string() == key) {
            return Ok(found);
        }
        let names: Vec<String> = WeightFormat::all().iter().map(ToString::to_string).collect();
        Err(ModelError::UnknownWeights {
            name: s.to_owned(),
            suggestion: closest(key, names.iter().map(String::as_str)),
        })
    }
}

impl Serialize for WeightFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for WeightFormat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_cpp_worked_values() {
        let picked = |n: i64| (0..n).filter(|&i| use_more_bits(i, n)).collect::<Vec<_>>();
        assert_eq!(picked(16), vec![0, 1, 4, 7, 10, 13, 14, 15]);
        assert_eq!(picked(22), vec![0, 1, 4, 7, 10, 13, 16, 19, 20, 21]);
        assert_eq!(picked(32), vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
    }

    #[test]
    fn names_round_trip() {
        for format in WeightFormat::all() {
            assert_eq!(format.to_string().parse::<WeightFormat>().unwrap(), format);
        }
        assert_eq!("Q4_K".parse::<WeightFormat>().unwrap(), WeightFormat::Gguf(FileType::Q4_K_M));
        assert_eq!("FP8".parse::<WeightFormat>().unwrap(), WeightFormat::Linear(TensorType::F8_E4M3));
        let err = "q4_k_x".parse::<WeightFormat>().unwrap_err().to_string();
        assert!(err.contains("did you mean `q4_k_m`"), "{err}");
    }

    #[test]
    fn mxfp4_moe_puts_routed_experts_in_mxfp4_and_every_other_matrix_in_q8_0() {
        // `llama_tensor_get_type` for LLAMA_FTYPE_MOSTLY_MXFP4_MOE: 3-D (expert) tensors in
        // MXFP4, other tensors, the output among them, in Q8_0; norms and routers stay f32.
        let preset = crate::presets::ModelPreset::find("gpt-oss-20b").unwrap();
        let model = preset.model("mxfp4".parse().unwrap()).unwrap();
        assert_eq!(model.weights, "mxfp4_moe");
        for t in &model.tensors {
            let matrix = t.shape.iter().filter(|&&d| d > 1).count() >= 2
                && t.name.ends_with("weight")
                && !t.name.contains("_norm")
                && !t.name.contains("ffn_gate_inp");
            let expected = match (matrix, t.expert) {
                (true, true) => TensorType::MXFP4,
                (true, false) => TensorType::Q8_0,
                (false, _) => TensorType::F32,
            };
            assert_eq!(t.ty, expected, "{}", t.name);
        }
        assert!(model.tensors.iter().any(|t| t.ty == TensorType::MXFP4));
        assert!(model.tensors.iter().any(|t| t.name == "output.weight" && t.ty == TensorType::Q8_0));
    }

    #[test]
    fn fallback_follows_llama_cpp() {
        assert_eq!(row_size_fallback(TensorType::Q4_K, 4096), TensorType::Q4_K);
        assert_eq!(row_size_fallback(TensorType::Q4_K, 4096 + 32), TensorType::Q5_0);
        assert_eq!(row_size_fallback(TensorType::Q6_K, 96), TensorType::Q8_0);
        assert_eq!(row_size_fallback(TensorType::Q2_K, 96), TensorType::Q4_0);
        assert_eq!(row_size_fallback(TensorType::IQ4_XS, 96), TensorType::IQ4_NL);
        assert_eq!(row_size_fallback(TensorType::Q6_K, 100), TensorType::F16);
    }
}
