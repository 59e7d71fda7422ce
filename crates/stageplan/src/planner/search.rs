//! The `optimal` policy: the node subset, order and contiguous split that serve the workload
//! fastest (throughput) or take each token through the pipeline soonest (latency).
//!
//! Two searches do the work, and the objectives are built from them:
//!
//! - **Least sum** of stage times (and hops): the latency objective, and one micro-batch.
//! - **Least slowest stage**: a pipeline kept full, and the bound on each micro-batch count.
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
//! representative subset per multiset is visited.
//!
//! - *Least slowest stage* (min–max) uses parametric search (N. Megiddo, *Combinatorial
//!   optimization with rational objective functions*, 1979): for a threshold `τ`, "can every
//!   stage stay within `τ`?" is answered by the subset DP where each node reaches as far as
//!   it can (a farther prefix is never worse). A feasible answer lowers the upper bound to the
//!   plan's actual slowest stage; an infeasible one raises the lower bound to the smallest
//!   stage time at which any reachable stage could grow. Both bounds are stage times that
//!   occur in some plan, so the search ends on the exact optimum.
//! - *Least sum* (min–sum) is a shortest path over the same states, optionally with every
//!   stage capped at a threshold. When a node's time is linear in its layers (it is
//!   memory-bound on every layer, or compute-bound on every one — the usual case), the best
//!   predecessor for each end layer is a sliding-window minimum over the starts that fit in
//!   memory and under the cap, so each (subset, node) step costs `O(L)`.
//!
//! Uniform links (one default for every pair, the common case) need no order information in
//! the state. Per-pair links make hops depend on neighbours, so the state also carries the
//! last node and the first (whose link receives the sampled token).
//!
//! **Heuristic for large clusters.** When the exact state space is too large, the same
//! machinery runs on fixed node orders (fastest first, and variations), where it is exact
//! for that order with any node skipped, followed by a local search over swaps. The result
//! reports a lower bound from a fractional relaxation (layers spread over nodes as a fluid,
//! memory as a knapsack) and the gap to it.

// The dynamic programs index several tables by the same node position; index loops read
// closer to the recurrences than zipped iterators.
#![allow(clippy::needless_range_loop)]

use std::collections::VecDeque;

use crate::cost::{CostModel, Regime};
use crate::scenario::Objective;

/// A candidate plan: `(node, start, end)` per stage, in pipeline order.
pub(crate) type Assignment = Vec<(usize, usize, usize)>;

/// What the search found.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// The best plan and its objective value in seconds: the cycle in which each of the
    /// workload's sequences gets a token (throughput), or the sum of stages (latency).
    pub best: Option<(f64, Assignment)>,
    /// True when `best` is proven optimal.
    pub exact: bool,
    /// No plan beats this (seconds). Equal to the value when exact.
    pub bound: Option<f64>,
    /// What was searched, in words.
    pub detail: String,
}

/// What the two underlying searches minimise over one cost model.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Goal {
    /// The slowest stage: the pipeline kept full.
    Slowest,
    /// The sum of stages: one micro-batch's trip.
    Sum,
}

/// Limits on the exact search, in DP cells touched; above them the heuristic runs.
const EXACT_WORK_LIMIT: f64 = 4e8;
const EXACT_CELL_LIMIT: f64 = 1.2e7;

/// The objective value of an assignment in seconds, or `None` when a stage does not fit.
pub(crate) fn value(cost: &CostModel, stages: &[(usize, usize, usize)], objective: Objective) -> Option<f64> {
    if stages.is_empty() || stages.iter().any(|&(k, a, b)| !cost.fits(k, a, b)) {
        return None;
    }
    Some(match objective {
        Objective::Throughput => cost.best_schedule(stages).cycle_s,
        Objective::Latency => cost.stage_times(stages).iter().sum(),
    })
}

/// The nodes a search may use: allowed, with room for something after reserve and workspace.
fn usable(cost: &CostModel, allowed: &[bool]) -> Vec<usize> {
    (0..cost.node_count()).filter(|&k| allowed[k] && cost.nodes[k].capacity >= 0).collect()
}

/// The best plan using only `allowed` nodes and, if given, certainly using `required`.
pub(crate) fn optimal(cost: &CostModel, objective: Objective, allowed: &[bool], required: Option<usize>) -> Found {
    let nodes = usable(cost, allowed);
    if nodes.is_empty() || cost.layers() == 0 || required.is_some_and(|r| !nodes.contains(&r)) {
        return Found { best: None, exact: true, bound: None, detail: "no usable node".to_owned() };
    }
    match objective {
        Objective::Latency => optimal_goal(cost, Goal::Sum, &nodes, required),
        Objective::Throughput => optimal_cycle(cost, &nodes, required),
    }
}

