//! Whether anything fits at all (the fixes ask when nothing does).
use super::usable;
use crate::cost::CostModel;

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
    // reaches[i][j]: `reach(nodes[i], j)`, by two pointers (the reach never falls as j grows
    // from 1 on; a first stage may reach farther, with whole layers in a machine's RAM).
    let reaches: Vec<Vec<usize>> = nodes
        .iter()
        .map(|&k| {
            let mut e = 0;
            (0..l)
                .map(|j| {
                    if j == 1 {
                        e = 0;
                    }
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
