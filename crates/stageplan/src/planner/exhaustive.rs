//! Exhaustive search over every manual plan: each ordered subset of nodes, each contiguous
//! split, and the whole model on each tensor-parallel group. Exponential; it exists to prove
//! the `optimal` policy right on small instances (property tests, `stageplan plan --verify`).

use super::search::Split;
use crate::cost::CostModel;
use crate::problem::Placement;
use crate::scenario::Objective;

/// Plans an exhaustive search would visit; `None` when it would not fit in a `u64`.
pub fn plan_count(nodes: usize, layers: usize) -> Option<u64> {
    // Σ over stage counts s of P(n, s) · C(L - 1, s - 1).
    let mut total: u64 = 0;
    let mut permutations: u64 = 1;
    let mut compositions: u64 = 1;
    for s in 1..=nodes.min(layers) {
        permutations = permutations.checked_mul((nodes - s + 1) as u64)?;
        if s > 1 {
            compositions = compositions.checked_mul((layers - s + 1) as u64)? / (s - 1) as u64;
        }
        total = total.checked_add(permutations.checked_mul(compositions)?)?;
    }
    Some(total)
}

/// The best assignment over every ordered subset and split, by `objective`, among those that
/// use `required` if given; ties keep the first found. `None` when nothing fits.
///
/// A depth-first walk that keeps the running sum and maximum of closed stages — for the
/// throughput objective one pair per micro-batch count, each on its own step size — so each
/// of the (many) complete plans costs O(micro-batch counts); ranges that do not fit are not
/// extended, since a longer range on the same node holds more.
pub(crate) fn best(cost: &CostModel, objective: Objective, required: Option<usize>) -> Option<(f64, Split)> {
    let devices: Vec<usize> = (0..cost.node_count()).collect();
    let mut best = walk(cost, objective, &devices, required);
    let mut better = |found: Option<(f64, Split)>| {
        if let Some((v, stages)) = found
            && best.as_ref().is_none_or(|b| v < b.0)
        {
            best = Some((v, stages));
        }
    };
    // The whole model on each tensor-parallel group.
    let every = vec![true; cost.node_count()];
    for stages in super::search::tensor_parallel(cost, &every, required) {
        better(super::search::value(cost, &stages, objective).map(|v| (v, stages)));
    }
    // vLLM's pipelines of groups of one size: every ordered subset of them and split.
    for (_, groups) in cost.pipelines() {
        let required = match required {
            None => None,
            Some(r) => match groups.iter().find(|&&g| cost.members(g).contains(&r)) {
                Some(&g) => Some(g),
                None => continue,
            },
        };
        better(walk(cost, objective, groups, required));
    }
    best
}

/// [`best`] over pipelines of `nodes` (the cost model's).
fn walk(cost: &CostModel, objective: Objective, nodes: &[usize], required: Option<usize>) -> Option<(f64, Split)> {
    let counts = match objective {
        Objective::Throughput => cost.batch().min(nodes.len() as u64).max(1) as usize,
        Objective::Latency => 1,
    };
    let costs: Vec<CostModel> =
        (1..=counts as u64).map(|k| if k == 1 { cost.clone() } else { cost.micro_batched(k) }).collect();
    let depth = nodes.len() + 1;
    let mut walk = Walk {
        costs,
        objective,
        required: required.and_then(|r| nodes.iter().position(|&k| k == r)),
        nodes: nodes.to_vec(),
        used: vec![false; nodes.len()],
        stages: Vec::new(),
        sums: vec![0.0; depth * counts],
        maxes: vec![0.0; depth * counts],
        best: None,
    };
    if required.is_some() && walk.required.is_none() {
        return None;
    }
    for (first, &node) in nodes.iter().enumerate() {
        walk.used[first] = true;
        for end in 1..=cost.layers() {
            if !cost.fits(node, 0, end) {
                break;
            }
            walk.stages.push(Placement::new(node, 0, end));
            walk.extend();
            walk.stages.pop();
        }
        walk.used[first] = false;
    }
    walk.best
}

struct Walk {
    /// `costs[k - 1]`: stage times for steps of `batch / k` sequences.
    costs: Vec<CostModel>,
    objective: Objective,
    /// Position in `nodes` of the node every plan must use.
    required: Option<usize>,
    /// The nodes plans may use; `used` by position.
    nodes: Vec<usize>,
    used: Vec<bool>,
    /// The last stage is open: its hop depends on who comes next.
    stages: Split,
    /// `[d × counts + k − 1]`: sum and maximum of the first `d` stages' times, `k` micro-batches.
    sums: Vec<f64>,
    maxes: Vec<f64>,
    best: Option<(f64, Split)>,
}

impl Walk {
    fn extend(&mut self) {
        let counts = self.costs.len();
        let l = self.costs[0].layers();
        let closed = self.stages.len() - 1;
        let Placement { node: k, start: a, end: b } = self.stages[closed];
        let at = closed * counts;
        if b == l {
            if self.required.is_some_and(|r| !self.used[r]) {
                return;
            }
            let mut v = f64::INFINITY;
            // At most one micro-batch per stage.
            for (c, cost) in self.costs.iter().enumerate().take(closed + 1) {
                let send = if closed == 0 { 0.0 } else { cost.return_s(k, self.stages[0].node) };
                let t = cost.roofline_s(k, a, b) + send;
                let cycle = match self.objective {
                    Objective::Throughput => (self.sums[at + c] + t).max((c + 1) as f64 * self.maxes[at + c].max(t)),
                    Objective::Latency => self.sums[at + c] + t,
                };
                v = v.min(cycle);
            }
            if self.best.as_ref().is_none_or(|best| v < best.0) {
                self.best = Some((v, self.stages.clone()));
            }
            return;
        }
        for next in 0..self.used.len() {
            if self.used[next] {
                continue;
            }
            let node = self.nodes[next];
            for c in 0..counts {
                let cost = &self.costs[c];
                let t = cost.roofline_s(k, a, b) + cost.cut_s(k, node, self.stages[0].node);
                self.sums[at + counts + c] = self.sums[at + c] + t;
                self.maxes[at + counts + c] = self.maxes[at + c].max(t);
            }
            self.used[next] = true;
            for end in b + 1..=l {
                if !self.costs[0].fits(node, b, end) {
                    break;
                }
                self.stages.push(Placement::new(node, b, end));
                self.extend();
                self.stages.pop();
            }
            self.used[next] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_ordered_subsets_times_compositions() {
        assert_eq!(plan_count(1, 10), Some(1));
        // 2 nodes, 3 layers: 2 singles + 2 orders × 2 splits.
        assert_eq!(plan_count(2, 3), Some(6));
        // 6 nodes × 24 layers, the property tests' largest case.
        assert_eq!(plan_count(6, 24), Some(31_271_496));
        assert_eq!(plan_count(64, 10_000), None);
    }
}