/// Would the exact subset search for `goal` stay within its limits?
fn exact_fits(cost: &CostModel, goal: Goal, space: &Space) -> bool {
    let l = cost.layers() as f64;
    let m = space.nodes.len() as f64;
    let masks = space.canonical_masks();
    let (work, cells) = match (goal, cost.uniform_links()) {
        (Goal::Slowest, true) => (masks * m * 64.0 + m * l * 64.0, masks),
        (Goal::Slowest, false) => (m * masks * m * m * 64.0 + m * m * l * 64.0, m * masks * m),
        (Goal::Sum, true) => (masks * m * l * 2.0, masks * (l + 1.0)),
        (Goal::Sum, false) => (m * masks * m * m * l, masks * m * (l + 1.0)),
    };
    space.nodes.len() <= 24 && work <= EXACT_WORK_LIMIT && cells <= EXACT_CELL_LIMIT
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

/// The least slowest stage or least sum over `nodes` (all usable), exact when small enough.
pub(crate) fn optimal_goal(cost: &CostModel, goal: Goal, nodes: &[usize], required: Option<usize>) -> Found {
    let space = Space::new(cost, nodes, required);
    if !exact_fits(cost, goal, &space) {
        return heuristic(cost, goal, nodes, required);
    }
    let uniform = cost.uniform_links();
    let best = match (goal, uniform) {
        (Goal::Slowest, true) => {
            // A plan along the fastest-first order seeds the upper bound.
            let floor = lower_bound(cost, goal, nodes).unwrap_or(0.0);
            let seed = fixed_order(cost, goal, &speed_order(cost, nodes), required);
            parametric(floor, seed, |tau| space.feasible(tau, true))
        }
        (Goal::Slowest, false) => {
            // Relax every link to the best one (uniform): its optimum bounds ours from below,
            // and its plan, on the real links, from above.
            let relaxed = cost.with_links(cost.best_link());
            let mut floor = lower_bound(cost, goal, nodes).unwrap_or(0.0);
            let mut seed = None;
            let inner = Space::new(&relaxed, nodes, required);
            if let Some((value, stages)) = parametric(floor, None, |tau| inner.feasible(tau, true)) {
                floor = floor.max(value);
                seed = Some((cost.stage_times(&stages).iter().copied().fold(0.0, f64::max), stages));
            }
            parametric(floor, seed, |tau| space.feasible(tau, false))
        }
        (Goal::Sum, true) => space.min_sum_uniform(f64::INFINITY),
        (Goal::Sum, false) => space.min_sum_pairwise(f64::INFINITY),
    };
    let bound = best.as_ref().map(|b| b.0);
    Found { best, exact: true, bound, detail: exact_detail(cost, &space) }
}

/// Throughput the workload reaches: the least cycle over every micro-batch count.
fn optimal_cycle(cost: &CostModel, nodes: &[usize], required: Option<usize>) -> Found {
    // One micro-batch: the cycle is the sum of stage times.
    let mut found = optimal_goal(cost, Goal::Sum, nodes, required);
    let most = cost.batch().min(nodes.len() as u64);
    for k in 2..=most {
        let micro = cost.micro_batched(k);
        let incumbent = found.best.as_ref().map_or(f64::INFINITY, |b| b.0);
        // No k-cycle is shorter than the least sum, nor than k times the least slowest stage.
        let floor = match (lower_bound(&micro, Goal::Sum, nodes), lower_bound(&micro, Goal::Slowest, nodes)) {
            (Some(sum), Some(slowest)) => sum.max(k as f64 * slowest),
            _ => continue, // nothing fits
        };
        if floor >= incumbent {
            found.bound = found.bound.map(|b| b.min(floor));
            continue;
        }
        let searched = least_cycle(&micro, k, nodes, required);
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
fn least_cycle(micro: &CostModel, k: u64, nodes: &[usize], required: Option<usize>) -> Found {
    let k = k as f64;
    let space = Space::new(micro, nodes, required);
    let exact = exact_fits(micro, Goal::Sum, &space);
    // Large clusters: the least sum along the order the unconstrained heuristic found best,
    // and the heuristic's least-slowest plan, as candidates.
    let order = (!exact).then(|| {
        let found = heuristic(micro, Goal::Sum, nodes, required);
        found.best.map_or_else(|| speed_order(micro, nodes), |(_, stages)| order_of(micro, &stages, nodes))
    });
    let least_sum = |cap: f64| match &order {
        None if micro.uniform_links() => space.min_sum_uniform(cap),
        None => space.min_sum_pairwise(cap),
        Some(order) => fixed_order_min_sum(micro, order, required, cap),
    };
    let sum_and_max = |stages: &Assignment| {
        let times = micro.stage_times(stages);
        (times.iter().sum::<f64>(), times.iter().copied().fold(0.0, f64::max))
    };
    let Some((_, free)) = least_sum(f64::INFINITY) else {
        return Found { best: None, exact, bound: None, detail: String::new() };
    };
    let (least, slowest) = sum_and_max(&free);
    let mut best = (least.max(k * slowest), free);
    if !exact && let Some((_, stages)) = heuristic(micro, Goal::Slowest, nodes, required).best {
        let (sum, max) = sum_and_max(&stages);
        if sum.max(k * max) < best.0 {
            best = (sum.max(k * max), stages);
        }
    }
    // Below `lo` every cap leaves sums above k·cap; at `hi` some plan's cycle is k·hi.
    let (mut lo, mut hi) = (least / k, slowest);
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
    let bound = if exact {
        Some(best.0.min(k * lo))
    } else {
        lower_bound(micro, Goal::Sum, nodes).zip(lower_bound(micro, Goal::Slowest, nodes)).map(|(s, m)| s.max(k * m))
    };
    Found { best: Some(best), exact, bound, detail: String::new() }
}

/// The nodes of `stages` first, in pipeline order, then the other `nodes` fastest first.
fn order_of(cost: &CostModel, stages: &[(usize, usize, usize)], nodes: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = stages.iter().map(|s| s.0).collect();
    let rest: Vec<usize> = speed_order(cost, nodes).into_iter().filter(|k| !order.contains(k)).collect();
    order.extend(rest);
    order
}

/// Does any plan fit in memory with the `allowed` nodes? Exact for clusters the subset
/// search covers; a largest-memory-first fill above that.
pub(crate) fn any_fit(cost: &CostModel, allowed: &[bool]) -> bool {
    let nodes = usable(cost, allowed);
    if nodes.is_empty() || cost.layers() == 0 {
        return false;
    }
    if nodes.len() <= 16 {
        let space = Space::new(cost, &nodes, None);
        matches!(space.feasible(f64::INFINITY, cost.uniform_links()), Probe::Feasible(..))
    } else {
        let mut order = nodes;
        order.sort_by(|&a, &b| cost.nodes[b].capacity.cmp(&cost.nodes[a].capacity).then(a.cmp(&b)));
        matches!(fixed_order_feasible(cost, &order, f64::INFINITY, None), Probe::Feasible(..))
    }
}

/// Thousands separated by commas: `109601` → `109,601`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Outcome of one threshold test.
pub(crate) enum Probe {
    /// A plan whose slowest stage is at most the threshold, and that stage time.
    Feasible(f64, Assignment),
    /// No plan within the threshold; nothing changes below this larger threshold.
    Infeasible(f64),
}

/// Min–max by parametric search over thresholds, snapping both bounds to stage times that
/// occur, so it ends on the exact optimum. `probe` must be monotone in the threshold.
///
/// `floor` is a threshold known to be infeasible or optimal (a lower bound); 0 will do.
/// `seed` is a plan already known (from a cheaper search), if any.
fn parametric(
    floor: f64,
    seed: Option<(f64, Assignment)>,
    mut probe: impl FnMut(f64) -> Probe,
) -> Option<(f64, Assignment)> {
    let (mut hi, mut best) = match seed {
        Some(plan) => plan,
        None => match probe(f64::INFINITY) {
            Probe::Feasible(value, plan) => (value, plan),
            Probe::Infeasible(_) => return None,
        },
    };
    let mut lo = floor.min(hi);
    // After a miss at a midpoint, `lo` has snapped to a stage time that occurs: test it.
    let mut test_lo = false;
    for _ in 0..400 {
        if lo >= hi || hi - lo <= hi * 1e-15 {
            break;
        }
        let tau = if test_lo { lo } else { lo + (hi - lo) / 2.0 };
        match probe(tau) {
            Probe::Feasible(value, plan) => {
                hi = value;
                best = plan;
                test_lo = false;
            }
            Probe::Infeasible(next) => {
                lo = lo.max(next);
                // Once the bracket is narrow the snapped bound is likely the optimum.
                test_lo = !test_lo && hi - lo <= 0.02 * hi;
            }
        }
    }
    Some((hi, best))
}

/// The nodes a search may use, their equivalence classes, and cached per-node facts.
pub(crate) struct Space<'a> {
    cost: &'a CostModel,
    /// Node indices into the cost model.
    nodes: Vec<usize>,
    /// For position `i`, the earlier position of an identical node, if any: position `i` may
    /// join a subset only after it.
    twin_before: Vec<Option<usize>>,
    classes: usize,
    /// Position of the required node.
    required: Option<usize>,
    regimes: Vec<Option<Regime>>,
    facts: Vec<NodeFacts>,
}

impl<'a> Space<'a> {
    pub(crate) fn new(cost: &'a CostModel, nodes: &[usize], required: Option<usize>) -> Space<'a> {
        let uniform = cost.uniform_links();
        let required_pos = required.and_then(|r| nodes.iter().position(|&k| k == r));
        let mut twin_before = vec![None; nodes.len()];
        let mut classes = 0;
        for i in 0..nodes.len() {
            let same = |a: usize, b: usize| {
                let (x, y) = (&cost.nodes[nodes[a]], &cost.nodes[nodes[b]]);
                x.inv_bandwidth == y.inv_bandwidth && x.inv_compute == y.inv_compute && x.capacity == y.capacity
            };
            let twin = if uniform && Some(i) != required_pos {
                (0..i).rev().find(|&j| Some(j) != required_pos && same(i, j))
            } else {
                None
            };
            if twin.is_none() {
                classes += 1;
            }
            twin_before[i] = twin;
        }
        let regimes = nodes.iter().map(|&k| cost.linear_regime(k)).collect();
        let facts = nodes.iter().map(|&k| NodeFacts::new(cost, k)).collect();
        Space { cost, nodes: nodes.to_vec(), twin_before, classes, required: required_pos, regimes, facts }
    }

    /// Number of subsets that keep identical nodes in index order.
    fn canonical_masks(&self) -> f64 {
        let mut sizes: Vec<f64> = Vec::new();
        let mut class_of = vec![0usize; self.nodes.len()];
        for i in 0..self.nodes.len() {
            match self.twin_before[i] {
                Some(t) => {
                    class_of[i] = class_of[t];
                    sizes[class_of[i]] += 1.0;
                }
                None => {
                    class_of[i] = sizes.len();
                    sizes.push(1.0);
                }
            }
        }
        sizes.iter().map(|s| s + 1.0).product()
    }

    /// May position `i` join `mask`? Only after its identical predecessors.
    #[inline]
    fn may_join(&self, mask: usize, i: usize) -> bool {
        mask & (1 << i) == 0 && self.twin_before[i].is_none_or(|t| mask & (1 << t) != 0)
    }

    #[inline]
    fn has_required(&self, mask: usize) -> bool {
        self.required.is_none_or(|r| mask & (1 << r) != 0)
    }

    /// Can every stage stay within `tau`? The subset DP.
    ///
    /// With uniform links a farther covered prefix is never worse (a later node whose range
    /// it swallows can be dropped at no cost), so one number per subset suffices. With a
    /// required node, or per-pair links, dropping is not free, so every reachable position
    /// is kept as a set.
    pub(crate) fn feasible(&self, tau: f64, uniform: bool) -> Probe {
        match (uniform, self.required) {
            (true, None) => self.feasible_uniform(tau),
            (true, Some(_)) => self.feasible_prefix_sets(tau),
            (false, _) => self.feasible_pairwise(tau),
        }
    }

    fn feasible_uniform(&self, tau: f64) -> Probe {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        let hop = cost.uniform_hop_s();
        let ret = cost.uniform_return_s();
        let tables: Vec<ReachTable> =
            (0..m).map(|i| ReachTable::new(cost, self.nodes[i], &self.facts[i], tau, hop, ret)).collect();

        let full = 1usize << m;
        let mut reach = vec![-1i32; full];
        let mut parent = vec![(0usize, 0u8); full];
        reach[0] = 0;
        let mut next_event = f64::INFINITY;
        for mask in 0..full {
            let j = reach[mask];
            if j < 0 {
                continue;
            }
            let j = j as usize;
            for i in 0..m {
                if !self.may_join(mask, i) {
                    continue;
                }
                let table = &tables[i];
                let done = mask | (1 << i);
                // Finish here: node i takes [j, L) as the last stage.
                let finishes = if mask == 0 { table.single_ok } else { j >= table.final_from };
                if finishes && self.has_required(done) {
                    let mut stages = vec![(self.nodes[i], j, l)];
                    let mut at = mask;
                    while at != 0 {
                        let (prev, pos) = parent[at];
                        stages.push((self.nodes[pos as usize], reach[prev] as usize, reach[at] as usize));
                        at = prev;
                    }
                    stages.reverse();
                    let times = cost.stage_times(&stages);
                    return Probe::Feasible(times.iter().copied().fold(0.0, f64::max), stages);
                }
                next_event = next_event.min(if mask == 0 { table.single_event() } else { table.final_event(j) });
                // Or take as much as fits within tau and pass on.
                let e = table.reach[j];
                next_event = next_event.min(table.mid_event[j]);
                if e > j as u32 && (e as i32) > reach[done] {
                    reach[done] = e as i32;
                    parent[done] = (mask, i as u8);
                }
            }
        }
        Probe::Infeasible(next_event)
    }

    /// Uniform links, any constraint: `prefixes[mask]` holds every `j` such that the nodes in
    /// `mask` can cover `[0, j)` with closed stages within `tau`.
    fn feasible_prefix_sets(&self, tau: f64) -> Probe {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        let hop = cost.uniform_hop_s();
        let ret = cost.uniform_return_s();
        let tables: Vec<ReachTable> =
            (0..m).map(|i| ReachTable::new(cost, self.nodes[i], &self.facts[i], tau, hop, ret)).collect();
        let full = 1usize << m;
        let mut sets = Sets::new(full, l + 1);
        sets.insert(0, 0);
        let mut next_event = f64::INFINITY;
        for mask in 0..full {
            let Some(highest) = sets.max(mask) else { continue };
            for i in 0..m {
                if !self.may_join(mask, i) {
                    continue;
                }
                let table = &tables[i];
                let done = mask | (1 << i);
                if self.has_required(done) {
                    let finishes = if mask == 0 { table.single_ok } else { highest >= table.final_from };
                    if finishes {
                        let j = if mask == 0 { 0 } else { highest };
                        let mut stages = vec![(self.nodes[i], j, l)];
                        let (mut at, mut end) = (mask, j);
                        while at != 0 {
                            // Some node in `at` closed a stage ending at `end` from a prefix of `at` without it.
                            let (pos, begin) = (0..m)
                                .filter(|&q| at & (1 << q) != 0)
                                .find_map(|q| {
                                    sets.iter(at & !(1 << q))
                                        .find(|&s| s < end && tables[q].reach[s] as usize >= end)
                                        .map(|s| (q, s))
                                })
                                .expect("every reached prefix has a predecessor");
                            stages.push((self.nodes[pos], begin, end));
                            (at, end) = (at & !(1 << pos), begin);
                        }
                        stages.reverse();
                        let times = cost.stage_times(&stages);
                        return Probe::Feasible(times.iter().copied().fold(0.0, f64::max), stages);
                    }
                    next_event = next_event.min(if mask == 0 {
                        table.single_event()
                    } else {
                        sets.iter(mask).map(|j| table.final_event(j)).fold(f64::INFINITY, f64::min)
                    });
                }
                let mut filled_to = 0usize;
                for s in sets.iter(mask).collect::<Vec<_>>() {
                    next_event = next_event.min(table.mid_event[s]);
                    let reach = table.reach.get(s).map_or(s, |&r| r as usize);
                    let from = (s + 1).max(filled_to + 1);
                    if reach >= from {
                        sets.fill(done, from, reach);
                        filled_to = reach;
                    }
                }
            }
        }
        Probe::Infeasible(next_event)
    }

    /// Per-pair links: a stage's hop depends on who follows, so the open stage's node is part
    /// of the state, and the first node (which receives the sampled tokens) too. `starts` of
    /// `(mask, last)` holds every start of `last`'s open stage reachable within `tau`.
    fn feasible_pairwise(&self, tau: f64) -> Probe {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        // tables[p][k]: the node at position p passing to position k.
        let tables: Vec<Vec<ReachTable>> = (0..m)
            .map(|p| {
                (0..m)
                    .map(|k| {
                        let (a, b) = (self.nodes[p], self.nodes[k]);
                        ReachTable::new(cost, a, &self.facts[p], tau, cost.hop_s(a, b), cost.return_s(a, b))
                    })
                    .collect()
            })
            .collect();
        let full = 1usize << m;
        let mut next_event = f64::INFINITY;
        let mut starts = Sets::new(full * m, l);
        let mut scratch = Vec::with_capacity(l);
        for f in 0..m {
            starts.clear();
            starts.insert((1 << f) * m + f, 0);
            for mask in 0..full {
                if mask & (1 << f) == 0 {
                    continue;
                }
                for p in 0..m {
                    let state = mask * m + p;
                    let Some(highest) = starts.max(state) else { continue };
                    // `p` closes the pipeline with [s, L) and sends the tokens back to `f`.
                    let table = &tables[p][f];
                    if self.has_required(mask) {
                        let single = mask == 1 << f;
                        let finishes = if single { table.single_ok } else { highest >= table.final_from };
                        if finishes {
                            let s = if single { 0 } else { highest };
                            let mut stages = vec![(self.nodes[p], s, l)];
                            let (mut at, mut last, mut begin) = (mask, p, s);
                            while at != 1 << f {
                                let before = at & !(1 << last);
                                let (q, s_q) = (0..m)
                                    .filter(|&q| before & (1 << q) != 0)
                                    .find_map(|q| {
                                        starts
                                            .iter(before * m + q)
                                            .find(|&s_q| s_q < begin && tables[q][last].reach[s_q] as usize >= begin)
                                            .map(|s_q| (q, s_q))
                                    })
                                    .expect("every reached start has a predecessor");
                                stages.push((self.nodes[q], s_q, begin));
                                (at, last, begin) = (before, q, s_q);
                            }
                            stages.reverse();
                            let times = cost.stage_times(&stages);
                            return Probe::Feasible(times.iter().copied().fold(0.0, f64::max), stages);
                        }
                        next_event = next_event.min(if single {
                            table.single_event()
                        } else {
                            starts.iter(state).map(|s| table.final_event(s)).fold(f64::INFINITY, f64::min)
                        });
                    }
                    scratch.clear();
                    scratch.extend(starts.iter(state));
                    for k in 0..m {
                        if mask & (1 << k) != 0 {
                            continue;
                        }
                        let table = &tables[p][k];
                        let to = (mask | (1 << k)) * m + k;
                        let mut filled_to = 0usize;
                        for &s in &scratch {
                            next_event = next_event.min(table.mid_event[s]);
                            let reach = table.reach[s] as usize;
                            let from = (s + 1).max(filled_to + 1);
                            if reach >= from {
                                starts.fill(to, from, reach);
                                filled_to = reach;
                            }
                        }
                    }
                }
            }
        }
        Probe::Infeasible(next_event)
    }

    /// Min–sum over subsets with uniform links: `best[mask][j]` is the least time of closed
    /// stages (each paying the hop, each within `cap`) that cover `[0, j)` with the nodes in
    /// `mask`.
    ///
    /// Branch and bound: a plan from a fixed node order gives an upper bound; a state whose
    /// cost plus a lower bound on the rest (each layer at its fastest node, per roofline
    /// term) reaches it cannot lead to a better plan and is not extended.
    fn min_sum_uniform(&self, cap: f64) -> Option<(f64, Assignment)> {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        let hop = cost.uniform_hop_s();
        let ret = cost.uniform_return_s();
        let full = 1usize << m;
        let width = l + 1;
        let rest = self.rest_lower_bounds();
        let mut incumbent =
            fixed_order_min_sum(cost, &speed_order(cost, &self.nodes), self.required.map(|r| self.nodes[r]), cap);
        let bound = |incumbent: &Option<(f64, Assignment)>| incumbent.as_ref().map_or(f64::INFINITY, |b| b.0);
        let mut best = vec![f64::INFINITY; full * width];
        let mut from = vec![(0u32, 0u8); full * width];
        best[0] = 0.0;
        let finals: Vec<FinalCosts> = self.nodes.iter().map(|&k| FinalCosts::new(cost, k, ret, cap)).collect();
        let mut answer: Option<(f64, usize, usize, usize)> = None; // (value, mask, node pos, start)
        let mut scratch = Vec::with_capacity(width);
        let mut row = vec![f64::INFINITY; width];
        for mask in 0..full {
            // Keep only the starts that can still beat the incumbent.
            let limit = bound(&incumbent).min(answer.map_or(f64::INFINITY, |a| a.0));
            let mut alive = false;
            for j in 0..width {
                let v = best[mask * width + j];
                row[j] = if v + rest[j] < limit { v } else { f64::INFINITY };
                alive |= row[j].is_finite();
            }
            if !alive {
                continue;
            }
            for i in 0..m {
                if !self.may_join(mask, i) {
                    continue;
                }
                let done = mask | (1 << i);
                // Finish with node i on [j, L).
                if self.has_required(done) {
                    let finals = &finals[i];
                    let starts = if mask == 0 { 0..1 } else { finals.fits_from..l };
                    for j in starts {
                        if row[j].is_infinite() {
                            continue;
                        }
                        let stage = if mask == 0 { finals.single } else { finals.with_return[j] };
                        let total = row[j] + stage;
                        if total < answer.map_or(f64::INFINITY, |a| a.0) {
                            answer = Some((total, mask, i, j));
                        }
                    }
                }
                // Or close a stage [j, e) on node i and pass on.
                let limit = bound(&incumbent).min(answer.map_or(f64::INFINITY, |a| a.0));
                scratch.clear();
                relax(cost, self.nodes[i], self.regimes[i], &row, mask == 0, Closing::new(hop, cap), &mut scratch);
                for &(e, value, j) in &scratch {
                    let cell = done * width + e;
                    if value < best[cell] && value + rest[e] < limit {
                        best[cell] = value;
                        from[cell] = (j as u32, i as u8);
                    }
                }
            }
        }
        if let Some((_, mut mask, i, j)) = answer {
            let mut stages = vec![(self.nodes[i], j, l)];
            let mut end = j;
            while mask != 0 {
                let (start, pos) = from[mask * width + end];
                stages.push((self.nodes[pos as usize], start as usize, end));
                mask &= !(1 << pos);
                end = start as usize;
            }
            stages.reverse();
            // Report the value exactly as every other policy computes it.
            let exact = cost.stage_times(&stages).iter().sum::<f64>();
            if exact < bound(&incumbent) {
                incumbent = Some((exact, stages));
            }
        }
        incumbent
    }

    /// `rest[j]`: no plan covers `[j, L)` faster than this — each layer on the node fastest
    /// for it, counting one roofline term at a time (a stage's time is at least either sum).
    fn rest_lower_bounds(&self) -> Vec<f64> {
        let cost = self.cost;
        let l = cost.layers();
        let mut rest = vec![0.0; l + 1];
        let (mut read, mut compute) = (0.0f64, 0.0f64);
        for j in (0..l).rev() {
            let (bytes, flops, _) = cost.layer_work(j);
            read += self.nodes.iter().map(|&k| bytes * cost.nodes[k].inv_bandwidth).fold(f64::INFINITY, f64::min);
            compute += self.nodes.iter().map(|&k| flops * cost.nodes[k].inv_compute).fold(f64::INFINITY, f64::min);
            // A hair under, so rounding never prunes a state that ties the incumbent's rival.
            rest[j] = read.max(compute) * (1.0 - 1e-9);
        }
        rest
    }

    /// Min–sum with per-pair links: a stage's hop depends on who follows, so the state is the
    /// open stage. `open[(mask, p)][s]` is the least time of the closed stages before node
    /// `p`'s stage starting at `s` (`mask` holds `p`); closing it at `e` with `k` next pays
    /// `roofline(p, s, e) + hop(p, k)`, within `cap`. The first node `f` is fixed per pass:
    /// the last stage sends the sampled tokens back to it.
    fn min_sum_pairwise(&self, cap: f64) -> Option<(f64, Assignment)> {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        let full = 1usize << m;
        let width = l + 1;
        let mut answer: Option<(f64, Assignment)> = None;
        let mut open = vec![f64::INFINITY; full * m * width];
        // from[cell of (mask, k, e)] = (s, p): `p`'s stage [s, e) closed before `k`'s opened.
        let mut from = vec![(0u32, 0u8); full * m * width];
        let mut row = vec![f64::INFINITY; width];
        let mut scratch = Vec::with_capacity(width);
        for f in 0..m {
            let finals: Vec<FinalCosts> =
                self.nodes.iter().map(|&k| FinalCosts::new(cost, k, cost.return_s(k, self.nodes[f]), cap)).collect();
            open.fill(f64::INFINITY);
            open[((1 << f) * m + f) * width] = 0.0;
            for mask in 0..full {
                if mask & (1 << f) == 0 {
                    continue;
                }
                for p in 0..m {
                    if mask & (1 << p) == 0 {
                        continue;
                    }
                    let state = (mask * m + p) * width;
                    row.copy_from_slice(&open[state..state + width]);
                    if !row.iter().any(|v| v.is_finite()) {
                        continue;
                    }
                    let first = mask == 1 << f;
                    let best = answer.as_ref().map_or(f64::INFINITY, |a| a.0);
                    // Close the pipeline: `p` takes [s, L).
                    if self.has_required(mask) {
                        let finish = if first {
                            Some((finals[p].single, 0)).filter(|(t, _)| t.is_finite())
                        } else {
                            (finals[p].fits_from.max(1)..l)
                                .map(|s| (row[s] + finals[p].with_return[s], s))
                                .filter(|(t, _)| t.is_finite())
                                .min_by(|x, y| x.0.total_cmp(&y.0))
                        };
                        if let Some((total, s)) = finish.filter(|(t, _)| *t < best) {
                            let mut stages = vec![(self.nodes[p], s, l)];
                            let (mut at, mut last, mut begin) = (mask, p, s);
                            while at != 1 << f {
                                let (start, prev) = from[(at * m + last) * width + begin];
                                at &= !(1 << last);
                                (last, begin) = (prev as usize, start as usize);
                                stages.push((self.nodes[last], begin, stages[stages.len() - 1].1));
                            }
                            stages.reverse();
                            answer = Some((total, stages));
                        }
                    }
                    // Or close [s, e) and pass to `k`.
                    for k in 0..m {
                        if mask & (1 << k) != 0 {
                            continue;
                        }
                        let hop = cost.hop_s(self.nodes[p], self.nodes[k]);
                        scratch.clear();
                        relax(cost, self.nodes[p], self.regimes[p], &row, first, Closing::new(hop, cap), &mut scratch);
                        let to = ((mask | (1 << k)) * m + k) * width;
                        for &(e, value, s) in &scratch {
                            if value < open[to + e] {
                                open[to + e] = value;
                                from[to + e] = (s as u32, p as u8);
                            }
                        }
                    }
                }
            }
        }
        let (_, stages) = answer?;
        let exact = cost.stage_times(&stages).iter().sum::<f64>();
        Some((exact, stages))
    }
}

/// What closing a stage adds to its roofline (the hop to the next stage) and the most its
/// roofline may take (a cap on stage time, less that hop).
#[derive(Copy, Clone)]
struct Closing {
    hop: f64,
    limit: f64,
}

impl Closing {
    fn new(hop: f64, cap: f64) -> Closing {
        Closing { hop, limit: cap - hop }
    }
}

/// For node `k` and arrival costs `row[j]` (stages before it cover `[0, j)`), the least
/// `row[j] + roofline(k, j, e) + hop` for every end `e < L`, as `(e, value, argmin j)`,
/// among stages whose roofline is at most `limit` (a cap on stage time, less the hop).
/// `first` marks the first stage (start 0 only).
fn relax(
    cost: &CostModel,
    k: usize,
    regime: Option<Regime>,
    row: &[f64],
    first: bool,
    Closing { hop, limit }: Closing,
    out: &mut Vec<(usize, f64, usize)>,
) {
    let l = cost.layers();
    if first {
        for e in 1..l {
            if !cost.fits(k, 0, e) {
                break;
            }
            let roofline = cost.roofline_s(k, 0, e);
            if roofline > limit {
                break;
            }
            out.push((e, row[0] + roofline + hop, 0));
        }
        return;
    }
    match regime {
        Some(regime) => {
            // roofline(k, j, e) = P[e] - P[j] for 1 <= j < e < L: a sliding-window minimum
            // of row[j] - P[j] over the starts j that fit with end e, in memory and under the
            // cap (both hold from some start on, and that start only grows with e).
            let mut window: VecDeque<(usize, f64)> = VecDeque::new();
            let mut lo = 1usize;
            let mut next_j = 1usize;
            for e in 2..l {
                while next_j < e {
                    if row[next_j].is_finite() {
                        let key = row[next_j] - cost.linear_prefix(k, regime, next_j);
                        while window.back().is_some_and(|&(_, v)| v >= key) {
                            window.pop_back();
                        }
                        window.push_back((next_j, key));
                    }
                    next_j += 1;
                }
                while lo < e && (!cost.fits(k, lo, e) || cost.roofline_s(k, lo, e) > limit) {
                    lo += 1;
                }
                while window.front().is_some_and(|&(j, _)| j < lo) {
                    window.pop_front();
                }
                if let Some(&(j, _)) = window.front() {
                    // Recompute from the exact formula so values match other evaluations.
                    out.push((e, row[j] + cost.roofline_s(k, j, e) + hop, j));
                }
            }
        }
        None => {
            for e in 2..l {
                let mut best: Option<(f64, usize)> = None;
                for j in (1..e).rev() {
                    if !cost.fits(k, j, e) {
                        break;
                    }
                    let roofline = cost.roofline_s(k, j, e);
                    if roofline > limit {
                        break;
                    }
                    if row[j].is_finite() {
                        let v = row[j] + roofline + hop;
                        if best.is_none_or(|(b, _)| v < b) {
                            best = Some((v, j));
                        }
                    }
                }
                if let Some((v, j)) = best {
                    out.push((e, v, j));
                }
            }
        }
    }
}

/// Many small sets of positions `0..size`, as bitsets in one buffer.
struct Sets {
    words: usize,
    bits: Vec<u64>,
}

impl Sets {
    fn new(count: usize, size: usize) -> Sets {
        let words = size.div_ceil(64).max(1);
        Sets { words, bits: vec![0; count * words] }
    }

    fn clear(&mut self) {
        self.bits.iter_mut().for_each(|w| *w = 0);
    }

    fn insert(&mut self, set: usize, at: usize) {
        self.bits[set * self.words + at / 64] |= 1 << (at % 64);
    }

    /// Inserts every position in `lo..=hi`.
    fn fill(&mut self, set: usize, lo: usize, hi: usize) {
        let base = set * self.words;
        let (first, last) = (lo / 64, hi / 64);
        for w in first..=last {
            let from = if w == first { lo % 64 } else { 0 };
            let to = if w == last { hi % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - to)) & (u64::MAX << from);
            self.bits[base + w] |= mask;
        }
    }

    fn max(&self, set: usize) -> Option<usize> {
        let words = &self.bits[set * self.words..(set + 1) * self.words];
        words.iter().rposition(|&w| w != 0).map(|w| w * 64 + 63 - words[w].leading_zeros() as usize)
    }

    /// Positions in increasing order.
    fn iter(&self, set: usize) -> impl Iterator<Item = usize> + '_ {
        self.bits[set * self.words..(set + 1) * self.words].iter().enumerate().flat_map(|(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                if word == 0 {
                    return None;
                }
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                Some(w * 64 + bit)
            })
        })
    }
}

