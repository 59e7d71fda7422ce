//! `stageplan status`: deployments (desired, running, pending), nodes (used / total) and
//! invariants, with what was measured against what was predicted.

use stageplan_agent::report::{AGENTS, AgentReport};
use stageplan_reconcile::{Snapshot, Store};

use crate::cli::{Format, Measured};
use crate::cluster::ClusterStatus;
use crate::outcome::{Failure, Outcome};
use crate::{render, store};

/// Reads the store without writing it, and the measurements when a source is given.
pub(super) fn status(store: &str, format: Format, measured: Measured) -> Result<Outcome, Failure> {
    let sources = measured.sources()?;
    let mut store = store::open_read_only(store)?;
    let snapshot = Snapshot::load(&mut store)?;
    let seen = if sources.any() { Some(sources.measure()) } else { None };
    let mut status = ClusterStatus::of(&snapshot, seen.as_ref());
    status.agents = store
        .list(AGENTS)?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_str::<AgentReport>(&v.value).ok())
        .collect();
    Ok(Outcome::ok(match format {
        Format::Json => serde_json::to_string_pretty(&status)? + "\n",
        Format::Table => render::cluster::status(&status, store::now_ms()),
    }))
}
