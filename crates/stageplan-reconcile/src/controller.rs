//! The control loop's pass: level-triggered and idempotent, with every decision persisted in
//! compare-and-swap transactions before it counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use stageplan::{Problem, Scenario};

use crate::balance::{Decision, StageView, Tier, Watch};
use crate::capacity::{Capacity, Unreplayable};
use crate::spec::{
    Assignment, Deployment, EVENTS_KEPT, Node, Planned, Rebalance, Status, assignment_key, parse_assignment_key,
};
use crate::store::{ASSIGNMENTS, DEPLOYMENTS, Expect, NODES, Op, Store, StoreError, Versioned};

/// The loop's inputs: one closed set of events.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Run a pass at this time (ms on the caller's clock).
    Tick {
        now_ms: u64,
    },
    NodeJoined(Node),
    /// A node's capacity changed (a GPU swapped, memory taken by other work).
    NodeChanged(Node),
    NodeLeft(String),
    /// A replica stopped working; the next pass places it again.
    ReplicaFailed {
        deployment: String,
        replica: u32,
    },
    /// A deployment was created or edited.
    DeploymentChanged(Deployment),
    DeploymentRemoved(String),
    Shutdown,
}

/// What the running deployments measure: load for autoscaling, stage times and free memory
/// for re-balancing. Injectable, so tests and simulations drive it; the CLI reads it from a
/// file or a Prometheus server.
pub trait Metrics {
    /// Mean utilization of the deployment's replicas (1.0 = at capacity), if known.
    fn utilization(&self, deployment: &str) -> Option<f64>;

    /// Measured seconds per decode step of one stage of one replica, if known.
    fn stage_step_s(&self, _deployment: &str, _replica: u32, _stage: usize) -> Option<f64> {
        None
    }

    /// Bytes free on a node now (device memory, or RAM for GPU-less nodes), if known.
    fn memory_free(&self, _node: &str) -> Option<u64> {
        None
    }

    /// Whether a node reports itself up (serving), if known.
    fn node_up(&self, _node: &str) -> Option<bool> {
        None
    }
}

/// No metrics: autoscaling holds.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn utilization(&self, _: &str) -> Option<f64> {
        None
    }
}

impl Metrics for BTreeMap<String, f64> {
    fn utilization(&self, deployment: &str) -> Option<f64> {
        self.get(deployment).copied()
    }
}

/// Failed tries after which a replica missing stages gives back the ones it holds.
const GIVE_BACK_AFTER: u32 = 3;

/// Turns a planned deployment's scenario into a problem: the CLI reads model files, the
/// default knows presets and inline configs.
pub type Resolve = fn(&Scenario) -> Result<Problem, String>;

fn resolve_without_files(scenario: &Scenario) -> Result<Problem, String> {
    scenario.problem().map_err(|e| e.to_string())
}

/// Backoff for replicas that do not fit: `base × 2^attempts`, capped, times a jitter in
/// [0.5, 1] drawn from the replica's id (deterministic: no randomness in the core); and
/// how planned deployments' scenarios are resolved for re-balancing.
#[derive(Clone, Debug)]
pub struct Options {
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub resolve: Resolve,
}

impl Default for Options {
    fn default() -> Options {
        Options { backoff_base_ms: 1_000, backoff_cap_ms: 300_000, resolve: resolve_without_files }
    }
}

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PassReport {
    /// Assignment keys bound this pass.
    pub scheduled: Vec<String>,
    /// Assignment keys released, with why.
    pub released: Vec<(String, Release)>,
    /// Replicas (`deployment/replica`) still without a full pipeline.
    pub pending: Vec<String>,
    /// Deployments autoscaled: name, from, to.
    pub rescaled: Vec<(String, u32, u32)>,
    /// Planned deployments re-balanced from measurements: name, and what was measured and
    /// done (also kept in the deployment's record).
    pub rebalanced: Vec<(String, String)>,
    /// Planned deployments the loop could not re-balance although it wanted to, with why
    /// (the hourly limit, a scenario that no longer resolves, a roll that waits).
    pub held: Vec<(String, String)>,
    /// Records left alone because this version cannot use them, with why (see
    /// [`Snapshot::quarantined`]).
    pub quarantined: Vec<(String, String)>,
    /// Transactions committed.
    pub commits: usize,
}

impl PassReport {
    /// Whether the pass changed nothing in the store.
    pub fn is_quiet(&self) -> bool {
        self.commits == 0
    }
}

/// Why an assignment was released.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// Its deployment, replica or stage is no longer desired.
    NotDesired,
    /// The stage's request changed; it is placed again.
    Changed,
    /// Its node left.
    NodeGone,
    /// Its node no longer has room for it (the node shrank, or a record is inconsistent).
    NoRoom,
    /// The replica failed.
    Failed,
    /// The replica's other stages could not be placed after repeated tries: its bound
    /// stages are given back so they do not hold room no complete replica can use.
    Incomplete,
}

