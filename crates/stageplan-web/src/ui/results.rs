//! The plan and sharing.

use std::sync::Arc;

use leptos::prelude::*;
use stageplan::Plan;
use stageplan::plan::{Change, Level};
use stageplan::units::format_seconds;

use super::text::{as_printed, download, name, named, named_attribute, prose};
use crate::fields::InputError;
use crate::planning::{Computed, Outcome};
use crate::state::AppState;
use stageplan::view::{MemoryBar, PlanView};

/// The plan: stage diagram, memory bars, figures, left-out nodes, baselines, notes. While an
/// input is wrong, its problem leads and the last plan that planned stays below, dimmed.
#[component]
pub fn PlanPanel(
    state: RwSignal<AppState>,
    computed: Memo<Computed>,
    shown: Memo<Option<Arc<Outcome>>>,
    problem: Memo<Option<InputError>>,
) -> impl IntoView {
    view! {
        <section class="panel plan" id="plan" data-plan-ms=move || format!("{:.3}", computed.with(|c| c.millis))>
            <h2>"Plan"</h2>
            {move || problem.get().map(|e| view! {
                <p id="error" class="error" role="alert">{prose(&e.message)}
                    {shown.with(Option::is_some).then_some(" — the plan below is the last one that planned.")}</p>
            })}
            {move || shown.with(|shown| match shown {
                None => ().into_any(),
                Some(outcome) => {
                    let v = outcome.view.clone();
                    let millis = computed.with_untracked(|c| c.millis);
                    view! {
                        <div class="plan-body" class:stale=move || problem.with(Option::is_some)>
                        <p class="model-line">{name(outcome.model.clone())} " · " {outcome.weights.clone()} " · " {outcome.layers} " layers"</p>
                        <p id="plan-headline" class="headline" aria-live="polite" class:infeasible=!v.feasible>{prose(&v.headline)}</p>
                        <p id="plan-details" class="details">{v.details.iter().map(|line| view! { <span class="line">{prose(line)}</span> }).collect_view()}</p>
                        <StagesView plan=outcome.plan.clone() view=v.clone()/>
                        {outcome.overflow.clone().map(|(closest, view)| view! {
                            <div id="overflow">
                                <h3>"Where it overflows"</h3>
                                <p class="details">"No split fits these machines. Split in proportion to memory, each machine would hold:"</p>
                                <StagesView plan=closest view=view/>
                            </div>
                        })}
                        <p class="legend"><span class="segment weights"></span>"weights "<span class="segment kv"></span>"KV "<span class="segment embed-head"></span>"embed/head "<span class="segment workspace"></span>"workspace "<span class="segment reserve"></span>"reserve"</p>
                        <h3>"Against the splits other tools make"</h3>
                        <ul class="baselines">
                            <li class="baseline ours"><span class="name">"this plan"</span>
                                <span class="track"><span class="fill" style=format!("width:{:.4}%", v.ours_pct)></span></span>
                                <span class="figure">{v.ours_figure.clone()}</span></li>
                            {v.baselines.iter().map(|b| view! {
                                <li class="baseline" class:unfit=!b.feasible data-policy=b.policy>
                                    <span class="name">{b.policy}</span>
                                    <span class="track"><span class="fill" style=format!("width:{:.4}%", b.pct)></span></span>
                                    <span class="figure">{prose(&b.figure)}</span>
                                </li>
                            }).collect_view()}
                        </ul>
                        {(!v.left_out.is_empty()).then(|| view! {
                            <h3>"Left out"</h3>
                            <ul id="left-out">{v.left_out.iter().map(|r| view! { <li>{prose(r)}</li> }).collect_view()}</ul>
                        })}
                        <h3>"Notes"</h3>
                        <ul id="notes">
                            {v.notes.iter().map(|note| view! {
                                <li class=match note.level { Level::Error => "note error", Level::Warning => "note warning", Level::Info => "note" }>
                                    {prose(&note.message)}
                                    {note.fix.as_deref().map(|f| view! { <span class="fix">" → " {prose(f)}</span> })}
                                    {note.action.clone().map(|(label, change)| {
                                        // "Add another NAME": the machine's name set apart.
                                        let node = match &change { Change::CopyNode(node) => node.as_str(), _ => "" };
                                        let (words, node) = match label.strip_suffix(node) {
                                            Some(words) if !node.is_empty() => (words.to_owned(), node.to_owned()),
                                            _ => (label.clone(), String::new()),
                                        };
                                        view! {
                                            <button type="button" class="apply-fix" on:click=move |_| state.update(|s| s.apply(&change))>{words}<bdi>{node}</bdi></button>
                                        }
                                    })}
                                </li>
                            }).collect_view()}
                        </ul>
                        <p class="search">{format!("search: {} · planned in {:.1} ms", v.search, millis)}</p>
                        </div>
                    }
                    .into_any()
                }
            })}
        </section>
    }
}

