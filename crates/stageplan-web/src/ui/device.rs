//! This device through WebGPU: probe it, add it as a node, run the plan as kernels. The
//! work happens in the page's worker ([`crate::worker`]), started on the first click.

use leptos::prelude::*;
use stageplan::units::{Dimension, format_bandwidth, format_bytes, format_compute, format_seconds};

use crate::planning::Computed;
use crate::state::{AppState, NodeDraft, quantity_text};
use crate::worker::{Measured, PageWorker, Reply, Request, ShardedRun};

/// A row of the sharded run's table: stage, layers, predicted, measured, ratio.
type ShardedRow = (String, String, String, String, String);

/// What the worker is doing for the panel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Task {
    Probe,
    Sharded,
}

/// This device through WebGPU: probe it, add it as a node, run the plan as kernels.
#[component]
pub fn DevicePanel(
    state: RwSignal<AppState>,
    computed: Memo<Computed>,
    worker: StoredValue<PageWorker, LocalStorage>,
) -> impl IntoView {
    let status = RwSignal::new(String::new());
    let probe: RwSignal<Option<Measured>> = RwSignal::new(None);
    // The request the panel waits for, and what it is.
    let task: RwSignal<Option<(u64, Task)>> = RwSignal::new(None);
    let busy = move || task.with(Option::is_some);
    let sharded_rows: RwSignal<Vec<ShardedRow>> = RwSignal::new(Vec::new());
    let sharded_note = RwSignal::new(String::new());
    worker.with_value(|w| {
        w.listen(move |id, reply| {
            // Answers to this panel's request, and failures of the worker itself.
            let Some((waiting, kind)) = task.get_untracked() else { return };
            if id.is_some_and(|id| id != waiting) {
                return;
            }
            match reply {
                Reply::Progress(step) => return status.set(step.clone()),
                Reply::Probed(measured) => {
                    status.set(format!("measured in {:.1} s", measured.seconds));
                    probe.set(Some(measured.clone()));
                }
                Reply::Sharded(run) => {
                    sharded_rows.set(sharded_table(run));
                    sharded_note.set(run.summary.clone());
                }
                Reply::Failed(message) if kind == Task::Sharded => sharded_note.set(message.clone()),
                Reply::Failed(message) => status.set(message.clone()),
                Reply::Ready
                | Reply::Exported(_)
                | Reply::ModelRead(_)
                | Reply::ConfigRead(_)
                | Reply::Calibrated(_)
                | Reply::Swept(_) => {
                    return;
                }
            }
            task.set(None);
        });
    });
    let run_probe = move |_| {
        status.set("looking for a WebGPU adapter…".into());
        let id = worker.with_value(|w| w.send(Request::Probe));
        task.set(Some((id, Task::Probe)));
    };
    let add_device = move |_| {
        if let Some(p) = probe.get_untracked() {
            state.update(|s| {
                let id = s.next_id();
                s.nodes.push(NodeDraft {
                    id,
                    name: "this-device".into(),
                    memory: quantity_text(p.memory_bytes as f64, Dimension::Memory),
                    // Three figures: the measurement's own spread is wider than that.
                    bandwidth: quantity_text(three_figures(p.bandwidth), Dimension::Bandwidth),
                    compute: quantity_text(three_figures(p.compute), Dimension::Compute),
                    reserve: "0".into(),
                    enabled: true,
                    // Measured: planned as what the device reaches, with the probe's error
                    // band, not a spec sheet's fitted terms (issue #33).
                    fit: serde_json::json!({"probe": {
                        "adapter": p.adapter,
                        "backend": "webgpu",
                        "bandwidth_spread": p.bandwidth_spread,
                        "compute_spread": p.compute_f32_spread,
                        "method": "the page's WebGPU probe",
                    }})
                    .to_string(),
                    ..NodeDraft::default()
                });
            });
        }
    };
    let run_sharded = move |_| {
        if probe.with_untracked(Option::is_none) {
            return;
        }
        let Some((stages, layers)) = computed.with_untracked(|c| {
            c.result
                .as_ref()
                .ok()
                .map(|o| (o.plan.stages.iter().map(|s| (s.node.clone(), s.layers)).collect::<Vec<_>>(), o.layers))
        }) else {
            return;
        };
        if stages.is_empty() {
            sharded_note.set("nothing fits, so there is no plan to run".into());
            return;
        }
        sharded_note.set(format!("running {} stages on {} WebGPU devices…", stages.len(), stages.len()));
        let id = worker.with_value(|w| w.send(Request::Sharded { layers, stages }));
        task.set(Some((id, Task::Sharded)));
    };
    view! {
        <section class="panel device" id="device">
            <h2>"This device"</h2>
            <p>"Measure this device with WebGPU — bandwidth and matrix-multiply throughput, checked against the CPU — and add it to the cluster."</p>
            <div class="row">
                <button id="probe" type="button" disabled=busy on:click=run_probe>"Measure this device"</button>
                <button id="add-this-device" type="button" disabled=move || probe.with(Option::is_none) on:click=add_device>"Add it as a machine"</button>
                <button id="run-sharded" type="button" disabled=move || busy() || probe.with(Option::is_none) on:click=run_sharded>"Run the plan as kernels"</button>
            </div>
            <p id="probe-status" aria-live="polite">{move || status.get()}</p>
            {move || probe.get().map(|p| view! {
                <div id="probe-said">{p.said.iter().enumerate().map(|(i, line)| view! {
                    <p class:warning={i > 0}>{line.clone()}</p>
                }).collect_view()}</div>
                <dl id="probe-result" class="probe">
                    <dt>"adapter"</dt><dd>{p.adapter.clone()}</dd>
                    <dt>"bandwidth"</dt><dd id="probe-bandwidth">{format!("{} (spread {:.0}%)", format_bandwidth(p.bandwidth), p.bandwidth_spread * 100.0)}</dd>
                    <dt>"f32 matmul"</dt><dd id="probe-compute">{format!("{} (spread {:.0}%)", format_compute(p.compute_f32), p.compute_f32_spread * 100.0)}</dd>
                    <dt>"f16 matmul"</dt><dd>{p.compute_f16.map_or_else(|| "no shader-f16".to_owned(), format_compute)}</dd>
                    <dt>"limits"</dt><dd>{format!("max buffer {}, storage binding {}", format_bytes(p.max_buffer_size as f64), format_bytes(p.max_storage_buffer_binding_size as f64))}</dd>
                </dl>
            })}
            <p id="sharded-status" aria-live="polite">{move || sharded_note.get()}</p>
            {move || (!sharded_rows.with(Vec::is_empty)).then(|| view! {
                <table id="sharded-result" class="stages">
                    <thead><tr><th scope="col">"stage"</th><th scope="col">"layers"</th><th scope="col">"predicted"</th><th scope="col">"measured"</th><th scope="col">"ratio"</th></tr></thead>
                    <tbody>{sharded_rows.get().into_iter().map(|(n, l, p, m, r)| view! {
                        <tr><th scope="row">{super::text::name(n)}</th><td>{l}</td><td>{p}</td><td>{m}</td><td>{r}</td></tr>
                    }).collect_view()}</tbody>
                </table>
            })}
        </section>
    }
}

/// `x` rounded to three significant figures (`1516013494` → `1.52e9`).
fn three_figures(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 0.0;
    }
    let scale = 10f64.powi(x.log10().floor() as i32 - 2);
    (x / scale).round() * scale
}

/// The sharded run's table: per stage its node, layers, predicted and measured seconds.
fn sharded_table(run: &ShardedRun) -> Vec<ShardedRow> {
    run.stages
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
        .collect()
}
