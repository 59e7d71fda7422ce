//! `stageplan verify`'s receipt as a table.

use std::fmt::Write;

use stageplan::Plan;
use stageplan::units::format_bytes;
use stageplan_agent::Receipt;

use super::cell;

pub(crate) fn receipt(plan: &Plan, receipt: &Receipt) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} · {} run by llama.cpp on this machine, as exported\n",
        cell(&plan.model.name),
        cell(&plan.model.weights)
    );
    let _ = writeln!(out, "  machine               weights+KV planned   allocated             all planned   allocated");
    for m in &receipt.machines {
        let error = m.allocated_held_bytes as f64 / m.planned_held_bytes.max(1) as f64 - 1.0;
        let _ = writeln!(
            out,
            "  {:<20}  {:>18}   {:>10} ({:+.1}%)   {:>11}   {:>9}",
            cell(&m.machine),
            format_bytes(m.planned_held_bytes as f64),
            format_bytes(m.allocated_held_bytes as f64),
            error * 100.0,
            format_bytes(m.planned_total_bytes as f64),
            format_bytes(m.allocated_total_bytes as f64),
        );
    }
    out.push('\n');
    for (what, s) in [("decode", &receipt.decode), ("prompt", &receipt.prefill)] {
        let _ = writeln!(
            out,
            "  {what:<6}  planned {:.1} tok/s, measured {:.1} over {} tokens ({:+.1}%, the plan's band ±{:.0}%)",
            s.planned_per_s,
            s.measured_per_s,
            s.tokens,
            s.error.unwrap_or(f64::INFINITY) * 100.0,
            s.band * 100.0
        );
    }
    out.push('\n');
    if receipt.far.is_empty() {
        out.push_str("the plan held: memory and speed within their bands\n");
    } else {
        out.push_str("far from the plan:\n");
        for line in &receipt.far {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}
