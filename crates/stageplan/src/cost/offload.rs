//! A machine with a GPU and system RAM: which of a stage's tensors stay in host RAM.
//!
//! llama.cpp places tensors by class. `-ngl k` keeps the *last* `k` blocks (and the output
//! head) on the GPU and the rest, whole with their KV cache, in host RAM where the CPU runs
//! them; `--n-cpu-moe N` moves the routed experts of the *first* `N` blocks to host RAM and
//! leaves their attention, shared experts and router on the GPU; the same holds for a dense
//! FFN with `-ot blk\.i\.ffn_(up|down|gate)\.=CPU`. The token embedding is always in host RAM
//! (`docs/llama-cpp-placement.md`, from llama.cpp 0c1e570's source). So a stage `[s, e)` on
//! a machine with a host tier is kept as
//!
//! `[s, s + host_layers)` whole in host RAM · `[…, + host_ffn)` attention on the GPU, FFN in
//! host RAM · the rest on the GPU,
//!
//! which is exactly what `-ngl` and `--n-cpu-moe` (or `-ot`) express. For each stage the
//! planner takes the fastest such placement within both memories: every `host_layers` from
//! 0 to the stage's layers, each with the fewest FFN moves that make the GPU's part fit
//! (found by binary search on prefix sums, so `O(n log n)` per stage, memoised per node).
//! Moving more FFN than the GPU needs never helps while host RAM is no faster than the
//! GPU's memory.
//!
//! A stage's memory and time under a placement are `cost/stage.rs`'s. The host is a CPU
//! planned by the measured rule ([`crate::calibration::measured`]): its products at each
//! type's [`PRIOR_RATES`](crate::calibration::measured::PRIOR_RATES) per thread,
//! [`cpu_per_layer_s`](crate::calibration::measured::cpu_per_layer_s) a layer, and the CPU
//! backend's fitted fraction of the RAM's peak bandwidth.
//!
//! A machine without system RAM of its own has one placement, [`Offload::NONE`]: the stage
//! whole on its device.

use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use super::CostModel;
use crate::engine::HostRam;
use crate::problem::Placement;

/// A prediction's typical error where a stage runs part of itself from host RAM: over the 27
/// published runs of `tests/calibration/offload.csv` (seven machines) the median |error| is
/// 9.1% and the 90th percentile 20.5%, one machine's runs all off together by up to 20%; so
/// 20%, until more published runs narrow it.
pub const HOST_TIER_ERROR: f64 = 0.20;

/// Models with more layers than this are not memoised (the table is `L²` entries of 16
/// bytes, 4 MiB at this size); their stages are searched on each ask, which only hostile
/// inputs reach.
const MEMO_LAYERS: usize = 512;

/// How a machine with a host tier chooses its placement.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum OffloadRule {
    /// The fastest placement that fits.
    #[default]
    Fastest,
    /// Whole layers only (`-ngl`): the fewest layers in host RAM that make the GPU fit.
    Layers,
    /// llama.cpp's `--fit` on one GPU (`common/fit.cpp`, `docs/llama-cpp-placement.md` §3):
    /// the GPU filled to its memory less [`FIT_MARGIN`]; a dense model's fewest whole host
    /// layers (it moves no dense FFN alone); an MoE model's experts moved to host RAM first (the fewest layers' worth; `--fit`
    /// takes the high-index layers, which costs the same), and only when all experts there
    /// do not make it fit, whole layers too. Its last partial layer (part of one layer's FFN
    /// left on the GPU) is not modelled: a layer's FFN moves whole.
    LlamaFit,
}

impl OffloadRule {
    /// How machines with system RAM place tensors under `policy`: `layer-offload` and
    /// `llama-fit` by their rules, every other policy the fastest way.
    pub fn of(policy: crate::scenario::Policy) -> OffloadRule {
        match policy {
            crate::scenario::Policy::LayerOffload => OffloadRule::Layers,
            crate::scenario::Policy::LlamaFit => OffloadRule::LlamaFit,
            _ => OffloadRule::Fastest,
        }
    }
}

/// The memory `--fit` leaves free on each GPU (`--fit-target`, default 1024 MiB).
pub const FIT_MARGIN: i64 = 1 << 30;

