//! The reconcile control loop, without I/O: keep deployments placed as the cluster changes.
//!
//! Desired state is [`Deployment`]s (a pipeline from the planner, a replica count with
//! bounds, a placement policy); actual state is [`Assignment`]s keyed by
//! `"{deployment}/{replica}/{stage}"`, each binding one stage to a node with the exact GPU
//! ids and bytes it took. A [`Controller`] pass is level-triggered and idempotent:
//!
//! 1. read every record from the [`Store`] (capacity is always derived from the persisted
//!    assignments, replayed onto the nodes, so GPU ids come back exactly as taken);
//! 2. autoscale from an injected [`Metrics`] source, with a tolerance band and cooldowns,
//!    persisting the new replica count;
//! 3. release assignments that are no longer desired, whose request changed, whose node
//!    left or shrank, or whose replica failed;
//! 4. place every replica that misses stages — the whole pipeline or none of it — on the
//!    fullest node that fits (bin-pack) or the emptiest (spread), in O(log n) per stage;
//!    a replica that does not fit backs off exponentially with deterministic jitter.
//!
//! When a node is lost, only its stages move: the replica's other stages stay bound, which
//! is the minimal-move re-plan (the stage ranges are the planner's and do not change).
//! Every step is one or more compare-and-swap transactions: a placement expects each
//! node's record unchanged since it was read, so two controllers on one store can never
//! over-fill a node or bind a stage twice. A crash between steps loses nothing persisted;
//! the next pass starts from the store.
//!
//! [`store::MemoryStore`] serves tests, simulations and the browser; the native stores
//! (redb, etcd) live in `crates/stageplan-store`.

mod capacity;
mod controller;
pub mod spec;
pub mod store;

pub use controller::{
    Controller, Event, Metrics, NoMetrics, Options, PassReport, Release, Snapshot, Violation, check_invariants,
};
pub use spec::{Assignment, Autoscale, Deployment, Node, Placement, StageRequest, Status, assignment_key};
pub use store::{Expect, MemoryStore, Op, Store, StoreError, Versioned};

#[cfg(test)]
mod tests;
