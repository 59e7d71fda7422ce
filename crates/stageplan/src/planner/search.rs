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
        Objective::Latency => least_sum(cost, &nodes, required),
        Objective::Throughput => optimal_cycle(cost, &nodes, required),
    }
}

/// Would the exact subset search stay within its limits?
fn exact_fits(cost: &CostModel, space: &Space) -> bool {
    let l = cost.layers() as f64;
    let m = space.nodes.len() as f64;
    let masks = space.canonical_masks();
    let (work, cells) = if cost.uniform_links() {
        (masks * m * l * 2.0, masks * (l + 1.0))
    } else {
        (m * masks * m * m * l, masks * m * (l + 1.0))
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
    let sum_and_max = |stages: &Assignment| {
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

/// Does any plan fit in memory with the `allowed` nodes? For up to 16 nodes, exactly: a
/// subset DP where each node takes as many layers as its memory holds (a farther covered
/// prefix is never worse, whatever the links). Above that, a largest-memory-first fill.
pub(crate) fn any_fit(cost: &CostModel, allowed: &[bool]) -> bool {
    let mut nodes = usable(cost, allowed);
    let l = cost.layers();
    if nodes.is_empty() || l == 0 {
        return false;
    }
    // The farthest end `e < L` such that `[j, e)` fits on `k` (`j` when none does).
    let reach = |k: usize, j: usize| {
        let mut e = j;
        while e + 1 < l && cost.fits(k, j, e + 1) {
            e += 1;
        }
        e
    };
    if nodes.len() > 16 {
        nodes.sort_by(|&a, &b| cost.nodes[b].capacity.cmp(&cost.nodes[a].capacity).then(a.cmp(&b)));
        let mut j = 0;
        for k in nodes {
            if cost.fits(k, j, l) {
                return true;
            }
            j = reach(k, j);
        }
        return false;
    }
    let m = nodes.len();
    // reaches[i][j]: `reach(nodes[i], j)`, by two pointers (the reach never falls as j grows).
    let reaches: Vec<Vec<usize>> = nodes
        .iter()
        .map(|&k| {
            let mut e = 0;
            (0..l)
                .map(|j| {
                    e = e.max(j);
                    while e + 1 < l && cost.fits(k, j, e + 1) {
                        e += 1;
                    }
                    e
                })
                .collect()
        })
        .collect();
    let mut reached: Vec<Option<usize>> = vec![None; 1 << m];
    reached[0] = Some(0);
    for mask in 0..1usize << m {
        let Some(j) = reached[mask] else { continue };
        for (i, &k) in nodes.iter().enumerate() {
            if mask & (1 << i) != 0 {
                continue;
            }
            if cost.fits(k, j, l) {
                return true;
            }
            let e = reaches[i][j];
            if e > j {
                let done = mask | (1 << i);
                reached[done] = reached[done].max(Some(e));
            }
        }
    }
    false
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

/// The nodes a search may use, their equivalence classes, and each node's regime.
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
        Space { cost, nodes: nodes.to_vec(), twin_before, classes, required: required_pos, regimes }
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
    /// for it, counting one roofline term (and the per-layer cost) at a time: a stage's
    /// time is at least either sum.
    fn rest_lower_bounds(&self) -> Vec<f64> {
        let cost = self.cost;
        let l = cost.layers();
        let mut rest = vec![0.0; l + 1];
        let (mut read, mut compute) = (0.0f64, 0.0f64);
        for j in (0..l).rev() {
            // A stage takes at least its layers' memory (or compute) terms plus their
            // per-layer cost, each layer on the node that makes that cheapest.
            let (bytes, flops, _) = cost.layer_work(j);
            let least = |term: &dyn Fn(&crate::cost::NodeRates) -> f64| {
                self.nodes
                    .iter()
                    .map(|&k| term(&cost.nodes[k]) + cost.nodes[k].per_layer_s)
                    .fold(f64::INFINITY, f64::min)
            };
            read += least(&|r| bytes * r.inv_bandwidth);
            compute += least(&|r| flops * r.inv_compute);
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
            let capped = limit < f64::INFINITY;
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
                while lo < e && (!cost.fits(k, lo, e) || (capped && cost.roofline_s(k, lo, e) > limit)) {
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

pub(crate) fn heuristic(cost: &CostModel, nodes: &[usize], required: Option<usize>) -> Found {
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
        if let Some(found) = fixed_order_min_sum(cost, order, required, f64::INFINITY)
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
            if let Some(found) = fixed_order_min_sum(cost, &order, required, f64::INFINITY)
                && best.as_ref().is_some_and(|b| found.0 < b.0 * (1.0 - 1e-12))
            {
                best = Some(found);
                best_order = order;
                improved = true;
            }
        }
    }
    let bound = lower_bound(cost, nodes);
    let detail = format!(
        "heuristic: {} node orders searched exactly each (too many nodes for the exact search over subsets)",
        group_digits(evaluated as u64)
    );
    Found { best, exact: false, bound, detail }
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

/// A bound no plan's sum of stage times beats, in seconds: each roofline term alone, with
/// layers spread fractionally over the nodes, the densest work on the fastest node, memory
/// filled like a knapsack (a rearrangement argument makes that greedy fill optimal for the
/// relaxation), plus every layer's least per-layer cost.
pub(crate) fn lower_bound(cost: &CostModel, nodes: &[usize]) -> Option<f64> {
    let l = cost.layers();
    if l == 0 || nodes.is_empty() {
        return None;
    }
    let work: Vec<(f64, f64, u64)> = (0..l).map(|i| cost.layer_work(i)).collect();
    let fluid = |term: usize| -> f64 {
        let rate = |k: usize| if term == 0 { cost.nodes[k].inv_bandwidth } else { cost.nodes[k].inv_compute };
        let mut layers: Vec<(f64, f64)> =
            work.iter().map(|w| (if term == 0 { w.0 } else { w.1 }, w.2 as f64)).collect();
        layers.sort_by(|a, b| (b.0 / b.1.max(1.0)).total_cmp(&(a.0 / a.1.max(1.0))));
        let mut fast: Vec<(f64, f64)> =
            nodes.iter().map(|&k| (rate(k), cost.nodes[k].capacity.max(0) as f64)).collect();
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
    // Every layer also pays some node's per-layer cost.
    let per_layer = nodes.iter().map(|&k| cost.nodes[k].per_layer_s).fold(f64::INFINITY, f64::min);
    Some(fluid(0).max(fluid(1)) + l as f64 * per_layer)
}
