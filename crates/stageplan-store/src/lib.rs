//! Durable state stores for the reconcile loop (`stageplan_reconcile`), behind the core's
//! one [`Store`] trait:
//!
//! - [`RedbStore`]: the embedded default — one file, crash-safe transactions, no set-up;
//! - [`EtcdStore`]: for fleets with several controllers — etcd's transactions compare
//!   revisions, and a lease-based [`Leadership`] lets one controller act at a time and fences
//!   the others' writes.
//!
//! [`open`] picks one from a `--store` argument: a path, or `etcd://host:port`.

mod etcd;
mod redb_store;
#[cfg(feature = "testing")]
pub mod testing;

pub use etcd::{EtcdStore, Leadership};
pub use redb_store::RedbStore;
pub use stageplan_reconcile::{Store, StoreError};

/// A store named by a `--store` argument.
#[derive(Debug)]
pub enum AnyStore {
    Redb(RedbStore),
    Etcd(EtcdStore),
}

/// Opens `target`: `etcd://host:port[/prefix]` or a redb file path (created if missing).
///
/// # Errors
/// The file cannot be opened ([`StoreError::Locked`]: another process holds it;
/// [`StoreError::Corrupt`]: it is damaged or not a store; [`StoreError::Unavailable`]: it
/// cannot be written) or etcd does not answer.
pub fn open(target: &str) -> Result<AnyStore, StoreError> {
    match target.strip_prefix("etcd://") {
        Some(rest) => Ok(AnyStore::Etcd(EtcdStore::connect(rest)?)),
        None => Ok(AnyStore::Redb(RedbStore::open(std::path::Path::new(target))?)),
    }
}

/// Opens `target` for reading only: a redb file must exist and is never created or
/// written (see [`RedbStore::open_read_only`]); etcd is read as usual.
///
/// # Errors
/// As [`open`], and [`StoreError::Unavailable`] when the file does not exist.
pub fn open_read_only(target: &str) -> Result<AnyStore, StoreError> {
    match target.strip_prefix("etcd://") {
        Some(rest) => Ok(AnyStore::Etcd(EtcdStore::connect(rest)?)),
        None => Ok(AnyStore::Redb(RedbStore::open_read_only(std::path::Path::new(target))?)),
    }
}

impl Store for AnyStore {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, stageplan_reconcile::Versioned)>, StoreError> {
        match self {
            AnyStore::Redb(s) => s.list(prefix),
            AnyStore::Etcd(s) => s.list(prefix),
        }
    }

    fn commit(&mut self, ops: &[stageplan_reconcile::Op]) -> Result<u64, StoreError> {
        match self {
            AnyStore::Redb(s) => s.commit(ops),
            AnyStore::Etcd(s) => s.commit(ops),
        }
    }

    fn max_ops(&self) -> usize {
        match self {
            AnyStore::Redb(s) => s.max_ops(),
            AnyStore::Etcd(s) => s.max_ops(),
        }
    }
}