/// Where a stage on a machine with a host tier keeps its tensors: its first `host_layers`
/// layers whole in host RAM (weights and KV cache), `host_ffn` layers' FFN (routed experts,
/// or a dense layer's FFN matrices) in host RAM with their attention on the GPU, the rest on
/// the GPU. The FFN layers follow the host layers (`--n-cpu-moe`'s order) or, with
/// `ffn_last`, end the stage, so that a stage handing its output to another machine leaves
/// from the CPU and saves a change of tier. Whole layers in host RAM are llama.cpp's `-ngl`:
/// the model's first layers, on the machine running llama-server, so only a first stage
/// has them.
///
/// The output head of a last stage stays on the GPU unless `head_on_host` (with every layer
/// in host RAM: `-ngl 0`; `-ngl 1` keeps only the head on the GPU).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Offload {
    pub host_layers: usize,
    pub host_ffn: usize,
    pub ffn_last: bool,
    pub head_on_host: bool,
}

impl Offload {
    /// Everything on the device: the only placement of a machine without system RAM.
    pub const NONE: Offload = Offload { host_layers: 0, host_ffn: 0, ffn_last: false, head_on_host: false };

    /// `[start, end)` of the layers whole in host RAM, for a stage `[start, end)`.
    pub fn host_range(&self, start: usize, end: usize) -> (usize, usize) {
        let _ = end;
        (start, start + self.host_layers)
    }

    /// `[start, end)` of the layers whose FFN is in host RAM.
    pub fn ffn_range(&self, start: usize, end: usize) -> (usize, usize) {
        if self.ffn_last {
            (end - self.host_ffn, end)
        } else {
            (start + self.host_layers, start + self.host_layers + self.host_ffn)
        }
    }

    /// Two flags and two counts below 2^15 ([`MAX_LAYERS`](crate::limits::MAX_LAYERS) is
    /// 10,000) in one memo cell.
    fn pack(self) -> u32 {
        (u32::from(self.ffn_last) << 31)
            | (u32::from(self.head_on_host) << 30)
            | ((self.host_layers as u32) << 15)
            | self.host_ffn as u32
    }

    fn unpack(packed: u32) -> Offload {
        Offload {
            host_layers: ((packed >> 15) & 0x7FFF) as usize,
            host_ffn: (packed & 0x7FFF) as usize,
            ffn_last: packed >> 31 == 1,
            head_on_host: (packed >> 30) & 1 == 1,
        }
    }
}

/// Memo cells: not yet searched, and searched with no placement that fits.
const UNKNOWN: u32 = u32::MAX;
const NO_FIT: u32 = u32::MAX - 1;

/// The memo of one tiered node: the best [`Offload`] per stage `[s, e)` and its decode
/// step's time, filled on demand. Nodes priced alike share one
/// ([`CostModel::fresh_memos`]): alike GPUs of a machine, each with its share of the RAM.
#[derive(Clone, Debug, Default)]
pub(crate) struct Memo(Rc<OnceCell<Vec<MemoCell>>>);

/// A stage's packed [`Offload`] (or [`UNKNOWN`], [`NO_FIT`]) and its decode step's time.
type MemoCell = Cell<(u32, f64)>;

impl Memo {
    fn cell(&self, layers: usize, s: usize, e: usize) -> Option<&MemoCell> {
        if layers > MEMO_LAYERS {
            return None;
        }
        let table = self.0.get_or_init(|| vec![Cell::new((UNKNOWN, 0.0)); (layers + 1) * (layers + 1)]);
        table.get(s * (layers + 1) + e)
    }
}

impl CostModel {
    /// The placement of `[start, end)` on `node`: on a machine with system RAM the fastest
    /// that fits its device and its RAM (or the manual stage's); on one without,
    /// [`Offload::NONE`] when its memory holds the stage. `None`: nothing fits.
    #[inline]
    pub(crate) fn placement(&self, node: usize, start: usize, end: usize) -> Option<Offload> {
        match self.nodes[node].host {
            Some(_) => self.placed(node, start, end).map(|(o, _)| o),
            None => {
                let held = self.layers.held(start, end);
                let kv = self.nodes[node].device_kv(held.kv);
                self.device_holds(node, start, end, held.weights + kv, 0).then_some(Offload::NONE)
            }
        }
    }

