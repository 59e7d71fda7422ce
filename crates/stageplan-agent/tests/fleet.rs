//! The agent's pass on an in-memory store: what it runs for the stages bound to its node,
//! and what it reports when it cannot run them. (The engines themselves run in the CLI's
//! engine test, `agents_serve_the_plan_lose_a_machine_and_serve_again`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stageplan::{Problem, Scenario};
use stageplan_agent::fleet::{Agent, AgentConfig};
use stageplan_agent::report::{AGENTS, AgentReport, Liveness};
use stageplan_agent::{Policy, Supervisor};
use stageplan_reconcile::{
    Controller, Deployment, Event, MemoryStore, NoMetrics, Node, Planned, Snapshot, Store, planned_stages,
};

fn resolve(scenario: &Scenario) -> Result<Problem, String> {
    stageplan::check(scenario.clone(), stageplan::check::no_model_files).map(|c| c.problem).map_err(|e| e.to_string())
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stageplan-fleet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A store with nodes `m0`, `m1` and a deployment planned on them from `model`, placed by
/// the loop; and the machine of its first stage, which serves it, and the other.
fn store_with(model: &str, engine: &str) -> (MemoryStore, String, String) {
    let text = format!(
        r#"{{"model": {model}, "engine": "{engine}", "workload": {{"context": 2048}},
            "nodes": [{{"name": "m0", "kind": "cpu", "memory": "1.2 GiB", "bandwidth": "20 GB/s", "compute": "1 TFLOPS"}},
                      {{"name": "m1", "kind": "cpu", "memory": "1.2 GiB", "bandwidth": "20 GB/s", "compute": "1 TFLOPS"}}]}}"#
    );
    let checked = stageplan::check(text.as_str(), stageplan::check::no_model_files).unwrap();
    let plan = stageplan::plan(&checked.problem);
    assert!(plan.feasible && plan.stages.len() == 2, "two stages: {:?}", plan.diagnostics);
    let (stages, predicted) = planned_stages(&plan, |_| 0);
    let head = stages[0].node.clone().unwrap();
    let other = if head == "m0" { "m1" } else { "m0" }.to_owned();
    let deployment = Deployment {
        name: "tiny".into(),
        model: String::new(),
        replicas: 1,
        min_replicas: None,
        max_replicas: None,
        placement: Default::default(),
        stages,
        autoscale: None,
        last_scaled_ms: None,
        planned: Some(Box::new(Planned {
            scenario: checked.scenario,
            predicted,
            learned: BTreeMap::new(),
            options: Default::default(),
            events: Vec::new(),
        })),
    };
    let mut store = MemoryStore::default();
    let mut controller = Controller::default();
    for name in ["m0", "m1"] {
        let node = Node { name: name.into(), memory: 2 << 30, gpus: 0 };
        controller.handle(&mut store, Event::NodeJoined(node), &NoMetrics).unwrap();
    }
    controller.handle(&mut store, Event::DeploymentChanged(deployment), &NoMetrics).unwrap();
    controller.pass(&mut store, 1, &NoMetrics).unwrap();
    (store, head, other)
}

fn agent(node: &str, engine: &Path, logs: &Path) -> Agent {
    agent_reading(node, engine, logs, resolve)
}

fn agent_reading(node: &str, engine: &Path, logs: &Path, resolve: fn(&Scenario) -> Result<Problem, String>) -> Agent {
    let config = AgentConfig {
        node: node.into(),
        address: "127.0.0.1".into(),
        bind: "127.0.0.1".parse().unwrap(),
        engine: engine.to_path_buf(),
        first_port: 47000,
        lease: Duration::from_secs(2),
        cores: 2,
        resolve,
    };
    Agent::new(config, Supervisor::new(Policy::new(logs.join(node))).unwrap())
}

fn report(store: &mut MemoryStore, node: &str) -> AgentReport {
    let records = store.list(&format!("{AGENTS}{node}")).unwrap();
    serde_json::from_str(&records[0].1.value).unwrap()
}

