//! The scenario's inputs: the model and workload, the machines and their links.

use leptos::prelude::*;
use stageplan::model::WeightFormat;
use stageplan::presets::{DEVICES, MODELS};
use stageplan::quote::line;
use stageplan::scenario::Objective;
use stageplan::tensor_type::KV_FORMATS;
use stageplan::units::format_bytes;
use wasm_bindgen::JsCast;

use super::text::{name, prose};
use crate::fields::{InputError, Place};
use crate::state::{AppState, ModelSource, NodeDraft, PairDraft};
use crate::worker::{Dropped, PageWorker, Reply, Request};

/// The problem at `place`, if the input there is what stops the plan.
pub(crate) fn problem_at(problem: Memo<Option<InputError>>, place: Place) -> Signal<Option<String>> {
    Signal::derive(move || problem.with(|p| p.as_ref().and_then(|e| e.message_at(place)).map(str::to_owned)))
}

/// A field's problem beside it, and its id for the input's `aria-describedby`.
fn field_error(id: String, message: Signal<Option<String>>) -> impl IntoView {
    move || message.get().map(|m| view! { <span class="field-error" id=id.clone() role="alert">{prose(&m)}</span> })
}

/// A labelled text input bound to one string of the state, marked when it is what is wrong.
#[component]
fn Field(
    id: &'static str,
    label: &'static str,
    #[prop(optional)] hint: &'static str,
    value: Signal<String>,
    set: impl Fn(String) + 'static,
    problem: Memo<Option<InputError>>,
) -> impl IntoView {
    let error = problem_at(problem, Place::Field(id));
    let error_id = format!("{id}-error");
    view! {
        <label class="field" for=id>
            <span>{label}</span>
            <input id=id type="text" autocomplete="off" spellcheck="false" placeholder=hint
                aria-invalid=move || error.with(Option::is_some).then_some("true")
                aria-describedby={let error_id = error_id.clone(); move || error.with(Option::is_some).then(|| error_id.clone())}
                prop:value=move || value.get() on:input=move |ev| set(event_target_value(&ev))/>
            {field_error(error_id, error)}
        </label>
    }
}

