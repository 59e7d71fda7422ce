//! Stages that are tensor-parallel groups: the whole model on several GPUs of one machine,
//! each matrix split among them, as llama.cpp's `--split-mode tensor` and vLLM's
//! `--tensor-parallel-size` run it.
//!
//! **Where each tensor goes** (llama.cpp's `llama_meta_device_get_split_state`,
//! `src/llama-model.cpp`): Q, K, V and the FFN's gate and up by output rows, the attention
//! output and FFN down by input columns, the KV cache by KV heads, the LM head by vocabulary
//! rows; norms and biases of the outputs mirrored on every GPU (a few KiB a layer, not
//! counted). vLLM's column- and row-parallel layers split alike. Both split heads whole:
//! llama.cpp cuts at whole KV-head groups (`granularity_kv`), vLLM asserts that the degree
//! divides the attention heads and the KV heads, or, past the KV heads' count, that they
//! divide it: each KV head is then kept on `d ÷ heads` GPUs (`num_kv_head_replicas`). So
//! only such degrees are planned; each GPU holds `1/d` of the stage, and under vLLM's
//! replication its copy of a KV head's cache (read as a copy too).
//!
//! **Time of a step** on `d` GPUs: each reads and computes `1/d` of the stage, so the group
//! runs at its slowest GPU (`d ×` its rates: the split is even, so a faster GPU waits), plus
//! that GPU's per-layer cost, plus two all-reduces of the hidden state a layer (after the
//! attention output and after FFN down). llama.cpp's fallback all-reduce
//! (`ggml-backend-meta.cpp`, `allreduce_fallback`) is a butterfly: `⌈log₂ d⌉` rounds of
//! copying an f32 hidden state between pairs and adding, with one round more on each side
//! when `d` is not a power of two; each round a copy over the machine's GPU link (its
//! latency and bandwidth, per the `gpu_link` preset: without peer-to-peer the copy goes
//! through host RAM) and a launch.
//!
//! vLLM reduces bf16 hidden states with its custom all-reduce where the GPUs reach each
//! other's memory (`custom_all_reduce.py`: all of them over NVLink, or two over PCIe
//! peer-to-peer): one kernel in which each GPU reads every other's buffer, measured at
//! 8.5–11.8 µs for 4–32 KiB on 2, 4 and 8 H100s over NVLink (sglang #2904's table of vLLM's
//! kernel, without CUDA graphs; NCCL's NVLS tree takes about 6 µs on two, NCCL #1259), so
//! [`CUSTOM_ALL_REDUCE_S`] and the peers' bytes over the link. Elsewhere vLLM falls back
//! to NCCL, whose ring all-reduce of a small message costs a hop per peer
//! ([`NCCL_HOP_S`], from published runs on 4 and 8 GPUs) and carries `2(d − 1)/d` of the
//! message over the link.

use crate::engine::Engine;
use crate::model::{Arch, Model};
use crate::problem::{Link, Node, Peer};

/// Per-layer all-reduces of a tensor-parallel transformer layer: after the attention output
/// and after FFN down.
const ALL_REDUCES_PER_LAYER: f64 = 2.0;

/// A tensor-parallel group: the GPUs (indices into the problem's nodes, in the machine's
/// order) that hold every layer together.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorGroup {
    pub members: Vec<usize>,
}

/// vLLM's custom all-reduce of a decode step's hidden states, besides the bytes it reads
/// (the module doc's measurements).
pub(crate) const CUSTOM_ALL_REDUCE_S: f64 = 9e-6;

/// NCCL's all-reduce of a decode step's hidden states, per peer besides the bytes: 19.4 µs on
/// 4 V100s behind one PCIe switch (4 KiB in a CUDA graph, sglang-V100 PR #2), 42.1 µs on
/// 8 RTX 4090s (8 bytes, NCCL #1530), 45 µs on 8 RTX 6000D over PCIe (4 KiB, sglang
/// #32479): 6.0–6.5 µs for each of the `d − 1` peers (6 µs on two NVLinked H100s, NCCL #1259).
pub(crate) const NCCL_HOP_S: f64 = 6.3e-6;

