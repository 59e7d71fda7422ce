//! The same machines across weight formats, context lengths and counts of users: a table
//! and two charts, each point a plan, made in the page's worker ([`crate::sweeps`]) while the panel is open — so
//! an edit re-plans once on the page, and the drawing code is not in its download.

use leptos::prelude::*;

use crate::planning::Computed;
use crate::state::AppState;
use crate::worker::{PageWorker, Reply, Request};

/// Weight formats (fits?, one user's tok/s, size, longest context), tok/s and memory
/// against context length, and users of one llama-server against their p95 latency; asked
/// for again on every edit while open.
#[component]
pub fn SweepsPanel(
    state: RwSignal<AppState>,
    computed: Memo<Computed>,
    worker: StoredValue<PageWorker, LocalStorage>,
) -> impl IntoView {
    let open = RwSignal::new(false);
    // The request waited for (0: none) and the last markup (or why there is none).
    let waiting = RwSignal::new(0_u64);
    let html = RwSignal::new(String::new());
    let failed = RwSignal::new(String::new());
    worker.with_value(|w| {
        w.answers(waiting, move |reply| {
            match reply {
                Reply::Swept(markup) => {
                    html.set(markup.clone());
                    failed.set(String::new());
                }
                Reply::Failed(why) => failed.set(why.clone()),
                _ => return false,
            }
            true
        });
    });
    Effect::new(move |_| {
        // Once per plan while open: the plan's memo changes only when the inputs do.
        let plans = computed.with(|c| c.result.is_ok());
        if !open.get() || !plans {
            return;
        }
        let (scenario, enabled) = state.with_untracked(|s| (s.scenario_json().to_string(), s.enabled()));
        waiting.set(worker.with_value(|w| w.send(Request::Sweeps { scenario, enabled })));
    });
    let toggle = move |ev: leptos::ev::Event| open.set(event_target::<web_sys::HtmlDetailsElement>(&ev).open());
    view! {
        <details class="panel sweeps" id="sweeps" on:toggle=toggle>
            <summary><h2>"Weight formats, context lengths and users"</h2>
                <span class="hint">"the same machines, each point planned"</span></summary>
            <p class="hint" aria-live="polite">{move || if waiting.get() != 0 { "planning every format, context and count of users…".to_owned() } else { failed.get() }}</p>
            <div id="sweeps-body" inner_html=move || html.get()></div>
        </details>
    }
}
