//! Re-planning a running cluster with as few moved bytes as possible.
//!
//! When the cluster changes (a node lost, added, slowed, given less memory), the best plan
//! may shuffle many layers for a small gain. Re-planning instead:
//!
//! 1. keeps the current plan when it still fits and the best plan is less than `hysteresis`
//!    better (no move for a small gain, so small metric changes never make plans oscillate);
//! 2. otherwise looks, among plans within `tolerance` of the best, for the one that moves
//!    the fewest bytes: a subset dynamic program over (nodes used, layers covered) whose
//!    stages must each stay within the best plan's slowest stage times `1 + tolerance`,
//!    minimising bytes moved (a sum over layers, so each step is a sliding-window minimum).
//!    The plan it finds is checked against the objective (the workload's cycle, or the sum
//!    of stages) within the same tolerance, falling back to the optimal plan.
//!
//! A lost node's layers are always re-placed: its stages are no longer valid, so the current
//! plan is never kept. Moves are weights (and the embedding or head when the first or last
//! stage changes hands); a lost node's share is reloaded from storage at the default link's
//! speed. With per-pair links, stages are checked against the slowest link, so the plan
//! found is feasible but may move more than strictly needed.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::search::{self, Split, value};
use super::{evaluate, plan_on};
use crate::cost::CostModel;
use crate::model::Place;
use crate::plan::Plan;
use crate::problem::{Placement, Problem};
use crate::scenario::{Objective, Policy};

/// How eager re-planning is.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct ReplanOptions {
    /// Accept plans this much worse than the best (0.03: within 3%) if they move less.
    pub tolerance: f64,
    /// Keep the current plan unless the best is this much better (0.05: 5%).
    pub hysteresis: f64,
}

impl Default for ReplanOptions {
    fn default() -> Self {
        ReplanOptions { tolerance: 0.03, hysteresis: 0.05 }
    }
}

/// A stage of the plan that is running now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurrentStage {
    pub node: String,
    pub layers: [usize; 2],
}

/// Layers (or the embedding or head) moving from one node to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Move {
    /// `[start, end)` of the layers; the embedding travels with layer 0 and the head with the
    /// last layer when their stage changes hands.
    pub layers: [usize; 2],
    /// The node that holds them now; `null` when it is gone (reload them from storage).
    pub from: Option<String>,
    pub to: String,
    pub bytes: u64,
    /// Time to send them over the link between the two nodes.
    pub time_s: f64,
}

/// The new plan and how to get there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Replan {
    pub plan: Plan,
    pub moves: Vec<Move>,
    pub bytes_moved: u64,
    /// Bytes that switching to the best plan outright would move, for comparison.
    pub best_plan_bytes: u64,
    /// Moves to different nodes run in parallel: the longest node's total.
    pub move_time_s: f64,
    /// The current plan was kept (no moves).
    pub kept: bool,
    pub reason: String,
    /// The best plan's value (tokens/s for throughput, seconds per token for latency).
    pub best: Option<f64>,
}

/// A current plan that cannot be compared with the new cluster.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplanError {
    #[error("the current plan {0}; give what `stageplan plan --format json` printed")]
    Json(String),
    #[error("the current plan's stages {0}; give the stages `stageplan plan --format json` printed")]
    Stages(String),
    #[error("`{field}` is {value}; give a fraction between 0 and 1, such as 0.03")]
    Option { field: &'static str, value: f64 },
}

