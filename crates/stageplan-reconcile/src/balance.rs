//! Live cluster state and load balancing: notice skew, shed load, never thrash.
//!
//! Nodes report total and available memory and a status. **Skew** is the ratio of the most
//! to the least available headroom among active nodes; it is at least 1 by construction, so
//! the threshold must be above 1 (a threshold of 1 or less would fire forever) and a
//! perfectly balanced cluster — including one where every node has no free memory at all —
//! is never skewed. **Shedding** moves bytes from nodes below their low-headroom mark to the
//! node with the most headroom, at most `max_transfers` at a time. Thresholds come from each
//! node's device **tier** and are re-tuned when a new probe of the hardware arrives: the
//! balancer consumes a stream of [`ProfileEvent`]s.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// A node's state in the live cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    /// Finishing its work; receives nothing new.
    Draining,
    Down,
}

/// What a node reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeMetrics {
    pub name: String,
    pub total_memory: u64,
    pub available_memory: u64,
    pub status: Status,
}

/// What kind of hardware a node is, which sets how much imbalance it tolerates.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// A GPU: memory is scarce and fast; rebalance early.
    Gpu,
    /// A CPU with wide SIMD (AVX-512, SVE, AMX): between the two.
    WideSimdCpu,
    /// A plain CPU: plenty of slow memory; moving data costs more than it saves.
    PlainCpu,
}

/// Thresholds of one tier.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Skew (most ÷ least headroom) above which the cluster rebalances; always above 1.
    pub skew: f64,
    /// A node with less than this fraction of its memory free is overloaded.
    pub low_headroom: f64,
}

impl Tier {
    /// The tier's thresholds: GPUs rebalance at 1.5× skew and below 10% free; wide-SIMD CPUs
    /// at 2× and 15%; plain CPUs at 3× and 20%.
    pub fn thresholds(self) -> Thresholds {
        match self {
            Tier::Gpu => Thresholds { skew: 1.5, low_headroom: 0.10 },
            Tier::WideSimdCpu => Thresholds { skew: 2.0, low_headroom: 0.15 },
            Tier::PlainCpu => Thresholds { skew: 3.0, low_headroom: 0.20 },
        }
    }
}

impl Tier {
    /// The tier of a probed device: `device_type` as `stageplan probe` reports it
    /// (`discrete_gpu`, `integrated_gpu`, `virtual_gpu`, `cpu`, `other`) and whether a CPU
    /// has vectors of 512 bits or wider (AVX-512, SVE-512, AMX). Unknown kinds count as
    /// plain CPUs: the most patient tier, which moves least.
    pub fn from_profile(device_type: &str, wide_simd: bool) -> Tier {
        match device_type {
            "discrete_gpu" | "integrated_gpu" | "virtual_gpu" => Tier::Gpu,
            _ if wide_simd => Tier::WideSimdCpu,
            _ => Tier::PlainCpu,
        }
    }
}

/// A new measurement of a node's hardware.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileEvent {
    pub node: String,
    pub tier: Tier,
}

/// A balancing error, with the fix.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BalanceError {
    #[error("the skew threshold is {0}; it must be above 1 (skew is never below 1, so this would rebalance forever)")]
    Threshold(f64),
    #[error("`{node}` reports {available} bytes available of {total}; available memory cannot exceed the total")]
    Metrics { node: String, available: u64, total: u64 },
}

/// Skew among the active nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skew {
    /// Most ÷ least available headroom (1 when balanced, or when no node has any).
    pub ratio: f64,
    pub most: Option<String>,
    pub least: Option<String>,
    pub skewed: bool,
}

/// A move of bytes from one node to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transfer {
    pub from: String,
    pub to: String,
    pub bytes: u64,
}

/// The balancer: per-node thresholds, tuned from profiles.
#[derive(Clone, Debug, Default)]
pub struct Balancer {
    tiers: Vec<(String, Tier)>,
    /// Transfers in flight at once, at most.
    pub max_transfers: usize,
}

