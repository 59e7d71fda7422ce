//! Closing the loop: notice from measurements that a planned deployment's split no longer
//! suits its machines, and say what the planner must be told.
//!
//! Each pass, per stage, the loop compares the **measured** step time with the
//! **prediction** the plan made for it, as `ln(measured ÷ predicted)`. **Skew** is a stage's
//! ratio against the median stage's: a pipeline that runs 20% slower everywhere (the cost
//! model's error, a busy night) keeps its best split, while one machine running 2× its
//! prediction does not. A stage is skewed when its skew passes the threshold, which is the
//! larger of its machine's tier threshold ([`Tier::skew`]) and four times the median
//! absolute deviation of its recent skews (re-tuned from history: a noisy machine must
//! move further before it counts). The loop acts when a stage has been skewed for
//! [`BalanceOptions::passes`] passes in a row, in the same direction (hysteresis).
//!
//! **Acting** refits: each measured machine's [`Learned::slowdown`] becomes its measured
//! ÷ planned time (the median of the last passes), and the controller re-plans with the
//! fewest-moves search. **Memory** does not wait for skew: when a node's free memory falls
//! under the reserve its plan keeps free, the deficit (and half a reserve more, so a steady
//! leak is not chased byte by byte) is counted as taken and the stages on it shrink at
//! once; when the memory has stayed free for as many passes, it is given back. A machine
//! down or short of memory forces a move; the rest waits for it and for the hourly limit
//! (see [`machines`]).
//!
//! Nothing here does I/O or keeps time: the controller passes measurements in, keeps a
//! [`Watch`] per deployment, and persists what the loop learned in the deployment's record.

use std::collections::{BTreeMap, VecDeque};

use stageplan::Problem;
use stageplan::device::DeviceKind;

use crate::spec::{BalanceOptions, Learned, Planned, SLOWDOWN, StageRequest};

pub mod machines;
#[cfg(test)]
mod tests;

pub use machines::NodeView;

/// Skews remembered per stage, for the threshold's re-tuning.
const HISTORY: usize = 20;
/// Skews needed before the history re-tunes the threshold.
const HISTORY_MIN: usize = 5;
/// A learned slowdown this close to 1 is noise, and is forgotten.
const NOISE: f64 = 0.03;

/// What kind of machine a stage runs on, which sets how much skew it tolerates.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tier {
    /// A GPU, or unified memory: steady timings; act at 1.25×.
    Gpu,
    /// A CPU: timings swing with other work and turbo; act at 1.4×.
    Cpu,
}

impl Tier {
    /// The tier of a machine kind (unknown kinds count as GPUs: the stricter tier).
    pub fn of(kind: Option<DeviceKind>) -> Tier {
        match kind {
            Some(DeviceKind::Cpu) => Tier::Cpu,
            _ => Tier::Gpu,
        }
    }

    /// The least skew (as a factor, above 1) that counts on this tier.
    pub fn skew(self) -> f64 {
        match self {
            Tier::Gpu => 1.25,
            Tier::Cpu => 1.4,
        }
    }
}

/// One stage as the loop sees it in a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct StageView<'a> {
    pub request: &'a StageRequest,
    pub tier: Tier,
    /// Measured seconds per step (the median over the replicas that report it).
    pub measured_s: Option<f64>,
}

impl StageView<'_> {
    fn node(&self) -> &str {
        self.request.node.as_deref().unwrap_or_default()
    }
}

/// What a pass concluded for one deployment.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// The split suits the machines (or there is too little to tell).
    Hold,
    /// Re-plan with `learned`; `why` says what was measured, `forced` when a machine is
    /// down or short of memory (not held back by the hourly limit, nor counted by it).
    Replan { learned: BTreeMap<String, Learned>, why: String, forced: bool },
}

