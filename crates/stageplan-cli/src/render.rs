//! Text output: tables a person reads in a terminal, without colour.
//!
//! Memory bars stack the parts of a stage against its node's budget:
//! `█` weights, `▓` KV cache, `▒` embedding and head, `░` workspace and reserve, `·` free.

use std::fmt::Write;

use stageplan::model::ModelSummary;
use stageplan::plan::{Level, Plan};
use stageplan::presets::{DEVICES, MODELS};
use stageplan::units::{format_bandwidth, format_bytes, format_compute, format_seconds, group_digits, sig3};
use stageplan::{Objective, Problem, WeightFormat};

const BAR: usize = 24;
/// Longest name a table cell shows; longer ones end in `…`.
const NAME_CELL: usize = 40;

/// A name from the input as a table cell: one line, no terminal controls, at most
/// [`NAME_CELL`] characters.
fn cell(name: &str) -> String {
    let name = stageplan::quote::line(name);
    if name.chars().count() <= NAME_CELL {
        return name.into_owned();
    }
    let mut cut: String = name.chars().take(NAME_CELL - 1).collect();
    cut.push('…');
    cut
}

/// The plan as a table with its figures, left-out nodes, baselines and notes.
pub(crate) fn plan(problem: &Problem, plan: &Plan) -> String {
    let mut out = String::new();
    let model = &problem.model;
    let w = &problem.workload;
    let _ = writeln!(
        out,
        "{} · {} · {} of weights · {} layers",
        stageplan::quote::line(&model.name),
        model.weights,
        format_bytes(model.weight_bytes() as f64),
        model.num_layers()
    );
    let _ = writeln!(
        out,
        "context {} × {} sequence{} · KV {} · objective {} · policy {}",
        group_digits(w.context),
        w.batch,
        if w.batch == 1 { "" } else { "s" },
        w.kv,
        plan.objective.name(),
        plan.policy.name()
    );
    out.push('\n');

    if plan.stages.is_empty() {
        out.push_str("no plan fits\n");
    } else {
        let names: Vec<String> = plan.stages.iter().map(|s| cell(&s.node)).collect();
        let name_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(4).max(4);
        let _ = writeln!(
            out,
            "  #  {:<name_width$}  {:<9}  {:<BAR$}  {:>21}  {:>10}  bound",
            "node", "layers", "memory", "used / budget", "time/step"
        );
        for (i, stage) in plan.stages.iter().enumerate() {
            let m = &stage.memory;
            let marker = if plan.bottleneck == Some(i) && plan.stages.len() > 1 { "  ◀ bottleneck" } else { "" };
            let over = if m.headroom < 0 { "  ✗ over budget" } else { "" };
            let _ = writeln!(
                out,
                "  {i:<2} {:<name_width$}  {:<9}  {}  {:>21}  {:>10}  {}{marker}{over}",
                names[i],
                format!("{}–{}", stage.layers[0], stage.layers[1]),
                bar(m.weights, m.kv, m.embed_head, m.workspace.saturating_add(m.reserve), m.budget),
                format!("{} / {}", short_bytes(m.total), format_bytes(m.budget as f64)),
                format_seconds(stage.time_s),
                match stage.time.bound {
                    stageplan::plan::Bound::Memory => "memory",
                    stageplan::plan::Bound::Compute => "compute",
                },
            );
        }
        let _ = writeln!(
            out,
            "     {:<name_width$}             █ weights ▓ KV ▒ embed/head ░ workspace+reserve · free",
            ""
        );
        out.push('\n');
        let verdict = stageplan::verdict::Verdict::of(plan);
        let _ = writeln!(out, "{}", verdict.headline());
        for line in verdict.details() {
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = writeln!(out, "search: {}", plan.search.detail);
    if let (Some(bound), Some(gap)) = (plan.search.bound, plan.search.gap)
        && plan.search.method == "heuristic"
    {
        let unit = if plan.objective == Objective::Throughput { " tok/s" } else { " s/token" };
        let _ = writeln!(out, "bound: no plan beats {}{unit}; this plan is within {:.1}%", sig3(bound), gap * 100.0);
    }

    if !plan.left_out.is_empty() {
        out.push_str("\nleft out\n");
        // Nodes with the same reason (identical machines) share a line.
        let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
        for left in &plan.left_out {
            match left.reason.split_once(" left out: ") {
                Some((_, tail)) if !left.node.is_empty() => match groups.iter_mut().find(|(_, t)| *t == tail) {
                    Some((names, _)) => names.push(&left.node),
                    None => groups.push((vec![&left.node], tail)),
                },
                _ => groups.push((Vec::new(), &left.reason)),
            }
        }
        for (names, tail) in groups {
            let who = match names.len() {
                0 => String::new(),
                1 => format!("`{}` left out: ", names[0]),
                2..=3 => {
                    format!("{} left out: ", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
                }
                n => format!("`{}`, `{}` and {} more alike left out: ", names[0], names[1], n - 2),
            };
            let _ = writeln!(out, "  {who}{tail}");
        }
    }

    if !plan.baselines.is_empty() {
        out.push_str("\nother policies, same cost model\n");
        let ours = plan.objective_value();
        for b in &plan.baselines {
            let figure = if b.feasible {
                let (value, text) = match plan.objective {
                    Objective::Throughput => (b.tokens_per_s, format!("{} tok/s", sig3(b.tokens_per_s))),
                    Objective::Latency => {
                        let l = b.latency_s.unwrap_or(f64::INFINITY);
                        (l, format!("{} per token", format_seconds(l)))
                    }
                };
                match ours {
                    Some(ours) if ours > 0.0 && value.is_finite() => {
                        let change = (value - ours) / ours * 100.0;
                        format!("{text}  ({change:+.0}% vs this plan)")
                    }
                    _ => text,
                }
            } else {
                b.problem.clone().unwrap_or_else(|| "does not fit".to_owned())
            };
            let _ = writeln!(out, "  {:<20} {figure}", b.policy.name());
        }
    }

    if !plan.diagnostics.is_empty() {
        out.push_str("\nnotes\n");
        for d in &plan.diagnostics {
            let level = match d.level {
                Level::Error => "error: ",
                Level::Warning => "warning: ",
                Level::Info => "",
            };
            let _ = write!(out, "  {level}{}", d.message);
            if let Some(fix) = &d.fix {
                let _ = write!(out, " → {fix}");
            }
            out.push('\n');
        }
    }
    out
}

/// A re-plan: why, the new plan, and the moves that reach it.
pub(crate) fn replan(problem: &Problem, replan: &stageplan::Replan) -> String {
    let mut out = format!("{}\n\n", stageplan::quote::line(&replan.reason));
    out.push_str(&plan(problem, &replan.plan));
    if replan.kept {
        return out;
    }
    if replan.moves.is_empty() {
        out.push_str("\nmoves: none\n");
        return out;
    }
    let _ = writeln!(
        out,
        "\nmoves: {} in {} (moves to different nodes run at once); the best plan would move {}",
        format_bytes(replan.bytes_moved as f64),
        format_seconds(replan.move_time_s),
        format_bytes(replan.best_plan_bytes as f64),
    );
    let layers = problem.model.num_layers();
    let what = |m: &stageplan::planner::replan::Move| match m.layers {
        [0, 0] => "embedding".to_owned(),
        [a, b] if a == layers && b == layers => "head".to_owned(),
        [a, b] => format!("layers {a}–{b}"),
    };
    let what_width = replan.moves.iter().map(|m| what(m).len()).max().unwrap_or(0);
    let from_width =
        replan.moves.iter().map(|m| m.from.as_deref().map_or(12, |f| cell(f).chars().count())).max().unwrap_or(0);
    for m in &replan.moves {
        let from = cell(m.from.as_deref().unwrap_or("storage"));
        let note = if m.from.is_none() { "  (its node is gone: reload)" } else { "" };
        let _ = writeln!(
            out,
            "  {:<what_width$}  {from:<from_width$} → {:<12} {:>10}  {:>9}{note}",
            what(m),
            cell(&m.to),
            format_bytes(m.bytes as f64),
            format_seconds(m.time_s),
        );
    }
    out
}

/// The line `--verify` adds: the exhaustive optimum beside ours.
pub(crate) fn verification(plan: &Plan, exhaustive: &Plan) -> String {
    let ours = plan.objective_value();
    let best = exhaustive.objective_value();
    let verdict = match (ours, best) {
        (None, None) => "no plan fits either way".to_owned(),
        (Some(a), Some(b)) if (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) => "the plan is optimal".to_owned(),
        (Some(a), Some(b)) => format!("MISMATCH: this plan {a}, exhaustive {b}"),
        (a, b) => format!("MISMATCH: this plan {a:?}, exhaustive {b:?}"),
    };
    format!("\nverified by {}: {verdict}\n", exhaustive.search.detail)
}

fn bar(weights: u64, kv: u64, embed_head: u64, other: u64, budget: u64) -> String {
    let budget = budget.max(1) as f64;
    let total = weights as f64 + kv as f64 + embed_head as f64 + other as f64;
    let scale = BAR as f64 / budget.max(total);
    // Cumulative rounding keeps the segments summing to the filled length.
    let mut cells = String::new();
    let mut drawn = 0usize;
    let mut running = 0.0;
    for (amount, glyph) in [(weights, '█'), (kv, '▓'), (embed_head, '▒'), (other, '░')] {
        running += amount as f64;
        let upto = ((running * scale).round() as usize).min(BAR);
        for _ in drawn..upto {
            cells.push(glyph);
        }
        drawn = drawn.max(upto);
    }
    for _ in drawn..BAR {
        cells.push('·');
    }
    cells
}

fn short_bytes(bytes: u64) -> String {
    format_bytes(bytes as f64)
}

/// A model's summary.
pub(crate) fn model(s: &ModelSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} · {}", stageplan::quote::line(&s.name), s.weights);
    let _ = writeln!(out, "parameters      {} ({})", params(s.params), group_digits(s.params));
    let _ = writeln!(
        out,
        "weights         {} ({} bytes)",
        format_bytes(s.weight_bytes as f64),
        group_digits(s.weight_bytes)
    );
    let _ = writeln!(
        out,
        "embedding       {}{}",
        format_bytes(s.embedding_bytes as f64),
        if s.tied_embeddings { " (tied: the last stage keeps a copy as the LM head)" } else { "" }
    );
    let _ = writeln!(out, "head            {} (final norm and LM head)", format_bytes(s.head_bytes as f64));
    let _ = writeln!(out, "KV cache        {} per token ({})", format_bytes(s.kv_bytes_per_token as f64), s.kv_format);
    if let Some(max) = s.max_context {
        let _ = writeln!(out, "max context     {} tokens", group_digits(max));
    }
    let mix: Vec<String> = s
        .type_mix
        .iter()
        .map(|t| format!("{} {:.1}%", t.ty, t.bytes as f64 * 100.0 / s.weight_bytes.max(1) as f64))
        .collect();
    let _ = writeln!(out, "type mix        {}", mix.join(", "));
    let _ = writeln!(out, "\n  layer  bytes                  params       window");
    for layer in &s.layers {
        let _ = writeln!(
            out,
            "  {:<5}  {:<21}  {:<11}  {}",
            layer.index,
            format!("{} ({})", format_bytes(layer.bytes as f64), group_digits(layer.bytes)),
            params(layer.params),
            layer.window.map_or_else(|| "–".to_owned(), group_digits)
        );
    }
    out
}

/// The line that says how little of the files was read.
pub(crate) fn reads(files: usize, bytes_read: u64, file_bytes: u64) -> String {
    format!(
        "\nread {} of {} ({:.2}%) from {files} file{}: the headers\n",
        format_bytes(bytes_read as f64),
        format_bytes(file_bytes as f64),
        bytes_read as f64 * 100.0 / file_bytes.max(1) as f64,
        if files == 1 { "" } else { "s" }
    )
}

fn params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 { format!("{:.2} B", n / 1e9) } else { format!("{:.1} M", n / 1e6) }
}

/// Model presets, device presets and weight formats.
pub(crate) fn presets() -> String {
    let mut out = String::from("model presets\n");
    for m in MODELS {
        let _ = writeln!(out, "  {:<18} {:<48} {:>8}", m.name, m.title, params(m.published_params as u64));
    }
    out.push_str("\ndevice presets            memory      bandwidth    compute (fp16)  reserve\n");
    for d in DEVICES {
        let _ = writeln!(
            out,
            "  {:<22}  {:>10}  {:>10}  {:>14}  {:>9}   {}",
            d.name,
            format_bytes(d.memory),
            format_bandwidth(d.bandwidth),
            format_compute(d.compute),
            format_bytes(d.reserve),
            d.title
        );
    }
    out.push_str("\nweight formats\n  ");
    let names: Vec<String> = WeightFormat::all().iter().map(ToString::to_string).collect();
    out.push_str(&names.join(", "));
    out.push_str("\n\nKV-cache formats\n  ");
    let kv: Vec<&str> = stageplan::tensor_type::KV_FORMATS.iter().map(|t| t.name()).collect();
    out.push_str(&kv.join(", "));
    out.push('\n');
    out
}

/// The same, as JSON.
pub(crate) fn presets_json() -> serde_json::Value {
    serde_json::to_value(stageplan::presets::catalog()).unwrap_or_default()
}
