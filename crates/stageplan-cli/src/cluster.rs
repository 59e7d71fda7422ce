//! `reconcile`, `deploy`, `nodes` and `status`: the control loop and the commands that act
//! on its store.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stageplan::Scenario;
use stageplan::presets::DeviceKind;
use stageplan::quote::{line, shell};
use stageplan::units::{Bytes, Seconds, format_bytes};
use stageplan_reconcile::observe::Observations;
use stageplan_reconcile::spec::{MAX_GPUS_PER_NODE, parse_assignment_key};
use stageplan_reconcile::store::{ASSIGNMENTS, DEPLOYMENTS, NODES};
use stageplan_reconcile::{
    BalanceOptions, Controller, Deployment, Event, Expect, Metrics, NoMetrics, Node, Op, Planned, Snapshot, Status,
    Store, StoreError, check_invariants, planned_stages,
};
use stageplan_store::AnyStore;
use tracing::{info, warn};

use crate::observe::Sources;
use crate::outcome::Failure;

/// How long a command waits for a redb file that the loop holds during a pass.
const OPEN_PATIENCE: Duration = Duration::from_secs(5);

/// `--store` must name a store that exists: commands that read, or change what is there,
/// never create one.
fn must_exist(target: &str) -> Result<(), Failure> {
    if !target.starts_with("etcd://") && crate::input::probe(Path::new(target)).is_none() {
        return Err(Failure(format!(
            "`--store {target}` does not exist; register machines with `stageplan nodes add`, or give the store's path"
        )));
    }
    regular_store(target)
}

/// The most `status` copies into memory: far above any real store (100,000 replicas take
/// tens of megabytes).
const MAX_READ_STORE_BYTES: u64 = 1 << 30;

/// A redb store path, when something is there, must be a regular file: a FIFO would block
/// the open forever and `/dev/zero` would be read until memory runs out.
fn regular_store(target: &str) -> Result<(), Failure> {
    if target.starts_with("etcd://") {
        return Ok(());
    }
    let path = Path::new(target);
    match crate::input::probe(path) {
        None => Ok(()),
        Some(meta) => {
            let meta = meta?;
            crate::input::regular(path, &meta).map_err(|e| Failure(format!("`--store`: {e}")))?;
            if meta.len() > MAX_READ_STORE_BYTES {
                return Err(Failure(format!(
                    "`--store {target}` is over {} GiB; a stageplan store is far smaller: check the path",
                    MAX_READ_STORE_BYTES >> 30
                )));
            }
            Ok(())
        }
    }
}

/// Opens `--store` for reading only (`status`, `nodes list`): a redb file must exist, and
/// is never created or written.
fn open_read_only(target: &str) -> Result<AnyStore, Failure> {
    must_exist(target)?;
    patiently(target, stageplan_store::open_read_only).map_err(|e| store_failure(target, &e))
}

/// Opens `--store` for reading and writing (a redb file is created if missing).
pub(crate) fn open(target: &str) -> Result<AnyStore, Failure> {
    regular_store(target)?;
    patiently(target, stageplan_store::open).map_err(|e| store_failure(target, &e))
}

fn store_failure(target: &str, error: &StoreError) -> Failure {
    Failure(format!("`--store {target}`: {error}"))
}

