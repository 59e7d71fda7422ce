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

/// Each stage sends the next its sequences' hidden states, the last the first what it needs
/// to go on: under llama.cpp the f32 hidden state, and the f32 logits back to llama-server,
/// which samples (128,256 of them a sequence for Llama 3.2); under vLLM the hidden state and
/// the residual in bf16, and token ids back.
#[test]
fn the_last_stage_pays_the_return_hop_and_others_the_activation_hop() {
    let cost_of = |engine: &str| {
        cost(&format!(
            r#"{{"model": {{"preset": "llama-3.2-1b"}}, "workload": {{"batch": 4}}, "engine": "{engine}",
                "links": {{"default": {{"bandwidth": "1 GB/s", "latency": "1 ms"}}}},
                "nodes": [{{"name": "a", "device": "rtx-4090"}}, {{"name": "b", "device": "rtx-4090"}}]}}"#
        ))
    };
    for (engine, hop, ret) in [
        ("llama.cpp", 1e-3 + 4.0 * 2048.0 * 4.0 / 1e9, 1e-3 + 4.0 * 128_256.0 * 4.0 / 1e9),
        ("vllm", 1e-3 + 4.0 * 2048.0 * 2.0 * 2.0 / 1e9, 1e-3 + 4.0 * 4.0 / 1e9),
    ] {
        let c = cost_of(engine);
        let times = c.stage_times(&[Placement::new(0, 0, 8), Placement::new(1, 8, 16)]);
        assert!((times[0] - c.roofline_s(0, 0, 8) - hop).abs() < 1e-15, "{engine}");
        assert!((times[1] - c.roofline_s(1, 8, 16) - ret).abs() < 1e-15, "{engine}");
    }
}

/// llama-server drives every device: a cut between two machines that are not the first
/// stage's is read into the first's and written out again (two hops), as `ggml-rpc` copies
/// between two servers; vLLM's ranks send to each other.
#[test]
fn llama_cpp_relays_a_cut_through_the_first_stages_machine() {
    let cost_of = |engine: &str| {
        cost(&format!(
            r#"{{"model": {{"preset": "llama-3.2-1b"}}, "engine": "{engine}",
                "links": {{"default": {{"bandwidth": "1 GB/s", "latency": "1 ms"}}}},
                "nodes": [{{"name": "a", "device": "rtx-4090"}}, {{"name": "b", "device": "rtx-4090"}},
                          {{"name": "c", "device": "rtx-4090"}}]}}"#
        ))
    };
    let stages = [Placement::new(0, 0, 5), Placement::new(1, 5, 10), Placement::new(2, 10, 16)];
    for (engine, hops_after_b) in [("llama.cpp", 2.0), ("vllm", 1.0)] {
        let c = cost_of(engine);
        let times = c.stage_times(&stages);
        let hop = c.hop_s(0, 1);
        assert!((times[0] - c.roofline_s(0, 0, 5) - hop).abs() < 1e-15, "{engine}");
        assert!((times[1] - c.roofline_s(1, 5, 10) - hops_after_b * hop).abs() < 1e-15, "{engine}");
        assert!((times[2] - c.roofline_s(2, 10, 16) - c.return_s(2, 0)).abs() < 1e-15, "{engine}");
    }
    // Two GPUs of the first stage's machine hand on directly, over their own link.
    let c = cost(
        r#"{"model": {"preset": "llama-3.2-1b"},
            "links": {"default": {"bandwidth": "1 GB/s", "latency": "1 ms"}},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-4090", "count": 2}], "gpu_link": "pcie4-x16"},
                      {"name": "c", "device": "rtx-4090"}]}"#,
    );
    let times = c.stage_times(&[Placement::new(2, 0, 5), Placement::new(0, 5, 10), Placement::new(1, 10, 16)]);
    assert!(
        (times[1] - c.roofline_s(0, 5, 10) - 2.0 * c.hop_s(0, 2)).abs() < 1e-15,
        "c's GPU, then box/gpu0 to box/gpu1 relayed through c"
    );
    let times = c.stage_times(&[Placement::new(0, 0, 5), Placement::new(1, 5, 10), Placement::new(2, 10, 16)]);
    assert!((times[0] - c.roofline_s(0, 0, 5) - c.hop_s(0, 1)).abs() < 1e-15);
    assert!(c.hop_s(0, 1) < 1e-4, "the GPUs' own link, not the network's");
    assert!((times[1] - c.roofline_s(1, 5, 10) - c.hop_s(1, 2)).abs() < 1e-15, "box/gpu1 is on the first's machine");
}

