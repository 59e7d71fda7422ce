//! The engine's buffers of a stage: by its role in the pipeline, per layer it holds, and the
//! caches of other layers it receives (Gemma 3n's shared KV across a cut).

use super::{CostModel, saturate};
use crate::engine::Buffers;

impl CostModel {
    /// The engine's buffers of stage `[start, end)`: by its role in the pipeline, and the
    /// caches of other layers it receives (`tiered`: on the GPU of a machine with system RAM).
    #[inline]
    pub(super) fn stage_buffers(&self, start: usize, end: usize, tiered: bool) -> u64 {
        self.buffers_of(&self.buffers, start, end, &|l| self.layers.layer_kv(l), tiered)
    }

    /// `buffers` for stage `[start, end)`, with layer `l`'s cache `layer_kv(l)` bytes.
    #[inline]
    pub(super) fn buffers_of(
        &self,
        buffers: &Buffers,
        start: usize,
        end: usize,
        layer_kv: &dyn Fn(usize) -> u64,
        tiered: bool,
    ) -> u64 {
        let own = buffers.of_stage(start == 0, end == self.layers(), (end - start) as u64);
        own.saturating_add(self.shared_kv_charge(start, end, layer_kv, tiered))
    }

    /// What stage `[start, end)` is charged for caches of layers outside it, with layer `l`'s
    /// cache `layer_kv(l)` bytes. llama.cpp's scheduler copies a cache another device holds
    /// to the device whose layers read it, for each layer that reads it (each reads its own
    /// view), once per pipeline copy (Gemma 3n's stages past layer 19; `GGML_SCHED_DEBUG`).
    /// Charged: the most any stage `[s, end)` within this one receives beyond the layers `[start, s)` it leaves out, so that a stage that fits still fits without a layer
    /// at either end (which the searches rely on). That is the stage's own copies unless
    /// they outweigh the layers between its start and their source. On a machine with
    /// system RAM (`tiered`) a left-out layer's FFN may have been in RAM, so only its
    /// attention and cache count as freed on the GPU.
    pub(super) fn shared_kv_charge(
        &self,
        start: usize,
        end: usize,
        layer_kv: &dyn Fn(usize) -> u64,
        tiered: bool,
    ) -> u64 {
        // A first stage holds every source its readers need (sources come before readers).
        if self.shared_kv.is_empty() || start == 0 {
            return 0;
        }
        let copies = u128::from(self.rules.shared_cache_copies);
        let received = |from: usize| -> u128 {
            self.shared_kv
                .iter()
                .filter(|s| s.layer < from)
                .map(|s| copies * s.readers_in(from, end) * u128::from(layer_kv(s.layer)))
                .sum()
        };
        let mut most = received(start);
        for source in self.shared_kv.iter().filter(|s| (start..end).contains(&s.layer)) {
            let from = source.layer + 1;
            let left = self.layers.held(start, from);
            let mut weights = left.weights;
            if tiered {
                weights -= left.ffn_weights;
            }
            let left_out = weights + (start..from).map(|l| u128::from(layer_kv(l))).sum::<u128>();
            most = most.max(received(from).saturating_sub(left_out));
        }
        saturate(most)
    }
}

/// A layer whose KV cache later layers read instead of their own.
#[derive(Clone, Debug)]
pub(super) struct SharedKv {
    layer: usize,
    /// Per layer boundary, how many of its readers come before it.
    readers: Vec<u32>,
}

impl SharedKv {
    /// The sources of `kv_from` (per layer, the layer whose cache it reads) in a model of `n`
    /// layers; a source not before its reader is ignored (no file says so; llama.cpp only
    /// reads back).
    pub(super) fn of(kv_from: &[Option<u64>], n: usize) -> Vec<SharedKv> {
        let source = |i: usize| -> Option<usize> {
            let j = usize::try_from(kv_from.get(i).copied().flatten()?).ok()?;
            (j < i).then_some(j)
        };
        let mut layers: Vec<usize> = (0..n).filter_map(source).collect();
        layers.sort_unstable();
        layers.dedup();
        layers
            .into_iter()
            .map(|layer| {
                let mut readers = vec![0u32; n + 1];
                for i in 0..n {
                    readers[i + 1] = readers[i] + u32::from(source(i) == Some(layer));
                }
                SharedKv { layer, readers }
            })
            .collect()
    }

    /// How many layers in `[start, end)` read this cache.
    fn readers_in(&self, start: usize, end: usize) -> u128 {
        u128::from(self.readers[end] - self.readers[start])
    }
}
