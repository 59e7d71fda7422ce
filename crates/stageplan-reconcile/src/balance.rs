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
//! once; when the memory has stayed free for as many passes, it is given back.
//!
//! Nothing here does I/O or keeps time: the controller passes measurements in, keeps a
//! [`Watch`] per deployment, and persists what the loop learned in the deployment's record.

use std::collections::{BTreeMap, VecDeque};

use stageplan::Problem;
use stageplan::device::DeviceKind;

use crate::spec::{BalanceOptions, Learned, Planned, StageRequest};

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
    /// Bytes free on the stage's node now, if reported.
    pub memory_free: Option<u64>,
    /// Bytes the plan keeps free on the node (the runtime's reserve).
    pub reserve: u64,
    /// The node's memory, as its plan counts it.
    pub node_memory: u64,
    /// Bytes the loop has bound on the node, for every deployment.
    pub node_bound: u64,
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
    /// Re-plan with `learned`; `why` says what was measured, `urgent` when memory runs
    /// short (not held back by the hourly limit).
    Replan { learned: BTreeMap<String, Learned>, why: String, urgent: bool },
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

    /// Takes one pass's measurements of a deployment at `now_ms` and decides; `up` says
    /// which of the scenario's machines report themselves up or down.
    pub fn observe(
        &mut self,
        planned: &Planned,
        stages: &[StageView<'_>],
        up: &BTreeMap<String, bool>,
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
        if let Some(decision) = self.status(planned, up) {
            return decision;
        }
        if let Some(decision) = self.memory(planned, stages) {
            return decision;
        }
        if let Some(decision) = retry(planned, stages, now_ms) {
            return decision;
        }
        self.speed(planned, stages, planned.options)
    }

    /// A machine that reports itself down for [`BalanceOptions::passes`] passes is taken
    /// out of the plan at once (its stages serve nobody); one back up as long is put back.
    fn status(&mut self, planned: &Planned, up: &BTreeMap<String, bool>) -> Option<Decision> {
        let mut learned = planned.learned.clone();
        let mut why = Vec::new();
        let mut urgent = false;
        for (node, &is_up) in up {
            let down = learned.get(node).is_some_and(|l| l.down);
            if is_up != down {
                self.status.remove(node);
                continue;
            }
            let passes = self.status.entry(node.clone()).or_default();
            *passes += 1;
            if *passes < planned.options.passes {
                continue;
            }
            self.status.remove(node);
            learned.entry(node.clone()).or_default().down = !is_up;
            if is_up {
                why.push(format!("`{node}` reported up for {} passes: back in the plan", planned.options.passes));
            } else {
                urgent = true;
                why.push(format!("`{node}` reported down for {} passes: out of the plan", planned.options.passes));
            }
        }
        learned.retain(|_, l| *l != Learned::default());
        (!why.is_empty()).then(|| Decision::Replan { learned, why: why.join("; "), urgent })
    }

    /// Memory first. A node whose free memory will be under its reserve within two passes
    /// at its current rate of loss sheds now: what other work holds, two passes of that
    /// loss and half a reserve are kept out of its plan. When other work has stopped growing
    /// and the plan keeps more than one reserve above what it holds for
    /// [`BalanceOptions::passes`] passes, the rest is given back.
    fn memory(&mut self, planned: &Planned, stages: &[StageView<'_>]) -> Option<Decision> {
        let mut learned = planned.learned.clone();
        let mut why = Vec::new();
        let mut urgent = false;
        let mut seen = Vec::new();
        for stage in stages {
            let (node, Some(free)) = (stage.node(), stage.memory_free) else { continue };
            if seen.contains(&node) {
                continue;
            }
            seen.push(node);
            // What other work holds now: the node's memory less what is bound there and the free.
            let others = stage.node_memory.saturating_sub(stage.node_bound).saturating_sub(free);
            // Lost to other work since the last pass (the loop's own moves do not count).
            let loss = self.last_others.insert(node.to_owned(), others).map_or(0, |last| others.saturating_sub(last));
            let outlook = free.saturating_sub(loss.saturating_mul(2));
            let entry = learned.entry(node.to_owned()).or_default();
            if outlook < stage.reserve {
                let keep = others.saturating_add(loss.saturating_mul(2)).saturating_add(stage.reserve / 2);
                self.returned.remove(node);
                if keep > entry.memory_taken {
                    entry.memory_taken = keep.min(stage.node_memory);
                    urgent = true;
                    why.push(format!(
                        "`{node}` had {} free (losing {} a pass), under its {} reserve soon: {} kept out of its plan",
                        bytes(free),
                        bytes(loss),
                        bytes(stage.reserve),
                        bytes(entry.memory_taken)
                    ));
                }
            } else if loss == 0 && entry.memory_taken > others.saturating_add(stage.reserve) {
                let passes = self.returned.entry(node.to_owned()).or_default();
                *passes += 1;
                if *passes >= planned.options.passes {
                    let keep = if others == 0 { 0 } else { others.saturating_add(stage.reserve / 2) };
                    why.push(format!(
                        "`{node}` had {} free for {passes} passes: {} given back to its plan",
                        bytes(free),
                        bytes(entry.memory_taken - keep)
                    ));
                    entry.memory_taken = keep;
                    self.returned.remove(node);
                }
            } else {
                self.returned.remove(node);
            }
        }
        learned.retain(|_, l| *l != Learned::default());
        (!why.is_empty()).then(|| Decision::Replan { learned, why: why.join("; "), urgent })
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
            entry.slowdown = (entry.slowdown * ratio).clamp(0.01, 100.0);
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
        Decision::Replan { learned, why, urgent: false }
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
    Some(Decision::Replan { learned, why, urgent: false })
}

/// `problem` with what was learned applied: a machine `slowdown`× slower reaches that
/// fraction of its figures' bandwidth and compute, and memory other work holds is not the
/// plan's to use.
pub fn with_learned(problem: &Problem, learned: &BTreeMap<String, Learned>) -> Problem {
    let mut problem = problem.clone();
    for node in &mut problem.nodes {
        if let Some(l) = learned.get(&node.name) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Predicted;

    fn planned(steps: &[f64]) -> Planned {
        let scenario = stageplan::Scenario::from_json(
            r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#,
        )
        .unwrap();
        Planned {
            scenario,
            predicted: steps.iter().map(|&step_s| Predicted { step_s, hop_s: 0.0 }).collect(),
            learned: BTreeMap::new(),
            options: BalanceOptions::default(),
            events: Vec::new(),
        }
    }

    fn requests(nodes: &[&str]) -> Vec<StageRequest> {
        nodes
            .iter()
            .map(|n| StageRequest { layers: [0, 1], memory: 4 << 30, gpus: 0, node: Some((*n).to_owned()) })
            .collect()
    }

    fn views<'a>(requests: &'a [StageRequest], measured: &[f64], free: &[Option<u64>]) -> Vec<StageView<'a>> {
        requests
            .iter()
            .zip(measured)
            .zip(free)
            .map(|((request, &m), &memory_free)| StageView {
                request,
                tier: Tier::Gpu,
                measured_s: Some(m),
                memory_free,
                reserve: 1 << 30,
                node_memory: 8 << 30,
                node_bound: request.memory,
            })
            .collect()
    }

    impl Watch {
        fn observe_at0(&mut self, planned: &Planned, stages: &[StageView<'_>]) -> Decision {
            self.observe(planned, stages, &BTreeMap::new(), 0)
        }
    }

    #[test]
    fn a_uniformly_slower_pipeline_is_not_skewed() {
        let planned = planned(&[0.01, 0.01, 0.01]);
        let requests = requests(&["a", "b", "c"]);
        let mut watch = Watch::default();
        for _ in 0..10 {
            let decision = watch.observe_at0(&planned, &views(&requests, &[0.02, 0.021, 0.019], &[None; 3]));
            assert_eq!(decision, Decision::Hold);
        }
    }

    #[test]
    fn a_slow_stage_acts_after_the_passes_and_refits_every_measured_machine() {
        let planned = planned(&[0.01, 0.01, 0.01]);
        let requests = requests(&["a", "b", "c"]);
        let mut watch = Watch::default();
        for _ in 0..2 {
            assert_eq!(watch.observe_at0(&planned, &views(&requests, &[0.01, 0.02, 0.01], &[None; 3])), Decision::Hold);
        }
        let Decision::Replan { learned, why, urgent } =
            watch.observe_at0(&planned, &views(&requests, &[0.01, 0.02, 0.01], &[None; 3]))
        else {
            panic!("three skewed passes must act")
        };
        assert!(!urgent);
        assert!(why.starts_with("stage 1 on `b` ran 2.00× its prediction"), "{why}");
        assert!((learned["b"].slowdown - 2.0).abs() < 1e-9);
        assert!(!learned.contains_key("a"), "a machine as fast as planned learns nothing");
    }

    #[test]
    fn a_pass_back_in_line_restarts_the_count() {
        let planned = planned(&[0.01, 0.01]);
        let requests = requests(&["a", "b"]);
        let mut watch = Watch::default();
        for measured in [[0.01, 0.02], [0.01, 0.02], [0.01, 0.0101], [0.01, 0.02], [0.01, 0.02]] {
            assert_eq!(watch.observe_at0(&planned, &views(&requests, &measured, &[None; 2])), Decision::Hold);
        }
    }

    #[test]
    fn a_noisy_history_raises_the_threshold() {
        let planned = planned(&[0.01, 0.01]);
        let requests = requests(&["a", "b"]);
        let mut watch = Watch::default();
        // Swings of ±25% every pass: 1.3× for three passes is within this stage's noise.
        for i in 0..12 {
            let b = if i % 2 == 0 { 0.0125 } else { 0.0075 };
            watch.observe_at0(&planned, &views(&requests, &[0.01, b], &[None; 2]));
        }
        assert!(watch.threshold(1, Tier::Gpu) > 1.3f64.ln(), "{}", watch.threshold(1, Tier::Gpu).exp());
        for _ in 0..3 {
            assert_eq!(watch.observe_at0(&planned, &views(&requests, &[0.01, 0.013], &[None; 2])), Decision::Hold);
        }
    }

    #[test]
    fn a_machine_down_for_the_passes_leaves_the_plan_and_comes_back() {
        let mut planned = planned(&[0.01, 0.01]);
        let requests = requests(&["a", "b"]);
        let mut watch = Watch::default();
        let views = views(&requests, &[0.01, 0.01], &[None; 2]);
        let down: BTreeMap<String, bool> = [("b".to_owned(), false)].into();
        for _ in 0..2 {
            assert_eq!(watch.observe(&planned, &views, &down, 0), Decision::Hold);
        }
        let Decision::Replan { learned, why, urgent } = watch.observe(&planned, &views, &down, 0) else {
            panic!("down for three passes")
        };
        assert!(urgent && learned["b"].down, "{why}");
        assert_eq!(why, "`b` reported down for 3 passes: out of the plan");
        planned.learned = learned;
        let up: BTreeMap<String, bool> = [("b".to_owned(), true)].into();
        for _ in 0..2 {
            assert_eq!(watch.observe(&planned, &views, &up, 0), Decision::Hold);
        }
        let Decision::Replan { learned, .. } = watch.observe(&planned, &views, &up, 0) else { panic!("back up") };
        assert!(learned.is_empty());
    }

    #[test]
    fn memory_running_out_sheds_at_once_and_comes_back_after_the_passes() {
        let mut planned = planned(&[0.01, 0.01]);
        let requests = requests(&["a", "b"]);
        let mut watch = Watch::default();
        let gib = 1u64 << 30;
        let steps = [0.01, 0.01];
        // 8 GiB nodes with a 4 GiB stage each: `b` loses 1 GiB a pass to other work.
        assert_eq!(
            watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(4 * gib)])),
            Decision::Hold
        );
        assert_eq!(
            watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(3 * gib)])),
            Decision::Hold
        );
        let Decision::Replan { learned, why, urgent } =
            watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(2 * gib)]))
        else {
            panic!("two passes from the reserve must shed")
        };
        assert!(urgent);
        assert!(why.starts_with("`b` had 2.0 GiB free (losing 1.0 GiB a pass)"), "{why}");
        // What others hold (2 GiB), two passes of loss, half a reserve.
        assert_eq!(learned["b"].memory_taken, 2 * gib + 2 * gib + gib / 2);
        planned.learned = learned;
        // The other work exits: 4 GiB free again, and nothing held by others.
        for _ in 0..2 {
            let free = [Some(4 * gib), Some(4 * gib)];
            assert_eq!(watch.observe_at0(&planned, &views(&requests, &steps, &free)), Decision::Hold);
        }
        let Decision::Replan { learned, why, .. } =
            watch.observe_at0(&planned, &views(&requests, &steps, &[Some(4 * gib), Some(4 * gib)]))
        else {
            panic!("memory free for three passes is given back")
        };
        assert!(why.contains("4.5 GiB given back"), "{why}");
        assert!(learned.is_empty());
    }
}