/// What does not depend on the threshold, per node: how far memory lets a middle stage reach
/// from each start, and last-stage times.
pub(crate) struct NodeFacts {
    /// `memory_reach[j]`: the largest `e < L` with `[j, e)` fitting in memory; `j` if none.
    memory_reach: Vec<u32>,
    /// `roofline(k, j, L)` for each start `j`.
    final_roofline: Vec<f64>,
    /// Smallest start `j >= 1` from which `[j, L)` fits; `L` if none.
    final_fits_from: usize,
    /// The whole model alone on this node, if it fits.
    single: Option<f64>,
}

impl NodeFacts {
    pub(crate) fn new(cost: &CostModel, k: usize) -> NodeFacts {
        let l = cost.layers();
        let mut memory_reach = vec![0u32; l];
        let mut p = 0usize;
        for (j, reach) in memory_reach.iter_mut().enumerate() {
            p = p.max(j);
            while p < l - 1 && cost.fits(k, j, p + 1) {
                p += 1;
            }
            *reach = p as u32;
        }
        let final_fits_from = (1..l).find(|&j| cost.fits(k, j, l)).unwrap_or(l);
        NodeFacts {
            memory_reach,
            final_roofline: (0..l).map(|j| cost.roofline_s(k, j, l)).collect(),
            final_fits_from,
            single: cost.fits(k, 0, l).then(|| cost.roofline_s(k, 0, l)),
        }
    }
}