#[test]
fn a_replica_it_cannot_run_is_reported_and_its_machine_taken_for_down() {
    let dir = temp_dir("cannot");
    // A preset has no file for llama-server to load.
    let (mut store, head, _) = store_with(r#"{"preset": "llama-3.2-1b", "weights": "q8_0"}"#, "llama.cpp");
    let mut serving = agent(&head, &dir, &dir);
    serving.pass(&mut store).unwrap();
    let written = report(&mut store, &head);
    assert_eq!(&written, serving.report());
    let replica = &written.replicas["tiny/0"];
    assert!(replica.problem.as_deref().unwrap().contains("names no model file"), "{replica:?}");
    assert!(replica.processes.is_empty());
    assert!(!written.runs_what_it_is_given());
    assert!(!Liveness::default().up([&written], std::time::Instant::now())[&head]);

    // A plan for another engine is refused by name.
    let (mut store, head, _) = store_with(r#"{"preset": "llama-3.2-1b", "weights": "q8_0"}"#, "vllm");
    let mut serving = agent(&head, &dir, &dir);
    serving.pass(&mut store).unwrap();
    let problem = serving.report().replicas["tiny/0"].problem.clone().unwrap();
    assert!(problem.contains("the agent runs llama.cpp"), "{problem}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_agent_stops_on_request_and_says_so() {
    let dir = temp_dir("stop");
    let (mut store, _, _) = store_with(r#"{"preset": "llama-3.2-1b", "weights": "q8_0"}"#, "llama.cpp");
    let mut m0 = agent("m0", &dir, &dir);
    m0.pass(&mut store).unwrap();
    m0.pass(&mut store).unwrap();
    assert_eq!(report(&mut store, "m0").beat, 2);
    m0.stop(&mut store).unwrap();
    let stopped = report(&mut store, "m0");
    assert!(stopped.stopped && stopped.replicas.is_empty(), "{stopped:?}");
    assert!(!Liveness::default().up([&stopped], std::time::Instant::now())["m0"]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn no_model_here(_: &Scenario) -> Result<Problem, String> {
    Err("the model file is not on this machine".to_owned())
}

/// A machine that does not serve the replica never reads the model (an rpc-server machine
/// seldom has the file): it starts the rpc-server the serving machine published for it,
/// once that machine dials it at the block it published, and nothing else.
#[test]
fn a_machine_that_does_not_serve_runs_what_the_serving_one_published() {
    use stageplan_agent::launch::Published;
    use stageplan_agent::report::ReplicaReport;
    use stageplan_reconcile::{Expect, Op};
    let dir = temp_dir("follow");
    let engine = dir.join("bin");
    std::fs::create_dir_all(&engine).unwrap();
    let script = engine.join("ggml-rpc-server");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (mut store, head, other) = store_with(r#"{"preset": "llama-3.2-1b", "weights": "q8_0"}"#, "llama.cpp");
    let mut follower = agent_reading(&other, &engine, &dir, no_model_here);
    follower.pass(&mut store).unwrap();
    let waiting = &follower.report().replicas["tiny/0"];
    assert_eq!((waiting.port, waiting.problem.as_deref(), waiting.processes.len()), (47000, None, 0), "{waiting:?}");

    let publish = |store: &mut MemoryStore, dialed: &str, program: &str| {
        let launch = Published {
            machine: other.clone(),
            program: program.to_owned(),
            env: Vec::new(),
            args: ["--host", "127.0.0.1", "--port", "47000", "--threads"]
                .iter()
                .map(|a| Some((*a).to_owned()))
                .chain([None])
                .collect(),
            dialed: Some(dialed.to_owned()),
        };
        let replica = ReplicaReport {
            port: 46000,
            endpoint: None,
            problem: None,
            processes: Vec::new(),
            receipt: None,
            receipt_failed: None,
            hosts: [(other.clone(), dialed.to_owned())].into_iter().collect(),
            launches: vec![launch],
        };
        let record = AgentReport {
            node: head.clone(),
            address: "127.0.0.1".into(),
            beat: 1,
            lease_ms: 2000,
            stopped: false,
            replicas: [("tiny/0".to_owned(), replica)].into_iter().collect(),
        };
        let value = serde_json::to_string(&record).unwrap();
        store.commit(&[Op::Put { key: format!("{AGENTS}{head}"), value, expect: Expect::Any }]).unwrap();
    };
    // Dialed at another port (a block it no longer has): not followed.
    publish(&mut store, "127.0.0.1:47100", "ggml-rpc-server");
    follower.pass(&mut store).unwrap();
    assert!(follower.report().replicas["tiny/0"].processes.is_empty());
    // Dialed here: its rpc-server runs.
    publish(&mut store, "127.0.0.1:47000", "ggml-rpc-server");
    follower.pass(&mut store).unwrap();
    let running = &follower.report().replicas["tiny/0"];
    assert_eq!(running.processes.len(), 1, "{running:?}");
    assert_eq!(running.processes[0].name, "tiny/0/rpc0");
    assert!(running.problem.is_none(), "{running:?}");
    // A record that names another program is refused, never run.
    publish(&mut store, "127.0.0.1:47000", "sh");
    follower.pass(&mut store).unwrap();
    let refused = follower.report().replicas["tiny/0"].problem.clone().unwrap();
    assert!(refused.contains("starts `llama-server` and `ggml-rpc-server` only"), "{refused}");

    // Re-planned (a layer moved between the stages) while `min_replicas` holds its only
    // replica: it serves its old split until its turn, and this machine its rpc-server.
    publish(&mut store, "127.0.0.1:47000", "ggml-rpc-server");
    follower.pass(&mut store).unwrap();
    let serving = follower.report().replicas["tiny/0"].processes.clone();
    assert_eq!(serving.len(), 1, "{serving:?}");
    let (mut replanned, _) = Snapshot::load(&mut store).unwrap().deployments["tiny"].clone();
    replanned.min_replicas = Some(1);
    replanned.stages[0].layers[1] -= 1;
    replanned.stages[1].layers[0] -= 1;
    let mut controller = Controller::default();
    controller.handle(&mut store, Event::DeploymentChanged(replanned), &NoMetrics).unwrap();
    let held = controller.pass(&mut store, 2, &NoMetrics).unwrap();
    assert!(held.released.is_empty(), "{held:?}");
    follower.pass(&mut store).unwrap();
    assert_eq!(follower.report().replicas["tiny/0"].processes, serving, "the old split runs on");

    // A replica whose bindings are not a whole pipeline (a stage gone) runs nothing.
    let bound = format!("{}tiny/0/1", stageplan_reconcile::store::ASSIGNMENTS);
    store.commit(&[Op::Delete { key: bound, expect: Expect::Any }]).unwrap();
    follower.pass(&mut store).unwrap();
    assert!(!follower.report().replicas.contains_key("tiny/0"), "{:?}", follower.report());
    drop(follower);
    let _ = std::fs::remove_dir_all(&dir);
}
