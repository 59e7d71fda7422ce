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
//! 4. place every replica that misses stages — all its missing stages in one transaction or
//!    none of them — on the fullest node that fits (bin-pack) or the emptiest (spread), in
//!    O(log n) per stage; stages that ask for GPUs go to GPU nodes, the others to GPU-less
//!    nodes (Macs, CPU boxes); a replica that does not fit backs off exponentially with
//!    deterministic jitter, and a node joining ends every backoff. After three failed tries
//!    a replica missing stages gives back the stages it holds (a partial pipeline serves
//!    nobody, and its room may complete another).
//!
//! When a node is lost, only its stages move: the replica's other stages stay bound, which
//! is the minimal-move re-plan (the stage ranges are the planner's and do not change).
//! Every write a pass makes is a compare-and-swap: a binding expects its key absent and each
//! node's record unchanged since it was read, a release expects the binding unchanged, so
//! two controllers on one store can never over-fill a node or bind a stage twice. Facts from
//! events (a deployment, a node leaving) are written as they are, except a node's capacity,
//! which is written against the revision read so it never shrinks under a stage placed
//! meanwhile. A crash between transactions loses nothing persisted; the next pass starts from
//! the store. Records this version cannot read are quarantined and named, never released;
//! the loop never writes one itself (a node, a deployment or an autoscaled replica count
//! must pass the check a pass reads it with).
//!
//! A deployment planned from a scenario keeps its plan ([`spec::Planned`]): its stages are
//! pinned to the plan's machines, each with a predicted step time. Before autoscaling, a
//! pass compares what the [`Metrics`] source measured with those predictions
//! ([`balance`]): a stage skewed against the others for several passes refits its
//! machines' speed, a node whose free memory falls under its reserve sheds layers at once,
//! and the deployment is re-planned with the fewest-moves search and written back with an
//! event that says why. Changed stages then move one replica at a time, the whole replica
//! at once (a replica waiting its turn keeps its old split bound, and serves it), never
//! leaving fewer complete replicas than `min_replicas` (where that would, one more is placed
//! on the new split first, in the index past the replicas: make before break), and where
//! [`Metrics::replica_serving`] knows (the agents' reports), only once the replica moved or
//! placed before serves.
//!
//! [`store::MemoryStore`] serves tests, simulations and the browser; the native stores
//! (redb, etcd) live in `crates/stageplan-store`.

pub mod balance;
mod capacity;
mod controller;
mod invariants;
mod metrics;
pub mod observe;
mod pass;
mod replan;
mod report;
mod snapshot;
pub mod spec;
pub mod store;
mod writes;

pub use controller::{Controller, Event, Options, Resolve};
pub use invariants::{Violation, check_invariants};
pub use metrics::{Metrics, NoMetrics};
pub use report::{PassReport, Release};
pub use snapshot::Snapshot;
pub use spec::{
    Assignment, Autoscale, BalanceOptions, Deployment, Learned, Node, Placement, Planned, Predicted, Rebalance,
    StageRequest, Status, assignment_key, planned_stages,
};
pub use store::{Expect, MemoryStore, Op, Store, StoreError, Versioned};

#[cfg(test)]
mod tests;
