//! Re-balancing against hostile measurements (issue #32): machines that flap, limits past
//! what the record keeps, memory that comes back once every layer has left.

use std::collections::BTreeMap;

use stageplan::device::DeviceKind;

use super::*;

/// A fast GPU, a CPU box that can hold the whole model, and a spare CPU box.
const SCENARIO: &str = r#"{
  "model": {"preset": "llama-3.1-8b", "weights": "q4_k_m"},
  "nodes": [
    {"name": "gpu", "device": "rtx-4090"},
    {"name": "cpu", "kind": "cpu", "memory": "64 GiB", "bandwidth": "51 GB/s", "compute": "1 TFLOPS", "reserve": "4 GiB"},
    {"name": "spare", "kind": "cpu", "memory": "64 GiB", "bandwidth": "40 GB/s", "compute": "1 TFLOPS", "reserve": "4 GiB"}
  ],
  "objective": "throughput",
  "policy": "optimal"
}"#;

/// What the machines report in one pass.
#[derive(Default)]
struct Reports {
    up: BTreeMap<String, bool>,
    free: BTreeMap<String, u64>,
}

impl Metrics for Reports {
    fn utilization(&self, _: &str) -> Option<f64> {
        None
    }
    fn memory_free(&self, node: &str) -> Option<u64> {
        self.free.get(node).copied()
    }
    fn node_up(&self, node: &str) -> Option<bool> {
        self.up.get(node).copied()
    }
}

fn problem() -> stageplan::Problem {
    stageplan::check(SCENARIO, stageplan::check::no_model_files).expect("the scenario resolves").problem
}

fn gpus(kind: Option<DeviceKind>) -> u32 {
    u32::from(kind == Some(DeviceKind::Gpu))
}

/// `chat`, one replica of `scenario`'s plan re-balanced with `options`, as `deploy` writes
/// it; and the scenario's machines as the nodes they are.
fn planned_deployment(scenario: &str, options: BalanceOptions) -> (Deployment, Vec<Node>) {
    let problem = stageplan::check(scenario, stageplan::check::no_model_files).expect("the scenario resolves").problem;
    let plan = stageplan::plan(&problem);
    assert!(plan.feasible);
    let (stages, predicted) = planned_stages(&plan, |s| gpus(s.kind));
    let mut deployment = Deployment::new("chat", 1, stages);
    let scenario = stageplan::Scenario::from_json(scenario).unwrap();
    deployment.planned =
        Some(Box::new(Planned { scenario, predicted, learned: BTreeMap::new(), options, events: Vec::new() }));
    let nodes: Vec<Node> =
        problem.nodes.iter().map(|n| Node { name: n.name.clone(), memory: n.memory, gpus: gpus(n.kind) }).collect();
    (deployment, nodes)
}

/// One replica of the scenario's plan, re-balanced with `options`, placed at 0 ms.
fn planned_world(options: BalanceOptions) -> World {
    let (deployment, nodes) = planned_deployment(SCENARIO, options);
    let mut world = World::new(&nodes, &[deployment]);
    world.pass(0);
    world
}

impl World {
    /// The nodes and layers of `chat`'s stages.
    fn split(&mut self) -> Vec<(String, [usize; 2])> {
        let snapshot = self.snapshot();
        snapshot.deployments["chat"].0.stages.iter().map(|s| (s.node.clone().unwrap_or_default(), s.layers)).collect()
    }

    fn planned(&mut self) -> Planned {
        *self.snapshot().deployments["chat"].0.planned.clone().unwrap()
    }

    /// Free memory per node as bound, less what `others` hold.
    fn free_with(&mut self, others: &BTreeMap<&str, u64>) -> BTreeMap<String, u64> {
        let snapshot = self.snapshot();
        snapshot
            .nodes
            .values()
            .map(|(n, _)| {
                let bound: u64 =
                    snapshot.assignments.values().filter(|(a, _)| a.node == n.name).map(|(a, _)| a.memory).sum();
                let held = others.get(n.name.as_str()).copied().unwrap_or(0);
                (n.name.clone(), n.memory.saturating_sub(bound).saturating_sub(held))
            })
            .collect()
    }

    fn pass_with(&mut self, now_ms: u64, reports: &Reports) -> PassReport {
        let report = self.controller.pass(&mut self.store, now_ms, reports).unwrap();
        self.check();
        report
    }
}

