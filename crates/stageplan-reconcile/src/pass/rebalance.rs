//! The pass's first step: compare what planned deployments measure with what their plans
//! predicted (the judgement is [`crate::balance`]'s), and when a deployment should change,
//! re-plan it and write it back. The release step then rolls the changed stages.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use stageplan::{Problem, Scenario};

use crate::balance::{Decision, NodeView, StageView, Tier, Watch};
use crate::metrics::Metrics;
use crate::replan::replanned;
use crate::report::PassReport;
use crate::snapshot::Snapshot;
use crate::spec::{Assignment, Deployment, Status, assignment_key};
use crate::store::{DEPLOYMENTS, Expect, Op, Store, StoreError};
use crate::writes::{commit_groups, json};

/// What re-balancing remembers between passes, per planned deployment.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rebalancing {
    /// Per planned deployment: the measurements watched for skew.
    watches: HashMap<String, Watch>,
    /// Per planned deployment: its scenario's hash and what it resolved to.
    problems: HashMap<String, (blake3::Hash, Result<Problem, String>)>,
}

impl Rebalancing {
    /// Re-balances planned deployments from what they measure (see [`crate::balance`]):
    /// refits their machines, re-plans with the fewest-moves search and writes the new
    /// stages, which the release step then moves a replica at a time. Returns the
    /// deployments written.
    pub(crate) fn rebalance(
        &mut self,
        resolve: impl Fn(&Scenario) -> Result<Problem, String>,
        store: &mut impl Store,
        snapshot: &mut Snapshot,
        now_ms: u64,
        metrics: &dyn Metrics,
        report: &mut PassReport,
    ) -> Result<BTreeSet<String>, StoreError> {
        let Rebalancing { watches, problems } = self;
        let planned = |name: &String| snapshot.deployments.get(name).is_some_and(|(d, _)| d.planned.is_some());
        watches.retain(|name, _| planned(name));
        problems.retain(|name, _| planned(name));
        let mut written = BTreeSet::new();
        let mut groups = Vec::new();
        let mut bound: HashMap<&str, u64> = HashMap::new();
        for (a, _) in snapshot.assignments.values() {
            *bound.entry(a.node.as_str()).or_default() += a.memory;
        }
        for (name, (deployment, revision)) in &mut snapshot.deployments {
            let Some(plan) = &deployment.planned else { continue };
            let hash = blake3::hash(json(&plan.scenario).as_bytes());
            let resolved = match problems.get(name) {
                Some((h, resolved)) if *h == hash => resolved,
                _ => &problems.entry(name.clone()).insert_entry((hash, resolve(&plan.scenario))).into_mut().1,
            };
            let problem = match resolved {
                Ok(problem) => problem,
                Err(why) => {
                    report.held.push((name.clone(), format!("its scenario no longer resolves: {why}")));
                    continue;
                }
            };
            let views = stage_views(name, deployment, problem, &snapshot.assignments, metrics);
            // A cluster node is a machine: one with several GPUs reports once, for all of them.
            let mut nodes: BTreeMap<String, NodeView> = BTreeMap::new();
            for n in &problem.nodes {
                let machine = n.gpu_of.as_ref().map_or(n.name.as_str(), |g| g.machine.as_str());
                let view = nodes.entry(machine.to_owned()).or_insert_with(|| NodeView {
                    up: metrics.node_up(machine),
                    memory_free: metrics.memory_free(machine),
                    reserve: 0,
                    memory: 0,
                    bound: bound.get(machine).copied().unwrap_or(0),
                });
                view.reserve = view.reserve.saturating_add(n.reserve);
                view.memory = view.memory.saturating_add(n.memory);
            }
            let decision = watches.entry(name.clone()).or_default().observe(plan, &views, &nodes, now_ms);
            let Decision::Replan { learned, why, forced } = decision else { continue };
            match replanned(deployment, plan, problem, learned, &why, forced, now_ms) {
                Ok(updated) => {
                    let event = updated.planned.as_ref().and_then(|p| p.events.last()).map(|e| e.reason.clone());
                    report.rebalanced.push((name.clone(), event.unwrap_or_default()));
                    *deployment = updated;
                    let key = format!("{DEPLOYMENTS}{name}");
                    groups.push(vec![Op::Put { key, value: json(deployment), expect: Expect::Revision(*revision) }]);
                    written.insert(name.clone());
                }
                Err(held) => report.held.push((name.clone(), held)),
            }
        }
        commit_groups(store, groups, report)?;
        Ok(written)
    }
}

/// Each stage of a planned deployment as re-balancing sees it this pass: its machine's
/// tier and its measured step time (the median over the replicas that run the current
/// stage and report it).
fn stage_views<'a>(
    name: &str,
    deployment: &'a Deployment,
    problem: &Problem,
    assignments: &BTreeMap<String, (Assignment, u64)>,
    metrics: &dyn Metrics,
) -> Vec<StageView<'a>> {
    deployment
        .stages
        .iter()
        .enumerate()
        .map(|(s, request)| {
            let node = request.node.as_deref().unwrap_or_default();
            // On a machine with several GPUs, the stage's GPU as the plan names it.
            let plan_node = request.plan_node().unwrap_or_default();
            let machine = problem.nodes.iter().find(|n| n.name == plan_node);
            // Every replica, the one a roll places past them included.
            let mut measured: Vec<f64> = (0..=super::release::slots(deployment))
                .filter(|&r| {
                    assignments.get(&assignment_key(name, r, s)).is_some_and(|(a, _)| {
                        a.node == node && a.layers == request.layers && a.status == Status::Running
                    })
                })
                .filter_map(|r| metrics.stage_step_s(name, r, s))
                .filter(|t| t.is_finite() && *t > 0.0)
                .collect();
            measured.sort_by(f64::total_cmp);
            StageView {
                request,
                tier: Tier::of(machine.and_then(|m| m.kind)),
                measured_s: (!measured.is_empty()).then(|| measured[(measured.len() - 1) / 2]),
            }
        })
        .collect()
}
