//! The weight-format table, the context chart and the users chart, as markup the page sets
//! in place. Built
//! in the page's worker from the core's sweeps (every point a plan on the same machines),
//! so neither the twenty-odd plans nor the drawing code are in the page's download, and
//! an open panel never slows the page's re-plan. Text from input (machine names) is
//! escaped, and set apart in `<bdi>` so it reorders nothing after it; the markup holds no
//! script and no URL.

use std::borrow::Cow;
use std::fmt::Write as _;

use stageplan::Problem;
use stageplan::serving::{Found, ServingError, by_users};
use stageplan::sweep::{FormatRow, by_context, by_weights};
use stageplan::units::{format_bytes, group_digits, sig3};

use stageplan::view::hue;
use stageplan::view::users::{Frame, USERS_TARGET, UsersChart, one_more, server_name, users_chart, users_word};

/// The table and the charts for `problem` on the enabled machines.
pub fn sweeps_html(problem: &Problem, enabled: &[bool]) -> String {
    let index = |name: &str| problem.nodes.iter().position(|n| n.name == name).unwrap_or(0);
    let mut html = table_html(&by_weights(problem, enabled));
    if let Some(chart) = context_chart(&by_context(problem, enabled), problem.workload.context, &index) {
        html += &chart_html(&chart);
    }
    html + &users_html(problem, enabled)
}

/// Users of one server (llama-server, or vLLM's) against what they see: p95 time to first token and per token
/// for 1, 2, 4, … users (each count planned and simulated as `stageplan plan --users N`),
/// and how many meet [`USERS_TARGET`]; or why there is no chart.
fn users_html(problem: &Problem, enabled: &[bool]) -> String {
    let heading = "<h3>Users against latency</h3>";
    match by_users(problem, enabled, USERS_TARGET) {
        Ok((points, found)) => match users_chart(&points, FRAME) {
            Some(chart) => {
                let engine = problem.workload.engine;
                format!("{heading}{}{}", users_chart_html(&chart, server_name(engine)), found_html(&found, engine))
            }
            None => String::new(),
        },
        Err(ServingError::Engine) => format!(
            "{heading}<p class=\"hint\">What many users see is simulated for llama.cpp's and vLLM's servers; choose one of them as the engine to see it.</p>"
        ),
        Err(e) => format!("{heading}<p class=\"hint\">Not simulated: {}</p>", escape(&e.to_string())),
    }
}

/// How many users of `engine`'s server meet [`USERS_TARGET`], and what stops one more.
fn found_html(found: &Found, engine: stageplan::engine::Engine) -> String {
    format!(
        "<p id=\"users-found\">At p95 first token ≤ 2 s: <strong>{}</strong> of one {} on these machines; {}. <span class=\"hint\">(<code>stageplan plan SCENARIO --ttft 2s</code> answers the same, and tries splitting the machines into replicas.)</span></p>",
        users_word(found.users),
        server_name(engine),
        one_more(found, engine)
    )
}

/// The charts' box.
const FRAME: Frame = Frame { width: WIDTH, height: HEIGHT, pad: PAD };

/// The per-token line's colour, given in the markup: the page's style sheet is
/// part of its download, this markup is the worker's.
const TPOT_COLOUR: &str = "hsl(30 90% 38%)";

