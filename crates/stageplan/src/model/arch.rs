//! The architecture family of a model, resolved once where its name enters: a GGUF's
//! `general.architecture` (llama.cpp's spelling: `gpt-oss`, `command-r`, `qwen3moe`) or a
//! `config.json`'s `model_type` (Hugging Face's: `gpt_oss`, `cohere`, `qwen3_moe`). Every
//! decision that depends on the family — what a config leaves out, what llama.cpp's graph
//! keeps live — matches on [`Arch`]; no code past import compares names.

use serde::{Deserialize, Serialize};

/// A model's architecture family, whichever spelling named it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    Llama,
    Mistral,
    Mixtral,
    /// Llama 4: chunked attention on three layers of four, experts interleaved.
    Llama4,
    Qwen2,
    Qwen2Moe,
    Qwen2Vl,
    Qwen3,
    Qwen3Moe,
    /// Qwen3-Next: gated delta-net layers beside full attention.
    Qwen3Next,
    /// Qwen3.5 / 3.6, dense and MoE: Qwen3-Next's layers, sized alike by llama.cpp.
    Qwen35,
    Qwen35Moe,
    Phi3,
    Gemma,
    Gemma2,
    Gemma3,
    /// Gemma 3n: AltUp streams, per-layer inputs, caches shared past layer 20.
    Gemma3n,
    GptOss,
    /// Cohere's Command R (`command-r` in GGUF): attention and MLP in parallel.
    Cohere,
    Cohere2,
    Cohere2Moe,
    /// DeepSeek-V2 (and every DeepSeek-style GGUF: llama.cpp names V3 and Kimi `deepseek2`).
    DeepseekV2,
    DeepseekV3,
    KimiK2,
    Glm4,
    Glm4Moe,
    Mamba,
    Mamba2,
    FalconH1,
    /// IBM Granite 4.0's hybrid (`granitehybrid`, `granitemoehybrid`).
    GraniteHybrid,
    Lfm2,
    OpenElm,
    Afmoe,
    Olmo2,
    /// A family with no decision of its own here: full attention, no recurrent state.
    #[default]
    Other,
}

/// Each family and the spellings that name it, with `-` and `_` removed and lowercase
/// (GGUF's `gpt-oss` and Hugging Face's `gpt_oss` are both `gptoss`).
const SPELLINGS: [(Arch, &[&str]); 34] = [
    (Arch::Llama, &["llama"]),
    (Arch::Mistral, &["mistral"]),
    (Arch::Mixtral, &["mixtral"]),
    (Arch::Llama4, &["llama4", "llama4text"]),
    (Arch::Qwen2, &["qwen2"]),
    (Arch::Qwen2Moe, &["qwen2moe"]),
    (Arch::Qwen2Vl, &["qwen2vl"]),
    (Arch::Qwen3, &["qwen3"]),
    (Arch::Qwen3Moe, &["qwen3moe"]),
    (Arch::Qwen3Next, &["qwen3next"]),
    (Arch::Qwen35, &["qwen35", "qwen35text"]),
    (Arch::Qwen35Moe, &["qwen35moe", "qwen35moetext"]),
    (Arch::Phi3, &["phi3"]),
    (Arch::Gemma, &["gemma"]),
    (Arch::Gemma2, &["gemma2"]),
    (Arch::Gemma3, &["gemma3", "gemma3text"]),
    (Arch::Gemma3n, &["gemma3n", "gemma3ntext"]),
    (Arch::GptOss, &["gptoss"]),
    (Arch::Cohere, &["cohere", "commandr"]),
    (Arch::Cohere2, &["cohere2"]),
    (Arch::Cohere2Moe, &["cohere2moe"]),
    (Arch::DeepseekV2, &["deepseekv2", "deepseek2"]),
    (Arch::DeepseekV3, &["deepseekv3"]),
    (Arch::KimiK2, &["kimik2"]),
    (Arch::Glm4, &["glm4"]),
    (Arch::Glm4Moe, &["glm4moe"]),
    (Arch::Mamba, &["mamba"]),
    (Arch::Mamba2, &["mamba2"]),
    (Arch::FalconH1, &["falconh1"]),
    (Arch::GraniteHybrid, &["granitehybrid", "granitemoehybrid"]),
    (Arch::Lfm2, &["lfm2"]),
    (Arch::OpenElm, &["openelm"]),
    (Arch::Afmoe, &["afmoe"]),
    (Arch::Olmo2, &["olmo2"]),
];

