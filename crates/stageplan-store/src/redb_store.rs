//! The embedded store: records in one redb table, a revision counter in another, every
//! commit one write transaction (atomic and durable when it returns).
//!
//! A store file is untrusted input: a disk, a copy or a person may have damaged it. So every
//! open runs redb's integrity check (every committed page's checksum, the allocator rebuilt),
//! and a file that fails it is a [`StoreError::Corrupt`] before any record is read, never a
//! record read wrong or a panic. Reading commands ([`RedbStore::open_read_only`]) never write
//! the file: they copy it into memory under a shared lock and open the copy, so redb's crash
//! recovery and its check run in memory, and a read-only file in a read-only directory reads.

use std::cell::Cell;
use std::io::{ErrorKind, Read};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Once, RwLock};

use redb::{Builder, Database, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition, WriteTransaction};
use stageplan_reconcile::store::check_expectations;
use stageplan_reconcile::{Op, Store, StoreError, Versioned};

/// Key → (revision of the last write, JSON value).
const RECORDS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("records");
/// `"revision"` → the last transaction's revision.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// How a contained panic is described, so the store knows to close.
const STOPPED: &str = "redb stopped reading it";

/// What an in-memory copy may grow to beyond its bytes: a damaged header can ask for any
/// length, and growing to it would take the memory, not report the damage.
const MEMORY_GROWTH: u64 = 256 << 20;

/// A redb file (or an in-memory copy of one) as a [`Store`].
#[derive(Debug)]
pub struct RedbStore {
    /// `None` once redb panicked on this store: nothing more is asked of it.
    db: Option<Database>,
    /// The path, for messages.
    name: String,
    /// Opened by [`RedbStore::open_read_only`]: commits are refused (they would land in the
    /// in-memory copy only).
    read_only: bool,
}

fn corrupt(store: &str, problem: impl Into<String>) -> StoreError {
    StoreError::Corrupt { store: store.to_owned(), problem: problem.into() }
}

/// What a redb error means for the user of `store`.
fn classify(store: &str, error: impl Into<redb::Error>) -> StoreError {
    match error.into() {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
            StoreError::Locked { store: store.to_owned() }
        }
        redb::Error::Corrupted(detail) if detail.contains("truncated") => {
            corrupt(store, format!("is truncated (redb: {detail})"))
        }
        redb::Error::Corrupted(detail) => corrupt(store, format!("is corrupt (redb: {detail})")),
        redb::Error::Io(e) if e.kind() == ErrorKind::UnexpectedEof => {
            corrupt(store, "is truncated: it ends before the pages it lists")
        }
        // redb's word for a file whose first bytes are not its magic number.
        redb::Error::Io(e) if e.kind() == ErrorKind::InvalidData => {
            corrupt(store, format!("is not a redb file, or its header is damaged (redb: {e})"))
        }
        redb::Error::Io(e) if e.kind() == ErrorKind::PermissionDenied => StoreError::Unavailable(format!(
            "`{store}` cannot be written: permission denied; run as its owner, or make it writable (`chmod u+w`)"
        )),
        redb::Error::UpgradeRequired(version) => StoreError::Unavailable(format!(
            "`{store}` says it is in redb's file format {version}, which this `stageplan` cannot read; open it with the version that wrote it, or restore a backup if it is damaged"
        )),
        e @ (redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }) => {
            corrupt(store, format!("is a redb file but not a `stageplan` store ({e})"))
        }
        e => StoreError::Unavailable(format!("`{store}`: {e}")),
    }
}

thread_local! {
    /// Whether this thread is inside [`contain`]: its panics are reported, not printed.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, turning a panic inside it into [`StoreError::Corrupt`].
///
/// redb documents that opening a file "corrupted outside redb" may panic, and a read
/// transaction trusts the pages it walks. The integrity check on open closes most of that,
/// but a panic that remains would take down the loop (and a `status`) on a damaged file: it
/// is contained here and reported as what it is, with the panic message as the detail. The
/// panic hook is wrapped once so that contained panics print nothing, and every other panic,
/// in this thread or another, still reaches the hook that was installed before.
fn contain<T>(store: &str, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    static QUIET_HOOK: Once = Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINED.replace(true);
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.set(outer);
    result.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(corrupt(store, format!("is corrupt ({STOPPED}: {message})")))
    })
}