/// The users chart of one `server` as SVG, with its legend.
fn users_chart_html(c: &UsersChart, server: &str) -> String {
    let last = c.ticks.last().map(|t| t.label.as_str()).unwrap_or_default();
    let mut html = format!(
        "<svg id=\"users-chart\" class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"p95 time to first token (up to {} s) and per token (up to {} ms) for 1 to {last} users of one {server}\">",
        sig3(c.ttft_top_s),
        sig3(c.tpot_top_s * 1e3)
    );
    if let Some(y) = c.target_y {
        level_html(&mut html, y, "first token 2 s");
    }
    if let Some(limit) = &c.limit {
        // At the right edge: its label to the left of it.
        limit_html(&mut html, limit.x, &limit.label, "end");
    }
    let _ = write!(
        html,
        "<polyline class=\"speed ttft\" points=\"{}\"></polyline><polyline class=\"tpot\" points=\"{}\" style=\"stroke:{TPOT_COLOUR};stroke-dasharray:6 3\"></polyline>",
        c.ttft, c.tpot
    );
    let ticks: Vec<(f64, String)> = c.ticks.iter().map(|t| (t.x, t.label.clone())).collect();
    ticks_html(&mut html, &ticks);
    let _ = write!(
        html,
        "</svg><p class=\"legend\"><span class=\"key speed\"></span>p95 time to first token (top: {} s)<span class=\"key\" style=\"background:{TPOT_COLOUR}\"></span>p95 time per token (top: {} ms) · users along the bottom</p>",
        sig3(c.ttft_top_s),
        sig3(c.tpot_top_s * 1e3)
    );
    html
}

/// `text` for HTML text and attribute values.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Weight formats side by side: fits?, one user's tok/s, size, longest context.
fn table_html(rows: &[FormatRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut html = String::from(
        "<div class=\"table-scroll\" tabindex=\"0\" role=\"region\" aria-label=\"weight formats\"><table id=\"formats\" class=\"stages\"><caption class=\"visually-hidden\">weight formats on these machines</caption><thead><tr><th scope=\"col\">weights</th><th scope=\"col\">size</th><th scope=\"col\">fits</th><th scope=\"col\">one user</th><th scope=\"col\">longest context of that split</th></tr></thead><tbody>",
    );
    for r in rows {
        let _ = write!(
            html,
            "<tr class=\"format-row{}\" data-weights=\"{w}\"><th scope=\"row\"><bdi>{w}</bdi>{}</th><td>{}</td><td class=\"fits\">{}</td><td class=\"speed\">{}</td><td>{}</td></tr>",
            if r.current { " current" } else { "" },
            if r.current { " (chosen)" } else { "" },
            format_bytes(r.weight_bytes as f64),
            if r.fits { "fits" } else { "does not fit" },
            if r.fits { format!("{} tok/s", sig3(r.tokens_per_s)) } else { "–".to_owned() },
            r.max_context.map_or_else(|| "–".to_owned(), |c| format!("{} tokens", group_digits(c))),
            w = escape(&r.weights),
        );
    }
    html.push_str("</tbody></table></div>");
    html
}

/// The chart as SVG, with its legend.
fn chart_html(c: &ContextChart) -> String {
    let first = c.ticks.first().map(|t| t.1.as_str()).unwrap_or_default();
    let last = c.ticks.last().map(|t| t.1.as_str()).unwrap_or_default();
    let mut html = format!(
        "<h3>Speed and memory against context length</h3><svg id=\"context-chart\" class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"one user's speed (up to {}) and each machine's memory against its budget, for contexts from {first} to {last}\">",
        c.speed_top
    );
    level_html(&mut html, c.budget_y, "100% of memory");
    let _ = write!(
        html,
        "<line class=\"own\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"8\" y2=\"{}\"></line>",
        HEIGHT - PAD,
        x = c.own_x
    );
    if let Some((x, text)) = &c.limit {
        limit_html(&mut html, *x, text, "start");
    }
    let _ = write!(html, "<polyline class=\"speed\" points=\"{}\"></polyline>", c.speed);
    for (name, hue, points) in &c.memory {
        let _ = write!(
            html,
            "<polyline class=\"memory\" data-node=\"{}\" points=\"{points}\" style=\"stroke:hsl({hue} 70% 38%)\"></polyline>",
            escape(name)
        );
    }
    ticks_html(&mut html, &c.ticks);
    let _ = write!(
        html,
        "</svg><p class=\"legend\"><span class=\"key speed\"></span>one user's tok/s (top: {})",
        c.speed_top
    );
    for (name, hue, _) in &c.memory {
        let _ = write!(
            html,
            "<span class=\"key\" style=\"background:hsl({hue} 70% 38%)\"></span><bdi>{}</bdi>'s memory ",
            escape(name)
        );
    }
    html.push_str(" · the grey line is this scenario's context</p>");
    html
}

/// A dashed level across a chart at `y`, labelled at its left end.
fn level_html(html: &mut String, y: f64, label: &str) {
    let _ = write!(
        html,
        "<line class=\"budget\" x1=\"{PAD}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"></line><text class=\"axis\" x=\"{}\" y=\"{:.1}\">{label}</text>",
        WIDTH - PAD,
        PAD + 2.0,
        y - 3.0
    );
}

/// A limit up the chart at `x`, its label beside it at the top (`anchor`: SVG's
/// `text-anchor`, `start` to its right or `end` to its left).
fn limit_html(html: &mut String, x: f64, label: &str, anchor: &str) {
    let beside = if anchor == "end" { x - 3.0 } else { x + 3.0 };
    let _ = write!(
        html,
        "<line class=\"limit\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"8\" y2=\"{}\"></line><text class=\"axis limit-label\" x=\"{beside:.1}\" y=\"16\" text-anchor=\"{anchor}\">{}</text>",
        HEIGHT - PAD,
        escape(label)
    );
}

/// The labels along a chart's bottom.
fn ticks_html(html: &mut String, ticks: &[(f64, String)]) {
    for (x, text) in ticks {
        let _ = write!(
            html,
            "<text class=\"axis\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - 8.0,
            escape(text)
        );
    }
}

/// A chart of the same machines across context lengths, as SVG coordinates in a
/// `WIDTH × HEIGHT` view box: one user's tok/s, and each machine's memory against its budget.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextChart {
    /// `points` of the speed line (where a plan fits).
    pub speed: String,
    pub speed_top: String,
    /// Per machine: name, colour and `points` of its memory as a share of its budget (the
    /// budget at `budget_y`).
    pub memory: Vec<(String, u32, String)>,
    pub budget_y: f64,
    /// Ticks on the context axis: x and label.
    pub ticks: Vec<(f64, String)>,
    /// The scenario's own context and the longest that fits, as x.
    pub own_x: f64,
    pub limit: Option<(f64, String)>,
}

