//! What the exact search and the fixed-order search share: relaxing one node's stage over
//! every start and end in `O(L)` with a sliding-window minimum, and a last stage's costs.

use std::collections::VecDeque;

use crate::cost::{CostModel, Regime};

/// What closing a stage adds to its roofline (the hop to the next stage) and the most its
/// roofline may take (a cap on stage time, less that hop).
#[derive(Copy, Clone)]
pub(super) struct Closing {
    pub(super) hop: f64,
    pub(super) limit: f64,
}

impl Closing {
    pub(super) fn new(hop: f64, cap: f64) -> Closing {
        Closing { hop, limit: cap - hop }
    }
}

/// For node `k` and arrival costs `row[j]` (stages before it cover `[0, j)`), the least
/// `row[j] + roofline(k, j, e) + hop` for every end `e < L`, as `(e, value, argmin j)`,
/// among stages whose roofline is at most `limit` (a cap on stage time, less the hop).
/// `first` marks the first stage (start 0 only).
pub(super) fn relax(
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
pub(super) struct FinalCosts {
    pub(super) with_return: Vec<f64>,
    pub(super) fits_from: usize,
    pub(super) single: f64,
}

impl FinalCosts {
    pub(super) fn new(cost: &CostModel, k: usize, ret: f64, cap: f64) -> FinalCosts {
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
