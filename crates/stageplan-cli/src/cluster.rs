//! What `status` and `nodes list` show: the store's records summarized per deployment and
//! per node, with what was measured against what was predicted. Computed from a snapshot,
//! drawn by `render::cluster`.

use std::collections::BTreeMap;

use stageplan_reconcile::observe::Observations;
use stageplan_reconcile::spec::parse_assignment_key;
use stageplan_reconcile::store::{DEPLOYMENTS, NODES};
use stageplan_reconcile::{Metrics, Snapshot, Status, check_invariants};

/// What `status` and `nodes list` show.
#[derive(serde::Serialize)]
pub(crate) struct ClusterStatus {
    pub deployments: Vec<DeploymentStatus>,
    pub nodes: Vec<NodeStatus>,
    pub assignments: usize,
    pub invariants: String,
    /// Records this version cannot use: left as they are, with what they keep bound.
    pub quarantined: Vec<QuarantinedStatus>,
    /// What each machine's `stageplan agent` last reported: its engines' states, what it
    /// cannot run and why, and receipts of what it serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<stageplan_agent::report::AgentReport>,
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

impl ClusterStatus {
    /// The snapshot summarized; `seen`, when a source was given, is what was measured.
    pub(crate) fn of(snapshot: &Snapshot, seen: Option<&Observations>) -> ClusterStatus {
        let deployments = snapshot
            .deployments
            .values()
            .map(|(d, _)| {
                // Every replica bound, whatever its split: during a roll, ones waiting their
                // turn on an older split, and one placed beside them (make before break).
                let (mut running, mut failed) = (0, 0);
                for (_, mut bindings) in snapshot.bindings(&d.name) {
                    bindings.retain(|_, a| snapshot.nodes.contains_key(&a.node));
                    if bindings.values().any(|a| a.status == Status::Failed) {
                        failed += 1;
                    } else if stageplan_reconcile::spec::is_whole_pipeline(&bindings) {
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
                            let mut measured: Vec<f64> = (0..=d.replicas)
                                .filter_map(|r| seen.and_then(|o| o.stage_step_s(&d.name, r, s)))
                                .collect();
                            measured.sort_by(f64::total_cmp);
                            StageStatus {
                                node: request.label(),
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
                    pending: d.replicas.saturating_sub(running + failed),
                    stages,
                    predicted_token_s: planned.map(|p| p.predicted.iter().map(|s| s.step_s).sum()),
                    measured_token_s: seen.and_then(|o| o.token_s.get(&d.name).copied()),
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
        let invariants = match check_invariants(snapshot) {
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
        ClusterStatus {
            deployments,
            nodes,
            assignments: snapshot.assignments.len(),
            invariants,
            quarantined,
            agents: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stageplan_reconcile::{Assignment, Deployment, Node, StageRequest, assignment_key};

    /// A roll's surge: a replica more than desired runs, and none is pending.
    #[test]
    fn a_replica_placed_beside_the_others_counts_as_running() {
        let request = StageRequest { layers: [0, 4], memory: 1, gpus: 0, node: None, gpu_ids: Vec::new() };
        let mut snapshot = Snapshot::default();
        snapshot.deployments.insert("chat".into(), (Deployment::new("chat", 1, vec![request]), 1));
        snapshot.nodes.insert("a".into(), (Node { name: "a".into(), memory: 8, gpus: 0 }, 1));
        for replica in [0, 1] {
            let bound =
                Assignment { node: "a".into(), layers: [0, 4], gpus: Vec::new(), memory: 1, status: Status::Running };
            snapshot.assignments.insert(assignment_key("chat", replica, 0), (bound, 1));
        }
        let status = ClusterStatus::of(&snapshot, None);
        let chat = &status.deployments[0];
        assert_eq!((chat.desired, chat.running, chat.pending), (1, 2, 0));
    }
}
