//! The same kernels in a real browser: headless Chromium with WebGPU (SwiftShader without
//! a GPU), under `wasm-bindgen-test`. `cargo xtask test` runs them with the flags in
//! `webdriver.json` (`--enable-unsafe-webgpu`).
#![cfg(target_arch = "wasm32")]

use stageplan_gpu::router::RoundRobin;
use stageplan_gpu::sharded::{self, MlpSpec, StageSpec};
use stageplan_gpu::{Gpu, ProbeOptions, probe};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn the_browser_adapter_probes_with_verified_kernels() {
    let gpu = Gpu::new();
    let adapters = gpu.adapters().await;
    assert!(!adapters.is_empty(), "no WebGPU adapter: start Chromium with --enable-unsafe-webgpu");
    assert_eq!(adapters[0].backend, "browserwebgpu");
    let context = gpu.open(0).await.expect("a device");
    let options = ProbeOptions {
        stream_bytes: 2 << 20,
        matmul_n: 128,
        repetitions: 3,
        dispatches: 1,
        memory_cap: Some(32 << 20),
    };
    let probe = probe(&context, &options, &mut |_| {}).await.expect("kernels match the CPU");
    assert!(probe.bandwidth.median > 1e7, "{}", probe.bandwidth.median);
    assert!(probe.compute_f32.median > 1e7, "{}", probe.compute_f32.median);
    assert_eq!(probe.memory.bytes, 32 << 20);
}

#[wasm_bindgen_test]
async fn a_plan_runs_split_across_browser_devices() {
    let gpu = Gpu::new();
    let contexts = vec![gpu.open(0).await.expect("a device"), gpu.open(0).await.expect("a second device")];
    let spec = MlpSpec { width: 64, layers: 6, tokens: 16, micro_batches: 4, seed: 5 };
    let stages = vec![vec![
        StageSpec { node: "a".into(), device: 0, layers: 0..2 },
        StageSpec { node: "b".into(), device: 1, layers: 2..6 },
    ]];
    let report =
        sharded::run_sharded(&contexts, &stages, &spec, &mut RoundRobin::new(1), None).await.expect("matches the CPU");
    assert!(report.max_error < 1e-4, "{}", report.max_error);
    assert_eq!(report.requests_per_replica, vec![4]);
}
