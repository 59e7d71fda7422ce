//! The one trait every state store implements, and the in-memory store.
//!
//! A store is a map from keys to JSON values with revisions, and a transaction that applies
//! a batch of writes only if every expectation on the revisions holds — etcd's model, which
//! the embedded (redb) and in-memory stores reproduce. All of a transaction's writes take one
//! new revision. Compare-and-swap on revisions is what keeps two controllers from binding the
//! same replica or over-filling a node: a placement expects the node's record unchanged
//! since it was read, and rewrites it.

use std::collections::BTreeMap;

/// Key prefixes of the three record kinds.
pub const DEPLOYMENTS: &str = "deployments/";
pub const NODES: &str = "nodes/";
pub const ASSIGNMENTS: &str = "assignments/";

/// A stored value and the revision of its last write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub value: String,
    pub revision: u64,
}

/// What a write requires of the key's current state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing.
    Any,
    /// The key does not exist (create).
    Absent,
    /// The key was last written at this revision (unchanged since read).
    Revision(u64),
}

/// One write of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put { key: String, value: String, expect: Expect },
    Delete { key: String, expect: Expect },
}

impl Op {
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    pub fn expect(&self) -> Expect {
        match self {
            Op::Put { expect, .. } | Op::Delete { expect, .. } => *expect,
        }
    }
}

/// Why a store call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// An expectation did not hold: another writer got there first. Nothing was written;
    /// re-read and decide again.
    #[error("`{key}` changed since it was read (another controller?); nothing was written, the next pass re-reads")]
    Conflict { key: String },
    /// The store could not be reached or failed: a write may or may not have landed; the
    /// next read tells.
    #[error("the state store is unavailable: {0}")]
    Unavailable(String),
    /// Another process holds the store (a redb file is one process's at a time): waiting and
    /// trying again may succeed.
    #[error("`{store}` is in use by another process; is another `stageplan` using it?")]
    Locked { store: String },
    /// The store's bytes cannot be read as a store: damaged, truncated, or not a store at all.
    /// Nothing was read from it and nothing was written to it.
    #[error("`{store}` {problem}; restore it from a backup, or move it aside to start an empty store")]
    Corrupt {
        store: String,
        /// What is wrong, as a phrase after the store's name (`is truncated: …`).
        problem: String,
    },
    /// A record the controller was asked to write fails its own check: nothing was written,
    /// since the next pass would quarantine it.
    #[error("`{key}` was not written: {problem}")]
    Invalid { key: String, problem: String },
}

/// A state store: read by prefix, write in all-or-nothing transactions.
pub trait Store {
    /// Every record whose key starts with `prefix`, in key order.
    ///
    /// # Errors
    /// The store is unavailable.
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError>;

    /// Applies every op or none. Returns the revision the writes took.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when an expectation fails (nothing written);
    /// [`StoreError::Unavailable`] when the store cannot be written.
    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError>;

    /// Every record under each prefix, all read at one revision where the store can (etcd
    /// does; the others read under one lock anyway).
    ///
    /// # Errors
    /// The store is unavailable.
    fn list_many(&mut self, prefixes: &[&str]) -> Result<Vec<Vec<(String, Versioned)>>, StoreError> {
        prefixes.iter().map(|prefix| self.list(prefix)).collect()
    }

    /// The most ops one transaction may hold (etcd's `--max-txn-ops` is 128 by default).
    fn max_ops(&self) -> usize {
        usize::MAX
    }
}

impl<S: Store + ?Sized> Store for &mut S {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        (**self).list(prefix)
    }
    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        (**self).commit(ops)
    }
    fn list_many(&mut self, prefixes: &[&str]) -> Result<Vec<Vec<(String, Versioned)>>, StoreError> {
        (**self).list_many(prefixes)
    }
    fn max_ops(&self) -> usize {
        (**self).max_ops()
    }
}

/// A store in memory: tests, simulations, the browser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStore {
    records: BTreeMap<String, Versioned>,
    revision: u64,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The revision of the last transaction.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every record, for checks.
    pub fn records(&self) -> &BTreeMap<String, Versioned> {
        &self.records
    }
}

/// Checks `ops`' expectations against `current` (the key's revision, if it exists).
///
/// # Errors
/// The first expectation that does not hold.
pub fn check_expectations(
    ops: &[Op],
    mut current: impl FnMut(&str) -> Result<Option<u64>, StoreError>,
) -> Result<(), StoreError> {
    for op in ops {
        let have = current(op.key())?;
        let holds = match op.expect() {
            Expect::Any => true,
            Expect::Absent => have.is_none(),
            Expect::Revision(r) => have == Some(r),
        };
        if !holds {
            return Err(StoreError::Conflict { key: op.key().to_owned() });
        }
    }
    Ok(())
}

impl Store for MemoryStore {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        Ok(self
            .records
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        check_expectations(ops, |key| Ok(self.records.get(key).map(|v| v.revision)))?;
        self.revision += 1;
        let revision = self.revision;
        for op in ops {
            match op {
                Op::Put { key, value, .. } => {
                    self.records.insert(key.clone(), Versioned { value: value.clone(), revision });
                }
                Op::Delete { key, .. } => {
                    self.records.remove(key);
                }
            }
        }
        Ok(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, expect: Expect) -> Op {
        Op::Put { key: key.into(), value: "{}".into(), expect }
    }

    #[test]
    fn a_failed_expectation_writes_nothing() {
        let mut store = MemoryStore::new();
        let r1 = store.commit(&[put("nodes/a", Expect::Absent)]).unwrap();
        assert_eq!(
            store.commit(&[put("nodes/b", Expect::Absent), put("nodes/a", Expect::Absent)]),
            Err(StoreError::Conflict { key: "nodes/a".into() })
        );
        assert!(store.list("nodes/").unwrap().len() == 1, "nodes/b must not be written");
        let r2 = store.commit(&[put("nodes/a", Expect::Revision(r1))]).unwrap();
        assert!(r2 > r1);
        assert!(store.commit(&[Op::Delete { key: "nodes/a".into(), expect: Expect::Revision(r1) }]).is_err());
        store.commit(&[Op::Delete { key: "nodes/a".into(), expect: Expect::Revision(r2) }]).unwrap();
        assert!(store.list("").unwrap().is_empty());
    }
}
