//! A placed stage's memory and time: what its device and its machine's system RAM hold and
//! read for a placement ([`Offload`]), and the changes between them.
//!
//! **Time** of a decode step: each processor's roofline over the bytes it reads and the FLOPs
//! it does (the host's FFN reads only the experts a step touches), each one's per-layer cost
//! for the layers it runs a part of, and a sync plus an f32 hidden-state copy over the
//! device's link ([`SPLIT_LATENCY_S`]) at each change of processor along the token's path.
//! Without system RAM ([`Offload::NONE`]) that is the device's roofline and per-layer cost.
//!
//! **Prefill**: with prompt chunks of 32 tokens or more llama.cpp runs every matrix product on
//! the GPU and copies host-held weights over the link once per chunk (`op_offload`), so a
//! prompt token costs the stage's GPU roofline plus host-held bytes ÷ link ÷ chunk. Not
//! modelled: attention of host-held layers on the CPU during prefill, and chunks under 32.

use super::layers::Step;
use super::offload::Offload;
use super::{CostModel, MemoryParts, TimeParts, saturate};
use crate::engine::HostRam;

/// Seconds each change between GPU and CPU costs a decode step besides the copy: the
/// scheduler's split (a stream sync, the CPU team's wake-up and a graph launch).
pub const SPLIT_LATENCY_S: f64 = 30e-6;

/// What each processor does in one decode step of a placed stage.
#[derive(Copy, Clone, Debug, Default)]
struct Work {
    device_read: f64,
    device_flops: f64,
    host_read: f64,
    host_flops: f64,
    /// Layers the device runs (at least their attention), and parts the host runs (a whole
    /// layer, or a layer's FFN).
    device_layers: usize,
    host_parts: usize,
    /// Whether the device runs anything (a layer, or the head).
    on_device: bool,
    /// Changes between device and host along a token's path.
    splits: usize,
    /// Bytes the device reads over its link from pinned host RAM (vLLM's offload).
    streamed: f64,
}

impl CostModel {
    /// Whether the token embedding of a first stage on `node` sits in its system RAM: where
    /// the device does not keep it and the machine has RAM of its own to hold it.
    #[inline]
    fn embedding_on_host(&self, node: usize) -> bool {
        let cost = &self.nodes[node];
        !cost.keeps_embedding && cost.host.is_some()
    }

    /// Device bytes of a stage besides its layers: the embedding where the device keeps it,
    /// the head unless `head_on_host`, and the engine's buffers beyond every stage's own
    /// (which the capacity leaves out; so this may be negative).
    #[inline]
    pub(super) fn device_extra(&self, node: usize, start: usize, end: usize, head_on_host: bool) -> i128 {
        let tiered = self.nodes[node].host.is_some();
        i128::from(self.embed_head(self.nodes[node].keeps_embedding, start, end, !head_on_host))
            + i128::from(self.stage_buffers(start, end, tiered))
            - i128::from(self.buffers.stage)
    }

    /// The engine's buffers in host RAM: a first stage's host-side buffers (its inputs and
    /// logits, with llama-server; counted on the GPU too, to be safe), and a compute buffer
    /// of a stage's size when the CPU runs a part.
    fn host_workspace(&self, first: bool, last: bool, offload: Offload) -> u64 {
        let host = match (first, last) {
            (true, true) => self.buffers.first_single,
            (true, false) => self.buffers.first,
            (false, _) => 0,
        };
        let runs = offload.host_layers + offload.host_ffn > 0;
        host.saturating_add(if runs { self.buffers.stage } else { 0 })
    }

    /// Host bytes of a stage besides its layers: the token embedding where the host holds
    /// it, a head in host RAM, and the engine's host-side buffers.
    pub(super) fn host_extra(&self, node: usize, start: usize, end: usize, offload: Offload) -> u64 {
        let (first, last) = (start == 0, end == self.layers());
        self.embed_head(self.embedding_on_host(node), start, end, offload.head_on_host)
            .saturating_add(self.host_workspace(first, last, offload))
    }

