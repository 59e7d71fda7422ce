//! The steps of a pass, one module each, in the order the controller runs them:
//! rebalance → autoscale → release → place. Each step reads the pass's [`Snapshot`],
//! commits what it decided before the next one starts, and adds to the [`PassReport`].
//!
//! [`Snapshot`]: crate::Snapshot
//! [`PassReport`]: crate::PassReport

mod autoscale;
mod place;
mod rebalance;
mod release;

pub(crate) use autoscale::autoscale;
pub(crate) use place::{Backoff, place};
pub(crate) use rebalance::Rebalancing;
pub(crate) use release::release;
