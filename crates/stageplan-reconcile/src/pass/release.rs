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
            (replica <= slots(deployment)).then(|| deployment.stages.get(stage))
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
        let rolling = match roll(name, deployment, snapshot, &report.released, &replicas, metrics) {
            Roll::Release(replica) => Some(replica),
            Roll::Wait => None,
            Roll::Surge => {
                report.surging.push(name.to_owned());
                None
            }
        };
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
    // Past its replicas a deployment keeps none once no roll needs one (a surge's work
    // done, replicas scaled down): half-placed ones go first, then the highest.
    let released: BTreeSet<String> = report.released.iter().map(|(k, _)| k.clone()).collect();
    for (name, (deployment, _)) in &snapshot.deployments {
        let rolling = |w: &String| w.rsplit_once('/').is_some_and(|(d, _)| d == name);
        if held_deployments.contains(name.as_str()) || report.waiting.iter().any(rolling) {
            continue;
        }
        let mut kept: Vec<Kept> = snapshot
            .bindings(name)
            .into_iter()
            .map(|(replica, bindings)| {
                let keys: Vec<(String, u64)> = bindings
                    .keys()
                    .map(|&stage| assignment_key(name, replica, stage))
                    .filter(|key| !released.contains(key))
                    .filter_map(|key| {
                        let (assignment, revision) = snapshot.assignments.get(&key)?;
                        (!held_nodes.contains(assignment.node.as_str())).then_some((key, *revision))
                    })
                    .collect();
                Kept { whole: keys.len() == deployment.stages.len(), replica, keys }
            })
            .filter(|k| !k.keys.is_empty())
            .collect();
        let extra = kept.len().saturating_sub(deployment.replicas as usize);
        kept.sort_by_key(|k| (k.whole, std::cmp::Reverse(k.replica)));
        for (key, revision) in kept.into_iter().take(extra).flat_map(|k| k.keys) {
            groups.push(vec![Op::Delete { key: format!("{ASSIGNMENTS}{key}"), expect: Expect::Revision(revision) }]);
            report.released.push((key, Release::NotDesired));
        }
    }
    commit_groups(store, groups, report)
}

/// A replica's bindings a pass leaves bound: whether they are its whole split, and their
/// keys with their revisions.
struct Kept {
    whole: bool,
    replica: u32,
    keys: Vec<(String, u64)>,
}

/// What a roll does this pass.
enum Roll {
    /// This replica's changed stages are released.
    Release(u32),
    /// Nothing moves: a replica is half-placed (mid-roll) or placed but not serving yet (its
    /// engines loading, where the metrics say: the agents' reports).
    Wait,
    /// Releasing one would leave fewer serving than `min_replicas`: a replica is placed
    /// beside them first (the place step), and the roll goes on once it serves.
    Surge,
}

/// The next step of `deployment`'s roll: one replica at a time, none while another is
/// half-placed or loading, and only while the replicas left serving are at least
/// `min_replicas` (when it is given; a deployment without it may pause its only pipeline to
/// move it). So a roll takes a replica down only once the one placed before serves.
fn roll(
    name: &str,
    deployment: &Deployment,
    snapshot: &Snapshot,
    released: &[(String, Release)],
    changed: &BTreeMap<u32, Vec<(&String, &Assignment, u64)>>,
    metrics: &dyn Metrics,
) -> Roll {
    let Some(&first) = changed.keys().next() else { return Roll::Wait };
    let released: BTreeSet<&str> = released.iter().map(|(k, _)| k.as_str()).collect();
    let stages = deployment.stages.len();
    let mut complete = 0u32;
    for (replica, mut bindings) in snapshot.bindings(name) {
        if changed.contains_key(&replica) || replica > slots(deployment) {
            continue;
        }
        bindings.retain(|&stage, _| !released.contains(assignment_key(name, replica, stage).as_str()));
        if bindings.is_empty() {
            continue;
        }
        if bindings.len() < stages || metrics.replica_serving(name, replica) == Some(false) {
            return Roll::Wait;
        }
        complete += 1;
    }
    let floor = deployment.min_replicas.unwrap_or(0);
    // Replicas with changed stages still serve until released: all but the one rolling.
    let serving = complete + (changed.len() as u32 - 1);
    if serving >= floor { Roll::Release(first) } else { Roll::Surge }
}

/// The highest replica index a deployment may bind: one past its replicas, the slot a
/// replica is placed in beside the others while a roll needs one more serving.
pub(crate) fn slots(deployment: &Deployment) -> u32 {
    deployment.replicas.min(crate::spec::MAX_REPLICAS)
}