/// A replica's backoff.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Backoff {
    attempts: u32,
    next_ms: u64,
}

/// Everything read from the store, with revisions.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub deployments: BTreeMap<String, (Deployment, u64)>,
    pub nodes: BTreeMap<String, (Node, u64)>,
    pub assignments: BTreeMap<String, (Assignment, u64)>,
    /// Records this version cannot use (they do not parse, fail their checks, or their key
    /// does not match their name), with why. They are left as they are: what is bound to a
    /// quarantined deployment or node is never released, and a quarantined assignment (whose
    /// capacity is unknown) stops placements until it is fixed.
    pub quarantined: Vec<(String, String)>,
}

impl Snapshot {
    /// Reads every record (at one revision, where the store can).
    ///
    /// # Errors
    /// The store is unavailable.
    pub fn load(store: &mut impl Store) -> Result<Snapshot, StoreError> {
        let mut lists = store.list_many(&[DEPLOYMENTS, NODES, ASSIGNMENTS])?.into_iter();
        let mut snapshot = Snapshot::default();
        let deployments = lists.next().unwrap_or_default();
        snapshot.deployments = named(deployments, DEPLOYMENTS, &mut snapshot.quarantined, |d: &Deployment| {
            d.check().map(|()| d.name.as_str()).map_err(|e| e.to_string())
        });
        let nodes = lists.next().unwrap_or_default();
        snapshot.nodes = named(nodes, NODES, &mut snapshot.quarantined, |n: &Node| {
            n.check().map(|()| n.name.as_str()).map_err(|e| e.to_string())
        });
        for (key, v) in lists.next().unwrap_or_default() {
            let Some(name) = key.strip_prefix(ASSIGNMENTS) else {
                snapshot.quarantined.push((key, format!("the store listed it under `{ASSIGNMENTS}`")));
                continue;
            };
            if !canonical_key(name) {
                snapshot.quarantined.push((key, "the key is not `deployment/replica/stage`".to_owned()));
                continue;
            }
            match serde_json::from_str::<Assignment>(&v.value) {
                Ok(a) => {
                    snapshot.assignments.insert(name.to_owned(), (a, v.revision));
                }
                Err(e) => snapshot.quarantined.push((key, e.to_string())),
            }
        }
        Ok(snapshot)
    }

    /// Names of the deployments and nodes whose records are quarantined, and whether an
    /// assignment is.
    fn quarantine(&self) -> (BTreeSet<&str>, BTreeSet<&str>, bool) {
        let mut deployments = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        let mut assignment = false;
        for (key, _) in &self.quarantined {
            if let Some(name) = key.strip_prefix(DEPLOYMENTS) {
                deployments.insert(name);
            } else if let Some(name) = key.strip_prefix(NODES) {
                nodes.insert(name);
            } else {
                assignment = true;
            }
        }
        (deployments, nodes, assignment)
    }
}

/// Records that carry their own name: decoded, checked (`check` returns the name) and kept
/// under their name when it matches their key; the others go to `quarantined` with why.
fn named<T: serde::de::DeserializeOwned>(
    records: Vec<(String, Versioned)>,
    prefix: &str,
    quarantined: &mut Vec<(String, String)>,
    check: impl Fn(&T) -> Result<&str, String>,
) -> BTreeMap<String, (T, u64)> {
    let mut out = BTreeMap::new();
    for (key, v) in records {
        let Some(name) = key.strip_prefix(prefix) else {
            // A store that lists keys outside the prefix asked for is broken; name the key.
            quarantined.push((key, format!("the store listed it under `{prefix}`")));
            continue;
        };
        let parsed = serde_json::from_str::<T>(&v.value).map_err(|e| e.to_string()).and_then(|record| {
            match check(&record)? {
                own if own == name => Ok(()),
                own => Err(format!("its name is `{own}`, not `{name}`")),
            }
            .map(|()| record)
        });
        match parsed {
            Ok(record) => {
                out.insert(name.to_owned(), (record, v.revision));
            }
            Err(why) => quarantined.push((key, why)),
        }
    }
    out
}

/// Whether `key` is exactly what [`assignment_key`] writes: numbers without signs or
/// leading zeros, so no stage can be bound under two spellings.
fn canonical_key(key: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    parse_assignment_key(key).is_some() && key.rsplitn(3, '/').take(2).all(number)
}

/// The controller: the pass, and the little it remembers between passes (backoff, what
/// re-balancing watches). Losing it (a restart) loses no decision: those are in the store.
#[derive(Clone, Debug, Default)]
pub struct Controller {
    options: Options,
    backoff: HashMap<String, Backoff>,
    /// Nodes seen by the last pass: a new one ends every backoff, since it may be the room.
    known_nodes: BTreeSet<String>,
    /// Per planned deployment: the measurements watched for skew.
    watches: HashMap<String, Watch>,
    /// Per planned deployment: its scenario's hash and what it resolved to.
    problems: HashMap<String, (blake3::Hash, Result<Problem, String>)>,
}

