//! What a drawing of a plan shows, computed from the plan: positions as percentages, texts,
//! colours. The web page's components and the `<stage-plan>` widget only lay it out, so
//! the two cannot drift; the arithmetic is tested here.

use serde::Serialize;

pub mod users;

use crate::plan::{Bound, Change, Level, MemoryBreakdown, Plan};
use crate::scenario::{Objective, Policy};
use crate::units::{format_bytes, format_seconds, sig3};

/// A node's colour, stable for its position in the cluster list.
pub fn hue(node_index: usize) -> u32 {
    // The golden angle spreads any number of hues apart.
    ((node_index as f64 * 137.508) % 360.0) as u32
}

/// One band of the stage diagram across the layer axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Band {
    pub node: String,
    pub label: String,
    pub left_pct: f64,
    pub width_pct: f64,
    pub hue: u32,
    pub bottleneck: bool,
}

/// A memory bar: the stage's parts against the node's budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct MemoryBar {
    pub node: String,
    /// Weights, KV, embed/head, workspace and reserve, in that order, then a draft model's
    /// and a vision projector's bytes where the machine holds them.
    pub segments: Vec<Segment>,
    pub used: String,
    pub budget: String,
    pub headroom: String,
    pub over: bool,
}

/// One part of a memory bar.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Segment {
    pub part: &'static str,
    /// Percent of the bar.
    pub pct: f64,
    pub bytes: String,
}

/// A baseline on the same axis as the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct BaselineRow {
    pub policy: &'static str,
    pub figure: String,
    /// Bar length, percent of the best of all rows (ours included).
    pub pct: f64,
    pub feasible: bool,
}

/// A note of the plan, with its fix as a button where the fix is a change to make.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Note {
    pub level: Level,
    pub message: String,
    pub fix: Option<String>,
    /// The button's words and the change it applies.
    pub action: Option<(String, Change)>,
}

/// A fix's button, in the page's words (the note says it in the CLI's).
pub fn change_label(change: &Change) -> String {
    match change {
        Change::Weights(w) => format!("Use {w} weights"),
        Change::Context(c) => format!("Use a {}-token context", crate::units::group_digits(*c)),
        Change::Kv(k) => format!("Use a {k} KV cache"),
        Change::CopyNode(n) => format!("Add another {n}"),
    }
}

/// A stage as the stage table shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct StageRow {
    pub node: String,
    /// `0–37`: the stage's `[start, end)`.
    pub layers: String,
    /// Time per decode step, `29.1 ms`.
    pub time: String,
    /// `memory-bound` or `compute-bound`.
    pub bound: &'static str,
    /// What the machine keeps in its system RAM (`experts of layers 0–20`), if anything.
    pub ram: Option<String>,
}

/// Everything the plan view shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct PlanView {
    pub feasible: bool,
    /// The model as planned: `llama-3.1-70b · q4_k_m`.
    pub model: String,
    /// One row per stage, beside its band and bar.
    pub rows: Vec<StageRow>,
    pub bands: Vec<Band>,
    pub bars: Vec<MemoryBar>,
    /// Per stage, its machine's system RAM when it has one (beside `bars`, the GPU's).
    pub ram_bars: Vec<Option<MemoryBar>>,
    /// The core's verdict: fits, one user's speed, time to first token.
    pub headline: String,
    /// The verdict's further lines: throughput with its concurrency, prefill, context, memory.
    pub details: Vec<String>,
    pub baselines: Vec<BaselineRow>,
    /// The fastest baseline that fits: the best split other tools make here.
    pub best_other: Option<BaselineRow>,
    /// This plan on the baselines' axis (tok/s, or time per token for latency).
    pub ours_figure: String,
    pub ours_pct: f64,
    pub left_out: Vec<String>,
    /// Each stage's machine figures (bandwidth · compute); filled by the page's planning.
    pub figures: Vec<String>,
    pub notes: Vec<Note>,
    pub search: String,
}

