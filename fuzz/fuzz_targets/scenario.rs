//! Scenario JSON from untrusted text, all the way through planning, and the same text as one
//! machine's entry: bad input must be an error, never a panic, and every plan well formed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The same text as one machine (an agent's `--node-file`): read and checked, or refused.
    if let Ok(spec) = stageplan::scenario::NodeSpec::from_json(text) {
        let _ = stageplan::check::machine_nodes(&spec);
    }
    let Ok(checked) = stageplan::check(text, stageplan::check::no_model_files) else { return };
    let problem = checked.problem;
    // Keep each run short: the planner is exponential in distinct nodes by design.
    if problem.nodes.len() > 12 || problem.model.num_layers() > 512 {
        return;
    }
    // A scenario's `serving` of a few users, at a rate and with lengths drawn where it says:
    // answered or refused, never a panic (targets search many counts, too slow for a fuzz
    // run).
    if let Some(demand) = problem.serving
        && demand.targets.is_none()
        && demand.users.is_some_and(|users| users <= 8)
        && problem.nodes.len() <= 4
    {
        let _ = stageplan::serving::answer(&problem, demand);
    }
    let plan = stageplan::plan(&problem);
    if plan.feasible {
        let mut next = 0;
        for stage in &plan.stages {
            assert_eq!(stage.layers[0], next);
            assert!(stage.memory.total <= stage.memory.budget);
            next = stage.layers[1];
        }
        assert_eq!(next, problem.model.num_layers());
        // Decode at the stated depth (`workload.depth`, `response`): a speed, never a NaN,
        // reading no more cache than the context holds.
        if let Some(at) = &plan.at_depth {
            assert!(at.tokens_per_s.is_finite() && at.tokens_per_s > 0.0, "{at:?}");
            assert!(at.tokens <= problem.workload.context.max(1), "{at:?}");
        }
    }
});