    /// Whether `node`'s device holds stage `[start, end)` whole, with `weights_and_kv` bytes
    /// of its layers and `grown` more of the engine's buffers: the one placement of a
    /// machine without system RAM.
    #[inline]
    fn device_holds(&self, node: usize, start: usize, end: usize, weights_and_kv: u128, grown: i128) -> bool {
        let held =
            i128::try_from(weights_and_kv).unwrap_or(i128::MAX) + self.device_extra(node, start, end, false) + grown;
        held <= i128::from(self.nodes[node].device_capacity)
    }

    /// The fastest placement of `[start, end)` on `node` within its GPU and host RAM, or
    /// the one a manual stage gives (even where it does not fit, to show what was asked);
    /// `None` when none fits or the node has no host tier.
    pub fn offload(&self, node: usize, start: usize, end: usize) -> Option<Offload> {
        self.nodes[node].host?;
        self.placed(node, start, end).map(|(o, _)| o).or_else(|| self.fixed_at(node, start, end))
    }

    /// The placement a manual stage fixes for `[start, end)` on `node`.
    fn fixed_at(&self, node: usize, start: usize, end: usize) -> Option<Offload> {
        self.fixed.iter().find(|(p, _)| *p == Placement::new(node, start, end)).map(|&(_, o)| o)
    }

    /// The placement a stage is costed and shown with: its placement, else (nothing fits)
    /// the manual stage's own, else the stage whole on the device.
    pub(super) fn shown(&self, node: usize, start: usize, end: usize) -> Offload {
        self.placement(node, start, end).or_else(|| self.fixed_at(node, start, end)).unwrap_or(Offload::NONE)
    }

    /// [`CostModel::offload`] with its decode step's time (without the hop), memoised.
    pub(super) fn placed(&self, node: usize, start: usize, end: usize) -> Option<(Offload, f64)> {
        let cost = &self.nodes[node];
        cost.host?;
        let timed = |o: Offload| (o, self.decode_s(node, start, end, o));
        if let Some(fixed) = self.fixed_at(node, start, end) {
            return self.holds(node, start, end, fixed).then(|| timed(fixed));
        }
        let memo = cost.memo.cell(self.layers(), start, end);
        if let Some(cell) = memo {
            match cell.get() {
                (UNKNOWN, _) => {}
                (NO_FIT, _) => return None,
                (packed, time) => return Some((Offload::unpack(packed), time)),
            }
        }
        let found = self.search_offload(node, start, end, &|a, b| self.layers.held(a, b).kv, 0).map(timed);
        if let Some(cell) = memo {
            cell.set(found.map_or((NO_FIT, 0.0), |(o, t)| (o.pack(), t)));
        }
        found
    }

