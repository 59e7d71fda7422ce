//! Durable state stores for the reconcile loop (`stageplan_reconcile`), behind the core's
//! one [`Store`] trait:
//!
//! - [`RedbStore`]: the embedded default — one file, crash-safe transactions, no set-up;
//! - [`EtcdStore`]: for fleets with several controllers — etcd's transactions compare
//!   revisions, and a lease-based [`Leadership`] lets one controller act at a time and fences
//!   the others' writes.
//!
//! [`open`] picks one from a `--store` argument: a path, `etcd://host:port`, or
//! `etcds://[USER@]host:port` over TLS (with `STAGEPLAN_ETCD_CA`, `STAGEPLAN_ETCD_CERT`,
//! `STAGEPLAN_ETCD_KEY`), a user's password in `STAGEPLAN_ETCD_PASSWORD`.

mod etcd;
mod redb_store;
#[cfg(feature = "testing")]
pub mod testing;

pub use etcd::{EtcdOptions, EtcdStore, Leadership, Tls};
pub use redb_store::RedbStore;
pub use stageplan_reconcile::{Store, StoreError};

/// A store named by a `--store` argument.
#[derive(Debug)]
pub enum AnyStore {
    Redb(RedbStore),
    Etcd(EtcdStore),
}

/// Opens `target`: `etcd://[USER@]host:port[/prefix]`, `etcds://…` for etcd over TLS, or a
/// redb file path (created if missing).
///
/// # Errors
/// The file cannot be opened ([`StoreError::Locked`]: another process holds it;
/// [`StoreError::Corrupt`]: it is damaged or not a store; [`StoreError::Unavailable`]: it
/// cannot be written) or etcd does not answer (or refuses the user).
pub fn open(target: &str) -> Result<AnyStore, StoreError> {
    match etcd_target(target) {
        Some(etcd) => {
            let (spec, options) = etcd?;
            Ok(AnyStore::Etcd(EtcdStore::connect_with(&spec, &options)?))
        }
        None => Ok(AnyStore::Redb(RedbStore::open(std::path::Path::new(target))?)),
    }
}

/// Opens `target` for reading only: a redb file must exist and is never created or
/// written (see [`RedbStore::open_read_only`]); etcd is read as usual.
///
/// # Errors
/// As [`open`], and [`StoreError::Unavailable`] when the file does not exist.
pub fn open_read_only(target: &str) -> Result<AnyStore, StoreError> {
    match etcd_target(target) {
        Some(_) => open(target),
        None => Ok(AnyStore::Redb(RedbStore::open_read_only(std::path::Path::new(target))?)),
    }
}

/// Whether `target` names etcd rather than a file.
pub fn is_etcd(target: &str) -> bool {
    target.starts_with("etcd://") || target.starts_with("etcds://")
}

/// An etcd target's address and how to reach it: TLS for `etcds://` (the CA, and a client
/// certificate and key, from the files `STAGEPLAN_ETCD_CA`, `STAGEPLAN_ETCD_CERT` and
/// `STAGEPLAN_ETCD_KEY` name), a user from `USER@` with its password from
/// `STAGEPLAN_ETCD_PASSWORD` (never in the target, which process lists show). `None` for a
/// file path.
fn etcd_target(target: &str) -> Option<Result<(String, EtcdOptions), StoreError>> {
    let (rest, tls) = match (target.strip_prefix("etcd://"), target.strip_prefix("etcds://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => return None,
    };
    Some((|| {
        let mut options = EtcdOptions::default();
        let spec = match rest.split_once('@') {
            Some((user, address)) => {
                let password = std::env::var("STAGEPLAN_ETCD_PASSWORD").map_err(|_| {
                    StoreError::Unavailable(format!(
                        "`{}` names etcd user `{}`: give its password in STAGEPLAN_ETCD_PASSWORD",
                        stageplan::quote::line(target),
                        stageplan::quote::line(user)
                    ))
                })?;
                options.user = Some((user.to_owned(), password));
                address
            }
            None => rest,
        };
        if tls {
            let read = |var: &str| -> Result<Option<Vec<u8>>, StoreError> {
                let Some(path) = std::env::var_os(var) else { return Ok(None) };
                std::fs::read(&path).map(Some).map_err(|e| {
                    StoreError::Unavailable(format!("{var} {}: {e}", std::path::Path::new(&path).display()))
                })
            };
            let client = match (read("STAGEPLAN_ETCD_CERT")?, read("STAGEPLAN_ETCD_KEY")?) {
                (Some(cert), Some(key)) => Some((cert, key)),
                (None, None) => None,
                _ => {
                    return Err(StoreError::Unavailable(
                        "give both STAGEPLAN_ETCD_CERT and STAGEPLAN_ETCD_KEY (a client certificate and its key), or neither"
                            .to_owned(),
                    ));
                }
            };
            options.tls = Some(Tls { ca: read("STAGEPLAN_ETCD_CA")?, client });
        }
        Ok((spec.to_owned(), options))
    })())
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