/// The running plan's stages from JSON: what `stageplan plan --format json` printed (also
/// with `--verify`), a previous re-plan's output, or just `{"stages": [{"node", "layers"}]}`.
/// Other fields are ignored.
///
/// # Errors
/// Text that is not JSON, or has no `stages` with a `node` name and `layers: [start, end]`.
pub fn current_from_json(text: &str) -> Result<Vec<CurrentStage>, ReplanError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ReplanError::Json(format!("is not valid JSON ({e})")))?;
    let stages = value
        .get("stages")
        .or_else(|| value.get("plan").and_then(|p| p.get("stages")))
        .ok_or_else(|| ReplanError::Json("has no `stages` (nor `plan.stages`)".to_owned()))?;
    let stages = stages.as_array().ok_or_else(|| ReplanError::Json("`stages` is not a list".to_owned()))?;
    stages
        .iter()
        .enumerate()
        .map(|(i, stage)| {
            let node = stage
                .get("node")
                .and_then(|n| n.as_str())
                .ok_or_else(|| ReplanError::Json(format!("`stages[{i}].node` is missing or not a string")))?;
            let layers = stage
                .get("layers")
                .and_then(|l| l.as_array())
                .filter(|l| l.len() == 2)
                .and_then(|l| Some([usize::try_from(l[0].as_u64()?).ok()?, usize::try_from(l[1].as_u64()?).ok()?]))
                .ok_or_else(|| ReplanError::Json(format!("`stages[{i}].layers` is not `[start, end]`")))?;
            Ok(CurrentStage { node: node.to_owned(), layers })
        })
        .collect()
}

/// Re-plans `problem` (the changed cluster) from the plan running now.
///
/// # Errors
/// Current stages that do not tile the model's layers, or options out of range.
pub fn replan(problem: &Problem, current: &[CurrentStage], options: ReplanOptions) -> Result<Replan, ReplanError> {
    for (field, value) in [("tolerance", options.tolerance), ("hysteresis", options.hysteresis)] {
        if !(0.0..1.0).contains(&value) {
            return Err(ReplanError::Option { field, value });
        }
    }
    let layers = problem.model.num_layers();
    let mut expected = 0;
    for stage in current {
        if stage.layers[0] != expected || stage.layers[1] <= stage.layers[0] {
            return Err(ReplanError::Stages(format!(
                "do not continue at layer {expected} (`{}`: {:?})",
                stage.node, stage.layers
            )));
        }
        expected = stage.layers[1];
    }
    if expected != layers {
        return Err(ReplanError::Stages(format!("end at layer {expected}, but the model has {layers}")));
    }
    let cost = CostModel::new(problem);
    let index = |name: &str| problem.nodes.iter().position(|n| n.name == name);
    // Who holds each layer now (None: a node that is gone).
    let mut owner: Vec<Option<usize>> = vec![None; layers];
    for stage in current {
        for slot in &mut owner[stage.layers[0]..stage.layers[1]] {
            *slot = index(&stage.node);
        }
    }
    let old_first = index(&current[0].node);
    let old_last = current.last().and_then(|s| index(&s.node));
    let lost: Vec<&str> = current.iter().filter(|s| index(&s.node).is_none()).map(|s| s.node.as_str()).collect();

    let allowed = vec![true; problem.nodes.len()];
    let objective = problem.objective;
    let found = search::optimal(&cost, objective, &allowed, None);
    let to_value = |seconds: f64| match objective {
        Objective::Throughput => problem.workload.batch as f64 / seconds,
        Objective::Latency => seconds,
    };
    let Some((best_seconds, best_stages)) = found.best else {
        let plan = plan_on(problem, &cost, &allowed, Policy::Optimal, objective, true, None);
        return Ok(Replan {
            plan,
            moves: Vec::new(),
            bytes_moved: 0,
            best_plan_bytes: 0,
            move_time_s: 0.0,
            kept: false,
            reason: "no plan fits the changed cluster".into(),
            best: None,
        });
    };
    let current_assignment: Option<Split> =
        current.iter().map(|s| index(&s.node).map(|k| Placement::new(k, s.layers[0], s.layers[1]))).collect();
    let current_seconds = current_assignment.as_ref().and_then(|a| value(&cost, a, objective));

    let (stages, kept, reason) = match current_seconds {
        Some(now) if now <= best_seconds * (1.0 + options.hysteresis) => (
            current_assignment.clone().unwrap_or_default(),
            true,
            if now <= best_seconds * (1.0 + 1e-9) {
                "kept: the running plan is still the best".to_owned()
            } else {
                format!(
                    "kept: the best plan is only {:.1}% better, under the {:.0}% hysteresis",
                    (now / best_seconds - 1.0) * 100.0,
                    options.hysteresis * 100.0
                )
            },
        ),
        _ => {
            let bound = best_seconds * (1.0 + options.tolerance);
            // The best plan's slowest stage (whole-batch steps), with the tolerance, bounds
            // every stage of the plans searched; each is then checked on the objective.
            let stage_bound =
                cost.stage_times(&best_stages).iter().copied().fold(0.0, f64::max) * (1.0 + options.tolerance);
            let mover = Mover { cost: &cost, owner: &owner, old_first, old_last, model: problem };
            let cheapest =
                mover.least_moves(stage_bound).filter(|a| value(&cost, a, objective).is_some_and(|v| v <= bound));
            let why = if lost.is_empty() {
                match current_seconds {
                    Some(now) => {
                        format!("re-planned: the best plan is {:.1}% better", (now / best_seconds - 1.0) * 100.0)
                    }
                    None => "re-planned: the current plan no longer fits".to_owned(),
                }
            } else {
                format!(
                    "re-planned: {} {} gone; its layers are re-placed",
                    lost.join(", "),
                    if lost.len() == 1 { "is" } else { "are" }
                )
            };
            match cheapest {
                Some(a) => {
                    (a, false, format!("{why}, moving the least within {:.0}% of the best", options.tolerance * 100.0))
                }
                None => (best_stages.clone(), false, why),
            }
        }
    };

    let mut plan = evaluate(problem, &cost, &stages, Policy::Optimal, objective);
    plan.search = crate::plan::Search {
        method: "replan".to_owned(),
        detail: found.detail,
        bound: Some(to_value(best_seconds)),
        gap: plan.objective_value().map(|v| ((v - to_value(best_seconds)) / to_value(best_seconds)).abs()),
    };
    let moves_to = |stages: &[Placement]| moves(problem, &cost, &owner, old_first, old_last, stages);
    let moves = if kept { Vec::new() } else { moves_to(&stages) };
    let bytes_moved = moves.iter().map(|m| m.bytes).sum();
    let best_plan_bytes = moves_to(&best_stages).iter().map(|m| m.bytes).sum();
    let mut per_receiver: Vec<f64> = vec![0.0; problem.nodes.len()];
    for m in &moves {
        if let Some(k) = index(&m.to) {
            per_receiver[k] += m.time_s;
        }
    }
    Ok(Replan {
        plan,
        moves,
        bytes_moved,
        best_plan_bytes,
        move_time_s: per_receiver.into_iter().fold(0.0, f64::max),
        kept,
        reason,
        best: Some(to_value(best_seconds)),
    })
}