    /// The fastest placement whose memories hold the stage with KV cache `kv(a, b)` for
    /// layers `[a, b)` and `grown` more bytes of the device's buffers.
    pub(super) fn search_offload(
        &self,
        node: usize,
        start: usize,
        end: usize,
        kv: &dyn Fn(usize, usize) -> u128,
        grown: i128,
    ) -> Option<Offload> {
        let cost = &self.nodes[node];
        let device_held = |r0: usize, kv_from: usize, head_on_host: bool| {
            i128::try_from(self.layers.held(r0, end).weights + kv(kv_from, end)).unwrap_or(i128::MAX)
                + self.device_extra(node, start, end, head_on_host)
                + grown
        };
        let Some(host) = cost.host else {
            // One memory: the stage whole on the device, or nowhere.
            let weights_and_kv = self.layers.held(start, end).weights + cost.device_kv(kv(start, end));
            return self.device_holds(node, start, end, weights_and_kv, grown).then_some(Offload::NONE);
        };
        let n = end - start;
        let rule = self.rule;
        // vLLM offloads whole layers' weights on every rank and streams them (below).
        let streams = self.rules.host_ram == HostRam::Streamed;
        let device_capacity = match rule {
            OffloadRule::LlamaFit => i128::from(cost.device_capacity) - i128::from(FIT_MARGIN),
            _ => i128::from(cost.device_capacity),
        };
        // `--fit` moves a layer's FFN alone only in an MoE model (`fit.cpp`'s step 4); a dense
        // model's layers go to RAM whole, as the `llama-fit-params` engine test shows.
        let whole_layers_only = rule == OffloadRule::Layers || (rule == OffloadRule::LlamaFit && !self.layers.is_moe());
        let ffn_at = |i: usize| self.layers.held_prefix(i).ffn_weights;
        let consider = |host_layers: usize, ffn_last: bool, head_on_host: bool| -> Option<(f64, Offload)> {
            // The layers whose attention stays on the GPU.
            let (r0, r1) = (start + host_layers, end);
            // A layer's KV cache stays with it in llama.cpp; vLLM keeps every KV cache on the GPU.
            let (kv_from, kv_host) = if streams { (start, 0) } else { (r0, kv(start, r0)) };
            let need = device_held(r0, kv_from, head_on_host) - device_capacity;
            let host_ffn = if need <= 0 {
                0
            } else if whole_layers_only || streams {
                return None;
            } else {
                // The fewest FFN moves that free `need` bytes, from `r0` on (or from `r1`
                // back for `ffn_last`): prefix sums only grow.
                let need = u128::try_from(need).unwrap_or(u128::MAX);
                if ffn_last {
                    let limit = ffn_at(r1).checked_sub(need)?;
                    // The last boundary `j` with `prefix[j] <= limit` leaves `[j, r1)` to move.
                    let j = partition_point(r0, r1 + 1, |i| ffn_at(i) <= limit).checked_sub(1)?;
                    r1 - (r0 + j)
                } else {
                    let k = partition_point(r0, r1 + 1, |i| ffn_at(i) < ffn_at(r0).saturating_add(need));
                    if k > r1 - r0 {
                        return None;
                    }
                    k
                }
            };
            if ffn_last && host_ffn == 0 {
                return None;
            }
            let offload = Offload { host_layers, host_ffn, ffn_last, head_on_host };
            let (f0, f1) = offload.ffn_range(start, end);
            let host_held = i128::try_from(self.layers.held(start, r0).weights + kv_host).unwrap_or(i128::MAX)
                + i128::try_from(self.layers.held(f0, f1).ffn_weights).unwrap_or(i128::MAX)
                + i128::from(self.host_extra(node, start, end, offload));
            if host_held > i128::from(host.capacity) {
                return None;
            }
            Some((self.decode_s(node, start, end, offload), offload))
        };
        let keep = |best: &mut Option<(f64, Offload)>, found: Option<(f64, Offload)>| {
            if let Some((t, o)) = found
                && best.is_none_or(|(b, _)| t < b)
            {
                *best = Some((t, o));
            }
        };
        // Whole layers in host RAM only on a first stage (llama.cpp runs them on the machine
        // that runs llama-server, from the model's first layer on).
        let most_host_layers = if start == 0 || streams { n } else { 0 };
        let last = end == self.layers();
        if rule != OffloadRule::Fastest {
            // The fewest layers in host RAM that fit (for `--fit` on an MoE model, each with
            // the fewest expert moves, which at 0 layers is "experts first"), speed aside.
            let all_on_host = || if most_host_layers == n { consider(n, false, last) } else { None };
            return (0..=most_host_layers).find_map(|k| consider(k, false, false)).or_else(all_on_host).map(|(_, o)| o);
        }
        let mut best: Option<(f64, Offload)> = None;
        for host_layers in 0..=most_host_layers.min(n - 1) {
            // When nothing is faster in host RAM, more layers there with no FFN moved only
            // cost more: once that alone is no faster than the best, no larger count is
            // (except all of them, where the head moves too and a crossing goes).
            if host.monotone
                && let Some((b, _)) = best
                && self.decode_s(node, start, end, Offload { host_layers, ..Offload::NONE }) >= b
            {
                break;
            }
            keep(&mut best, consider(host_layers, false, false));
            // Ending the stage with its FFN layers saves a change of tier only where the
            // stage hands over to another machine; a last stage's head is on the GPU.
            if !last {
                keep(&mut best, consider(host_layers, true, false));
            }
        }
        if most_host_layers == n {
            // Every layer in host RAM: the head on the GPU (`-ngl 1`) or, on a last stage, there too.
            keep(&mut best, consider(n, false, false));
            if last {
                keep(&mut best, consider(n, false, true));
            }
        }
        best.map(|(_, o)| o)
    }

