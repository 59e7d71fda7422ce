//! Re-planning a planned deployment once re-balancing asks for it: the core's fewest-moves
//! search on the problem with what was learned, turned into new stages, predictions and an
//! event that says why (or into why it is held). Apart from the step that decides when, so
//! the deployment's record is built in one place.

use std::collections::BTreeMap;

use stageplan::Problem;

use crate::spec::{Deployment, EVENTS_KEPT, Planned, Rebalance};

/// The deployment re-planned with what was learned: new stages, predictions and an event;
/// or why it is held as it is. A `forced` move (off a machine down or short of memory)
/// never waits and is not counted; one by choice waits while the hour holds
/// `max_moves_per_hour` others.
pub(crate) fn replanned(
    deployment: &Deployment,
    planned: &Planned,
    problem: &Problem,
    learned: BTreeMap<String, crate::spec::Learned>,
    why: &str,
    forced: bool,
    now_ms: u64,
) -> Result<Deployment, String> {
    let problem = crate::balance::with_learned(problem, &learned);
    let current: Vec<stageplan::planner::replan::CurrentStage> = deployment
        .stages
        .iter()
        .map(|s| stageplan::planner::replan::CurrentStage { node: s.plan_node().unwrap_or_default(), layers: s.layers })
        .collect();
    let options =
        stageplan::ReplanOptions { tolerance: planned.options.tolerance, hysteresis: planned.options.hysteresis };
    let replan = stageplan::replan(&problem, &current, options).map_err(|e| format!("{why}, but {e}"))?;
    let mut updated = deployment.clone();
    let mut record = planned.clone();
    record.learned = learned;
    let (action, moved_stages) = if replan.plan.feasible {
        let gpus = |stage: &stageplan::plan::Stage| {
            let before = deployment.stages.iter().find(|s| s.node.as_deref() == Some(stage.node.as_str()));
            before.map_or(u32::from(stage.kind == Some(stageplan::device::DeviceKind::Gpu)), |s| s.gpus)
        };
        let (stages, predicted) = crate::spec::planned_stages(&replan.plan, gpus);
        let moved = stages
            .iter()
            .filter(|s| {
                !deployment.stages.iter().any(|o| o.node == s.node && o.gpu_ids == s.gpu_ids && o.layers == s.layers)
            })
            .count();
        if moved > 0 && !forced {
            let recent = planned.events.iter().filter(|e| e.counts(now_ms)).count();
            if recent >= planned.options.max_moves_per_hour as usize {
                return Err(format!(
                    "{why}, but it moved by choice {recent} times in the last hour (`max_moves_per_hour` {}): it waits",
                    planned.options.max_moves_per_hour
                ));
            }
        }
        updated.stages = stages;
        record.predicted = predicted;
        let action = if moved == 0 {
            format!("kept the split ({})", replan.reason)
        } else {
            let moves: Vec<String> = replan
                .moves
                .iter()
                .map(|m| match m.layers {
                    [0, 0] => format!("the embedding to `{}`", m.to),
                    [a, b] if a == b => format!("the head to `{}`", m.to),
                    [a, b] => format!("layers {a}–{} to `{}`", b - 1, m.to),
                })
                .collect();
            format!(
                "{}, {} moved (the best plan outright: {})",
                moves.join(", "),
                stageplan::units::format_bytes(replan.bytes_moved as f64),
                stageplan::units::format_bytes(replan.best_plan_bytes as f64)
            )
        };
        (action, moved)
    } else {
        let reason = replan.plan.diagnostics.first().map_or("", |d| d.message.as_str());
        (format!("no split fits what is left, so the stages stay: {reason}"), 0)
    };
    record.events.push(Rebalance {
        at_ms: now_ms,
        reason: format!("{why} → {action}"),
        moved_stages,
        bytes_moved: if moved_stages > 0 { replan.bytes_moved } else { 0 },
        best_plan_bytes: replan.best_plan_bytes,
        forced,
    });
    // The latest events, and older ones the hourly limit still counts (at most the limit).
    let latest = record.events.len().saturating_sub(EVENTS_KEPT);
    let mut index = 0;
    record.events.retain(|e| {
        index += 1;
        index > latest || e.counts(now_ms)
    });
    updated.planned = Some(Box::new(record));
    updated.check().map_err(|e| format!("{why}, but the re-planned deployment {e}"))?;
    Ok(updated)
}
