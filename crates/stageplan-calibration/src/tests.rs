//! The real table (`tests/calibration/`) against the core's fitted constants and cost model.

use stageplan::calibration::{FITTED, WeightClass};
use stageplan::device::Backend;
use stageplan::device::Efficiency;
use stageplan::presets::{DevicePreset, ModelPreset};
use stageplan::problem::{DEFAULT_LINK, Links, Node, Problem, Workload};
use stageplan::scenario::{Objective, Policy};
use stageplan::{Model, WeightFormat};

use crate::fit::{self, Terms, quantile};
use crate::table::{TableFiles, decode_samples, records};

macro_rules! table {
    ($($file:literal),*) => {
        TableFiles {
            measurements: include_str!("../../../tests/calibration/measurements.csv"),
            devices: include_str!("../../../tests/calibration/devices.csv"),
            models: include_str!("../../../tests/calibration/models.csv"),
            configs: &[$(($file, include_str!(concat!("../../../tests/calibration/models/", $file)))),*],
        }
    };
}

fn files() -> TableFiles<'static> {
    table!(
        "llama-2-7b.json",
        "llama-2-13b.json",
        "llama-2-70b.json",
        "tinyllama-1.1b.json",
        "phi-3.5-mini.json",
        "phi-4.json"
    )
}

/// The bound of issue #15 on the table the terms were fitted to: a change to the cost
/// model that makes the fitted terms predict the published figures worse fails here.
#[test]
fn fitted_terms_predict_the_table_within_the_bound() {
    let (samples, skipped) = decode_samples(&files()).unwrap();
    assert!(samples.len() >= 100, "{} rows, left out: {skipped:?}", samples.len());
    let terms = Terms::of(&FITTED);
    let errors: Vec<f64> = samples.iter().map(|s| terms.error(s)).collect();
    let peaks: Vec<f64> = samples.iter().map(|s| Terms::PEAK.error(s)).collect();
    assert!(quantile(&errors, 0.5) <= 0.10, "in-sample median {:.3}", quantile(&errors, 0.5));
    // The robust fit gives up some of the tail for the median (see `fit::fit`).
    assert!(quantile(&errors, 0.9) <= 0.40, "in-sample p90 {:.3}", quantile(&errors, 0.9));
    assert!(quantile(&errors, 0.5) < quantile(&peaks, 0.5) / 3.0, "calibration must beat the peaks");
}

/// CUDA rows dated before CUDA graphs get their own per-layer term; later and undated
/// rows, and other backends, do not.
#[test]
fn cuda_rows_from_before_graphs_are_told_apart() {
    let (samples, _) = decode_samples(&files()).unwrap();
    let before = |source: &str| {
        let mut of = samples.iter().filter(|s| s.source.starts_with(source)).map(|s| s.before_cuda_graphs);
        let first = of.next().expect(source);
        assert!(of.all(|b| b == first), "{source}: mixed");
        first
    };
    assert!(before("ggml-org/llama.cpp issue #6763"));
    assert!(before("ggml-org/llama.cpp PR #4812"));
    assert!(!before("ggml-org/llama.cpp PR #7302"));
    assert!(!before("ggml-org/llama.cpp discussion #15013"));
    assert!(!before("ggml-org/llama.cpp discussion #4167"), "Metal rows");
    assert!(FITTED.pre_graphs_per_layer_s > FITTED.backend(Backend::Cuda).unwrap().per_layer_s);
}

/// Two RTX 4090s on the default link, llama-3.1-8b in q4_k_m split evenly, one sequence of
/// 128 tokens: the problem `backend` plans.
fn two_4090s(backend: Backend) -> Problem {
    let device = DevicePreset::find("rtx-4090").unwrap();
    let node = |name: &str| Node {
        name: name.to_owned(),
        device: Some(device.name.to_owned()),
        kind: Some(device.kind),
        memory: device.memory as u64,
        bandwidth: device.bandwidth,
        compute: device.compute,
        reserve: device.reserve as u64,
        efficiency: Efficiency::default(),
        backend,
        threads: None,
        probe: None,
        host: None,
        gpu_of: None,
    };
    Problem {
        model: ModelPreset::find("llama-3.1-8b").unwrap().model("q4_k_m".parse().unwrap()).unwrap(),
        workload: Workload { context: 128, prompt: 128, ..Workload::default() },
        nodes: vec![node("a"), node("b")],
        links: Links::uniform(2, DEFAULT_LINK),
        objective: Objective::Latency,
        policy: Policy::Even,
        manual: None,
        fixed_offloads: Vec::new(),
        file: None,
        riders: Default::default(),
        notes: Vec::new(),
        serving: None,
    }
}

