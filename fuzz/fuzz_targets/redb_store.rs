//! A redb store file from untrusted bytes, read as `stageplan status` reads it and run
//! through one reconcile pass, all in memory (`RedbStore::from_bytes`): a damaged file must be
//! `StoreError::Corrupt` or read as the records it holds, never a panic, a hang or memory
//! without bound.
//!
//! Random bytes rarely get past redb's magic number, so an input whose first byte is odd is
//! instead a list of damages to a valid store (`fill_sample`'s records): 4-byte offsets, each
//! with a byte to XOR there. An even first byte means the rest is the file itself (the seed
//! `cargo xtask fuzz` writes is such a file, after its first byte).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stageplan_reconcile::{Controller, NoMetrics, Snapshot, StoreError, check_invariants};
use stageplan_store::RedbStore;

/// A valid store file, written once through a temporary file (no file I/O per input).
fn valid() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("stageplan-fuzz-redb-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&path);
        {
            let mut store = RedbStore::open(&path).expect("a temporary store");
            stageplan_store::testing::fill_sample(&mut store).expect("the sample fills a store");
        }
        let bytes = std::fs::read(&path).expect("the store just written");
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let bytes = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut bytes = valid().to_vec();
        for damage in rest.chunks_exact(5) {
            let at = u32::from_le_bytes([damage[0], damage[1], damage[2], damage[3]]) as usize % bytes.len();
            bytes[at] ^= damage[4];
        }
        bytes
    };
    let mut store = match RedbStore::from_bytes(bytes) {
        Ok(store) => store,
        Err(StoreError::Corrupt { .. } | StoreError::Unavailable(_)) => return,
        Err(e) => panic!("opening bytes gave {e:?}"),
    };
    match Snapshot::load(&mut store) {
        // What redb verified is what was written; the records may still say anything.
        Ok(snapshot) => {
            let _ = check_invariants(&snapshot);
        }
        Err(StoreError::Corrupt { .. } | StoreError::Unavailable(_)) => return,
        Err(e) => panic!("reading gave {e:?}"),
    }
    match Controller::default().pass(&mut store, 0, &NoMetrics) {
        Ok(_) | Err(StoreError::Corrupt { .. } | StoreError::Unavailable(_) | StoreError::Conflict { .. }) => {}
        Err(e) => panic!("a pass gave {e:?}"),
    }
});