/// A record refused before it is written: it fails the check a pass reads it with.
fn invalid(key: String, error: &crate::spec::SpecError) -> StoreError {
    StoreError::Invalid { key, problem: error.to_string() }
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Writes `ops` in transactions of at most `store.max_ops()`; `group` ops stay together.
fn commit_groups(store: &mut impl Store, groups: Vec<Vec<Op>>, report: &mut PassReport) -> Result<(), StoreError> {
    let max = store.max_ops().max(1);
    let mut batch: Vec<Op> = Vec::new();
    for group in groups {
        if !batch.is_empty() && batch.len() + group.len() > max {
            store.commit(&batch)?;
            report.commits += 1;
            batch.clear();
        }
        batch.extend(group);
    }
    if !batch.is_empty() {
        store.commit(&batch)?;
        report.commits += 1;
    }
    Ok(())
}

/// Writes a node's new capacity, evicting first the stages it can no longer hold. The record
/// is written expecting the revision just read (or its absence), so a placement on the node
/// in between makes this read again instead of shrinking the node under the new stage.
fn write_node(store: &mut impl Store, node: &Node) -> Result<(), StoreError> {
    let key = format!("{NODES}{}", node.name);
    let max = store.max_ops().max(2);
    'attempt: for _ in 0..8 {
        let current = store.list(&key)?.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v.revision);
        let mut capacity = Capacity::new([(node.clone(), 0)]);
        let mut evictions = Vec::new();
        for (assignment_key, record) in store.list(ASSIGNMENTS)? {
            let Ok(assignment) = serde_json::from_str::<Assignment>(&record.value) else { continue };
            if assignment.node == node.name && capacity.replay(&assignment).is_err() {
                evictions.push(Op::Delete { key: assignment_key, expect: Expect::Revision(record.revision) });
            }
        }
        // Evictions that do not fit in the node's own transaction go first: they only free room.
        let (early, late) = evictions.split_at(evictions.len().saturating_sub(max - 1));
        for chunk in early.chunks(max) {
            match store.commit(chunk) {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => continue 'attempt,
                Err(e) => return Err(e),
            }
        }
        let mut ops = late.to_vec();
        let expect = current.map_or(Expect::Absent, Expect::Revision);
        ops.push(Op::Put { key: key.clone(), value: json(node), expect });
        match store.commit(&ops) {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict { key })
}

impl Controller {
    pub fn new(options: Options) -> Controller {
        Controller { options, ..Controller::default() }
    }

    /// When a replica (`deployment/replica`) that did not fit will be tried again.
    pub fn retry_at(&self, replica: &str) -> Option<u64> {
        self.backoff.get(replica).map(|b| b.next_ms)
    }

    /// Handles one event: facts are written to the store, a tick runs a pass.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a node or deployment that fails its check (a pass would
    /// quarantine it), with nothing written; otherwise the store failed, and nothing past the
    /// failed transaction was written.
    pub fn handle(
        &mut self,
        store: &mut impl Store,
        event: Event,
        metrics: &dyn Metrics,
    ) -> Result<Option<PassReport>, StoreError> {
        match event {
            Event::Tick { now_ms } => return self.pass(store, now_ms, metrics).map(Some),
            Event::NodeJoined(node) | Event::NodeChanged(node) => {
                node.check().map_err(|e| invalid(format!("{NODES}{}", node.name), &e))?;
                write_node(store, &node)?;
            }
            Event::NodeLeft(name) => {
                store.commit(&[Op::Delete { key: format!("{NODES}{name}"), expect: Expect::Any }])?;
            }
            Event::DeploymentChanged(deployment) => {
                deployment.check().map_err(|e| invalid(format!("{DEPLOYMENTS}{}", deployment.name), &e))?;
                let value = json(&deployment);
                store.commit(&[Op::Put {
                    key: format!("{DEPLOYMENTS}{}", deployment.name),
                    value,
                    expect: Expect::Any,
                }])?;
            }
            Event::DeploymentRemoved(name) => {
                store.commit(&[Op::Delete { key: format!("{DEPLOYMENTS}{name}"), expect: Expect::Any }])?;
            }
            Event::ReplicaFailed { deployment, replica } => {
                let prefix = format!("{ASSIGNMENTS}{deployment}/{replica}/");
                let groups: Vec<Vec<Op>> = store
                    .list(&prefix)?
                    .into_iter()
                    .filter_map(|(key, v)| {
                        let mut assignment: Assignment = serde_json::from_str(&v.value).ok()?;
                        assignment.status = Status::Failed;
                        Some(vec![Op::Put { key, value: json(&assignment), expect: Expect::Revision(v.revision) }])
                    })
                    .collect();
                commit_groups(store, groups, &mut PassReport::default())?;
            }
            Event::Shutdown => {}
        }
        Ok(None)
    }