    /// Whether `node`'s memories hold `[start, end)` placed as `offload`.
    fn holds(&self, node: usize, start: usize, end: usize, offload: Offload) -> bool {
        let cost = &self.nodes[node];
        let (device, ram) = self.tier_parts(node, start, end, offload);
        // The capacities already leave out the reserve and the device's stage workspace.
        let device_held = i128::from(device.total()) - i128::from(device.reserve) - i128::from(self.buffers.stage);
        let ram_held = i128::from(ram.total()) - i128::from(ram.reserve);
        device_held <= i128::from(cost.device_capacity) && cost.host.is_none_or(|h| ram_held <= i128::from(h.capacity))
    }

    /// Whether nothing of any layer is faster on `node`'s host than on its GPU at the current
    /// step (see [`HostCost::monotone`](super::HostCost::monotone)).
    pub(super) fn host_is_slower(&self, node: usize) -> bool {
        let rates = &self.nodes[node];
        let Some(host) = rates.host.as_ref() else { return false };
        let slower = |gpu_read: f64, cpu_read: f64, flops: f64| {
            let gpu = (gpu_read * rates.inv_bandwidth).max(flops * rates.inv_decode_compute)
                + flops * rates.inv_further
                + rates.per_layer_s;
            let cpu = (cpu_read * host.inv_bandwidth).min(flops * host.inv_decode_compute) + host.per_layer_s;
            cpu >= gpu
        };
        (0..self.layers()).all(|l| {
            let layer = self.layers.step(l, l + 1);
            slower(rates.device_read(&layer), layer.read, layer.flops)
                && slower(layer.ffn_read, layer.ffn_read, layer.ffn_flops)
        })
    }
}

/// The first index `i` in `[lo, hi)` where `pred` fails, as an offset from `lo` (`hi − lo`
/// when it holds throughout); `pred` must hold on a prefix.
fn partition_point(lo: usize, hi: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut a, mut b) = (lo, hi);
    while a < b {
        let mid = a + (b - a) / 2;
        if pred(mid) { a = mid + 1 } else { b = mid }
    }
    a - lo
}

#[cfg(test)]
mod tests {
    use super::super::stage::SPLIT_LATENCY_S;
    use super::*;
    use crate::scenario::Scenario;

    /// Where one layer of a stage is kept, for brute force over every placement.
    #[derive(Copy, Clone, PartialEq, Debug)]
    enum Put {
        Gpu,
        FfnOnHost,
        Host,
    }

