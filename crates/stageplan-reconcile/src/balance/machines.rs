//! What machines report of themselves (up or down, memory free) as changes to what the
//! plan assumes of them. A change that takes room away (a machine down, memory short) is
//! **forced**: safety, acted on at once and outside the hourly limit. One that gives room
//! back (a machine up again, memory free again) is **chosen**: it waits for the forced ones
//! and for `max_moves_per_hour`.

use std::collections::BTreeMap;

use super::{StageView, Watch, bytes};
use crate::spec::{Learned, Planned};

/// One machine of the scenario as the loop sees it in a pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Whether it reports itself up, if it says.
    pub up: Option<bool>,
    /// Bytes free on it now, if reported.
    pub memory_free: Option<u64>,
    /// Bytes the plan keeps free on it (the runtime's reserve).
    pub reserve: u64,
    /// Its memory, as its plan counts it.
    pub memory: u64,
    /// Bytes the loop has bound on it, for every deployment.
    pub bound: u64,
}

/// One change to what the plan assumes of a machine.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Change {
    node: String,
    fact: Fact,
    pub(super) forced: bool,
    pub(super) why: String,
}

#[derive(Copy, Clone, Debug, PartialEq)]
enum Fact {
    Down(bool),
    MemoryTaken(u64),
}

impl Watch {
    /// `changes` applied to what `planned` learned. The counts that led to them start over;
    /// those of changes left for a later pass go on.
    pub(super) fn apply(&mut self, planned: &Planned, changes: &[Change]) -> BTreeMap<String, Learned> {
        let mut learned = planned.learned.clone();
        for change in changes {
            let entry = learned.entry(change.node.clone()).or_default();
            match change.fact {
                Fact::Down(down) => {
                    entry.down = down;
                    self.status.remove(&change.node);
                }
                Fact::MemoryTaken(taken) => {
                    entry.memory_taken = taken;
                    self.returned.remove(&change.node);
                }
            }
        }
        learned.retain(|_, l| *l != Learned::default());
        learned
    }

    /// A machine that reports itself down for [`BalanceOptions::passes`] passes is taken
    /// out of the plan (forced: its stages serve nobody); one back up as long is put back.
    ///
    /// [`BalanceOptions::passes`]: crate::spec::BalanceOptions::passes
    pub(super) fn status(&mut self, planned: &Planned, nodes: &BTreeMap<String, NodeView>) -> Vec<Change> {
        let mut changes = Vec::new();
        let passes = planned.options.passes;
        for (node, view) in nodes {
            let Some(up) = view.up else { continue };
            let down = planned.learned.get(node).is_some_and(|l| l.down);
            if up != down {
                self.status.remove(node);
                continue;
            }
            let count = self.status.entry(node.clone()).or_default();
            *count = count.saturating_add(1);
            if *count < passes {
                continue;
            }
            let why = if up {
                format!("`{node}` reported up for {passes} passes: back in the plan")
            } else {
                format!("`{node}` reported down for {passes} passes: out of the plan")
            };
            changes.push(Change { node: node.clone(), fact: Fact::Down(!up), forced: !up, why });
        }
        changes
    }

    /// A machine holding stages whose free memory will be under its reserve within two
    /// passes at its current rate of loss sheds now (forced): what other work holds, two passes of that
    /// loss and half a reserve are kept out of its plan. When other work has stopped growing
    /// and the plan keeps more than one reserve above what it holds for
    /// [`BalanceOptions::passes`] passes, the rest is given back (chosen), on a machine the
    /// stages have all left too: else what one bad report took would never come back.
    ///
    /// [`BalanceOptions::passes`]: crate::spec::BalanceOptions::passes
    pub(super) fn memory(
        &mut self,
        planned: &Planned,
        stages: &[StageView<'_>],
        nodes: &BTreeMap<String, NodeView>,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for (node, view) in nodes {
            let Some(free) = view.memory_free else { continue };
            // What other work holds now: the node's memory less what is bound there and the free.
            let others = view.memory.saturating_sub(view.bound).saturating_sub(free);
            // Lost to other work since the last pass (the loop's own moves do not count).
            let loss = self.last_others.insert(node.clone(), others).map_or(0, |last| others.saturating_sub(last));
            let outlook = free.saturating_sub(loss.saturating_mul(2));
            let taken = planned.learned.get(node).map_or(0, |l| l.memory_taken);
            if outlook < view.reserve {
                self.returned.remove(node);
                let keep =
                    others.saturating_add(loss.saturating_mul(2)).saturating_add(view.reserve / 2).min(view.memory);
                if keep > taken && stages.iter().any(|s| s.node() == node) {
                    let why = format!(
                        "`{node}` had {} free (losing {} a pass), under its {} reserve soon: {} kept out of its plan",
                        bytes(free),
                        bytes(loss),
                        bytes(view.reserve),
                        bytes(keep)
                    );
                    changes.push(Change { node: node.clone(), fact: Fact::MemoryTaken(keep), forced: true, why });
                }
            } else if loss == 0 && taken > others.saturating_add(view.reserve) {
                let count = self.returned.entry(node.clone()).or_default();
                *count = count.saturating_add(1);
                if *count >= planned.options.passes {
                    let keep = if others == 0 { 0 } else { others.saturating_add(view.reserve / 2) };
                    let why = format!(
                        "`{node}` had {} free for {count} passes: {} given back to its plan",
                        bytes(free),
                        bytes(taken - keep)
                    );
                    changes.push(Change { node: node.clone(), fact: Fact::MemoryTaken(keep), forced: false, why });
                }
            } else {
                self.returned.remove(node);
            }
        }
        changes
    }
}