/// The chart's view box.
pub const WIDTH: f64 = 600.0;
pub const HEIGHT: f64 = 160.0;
const PAD: f64 = 24.0;

/// Lays out a context sweep: x is log2 of the context, y the speed (top panel scale) or
/// memory share, with 100% of a budget at 4/5 of the height so an overflow shows.
pub fn context_chart(
    points: &[stageplan::sweep::ContextPoint],
    own: u64,
    node_index: &dyn Fn(&str) -> usize,
) -> Option<ContextChart> {
    let (first, last) = (points.first()?.context, points.last()?.context);
    let span = ((last as f64).log2() - (first as f64).log2()).max(1.0);
    let x = |c: u64| PAD + ((c as f64).log2() - (first as f64).log2()) / span * (WIDTH - 2.0 * PAD);
    let top = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max).max(1e-9);
    let y = |share: f64| HEIGHT - PAD - share.clamp(0.0, 1.25) * (HEIGHT - 2.0 * PAD) * 0.8;
    let line =
        |pairs: Vec<(f64, f64)>| pairs.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect::<Vec<_>>().join(" ");
    let speed = line(points.iter().filter(|p| p.fits).map(|p| (x(p.context), y(p.tokens_per_s / top))).collect());
    let machines = points[0].memory.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
    let memory = machines
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pairs = points
                .iter()
                .filter_map(|p| {
                    p.memory[i].1.map(|(used, budget)| (x(p.context), y(used as f64 / budget.max(1) as f64)))
                })
                .collect();
            (name.clone(), hue(node_index(name)), line(pairs))
        })
        .collect();
    let limit = points
        .iter()
        .rev()
        .find(|p| p.fits)
        .filter(|p| p.context < last)
        .map(|p| (x(p.context), format!("{} fits", short_count(p.context))));
    Some(ContextChart {
        speed,
        speed_top: format!("{} tok/s", sig3(top)),
        memory,
        budget_y: y(1.0),
        ticks: points.iter().map(|p| (x(p.context), short_count(p.context))).collect(),
        own_x: x(own),
        limit,
    })
}

