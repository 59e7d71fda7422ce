//! How the loop writes to the store: records as JSON, ops committed in transactions the
//! store's size allows, and a node's new capacity written so it never shrinks under a stage
//! placed meanwhile. Shared by event handling and every step of the pass.

use serde::Serialize;

use crate::capacity::Capacity;
use crate::report::PassReport;
use crate::spec::{Assignment, Node};
use crate::store::{ASSIGNMENTS, Expect, NODES, Op, Store, StoreError};

pub(crate) fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Writes `ops` in transactions of at most `store.max_ops()`; `group` ops stay together.
pub(crate) fn commit_groups(
    store: &mut impl Store,
    groups: Vec<Vec<Op>>,
    report: &mut PassReport,
) -> Result<(), StoreError> {
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
pub(crate) fn write_node(store: &mut impl Store, node: &Node) -> Result<(), StoreError> {
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
