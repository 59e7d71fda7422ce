//! The embedded store: records in one redb table, a revision counter in another, every
//! commit one write transaction (atomic and durable when it returns).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use stageplan::reconcile::store::check_expectations;
use stageplan::reconcile::{Op, Store, StoreError, Versioned};

/// Key → (revision of the last write, JSON value).
const RECORDS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("records");
/// `"revision"` → the last transaction's revision.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// A redb file as a [`Store`].
#[derive(Debug)]
pub struct RedbStore {
    db: Database,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedbStore {
    /// Opens or creates the file.
    ///
    /// # Errors
    /// Another process has it open, or it is not a redb file.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        let db = Database::create(path).map_err(|e| {
            StoreError::Unavailable(format!("cannot open `{}`: {e}; is another `stageplan` using it?", path.display()))
        })?;
        let write = db.begin_write().map_err(unavailable)?;
        {
            write.open_table(RECORDS).map_err(unavailable)?;
            write.open_table(META).map_err(unavailable)?;
        }
        write.commit().map_err(unavailable)?;
        Ok(RedbStore { db })
    }
}

impl Store for RedbStore {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let read = self.db.begin_read().map_err(unavailable)?;
        let table = read.open_table(RECORDS).map_err(unavailable)?;
        let mut out = Vec::new();
        for entry in table.range(prefix..).map_err(unavailable)? {
            let (key, value) = entry.map_err(unavailable)?;
            let key = key.value();
            if !key.starts_with(prefix) {
                break;
            }
            let (revision, value) = value.value();
            out.push((key.to_owned(), Versioned { value: value.to_owned(), revision }));
        }
        Ok(out)
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        let write = self.db.begin_write().map_err(unavailable)?;
        let revision = {
            let mut records = write.open_table(RECORDS).map_err(unavailable)?;
            check_expectations(ops, |key| Ok(records.get(key).map_err(unavailable)?.map(|v| v.value().0)))?;
            let mut meta = write.open_table(META).map_err(unavailable)?;
            let revision = meta.get("revision").map_err(unavailable)?.map_or(0, |v| v.value()) + 1;
            meta.insert("revision", revision).map_err(unavailable)?;
            for op in ops {
                match op {
                    Op::Put { key, value, .. } => {
                        records.insert(key.as_str(), (revision, value.as_str())).map_err(unavailable)?;
                    }
                    Op::Delete { key, .. } => {
                        records.remove(key.as_str()).map_err(unavailable)?;
                    }
                }
            }
            revision
        };
        // Dropping an uncommitted transaction (an expectation failed above) aborts it.
        write.commit().map_err(unavailable)?;
        Ok(revision)
    }
}
