//! The `optimal` policy: the node subset, order and contiguous split that serve the workload
//! fastest (throughput) or take each token through the pipeline soonest (latency).
//!
//! One search does the work: the **least sum** of stage times (and hops), optionally with every
//! stage capped at a threshold. The latency objective is the least sum with whole-batch steps.
//!
//! *Throughput* is what the workload's `B` sequences reach: for `k` micro-batches the cycle
//! is `max(Σ t_s, k · max t_s)` with stage times for `B/k` sequences (see [`crate::cost`]);
//! `k = 1` is the least sum. For `k ≥ 2` the least cycle is found by a search over a
//! threshold `τ` on the slowest stage, with the least sum under it: with `L*(τ)` the least
//! sum among plans whose stages all stay within `τ` (non-increasing in `τ`), the least cycle
//! is `min over τ of max(L*(τ), k·τ)`. Bisection finds the crossing of the two; every probe's
//! plan is a candidate, and `k` times the highest threshold shown to be too low is a bound no
//! plan beats.
//!
//! **Exact search over subsets and orders.** A pipeline is a sequence of nodes, each taking
//! the layers after the previous one. Which nodes came before matters only through the set of
//! nodes used and where the covered prefix ends, so a dynamic program over (set of nodes used,
//! layers covered) is exact over every ordered subset, in `O(2^n)` states rather than `n!`
//! orders (the Held–Karp idea, M. Held and R. M. Karp, *A dynamic programming approach to
//! sequencing problems*, 1962). Nodes with identical figures are interchangeable, so only one
//! representative subset per multiset is visited. The least sum is a shortest path over these
//! states. When a node's time is linear in its layers (it is memory-bound on every layer, or
//! compute-bound on every one — the usual case), the best predecessor for each end layer is a
//! sliding-window minimum over the starts that fit in memory and under the cap, so each
//! (subset, node) step costs `O(L)`.
//!
//! Uniform links (one default for every pair, the common case) need no order information in
//! the state. Per-pair links make hops depend on neighbours, so the state also carries the
//! open stage's node and the first (whose link receives the sampled token).
//!
//! Whether *anything* fits (for the fixes when nothing does) is the same subset DP where each
//! node reaches as far as memory lets it (a farther prefix is never worse).
//!
//! **Heuristic for large clusters.** When the exact state space is too large, the same
//! machinery runs on fixed node orders (fastest first, and variations), where it is exact
//! for that order with any node skipped, followed by a local search over swaps. The result
//! reports a lower bound from a fractional relaxation (layers spread over nodes as a fluid,
//! memory as a knapsack) and the gap to it.

// The dynamic programs index several tables by the same node position; index loops read
// closer to the recurrences than zipped iterators.
#![allow(clippy::needless_range_loop)]

mod bound;
mod exact;
mod fit;
mod heuristic;
mod tables;

use crate::cost::CostModel;
use crate::problem::Placement;
use crate::scenario::Objective;
use crate::units::group_digits;

pub(crate) use bound::lower_bound;
use exact::Space;
pub(crate) use fit::any_fit;
pub(crate) use heuristic::heuristic;
use heuristic::{fixed_order_min_sum, speed_order};

/// A candidate split of the layers: one placement per stage, in pipeline order.
pub(crate) type Split = Vec<Placement>;

/// What the search found.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// The best plan and its objective value in seconds: the cycle in which each of the
    /// workload's sequences gets a token (throughput), or the sum of stages (latency).
    pub best: Option<(f64, Split)>,
    /// True when `best` is proven optimal.
    pub exact: bool,
    /// No plan beats this (seconds). Equal to the value when exact.
    pub bound: Option<f64>,
    /// What was searched, in words.
    pub detail: String,
}

/// Limits on the exact search, in DP cells touched; above them the heuristic runs.
const EXACT_WORK_LIMIT: f64 = 4e8;
const EXACT_CELL_LIMIT: f64 = 1.2e7;

/// The objective value of an assignment in seconds, or `None` when a stage does not fit.
pub(crate) fn value(cost: &CostModel, stages: &[Placement], objective: Objective) -> Option<f64> {
    if stages.is_empty() || stages.iter().any(|p| !cost.fits(p.node, p.start, p.end)) {
        return None;
    }
    Some(match objective {
        Objective::Throughput => cost.best_schedule(stages).cycle_s,
        Objective::Latency => cost.stage_times(stages).iter().sum(),
    })
}

/// The nodes a search may use: allowed, with room for something after reserve and workspace.
pub(super) fn usable(cost: &CostModel, allowed: &[bool]) -> Vec<usize> {
    (0..cost.node_count()).filter(|&k| allowed[k] && cost.nodes[k].capacity >= 0).collect()
}

