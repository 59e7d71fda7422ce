//! The page's worker (see `stageplan_web::worker`): measures this device with WebGPU, runs
//! the plan's stages as kernels, makes the engine exports and reads dropped model files'
//! headers, off the page's thread.

use std::cell::RefCell;
use std::rc::Rc;

use stageplan_gpu::router::RoundRobin;
use stageplan_gpu::sharded::{self, MlpSpec, StageSpec};
use stageplan_gpu::{Gpu, Probe, ProbeOptions};
use stageplan_web::worker::{
    Answer, Asked, Calibrated, ConfigRead, Dropped, Measured, Reply, Request, ShardedRun, StageRun,
};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;

fn main() {
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    // The last probe: what a sharded run predicts its stage times from.
    let last_probe: Rc<RefCell<Option<Probe>>> = Rc::default();
    // The models read from dropped files: what the sweeps plan where the page's model is one.
    let last_model: Rc<RefCell<Vec<Dropped>>> = Rc::default();
    let on_message = {
        let scope = scope.clone();
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let (text, files) = message_parts(&event.data());
            let (scope, last_probe, last_model) = (scope.clone(), last_probe.clone(), last_model.clone());
            spawn_local(async move { serve(&text, files, &scope, &last_probe, &last_model).await });
        })
    };
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    post(&scope, None, Reply::Ready);
}

/// A message's JSON text and the files posted with it: a message is the text alone, or an
/// array of the text and then the files.
fn message_parts(data: &JsValue) -> (String, Vec<web_sys::File>) {
    match data.dyn_ref::<js_sys::Array>() {
        Some(array) => (
            array.get(0).as_string().unwrap_or_default(),
            array.iter().skip(1).filter_map(|file| file.dyn_into::<web_sys::File>().ok()).collect(),
        ),
        None => (data.as_string().unwrap_or_default(), Vec::new()),
    }
}

/// Answers one request; even one that cannot be read gets an answer, with its id if it has
/// one, so nothing on the page waits for ever.
async fn serve(
    text: &str,
    files: Vec<web_sys::File>,
    scope: &web_sys::DedicatedWorkerGlobalScope,
    last_probe: &RefCell<Option<Probe>>,
    last_model: &RefCell<Vec<Dropped>>,
) {
    let Asked { id, request } = match serde_json::from_str::<Asked>(text) {
        Ok(asked) => asked,
        Err(e) => {
            let id = serde_json::from_str::<IdOnly>(text).ok().and_then(|asked| asked.id);
            return post(scope, id, Reply::Failed(format!("the page's worker cannot read the request: {e}")));
        }
    };
    let reply = |reply: Reply| post(scope, Some(id), reply);
    match request {
        Request::Probe => {
            if let Some(probe) = probe(&reply).await {
                *last_probe.borrow_mut() = Some(probe);
            }
        }
        Request::Sharded { layers, stages } => {
            let probe = last_probe.borrow().clone();
            match probe {
                Some(probe) => run_sharded(probe, layers, &stages, &reply).await,
                None => reply(Reply::Failed("measure this device first".into())),
            }
        }
        Request::Export { plan, target, options } => reply(match stageplan::export::export(&plan, target, &options) {
            Ok(export) => Reply::Exported(export),
            Err(e) => Reply::Failed(e.to_string()),
        }),
        Request::Sweeps { scenario, enabled } => {
            reply(match sweeps(&scenario, &enabled, &last_model.borrow()) {
                Ok(html) => Reply::Swept(html),
                Err(message) => Reply::Failed(message),
            });
        }
        Request::Calibrate { node } => reply(match calibrate(&files, &node).await {
            Ok(fitted) => Reply::Calibrated(fitted),
            Err(message) => Reply::Failed(message),
        }),
        Request::ReadConfig { text } => {
            let read = stageplan::check::read_config(&text);
            reply(Reply::ConfigRead(Box::new(ConfigRead::of(text, read))));
        }
        Request::ReadModel => reply(match stageplan_web::files::read_model(files).await {
            Ok(read) => {
                Dropped::keep(&mut last_model.borrow_mut(), read.clone());
                Reply::ModelRead(Box::new(read))
            }
            Err(message) => Reply::Failed(message),
        }),
    }
}

/// A machine (`node`: its scenario node's JSON) fitted to the llama-bench results in
/// `files`, as `stageplan calibrate` fits it.
async fn calibrate(files: &[web_sys::File], node: &str) -> Result<Calibrated, String> {
    use stageplan::fit::bench;
    use stageplan::quote::line;
    let [file] = files else {
        return Err("drop one llama-bench results file (`llama-bench -o json` or `-o jsonl`) on a machine".into());
    };
    let name = line(&file.name()).into_owned();
    if file.size() > stageplan::limits::MAX_TEXT_BYTES as f64 {
        let limit = stageplan::limits::MAX_TEXT_BYTES >> 20;
        return Err(format!("`{name}` is over {limit} MiB; llama-bench results are far smaller"));
    }
    let text = wasm_bindgen_futures::JsFuture::from(file.text())
        .await
        .ok()
        .and_then(|t| t.as_string())
        .ok_or_else(|| format!("`{name}` cannot be read as text"))?;
    let node: serde_json::Value = serde_json::from_str(node).map_err(|e| e.to_string())?;
    let tests = bench::parse(&text).map_err(|e| format!("`{name}`: {e}"))?;
    let fit = bench::fit_node(&tests, &node, None).map_err(|e| format!("`{name}`: {e}"))?;
    let machine = node["name"].as_str().unwrap_or_default().to_owned();
    let said = format!(
        "`{}` fitted to {} in `{name}`: {:.0}% of its figures' bandwidth; choose its device again to drop the fit",
        line(&machine),
        fit.summary(),
        fit.efficiency * 100.0
    );
    Ok(Calibrated { node: machine, fit: fit.fields(&node).to_string(), said })
}