    /// One pass at `now_ms`: read everything; autoscale; release what is not desired, on a
    /// vanished node, failed or without room; place what is missing; persist each step.
    ///
    /// # Errors
    /// The store failed or another writer changed a record first; the steps before were
    /// persisted, and the next pass starts from what the store holds.
    pub fn pass(
        &mut self,
        store: &mut impl Store,
        now_ms: u64,
        metrics: &dyn Metrics,
    ) -> Result<PassReport, StoreError> {
        let mut report = PassReport::default();
        let mut snapshot = Snapshot::load(store)?;
        report.quarantined = snapshot.quarantined.clone();
        if snapshot.nodes.keys().any(|n| !self.known_nodes.contains(n)) {
            self.backoff.clear();
            self.known_nodes = snapshot.nodes.keys().cloned().collect();
        }
        let rebalanced = self.rebalance(store, &mut snapshot, now_ms, metrics, &mut report)?;
        self.autoscale(store, &mut snapshot, now_ms, metrics, &rebalanced, &mut report)?;
        let mut capacity = Capacity::new(snapshot.nodes.values().map(|(n, r)| (n.clone(), *r)));
        self.release(store, &snapshot, &mut capacity, &mut report)?;
        self.place(store, &snapshot, &mut capacity, now_ms, &mut report)?;
        Ok(report)
    }

    /// Re-balances planned deployments from what they measure (see [`crate::balance`]):
    /// refits their machines, re-plans with the fewest-moves search and writes the new
    /// stages, which the release step then moves a replica at a time. Returns the
    /// deployments written.
    fn rebalance(
        &mut self,
        store: &mut impl Store,
        snapshot: &mut Snapshot,
        now_ms: u64,
        metrics: &dyn Metrics,
        report: &mut PassReport,
    ) -> Result<BTreeSet<String>, StoreError> {
        let Controller { options, watches, problems, .. } = self;
        let planned = |name: &String| snapshot.deployments.get(name).is_some_and(|(d, _)| d.planned.is_some());
        watches.retain(|name, _| planned(name));
        problems.retain(|name, _| planned(name));
        let mut written = BTreeSet::new();
        let mut groups = Vec::new();
        for (name, (deployment, revision)) in &mut snapshot.deployments {
            let Some(plan) = &deployment.planned else { continue };
            let hash = blake3::hash(json(&plan.scenario).as_bytes());
            let resolved = match problems.get(name) {
                Some((h, resolved)) if *h == hash => resolved,
                _ => &problems.entry(name.clone()).insert_entry((hash, (options.resolve)(&plan.scenario))).into_mut().1,
            };
            let problem = match resolved {
                Ok(problem) => problem,
                Err(why) => {
                    report.held.push((name.clone(), format!("its scenario no longer resolves: {why}")));
                    continue;
                }
            };
            let views = stage_views(name, deployment, problem, &snapshot.assignments, metrics);
            let up: BTreeMap<String, bool> =
                problem.nodes.iter().filter_map(|n| Some((n.name.clone(), metrics.node_up(&n.name)?))).collect();
            let decision = watches.entry(name.clone()).or_default().observe(plan, &views, &up, now_ms);
            let Decision::Replan { learned, why, urgent } = decision else { continue };
            match replanned(deployment, plan, problem, learned, &why, urgent, now_ms) {
                Ok(updated) => {
                    let event = updated.planned.as_ref().and_then(|p| p.events.last()).map(|e| e.reason.clone());
                    report.rebalanced.push((name.clone(), event.unwrap_or_default()));
                    *deployment = updated;
                    let key = format!("{DEPLOYMENTS}{name}");
                    groups.push(vec![Op::Put { key, value: json(deployment), expect: Expect::Revision(*revision) }]);
                    written.insert(name.clone());
                }
                Err(held) => report.held.push((name.clone(), held)),
            }
        }
        commit_groups(store, groups, report)?;
        Ok(written)
    }

