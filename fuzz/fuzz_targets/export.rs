//! A real plan bent by untrusted bytes — stage ranges, node names, the model's layer count,
//! addresses and options — exported to every target: a malformed plan must be an error,
//! never a panic, and an exported plan's stages must tile the layers.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stageplan::Plan;
use stageplan::export::{ExportOptions, Target, export};

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let problem = stageplan::check(
            r#"{"model": {"preset": "mixtral-8x7b", "weights": "q4_k_m"},
                "nodes": [{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "m4-pro-64gb"},
                          {"name": "c", "device": "cpu-ddr5-dual-channel"}]}"#,
            stageplan::check::no_model_files,
        )
        .map(|c| c.problem)
        .expect("the fixed scenario is valid");
        stageplan::plan(&problem)
    })
}

/// Names that stress quoting and checks.
const NAMES: [&str; 10] = ["a", "b", "c", "", "a b", "x\"y", "yes", "0x10", "n:1", "über-machine.example"];
const ADDRESSES: [&str; 6] = ["10.0.0.1", "10.0.0.1:50053", "[::1]:50052", "host:", " ", "a,b"];

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.iter().copied();
    let mut next = || bytes.next().unwrap_or(0);
    let mut plan = plan().clone();
    let stages = usize::from(next() % 6);
    plan.stages.truncate(stages.max(1));
    while plan.stages.len() < stages {
        let copy = plan.stages[0].clone();
        plan.stages.push(copy);
    }
    for stage in &mut plan.stages {
        stage.layers = [usize::from(next()), usize::from(next())];
        stage.node = NAMES[usize::from(next()) % NAMES.len()].to_owned();
    }
    if next() % 4 == 0 {
        plan.model.layers = usize::from(next());
    }
    plan.feasible = next() % 8 != 0;
    plan.workload.context = u64::from(next()) << (next() % 40);
    plan.workload.batch = u64::from(next());
    let mut options = ExportOptions::default();
    for _ in 0..next() % 3 {
        let node = NAMES[usize::from(next()) % NAMES.len()].to_owned();
        options.hosts.insert(node, ADDRESSES[usize::from(next()) % ADDRESSES.len()].to_owned());
    }
    if next() % 2 == 0 {
        options.main = Some(NAMES[usize::from(next()) % NAMES.len()].to_owned());
    }
    for target in Target::ALL {
        let Ok(exported) = export(&plan, target, &options) else { continue };
        assert!(plan.feasible && !exported.text.is_empty());
        let mut at = 0;
        for stage in &plan.stages {
            assert_eq!(stage.layers[0], at);
            assert!(stage.layers[1] > at);
            at = stage.layers[1];
        }
    }
});
