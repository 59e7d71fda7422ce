//! A machine with several GPUs and one system RAM (`cost::RamShare`): the division of the
//! RAM among its GPUs the plan is made with, and the note that says what each keeps there.

use super::{Choice, Policy, Problem};
use crate::cost::{CostModel, RamShare};
use crate::plan::{Diagnostic, Level, Plan, Stage};
use crate::scenario::Objective;
use crate::units::format_bytes;

/// A machine with several GPUs and system RAM: the choice of `policy` under each division
/// of the RAM among its GPUs the planner tries ([`RamShare::candidates`]), the best kept
/// with its cost model.
pub(super) fn best_share(
    problem: &Problem,
    allowed: &[bool],
    policy: Policy,
    objective: Objective,
    required: Option<usize>,
) -> (Choice, CostModel) {
    // First the relaxation, all of the RAM beside each GPU: where its choice fits the RAM
    // it is the best over every division.
    let relaxed = CostModel::with_share(problem, RamShare::Whole);
    let choice = Choice::of(problem, &relaxed, allowed, policy, objective, required);
    if choice.ruled.as_ref().unwrap_or(&relaxed).fits_shared_ram(problem, &choice.stages) {
        return (choice, relaxed);
    }
    // The best so far, and its value (`None`: a stage does not fit).
    let mut best: Option<(Choice, CostModel)> = None;
    let mut best_value: Option<f64> = None;
    for share in RamShare::candidates(problem) {
        let cost = CostModel::with_share(problem, share);
        let choice = Choice::of(problem, &cost, allowed, policy, objective, required);
        let value = choice.value(&cost, objective);
        let wins = best.is_none()
            || match (best_value, value) {
                (Some(b), Some(v)) => v < b,
                (None, Some(_)) => true,
                (_, None) => false,
            };
        if wins {
            best = Some((choice, cost));
            best_value = value;
        }
    }
    best.expect("at least one division")
}

/// Per machine with several GPUs whose stages keep tensors in its system RAM: how the RAM
/// was divided among them ([`RamShare`]), and what each stage fills of its share.
pub(super) fn notes(share: RamShare, plan: &Plan) -> Vec<Diagnostic> {
    let mut machines: Vec<&str> = Vec::new();
    for stage in &plan.stages {
        if let Some(gpu) = &stage.gpu_of
            && stage.offload.is_some()
            && !machines.contains(&gpu.machine.as_str())
        {
            machines.push(&gpu.machine);
        }
    }
    let mut out = Vec::new();
    for machine in machines {
        let on: Vec<&Stage> =
            plan.stages.iter().filter(|s| s.gpu_of.as_ref().is_some_and(|g| g.machine == machine)).collect();
        let uses = |s: &&Stage| s.offload.as_ref().is_some_and(|o| o.host_layers + o.host_ffn > 0);
        if on.len() < 2 || !on.iter().any(uses) {
            continue;
        }
        let how = match share {
            RamShare::Whole => {
                let held: u64 =
                    on.iter().filter_map(|s| s.offload.as_ref()).map(|o| o.memory.total - o.memory.reserve).sum();
                let parts: Vec<String> = on
                    .iter()
                    .filter_map(|s| {
                        Some(format!("`{}` {}", s.label(), format_bytes(s.offload.as_ref()?.memory.weights as f64)))
                    })
                    .collect();
                out.push(Diagnostic {
                    level: Level::Info,
                    message: format!(
                        "`{machine}`'s system RAM holds what each of its GPUs' stages keeps there, {} in all (weights: {})",
                        format_bytes(held as f64),
                        parts.join(", ")
                    ),
                    fix: None,
                    change: None,
                });
                continue;
            }
            RamShare::Even => "evenly".to_owned(),
            RamShare::ByMemory => "by GPU memory".to_owned(),
            RamShare::All(j) => format!("all of it to `{machine}/gpu{j}`"),
        };
        let parts: Vec<String> = on
            .iter()
            .filter_map(|s| {
                let m = &s.offload.as_ref()?.memory;
                Some(format!("`{}` {} of {}", s.label(), format_bytes(m.total as f64), format_bytes(m.budget as f64)))
            })
            .collect();
        out.push(Diagnostic {
            level: Level::Info,
            message: format!(
                "`{machine}`'s system RAM is divided among its GPUs' stages {how} (the best of an even division, one by GPU memory, and all of it to one GPU): {}",
                parts.join(", ")
            ),
            fix: None,
            change: None,
        });
    }
    out
}

/// Under [`RamShare::Whole`] each stage's RAM budget is its machine's less what the
/// machine's other stages keep there, so that its headroom is what the machine has free.
pub(super) fn machine_budgets(stages: &mut [Stage]) {
    let kept: Vec<(Option<String>, u64)> = stages
        .iter()
        .map(|s| {
            let held = s.offload.as_ref().map_or(0, |o| o.memory.total.saturating_sub(o.memory.reserve));
            (s.gpu_of.as_ref().map(|g| g.machine.clone()), held)
        })
        .collect();
    for (i, stage) in stages.iter_mut().enumerate() {
        let (Some(machine), Some(offload)) = (&kept[i].0, stage.offload.as_mut()) else { continue };
        let others: u64 = kept
            .iter()
            .enumerate()
            .filter(|&(j, (m, _))| j != i && m.as_ref() == Some(machine))
            .map(|(_, &(_, held))| held)
            .sum();
        let memory = &mut offload.memory;
        memory.budget = memory.budget.saturating_sub(others);
        memory.headroom = crate::cost::clamp_i64(i128::from(memory.budget) - i128::from(memory.total));
    }
}