/// What one of a group's all-reduces costs: a fixed time, and a time for each byte of the
/// f32 hidden states it reduces (whatever the engine sends them as).
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct AllReduce {
    pub fixed_s: f64,
    pub per_byte_s: f64,
}

impl AllReduce {
    /// How `engine` all-reduces over `d` GPUs on `link`, reaching each other as `peer`.
    pub(crate) fn of(engine: Engine, d: usize, link: Link, peer: Peer) -> AllReduce {
        let custom = match peer {
            Peer::NvLink => true,
            Peer::Pcie => d <= 2,
            Peer::None => false,
        };
        let peers = (d - 1) as f64;
        match engine {
            Engine::Vllm if custom => AllReduce::one_shot(peers, link),
            Engine::Vllm => AllReduce::nccl(peers, link),
            _ => {
                // llama.cpp's butterfly: rounds of copying an f32 hidden state over the link.
                let rounds = all_reduce_rounds(d);
                AllReduce { fixed_s: rounds * link.latency, per_byte_s: rounds / link.bandwidth }
            }
        }
    }

    /// vLLM's custom all-reduce of bf16 hidden states: one kernel reading the other `peers`
    /// GPUs' buffers over the link.
    pub(crate) fn one_shot(peers: f64, link: Link) -> AllReduce {
        AllReduce { fixed_s: CUSTOM_ALL_REDUCE_S, per_byte_s: peers / 2.0 / link.bandwidth }
    }

    /// vLLM's fallback, NCCL's ring all-reduce of bf16 hidden states over `peers`: each GPU
    /// sends and receives `2(d − 1)/d` of the message.
    pub(crate) fn nccl(peers: f64, link: Link) -> AllReduce {
        AllReduce { fixed_s: NCCL_HOP_S * peers, per_byte_s: peers / (peers + 1.0) / link.bandwidth }
    }

    /// Seconds of one layer's all-reduces for `tokens` tokens of `activation_f32` bytes each.
    #[inline]
    pub(crate) fn per_layer_s(&self, tokens: f64, activation_f32: f64) -> f64 {
        ALL_REDUCES_PER_LAYER * (self.fixed_s + self.per_byte_s * tokens * activation_f32)
    }
}

/// Rounds of llama.cpp's butterfly all-reduce on `d` devices: `log₂ d` for a power of two,
/// else the largest power of two's rounds plus folding the rest in and copying it back.
pub(crate) fn all_reduce_rounds(d: usize) -> f64 {
    let power = usize::BITS - 1 - d.leading_zeros();
    f64::from(power) + if d.is_power_of_two() { 0.0 } else { 2.0 }
}