/// What the loop remembers about one deployment between passes. It starts over when the
/// deployment's predictions change (a re-balance, a new deploy).
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// The predictions watched: per stage `(node, predicted step)`.
    watched: Vec<(String, f64)>,
    /// Per stage: recent `ln(measured ÷ predicted)`, newest last.
    ratios: Vec<VecDeque<f64>>,
    /// Per stage: recent skews, newest last.
    skews: Vec<VecDeque<f64>>,
    /// Per stage: passes in a row skewed (positive: slower, negative: faster).
    streaks: Vec<i64>,
    /// Per node with memory taken: passes in a row the memory was free again.
    returned: BTreeMap<String, u32>,
    /// Per node: what other work held at the last pass, for its rate of growth (kept
    /// across resets).
    last_others: BTreeMap<String, u64>,
    /// Per node: passes in a row it reported the opposite of what the plan assumes (down
    /// while planned on, up while planned off); kept across resets.
    status: BTreeMap<String, u32>,
}

fn push(history: &mut VecDeque<f64>, value: f64) {
    if history.len() == HISTORY {
        history.pop_front();
    }
    history.push_back(value);
}

/// The lower median (of an even count, the smaller middle value), or `None` when empty.
fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[(v.len() - 1) / 2])
}

/// The median (of an even count, the mean of the middle two), or `None` when empty.
fn mid(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| (v[(n - 1) / 2] + v[n / 2]) / 2.0)
}

/// The ratio stages are compared with: the median stage's, or of an even count the middle
/// one nearer its prediction (of two stages, 2× and 1× name the slow one, not both); a
/// pipeline with one measured stage is compared with its prediction.
fn reference(ratios: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = ratios.into_iter().collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 | 1 => 0.0,
        n => {
            let (low, high) = (v[(n - 1) / 2], v[n / 2]);
            if low.abs() <= high.abs() { low } else { high }
        }
    }
}

/// Bytes shown to people: GiB with one decimal, or MiB under one GiB.
fn bytes(b: u64) -> String {
    if b >= 1 << 30 { format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)) } else { format!("{} MiB", b >> 20) }
}

impl Watch {
    /// The skew threshold of stage `s`, as a natural log: its tier's, or four median
    /// absolute deviations of its recent skews when that is wider.
    fn threshold(&self, s: usize, tier: Tier) -> f64 {
        let floor = tier.skew().ln();
        let history = &self.skews[s];
        if history.len() < HISTORY_MIN {
            return floor;
        }
        let centre = mid(history.iter().copied()).unwrap_or(0.0);
        let mad = mid(history.iter().map(|x| (x - centre).abs())).unwrap_or(0.0);
        floor.max(4.0 * mad)
    }

