//! The cluster's store as text: `status`, `nodes list`, and the line each command that
//! changes the store (`deploy`, `undeploy`, `nodes add`, `nodes remove`) ends with.

use stageplan::quote::{line, shell};
use stageplan::units::format_bytes;
use stageplan_reconcile::Deployment;
use stageplan_reconcile::store::{ASSIGNMENTS, DEPLOYMENTS, NODES};

use crate::cluster::{ClusterStatus, DeploymentStatus, NodeStatus};

/// `status`: deployments, each planned one's stages, nodes, quarantined records, invariants;
/// `now_ms` dates the last re-balance.
pub(crate) fn status(status: &ClusterStatus, now_ms: u64) -> String {
    let mut out = String::new();
    out.push_str("deployments                  desired  running  pending  failed  model\n");
    for d in &status.deployments {
        out.push_str(&format!(
            "  {:<26} {:>7}  {:>7}  {:>7}  {:>6}  {}\n",
            line(&d.name),
            d.desired,
            d.running,
            d.pending,
            d.failed,
            line(&d.model)
        ));
    }
    for d in status.deployments.iter().filter(|d| !d.stages.is_empty()) {
        out.push_str(&planned(d, now_ms));
    }
    out.push('\n');
    out.push_str(&nodes(&status.nodes));
    if !status.quarantined.is_empty() {
        out.push_str("\nquarantined: this version cannot use these records, so what they hold stays bound\n");
        for q in &status.quarantined {
            let s = if q.bindings == 1 { "" } else { "s" };
            out.push_str(&format!("  {:<26} {:>7} binding{s}  {}\n", line(&q.key), q.bindings, line(&q.why)));
            out.push_str(&format!("  {:<26} fix: {}\n", "", quarantine_fix(&q.key)));
        }
    }
    out.push_str(&agents(&status.agents));
    out.push_str(&format!("\n{} stage bindings · invariants {}\n", status.assignments, status.invariants));
    out
}

/// What each agent runs, what it cannot and why, and its receipts.
fn agents(agents: &[stageplan_agent::report::AgentReport]) -> String {
    use stageplan_agent::report::ProcessState;
    let mut out = String::new();
    for agent in agents {
        let state = if agent.stopped { " (stopped)" } else { "" };
        out.push_str(&format!("\nagent on {}{state}, reached at {}\n", line(&agent.node), line(&agent.address)));
        for (key, replica) in &agent.replicas {
            if let Some(problem) = &replica.problem {
                out.push_str(&format!("  {:<26} not run here: {}\n", line(key), line(problem)));
            }
            for p in &replica.processes {
                let state = match p.state {
                    ProcessState::Starting => "starting".to_owned(),
                    ProcessState::Serving => "serving".to_owned(),
                    ProcessState::Restarting => format!("restarting after {} failures in a row", p.failures),
                    ProcessState::Failed => format!("failed {} times in a row, left stopped", p.failures),
                };
                out.push_str(&format!("  {:<26} {state}", line(&p.name)));
                if let Some(why) = &p.why {
                    out.push_str(&format!(": {}", line(why)));
                }
                out.push('\n');
                for l in &p.log_tail {
                    out.push_str(&format!("  {:<26}   | {}\n", "", line(l)));
                }
            }
            if let Some(endpoint) = &replica.endpoint {
                out.push_str(&format!("  {:<26} served at http://{}\n", line(key), line(endpoint)));
            }
            if let Some(why) = replica.receipt_failed.as_ref().filter(|_| replica.receipt.is_none()) {
                out.push_str(&format!("  {:<26} receipt not measured yet: {}\n", "", line(why)));
            }
            if let Some(receipt) = &replica.receipt {
                let held = if receipt.far.is_empty() { "the plan held" } else { "far from the plan" };
                out.push_str(&format!(
                    "  {:<26} receipt: decode planned {:.1} tok/s, measured {:.1}; {held}\n",
                    "", receipt.decode.planned_per_s, receipt.decode.measured_per_s
                ));
                for m in &receipt.machines {
                    out.push_str(&format!(
                        "  {:<26}   {:<16} weights and caches planned {}, allocated {}\n",
                        "",
                        line(&m.machine),
                        stageplan::units::format_bytes(m.planned_held_bytes as f64),
                        stageplan::units::format_bytes(m.allocated_held_bytes as f64)
                    ));
                }
                for far in &receipt.far {
                    out.push_str(&format!("  {:<26}   far: {}\n", "", line(far)));
                }
            }
        }
    }
    out
}

