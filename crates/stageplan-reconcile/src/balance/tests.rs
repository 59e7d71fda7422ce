//! The judgement alone: a [`Watch`] fed measurements, pass by pass.

use super::*;
use crate::spec::Predicted;

fn planned(steps: &[f64]) -> Planned {
    let scenario = stageplan::Scenario::from_json(
        r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#,
    )
    .unwrap();
    Planned {
        scenario,
        predicted: steps.iter().map(|&step_s| Predicted { step_s, hop_s: 0.0 }).collect(),
        learned: BTreeMap::new(),
        options: BalanceOptions::default(),
        events: Vec::new(),
    }
}

fn requests(nodes: &[&str]) -> Vec<StageRequest> {
    nodes
        .iter()
        .map(|n| StageRequest {
            layers: [0, 1],
            memory: 4 << 30,
            gpus: 0,
            node: Some((*n).to_owned()),
            gpu_ids: Vec::new(),
        })
        .collect()
}

/// One pass as the loop sees it: the stages, and their machines.
struct Pass<'a> {
    stages: Vec<StageView<'a>>,
    nodes: BTreeMap<String, NodeView>,
}

impl Pass<'_> {
    /// With `node` reporting itself up or down.
    fn up(mut self, node: &str, up: bool) -> Self {
        self.nodes.entry(node.to_owned()).or_default().up = Some(up);
        self
    }
}

/// Stages measured as given on 8 GiB machines that keep a 1 GiB reserve, each holding its
/// stage and reporting `free`.
fn views<'a>(requests: &'a [StageRequest], measured: &[f64], free: &[Option<u64>]) -> Pass<'a> {
    let stages =
        requests.iter().zip(measured).map(|(request, &m)| StageView { request, tier: Tier::Gpu, measured_s: Some(m) });
    let nodes = requests.iter().zip(free).map(|(request, &memory_free)| {
        let view = NodeView { up: None, memory_free, reserve: 1 << 30, memory: 8 << 30, bound: request.memory };
        (request.node.clone().unwrap_or_default(), view)
    });
    Pass { stages: stages.collect(), nodes: nodes.collect() }
}

impl Watch {
    fn observe_at0(&mut self, planned: &Planned, pass: &Pass<'_>) -> Decision {
        self.observe(planned, &pass.stages, &pass.nodes, 0)
    }
}

#[test]
fn a_uniformly_slower_pipeline_is_not_skewed() {
    let planned = planned(&[0.01, 0.01, 0.01]);
    let requests = requests(&["a", "b", "c"]);
    let mut watch = Watch::default();
    for _ in 0..10 {
        let decision = watch.observe_at0(&planned, &views(&requests, &[0.02, 0.021, 0.019], &[None; 3]));
        assert_eq!(decision, Decision::Hold);
    }
}

#[test]
fn a_slow_stage_acts_after_the_passes_and_refits_every_measured_machine() {
    let planned = planned(&[0.01, 0.01, 0.01]);
    let requests = requests(&["a", "b", "c"]);
    let mut watch = Watch::default();
    for _ in 0..2 {
        assert_eq!(watch.observe_at0(&planned, &views(&requests, &[0.01, 0.02, 0.01], &[None; 3])), Decision::Hold);
    }
    let Decision::Replan { learned, why, forced } =
        watch.observe_at0(&planned, &views(&requests, &[0.01, 0.02, 0.01], &[None; 3]))
    else {
        panic!("three skewed passes must act")
    };
    assert!(!forced);
    assert!(why.starts_with("stage 1 on `b` ran 2.00× its prediction"), "{why}");
    assert!((learned["b"].slowdown - 2.0).abs() < 1e-9);
    assert!(!learned.contains_key("a"), "a machine as fast as planned learns nothing");
}

#[test]
fn a_pass_back_in_line_restarts_the_count() {
    let planned = planned(&[0.01, 0.01]);
    let requests = requests(&["a", "b"]);
    let mut watch = Watch::default();
    for measured in [[0.01, 0.02], [0.01, 0.02], [0.01, 0.0101], [0.01, 0.02], [0.01, 0.02]] {
        assert_eq!(watch.observe_at0(&planned, &views(&requests, &measured, &[None; 2])), Decision::Hold);
    }
}

#[test]
fn a_noisy_history_raises_the_threshold() {
    let planned = planned(&[0.01, 0.01]);
    let requests = requests(&["a", "b"]);
    let mut watch = Watch::default();
    // Swings of ±25% every pass: 1.3× for three passes is within this stage's noise.
    for i in 0..12 {
        let b = if i % 2 == 0 { 0.0125 } else { 0.0075 };
        watch.observe_at0(&planned, &views(&requests, &[0.01, b], &[None; 2]));
    }
    assert!(watch.threshold(1, Tier::Gpu) > 1.3f64.ln(), "{}", watch.threshold(1, Tier::Gpu).exp());
    for _ in 0..3 {
        assert_eq!(watch.observe_at0(&planned, &views(&requests, &[0.01, 0.013], &[None; 2])), Decision::Hold);
    }
}

