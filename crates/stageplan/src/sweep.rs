//! The same machines across weight formats and context lengths: what the page's charts and
//! its weight-format table show, each point a real plan (the search itself, without
//! baselines or explanations), never an extrapolation.

use crate::model::{Model, WeightFormat};
use crate::plan::Plan;
use crate::problem::Problem;

/// The formats the weight-format table compares: the ones people choose between, from
/// full precision to the smallest k-quant.
pub const TABLE_FORMATS: [&str; 8] = ["f16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k", "iq2_xs"];

/// One weight format on these machines.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatRow {
    pub weights: String,
    pub weight_bytes: u64,
    pub fits: bool,
    /// One user's decode speed (0 when it does not fit).
    pub tokens_per_s: f64,
    /// The longest context that split holds.
    pub max_context: Option<u64>,
    /// The problem's own format.
    pub current: bool,
}

/// One context length on these machines.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextPoint {
    pub context: u64,
    pub fits: bool,
    pub tokens_per_s: f64,
    /// Each machine's memory used and its budget at this context, for every machine some
    /// context's plan uses (`None` where this context's plan leaves it out).
    pub memory: Vec<(String, Option<(u64, u64)>)>,
}

fn plan(problem: &Problem, enabled: &[bool]) -> Plan {
    crate::plan_with(problem, crate::planner::PlanOptions::bare().enabled(enabled))
}

/// [`TABLE_FORMATS`] (and the problem's own format, if it is another) planned on the
/// enabled machines, largest first. Empty for a model read from a file, whose tensors
/// have the types the file gives.
pub fn by_weights(problem: &Problem, enabled: &[bool]) -> Vec<FormatRow> {
    let Ok(current) = problem.model.weights.parse::<WeightFormat>() else { return Vec::new() };
    let mut formats: Vec<WeightFormat> = TABLE_FORMATS.iter().filter_map(|f| f.parse().ok()).collect();
    if !formats.contains(&current) {
        formats.push(current);
    }
    let mut rows: Vec<FormatRow> = formats
        .into_iter()
        .map(|format| {
            let mut changed = problem.clone();
            changed.model = Model::from_transformer(&problem.model.name, problem.model.arch.clone(), format);
            let planned = plan(&changed, enabled);
            FormatRow {
                weights: format.to_string(),
                weight_bytes: changed.model.weight_bytes(),
                fits: planned.feasible,
                tokens_per_s: planned.stream_tokens_per_s,
                max_context: planned.max_context,
                current: format == current,
            }
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.weight_bytes));
    rows
}

/// Context lengths from 1,024 tokens doubling up to the model's maximum (or 4× the
/// problem's context when the model states none), with the problem's own, each planned.
pub fn by_context(problem: &Problem, enabled: &[bool]) -> Vec<ContextPoint> {
    let own = problem.workload.context;
    let top = problem.model.arch.max_context.unwrap_or(own.saturating_mul(4)).max(own);
    let mut contexts: Vec<u64> =
        std::iter::successors(Some(1024u64), |c| c.checked_mul(2)).take_while(|&c| c < top).collect();
    contexts.extend([own, top]);
    contexts.sort_unstable();
    contexts.dedup();
    let plans: Vec<(u64, Plan)> = contexts
        .into_iter()
        .map(|context| {
            let mut changed = problem.clone();
            changed.workload.context = context;
            changed.workload.prompt = changed.workload.prompt.min(context);
            (context, plan(&changed, enabled))
        })
        .collect();
    // Every machine some context's plan uses, in the cluster's order.
    let machines: Vec<&str> = problem
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .filter(|name| plans.iter().any(|(_, p)| p.stages.iter().any(|s| s.node == *name)))
        .collect();
    plans
        .iter()
        .map(|(context, planned)| {
            let memory = machines
                .iter()
                .map(|&node| {
                    let stage = planned.stages.iter().find(|s| s.node == node);
                    (node.to_owned(), stage.map(|s| (s.memory.total, s.memory.budget)))
                })
                .collect();
            ContextPoint {
                context: *context,
                fits: planned.feasible,
                tokens_per_s: planned.stream_tokens_per_s,
                memory,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    fn home() -> Problem {
        Scenario::from_json(include_str!("../../../tests/scenarios/home-70b.json")).unwrap().problem().unwrap()
    }

    #[test]
    fn smaller_formats_fit_more_and_run_faster() {
        let problem = home();
        let rows = by_weights(&problem, &[true; 4]);
        assert_eq!(rows.iter().filter(|r| r.current).count(), 1);
        assert!(rows.windows(2).all(|w| w[0].weight_bytes > w[1].weight_bytes));
        let f16 = rows.iter().find(|r| r.weights == "f16").unwrap();
        assert!(!f16.fits, "a 70B model in f16 needs 140 GB");
        let fitting: Vec<&FormatRow> = rows.iter().filter(|r| r.fits).collect();
        assert!(fitting.len() >= 3 && fitting[0].tokens_per_s < fitting[fitting.len() - 1].tokens_per_s, "{fitting:?}");
        let current = rows.iter().find(|r| r.current).unwrap();
        assert_eq!(
            current.tokens_per_s,
            crate::plan_with(&problem, crate::planner::PlanOptions::bare()).stream_tokens_per_s
        );
    }

    #[test]
    fn longer_contexts_cost_memory_until_nothing_fits() {
        let problem = home();
        let points = by_context(&problem, &[true; 4]);
        assert_eq!(points.first().unwrap().context, 1024);
        assert_eq!(points.last().unwrap().context, 131_072, "Llama 3.1's maximum");
        assert!(points.iter().any(|p| p.context == 8192), "the scenario's own context");
        assert!(points.first().unwrap().fits);
        // Once nothing fits, no longer context fits either; the desk alone runs out early.
        let fits: Vec<bool> = points.iter().map(|p| p.fits).collect();
        assert!(fits.windows(2).all(|w| w[0] || !w[1]), "{fits:?}");
        let desk_only = by_context(&problem, &[true, false, false, false]);
        assert!(desk_only.iter().all(|p| !p.fits), "70B q4_k_m never fits one 24 GB GPU");
        let ours = by_context(&problem, &[true, true, false, false]);
        let fits: Vec<bool> = ours.iter().map(|p| p.fits).collect();
        assert!(fits[0] && !fits[fits.len() - 1] && fits.windows(2).all(|w| w[0] || !w[1]), "{fits:?}");
        for p in points.iter().filter(|p| p.fits) {
            assert!(p.memory.iter().filter_map(|(_, m)| *m).all(|(used, budget)| used <= budget), "{p:?}");
        }
    }
}