/// The stage diagram across the layer axis and the table of stages with memory bars, as
/// the core's `view` lays them out (the embed's `<stage-plan>` draws the same layout).
#[component]
pub fn StagesView(plan: Plan, view: PlanView) -> impl IntoView {
    view! {
        <div class="diagram" role="img" aria-label=format!("stage diagram: {}", view.bands.iter().map(|b| b.label.clone()).collect::<Vec<_>>().join("; "))>
            {view.bands.iter().map(|b| view! {
                <div class="stage-band" class:bottleneck=b.bottleneck data-node=b.node.clone()
                    style=format!("left:{:.4}%;width:{:.4}%;background:hsl({} 70% 78%)", b.left_pct, b.width_pct, b.hue)
                    title=named_attribute(&b.label, &b.node)>
                    <span>{named(&b.label, &b.node)}{b.bottleneck.then_some(" ◀ bottleneck")}</span>
                </div>
            }).collect_view()}
        </div>
        // Focusable: a region that scrolls sideways on a phone must be reachable by keyboard.
        <div class="table-scroll" tabindex="0" role="region" aria-label="stages">
        <table class="stages">
            <caption class="visually-hidden">"stages"</caption>
            <thead><tr><th scope="col">"node"</th><th scope="col">"layers"</th><th scope="col">"memory"</th><th scope="col">"time/step"</th><th scope="col">"bound"</th></tr></thead>
            <tbody>
                {plan.stages.iter().zip(&view.bars).zip(&view.bands).enumerate().map(|(i, ((s, bar), band))| view! {
                    <tr class="stage-row" class:bottleneck=band.bottleneck data-node=s.node.clone()>
                        <th scope="row">{name(s.label())}{band.bottleneck.then(|| view! { <span class="bottleneck-mark">" ◀ bottleneck"</span> })}
                            <small class="figures">{view.figures.get(i).cloned()}</small></th>
                        <td class="layers">{format!("{}–{}", s.layers[0], s.layers[1])}</td>
                        <td>
                            {memory_bar(bar, "bar", "")}
                            <small>{format!("{} / {} · {}", bar.used, bar.budget, bar.headroom)}</small>
                            {view.ram_bars.get(i).cloned().flatten().map(|ram| view! {
                                {memory_bar(&ram, "bar ram", "system RAM: ")}
                                <small class="ram-kept">{format!("RAM {} / {} · {}", ram.used, ram.budget, view.rows.get(i).and_then(|r| r.ram.clone()).unwrap_or_default())}</small>
                            })}
                        </td>
                        <td class="time">{format_seconds(s.time_s)}</td>
                        <td>{stageplan::view::bound_word(s.time.bound)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        </div>
    }
}

/// One memory's bar: its parts against its budget (a GPU's, or beside it its system RAM's).
fn memory_bar(bar: &MemoryBar, class: &'static str, what: &'static str) -> impl IntoView + use<> {
    view! {
        <div class=class class:over=bar.over role="img"
            aria-label=format!("{what}{} of {} used, {}", bar.used, bar.budget, bar.headroom)>
            {bar.segments.iter().map(|seg| view! {
                <span class=format!("segment {}", seg.part.replace('/', "-")) style=format!("width:{:.4}%", seg.pct) title=format!("{}: {}", seg.part, seg.bytes)></span>
            }).collect_view()}
        </div>
    }
}

/// Share link, and JSON export and import.
#[component]
pub fn SharePanel(
    state: RwSignal<AppState>,
    computed: Memo<Computed>,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let link = RwSignal::new(String::new());
    // Written here, when the panel shows, not by `compute` on every edit.
    let plan_json = Memo::new(move |_| {
        computed.with(|c| {
            // As `stageplan plan --format json` prints it: a name's bidirectional or control
            // character escaped (the same JSON value), so it reorders nothing in the text.
            c.result
                .as_ref()
                .map(|o| as_printed(&serde_json::to_string_pretty(&o.plan).unwrap_or_default()).into_owned())
                .unwrap_or_default()
        })
    });
    // Likewise the scenario, shown when it plans.
    let scenario_json = Memo::new(move |_| {
        if computed.with(|c| c.result.is_err()) {
            return String::new();
        }
        state.with(|s| as_printed(&serde_json::to_string_pretty(&s.scenario_json()).unwrap_or_default()).into_owned())
    });
    let import_text = RwSignal::new(String::new());
    // "Copied" for a moment after the link reaches the clipboard.
    let copied = RwSignal::new(false);
    let share = move |_| {
        let fragment = state.with_untracked(AppState::to_fragment);
        if let Some(window) = web_sys::window() {
            let base = window.location().href().unwrap_or_default();
            let base = base.split('#').next().unwrap_or_default().to_owned();
            if let Ok(history) = window.history() {
                let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("#{fragment}")));
            }
            let url = format!("{base}#{fragment}");
            let written = wasm_bindgen_futures::JsFuture::from(window.navigator().clipboard().write_text(&url));
            link.set(url);
            wasm_bindgen_futures::spawn_local(async move {
                if written.await.is_ok() {
                    copied.set(true);
                    set_timeout(move || copied.set(false), std::time::Duration::from_secs(2));
                }
            });
        }
    };
    let import = move |_| {
        let text = import_text.get_untracked();
        match stageplan::Scenario::from_json(&text) {
            Ok(scenario) => {
                state.set(AppState::from_scenario(&scenario));
                let left = crate::state::not_kept(&scenario);
                notice.set((!left.is_empty()).then(|| {
                    format!(
                        "imported without {}: the form has no place for them, so the plan here leaves them out; `stageplan plan` keeps them",
                        left.join(", ")
                    )
                }));
            }
            Err(e) => notice.set(Some(format!("the scenario was not imported: {e}"))),
        }
    };
    view! {
        <section class="panel share" id="share-panel">
            <h2>"Share and export"</h2>
            <div class="row">
                <button id="share" type="button" on:click=share>"Copy a share link"</button>
                <span id="share-status" role="status">{move || if copied.get() { "Link copied" } else { "" }}</span>
                <button id="download-scenario" type="button" on:click=move |_| scenario_json.with(|text| if !text.is_empty() { download("scenario.json", text) })>"Download scenario JSON"</button>
                <button id="download-plan" type="button" on:click=move |_| plan_json.with(|text| if !text.is_empty() { download("plan.json", text) })>"Download plan JSON"</button>
            </div>
            <label class="field" for="share-link"><span>"Share link (the whole state is in the link; nothing is uploaded)"</span>
                <input id="share-link" type="text" readonly prop:value=move || link.get()/></label>
            <details>
                <summary>"Scenario JSON (what `stageplan plan` reads)"</summary>
                <pre id="scenario-json">{move || scenario_json.get()}</pre>
            </details>
            <details>
                <summary>"Plan JSON"</summary>
                <pre id="plan-json">{move || plan_json.get()}</pre>
            </details>
            <label class="field" for="import-json"><span>"Import a scenario JSON"</span>
                <textarea id="import-json" rows="4" spellcheck="false" prop:value=move || import_text.get()
                    on:input=move |ev| import_text.set(event_target_value(&ev))></textarea></label>
            <button id="import" type="button" on:click=import>"Import"</button>
        </section>
    }
}