/// For one node at one threshold: how far a middle stage starting at each layer can reach,
/// and from which start a last stage fits.
pub(crate) struct ReachTable<'f> {
    facts: &'f NodeFacts,
    /// `reach[j]`: the largest `e < L` with `[j, e)` within the threshold and memory; `j` if none.
    pub(crate) reach: Vec<u32>,
    /// `mid_event[j]`: the threshold at which `reach[j]` would grow (∞ if memory blocks it).
    mid_event: Vec<f64>,
    /// Smallest start from which `[start, L)` is within the threshold as a last stage.
    pub(crate) final_from: usize,
    ret: f64,
    pub(crate) single_ok: bool,
}

impl<'f> ReachTable<'f> {
    pub(crate) fn new(
        cost: &CostModel,
        k: usize,
        facts: &'f NodeFacts,
        tau: f64,
        hop: f64,
        ret: f64,
    ) -> ReachTable<'f> {
        let l = cost.layers();
        let mut reach = vec![0u32; l];
        let mut mid_event = vec![f64::INFINITY; l];
        let mut p = 0usize;
        for j in 0..l {
            let limit = facts.memory_reach[j] as usize;
            p = p.max(j);
            while p < limit && cost.roofline_s(k, j, p + 1) + hop <= tau {
                p += 1;
            }
            reach[j] = p as u32;
            if p < limit {
                mid_event[j] = cost.roofline_s(k, j, p + 1) + hop;
            }
        }
        // Last-stage times fall as the start grows: the first start within tau.
        let from = facts.final_fits_from;
        let final_from = if from >= l {
            usize::MAX
        } else {
            let offset = facts.final_roofline[from..].partition_point(|&t| t + ret > tau);
            if from + offset < l { from + offset } else { usize::MAX }
        };
        ReachTable { facts, reach, mid_event, final_from, ret, single_ok: facts.single.is_some_and(|t| t <= tau) }
    }

    /// The threshold at which a last stage from `j` would fit in time (∞ if memory blocks it).
    fn final_event(&self, j: usize) -> f64 {
        if j >= self.facts.final_fits_from && j > 0 { self.facts.final_roofline[j] + self.ret } else { f64::INFINITY }
    }

    /// The threshold at which the whole model alone on this node would fit in time.
    fn single_event(&self) -> f64 {
        self.facts.single.unwrap_or(f64::INFINITY)
    }
}

