//! What a pass did: every step adds to one [`PassReport`] (with why it released an
//! assignment, a [`Release`]), and the controller hands it back. Kept apart from the
//! controller so the steps fill it in without depending on it.

use serde::Serialize;

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PassReport {
    /// Assignment keys bound this pass.
    pub scheduled: Vec<String>,
    /// Assignment keys released, with why.
    pub released: Vec<(String, Release)>,
    /// Replicas (`deployment/replica`) still without a full pipeline.
    pub pending: Vec<String>,
    /// Replicas (`deployment/replica`) with changed stages that serve their old split until
    /// their turn in a roll (one replica at a time, `min_replicas` kept serving).
    pub waiting: Vec<String>,
    /// Deployments whose roll `min_replicas` holds: one replica more is placed beside the
    /// waiting ones (make before break), and the roll goes on once it serves.
    pub surging: Vec<String>,
    /// Deployments autoscaled: name, from, to.
    pub rescaled: Vec<(String, u32, u32)>,
    /// Planned deployments re-balanced from measurements: name, and what was measured and
    /// done (also kept in the deployment's record).
    pub rebalanced: Vec<(String, String)>,
    /// Planned deployments the loop could not re-balance although it wanted to, with why
    /// (the hourly limit, a scenario that no longer resolves, a roll that waits).
    pub held: Vec<(String, String)>,
    /// Records left alone because this version cannot use them, with why (see
    /// [`Snapshot::quarantined`](crate::Snapshot::quarantined)).
    pub quarantined: Vec<(String, String)>,
    /// Transactions committed.
    pub commits: usize,
}

impl PassReport {
    /// Whether the pass changed nothing in the store.
    pub fn is_quiet(&self) -> bool {
        self.commits == 0
    }
}

/// Why an assignment was released.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// Its deployment, replica or stage is no longer desired.
    NotDesired,
    /// The stage's request changed; it is placed again.
    Changed,
    /// Its node left.
    NodeGone,
    /// Its node no longer has room for it (the node shrank, or a record is inconsistent).
    NoRoom,
    /// The replica failed.
    Failed,
    /// The replica's other stages could not be placed after repeated tries: its bound
    /// stages are given back so they do not hold room no complete replica can use.
    Incomplete,
}
