//! The page: inputs on the left, the plan on the right, re-planned on every edit.

use leptos::prelude::*;
use stageplan::Plan;

use crate::files::Dropped;
use crate::state::{AppState, ModelSource};
use crate::ui::{ClusterPanel, DevicePanel, ExportPanel, ModelPanel, PlanPanel, SharePanel};
use crate::view_model::{PlanView, plan_view};
use crate::worker::PageWorker;

/// A planned state, or why it cannot be planned.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub plan: Plan,
    pub view: PlanView,
    pub layers: usize,
    pub model: String,
    /// What the exports need beyond the plan (each machine's kind, from its preset).
    pub export_options: stageplan::export::ExportOptions,
}

/// The last planning and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub result: Result<Outcome, String>,
    pub millis: f64,
}

/// Plans `state` (with a dropped model file, if that is the model).
///
/// # Errors
/// The scenario's first problem, worded as the CLI words it.
pub fn compute(state: &AppState, dropped: Option<&Dropped>) -> Result<Outcome, String> {
    let scenario = state.scenario()?;
    let problem = match (state.model.source, dropped) {
        (ModelSource::File, Some(file)) => scenario.problem_with_model(file.model.clone()),
        (ModelSource::File, None) => {
            return Err("drop a model file (.gguf, .safetensors, model.safetensors.index.json) to plan it".into());
        }
        _ => scenario.problem(),
    }
    .map_err(|e| e.to_string())?;
    let plan = stageplan::plan_enabled(&problem, &state.enabled());
    let names: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    let index = |name: &str| names.iter().position(|n| *n == name).unwrap_or(0);
    let layers = problem.model.num_layers();
    let view = plan_view(&plan, layers, &index);
    Ok(Outcome {
        plan,
        view,
        layers,
        model: format!("{} · {}", problem.model.name, problem.model.weights),
        export_options: stageplan::export::ExportOptions::for_problem(&problem),
    })
}

/// Milliseconds since the page loaded (0 off the browser).
pub fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// The state the page opens with: from the share link in the URL, else the default.
fn initial_state() -> (AppState, Option<String>) {
    let hash = web_sys::window().and_then(|w| w.location().hash().ok()).unwrap_or_default();
    if hash.trim_start_matches('#').is_empty() {
        return (AppState::default(), None);
    }
    match AppState::from_fragment(&hash) {
        Ok(state) => (state.with_unique_ids(), None),
        Err(e) => (AppState::default(), Some(format!("{e}. Showing the example instead."))),
    }
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let (initial, problem) = initial_state();
    let state = RwSignal::new(initial);
    let dropped: RwSignal<Option<Dropped>> = RwSignal::new(None);
    let notice: RwSignal<Option<String>> = RwSignal::new(problem);
    // Device measurements and exports: started on first use (see `worker`).
    let worker = StoredValue::new_local(PageWorker::default());
    let computed = Memo::new(move |_| {
        let started = now_ms();
        let result = state.with(|s| dropped.with(|d| compute(s, d.as_ref())));
        Computed { result, millis: now_ms() - started }
    });
    view! {
        <header class="top">
            <h1>"stageplan"</h1>
            <p class="tagline">"Split a large model across the machines you have — the best split, computed in your browser. Nothing leaves this page."</p>
        </header>
        {move || notice.get().map(|text| view! {
            <div id="notice" class="notice" role="alert">
                <span>{text}</span>
                <button type="button" aria-label="dismiss" on:click=move |_| notice.set(None)>"×"</button>
            </div>
        })}
        <main class="layout">
            <section class="inputs" aria-label="scenario">
                <ModelPanel state=state dropped=dropped notice=notice/>
                <ClusterPanel state=state/>
            </section>
            <section class="results" aria-label="plan">
                <PlanPanel state=state computed=computed/>
                <DevicePanel state=state computed=computed worker=worker/>
                <ExportPanel computed=computed worker=worker/>
                <SharePanel state=state computed=computed notice=notice/>
            </section>
        </main>
        <footer class="bottom">
            <p>"stageplan · the same planner as the CLI, compiled to WebAssembly · "
                <a href="https://github.com/stageplan/stageplan">"source"</a></p>
        </footer>
    }
}