    fn autoscale(
        &mut self,
        store: &mut impl Store,
        snapshot: &mut Snapshot,
        now_ms: u64,
        metrics: &dyn Metrics,
        rebalanced: &BTreeSet<String>,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let mut groups = Vec::new();
        for (name, (deployment, revision)) in &mut snapshot.deployments {
            let Some(rule) = &deployment.autoscale else { continue };
            if rebalanced.contains(name) {
                // Written this pass already: its revision moved on. The next pass scales it.
                continue;
            }
            let Some(load) = metrics.utilization(name).filter(|u| u.is_finite() && *u >= 0.0) else { continue };
            let ratio = load / rule.target;
            if (ratio - 1.0).abs() <= rule.tolerance {
                continue;
            }
            let (min, max) = deployment.bounds();
            let wanted = ((f64::from(deployment.replicas.max(1)) * ratio).ceil() as u64)
                .clamp(u64::from(min), u64::from(max)) as u32;
            if wanted == deployment.replicas {
                continue;
            }
            let cooldown = if wanted > deployment.replicas { rule.up_cooldown_ms } else { rule.down_cooldown_ms };
            if deployment.last_scaled_ms.is_some_and(|t| now_ms < t.saturating_add(cooldown)) {
                continue;
            }
            let mut scaled = deployment.clone();
            scaled.replicas = wanted;
            scaled.last_scaled_ms = Some(now_ms);
            if scaled.check().is_err() {
                // Never write what the next pass would quarantine (`bounds` keeps to the
                // check's limits, so this does not happen).
                continue;
            }
            report.rescaled.push((name.clone(), deployment.replicas, wanted));
            *deployment = scaled;
            let key = format!("{DEPLOYMENTS}{name}");
            groups.push(vec![Op::Put { key, value: json(deployment), expect: Expect::Revision(*revision) }]);
        }
        commit_groups(store, groups, report)
    }

    fn release(
        &mut self,
        store: &mut impl Store,
        snapshot: &Snapshot,
        capacity: &mut Capacity,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let failed: BTreeSet<&str> = snapshot
            .assignments
            .iter()
            .filter(|(_, (a, _))| a.status == Status::Failed)
            .filter_map(|(key, _)| key.rsplit_once('/').map(|(replica, _)| replica))
            .collect();
        let (held_deployments, held_nodes, _) = snapshot.quarantine();
        let mut groups = Vec::new();
        type Changed<'a> = BTreeMap<u32, Vec<(&'a String, &'a Assignment, u64)>>;
        let mut changed: BTreeMap<&str, Changed<'_>> = BTreeMap::new();
        for (key, (assignment, revision)) in &snapshot.assignments {
            let deployment = parse_assignment_key(key).map_or("", |(name, _, _)| name);
            if held_deployments.contains(deployment) || held_nodes.contains(assignment.node.as_str()) {
                // Left bound: a record this version cannot read is no reason to release.
                let _ = capacity.replay(assignment);
                continue;
            }
            let desired = parse_assignment_key(key).and_then(|(name, replica, stage)| {
                let (deployment, _) = snapshot.deployments.get(name)?;
                (replica < deployment.replicas).then_some(())?;
                deployment.stages.get(stage)
            });
            let reason = match desired {
                None => Some(Release::NotDesired),
                Some(request)
                    if request.memory != assignment.memory
                        || request.gpus as usize != assignment.gpus.len()
                        || request.layers != assignment.layers
                        || request.node.as_ref().is_some_and(|n| *n != assignment.node) =>
                {
                    Some(Release::Changed)
                }
                Some(_) if key.rsplit_once('/').is_some_and(|(replica, _)| failed.contains(replica)) => {
                    Some(Release::Failed)
                }
                Some(_) => match capacity.replay(assignment) {
                    Ok(()) => None,
                    Err(Unreplayable::NodeGone) => Some(Release::NodeGone),
                    Err(Unreplayable::NoRoom | Unreplayable::GpuTaken) => Some(Release::NoRoom),
                },
            };
            match reason {
                Some(Release::Changed) => {
                    let (_, replica, _) = parse_assignment_key(key).unwrap_or_default();
                    changed
                        .entry(deployment)
                        .or_default()
                        .entry(replica)
                        .or_default()
                        .push((key, assignment, *revision));
                }
                Some(reason) => {
                    report.released.push((key.clone(), reason));
                    groups.push(vec![Op::Delete {
                        key: format!("{ASSIGNMENTS}{key}"),
                        expect: Expect::Revision(*revision),
                    }]);
                }
                None => {}
            }
        }
        // Changed stages move a replica at a time, so the others keep serving.
        for (name, replicas) in changed {
            let Some((deployment, _)) = snapshot.deployments.get(name) else { continue };
            let rolling = rolling_replica(name, deployment, snapshot, &report.released, &replicas);
            for (replica, stages) in replicas {
                for (key, assignment, revision) in stages {
                    if Some(replica) == rolling {
                        report.released.push((key.clone(), Release::Changed));
                        groups.push(vec![Op::Delete {
                            key: format!("{ASSIGNMENTS}{key}"),
                            expect: Expect::Revision(revision),
                        }]);
                    } else {
                        // Still serving with its old stages until its turn.
                        let _ = capacity.replay(assignment);
                    }
                }
            }
        }
        commit_groups(store, groups, report)
    }