/// The sweeps' markup for a scenario, a file it names answered with the one of that name
/// read from dropped files.
fn sweeps(scenario: &str, enabled: &[bool], dropped: &[Dropped]) -> Result<String, String> {
    let read = |field, file: &str| stageplan_web::planning::dropped_model(dropped, field, file);
    let problem = stageplan::check(scenario, read).map_err(|e| e.to_string())?.problem;
    Ok(stageplan_web::sweeps::sweeps_html(&problem, enabled))
}

/// The id of a request that cannot be read whole.
#[derive(serde::Deserialize)]
struct IdOnly {
    id: Option<u64>,
}

fn post(scope: &web_sys::DedicatedWorkerGlobalScope, id: Option<u64>, reply: Reply) {
    let text = serde_json::to_string(&Answer { id, reply }).unwrap_or_default();
    // Posting fails only when the page has gone away, and then no one is left to tell.
    let _ = scope.post_message(&JsValue::from_str(&text));
}

/// Finds an adapter and measures it, reporting each step; the probe, when it worked.
async fn probe(reply: &dyn Fn(Reply)) -> Option<Probe> {
    let gpu = Gpu::new();
    if gpu.adapters().await.is_empty() {
        reply(Reply::Failed(
            "WebGPU is not available in this browser (no adapter), so this device cannot be measured here; \
             everything else on the page works."
                .into(),
        ));
        return None;
    }
    let context = match gpu.open(0).await {
        Ok(context) => context,
        Err(e) => {
            reply(Reply::Failed(e.to_string()));
            return None;
        }
    };
    let started = js_sys::Date::now();
    let measured = stageplan_gpu::probe(&context, &ProbeOptions::quick(), &mut |step| {
        reply(Reply::Progress(format!("measuring {step}…")));
    })
    .await;
    match measured {
        Ok(probe) => {
            reply(Reply::Probed(measured_figures(&probe, (js_sys::Date::now() - started) / 1000.0)));
            Some(probe)
        }
        Err(e) => {
            reply(Reply::Failed(e.to_string()));
            None
        }
    }
}

fn measured_figures(probe: &Probe, seconds: f64) -> Measured {
    use stageplan::units::{format_bandwidth, format_bytes, format_compute};
    let adapter = &probe.adapter;
    let mut said = vec![format!(
        "This browser's GPU reads {} and computes {} (f32 matrix multiply).",
        format_bandwidth(probe.bandwidth.median),
        format_compute(probe.compute_f32.median)
    )];
    if adapter.software {
        said.push("This is a software adapter — the CPU standing in for a GPU — so these are not a GPU's figures; a browser with GPU access measures the real one.".into());
    }
    if probe.memory.source == "max_buffer_size" {
        said.push(format!(
            "WebGPU does not tell a device's memory: {} is only the largest buffer it allows. Set the machine's memory to what the device has after adding it.",
            format_bytes(probe.memory.bytes as f64)
        ));
    }
    Measured {
        said,
        adapter: format!("{} ({}, {})", adapter.name, adapter.backend, adapter.device_type),
        memory_bytes: probe.memory.bytes,
        bandwidth: probe.bandwidth.median,
        bandwidth_spread: probe.bandwidth.spread,
        compute_f32: probe.compute_f32.median,
        compute_f32_spread: probe.compute_f32.spread,
        compute_f16: probe.compute_f16.as_ref().map(|m| m.median),
        compute: probe.compute(),
        max_buffer_size: adapter.limits.max_buffer_size,
        max_storage_buffer_binding_size: adapter.limits.max_storage_buffer_binding_size,
        seconds,
    }
}

/// Runs a small MLP split as the plan splits the model — one WebGPU device per stage —
/// checked against the CPU, with each stage's time predicted from `probe`.
async fn run_sharded(probe: Probe, layers: usize, stages: &[(String, [usize; 2])], reply: &dyn Fn(Reply)) {
    let gpu = Gpu::new();
    let mut contexts = Vec::with_capacity(stages.len());
    for _ in stages {
        match gpu.open(0).await {
            Ok(context) => contexts.push(context),
            Err(e) => return reply(Reply::Failed(e.to_string())),
        }
    }
    let spec = MlpSpec { width: 64, layers, tokens: 32, micro_batches: 4, seed: 7 };
    let specs: Vec<StageSpec> = stages
        .iter()
        .enumerate()
        .map(|(device, (node, range))| StageSpec { node: node.clone(), device, layers: range[0]..range[1] })
        .collect();
    let probes = vec![probe; specs.len()];
    let predicted = stageplan_gpu::predict(&spec, &specs, &probes);
    let report = match sharded::run_sharded(&contexts, &[specs], &spec, &mut RoundRobin::new(1), Some(&predicted)).await
    {
        Ok(report) => report,
        Err(e) => return reply(Reply::Failed(e.to_string())),
    };
    reply(Reply::Sharded(ShardedRun {
        stages: report
            .stages
            .iter()
            .map(|s| StageRun {
                node: s.node.clone(),
                layers: s.layers,
                predicted_s: s.predicted_s,
                measured_s: s.measured_s,
                ratio: s.ratio,
            })
            .collect(),
        summary: format!(
            "The plan's split, run on this GPU: a small stand-in model ({} layers of width {}) cut where the plan cuts, each stage on its own WebGPU device, {} micro-batches of {} rows passed along the pipeline and checked against the CPU (largest relative error {:.1e}); {:.0} rows/s. Each stage's time is below, against what the planner predicted from the measurement.",
            spec.layers, spec.width, spec.micro_batches, spec.tokens, report.max_error, report.tokens_per_s
        ),
    }));
}
