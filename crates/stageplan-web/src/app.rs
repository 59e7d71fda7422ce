//! The page: inputs on the left, the plan on the right, re-planned on every edit.

use leptos::prelude::*;

use crate::files::Dropped;
use crate::planning::{Computed, compute, now_ms};
use crate::state::AppState;
use crate::ui::{ClusterPanel, DevicePanel, ExportPanel, ModelPanel, PlanPanel, SharePanel};
use crate::worker::PageWorker;

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