/// Why `model` cannot run as `d`-way tensor parallel on `engine`, or `None` when it can.
pub fn degree_refused(model: &Model, engine: Engine, d: u64) -> Option<String> {
    let arch = &model.arch;
    let llama_cpp_lacks = matches!(
        arch.family,
        Arch::Gemma3n
            | Arch::DeepseekV2
            | Arch::DeepseekV3
            | Arch::KimiK2
            | Arch::Mamba
            | Arch::Mamba2
            | Arch::FalconH1
            | Arch::GraniteHybrid
            | Arch::Olmo2
    );
    match engine {
        Engine::Generic => return Some("the generic engine has no tensor parallel".to_owned()),
        // `llm_arch_supports_sm_tensor` (src/llama-arch.cpp) lists what `-sm tensor` refuses.
        Engine::LlamaCpp if llama_cpp_lacks => {
            return Some(format!("llama.cpp's `--split-mode tensor` does not run `{}`", arch.model_type));
        }
        // vLLM divides each MLP it shards by the degree (`divide` asserts it): a dense
        // layer's (`MergedColumnParallelLinear`), each routed expert's (`FusedMoE`'s
        // `intermediate_size_per_partition`) and a shared expert's.
        Engine::Vllm => {
            let moe = arch.moe.as_ref();
            let dense = moe.is_none_or(|m| m.sparse_layers.iter().any(|sparse| !sparse));
            let widths = [
                dense.then_some(arch.intermediate_size),
                moe.map(|m| m.expert_intermediate),
                moe.and_then(|m| m.shared_intermediate),
            ];
            if let Some(width) = widths.into_iter().flatten().find(|w| !w.is_multiple_of(d)) {
                return Some(format!("{d} does not divide the FFN width {width}"));
            }
        }
        _ => {}
    }
    if arch.mla.is_some() {
        return Some("latent attention (MLA) is not split by heads here".to_owned());
    }
    if arch.num_heads == 0 || !arch.num_heads.is_multiple_of(d) {
        return Some(format!("{d} does not divide the {} attention heads", arch.num_heads));
    }
    // vLLM keeps each KV head on `d ÷ heads` GPUs where there are more GPUs than heads
    // (`QKVParallelLinear`: `num_kv_head_replicas`), which needs the heads to divide `d`.
    let replicated = engine == Engine::Vllm && d > arch.num_kv_heads && d.is_multiple_of(arch.num_kv_heads.max(1));
    if arch.num_kv_heads == 0 || !(arch.num_kv_heads.is_multiple_of(d) || replicated) {
        return Some(format!("{d} does not divide the {} KV heads", arch.num_kv_heads));
    }
    None
}

/// Each machine with several GPUs: its name and its GPUs (indices into `nodes`, in order).
fn machines(nodes: &[Node]) -> Vec<Vec<usize>> {
    let mut out: Vec<(&str, Vec<usize>)> = Vec::new();
    for (k, node) in nodes.iter().enumerate() {
        let Some(g) = &node.gpu_of else { continue };
        match out.iter_mut().find(|(m, _)| *m == g.machine) {
            Some((_, gpus)) => gpus.push(k),
            None => out.push((&g.machine, vec![k])),
        }
    }
    out.into_iter().map(|(_, gpus)| gpus).collect()
}

/// GPUs one may stand for the other in a group: the same figures, no RAM beside either.
fn alike(a: &Node, b: &Node) -> bool {
    a.memory == b.memory
        && a.bandwidth == b.bandwidth
        && a.compute == b.compute
        && a.reserve == b.reserve
        && a.efficiency == b.efficiency
        && a.backend == b.backend
        && a.probe == b.probe
        && a.host.is_none()
        && b.host.is_none()
}

/// The groups of GPUs of one machine `model` may run on as tensor parallel under `engine`:
/// every set of two or more of a machine's GPUs whose count the model's heads divide, GPUs
/// alike taken in index order (the others are the same group renamed).
///
/// Each degree is judged once, and a set is kept when it holds, with each GPU, every GPU
/// alike before it (a mask each): every cost model builds its groups, up to 65,535 sets a
/// machine of 16 GPUs.
pub(crate) fn groups(nodes: &[Node], model: &Model, engine: Engine) -> Vec<TensorGroup> {
    let mut out = Vec::new();
    for gpus in machines(nodes) {
        let refused: Vec<bool> =
            (0..=gpus.len()).map(|d| d < 2 || degree_refused(model, engine, d as u64).is_some()).collect();
        let before: Vec<u32> = (0..gpus.len())
            .map(|i| (0..i).filter(|&j| alike(&nodes[gpus[i]], &nodes[gpus[j]])).fold(0, |mask, j| mask | 1 << j))
            .collect();
        // Bounded by `MAX_GPUS_PER_MACHINE` (16).
        for set in 1u32..(1 << gpus.len()) {
            let has = |i: usize| set & (1 << i) != 0;
            if !refused[set.count_ones() as usize] && (0..gpus.len()).all(|i| !has(i) || set & before[i] == before[i]) {
                out.push(TensorGroup { members: (0..gpus.len()).filter(|&i| has(i)).map(|i| gpus[i]).collect() });
            }
        }
    }
    out
}

