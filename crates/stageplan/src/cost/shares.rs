//! A machine with several GPUs and one system RAM: how much of that RAM each GPU's stage
//! may fill.
//!
//! llama.cpp runs a machine's GPUs in one server, and `-ngl`, `--n-cpu-moe` and `-ot` keep
//! tensors of any GPU's layers in the one RAM (`-ot "blk\.(…)\.ffn_.*_exps\.=CPU"` names
//! layers, whichever GPU holds them). The RAM is counted once: the cost model gives each GPU
//! a share of it, and the planner searches each stage exactly within its GPU's share.
//!
//! The planner first plans with all of the RAM beside each GPU ([`RamShare::Whole`], a
//! relaxation no division beats); where that plan's stages together fit the RAM — the
//! common case, RAM being the larger memory — it is the best over every division. Where
//! they do not, the division is a choice (half the RAM for each GPU's experts, or all of it
//! for the first stage's whole layers), and the planner tries each of
//! [`RamShare::candidates`] and keeps the best plan: exact for each, not over every division.

use crate::engine::HostRam;
use crate::problem::{Host, Node, Problem};

/// How a machine with several GPUs divides its system RAM among them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum RamShare {
    /// An equal share to each GPU: what alike GPUs with alike layers use.
    #[default]
    Even,
    /// Shares in proportion to the GPUs' memories: a larger GPU holds more layers, and so
    /// more of their experts.
    ByMemory,
    /// All of it beside the machine's GPU with this number (llama.cpp's `-ngl` keeps the
    /// model's first layers in RAM, beside whichever GPU runs the first stage).
    All(u32),
    /// All of it beside each GPU: a relaxation, no slower than any division. A plan made
    /// with it is kept only where its stages together fit the RAM
    /// (`CostModel::fits_shared_ram`); it is then the best over every division.
    Whole,
}

impl RamShare {
    /// The divisions worth planning: an even one, by memory where a machine's GPUs differ
    /// in it, and all beside one GPU for each GPU unlike those before it on its machine
    /// (alike GPUs are interchangeable to the search). One, [`RamShare::Even`], where no
    /// machine has several GPUs and system RAM, or under vLLM, whose `--cpu-offload-gb`
    /// is one amount for every GPU.
    pub fn candidates(problem: &Problem) -> Vec<RamShare> {
        let nodes = &problem.nodes;
        let mut out = vec![RamShare::Even];
        let machines = machines(nodes);
        if machines.is_empty() || problem.workload.engine.rules().host_ram == HostRam::Streamed {
            return out;
        }
        let unlike = |a: &Node, b: &Node| {
            (a.memory, a.bandwidth.to_bits(), a.compute.to_bits(), a.backend)
                != (b.memory, b.bandwidth.to_bits(), b.compute.to_bits(), b.backend)
        };
        if machines.iter().any(|m| m.iter().any(|&k| nodes[k].memory != nodes[m[0]].memory)) {
            out.push(RamShare::ByMemory);
        }
        let most = machines.iter().map(Vec::len).max().unwrap_or(0);
        for j in 0..most {
            let new_kind =
                |m: &Vec<usize>| m.get(j).is_some_and(|&k| m[..j].iter().all(|&o| unlike(&nodes[o], &nodes[k])));
            if machines.iter().any(new_kind) {
                out.push(RamShare::All(j as u32));
            }
        }
        out
    }

    /// Each node's system RAM under this division: a machine's with several GPUs divided
    /// among them (memory and reserve alike, so each share's capacity is its part of the
    /// machine's), any other node's as it is. A machine without the GPU that
    /// [`RamShare::All`] names is divided evenly.
    pub fn divide(self, nodes: &[Node]) -> Vec<Option<Host>> {
        let mut hosts: Vec<Option<Host>> = nodes.iter().map(|n| n.host.clone()).collect();
        if self == RamShare::Whole {
            return hosts;
        }
        for machine in machines(nodes) {
            let k = machine.len() as u128;
            let total: u128 = machine.iter().map(|&i| u128::from(nodes[i].memory)).sum();
            let has = |j: u32| machine.iter().any(|&i| nodes[i].gpu_of.as_ref().is_some_and(|g| g.index == j));
            for &i in &machine {
                let index = nodes[i].gpu_of.as_ref().map_or(0, |g| g.index);
                // The share as a fraction `num / den`.
                let (num, den) = match self {
                    RamShare::All(j) if has(j) => (u128::from(index == j), 1),
                    RamShare::ByMemory if total > 0 => (u128::from(nodes[i].memory), total),
                    _ => (1, k),
                };
                if let Some(host) = &mut hosts[i] {
                    let part = |bytes: u64| u64::try_from(u128::from(bytes) * num / den).unwrap_or(u64::MAX);
                    host.memory = part(host.memory);
                    host.reserve = part(host.reserve);
                }
            }
        }
        hosts
    }
}