    /// Bytes each memory holds for `[start, end)` placed as `offload`: the device's with the
    /// engine's buffers, as [`CostModel::memory`] counts them; the system RAM's (all 0 on a
    /// machine without it).
    pub fn tier_parts(&self, node: usize, start: usize, end: usize, offload: Offload) -> (MemoryParts, MemoryParts) {
        let cost = &self.nodes[node];
        let (h0, h1) = offload.host_range(start, end);
        let (f0, f1) = offload.ffn_range(start, end);
        let (first, last) = (start == 0, end == self.layers());
        let stage = self.layers.held(start, end);
        let hosted = self.layers.held(h0, h1);
        let ffn_host = self.layers.held(f0, f1).ffn_weights;
        let host_kv = if self.rules.host_ram == HostRam::Streamed { 0 } else { hosted.kv };
        let device = MemoryParts {
            weights: saturate(stage.weights - hosted.weights - ffn_host),
            kv: saturate(cost.device_kv(stage.kv - host_kv)),
            embed_head: self.embed_head(cost.keeps_embedding, start, end, !offload.head_on_host),
            workspace: self.stage_buffers(start, end, cost.host.is_some()),
            reserve: cost.reserve,
        };
        let Some(host) = cost.host else { return (device, MemoryParts::default()) };
        let ram = MemoryParts {
            weights: saturate(hosted.weights + ffn_host),
            kv: saturate(host_kv),
            embed_head: self.embed_head(self.embedding_on_host(node), start, end, offload.head_on_host),
            workspace: self.host_workspace(first, last, offload),
            reserve: host.reserve,
        };
        (device, ram)
    }

    /// What each processor reads and computes in a decode step of `[start, end)` on `node`
    /// placed as `offload`.
    #[inline]
    fn work(&self, node: usize, start: usize, end: usize, offload: Offload) -> Work {
        let n = end - start;
        let (h0, h1) = offload.host_range(start, end);
        let (f0, f1) = offload.ffn_range(start, end);
        let (first, last) = (start == 0, end == self.layers());
        let head_on_device = last && !offload.head_on_host;
        let stage = self.layers.step(start, end);
        let tiered = self.nodes[node].host.is_some();
        if !tiered || offload == Offload::NONE {
            // Nothing in system RAM: the device reads and computes the whole stage (the
            // general case below with empty host ranges, without reading them).
            return self.device_work(node, start, end, &stage);
        }
        let hosted = self.layers.step(h0, h1);
        let ffn = self.layers.step(f0, f1);
        if tiered && self.rules.host_ram == HostRam::Streamed {
            // vLLM (`--cpu-offload-gb`) keeps offloaded weights in pinned host RAM and the GPU
            // reads them over the link every forward pass; it runs everything itself.
            let mut work = Work {
                device_read: stage.read - hosted.read,
                device_flops: stage.flops,
                device_layers: n,
                on_device: true,
                streamed: self.layers.held(h0, h1).weights as f64,
                ..Work::default()
            };
            for (holds, extra) in [(first, &self.embed), (last, &self.head)] {
                if holds {
                    (work.device_read, work.device_flops) =
                        (work.device_read + extra.read, work.device_flops + extra.flops);
                }
            }
            return work;
        }
        let device = &self.nodes[node];
        let mut work = Work {
            device_read: device.device_read(&stage) - device.device_read(&hosted) - ffn.ffn_read,
            device_flops: stage.flops - hosted.flops - ffn.ffn_flops,
            host_read: hosted.read + ffn.ffn_read,
            host_flops: hosted.flops + ffn.ffn_flops,
            device_layers: n - offload.host_layers,
            host_parts: offload.host_layers + offload.host_ffn,
            on_device: n > offload.host_layers || head_on_device,
            splits: 0,
            streamed: 0.0,
        };
        let embedding_on_host = self.embedding_on_host(node);
        if first {
            if embedding_on_host {
                work.host_read += self.embed.read;
            } else {
                (work.device_read, work.device_flops) =
                    (work.device_read + self.embed.read, work.device_flops + self.embed.flops);
            }
        }
        if last {
            if head_on_device {
                work.device_read += self.head.read;
                work.device_flops += self.head.flops;
            } else {
                work.host_read += self.head.read;
                work.host_flops += self.head.flops;
            }
        }
        if tiered {
            let device_only = n - offload.host_layers - offload.host_ffn;
            work.splits = crossings(first && embedding_on_host, offload, device_only, last.then_some(head_on_device));
        }
        work
    }