impl Balancer {
    /// A balancer allowing `max_transfers` concurrent transfers; nodes default to the GPU tier.
    pub fn new(max_transfers: usize) -> Balancer {
        Balancer { tiers: Vec::new(), max_transfers }
    }

    /// Applies new probes: each event re-tunes its node.
    pub fn consume(&mut self, events: impl IntoIterator<Item = ProfileEvent>) {
        for event in events {
            match self.tiers.iter_mut().find(|(n, _)| *n == event.node) {
                Some(entry) => entry.1 = event.tier,
                None => self.tiers.push((event.node, event.tier)),
            }
        }
    }

    /// A node's tier (GPU until a probe says otherwise).
    pub fn tier(&self, node: &str) -> Tier {
        self.tiers.iter().find(|(n, _)| n == node).map_or(Tier::Gpu, |(_, t)| *t)
    }

    /// The skew threshold of a cluster: the most tolerant among its active nodes' tiers.
    pub fn skew_threshold(&self, nodes: &[NodeMetrics]) -> f64 {
        nodes
            .iter()
            .filter(|n| n.status == Status::Active)
            .map(|n| self.tier(&n.name).thresholds().skew)
            .fold(Tier::Gpu.thresholds().skew, f64::max)
    }

    /// Skew with the tuned threshold.
    ///
    /// # Errors
    /// Metrics that claim more available than total memory.
    pub fn skew(&self, nodes: &[NodeMetrics]) -> Result<Skew, BalanceError> {
        skew(nodes, self.skew_threshold(nodes))
    }

    /// Transfers that bring overloaded nodes back to their low-headroom mark, each to the
    /// node with the most headroom at that moment, at most `max_transfers`. Nothing moves
    /// while the cluster is not skewed.
    ///
    /// # Errors
    /// Metrics that claim more available than total memory.
    pub fn shed(&self, nodes: &[NodeMetrics]) -> Result<Vec<Transfer>, BalanceError> {
        if !self.skew(nodes)?.skewed {
            return Ok(Vec::new());
        }
        let mut free: Vec<(usize, u64)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.status == Status::Active)
            .map(|(i, n)| (i, n.available_memory))
            .collect();
        let mut transfers = Vec::new();
        // The most overloaded first.
        let mut overloaded: Vec<(usize, u64)> = free
            .iter()
            .filter_map(|&(i, available)| {
                let n = &nodes[i];
                let mark = (n.total_memory as f64 * self.tier(&n.name).thresholds().low_headroom) as u64;
                (available < mark).then(|| (i, mark - available))
            })
            .collect();
        overloaded.sort_by_key(|&(_, deficit)| std::cmp::Reverse(deficit));
        for (from, deficit) in overloaded {
            if transfers.len() >= self.max_transfers {
                break;
            }
            let Some(&(to, room)) = free.iter().filter(|(i, _)| *i != from).max_by_key(|(_, room)| *room) else {
                break;
            };
            // Leave the receiver at least as much headroom as the sender ends with.
            let bytes = deficit.min(room / 2);
            if bytes == 0 {
                continue;
            }
            for entry in &mut free {
                if entry.0 == to {
                    entry.1 -= bytes;
                } else if entry.0 == from {
                    entry.1 += bytes;
                }
            }
            transfers.push(Transfer { from: nodes[from].name.clone(), to: nodes[to].name.clone(), bytes });
        }
        Ok(transfers)
    }
}

