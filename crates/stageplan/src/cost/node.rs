//! A machine reduced to what the cost model needs: its device's rates and memory, and its
//! system RAM and CPU when the scenario gives them — one value per machine, so a subset of
//! machines is a subset of values.

use super::layers::Step;
use super::offload::Memo;
use super::tensor::AllReduce;
use crate::calibration::{FITTED, Measured, measured};
use crate::device::{Backend, DeviceKind};
use crate::engine::EngineRules;
use crate::model::Model;
use crate::problem::{Host, Node};

/// The fraction of the CPU backend's fitted bandwidth a host tier reaches beside a GPU: the
/// value that minimises the median |error| over the published runs of one GPU with its
/// system RAM in `tests/calibration/offload.csv` (24 llama.cpp runs on six machines: `-ngl`
/// sweeps, experts in RAM by `-ot` and `--n-cpu-moe`, CUDA and ROCm, each at the depth it
/// measured), where each run alone would want 0.39–1.07 (0.67 at the median): machines
/// differ more than any one term can say. It still minimises the median with three later
/// runs of an RTX 5080 beside DDR5-4800, which want about 0.8. It was 0.83 when fitted to 9 runs priced at their
/// full context (issue #34); pricing decode at the measured depth (issue #45) made those
/// runs' host parts look faster than they are.
pub(crate) const HOST_TIER_BANDWIDTH: f64 = 0.685;

/// FLOPs per weight of a matrix-vector product (a multiply and an add).
pub(super) const FLOPS_PER_WEIGHT: f64 = 2.0;

/// The fraction of a device's compute at which llama.cpp multiplies the further sequences
/// of a decode step (its kernels for a few columns, `mul_mv_ext` on Metal, MMVQ on CUDA),
/// each sequence's products added to the step: from llama-batched-bench's published tables
/// (`tests/calibration/batched.csv`), Qwen2.5 7B Q8_0 adds 2.7 ms a sequence at B = 8 on an
/// M2 Ultra (~20% of its 27.2 TFLOPS) and 0.96 ms on a DGX Spark (~25% of its 62.5), 15–45%
/// over B = 2–32 on both. A probed CPU's further sequences run at its measured prompt rate.
pub(crate) const BATCHED_PRODUCTS: f64 = 0.25;

/// One machine of the cost model.
#[derive(Clone, Debug)]
pub(crate) struct NodeCost {
    /// Per byte read from the device's memory.
    pub inv_bandwidth: f64,
    /// Prefill's compute: per FLOP of the node's `compute`.
    pub inv_compute: f64,
    /// A decode step's roofline compute, at this cost model's step ([`NodeCost::set_step`]):
    /// per FLOP of the step, its first sequence's at [`NodeCost::inv_one_decode`].
    pub inv_decode_compute: f64,
    /// Per FLOP of the step, its further sequences' products, added to the roofline
    /// ([`NodeCost::inv_batched`] of their share).
    pub inv_further: f64,
    /// Per FLOP of a further sequence's products: a probed CPU's prompt rate, else
    /// [`BATCHED_PRODUCTS`] of the node's compute.
    pub inv_batched: f64,
    /// One sequence's decode: per FLOP, `1 ÷ (2 × weights/s)` of a measured CPU's products,
    /// else `inv_compute`.
    pub inv_one_decode: f64,
    /// Seconds every layer adds to a decode step (the backend's fitted `τ`).
    pub per_layer_s: f64,
    /// The device's memory left for layers, embedding and head after reserve and the
    /// workspace every stage keeps (may be < 0).
    pub device_capacity: i64,
    /// With system RAM, the device's and the RAM's together (what bounds and orderings
    /// read); else the device's.
    pub capacity: i64,
    /// The device's memory and the part kept back for the system.
    pub budget: u64,
    pub reserve: u64,
    /// The machine's system RAM and CPU, when the scenario gives them.
    pub host: Option<HostCost>,
    /// The device holds a first stage's token embedding (else the server's RAM does).
    pub keeps_embedding: bool,
    /// The device reads a quantized cache once per query head
    /// ([`EngineRules::rereads_quantized_kv`]): what it reads is [`NodeCost::device_read`].
    pub rereads_kv: bool,
    /// A tensor-parallel group's all-reduces ([`super::tensor`]); `None` for one device.
    pub all_reduce: Option<AllReduce>,
    /// Copies of the KV cache the device holds and reads: a vLLM group of more GPUs than
    /// KV heads keeps each head on `d ÷ heads` of them; else 1.
    pub kv_copies: u32,
    /// The best placement of each stage on a machine with system RAM, filled on demand.
    pub(super) memo: Memo,
}