/// The best plan using only `allowed` nodes and, if given, certainly using `required`: the
/// best pipeline, or the whole model on one tensor-parallel group of a machine's GPUs.
pub(crate) fn optimal(cost: &CostModel, objective: Objective, allowed: &[bool], required: Option<usize>) -> Found {
    if searchable(cost, allowed, required).is_none() {
        return Found::nothing();
    }
    let mut found = pipeline(cost, objective, allowed, required);
    let groups = tensor_parallel(cost, allowed, required);
    if !groups.is_empty() {
        found.detail = format!(
            "{}; {} tensor-parallel group{}",
            found.detail,
            groups.len(),
            if groups.len() == 1 { "" } else { "s" }
        );
    }
    for stages in groups {
        let Some(v) = value(cost, &stages, objective) else { continue };
        if found.best.as_ref().is_none_or(|b| v < b.0) {
            found.best = Some((v, stages));
        }
        // The groups are searched exactly: the bound covers them.
        found.bound = Some(found.bound.map_or(v, |b| b.min(v)));
    }
    // vLLM: pipelines whose every stage is a group of one size.
    for (degree, nodes) in cost.pipelines() {
        let nodes: Vec<usize> = nodes
            .iter()
            .copied()
            .filter(|&g| cost.nodes[g].capacity >= 0 && cost.members(g).iter().all(|&k| allowed[k]))
            .collect();
        let required = match required {
            None => None,
            Some(r) => match nodes.iter().find(|&&g| cost.members(g).contains(&r)) {
                Some(&g) => Some(g),
                None => continue,
            },
        };
        if nodes.len() < 2 {
            continue;
        }
        let grouped = match objective {
            Objective::Latency => least_sum(cost, &nodes, required),
            Objective::Throughput => optimal_cycle(cost, &nodes, required),
        };
        found.detail = format!("{}; pipelines of {degree}-GPU groups ({})", found.detail, grouped.detail);
        found.exact &= grouped.exact;
        let floor = grouped.bound.or(grouped.best.as_ref().map(|b| b.0));
        found.bound = match (found.bound, floor) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some((v, stages)) = grouped.best
            && found.best.as_ref().is_none_or(|b| v < b.0)
        {
            found.best = Some((v, stages));
        }
    }
    found
}

impl Found {
    /// Nothing to search: no allowed node has room, the model has no layers, or `required`
    /// is not a node that could hold any.
    fn nothing() -> Found {
        Found { best: None, exact: true, bound: None, detail: "no usable node".to_owned() }
    }
}

/// The usable nodes, when there is something to search over them (see [`Found::nothing`]).
fn searchable(cost: &CostModel, allowed: &[bool], required: Option<usize>) -> Option<Vec<usize>> {
    let nodes = usable(cost, allowed);
    let nothing = nodes.is_empty() || cost.layers() == 0 || required.is_some_and(|r| !nodes.contains(&r));
    (!nothing).then_some(nodes)
}

/// The best pipeline of single devices (every layer of a stage on one device).
pub(crate) fn pipeline(cost: &CostModel, objective: Objective, allowed: &[bool], required: Option<usize>) -> Found {
    let Some(nodes) = searchable(cost, allowed, required) else { return Found::nothing() };
    match objective {
        Objective::Latency => least_sum(cost, &nodes, required),
        Objective::Throughput => optimal_cycle(cost, &nodes, required),
    }
}

/// The whole model on each tensor-parallel group whose GPUs are all allowed (and that holds
/// `required`): llama.cpp's `--split-mode tensor` runs every layer on one group.
pub(crate) fn tensor_parallel(cost: &CostModel, allowed: &[bool], required: Option<usize>) -> Vec<Split> {
    (0..cost.groups().len())
        .map(|g| cost.node_count() + g)
        .filter(|&node| {
            let members = cost.members(node);
            members.iter().all(|&k| allowed[k]) && required.is_none_or(|r| members.contains(&r))
        })
        .map(|node| vec![Placement::new(node, 0, cost.layers())])
        .collect()
}

/// Would the exact subset search stay within its limits? Its work visits the canonical
/// subsets (identical nodes merged), but its tables hold a row for every subset: 24
/// identical nodes of an 80-layer model would allocate 2^24 × 81 cells (22 GB), where the
/// canonical count (25) let them through before.
fn exact_fits(cost: &CostModel, space: &Space) -> bool {
    let l = cost.layers() as f64;
    let m = space.nodes.len() as f64;
    if space.nodes.len() > 24 {
        return false;
    }
    let masks = space.canonical_masks();
    let full = f64::from(1u32 << space.nodes.len());
    let (work, cells) = if cost.uniform_links() {
        (masks * m * l * 2.0, full * (l + 1.0))
    } else {
        (m * masks * m * m * l, full * m * (l + 1.0))
    };
    work <= EXACT_WORK_LIMIT && cells <= EXACT_CELL_LIMIT
}

/// In words, what the exact search visited.
fn exact_detail(cost: &CostModel, space: &Space) -> String {
    let m = space.nodes.len();
    let masks = space.canonical_masks();
    let visited = if cost.uniform_links() { masks } else { masks * m as f64 };
    format!(
        "exact: every ordered subset of {} node{} ({} states{})",
        m,
        if m == 1 { "" } else { "s" },
        group_digits(visited as u64),
        if space.classes < m { ", identical nodes merged" } else { "" },
    )
}

