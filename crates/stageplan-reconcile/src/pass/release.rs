//! The pass's third step: release assignments that are no longer desired, whose node left
//! or shrank, or whose replica failed, and roll changed stages one replica at a time so the
//! others keep serving. What stays bound is replayed onto the capacity the place step uses.

use std::collections::{BTreeMap, BTreeSet};

use crate::capacity::{Capacity, Unreplayable};
use crate::metrics::Metrics;
use crate::report::{PassReport, Release};
use crate::snapshot::Snapshot;
use crate::spec::{Assignment, Deployment, Status, assignment_key, is_whole_pipeline, parse_assignment_key};
use crate::store::{ASSIGNMENTS, Expect, Op, Store, StoreError};
use crate::writes::commit_groups;

/// Replicas whose changed stages wait their turn go to [`PassReport::waiting`]: they serve
/// the split they were bound with, so the place step leaves them alone.
pub(crate) fn release(
    store: &mut impl Store,
    snapshot: &Snapshot,
    capacity: &mut Capacity,
    metrics: &dyn Metrics,
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
        // A desired replica's stage: its request, or none past a re-plan with fewer stages
        // (that stage goes with its replica's turn in the roll, as a changed one does).
        let desired = parse_assignment_key(key).and_then(|(name, replica, stage)| {
            let (deployment, _) = snapshot.deployments.get(name)?;
            (replica < deployment.replicas).then(|| deployment.stages.get(stage))
        });
        let reason = match desired {
            None => Some(Release::NotDesired),
            Some(request) if !request.is_some_and(|r| r.bound_by(assignment)) => Some(Release::Changed),
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
                changed.entry(deployment).or_default().entry(replica).or_default().push((key, assignment, *revision));
            }
            Some(reason) => {
                report.released.push((key.clone(), reason));
                groups
                    .push(vec![Op::Delete { key: format!("{ASSIGNMENTS}{key}"), expect: Expect::Revision(*revision) }]);
            }
            None => {}
        }
    }
    // Changed stages move a replica at a time, so the others keep serving.
    for (name, mut replicas) in changed {
        let Some((deployment, _)) = snapshot.deployments.get(name) else { continue };
        // A replica that no longer serves its old split (a stage of it released above or
        // failed, its node gone, or its agents say it does not serve) has nothing to keep:
        // its changed stages go at once.
        let released: BTreeSet<&str> = report.released.iter().map(|(k, _)| k.as_str()).collect();
        let bindings = snapshot.bindings(name);
        let broken: Vec<u32> = replicas
            .keys()
            .copied()
            .filter(|&replica| {
                let mut kept = bindings.get(&replica).cloned().unwrap_or_default();
                kept.retain(|&stage, _| !released.contains(assignment_key(name, replica, stage).as_str()));
                !is_whole_pipeline(&kept)
                    || kept.values().any(|a| !snapshot.nodes.contains_key(&a.node))
                    || metrics.replica_serving(name, replica) == Some(false)
            })
            .collect();
        let mut release_now = |stages: Vec<(&String, &Assignment, u64)>, report: &mut PassReport| {
            for (key, _, revision) in stages {
                report.released.push((key.clone(), Release::Changed));
                groups
                    .push(vec![Op::Delete { key: format!("{ASSIGNMENTS}{key}"), expect: Expect::Revision(revision) }]);
            }
        };
        for replica in broken {
            if let Some(stages) = replicas.remove(&replica) {
                release_now(stages, report);
            }
        }
        let rolling = rolling_replica(name, deployment, snapshot, &report.released, &replicas, metrics);
        for (replica, stages) in replicas {
            if Some(replica) == rolling {
                release_now(stages, report);
                continue;
            }
            // Still serving with its old stages until its turn.
            report.waiting.push(format!("{name}/{replica}"));
            for (_, assignment, _) in stages {
                let _ = capacity.replay(assignment);
            }
        }
    }
    commit_groups(store, groups, report)
}

/// The replica of `deployment` whose changed stages are released this pass, if any: one at
/// a time, none while another replica is half-placed (mid-roll) or placed but not serving
/// yet (its engines loading, where the metrics say: the agents' reports), and only while the
/// replicas left complete are at least `min_replicas` (when it is given; a deployment
/// without it may pause its only pipeline to move it). So a roll takes a replica down only
/// once the one moved before serves again.
fn rolling_replica(
    name: &str,
    deployment: &Deployment,
    snapshot: &Snapshot,
    released: &[(String, Release)],
    changed: &BTreeMap<u32, Vec<(&String, &Assignment, u64)>>,
    metrics: &dyn Metrics,
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
    for replica in (0..replicas).filter(|r| !changed.contains_key(r)) {
        let held = bound(replica);
        if held > 0 && held < stages {
            return None;
        }
        if held == stages {
            if metrics.replica_serving(name, replica) == Some(false) {
                return None;
            }
            complete += 1;
        }
    }
    let first = *changed.keys().next()?;
    let floor = deployment.min_replicas.unwrap_or(0);
    // Replicas with changed stages still serve until released: all but the one rolling.
    let serving = complete + (changed.len() as u32 - 1);
    (serving >= floor).then_some(first)
}