/// Model, weight format, context, sequences, KV format and objective.
#[component]
pub fn ModelPanel(
    state: RwSignal<AppState>,
    dropped: RwSignal<Vec<Dropped>>,
    notice: RwSignal<Option<String>>,
    worker: StoredValue<PageWorker, LocalStorage>,
    problem: Memo<Option<InputError>>,
) -> impl IntoView {
    let source = move || state.with(|s| s.model.source);
    let set_source = move |source: ModelSource| state.update(|s| s.model.source = source);
    // The worker reads the headers (the parsers are not in the page's download): the
    // request waited for, 0 when none.
    let waiting = RwSignal::new(0_u64);
    let reading = move || waiting.get() != 0;
    worker.with_value(|w| {
        w.answers(waiting, move |reply| {
            match reply {
                Reply::ModelRead(read) => {
                    // The file the scenario's draft names is the draft's; any other is the model.
                    let draft = state.with_untracked(|s| s.model.draft_field("file")).is_some_and(|f| read.is(&f));
                    if !draft {
                        state.update(|s| {
                            s.model.source = ModelSource::File;
                            s.model.file = read.file();
                        });
                    }
                    dropped.update(|kept| Dropped::keep(kept, (**read).clone()));
                    notice.set(None);
                }
                Reply::Failed(message) => notice.set(Some(message.clone())),
                _ => return false,
            }
            true
        });
    });
    let take_files = move |files: Vec<web_sys::File>| {
        if !files.is_empty() {
            waiting.set(worker.with_value(|w| w.send_with_files(Request::ReadModel, &files)));
        }
    };
    let file_list = |files: Option<web_sys::FileList>| -> Vec<web_sys::File> {
        files.map(|list| (0..list.length()).filter_map(|i| list.get(i)).collect()).unwrap_or_default()
    };
    let config_error = problem_at(problem, Place::Field("config"));
    // Files held over the drop zone: it says it will take them.
    let dragging = RwSignal::new(false);
    let weights: Vec<String> = WeightFormat::all().iter().map(ToString::to_string).collect();
    let draft_weights = weights.clone();
    let draft_error = problem_at(problem, Place::Field("draft"));
    view! {
        <fieldset class="panel">
            <legend>"Model"</legend>
            <div class="tabs" role="radiogroup" aria-label="model source">
                {[(ModelSource::Preset, "preset", "Preset"), (ModelSource::Config, "config", "config.json"), (ModelSource::File, "file", "Model file")]
                    .into_iter()
                    .map(|(value, id, label)| view! {
                        <label class="tab" class:active=move || source() == value>
                            <input type="radio" name="model-source" id=format!("source-{id}") value=id
                                prop:checked=move || source() == value on:change=move |_| set_source(value)/>
                            {label}
                        </label>
                    })
                    .collect_view()}
            </div>
            <Show when=move || source() == ModelSource::Preset>
                <label class="field" for="preset">
                    <span>"Preset"</span>
                    <select id="preset" on:change=move |ev| state.update(|s| s.model.preset = event_target_value(&ev))>
                        {MODELS.iter().map(|m| view! {
                            <option value=m.name selected=move || state.with(|s| s.model.preset == m.name)>{m.title}</option>
                        }).collect_view()}
                    </select>
                </label>
            </Show>
            <Show when=move || source() == ModelSource::Config>
                <label class="field" for="config">
                    <span>"Hugging Face config.json"</span>
                    <textarea id="config" rows="6" spellcheck="false" placeholder="{\"hidden_size\": 4096, …}"
                        aria-invalid=move || config_error.with(Option::is_some).then_some("true")
                        aria-describedby=move || config_error.with(Option::is_some).then_some("config-error")
                        prop:value=move || state.with(|s| s.model.config.clone())
                        on:input=move |ev| state.update(|s| s.model.config = event_target_value(&ev))></textarea>
                    {field_error("config-error".to_owned(), config_error)}
                </label>
            </Show>
            <Show when=move || source() != ModelSource::File>
                <label class="field" for="weights">
                    <span>"Weights"</span>
                    <select id="weights" prop:value=move || state.with(|s| s.model.weights.clone()) on:change=move |ev| state.update(|s| s.model.weights = event_target_value(&ev))>
                        {weights.clone().into_iter().map(|w| {
                            let shown = w.clone();
                            view! { <option value=w.clone() selected=move || state.with(|s| s.model.weights == w)>{shown}</option> }
                        }).collect_view()}
                    </select>
                </label>
            </Show>
            // Speculative decoding's draft model rides along whole on one machine (#35).
            <label class="field" for="draft">
                <span>"Draft model"</span>
                <select id="draft" aria-invalid=move || draft_error.with(Option::is_some).then_some("true")
                    aria-describedby=move || draft_error.with(Option::is_some).then_some("draft-error")
                    on:change=move |ev| {
                        let chosen = event_target_value(&ev);
                        state.update(|s| match chosen.as_str() {
                            "" => s.model.set_draft(None, ""),
                            // An imported draft (a config or a file) stays as it was.
                            "imported" => {}
                            preset => {
                                let weights = s.model.draft_field("weights").unwrap_or_else(|| "q8_0".into());
                                s.model.set_draft(Some(preset), &weights);
                            }
                        });
                    }>
                    <option value="" selected=move || state.with(|s| s.model.draft.is_empty())>"none"</option>
                    <Show when=move || state.with(|s| !s.model.draft.is_empty() && s.model.draft_field("preset").is_none())>
                        <option value="imported" selected=true>"as imported"</option>
                    </Show>
                    {MODELS.iter().map(|m| view! {
                        <option value=m.name selected=move || state.with(|s| s.model.draft_field("preset").as_deref() == Some(m.name))>{m.title}</option>
                    }).collect_view()}
                </select>
                {field_error("draft-error".to_owned(), draft_error)}
            </label>
            <Show when=move || state.with(|s| s.model.draft_field("preset").is_some())>
                <label class="field" for="draft-weights">
                    <span>"Draft weights"</span>
                    <select id="draft-weights" on:change=move |ev| {
                        let chosen = event_target_value(&ev);
                        state.update(|s| if let Some(preset) = s.model.draft_field("preset") { s.model.set_draft(Some(&preset), &chosen) });
                    }>
                        {draft_weights.clone().into_iter().map(|w| {
                            let shown = w.clone();
                            view! { <option value=w.clone() selected=move || state.with(|s| s.model.draft_field("weights").as_deref() == Some(w.as_str()))>{shown}</option> }
                        }).collect_view()}
                    </select>
                </label>
            </Show>
            // A vision projector (`--mmproj`) rides along whole too: its weights and the
            // buffers that encode an image (the CLI reads both from the file's header).
            <Field id="mmproj-weights" label="Vision projector weights" hint="none, or 600 MiB"
                value=Signal::derive(move || state.with(|s| s.model.projector_field("weights")))
                set=move |v| state.update(|s| s.model.set_projector("weights", &v)) problem=problem/>
            <Show when=move || state.with(|s| !s.model.mmproj.is_empty())>
                <Field id="mmproj-compute" label="Projector compute buffer" hint="30 MiB"
                    value=Signal::derive(move || state.with(|s| s.model.projector_field("compute")))
                    set=move |v| state.update(|s| s.model.set_projector("compute", &v)) problem=problem/>
            </Show>
            <div id="drop-zone" class="drop" class:busy=reading class:dragging=move || dragging.get()
                on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
                on:dragleave=move |_| dragging.set(false)
                on:drop=move |ev: web_sys::DragEvent| {
                    ev.prevent_default();
                    dragging.set(false);
                    take_files(file_list(ev.data_transfer().and_then(|d| d.files())));
                }>
                <label for="model-file">"Drop a .gguf, .safetensors or model.safetensors.index.json (with its shards) — only the header is read"</label>
                <input id="model-file" type="file" multiple
                    on:change=move |ev| {
                        let input: web_sys::HtmlInputElement = event_target(&ev);
                        take_files(file_list(input.files()));
                    }/>
                <p id="file-status" aria-live="polite">{move || match (reading(), dropped.with(|d| d.last().cloned())) {
                    (true, _) => "reading the header…".to_owned(),
                    (false, Some(d)) => format!(
                        "{}: read {} of {} ({:.3}%) — {} tensors",
                        // The files' names as the CLI prints them: no control or
                        // bidirectional character to reorder the figures after them.
                        d.names.iter().map(|n| line(n)).collect::<Vec<_>>().join(", "),
                        format_bytes(d.bytes_read as f64),
                        format_bytes(d.file_bytes as f64),
                        d.bytes_read as f64 * 100.0 / d.file_bytes.max(1) as f64,
                        d.model.tensors.len()
                    ),
                    (false, None) => String::new(),
                }}</p>
                {field_error("model-file-error".to_owned(), problem_at(problem, Place::Field("model-file")))}
            </div>
        </fieldset>
        <fieldset class="panel">
            <legend>"Workload"</legend>
            <div class="row">
                <Field id="context" label="Context (tokens)" hint="8192 or 32k" value=Signal::derive(move || state.with(|s| s.context.clone()))
                    set=move |v| state.update(|s| s.context = v) problem=problem/>
                <Field id="batch" label="Concurrent sequences" value=Signal::derive(move || state.with(|s| s.batch.clone()))
                    set=move |v| state.update(|s| s.batch = v) problem=problem/>
                <label class="field" for="kv">
                    <span>"KV cache"</span>
                    <select id="kv" prop:value=move || state.with(|s| s.kv.clone()) on:change=move |ev| state.update(|s| s.kv = event_target_value(&ev))>
                        {KV_FORMATS.iter().map(|k| view! {
                            <option value=k.name() selected=move || state.with(|s| s.kv == k.name())>{k.name()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label class="field" for="kv-v">
                    <span>"V cache"</span>
                    <select id="kv-v" prop:value=move || state.with(|s| s.kv_v.clone()) on:change=move |ev| state.update(|s| s.kv_v = event_target_value(&ev))>
                        <option value="" selected=move || state.with(|s| s.kv_v.is_empty())>"as K"</option>
                        {KV_FORMATS.iter().map(|k| view! {
                            <option value=k.name() selected=move || state.with(|s| s.kv_v == k.name())>{k.name()}</option>
                        }).collect_view()}
                    </select>
                    {field_error("kv-v-error".to_owned(), problem_at(problem, Place::Field("kv-v")))}
                </label>
            </div>
            <div class="tabs" role="radiogroup" aria-label="objective">
                {[(Objective::Throughput, "Throughput (all sequences)"), (Objective::Latency, "Latency (one step's trip)")]
                    .into_iter()
                    .map(|(value, label)| view! {
                        <label class="tab" class:active=move || state.with(|s| s.objective == value)>
                            <input type="radio" name="objective" id=format!("objective-{}", value.name()) value=value.name()
                                prop:checked=move || state.with(|s| s.objective == value)
                                on:change=move |_| state.update(|s| s.objective = value)/>
                            {label}
                        </label>
                    })
                    .collect_view()}
            </div>
        </fieldset>
    }
}

/// One machine: name, device or figures, what-if switch, duplicate, remove.
#[component]
fn NodeRow(state: RwSignal<AppState>, id: u64, problem: Memo<Option<InputError>>) -> impl IntoView {
    // Mixed GPUs name their devices in the GPUs field: the row's device stands for none.
    let mixed =
        Signal::derive(move || state.with(|s| s.nodes.iter().find(|n| n.id == id).is_some_and(NodeDraft::mixed_gpus)));
    let get = move |f: fn(&NodeDraft) -> String| {
        Signal::derive(move || state.with(|s| s.nodes.iter().find(|n| n.id == id).map(f).unwrap_or_default()))
    };
    let set = move |f: fn(&mut NodeDraft, String)| {
        move |value: String| {
            state.update(|s| {
                if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) {
                    f(n, value);
                }
            });
        }
    };
    let enabled = move || state.with(|s| s.nodes.iter().find(|n| n.id == id).is_some_and(|n| n.enabled));
    let custom = move || state.with(|s| s.nodes.iter().find(|n| n.id == id).is_some_and(|n| n.device.is_empty()));
    // The kind a preset device brings, shown where no kind is chosen.
    let preset_kind = move || {
        let device = get(|n| n.device.clone()).get();
        stageplan::presets::DevicePreset::find(&device).ok().map(|p| match p.kind {
            stageplan::device::DeviceKind::Gpu => "GPU",
            stageplan::device::DeviceKind::Unified => "Apple silicon",
            stageplan::device::DeviceKind::Cpu => "CPU",
        })
    };
    let input = move |part: &'static str,
                      label: &'static str,
                      hint: &'static str,
                      value: Signal<String>,
                      on: Box<dyn Fn(String)>| {
        let error = problem_at(problem, Place::Node(id, part));
        let error_id = format!("node-{id}-{part}-error");
        view! {
            <label class="field small">
                <span>{label}</span>
                <input class=format!("node-{part}") type="text" autocomplete="off" spellcheck="false" placeholder=hint
                    aria-invalid=move || error.with(Option::is_some).then_some("true")
                    aria-describedby={let error_id = error_id.clone(); move || error.with(Option::is_some).then(|| error_id.clone())}
                    prop:value=move || value.get() on:input=move |ev| on(event_target_value(&ev))/>
                {field_error(error_id, error)}
            </label>
        }
    };
    view! {
        <li class="node" class:off=move || !enabled() data-node=move || get(|n| n.name.clone()).get()>
            <div class="node-head">
                <label class="switch" title="switch this machine off to see the plan without it">
                    <input class="node-enabled" type="checkbox" prop:checked=enabled
                        on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            state.update(|s| if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) { n.enabled = on });
                        }/>
                    <span class="visually-hidden">"use "<bdi>{move || get(|n| n.name.clone()).get()}</bdi></span>
                </label>
                {input("name", "Name", "desk", get(|n| n.name.clone()), Box::new(set(|n, v| n.name = v)))}
                <label class="field small device" title=move || mixed.get().then_some("each GPU's device is named in GPUs")>
                    <span>"Device"</span>
                    <select class="node-device" disabled=mixed on:change=move |ev| {
                        let device = event_target_value(&ev);
                        state.update(|s| if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) { n.choose_device(&device) });
                    }>
                        <option value="" selected=custom>"custom figures"</option>
                        {DEVICES.iter().map(|d| view! {
                            <option value=d.name selected=move || get(|n| n.device.clone()).get() == d.name>{d.title}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label class="field small kind" title="what the exports name its device and request for it">
                    <span>"Kind"</span>
                    <select class="node-kind" on:change=move |ev| {
                        let kind = event_target_value(&ev);
                        state.update(|s| if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) { n.kind = kind });
                    }>
                        <option value="" selected=move || get(|n| n.kind.clone()).get().is_empty()>{move || preset_kind().map_or_else(|| "–".to_owned(), |k| format!("{k} (device)"))}</option>
                        {[("gpu", "GPU"), ("unified", "Apple silicon"), ("cpu", "CPU")].map(|(value, title)| view! {
                            <option value=value selected=move || get(|n| n.kind.clone()).get() == value>{title}</option>
                        }).collect_view()}
                    </select>
                </label>
                <button type="button" class="node-duplicate" title="duplicate this machine"
                    aria-label=move || format!("duplicate {}", get(|n| n.name.clone()).get()) on:click=move |_| state.update(|s| {
                    let next = s.next_id();
                    if let Some(pos) = s.nodes.iter().position(|n| n.id == id) {
                        let mut copy = s.nodes[pos].clone();
                        copy.id = next;
                        copy.name = format!("{}-copy", copy.name);
                        s.nodes.insert(pos + 1, copy);
                    }
                })>"Copy"</button>
                <button type="button" class="node-remove" title="remove this machine"
                    aria-label=move || format!("remove {}", get(|n| n.name.clone()).get())
                    on:click=move |_| state.update(|s| s.nodes.retain(|n| n.id != id))>"✕"</button>
            </div>
            <div class="node-figures">
                {input("memory", "Memory", "from preset", get(|n| n.memory.clone()), Box::new(set(|n, v| n.memory = v)))}
                {input("bandwidth", "Bandwidth", "from preset", get(|n| n.bandwidth.clone()), Box::new(set(|n, v| n.bandwidth = v)))}
                {input("compute", "Compute", "from preset", get(|n| n.compute.clone()), Box::new(set(|n, v| n.compute = v)))}
                {input("reserve", "Reserve", "from preset", get(|n| n.reserve.clone()), Box::new(set(|n, v| n.reserve = v)))}
                <label class="field small ram" title="system RAM beside the device: the plan may keep layers, or MoE experts, there">
                    <span>"System RAM"</span>
                    <select class="node-ram" on:change=move |ev| {
                        let ram = event_target_value(&ev);
                        state.update(|s| if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) { n.ram = ram });
                    }>
                        <option value="" selected=move || get(|n| n.ram.clone()).get().is_empty()>"none (one memory)"</option>
                        {stageplan::presets::RAM.iter().map(|r| view! {
                            <option value=r.name selected=move || get(|n| n.ram.clone()).get() == r.name>{r.title}</option>
                        }).collect_view()}
                    </select>
                    {field_error(format!("node-{id}-ram-error"), problem_at(problem, Place::Node(id, "ram")))}
                </label>
                {input("ram-memory", "RAM size", "64 GiB", get(|n| n.ram_memory.clone()), Box::new(set(|n, v| n.ram_memory = v)))}
                {input("gpus", "GPUs", "1", get(|n| n.gpus.clone()), Box::new(set(|n, v| n.gpus = v)))}
                <label class="field small gpu-link" title="how the machine's GPUs reach each other">
                    <span>"GPU link"</span>
                    <select class="node-gpu-link" on:change=move |ev| {
                        let link = event_target_value(&ev);
                        state.update(|s| if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) { n.gpu_link = link });
                    }>
                        <option value="" selected=move || get(|n| n.gpu_link.clone()).get().is_empty()>"PCIe 4.0 x16 (default)"</option>
                        {stageplan::presets::GPU_LINKS.iter().map(|l| view! {
                            <option value=l.name selected=move || get(|n| n.gpu_link.clone()).get() == l.name>{l.title}</option>
                        }).collect_view()}
                    </select>
                    {field_error(format!("node-{id}-gpu-link-error"), problem_at(problem, Place::Node(id, "gpu-link")))}
                </label>
            </div>
        </li>
    }
}

