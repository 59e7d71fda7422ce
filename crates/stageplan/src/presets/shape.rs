//! A model preset's transformer as constant data, so planning a preset reads no JSON: the
//! page's and the widget's first plan then carry neither the presets' `config.json` texts
//! nor the parser that reads them (issue #45: what the first plan does not use loads on
//! demand). `shapes.rs` is generated from the configs by the test
//! `shapes_are_generated_from_the_configs` (`UPDATE_EXPECT=1` rewrites it); the unit test
//! `every_shape_is_its_config_as_read` holds each shape equal to its config as read.

use crate::model::{Arch, Mla, Moe, Transformer};

/// One value per layer, written as a prefix and then a cycle repeated up to `len`
/// (Gemma 3's five sliding layers and one global, DeepSeek's three dense layers before the
/// sparse ones): each preset's layers in a few values.
#[derive(Copy, Clone, Debug)]
pub(super) struct Layers<T: 'static> {
    pub prefix: &'static [T],
    pub cycle: &'static [T],
    pub len: usize,
}

impl<T: Copy> Layers<T> {
    pub(super) fn to_vec(self) -> Vec<T> {
        let mut values = Vec::with_capacity(self.len);
        values.extend_from_slice(self.prefix);
        values.extend(self.cycle.iter().cycle().take(self.len.saturating_sub(self.prefix.len())));
        values
    }
}

/// A [`Moe`] as constant data.
#[derive(Copy, Clone, Debug)]
pub(super) struct MoeShape {
    pub experts: u64,
    pub active: u64,
    pub expert_intermediate: u64,
    pub shared_intermediate: Option<u64>,
    pub sparse_layers: Layers<bool>,
}

/// A [`Transformer`] as constant data: the same fields, per-layer vectors as [`Layers`].
#[derive(Debug)]
pub(super) struct Shape {
    pub model_type: &'static str,
    pub family: Arch,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_layers: u64,
    pub num_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub tied_embeddings: bool,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub extra_norms: u64,
    pub qk_norm: bool,
    pub windows: Layers<Option<u64>>,
    pub kv_elements: Layers<u64>,
    pub v_elements: Layers<u64>,
    pub state_elements: Layers<u64>,
    pub v_pad_elements: Layers<u64>,
    pub kv_from: Layers<Option<u64>>,
    pub nextn_layers: u64,
    pub max_context: Option<u64>,
    pub moe: Option<MoeShape>,
    pub mla: Option<Mla>,
}

impl Shape {
    pub(super) fn transformer(&self) -> Transformer {
        Transformer {
            model_type: self.model_type.to_owned(),
            family: self.family,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_layers,
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            vocab_size: self.vocab_size,
            tied_embeddings: self.tied_embeddings,
            qkv_bias: self.qkv_bias,
            o_bias: self.o_bias,
            mlp_bias: self.mlp_bias,
            extra_norms: self.extra_norms,
            qk_norm: self.qk_norm,
            windows: self.windows.to_vec(),
            kv_elements: self.kv_elements.to_vec(),
            v_elements: self.v_elements.to_vec(),
            state_elements: self.state_elements.to_vec(),
            v_pad_elements: self.v_pad_elements.to_vec(),
            kv_from: self.kv_from.to_vec(),
            nextn_layers: self.nextn_layers,
            max_context: self.max_context,
            moe: self.moe.map(|m| Moe {
                experts: m.experts,
                active: m.active,
                expert_intermediate: m.expert_intermediate,
                shared_intermediate: m.shared_intermediate,
                sparse_layers: m.sparse_layers.to_vec(),
            }),
            mla: self.mla.clone(),
        }
    }
}

/// The generator of `shapes.rs`: Rust text for each preset's transformer.
#[cfg(any(test, feature = "testing"))]
pub(super) mod render {
    use std::fmt::{Debug, Write};

    use crate::model::Transformer;

    /// The shortest prefix and cycle that give `values`.
    fn layers<T: PartialEq + Debug>(values: &[T]) -> String {
        let n = values.len();
        let (mut prefix, mut cycle) = (n, 0);
        for p in 0..n {
            for c in 1..=n - p {
                if p + c >= prefix + cycle {
                    break;
                }
                if (p..n).all(|i| values[i] == values[p + (i - p) % c]) {
                    (prefix, cycle) = (p, c);
                    break;
                }
            }
        }
        let list = |s: &[T]| s.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ");
        format!(
            "Layers {{ prefix: &[{}], cycle: &[{}], len: {n} }}",
            list(&values[..prefix]),
            list(&values[prefix..prefix + cycle])
        )
    }

    /// One preset's entry of `SHAPES`.
    fn shape(name: &str, t: &Transformer) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "    (\"{name}\", Shape {{");
        let _ = writeln!(
            s,
            "        model_type: {:?}, family: Arch::{:?}, hidden_size: {}, intermediate_size: {}, num_layers: {}, num_heads: {}, num_kv_heads: {}, head_dim: {}, vocab_size: {},",
            t.model_type,
            t.family,
            t.hidden_size,
            t.intermediate_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads,
            t.head_dim,
            t.vocab_size
        );
        let _ = writeln!(
            s,
            "        tied_embeddings: {}, qkv_bias: {}, o_bias: {}, mlp_bias: {}, extra_norms: {}, qk_norm: {}, nextn_layers: {}, max_context: {:?},",
            t.tied_embeddings,
            t.qkv_bias,
            t.o_bias,
            t.mlp_bias,
            t.extra_norms,
            t.qk_norm,
            t.nextn_layers,
            t.max_context
        );
        for (field, text) in [
            ("windows", layers(&t.windows)),
            ("kv_elements", layers(&t.kv_elements)),
            ("v_elements", layers(&t.v_elements)),
            ("state_elements", layers(&t.state_elements)),
            ("v_pad_elements", layers(&t.v_pad_elements)),
            ("kv_from", layers(&t.kv_from)),
        ] {
            let _ = writeln!(s, "        {field}: {text},");
        }
        match &t.moe {
            None => s.push_str("        moe: None,\n"),
            Some(m) => {
                let _ = writeln!(
                    s,
                    "        moe: Some(MoeShape {{ experts: {}, active: {}, expert_intermediate: {}, shared_intermediate: {:?}, sparse_layers: {} }}),",
                    m.experts,
                    m.active,
                    m.expert_intermediate,
                    m.shared_intermediate,
                    layers(&m.sparse_layers)
                );
            }
        }
        match &t.mla {
            None => s.push_str("        mla: None,\n"),
            Some(m) => {
                let _ = writeln!(
                    s,
                    "        mla: Some(Mla {{ q_lora_rank: {:?}, kv_lora_rank: {}, qk_nope_head_dim: {}, qk_rope_head_dim: {}, v_head_dim: {} }}),",
                    m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
                );
            }
        }
        s.push_str("    }),\n");
        s
    }

    /// The whole of `shapes.rs`.
    pub(in crate::presets) fn file(entries: &[(&str, Transformer)]) -> String {
        let mut s = String::from(
            "//! Generated from `presets/models/*.json` by `shapes_are_generated_from_the_configs`\n\
             //! (`UPDATE_EXPECT=1 cargo test -p stageplan --test shapes`); do not edit.\n\n\
             use super::shape::{Layers, MoeShape, Shape};\n\
             use crate::model::{Arch, Mla};\n\n\
             /// Each model preset's transformer, by name.\n\
             #[rustfmt::skip]\n\
             pub(super) const SHAPES: &[(&str, Shape)] = &[\n",
        );
        for (name, t) in entries {
            s.push_str(&shape(name, t));
        }
        s.push_str("];\n");
        s
    }
}