/// The moves from the current owners to `stages`.
pub(crate) fn moves(
    problem: &Problem,
    cost: &CostModel,
    owner: &[Option<usize>],
    old_first: Option<usize>,
    old_last: Option<usize>,
    stages: &[Placement],
) -> Vec<Move> {
    let layer_bytes: Vec<u64> = problem.model.layers().iter().map(|l| l.bytes).collect();
    let name = |k: Option<usize>| k.map(|k| problem.nodes[k].name.clone());
    let link_time = |from: Option<usize>, to: usize, bytes: u64| {
        let link = match from {
            Some(f) if f != to => problem.links.get(f, to),
            _ => problem.links.default,
        };
        link.time(bytes as f64)
    };
    let mut out: Vec<Move> = Vec::new();
    for &Placement { node: to, start, end } in stages {
        let mut l = start;
        while l < end {
            let from = owner[l];
            let mut stop = l;
            while stop < end && owner[stop] == from {
                stop += 1;
            }
            if from != Some(to) {
                let bytes: u64 = layer_bytes[l..stop].iter().sum();
                out.push(Move {
                    layers: [l, stop],
                    from: name(from),
                    to: problem.nodes[to].name.clone(),
                    bytes,
                    time_s: link_time(from, to, bytes),
                });
            }
            l = stop;
        }
    }
    let l = cost.layers();
    let (first, last) = (stages[0].node, stages[stages.len() - 1].node);
    let extra = [(old_first, first, Place::Embedding, [0, 0]), (old_last, last, Place::Head, [l, l])];
    for (old, new, place, layers) in extra {
        if old != Some(new) {
            let bytes = if place == Place::Head { problem.model.head_bytes() } else { problem.model.bytes_at(place) };
            out.push(Move {
                layers,
                from: name(old),
                to: problem.nodes[new].name.clone(),
                bytes,
                time_s: link_time(old, new, bytes),
            });
        }
    }
    out
}

