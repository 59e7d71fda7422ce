//! Real shaders on the machine's adapters: in CI, Mesa's lavapipe through Vulkan and
//! llvmpipe through GL. Every kernel's output is checked against the CPU inside `probe`
//! and `run_sharded`; these tests also check the figures are sane.
#![cfg(not(target_arch = "wasm32"))]

use stageplan_gpu::router::RoundRobin;
use stageplan_gpu::sharded::{self, MlpSpec, StageSpec};
use stageplan_gpu::{Gpu, ProbeOptions, probe};

fn adapters(gpu: &Gpu) -> Vec<stageplan_gpu::AdapterSummary> {
    let adapters = pollster::block_on(gpu.adapters());
    assert!(
        !adapters.is_empty(),
        "no GPU adapter: install Mesa's software drivers (apt-get install mesa-vulkan-drivers libvulkan1), as `cargo xtask test` does"
    );
    adapters
}

#[test]
fn every_adapter_probes_with_verified_kernels() {
    let gpu = Gpu::new();
    for adapter in adapters(&gpu) {
        let context = pollster::block_on(gpu.open(adapter.index)).expect("a device");
        let mut steps = Vec::new();
        let options = ProbeOptions {
            stream_bytes: 4 << 20,
            matmul_n: 192,
            repetitions: 3,
            dispatches: 1,
            memory_cap: Some(64 << 20),
        };
        let probe = pollster::block_on(probe(&context, &options, &mut |s| steps.push(s.to_owned())))
            .unwrap_or_else(|e| panic!("{} ({}): {e}", adapter.name, adapter.backend));
        assert!(probe.bandwidth.median > 1e8, "{}: {} B/s", adapter.name, probe.bandwidth.median);
        assert!(probe.compute_f32.median > 1e8, "{}: {} FLOP/s", adapter.name, probe.compute_f32.median);
        assert_eq!(probe.memory.source, "allocation");
        assert_eq!(probe.memory.bytes, 64 << 20);
        assert_eq!(steps.first().map(String::as_str), Some("memory bandwidth"));
        assert_eq!(probe.compute_f16.is_some(), adapter.features.shader_f16);
        let node = probe.node("here");
        assert_eq!(node.bandwidth.map(stageplan::units::Bandwidth::get), Some(probe.bandwidth.median));
        assert!(node.probe.is_some_and(|p| p.adapter == adapter.name));
    }
}

#[test]
fn both_software_backends_are_exercised_in_ci() {
    // On a machine with Mesa's drivers, lavapipe shows up through Vulkan and llvmpipe
    // through GL; the probe test above then runs the kernels on both.
    let gpu = Gpu::new();
    let backends: Vec<String> = adapters(&gpu).into_iter().map(|a| a.backend).collect();
    if std::env::var_os("STAGEPLAN_EXPECT_LAVAPIPE").is_some() {
        assert!(backends.iter().any(|b| b == "vulkan"), "{backends:?}");
        assert!(backends.iter().any(|b| b == "gl"), "{backends:?}");
    }
}

#[test]
fn a_plan_runs_split_across_devices_and_matches_the_cpu() {
    let gpu = Gpu::new();
    let first = adapters(&gpu)[0].index;
    // Separate devices on one adapter stand for separate machines.
    let contexts: Vec<_> = (0..3).map(|_| pollster::block_on(gpu.open(first)).expect("a device")).collect();
    let spec = MlpSpec { width: 96, layers: 10, tokens: 24, micro_batches: 6, seed: 11 };
    let stage =
        |node: &str, device: usize, layers: std::ops::Range<usize>| StageSpec { node: node.into(), device, layers };
    let replicas = vec![vec![stage("a", 0, 0..4), stage("b", 1, 4..10)], vec![stage("c", 2, 0..10)]];
    let report = pollster::block_on(sharded::run_sharded(
        &contexts,
        &replicas,
        &spec,
        &mut RoundRobin::new(replicas.len()),
        Some(&[1e-3, 2e-3]),
    ))
    .expect("the run matches the CPU reference");
    assert_eq!(report.requests_per_replica, vec![3, 3]);
    assert_eq!(report.stages.len(), 2);
    assert!(report.max_error < 1e-4, "max relative error {}", report.max_error);
    assert!(report.stages.iter().all(|s| s.measured_s > 0.0 && s.ratio.is_some()));
    assert!(report.stages[0].transfer_s > 0.0 && report.stages[1].transfer_s == 0.0);
    assert!(report.tokens_per_s > 0.0);
}

#[test]
fn a_gap_in_the_stages_is_refused() {
    let gpu = Gpu::new();
    let first = adapters(&gpu)[0].index;
    let contexts = vec![pollster::block_on(gpu.open(first)).expect("a device")];
    let spec = MlpSpec { width: 32, layers: 4, tokens: 4, micro_batches: 1, seed: 1 };
    let stages = vec![vec![
        StageSpec { node: "a".into(), device: 0, layers: 0..2 },
        StageSpec { node: "b".into(), device: 0, layers: 3..4 },
    ]];
    let error =
        pollster::block_on(sharded::run_sharded(&contexts, &stages, &spec, &mut RoundRobin::new(1), None)).unwrap_err();
    assert!(error.to_string().contains("does not continue the pipeline at layer 2"), "{error}");
}

#[test]
fn asking_for_a_missing_adapter_says_so() {
    let gpu = Gpu::new();
    let count = adapters(&gpu).len();
    let error = pollster::block_on(gpu.open(count + 5)).unwrap_err().to_string();
    assert!(error.contains("run `stageplan probe` to list them"), "{error}");
}
