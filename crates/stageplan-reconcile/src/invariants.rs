//! The invariant checker: what must hold of the store's records whatever passes ran (no
//! node over-filled, no GPU held twice). The tests, the simulation and the stores' tests run
//! it on a [`Snapshot`]; the pass itself does not, so nothing in the loop depends on it.

use std::collections::BTreeMap;

use crate::snapshot::Snapshot;

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