/// The skew of the active nodes' available memory against `threshold`.
///
/// # Errors
/// A threshold of 1 or less; metrics that claim more available than total memory.
pub fn skew(nodes: &[NodeMetrics], threshold: f64) -> Result<Skew, BalanceError> {
    if !(threshold > 1.0 && threshold.is_finite()) {
        return Err(BalanceError::Threshold(threshold));
    }
    if let Some(n) = nodes.iter().find(|n| n.available_memory > n.total_memory) {
        return Err(BalanceError::Metrics {
            node: n.name.clone(),
            available: n.available_memory,
            total: n.total_memory,
        });
    }
    let active: Vec<&NodeMetrics> = nodes.iter().filter(|n| n.status == Status::Active).collect();
    let most = active.iter().max_by_key(|n| n.available_memory);
    let least = active.iter().min_by_key(|n| n.available_memory);
    let ratio = match (most, least) {
        (Some(m), Some(l)) if m.available_memory == l.available_memory => 1.0,
        (Some(_), Some(l)) if l.available_memory == 0 => f64::INFINITY,
        (Some(m), Some(l)) => m.available_memory as f64 / l.available_memory as f64,
        _ => 1.0,
    };
    Ok(Skew {
        ratio,
        most: most.map(|n| n.name.clone()),
        least: least.map(|n| n.name.clone()),
        skewed: ratio > threshold,
    })
}