/// Last-stage costs of one node for every start (∞ where memory does not fit or the stage
/// is over the cap).
struct FinalCosts {
    with_return: Vec<f64>,
    fits_from: usize,
    single: f64,
}

impl FinalCosts {
    fn new(cost: &CostModel, k: usize, ret: f64, cap: f64) -> FinalCosts {
        let l = cost.layers();
        let fits_from = (1..l).find(|&j| cost.fits(k, j, l)).unwrap_or(l);
        let within = |t: f64| if t <= cap { t } else { f64::INFINITY };
        let with_return = (0..l)
            .map(|j| if j >= fits_from { within(cost.roofline_s(k, j, l) + ret) } else { f64::INFINITY })
            .collect();
        let single = if cost.fits(k, 0, l) { within(cost.roofline_s(k, 0, l)) } else { f64::INFINITY };
        FinalCosts { with_return, fits_from, single }
    }
}

// ---------------------------------------------------------------------------------------
// Large clusters: fixed orders, local search, and a lower bound.

/// Nodes fastest first, judged on a middle layer.
fn speed_order(cost: &CostModel, nodes: &[usize]) -> Vec<usize> {
    let mut order = nodes.to_vec();
    let probe = |k: usize| cost.roofline_s(k, cost.layers() / 2, cost.layers() / 2 + 1);
    order.sort_by(|&a, &b| probe(a).total_cmp(&probe(b)).then(a.cmp(&b)));
    order
}