/// Gemma 12B's problem on two RTX 4090s, reshaped as Gemma 3n keeps its cache: layers from 20
/// on read layer 18's (sliding) or 19's (full) and keep none of their own.
fn shared_kv(weights: &str, context: u64) -> (CostModel, usize) {
    let mut problem = Scenario::from_json(&format!(
        r#"{{"model": {{"preset": "gemma-3-12b", "weights": "{weights}"}}, "workload": {{"context": {context}}},
            "nodes": [{{"name": "a", "device": "rtx-4090"}}, {{"name": "b", "device": "rtx-4090"}}]}}"#
    ))
    .unwrap()
    .problem()
    .unwrap();
    let arch = &mut problem.model.arch;
    let n = arch.num_layers as usize;
    let window = arch.windows.iter().flatten().copied().max();
    arch.windows = (0..n).map(|i| window.filter(|_| i % 5 < 4)).collect();
    arch.kv_from = (0..n).map(|i| (i >= 20).then_some(if i % 5 < 4 { 18 } else { 19 })).collect();
    for e in &mut arch.kv_elements[20..] {
        *e = 0;
    }
    (CostModel::new(&problem), n)
}

#[test]
fn a_stage_receives_the_caches_its_layers_read_on_another_device() {
    let (c, n) = shared_kv("f16", 1024);
    let workspace = |s: usize| c.memory(1, s, n).workspace;
    // A cache comes over once for each layer that reads it, four copies each (the
    // scheduler's pipeline copies): from 21 on, 22 layers read 18's and 5 read 19's; from 19,
    // 23 read 18's; a stage holding both receives neither.
    let copies = crate::engine::LLAMA_CPP_PIPELINE_COPIES;
    assert_eq!(workspace(21) - workspace(17), copies * (22 * c.layers.layer_kv(18) + 5 * c.layers.layer_kv(19)));
    assert_eq!(workspace(19) - workspace(17), copies * 23 * c.layers.layer_kv(18));
    assert_eq!(workspace(17), c.buffers.of(false, true));
    assert_eq!(c.memory(0, 0, 21).workspace, c.buffers.of(true, false), "a first stage holds its sources");
}

#[test]
fn a_stage_with_shared_caches_fits_without_a_layer_at_either_end() {
    // At 32k tokens the copies of layer 19's cache (1 GiB per reader) outweigh Q4 layers
    // 17–19: a stage from 17 is charged what a stage from 20 would receive beyond them, so
    // dropping layers never makes a stage larger.
    let (c, n) = shared_kv("q4_k_m", 32768);
    let total = |s: usize, e: usize| c.memory(1, s, e).total();
    for s in 1..n {
        for e in s + 1..=n {
            assert!(total(s, e - 1) <= total(s, e) || e - 1 == s, "[{s}, {e}) without its last layer");
            assert!(total(s + 1, e) <= total(s, e) || s + 1 == e, "[{s}, {e}) without its first layer");
        }
    }
    assert!(c.memory(1, 17, n).workspace > c.buffers.of(false, true), "charged at 17: {}", total(17, n));
    assert_eq!(total(17, n), total(20, n), "the most a stage within it holds");
}

/// The cost of a machine without system RAM as the cost model computed it before such a
/// machine became [`Offload::NONE`] on the path of one with RAM, written out from that code:
/// the unified path must agree with it to the bit. One change is deliberate: a stage whose
/// engine buffers are less than every stage's (a single stage of llama.cpp, which keeps no
/// pipeline copies) is credited the difference, as a machine with RAM always was; before, it
/// was charged every stage's.
mod without_system_ram {
    use proptest::prelude::*;

