//! A machine with several GPUs and one system RAM (`cost::RamShare`): each GPU's layers may
//! keep tensors in the RAM, the RAM is counted once, and the search is exhaustive search's
//! over the same divisions of it.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::plan;
use crate::cost::{CostModel, RamShare};
use crate::plan::Plan;
use crate::problem::Problem;
use crate::scenario::Objective;

/// `model` on one machine with `gpus` and `ram` of DDR4-3200 (two channels), 16 threads.
fn machine(gpus: &[&str], ram: &str, model: (&str, &str), context: u32) -> Problem {
    sequences(gpus, ram, model, context, 1)
}

/// [`machine`] with `batch` sequences.
fn sequences(gpus: &[&str], ram: &str, (model, weights): (&str, &str), context: u32, batch: u32) -> Problem {
    let gpus: Vec<String> = gpus.iter().map(|d| format!(r#"{{"device": "{d}"}}"#)).collect();
    let json = format!(
        r#"{{"model": {{"preset": "{model}", "weights": "{weights}"}}, "workload": {{"context": {context}, "batch": {batch}}},
            "nodes": [{{"name": "box", "gpus": [{}], "gpu_link": "pcie4-x8",
                        "host": {{"ram": "ddr4-3200-2ch", "memory": "{ram}", "threads": 16}}}}]}}"#,
        gpus.join(", ")
    );
    crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem
}

/// Bytes the plan keeps in the machine's RAM, over all its stages, beside what the OS keeps.
fn in_ram(plan: &Plan) -> u64 {
    plan.stages.iter().filter_map(|s| s.offload.as_ref()).map(|o| o.memory.total - o.memory.reserve).sum()
}

/// Two RTX 3090s and 128 GiB, Qwen3-235B-A22B Q4_K_M (132 GiB): the layers of each GPU keep
/// their experts in the one RAM, which holds no more than it has.
#[test]
fn each_gpus_layers_keep_experts_in_the_machines_one_ram() {
    let problem = machine(&["rtx-3090", "rtx-3090"], "128 GiB", ("qwen3-235b-a22b", "q4_k_m"), 8192);
    let found = plan(&problem);
    assert!(found.feasible, "{:?}", found.diagnostics);
    let experts: Vec<usize> = found.stages.iter().map(|s| s.offload.as_ref().map_or(0, |o| o.host_ffn)).collect();
    assert!(experts.len() == 2 && experts.iter().all(|&n| n > 0), "{:?}", found.stages);
    assert!(in_ram(&found) <= (128 - 4) << 30, "{} bytes in 128 GiB less 4 for the OS", in_ram(&found));
    // Each stage's RAM headroom is the machine's free RAM: its budget less what the other keeps.
    let [a, b] = [0, 1].map(|s| found.stages[s].offload.as_ref().unwrap().memory.clone());
    assert_eq!(a.headroom, b.headroom);
    assert_eq!(a.headroom, (128 << 30) - (4 << 30) - in_ram(&found) as i64, "{a:?} {b:?}");
    let note = found.diagnostics.iter().find(|d| d.message.contains("`box`'s system RAM")).expect("a note");
    assert!(note.message.contains("`box/gpu0`") && note.message.contains("`box/gpu1`"), "{}", note.message);
    // The whole RAM beside each GPU would hold the model twice over; the plan is no faster
    // than the best division the search was given.
    for share in RamShare::candidates(&problem) {
        let cost = CostModel::with_share(&problem, share);
        let other = super::plan_on(&problem, &cost, &[true, true], problem.policy, problem.objective, false, None);
        assert!(other.tokens_per_s <= found.tokens_per_s * (1.0 + 1e-9), "{share:?}");
    }
}

/// A dense 70B past two 24 GB GPUs and 64 GB of RAM with no room for a second copy: the
/// plan fits only with the RAM counted once, as it is.
#[test]
fn the_ram_of_a_machine_with_two_gpus_is_counted_once() {
    let problem = machine(&["rtx-3090", "rtx-3090"], "32 GiB", ("llama-3.1-70b", "q4_k_m"), 8192);
    // 42.5 GB of weights: 48 GB of GPUs hold them, with RAM or without.
    let found = plan(&problem);
    assert!(found.feasible);
    let problem = machine(&["rtx-3090", "rtx-3090"], "48 GiB", ("llama-3.1-70b", "q8_0"), 8192);
    // 75 GB of weights: 48 GB of GPUs and 44 GiB of RAM hold them; each GPU seeing all of
    // the RAM would count 88.
    let found = plan(&problem);
    assert!(found.feasible, "{:?}", found.diagnostics);
    assert!(in_ram(&found) <= (48 - 4) << 30, "{} bytes in 48 GiB less 4 for the OS", in_ram(&found));
    let problem = machine(&["rtx-3090", "rtx-3090"], "24 GiB", ("llama-3.1-70b", "q8_0"), 8192);
    assert!(!plan(&problem).feasible, "48 GB of GPUs and 20 GiB of RAM do not hold 75 GB");
}

/// The plan's objective value is exhaustive search's over the same divisions of the RAM, and
/// the plan keeps no more in the RAM than it has.
fn agrees_with_exhaustive_search(problem: &Problem) -> Result<(), TestCaseError> {
    super::tensor_parallel_tests::agrees_with_exhaustive_search(problem)?;
    if let Some(host) = &problem.nodes[0].host {
        let (found, room) = (plan(problem), host.memory - host.reserve);
        prop_assert!(in_ram(&found) <= room, "{} bytes in {room}", in_ram(&found));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    #[test]
    fn shared_ram_plans_match_exhaustive_search(
        gpus in proptest::collection::vec(prop::sample::select(vec!["rtx-3060-12gb", "rtx-4060-ti-16gb", "rtx-3090"]), 2..=3),
        ram in prop::sample::select(vec!["16 GiB", "32 GiB", "64 GiB"]),
        model in prop::sample::select(vec![("qwen3-30b-a3b", "q8_0"), ("qwen3-32b", "q8_0")]),
        batch in prop::sample::select(vec![1u32, 4]),
        latency in any::<bool>(),
    ) {
        let mut problem = sequences(&gpus, ram, model, 8192, batch);
        problem.objective = if latency { Objective::Latency } else { Objective::Throughput };
        agrees_with_exhaustive_search(&problem)?;
    }
}
