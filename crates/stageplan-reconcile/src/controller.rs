//! The controller: events in, and the pass that drives its steps (see [`crate::pass`]) —
//! level-triggered and idempotent, with every decision persisted in compare-and-swap
//! transactions before it counts. What a step decides lives in its own module; this one
//! holds the loop's inputs, its options, and the little it remembers between passes.

use std::collections::{BTreeSet, HashMap};

use stageplan::{Problem, Scenario};

use crate::capacity::Capacity;
use crate::metrics::Metrics;
use crate::pass::{Backoff, Rebalancing, autoscale, place, release};
use crate::report::PassReport;
use crate::snapshot::Snapshot;
use crate::spec::{Assignment, Deployment, Node, Status};
use crate::store::{ASSIGNMENTS, DEPLOYMENTS, Expect, NODES, Op, Store, StoreError};
use crate::writes::{commit_groups, json, write_node};

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

/// Turns a planned deployment's scenario into a problem: the CLI reads model files, the
/// default knows presets and inline configs.
pub type Resolve = fn(&Scenario) -> Result<Problem, String>;

fn resolve_without_files(scenario: &Scenario) -> Result<Problem, String> {
    stageplan::check(scenario.clone(), stageplan::check::no_model_files).map(|c| c.problem).map_err(|e| e.to_string())
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

impl Options {
    /// Milliseconds to wait before trying `replica` again after `attempts` failures.
    fn delay(&self, replica: &str, attempts: u32) -> u64 {
        let exponential = self.backoff_base_ms.saturating_mul(1u64 << attempts.min(40));
        let capped = exponential.min(self.backoff_cap_ms);
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

/// The controller: the pass, and the little it remembers between passes (backoff, what
/// re-balancing watches). Losing it (a restart) loses no decision: those are in the store.
#[derive(Clone, Debug, Default)]
pub struct Controller {
    options: Options,
    backoff: HashMap<String, Backoff>,
    /// Nodes seen by the last pass: a new one ends every backoff, since it may be the room.
    known_nodes: BTreeSet<String>,
    /// Per planned deployment: the measurements watched for skew, and what its scenario
    /// resolved to.
    rebalancing: Rebalancing,
}

/// A record refused before it is written: it fails the check a pass reads it with.
fn invalid(key: String, error: &crate::spec::SpecError) -> StoreError {
    StoreError::Invalid { key, problem: error.to_string() }
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
        let rebalanced =
            self.rebalancing.rebalance(self.options.resolve, store, &mut snapshot, now_ms, metrics, &mut report)?;
        autoscale(store, &mut snapshot, now_ms, metrics, &rebalanced, &mut report)?;
        let mut capacity = Capacity::new(snapshot.nodes.values().map(|(n, r)| (n.clone(), *r)));
        release(store, &snapshot, &mut capacity, metrics, &mut report)?;
        let delay = |replica: &str, attempts| self.options.delay(replica, attempts);
        place(store, &snapshot, &mut capacity, now_ms, &mut self.backoff, delay, &mut report)?;
        Ok(report)
    }
}
