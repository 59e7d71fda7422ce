//! The page's worker: what the page does not need to show a plan — measuring this device
//! with WebGPU, running the plan as kernels, the engine exports — runs in a dedicated
//! worker, built as its own wasm (`src/bin/worker.rs`) and fetched the first time the reader
//! asks for one of them.
//!
//! Two reasons. The page then downloads only what planning needs (wgpu, the kernels and
//! the exporters are a quarter of the code), so the first plan is on screen sooner. And the
//! probe's timed loops and the sharded run's CPU check never block the page's thread: the
//! plan stays editable while the device is measured.
//!
//! The messages are JSON text ([`Request`] in, [`Reply`] out), defined once for both sides;
//! a reply the page cannot read becomes an error message, not a crash. The page's side
//! ([`PageWorker`]) starts the worker on the first request, queues requests until the
//! worker says it is ready, and hands every reply to the components that listen.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use stageplan::Plan;
use stageplan::export::{Export, ExportOptions, Target};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// The worker's loader, next to the page (Trunk's `data-loader-shim` for the
/// `stageplan-worker` binary).
pub const LOADER: &str = "./stageplan-worker_loader.js";

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
    /// What `stageplan export --to target` prints for `plan`; `id` comes back with the
    /// answer, so a page that asked again meanwhile can drop a stale one.
    Export { id: u64, plan: Box<Plan>, target: Target, options: ExportOptions },
}

/// A device as the probe measured it: what the page shows and plans with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Adapter name, backend and type, e.g. `SwiftShader Device (browserwebgpu, cpu)`.
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
}

/// One stage of a sharded run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageRun {
    pub node: String,
    pub layers: [usize; 2],
    pub predicted_s: Option<f64>,
    pub measured_s: f64,
    /// `measured / predicted`.
    pub ratio: Option<f64>,
}

/// What a sharded run measured and checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardedRun {
    pub stages: Vec<StageRun>,
    /// How the run was made and checked, in one sentence.
    pub summary: String,
}

/// What the worker answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The worker's wasm is loaded and it listens; sent once, first.
    Ready,
    /// A step of the running device request, for the reader.
    Progress(String),
    Probed(Measured),
    Sharded(ShardedRun),
    /// A device request failed (no WebGPU, a device error, no probe yet); the message says
    /// why.
    Failed(String),
    /// The answer to [`Request::Export`] `id`: the export, or why the plan cannot be exported.
    Exported {
        id: u64,
        result: Result<Export, String>,
    },
}

impl Reply {
    /// The reply in `text`, or a [`Reply::Failed`] that says it could not be read.
    pub fn parse(text: &str) -> Reply {
        serde_json::from_str(text).unwrap_or_else(|e| Reply::Failed(format!("the worker's answer is unreadable: {e}")))
    }
}

type Listener = Rc<dyn Fn(&Reply)>;

/// The page's side of the worker. Cheap until the first [`PageWorker::send`], which starts
/// it; every reply but [`Reply::Ready`] goes to every listener.
#[derive(Default)]
pub struct PageWorker {
    listeners: Rc<RefCell<Vec<Listener>>>,
    started: RefCell<Option<Started>>,
}

struct Started {
    worker: web_sys::Worker,
    ready: Rc<Cell<bool>>,
    queue: Rc<RefCell<Vec<String>>>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

impl std::fmt::Debug for PageWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageWorker").field("started", &self.started.borrow().is_some()).finish_non_exhaustive()
    }
}

impl PageWorker {
    /// Calls `listener` with every reply from now on.
    pub fn listen(&self, listener: impl Fn(&Reply) + 'static) {
        self.listeners.borrow_mut().push(Rc::new(listener));
    }

    /// Sends `request`: now, or once the worker has started and said it is ready. A worker
    /// that cannot start, fails to load or stops answers [`Reply::Failed`].
    pub fn send(&self, request: &Request) {
        let message = serde_json::to_string(request).unwrap_or_default();
        if self.started.borrow().is_none() {
            match start(LOADER, self.listeners.clone()) {
                Ok(worker) => *self.started.borrow_mut() = Some(worker),
                Err(message) => return broadcast(&self.listeners, &Reply::Failed(message)),
            }
        }
        if let Some(started) = self.started.borrow().as_ref() {
            if started.ready.get() {
                post(&started.worker, &message, &self.listeners);
            } else {
                started.queue.borrow_mut().push(message);
            }
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.worker.terminate();
    }
}

fn start(loader: &str, listeners: Rc<RefCell<Vec<Listener>>>) -> Result<Started, String> {
    let options = web_sys::WorkerOptions::new();
    options.set_type(web_sys::WorkerType::Module);
    let worker = web_sys::Worker::new_with_options(loader, &options)
        .map_err(|e| format!("this browser cannot start the page's worker: {}", describe(&e)))?;
    let ready = Rc::new(Cell::new(false));
    let queue: Rc<RefCell<Vec<String>>> = Rc::default();
    let on_message = {
        let (worker, ready, queue, listeners) = (worker.clone(), ready.clone(), queue.clone(), listeners.clone());
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            match Reply::parse(&event.data().as_string().unwrap_or_default()) {
                Reply::Ready => {
                    ready.set(true);
                    for message in queue.borrow_mut().drain(..) {
                        post(&worker, &message, &listeners);
                    }
                }
                reply => broadcast(&listeners, &reply),
            }
        })
    };
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
        let detail = event.dyn_ref::<web_sys::ErrorEvent>().map(web_sys::ErrorEvent::message).unwrap_or_default();
        let detail = if detail.is_empty() { "it did not load".to_owned() } else { detail };
        broadcast(&listeners, &Reply::Failed(format!("the page's worker stopped: {detail}")));
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Ok(Started { worker, ready, queue, _on_message: on_message, _on_error: on_error })
}

/// Hands `reply` to every listener (a copy of the list: a listener may add another).
fn broadcast(listeners: &RefCell<Vec<Listener>>, reply: &Reply) {
    let listeners: Vec<Listener> = listeners.borrow().clone();
    for listener in listeners {
        listener(reply);
    }
}

fn post(worker: &web_sys::Worker, message: &str, listeners: &RefCell<Vec<Listener>>) {
    if let Err(e) = worker.post_message(&JsValue::from_str(message)) {
        broadcast(listeners, &Reply::Failed(format!("the page's worker refused a request: {}", describe(&e))));
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
    fn messages_round_trip_and_garbage_is_a_failure() {
        let replies = [
            Reply::Ready,
            Reply::Progress("measuring bandwidth…".into()),
            Reply::Exported { id: 3, result: Err("the plan is empty".into()) },
            Reply::Sharded(ShardedRun {
                stages: vec![StageRun {
                    node: "a".into(),
                    layers: [0, 4],
                    predicted_s: None,
                    measured_s: 0.5,
                    ratio: None,
                }],
                summary: "ok".into(),
            }),
        ];
        for reply in replies {
            assert_eq!(Reply::parse(&serde_json::to_string(&reply).unwrap()), reply);
        }
        assert!(matches!(Reply::parse("{\"probed\": 3}"), Reply::Failed(m) if m.contains("unreadable")));
        assert!(matches!(Reply::parse(""), Reply::Failed(_)));
        let request = Request::Sharded { layers: 4, stages: vec![("a".into(), [0, 4])] };
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), request);
    }
}