/// Splits a stage's layers into `workers` contiguous slices of about equal bytes, so each of
/// a node's workers gets a share (fewer slices when there are fewer layers).
pub fn chunk(layers: Range<usize>, bytes_per_layer: &[u64], workers: usize) -> Vec<Range<usize>> {
    let layers = layers.start.min(bytes_per_layer.len())..layers.end.min(bytes_per_layer.len());
    let count = layers.len();
    let slices = workers.clamp(1, count.max(1));
    if count == 0 {
        return Vec::new();
    }
    let total: u64 = bytes_per_layer[layers.clone()].iter().sum();
    let mut out = Vec::with_capacity(slices);
    let mut start = layers.start;
    let mut running = 0u64;
    for l in layers.clone() {
        running += bytes_per_layer[l];
        let done = out.len() + 1;
        let remaining_layers = layers.end - l - 1;
        let remaining_slices = slices - done;
        // Cut when this slice reached its share, keeping a layer for every slice left.
        let share = u128::from(total) * done as u128 / slices as u128;
        if done < slices
            && (u128::from(running) >= share || remaining_layers == remaining_slices)
            && remaining_layers >= remaining_slices
        {
            out.push(start..l + 1);
            start = l + 1;
        }
    }
    out.push(start..layers.end);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Chunks tile the stage, one per worker (fewer only when layers run out), and none
        /// holds more than an even share plus one layer.
        #[test]
        fn chunks_tile_the_stage_evenly(
            bytes in prop::collection::vec(1u64..1000, 1..100),
            start in 0usize..100,
            len in 0usize..100,
            workers in 1usize..16,
        ) {
            let start = start % bytes.len();
            let end = (start + len).min(bytes.len());
            let chunks = chunk(start..end, &bytes, workers);
            if start == end {
                prop_assert!(chunks.is_empty());
                return Ok(());
            }
            prop_assert_eq!(chunks.len(), workers.min(end - start));
            prop_assert_eq!(chunks[0].start, start);
            prop_assert_eq!(chunks[chunks.len() - 1].end, end);
            let total: u64 = bytes[start..end].iter().sum();
            let largest = *bytes[start..end].iter().max().unwrap();
            for pair in chunks.windows(2) {
                prop_assert_eq!(pair[0].end, pair[1].start);
            }
            for c in &chunks {
                prop_assert!(!c.is_empty());
                let held: u64 = bytes[c.clone()].iter().sum();
                prop_assert!(held <= total / chunks.len() as u64 + largest, "{:?} holds {} of {}", c, held, total);
            }
        }
    }

    fn node(name: &str, total: u64, available: u64) -> NodeMetrics {
        NodeMetrics { name: name.into(), total_memory: total, available_memory: available, status: Status::Active }
    }

    #[test]
    fn a_threshold_of_one_or_less_is_refused() {
        for bad in [1.0, 0.5, -2.0, f64::NAN] {
            let error = skew(&[node("a", 10, 5)], bad).unwrap_err();
            assert!(error.to_string().contains("must be above 1"), "{error}");
        }
    }

    #[test]
    fn a_balanced_cluster_is_never_skewed() {
        for nodes in [
            vec![node("a", 24, 6), node("b", 24, 6), node("c", 24, 6)],
            // An all-CPU cluster with no VRAM: nothing available anywhere is still balanced.
            vec![node("cpu1", 0, 0), node("cpu2", 0, 0)],
            vec![node("full1", 64, 0), node("full2", 64, 0)],
            vec![node("alone", 80, 3)],
            vec![],
        ] {
            let s = skew(&nodes, 1.0001).unwrap();
            assert_eq!(s.ratio, 1.0);
            assert!(!s.skewed);
            assert!(Balancer::new(4).shed(&nodes).unwrap().is_empty());
        }
    }

    #[test]
    fn skew_ignores_nodes_that_are_not_active() {
        let mut nodes = vec![node("a", 24, 12), node("b", 24, 12), node("gone", 24, 0)];
        nodes[2].status = Status::Down;
        assert!(!skew(&nodes, 1.5).unwrap().skewed);
        nodes[2].status = Status::Active;
        assert!(skew(&nodes, 1.5).unwrap().skewed);
    }

    #[test]
    fn shedding_moves_load_to_the_most_headroom_within_the_limit() {
        let nodes = vec![node("full", 100, 2), node("tight", 100, 5), node("roomy", 100, 80), node("ok", 100, 40)];
        let transfers = Balancer::new(1).shed(&nodes).unwrap();
        assert_eq!(transfers, vec![Transfer { from: "full".into(), to: "roomy".into(), bytes: 8 }]);
        let both = Balancer::new(4).shed(&nodes).unwrap();
        assert_eq!(both.len(), 2);
        assert!(both.iter().all(|t| t.to == "roomy"));
    }

    #[test]
    fn profiles_retune_thresholds() {
        let nodes = vec![node("a", 100, 20), node("b", 100, 45)];
        let mut balancer = Balancer::new(2);
        assert!(balancer.skew(&nodes).unwrap().skewed, "2.25× skew trips the GPU tier's 1.5×");
        balancer.consume([ProfileEvent { node: "a".into(), tier: Tier::PlainCpu }]);
        assert!(!balancer.skew(&nodes).unwrap().skewed, "a plain CPU tolerates up to 3×");
        balancer.consume([ProfileEvent { node: "a".into(), tier: Tier::Gpu }]);
        assert!(balancer.skew(&nodes).unwrap().skewed);
    }

    #[test]
    fn probes_map_to_tiers() {
        assert_eq!(Tier::from_profile("discrete_gpu", false), Tier::Gpu);
        assert_eq!(Tier::from_profile("integrated_gpu", true), Tier::Gpu);
        assert_eq!(Tier::from_profile("cpu", true), Tier::WideSimdCpu);
        assert_eq!(Tier::from_profile("cpu", false), Tier::PlainCpu);
        assert_eq!(Tier::from_profile("something new", false), Tier::PlainCpu);
        for tier in [Tier::Gpu, Tier::WideSimdCpu, Tier::PlainCpu] {
            assert!(tier.thresholds().skew > 1.0, "{tier:?}: a threshold of 1 or less would fire forever");
        }
    }

    #[test]
    fn chunks_cover_the_stage_evenly_by_bytes() {
        let bytes = [10, 10, 10, 10, 40, 10, 10];
        let chunks = chunk(0..7, &bytes, 3);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.first().unwrap().start, 0);
        assert_eq!(chunks.last().unwrap().end, 7);
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        assert_eq!(chunk(2..4, &bytes, 8), vec![2..3, 3..4], "never more slices than layers");
        assert_eq!(chunk(0..0, &bytes, 3), Vec::<Range<usize>>::new());
    }
}
