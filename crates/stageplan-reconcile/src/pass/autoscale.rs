//! The pass's second step: scale each deployment's replica count toward its target
//! utilization, within a tolerance band and cooldowns, and persist the new count (the
//! release and place steps then follow it).

use std::collections::BTreeSet;

use crate::metrics::Metrics;
use crate::report::PassReport;
use crate::snapshot::Snapshot;
use crate::store::{DEPLOYMENTS, Expect, Op, Store, StoreError};
use crate::writes::{commit_groups, json};

pub(crate) fn autoscale(
    store: &mut impl Store,
    snapshot: &mut Snapshot,
    now_ms: u64,
    metrics: &dyn Metrics,
    rebalanced: &BTreeSet<String>,
    report: &mut PassReport,
) -> Result<(), StoreError> {
    let mut groups = Vec::new();
    for (name, (deployment, revision)) in &mut snapshot.deployments {
        let Some(rule) = &deployment.autoscale else { continue };
        if rebalanced.contains(name) {
            // Written this pass already: its revision moved on. The next pass scales it.
            continue;
        }
        let Some(load) = metrics.utilization(name).filter(|u| u.is_finite() && *u >= 0.0) else { continue };
        let ratio = load / rule.target;
        if (ratio - 1.0).abs() <= rule.tolerance {
            continue;
        }
        let (min, max) = deployment.bounds();
        let wanted = ((f64::from(deployment.replicas.max(1)) * ratio).ceil() as u64)
            .clamp(u64::from(min), u64::from(max)) as u32;
        if wanted == deployment.replicas {
            continue;
        }
        let cooldown = if wanted > deployment.replicas { rule.up_cooldown_ms } else { rule.down_cooldown_ms };
        if deployment.last_scaled_ms.is_some_and(|t| now_ms < t.saturating_add(cooldown)) {
            continue;
        }
        let mut scaled = deployment.clone();
        scaled.replicas = wanted;
        scaled.last_scaled_ms = Some(now_ms);
        if scaled.check().is_err() {
            // Never write what the next pass would quarantine (`bounds` keeps to the
            // check's limits, so this does not happen).
            continue;
        }
        report.rescaled.push((name.clone(), deployment.replicas, wanted));
        *deployment = scaled;
        let key = format!("{DEPLOYMENTS}{name}");
        groups.push(vec![Op::Put { key, value: json(deployment), expect: Expect::Revision(*revision) }]);
    }
    commit_groups(store, groups, report)
}