/// The nodes of each machine with several GPUs and system RAM, in order.
pub(super) fn machines(nodes: &[Node]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let (Some(gpu), Some(_)) = (&node.gpu_of, &node.host) else { continue };
        match out.iter_mut().find(|m| nodes[m[0]].gpu_of.as_ref().is_some_and(|g| g.machine == gpu.machine)) {
            Some(machine) => machine.push(i),
            None => out.push(vec![i]),
        }
    }
    out.retain(|m| m.len() > 1);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(json: &str) -> crate::problem::Problem {
        crate::check(json, crate::check::no_model_files).unwrap().problem
    }

    const BOX: &str = r#"{"model": {"preset": "qwen3-30b-a3b", "weights": "q4_k_m"}, "nodes": [
        {"name": "box", "gpus": [{"device": "rtx-5090"}, {"device": "rtx-3090"}, {"device": "rtx-3090"}],
         "host": {"memory": "96 GiB", "reserve": "6 GiB", "bandwidth": "80 GB/s"}},
        {"name": "mac", "device": "m2-ultra-192gb"}]}"#;

    #[test]
    fn a_machines_ram_is_divided_once_among_its_gpus() {
        let p = problem(BOX);
        for share in RamShare::candidates(&p) {
            let hosts = share.divide(&p.nodes);
            let (memory, reserve) = hosts[..3].iter().flatten().fold((0, 0), |(m, r), h| (m + h.memory, r + h.reserve));
            assert!(memory <= 96 << 30 && memory > (96 << 30) - 3, "{share:?}: {memory}");
            assert!(reserve <= 6 << 30 && reserve > (6 << 30) - 3, "{share:?}: {reserve}");
            assert!(hosts[3].is_none(), "a machine without `host` has none");
        }
        let even = RamShare::Even.divide(&p.nodes);
        assert_eq!(even[0].as_ref().unwrap().memory, 32 << 30);
        // In proportion to 32, 24 and 24 GB of GPU memory.
        let by_memory = RamShare::ByMemory.divide(&p.nodes);
        let gpus: u64 = p.nodes[..3].iter().map(|n| n.memory).sum();
        let expected = u128::from(96u64 << 30) * u128::from(p.nodes[0].memory) / u128::from(gpus);
        assert_eq!(u128::from(by_memory[0].as_ref().unwrap().memory), expected);
        let all = RamShare::All(1).divide(&p.nodes);
        assert_eq!(all.iter().flatten().map(|h| h.memory).collect::<Vec<_>>(), [0, 96 << 30, 0]);
    }

    #[test]
    fn each_kind_of_gpu_may_hold_all_of_it() {
        let p = problem(BOX);
        // The two 3090s are alike: all beside the second is all beside the third.
        assert_eq!(RamShare::candidates(&p), [RamShare::Even, RamShare::ByMemory, RamShare::All(0), RamShare::All(1)]);
        let one_gpu = problem(
            r#"{"model": {"preset": "qwen3-30b-a3b", "weights": "q4_k_m"}, "nodes": [
            {"name": "desk", "device": "rtx-4090", "host": {"memory": "64 GiB", "ram": "ddr5-6000-2ch"}}]}"#,
        );
        assert_eq!(RamShare::candidates(&one_gpu), [RamShare::Even]);
        assert_eq!(RamShare::Even.divide(&one_gpu.nodes), [one_gpu.nodes[0].host.clone()]);
    }
}
