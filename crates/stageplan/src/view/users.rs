//! The users chart — p95 time to first token and per token for 1, 2, 4, … users of one
//! llama-server, and how many see their first token within 2 s — laid out once for the
//! page's worker and the `<stage-plan>` widget, each in a box of its own size.

use serde::Serialize;

use crate::engine::Engine;
use crate::serving::{Found, Limit, Percentile, Served, ServingError, Targets, UsersPoint, by_users};
use crate::units::sig3;

/// The chart's question (issue #47's): how many users see their first token within 2 s at
/// the 95th percentile.
pub const USERS_TARGET: Targets = Targets { ttft_s: Some(2.0), tpot_s: None, percentile: Percentile::P95 };

/// A chart's box: its size, and the margin inside it the lines keep clear of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub pad: f64,
}

/// A label along the users axis at `x`: a count of users, or where their slots stop fitting.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Tick {
    pub x: f64,
    pub label: String,
}

/// A users chart laid out in its [`Frame`]: x is log2 of the users, each line on its own
/// scale (its top in the legend).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct UsersChart {
    /// SVG `points` of the p95 time to first token and per token, where the users' slots fit.
    pub ttft: String,
    pub tpot: String,
    pub ttft_top_s: f64,
    pub tpot_top_s: f64,
    /// The 2 s target's height on the first token's scale, when within the chart.
    pub target_y: Option<f64>,
    pub ticks: Vec<Tick>,
    /// Where the slots stop fitting.
    pub limit: Option<Tick>,
}

/// Lays out `points` in `frame`; `None` without a count that fits.
pub fn users_chart(points: &[UsersPoint], frame: Frame) -> Option<UsersChart> {
    let served: Vec<(u32, &Served)> = points.iter().filter_map(|p| p.served.as_ref().map(|s| (p.users, s))).collect();
    let (first, last) = (points.first()?.users, points.last()?.users);
    if served.is_empty() {
        return None;
    }
    let Frame { width, height, pad } = frame;
    let span = (f64::from(last).log2() - f64::from(first).log2()).max(1.0);
    let x = |u: u32| pad + (f64::from(u).log2() - f64::from(first).log2()) / span * (width - 2.0 * pad);
    let y = |share: f64| height - pad - share.clamp(0.0, 1.25) * (height - 2.0 * pad) * 0.8;
    let p95 = |pair: [f64; 2]| Percentile::P95.of(pair);
    let ttft_top_s = served.iter().map(|(_, s)| p95(s.ttft_s)).fold(0.0, f64::max).max(1e-9);
    let tpot_top_s = served.iter().map(|(_, s)| p95(s.tpot_s)).fold(0.0, f64::max).max(1e-9);
    let line = |of: &dyn Fn(&Served) -> f64, top: f64| {
        let pairs = served.iter().map(|(u, s)| format!("{:.1},{:.1}", x(*u), y(of(s) / top)));
        pairs.collect::<Vec<_>>().join(" ")
    };
    let target = USERS_TARGET.ttft_s.unwrap_or_default() / ttft_top_s;
    Some(UsersChart {
        ttft: line(&|s| p95(s.ttft_s), ttft_top_s),
        tpot: line(&|s| p95(s.tpot_s), tpot_top_s),
        ttft_top_s,
        tpot_top_s,
        target_y: (target <= 1.25).then(|| y(target)),
        ticks: points.iter().map(|p| Tick { x: x(p.users), label: p.users.to_string() }).collect(),
        limit: points
            .last()
            .filter(|p| p.served.is_none())
            .map(|p| Tick { x: x(p.users), label: format!("{} do not fit", p.users) }),
    })
}

/// `1 user`, `N users`.
pub fn users_word(users: u32) -> String {
    match users {
        1 => "1 user".to_owned(),
        n => format!("{n} users"),
    }
}

/// The server whose users are simulated: `llama-server`, or `vLLM server`.
pub fn server_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Vllm => "vLLM server",
        Engine::LlamaCpp | Engine::Generic => "llama-server",
    }
}

