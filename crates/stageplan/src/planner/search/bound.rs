//! A lower bound on the least sum: the fractional relaxation the heuristic reports against.
use crate::cost::CostModel;

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
        let rate = |k: usize| {
            if term == 0 { cost.nodes[k].least_inv_bandwidth() } else { cost.nodes[k].least_inv_compute() }
        };
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
    let per_layer = nodes.iter().map(|&k| cost.nodes[k].least_per_layer_s()).fold(f64::INFINITY, f64::min);
    Some(fluid(0).max(fluid(1)) + l as f64 * per_layer)
}