/// A machine's system RAM and CPU.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct HostCost {
    pub inv_bandwidth: f64,
    /// Per FLOP of a decode step: `1 ÷ (2 × weights/s)` of the CPU's products.
    pub inv_decode_compute: f64,
    pub per_layer_s: f64,
    /// RAM left for the model after the reserve (may be < 0).
    pub capacity: i64,
    pub budget: u64,
    pub reserve: u64,
    /// Per byte over the link between RAM and the device.
    pub inv_link: f64,
    /// No layer, nor any layer's FFN, runs faster in host RAM than on the device at this
    /// step (each roofline term and the per-layer cost): then moving more to host RAM never
    /// helps, and the search for a stage's placement may stop early and exactly.
    pub monotone: bool,
}

impl NodeCost {
    /// `node` running `model` under `rules`, every stage keeping `workspace` bytes of buffers,
    /// with `host` its share of the machine's system RAM ([`super::RamShare`]).
    pub(super) fn new(
        node: &Node,
        host: Option<&Host>,
        model: &Model,
        rules: &EngineRules,
        workspace: u64,
    ) -> NodeCost {
        // Measured figures are what the engine reaches: no fitted terms on top.
        let measured = Measured::of_node(node);
        let (reached, per_layer_s) = match &measured {
            Some(m) => (m.read, m.per_layer_s),
            None => FITTED.speed(node.backend, measured::class_of(model), node.bandwidth, node.threads),
        };
        // A prompt at the engine's measured rate where the probe ran it, else the node's.
        let prompt_compute = measured.as_ref().and_then(|m| m.prefill).unwrap_or(node.compute);
        let inv_compute = 1.0 / (prompt_compute * node.efficiency.compute);
        let decode_rate = measured.as_ref().and_then(|m| m.decode_rate(model));
        let device_capacity = super::clamp_i64(
            usable_memory(node.memory, rules.usable_fraction) - i128::from(node.reserve) - i128::from(workspace),
        );
        let host = host.map(|host| HostCost::new(host, model));
        let inv_one_decode =
            decode_rate.map_or(inv_compute, |r| 1.0 / (FLOPS_PER_WEIGHT * r * node.efficiency.compute));
        let inv_batched = match measured.as_ref().and_then(|m| m.prefill) {
            Some(_) => inv_compute.min(inv_one_decode),
            None => inv_compute / BATCHED_PRODUCTS,
        };
        NodeCost {
            inv_bandwidth: 1.0 / (node.bandwidth * node.efficiency.bandwidth * reached),
            inv_compute,
            inv_decode_compute: inv_one_decode,
            inv_further: 0.0,
            inv_batched,
            inv_one_decode,
            per_layer_s,
            device_capacity,
            capacity: host.map_or(device_capacity, |h| h.capacity.max(0).saturating_add(device_capacity)),
            budget: node.memory,
            reserve: node.reserve,
            host,
            // A device with system RAM beside it is a GPU, whatever kind the node names.
            keeps_embedding: rules.embedding_on_device(if host.is_some() { Some(DeviceKind::Gpu) } else { node.kind }),
            rereads_kv: rules.rereads_quantized_kv(node.backend),
            all_reduce: None,
            kv_copies: 1,
            memo: Memo::default(),
        }
    }

    /// Bytes the device reads for `step`: its reads, and the cache's again where the device
    /// reads it once per query head. (Host RAM's CPU reads `step.read`.)
    #[inline(always)]
    pub(crate) fn device_read(&self, step: &Step) -> f64 {
        let read = if self.rereads_kv { step.read + step.kv_reread } else { step.read };
        if self.kv_copies > 1 { read + f64::from(self.kv_copies - 1) * step.kv_read } else { read }
    }

    /// The device's bytes of a stage's `kv` bytes of cache: its copies of them.
    #[inline]
    pub(crate) fn device_kv(&self, kv: u128) -> u128 {
        kv.saturating_mul(u128::from(self.kv_copies))
    }

    /// Prices decode steps of `sequences` sequences: the first sequence's products under the
    /// roofline with the weights' read, each further sequence's added at
    /// [`NodeCost::inv_batched`]. llama.cpp multiplies the further rows as a product over the
    /// same weights, which on a probed CPU runs at about its prompt's rate (a 4-user step of
    /// the 1B model on the serve check's machine took 102.6 ms, not 4 × 55.2), and on a GPU
    /// at [`BATCHED_PRODUCTS`] of its compute, above the weights' read long before the
    /// roofline would say so (BENCHMARKS.md, "Several sequences at once").
    pub(super) fn set_step(&mut self, sequences: f64) {
        let sequences = sequences.max(1.0);
        self.inv_decode_compute = self.inv_one_decode / sequences;
        self.inv_further = (sequences - 1.0) / sequences * self.inv_batched;
    }