/// Names of later versions that read like their family's (a `qwen2_5_vl`, a `gemma3_text`
/// of a new release): the longest prefix decides.
const PREFIXES: [(&str, Arch); 10] = [
    ("gemma3n", Arch::Gemma3n),
    ("gemma3", Arch::Gemma3),
    ("llama4", Arch::Llama4),
    ("qwen35moe", Arch::Qwen35Moe),
    ("qwen35", Arch::Qwen35),
    ("qwen3", Arch::Qwen3),
    ("qwen2", Arch::Qwen2),
    ("deepseekv3", Arch::DeepseekV3),
    ("deepseek", Arch::DeepseekV2),
    ("glm", Arch::Glm4),
];

/// A name with `-` and `_` removed, lowercase.
fn spelling(name: &str) -> String {
    name.chars().filter(|c| !matches!(c, '-' | '_')).flat_map(char::to_lowercase).collect()
}

impl Arch {
    /// The family a GGUF's `general.architecture` names (either spelling, exactly: llama.cpp
    /// loads no other name).
    pub fn named(name: &str) -> Arch {
        let key = spelling(name);
        SPELLINGS.iter().find(|(_, names)| names.contains(&key.as_str())).map_or(Arch::Other, |&(arch, _)| arch)
    }

    /// The family a `config.json`'s `model_type` names: exactly, else by the prefix of a
    /// later version of a family (`qwen2_5_vl`).
    pub fn of_model_type(model_type: &str) -> Arch {
        match Arch::named(model_type) {
            Arch::Other => {
                let key = spelling(model_type);
                PREFIXES.iter().find(|(prefix, _)| key.starts_with(prefix)).map_or(Arch::Other, |&(_, arch)| arch)
            }
            arch => arch,
        }
    }

