//! The same machines across weight formats and context lengths: a table and a chart, each
//! point a plan. Computed only while the panel is open, so an edit re-plans once, not
//! twenty times, when nobody is looking.

use leptos::prelude::*;
use stageplan::sweep::{by_context, by_weights};
use stageplan::units::{format_bytes, group_digits, sig3};

use crate::planning::Outcome;
use crate::view_model::{HEIGHT, WIDTH, context_chart};

/// Weight formats (fits?, one user's tok/s, size, longest context) and tok/s and memory
/// against context length.
#[component]
pub fn SweepsPanel(shown: Memo<Option<Outcome>>) -> impl IntoView {
    let open = RwSignal::new(false);
    let sweeps = Memo::new(move |_| {
        if !open.get() {
            return None;
        }
        shown.with(|o| {
            o.as_ref().map(|o| {
                let index = |name: &str| o.problem.nodes.iter().position(|n| n.name == name).unwrap_or(0);
                let points = by_context(&o.problem, &o.enabled);
                (by_weights(&o.problem, &o.enabled), context_chart(&points, o.problem.workload.context, &index))
            })
        })
    });
    let toggle = move |ev: leptos::ev::Event| open.set(event_target::<web_sys::HtmlDetailsElement>(&ev).open());
    view! {
        <details class="panel sweeps" id="sweeps" on:toggle=toggle>
            <summary><h2>"Weight formats and context lengths"</h2>
                <span class="hint">"the same machines, each point planned"</span></summary>
            {move || sweeps.get().map(|(rows, chart)| view! {
                {(!rows.is_empty()).then(|| view! {
                    <div class="table-scroll">
                    <table id="formats" class="stages">
                        <caption class="visually-hidden">"weight formats on these machines"</caption>
                        <thead><tr><th scope="col">"weights"</th><th scope="col">"size"</th><th scope="col">"fits"</th>
                            <th scope="col">"one user"</th><th scope="col">"longest context"</th></tr></thead>
                        <tbody>{rows.into_iter().map(|r| view! {
                            <tr class="format-row" class:current=r.current data-weights=r.weights.clone()>
                                <th scope="row">{r.weights.clone()}{r.current.then_some(" (chosen)")}</th>
                                <td>{format_bytes(r.weight_bytes as f64)}</td>
                                <td class="fits">{if r.fits { "fits" } else { "does not fit" }}</td>
                                <td class="speed">{if r.fits { format!("{} tok/s", sig3(r.tokens_per_s)) } else { "–".to_owned() }}</td>
                                <td>{r.max_context.map_or_else(|| "–".to_owned(), |c| format!("{} tokens", group_digits(c)))}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                    </div>
                })}
                {chart.map(|c| {
                    let label = format!(
                        "one user's speed (up to {}) and each machine's memory against its budget, for contexts from {} to {}",
                        c.speed_top,
                        c.ticks.first().map(|t| t.1.clone()).unwrap_or_default(),
                        c.ticks.last().map(|t| t.1.clone()).unwrap_or_default()
                    );
                    view! {
                        <h3>"Speed and memory against context length"</h3>
                        <svg id="context-chart" class="chart" viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" aria-label=label>
                            <line class="budget" x1="24" x2=WIDTH - 24.0 y1=c.budget_y y2=c.budget_y></line>
                            <text class="axis" x="26" y=c.budget_y - 3.0>"100% of memory"</text>
                            <line class="own" x1=c.own_x x2=c.own_x y1="8" y2=HEIGHT - 24.0></line>
                            {c.limit.clone().map(|(x, text)| view! {
                                <line class="limit" x1=x x2=x y1="8" y2=HEIGHT - 24.0></line>
                                <text class="axis limit-label" x=x + 3.0 y="16">{text}</text>
                            })}
                            <polyline class="speed" points=c.speed.clone()></polyline>
                            {c.memory.iter().map(|(name, hue, points)| view! {
                                <polyline class="memory" data-node=name.clone() points=points.clone()
                                    style=format!("stroke:hsl({hue} 70% 38%)")></polyline>
                            }).collect_view()}
                            {c.ticks.iter().map(|(x, text)| view! {
                                <text class="axis" x=*x y=HEIGHT - 8.0 text-anchor="middle">{text.clone()}</text>
                            }).collect_view()}
                        </svg>
                        <p class="legend">
                            <span class="key speed"></span>{format!("one user's tok/s (top: {})", c.speed_top)}
                            {c.memory.iter().map(|(name, hue, _)| view! {
                                <span class="key" style=format!("background:hsl({hue} 70% 38%)")></span>{format!("{name}'s memory ")}
                            }).collect_view()}
                            " · the grey line is this scenario's context"
                        </p>
                    }
                })}
            })}
        </details>
    }
}
