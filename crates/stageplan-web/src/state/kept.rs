//! What of an imported scenario the page's form has no place for. The page plans the
//! scenario its form writes, so an imported field it cannot hold would be lost without a
//! word: the import says which, and the CLI plans them.

use stageplan::Scenario;
use stageplan::scenario::{Policy, WorkloadSpec};

/// The paths of `scenario`'s fields the page's form does not hold (`workload.depth`,
/// `nodes[1].host.threads`, `policy`, …), in the scenario's order; empty when it holds all.
pub fn not_kept(scenario: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    if scenario.model.name.is_some() {
        out.push("model.name".to_owned());
    }
    let w = &scenario.workload;
    let default = WorkloadSpec::default();
    for (field, dropped) in [
        ("workspace", w.workspace.is_some()),
        ("prefill_chunk", w.prefill_chunk != default.prefill_chunk),
        ("flash_attention", w.flash_attention != default.flash_attention),
        ("prompt", w.prompt.is_some()),
        ("depth", w.depth.is_some()),
        ("response", w.response.is_some()),
    ] {
        if dropped {
            out.push(format!("workload.{field}"));
        }
    }
    for (i, node) in scenario.nodes.iter().enumerate() {
        if node.threads.is_some() {
            out.push(format!("nodes[{i}].threads"));
        }
        if let Some(host) = &node.host {
            for (field, given) in [
                ("reserve", host.reserve.is_some()),
                ("bandwidth", host.bandwidth.is_some()),
                ("threads", host.threads.is_some()),
                ("link", host.link.is_some()),
            ] {
                if given {
                    out.push(format!("nodes[{i}].host.{field}"));
                }
            }
        }
    }
    if scenario.policy != Policy::Optimal {
        out.push("policy".to_owned());
    }
    if scenario.engine != stageplan::engine::Engine::default() {
        out.push("engine".to_owned());
    }
    if scenario.stages.is_some() {
        out.push("stages".to_owned());
    }
    if scenario.serving.is_some() {
        out.push("serving".to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AppState;

    /// Every field the page leaves out, set; and every field it keeps.
    const FULL: &str = r#"{
        "model": {"preset": "qwen3-30b-a3b", "weights": "q4_k_m", "name": "mine"},
        "workload": {"context": 8192, "batch": 2, "kv": "q8_0", "kv_v": "f16", "workspace": "1 GiB",
                     "prefill_chunk": 256, "flash_attention": false, "prompt": 1024, "depth": 2048, "response": 64},
        "nodes": [{"name": "desk", "device": "rtx-4090", "threads": 8,
                   "host": {"ram": "ddr5-6000-2ch", "memory": "64 GiB", "reserve": "8 GiB", "bandwidth": "80 GB/s", "threads": 12, "link": "25 GB/s"}},
                  {"name": "box", "kind": "cpu", "memory": "64 GiB", "bandwidth": "90 GB/s", "compute": "2 TFLOPS", "count": 2}],
        "links": {"default": {"bandwidth": "1.25 GB/s", "latency": "0.5 ms"}},
        "objective": "latency",
        "policy": "manual",
        "engine": "vllm",
        "stages": [{"node": "desk", "layers": [0, 48]}],
        "serving": {"users": 4}
    }"#;

    #[test]
    fn an_imported_scenario_says_what_the_form_leaves_out() {
        let full = Scenario::from_json(FULL).unwrap();
        let left = not_kept(&full);
        assert_eq!(
            left,
            [
                "model.name",
                "workload.workspace",
                "workload.prefill_chunk",
                "workload.flash_attention",
                "workload.prompt",
                "workload.depth",
                "workload.response",
                "nodes[0].threads",
                "nodes[0].host.reserve",
                "nodes[0].host.bandwidth",
                "nodes[0].host.threads",
                "nodes[0].host.link",
                "policy",
                "engine",
                "stages",
                "serving",
            ]
        );
        // Everything else comes back from the form as it was: the list is the whole loss.
        let mut kept = full.clone();
        kept.model.name = None;
        kept.workload = WorkloadSpec { kv_v: Some("f16".to_owned()), ..WorkloadSpec::default() };
        (kept.workload.context, kept.workload.batch, kept.workload.kv) = (8192, 2, "q8_0".to_owned());
        let host = kept.nodes[0].host.as_mut().unwrap();
        (host.reserve, host.bandwidth, host.threads, host.link) = (None, None, None, None);
        kept.nodes[0].threads = None;
        (kept.policy, kept.engine, kept.stages, kept.serving) = (Policy::Optimal, Default::default(), None, None);
        let through_the_form = AppState::from_scenario(&full).scenario().unwrap();
        assert_eq!(not_kept(&through_the_form), Vec::<String>::new());
        let expanded = AppState::from_scenario(&kept).scenario().unwrap();
        assert_eq!(through_the_form, expanded);
        // A scenario the page wrote imports whole.
        assert_eq!(not_kept(&AppState::default().scenario().unwrap()), Vec::<String>::new());
    }
}