/// The least-moving plan search.
/// For one node under a stage-time bound: which stages it can run, as windows where the
/// stage's time and memory grow with its range, else stage by stage.
enum ReachTable {
    /// A node without system RAM: a stage that fits stays fitting, and no slower, when its start
    /// moves up or its end down (from start 1 on: a first stage holds the embedding).
    Windows {
        /// `reach[j]`: the largest `e < L` with `[j, e)` within the bound and memory; `j` if none.
        reach: Vec<u32>,
        /// Smallest start `j ≥ 1` from which `[j, L)` is within the bound as a last stage.
        final_from: usize,
        /// The whole model alone on this node is within the bound.
        single_ok: bool,
    },
    /// A node with system RAM runs a stage as its best placement does, which need not shrink
    /// with the range (a CPU or RAM faster than a small GPU takes more of a longer stage):
    /// every stage, checked.
    Every {
        /// `middle[j * (L + 1) + e]`: `[j, e)` is within the bound as a stage that passes on.
        middle: Vec<bool>,
        /// `last[j]`: `[j, L)` is within the bound as a last stage (`j = 0`: the only stage).
        last: Vec<bool>,
    },
}

impl ReachTable {
    /// `hops`: the cut after the first stage (`j = 0`), and after any other.
    fn new(cost: &CostModel, k: usize, tau: f64, hops: [f64; 2], ret: f64) -> ReachTable {
        let l = cost.layers();
        let within = |j: usize, e: usize, send: f64| cost.fits(k, j, e) && cost.roofline_s(k, j, e) + send <= tau;
        let hop = |j: usize| hops[usize::from(j > 0)];
        if cost.host_budget(k) > 0 {
            let mut middle = vec![false; l * (l + 1)];
            for j in 0..l {
                for e in j + 1..l {
                    middle[j * (l + 1) + e] = within(j, e, hop(j));
                }
            }
            let last = (0..l).map(|j| within(j, l, if j == 0 { 0.0 } else { ret })).collect();
            return ReachTable::Every { middle, last };
        }
        // Two pointers over the windows.
        let mut p = 0usize;
        let reach = (0..l)
            .map(|j| {
                if j == 1 {
                    p = 0;
                }
                p = p.max(j);
                while p + 1 < l && within(j, p + 1, hop(j)) {
                    p += 1;
                }
                p as u32
            })
            .collect();
        // Last stages shrink as the start grows: the first start within the bound.
        let final_from = (1..l).find(|&j| within(j, l, ret)).unwrap_or(usize::MAX);
        ReachTable::Windows { reach, final_from, single_ok: within(0, l, 0.0) }
    }

    /// Can this node run `[j, e)` as a stage that passes on (`e < L`)?
    fn middle(&self, j: usize, e: usize, l: usize) -> bool {
        match self {
            ReachTable::Windows { reach, .. } => e <= reach[j] as usize,
            ReachTable::Every { middle, .. } => middle[j * (l + 1) + e],
        }
    }

    /// The starts `j` from which this node can run `[j, L)` as the last stage (or, for `j = 0`,
    /// the only one).
    fn last_starts(&self, first: bool, l: usize) -> impl Iterator<Item = usize> + '_ {
        let range = if first { 0..1 } else { 1..l };
        range.filter(move |&j| match self {
            ReachTable::Windows { final_from, single_ok, .. } => {
                if j == 0 {
                    *single_ok
                } else {
                    j >= *final_from
                }
            }
            ReachTable::Every { last, .. } => last[j],
        })
    }
}