#[test]
fn a_machine_down_for_the_passes_leaves_the_plan_and_comes_back() {
    let mut planned = planned(&[0.01, 0.01]);
    let requests = requests(&["a", "b"]);
    let mut watch = Watch::default();
    let down = views(&requests, &[0.01, 0.01], &[None; 2]).up("b", false);
    for _ in 0..2 {
        assert_eq!(watch.observe_at0(&planned, &down), Decision::Hold);
    }
    let Decision::Replan { learned, why, forced } = watch.observe_at0(&planned, &down) else {
        panic!("down for three passes")
    };
    assert!(forced && learned["b"].down, "{why}");
    assert_eq!(why, "`b` reported down for 3 passes: out of the plan");
    planned.learned = learned;
    let up = views(&requests, &[0.01, 0.01], &[None; 2]).up("b", true);
    for _ in 0..2 {
        assert_eq!(watch.observe_at0(&planned, &up), Decision::Hold);
    }
    let Decision::Replan { learned, forced, .. } = watch.observe_at0(&planned, &up) else { panic!("back up") };
    assert!(learned.is_empty() && !forced);
}

#[test]
fn memory_running_out_sheds_at_once_and_comes_back_after_the_passes() {
    let mut planned = planned(&[0.01, 0.01]);
    let requests = requests(&["a", "b"]);
    let mut watch = Watch::default();
    let gib = 1u64 << 30;
    let steps = [0.01, 0.01];
    // 8 GiB nodes with a 4 GiB stage each: `b` loses 1 GiB a pass to other work.
    assert_eq!(watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(4 * gib)])), Decision::Hold);
    assert_eq!(watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(3 * gib)])), Decision::Hold);
    let Decision::Replan { learned, why, forced } =
        watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(2 * gib)]))
    else {
        panic!("two passes from the reserve must shed")
    };
    assert!(forced);
    assert!(why.starts_with("`b` had 2.0 GiB free (losing 1.0 GiB a pass)"), "{why}");
    // What others hold (2 GiB), two passes of loss, half a reserve.
    assert_eq!(learned["b"].memory_taken, 2 * gib + 2 * gib + gib / 2);
    planned.learned = learned;
    // The other work exits: 4 GiB free again, and nothing held by others.
    for _ in 0..2 {
        let free = [Some(4 * gib), Some(4 * gib)];
        assert_eq!(watch.observe_at0(&planned, &views(&requests, &steps, &free)), Decision::Hold);
    }
    let Decision::Replan { learned, why, .. } =
        watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(4 * gib)]))
    else {
        panic!("memory free for three passes is given back")
    };
    assert!(why.contains("4.5 GiB given back"), "{why}");
    assert!(learned.is_empty());
}

/// A change by choice waits while a forced one acts: were they one re-plan, the hourly limit
/// that holds the one would hold the other.
#[test]
fn a_forced_change_acts_alone_and_the_chosen_one_follows() {
    let mut planned = planned(&[0.01, 0.01]);
    planned.learned.insert("a".into(), Learned { down: true, ..Learned::default() });
    let requests = requests(&["a", "b"]);
    let mut watch = Watch::default();
    let pass = || views(&requests, &[0.01, 0.01], &[None; 2]).up("a", true).up("b", false);
    for _ in 0..2 {
        assert_eq!(watch.observe_at0(&planned, &pass()), Decision::Hold);
    }
    let Decision::Replan { learned, why, forced } = watch.observe_at0(&planned, &pass()) else { panic!("b is down") };
    assert!(forced && learned["a"].down && learned["b"].down, "{why}");
    assert_eq!(why, "`b` reported down for 3 passes: out of the plan");
    planned.learned = learned;
    let Decision::Replan { learned, why, forced } = watch.observe_at0(&planned, &pass()) else { panic!("a is up") };
    assert!(!forced && !learned.contains_key("a"), "{why}");
    assert_eq!(why, "`a` reported up for 3 passes: back in the plan");
}

/// Memory taken from a machine that holds no stage any more is given back when it is free
/// again: nothing else would ever measure it.
#[test]
fn memory_is_given_back_on_a_machine_the_stages_left() {
    let gib = 1u64 << 30;
    let mut planned = planned(&[0.01]);
    planned.learned.insert("b".into(), Learned { memory_taken: 8 * gib, ..Learned::default() });
    let requests = requests(&["a"]);
    let mut watch = Watch::default();
    let mut pass = views(&requests, &[0.01], &[Some(4 * gib)]);
    pass.nodes.insert(
        "b".into(),
        NodeView { up: Some(true), memory_free: Some(8 * gib), reserve: gib, memory: 8 * gib, bound: 0 },
    );
    for _ in 0..2 {
        assert_eq!(watch.observe_at0(&planned, &pass), Decision::Hold);
    }
    let Decision::Replan { learned, why, forced } = watch.observe_at0(&planned, &pass) else { panic!("b is free") };
    assert!(!forced && learned.is_empty(), "{why}");
    assert_eq!(why, "`b` had 8.0 GiB free for 3 passes: 8.0 GiB given back to its plan");
}