/// What stops one more user than `found` meeting [`USERS_TARGET`] on `engine`'s server.
pub fn one_more(found: &Found, engine: Engine) -> String {
    match &found.limit {
        Limit::Target { missed, .. } => {
            format!("one more would see its first token in {} s at p95", sig3(missed.seen_s))
        }
        Limit::Memory { .. } => "one more user's slot and KV cache would not fit".to_owned(),
        Limit::Most if engine == Engine::Vllm => "no more users are simulated".to_owned(),
        Limit::Most => "llama-server runs no more slots".to_owned(),
    }
}

/// The users chart with its words: what the widget draws.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct UsersView {
    /// In a `width × height` box; `None` when not even one user's slot fits.
    pub chart: Option<UsersChart>,
    pub width: f64,
    pub height: f64,
    /// How many users meet [`USERS_TARGET`].
    pub users: u32,
    /// That count and what stops one more, as a sentence.
    pub found: String,
    /// The chart for assistive technology, and its legend's two lines.
    pub label: String,
    pub legend: [String; 2],
}

/// The users chart of `problem` on the enabled machines (one entry per problem node), laid
/// out in `frame`.
///
/// # Errors
/// As [`by_users`]: an engine other than llama.cpp, a plan for one user that does not fit.
pub fn users_view(problem: &crate::Problem, enabled: &[bool], frame: Frame) -> Result<UsersView, ServingError> {
    let (points, found) = by_users(problem, enabled, USERS_TARGET)?;
    let chart = users_chart(&points, frame);
    let last = points.last().map_or(1, |p| p.users);
    let (ttft_top, tpot_top) =
        chart.as_ref().map_or_else(|| ("0".into(), "0".into()), |c| (sig3(c.ttft_top_s), sig3(c.tpot_top_s * 1e3)));
    let (engine, server) = (problem.workload.engine, server_name(problem.workload.engine));
    Ok(UsersView {
        width: frame.width,
        height: frame.height,
        users: found.users,
        found: format!(
            "At p95 first token ≤ 2 s: {} of one {server} on these machines; {}.",
            users_word(found.users),
            one_more(&found, engine)
        ),
        label: format!(
            "p95 time to first token (up to {ttft_top} s) and per token (up to {tpot_top} ms) for 1 to {last} users of one {server}"
        ),
        legend: [
            format!("p95 time to first token (top: {ttft_top} s)"),
            format!("p95 time per token (top: {tpot_top} ms)"),
        ],
        chart,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The widget's view says what the page's chart says: the count the capacity search
    /// finds, lines inside the box, the target line at 2 s on the first token's scale.
    #[test]
    fn the_view_counts_what_the_capacity_search_finds_inside_its_box() {
        let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
            "workload": {"context": 4096, "prompt": 128, "response": 64},
            "nodes": [{"name": "a", "device": "rtx-4090"}]}"#;
        let problem = crate::scenario::Scenario::from_json(json).unwrap().problem().unwrap();
        let frame = Frame { width: 600.0, height: 160.0, pad: 24.0 };
        let view = users_view(&problem, &[true], frame).unwrap();
        let capacity = crate::serving::answer(&problem, crate::demand::Demand::of_targets(USERS_TARGET)).unwrap();
        assert_eq!(Some(view.users), capacity.capacity.map(|c| c.users));
        assert!(view.found.contains(&users_word(view.users)), "{}", view.found);
        let chart = view.chart.unwrap();
        for pair in chart.ttft.split(' ').chain(chart.tpot.split(' ')) {
            let (x, y) = pair.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (frame.pad..=frame.width - frame.pad).contains(&x) && (0.0..=frame.height - frame.pad).contains(&y),
                "{pair}"
            );
        }
        if let Some(target_y) = chart.target_y {
            let expected = frame.height - frame.pad - 2.0 / chart.ttft_top_s * (frame.height - 2.0 * frame.pad) * 0.8;
            assert!((target_y - expected).abs() < 1e-9);
        }
        assert_eq!(chart.ticks.first().map(|t| t.label.as_str()), Some("1"));
    }
}