    fn place(
        &mut self,
        store: &mut impl Store,
        snapshot: &Snapshot,
        capacity: &mut Capacity,
        now_ms: u64,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        if snapshot.quarantine().2 {
            // An assignment whose node and size are unknown: placing could over-fill its node.
            return Ok(());
        }
        let released: BTreeSet<String> = report.released.iter().map(|(k, _)| k.clone()).collect();
        let bound = |key: &str| snapshot.assignments.contains_key(key) && !released.contains(key);
        let max_ops = store.max_ops().max(2);
        let mut batch: Vec<Op> = Vec::new();
        let mut give_back: Vec<(String, Op)> = Vec::new();
        let mut touched: BTreeSet<String> = BTreeSet::new();
        let mut batch_keys: Vec<(String, String)> = Vec::new();
        let mut live_replicas: BTreeSet<String> = BTreeSet::new();
        for (name, (deployment, _)) in &snapshot.deployments {
            for replica in 0..deployment.replicas {
                let id = format!("{name}/{replica}");
                let missing: Vec<usize> =
                    (0..deployment.stages.len()).filter(|&s| !bound(&assignment_key(name, replica, s))).collect();
                if missing.is_empty() {
                    self.backoff.remove(&id);
                    continue;
                }
                live_replicas.insert(id.clone());
                if self.backoff.get(&id).is_some_and(|b| now_ms < b.next_ms) {
                    report.pending.push(id);
                    continue;
                }
                // The whole pipeline or nothing: a replica missing a stage serves nobody.
                let mut placed: Vec<(usize, Assignment)> = Vec::with_capacity(missing.len());
                for &stage in &missing {
                    match capacity.place(&deployment.stages[stage], deployment.placement) {
                        Some(assignment) => placed.push((stage, assignment)),
                        None => break,
                    }
                }
                if placed.len() < missing.len() {
                    for (_, assignment) in &placed {
                        capacity.release(assignment);
                    }
                    let attempts = self.backoff.get(&id).map_or(0, |b| b.attempts.saturating_add(1));
                    let next_ms = now_ms.saturating_add(self.delay(&id, attempts));
                    self.backoff.insert(id.clone(), Backoff { attempts, next_ms });
                    if attempts + 1 >= GIVE_BACK_AFTER && missing.len() < deployment.stages.len() {
                        // A partial pipeline serves nobody: after a few tries its bound
                        // stages go back, so a replica that can complete may use the room.
                        for stage in (0..deployment.stages.len()).filter(|s| !missing.contains(s)) {
                            let key = assignment_key(name, replica, stage);
                            // The room comes back to placement next pass, once the
                            // deletes are stored, never before.
                            if let Some((_, revision)) = snapshot.assignments.get(&key) {
                                let delete = Op::Delete {
                                    key: format!("{ASSIGNMENTS}{key}"),
                                    expect: Expect::Revision(*revision),
                                };
                                give_back.push((key, delete));
                            }
                        }
                    }
                    report.pending.push(id);
                    continue;
                }
                let nodes: BTreeSet<&str> = placed.iter().map(|(_, a)| a.node.as_str()).collect();
                let new_nodes = nodes.iter().filter(|n| !touched.contains(**n)).count();
                if !batch.is_empty() && batch.len() + placed.len() + new_nodes > max_ops {
                    self.flush(store, &mut batch, &mut touched, &mut batch_keys, capacity, report)?;
                }
                for node in nodes {
                    if touched.insert(node.to_owned())
                        && let Some(n) = capacity.get(node)
                    {
                        // Rewriting the node's record with its revision expected: a second
                        // controller that read the same free capacity fails instead of
                        // over-filling the node.
                        batch.push(Op::Put {
                            key: format!("{NODES}{node}"),
                            value: json(&n.node),
                            expect: Expect::Revision(n.revision),
                        });
                    }
                }
                for (stage, assignment) in placed {
                    let key = assignment_key(name, replica, stage);
                    batch.push(Op::Put {
                        key: format!("{ASSIGNMENTS}{key}"),
                        value: json(&assignment),
                        expect: Expect::Absent,
                    });
                    batch_keys.push((key, id.clone()));
                }
            }
        }
        self.flush(store, &mut batch, &mut touched, &mut batch_keys, capacity, report)?;
        if !give_back.is_empty() {
            let groups = give_back.iter().map(|(_, op)| vec![op.clone()]).collect();
            commit_groups(store, groups, report)?;
            report.released.extend(give_back.into_iter().map(|(key, _)| (key, Release::Incomplete)));
        }
        // Forget backoff of replicas no longer desired.
        self.backoff.retain(|id, _| live_replicas.contains(id));
        Ok(())
    }

    fn flush(
        &mut self,
        store: &mut impl Store,
        batch: &mut Vec<Op>,
        touched: &mut BTreeSet<String>,
        keys: &mut Vec<(String, String)>,
        capacity: &mut Capacity,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let revision = store.commit(batch)?;
        report.commits += 1;
        for node in touched.iter() {
            capacity.set_revision(node, revision);
        }
        for (key, replica) in keys.drain(..) {
            self.backoff.remove(&replica);
            report.scheduled.push(key);
        }
        batch.clear();
        touched.clear();
        Ok(())
    }