/// Bytes in memory as a redb backend: a store file's copy for reading, or a fuzzer's input.
#[derive(Debug)]
struct Memory {
    bytes: RwLock<Vec<u8>>,
    limit: u64,
}

impl Memory {
    fn new(bytes: Vec<u8>) -> Memory {
        let limit = (bytes.len() as u64).saturating_add(MEMORY_GROWTH);
        Memory { bytes: RwLock::new(bytes), limit }
    }

    fn bytes(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        // A poisoned lock only means a panic elsewhere; the bytes are still bytes.
        self.bytes.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bytes_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
        self.bytes.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn range(offset: u64, len: usize, within: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(len)?;
    (end <= within).then_some(start..end)
}

impl StorageBackend for Memory {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.bytes().len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let bytes = self.bytes();
        let range = range(offset, out.len(), bytes.len())
            .ok_or_else(|| std::io::Error::new(ErrorKind::UnexpectedEof, "read past the end of the store"))?;
        out.copy_from_slice(&bytes[range]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        if len > self.limit {
            return Err(std::io::Error::new(ErrorKind::OutOfMemory, format!("the store asks to grow to {len} bytes")));
        }
        let len = usize::try_from(len).map_err(|_| std::io::Error::from(ErrorKind::OutOfMemory))?;
        self.bytes_mut().resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut bytes = self.bytes_mut();
        let range = range(offset, data.len(), bytes.len())
            .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "write past the end of the store"))?;
        bytes[range].copy_from_slice(data);
        Ok(())
    }
}

fn builder() -> Builder {
    let mut builder = Builder::new();
    // Every page's checksum is verified before the file is trusted: a damaged file is an
    // error here instead of a panic (or a wrong record) later.
    builder.set_check_integrity_on_open(true);
    builder
}

