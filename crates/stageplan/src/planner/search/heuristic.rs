//! Large clusters: the least sum along fixed node orders (exact for each order, any node
//! skipped), then a local search over swaps; reports the relaxation's bound and the gap.
use super::tables::{Closing, relax};
use super::{Found, Split, bound::lower_bound};
use crate::cost::CostModel;
use crate::problem::Placement;
use crate::units::group_digits;

/// Nodes fastest first, judged on a middle layer.
pub(super) fn speed_order(cost: &CostModel, nodes: &[usize]) -> Vec<usize> {
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
    let mut best: Option<(f64, Split)> = None;
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
pub(super) fn fixed_order_min_sum(
    cost: &CostModel,
    order: &[usize],
    required: Option<usize>,
    cap: f64,
) -> Option<(f64, Split)> {
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
                value[j] + cost.cut_s(order[last[j] as usize], k, order[first[j] as usize])
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
            let closing = Closing { hop: 0.0, limit: cap - cost.uniform_cut_s(first_stage) };
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
    let mut stages = vec![Placement::new(order[pos], j, l)];
    let (mut end, mut at) = (j, pos);
    while end > 0 {
        let by = owner_before[at][end];
        if by == NONE {
            return None;
        }
        let by = by as usize;
        let begin = start_of[by][end] as usize;
        stages.push(Placement::new(order[by], begin, end));
        (end, at) = (begin, by);
    }
    stages.reverse();
    let total = cost.stage_times(&stages).iter().sum::<f64>();
    Some((total, stages))
}
