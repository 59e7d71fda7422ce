//! The splits users know, on the same cost model, so the difference is visible.
//!
//! Each takes the nodes in the scenario's order and uses all of them (a node given no layers
//! is dropped), the way the tools they come from behave.

use super::search::Split;
use crate::cost::CostModel;
use crate::problem::Placement;

/// vLLM's default (`get_pp_indices`): `L / P` layers each; the remainder goes one each to the
/// second-to-last rank, then the one before, and so on — never to the last, which also holds
/// the final norm.
pub(crate) fn even(cost: &CostModel) -> Split {
    let (l, p) = (cost.layers(), cost.node_count());
    if p == 0 {
        return Vec::new();
    }
    let mut counts = vec![l / p; p];
    for i in 2..(l % p) + 2 {
        counts[p - i] += 1;
    }
    from_counts(&counts)
}

/// llama.cpp's default tensor split and exo's placement: layers in proportion to each
/// node's memory. Like llama.cpp, layer `i` goes to the first node whose cumulative share
/// exceeds `i / L` (`std::upper_bound` over the normalised prefix sums).
pub(crate) fn memory_proportional(cost: &CostModel) -> Split {
    let l = cost.layers();
    let weights: Vec<f64> = (0..cost.node_count()).map(|k| cost.nodes[k].capacity.max(0) as f64).collect();
    let total: f64 = weights.iter().sum();
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let shares: Vec<f64> = if total > 0.0 {
        let mut running = 0.0;
        weights
            .iter()
            .map(|w| {
                running += w;
                running / total
            })
            .collect()
    } else {
        (1..=n).map(|i| i as f64 / n as f64).collect()
    };
    let mut counts = vec![0usize; n];
    for i in 0..l {
        let at = i as f64 / l as f64;
        let node = shares.partition_point(|&c| c <= at).min(n - 1);
        counts[node] += 1;
    }
    from_counts(&counts)
}

/// Largest memory first: each node takes as many layers as it holds, then the next. What
/// is left when the nodes run out lands on the last node used (and does not fit).
pub(crate) fn greedy(cost: &CostModel) -> Split {
    let l = cost.layers();
    let mut order: Vec<usize> = (0..cost.node_count()).collect();
    order.sort_by(|&a, &b| cost.nodes[b].capacity.cmp(&cost.nodes[a].capacity).then(a.cmp(&b)));
    let mut stages: Split = Vec::new();
    if order.is_empty() {
        return stages;
    }
    let mut j = 0;
    for &k in &order {
        if cost.fits(k, j, l) {
            stages.push(Placement::new(k, j, l));
            return stages;
        }
        let mut e = j;
        while e + 1 < l && cost.fits(k, j, e + 1) {
            e += 1;
        }
        if e > j {
            stages.push(Placement::new(k, j, e));
            j = e;
        }
    }
    match stages.last_mut() {
        Some(last) => last.end = l,
        None => stages.push(Placement::new(order[0], 0, l)),
    }
    stages
}

fn from_counts(counts: &[usize]) -> Split {
    let mut stages = Vec::new();
    let mut start = 0;
    for (node, &count) in counts.iter().enumerate() {
        if count > 0 {
            stages.push(Placement::new(node, start, start + count));
            start += count;
        }
    }
    stages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_matches_vllm_remainders() {
        let counts = |l: usize, p: usize| {
            let mut c = vec![l / p; p];
            for i in 2..(l % p) + 2 {
                c[p - i] += 1;
            }
            c
        };
        // Worked values of vLLM's get_pp_indices.
        assert_eq!(counts(61, 2), [31, 30]);
        assert_eq!(counts(64, 3), [21, 22, 21]);
        assert_eq!(counts(10, 4), [2, 3, 3, 2]);
        assert_eq!(counts(11, 4), [3, 3, 3, 2]);
        assert_eq!(counts(32, 5), [6, 6, 7, 7, 6]);
        assert_eq!(counts(7, 8), [1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(from_counts(&counts(7, 8)).len(), 7);
    }
}
