//! A running plan's JSON from untrusted text, re-planned on a fixed cluster: bad input must
//! be an error, never a panic, and a re-plan never keeps a stage on a node that is gone.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stageplan::planner::replan::current_from_json;

fn problem() -> &'static stageplan::Problem {
    static PROBLEM: OnceLock<stageplan::Problem> = OnceLock::new();
    PROBLEM.get_or_init(|| {
        stageplan::check(
            r#"{"model": {"preset": "llama-3.1-8b", "weights": "q4_k_m"},
                "nodes": [{"name": "a", "device": "rtx-3060-12gb"}, {"name": "b", "device": "m1-16gb"},
                          {"name": "c", "device": "rtx-4060-ti-16gb"}]}"#,
            stageplan::check::no_model_files,
        )
        .map(|c| c.problem)
        .expect("the fixed scenario is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(current) = current_from_json(text) else { return };
    let problem = problem();
    let Ok(result) = stageplan::replan(problem, &current, stageplan::ReplanOptions::default()) else { return };
    let names: Vec<&str> = problem.nodes.iter().map(|n| n.name.as_str()).collect();
    if current.iter().any(|s| !names.contains(&s.node.as_str())) {
        assert!(!result.kept);
    }
    let mut next = 0;
    for stage in &result.plan.stages {
        assert!(names.contains(&stage.node.as_str()));
        assert_eq!(stage.layers[0], next);
        next = stage.layers[1];
    }
    assert!(!result.plan.feasible || next == problem.model.num_layers());
});