    /// Takes one pass's measurements of a deployment at `now_ms` and decides; `nodes` are
    /// the scenario's machines as they report themselves.
    pub fn observe(
        &mut self,
        planned: &Planned,
        stages: &[StageView<'_>],
        nodes: &BTreeMap<String, NodeView>,
        now_ms: u64,
    ) -> Decision {
        let watched: Vec<(String, f64)> =
            stages.iter().zip(&planned.predicted).map(|(s, p)| (s.node().to_owned(), p.step_s)).collect();
        if watched != self.watched {
            *self = Watch {
                ratios: vec![VecDeque::new(); stages.len()],
                skews: vec![VecDeque::new(); stages.len()],
                streaks: vec![0; stages.len()],
                watched,
                returned: BTreeMap::new(),
                last_others: std::mem::take(&mut self.last_others),
                status: std::mem::take(&mut self.status),
            };
        }
        let mut changes = self.status(planned, nodes);
        changes.extend(self.memory(planned, stages, nodes));
        // Forced changes act alone, so a chosen one the hourly limit holds never holds them.
        let forced = changes.iter().any(|c| c.forced);
        changes.retain(|c| c.forced == forced);
        if !changes.is_empty() {
            let learned = self.apply(planned, &changes);
            let why = changes.iter().map(|c| c.why.as_str()).collect::<Vec<_>>().join("; ");
            return Decision::Replan { learned, why, forced };
        }
        if let Some(decision) = retry(planned, stages, now_ms) {
            return decision;
        }
        self.speed(planned, stages, planned.options)
    }

    /// Speed: skewed stages, held for enough passes, refit every measured machine.
    fn speed(&mut self, planned: &Planned, stages: &[StageView<'_>], options: BalanceOptions) -> Decision {
        let ratios: Vec<Option<f64>> = stages
            .iter()
            .zip(&planned.predicted)
            .map(|(s, p)| s.measured_s.filter(|m| m.is_finite() && *m > 0.0).map(|m| (m / p.step_s).ln()))
            .collect();
        // Against the other stages; a pipeline with one measured stage is compared with its
        // prediction.
        let reference = reference(ratios.iter().flatten().copied());
        let mut acting = None;
        for (s, ratio) in ratios.iter().enumerate() {
            let Some(ratio) = *ratio else {
                self.streaks[s] = 0;
                continue;
            };
            push(&mut self.ratios[s], ratio);
            let skew = ratio - reference;
            let threshold = self.threshold(s, stages[s].tier);
            push(&mut self.skews[s], skew);
            self.streaks[s] = match self.streaks[s] {
                n if skew > threshold => n.max(0) + 1,
                n if skew < -threshold => n.min(0) - 1,
                _ => 0,
            };
            if self.streaks[s].unsigned_abs() >= u64::from(options.passes)
                && acting.is_none_or(|(_, worst): (usize, f64)| skew.abs() > worst.abs())
            {
                acting = Some((s, skew));
            }
        }
        let Some((s, skew)) = acting else { return Decision::Hold };
        let mut learned = planned.learned.clone();
        let recent = options.passes as usize;
        let mut refit: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for (stage, history) in stages.iter().zip(&self.ratios) {
            if let Some(m) = median(history.iter().rev().take(recent).copied()) {
                refit.entry(stage.node()).or_default().push(m);
            }
        }
        for (node, ratios) in refit {
            let ratio = median(ratios).unwrap_or(0.0).exp();
            let entry = learned.entry(node.to_owned()).or_default();
            entry.slowdown = (entry.slowdown * ratio).clamp(*SLOWDOWN.start(), *SLOWDOWN.end());
            // Within the noise of a measurement, a machine is as its figures say.
            if (entry.slowdown - 1.0).abs() < NOISE {
                entry.slowdown = 1.0;
            }
        }
        learned.retain(|_, l| *l != Learned::default());
        let streak = self.streaks[s].unsigned_abs();
        let why = format!(
            "stage {s} on `{}` ran {:.2}× its prediction against the other stages for {streak} passes",
            stages[s].node(),
            skew.exp()
        );
        Decision::Replan { learned, why, forced: false }
    }
}

/// Machines learned slow that hold no stage, once [`BalanceOptions::retry_after_s`] has
/// passed since the last re-balance: their slowdown is forgotten so the plan may try them
/// again (nothing else would measure them; a machine still slow is moved off again, within
/// the hourly limit).
fn retry(planned: &Planned, stages: &[StageView<'_>], now_ms: u64) -> Option<Decision> {
    let last = planned.events.last().map_or(0, |e| e.at_ms);
    if now_ms < last.saturating_add(planned.options.retry_after_s.saturating_mul(1000)) {
        return None;
    }
    let mut learned = planned.learned.clone();
    let mut forgotten = Vec::new();
    for (node, l) in &mut learned {
        if l.slowdown > 1.0 && !stages.iter().any(|s| s.node() == node) {
            forgotten.push(format!("`{node}` ({:.2}×)", l.slowdown));
            l.slowdown = 1.0;
        }
    }
    if forgotten.is_empty() {
        return None;
    }
    learned.retain(|_, l| *l != Learned::default());
    let minutes = planned.options.retry_after_s / 60;
    let why = format!("{} ran nothing for {minutes} min: slowdown forgotten, to measure again", forgotten.join(", "));
    Some(Decision::Replan { learned, why, forced: false })
}

/// `problem` with what was learned applied: a machine `slowdown`× slower reaches that
/// fraction of its figures' bandwidth and compute, and memory other work holds is not the
/// plan's to use.
pub fn with_learned(problem: &Problem, learned: &BTreeMap<String, Learned>) -> Problem {
    let mut problem = problem.clone();
    for node in &mut problem.nodes {
        // What the loop learns is a cluster node's, so a machine's: each of its GPUs' too.
        let machine = node.gpu_of.as_ref().map_or(node.name.as_str(), |g| g.machine.as_str());
        if let Some(l) = learned.get(machine) {
            node.efficiency.bandwidth /= l.slowdown;
            node.efficiency.compute /= l.slowdown;
            node.memory = node.memory.saturating_sub(l.memory_taken);
            if l.down {
                // Nothing fits on a machine that is down.
                node.memory = 0;
            }
        }
    }
    problem
}