pub(crate) fn heuristic(cost: &CostModel, goal: Goal, nodes: &[usize], required: Option<usize>) -> Found {
    let speed_order = speed_order(cost, nodes);
    let memory_order = {
        let mut order = nodes.to_vec();
        order.sort_by(|&a, &b| cost.nodes[b].capacity.cmp(&cost.nodes[a].capacity).then(a.cmp(&b)));
        order
    };
    let mut orders = vec![speed_order.clone(), memory_order];
    // The first stage carries the embedding and the last the head: try each of the fastest
    // few nodes at the front.
    for &k in speed_order.iter().take(4).skip(1) {
        let mut order = vec![k];
        order.extend(speed_order.iter().copied().filter(|&x| x != k));
        orders.push(order);
    }
    let mut best: Option<(f64, Assignment)> = None;
    let mut best_order = speed_order.clone();
    let mut evaluated = 0usize;
    for order in &orders {
        evaluated += 1;
        if let Some(found) = fixed_order(cost, goal, order, required)
            && best.as_ref().is_none_or(|b| found.0 < b.0)
        {
            best = Some(found);
            best_order = order.clone();
        }
    }
    // Local search: move each node one place earlier; keep improvements. Each order costs
    // about nodes × layers steps; the budget keeps the whole search near 10^7 of them.
    let per_order = (nodes.len() * cost.layers()).max(1);
    let budget = (10_000_000 / per_order).clamp(orders.len() + 8, orders.len() + 256);
    let mut improved = true;
    while improved && evaluated < budget && best.is_some() {
        improved = false;
        for i in 1..best_order.len() {
            if evaluated >= budget {
                break;
            }
            let mut order = best_order.clone();
            order.swap(i - 1, i);
            evaluated += 1;
            if let Some(found) = fixed_order(cost, goal, &order, required)
                && best.as_ref().is_some_and(|b| found.0 < b.0 * (1.0 - 1e-12))
            {
                best = Some(found);
                best_order = order;
                improved = true;
            }
        }
    }
    let bound = lower_bound(cost, goal, nodes);
    let detail = format!(
        "heuristic: {} node orders searched exactly each (too many nodes for the exact search over subsets)",
        group_digits(evaluated as u64)
    );
    Found { best, exact: false, bound, detail }
}