/// Runs `chat` with `gpu` reported down on odd passes and up on even ones, a pass every
/// `pass_ms`; returns the passes that moved layers, each with whether `gpu` was down (a
/// forced move) or up (a move by choice).
fn flapping(options: BalanceOptions, passes: u64, pass_ms: u64) -> Vec<(u64, bool)> {
    let mut world = planned_world(options);
    let mut moves = Vec::new();
    for pass in 1..=passes {
        let down = pass % 2 == 1;
        let reports = Reports { up: [("gpu".to_owned(), !down)].into(), free: world.free_with(&BTreeMap::new()) };
        let before = world.split();
        world.pass_with(pass * pass_ms, &reports);
        if world.split() != before {
            moves.push((pass, down));
        }
    }
    moves
}

/// Issue #32, item 5: moves forced off a machine that is down always happen and do not
/// count; the moves back onto it count, `max_moves_per_hour` of them in any hour. A machine
/// flapping every pass, a pass a minute for two hours: with a limit of 4, four moves back and
/// five off in the first hour, then again once the first move back is an hour old; with a
/// limit of 0, one move off and none back.
#[test]
fn a_machine_flapping_every_pass_moves_back_only_within_the_limit() {
    let options = |limit| BalanceOptions { passes: 1, max_moves_per_hour: limit, ..BalanceOptions::default() };
    let first_hour = (1..=9).map(|pass| (pass, pass % 2 == 1));
    let second_hour = (62..=69).map(|pass| (pass, pass % 2 == 1));
    let expected: Vec<(u64, bool)> = first_hour.chain(second_hour).collect();
    assert_eq!(flapping(options(4), 120, 60_000), expected);
    assert_eq!(flapping(options(0), 120, 60_000), [(1, true)]);
}

/// Issue #32, item 6: a limit over the 20 events a record keeps applies. A machine flapping
/// every 10 s with a limit of 25: 25 moves back (and 26 off) in 80 passes, not 80 moves.
#[test]
fn a_limit_over_the_events_kept_still_applies() {
    let options = BalanceOptions { passes: 1, max_moves_per_hour: 25, ..BalanceOptions::default() };
    let moves = flapping(options, 80, 10_000);
    let expected: Vec<(u64, bool)> = (1..=51).map(|pass| (pass, pass % 2 == 1)).collect();
    assert_eq!(moves, expected, "{} moves, {} by choice", moves.len(), moves.iter().filter(|m| !m.1).count());
}

/// Issue #32, item 6: re-plans that keep the split are events too, and must not push the
/// move the limit counts out of the record. A limit of 1: one move by choice, then 25
/// refits that move nothing (a spare machine's speed), then a second move waits.
#[test]
fn refits_that_keep_the_split_do_not_hide_a_move_from_the_limit() {
    let options = BalanceOptions { max_moves_per_hour: 1, ..BalanceOptions::default() };
    let mut world = planned_world(options);
    let problem = problem();
    let mut deployment = world.snapshot().deployments["chat"].0.clone();
    let replan = |deployment: &Deployment, learned: &[(&str, Learned)], now_ms: u64| {
        let learned = learned.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect();
        let planned = deployment.planned.as_deref().unwrap();
        crate::replan::replanned(deployment, planned, &problem, learned, "test", false, now_ms)
    };
    let slow = |slowdown| Learned { slowdown, ..Learned::default() };
    let gpu_slow = ("gpu", slow(100.0));
    deployment = replan(&deployment, &[gpu_slow], 0).unwrap();
    assert!(deployment.stages.iter().all(|s| s.node.as_deref() != Some("gpu")), "{:?}", deployment.stages);
    for minute in 1..=25u64 {
        let spare = ("spare", slow(1.5 + minute as f64 / 100.0));
        deployment = replan(&deployment, &[gpu_slow, spare], minute * 60_000).unwrap();
        let event = deployment.planned.as_ref().unwrap().events.last().unwrap().clone();
        assert_eq!(event.moved_stages, 0, "{event:?}");
    }
    // The latest events, and the move the limit still counts.
    let events = &deployment.planned.as_ref().unwrap().events;
    assert_eq!((events.len(), events[0].at_ms), (spec::EVENTS_KEPT + 1, 0));
    let held = replan(&deployment, &[], 30 * 60_000).unwrap_err();
    assert!(held.contains("`max_moves_per_hour` 1"), "{held}");
    // An hour after the move, it may move again.
    replan(&deployment, &[], 60 * 60_000).unwrap();
}