/// The least sum of stage times over `nodes` (all usable), exact when small enough.
pub(crate) fn least_sum(cost: &CostModel, nodes: &[usize], required: Option<usize>) -> Found {
    let space = Space::new(cost, nodes, required);
    if !exact_fits(cost, &space) {
        return heuristic(cost, nodes, required);
    }
    let best =
        if cost.uniform_links() { space.min_sum_uniform(f64::INFINITY) } else { space.min_sum_pairwise(f64::INFINITY) };
    let bound = best.as_ref().map(|b| b.0);
    Found { best, exact: true, bound, detail: exact_detail(cost, &space) }
}

/// Throughput the workload reaches: the least cycle over every micro-batch count.
fn optimal_cycle(cost: &CostModel, nodes: &[usize], required: Option<usize>) -> Found {
    // One micro-batch: the cycle is the sum of stage times.
    let mut found = least_sum(cost, nodes, required);
    let most = cost.batch().min(nodes.len() as u64);
    for k in 2..=most {
        let micro = cost.micro_batched(k);
        let incumbent = found.best.as_ref().map_or(f64::INFINITY, |b| b.0);
        // No k-cycle is shorter than the least sum.
        let Some(floor) = lower_bound(&micro, nodes) else { continue };
        if floor >= incumbent {
            found.bound = found.bound.map(|b| b.min(floor));
            continue;
        }
        let searched = least_cycle(&micro, k, nodes, required, incumbent);
        found.exact &= searched.exact;
        found.bound = match (found.bound, searched.bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some((v, stages)) = searched.best
            && v < incumbent
        {
            found.best = Some((v, stages));
        }
    }
    if let (Some(bound), Some((v, _))) = (found.bound, &found.best) {
        found.bound = Some(bound.min(*v));
    }
    if most > 1 {
        found.detail = format!("{}; 1 to {most} micro-batches", found.detail);
    }
    found
}

/// The least `max(Σ t_s, k · max t_s)` on `micro` (stage times of one micro-batch): a
/// bisection on the slowest-stage cap `τ`, each probe the least sum with every stage ≤ `τ`.
/// Only plans faster than `incumbent` (seconds) matter: a plan under it has every stage
/// under `incumbent / k`, so one probe there tells whether this `k` can win at all.
fn least_cycle(micro: &CostModel, k: u64, nodes: &[usize], required: Option<usize>, incumbent: f64) -> Found {
    let k = k as f64;
    let space = Space::new(micro, nodes, required);
    let exact = exact_fits(micro, &space);
    // Large clusters: the least sum along the fastest-first order.
    let order = speed_order(micro, nodes);
    let least_sum = |cap: f64| match (exact, micro.uniform_links()) {
        (true, true) => space.min_sum_uniform(cap),
        (true, false) => space.min_sum_pairwise(cap),
        (false, _) => fixed_order_min_sum(micro, &order, required, cap),
    };
    let sum_and_max = |stages: &Split| {
        let times = micro.stage_times(stages);
        (times.iter().sum::<f64>(), times.iter().copied().fold(0.0, f64::max))
    };
    let Some((_, free)) = least_sum(f64::INFINITY) else {
        return Found { best: None, exact, bound: None, detail: String::new() };
    };
    let (least, slowest) = sum_and_max(&free);
    let mut best = (least.max(k * slowest), free);
    // Below `lo` every cap leaves sums above k·cap; at `hi` some plan's cycle is k·hi.
    let (mut lo, mut hi) = (least / k, slowest);
    if k * hi > incumbent && incumbent < best.0 {
        let tau = incumbent / k;
        match least_sum(tau) {
            Some((_, stages)) if sum_and_max(&stages).0 < incumbent => {
                let (sum, max) = sum_and_max(&stages);
                best = (sum.max(k * max), stages);
                hi = max.max(sum / k);
            }
            // No plan of this many micro-batches beats the incumbent (proven when exact).
            _ => {
                let bound = if exact { Some(incumbent) } else { lower_bound(micro, nodes) };
                return Found { best: None, exact, bound, detail: String::new() };
            }
        }
    }
    for _ in 0..100 {
        if k * lo >= best.0 * (1.0 - 1e-12) || hi - lo <= hi * 1e-12 {
            break;
        }
        let tau = lo + (hi - lo) / 2.0;
        match least_sum(tau) {
            None => lo = tau,
            Some((_, stages)) => {
                let (sum, max) = sum_and_max(&stages);
                if sum.max(k * max) < best.0 {
                    best = (sum.max(k * max), stages);
                }
                if sum <= k * tau { hi = max.max(sum / k) } else { lo = tau }
            }
        }
    }
    let bound = if exact { Some(best.0.min(k * lo)) } else { lower_bound(micro, nodes) };
    Found { best: Some(best), exact, bound, detail: String::new() }
}