    /// [`CostModel::decode_s`] of a stage all on its device ([`Offload::NONE`]): what the
    /// searches ask most, on machines without system RAM.
    #[inline(always)]
    pub(super) fn whole_on_device_s(&self, node: usize, start: usize, end: usize) -> f64 {
        self.decode_parts(node, &self.device_work(node, start, end, &self.layers.step(start, end))).total()
    }

    /// [`CostModel::work`] of a stage all on its device: its layers, the embedding where the
    /// device reads it, and the head.
    #[inline(always)]
    fn device_work(&self, node: usize, start: usize, end: usize, stage: &Step) -> Work {
        let (first, last) = (start == 0, end == self.layers());
        let mut work = Work {
            device_read: self.nodes[node].device_read(stage),
            device_flops: stage.flops,
            device_layers: end - start,
            on_device: true,
            ..Work::default()
        };
        let embedding_on_host = self.embedding_on_host(node);
        if first && !embedding_on_host {
            (work.device_read, work.device_flops) =
                (work.device_read + self.embed.read, work.device_flops + self.embed.flops);
        }
        if first && embedding_on_host {
            work.host_read += self.embed.read;
        }
        if last {
            work.device_read += self.head.read;
            work.device_flops += self.head.flops;
        }
        if self.nodes[node].host.is_some() {
            work.splits = crossings(first && embedding_on_host, Offload::NONE, end - start, last.then_some(true));
        }
        work
    }

    /// The decode step's time of `[start, end)` on `node` placed as `offload`, without the hop.
    #[inline]
    pub(super) fn decode_s(&self, node: usize, start: usize, end: usize, offload: Offload) -> f64 {
        self.decode_parts(node, &self.work(node, start, end, offload)).total()
    }

    /// A decode step's parts from its work, without the hop and prefill.
    #[inline(always)]
    fn decode_parts(&self, node: usize, work: &Work) -> TimeParts {
        let cost = &self.nodes[node];
        let device_layers = work.device_layers as f64 * cost.per_layer_s;
        let Some(host) = cost.host else {
            return TimeParts {
                memory_s: work.device_read * cost.inv_bandwidth,
                compute_s: work.device_flops * cost.inv_decode_compute,
                batch_s: work.device_flops * cost.inv_further,
                overhead_s: device_layers,
                all_reduce_s: cost
                    .all_reduce
                    .map_or(0.0, |a| work.device_layers as f64 * a.per_layer_s(self.step, self.token.activation_f32)),
                ..TimeParts::default()
            };
        };
        if self.rules.host_ram == HostRam::Streamed {
            return TimeParts {
                memory_s: work.device_read * cost.inv_bandwidth,
                compute_s: work.device_flops * cost.inv_decode_compute,
                batch_s: work.device_flops * cost.inv_further,
                overhead_s: device_layers,
                host_s: work.streamed * host.inv_link,
                ..TimeParts::default()
            };
        }
        TimeParts {
            memory_s: work.device_read * cost.inv_bandwidth,
            compute_s: work.device_flops * cost.inv_decode_compute,
            batch_s: work.device_flops * cost.inv_further,
            overhead_s: if work.on_device { device_layers } else { 0.0 },
            host_s: (work.host_read * host.inv_bandwidth).max(work.host_flops * host.inv_decode_compute)
                + work.host_parts as f64 * host.per_layer_s,
            split_s: work.splits as f64 * (SPLIT_LATENCY_S + self.step * self.token.activation_f32 * host.inv_link),
            ..TimeParts::default()
        }
    }