/// The best plan for one node order, any node may be skipped: exact for that order.
fn fixed_order(cost: &CostModel, goal: Goal, order: &[usize], required: Option<usize>) -> Option<(f64, Assignment)> {
    match goal {
        Goal::Slowest => parametric(0.0, None, |tau| fixed_order_feasible(cost, order, tau, required)),
        Goal::Sum => fixed_order_min_sum(cost, order, required, f64::INFINITY),
    }
}

/// Greedy farthest reach along the order: exact for a fixed order with uniform links. With
/// per-pair links the hop to the next node in the order is assumed; the plan found is then
/// evaluated exactly.
fn fixed_order_feasible(cost: &CostModel, order: &[usize], tau: f64, required: Option<usize>) -> Probe {
    let l = cost.layers();
    let mut stages: Assignment = Vec::new();
    let mut j = 0usize;
    let mut next_event = f64::INFINITY;
    let mut used_required = required.is_none();
    for (pos, &k) in order.iter().enumerate() {
        let is_required = required == Some(k);
        let ret = stages.first().map_or(0.0, |s| cost.return_s(k, s.0));
        if (used_required || is_required) && cost.fits(k, j, l) {
            let t = cost.roofline_s(k, j, l) + ret;
            if t <= tau {
                stages.push((k, j, l));
                let times = cost.stage_times(&stages);
                return Probe::Feasible(times.iter().copied().fold(0.0, f64::max), stages);
            }
            next_event = next_event.min(t);
        }
        let hop = order.get(pos + 1).map_or(cost.uniform_hop_s(), |&next| cost.hop_s(k, next));
        let mut e = j;
        while e < l - 1 && cost.fits(k, j, e + 1) && cost.roofline_s(k, j, e + 1) + hop <= tau {
            e += 1;
        }
        if e < l - 1 && cost.fits(k, j, e + 1) {
            next_event = next_event.min(cost.roofline_s(k, j, e + 1) + hop);
        }
        if e > j {
            stages.push((k, j, e));
            used_required |= is_required;
            j = e;
        } else if is_required {
            break; // the required node cannot be skipped
        }
    }
    Probe::Infeasible(next_event)
}

