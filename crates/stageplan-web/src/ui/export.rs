//! "Use the plan": the plan as each engine takes it, with a copy button per target.

use leptos::prelude::*;
use stageplan::export::{Export, Target, export};

use super::inputs::download;
use crate::app::Computed;

/// A tab per engine; the chosen one's text (what `stageplan export --to TARGET` prints), its
/// notes, and buttons to copy or download it.
#[component]
pub fn ExportPanel(computed: Memo<Computed>) -> impl IntoView {
    let target = RwSignal::new(Target::LlamaCpp);
    let copied = RwSignal::new(false);
    let exported = Memo::new(move |_| -> Result<Export, String> {
        computed.with(|c| {
            let outcome = c.result.as_ref().map_err(Clone::clone)?;
            export(&outcome.plan, target.get(), &outcome.export_options).map_err(|e| e.to_string())
        })
    });
    let copy = move |_| {
        if let (Ok(e), Some(window)) = (exported.get_untracked(), web_sys::window()) {
            let _ = window.navigator().clipboard().write_text(&e.text);
            copied.set(true);
        }
    };
    let tabs = Target::ALL.map(|t| {
        view! {
            <button type="button" role="tab" class="tab" id=format!("export-tab-{}", t.name().replace('.', "-"))
                class:active=move || target.get() == t aria-selected=move || (target.get() == t).to_string()
                on:click=move |_| { target.set(t); copied.set(false); }>{t.name()}</button>
        }
    });
    view! {
        <section class="panel export" id="export-panel">
            <h2>"Use the plan"</h2>
            <p class="hint">"The same split as flags and files for the engine you run, exactly as "
                <code>"stageplan export --to …"</code>" prints them."</p>
            <div class="tabs" role="tablist">{tabs}</div>
            {move || match exported.get() {
                Err(why) => view! { <p id="export-error" class="hint">"Nothing to export: " {why}</p> }.into_any(),
                Ok(e) => {
                    let file_name = e.file_name.clone();
                    let text = e.text.clone();
                    view! {
                        <div class="row">
                            <button id="copy-export" type="button" on:click=copy>
                                {move || if copied.get() { "Copied" } else { "Copy" }}</button>
                            <button id="download-export" type="button" on:click=move |_| download(&file_name, &text)>
                                "Download " {e.file_name.clone()}</button>
                        </div>
                        <pre id="export-text" data-target=e.target.name()>{e.text.clone()}</pre>
                        <ul id="export-notes" class="notes">
                            {e.notes.iter().map(|n| view! { <li>{n.clone()}</li> }).collect::<Vec<_>>()}
                        </ul>
                    }.into_any()
                }
            }}
        </section>
    }
}