/// The machines and the links between them.
#[component]
pub fn ClusterPanel(
    state: RwSignal<AppState>,
    problem: Memo<Option<InputError>>,
    notice: RwSignal<Option<String>>,
    worker: StoredValue<PageWorker, LocalStorage>,
) -> impl IntoView {
    let chosen = RwSignal::new("rtx-4090".to_owned());
    // A machine's llama-bench results, dropped on its row, are read and fitted in the worker
    // (`stageplan calibrate`'s road); the fit lands in the machine's draft.
    let waiting = RwSignal::new(0_u64);
    let said =
        RwSignal::new("Drop a machine's llama-bench -o json results on its row to fit its speed to them.".to_owned());
    worker.with_value(|w| {
        w.answers(waiting, move |reply| {
            match reply {
                Reply::Calibrated(fitted) => {
                    state.update(|s| {
                        if let Some(n) = s.nodes.iter_mut().find(|n| n.name == fitted.node) {
                            n.fit.clone_from(&fitted.fit);
                        }
                    });
                    said.set(fitted.said.clone());
                }
                Reply::Failed(message) => notice.set(Some(message.clone())),
                _ => return false,
            }
            true
        });
    });
    let drop = move |ev: web_sys::DragEvent| {
        let row = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()?.closest("li.node").ok()?);
        let file = ev.data_transfer().and_then(|d| d.files()?.get(0));
        let (Some(row), Some(file)) = (row, file) else { return };
        ev.prevent_default();
        let name = row.get_attribute("data-node").unwrap_or_default();
        let node = state.with_untracked(|s| {
            let index = s.nodes.iter().position(|n| n.name == name)?;
            s.scenario_json()["nodes"].get(index).map(ToString::to_string)
        });
        if let Some(node) = node {
            waiting.set(worker.with_value(|w| w.send_with_files(Request::Calibrate { node }, &[file])));
        }
    };
    let add = move |_| {
        let device = chosen.get_untracked();
        state.update(|s| {
            let id = s.next_id();
            let base = device.split('-').next().unwrap_or("node").to_owned();
            let mut name = base.clone();
            let mut k = 2;
            while s.nodes.iter().any(|n| n.name == name) {
                name = format!("{base}-{k}");
                k += 1;
            }
            let mut node = if device.is_empty() {
                NodeDraft {
                    name,
                    memory: "16 GiB".into(),
                    bandwidth: "100 GB/s".into(),
                    compute: "10 TFLOPS".into(),
                    enabled: true,
                    ..NodeDraft::default()
                }
            } else {
                NodeDraft::preset(&name, &device)
            };
            node.id = id;
            s.nodes.push(node);
        });
    };
    view! {
        <fieldset class="panel">
            <legend>"Machines"</legend>
            <p id="machines-said" class="hint" aria-live="polite">{move || said.get()}</p>
            <ul class="nodes" on:dragover=move |ev: web_sys::DragEvent| ev.prevent_default() on:drop=drop>
                <For each=move || state.with(|s| s.nodes.iter().map(|n| n.id).collect::<Vec<_>>()) key=|id| *id let:id>
                    <NodeRow state=state id=id problem=problem/>
                </For>
            </ul>
            <div class="row add">
                <label class="field" for="add-device">
                    <span>"Add a machine"</span>
                    <select id="add-device" on:change=move |ev| chosen.set(event_target_value(&ev))>
                        {DEVICES.iter().map(|d| view! { <option value=d.name selected=move || chosen.get() == d.name>{d.title}</option> }).collect_view()}
                        <option value="">"custom figures"</option>
                    </select>
                </label>
                <button id="add-node" type="button" on:click=add>"Add"</button>
            </div>
        </fieldset>
        <fieldset class="panel">
            <legend>"Links"</legend>
            <div class="row">
                <Field id="link-bandwidth" label="Default bandwidth" hint="GB/s" problem=problem
                    value=Signal::derive(move || state.with(|s| s.link_bandwidth.clone()))
                    set=move |v| state.update(|s| s.link_bandwidth = v)/>
                <Field id="link-latency" label="Default latency" hint="ms" problem=problem
                    value=Signal::derive(move || state.with(|s| s.link_latency.clone()))
                    set=move |v| state.update(|s| s.link_latency = v)/>
            </div>
            <ul class="pairs">
                {move || state.with(|s| s.pairs.clone()).into_iter().enumerate().map(|(i, p)| view! {
                    <li class="pair">
                        <span>{name(p.a)}" ↔ "{name(p.b)}{format!(": {}, {}", p.bandwidth, p.latency)}</span>
                        <button type="button" on:click=move |_| state.update(|s| { if i < s.pairs.len() { s.pairs.remove(i); } })>"Remove"</button>
                    </li>
                }).collect_view()}
            </ul>
            <PairForm state=state/>
        </fieldset>
    }
}