    /// Whether `other` is priced as this node is, so that each stage has the same best
    /// placement and time on both: they may share a memo, and the search takes them as twins.
    pub(crate) fn priced_alike(&self, other: &NodeCost) -> bool {
        self.inv_bandwidth == other.inv_bandwidth
            && self.inv_compute == other.inv_compute
            && self.inv_decode_compute == other.inv_decode_compute
            && self.inv_further == other.inv_further
            && self.inv_batched == other.inv_batched
            && self.inv_one_decode == other.inv_one_decode
            && self.per_layer_s == other.per_layer_s
            && self.device_capacity == other.device_capacity
            && self.capacity == other.capacity
            && self.budget == other.budget
            && self.reserve == other.reserve
            && self.host == other.host
            && self.keeps_embedding == other.keeps_embedding
            && self.rereads_kv == other.rereads_kv
            && self.all_reduce == other.all_reduce
            && self.kv_copies == other.kv_copies
    }

    /// The least time per byte read on any of the node's tiers (for lower bounds).
    pub(crate) fn least_inv_bandwidth(&self) -> f64 {
        self.host.map_or(self.inv_bandwidth, |h| self.inv_bandwidth.min(h.inv_bandwidth))
    }

    /// The least time per FLOP on any tier (for lower bounds): a decode step's products are
    /// its first sequence's under the roofline and the others' added, which on few-column
    /// kernels capped at a re-read of the weights can be under the node's compute.
    pub(crate) fn least_inv_compute(&self) -> f64 {
        let device = self.inv_compute.min(self.inv_decode_compute + self.inv_further);
        self.host.map_or(device, |h| device.min(h.inv_decode_compute))
    }

    /// The least per-layer cost on any tier (for lower bounds).
    pub(crate) fn least_per_layer_s(&self) -> f64 {
        self.host.map_or(self.per_layer_s, |h| self.per_layer_s.min(h.per_layer_s))
    }
}

impl NodeCost {
    /// A group of `members` reducing as `all_reduce`, holding `kv_copies` of the cache: `d`
    /// times its slowest GPU's rates and smallest memory, that GPU's per-layer cost, and
    /// the all-reduces; no system RAM (a group's stage is all on its GPUs).
    pub(super) fn group(members: &[&NodeCost], all_reduce: AllReduce, kv_copies: u32) -> NodeCost {
        let d = members.len() as f64;
        let worst = |f: &dyn Fn(&NodeCost) -> f64| members.iter().map(|m| f(m)).fold(0.0, f64::max) / d;
        let smallest = members.iter().map(|m| m.device_capacity).min().unwrap_or(0);
        let lead = members[0];
        let capacity = smallest.saturating_mul(members.len() as i64);
        NodeCost {
            inv_bandwidth: worst(&|m| m.inv_bandwidth),
            inv_compute: worst(&|m| m.inv_compute),
            inv_decode_compute: worst(&|m| m.inv_decode_compute),
            inv_further: worst(&|m| m.inv_further),
            inv_batched: worst(&|m| m.inv_batched),
            inv_one_decode: worst(&|m| m.inv_one_decode),
            per_layer_s: members.iter().map(|m| m.per_layer_s).fold(0.0, f64::max),
            device_capacity: capacity,
            capacity,
            budget: members.iter().map(|m| m.budget).min().unwrap_or(0),
            reserve: lead.reserve,
            host: None,
            keeps_embedding: lead.keeps_embedding,
            rereads_kv: members.iter().any(|m| m.rereads_kv),
            all_reduce: Some(all_reduce),
            kv_copies,
            memo: Default::default(),
        }
    }
}

impl HostCost {
    /// The system RAM and CPU of `host` running `model`, planned by the measured rule
    /// ([`crate::calibration::measured`]): its products at each type's
    /// [`PRIOR_RATES`](measured::PRIOR_RATES) per thread,
    /// [`cpu_per_layer_s`](measured::cpu_per_layer_s) at its threads a layer, and
    /// [`HOST_TIER_BANDWIDTH`] of the CPU backend's fitted fraction of the RAM's peak.
    fn new(host: &Host, model: &Model) -> HostCost {
        let (reached, _) = FITTED.speed(Backend::Cpu, measured::class_of(model), host.bandwidth, Some(host.threads));
        let threads = f64::from(host.threads);
        let rate = measured::products_rate(model, |ty| measured::prior_rate_per_thread(ty) * threads);
        HostCost {
            inv_bandwidth: 1.0 / (host.bandwidth * reached * HOST_TIER_BANDWIDTH),
            inv_decode_compute: 1.0 / (FLOPS_PER_WEIGHT * rate),
            per_layer_s: measured::cpu_per_layer_s(threads),
            capacity: super::clamp_i64(i128::from(host.memory) - i128::from(host.reserve)),
            budget: host.memory,
            reserve: host.reserve,
            inv_link: 1.0 / host.link,
            monotone: false,
        }
    }
}

/// `memory × fraction` in bytes (the fraction an engine claims).
fn usable_memory(memory: u64, fraction: f64) -> i128 {
    if fraction >= 1.0 { i128::from(memory) } else { (memory as f64 * fraction) as i128 }
}