    /// Milliseconds to wait before trying `replica` again after `attempts` failures.
    fn delay(&self, replica: &str, attempts: u32) -> u64 {
        let exponential = self.options.backoff_base_ms.saturating_mul(1u64 << attempts.min(40));
        let capped = exponential.min(self.options.backoff_cap_ms);
        let mut hasher = blake3::Hasher::new();
        hasher.update(replica.as_bytes());
        hasher.update(&attempts.to_le_bytes());
        let bytes = hasher.finalize();
        let draw = u64::from_le_bytes(bytes.as_bytes()[..8].try_into().unwrap_or_default());
        // Jitter in [0.5, 1]: replicas that failed together do not retry together.
        let fraction = 0.5 + 0.5 * (draw as f64 / u64::MAX as f64);
        (capped as f64 * fraction) as u64
    }
}

/// The replica of `deployment` whose changed stages are released this pass, if any: one at
/// a time, none while another replica is half-placed (mid-roll), and only while the
/// replicas left complete are at least `min_replicas` (when it is given; a deployment
/// without it may pause its only pipeline to move it).
fn rolling_replica(
    name: &str,
    deployment: &Deployment,
    snapshot: &Snapshot,
    released: &[(String, Release)],
    changed: &BTreeMap<u32, Vec<(&String, &Assignment, u64)>>,
) -> Option<u32> {
    let released: BTreeSet<&str> = released.iter().map(|(k, _)| k.as_str()).collect();
    let stages = deployment.stages.len();
    let bound = |replica: u32| {
        (0..stages)
            .filter(|&s| {
                let key = assignment_key(name, replica, s);
                snapshot.assignments.contains_key(&key) && !released.contains(key.as_str())
            })
            .count()
    };
    let replicas = deployment.replicas.min(crate::spec::MAX_REPLICAS);
    let mut complete = 0u32;
    for replica in 0..replicas {
        let held = bound(replica);
        if held > 0 && held < stages {
            return None;
        }
        if held == stages && !changed.contains_key(&replica) {
            complete += 1;
        }
    }
    let first = *changed.keys().next()?;
    let floor = deployment.min_replicas.unwrap_or(0);
    // Replicas with changed stages still serve until released: all but the one rolling.
    let serving = complete + (changed.len() as u32 - 1);
    (serving >= floor).then_some(first)
}

/// Each stage of a planned deployment as re-balancing sees it this pass: its machine's
/// tier and reserve, its measured step time (the median over the replicas that run the
/// current stage and report it) and its node's free memory.
fn stage_views<'a>(
    name: &str,
    deployment: &'a Deployment,
    problem: &Problem,
    assignments: &BTreeMap<String, (Assignment, u64)>,
    metrics: &dyn Metrics,
) -> Vec<StageView<'a>> {
    deployment
        .stages
        .iter()
        .enumerate()
        .map(|(s, request)| {
            let node = request.node.as_deref().unwrap_or_default();
            let machine = problem.nodes.iter().find(|n| n.name == node);
            let mut measured: Vec<f64> = (0..deployment.replicas)
                .filter(|&r| {
                    assignments.get(&assignment_key(name, r, s)).is_some_and(|(a, _)| {
                        a.node == node && a.layers == request.layers && a.status == Status::Running
                    })
                })
                .filter_map(|r| metrics.stage_step_s(name, r, s))
                .filter(|t| t.is_finite() && *t > 0.0)
                .collect();
            measured.sort_by(f64::total_cmp);
            StageView {
                request,
                tier: Tier::of(machine.and_then(|m| m.kind)),
                measured_s: (!measured.is_empty()).then(|| measured[(measured.len() - 1) / 2]),
                memory_free: metrics.memory_free(node),
                reserve: machine.map_or(0, |m| m.reserve),
                node_memory: machine.map_or(0, |m| m.memory),
                node_bound: assignments.values().filter(|(a, _)| a.node == node).map(|(a, _)| a.memory).sum(),
            }
        })
        .collect()
}

