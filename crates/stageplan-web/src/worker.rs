//! The page's worker: what the page does not need to show a plan — measuring this device
//! with WebGPU, running the plan as kernels, the engine exports, reading a dropped model
//! file's header — runs in a dedicated worker, built as its own wasm (`src/bin/worker.rs`)
//! and fetched the first time the reader asks for one of them.
//!
//! Two reasons. The page then downloads only what planning needs (wgpu, the kernels, the
//! exporters and the model-file parsers are a quarter of the code), so the first plan is
//! on screen sooner. And the probe's timed loops and the sharded run's CPU check never
//! block the page's thread: the plan stays editable while the device is measured.
//!
//! The messages are JSON text, defined once for both sides: an [`Asked`] (a [`Request`] and
//! its id) in, an [`Answer`] (a [`Reply`] and the id it answers) out. A request that comes
//! with files ([`Request::ReadModel`], [`Request::Calibrate`]) is posted as an array: its JSON text, then the files
//! (a `File` crosses to a worker as a handle; its bytes are read there, a slice at a time). An answer without an id
//! is about the worker itself — it did not load, or it stopped — and concerns every request
//! still waiting. A message the page cannot read becomes an error message, not a crash.
//! The page's side ([`PageWorker`]) starts the worker on the first request, queues requests
//! until the worker says it is ready, hands every answer to the components that listen,
//! and starts a fresh worker after one failed.
//!
//! The worker's script is served with its own Content-Security-Policy (a page's `<meta>`
//! policy does not reach a worker): see `WORKER_CSP` in `cargo xtask serve`.

mod answer;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use stageplan::export::{Export, ExportOptions, Target};
use stageplan::model::Transformer;
use stageplan::{Model, ModelError, Plan};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// The worker's loader (Trunk's `data-loader-shim` for the `stageplan-worker` binary),
/// relative to the page's URL: Trunk writes it next to `index.html`.
pub const LOADER: &str = "./stageplan-worker_loader.js";

/// A request and the id its answer will carry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    pub id: u64,
    pub request: Request,
}

/// A reply and the request it answers; no id: about the worker itself. Written by the
/// derived `Serialize`, read by hand (`worker/answer.rs`): no derived `Deserialize` on a
/// first plan's road.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub id: Option<u64>,
    pub reply: Reply,
}

impl Answer {
    /// The answer in `text`, or a failure of the worker that says it could not be read.
    pub fn parse(text: &str) -> Answer {
        answer::answer(text)
    }
}

/// What the page asks the worker to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Find a WebGPU adapter and measure it; the worker keeps the result for `Sharded`.
    Probe,
    /// Run the plan's stages as MLP kernels, one WebGPU device per stage, each stage's time
    /// predicted from the last probe.
    Sharded {
        /// The model's layer count; `stages` cover `0..layers`.
        layers: usize,
        /// Each stage's node name and layer range `[start, end)`, in pipeline order.
        stages: Vec<(String, [usize; 2])>,
    },
    /// What `stageplan export --to target` prints for `plan`.
    Export { plan: Box<Plan>, target: Target, options: ExportOptions },
    /// The model in the files posted with the request, read by their headers only.
    ReadModel,
    /// The weight-format table and the context chart (see [`crate::sweeps`]) for a
    /// scenario's JSON on the enabled machines, a file it names answered with the one the
    /// worker read of that name (it keeps them, so the page never sends a model back).
    Sweeps { scenario: String, enabled: Vec<bool> },
    /// The llama-bench results posted with the request (`llama-bench -o json` or `jsonl`)
    /// fitted to a machine, as `stageplan calibrate` fits them: `node` is its scenario
    /// node's JSON (`device`, or its figures).
    Calibrate { node: String },
    /// An inline `config.json` (a scenario's `model.config` or `model.draft.config`, its
    /// JSON text) read into its transformer: the reader is not in the page's download.
    ReadConfig { text: String },
}

/// An inline `config.json` and what it reads as: its transformer, or what it gets wrong.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigRead {
    /// The config's JSON text, as the scenario holds it.
    pub text: String,
    pub transformer: Option<Transformer>,
    /// [`ModelError`]'s variant (`config`, `invalid`, `unsupported`) and its two texts.
    pub error: Option<(String, String, String)>,
}

