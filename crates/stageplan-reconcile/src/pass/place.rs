//! The pass's last step: place every replica that misses stages (but one that waits its turn
//! in a roll), all of them in one transaction or none, on the fullest or emptiest node that
//! fits; back off the replicas that do not fit, and after a few tries have a partial one give
//! back what it holds.

use std::collections::{BTreeSet, HashMap};

use crate::capacity::Capacity;
use crate::report::{PassReport, Release};
use crate::snapshot::Snapshot;
use crate::spec::{Assignment, assignment_key};
use crate::store::{ASSIGNMENTS, Expect, NODES, Op, Store, StoreError};
use crate::writes::{commit_groups, json};

/// Failed tries after which a replica missing stages gives back the ones it holds.
const GIVE_BACK_AFTER: u32 = 3;

/// A replica's backoff.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    attempts: u32,
    pub(crate) next_ms: u64,
}

pub(crate) fn place(
    store: &mut impl Store,
    snapshot: &Snapshot,
    capacity: &mut Capacity,
    now_ms: u64,
    backoff: &mut HashMap<String, Backoff>,
    delay: impl Fn(&str, u32) -> u64,
    report: &mut PassReport,
) -> Result<(), StoreError> {
    if snapshot.quarantine().2 {
        // An assignment whose node and size are unknown: placing could over-fill its node.
        return Ok(());
    }
    let released: BTreeSet<String> = report.released.iter().map(|(k, _)| k.clone()).collect();
    let (waiting, surging): (BTreeSet<String>, BTreeSet<String>) =
        (report.waiting.iter().cloned().collect(), report.surging.iter().cloned().collect());
    let bound = |key: &str| snapshot.assignments.contains_key(key) && !released.contains(key);
    let max_ops = store.max_ops().max(2);
    let mut batch: Vec<Op> = Vec::new();
    let mut give_back: Vec<(String, Op)> = Vec::new();
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut batch_keys: Vec<(String, String)> = Vec::new();
    let mut live_replicas: BTreeSet<String> = BTreeSet::new();
    for (name, (deployment, _)) in &snapshot.deployments {
        let stages = deployment.stages.len();
        let missing = |replica: u32| -> Vec<usize> {
            (0..stages).filter(|&s| !bound(&assignment_key(name, replica, s))).collect()
        };
        // Replicas with anything bound serve, wait their turn or are being placed; empty
        // ones are filled, lowest first, up to the replicas wanted (one more while a roll
        // surges, the slot past them).
        let slots = super::release::slots(deployment);
        let waiting = |replica: u32| waiting.contains(&format!("{name}/{replica}"));
        let occupied = (0..=slots).filter(|&r| waiting(r) || missing(r).len() < stages).count();
        let wanted = deployment.replicas as usize + usize::from(surging.contains(name));
        let mut to_fill = wanted.saturating_sub(occupied);
        for replica in 0..=slots {
            let id = format!("{name}/{replica}");
            if waiting(replica) {
                // Serving the split it was bound with until its turn in the roll: a stage
                // added to it now would join no pipeline.
                backoff.remove(&id);
                continue;
            }
            let missing = missing(replica);
            if missing.is_empty() {
                backoff.remove(&id);
                continue;
            }
            if missing.len() == stages {
                if to_fill == 0 {
                    backoff.remove(&id);
                    continue;
                }
                to_fill -= 1;
            }
            live_replicas.insert(id.clone());
            if backoff.get(&id).is_some_and(|b| now_ms < b.next_ms) {
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
                let attempts = backoff.get(&id).map_or(0, |b| b.attempts.saturating_add(1));
                let next_ms = now_ms.saturating_add(delay(&id, attempts));
                backoff.insert(id.clone(), Backoff { attempts, next_ms });
                if attempts + 1 >= GIVE_BACK_AFTER && missing.len() < deployment.stages.len() {
                    // A partial pipeline serves nobody: after a few tries its bound
                    // stages go back, so a replica that can complete may use the room.
                    for stage in (0..deployment.stages.len()).filter(|s| !missing.contains(s)) {
                        let key = assignment_key(name, replica, stage);
                        // The room comes back to placement next pass, once the
                        // deletes are stored, never before.
                        if let Some((_, revision)) = snapshot.assignments.get(&key) {
                            let delete =
                                Op::Delete { key: format!("{ASSIGNMENTS}{key}"), expect: Expect::Revision(*revision) };
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
                flush(store, &mut batch, &mut touched, &mut batch_keys, capacity, backoff, report)?;
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
    flush(store, &mut batch, &mut touched, &mut batch_keys, capacity, backoff, report)?;
    if !give_back.is_empty() {
        let groups = give_back.iter().map(|(_, op)| vec![op.clone()]).collect();
        commit_groups(store, groups, report)?;
        report.released.extend(give_back.into_iter().map(|(key, _)| (key, Release::Incomplete)));
    }
    // Forget backoff of replicas no longer desired.
    backoff.retain(|id, _| live_replicas.contains(id));
    Ok(())
}

fn flush(
    store: &mut impl Store,
    batch: &mut Vec<Op>,
    touched: &mut BTreeSet<String>,
    keys: &mut Vec<(String, String)>,
    capacity: &mut Capacity,
    backoff: &mut HashMap<String, Backoff>,
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
        backoff.remove(&replica);
        report.scheduled.push(key);
    }
    batch.clear();
    touched.clear();
    Ok(())
}