/// The deployment re-planned with what was learned: new stages, predictions and an event;
/// or why it is held as it is.
fn replanned(
    deployment: &Deployment,
    planned: &Planned,
    problem: &Problem,
    learned: BTreeMap<String, crate::spec::Learned>,
    why: &str,
    urgent: bool,
    now_ms: u64,
) -> Result<Deployment, String> {
    let problem = crate::balance::with_learned(problem, &learned);
    let current: Vec<stageplan::planner::replan::CurrentStage> = deployment
        .stages
        .iter()
        .map(|s| stageplan::planner::replan::CurrentStage {
            node: s.node.clone().unwrap_or_default(),
            layers: s.layers,
        })
        .collect();
    let options =
        stageplan::ReplanOptions { tolerance: planned.options.tolerance, hysteresis: planned.options.hysteresis };
    let replan = stageplan::replan(&problem, &current, options).map_err(|e| format!("{why}, but {e}"))?;
    let mut updated = deployment.clone();
    let mut record = planned.clone();
    record.learned = learned;
    let (action, moved_stages) = if replan.plan.feasible {
        let gpus = |stage: &stageplan::plan::Stage| {
            let before = deployment.stages.iter().find(|s| s.node.as_deref() == Some(stage.node.as_str()));
            before.map_or(u32::from(stage.kind == Some(stageplan::presets::DeviceKind::Gpu)), |s| s.gpus)
        };
        let (stages, predicted) = crate::spec::planned_stages(&replan.plan, gpus);
        let moved = stages
            .iter()
            .filter(|s| !deployment.stages.iter().any(|o| o.node == s.node && o.layers == s.layers))
            .count();
        if moved > 0 && !urgent {
            let hour_ago = now_ms.saturating_sub(3_600_000);
            let recent = planned.events.iter().filter(|e| e.moved_stages > 0 && e.at_ms >= hour_ago).count();
            if recent >= planned.options.max_moves_per_hour as usize {
                return Err(format!(
                    "{why}, but it moved {recent} times in the last hour (`max_moves_per_hour` {}): it waits",
                    planned.options.max_moves_per_hour
                ));
            }
        }
        updated.stages = stages;
        record.predicted = predicted;
        let action = if moved == 0 {
            format!("kept the split ({})", replan.reason)
        } else {
            let moves: Vec<String> = replan
                .moves
                .iter()
                .map(|m| match m.layers {
                    [0, 0] => format!("the embedding to `{}`", m.to),
                    [a, b] if a == b => format!("the head to `{}`", m.to),
                    [a, b] => format!("layers {a}–{} to `{}`", b - 1, m.to),
                })
                .collect();
            format!(
                "{}, {} moved (the best plan outright: {})",
                moves.join(", "),
                stageplan::units::format_bytes(replan.bytes_moved as f64),
                stageplan::units::format_bytes(replan.best_plan_bytes as f64)
            )
        };
        (action, moved)
    } else {
        let reason = replan.plan.diagnostics.first().map_or("", |d| d.message.as_str());
        (format!("no split fits what is left, so the stages stay: {reason}"), 0)
    };
    record.events.push(Rebalance {
        at_ms: now_ms,
        reason: format!("{why} → {action}"),
        moved_stages,
        bytes_moved: if moved_stages > 0 { replan.bytes_moved } else { 0 },
        best_plan_bytes: replan.best_plan_bytes,
    });
    let drop = record.events.len().saturating_sub(EVENTS_KEPT);
    record.events.drain(..drop);
    updated.planned = Some(Box::new(record));
    updated.check().map_err(|e| format!("{why}, but the re-planned deployment {e}"))?;
    Ok(updated)
}

/// A broken invariant found in the store's records.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("node `{node}` holds {used} bytes of {capacity}")]
    MemoryOver { node: String, used: u64, capacity: u64 },
    #[error("GPU {gpu} of node `{node}` is held by `{first}` and `{second}`")]
    GpuTwice { node: String, gpu: u32, first: String, second: String },
    #[error("`{key}` holds GPU {gpu}, which node `{node}` does not have")]
    GpuMissing { key: String, node: String, gpu: u32 },
}

/// Checks the store's invariants: no node holds more memory or GPUs than it has, no GPU id
/// is held twice. (A replica is bound once by construction: its stages have one key each,
/// created only when absent.) Assignments on nodes that left are not counted: the next pass
/// releases them.
///
/// # Errors
/// The first violation.
pub fn check_invariants(snapshot: &Snapshot) -> Result<(), Violation> {
    let mut used: BTreeMap<&str, u64> = BTreeMap::new();
    let mut holders: BTreeMap<(&str, u32), &str> = BTreeMap::new();
    for (key, (assignment, _)) in &snapshot.assignments {
        let Some((node, _)) = snapshot.nodes.get(&assignment.node) else { continue };
        let total = used.entry(&node.name).or_default();
        *total = total.saturating_add(assignment.memory);
        for &gpu in &assignment.gpus {
            if gpu >= node.gpus {
                return Err(Violation::GpuMissing { key: key.clone(), node: node.name.clone(), gpu });
            }
            if let Some(first) = holders.insert((&node.name, gpu), key) {
                return Err(Violation::GpuTwice {
                    node: node.name.clone(),
                    gpu,
                    first: first.to_owned(),
                    second: key.clone(),
                });
            }
        }
    }
    for (name, bytes) in used {
        let capacity = snapshot.nodes[name].0.memory;
        if bytes > capacity {
            return Err(Violation::MemoryOver { node: name.to_owned(), used: bytes, capacity });
        }
    }
    Ok(())
}