/// vLLM's pipelines of tensor-parallel groups, one degree for every stage
/// (`--tensor-parallel-size` is the whole server's): for each degree `t` the heads divide,
/// each machine's GPUs from the fastest (bandwidth, then memory) cut into groups of `t`, what
/// is left over unused. Exact for machines of alike GPUs, where every cut is the same;
/// on a mixed machine it groups like with like, which keeps each group's slowest GPU fast.
pub(crate) fn partitions(nodes: &[Node], model: &Model, engine: Engine) -> Vec<(usize, Vec<TensorGroup>)> {
    if engine != Engine::Vllm {
        return Vec::new();
    }
    let machines = machines(nodes);
    let most = machines.iter().map(Vec::len).max().unwrap_or(0);
    (2..=most)
        .filter(|&t| degree_refused(model, engine, t as u64).is_none())
        .map(|t| {
            let mut groups = Vec::new();
            for gpus in &machines {
                let mut fastest = gpus.clone();
                fastest.sort_by(|&a, &b| {
                    nodes[b].bandwidth.total_cmp(&nodes[a].bandwidth).then(nodes[b].memory.cmp(&nodes[a].memory))
                });
                for chunk in fastest.chunks_exact(t) {
                    let mut members = chunk.to_vec();
                    members.sort_unstable();
                    groups.push(TensorGroup { members });
                }
            }
            (t, groups)
        })
        .filter(|(_, groups)| !groups.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`groups`] by its rule as written: every subset of a machine's GPUs, kept when its
    /// count is allowed and each GPU in it follows every GPU alike before it.
    fn groups_by_every_subset(nodes: &[Node], model: &Model, engine: Engine) -> Vec<TensorGroup> {
        let mut out = Vec::new();
        for gpus in machines(nodes) {
            for set in 1u32..(1 << gpus.len()) {
                let d = set.count_ones();
                let has = |i: usize| set & (1 << i) != 0;
                let canonical = (0..gpus.len())
                    .filter(|&i| has(i))
                    .all(|i| (0..i).all(|j| has(j) || !alike(&nodes[gpus[i]], &nodes[gpus[j]])));
                if d >= 2 && degree_refused(model, engine, u64::from(d)).is_none() && canonical {
                    out.push(TensorGroup { members: (0..gpus.len()).filter(|&i| has(i)).map(|i| gpus[i]).collect() });
                }
            }
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
        /// Machines of mixed GPUs (a reserve makes a GPU unlike its model's others; RAM
        /// beside a machine's GPUs makes each alike to none), two engines.
        #[test]
        fn groups_by_classes_are_those_of_every_subset(
            machines in proptest::collection::vec(
                (proptest::collection::vec((0usize..3, proptest::bool::ANY), 1..=9), proptest::bool::ANY), 1..=2),
            vllm in proptest::bool::ANY,
        ) {
            let devices = ["rtx-3090", "rtx-4090", "rtx-3060-12gb"];
            let machines: Vec<String> = machines.iter().enumerate().map(|(m, (gpus, ram))| {
                let gpus: Vec<String> = gpus.iter().map(|&(d, reserve)| {
                    let reserve = if reserve { r#", "reserve": "1 GiB""# } else { "" };
                    format!(r#"{{"device": "{}"{reserve}}}"#, devices[d])
                }).collect();
                let host = if *ram { r#", "host": {"memory": "64 GiB", "bandwidth": "60 GB/s"}"# } else { "" };
                format!(r#"{{"name": "box{m}", "gpus": [{}]{host}}}"#, gpus.join(", "))
            }).collect();
            let engine = if vllm { "vllm" } else { "llama.cpp" };
            let json = format!(
                r#"{{"model": {{"preset": "qwen3-32b", "weights": "q4_k_m"}}, "engine": "{engine}", "nodes": [{}]}}"#,
                machines.join(", ")
            );
            let problem = crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem;
            let (nodes, model, engine) = (&problem.nodes, &problem.model, problem.workload.engine);
            proptest::prop_assert_eq!(groups(nodes, model, engine), groups_by_every_subset(nodes, model, engine));
        }
    }

    #[test]
    fn butterfly_rounds_follow_llama_cpp() {
        // 2 → one exchange; 4 → two; 3 → fold one in, one exchange, copy back.
        assert_eq!(all_reduce_rounds(2), 1.0);
        assert_eq!(all_reduce_rounds(4), 2.0);
        assert_eq!(all_reduce_rounds(8), 3.0);
        assert_eq!(all_reduce_rounds(3), 3.0);
        assert_eq!(all_reduce_rounds(6), 4.0);
    }

    #[test]
    fn vllm_reduces_in_one_kernel_where_its_gpus_reach_each_other() {
        let nvlink = crate::presets::GpuLinkPreset::find("nvlink4").unwrap();
        let pcie = crate::presets::GpuLinkPreset::find("pcie4-x16-p2p").unwrap();
        let consumer = crate::presets::GpuLinkPreset::DEFAULT;
        let of = |engine, d, l: &crate::presets::GpuLinkPreset| AllReduce::of(engine, d, l.link(), l.peer());
        // Llama 3.1 70B's hidden state, one token: 8,192 f32 values.
        let hidden = 8192.0 * 4.0;
        let nv8 = of(Engine::Vllm, 8, nvlink).per_layer_s(1.0, hidden);
        // Two all-reduces a layer, each about the measured 9 µs: not 3 rounds of a 30 µs hop.
        assert!((nv8 / 2.0 - CUSTOM_ALL_REDUCE_S) < 1e-6, "{nv8}");
        assert!(of(Engine::LlamaCpp, 8, nvlink).per_layer_s(1.0, hidden) > 6.0 * 30e-6);
        // Two PCIe peers take the kernel; four fall back to NCCL; no peer access, always.
        assert_eq!(of(Engine::Vllm, 2, pcie).fixed_s, CUSTOM_ALL_REDUCE_S);
        assert_eq!(of(Engine::Vllm, 4, pcie).fixed_s, 3.0 * NCCL_HOP_S);
        assert_eq!(of(Engine::Vllm, 2, consumer).fixed_s, NCCL_HOP_S);
    }

    /// The published small-message NCCL all-reduces the hop is taken from, each within 10%:
    /// (GPUs, link, message bytes, µs).
    #[test]
    fn nccl_follows_published_small_all_reduces() {
        let published = [
            (4, "pcie3-x16-p2p", 4096.0, 19.4), // 4× V100 behind a PLX switch, sglang-V100 PR #2
            (4, "pcie3-x16-p2p", 32768.0, 24.2),
            (8, "pcie4-x16", 8.0, 42.14),       // 8× RTX 4090, NCCL #1530
            (8, "pcie5-x16-p2p", 4096.0, 45.0), // 8× RTX 6000D, sglang #32479
        ];
        for (d, name, bytes, us) in published {
            let link = crate::presets::GpuLinkPreset::find(name).unwrap();
            let nccl = AllReduce::of(Engine::Vllm, d, link.link(), crate::problem::Peer::None);
            // One all-reduce of `bytes` of bf16: per_layer_s takes f32 bytes and prices two.
            let predicted = nccl.per_layer_s(1.0, bytes * 2.0) / 2.0 * 1e6;
            assert!((predicted / us - 1.0).abs() < 0.10, "{d} GPUs, {bytes} bytes: {predicted:.1} µs, published {us}");
        }
    }
}