impl ConfigRead {
    /// What reading `text` gave.
    pub fn of(text: String, read: Result<Transformer, ModelError>) -> ConfigRead {
        let (transformer, error) = match read {
            Ok(transformer) => (Some(transformer), None),
            Err(ModelError::Config { field, message }) => (None, Some(("config".into(), field, message))),
            Err(ModelError::Invalid { field, problem }) => (None, Some(("invalid".into(), field, problem))),
            Err(ModelError::Unsupported { what, fix }) => (None, Some(("unsupported".into(), what, fix))),
            // A config names no preset and no weight format.
            Err(other) => (None, Some(("invalid".into(), String::new(), other.to_string()))),
        };
        ConfigRead { text, transformer, error }
    }

    /// The transformer, or the error the core's reader gave.
    pub fn result(&self) -> Result<Transformer, ModelError> {
        match (&self.transformer, &self.error) {
            (Some(transformer), _) => Ok(transformer.clone()),
            (None, Some((kind, a, b))) => Err(match kind.as_str() {
                "config" => ModelError::Config { field: a.clone(), message: b.clone() },
                "unsupported" => ModelError::Unsupported { what: a.clone(), fix: b.clone() },
                _ => ModelError::Invalid { field: a.clone(), problem: b.clone() },
            }),
            (None, None) => Err(ModelError::Invalid { field: String::new(), problem: "could not be read".into() }),
        }
    }
}

/// A machine fitted to its own llama-bench results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibrated {
    /// The machine's name, as the request's node had it.
    pub node: String,
    /// What the fit adds to its scenario node, as JSON text: `backend` and `efficiency`.
    pub fit: String,
    /// What was fitted, in a sentence.
    pub said: String,
}

/// A model read from dropped files, and what reading it cost.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dropped {
    pub model: Model,
    /// The files' names, in the order they were dropped.
    pub names: Vec<String>,
    pub bytes_read: u64,
    pub file_bytes: u64,
}

impl Dropped {
    /// Models the page keeps: the model's and a draft's, with room to spare.
    pub const KEPT: usize = 4;

    /// The names as a scenario's `file` field holds them.
    pub fn file(&self) -> String {
        self.names.join(", ")
    }

    /// Whether these are the files a scenario names `file`: the names as the page writes
    /// them, or a path whose last part is one of them (an imported scenario's).
    pub fn is(&self, file: &str) -> bool {
        let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
        file == self.file() || self.names.iter().any(|n| n == base)
    }

    /// `kept` with `read` added last, replacing a read of the same files, the oldest dropped
    /// beyond [`Dropped::KEPT`].
    pub fn keep(kept: &mut Vec<Dropped>, read: Dropped) {
        kept.retain(|d| d.names != read.names);
        kept.push(read);
        let over = kept.len().saturating_sub(Dropped::KEPT);
        kept.drain(..over);
    }
}

/// A device as the probe measured it: what the page shows and plans with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measured {
    /// Adapter name, backend and type, e.g. `BrowserWebGpu adapter (browserwebgpu, cpu)`.
    pub adapter: String,
    pub memory_bytes: u64,
    /// Median bytes/s of the STREAM triad, and its spread `(max − min) / median`.
    pub bandwidth: f64,
    pub bandwidth_spread: f64,
    /// Median f32 matmul FLOP/s and its spread.
    pub compute_f32: f64,
    pub compute_f32_spread: f64,
    /// Median f16 matmul FLOP/s, where the device has `shader-f16`.
    pub compute_f16: Option<f64>,
    /// The best rate measured: what a node made from this device plans with.
    pub compute: f64,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    /// How long the probe took.
    pub seconds: f64,
    /// What the reader is told, worded in the worker (the page only shows it): the
    /// measurement in a sentence, then warnings (a software adapter, memory WebGPU cannot tell).
    pub said: Vec<String>,
}

/// One stage of a sharded run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageRun {
    pub node: String,
    pub layers: [usize; 2],
    pub predicted_s: Option<f64>,
    pub measured_s: f64,
    /// `measured / predicted`.
    pub ratio: Option<f64>,
}

/// What a sharded run measured and checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShardedRun {
    pub stages: Vec<StageRun>,
    /// How the run was made and checked, in one sentence.
    pub summary: String,
}

/// What the worker answers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The worker's wasm is loaded and it listens; sent once, first.
    Ready,
    /// A step of a running device request, for the reader.
    Progress(String),
    Probed(Measured),
    Sharded(ShardedRun),
    Exported(Export),
    ModelRead(Box<Dropped>),
    ConfigRead(Box<ConfigRead>),
    Calibrated(Calibrated),
    /// The sweeps' markup, escaped, to set in place.
    Swept(String),
    /// The request failed (no WebGPU, a device error, no probe yet, a plan that cannot be
    /// exported) — or, in an answer without an id, the worker did; the message says why.
    Failed(String),
}