    /// Time parts of a decode step of `[start, end)` on `node` placed as `offload`, with its
    /// prefill per prompt token, without the hop to the next stage.
    pub(crate) fn offload_time(&self, node: usize, start: usize, end: usize, offload: Offload) -> TimeParts {
        let cost = &self.nodes[node];
        let work = self.work(node, start, end, offload);
        let decode = self.decode_parts(node, &work);
        // Prefill: every product on the device, host-held weights over the link once a chunk
        // (llama.cpp's `op_offload`; vLLM streams them alike), the per-layer cost and the
        // splits once a chunk.
        let (first, last) = (start == 0, end == self.layers());
        let stage = self.layers.step(start, end);
        let mut prefill_read = stage.prefill_read;
        let mut prefill_flops = stage.prefill_flops;
        for (holds, extra) in [(first, &self.embed), (last, &self.head)] {
            if holds {
                (prefill_read, prefill_flops) =
                    (prefill_read + extra.prefill_read, prefill_flops + extra.prefill_flops);
            }
        }
        let n = (end - start) as f64;
        let roofline = (prefill_read * cost.inv_bandwidth).max(prefill_flops * cost.inv_compute);
        let prefill_s = match cost.host {
            None => {
                // A group's all-reduces carry the whole chunk's hidden states.
                let all_reduce =
                    cost.all_reduce.map_or(0.0, |a| a.per_layer_s(self.prefill_chunk, self.token.activation_f32));
                roofline + n * (cost.per_layer_s + all_reduce) / self.prefill_chunk
            }
            Some(_) if self.rules.host_ram == HostRam::Streamed => {
                roofline + (decode.host_s + n * cost.per_layer_s) / self.prefill_chunk
            }
            Some(host) => {
                let (h0, h1) = offload.host_range(start, end);
                let (f0, f1) = offload.ffn_range(start, end);
                let streamed = (self.layers.held(h0, h1).weights + self.layers.held(f0, f1).ffn_weights) as f64;
                roofline
                    + streamed * host.inv_link / self.prefill_chunk
                    + (n * cost.per_layer_s + work.splits as f64 * SPLIT_LATENCY_S) / self.prefill_chunk
            }
        };
        TimeParts { prefill_s, ..decode }
    }
}

/// Changes between GPU and host along a token's path through a tiered stage: the embedding
/// (host) when the stage is first and its embedding is in host RAM, the host-held layers,
/// each FFN-offloaded layer (GPU, then host), the GPU's layers, and the head (`Some(on GPU)`)
/// when the stage is last.
fn crossings(first: bool, offload: Offload, gpu_layers: usize, head: Option<bool>) -> usize {
    let ffn = offload.host_ffn;
    // The path as runs of one place, `(on the GPU, present)`: an FFN-offloaded block starts
    // with attention on the GPU and ends with an FFN on the host, alternating inside.
    let hosted = offload.host_layers > 0;
    let runs: [(bool, bool); 5] = if offload.ffn_last {
        [(false, first), (false, hosted), (true, gpu_layers > 0), (true, ffn > 0), (false, ffn > 0)]
    } else {
        [(false, first), (false, hosted), (true, ffn > 0), (false, ffn > 0), (true, gpu_layers > 0)]
    };
    let head_run = [(head.unwrap_or(true), head.is_some())];
    let runs = runs.iter().chain(&head_run);
    let mut count = 2 * ffn.saturating_sub(1);
    // A stage that starts mid-model receives its input where its first part runs.
    let mut at: Option<bool> = None;
    for &(gpu, present) in runs {
        if present {
            count += usize::from(at.is_some_and(|p| p != gpu));
            at = Some(gpu);
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_count_each_change_of_tier() {
        let o = |host_layers, host_ffn| Offload { host_layers, host_ffn, ..Offload::default() };
        // All on the GPU: the embedding (host) hands over once.
        assert_eq!(crossings(true, o(0, 0), 4, Some(true)), 1);
        // A middle stage all on the GPU: none.
        assert_eq!(crossings(false, o(0, 0), 4, None), 0);
        // Two host layers first, then GPU: embedding and the host layers share the CPU.
        assert_eq!(crossings(true, o(2, 0), 2, Some(true)), 1);
        // Three FFN-offloaded layers then one GPU layer: H | G H G H G H | G.
        assert_eq!(crossings(true, o(0, 3), 1, Some(true)), 7);
        // Everything in host RAM, head too: no change; the head alone on the GPU: one.
        assert_eq!(crossings(true, o(4, 0), 0, Some(false)), 0);
        assert_eq!(crossings(true, o(4, 0), 0, Some(true)), 1);
        // The last layer's FFN in host RAM and the head on the GPU: G H G.
        assert_eq!(crossings(false, o(0, 1), 0, Some(true)), 2);
        // A middle stage ending with two FFN-offloaded layers and a host layer: G G | G H G H | H,
        // leaving from the host; in llama.cpp's order H | G H G H | G G.
        let last = Offload { host_layers: 0, host_ffn: 2, ffn_last: true, head_on_host: false };
        assert_eq!(crossings(false, last, 2, None), 3);
        assert_eq!(crossings(false, Offload { ffn_last: false, ..last }, 2, None), 4);
    }
}