/// Min–sum along a fixed order, any node skipped except `required`, every stage within
/// `cap` (with per-pair links, judged with the default link's hop): `cost[j]` is the least
/// time of stages covering `[0, j)` with the nodes so far (the last one's hop not yet paid).
fn fixed_order_min_sum(
    cost: &CostModel,
    order: &[usize],
    required: Option<usize>,
    cap: f64,
) -> Option<(f64, Assignment)> {
    const NONE: u32 = u32::MAX;
    let l = cost.layers();
    let width = l + 1;
    let required_pos = required.and_then(|r| order.iter().position(|&k| k == r));
    let mut value = vec![f64::INFINITY; width];
    value[0] = 0.0;
    let mut first = vec![NONE; width];
    let mut last = vec![NONE; width];
    // owner[pos][e]: the position whose stage ended at e in the state before position `pos`;
    // start[pos][e]: where position pos's stage ending at e began, if it set that state.
    let mut owner_before: Vec<Vec<u32>> = Vec::with_capacity(order.len());
    let mut owner = vec![NONE; width];
    let mut start_of: Vec<Vec<u32>> = Vec::with_capacity(order.len());
    let mut answer: Option<(f64, usize, usize)> = None;
    let mut incoming = vec![f64::INFINITY; width];
    let mut scratch = Vec::new();
    for (pos, &k) in order.iter().enumerate() {
        owner_before.push(owner.clone());
        let mut starts = vec![NONE; width];
        for j in 0..l {
            incoming[j] = if j == 0 {
                value[0]
            } else if value[j].is_finite() && last[j] != NONE {
                value[j] + cost.hop_s(order[last[j] as usize], k)
            } else {
                f64::INFINITY
            };
        }
        // Finish here with [j, L).
        if required_pos.is_none_or(|r| pos >= r) {
            for j in 0..l {
                if incoming[j].is_finite() && cost.fits(k, j, l) {
                    let ret = if j == 0 { 0.0 } else { cost.return_s(k, order[first[j] as usize]) };
                    let last_stage = cost.roofline_s(k, j, l) + ret;
                    let total = incoming[j] + last_stage;
                    if last_stage <= cap && total < answer.map_or(f64::INFINITY, |a| a.0) {
                        answer = Some((total, pos, j));
                    }
                }
            }
        }
        // Or take [j, e).
        let (mut next_value, mut next_first, mut next_last, mut next_owner) = if Some(pos) == required_pos {
            (vec![f64::INFINITY; width], vec![NONE; width], vec![NONE; width], vec![NONE; width])
        } else {
            (value.clone(), first.clone(), last.clone(), owner.clone())
        };
        let regime = cost.linear_regime(k);
        for first_stage in [true, false] {
            scratch.clear();
            // The hop is paid on arrival at the next node; the cap assumes the default link's.
            let closing = Closing { hop: 0.0, limit: cap - cost.uniform_hop_s() };
            relax(cost, k, regime, &incoming, first_stage, closing, &mut scratch);
            for &(e, v, j) in &scratch {
                if v < next_value[e] {
                    next_value[e] = v;
                    next_first[e] = if j == 0 { pos as u32 } else { first[j] };
                    next_last[e] = pos as u32;
                    next_owner[e] = pos as u32;
                    starts[e] = j as u32;
                }
            }
        }
        start_of.push(starts);
        (value, first, last, owner) = (next_value, next_first, next_last, next_owner);
    }
    let (_, pos, j) = answer?;
    let mut stages = vec![(order[pos], j, l)];
    let (mut end, mut at) = (j, pos);
    while end > 0 {
        let by = owner_before[at][end];
        if by == NONE {
            return None;
        }
        let by = by as usize;
        let begin = start_of[by][end] as usize;
        stages.push((order[by], begin, end));
        (end, at) = (begin, by);
    }
    stages.reverse();
    let total = cost.stage_times(&stages).iter().sum::<f64>();
    Some((total, stages))
}

/// A bound no plan beats, in seconds (the slowest stage's or the sum's).
///
/// Slowest stage: the least `τ` at which the nodes together could hold every layer if each took
/// at most as many layers as fit in `τ` (counting the lightest layers, for each roofline term
/// apart) and in its memory; and at least the slowest single layer on its best node.
/// Sum: each roofline term alone, with layers spread fractionally over the nodes, the
/// densest work on the fastest node, memory filled like a knapsack (a rearrangement argument
/// makes that greedy fill optimal for the relaxation).
pub(crate) fn lower_bound(cost: &CostModel, goal: Goal, nodes: &[usize]) -> Option<f64> {
    let l = cost.layers();
    if l == 0 || nodes.is_empty() {
        return None;
    }
    let work: Vec<(f64, f64, u64)> = (0..l).map(|i| cost.layer_work(i)).collect();
    let rates = |k: usize, term: usize| {
        let r = &cost.nodes[k];
        if term == 0 { r.inv_bandwidth } else { r.inv_compute }
    };
    let pick = |w: &(f64, f64, u64), term: usize| if term == 0 { w.0 } else { w.1 };
    match goal {
        Goal::Slowest => {
            let mut single = 0.0f64;
            for i in 0..l {
                let best = nodes
                    .iter()
                    .filter(|&&k| cost.fits(k, i, i + 1))
                    .map(|&k| cost.roofline_s(k, i, i + 1))
                    .fold(f64::INFINITY, f64::min);
                single = single.max(best);
            }
            if single.is_infinite() {
                return None;
            }
            let prefix = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                let mut sums = Vec::with_capacity(v.len() + 1);
                sums.push(0.0);
                for x in v {
                    sums.push(sums.last().copied().unwrap_or(0.0) + x);
                }
                sums
            };
            let read = prefix(work.iter().map(|w| w.0).collect());
            let flops = prefix(work.iter().map(|w| w.1).collect());
            let held = prefix(work.iter().map(|w| w.2 as f64).collect());
            let upto = |sums: &Vec<f64>, limit: f64| sums.partition_point(|&s| s <= limit).saturating_sub(1);
            let count = |tau: f64| -> usize {
                nodes
                    .iter()
                    .map(|&k| {
                        let cap = cost.nodes[k].capacity as f64;
                        upto(&read, tau / rates(k, 0)).min(upto(&flops, tau / rates(k, 1))).min(upto(&held, cap))
                    })
                    .sum()
            };
            let (mut lo, mut hi) = (0.0f64, single);
            while count(hi) < l {
                hi *= 2.0;
                if !hi.is_finite() || hi > 1e12 {
                    return Some(single);
                }
            }
            for _ in 0..100 {
                let mid = (lo + hi) / 2.0;
                if count(mid) >= l { hi = mid } else { lo = mid }
            }
            Some(single.max(lo))
        }
        Goal::Sum => {
            let fluid = |term: usize| -> f64 {
                let mut layers: Vec<(f64, f64)> = work.iter().map(|w| (pick(w, term), w.2 as f64)).collect();
                layers.sort_by(|a, b| (b.0 / b.1.max(1.0)).total_cmp(&(a.0 / a.1.max(1.0))));
                let mut fast: Vec<(f64, f64)> =
                    nodes.iter().map(|&k| (rates(k, term), cost.nodes[k].capacity.max(0) as f64)).collect();
                fast.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut total = 0.0;
                let mut node = 0usize;
                let mut room = fast[0].1;
                for (amount, held) in layers {
                    let mut left = 1.0f64;
                    while left > 1e-12 {
                        let Some(&(rate, _)) = fast.get(node) else { return total };
                        let take = if held <= 0.0 { left } else { left.min(room / held) };
                        total += take * amount * rate;
                        room -= take * held;
                        left -= take;
                        if left > 1e-12 {
                            node += 1;
                            room = fast.get(node).map_or(0.0, |f| f.1);
                        }
                    }
                }
                total
            };
            Some(fluid(0).max(fluid(1)))
        }
    }
}