/// A sample's prediction is what the cost model plans with the fitted terms applied.
#[test]
fn samples_predict_what_the_cost_model_plans() {
    let at_peak = stageplan::plan(&two_4090s(Backend::Peak));
    let sample = fit::Sample {
        backend: Backend::Cuda,
        weights: WeightClass::KQuant,
        bandwidth: 1008e9,
        threads: None,
        before_cuda_graphs: false,
        stages: at_peak.stages.iter().map(fit::Stage::from).collect(),
        measured_s: 1.0,
        source: String::new(),
        label: String::new(),
    };
    assert_eq!(sample.stages.len(), 2);
    let fitted = stageplan::plan(&two_4090s(Backend::Cuda));
    let predicted = Terms::of(&FITTED).predict(&sample);
    assert!((fitted.latency_s.unwrap() / predicted - 1.0).abs() < 1e-12, "{fitted:?} vs {predicted}");
    let backend = |device: &str| DevicePreset::find(device).unwrap().backend;
    assert_eq!(
        (backend("rtx-4090"), backend("mi300x"), backend("m2-max-96gb")),
        (Backend::Cuda, Backend::Rocm, Backend::Metal)
    );
    assert_eq!(Backend::of_kind(Some(stageplan::device::DeviceKind::Cpu)), Backend::Cpu);
}

/// The configs the table names have the parameter counts their model cards publish.
#[test]
fn table_models_match_their_published_parameter_counts() {
    let files = files();
    for row in records(files.models).unwrap() {
        let config = row.get("config");
        let model = match config.strip_prefix("preset:") {
            Some(name) => ModelPreset::find(name).unwrap().model(WeightFormat::default()).unwrap(),
            None => {
                let text = files.configs.iter().find(|(n, _)| *n == config).expect("config present").1;
                let arch = stageplan::model::HfConfig::from_json(text).unwrap().transformer().unwrap();
                Model::from_transformer("m", arch, WeightFormat::default())
            }
        };
        let published: f64 = row.get("published_params_b").parse().unwrap();
        let ours = model.params() as f64 / 1e9;
        assert!((ours / published - 1.0).abs() < 0.015, "{}: {ours:.3} B vs {published} B", row.get("model"));
    }
}

/// `fitted.rs` is the fit of this table (what `cargo xtask calibrate` would write), to well
/// within the precision it is written at: a row added to the table, or a change to what the
/// cost model computes at peaks, needs the terms fitted again.
#[test]
fn fitted_rs_is_the_fit_of_the_table() {
    let (samples, _) = decode_samples(&files()).unwrap();
    let all: Vec<&fit::Sample> = samples.iter().collect();
    let cross = fit::leave_one_source_out(&samples, Terms::START);
    let fresh = fit::fitted(fit::fit(&all, Terms::START), &samples, &cross, FITTED.provenance);
    let stale = "differs from the fit of tests/calibration/; run `cargo xtask calibrate`";
    let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-3;
    for (new, old) in fresh.backends.iter().zip(&FITTED.backends) {
        assert_eq!((new.backend, new.rows), (old.backend, old.rows), "fitted.rs {stale}");
        assert!(
            close(new.bandwidth, old.bandwidth)
                && close(new.per_layer_s, old.per_layer_s)
                && (new.typical_error - old.typical_error).abs() < 2e-3,
            "{:?}: fitted.rs {stale}: {new:?}",
            new.backend
        );
    }
    for (name, new, old) in [
        ("q8", fresh.q8, FITTED.q8),
        ("legacy", fresh.legacy, FITTED.legacy),
        ("kquant", fresh.kquant, FITTED.kquant),
        ("thread_bandwidth", fresh.thread_bandwidth, FITTED.thread_bandwidth),
        ("pre_graphs_per_layer_s", fresh.pre_graphs_per_layer_s, FITTED.pre_graphs_per_layer_s),
    ] {
        assert!(close(new, old), "{name} in fitted.rs {stale}: {new} now");
    }
    let sources = samples.iter().map(|s| s.source.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    assert!(
        FITTED.provenance.starts_with(&format!("{} llama.cpp decode rows from {sources} sources", samples.len())),
        "the provenance in fitted.rs {stale}"
    );
}