    /// Gemma's families, which tie their embeddings without always saying so.
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma | Arch::Gemma2 | Arch::Gemma3 | Arch::Gemma3n)
    }

    /// Qwen's families: no output bias whatever `attention_bias` says, a gate on the shared
    /// expert.
    pub fn is_qwen(self) -> bool {
        matches!(
            self,
            Arch::Qwen2
                | Arch::Qwen2Moe
                | Arch::Qwen2Vl
                | Arch::Qwen3
                | Arch::Qwen3Moe
                | Arch::Qwen3Next
                | Arch::Qwen35
                | Arch::Qwen35Moe
        )
    }

    /// Qwen 2's q, k and v carry a bias unless the config says otherwise.
    pub fn qkv_bias_by_default(self) -> bool {
        matches!(self, Arch::Qwen2 | Arch::Qwen2Moe | Arch::Qwen2Vl)
    }

    /// `attention_bias` covers q, k and v only (Qwen, GLM): the output projection has none.
    pub fn output_bias_ignored(self) -> bool {
        self.is_qwen() || matches!(self, Arch::Glm4 | Arch::Glm4Moe)
    }

    /// Norms per layer beyond the two every decoder has: Gemma 2 and 3 norm after attention
    /// and after the MLP too.
    pub fn extra_norms(self) -> u64 {
        if matches!(self, Arch::Gemma2 | Arch::Gemma3 | Arch::Gemma3n) { 2 } else { 0 }
    }

    /// Per-head q/k norms with weights, unless the config says otherwise (Llama 4's is a
    /// plain L2 norm without weights, whatever it says).
    pub fn qk_norm(self, stated: Option<bool>) -> bool {
        match self {
            Arch::Llama4 => false,
            Arch::Qwen3
            | Arch::Qwen3Moe
            | Arch::Qwen3Next
            | Arch::Qwen35
            | Arch::Qwen35Moe
            | Arch::Gemma3
            | Arch::Gemma3n => stated.unwrap_or(true),
            _ => stated.unwrap_or(false),
        }
    }

    /// Families whose layers (some or all) keep recurrent state instead of a KV cache: Mamba,
    /// a Mamba-2 hybrid, a short convolution (LFM2), a Gated DeltaNet (Qwen3-Next).
    pub fn has_recurrent_layers(self) -> bool {
        matches!(
            self,
            Arch::Mamba
                | Arch::Mamba2
                | Arch::FalconH1
                | Arch::GraniteHybrid
                | Arch::Lfm2
                | Arch::Qwen3Next
                | Arch::Qwen35
                | Arch::Qwen35Moe
        )
    }

    /// DeepSeek's configs must describe latent attention.
    pub fn needs_latent_attention(self) -> bool {
        matches!(self, Arch::DeepseekV2 | Arch::DeepseekV3)
    }

    /// The router adds a bias per expert when choosing (DeepSeek-V3, Kimi K2, GLM-4.5).
    pub fn routing_bias(self) -> bool {
        matches!(self, Arch::DeepseekV3 | Arch::KimiK2 | Arch::Glm4Moe)
    }

    /// gpt-oss: attention sinks per head, and biases on the router and every expert.
    pub fn sinks_and_expert_biases(self) -> bool {
        self == Arch::GptOss
    }

    /// The Llama-style shape llama.cpp's quantizer treats as "70B" (GQA, 80 layers).
    pub fn llama_like(self) -> bool {
        matches!(self, Arch::Llama | Arch::Mistral)
    }

    /// Attention and the MLP run from one norm (Cohere): the residual, the norm and
    /// attention's output stay live beside the MLP.
    pub fn parallel_block(self) -> bool {
        matches!(self, Arch::Cohere | Arch::Cohere2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name `Serialize` writes for a family reads back through [`Arch::named`] (the
    /// page reads a dropped model's family so, without a derived `Deserialize`).
    #[test]
    fn a_familys_written_name_names_it() {
        for arch in SPELLINGS.iter().map(|&(arch, _)| arch).chain([Arch::Other]) {
            let written = serde_json::to_value(arch).unwrap();
            assert_eq!(Arch::named(written.as_str().unwrap()), arch, "{written}");
        }
    }

    #[test]
    fn both_spellings_name_one_family() {
        for (gguf, config, arch) in [
            ("gpt-oss", "gpt_oss", Arch::GptOss),
            ("command-r", "cohere", Arch::Cohere),
            ("qwen3moe", "qwen3_moe", Arch::Qwen3Moe),
            ("qwen3next", "qwen3_next", Arch::Qwen3Next),
            ("qwen35moe", "qwen3_5_moe", Arch::Qwen35Moe),
            ("qwen35", "qwen3_5_text", Arch::Qwen35),
            ("falcon-h1", "falcon_h1", Arch::FalconH1),
            ("granitehybrid", "granitemoehybrid", Arch::GraniteHybrid),
            ("deepseek2", "deepseek_v2", Arch::DeepseekV2),
            ("glm4moe", "glm4_moe", Arch::Glm4Moe),
            ("gemma3", "gemma3_text", Arch::Gemma3),
            ("llama4", "llama4_text", Arch::Llama4),
        ] {
            assert_eq!((Arch::named(gguf), Arch::named(config)), (arch, arch), "{gguf} / {config}");
        }
        // Every family is reached by its own spellings, and no spelling names two.
        for (arch, spellings) in SPELLINGS {
            for s in spellings {
                assert_eq!(Arch::named(s), arch, "{s}");
            }
        }
        assert_eq!(Arch::of_model_type("qwen2_5_vl"), Arch::Qwen2, "a later version reads like its family");
        assert_eq!(Arch::of_model_type("gemma3n_foo"), Arch::Gemma3n, "the longest prefix decides");
        assert_eq!(Arch::named("qwen2_5_vl"), Arch::Other, "a GGUF names its family exactly");
        assert_eq!(Arch::named("rwkv7"), Arch::Other);
        assert_eq!(Arch::named(""), Arch::Other);
    }

    #[test]
    fn each_familys_defaults() {
        // What a config leaves out, per family (`transformers`' and llama.cpp's defaults).
        assert!(Arch::Gemma2.is_gemma() && Arch::Gemma3n.is_gemma() && !Arch::Llama.is_gemma());
        assert!(Arch::Qwen2Moe.qkv_bias_by_default() && !Arch::Qwen3.qkv_bias_by_default());
        assert!(Arch::Qwen3.output_bias_ignored() && Arch::Glm4Moe.output_bias_ignored());
        assert!(!Arch::Llama.output_bias_ignored());
        assert_eq!([Arch::Gemma2, Arch::Gemma3, Arch::Gemma3n, Arch::Gemma].map(Arch::extra_norms), [2, 2, 2, 0]);
        assert!(Arch::Qwen3.qk_norm(None) && !Arch::Qwen3.qk_norm(Some(false)));
        assert!(!Arch::Llama4.qk_norm(Some(true)), "Llama 4's norm has no weights");
        assert!(!Arch::Llama.qk_norm(None) && Arch::Glm4Moe.qk_norm(Some(true)));
        assert!(Arch::DeepseekV3.needs_latent_attention() && !Arch::KimiK2.needs_latent_attention());
        assert!(Arch::KimiK2.routing_bias() && !Arch::DeepseekV2.routing_bias());
        assert!(Arch::GptOss.sinks_and_expert_biases());
        assert!(Arch::Mistral.llama_like() && !Arch::Mixtral.llama_like());
        assert!(Arch::Cohere.parallel_block() && Arch::Cohere2.parallel_block() && !Arch::Cohere2Moe.parallel_block());
    }
}
