//! The plan, this device, and sharing.

use leptos::prelude::*;
use leptos::task::spawn_local;
use stageplan::plan::Level;
use stageplan::units::{Dimension, format_bandwidth, format_bytes, format_compute, format_seconds};
use stageplan_gpu::sharded::{self, MlpSpec, RoundRobin, StageSpec};
use stageplan_gpu::{Gpu, Probe, ProbeOptions};

use super::inputs::download;
use crate::app::Computed;
use crate::state::{AppState, NodeDraft, quantity_text};

/// The plan: stage diagram, memory bars, figures, left-out nodes, baselines, notes.
#[component]
pub fn PlanPanel(state: RwSignal<AppState>, computed: Memo<Computed>) -> impl IntoView {
    let _ = state;
    view! {
        <section class="panel plan" id="plan" data-plan-ms=move || format!("{:.3}", computed.with(|c| c.millis))>
            <h2>"Plan"</h2>
            {move || computed.with(|c| match &c.result {
                Err(message) => view! { <p id="error" class="error" role="alert">{message.clone()}</p> }.into_any(),
                Ok(outcome) => {
                    let v = outcome.view.clone();
                    view! {
                        <p class="model-line">{outcome.model.clone()} " · " {outcome.layers} " layers"</p>
                        <p id="plan-headline" class="headline" aria-live="polite" class:infeasible=!v.feasible>{v.headline.clone()}</p>
                        <p id="plan-details" class="details">{v.details.clone()}</p>
                        <div class="diagram" role="img" aria-label=format!("stage diagram: {}", v.bands.iter().map(|b| b.label.clone()).collect::<Vec<_>>().join("; "))>
                            {v.bands.iter().map(|b| view! {
                                <div class="stage-band" class:bottleneck=b.bottleneck data-node=b.node.clone()
                                    style=format!("left:{:.4}%;width:{:.4}%;background:hsl({} 65% 45%)", b.left_pct, b.width_pct, b.hue)
                                    title=b.label.clone()>
                                    <span>{b.label.clone()}{b.bottleneck.then_some(" ◀ bottleneck")}</span>
                                </div>
                            }).collect_view()}
                        </div>
                        <table class="stages">
                            <caption class="visually-hidden">"stages"</caption>
                            <thead><tr><th scope="col">"node"</th><th scope="col">"layers"</th><th scope="col">"memory"</th><th scope="col">"time/step"</th><th scope="col">"bound"</th></tr></thead>
                            <tbody>
                                {outcome.plan.stages.iter().zip(&v.bars).map(|(s, bar)| view! {
                                    <tr class="stage-row" data-node=s.node.clone()>
                                        <th scope="row">{s.node.clone()}</th>
                                        <td class="layers">{format!("{}–{}", s.layers[0], s.layers[1])}</td>
                                        <td>
                                            <div class="bar" class:over=bar.over role="img"
                                                aria-label=format!("{} of {} used, {}", bar.used, bar.budget, bar.headroom)>
                                                {bar.segments.iter().map(|(part, pct, text)| view! {
                                                    <span class=format!("segment {}", part.replace('/', "-")) style=format!("width:{pct:.4}%") title=format!("{part}: {text}")></span>
                                                }).collect_view()}
                                            </div>
                                            <small>{format!("{} / {} · {}", bar.used, bar.budget, bar.headroom)}</small>
                                        </td>
                                        <td class="time">{format_seconds(s.time_s)}</td>
                                        <td>{crate::view_model::bound_word(s.time.bound)}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        <p class="legend"><span class="segment weights"></span>"weights "<span class="segment kv"></span>"KV "<span class="segment embed-head"></span>"embed/head "<span class="segment workspace"></span>"workspace "<span class="segment reserve"></span>"reserve"</p>
                        <h3>"Against the splits other tools make"</h3>
                        <ul class="baselines">
                            <li class="baseline ours"><span class="name">"this plan"</span>
                                <span class="track"><span class="fill" style=format!("width:{:.4}%", v.ours_pct)></span></span>
                                <span class="figure">{v.headline.clone()}</span></li>
                            {v.baselines.iter().map(|b| view! {
                                <li class="baseline" class:unfit=!b.feasible data-policy=b.policy>
                                    <span class="name">{b.policy}</span>
                                    <span class="track"><span class="fill" style=format!("width:{:.4}%", b.pct)></span></span>
                                    <span class="figure">{b.figure.clone()}</span>
                                </li>
                            }).collect_view()}
                        </ul>
                        {(!v.left_out.is_empty()).then(|| view! {
                            <h3>"Left out"</h3>
                            <ul id="left-out">{v.left_out.iter().map(|r| view! { <li>{r.clone()}</li> }).collect_view()}</ul>
                        })}
                        <h3>"Notes"</h3>
                        <ul id="notes">
                            {v.notes.iter().map(|(level, message, fix)| view! {
                                <li class=match level { Level::Error => "note error", Level::Warning => "note warning", Level::Info => "note" }>
                                    {message.clone()}
                                    {fix.clone().map(|f| view! { <span class="fix">" → " {f}</span> })}
                                </li>
                            }).collect_view()}
                        </ul>
                        <p class="search">{format!("search: {} · planned in {:.1} ms", v.search, c.millis)}</p>
                    }
                    .into_any()
                }
            })}
        </section>
    }
}

/// A row of the sharded run's table: stage, layers, predicted, measured, ratio.
type ShardedRow = (String, String, String, String, String);

/// This device through WebGPU: probe it, add it as a node, run the plan as kernels.
#[component]
pub fn DevicePanel(state: RwSignal<AppState>, computed: Memo<Computed>) -> impl IntoView {
    let status = RwSignal::new(String::new());
    let probe: RwSignal<Option<Probe>> = RwSignal::new(None);
    let busy = RwSignal::new(false);
    let sharded_rows: RwSignal<Vec<ShardedRow>> = RwSignal::new(Vec::new());
    let sharded_note = RwSignal::new(String::new());
    let run_probe = move |_| {
        busy.set(true);
        status.set("looking for a WebGPU adapter…".into());
        spawn_local(async move {
            let gpu = Gpu::new();
            let adapters = gpu.adapters().await;
            if adapters.is_empty() {
                status.set("WebGPU is not available in this browser (no adapter), so this device cannot be measured here; everything else on the page works.".into());
                busy.set(false);
                return;
            }
            match gpu.open(0).await {
                Ok(context) => {
                    let started = crate::app::now_ms();
                    let result = stageplan_gpu::probe(&context, &ProbeOptions::quick(), &mut |step| {
                        status.set(format!("measuring {step}…"))
                    })
                    .await;
                    match result {
                        Ok(p) => {
                            status.set(format!("measured in {:.1} s", (crate::app::now_ms() - started) / 1000.0));
                            probe.set(Some(p));
                        }
                        Err(e) => status.set(e.to_string()),
                    }
                }
                Err(e) => status.set(e.to_string()),
            }
            busy.set(false);
        });
    };
    let add_device = move |_| {
        if let Some(p) = probe.get_untracked() {
            state.update(|s| {
                let id = s.next_id();
                s.nodes.push(NodeDraft {
                    id,
                    name: "this-device".into(),
                    memory: quantity_text(p.memory.bytes as f64, Dimension::Memory),
                    bandwidth: quantity_text(p.bandwidth.median.round(), Dimension::Bandwidth),
                    compute: quantity_text(p.compute().round(), Dimension::Compute),
                    reserve: "0".into(),
                    enabled: true,
                    ..NodeDraft::default()
                });
            });
        }
    };
    let run_sharded = move |_| {
        let Some(p) = probe.get_untracked() else { return };
        let Some(stages) = computed.with_untracked(|c| c.result.as_ref().ok().map(|o| o.plan.stages.clone())) else {
            return;
        };
        let layers = computed.with_untracked(|c| c.result.as_ref().map_or(0, |o| o.layers));
        if stages.is_empty() {
            sharded_note.set("nothing fits, so there is no plan to run".into());
            return;
        }
        busy.set(true);
        sharded_note.set(format!("running {} stages on {} WebGPU devices…", stages.len(), stages.len()));
        spawn_local(async move {
            let gpu = Gpu::new();
            let mut contexts = Vec::new();
            for _ in &stages {
                match gpu.open(0).await {
                    Ok(c) => contexts.push(c),
                    Err(e) => {
                        sharded_note.set(e.to_string());
                        busy.set(false);
                        return;
                    }
                }
            }
            let spec = MlpSpec { width: 64, layers, tokens: 32, micro_batches: 4, seed: 7 };
            let specs: Vec<StageSpec> = stages
                .iter()
                .enumerate()
                .map(|(i, s)| StageSpec { node: s.node.clone(), device: i, layers: s.layers[0]..s.layers[1] })
                .collect();
            let probes = vec![p.clone(); specs.len()];
            let predicted = stageplan_gpu::predict(&spec, &specs, &probes);
            match sharded::run_sharded(&contexts, &[specs], &spec, &mut RoundRobin::default(), Some(&predicted)).await {
                Ok(report) => {
                    sharded_rows.set(
                        report
                            .stages
                            .iter()
                            .map(|s| {
                                (
                                    s.node.clone(),
                                    format!("{}–{}", s.layers[0], s.layers[1]),
                                    s.predicted_s.map_or_else(|| "–".into(), format_seconds),
                                    format_seconds(s.measured_s),
                                    s.ratio.map_or_else(|| "–".into(), |r| format!("{r:.2}")),
                                )
                            })
                            .collect(),
                    );
                    sharded_note.set(format!(
                        "{} MLP layers of width {}, {} micro-batches of {} rows: checked against the CPU (largest relative error {:.1e}); {:.0} rows/s",
                        spec.layers, spec.width, spec.micro_batches, spec.tokens, report.max_error, report.tokens_per_s
                    ));
                }
                Err(e) => sharded_note.set(e.to_string()),
            }
            busy.set(false);
        });
    };
    view! {
        <section class="panel device" id="device">
            <h2>"This device"</h2>
            <p>"Measure this device with WebGPU — bandwidth and matrix-multiply throughput, checked against the CPU — and add it to the cluster."</p>
            <div class="row">
                <button id="probe" type="button" disabled=move || busy.get() on:click=run_probe>"Measure this device"</button>
                <button id="add-this-device" type="button" disabled=move || probe.with(Option::is_none) on:click=add_device>"Add it as a machine"</button>
                <button id="run-sharded" type="button" disabled=move || busy.get() || probe.with(Option::is_none) on:click=run_sharded>"Run the plan as kernels"</button>
            </div>
            <p id="probe-status" aria-live="polite">{move || status.get()}</p>
            {move || probe.get().map(|p| view! {
                <dl id="probe-result" class="probe">
                    <dt>"adapter"</dt><dd>{format!("{} ({}, {})", p.adapter.name, p.adapter.backend, p.adapter.device_type)}</dd>
                    <dt>"bandwidth"</dt><dd id="probe-bandwidth">{format!("{} (spread {:.0}%)", format_bandwidth(p.bandwidth.median), p.bandwidth.spread * 100.0)}</dd>
                    <dt>"f32 matmul"</dt><dd id="probe-compute">{format!("{} (spread {:.0}%)", format_compute(p.compute_f32.median), p.compute_f32.spread * 100.0)}</dd>
                    <dt>"f16 matmul"</dt><dd>{p.compute_f16.as_ref().map_or_else(|| "no shader-f16".to_owned(), |m| format_compute(m.median))}</dd>
                    <dt>"limits"</dt><dd>{format!("max buffer {}, storage binding {}", format_bytes(p.adapter.limits.max_buffer_size as f64), format_bytes(p.adapter.limits.max_storage_buffer_binding_size as f64))}</dd>
                </dl>
            })}
            <p id="sharded-status" aria-live="polite">{move || sharded_note.get()}</p>
            {move || (!sharded_rows.with(Vec::is_empty)).then(|| view! {
                <table id="sharded-result" class="stages">
                    <thead><tr><th scope="col">"stage"</th><th scope="col">"layers"</th><th scope="col">"predicted"</th><th scope="col">"measured"</th><th scope="col">"ratio"</th></tr></thead>
                    <tbody>{sharded_rows.get().into_iter().map(|(n, l, p, m, r)| view! {
                        <tr><th scope="row">{n}</th><td>{l}</td><td>{p}</td><td>{m}</td><td>{r}</td></tr>
                    }).collect_view()}</tbody>
                </table>
            })}
        </section>
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
    let import_text = RwSignal::new(String::new());
    let share = move |_| {
        let fragment = state.with_untracked(AppState::to_fragment);
        if let Some(window) = web_sys::window() {
            let base = window.location().href().unwrap_or_default();
            let base = base.split('#').next().unwrap_or_default().to_owned();
            if let Ok(history) = window.history() {
                let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("#{fragment}")));
            }
            let url = format!("{base}#{fragment}");
            let _ = window.navigator().clipboard().write_text(&url);
            link.set(url);
        }
    };
    let import = move |_| {
        let text = import_text.get_untracked();
        match stageplan::Scenario::from_json(&text) {
            Ok(scenario) => {
                state.set(AppState::from_scenario(&scenario));
                notice.set(None);
            }
            Err(e) => notice.set(Some(format!("the scenario was not imported: {e}"))),
        }
    };
    view! {
        <section class="panel share" id="share-panel">
            <h2>"Share and export"</h2>
            <div class="row">
                <button id="share" type="button" on:click=share>"Copy a share link"</button>
                <button id="download-scenario" type="button" on:click=move |_| computed.with(|c| if let Ok(o) = &c.result { download("scenario.json", &o.scenario_json) })>"Download scenario JSON"</button>
                <button id="download-plan" type="button" on:click=move |_| computed.with(|c| if let Ok(o) = &c.result { download("plan.json", &o.plan_json) })>"Download plan JSON"</button>
            </div>
            <label class="field" for="share-link"><span>"Share link (the whole state is in the link; nothing is uploaded)"</span>
                <input id="share-link" type="text" readonly prop:value=move || link.get()/></label>
            <details>
                <summary>"Scenario JSON (what `stageplan plan` reads)"</summary>
                <pre id="scenario-json">{move || computed.with(|c| c.result.as_ref().map(|o| o.scenario_json.clone()).unwrap_or_default())}</pre>
            </details>
            <details>
                <summary>"Plan JSON"</summary>
                <pre id="plan-json">{move || computed.with(|c| c.result.as_ref().map(|o| o.plan_json.clone()).unwrap_or_default())}</pre>
            </details>
            <label class="field" for="import-json"><span>"Import a scenario JSON"</span>
                <textarea id="import-json" rows="4" spellcheck="false" prop:value=move || import_text.get()
                    on:input=move |ev| import_text.set(event_target_value(&ev))></textarea></label>
            <button id="import" type="button" on:click=import>"Import"</button>
        </section>
    }
}
