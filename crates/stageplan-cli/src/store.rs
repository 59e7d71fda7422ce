//! Opening `--store`: a redb file or `etcd://…`, checked before it is opened (a redb path
//! must be a regular file of sane size; commands that read never create one), and waited
//! for a little while the loop holds the file during a pass.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stageplan_reconcile::StoreError;
use stageplan_store::AnyStore;

use crate::outcome::Failure;

/// How long a command waits for a redb file that the loop holds during a pass.
const OPEN_PATIENCE: Duration = Duration::from_secs(5);

/// The most `status` copies into memory: far above any real store (100,000 replicas take
/// tens of megabytes).
const MAX_READ_STORE_BYTES: u64 = 1 << 30;

/// `--store` must name a store that exists: commands that read, or change what is there,
/// never create one.
pub(crate) fn must_exist(target: &str) -> Result<(), Failure> {
    if !stageplan_store::is_etcd(target) && crate::input::probe(Path::new(target)).is_none() {
        return Err(Failure(format!(
            "`--store {target}` does not exist; register machines with `stageplan nodes add`, or give the store's path"
        )));
    }
    regular_store(target)
}

/// A redb store path, when something is there, must be a regular file: a FIFO would block
/// the open forever and `/dev/zero` would be read until memory runs out.
fn regular_store(target: &str) -> Result<(), Failure> {
    if stageplan_store::is_etcd(target) {
        return Ok(());
    }
    let path = Path::new(target);
    match crate::input::probe(path) {
        None => Ok(()),
        Some(meta) => {
            let meta = meta?;
            crate::input::regular(path, &meta).map_err(|e| Failure(format!("`--store`: {e}")))?;
            if meta.len() > MAX_READ_STORE_BYTES {
                return Err(Failure(format!(
                    "`--store {target}` is over {} GiB; a stageplan store is far smaller: check the path",
                    MAX_READ_STORE_BYTES >> 30
                )));
            }
            Ok(())
        }
    }
}

/// Opens `--store` for reading only (`status`, `nodes list`): a redb file must exist, and
/// is never created or written.
pub(crate) fn open_read_only(target: &str) -> Result<AnyStore, Failure> {
    must_exist(target)?;
    patiently(target, stageplan_store::open_read_only).map_err(|e| failure(target, &e))
}

/// Opens `--store` for reading and writing (a redb file is created if missing).
pub(crate) fn open(target: &str) -> Result<AnyStore, Failure> {
    regular_store(target)?;
    patiently(target, stageplan_store::open).map_err(|e| failure(target, &e))
}

/// Opens `--store` for the loop, before its log starts, so a store it cannot use is the one
/// line `error: …` (exit 2) that any bad input is: etcd is connected, and the connection
/// returned for the loop; a redb path is checked as [`open`] checks it, and opened once and
/// closed (each pass opens it anew; one that is missing is created). A file another process
/// holds is left to the passes, which wait for it.
pub(crate) fn open_for_loop(target: &str) -> Result<Option<AnyStore>, Failure> {
    if stageplan_store::is_etcd(target) {
        return open(target).map(Some);
    }
    regular_store(target)?;
    match stageplan_store::open(target) {
        Ok(_) | Err(StoreError::Locked { .. }) => Ok(None),
        Err(e) => Err(failure(target, &e)),
    }
}

/// A store error as the one line a command ends with.
pub(crate) fn failure(target: &str, error: &StoreError) -> Failure {
    Failure(format!("`--store {target}`: {error}"))
}

/// Calls `open`, waiting a little while another process holds the redb file (the loop holds
/// it during a pass); anything else (damage, permissions, etcd down) is reported at once.
pub(crate) fn patiently(target: &str, open: fn(&str) -> Result<AnyStore, StoreError>) -> Result<AnyStore, StoreError> {
    let started = Instant::now();
    loop {
        match open(target) {
            Err(StoreError::Locked { .. }) if started.elapsed() < OPEN_PATIENCE => {
                std::thread::sleep(Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

/// The clock the store's records are stamped by: milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