    /// A decode step's time of `[start, end)` on `node` with each layer put as `puts` says,
    /// or `None` when a memory overflows: written out from the rules in the module's doc,
    /// apart from [`CostModel::offload_time`] and the search.
    fn brute_time(
        c: &CostModel,
        node: usize,
        start: usize,
        end: usize,
        puts: &[Put],
        head_on_host: bool,
    ) -> Option<f64> {
        let rates = &c.nodes[node];
        let host = rates.host.unwrap();
        let (first, last) = (start == 0, end == c.layers());
        let head_gpu = last && !head_on_host;
        let (mut gpu_held, mut host_held) = (0u128, 0u128);
        let (mut gpu_read, mut gpu_flops, mut host_read, mut host_flops) = (0.0, 0.0, 0.0, 0.0);
        let (mut gpu_layers, mut host_parts) = (0usize, 0usize);
        // The path of places: false = host.
        let mut path: Vec<bool> = Vec::new();
        if first {
            path.push(false);
            host_held += u128::from(c.embed.held);
            host_read += c.embed.read;
        }
        for (i, &put) in puts.iter().enumerate() {
            let l = start + i;
            let (held, step) = (c.layers.held(l, l + 1), c.layers.step(l, l + 1));
            let (w, kv, fw) = (held.weights, held.kv, held.ffn_weights);
            let (r, f) = (step.read, step.flops);
            let (fr, ff) = (step.ffn_read, step.ffn_flops);
            // The GPU's reads of the layer's attention include its cache read again.
            let gpu_r = rates.device_read(&step);
            match put {
                Put::Gpu => {
                    gpu_held += w + kv;
                    (gpu_read, gpu_flops) = (gpu_read + gpu_r, gpu_flops + f);
                    gpu_layers += 1;
                    path.push(true);
                }
                Put::FfnOnHost => {
                    gpu_held += w - fw + kv;
                    host_held += fw;
                    (gpu_read, gpu_flops) = (gpu_read + gpu_r - fr, gpu_flops + f - ff);
                    (host_read, host_flops) = (host_read + fr, host_flops + ff);
                    gpu_layers += 1;
                    host_parts += 1;
                    path.extend([true, false]);
                }
                Put::Host => {
                    host_held += w + kv;
                    (host_read, host_flops) = (host_read + r, host_flops + f);
                    host_parts += 1;
                    path.push(false);
                }
            }
        }
        if last {
            if head_gpu {
                gpu_held += u128::from(c.head.held);
                (gpu_read, gpu_flops) = (gpu_read + c.head.read, gpu_flops + c.head.flops);
            } else {
                host_held += u128::from(c.head.held - if first { c.shared_single } else { 0 });
                (host_read, host_flops) = (host_read + c.head.read, host_flops + c.head.flops);
            }
            path.push(head_gpu);
        }
        let gpu_buffers = c.stage_buffers(start, end, true);
        if first {
            host_held += u128::from(c.buffers.first);
        }
        if host_parts > 0 {
            host_held += u128::from(c.buffers.stage);
        }
        let gpu_held = i128::try_from(gpu_held).unwrap() + i128::from(gpu_buffers) - i128::from(c.buffers.stage);
        let fit_gpu = gpu_held <= i128::from(rates.device_capacity);
        let fit_host = i128::try_from(host_held).unwrap() <= i128::from(host.capacity);
        if !(fit_gpu && fit_host) {
            return None;
        }
        let splits = path.windows(2).filter(|w| w[0] != w[1]).count();
        let on_gpu = gpu_layers > 0 || head_gpu;
        let gpu_s = if on_gpu {
            (gpu_read * rates.inv_bandwidth).max(gpu_flops * rates.inv_decode_compute)
                + gpu_flops * rates.inv_further
                + gpu_layers as f64 * rates.per_layer_s
        } else {
            0.0
        };
        let host_s = (host_read * host.inv_bandwidth).max(host_flops * host.inv_decode_compute)
            + host_parts as f64 * host.per_layer_s;
        Some(gpu_s + host_s + splits as f64 * (SPLIT_LATENCY_S + c.step * c.token.activation_f32 * host.inv_link))
    }

