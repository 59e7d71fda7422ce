//! The exact search: a dynamic program over (set of nodes used, layers covered), with twins
//! merged, for uniform links and for per-pair links (see the parent module).
use super::Split;
use super::heuristic::{fixed_order_min_sum, speed_order};
use super::tables::{Closing, FinalCosts, relax};
use crate::cost::{CostModel, Regime};
use crate::problem::Placement;

/// The nodes a search may use, their equivalence classes, and each node's regime.
pub(crate) struct Space<'a> {
    cost: &'a CostModel,
    /// Node indices into the cost model.
    pub(super) nodes: Vec<usize>,
    /// For position `i`, the earlier position of an identical node, if any: position `i` may
    /// join a subset only after it.
    twin_before: Vec<Option<usize>>,
    pub(super) classes: usize,
    /// Position of the required node.
    pub(super) required: Option<usize>,
    pub(super) regimes: Vec<Option<Regime>>,
}

impl<'a> Space<'a> {
    pub(crate) fn new(cost: &'a CostModel, nodes: &[usize], required: Option<usize>) -> Space<'a> {
        let uniform = cost.uniform_links();
        let required_pos = required.and_then(|r| nodes.iter().position(|&k| k == r));
        let mut twin_before = vec![None; nodes.len()];
        let mut classes = 0;
        for i in 0..nodes.len() {
            let same = |a: usize, b: usize| cost.nodes[nodes[a]].priced_alike(&cost.nodes[nodes[b]]);
            // With per-pair links, twins also reach every other node alike (the GPUs of one
            // machine alike, on its link), and a relayed cut passes through the same machines:
            // swapping them maps every plan to one of equal time.
            let same_links = |a: usize, b: usize| {
                cost.relays_alike(nodes[a], nodes[b])
                    && (uniform
                        || (0..nodes.len()).filter(|&x| x != a && x != b).all(|x| {
                            let (a, b, x) = (nodes[a], nodes[b], nodes[x]);
                            cost.hop_s(a, x) == cost.hop_s(b, x)
                                && cost.hop_s(x, a) == cost.hop_s(x, b)
                                && cost.return_s(a, x) == cost.return_s(b, x)
                                && cost.return_s(x, a) == cost.return_s(x, b)
                        }) && cost.hop_s(nodes[a], nodes[b]) == cost.hop_s(nodes[b], nodes[a])
                            && cost.return_s(nodes[a], nodes[b]) == cost.return_s(nodes[b], nodes[a]))
            };
            let twin = if Some(i) == required_pos {
                None
            } else {
                (0..i).rev().find(|&j| Some(j) != required_pos && same(i, j) && same_links(i, j))
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
    pub(super) fn canonical_masks(&self) -> f64 {
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
    pub(super) fn may_join(&self, mask: usize, i: usize) -> bool {
        mask & (1 << i) == 0 && self.twin_before[i].is_none_or(|t| mask & (1 << t) != 0)
    }

    #[inline]
    pub(super) fn has_required(&self, mask: usize) -> bool {
        self.required.is_none_or(|r| mask & (1 << r) != 0)
    }

    /// Min–sum over subsets with uniform links: `best[mask][j]` is the least time of closed
    /// stages (each paying the hop, each within `cap`) that cover `[0, j)` with the nodes in
    /// `mask`.
    ///
    /// Branch and bound: a plan from a fixed node order gives an upper bound; a state whose
    /// cost plus a lower bound on the rest (each layer at its fastest node, per roofline
    /// term) reaches it cannot lead to a better plan and is not extended.
    pub(super) fn min_sum_uniform(&self, cap: f64) -> Option<(f64, Split)> {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        // The cut after the first stage, and after any other.
        let hops = [cost.uniform_cut_s(true), cost.uniform_cut_s(false)];
        let ret = cost.uniform_return_s();
        let full = 1usize << m;
        let width = l + 1;
        let rest = self.rest_lower_bounds();
        let mut incumbent =
            fixed_order_min_sum(cost, &speed_order(cost, &self.nodes), self.required.map(|r| self.nodes[r]), cap);
        let bound = |incumbent: &Option<(f64, Split)>| incumbent.as_ref().map_or(f64::INFINITY, |b| b.0);
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
                let hop = hops[usize::from(mask != 0)];
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
            let mut stages = vec![Placement::new(self.nodes[i], j, l)];
            let mut end = j;
            while mask != 0 {
                let (start, pos) = from[mask * width + end];
                stages.push(Placement::new(self.nodes[pos as usize], start as usize, end));
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
    pub(super) fn rest_lower_bounds(&self) -> Vec<f64> {
        let cost = self.cost;
        let l = cost.layers();
        let mut rest = vec![0.0; l + 1];
        let (mut read, mut compute) = (0.0f64, 0.0f64);
        for j in (0..l).rev() {
            // A stage takes at least its layers' memory (or compute) terms plus their
            // per-layer cost, each layer on the node that makes that cheapest.
            let (bytes, flops, _) = cost.layer_work(j);
            let least = |term: &dyn Fn(&crate::cost::NodeCost) -> f64| {
                self.nodes
                    .iter()
                    .map(|&k| term(&cost.nodes[k]) + cost.nodes[k].least_per_layer_s())
                    .fold(f64::INFINITY, f64::min)
            };
            read += least(&|r| bytes * r.least_inv_bandwidth());
            compute += least(&|r| flops * r.least_inv_compute());
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
    pub(super) fn min_sum_pairwise(&self, cap: f64) -> Option<(f64, Split)> {
        let cost = self.cost;
        let l = cost.layers();
        let m = self.nodes.len();
        let full = 1usize << m;
        let width = l + 1;
        let mut answer: Option<(f64, Split)> = None;
        let mut open = vec![f64::INFINITY; full * m * width];
        // from[cell of (mask, k, e)] = (s, p): `p`'s stage [s, e) closed before `k`'s opened.
        let mut from = vec![(0u32, 0u8); full * m * width];
        let mut row = vec![f64::INFINITY; width];
        let mut scratch = Vec::with_capacity(width);
        for f in 0..m {
            // A node with an identical one before it opens no pipeline (see `may_join`).
            if self.twin_before[f].is_some() {
                continue;
            }
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
                            let mut stages = vec![Placement::new(self.nodes[p], s, l)];
                            let (mut at, mut last, mut begin) = (mask, p, s);
                            while at != 1 << f {
                                let (start, prev) = from[(at * m + last) * width + begin];
                                at &= !(1 << last);
                                (last, begin) = (prev as usize, start as usize);
                                stages.push(Placement::new(self.nodes[last], begin, stages[stages.len() - 1].start));
                            }
                            stages.reverse();
                            answer = Some((total, stages));
                        }
                    }
                    // Or close [s, e) and pass to `k`.
                    for k in 0..m {
                        if !self.may_join(mask, k) {
                            continue;
                        }
                        let hop = cost.cut_s(self.nodes[p], self.nodes[k], self.nodes[f]);
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