/// Calls `open`, waiting a little while another process holds the redb file (the loop holds
/// it during a pass); anything else (damage, permissions, etcd down) is reported at once.
fn patiently(target: &str, open: fn(&str) -> Result<AnyStore, StoreError>) -> Result<AnyStore, StoreError> {
    let started = Instant::now();
    loop {
        match open(target) {
            Err(StoreError::Locked { .. }) if started.elapsed() < OPEN_PATIENCE => {
                std::thread::sleep(Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Reads a deployment file: a [`Deployment`], where `stages` may be left out when a
/// `scenario` (inline, or a path relative to the file) says what to plan.
pub(crate) fn read_deployment(path: &Path, text: &str) -> Result<Deployment, Failure> {
    let at = |e: String| Failure(format!("`{}`: {e}", path.display()));
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| at(format!("is not valid JSON ({e})")))?;
    let object = value.as_object_mut().ok_or_else(|| at("is not a JSON object; give a deployment".into()))?;
    let scenario = object.remove("scenario");
    let gpus_per_stage = object.remove("gpus_per_stage");
    let rebalance = match object.remove("rebalance") {
        None | Some(serde_json::Value::Bool(false)) => None,
        Some(_) if scenario.is_none() => {
            return Err(at("`rebalance` needs a `scenario`: the loop re-plans from it".into()));
        }
        Some(serde_json::Value::Bool(true)) => Some(BalanceOptions::default()),
        Some(options) => Some(
            serde_json::from_value::<BalanceOptions>(options)
                .map_err(|e| at(format!("`rebalance`: {e}; give `true` or an object of its options")))?,
        ),
    };
    // GPUs per planned stage: a whole number a node can hold, never wrapped into range.
    let gpus = match &gpus_per_stage {
        None => None,
        Some(_) if scenario.is_none() => {
            return Err(at(
                "`gpus_per_stage` is for stages planned from a `scenario`; give `gpus` in each of `stages`".into(),
            ));
        }
        Some(value) => {
            Some(value.as_u64().and_then(|g| u32::try_from(g).ok()).filter(|&g| g <= MAX_GPUS_PER_NODE).ok_or_else(
                || at(format!("`gpus_per_stage` `{value}` must be a whole number from 0 to {MAX_GPUS_PER_NODE}")),
            )?)
        }
    };
    if let Some(scenario) = scenario {
        if object.contains_key("stages") {
            return Err(at("has both `stages` and `scenario`; give one".into()));
        }
        let here = path.parent().unwrap_or(Path::new("."));
        // A model file is relative to the file the scenario is in.
        let (scenario_text, base) = match &scenario {
            serde_json::Value::String(file) => {
                let file = here.join(file);
                let text = crate::input::read_text(&file).map_err(|e| at(format!("`scenario`: {e}")))?;
                (text, file.parent().unwrap_or(here).to_path_buf())
            }
            other => (other.to_string(), here.to_path_buf()),
        };
        let checked =
            crate::load::check(&base, scenario_text.as_str()).map_err(|e| at(format!("`scenario`: {}", e.0)))?;
        let (mut parsed, problem) = (checked.scenario, checked.problem);
        // The loop re-reads a model file from anywhere: keep its path absolute.
        if let Some(file) = parsed.model.file.as_mut() {
            *file = std::path::absolute(base.join(&*file)).unwrap_or_else(|_| base.join(&*file)).display().to_string();
        }
        let plan = stageplan::plan(&problem);
        if !plan.feasible {
            let why = plan.diagnostics.first().map_or_else(String::new, |d| format!(": {}", d.message));
            return Err(at(format!("`scenario` does not fit its machines{why}")));
        }
        let kinds = stageplan::export::ExportOptions::for_problem(&problem).kinds;
        let name = object.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
        // Only the stages and the model are taken from the template; `replicas` stays as given.
        let template = Deployment::from_plan(&name, &plan, 1, 1);
        // A stage takes a GPU unless its machine holds it in RAM (a Mac, a CPU box).
        let gpus_of =
            |node: &str| gpus.unwrap_or(u32::from(kinds.get(node).copied().unwrap_or_default() == DeviceKind::Gpu));
        let (mut stages, predicted) = planned_stages(&plan, |s| gpus_of(&s.node));
        if let Some(options) = rebalance {
            let planned =
                Planned { scenario: parsed, predicted, learned: Default::default(), options, events: Vec::new() };
            object.insert("planned".into(), serde_json::to_value(&planned).map_err(|e| at(e.to_string()))?);
        } else {
            // Without re-balancing, a stage may run on any node that fits.
            stages.iter_mut().for_each(|s| s.node = None);
        }
        object.insert("stages".into(), serde_json::to_value(&stages).map_err(|e| at(e.to_string()))?);
        object.entry("model").or_insert(serde_json::Value::String(template.model));
    } else if object.contains_key("planned") {
        return Err(at(
            "`planned` is written by `stageplan deploy` from a `scenario` with `rebalance`; remove it".into()
        ));
    }
    let deployment: Deployment = serde_json::from_value(value).map_err(|e| at(e.to_string()))?;
    // The file says `rebalance` for what the record keeps as `planned.options`.
    deployment.check().map_err(|e| at(e.to_string().replace("`planned.options.", "`rebalance.")))?;
    Ok(deployment)
}

/// `stageplan deploy`: writes the deployment; the loop places it.
pub(crate) fn deploy(store: &str, path: &Path, text: &str) -> Result<String, Failure> {
    let deployment = read_deployment(path, text)?;
    let mut store = open(store)?;
    let summary = format!(
        "deployment `{}`: {} replica{} × {} stage{} ({} per replica)\n",
        deployment.name,
        deployment.replicas,
        if deployment.replicas == 1 { "" } else { "s" },
        deployment.stages.len(),
        if deployment.stages.len() == 1 { "" } else { "s" },
        format_bytes(deployment.stages.iter().map(|s| s.memory as f64).sum()),
    );
    Controller::default().handle(&mut store, Event::DeploymentChanged(deployment), &NoMetrics)?;
    Ok(summary)
}

/// `stageplan undeploy`: removes a deployment, readable or quarantined, and releases every
/// stage binding under its name at once (a quarantined deployment's bindings are otherwise
/// kept: the loop never releases what it cannot read).
pub(crate) fn undeploy(store: &str, name: &str) -> Result<String, Failure> {
    // A `/` would make `assignments/NAME/` the prefix of another deployment's replica.
    if name.is_empty() || name.contains('/') {
        return Err(Failure(format!("`{}` cannot be a deployment's name: it is empty or holds `/`", line(name))));
    }
    must_exist(store)?;
    let mut store = open(store)?;
    let key = format!("{DEPLOYMENTS}{name}");
    let prefix = format!("{ASSIGNMENTS}{name}/");
    let deployed = store.list(DEPLOYMENTS)?;
    if deployed.iter().any(|(k, _)| *k == key) {
        // The deployment first: a pass in between releases its readable bindings as not desired.
        Controller::default().handle(&mut store, Event::DeploymentRemoved(name.to_owned()), &NoMetrics)?;
    } else if store.list(&prefix)?.is_empty() {
        // Bindings left without their deployment record (orphans) are released all the same.
        let known: Vec<String> =
            deployed.iter().filter_map(|(k, _)| k.strip_prefix(DEPLOYMENTS)).map(|k| line(k).into_owned()).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(Failure(format!("deployment `{}` is not deployed; deployed: {known}", line(name))));
    }
    let max_ops = store.max_ops().max(1);
    let mut bindings = store.list(&prefix)?;
    let held = bindings.len();
    // Each delete expects the binding as read; a pass that released some first makes a
    // transaction fail, and the rest is read again.
    for _ in 0..8 {
        for chunk in bindings.chunks(max_ops) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|(key, v)| Op::Delete { key: key.clone(), expect: Expect::Revision(v.revision) })
                .collect();
            match store.commit(&ops) {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        bindings = store.list(&prefix)?;
        if bindings.is_empty() {
            break;
        }
    }
    let s = if held == 1 { "" } else { "s" };
    Ok(match bindings.len() {
        0 => format!("deployment `{name}` removed; its {held} stage binding{s} released\n"),
        left => format!(
            "deployment `{name}` removed; {} of its {held} stage binding{s} released, the next pass releases the rest\n",
            held - left
        ),
    })
}

/// `stageplan nodes add`.
pub(crate) fn add_node(store: &str, name: &str, memory: &str, gpus: u32) -> Result<String, Failure> {
    let bytes = Bytes::parse(memory).map_err(|e| Failure(format!("`--memory`: {e}")))?;
    // The scenario's limit, with its words: past it the number would be stored clamped.
    if bytes.get() > 1e18 {
        return Err(Failure(format!("`--memory`: `{memory}` is over an exabyte; check the unit")));
    }
    let node = Node { name: name.to_owned(), memory: bytes.get() as u64, gpus };
    node.check().map_err(|e| Failure(format!("node {e}")))?;
    let mut store = open(store)?;
    Controller::default().handle(&mut store, Event::NodeJoined(node), &NoMetrics)?;
    Ok(format!("node `{name}`: {bytes}, {gpus} GPU{}\n", if gpus == 1 { "" } else { "s" }))
}

/// `stageplan nodes remove`.
pub(crate) fn remove_node(store: &str, name: &str) -> Result<String, Failure> {
    must_exist(store)?;
    let mut store = open(store)?;
    let snapshot = Snapshot::load(&mut store)?;
    let quarantined = snapshot.quarantined.iter().any(|(key, _)| key.strip_prefix(NODES) == Some(name));
    if !snapshot.nodes.contains_key(name) && !quarantined {
        let known: Vec<&str> = snapshot.nodes.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(Failure(format!("node `{name}` is not registered; registered: {known}")));
    }
    Controller::default().handle(&mut store, Event::NodeLeft(name.to_owned()), &NoMetrics)?;
    Ok(format!("node `{name}` removed; the next pass moves its stages\n"))
}

/// What `status` and `nodes list` show.
#[derive(serde::Serialize)]
pub(crate) struct ClusterStatus {
    pub deployments: Vec<DeploymentStatus>,
    pub nodes: Vec<NodeStatus>,
    pub assignments: usize,
    pub invariants: String,
    /// Records this version cannot use: left as they are, with what they keep bound.
    pub quarantined: Vec<QuarantinedStatus>,
}

/// A record the loop leaves alone, and the stage bindings it holds in place: a deployment's
/// own, a node's stages, or the binding itself.
#[derive(serde::Serialize)]
pub(crate) struct QuarantinedStatus {
    pub key: String,
    pub why: String,
    pub bindings: usize,
}

#[derive(serde::Serialize)]
pub(crate) struct DeploymentStatus {
    pub name: String,
    pub model: String,
    pub desired: u32,
    pub running: u32,
    pub failed: u32,
    pub pending: u32,
    /// A planned deployment's stages, measured against predicted (`rebalance` deployments).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStatus>,
    /// Seconds per token of the whole pipeline: predicted (the stages' sum) and measured
    /// (as its engine reports it), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_token_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_token_s: Option<f64>,
    /// What the loop learned about the machines, by node.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub learned: BTreeMap<String, stageplan_reconcile::Learned>,
    /// The latest re-balance, with why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rebalance: Option<stageplan_reconcile::Rebalance>,
}

/// One stage of a planned deployment: where it runs, what it was predicted to take per
/// decode step and what it measures (the median over its replicas).
#[derive(serde::Serialize)]
pub(crate) struct StageStatus {
    pub node: String,
    pub layers: [usize; 2],
    pub predicted_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_s: Option<f64>,
}

#[derive(serde::Serialize)]
pub(crate) struct NodeStatus {
    pub name: String,
    pub memory: u64,
    pub memory_used: u64,
    pub gpus: u32,
    pub gpus_used: u32,
    pub stages: usize,
}

pub(crate) fn status(store: &str, sources: &Sources) -> Result<ClusterStatus, Failure> {
    let mut store = open_read_only(store)?;
    let snapshot = Snapshot::load(&mut store)?;
    let seen = if sources.any() { Some(measure(sources)) } else { None };
    let deployments = snapshot
        .deployments
        .values()
        .map(|(d, _)| {
            let (mut running, mut failed) = (0, 0);
            for replica in 0..d.replicas {
                let stages: Vec<Option<Status>> = (0..d.stages.len())
                    .map(|s| {
                        let key = stageplan_reconcile::assignment_key(&d.name, replica, s);
                        snapshot
                            .assignments
                            .get(&key)
                            .filter(|(a, _)| snapshot.nodes.contains_key(&a.node))
                            .map(|(a, _)| a.status)
                    })
                    .collect();
                if stages.contains(&Some(Status::Failed)) {
                    failed += 1;
                } else if stages.iter().all(Option::is_some) {
                    running += 1;
                }
            }
            let planned = d.planned.as_ref();
            let stages = planned.map_or_else(Vec::new, |p| {
                d.stages
                    .iter()
                    .zip(&p.predicted)
                    .enumerate()
                    .map(|(s, (request, predicted))| {
                        let mut measured: Vec<f64> = (0..d.replicas)
                            .filter_map(|r| seen.as_ref().and_then(|o| o.stage_step_s(&d.name, r, s)))
                            .collect();
                        measured.sort_by(f64::total_cmp);
                        StageStatus {
                            node: request.node.clone().unwrap_or_default(),
                            layers: request.layers,
                            predicted_s: predicted.step_s,
                            measured_s: (!measured.is_empty()).then(|| measured[(measured.len() - 1) / 2]),
                        }
                    })
                    .collect()
            });
            DeploymentStatus {
                name: d.name.clone(),
                model: d.model.clone(),
                desired: d.replicas,
                running,
                failed,
                pending: d.replicas - running - failed,
                stages,
                predicted_token_s: planned.map(|p| p.predicted.iter().map(|s| s.step_s).sum()),
                measured_token_s: seen.as_ref().and_then(|o| o.token_s.get(&d.name).copied()),
                learned: planned.map(|p| p.learned.clone()).unwrap_or_default(),
                last_rebalance: planned.and_then(|p| p.events.last().cloned()),
            }
        })
        .collect();
    let nodes = snapshot
        .nodes
        .values()
        .map(|(n, _)| {
            let on: Vec<_> = snapshot.assignments.values().filter(|(a, _)| a.node == n.name).collect();
            NodeStatus {
                name: n.name.clone(),
                memory: n.memory,
                memory_used: on.iter().map(|(a, _)| a.memory).fold(0, u64::saturating_add),
                gpus: n.gpus,
                gpus_used: on.iter().map(|(a, _)| a.gpus.len() as u32).sum(),
                stages: on.len(),
            }
        })
        .collect();
    let invariants = match check_invariants(&snapshot) {
        Ok(()) => "ok".to_owned(),
        Err(v) => format!("VIOLATED: {v}"),
    };
    let quarantined = snapshot
        .quarantined
        .iter()
        .map(|(key, why)| {
            let bindings = if let Some(name) = key.strip_prefix(DEPLOYMENTS) {
                snapshot
                    .assignments
                    .keys()
                    .filter(|k| parse_assignment_key(k).is_some_and(|(d, _, _)| d == name))
                    .count()
            } else if let Some(name) = key.strip_prefix(NODES) {
                snapshot.assignments.values().filter(|(a, _)| a.node == name).count()
            } else {
                1
            };
            QuarantinedStatus { key: key.clone(), why: why.clone(), bindings }
        })
        .collect();
    Ok(ClusterStatus { deployments, nodes, assignments: snapshot.assignments.len(), invariants, quarantined })
}

pub(crate) fn render_status(status: &ClusterStatus) -> String {
    let mut out = String::new();
    out.push_str("deployments                  desired  running  pending  failed  model\n");
    for d in &status.deployments {
        out.push_str(&format!(
            "  {:<26} {:>7}  {:>7}  {:>7}  {:>6}  {}\n",
            line(&d.name),
            d.desired,
            d.running,
            d.pending,
            d.failed,
            line(&d.model)
        ));
    }
    for d in status.deployments.iter().filter(|d| !d.stages.is_empty()) {
        out.push_str(&render_planned(d));
    }
    out.push('\n');
    out.push_str(&render_nodes(&status.nodes));
    if !status.quarantined.is_empty() {
        out.push_str("\nquarantined: this version cannot use these records, so what they hold stays bound\n");
        for q in &status.quarantined {
            let s = if q.bindings == 1 { "" } else { "s" };
            out.push_str(&format!("  {:<26} {:>7} binding{s}  {}\n", line(&q.key), q.bindings, line(&q.why)));
            out.push_str(&format!("  {:<26} fix: {}\n", "", quarantine_fix(&q.key)));
        }
    }
    out.push_str(&format!("\n{} stage bindings · invariants {}\n", status.assignments, status.invariants));
    out
}

/// A planned deployment's stages, measured against predicted, and its last re-balance.
fn render_planned(d: &DeploymentStatus) -> String {
    let ms = |s: f64| format!("{:.1} ms", s * 1e3);
    let ratio = |measured: Option<f64>, predicted: f64| {
        measured.map_or_else(|| "not measured".to_owned(), |m| format!("{} ({:.2}×)", ms(m), m / predicted))
    };
    let mut out = format!("\n{}: per decode step, predicted → measured\n", line(&d.name));
    for (i, stage) in d.stages.iter().enumerate() {
        let layers = format!("layers {}–{}", stage.layers[0], stage.layers[1].saturating_sub(1));
        out.push_str(&format!(
            "  stage {i}  {:<16} {:<14} {:>9} → {}\n",
            line(&stage.node),
            layers,
            ms(stage.predicted_s),
            ratio(stage.measured_s, stage.predicted_s)
        ));
    }
    if let Some(predicted) = d.predicted_token_s {
        out.push_str(&format!(
            "  {:<40} {:>9} → {}\n",
            "per token, all stages",
            ms(predicted),
            ratio(d.measured_token_s, predicted)
        ));
    }
    for (node, learned) in &d.learned {
        let mut facts = Vec::new();
        if learned.slowdown != 1.0 {
            facts.push(format!("{:.2}× its figures' time", learned.slowdown));
        }
        if learned.memory_taken > 0 {
            facts.push(format!("{} held by other work", format_bytes(learned.memory_taken as f64)));
        }
        out.push_str(&format!("  learned: `{}` {}\n", line(node), facts.join(", ")));
    }
    match &d.last_rebalance {
        Some(event) => {
            let ago = now_ms().saturating_sub(event.at_ms) / 60_000;
            out.push_str(&format!("  last re-balance, {ago} min ago: {}\n", line(&event.reason)));
        }
        None => out.push_str("  no re-balance yet\n"),
    }
    out
}

/// What releases what a quarantined record holds.
fn quarantine_fix(key: &str) -> String {
    // Names from a store are untrusted: quoted for the shell the command is pasted into.
    if let Some(name) = key.strip_prefix(DEPLOYMENTS) {
        format!("`stageplan deploy` a corrected file named `{}`, or `stageplan undeploy {}`", line(name), shell(name))
    } else if let Some(name) = key.strip_prefix(NODES) {
        format!("`stageplan nodes add {} --memory …` again, or `stageplan nodes remove {}`", shell(name), shell(name))
    } else {
        let deployment = key.strip_prefix(ASSIGNMENTS).and_then(|k| k.split('/').next()).unwrap_or(key);
        format!("placement waits until it is gone: `stageplan undeploy {}` removes it", shell(deployment))
    }
}

pub(crate) fn render_nodes(nodes: &[NodeStatus]) -> String {
    let mut out = String::from("nodes                        memory used / total      GPUs used  stages\n");
    for n in nodes {
        out.push_str(&format!(
            "  {:<26} {:>10} / {:<10}  {:>4} / {:<4} {:>6}\n",
            line(&n.name),
            format_bytes(n.memory_used as f64),
            format_bytes(n.memory as f64),
            n.gpus_used,
            n.gpus,
            n.stages
        ));
    }
    out
}

/// Loop settings.
pub(crate) struct LoopOptions {
    pub interval: Duration,
    pub passes: Option<u64>,
    pub id: String,
    pub lease: Duration,
    pub sources: Sources,
}

/// This pass's measurements; a source that is down or unreadable gives none, and the
/// placement stays as it is (one warning per source per pass, never a stop).
fn measure(sources: &Sources) -> Observations {
    let (seen, problems) = sources.read();
    for problem in problems {
        warn!(problem = %line(&problem), "no measurements this pass; placement stays as it is");
    }
    seen
}

/// How the loop turns a planned deployment's scenario into a problem: like `plan`, model
/// files included (their paths were made absolute by `deploy`).
fn resolve(scenario: &Scenario) -> Result<stageplan::Problem, String> {
    crate::load::check(Path::new("."), scenario.clone()).map(|c| c.problem).map_err(|e| e.0)
}

/// `stageplan reconcile`: a pass every interval. A redb file is opened for each pass so
/// `deploy`, `nodes` and `status` can use it in between; on etcd, only the leader passes.
pub(crate) fn reconcile(target: &str, options: &LoopOptions) -> Result<String, Failure> {
    let mut controller = Controller::new(stageplan_reconcile::Options { resolve, ..Default::default() });
    let mut etcd = if target.starts_with("etcd://") { Some(open(target)?) } else { None };
    // etcd leases are whole seconds: round up, never below what was asked.
    let lease_s = options.lease.as_secs_f64().ceil().max(1.0) as i64;
    info!(store = target, interval_ms = options.interval.as_millis() as u64, "reconcile loop started");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)) {
        warn!(error = %e, "cannot catch Ctrl-C; stopping will leave the lease to lapse");
    }
    let mut passes = 0u64;
    let mut failure = None;
    loop {
        let started = Instant::now();
        let metrics = measure(&options.sources);
        let result = match &mut etcd {
            Some(AnyStore::Etcd(store)) => match store.try_lead(&options.id, lease_s) {
                Ok(true) => Some(controller.pass(store, now_ms(), &metrics)),
                Ok(false) => {
                    info!(id = %options.id, leader = ?store.leader_id().ok().flatten(), "following");
                    None
                }
                Err(e) => Some(Err(e)),
            },
            _ => Some(
                patiently(target, stageplan_store::open)
                    .and_then(|mut store| controller.pass(&mut store, now_ms(), &metrics)),
            ),
        };
        match result {
            Some(Ok(report)) => {
                for (key, why) in &report.quarantined {
                    warn!(record = %line(key), why = %line(why), "record left alone: this version cannot use it");
                }
                for (name, from, to) in &report.rescaled {
                    info!(deployment = %line(name), from, to, "autoscaled");
                }
                for (name, why) in &report.rebalanced {
                    info!(deployment = %line(name), why = %line(why), "re-balanced");
                }
                for (name, why) in &report.held {
                    info!(deployment = %line(name), why = %line(why), "re-balance held");
                }
                info!(
                    scheduled = report.scheduled.len(),
                    released = report.released.len(),
                    pending = report.pending.len(),
                    rescaled = report.rescaled.len(),
                    rebalanced = report.rebalanced.len(),
                    commits = report.commits,
                    ms = (started.elapsed().as_secs_f64() * 1e4).round() / 10.0,
                    "pass"
                );
            }
            // A damaged store does not heal by waiting: stop, and say what it is and what to do.
            Some(Err(e @ StoreError::Corrupt { .. })) => {
                failure = Some(store_failure(target, &e));
                break;
            }
            Some(Err(e)) => warn!(error = %e, "pass stopped; the next pass starts from the store"),
            None => {}
        }
        passes += 1;
        if options.passes.is_some_and(|n| passes >= n) {
            break;
        }
        // Sleep in short steps so a stop request is seen within 50 ms.
        while started.elapsed() < options.interval && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(options.interval.saturating_sub(started.elapsed()).min(Duration::from_millis(50)));
        }
        if stop.load(Ordering::SeqCst) {
            info!("stopping");
            break;
        }
    }
    if let Some(AnyStore::Etcd(store)) = &mut etcd {
        let _ = store.resign();
    }
    failure.map_or(Ok(String::new()), Err)
}

/// Parses `--interval` and `--lease`: 1 ms to 24 h (a shorter time would run as 0 ms).
pub(crate) fn duration(flag: &str, text: &str) -> Result<Duration, Failure> {
    let seconds = Seconds::parse(text).map_err(|e| Failure(format!("`{flag}`: {e}")))?;
    if !(0.001..=86_400.0).contains(&seconds.get()) {
        return Err(Failure(format!("`{flag} {text}` must be between 1 ms and 24 h, e.g. `5s`")));
    }
    Ok(Duration::from_secs_f64(seconds.get()))
}