    fn tiered(model: &str, gpu: &str, host: &str, context: u64) -> CostModel {
        let json = format!(
            r#"{{"model": {model}, "workload": {{"context": {context}}},
                "nodes": [{{"name": "desk", "memory": "{gpu}", "bandwidth": "500 GB/s", "compute": "30 TFLOPS", "backend": "cuda",
                            "host": {{"ram": "ddr5-6000-2ch", "memory": "{host}", "reserve": 0}}}}]}}"#
        );
        CostModel::new(&Scenario::from_json(&json).unwrap().problem().unwrap())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    /// For every stage of up to `longest` layers, the search's placement is the fastest of
    /// its family, and when the layers are alike (`uniform`) of every per-layer placement.
    fn check_search(c: &CostModel, longest: usize, uniform: bool) {
        let l = c.layers();
        for start in 0..l {
            for end in start + 1..=l.min(start + longest) {
                let n = end - start;
                let family = (0..=n)
                    .flat_map(|k1| (0..=n - k1).flat_map(move |k2| [(k1, k2, false), (k1, k2, true)]))
                    .filter(|&(k1, k2, ffn_last)| (start == 0 || k1 == 0) && !(ffn_last && (k2 == 0 || end == l)))
                    .flat_map(|(k1, k2, ffn_last)| [(k1, k2, ffn_last, false), (k1, k2, ffn_last, k1 == n && end == l)])
                    .filter_map(|(k1, k2, ffn_last, head_on_host)| {
                        let o = Offload { host_layers: k1, host_ffn: k2, ffn_last, head_on_host };
                        let ((h0, h1), (f0, f1)) = (o.host_range(start, end), o.ffn_range(start, end));
                        let mut puts = vec![Put::Gpu; n];
                        puts[h0 - start..h1 - start].fill(Put::Host);
                        puts[f0 - start..f1 - start].fill(Put::FfnOnHost);
                        let t = brute_time(c, 0, start, end, &puts, head_on_host);
                        assert_eq!(c.holds(0, start, end, o), t.is_some(), "{start}..{end} {o:?}: fits as written out");
                        let t = t?;
                        // The written-out rule and the cost model agree on every member.
                        assert!(close(t, c.offload_time(0, start, end, o).total()), "{start}..{end} {o:?}");
                        Some(t)
                    })
                    .fold(f64::INFINITY, f64::min);
                let mut all = f64::INFINITY;
                let mut best_puts = Vec::new();
                for code in 0..3usize.pow(n as u32) {
                    let puts: Vec<Put> = (0..n)
                        .map(|i| [Put::Gpu, Put::FfnOnHost, Put::Host][code / 3usize.pow(i as u32) % 3])
                        .collect();
                    // Whole layers in host RAM: a prefix of a first stage (llama.cpp's `-ngl`).
                    let hosted = puts.iter().take_while(|&&p| p == Put::Host).count();
                    if puts[hosted..].contains(&Put::Host) || (start > 0 && hosted > 0) {
                        continue;
                    }
                    let all_host = end == l && puts.iter().all(|&p| p == Put::Host);
                    if let Some(t) = [false, all_host]
                        .into_iter()
                        .filter_map(|head_on_host| brute_time(c, 0, start, end, &puts, head_on_host))
                        .reduce(f64::min)
                        && t < all
                    {
                        all = t;
                        best_puts = puts;
                    }
                }
                let found = c.offload(0, start, end);
                assert_eq!(found.is_some(), family.is_finite(), "{start}..{end}: fits as brute force says");
                assert_eq!(family.is_finite(), all.is_finite());
                if let Some(o) = found {
                    let t = c.offload_time(0, start, end, o).total();
                    assert!(close(t, family), "{start}..{end}: {o:?} {t} vs family {family}");
                    assert!(
                        !uniform || close(t, all) || t < all,
                        "{start}..{end}: {o:?} {t} vs every placement {all}: {best_puts:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_search_finds_the_fastest_placement_a_brute_force_does() {
        // Dense and MoE models, GPUs from too small for one layer to most of the model, host
        // RAM from tight to ample: stages of up to 6 layers against all 3^6 placements. In
        // `q8_0` every layer is alike; `q4_k_m` gives some layers a larger `ffn_down`, where
        // moving the larger FFNs wherever they are can beat any contiguous run (the family
        // llama.cpp's flags express), so there the check is against the family.
        let models = [
            (
                r#"{"preset": "llama-3.2-1b", "weights": "q8_0"}"#,
                true,
                ["0.3 GiB", "0.6 GiB", "1 GiB"],
                ["0.5 GiB", "2 GiB"],
            ),
            (
                r#"{"preset": "llama-3.2-1b", "weights": "q4_k_m"}"#,
                false,
                ["0.2 GiB", "0.4 GiB", "0.6 GiB"],
                ["0.3 GiB", "2 GiB"],
            ),
            (
                r#"{"preset": "mixtral-8x7b", "weights": "q8_0"}"#,
                true,
                ["4 GiB", "10 GiB", "30 GiB"],
                ["10 GiB", "60 GiB"],
            ),
            (
                r#"{"preset": "mixtral-8x7b", "weights": "q4_k_m"}"#,
                false,
                ["2 GiB", "5 GiB", "12 GiB"],
                ["6 GiB", "40 GiB"],
            ),
        ];
        for (model, uniform, gpus, hosts) in models {
            for gpu in gpus {
                for host in hosts {
                    for context in [512, 32768] {
                        check_search(&tiered(model, gpu, host, context), 6, uniform);
                    }
                }
            }
        }
    }
}