type Listener = Rc<dyn Fn(Option<u64>, &Reply)>;
type Slot = Rc<RefCell<Option<Started>>>;

/// The page's side of the worker. Cheap until the first [`PageWorker::send`], which starts
/// it; every answer but the worker's [`Reply::Ready`] goes to every listener.
#[derive(Default)]
pub struct PageWorker {
    listeners: Rc<RefCell<Vec<Listener>>>,
    started: Slot,
    last_id: Cell<u64>,
}

struct Started {
    worker: web_sys::Worker,
    ready: Rc<Cell<bool>>,
    queue: Rc<RefCell<Vec<JsValue>>>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

impl std::fmt::Debug for PageWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageWorker").field("started", &self.started.borrow().is_some()).finish_non_exhaustive()
    }
}

impl PageWorker {
    /// Calls `listener` with every answer from now on: the id of the request it answers
    /// (none: about the worker itself) and the reply.
    pub fn listen(&self, listener: impl Fn(Option<u64>, &Reply) + 'static) {
        self.listeners.borrow_mut().push(Rc::new(listener));
    }

    /// Calls `answer` with each reply to the request `waiting` holds (0: none is waited for)
    /// and with the worker's own failures meanwhile; when `answer` says a reply settles the
    /// request (progress does not), the wait ends and `waiting` is 0 again.
    pub fn answers(&self, waiting: leptos::prelude::RwSignal<u64>, answer: impl Fn(&Reply) -> bool + 'static) {
        use leptos::prelude::{GetUntracked, Set};
        self.listen(move |id, reply| {
            let asked = waiting.get_untracked();
            if asked != 0 && id.is_none_or(|id| id == asked) && answer(reply) {
                waiting.set(0);
            }
        });
    }

    /// Sends `request` — now, or once the worker has started and said it is ready — and
    /// returns the id its answer will carry. Answers always come later, never during this
    /// call. A worker that cannot start, fails to load or stops answers a failure without
    /// an id; the next request starts a fresh one.
    pub fn send(&self, request: Request) -> u64 {
        self.send_with_files(request, &[])
    }

    /// [`PageWorker::send`], with files the request reads ([`Request::ReadModel`],
    /// [`Request::Calibrate`]).
    pub fn send_with_files(&self, request: Request, files: &[web_sys::File]) -> u64 {
        let id = self.last_id.get() + 1;
        self.last_id.set(id);
        // Pretty, like the plan the page shows: one serializer for a plan, not two (2.2 KB
        // gzip of page).
        let text = JsValue::from_str(&serde_json::to_string_pretty(&Asked { id, request }).unwrap_or_default());
        let message = if files.is_empty() {
            text
        } else {
            let array = js_sys::Array::of1(&text);
            for file in files {
                array.push(file);
            }
            array.into()
        };
        if self.started.borrow().is_none() {
            match start(LOADER, self.started.clone(), self.listeners.clone()) {
                Ok(worker) => *self.started.borrow_mut() = Some(worker),
                Err(failure) => {
                    let listeners = self.listeners.clone();
                    wasm_bindgen_futures::spawn_local(async move {
                        broadcast(&listeners, Some(id), &Reply::Failed(failure));
                    });
                    return id;
                }
            }
        }
        if let Some(started) = self.started.borrow().as_ref() {
            started.queue.borrow_mut().push(message);
            if started.ready.get() {
                flush(&started.worker, &started.queue, &self.listeners);
            }
        }
        id
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // No answer may reach a handler that is about to be freed.
        self.worker.set_onmessage(None);
        self.worker.set_onerror(None);
        self.worker.terminate();
    }
}