pub(crate) struct Mover<'a> {
    pub(crate) cost: &'a CostModel,
    pub(crate) owner: &'a [Option<usize>],
    pub(crate) old_first: Option<usize>,
    pub(crate) old_last: Option<usize>,
    pub(crate) model: &'a Problem,
}

impl Mover<'_> {
    /// The plan that moves the fewest bytes with every stage (hop included) within `tau`:
    /// a subset DP over (nodes used, layers covered) with all nodes alike in its state.
    pub(crate) fn least_moves(&self, tau: f64) -> Option<Split> {
        let cost = self.cost;
        let l = cost.layers();
        let nodes: Vec<usize> = (0..cost.node_count()).filter(|&k| cost.nodes[k].capacity >= 0).collect();
        let m = nodes.len();
        if m == 0 || m > 16 || l == 0 {
            return None;
        }
        // A hop and the return (with per-pair links, every stage held to the slowest); the
        // first stage's cut is one hop, any other's two where the engine relays it through the
        // first stage's machine.
        let (hop, ret) = if cost.uniform_links() {
            (cost.uniform_hop_s(), cost.uniform_return_s())
        } else {
            let pairs = || nodes.iter().flat_map(|&a| nodes.iter().filter(move |&&b| b != a).map(move |&b| (a, b)));
            let worst = |time: &dyn Fn((usize, usize)) -> f64| pairs().map(time).fold(0.0, f64::max);
            (worst(&|(a, b)| cost.hop_s(a, b)), worst(&|(a, b)| cost.return_s(a, b)))
        };
        let hops = [hop, cost.cut_of_hops_s(hop, false)];
        let layer_bytes: Vec<u64> = self.model.model.layers().iter().map(|layer| layer.bytes).collect();
        let embed = self.model.model.bytes_at(Place::Embedding);
        let head = self.model.model.head_bytes();
        let tables: Vec<ReachTable> = nodes.iter().map(|&k| ReachTable::new(cost, k, tau, hops, ret)).collect();
        // moved[i][j]: bytes moved if node i took layers [0, j).
        let moved: Vec<Vec<u64>> = nodes
            .iter()
            .map(|&k| {
                let mut prefix = vec![0u64; l + 1];
                for layer in 0..l {
                    prefix[layer + 1] =
                        prefix[layer] + if self.owner[layer] == Some(k) { 0 } else { layer_bytes[layer] };
                }
                prefix
            })
            .collect();
        let full = 1usize << m;
        let width = l + 1;
        const NONE: u64 = u64::MAX;
        let mut best = vec![NONE; full * width];
        let mut from = vec![(0u32, 0u8); full * width];
        best[0] = 0;
        let mut answer: Option<(u64, usize, usize, usize)> = None;
        for mask in 0..full {
            if best[mask * width..(mask + 1) * width].iter().all(|&v| v == NONE) {
                continue;
            }
            for i in 0..m {
                if mask & (1 << i) != 0 {
                    continue;
                }
                let k = nodes[i];
                let table = &tables[i];
                let prefix = &moved[i];
                let embed_move = if self.old_first == Some(k) { 0 } else { embed };
                let head_move = if self.old_last == Some(k) { 0 } else { head };
                let done = mask | (1 << i);
                // Finish on node i.
                for j in table.last_starts(mask == 0, l) {
                    let before = best[mask * width + j];
                    if before == NONE {
                        continue;
                    }
                    let total = before + prefix[l] - prefix[j] + head_move + if mask == 0 { embed_move } else { 0 };
                    if answer.is_none_or(|a| total < a.0) {
                        answer = Some((total, mask, i, j));
                    }
                }
                // Or close a stage [j, e) and pass on; valid starts for end e form a window.
                if mask == 0 {
                    for e in (1..l).filter(|&e| table.middle(0, e, l)) {
                        let cell = done * width + e;
                        let v = prefix[e] + embed_move;
                        if v < best[cell] {
                            best[cell] = v;
                            from[cell] = (0, i as u8);
                        }
                    }
                    continue;
                }
                let ReachTable::Windows { reach, .. } = table else {
                    // Stage by stage: every start before every end.
                    for e in 2..l {
                        for j in 1..e {
                            let before = best[mask * width + j];
                            if before == NONE || !table.middle(j, e, l) {
                                continue;
                            }
                            let cell = done * width + e;
                            let v = before + prefix[e] - prefix[j];
                            if v < best[cell] {
                                best[cell] = v;
                                from[cell] = (j as u32, i as u8);
                            }
                        }
                    }
                    continue;
                };
                let mut window: VecDeque<(usize, i128)> = VecDeque::new();
                let mut next_j = 1usize;
                let mut lo = 1usize;
                for e in 2..l {
                    while next_j < e {
                        let v = best[mask * width + next_j];
                        if v != NONE {
                            let key = i128::from(v) - i128::from(prefix[next_j]);
                            while window.back().is_some_and(|&(_, b)| b >= key) {
                                window.pop_back();
                            }
                            window.push_back((next_j, key));
                        }
                        next_j += 1;
                    }
                    // Starts whose reach falls short of e can never reach it again.
                    while lo < e && (reach[lo] as usize) < e {
                        lo += 1;
                    }
                    while window.front().is_some_and(|&(j, _)| j < lo) {
                        window.pop_front();
                    }
                    if let Some(&(j, _)) = window.front() {
                        let cell = done * width + e;
                        let v = best[mask * width + j] + prefix[e] - prefix[j];
                        if v < best[cell] {
                            best[cell] = v;
                            from[cell] = (j as u32, i as u8);
                        }
                    }
                }
            }
        }
        let (_, mut mask, i, j) = answer?;
        let mut stages = vec![Placement::new(nodes[i], j, l)];
        let mut end = j;
        while mask != 0 {
            let (start, pos) = from[mask * width + end];
            stages.push(Placement::new(nodes[pos as usize], start as usize, end));
            mask &= !(1 << pos);
            end = start as usize;
        }
        stages.reverse();
        Some(stages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    fn problem(nodes: &str) -> Problem {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.1-70b", "weights": "q4_k_m"}}, "workload": {{"context": 8192}}, "nodes": [{nodes}]}}"#
        );
        Scenario::from_json(&json).unwrap().problem().unwrap()
    }

    const CLUSTER: &str = r#"{"name": "a", "device": "rtx-3090"}, {"name": "b", "device": "rtx-4090"},
        {"name": "c", "device": "rtx-3090"}, {"name": "mac", "device": "m2-max-96gb"}"#;

    fn running(plan: &Plan) -> Vec<CurrentStage> {
        plan.stages.iter().map(|s| CurrentStage { node: s.node.clone(), layers: s.layers }).collect()
    }

    fn without(problem: &Problem, name: &str) -> Problem {
        let keep: Vec<usize> = (0..problem.nodes.len()).filter(|&k| problem.nodes[k].name != name).collect();
        let mut smaller = problem.clone();
        smaller.nodes.retain(|n| n.name != name);
        smaller.links = problem.links.subset(&keep);
        smaller
    }

    /// Bytes moved by switching from `now` to `target` outright.
    fn bytes_to(problem: &Problem, now: &Plan, target: &Plan) -> u64 {
        let cost = CostModel::new(problem);
        let index = |n: &str| problem.nodes.iter().position(|x| x.name == n);
        let owner: Vec<Option<usize>> = (0..problem.model.num_layers())
            .map(|l| now.stages.iter().find(|s| s.layers[0] <= l && l < s.layers[1]).and_then(|s| index(&s.node)))
            .collect();
        let stages: Vec<Placement> =
            target.stages.iter().map(|s| Placement::new(index(&s.node).unwrap(), s.layers[0], s.layers[1])).collect();
        let (first, last) = (index(&now.stages[0].node), index(&now.stages[now.stages.len() - 1].node));
        moves(problem, &cost, &owner, first, last, &stages).iter().map(|m| m.bytes).sum()
    }

    #[test]
    fn an_unchanged_cluster_keeps_its_plan() {
        let p = problem(CLUSTER);
        let now = crate::plan(&p);
        let r = replan(&p, &running(&now), ReplanOptions::default()).unwrap();
        assert!(r.kept && r.moves.is_empty() && r.bytes_moved == 0, "{}", r.reason);
        assert_eq!(running(&r.plan), running(&now));
    }

    #[test]
    fn a_lost_node_is_always_replaced() {
        let p = problem(CLUSTER);
        let now = crate::plan(&p);
        for lost in now.stages.iter().map(|s| s.node.clone()) {
            let smaller = without(&p, &lost);
            // Even a hysteresis that would keep anything does not keep a plan on a lost node.
            let r = replan(&smaller, &running(&now), ReplanOptions { tolerance: 0.03, hysteresis: 0.99 }).unwrap();
            assert!(!r.kept, "{}", r.reason);
            assert!(r.reason.contains(&format!("{lost} is gone")), "{}", r.reason);
            assert!(r.plan.feasible && r.plan.stages.iter().all(|s| s.node != lost));
            let held = now.stages.iter().find(|s| s.node == lost).unwrap().layers;
            let reloaded: usize = r.moves.iter().filter(|m| m.from.is_none()).map(|m| m.layers[1] - m.layers[0]).sum();
            assert!(reloaded >= held[1] - held[0], "every layer of {lost} is reloaded: {:?}", r.moves);
            assert!(r.move_time_s > 0.0);
        }
    }

    #[test]
    fn it_moves_less_than_jumping_to_the_best_plan() {
        let p = problem(CLUSTER);
        let now = crate::plan(&p);
        // The 4090 slows down (thermal throttling, a neighbour's job): its share should shrink.
        let mut slower = p.clone();
        let b = slower.nodes.iter().position(|n| n.name == "b").unwrap();
        slower.nodes[b].bandwidth *= 0.6;
        let r = replan(&slower, &running(&now), ReplanOptions::default()).unwrap();
        assert!(!r.kept, "{}", r.reason);
        let best = crate::plan_with(&slower, crate::planner::PlanOptions::bare());
        assert!(
            r.plan.tokens_per_s >= best.tokens_per_s / 1.03 - 1e-9,
            "{} vs {}",
            r.plan.tokens_per_s,
            best.tokens_per_s
        );
        let jump_bytes = bytes_to(&slower, &now, &best);
        assert!(r.bytes_moved <= jump_bytes, "{} > {}", r.bytes_moved, jump_bytes);
        assert!(r.bytes_moved > 0);
    }

    #[test]
    fn less_memory_forces_a_replan() {
        let p = problem(CLUSTER);
        let now = crate::plan(&p);
        let mut tight = p.clone();
        let biggest = now.stages.iter().max_by_key(|s| s.memory.total).unwrap();
        let k = tight.nodes.iter().position(|n| n.name == biggest.node).unwrap();
        tight.nodes[k].memory = biggest.memory.total - biggest.memory.reserve - 1;
        let r = replan(&tight, &running(&now), ReplanOptions { tolerance: 0.03, hysteresis: 0.99 }).unwrap();
        assert!(!r.kept && r.reason.contains("no longer fits"), "{}", r.reason);
        assert!(r.plan.feasible);
    }

    /// Repeated small changes in the measured figures (±2%, as a probe's noise) never move
    /// a layer, where re-planning to the best plan each time would.
    #[test]
    fn small_metric_changes_do_not_make_plans_oscillate() {
        let base = problem(
            r#"{"name": "a", "device": "rtx-3090"}, {"name": "b", "device": "rtx-3090"},
               {"name": "c", "device": "rtx-3090"}, {"name": "d", "device": "rtx-3090"}"#,
        );
        let mut current = running(&crate::plan(&base));
        let mut naive = current.clone();
        let mut naive_changes = 0;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for step in 0..60 {
            let mut noisy = base.clone();
            for node in &mut noisy.nodes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let factor = 0.98 + 0.04 * (state >> 11) as f64 / (1u64 << 53) as f64;
                node.bandwidth *= factor;
                node.compute *= factor;
            }
            let r = replan(&noisy, &current, ReplanOptions::default()).unwrap();
            assert!(r.kept && r.moves.is_empty(), "step {step}: {}", r.reason);
            current = running(&r.plan);
            let best = running(&crate::plan_with(&noisy, crate::planner::PlanOptions::bare()));
            if best != naive {
                naive_changes += 1;
                naive = best;
            }
        }
        assert!(naive_changes >= 5, "the noise is large enough to flip the best plan ({naive_changes} flips)");
    }

    #[test]
    fn a_faster_node_joining_is_used_when_worth_it() {
        let p = problem(
            r#"{"name": "a", "device": "rtx-3090"}, {"name": "b", "device": "rtx-3090"}, {"name": "c", "device": "rtx-3090"}"#,
        );
        let now = crate::plan(&p);
        let bigger = problem(
            r#"{"name": "a", "device": "rtx-3090"}, {"name": "b", "device": "rtx-3090"}, {"name": "c", "device": "rtx-3090"},
               {"name": "h", "device": "h100"}"#,
        );
        let r = replan(&bigger, &running(&now), ReplanOptions::default()).unwrap();
        assert!(!r.kept, "{}", r.reason);
        assert!(r.plan.stages.iter().any(|s| s.node == "h"));
        let best = crate::plan_with(&bigger, crate::planner::PlanOptions::bare());
        assert!(r.plan.tokens_per_s >= best.tokens_per_s / 1.03 - 1e-9);
        assert!(r.bytes_moved <= bytes_to(&bigger, &now, &best));
    }

    #[test]
    fn bad_current_plans_and_options_are_refused_with_the_fix() {
        let p = problem(CLUSTER);
        let gap =
            [CurrentStage { node: "a".into(), layers: [0, 40] }, CurrentStage { node: "b".into(), layers: [41, 80] }];
        let e = replan(&p, &gap, ReplanOptions::default()).unwrap_err();
        assert!(e.to_string().contains("do not continue at layer 40"), "{e}");
        let short = [CurrentStage { node: "a".into(), layers: [0, 40] }];
        assert!(replan(&p, &short, ReplanOptions::default()).unwrap_err().to_string().contains("the model has 80"));
        let whole = [CurrentStage { node: "mac".into(), layers: [0, 80] }];
        let e = replan(&p, &whole, ReplanOptions { tolerance: 1.5, hysteresis: 0.05 }).unwrap_err();
        assert!(e.to_string().starts_with("`tolerance` is 1.5"), "{e}");
        assert!(replan(&p, &[], ReplanOptions::default()).is_err());
    }

    #[test]
    fn current_plans_are_read_from_what_the_planner_printed() {
        let p = problem(CLUSTER);
        let plan = crate::plan(&p);
        let printed = serde_json::to_string(&plan).unwrap();
        assert_eq!(current_from_json(&printed).unwrap(), running(&plan));
        let verified = format!(r#"{{"plan": {printed}, "exhaustive": null}}"#);
        assert_eq!(current_from_json(&verified).unwrap(), running(&plan));
        for (bad, says) in [
            ("{", "is not valid JSON"),
            ("{}", "has no `stages`"),
            (r#"{"stages": {}}"#, "`stages` is not a list"),
            (r#"{"stages": [{"layers": [0, 1]}]}"#, "`stages[0].node`"),
            (r#"{"stages": [{"node": "a", "layers": [0]}]}"#, "`stages[0].layers`"),
            (r#"{"stages": [{"node": "a", "layers": [-1, 4]}]}"#, "`stages[0].layers`"),
        ] {
            let e = current_from_json(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