impl RedbStore {
    /// Opens or creates the file for reading and writing (an empty file becomes a new store).
    ///
    /// # Errors
    /// [`StoreError::Locked`] while another process has it open; [`StoreError::Corrupt`] when
    /// it is damaged, truncated or not a store; [`StoreError::Unavailable`] when it cannot be
    /// written (permissions) or read.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        let name = path.display().to_string();
        let db = contain(&name, || builder().create(path).map_err(|e| classify(&name, e)))?;
        RedbStore::ready(db, name)
    }

    /// Opens an existing file for reading only: it is never created, written or repaired
    /// (a copy is, in memory), so this works on a read-only file in a read-only directory.
    /// While it reads the file it holds a shared lock that redb's writers take exclusively
    /// on Linux, so the copy is never torn by a commit.
    ///
    /// # Errors
    /// [`StoreError::Locked`] while another process writes it; [`StoreError::Corrupt`] when it
    /// is empty, damaged, truncated or not a store; [`StoreError::Unavailable`] when it does
    /// not exist or cannot be read.
    pub fn open_read_only(path: &Path) -> Result<RedbStore, StoreError> {
        let name = path.display().to_string();
        let mut file = std::fs::File::open(path).map_err(|e| match e.kind() {
            ErrorKind::PermissionDenied => StoreError::Unavailable(format!(
                "`{name}` cannot be read: permission denied; run as its owner, or make it readable (`chmod u+r`)"
            )),
            _ => StoreError::Unavailable(format!("`{name}` cannot be read: {e}")),
        })?;
        match file.try_lock_shared() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::Locked { store: name }),
            // A file system without locks: read without one.
            Err(std::fs::TryLockError::Error(_)) => {}
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| StoreError::Unavailable(format!("`{name}` cannot be read: {e}")))?;
        drop(file);
        if bytes.is_empty() {
            return Err(corrupt(&name, "is empty (0 bytes), not a store"));
        }
        let mut store = RedbStore::from_bytes_named(bytes, name)?;
        store.read_only = true;
        Ok(store)
    }

    /// A store over a copy of a redb file's bytes, in memory: reads and commits never touch a
    /// file. For tests, and for fuzzing the reader.
    ///
    /// # Errors
    /// As [`RedbStore::open`], for the bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<RedbStore, StoreError> {
        RedbStore::from_bytes_named(bytes, "(in memory)".to_owned())
    }

    fn from_bytes_named(bytes: Vec<u8>, name: String) -> Result<RedbStore, StoreError> {
        let db = contain(&name, || builder().create_with_backend(Memory::new(bytes)).map_err(|e| classify(&name, e)))?;
        RedbStore::ready(db, name)
    }

    /// Makes sure both tables exist (a new file has none).
    fn ready(db: Database, name: String) -> Result<RedbStore, StoreError> {
        let mut store = RedbStore { db: Some(db), name, read_only: false };
        store.write(|write| {
            write.open_table(RECORDS)?;
            write.open_table(META)?;
            Ok(())
        })?;
        Ok(store)
    }

    /// Runs `f` in a write transaction and commits it when `f` succeeds.
    fn write<T>(&mut self, f: impl FnOnce(&WriteTransaction) -> Result<T, redb::Error>) -> Result<T, StoreError> {
        let name = self.name.clone();
        self.with_db(|db| {
            let write = db.begin_write().map_err(|e| classify(&name, e))?;
            let out = f(&write).map_err(|e| classify(&name, e))?;
            write.commit().map_err(|e| classify(&name, e))?;
            Ok(out)
        })
    }

    /// Runs `f` on the database with panics contained; after one, the store is closed.
    fn with_db<T>(&mut self, f: impl FnOnce(&Database) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let Some(db) = &self.db else {
            return Err(corrupt(&self.name, "is corrupt (an earlier read stopped on it)"));
        };
        let result = contain(&self.name, || f(db));
        if matches!(&result, Err(StoreError::Corrupt { problem, .. }) if problem.contains(STOPPED)) {
            self.close();
        }
        result
    }

    /// Drops the database (redb closes the file), containing a panic its drop may raise on a
    /// damaged file or after an earlier panic.
    fn close(&mut self) {
        if let Some(db) = self.db.take() {
            let _ = contain(&self.name, || {
                drop(db);
                Ok(())
            });
        }
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl Store for RedbStore {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let name = self.name.clone();
        self.with_db(|db| {
            let read = || -> Result<Vec<(String, Versioned)>, redb::Error> {
                let read = db.begin_read()?;
                let table = read.open_table(RECORDS)?;
                let mut out = Vec::new();
                for entry in table.range(prefix..)? {
                    let (key, value) = entry?;
                    let key = key.value();
                    if !key.starts_with(prefix) {
                        break;
                    }
                    let (revision, value) = value.value();
                    out.push((key.to_owned(), Versioned { value: value.to_owned(), revision }));
                }
                Ok(out)
            };
            read().map_err(|e| classify(&name, e))
        })
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        if self.read_only {
            return Err(StoreError::Unavailable(format!("`{}` was opened read-only", self.name)));
        }
        let name = self.name.clone();
        self.with_db(|db| {
            let write = db.begin_write().map_err(|e| classify(&name, e))?;
            let revision = {
                let mut records = write.open_table(RECORDS).map_err(|e| classify(&name, e))?;
                check_expectations(ops, |key| {
                    Ok(records.get(key).map_err(|e| classify(&name, e))?.map(|v| v.value().0))
                })?;
                let mut meta = write.open_table(META).map_err(|e| classify(&name, e))?;
                let last = meta.get("revision").map_err(|e| classify(&name, e))?.map_or(0, |v| v.value());
                let revision = last
                    .checked_add(1)
                    .ok_or_else(|| corrupt(&name, "is corrupt (its revision counter is at its maximum)"))?;
                meta.insert("revision", revision).map_err(|e| classify(&name, e))?;
                for op in ops {
                    match op {
                        Op::Put { key, value, .. } => {
                            records.insert(key.as_str(), (revision, value.as_str())).map_err(|e| classify(&name, e))?;
                        }
                        Op::Delete { key, .. } => {
                            records.remove(key.as_str()).map_err(|e| classify(&name, e))?;
                        }
                    }
                }
                revision
            };
            // Dropping an uncommitted transaction (an expectation failed above) aborts it.
            write.commit().map_err(|e| classify(&name, e))?;
            Ok(revision)
        })
    }
}