fn start(loader: &str, slot: Slot, listeners: Rc<RefCell<Vec<Listener>>>) -> Result<Started, String> {
    let options = web_sys::WorkerOptions::new();
    options.set_type(web_sys::WorkerType::Module);
    let worker = web_sys::Worker::new_with_options(loader, &options)
        .map_err(|e| format!("this browser cannot start the page's worker: {}", describe(&e)))?;
    let ready = Rc::new(Cell::new(false));
    let queue: Rc<RefCell<Vec<JsValue>>> = Rc::default();
    let on_message = {
        let (worker, ready, queue, listeners) = (worker.clone(), ready.clone(), queue.clone(), listeners.clone());
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let answer = Answer::parse(&event.data().as_string().unwrap_or_default());
            if answer == (Answer { id: None, reply: Reply::Ready }) {
                ready.set(true);
                flush(&worker, &queue, &listeners);
            } else {
                broadcast(&listeners, answer.id, &answer.reply);
            }
        })
    };
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
        let detail = event.dyn_ref::<web_sys::ErrorEvent>().map(web_sys::ErrorEvent::message).unwrap_or_default();
        let detail = if detail.is_empty() { "it did not load".to_owned() } else { detail };
        // Whatever was asked is lost: drop this worker (after this handler returns, since
        // the handler is part of it), so the next request starts a fresh one.
        let failed = slot.borrow_mut().take();
        wasm_bindgen_futures::spawn_local(async move { drop(failed) });
        broadcast(&listeners, None, &Reply::Failed(format!("the page's worker failed: {detail}")));
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Ok(Started { worker, ready, queue, _on_message: on_message, _on_error: on_error })
}

/// Hands an answer to every listener (a copy of the list: a listener may add another).
fn broadcast(listeners: &RefCell<Vec<Listener>>, id: Option<u64>, reply: &Reply) {
    let listeners: Vec<Listener> = listeners.borrow().clone();
    for listener in listeners {
        listener(id, reply);
    }
}

/// Posts every queued request to a ready worker; a refusal is answered later, like any
/// failure of the worker.
fn flush(worker: &web_sys::Worker, queue: &RefCell<Vec<JsValue>>, listeners: &Rc<RefCell<Vec<Listener>>>) {
    for message in queue.borrow_mut().drain(..) {
        if let Err(e) = worker.post_message(&message) {
            let (listeners, failure) =
                (listeners.clone(), format!("the page's worker refused a request: {}", describe(&e)));
            wasm_bindgen_futures::spawn_local(async move { broadcast(&listeners, None, &Reply::Failed(failure)) });
        }
    }
}

/// A thrown JS value as text.
fn describe(value: &JsValue) -> String {
    value
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| value.as_string())
        .unwrap_or_else(|| "unknown error".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_a_failure_of_the_worker() {
        let answers = [
            Answer { id: None, reply: Reply::Ready },
            Answer { id: Some(2), reply: Reply::Progress("measuring bandwidth…".into()) },
            Answer { id: Some(3), reply: Reply::Failed("the plan is empty".into()) },
            Answer {
                id: Some(4),
                reply: Reply::Sharded(ShardedRun {
                    stages: vec![StageRun {
                        node: "a".into(),
                        layers: [0, 4],
                        predicted_s: None,
                        measured_s: 0.5,
                        ratio: None,
                    }],
                    summary: "ok".into(),
                }),
            },
        ];
        for answer in answers {
            assert_eq!(Answer::parse(&serde_json::to_string(&answer).unwrap()), answer);
        }
        for garbage in ["", "{\"id\": 1, \"reply\": {\"probed\": 3}}", "[1]"] {
            let answer = Answer::parse(garbage);
            assert!(answer.id.is_none() && matches!(&answer.reply, Reply::Failed(m) if m.contains("unreadable")));
        }
        let asked = Asked { id: 9, request: Request::Sharded { layers: 4, stages: vec![("a".into(), [0, 4])] } };
        let text = serde_json::to_string(&asked).unwrap();
        assert_eq!(serde_json::from_str::<Asked>(&text).unwrap(), asked);
    }

    /// A plan crosses to the worker as JSON, whose floats may parse back one bit off; what
    /// the worker exports from it must still be exactly what the page's plan exports.
    #[test]
    fn exports_of_a_plan_that_crossed_to_the_worker_are_unchanged() {
        let scenario =
            stageplan::Scenario::from_json(include_str!("../../../tests/export/home-70b/scenario.json")).unwrap();
        let mut plan: Plan =
            stageplan::plan(&stageplan::check(scenario.clone(), stageplan::check::no_model_files).unwrap().problem);
        let options = ExportOptions::default();
        let mut x = 1.234_567_890_123_456_7_f64;
        for _ in 0..500 {
            x = (x * 7.319).fract() * 997.0 + 1.0;
            plan.tokens_per_s = x;
            let request =
                Request::Export { plan: Box::new(plan.clone()), target: Target::Kubernetes, options: options.clone() };
            let Request::Export { plan: crossed, .. } =
                serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap()
            else {
                unreachable!()
            };
            for target in Target::ALL {
                let export = |p: &Plan| stageplan::export::export(p, target, &options).unwrap();
                assert_eq!(export(&crossed), export(&plan), "{target:?} for tokens_per_s {x:?}");
            }
        }
    }
}