/// A planned deployment's stages, measured against predicted, and its last re-balance.
fn planned(d: &DeploymentStatus, now_ms: u64) -> String {
    let ms = |s: f64| format!("{:.1} ms", s * 1e3);
    let ratio = |measured: Option<f64>, predicted: f64| {
        measured.map_or_else(|| "not measured".to_owned(), |m| format!("{} ({:.2}×)", ms(m), m / predicted))
    };
    let mut out = format!("\n{}: per decode step, predicted → measured\n", line(&d.name));
    for (i, stage) in d.stages.iter().enumerate() {
        let layers = format!("layers {}–{}", stage.layers[0], stage.layers[1].saturating_sub(1));
        out.push_str(&format!(
            "  stage {i}  {:<16} {:<14} {:>9} → {}\n",
            line(&stage.node),
            layers,
            ms(stage.predicted_s),
            ratio(stage.measured_s, stage.predicted_s)
        ));
    }
    if let Some(predicted) = d.predicted_token_s {
        out.push_str(&format!(
            "  {:<40} {:>9} → {}\n",
            "per token, all stages",
            ms(predicted),
            ratio(d.measured_token_s, predicted)
        ));
    }
    for (node, learned) in &d.learned {
        let mut facts = Vec::new();
        if learned.slowdown != 1.0 {
            facts.push(format!("{:.2}× its figures' time", learned.slowdown));
        }
        if learned.memory_taken > 0 {
            facts.push(format!("{} held by other work", format_bytes(learned.memory_taken as f64)));
        }
        out.push_str(&format!("  learned: `{}` {}\n", line(node), facts.join(", ")));
    }
    match &d.last_rebalance {
        Some(event) => {
            let ago = now_ms.saturating_sub(event.at_ms) / 60_000;
            out.push_str(&format!("  last re-balance, {ago} min ago: {}\n", line(&event.reason)));
        }
        None => out.push_str("  no re-balance yet\n"),
    }
    out
}

/// What releases what a quarantined record holds.
fn quarantine_fix(key: &str) -> String {
    // Names from a store are untrusted: quoted for the shell the command is pasted into.
    if let Some(name) = key.strip_prefix(DEPLOYMENTS) {
        format!("`stageplan deploy` a corrected file named `{}`, or `stageplan undeploy {}`", line(name), shell(name))
    } else if let Some(name) = key.strip_prefix(NODES) {
        format!("`stageplan nodes add {} --memory …` again, or `stageplan nodes remove {}`", shell(name), shell(name))
    } else {
        let deployment = key.strip_prefix(ASSIGNMENTS).and_then(|k| k.split('/').next()).unwrap_or(key);
        format!("placement waits until it is gone: `stageplan undeploy {}` removes it", shell(deployment))
    }
}

/// `nodes list`, and the nodes of `status`.
pub(crate) fn nodes(nodes: &[NodeStatus]) -> String {
    let mut out = String::from("nodes                        memory used / total      GPUs used  stages\n");
    for n in nodes {
        out.push_str(&format!(
            "  {:<26} {:>10} / {:<10}  {:>4} / {:<4} {:>6}\n",
            line(&n.name),
            format_bytes(n.memory_used as f64),
            format_bytes(n.memory as f64),
            n.gpus_used,
            n.gpus,
            n.stages
        ));
    }
    out
}

/// `deploy`: what was written.
pub(crate) fn deployed(deployment: &Deployment) -> String {
    format!(
        "deployment `{}`: {} replica{} × {} stage{} ({} per replica)\n",
        deployment.name,
        deployment.replicas,
        if deployment.replicas == 1 { "" } else { "s" },
        deployment.stages.len(),
        if deployment.stages.len() == 1 { "" } else { "s" },
        format_bytes(deployment.stages.iter().map(|s| s.memory as f64).sum()),
    )
}

/// `undeploy`: of the `held` stage bindings, how many are `left` for the next pass.
pub(crate) fn undeployed(name: &str, held: usize, left: usize) -> String {
    let s = if held == 1 { "" } else { "s" };
    match left {
        0 => format!("deployment `{name}` removed; its {held} stage binding{s} released\n"),
        left => format!(
            "deployment `{name}` removed; {} of its {held} stage binding{s} released, the next pass releases the rest\n",
            held - left
        ),
    }
}

/// `nodes add`.
pub(crate) fn node_added(name: &str, memory: u64, gpus: u32) -> String {
    let memory = format_bytes(memory as f64);
    format!("node `{name}`: {memory}, {gpus} GPU{}\n", if gpus == 1 { "" } else { "s" })
}

/// `nodes remove`.
pub(crate) fn node_removed(name: &str) -> String {
    format!("node `{name}` removed; the next pass moves its stages\n")
}
