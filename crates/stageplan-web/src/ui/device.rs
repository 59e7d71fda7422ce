//! This device through WebGPU: probe it, add it as a node, run the plan as kernels.

use leptos::prelude::*;
use leptos::task::spawn_local;
use stageplan::units::{Dimension, format_bandwidth, format_bytes, format_compute, format_seconds};
use stageplan_gpu::sharded::{self, MlpSpec, RoundRobin, StageSpec};
use stageplan_gpu::{Gpu, Probe, ProbeOptions};

use crate::app::Computed;
use crate::state::{AppState, NodeDraft, quantity_text};

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