    use super::*;

    /// Bytes beyond the reserve and every stage's workspace (which the capacity leaves out).
    fn held(c: &CostModel, node: usize, start: usize, end: usize) -> i128 {
        let stage = c.layers.held(start, end);
        let mut held = stage.weights + stage.kv;
        held += u128::from(c.embed_head(c.nodes[node].keeps_embedding, start, end, true));
        held += u128::from(c.stage_buffers(start, end, false));
        i128::try_from(held).unwrap() - i128::from(c.buffers.stage)
    }

    fn fits(c: &CostModel, node: usize, start: usize, end: usize) -> bool {
        held(c, node, start, end) <= i128::from(c.nodes[node].capacity)
    }

    fn fits_sequences(c: &CostModel, node: usize, start: usize, end: usize, sequences: u64) -> bool {
        let kv = c.layers.held(start, end).kv;
        let scaled = kv / u128::from(c.batch.max(1)) * u128::from(sequences);
        let held = held(c, node, start, end) - i128::try_from(kv).unwrap() + i128::try_from(scaled).unwrap();
        held <= i128::from(c.nodes[node].capacity)
    }

    fn fits_at_context(c: &CostModel, node: usize, start: usize, end: usize, context: u64) -> bool {
        let cells = |window| c.rules.kv_cells(context, window, c.shape.prefill_chunk);
        let layer_kv = |l: usize| c.layers.layer_kv_with(l, cells);
        let at_context = match &c.dims {
            Some(dims) => c.rules.buffers(dims, Shape { context, ..c.shape }),
            None => c.buffers,
        };
        let grown = i128::from(c.buffers_of(&at_context, start, end, &layer_kv, false))
            - i128::from(c.stage_buffers(start, end, false));
        let kv: u64 = (start..end).map(layer_kv).fold(0u64, u64::saturating_add);
        let held = held(c, node, start, end) - i128::try_from(c.layers.held(start, end).kv).unwrap();
        held + i128::from(kv) + grown <= i128::from(c.nodes[node].capacity)
    }

    fn memory(c: &CostModel, node: usize, start: usize, end: usize) -> MemoryParts {
        let stage = c.layers.held(start, end);
        MemoryParts {
            weights: saturate(stage.weights),
            kv: saturate(stage.kv),
            embed_head: c.embed_head(c.nodes[node].keeps_embedding, start, end, true),
            workspace: c.stage_buffers(start, end, false),
            reserve: c.nodes[node].reserve,
        }
    }

    fn time(c: &CostModel, node: usize, start: usize, end: usize) -> TimeParts {
        let rates = &c.nodes[node];
        let stage = c.layers.step(start, end);
        // The device's own reads first, then the embedding's and head's, as the model sums them.
        let (mut read, mut flops) = (stage.read + if rates.rereads_kv { stage.kv_reread } else { 0.0 }, stage.flops);
        for (holds, extra) in [(start == 0, &c.embed), (end == c.layers(), &c.head)] {
            if holds {
                (read, flops) = (read + extra.read, flops + extra.flops);
            }
        }
        let (mut prefill_read, mut prefill_flops) = (stage.prefill_read, stage.prefill_flops);
        for (holds, extra) in [(start == 0, &c.embed), (end == c.layers(), &c.head)] {
            if holds {
                (prefill_read, prefill_flops) =
                    (prefill_read + extra.prefill_read, prefill_flops + extra.prefill_flops);
            }
        }
        let per_layer = (end - start) as f64 * rates.per_layer_s;
        TimeParts {
            memory_s: read * rates.inv_bandwidth,
            compute_s: flops * rates.inv_decode_compute,
            batch_s: flops * rates.inv_further,
            overhead_s: per_layer,
            prefill_s: (prefill_read * rates.inv_bandwidth).max(prefill_flops * rates.inv_compute)
                + per_layer / c.prefill_chunk,
            ..TimeParts::default()
        }
    }

