//! A plan as a table (`plan`, `replan`, `plan --verify`).
//!
//! Memory bars stack the parts of a stage against its node's budget:
//! `█` weights, `▓` KV cache, `▒` embedding and head, `░` workspace and reserve, `·` free.

use std::fmt::Write;

use stageplan::plan::{Level, Plan};
use stageplan::serving::{
    self, Answer, Demand, Found, Limit, MAX_REPLICA_MACHINES, MAX_USERS, MAX_VLLM_USERS, Missed, NotSplit, Percentile,
    Replicas, Scheduler, Served, TargetsHeld,
};
use stageplan::units::{format_bytes, format_seconds, group_digits, sig3};
use stageplan::{Objective, Problem};

use super::cell;

const BAR: usize = 24;

/// The plan as a table with its figures, left-out nodes, baselines and notes.
pub(crate) fn table(problem: &Problem, plan: &Plan) -> String {
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
    // What the plan was made for: vLLM's is its requests at once, each at its tokens.
    let planned = &plan.workload;
    let _ = writeln!(
        out,
        "context {} × {} sequence{} · KV {} · objective {} · policy {}",
        group_digits(planned.context),
        planned.batch,
        if planned.batch == 1 { "" } else { "s" },
        w.kv,
        plan.objective.name(),
        plan.policy.name()
    );
    out.push('\n');

    if plan.stages.is_empty() {
        out.push_str("no plan fits\n");
    } else {
        let names: Vec<String> = plan.stages.iter().map(|s| cell(&s.label())).collect();
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
                bar(
                    m.weights,
                    m.kv,
                    m.embed_head,
                    m.workspace.saturating_add(m.reserve).saturating_add(m.riders),
                    m.budget
                ),
                format!("{} / {}", short_bytes(m.total), format_bytes(m.budget as f64)),
                format_seconds(stage.time_s),
                match stage.time.bound {
                    stageplan::plan::Bound::Memory => "memory",
                    stageplan::plan::Bound::Compute => "compute",
                },
            );
            // A tensor-parallel stage: what the bar is, and what the group's links cost.
            if !stage.tensor_parallel.is_empty() {
                let _ = writeln!(
                    out,
                    "     {:<name_width$}  {:<9}  tensor parallel over {} GPUs: memory per GPU; all-reduces {} per step",
                    "",
                    "",
                    stage.tensor_parallel.len(),
                    format_seconds(stage.time.all_reduce_s),
                );
            }
            // A machine with system RAM: what its RAM holds, on a line of its own.
            if let Some(o) = &stage.offload {
                let m = &o.memory;
                let kept = o.kept().unwrap_or_else(|| "the embedding".to_owned());
                let _ = writeln!(
                    out,
                    "     {:<name_width$}  {:<9}  {}  {:>21}  {:>10}  RAM: {kept}",
                    "",
                    "  RAM",
                    bar(m.weights, m.kv, m.embed_head, m.workspace.saturating_add(m.reserve), m.budget),
                    format!("{} / {}", short_bytes(m.total), format_bytes(m.budget as f64)),
                    if stage.time.host_s > 0.0 { format_seconds(stage.time.host_s) } else { String::new() },
                );
            }
        }
        // What rides along is in the ░ part of its machine's bar.
        let riding = if plan.riders.is_empty() { "" } else { "+draft/mmproj" };
        let _ = writeln!(
            out,
            "     {:<name_width$}             █ weights ▓ KV ▒ embed/head ░ workspace+reserve{riding} · free",
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
    out.push_str(&table(problem, &replan.plan));
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

/// `--users`, `--ttft`, `--tpot`: what the simulated users of one server saw, the
/// targets held, how many users meet them, and the machines split into replicas where that
/// serves more (or, asked a count one server misses, the users spread over them).
pub(crate) fn answer(problem: &Problem, answer: &Answer, demand: Demand) -> String {
    let mut text = answer.served.as_ref().map(served).unwrap_or_default();
    let Some(targets) = demand.targets else { return text };
    // One server's plan that does not fit has no users seen, only the targets asked.
    let held = answer.targets.clone().unwrap_or(TargetsHeld {
        percentile: targets.percentile,
        ttft_s: targets.ttft_s,
        tpot_s: targets.tpot_s,
        missed: None,
    });
    if demand.users.is_some() && answer.served.is_some() {
        text.push_str(&match &held.missed {
            None => format!("  meets {}\n", asked(&held)),
            Some(m) => format!("  misses {}: {}\n", asked(&held), missed(held.percentile, m)),
        });
    }
    let Some(found) = &answer.capacity else { return text };
    let vllm = problem.workload.engine == stageplan::engine::Engine::Vllm;
    text.push_str(&capacity(&held, found, vllm));
    if let Some(split) = &answer.replicas {
        text.push_str(&replicas(&held, found.users, split, demand.users, vllm));
        return text;
    }
    match serving::not_split(problem) {
        Some(NotSplit::TooMany { machines }) => {
            let _ = writeln!(
                text,
                "({machines} machines: replicas are tried on up to {MAX_REPLICA_MACHINES}; plan a group of machines at a time to compare)"
            );
        }
        Some(NotSplit::ManualStages) => {
            text.push_str("(stages given by hand: replicas are not tried; plan without `stages` to compare)\n");
        }
        Some(NotSplit::Riders) => text.push_str(
            "(a draft or projector rides along, placed once a plan: replicas are not tried; plan without `model.draft` and `model.mmproj` to compare)\n",
        ),
        Some(NotSplit::OneMachine) => {}
        None if demand.users.is_some() => {
            text.push_str("(no split of the machines into replicas serves more users within them than one server)\n");
        }
        None => {}
    }
    text
}

fn served(served: &Served) -> String {
    // Past ten seconds (a queue's wait), in seconds.
    let ms = |s: f64| if s >= 10.0 { format!("{s:.1} s") } else { format!("{:.0} ms", s * 1e3) };
    let plural = |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    // A one-token answer has no time between tokens.
    let per_token = if served.response > 1 {
        format!("p50 {}  p95 {}", ms(served.tpot_s[0]), ms(served.tpot_s[1]))
    } else {
        "none: one token a request".to_owned()
    };
    let server = match served.scheduler {
        Scheduler::LlamaServer { .. } => format!("one llama-server (--parallel {}, continuous batching)", served.users),
        Scheduler::Vllm { max_num_seqs, max_num_batched_tokens } => format!(
            "one vLLM server (--max-num-seqs {max_num_seqs}, {max_num_batched_tokens} tokens a step, KV cache in blocks{})",
            if max_num_seqs < served.users { ": the rest wait their turn" } else { "" }
        ),
    };
    let (who, sent) = match served.rate {
        None => (
            plural(served.users, "user", "users"),
            format!("{} a user", plural(served.requests_per_user, "request", "requests")),
        ),
        Some(rate) => (
            plural(served.users, "slot", "slots"),
            format!(
                "{} requests arriving at random, {rate} a second",
                served.users.saturating_mul(served.requests_per_user)
            ),
        ),
    };
    // Lengths drawn about the workload's: `512-token prompts (±50%)`.
    let spread = served.spread.map(|s| format!(" (±{}%)", s * 100.0)).unwrap_or_default();
    format!(
        "\n{who} of {server}, {}-token prompts{spread}, {}{spread} each, {sent}, simulated:\n  \
         first token  p50 {}  p95 {}\n  per token    {per_token}\n  in all       {:.1} tok/s\n",
        served.prompt,
        plural(served.response, "token", "tokens"),
        ms(served.ttft_s[0]),
        ms(served.ttft_s[1]),
        served.tokens_per_s
    )
}

/// The targets as asked: `p95 first token ≤ 2.00 s, p95 per token ≤ 80.00 ms`.
fn asked(targets: &TargetsHeld) -> String {
    let p = targets.percentile.name();
    let parts: Vec<String> = [("first token", targets.ttft_s), ("per token", targets.tpot_s)]
        .into_iter()
        .filter_map(|(what, s)| s.map(|s| format!("{p} {what} ≤ {}", format_seconds(s))))
        .collect();
    parts.join(", ")
}

/// The target a load missed, in words: `p95 per token 85.00 ms > 80.00 ms`.
fn missed(percentile: Percentile, missed: &Missed) -> String {
    let what = if missed.target == "ttft" { "first token" } else { "per token" };
    format!("{} {what} {} > {}", percentile.name(), format_seconds(missed.seen_s), format_seconds(missed.asked_s))
}

/// The most users that meet the targets, and what stops one more (of a vLLM server where
/// `vllm`, else of a llama-server).
fn capacity(targets: &TargetsHeld, found: &Found, vllm: bool) -> String {
    let p = targets.percentile;
    match (&found.limit, found.users) {
        (Limit::Target { missed: m, .. }, 0) => format!(
            "\nno number of users meets {}: one user alone sees {}; the plan above is for one user, the nearest\n",
            asked(targets),
            missed(p, m)
        ),
        (limit, users) => {
            let why = match limit {
                Limit::Target { users, missed: m } => format!("at {users}, {}", missed(p, m)),
                Limit::Memory { users } => format!("at {users}, their slots' KV caches do not fit"),
                Limit::Most if vllm => format!("{MAX_VLLM_USERS} users are the most simulated"),
                Limit::Most => format!("{MAX_USERS} slots are the most a llama-server starts with"),
            };
            let (server, flags) =
                if vllm { ("vLLM server", String::new()) } else { ("llama-server", format!(", --parallel {users}")) };
            format!(
                "\n{users} {} of one {server} {} {} (simulated{flags}); {why}\n",
                if users == 1 { "user" } else { "users" },
                if users == 1 { "meets" } else { "meet" },
                asked(targets),
            )
        }
    }
}

/// The machines split into replicas that serve more users than one server: each replica's
/// machines, users and what they see.
fn replicas(targets: &TargetsHeld, one_server: u32, split: &Replicas, asked: Option<u32>, vllm: bool) -> String {
    let ms = |s: f64| format!("{:.0} ms", s * 1e3);
    let p = targets.percentile;
    let count = split.replicas.len();
    let tokens_per_s: f64 = split.replicas.iter().map(|r| r.served.tokens_per_s).sum();
    // Asked more than the best split serves: what it serves, the nearest.
    let short = asked.filter(|&asked| split.users < asked);
    let mut text = format!(
        "\nas {count} {}, {} {} users meet them{}{}, {tokens_per_s:.1} tok/s in all:\n",
        match (count, vllm) {
            (1, false) => "llama-server on fewer machines",
            (1, true) => "vLLM server on fewer machines",
            (_, false) => "replicas (a llama-server each)",
            (_, true) => "replicas (a vLLM server each)",
        },
        if short.is_some() {
            "at most"
        } else if count == 1 {
            "its"
        } else {
            "their"
        },
        split.users,
        if one_server == 0 {
            String::new()
        } else {
            format!(" ({:.1}× one server's {one_server})", f64::from(split.users) / f64::from(one_server))
        },
        short.map_or(String::new(), |asked| format!(", fewer than the {asked} asked")),
    );
    for replica in &split.replicas {
        let machines: Vec<String> = replica.machines.iter().map(|m| format!("`{}`", cell(m))).collect();
        let served = &replica.served;
        let [ttft, tpot] = [served.ttft_s, served.tpot_s].map(|s| ms(p.of(s)));
        let per_token = if served.response > 1 { format!(", per token {tpot}") } else { String::new() };
        let _ = writeln!(
            text,
            "  {}: {} {}, {} first token {ttft}{per_token}, {:.1} tok/s in all",
            machines.join(", "),
            replica.users,
            if replica.users == 1 { "user" } else { "users" },
            p.name(),
            served.tokens_per_s,
        );
    }
    if count > 1 {
        text.push_str("  behind a balancer that keeps each replica's share of users in flight (nginx least_conn, weight = its users)\n");
    }
    text
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