/// A memory's parts as a bar against its budget.
fn memory_bar(node: &str, m: &MemoryBreakdown) -> MemoryBar {
    let scale = 100.0 / (m.budget.max(m.total).max(1) as f64);
    let parts = [
        ("weights", m.weights),
        ("kv", m.kv),
        ("embed/head", m.embed_head),
        ("workspace", m.workspace),
        ("reserve", m.reserve),
        // A draft model and a vision projector on this machine: a segment only where there are.
        ("draft/mmproj", m.riders),
    ];
    MemoryBar {
        node: node.to_owned(),
        segments: parts
            .iter()
            .filter(|&&(part, bytes)| bytes > 0 || part != "draft/mmproj")
            .map(|&(part, bytes)| Segment { part, pct: bytes as f64 * scale, bytes: format_bytes(bytes as f64) })
            .collect(),
        used: format_bytes(m.total as f64),
        budget: format_bytes(m.budget as f64),
        headroom: if m.headroom >= 0 {
            format!("{} free", format_bytes(m.headroom as f64))
        } else {
            format!("{} over", format_bytes(m.total.saturating_sub(m.budget) as f64))
        },
        over: m.headroom < 0,
    }
}

/// Lays out `plan`; `node_index` gives each node's position in the cluster (its colour).
pub fn plan_view(plan: &Plan, layers: usize, node_index: &dyn Fn(&str) -> usize) -> PlanView {
    let layers = layers.max(1) as f64;
    let bands = plan
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| Band {
            node: s.node.clone(),
            label: format!("{} · {}–{}", s.label(), s.layers[0], s.layers[1]),
            left_pct: s.layers[0] as f64 * 100.0 / layers,
            width_pct: (s.layers[1] - s.layers[0]) as f64 * 100.0 / layers,
            hue: hue(node_index(&s.node)),
            bottleneck: plan.bottleneck == Some(i) && plan.stages.len() > 1,
        })
        .collect();
    let bars = plan.stages.iter().map(|s| memory_bar(&s.node, &s.memory)).collect();
    let ram_bars = plan.stages.iter().map(|s| s.offload.as_ref().map(|o| memory_bar(&s.node, &o.memory))).collect();
    let verdict = crate::verdict::Verdict::of(plan);
    let (headline, details) = (verdict.headline(), verdict.details());
    // Baselines on one axis: tokens/s (longer is better) or latency inverted (shorter is
    // better, so the bar shows speed: 1 / latency).
    let speed = |tokens: f64, latency: Option<f64>, feasible: bool| -> f64 {
        if !feasible {
            return 0.0;
        }
        match plan.objective {
            Objective::Throughput => tokens,
            Objective::Latency => latency.map_or(0.0, |l| 1.0 / l),
        }
    };
    let ours = speed(plan.tokens_per_s, plan.latency_s, plan.feasible);
    let best =
        plan.baselines.iter().map(|b| speed(b.tokens_per_s, b.latency_s, b.feasible)).fold(ours, f64::max).max(1e-300);
    let figure = |tokens: f64, latency: Option<f64>| match plan.objective {
        Objective::Throughput => format!("{} tok/s", sig3(tokens)),
        Objective::Latency => latency.map_or_else(|| "–".into(), |l| format!("{} per token", format_seconds(l))),
    };
    let baselines: Vec<BaselineRow> = plan
        .baselines
        .iter()
        .map(|b| BaselineRow {
            policy: policy_name(b.policy),
            figure: if b.feasible {
                figure(b.tokens_per_s, b.latency_s)
            } else {
                b.problem.clone().unwrap_or_else(|| "does not fit".into())
            },
            pct: speed(b.tokens_per_s, b.latency_s, b.feasible) * 100.0 / best,
            feasible: b.feasible,
        })
        .collect();
    let rows = plan
        .stages
        .iter()
        .map(|s| StageRow {
            node: s.label(),
            layers: format!("{}–{}", s.layers[0], s.layers[1]),
            time: format_seconds(s.time_s),
            bound: bound_word(s.time.bound),
            ram: s.offload.as_ref().map(|o| o.kept().unwrap_or_else(|| "the token embedding".to_owned())),
        })
        .collect();
    let best_other = baselines.iter().filter(|b| b.feasible).max_by(|a, b| a.pct.total_cmp(&b.pct)).cloned();
    PlanView {
        feasible: plan.feasible,
        model: format!("{} · {}", plan.model.name, plan.model.weights),
        rows,
        best_other,
        bands,
        bars,
        ram_bars,
        headline,
        details,
        baselines,
        ours_figure: if plan.feasible { figure(plan.tokens_per_s, plan.latency_s) } else { "does not fit".into() },
        ours_pct: ours * 100.0 / best,
        left_out: plan.left_out.iter().map(|l| l.reason.clone()).collect(),
        figures: Vec::new(),
        notes: plan
            .diagnostics
            .iter()
            .map(|d| Note {
                level: d.level,
                message: d.message.clone(),
                fix: d.fix.clone(),
                action: d.change.as_ref().map(|c| (change_label(c), c.clone())),
            })
            .collect(),
        search: plan.search.detail.clone(),
    }
}

