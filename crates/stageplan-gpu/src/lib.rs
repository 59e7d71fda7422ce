//! stageplan-gpu: measure the device you are on, and prove a plan by running it.
//!
//! A plan is only as good as the figures it is fed. This crate measures a device through
//! wgpu — natively (Vulkan, Metal, DX12, GL; Mesa's lavapipe in CI) and in the browser
//! (WebGPU) with one code path — and turns the measurement into a scenario node. It then
//! runs a plan: an MLP layer stack split into the plan's stages, each on its own device,
//! activations crossing stage boundaries through the host, micro-batches streaming through,
//! outputs checked against a CPU reference, and each stage's measured time set beside what
//! the planner's cost model predicts for it.
//!
//! - [`Gpu`] lists adapters and opens a [`DeviceContext`]: device, queue and pipelines,
//!   built once.
//! - [`probe()`](probe::probe) measures bandwidth (STREAM triad), f32/f16 matmul throughput
//!   and usable memory, verifying every kernel's output.
//! - [`sharded::run_sharded`] runs the MLP split by a plan, requests routed over its
//!   replicas by a [`router::Router`]; [`predict`] gives the cost
//!   model's view of the same stages.
//!
//! Everything is `async`: natively wrap calls in `pollster::block_on`; in the browser await
//! them from `wasm_bindgen_futures::spawn_local`.

pub mod context;
pub mod error;
pub mod probe;
mod rng;
pub mod router;
pub mod sharded;

pub use context::{AdapterSummary, DeviceContext, Gpu};
pub use error::GpuError;
pub use probe::{Probe, ProbeOptions, probe};

use stageplan::CostModel;
use stageplan::device::Efficiency;
use stageplan::model::{Model, Place, Tensor, Transformer};
use stageplan::problem::{Link, Links, Node, Workload};
use stageplan::tensor_type::TensorType;

use sharded::{MlpSpec, StageSpec};

/// The MLP stack as a model the planner understands: per layer an f32 `width × width`
/// matrix and a bias row; no embedding, head or KV cache.
pub fn mlp_model(spec: &MlpSpec) -> Model {
    let w = u64::from(spec.width);
    let mut tensors = Vec::with_capacity(spec.layers * 2);
    for i in 0..spec.layers {
        let place = Place::Layer(i as u32);
        tensors.push(Tensor::new(
            format!("blk.{i}.ffn_up.weight"),
            vec![w, w],
            TensorType::F32,
            4 * w * w,
            place,
            false,
        ));
        tensors.push(Tensor::new(format!("blk.{i}.ffn_up.bias"), vec![w], TensorType::F32, 4 * w, place, false));
    }
    Model {
        name: format!("mlp-{}x{}", spec.layers, spec.width),
        weights: "f32".to_owned(),
        arch: Transformer {
            model_type: "mlp".to_owned(),
            family: stageplan::model::Arch::Other,
            hidden_size: w,
            intermediate_size: w,
            num_layers: spec.layers as u64,
            num_heads: 0,
            num_kv_heads: 0,
            head_dim: 0,
            vocab_size: 0,
            tied_embeddings: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: true,
            extra_norms: 0,
            qk_norm: false,
            windows: vec![None; spec.layers],
            kv_elements: vec![0; spec.layers],
            v_elements: vec![0; spec.layers],
            state_elements: Vec::new(),
            v_pad_elements: Vec::new(),
            kv_from: Vec::new(),
            nextn_layers: 0,
            mla: None,
            max_context: None,
            moe: None,
        },
        tensors,
        head_shares_embedding: false,
    }
}

/// The planner's cost model of the MLP on nodes with the probed figures (f32 compute: the
/// MLP is f32), one node per probe.
fn mlp_cost(spec: &MlpSpec, probes: &[Probe]) -> CostModel {
    let model = mlp_model(spec);
    let workload = Workload {
        context: 1,
        batch: u64::from(spec.tokens),
        kv: TensorType::F16,
        kv_v: TensorType::F16,
        workspace: Some(0),
        prefill_chunk: 1,
        flash_attention: true,
        prompt: 1,
        depth: 0,
        response: 1,
        // The sharded MLP runs in stageplan's own kernels: no engine pads its KV cells.
        engine: stageplan::engine::Engine::Generic,
    };
    let nodes: Vec<Node> = probes
        .iter()
        .map(|p| Node {
            name: p.adapter.name.clone(),
            device: None,
            kind: None,
            memory: u64::MAX / 4,
            bandwidth: p.bandwidth.median,
            compute: p.compute_f32.median,
            reserve: 0,
            efficiency: Efficiency::default(),
            backend: stageplan::device::Backend::Peak,
            threads: None,
            probe: None,
            host: None,
            gpu_of: None,
        })
        .collect();
    let links = Links::uniform(nodes.len(), Link { bandwidth: 1e9, latency: 0.0 });
    CostModel::build(&model, &workload, &nodes, &links)
}

/// The cost model's seconds for each stage's layers on one micro-batch, on the device
/// (`stage.device` indexes `probes`) that runs it.
pub fn predict(spec: &MlpSpec, stages: &[StageSpec], probes: &[Probe]) -> Vec<f64> {
    let cost = mlp_cost(spec, probes);
    stages.iter().map(|s| cost.roofline_s(s.device, s.layers.start, s.layers.end)).collect()
}

/// Per stage, the prediction's two roofline terms (memory seconds, compute seconds): what
/// [`Efficiency::fit`] needs to calibrate a node from measured stage times.
pub fn predicted_terms(spec: &MlpSpec, stages: &[StageSpec], probes: &[Probe]) -> Vec<(f64, f64)> {
    let cost = mlp_cost(spec, probes);
    stages
        .iter()
        .map(|s| {
            let t = cost.time(s.device, s.layers.start, s.layers.end, None);
            (t.memory_s, t.compute_s)
        })
        .collect()
}
