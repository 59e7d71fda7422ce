//! A machine's GPUs as one tensor-parallel group (`cost::tensor`): the search's choice
//! among layer splits and groups is exhaustive search's, on mixed boxes, both objectives.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::tests::close;
use super::{plan, verify};
use crate::cost::CostModel;
use crate::problem::Problem;
use crate::scenario::Objective;

fn scenario(gpus: &[&str], link: &str, model: &str, context: u32, remote: bool) -> Problem {
    boxes(&[gpus], link, (model, "q4_k_m"), context, remote, "llama.cpp")
}

/// Machines `box0`, `box1`… with these GPUs, and perhaps a remote one-GPU machine.
fn boxes(
    machines: &[&[&str]],
    link: &str,
    (model, weights): (&str, &str),
    context: u32,
    remote: bool,
    engine: &str,
) -> Problem {
    let machines: Vec<String> = machines
        .iter()
        .enumerate()
        .map(|(i, gpus)| {
            let gpus: Vec<String> = gpus.iter().map(|d| format!(r#"{{"device": "{d}"}}"#)).collect();
            let name = if i == 0 { "box".to_owned() } else { format!("box{i}") };
            format!(r#"{{"name": "{name}", "gpus": [{}], "gpu_link": "{link}"}}"#, gpus.join(", "))
        })
        .collect();
    let remote = if remote { r#", {"name": "mini", "device": "rtx-4060-ti-16gb"}"# } else { "" };
    let json = format!(
        r#"{{"model": {{"preset": "{model}", "weights": "{weights}"}}, "workload": {{"context": {context}}}, "engine": "{engine}",
            "nodes": [{}{remote}]}}"#,
        machines.join(", ")
    );
    crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem
}

/// The plan's objective value is exhaustive search's (or neither fits).
pub(super) fn agrees_with_exhaustive_search(problem: &Problem) -> Result<(), TestCaseError> {
    let found = plan(problem);
    let exhaustive = verify(problem, 50_000_000).expect("small enough to search every plan");
    match (found.objective_value(), exhaustive.objective_value()) {
        (Some(got), Some(want)) => prop_assert!(close(got, want), "optimal {got} vs exhaustive {want}"),
        (got, want) => prop_assert_eq!(got.is_some(), want.is_some()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn groups_and_layer_splits_match_exhaustive_search(
        gpus in proptest::collection::vec(prop::sample::select(vec!["rtx-3090", "rtx-4090", "rtx-3060-12gb"]), 2..=3),
        link in prop::sample::select(vec!["pcie3-x4", "pcie4-x16", "nvlink-bridge"]),
        model in prop::sample::select(vec!["llama-3.1-8b", "qwen3-32b"]),
        context in prop::sample::select(vec![4096u32, 32768]),
        remote in any::<bool>(),
        latency in any::<bool>(),
    ) {
        let mut problem = scenario(&gpus, link, model, context, remote);
        problem.objective = if latency { Objective::Latency } else { Objective::Throughput };
        agrees_with_exhaustive_search(&problem)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    /// vLLM: pipelines of groups of one size over two machines, against exhaustive search.
    #[test]
    fn pipelines_of_groups_match_exhaustive_search(
        first in proptest::collection::vec(prop::sample::select(vec!["rtx-3090", "rtx-4090", "rtx-3060-12gb"]), 2..=2),
        second in proptest::collection::vec(prop::sample::select(vec!["rtx-3090", "rtx-3060-12gb"]), 1..=2),
        link in prop::sample::select(vec!["pcie3-x4", "nvlink-bridge"]),
        context in prop::sample::select(vec![4096u32, 65536]),
        latency in any::<bool>(),
    ) {
        let mut problem = boxes(&[&first, &second], link, ("qwen3-32b", "q4_k_m"), context, false, "vllm");
        problem.objective = if latency { Objective::Latency } else { Objective::Throughput };
        agrees_with_exhaustive_search(&problem)?;
    }
}

/// Two machines of four GPUs over 100 GbE, a model none holds alone: vLLM's pipeline of
/// two 4-GPU groups (TP 4 × PP 2), every stage a group of the same size.
#[test]
fn two_machines_of_four_gpus_run_tp_4_by_pp_2() {
    let four: &[&str] = &["rtx-4090"; 4];
    let problem = boxes(&[four, four], "pcie4-x16", ("llama-3.1-70b", "bf16"), 8192, false, "vllm");
    let found = plan(&problem);
    assert!(found.feasible, "{:?}", found.diagnostics);
    let groups: Vec<usize> = found.stages.iter().map(|s| s.tensor_parallel.len()).collect();
    assert_eq!(groups, [4, 4], "{:?}", found.stages);
}

/// Llama 3.1 70B's 64 heads split 2 and 4 ways, never 3: three GPUs form groups of two.
#[test]
fn a_degree_the_heads_do_not_divide_is_never_planned() {
    let problem = scenario(&["rtx-3090", "rtx-3090", "rtx-3090"], "nvlink-bridge", "llama-3.1-70b", 8192, false);
    let cost = CostModel::new(&problem);
    assert!(!cost.groups().is_empty());
    assert!(cost.groups().iter().all(|g| g.members.len() == 2), "{:?}", cost.groups());
    let refused = crate::cost::degree_refused(&problem.model, problem.workload.engine, 3).unwrap();
    assert!(refused.contains("64 attention heads"), "{refused}");
    assert!(plan(&problem).stages.iter().all(|s| s.tensor_parallel.len() != 3));
}

/// A mixed group splits evenly, so it runs at its slowest GPU: a 4090 with a 3090 is two
/// 3090s.
#[test]
fn a_mixed_group_runs_at_its_slowest_gpu() {
    let time = |gpus: &[&str]| {
        let problem = scenario(gpus, "pcie4-x16", "qwen3-32b", 4096, false);
        let found = plan(&problem);
        assert_eq!(found.stages[0].tensor_parallel.len(), 2, "{:?}", found.stages);
        found.stages[0].time_s
    };
    assert_eq!(time(&["rtx-4090", "rtx-3090"]), time(&["rtx-3090", "rtx-3090"]));
}

/// A model one fast GPU holds: beside a slow GPU, the group's even split and its
/// all-reduces lose to the fast GPU alone, and the plan says by how much.
#[test]
fn the_plan_says_when_tensor_parallel_loses() {
    let problem = scenario(&["rtx-4090", "rtx-3060-12gb"], "pcie3-x4", "gpt-oss-20b", 4096, false);
    let found = plan(&problem);
    assert!(found.stages.iter().all(|s| s.tensor_parallel.is_empty()), "{:?}", found.stages);
    let note = found.diagnostics.iter().find(|d| d.message.starts_with("tensor parallel over 2 GPUs"));
    assert!(note.is_some_and(|n| n.message.contains("× this plan")), "{:?}", found.diagnostics);
}

/// Qwen3-235B-A22B's 4 KV heads on an H100 box of 8 over NVLink: vLLM keeps each head on two
/// GPUs and runs TP 8, its all-reduces one kernel each (about 9 µs, not three rounds of a
/// 30 µs hop); llama.cpp, which splits KV heads only, stops at 4.
#[test]
fn vllm_runs_more_gpus_than_kv_heads_with_each_head_on_several() {
    let eight: &[&str] = &["h100"; 8];
    let problem = boxes(&[eight], "nvlink4", ("qwen3-235b-a22b", "fp8"), 32768, false, "vllm");
    let found = plan(&problem);
    assert_eq!(found.stages.len(), 1, "{:?}", found.stages);
    let stage = &found.stages[0];
    assert_eq!(stage.tensor_parallel.len(), 8, "{:?}", found.stages);
    // Per GPU: an eighth of the weights, and a quarter of the cache (its head's, twice over).
    let cost = CostModel::new(&problem);
    let whole = cost.memory(0, 0, problem.model.num_layers());
    assert_eq!(stage.memory.kv, whole.kv.div_ceil(4), "{stage:?}");
    assert_eq!(stage.memory.weights, whole.weights.div_ceil(8));
    // 94 layers, two all-reduces each, about 9 µs apiece.
    let all_reduce = stage.time.all_reduce_s;
    assert!((94.0 * 2.0 * 9e-6..94.0 * 2.0 * 10e-6).contains(&all_reduce), "{all_reduce}");
    let refused = crate::cost::degree_refused(&problem.model, crate::engine::Engine::LlamaCpp, 8).unwrap();
    assert!(refused.contains("4 KV heads"), "{refused}");
    assert!(crate::cost::degree_refused(&problem.model, problem.workload.engine, 8).is_none());
    // Six: 64 attention heads do not split six ways.
    assert!(crate::cost::degree_refused(&problem.model, problem.workload.engine, 6).is_some());
}

/// vLLM shards each routed expert's MLP by the degree: an expert width the degree does not
/// divide is refused by its name, though the model's unused dense width divides.
#[test]
fn vllm_divides_the_experts_ffn_width() {
    let mut model = boxes(&[&["h100"; 4]], "nvlink4", ("qwen3-30b-a3b", "bf16"), 4096, false, "vllm").model;
    let vllm = crate::engine::Engine::Vllm;
    assert!(crate::cost::degree_refused(&model, vllm, 4).is_none());
    // Qwen3-30B-A3B has no dense layer: its `intermediate_size` (6144) is not read.
    model.arch.intermediate_size = 6145;
    assert!(crate::cost::degree_refused(&model, vllm, 4).is_none());
    model.arch.moe.as_mut().unwrap().expert_intermediate = 770;
    let refused = crate::cost::degree_refused(&model, vllm, 4).unwrap();
    assert_eq!(refused, "4 does not divide the FFN width 770");
}