    /// A scenario of a preset model on machines without system RAM, every engine, with the
    /// engine's buffers or a given workspace.
    fn scenario() -> impl Strategy<Value = String> {
        let model = prop_oneof![
            Just("llama-3.2-1b"),
            Just("gemma-3-1b"),
            Just("qwen3-30b-a3b"),
            Just("gemma-2-9b"),
            Just("mixtral-8x7b")
        ];
        let weights = prop_oneof![Just("q4_k_m"), Just("q8_0"), Just("f16")];
        let engine = prop_oneof![Just("llama.cpp"), Just("vllm"), Just("generic")];
        let workspace =
            prop_oneof![Just(String::new()), (0u64..=512).prop_map(|m| format!(r#", "workspace": "{m} MiB""#))];
        let node = (
            1u64..=48_000,
            1e10..2e12f64,
            prop_oneof![Just(1e9), 1e11..1e15f64],
            prop_oneof![Just(""), Just(r#", "kind": "gpu""#), Just(r#", "kind": "cpu""#), Just(r#", "kind": "unified""#)],
            0u64..=2000,
        )
            .prop_map(|(memory, bandwidth, compute, kind, reserve)| {
                format!(
                    r#"{{"memory": "{memory} MiB", "bandwidth": {bandwidth}, "compute": {compute}, "reserve": "{reserve} MiB"{kind}}}"#
                )
            });
        (
            model,
            weights,
            engine,
            (1u64..=40_000, 1u64..=4, any::<bool>(), prop_oneof![Just("f16"), Just("q8_0")]),
            workspace,
            prop::collection::vec(node, 1..=3),
        )
            .prop_map(|(model, weights, engine, (context, batch, fa, kv), workspace, nodes)| {
                // A quantized V cache needs flash attention.
                let fa = fa || kv != "f16";
                let nodes: Vec<String> = nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| n.replacen('{', &format!(r#"{{"name": "n{i}", "#), 1))
                    .collect();
                format!(
                    r#"{{"model": {{"preset": "{model}", "weights": "{weights}"}},
                        "workload": {{"context": {context}, "batch": {batch}, "flash_attention": {fa}, "kv": "{kv}"{workspace}}}, "engine": "{engine}",
                        "nodes": [{}]}}"#,
                    nodes.join(", ")
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn one_placement_agrees_with_the_formulas_of_a_machine_without_ram(json in scenario(), sequences in 1u64..=8, context in 1u64..=65_536) {
            let c = cost(&json);
            let l = c.layers();
            for node in 0..c.node_count() {
                for start in 0..l {
                    for end in start + 1..=l {
                        let at = format!("{json}: node {node}, [{start}, {end})");
                        prop_assert_eq!(c.fits(node, start, end), fits(&c, node, start, end), "fits: {}", at);
                        prop_assert_eq!(c.memory(node, start, end), memory(&c, node, start, end), "memory: {}", at);
                        prop_assert_eq!(c.time(node, start, end, None), time(&c, node, start, end), "time: {}", at);
                        prop_assert_eq!(c.roofline_s(node, start, end).to_bits(), time(&c, node, start, end).total().to_bits(), "{}", at);
                        prop_assert_eq!(c.fits_sequences(node, start, end, sequences), fits_sequences(&c, node, start, end, sequences), "{}", at);
                        prop_assert_eq!(c.fits_at_context(node, start, end, context), fits_at_context(&c, node, start, end, context), "{}", at);
                    }
                }
            }
        }
    }
}

#[test]
fn a_manual_offload_that_does_not_fit_is_shown_as_given() {
    // Qwen3-30B-A3B on a 12 GB GPU with one layer's experts in RAM: far from fitting. The
    // plan shows the split the user gave, not the whole model on the GPU (#45).
    let json = r#"{"model": {"preset": "qwen3-30b-a3b", "weights": "q4_k_m"}, "policy": "manual",
        "stages": [{"node": "desk", "layers": [0, 48], "offload": {"host_layers": 0, "host_ffn": 1}}],
        "nodes": [{"name": "desk", "device": "rtx-3060-12gb", "host": {"ram": "ddr5-6000-2ch", "memory": "64 GiB"}}]}"#;
    let plan = crate::plan(&Scenario::from_json(json).unwrap().problem().unwrap());
    assert!(!plan.feasible);
    let offload = plan.stages[0].offload.as_ref().expect("the stage's offload as given");
    assert_eq!((offload.host_layers, offload.host_ffn, offload.ffn_layers), (0, 1, [0, 1]));
    assert!(offload.memory.weights > 0, "one layer's experts are in RAM: {offload:?}");
    let gpu = &plan.stages[0].memory;
    assert!(gpu.total > gpu.budget, "and the GPU is over: {gpu:?}");
}

#[test]
fn a_response_into_the_context_reads_less_cache_than_its_end() {
    // Llama 3.1 8B in q4_k_m at 32k tokens on an RTX 4090: at the full context each step
    // reads 4 GiB of KV cache beside 4.6 GiB of weights; 576 tokens in (a 512-token prompt,
    // half a 128-token response), 72 MiB (#45).
    let json = |workload: &str| {
        format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "workload": {{"context": 32768{workload}}},
                "nodes": [{{"name": "a", "device": "rtx-4090"}}]}}"#
        )
    };
    let problem = Scenario::from_json(&json("")).unwrap().problem().unwrap();
    let plan = crate::plan(&problem);
    let at = plan.at_depth.clone().expect("a plan that fits gives its speed at depth");
    assert_eq!(at.tokens, 512 + 64);
    let kv_per_token = 32.0 * 2.0 * 8.0 * 128.0 * 2.0;
    let full = CostModel::new(&problem).step_work(0, 32).0;
    let shallow = CostModel::at_depth(&problem, at.tokens).step_work(0, 32).0;
    assert!(((full - shallow) / ((32768.0 - 576.0) * kv_per_token) - 1.0).abs() < 1e-9, "{full} {shallow}");
    assert!(at.stream_tokens_per_s > 1.5 * plan.stream_tokens_per_s, "{at:?} vs {}", plan.stream_tokens_per_s);
    assert!(crate::verdict::Verdict::of(&plan).headline().contains(" at 32,768 tokens of context, "));
    // As llama-bench's `-d`: the depth given, the response's average on top.
    let given =
        crate::plan(&Scenario::from_json(&json(r#", "depth": 16384, "response": 256"#)).unwrap().problem().unwrap());
    assert_eq!(given.at_depth.unwrap().tokens, 16384 + 128);
    // Past the context is refused at its field.
    let error = Scenario::from_json(&json(r#", "depth": 32768"#)).unwrap().problem().unwrap_err();
    assert_eq!(error.path, "workload.depth");
    let error = Scenario::from_json(&json(r#", "response": 0"#)).unwrap().problem().unwrap_err();
    assert_eq!(error.path, "workload.response");
}

#[test]
fn a_quantized_cache_is_read_once_per_query_head_on_cuda_and_rocm() {
    // Llama 3.1 8B (32 query heads over 8 KV heads) at 32k tokens: with a q8_0 cache,
    // llama.cpp's vector flash-attention kernel reads each KV head's cache in each of its 4
    // query heads' blocks on CUDA and ROCm, 0.7 of the three rereads from memory (the rest
    // from L2); an f16 cache, another backend or a step of several sequences reads it once
    // (#45).
    let cost_of = |backend: &str, kv: &str, batch: u64| {
        cost(&format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "workload": {{"context": 32768, "kv": "{kv}", "batch": {batch}}},
                "nodes": [{{"name": "a", "kind": "gpu", "backend": "{backend}", "memory": "80 GiB", "bandwidth": "1 TB/s", "compute": "100 TFLOPS"}}]}}"#
        ))
    };
    let extra = |c: &CostModel| {
        let step = c.layers.step(0, 32);
        c.nodes[0].device_read(&step) - step.read
    };
    let q8_kv_read = 32.0 * 32768.0 * 2.0 * 8.0 * 128.0 * 34.0 / 32.0;
    for backend in ["cuda", "rocm"] {
        let c = cost_of(backend, "q8_0", 1);
        let rereads = 3.0 * crate::engine::QUANTIZED_KV_REREADS_FROM_MEMORY * q8_kv_read;
        assert!((extra(&c) / rereads - 1.0).abs() < 1e-9, "{backend}: {}", extra(&c));
    }
    assert_eq!(extra(&cost_of("metal", "q8_0", 1)), 0.0);
    assert_eq!(extra(&cost_of("cuda", "f16", 1)), 0.0);
    assert_eq!(extra(&cost_of("cuda", "q8_0", 4)), 0.0);
    // And the plan says so: slower than f16 at depth on CUDA, not on Metal.
    let speed = |backend: &str, kv: &str| {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "workload": {{"context": 32768, "kv": "{kv}"}},
                "nodes": [{{"name": "a", "kind": "gpu", "backend": "{backend}", "memory": "80 GiB", "bandwidth": "1 TB/s", "compute": "100 TFLOPS"}}]}}"#
        );
        crate::plan(&Scenario::from_json(&json).unwrap().problem().unwrap()).stream_tokens_per_s
    };
    assert!(speed("cuda", "q8_0") < 0.8 * speed("cuda", "f16"));
    assert!(speed("metal", "q8_0") > speed("metal", "f16"));
}

#[test]
fn a_manual_offload_may_keep_the_head_in_ram_as_ngl_0_does() {
    // Llama 3.1 8B on a 4 GB GPU with every layer and its head in RAM (`-ngl 0`, #45): the
    // head's 411 MiB (its q6_k output) move to RAM, the export writes `--n-gpu-layers 0`; anything but a single
    // stage with every layer in RAM is refused at the field.
    let json = |offload: &str| {
        format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "workload": {{"context": 4096}}, "policy": "manual",
                "stages": [{{"node": "desk", "layers": [0, 32], "offload": {offload}}}],
                "nodes": [{{"name": "desk", "kind": "gpu", "memory": "4 GiB", "bandwidth": "200 GB/s", "compute": "10 TFLOPS",
                            "host": {{"memory": "16 GiB", "bandwidth": "50 GB/s", "threads": 8}}}}]}}"#
        )
    };
    let plan_of = |offload: &str| crate::plan(&Scenario::from_json(&json(offload)).unwrap().problem().unwrap());
    let head_in_ram = plan_of(r#"{"host_layers": 32, "host_head": true}"#);
    let head_on_gpu = plan_of(r#"{"host_layers": 32}"#);
    let (ram, gpu) = (head_in_ram.stages[0].offload.as_ref().unwrap(), head_on_gpu.stages[0].offload.as_ref().unwrap());
    assert!(ram.head_on_host && !gpu.head_on_host);
    let moved = ram.memory.embed_head - gpu.memory.embed_head;
    // The q6_k output (210 bytes a block of 256) and its f32 norm.
    assert_eq!(moved, 128_256 * 4096 / 256 * 210 + 4096 * 4, "{ram:?} {gpu:?}");
    let export =
        crate::export::export(&head_in_ram, crate::export::Target::LlamaCpp, &crate::export::ExportOptions::default())
            .unwrap();
    assert!(export.text.contains("--n-gpu-layers 0"), "{}", export.text);
    for refused in
        [r#"{"host_layers": 31, "host_head": true}"#, r#"{"host_layers": 0, "host_ffn": 32, "host_head": true}"#]
    {
        let error = Scenario::from_json(&json(refused)).unwrap().problem().unwrap_err();
        assert_eq!(error.path, "stages[0].offload.host_head", "{refused}");
    }
}

#[test]
fn k_and_v_caches_apart_each_cost_their_own_format() {
    // `-ctk q8_0 -ctv f16` (#45): Llama 3.1 8B's 32 layers hold 8 KV heads × 128 of K in
    // q8_0 (34 bytes per 32) and as many of V in f16, at every cell of the context.
    let kv_of = |workload: &str| {
        let c = cost(&format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "workload": {{"context": 4096{workload}}},
                "nodes": [{{"name": "a", "kind": "gpu", "backend": "cuda", "memory": "80 GiB", "bandwidth": "1 TB/s", "compute": "100 TFLOPS"}}]}}"#
        ));
        c.layers.held(0, 32).kv
    };
    let (k, v) = (1024 * 34 / 32, 1024 * 2);
    assert_eq!(kv_of(r#", "kv": "q8_0", "kv_v": "f16", "flash_attention": false"#), 32 * 4096 * (k + v));
    assert_eq!(kv_of(r#", "kv": "f16", "kv_v": "q8_0""#), 32 * 4096 * (k + v));
    assert_eq!(kv_of(r#", "kv": "q8_0""#), 32 * 4096 * 2 * k);
    assert_eq!(kv_of(r#", "kv": "q8_0", "kv_v": "q8_0""#), 32 * 4096 * 2 * k);
}

#[test]
fn a_v_cache_format_is_checked_at_its_field() {
    let problem = |workload: &str, preset: &str| {
        Scenario::from_json(&format!(
            r#"{{"model": {{"preset": "{preset}"}}, "workload": {{"context": 4096, {workload}}},
                "nodes": [{{"name": "a", "memory": "800 GiB", "bandwidth": "1 TB/s", "compute": "100 TFLOPS"}}]}}"#
        ))
        .unwrap()
        .problem()
    };
    let path = |workload: &str, preset: &str| problem(workload, preset).unwrap_err().path;
    // A quantized K beside an f16 V runs without flash attention; a quantized V does not.
    problem(r#""kv": "q8_0", "kv_v": "f16", "flash_attention": false"#, "llama-3.1-8b").unwrap();
    assert_eq!(
        path(r#""kv": "f16", "kv_v": "q8_0", "flash_attention": false"#, "llama-3.1-8b"),
        "workload.flash_attention"
    );
    assert_eq!(path(r#""kv_v": "q2_k""#, "llama-3.1-8b"), "workload.kv_v");
    // Latent attention keeps V inside K's cache: one format (llama.cpp refuses two).
    assert_eq!(path(r#""kv": "q8_0", "kv_v": "f16""#, "deepseek-v3"), "workload.kv_v");
    problem(r#""kv": "q8_0", "kv_v": "q8_0""#, "deepseek-v3").unwrap();
}

#[test]
fn a_gpus_further_sequences_add_their_products_at_the_batched_rate() {
    let at = |batch: u64| {
        let c = cost(&format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q8_0"}}, "workload": {{"context": 1024, "batch": {batch}}},
                "nodes": [{{"name": "gpu", "memory": "80 GiB", "bandwidth": "800 GB/s", "compute": "27.2 TFLOPS", "backend": "peak"}}]}}"#
        ));
        (c.time(0, 0, c.layers(), None), c.step_work(0, c.layers()).1)
    };
    let (one, flops_one) = at(1);
    let (eight, flops_eight) = at(8);
    assert_eq!(one.batch_s, 0.0, "one sequence is the roofline alone");
    assert!((flops_eight / flops_one - 8.0).abs() < 1e-9);
    // The first sequence under the roofline; the seven others at a quarter of the compute.
    assert!((eight.compute_s - one.compute_s).abs() < 1e-12 * one.compute_s);
    let further = 7.0 * flops_one / (node::BATCHED_PRODUCTS * 27.2e12);
    assert!((eight.batch_s - further).abs() < 1e-9 * further, "{eight:?}");
    // Past the weights' read long before the roofline would be (M2 Ultra figures: a 7B step
    // of 12.8 ms alone, 31.4 at B = 8 in llama.cpp's published table).
    assert!(eight.total() > 2.0 * one.total(), "{one:?} {eight:?}");
}