/// The bound a stage's time comes from, as a word.
pub fn bound_word(bound: Bound) -> &'static str {
    match bound {
        Bound::Memory => "memory-bound",
        Bound::Compute => "compute-bound",
    }
}

/// A core message split into prose and code: the core writes field names and values
/// between backticks (as the terminal shows them); the page sets those as code, not as
/// literal backticks. `true` marks code. An unpaired backtick stays as it is.
pub fn code_spans(text: &str) -> Vec<(bool, String)> {
    let parts: Vec<&str> = text.split('`').collect();
    if parts.len().is_multiple_of(2) {
        return vec![(false, text.to_owned())];
    }
    parts.iter().enumerate().filter(|(_, p)| !p.is_empty()).map(|(i, p)| (i % 2 == 1, (*p).to_owned())).collect()
}

fn policy_name(policy: Policy) -> &'static str {
    policy.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #18, point 10: notes showed the core's backticks literally.
    #[test]
    fn backticked_names_become_code() {
        let spans = code_spans("set `model.weights` to `q4_k_m`");
        assert_eq!(
            spans,
            [(false, "set ".into()), (true, "model.weights".into()), (false, " to ".into()), (true, "q4_k_m".into())]
        );
        assert_eq!(code_spans("a ` b"), [(false, "a ` b".into())]);
        assert_eq!(code_spans("plain"), [(false, "plain".into())]);
    }

    fn view() -> (Plan, PlanView) {
        let scenario = crate::Scenario::from_json(include_str!("../../../tests/scenarios/home-70b.json")).unwrap();
        let problem = scenario.problem().unwrap();
        let plan = crate::plan(&problem);
        let index = |name: &str| problem.nodes.iter().position(|n| n.name == name).unwrap_or(0);
        let view = plan_view(&plan, problem.model.num_layers(), &index);
        (plan, view)
    }

    #[test]
    fn bands_tile_the_layer_axis() {
        let (plan, view) = view();
        assert_eq!(view.bands.len(), plan.stages.len());
        let total: f64 = view.bands.iter().map(|b| b.width_pct).sum();
        assert!((total - 100.0).abs() < 1e-9);
        for pair in view.bands.windows(2) {
            assert!((pair[0].left_pct + pair[0].width_pct - pair[1].left_pct).abs() < 1e-9);
        }
        assert_eq!(view.bands.iter().filter(|b| b.bottleneck).count(), usize::from(plan.stages.len() > 1));
    }

    #[test]
    fn memory_bars_stay_within_their_track_unless_over() {
        let (_, view) = view();
        for bar in &view.bars {
            let filled: f64 = bar.segments.iter().map(|s| s.pct).sum();
            assert!(filled <= 100.0 + 1e-9, "{bar:?}");
            assert!(!bar.over);
        }
    }

    #[test]
    fn baselines_share_the_axis_and_ours_is_longest() {
        let (_, view) = view();
        assert!((view.ours_pct - 100.0).abs() < 1e-9, "the optimal plan is the best row");
        assert!(view.baselines.iter().all(|b| b.pct <= 100.0 + 1e-9));
        assert_eq!(view.baselines.len(), 3);
    }

    #[test]
    fn colours_differ_between_neighbours() {
        let hues: Vec<u32> = (0..8).map(hue).collect();
        for pair in hues.windows(2) {
            assert!(pair[0].abs_diff(pair[1]) > 40);
        }
    }
}