/// Adds a link override between two machines.
#[component]
fn PairForm(state: RwSignal<AppState>) -> impl IntoView {
    let draft =
        RwSignal::new(PairDraft { bandwidth: "10 Gbit/s".into(), latency: "0.1 ms".into(), ..PairDraft::default() });
    let names = move || state.with(|s| s.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>());
    let select = move |which: bool| {
        view! {
            <select class="pair-node" aria-label=if which { "link from machine" } else { "link to machine" } on:change=move |ev| {
                let v = event_target_value(&ev);
                draft.update(|d| if which { d.a = v } else { d.b = v });
            }>
                <option value="">"—"</option>
                {move || names().into_iter().map(|n| view! { <option value=n.clone()>{n.clone()}</option> }).collect_view()}
            </select>
        }
    };
    view! {
        <div class="row pair-form">
            <span class="label">"Link between"</span>
            {select(true)}
            {select(false)}
            <input type="text" aria-label="pair bandwidth" prop:value=move || draft.with(|d| d.bandwidth.clone())
                on:input=move |ev| draft.update(|d| d.bandwidth = event_target_value(&ev))/>
            <input type="text" aria-label="pair latency" prop:value=move || draft.with(|d| d.latency.clone())
                on:input=move |ev| draft.update(|d| d.latency = event_target_value(&ev))/>
            <button type="button" on:click=move |_| {
                let pair = draft.get_untracked();
                if !pair.a.is_empty() && !pair.b.is_empty() {
                    state.update(|s| s.pairs.push(pair));
                }
            }>"Add link"</button>
        </div>
    }
}
