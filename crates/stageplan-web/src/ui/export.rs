//! "Use the plan": the plan as each engine takes it, with a copy button per target. The
//! exporters run in the page's worker ([`crate::worker`]), fetched when the panel is first
//! opened, so a reader who only plans never downloads them.

use std::sync::Arc;

use leptos::prelude::*;
use stageplan::export::{Export, Target};

use super::text::{as_printed, download, prose};
use crate::planning::Computed;
use crate::worker::{PageWorker, Reply, Request};

/// A tab per engine; the chosen one's text (what `stageplan export --to TARGET` prints), its
/// notes, and buttons to copy or download it. Closed until the reader opens it.
#[component]
pub fn ExportPanel(computed: Memo<Computed>, worker: StoredValue<PageWorker, LocalStorage>) -> impl IntoView {
    let open = RwSignal::new(false);
    let target = RwSignal::new(Target::LlamaCpp);
    let copied = RwSignal::new(false);
    // What to export: changes when the page plans again (or a problem's words change).
    let exportable = Memo::new_with_compare(
        move |_| computed.with(|c| c.result.as_ref().map(Arc::clone).map_err(|why| why.message.clone())),
        |old, new| match (old, new) {
            (Some(Ok(old)), Some(Ok(new))) => !Arc::ptr_eq(old, new),
            (Some(Err(old)), Some(Err(new))) => old != new,
            _ => true,
        },
    );
    // The request waited for (0: none), and the last answer, shown until the next arrives.
    let waiting = RwSignal::new(0_u64);
    let exported: RwSignal<Option<Result<Export, String>>> = RwSignal::new(None);
    worker.with_value(|w| {
        w.answers(waiting, move |reply| {
            match reply {
                Reply::Exported(export) => exported.set(Some(Ok(export.clone()))),
                Reply::Failed(why) => exported.set(Some(Err(why.clone()))),
                _ => return false,
            }
            true
        });
    });
    // Ask again whenever the plan or the target changes while the panel is open.
    Effect::new(move |_| {
        if !open.get() {
            return;
        }
        let target = target.get();
        match exportable.get() {
            Ok(outcome) => {
                let (plan, options) = (Box::new(outcome.plan.clone()), outcome.export_options.clone());
                let id = worker.with_value(|w| w.send(Request::Export { plan, target, options }));
                waiting.set(id);
            }
            Err(why) => {
                waiting.set(0);
                exported.set(Some(Err(why)));
            }
        }
    });
    let copy = move |_| {
        if let (Some(Ok(e)), Some(window)) = (exported.get_untracked(), web_sys::window()) {
            let _ = window.navigator().clipboard().write_text(&as_printed(&e.text));
            copied.set(true);
        }
    };
    let tabs = Target::ALL.map(|t| {
        view! {
            <button type="button" role="tab" class="tab" id=format!("export-tab-{}", t.name().replace('.', "-"))
                class:active=move || target.get() == t aria-selected=move || (target.get() == t).to_string()
                on:click=move |_| if target.get_untracked() != t { target.set(t); copied.set(false); }>{t.name()}</button>
        }
    });
    let toggle = move |ev: leptos::ev::Event| {
        open.set(event_target::<web_sys::HtmlDetailsElement>(&ev).open());
    };
    view! {
        <details class="panel export" id="export-panel" on:toggle=toggle>
            <summary><h2>"Use the plan"</h2>
                <span class="hint">"llama.cpp, vLLM, exo, Kubernetes, DeepSpeed, Megatron"</span></summary>
            <p class="hint">"The same split as flags and files for the engine you run, exactly as "
                <code>"stageplan export --to …"</code>" prints them."</p>
            <div class="tabs" role="tablist">{tabs}</div>
            <p id="export-waiting" class="hint" aria-live="polite" hidden=move || waiting.get() == 0>"exporting…"</p>
            {move || match exported.get() {
                None => ().into_any(),
                Some(Err(why)) => view! { <p id="export-error" class="hint">"Nothing to export: " {prose(&why)}</p> }.into_any(),
                Some(Ok(e)) => {
                    let file_name = e.file_name.clone();
                    // As `stageplan export` prints it, shown, copied and saved alike.
                    let text = as_printed(&e.text).into_owned();
                    let shown = text.clone();
                    view! {
                        <div class="row">
                            <button id="copy-export" type="button" on:click=copy>
                                {move || if copied.get() { "Copied" } else { "Copy" }}</button>
                            <button id="download-export" type="button" on:click=move |_| download(&file_name, &text)>
                                "Download " {e.file_name.clone()}</button>
                        </div>
                        <pre id="export-text" data-target=e.target.name()>{shown}</pre>
                        <ul id="export-notes" class="notes">
                            {e.notes.iter().map(|n| view! { <li>{prose(n)}</li> }).collect::<Vec<_>>()}
                        </ul>
                    }.into_any()
                }
            }}
        </details>
    }
}
