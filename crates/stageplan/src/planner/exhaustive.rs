//! Exhaustive search over every manual plan: each ordered subset of nodes, each contiguous
//! split. Exponential; it exists to prove the `optimal` policy right on small instances
//! (property tests, `stageplan plan --verify`).

use super::search::Assignment;
use crate::cost::CostModel;
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
/// A depth-first walk that keeps the running sum and maximum of closed stages, so each of
/// the (many) complete plans costs O(1); ranges that do not fit are not extended, since a
/// longer range on the same node holds more.
pub(crate) fn best(cost: &CostModel, objective: Objective, required: Option<usize>) -> Option<(f64, Assignment)> {
    let mut walk =
        Walk { cost, objective, required, used: vec![false; cost.node_count()], stages: Vec::new(), best: None };
    for first in 0..cost.node_count() {
        walk.used[first] = true;
        for end in 1..=cost.layers() {
            if !cost.fits(first, 0, end) {
                break;
            }
            walk.stages.push((first, 0, end));
            walk.extend(0.0, 0.0);
            walk.stages.pop();
        }
        walk.used[first] = false;
    }
    walk.best
}

struct Walk<'a> {
    cost: &'a CostModel,
    objective: Objective,
    required: Option<usize>,
    used: Vec<bool>,
    /// The last stage is open: its hop depends on who comes next.
    stages: Assignment,
    best: Option<(f64, Assignment)>,
}

impl Walk<'_> {
    fn extend(&mut self, sum: f64, max: f64) {
        let cost = self.cost;
        let l = cost.layers();
        let (k, a, b) = *self.stages.last().expect("a stage is open");
        if b == l {
            if self.required.is_some_and(|r| !self.used[r]) {
                return;
            }
            let send = if self.stages.len() == 1 { 0.0 } else { cost.return_s(k, self.stages[0].0) };
            let t = cost.roofline_s(k, a, b) + send;
            let v = match self.objective {
                Objective::Throughput => max.max(t),
                Objective::Latency => sum + t,
            };
            if self.best.as_ref().is_none_or(|best| v < best.0) {
                self.best = Some((v, self.stages.clone()));
            }
            return;
        }
        let compute = cost.roofline_s(k, a, b);
        for next in 0..self.used.len() {
            if self.used[next] {
                continue;
            }
            let t = compute + cost.hop_s(k, next);
            self.used[next] = true;
            for end in b + 1..=l {
                if !cost.fits(next, b, end) {
                    break;
                }
                self.stages.push((next, b, end));
                self.extend(sum + t, max.max(t));
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
