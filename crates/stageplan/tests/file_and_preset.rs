//! A model read from a file plans as the same bytes named by a preset (#45 item 1): every
//! speed term reads the tensors' own types, never the label a file gets (`gguf`).

use proptest::prelude::*;
use stageplan::check::FileField;
use stageplan::model::WeightFormat;
use stageplan::presets::ModelPreset;
use stageplan::{Model, Plan, ScenarioError};

/// Presets of each kind: dense, tied, sliding windows, experts.
const PRESETS: [&str; 5] = ["llama-3.1-8b", "llama-3.2-1b", "gemma-2-9b", "mixtral-8x7b", "qwen3-30b-a3b"];

/// Formats of each weight class: float, Q8_0, legacy, k-quants and i-quants.
const FORMATS: [&str; 6] = ["f16", "q8_0", "q4_0", "q4_k_m", "q6_k", "iq4_xs"];

fn plan(scenario: &str, model: &Model) -> Plan {
    let checked = stageplan::check(scenario, |_: FileField, _: &str| Ok::<_, ScenarioError>(model.clone()));
    stageplan::plan(&checked.expect("the scenario checks").problem)
}

/// What a plan says of speed and memory, exactly.
fn figures(plan: &Plan) -> Vec<(String, [usize; 2], u64, u64, u64)> {
    plan.stages
        .iter()
        .map(|s| (s.node.clone(), s.layers, s.memory.total, s.time_s.to_bits(), s.time.prefill_s.to_bits()))
        .collect()
}

fn node() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("cuda"), Just("metal"), Just("cpu"), Just("vulkan")],
        4u64..=96,
        50.0..2000.0f64,
        any::<bool>(),
        0u32..=3,
    )
        .prop_map(|(backend, gib, bandwidth, host, threads)| {
            let host = if host { r#", "host": {"memory": "64 GiB", "bandwidth": "60 GB/s", "threads": 8}"# } else { "" };
            let kind = if backend == "cpu" { "cpu" } else { "gpu" };
            format!(
                r#"{{"kind": "{kind}", "backend": "{backend}", "memory": "{gib} GiB", "bandwidth": "{bandwidth} GB/s", "compute": "50 TFLOPS", "threads": {}{}}}"#,
                threads + 1,
                if kind == "gpu" { host } else { "" }
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_file_plans_as_its_preset(
        preset in 0..PRESETS.len(),
        format in 0..FORMATS.len(),
        nodes in prop::collection::vec(node(), 1..=3),
        context in prop_oneof![Just(4096u64), Just(32768)],
    ) {
        let weights: WeightFormat = FORMATS[format].parse().unwrap();
        let preset_model = ModelPreset::find(PRESETS[preset]).unwrap().model(weights).unwrap();
        // The file as the importer makes it: the same tensors, labelled `gguf`.
        let file_model = Model { weights: "gguf".to_owned(), ..preset_model.clone() };
        let nodes: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| n.replacen('{', &format!(r#"{{"name": "n{i}", "#), 1))
            .collect();
        let scenario = |model: &str| {
            format!(
                r#"{{"model": {model}, "workload": {{"context": {context}}}, "nodes": [{}]}}"#,
                nodes.join(", ")
            )
        };
        let from_file = plan(&scenario(r#"{"file": "model.gguf"}"#), &file_model);
        let from_preset = plan(&scenario(&format!(r#"{{"preset": "{}", "weights": "{}"}}"#, PRESETS[preset], FORMATS[format])), &preset_model);
        prop_assert_eq!(from_file.feasible, from_preset.feasible);
        prop_assert_eq!(figures(&from_file), figures(&from_preset));
        prop_assert_eq!(from_file.stream_tokens_per_s.to_bits(), from_preset.stream_tokens_per_s.to_bits());
    }
}