/// Issue #32, item 7: one pass with no memory free on the GPU sends every layer to the CPU
/// box; once the GPU reports its memory free for the passes, what was taken is given back
/// and the layers return.
#[test]
fn memory_taken_from_a_machine_left_empty_is_given_back() {
    let mut world = planned_world(BalanceOptions::default());
    let planned_split = world.split();
    let pass_ms = 10_000;
    let plenty = |world: &mut World| Reports { free: world.free_with(&BTreeMap::new()), ..Reports::default() };
    for pass in 1..=3 {
        let reports = plenty(&mut world);
        world.pass_with(pass * pass_ms, &reports);
    }
    let mut reports = plenty(&mut world);
    reports.free.insert("gpu".into(), 0);
    world.pass_with(4 * pass_ms, &reports);
    assert!(world.split().iter().all(|(node, _)| node != "gpu"), "{:?}", world.split());
    assert!(world.planned().learned["gpu"].memory_taken > 0);
    for pass in 5..=33 {
        let reports = plenty(&mut world);
        world.pass_with(pass * pass_ms, &reports);
    }
    assert_eq!(world.split(), planned_split, "{:#?}", world.planned().events);
    assert!(world.planned().learned.is_empty(), "{:?}", world.planned().learned);
}

/// A planned stage runs on the cluster node named as its machine, so a scenario machine
/// named `spare box` (which the scenario allows) could never be a node: the stages forced
/// off a GPU that is down could not move there, nor could what the loop learns of it be
/// written, and the deployment would be held every pass, its fail-over silently lost. The
/// record check refuses it where the deployment is written (`deploy`, the controller), so
/// the loop never reads a deployment it cannot move.
#[test]
fn a_machine_that_cannot_be_a_node_is_refused_where_the_deployment_is_written() {
    let scenario = SCENARIO.replace(r#""name": "cpu""#, r#""name": "spare box""#);
    let (deployment, nodes) = planned_deployment(&scenario, BalanceOptions::default());
    // The plan leaves it empty: only a fail-over would use it.
    assert!(deployment.stages.iter().all(|s| s.node.as_deref() == Some("gpu")), "{:?}", deployment.stages);
    let error = deployment.check().unwrap_err().to_string();
    assert!(
        error.starts_with("`planned.scenario.nodes[1].name` `spare box` cannot be a cluster node's name"),
        "{error}"
    );
    assert!(nodes[1].check().is_err());
    let mut world = World::new(&[], &[]);
    let refused = world.controller.handle(&mut world.store, Event::DeploymentChanged(deployment), &NoMetrics);
    assert!(matches!(refused, Err(StoreError::Invalid { .. })), "{refused:?}");
    assert!(world.snapshot().deployments.is_empty());
}

/// The names checked are the planner's: trimmed, and with `count` the machines `name-1` …
/// `name-N`, the longest of which must still be a node's name (at most 200 characters).
#[test]
fn machine_names_are_checked_as_the_planner_makes_them() {
    let scenario = |name: &str, count: u32| {
        format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}},
                "nodes": [{{"name": "{name}", "device": "rtx-4090", "count": {count}}}]}}"#
        )
    };
    let fits = format!("  {}  ", "a".repeat(197));
    let (deployment, nodes) = planned_deployment(&scenario(&fits, 10), BalanceOptions::default());
    deployment.check().unwrap();
    for node in &nodes {
        node.check().unwrap();
    }
    let (deployment, nodes) = planned_deployment(&scenario(&"a".repeat(198), 10), BalanceOptions::default());
    assert!(nodes[9].check().is_err());
    let error = deployment.check().unwrap_err().to_string();
    assert!(error.starts_with("`planned.scenario.nodes[0].name` `aaa"), "{error}");
    assert!(error.contains("with `count` 10"), "{error}");
}