/// `131072` → `128k`: context lengths as people name them.
pub fn short_count(n: u64) -> String {
    if n >= 1024 && n.is_multiple_of(1024) { format!("{}k", n / 1024) } else { n.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AppState;

    #[test]
    fn the_context_chart_stays_in_its_box_and_marks_the_scenario() {
        let state = AppState::default();
        let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
        let points = stageplan::sweep::by_context(&problem, &state.enabled());
        let chart = context_chart(&points, 8192, &|_| 0).unwrap();
        let inside = |points: &str| {
            points.split(' ').all(|p| {
                let (x, y) = p.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                (0.0..=WIDTH).contains(&x) && (0.0..=HEIGHT).contains(&y)
            })
        };
        assert!(inside(&chart.speed), "{}", chart.speed);
        assert!(chart.memory.iter().all(|(_, _, p)| p.is_empty() || inside(p)));
        assert_eq!(chart.ticks.first().unwrap().1, "1k");
        assert_eq!(chart.ticks.last().unwrap().1, "128k");
        let eight = chart.ticks.iter().find(|t| t.1 == "8k").unwrap().0;
        assert!((chart.own_x - eight).abs() < 1e-9);
        assert_eq!(short_count(131_072), "128k");
        assert_eq!(short_count(1000), "1000");
    }

    /// The users chart stays in its box, ends where the slots stop fitting, and says the
    /// count the capacity search finds at p95 first token ≤ 2 s.
    #[test]
    fn the_users_chart_stays_in_its_box_and_says_how_many_fit() {
        let state = AppState::default();
        let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
        let (points, found) = by_users(&problem, &state.enabled(), USERS_TARGET).unwrap();
        let chart = users_chart(&points, FRAME).unwrap();
        for line in [&chart.ttft, &chart.tpot] {
            assert!(
                line.split(' ').all(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                    (0.0..=WIDTH).contains(&x) && (0.0..=HEIGHT).contains(&y)
                }),
                "{line}"
            );
        }
        assert_eq!(chart.ticks.first().unwrap().label, "1");
        let load = stageplan::serving::Load::llama_server(&problem, 1);
        let capacity = stageplan::serving::capacity(&problem, load, USERS_TARGET).unwrap();
        assert_eq!(found.users, capacity.users);
        let html = sweeps_html(&problem, &state.enabled());
        let said = format!("<strong>{} user", capacity.users);
        assert!(html.contains("<svg id=\"users-chart\"") && html.contains(&said), "{html}");
        // vLLM's users are drawn from its own scheduler, its server named.
        let mut vllm = problem.clone();
        vllm.workload.engine = stageplan::engine::Engine::Vllm;
        let html = users_html(&vllm, &state.enabled());
        assert!(html.contains("<svg") && html.contains("of one vLLM server"), "{html}");
        // An engine whose scheduler is not simulated: said, not drawn.
        vllm.workload.engine = stageplan::engine::Engine::Generic;
        let html = users_html(&vllm, &state.enabled());
        assert!(!html.contains("<svg") && html.contains("choose one of them"), "{html}");
    }

    #[test]
    fn machine_names_stay_text() {
        let mut state = AppState::default();
        state.nodes[0].name = "<img src=x onerror=alert(1)>".into();
        let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
        let html = sweeps_html(&problem, &state.enabled());
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
        // Set apart in the legend, so a U+202E in a name reorders nothing after it (#32: 22).
        assert!(html.contains("<bdi>&lt;img src=x onerror=alert(1)&gt;</bdi>'s memory"), "{html}");
        assert!(html.contains("<table id=\"formats\"") && html.contains("<svg id=\"context-chart\""));
        assert_eq!(escape("a\"b'<&>"), "a&quot;b&#39;&lt;&amp;&gt;");
    }
}
