//! The page: inputs on the left, the plan on the right, re-planned on every edit.

use std::sync::Arc;

use leptos::prelude::*;

use crate::planning::{CONFIGS_KEPT, Computed, Outcome, compute, inline_configs, now_ms};
use crate::state::AppState;
use crate::ui::{ClusterPanel, DevicePanel, ExportPanel, ModelPanel, PlanPanel, SharePanel, SweepsPanel};
use crate::worker::{ConfigRead, Dropped, PageWorker, Reply, Request};

/// Where the last session is kept between visits.
const SESSION_KEY: &str = "stageplan.session";

/// How long the page waits after an edit before writing the URL and the saved session.
const SAVE_AFTER: std::time::Duration = std::time::Duration::from_millis(300);

fn local_storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok()?
}

/// The state the page opens with: from the share link in the URL, else the last session
/// kept in this browser, else the example.
fn initial_state() -> (AppState, Option<String>) {
    let hash = web_sys::window().and_then(|w| w.location().hash().ok()).unwrap_or_default();
    if hash.trim_start_matches('#').is_empty() {
        let saved = local_storage().and_then(|s| s.get_item(SESSION_KEY).ok()?);
        let state = saved.and_then(|fragment| AppState::from_fragment(&fragment).ok());
        return (state.map_or_else(AppState::default, AppState::with_unique_ids), None);
    }
    match AppState::from_fragment(&hash) {
        Ok(state) => (state.with_unique_ids(), None),
        Err(e) => (AppState::default(), Some(format!("{e}. Showing the example instead."))),
    }
}

/// Keeps the URL and the saved session on the state: each edit, once the typing pauses,
/// replaces the URL's fragment (no history entry per keystroke) and the saved session.
fn follow_edits(state: RwSignal<AppState>) {
    let pending: StoredValue<Option<TimeoutHandle>, LocalStorage> = StoredValue::new_local(None);
    Effect::new(move |first: Option<()>| {
        let fragment = state.with(AppState::to_fragment);
        if first.is_none() {
            return;
        }
        if let Some(handle) = pending.get_value() {
            handle.clear();
        }
        let save = move || {
            if let Some(history) = web_sys::window().and_then(|w| w.history().ok()) {
                let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("#{fragment}")));
            }
            if let Some(storage) = local_storage() {
                let _ = storage.set_item(SESSION_KEY, &fragment);
            }
        };
        pending.set_value(set_timeout_with_handle(save, SAVE_AFTER).ok());
    });
}

/// Asks the worker to read each inline config the scenario holds that it has not read (its
/// reader is not in the page's download), keeping what it answers in `configs`.
fn read_configs(
    state: RwSignal<AppState>,
    configs: RwSignal<Vec<ConfigRead>>,
    worker: StoredValue<PageWorker, LocalStorage>,
) {
    worker.with_value(|w| {
        w.listen(move |_, reply| {
            if let Reply::ConfigRead(read) = reply {
                configs.update(|kept| {
                    kept.push((**read).clone());
                    let over = kept.len().saturating_sub(CONFIGS_KEPT);
                    kept.drain(..over);
                });
            }
        });
    });
    let asked: StoredValue<Vec<String>, LocalStorage> = StoredValue::new_local(Vec::new());
    Effect::new(move |_| {
        let texts = state.with(|s| s.scenario().map(|scenario| inline_configs(&scenario)).unwrap_or_default());
        for text in texts {
            if asked.with_value(|a| a.contains(&text)) || configs.with_untracked(|c| c.iter().any(|r| r.text == text)) {
                continue;
            }
            asked.update_value(|a| {
                a.push(text.clone());
                let over = a.len().saturating_sub(CONFIGS_KEPT);
                a.drain(..over);
            });
            worker.with_value(|w| w.send(Request::ReadConfig { text }));
        }
    });
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let (initial, problem) = initial_state();
    let state = RwSignal::new(initial);
    follow_edits(state);
    // The models read from files dropped on the page (the model's, a draft's).
    let dropped: RwSignal<Vec<Dropped>> = RwSignal::new(Vec::new());
    let notice: RwSignal<Option<String>> = RwSignal::new(problem);
    // Device measurements and exports: started on first use (see `worker`).
    let worker = StoredValue::new_local(PageWorker::default());
    // Inline configs the worker read (see `read_configs`).
    let configs: RwSignal<Vec<ConfigRead>> = RwSignal::new(Vec::new());
    read_configs(state, configs, worker);
    // Each edit plans anew, and each planning is news (its time differs, if nothing else): no
    // comparison of plans, whose code weighed about 1 KB gzip of the page's download.
    let computed = Memo::new_with_compare(
        move |_| {
            let started = now_ms();
            let result = state.with(|s| dropped.with(|d| configs.with(|c| compute(s, d, c)))).map(Arc::new);
            Computed { result, millis: now_ms() - started }
        },
        |_, _| true,
    );
    // What is wrong with the input, shown at its field; the last plan that planned stays on
    // screen, dimmed, until it is fixed (the same plan: nothing is drawn or announced again).
    let problem = Memo::new(move |_| computed.with(|c| c.result.as_ref().err().cloned()));
    let shown: Memo<Option<Arc<Outcome>>> = Memo::new_with_compare(
        move |last: Option<&Option<Arc<Outcome>>>| {
            computed.with(|c| c.result.as_ref().ok().cloned()).or_else(|| last.cloned().flatten())
        },
        |old, new| !matches!((old, new), (Some(Some(old)), Some(Some(new))) if Arc::ptr_eq(old, new)),
    );
    view! {
        <header class="top">
            <h1>"stageplan"</h1>
            <p class="tagline">"Split a large model across the machines you have — the best split, computed in your browser. Nothing leaves this page."</p>
        </header>
        {move || notice.get().map(|text| view! {
            <div id="notice" class="notice" role="alert">
                <span>{crate::ui::prose(&text)}</span>
                <button type="button" aria-label="dismiss" on:click=move |_| notice.set(None)>"×"</button>
            </div>
        })}
        <main class="layout">
            <section class="inputs" aria-label="scenario">
                <ModelPanel state=state dropped=dropped notice=notice worker=worker problem=problem/>
                <ClusterPanel state=state problem=problem notice=notice worker=worker/>
            </section>
            <section class="results" aria-label="plan">
                <PlanPanel state=state computed=computed shown=shown problem=problem/>
                <SweepsPanel state=state computed=computed worker=worker/>
                <ExportPanel computed=computed worker=worker/>
                <DevicePanel state=state computed=computed worker=worker/>
                <SharePanel state=state computed=computed notice=notice/>
            </section>
        </main>
        <footer class="bottom">
            <p>"stageplan · the same planner as the CLI, compiled to WebAssembly · "
                <a href="https://github.com/stageplan/stageplan">"source"</a></p>
        </footer>
    }
}