/// A machine with several GPUs (issue #46): its stages are pinned to it and to the plan's
/// GPUs there, a tensor-parallel group's memory is its GPUs' together, and the machine down
/// takes all its GPUs out of the re-plan.
#[test]
fn a_machines_gpus_run_the_stages_the_plan_put_on_each() {
    // Llama 3.1 70B needs both of `box`'s GPUs; `desk` alone cannot hold it.
    let scenario = r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"}, "workload": {"context": 4096},
        "nodes": [{"name": "box", "gpus": [{"device": "rtx-3060-12gb"}, {"device": "rtx-4090"}, {"device": "rtx-3090"}], "gpu_link": "pcie4-x8"},
                  {"name": "desk", "device": "rtx-3060-12gb"}],
        "objective": "latency"}"#;
    let problem = stageplan::check(scenario, stageplan::check::no_model_files).unwrap().problem;
    let plan = stageplan::plan(&problem);
    let on_box: Vec<u32> = plan
        .stages
        .iter()
        .filter(|s| s.gpu_of.as_ref().is_some_and(|g| g.machine == "box"))
        .flat_map(|s| {
            if s.tensor_parallel.is_empty() {
                vec![s.gpu_of.as_ref().unwrap().index]
            } else {
                s.tensor_parallel.clone()
            }
        })
        .collect();
    assert!(
        on_box.len() >= 2 && on_box != [0, 1],
        "{:?}",
        plan.stages.iter().map(stageplan::plan::Stage::label).collect::<Vec<_>>()
    );
    let (deployment, _) = planned_deployment(scenario, BalanceOptions::default());
    deployment.check().expect("a machine with several GPUs is a node");
    let mut memory: BTreeMap<&str, u64> = BTreeMap::new();
    for n in &problem.nodes {
        *memory.entry(n.gpu_of.as_ref().map_or(n.name.as_str(), |g| g.machine.as_str())).or_default() += n.memory;
    }
    let nodes = [
        Node { name: "box".into(), memory: memory["box"], gpus: 3 },
        Node { name: "desk".into(), memory: memory["desk"], gpus: 1 },
    ];
    let mut world = World::new(&nodes, &[deployment]);
    world.pass(0);
    // Each stage on `box` holds the GPU the plan gave it there, not the lowest free one.
    let bound = world.bound();
    let taken: Vec<u32> = (0..plan.stages.len())
        .filter_map(|k| bound.get(&spec::assignment_key("chat", 0, k)))
        .filter(|a| a.node == "box")
        .flat_map(|a| a.gpus.clone())
        .collect();
    assert_eq!(taken, on_box);
    // A re-plan that moves a stage to other GPUs of the same machine, same layers: it moves.
    let mut moved = world.snapshot().deployments["chat"].0.clone();
    let stage = moved.stages.iter().position(|s| s.node.as_deref() == Some("box")).unwrap();
    let free: Vec<u32> = (0..3).filter(|g| !on_box.contains(g)).collect();
    let mut ids = moved.stages[stage].gpu_ids.clone();
    ids[0] = free[0];
    moved.stages[stage].gpu_ids = ids.clone();
    world.event(Event::DeploymentChanged(moved));
    world.pass(1);
    assert_eq!(world.bound()[&spec::assignment_key("chat", 0, stage)].gpus, ids);
    // `box` down: none of its GPUs is planned on; what is left cannot hold the model.
    for pass in 1..=u64::from(BalanceOptions::default().passes) {
        let reports = Reports { up: [("box".to_owned(), false)].into(), free: world.free_with(&BTreeMap::new()) };
        world.pass_with(pass * 10_000, &reports);
    }
    let event = world.planned().events.last().cloned().expect("a re-balance");
    assert!(event.reason.contains("no split fits what is left"), "{event:?}");

    // Under vLLM the plan is one tensor-parallel group: it asks for both GPUs, by id, and
    // for their memory together.
    let group = r#"{"model": {"preset": "llama-3.1-8b", "weights": "bf16"}, "workload": {"context": 4096}, "engine": "vllm",
        "nodes": [{"name": "box", "gpus": [{"device": "rtx-4090", "count": 2}], "gpu_link": "nvlink-bridge"}]}"#;
    let plan = stageplan::plan(&stageplan::check(group, stageplan::check::no_model_files).unwrap().problem);
    assert_eq!(plan.stages[0].tensor_parallel, [0, 1]);
    let (stages, _) = planned_stages(&plan, |_| 1);
    let share = plan.stages[0].memory.total - plan.stages[0].memory.reserve;
    assert_eq!(
        (stages[0].node.as_deref(), stages[0].gpus, stages[0].gpu_ids.as_slice()),
        (Some("box"), 2, &[0, 1][..])
    );
    assert_eq!(stages[0].memory, 2 * share);
    assert_eq!(stages[0].plan_node().as_deref(), Some("box/gpu0"));
}
