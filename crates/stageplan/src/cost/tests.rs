//! The cost model's parts against hand-computed figures.

use super::*;
use crate::scenario::Scenario;

fn cost(json: &str) -> CostModel {
    CostModel::new(&Scenario::from_json(json).unwrap().problem().unwrap())
}

#[test]
fn a_single_stage_holds_the_whole_model_once() {
    let c = cost(
        r#"{"model": {"preset": "llama-3.2-1b", "weights": "bf16"}, "workload": {"context": 1024, "workspace": 0},
            "nodes": [{"name": "a", "memory": "64 GiB", "bandwidth": "100 GB/s", "compute": "10 TFLOPS", "reserve": 0}]}"#,
    );
    let m = c.memory(0, 0, c.layers());
    // Llama 3.2 1B in bf16: 1,235,814,400 parameters × 2 bytes, the tied head held once.
    assert_eq!(m.weights + m.embed_head, 1_235_814_400 * 2);
    // KV: 16 layers × 2 × 8 heads × 64 dims × 2 bytes × 1024 tokens.
    assert_eq!(m.kv, 16 * 2 * 8 * 64 * 2 * 1024);
    // Split in two, the tied embedding is held twice.
    let split = c.memory(0, 0, 8).embed_head + c.memory(0, 8, 16).embed_head;
    assert_eq!(split, 2 * 128_256 * 2048 * 2 + 2048 * 2);
}

#[test]
fn decode_is_memory_bound_on_a_gpu_and_roofline_picks_the_larger_term() {
    let c = cost(
        r#"{"model": {"preset": "llama-3.1-8b", "weights": "q4_k_m"},
            "nodes": [{"name": "gpu", "device": "rtx-4090"}, {"name": "cpu", "memory": "64 GiB", "bandwidth": "100 GB/s", "compute": "0.01 TFLOPS"}]}"#,
    );
    let gpu = c.time(0, 0, c.layers(), None);
    assert!(gpu.memory_s > gpu.compute_s);
    assert_eq!(gpu.total(), gpu.memory_s + gpu.overhead_s);
    let cpu = c.time(1, 0, c.layers(), None);
    assert!(cpu.compute_s > cpu.memory_s);
    assert_eq!(c.roofline_s(1, 0, c.layers()), cpu.compute_s + cpu.overhead_s);
}

#[test]
fn fitted_terms_apply_on_top_of_the_peaks() {
    let json = |backend: &str| {
        format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}},
                "nodes": [{{"name": "gpu", "device": "rtx-4090", "backend": "{backend}"}}]}}"#
        )
    };
    let (peak, cuda) = (cost(&json("peak")), cost(&json("cuda")));
    let (p, c) = (peak.time(0, 0, 32, None), cuda.time(0, 0, 32, None));
    let terms = crate::calibration::FITTED.backend(crate::device::Backend::Cuda).unwrap();
    // Bandwidth reached: the backend's fraction for F16 times the k-quant multiplier.
    let reached = terms.bandwidth * crate::calibration::FITTED.kquant;
    assert!((c.memory_s * reached / p.memory_s - 1.0).abs() < 1e-12);
    assert_eq!((p.overhead_s, c.overhead_s), (0.0, 32.0 * terms.per_layer_s));
    // A node's own efficiency multiplies the fitted fraction.
    let own = cost(&json("cuda").replace(r#""backend""#, r#""efficiency": {"bandwidth": 0.5}, "backend""#));
    assert!((own.time(0, 0, 32, None).memory_s / c.memory_s - 2.0).abs() < 1e-12);
    // A CPU node with one thread reaches one thread's worth of bandwidth.
    let cpu = |threads: &str| {
        cost(&format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "f16"}},
                "nodes": [{{"name": "box", "device": "cpu-epyc-12ch-ddr5"{threads}}}]}}"#
        ))
        .time(0, 0, 32, None)
        .memory_s
    };
    let fitted = &crate::calibration::FITTED;
    let one_thread = fitted.thread_bandwidth / fitted.backend(crate::device::Backend::Cpu).unwrap().bandwidth;
    assert!((cpu(r#", "threads": 1"#) / cpu("") * one_thread / 460.8e9 - 1.0).abs() < 1e-9);
}

#[test]
fn the_last_stage_pays_the_return_hop_and_others_the_activation_hop() {
    let c = cost(
        r#"{"model": {"preset": "llama-3.2-1b"}, "workload": {"batch": 4},
            "links": {"default": {"bandwidth": "1 GB/s", "latency": "1 ms"}},
            "nodes": [{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "rtx-4090"}]}"#,
    );
    let times = c.stage_times(&[Placement::new(0, 0, 8), Placement::new(1, 8, 16)]);
    let hop = 1e-3 + 4.0 * 2048.0 * 2.0 / 1e9;
    let ret = 1e-3 + 4.0 * 4.0 / 1e9;
    assert!((times[0] - c.roofline_s(0, 0, 8) - hop).abs() < 1e-15);
    assert!((times[1] - c.roofline_s(1, 8, 16) - ret).abs() < 1e-15);
}
