//! Writes a small store — four nodes, two deployments, their bindings — to the redb file
//! given (which must not exist yet): something to try `stageplan status --store FILE` on,
//! and the seed `cargo xtask fuzz` gives the `redb_store` fuzz target.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path: PathBuf = std::env::args_os().nth(1).ok_or("usage: sample_store FILE")?.into();
    if path.exists() {
        return Err(format!("`{}` exists; give a new file", path.display()).into());
    }
    let mut store = stageplan_store::RedbStore::open(&path)?;
    stageplan_store::testing::fill_sample(&mut store)?;
    Ok(())
}
