//! What the loop asks of running deployments, as one trait: [`Metrics`] answers autoscaling
//! (utilization) and re-balancing (stage times, free memory, whether a node is up). Sources
//! implement it — `observe` for the CLI's metrics file and Prometheus, a map for utilization
//! alone, test doubles — without depending on the controller.

use std::collections::BTreeMap;

/// What the running deployments measure: load for autoscaling, stage times and free memory
/// for re-balancing. Injectable, so tests and simulations drive it; the CLI reads it from a
/// file or a Prometheus server.
pub trait Metrics {
    /// Mean utilization of the deployment's replicas (1.0 = at capacity), if known.
    fn utilization(&self, deployment: &str) -> Option<f64>;

    /// Measured seconds per decode step of one stage of one replica, if known.
    fn stage_step_s(&self, _deployment: &str, _replica: u32, _stage: usize) -> Option<f64> {
        None
    }

    /// Bytes free on a node now (device memory, or RAM for GPU-less nodes), if known.
    fn memory_free(&self, _node: &str) -> Option<u64> {
        None
    }

    /// Whether a node reports itself up (serving), if known.
    fn node_up(&self, _node: &str) -> Option<bool> {
        None
    }

    /// Whether one replica of a deployment serves (every engine of its pipeline up), if
    /// known: a roll waits for the replica it moved to serve before it moves the next.
    fn replica_serving(&self, _deployment: &str, _replica: u32) -> Option<bool> {
        None
    }
}

/// No metrics: autoscaling holds.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn utilization(&self, _: &str) -> Option<f64> {
        None
    }
}

impl Metrics for BTreeMap<String, f64> {
    fn utilization(&self, deployment: &str) -> Option<f64> {
        self.get(deployment).copied()
    }
}
